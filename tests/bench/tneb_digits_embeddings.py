#!/usr/bin/python3
"""Digits embeddings for t-NEB's checks above 10 columns (issue 46).

The paper's embedding sets (MNIST-Nd: mixture-VAE embeddings of MNIST at 8,
16, 32 and 64 dimensions) and Fashion-MNIST are downloads; scikit-learn ships
its 8 x 8 digits (1,797 rows, 10 classes) with Debian's python3-sklearn. This
writes linear embeddings of them at the dimensions where t-NEB's default
changes: PCA to D components (scikit-learn's PCA, whiten off, svd_solver
"full", so the embedding is the same on every machine up to the sign of a
component, which t-NEB's standardisation and ARI do not see).

Writes OUT/digits_pca{D}_X.npy (float32, 1,797 x D) and OUT/digits_pca{D}_y.npy
(int32) for each D, then run
    build-rel/tests/bench/tneb_densired --seeds 3 --threads 2 OUT/digits_pca*_X.npy ...
with and without --legacy-high-dim, and tests/bench/tneb_baselines.py --seeds 3
on the same files for k-means.

Usage: /usr/bin/python3 tests/bench/tneb_digits_embeddings.py OUT [D ...]   (default D: 8 16 24 32)
"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out = sys.argv[1]
    dims = [int(d) for d in sys.argv[2:]] or [8, 16, 24, 32]
    os.makedirs(out, exist_ok=True)
    x, y = load_digits(return_X_y=True)
    for d in dims:
        z = PCA(n_components=d, svd_solver="full").fit_transform(x)
        np.save(os.path.join(out, f"digits_pca{d}_X.npy"), np.ascontiguousarray(z, dtype=np.float32))
        np.save(os.path.join(out, f"digits_pca{d}_y.npy"), y.astype(np.int32))
        print(f"digits_pca{d}: {z.shape[0]} x {d}")


if __name__ == "__main__":
    main()
