#include "core/ghhc/ivf_knn.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ghhc/random.h"

namespace dendro::ghhc {
namespace {

constexpr uint64_t kIvfStream = 0x1F5EED;
constexpr int64_t kRowBlock = 128;  // rows per distance tile

// Inserts (dist, id) into the ascending list bd/bi of length p if it beats
// the last entry; an equal distance does not displace an entry already kept.
inline void Insert(float dist, int32_t id, int p, float* bd, int32_t* bi) {
  if (dist >= bd[p - 1]) return;
  int s = p - 1;
  while (s > 0 && bd[s - 1] > dist) {
    bd[s] = bd[s - 1];
    bi[s] = bi[s - 1];
    --s;
  }
  bd[s] = dist;
  bi[s] = id;
}

// For each row of `rows`, its `p` nearest centres (rows of `c`, squared
// norms `csq`), nearest first, into idx (rows.rows() x p). Rows are handled
// in blocks, each by one thread; the result does not depend on the split.
void TopCentres(const RowMat<float>& rows, const RowMat<float>& c, const Eigen::VectorXf& csq,
                int p, int threads, SharedCancel& cancel, int32_t* idx) {
  const int64_t n = rows.rows();
  const int64_t num_blocks = (n + kRowBlock - 1) / kRowBlock;
#pragma omp parallel num_threads(threads)
  {
    RowMat<float> tile;
    std::vector<float> bd(p);
#pragma omp for schedule(dynamic, 8)
    for (int64_t b = 0; b < num_blocks; ++b) {
      if (cancel.Poll()) continue;
      const int64_t r0 = b * kRowBlock;
      const int64_t rn = std::min(kRowBlock, n - r0);
      tile.noalias() = rows.middleRows(r0, rn) * c.transpose();
      for (int64_t i = 0; i < rn; ++i) {
        std::fill(bd.begin(), bd.end(), std::numeric_limits<float>::infinity());
        int32_t* bi = idx + (r0 + i) * p;
        std::fill(bi, bi + p, 0);
        // ||x - c||^2 - ||x||^2: the row's own norm does not change the order.
        for (int64_t j = 0; j < c.rows(); ++j) {
          Insert(csq[j] - 2.0f * tile(i, j), static_cast<int32_t>(j), p, bd.data(), bi);
        }
      }
    }
  }
}

}  // namespace

absl::Status IvfTable(const RowMat<float>& x, const IvfOptions& options, RunContext& ctx,
                      const std::function<void(double)>& progress,
                      absl::Span<const uint8_t> query_mask, int32_t* out) {
  const int64_t n = x.rows();
  const int64_t d = x.cols();
  const int k = options.k;
  if (k < 1 || k >= n) return absl::InvalidArgumentError(absl::StrCat("bad k ", k));
  const int64_t cells = std::max<int64_t>(1, n / std::max<int64_t>(1, options.list_size));
  const int probes = static_cast<int>(std::min<int64_t>(std::max(1, options.probes), cells));
  const int threads = std::max(1, options.num_threads);
  SharedCancel cancel(ctx);
  auto cancelled = [&] { return absl::CancelledError("job cancelled"); };
  Rng rng(StreamSeed(options.seed, kIvfStream));

  // 1. k-means on a sample (sorted indices, so the sample is a set of rows
  // in index order); the first `cells` of a random permutation start it.
  const int64_t s = std::min<int64_t>(n, std::max<int64_t>(cells, options.sample_per_list * cells));
  std::vector<int32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = 0; i < s; ++i) {  // partial Fisher-Yates: perm[0, s) is a uniform draw
    std::swap(perm[i], perm[i + static_cast<int64_t>(rng.Below(n - i))]);
  }
  RowMat<float> centres(cells, d);
  for (int64_t c = 0; c < cells; ++c) centres.row(c) = x.row(perm[c]);
  std::sort(perm.begin(), perm.begin() + s);
  RowMat<float> sample(s, d);
  for (int64_t i = 0; i < s; ++i) sample.row(i) = x.row(perm[i]);
  perm = std::vector<int32_t>();
  std::vector<int32_t> label(s);
  Eigen::VectorXf csq;
  const int iterations = std::max(0, options.kmeans_iterations);
  for (int it = 0; it < iterations; ++it) {
    csq = centres.rowwise().squaredNorm();
    TopCentres(sample, centres, csq, 1, threads, cancel, label.data());
    if (cancel.seen()) return cancelled();
    // Means in double, summed in sample order: independent of the threads.
    Eigen::MatrixXd sum = Eigen::MatrixXd::Zero(cells, d);
    std::vector<int64_t> count(cells, 0);
    for (int64_t i = 0; i < s; ++i) {
      sum.row(label[i]) += sample.row(i).cast<double>();
      ++count[label[i]];
    }
    for (int64_t c = 0; c < cells; ++c) {
      if (count[c] > 0) {
        centres.row(c) = (sum.row(c) / static_cast<double>(count[c])).cast<float>();
      } else {  // an empty cell restarts at a random sample point
        centres.row(c) = sample.row(static_cast<int64_t>(rng.Below(s)));
      }
    }
    progress(0.2 * (it + 1) / iterations);
  }
  sample = RowMat<float>();
  csq = centres.rowwise().squaredNorm();

