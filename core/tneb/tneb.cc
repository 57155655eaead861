#include "core/tneb/tneb.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/named_choice.h"
#include "core/common/cpus.h"
#include "core/common/omp_threads.h"
#include "core/common/status_macros.h"
#include "core/common/sub_range_context.h"
#include "core/tneb/graph.h"

namespace dendro {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Rows per chunk of a pass of `mix` over d-column rows, with a cancellation
// poll between chunks: one pass costs O(n m d^2), as much as an EM
// iteration. A chunk holds about 5e7 flops and is a whole multiple of
// Assign's 512-row blocks, so every block sees the same rows as in a single
// call and the labels are the same.
int64_t ChunkRows(const StudentMixture& mix, int64_t d) {
  constexpr int64_t kBlock = 512;
  const double per_row = 2.0 * mix.num_components() * (d + 4.0) * d;
  return kBlock * static_cast<int64_t>(std::clamp(5e7 / per_row / kBlock, 1.0, 128.0));
}

// StudentMixture::Assign over row chunks.
absl::StatusOr<std::vector<int32_t>> AssignInChunks(const StudentMixture& mix,
                                                    const MatrixView& x,
                                                    const FeatureTransform& t, int threads,
                                                    RunContext& ctx) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  const int64_t chunk = ChunkRows(mix, d);
  std::vector<int32_t> out;
  out.reserve(n);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    if (ctx.Cancelled()) return absl::CancelledError("job cancelled");
    const int64_t rn = std::min(chunk, n - r0);
    const std::vector<int32_t> part = mix.Assign(MatrixView(x.data() + r0 * d, rn, d), t, threads);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Mean log p(x_i) over the rows of x (after t), over row chunks.
absl::StatusOr<double> MeanLogDensityInChunks(const StudentMixture& mix, const MatrixView& x,
                                              const FeatureTransform& t, int threads,
                                              RunContext& ctx) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  const int64_t chunk = ChunkRows(mix, d);
  Eigen::MatrixXd rows(std::min(chunk, n), d);
  double sum = 0.0;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    if (ctx.Cancelled()) return absl::CancelledError("job cancelled");
    const int64_t rn = std::min(chunk, n - r0);
    if (rows.rows() != rn) rows.resize(rn, d);
    LoadRows(x, t, r0, &rows);
    const Eigen::VectorXd log_p = mix.LogDensity(rows, threads);
    for (Eigen::Index i = 0; i < log_p.size(); ++i) sum += log_p[i];
  }
  return sum / static_cast<double>(n);
}

// The path options t-NEB passes on (num_threads is the caller's).
NebOptions NebOptionsOf(const TnebOptions& o) {
  NebOptions no;
  no.path_points = o.path_points;
  no.path_steps = o.path_steps;
  no.learning_rate = o.learning_rate;
  no.eval_points = o.eval_points;
  return no;
}

// Appendix D.2's filter over the components of a fitted mixture.
struct ComponentFilter {
  std::vector<ComponentInfo> info;  // per component; `kept` and `leaf` set
  std::vector<int32_t> keep;        // surviving components, ascending
  int too_small = 0;
  int too_elongated = 0;  // and not too small
};

absl::StatusOr<ComponentFilter> FilterComponents(const StudentMixture& full, const MatrixView& x,
                                                 const FeatureTransform& t, const TnebOptions& o,
                                                 int threads, RunContext& ctx) {
  const int m = full.num_components();
  ComponentFilter f;
  f.info.resize(m);
  DENDRO_ASSIGN_OR_RETURN(const std::vector<int32_t> hard,
                          AssignInChunks(full, x, t, threads, ctx));
  for (int32_t c : hard) ++f.info[c].points;
  const std::vector<double> elong = full.Elongations();
  const double elong_limit = o.max_elongation * static_cast<double>(full.dim());
  for (int k = 0; k < m; ++k) {
    ComponentInfo& info = f.info[k];
    info.weight = full.weights()[k];
    info.elongation = elong[k];
    const bool too_small = info.points <= o.min_component_points;
    const bool too_long = !(info.elongation < elong_limit);
    f.too_small += too_small;
    f.too_elongated += (!too_small && too_long);
    if (!too_small && !too_long) {
      info.kept = true;
      info.leaf = static_cast<int32_t>(f.keep.size());
      f.keep.push_back(k);
    }
  }
  return f;
}

}  // namespace

absl::StatusOr<TnebMerge> ParseTnebMerge(const std::string& name) {
  if (name == "density") return TnebMerge::kDensity;
  if (name == "persistence") return TnebMerge::kPersistence;
  if (name == "graph") return TnebMerge::kGraph;
  return absl::InvalidArgumentError(
      absl::StrCat("t-NEB merge must be 'density', 'persistence' or 'graph', got '", name, "'"));
}

namespace {

constexpr NamedChoice<TnebStandardize> kTnebStandardizes[] = {
    {TnebStandardize::kAuto, "auto"},
    {TnebStandardize::kOn, "on"},
    {TnebStandardize::kOff, "off"},
};

}  // namespace

