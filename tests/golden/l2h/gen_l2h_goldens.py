#!/usr/bin/python3
"""Golden merge sequences for Dendro's L2H (core/l2h/l2h.h).

Reference: the Python implementation of L2H in appendix A (Figure 4) of
Palumbo et al., "Logits to Hierarchies", copied verbatim below except for one
fix: the listing's `re_pp_per_group` line is not valid Python; it is replaced
by the dict comprehension it clearly means. The other two aggregations of the
paper's Table 7 are produced by swapping only the score line (see
SCORE_LINES).

Inputs are float32 arrays (stored as .npy); the reference receives
`logits.astype(np.float64)`, so it sees exactly the values Dendro reads.

For every case and aggregation the script records the reference's steps and
checks that each decision (the argmin over group scores, the argmax over the
per-group mean of rp) is either an exact tie, resolved by list order, or
separated from the runner-up by at least 1e-9 relative, so that the goldens
do not depend on the last bits of exp().

Also writes numpy_sums.json: np.sum / np.mean of deterministic float64 arrays
(used to check Dendro's NumpySum against numpy's summation order).

Run from anywhere with Debian's python (numpy 1.24, scipy 1.10):
    /usr/bin/python3 tests/golden/l2h/gen_l2h_goldens.py
"""
import inspect
import json
import os

import numpy as np
from scipy.special import softmax

OUT_DIR = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------
# Reference: appendix A, verbatim except the re_pp_per_group line.
# ---------------------------------------------------------------------------
def L2H(logits):
    """
    L2H Algorithm.
    Args:
        logits: Logits from model (N x K) where N number of datapoints in the dataset
                and K is the number of clusters
    Returns:
        steps: Merging steps characterizing the hierarchy
    """
    # Number of clusters is equal to size of last dimension in the logits
    K = logits.shape[-1]
    # Initialize groups of clusters to single clusters
    groups = [(c,) for c in range(K)]
    # Initialize list of steps that characterize hierarchy
    steps = []
    # Given the logits for the whole dataset, compute assignments and predicted probabilities
    softmaxed_logits = softmax(logits, axis=-1)
    assignments = np.argmax(softmaxed_logits, axis=-1)
    pred_probs = np.max(softmaxed_logits, axis=-1)
    for step in range(1, K):
        # Compute score for each group (which chosen aggregation function)
        score_per_gr = {}
        for group in groups:
            score_per_gr[group] = sum([np.mean(pred_probs[assignments == c]) for c in group])
        # Get the group with the lowest score (lsg), will be merged at this iteration
        lsg = min(score_per_gr, key=score_per_gr.get)
        # Get the logits for datapoints assigned to the lowest score group
        logits_lsg = logits[np.where(np.isin(assignments, lsg))[0]]
        # Reassign datapoints in lsg to only clusters not in lsg,
        # and re-compute predicted probabilities
        msm_logits_lsg = np.zeros_like(logits_lsg)
        cls_not_in_lsg = [c for c in range(K) if c not in lsg]
        cls_in_lsg = [c for c in range(K) if c in lsg]
        msm_logits_lsg[:, cls_not_in_lsg] = softmax(logits_lsg[:, cls_not_in_lsg], axis=-1)
        msm_logits_lsg[:, cls_in_lsg] = 0.
        reassignments = np.argmax(msm_logits_lsg, axis=-1)
        re_pred_probs = np.max(msm_logits_lsg, axis=-1)
        # Compute the total reassigned predicted probability per cluster and average across
        # clusters in each group. Then select the group with the highest average.
        re_pp_per_group = {group: np.mean([np.sum(re_pred_probs[reassignments == c]) for c in group]) for group in groups if group != lsg}
        mtg = max(re_pp_per_group, key=re_pp_per_group.get)
        # Merge 'lsg' with 'mtg' and update 'groups'.
        groups = [gr for gr in groups if gr not in [lsg, mtg]] + [lsg + mtg]
        # Add merging in current iteration to steps
        steps.append((lsg, mtg))
    return steps
