#!/usr/bin/python3
"""Vectorised NumPy flat PPCA classifier: the reference for hppca_bench.

Scores every class of an exported HppcaModel for every row with the Theorem 1
form of the Mahalanobis distance (paper eq. 7), in float32 with batched
matrix products (X @ V^T per block of rows and chunk of classes), and takes
the argmin. Reads what `hppca_bench --export DIR` writes:

  DIR/model/{hppca.json, labels.npy, class_means.npy, class_bases.npy,
             class_eigvals.npy}
  DIR/eval_x.npy, DIR/eval_y.npy, DIR/flat_pred.npy (Dendro's flat labels)

usage: /usr/bin/python3 tests/bench/hppca_numpy_flat.py DIR [--max-rows N]
           [--block 512] [--class-chunk 1024] [--repeats 3]

Prints one JSON object: rows, seconds (fastest of --repeats), rows/s,
accuracy, agreement with Dendro's flat predictions, and the float32 GEMM
rate this NumPy reaches (Debian's python3-numpy uses whatever libblas.so.3
the system provides).
"""
import argparse
import json
import os
import time

import numpy as np


def gemm_gflops():
    a = np.random.default_rng(0).random((512, 640), dtype=np.float32)
    b = np.random.default_rng(1).random((640, 4096), dtype=np.float32)
    a @ b
    t = time.perf_counter()
    a @ b
    return 2.0 * 512 * 640 * 4096 / (time.perf_counter() - t) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--max-rows", type=int, default=0)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--class-chunk", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    mdir = os.path.join(args.dir, "model")
    meta = json.load(open(os.path.join(mdir, "hppca.json")))
    lam = float(meta["options"]["lambda"])
    log_det = meta["options"]["score"] == "log_det"
    labels = np.load(os.path.join(mdir, "labels.npy"))
    means = np.load(os.path.join(mdir, "class_means.npy"))          # K x d float64
    eig = np.load(os.path.join(mdir, "class_eigvals.npy"))          # K x q float64
    k, d = means.shape
    q = eig.shape[1]
    bases = np.load(os.path.join(mdir, "class_bases.npy"), mmap_mode="r")  # K*q x d float32
    x = np.load(os.path.join(args.dir, "eval_x.npy"), mmap_mode="r")
    y = np.load(os.path.join(args.dir, "eval_y.npy"))
    dendro_flat = np.load(os.path.join(args.dir, "flat_pred.npy"))
    n = x.shape[0] if args.max_rows <= 0 else min(args.max_rows, x.shape[0])
    x = np.ascontiguousarray(x[:n], dtype=np.float32)

    # Model tables (not timed): centred means, projections of the means, weights.
    centre = means.mean(axis=0)
    mu = (means - centre).astype(np.float32)                          # K x d
    v = np.ascontiguousarray(bases, dtype=np.float32)                 # K*q x d
    v3 = v.reshape(k, q, d)
    mu_proj = np.einsum("kqd,kd->kq", v3, mu)                          # K x q
    w = (eig / (eig + lam)).astype(np.float32)                         # K x q
    mu_n2 = (mu.astype(np.float64) ** 2).sum(axis=1)
    offset = np.zeros(k)
    if log_det:
        offset = np.log(eig + lam).sum(axis=1) + (d - q) * np.log(lam)

    def predict():
        out = np.empty(n, dtype=np.int64)
        for r0 in range(0, n, args.block):
            xb = x[r0:r0 + args.block] - centre.astype(np.float32)
            b = xb.shape[0]
            xn2 = (xb.astype(np.float64) ** 2).sum(axis=1)
            best = np.full(b, np.inf)
            arg = np.zeros(b, dtype=np.int64)
            for k0 in range(0, k, args.class_chunk):
                k1 = min(k, k0 + args.class_chunk)
                p = (xb @ v[k0 * q:k1 * q].T).reshape(b, k1 - k0, q)   # batched projections
                g = xb @ mu[k0:k1].T
                proj = (w[k0:k1] * (p - mu_proj[k0:k1]) ** 2).sum(axis=2)
                s = (xn2[:, None] - 2.0 * g + mu_n2[k0:k1] - proj) / lam + offset[k0:k1]
                j = s.argmin(axis=1)
                sj = s[np.arange(b), j]
                better = sj < best
                best[better] = sj[better]
                arg[better] = j[better] + k0
            out[r0:r0 + b] = labels[arg]
        return out

    seconds = float("inf")
    pred = None
    for _ in range(max(1, args.repeats)):
        t = time.perf_counter()
        pred = predict()
        seconds = min(seconds, time.perf_counter() - t)
    print(json.dumps({
        "rows": int(n),
        "classes": int(k),
        "seconds": seconds,
        "rows_per_second": n / seconds,
        "accuracy": float((pred == y[:n]).mean()),
        "agreement_with_dendro_flat": float((pred == dendro_flat[:n]).mean()),
        "numpy": np.__version__,
        "float32_gemm_gflops": gemm_gflops(),
    }))


if __name__ == "__main__":
    main()
