// The in-process server fixture shared by the server tests: dendrod on
// loopback, driven with the generated stubs (not the client library), so
// status codes and messages are checked exactly as any client sees them.
//
// With DENDRO_TEST_CATALOG=postgres in the environment every test's server
// records into a fresh database of a real PostgreSQL (postgres_harness.h)
// instead of SQLite, so the same tests check both catalogues (ctest runs
// the suites both ways).
#ifndef DENDRO_TESTS_SERVER_SERVER_FIXTURE_H_
#define DENDRO_TESTS_SERVER_SERVER_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/hierarchy/export.h"
#include "dendro/v1/dendro.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/catalogue/catalogue.h"
#include "server/catalogue/open_catalogue.h"
#include "server/server.h"
#include "tests/server/postgres_harness.h"

namespace dendro::server {

// Logits with a two-level structure: `groups` super-clusters of `per`
// clusters; deterministic for a seed.
inline std::vector<float> MakeLogits(int n, int groups, int per, uint32_t seed,
                                     std::vector<int64_t>* labels = nullptr) {
  const int k = groups * per;
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.f, 1.f);
  std::uniform_int_distribution<int> cls(0, k - 1);
  std::vector<float> x(static_cast<size_t>(n) * k);
  if (labels) labels->resize(n);
  for (int i = 0; i < n; ++i) {
    const int c = cls(rng);
    if (labels) (*labels)[i] = c;
    for (int j = 0; j < k; ++j) {
      float v = noise(rng);
      if (j / per == c / per) v += 2.5f;
      if (j == c) v += 3.f;
      x[static_cast<size_t>(i) * k + j] = v;
    }
  }
  return x;
}

inline bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

// A stand-in method for job-manager tests: it poses as "l2h", accepts every
// spec and has no models; subclasses define the fit.
class TestMethod : public Method {
 public:
  std::string_view name() const override { return "l2h"; }
  absl::Status Validate(const v1::JobSpec&, const v1::Dataset&,
                        const JobLimits&) const override {
    return absl::OkStatus();
  }
  double PeakMemoryBytes(const v1::JobSpec&, const v1::Dataset&) const override { return 0; }
  absl::StatusOr<std::unique_ptr<FittedModel>> Load(const std::string&) const override {
    return absl::UnimplementedError("a test method has no models");
  }
};

// A method whose fit spins until cancelled (counting how it ended), so job
// manager behaviour (cancel, full queue, shutdown) can be observed without
// racing a fast algorithm.
class BlockingMethod final : public TestMethod {
 public:
  absl::StatusOr<std::unique_ptr<FittedModel>> Fit(const LoadedDataset&, const v1::JobSpec&,
                                                   RunContext& ctx) const override {
    started.fetch_add(1);
    for (int step = 0; !ctx.Cancelled(); ++step) {
      ctx.Report(std::min(0.5, step * 1e-4), "blocking");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    saw_cancel.fetch_add(1);
    return absl::CancelledError("stopped");
  }
  mutable std::atomic<int> started{0};
  mutable std::atomic<int> saw_cancel{0};
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dendro_server_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    const char* which = std::getenv("DENDRO_TEST_CATALOG");
    if (which != nullptr && std::string(which) == "postgres") {
      auto& pg = testing::PostgresHarness::Get();
      if (!pg.Available()) GTEST_SKIP() << "PostgreSQL not available: " << pg.Why();
      catalog_ = pg.NewDatabase();
    }
  }
  void TearDown() override {
    StopServer();
    std::filesystem::remove_all(dir_);
  }

  void StartServer(ServerOptions opts = {}) {
    opts.listen = "127.0.0.1:0";
    opts.data_dir = dir_.string();
    if (opts.catalog.empty()) opts.catalog = catalog_;
    if (opts.drain_grace == absl::Seconds(30)) opts.drain_grace = absl::ZeroDuration();
    server_ = std::make_unique<DendroServer>(opts);
    ASSERT_TRUE(server_->Start().ok());
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    auto channel = grpc::CreateCustomChannel(absl_target(), grpc::InsecureChannelCredentials(),
                                             args);
    datasets_ = v1::DatasetService::NewStub(channel);
    jobs_ = v1::JobService::NewStub(channel);
    models_ = v1::ModelService::NewStub(channel);
  }
  // The catalogue the servers of this test use, opened directly (with no
  // server running) to inspect or doctor records.
  std::unique_ptr<Catalogue> OpenTestCatalogue() {
    std::filesystem::create_directories(dir_);
    auto cat = OpenCatalogue(catalog_, dir_.string());
    EXPECT_TRUE(cat.ok()) << cat.status();
    return cat.ok() ? *std::move(cat) : nullptr;
  }
  std::string absl_target() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  void StopServer() {
    if (server_) server_->Shutdown();
    server_.reset();
  }

