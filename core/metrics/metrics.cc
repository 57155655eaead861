#include "core/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace dendro {

namespace {

// Labels renumbered 0..count-1 in order of first appearance.
struct DenseLabels {
  std::vector<int32_t> id;
  int32_t count = 0;
};

DenseLabels Densify(absl::Span<const int64_t> labels) {
  DenseLabels out;
  out.id.resize(labels.size());
  absl::flat_hash_map<int64_t, int32_t> index;
  for (size_t i = 0; i < labels.size(); ++i) {
    auto [it, inserted] = index.try_emplace(labels[i], out.count);
    if (inserted) ++out.count;
    out.id[i] = it->second;
  }
  return out;
}

struct Cell {
  int32_t row;  // true class
  int32_t col;  // predicted cluster
  int64_t count;
};

// Sparse contingency table of two labelings.
struct Contingency {
  int64_t n = 0;
  int32_t rows = 0;
  int32_t cols = 0;
  std::vector<int64_t> row_sum;
  std::vector<int64_t> col_sum;
  std::vector<Cell> cells;  // non-zero cells, sorted by (row, col)
};

absl::Status CheckPair(size_t truth_size, size_t pred_size, const char* pred_name) {
  if (truth_size != pred_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "truth has %d labels but %s has %d", truth_size, pred_name, pred_size));
  }
  if (truth_size == 0) return absl::InvalidArgumentError("no points to evaluate (empty labels)");
  return absl::OkStatus();
}

absl::StatusOr<Contingency> BuildContingency(absl::Span<const int64_t> truth,
                                             absl::Span<const int64_t> pred) {
  if (absl::Status s = CheckPair(truth.size(), pred.size(), "pred"); !s.ok()) return s;
  const DenseLabels t = Densify(truth);
  const DenseLabels p = Densify(pred);
  Contingency c;
  c.n = static_cast<int64_t>(truth.size());
  c.rows = t.count;
  c.cols = p.count;
  c.row_sum.assign(c.rows, 0);
  c.col_sum.assign(c.cols, 0);
  const int64_t cells = static_cast<int64_t>(c.rows) * c.cols;
  // A dense table is cheaper to fill, but scanning it costs rows x cols: use
  // it only when that is small in absolute terms and next to the number of
  // points (many clusters over few points, as when two trees are cut at
  // every level, would otherwise cost O(k^2) per table).
  if (cells <= (int64_t{1} << 22) && cells <= 16 * c.n + 4096) {
    std::vector<int64_t> dense(cells, 0);
    for (size_t i = 0; i < truth.size(); ++i) ++dense[int64_t{t.id[i]} * c.cols + p.id[i]];
    for (int32_t r = 0; r < c.rows; ++r) {
      for (int32_t q = 0; q < c.cols; ++q) {
        const int64_t v = dense[int64_t{r} * c.cols + q];
        if (v > 0) c.cells.push_back(Cell{r, q, v});
      }
    }
  } else {
    absl::flat_hash_map<int64_t, int64_t> sparse;
    for (size_t i = 0; i < truth.size(); ++i) ++sparse[int64_t{t.id[i]} * c.cols + p.id[i]];
    c.cells.reserve(sparse.size());
    for (const auto& [key, v] : sparse) {
      c.cells.push_back(Cell{static_cast<int32_t>(key / c.cols),
                             static_cast<int32_t>(key % c.cols), v});
    }
    std::sort(c.cells.begin(), c.cells.end(), [](const Cell& a, const Cell& b) {
      return a.row != b.row ? a.row < b.row : a.col < b.col;
    });
  }
  for (const Cell& cell : c.cells) {
    c.row_sum[cell.row] += cell.count;
    c.col_sum[cell.col] += cell.count;
  }
  return c;
}

