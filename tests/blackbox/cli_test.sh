#!/usr/bin/env bash
# End-to-end test of the `dendro` CLI against a real dendrod.
#
#   cli_test.sh PATH/TO/dendrod PATH/TO/dendro
#
# Starts dendrod on a free port with a fresh data directory, drives the CLI
# the way a user would and checks its outputs with numpy/scipy/sklearn
# (Debian's /usr/bin/python3) as independent references.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh" "$@"

# --- conventions: --help exits 0 and lists every flag; --version on both --------
"$DENDROD" --help >help.txt || fail "dendrod --help exited $?"
for flag in listen data_dir workers max_job_memory_mb max_streams metrics_listen tls_cert; do
  grep -q -- "--$flag (default" help.txt || fail "dendrod --help does not list --$flag"
done
for bin in "$DENDROD" "$DENDRO"; do
  v=$("$bin" --version) || fail "$(basename "$bin") --version exited $?"
  [[ $v =~ ^dendrod?\ [0-9]+\.[0-9]+\.[0-9]+\ \((unknown|[0-9a-f]{12}(-dirty)?)\)$ ]] ||
    fail "$(basename "$bin") --version printed '$v'"
done
pass "--help and --version"

start_main_server

# --- inputs --------------------------------------------------------------------
# Hierarchical synthetic logits: 12 classes in 3 super-groups of 4. A point's
# logits favour its class and, less, the other classes of its group.
"$PY" - <<'EOF'
import numpy as np
rng = np.random.default_rng(7)
N, K = 2000, 12
y = rng.integers(0, K, N)
group = np.arange(K) // 4
logits = rng.normal(0.0, 1.0, (N, K))
logits[np.arange(N), y] += 3.0
logits += 1.5 * (group[None, :] == group[y][:, None])
np.save("logits.npy", logits.astype(np.float32))
np.save("labels.npy", y.astype(np.int64))
x = logits.astype(np.float32).copy(); x[17, 5] = np.nan
np.save("nan.npy", x)
np.save("k1.npy", np.ones((50, 1), np.float32))
np.save("ints.npy", np.ones((50, 3), np.int64))
raw = open("logits.npy", "rb").read()
open("truncated.npy", "wb").write(raw[: len(raw) // 2])
EOF


# --- l2h with every output and metrics ------------------------------------------
run l2h logits.npy --labels labels.npy --out t.npy --out t.nwk --out t.json
[[ $RC -eq 0 ]] || fail "l2h exited $RC: $(cat err.txt)"
[[ "$(head -1 out.txt)" == "model logits version 1" ]] ||
  fail "l2h printed '$(head -1 out.txt)', expected 'model logits version 1'"
tail -1 out.txt >metrics.json
for f in t.npy t.nwk t.json; do [[ -s $f ]] || fail "l2h did not write $f"; done
"$PY" - <<'EOF' || fail "l2h outputs are not what scipy/json expect"
import json
import numpy as np
from scipy.cluster.hierarchy import is_valid_linkage
Z = np.load("t.npy")
assert Z.dtype == np.float64 and Z.shape == (11, 4), (Z.dtype, Z.shape)
assert is_valid_linkage(Z, throw=True)
assert Z[-1, 3] == 12, Z[-1]
tree = json.load(open("t.json"))
assert tree["num_leaves"] == 12, tree["num_leaves"]
leaves = [n for n in tree["nodes"] if not n["children"]]
assert len(leaves) == 12, len(leaves)
assert len(tree["point_leaf"]) == 2000
nwk = open("t.nwk").read().strip()
assert nwk.endswith(";") and nwk.count("(") == nwk.count(")"), nwk
m = json.load(open("metrics.json"))
for key in ["level", "nmi", "ari", "acc", "leaf_purity", "dendrogram_purity", "lhd"]:
    assert key in m, (key, m)
    assert 0.0 <= m[key] or key == "ari", (key, m[key])
EOF
pass "l2h wrote a valid linkage, Newick and JSON and printed metrics"

# The super-groups are found: cutting the tree into 3 clusters puts the 4
# classes of each group together.
"$PY" - <<'EOF' || fail "the 3-cluster cut of the L2H tree does not recover the super-groups"
import numpy as np
from scipy.cluster.hierarchy import fcluster
Z = np.load("t.npy")
cut = fcluster(Z, 3, criterion="maxclust")
groups = {}
for leaf, c in enumerate(cut):
    groups.setdefault(c, set()).add(leaf // 4)
assert len(groups) == 3 and all(len(g) == 1 for g in groups.values()), groups
EOF
pass "3-cluster cut matches the synthetic super-groups"

# --- assign ----------------------------------------------------------------------
run assign --model logits --level 3 logits.npy --out a3.npy
[[ $RC -eq 0 ]] || fail "assign --level 3 exited $RC: $(cat err.txt)"
run assign --model logits logits.npy --out leaf.npy
[[ $RC -eq 0 ]] || fail "assign exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "assign results disagree with argmax / scipy's cut"
import numpy as np
from scipy.cluster.hierarchy import fcluster
from sklearn.metrics import adjusted_rand_score
a3 = np.load("a3.npy"); leaf = np.load("leaf.npy"); x = np.load("logits.npy")
assert a3.dtype == np.int32 and a3.shape == (2000,), (a3.dtype, a3.shape)
assert a3.min() >= 0 and a3.max() < 3, (a3.min(), a3.max())
assert leaf.dtype == np.int32 and (leaf == x.argmax(axis=1)).all()
# Same partition as scipy's 3-cluster cut of the downloaded linkage.
cut = fcluster(np.load("t.npy"), 3, criterion="maxclust")
assert adjusted_rand_score(cut[leaf], a3) == 1.0
EOF
pass "assign: leaf ids = argmax, level 3 = scipy's 3-cluster cut"

# --- eval ------------------------------------------------------------------------
run eval t.json --assignments leaf.npy --labels labels.npy
[[ $RC -eq 0 ]] || fail "eval exited $RC: $(cat err.txt)"
cp out.txt eval.json
"$PY" - <<'EOF' || fail "eval output disagrees with l2h's metrics or sklearn"
import json
import numpy as np
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
e = json.load(open("eval.json")); m = json.load(open("metrics.json"))
assert e == m, (e, m)  # same tree, same points
y = np.load("labels.npy"); leaf = np.load("leaf.npy")
assert e["level"] == 12  # 12 true classes -> the leaf level
assert abs(e["nmi"] - normalized_mutual_info_score(y, leaf)) < 1e-9, e
assert abs(e["ari"] - adjusted_rand_score(y, leaf)) < 1e-9, e
EOF
run eval t.json --labels labels.npy --level 3
[[ $RC -eq 0 ]] || fail "eval --level 3 exited $RC: $(cat err.txt)"
grep -q '"level":3' out.txt || fail "eval --level 3 printed $(cat out.txt)"
pass "eval matches l2h's metrics and sklearn's NMI/ARI"
# The same tree as Newick and as a linkage, and from the server by reference.
for tree in t.nwk t.npy; do
  run eval "$tree" --assignments leaf.npy --labels labels.npy
  [[ $RC -eq 0 ]] || fail "eval $tree exited $RC: $(cat err.txt)"
  "$PY" -c '
import json, sys
e = json.load(open("out.txt")); want = json.load(open("eval.json"))
for k in ("nmi", "ari", "acc", "dendrogram_purity", "level"):
    assert abs(e[k] - want[k]) < 1e-9, (sys.argv[1], k, e, want)
' "$tree" || fail "eval $tree disagrees with eval t.json: $(cat out.txt)"
done
run eval t.json --labels labels.npy
cp out.txt eval_points.json
run eval logits:1 --labels labels.npy
[[ $RC -eq 0 ]] && cmp -s out.txt eval_points.json ||
  fail "eval logits:1 ($RC): $(cat out.txt) $(cat err.txt) vs $(cat eval_points.json)"
# A SciPy linkage of the rows themselves: point i is leaf i.
"$PY" - <<'EOF'
import numpy as np
from scipy.cluster.hierarchy import linkage
rng = np.random.default_rng(3)
x = np.concatenate([rng.normal(c, 0.3, size=(20, 2)) for c in (0, 3, 6)])
np.save("rows_z.npy", linkage(x, "ward"))
np.save("rows_y.npy", np.repeat(np.arange(3), 20))
EOF
run eval rows_z.npy --labels rows_y.npy --level 3
[[ $RC -eq 0 ]] || fail "eval of a row linkage exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "eval of a row linkage disagrees with scipy's cut: $(cat out.txt)"
import json
import numpy as np
from scipy.cluster.hierarchy import fcluster
from sklearn.metrics import adjusted_rand_score
e = json.load(open("out.txt"))
cut = fcluster(np.load("rows_z.npy"), 3, criterion="maxclust")
assert abs(e["ari"] - adjusted_rand_score(np.load("rows_y.npy"), cut)) < 1e-9, e
EOF
expect_error 1 "no such file, and not a model reference" eval missing.nwk --labels labels.npy
pass "eval reads Newick, linkage and model references"

# --- diff ------------------------------------------------------------------------
# Two linkage files written here: the report against SciPy's cophenetic
# correlation and the counts every report must satisfy; the tanglegram scales.
"$PY" - <<'EOF'
import numpy as np
from scipy.cluster.hierarchy import linkage
rng = np.random.default_rng(5)
x = rng.normal(size=(16, 2))
np.save("diff_a.npy", linkage(x, "average"))
np.save("diff_b.npy", linkage(x + rng.normal(scale=0.3, size=x.shape), "complete"))
EOF
run diff diff_a.npy diff_b.npy --json --out diff.svg
[[ $RC -eq 0 ]] || fail "diff --json exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "diff --json disagrees with scipy or itself: $(head -c 600 out.txt)"
import json
import numpy as np
from scipy.cluster.hierarchy import cophenet
r = json.load(open("out.txt"))
assert r["format"] == "dendro.diff" and r["version"] == 1, r
assert r["matching"] == "ids" and r["shared_leaves"] == 16, r
want = np.corrcoef(cophenet(np.load("diff_a.npy")), cophenet(np.load("diff_b.npy")))[0, 1]
c = r["cophenetic_correlation"]
assert abs(c["value"] - want) < 1e-6 and c["pairs"] == 120 and not c["sampled"], (c, want)
rf = r["robinson_foulds"]
assert rf["distance"] == 14 + 14 - 2 * rf["shared_clusters"], rf
assert abs(rf["normalized"] - rf["distance"] / 28) < 1e-12, rf
ari = r["ari"]
assert ari["basis"] == "leaves" and "points" not in ari, ari
assert [l["k"] for l in ari["leaves"]["levels"]] == list(range(2, 16)), ari
assert abs(ari["mean"] - np.mean([l["ari"] for l in ari["leaves"]["levels"]])) < 1e-12, ari
n = r["events"]["counts"]
assert n["stayed"] + n["moved"] + n["split"] + n["gone"] == 14, n
assert n["stayed"] + n["moved"] + n["merged"] + n["new"] == 14, n
assert len(r["events"]["list"]) == 14 + n["merged"] + n["new"], n
t = r["tanglegram"]
assert 0 <= t["crossings_after"] <= t["crossings_before"], t
svg = open("diff.svg").read()
head = svg[svg.index("<svg"):svg.index(">", svg.index("<svg"))]
assert 'viewBox="0 0 ' in head and " width=" not in head, head
assert svg.count("<line ") == 16, svg.count("<line ")
EOF
# A tree against itself, as a file and as the model it was fetched from: the
# summary in words, with the ARI over the 2000 training points.
run diff t.json logits:1
[[ $RC -eq 0 ]] || fail "diff t.json logits:1 exited $RC: $(cat err.txt)"
grep -Eq '^robinson-foulds: +0, normalised 0\.000' out.txt &&
  grep -Eq '^cophenetic corr\.: +1\.0000 over 66 pairs' out.txt &&
  grep -Eq '^ARI over k: +mean 1\.000, min 1\.000 \(points, 11 levels\)' out.txt &&
  grep -Eq '^events: +stayed 10, moved 0, split 0, merged 0, new 0, gone 0' out.txt ||
  fail "diff of a tree with itself printed: $(cat out.txt)"
expect_error 1 "missing.nwk: no such file, and not a model reference" diff missing.nwk diff_a.npy
expect_error 2 "--out writes a tanglegram: give a .svg file" diff diff_a.npy diff_b.npy --out d.png
expect_error 2 "" diff diff_a.npy
[[ ! -e d.png ]] || fail "diff wrote d.png after refusing it"
pass "diff: RF, cophenetic correlation (scipy), ARI per k, events and a tanglegram"

# --- ghhc with its dimension and schedule flags ------------------------------------
run ghhc logits.npy --name hyper --labels labels.npy --internal-nodes 24 --triples 3000 \
  --projection-dim 6 --projection random --no-margin --link softplus --out g.json
[[ $RC -eq 0 ]] || fail "ghhc exited $RC: $(cat err.txt)"
[[ "$(head -1 out.txt)" == "model hyper version 1" ]] || fail "ghhc printed '$(head -1 out.txt)'"
tail -1 out.txt >ghhc_metrics.json
run models get hyper --json
[[ $RC -eq 0 ]] || fail "models get hyper exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "ghhc flags did not reach the model: $(cat out.txt)"
import json
m = json.load(open("out.txt"))
md = m["metadata"]
assert m["method"] == "ghhc" and int(m["input_dim"]) == 12, m
assert (md["ball_dim"], md["projection"], md["margin_every"], md["link"], md["tree"]) == \
    ("6", "random", "0", "softplus", "ward"), md
assert 0.0 < json.load(open("ghhc_metrics.json"))["dendrogram_purity"] <= 1.0
EOF
run assign --model hyper logits.npy --out ghhc_leaf.npy
[[ $RC -eq 0 ]] || fail "assign on the projected gHHC model exited $RC: $(cat err.txt)"
"$PY" -c 'import json, numpy as np; a = np.load("ghhc_leaf.npy"); t = json.load(open("g.json")); assert (a == np.array(t["point_leaf"])).all()' ||
  fail "assign does not place the training rows in their training leaves"
expect_error 1 "projection_dim must be below" ghhc logits.npy --projection-dim 12 --out x.json
expect_error 2 "--link" ghhc logits.npy --link relu --out x.json
expect_error 2 "--tree must be ward or nodes" ghhc logits.npy --tree single --out x.json
expect_error 2 "--merge must be density, persistence or graph" tneb logits.npy --merge single --out x.json
expect_error 2 "--dof auto and --learn-dof" tneb logits.npy --dof auto --learn-dof --out x.json
pass "ghhc: projection, schedule and link flags reach the model; assign projects new rows"

# --- ghhc with learned points, seed 0, no noise, no validation ----------------------
run ghhc logits.npy --name hyper_learned --internal-nodes 16 --triples 2000 --seed 0 \
  --learn-points --point-learning-rate 0.002 --no-gumbel --validation-triples 0 --tree nodes \
  --out gl.json
[[ $RC -eq 0 ]] || fail "ghhc --learn-points exited $RC: $(cat err.txt)"
run models get hyper_learned --json
"$PY" - <<'EOF' || fail "learned-point flags did not reach the model: $(cat out.txt)"
import json
md = json.load(open("out.txt"))["metadata"]
assert (md["seed"], md["learn_points"], md["point_learning_rate"], md["gumbel_temperature"],
        md["validation_triples"], md["tree"]) == ("0", "true", "0.002", "0", "0", "nodes"), md
EOF
run assign --model hyper_learned logits.npy --out ghhc_learned_leaf.npy
[[ $RC -eq 0 ]] || fail "assign on the learned-point gHHC model exited $RC: $(cat err.txt)"
"$PY" -c 'import json, numpy as np; a = np.load("ghhc_learned_leaf.npy"); t = json.load(open("gl.json")); assert (a == np.array(t["point_leaf"])).all()' ||
  fail "assign does not place the training rows of a learned-point model in their leaves"
pass "ghhc: --learn-points, --seed 0, --no-gumbel, --validation-triples and --tree reach the model"

# Every cut of the (n-ary) gHHC tree is reachable through its binary refinement, and the SciPy
# linkage, Assign --level and `dendro eval --level` agree on each.
run tree hyper --out g.npy --out g_refined.json
[[ $RC -eq 0 ]] || fail "tree hyper: $(cat err.txt)"
LEAVES=$("$PY" -c 'import json; print(json.load(open("g_refined.json"))["num_leaves"])')
(( LEAVES >= 4 )) || fail "the gHHC tree has only $LEAVES leaves; the cut checks need more"
for k in 1 2 3 $((LEAVES / 2)) $((LEAVES - 2)) $((LEAVES - 1)) "$LEAVES"; do
  run assign --model hyper logits.npy --level "$k" --out "cut_$k.npy"
  [[ $RC -eq 0 ]] || fail "assign --level $k on gHHC: $(cat err.txt)"
  run eval g_refined.json --labels labels.npy --level "$k"
  [[ $RC -eq 0 ]] || fail "eval --level $k on gHHC: $(cat err.txt)"
  cp out.txt "eval_$k.json"
done
"$PY" - "$LEAVES" <<'EOF' || fail "SciPy, Assign --level and eval disagree on the gHHC cuts"
import json, sys
import numpy as np
from scipy.cluster.hierarchy import fcluster
from sklearn.metrics import adjusted_rand_score
leaves = int(sys.argv[1])
Z = np.load("g.npy")
t = json.load(open("g_refined.json"))
point_leaf = np.array(t["point_leaf"])
y = np.load("labels.npy")
for k in sorted({1, 2, 3, leaves // 2, leaves - 2, leaves - 1, leaves}):
    served = np.load(f"cut_{k}.npy")
    assert len(set(served)) == k, (k, len(set(served)))
    # SciPy's maxclust search never tries a threshold below its second
    # smallest merge, so it stops at L - 2 clusters on any linkage (its own
    # linkage() output included); compare up to there.
    if k <= leaves - 2:
        by_leaf = fcluster(Z, k, criterion="maxclust")
        assert len(set(by_leaf)) == k, (k, len(set(by_leaf)))
        assert adjusted_rand_score(by_leaf[point_leaf], served) == 1.0, k
    ari = json.load(open(f"eval_{k}.json"))["ari"]
    assert abs(ari - adjusted_rand_score(y, served)) < 1e-9, (k, ari)
EOF
run tree hyper --out g_coarse.json --unrefined
"$PY" -c '
import json
c, r = json.load(open("g_coarse.json")), json.load(open("g_refined.json"))
assert c["num_leaves"] == r["num_leaves"] and len(c["nodes"]) < len(r["nodes"]), (len(c["nodes"]), len(r["nodes"]))
' || fail "tree --unrefined did not give the extracted n-ary tree"
pass "gHHC: every cut reachable; SciPy maxclust, assign --level and eval agree"

# --- registry ------------------------------------------------------------------
run models list
[[ $RC -eq 0 ]] || fail "models list exited $RC: $(cat err.txt)"
grep -Eq '^logits +1 +l2h +12 +12 ' out.txt || fail "models list lacks logits v1: $(cat out.txt)"
run l2h logits.npy --out t2.nwk
[[ $RC -eq 0 && "$(cat out.txt)" == "model logits version 2" ]] ||
  fail "second l2h: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
cmp -s t.nwk t2.nwk || fail "the same logits gave a different tree"
run models list --name logits --json
[[ $RC -eq 0 ]] || fail "models list --json exited $RC"
"$PY" -c 'import json; m = json.load(open("out.txt"))["models"]; assert sorted(int(x["version"]) for x in m) == [1, 2], m' ||
  fail "models list --json: $(cat out.txt)"
run tree logits:1 --out v1.json
[[ $RC -eq 0 && "$(cat out.txt)" == "model logits version 1" ]] || fail "tree logits:1: $(cat err.txt)"
pass "second run registered version 2; tree NAME:VERSION works"

run l2h logits.npy --no-wait
[[ $RC -eq 0 && "$(cat out.txt)" == job-* ]] || fail "l2h --no-wait: exit $RC, '$(cat out.txt)'"
JOB=$(cat out.txt)
run jobs watch "$JOB"
[[ $RC -eq 0 ]] || fail "jobs watch exited $RC: $(cat err.txt)"
grep -q "succeeded" out.txt || fail "jobs watch output: $(cat out.txt)"
run jobs get "$JOB" --json
"$PY" -c 'import json; j = json.load(open("out.txt")); assert j["state"] == "JOB_STATE_SUCCEEDED" and j["model_version"] == "3", j' ||
  fail "jobs get --json: $(cat out.txt)"
pass "l2h --no-wait + jobs watch/get"

run l2h logits.npy --labels labels.npy --name jsonfit --out j.nwk --json
[[ $RC -eq 0 ]] || fail "l2h --json exited $RC: $(cat err.txt)"
[[ $(wc -l <out.txt) -eq 1 ]] || fail "l2h --json printed more than one line: $(cat out.txt)"
"$PY" -c '
import json
r = json.load(open("out.txt"))
assert r["model"] == "jsonfit" and int(r["version"]) == 1 and r["job"].startswith("job-"), r
assert r["leaves"] == 12 and 0.0 <= r["metrics"]["ari"] <= 1.0, r
assert "dataset" not in r, r  # the transient upload is gone
' || fail "l2h --json: $(cat out.txt)"
run l2h logits.npy --name jsonfit --no-wait --keep-dataset --json
"$PY" -c '
import json
r = json.load(open("out.txt"))
assert r["job"].startswith("job-") and r["dataset"].startswith("ds-"), r
' || fail "l2h --no-wait --json: $(cat out.txt)"
KEPT_DS=$("$PY" -c 'import json; print(json.load(open("out.txt"))["dataset"])')
run jobs watch "$("$PY" -c 'import json; print(json.load(open("out.txt"))["job"])')"
run datasets delete "$KEPT_DS"
[[ $RC -eq 0 ]] || fail "datasets delete $KEPT_DS: $(cat err.txt)"
pass "fit verbs' --json: one object on stdout"

# jobs list: the latest first by default; --limit, --state, --oldest-first.
run jobs list --json
[[ $RC -eq 0 ]] || fail "jobs list --json exited $RC: $(cat err.txt)"
"$PY" -c '
import datetime, json
jobs = json.load(open("out.txt"))["jobs"]
times = [datetime.datetime.fromisoformat(j["create_time"].replace("Z", "+00:00")) for j in jobs]
assert len(jobs) >= 5, jobs
assert times == sorted(times, reverse=True), times
' || fail "jobs list is not newest first: $(cat out.txt)"
LATEST=$("$PY" -c 'import json; print(json.load(open("out.txt"))["jobs"][0]["id"])')
FIRST=$("$PY" -c 'import json; print(json.load(open("out.txt"))["jobs"][-1]["id"])')
ALL_JOBS=$("$PY" -c 'import json; print(len(json.load(open("out.txt"))["jobs"]))')
run jobs list --limit 2 --json
"$PY" -c '
import json, sys
r = json.load(open("out.txt"))
assert [j["id"] for j in r["jobs"]][:1] == [sys.argv[1]] and len(r["jobs"]) == 2, r
assert r.get("next_page_token"), r
' "$LATEST" || fail "jobs list --limit 2: $(cat out.txt)"
run jobs list --oldest-first --limit 1
[[ $RC -eq 0 ]] && grep -q "^$FIRST " out.txt || fail "jobs list --oldest-first --limit 1: $(cat out.txt)"
grep -q "more results" err.txt || fail "jobs list --limit 1 gave no hint of more: $(cat err.txt)"
run jobs list --state succeeded,failed --json
"$PY" -c '
import json, sys
jobs = json.load(open("out.txt")).get("jobs", [])
assert jobs and all(j["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") for j in jobs), jobs
assert len(jobs) <= int(sys.argv[1])
' "$ALL_JOBS" || fail "jobs list --state: $(cat out.txt)"
expect_error 1 "had already succeeded; nothing to cancel" jobs cancel "$JOB"
expect_error 2 "'assign' writes one \.npy array" assign --model logits logits.npy --out -
expect_error 1 "clustering, not a classifier: 'dendro assign'" predict --model logits logits.npy --out p.npy
expect_error 1 "--state: 'done' is not a job state" jobs list --state done
expect_error 1 "--limit does not go with --all" jobs list --limit 3 --all
pass "jobs list: newest first, --limit, --state, --oldest-first"

# --- inputs as people have them ---------------------------------------------------
# The same logits (rounded to float16, so that every spelling holds exactly
# the same numbers) as float16, int-free Fortran-order float64, .npz (plain
# and compressed, picked by --key) and CSV with a header: every one gives
# the tree the float32 C-order file gives. Labels as strings (class names)
# score like their integer codes.
"$PY" - <<'EOF'
import numpy as np
x = np.load("logits.npy").astype(np.float16)
y = np.load("labels.npy")
np.save("x16.npy", x)
np.save("x32.npy", x.astype(np.float32))
np.save("x64f.npy", np.asfortranarray(x.astype(np.float64)))
np.savez("xz.npz", x=x.astype(np.float32))
np.savez_compressed("two.npz", first=x, second=x.astype(np.float64))
np.savetxt("x.csv", x.astype(np.float32), delimiter=",", fmt="%.9g",
           header=",".join(f"class{k}" for k in range(x.shape[1])), comments="")
names = np.array(["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay",
                  "kiwi", "lynx"])
np.save("label_names.npy", names[y])
open("label_names.txt", "w").write("\n".join(names[y]) + "\n")
np.save("label_floats.npy", y.astype(np.float64))
np.save("complex.npy", np.zeros((4, 4), np.complex64))
c = np.random.default_rng(3).normal(size=(300, 4)).astype(np.float32); c[:, 2] = 1.5
np.save("const_col.npy", c)
open("ragged.csv", "w").write("1,2,3,4,5,6,7,8,9,10,11,12\n" * 2 + "1," * 10 + "1\n")
open("logits.parquet", "wb").write(b"PAR1")
EOF
run l2h x32.npy --name inputs --out ref.npy --labels labels.npy
[[ $RC -eq 0 ]] || fail "l2h x32.npy exited $RC: $(cat err.txt)"
tail -1 out.txt >ref_metrics.json
for input in "x16.npy" "x64f.npy" "xz.npz" "two.npz --key second" "x.csv"; do
  # shellcheck disable=SC2086
  run l2h $input --name inputs --out same.npy
  [[ $RC -eq 0 ]] || fail "l2h $input exited $RC: $(cat err.txt)"
  cmp -s same.npy ref.npy || fail "l2h $input gave another tree than the float32 file"
done
for y in label_names.npy label_names.txt label_floats.npy; do
  run eval inputs --labels "$y"
  [[ $RC -eq 0 ]] || fail "eval --labels $y exited $RC: $(cat err.txt)"
  "$PY" - "$y" <<'EOF' || fail "eval --labels $y scored differently from the integer labels"
import json, sys
got, want = json.load(open("out.txt")), json.load(open("ref_metrics.json"))
for k in ["nmi", "ari", "dendrogram_purity"]:
    assert abs(got[k] - want[k]) < 1e-12, (sys.argv[1], k, got[k], want[k])
EOF
done
run upload x64f.npy --name fortran --labels label_names.txt
[[ $RC -eq 0 ]] || fail "upload x64f.npy exited $RC: $(cat err.txt)"
grep -q "float64 .npy (Fortran order)" err.txt || fail "upload did not say what it read: $(cat err.txt)"
grep -q "12 label strings were sent as 0..11 in sorted order (ant = 0)" err.txt ||
  fail "upload did not say how string labels were sent: $(cat err.txt)"
run datasets delete "$(head -1 out.txt)"
[[ $RC -eq 0 ]] || fail "datasets delete exited $RC: $(cat err.txt)"
pass "float16, Fortran float64, .npz (--key), .csv inputs and string or float labels"

# --- errors: one line "dendro: ...", non-zero exit -------------------------------
expect_error 1 "missing\.npy" l2h missing.npy --out x.npy
expect_error any "row 17.*column 5" l2h nan.npy --out x.npy
expect_error any "column" l2h k1.npy --out x.npy
expect_error 1 "not found" assign --model no_such_model logits.npy --out z.npy
expect_error 1 "complex64" upload complex.npy
# Refused at submit from the upload's column statistics, not after a queue.
expect_error 1 "column 2 of dataset ds-[0-9a-z]+ is constant \(every value is 1\.5\)" \
  tneb const_col.npy --out x.npy
expect_error 1 "first, second.*--key NAME" l2h two.npz --out x.npy
expect_error 1 "no array 'third'" l2h two.npz --key third --out x.npy
expect_error 1 "line 3 has 11 fields" l2h ragged.csv --out x.npy
expect_error 1 "\.parquet'; Dendro reads \.npy, \.npz, \.csv" l2h logits.parquet --out x.npy
expect_error 1 "truncated" upload truncated.npy
expect_error 2 "unknown verb" frobnicate
expect_error 2 "--bogus" upload logits.npy --bogus
expect_error 2 "extension" l2h logits.npy --out x.txt
expect_error 1 "127\.0\.0\.1:1" --server 127.0.0.1:1 models list
[[ ! -e x.npy && ! -e z.npy ]] || fail "a failed command left an output file"
pass "errors are one 'dendro:' line with a non-zero exit"

run models list
[[ $RC -eq 0 ]] || fail "server stopped answering after the error cases: $(cat err.txt)"
# One-shot fits upload transient datasets: the server deletes each when its
# job ends, and rejected commands (including a ghhc refused at submit) leave
# none, so nothing is left of any of them.
run datasets list --json
"$PY" -c 'import json; d = json.load(open("out.txt"))["datasets"]; assert len(d) == 0, d' ||
  fail "one-shot fits left datasets behind: $(cat out.txt)"
[[ ! -d server.data/transient ]] || [[ -z "$(ls -A server.data/transient)" ]] ||
  fail "transient dataset files left: $(ls server.data/transient)"
pass "server still answers; rejected uploads left nothing behind"

# --- fits on an uploaded dataset ------------------------------------------------
# dataset_ids: the sorted ids of every dataset on the server, one per line.
dataset_ids() {
  run datasets list --json
  [[ $RC -eq 0 ]] || fail "datasets list exited $RC: $(cat err.txt)"
  "$PY" -c 'import json; print("\n".join(sorted(d["id"] for d in json.load(open("out.txt")).get("datasets", []))))'
}
run upload logits.npy --labels labels.npy --name emb
[[ $RC -eq 0 && "$(cat out.txt)" == ds-* ]] || fail "upload: exit $RC, '$(cat out.txt)', $(cat err.txt)"
DS=$(cat out.txt)
BEFORE=$(dataset_ids)

# By id in the file's slot; the model is named after the dataset's display name.
run l2h "$DS" --out ds_l2h.nwk
[[ $RC -eq 0 && "$(cat out.txt)" == "model emb version 1" ]] ||
  fail "l2h DATASET_ID: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
cmp -s t.nwk ds_l2h.nwk || fail "l2h on the uploaded logits gave a different tree than on the file"
run tneb --dataset "$DS" --name ds_tneb --components 6 --restarts 2 --seed 1 --out ds_tneb.json
[[ $RC -eq 0 && "$(cat out.txt)" == "model ds_tneb version 1" ]] ||
  fail "tneb --dataset: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
[[ -s ds_tneb.json ]] || fail "tneb --dataset did not write ds_tneb.json"
run models get ds_tneb --json
"$PY" -c 'import json, sys; m = json.load(open("out.txt")); assert m["dataset_id"] == sys.argv[1] and m["method"] == "tneb", m' "$DS" ||
  fail "the tneb model does not reference $DS: $(cat out.txt)"
run datasets get "$DS"
[[ $RC -eq 0 ]] || fail "dataset $DS is gone after fitting on it: $(cat err.txt)"
[[ "$(dataset_ids)" == "$BEFORE" ]] || fail "fitting by dataset id created or removed datasets: $(dataset_ids)"
pass "l2h DATASET_ID and tneb --dataset fit the uploaded dataset, which stays and is not copied"

# t-NEB's own account of the cut --level names, without labels: --json's
# "diagnostics" (sizes of the k clusters over every row, the largest share,
# the documented degenerate rule), and a warning line on stderr when degenerate.
run datasets get "$DS" --json
ROWS=$("$PY" -c 'import json; print(json.load(open("out.txt"))["rows"])')
run tneb --dataset "$DS" --name ds_tneb_diag --components 6 --restarts 2 --seed 1 --level 2 --json
[[ $RC -eq 0 ]] || fail "tneb --level 2 --json: exit $RC, stderr '$(cat err.txt)'"
"$PY" - "$ROWS" <<'PYEOF2' || fail "tneb --level 2 --json diagnostics: $(cat out.txt) / $(cat err.txt)"
import json, sys
out = json.load(open("out.txt"))
d, rows = out["diagnostics"], int(sys.argv[1])
assert d["k"] == min(2, out["leaves"]) and len(d["cluster_sizes"]) == d["k"], d
assert sum(d["cluster_sizes"]) == rows, (d, rows)
assert abs(d["largest_share"] - max(d["cluster_sizes"]) / rows) < 1e-5, d
assert d["degenerate"] == (d["k"] >= 2 and d["largest_share"] > max(0.5, 1 - 0.1 * d["k"])), d
assert ("warning:" in open("err.txt").read()) == d["degenerate"], d
PYEOF2
run models get ds_tneb_diag --json
"$PY" -c 'import json; m = json.load(open("out.txt")); assert m["metadata"]["diag_k"] == "2", m' ||
  fail "the model's metadata does not describe the cut at 2: $(cat out.txt)"
expect_error 2 "--level only applies with --labels" ghhc --dataset "$DS" --level 2
pass "tneb --level K --json reports the diagnostics at K"

expect_error 1 "^dendro: dataset 'ds-0000deadbeef' not found$" l2h ds-0000deadbeef --out x.nwk
expect_error 1 "^dendro: dataset 'ds-0000deadbeef' not found$" tneb --dataset ds-0000deadbeef
expect_error 1 "^dendro: dataset 'ds-0000deadbeef' not found$" hppca train ds-0000deadbeef --name c
expect_error any "--labels.*$DS" l2h "$DS" --labels labels.npy
expect_error any "labels.*$DS" hppca train "$DS" labels.npy --name c
expect_error any "not both" ghhc logits.npy --dataset "$DS"
[[ "$(dataset_ids)" == "$BEFORE" ]] || fail "rejected dataset-id commands changed the datasets: $(dataset_ids)"
[[ ! -e x.nwk ]] || fail "a failed command left an output file"
pass "an unknown dataset id, or labels given with one, is one error line"

# A name holds one method unless a change is asked for.
expect_error any "--allow-method-change" ghhc "$DS" --name ds_tneb --internal-nodes 16 --triples 2000
run models list --name ds_tneb --json
"$PY" -c 'import json; m = json.load(open("out.txt"))["models"]; assert len(m) == 1, m' ||
  fail "the refused ghhc registered a version: $(cat out.txt)"
run ghhc "$DS" --name ds_tneb --internal-nodes 16 --triples 2000 --allow-method-change
[[ $RC -eq 0 && "$(cat out.txt)" == "model ds_tneb version 2" ]] ||
  fail "ghhc --allow-method-change: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
run models get ds_tneb --json
"$PY" -c 'import json; m = json.load(open("out.txt")); assert m["method"] == "ghhc" and m["version"] == "2", m' ||
  fail "ds_tneb:2 is not the ghhc fit: $(cat out.txt)"
# The same from a file: tneb, then ghhc under the file's stem.
cp logits.npy two.npy
run tneb two.npy --components 6 --restarts 2 --seed 1 --merge density --dof auto
[[ $RC -eq 0 && "$(cat out.txt)" == "model two version 1" ]] || fail "tneb two.npy: exit $RC, $(cat err.txt)"
expect_error any "--allow-method-change" ghhc two.npy --internal-nodes 16 --triples 2000
run ghhc two.npy --internal-nodes 16 --triples 2000 --allow-method-change
[[ $RC -eq 0 && "$(cat out.txt)" == "model two version 2" ]] ||
  fail "ghhc two.npy --allow-method-change: exit $RC, $(cat err.txt)"
pass "a method change under one name is refused, naming --allow-method-change, and allowed with it"

# A "ds-…" argument that is an existing file is a file.
cp logits.npy ds-local.npy
run l2h ds-local.npy --out local.nwk
[[ $RC -eq 0 && "$(cat out.txt)" == "model ds-local version 1" ]] ||
  fail "l2h ds-local.npy: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
pass "an existing file named ds-… is uploaded as a file"

# --- leaf names ------------------------------------------------------------------
"$PY" -c 'print("\n".join(["cat", "dog", "great white_shark", "O'"'"'Brien"] + ["class%d" % i for i in range(4, 12)]))' >names.txt
run l2h logits.npy --name named --leaf-names names.txt --out named.nwk --out named.json
[[ $RC -eq 0 ]] || fail "l2h --leaf-names: $(cat err.txt)"
grep -q "cat:" named.nwk && grep -q "'great white_shark':" named.nwk && grep -q "'O''Brien':" named.nwk ||
  fail "the Newick tree does not carry the names: $(cat named.nwk)"
"$PY" -c '
import json
t = json.load(open("named.json"))
assert t["leaf_names"][:3] == ["cat", "dog", "great white_shark"] and len(t["leaf_names"]) == 12, t["leaf_names"]
' || fail "the JSON tree does not carry the names"
run tree named --out named_again.nwk
cmp -s named.nwk named_again.nwk || fail "the names were not kept with the model"
head -5 names.txt >short.txt
expect_error 1 "leaf_names: 5 leaf names for a tree with 12 leaves" l2h logits.npy --leaf-names short.txt --out x.nwk
printf 'a\n\nb\n' >blank.txt
expect_error 1 "line 2 is empty" l2h logits.npy --leaf-names blank.txt --out x.nwk
pass "l2h --leaf-names: names kept with the model, quoted in Newick, listed in JSON"

# --- pictures ------------------------------------------------------------------------
run tree named --out named.svg --color-level 3
[[ $RC -eq 0 ]] || fail "tree --out named.svg: $(cat err.txt)"
run tree hyper --out hyper.svg --layout radial
[[ $RC -eq 0 ]] || fail "tree --out hyper.svg --layout radial: $(cat err.txt)"
"$PY" - <<'EOF' || fail "the SVG pictures are not what they should be"
import json
import xml.etree.ElementTree as ET
ns = {"s": "http://www.w3.org/2000/svg"}
for path, tree in (("named.svg", "named.json"), ("hyper.svg", "g_refined.json")):
    root = ET.parse(path).getroot()  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
    t = json.load(open(tree))
    edges = root.findall(".//s:path[@class='edge']", ns)
    leaves = [e for e in root.iter("{http://www.w3.org/2000/svg}text")
              if e.get("class", "").startswith("leaf")]
    assert len(edges) == len(t["nodes"]) - 1, (path, len(edges))
    assert len(leaves) == t["num_leaves"], (path, len(leaves))
named = ET.parse("named.svg").getroot()
texts = [e.text for e in named.iter("{http://www.w3.org/2000/svg}text")]
assert "great white_shark" in texts and "O'Brien" in texts, texts
clusters = {e.get("class") for e in named.iter("{http://www.w3.org/2000/svg}text")
            if e.get("class", "").startswith("leaf")}
assert clusters == {"leaf cluster-0", "leaf cluster-1", "leaf cluster-2"}, clusters
EOF
run tree named --out again.svg --color-level 3
cmp -s named.svg again.svg || fail "the same tree drew a different SVG"
expect_error 2 "--layout must be" tree named --out x.svg --layout round
expect_error 1 "colour level must be in" tree named --out x.svg --color-level 99
pass "tree --out .svg: valid SVG, one edge per node, names, clusters coloured, deterministic"

# --- bash completion -----------------------------------------------------------------
"$DENDRO" completion bash >completion.sh
complete_words() {  # prints the completions of the command line "$@" (last word = current)
  bash -c 'source completion.sh; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dendro; echo "${COMPREPLY[*]}"' _ "$@"
}
[[ " $(complete_words dendro mo) " == *" models "* ]] || fail "completion: 'dendro mo' -> $(complete_words dendro mo)"
[[ " $(complete_words dendro models la) " == *" label "* ]] || fail "completion: models subcommands"
[[ " $(complete_words dendro --server h:1 l2h --le) " == *" --leaf-names "* ]] ||
  fail "completion: l2h flags after a global flag's value"
[[ " $(complete_words dendro tree x --co) " == *" --color-level "* ]] || fail "completion: tree flags"
expect_error 2 "takes one argument: bash" completion zsh
pass "dendro completion bash completes verbs, subcommands and each verb's flags"

# --- version labels and retention -------------------------------------------------
run models label jsonfit 1 stable
[[ $RC -eq 0 && "$(cat out.txt)" == "model jsonfit@stable is version 1" ]] ||
  fail "models label: exit $RC, '$(cat out.txt)' $(cat err.txt)"
run tree jsonfit@stable --out stable.nwk
[[ $RC -eq 0 && "$(cat out.txt)" == "model jsonfit version 1" ]] || fail "tree NAME@LABEL: $(cat err.txt)"
cmp -s j.nwk stable.nwk || fail "jsonfit@stable is not the tree of version 1"
run models get jsonfit@stable --json
"$PY" -c 'import json; m = json.load(open("out.txt")); assert m["version"] == "1" and m["labels"] == ["stable"], m' ||
  fail "models get NAME@LABEL --json: $(cat out.txt)"
expect_error 1 "labelled 'stable'.*move or delete the label" models delete jsonfit:1
expect_error 2 "not a label" models delete jsonfit@stable
expect_error 1 "no label 'nightly'" models get jsonfit@nightly
expect_error 1 "must start with a letter" models label jsonfit 1 9lives
expect_error 2 "VERSION must be" models label jsonfit one stable
for _ in 1 2 3; do  # versions 3, 4, 5
  run l2h logits.npy --name jsonfit --out r.nwk
  [[ $RC -eq 0 ]] || fail "l2h --name jsonfit: $(cat err.txt)"
done
run models retain jsonfit 1
[[ $RC -eq 0 ]] || fail "models retain: $(cat err.txt)"
run models list --name jsonfit --json
"$PY" -c 'import json; v = sorted(int(m["version"]) for m in json.load(open("out.txt"))["models"]); assert v == [1, 5], v' ||
  fail "retention kept the wrong versions: $(cat out.txt)"
run models unlabel jsonfit stable
[[ $RC -eq 0 && "$(cat out.txt)" == "removed label stable from model jsonfit version 1" ]] ||
  fail "models unlabel: $(cat out.txt) $(cat err.txt)"
run models delete jsonfit:1
[[ $RC -eq 0 ]] || fail "an unlabelled version could not be deleted: $(cat err.txt)"
pass "labels: NAME@LABEL everywhere, a labelled version is kept; retention keeps the newest"

# --- appends: dataset generations ---------------------------------------------------
read -r ROWS COLS < <("$PY" -c 'import numpy as np; print(*np.load("logits.npy").shape)')
run upload logits.npy --labels labels.npy --append "$DS"
[[ $RC -eq 0 && "$(cat out.txt)" == ds-* && "$(cat out.txt)" != "$DS" ]] ||
  fail "upload --append: exit $RC, '$(cat out.txt)', $(cat err.txt)"
DS2=$(cat out.txt)
grep -q "as generation 2 ($DS:2, id $DS2)" err.txt || fail "upload --append did not say the generation: $(cat err.txt)"
run datasets get "$DS" --json
"$PY" -c 'import json, sys; d = json.load(open("out.txt")); assert d["id"] == sys.argv[1] and d["lineage"] == sys.argv[2] and d["generation"] == 2 and int(d["rows"]) == 2 * int(sys.argv[3]), d' "$DS2" "$DS" "$ROWS" ||
  fail "datasets get LINEAGE is not its newest generation: $(cat out.txt)"
run datasets get "$DS:1" --json
"$PY" -c 'import json, sys; d = json.load(open("out.txt")); assert d["id"] == sys.argv[1] and int(d["rows"]) == int(sys.argv[2]), d' "$DS" "$ROWS" ||
  fail "datasets get LINEAGE:1 is not the first upload: $(cat out.txt)"
run datasets list
grep -q "GENERATION" out.txt && grep "^$DS2 " out.txt | grep -q " $DS:2 " ||
  fail "datasets list does not show the generation: $(cat out.txt)"
expect_error 1 "whose newest is generation 2" upload logits.npy --labels labels.npy --append "$DS:1"
expect_error 1 "has $COLS columns, the appended rows 4" upload diff_a.npy --append "$DS"
expect_error 2 "drop --transient" upload logits.npy --append "$DS" --transient
run l2h "$DS" --name grown --out grown.json
[[ $RC -eq 0 ]] || fail "l2h LINEAGE exited $RC: $(cat err.txt)"
run models get grown --json
"$PY" -c 'import json, sys; m = json.load(open("out.txt")); assert m["dataset_id"] == sys.argv[1], m' "$DS2" ||
  fail "a fit on the lineage did not use its newest generation: $(cat out.txt)"
# Stable ids: a second version on generation 1 keeps the classes' ids.
run l2h "$DS:1" --name grown --out grown2.json
[[ $RC -eq 0 ]] || fail "l2h LINEAGE:1 exited $RC: $(cat err.txt)"
run models get grown:2 --json
"$PY" -c 'import json; m = json.load(open("out.txt"))["metadata"]; assert m["stable_ids_basis"] == "leaves" and m["stable_ids_previous_version"] == "1" and int(m["stable_ids_kept"]) > 0, m' ||
  fail "version 2 has no stable id match: $(cat out.txt)"
for v in 1 2; do
  run assign --model "grown:$v" logits.npy --stable-ids --out "stable_leaf_$v.npy"
  [[ $RC -eq 0 ]] || fail "assign --stable-ids exited $RC: $(cat err.txt)"
  run assign --model "grown:$v" logits.npy --level 3 --stable-ids --out "stable_3_$v.npy"
  [[ $RC -eq 0 ]] || fail "assign --level 3 --stable-ids exited $RC: $(cat err.txt)"
done
run assign --model grown:2 logits.npy --level 3 --out plain_3_2.npy
run assign --model grown:2 logits.npy --out plain_leaf_2.npy
run tree grown:2 --out grown2_tree.json
"$PY" - <<'EOF' || fail "assign --stable-ids answers are wrong"
import json
import numpy as np
a, b = np.load("stable_leaf_1.npy"), np.load("stable_leaf_2.npy")
assert a.dtype == np.int64 and (a == b).all(), (a[:10], b[:10])
s, p = np.load("stable_3_2.npy"), np.load("plain_3_2.npy")
# The same three clusters, named by ids instead of 0..2.
assert len(set(s)) == len(set(p)) == 3 and len(set(zip(s, p))) == 3
# The tree file names every node by the same ids.
ids = np.array(json.load(open("grown2_tree.json"))["stable_ids"])
assert (ids[np.load("plain_leaf_2.npy")] == b).all() and set(s) <= set(ids.tolist())
EOF
pass "assign --stable-ids: classes keep their ids across versions; the cut's clusters are named by id"
run datasets delete "$DS:2"
[[ $RC -eq 0 ]] || fail "datasets delete LINEAGE:2 exited $RC: $(cat err.txt)"
run datasets get "$DS" --json
"$PY" -c 'import json, sys; assert json.load(open("out.txt"))["id"] == sys.argv[1]' "$DS" ||
  fail "after deleting generation 2 the lineage does not name generation 1: $(cat out.txt)"
pass "upload --append: generations named LINEAGE and LINEAGE:G, fits on the newest, one deleted alone"

# --- TLS -----------------------------------------------------------------------
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null ||
    fail "openssl could not make a test certificate"
  start_server tls --tls_cert cert.pem --tls_key key.pem
  EXTRA_PIDS=$STARTED_PID
  run --server "localhost:$STARTED_PORT" --tls-ca cert.pem l2h logits.npy --out tls.nwk
  [[ $RC -eq 0 ]] || fail "l2h over TLS exited $RC: $(cat err.txt)"
  cmp -s t.nwk tls.nwk || fail "l2h over TLS gave a different tree"
  expect_error 1 "localhost:$STARTED_PORT" --server "localhost:$STARTED_PORT" --tls models list
  expect_error 1 "localhost:$STARTED_PORT" --server "localhost:$STARTED_PORT" models list
  pass "TLS with --tls-ca; an untrusted or plaintext connection is one error line"
fi
echo "all CLI checks passed"
