// gHHC benchmark: time, peak RSS and dendrogram purity on synthetic
// hierarchical Gaussian data (or on given .npy files). A CLI, not a ctest:
//
//   ghhc_bench --n=100000 [--dim=64] [--m=1000] [--triples=0] [--threads=0]
//              [--branching=4,5,5] [--point-scale=0.35] [--seed=1]
//              [--batch=100] [--lr=0.01] [--k=5] [--margin=0.25]
//              [--margin-every=10] [--margin-steps=1] [--margin-lr=0.001]
//              [--gumbel=1] [--init-sample=0] [--knn=ivf|hnsw]
//              [--ivf-list=1024] [--ivf-probes=8] [--hnsw-m=12] [--hnsw-ef=40]
//              [--link=sigmoid] [--learn-points=0] [--point-lr=0.001]
//              [--val=2000] [--val-every=0] [--step-budget=1]
//              [--choose-points=0|1]  (absent: the default rule)
//              [--standardize=auto|on|off]  GhhcOptions::standardize (default auto)
//              [--tree=ward|nodes]  GhhcOptions::tree (default ward)
//              [--assign-rows=R]  also time AssignGhhcLeaves on the first R
//                                 rows: one call for all R, then single rows
//              [--hac]            also run Dendro's O(N^2) average linkage
//              [--write-npy=PREFIX]  write PREFIX_x.npy / PREFIX_y.npy and exit
//              [--dump-tree=PREFIX]  write both trees as PREFIX_{coarse,refined}_
//                                 {parent,height}.npy and PREFIX_point_leaf.npy
//              [--warm-base-rows=B]  warm start (FitGhhcFrom): a cold fit of
//                                 the first B rows, then a warm fit of all
//                                 rows from it, each reported on its own
//                                 line ("ghhc_base", "ghhc_warm") before the
//                                 cold fit of all rows
//   ghhc_bench --x=X.npy --y=Y.npy [...]   data from files (labels int)
//
// Prints one line of key=value pairs; with labels, ari_k is the adjusted
// Rand index of the returned (refined) tree cut into k = the number of
// distinct labels (Hierarchy::CutToK on the leaf clusters, each point taking
// its leaf's cluster; ari_k = -1 when the tree has fewer than k leaf clusters)
// and ari_k_coarse that of the coarse tree cut at the reachable count nearest
// to k (at or above it when there is one); peak_rss_mb is this process's
// getrusage maximum resident set (the data generation is included; run with
// /usr/bin/time -v for an outside view). tests/bench/ghhc_fastcluster.py runs
// fastcluster's average linkage on the same data.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/common/malloc_tuning.h"
#include "core/common/run_context.h"
#include "core/ghhc/ghhc.h"
#include "core/ghhc/init.h"
#include "core/ghhc/synthetic.h"
#include "core/io/npy.h"
#include "core/metrics/metrics.h"

