#include "core/diff/diff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/diff/tanglegram.h"
#include "core/metrics/metrics.h"
#include "nlohmann/json.hpp"

namespace dendro {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// O(1) lowest common ancestors and subtree tests on one tree: an Euler tour
// with a sparse table of its shallowest entries (O(N log N) to build).
class LcaIndex {
 public:
  explicit LcaIndex(const Hierarchy& h) : h_(h) {
    const int32_t n = h.num_nodes();
    first_.assign(n, -1);
    last_.assign(n, -1);
    tour_.reserve(2 * n);
    // Iterative DFS; each stack entry is (node, next child index).
    std::vector<std::pair<int32_t, size_t>> stack = {{h.root(), 0}};
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      if (next == 0) first_[v] = static_cast<int32_t>(tour_.size());
      tour_.push_back(v);
      last_[v] = static_cast<int32_t>(tour_.size()) - 1;
      auto kids = h.children(v);
      if (next < kids.size()) {
        const int32_t child = kids[next++];
        stack.push_back({child, 0});
      } else {
        stack.pop_back();
      }
    }
    const size_t m = tour_.size();
    log2_.assign(m + 1, 0);
    for (size_t i = 2; i <= m; ++i) log2_[i] = log2_[i / 2] + 1;
    table_.push_back(tour_);
    for (int j = 1; (size_t{1} << j) <= m; ++j) {
      const std::vector<int32_t>& prev = table_.back();
      std::vector<int32_t> row(m - (size_t{1} << j) + 1);
      for (size_t i = 0; i < row.size(); ++i) {
        row[i] = Shallower(prev[i], prev[i + (size_t{1} << (j - 1))]);
      }
      table_.push_back(std::move(row));
    }
  }

  int32_t Lca(int32_t u, int32_t v) const {
    int32_t l = first_[u], r = first_[v];
    if (l > r) std::swap(l, r);
    const int j = log2_[r - l + 1];
    return Shallower(table_[j][l], table_[j][r - (1 << j) + 1]);
  }
  // Whether u is v or below v.
  bool InSubtree(int32_t u, int32_t v) const {
    return first_[v] <= first_[u] && first_[u] <= last_[v];
  }

 private:
  int32_t Shallower(int32_t a, int32_t b) const { return h_.depth(a) <= h_.depth(b) ? a : b; }

  const Hierarchy& h_;
  std::vector<int32_t> first_, last_, tour_;
  std::vector<int> log2_;
  std::vector<std::vector<int32_t>> table_;
};

// Leaves in depth-first order and each node's range in that order.
struct LeafRanges {
  std::vector<int32_t> order;
  std::vector<int32_t> begin, end;  // node v spans order[begin[v], end[v])
};

LeafRanges ComputeLeafRanges(const Hierarchy& h) {
  LeafRanges r;
  r.begin.assign(h.num_nodes(), 0);
  r.end.assign(h.num_nodes(), 0);
  std::vector<std::pair<int32_t, size_t>> stack = {{h.root(), 0}};
  while (!stack.empty()) {
    auto& [v, next] = stack.back();
    if (next == 0) r.begin[v] = static_cast<int32_t>(r.order.size());
    if (h.is_leaf(v)) r.order.push_back(v);
    auto kids = h.children(v);
    if (next < kids.size()) {
      const int32_t child = kids[next++];
      stack.push_back({child, 0});
    } else {
      r.end[v] = static_cast<int32_t>(r.order.size());
      stack.pop_back();
    }
  }
  return r;
}

