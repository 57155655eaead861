#!/usr/bin/python3
"""Goldens for the gHHC tests (run with Debian's /usr/bin/python3).

  hac_points.npy    60 x 5 float32 points in four blobs
  hac_linkage.npy   scipy.cluster.hierarchy.linkage(points, "average") (float64)
  digits_x.npy      scikit-learn's bundled digits, 1797 x 64 float32
  digits_y.npy      their labels (int64)
  ghhc_goldens.json dendrogram purity of fastcluster's average linkage on the
                    digits, on the points as gHHC preprocesses them (centred,
                    unit length) and on the raw pixels

Dendrogram purity here is computed independently of Dendro: for every merge
of clusters A and B and every class c, the |A_c| |B_c| same-class pairs whose
LCA is the merge contribute the class purity (|A_c| + |B_c|) / (|A| + |B|);
the sum is divided by the number of same-class pairs.
"""
import json
import os

import fastcluster
import numpy as np
import scipy
import scipy.cluster.hierarchy as sch
import sklearn
from sklearn.datasets import load_digits

HERE = os.path.dirname(os.path.abspath(__file__))


def dendrogram_purity(linkage, labels):
    n = len(labels)
    classes = np.unique(labels)
    index = {c: i for i, c in enumerate(classes)}
    counts = [np.zeros(len(classes), dtype=np.int64) for _ in range(2 * n - 1)]
    for i, y in enumerate(labels):
        counts[i][index[y]] = 1
    total = 0.0
    for t, row in enumerate(linkage):
        a, b = int(row[0]), int(row[1])
        ca, cb = counts[a], counts[b]
        merged = ca + cb
        size = merged.sum()
        total += float(np.sum(ca * cb * merged) / size)
        counts[n + t] = merged
    sizes = np.bincount([index[y] for y in labels])
    pairs = float(np.sum(sizes * (sizes - 1) / 2))
    return total / pairs


def main():
    rng = np.random.default_rng(20240611)
    centres = rng.normal(scale=3.0, size=(4, 5))
    pts = np.concatenate([c + rng.normal(size=(15, 5)) for c in centres]).astype(np.float32)
    np.save(os.path.join(HERE, "hac_points.npy"), pts)
    np.save(os.path.join(HERE, "hac_linkage.npy"),
            sch.linkage(pts.astype(np.float64), method="average"))

    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    np.save(os.path.join(HERE, "digits_x.npy"), x)
    np.save(os.path.join(HERE, "digits_y.npy"), y)
    xd = x.astype(np.float64)
    xc = xd - xd.mean(axis=0)
    xc /= np.linalg.norm(xc, axis=1, keepdims=True)
    dp_pre = dendrogram_purity(fastcluster.linkage(xc, method="average"), y)
    dp_raw = dendrogram_purity(fastcluster.linkage(xd, method="average"), y)
    with open(os.path.join(HERE, "ghhc_goldens.json"), "w") as f:
        json.dump({
            "digits_hac_average_dp_preprocessed": dp_pre,
            "digits_hac_average_dp_raw": dp_raw,
            "versions": {"numpy": np.__version__, "scipy": scipy.__version__,
                         "sklearn": sklearn.__version__,
                         "fastcluster": fastcluster.__version__},
        }, f, indent=2)
        f.write("\n")
    print("digits average-linkage DP: preprocessed %.4f, raw %.4f" % (dp_pre, dp_raw))


if __name__ == "__main__":
    main()
