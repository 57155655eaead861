// DiffHierarchies: how two hierarchies (two versions of a model, two
// methods on the same data) differ, over the leaves they share.
//
// Leaf matching. When both trees carry leaf names, leaves are matched by
// name (the shared leaves are the names present in both; each tree's names
// must then be distinct); otherwise by leaf id (the shared leaves are the
// ids below min(L_A, L_B)). Shared leaf i (0 <= i < n) is leaf a_leaf[i] of
// A and b_leaf[i] of B, numbered in A's leaf-id order. At least two shared
// leaves are needed.
//
// Restriction. Every leaf-based number below is computed on the two trees
// restricted to the shared leaves: leaves outside the shared set are
// removed, nodes left with no shared leaf are removed and nodes left with
// one child are contracted (their child takes their place). Heights are
// kept, so the LCA of two shared leaves has the same height as in the
// original tree. A *cluster* of a restricted tree is the set of shared
// leaves below one of its internal nodes other than the root: the rooted
// clusters of the tree, without singletons and the full set. Because no
// restricted internal node has a single child, distinct internal nodes have
// distinct clusters (no duplicates to remove).
//
// The numbers (docs/methods.md, "Comparing two hierarchies"):
//  * Robinson–Foulds (rooted clusters; Robinson & Foulds 1981): RF = |C_A △
//    C_B|, the number of clusters found in one tree but not the other;
//    normalised by |C_A| + |C_B| (0 when both are empty), so it lies in
//    [0, 1]. Symmetric in A and B.
//  * Cophenetic correlation (Sokal & Rohlf 1962): the Pearson correlation,
//    over pairs of distinct shared leaves, of the two trees' cophenetic
//    heights (height of the pair's LCA). All n(n-1)/2 pairs up to
//    kMaxExactCopheneticLeaves shared leaves; above, kCopheneticSamplePairs
//    pairs drawn by a fixed-seed generator (the same pairs on every run and
//    platform), and the report says so. NaN when either side's heights are
//    constant (the correlation is undefined).
//  * ARI at every k: for each k in [2, n-1] that both restricted trees reach
//    with CutToK (an n-ary node merges all its children at once, so some k
//    are skipped), the adjusted Rand index of the two cuts as labels of the
//    shared leaves. When both trees carry point assignments of the same
//    length (the same data set), the same over the points: each point is
//    labelled by the cluster of its leaf in each *full* tree's cut (leaf
//    matching plays no part), for every k in [2, min(L_A, L_B)] both reach.
//    More than kMaxAriLevels levels are thinned to kMaxAriLevels evenly
//    spaced ones (the first and last kept). The headline mean and min use
//    the points when available, else the leaves (`ari_basis`).
//  * Cluster events, for clusters X of A and Y of B (as leaf sets):
//      stayed  X = Y and their parents (the parent node's leaf set, the full
//              set for a child of the root) are equal as well;
//      moved   X = Y with different parents;
//      split   X has no equal cluster in B, and the maximal B clusters that
//              are proper subsets of X (its *parts*) number two or more and
//              together hold all of X's leaves;
//      merged  Y has no equal cluster in A, and the maximal A clusters that
//              are proper subsets of Y number two or more and together hold
//              all of Y's leaves;
//      gone    X has no equal cluster in B and is not split;
//      new     Y has no equal cluster in A and is not merged.
//    Every cluster of A is in exactly one stayed/moved/split/gone event and
//    every cluster of B in exactly one stayed/moved/merged/new event (a
//    stayed or moved event covers one cluster of each). Each event reports
//    the shared leaves it covers, the points of those leaves (when the tree
//    has point assignments) and the best match of its cluster in the other
//    tree by leaf-set Jaccard index |X ∩ Y| / |X ∪ Y| (1 for stayed/moved;
//    computed up to kMaxJaccardLeaves shared leaves, O(n^2)).
//  * Tanglegram crossings: see tanglegram.h; the count before and after
//    crossing reduction.
//
// Costs: O(n) for matching, restriction, RF and the events (LCAs in O(1)
// after an O(n log n) table), O(n^2) pairs for the cophenetic correlation
// up to the sampling bound, O(levels * n) for the ARI lists, O(n^2) for the
// Jaccard matches.
#ifndef DENDRO_CORE_DIFF_DIFF_H_
#define DENDRO_CORE_DIFF_DIFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

inline constexpr int32_t kMaxExactCopheneticLeaves = 4000;
inline constexpr int64_t kCopheneticSamplePairs = 2000000;
inline constexpr int32_t kMaxAriLevels = 1000;
inline constexpr int32_t kMaxJaccardLeaves = 20000;

