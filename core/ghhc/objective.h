// gHHC objectives and their analytic gradients (internal to core/ghhc;
// exposed for tests).
//
// Triple objective (eq. 15). For a triple (x_i, x_j, x_k) whose most similar
// pair is (x_i, x_j), and every internal node n with d_cp as in eq. 3:
//   a_n = d_cp(x_i, n), b_n = d_cp(x_j, n), c_n = d_cp(x_k, n)
//   P_n  = softmax_n(-max(a_n, b_n) + g_n)                   (eq. 12)
//   n*   = argmax_n P_n
//   Q_n  = softmax_{n != n*}(-max(a_n, b_n, c_n) + h_n), Q_n* = 0  (eqs. 13-14)
//   loss = sum_n s(a_n (P_n - Q_n)) + s(b_n (P_n - Q_n)) + s(c_n (Q_n - P_n))
// with s the logistic sigmoid (the paper's eq. 15) or softplus (the
// log-sigmoid loss of Bayesian Personalised Ranking, which the authors' code
// optimises). g and h are Gumbel noise (section 4.2), supplied by the caller
// so that the objective is a deterministic function of the nodes. The
// gradient flows through the distances and both softmaxes; n* is piecewise
// constant, and the max(.) are differentiated as subgradients that route to
// the first argument on ties.
//
// Margin objective (eqs. 16-17): sum over internal nodes c with a parent p
// (eq. 4 among internal nodes) of d_cp(z_c, z_p; gamma).
#ifndef DENDRO_CORE_GHHC_OBJECTIVE_H_
#define DENDRO_CORE_GHHC_OBJECTIVE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "Eigen/Core"
#include "absl/types/span.h"

namespace dendro::ghhc {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class Link { kSigmoid, kSoftplus };

// Scratch space reused across calls (one per thread).
template <typename T>
struct TripleWorkspace {
  RowMat<T> s, dist, dcp, root, diffsq, factor, g;
  Eigen::Array<T, Eigen::Dynamic, 1> node_sqnorm, node_pnorm;
};

// Evaluates the triple objective on b = points.rows() / 3 triples: rows 3t,
// 3t + 1, 3t + 2 of `points` are x_i, x_j, x_k of triple t. `nodes` is M x d.
// `noise` is b x 2M (columns [0, M) are g, [M, 2M) are h) or has 0 rows (no
// noise). Returns the sum of the per-triple losses; if `grad` is non-null,
// adds the Euclidean gradient with respect to `nodes` (M x d) to it; if
// `point_grad` is non-null, sets it (resized to 3b x d) to the Euclidean
// gradient with respect to the rows of `points` (a row that occurs twice
// gets one gradient per occurrence).
// Requires every row of `points` and `nodes` to have norm < 1.
template <typename T>
double TripleObjective(const Eigen::Ref<const RowMat<T>>& points,
                       const Eigen::Ref<const RowMat<T>>& nodes,
                       const Eigen::Ref<const RowMat<T>>& noise, Link link, RowMat<T>* grad,
                       TripleWorkspace<T>* ws, RowMat<T>* point_grad = nullptr);

// Eq. 4 among the internal nodes: node c may take as parent a node p that
// precedes it in the order (Euclidean norm, index) -- the section 4.2 tie
// rule -- and picks the eligible p with the smallest d_cp(z_c, z_p), which for
// an eligible parent equals the Poincaré distance (lowest index on ties). The
// first node in that order (smallest norm) is the root and gets -1. Uses up
// to `num_threads` threads for M >= 512. With `float_products` the distances
// come from float32 products (about twice as fast; near-ties may resolve
// differently), as in the margin phases of training. `cancelled`, if set,
// is polled before each block of 256 nodes and every 16 nodes within a
// block (from any of the threads); once it returns true the rest is skipped
// and the result is empty.
std::vector<int32_t> NodeParents(const RowMat<double>& nodes, int num_threads = 1,
                                 bool float_products = false,
                                 const std::function<bool()>& cancelled = nullptr);

// Eq. 17 with parents `parent` (-1 = none). Adds the Euclidean gradient with
// respect to every node to `grad` (M x d) if non-null.
double MarginObjective(const RowMat<double>& nodes, absl::Span<const int32_t> parent, double margin,
                       RowMat<double>* grad);

// For each row of `points` (n x d, norms > every node norm), the node with the
// smallest Poincaré distance among those with allowed[node] (all if
// `allowed` is empty); lowest index on ties. This is eq. 4 for data points:
// every internal node has a smaller norm than any point, so d_cp = d there.
// Single-threaded; the caller parallelises over row blocks. `cancelled`, if
// set, is polled before each block of 512 rows; once it returns true the
// function returns with the rest of `out` unwritten (the caller must then
// discard it).
void NearestNodes(const Eigen::Ref<const RowMat<float>>& points, const RowMat<float>& nodes,
                  absl::Span<const uint8_t> allowed, int32_t* out,
                  const std::function<bool()>& cancelled = nullptr);

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_OBJECTIVE_H_
