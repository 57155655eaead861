#!/usr/bin/python3
"""Determinism and spread of Dendro's four methods over seeds, row order and threads.

Measures, on scikit-learn's bundled sets (digits, wine, breast_cancer, iris;
features standardised) and, for gHHC and t-NEB, one Densired set
(/work/shared/data/densired, standardised, optionally subsampled):

- gHHC and t-NEB on the features (t-NEB: the sets of ``--tneb-sets``, by
  default not digits, whose 61-dimensional fit took over 7 minutes on an ASan
  build; ``components`` N // 30 below 750 rows): ``--seeds`` fits on the
  original row order (seeds s0, s0+1, ...) and ``--perms`` fits with seed s0 on
  random row permutations (results un-permuted before comparing). Each tree is cut at the
  true number of classes (``Tree.cut(k)`` over each point's leaf). Reported per
  group ("seeds": the seed fits; "perms": the original-order fit of s0 and the
  permuted fits): ARI to the truth (median [min, max]), pairwise ARI between
  the runs (min / median), and for "perms" how many permuted fits gave the
  same tree as the original order (same point sets under every node, same
  heights).
- L2H: logits = decision_function of a scikit-learn LogisticRegression fitted
  on a stratified half of the rows, on all rows. Fits on the original and
  ``--perms`` permuted row orders: are the linkage matrices (merge sequences)
  identical, and the smallest pairwise ARI of the leaf (class) partitions
  at every cut k = 1..K.
- hierarchical PPCA: trained on the stratified half with its labels, original
  and ``--perms`` permuted row orders: is the class -> super-class grouping
  identical, is the tree identical, and do the predictions on the held-out half
  agree (fraction of rows with the same predicted class; largest difference of
  the flat scores).
- Same input twice: one repeated fit per method and set (same seed, order and
  thread count) must give the same tree; and the first fit again on a second
  server with ``--threads 2`` (L2H and hPPCA: every set; gHHC and t-NEB:
  digits, iris and Densired) compared with the one-thread fit.

Every other fit runs on a private dendrod with ``--threads 1 --workers 2``: two
fits at a time (``--parallel``), each on one thread; the two-thread fits run
one at a time on a second dendrod with ``--threads 2``.
The tables are markdown, for docs/benchmarks.md.

  DENDRO_DENDROD=build/server/dendrod /usr/bin/python3 tests/bench/determinism_spread.py \
      [--seeds 5] [--perms 5] [--densired PATH_X.npy] [--densired-rows N]
      [--methods ghhc,tneb,l2h,hppca] [--sets digits,wine,breast_cancer,iris,densired]
      [--tneb-sets wine,breast_cancer,iris,densired] [--parallel 2]

(An ASan dendrod also needs ASAN_OPTIONS=detect_leaks=0 in the environment.)
"""
import argparse
import atexit
import datetime
import hashlib
import itertools
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import sklearn
from sklearn import datasets
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))

from dendro_client import Client  # noqa: E402

DEFAULT_DENSIRED = "/work/shared/data/densired/densired_studt_16d_seed42_X.npy"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- data ---------------------------------------------------------------------------------

def load_sets(names, densired_x, densired_rows):
    loaders = {"digits": datasets.load_digits, "wine": datasets.load_wine,
               "breast_cancer": datasets.load_breast_cancer, "iris": datasets.load_iris}
    out = {}
    for name in names:
        if name == "densired":
            x = np.load(densired_x).astype(np.float64)
            y = np.load(densired_x.replace("_X.npy", "_y.npy"))
            if densired_rows and densired_rows < x.shape[0]:
                keep = np.sort(np.random.default_rng(0).choice(x.shape[0], densired_rows,
                                                               replace=False))
                x, y = x[keep], y[keep]
            label = Path(densired_x).name.replace("_X.npy", "")
            if densired_rows and densired_rows < 10000:
                label += f" ({x.shape[0]} rows)"
        else:
            d = loaders[name]()
            x, y = d.data.astype(np.float64), d.target
            label = name
        _, y = np.unique(y, return_inverse=True)
        x = x[:, x.std(axis=0) > 0]  # digits has constant pixels; t-NEB refuses them
        x = StandardScaler().fit_transform(x).astype(np.float32)
        out[name] = (label, np.ascontiguousarray(x), y.astype(np.int64))
    return out


# --- trees --------------------------------------------------------------------------------

