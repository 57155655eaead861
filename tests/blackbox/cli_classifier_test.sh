#!/usr/bin/env bash
# End-to-end test of the classifier verbs (`dendro hppca train|add`,
# `dendro predict`) against a real dendrod.
#
#   cli_classifier_test.sh PATH/TO/dendrod PATH/TO/dendro
#
# The data is a synthetic two-level class structure made with numpy. The
# independent reference is a flat PPCA classifier written here in numpy
# (per-class np.cov + eigh, the paper's Theorem 1 score), which Dendro's flat
# predictions must agree with.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh" "$@"

start_main_server

# --- inputs --------------------------------------------------------------------
# 4 groups of 5 classes in 16 dimensions; labels 1000 + 7k (not 0..K-1, so
# the label mapping is exercised). Group 3 is also written separately, to be
# added to a model trained on groups 0-2.
"$PY" - <<'EOF'
import numpy as np
rng = np.random.default_rng(11)
G, C, d = 4, 5, 16
K = G * C
centres = rng.normal(0.0, 3.0, (G, d))
means = np.repeat(centres, C, axis=0) + rng.normal(0.0, 0.6, (K, d))
bases = rng.normal(0.0, 0.7, (K, d, 3))
labels = 1000 + 7 * np.arange(K)

def sample(per_class, seed):
    r = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(K):
        z = r.normal(size=(per_class, 3))
        xs.append(means[k] + z @ bases[k].T + r.normal(0.0, 1.0, (per_class, d)))
        ys.append(np.full(per_class, labels[k]))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)

