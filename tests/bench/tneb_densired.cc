// t-NEB quality run (paper Table 1 protocol): for each dataset, fit t-NEB
// with seeds F..F+S-1 (F = 0 by default), cut the hierarchy at the true
// number of classes and report the ARI of every seed, the best (what the
// paper reports) and the median. Not a ctest: it takes minutes. Each seed's
// row also has the ARI one cut higher (k - 1 clusters) and the size of the
// smallest cluster at k: on a draw with a class too small for a component
// of its own, the cut at k has to split a real class, and these show it.
//
// Usage:
//   tneb_densired [--seeds S] [--first-seed F] [--gaussian] [--learn-dof | --auto-dof]
//                 [--dof NU] [--no-standardize] [--components M] [--restarts R] [--threads T]
//                 [--tolerance TOL] [--max-iterations N] [--merge density|persistence|graph]
//                 [--legacy-high-dim] [--init-min-rows R] [--scale-prior-rows P]
//                 [--diagnose-auto] [--dump PREFIX] X.npy Y.npy [X.npy Y.npy ...]
// Without --dof, --learn-dof or --auto-dof, nu follows the default (chosen by
// BIC among 1, learned and Gaussian when d <= 10, fixed at 1 above); --dof 1
// is the paper's fixed nu. The nu column says what the kept fit has: fixed,
// learned or inf (Gaussian components).
// The diagnostics columns (largest_share, degenerate), and the choice of a
// graph merge over a degenerate density tree, are at the true k, as for a
// user who asks for that cut; --diagnose-auto puts them at the fit's auto k,
// as for one who does not. The merge column reads "graph<density" when the
// graph merge replaced a degenerate density tree, "density<graph" when it
// was tried and its tree was degenerate too.
// --edges prints the spanning tree (similarity, peaks, persistence, leaf
// sizes and labels) to stderr.
// --warm-base-share F: the rows in a fixed shuffled order; a fit of the
// first F of them, then FitTnebFrom that model on all rows (a warm refit
// after appending the rest) and a cold fit of all rows; one WARM line per
// seed with the three ARIs at the true k (the base's on its own rows) and
// times (the warm refit's EM iterations too) instead of the table row.
// --dump writes PREFIX<dataset>_s<seed>_pred.npy (cluster at the true k) and
// _leaf.npy (leaf of every point) for inspection.
// Example (all eight Densired sets):
//   for f in /work/shared/data/densired/*_X.npy; do a="$a $f ${f%_X.npy}_y.npy"; done
//   build/tests/bench/tneb_densired $a
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/common/malloc_tuning.h"
#include "core/common/run_context.h"
#include "core/io/npy.h"
#include "core/metrics/metrics.h"
#include "core/tneb/tneb.h"

