#include "core/ghhc/objective.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/ghhc/poincare.h"

namespace dendro::ghhc {
namespace {

template <typename T>
using RowArr = Eigen::Array<T, 1, Eigen::Dynamic>;

// softplus(y) = log(1 + e^y), stable for large |y|.
template <typename Derived>
auto Softplus(const Eigen::ArrayBase<Derived>& y) {
  using T = typename Derived::Scalar;
  return y.max(T(0)) + (-y.abs()).exp().log1p();
}

template <typename Derived>
auto Sigmoid(const Eigen::ArrayBase<Derived>& y) {
  using T = typename Derived::Scalar;
  return T(1) / (T(1) + (-y).exp());
}

}  // namespace

template <typename T>
double TripleObjective(const Eigen::Ref<const RowMat<T>>& points,
                       const Eigen::Ref<const RowMat<T>>& nodes,
                       const Eigen::Ref<const RowMat<T>>& noise, Link link, RowMat<T>* grad,
                       TripleWorkspace<T>* ws, RowMat<T>* point_grad) {
  const Eigen::Index r = points.rows();
  const Eigen::Index m = nodes.rows();
  const Eigen::Index b = r / 3;
  const bool has_noise = noise.rows() > 0;
  TripleWorkspace<T>& w = *ws;

  // Node norms (Euclidean squared and Poincaré), in double for the atanh.
  w.node_sqnorm = nodes.rowwise().squaredNorm().array();
  w.node_pnorm.resize(m);
  for (Eigen::Index n = 0; n < m; ++n) {
    w.node_pnorm[n] = static_cast<T>(PoincareNorm(std::sqrt(double{w.node_sqnorm[n]})));
  }
  const RowArr<T> beta = T(1) - w.node_sqnorm.transpose();
  const RowArr<T> node_pnorm = w.node_pnorm.transpose();

  // Point-to-node distances as one matrix product.
  w.s.resize(r, m);
  w.s.noalias() = points * nodes.transpose();
  w.dist.resize(r, m);
  w.dcp.resize(r, m);
  w.root.resize(r, m);
  w.diffsq.resize(r, m);
  w.factor.resize(r, m);
  w.g.resize(r, m);
  std::vector<T> alpha(r);
  for (Eigen::Index q = 0; q < r; ++q) {
    const T xx = points.row(q).squaredNorm();
    alpha[q] = T(1) - xx;
    const T px = static_cast<T>(PoincareNorm(std::sqrt(double{xx})));
    w.diffsq.row(q).array() =
        (xx + w.node_sqnorm.transpose() - T(2) * w.s.row(q).array()).max(T(0));
    const RowArr<T> gm1 = (T(2) / alpha[q]) * w.diffsq.row(q).array() / beta;  // gamma - 1
    w.root.row(q).array() = (gm1 * (gm1 + T(2))).sqrt();
    w.dist.row(q).array() = (gm1 + w.root.row(q).array()).log1p();
    w.factor.row(q).array() = T(1) + (node_pnorm - px).max(T(0));
    w.dcp.row(q).array() = w.dist.row(q).array() * w.factor.row(q).array();
  }

  double loss = 0.0;
  const bool want_grad = grad != nullptr || point_grad != nullptr;
  RowArr<T> mm(m), u(m), lp(m), lq(m), p(m), qd(m), delta(m), sa(m), sb(m), sc(m), gd(m), ga(m),
      gb(m), gc(m), gmax(m), gu(m);
  for (Eigen::Index t = 0; t < b; ++t) {
    const auto a = w.dcp.row(3 * t).array();
    const auto bb = w.dcp.row(3 * t + 1).array();
    const auto c = w.dcp.row(3 * t + 2).array();
    mm = a.max(bb);
    u = mm.max(c);
    lp = -mm;
    lq = -u;
    if (has_noise) {
      lp += noise.row(t).head(m).array();
      lq += noise.row(t).tail(m).array();
    }
    Eigen::Index nstar = 0;
    const T lp_max = lp.maxCoeff(&nstar);
    p = (lp - lp_max).exp();
    p /= p.sum();
    lq[nstar] = -std::numeric_limits<T>::infinity();
    const T lq_max = lq.maxCoeff();
    qd = (lq - lq_max).exp();
    qd /= qd.sum();
    delta = p - qd;
    const RowArr<T> ya = a * delta;
    const RowArr<T> yb = bb * delta;
    const RowArr<T> yc = -c * delta;
    if (link == Link::kSigmoid) {
      sa = Sigmoid(ya);
      sb = Sigmoid(yb);
      sc = Sigmoid(yc);
      loss += double{sa.sum()} + double{sb.sum()} + double{sc.sum()};
      sa = sa * (T(1) - sa);
      sb = sb * (T(1) - sb);
      sc = sc * (T(1) - sc);
    } else {
      loss += double{Softplus(ya).sum()} + double{Softplus(yb).sum()} + double{Softplus(yc).sum()};
      sa = Sigmoid(ya);
      sb = Sigmoid(yb);
      sc = Sigmoid(yc);
    }
    if (!want_grad) continue;
    // dL/d(delta), then through delta = P - Q into the two softmaxes.
    gd = sa * a + sb * bb - sc * c;
    ga = sa * delta;
    gb = sb * delta;
    gc = -sc * delta;
    // P = softmax(-mm + g): dL/dmm = -P (gd - <P, gd>).
    gmax = -p * (gd - (p * gd).sum());
    // Q = softmax(-u + h) over n != n*: dL/du = Q (gd - <Q, gd>) (0 at n*).
    gu = qd * (gd - (qd * gd).sum());
    // u = max(mm, c), mm = max(a, b): route to the larger (first on ties).
    gmax += (mm >= c).select(gu, T(0));
    gc += (mm >= c).select(T(0), gu);
    ga += (a >= bb).select(gmax, T(0));
    gb += (a >= bb).select(T(0), gmax);
    w.g.row(3 * t).array() = ga;
    w.g.row(3 * t + 1).array() = gb;
    w.g.row(3 * t + 2).array() = gc;
  }
  if (point_grad != nullptr) point_grad->setZero(3 * b, points.cols());
  if (!want_grad || b == 0) return loss;

  // d dcp / dz_n = factor * d dist / dz_n + [active] dist * d ||z_n||_D / dz_n
  //   d dist / dz_n = 4 / (alpha beta root) * ((1 + diffsq / beta) z_n - x)
  //   d ||z||_D / dz = 2 / (beta ||z||) z
  // => grad = diag(sum_r coef_r) Z - W^T X.
  // With respect to the point x (the distance is symmetric; the factor
  // 1 + max(0, ||z_n||_D - ||x||_D) falls as ||x||_D grows):
  //   d dcp / dx = factor * 4 / (alpha beta root) * ((1 + diffsq / alpha) x - z_n)
  //                - [active] dist * 2 / (alpha ||x||) x
  // => point_grad = diag(row coefficients) X - W Z.
  RowArr<T> diag = RowArr<T>::Zero(m);
  Eigen::Array<T, Eigen::Dynamic, 1> point_diag;
  if (point_grad != nullptr) point_diag.setZero(3 * b);
  const RowArr<T> inv_beta = T(1) / beta;
  RowArr<T> norm_coef(m);
  for (Eigen::Index n = 0; n < m; ++n) {
    const T zn = std::sqrt(w.node_sqnorm[n]);
    norm_coef[n] = zn > T(0) ? T(2) / (beta[n] * zn) : T(0);
  }
  for (Eigen::Index q = 3 * b - 1; q >= 0; --q) {
    auto wrow = w.s.row(q).array();  // reuse the product buffer for W
    const auto root = w.root.row(q).array();
    wrow = (root > T(0))
               .select(w.g.row(q).array() * w.factor.row(q).array() * (T(4) / alpha[q]) * inv_beta /
                           root,
                       T(0));
    if (point_grad != nullptr) {
      const T xn = points.row(q).norm();
      const T x_coef = xn > T(0) ? T(2) / (alpha[q] * xn) : T(0);
      point_diag[q] =
          (wrow * (T(1) + w.diffsq.row(q).array() / alpha[q])).sum() -
          (w.factor.row(q).array() > T(1))
              .select(w.g.row(q).array() * w.dist.row(q).array() * x_coef, T(0))
              .sum();
    }
    if (grad == nullptr) continue;
    diag += wrow * (T(1) + w.diffsq.row(q).array() * inv_beta);
    diag += (w.factor.row(q).array() > T(1))
                .select(w.g.row(q).array() * w.dist.row(q).array() * norm_coef, T(0));
  }
  if (point_grad != nullptr) {
    point_grad->array() = points.topRows(3 * b).array().colwise() * point_diag;
    point_grad->noalias() -= w.s.topRows(3 * b) * nodes;
  }
  if (grad == nullptr) return loss;
  grad->array() += nodes.array().colwise() * diag.transpose();
  grad->noalias() -= w.s.topRows(3 * b).transpose() * points.topRows(3 * b);
  return loss;
}

template double TripleObjective<float>(const Eigen::Ref<const RowMat<float>>&,
                                       const Eigen::Ref<const RowMat<float>>&,
                                       const Eigen::Ref<const RowMat<float>>&, Link, RowMat<float>*,
                                       TripleWorkspace<float>*, RowMat<float>*);
template double TripleObjective<double>(const Eigen::Ref<const RowMat<double>>&,
                                        const Eigen::Ref<const RowMat<double>>&,
                                        const Eigen::Ref<const RowMat<double>>&, Link,
                                        RowMat<double>*, TripleWorkspace<double>*,
                                        RowMat<double>*);

std::vector<int32_t> NodeParents(const RowMat<double>& nodes, int num_threads,
                                 bool float_products, const std::function<bool()>& cancelled) {
  const Eigen::Index m = nodes.rows();
  const Eigen::VectorXd sq = nodes.rowwise().squaredNorm();
  const RowMat<float> nodes_f = float_products ? nodes.cast<float>() : RowMat<float>();
  std::vector<int32_t> parent(m, -1);
  constexpr Eigen::Index kBlock = 256;
  const Eigen::Index blocks = (m + kBlock - 1) / kBlock;
  std::atomic<bool> stop{false};
  // The products of a block with all nodes go to per-thread buffers reused
  // across blocks: with 100,000 nodes one block's products take 100 MB
  // (float) or 200 MB (double), which are not worth allocating per block.
  // Float products are widened entry by entry, exactly as a cast would.
#pragma omp parallel num_threads(num_threads) if (m >= 512)
  {
    RowMat<float> sf;
    RowMat<double> sd;
#pragma omp for schedule(dynamic, 1)
    for (Eigen::Index blk = 0; blk < blocks; ++blk) {
      if (stop.load(std::memory_order_relaxed)) continue;
      if (cancelled && cancelled()) {
        stop.store(true);
        continue;
      }
      const Eigen::Index c0 = blk * kBlock;
      const Eigen::Index cn = std::min(kBlock, m - c0);
      if (float_products) {
        sf.noalias() = nodes_f.middleRows(c0, cn) * nodes_f.transpose();
      } else {
        sd.noalias() = nodes.middleRows(c0, cn) * nodes.transpose();
      }
      for (Eigen::Index ci = 0; ci < cn; ++ci) {
        // The scan below is O(M) per node: with very many nodes one block
        // of 256 takes a while, so the cancel is also polled every 16 nodes.
        if (ci % 16 == 15) {
          if (stop.load(std::memory_order_relaxed)) break;
          if (cancelled && cancelled()) {
            stop.store(true);
            break;
          }
        }
        const Eigen::Index c = c0 + ci;
        const float* row_f = float_products ? sf.row(ci).data() : nullptr;
        const double* row_d = float_products ? nullptr : sd.row(ci).data();
        double best = std::numeric_limits<double>::infinity();
        int32_t arg = -1;
        for (Eigen::Index p = 0; p < m; ++p) {
          // Eligible: (norm_p, p) < (norm_c, c).
          if (!(sq[p] < sq[c] || (sq[p] == sq[c] && p < c))) continue;
          const double s = float_products ? static_cast<double>(row_f[p]) : row_d[p];
          const double diff = std::max(sq[c] + sq[p] - 2.0 * s, 0.0);
          const double score = diff / (1.0 - sq[p]);  // monotone in d(z_c, z_p)
          if (score < best) {
            best = score;
            arg = static_cast<int32_t>(p);
          }
        }
        parent[c] = arg;
      }
    }
  }
  if (stop.load()) return {};
  return parent;
}

double MarginObjective(const RowMat<double>& nodes, absl::Span<const int32_t> parent, double margin,
                       RowMat<double>* grad) {
  double total = 0.0;
  Eigen::VectorXd gc, gp;
  for (Eigen::Index c = 0; c < nodes.rows(); ++c) {
    const int32_t p = parent[c];
    if (p < 0) continue;
    const Eigen::VectorXd zc = nodes.row(c).transpose();
    const Eigen::VectorXd zp = nodes.row(p).transpose();
    total += ChildParentDissimilarity(zc, zp, margin);
    if (grad != nullptr) {
      ChildParentGradient(zc, zp, margin, &gc, &gp);
      grad->row(c) += gc.transpose();
      grad->row(p) += gp.transpose();
    }
  }
  return total;
}

void NearestNodes(const Eigen::Ref<const RowMat<float>>& points, const RowMat<float>& nodes,
                  absl::Span<const uint8_t> allowed, int32_t* out,
                  const std::function<bool()>& cancelled) {
  const Eigen::Index m = nodes.rows();
  const Eigen::ArrayXf zz = nodes.rowwise().squaredNorm().array();
  const Eigen::ArrayXf inv_beta = 1.0f / (1.0f - zz);
  constexpr Eigen::Index kBlock = 512;
  RowMat<float> s;
  for (Eigen::Index r0 = 0; r0 < points.rows(); r0 += kBlock) {
    if (cancelled && cancelled()) return;
    const Eigen::Index rn = std::min(kBlock, points.rows() - r0);
    s.noalias() = points.middleRows(r0, rn) * nodes.transpose();
    for (Eigen::Index i = 0; i < rn; ++i) {
      const float xx = points.row(r0 + i).squaredNorm();
      float best = std::numeric_limits<float>::infinity();
      int32_t arg = -1;
      for (Eigen::Index n = 0; n < m; ++n) {
        if (!allowed.empty() && !allowed[n]) continue;
        const float score = std::max(xx + zz[n] - 2.0f * s(i, n), 0.0f) * inv_beta[n];
        if (score < best || arg < 0) {
          best = score;
          arg = static_cast<int32_t>(n);
        }
      }
      out[r0 + i] = arg;
    }
  }
}

}  // namespace dendro::ghhc