absl::StatusOr<TnebStandardize> ParseTnebStandardize(const std::string& name) {
  return ParseChoice(kTnebStandardizes, "t-NEB standardize", name);
}

std::string_view TnebStandardizeName(TnebStandardize standardize) {
  return ChoiceName(kTnebStandardizes, standardize);
}

TnebSpreadRatio TnebStandardizeNeeded(const std::vector<double>& sd, double max_elongation) {
  TnebSpreadRatio out;
  if (sd.empty()) return out;
  const auto [lo, hi] = std::minmax_element(sd.begin(), sd.end());
  out.ratio = *lo > 0.0 ? *hi / *lo : std::numeric_limits<double>::infinity();
  // Compared squared, as the filter compares scale eigenvalues (variances).
  out.standardize = out.ratio * out.ratio >= max_elongation * static_cast<double>(sd.size());
  return out;
}

const char* TnebMergeName(TnebMerge merge) {
  switch (merge) {
    case TnebMerge::kDensity:
      return "density";
    case TnebMerge::kPersistence:
      return "persistence";
    case TnebMerge::kGraph:
      return "graph";
  }
  return "density";
}

int32_t TnebInitMinRows(const TnebOptions& options, int64_t d) {
  if (options.init_min_rows >= 0) return options.init_min_rows;
  return d > kTnebAuthorsStartMaxDimension ? static_cast<int32_t>(d + 1) : 0;
}

double TnebScalePriorRows(const TnebOptions& options, int64_t /*d*/) {
  // Off by default: with S0 = data covariance / m^(2/d) it lowered the
  // Densired medians at 16 and 32 dimensions (docs/methods.md).
  return options.scale_prior_rows >= 0.0 ? options.scale_prior_rows : 0.0;
}

double TnebDegenerateShare(int32_t k) { return std::max(0.5, 1.0 - 0.1 * k); }

TnebDiagnostics TnebDiagnosticsAt(const Hierarchy& tree, const TnebDiagnostics& base, int32_t k) {
  TnebDiagnostics d = base;
  const int32_t l = tree.num_leaves();
  d.k = std::clamp(k, 1, std::max(1, l));
  d.cluster_sizes.assign(d.k, 0);
  d.largest_share = 0.0;
  d.degenerate = false;
  d.degenerate_reason.clear();
  absl::StatusOr<std::vector<int32_t>> cut = tree.CutToK(d.k);
  if (!cut.ok()) return d;
  const std::vector<int32_t>& point_leaf = tree.point_leaf();
  for (int32_t leaf : point_leaf) ++d.cluster_sizes[(*cut)[leaf]];
  if (point_leaf.empty()) return d;
  const int64_t largest = *std::max_element(d.cluster_sizes.begin(), d.cluster_sizes.end());
  d.largest_share = static_cast<double>(largest) / static_cast<double>(point_leaf.size());
  if (d.k >= 2 && d.largest_share > TnebDegenerateShare(d.k)) {
    d.degenerate = true;
    d.degenerate_reason = absl::StrFormat(
        "at k = %d the largest cluster holds %.1f%% of the %d training rows (more than "
        "max(0.5, 1 - 0.1 k) = %.0f%%): the tree is degenerate; try another merge, more "
        "components or standardisation",
        d.k, 100.0 * d.largest_share, static_cast<int64_t>(point_leaf.size()),
        100.0 * TnebDegenerateShare(d.k));
  }
  return d;
}

std::string TnebDiagnosticsSummary(const TnebDiagnostics& d) {
  std::string out = absl::StrFormat(
      "k=%d largest_share=%.3f sizes=[%s] surviving=%d/%d "
      "filtered small=%d elongated=%d merge=%s",
      d.k, d.largest_share, absl::StrJoin(d.cluster_sizes, ","), d.surviving, d.components,
      d.filtered_small, d.filtered_elongated, d.merge);
  if (!d.candidates.empty()) {
    absl::StrAppend(&out, " bic=");
    for (size_t i = 0; i < d.candidates.size(); ++i) {
      absl::StrAppend(&out, i ? "," : "", d.candidates[i], ":",
                      absl::StrFormat("%.6g", d.candidate_bic[i]));
    }
    absl::StrAppend(&out, " kept=", d.kept_candidate);
  }
  if (d.degenerate) absl::StrAppend(&out, "; DEGENERATE: ", d.degenerate_reason);
  return out;
}

absl::StatusOr<TnebRestartRanking> ParseTnebRestartRanking(const std::string& name) {
  if (name == "kept_log_likelihood") return TnebRestartRanking::kKeptLogLikelihood;
  if (name == "log_likelihood") return TnebRestartRanking::kLogLikelihood;
  return absl::InvalidArgumentError(absl::StrCat(
      "rank_restarts_by must be 'kept_log_likelihood' or 'log_likelihood', got '", name, "'"));
}

const char* TnebRestartRankingName(TnebRestartRanking ranking) {
  return ranking == TnebRestartRanking::kKeptLogLikelihood ? "kept_log_likelihood"
                                                           : "log_likelihood";
}

