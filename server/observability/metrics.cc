#include "server/observability/metrics.h"

#include <grpcpp/support/server_interceptor.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/mutex.h"
#include "dendro/version.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/methods/method.h"

namespace dendro::server {
namespace {

// grpc::StatusCode names as gRPC spells them.
const char* CodeName(int code) {
  static const char* const kNames[] = {
      "OK",           "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",     "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",    "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",          "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  return code >= 0 && code < 17 ? kNames[code] : "UNKNOWN";
}

// "/pkg.Service/Method" -> {"pkg.Service", "Method"}.
std::pair<std::string, std::string> SplitMethod(const std::string& full) {
  const size_t slash = full.rfind('/');
  if (full.empty() || full[0] != '/' || slash == 0 || slash == std::string::npos) {
    return {"unknown", full};
  }
  return {full.substr(1, slash - 1), full.substr(slash + 1)};
}

// The method's name, as models record it.
std::string MethodOf(const v1::JobSpec& spec) {
  absl::StatusOr<const Method*> method = MethodForSpec(spec);
  return method.ok() ? std::string((*method)->name()) : "unknown";
}

double Seconds(const google::protobuf::Timestamp& t) {
  return static_cast<double>(t.seconds()) + t.nanos() * 1e-9;
}

// Gauges read at scrape time: registered probes and /proc/self.
class PulledGauges final : public prometheus::Collectable {
 public:
  void Add(std::string name, std::string help, std::function<double()> probe, bool counter)
      ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    probes_.push_back({std::move(name), std::move(help), std::move(probe), counter});
  }

  std::vector<prometheus::MetricFamily> Collect() const ABSL_LOCKS_EXCLUDED(mu_) override {
    std::vector<prometheus::MetricFamily> out;
    {
      MutexLock lock(&mu_);
      for (const Probe& p : probes_) {
        out.push_back(Gauge(p.name, p.help, p.probe(),
                            p.counter ? prometheus::MetricType::Counter
                                      : prometheus::MetricType::Gauge));
      }
    }
    AddProcess(&out);
    return out;
  }

 private:
  struct Probe {
    std::string name;
    std::string help;
    std::function<double()> probe;
    bool counter = false;
  };

  static prometheus::MetricFamily Gauge(const std::string& name, const std::string& help,
                                        double value,
                                        prometheus::MetricType type = prometheus::MetricType::Gauge) {
    prometheus::MetricFamily family;
    family.name = name;
    family.help = help;
    family.type = type;
    prometheus::ClientMetric metric;
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
    return family;
  }

  // The standard process_* series, from /proc/self/stat (fields after the
  // command name, which may contain spaces: see proc(5)).
  static void AddProcess(std::vector<prometheus::MetricFamily>* out) {
    std::ifstream stat_file("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) return;
    const std::vector<std::string> f = absl::StrSplit(stat.substr(paren + 2), ' ');
    // f[0] is field 3 (state); field k is f[k - 3].
    if (f.size() < 22) return;  // needs fields 3..24
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    double utime = 0, stime = 0, start_ticks = 0, rss_pages = 0;
    if (!absl::SimpleAtod(f[14 - 3], &utime) || !absl::SimpleAtod(f[15 - 3], &stime) ||
        !absl::SimpleAtod(f[22 - 3], &start_ticks) || !absl::SimpleAtod(f[24 - 3], &rss_pages)) {
      return;
    }
    out->push_back(Gauge("process_cpu_seconds_total", "User and system CPU time spent in seconds.",
                         (utime + stime) / ticks, prometheus::MetricType::Counter));
    out->push_back(Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                         rss_pages * page));
    std::error_code ec;
    int fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      ++fds;
    }
    out->push_back(Gauge("process_open_fds", "Number of open file descriptors.", fds));
    // Boot time from /proc/stat ("btime <seconds>").
    std::ifstream proc_stat("/proc/stat");
    std::string line;
    while (std::getline(proc_stat, line)) {
      double btime = 0;
      if (absl::StartsWith(line, "btime ") && absl::SimpleAtod(line.substr(6), &btime)) {
        out->push_back(Gauge("process_start_time_seconds",
                             "Start time of the process since unix epoch in seconds.",
                             btime + start_ticks / ticks));
        break;
      }
    }
  }

