#include "core/ghhc/poincare.h"

#include <algorithm>
#include <cmath>

namespace dendro::ghhc {

double PoincareDistance(const VecRef& x, const VecRef& y) {
  const double alpha = 1.0 - x.squaredNorm();
  const double beta = 1.0 - y.squaredNorm();
  const double diff = (x - y).squaredNorm();
  const double g = 2.0 * diff / (alpha * beta);  // gamma - 1
  // acosh(1 + g) = log(1 + g + sqrt(g (g + 2))), accurate for small g.
  return std::log1p(g + std::sqrt(g * (g + 2.0)));
}

double PoincareNorm(double euclidean_norm) { return 2.0 * std::atanh(euclidean_norm); }

double ChildParentDissimilarity(const VecRef& child, const VecRef& parent, double margin) {
  const double pen =
      std::max(PoincareNorm(parent.norm()) - PoincareNorm(child.norm()) + margin, 0.0);
  return PoincareDistance(child, parent) * (1.0 + pen);
}

Eigen::VectorXd PoincareDistanceGradient(const VecRef& x, const VecRef& y) {
  const double alpha = 1.0 - x.squaredNorm();
  const double beta = 1.0 - y.squaredNorm();
  const double diff = (x - y).squaredNorm();
  const double g = 2.0 * diff / (alpha * beta);
  const double root = std::sqrt(g * (g + 2.0));  // sqrt(gamma^2 - 1)
  if (!(root > 0.0)) return Eigen::VectorXd::Zero(y.size());
  // d gamma / dy = 4 / (alpha beta) * ((y - x) + ||x - y||^2 y / beta).
  const double c = 4.0 / (alpha * beta * root);
  return c * ((y - x) + (diff / beta) * y);
}

Eigen::VectorXd PoincareNormGradient(const VecRef& y) {
  const double n = y.norm();
  if (!(n > 0.0)) return Eigen::VectorXd::Zero(y.size());
  return (2.0 / (n * (1.0 - n * n))) * y;
}

void ChildParentGradient(const VecRef& child, const VecRef& parent, double margin,
                         Eigen::VectorXd* grad_child, Eigen::VectorXd* grad_parent) {
  const double arg = PoincareNorm(parent.norm()) - PoincareNorm(child.norm()) + margin;
  const bool active = arg > 0.0;
  const double factor = 1.0 + (active ? arg : 0.0);
  const double dist = PoincareDistance(child, parent);
  if (grad_parent != nullptr) {
    *grad_parent = factor * PoincareDistanceGradient(child, parent);
    if (active) *grad_parent += dist * PoincareNormGradient(parent);
  }
  if (grad_child != nullptr) {
    *grad_child = factor * PoincareDistanceGradient(parent, child);
    if (active) *grad_child -= dist * PoincareNormGradient(child);
  }
}

double RiemannianScale(double squared_norm) {
  const double t = 1.0 - squared_norm;
  return t * t / 4.0;
}

}  // namespace dendro::ghhc