  // Streams `x` (rows x cols) in chunks of `chunk` bytes.
  grpc::Status Upload(const std::vector<float>& x, int64_t rows, int64_t cols, v1::Dataset* out,
                      const std::vector<int64_t>* labels = nullptr, size_t chunk = 1 << 20,
                      bool transient = false, const std::string& prepare = "",
                      const std::string& append_to = "") {
    grpc::ClientContext ctx;
    auto writer = datasets_->UploadDataset(&ctx, out);
    v1::UploadDatasetRequest req;
    req.mutable_header()->set_rows(rows);
    req.mutable_header()->set_cols(cols);
    req.mutable_header()->set_has_labels(labels != nullptr);
    req.mutable_header()->set_transient(transient);
    req.mutable_header()->set_prepare(prepare);
    req.mutable_header()->set_append_to(append_to);
    writer->Write(req);
    const char* bytes = reinterpret_cast<const char*>(x.data());
    const size_t total = x.size() * sizeof(float);
    for (size_t off = 0; off < total; off += chunk) {
      req.set_data(std::string(bytes + off, std::min(chunk, total - off)));
      if (!writer->Write(req)) break;
    }
    if (labels) {
      req.set_labels(std::string(reinterpret_cast<const char*>(labels->data()),
                                 labels->size() * sizeof(int64_t)));
      writer->Write(req);
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Submits `spec` as it is.
  v1::Job SubmitSpec(const v1::JobSpec& spec, grpc::Status* st) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::Job job;
    *st = jobs_->SubmitJob(&ctx, req, &job);
    return job;
  }

  v1::Job Submit(const std::string& dataset, const std::string& model, grpc::Status* st) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_dataset_id(dataset);
    req.mutable_spec()->set_model_name(model);
    req.mutable_spec()->mutable_l2h();
    v1::Job job;
    *st = jobs_->SubmitJob(&ctx, req, &job);
    return job;
  }

  v1::Job Wait(const std::string& id, int seconds = 120) {
    grpc::ClientContext ctx;
    v1::WaitJobRequest req;
    req.set_id(id);
    req.mutable_timeout()->set_seconds(seconds);
    v1::Job job;
    EXPECT_TRUE(jobs_->WaitJob(&ctx, req, &job).ok());
    return job;
  }

  v1::Job WaitUntilState(const std::string& id, v1::JobState state) {
    for (;;) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_id(id);
      v1::Job job;
      EXPECT_TRUE(jobs_->GetJob(&ctx, req, &job).ok());
      if (job.state() == state || IsTerminal(job.state())) return job;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  grpc::Status Assign(const std::string& model, const std::vector<float>& x, int64_t rows,
                      int64_t cols, int level, v1::AssignResponse* resp) {
    grpc::ClientContext ctx;
    v1::AssignRequest req;
    req.mutable_model()->set_name(model);
    req.set_rows(rows);
    req.set_cols(cols);
    req.set_level(level);
    req.set_data(std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    return models_->Assign(&ctx, req, resp);
  }

  // The latest version of `model` as served by GetTree (JSON, with the
  // training points' leaves), parsed.
  absl::StatusOr<Hierarchy> ServedTree(const std::string& model) {
    grpc::ClientContext ctx;
    v1::GetTreeRequest req;
    req.mutable_model()->set_name(model);
    req.set_format(v1::TREE_FORMAT_JSON);
    req.set_include_points(true);
    v1::GetTreeResponse resp;
    const grpc::Status st = models_->GetTree(&ctx, req, &resp);
    if (!st.ok()) return absl::UnknownError("GetTree: " + st.error_message());
    return ParseJson(resp.content());
  }

  // Starts a server whose every job runs `method` (which must outlive it).
  void StartServerWithMethod(const Method* method, ServerOptions opts = {}) {
    opts.resolve_method = [method](const v1::JobSpec&) -> absl::StatusOr<const Method*> {
      return method;
    };
    StartServer(std::move(opts));
  }

  // Submits a job for model `name` on a fresh 60 x 6 dataset.
  v1::Job SubmitOnSmallDataset(const std::string& name) {
    const std::vector<float> x = MakeLogits(60, 2, 3, 1);
    v1::Dataset ds;
    EXPECT_TRUE(Upload(x, 60, 6, &ds).ok());
    grpc::Status st;
    v1::Job job = Submit(ds.id(), name, &st);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }

  std::string FitModel(const std::string& name, int n = 1500, int groups = 3, int per = 4) {
    const std::vector<float> x = MakeLogits(n, groups, per, 1);
    v1::Dataset ds;
    EXPECT_TRUE(Upload(x, n, groups * per, &ds).ok());
    grpc::Status st;
    v1::Job job = Submit(ds.id(), name, &st);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(Wait(job.id()).state(), v1::JOB_STATE_SUCCEEDED);
    return ds.id();
  }

  std::filesystem::path dir_;
  std::string catalog_;  // "" (SQLite in dir_) or a PostgreSQL URI
  std::unique_ptr<DendroServer> server_;
  std::unique_ptr<v1::DatasetService::Stub> datasets_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ModelService::Stub> models_;
};

}  // namespace dendro::server

#endif  // DENDRO_TESTS_SERVER_SERVER_FIXTURE_H_
