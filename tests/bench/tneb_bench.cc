// t-NEB benchmark: EM cost per iteration and the whole job, on one dataset.
//
// Usage:
//   tneb_bench [--mode em|job|both] [--components M] [--restarts R]
//              [--threads T] [--iters I] [--no-standardize] X.npy
//
//   em   one restart, the EM loop forced to run exactly 1 and 1 + I
//        iterations (tolerance 0); time per iteration = the difference / I,
//        so k-means seeding and the final pass cancel out. Student-t (nu = 1)
//        and Gaussian components. Compare with tneb_sklearn_reference.py.
//   job  FitTneb with the paper defaults (m = 25, 20 restarts, tol 0.01,
//        100 iterations, k = 10, l = 100, s = 200, 1024 evaluation points):
//        seconds per phase and the process's peak resident memory.
// The data are standardised per feature first, as in the paper.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/common/malloc_tuning.h"
#include "core/common/run_context.h"
#include "core/io/npy.h"
#include "core/tneb/tneb.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux reports KiB
}

int Usage() {
  std::fprintf(stderr,
               "usage: tneb_bench [--mode em|job|both] [--components M] [--restarts R] "
               "[--threads T] [--iters I] [--no-standardize] X.npy\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  dendro::KeepFreedMemory(int64_t{64} << 20);  // as dendrod does (--malloc_keep_mb)
  std::string mode = "both", path;
  int components = 25, restarts = 20, threads = 0, iters = 20;
  bool standardize = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--mode" && (v = next())) {
      mode = v;
    } else if (a == "--components" && (v = next())) {
      components = std::atoi(v);
    } else if (a == "--restarts" && (v = next())) {
      restarts = std::atoi(v);
    } else if (a == "--threads" && (v = next())) {
      threads = std::atoi(v);
    } else if (a == "--iters" && (v = next())) {
      iters = std::atoi(v);
    } else if (a == "--no-standardize") {
      standardize = false;
    } else if (a.rfind("--", 0) != 0 && path.empty()) {
      path = a;
    } else {
      return Usage();
    }
  }
  if (path.empty() || (mode != "em" && mode != "job" && mode != "both")) return Usage();
  auto x = dendro::ReadNpyFloat32(path);
  if (!x.ok() || x->shape.size() != 2) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const int64_t n = x->shape[0], d = x->shape[1];
  dendro::MatrixView xv(x->data.data(), n, d);
  std::printf("data %s: %lld x %lld, m = %d, threads = %d\n", path.c_str(),
              static_cast<long long>(n), static_cast<long long>(d), components, threads);

  if (mode == "em" || mode == "both") {
    dendro::FeatureTransform t;
    if (standardize) t = *dendro::StandardizationOf(xv);
    for (bool gaussian : {false, true}) {
      double secs[2];
      int64_t iterations[2];
      for (int run = 0; run < 2; ++run) {
        dendro::MixtureOptions o;
        o.components = components;
        o.gaussian = gaussian;
        o.restarts = 1;
        o.tolerance = std::numeric_limits<double>::min();  // never converges
        o.max_iterations = run == 0 ? 1 : 1 + iters;
        o.num_threads = threads;
        dendro::NullRunContext ctx;
        const auto t0 = Clock::now();
        auto fit = dendro::FitStudentMixture(xv, t, o, ctx);
        secs[run] = Since(t0);
        if (!fit.ok()) {
          std::fprintf(stderr, "EM failed: %s\n", std::string(fit.status().message()).c_str());
          return 1;
        }
        iterations[run] = fit->total_iterations;
      }
      const double per_iter =
          (secs[1] - secs[0]) / static_cast<double>(iterations[1] - iterations[0]);
      std::printf("em %-9s per iteration %.4f s  (%lld its %.3f s, %lld its %.3f s)\n",
                  gaussian ? "gaussian" : "student-t", per_iter,
                  static_cast<long long>(iterations[0]), secs[0],
                  static_cast<long long>(iterations[1]), secs[1]);
    }
  }

  if (mode == "job" || mode == "both") {
    dendro::TnebOptions o;
    o.components = components;
    o.restarts = restarts;
    o.standardize = standardize;
    o.num_threads = threads;
    dendro::NullRunContext ctx;
    const auto t0 = Clock::now();
    auto r = dendro::FitTneb(xv, o, ctx);
    const double total = Since(t0);
    if (!r.ok()) {
      std::fprintf(stderr, "t-NEB failed: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    std::printf(
        "job total %.2f s: em %.2f s (%lld iterations over %d restarts, %d converged), "
        "filter %.2f s, paths %.2f s (%zu pairs), tree %.3f s; leaves %d; peak RSS %.0f MB\n",
        total, r->em_seconds, static_cast<long long>(r->em_iterations), restarts,
        r->converged_restarts, r->filter_seconds, r->path_seconds, r->edges.size(), r->tree_seconds,
        r->hierarchy.num_leaves(), PeakRssMb());
  }
  return 0;
}
