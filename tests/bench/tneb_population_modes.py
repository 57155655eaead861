#!/usr/bin/python3
"""The density that generated a Figure-4 blob draw, seen as a density method sees it.

For the Gaussian recipes (blobs, aniso, varied) the generating density is
known exactly: make_blobs draws equal shares of isotropic Gaussians around
centres it returns. This script evaluates that density's logarithm on a fine
grid and computes its 0-dimensional persistence in the superlevel-set
filtration (union-find over grid cells in decreasing density): every mode, the
log-density of its peak, and how far the density falls (in nats) before the
mode's region joins one with a higher peak. A mode with persistence near zero
is barely a mode at all, so no density-based method can be expected to find
it as its own cluster from a finite sample; `persistence` merging in t-NEB
orders merges by exactly this quantity, measured on the fitted mixture.

It also prints the Bayes ARI: the ARI of giving every drawn point the
component with the largest generating density, the best any clustering
could do on average.

Usage: /usr/bin/python3 tests/bench/tneb_population_modes.py
           [--grid 600] RECIPE:RANDOM_STATE ...
  RECIPE is blobs, aniso or varied; golden draws are blobs:30, aniso:170,
  varied:170 (tests/golden/tneb/gen_fig4_sets.py), fresh ones RANDOM_STATE 1-3
  (tests/bench/tneb_fig4_draws.py).
"""
import argparse

import numpy as np
from sklearn import datasets
from sklearn.metrics import adjusted_rand_score

ANISO = np.array([[0.6, -0.6], [-0.4, 0.8]])


def recipe(name, seed, n=1000):
    """Returns X, y, centres, per-component covariances (in X's coordinates)."""
    std = [1.0, 2.5, 0.5] if name == "varied" else [1.0, 1.0, 1.0]
    x, y, centres = datasets.make_blobs(
        n_samples=n, cluster_std=std, random_state=seed, return_centers=True)
    covs = [s * s * np.eye(2) for s in std]
    if name == "aniso":
        x = x @ ANISO
        centres = centres @ ANISO
        covs = [ANISO.T @ c @ ANISO for c in covs]
    return x, y, centres, covs, np.bincount(y) / len(y)


def log_component_densities(points, centres, covs, weights):
    out = []
    for mu, cov, w in zip(centres, covs, weights):
        inv = np.linalg.inv(cov)
        d = points - mu
        maha = np.einsum("ij,jk,ik->i", d, inv, d)
        out.append(np.log(w) - 0.5 * maha - np.log(2 * np.pi) - 0.5 * np.log(np.linalg.det(cov)))
    return np.stack(out, axis=1)


def persistence(logd):
    """0-d persistence of a 2-D grid function (8-neighbour superlevel sets).

    Returns a list of (peak, death) per mode, death = -inf for the global mode.
    """
    h, w = logd.shape
    flat = logd.ravel()
    order = np.argsort(-flat, kind="stable")
    parent = np.full(flat.size, -1, dtype=np.int64)
    peak = np.empty(flat.size)

    def find(i):
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    modes = []
    for i in order:
        r, c = divmod(int(i), w)
        roots = set()
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rr, cc = r + dr, c + dc
                if (dr or dc) and 0 <= rr < h and 0 <= cc < w and parent[rr * w + cc] >= 0:
                    roots.add(find(rr * w + cc))
        parent[i] = i
        peak[i] = flat[i]
        if not roots:
            continue
        roots = sorted(roots, key=lambda q: -peak[q])
        elder = roots[0]
        for younger in roots[1:]:  # the elder rule: the lower peak dies here
            modes.append((peak[younger], flat[i]))
            parent[younger] = elder
        parent[i] = elder
    survivors = {find(int(i)) for i in range(flat.size)}
    for s in survivors:
        modes.append((peak[s], -np.inf))
    return sorted(modes, key=lambda m: -m[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", type=int, default=600)
    ap.add_argument("draws", nargs="+")
    args = ap.parse_args()
    print("draw\tmodes\tpersistence (nats), highest peak first\tbayes_ari")
    for spec in args.draws:
        name, seed = spec.split(":")
        x, y, centres, covs, weights = recipe(name, int(seed))
        lo, hi = x.min(0) - 1.0, x.max(0) + 1.0
        gx = np.linspace(lo[0], hi[0], args.grid)
        gy = np.linspace(lo[1], hi[1], args.grid)
        xx, yy = np.meshgrid(gx, gy)
        grid = np.stack([xx.ravel(), yy.ravel()], axis=1)
        comp = log_component_densities(grid, centres, covs, weights)
        logd = np.logaddexp.reduce(comp, axis=1).reshape(args.grid, args.grid)
        # Bumps below 1e-3 nats are the grid's own (flat far-away cells).
        modes = [m for m in persistence(logd) if m[0] - m[1] > 1e-3]
        bayes = np.argmax(log_component_densities(x, centres, covs, weights), axis=1)
        pers = " ".join("inf" if np.isinf(d) else f"{p - d:.3f}" for p, d in modes)
        print(f"{name}:{seed}\t{len(modes)}\t{pers}\t{adjusted_rand_score(y, bayes):.3f}")


if __name__ == "__main__":
    main()