int32_t TnebRestarts(const TnebOptions& options, int64_t d) {
  if (options.restarts > 0) return options.restarts;
  return d > kTnebLowDimension ? kTnebHighDimensionRestarts : 20;
}

TnebMerge TnebMergeOrder(const TnebOptions& options, int64_t d) {
  if (!options.merge_by_dimension || d <= kTnebLowDimension) return options.merge;
  return TnebMerge::kDensity;
}

bool TnebGraphFallback(const TnebOptions& options, int64_t d) {
  return options.merge_by_dimension && d > kTnebLowDimension;
}

bool TnebAutoDof(const TnebOptions& options, int64_t d) {
  if (options.gaussian) return false;
  if (options.auto_dof) return true;
  return !options.learn_dof && options.auto_dof_low_dimension && d <= kTnebLowDimension;
}

absl::Status ValidateTnebOptions(const TnebOptions& o) {
  if (o.components < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("t-NEB needs at least 2 mixture components, got ", o.components));
  }
  if (o.neighbors < 1) {
    return absl::InvalidArgumentError(absl::StrCat("neighbors must be >= 1, got ", o.neighbors));
  }
  if (o.min_component_points < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_component_points must be >= 0, got ", o.min_component_points));
  }
  if (!(o.max_elongation > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_elongation must be > 0, got ", o.max_elongation));
  }
  DENDRO_RETURN_IF_ERROR(ValidateNebOptions(NebOptionsOf(o)));
  if (!o.gaussian && !(o.dof > 0.0 && std::isfinite(o.dof))) {
    return absl::InvalidArgumentError(
        absl::StrCat("degrees of freedom must be a finite number > 0, got ", o.dof));
  }
  if (!(o.ridge >= 0.0 && std::isfinite(o.ridge))) {
    return absl::InvalidArgumentError(absl::StrCat("ridge must be finite and >= 0, got ", o.ridge));
  }
  if (o.restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "restarts must be >= 1 (or 0 for the default: 20 if d <= ", kTnebLowDimension, ", else ",
        kTnebHighDimensionRestarts, "), got ", o.restarts));
  }
  if (o.max_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_iterations must be >= 1, got ", o.max_iterations));
  }
  if (!(o.tolerance > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("tolerance must be > 0, got ", o.tolerance));
  }
  if (o.init_min_rows < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_min_rows must be >= 0 (or -1 for the default), got ", o.init_min_rows));
  }
  if (!(o.scale_prior_rows >= 0.0 || o.scale_prior_rows == -1.0) ||
      !std::isfinite(o.scale_prior_rows)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale_prior_rows must be >= 0 (or -1 for the default), got ", o.scale_prior_rows));
  }
  if (o.diagnose_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("diagnose_k must be >= 0 (0: the auto k), got ", o.diagnose_k));
  }
  if (o.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0, got ", o.num_threads));
  }
  return absl::OkStatus();
}

namespace {

// Constant columns make every scale matrix singular (up to the ridge); they
// are rejected whether or not the data are standardised.
absl::Status CheckColumns(const MatrixView& x) {
  const int64_t d = x.cols();
  std::vector<float> lo(x.row(0).data(), x.row(0).data() + d);
  std::vector<float> hi = lo;
  for (int64_t i = 1; i < x.rows(); ++i) {
    const float* r = x.row(i).data();
    for (int64_t j = 0; j < d; ++j) {
      lo[j] = std::min(lo[j], r[j]);
      hi[j] = std::max(hi[j], r[j]);
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    if (lo[j] == hi[j]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column ", j, " is constant (every value is ", lo[j],
          "): it carries no information and makes every scale matrix singular; drop it"));
    }
  }
  return absl::OkStatus();
}


}  // namespace

absl::StatusOr<std::vector<int32_t>> TnebModel::AssignLeaves(const MatrixView& x,
                                                             int num_threads) const {
  if (x.cols() != input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("t-NEB model expects rows with ", input_dim(), " columns, got ", x.cols()));
  }
  DENDRO_RETURN_IF_ERROR(ValidateFinite(x));
  const ProductsOnCallingThread products_here;
  return mixture.Assign(x, transform, num_threads);
}

absl::StatusOr<std::vector<int32_t>> TnebCutToK(const Hierarchy& tree, int32_t k) {
  const int32_t l = tree.num_leaves();
  if (k < 1 || k > l) {
    return absl::InvalidArgumentError(
        absl::StrCat("k = ", k, " is not reachable: this t-NEB hierarchy has ", l,
                     " leaves (surviving mixture components), so k must be in [1, ", l, "]",
                     k > l ? "; fit more components or relax the filters to get more" : ""));
  }
  return tree.CutToK(k);
}