// Deterministic 64-bit generator (splitmix64), the same on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Pearson correlation accumulated one pair at a time (Welford's updates,
// stable for long runs of similar values).
class Pearson {
 public:
  void Add(double x, double y) {
    ++n_;
    const double dx = x - mx_;
    mx_ += dx / static_cast<double>(n_);
    const double dy = y - my_;
    my_ += dy / static_cast<double>(n_);
    sxx_ += dx * (x - mx_);
    syy_ += dy * (y - my_);
    sxy_ += dx * (y - my_);
  }
  int64_t count() const { return n_; }
  double Value() const {
    if (n_ < 2 || sxx_ <= 0 || syy_ <= 0) return kNaN;
    return std::clamp(sxy_ / std::sqrt(sxx_ * syy_), -1.0, 1.0);
  }

 private:
  int64_t n_ = 0;
  double mx_ = 0, my_ = 0, sxx_ = 0, syy_ = 0, sxy_ = 0;
};

std::vector<int32_t> CommonLevels(const Hierarchy& a, const Hierarchy& b, int32_t lo, int32_t hi) {
  std::vector<int32_t> la = a.ReachableLevels(), lb = b.ReachableLevels(), out;
  std::set_intersection(la.begin(), la.end(), lb.begin(), lb.end(), std::back_inserter(out));
  out.erase(std::remove_if(out.begin(), out.end(), [&](int32_t k) { return k < lo || k > hi; }),
            out.end());
  return out;
}

// At most kMaxAriLevels of `levels`, evenly spaced, first and last kept.
std::vector<int32_t> ThinLevels(const std::vector<int32_t>& levels) {
  if (levels.size() <= static_cast<size_t>(kMaxAriLevels)) return levels;
  std::vector<int32_t> out;
  const size_t m = levels.size();
  for (int32_t t = 0; t < kMaxAriLevels; ++t) {
    const size_t i =
        static_cast<size_t>(std::llround(static_cast<double>(t) * (m - 1) / (kMaxAriLevels - 1)));
    if (out.empty() || out.back() != levels[i]) out.push_back(levels[i]);
  }
  return out;
}

// ARI of the cuts of `a` and `b` at every common level in [lo, hi], each
// labelling items through its own map (item -> leaf).
absl::StatusOr<AriSeries> AriAtEveryLevel(const Hierarchy& a, const Hierarchy& b,
                                          absl::Span<const int32_t> item_leaf_a,
                                          absl::Span<const int32_t> item_leaf_b, int32_t lo,
                                          int32_t hi) {
  AriSeries s;
  const std::vector<int32_t> all = CommonLevels(a, b, lo, hi);
  s.levels_total = static_cast<int32_t>(all.size());
  std::vector<int64_t> la(item_leaf_a.size()), lb(item_leaf_b.size());
  for (int32_t k : ThinLevels(all)) {
    DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> cut_a, a.CutToK(k));
    DENDRO_ASSIGN_OR_RETURN(std::vector<int32_t> cut_b, b.CutToK(k));
    for (size_t i = 0; i < la.size(); ++i) la[i] = cut_a[item_leaf_a[i]];
    for (size_t i = 0; i < lb.size(); ++i) lb[i] = cut_b[item_leaf_b[i]];
    DENDRO_ASSIGN_OR_RETURN(double ari, AdjustedRandIndex(la, lb));
    s.levels.push_back({k, ari});
  }
  if (s.levels.empty()) {
    s.mean = s.min = kNaN;
  } else {
    double sum = 0;
    s.min = s.levels[0].ari;
    for (const AriLevel& l : s.levels) {
      sum += l.ari;
      s.min = std::min(s.min, l.ari);
    }
    s.mean = sum / static_cast<double>(s.levels.size());
  }
  return s;
}

// One restricted tree with what the event classification needs.
struct Side {
  const Hierarchy* full = nullptr;
  RestrictedTree r;
  LeafRanges ranges;
  std::vector<int64_t> points;  // per restricted node; empty without point_leaf
};

