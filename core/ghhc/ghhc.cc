#include "core/ghhc/ghhc.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "Eigen/Eigenvalues"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/cpus.h"
#include "core/common/omp_threads.h"
#include "core/common/status_macros.h"
#include "core/common/sub_range_context.h"
#include "core/ghhc/init.h"
#include "core/ghhc/knn.h"
#include "core/ghhc/objective.h"
#include "core/ghhc/poincare.h"
#include "core/ghhc/random.h"

namespace dendro {
namespace {

using ghhc::RowMat;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Thread use. Our own parallel regions name their team size; meanwhile
// Eigen's matrix products, called between those regions on small blocks,
// stay on the calling thread (core/common/omp_threads.h).
class ThreadScope {
 public:
  explicit ThreadScope(int num_threads) : threads_(ThreadsOrDefault(num_threads)) {}
  int threads() const { return threads_; }

 private:
  const int threads_;  // resolved before the guard below changes the default
  const ProductsOnCallingThread products_here_;
};

using CancelFlag = SharedCancel;

// Maps stage-local fractions onto [lo, hi] of the whole run, never backwards.
class Progress {
 public:
  explicit Progress(RunContext& ctx) : ctx_(ctx) {}
  void Report(double lo, double hi, double f, std::string_view stage) {
    const double v = std::max(last_, lo + (hi - lo) * std::clamp(f, 0.0, 1.0));
    last_ = v;
    ctx_.Report(v, stage);
  }

 private:
  RunContext& ctx_;
  double last_ = 0.0;
};

absl::Status ValidateOptionsImpl(const GhhcOptions& o) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.internal_nodes < 2) {
    return bad("internal_nodes (M) must be >= 2, got ", o.internal_nodes);
  }
  if (!(o.learning_rate > 0.0) || !std::isfinite(o.learning_rate)) {
    return bad("learning_rate must be a positive finite number, got ", o.learning_rate);
  }
  if (o.batch_size < 1) return bad("batch_size must be >= 1, got ", o.batch_size);
  if (o.triples < 0) return bad("triples must be >= 0 (0: automatic), got ", o.triples);
  if (o.neighbors < 1) return bad("neighbors (k) must be >= 1, got ", o.neighbors);
  if (!(o.margin >= 0.0) || !std::isfinite(o.margin)) {
    return bad("margin (gamma) must be a finite number >= 0, got ", o.margin);
  }
  if (o.margin_every < 0) return bad("margin_every must be >= 0, got ", o.margin_every);
  if (o.margin_steps < 0) return bad("margin_steps must be >= 0, got ", o.margin_steps);
  if (!(o.margin_learning_rate >= 0.0) || !std::isfinite(o.margin_learning_rate)) {
    return bad("margin_learning_rate must be a finite number >= 0 (0: learning_rate / 10), got ",
               o.margin_learning_rate);
  }
  if (!(o.gumbel_temperature >= 0.0) || !std::isfinite(o.gumbel_temperature)) {
    return bad("gumbel_temperature must be a finite number >= 0, got ", o.gumbel_temperature);
  }
  if (o.init_sample < 0 || o.init_sample == 1 || o.init_sample > kGhhcMaxInitSample) {
    return bad("init_sample must be 0 (automatic) or in [2, ", kGhhcMaxInitSample, "], got ",
               o.init_sample);
  }
  if (!(o.point_norm > 0.0 && o.point_norm < 1.0)) {
    return bad("point_norm must be in (0, 1), got ", o.point_norm);
  }
  if (!(o.max_node_norm > 0.0 && o.max_node_norm < o.point_norm)) {
    return bad("max_node_norm must be in (0, point_norm = ", o.point_norm, "), got ",
               o.max_node_norm);
  }
  if (o.exact_knn_max_points < 0) {
    return bad("exact_knn_max_points must be >= 0, got ", o.exact_knn_max_points);
  }
  if (o.ivf_list_size < 1) return bad("ivf_list_size must be >= 1, got ", o.ivf_list_size);
  if (o.ivf_probes < 1) return bad("ivf_probes must be >= 1, got ", o.ivf_probes);
  if (o.hnsw_m < 2) return bad("hnsw_m must be >= 2, got ", o.hnsw_m);
  if (o.hnsw_ef_construction < 1) {
    return bad("hnsw_ef_construction must be >= 1, got ", o.hnsw_ef_construction);
  }
  if (o.hnsw_ef_search < 0) return bad("hnsw_ef_search must be >= 0, got ", o.hnsw_ef_search);
  if (o.num_threads < 0) return bad("num_threads must be >= 0, got ", o.num_threads);
  if (o.validation_triples < 0) {
    return bad("validation_triples must be >= 0 (0: no validation), got ", o.validation_triples);
  }
  if (o.choose_points && o.validation_triples == 0) {
    return bad("choose_points compares held-out triple accuracies: it needs validation_triples > 0");
  }
  if (o.choose_points_max_rows < 0) {
    return bad("choose_points_max_rows must be >= 0 (0: points fixed by default), got ",
               o.choose_points_max_rows);
  }
  if (o.validate_every < 0) {
    return bad("validate_every must be >= 0 (0: automatic), got ", o.validate_every);
  }
  if (!(o.point_learning_rate > 0.0) || !std::isfinite(o.point_learning_rate)) {
    return bad("point_learning_rate must be a positive finite number, got ",
               o.point_learning_rate);
  }
  if (o.projection_dim < 0) {
    return bad("projection_dim must be >= 0 (0: no projection), got ", o.projection_dim);
  }
  return absl::OkStatus();
}

// Centres (with model.mean), divides by model.scale (if any), projects
// (with model.projection, if any),
// normalises and scales (model.point_norm) every row into `out`, which gets
// model.ball_dim() columns. Returns InvalidArgument naming the first row
// that has no direction left. `cancelled`, if set, is polled once per 4096
// rows (from any thread); CancelledError once it returns true.
absl::Status NormaliseRows(const MatrixView& x, const GhhcModel& model, int threads,
                           RowMat<float>* out, const std::function<bool()>& cancelled = nullptr) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  const int64_t p = model.ball_dim();
  out->resize(n, p);
  const Eigen::Map<const Eigen::RowVectorXd> mu(model.mean.data(), d);
  const bool scaled = !model.scale.empty();
  const Eigen::Map<const Eigen::RowVectorXd> scale(model.scale.data(), scaled ? d : 0);
  const bool project = !model.projection.empty();
  const Eigen::Map<const RowMat<double>> proj(model.projection.data(), project ? d : 0,
                                              project ? p : 0);
  // A row within rounding of the mean has no direction. The same tolerance
  // is applied after a projection (a random one keeps norms in expectation,
  // PCA can only shrink them); an exactly zero projection is always refused.
  const double tol = 1e-6 * mu.norm();
  int64_t first_bad = std::numeric_limits<int64_t>::max();
  // With a projection every row costs O(d p), which adds up on big inputs.
  std::atomic<bool> stop{false};