namespace {

// One t-NEB fit, phase by phase; FitTneb runs the phases in order. Each
// phase reads what the earlier ones left in the members and reports its
// share of the progress range: the mixture [0, 0.6), the filter at 0.6, the
// paths [0.6, 0.98), the tree at 0.98.
class TnebFit {
 public:
  // `base` (may be null: a cold fit) is a warm start's previous model (see
  // FitTnebFrom).
  TnebFit(const MatrixView& x, const TnebOptions& o, RunContext& ctx,
          const TnebModel* base = nullptr)
      : x_(x),
        base_(base),
        o_(o),
        ctx_(ctx),
        n_(x.rows()),
        d_(x.cols()),
        // Not omp_get_max_threads(): the callers' ProductsOnCallingThread
        // guard has set it to 1 by now.
        threads_(ThreadsOrDefault(o.num_threads)),
        standardize_mode_(o.standardize ? TnebStandardize::kOn : o.standardize_mode) {}

  // The input checks that need the data, and the standardisation.
  absl::Status Prepare();
  // 1. The mixture (with auto_dof: one candidate per tail, lowest BIC kept).
  absl::Status FitMixture();
  // 2. Components too small or too elongated dropped; rows to the kept ones.
  absl::Status Filter();
  // With the auto standardisation, on raw columns whose fit left fewer than
  // two components, some of them for elongation: switches to standardised
  // columns (the mixture and filter are then run again) and says so.
  bool StandardizeAfterFilterFailed(const absl::Status& filtered);
  // 3. Similarities between kept components: density paths, or the
  // neighbour graph of the training rows (the graph merge).
  absl::Status ComputeSimilarities();
  // 4. The merge tree over the kept components, its metadata and the
  // diagnostics at the asked cut.
  absl::Status BuildTree();
  TnebResult Result();
  // The phases above in order, the standardisation retry included.
  absl::StatusOr<TnebResult> Run();

 private:
  enum Tails { kFixedDof = 0, kLearnedDof = 1, kGaussian = 2, kNumTails = 3 };
  static constexpr const char* kTailNames[kNumTails] = {"fixed_dof", "learned_dof", "gaussian"};

  MixtureOptions MixtureOptionsOf() const;
  double Bic(const MixtureFit& f, bool learned) const;
  void Describe(const MergeTree& mt);

  const MatrixView& x_;
  const TnebModel* const base_;
  const TnebOptions& o_;
  RunContext& ctx_;
  const int64_t n_;
  const int64_t d_;
  const int threads_;
  // The standardisation asked for: TnebOptions::standardize means kOn.
  const TnebStandardize standardize_mode_;
  FeatureTransform transform_;
  FeatureTransform columns_;  // the standardisation, whether used or not
  TnebSpreadRatio spread_;    // the columns' s_max / s_min, and the auto rule's verdict
  // Why the columns were standardised: "asked", "column_sd_ratio" (the auto
  // rule before the fit), "filter" (auto, after the raw fit's filter), "".
  std::string standardize_reason_;
  // 1.
  MixtureOptions mo_;
  bool by_kept_ = false;
  bool auto_dof_ = false;
  Tails tails_ = kFixedDof;
  double bic_of_[kNumTails] = {0.0, 0.0, 0.0};  // auto_dof only
  std::optional<MixtureFit> fit_;
  double em_seconds_ = 0.0;
  // 2.
  ComponentFilter filter_;
  std::optional<StudentMixture> mix_;
  double kept_log_likelihood_ = 0.0;
  std::vector<int32_t> point_leaf_;
  double filter_seconds_ = 0.0;
  // 3. and 4., for one merge order (a fit may try two, see Run).
  struct Merged {
    TnebMerge merge = TnebMerge::kDensity;
    std::vector<SimilarityEdge> edges;
    std::vector<ComponentPair> bridges;
    std::optional<Hierarchy> tree;
    std::vector<double> similarity;
    double offset = 0.0;
    TnebDiagnostics diagnostics;
  };
  Merged merged_;
  double path_seconds_ = 0.0;
  double tree_seconds_ = 0.0;
};

absl::Status TnebFit::Prepare() {
  if (d_ < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("t-NEB needs at least 2 feature columns, got ", d_,
                     " (in one dimension the path between two means is the segment itself)"));
  }
  if (n_ < o_.components) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data have ", n_, " rows but ", o_.components,
                     " mixture components were requested: need at least one row per component"));
  }
  DENDRO_RETURN_IF_ERROR(ValidateFinite(x_));
  DENDRO_RETURN_IF_ERROR(CheckColumns(x_));
  DENDRO_ASSIGN_OR_RETURN(columns_, StandardizationOf(x_));
  spread_ = TnebStandardizeNeeded(columns_.scale, o_.max_elongation);
  if (base_ != nullptr) {
    // A warm start models the rows in its base model's coordinates.
    transform_ = base_->transform;
    if (!transform_.identity()) standardize_reason_ = "warm_start";
    return absl::OkStatus();
  }
  if (standardize_mode_ == TnebStandardize::kOn) {
    standardize_reason_ = "asked";
  } else if (standardize_mode_ == TnebStandardize::kAuto && spread_.standardize) {
    standardize_reason_ = "column_sd_ratio";
  }
  if (!standardize_reason_.empty()) transform_ = columns_;
  return absl::OkStatus();
}

