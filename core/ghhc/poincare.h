// Poincaré-ball geometry used by gHHC (Monath et al., "Gradient-based
// Hierarchical Clustering using Continuous Representations of Trees in
// Hyperbolic Space", sections 2-4). Scalar double-precision reference forms;
// the training kernels (objective.h) evaluate the same formulas in batches.
//
// All points must lie strictly inside the unit ball (||x|| < 1); the
// functions do not check this (callers keep nodes at norm <= max_node_norm
// < 1 and data points at point_norm < 1).
#ifndef DENDRO_CORE_GHHC_POINCARE_H_
#define DENDRO_CORE_GHHC_POINCARE_H_

#include <cmath>
#include <type_traits>

#include "Eigen/Core"

namespace dendro::ghhc {

using VecRef = Eigen::Ref<const Eigen::VectorXd>;

// Eq. 1: d(x, y) = acosh(1 + 2 ||x - y||^2 / ((1 - ||x||^2)(1 - ||y||^2))).
double PoincareDistance(const VecRef& x, const VecRef& y);

// Eq. 2: ||x||_D = d(x, 0) = 2 atanh(||x||), from the Euclidean norm.
double PoincareNorm(double euclidean_norm);

// Eq. 3 (margin = 0) and eq. 16: the child-to-parent dissimilarity
//   d_cp(c, p; margin) = d(c, p) * (1 + max(||p||_D - ||c||_D + margin, 0)).
// Not symmetric: a parent with a larger norm than its child is penalised.
double ChildParentDissimilarity(const VecRef& child, const VecRef& parent, double margin = 0.0);

// Euclidean gradient of d(x, y) with respect to y (by symmetry, swap the
// arguments for the gradient with respect to x). At x == y the distance is
// not differentiable; the zero vector is returned there.
Eigen::VectorXd PoincareDistanceGradient(const VecRef& x, const VecRef& y);

// Euclidean gradient of ||y||_D = 2 atanh(||y||): 2 y / (||y|| (1 - ||y||^2));
// zero at the origin (where the norm has a kink).
Eigen::VectorXd PoincareNormGradient(const VecRef& y);

// Euclidean gradients of ChildParentDissimilarity with respect to the child
// and to the parent (either pointer may be null). The max(., 0) kink is
// resolved as "inactive" when its argument is exactly 0.
void ChildParentGradient(const VecRef& child, const VecRef& parent, double margin,
                         Eigen::VectorXd* grad_child, Eigen::VectorXd* grad_parent);

// Eq. 20: the Riemannian gradient is the Euclidean gradient times
// (1 - ||z||^2)^2 / 4 (the inverse of the Poincaré metric's conformal factor).
double RiemannianScale(double squared_norm);

// Eq. 19 followed by the authors' clipping, applied in place to
// v = z + step (the caller adds the step): v stays if ||v|| < 1, else it
// becomes v / ||v|| * (1 - epsilon); then, if its norm exceeds max_norm, it
// is scaled back to norm max_norm. Any dense Eigen vector (float or double).
template <typename Vec>
void Retract(Vec&& z, double max_norm, double epsilon = 1e-5) {
  double sq = static_cast<double>(z.squaredNorm());
  if (sq >= 1.0) {
    const double s = (1.0 - epsilon) / std::sqrt(sq);
    z *= static_cast<typename std::decay_t<Vec>::Scalar>(s);
    sq = (1.0 - epsilon) * (1.0 - epsilon);
  }
  if (sq > max_norm * max_norm) {
    z *= static_cast<typename std::decay_t<Vec>::Scalar>(max_norm / std::sqrt(sq));
  }
}

}  // namespace dendro::ghhc

#endif  // DENDRO_CORE_GHHC_POINCARE_H_
