// The trees of a gHHC model: the n-ary tree read off the nodes (eq. 4 with
// the section 4.2 rules, ExtractGhhcTree) and the binary tree served
// (GhhcModelTrees): Ward's tree over the leaf clusters or the node tree's
// refinement. Both are functions of the model alone (nodes, node_parent,
// node_leaf, leaf_size, leaf_mean), so a saved model rebuilds exactly the
// trees of its fit.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/ghhc/ghhc.h"
#include "core/ghhc/objective.h"
#include "core/ghhc/poincare.h"
#include "core/hierarchy/refine.h"
#include "core/hierarchy/ward.h"

namespace dendro {
namespace {

using ghhc::RowMat;

// ExtractGhhcTree given which nodes hold points (has_points[n] != 0).
// `tree_node` (optional) receives, for every node of the returned tree, the
// gHHC node standing for it: a leaf cluster's node (the node its points
// selected) or the internal node itself.
absl::StatusOr<Hierarchy> Extract(const std::vector<double>& nodes, int64_t dim,
                                  double point_norm, const std::vector<int32_t>& node_parent,
                                  const std::vector<char>& has_points,
                                  std::vector<int32_t>* node_leaf, int32_t* pruned_nodes,
                                  std::vector<int32_t>* tree_node) {
  const int64_t m = static_cast<int64_t>(node_parent.size());
  if (dim < 1 || static_cast<int64_t>(nodes.size()) != m * dim || m < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: expected ", m, " x ", dim, " values, got ", nodes.size()));
  }
  const Eigen::Map<const RowMat<double>> z(nodes.data(), m, dim);
  const Eigen::VectorXd sq = z.rowwise().squaredNorm();
  auto precedes = [&](int64_t a, int64_t b) {  // (norm, index) order
    return sq[a] < sq[b] || (sq[a] == sq[b] && a < b);
  };
  int64_t root = -1;
  for (int64_t c = 0; c < m; ++c) {
    const int32_t p = node_parent[c];
    if (p == -1) {
      if (root >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("nodes ", root, " and ", c, " both have no parent"));
      }
      root = c;
    } else if (p < 0 || p >= m || !precedes(p, c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", c, " has parent ", p, ", which does not precede it in (norm, index) order"));
    }
  }
  if (root < 0) return absl::InvalidArgumentError("no node is the root (parent -1)");

  // Children-first order: descending (norm, index).
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return precedes(b, a); });
  std::vector<char> any_below(has_points);  // points in the subtree
  for (int64_t c : order) {
    if (node_parent[c] >= 0 && any_below[c]) any_below[node_parent[c]] = 1;
  }
  node_leaf->assign(m, -1);
  int32_t num_leaves = 0;
  std::vector<int32_t> out_node;  // gHHC node of each output node (old ids)
  for (int64_t n = 0; n < m; ++n) {
    if (has_points[n]) {
      (*node_leaf)[n] = num_leaves++;
      out_node.push_back(static_cast<int32_t>(n));
    }
  }
  // Surviving children of each node: its leaf cluster plus internal children
  // with points below; single-child nodes are replaced by their child.
  std::vector<std::vector<int32_t>> kids(m);  // ids in the output numbering
  std::vector<int32_t> rep(m, -1);            // output id standing for node n
  std::vector<int32_t> out_parent(num_leaves, -1);
  std::vector<double> out_height(num_leaves, 0.0);
  const double point_pnorm = ghhc::PoincareNorm(point_norm);
  int32_t kept = 0;
  for (int64_t n : order) {
    if (!any_below[n]) continue;
    if (has_points[n]) kids[n].push_back((*node_leaf)[n]);
    if (kids[n].size() == 1) {
      rep[n] = kids[n][0];
    } else {
      rep[n] = static_cast<int32_t>(out_parent.size());
      out_parent.push_back(-1);
      out_height.push_back(point_pnorm - ghhc::PoincareNorm(std::sqrt(sq[n])));
      out_node.push_back(static_cast<int32_t>(n));
      for (int32_t k : kids[n]) out_parent[k] = rep[n];
      ++kept;
    }
    if (node_parent[n] >= 0) kids[node_parent[n]].push_back(rep[n]);
  }
  if (pruned_nodes != nullptr) *pruned_nodes = static_cast<int32_t>(m - kept);
  std::vector<int32_t> old_to_new;
  DENDRO_ASSIGN_OR_RETURN(Hierarchy tree,
                          Hierarchy::FromParents(num_leaves, out_parent, out_height, &old_to_new));
  if (tree_node != nullptr) {
    tree_node->assign(out_node.size(), -1);
    for (size_t v = 0; v < out_node.size(); ++v) (*tree_node)[old_to_new[v]] = out_node[v];
  }
  return tree;
}

// Same parents and (within rounding) heights.
bool SameShape(const Hierarchy& a, const Hierarchy& b) {
  if (a.num_leaves() != b.num_leaves() || a.num_nodes() != b.num_nodes()) return false;
  for (int32_t v = 0; v < a.num_nodes(); ++v) {
    if (a.parent(v) != b.parent(v)) return false;
    if (std::fabs(a.height(v) - b.height(v)) > 1e-12 * (1.0 + std::fabs(a.height(v)))) {
      return false;
    }
  }
  return true;
}

constexpr char kRefinedKey[] = "refined";