bool TnebFit::StandardizeAfterFilterFailed(const absl::Status& filtered) {
  if (base_ != nullptr || filtered.ok() || !absl::IsFailedPrecondition(filtered) ||
      standardize_mode_ != TnebStandardize::kAuto || !transform_.identity() ||
      filter_.too_elongated == 0) {
    return false;
  }
  transform_ = columns_;
  standardize_reason_ = "filter";
  fit_.reset();
  return true;
}

MixtureOptions TnebFit::MixtureOptionsOf() const {
  MixtureOptions mo;
  mo.components = o_.components;
  mo.dof = o_.dof;
  mo.learn_dof = o_.learn_dof;
  mo.gaussian = o_.gaussian;
  mo.ridge = o_.ridge;
  mo.restarts = TnebRestarts(o_, d_);
  mo.max_iterations = o_.max_iterations;
  mo.tolerance = o_.tolerance;
  mo.seed = o_.seed;
  mo.num_threads = threads_;
  mo.init_min_rows = TnebInitMinRows(o_, d_);
  mo.scale_prior_rows = TnebScalePriorRows(o_, d_);
  return mo;
}

// Free parameters: weights, means, symmetric scales (+ one nu each if learned).
double TnebFit::Bic(const MixtureFit& f, bool learned) const {
  const double dd = static_cast<double>(d_);
  const double mm = static_cast<double>(o_.components);
  const double base_params = (mm - 1.0) + mm * dd + mm * dd * (dd + 1.0) / 2.0;
  return -2.0 * static_cast<double>(n_) * f.log_likelihood +
         (base_params + (learned ? mm : 0.0)) * std::log(static_cast<double>(n_));
}

absl::Status TnebFit::FitMixture() {
  const auto t0 = std::chrono::steady_clock::now();
  mo_ = MixtureOptionsOf();
  // The kept fit's tails: as asked (a warm start: its base's, which
  // FitTnebFrom put in the options), or auto_dof's choice below.
  tails_ = o_.gaussian ? kGaussian : (o_.learn_dof ? kLearnedDof : kFixedDof);
  if (base_ != nullptr) {
    // One EM run from the base model's mixture.
    mo_.start = &base_->mixture;
    mo_.restarts = 1;
    SubRangeContext sub(ctx_, 0.0, 0.6);
    DENDRO_ASSIGN_OR_RETURN(fit_, FitStudentMixture(x_, transform_, mo_, sub));
    em_seconds_ = Seconds(t0);
    return absl::OkStatus();
  }
  by_kept_ = o_.rank_restarts_by == TnebRestartRanking::kKeptLogLikelihood;
  if (by_kept_) {
    // A component that collapsed onto a few rows raises the whole mixture's
    // likelihood by far more than the fit of the rest differs between
    // restarts, and the filter drops it: rank by what is left.
    mo_.restart_score = [this](const StudentMixture& full) -> absl::StatusOr<double> {
      DENDRO_ASSIGN_OR_RETURN(const ComponentFilter f,
                              FilterComponents(full, x_, transform_, o_, threads_, ctx_));
      if (f.keep.size() < 2) return -std::numeric_limits<double>::infinity();
      DENDRO_ASSIGN_OR_RETURN(const StudentMixture kept, full.Subset(f.keep));
      return MeanLogDensityInChunks(kept, x_, transform_, threads_, ctx_);
    };
  }
  auto_dof_ = TnebAutoDof(o_, d_);
  // With auto_dof the candidates run in this order, each on a fifth of the
  // progress range; the lowest BIC is kept, the earlier candidate on a tie.
  if (!auto_dof_) {
    SubRangeContext sub(ctx_, 0.0, 0.6);
    DENDRO_ASSIGN_OR_RETURN(fit_, FitStudentMixture(x_, transform_, mo_, sub));
  } else {
    constexpr double kProgress[kNumTails + 1] = {0.0, 0.2, 0.4, 0.6};
    for (int i = 0; i < kNumTails; ++i) {
      MixtureOptions candidate = mo_;
      candidate.learn_dof = i == kLearnedDof;
      candidate.gaussian = i == kGaussian;
      SubRangeContext sub(ctx_, kProgress[i], kProgress[i + 1]);
      absl::StatusOr<MixtureFit> f = FitStudentMixture(x_, transform_, candidate, sub);
      if (!f.ok()) return f.status();
      bic_of_[i] = Bic(*f, /*learned=*/i == kLearnedDof);
      if (!fit_.has_value() || bic_of_[i] < bic_of_[tails_]) {
        fit_ = std::move(*f);
        tails_ = static_cast<Tails>(i);
      }
    }
  }
  em_seconds_ = Seconds(t0);
  return absl::OkStatus();
}