namespace dendro {
namespace {

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

bool Flag(std::string_view arg, std::string_view name, std::string* value) {
  if (arg.substr(0, name.size()) != name) return false;
  if (arg.size() == name.size()) {
    *value = "1";
    return true;
  }
  if (arg[name.size()] != '=') return false;
  *value = std::string(arg.substr(name.size() + 1));
  return true;
}

// *out = the parsed choice, or false after printing why not.
template <typename T>
bool SetChoice(const absl::StatusOr<T>& parsed, T* out) {
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
    return false;
  }
  *out = *parsed;
  return true;
}

int Main(int argc, char** argv) {
  HierarchicalGaussianSpec spec;
  // 100 leaf classes; points spread so that average linkage reaches a
  // dendrogram purity of about 0.99 at N = 10,000 but a truncated tree does not
  // come for free.
  spec.point_scale = 0.35;
  GhhcOptions opt;
  std::string x_path, y_path, write_prefix, dump_prefix;
  bool run_hac = false;
  int64_t assign_rows = 0, warm_base_rows = 0;
  for (int a = 1; a < argc; ++a) {
    std::string v;
    const std::string_view arg = argv[a];
    if (Flag(arg, "--n", &v))
      spec.n = std::atoll(v.c_str());
    else if (Flag(arg, "--dim", &v))
      spec.dim = std::atoi(v.c_str());
    else if (Flag(arg, "--branching", &v)) {
      if (std::sscanf(v.c_str(), "%d,%d,%d", &spec.branching[0], &spec.branching[1],
                      &spec.branching[2]) != 3) {
        std::fprintf(stderr, "--branching wants b0,b1,b2\n");
        return 2;
      }
    } else if (Flag(arg, "--point-scale", &v))
      spec.point_scale = std::atof(v.c_str());
    else if (Flag(arg, "--seed", &v))
      spec.seed = opt.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (Flag(arg, "--m", &v))
      opt.internal_nodes = std::atoi(v.c_str());
    else if (Flag(arg, "--triples", &v))
      opt.triples = std::atoll(v.c_str());
    else if (Flag(arg, "--batch", &v))
      opt.batch_size = std::atoi(v.c_str());
    else if (Flag(arg, "--lr", &v))
      opt.learning_rate = std::atof(v.c_str());
    else if (Flag(arg, "--k", &v))
      opt.neighbors = std::atoi(v.c_str());
    else if (Flag(arg, "--margin", &v))
      opt.margin = std::atof(v.c_str());
    else if (Flag(arg, "--margin-every", &v))
      opt.margin_every = std::atoi(v.c_str());
    else if (Flag(arg, "--margin-steps", &v))
      opt.margin_steps = std::atoi(v.c_str());
    else if (Flag(arg, "--margin-lr", &v))
      opt.margin_learning_rate = std::atof(v.c_str());
    else if (Flag(arg, "--gumbel", &v))
      opt.gumbel_temperature = std::atof(v.c_str());
    else if (Flag(arg, "--learn-points", &v))
      opt.learn_points = v != "0";
    else if (Flag(arg, "--choose-points", &v)) {
      // 1: always choose; 0: never (the points fixed unless --learn-points);
      // absent: the default, choose up to choose_points_max_rows rows.
      opt.choose_points = v != "0";
      if (v == "0") opt.choose_points_max_rows = 0;
    } else if (Flag(arg, "--standardize", &v)) {
      if (!SetChoice(ParseGhhcStandardize(v), &opt.standardize)) return 2;
    } else if (Flag(arg, "--tree", &v)) {
      if (!SetChoice(ParseGhhcTree(v), &opt.tree)) return 2;
    } else if (Flag(arg, "--step-budget", &v))
      opt.step_budget = v != "0";
    else if (Flag(arg, "--val", &v))
      opt.validation_triples = std::atoi(v.c_str());
    else if (Flag(arg, "--val-every", &v))
      opt.validate_every = std::atoi(v.c_str());
    else if (Flag(arg, "--point-lr", &v))
      opt.point_learning_rate = std::atof(v.c_str());
    else if (Flag(arg, "--init-sample", &v))
      opt.init_sample = std::atoi(v.c_str());
    else if (Flag(arg, "--threads", &v))
      opt.num_threads = std::atoi(v.c_str());
    else if (Flag(arg, "--knn", &v)) {
      if (v == "ivf")
        opt.knn_method = GhhcKnn::kIvf;
      else if (v == "hnsw")
        opt.knn_method = GhhcKnn::kHnsw;
      else {
        std::fprintf(stderr, "--knn: ivf or hnsw\n");
        return 2;
      }
    } else if (Flag(arg, "--ivf-list", &v))
      opt.ivf_list_size = std::atoll(v.c_str());
    else if (Flag(arg, "--ivf-probes", &v))
      opt.ivf_probes = std::atoi(v.c_str());
    else if (Flag(arg, "--hnsw-m", &v))
      opt.hnsw_m = std::atoi(v.c_str());
    else if (Flag(arg, "--hnsw-ef", &v))
      opt.hnsw_ef_construction = std::atoi(v.c_str());
    else if (Flag(arg, "--link", &v)) {
      if (v == "sigmoid")
        opt.link = GhhcLink::kSigmoid;
      else if (v == "softplus")
        opt.link = GhhcLink::kSoftplus;
      else {
        std::fprintf(stderr, "--link: sigmoid or softplus\n");
        return 2;
      }
    } else if (Flag(arg, "--hac", &v))
      run_hac = true;
    else if (Flag(arg, "--assign-rows", &v))
      assign_rows = std::atoll(v.c_str());
    else if (Flag(arg, "--write-npy", &v))
      write_prefix = v;
    else if (Flag(arg, "--dump-tree", &v))
      dump_prefix = v;
    else if (Flag(arg, "--x", &v))
      x_path = v;
    else if (Flag(arg, "--warm-base-rows", &v))
      warm_base_rows = std::atoll(v.c_str());
    else if (Flag(arg, "--y", &v))
      y_path = v;
    else {
      std::fprintf(stderr, "unknown flag %s (see the comment at the top of ghhc_bench.cc)\n",
                   argv[a]);
      return 2;
    }
  }
  std::vector<float> x;
  std::vector<int64_t> y;
  int64_t n = 0, d = 0;
  if (!x_path.empty()) {
    auto xa = ReadNpyFloat32(x_path);
    if (!xa.ok() || xa->shape.size() != 2) {
      std::fprintf(stderr, "%s: %s\n", x_path.c_str(),
                   xa.ok() ? "need a 2-D array" : std::string(xa.status().message()).c_str());
      return 1;
    }
    n = xa->shape[0];
    d = xa->shape[1];
    x = std::move(xa->data);
    if (!y_path.empty()) {
      auto ya = ReadNpyInt(y_path);
      if (!ya.ok() || static_cast<int64_t>(ya->data.size()) != n) {
        std::fprintf(stderr, "%s: bad labels\n", y_path.c_str());
        return 1;
      }
      y = std::move(ya->data);
    }
  } else {
    HierarchicalGaussianData data = GenerateHierarchicalGaussian(spec);
    n = spec.n;
    d = spec.dim;
    x = std::move(data.x);
    y = std::move(data.leaf);
  }
  if (!write_prefix.empty()) {
    const int64_t xs[2] = {n, d};
    const int64_t ys[1] = {n};
    absl::Status s = WriteNpy(write_prefix + "_x.npy", absl::MakeConstSpan(x), xs);
    if (s.ok()) s = WriteNpy(write_prefix + "_y.npy", absl::MakeConstSpan(y), ys);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("wrote %s_x.npy (%lld x %lld) and %s_y.npy\n", write_prefix.c_str(),
                static_cast<long long>(n), static_cast<long long>(d), write_prefix.c_str());
    return 0;
  }
  const MatrixView view(x.data(), n, d);
  NullRunContext ctx;
  auto report = [&](const char* tag, const GhhcResult& res, int64_t rows, double secs) {
    double dp = -1, coarse_dp = -1, leaf_purity = -1, ari_k = -1, ari_k_coarse = -1;
    int32_t true_k = 0, coarse_k = 0;
    if (!y.empty()) {
      const std::vector<int64_t> ys(y.begin(), y.begin() + rows);
      std::vector<int64_t> labels(y.begin(), y.begin() + rows);
      std::sort(labels.begin(), labels.end());
      true_k = static_cast<int32_t>(std::unique(labels.begin(), labels.end()) - labels.begin());
      // Points take the cluster of their leaf in the cut of the leaf-cluster tree.
      auto ari_at = [&](const Hierarchy& h, int32_t k) -> double {
        auto cut = h.CutToK(k);
        if (!cut.ok()) return -1;
        std::vector<int64_t> pred(rows);
        for (int64_t i = 0; i < rows; ++i) pred[i] = (*cut)[h.point_leaf()[i]];
        auto a = AdjustedRandIndex(ys, pred);
        return a.ok() ? *a : -1;
      };
      if (res.hierarchy.num_leaves() >= true_k) ari_k = ari_at(res.hierarchy, true_k);
      const std::vector<int32_t> levels = res.coarse_hierarchy.ReachableLevels();
      for (int32_t lv : levels) {
        if (coarse_k == 0 || (lv >= true_k && coarse_k < true_k) ||
            (lv < true_k && lv > coarse_k)) {
          coarse_k = lv;
        }
      }
      if (coarse_k > 0) ari_k_coarse = ari_at(res.coarse_hierarchy, coarse_k);
      auto v = DendrogramPurity(res.hierarchy, {}, ys);
      if (v.ok()) dp = *v;
      auto vc = DendrogramPurity(res.coarse_hierarchy, {}, ys);
      if (vc.ok()) coarse_dp = *vc;
      const std::vector<int64_t> pl(res.hierarchy.point_leaf().begin(),
                                    res.hierarchy.point_leaf().end());
      auto lp = LeafPurity(ys, pl);
      if (lp.ok()) leaf_purity = *lp;
    }
    const GhhcStats& s = res.stats;
    std::printf(
        "%s n=%lld d=%lld m=%d triples=%lld seconds=%.2f knn_s=%.2f init_s=%.2f train_s=%.2f "
        "extract_s=%.2f peak_rss_mb=%.0f dp=%.4f coarse_dp=%.4f leaf_purity=%.4f leaves=%d "
        "pruned=%d "
        "obj0=%.5g "
        "obj1=%.5g "
        "exact_knn=%d val_acc=%.4f best_val_acc=%.4f kept_val_acc=%.4f kept_batches=%lld "
        "true_k=%d ari_k=%.4f coarse_k=%d ari_k_coarse=%.4f standardized=%d\n",
        tag, static_cast<long long>(rows), static_cast<long long>(d), res.model.num_nodes(),
        static_cast<long long>(s.triples), secs, s.knn_seconds, s.init_seconds, s.train_seconds,
        s.extract_seconds, PeakRssMb(), dp, coarse_dp, leaf_purity, s.leaf_clusters, s.pruned_nodes,
        s.initial_objective, s.final_objective, s.exact_knn ? 1 : 0, s.final_validation_accuracy,
        s.best_validation_accuracy, s.kept_validation_accuracy,
        static_cast<long long>(s.kept_batches), true_k, ari_k, coarse_k, ari_k_coarse,
        res.model.scale.empty() ? 0 : 1);
    std::fflush(stdout);
  };
  // One fit, timed; on failure its error is printed, naming `what`.
  auto timed = [](const char* what, auto fit) -> std::optional<std::pair<GhhcResult, double>> {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<GhhcResult> r = fit();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", what, std::string(r.status().message()).c_str());
      return std::nullopt;
    }
    return std::make_pair(*std::move(r), secs);
  };
  if (warm_base_rows > 0) {
    const int64_t b = std::min(warm_base_rows, n);
    auto base =
        timed("FitGhhc (base)", [&] { return FitGhhc(MatrixView(x.data(), b, d), opt, ctx); });
    if (!base) return 1;
    report("ghhc_base", base->first, b, base->second);
    auto warm =
        timed("FitGhhcFrom", [&] { return FitGhhcFrom(base->first.model, b, view, opt, ctx); });
    if (!warm) return 1;
    report("ghhc_warm", warm->first, n, warm->second);
  }
  auto fitted = timed("FitGhhc", [&] { return FitGhhc(view, opt, ctx); });
  if (!fitted) return 1;
  const GhhcResult* r = &fitted->first;
  const double secs = fitted->second;
  if (!dump_prefix.empty()) {
    absl::Status st = absl::OkStatus();
    auto dump = [&](const Hierarchy& h, const std::string& name) {
      std::vector<int64_t> parent(h.num_nodes());
      std::vector<double> height(h.num_nodes());
      for (int32_t v = 0; v < h.num_nodes(); ++v) {
        parent[v] = h.parent(v);
        height[v] = h.height(v);
      }
      const int64_t shape[1] = {h.num_nodes()};
      if (st.ok())
        st = WriteNpy(dump_prefix + "_" + name + "_parent.npy", absl::MakeConstSpan(parent), shape);
      if (st.ok())
        st = WriteNpy(dump_prefix + "_" + name + "_height.npy", absl::MakeConstSpan(height), shape);
    };
    dump(r->coarse_hierarchy, "coarse");
    dump(r->hierarchy, "refined");
    const std::vector<int64_t> pl(r->hierarchy.point_leaf().begin(),
                                  r->hierarchy.point_leaf().end());
    const int64_t shape[1] = {n};
    if (st.ok()) st = WriteNpy(dump_prefix + "_point_leaf.npy", absl::MakeConstSpan(pl), shape);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  report("ghhc", *r, n, secs);
  if (assign_rows > 0) {
    // New rows are placed under the nearest node, or with learned points
    // by the nearest training point (a brute-force search over all N).
    const int64_t rows = std::min(assign_rows, n);
    const auto a0 = std::chrono::steady_clock::now();
    auto batch = AssignGhhcLeaves(r->model, MatrixView(x.data(), rows, d), opt.num_threads);
    const double batch_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
    if (!batch.ok()) {
      std::fprintf(stderr, "AssignGhhcLeaves: %s\n", std::string(batch.status().message()).c_str());
      return 1;
    }
    std::vector<double> single_us;
    for (int64_t i = 0; i < std::min<int64_t>(rows, 200); ++i) {
      const auto s0 = std::chrono::steady_clock::now();
      auto one = AssignGhhcLeaves(r->model, MatrixView(x.data() + i * d, 1, d), 1);
      single_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s0)
              .count());
      if (!one.ok()) return 1;
    }
    std::sort(single_us.begin(), single_us.end());
    std::printf("assign rows=%lld learned_points=%d batch_s=%.3f rows_per_s=%.0f "
                "single_row_us_p50=%.1f single_row_us_p90=%.1f\n",
                static_cast<long long>(rows), r->model.train_points.empty() ? 0 : 1, batch_s,
                static_cast<double>(rows) / batch_s, single_us[single_us.size() / 2],
                single_us[single_us.size() * 9 / 10]);
    std::fflush(stdout);
  }
  if (run_hac && !y.empty()) {
    // Average linkage on the same preprocessed points (centred, unit length).
    const auto h0 = std::chrono::steady_clock::now();
    ghhc::RowMat<double> p(n, d);
    Eigen::RowVectorXd mean = view.cast<double>().colwise().mean();
    for (int64_t i = 0; i < n; ++i) {
      Eigen::RowVectorXd v = view.row(i).cast<double>() - mean;
      p.row(i) = v / v.norm();
    }
    const std::vector<ghhc::LinkageStep> steps = ghhc::AverageLinkage(p);
    std::vector<Merge> merges;
    for (const auto& st : steps) merges.push_back({st.a, st.b, st.height});
    auto tree = Hierarchy::FromMerges(static_cast<int32_t>(n), merges);
    std::vector<int32_t> ident(n);
    for (int64_t i = 0; i < n; ++i) ident[i] = static_cast<int32_t>(i);
    const double hsecs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    double hdp = -1;
    if (tree.ok()) {
      auto v = DendrogramPurity(*tree, ident, y);
      if (v.ok()) hdp = *v;
    }
    std::printf("hac_average n=%lld seconds=%.2f peak_rss_mb=%.0f dp=%.4f\n",
                static_cast<long long>(n), hsecs, PeakRssMb(), hdp);
  }
  return 0;
}

}  // namespace
}  // namespace dendro

int main(int argc, char** argv) {
  dendro::KeepFreedMemory(int64_t{64} << 20);  // as dendrod does (--malloc_keep_mb)
  return dendro::Main(argc, argv);
}