# ---------------------------------------------------------------------------

SCORE_LINE = "score_per_gr[group] = sum([np.mean(pred_probs[assignments == c]) for c in group])"
SCORE_LINES = {
    # Table 7, last row (the paper's choice): sum over c in G of mean g
    "sum_of_means": SCORE_LINE,
    # Table 7, first row: sum over c in G of sum g
    "sum_of_sums": "score_per_gr[group] = sum([np.sum(pred_probs[assignments == c]) for c in group])",
    # Table 7, second row: 1/|G| sum over c in G of mean g
    "mean_of_means":
        "score_per_gr[group] = np.mean([np.mean(pred_probs[assignments == c]) for c in group])",
}
MTG_LINE = "mtg = max(re_pp_per_group, key=re_pp_per_group.get)"


def make_l2h(aggregation, trace=None):
    """The reference with the score line for `aggregation`; with `trace`, the
    dicts of every step are appended to it (nothing else changes)."""
    src = inspect.getsource(L2H)
    assert src.count(SCORE_LINE) == 1 and src.count(MTG_LINE) == 1
    src = src.replace(SCORE_LINE, SCORE_LINES[aggregation])
    if trace is not None:
        src = src.replace(MTG_LINE, MTG_LINE + "\n        _trace.append("
                          "(dict(score_per_gr), lsg, dict(re_pp_per_group), mtg))")
    namespace = {"np": np, "softmax": softmax, "_trace": trace}
    exec(compile(src, "<L2H %s>" % aggregation, "exec"), namespace)
    return namespace["L2H"]


def decision_gaps(trace):
    """Per step: relative gap between the chosen score / relatedness and the
    runner-up (0.0 = exact tie, inf = no runner-up)."""
    out = []
    for scores, lsg, re_pp, mtg in trace:
        s = scores[lsg]
        others = [v for g, v in scores.items() if g != lsg]
        runner = min(others)
        assert runner >= s
        score_gap = (runner - s) / abs(s) if runner != s else 0.0
        m = re_pp[mtg]
        others = [v for g, v in re_pp.items() if g != mtg]
        if others:
            runner = max(others)
            assert runner <= m
            rp_gap = (m - runner) / abs(m) if runner != m else 0.0
        else:
            rp_gap = float("inf")
        out.append((float(score_gap), float(rp_gap)))
    return out


def run_reference(logits32, aggregation):
    trace = []
    steps = make_l2h(aggregation, trace)(logits32.astype(np.float64))
    # The plain (untraced) reference gives the same steps.
    if aggregation == "sum_of_means":
        assert L2H(logits32.astype(np.float64)) == steps
    return steps, decision_gaps(trace)


# ---------------------------------------------------------------------------
# Synthetic logits. Every generator returns float32 (N, K) with every cluster
# receiving at least one point.
# ---------------------------------------------------------------------------
def clustered(rng, n, k, scale=1.0, boost=(1.0, 4.0)):
    y = np.arange(n) % k
    rng.shuffle(y)
    x = rng.normal(0.0, scale, (n, k))
    x[np.arange(n), y] += rng.uniform(boost[0], boost[1], n)
    return x.astype(np.float32)


def hierarchical(rng, n, branching, alpha=1.2, noise=0.8):
    """Leaves of a balanced tree with the given branching per level; a point
    of leaf a has logit -alpha * (levels up to LCA(a, b)) + noise for leaf b,
    with a per-point temperature so confidences vary."""
    k = int(np.prod(branching))
    digits = np.array(np.unravel_index(np.arange(k), branching)).T  # (k, depth)
    depth = len(branching)
    same = (digits[:, None, :] == digits[None, :, :])
    # number of leading equal digits -> distance = depth - that
    lead = np.cumprod(same, axis=2).sum(axis=2)
    dist = depth - lead
    y = np.arange(n) % k
    rng.shuffle(y)
    temp = rng.uniform(0.5, 2.0, n)[:, None]
    x = (-alpha * dist[y] + rng.normal(0.0, noise, (n, k))) * temp
    x[np.arange(n), y] += 1.0
    return x.astype(np.float32)