absl::Status TnebFit::Filter() {
  const auto t0 = std::chrono::steady_clock::now();
  if (ctx_.Cancelled()) return absl::CancelledError("job cancelled");
  ctx_.Report(0.6, "filtering components");
  const StudentMixture& full = fit_->mixture;
  const int m = full.num_components();
  DENDRO_ASSIGN_OR_RETURN(filter_, FilterComponents(full, x_, transform_, o_, threads_, ctx_));
  const int32_t l = static_cast<int32_t>(filter_.keep.size());
  if (l < 2) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "t-NEB: only %d of %d mixture components survived filtering (%d had <= %d points, %d "
        "more had elongation >= %g = %g x d); a hierarchy needs at least 2. Try fewer "
        "components, a larger ridge, or relax min_component_points / max_elongation",
        l, m, filter_.too_small, o_.min_component_points, filter_.too_elongated,
        o_.max_elongation * static_cast<double>(d_), o_.max_elongation));
  }
  DENDRO_ASSIGN_OR_RETURN(mix_, full.Subset(filter_.keep));
  if (by_kept_) {
    kept_log_likelihood_ = fit_->restart_score[fit_->best_restart];
  } else {
    DENDRO_ASSIGN_OR_RETURN(kept_log_likelihood_,
                            MeanLogDensityInChunks(*mix_, x_, transform_, threads_, ctx_));
  }
  DENDRO_ASSIGN_OR_RETURN(point_leaf_, AssignInChunks(*mix_, x_, transform_, threads_, ctx_));
  filter_seconds_ = Seconds(t0);
  return absl::OkStatus();
}

absl::Status TnebFit::ComputeSimilarities() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::function<bool()> cancelled = [this] { return ctx_.Cancelled(); };
  const int32_t l = static_cast<int32_t>(filter_.keep.size());
  if (merged_.merge == TnebMerge::kGraph) {
    ctx_.Report(0.6, "neighbour graph");
    const std::vector<int64_t> rows = GraphSampleRows(n_);
    DENDRO_ASSIGN_OR_RETURN(
        const std::vector<int32_t> nn,
        NearestNeighborGraph(x_, transform_, rows, kGraphNeighbors, threads_, cancelled));
    std::vector<int32_t> leaf_of_row(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) leaf_of_row[r] = point_leaf_[rows[r]];
    const int32_t k_used = static_cast<int32_t>(rows.empty() ? 0 : nn.size() / rows.size());
    merged_.edges = GraphSimilarities(l, leaf_of_row, nn, k_used, mix_->means());
  } else {
    std::vector<ComponentPair> pairs =
        NearestComponentPairs(mix_->means(), o_.neighbors, cancelled);
    if (ctx_.Cancelled()) return absl::CancelledError("job cancelled");
    merged_.bridges = BridgingPairs(mix_->means(), pairs, cancelled);
    if (ctx_.Cancelled()) return absl::CancelledError("job cancelled");
    pairs.insert(pairs.end(), merged_.bridges.begin(), merged_.bridges.end());
    NebOptions no = NebOptionsOf(o_);
    no.num_threads = threads_;
    NebPaths paths;
    {
      SubRangeContext sub(ctx_, 0.6, 0.98);
      DENDRO_ASSIGN_OR_RETURN(paths, OptimizePaths(*mix_, pairs, no, sub));
    }
    merged_.edges.reserve(pairs.size());
    for (size_t p = 0; p < pairs.size(); ++p) {
      merged_.edges.push_back(SimilarityEdge{pairs[p].first, pairs[p].second, paths.similarity[p]});
    }
  }
  path_seconds_ += Seconds(t0);
  return absl::OkStatus();
}

absl::Status TnebFit::BuildTree() {
  const auto t0 = std::chrono::steady_clock::now();
  ctx_.Report(0.98, "spanning tree");
  const int32_t l = static_cast<int32_t>(filter_.keep.size());
  Eigen::VectorXd peak;
  if (merged_.merge == TnebMerge::kGraph) {
    peak = Eigen::VectorXd::Ones(l);  // similarities are <= 1: height = 1 - similarity
  } else {
    const Eigen::MatrixXd means_d = mix_->means();
    peak = mix_->LogDensity(means_d, threads_);
  }
  DENDRO_ASSIGN_OR_RETURN(
      MergeTree mt,
      ComponentMerges(l, merged_.edges, absl::Span<const double>(peak.data(), peak.size()),
                      merged_.merge == TnebMerge::kPersistence, &merged_.offset));
  DENDRO_ASSIGN_OR_RETURN(merged_.tree, Hierarchy::FromMerges(l, mt.merges));
  DENDRO_RETURN_IF_ERROR(merged_.tree->SetPointLeaf(point_leaf_));
  Describe(mt);
  merged_.similarity = std::move(mt.similarity);
  tree_seconds_ += Seconds(t0);
  return absl::OkStatus();
}

