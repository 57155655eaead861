#include "core/hierarchy/hierarchy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"

namespace dendro {

namespace {

absl::Status CheckLeafCount(int32_t num_leaves) {
  if (num_leaves < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_leaves must be >= 1, got %d", num_leaves));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Hierarchy> Hierarchy::FromMerges(int32_t num_leaves,
                                                absl::Span<const Merge> merges) {
  if (absl::Status s = CheckLeafCount(num_leaves); !s.ok()) return s;
  const int64_t expected = static_cast<int64_t>(num_leaves) - 1;
  if (static_cast<int64_t>(merges.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a binary tree over %d leaves needs exactly %d merges, got %d", num_leaves,
        expected, merges.size()));
  }
  const int32_t n = 2 * num_leaves - 1;
  Hierarchy h;
  h.num_leaves_ = num_leaves;
  h.parent_.assign(n, -1);
  h.height_.assign(n, 0.0);
  std::vector<int32_t> used_by(n, -1);  // merge index that consumed the node
  for (int32_t t = 0; t < static_cast<int32_t>(merges.size()); ++t) {
    const Merge& m = merges[t];
    const int32_t node = num_leaves + t;
    if (!std::isfinite(m.height)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("merge %d has non-finite height %g", t, m.height));
    }
    for (int32_t c : {m.a, m.b}) {
      if (c < 0 || c >= node) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "merge %d refers to node %d, but only nodes 0..%d exist before it", t, c,
            node - 1));
      }
    }
    if (m.a == m.b) {
      return absl::InvalidArgumentError(
          absl::StrFormat("merge %d merges node %d with itself", t, m.a));
    }
    for (int32_t c : {m.a, m.b}) {
      if (used_by[c] >= 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "node %d is merged twice (merges %d and %d)", c, used_by[c], t));
      }
      used_by[c] = t;
      if (m.height < h.height_[c]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "merge %d has height %.17g, below the height %.17g of its child %d "
            "(heights must be non-decreasing towards the root)",
            t, m.height, h.height_[c], c));
      }
      h.parent_[c] = node;
    }
    h.height_[node] = m.height;
  }
  h.child_offset_.assign(n + 1, 0);
  h.child_list_.reserve(2 * merges.size());
  for (int32_t v = 0; v < n; ++v) {
    if (v >= num_leaves) {
      const Merge& m = merges[v - num_leaves];
      h.child_list_.push_back(m.a);
      h.child_list_.push_back(m.b);
    }
    h.child_offset_[v + 1] = static_cast<int32_t>(h.child_list_.size());
  }
  if (absl::Status s = h.Finalize(); !s.ok()) return s;
  return h;
}