// Entropy (nats) of a labeling given its class sizes, as sklearn computes it.
double Entropy(const std::vector<int64_t>& sizes, int64_t n) {
  if (sizes.size() <= 1) return 0.0;
  const double log_n = std::log(static_cast<double>(n));
  double h = 0.0;
  for (int64_t s : sizes) {
    const double x = static_cast<double>(s);
    h -= (x / static_cast<double>(n)) * (std::log(x) - log_n);
  }
  return h;
}

double NmiFrom(const Contingency& c) {
  if (c.rows == 1 && c.cols == 1) return 1.0;
  if (c.rows == 1 || c.cols == 1) return 0.0;  // MI is 0
  const double n = static_cast<double>(c.n);
  const double log_n = std::log(n);
  const double eps = std::numeric_limits<double>::epsilon();
  double mi = 0.0;
  for (const Cell& cell : c.cells) {
    const double nij = static_cast<double>(cell.count);
    const double nm = nij / n;
    const double outer =
        static_cast<double>(c.row_sum[cell.row]) * static_cast<double>(c.col_sum[cell.col]);
    const double log_outer = -std::log(outer) + log_n + log_n;
    double term = nm * (std::log(nij) - log_n) + nm * log_outer;
    if (std::abs(term) < eps) term = 0.0;
    mi += term;
  }
  mi = std::max(mi, 0.0);
  if (mi == 0.0) return 0.0;
  const double normalizer = 0.5 * (Entropy(c.row_sum, c.n) + Entropy(c.col_sum, c.n));
  return mi / normalizer;
}

double AriFrom(const Contingency& c) {
  // Ordered pair counts as in sklearn's pair_confusion_matrix, in 128 bits.
  using Wide = __int128;
  Wide sum_squares = 0, row_dot = 0, col_dot = 0;
  for (const Cell& cell : c.cells) {
    const Wide v = cell.count;
    sum_squares += v * v;
    row_dot += v * c.row_sum[cell.row];
    col_dot += v * c.col_sum[cell.col];
  }
  const Wide n = c.n;
  const Wide tp = sum_squares - n;
  const Wide fp = col_dot - sum_squares;
  const Wide fn = row_dot - sum_squares;
  const Wide tn = n * n - fp - fn - sum_squares;
  if (fn == 0 && fp == 0) return 1.0;
  const Wide num = 2 * (tp * tn - fn * fp);
  const Wide den = (tp + fn) * (fn + tn) + (tp + fp) * (fp + tn);
  return static_cast<double>(static_cast<long double>(num) / static_cast<long double>(den));
}