namespace {

int Usage() {
  std::fprintf(
      stderr,
      "usage: tneb_densired [--seeds S] [--first-seed F] [--gaussian] "
      "[--learn-dof | --auto-dof] [--dof NU] "
      "[--no-standardize] [--components M] [--restarts R] [--threads T] [--dump PREFIX] "
      "[--tolerance TOL] [--max-iterations N] [--merge density|persistence|graph] [--edges] "
      "[--legacy-high-dim] [--init-min-rows R] [--scale-prior-rows P] [--diagnose-auto] "
      "[--rank-restarts-by-loglik] [--warm-base-share F] "
      "X.npy Y.npy [...]\n");
  return 2;
}

// Each point's cluster when `tree` is cut to k clusters (numbered as
// CutToK numbers them); `point_leaf` gives each point's leaf. Empty if the
// tree has no such cut.
std::vector<int64_t> PointClusters(const dendro::Hierarchy& tree,
                                   const std::vector<int32_t>& point_leaf, int k) {
  auto cut = tree.CutToK(k);
  if (!cut.ok()) return {};
  std::vector<int64_t> pred(point_leaf.size());
  for (size_t i = 0; i < point_leaf.size(); ++i) pred[i] = (*cut)[point_leaf[i]];
  return pred;
}

// Each leaf component's log-density at its mean.
std::vector<double> Peaks(const dendro::TnebResult& r) {
  const Eigen::VectorXd peak = r.model.mixture.LogDensity(r.model.mixture.means(), 1);
  return std::vector<double>(peak.data(), peak.data() + peak.size());
}

// The merge a fit used, then "<" and the one tried and not kept, if any
// (TnebGraphFallback): "graph<density", "density<graph".
std::string MergeUsed(const dendro::TnebResult& r) {
  const auto& md = r.hierarchy.metadata();
  std::string merge = md.at("merge");
  if (auto tried = md.find("merge_tried"); tried != md.end()) merge += "<" + tried->second;
  return merge;
}

// ARI at k of the other merge order, rebuilt from the fit's path edges and
// the mixture's log-density at its means (the same tree FitTneb builds).
double OtherMergeAri(const dendro::TnebResult& r, dendro::TnebMerge other, int k,
                     const std::vector<int64_t>& y) {
  const int32_t l = r.hierarchy.num_leaves();
  double offset = 0.0;
  auto mt = dendro::ComponentMerges(l, r.edges, Peaks(r),
                                    other == dendro::TnebMerge::kPersistence, &offset);
  if (!mt.ok()) return -1.0;
  auto tree = dendro::Hierarchy::FromMerges(l, mt->merges);
  if (!tree.ok()) return -1.0;
  const std::vector<int64_t> pred = PointClusters(*tree, r.hierarchy.point_leaf(), std::min(k, l));
  if (pred.empty()) return -1.0;
  return *dendro::AdjustedRandIndex(y, pred);
}

// The spanning tree's edges in decreasing similarity, with both end points'
// peaks, the water-level persistence and the points / majority label of each
// leaf, then every fitted component's size, elongation and fate, to stderr
// (--edges).
void PrintTreeEdges(const std::string& name, int seed, const dendro::TnebResult& r,
                    const std::vector<int64_t>& y) {
  const int32_t l = r.hierarchy.num_leaves();
  const std::vector<double> peak = Peaks(r);
  double offset = 0.0;
  auto mt = dendro::ComponentMerges(l, r.edges, peak, /*persistence=*/false, &offset);
  if (!mt.ok()) return;
  auto pm = dendro::PersistenceMerges(mt->tree_edges, peak);
  if (!pm.ok()) return;
  std::vector<std::map<int64_t, int64_t>> labels(l);
  for (size_t i = 0; i < y.size(); ++i) ++labels[r.hierarchy.point_leaf()[i]][y[i]];
  auto describe = [&](int32_t leaf) {
    int64_t total = 0, best = -1, best_n = 0;
    for (const auto& [lab, c] : labels[leaf]) {
      total += c;
      if (c > best_n) best = lab, best_n = c;
    }
    return std::to_string(total) + "pts/y" + std::to_string(best) + ":" + std::to_string(best_n);
  };
  std::map<std::pair<int32_t, int32_t>, double> pers;
  for (size_t t = 0; t < pm->tree_edges.size(); ++t) {
    pers[{pm->tree_edges[t].a, pm->tree_edges[t].b}] = -pm->similarity[t];
  }
  for (const auto& e : mt->tree_edges) {
    std::fprintf(stderr, "EDGE\t%s\t%d\t%d(%s)\t%d(%s)\tsim %.3f\tpeaks %.3f %.3f\tpers %.3f\n",
                 name.c_str(), seed, e.a, describe(e.a).c_str(), e.b, describe(e.b).c_str(),
                 e.similarity, peak[e.a], peak[e.b], pers[{e.a, e.b}]);
  }
  // Every fitted component, kept or filtered (appendix D.2's two reasons).
  for (size_t c = 0; c < r.components.size(); ++c) {
    const dendro::ComponentInfo& info = r.components[c];
    std::fprintf(stderr, "COMPONENT\t%s\t%d\t%zu\tpoints %lld\tweight %.4f\telongation %.3g\t%s\n",
                 name.c_str(), seed, c, static_cast<long long>(info.points), info.weight,
                 info.elongation, info.kept ? "kept" : "dropped");
  }
}

}  // namespace

