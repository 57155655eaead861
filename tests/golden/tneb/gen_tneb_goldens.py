#!/usr/bin/python3
"""Golden values for t-NEB's mixture density, from SciPy.

A 3-component mixture in 3 dimensions (two Student-t components with 1 and
4.5 degrees of freedom, one Gaussian), evaluated at 12 points with
scipy.stats.multivariate_t / multivariate_normal and logsumexp. Writes
mixture_density.json next to this script.

Usage: /usr/bin/python3 tests/golden/tneb/gen_tneb_goldens.py
"""
import json
import os

import numpy as np
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, multivariate_t


def main():
    rng = np.random.default_rng(20240611)
    d = 3
    weights = np.array([0.5, 0.3, 0.2])
    means = np.array([[0.0, 0.0, 0.0], [3.0, -1.0, 0.5], [-2.0, 2.0, 1.0]])
    scales = []
    for _ in range(3):
        a = rng.normal(size=(d, d))
        scales.append(a @ a.T + 0.5 * np.eye(d))
    dof = [1.0, 4.5, None]  # None = Gaussian
    points = np.vstack([means, rng.normal(scale=3.0, size=(9, d))])
    comp = np.empty((len(points), 3))
    for k in range(3):
        if dof[k] is None:
            lp = multivariate_normal(mean=means[k], cov=scales[k]).logpdf(points)
        else:
            lp = multivariate_t(loc=means[k], shape=scales[k], df=dof[k]).logpdf(points)
        comp[:, k] = np.log(weights[k]) + lp
    out = {
        "generator": "scipy " + __import__("scipy").__version__,
        "weights": weights.tolist(),
        "means": means.tolist(),
        "scales": [s.tolist() for s in scales],
        "dof": dof,
        "points": points.tolist(),
        "component_log_prob": comp.tolist(),
        "log_density": logsumexp(comp, axis=1).tolist(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mixture_density.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