double AccFrom(const Contingency& c) {
  // Assign the smaller side (rows of the assignment problem) to the larger.
  const bool by_rows = c.rows <= c.cols;
  const int32_t n = by_rows ? c.rows : c.cols;
  std::vector<std::vector<std::pair<int64_t, int32_t>>> lists(n);  // (count, other side)
  for (const Cell& cell : c.cells) {
    if (by_rows) {
      lists[cell.row].emplace_back(cell.count, cell.col);
    } else {
      lists[cell.col].emplace_back(cell.count, cell.row);
    }
  }
  // Some optimal matching uses, for every row, one of its n heaviest
  // entries (the other n - 1 rows block at most n - 1 of them), so only
  // those columns are kept; all-zero columns are interchangeable.
  absl::flat_hash_map<int32_t, int32_t> col_index;
  for (auto& list : lists) {
    if (static_cast<int32_t>(list.size()) > n) {
      std::nth_element(list.begin(), list.begin() + n, list.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      list.resize(n);
    }
    for (const auto& entry : list) {
      col_index.try_emplace(entry.second, static_cast<int32_t>(col_index.size()));
    }
  }
  const int32_t m = std::max<int32_t>(n, static_cast<int32_t>(col_index.size()));
  std::vector<double> cost(static_cast<size_t>(n) * m, 0.0);
  for (int32_t i = 0; i < n; ++i) {
    for (const auto& [count, other] : lists[i]) {
      cost[static_cast<size_t>(i) * m + col_index[other]] = -static_cast<double>(count);
    }
  }
  const std::vector<int32_t> match = SolveAssignment(cost, n, m);
  double matched = 0.0;
  for (int32_t i = 0; i < n; ++i) matched -= cost[static_cast<size_t>(i) * m + match[i]];
  return matched / static_cast<double>(c.n);
}

double LeafPurityFrom(const Contingency& c) {
  std::vector<int64_t> best(c.cols, 0);
  for (const Cell& cell : c.cells) best[cell.col] = std::max(best[cell.col], cell.count);
  int64_t total = 0;
  for (int64_t b : best) total += b;
  return static_cast<double>(total) / static_cast<double>(c.n);
}

// Validated input of the hierarchical metrics, classes made dense.
struct TreeInput {
  absl::Span<const int32_t> point_leaf;
  DenseLabels classes;
  // (leaf, class, count) for every non-empty cell, sorted by leaf then class.
  struct Entry {
    int32_t leaf;
    int32_t cls;
    int64_t count;
  };
  std::vector<Entry> entries;
};

absl::StatusOr<TreeInput> PrepareTreeInput(const Hierarchy& h,
                                           absl::Span<const int32_t> point_leaf,
                                           absl::Span<const int64_t> truth) {
  TreeInput in;
  in.point_leaf = point_leaf.empty() ? absl::MakeConstSpan(h.point_leaf()) : point_leaf;
  if (absl::Status s = CheckPair(truth.size(), in.point_leaf.size(), "point_leaf"); !s.ok()) {
    return s;
  }
  const int32_t L = h.num_leaves();
  for (size_t i = 0; i < in.point_leaf.size(); ++i) {
    if (in.point_leaf[i] < 0 || in.point_leaf[i] >= L) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "point %d is assigned to leaf %d, outside [0, %d)", i, in.point_leaf[i], L));
    }
  }
  in.classes = Densify(truth);
  const int32_t K = in.classes.count;
  std::vector<int64_t> keys(truth.size());
  for (size_t i = 0; i < truth.size(); ++i) {
    keys[i] = int64_t{in.point_leaf[i]} * K + in.classes.id[i];
  }
  std::sort(keys.begin(), keys.end());
  for (size_t i = 0; i < keys.size();) {
    size_t j = i;
    while (j < keys.size() && keys[j] == keys[i]) ++j;
    in.entries.push_back(TreeInput::Entry{static_cast<int32_t>(keys[i] / K),
                                          static_cast<int32_t>(keys[i] % K),
                                          static_cast<int64_t>(j - i)});
    i = j;
  }
  return in;
}

// Sum over same-label point pairs of the class purity of their LCA: a node
// is the LCA of (c_v^2 - sum over children c_child^2) / 2 class-k pairs.
double DpSumDense(const Hierarchy& h, const TreeInput& in) {
  const int32_t K = in.classes.count;
  const int32_t n = h.num_nodes();
  std::vector<int64_t> counts(static_cast<size_t>(n) * K, 0);
  std::vector<int64_t> total(n, 0);
  for (const auto& e : in.entries) {
    counts[static_cast<size_t>(e.leaf) * K + e.cls] = e.count;
    total[e.leaf] += e.count;
  }
  long double sum = 0;
  for (int32_t v = 0; v < n; ++v) {
    int64_t* row = &counts[static_cast<size_t>(v) * K];
    if (h.is_leaf(v)) {
      if (total[v] == 0) continue;
      for (int32_t k = 0; k < K; ++k) {
        const int64_t c = row[k];
        if (c > 1) {
          sum += static_cast<long double>(c * (c - 1) / 2) * c / total[v];
        }
      }
      continue;
    }
    for (int32_t child : h.children(v)) total[v] += total[child];
    if (total[v] == 0) continue;
    for (int32_t k = 0; k < K; ++k) {
      int64_t c = 0, sumsq = 0;
      for (int32_t child : h.children(v)) {
        const int64_t x = counts[static_cast<size_t>(child) * K + k];
        c += x;
        sumsq += x * x;
      }
      row[k] = c;
      if (c * c != sumsq) {
        sum += static_cast<long double>((c * c - sumsq) / 2) * c / total[v];
      }
    }
  }
  return static_cast<double>(sum);
}

