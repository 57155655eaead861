#!/usr/bin/env bash
# Same-host import through the CLI (--import auto|on|off) against real
# dendrod processes: one started with --import_dirs over the inputs'
# directory, one without.
#
#   cli_import_test.sh PATH/TO/dendrod PATH/TO/dendro
#
# Checks that the server reads the file in place (its log says "imported
# (linked)"; the file gains a hard link while the dataset exists), that the
# tree is byte-identical to the one an upload of the same file gives, that
# auto falls back to uploading where the server refuses (no --import_dirs,
# a file outside them, a float64 file), that --import on reports the
# refusal instead, and that a durable import is a copy the source's later
# rewrite does not touch.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh" "$@"

mkdir -p in out
"$PY" - <<'EOF'
import numpy as np
rng = np.random.default_rng(5)
k, n = 12, 3000
centres = rng.normal(0.0, 4.0, (k, k))
y = rng.integers(0, k, n)
x = (centres[y] + rng.normal(0.0, 1.0, (n, k))).astype(np.float32)
np.save("in/logits.npy", x)
np.save("in/labels.npy", y)
np.save("in/logits64.npy", x.astype(np.float64))
np.save("out/logits.npy", x)
EOF
links() { stat -c %h "$1"; }

start_server importing --import_dirs "$WORK/in"
IMPORTING="127.0.0.1:$STARTED_PORT"
EXTRA_PIDS="$EXTRA_PIDS $STARTED_PID"
start_server plain
PLAIN="127.0.0.1:$STARTED_PORT"
EXTRA_PIDS="$EXTRA_PIDS $STARTED_PID"
grep -q "same-host imports read .npy files under $WORK/in" importing.log ||
  fail "the importing server's log does not name its import directory"

# --- auto: read in place, same tree as an upload --------------------------------
run --server "$IMPORTING" l2h in/logits.npy --name imp --out imported.nwk
[[ $RC -eq 0 ]] || fail "l2h (auto import) exited $RC: $(cat err.txt)"
grep -q "imported (linked)" importing.log || fail "the server did not link the file"
run --server "$IMPORTING" l2h in/logits.npy --name up --import off --out uploaded.nwk
[[ $RC -eq 0 ]] || fail "l2h --import off exited $RC: $(cat err.txt)"
[[ $(grep -c " x 12 imported" importing.log) -eq 1 ]] || fail "--import off imported"
cmp -s imported.nwk uploaded.nwk || fail "the imported and uploaded trees differ"
pass "auto imports in place; the tree equals the upload's"
# The transient dataset (and its link) goes with the job.
for _ in $(seq 1 50); do [[ $(links in/logits.npy) -eq 1 ]] && break; sleep 0.1; done
[[ $(links in/logits.npy) -eq 1 ]] || fail "the link outlived its transient dataset"

# Labels travel with the request; the metrics come out as with an upload.
run --server "$IMPORTING" l2h in/logits.npy --labels in/labels.npy --name lab --json
[[ $RC -eq 0 ]] || fail "l2h --labels (import) exited $RC: $(cat err.txt)"
cp out.txt imported.json
run --server "$IMPORTING" l2h in/logits.npy --labels in/labels.npy --name lab --json --import off
[[ $RC -eq 0 ]] || fail "l2h --labels --import off exited $RC: $(cat err.txt)"
"$PY" - <<'EOF' || fail "metrics after an import with labels: $(cat imported.json) vs $(cat out.txt)"
import json
a = json.load(open("imported.json"))["metrics"]
b = json.load(open("out.txt"))["metrics"]
assert a == b and a["ari"] > 0.5, (a, b)
EOF
pass "labels with an import"

# --- auto falls back; on insists ----------------------------------------------------
before=$(grep -c " x 12 imported" importing.log)
for args in "--server $PLAIN l2h in/logits.npy" "--server $IMPORTING l2h out/logits.npy" \
            "--server $IMPORTING l2h in/logits64.npy"; do
  # shellcheck disable=SC2086
  run $args --name fb --out fb.nwk
  [[ $RC -eq 0 ]] || fail "'dendro $args' (auto) exited $RC: $(cat err.txt)"
done
[[ $(grep -c " x 12 imported" importing.log) -eq $before ]] || fail "a refused import was counted"
pass "auto uploads where the server cannot import"
expect_error any "started without --import_dirs" --server "$PLAIN" l2h in/logits.npy --import on
expect_error any "not under a directory this server imports from" \
  --server "$IMPORTING" l2h out/logits.npy --import on
expect_error any "float64" --server "$IMPORTING" upload in/logits64.npy --import on
expect_error any "--import must be auto, on or off" --server "$IMPORTING" l2h in/logits.npy \
  --import maybe
pass "--import on reports why the server would not read the file"
grep -q "audit: '' imported '$WORK/in/logits.npy' as ds-" importing.log ||
  fail "no audit line for an import"
grep -q "audit: '' imported '$WORK/out/logits.npy' (peer .*not under a directory" importing.log ||
  fail "no audit line for a refused import"
pass "imports, refused or not, are audited"

# --- a durable import is a copy -------------------------------------------------------
run --server "$IMPORTING" upload in/logits.npy --import on
[[ $RC -eq 0 ]] || fail "durable import exited $RC: $(cat err.txt)"
ds=$(head -1 out.txt)
grep -q "dataset $ds: 3000 x 12 imported (copied)" importing.log || fail "durable import not copied"
[[ $(links in/logits.npy) -eq 1 ]] || fail "a durable import linked the file"
"$PY" -c 'import numpy as np; np.save("in/logits.npy", np.zeros((3000, 12), np.float32))'
run --server "$IMPORTING" l2h "$ds" --name dur --out durable.nwk
[[ $RC -eq 0 ]] || fail "l2h on the durable import exited $RC: $(cat err.txt)"
cmp -s durable.nwk uploaded.nwk || fail "rewriting the source changed the durable dataset"
pass "durable imports are copies"
