#include "core/ghhc/init.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/ghhc/random.h"

namespace dendro::ghhc {

std::vector<LinkageStep> AverageLinkage(const RowMat<double>& points,
                                        const std::function<bool()>& cancelled) {
  auto stop = [&]() { return cancelled && cancelled(); };
  const int64_t s = points.rows();
  std::vector<LinkageStep> merges;
  if (s < 2) return merges;
  // Condensed distance matrix, row i holds d(i, j) for j > i.
  auto at = [s](int64_t i, int64_t j) {
    if (i > j) std::swap(i, j);
    return s * i - i * (i + 1) / 2 + (j - i - 1);
  };
  std::vector<double> dist(static_cast<size_t>(s * (s - 1) / 2));
  {
    const Eigen::VectorXd sq = points.rowwise().squaredNorm();
    constexpr int64_t kBlock = 256;
    RowMat<double> g;
    for (int64_t r0 = 0; r0 < s; r0 += kBlock) {
      if (stop()) return {};
      const int64_t rn = std::min(kBlock, s - r0);
      g.noalias() = points.middleRows(r0, rn) * points.transpose();
      for (int64_t i = r0; i < r0 + rn; ++i) {
        for (int64_t j = i + 1; j < s; ++j) {
          // Direct differences for accuracy on near-duplicates.
          const double via_gemm = sq[i] + sq[j] - 2.0 * g(i - r0, j);
          const double d2 = via_gemm > 1e-6 * (sq[i] + sq[j])
                                ? via_gemm
                                : (points.row(i) - points.row(j)).squaredNorm();
          dist[at(i, j)] = std::sqrt(std::max(d2, 0.0));
        }
      }
    }
  }
  // Nearest-neighbour chain (as in SciPy's nn_chain): a merged cluster takes
  // the slot of its second member.
  std::vector<int32_t> size(s, 1);
  std::vector<int64_t> chain;
  chain.reserve(s);
  struct Raw {
    int64_t x, y;
    double h;
  };
  std::vector<Raw> raw;
  raw.reserve(s - 1);
  for (int64_t step = 0; step < s - 1; ++step) {
    if (step % 256 == 0 && stop()) return {};
    if (chain.empty()) {
      for (int64_t i = 0; i < s; ++i) {
        if (size[i] > 0) {
          chain.push_back(i);
          break;
        }
      }
    }
    int64_t x = 0, y = 0;
    double current = 0.0;
    for (;;) {
      x = chain.back();
      if (chain.size() > 1) {
        y = chain[chain.size() - 2];
        current = dist[at(x, y)];
      } else {
        current = std::numeric_limits<double>::infinity();
      }
      for (int64_t i = 0; i < s; ++i) {
        if (size[i] == 0 || i == x) continue;
        const double v = dist[at(x, i)];
        if (v < current) {
          current = v;
          y = i;
        }
      }
      if (chain.size() > 1 && y == chain[chain.size() - 2]) break;
      chain.push_back(y);
    }
    chain.pop_back();
    chain.pop_back();
    if (x > y) std::swap(x, y);
    raw.push_back({x, y, current});
    const double nx = size[x], ny = size[y];
    for (int64_t i = 0; i < s; ++i) {
      if (size[i] == 0 || i == x || i == y) continue;
      double& dy = dist[at(y, i)];
      dy = (nx * dist[at(x, i)] + ny * dy) / (nx + ny);
    }
    size[y] += size[x];
    size[x] = 0;
  }
  // Sort by height (stable) and relabel with a union-find, as SciPy does.
  std::vector<int64_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return raw[a].h < raw[b].h; });
  std::vector<int64_t> uf_parent(2 * s - 1);
  std::iota(uf_parent.begin(), uf_parent.end(), 0);
  std::vector<int32_t> uf_size(2 * s - 1, 1);
  auto find = [&](int64_t v) {
    int64_t root = v;
    while (uf_parent[root] != root) root = uf_parent[root];
    while (uf_parent[v] != root) {
      const int64_t next = uf_parent[v];
      uf_parent[v] = root;
      v = next;
    }
    return root;
  };
  merges.reserve(s - 1);
  for (int64_t t = 0; t < static_cast<int64_t>(order.size()); ++t) {
    const Raw& r = raw[order[t]];
    int64_t a = find(r.x), b = find(r.y);
    if (a > b) std::swap(a, b);
    const int64_t next = s + t;
    uf_parent[a] = next;
    uf_parent[b] = next;
    uf_size[next] = uf_size[a] + uf_size[b];
    merges.push_back({static_cast<int32_t>(a), static_cast<int32_t>(b), r.h, uf_size[next]});
  }
  return merges;
}

RowMat<double> InitialNodes(const RowMat<double>& sample, int32_t num_nodes, double max_node_norm,
                            uint64_t seed, const std::function<bool()>& cancelled) {
  const int64_t s = sample.rows();
  const int64_t d = sample.cols();
  RowMat<double> nodes = RowMat<double>::Zero(num_nodes, d);
  const std::vector<LinkageStep> merges = AverageLinkage(sample, cancelled);
  if (s >= 2 && merges.empty()) return RowMat<double>(0, d);  // cancelled
  const int64_t num_merges = static_cast<int64_t>(merges.size());
  // c leaf nodes (the clusters of the cut into c) and the c - 1 merges above.
  const int64_t c = std::min<int64_t>((int64_t{num_nodes} + 1) / 2, s);
  const int64_t first_top = num_merges - (c - 1);  // first merge above the cut
  // Sums of the sample points under every cluster.
  RowMat<double> sums(num_merges, d);
  auto vec = [&](int32_t id) -> Eigen::RowVectorXd {
    return id < s ? Eigen::RowVectorXd(sample.row(id)) : Eigen::RowVectorXd(sums.row(id - s));
  };
  auto count = [&](int32_t id) -> double { return id < s ? 1.0 : merges[id - s].size; };
  for (int64_t t = 0; t < num_merges; ++t) {
    sums.row(t) = vec(merges[t].a) + vec(merges[t].b);
  }
  auto place = [&](int64_t row, const Eigen::RowVectorXd& sum, double radius) {
    const double len = sum.norm();
    if (len > 0.0 && radius > 0.0) nodes.row(row) = (radius / len) * sum;
  };
  int64_t next = 0;
  // Leaf nodes: children of the top merges that are below the cut.
  if (c == 1) {
    place(next++, sample.colwise().sum(), max_node_norm);
  } else {
    for (int64_t t = first_top; t < num_merges; ++t) {
      for (int32_t id : {merges[t].a, merges[t].b}) {
        if (id < s + first_top) place(next++, vec(id) / count(id), max_node_norm);
      }
    }
  }
  // Merge nodes: with the leaf nodes as round 0, merge j = 1 .. N of the
  // N = c - 1 rounds has norm max_node_norm * log(N + 1 - j) / log(N + 1).
  const int64_t rounds = c - 1;
  for (int64_t j = 1; j <= rounds; ++j) {
    const int64_t t = first_top + j - 1;
    const double radius =
        max_node_norm * std::log(double(rounds + 1 - j)) / std::log(double(rounds + 1));
    place(next++, sums.row(t), radius);
  }
  Rng rng(StreamSeed(seed, 0x1417));
  for (; next < num_nodes; ++next) {
    const int64_t i = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(s)));
    place(next, sample.row(i), max_node_norm);
  }
  return nodes;
}

}  // namespace dendro::ghhc