#pragma omp parallel for num_threads(threads) schedule(static, 4096) reduction(min : first_bad)
  for (int64_t i = 0; i < n; ++i) {
    if (i % 4096 == 0 && cancelled && !stop.load(std::memory_order_relaxed) && cancelled()) {
      stop.store(true, std::memory_order_relaxed);
    }
    if (stop.load(std::memory_order_relaxed)) continue;
    Eigen::RowVectorXd v = x.row(i).cast<double>() - mu;
    // With divisors the tolerance applies to the centred row (it is in the
    // mean's units, the divided row is not).
    const double centred = scaled ? v.norm() : 0.0;
    if (scaled) v = v.cwiseQuotient(scale);
    if (project) v = (v * proj).eval();
    const double len = v.norm();
    if (!((scaled ? centred : len) > tol) || (project && !(len > 1e-12)) ||
        (scaled && !(len > 0))) {
      first_bad = std::min(first_bad, i);
      continue;
    }
    out->row(i) = (v * (model.point_norm / len)).cast<float>();
  }
  if (stop.load()) return absl::CancelledError("job cancelled");
  if (first_bad != std::numeric_limits<int64_t>::max()) {
    const bool centred = mu.norm() > 0;
    if (project && (x.row(first_bad).cast<double>() - mu).norm() > tol) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", first_bad, " is zero after the projection to ", p,
          " dimensions; use a larger projection_dim or none"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "row ", first_bad,
        centred ? " equals the mean of the training data (it is zero after centring)"
                : " is a zero vector",
        "; gHHC normalises every ", centred ? "centred " : "", "row to unit length"));
  }
  return absl::OkStatus();
}

std::vector<double> ColumnMean(const MatrixView& x, int threads) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  RowMat<double> partial = RowMat<double>::Zero(chunks, d);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r1 = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < r1; ++i) partial.row(c) += x.row(i).cast<double>();
  }
  std::vector<double> mean(d, 0.0);
  Eigen::Map<Eigen::RowVectorXd> m(mean.data(), d);
  for (int64_t c = 0; c < chunks; ++c) m += partial.row(c);
  m /= static_cast<double>(n);
  return mean;
}

// Floyd's algorithm: s distinct indices of [0, n), sorted.
std::vector<int64_t> SampleIndices(int64_t n, int64_t s, uint64_t seed) {
  std::vector<int64_t> out;
  if (s >= n) {
    out.resize(n);
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  ghhc::Rng rng(ghhc::StreamSeed(seed, 0x5A3F));
  absl::flat_hash_set<int64_t> chosen;
  for (int64_t j = n - s; j < n; ++j) {
    const int64_t t = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(j + 1)));
    if (!chosen.insert(t).second) chosen.insert(j);
  }
  out.assign(chosen.begin(), chosen.end());
  std::sort(out.begin(), out.end());
  return out;
}

// d x p Gaussian random projection with entries N(0, 1/p), from `seed`.
std::vector<double> RandomProjection(int64_t d, int64_t p, uint64_t seed) {
  std::mt19937_64 rng(ghhc::StreamSeed(seed, 4, 0));
  std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(static_cast<double>(p)));
  std::vector<double> out(static_cast<size_t>(d * p));
  for (double& v : out) v = normal(rng);
  return out;
}

// d x p row-major: the top-p principal directions (columns, by decreasing
// variance) of the rows minus `mean`, divided by `scale` when it is not
// empty, from the scatter matrix of a sample of
// at most kGhhcPcaSample rows. Each column's sign is fixed so that its
// largest-magnitude entry is positive. `cancelled` is polled before each
// block of 2048 sample rows (from any thread); once it returns true the
// result is empty.
std::vector<double> PcaProjection(const MatrixView& x, const std::vector<double>& mean,
                                  const std::vector<double>& scale, int64_t p, uint64_t seed,
                                  int threads, const std::function<bool()>& cancelled) {
  const int64_t d = x.cols();
  const std::vector<int64_t> idx = SampleIndices(x.rows(), kGhhcPcaSample, seed);
  const Eigen::Map<const Eigen::RowVectorXd> mu(mean.data(), d);
  Eigen::RowVectorXd inv = Eigen::RowVectorXd::Ones(d);
  if (!scale.empty()) inv = Eigen::Map<const Eigen::RowVectorXd>(scale.data(), d).cwiseInverse();
  constexpr int64_t kBlock = 2048;
  const int64_t blocks = (static_cast<int64_t>(idx.size()) + kBlock - 1) / kBlock;
  std::vector<Eigen::MatrixXd> partial(std::max(1, threads), Eigen::MatrixXd::Zero(d, d));
  std::atomic<bool> stop{false};
#pragma omp parallel num_threads(threads)
  {
    Eigen::MatrixXd& acc = partial[omp_get_thread_num()];
    RowMat<double> block;
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b) {
      // One block is a rank-2048 update of a d x d matrix.
      if (stop.load(std::memory_order_relaxed)) continue;
      if (cancelled && cancelled()) {
        stop.store(true, std::memory_order_relaxed);
        continue;
      }
      const int64_t r0 = b * kBlock;
      const int64_t rn = std::min<int64_t>(kBlock, static_cast<int64_t>(idx.size()) - r0);
      block.resize(rn, d);
      for (int64_t r = 0; r < rn; ++r) {
        block.row(r) = (x.row(idx[r0 + r]).cast<double>() - mu).cwiseProduct(inv);
      }
      acc.selfadjointView<Eigen::Lower>().rankUpdate(block.transpose());
    }
  }
  if (stop.load()) return {};
  Eigen::MatrixXd scatter = Eigen::MatrixXd::Zero(d, d);
  for (const Eigen::MatrixXd& a : partial) scatter += a;
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(
      scatter.selfadjointView<Eigen::Lower>().toDenseMatrix());
  std::vector<double> out(static_cast<size_t>(d * p));
  Eigen::Map<RowMat<double>> proj(out.data(), d, p);
  for (int64_t j = 0; j < p; ++j) {
    Eigen::VectorXd v = es.eigenvectors().col(d - 1 - j);  // ascending eigenvalues
    Eigen::Index at = 0;
    v.cwiseAbs().maxCoeff(&at);
    if (v[at] < 0) v = -v;
    proj.col(j) = v;
  }
  return out;
}

// One RSGD step (eqs. 18-20) with retraction and clipping, in place.
void RsgdStep(RowMat<double>& z, const RowMat<double>& grad, double lr, double max_norm,
              int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (z.rows() >= 4096)
  for (Eigen::Index n = 0; n < z.rows(); ++n) {
    const double scale = ghhc::RiemannianScale(z.row(n).squaredNorm());
    z.row(n) -= (lr * scale) * grad.row(n);
    ghhc::Retract(z.row(n), max_norm);
  }
}

// One lazy Adam step (Kingma & Ba, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
// bias correction with the global step t >= 1) on the rows in `touched`
// only, whose gradients are in `grad` (reset to zero here), followed by the
// projection of each row back onto the sphere of radius `radius`.
void AdamPointStep(int64_t t, const std::vector<int32_t>& touched, double lr, double radius,
                   RowMat<float>* grad, RowMat<float>* m1, RowMat<float>* m2, RowMat<float>* x) {
  constexpr float kB1 = 0.9f, kB2 = 0.999f, kEps = 1e-8f;
  const double c1 = 1.0 - std::pow(double{kB1}, static_cast<double>(t));
  const double c2 = 1.0 - std::pow(double{kB2}, static_cast<double>(t));
  const float step = static_cast<float>(lr * std::sqrt(c2) / c1);
  for (int32_t r : touched) {
    auto g = grad->row(r).array();
    auto a = m1->row(r).array();
    auto v = m2->row(r).array();
    a = kB1 * a + (1.0f - kB1) * g;
    v = kB2 * v + (1.0f - kB2) * g.square();
    x->row(r).array() -= step * a / (v.sqrt() + kEps);
    const float nrm = x->row(r).norm();
    if (nrm > 0.0f) x->row(r) *= static_cast<float>(radius) / nrm;
    g.setZero();
  }
}

