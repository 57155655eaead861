#include "core/tneb/merge.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace dendro {
namespace {

class UnionFind {
 public:
  explicit UnionFind(int32_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int32_t Find(int32_t v) {
    while (parent_[v] != v) {
      parent_[v] = parent_[parent_[v]];
      v = parent_[v];
    }
    return v;
  }
  // Joins the sets; the smaller root id becomes the root. False if joined.
  bool Union(int32_t a, int32_t b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return false;
    if (b < a) std::swap(a, b);
    parent_[b] = a;
    return true;
  }

 private:
  std::vector<int32_t> parent_;
};

double SquaredDistance(const RowMatrixD& means, int32_t a, int32_t b) {
  return (means.row(a) - means.row(b)).squaredNorm();
}

}  // namespace

std::vector<ComponentPair> NearestComponentPairs(const RowMatrixD& means, int32_t k,
                                                 const std::function<bool()>& cancelled) {
  const int32_t m = static_cast<int32_t>(means.rows());
  k = std::clamp<int32_t>(k, 0, std::max(0, m - 1));
  std::vector<ComponentPair> pairs;
  std::vector<int32_t> order;
  for (int32_t a = 0; a < m; ++a) {
    if (cancelled && cancelled()) break;
    order.clear();
    for (int32_t b = 0; b < m; ++b) {
      if (b != a) order.push_back(b);
    }
    std::vector<double> dist(m);
    for (int32_t b : order) dist[b] = SquaredDistance(means, a, b);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return dist[x] < dist[y]; });
    for (int32_t i = 0; i < k; ++i) {
      const int32_t b = order[i];
      pairs.emplace_back(std::min(a, b), std::max(a, b));
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  return pairs;
}

std::vector<ComponentPair> BridgingPairs(const RowMatrixD& means,
                                         absl::Span<const ComponentPair> pairs,
                                         const std::function<bool()>& cancelled) {
  const int32_t m = static_cast<int32_t>(means.rows());
  UnionFind uf(m);
  for (const auto& [a, b] : pairs) uf.Union(a, b);
  std::vector<int32_t> roots;
  std::vector<int32_t> comp(m);
  for (int32_t v = 0; v < m; ++v) {
    comp[v] = uf.Find(v);
    if (comp[v] == v) roots.push_back(v);
  }
  std::vector<ComponentPair> out;
  if (roots.size() < 2) return out;
  for (size_t i = 0; i < roots.size(); ++i) {
    for (size_t j = i + 1; j < roots.size(); ++j) {
      if (cancelled && cancelled()) return out;
      double best = std::numeric_limits<double>::infinity();
      ComponentPair bp{-1, -1};
      for (int32_t a = 0; a < m; ++a) {
        if (comp[a] != roots[i]) continue;
        for (int32_t b = 0; b < m; ++b) {
          if (comp[b] != roots[j]) continue;
          const double dd = SquaredDistance(means, a, b);
          const ComponentPair cand{std::min(a, b), std::max(a, b)};
          if (dd < best || (dd == best && cand < bp)) {
            best = dd;
            bp = cand;
          }
        }
      }
      out.push_back(bp);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<MergeTree> MaximumSpanningMerges(int32_t num_nodes,
                                                absl::Span<const SimilarityEdge> edges,
                                                double height_offset) {
  if (num_nodes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("merge tree: need >= 1 node, got ", num_nodes));
  }
  double max_sim = -std::numeric_limits<double>::infinity();
  for (const SimilarityEdge& e : edges) {
    if (e.a < 0 || e.b < 0 || e.a >= num_nodes || e.b >= num_nodes || e.a == e.b) {
      return absl::InvalidArgumentError(absl::StrCat("merge tree: edge (", e.a, ", ", e.b,
                                                     ") is not two distinct nodes of [0, ",
                                                     num_nodes, ")"));
    }
    if (!std::isfinite(e.similarity)) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge tree: edge (", e.a, ", ", e.b, ") has similarity ", e.similarity));
    }
    max_sim = std::max(max_sim, e.similarity);
  }
  if (!edges.empty() && !(height_offset >= max_sim)) {
    return absl::InvalidArgumentError(absl::StrCat("merge tree: height offset ", height_offset,
                                                   " is below the largest similarity ", max_sim));
  }
  std::vector<SimilarityEdge> sorted(edges.begin(), edges.end());
  for (SimilarityEdge& e : sorted) {
    if (e.b < e.a) std::swap(e.a, e.b);
  }
  std::sort(sorted.begin(), sorted.end(), [](const SimilarityEdge& x, const SimilarityEdge& y) {
    if (x.similarity != y.similarity) return x.similarity > y.similarity;
    if (x.a != y.a) return x.a < y.a;
    return x.b < y.b;
  });
  UnionFind uf(num_nodes);
  std::vector<int32_t> node_of_root(num_nodes);  // current tree node of each set root
  std::iota(node_of_root.begin(), node_of_root.end(), 0);
  MergeTree out;
  for (const SimilarityEdge& e : sorted) {
    const int32_t ra = uf.Find(e.a);
    const int32_t rb = uf.Find(e.b);
    if (ra == rb) continue;
    int32_t na = node_of_root[ra];
    int32_t nb = node_of_root[rb];
    if (nb < na) std::swap(na, nb);
    const double h = std::max(0.0, height_offset - e.similarity);
    out.merges.push_back(Merge{na, nb, h});
    out.similarity.push_back(e.similarity);
    out.tree_edges.push_back(e);
    uf.Union(ra, rb);
    node_of_root[uf.Find(ra)] = num_nodes + static_cast<int32_t>(out.merges.size()) - 1;
  }
  if (static_cast<int32_t>(out.merges.size()) != num_nodes - 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("merge tree: the ", edges.size(), " edges leave ",
                     num_nodes - static_cast<int32_t>(out.merges.size()),
                     " disconnected groups of nodes; a spanning tree needs a connected graph"));
  }
  return out;
}

absl::StatusOr<MergeTree> PersistenceMerges(absl::Span<const SimilarityEdge> tree,
                                            absl::Span<const double> peak) {
  const int32_t num_nodes = static_cast<int32_t>(peak.size());
  if (num_nodes < 1 || static_cast<int32_t>(tree.size()) != num_nodes - 1) {
    return absl::InvalidArgumentError(absl::StrCat("persistence merges: ", tree.size(),
                                                   " tree edges for ", num_nodes, " nodes"));
  }
  for (double p : peak) {
    if (!std::isfinite(p)) {
      return absl::InvalidArgumentError(absl::StrCat("persistence merges: peak ", p));
    }
  }
  // Persistence of each edge under the water-level order.
  std::vector<double> persistence(tree.size());
  {
    UnionFind uf(num_nodes);
    std::vector<double> top(peak.begin(), peak.end());  // per set root
    for (size_t i = 0; i < tree.size(); ++i) {
      const SimilarityEdge& e = tree[i];
      if (e.a < 0 || e.b < 0 || e.a >= num_nodes || e.b >= num_nodes || !std::isfinite(e.similarity) ||
          (i > 0 && e.similarity > tree[i - 1].similarity)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "persistence merges: edge ", i, " (", e.a, ", ", e.b,
            ") is out of range, non-finite or out of decreasing-similarity order"));
      }
      const int32_t ra = uf.Find(e.a);
      const int32_t rb = uf.Find(e.b);
      if (ra == rb) {
        return absl::InvalidArgumentError("persistence merges: the edges contain a cycle");
      }
      persistence[i] = std::max(0.0, std::min(top[ra], top[rb]) - e.similarity);
      const double t = std::max(top[ra], top[rb]);
      uf.Union(ra, rb);
      top[uf.Find(ra)] = t;
    }
  }
  std::vector<size_t> order(tree.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return persistence[x] < persistence[y]; });
  UnionFind uf(num_nodes);
  std::vector<int32_t> node_of_root(num_nodes);
  std::iota(node_of_root.begin(), node_of_root.end(), 0);
  MergeTree out;
  for (size_t i : order) {
    const SimilarityEdge& e = tree[i];
    const int32_t ra = uf.Find(e.a);
    const int32_t rb = uf.Find(e.b);
    int32_t na = node_of_root[ra];
    int32_t nb = node_of_root[rb];
    if (nb < na) std::swap(na, nb);
    out.merges.push_back(Merge{na, nb, persistence[i]});
    out.similarity.push_back(-persistence[i]);
    out.tree_edges.push_back(e);
    uf.Union(ra, rb);
    node_of_root[uf.Find(ra)] = num_nodes + static_cast<int32_t>(out.merges.size()) - 1;
  }
  return out;
}