x, y = sample(80, 1)
xt, yt = sample(40, 2)
np.save("train_x.npy", x); np.save("train_y.npy", y)
np.save("test_x.npy", xt); np.save("test_y.npy", yt)
old = y < labels[3 * C]
np.save("old_x.npy", x[old]); np.save("old_y.npy", y[old])
np.save("new_x.npy", x[~old]); np.save("new_y.npy", y[~old])
np.save("groups.npy", np.arange(K) // C)
bad = xt.copy(); bad[3, 2] = np.nan
np.save("nan_x.npy", bad)
np.save("wrong_d.npy", xt[:, :10].copy())
# One class with a single row.
np.save("single_x.npy", np.concatenate([x[:80], x[80:81]]))
np.save("single_y.npy", np.concatenate([y[:80], y[80:81]]))
EOF

# --- train ---------------------------------------------------------------------
run hppca train train_x.npy train_y.npy --name clf --superclasses 4 --q 5 --r 5 --seed 3
[[ $RC -eq 0 ]] || fail "hppca train exited $RC: $(cat err.txt)"
[[ "$(tail -1 out.txt)" == "model clf version 1" ]] ||
  fail "hppca train printed '$(tail -1 out.txt)', expected 'model clf version 1'"
run models get clf --json
[[ $RC -eq 0 ]] || fail "models get clf exited $RC: $(cat err.txt)"
"$PY" -c 'import json; m = json.load(open("out.txt")); assert m["method"] == "hppca" and m["num_leaves"] == 20 and m["input_dim"] == "16", m' ||
  fail "models get clf: $(cat out.txt)"
pass "hppca train registered clf:1 (20 classes, d = 16)"

# --- flat predictions against the numpy reference ---------------------------------
run predict --model clf test_x.npy --flat --out flat.npy
[[ $RC -eq 0 ]] || fail "predict --flat exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "flat predictions disagree with the numpy PPCA reference"
import numpy as np
x = np.load("train_x.npy").astype(np.float64); y = np.load("train_y.npy")
xt = np.load("test_x.npy").astype(np.float64); yt = np.load("test_y.npy")
q, lam = 5, 0.01
classes = np.unique(y)
scores = np.empty((len(xt), len(classes)))
for j, c in enumerate(classes):
    xc = x[y == c]
    mu = xc.mean(axis=0)
    w, v = np.linalg.eigh(np.cov(xc, rowvar=False))
    w, v = w[::-1][:q], v[:, ::-1][:, :q]
    r = xt - mu
    u = (r @ v) * np.sqrt(w / (w + lam))
    scores[:, j] = ((r * r).sum(axis=1) - (u * u).sum(axis=1)) / lam
ref = classes[scores.argmin(axis=1)]
flat = np.load("flat.npy")
assert flat.dtype == np.int64 and flat.shape == (len(xt),), (flat.dtype, flat.shape)
agree = (flat == ref).mean()
assert agree >= 0.99, agree
acc = (flat == yt).mean()
assert acc > 0.6, acc
print(f"flat agreement with numpy {agree:.4f}, accuracy {acc:.4f}")
EOF
pass "flat predictions agree with a numpy PPCA classifier"

# --- hierarchical predictions, report --------------------------------------------
run predict --model clf test_x.npy --top-t 2 --top-k 3 --out top3.npy --labels test_y.npy
[[ $RC -eq 0 ]] || fail "predict --top-t 2 --top-k 3 exited $RC: $(cat err.txt)"
tail -1 out.txt >report.json
"$PY" - <<'EOF' || fail "hierarchical predictions or the printed report are wrong"
import json
import numpy as np
p = np.load("top3.npy"); yt = np.load("test_y.npy"); flat = np.load("flat.npy")
r = json.load(open("report.json"))
assert p.dtype == np.int64 and p.shape == (len(yt), 3), (p.dtype, p.shape)
assert set(np.unique(p)) <= set(np.unique(np.load("train_y.npy")))
assert all(len(set(row)) == 3 for row in p), "a row repeats a class"
acc = (p[:, 0] == yt).mean()
assert abs(r["accuracy"] - acc) < 1e-12, (r, acc)
assert abs(r["flat_accuracy"] - (flat == yt).mean()) < 1e-12, r
assert r["top_t"] == 2 and r["rows"] == len(yt), r
# Two of four super-classes opened: about half the classes are scored.
assert 2 <= r["classes_evaluated_per_row"] < 20, r
assert r["class_evaluation_ratio"] > 1.2, r
# A correct top-1 class lies in an opened super-class, so super-class
# accuracy bounds accuracy from above; the first super-class is one of T.
assert r["superclass_accuracy"] >= r["accuracy"], r
assert r["superclass_accuracy"] >= r["superclass_top1_accuracy"] > 0.5, r
assert r["accuracy"] >= r["flat_accuracy"] - 0.05, r
EOF
pass "predict --top-t 2 --top-k 3: ranked labels, accuracy and super-class accuracy reported"

run predict --model clf test_x.npy --top-t 4 --out all_t.npy
[[ $RC -eq 0 ]] || fail "predict --top-t 4 exited $RC: $(cat err.txt)"
cmp -s <("$PY" -c 'import numpy as np; print(np.load("all_t.npy").tolist())') \
  <("$PY" -c 'import numpy as np; print(np.load("flat.npy").tolist())') ||
  fail "opening every super-class (T = S) does not give the flat predictions"
pass "T = S gives exactly the flat predictions"

# --- the default scoring: 20 classes of 16 features do not pay for a hierarchy -----
run models get clf --json
"$PY" - <<'EOF' || fail "clf's default scoring: $(cat out.txt)"
import json
md = json.load(open("out.txt"))["metadata"]
assert md["scoring"] == "auto" and md["default_scoring"] == "flat", md
assert float(md["predict_cost_hierarchical"]) >= 0.75 * float(md["predict_cost_flat"]), md
EOF
run predict --model clf test_x.npy --out default.npy --labels test_y.npy
[[ $RC -eq 0 ]] || fail "predict without --top-t exited $RC: $(cat err.txt)"
cmp -s <("$PY" -c 'import numpy as np; print(np.load("default.npy").tolist())') \
  <("$PY" -c 'import numpy as np; print(np.load("flat.npy").tolist())') ||
  fail "the default (flat) scoring does not give the flat predictions"
"$PY" -c 'import json; r = json.loads(open("out.txt").read().splitlines()[-1]); assert r["top_t"] == 0, r' ||
  fail "the default scoring opened super-classes: $(cat out.txt)"
expect_error 2 "--scoring must be auto, hierarchical or flat" hppca train train_x.npy train_y.npy \
  --name bad --scoring fastest
pass "a model whose hierarchy would not pay scores flat by default, as flat; --scoring is checked"

# --- training on uploaded datasets -----------------------------------------------
run upload train_x.npy --labels train_y.npy
[[ $RC -eq 0 && "$(cat out.txt)" == ds-* ]] || fail "upload train_x.npy: exit $RC, $(cat err.txt)"
TRAIN_DS=$(cat out.txt)
run hppca train "$TRAIN_DS" --name by_id --superclasses 4 --q 5 --r 5 --seed 3
[[ $RC -eq 0 && "$(tail -1 out.txt)" == "model by_id version 1" ]] ||
  fail "hppca train DATASET_ID: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
run predict --model by_id test_x.npy --flat --out by_id_flat.npy
[[ $RC -eq 0 ]] || fail "predict on by_id exited $RC: $(cat err.txt)"
cmp -s <("$PY" -c 'import numpy as np; print(np.load("by_id_flat.npy").tolist())') \
  <("$PY" -c 'import numpy as np; print(np.load("flat.npy").tolist())') ||
  fail "training on the uploaded dataset predicts differently from training on the files"
run upload old_x.npy --labels old_y.npy
OLD_DS=$(cat out.txt)
run upload new_x.npy --labels new_y.npy
NEW_DS=$(cat out.txt)
run hppca train "$OLD_DS" --name grow_by_id --superclasses 4 --q 5 --r 5 --seed 3
[[ $RC -eq 0 ]] || fail "hppca train $OLD_DS exited $RC: $(cat err.txt)"
run hppca add grow_by_id --dataset "$NEW_DS"
[[ $RC -eq 0 && "$(tail -1 out.txt)" == "model grow_by_id version 2" ]] ||
  fail "hppca add --dataset: exit $RC, stdout '$(cat out.txt)', stderr '$(cat err.txt)'"
run datasets get "$NEW_DS"
[[ $RC -eq 0 ]] || fail "dataset $NEW_DS is gone after hppca add used it: $(cat err.txt)"
expect_error any "labels.*$TRAIN_DS" hppca train "$TRAIN_DS" train_y.npy --name x
expect_error any "LABELS\.npy" hppca train train_x.npy --name x
pass "hppca train DATASET_ID and hppca add --dataset use the uploaded labels"

# --- training options reach the model ----------------------------------------------
run hppca train train_x.npy train_y.npy --name raw --superclasses 4 --q 5 --r 5 --raw-data \
  --log-det --lambda 0.05 --top-t 2 --scoring hierarchical
[[ $RC -eq 0 ]] || fail "hppca train --raw-data --log-det exited $RC: $(cat err.txt)"
run models get raw --json
"$PY" - <<'EOF' || fail "training flags did not reach the model: $(cat out.txt)"
import json
md = json.load(open("out.txt"))["metadata"]
assert (md["clustering"], md["score"], float(md["lambda"]), md["default_top_t"]) == \
    ("raw_data", "log_det", 0.05, "2"), md
assert (md["scoring"], md["default_scoring"]) == ("hierarchical", "hierarchical"), md
EOF
run predict --model raw test_x.npy --out raw_pred.npy --labels test_y.npy
[[ $RC -eq 0 ]] || fail "predict on the raw-data model exited $RC: $(cat err.txt)"
"$PY" -c 'import json; r = json.loads(open("out.txt").read().splitlines()[-1]); assert r["top_t"] == 2 and r["accuracy"] > 0.6, r' ||
  fail "the raw-data model's default T or accuracy: $(cat out.txt)"
expect_error 2 "--lambda" hppca train train_x.npy train_y.npy --name bad --lambda -1
pass "hppca train: --raw-data, --log-det, --lambda and --top-t reach the model"

# --- growing a model -------------------------------------------------------------
run hppca train old_x.npy old_y.npy --name grow --superclasses 4 --q 5 --r 5 --seed 3
[[ $RC -eq 0 ]] || fail "hppca train (groups 0-2) exited $RC: $(cat err.txt)"
run hppca add grow new_x.npy new_y.npy
[[ $RC -eq 0 ]] || fail "hppca add exited $RC: $(cat err.txt)"
[[ "$(tail -1 out.txt)" == "model grow version 2" ]] ||
  fail "hppca add printed '$(tail -1 out.txt)', expected 'model grow version 2'"
run predict --model grow test_x.npy --top-t 2 --out grown.npy --labels test_y.npy
[[ $RC -eq 0 ]] || fail "predict on the grown model exited $RC: $(cat err.txt)"
tail -1 out.txt >grown.json
"$PY" - <<'EOF' || fail "the grown model is not as accurate as the one trained at once"
import json
import numpy as np
g = json.load(open("grown.json")); full = json.load(open("report.json"))
yt = np.load("test_y.npy"); pred = np.load("grown.npy")
new = yt >= 1000 + 7 * 15
assert (pred[new] == yt[new]).mean() > 0.6, "new classes are not predicted"
# Flat scores do not depend on super-classes: the grown model's flat
# accuracy equals the full model's; the hierarchical one is within noise.
assert abs(g["flat_accuracy"] - full["flat_accuracy"]) < 1e-12, (g, full)
assert abs(g["accuracy"] - full["accuracy"]) <= 0.03, (g, full)
EOF
run models list --name grow --json
"$PY" -c 'import json; m = json.load(open("out.txt"))["models"]; assert sorted(int(x["version"]) for x in m) == [1, 2] and all(x["num_leaves"] in (15, 20) for x in m), m' ||
  fail "models list --name grow: $(cat out.txt)"
pass "hppca add: new version with 20 classes, accuracy within 0.03 of training at once"

# --- class names from string labels ------------------------------------------------
# The same data with labels as names ("c1000" ...), the features as a CSV
# with a header and a Fortran-order float64 .npz: the names are the tree's
# leaves, predictions come back as names, and growing the model keeps the
# old classes' names while naming the new ones.
"$PY" - <<'EOF'
import numpy as np
def names(y):
    return np.array([f"c{v}" for v in y])
x = np.load("old_x.npy")
np.savez("old_named.npz", features=np.asfortranarray(x.astype(np.float64)))
open("old_names.txt", "w").write("\n".join(names(np.load("old_y.npy"))) + "\n")
np.save("new_names.npy", names(np.load("new_y.npy")))
np.savetxt("test_x.csv", np.load("test_x.npy"), delimiter=",", fmt="%.9g",
           header=",".join(f"f{j}" for j in range(16)), comments="")
open("test_names.txt", "w").write("\n".join(names(np.load("test_y.npy"))) + "\n")
EOF
run hppca train old_named.npz old_names.txt --name named --superclasses 4 --q 5 --r 5 --seed 3
[[ $RC -eq 0 ]] || fail "hppca train with string labels exited $RC: $(cat err.txt)"
run hppca add named new_x.npy new_names.npy
[[ $RC -eq 0 && "$(tail -1 out.txt)" == "model named version 2" ]] ||
  fail "hppca add with string labels: exit $RC, $(cat out.txt) $(cat err.txt)"
run tree named --out named.json
[[ $RC -eq 0 ]] || fail "tree named exited $RC: $(cat err.txt)"
run predict --model named test_x.csv --top-t 2 --out named.txt --labels test_names.txt
[[ $RC -eq 0 ]] || fail "predict with names exited $RC: $(cat err.txt)"
tail -1 out.txt >named_report.json
run predict --model grow test_x.npy --top-t 2 --out grown_again.npy
[[ $RC -eq 0 ]] || fail "predict on grow exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "string labels did not become the classes' names"
import json
import numpy as np
tree = json.load(open("named.json"))
want = sorted(f"c{1000 + 7 * k}" for k in range(20))
assert sorted(tree["leaf_names"]) == want, tree["leaf_names"]
got = open("named.txt").read().split()
# The same model trained with integer labels predicts the same classes.
ref = [f"c{v}" for v in np.load("grown_again.npy")]
assert got == ref, sum(a != b for a, b in zip(got, ref))
r = json.load(open("named_report.json")); g = json.load(open("grown.json"))
assert abs(r["accuracy"] - g["accuracy"]) < 1e-12, (r, g)
EOF
expect_error 2 "drop --class-names" hppca train old_named.npz old_names.txt --name x \
  --class-names old_names.txt
pass "string labels name the classes: tree leaves, predictions as names, hppca add keeps them"

# --- errors ----------------------------------------------------------------------
run l2h test_x.npy --name clusters --out c.nwk
[[ $RC -eq 0 ]] || fail "l2h (for the error cases) exited $RC: $(cat err.txt)"
expect_error 1 "16 columns|expects 16|has 10" predict --model clf wrong_d.npy --out p.npy
expect_error any "row 3.*column 2" predict --model clf nan_x.npy --out p.npy
expect_error 1 "not found" predict --model no_such test_x.npy --out p.npy
expect_error 1 "classifier|clustering" predict --model clusters test_x.npy --out p.npy
expect_error 1 "not found" hppca add no_such new_x.npy new_y.npy
expect_error 1 "clustering|hppca" hppca add clusters new_x.npy new_y.npy
expect_error 1 "1 row|one row|at least 2|too few" hppca train single_x.npy single_y.npy --name single
expect_error 2 "top-k" predict --model clf test_x.npy --top-k 0 --out p.npy
expect_error 2 "--name" hppca train train_x.npy train_y.npy
[[ ! -e p.npy ]] || fail "a failed predict left an output file"
run models list --name clf --json
"$PY" -c 'import json; m = json.load(open("out.txt"))["models"]; assert [int(x["version"]) for x in m] == [1], m' ||
  fail "failed calls changed the registry: $(cat out.txt)"
run models get single
[[ $RC -ne 0 ]] || fail "the rejected training registered a model"
pass "bad input: one 'dendro:' line, non-zero exit, registry unchanged"
echo "all classifier CLI checks passed"
