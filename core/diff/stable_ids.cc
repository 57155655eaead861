#include "core/diff/stable_ids.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/diff/diff.h"
#include "core/io/json_fields.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

// Items under each node: leaf sizes summed towards the root (children have
// smaller ids than their parent).
std::vector<int64_t> NodeSizes(const Hierarchy& tree, const std::vector<int64_t>& leaf_size) {
  std::vector<int64_t> size(tree.num_nodes(), 0);
  for (int32_t v = 0; v < tree.num_leaves(); ++v) size[v] = leaf_size[v];
  for (int32_t v = 0; v < tree.num_nodes(); ++v) {
    if (tree.parent(v) >= 0) size[tree.parent(v)] += size[v];
  }
  return size;
}

absl::Status CheckOverlap(const Hierarchy& previous, const Hierarchy& next,
                          const ClusterOverlap& overlap) {
  if (static_cast<int64_t>(overlap.a_size.size()) != previous.num_leaves() ||
      static_cast<int64_t>(overlap.b_size.size()) != next.num_leaves()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the overlap sizes %d and %d leaves, the trees have %d and %d", overlap.a_size.size(),
        overlap.b_size.size(), previous.num_leaves(), next.num_leaves()));
  }
  for (int64_t s : overlap.a_size) {
    if (s < 0) return absl::InvalidArgumentError("a leaf size is negative");
  }
  for (int64_t s : overlap.b_size) {
    if (s < 0) return absl::InvalidArgumentError("a leaf size is negative");
  }
  std::vector<int64_t> a_used(previous.num_leaves(), 0), b_used(next.num_leaves(), 0);
  for (const ClusterOverlap::Pair& p : overlap.pairs) {
    if (p.a_leaf < 0 || p.a_leaf >= previous.num_leaves() || p.b_leaf < 0 ||
        p.b_leaf >= next.num_leaves() || p.shared <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "overlap pair (%d, %d, %d) is outside the trees (%d and %d leaves) or shares nothing",
          p.a_leaf, p.b_leaf, p.shared, previous.num_leaves(), next.num_leaves()));
    }
    a_used[p.a_leaf] += p.shared;
    b_used[p.b_leaf] += p.shared;
  }
  for (int32_t l = 0; l < previous.num_leaves(); ++l) {
    if (a_used[l] > overlap.a_size[l]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "previous leaf %d shares %d items but holds %d", l, a_used[l], overlap.a_size[l]));
    }
  }
  for (int32_t l = 0; l < next.num_leaves(); ++l) {
    if (b_used[l] > overlap.b_size[l]) {
      return absl::InvalidArgumentError(absl::StrFormat("next leaf %d shares %d items but holds %d",
                                                        l, b_used[l], overlap.b_size[l]));
    }
  }
  return absl::OkStatus();
}

struct Candidate {
  int32_t x = 0;  // previous node
  int32_t y = 0;  // next node
  double jaccard = 0;
};

}  // namespace

absl::Status CheckStableIds(const StableIds& ids, const Hierarchy& tree) {
  if (static_cast<int64_t>(ids.node.size()) != tree.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d stable ids for a tree of %d nodes", ids.node.size(), tree.num_nodes()));
  }
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.node.size());
  for (size_t v = 0; v < ids.node.size(); ++v) {
    const int64_t id = ids.node[v];
    if (id < 0 || id >= ids.next) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stable id %d of node %d is outside [0, %d)", id, v, ids.next));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stable id %d is given to two nodes (one is node %d)", id, v));
    }
  }
  return absl::OkStatus();
}

StableIds FirstStableIds(const Hierarchy& tree) {
  StableIds ids;
  ids.node.resize(tree.num_nodes());
  for (int32_t v = 0; v < tree.num_nodes(); ++v) ids.node[v] = v;
  ids.next = tree.num_nodes();
  return ids;
}

