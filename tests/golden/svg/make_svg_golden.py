#!/usr/bin/python3
"""Golden dendrogram geometry for Dendro's SVG pictures (core/hierarchy/svg.h).

Reference: scipy.cluster.hierarchy.dendrogram (SciPy 1.10, Debian 12), with
its defaults (no count or distance sorting, so a merge's first linkage
operand is drawn first). For a few fixed linkages this records what SciPy
draws:
  * `leaves` / `ivl`: the leaf order along the leaf axis;
  * `icoord` / `dcoord`: one inverted U per merge, leaves at x = 5, 15, 25, ...
    and the merge heights (each U's two legs from the children's heights up
    to the merge height).
tests/core/hierarchy_svg_golden_test.cc builds each linkage with
FromLinkage, draws it in both layouts and checks that the SVG shows the same
leaf order and the same legs at the same heights.

The cases:
  * blobs_12: 12 points in three blobs, average linkage (distinct heights);
  * grid_ties: the 3 x 3 integer grid, single linkage: every merge below the
    top is at height 1 and the order among them is SciPy's tie rule;
  * swapped_ties: a hand-written linkage whose rows name the larger node
    first and merge at equal heights (SciPy draws Z[i, 0] on the left);
  * ward_250: 250 points, Ward linkage: more than 200 leaves, which Dendro
    draws radially by default.

Run with Debian's python from anywhere; it rewrites svg_goldens.json beside
itself:
    /usr/bin/python3 tests/golden/svg/make_svg_golden.py
The byte-exact picture beside it (blobs_12.svg) is Dendro's own output, kept
to catch any change of the drawing; see the test file for its command.
"""
import json
import os

import numpy as np
import scipy
from scipy.cluster.hierarchy import dendrogram, is_valid_linkage, linkage


def cases():
    rng = np.random.default_rng(20261126)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    blobs = np.concatenate([c + rng.normal(scale=0.8, size=(4, 2)) for c in centres])
    yield "blobs_12", linkage(blobs, method="average")

    grid = np.array([[i, j] for i in range(3) for j in range(3)], dtype=float)
    yield "grid_ties", linkage(grid, method="single")

    yield "swapped_ties", np.array([
        [3.0, 1.0, 1.0, 2.0],
        [2.0, 0.0, 1.0, 2.0],
        [6.0, 5.0, 2.0, 4.0],
        [7.0, 4.0, 2.0, 5.0],
    ])

    x = rng.normal(size=(250, 5)) + np.repeat(rng.normal(scale=4, size=(10, 5)), 25, axis=0)
    yield "ward_250", linkage(x, method="ward")


def main():
    out = {"reference": f"scipy.cluster.hierarchy.dendrogram, SciPy {scipy.__version__}",
           "cases": []}
    for name, z in cases():
        assert is_valid_linkage(z), name
        r = dendrogram(z, no_plot=True)
        out["cases"].append({
            "name": name,
            "num_leaves": int(z.shape[0] + 1),
            "linkage": z.tolist(),
            "leaves": [int(v) for v in r["leaves"]],
            "ivl": r["ivl"],
            "icoord": r["icoord"],
            "dcoord": r["dcoord"],
        })
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "svg_goldens.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {path}: {[c['name'] for c in out['cases']]}")


if __name__ == "__main__":
    main()