struct LeafMatching {
  enum class By { kName, kId };
  By by = By::kId;
  // Shared leaf i is leaf a_leaf[i] of A and b_leaf[i] of B; a_leaf is
  // increasing. Both have the same size n.
  std::vector<int32_t> a_leaf, b_leaf;
  // Leaves of each tree that have no partner in the other.
  int32_t only_in_a = 0, only_in_b = 0;
};

// InvalidArgument if names are used and a tree has a name twice, or if
// fewer than two leaves are shared.
absl::StatusOr<LeafMatching> MatchLeaves(const Hierarchy& a, const Hierarchy& b);

// `tree` restricted to a set of its leaves (see the header comment): leaf i
// of the result is leaf keep[i] of `tree`, and original[v] names, for every
// node v of the result, the node of `tree` it comes from. Leaf names are
// carried over; point assignments are not. InvalidArgument if `keep` is
// empty, repeats a leaf or names a non-leaf.
struct RestrictedTree {
  Hierarchy tree;
  std::vector<int32_t> original;
};
absl::StatusOr<RestrictedTree> RestrictToLeaves(const Hierarchy& tree,
                                                const std::vector<int32_t>& keep);

struct AriLevel {
  int32_t k = 0;
  double ari = 0;
};
struct AriSeries {
  std::vector<AriLevel> levels;  // ascending k
  int32_t levels_total = 0;      // levels both trees reach in the range
  double mean = 0, min = 0;      // over `levels`; NaN when it is empty
};

struct ClusterEvent {
  enum class Type { kStayed, kMoved, kSplit, kMerged, kNew, kGone };
  Type type = Type::kStayed;
  // The cluster's node in each original tree (-1: none). split/gone have
  // a_node only, merged/new b_node only.
  int32_t a_node = -1, b_node = -1;
  int32_t leaves = 0;  // shared leaves in the cluster
  // Points in those leaves by each tree's assignments; -1 when the tree
  // has none (or has no cluster in this event).
  int64_t a_points = -1, b_points = -1;
  // split: the B clusters X divides into; merged: the A clusters that
  // together form Y. Node ids in the original trees, largest first.
  struct Part {
    int32_t node = 0;
    int32_t leaves = 0;
  };
  std::vector<Part> parts;
  // Best match of the event's cluster in the other tree by Jaccard index
  // (ties: fewer leaves, then lower id); -1 and 0 when not computed.
  int32_t best_match = -1;
  double best_jaccard = 0;
  // Up to kEventExampleLeaves of the cluster's shared leaves (names, else
  // ids), in the restricted tree's depth-first order.
  std::vector<std::string> example_leaves;
};
inline constexpr int kEventExampleLeaves = 5;
const char* ClusterEventName(ClusterEvent::Type type);  // "stayed", ...

struct DiffReport {
  LeafMatching matching;
  int32_t a_leaves = 0, b_leaves = 0;  // L of the full trees
  int32_t shared_leaves = 0;
  int32_t a_clusters = 0, b_clusters = 0;  // |C_A|, |C_B| after restriction
  int32_t shared_clusters = 0;             // |C_A ∩ C_B|
  int32_t rf = 0;
  double rf_normalized = 0;

  double cophenetic_correlation = 0;  // NaN when undefined
  int64_t cophenetic_pairs = 0;       // pairs used
  bool cophenetic_sampled = false;

  AriSeries ari_leaves;
  bool has_point_ari = false;
  AriSeries ari_points;              // when has_point_ari
  int64_t points = 0;                // points compared (0 without point_ari)
  const char* ari_basis = "leaves";  // "points" when has_point_ari
  double ari_mean = 0, ari_min = 0;  // of that basis

  // One event per cluster of A (stayed, moved, split, gone) in A's node
  // order, then one per cluster of B that is merged or new, in B's node
  // order. EventsBySize gives a presentation order.
  std::vector<ClusterEvent> events;
  int32_t event_counts[6] = {0, 0, 0, 0, 0, 0};  // indexed by Type
  bool jaccard_matched = false;

  int64_t crossings_before = 0, crossings_after = 0;
  int32_t crossing_sweeps = 0;
  // The tanglegram's leaf orders (top to bottom) after crossing reduction,
  // as leaf ids of the full trees.
  std::vector<int32_t> order_a, order_b;
};

absl::StatusOr<DiffReport> DiffHierarchies(const Hierarchy& a, const Hierarchy& b);

// The report as one JSON object (format "dendro.diff", version 1; the
// fields are listed in docs/methods.md). NaN values are written as null.
std::string DiffReportJson(const DiffReport& report);

// Indices into report.events, events that are not "stayed" first, then by
// leaves (descending), type, and node ids.
std::vector<size_t> EventsBySize(const DiffReport& report);

}  // namespace dendro

#endif  // DENDRO_CORE_DIFF_DIFF_H_