absl::StatusOr<Hierarchy> Hierarchy::FromParents(int32_t num_leaves,
                                                 absl::Span<const int32_t> parent,
                                                 absl::Span<const double> height,
                                                 std::vector<int32_t>* old_to_new) {
  if (absl::Status s = CheckLeafCount(num_leaves); !s.ok()) return s;
  if (parent.size() != height.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parent has %d entries but height has %d", parent.size(), height.size()));
  }
  if (parent.size() < static_cast<size_t>(num_leaves) ||
      parent.size() > static_cast<size_t>(2 * static_cast<int64_t>(num_leaves) - 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a tree over %d leaves has between %d and %d nodes (each internal node "
        "has >= 2 children), got %d",
        num_leaves, num_leaves, 2 * static_cast<int64_t>(num_leaves) - 1, parent.size()));
  }
  const int32_t n = static_cast<int32_t>(parent.size());
  int32_t root = -1;
  std::vector<int32_t> num_children(n, 0);
  for (int32_t v = 0; v < n; ++v) {
    if (!std::isfinite(height[v])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("node %d has non-finite height %g", v, height[v]));
    }
    if (v < num_leaves && height[v] != 0.0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("leaf %d has height %.17g; leaves must have height 0", v, height[v]));
    }
    const int32_t p = parent[v];
    if (p == -1) {
      if (root >= 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "nodes %d and %d both have parent -1; a tree has exactly one root", root, v));
      }
      root = v;
      continue;
    }
    if (p < 0 || p >= n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "node %d has parent %d, outside [0, %d) (use -1 for the root)", v, p, n));
    }
    if (p == v) return absl::InvalidArgumentError(absl::StrFormat("node %d is its own parent", v));
    if (p < num_leaves) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "node %d has parent %d, which is a leaf (nodes 0..%d are leaves)", v, p,
          num_leaves - 1));
    }
    if (height[p] < height[v]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "node %d (height %.17g) is below its child %d (height %.17g); heights must be "
          "non-decreasing towards the root",
          p, height[p], v, height[v]));
    }
    ++num_children[p];
  }
  if (root < 0) {
    return absl::InvalidArgumentError("no node has parent -1: the parents contain a cycle");
  }
  if (n > 1 && root < num_leaves) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the root %d is a leaf, but the tree has %d leaves", root, num_leaves));
  }
  for (int32_t v = num_leaves; v < n; ++v) {
    if (num_children[v] < 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "internal node %d has %d child(ren); internal nodes need at least 2", v,
          num_children[v]));
    }
  }
  // Every node must reach the root; otherwise the parent links hold a cycle.
  {
    std::vector<int8_t> state(n, 0);  // 0 unknown, 1 on current path, 2 reaches root
    state[root] = 2;
    std::vector<int32_t> path;
    for (int32_t s = 0; s < n; ++s) {
      int32_t v = s;
      path.clear();
      while (state[v] == 0) {
        state[v] = 1;
        path.push_back(v);
        v = parent[v];
      }
      if (state[v] == 1) {
        std::string cycle = absl::StrCat(v);
        for (int32_t u = parent[v], steps = 0; u != v && steps < 8; u = parent[u], ++steps) {
          absl::StrAppend(&cycle, " -> ", u);
        }
        absl::StrAppend(&cycle, " -> ", v);
        return absl::InvalidArgumentError(
            absl::StrCat("the parent links contain a cycle: ", cycle, " (not connected to root ",
                         root, ")"));
      }
      for (int32_t u : path) state[u] = 2;
    }
  }

  // Renumber internal nodes by (height, id); within a run of equal heights,
  // a topological order (children first) with the smallest id first.
  std::vector<int32_t> order(n - num_leaves);
  std::iota(order.begin(), order.end(), num_leaves);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return height[x] != height[y] ? height[x] < height[y] : x < y;
  });
  std::vector<int32_t> map(n);
  std::iota(map.begin(), map.begin() + num_leaves, 0);
  {
    std::vector<int32_t> pending(n, 0);  // children in the same height run
    std::vector<int32_t> sorted;
    sorted.reserve(order.size());
    size_t i = 0;
    while (i < order.size()) {
      size_t j = i;
      while (j < order.size() && height[order[j]] == height[order[i]]) ++j;
      bool any_internal_tie = false;
      for (size_t q = i; q < j; ++q) {
        const int32_t p = parent[order[q]];
        if (p >= 0 && height[p] == height[order[q]]) {
          ++pending[p];
          any_internal_tie = true;
        }
      }
      if (!any_internal_tie) {
        sorted.insert(sorted.end(), order.begin() + i, order.begin() + j);
      } else {
        std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> ready;
        for (size_t q = i; q < j; ++q) {
          if (pending[order[q]] == 0) ready.push(order[q]);
        }
        while (!ready.empty()) {
          const int32_t v = ready.top();
          ready.pop();
          sorted.push_back(v);
          const int32_t p = parent[v];
          if (p >= 0 && height[p] == height[v] && --pending[p] == 0) ready.push(p);
        }
      }
      i = j;
    }
    for (size_t r = 0; r < sorted.size(); ++r) {
      map[sorted[r]] = num_leaves + static_cast<int32_t>(r);
    }
  }

  Hierarchy h;
  h.num_leaves_ = num_leaves;
  h.parent_.assign(n, -1);
  h.height_.assign(n, 0.0);
  for (int32_t v = 0; v < n; ++v) {
    h.parent_[map[v]] = parent[v] < 0 ? -1 : map[parent[v]];
    h.height_[map[v]] = height[v];
  }
  // Children CSR in ascending (new) id order.
  h.child_offset_.assign(n + 1, 0);
  for (int32_t v = 0; v < n; ++v) {
    if (h.parent_[v] >= 0) ++h.child_offset_[h.parent_[v] + 1];
  }
  for (int32_t v = 0; v < n; ++v) h.child_offset_[v + 1] += h.child_offset_[v];
  h.child_list_.assign(n > 0 ? n - 1 : 0, 0);
  {
    std::vector<int32_t> fill(h.child_offset_.begin(), h.child_offset_.end() - 1);
    for (int32_t v = 0; v < n; ++v) {
      if (h.parent_[v] >= 0) h.child_list_[fill[h.parent_[v]]++] = v;
    }
  }
  if (absl::Status s = h.Finalize(); !s.ok()) return s;
  if (old_to_new != nullptr) *old_to_new = std::move(map);
  return h;
}