absl::StatusOr<Side> MakeSide(const Hierarchy& full, const std::vector<int32_t>& keep) {
  DENDRO_ASSIGN_OR_RETURN(RestrictedTree r, RestrictToLeaves(full, keep));
  LeafRanges ranges = ComputeLeafRanges(r.tree);
  std::vector<int64_t> points;
  if (!full.point_leaf().empty()) {
    std::vector<int64_t> per_leaf(full.num_leaves(), 0);
    for (int32_t l : full.point_leaf()) ++per_leaf[l];
    const Hierarchy& t = r.tree;
    points.assign(t.num_nodes(), 0);
    for (int32_t i = 0; i < t.num_leaves(); ++i) points[i] = per_leaf[keep[i]];
    for (int32_t v = t.num_leaves(); v < t.num_nodes(); ++v) {
      for (int32_t c : t.children(v)) points[v] += points[c];
    }
  }
  return Side{&full, std::move(r), std::move(ranges), std::move(points)};
}

bool IsCluster(const Hierarchy& t, int32_t v) { return !t.is_leaf(v) && v != t.root(); }

// anchor[v] for every node v of `from`: the LCA, in the tree `to_lca`
// indexes, of v's leaves (both trees number the shared leaves alike).
std::vector<int32_t> Anchors(const Hierarchy& from, const LcaIndex& to_lca) {
  std::vector<int32_t> anchor(from.num_nodes());
  for (int32_t v = 0; v < from.num_nodes(); ++v) {
    if (from.is_leaf(v)) {
      anchor[v] = v;
      continue;
    }
    auto kids = from.children(v);
    int32_t a = anchor[kids[0]];
    for (size_t i = 1; i < kids.size(); ++i) a = to_lca.Lca(a, anchor[kids[i]]);
    anchor[v] = a;
  }
  return anchor;
}

// match[v]: the node of `to` with the same leaf set as node v of `from`, or
// -1. Exact: v's leaves all lie below anchor[v], so equal sizes mean equal
// sets.
std::vector<int32_t> Matches(const Hierarchy& from, const Hierarchy& to,
                             const std::vector<int32_t>& anchor) {
  std::vector<int32_t> match(from.num_nodes(), -1);
  for (int32_t v = 0; v < from.num_nodes(); ++v) {
    if (to.leaf_count(anchor[v]) == from.leaf_count(v)) match[v] = anchor[v];
  }
  return match;
}

// For every cluster X of `self`: how many maximal clusters of `other` are
// proper subsets of X, and how many leaves they hold together. A cluster Y
// of `other` is such a part of X exactly when X lies on the path from
// anchor[Y] up to, but excluding, anchor[parent(Y)] (its parent's anchor is
// an ancestor of its own); adding Y at the first and removing it at the
// second, then summing over subtrees, counts it on that path alone.
void PartTotals(const Hierarchy& self, const Hierarchy& other,
                const std::vector<int32_t>& anchor_in_self, std::vector<int32_t>* count,
                std::vector<int64_t>* leaves) {
  count->assign(self.num_nodes(), 0);
  leaves->assign(self.num_nodes(), 0);
  for (int32_t y = other.num_leaves(); y < other.num_nodes(); ++y) {
    if (!IsCluster(other, y)) continue;
    const int32_t from = anchor_in_self[y], to = anchor_in_self[other.parent(y)];
    (*count)[from] += 1;
    (*leaves)[from] += other.leaf_count(y);
    (*count)[to] -= 1;
    (*leaves)[to] -= other.leaf_count(y);
  }
  for (int32_t v = 0; v < self.num_nodes(); ++v) {
    const int32_t p = self.parent(v);
    if (p < 0) continue;
    (*count)[p] += (*count)[v];
    (*leaves)[p] += (*leaves)[v];
  }
}

