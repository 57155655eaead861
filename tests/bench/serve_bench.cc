// serve_bench: a load generator for dendrod's serving RPCs (Predict, Assign,
// PredictStream), and the in-process ceiling those RPCs are compared with.
//
//   build/tests/bench/serve_bench --server 127.0.0.1:50051 --create hppca
//       --rpc predict --mode closed --callers 16 --server-pid PID
//   ... --rpc predict --mode open --rate 2000
//   ... --create l2h --rpc assign --callers 32
//   ... --rpc stream --callers 8          (8 streams)
//   ... --ceiling --data-dir DENDRO_DATA_DIR   (no RPCs: the model in-process)
//   serve_bench --help                    every flag
//
// What it measures, and how:
//   * Load. Requests go through the generated dendro.v1 stub with gRPC's
//     CompletionQueue API, on --client-threads threads (one queue each) and
//     --channels connections; each request is built before the run from a
//     pool of --pool-rows rows (4096), cycled through, so the measured path
//     does no request encoding beyond gRPC's own.
//     - closed: --callers N callers, each sending its next call as soon as
//       the previous answer arrives (10 ms pause after an error).
//       PredictStream: N streams, each sending one request per message and
//       reading its answer before the next (closed loop per stream).
//     - open: calls are sent at the fixed rate R on the grid start + i / R.
//       Latency counts from the grid time (the intended send time), not from
//       when the call actually left, so a client or server that falls
//       behind shows up in the latency instead of lowering the rate.
//   * Window. The first --warmup seconds are not counted; a call is counted
//     when its (intended) send time falls in the --duration seconds after
//     that, and the run waits for every counted call to finish. Latency is
//     over the counted calls that succeeded; the others are counted by gRPC
//     status code.
//   * CPU. utime + stime of /proc/PID/stat (/ sysconf(_SC_CLK_TCK)) at the
//     start and the end of the counted window, for --server-pid and for
//     each --extra-pid (each with its live descendants and the reaped ones
//     its cutime/cstime hold: e.g. a PostgreSQL postmaster and its
//     backends), and for this process (the client's own cost); per 1,000
//     calls that ended inside the window (the work that CPU paid for).
//   * Ceiling (--ceiling). The same pool rows through the model itself in
//     this process: the model's artifact directory (--model-dir, or found
//     under --data-dir as the server stores it: models/<name>/<id>, matched
//     with the version's checksums) loaded with the server's own
//     Method::Load, then FittedModel::Predict (or AssignLeaves) on
//     --threads threads, one row per call and --ceiling-batch rows per call,
//     each for --warmup + --duration seconds: rows/s and CPU-seconds per
//     1,000 rows of this process.
//
// Models: --model NAME [--version V | --label L] uses an existing model.
// --create hppca trains a hierarchical PPCA classifier on rows of
// core/hppca/synthetic.h's two-level distribution (--classes K = 2000,
// --dim d = 128, --train-per-class 60), --create l2h fits L2H on synthetic
// N x K logits (--l2h-rows 20000, --classes K = 1000; the logits of
// tests/bench/l2h_bench.cc); an existing model of that name is reused. The
// request rows come from the same distribution (a fresh draw).
//
// DENDRO_API_KEY, if set, is sent as "authorization: Bearer KEY" on every
// call, as client/client.cc does. Prints one JSON object on stdout; a bad
// flag is one line on stderr and exit status 2, a failure exit status 1.
#include <dirent.h>
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/hppca/synthetic.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/base/memory.h"
#include "server/methods/method.h"
#include "server/storage/checksum.h"
#include "tests/bench/synthetic_logits.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// --- Flags ------------------------------------------------------------------

enum class Rpc { kPredict, kAssign, kStream };
enum class Mode { kClosed, kOpen };

struct Args {
  std::string server = "127.0.0.1:50051";
  Rpc rpc = Rpc::kPredict;
  Mode mode = Mode::kClosed;
  int callers = 16;
  double rate = 0;  // calls/s, open mode
  double duration = 10, warmup = 2;
  int rows_per_call = 1;
  int top_k = 0, top_t = 0;  // 0: the server's defaults
  bool flat = false;
  int level = 0;  // Assign
  int64_t deadline_ms = 10'000;
  int client_threads = 1;
  int channels = 1;
  int max_outstanding = 10'000;  // open mode
  int pool_rows = 4096;
  uint64_t seed = 1;
  // Model.
  std::string model;  // empty: a name derived from --create's parameters
  int64_t version = 0;
  std::string label;
  std::string create;  // "", "hppca", "l2h"
  int classes = 0;     // K; 0: 2000 (hppca) or 1000 (l2h)
  int dim = 128;
  int train_per_class = 60;
  int64_t l2h_rows = 20'000;
  // CPU accounting.
  int server_pid = 0;
  std::vector<int> extra_pids;
  // Ceiling.
  bool ceiling = false;
  std::string model_dir, data_dir, method;
  int threads = 0;  // 0: the cores
  int ceiling_batch = 256;
};

constexpr char kUsage[] =
    "usage: serve_bench [--server HOST:PORT] [--rpc predict|assign|stream]\n"
    "    [--mode closed|open] [--callers N] [--rate CALLS_PER_S] [--duration S] [--warmup S]\n"
    "    [--rows-per-call R] [--top-k K] [--top-t T] [--flat] [--level L]\n"
    "    [--deadline-ms MS] [--client-threads T] [--channels C] [--max-outstanding N]\n"
    "    [--pool-rows N] [--seed S]\n"
    "    [--model NAME] [--version V | --label L] [--create hppca|l2h] [--classes K]\n"
    "    [--dim D] [--train-per-class N] [--l2h-rows N]\n"
    "    [--server-pid PID] [--extra-pid PID ...]\n"
    "    [--ceiling [--model-dir DIR [--method NAME] | --data-dir DIR] [--threads T]\n"
    "     [--ceiling-batch R]]\n";

[[noreturn]] void BadFlag(const std::string& message) {
  std::fprintf(stderr, "serve_bench: %s (serve_bench --help lists the flags)\n", message.c_str());
  std::exit(2);
}

template <typename T>
T ParseNumber(const std::string& flag, const std::string& value, T min, T max) {
  T v{};
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    ok = absl::SimpleAtod(value, &v) && std::isfinite(v);
  } else {
    int64_t i = 0;
    ok = absl::SimpleAtoi(value, &i);
    if (ok && (i < static_cast<int64_t>(min) || i > static_cast<int64_t>(max))) ok = false;
    v = static_cast<T>(i);
  }
  if (!ok || v < min || v > max) {
    BadFlag(absl::StrCat(flag, ": expected a number in [", min, ", ", max, "], got '", value,
                         "'"));
  }
  return v;
}

