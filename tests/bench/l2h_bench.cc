// L2H benchmarks on synthetic hierarchical logits.
//
//   l2h_bench                                  all benchmarks
//   l2h_bench --benchmark_filter=BM_L2h/       the 50,000 x 100 runs only
//   l2h_bench --write_npy=PATH [--rows=R --cols=C]
//                                              write the synthetic logits
//                                              (default 50,000 x 100) and exit;
//                                              tests/bench/l2h_reference.py
//                                              times the paper's code on them.
//   l2h_bench --write_steps=PATH [--rows=R --cols=C]
//                                              run L2H on the same data and
//                                              write its merge steps as JSON
//                                              (l2h_reference.py --compare).
//   l2h_bench --run_npy=PATH [--threads=T] [--copy]
//                                              run L2H once on an .npy file
//                                              memory-mapped as dendrod maps
//                                              it (--copy: copied into memory
//                                              first) and print its times.
//
// The data: tests/bench/synthetic_logits.h, rows drawn from seed kSeed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/common/malloc_tuning.h"
#include "core/common/run_context.h"
#include "core/io/npy.h"
#include "core/l2h/l2h.h"
#include "tests/bench/synthetic_logits.h"

namespace dendro {
namespace {

constexpr uint64_t kSeed = 20240611;

std::vector<float> SyntheticLogits(int64_t n, int32_t k) {
  const std::vector<uint8_t> dist = bench::LeafDistances(k);
  std::vector<float> x(static_cast<size_t>(n) * k);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    bench::SyntheticLogitRow(i, k, kSeed, dist, x.data() + static_cast<size_t>(i) * k);
  }
  return x;
}

const std::vector<float>& CachedLogits(int64_t n, int32_t k) {
  static auto* cache = new std::map<std::pair<int64_t, int32_t>, std::vector<float>>();
  auto it = cache->find({n, k});
  if (it == cache->end()) {
    cache->clear();  // keep at most one (possibly 5 GB) matrix
    it = cache->emplace(std::make_pair(n, k), SyntheticLogits(n, k)).first;
  }
  return it->second;
}

// Records when the first pass ends (its last "softmax" report).
class PhaseClock final : public RunContext {
 public:
  PhaseClock() : start_(std::chrono::steady_clock::now()) {}
  bool Cancelled() const override { return false; }
  void Report(double, std::string_view stage) override {
    if (stage == "softmax") {
      first_pass_ms_ = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - start_).count();
    }
  }
  double first_pass_ms() const { return first_pass_ms_; }

 private:
  std::chrono::steady_clock::time_point start_;
  double first_pass_ms_ = 0.0;
};

void RunBenchmark(benchmark::State& state, int64_t n, int32_t k, int threads) {
  const std::vector<float>& x = CachedLogits(n, k);
  const MatrixView logits(x.data(), n, k);
  L2hOptions options;
  options.num_threads = threads;
  double first_pass_ms = 0.0;
  for (auto _ : state) {
    PhaseClock ctx;
    auto r = RunL2h(logits, options, ctx);
    first_pass_ms += ctx.first_pass_ms();
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(r->steps.data());
  }
  state.counters["rows"] = static_cast<double>(n);
  state.counters["clusters"] = k;
  state.counters["threads"] = threads;
  // time to the end of the first pass (softmax, argmax, runner-up), per run
  state.counters["first_pass_ms"] =
      first_pass_ms / static_cast<double>(std::max<int64_t>(1, state.iterations()));
}