// Triples x nodes x dims in a batch above which the batch is split across
// threads.
constexpr int64_t kParallelWork = int64_t{1} << 20;

struct Triple {
  int32_t i, j, k;
};

float SqDist(const RowMat<float>& p, int64_t a, int64_t b) {
  return (p.row(a) - p.row(b)).squaredNorm();
}

// The paper's triple for anchor i: j one of i's k nearest neighbours (row i
// of `knn`), l uniform among the other points, both from `rng` in that
// order; then reordered so that the most similar pair (smallest Euclidean
// distance in `p`; ties keep the sampled order) comes first.
Triple DrawTriple(const RowMat<float>& p, const std::vector<int32_t>& knn, int64_t k, int64_t i,
                  ghhc::Rng& rng) {
  const int64_t n = p.rows();
  const int64_t j = knn[i * k + static_cast<int64_t>(rng.Below(k))];
  int64_t l;
  do {
    l = static_cast<int64_t>(rng.Below(n));
  } while (l == i || l == j);
  const float dij = SqDist(p, i, j), dil = SqDist(p, i, l), djl = SqDist(p, j, l);
  auto t = [](int64_t a, int64_t b, int64_t c) {
    return Triple{static_cast<int32_t>(a), static_cast<int32_t>(b), static_cast<int32_t>(c)};
  };
  if (dij <= std::min(dil, djl)) return t(i, j, l);
  if (dil <= djl) return t(i, l, j);
  return t(j, l, i);
}

// Fraction of `triples` (most similar pair first) that the discrete tree of
// nodes `z` orders correctly: the tree is eq. 4 on the nodes (NodeParents,
// float products) with every point of `points` under its nearest node, and
// triple (i, j, k) counts when the lowest common ancestor of i and j lies
// strictly below that of i and k (a triple whose three points share one
// lowest common ancestor does not count). The pruning of the extraction
// keeps every lowest common ancestor of points, so this is the fraction on
// the extracted tree. -1 once `cancelled` returns true.
double TripleAccuracy(const RowMat<double>& z, const RowMat<float>& points,
                      const std::vector<Triple>& triples, int threads,
                      const std::function<bool()>& cancelled) {
  const std::vector<int32_t> parent = ghhc::NodeParents(z, threads, true, cancelled);
  if (parent.empty()) return -1.0;
  const int64_t m = z.rows();
  // Depth of every node: parents precede their children in (norm, index)
  // order, so one pass in that order suffices.
  std::vector<int32_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  const Eigen::VectorXd sq = z.rowwise().squaredNorm();
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return sq[a] < sq[b] || (sq[a] == sq[b] && a < b);
  });
  std::vector<int32_t> depth(m, 0);
  for (int32_t c : order) depth[c] = parent[c] < 0 ? 0 : depth[parent[c]] + 1;
  const int64_t v = static_cast<int64_t>(triples.size());
  RowMat<float> rows(3 * v, points.cols());
  for (int64_t t = 0; t < v; ++t) {
    rows.row(3 * t) = points.row(triples[t].i);
    rows.row(3 * t + 1) = points.row(triples[t].j);
    rows.row(3 * t + 2) = points.row(triples[t].k);
  }
  const RowMat<float> zf = z.cast<float>();
  std::vector<int32_t> node(3 * v);
  ghhc::NearestNodes(rows, zf, {}, node.data(), cancelled);
  if (cancelled && cancelled()) return -1.0;
  auto lca = [&](int32_t a, int32_t b) {
    while (a != b) {
      if (depth[a] >= depth[b]) {
        a = parent[a];
      } else {
        b = parent[b];
      }
    }
    return a;
  };
  int64_t correct = 0;
  for (int64_t t = 0; t < v; ++t) {
    const int32_t ni = node[3 * t], nj = node[3 * t + 1], nk = node[3 * t + 2];
    if (ni == nj) {
      correct += nk != ni;  // i and j share a leaf cluster that k is not in
    } else {
      // Both ancestors lie on the path from ni to the root.
      correct += depth[lca(ni, nj)] > depth[lca(ni, nk)];
    }
  }
  return v > 0 ? static_cast<double>(correct) / static_cast<double>(v) : 0.0;
}

}  // namespace

std::vector<double> GhhcColumnScale(const MatrixView& x, const std::vector<double>& mean,
                                    GhhcStandardize standardize, int num_threads) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  if (standardize == GhhcStandardize::kOff || n < 1 || d < 1 ||
      static_cast<int64_t>(mean.size()) != d) {
    return {};
  }
  // Sums of squared deviations per fixed chunk, added in chunk order: the
  // result does not depend on the thread count.
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const Eigen::Map<const Eigen::RowVectorXd> mu(mean.data(), d);
  RowMat<double> partial = RowMat<double>::Zero(chunks, d);
  const int threads = num_threads > 0 ? num_threads : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r1 = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < r1; ++i) {
      partial.row(c) += (x.row(i).cast<double>() - mu).array().square().matrix();
    }
  }
  Eigen::RowVectorXd ss = Eigen::RowVectorXd::Zero(d);
  for (int64_t c = 0; c < chunks; ++c) ss += partial.row(c);
  std::vector<double> sd(d);
  std::vector<double> spread;  // the non-zero ones
  for (int64_t j = 0; j < d; ++j) {
    sd[j] = std::sqrt(ss[j] / static_cast<double>(n));
    if (sd[j] > 0) spread.push_back(sd[j]);
  }
  if (spread.empty()) return {};
  if (standardize == GhhcStandardize::kAuto) {
    std::sort(spread.begin(), spread.end());
    const double median = spread[(spread.size() - 1) / 2];
    if (!(spread.back() > kGhhcStandardizeRatio * median)) return {};
  }
  for (double& v : sd) {
    if (!(v > 0)) v = 1.0;
  }
  return sd;
}

double GhhcStepScale(const GhhcOptions& options) {
  const int64_t total = options.triples > 0 ? options.triples : kGhhcDefaultTriples;
  if (!options.step_budget || total <= kGhhcDefaultTriples) return 1.0;
  return static_cast<double>(kGhhcDefaultTriples) / static_cast<double>(total);
}

void SetGhhcPoints(GhhcPoints points, GhhcOptions* options) {
  options->learn_points = points == GhhcPoints::kLearned;
  options->choose_points = points == GhhcPoints::kAuto;
  options->choose_points_max_rows = 0;  // the choice is explicit
}

absl::Status ValidateGhhcOptions(const GhhcOptions& options) {
  return ValidateOptionsImpl(options);
}

bool GhhcChoosesPoints(const GhhcOptions& options, int64_t rows) {
  if (options.choose_points) return true;
  return !options.learn_points && options.validation_triples > 0 &&
         rows <= options.choose_points_max_rows;
}

