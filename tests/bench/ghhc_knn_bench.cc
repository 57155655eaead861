// Neighbour-graph benchmark for gHHC: builds the k-NN table of the
// ghhc_bench data (hierarchical Gaussians, centred and scaled to the sphere
// as FitGhhc does) with hnswlib (the production path, through
// NearestNeighborTable), faiss IVF-Flat, faiss HNSW-Flat and an exact
// blocked matrix-product search, and reports time and recall@k against the
// exact neighbours of `--eval` random queries. A CLI, not a ctest:
//
//   ghhc_knn_bench --n=1000000 [--dim=64] [--k=5] [--eval=2000] [--seed=1]
//                  [--threads=0] [--methods=hnsw,ivf,fhnsw,exact]
//                  [--hnsw=M:EFC:EFS,...]   hnswlib settings (default 12:40:0)
//                  [--ivf=NLIST:NPROBE,...]  faiss IVF-Flat settings
//                  [--fhnsw=M:EFC:EFS,...]  faiss HNSW-Flat settings
//                  [--gemm-ivf=LIST:PROBES,...]  IvfTable (k-means cells, blocked products)
//                  [--exact-queries=0]      0: every query point
//
// The query points are those FitGhhc searches for with its defaults
// (200,000 training triples, 2,000 held-out triples): when 202,000 < 2 n,
// the distinct points among 202,000 uniform draws, otherwise every point.
// The exact search times `--exact-queries` of them (all by default) and the
// report scales that time to the full query set.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/run_context.h"
#include "core/ghhc/ivf_knn.h"
#include "core/ghhc/knn.h"
#include "core/ghhc/synthetic.h"
#include "faiss/IndexFlat.h"
#include "faiss/IndexHNSW.h"
#include "faiss/IndexIVFFlat.h"
#include "faiss/utils/distances.h"

