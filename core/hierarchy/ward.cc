#include "core/hierarchy/ward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dendro {
namespace {

// The groups still open, by slot: a merge keeps the lower slot of the two.
class WardGroups {
 public:
  WardGroups(absl::Span<const double> sizes, absl::Span<const double> means, int64_t dim)
      : dim_(dim), size_(sizes.begin(), sizes.end()), mean_(means.begin(), means.end()) {}

  double Delta(int32_t a, int32_t b) const {
    const double* x = &mean_[static_cast<size_t>(a) * dim_];
    const double* y = &mean_[static_cast<size_t>(b) * dim_];
    double sq = 0.0;
    for (int64_t c = 0; c < dim_; ++c) sq += (x[c] - y[c]) * (x[c] - y[c]);
    return size_[a] * size_[b] / (size_[a] + size_[b]) * sq;
  }

  // b joins a.
  void Join(int32_t a, int32_t b) {
    double* x = &mean_[static_cast<size_t>(a) * dim_];
    const double* y = &mean_[static_cast<size_t>(b) * dim_];
    const double total = size_[a] + size_[b];
    for (int64_t c = 0; c < dim_; ++c) x[c] = (size_[a] * x[c] + size_[b] * y[c]) / total;
    size_[a] = total;
  }

 private:
  int64_t dim_;
  std::vector<double> size_;
  std::vector<double> mean_;
};

struct SlotMerge {
  int32_t a, b;  // slots, a < b
  double delta;
};

// The L - 1 merges of the nearest-neighbour chain, in the order found.
std::vector<SlotMerge> ChainMerges(WardGroups& groups, int32_t num_leaves) {
  std::vector<int32_t> open(num_leaves);
  std::iota(open.begin(), open.end(), 0);
  std::vector<int32_t> chain;
  std::vector<SlotMerge> merges;
  merges.reserve(num_leaves - 1);
  while (open.size() > 1) {
    if (chain.empty()) chain.push_back(open.front());
    const int32_t a = chain.back();
    // The previous element wins ties, so the chain ends in a reciprocal pair.
    int32_t best = chain.size() > 1 ? chain[chain.size() - 2] : -1;
    double best_delta = best >= 0 ? groups.Delta(a, best) : 0.0;
    for (int32_t b : open) {
      if (b == a) continue;
      const double d = groups.Delta(a, b);
      if (best < 0 || d < best_delta) {
        best = b;
        best_delta = d;
      }
    }
    if (chain.size() > 1 && best == chain[chain.size() - 2]) {
      chain.pop_back();
      chain.pop_back();
      const int32_t lo = std::min(a, best), hi = std::max(a, best);
      merges.push_back({lo, hi, best_delta});
      groups.Join(lo, hi);
      open.erase(std::lower_bound(open.begin(), open.end(), hi));
    } else {
      chain.push_back(best);
    }
  }
  return merges;
}

}  // namespace

absl::StatusOr<Hierarchy> WardTree(absl::Span<const double> sizes, absl::Span<const double> means,
                                   int64_t dim) {
  const int64_t n = static_cast<int64_t>(sizes.size());
  if (n < 1 || dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ward's tree needs at least one group and one dimension, got ", n, " and ", dim));
  }
  if (n > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("too many groups for Ward's tree: ", n));
  }
  if (static_cast<int64_t>(means.size()) != n * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Ward's tree: expected ", n, " x ", dim, " mean values, got ", means.size()));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!(sizes[i] > 0.0) || !std::isfinite(sizes[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Ward's tree: group ", i, " has size ", sizes[i]));
    }
  }
  for (size_t i = 0; i < means.size(); ++i) {
    if (!std::isfinite(means[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Ward's tree: group ", i / dim, " has a non-finite mean"));
    }
  }
  const int32_t num_leaves = static_cast<int32_t>(n);
  WardGroups groups(sizes, means, dim);
  std::vector<SlotMerge> found = ChainMerges(groups, num_leaves);
  // Merge order: by delta, ties by the order found (stable). The merges'
  // slot pairs are the edges of a tree over the slots, so taken in any order
  // each joins two different groups: union-find gives each group's node.
  std::stable_sort(found.begin(), found.end(),
                   [](const SlotMerge& x, const SlotMerge& y) { return x.delta < y.delta; });
  std::vector<int32_t> root(num_leaves), root_node(num_leaves);
  std::iota(root.begin(), root.end(), 0);
  std::iota(root_node.begin(), root_node.end(), 0);
  auto find = [&root](int32_t s) {
    while (root[s] != s) s = root[s] = root[root[s]];
    return s;
  };
  std::vector<double> node_height(2 * static_cast<size_t>(num_leaves) - 1, 0.0);
  std::vector<Merge> merges;
  merges.reserve(found.size());
  for (const SlotMerge& m : found) {
    const int32_t ra = find(m.a), rb = find(m.b);
    const int32_t a = root_node[ra], b = root_node[rb];
    const int32_t node = num_leaves + static_cast<int32_t>(merges.size());
    const double h =
        std::max({std::sqrt(2.0 * std::max(m.delta, 0.0)), node_height[a], node_height[b]});
    node_height[node] = h;
    merges.push_back({a, b, h});
    root[rb] = ra;
    root_node[ra] = node;
  }
  return Hierarchy::FromMerges(num_leaves, merges);
}

}  // namespace dendro