absl::Status Hierarchy::Finalize() {
  const int32_t n = num_nodes();
  const int32_t num_internal = n - num_leaves_;
  if (n < 1 || num_leaves_ < 1 || parent_[n - 1] != -1) {
    return absl::InternalError("hierarchy: the last node must be the root");
  }
  leaf_count_.assign(n, 0);
  binary_ = true;
  for (int32_t v = 0; v < n; ++v) {
    auto kids = children(v);
    if (v < num_leaves_) {
      if (!kids.empty()) return absl::InternalError(absl::StrCat("leaf ", v, " has children"));
      leaf_count_[v] = 1;
      if (height_[v] != 0.0) return absl::InternalError(absl::StrCat("leaf ", v, " height != 0"));
      continue;
    }
    if (kids.size() < 2) {
      return absl::InternalError(absl::StrCat("internal node ", v, " has < 2 children"));
    }
    if (kids.size() != 2) binary_ = false;
    for (int32_t c : kids) {
      if (c >= v || parent_[c] != v || height_[c] > height_[v]) {
        return absl::InternalError(absl::StrCat("node ", v, " violates the numbering invariant"));
      }
      leaf_count_[v] += leaf_count_[c];
    }
  }
  depth_.assign(n, 0);
  for (int32_t v = n - 2; v >= 0; --v) depth_[v] = depth_[parent_[v]] + 1;

  std::vector<int32_t> order(num_internal);
  std::iota(order.begin(), order.end(), num_leaves_);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return height_[x] < height_[y]; });
  merge_rank_.assign(num_internal, 0);
  for (int32_t r = 0; r < num_internal; ++r) merge_rank_[order[r] - num_leaves_] = r;
  levels_.assign(num_internal + 1, 1);
  for (int32_t r = 1; r <= num_internal; ++r) {
    const int32_t v = order[num_internal - r];
    levels_[r] = levels_[r - 1] + static_cast<int32_t>(children(v).size()) - 1;
  }
  return absl::OkStatus();
}

absl::Span<const int32_t> Hierarchy::children(int32_t node) const {
  return absl::MakeConstSpan(child_list_.data() + child_offset_[node],
                             child_offset_[node + 1] - child_offset_[node]);
}

absl::StatusOr<std::vector<int32_t>> Hierarchy::Ancestors(int32_t leaf) const {
  if (leaf < 0 || leaf >= num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("node %d is outside [0, %d)", leaf, num_nodes()));
  }
  std::vector<int32_t> out;
  out.reserve(depth_[leaf]);
  for (int32_t v = parent_[leaf]; v >= 0; v = parent_[v]) out.push_back(v);
  return out;
}

int32_t Hierarchy::Lca(int32_t u, int32_t v) const {
  if (u < 0 || v < 0 || u >= num_nodes() || v >= num_nodes()) return -1;
  while (depth_[u] > depth_[v]) u = parent_[u];
  while (depth_[v] > depth_[u]) v = parent_[v];
  while (u != v) {
    u = parent_[u];
    v = parent_[v];
  }
  return u;
}

template <typename Removed>
std::vector<int32_t> Hierarchy::ClusterRoots(Removed removed) const {
  const int32_t n = num_nodes();
  // rep[v]: the cluster root above v (itself if v is a cluster root); parents
  // have larger ids, so one descending pass suffices.
  std::vector<int32_t> rep(n, -1);
  for (int32_t v = n - 1; v >= 0; --v) {
    if (v >= num_leaves_ && removed(v)) continue;
    const int32_t p = parent_[v];
    rep[v] = (p < 0 || removed(p)) ? v : rep[p];
  }
  return rep;
}

template <typename Removed>
std::vector<int32_t> Hierarchy::LabelLeaves(Removed removed) const {
  const std::vector<int32_t> rep = ClusterRoots(removed);
  std::vector<int32_t> label_of_rep(num_nodes(), -1);
  std::vector<int32_t> labels(num_leaves_);
  int32_t next = 0;
  for (int32_t leaf = 0; leaf < num_leaves_; ++leaf) {
    int32_t& l = label_of_rep[rep[leaf]];
    if (l < 0) l = next++;
    labels[leaf] = l;
  }
  return labels;
}

