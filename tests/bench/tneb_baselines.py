#!/usr/bin/python3
"""Baselines for the t-NEB report (issue 12): k-means and a Gaussian mixture.

For each X.npy / y.npy pair: the features standardised (zero mean, unit
variance, as tneb_densired does by default), then scikit-learn KMeans
(n_init 10) and GaussianMixture (full covariances, reg_covar 1e-6, k-means
initialisation, n_init 1) with k = the true number of classes and
random_state = 0..S-1. Prints one line per dataset and method: the median and
best ARI over the S seeds.

Usage: /usr/bin/python3 tests/bench/tneb_baselines.py [--seeds S] X.npy Y.npy [X.npy Y.npy ...]
"""
import os
import sys
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture


def main():
    args = sys.argv[1:]
    seeds = 10
    if args[:1] == ["--seeds"]:
        seeds = int(args[1])
        args = args[2:]
    warnings.simplefilter("ignore", ConvergenceWarning)
    print("dataset\tmethod\tmedian\tbest\tseeds")
    for xf, yf in zip(args[0::2], args[1::2]):
        x = np.load(xf).astype(np.float64)
        x = (x - x.mean(axis=0)) / x.std(axis=0)
        y = np.load(yf).ravel()
        k = len(np.unique(y))
        name = os.path.basename(xf)
        for method in ("kmeans", "gmm"):
            aris = []
            for s in range(seeds):
                if method == "kmeans":
                    pred = KMeans(n_clusters=k, n_init=10, random_state=s).fit_predict(x)
                else:
                    pred = GaussianMixture(n_components=k, covariance_type="full",
                                           random_state=s).fit(x).predict(x)
                aris.append(adjusted_rand_score(y, pred))
            print(f"{name}\t{method}\t{np.median(aris):.4f}\t{max(aris):.4f}\t{seeds}", flush=True)


if __name__ == "__main__":
    main()