absl::StatusOr<ClusterOverlap> OverlapByLeaves(const Hierarchy& previous, const Hierarchy& next) {
  DENDRO_ASSIGN_OR_RETURN(LeafMatching m, MatchLeaves(previous, next));
  ClusterOverlap o;
  o.basis = "leaves";
  o.a_size.assign(previous.num_leaves(), 1);
  o.b_size.assign(next.num_leaves(), 1);
  o.pairs.reserve(m.a_leaf.size());
  for (size_t i = 0; i < m.a_leaf.size(); ++i) {
    o.pairs.push_back({m.a_leaf[i], m.b_leaf[i], 1});
  }
  return o;
}

absl::StatusOr<ClusterOverlap> OverlapByPoints(const Hierarchy& previous, const Hierarchy& next) {
  const std::vector<int32_t>& pa = previous.point_leaf();
  const std::vector<int32_t>& pb = next.point_leaf();
  if (pa.empty() || pb.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("points cannot be matched: the ",
                                                      pa.empty() ? "previous" : "next",
                                                      " tree has no point assignment"));
  }
  ClusterOverlap o;
  o.basis = "points";
  o.a_size.assign(previous.num_leaves(), 0);
  o.b_size.assign(next.num_leaves(), 0);
  for (int32_t l : pa) ++o.a_size[l];
  for (int32_t l : pb) ++o.b_size[l];
  const size_t n = std::min(pa.size(), pb.size());
  absl::flat_hash_map<uint64_t, int64_t> shared;
  for (size_t i = 0; i < n; ++i) {
    ++shared[(static_cast<uint64_t>(pa[i]) << 32) | static_cast<uint32_t>(pb[i])];
  }
  o.pairs.reserve(shared.size());
  for (const auto& [key, count] : shared) {
    o.pairs.push_back(
        {static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xffffffffu), count});
  }
  // The map's order is not the same on every run: the pairs' order is.
  std::sort(o.pairs.begin(), o.pairs.end(), [](const auto& p, const auto& q) {
    return std::tie(p.a_leaf, p.b_leaf) < std::tie(q.a_leaf, q.b_leaf);
  });
  return o;
}

absl::StatusOr<StableIdMatch> CarryStableIds(const Hierarchy& previous,
                                             const StableIds& previous_ids, const Hierarchy& next,
                                             const ClusterOverlap& overlap,
                                             const StableIdOptions& options) {
  const double t = options.min_jaccard;
  if (!(t >= 0.5 && t < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("min_jaccard must be in [0.5, 1), got %g", t));
  }
  DENDRO_RETURN_IF_ERROR(CheckStableIds(previous_ids, previous));
  DENDRO_RETURN_IF_ERROR(CheckOverlap(previous, next, overlap));
  const std::vector<int64_t> sa = NodeSizes(previous, overlap.a_size);
  const std::vector<int64_t> sb = NodeSizes(next, overlap.b_size);

  // Shared items of every (previous, next) node pair whose sizes are close
  // enough for J > t (J <= min / max of the sizes): walking up from a pair
  // of leaves, the next tree's band of such sizes only moves up as the
  // previous node grows.
  absl::flat_hash_map<uint64_t, int64_t> shared;
  std::vector<int32_t> chain;
  int64_t work = 0;
  for (const ClusterOverlap::Pair& p : overlap.pairs) {
    chain.clear();
    for (int32_t y = p.b_leaf; y >= 0; y = next.parent(y)) chain.push_back(y);
    size_t lo = 0, hi = 0;
    for (int32_t x = p.a_leaf; x >= 0; x = previous.parent(x)) {
      const double sx = static_cast<double>(sa[x]);
      while (lo < chain.size() && static_cast<double>(sb[chain[lo]]) <= t * sx) ++lo;
      hi = std::max(hi, lo);
      while (hi < chain.size() && static_cast<double>(sb[chain[hi]]) * t < sx) ++hi;
      for (size_t i = lo; i < hi; ++i) {
        shared[(static_cast<uint64_t>(x) << 32) | static_cast<uint32_t>(chain[i])] += p.shared;
      }
      work += static_cast<int64_t>(hi - lo) + 1;
    }
    work += static_cast<int64_t>(chain.size());
    if (work > options.max_work) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "matching these trees' clusters would take more than %d steps (their paths from "
          "leaf to root are too long)",
          options.max_work));
    }
  }

  std::vector<Candidate> candidates;
  for (const auto& [key, inter] : shared) {
    const int32_t x = static_cast<int32_t>(key >> 32);
    const int32_t y = static_cast<int32_t>(key & 0xffffffffu);
    const double j = static_cast<double>(inter) / static_cast<double>(sa[x] + sb[y] - inter);
    if (j > t) candidates.push_back({x, y, j});
  }
  std::sort(candidates.begin(), candidates.end(), [&](const Candidate& c, const Candidate& d) {
    if (c.jaccard != d.jaccard) return c.jaccard > d.jaccard;
    const int32_t cy = next.leaf_count(c.y), dy = next.leaf_count(d.y);
    if (cy != dy) return cy < dy;
    const int32_t cx = previous.leaf_count(c.x), dx = previous.leaf_count(d.x);
    if (cx != dx) return cx < dx;
    return std::tie(c.y, c.x) < std::tie(d.y, d.x);
  });

  StableIdMatch m;
  m.previous_node.assign(next.num_nodes(), -1);
  m.jaccard.assign(next.num_nodes(), 0.0);
  std::vector<char> x_used(previous.num_nodes(), 0);
  for (const Candidate& c : candidates) {
    if (x_used[c.x] || m.previous_node[c.y] >= 0) continue;
    x_used[c.x] = 1;
    m.previous_node[c.y] = c.x;
    m.jaccard[c.y] = c.jaccard;
  }
  m.ids.node.resize(next.num_nodes());
  m.ids.next = previous_ids.next;
  for (int32_t v = 0; v < next.num_nodes(); ++v) {
    if (m.previous_node[v] >= 0) {
      m.ids.node[v] = previous_ids.node[m.previous_node[v]];
      ++m.kept;
    } else {
      m.ids.node[v] = m.ids.next++;
      ++m.fresh;
    }
  }
  return m;
}

