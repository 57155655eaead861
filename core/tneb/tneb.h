// t-NEB: hierarchical clustering with maximum-density paths and mixture
// models (Ritzert, Turishcheva, Hansel et al.; Algorithm 1).
//
//   1. Density: a Student-t mixture with m full-covariance components is
//      fitted by EM (core/tneb/mixture.h); g-NEB uses Gaussians instead.
//   2. Filtering (appendix D.2): components with at most
//      min_component_points training points (hard assignment to the most
//      likely component) or with elongation (largest / smallest eigenvalue
//      of the scale matrix) >= max_elongation * d are dropped; the
//      survivors' weights are renormalised. Fewer than 2 survivors is a
//      FailedPrecondition error that says how many were dropped for which
//      reason (remedies: fewer components, larger ridge, relaxed filters).
//   3. Paths (Algorithm 2, core/tneb/neb.h): for each surviving component
//      its `neighbors` nearest components by Euclidean distance of means
//      (each unordered pair once); one NEB path per pair; similarity = min
//      log-density along the path. A disconnected neighbour graph is bridged
//      by the closest pair of means between every two of its connected
//      components (core/tneb/merge.h).
//   4. Hierarchy: maximum spanning tree over the similarities; its edges in
//      decreasing similarity are the merges (single linkage on bottleneck
//      density). Leaves are the surviving components, renumbered 0..L-1 in
//      the order of their original index; height = height_offset -
//      similarity, where height_offset is the largest mixture log-density at
//      a component mean (all heights >= 0, growing towards the root).
//      point_leaf: the most likely surviving component of each training row.
//      This density order is the default when d > kTnebLowDimension (see
//      merge_by_dimension), unless its tree is degenerate at the asked cut
//      (TnebGraphFallback): then the graph merge below replaces it.
//      With merge = kPersistence (beyond the paper; the default when d <=
//      kTnebLowDimension) the same tree's edges are merged in increasing
//      persistence instead (see PersistenceMerges in merge.h), and height =
//      persistence.
//      With merge = kGraph (beyond the paper; by default the fallback for
//      a degenerate density tree when d > kTnebLowDimension) no paths are
//      computed: every pair of
//      leaves gets the share of k-nearest-neighbour edges between their
//      training rows as similarity (core/tneb/graph.h), height = 1 -
//      similarity.
//   Above kTnebAuthorsStartMaxDimension the EM also starts every component
//   on at least d + 1 rows (TnebOptions::init_min_rows; an optional scale
//   prior, scale_prior_rows, is off by default). The cause and the numbers
//   are in docs/methods.md, "t-NEB in 16 to 64 dimensions (issue 46)".
//
// New points (TnebModel::AssignLeaves) go through the stored
// standardisation and then to their most likely surviving component
// (argmax of log w_k + log f_k; no underflow); cut the tree to place them
// in a cluster at a level.
//
// Metadata written to the hierarchy: method, components, surviving,
// leaf_components (original component index of each leaf), dof / gaussian /
// learn_dof (and auto_dof, bic_fixed_dof, bic_learned_dof, bic_gaussian with
// auto_dof; gaussian is "true" when the kept fit has Gaussian components,
// method is "gneb" only when they were asked for),
// ridge, restarts, rank_restarts_by, converged_restarts, em_tolerance,
// em_max_iterations, log_likelihood, kept_log_likelihood, seed, standardize,
// merge, height_offset, auto_k and auto_k_jump (when L >= 3), and the
// diagnostics (TnebDiagnostics) as diag_k, diag_cluster_sizes,
// diag_largest_share, diag_filtered_small, diag_filtered_elongated,
// diag_candidate_bic (name:bic,...), diag_degenerate and, when degenerate,
// diag_degenerate_reason.
#ifndef DENDRO_CORE_TNEB_TNEB_H_
#define DENDRO_CORE_TNEB_TNEB_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/run_context.h"
#include "core/hierarchy/hierarchy.h"
#include "core/matrix/matrix.h"
#include "core/tneb/merge.h"
#include "core/tneb/mixture.h"
#include "core/tneb/neb.h"