namespace {

// GhhcChoosesPoints: both fits, each on half of the progress range.
absl::StatusOr<GhhcResult> FitChoosingPoints(const MatrixView& x, const GhhcOptions& options,
                                             RunContext& ctx) {
  GhhcOptions fixed = options;
  SetGhhcPoints(GhhcPoints::kFixed, &fixed);
  GhhcOptions learned = options;
  SetGhhcPoints(GhhcPoints::kLearned, &learned);
  learned.gumbel_temperature = 0.0;
  SubRangeContext first(ctx, 0.0, 0.5);
  DENDRO_ASSIGN_OR_RETURN(GhhcResult a, FitGhhc(x, fixed, first));
  SubRangeContext second(ctx, 0.5, 1.0);
  DENDRO_ASSIGN_OR_RETURN(GhhcResult b, FitGhhc(x, learned, second));
  const double acc_fixed = a.stats.kept_validation_accuracy;
  const double acc_learned = b.stats.kept_validation_accuracy;
  GhhcResult& kept = acc_learned > acc_fixed ? b : a;
  for (Hierarchy* h : {&kept.hierarchy, &kept.coarse_hierarchy}) {
    auto& md = h->mutable_metadata();
    md["points_chosen_by"] = "validation";
    md["fixed_points_validation_accuracy"] = absl::StrFormat("%.4f", acc_fixed);
    md["learned_points_validation_accuracy"] = absl::StrFormat("%.4f", acc_learned);
  }
  return std::move(kept);
}

}  // namespace

namespace {

// One fit of FitGhhc, its phases as methods in the order they run: each
// reads what the earlier ones left in the members (grouped below by the
// phase that sets them).
class GhhcFit {
 public:
  // `base` (may be null: a cold fit) is a warm start's previous model,
  // fitted on x's first base_rows rows (see FitGhhcFrom).
  GhhcFit(const MatrixView& x, const GhhcOptions& options, RunContext& ctx,
          const GhhcModel* base = nullptr, int64_t base_rows = 0)
      : x_(x),
        base_(base),
        base_rows_(base_rows),
        options_(options),
        ctx_(ctx),
        n_(x.rows()),
        m_(options.internal_nodes),
        threads_(options.num_threads),
        progress_(ctx),
        cancel_(ctx),
        cancelled_([this] { return cancel_.Poll(); }) {}

  absl::Status PreparePoints();        // 1. centre, project, normalise into the ball
  absl::Status FindNeighbours();       // 2. kNN table, held-out triples
  absl::Status InitialiseNodes();      // 3. HAC on a sample
  absl::Status Train();                // 4. SGD over triples, keep the best
  absl::StatusOr<GhhcResult> Extract();  // 5. the tree and the model
  absl::StatusOr<GhhcResult> Run();      // 1-5 in order

 private:
  // Training, one batch.
  absl::StatusOr<double> BatchObjective(int64_t step, int64_t bsize, int chunks);
  void StepPoints(int64_t step, int64_t bsize, int chunks);
  absl::Status MarginSteps();
  bool Validate(int64_t batches_done);
  // Extraction.
  absl::StatusOr<std::vector<int32_t>> NearestNodeOfEachPoint();
  // model_.leaf_size and leaf_mean: Ward's statistics of the leaf clusters.
  void SetLeafMeans(const std::vector<int32_t>& point_leaf, int32_t leaves);
  void WriteMetadata(Hierarchy& tree) const;

  ghhc::Rng AnchorRng(int64_t step) const {
    return ghhc::Rng(ghhc::StreamSeed(options_.seed, 3, static_cast<uint64_t>(step)));
  }
  // A training triple's anchor x_i: uniform over the rows, or in a warm
  // start with appended rows, one of those with probability 1/2.
  int64_t DrawAnchor(ghhc::Rng& ri) const {
    const int64_t appended = base_ != nullptr ? n_ - base_rows_ : 0;
    if (appended > 0 && ri.Below(2) == 0) {
      return base_rows_ + static_cast<int64_t>(ri.Below(static_cast<uint64_t>(appended)));
    }
    return static_cast<int64_t>(ri.Below(n_));
  }
  const RowMat<float>& TrainPoints() const { return options_.learn_points ? emb_ : pts_; }

  static constexpr uint64_t kValidationStream = 0xFA11DA7E;

  const MatrixView& x_;
  const GhhcModel* const base_;
  const int64_t base_rows_;
  const GhhcOptions& options_;
  RunContext& ctx_;
  const int64_t n_;
  const int32_t m_;
  ThreadScope threads_;
  Progress progress_;
  CancelFlag cancel_;
  const std::function<bool()> cancelled_;
  GhhcStats stats_;

