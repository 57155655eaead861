// gHHC: gradient-based hyperbolic hierarchical clustering (Monath, Zaheer,
// Silva, McCallum, Ahmed, KDD 2019).
//
// A tree over N embedded points is learned as M internal-node vectors in the
// d-dimensional Poincaré ball, by mini-batch Riemannian SGD on a triple
// objective; the discrete tree is read off the node positions.
//
// Learned point embeddings (options.learn_points; the paper's section 6.1
// for Digits and GloVe: "Adam is to optimize the embedding of points"). The
// points start at their fixed positions (step 1) and, in every batch, each
// point of the batch takes one Adam step (lazy: only the rows seen in the
// batch; beta1 0.9, beta2 0.999, eps 1e-8, step size point_learning_rate)
// on the Euclidean gradient of the same eq. 15 sum that moves the nodes,
// and is then projected back onto the sphere of radius point_norm. Only the
// direction is learned: every node keeps a smaller norm than every point,
// so the extraction below (d_cp = Poincaré distance for points) and the
// heights are unchanged. Triples are still drawn and ordered in the data's
// own geometry (the fixed positions), so the learned embedding is pulled
// towards the data's neighbourhoods rather than free to make any triple
// easy. The extraction places the learned embeddings; new points are placed
// through their nearest training point (AssignGhhcLeaves).
//
// Pipeline of FitGhhc:
//  1. Points. Each row x is centred (minus the training mean; Options::center),
//     divided column by column by the training standard deviations when
//     standardising (below), normalised to unit length and scaled to norm
//     point_norm (0.9): the points are fixed leaves on a sphere inside the
//     ball. A row that is zero after centring has no direction:
//     InvalidArgument naming the row.
//     Standardising (Options::standardize). Every later step sees only
//     directions of the centred rows, so a column whose spread is far larger
//     than the others' decides them alone. With kAuto (the default) the
//     columns are standardised when s_max > kGhhcStandardizeRatio (10) x
//     s_med, where s_j is the population standard deviation of column j (about
//     its mean, whether or not the rows are centred), s_max the largest and
//     s_med the median (the lower middle value for an even count) over the
//     columns with s_j > 0; kOn always, kOff never. Standardising divides
//     column j by s_j (by 1 when s_j = 0) after the centring and before any
//     projection (PCA is then computed on the standardised rows). The divisors
//     are part of the model (GhhcModel::scale), so new rows are placed the
//     same way. A median rather than the smallest spread: a few nearly
//     constant columns (digits' border pixels) do not trigger it, one
//     column in other units (wine's proline) does.
//  2. Neighbours. The k = neighbors nearest points of every point
//     (Euclidean on the normalised points): exact for N <= exact_knn_max_points,
//     else an inverted-file search over k-means cells (knn_method kIvf, the
//     default; ivf_list_size points per cell, ivf_probes cells per query) or
//     an HNSW graph (kHnsw, hnswlib), on all threads and freed before
//     training.
//  3. Initialisation (section 4.2): average-linkage HAC over a random sample
//     of init_sample points. The sample's clusters at the cut into
//     c = ceil(M / 2) clusters are the "leaf" internal nodes (at norm
//     max_node_norm, in the mean direction of their points); the c - 1 merges
//     above the cut, i.e. HAC over those leaf nodes, are the other nodes, at
//     the mean direction of their descendants with norm
//     max_node_norm * log(N + 1 - j) / log(N + 1) for the j-th of the
//     N = c - 1 rounds (the leaf nodes count as round 0; the root lands at
//     the origin). See init.h.
//  4. Training: `triples` fresh triples, in mini-batches of batch_size. A
//     triple is x_i uniform, x_j uniform among the k neighbours of x_i, x_k
//     uniform among the other points, reordered so that the most similar
//     pair (smallest Euclidean distance; ties keep the sampled order) comes
//     first. Each batch takes one RSGD step (eqs. 18-20) on eq. 15 (sum over
//     the batch) with Gumbel noise of scale gumbel_temperature on both LCA
//     distributions, followed by the retraction and the clip to norm
//     max_node_norm. Alternation with the margin objective (eqs. 16-17):
//     after every margin_every batches, the internal nodes' parents are
//     recomputed with eq. 4 and margin_steps RSGD steps are taken on eq. 17
//     (the sum over internal child-parent pairs of d_cp with margin
//     gamma = margin) with step size margin_learning_rate, by default a tenth
//     of learning_rate. At the full step size the distance factor of eq. 16
//     pulls every child onto its parent in every phase: in our runs the
//     leaf-level nodes then sank towards the origin and the leaf purity fell;
//     at a tenth the phase keeps parents' norms below their children's
//     without that collapse.
//     Keep the best (validation_triples > 0): V held-out triples are drawn
//     like the training ones from their own stream. Before the first batch,
//     every validate_every batches and after the last, the state (nodes, and
//     learned points) is scored by its triple accuracy: the share of held-out
//     triples (i, j, k) whose i and j have a lowest common ancestor strictly
//     below that of i and k in the tree the extraction would build (eq. 4 on
//     the nodes, each point under its nearest node). The result is the
//     latest checked state whose accuracy is at least best - 2 sqrt(max(
//     best (1 - best), 1 / V) / V), `best` the highest accuracy seen so far;
//     by construction it is within that margin of the run's best.
//  5. Extraction (eq. 4 with the section 4.2 rules), see GhhcModel below,
//     and the tree above the leaf clusters: by default Ward's criterion over
//     their points ("The tree above the leaf clusters" below), or the
//     extracted tree refined to a binary one ("Every cut reachable" below).
//
// Tree extraction and the leaf clusters. Internal node c takes as parent the
// node p with the smallest d_cp(z_c, z_p) among those that precede it in the
// order (Euclidean norm, node index) -- smaller norm, ties broken by the index
// -- so every parent has a norm <= its child's and exactly one node (the first
// in that order) is the root. A point takes as parent the node with the
// smallest d_cp, i.e. Poincaré distance (all nodes have smaller norms than
// the points; lowest index on ties). The extra-node trick: the points that
// select node n form one leaf cluster, a child of n next to n's internal
// children. Then internal nodes without points below are removed, and a node
// left with a single child is replaced by that child (repeatedly; if all
// points select one node, the tree is that single leaf cluster). Leaf clusters
// are numbered by their node's index. Height of internal node n:
// ||x||_D - ||z_n||_D = 2 atanh(point_norm) - 2 atanh(||z_n||), the hyperbolic
// radial gap between the node and the points' sphere (leaf clusters: 0), so
// heights never decrease towards the root.
//
// Dendrogram purity over points as leaves (the paper's evaluation) equals
// DendrogramPurity (core/metrics) on this tree with point_leaf: two points of
// one leaf cluster have the extra node n' as their LCA, whose descendants are
// exactly that cluster; any other pair has the same LCA in both trees.
//
// Every cut reachable. The extracted tree is n-ary, so CutToK misses most k
// and SciPy's maxclust on its linkage gives too few clusters. FitGhhc
// therefore returns two trees: coarse_hierarchy, the tree above, and
// hierarchy, with Options::tree kNodes its RefineToBinary (core/hierarchy/refine.h): each node with
// m > 2 children becomes m - 1 binary merges by average linkage of its
// children, a child represented by its node embedding (a leaf cluster by the
// node its points selected, an internal child by its own node), with the
// Poincaré distance (eq. 1) between embeddings; ties go to the smallest
// node ids; the j-th merge gets h0 + (H - h0) j / (m - 1) (h0: largest child
// height, H: the node's height); then equal heights are separated in
// (height, id) order. Leaves, point_leaf and leaf ids are the same in both.
// Dendrogram purity on the refined tree is that of a different (finer) tree
// and generally differs from the paper's, which is the coarse tree's.
//
// The tree above the leaf clusters (Options::tree). The leaf clusters of the
// extraction are tight (on digits, 92 clusters of leaf purity 0.97), but the
// node tree above them can collapse: training drives most internal nodes to
// the clip radius max_node_norm, so their heights tie within a few hundredths
// and the parents of eq. 4 are chosen among norms that differ by noise
// (docs/methods.md, gHHC, "The tree above the leaf clusters"). With kWard, the
// default, `hierarchy` is instead WardTree (core/hierarchy/ward.h) over the
// leaf clusters: cluster l has the size and mean of the unit directions of its
// training points in the ball (their fixed placements divided by point_norm,
// also with learned points: the placements new rows get), stored with the
// model (GhhcModel::leaf_size, leaf_mean), heights sqrt(2 delta). Leaves,
// leaf ids and point_leaf are the extraction's either way; coarse_hierarchy is
// always the node tree. kNodes: hierarchy = RefineToBinary(coarse), the
// paper's tree as described above.
//
// Precision: points and the training products are float32; the nodes are
// kept in float64 and rounded to float32 for each batch's matrix products.
//
// Determinism: for a fixed seed the result does not depend on the number of
// threads with the exact or the IVF neighbour search; a multi-threaded HNSW
// build inserts points in a timing-dependent order.
#ifndef DENDRO_CORE_GHHC_GHHC_H_
#define DENDRO_CORE_GHHC_GHHC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/run_context.h"
#include "core/ghhc/choices.h"
#include "core/hierarchy/hierarchy.h"
#include "core/matrix/matrix.h"