Args Parse(int argc, char** argv) {
  Args a;
  bool rate_set = false, callers_set = false, rpc_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) BadFlag(absl::StrCat(flag, " needs a value"));
      return argv[++i];
    };
    auto no_value = [&]() {
      if (inline_value) BadFlag(absl::StrCat(flag, " takes no value"));
    };
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--server") {
      a.server = value();
    } else if (flag == "--rpc") {
      const std::string v = value();
      if (v == "predict") a.rpc = Rpc::kPredict;
      else if (v == "assign") a.rpc = Rpc::kAssign;
      else if (v == "stream") a.rpc = Rpc::kStream;
      else BadFlag(absl::StrCat("--rpc: expected predict, assign or stream, got '", v, "'"));
      rpc_set = true;
    } else if (flag == "--mode") {
      const std::string v = value();
      if (v == "closed") a.mode = Mode::kClosed;
      else if (v == "open") a.mode = Mode::kOpen;
      else BadFlag(absl::StrCat("--mode: expected closed or open, got '", v, "'"));
    } else if (flag == "--callers" || flag == "--streams") {
      a.callers = ParseNumber<int>(flag, value(), 1, 100'000);
      callers_set = true;
    } else if (flag == "--rate") {
      a.rate = ParseNumber<double>(flag, value(), 1e-3, 1e7);
      rate_set = true;
    } else if (flag == "--duration") {
      a.duration = ParseNumber<double>(flag, value(), 0.1, 86'400);
    } else if (flag == "--warmup") {
      a.warmup = ParseNumber<double>(flag, value(), 0, 86'400);
    } else if (flag == "--rows-per-call") {
      a.rows_per_call = ParseNumber<int>(flag, value(), 1, 1'000'000);
    } else if (flag == "--top-k") {
      a.top_k = ParseNumber<int>(flag, value(), 0, 1'000'000);
    } else if (flag == "--top-t") {
      a.top_t = ParseNumber<int>(flag, value(), 0, 1'000'000);
    } else if (flag == "--flat") {
      no_value();
      a.flat = true;
    } else if (flag == "--level") {
      a.level = ParseNumber<int>(flag, value(), 0, 1'000'000'000);
    } else if (flag == "--deadline-ms") {
      a.deadline_ms = ParseNumber<int64_t>(flag, value(), 1, 86'400'000);
    } else if (flag == "--client-threads") {
      a.client_threads = ParseNumber<int>(flag, value(), 1, 256);
    } else if (flag == "--channels") {
      a.channels = ParseNumber<int>(flag, value(), 1, 1024);
    } else if (flag == "--max-outstanding") {
      a.max_outstanding = ParseNumber<int>(flag, value(), 1, 10'000'000);
    } else if (flag == "--pool-rows") {
      a.pool_rows = ParseNumber<int>(flag, value(), 1, 10'000'000);
    } else if (flag == "--seed") {
      a.seed = ParseNumber<uint64_t>(flag, value(), 0, INT64_MAX);
    } else if (flag == "--model") {
      a.model = value();
      if (a.model.empty()) BadFlag("--model: empty name");
    } else if (flag == "--version") {
      a.version = ParseNumber<int64_t>(flag, value(), 1, INT64_MAX);
    } else if (flag == "--label") {
      a.label = value();
      if (a.label.empty()) BadFlag("--label: empty label");
    } else if (flag == "--create") {
      a.create = value();
      if (a.create != "hppca" && a.create != "l2h") {
        BadFlag(absl::StrCat("--create: expected hppca or l2h, got '", a.create, "'"));
      }
    } else if (flag == "--classes") {
      a.classes = ParseNumber<int>(flag, value(), 2, 10'000'000);
    } else if (flag == "--dim") {
      a.dim = ParseNumber<int>(flag, value(), 1, 1'000'000);
    } else if (flag == "--train-per-class") {
      a.train_per_class = ParseNumber<int>(flag, value(), 2, 1'000'000);
    } else if (flag == "--l2h-rows") {
      a.l2h_rows = ParseNumber<int64_t>(flag, value(), 1, int64_t{1} << 40);
    } else if (flag == "--server-pid") {
      a.server_pid = ParseNumber<int>(flag, value(), 1, INT32_MAX);
    } else if (flag == "--extra-pid") {
      a.extra_pids.push_back(ParseNumber<int>(flag, value(), 1, INT32_MAX));
    } else if (flag == "--ceiling") {
      no_value();
      a.ceiling = true;
    } else if (flag == "--model-dir") {
      a.model_dir = value();
    } else if (flag == "--data-dir") {
      a.data_dir = value();
    } else if (flag == "--method") {
      a.method = value();
    } else if (flag == "--threads") {
      a.threads = ParseNumber<int>(flag, value(), 1, 4096);
    } else if (flag == "--ceiling-batch") {
      a.ceiling_batch = ParseNumber<int>(flag, value(), 1, 1'000'000);
    } else {
      BadFlag(absl::StrCat("unknown flag '", argv[i], "'"));
    }
  }
  if (a.mode == Mode::kOpen && !rate_set && !a.ceiling) BadFlag("--mode open needs --rate");
  if (a.mode == Mode::kClosed && rate_set) BadFlag("--rate is for --mode open");
  if (a.mode == Mode::kOpen && callers_set) BadFlag("--callers is for --mode closed");
  if (a.mode == Mode::kOpen && a.rpc == Rpc::kStream) {
    BadFlag("--rpc stream runs closed loop per stream only (use --mode closed --callers N)");
  }
  if (a.version != 0 && !a.label.empty()) BadFlag("give --version or --label, not both");
  if (a.model.empty() && a.create.empty() && a.model_dir.empty()) {
    BadFlag("give --model NAME (an existing model) or --create hppca|l2h");
  }
  if (!a.model_dir.empty() && !a.ceiling) BadFlag("--model-dir is for --ceiling");
  if (!a.data_dir.empty() && !a.ceiling) BadFlag("--data-dir is for --ceiling");
  if (!a.model_dir.empty() && !a.data_dir.empty()) BadFlag("give --model-dir or --data-dir, not both");
  if (a.ceiling && a.model_dir.empty() && a.data_dir.empty()) {
    BadFlag("--ceiling needs --model-dir DIR or --data-dir DIR (the server's --data_dir)");
  }
  if (a.ceiling && !a.model_dir.empty() && a.model.empty() && a.create.empty() &&
      a.method.empty()) {
    BadFlag("--ceiling --model-dir without --model needs --method NAME (e.g. hppca, l2h)");
  }
  if (a.classes == 0) a.classes = a.create == "l2h" ? 1000 : 2000;
  if (a.create == "l2h" && !rpc_set) a.rpc = Rpc::kAssign;
  if (a.create == "l2h" && a.rpc != Rpc::kAssign) {
    BadFlag("an l2h model is a clustering: it serves --rpc assign only");
  }
  if (a.model.empty() && !a.create.empty()) {
    a.model = a.create == "hppca"
                  ? absl::StrCat("serve-bench-hppca-", a.classes, "x", a.dim)
                  : absl::StrCat("serve-bench-l2h-", a.classes);
  }
  if (const char* key = std::getenv("DENDRO_API_KEY"); key != nullptr) {
    for (const char* c = key; *c != '\0'; ++c) {
      const auto byte = static_cast<unsigned char>(*c);
      if (byte <= 0x20 || byte >= 0x7f) {
        BadFlag("DENDRO_API_KEY contains whitespace or non-printable characters");
      }
    }
  }
  for (int pid : [&] {
         std::vector<int> all = a.extra_pids;
         if (a.server_pid != 0) all.push_back(a.server_pid);
         return all;
       }()) {
    if (::access(absl::StrCat("/proc/", pid, "/stat").c_str(), R_OK) != 0) {
      BadFlag(absl::StrCat("no process ", pid, " (/proc/", pid, "/stat is not readable)"));
    }
  }
  return a;
}

[[noreturn]] void Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "serve_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

template <typename T>
T OrDie(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Fail(what, v.status());
  return *std::move(v);
}

// --- CPU time from /proc ------------------------------------------------------

struct ProcStat {
  int pid = 0, ppid = 0;
  int64_t own_ticks = 0;       // utime + stime (all threads)
  int64_t children_ticks = 0;  // cutime + cstime (reaped descendants)
};

std::optional<ProcStat> ReadProcStat(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: the fields
  // after it start after its last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> f;  // f[0] = field 3 (state)
  for (std::string tok; rest >> tok;) f.push_back(tok);
  if (f.size() < 15) return std::nullopt;
  ProcStat s;
  s.pid = pid;
  s.ppid = std::atoi(f[1].c_str());
  s.own_ticks = std::atoll(f[11].c_str()) + std::atoll(f[12].c_str());       // 14, 15
  s.children_ticks = std::atoll(f[13].c_str()) + std::atoll(f[14].c_str());  // 16, 17
  return s;
}

// CPU seconds of `root` and its live descendants, plus the time of the
// descendants already reaped (their parents' cutime + cstime); -1 if `root`
// is gone.
struct TreeCpu {
  double seconds = -1;
  int processes = 0;
};

TreeCpu ReadTreeCpu(int root) {
  TreeCpu out;
  const std::optional<ProcStat> r = ReadProcStat(root);
  if (!r) return out;
  std::multimap<int, ProcStat> by_parent;
  if (DIR* d = ::opendir("/proc"); d != nullptr) {
    while (dirent* e = ::readdir(d)) {
      int pid = 0;
      if (!absl::SimpleAtoi(e->d_name, &pid) || pid == root) continue;
      if (std::optional<ProcStat> s = ReadProcStat(pid)) by_parent.emplace(s->ppid, *s);
    }
    ::closedir(d);
  }
  int64_t ticks = 0;
  std::vector<ProcStat> todo = {*r};
  while (!todo.empty()) {
    const ProcStat s = todo.back();
    todo.pop_back();
    ticks += s.own_ticks + s.children_ticks;
    ++out.processes;
    auto [lo, hi] = by_parent.equal_range(s.pid);
    for (auto it = lo; it != hi; ++it) todo.push_back(it->second);
  }
  out.seconds = static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return out;
}

double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Every CPU counter the report gives, read at once.
struct CpuSample {
  TreeCpu server;
  std::vector<TreeCpu> extra;
  double self = 0;
};

CpuSample SampleCpu(const Args& a) {
  CpuSample s;
  if (a.server_pid != 0) s.server = ReadTreeCpu(a.server_pid);
  for (int pid : a.extra_pids) s.extra.push_back(ReadTreeCpu(pid));
  s.self = SelfCpuSeconds();
  return s;
}

// CPU over the window, per 1,000 `unit`s (calls or rows).
Json CpuReport(const Args& a, const CpuSample& t0, const CpuSample& t1, int64_t units,
               const char* unit) {
  auto per_1000 = [&](double secs) -> Json {
    if (units <= 0) return nullptr;
    return secs * 1000.0 / static_cast<double>(units);
  };
  Json j;
  const std::string per = absl::StrCat("cpu_seconds_per_1000_", unit);
  if (a.server_pid != 0) {
    if (t0.server.seconds < 0 || t1.server.seconds < 0) {
      j["server"] = {{"pid", a.server_pid}, {"error", "the process ended during the run"}};
    } else {
      const double secs = t1.server.seconds - t0.server.seconds;
      j["server"] = {{"pid", a.server_pid},
                     {"processes", t1.server.processes},
                     {"cpu_seconds", secs},
                     {per, per_1000(secs)}};
    }
  }
  double extra_total = 0;
  for (size_t i = 0; i < a.extra_pids.size(); ++i) {
    Json e = {{"pid", a.extra_pids[i]}};
    if (t0.extra[i].seconds < 0 || t1.extra[i].seconds < 0) {
      e["error"] = "the process ended during the run";
    } else {
      const double secs = t1.extra[i].seconds - t0.extra[i].seconds;
      extra_total += secs;
      e["processes"] = t1.extra[i].processes;
      e["cpu_seconds"] = secs;
      e[per] = per_1000(secs);
    }
    j["extra"].push_back(e);
  }
  if (!a.extra_pids.empty()) {
    j["extra_total"] = {{"cpu_seconds", extra_total}, {per, per_1000(extra_total)}};
  }
  const double self = t1.self - t0.self;
  j["client"] = {{"cpu_seconds", self}, {per, per_1000(self)}};
  return j;
}

// --- Synthetic rows -----------------------------------------------------------

// The two-level classifier data (core/hppca/synthetic.h) at dimension d,
// with core/hppca's ImageNet-shaped difficulty; K classes in groups of the
// largest divisor of K that is at most 50, so that (K, d) alone fix the
// distribution and a model found by name gets rows like those it was
// trained on.
dendro::TwoLevelSpec HppcaSpec(int32_t classes, int64_t dim, uint64_t seed) {
  int32_t per_group = 1;
  for (int32_t c = std::min(classes, 50); c >= 1; --c) {
    if (classes % c == 0) {
      per_group = c;
      break;
    }
  }
  dendro::TwoLevelSpec spec = dendro::ImageNetLikeSpec(classes / per_group, per_group, seed);
  spec.dim = dim;
  spec.group_rank = static_cast<int32_t>(std::min<int64_t>(spec.group_rank, dim));
  spec.class_rank = static_cast<int32_t>(std::min<int64_t>(spec.class_rank, dim));
  return spec;
}

// The logits of tests/bench/synthetic_logits.h (those of the L2H benchmarks).
dendro::RowMatrixF SyntheticLogits(int64_t n, int32_t k, uint64_t seed) {
  const std::vector<uint8_t> dist = dendro::bench::LeafDistances(k);
  dendro::RowMatrixF x(n, k);
  for (int64_t i = 0; i < n; ++i) {
    dendro::bench::SyntheticLogitRow(i, k, seed, dist, x.data() + i * k);
  }
  return x;
}

// The request rows: `n` rows shaped for a model of `method` with K leaves
// and `dim` columns, from the distribution --create trains on (for other
// methods, standard normal rows). `labels`: the class of each row (hppca),
// else empty.
struct Pool {
  dendro::RowMatrixF x;
  std::vector<int64_t> labels;
};

Pool PoolRows(const std::string& method, int32_t leaves, int64_t dim, int n, uint64_t seed) {
  Pool pool;
  if (method == "hppca" && leaves >= 1) {
    const dendro::TwoLevelGenerator gen(HppcaSpec(leaves, dim, seed));
    const int32_t per_class = std::max(1, (n + leaves - 1) / leaves);
    const dendro::LabelledData d = gen.Sample(per_class, seed + 22);
    // Rows come grouped by class: shuffle so that consecutive calls differ.
    std::vector<int64_t> order(d.x.rows());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::mt19937_64 rng(seed + 23);
    std::shuffle(order.begin(), order.end(), rng);
    pool.x.resize(n, dim);
    pool.labels.resize(n);
    for (int i = 0; i < n; ++i) {
      const int64_t from = order[i % order.size()];
      pool.x.row(i) = d.x.row(from);
      pool.labels[i] = d.labels[from];
    }
    return pool;
  }
  if (method == "l2h") {
    pool.x = SyntheticLogits(n, static_cast<int32_t>(dim), seed + 1'000'003);
    return pool;
  }
  std::mt19937_64 rng(seed + 24);
  std::normal_distribution<float> normal;
  pool.x.resize(n, dim);
  for (int64_t i = 0; i < pool.x.size(); ++i) pool.x.data()[i] = normal(rng);
  return pool;
}

// --- Model setup (through the client library) ---------------------------------

dendro::v1::ModelRef RefFrom(const Args& a) {
  dendro::v1::ModelRef ref;
  ref.set_name(a.model);
  ref.set_version(a.version);
  ref.set_label(a.label);
  return ref;
}

// Trains the model --create asks for unless a model of that name exists;
// returns the model the runs use. `setup` receives what was done.
dendro::v1::Model EnsureModel(dendro::client::Client& client, const Args& a, Json* setup) {
  const dendro::v1::ModelRef ref = RefFrom(a);
  absl::StatusOr<dendro::v1::Model> found = client.GetModel(ref);
  if (found.ok() || !absl::IsNotFound(found.status()) || a.create.empty()) {
    dendro::v1::Model m = OrDie(std::move(found), absl::StrCat("model '", a.model, "'"));
    if (!a.create.empty()) {
      const int64_t want_dim = a.create == "hppca" ? a.dim : a.classes;
      if (m.method() != a.create || m.input_dim() != want_dim || m.num_leaves() != a.classes) {
        Fail("--create", absl::FailedPreconditionError(absl::StrCat(
                             "model '", a.model, "' exists with method ", m.method(), ", ",
                             m.num_leaves(), " leaves and ", m.input_dim(),
                             " columns, not what --create asks for; give another --model")));
      }
      (*setup)["reused"] = true;
    }
    return m;
  }
  if (a.version != 0 || !a.label.empty()) {
    Fail("--create", absl::InvalidArgumentError(
                         "--version/--label name a version of an existing model; model '" +
                         a.model + "' does not exist"));
  }
  auto t0 = Clock::now();
  dendro::v1::JobSpec spec;
  spec.set_model_name(a.model);
  dendro::v1::Dataset ds;
  if (a.create == "hppca") {
    const dendro::TwoLevelGenerator gen(HppcaSpec(a.classes, a.dim, a.seed));
    const dendro::LabelledData train = gen.Sample(a.train_per_class, a.seed + 11);
    const dendro::MatrixView x(train.x.data(), train.x.rows(), train.x.cols());
    std::fprintf(stderr, "serve_bench: uploading %lld x %d training rows for '%s'\n",
                 static_cast<long long>(x.rows()), a.dim, a.model.c_str());
    ds = OrDie(client.UploadMatrix(x, train.labels, a.model), "upload");
    spec.mutable_hppca()->set_seed(a.seed);
  } else {
    const dendro::RowMatrixF logits = SyntheticLogits(a.l2h_rows, a.classes, a.seed);
    const dendro::MatrixView x(logits.data(), logits.rows(), logits.cols());
    std::fprintf(stderr, "serve_bench: uploading %lld x %d logits for '%s'\n",
                 static_cast<long long>(x.rows()), a.classes, a.model.c_str());
    ds = OrDie(client.UploadMatrix(x, {}, a.model), "upload");
    spec.mutable_l2h();
  }
  (*setup)["upload_seconds"] = Seconds(Clock::now() - t0);
  (*setup)["training_rows"] = ds.rows();
  spec.set_dataset_id(ds.id());
  t0 = Clock::now();
  const dendro::v1::Job submitted = OrDie(client.SubmitJob(spec), "submit");
  std::fprintf(stderr, "serve_bench: training %s (job %s)\n", a.create.c_str(),
               submitted.id().c_str());
  const dendro::v1::Job job = OrDie(client.WatchJob(submitted.id(), nullptr), "watch job");
  if (job.state() != dendro::v1::JOB_STATE_SUCCEEDED) {
    Fail("training", absl::InternalError(absl::StrCat("job ", job.id(), " ended in state ",
                                                      dendro::v1::JobState_Name(job.state()),
                                                      ": ", job.error().message())));
  }
  (*setup)["job_seconds"] = Seconds(Clock::now() - t0);
  if (absl::Status s = client.DeleteDataset(ds.id()); !s.ok()) {
    std::fprintf(stderr, "serve_bench: delete dataset %s: %s\n", ds.id().c_str(),
                 s.ToString().c_str());
  }
  return OrDie(client.GetModel(ref), "model after training");
}

Json ModelJson(const dendro::v1::Model& m) {
  return {{"name", m.name()},           {"version", m.version()},
          {"method", m.method()},       {"num_leaves", m.num_leaves()},
          {"input_dim", m.input_dim()}};
}

// --- Load over gRPC -----------------------------------------------------------

// Per client thread (one completion queue each): nothing is shared.
struct ThreadStats {
  std::vector<float> latency_us;  // counted calls that succeeded
  std::map<int, int64_t> errors;  // counted calls that failed, by status code
  std::string first_error;
  int64_t rows = 0;
  // Calls (of any send time and status) that ended inside the window: the
  // work the window's CPU paid for.
  int64_t ended_in_window = 0;
};

class Tag {
 public:
  virtual ~Tag() = default;
  virtual void Proceed(bool ok) = 0;
};

class Load {
 public:
  Load(const Args& a, const dendro::v1::Model& model, const dendro::RowMatrixF& pool)
      : a_(a), api_key_(std::getenv("DENDRO_API_KEY") ? std::getenv("DENDRO_API_KEY") : "") {
    // As client/client.cc creates its channel (round-robin over the
    // target's addresses, the same message limits); separate connections
    // for --channels > 1.
    for (int i = 0; i < a.channels; ++i) {
      grpc::ChannelArguments args;
      args.SetLoadBalancingPolicyName("round_robin");
      args.SetMaxReceiveMessageSize(64 << 20);
      args.SetMaxSendMessageSize(64 << 20);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("dendro.serve_bench.channel", i);
      stubs_.push_back(dendro::v1::ModelService::NewStub(
          grpc::CreateCustomChannel(a.server, grpc::InsecureChannelCredentials(), args)));
    }
    dendro::v1::ModelRef ref;
    ref.set_name(model.name());
    ref.set_version(a.version);
    ref.set_label(a.label);
    // Distinct requests: enough to cycle through the pool, at most 4096.
    const int64_t n = pool.rows(), d = pool.cols(), r = a.rows_per_call;
    const int64_t count = std::clamp<int64_t>(n / r, 16, 4096);
    std::string bytes(static_cast<size_t>(r * d * 4), '\0');
    for (int64_t q = 0; q < count; ++q) {
      for (int64_t i = 0; i < r; ++i) {
        std::memcpy(bytes.data() + i * d * 4, pool.data() + ((q * r + i) % n) * d, d * 4);
      }
      if (a.rpc == Rpc::kAssign) {
        dendro::v1::AssignRequest& req = assign_requests_.emplace_back();
        *req.mutable_model() = ref;
        req.set_rows(r);
        req.set_cols(d);
        req.set_data(bytes);
        req.set_level(a.level);
      } else {
        dendro::v1::PredictRequest& req = predict_requests_.emplace_back();
        *req.mutable_model() = ref;
        req.set_rows(r);
        req.set_cols(d);
        req.set_data(bytes);
        req.set_top_k(a.top_k);
        req.set_top_t(a.top_t);
        req.set_flat(a.flat);
      }
    }
    cqs_.resize(a.client_threads);
    for (auto& cq : cqs_) cq = std::make_unique<grpc::CompletionQueue>();
    stats_.resize(a.client_threads);
  }

  // Runs the warm-up and the counted window; returns the report.
  Json Run();

  // --- used by the callers ---
  const Args& args() const { return a_; }
  dendro::v1::ModelService::Stub* stub(int i) { return stubs_[i % stubs_.size()].get(); }
  grpc::CompletionQueue* cq(int i) { return cqs_[i % cqs_.size()].get(); }
  ThreadStats* stats(int i) { return &stats_[i % stats_.size()]; }
  Clock::time_point stop_time() const { return measure_end_; }

  // A fresh context: the call's deadline and, as client/client.cc sends it,
  // the API key.
  std::unique_ptr<grpc::ClientContext> NewContext(Clock::time_point deadline) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + (deadline - Clock::now()));
    if (!api_key_.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", api_key_));
    return ctx;
  }
  Clock::time_point CallDeadline(Clock::time_point intended) const {
    return intended + std::chrono::milliseconds(a_.deadline_ms);
  }
  const dendro::v1::PredictRequest& NextPredict() {
    return predict_requests_[next_request_.fetch_add(1, std::memory_order_relaxed) %
                             predict_requests_.size()];
  }
  const dendro::v1::AssignRequest& NextAssign() {
    return assign_requests_[next_request_.fetch_add(1, std::memory_order_relaxed) %
                            assign_requests_.size()];
  }

  // A finished call sent (or due) at `intended`: counted if that falls in
  // the window.
  void Record(ThreadStats* st, Clock::time_point intended, Clock::time_point done,
              const grpc::Status& status) {
    st->ended_in_window += done >= measure_start_ && done < measure_end_;
    if (intended < measure_start_ || intended >= measure_end_) return;
    if (status.ok()) {
      st->latency_us.push_back(
          static_cast<float>(std::chrono::duration<double, std::micro>(done - intended).count()));
      st->rows += a_.rows_per_call;
    } else {
      ++st->errors[status.error_code()];
      if (st->first_error.empty()) {
        st->first_error = absl::StrCat(
            absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())), ": ",
            status.error_message());
      }
    }
  }

  // A caller (closed loop) or a call (open loop) is over.
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
    cv_.notify_all();
  }

 private:
  void StartClosed();
  void DispatchOpen();

  const Args& a_;
  const std::string api_key_;
  std::vector<std::unique_ptr<dendro::v1::ModelService::Stub>> stubs_;
  std::vector<dendro::v1::PredictRequest> predict_requests_;
  std::vector<dendro::v1::AssignRequest> assign_requests_;
  std::atomic<uint64_t> next_request_{0};
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  std::vector<ThreadStats> stats_;
  std::vector<std::unique_ptr<Tag>> callers_;
  Clock::time_point start_, measure_start_, measure_end_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t active_ = 0;  // callers still running / open calls in flight
  // Open loop: how late calls left after their grid time (counted window).
  std::vector<float> send_lag_us_;
  int64_t sent_late_ = 0;  // more than 1 ms after their grid time
  int64_t held_by_cap_ = 0;  // waited for --max-outstanding
};