// 50,000 x 100 (CIFAR-100 scale; the size l2h_reference.py times).
void BM_L2h(benchmark::State& state) {
  RunBenchmark(state, state.range(0), static_cast<int32_t>(state.range(1)),
               static_cast<int>(state.range(2)));
}
BENCHMARK(BM_L2h)
    ->Args({50000, 100, 1})
    ->Args({50000, 100, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ImageNet-1k training set scale: 1,281,167 x 1,000 (a 5.1 GB float32 matrix,
// generated once; filter it out with --benchmark_filter=BM_L2h/ on small
// machines).
void BM_L2hImageNetScale(benchmark::State& state) {
  RunBenchmark(state, 1281167, 1000, static_cast<int>(state.range(0)));
}
BENCHMARK(BM_L2hImageNetScale)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

int WriteNpyAndExit(const std::string& path, int64_t rows, int32_t cols) {
  const std::vector<float> x = SyntheticLogits(rows, cols);
  const absl::Status s = WriteNpy(path, x, {rows, static_cast<int64_t>(cols)});
  if (!s.ok()) {
    std::fprintf(stderr, "l2h_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %lld x %d synthetic logits to %s\n", static_cast<long long>(rows), cols,
              path.c_str());
  return 0;
}

int WriteStepsAndExit(const std::string& path, int64_t rows, int32_t cols) {
  const std::vector<float> x = SyntheticLogits(rows, cols);
  NullRunContext ctx;
  auto r = RunL2h(MatrixView(x.data(), rows, cols), L2hOptions(), ctx);
  if (!r.ok()) {
    std::fprintf(stderr, "l2h_bench: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "l2h_bench: cannot write %s\n", path.c_str());
    return 1;
  }
  auto tuple = [&](const std::vector<int32_t>& g) {
    std::fputc('[', f);
    for (size_t i = 0; i < g.size(); ++i) std::fprintf(f, "%s%d", i ? "," : "", g[i]);
    std::fputc(']', f);
  };
  std::fputc('[', f);
  for (size_t t = 0; t < r->steps.size(); ++t) {
    std::fputs(t ? ",[" : "[", f);
    tuple(r->steps[t].lowest);
    std::fputc(',', f);
    tuple(r->steps[t].most_related);
    std::fputc(']', f);
  }
  std::fputs("]\n", f);
  const bool ok = std::fclose(f) == 0;
  std::printf("wrote %zu steps to %s\n", r->steps.size(), path.c_str());
  return ok ? 0 : 1;
}

// L2H on an .npy file as dendrod runs it, memory-mapped (or, with `copy`,
// copied into memory first); prints the first pass's and the whole run's
// wall time.
int RunNpyAndExit(const std::string& path, int threads, bool copy) {
  auto npy = MappedNpy::Open(path);
  if (!npy.ok()) {
    std::fprintf(stderr, "l2h_bench: %s\n", std::string(npy.status().message()).c_str());
    return 1;
  }
  auto values = (*npy)->AsFloat32();
  const auto& shape = (*npy)->header().shape;
  if (!values.ok() || shape.size() != 2) {
    std::fprintf(stderr, "l2h_bench: %s is not a 2-D float32 array\n", path.c_str());
    return 1;
  }
  std::vector<float> copied;
  const float* data = values->data();
  if (copy) {
    copied.assign(values->begin(), values->end());
    data = copied.data();
  }
  L2hOptions options;
  options.num_threads = threads;
  PhaseClock ctx;
  const auto start = std::chrono::steady_clock::now();
  auto r = RunL2h(MatrixView(data, shape[0], shape[1]), options, ctx);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!r.ok()) {
    std::fprintf(stderr, "l2h_bench: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::printf("%s (%s, %d threads): first pass %.0f ms, total %.0f ms\n", path.c_str(),
              copy ? "copied" : "mapped", threads, ctx.first_pass_ms(), ms);
  return 0;
}

}  // namespace
}  // namespace dendro

int main(int argc, char** argv) {
  dendro::KeepFreedMemory(int64_t{64} << 20);  // as dendrod does (--malloc_keep_mb)
  std::string npy_path;
  std::string steps_path;
  std::string run_path;
  int threads = 2;
  bool copy = false;
  int64_t rows = 50000;
  int64_t cols = 100;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--write_npy=", 0) == 0) {
      npy_path = a.substr(12);
    } else if (a.rfind("--write_steps=", 0) == 0) {
      steps_path = a.substr(14);
    } else if (a.rfind("--run_npy=", 0) == 0) {
      run_path = a.substr(10);
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::atoi(a.c_str() + 10);
    } else if (a == "--copy") {
      copy = true;
    } else if (a.rfind("--rows=", 0) == 0) {
      rows = std::atoll(a.c_str() + 7);
    } else if (a.rfind("--cols=", 0) == 0) {
      cols = std::atoll(a.c_str() + 7);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!run_path.empty()) return dendro::RunNpyAndExit(run_path, threads, copy);
  if (!npy_path.empty() || !steps_path.empty()) {
    if (rows < 1 || cols < 2 || cols > 1000000) {
      std::fprintf(stderr, "l2h_bench: need --rows >= 1 and 2 <= --cols <= 1000000\n");
      return 2;
    }
    if (!npy_path.empty()) {
      return dendro::WriteNpyAndExit(npy_path, rows, static_cast<int32_t>(cols));
    }
    return dendro::WriteStepsAndExit(steps_path, rows, static_cast<int32_t>(cols));
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