absl::StatusOr<int32_t> Hierarchy::FirstRemovedRank(int32_t k) const {
  if (k < 1 || k > num_leaves_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot cut into %d clusters: k must be in [1, %d]", k, num_leaves_));
  }
  auto it = std::lower_bound(levels_.begin(), levels_.end(), k);
  if (*it != k) {
    const int32_t above = *it;
    const int32_t below = *(it - 1);
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot cut this n-ary tree into exactly %d clusters: the nearest reachable "
        "counts are %d and %d",
        k, below, above));
  }
  const int32_t undone = static_cast<int32_t>(it - levels_.begin());
  return num_internal() - undone;
}

absl::StatusOr<std::vector<int32_t>> Hierarchy::CutToK(int32_t k) const {
  DENDRO_ASSIGN_OR_RETURN(const int32_t first_removed, FirstRemovedRank(k));
  return LabelLeaves(
      [&](int32_t v) { return v >= num_leaves_ && merge_rank_[v - num_leaves_] >= first_removed; });
}

absl::StatusOr<std::vector<int32_t>> Hierarchy::ClusterRootsAtK(int32_t k) const {
  DENDRO_ASSIGN_OR_RETURN(const int32_t first_removed, FirstRemovedRank(k));
  std::vector<int32_t> rep = ClusterRoots(
      [&](int32_t v) { return v >= num_leaves_ && merge_rank_[v - num_leaves_] >= first_removed; });
  rep.resize(num_leaves_);
  return rep;
}

std::vector<int32_t> Hierarchy::CutAtHeight(double h) const {
  return LabelLeaves([&](int32_t v) { return v >= num_leaves_ && height_[v] > h; });
}

absl::StatusOr<int32_t> Hierarchy::ClusterAtLevel(int32_t leaf, int32_t k) const {
  if (leaf < 0 || leaf >= num_leaves_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("leaf %d is outside [0, %d)", leaf, num_leaves_));
  }
  auto labels = CutToK(k);
  if (!labels.ok()) return labels.status();
  return (*labels)[leaf];
}

std::vector<int32_t> Hierarchy::ReachableLevels() const { return levels_; }

std::vector<Merge> Hierarchy::ToMerges() const {
  std::vector<Merge> merges;
  merges.reserve(num_leaves_ > 0 ? num_leaves_ - 1 : 0);
  // bin_id[v]: id of v in the binarised numbering (its chain's last merge).
  std::vector<int32_t> bin_id(num_nodes());
  std::iota(bin_id.begin(), bin_id.begin() + num_leaves_, 0);
  for (int32_t v = num_leaves_; v < num_nodes(); ++v) {
    auto kids = children(v);
    int32_t acc = bin_id[kids[0]];
    for (size_t i = 1; i < kids.size(); ++i) {
      merges.push_back(Merge{acc, bin_id[kids[i]], height_[v]});
      acc = num_leaves_ + static_cast<int32_t>(merges.size()) - 1;
    }
    bin_id[v] = acc;
  }
  return merges;
}

absl::Status CheckLeafNames(const std::vector<std::string>& names, int64_t num_leaves) {
  if (!names.empty() && static_cast<int64_t>(names.size()) != num_leaves) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d leaf names for a tree with %d leaves", names.size(), num_leaves));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (n.empty() || n.size() > 256) {
      return absl::InvalidArgumentError(
          absl::StrFormat("leaf name %d must be 1-256 bytes, got %d", i, n.size()));
    }
    for (unsigned char c : n) {
      if (c < 0x20 || c == 0x7f) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "leaf name %d contains a control character (code %d)", i, static_cast<int>(c)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Hierarchy::SetLeafNames(std::vector<std::string> names) {
  if (absl::Status s = CheckLeafNames(names, num_leaves_); !s.ok()) return s;
  leaf_names_ = std::move(names);
  return absl::OkStatus();
}

absl::Status Hierarchy::SetPointLeaf(std::vector<int32_t> point_leaf) {
  for (size_t i = 0; i < point_leaf.size(); ++i) {
    if (point_leaf[i] < 0 || point_leaf[i] >= num_leaves_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "point %d is assigned to leaf %d, outside [0, %d)", i, point_leaf[i], num_leaves_));
    }
  }
  point_leaf_ = std::move(point_leaf);
  return absl::OkStatus();
}

}  // namespace dendro