namespace dendro {

// Neighbour search above exact_knn_max_points (step 2 above).
enum class GhhcKnn { kIvf, kHnsw };

struct GhhcOptions {
  int32_t internal_nodes = 100;  // M (>= 2); the paper uses 64 .. 40,000
  double learning_rate = 0.01;   // eta in eq. 18 (the paper's value)
  int32_t batch_size = 100;      // triples per RSGD step (the paper's value)
  // Triples seen in total; 0: kGhhcDefaultTriples (200,000), whatever N.
  // Without validation, purity on our synthetic benchmark peaks around 2,000
  // batches and then falls as the nodes drift outwards to the clip radius
  // (N = 100,000, M = 2,000: 0.970 at 200,000 triples, 0.934 at 500,000,
  // 0.781 at 10^6) without the step budget below; keep-the-best
  // (validation_triples) stops that at N = 10,000 but not at N = 100,000.
  int64_t triples = 0;
  // Step budget: a run of more than kGhhcDefaultTriples triples takes node
  // steps (RSGD and the margin phases) scaled by kGhhcDefaultTriples /
  // triples, so that their sum is that of a run of the default length. The
  // purity decline above comes with learning rate x steps (docs/methods.md,
  // "Longer training"); with the budget, more triples take finer steps over
  // the same distance instead. Shorter runs and the points' Adam steps are
  // not scaled. false: learning_rate as given whatever the length.
  bool step_budget = true;
  int32_t neighbors = 5;      // k for x_j (the authors' triplet_k)
  double margin = 0.25;       // gamma of eq. 16 (Poincaré-norm units)
  int32_t margin_every = 10;  // batches between margin phases; 0: never
  int32_t margin_steps = 1;   // RSGD steps per margin phase
  // Step size of the margin phase; 0: learning_rate / 10 (see above).
  double margin_learning_rate = 0.0;
  double gumbel_temperature = 1.0;  // scale of the Gumbel noise; 0: none
  // Learned point embeddings (section 6.1, Digits/GloVe): the points'
  // positions are optimised too, by Adam on eq. 15, and kept on the sphere of
  // radius point_norm. See "Learned point embeddings" above. Not forced by
  // default: it lifts digits (docs/methods.md) but lowers the synthetic
  // benchmark's purity, so small inputs choose (choose_points_max_rows).
  bool learn_points = false;
  double point_learning_rate = 0.001;  // Adam step size for the points
  // Choose the points by validation: fit twice, with the points fixed (the
  // other options as given) and learned (Adam, no Gumbel noise, which hurts
  // learned points), and keep the fit whose kept held-out triple accuracy is
  // higher; the fixed points on a tie. Needs validation_triples > 0;
  // learn_points is then ignored. Costs two fits. On digits it chose the
  // learned points in 5 of 5 seeds and on the synthetic benchmark the fixed
  // ones in 6 of 6, each time the variant with the higher purity
  // (docs/methods.md, "Learned point embeddings").
  bool choose_points = false;
  // The default: with neither learn_points nor choose_points set and
  // validation_triples > 0, a fit of at most this many rows chooses as
  // choose_points does; a larger one keeps the points fixed, the paper's
  // setting. At the default 200,000 triples a point of a 50,000-row fit takes
  // part in about 12 triples, and the second fit costs seconds. 0: always
  // fixed unless learn_points or choose_points says otherwise.
  int64_t choose_points_max_rows = 50000;
  // Keep the best: the training state (nodes, and learned points) is scored
  // on this many held-out triples (drawn like the training triples, from
  // their own random stream) before training, every validate_every batches
  // and at the end; the result is the latest state whose triple accuracy is
  // within two standard errors of the best (see "Keep the best" above).
  // 0: no checks, the last state is the result.
  int32_t validation_triples = 2000;
  int32_t validate_every = 0;  // batches between checks; 0: ceil(batches / 20)
  GhhcLink link = GhhcLink::kSigmoid;
  uint64_t seed = 1;
  // Sample for the HAC initialisation; 0: min(N, max(1000, min(8192, 4 M))).
  // At most kGhhcMaxInitSample = 8192 (its condensed distance matrix takes
  // s (s - 1) / 2 doubles: 268 MB).
  int32_t init_sample = 0;
  bool center = true;          // subtract the mean before normalising
  // Divide the columns by their standard deviations (step 1 above): kAuto
  // when their spreads differ by more than kGhhcStandardizeRatio, kOn, kOff.
  GhhcStandardize standardize = GhhcStandardize::kAuto;
  // The tree above the leaf clusters ("The tree above the leaf clusters").
  GhhcTree tree = GhhcTree::kWard;
  // Dimensions. 0: the ball has the data's dimension d (the paper: "a
  // Poincaré ball of the same dimension d as the original space"). p in
  // [1, d): every centred row is first mapped through a d x p projection
  // (section 3: data "can be embedded into the space using a learned or
  // random projection") and the ball has p dimensions. The matrix is part
  // of the model, so new points are placed the same way. Training,
  // neighbour search and memory then scale with p instead of d.
  int32_t projection_dim = 0;
  GhhcProjection projection = GhhcProjection::kPca;
  double point_norm = 0.9;     // radius of the points' sphere
  double max_node_norm = 0.8;  // nodes are clipped to this norm (< point_norm)
  // Neighbour search.
  int64_t exact_knn_max_points = 5000;
  GhhcKnn knn_method = GhhcKnn::kIvf;
  int64_t ivf_list_size = 1024;
  int32_t ivf_probes = 8;
  int32_t hnsw_m = 12;
  int32_t hnsw_ef_construction = 40;
  int32_t hnsw_ef_search = 0;  // 0: max(2 k + 2, 32)
  int num_threads = 0;         // 0: all cores
};

inline constexpr int32_t kGhhcMaxInitSample = 8192;
inline constexpr int64_t kGhhcPcaSample = 100000;
inline constexpr int64_t kGhhcDefaultTriples = 200000;
// GhhcStandardize::kAuto standardises when the largest column standard
// deviation exceeds this multiple of the median one (step 1 above).
inline constexpr double kGhhcStandardizeRatio = 10.0;

// The column divisors of step 1 for `x` under `standardize` (`mean` is the
// column mean): empty when the columns are left as they are, else x.cols()
// positive values, s_j or 1 for a constant column. Exposed for tests.
std::vector<double> GhhcColumnScale(const MatrixView& x, const std::vector<double>& mean,
                                    GhhcStandardize standardize, int num_threads = 1);

// What AssignGhhcLeaves needs to place new points; Save/Load persist it.
struct GhhcModel {
  int64_t dim = 0;  // columns of the input rows
  bool center = true;
  double point_norm = 0.9;
  std::vector<double> mean;  // dim; zeros when !center
  // dim positive column divisors applied after the centring (standardising,
  // step 1), or empty: the columns as they are.
  std::vector<double> scale;
  // dim x p row-major projection (PCA or random, see GhhcProjection), or
  // empty (the ball has dim dimensions).
  std::vector<double> projection;
  // M x ball_dim() row-major internal nodes (float64).
  std::vector<double> nodes;
  // For each node, the leaf cluster of the points that select it, or -1 when
  // no training point does (new points never go there).
  std::vector<int32_t> node_leaf;
  // Parent of each node by eq. 4 among internal nodes (-1 for the root),
  // before pruning.
  std::vector<int32_t> node_parent;
  // Ward's tree above the leaf clusters (GhhcTree::kWard), else both empty
  // (kNodes, and models saved before the option): per leaf cluster (by leaf
  // id), its number of training points (> 0) and the mean of their unit
  // directions in the ball (L x ball_dim row-major, finite).
  std::vector<double> leaf_size;
  std::vector<double> leaf_mean;
  // Only with learned point embeddings (else both empty): the training
  // points' fixed positions (N x ball_dim row-major, float32: centred,
  // projected, unit length times point_norm, i.e. before learning) and the
  // leaf cluster of each. New rows are placed by these, see AssignGhhcLeaves.
  std::vector<float> train_points;
  std::vector<int32_t> train_leaf;
  int32_t num_nodes() const { return static_cast<int32_t>(node_leaf.size()); }
  // Dimension of the Poincaré ball the nodes live in.
  int64_t ball_dim() const {
    return projection.empty() || dim == 0 ? dim : static_cast<int64_t>(projection.size()) / dim;
  }
};

struct GhhcStats {
  int64_t triples = 0;  // triples seen
  int64_t batches = 0;
  int32_t neighbors = 0;  // k actually used
  bool exact_knn = false;
  int32_t init_sample = 0;
  // Mean eq. 15 value per triple over the first and the last 5% of batches
  // (at most 1000 batches each; with the training noise).
  double initial_objective = 0.0;
  double final_objective = 0.0;
  // Keep the best (validation_triples > 0): checks made, the held-out triple
  // accuracy of the last state and of the kept one, and the batches after
  // which the kept state was reached (= batches when the last is kept).
  int32_t validations = 0;
  double final_validation_accuracy = 0.0;
  double best_validation_accuracy = 0.0;
  double kept_validation_accuracy = 0.0;
  int64_t kept_batches = 0;
  int32_t leaf_clusters = 0;  // nodes with points
  int32_t pruned_nodes = 0;   // internal nodes removed by the pruning
  double knn_seconds = 0, init_seconds = 0, train_seconds = 0, extract_seconds = 0;
};

struct GhhcResult {
  GhhcModel model;
  // The refined (binary) tree, see "Every cut reachable" above: what
  // exports, cuts and evaluations use. point_leaf = the training points'
  // leaves; metadata as for coarse_hierarchy plus "refined".
  Hierarchy hierarchy;
  GhhcStats stats;
  // The n-ary tree as extracted (the paper's tree); same leaves and
  // point_leaf as `hierarchy`.
  Hierarchy coarse_hierarchy;
  // With learned point embeddings: the training points' learned positions
  // (N x ball_dim row-major, each of norm point_norm); else empty.
  std::vector<float> point_embeddings;
};

// The factor the step budget applies to the node step sizes: 1 when the
// budget is off or the run has at most kGhhcDefaultTriples triples, else
// kGhhcDefaultTriples / triples.
double GhhcStepScale(const GhhcOptions& options);

// Whether a fit of `rows` rows fits twice and chooses the points by
// validation: choose_points, or the default of choose_points_max_rows.
bool GhhcChoosesPoints(const GhhcOptions& options, int64_t rows);

// Sets learn_points, choose_points and choose_points_max_rows for an
// explicit choice (the other options are left as they are).
void SetGhhcPoints(GhhcPoints points, GhhcOptions* options);

// InvalidArgument naming the first bad option (what FitGhhc checks before
// looking at the data).
absl::Status ValidateGhhcOptions(const GhhcOptions& options);

// Validates the input and options and runs gHHC. Errors: InvalidArgument for
// N < 3, M < 2, non-finite entries (naming row and column), a row that is
// zero after centring (naming it), bad options; CancelledError on cancel.
absl::StatusOr<GhhcResult> FitGhhc(const MatrixView& x, const GhhcOptions& options,
                                   RunContext& ctx);

// Warm start (a refit after rows were appended to the dataset `base` was
// fitted on): x's first base_rows rows must be the rows `base` was fitted
// on, in the same order (the caller checks the dataset's lineage). The fit
// runs FitGhhc's phases with three changes:
//  - the points are prepared with base's mean, divisors and projection (so
//    its nodes sit where the same rows land), whatever options.center,
//    standardize and projection say; point_norm too;
//  - the nodes start at base's M nodes instead of the HAC initialisation
//    (options.internal_nodes is ignored);
//  - training takes GhhcWarmTriples triples (options.triples when set), and
//    each anchor x_i is an appended row with probability 1/2, else uniform
//    over all rows; the neighbours are searched for those anchors only.
//    Held-out triples and keep-the-best are as in a cold fit (anchors
//    uniform over all rows), and the starting nodes are its first check, so
//    the result is never worse on them than base's nodes by more than the
//    keep-the-best margin.
// The points are fixed (learn_points and choose_points are ignored).
// Errors: FailedPrecondition when base learned its point embeddings (they
// are not part of the model, so its nodes fit positions a warm start cannot
// rebuild: fit cold instead), when base_rows > x.rows() or base's dimension
// differs from x's; otherwise as FitGhhc.
absl::StatusOr<GhhcResult> FitGhhcFrom(const GhhcModel& base, int64_t base_rows,
                                       const MatrixView& x, const GhhcOptions& options,
                                       RunContext& ctx);

// Triples of a warm start of n rows of which base_rows were fitted before
// (options.triples when set): kGhhcDefaultTriples times the share of
// appended rows, doubled, clamped to [kGhhcDefaultTriples / 10,
// kGhhcDefaultTriples].
int64_t GhhcWarmTriples(const GhhcOptions& options, int64_t base_rows, int64_t n);

// Leaf cluster of each row: the row is preprocessed like the training points
// (training mean, column divisors if any, projection if any, unit length,
// point_norm) and placed under the node with the
// smallest d_cp among the nodes that hold training points (for a training
// point this is its own leaf). With learned point embeddings
// (model.train_points non-empty) a new row has no learned embedding: it takes
// the leaf of the training point whose fixed position is nearest to its own
// (Euclidean, i.e. cosine on the sphere; lowest index on ties), so a training
// row again gets its own leaf unless an identical earlier row holds another.
// InvalidArgument on a dimension mismatch, non-finite entries or a row that
// is zero after centring.
absl::StatusOr<std::vector<int32_t>> AssignGhhcLeaves(const GhhcModel& model,
                                                      const MatrixView& rows, int num_threads = 0);

// Builds the hierarchy from nodes and the points' parents (the extraction
// described above). `point_node[i]` in [0, M). Exposed for tests.
absl::StatusOr<Hierarchy> ExtractGhhcTree(const std::vector<double>& nodes, int64_t dim,
                                          double point_norm,
                                          const std::vector<int32_t>& node_parent,
                                          const std::vector<int32_t>& point_node,
                                          std::vector<int32_t>* node_leaf,
                                          int32_t* pruned_nodes = nullptr);

struct GhhcTrees {
  Hierarchy coarse;   // ExtractGhhcTree's n-ary tree
  // WardTree over the leaf clusters when the model has leaf_size, else
  // RefineToBinary of `coarse` (Poincare distance, see above).
  Hierarchy refined;
};

// Rebuilds both trees from the model alone (nodes, node_parent, node_leaf:
// the nodes holding points are those with node_leaf >= 0), exactly as
// FitGhhc built them, so models saved by any version get the same refined
// tree. With `saved` (e.g. tree.json + point_leaf.npy of a saved model,
// which older versions wrote unrefined and newer ones refined): both trees
// take its point_leaf and metadata (the coarse one without "refined"), and
// it must have the shape of one of the two trees, else InvalidArgument.
// InvalidArgument also for an inconsistent model.
absl::StatusOr<GhhcTrees> GhhcModelTrees(const GhhcModel& model,
                                         const Hierarchy* saved = nullptr);

// A model artifact (core/io/model_artifact.h) in `dir` (which must exist):
// ghhc_model.json (format "dendro.ghhc_model", version 1, dim, center,
// point_norm, internal_nodes, projection_dim: 0 or absent when none),
// ghhc_mean.npy (d float64), ghhc_scale.npy (d float64, positive and finite;
// only for a standardised model, absent otherwise, so unstandardised models
// keep the files older versions wrote), ghhc_projection.npy (d x p float64, only with a
// projection), ghhc_nodes.npy (M x ball_dim float64), ghhc_node_leaf.npy and
// ghhc_node_parent.npy (M int32), and with learned point embeddings
// (then, and only then, the manifest has "train_points": N) ghhc_train_points.npy
// (N x ball_dim float32) and ghhc_train_leaf.npy (N int32), and with Ward's tree
// ghhc_leaf_size.npy (L float64) and ghhc_leaf_mean.npy (L x ball_dim float64),
// L = the leaf clusters. Written atomically file by file, the
// manifest last. Load validates shapes and values (InvalidArgument).
absl::Status SaveGhhcModel(const GhhcModel& model, const std::string& dir);
absl::StatusOr<GhhcModel> LoadGhhcModel(const std::string& dir);

}  // namespace dendro

#endif  // DENDRO_CORE_GHHC_GHHC_H_
