#!/usr/bin/python3
"""Supervised reference ARIs for the t-NEB report (docs/methods.md).

For each X.npy / y.npy pair: standardise the features (as tneb_densired does),
predict every point's label with k-nearest-neighbour classifiers trained on
the other folds (5-fold cross-validation, k = 5, 15, 50) and report the ARI
of those predictions against the labels. A clustering that never sees the
labels is not expected to beat the best of them by much; it bounds what the
unsupervised methods can reach on a given draw.

Usage: tneb_supervised_reference.py X1.npy Y1.npy [X2.npy Y2.npy ...]
Prints one tab-separated line per set: name, ARI for k = 5, 15, 50, best.
"""
import os
import sys

import numpy as np
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("dataset\tknn5\tknn15\tknn50\tbest")
    for xf, yf in zip(argv[0::2], argv[1::2]):
        x = np.load(xf).astype(np.float64)
        y = np.load(yf).astype(np.int64)
        x = (x - x.mean(axis=0)) / x.std(axis=0)
        folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
        aris = []
        for k in (5, 15, 50):
            pred = cross_val_predict(KNeighborsClassifier(n_neighbors=k), x, y, cv=folds)
            aris.append(adjusted_rand_score(y, pred))
        name = os.path.basename(xf).removesuffix("_X.npy")
        print(name + "\t" + "\t".join(f"{a:.3f}" for a in aris) + f"\t{max(aris):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