int main(int argc, char** argv) {
  dendro::KeepFreedMemory(int64_t{64} << 20);  // as dendrod does (--malloc_keep_mb)
  int seeds = 10;
  int first_seed = 0;
  std::string dump;  // prefix for per-seed cluster labels (.npy)
  bool print_edges = false;
  bool diagnose_auto = false;
  double warm_share = 0.0;
  dendro::TnebOptions base;
  base.standardize = true;  // the paper standardises every feature
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--seeds") {
      const char* v = next();
      if (!v) return Usage();
      seeds = std::atoi(v);
    } else if (a == "--first-seed") {
      const char* v = next();
      if (!v) return Usage();
      first_seed = std::atoi(v);
    } else if (a == "--gaussian") {
      base.gaussian = true;
    } else if (a == "--dump") {
      const char* v = next();
      if (!v) return Usage();
      dump = v;
    } else if (a == "--learn-dof") {
      base.learn_dof = true;
    } else if (a == "--edges") {
      print_edges = true;
    } else if (a == "--diagnose-auto") {
      diagnose_auto = true;
    } else if (a == "--legacy-high-dim") {
      // The fit before issue 46 above 10-D: no minimum rows per initial
      // component, no scale prior, density merging.
      base.init_min_rows = 0;
      base.scale_prior_rows = 0.0;
      base.merge = dendro::TnebMerge::kDensity;
      base.merge_by_dimension = false;
    } else if (a == "--init-min-rows") {
      const char* v = next();
      if (!v) return Usage();
      base.init_min_rows = std::atoi(v);
    } else if (a == "--scale-prior-rows") {
      const char* v = next();
      if (!v) return Usage();
      base.scale_prior_rows = std::atof(v);
    } else if (a == "--rank-restarts-by-loglik") {
      base.rank_restarts_by = dendro::TnebRestartRanking::kLogLikelihood;
    } else if (a == "--auto-dof") {
      base.auto_dof = true;
    } else if (a == "--merge") {
      const char* v = next();
      if (!v) return Usage();
      auto m = dendro::ParseTnebMerge(v);
      if (!m.ok()) return Usage();
      base.merge = *m;
      base.merge_by_dimension = false;  // as the server does with a merge given
    } else if (a == "--dof") {
      const char* v = next();
      if (!v) return Usage();
      base.dof = std::atof(v);
      base.auto_dof_low_dimension = false;  // a nu given is used, as in the server
    } else if (a == "--no-standardize") {
      base.standardize = false;
      base.standardize_mode = dendro::TnebStandardize::kOff;  // the raw columns, as the paper
    } else if (a == "--components") {
      const char* v = next();
      if (!v) return Usage();
      base.components = std::atoi(v);
    } else if (a == "--restarts") {
      const char* v = next();
      if (!v) return Usage();
      base.restarts = std::atoi(v);
    } else if (a == "--tolerance") {
      const char* v = next();
      if (!v) return Usage();
      base.tolerance = std::atof(v);
    } else if (a == "--max-iterations") {
      const char* v = next();
      if (!v) return Usage();
      base.max_iterations = std::atoi(v);
    } else if (a == "--warm-base-share") {
      const char* v = next();
      if (!v) return Usage();
      warm_share = std::atof(v);
      if (!(warm_share > 0.0 && warm_share < 1.0)) return Usage();
    } else if (a == "--threads") {
      const char* v = next();
      if (!v) return Usage();
      base.num_threads = std::atoi(v);
    } else if (a.rfind("--", 0) == 0) {
      return Usage();
    } else {
      files.push_back(a);
    }
  }
  if (files.empty() || files.size() % 2 != 0 || seeds < 1) return Usage();

  // ari_other: the same fit cut after merging in the other order (density
  // <-> persistence), so one run compares both merge rules; merge: the
  // order behind `ari`.
  std::printf(
      "dataset\tseed\tari\tnmi\tleaves\tconverged\tem_its\tnu\tem_s\tpaths_s\ttotal_s\t"
      "ari_other\tmerge\tloglik\tkept_loglik\tari_k-1\tsmallest\tlargest_share\tdegenerate\n");
  for (size_t f = 0; f < files.size(); f += 2) {
    auto x = dendro::ReadNpyFloat32(files[f]);
    auto y = dendro::ReadNpyInt(files[f + 1]);
    if (!x.ok() || !y.ok() || x->shape.size() != 2) {
      std::fprintf(stderr, "cannot read %s / %s\n", files[f].c_str(), files[f + 1].c_str());
      return 1;
    }
    const int64_t n = x->shape[0], d = x->shape[1];
    if (static_cast<int64_t>(y->data.size()) != n) {
      std::fprintf(stderr, "%s: %lld labels for %lld rows\n", files[f + 1].c_str(),
                   static_cast<long long>(y->data.size()), static_cast<long long>(n));
      return 1;
    }
    const int true_k = static_cast<int>(std::set<int64_t>(y->data.begin(), y->data.end()).size());
    dendro::MatrixView xv(x->data.data(), n, d);
    std::string name = files[f];
    name = name.substr(name.find_last_of('/') + 1);
    std::vector<double> aris, others;
    const dendro::TnebMerge used = dendro::TnebMergeOrder(base, d);
    const dendro::TnebMerge unused = used == dendro::TnebMerge::kDensity
                                         ? dendro::TnebMerge::kPersistence
                                         : dendro::TnebMerge::kDensity;
    if (warm_share > 0.0) {
      // A fixed shuffle, so the base rows hold every class.
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(12345));
      std::vector<float> xs(x->data.size());
      std::vector<int64_t> ys(n);
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(x->data.data() + order[i] * d, d, xs.data() + i * d);
        ys[i] = y->data[order[i]];
      }
      const auto nb = static_cast<int64_t>(std::llround(warm_share * static_cast<double>(n)));
      const std::vector<int64_t> ys_base(ys.begin(), ys.begin() + nb);
      auto ari_of = [&](const dendro::TnebResult& r, const std::vector<int64_t>& labels) {
        const int k = std::min<int>(true_k, r.hierarchy.num_leaves());
        const std::vector<int64_t> pred = PointClusters(r.hierarchy, r.hierarchy.point_leaf(), k);
        return pred.empty() ? -1.0 : *dendro::AdjustedRandIndex(labels, pred);
      };
      auto since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
      };
      for (int s = first_seed; s < first_seed + seeds; ++s) {
        dendro::TnebOptions o = base;
        o.seed = static_cast<uint64_t>(s);
        o.diagnose_k = true_k;
        dendro::NullRunContext ctx;
        auto t0 = std::chrono::steady_clock::now();
        auto rb = dendro::FitTneb(dendro::MatrixView(xs.data(), nb, d), o, ctx);
        const double base_s = since(t0);
        if (!rb.ok()) {
          std::printf("WARM\t%s\t%d\terror (base): %s\n", name.c_str(), s,
                      std::string(rb.status().message()).c_str());
          continue;
        }
        const dendro::MatrixView all(xs.data(), n, d);
        t0 = std::chrono::steady_clock::now();
        auto rw = dendro::FitTnebFrom(rb->model, all, o, ctx);
        const double warm_s = since(t0);
        t0 = std::chrono::steady_clock::now();
        auto rc = dendro::FitTneb(all, o, ctx);
        const double cold_s = since(t0);
        if (!rw.ok() || !rc.ok()) {
          std::printf("WARM\t%s\t%d\terror: %s\n", name.c_str(), s,
                      std::string((rw.ok() ? rc.status() : rw.status()).message()).c_str());
          continue;
        }
        std::printf(
            "WARM\t%s\t%d\tbase_rows %lld\tari_base %.4f\tari_warm %.4f\tari_cold %.4f\t"
            "base_s %.2f\twarm_s %.2f\tcold_s %.2f\twarm_em_its %lld\tleaves %d/%d\n",
            name.c_str(), s, static_cast<long long>(nb), ari_of(*rb, ys_base), ari_of(*rw, ys),
            ari_of(*rc, ys), base_s, warm_s, cold_s, static_cast<long long>(rw->em_iterations),
            rw->hierarchy.num_leaves(), rc->hierarchy.num_leaves());
        std::fflush(stdout);
      }
      continue;
    }
    for (int s = first_seed; s < first_seed + seeds; ++s) {
      dendro::TnebOptions o = base;
      o.seed = static_cast<uint64_t>(s);
      o.diagnose_k = diagnose_auto ? 0 : true_k;
      dendro::NullRunContext ctx;
      const auto t0 = std::chrono::steady_clock::now();
      auto r = dendro::FitTneb(xv, o, ctx);
      const double total =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!r.ok()) {
        std::printf("%s\t%d\terror: %s\n", name.c_str(), s,
                    std::string(r.status().message()).c_str());
        std::fflush(stdout);
        continue;
      }
      const auto& tree = r->hierarchy;
      const int k = std::min<int>(true_k, tree.num_leaves());
      const std::vector<int64_t> pred = PointClusters(tree, tree.point_leaf(), k);
      const double ari = *dendro::AdjustedRandIndex(y->data, pred);
      // The smallest cluster at k, and the ARI one cut higher (see the top).
      std::vector<int64_t> cluster_size(k, 0);
      for (int64_t p : pred) ++cluster_size[p];
      const int64_t smallest = *std::min_element(cluster_size.begin(), cluster_size.end());
      double ari_fewer = std::nan("");
      if (k >= 2) {
        ari_fewer = *dendro::AdjustedRandIndex(
            y->data, PointClusters(tree, tree.point_leaf(), k - 1));
      }
      if (!dump.empty()) {
        std::vector<int64_t> leaves(tree.point_leaf().begin(), tree.point_leaf().end());
        const int64_t shape[1] = {n};
        (void)dendro::WriteNpy(dump + name + "_s" + std::to_string(s) + "_pred.npy",
                               absl::MakeConstSpan(pred), shape);
        (void)dendro::WriteNpy(dump + name + "_s" + std::to_string(s) + "_leaf.npy",
                               absl::MakeConstSpan(leaves), shape);
      }
      const double nmi = *dendro::NormalizedMutualInfo(y->data, pred);
      aris.push_back(ari);
      const double other = OtherMergeAri(*r, unused, true_k, y->data);
      others.push_back(other);
      if (print_edges) PrintTreeEdges(name, s, *r, y->data);
      std::printf(
          "%s\t%d\t%.4f\t%.4f\t%d\t%d/%d\t%lld\t%s\t%.1f\t%.1f\t%.1f\t%.4f\t%s\t%.6f\t%.6f\t%.4f\t"
          "%lld\t%.3f\t%d\n",
          name.c_str(), s, ari, nmi, tree.num_leaves(), r->converged_restarts, r->restarts,
          static_cast<long long>(r->em_iterations),
          r->gaussian ? "inf" : (r->learned_dof ? "learned" : "fixed"), r->em_seconds,
          r->path_seconds, total, other, MergeUsed(*r).c_str(), r->log_likelihood,
          r->kept_log_likelihood, ari_fewer, static_cast<long long>(smallest),
          r->diagnostics.largest_share, r->diagnostics.degenerate ? 1 : 0);
      std::fflush(stdout);
    }
    if (aris.empty()) continue;
    const char* merge = dendro::TnebMergeName(used);
    const char* other = dendro::TnebMergeName(unused);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> sorted = pass == 0 ? aris : others;
      std::sort(sorted.begin(), sorted.end());
      const size_t h = sorted.size() / 2;
      const double median = sorted.size() % 2 ? sorted[h] : 0.5 * (sorted[h - 1] + sorted[h]);
      std::printf("SUMMARY\t%s\tmerge %s\tbest %.4f\tmedian %.4f\tworst %.4f\t(%zu seeds)\n",
                  name.c_str(), pass == 0 ? merge : other, sorted.back(), median, sorted.front(),
                  sorted.size());
    }
    std::fflush(stdout);
  }
  return 0;
}