absl::StatusOr<AutoK> ChooseK(absl::Span<const double> s) {
  const int32_t l = static_cast<int32_t>(s.size()) + 1;
  if (l < 3) {
    return absl::FailedPreconditionError(absl::StrCat(
        "automatic k needs at least 3 leaf clusters to compare threshold jumps; the tree has ", l));
  }
  AutoK out;
  out.jumps.assign(l, 0.0);
  for (int32_t k = 2; k <= l - 1; ++k) out.jumps[k] = s[l - 1 - k] - s[l - k];
  out.k = 2;
  for (int32_t k = 3; k <= l - 1; ++k) {
    if (out.jumps[k] > out.jumps[out.k]) out.k = k;
  }
  out.jump = out.jumps[out.k];
  for (int32_t k = 2; k <= l - 1; ++k) {
    if (k != out.k) out.second_jump = std::max(out.second_jump, out.jumps[k]);
  }
  return out;
}

std::vector<double> ThresholdsByK(absl::Span<const double> s) {
  const int32_t l = static_cast<int32_t>(s.size()) + 1;
  std::vector<double> out(l + 1);
  out[0] = std::numeric_limits<double>::quiet_NaN();
  for (int32_t k = 1; k <= l - 1; ++k) out[k] = s[l - 1 - k];
  out[l] = std::numeric_limits<double>::infinity();
  return out;
}

std::vector<double> MergeSimilarities(const Hierarchy& h, double height_offset) {
  std::vector<double> out;
  for (const Merge& mg : h.ToMerges()) out.push_back(height_offset - mg.height);
  return out;
}

absl::StatusOr<MergeTree> ComponentMerges(int32_t num_nodes,
                                          absl::Span<const SimilarityEdge> edges,
                                          absl::Span<const double> peak, bool persistence,
                                          double* height_offset) {
  double offset = -std::numeric_limits<double>::infinity();
  for (const double p : peak) offset = std::max(offset, p);
  for (const SimilarityEdge& e : edges) offset = std::max(offset, e.similarity);
  DENDRO_ASSIGN_OR_RETURN(MergeTree mt, MaximumSpanningMerges(num_nodes, edges, offset));
  if (persistence) {
    DENDRO_ASSIGN_OR_RETURN(mt, PersistenceMerges(mt.tree_edges, peak));
    offset = 0.0;
  }
  *height_offset = offset;
  return mt;
}

}  // namespace dendro