  // PreparePoints: the points in the ball, of dimension d_.
  GhhcModel model_;
  RowMat<float> pts_;
  int64_t d_ = 0;
  // FindNeighbours.
  int32_t k_ = 0;
  int64_t batch_ = 0, total_ = 0, steps_ = 0, num_val_ = 0;
  std::vector<int32_t> knn_;
  std::vector<Triple> val_triples_;
  // InitialiseNodes, then Train: the nodes.
  RowMat<double> z_;
  // Train. Learned point embeddings (options.learn_points): `emb_` starts
  // as the fixed points and moves by Adam; `pts_` keeps the data's own
  // geometry, from which the triples are drawn and ordered.
  double step_scale_ = 1.0;
  int64_t seen_ = 0;
  RowMat<float> emb_, adam_m_, adam_v_, pgrad_;
  std::vector<uint8_t> touched_mask_;
  std::vector<int32_t> touched_;
  std::vector<RowMat<float>> chunk_x_, chunk_noise_, chunk_grad_, chunk_pgrad_;
  std::vector<ghhc::TripleWorkspace<float>> chunk_ws_;
  std::vector<double> chunk_loss_;
  std::vector<Triple> triples_;
  RowMat<float> zf_;
  RowMat<double> grad_;
  // Keep the best (see "Keep the best" in ghhc.h): the latest checked state
  // (the initial one included) within two standard errors of the best
  // held-out triple accuracy seen so far.
  double best_accuracy_ = -1.0, last_accuracy_ = -1.0, kept_accuracy_ = -1.0;
  int64_t kept_batches_ = 0;
  RowMat<double> kept_z_;
  RowMat<float> kept_emb_;
};

absl::Status GhhcFit::PreparePoints() {
  progress_.Report(0.0, 0.02, 0.0, "preprocessing");
  DENDRO_RETURN_IF_ERROR(ValidateFinite(x_));
  DENDRO_RETURN_IF_ERROR(ctx_.CheckCancelled());
  const int64_t input_dim = x_.cols();
  model_.dim = input_dim;
  if (base_ != nullptr) {
    // A warm start places the rows exactly as the base model placed them.
    model_.center = base_->center;
    model_.point_norm = base_->point_norm;
    model_.mean = base_->mean;
    model_.scale = base_->scale;
    model_.projection = base_->projection;
  } else {
    model_.center = options_.center;
    model_.point_norm = options_.point_norm;
    model_.mean =
        options_.center ? ColumnMean(x_, threads_.threads()) : std::vector<double>(input_dim, 0.0);
  }
  if (base_ == nullptr && options_.standardize != GhhcStandardize::kOff) {
    // The spread is taken about the column mean even when the rows are not
    // centred: standardising is about units, centring about the origin.
    const std::vector<double> mean =
        options_.center ? model_.mean : ColumnMean(x_, threads_.threads());
    model_.scale = GhhcColumnScale(x_, mean, options_.standardize, threads_.threads());
    DENDRO_RETURN_IF_ERROR(ctx_.CheckCancelled());
  }
  if (base_ == nullptr && options_.projection_dim > 0) {
    model_.projection = options_.projection == GhhcProjection::kPca
                            ? PcaProjection(x_, model_.mean, model_.scale, options_.projection_dim,
                                            options_.seed, threads_.threads(), cancelled_)
                            : RandomProjection(input_dim, options_.projection_dim, options_.seed);
    if (cancel_.seen()) return absl::CancelledError("job cancelled");
  }
  DENDRO_RETURN_IF_ERROR(NormaliseRows(x_, model_, threads_.threads(), &pts_, cancelled_));
  DENDRO_RETURN_IF_ERROR(ctx_.CheckCancelled());
  // From here on everything lives in the ball, of dimension d.
  d_ = pts_.cols();
  return absl::OkStatus();
}

absl::Status GhhcFit::FindNeighbours() {
  const auto t0 = Clock::now();
  ghhc::KnnOptions knn_options;
  knn_options.k = options_.neighbors;
  knn_options.exact_max_points = options_.exact_knn_max_points;
  knn_options.method =
      options_.knn_method == GhhcKnn::kHnsw ? ghhc::KnnMethod::kHnsw : ghhc::KnnMethod::kIvf;
  knn_options.ivf_list_size = options_.ivf_list_size;
  knn_options.ivf_probes = options_.ivf_probes;
  knn_options.hnsw_m = options_.hnsw_m;
  knn_options.hnsw_ef_construction = options_.hnsw_ef_construction;
  knn_options.hnsw_ef_search = options_.hnsw_ef_search;
  knn_options.seed = options_.seed;
  knn_options.num_threads = threads_.threads();
  k_ = static_cast<int32_t>(std::min<int64_t>(options_.neighbors, n_ - 1));
  // The anchors x_i of all triples come from their own random stream, so the
  // points whose neighbours are needed are known before the search.
  batch_ = options_.batch_size;
  total_ = options_.triples > 0 ? options_.triples : kGhhcDefaultTriples;
  steps_ = (total_ + batch_ - 1) / batch_;
  // Held-out triples for the keep-the-best rule, from their own streams.
  num_val_ = options_.validation_triples;
  std::vector<int64_t> val_anchor(num_val_);
  {
    ghhc::Rng rv(ghhc::StreamSeed(options_.seed, kValidationStream, 0));
    for (int64_t& a : val_anchor) a = static_cast<int64_t>(rv.Below(n_));
  }
  std::vector<uint8_t> anchor_mask;
  if (total_ + num_val_ < 2 * n_) {  // otherwise nearly every point is an anchor
    anchor_mask.assign(n_, 0);
    for (int64_t step = 0; step < steps_; ++step) {
      ghhc::Rng ri = AnchorRng(step);
      const int64_t bsize = std::min(batch_, total_ - step * batch_);
      for (int64_t t = 0; t < bsize; ++t) anchor_mask[DrawAnchor(ri)] = 1;
    }
    for (int64_t a : val_anchor) anchor_mask[a] = 1;
  }
  stats_.neighbors = k_;
  stats_.exact_knn = n_ <= options_.exact_knn_max_points;
  DENDRO_ASSIGN_OR_RETURN(
      knn_, ghhc::NearestNeighborTable(
                pts_, knn_options, ctx_,
                [&](double f) { progress_.Report(0.02, 0.30, f, "nearest neighbours"); },
                anchor_mask));
  stats_.knn_seconds = Seconds(t0);
  val_triples_.resize(num_val_);
  ghhc::Rng rng(ghhc::StreamSeed(options_.seed, kValidationStream, 1));
  for (int64_t t = 0; t < num_val_; ++t) {
    val_triples_[t] = DrawTriple(pts_, knn_, k_, val_anchor[t], rng);
  }
  return absl::OkStatus();
}

absl::Status GhhcFit::InitialiseNodes() {
  const auto t0 = Clock::now();
  if (base_ != nullptr) {
    z_ = Eigen::Map<const RowMat<double>>(base_->nodes.data(), m_, d_);
    stats_.init_seconds = Seconds(t0);
    return ctx_.CheckCancelled();
  }
  progress_.Report(0.30, 0.32, 0.0, "initialisation (HAC on a sample)");
  int64_t s = options_.init_sample > 0
                  ? options_.init_sample
                  : std::max<int64_t>(1000, std::min<int64_t>(kGhhcMaxInitSample, 4 * int64_t{m_}));
  s = std::min(s, n_);
  stats_.init_sample = static_cast<int32_t>(s);
  {
    const std::vector<int64_t> idx = SampleIndices(n_, s, options_.seed);
    RowMat<double> sample(s, d_);
    for (int64_t r = 0; r < s; ++r) sample.row(r) = pts_.row(idx[r]).cast<double>();
    z_ = ghhc::InitialNodes(sample, m_, options_.max_node_norm, options_.seed, cancelled_);
  }
  if (z_.rows() == 0 || cancel_.seen()) return absl::CancelledError("job cancelled");
  for (Eigen::Index r = 0; r < z_.rows(); ++r) ghhc::Retract(z_.row(r), options_.max_node_norm);
  stats_.init_seconds = Seconds(t0);
  return ctx_.CheckCancelled();
}

// Records the held-out accuracy of the nodes now and keeps them if it is
// within two standard errors of the best. False when cancelled.
bool GhhcFit::Validate(int64_t batches_done) {
  last_accuracy_ = TripleAccuracy(z_, TrainPoints(), val_triples_, threads_.threads(), cancelled_);
  if (last_accuracy_ < 0.0) return false;
  ++stats_.validations;
  best_accuracy_ = std::max(best_accuracy_, last_accuracy_);
  // Two standard errors of an accuracy near the best, estimated on V
  // triples (at least that of one triple in V).
  const double v = static_cast<double>(num_val_);
  const double tol =
      2.0 * std::sqrt(std::max(best_accuracy_ * (1.0 - best_accuracy_), 1.0 / v) / v);
  if (last_accuracy_ >= best_accuracy_ - tol) {
    kept_accuracy_ = last_accuracy_;
    kept_batches_ = batches_done;
    kept_z_ = z_;
    if (options_.learn_points) kept_emb_ = emb_;
  }
  return true;
}

// Draws the batch's triples and sums the objective's gradient with respect
// to the nodes into grad_ (and, learning points, each chunk's gradient with
// respect to its rows into chunk_pgrad_). Returns the summed objective.
absl::StatusOr<double> GhhcFit::BatchObjective(int64_t step, int64_t bsize, int chunks) {
  const bool learn = options_.learn_points;
  const bool noisy = options_.gumbel_temperature > 0.0;
  const float tau = static_cast<float>(options_.gumbel_temperature);
  const ghhc::Link link =
      options_.link == GhhcLink::kSigmoid ? ghhc::Link::kSigmoid : ghhc::Link::kSoftplus;
  const RowMat<float>& train_pts = TrainPoints();
  ghhc::Rng rng(ghhc::StreamSeed(options_.seed, 1, static_cast<uint64_t>(step)));
  ghhc::Rng ri = AnchorRng(step);
  for (int64_t t = 0; t < bsize; ++t) {
    triples_[t] = DrawTriple(pts_, knn_, k_, DrawAnchor(ri), rng);
  }
  zf_ = z_.cast<float>();
  // Small batches run on the calling thread: a parallel region per step
  // costs more than it saves there (and much more on a busy machine).
#pragma omp parallel for num_threads(threads_.threads()) \
    schedule(static, 1) if (bsize * m_ * d_ >= kParallelWork)
  for (int c = 0; c < chunks; ++c) {
    // A chunk is bsize / chunks triples against all M nodes: with many
    // nodes or big batches one batch takes long enough to poll per chunk.
    if (cancel_.Poll()) continue;
    const int64_t t0c = bsize * c / chunks;
    const int64_t t1c = bsize * (c + 1) / chunks;
    const int64_t cb = t1c - t0c;
    RowMat<float>& xc = chunk_x_[c];
    xc.resize(3 * cb, d_);
    for (int64_t t = 0; t < cb; ++t) {
      const Triple& tr = triples_[t0c + t];
      xc.row(3 * t) = train_pts.row(tr.i);
      xc.row(3 * t + 1) = train_pts.row(tr.j);
      xc.row(3 * t + 2) = train_pts.row(tr.k);
    }
    RowMat<float>& noise = chunk_noise_[c];
    if (noisy) {
      noise.resize(cb, 2 * m_);
      ghhc::Rng nrng(ghhc::StreamSeed(options_.seed, 2 + static_cast<uint64_t>(step),
                                      static_cast<uint64_t>(c)));
      float* u = noise.data();
      for (int64_t q = 0; q < noise.size(); ++q) {
        // 23 random bits + 1/2: exactly representable, strictly inside (0, 1).
        u[q] = (static_cast<float>(nrng.Next() >> 41) + 0.5f) * 0x1.0p-23f;
      }
      noise.array() = -tau * (-noise.array().log()).log();
    } else {
      noise.resize(0, 2 * m_);
    }
    chunk_grad_[c].setZero(m_, d_);
    chunk_loss_[c] = ghhc::TripleObjective<float>(xc, zf_, noise, link, &chunk_grad_[c],
                                                  &chunk_ws_[c], learn ? &chunk_pgrad_[c] : nullptr);
  }
  if (cancel_.seen()) return absl::CancelledError("job cancelled");
  grad_.setZero();
  double loss = 0.0;
  for (int c = 0; c < chunks; ++c) {
    grad_ += chunk_grad_[c].cast<double>();
    loss += chunk_loss_[c];
  }
  return loss;
}

// Learned points: one Adam step for every point of the batch, on its
// gradients summed over its occurrences.
void GhhcFit::StepPoints(int64_t step, int64_t bsize, int chunks) {
  touched_.clear();
  for (int c = 0; c < chunks; ++c) {
    const int64_t t0c = bsize * c / chunks;
    const int64_t cb = bsize * (c + 1) / chunks - t0c;
    for (int64_t t = 0; t < cb; ++t) {
      const Triple& tr = triples_[t0c + t];
      const int32_t ids[3] = {tr.i, tr.j, tr.k};
      for (int r = 0; r < 3; ++r) {
        if (!touched_mask_[ids[r]]) {
          touched_mask_[ids[r]] = 1;
          touched_.push_back(ids[r]);
        }
        pgrad_.row(ids[r]) += chunk_pgrad_[c].row(3 * t + r);
      }
    }
  }
  AdamPointStep(step + 1, touched_, options_.point_learning_rate, options_.point_norm, &pgrad_,
                &adam_m_, &adam_v_, &emb_);
  for (int32_t id : touched_) touched_mask_[id] = 0;
}

// The margin objective's steps on the current parent of every node.
absl::Status GhhcFit::MarginSteps() {
  const double margin_lr = (options_.margin_learning_rate > 0.0 ? options_.margin_learning_rate
                                                                : options_.learning_rate / 10.0) *
                           step_scale_;
  const std::vector<int32_t> parents =
      ghhc::NodeParents(z_, threads_.threads(), /*float_products=*/true, cancelled_);
  if (parents.empty() || cancel_.seen()) return absl::CancelledError("job cancelled");
  for (int32_t r = 0; r < options_.margin_steps; ++r) {
    // Each step is O(M d): polling every step costs nothing and bounds
    // the wait for a cancel by one step, whatever margin_steps is.
    if (cancel_.Poll()) return absl::CancelledError("job cancelled");
    grad_.setZero();
    ghhc::MarginObjective(z_, parents, options_.margin, &grad_);
    RsgdStep(z_, grad_, margin_lr, options_.max_node_norm, threads_.threads());
  }
  return absl::OkStatus();
}

absl::Status GhhcFit::Train() {
  const auto t0 = Clock::now();
  const int num_chunks = static_cast<int>(std::min<int64_t>(batch_, 8));
  step_scale_ = GhhcStepScale(options_);
  const double node_lr = options_.learning_rate * step_scale_;
  chunk_x_.resize(num_chunks);
  chunk_noise_.resize(num_chunks);
  chunk_grad_.resize(num_chunks);
  chunk_pgrad_.resize(num_chunks);
  chunk_ws_.resize(num_chunks);
  chunk_loss_.resize(num_chunks);
  triples_.resize(batch_);
  grad_.resize(m_, d_);
  const bool learn = options_.learn_points;
  if (learn) {
    emb_ = pts_;
    adam_m_.setZero(n_, d_);
    adam_v_.setZero(n_, d_);
    pgrad_.setZero(n_, d_);
    touched_mask_.assign(n_, 0);
  }
  // Per-batch objectives: the first `window` batches and a ring of the last.
  const int64_t window = std::clamp<int64_t>(steps_ / 20, 1, 1000);
  double first_sum = 0.0, batch_objective = 0.0;
  std::vector<double> last_losses(window, 0.0);
  const int64_t report_every = std::max<int64_t>(1, steps_ / 1000);
  const int64_t validate_every =
      options_.validate_every > 0 ? options_.validate_every : (steps_ + 19) / 20;
  if (num_val_ > 0 && !Validate(0)) return absl::CancelledError("job cancelled");
  for (int64_t step = 0; step < steps_; ++step) {
    if (cancel_.Poll()) return absl::CancelledError("job cancelled");
    const int64_t bsize = std::min(batch_, total_ - seen_);
    const int chunks = static_cast<int>(std::min<int64_t>(num_chunks, bsize));
    DENDRO_ASSIGN_OR_RETURN(const double loss, BatchObjective(step, bsize, chunks));
    if (learn) StepPoints(step, bsize, chunks);
    RsgdStep(z_, grad_, node_lr, options_.max_node_norm, threads_.threads());
    seen_ += bsize;
    batch_objective = loss / static_cast<double>(bsize);
    if (step < window) first_sum += batch_objective;
    last_losses[step % window] = batch_objective;
    if (options_.margin_every > 0 && options_.margin_steps > 0 &&
        (step + 1) % options_.margin_every == 0) {
      DENDRO_RETURN_IF_ERROR(MarginSteps());
    }
    if (num_val_ > 0 && ((step + 1) % validate_every == 0 || step + 1 == steps_) &&
        !Validate(step + 1)) {
      return absl::CancelledError("job cancelled");
    }
    if ((step + 1) % report_every == 0 || step + 1 == steps_) {
      progress_.Report(0.32, 0.95, static_cast<double>(seen_) / total_,
                       absl::StrFormat("training: %d/%d triples, objective %.5g", seen_, total_,
                                       batch_objective));
    }
  }
  stats_.triples = seen_;
  stats_.batches = steps_;
  stats_.initial_objective = first_sum / window;
  for (double v : last_losses) stats_.final_objective += v;
  stats_.final_objective /= window;
  if (num_val_ > 0) {
    stats_.final_validation_accuracy = last_accuracy_;
    stats_.best_validation_accuracy = best_accuracy_;
    stats_.kept_validation_accuracy = kept_accuracy_;
    stats_.kept_batches = kept_batches_;
    if (kept_batches_ != steps_) {
      z_ = std::move(kept_z_);
      if (learn) emb_ = std::move(kept_emb_);
    }
  } else {
    stats_.kept_batches = steps_;
  }
  stats_.train_seconds = Seconds(t0);
  return absl::OkStatus();
}

// The nearest node of every training point (in the ball, against the kept
// nodes), in blocks the workers poll for a cancel between.
absl::StatusOr<std::vector<int32_t>> GhhcFit::NearestNodeOfEachPoint() {
  constexpr int64_t kBlock = 2048;
  constexpr int64_t kSuper = 16 * kBlock;
  const RowMat<float>& train_pts = TrainPoints();
  zf_ = z_.cast<float>();
  std::vector<int32_t> point_node(n_);
  for (int64_t s0 = 0; s0 < n_; s0 += kSuper) {
    if (cancel_.Poll()) return absl::CancelledError("job cancelled");
    const int64_t s1 = std::min(n_, s0 + kSuper);
    // Every row is compared with all M nodes: with many nodes a block of
    // rows takes a while, so the workers poll per block and NearestNodes
    // per 512 rows.
#pragma omp parallel for num_threads(threads_.threads()) schedule(dynamic, 1)
    for (int64_t b0 = s0; b0 < s1; b0 += kBlock) {
      if (cancel_.Poll()) continue;
      const int64_t rn = std::min(kBlock, s1 - b0);
      ghhc::NearestNodes(train_pts.middleRows(b0, rn), zf_, {}, point_node.data() + b0,
                         cancelled_);
    }
    if (cancel_.seen()) return absl::CancelledError("job cancelled");
    progress_.Report(0.95, 1.0, 0.9 * static_cast<double>(s1) / n_, "extracting the tree");
  }
  return point_node;
}

void GhhcFit::WriteMetadata(Hierarchy& tree) const {
  auto& md = tree.mutable_metadata();
  md["method"] = "ghhc";
  md["internal_nodes"] = absl::StrCat(m_);
  md["triples"] = absl::StrCat(seen_);
  md["batch_size"] = absl::StrCat(options_.batch_size);
  md["learning_rate"] = absl::StrCat(options_.learning_rate);
  md["step_scale"] = absl::StrCat(step_scale_);
  md["neighbors"] = absl::StrCat(k_);
  md["margin"] = absl::StrCat(options_.margin);
  md["seed"] = absl::StrCat(options_.seed);
  md["point_norm"] = absl::StrCat(options_.point_norm);
  md["ball_dim"] = absl::StrCat(d_);
  if (options_.projection_dim > 0) {
    // A warm start's projection is its base model's, of whichever kind.
    md["projection"] = base_ != nullptr ? std::string("the warm start's")
                                        : std::string(GhhcProjectionName(options_.projection));
  }
  md["center"] = options_.center ? "true" : "false";
  md["standardize"] = std::string(GhhcStandardizeName(options_.standardize));
  md["standardized"] = model_.scale.empty() ? "false" : "true";
  md["link"] = std::string(GhhcLinkName(options_.link));
  md["tree"] = std::string(GhhcTreeName(options_.tree));
  md["max_node_norm"] = absl::StrCat(options_.max_node_norm);
  md["final_objective"] = absl::StrCat(stats_.final_objective);
  md["pruned_nodes"] = absl::StrCat(stats_.pruned_nodes);
  md["learn_points"] = options_.learn_points ? "true" : "false";
  if (options_.learn_points) {
    md["point_learning_rate"] = absl::StrCat(options_.point_learning_rate);
  }
  if (base_ != nullptr) {
    md["warm_start_rows"] = absl::StrCat(n_ - base_rows_);
    md["warm_start_base_rows"] = absl::StrCat(base_rows_);
  }
  md["validation_triples"] = absl::StrCat(num_val_);
  if (num_val_ > 0) {
    md["kept_batches"] = absl::StrCat(stats_.kept_batches);
    md["validation_accuracy"] = absl::StrFormat("%.4f", stats_.kept_validation_accuracy);
  }
}

absl::StatusOr<GhhcResult> GhhcFit::Extract() {
  const auto t0 = Clock::now();
  progress_.Report(0.95, 1.0, 0.0, "extracting the tree");
  model_.nodes.assign(z_.data(), z_.data() + z_.size());
  model_.node_parent = ghhc::NodeParents(z_, threads_.threads(), false, cancelled_);
  if (model_.node_parent.empty() || cancel_.seen()) return absl::CancelledError("job cancelled");
  DENDRO_ASSIGN_OR_RETURN(const std::vector<int32_t> point_node, NearestNodeOfEachPoint());
  DENDRO_ASSIGN_OR_RETURN(Hierarchy tree,
                          ExtractGhhcTree(model_.nodes, d_, options_.point_norm,
                                          model_.node_parent, point_node, &model_.node_leaf,
                                          &stats_.pruned_nodes));
  if (cancel_.Poll()) return absl::CancelledError("job cancelled");
  std::vector<int32_t> point_leaf(n_);
  for (int64_t i = 0; i < n_; ++i) point_leaf[i] = model_.node_leaf[point_node[i]];
  if (options_.learn_points) {
    model_.train_points.assign(pts_.data(), pts_.data() + pts_.size());
    model_.train_leaf = point_leaf;
  }
  if (options_.tree == GhhcTree::kWard) SetLeafMeans(point_leaf, tree.num_leaves());
  DENDRO_RETURN_IF_ERROR(tree.SetPointLeaf(std::move(point_leaf)));
  stats_.leaf_clusters = tree.num_leaves();
  WriteMetadata(tree);
  // The served tree is rebuilt from the model alone, as at load time, with
  // this tree's point_leaf and metadata.
  DENDRO_ASSIGN_OR_RETURN(GhhcTrees trees, GhhcModelTrees(model_, &tree));
  stats_.extract_seconds = Seconds(t0);
  progress_.Report(0.95, 1.0, 1.0, "done");
  GhhcResult result{std::move(model_), std::move(trees.refined), stats_, std::move(trees.coarse),
                    {}};
  if (options_.learn_points) result.point_embeddings.assign(emb_.data(), emb_.data() + emb_.size());
  return result;
}

void GhhcFit::SetLeafMeans(const std::vector<int32_t>& point_leaf, int32_t leaves) {
  model_.leaf_size.assign(leaves, 0.0);
  model_.leaf_mean.assign(static_cast<size_t>(leaves) * d_, 0.0);
  Eigen::Map<RowMat<double>> mean(model_.leaf_mean.data(), leaves, d_);
  for (int64_t i = 0; i < n_; ++i) {
    model_.leaf_size[point_leaf[i]] += 1.0;
    mean.row(point_leaf[i]) += pts_.row(i).cast<double>();
  }
  for (int32_t l = 0; l < leaves; ++l) {
    mean.row(l) /= model_.leaf_size[l] * options_.point_norm;
  }
}

absl::StatusOr<GhhcResult> GhhcFit::Run() {
  DENDRO_RETURN_IF_ERROR(PreparePoints());
  DENDRO_RETURN_IF_ERROR(FindNeighbours());
  DENDRO_RETURN_IF_ERROR(InitialiseNodes());
  DENDRO_RETURN_IF_ERROR(Train());
  return Extract();
}

}  // namespace

