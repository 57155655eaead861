#!/usr/bin/python3
"""Writes the goldens of `dendro diff` (core/diff/diff.h): pairs of small
seeded random SciPy linkage trees as <case>_a.npy / <case>_b.npy, and
diff_goldens.json with what each comparison must give. diff_hierarchies_test.cc
reads both and checks DiffHierarchies against them.

The references are independent of Dendro's code:
  * Robinson-Foulds: each tree's clusters enumerated directly as frozensets
    of the leaves below every internal node, restricted to the shared leaves,
    without singletons and the full set, deduplicated; RF = |A ^ B|,
    normalised by |A| + |B|.
  * cophenetic correlation: scipy.cluster.hierarchy.cophenet of each full
    tree, restricted to the shared leaves' pairs, then numpy's Pearson
    correlation (np.corrcoef).
  * ARI at every k: each tree restricted to the shared leaves as a linkage
    (merges with one side outside the shared set are dropped), cut with
    scipy.cluster.hierarchy.fcluster(criterion="maxclust") (see cut()), scored with
    sklearn.metrics.adjusted_rand_score. The trees are binary with distinct
    heights, so every k is reachable and maxclust gives exactly k clusters.

Leaves are matched by id (no names): the shared leaves are 0 .. min(L_A,
L_B) - 1.

Run with Debian's python (it has numpy, scipy and scikit-learn):
    /usr/bin/python3 tests/golden/diff/gen_diff_goldens.py
"""
import json
import os

import numpy as np
import scipy
import sklearn
from scipy.cluster.hierarchy import cophenet, fcluster, linkage
from scipy.spatial.distance import squareform
from sklearn.metrics import adjusted_rand_score

HERE = os.path.dirname(os.path.abspath(__file__))


def clusters(Z, shared):
    """Rooted clusters of linkage Z restricted to the leaf set `shared`."""
    L = Z.shape[0] + 1
    below = [frozenset([i]) for i in range(L)]
    for a, b, _, _ in Z:
        below.append(below[int(a)] | below[int(b)])
    out = set()
    for s in below[L:]:
        r = s & shared
        if 1 < len(r) < len(shared):
            out.add(r)
    return out


def restrict(Z, n):
    """Linkage of Z restricted to leaves 0..n-1 (leaf ids kept)."""
    L = Z.shape[0] + 1
    new_id = {i: i for i in range(n)}
    size = {i: 1 for i in range(n)}
    rows = []
    for t, (a, b, h, _) in enumerate(Z):
        ra, rb = new_id.get(int(a)), new_id.get(int(b))
        if ra is not None and rb is not None:
            node = n + len(rows)
            size[node] = size[ra] + size[rb]
            rows.append([ra, rb, h, size[node]])
            new_id[L + t] = node
        elif ra is not None or rb is not None:
            new_id[L + t] = ra if ra is not None else rb
    return np.array(rows, dtype=np.float64)


def cut(z, k):
    """Flat clusters of linkage z at exactly k clusters: fcluster maxclust;
    where that does not give k (SciPy 1.10 gives n - 2 clusters for k = n - 1),
    fcluster at a distance threshold midway between the two merge heights
    the cut falls between."""
    labels = fcluster(z, k, criterion="maxclust")
    if len(set(labels)) != k:
        h = np.sort(z[:, 2])
        n = z.shape[0] + 1
        labels = fcluster(z, (h[n - k - 1] + h[n - k]) / 2, criterion="distance")
    assert len(set(labels)) == k, k
    return labels


def compare(za, zb):
    n = min(za.shape[0], zb.shape[0]) + 1
    shared = frozenset(range(n))
    ca, cb = clusters(za, shared), clusters(zb, shared)
    rf = len(ca ^ cb)
    total = len(ca) + len(cb)
    keep = np.arange(n)
    da = squareform(squareform(cophenet(za))[np.ix_(keep, keep)], checks=False)
    db = squareform(squareform(cophenet(zb))[np.ix_(keep, keep)], checks=False)
    r = float(np.corrcoef(da, db)[0, 1])
    ra, rb = restrict(za, n), restrict(zb, n)
    ari = []
    for k in range(2, n):
        ari.append({"k": k, "ari": float(adjusted_rand_score(cut(ra, k), cut(rb, k)))})
    return {
        "shared_leaves": n,
        "a_clusters": len(ca),
        "b_clusters": len(cb),
        "shared_clusters": len(ca & cb),
        "rf": rf,
        "rf_normalized": rf / total if total else 0.0,
        "cophenetic_correlation": r,
        "ari": ari,
    }


def cases(rng):
    # Two unrelated trees over the same 12 leaves.
    yield "unrelated_12", linkage(rng.normal(size=(12, 3)), "average"), \
        linkage(rng.normal(size=(12, 3)), "average")
    # The same points, lightly perturbed: similar trees.
    x = rng.normal(size=(20, 2))
    yield "perturbed_20", linkage(x, "average"), \
        linkage(x + rng.normal(scale=0.15, size=x.shape), "average")
    # Different linkage methods on one data set.
    x = rng.normal(size=(40, 4))
    yield "complete_vs_ward_40", linkage(x, "complete"), linkage(x, "ward")
    # Different leaf counts: only ids 0..9 are shared.
    x = rng.normal(size=(14, 2))
    yield "subset_14_10", linkage(x, "average"), linkage(x[:10] + 0.3 * rng.normal(
        size=(10, 2)), "single")
    # Three clear groups, recovered by both methods in different detail.
    centres = np.repeat(np.array([[0, 0], [6, 0], [0, 6]], float), 10, axis=0)
    x = centres + rng.normal(size=(30, 2))
    yield "groups_30", linkage(x, "average"), linkage(x, "complete")


def main():
    rng = np.random.RandomState(20250301)
    out = []
    for name, za, zb in cases(rng):
        np.save(os.path.join(HERE, name + "_a.npy"), za)
        np.save(os.path.join(HERE, name + "_b.npy"), zb)
        entry = {"name": name, "a": name + "_a.npy", "b": name + "_b.npy"}
        entry.update(compare(za, zb))
        out.append(entry)
    header = {
        "generator": "tests/golden/diff/gen_diff_goldens.py",
        "reference": "numpy %s (corrcoef), scipy %s (cophenet, fcluster maxclust), "
                     "scikit-learn %s (adjusted_rand_score); Robinson-Foulds by direct "
                     "enumeration of clusters" % (np.__version__, scipy.__version__,
                                                  sklearn.__version__),
    }
    with open(os.path.join(HERE, "diff_goldens.json"), "w") as f:
        f.write('{"generator": %s,\n "reference": %s,\n "cases": [\n' %
                (json.dumps(header["generator"]), json.dumps(header["reference"])))
        f.write(",\n".join("  " + json.dumps(c) for c in out))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