namespace dendro {
namespace {

using ghhc::RowMat;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool Flag(std::string_view arg, std::string_view name, std::string* value) {
  if (arg.substr(0, name.size()) != name) return false;
  if (arg.size() == name.size()) {
    *value = "1";
    return true;
  }
  if (arg[name.size()] != '=') return false;
  *value = std::string(arg.substr(name.size() + 1));
  return true;
}

std::vector<std::vector<int>> ParseList(const std::string& s) {
  std::vector<std::vector<int>> out;
  size_t p = 0;
  while (p < s.size()) {
    size_t e = s.find(',', p);
    if (e == std::string::npos) e = s.size();
    std::vector<int> v;
    size_t q = p;
    while (q < e) {
      size_t c = s.find(':', q);
      if (c == std::string::npos || c > e) c = e;
      v.push_back(std::atoi(s.substr(q, c - q).c_str()));
      q = c + 1;
    }
    out.push_back(v);
    p = e + 1;
  }
  return out;
}

// Exact k nearest data points (excluding the query itself) of the rows
// `queries` of `x`: distance tiles of kQueryBlock queries x kDataBlock data
// points by one matrix product each (a tile of 128 x 2048 floats is 1 MB),
// and a sorted top-k list per query that a candidate enters only when it
// beats the current k-th distance. Ties go to the lower index, as in
// NearestNeighborTable's exact path. Rows of `out` are nearest first.
void ExactKnn(const RowMat<float>& x, const std::vector<int64_t>& queries, int k, int threads,
              std::vector<int32_t>* out) {
  constexpr int64_t kQueryBlock = 128;
  constexpr int64_t kDataBlock = 2048;
  const int64_t n = x.rows();
  const int64_t nq = static_cast<int64_t>(queries.size());
  const Eigen::VectorXf sq = x.rowwise().squaredNorm();
  out->assign(nq * k, -1);
  const int64_t num_qb = (nq + kQueryBlock - 1) / kQueryBlock;
#pragma omp parallel num_threads(threads)
  {
    RowMat<float> q, tile;
    std::vector<float> best_d;
    std::vector<int32_t> best_i;
#pragma omp for schedule(dynamic, 1)
    for (int64_t qb = 0; qb < num_qb; ++qb) {
      const int64_t q0 = qb * kQueryBlock;
      const int64_t qn = std::min(kQueryBlock, nq - q0);
      q.resize(qn, x.cols());
      for (int64_t i = 0; i < qn; ++i) q.row(i) = x.row(queries[q0 + i]);
      best_d.assign(qn * k, std::numeric_limits<float>::infinity());
      best_i.assign(qn * k, std::numeric_limits<int32_t>::max());
      for (int64_t d0 = 0; d0 < n; d0 += kDataBlock) {
        const int64_t dn = std::min(kDataBlock, n - d0);
        tile.noalias() = q * x.middleRows(d0, dn).transpose();
        for (int64_t i = 0; i < qn; ++i) {
          const int64_t self = queries[q0 + i];
          float* bd = best_d.data() + i * k;
          int32_t* bi = best_i.data() + i * k;
          const float* t = tile.data() + i * dn;
          // ||q - x||^2 - ||q||^2: the query's own norm does not change the order.
          for (int64_t j = 0; j < dn; ++j) {
            const float dist = sq[d0 + j] - 2.0f * t[j];
            if (dist >= bd[k - 1]) continue;  // ties keep the lower (earlier) index
            const int32_t id = static_cast<int32_t>(d0 + j);
            if (id == self) continue;
            int s = k - 1;
            while (s > 0 && bd[s - 1] > dist) {
              bd[s] = bd[s - 1];
              bi[s] = bi[s - 1];
              --s;
            }
            bd[s] = dist;
            bi[s] = id;
          }
        }
      }
      std::copy(best_i.begin(), best_i.end(), out->begin() + q0 * k);
    }
  }
}

// Mean over the evaluated queries of |found ∩ exact| / k.
double Recall(const std::vector<int32_t>& found_rows, const std::vector<int32_t>& exact, int k) {
  const int64_t ne = static_cast<int64_t>(exact.size()) / k;
  int64_t hits = 0;
  for (int64_t e = 0; e < ne; ++e) {
    for (int a = 0; a < k; ++a) {
      for (int b = 0; b < k; ++b) {
        if (found_rows[e * k + a] == exact[e * k + b]) {
          ++hits;
          break;
        }
      }
    }
  }
  return static_cast<double>(hits) / (ne * k);
}

// Rows of a faiss result (k + 1 hits, the query itself among them) for the
// evaluated queries, without the query itself.
void DropSelf(const std::vector<faiss::Index::idx_t>& labels, const std::vector<int64_t>& ids,
              int k, std::vector<int32_t>* rows) {
  const int64_t nq = static_cast<int64_t>(ids.size());
  rows->assign(nq * k, -1);
  for (int64_t i = 0; i < nq; ++i) {
    int t = 0;
    for (int j = 0; j <= k && t < k; ++j) {
      const auto l = labels[i * (k + 1) + j];
      if (l < 0 || l == ids[i]) continue;
      (*rows)[i * k + t++] = static_cast<int32_t>(l);
    }
  }
}

int Main(int argc, char** argv) {
  HierarchicalGaussianSpec spec;
  spec.point_scale = 0.35;  // as ghhc_bench
  int k = 5, eval = 2000, threads = 0;
  int64_t exact_queries = 0;
  std::string methods = "hnsw,ivf,fhnsw,exact,gemm-ivf";
  std::string hnsw = "12:40:0", ivf = "4096:16", fhnsw = "12:40:32", gemm_ivf = "1024:8";
  for (int a = 1; a < argc; ++a) {
    std::string v;
    const std::string_view arg = argv[a];
    if (Flag(arg, "--n", &v)) {
      spec.n = std::atoll(v.c_str());
    } else if (Flag(arg, "--dim", &v)) {
      spec.dim = std::atoi(v.c_str());
    } else if (Flag(arg, "--k", &v)) {
      k = std::atoi(v.c_str());
    } else if (Flag(arg, "--eval", &v)) {
      eval = std::atoi(v.c_str());
    } else if (Flag(arg, "--seed", &v)) {
      spec.seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (Flag(arg, "--threads", &v)) {
      threads = std::atoi(v.c_str());
    } else if (Flag(arg, "--methods", &v)) {
      methods = v;
    } else if (Flag(arg, "--hnsw", &v)) {
      hnsw = v;
    } else if (Flag(arg, "--ivf", &v)) {
      ivf = v;
    } else if (Flag(arg, "--fhnsw", &v)) {
      fhnsw = v;
    } else if (Flag(arg, "--gemm-ivf", &v)) {
      gemm_ivf = v;
    } else if (Flag(arg, "--exact-queries", &v)) {
      exact_queries = std::atoll(v.c_str());
    } else {
      std::fprintf(stderr, "unknown flag %s (see the comment at the top of the file)\n", argv[a]);
      return 2;
    }
  }
  if (threads <= 0) threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto has = [&](const char* m) { return ("," + methods + ",").find(std::string(",") + m + ",") !=
                                         std::string::npos; };

  // Data and the normalisation FitGhhc applies (centre, unit length, x 0.9).
  HierarchicalGaussianData data = GenerateHierarchicalGaussian(spec);
  const int64_t n = spec.n, d = spec.dim;
  RowMat<float> x = Eigen::Map<const RowMat<float>>(data.x.data(), n, d);
  const Eigen::RowVectorXf mean = x.colwise().mean();
  for (int64_t i = 0; i < n; ++i) {
    x.row(i) -= mean;
    x.row(i) *= 0.9f / x.row(i).norm();
  }
  // Query points and the evaluated subset.
  std::mt19937_64 rng(spec.seed * 7919 + 17);
  std::vector<uint8_t> mask;
  std::vector<int64_t> queries;
  constexpr int64_t kDraws = 202000;
  if (kDraws < 2 * n) {
    mask.assign(n, 0);
    for (int64_t t = 0; t < kDraws; ++t) mask[rng() % n] = 1;
    for (int64_t i = 0; i < n; ++i) {
      if (mask[i]) queries.push_back(i);
    }
  } else {
    queries.resize(n);
    for (int64_t i = 0; i < n; ++i) queries[i] = i;
  }
  const int64_t nq = static_cast<int64_t>(queries.size());
  std::vector<int64_t> eval_ids = queries;
  std::shuffle(eval_ids.begin(), eval_ids.end(), rng);
  eval_ids.resize(std::min<int64_t>(eval, nq));
  std::sort(eval_ids.begin(), eval_ids.end());
  std::printf("data n=%lld d=%lld queries=%lld eval=%zu threads=%d\n",
              static_cast<long long>(n), static_cast<long long>(d), static_cast<long long>(nq),
              eval_ids.size(), threads);

  auto t0 = Clock::now();
  std::vector<int32_t> truth;
  ExactKnn(x, eval_ids, k, threads, &truth);
  const double truth_s = Since(t0);
  std::printf("exact_eval queries=%zu seconds=%.2f\n", eval_ids.size(), truth_s);
  std::fflush(stdout);

  if (has("exact")) {
    std::vector<int64_t> qs = queries;
    if (exact_queries > 0 && exact_queries < nq) {
      qs = eval_ids;  // a random subset already; extend it if asked for more
      std::vector<int64_t> extra = queries;
      std::shuffle(extra.begin(), extra.end(), rng);
      qs.insert(qs.end(), extra.begin(), extra.begin() + (exact_queries - qs.size()));
    }
    std::vector<int32_t> table;
    t0 = Clock::now();
    ExactKnn(x, qs, k, threads, &table);
    const double s = Since(t0);
    std::printf("method=exact queries_timed=%zu seconds=%.2f seconds_all_queries=%.2f\n",
                qs.size(), s, s * nq / qs.size());
    std::fflush(stdout);
  }

  if (has("hnsw")) {
    for (const auto& p : ParseList(hnsw)) {
      ghhc::KnnOptions o;
      o.k = k;
      o.exact_max_points = 0;
      o.method = ghhc::KnnMethod::kHnsw;
      o.hnsw_m = p[0];
      o.hnsw_ef_construction = p[1];
      o.hnsw_ef_search = p.size() > 2 ? p[2] : 0;
      o.seed = spec.seed;
      o.num_threads = threads;
      NullRunContext ctx;
      t0 = Clock::now();
      auto table = ghhc::NearestNeighborTable(x, o, ctx, [](double) {}, mask);
      const double s = Since(t0);
      if (!table.ok()) {
        std::fprintf(stderr, "hnsw: %s\n", std::string(table.status().message()).c_str());
        return 1;
      }
      std::vector<int32_t> rows;
      for (int64_t id : eval_ids) {
        rows.insert(rows.end(), table->begin() + id * k, table->begin() + (id + 1) * k);
      }
      std::printf("method=hnswlib m=%d efc=%d efs=%d seconds=%.2f recall=%.4f\n", p[0], p[1],
                  o.hnsw_ef_search, s, Recall(rows, truth, k));
      std::fflush(stdout);
    }
  }

  if (has("gemm-ivf")) {
    for (const auto& p : ParseList(gemm_ivf)) {
      ghhc::IvfOptions o;
      o.k = k;
      o.list_size = p[0];
      o.probes = p[1];
      o.seed = spec.seed;
      o.num_threads = threads;
      NullRunContext ctx;
      std::vector<int32_t> table(n * k);
      t0 = Clock::now();
      absl::Status st = ghhc::IvfTable(x, o, ctx, [](double) {}, mask, table.data());
      const double s = Since(t0);
      if (!st.ok()) {
        std::fprintf(stderr, "gemm-ivf: %s\n", std::string(st.message()).c_str());
        return 1;
      }
      std::vector<int32_t> rows;
      for (int64_t id : eval_ids) {
        rows.insert(rows.end(), table.begin() + id * k, table.begin() + (id + 1) * k);
      }
      std::printf("method=gemm_ivf list=%d probes=%d seconds=%.2f recall=%.4f\n", p[0], p[1], s,
                  Recall(rows, truth, k));
      std::fflush(stdout);
    }
  }

  std::vector<float> qx(nq * d);
  for (int64_t i = 0; i < nq; ++i) {
    std::copy(x.row(queries[i]).data(), x.row(queries[i]).data() + d, qx.data() + i * d);
  }
  std::vector<int64_t> eval_pos(eval_ids.size());  // positions of eval_ids in queries
  for (size_t e = 0; e < eval_ids.size(); ++e) {
    eval_pos[e] = std::lower_bound(queries.begin(), queries.end(), eval_ids[e]) - queries.begin();
  }
  auto faiss_recall = [&](const std::vector<faiss::Index::idx_t>& labels) {
    std::vector<faiss::Index::idx_t> sub;
    for (int64_t pos : eval_pos) {
      sub.insert(sub.end(), labels.begin() + pos * (k + 1), labels.begin() + (pos + 1) * (k + 1));
    }
    std::vector<int32_t> rows;
    DropSelf(sub, eval_ids, k, &rows);
    return Recall(rows, truth, k);
  };

  if (has("ivf")) {
    for (const auto& p : ParseList(ivf)) {
      const int nlist = p[0];
      faiss::IndexFlatL2 quantizer(d);
      faiss::IndexIVFFlat index(&quantizer, d, nlist, faiss::METRIC_L2);
      index.cp.seed = static_cast<int>(spec.seed);
      t0 = Clock::now();
      // faiss's default training sample: 256 points per list.
      const int64_t stride = std::max<int64_t>(1, n / (256LL * nlist));
      RowMat<float> sample(n / stride, d);
      for (int64_t i = 0; i < sample.rows(); ++i) sample.row(i) = x.row(i * stride);
      index.train(sample.rows(), sample.data());
      const double train_s = Since(t0);
      index.add(n, x.data());
      const double add_s = Since(t0) - train_s;
      std::vector<float> dist(nq * (k + 1));
      std::vector<faiss::Index::idx_t> labels(nq * (k + 1));
      for (size_t pi = 1; pi < p.size(); ++pi) {
        index.nprobe = p[pi];
        const auto s0 = Clock::now();
        index.search(nq, qx.data(), k + 1, dist.data(), labels.data());
        const double search_s = Since(s0);
        std::printf(
            "method=faiss_ivf nlist=%d nprobe=%d train_s=%.2f add_s=%.2f search_s=%.2f "
            "seconds=%.2f recall=%.4f\n",
            nlist, p[pi], train_s, add_s, search_s, train_s + add_s + search_s,
            faiss_recall(labels));
        std::fflush(stdout);
      }
    }
  }

  if (has("fhnsw")) {
    for (const auto& p : ParseList(fhnsw)) {
      faiss::IndexHNSWFlat index(d, p[0]);
      index.hnsw.efConstruction = p[1];
      t0 = Clock::now();
      index.add(n, x.data());
      const double add_s = Since(t0);
      std::vector<float> dist(nq * (k + 1));
      std::vector<faiss::Index::idx_t> labels(nq * (k + 1));
      for (size_t pi = 2; pi < p.size(); ++pi) {
        index.hnsw.efSearch = p[pi];
        const auto s0 = Clock::now();
        index.search(nq, qx.data(), k + 1, dist.data(), labels.data());
        const double search_s = Since(s0);
        std::printf(
            "method=faiss_hnsw m=%d efc=%d efs=%d add_s=%.2f search_s=%.2f seconds=%.2f "
            "recall=%.4f\n",
            p[0], p[1], p[pi], add_s, search_s, add_s + search_s, faiss_recall(labels));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace dendro

int main(int argc, char** argv) { return dendro::Main(argc, argv); }
