#!/usr/bin/python3
"""Measures hierarchical PPCA prediction and fits the cost model's constants.

Runs hppca_bench (one thread, CPU time of the predictions) over a grid of
class counts K, dimensions d and ranks q = r, for flat scoring and T = 1..5,
and fits per-row CPU time as

  time = a (multiply-adds + C components + M models + O openings)

by non-negative least squares on relative error, where for one row

  flat:          multiply-adds = K (q + 1) d, components = K q, models = K
  hierarchical:  multiply-adds = S (r + 1) d + E (q + 1) d + T d,
                 components = S r + E q, models = S + E, openings = T

(E: class models scored per row, from the bench's operation count). It
prints C, M and O, which core/hppca/hppca.h names kHppcaComponentCost,
kHppcaModelCost and kHppcaOpenCost, and then, for every grid point, what the
built model chose for its default scoring and the measured speed-ups (CPU
time and wall time) of that default and of T = 5 over flat scoring. With
--threads 2 the wall times are what a two-core server sees. docs/benchmarks.md
has the runs.

  /usr/bin/python3 tests/bench/hppca_cost_fit.py build/tests/bench/hppca_bench
      [--out runs.jsonl] [--reuse runs.jsonl,...] [--threads 1] [--shapes 5x10,10x20]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
from scipy.optimize import nnls

# (groups, classes per group): K = 50, 200, 1,000.
SHAPES = [(5, 10), (10, 20), (25, 40)]
DIMS = [4, 8, 16, 32, 64, 128, 256, 512]
RANKS = [50, 10]


def grid(shapes):
    for groups, per_group in shapes:
        for d in DIMS:
            for rank in RANKS:
                q = min(d, rank)
                if rank != RANKS[0] and q == min(d, RANKS[0]):
                    continue  # the same run as the first rank
                yield groups, per_group, d, q


def run(bench, groups, per_group, d, q, threads):
    k = groups * per_group
    # About 2e10 multiply-adds per flat pass (a second or so on one core),
    # within [1,000, 200,000] rows: short passes time the noise.
    rows = min(200000, max(1000, int(2e10 / (k * (q + 1) * d))))
    args = [bench, "--groups", str(groups), "--classes-per-group", str(per_group),
            "--dim", str(d), "--q", str(q), "--r", str(q),
            "--group-rank", str(max(d // 4, 2)), "--class-rank", str(max(d // 8, 1)),
            "--train-per-class", "30", "--test-per-class", str(rows // k + 1),
            "--eval-rows", str(rows),
            "--max-t", "5", "--latency-rows", "0", "--repeats", "7"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    record = json.loads(out.strip().splitlines()[-1])
    record.update(dim=d, q=q)
    return record


def features(rec):
    """Rows of (multiply-adds, components, models, openings) and CPU ns per row."""
    k, s, d, q = rec["classes"], rec["superclasses"], rec["dim"], rec["q"]
    n = rec["eval_rows"]
    rows = [((q + 1) * d * k, q * k, k, 0, rec["flat"]["cpu_seconds"] / n * 1e9)]
    for h in rec["hierarchical"]:
        t = h["t"]
        e = k / h["op_speedup"] - s
        rows.append(((s + e) * (q + 1) * d + t * d, (s + e) * q, s + e, t,
                     h["cpu_seconds"] / n * 1e9))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench")
    p.add_argument("--out", default="")
    p.add_argument("--reuse", default="",
                   help="fit the runs of earlier --out files (comma-separated)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--shapes", default=",".join(f"{g}x{c}" for g, c in SHAPES),
                   help="groups x classes per group, comma-separated")
    a = p.parse_args()
    records = []
    if a.reuse:
        for path in a.reuse.split(","):
            with open(path) as f:
                records += [json.loads(line) for line in f if line.strip()]
    else:
        sink = open(a.out, "w") if a.out else None
        shapes = [tuple(int(v) for v in x.split("x")) for x in a.shapes.split(",")]
        for g, c, d, q in grid(shapes):
            rec = run(a.bench, g, c, d, q, a.threads)
            records.append(rec)
            if sink:
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
            print(f"ran K={rec['classes']} d={d} q={q} S={rec['superclasses']}",
                  file=sys.stderr)
    x, y = [], []
    for rec in records:
        for *f, ns in features(rec):
            x.append(f)
            y.append(ns)
    x, y = np.array(x, float), np.array(y, float)
    # Relative error: divide each equation by its measured time.
    coef, _ = nnls(x / y[:, None], np.ones(len(y)))
    a_mac = coef[0]
    print(f"a = {a_mac:.4g} ns per multiply-add; in multiply-adds: "
          f"C (per component) = {coef[1] / a_mac:.1f}, M (per model) = {coef[2] / a_mac:.1f}, "
          f"O (per opening) = {coef[3] / a_mac:.1f}")
    fitted = x @ coef
    rel = np.abs(fitted - y) / y
    print(f"fit over {len(y)} timings: median relative error {np.median(rel):.3f}, "
          f"90th percentile {np.percentile(rel, 90):.3f}")
    print()
    print("| K | d | q = r | S | default | cost model hier/flat | default speed-up over flat, "
          "CPU / wall | T = 5 speed-up over flat, CPU / wall |")
    print("|---|---|---|---|---|---|---|---|")
    for rec in records:
        dflt = rec.get("default", {})
        flat = rec["flat"]
        t5 = [h for h in rec["hierarchical"] if h["t"] == 5]
        ratio = dflt.get("cost_hierarchical", 0) / max(dflt.get("cost_flat", 1), 1)

        def speedups(r):
            return (f"{flat['cpu_seconds'] / r['cpu_seconds']:.2f} / "
                    f"{flat['seconds'] / r['seconds']:.2f}")
        print(f"| {rec['classes']} | {rec['dim']} | {rec['q']} | {rec['superclasses']} | "
              f"{dflt.get('scoring', '?')} | {ratio:.2f} | "
              f"{speedups(dflt) if dflt else '?'} | {speedups(t5[0]) if t5 else '-'} |")


if __name__ == "__main__":
    main()
