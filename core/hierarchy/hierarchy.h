// Hierarchy: the one tree type every Dendro method produces.
//
// A Hierarchy is a rooted tree over L >= 1 *leaf clusters*.
//   * Nodes 0 .. L-1 are the leaf clusters, in the method's own numbering
//     (an L2H leaf is the pre-trained model's cluster id; a t-NEB leaf is a
//     surviving mixture component).
//   * Nodes L .. num_nodes()-1 are internal. Every internal node has at
//     least two children, and its id is larger than the ids of all its
//     children, so increasing id order is a valid bottom-up order. The
//     root is num_nodes()-1 (for L == 1 the single leaf is the root).
//   * Every node has a height. Leaves have height 0; a parent's height is
//     >= each child's height ("non-decreasing towards the root").
//   * Internal nodes are ordered by (height, id): the merge order. For a
//     binary tree built from a merge sequence, merge t (0-based) creates
//     node L + t, exactly as in a SciPy linkage matrix.
//   * Optionally, the tree carries the point -> leaf assignment of the data
//     it was fitted on (int32 per point, each in [0, L)).
//   * Optionally, names for the leaf clusters (class names), one per leaf,
//     used by the Newick and JSON exports.
//   * Free-form string metadata (method, parameters) travels with it.
//
// A Hierarchy is an immutable value type; build it with FromMerges or
// FromParents, which validate every invariant above.
#ifndef DENDRO_CORE_HIERARCHY_HIERARCHY_H_
#define DENDRO_CORE_HIERARCHY_HIERARCHY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dendro {

// One binary merge: nodes `a` and `b` (leaf ids or earlier merge nodes) join
// at `height` into a new node.
struct Merge {
  int32_t a = 0;
  int32_t b = 0;
  double height = 0.0;
};

// OK if `names` can name the leaves of a tree with `num_leaves` leaves:
// exactly that many, each 1-256 bytes without control characters (empty
// `names` is OK: no names). InvalidArgument names the first bad one.
absl::Status CheckLeafNames(const std::vector<std::string>& names, int64_t num_leaves);

class Hierarchy {
 public:
  // A binary tree from L-1 merges; merge t creates node num_leaves + t.
  // Every node must be used exactly once as a child, heights must be
  // non-decreasing along each path to the root (and finite). Merges need not
  // be sorted by height globally; the merge order used by CutToK is always
  // (height, id). children(L + t) is {a, b} in the order given.
  static absl::StatusOr<Hierarchy> FromMerges(int32_t num_leaves,
                                              absl::Span<const Merge> merges);

  // A general (n-ary) tree. `parent[v]` for every node v except the root,
  // which has parent -1; `height[v]` for every node. Nodes 0..num_leaves-1
  // are the leaves (no children); each internal node needs >= 2 children.
  // Internal nodes may come in any order: they are renumbered by
  // (height, original id) so that the invariants above hold (among nodes of
  // equal height a child always precedes its parent; otherwise ties go by
  // original id). The returned tree's node i for i >= num_leaves is the i-th
  // internal node in that order; `old_to_new` (optional) receives the
  // renumbering (leaves map to themselves). Leaves must have height 0;
  // children(v) are in ascending id order.
  static absl::StatusOr<Hierarchy> FromParents(
      int32_t num_leaves, absl::Span<const int32_t> parent,
      absl::Span<const double> height, std::vector<int32_t>* old_to_new = nullptr);

  int32_t num_leaves() const { return num_leaves_; }
  int32_t num_nodes() const { return static_cast<int32_t>(parent_.size()); }
  int32_t num_internal() const { return num_nodes() - num_leaves_; }
  int32_t root() const { return num_nodes() - 1; }
  bool is_leaf(int32_t node) const { return node < num_leaves_; }
  bool is_binary() const { return binary_; }  // every internal node has 2 children

  int32_t parent(int32_t node) const { return parent_[node]; }  // -1 at root
  double height(int32_t node) const { return height_[node]; }
  absl::Span<const int32_t> children(int32_t node) const;
  // Number of leaf clusters below (or equal to) `node`.
  int32_t leaf_count(int32_t node) const { return leaf_count_[node]; }
  // Edges from `node` up to the root.
  int32_t depth(int32_t node) const { return depth_[node]; }