  mutable Mutex mu_;
  std::vector<Probe> probes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

struct ServerMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<PulledGauges> pulled = std::make_shared<PulledGauges>();
  std::unique_ptr<prometheus::Exposer> exposer;

  prometheus::Family<prometheus::Counter>& handled =
      prometheus::BuildCounter()
          .Name("grpc_server_handled_total")
          .Help("RPCs completed on the server, by method and status code.")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& handling =
      prometheus::BuildHistogram()
          .Name("grpc_server_handling_seconds")
          .Help("Time from the start of an RPC to its status, by method.")
          .Register(*registry);
  prometheus::Gauge& in_flight = prometheus::BuildGauge()
                                     .Name("grpc_server_in_flight")
                                     .Help("RPCs started and not yet finished.")
                                     .Register(*registry)
                                     .Add({});
  prometheus::Counter& upload_bytes = prometheus::BuildCounter()
                                          .Name("dendro_upload_bytes_total")
                                          .Help("Bytes of data and labels received by uploads.")
                                          .Register(*registry)
                                          .Add({});
  prometheus::Family<prometheus::Counter>& jobs_finished =
      prometheus::BuildCounter()
          .Name("dendro_jobs_finished_total")
          .Help("Jobs that ran and ended, by method and final state.")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& job_duration =
      prometheus::BuildHistogram()
          .Name("dendro_job_duration_seconds")
          .Help("Run time of jobs that ended, by method.")
          .Register(*registry);

  prometheus::Family<prometheus::Histogram>& queue_wait =
      prometheus::BuildHistogram()
          .Name("dendro_job_queue_wait_seconds")
          .Help("Time from a job's submission to its first start, by method.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& http_requests =
      prometheus::BuildCounter()
          .Name("http_server_requests_total")
          .Help(
              "HTTP requests answered, by method, route (the endpoint's pattern) and status "
              "code.")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& http_duration =
      prometheus::BuildHistogram()
          .Name("http_server_request_duration_seconds")
          .Help("Time from a request's first byte read to its last byte sent, by route.")
          .Register(*registry);
  prometheus::Gauge& build_info =
      prometheus::BuildGauge()
          .Name("dendro_build_info")
          .Help("Always 1; its labels name the running dendrod's version and git revision.")
          .Register(*registry)
          .Add({{"version", DENDRO_VERSION}, {"revision", DENDRO_GIT_REVISION}});

  prometheus::Family<prometheus::Histogram>& catalogue =
      prometheus::BuildHistogram()
          .Name("dendro_catalogue_seconds")
          .Help("Catalogue (SQLite) operations by name, lock wait included.")
          .Register(*registry);

  static const prometheus::Histogram::BucketBoundaries& RpcBuckets() {
    static const auto* b = new prometheus::Histogram::BucketBoundaries{
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    return *b;
  }
  static const prometheus::Histogram::BucketBoundaries& QueueBuckets() {
    static const auto* b = new prometheus::Histogram::BucketBoundaries{
        0.01, 0.05, 0.25, 1, 5, 15, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600};
    return *b;
  }
  static const prometheus::Histogram::BucketBoundaries& JobBuckets() {
    static const auto* b = new prometheus::Histogram::BucketBoundaries{
        0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600};
    return *b;
  }
};

namespace {

class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(ServerMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method ? method : ""), start_(std::chrono::steady_clock::now()) {
    metrics_->RpcStarted();
  }
  ~RpcInterceptor() override {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // No status sent: the call ended without one (the client went away).
    metrics_->RpcFinished(method_, have_status_ ? code_ : grpc::StatusCode::CANCELLED, seconds);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = methods->GetSendStatus().error_code();
      have_status_ = true;
    }
    methods->Proceed();
  }

 private:
  ServerMetrics* const metrics_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  int code_ = 0;
  bool have_status_ = false;
};

class RpcInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(ServerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info->method());
  }