def nonempty(x):
    return len(np.unique(np.argmax(x, axis=1))) == x.shape[1]


def twin_pairs(rng, n_pairs, k, sigma, cluster_of_pair, second_of_pair, conf, noise=0.5):
    """Points in consecutive pairs (r, sigma(r)): the data set is invariant
    under the column permutation `sigma` (an involution), which maps cluster
    c onto sigma[c] with identical statistics. Pair p's first point has its
    maximum at cluster_of_pair[p], runner-up at second_of_pair[p] (or none,
    -1), with margin conf[p]."""
    rows = []
    for p in range(n_pairs):
        c, s = cluster_of_pair[p], second_of_pair[p]
        r = rng.normal(0.0, noise, k)
        # keep every other column clearly below the top two
        r -= 2.0
        r[c] = 3.0
        if s >= 0:
            r[s] = 3.0 - conf[p]
        rows.append(r)
        rows.append(r[sigma])
    return np.array(rows).astype(np.float32)


def check_sigma_invariant(x, sigma):
    # rows come in pairs (r, sigma(r))
    assert np.array_equal(x[1::2], x[0::2][:, sigma])


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
MIN_GAP = 1e-9


def gaps_ok(gaps, allow_ties):
    for sg, rg in gaps:
        for g in (sg, rg):
            if g == 0.0:
                if not allow_ties:
                    return False
            elif g < MIN_GAP:
                return False
    return True


def random_case(name, seed, n, k, **kw):
    rng = np.random.default_rng(seed)
    while True:
        x = clustered(rng, n, k, **kw)
        if nonempty(x):
            return name, x


def hier_case(name, seed, n, branching, **kw):
    rng = np.random.default_rng(seed)
    while True:
        x = hierarchical(rng, n, branching, **kw)
        if nonempty(x):
            return name, x


def sigma_for(k, pairs):
    sigma = np.arange(k)
    for a, b in pairs:
        sigma[a], sigma[b] = b, a
    return sigma


def ties_score_case(seed):
    """Clusters 0/1 and 8/9 are exact twins (K = 16: with numpy's pairwise
    order, swapping columns 0<->1 together with 8<->9 leaves each row's
    sum of exponentials bit-identical). Clusters 0 and 1 are the least
    confident, so step 1 is an exact score tie, resolved by list order."""
    k = 16
    sigma = sigma_for(k, [(0, 1), (8, 9)])
    rng = np.random.default_rng(seed)
    clusters, seconds, conf = [], [], []
    # fixed clusters (2..7, 10..15): confident, second choice random fixed cluster
    fixed = [c for c in range(k) if sigma[c] == c]
    for c in fixed:
        for _ in range(6):
            clusters.append(c)
            seconds.append(int(rng.choice([f for f in fixed if f != c])))
            conf.append(rng.uniform(1.5, 3.0))
    # twins 0 (and by symmetry 1): low confidence, runner-up 1 (resp. 0)
    for _ in range(7):
        clusters.append(0)
        seconds.append(1)
        conf.append(rng.uniform(0.05, 0.3))
    # twins 8/9: medium confidence, runner-up a fixed cluster (symmetric)
    for _ in range(5):
        clusters.append(8)
        seconds.append(int(rng.choice(fixed)))
        conf.append(rng.uniform(0.6, 1.2))
    order = rng.permutation(len(clusters))
    x = twin_pairs(rng, len(clusters), k, sigma, [clusters[i] for i in order],
                   [seconds[i] for i in order], [conf[i] for i in order])
    check_sigma_invariant(x, sigma)
    return "ties_score", x


