#!/usr/bin/python3
"""scikit-learn reference timing for tneb_bench (the t-NEB EM step).

GaussianMixture(covariance_type='full') with the same number of components,
the same standardised data, ridge (reg_covar 1e-4), tolerance and iteration
cap as t-NEB:
  * per-iteration cost: one initialisation, the EM loop forced to run 1 and
    1 + ITERS iterations (tol = 0); the difference / ITERS, exactly as
    tneb_bench --mode em measures Dendro;
  * a plain fit with tol 0.01 and max_iter 100 (n_init 1): time, iterations.

Usage: /usr/bin/python3 tests/bench/tneb_sklearn_reference.py X.npy [M] [ITERS]
"""
import sys
import time
import warnings

import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture


def fit_seconds(x, m, max_iter, tol):
    gm = GaussianMixture(n_components=m, covariance_type="full", tol=tol, reg_covar=1e-4,
                         max_iter=max_iter, n_init=1, init_params="kmeans", random_state=0)
    t0 = time.perf_counter()
    gm.fit(x)
    return time.perf_counter() - t0, gm.n_iter_


def main():
    path = sys.argv[1]
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    x = np.load(path).astype(np.float64)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    print(f"data {path}: {x.shape[0]} x {x.shape[1]}, m = {m}, sklearn {sklearn.__version__}, "
          f"numpy {np.__version__}")
    warnings.simplefilter("ignore", ConvergenceWarning)
    t1, n1 = fit_seconds(x, m, 1, 0.0)
    t2, n2 = fit_seconds(x, m, 1 + iters, 0.0)
    print(f"sklearn per iteration {(t2 - t1) / (n2 - n1):.4f} s  "
          f"({n1} its {t1:.3f} s, {n2} its {t2:.3f} s)")
    t, n = fit_seconds(x, m, 100, 0.01)
    print(f"sklearn fit tol 0.01, max_iter 100: {t:.2f} s, {n} iterations")


if __name__ == "__main__":
    main()
