// ProductsOnCallingThread: keeps Eigen's matrix products on the calling
// thread.
//
// Eigen runs a large matrix product on omp_get_max_threads() threads of its
// own when it is called outside an active OpenMP team, and a team of one is
// not active. The numeric modules run their parallel loops in teams of an
// explicit size, so a product made by the calling thread, or by a team of
// one, must stay on that thread: otherwise each product forks threads of its
// own, nested in the module's, which spin-wait whenever the other cores are
// busy (a 32-D t-NEB fit on one thread took 85 s with a busy second core and
// 1.1 s with this guard, the same result), and which gave hPPCA's Gram-route
// divergences off by about 1e-4 relative in 8 of 60 runs of an ASan build
// on a busy machine.
//
// The guard sets the calling thread's default team size to 1 for its
// lifetime and restores it after; resolve thread counts that default to
// omp_get_max_threads() before creating it. Header-only: the modules that
// use it link OpenMP themselves.
#ifndef DENDRO_CORE_COMMON_OMP_THREADS_H_
#define DENDRO_CORE_COMMON_OMP_THREADS_H_

#include <omp.h>

namespace dendro {

class ProductsOnCallingThread {
 public:
  ProductsOnCallingThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~ProductsOnCallingThread() { omp_set_num_threads(saved_); }
  ProductsOnCallingThread(const ProductsOnCallingThread&) = delete;
  ProductsOnCallingThread& operator=(const ProductsOnCallingThread&) = delete;

 private:
  const int saved_;
};

}  // namespace dendro

#endif  // DENDRO_CORE_COMMON_OMP_THREADS_H_