// The tree's metadata: what was asked, what was kept, and the diagnostics
// at the asked cut (auto_k unless diagnose_k).
void TnebFit::Describe(const MergeTree& mt) {
  const int m = fit_->mixture.num_components();
  const int32_t l = static_cast<int32_t>(filter_.keep.size());
  auto& md = merged_.tree->mutable_metadata();
  md["method"] = o_.gaussian ? "gneb" : "tneb";  // as asked; `gaussian` says what was kept
  md["components"] = absl::StrCat(m);
  md["surviving"] = absl::StrCat(l);
  md["threads"] = absl::StrCat(threads_);
  md["leaf_components"] = absl::StrJoin(filter_.keep, ",");
  md["gaussian"] = tails_ == kGaussian ? "true" : "false";
  if (!o_.gaussian) {
    md["dof"] = absl::StrCat(o_.dof);
    md["learn_dof"] = tails_ == kLearnedDof ? "true" : "false";
    if (auto_dof_) {
      md["auto_dof"] = "true";
      md["bic_fixed_dof"] = absl::StrFormat("%.10g", bic_of_[kFixedDof]);
      md["bic_learned_dof"] = absl::StrFormat("%.10g", bic_of_[kLearnedDof]);
      md["bic_gaussian"] = absl::StrFormat("%.10g", bic_of_[kGaussian]);
    }
  }
  md["ridge"] = absl::StrCat(o_.ridge);
  md["restarts"] = absl::StrCat(mo_.restarts);
  md["em_tolerance"] = absl::StrCat(o_.tolerance);
  md["em_max_iterations"] = absl::StrCat(o_.max_iterations);
  md["merge"] = TnebMergeName(merged_.merge);
  md["converged_restarts"] = absl::StrCat(fit_->converged_restarts);
  md["log_likelihood"] = absl::StrFormat("%.10g", fit_->log_likelihood);
  md["kept_log_likelihood"] = absl::StrFormat("%.10g", kept_log_likelihood_);
  md["rank_restarts_by"] = TnebRestartRankingName(o_.rank_restarts_by);
  md["seed"] = absl::StrCat(o_.seed);
  // What happened, and why: the option and the columns' spread ratio.
  md["standardize"] = transform_.identity() ? "false" : "true";
  md["standardize_mode"] = std::string(TnebStandardizeName(standardize_mode_));
  if (!standardize_reason_.empty()) md["standardize_reason"] = standardize_reason_;
  md["column_sd_ratio"] = absl::StrFormat("%.6g", spread_.ratio);
  md["height_offset"] = absl::StrFormat("%.17g", merged_.offset);
  int32_t auto_k = l;
  if (l >= 3) {
    absl::StatusOr<AutoK> ak = ChooseK(mt.similarity);
    if (ak.ok()) {
      auto_k = ak->k;
      md["auto_k"] = absl::StrCat(ak->k);
      md["auto_k_jump"] = absl::StrFormat("%.6g", ak->jump);
    }
  }
  if (base_ != nullptr) md["warm_start_components"] = absl::StrCat(m);
  if (mo_.init_min_rows > 0) md["init_min_rows"] = absl::StrCat(mo_.init_min_rows);
  if (mo_.scale_prior_rows > 0.0) md["scale_prior_rows"] = absl::StrCat(mo_.scale_prior_rows);

  TnebDiagnostics base;
  base.components = m;
  base.surviving = l;
  base.filtered_small = filter_.too_small;
  base.filtered_elongated = filter_.too_elongated;
  if (auto_dof_) {
    for (int i = 0; i < kNumTails; ++i) {
      base.candidates.push_back(kTailNames[i]);
      base.candidate_bic.push_back(bic_of_[i]);
    }
  }
  base.kept_candidate = kTailNames[tails_];
  base.merge = TnebMergeName(merged_.merge);
  merged_.diagnostics = TnebDiagnosticsAt(*merged_.tree, base,
                                          o_.diagnose_k > 0 ? std::min(o_.diagnose_k, l) : auto_k);
  md["diag_k"] = absl::StrCat(merged_.diagnostics.k);
  md["diag_cluster_sizes"] = absl::StrJoin(merged_.diagnostics.cluster_sizes, ",");
  md["diag_largest_share"] = absl::StrFormat("%.6g", merged_.diagnostics.largest_share);
  md["diag_filtered_small"] = absl::StrCat(merged_.diagnostics.filtered_small);
  md["diag_filtered_elongated"] = absl::StrCat(merged_.diagnostics.filtered_elongated);
  if (!merged_.diagnostics.candidates.empty()) {
    std::string bics;
    for (size_t i = 0; i < merged_.diagnostics.candidates.size(); ++i) {
      absl::StrAppend(&bics, i ? "," : "", merged_.diagnostics.candidates[i], ":",
                      absl::StrFormat("%.10g", merged_.diagnostics.candidate_bic[i]));
    }
    md["diag_candidate_bic"] = bics;
  }
  md["diag_degenerate"] = merged_.diagnostics.degenerate ? "true" : "false";
  if (merged_.diagnostics.degenerate)
    md["diag_degenerate_reason"] = merged_.diagnostics.degenerate_reason;
}