def ties_rp_case(seed):
    """Cluster 2 (fixed by sigma) is the least confident; its points come in
    twin pairs whose runner-up is cluster 0 resp. 1, so rp(0) == rp(1)
    exactly at step 1 and the tie goes to group (0,), first in list order."""
    k = 16
    sigma = sigma_for(k, [(0, 1), (8, 9)])
    rng = np.random.default_rng(seed)
    fixed = [c for c in range(k) if sigma[c] == c]
    clusters, seconds, conf = [], [], []
    for _ in range(8):
        clusters.append(2)
        seconds.append(0)  # the twin gets runner-up 1
        conf.append(rng.uniform(0.02, 0.2))
    for c in range(k):
        if c == 2 or (sigma[c] != c and c > sigma[c]):
            continue
        for _ in range(5):
            clusters.append(c)
            seconds.append(int(rng.choice([f for f in fixed if f != c])))
            conf.append(rng.uniform(1.0, 3.0))
    order = rng.permutation(len(clusters))
    x = twin_pairs(rng, len(clusters), k, sigma, [clusters[i] for i in order],
                   [seconds[i] for i in order], [conf[i] for i in order])
    check_sigma_invariant(x, sigma)
    return "ties_rp", x


def near_ties_case(seed):
    """Exact twins as in ties_score / ties_rp (K = 16, sigma = (0 1)(8 9)),
    then the symmetry is broken by a few float32 ulps so that two decisive
    steps become near-ties (relative gap about 1e-6) that go against list
    order: a score near-tie won by cluster 1 over its twin 0, and an rp
    near-tie won by cluster 9 over its twin 8."""
    k = 16
    sigma = sigma_for(k, [(0, 1), (8, 9)])
    rng = np.random.default_rng(seed)
    fixed = [c for c in range(k) if sigma[c] == c]
    clusters, seconds, conf = [], [], []
    for _ in range(6):  # twins 0/1, least confident
        clusters.append(0)
        seconds.append(int(rng.choice(fixed)))
        conf.append(rng.uniform(0.05, 0.3))
    for _ in range(6):  # cluster 3: next least confident, runner-up 8 (twin: 9)
        clusters.append(3)
        seconds.append(8)
        conf.append(rng.uniform(0.4, 0.6))
    for c in fixed + [8]:
        if c == 3:
            continue
        for _ in range(4):
            clusters.append(c)
            seconds.append(int(rng.choice([f for f in fixed if f != c])))
            conf.append(rng.uniform(1.2, 3.0))
    order = rng.permutation(len(clusters))
    cl = [clusters[i] for i in order]
    x = twin_pairs(rng, len(clusters), k, sigma, cl, [seconds[i] for i in order],
                   [conf[i] for i in order])
    check_sigma_invariant(x, sigma)
    # Nudges: cluster 0's first point gets a higher own logit (so its twin
    # cluster 1 becomes the lowest by a hair); one twin point of cluster 3
    # gets a higher runner-up logit 9 (so rp(9) exceeds rp(8) by a hair).
    i0 = 2 * cl.index(0)
    i3 = 2 * cl.index(3) + 1
    assert np.argmax(x[i0]) == 0 and np.argmax(x[i3]) == 3
    for _ in range(40):
        x[i0, 0] = np.nextafter(x[i0, 0], np.float32(np.inf), dtype=np.float32)
        x[i3, 9] = np.nextafter(x[i3, 9], np.float32(np.inf), dtype=np.float32)
    return "near_ties", x


def write_npy(name, x):
    path = os.path.join(OUT_DIR, name + ".npy")
    np.save(path, np.ascontiguousarray(x, dtype=np.float32))
    return name + ".npy"