// Predict or Assign, by request type.
std::unique_ptr<grpc::ClientAsyncResponseReader<dendro::v1::PredictResponse>> StartUnary(
    dendro::v1::ModelService::Stub* stub, grpc::ClientContext* ctx,
    const dendro::v1::PredictRequest& req, grpc::CompletionQueue* cq) {
  return stub->AsyncPredict(ctx, req, cq);
}
std::unique_ptr<grpc::ClientAsyncResponseReader<dendro::v1::AssignResponse>> StartUnary(
    dendro::v1::ModelService::Stub* stub, grpc::ClientContext* ctx,
    const dendro::v1::AssignRequest& req, grpc::CompletionQueue* cq) {
  return stub->AsyncAssign(ctx, req, cq);
}

template <typename Resp>
struct RequestOf;
template <>
struct RequestOf<dendro::v1::PredictResponse> {
  static const dendro::v1::PredictRequest& Next(Load* l) { return l->NextPredict(); }
};
template <>
struct RequestOf<dendro::v1::AssignResponse> {
  static const dendro::v1::AssignRequest& Next(Load* l) { return l->NextAssign(); }
};

// Closed loop: one unary call after another; after an error, a 10 ms pause.
template <typename Resp>
class UnaryCaller final : public Tag {
 public:
  UnaryCaller(Load* load, int index) : load_(load), index_(index) {}
  void Start() { Next(); }
  void Proceed(bool) override {
    if (pausing_) {
      pausing_ = false;
      Next();
      return;
    }
    const Clock::time_point done = Clock::now();
    load_->Record(load_->stats(index_), intended_, done, status_);
    if (!status_.ok()) {
      pausing_ = true;
      alarm_ = std::make_unique<grpc::Alarm>();
      alarm_->Set(load_->cq(index_), std::chrono::system_clock::now() + std::chrono::milliseconds(10),
                  this);
      return;
    }
    Next();
  }