// Clusters of `other` that are parts of X (see PartTotals), largest first.
std::vector<ClusterEvent::Part> PartsOf(int32_t x, const Side& other,
                                        const std::vector<int32_t>& anchor_in_self,
                                        const LcaIndex& self_lca) {
  std::vector<ClusterEvent::Part> parts;
  const Hierarchy& o = other.r.tree;
  for (int32_t y = o.num_leaves(); y < o.num_nodes(); ++y) {
    if (!IsCluster(o, y)) continue;
    if (self_lca.InSubtree(anchor_in_self[y], x) &&
        !self_lca.InSubtree(anchor_in_self[o.parent(y)], x)) {
      parts.push_back({other.r.original[y], o.leaf_count(y)});
    }
  }
  std::sort(parts.begin(), parts.end(), [](const auto& p, const auto& q) {
    return p.leaves != q.leaves ? p.leaves > q.leaves : p.node < q.node;
  });
  return parts;
}

// Best Jaccard match of cluster x of `self` among the clusters of `other`:
// its leaves are marked and intersections summed up `other` in one pass.
void BestJaccard(int32_t x, const Side& self, const Side& other, std::vector<int32_t>* scratch,
                 ClusterEvent* event) {
  const Hierarchy& s = self.r.tree;
  const Hierarchy& o = other.r.tree;
  std::vector<int32_t>& inter = *scratch;
  inter.assign(o.num_nodes(), 0);
  for (int32_t i = self.ranges.begin[x]; i < self.ranges.end[x]; ++i) {
    inter[self.ranges.order[i]] = 1;
  }
  const double size_x = s.leaf_count(x);
  int32_t best = -1;
  double best_j = 0;
  for (int32_t v = 0; v < o.num_nodes(); ++v) {
    const int32_t p = o.parent(v);
    if (p >= 0) inter[p] += inter[v];
    if (!IsCluster(o, v) || inter[v] == 0) continue;
    const double j = inter[v] / (size_x + o.leaf_count(v) - inter[v]);
    const bool better =
        best < 0 || j > best_j ||
        (j == best_j &&
         (o.leaf_count(v) < o.leaf_count(best) ||
          (o.leaf_count(v) == o.leaf_count(best) && other.r.original[v] < other.r.original[best])));
    if (better) {
      best = v;
      best_j = j;
    }
  }
  if (best >= 0) {
    event->best_match = other.r.original[best];
    event->best_jaccard = best_j;
  }
}

std::vector<std::string> ExampleLeaves(const Side& side, int32_t v) {
  std::vector<std::string> out;
  const Hierarchy& t = side.r.tree;
  for (int32_t i = side.ranges.begin[v];
       i < side.ranges.end[v] && static_cast<int>(out.size()) < kEventExampleLeaves; ++i) {
    const int32_t leaf = side.ranges.order[i];
    out.push_back(t.leaf_names().empty() ? absl::StrCat(side.r.original[leaf])
                                         : t.leaf_names()[leaf]);
  }
  return out;
}

int64_t PointsOf(const Side& side, int32_t v) { return side.points.empty() ? -1 : side.points[v]; }