absl::StatusOr<GhhcResult> FitGhhc(const MatrixView& x, const GhhcOptions& options,
                                   RunContext& ctx) {
  DENDRO_RETURN_IF_ERROR(ValidateGhhcOptions(options));
  const int64_t n = x.rows();
  if (n < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("gHHC needs at least 3 points (one triple), got ", n));
  }
  if (GhhcChoosesPoints(options, n)) return FitChoosingPoints(x, options, ctx);
  const int64_t input_dim = x.cols();
  if (input_dim < 1) return absl::InvalidArgumentError("gHHC needs at least 1 column");
  if (options.projection_dim >= input_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "projection_dim must be below the data's dimension ", input_dim, " (0: no projection), got ",
        options.projection_dim));
  }
  if (n > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("too many points: ", n));
  }
  return GhhcFit(x, options, ctx).Run();
}

int64_t GhhcWarmTriples(const GhhcOptions& options, int64_t base_rows, int64_t n) {
  if (options.triples > 0) return options.triples;
  const double appended =
      n > 0 ? static_cast<double>(std::max<int64_t>(0, n - base_rows)) / static_cast<double>(n)
            : 0.0;
  const auto triples = static_cast<int64_t>(std::ceil(2.0 * appended * kGhhcDefaultTriples));
  return std::clamp<int64_t>(triples, kGhhcDefaultTriples / 10, kGhhcDefaultTriples);
}

