#!/usr/bin/python3
"""Average-linkage HAC (fastcluster) on a gHHC benchmark dataset.

  build/tests/bench/ghhc_bench --n=10000 --write-npy=/tmp/g10k
  /usr/bin/python3 tests/bench/ghhc_fastcluster.py /tmp/g10k_x.npy /tmp/g10k_y.npy

The points are preprocessed as gHHC does (centred, unit length; the scale
does not change the linkage). fastcluster's average linkage needs the
condensed distance matrix, N (N - 1) / 2 float64 values: 0.4 GB at N = 10,000,
40 GB at N = 100,000 -- the script refuses when that exceeds the memory
available (MemAvailable in /proc/meminfo). Prints seconds (linkage only),
peak RSS and dendrogram purity (same definition as
tests/golden/ghhc/gen_ghhc_goldens.py).
"""
import resource
import sys
import time

import fastcluster
import numpy as np


def dendrogram_purity(linkage, labels):
    n = len(labels)
    classes, y = np.unique(labels, return_inverse=True)
    counts = np.zeros((2 * n - 1, len(classes)), dtype=np.int64)
    counts[np.arange(n), y] = 1
    total = 0.0
    for t, row in enumerate(linkage):
        ca, cb = counts[int(row[0])], counts[int(row[1])]
        merged = ca + cb
        total += float(np.sum(ca * cb * merged) / merged.sum())
        counts[n + t] = merged
    sizes = np.bincount(y)
    return total / float(np.sum(sizes * (sizes - 1) / 2))


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    x = np.load(sys.argv[1]).astype(np.float64)
    y = np.load(sys.argv[2])
    n = x.shape[0]
    need = n * (n - 1) // 2 * 8
    if need > 0.8 * mem_available_bytes():
        print("fastcluster_average n=%d cannot run: the distance matrix needs %.1f GB, "
              "%.1f GB available" % (n, need / 1e9, mem_available_bytes() / 1e9))
        return
    x -= x.mean(axis=0)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    t0 = time.time()
    z = fastcluster.linkage(x, method="average", metric="euclidean")
    secs = time.time() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("fastcluster_average n=%d seconds=%.2f peak_rss_mb=%.0f dp=%.4f"
          % (n, secs, rss, dendrogram_purity(z, y)))


if __name__ == "__main__":
    main()