void ClassifyEvents(const Side& a, const Side& b, DiffReport* report) {
  const Hierarchy& ta = a.r.tree;
  const Hierarchy& tb = b.r.tree;
  const LcaIndex lca_a(ta), lca_b(tb);
  const std::vector<int32_t> anchor_in_a = Anchors(tb, lca_a);  // per node of B
  const std::vector<int32_t> anchor_in_b = Anchors(ta, lca_b);  // per node of A
  std::vector<int32_t> match_ab = Matches(ta, tb, anchor_in_b);
  std::vector<int32_t> match_ba = Matches(tb, ta, anchor_in_a);
  match_ab[ta.root()] = tb.root();
  match_ba[tb.root()] = ta.root();

  std::vector<int32_t> parts_in_a, parts_in_b;  // counts
  std::vector<int64_t> part_leaves_in_a, part_leaves_in_b;
  PartTotals(ta, tb, anchor_in_a, &parts_in_a, &part_leaves_in_a);
  PartTotals(tb, ta, anchor_in_b, &parts_in_b, &part_leaves_in_b);

  report->jaccard_matched = report->shared_leaves <= kMaxJaccardLeaves;
  std::vector<int32_t> scratch;
  int32_t shared = 0;
  for (int32_t x = ta.num_leaves(); x < ta.num_nodes(); ++x) {
    if (!IsCluster(ta, x)) continue;
    ClusterEvent e;
    e.a_node = a.r.original[x];
    e.leaves = ta.leaf_count(x);
    e.a_points = PointsOf(a, x);
    e.example_leaves = ExampleLeaves(a, x);
    const int32_t y = match_ab[x];
    if (y >= 0) {
      ++shared;
      e.b_node = b.r.original[y];
      e.b_points = PointsOf(b, y);
      e.type = match_ab[ta.parent(x)] == tb.parent(y) ? ClusterEvent::Type::kStayed
                                                      : ClusterEvent::Type::kMoved;
      e.best_match = e.b_node;
      e.best_jaccard = 1.0;
    } else {
      const bool split = parts_in_a[x] >= 2 && part_leaves_in_a[x] == ta.leaf_count(x);
      e.type = split ? ClusterEvent::Type::kSplit : ClusterEvent::Type::kGone;
      if (split) e.parts = PartsOf(x, b, anchor_in_a, lca_a);
      if (report->jaccard_matched) BestJaccard(x, a, b, &scratch, &e);
    }
    report->events.push_back(std::move(e));
  }
  for (int32_t y = tb.num_leaves(); y < tb.num_nodes(); ++y) {
    if (!IsCluster(tb, y) || match_ba[y] >= 0) continue;
    ClusterEvent e;
    e.b_node = b.r.original[y];
    e.leaves = tb.leaf_count(y);
    e.b_points = PointsOf(b, y);
    e.example_leaves = ExampleLeaves(b, y);
    const bool merged = parts_in_b[y] >= 2 && part_leaves_in_b[y] == tb.leaf_count(y);
    e.type = merged ? ClusterEvent::Type::kMerged : ClusterEvent::Type::kNew;
    if (merged) e.parts = PartsOf(y, a, anchor_in_b, lca_b);
    if (report->jaccard_matched) BestJaccard(y, b, a, &scratch, &e);
    report->events.push_back(std::move(e));
  }
  for (const ClusterEvent& e : report->events) ++report->event_counts[static_cast<int>(e.type)];
  report->a_clusters = std::max(0, ta.num_internal() - 1);
  report->b_clusters = std::max(0, tb.num_internal() - 1);
  report->shared_clusters = shared;
  report->rf = report->a_clusters + report->b_clusters - 2 * shared;
  const int32_t total = report->a_clusters + report->b_clusters;
  report->rf_normalized = total == 0 ? 0.0 : static_cast<double>(report->rf) / total;
}

void CopheneticCorrelation(const Hierarchy& ta, const Hierarchy& tb, DiffReport* report) {
  const LcaIndex lca_a(ta), lca_b(tb);
  const int32_t n = ta.num_leaves();
  Pearson p;
  auto add = [&](int32_t i, int32_t j) {
    p.Add(ta.height(lca_a.Lca(i, j)), tb.height(lca_b.Lca(i, j)));
  };
  if (n <= kMaxExactCopheneticLeaves) {
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t j = i + 1; j < n; ++j) add(i, j);
    }
  } else {
    report->cophenetic_sampled = true;
    SplitMix64 rng(0x64656e64726f);  // fixed: the same pairs every run
    for (int64_t t = 0; t < kCopheneticSamplePairs; ++t) {
      const int32_t i = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(n));
      int32_t j = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(n - 1));
      if (j >= i) ++j;
      add(i, j);
    }
  }
  report->cophenetic_pairs = p.count();
  report->cophenetic_correlation = p.Value();
}

}  // namespace