// WardTree over the model's leaf statistics, with `coarse`'s point_leaf and
// metadata.
absl::StatusOr<Hierarchy> WardAboveLeaves(const GhhcModel& model, const Hierarchy& coarse) {
  const int32_t leaves = coarse.num_leaves();
  if (static_cast<int64_t>(model.leaf_size.size()) != leaves ||
      static_cast<int64_t>(model.leaf_mean.size()) != int64_t{leaves} * model.ball_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent gHHC model: Ward's statistics cover ", model.leaf_size.size(),
                     " leaf clusters, the nodes hold ", leaves));
  }
  DENDRO_ASSIGN_OR_RETURN(Hierarchy ward,
                          WardTree(model.leaf_size, model.leaf_mean, model.ball_dim()));
  if (!coarse.point_leaf().empty()) DENDRO_RETURN_IF_ERROR(ward.SetPointLeaf(coarse.point_leaf()));
  ward.mutable_metadata() = coarse.metadata();
  ward.mutable_metadata()[kRefinedKey] =
      "Ward's criterion over the leaf clusters' unit directions (height sqrt(2 delta))";
  return ward;
}

// The tree a gHHC model serves: Ward's tree over the leaf clusters when the
// model has their statistics, else the node tree's binary refinement.
absl::StatusOr<Hierarchy> ServedTree(const GhhcModel& model, const Hierarchy& coarse,
                                     const std::vector<int32_t>& tree_node) {
  if (!model.leaf_size.empty()) return WardAboveLeaves(model, coarse);
  const Eigen::Map<const RowMat<double>> z(model.nodes.data(), model.num_nodes(), model.ball_dim());
  RefineOptions options;
  options.distance_name = "the Poincare distance between the children's node embeddings";
  auto distance = [&](int32_t a, int32_t b) {
    return ghhc::PoincareDistance(z.row(tree_node[a]).transpose(), z.row(tree_node[b]).transpose());
  };
  return RefineToBinary(coarse, distance, options);
}

}  // namespace

absl::StatusOr<Hierarchy> ExtractGhhcTree(const std::vector<double>& nodes, int64_t dim,
                                          double point_norm,
                                          const std::vector<int32_t>& node_parent,
                                          const std::vector<int32_t>& point_node,
                                          std::vector<int32_t>* node_leaf, int32_t* pruned_nodes) {
  const int64_t m = static_cast<int64_t>(node_parent.size());
  if (dim < 1 || static_cast<int64_t>(nodes.size()) != m * dim || m < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: expected ", m, " x ", dim, " values, got ", nodes.size()));
  }
  if (point_node.empty()) return absl::InvalidArgumentError("no points to place in the tree");
  std::vector<char> has_points(m, 0);
  for (size_t i = 0; i < point_node.size(); ++i) {
    const int32_t n = point_node[i];
    if (n < 0 || n >= m) {
      return absl::InvalidArgumentError(
          absl::StrCat("point ", i, " has node ", n, ", outside [0, ", m, ")"));
    }
    has_points[n] = 1;
  }
  return Extract(nodes, dim, point_norm, node_parent, has_points, node_leaf, pruned_nodes,
                 nullptr);
}

absl::StatusOr<GhhcTrees> GhhcModelTrees(const GhhcModel& model, const Hierarchy* saved) {
  const int32_t m = model.num_nodes();
  const int64_t d = model.ball_dim();
  if (m < 1 || static_cast<int64_t>(model.node_parent.size()) != m ||
      static_cast<int64_t>(model.nodes.size()) != int64_t{m} * d) {
    return absl::InvalidArgumentError("inconsistent gHHC model: node array sizes do not match");
  }
  std::vector<char> has_points(m, 0);
  bool any = false;
  for (int32_t n = 0; n < m; ++n) {
    has_points[n] = model.node_leaf[n] >= 0;
    any = any || has_points[n];
  }
  if (!any) return absl::InvalidArgumentError("inconsistent gHHC model: no node holds a leaf");
  std::vector<int32_t> node_leaf, tree_node;
  DENDRO_ASSIGN_OR_RETURN(Hierarchy coarse, Extract(model.nodes, d, model.point_norm,
                                                    model.node_parent, has_points, &node_leaf,
                                                    nullptr, &tree_node));
  if (node_leaf != model.node_leaf) {
    return absl::InvalidArgumentError(
        "inconsistent gHHC model: node_leaf does not number the nodes holding points by index");
  }
  if (saved != nullptr) {
    if (saved->num_leaves() != coarse.num_leaves()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the saved tree has ", saved->num_leaves(), " leaves but the gHHC model has ",
                       coarse.num_leaves(), " nodes holding points"));
    }
    DENDRO_RETURN_IF_ERROR(coarse.SetPointLeaf(saved->point_leaf()));
    coarse.mutable_metadata() = saved->metadata();
    coarse.mutable_metadata().erase(kRefinedKey);
  }
  const char* served_name =
      model.leaf_size.empty() ? "its refinement" : "Ward's tree over its leaf clusters";
  DENDRO_ASSIGN_OR_RETURN(Hierarchy served, ServedTree(model, coarse, tree_node));
  if (saved != nullptr && !SameShape(*saved, coarse) && !SameShape(*saved, served)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the saved tree is neither the gHHC model's tree nor ", served_name,
                     " (tree.json does not match the model)"));
  }
  return GhhcTrees{std::move(coarse), std::move(served)};
}

}  // namespace dendro
