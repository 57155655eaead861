// Stable cluster ids: a cluster keeps its id from one version of a
// hierarchy to the next when it is the same cluster.
//
// Every node of a tree (leaves and internal nodes: each is a cluster) gets
// an id, an integer >= 0. A lineage's first tree numbers its nodes
// 0 .. num_nodes-1. Each later tree is matched to the one before it:
//
// Overlap. The two trees are compared through items they share, each item
// sitting under one leaf of each tree: the shared leaves (classes that keep
// their identity, matched as core/diff's MatchLeaves does, by name or id),
// or the shared points of one dataset (the tree's point -> leaf assignment;
// point i is the same point in both when the second dataset holds the
// first's rows and then more, as a dataset's generations do). A cluster's
// *size* counts everything under it, shared or not: every leaf (leaves
// basis) or every point it was fitted on (points basis); its overlap with a
// cluster of the other tree counts the shared items under both.
//
// Match. The Jaccard index of clusters X (previous) and Y (next) is
// |X ∩ Y| / (|X| + |Y| - |X ∩ Y|). Pairs with J > min_jaccard (default 1/2:
// more than half of what either holds is shared) are matched one to one,
// greedily by descending J (ties: fewer leaves below Y, then below X, then
// lower node ids), so a cluster keeps the id of the previous cluster it is
// most like, and no id is given twice. Y then carries X's id; every
// unmatched node of the next tree gets a new id, counted up from the
// previous ids' `next` in node order, so an id, once used in a lineage, is
// never given to another cluster later, even after its cluster is gone.
//
// Cost: O(P (depth_A + depth_B + band)) time for P distinct (leaf, leaf)
// item pairs, where band is the number of clusters of the next tree on a
// leaf's path whose size is within the ratio J allows of the previous
// cluster's (about 2 on balanced trees); O(P + candidate pairs) memory.
// Trees whose candidate count passes max_work (paths thousands of nodes
// long) are refused with ResourceExhausted rather than matched slowly.
#ifndef DENDRO_CORE_DIFF_STABLE_IDS_H_
#define DENDRO_CORE_DIFF_STABLE_IDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hierarchy/hierarchy.h"

namespace dendro {

// The ids of one tree's nodes. Invariants (CheckStableIds): one per node,
// distinct, each in [0, next).
struct StableIds {
  std::vector<int64_t> node;  // node[v]: the id of node v
  int64_t next = 0;           // above every id the lineage has used
};

// OK if `ids` can be the ids of `tree`'s nodes; InvalidArgument naming the
// first fault otherwise.
absl::Status CheckStableIds(const StableIds& ids, const Hierarchy& tree);

// A lineage's first tree: node v has id v.
StableIds FirstStableIds(const Hierarchy& tree);

// What two trees share, as the match reads it (see the header comment).
struct ClusterOverlap {
  struct Pair {
    int32_t a_leaf = 0;  // leaf of the previous tree
    int32_t b_leaf = 0;  // leaf of the next tree
    int64_t shared = 0;  // items under both (> 0)
  };
  std::vector<Pair> pairs;
  // Size of each leaf of each tree (items under it, shared or not). For
  // every leaf, the pairs naming it share at most its size.
  std::vector<int64_t> a_size, b_size;
  const char* basis = "leaves";  // "leaves" or "points"
};

// Shared leaves, matched as MatchLeaves does; every leaf has size 1.
// InvalidArgument as MatchLeaves.
absl::StatusOr<ClusterOverlap> OverlapByLeaves(const Hierarchy& previous, const Hierarchy& next);

// Shared points: point i of both trees' point_leaf() for i below the
// shorter one's length. FailedPrecondition when either tree has no point
// assignment.
absl::StatusOr<ClusterOverlap> OverlapByPoints(const Hierarchy& previous, const Hierarchy& next);

struct StableIdOptions {
  double min_jaccard = 0.5;  // in [0.5, 1): a match needs J above it
  int64_t max_work = 50000000;
};

struct StableIdMatch {
  StableIds ids;  // of the next tree
  // For each node of the next tree: the previous tree's node it took its
  // id from (-1: a new id) and their Jaccard index (0 for a new id).
  std::vector<int32_t> previous_node;
  std::vector<double> jaccard;
  int32_t kept = 0;   // nodes that kept an id
  int32_t fresh = 0;  // nodes given a new one
};

// The next tree's ids, matched to `previous` (whose ids are
// `previous_ids`) through `overlap`. InvalidArgument if the ids or the
// overlap do not fit the trees or the options are out of range;
// ResourceExhausted past options.max_work.
absl::StatusOr<StableIdMatch> CarryStableIds(const Hierarchy& previous,
                                             const StableIds& previous_ids, const Hierarchy& next,
                                             const ClusterOverlap& overlap,
                                             const StableIdOptions& options = {});

// For each leaf of `tree`, the id of its cluster when the tree is cut into
// k clusters (k = 0: the leaf's own id). InvalidArgument as CutToK.
absl::StatusOr<std::vector<int64_t>> StableIdsAtLevel(const Hierarchy& tree, const StableIds& ids,
                                                      int32_t k);

// The ids as a JSON document (format "dendro.stable_ids", version 1:
// {"format", "version", "next", "node": [...]}) and back; parsing checks
// them against `tree` (InvalidArgument naming the fault).
std::string StableIdsJson(const StableIds& ids);
absl::StatusOr<StableIds> ParseStableIdsJson(const std::string& text, const Hierarchy& tree);

}  // namespace dendro

#endif  // DENDRO_CORE_DIFF_STABLE_IDS_H_
