#!/usr/bin/python3
"""Synthetic hierarchical logits for benchmarks, written in chunks.

K classes in groups of `per`; a point of class c gets +3 on c and +2.5 on
the other classes of its group, on top of N(0, 1) noise. float32 .npy,
written through a memory map so a 5 GB file needs little RAM.

Usage: make_logits.py N K OUT.npy [LABELS.npy] [--per 10] [--seed 0]
"""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("out")
    ap.add_argument("labels", nargs="?")
    ap.add_argument("--per", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    x = np.lib.format.open_memmap(a.out, mode="w+", dtype=np.float32, shape=(a.n, a.k))
    y_all = np.empty(a.n, dtype=np.int64)
    group = np.arange(a.k) // a.per
    step = max(1, (64 << 20) // (4 * a.k))
    for start in range(0, a.n, step):
        end = min(a.n, start + step)
        y = rng.integers(0, a.k, size=end - start)
        block = rng.standard_normal((end - start, a.k), dtype=np.float32)
        block += np.float32(2.5) * (group[None, :] == group[y][:, None])
        block[np.arange(end - start), y] += np.float32(3.0)
        x[start:end] = block
        y_all[start:end] = y
    x.flush()
    del x
    if a.labels:
        np.save(a.labels, y_all)


if __name__ == "__main__":
    main()