double DpSumSparse(const Hierarchy& h, const TreeInput& in) {
  using Counts = absl::flat_hash_map<int32_t, int64_t>;
  const int32_t n = h.num_nodes();
  std::vector<Counts> counts(n);
  std::vector<int64_t> total(n, 0);
  long double sum = 0;
  for (const auto& e : in.entries) {
    counts[e.leaf][e.cls] = e.count;
    total[e.leaf] += e.count;
  }
  for (int32_t leaf = 0; leaf < h.num_leaves(); ++leaf) {
    for (const auto& [k, c] : counts[leaf]) {
      if (c > 1) sum += static_cast<long double>(c * (c - 1) / 2) * c / total[leaf];
    }
  }
  Counts sumsq;  // class -> sum of squared child counts, for classes seen twice
  for (int32_t v = h.num_leaves(); v < n; ++v) {
    auto kids = h.children(v);
    int32_t big = kids[0];
    for (int32_t c : kids) {
      total[v] += total[c];
      if (counts[c].size() > counts[big].size()) big = c;
    }
    Counts base = std::move(counts[big]);
    Counts().swap(counts[big]);
    sumsq.clear();
    for (int32_t child : kids) {
      if (child == big) continue;
      for (const auto& [k, c] : counts[child]) {
        // On first touch at this node, sumsq starts from the big child's
        // count (0 if it lacks class k).
        auto it = base.try_emplace(k, 0).first;
        auto [sq, first] = sumsq.try_emplace(k, 0);
        if (first) sq->second = it->second * it->second;
        sq->second += c * c;
        it->second += c;
      }
      Counts().swap(counts[child]);
    }
    if (total[v] > 0) {
      for (const auto& [k, sq] : sumsq) {
        const int64_t c = base[k];
        if (c * c != sq) sum += static_cast<long double>((c * c - sq) / 2) * c / total[v];
      }
    }
    counts[v] = std::move(base);
  }
  return static_cast<double>(sum);
}

}  // namespace

