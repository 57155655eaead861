#!/usr/bin/env bash
# A refit after an append: warm-started from the version before the append
# (JobSpec.warm_start) against a fit from scratch, in alternating runs on one
# fresh dendrod.
#
#   tests/bench/warm_start_ab.sh BUILD_DIR WORK_DIR N K [ROUNDS] [APPENDED_PERCENT]
#   X=rows.npy [Y=labels.npy] METHOD=tneb|ghhc [FIT_FLAGS="..."] \
#       tests/bench/warm_start_ab.sh BUILD_DIR WORK_DIR - - [ROUNDS] [APPENDED_PERCENT]
#
# The rows: N x K synthetic logits (tests/bench/make_logits.py, generated
# unless present), or the file X (with its labels Y, shuffled together by a
# fixed seed so that the appended rows are not one class). The first rows
# (all but APPENDED_PERCENT, default 10 %) are uploaded as a durable
# dataset, version 1 of model "base" is fitted on them, and the other rows
# are appended as the dataset's generation 2. METHOD (default l2h) is the
# fit verb, FIT_FLAGS go to every fit. Each round then runs
#   A: dendro METHOD DATASET --warm-start base:1 --name warm --out A.json
#   B: dendro METHOD DATASET --name cold --out B.json
# each timed as a whole process (wall clock, submit to tree written), with
# the job's own time (start_time..end_time) from the server and the
# server's CPU time from /proc. Runs start PAUSE seconds (default 2) apart.
# Prints every run, the medians and their ratio. For L2H, whether every tree
# equals the first cold one (metadata aside: warm L2H trees are identical by
# design); for the other methods with Y, the ARI of each tree cut at the
# number of label values ('dendro eval'), which a warm start must keep.
set -euo pipefail
build="$1"; work="$2"; n="$3"; k="$4"; rounds="${5:-5}"; pct="${6:-10}"
method="${METHOD:-l2h}"
read -r -a fit_flags <<<"${FIT_FLAGS:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work"
data="$(mktemp -d "$work/warm-ab.XXXXXX")"
if [ -n "${X:-}" ]; then
  rows="$X"
else
  rows="$work/logits_${n}x${k}.npy"
  [ -f "$rows" ] || /usr/bin/python3 "$here/make_logits.py" "$n" "$k" "$rows"
fi
old=$(/usr/bin/python3 - "$rows" "$pct" "$data" "${Y:-}" <<'PYEOF'
import sys
import numpy as np
x = np.load(sys.argv[1], mmap_mode="r")
pct, out, y = int(sys.argv[2]), sys.argv[3], sys.argv[4]
n = x.shape[0]
old = n - n * pct // 100
if y:  # a labelled set: shuffle rows and labels together
    order = np.random.default_rng(7).permutation(n)
    x = np.asarray(x)[order]
    np.save(out + "/labels.npy", np.load(y)[order])
np.save(out + "/head.npy", x[:old])
np.save(out + "/tail.npy", x[old:])
print(old)
PYEOF
)
n=$(( old + $(/usr/bin/python3 -c 'import numpy as np, sys; print(np.load(sys.argv[1], mmap_mode="r").shape[0])' "$data/tail.npy") ))
"${DENDROD:-$build/server/dendrod}" --data_dir "$data/data" --listen 127.0.0.1:0 \
  --port_file "$data/port" --max_message_mb 256 >"$data/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do [ -s "$data/port" ] && break; sleep 0.1; done
export DENDRO_SERVER="127.0.0.1:$(cat "$data/port")"
dendro="${DENDRO:-$build/client/dendro}"
ds=$("$dendro" upload "$data/head.npy" 2>/dev/null)
"$dendro" "$method" "$ds" --name base --out "$data/base.json" "${fit_flags[@]}" >/dev/null
"$dendro" upload "$data/tail.npy" --append "$ds" >/dev/null 2>&1
rm -f "$data/head.npy" "$data/tail.npy"
echo "$method on dataset $ds: $old rows, then $(( n - old )) appended (${pct} %); flags: ${fit_flags[*]:-none}"

# shellcheck source=tests/bench/ab_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ab_lib.sh"
job_seconds() {  # the newest job's start..end, from its record
  "$dendro" jobs list --limit 1 --json | /usr/bin/python3 -c 'import json, sys, datetime
j = json.load(sys.stdin)["jobs"][0]
p = datetime.datetime.fromisoformat
print("%.3f" % (p(j["end_time"]) - p(j["start_time"])).total_seconds())'
}
run() {  # run NAME OUT [FLAGS...]: prints "wall job server_cpu"
  local name="$1" out="$2" c0 t0 t1 c1
  shift 2
  sleep "${PAUSE:-2}"
  c0=$(server_cpu); t0=$(date +%s.%N)
  "$dendro" "$method" "$ds" --name "$name" --out "$out" "${fit_flags[@]}" "$@" >/dev/null
  t1=$(date +%s.%N); c1=$(server_cpu)
  awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" -v j="$(job_seconds)" \
    'BEGIN { printf "%.3f %s %.2f\n", b - a, j, d - c }'
}
# One of each first, not counted: the logits' pages and the server warm up.
run cold "$data/cold.json" >/dev/null
run warm "$data/warm.json" --warm-start base:1 >/dev/null
tree_shape "$data/cold.json" >"$data/reference"
same=identical
check() {  # check TREE: L2H trees must equal the reference; others are scored
  if [ "$method" = l2h ]; then
    cmp -s <(tree_shape "$1") "$data/reference" || same=DIFFERENT
  elif [ -f "$data/labels.npy" ]; then
    "$dendro" eval "$1" --labels "$data/labels.npy" |
      /usr/bin/python3 -c 'import json, sys; print("%.4f" % json.load(sys.stdin)["ari"])'
  fi
}
check "$data/warm.json" >/dev/null
: >"$data/a"; : >"$data/b"; : >"$data/a_ari"; : >"$data/b_ari"
for r in $(seq 1 "$rounds"); do
  a=$(run warm "$data/a.json" --warm-start base:1)
  check "$data/a.json" >>"$data/a_ari"
  b=$(run cold "$data/b.json")
  check "$data/b.json" >>"$data/b_ari"
  echo "$a" >>"$data/a"; echo "$b" >>"$data/b"
  read -r aw aj ac <<<"$a"; read -r bw bj bc <<<"$b"
  printf 'round %s: warm %s s (job %s s, server CPU %s s) | cold %s s (job %s s, server CPU %s s)\n' \
    "$r" "$aw" "$aj" "$ac" "$bw" "$bj" "$bc"
done
for f in 1 2 3; do
  ma=$(cut -d' ' -f$f "$data/a" | median); mb=$(cut -d' ' -f$f "$data/b" | median)
  printf 'median %s: warm %s, cold %s, ratio %s\n' "$(echo wall job server_cpu | cut -d' ' -f$f)" \
    "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", a / b }')"
done
if [ "$method" = l2h ]; then
  echo "trees: $same"
elif [ -s "$data/a_ari" ]; then
  echo "ARI at the true k, per round: warm $(paste -sd' ' "$data/a_ari"), cold $(paste -sd' ' "$data/b_ari")"
fi