 private:
  void Next() {
    intended_ = Clock::now();
    if (intended_ >= load_->stop_time()) {
      load_->Done();
      return;
    }
    // The reader lives in the call's arena, which the context owns: it
    // goes first.
    reader_.reset();
    ctx_ = load_->NewContext(load_->CallDeadline(intended_));
    resp_.Clear();
    reader_ = StartUnary(load_->stub(index_), ctx_.get(), RequestOf<Resp>::Next(load_),
                         load_->cq(index_));
    reader_->Finish(&resp_, &status_, this);
  }

  Load* load_;
  const int index_;
  Clock::time_point intended_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader_;
  Resp resp_;
  grpc::Status status_;
  bool pausing_ = false;
  std::unique_ptr<grpc::Alarm> alarm_;
};

// Open loop: one call due at `intended`; deletes itself when answered.
template <typename Resp>
class OpenCall final : public Tag {
 public:
  OpenCall(Load* load, int index, Clock::time_point intended)
      : load_(load), index_(index), intended_(intended) {}
  void Start() {
    ctx_ = load_->NewContext(load_->CallDeadline(intended_));
    reader_ = StartUnary(load_->stub(index_), ctx_.get(), RequestOf<Resp>::Next(load_),
                         load_->cq(index_));
    reader_->Finish(&resp_, &status_, this);
  }
  void Proceed(bool) override {
    load_->Record(load_->stats(index_), intended_, Clock::now(), status_);
    Load* load = load_;
    delete this;
    load->Done();
  }

