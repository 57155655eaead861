// Classifier serving over gRPC: single-row Predict latency and batch
// throughput against a running dendrod, through the C++ client library.
//
//   build/tests/bench/predict_latency --server 127.0.0.1:50051
//       [--groups 40 --classes-per-group 25] [--train-per-class 200]
//       [--test-per-class 50] [--superclasses 0] [--requests 2000]
//       [--warmup 200] [--model NAME]
//
// Generates ImageNet-shaped synthetic data (core/hppca/synthetic.h,
// d = 640), uploads the training rows, trains a hierarchical PPCA model
// through a job (q = r = 50), then:
//   * sends `requests` single-row Predict calls one after another (default
//     T, top-1, then flat) and reports p50 / p90 / p99 / max in ms;
//   * predicts every test row in batches (the client's own batching) and
//     reports rows/s, hierarchical and flat.
// With --model NAME the model is reused if it exists (no upload or training).
// DENDRO_API_KEY, if set, is sent with every call.
// Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/hppca/synthetic.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Args {
  std::string server = "127.0.0.1:50051";
  std::string model = "latency-bench";
  int groups = 40, classes_per_group = 25;
  int train_per_class = 200, test_per_class = 50;
  int superclasses = 0;
  int requests = 2000, warmup = 200;
  uint64_t seed = 1;
};

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: predict_latency [--server HOST:PORT] [--model NAME] [--groups G]\n"
               "  [--classes-per-group C] [--train-per-class N] [--test-per-class M]\n"
               "  [--superclasses S] [--requests R] [--warmup W] [--seed S]\n");
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (k == "--server") a.server = next();
    else if (k == "--model") a.model = next();
    else if (k == "--groups") a.groups = std::stoi(next());
    else if (k == "--classes-per-group") a.classes_per_group = std::stoi(next());
    else if (k == "--train-per-class") a.train_per_class = std::stoi(next());
    else if (k == "--test-per-class") a.test_per_class = std::stoi(next());
    else if (k == "--superclasses") a.superclasses = std::stoi(next());
    else if (k == "--requests") a.requests = std::stoi(next());
    else if (k == "--warmup") a.warmup = std::stoi(next());
    else if (k == "--seed") a.seed = std::stoull(next());
    else Usage();
  }
  return a;
}

template <typename T>
T OrDie(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

// Percentiles (ms) of single-row calls over the test rows, in order.
nlohmann::json SingleRowLatency(dendro::client::Client& client, const dendro::v1::ModelRef& ref,
                                const dendro::RowMatrixF& x, const Args& a, bool flat) {
  dendro::client::PredictOptions o;
  o.flat = flat;
  std::vector<double> ms;
  ms.reserve(a.requests);
  const int64_t n = x.rows();
  for (int i = 0; i < a.warmup + a.requests; ++i) {
    const dendro::MatrixView row(x.data() + (i % n) * x.cols(), 1, x.cols());
    const auto t0 = Clock::now();
    OrDie(client.Predict(ref, row, o), "predict one row");
    if (i >= a.warmup) ms.push_back(Since(t0) * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * static_cast<double>(ms.size())))];
  };
  return {{"requests", ms.size()}, {"p50_ms", pct(0.50)}, {"p90_ms", pct(0.90)},
          {"p99_ms", pct(0.99)},   {"max_ms", ms.back()}};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  dendro::client::ClientOptions co;
  co.target = a.server;
  // A server with --auth_keys: the key comes from the environment.
  if (const char* key = std::getenv("DENDRO_API_KEY"); key != nullptr) co.api_key = key;
  auto client = OrDie(dendro::client::Client::Connect(co), "connect");
  const dendro::TwoLevelGenerator gen(
      dendro::ImageNetLikeSpec(a.groups, a.classes_per_group, a.seed));
  nlohmann::json out;
  out["classes"] = gen.num_classes();
  out["server"] = a.server;

  dendro::v1::ModelRef ref;
  ref.set_name(a.model);
  if (!client->GetModel(ref).ok()) {
    auto t0 = Clock::now();
    const dendro::LabelledData train = gen.Sample(a.train_per_class, 11);
    const dendro::MatrixView xtrain(train.x.data(), train.x.rows(), train.x.cols());
    const auto ds = OrDie(client->UploadMatrix(xtrain, train.labels, a.model), "upload");
    out["upload_seconds"] = Since(t0);
    dendro::v1::JobSpec spec;
    spec.set_dataset_id(ds.id());
    spec.set_model_name(a.model);
    spec.mutable_hppca()->set_superclasses(a.superclasses);
    spec.mutable_hppca()->set_seed(a.seed);
    t0 = Clock::now();
    const auto submitted = OrDie(client->SubmitJob(spec), "submit");
    const auto job = OrDie(client->WatchJob(submitted.id(), nullptr), "watch");
    if (job.state() != dendro::v1::JOB_STATE_SUCCEEDED) {
      std::fprintf(stderr, "training job %s ended in state %d: %s\n", job.id().c_str(),
                   job.state(), job.error().message().c_str());
      return 1;
    }
    out["train_job_seconds"] = Since(t0);
    if (absl::Status s = client->DeleteDataset(ds.id()); !s.ok()) {
      std::fprintf(stderr, "delete dataset: %s\n", s.ToString().c_str());
    }
  }
  const auto model = OrDie(client->GetModel(ref), "get model");
  out["model_version"] = model.version();
  out["superclasses"] = model.metadata().count("superclasses")
                            ? model.metadata().at("superclasses")
                            : std::string("?");

  const dendro::LabelledData test = gen.Sample(a.test_per_class, 22);
  out["single_row"] = SingleRowLatency(*client, ref, test.x, a, /*flat=*/false);
  out["single_row_flat"] = SingleRowLatency(*client, ref, test.x, a, /*flat=*/true);
  std::fprintf(stderr, "single row: %s\nsingle row, flat: %s\n",
               out["single_row"].dump().c_str(), out["single_row_flat"].dump().c_str());

  const dendro::MatrixView xtest(test.x.data(), test.x.rows(), test.x.cols());
  for (const bool flat : {false, true}) {
    dendro::client::PredictOptions o;
    o.flat = flat;
    const auto t0 = Clock::now();
    const auto p = OrDie(client->Predict(ref, xtest, o), "batch predict");
    const double secs = Since(t0);
    int64_t ok = 0;
    for (int64_t i = 0; i < xtest.rows(); ++i) ok += p.labels[i * p.top_k] == test.labels[i];
    out[flat ? "batch_flat" : "batch"] = {
        {"rows", xtest.rows()},
        {"seconds", secs},
        {"rows_per_second", static_cast<double>(xtest.rows()) / secs},
        {"accuracy", static_cast<double>(ok) / static_cast<double>(xtest.rows())},
        {"top_t", p.top_t}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