def numpy_sums():
    """np.sum / np.mean of a[i] = (h(i) / 2^53) * 2^((i % 37) - 18) with
    h(i) = (i * 0x9E3779B97F4A7C15 mod 2^64) >> 11: exact doubles in Python
    and C++, spread over enough binary orders that the order of additions
    changes the rounded result."""
    out = []
    for n in [1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 127, 128, 129, 130, 255, 256, 257, 1000, 1001,
              8191, 8192, 8193, 16384, 20000, 50001]:
        a = np.array([float(((i * 0x9E3779B97F4A7C15) % 2 ** 64) >> 11) / 2.0 ** 53 *
                      2.0 ** ((i % 37) - 18) for i in range(n)])
        seq = 0.0
        for v in a:
            seq += float(v)
        out.append({"n": n, "sum": float(np.sum(a)).hex(), "mean": float(np.mean(a)).hex(),
                    "sequential": seq.hex()})
    # the orders must actually differ, or the test would be vacuous
    assert sum(o["sum"] != o["sequential"] for o in out) >= 10
    return out


def main():
    cases = [
        random_case("random_k5", 1, 240, 5),
        random_case("random_k12", 2, 600, 12, scale=1.5),
        random_case("random_k20", 3, 900, 20, scale=0.8, boost=(0.5, 3.0)),
        hier_case("hier_k27", 4, 1400, (3, 3, 3)),
        hier_case("hier_k120", 5, 3000, (4, 5, 6), alpha=1.0, noise=0.9),
        ties_score_case(6),
        ties_rp_case(7),
        near_ties_case(8),
    ]
    golden = {
        "generator": "tests/golden/l2h/gen_l2h_goldens.py",
        "reference": "Palumbo et al., Logits to Hierarchies, appendix A (Figure 4), verbatim "
                     "except the re_pp_per_group line; other aggregations swap the score line",
        "numpy": np.__version__,
        "scipy": __import__("scipy").__version__,
        "min_relative_gap": MIN_GAP,
        "cases": [],
    }
    for name, x in cases:
        assert nonempty(x), name
        entry = {"name": name, "logits": write_npy(name, x), "rows": int(x.shape[0]),
                 "cols": int(x.shape[1]), "results": {}}
        for agg in ["sum_of_means", "sum_of_sums", "mean_of_means"]:
            steps, gaps = run_reference(x, agg)
            allow_ties = name.startswith("ties") or name == "near_ties"
            if not gaps_ok(gaps, allow_ties):
                raise SystemExit("%s/%s: a decision is closer than %g: %s" % (
                    name, agg, MIN_GAP, [g for g in gaps if 0 < min(g) < MIN_GAP]))
            score_ties = sum(1 for g in gaps if g[0] == 0.0)
            rp_ties = sum(1 for g in gaps if g[1] == 0.0)
            nonzero = [v for g in gaps for v in g if v > 0.0]
            entry["results"][agg] = {
                "steps": [[list(map(int, a)), list(map(int, b))] for a, b in steps],
                "exact_score_ties": score_ties,
                "exact_rp_ties": rp_ties,
                "min_nonzero_gap": min(nonzero) if nonzero else None,
            }
            print("%-12s %-14s steps=%3d score_ties=%d rp_ties=%d min_gap=%.3g" % (
                name, agg, len(steps), score_ties, rp_ties, min(nonzero)))
        golden["cases"].append(entry)
    # The deliberate tie / near-tie constructions must have produced them.
    by_name = {c["name"]: c["results"] for c in golden["cases"]}
    assert by_name["ties_score"]["sum_of_means"]["exact_score_ties"] >= 1
    assert by_name["ties_rp"]["sum_of_means"]["exact_rp_ties"] >= 1
    nt = by_name["near_ties"]["sum_of_means"]
    assert 1e-8 < nt["min_nonzero_gap"] < 1e-5, nt["min_nonzero_gap"]
    with open(os.path.join(OUT_DIR, "l2h_goldens.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    with open(os.path.join(OUT_DIR, "numpy_sums.json"), "w") as f:
        json.dump({"generator": "tests/golden/l2h/gen_l2h_goldens.py", "numpy": np.__version__,
                   "arrays": numpy_sums()}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
