#!/usr/bin/python3
"""Writes flat_metrics.json: flat clustering metrics computed by scikit-learn
and SciPy for a few fixed label vectors. metrics_flat_test.cc checks Dendro's
NMI / ARI / ACC / leaf purity against these values.

Run with Debian's python (it has numpy, scipy and scikit-learn):
    /usr/bin/python3 tests/golden/metrics/gen_metrics_goldens.py
"""
import json
import os

import numpy as np
import scipy
import sklearn
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix


def accuracy(truth, pred):
    c = contingency_matrix(truth, pred)
    rows, cols = linear_sum_assignment(c, maximize=True)
    return float(c[rows, cols].sum()) / len(truth)


def leaf_purity(truth, pred):
    c = contingency_matrix(truth, pred)
    return float(c.max(axis=0).sum()) / len(truth)


def cases():
    yield "identical", [0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 2, 2]
    yield "renamed", [0, 0, 1, 1, 2, 2], [5, 5, -3, -3, 9, 9]
    yield "both_constant", [4, 4, 4, 4], [7, 7, 7, 7]
    yield "truth_constant", [1, 1, 1, 1, 1], [0, 1, 0, 1, 2]
    yield "pred_constant", [0, 1, 2, 0, 1, 2], [3, 3, 3, 3, 3, 3]
    yield "all_singletons", [0, 1, 2, 3], [0, 1, 2, 3]
    yield "sklearn_doc_ari", [0, 0, 1, 1], [0, 1, 0, 1]
    yield "more_clusters", [0, 0, 0, 1, 1, 1, 2, 2], [0, 1, 2, 3, 3, 4, 5, 5]
    yield "fewer_clusters", [0, 0, 1, 1, 2, 2, 3, 3, 4], [0, 0, 0, 1, 1, 1, 1, 0, 1]
    yield "int64_labels", [-(2**40), 2**62, 2**62, 7, 7, -(2**40)], [1, 1, 2, 2, 3, 3]
    rng = np.random.RandomState(20240601)
    for name, n, k_true, k_pred in [("random_200_5x7", 200, 5, 7),
                                    ("random_500_10x4", 500, 10, 4),
                                    ("random_1000_12x12", 1000, 12, 12)]:
        truth = rng.randint(0, k_true, size=n)
        # Correlated prediction: a noisy relabelling of the truth.
        mapping = rng.randint(0, k_pred, size=k_true)
        pred = np.where(rng.rand(n) < 0.6, mapping[truth], rng.randint(0, k_pred, size=n))
        yield name, truth.tolist(), pred.tolist()


def main():
    out = []
    for name, truth, pred in cases():
        out.append({
            "name": name,
            "truth": [int(x) for x in truth],
            "pred": [int(x) for x in pred],
            "nmi": float(normalized_mutual_info_score(truth, pred)),
            "ari": float(adjusted_rand_score(truth, pred)),
            "acc": accuracy(truth, pred),
            "leaf_purity": leaf_purity(truth, pred),
        })
    doc = {
        "generator": "tests/golden/metrics/gen_metrics_goldens.py",
        "reference": "scikit-learn %s (normalized_mutual_info_score, adjusted_rand_score), "
                     "scipy %s (linear_sum_assignment)" % (sklearn.__version__,
                                                           scipy.__version__),
        "cases": out,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flat_metrics.json")
    # One case per line keeps the file small and diffable.
    with open(path, "w") as f:
        f.write('{"generator": %s,\n "reference": %s,\n "cases": [\n' %
                (json.dumps(doc["generator"]), json.dumps(doc["reference"])))
        f.write(",\n".join("  " + json.dumps(c) for c in doc["cases"]))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