const char* ClusterEventName(ClusterEvent::Type type) {
  switch (type) {
    case ClusterEvent::Type::kStayed:
      return "stayed";
    case ClusterEvent::Type::kMoved:
      return "moved";
    case ClusterEvent::Type::kSplit:
      return "split";
    case ClusterEvent::Type::kMerged:
      return "merged";
    case ClusterEvent::Type::kNew:
      return "new";
    case ClusterEvent::Type::kGone:
      return "gone";
  }
  return "?";
}

absl::StatusOr<LeafMatching> MatchLeaves(const Hierarchy& a, const Hierarchy& b) {
  LeafMatching m;
  if (!a.leaf_names().empty() && !b.leaf_names().empty()) {
    m.by = LeafMatching::By::kName;
    absl::flat_hash_map<std::string, int32_t> b_index;
    for (int32_t i = 0; i < b.num_leaves(); ++i) {
      if (!b_index.emplace(b.leaf_names()[i], i).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tree B names two leaves '", b.leaf_names()[i], "': leaves are matched by name"));
      }
    }
    absl::flat_hash_map<std::string, int32_t> a_index;
    for (int32_t i = 0; i < a.num_leaves(); ++i) {
      if (!a_index.emplace(a.leaf_names()[i], i).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tree A names two leaves '", a.leaf_names()[i], "': leaves are matched by name"));
      }
      auto it = b_index.find(a.leaf_names()[i]);
      if (it == b_index.end()) continue;
      m.a_leaf.push_back(i);
      m.b_leaf.push_back(it->second);
    }
  } else {
    m.by = LeafMatching::By::kId;
    const int32_t n = std::min(a.num_leaves(), b.num_leaves());
    m.a_leaf.resize(n);
    std::iota(m.a_leaf.begin(), m.a_leaf.end(), 0);
    m.b_leaf = m.a_leaf;
  }
  const int32_t n = static_cast<int32_t>(m.a_leaf.size());
  m.only_in_a = a.num_leaves() - n;
  m.only_in_b = b.num_leaves() - n;
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the trees share %d leaves (matched by %s); a comparison needs at least 2",
                        n, m.by == LeafMatching::By::kName ? "name" : "id"));
  }
  return m;
}

absl::StatusOr<RestrictedTree> RestrictToLeaves(const Hierarchy& tree,
                                                const std::vector<int32_t>& keep) {
  if (keep.empty()) return absl::InvalidArgumentError("no leaves to keep");
  const int32_t nn = tree.num_nodes();
  // index[v]: the new id of v, or -1 while v is not (yet) kept.
  std::vector<int32_t> index(nn, -1);
  for (size_t i = 0; i < keep.size(); ++i) {
    const int32_t leaf = keep[i];
    if (leaf < 0 || leaf >= tree.num_leaves()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("leaf %d is outside [0, %d)", leaf, tree.num_leaves()));
    }
    if (index[leaf] >= 0) return absl::InvalidArgumentError(absl::StrCat("leaf ", leaf, " twice"));
    index[leaf] = static_cast<int32_t>(i);
  }
  // rep[v]: the kept node that stands for v's restricted subtree (-1: none).
  std::vector<int32_t> rep(nn, -1);
  for (int32_t v = 0; v < tree.num_leaves(); ++v) rep[v] = index[v] >= 0 ? v : -1;
  std::vector<int32_t> original(keep.begin(), keep.end());
  for (int32_t v = tree.num_leaves(); v < nn; ++v) {
    int32_t nonempty = 0, only = -1;
    for (int32_t c : tree.children(v)) {
      if (rep[c] >= 0) {
        ++nonempty;
        only = rep[c];
      }
    }
    if (nonempty >= 2) {
      index[v] = static_cast<int32_t>(original.size());
      original.push_back(v);
      rep[v] = v;
    } else {
      rep[v] = only;  // contracted (one child left) or removed (-1)
    }
  }
  const int32_t kept = static_cast<int32_t>(original.size());
  std::vector<int32_t> parent(kept, -1);
  std::vector<double> height(kept, 0.0);
  for (int32_t v = tree.num_leaves(); v < nn; ++v) {
    if (index[v] < 0 || rep[v] != v) continue;
    height[index[v]] = tree.height(v);
    for (int32_t c : tree.children(v)) {
      if (rep[c] >= 0) parent[index[rep[c]]] = index[v];
    }
  }
  std::vector<int32_t> old_to_new;
  DENDRO_ASSIGN_OR_RETURN(
      Hierarchy restricted,
      Hierarchy::FromParents(static_cast<int32_t>(keep.size()), parent, height, &old_to_new));
  RestrictedTree out{std::move(restricted), std::vector<int32_t>(kept)};
  for (int32_t i = 0; i < kept; ++i) out.original[old_to_new[i]] = original[i];
  if (!tree.leaf_names().empty()) {
    std::vector<std::string> names;
    names.reserve(keep.size());
    for (int32_t leaf : keep) names.push_back(tree.leaf_names()[leaf]);
    DENDRO_RETURN_IF_ERROR(out.tree.SetLeafNames(std::move(names)));
  }
  return out;
}

