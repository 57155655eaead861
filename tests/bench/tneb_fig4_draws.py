#!/usr/bin/python3
"""Fresh draws of the five Figure-4 recipes of the t-NEB paper (issue 12).

The recipes are those of tests/golden/tneb/gen_fig4_sets.py (the authors'
scikit-learn construction, 1,000 points), with the generator's random_state
replaced by each sample seed. For blobs, aniso and varied that also moves the
blob centres, so every seed is a new draw of the recipe, not a resample of
the golden set. Writes OUT/fig4_<name>_rs<seed>_X.npy (float32, 1000 x 2) and
_y.npy (int32).

Usage: /usr/bin/python3 tests/bench/tneb_fig4_draws.py OUT [SEED ...]   (default seeds 1 2 3)
"""
import os
import sys

import numpy as np
from sklearn import datasets


def draws(seed, n=1000):
    x, y = datasets.make_blobs(n_samples=n, random_state=seed)
    return {
        "noisy_circles": datasets.make_circles(
            n_samples=n, factor=0.5, noise=0.05, random_state=seed),
        "noisy_moons": datasets.make_moons(n_samples=n, noise=0.05, random_state=seed),
        "blobs": (x, y),
        "aniso": (np.dot(x, [[0.6, -0.6], [-0.4, 0.8]]), y),
        "varied": datasets.make_blobs(
            n_samples=n, cluster_std=[1.0, 2.5, 0.5], random_state=seed),
    }


def main():
    out = sys.argv[1]
    seeds = [int(s) for s in sys.argv[2:]] or [1, 2, 3]
    os.makedirs(out, exist_ok=True)
    for seed in seeds:
        for name, (x, y) in draws(seed).items():
            base = os.path.join(out, f"fig4_{name}_rs{seed}")
            np.save(base + "_X.npy", np.asarray(x, dtype=np.float32))
            np.save(base + "_y.npy", np.asarray(y, dtype=np.int32))


if __name__ == "__main__":
    main()