 private:
  Load* load_;
  const int index_;
  const Clock::time_point intended_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader_;
  Resp resp_;
  grpc::Status status_;
};

// PredictStream, closed loop per stream: write one request, read its
// answer, write the next. A stream that breaks counts its call in flight as
// failed and is opened again (after 10 ms) while the window lasts.
class StreamCaller final : public Tag {
 public:
  StreamCaller(Load* load, int index) : load_(load), index_(index) {}
  void Start() { Open(); }
  void Proceed(bool ok) override {
    switch (state_) {
      case State::kPause:
        Open();
        return;
      case State::kStart:
        if (!ok) return Finish();
        return Send();
      case State::kWrite:
        if (!ok) return Finish();
        state_ = State::kRead;
        stream_->Read(&resp_, this);
        return;
      case State::kRead:
        if (!ok) return Finish();
        load_->Record(load_->stats(index_), intended_, Clock::now(), grpc::Status::OK);
        in_flight_ = false;
        return Send();
      case State::kWritesDone:
        return Finish();
      case State::kFinish:
        return Finished();
    }
  }

 private:
  enum class State { kStart, kWrite, kRead, kWritesDone, kFinish, kPause };

  void Open() {
    // Until the first answer, a failure counts as one failed call.
    intended_ = Clock::now();
    in_flight_ = true;
    // The stream's deadline: the end of the window plus one call's. The
    // old stream lives in its call's arena, which its context owns: it goes
    // first.
    stream_.reset();
    ctx_ = load_->NewContext(load_->CallDeadline(load_->stop_time()));
    stream_ = load_->stub(index_)->PrepareAsyncPredictStream(ctx_.get(), load_->cq(index_));
    state_ = State::kStart;
    stream_->StartCall(this);
  }
  void Send() {
    intended_ = Clock::now();
    if (intended_ >= load_->stop_time()) {
      in_flight_ = false;
      state_ = State::kWritesDone;
      stream_->WritesDone(this);
      return;
    }
    in_flight_ = true;
    state_ = State::kWrite;
    stream_->Write(load_->NextPredict(), this);
  }
  void Finish() {
    state_ = State::kFinish;
    stream_->Finish(&status_, this);
  }
  void Finished() {
    if (in_flight_) {
      // The stream ended (or never opened) under a call: that call failed.
      const grpc::Status failed =
          status_.ok() ? grpc::Status(grpc::StatusCode::UNKNOWN,
                                      "the stream ended before the answer")
                       : status_;
      load_->Record(load_->stats(index_), intended_, Clock::now(), failed);
      in_flight_ = false;
      if (Clock::now() < load_->stop_time()) {
        state_ = State::kPause;
        alarm_ = std::make_unique<grpc::Alarm>();
        alarm_->Set(load_->cq(index_),
                    std::chrono::system_clock::now() + std::chrono::milliseconds(10), this);
        return;
      }
    } else if (!status_.ok()) {
      ThreadStats* st = load_->stats(index_);
      if (st->first_error.empty()) {
        st->first_error = absl::StrCat("stream closed: ", status_.error_message());
      }
    }
    load_->Done();
  }