 private:
  ServerMetrics* const metrics_;
};

}  // namespace

ServerMetrics::ServerMetrics() : impl_(std::make_unique<Impl>()) { impl_->build_info.Set(1); }
ServerMetrics::~ServerMetrics() = default;

absl::Status ServerMetrics::Serve(const std::string& listen) {
  try {
    impl_->exposer = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  impl_->exposer->RegisterCollectable(impl_->registry);
  impl_->exposer->RegisterCollectable(impl_->pulled);
  return absl::OkStatus();
}

int ServerMetrics::port() const {
  if (!impl_->exposer) return 0;
  const std::vector<int> ports = impl_->exposer->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void ServerMetrics::StopServing() { impl_->exposer.reset(); }

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ServerMetrics::MakeInterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(this);
}

void ServerMetrics::AddProbe(const std::string& name, const std::string& help,
                             std::function<double()> probe) {
  impl_->pulled->Add(name, help, std::move(probe), /*counter=*/false);
}

void ServerMetrics::AddCounterProbe(const std::string& name, const std::string& help,
                                    std::function<double()> probe) {
  impl_->pulled->Add(name, help, std::move(probe), /*counter=*/true);
}

void ServerMetrics::AddUploadBytes(int64_t bytes) {
  impl_->upload_bytes.Increment(static_cast<double>(bytes));
}

void ServerMetrics::JobFinished(const v1::Job& job) {
  std::string state = v1::JobState_Name(job.state());
  if (absl::StartsWith(state, "JOB_STATE_")) state = state.substr(10);
  absl::AsciiStrToLower(&state);
  const std::string method = MethodOf(job.spec());
  impl_->jobs_finished.Add({{"method", method}, {"state", state}}).Increment();
  if (job.has_start_time() && job.has_end_time()) {
    const double seconds = Seconds(job.end_time()) - Seconds(job.start_time());
    if (seconds >= 0) {
      impl_->job_duration.Add({{"method", method}}, Impl::JobBuckets()).Observe(seconds);
    }
  }
}

void ServerMetrics::JobStarted(const v1::Job& job) {
  if (job.attempts() != 1 || !job.has_create_time() || !job.has_start_time()) return;
  const double seconds = Seconds(job.start_time()) - Seconds(job.create_time());
  // Clocks of two replicas may disagree by a little: a negative wait is 0.
  impl_->queue_wait.Add({{"method", MethodOf(job.spec())}}, Impl::QueueBuckets())
      .Observe(std::max(0.0, seconds));
}

void ServerMetrics::HttpRequestFinished(const std::string& method, const std::string& route,
                                        int status, double seconds) {
  impl_->http_requests.Add({{"method", method}, {"route", route}, {"code", std::to_string(status)}})
      .Increment();
  impl_->http_duration.Add({{"route", route}}, Impl::RpcBuckets()).Observe(seconds);
}

void ServerMetrics::CatalogueOp(const char* op, double seconds) {
  impl_->catalogue.Add({{"op", op}}, Impl::RpcBuckets()).Observe(seconds);
}

void ServerMetrics::RpcStarted() { impl_->in_flight.Increment(); }

void ServerMetrics::RpcFinished(const std::string& full_method, int code, double seconds) {
  impl_->in_flight.Decrement();
  const auto [service, method] = SplitMethod(full_method);
  impl_->handled
      .Add({{"grpc_service", service}, {"grpc_method", method}, {"grpc_code", CodeName(code)}})
      .Increment();
  impl_->handling.Add({{"grpc_service", service}, {"grpc_method", method}}, Impl::RpcBuckets())
      .Observe(seconds);
}

std::string ServerMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families = impl_->registry->Collect();
  for (auto& f : impl_->pulled->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace dendro::server