absl::StatusOr<GhhcResult> FitGhhcFrom(const GhhcModel& base, int64_t base_rows,
                                       const MatrixView& x, const GhhcOptions& options,
                                       RunContext& ctx) {
  if (!base.train_points.empty()) {
    return absl::FailedPreconditionError(
        "the version learned its point embeddings, which its model does not keep, so its nodes "
        "cannot be trained further on the points");
  }
  if (base.dim != x.cols()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the version was fitted on ", base.dim, " columns, the rows have ", x.cols()));
  }
  if (base_rows < 1 || base_rows > x.rows()) {
    return absl::FailedPreconditionError(absl::StrCat("the version was fitted on ", base_rows,
                                                      " rows, more than the ", x.rows(), " given"));
  }
  const int64_t d = base.ball_dim();
  const int32_t m = base.num_nodes();
  if (m < 2 || static_cast<int64_t>(base.nodes.size()) != int64_t{m} * d ||
      static_cast<int64_t>(base.mean.size()) != base.dim ||
      (!base.scale.empty() && static_cast<int64_t>(base.scale.size()) != base.dim)) {
    return absl::InvalidArgumentError("inconsistent gHHC model (node, mean or scale sizes)");
  }
  GhhcOptions o = options;
  o.internal_nodes = m;
  o.center = base.center;
  o.point_norm = base.point_norm;
  o.projection_dim = base.projection.empty() ? 0 : static_cast<int32_t>(d);
  o.standardize = base.scale.empty() ? GhhcStandardize::kOff : GhhcStandardize::kOn;
  SetGhhcPoints(GhhcPoints::kFixed, &o);
  o.triples = GhhcWarmTriples(options, base_rows, x.rows());
  DENDRO_RETURN_IF_ERROR(ValidateGhhcOptions(o));
  if (x.rows() > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("too many points: ", x.rows()));
  }
  return GhhcFit(x, o, ctx, &base, base_rows).Run();
}