  Load* load_;
  const int index_;
  State state_ = State::kStart;
  bool in_flight_ = false;
  Clock::time_point intended_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<dendro::v1::PredictRequest,
                                                dendro::v1::PredictResponse>>
      stream_;
  dendro::v1::PredictResponse resp_;
  grpc::Status status_;
  std::unique_ptr<grpc::Alarm> alarm_;
};

void Load::StartClosed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = a_.callers;
  }
  for (int i = 0; i < a_.callers; ++i) {
    if (a_.rpc == Rpc::kStream) {
      auto c = std::make_unique<StreamCaller>(this, i);
      c->Start();
      callers_.push_back(std::move(c));
    } else if (a_.rpc == Rpc::kAssign) {
      auto c = std::make_unique<UnaryCaller<dendro::v1::AssignResponse>>(this, i);
      c->Start();
      callers_.push_back(std::move(c));
    } else {
      auto c = std::make_unique<UnaryCaller<dendro::v1::PredictResponse>>(this, i);
      c->Start();
      callers_.push_back(std::move(c));
    }
  }
}

// Sends call i at start + i / rate. When it falls behind (or --max-outstanding
// calls are in flight) calls leave late, in a burst, and their latency still
// counts from their grid time.
void Load::DispatchOpen() {
  const double period_ns = 1e9 / a_.rate;
  for (int64_t i = 0;; ++i) {
    const Clock::time_point intended =
        start_ + std::chrono::nanoseconds(static_cast<int64_t>(period_ns * static_cast<double>(i)));
    if (intended >= measure_end_) break;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active_ >= a_.max_outstanding) {
        held_by_cap_ += intended >= measure_start_;
        cv_.wait(lock, [&] { return active_ < a_.max_outstanding; });
      }
      ++active_;
    }
    if (Clock::now() < intended) std::this_thread::sleep_until(intended);
    const Clock::time_point sent = Clock::now();
    if (intended >= measure_start_) {
      const double lag_us = std::chrono::duration<double, std::micro>(sent - intended).count();
      send_lag_us_.push_back(static_cast<float>(lag_us));
      sent_late_ += lag_us > 1000.0;
    }
    const int index = static_cast<int>(i % std::max(a_.channels, a_.client_threads));
    if (a_.rpc == Rpc::kAssign) {
      (new OpenCall<dendro::v1::AssignResponse>(this, index, intended))->Start();
    } else {
      (new OpenCall<dendro::v1::PredictResponse>(this, index, intended))->Start();
    }
  }
}