TnebResult TnebFit::Result() {
  TnebResult res{std::move(*merged_.tree),
                 TnebModel{std::move(*mix_), std::move(transform_), filter_.keep, merged_.offset,
                           merged_.diagnostics},
                 {},
                 {},
                 0,
                 {}};
  res.merge_similarity = std::move(merged_.similarity);
  res.edges = std::move(merged_.edges);
  res.bridging_pairs = static_cast<int32_t>(merged_.bridges.size());
  res.components = std::move(filter_.info);
  res.diagnostics = std::move(merged_.diagnostics);
  res.log_likelihood = fit_->log_likelihood;
  res.kept_log_likelihood = kept_log_likelihood_;
  res.restarts = mo_.restarts;
  res.converged_restarts = fit_->converged_restarts;
  res.learned_dof = tails_ == kLearnedDof;
  res.gaussian = tails_ == kGaussian;
  res.bic_fixed_dof = bic_of_[kFixedDof];
  res.bic_learned_dof = bic_of_[kLearnedDof];
  res.bic_gaussian = bic_of_[kGaussian];
  res.failed_restarts = fit_->failed_restarts;
  res.em_converged = fit_->converged;
  res.em_iterations = fit_->total_iterations;
  res.em_seconds = em_seconds_;
  res.filter_seconds = filter_seconds_;
  res.path_seconds = path_seconds_;
  res.tree_seconds = tree_seconds_;
  return res;
}

absl::StatusOr<TnebResult> TnebFit::Run() {
  DENDRO_RETURN_IF_ERROR(Prepare());
  DENDRO_RETURN_IF_ERROR(FitMixture());
  absl::Status filtered = Filter();
  if (StandardizeAfterFilterFailed(filtered)) {
    // The raw columns left no hierarchy; the same fit on standardised ones.
    DENDRO_RETURN_IF_ERROR(FitMixture());
    filtered = Filter();
  }
  DENDRO_RETURN_IF_ERROR(filtered);
  merged_.merge = TnebMergeOrder(o_, d_);
  DENDRO_RETURN_IF_ERROR(ComputeSimilarities());
  DENDRO_RETURN_IF_ERROR(BuildTree());
  if (merged_.merge != TnebMerge::kGraph && merged_.diagnostics.degenerate &&
      TnebGraphFallback(o_, d_)) {
    // The density tree lumps the rows together at the asked cut: the graph
    // merge over the same components replaces it, unless its tree is
    // degenerate too (then the data may simply be that unbalanced, and the
    // paper's tree stays). The metadata say which.
    Merged first = std::move(merged_);
    merged_ = Merged{TnebMerge::kGraph};
    DENDRO_RETURN_IF_ERROR(ComputeSimilarities());
    DENDRO_RETURN_IF_ERROR(BuildTree());
    const std::string tried = TnebMergeName(first.merge);
    const bool keep_first = merged_.diagnostics.degenerate;
    const std::string why =
        keep_first ? absl::StrCat("the ", tried,
                                  " tree was degenerate and so was the graph "
                                  "merge's; the ",
                                  tried, " tree is kept")
                   : absl::StrCat("the ", tried,
                                  " tree was degenerate: ", first.diagnostics.degenerate_reason);
    if (keep_first) merged_ = std::move(first);
    auto& md = merged_.tree->mutable_metadata();
    md["merge_tried"] = keep_first ? "graph" : tried;
    md["merge_fallback_reason"] = why;
  }
  ctx_.Report(1.0, "done");
  return Result();
}

}  // namespace

absl::StatusOr<TnebResult> FitTneb(const MatrixView& x, const TnebOptions& o, RunContext& ctx) {
  DENDRO_RETURN_IF_ERROR(ValidateTnebOptions(o));
  const ProductsOnCallingThread products_here;
  return TnebFit(x, o, ctx).Run();
}

absl::StatusOr<TnebResult> FitTnebFrom(const TnebModel& base, const MatrixView& x,
                                       const TnebOptions& o, RunContext& ctx) {
  const StudentMixture& start = base.mixture;
  if (start.dim() != x.cols()) {
    return absl::FailedPreconditionError(absl::StrCat("the version was fitted on ", start.dim(),
                                                      " columns, the rows have ", x.cols()));
  }
  if (start.num_components() < 2) {
    return absl::FailedPreconditionError(absl::StrCat("the version kept ", start.num_components(),
                                                      " component; a warm start needs two"));
  }
  TnebOptions warm = o;
  warm.components = start.num_components();
  warm.restarts = 1;
  warm.auto_dof = false;
  warm.auto_dof_low_dimension = false;
  const std::vector<double>& dof = start.dof();
  warm.gaussian = std::all_of(dof.begin(), dof.end(), [](double v) { return std::isinf(v); });
  if (!warm.gaussian) {
    // Learned tails differ between components; fixed ones are all `dof`.
    warm.learn_dof =
        std::any_of(dof.begin(), dof.end(), [&](double v) { return v != dof.front(); });
    warm.dof = std::isfinite(dof.front()) ? dof.front() : o.dof;
  }
  DENDRO_RETURN_IF_ERROR(ValidateTnebOptions(warm));
  const ProductsOnCallingThread products_here;
  return TnebFit(x, warm, ctx, &base).Run();
}

}  // namespace dendro
