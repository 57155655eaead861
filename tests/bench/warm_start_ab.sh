#!/usr/bin/env bash
# L2H refit after an append: warm-started from the version before the
# append (JobSpec.warm_start) against a fit from scratch, in alternating
# runs on one fresh dendrod.
#
#   tests/bench/warm_start_ab.sh BUILD_DIR WORK_DIR N K [ROUNDS] [APPENDED_PERCENT]
#
# Generates N x K synthetic logits (tests/bench/make_logits.py) unless
# present, uploads the first N - N * APPENDED_PERCENT / 100 rows (default
# 10 %) as a durable dataset, fits version 1 of model "base", and appends
# the other rows as the dataset's generation 2. Each round then runs
#   A: dendro l2h DATASET --warm-start base:1 --name warm --out A.json
#   B: dendro l2h DATASET --name cold --out B.json
# each timed as a whole process (wall clock, submit to tree written), with
# the job's own time (start_time..end_time) from the server and the
# server's CPU time from /proc. Runs start PAUSE seconds (default 2) apart.
# Prints every run, the medians, their ratio, and whether every tree equals
# the first cold one (metadata aside).
set -euo pipefail
build="$1"; work="$2"; n="$3"; k="$4"; rounds="${5:-5}"; pct="${6:-10}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work"
logits="$work/logits_${n}x${k}.npy"
[ -f "$logits" ] || /usr/bin/python3 "$here/make_logits.py" "$n" "$k" "$logits"
data="$(mktemp -d "$work/warm-ab.XXXXXX")"
old=$(( n - n * pct / 100 ))
/usr/bin/python3 - "$logits" "$old" "$data" <<'PYEOF'
import sys
import numpy as np
x = np.load(sys.argv[1], mmap_mode="r")
old = int(sys.argv[2])
np.save(sys.argv[3] + "/head.npy", x[:old])
np.save(sys.argv[3] + "/tail.npy", x[old:])
PYEOF
"${DENDROD:-$build/server/dendrod}" --data_dir "$data/data" --listen 127.0.0.1:0 \
  --port_file "$data/port" --max_message_mb 256 >"$data/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do [ -s "$data/port" ] && break; sleep 0.1; done
export DENDRO_SERVER="127.0.0.1:$(cat "$data/port")"
dendro="${DENDRO:-$build/client/dendro}"
ds=$("$dendro" upload "$data/head.npy" 2>/dev/null)
"$dendro" l2h "$ds" --name base --out "$data/base.json" >/dev/null
"$dendro" upload "$data/tail.npy" --append "$ds" >/dev/null 2>&1
rm -f "$data/head.npy" "$data/tail.npy"
echo "dataset $ds: $old rows, then $(( n - old )) appended (${pct} %), K = $k"

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
  "$dendro" l2h "$ds" --name "$name" --out "$out" "$@" >/dev/null
  t1=$(date +%s.%N); c1=$(server_cpu)
  awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" -v j="$(job_seconds)" \
    'BEGIN { printf "%.3f %s %.2f\n", b - a, j, d - c }'
}
# One of each first, not counted: the logits' pages and the server warm up.
run cold "$data/cold.json" >/dev/null
run warm "$data/warm.json" --warm-start base:1 >/dev/null
tree_shape "$data/cold.json" >"$data/reference"
same=identical
cmp -s <(tree_shape "$data/warm.json") "$data/reference" || same=DIFFERENT
: >"$data/a"; : >"$data/b"
for r in $(seq 1 "$rounds"); do
  a=$(run warm "$data/a.json" --warm-start base:1)
  cmp -s <(tree_shape "$data/a.json") "$data/reference" || same=DIFFERENT
  b=$(run cold "$data/b.json")
  cmp -s <(tree_shape "$data/b.json") "$data/reference" || same=DIFFERENT
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
echo "trees: $same"