def tneb_components(n):
    """The default m = 25 where there are at least 30 rows per component, else n // 30:
    on iris and wine (150 and 178 rows) no default component keeps more than 10 points."""
    return None if n >= 25 * 30 else max(2, n // 30)


def fit_clusterer(client, method, x, seed, tag):
    t0 = time.monotonic()
    if method == "ghhc":
        job = client.fit_ghhc(x, name=f"det_{method}_{tag}", seed=seed)
    else:
        job = client.fit_tneb(x, name=f"det_{method}_{tag}", seed=seed,
                              components=tneb_components(x.shape[0]))
    model = job.wait(progress=False)
    tree = model.tree(include_points=True)
    point_leaf = tree.point_leaf
    if point_leaf is None or len(point_leaf) != x.shape[0]:
        point_leaf = model.assign(x)
    return {"tree": tree, "point_leaf": np.asarray(point_leaf, dtype=np.int64),
            "linkage": np.asarray(tree.linkage), "seconds": time.monotonic() - t0}


def unpermute(values, perm):
    """values[i] belongs to original row perm[i]; returns them in original row order."""
    out = np.empty_like(values)
    out[perm] = values
    return out


def labels_at(run, k):
    """Each point's cluster when the tree is cut into k, or None if k is unreachable."""
    tree = run["tree"]
    if k not in tree.reachable_levels():
        return None
    return tree.cut(k)[run["point_leaf"]]


def canonical(run):
    """{digest of the sorted original row ids under a node: height} for every node.

    Two fits have the same tree (whatever their leaf numbering) iff these dicts are
    equal; the key sets alone compare the topology."""
    tree = run["tree"]
    n_nodes = len(tree.parents)
    order = np.argsort(run["point_leaf"], kind="stable")
    bounds = np.searchsorted(run["point_leaf"][order], np.arange(tree.num_leaves + 1))
    members = [order[bounds[i]:bounds[i + 1]] for i in range(tree.num_leaves)]
    heights = tree.heights
    out = {}
    for v in range(n_nodes):  # children have smaller ids than their parents
        if v >= tree.num_leaves:
            members.append(np.concatenate([members[c] for c in tree.children(v)]))
        ids = np.sort(members[v])
        if ids.size:
            out[hashlib.sha1(ids.astype(np.int64).tobytes()).hexdigest()] = heights[v]
    return out


def same_tree(a, b):
    """(same topology, largest height difference) of two canonical dicts."""
    if a.keys() != b.keys():
        return False, float("nan")
    return True, max((abs(a[k] - b[k]) for k in a), default=0.0)


def pairwise(labelings):
    vals = [adjusted_rand_score(a, b) for a, b in itertools.combinations(labelings, 2)]
    return (min(vals), float(np.median(vals))) if vals else (float("nan"), float("nan"))


def fmt_range(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return f"{np.median(vals):.3f} [{min(vals):.3f}, {max(vals):.3f}]"


# --- gHHC and t-NEB -----------------------------------------------------------------------

def run_clusterer(client, method, name, x, y, args, rng):
    k = int(y.max()) + 1
    s0 = 1 if method == "ghhc" else 0  # the methods' default seeds
    seeds = [s0 + i for i in range(args.seeds)]
    rows = []
    seed_runs = []
    for s in seeds:
        log(f"{method} {name} seed {s}")
        seed_runs.append(fit_clusterer(client, method, x, s, f"{name}_s{s}"))
    ref = seed_runs[0]
    perm_runs = []
    perms = [rng.permutation(x.shape[0]) for _ in range(args.perms)]
    for i, perm in enumerate(perms):
        log(f"{method} {name} permutation {i + 1}")
        r = fit_clusterer(client, method, x[perm], s0, f"{name}_p{i}")
        r["point_leaf"] = unpermute(r["point_leaf"], perm)
        perm_runs.append(r)
    log(f"{method} {name} repeat of seed {s0}")
    repeat = fit_clusterer(client, method, x, s0, f"{name}_r")
    secs = [r["seconds"] for r in seed_runs + perm_runs + [repeat]]

    def group(label, runs, compare_identity):
        cuts = [labels_at(r, k) for r in runs]
        ok = [c for c in cuts if c is not None]
        truth = [adjusted_rand_score(y, c) for c in ok]
        pmin, pmed = pairwise(ok)
        leaves = [r["tree"].num_leaves for r in runs]
        ident = ""
        if compare_identity:
            c_ref = canonical(ref)
            same = [same_tree(c_ref, canonical(r)) for r in runs[1:]]
            n_same = sum(1 for t, h in same if t and h == 0.0)
            n_topo = sum(1 for t, _ in same if t)
            ident = f"{n_same}/{len(same)}"
            if n_topo != n_same:
                ident += f" ({n_topo} same topology)"
        m = tneb_components(x.shape[0]) if method == "tneb" else None
        return {"set": name, "method": method + (f" (m = {m})" if m else ""), "group": label,
                "runs": len(runs),
                "unreachable": len(cuts) - len(ok), "truth": fmt_range(truth),
                "pair": f"{pmin:.3f} / {pmed:.3f}" if ok and len(ok) > 1 else "n/a",
                "leaves": f"{min(leaves)}–{max(leaves)}" if min(leaves) != max(leaves)
                else str(leaves[0]), "identical": ident}

    rows.append(group(f"seeds {seeds[0]}–{seeds[-1]}", seed_runs, False))
    rows.append(group(f"perms (seed {s0})", [ref] + perm_runs, True))
    for r in rows:
        r["sec"] = f"{np.median(secs):.1f}"
    rep_topo, rep_h = same_tree(canonical(ref), canonical(repeat))
    repeat_row = {"method": method, "set": name, "what": f"seed {s0} fitted twice, 1 thread",
                  "same": rep_topo and rep_h == 0.0 and
                  np.array_equal(ref["linkage"], repeat["linkage"]) and
                  np.array_equal(ref["point_leaf"], repeat["point_leaf"]),
                  "detail": f"linkage equal: {np.array_equal(ref['linkage'], repeat['linkage'])}"}
    return rows, repeat_row, ref


# --- L2H ----------------------------------------------------------------------------------

def logits_of(x, y):
    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=0.5, stratify=y, random_state=0)
    lr = LogisticRegression(max_iter=2000).fit(x[tr], y[tr])
    z = lr.decision_function(x)
    if z.ndim == 1:  # binary: the two classes' logits as (0, z)
        z = np.stack([np.zeros_like(z), z], axis=1)
    return np.ascontiguousarray(z.astype(np.float32)), lr.score(x[te], y[te])


def fit_l2h(client, z, tag):
    t0 = time.monotonic()
    model = client.fit_l2h(z, name=f"det_l2h_{tag}").wait(progress=False)
    tree = model.tree()
    return {"tree": tree, "linkage": np.asarray(tree.linkage), "seconds": time.monotonic() - t0}


def run_l2h(client, name, x, y, args, rng):
    z, acc = logits_of(x, y)
    kk = z.shape[1]
    log(f"l2h {name} original")
    ref = fit_l2h(client, z, f"{name}_o")
    runs = []
    for i in range(args.perms):
        perm = rng.permutation(z.shape[0])
        log(f"l2h {name} permutation {i + 1}")
        runs.append(fit_l2h(client, np.ascontiguousarray(z[perm]), f"{name}_p{i}"))
    repeat = fit_l2h(client, z, f"{name}_r")
    allr = [ref] + runs
    n_same = sum(np.array_equal(ref["linkage"], r["linkage"]) for r in runs)
    worst = 1.0
    for kcut in range(1, kk + 1):
        cuts = [r["tree"].cut(kcut) for r in allr]
        for a, b in itertools.combinations(cuts, 2):
            if kcut > 1 and kcut < kk:
                worst = min(worst, adjusted_rand_score(a, b))
            elif not np.array_equal(a, b):
                worst = 0.0
    row = {"set": name, "K": kk, "acc": f"{acc:.3f}", "identical": f"{n_same}/{len(runs)}",
           "worst": f"{worst:.3f}", "sec": f"{np.median([r['seconds'] for r in allr]):.1f}"}
    rep = {"method": "l2h", "set": name, "what": "fitted twice, 1 thread",
           "same": np.array_equal(ref["linkage"], repeat["linkage"]),
           "detail": "linkage equal"}
    return row, rep, (z, ref)


# --- hierarchical PPCA --------------------------------------------------------------------

def fit_hppca(client, xtr, ytr, xte, s, tag):
    t0 = time.monotonic()
    model = client.hppca_train(xtr, ytr, f"det_hppca_{tag}", superclasses=s,
                               seed=0).wait(progress=False)
    cls = model.classes()
    pred = model.predict(xte, top_k=1)
    flat = model.predict(xte, top_k=int(ytr.max()) + 1, flat=True)
    order = np.argsort(flat.labels, axis=1)
    scores = np.take_along_axis(flat.scores, order, axis=1)
    tree = model.tree()
    grouping = dict(zip(cls.labels.tolist(), cls.superclasses.tolist()))
    return {"grouping": grouping, "pred": pred.labels[:, 0], "scores": scores,
            "linkage": np.asarray(tree.linkage), "seconds": time.monotonic() - t0}


def partition_of(grouping):
    groups = {}
    for c, s in grouping.items():
        groups.setdefault(s, []).append(c)
    return sorted(tuple(sorted(g)) for g in groups.values())


def run_hppca(client, name, x, y, args, rng):
    kk = int(y.max()) + 1
    s = min(3, kk)
    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=0.5, stratify=y, random_state=0)
    xtr, ytr, xte, yte = x[tr], y[tr], x[te], y[te]
    log(f"hppca {name} original")
    ref = fit_hppca(client, xtr, ytr, xte, s, f"{name}_o")
    runs = []
    for i in range(args.perms):
        perm = rng.permutation(len(ytr))
        log(f"hppca {name} permutation {i + 1}")
        runs.append(fit_hppca(client, np.ascontiguousarray(xtr[perm]), ytr[perm], xte, s,
                              f"{name}_p{i}"))
    repeat = fit_hppca(client, xtr, ytr, xte, s, f"{name}_r")
    same_ids = sum(r["grouping"] == ref["grouping"] for r in runs)
    same_part = sum(partition_of(r["grouping"]) == partition_of(ref["grouping"]) for r in runs)
    same_link = sum(np.array_equal(r["linkage"], ref["linkage"]) for r in runs)
    agree = [float(np.mean(r["pred"] == ref["pred"])) for r in runs]
    dscore = max(float(np.max(np.abs(r["scores"] - ref["scores"]))) for r in runs)
    rel = max(float(np.max(np.abs(r["scores"] - ref["scores"]) /
                           np.maximum(np.abs(ref["scores"]), 1e-30))) for r in runs)
    accs = [float(np.mean(r["pred"] == yte)) for r in [ref] + runs]
    row = {"set": name, "K": kk, "S": s,
           "grouping": f"{same_part}/{len(runs)}" + ("" if same_ids == same_part
                                                      else f" ({same_ids} same ids)"),
           "tree": f"{same_link}/{len(runs)}", "agree": f"{min(agree):.4f}",
           "dscore": f"{dscore:.2e} (rel {rel:.1e})", "acc": fmt_range(accs),
           "sec": f"{np.median([r['seconds'] for r in [ref] + runs]):.1f}"}
    drep = float(np.max(np.abs(repeat["scores"] - ref["scores"])))
    rep = {"method": "hppca", "set": name, "what": "trained twice, 1 thread",
           "same": repeat["grouping"] == ref["grouping"] and
           np.array_equal(repeat["linkage"], ref["linkage"]) and
           np.array_equal(repeat["scores"], ref["scores"]),
           "detail": f"max \\|Δscore\\| {drep:.1e}"}
    return row, rep, (xtr, ytr, xte, s, ref)


