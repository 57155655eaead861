#include "core/hierarchy/refine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dendro {
namespace {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Fills the condensed distance matrix of `kids` (pairs i < j in row order:
// entry i * m - i * (i + 1) / 2 + j - i - 1) or returns an error.
using BlockDistance =
    std::function<absl::Status(absl::Span<const int32_t> kids, std::vector<double>* condensed)>;

// Condensed upper triangle of an m x m symmetric matrix.
class Condensed {
 public:
  explicit Condensed(int64_t m) : m_(m) {}
  int64_t Index(int64_t i, int64_t j) const {  // i != j
    if (i > j) std::swap(i, j);
    return i * m_ - i * (i + 1) / 2 + (j - i - 1);
  }

 private:
  int64_t m_;
};

// Average-linkage agglomeration of m items with the condensed distances `d`
// (consumed). Returns the m - 1 steps as slot pairs (a, b), a < b: the group
// in slot b joins the group in slot a, which keeps slot a. Slots are in the
// order of the groups' names, so the lexicographically smallest (distance,
// a, b) is merged first.
//
// Method: every slot x keeps a key (key[x], x) that is a lower bound, in
// (distance, slot) order, of its row's true minimum over active slots
// y > x, and a candidate nn[x]. A popped key is used only once verified
// (nn[x] active, d(x, nn[x]) == key[x]); otherwise the row is rescanned.
// The bound survives merges because an average of two distances is never
// below the smaller one (enforced against rounding by a clamp), so a merge
// can only raise entries; a candidate merged away is redirected to the
// surviving slot when that slot is still after x, else marked unknown.
std::vector<std::pair<int32_t, int32_t>> AverageLinkage(int32_t m, std::vector<double> d) {
  const Condensed at(m);
  std::vector<int64_t> size(m, 1);
  std::vector<char> active(m, 1);
  std::vector<int32_t> nn(m, -1);
  std::vector<double> key(m, 0.0);
  std::vector<char> queued(m, 0);
  std::set<std::pair<double, int32_t>> queue;
  auto rescan = [&](int32_t x) {
    if (queued[x]) queue.erase({key[x], x});
    queued[x] = 0;
    nn[x] = -1;
    for (int32_t y = x + 1; y < m; ++y) {
      if (!active[y]) continue;
      const double v = d[at.Index(x, y)];
      if (nn[x] < 0 || v < key[x]) {  // strict: the smallest y wins ties
        nn[x] = y;
        key[x] = v;
      }
    }
    if (nn[x] >= 0) {
      queue.insert({key[x], x});
      queued[x] = 1;
    }
  };
  for (int32_t x = 0; x + 1 < m; ++x) rescan(x);
  std::vector<std::pair<int32_t, int32_t>> steps;
  steps.reserve(m > 0 ? m - 1 : 0);
  for (int32_t step = 0; step + 1 < m; ++step) {
    int32_t a = -1, b = -1;
    while (true) {
      a = queue.begin()->second;
      b = nn[a];
      if (b >= 0 && active[b] && d[at.Index(a, b)] == key[a]) break;
      rescan(a);
    }
    steps.emplace_back(a, b);
    const double sa = static_cast<double>(size[a]), sb = static_cast<double>(size[b]);
    for (int32_t x = 0; x < m; ++x) {
      if (!active[x] || x == a || x == b) continue;
      const double da = d[at.Index(a, x)], db = d[at.Index(b, x)];
      const double avg = (sa * da + sb * db) / (sa + sb);
      d[at.Index(a, x)] = std::clamp(avg, std::min(da, db), std::max(da, db));
    }
    size[a] += size[b];
    active[b] = 0;
    if (queued[b]) queue.erase({key[b], b});
    queued[b] = 0;
    for (int32_t x = 0; x < b; ++x) {
      if (!active[x] || x == a || nn[x] != b) continue;
      nn[x] = x < a ? a : -1;  // key[x] stays a lower bound either way
    }
    rescan(a);
  }
  return steps;
}

std::string RuleText(const RefineOptions& options) {
  return absl::StrCat(
      "n-ary nodes resolved by average linkage of their children on ", options.distance_name,
      " (ties: smallest node ids), new merges evenly spaced between the largest child height and "
      "the node's height",
      options.separate_tied_heights ? "; equal heights separated in (height, id) order" : "");
}

// Tie separation on merges where merge t creates node L + t (see refine.h).
void SeparateTies(std::vector<Merge>* merges) {
  std::vector<Merge>& mg = *merges;
  const int32_t n = static_cast<int32_t>(mg.size());
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return mg[x].height < mg[y].height; });
  double below = 0.0;  // largest height assigned so far (leaves: 0)
  int32_t i = 0;
  while (i < n) {
    const double h = mg[order[i]].height;
    int32_t j = i;
    while (j < n && mg[order[j]].height == h) ++j;
    const int32_t r = j - i;
    if (r > 1) {
      double prev = -std::numeric_limits<double>::infinity();
      if (j < n) {
        const double next = mg[order[j]].height;
        const double cap = std::nextafter(next, -std::numeric_limits<double>::infinity());
        for (int32_t q = 0; q < r; ++q) {
          double v = q == 0 ? h : h + (next - h) * (static_cast<double>(q) / r);
          v = std::max(std::min(v, cap), prev);
          mg[order[i + q]].height = v;
          prev = v;
        }
      } else if (h > below) {
        for (int32_t q = 0; q < r; ++q) {
          double v = q + 1 == r ? h : below + (h - below) * (static_cast<double>(q + 1) / r);
          v = std::max(std::min(v, h), prev);
          mg[order[i + q]].height = v;
          prev = v;
        }
      }
    }
    below = std::max(below, mg[order[j - 1]].height);
    i = j;
  }
}

