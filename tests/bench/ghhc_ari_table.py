#!/usr/bin/python3
"""gHHC's tree cut at the true number of classes, beside SciPy's Ward and
average linkage on the same rows (docs/methods.md, gHHC, "Scaling the
inputs").

For every OUT/<name>_x.npy / <name>_y.npy pair (tests/bench/ghhc_real_sets.py
writes them; `ghhc_bench --write-npy=OUT/synthetic ...` the synthetic one) it
runs ghhc_bench once per seed with the given extra flags and reads its ari_k
(the returned tree cut into k = number of classes), and computes the adjusted
Rand index of SciPy's Ward and average linkage on the raw rows cut by
fcluster(..., k, "maxclust"). Prints one Markdown row per set: the gHHC ARI
per seed and their median, Ward, average linkage.

  /usr/bin/python3 tests/bench/ghhc_ari_table.py OUT build-rel/tests/bench/ghhc_bench \\
      --seeds 1,2,3 [--sets digits,wine] [--extra "--m=500"] [--set-extra synthetic=--m=500]
"""
import argparse
import glob
import os
import shlex
import subprocess

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.metrics import adjusted_rand_score


def bench_ari(bench, x, y, seed, extra):
    cmd = [bench, f"--x={x}", f"--y={y}", f"--seed={seed}", "--threads=2"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    kv = dict(p.split("=", 1) for p in out.split() if "=" in p)
    return float(kv["ari_k"]), float(kv["leaves"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("bench")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--sets", default="")
    ap.add_argument("--extra", default="", help="flags for every ghhc_bench run")
    ap.add_argument("--set-extra", action="append", default=[],
                    help="NAME=FLAGS: more flags for one set's runs")
    ap.add_argument("--no-reference", action="store_true", help="skip Ward / average")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    set_extra = dict(e.split("=", 1) for e in args.set_extra)
    names = sorted(os.path.basename(p)[:-6] for p in glob.glob(os.path.join(args.dir, "*_x.npy")))
    if args.sets:
        names = [n for n in args.sets.split(",") if n in names]
    print("| set | k | seeds | gHHC ARI per seed | median | leaves | Ward | average |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        xp = os.path.join(args.dir, name + "_x.npy")
        yp = os.path.join(args.dir, name + "_y.npy")
        x = np.load(xp).astype(np.float64)
        y = np.load(yp)
        k = len(np.unique(y))
        extra = shlex.split(args.extra) + shlex.split(set_extra.get(name, ""))
        runs = [bench_ari(args.bench, xp, yp, s, extra) for s in seeds]
        aris = [a for a, _ in runs]
        leaves = "/".join(str(int(l)) for _, l in runs)
        ward = avg = float("nan")
        if not args.no_reference:
            ward = adjusted_rand_score(y, fcluster(linkage(x, "ward"), k, "maxclust"))
            avg = adjusted_rand_score(y, fcluster(linkage(x, "average"), k, "maxclust"))
        print(f"| {name} | {k} | {args.seeds} | {', '.join(f'{a:.3f}' for a in aris)} | "
              f"{float(np.median(aris)):.3f} | {leaves} | {ward:.3f} | {avg:.3f} |", flush=True)


if __name__ == "__main__":
    main()