Json Percentiles(std::vector<float> v, double scale) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto at = [&](double p) {
    const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
    return static_cast<double>(v[std::clamp<size_t>(rank, 1, v.size()) - 1]) * scale;
  };
  double sum = 0;
  for (float x : v) sum += x;
  return {{"p50", at(0.50)},
          {"p90", at(0.90)},
          {"p99", at(0.99)},
          {"p99.9", at(0.999)},
          {"max", static_cast<double>(v.back()) * scale},
          {"mean", sum / static_cast<double>(v.size()) * scale}};
}

Json Load::Run() {
  std::vector<std::thread> threads;
  for (auto& cq : cqs_) {
    threads.emplace_back([q = cq.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) static_cast<Tag*>(tag)->Proceed(ok);
    });
  }
  start_ = Clock::now();
  measure_start_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(a_.warmup));
  measure_end_ = measure_start_ + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(a_.duration));
  CpuSample cpu0, cpu1;
  std::thread sampler([&] {
    std::this_thread::sleep_until(measure_start_);
    cpu0 = SampleCpu(a_);
    std::this_thread::sleep_until(measure_end_);
    cpu1 = SampleCpu(a_);
  });
  if (a_.mode == Mode::kClosed) {
    StartClosed();
  } else {
    DispatchOpen();
  }
  sampler.join();
  // Every counted call ends by its deadline; wait for them.
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return active_ == 0; });
  }
  const double drain_seconds = Seconds(Clock::now() - measure_end_);
  for (auto& cq : cqs_) cq->Shutdown();
  for (auto& t : threads) t.join();
  callers_.clear();

  std::vector<float> latency;
  std::map<int, int64_t> errors;
  int64_t rows = 0, error_total = 0, ended_in_window = 0;
  std::string first_error;
  for (const ThreadStats& s : stats_) {
    latency.insert(latency.end(), s.latency_us.begin(), s.latency_us.end());
    for (const auto& [code, n] : s.errors) {
      errors[code] += n;
      error_total += n;
    }
    rows += s.rows;
    ended_in_window += s.ended_in_window;
    if (first_error.empty()) first_error = s.first_error;
  }
  const auto calls = static_cast<int64_t>(latency.size());
  Json out;
  // Counted calls (sent in the window) that succeeded, per second of the
  // window; in an open loop that the server cannot keep up with, many of
  // them end after it, and ended_per_second is what was served.
  out["calls"] = calls;
  out["calls_per_second"] = static_cast<double>(calls) / a_.duration;
  out["rows_per_second"] = static_cast<double>(rows) / a_.duration;
  out["ended_per_second"] = static_cast<double>(ended_in_window) / a_.duration;
  Json err = Json::object();
  for (const auto& [code, n] : errors) {
    err[absl::StatusCodeToString(static_cast<absl::StatusCode>(code))] = n;
  }
  out["errors"] = err;
  out["error_total"] = error_total;
  if (!first_error.empty()) out["first_error"] = first_error;
  out["latency_ms"] = Percentiles(std::move(latency), 1e-3);
  if (a_.mode == Mode::kOpen) {
    out["offered_calls"] = static_cast<int64_t>(send_lag_us_.size());
    out["sent_over_1ms_late"] = sent_late_;
    out["held_by_max_outstanding"] = held_by_cap_;
    out["send_lag_ms"] = Percentiles(send_lag_us_, 1e-3);
  }
  out["drain_seconds"] = drain_seconds;
  // Per call that ended in the window (OK or not), the work its CPU paid for.
  out["cpu"] = CpuReport(a_, cpu0, cpu1, ended_in_window, "calls");
  return out;
}

// --- The in-process ceiling ---------------------------------------------------

// The directory of `model`'s files under the server's data directory:
// models/<name>/<id> (server/models/model_registry.cc), the one whose files match
// the version's checksums (or the only one, for a model stored without
// checksums).
std::string FindModelDir(const std::string& data_dir, const dendro::v1::Model& model) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(data_dir) / "models" / model.name();
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.is_directory()) dirs.push_back(e.path().string());
  }
  if (ec || dirs.empty()) {
    Fail("--data-dir", absl::NotFoundError(absl::StrCat("no model directories under ",
                                                        root.string(), ec ? ": " : "",
                                                        ec ? ec.message() : "")));
  }
  if (model.checksums().empty()) {
    if (dirs.size() == 1) return dirs[0];
    Fail("--data-dir",
         absl::FailedPreconditionError(absl::StrCat(
             "model '", model.name(), "' version ", model.version(),
             " has no recorded checksums to tell its directory among ", dirs.size(),
             " under ", root.string(), "; give --model-dir")));
  }
  const auto recorded = dendro::server::ToChecksumMap(model.checksums());
  for (const std::string& dir : dirs) {
    absl::StatusOr<dendro::server::ChecksumMap> actual = dendro::server::ChecksumTree(dir);
    if (actual.ok() && *actual == recorded) return dir;
  }
  Fail("--data-dir", absl::NotFoundError(absl::StrCat(
                         "none of the ", dirs.size(), " directories under ", root.string(),
                         " holds the files of '", model.name(), "' version ", model.version())));
}