absl::StatusOr<DiffReport> DiffHierarchies(const Hierarchy& a, const Hierarchy& b) {
  DiffReport report;
  DENDRO_ASSIGN_OR_RETURN(report.matching, MatchLeaves(a, b));
  report.a_leaves = a.num_leaves();
  report.b_leaves = b.num_leaves();
  const int32_t n = static_cast<int32_t>(report.matching.a_leaf.size());
  report.shared_leaves = n;
  DENDRO_ASSIGN_OR_RETURN(Side side_a, MakeSide(a, report.matching.a_leaf));
  DENDRO_ASSIGN_OR_RETURN(Side side_b, MakeSide(b, report.matching.b_leaf));

  ClassifyEvents(side_a, side_b, &report);
  CopheneticCorrelation(side_a.r.tree, side_b.r.tree, &report);

  std::vector<int32_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  DENDRO_ASSIGN_OR_RETURN(report.ari_leaves, AriAtEveryLevel(side_a.r.tree, side_b.r.tree, identity,
                                                             identity, 2, n - 1));
  report.ari_basis = "leaves";
  report.ari_mean = report.ari_leaves.mean;
  report.ari_min = report.ari_leaves.min;
  if (!a.point_leaf().empty() && a.point_leaf().size() == b.point_leaf().size()) {
    report.has_point_ari = true;
    report.points = static_cast<int64_t>(a.point_leaf().size());
    DENDRO_ASSIGN_OR_RETURN(report.ari_points,
                            AriAtEveryLevel(a, b, a.point_leaf(), b.point_leaf(), 2,
                                            std::min(a.num_leaves(), b.num_leaves())));
    report.ari_basis = "points";
    report.ari_mean = report.ari_points.mean;
    report.ari_min = report.ari_points.min;
  }

  DENDRO_ASSIGN_OR_RETURN(TanglegramLayout layout, LayoutTanglegram(a, b, report.matching));
  report.crossings_before = layout.crossings_before;
  report.crossings_after = layout.crossings_after;
  report.crossing_sweeps = layout.sweeps;
  report.order_a = std::move(layout.order_a);
  report.order_b = std::move(layout.order_b);
  return report;
}

std::vector<size_t> EventsBySize(const DiffReport& report) {
  std::vector<size_t> idx(report.events.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t i, size_t j) {
    const ClusterEvent& p = report.events[i];
    const ClusterEvent& q = report.events[j];
    const bool ps = p.type == ClusterEvent::Type::kStayed;
    const bool qs = q.type == ClusterEvent::Type::kStayed;
    if (ps != qs) return !ps;
    if (p.leaves != q.leaves) return p.leaves > q.leaves;
    if (p.type != q.type) return p.type < q.type;
    if (p.a_node != q.a_node) return p.a_node < q.a_node;
    return p.b_node < q.b_node;
  });
  return idx;
}

namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson NodeOrNull(int32_t node) { return node < 0 ? OrderedJson(nullptr) : OrderedJson(node); }
OrderedJson CountOrNull(int64_t c) { return c < 0 ? OrderedJson(nullptr) : OrderedJson(c); }

OrderedJson SeriesJson(const AriSeries& s) {
  OrderedJson j;
  j["mean"] = s.mean;  // NaN dumps as null
  j["min"] = s.min;
  j["levels_total"] = s.levels_total;
  j["levels_evaluated"] = s.levels.size();
  OrderedJson levels = OrderedJson::array();
  for (const AriLevel& l : s.levels) levels.push_back({{"k", l.k}, {"ari", l.ari}});
  j["levels"] = std::move(levels);
  return j;
}

}  // namespace

std::string DiffReportJson(const DiffReport& r) {
  OrderedJson j;
  j["format"] = "dendro.diff";
  j["version"] = 1;
  j["matching"] = r.matching.by == LeafMatching::By::kName ? "names" : "ids";
  j["a"] = {
      {"leaves", r.a_leaves}, {"only_here", r.matching.only_in_a}, {"clusters", r.a_clusters}};
  j["b"] = {
      {"leaves", r.b_leaves}, {"only_here", r.matching.only_in_b}, {"clusters", r.b_clusters}};
  j["shared_leaves"] = r.shared_leaves;
  j["robinson_foulds"] = {
      {"distance", r.rf}, {"normalized", r.rf_normalized}, {"shared_clusters", r.shared_clusters}};
  j["cophenetic_correlation"] = {{"value", r.cophenetic_correlation},
                                 {"pairs", r.cophenetic_pairs},
                                 {"sampled", r.cophenetic_sampled}};
  OrderedJson ari;
  ari["basis"] = r.ari_basis;
  ari["mean"] = r.ari_mean;
  ari["min"] = r.ari_min;
  ari["leaves"] = SeriesJson(r.ari_leaves);
  if (r.has_point_ari) {
    ari["points"] = SeriesJson(r.ari_points);
    ari["points"]["count"] = r.points;
  }
  j["ari"] = std::move(ari);
  OrderedJson counts;
  for (int t = 0; t < 6; ++t) {
    counts[ClusterEventName(static_cast<ClusterEvent::Type>(t))] = r.event_counts[t];
  }
  OrderedJson events = OrderedJson::array();
  for (size_t i : EventsBySize(r)) {
    const ClusterEvent& e = r.events[i];
    OrderedJson ej;
    ej["type"] = ClusterEventName(e.type);
    ej["a_node"] = NodeOrNull(e.a_node);
    ej["b_node"] = NodeOrNull(e.b_node);
    ej["leaves"] = e.leaves;
    ej["a_points"] = CountOrNull(e.a_points);
    ej["b_points"] = CountOrNull(e.b_points);
    OrderedJson parts = OrderedJson::array();
    for (const ClusterEvent::Part& p : e.parts) {
      parts.push_back({{"node", p.node}, {"leaves", p.leaves}});
    }
    ej["parts"] = std::move(parts);
    ej["best_match"] = NodeOrNull(e.best_match);
    ej["best_jaccard"] = e.best_match < 0 ? OrderedJson(nullptr) : OrderedJson(e.best_jaccard);
    ej["example_leaves"] = e.example_leaves;
    events.push_back(std::move(ej));
  }
  j["events"] = {{"counts", std::move(counts)},
                 {"jaccard_matched", r.jaccard_matched},
                 {"list", std::move(events)}};
  j["tanglegram"] = {{"crossings_before", r.crossings_before},
                     {"crossings_after", r.crossings_after},
                     {"sweeps", r.crossing_sweeps}};
  // As export.cc dumps: never throws on invalid UTF-8 in a name.
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace dendro
