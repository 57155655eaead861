// Hierarchical PPCA benchmark on synthetic data shaped like the paper's
// ImageNet experiments (two-level class structure, d = 640, q = r = 50).
//
//   build/tests/bench/hppca_bench --groups 32 --classes-per-group 32
//       --train-per-class 200 --test-per-class 50 [--superclasses S]
//       [--eval-rows N] [--export DIR]
//
// Reports training time and model size, super-class recovery (ARI against the
// generating groups), flat vs hierarchical (T = 1..max_t) accuracy, super-
// class accuracy, operation-count (eq. 12) and measured wall-clock speed-up,
// batch throughput, and single-row latency. With --export, writes the model
// (HppcaModel::Save) and the evaluation rows/labels/flat predictions as .npy
// for hppca_numpy_flat.py. Prints one JSON object at the end.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/hppca/hppca.h"
#include "core/hppca/synthetic.h"
#include "core/io/atomic_file.h"
#include "core/io/npy.h"
#include "core/metrics/metrics.h"
#include "nlohmann/json.hpp"
#include "server/base/memory.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// CPU seconds of every thread of the process (with OMP_NUM_THREADS=1 a
// measure of work that another process on the same cores barely changes).
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Args {
  int train_per_class = 200, test_per_class = 50;
  int q = 50, r = 50, superclasses = 0, max_t = 5, kmeans_iterations = 50;
  int64_t eval_rows = 0;  // 0: all test rows
  int block_rows = 0;  // 0: the library's automatic choice
  int latency_rows = 300;
  int repeats = 3;  // timed predictions: the fastest of this many runs
  bool raw = false;
  bool skip_flat = false;
  bool glibc_defaults = false;  // keep glibc's allocator settings, not dendrod's
  uint64_t seed = 1;
  int seeding_rank = -1;  // -1: HppcaOptions' default; 0: all q directions
  std::string export_dir;
  std::string load_dir;  // evaluate a model exported by an earlier run
  // Generator difficulty: ImageNetLikeSpec unless overridden (paper-like
  // behaviour at K = 1,000: flat accuracy ~0.63, super-class accuracy ~0.8
  // at T = 1 rising to ~0.99 at T = 5).
  dendro::TwoLevelSpec spec = dendro::ImageNetLikeSpec(32, 32);
};

void Usage() {
  std::fprintf(stderr,
               "usage: hppca_bench [--groups G] [--classes-per-group C] [--dim D]\n"
               "  [--train-per-class N] [--test-per-class M] [--q Q] [--r R]\n"
               "  [--superclasses S] [--max-t T] [--eval-rows N] [--block-rows B]\n"
               "  [--latency-rows L] [--repeats R] [--raw] [--skip-flat] [--seed S]\n"
               "  [--seeding-rank N (0: all q)]\n"
               "  [--glibc-defaults]\n"
               "  [--export DIR] [--load DIR]\n"
               "  [--group-spread x] [--class-spread x] [--group-scale x]\n"
               "  [--class-scale x] [--noise x] [--group-rank n] [--class-rank n]\n");
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (k == "--groups") a.spec.groups = std::stoi(next());
    else if (k == "--classes-per-group") a.spec.classes_per_group = std::stoi(next());
    else if (k == "--dim") a.spec.dim = std::stoi(next());
    else if (k == "--train-per-class") a.train_per_class = std::stoi(next());
    else if (k == "--test-per-class") a.test_per_class = std::stoi(next());
    else if (k == "--q") a.q = std::stoi(next());
    else if (k == "--r") a.r = std::stoi(next());
    else if (k == "--superclasses") a.superclasses = std::stoi(next());
    else if (k == "--max-t") a.max_t = std::stoi(next());
    else if (k == "--kmeans-iterations") a.kmeans_iterations = std::stoi(next());
    else if (k == "--eval-rows") a.eval_rows = std::stoll(next());
    else if (k == "--block-rows") a.block_rows = std::stoi(next());
    else if (k == "--latency-rows") a.latency_rows = std::stoi(next());
    else if (k == "--repeats") a.repeats = std::stoi(next());
    else if (k == "--raw") a.raw = true;
    else if (k == "--skip-flat") a.skip_flat = true;
    else if (k == "--glibc-defaults") a.glibc_defaults = true;
    else if (k == "--seed") a.seed = std::stoull(next());
    else if (k == "--seeding-rank") a.seeding_rank = std::stoi(next());
    else if (k == "--export") a.export_dir = next();
    else if (k == "--load") a.load_dir = next();
    else if (k == "--group-spread") a.spec.group_spread = std::stod(next());
    else if (k == "--class-spread") a.spec.class_spread = std::stod(next());
    else if (k == "--group-scale") a.spec.group_scale = std::stod(next());
    else if (k == "--class-scale") a.spec.class_scale = std::stod(next());
    else if (k == "--noise") a.spec.noise = std::stod(next());
    else if (k == "--group-rank") a.spec.group_rank = std::stoi(next());
    else if (k == "--class-rank") a.spec.class_rank = std::stoi(next());
    else Usage();
  }
  return a;
}