def threads_check(client2, method, dataset, first):
    """Fits again on the two-thread server; (identical?, detail) against the first fit."""
    label, x, y = dataset
    if method in ("ghhc", "tneb"):
        ref = first
        r = fit_clusterer(client2, method, x, 1 if method == "ghhc" else 0, "t2")
        topo, dh = same_tree(canonical(ref), canonical(r))
        same = (topo and dh == 0.0 and np.array_equal(ref["linkage"], r["linkage"]) and
                np.array_equal(ref["point_leaf"], r["point_leaf"]))
        if not topo:
            k = int(y.max()) + 1
            a, b = labels_at(ref, k), labels_at(r, k)
            ari = "n/a" if a is None or b is None else f"{adjusted_rand_score(a, b):.3f}"
            return same, f"different tree; ARI between the cuts at k: {ari}"
        return same, f"same topology, max \\|Δheight\\| {dh:.1e}"
    if method == "l2h":
        z, ref = first
        r = fit_l2h(client2, z, "t2")
        same = np.array_equal(ref["linkage"], r["linkage"])
        return same, "linkage equal" if same else "linkage differs"
    xtr, ytr, xte, s, ref = first
    r = fit_hppca(client2, xtr, ytr, xte, s, "t2")
    dmax = float(np.max(np.abs(r["scores"] - ref["scores"])))
    same = (r["grouping"] == ref["grouping"] and np.array_equal(r["linkage"], ref["linkage"])
            and dmax == 0.0)
    return same, (f"grouping equal: {r['grouping'] == ref['grouping']}, equal predictions "
                  f"{np.mean(r['pred'] == ref['pred']):.4f}, max \\|Δscore\\| {dmax:.1e}")


