#!/usr/bin/python3
"""The five 2-D datasets of the t-NEB paper's Figure 4, from scikit-learn.

Exactly the authors' construction (their corc/our_datasets.py, n_samples
1000, seed 30): noisy circles (factor 0.5, noise 0.05), noisy moons (noise
0.05), Gaussian blobs (make_blobs, 3 centres), anisotropic blobs (make_blobs
with random_state 170, multiplied by [[0.6, -0.6], [-0.4, 0.8]]) and
varied-density blobs (cluster_std [1.0, 2.5, 0.5], random_state 170).
Writes fig4_<name>_X.npy (float32, 1000 x 2) and fig4_<name>_y.npy (int32)
next to this script.

Usage: /usr/bin/python3 tests/golden/tneb/gen_fig4_sets.py
"""
import os

import numpy as np
from sklearn import datasets


def main():
    n, seed = 1000, 30
    sets = {
        "noisy_circles": datasets.make_circles(
            n_samples=n, factor=0.5, noise=0.05, random_state=seed),
        "noisy_moons": datasets.make_moons(n_samples=n, noise=0.05, random_state=seed),
        "blobs": datasets.make_blobs(n_samples=n, random_state=seed),
    }
    x, y = datasets.make_blobs(n_samples=n, random_state=170)
    sets["aniso"] = (np.dot(x, [[0.6, -0.6], [-0.4, 0.8]]), y)
    sets["varied"] = datasets.make_blobs(
        n_samples=n, cluster_std=[1.0, 2.5, 0.5], random_state=170)
    out = os.path.dirname(os.path.abspath(__file__))
    for name, (x, y) in sets.items():
        np.save(os.path.join(out, f"fig4_{name}_X.npy"), np.asarray(x, dtype=np.float32))
        np.save(os.path.join(out, f"fig4_{name}_y.npy"), np.asarray(y, dtype=np.int32))


if __name__ == "__main__":
    main()