  // 2. Every point's probe list (nearest cell first); its first entry is its
  // cell. The members of each cell are stored contiguously in index order.
  std::vector<int32_t> probe(static_cast<size_t>(n) * probes);
  TopCentres(x, centres, csq, probes, threads, cancel, probe.data());
  if (cancel.seen()) return cancelled();
  progress(0.35);
  std::vector<int64_t> start(cells + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[probe[i * probes] + 1];
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<int32_t> member(n);
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) member[fill[probe[i * probes]]++] = static_cast<int32_t>(i);
  }
  RowMat<float> packed(n, d);  // rows of x in member order
  for (int64_t m = 0; m < n; ++m) packed.row(m) = x.row(member[m]);
  const Eigen::VectorXf packed_sq = packed.rowwise().squaredNorm();

  // 3. Queries grouped by their own cell; a group is one thread's work, so
  // each query's top-k list has a single writer. Within a group, the
  // (probed cell, query) pairs sorted by cell give one product per cell.
  constexpr int64_t kCellsPerPoll = 64;
  for (int64_t g0 = 0; g0 < cells; g0 += kCellsPerPoll) {
    if (cancel.Poll()) return cancelled();
    const int64_t g1 = std::min(cells, g0 + kCellsPerPoll);
#pragma omp parallel num_threads(threads)
    {
      std::vector<int32_t> group;
      std::vector<std::pair<int32_t, int32_t>> pairs;  // (cell, position in group)
      std::vector<float> bd;
      std::vector<int32_t> bi;
      std::vector<float> qbuf, tbuf;
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = g0; g < g1; ++g) {
        if (cancel.Poll()) continue;
        group.clear();
        for (int64_t m = start[g]; m < start[g + 1]; ++m) {
          const int32_t i = member[m];
          if (query_mask.empty() || query_mask[i] != 0) {
            group.push_back(i);
          } else {
            std::fill(out + static_cast<int64_t>(i) * k, out + (static_cast<int64_t>(i) + 1) * k,
                      -1);
          }
        }
        if (group.empty()) continue;
        pairs.clear();
        for (size_t t = 0; t < group.size(); ++t) {
          for (int p = 0; p < probes; ++p) {
            pairs.emplace_back(probe[static_cast<int64_t>(group[t]) * probes + p],
                               static_cast<int32_t>(t));
          }
        }
        std::sort(pairs.begin(), pairs.end());
        bd.assign(group.size() * k, std::numeric_limits<float>::infinity());
        bi.assign(group.size() * k, -1);
        for (size_t a = 0; a < pairs.size();) {
          const int32_t cell = pairs[a].first;
          size_t b = a;
          while (b < pairs.size() && pairs[b].first == cell) ++b;
          const int64_t c0 = start[cell];
          const int64_t cn = start[cell + 1] - c0;
          // Blocks of at most kRowBlock queries keep a tile in cache; the
          // buffers only grow, so a thread allocates a few times at most.
          for (size_t r0 = a; cn > 0 && r0 < b; r0 += kRowBlock) {
            const int64_t rn = std::min<int64_t>(kRowBlock, static_cast<int64_t>(b - r0));
            if (static_cast<int64_t>(qbuf.size()) < rn * d) qbuf.resize(rn * d);
            if (static_cast<int64_t>(tbuf.size()) < rn * cn) tbuf.resize(rn * cn);
            Eigen::Map<RowMat<float>> q(qbuf.data(), rn, d);
            Eigen::Map<RowMat<float>> tile(tbuf.data(), rn, cn);
            for (int64_t r = 0; r < rn; ++r) q.row(r) = x.row(group[pairs[r0 + r].second]);
            tile.noalias() = q * packed.middleRows(c0, cn).transpose();
            for (int64_t r = 0; r < rn; ++r) {
              const int32_t pos = pairs[r0 + r].second;
              const int32_t self = group[pos];
              float* qd = bd.data() + static_cast<int64_t>(pos) * k;
              int32_t* qi = bi.data() + static_cast<int64_t>(pos) * k;
              const float* t = tbuf.data() + r * cn;
              for (int64_t j = 0; j < cn; ++j) {
                const float dist = packed_sq[c0 + j] - 2.0f * t[j];
                if (dist >= qd[k - 1]) continue;
                const int32_t id = member[c0 + j];
                if (id != self) Insert(dist, id, k, qd, qi);
              }
            }
          }
          a = b;
        }
        for (size_t t = 0; t < group.size(); ++t) {
          const int64_t i = group[t];
          const int32_t* qi = bi.data() + t * k;
          int32_t* row = out + i * k;
          for (int u = 0; u < k; ++u) {
            if (qi[u] >= 0) {
              row[u] = qi[u];
            } else if (u > 0) {
              row[u] = row[u - 1];  // fewer than k candidates in the probed cells
            } else {
              row[u] = static_cast<int32_t>((i + 1) % n);
            }
          }
        }
      }
    }
    if (cancel.seen()) return cancelled();
    progress(0.35 + 0.65 * static_cast<double>(g1) / cells);
  }
  return absl::OkStatus();
}

}  // namespace dendro::ghhc