  // Nodes on the path from `leaf`'s parent up to the root, nearest first.
  // Any node id is accepted (the root yields an empty list); an id outside
  // [0, num_nodes()) is InvalidArgument.
  absl::StatusOr<std::vector<int32_t>> Ancestors(int32_t leaf) const;
  // Lowest common ancestor of two nodes (a node is its own ancestor), found
  // by walking up from the deeper node: O(depth). Returns -1 if either id is
  // outside [0, num_nodes()).
  int32_t Lca(int32_t u, int32_t v) const;

  // Partition of the leaves into exactly k clusters: the state after the
  // first num_internal - (k - 1) ... merges in merge order, i.e. undoing the
  // top merges. Returns, for each leaf, a cluster label in [0, k); labels
  // are numbered by their smallest leaf id (leaf 0 is in cluster 0).
  // An n-ary node merges all its children at once, so some k may be
  // unreachable: then InvalidArgument names the nearest reachable counts.
  // Runs in O(L); k outside [1, L] is InvalidArgument.
  absl::StatusOr<std::vector<int32_t>> CutToK(int32_t k) const;
  // The same cut as CutToK(k), as nodes: for each leaf, the node at the top
  // of its cluster (the leaf itself when it is a cluster of its own).
  absl::StatusOr<std::vector<int32_t>> ClusterRootsAtK(int32_t k) const;
  // Partition induced by removing every internal node with height > h,
  // labelled like CutToK.
  std::vector<int32_t> CutAtHeight(double h) const;
  // The cluster label (as CutToK(k) numbers it) of one leaf. O(L): use
  // CutToK when labelling many leaves.
  absl::StatusOr<int32_t> ClusterAtLevel(int32_t leaf, int32_t k) const;
  // Cluster counts reachable by CutToK, ascending (1 .. L for binary trees).
  std::vector<int32_t> ReachableLevels() const;

  // Binary merge sequence: n-ary nodes become chains of binary merges at the
  // same height (children in children() order, left-folded: ((c0, c1), c2)
  // ...), emitted in node id order, so merge t creates binarised node L + t.
  // For a tree built with FromMerges this returns the original merges.
  std::vector<Merge> ToMerges() const;

  // Optional assignment of training points to leaves.
  const std::vector<int32_t>& point_leaf() const { return point_leaf_; }
  absl::Status SetPointLeaf(std::vector<int32_t> point_leaf);

  // Names of the leaf clusters (leaf_names()[i] names leaf i), or empty.
  const std::vector<std::string>& leaf_names() const { return leaf_names_; }
  // Exactly num_leaves() names, each 1-256 bytes without control
  // characters, or an empty vector to drop them. InvalidArgument names the
  // first bad one.
  absl::Status SetLeafNames(std::vector<std::string> names);

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::map<std::string, std::string>& mutable_metadata() { return metadata_; }

 private:
  Hierarchy() = default;
  // Derives leaf_count/depth/merge ranks from parent_, height_ and the
  // children CSR (filled by the factory), and checks the invariants.
  absl::Status Finalize();
  // Labels leaves by the cluster root above them; `removed(v)` says whether
  // internal node v is cut away (must be closed towards the root).
  template <typename Removed>
  std::vector<int32_t> LabelLeaves(Removed removed) const;
  // For every node kept, the cluster root above it (-1 for removed nodes).
  template <typename Removed>
  std::vector<int32_t> ClusterRoots(Removed removed) const;
  // The first merge rank CutToK(k) removes; InvalidArgument as CutToK.
  absl::StatusOr<int32_t> FirstRemovedRank(int32_t k) const;

  int32_t num_leaves_ = 0;
  std::vector<int32_t> parent_;
  std::vector<double> height_;
  std::vector<int32_t> child_offset_;  // CSR: children of v are
  std::vector<int32_t> child_list_;    // child_list_[child_offset_[v]..[v+1])
  std::vector<int32_t> leaf_count_;
  std::vector<int32_t> depth_;
  // merge_rank_[v - L]: position of internal node v in (height, id) order.
  std::vector<int32_t> merge_rank_;
  // levels_[r]: number of clusters after undoing the r last merges.
  std::vector<int32_t> levels_;
  bool binary_ = true;
  std::vector<int32_t> point_leaf_;
  std::vector<std::string> leaf_names_;  // empty or num_leaves_
  std::map<std::string, std::string> metadata_;
};

}  // namespace dendro

#endif  // DENDRO_CORE_HIERARCHY_HIERARCHY_H_
