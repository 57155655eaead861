// The largest eigenpairs of a dense symmetric matrix, without the full
// eigenvector matrix: Householder tridiagonalisation, all eigenvalues of the
// tridiagonal matrix (implicit QL/QR, no rotations accumulated), inverse
// iteration on the tridiagonal matrix for the wanted ones only, and the
// Householder reflections applied to those r vectors. The eigenvector
// accumulation of a full solver costs about 6 d^3 flops; this path costs
// about 4/3 d^3 (the reduction) plus O(d^2 r).
#ifndef DENDRO_CORE_HPPCA_TOP_EIGEN_H_
#define DENDRO_CORE_HPPCA_TOP_EIGEN_H_

#include <cstdint>

#include "Eigen/Core"

namespace dendro {

// The r largest eigenvalues of the symmetric n x n matrix `a` (only its
// lower triangle is read), descending, into `values` (r), and orthonormal
// eigenvectors for them into the columns of `vectors` (n x r). 0 <= r <= n.
// Deterministic: no random start vectors, a fixed number of iterations.
void TopEigenpairs(const Eigen::MatrixXd& a, int64_t r, Eigen::VectorXd* values,
                   Eigen::MatrixXd* vectors);

// The same result (the r largest eigenpairs, descending, lower triangle
// read) by the cheaper route for the sizes: TopEigenpairs when 4 r <= n,
// Eigen's full symmetric eigensolver otherwise (there the eigenvector
// accumulation is no longer the bulk of the work).
void LargestEigenpairs(const Eigen::MatrixXd& a, int64_t r, Eigen::VectorXd* values,
                       Eigen::MatrixXd* vectors);

}  // namespace dendro

#endif  // DENDRO_CORE_HPPCA_TOP_EIGEN_H_