# --- the run ------------------------------------------------------------------------------

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--perms", type=int, default=5)
    ap.add_argument("--methods", default="ghhc,tneb,l2h,hppca")
    ap.add_argument("--sets", default="digits,wine,breast_cancer,iris,densired")
    ap.add_argument("--tneb-sets", default="wine,breast_cancer,iris,densired",
                    help="the sets t-NEB fits (digits: one fit took over 7 minutes on the "
                         "ASan build beside a test run)")
    ap.add_argument("--densired", default=DEFAULT_DENSIRED)
    ap.add_argument("--densired-rows", type=int, default=0,
                    help="random subsample of the Densired rows (0: all 10,000)")
    ap.add_argument("--no-threads-check", action="store_true")
    ap.add_argument("--parallel", type=int, default=2,
                    help="fits at a time (dendrod --workers; each fit has one thread)")
    ap.add_argument("--perm-seed", type=int, default=12345)
    args = ap.parse_args()
    methods = args.methods.split(",")
    names = args.sets.split(",")
    started = time.monotonic()
    start_date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load_before = sh("uptime")
    cmd_env = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in
                       ("DENDRO_DENDROD", "ASAN_OPTIONS", "LSAN_OPTIONS") if k in os.environ)
    # Both servers run one private copy of the binary: a rebuild during the run (another
    # session's) must not put two builds into one comparison.
    binary = os.environ.get("DENDRO_DENDROD") or shutil.which("dendrod") or \
        str(ROOT / "build" / "server" / "dendrod")
    with open(binary, "rb") as f:
        binary_sha = hashlib.sha1(f.read()).hexdigest()[:12]
    binary_time = datetime.datetime.fromtimestamp(os.path.getmtime(binary)).astimezone()
    copy_dir = tempfile.mkdtemp(prefix="determinism-dendrod-")
    atexit.register(shutil.rmtree, copy_dir, True)
    os.environ["DENDRO_DENDROD"] = shutil.copy2(binary, os.path.join(copy_dir, "dendrod"))
    data = load_sets(names, args.densired, args.densired_rows)

    tneb_sets = args.tneb_sets.split(",")
    tasks = [(m, n) for m in ("ghhc", "tneb") if m in methods for n in names
             if m == "ghhc" or n in tneb_sets]
    tasks += [(m, n) for m in ("l2h", "hppca") if m in methods for n in names if n != "densired"]
    big = {"densired": 0, "digits": 1}  # longest first, so the two lanes end together
    order = sorted(tasks, key=lambda t: (big.get(t[1], 2), t[0] != "tneb"))

    def run_task(client, task):
        method, name = task
        label, x, y = data[name]
        rng = np.random.default_rng(args.perm_seed)  # the same permutations in every task
        try:
            if method in ("ghhc", "tneb"):
                res = run_clusterer(client, method, label, x, y, args, rng)
            elif method == "l2h":
                res = run_l2h(client, label, x, y, args, rng)
            else:
                res = run_hppca(client, label, x, y, args, rng)
            log(f"{method} {name} done: {res[0]} {res[1]}")  # kept if the run is stopped
            return res
        except Exception as e:  # a method refusing a set is a result too
            log(f"{method} {name} failed: {e}")
            return e

    results = {}
    with Client.local(threads=1, workers=args.parallel, timeout=900) as client:
        with ThreadPoolExecutor(args.parallel) as pool:
            futures = {t: pool.submit(run_task, client, t) for t in order}
            for t in tasks:
                results[t] = futures[t].result()

    clu_rows, l2h_rows, hppca_rows, same_rows, thread_rows = [], [], [], [], []
    firsts = {}
    for (method, name) in tasks:
        res = results[(method, name)]
        if isinstance(res, Exception):
            if method in ("ghhc", "tneb"):
                clu_rows.append({"set": data[name][0], "method": method, "group": "failed",
                                 "runs": 0, "unreachable": 0, "truth": str(res)[:120],
                                 "pair": "", "leaves": "", "identical": "", "sec": ""})
            continue
        rows, rep, first = res
        if method in ("ghhc", "tneb"):
            clu_rows += rows
        elif method == "l2h":
            l2h_rows.append(rows)
        else:
            hppca_rows.append(rows)
        same_rows.append(rep)
        firsts[(method, name)] = first

    if not args.no_threads_check:
        checks = [t for t in tasks if t in firsts and
                  (t[0] in ("l2h", "hppca") or t[1] in ("digits", "densired", "iris"))]
        with Client.local(threads=2, timeout=900) as client2:
            for method, name in checks:
                log(f"{method} {name} with 2 threads")
                same, detail = threads_check(client2, method, data[name], firsts[(method, name)])
                thread_rows.append({"method": method, "set": data[name][0],
                                    "what": "2 threads vs 1 thread", "same": same,
                                    "detail": detail})

    elapsed = time.monotonic() - started
    nice = os.nice(0)
    cmd = ((cmd_env + " ") if cmd_env else "") + (f"nice -n {nice} " if nice else "") + \
        "/usr/bin/python3 " + " ".join(shlex.quote(a) for a in
                                       ["tests/bench/determinism_spread.py"] + sys.argv[1:])
    print("### Determinism and spread over seeds, row order and threads\n")
    print(f"- Command: `{cmd}`")
    model = sh("lscpu | sed -n 's/^Model name: *//p'")
    git = "git -C " + shlex.quote(str(ROOT))
    dirty = ", working tree modified" if sh(git + " status --porcelain --untracked-files=no") \
        else ""
    print(f"- Machine: {model}, nproc {sh('nproc')}; Python {platform.python_version()}, "
          f"scikit-learn {sklearn.__version__}, numpy {np.__version__}; dendrod "
          f"`{binary}` (sha1 {binary_sha}, built {binary_time:%Y-%m-%d %H:%M %Z}; the checkout "
          f"at {sh(git + ' rev-parse --short HEAD')}{dirty}), "
          f"`--threads 1 --workers {args.parallel}` unless stated")
    print(f"- Date: {start_date}; total {elapsed / 60:.1f} min")
    print(f"- Load before: `{load_before}`")
    print(f"- Load after: `{sh('uptime')}`")
    print(f"- Permutations: numpy default_rng({args.perm_seed}), the same {args.perms} per set "
          "and method; features standardised (StandardScaler)\n")
    if clu_rows:
        print("**gHHC and t-NEB, cut at the true number of classes** (ARI to the truth: median "
              "[min, max]; pairwise ARI between the group's runs: min / median; identical: "
              "permuted fits whose tree equals the original order's — same rows under every "
              "node, same heights)\n")
        print("| set | method | runs | leaves | ARI to truth | pairwise ARI | identical to "
              "original order | s / fit |")
        print("|---|---|---|---|---|---|---|---|")
        for r in clu_rows:
            unr = f" ({r['unreachable']} cannot cut at k)" if r["unreachable"] else ""
            print(f"| {r['set']} | {r['method']} | {r['group']}{unr} | {r['leaves']} | "
                  f"{r['truth']} | {r['pair']} | {r['identical'] or '—'} | {r['sec']} |")
        print()
    if l2h_rows:
        print("**L2H, original vs permuted row order** (logits: LogisticRegression fitted on a "
              "stratified half, decision_function on all rows)\n")
        print("| set | K | LR held-out accuracy | permuted fits with the same linkage | smallest "
              "pairwise ARI of the cuts, all k | s / fit |")
        print("|---|---|---|---|---|---|")
        for r in l2h_rows:
            print(f"| {r['set']} | {r['K']} | {r['acc']} | {r['identical']} | {r['worst']} | "
                  f"{r['sec']} |")
        print()
    if hppca_rows:
        print("**Hierarchical PPCA, original vs permuted training rows** (trained on a "
              "stratified half, predicted on the other half; seed 0)\n")
        print("| set | K | S | same class→super-class grouping | same tree | smallest fraction "
              "of equal predictions | largest \\|Δ flat score\\| | held-out accuracy | s / fit |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in hppca_rows:
            print(f"| {r['set']} | {r['K']} | {r['S']} | {r['grouping']} | {r['tree']} | "
                  f"{r['agree']} | {r['dscore']} | {r['acc']} | {r['sec']} |")
        print()
    if same_rows or thread_rows:
        print("**Same input again** (identical: same tree, heights, point→leaf assignment; "
              "hPPCA also the same grouping and flat scores)\n")
        print("| method | set | compared | identical | detail |")
        print("|---|---|---|---|---|")
        for r in same_rows + thread_rows:
            print(f"| {r['method']} | {r['set']} | {r['what']} | "
                  f"{'yes' if r['same'] else '**no**'} | {r['detail']} |")
        print()


if __name__ == "__main__":
    main()