absl::StatusOr<std::vector<int32_t>> AssignGhhcLeaves(const GhhcModel& model,
                                                      const MatrixView& rows, int num_threads) {
  const int64_t d = model.ball_dim();
  const int32_t m = model.num_nodes();
  if (rows.cols() != model.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows have ", rows.cols(), " columns but the gHHC model was fitted on ", model.dim));
  }
  if (static_cast<int64_t>(model.nodes.size()) != int64_t{m} * d ||
      static_cast<int64_t>(model.mean.size()) != model.dim ||
      (!model.scale.empty() && static_cast<int64_t>(model.scale.size()) != model.dim) ||
      static_cast<int64_t>(model.projection.size()) % model.dim != 0 || m < 1) {
    return absl::InvalidArgumentError(
        "inconsistent gHHC model (node, mean, scale or projection sizes)");
  }
  DENDRO_RETURN_IF_ERROR(ValidateFinite(rows));
  ThreadScope threads(num_threads);
  RowMat<float> pts;
  DENDRO_RETURN_IF_ERROR(NormaliseRows(rows, model, threads.threads(), &pts));
  const RowMat<float> zf = Eigen::Map<const RowMat<double>>(model.nodes.data(), m, d).cast<float>();
  std::vector<uint8_t> allowed(m);
  bool any = false;
  for (int32_t q = 0; q < m; ++q) {
    allowed[q] = model.node_leaf[q] >= 0;
    any = any || allowed[q];
  }
  if (!any) return absl::InvalidArgumentError("inconsistent gHHC model: no node holds a leaf");
  const int64_t n = rows.rows();
  std::vector<int32_t> node(n);
  constexpr int64_t kBlock = 2048;
  if (!model.train_points.empty()) {
    const int64_t nt = static_cast<int64_t>(model.train_leaf.size());
    if (static_cast<int64_t>(model.train_points.size()) != nt * d || nt < 1) {
      return absl::InvalidArgumentError("inconsistent gHHC model (training points and leaves)");
    }
    const Eigen::Map<const RowMat<float>> tp(model.train_points.data(), nt, d);
    const Eigen::ArrayXf tsq = tp.rowwise().squaredNorm().array();
#pragma omp parallel for num_threads(threads.threads()) schedule(dynamic, 1)
    for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
      const int64_t rn = std::min(kBlock, n - b0);
      RowMat<float> prod;
      for (int64_t t0 = 0; t0 < rn; t0 += 256) {
        const int64_t tn = std::min<int64_t>(256, rn - t0);
        prod.noalias() = pts.middleRows(b0 + t0, tn) * tp.transpose();
        for (int64_t i = 0; i < tn; ++i) {
          // ||x - t||^2 up to the constant ||x||^2.
          Eigen::Index arg = 0;
          (tsq - 2.0f * prod.row(i).array().transpose()).minCoeff(&arg);
          node[b0 + t0 + i] = model.train_leaf[arg];
        }
      }
    }
    return node;
  }
#pragma omp parallel for num_threads(threads.threads()) schedule(dynamic, 1)
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t rn = std::min(kBlock, n - b0);
    ghhc::NearestNodes(pts.middleRows(b0, rn), zf, allowed, node.data() + b0);
  }
  for (int64_t i = 0; i < n; ++i) node[i] = model.node_leaf[node[i]];
  return node;
}

}  // namespace dendro