// `threads` threads call the model on `batch` rows at a time for the
// warm-up and the window; rows/s and CPU over the window.
Json CeilingPhase(const Args& a, const dendro::server::FittedModel& model,
                  const dendro::RowMatrixF& pool, int threads, int batch, bool predict) {
  // The pool followed by its first `batch` rows, so that any start has
  // `batch` contiguous rows.
  const int64_t n = pool.rows(), d = pool.cols();
  dendro::RowMatrixF rows(n + batch, d);
  for (int64_t i = 0; i < n + batch; ++i) rows.row(i) = pool.row(i % n);
  dendro::server::PredictOptions po;
  po.top_k = a.top_k > 0 ? a.top_k : 1;
  po.top_t = a.top_t;
  po.flat = a.flat;
  std::vector<int32_t> cut;
  if (!predict && a.level > 0) cut = OrDie(model.tree().CutToK(a.level), "--level");

  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_start =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.warmup));
  const Clock::time_point measure_end =
      measure_start +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.duration));
  std::vector<int64_t> counted(threads, 0);
  std::vector<std::vector<float>> latency(threads);
  std::atomic<bool> failed{false};
  std::string failure;
  std::mutex failure_mu;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      int64_t next = (n / threads) * t;
      for (;;) {
        const Clock::time_point t0 = Clock::now();
        if (t0 >= measure_end || failed.load()) return;
        const dendro::MatrixView x(rows.data() + next * d, batch, d);
        next = (next + batch) % n;
        absl::Status s;
        if (predict) {
          s = model.Predict(x, po).status();
        } else {
          absl::StatusOr<std::vector<int32_t>> leaves = model.AssignLeaves(x);
          s = leaves.status();
          if (s.ok() && !cut.empty()) {
            // What Assign does with --level: each leaf's cluster.
            int64_t sum = 0;
            for (int32_t leaf : *leaves) sum += cut[leaf];
            if (sum < 0) s = absl::InternalError("negative cluster");
          }
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(failure_mu);
          failure = s.ToString();
          failed = true;
          return;
        }
        if (t0 >= measure_start) {
          counted[t] += batch;
          latency[t].push_back(static_cast<float>(
              std::chrono::duration<double, std::micro>(Clock::now() - t0).count()));
        }
      }
    });
  }
  std::this_thread::sleep_until(measure_start);
  const double cpu0 = SelfCpuSeconds();
  std::this_thread::sleep_until(measure_end);
  const double cpu1 = SelfCpuSeconds();
  for (auto& w : workers) w.join();
  if (failed) Fail("ceiling", absl::InternalError(failure));
  int64_t total = 0;
  std::vector<float> all;
  for (int t = 0; t < threads; ++t) {
    total += counted[t];
    all.insert(all.end(), latency[t].begin(), latency[t].end());
  }
  // Calls that started in the window and ended after it add a little CPU
  // after cpu1; they are at most one per thread.
  return {{"rows_per_call", batch},
          {"rows", total},
          {"rows_per_second", static_cast<double>(total) / a.duration},
          {"cpu_seconds", cpu1 - cpu0},
          {"cpu_seconds_per_1000_rows",
           total > 0 ? Json((cpu1 - cpu0) * 1000.0 / static_cast<double>(total)) : Json()},
          {"call_latency_ms", Percentiles(std::move(all), 1e-3)}};
}

Json RunCeiling(const Args& a, const std::optional<dendro::v1::Model>& model) {
  std::string dir = a.model_dir;
  if (dir.empty()) dir = FindModelDir(a.data_dir, *model);
  const std::string method_name = !a.method.empty() ? a.method : model->method();
  const dendro::server::Method* method =
      OrDie(dendro::server::MethodByName(method_name), "--method");
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<dendro::server::FittedModel> fitted =
      OrDie(method->Load(dir), absl::StrCat("load ", dir));
  const double load_seconds = Seconds(Clock::now() - t0);
  const bool predict = a.rpc != Rpc::kAssign;
  if (predict && method_name != "hppca") {
    BadFlag(absl::StrCat("a ", method_name, " model is a clustering: use --rpc assign"));
  }
  const int threads =
      a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Pool pool =
      PoolRows(method_name, fitted->tree().num_leaves(), fitted->input_dim(), a.pool_rows, a.seed);
  Json out = {{"model_dir", dir},
              {"method", method_name},
              {"call", predict ? "FittedModel::Predict" : "FittedModel::AssignLeaves"},
              {"threads", threads},
              {"load_seconds", load_seconds},
              {"input_dim", fitted->input_dim()},
              {"num_leaves", fitted->tree().num_leaves()}};
  out["single_row"] = CeilingPhase(a, *fitted, pool.x, threads, 1, predict);
  std::fprintf(stderr, "serve_bench: ceiling, one row per call: %s\n",
               out["single_row"].dump().c_str());
  out["batch"] = CeilingPhase(a, *fitted, pool.x, threads, a.ceiling_batch, predict);
  return out;
}

const char* RpcName(Rpc r) {
  return r == Rpc::kPredict ? "predict" : r == Rpc::kAssign ? "assign" : "stream";
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  // The ceiling runs the model with the allocator as dendrod sets it (before
  // any other thread starts, as TuneAllocator asks).
  if (a.ceiling) dendro::server::TuneAllocator();
  Json out;
  out["rpc"] = RpcName(a.rpc);
  std::optional<dendro::v1::Model> model;
  std::unique_ptr<dendro::client::Client> client;
  // The ceiling from a directory alone needs no server.
  const bool need_server = !(a.ceiling && !a.model_dir.empty() && a.model.empty());
  if (need_server) {
    dendro::client::ClientOptions co;
    co.target = a.server;
    if (const char* key = std::getenv("DENDRO_API_KEY"); key != nullptr) co.api_key = key;
    client = OrDie(dendro::client::Client::Connect(co), "connect");
    Json setup;
    model = EnsureModel(*client, a, &setup);
    if (!setup.is_null()) out["setup"] = setup;
    out["model"] = ModelJson(*model);
  }
  if (a.ceiling) {
    out["mode"] = "ceiling";
    out["duration_s"] = a.duration;
    out["warmup_s"] = a.warmup;
    out["ceiling"] = RunCeiling(a, model);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (a.rpc != Rpc::kAssign && model->method() != "hppca") {
    BadFlag(absl::StrCat("model '", model->name(), "' is ", model->method(),
                         ", a clustering: use --rpc assign"));
  }
  out["mode"] = a.mode == Mode::kClosed ? "closed" : "open";
  if (a.mode == Mode::kClosed) {
    out[a.rpc == Rpc::kStream ? "streams" : "callers"] = a.callers;
  } else {
    out["rate"] = a.rate;
  }
  out["duration_s"] = a.duration;
  out["warmup_s"] = a.warmup;
  out["rows_per_call"] = a.rows_per_call;
  out["server"] = a.server;
  out["client_threads"] = a.client_threads;
  out["channels"] = a.channels;
  out["api_key_sent"] = std::getenv("DENDRO_API_KEY") != nullptr;
  if (a.rpc != Rpc::kAssign) {
    out["top_k"] = a.top_k;
    out["top_t"] = a.top_t;
    out["flat"] = a.flat;
  } else {
    out["level"] = a.level;
  }
  const Pool pool =
      PoolRows(model->method(), model->num_leaves(), model->input_dim(), a.pool_rows, a.seed);
  if (!pool.labels.empty()) {
    // A check that the rows are of the model's kind (a model trained by
    // --create on the same K and d): top-1 accuracy of one batch.
    const int64_t check = std::min<int64_t>(pool.x.rows(), 512);
    const dendro::client::PredictResult p = OrDie(
        client->Predict(RefFrom(a), dendro::MatrixView(pool.x.data(), check, pool.x.cols()),
                        dendro::client::PredictOptions()),
        "check predict");
    int64_t right = 0;
    for (int64_t i = 0; i < check; ++i) right += p.labels[i * p.top_k] == pool.labels[i];
    out["pool_top1_accuracy"] = static_cast<double>(right) / static_cast<double>(check);
  }
  Load load(a, *model, pool.x);
  out.update(load.Run());
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