absl::StatusOr<Hierarchy> Refine(const Hierarchy& tree, const BlockDistance& block,
                                 const RefineOptions& options, std::vector<int32_t>* node_map) {
  const int32_t num_leaves = tree.num_leaves();
  std::vector<int32_t> map(tree.num_nodes());
  std::iota(map.begin(), map.begin() + num_leaves, 0);
  std::vector<Merge> merges;
  merges.reserve(num_leaves > 0 ? num_leaves - 1 : 0);
  std::vector<double> condensed;
  for (int32_t v = num_leaves; v < tree.num_nodes(); ++v) {
    const absl::Span<const int32_t> kids = tree.children(v);
    const int32_t m = static_cast<int32_t>(kids.size());
    const double top = tree.height(v);
    if (m == 2) {
      merges.push_back(Merge{map[kids[0]], map[kids[1]], top});
      map[v] = num_leaves + static_cast<int32_t>(merges.size()) - 1;
      continue;
    }
    // children() is ascending in id, so slot order is name order.
    condensed.assign(static_cast<size_t>(m) * (m - 1) / 2, 0.0);
    if (absl::Status s = block(kids, &condensed); !s.ok()) return s;
    double h0 = 0.0;
    for (int32_t c : kids) h0 = std::max(h0, tree.height(c));
    std::vector<int32_t> slot_node(m);
    for (int32_t i = 0; i < m; ++i) slot_node[i] = map[kids[i]];
    const auto steps = AverageLinkage(m, std::move(condensed));
    double prev = h0;
    for (int32_t j = 1; j <= m - 1; ++j) {
      const auto [a, b] = steps[j - 1];
      double h = j == m - 1 ? top : h0 + (top - h0) * j / (m - 1.0);
      h = std::max(std::min(h, top), prev);
      prev = h;
      merges.push_back(Merge{slot_node[a], slot_node[b], h});
      slot_node[a] = num_leaves + static_cast<int32_t>(merges.size()) - 1;
    }
    map[v] = slot_node[steps.back().first];
  }
  if (options.separate_tied_heights) SeparateTies(&merges);
  absl::StatusOr<Hierarchy> out = Hierarchy::FromMerges(num_leaves, merges);
  if (!out.ok()) {
    return absl::InternalError(absl::StrCat("refined tree is invalid: ", out.status().message()));
  }
  if (absl::Status s = out->SetLeafNames(tree.leaf_names()); !s.ok()) return s;
  if (!tree.point_leaf().empty()) {
    if (absl::Status s = out->SetPointLeaf(tree.point_leaf()); !s.ok()) return s;
  }
  out->mutable_metadata() = tree.metadata();
  out->mutable_metadata()["refined"] = RuleText(options);
  if (node_map != nullptr) *node_map = std::move(map);
  return out;
}