namespace dendro {

// How the spanning tree's edges are ordered into merges.
enum class TnebMerge {
  // The paper's Algorithm 1: single linkage on the path similarity (min
  // log-density), merges in decreasing similarity.
  kDensity,
  // Beyond the paper: the same tree, merged in increasing persistence
  // (PersistenceMerges in merge.h): the lower of the two peaks minus the
  // saddle, so components that are not density modes merge first.
  kPersistence,
  // Beyond the paper: similarities from a k-nearest-neighbour graph of the
  // training rows (the share of graph edges between two components' rows,
  // core/tneb/graph.h) instead of density paths; the same spanning tree and
  // merges. No paths are optimised. By default it replaces a degenerate
  // density tree above kTnebLowDimension (TnebGraphFallback).
  kGraph,
};

// "density" / "persistence" / "graph"; InvalidArgument otherwise.
absl::StatusOr<TnebMerge> ParseTnebMerge(const std::string& name);
const char* TnebMergeName(TnebMerge merge);

// Which EM restart a fit keeps.
enum class TnebRestartRanking {
  // Beyond the paper: the one whose surviving components (after the filter
  // below) give the training rows the highest mean log-likelihood
  // (docs/methods.md).
  kKeptLogLikelihood,
  // The whole fitted mixture's log-likelihood, as the authors' package ranks
  // its initialisations.
  kLogLikelihood,
};

// "kept_log_likelihood" / "log_likelihood"; InvalidArgument otherwise.
absl::StatusOr<TnebRestartRanking> ParseTnebRestartRanking(const std::string& name);
const char* TnebRestartRankingName(TnebRestartRanking ranking);

// Whether the columns are standardised (zero mean, unit variance) before
// modelling.
enum class TnebStandardize {
  // Beyond the paper [default]: the raw columns, unless
  //  - their spreads already differ by as much as the component filter
  //    tolerates in one component: s_max^2 >= max_elongation * d * s_min^2
  //    over the columns' population standard deviations
  //    (TnebStandardizeNeeded), as with a near-constant column; or
  //  - the fit on them leaves fewer than two components after the filter,
  //    some dropped as too elongated (a 0/1 column among wide ones: each
  //    component sees it almost constant): the mixture is then fitted again
  //    on standardised columns.
  // Without this, such data fail after their EM with every component
  // dropped. The model's metadata say which (standardize_reason).
  kAuto,
  kOn,
  kOff,  // the paper's and the authors' pipeline: the raw columns
};

// "auto" / "on" / "off"; InvalidArgument otherwise.
absl::StatusOr<TnebStandardize> ParseTnebStandardize(const std::string& name);
std::string_view TnebStandardizeName(TnebStandardize standardize);

// The auto rule above for columns with standard deviations `sd` (every one
// > 0): the ratio s_max / s_min, and whether it reaches
// sqrt(max_elongation * d).
struct TnebSpreadRatio {
  double ratio = 1.0;
  bool standardize = false;
};
TnebSpreadRatio TnebStandardizeNeeded(const std::vector<double>& sd, double max_elongation);

// Defaults are the paper's (Table 4) and the authors' code unless noted
// (docs/methods.md lists every difference, with numbers).
struct TnebOptions {
  int32_t components = 25;       // m
  double dof = 1.0;              // fixed nu (start value when learned)
  bool learn_dof = false;        // learn nu per component (ECM)
  // Beyond the paper: fit three mixtures, nu fixed at `dof`, nu learned and
  // Gaussian components (nu -> infinity), and keep the one with the lowest
  // BIC (the learned fit pays for its m extra parameters; the first on a
  // tie). Overrides learn_dof; ignored when `gaussian` is set.
  bool auto_dof = false;
  // Beyond the paper, the default: with neither learn_dof nor auto_dof set,
  // nu is chosen as auto_dof chooses it when d <= kTnebLowDimension and
  // fixed at `dof` above (TnebAutoDof). false: fixed at `dof` in every
  // dimension, the paper's setting. docs/methods.md has the numbers.
  bool auto_dof_low_dimension = true;
  bool gaussian = false;         // g-NEB: Gaussian components
  double ridge = 1e-4;           // added to every scale matrix's diagonal
  // EM restarts, best converged kept. 0: 20 when d <= 10 (the authors'
  // rule) and kTnebHighDimensionRestarts above (the authors run 1).
  int32_t restarts = 0;
  TnebRestartRanking rank_restarts_by = TnebRestartRanking::kKeptLogLikelihood;
  int32_t max_iterations = 1000;  // EM iteration cap per restart (authors: 1000)
  double tolerance = 1e-4;        // on the mean log-likelihood change (authors: 1e-5)
  int32_t neighbors = 10;        // nearest components per component
  int32_t path_points = 100;     // l
  int32_t path_steps = 200;      // s
  double learning_rate = 0.01;   // Adam
  int32_t eval_points = 1024;    // final path evaluation
  // Zero mean, unit variance per feature: `true` always; otherwise as
  // `standardize_mode` says (auto by default, TnebStandardize).
  bool standardize = false;
  TnebStandardize standardize_mode = TnebStandardize::kAuto;
  uint64_t seed = 0;
  int32_t min_component_points = 10;  // drop components with <= this many points
  double max_elongation = 500.0;      // drop if eigenvalue ratio >= this * d
  // The merge order where it applies: with merge_by_dimension (the
  // default, beyond the paper) only when d <= kTnebLowDimension; above it
  // the density order, replaced by the graph merge when its tree is
  // degenerate at the asked cut (TnebMergeOrder, TnebGraphFallback);
  // false: `merge` in every dimension. docs/methods.md has the numbers.
  TnebMerge merge = TnebMerge::kPersistence;
  bool merge_by_dimension = true;
  // Beyond the paper, against the high-dimensional collapse (MixtureOptions
  // has the details; docs/methods.md the numbers). init_min_rows = -1: d + 1
  // rows per initial component when d > kTnebAuthorsStartMaxDimension, 0
  // (the authors' EM exactly) up to it. scale_prior_rows = -1: 0 (no prior)
  // in every dimension; the prior is an option, measured to hurt at 16 and
  // 32 dimensions in the form MixtureOptions describes.
  int32_t init_min_rows = -1;
  double scale_prior_rows = -1.0;
  // The cut TnebResult::diagnostics describes: 0 for the auto k (auto_k,
  // or the number of leaves when L < 3), else min(diagnose_k, L).
  int32_t diagnose_k = 0;
  int num_threads = 0;                // 0: all cores
};

// The largest dimension t-NEB treats as low, where the authors' code draws
// the line between 20 EM restarts and 1. Up to it the default runs 20
// restarts (kTnebHighDimensionRestarts above) and auto_dof_low_dimension
// chooses nu by BIC (the paper, appendix, found learned nu to help in low
// dimensions and to hurt in high ones) and merge_by_dimension merges by
// persistence.
inline constexpr int64_t kTnebLowDimension = 10;

// The largest dimension where the EM starts as the authors' does. Above it
// every initial component gets at least d + 1 rows (TnebInitMinRows): on
// the ten public Densired Stud-t draws (three fit seeds each) the authors'
// start was within 0.03 of k-means at the true k on every 16-D draw and
// fell 0.11-0.12 below it on a 32-D and a 64-D one (docs/methods.md).
inline constexpr int64_t kTnebAuthorsStartMaxDimension = 16;

// EM restarts above kTnebLowDimension by default. The authors run one; with
// restarts ranked by their surviving components, four lift the median on
// the Densired sets where single fits split between two outcomes
// (docs/methods.md), and on two cores they take the time of two.
inline constexpr int32_t kTnebHighDimensionRestarts = 4;

// The restarts for restarts == 0 (20 when d <= kTnebLowDimension, else
// kTnebHighDimensionRestarts).
int32_t TnebRestarts(const TnebOptions& options, int64_t d);

// Whether a fit of d-dimensional data chooses nu by BIC (auto_dof, or the
// low-dimension default); never when Gaussian components are asked for.
bool TnebAutoDof(const TnebOptions& options, int64_t d);

// The merge order a fit of d-dimensional data tries first: options.merge,
// or with merge_by_dimension the density order when d > kTnebLowDimension.
TnebMerge TnebMergeOrder(const TnebOptions& options, int64_t d);

// Whether a fit of d-dimensional data replaces a degenerate density tree by
// the graph merge over the same components: with merge_by_dimension when
// d > kTnebLowDimension. Degenerate is TnebDegenerateShare's rule at the
// asked cut (diagnose_k, else the auto k), which needs no labels; in high
// dimensions density paths can isolate components of a few far rows and
// lump everything else into one cluster, which the graph merge does not
// (docs/methods.md, "t-NEB in 16 to 64 dimensions").
bool TnebGraphFallback(const TnebOptions& options, int64_t d);

// The EM safeguards a fit of d-dimensional data uses (options value, or the
// -1 rule above).
int32_t TnebInitMinRows(const TnebOptions& options, int64_t d);
double TnebScalePriorRows(const TnebOptions& options, int64_t d);

// A fit's own account of the cut at k (issue 46): is one cluster holding
// (nearly) everything?
struct TnebDiagnostics {
  int32_t k = 0;                       // 0: none (e.g. a model saved before diagnostics existed)
  std::vector<int64_t> cluster_sizes;  // training rows per cluster at k
  double largest_share = 0.0;          // largest cluster / training rows
  int32_t components = 0;              // fitted
  int32_t surviving = 0;               // leaves
  int32_t filtered_small = 0;
  int32_t filtered_elongated = 0;
  // The tails the auto mode compared ("fixed_dof", "learned_dof",
  // "gaussian") with their BIC; empty without auto_dof.
  std::vector<std::string> candidates;
  std::vector<double> candidate_bic;
  std::string kept_candidate;  // as fitted: "fixed_dof", "learned_dof", "gaussian"
  std::string merge;           // TnebMergeName of the merge used
  bool degenerate = false;     // largest_share > TnebDegenerateShare(k)
  std::string degenerate_reason;
};

// The documented rule: the tree at k is degenerate when its largest cluster
// holds more than max(0.5, 1 - 0.1 k) of the training rows (k = 2: 0.8,
// k = 5: 0.5). Balanced data never come close; the high-dimensional
// collapse (one cluster with ~99% of the rows) always trips it. Never
// degenerate at k = 1.
double TnebDegenerateShare(int32_t k);

// `base` (the fit-level fields) recomputed at cut k (clamped to [1, L]) of
// `tree` from its point_leaf.
TnebDiagnostics TnebDiagnosticsAt(const Hierarchy& tree, const TnebDiagnostics& base, int32_t k);

// One line: "k=5 largest_share=0.412 sizes=[...] surviving=19/25 filtered
// small=4 elongated=2 merge=graph" plus "; DEGENERATE: <reason>".
std::string TnebDiagnosticsSummary(const TnebDiagnostics& d);

// Everything needed to place new points. Leaf i of the tree is component i
// of `mixture`.
struct TnebModel {
  StudentMixture mixture;                   // surviving components, weights renormalised
  FeatureTransform transform;               // identity unless standardize
  std::vector<int32_t> original_component;  // leaf -> index in the fitted mixture
  // height = height_offset - similarity (density merging; 0 with
  // persistence merging, where "similarity" is -persistence).
  double height_offset = 0.0;
  // At the fit's diagnose_k; k == 0 when loaded from a model saved without.
  TnebDiagnostics diagnostics;