absl::StatusOr<std::vector<int64_t>> StableIdsAtLevel(const Hierarchy& tree, const StableIds& ids,
                                                      int32_t k) {
  if (static_cast<int64_t>(ids.node.size()) != tree.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d stable ids for a tree of %d nodes", ids.node.size(), tree.num_nodes()));
  }
  std::vector<int64_t> out(tree.num_leaves());
  if (k == 0) {
    for (int32_t l = 0; l < tree.num_leaves(); ++l) out[l] = ids.node[l];
    return out;
  }
  DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> roots, tree.ClusterRootsAtK(k));
  for (int32_t l = 0; l < tree.num_leaves(); ++l) out[l] = ids.node[roots[l]];
  return out;
}

std::string StableIdsJson(const StableIds& ids) {
  nlohmann::json j;
  j["format"] = "dendro.stable_ids";
  j["version"] = 1;
  j["next"] = ids.next;
  j["node"] = ids.node;
  return DumpJson(j);
}

absl::StatusOr<StableIds> ParseStableIdsJson(const std::string& text, const Hierarchy& tree) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("stable ids: not a JSON object");
  JsonFields f(j, "stable ids");
  DENDRO_ASSIGN_OR_RETURN(std::string format, f.GetString("format"));
  if (format != "dendro.stable_ids") {
    return absl::InvalidArgumentError(
        absl::StrCat("stable ids: format must be 'dendro.stable_ids', got '", format, "'"));
  }
  DENDRO_ASSIGN_OR_RETURN(int64_t version, f.GetInt64("version"));
  if (version != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("stable ids: version ", version, " is not supported (1 is)"));
  }
  StableIds ids;
  DENDRO_ASSIGN_OR_RETURN(ids.next, f.GetInt64("next", 0));
  DENDRO_ASSIGN_OR_RETURN(ids.node, f.GetInt64Array("node", 0));
  DENDRO_RETURN_IF_ERROR(CheckStableIds(ids, tree));
  return ids;
}

}  // namespace dendro
