#!/usr/bin/python3
"""Writes the bundled example: logits of a 20-class model over 4,000 points.

The classes form 4 super-classes of 5 (like CIFAR-100's 20 x 5). A point of
class c gets a high logit for c, a moderately high one for the other classes
of its super-class, and noise elsewhere, so L2H should recover the
super-classes at level 4. Deterministic (seed 7).

Usage: /usr/bin/python3 tests/data/make_example.py [OUT_DIR]
"""
import os
import sys

import numpy as np


def make(n=4000, supers=4, per_super=5, seed=7):
    rng = np.random.default_rng(seed)
    k = supers * per_super
    y = rng.integers(0, k, size=n)
    logits = rng.normal(0.0, 1.0, size=(n, k))
    sup = y // per_super
    for s in range(supers):
        cols = np.arange(s * per_super, (s + 1) * per_super)
        rows = np.where(sup == s)[0]
        logits[np.ix_(rows, cols)] += 2.5
    logits[np.arange(n), y] += 3.0
    # A few confusable points, so the model is not perfect.
    flip = rng.random(n) < 0.05
    logits[flip] = rng.normal(0.0, 1.5, size=(flip.sum(), k))
    return logits.astype(np.float32), y.astype(np.int64)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    x, y = make()
    np.save(os.path.join(out, "example_logits.npy"), x)
    np.save(os.path.join(out, "example_labels.npy"), y)
    print(f"wrote {x.shape} logits and {y.shape} labels to {out}")


if __name__ == "__main__":
    main()