std::vector<int32_t> SolveAssignment(const std::vector<double>& cost, int n, int m) {
  if (n < 0 || m < 0 || cost.size() != static_cast<size_t>(n) * static_cast<size_t>(m)) return {};
  for (double x : cost) {
    if (!std::isfinite(x)) return {};
  }
  if (n > m) {
    std::vector<double> transposed(cost.size());
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < m; ++j) transposed[static_cast<size_t>(j) * n + i] = cost[static_cast<size_t>(i) * m + j];
    }
    const std::vector<int32_t> col_to_row = SolveAssignment(transposed, m, n);
    std::vector<int32_t> out(n, -1);
    for (int j = 0; j < m; ++j) out[col_to_row[j]] = j;
    return out;
  }
  // Shortest augmenting paths with potentials (Kuhn-Munkres, Jonker-Volgenant
  // style), 1-based with column 0 as the virtual start.
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> u(n + 1, 0.0), v(m + 1, 0.0), minv(m + 1);
  std::vector<int32_t> p(m + 1, 0), way(m + 1, 0);
  std::vector<char> used(m + 1);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::fill(minv.begin(), minv.end(), kInf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const int i0 = p[j0];
      const double* row = &cost[static_cast<size_t>(i0 - 1) * m];
      double delta = kInf;
      int j1 = 0;
      for (int j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = row[j - 1] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int32_t> out(n, -1);
  for (int j = 1; j <= m; ++j) {
    if (p[j] != 0) out[p[j] - 1] = j - 1;
  }
  return out;
}

absl::StatusOr<double> NormalizedMutualInfo(absl::Span<const int64_t> truth,
                                            absl::Span<const int64_t> pred) {
  absl::StatusOr<Contingency> c = BuildContingency(truth, pred);
  if (!c.ok()) return c.status();
  return NmiFrom(*c);
}

absl::StatusOr<double> AdjustedRandIndex(absl::Span<const int64_t> truth,
                                         absl::Span<const int64_t> pred) {
  absl::StatusOr<Contingency> c = BuildContingency(truth, pred);
  if (!c.ok()) return c.status();
  return AriFrom(*c);
}

absl::StatusOr<double> ClusteringAccuracy(absl::Span<const int64_t> truth,
                                          absl::Span<const int64_t> pred) {
  absl::StatusOr<Contingency> c = BuildContingency(truth, pred);
  if (!c.ok()) return c.status();
  return AccFrom(*c);
}

absl::StatusOr<double> LeafPurity(absl::Span<const int64_t> truth,
                                  absl::Span<const int64_t> pred) {
  absl::StatusOr<Contingency> c = BuildContingency(truth, pred);
  if (!c.ok()) return c.status();
  return LeafPurityFrom(*c);
}

absl::StatusOr<double> DendrogramPurity(const Hierarchy& h,
                                        absl::Span<const int32_t> point_leaf,
                                        absl::Span<const int64_t> truth,
                                        CountStorage storage) {
  absl::StatusOr<TreeInput> in = PrepareTreeInput(h, point_leaf, truth);
  if (!in.ok()) return in.status();
  std::vector<int64_t> class_size(in->classes.count, 0);
  for (const auto& e : in->entries) class_size[e.cls] += e.count;
  long double pairs = 0;
  for (int64_t s : class_size) pairs += static_cast<long double>(s) * (s - 1) / 2;
  if (pairs == 0) return 1.0;
  if (storage == CountStorage::kAuto) {
    const int64_t cells = int64_t{h.num_nodes()} * in->classes.count;
    storage = cells <= kDenseCountLimit ? CountStorage::kDense : CountStorage::kSparse;
  }
  const double sum =
      storage == CountStorage::kDense ? DpSumDense(h, *in) : DpSumSparse(h, *in);
  return static_cast<double>(sum / pairs);
}

absl::StatusOr<double> DendrogramPurity(const Hierarchy& h,
                                        absl::Span<const int32_t> point_leaf,
                                        absl::Span<const int64_t> truth) {
  return DendrogramPurity(h, point_leaf, truth, CountStorage::kAuto);
}

absl::StatusOr<double> LeastHierarchicalDistance(const Hierarchy& h,
                                                 absl::Span<const int32_t> point_leaf,
                                                 absl::Span<const int64_t> truth) {
  absl::StatusOr<TreeInput> in = PrepareTreeInput(h, point_leaf, truth);
  if (!in.ok()) return in.status();
  const int32_t L = h.num_leaves();
  if (L <= 2) return 0.0;
  struct DepthCount {
    int32_t depth;
    int64_t count;
  };
  using Hist = std::vector<DepthCount>;  // sorted by depth
  using ClassHists = absl::flat_hash_map<int32_t, Hist>;
  const int32_t n = h.num_nodes();
  int32_t max_depth = 0;
  for (int32_t v = 0; v < L; ++v) max_depth = std::max(max_depth, h.depth(v));
  std::vector<double> log2_td(2 * static_cast<size_t>(max_depth) + 1, 0.0);
  for (size_t t = 1; t < log2_td.size(); ++t) log2_td[t] = std::log2(static_cast<double>(t));

  std::vector<ClassHists> state(n);
  for (const auto& e : in->entries) state[e.leaf][e.cls] = Hist{{h.depth(e.leaf), e.count}};
  long double log_sum = 0;  // sum over pairs of log2 td
  long double pairs = 0;
  Hist merged;
  for (int32_t v = L; v < n; ++v) {
    auto kids = h.children(v);
    int32_t big = kids[0];
    for (int32_t c : kids) {
      if (state[c].size() > state[big].size()) big = c;
    }
    ClassHists base = std::move(state[big]);
    ClassHists().swap(state[big]);
    const int32_t two_dv = 2 * h.depth(v);
    for (int32_t child : kids) {
      if (child == big) continue;
      for (auto& [cls, hist] : state[child]) {
        auto it = base.find(cls);
        if (it == base.end()) {
          base.emplace(cls, std::move(hist));
          continue;
        }
        Hist& other = it->second;
        // Cross pairs: one point under `child`, one under the merged rest.
        int64_t other_count = 0;
        for (const DepthCount& b : other) other_count += b.count;
        for (const DepthCount& a : hist) {
          const double* log2_from_a = log2_td.data() + (a.depth - two_dv);
          double row = 0;  // at most ~L terms of count * log2: double is ample
          for (const DepthCount& b : other) {
            row += static_cast<double>(b.count) * log2_from_a[b.depth];
          }
          log_sum += static_cast<long double>(row) * a.count;
          pairs += static_cast<long double>(other_count) * a.count;
        }
        merged.clear();
        size_t i = 0, j = 0;
        while (i < hist.size() || j < other.size()) {
          if (j == other.size() || (i < hist.size() && hist[i].depth < other[j].depth)) {
            merged.push_back(hist[i++]);
          } else if (i == hist.size() || other[j].depth < hist[i].depth) {
            merged.push_back(other[j++]);
          } else {
            merged.push_back({hist[i].depth, hist[i].count + other[j].count});
            ++i;
            ++j;
          }
        }
        other.swap(merged);
      }
      ClassHists().swap(state[child]);
    }
    state[v] = std::move(base);
  }
  if (pairs == 0) return 0.0;
  const double mean_log = static_cast<double>(log_sum / pairs);
  return (mean_log - 1.0) / (std::log2(static_cast<double>(L)) - 1.0);
}

absl::StatusOr<MetricsReport> EvaluateHierarchy(const Hierarchy& h,
                                                absl::Span<const int32_t> point_leaf,
                                                absl::Span<const int64_t> truth,
                                                int32_t level) {
  absl::Span<const int32_t> leaves =
      point_leaf.empty() ? absl::MakeConstSpan(h.point_leaf()) : point_leaf;
  if (absl::Status s = CheckPair(truth.size(), leaves.size(), "point_leaf"); !s.ok()) return s;
  const int32_t L = h.num_leaves();
  if (level < 0 || level > L) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "level %d is outside [0, %d] (0 means the number of true classes)", level, L));
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i] < 0 || leaves[i] >= L) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "point %d is assigned to leaf %d, outside [0, %d)", i, leaves[i], L));
    }
  }
  if (level == 0) level = std::min(L, Densify(truth).count);
  const std::vector<int32_t> reachable = h.ReachableLevels();
  auto it = std::upper_bound(reachable.begin(), reachable.end(), level);
  // reachable[0] == 1 <= level, so a reachable level <= `level` exists.
  level = it == reachable.begin() ? reachable.front() : *(it - 1);
  absl::StatusOr<std::vector<int32_t>> cut = h.CutToK(level);
  if (!cut.ok()) return cut.status();
  std::vector<int64_t> pred(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) pred[i] = (*cut)[leaves[i]];

  MetricsReport report;
  report.level = level;
  absl::StatusOr<Contingency> c = BuildContingency(truth, pred);
  if (!c.ok()) return c.status();
  report.nmi = NmiFrom(*c);
  report.ari = AriFrom(*c);
  report.acc = AccFrom(*c);
  report.leaf_purity = LeafPurityFrom(*c);
  absl::StatusOr<double> dp = DendrogramPurity(h, leaves, truth);
  if (!dp.ok()) return dp.status();
  report.dendrogram_purity = *dp;
  absl::StatusOr<double> lhd = LeastHierarchicalDistance(h, leaves, truth);
  if (!lhd.ok()) return lhd.status();
  report.lhd = *lhd;
  return report;
}

}  // namespace dendro
