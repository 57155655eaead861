#!/usr/bin/env bash
# End-to-end L2H benchmark through the real server and CLI.
#
#   tests/bench/l2h_e2e.sh BUILD_DIR WORK_DIR N K [REPEATS]
#
# Generates N x K synthetic logits (tests/bench/make_logits.py) unless present,
# starts a fresh dendrod, then reports:
#   upload      `dendro upload` wall time and throughput (MB/s),
#   end-to-end  `dendro l2h LOGITS --out tree.json` wall time (upload + job +
#               tree download); the upload asks for L2H's first pass to run
#               on the server while the rows arrive,
#   job         server-side job time (start_time..end_time of the job),
#   sequential  the same work without that overlap, as the reference:
#               `dendro upload --transient LOGITS`, then `dendro l2h DATASET
#               --out tree.json` (the job computes the first pass itself),
#               and whether both trees are identical,
#   peak RSS    dendrod's VmHWM after the first end-to-end run, and its ratio
#               to the logits size.
# The durable upload's writes are synced before the rest starts. With
# REPEATS > 1 the end-to-end and sequential runs alternate.
set -euo pipefail
build="$1"; work="$2"; n="$3"; k="$4"; repeats="${5:-1}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work"
logits="$work/logits_${n}x${k}.npy"
[ -f "$logits" ] || /usr/bin/python3 "$here/make_logits.py" "$n" "$k" "$logits"
size=$(stat -L -c %s "$logits")

data="$work/data_$$"
rm -rf "$data"; mkdir -p "$data"
"$build/server/dendrod" --data_dir "$data" --listen 127.0.0.1:0 --port_file "$data/port" \
  --max_message_mb 256 --log_level warn &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do [ -s "$data/port" ] && break; sleep 0.1; done
export DENDRO_SERVER="127.0.0.1:$(cat "$data/port")"
dendro="$build/client/dendro"

now() { date +%s.%N; }
calc() { awk "BEGIN { print $* }"; }
last_job_seconds() {
  "$dendro" jobs list --json | /usr/bin/python3 -c '
import json, re, sys
from datetime import datetime
j = json.load(sys.stdin)["jobs"][-1]
def p(s):
    s = re.sub(r"(\.\d{6})\d*", r"\1", s.replace("Z", "+00:00"))
    return datetime.fromisoformat(s)
print((p(j["end_time"]) - p(j["start_time"])).total_seconds())'
}
# The tree without its metadata (model name, job, times).
tree_shape() {
  /usr/bin/python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))
t.pop("metadata", None)
print(json.dumps(t, sort_keys=True))' "$1"
}

t0=$(now); "$dendro" upload "$logits" >/dev/null; t1=$(now)
upload_s=$(calc "$t1 - $t0")
sync
printf 'N=%s K=%s logits=%.1f MB\n' "$n" "$k" "$(calc "$size/1e6")"
printf 'durable upload: %.2f s  (%.0f MB/s)\n' "$upload_s" "$(calc "$size/1e6/$upload_s")"
for r in $(seq 1 "$repeats"); do
  t0=$(now)
  "$dendro" l2h "$logits" --name bench --out "$work/tree_$$.json" >/dev/null
  t1=$(now)
  e2e_s=$(calc "$t1 - $t0"); job=$(last_job_seconds)
  [ "$r" = 1 ] && hwm_kb=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  t0=$(now)
  ds=$("$dendro" upload --transient "$logits" 2>/dev/null)
  "$dendro" l2h "$ds" --name bench-seq --out "$work/tree_seq_$$.json" >/dev/null
  t1=$(now)
  seq_s=$(calc "$t1 - $t0"); job_seq=$(last_job_seconds)
  same=DIFFERENT
  cmp -s <(tree_shape "$work/tree_$$.json") <(tree_shape "$work/tree_seq_$$.json") && same=identical
  rm -f "$work/tree_$$.json" "$work/tree_seq_$$.json"
  printf 'run %s: end-to-end %.2f s (job %.2f s) | sequential %.2f s (job %.2f s) | trees %s\n' \
    "$r" "$e2e_s" "$job" "$seq_s" "$job_seq" "$same"
done
printf 'peak RSS: %.1f MB  (%.2f x logits)\n' "$(calc "$hwm_kb/1024")" \
  "$(calc "$hwm_kb*1024/$size")"
