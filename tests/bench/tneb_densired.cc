// t-NEB quality run (paper Table 1 protocol): for each dataset, fit t-NEB
// with seeds 0..S-1, cut the hierarchy at the true number of classes and
// report the ARI of every seed, the best (what the paper reports) and the
// median. Not a ctest: it takes minutes.
//
// Usage:
//   tneb_densired [--seeds S] [--gaussian] [--learn-dof] [--dof NU]
//                 [--no-standardize] [--components M] [--restarts R] [--threads T]
//                 [--tolerance TOL] [--max-iterations N]
//                 [--dump PREFIX] X.npy Y.npy [X.npy Y.npy ...]
// --dump writes PREFIX<dataset>_s<seed>_pred.npy (cluster at the true k) and
// _leaf.npy (leaf of every point) for inspection.
// Example (all eight Densired sets):
//   for f in /work/shared/data/densired/*_X.npy; do a="$a $f ${f%_X.npy}_y.npy"; done
//   build/tests/bench/tneb_densired $a
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/common/run_context.h"
#include "core/io/npy.h"
#include "core/metrics/metrics.h"
#include "core/tneb/tneb.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: tneb_densired [--seeds S] [--gaussian] [--learn-dof] [--dof NU] "
               "[--no-standardize] [--components M] [--restarts R] [--threads T] [--dump PREFIX] "
               "[--tolerance TOL] [--max-iterations N] X.npy Y.npy [...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10;
  std::string dump;  // prefix for per-seed cluster labels (.npy)
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
    } else if (a == "--gaussian") {
      base.gaussian = true;
    } else if (a == "--dump") {
      const char* v = next();
      if (!v) return Usage();
      dump = v;
    } else if (a == "--learn-dof") {
      base.learn_dof = true;
    } else if (a == "--dof") {
      const char* v = next();
      if (!v) return Usage();
      base.dof = std::atof(v);
    } else if (a == "--no-standardize") {
      base.standardize = false;
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

  std::printf("dataset\tseed\tari\tnmi\tleaves\tconverged\tem_s\tpaths_s\ttotal_s\n");
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
    std::vector<double> aris;
    for (int s = 0; s < seeds; ++s) {
      dendro::TnebOptions o = base;
      o.seed = static_cast<uint64_t>(s);
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
      auto cut = tree.CutToK(k);
      std::vector<int64_t> pred(n);
      for (int64_t i = 0; i < n; ++i) pred[i] = (*cut)[tree.point_leaf()[i]];
      const double ari = *dendro::AdjustedRandIndex(y->data, pred);
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
      std::printf("%s\t%d\t%.4f\t%.4f\t%d\t%d/%d\t%.1f\t%.1f\t%.1f\n", name.c_str(), s, ari, nmi,
                  tree.num_leaves(), r->converged_restarts, o.restarts, r->em_seconds,
                  r->path_seconds, total);
      std::fflush(stdout);
    }
    if (aris.empty()) continue;
    std::vector<double> sorted = aris;
    std::sort(sorted.begin(), sorted.end());
    const size_t h = sorted.size() / 2;
    const double median = sorted.size() % 2 ? sorted[h] : 0.5 * (sorted[h - 1] + sorted[h]);
    std::printf("SUMMARY\t%s\tbest %.4f\tmedian %.4f\tworst %.4f\t(%zu seeds)\n", name.c_str(),
                sorted.back(), median, sorted.front(), sorted.size());
    std::fflush(stdout);
  }
  return 0;
}
