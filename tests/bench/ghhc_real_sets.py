#!/usr/bin/python3
"""Real data sets for gHHC's fidelity runs (docs/methods.md, gHHC), as .npy.

Writes OUT/<name>_x.npy (float32) and OUT/<name>_y.npy (int32 labels 0..C-1)
for scikit-learn's bundled digits, wine, breast_cancer and iris, and for the
UCI Glass and Spambase files when given (they are not bundled anywhere on a
Debian system; download them from the UCI repository:
glass/glass.data and spambase/spambase.data). A first line that is not
numeric, or is just the column numbers 1, 2, ... (headers some mirrors add),
is skipped. For each set it prints the
dendrogram purity of SciPy's average linkage on the raw rows and on the rows
as gHHC preprocesses them (centred, unit length), the reference beside gHHC.

  /usr/bin/python3 tests/bench/ghhc_real_sets.py OUT [--glass glass.data]
                                                    [--spambase spambase.data]
  build/tests/bench/ghhc_bench --x=OUT/glass_x.npy --y=OUT/glass_y.npy --m=64
"""
import argparse
import os

import numpy as np
from scipy.cluster.hierarchy import linkage
from sklearn import datasets


def dendrogram_purity(z, y):
    """Mean over same-label pairs of the purity of their LCA (SciPy linkage)."""
    n = len(y)
    _, y = np.unique(y, return_inverse=True)
    c = y.max() + 1
    counts = np.zeros((2 * n - 1, c), dtype=np.int64)
    counts[np.arange(n), y] = 1
    total = 0.0
    for t, (a, b, _, size) in enumerate(z):
        ca, cb = counts[int(a)], counts[int(b)]
        merged = ca + cb
        total += float(np.sum(ca * cb * merged)) / size
        counts[n + t] = merged
    pairs = float(np.sum(counts[2 * n - 2] * (counts[2 * n - 2] - 1) // 2))
    return total / pairs


def read_uci(path, label_col, drop_first_col):
    rows = []
    with open(path) as f:
        for k, line in enumerate(f):
            parts = line.strip().split(",")
            if not line.strip():
                continue
            try:
                vals = [float(p) for p in parts]
            except ValueError:
                if k == 0:
                    continue  # a header of names
                raise
            if k == 0 and vals == [float(i) for i in range(1, len(vals) + 1)]:
                continue  # a header of column numbers
            rows.append(vals)
    a = np.array(rows)
    y = a[:, label_col].astype(np.int64)
    x = np.delete(a, label_col, axis=1)
    if drop_first_col:
        x = x[:, 1:]
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--glass")
    ap.add_argument("--spambase")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sets = {}
    for name, loader in [("digits", datasets.load_digits), ("wine", datasets.load_wine),
                         ("breast_cancer", datasets.load_breast_cancer),
                         ("iris", datasets.load_iris)]:
        d = loader()
        sets[name] = (d.data, d.target)
    if args.glass:  # id, 9 attributes, class
        sets["glass"] = read_uci(args.glass, -1, True)
    if args.spambase:  # 57 attributes, class
        sets["spambase"] = read_uci(args.spambase, -1, False)
    for name, (x, y) in sets.items():
        _, y = np.unique(y, return_inverse=True)
        np.save(os.path.join(args.out, name + "_x.npy"), x.astype(np.float32))
        np.save(os.path.join(args.out, name + "_y.npy"), y.astype(np.int32))
        xc = x - x.mean(axis=0)
        nrm = np.linalg.norm(xc, axis=1, keepdims=True)
        keep = nrm[:, 0] > 0
        p = xc[keep] / nrm[keep]
        raw = dendrogram_purity(linkage(x, "average"), y)
        pre = dendrogram_purity(linkage(p, "average"), y[keep])
        print(f"{name} n={x.shape[0]} d={x.shape[1]} classes={y.max() + 1} "
              f"hac_average_dp_raw={raw:.4f} hac_average_dp_preprocessed={pre:.4f}")


if __name__ == "__main__":
    main()