class StderrProgress final : public dendro::RunContext {
 public:
  bool Cancelled() const override { return false; }
  void Report(double f, std::string_view stage) override {
    const int pct = static_cast<int>(f * 10) * 10;
    if (pct != last_ || stage != stage_) {
      last_ = pct;
      stage_ = std::string(stage);
      std::fprintf(stderr, "  %-14s %3d%%\n", stage_.c_str(), pct);
    }
  }

 private:
  int last_ = -1;
  std::string stage_;
};

int64_t DirBytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  // dendrod's allocator settings (without them the K = 10,000 training spent
  // 91 s in page faults, docs/benchmarks.md); --glibc-defaults leaves glibc's.
  if (!a.glibc_defaults) dendro::server::TuneAllocator();
  nlohmann::json out;
  dendro::TwoLevelSpec spec = a.spec;
  spec.seed = a.seed;
  const int64_t dim = spec.dim;
  const dendro::TwoLevelGenerator gen(spec);
  out["threads"] = omp_get_max_threads();
  out["dim"] = dim;
  std::optional<dendro::HppcaModel> model_holder;
  dendro::LabelledData test;
  if (!a.load_dir.empty()) {
    auto t0 = Clock::now();
    auto m = dendro::HppcaModel::Load(a.load_dir + "/model");
    Check(m.status(), "load");
    model_holder.emplace(*std::move(m));
    auto x = dendro::ReadNpyFloat32(a.load_dir + "/eval_x.npy");
    auto y = dendro::ReadNpyInt(a.load_dir + "/eval_y.npy");
    Check(x.status(), "read eval_x");
    Check(y.status(), "read eval_y");
    test.x = Eigen::Map<const dendro::RowMatrixF>(x->data.data(), x->shape[0], x->shape[1]);
    test.labels = std::move(y->data);
    std::fprintf(stderr, "loaded model (%d classes, S=%d) and %lld eval rows in %.1f s\n",
                 model_holder->num_classes(), model_holder->num_superclasses(),
                 static_cast<long long>(test.x.rows()), Since(t0));
    out["loaded_from"] = a.load_dir;
  } else {
    out["train_per_class"] = a.train_per_class;
    out["test_per_class"] = a.test_per_class;
    auto t0 = Clock::now();
    const dendro::LabelledData train = gen.Sample(a.train_per_class, 11);
    test = gen.Sample(a.test_per_class, 22);
    out["generate_seconds"] = Since(t0);
    std::fprintf(stderr, "data: %d classes, %lld train rows, %lld test rows, d=%lld (%.1f s)\n",
                 gen.num_classes(), static_cast<long long>(train.x.rows()),
                 static_cast<long long>(test.x.rows()), static_cast<long long>(dim), Since(t0));

    dendro::HppcaOptions opt;
    opt.q = a.q;
    opt.r = a.r;
    opt.superclasses = a.superclasses;
    opt.raw_data_clustering = a.raw;
    opt.kmeans_iterations = a.kmeans_iterations;
    opt.default_top_t = 5;
    opt.seed = a.seed;
    if (a.seeding_rank >= 0) opt.seeding_rank = a.seeding_rank;
    StderrProgress progress;
    t0 = Clock::now();
    const dendro::MatrixView xtrain(train.x.data(), train.x.rows(), train.x.cols());
    auto model_or = dendro::FitHppca(xtrain, train.labels, opt, progress);
    Check(model_or.status(), "fit");
    const double train_seconds = Since(t0);
    model_holder.emplace(*std::move(model_or));
    const auto& st = model_holder->fit_stats();
    out["train_seconds"] = train_seconds;
    out["train_class_seconds"] = st.class_seconds;
    out["train_cluster_seconds"] = st.cluster_seconds;
    out["train_seed_seconds"] = st.seed_seconds;
    out["kmeans_iterations"] = st.kmeans_iterations;
    out["kmeans_converged"] = st.kmeans_converged;
    std::fprintf(stderr,
                 "train: %.1f s (classes %.1f s, clustering %.1f s of which seeding %.1f s, %d "
                 "k-means rounds%s), S=%d, model %.1f MB in memory\n",
                 train_seconds, st.class_seconds, st.cluster_seconds, st.seed_seconds,
                 st.kmeans_iterations, st.kmeans_converged ? ", converged" : "",
                 model_holder->num_superclasses(), model_holder->MemoryBytes() / 1e6);
  }
  const dendro::HppcaModel& model = *model_holder;
  const int32_t k = model.num_classes();
  const int32_t s = model.num_superclasses();
  out["classes"] = k;
  out["superclasses"] = s;
  out["model_memory_bytes"] = model.MemoryBytes();

  // Super-class recovery.
  if (s > 0 && a.load_dir.empty()) {
    std::vector<int64_t> truth(k), pred(k);
    for (int32_t c = 0; c < k; ++c) {
      truth[c] = gen.group_of(c);
      pred[c] = model.superclass_of(c);
    }
    auto ari = dendro::AdjustedRandIndex(truth, pred);
    Check(ari.status(), "ari");
    out["superclass_ari"] = *ari;
    std::fprintf(stderr, "super-class ARI vs generating groups: %.4f\n", *ari);
  }

  // Evaluation rows: all test rows, or an evenly spread subset.
  int64_t n_eval = test.x.rows();
  if (a.eval_rows > 0 && a.eval_rows < n_eval) {
    const int64_t stride = n_eval / a.eval_rows;
    dendro::LabelledData sub;
    sub.x.resize(a.eval_rows, dim);
    for (int64_t i = 0; i < a.eval_rows; ++i) {
      sub.x.row(i) = test.x.row(i * stride);
      sub.labels.push_back(test.labels[i * stride]);
    }
    test = std::move(sub);
    n_eval = a.eval_rows;
  }
  out["eval_rows"] = n_eval;
  out["repeats"] = a.repeats;
  out["block_rows"] = a.block_rows;
  const dendro::MatrixView xtest(test.x.data(), n_eval, dim);
  auto accuracy = [&](const dendro::HppcaPrediction& p) {
    int64_t ok = 0;
    for (int64_t i = 0; i < n_eval; ++i) ok += p.labels[i * p.top_k] == test.labels[i];
    return static_cast<double>(ok) / static_cast<double>(n_eval);
  };

  // Runs a prediction `repeats` times; returns the result and the fastest
  // time (wall and CPU, each the smallest of the runs).
  double last_cpu = 0;
  auto timed = [&](const dendro::HppcaPredictOptions& o, double* seconds) {
    absl::StatusOr<dendro::HppcaPrediction> best;
    *seconds = 1e300;
    last_cpu = 1e300;
    for (int rep = 0; rep < std::max(1, a.repeats); ++rep) {
      const double c1 = ProcessCpuSeconds();
      const auto t1 = Clock::now();
      auto p = model.Predict(xtest, o);
      *seconds = std::min(*seconds, Since(t1));
      last_cpu = std::min(last_cpu, ProcessCpuSeconds() - c1);
      Check(p.status(), "predict");
      best = std::move(p);
    }
    return *std::move(best);
  };
  dendro::HppcaPredictOptions popt;
  popt.block_rows = a.block_rows;
  double flat_seconds = 0;
  std::vector<int64_t> flat_pred;
  if (!a.skip_flat) {
    popt.flat = true;
    auto flat = timed(popt, &flat_seconds);
    const double acc = accuracy(flat);
    flat_pred = flat.labels;
    out["flat"] = {{"accuracy", acc},
                   {"seconds", flat_seconds},
                   {"cpu_seconds", last_cpu},
                   {"rows_per_second", n_eval / flat_seconds}};
    std::fprintf(stderr, "flat: accuracy %.4f, %.2f s, %.0f rows/s\n", acc, flat_seconds,
                 n_eval / flat_seconds);
  }
  popt.flat = false;
  nlohmann::json hier = nlohmann::json::array();
  for (int32_t t = 1; t <= std::min(a.max_t, std::max(s, 1)) && s > 0; ++t) {
    popt.top_t = t;
    double secs = 0;
    auto pred = timed(popt, &secs);
    auto* p = &pred;
    int64_t super_ok = 0;
    for (int64_t i = 0; i < n_eval; ++i) {
      const int32_t truth_super = model.superclass_of(model.ClassOfLabel(test.labels[i]));
      for (int32_t j = 0; j < t; ++j) super_ok += p->superclasses[i * t + j] == truth_super;
    }
    const double acc = accuracy(pred);
    const double ops = p->OperationSpeedup(k, s);
    const double measured = flat_seconds > 0 ? flat_seconds / secs : 0.0;
    hier.push_back({{"t", t},
                    {"accuracy", acc},
                    {"super_accuracy", static_cast<double>(super_ok) / n_eval},
                    {"seconds", secs},
                    {"cpu_seconds", last_cpu},
                    {"rows_per_second", n_eval / secs},
                    {"op_speedup", ops},
                    {"measured_speedup", measured}});
    std::fprintf(stderr,
                 "T=%d: accuracy %.4f, super-accuracy %.4f, %.2f s, %.0f rows/s, op-count "
                 "speed-up %.2f%s\n",
                 t, acc, static_cast<double>(super_ok) / n_eval, secs, n_eval / secs, ops,
                 flat_seconds > 0 ? absl::StrFormat(", measured %.2f (ratio %.2f)", measured,
                                                    ops > 0 ? measured / ops : 0.0)
                                        .c_str()
                                  : " (flat skipped: no measured speed-up)");
  }
  out["hierarchical"] = hier;

  // What a request naming neither flat nor T gets: the model's default
  // scoring (flat where its cost model says the hierarchy would not pay).
  {
    dendro::HppcaPredictOptions def;
    def.block_rows = a.block_rows;
    double secs = 0;
    auto pred = timed(def, &secs);
    const dendro::HppcaPredictCost cost = model.predict_cost();
    const double measured = flat_seconds > 0 ? flat_seconds / secs : 0.0;
    out["default"] = {{"scoring", model.default_flat() ? "flat" : "hierarchical"},
                      {"accuracy", accuracy(pred)},
                      {"seconds", secs},
                      {"cpu_seconds", last_cpu},
                      {"measured_speedup", measured},
                      {"cost_flat", cost.flat},
                      {"cost_hierarchical", cost.hierarchical}};
    std::fprintf(stderr,
                 "default (%s; cost model: flat %.0f, hierarchical %.0f per row): accuracy %.4f, "
                 "%.2f s, measured speed-up over flat %.2f\n",
                 model.default_flat() ? "flat" : "hierarchical", cost.flat, cost.hierarchical,
                 accuracy(pred), secs, measured);
  }

  // Single-row latency (default T, top-1), rows taken in order.
  {
    std::vector<double> lat;
    dendro::HppcaPredictOptions one;
    const int64_t n = std::min<int64_t>(a.latency_rows, n_eval);
    for (int64_t i = 0; i < n; ++i) {
      const dendro::MatrixView row(test.x.data() + i * dim, 1, dim);
      const auto t1 = Clock::now();
      auto p = model.Predict(row, one);
      lat.push_back(Since(t1) * 1e3);
      Check(p.status(), "predict one");
    }
    std::sort(lat.begin(), lat.end());
    if (!lat.empty()) {
      const double p50 = lat[lat.size() / 2];
      const double p99 = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
      out["single_row_ms"] = {{"p50", p50}, {"p99", p99}, {"rows", lat.size()}};
      std::fprintf(stderr, "single-row predict (T=%d): p50 %.3f ms, p99 %.3f ms\n",
                   model.options().default_top_t, p50, p99);
    }
  }

  if (!a.export_dir.empty() && a.load_dir.empty()) {
    const std::string dir = a.export_dir;
    std::filesystem::create_directories(dir + "/model");
    const auto t0 = Clock::now();
    Check(model.Save(dir + "/model"), "save");
    out["save_seconds"] = Since(t0);
    out["model_disk_bytes"] = DirBytes(dir + "/model");
    const int64_t shape2[2] = {n_eval, dim};
    const int64_t shape1[1] = {n_eval};
    Check(dendro::WriteNpy(dir + "/eval_x.npy",
                           absl::MakeConstSpan(test.x.data(), n_eval * dim), shape2),
          "write eval_x");
    Check(dendro::WriteNpy(dir + "/eval_y.npy", absl::MakeConstSpan(test.labels), shape1),
          "write eval_y");
    if (!flat_pred.empty()) {
      Check(dendro::WriteNpy(dir + "/flat_pred.npy", absl::MakeConstSpan(flat_pred), shape1),
            "write flat_pred");
    }
    std::fprintf(stderr, "exported model (%.1f MB on disk) and %lld eval rows to %s\n",
                 DirBytes(dir + "/model") / 1e6, static_cast<long long>(n_eval), dir.c_str());
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