  int64_t input_dim() const { return mixture.dim(); }
  // Leaf of every row of x (x.cols() == input_dim(), finite: both checked,
  // InvalidArgument otherwise).
  absl::StatusOr<std::vector<int32_t>> AssignLeaves(const MatrixView& x, int num_threads = 0) const;
};

// Why a fitted component was kept or dropped.
struct ComponentInfo {
  int64_t points = 0;       // training rows assigned to it (before filtering)
  double weight = 0.0;      // mixture weight (before filtering)
  double elongation = 0.0;  // largest / smallest scale eigenvalue
  bool kept = false;
  int32_t leaf = -1;  // leaf id if kept
};

struct TnebResult {
  Hierarchy hierarchy;
  TnebModel model;
  // Per merge t (node L + t): the similarity (min log-density) at which it
  // happens, non-increasing; -persistence with persistence merging.
  std::vector<double> merge_similarity;
  // Every computed path, as leaf ids (a < b), with its similarity.
  std::vector<SimilarityEdge> edges;
  int32_t bridging_pairs = 0;             // paths added to connect the neighbour graph
  std::vector<ComponentInfo> components;  // per fitted component
  // EM summary.
  double log_likelihood = 0.0;  // mean per training row, before filtering
  // The same under the surviving components (weights renormalised).
  double kept_log_likelihood = 0.0;
  int32_t restarts = 0;  // EM restarts run (after the restarts == 0 rule)
  int32_t converged_restarts = 0;
  int32_t failed_restarts = 0;
  // The kept fit: nu learned, or Gaussian components (options.gaussian, or
  // auto_dof's choice); neither means nu fixed at options.dof.
  bool learned_dof = false;
  bool gaussian = false;
  // auto_dof: BIC (-2 n loglik + parameters * log n) of the three fits.
  double bic_fixed_dof = 0.0;
  double bic_learned_dof = 0.0;
  double bic_gaussian = 0.0;
  TnebDiagnostics diagnostics{};  // the same as model.diagnostics
  bool em_converged = false;  // whether the kept restart converged
  int64_t em_iterations = 0;  // M-steps over all restarts
  // Wall-clock seconds per phase.
  double em_seconds = 0.0;
  double filter_seconds = 0.0;
  double path_seconds = 0.0;
  double tree_seconds = 0.0;
};

// InvalidArgument naming the first bad option value (checked by FitTneb too).
absl::Status ValidateTnebOptions(const TnebOptions& options);

// Validates input and options (InvalidArgument naming the problem: fewer
// rows than components, d < 2, NaN/inf entries, constant columns, bad
// option values) and runs t-NEB. Progress: EM restarts 0-60%, paths
// 60-98%, tree 98-100%. CancelledError when ctx is cancelled.
absl::StatusOr<TnebResult> FitTneb(const MatrixView& x, const TnebOptions& options,
                                   RunContext& ctx);

// Warm start (a refit after rows were appended to base's dataset): the EM
// runs once, from base's mixture (its surviving components, weights,
// scales and degrees of freedom) instead of k-means restarts, on x in base's
// coordinates (its standardisation, whatever the options say); filtering,
// similarities and the merge follow as in FitTneb. The tails are base's:
// Gaussian when every component is, learned when its components' nu
// differ, else fixed at their common nu (options.components, restarts,
// dof, learn_dof, gaussian, auto_dof and the standardisation are ignored).
// A warm start finds no more components than base kept; new structure in
// the appended rows needs a cold fit. FailedPrecondition when base's
// dimension differs from x's or base kept fewer than two components;
// otherwise as FitTneb.
absl::StatusOr<TnebResult> FitTnebFrom(const TnebModel& base, const MatrixView& x,
                                       const TnebOptions& options, RunContext& ctx);

// Leaf -> cluster label at k clusters, with a t-NEB specific message when k
// is outside [1, L] (e.g. because components were filtered).
absl::StatusOr<std::vector<int32_t>> TnebCutToK(const Hierarchy& tree, int32_t k);

// Model persistence, as a model artifact (core/io/model_artifact.h) in
// `dir`, which must exist: tneb_model.json (format "dendro.tneb_model",
// version 1, dim, leaves, dof with null for a Gaussian component,
// original_component, height_offset, standardize), tneb_weights.npy (L),
// tneb_means.npy (L x d), tneb_scales.npy (L*d x d, one d x d block per
// leaf) and, when standardising, tneb_center.npy / tneb_scale.npy (d), all
// float64, and tneb_diagnostics.json (TnebModel::diagnostics, when k > 0),
// each written atomically, the manifest last. A model saved without
// diagnostics loads with diagnostics.k = 0. Load's errors about
// damaged files are InvalidArgument. The hierarchy is saved separately
// (export.h). Defined in model_io.cc, which needs dendro_io.
absl::Status SaveTnebModel(const TnebModel& model, const std::string& dir);
absl::StatusOr<TnebModel> LoadTnebModel(const std::string& dir);

}  // namespace dendro

#endif  // DENDRO_CORE_TNEB_TNEB_H_