absl::Status BadDistance(int32_t a, int32_t b, double v) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "distance between nodes %d and %d is %.17g; distances must be finite and >= 0", a, b, v));
}

}  // namespace

absl::StatusOr<Hierarchy> RefineToBinary(const Hierarchy& tree, const NodeDistance& distance,
                                         const RefineOptions& options,
                                         std::vector<int32_t>* node_map) {
  if (!distance) return absl::InvalidArgumentError("RefineToBinary: no distance function");
  BlockDistance block = [&](absl::Span<const int32_t> kids,
                            std::vector<double>* out) -> absl::Status {
    const int64_t m = static_cast<int64_t>(kids.size());
    size_t e = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = i + 1; j < m; ++j) {
        const double v = distance(kids[i], kids[j]);
        if (!(v >= 0.0) || !std::isfinite(v)) return BadDistance(kids[i], kids[j], v);
        (*out)[e++] = v;
      }
    }
    return absl::OkStatus();
  };
  return Refine(tree, block, options, node_map);
}

absl::StatusOr<Hierarchy> RefineToBinary(const Hierarchy& tree, absl::Span<const double> features,
                                         int64_t dim, RefineMetric metric,
                                         const RefineOptions& options,
                                         std::vector<int32_t>* node_map) {
  if (dim < 1 || features.size() != static_cast<size_t>(tree.num_nodes()) * dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RefineToBinary: features must be %d nodes x %d values, got %d values", tree.num_nodes(),
        dim, features.size()));
  }
  BlockDistance block = [&](absl::Span<const int32_t> kids,
                            std::vector<double>* out) -> absl::Status {
    const int64_t m = static_cast<int64_t>(kids.size());
    RowMat x(m, dim);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < dim; ++c) {
        const double v = features[static_cast<size_t>(kids[i]) * dim + c];
        if (!std::isfinite(v)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "RefineToBinary: feature %d of node %d is %g (must be finite)", c, kids[i], v));
        }
        x(i, c) = v;
      }
    }
    const Eigen::VectorXd sq = x.rowwise().squaredNorm();
    // Rows in blocks: a block's Gram products are one GEMM.
    constexpr int64_t kBlock = 256;
    const Condensed at(m);
    RowMat gram;
    for (int64_t r0 = 0; r0 < m; r0 += kBlock) {
      const int64_t rn = std::min(kBlock, m - r0);
      gram.noalias() = x.middleRows(r0, rn) * x.transpose();
      for (int64_t i = r0; i < r0 + rn; ++i) {
        for (int64_t j = i + 1; j < m; ++j) {
          double v = std::max(sq[i] + sq[j] - 2.0 * gram(i - r0, j), 0.0);
          if (metric == RefineMetric::kEuclidean) v = std::sqrt(v);
          if (!std::isfinite(v)) return BadDistance(kids[i], kids[j], v);
          (*out)[at.Index(i, j)] = v;
        }
      }
    }
    return absl::OkStatus();
  };
  return Refine(tree, block, options, node_map);
}

absl::StatusOr<Hierarchy> SeparateTiedHeights(const Hierarchy& tree) {
  if (!tree.is_binary()) {
    return absl::InvalidArgumentError("SeparateTiedHeights needs a binary tree");
  }
  std::vector<Merge> merges = tree.ToMerges();
  SeparateTies(&merges);
  absl::StatusOr<Hierarchy> out = Hierarchy::FromMerges(tree.num_leaves(), merges);
  if (!out.ok()) return out.status();
  if (absl::Status s = out->SetLeafNames(tree.leaf_names()); !s.ok()) return s;
  if (!tree.point_leaf().empty()) {
    if (absl::Status s = out->SetPointLeaf(tree.point_leaf()); !s.ok()) return s;
  }
  out->mutable_metadata() = tree.metadata();
  return out;
}

}  // namespace dendro
