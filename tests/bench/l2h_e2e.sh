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
#   gap         in the end-to-end run, from the server's "uploaded" log line
#               to its job's "running" line: what the client did in between,
#   peak RSS    dendrod's VmHWM after the first end-to-end run, and its ratio
#               to the logits size.
# The durable upload's writes are synced before the rest starts. With
# REPEATS > 1 the end-to-end and sequential runs alternate.
# DENDROD and DENDRO override the binaries (to compare two builds).
# ONE_SHOT_ONLY=1 runs only the end-to-end runs, one after another, with no
# durable upload and no sequential runs: the data directory then holds no
# second 5 GB copy, and the trees are compared with the first run's.
set -euo pipefail
build="$1"; work="$2"; n="$3"; k="$4"; repeats="${5:-1}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work"
logits="$work/logits_${n}x${k}.npy"
[ -f "$logits" ] || /usr/bin/python3 "$here/make_logits.py" "$n" "$k" "$logits"
size=$(stat -L -c %s "$logits")

data="$work/data_$$"
rm -rf "$data"; mkdir -p "$data"
"${DENDROD:-$build/server/dendrod}" --data_dir "$data" --listen 127.0.0.1:0 \
  --port_file "$data/port" --max_message_mb 256 --log_level info >"$data/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do [ -s "$data/port" ] && break; sleep 0.1; done
export DENDRO_SERVER="127.0.0.1:$(cat "$data/port")"
dendro="${DENDRO:-$build/client/dendro}"

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
# Seconds from the last upload's end to the last job's start, from the log.
last_gap_seconds() {
  /usr/bin/python3 -c '
import re, sys
from datetime import datetime
up = run = None
for line in open(sys.argv[1]):
    m = re.match(r"\[([^]]+)\]", line)
    if not m: continue
    t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
    if line.rstrip().endswith(" uploaded"): up = t
    elif "running for model" in line: run = t
print(f"{(run - up).total_seconds():.3f}")' "$data/log"
}
# The tree without its metadata (model name, job, times).
tree_shape() {
  /usr/bin/python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))
t.pop("metadata", None)
print(json.dumps(t, sort_keys=True))' "$1"
}

printf 'N=%s K=%s logits=%.1f MB\n' "$n" "$k" "$(calc "$size/1e6")"
if [ "${ONE_SHOT_ONLY:-0}" != 1 ]; then
  t0=$(now); "$dendro" upload "$logits" >/dev/null; t1=$(now)
  upload_s=$(calc "$t1 - $t0")
  sync
  printf 'durable upload: %.2f s  (%.0f MB/s)\n' "$upload_s" "$(calc "$size/1e6/$upload_s")"
fi
for r in $(seq 1 "$repeats"); do
  t0=$(now)
  "$dendro" l2h "$logits" --name bench --out "$work/tree_$$.json" >/dev/null
  t1=$(now)
  e2e_s=$(calc "$t1 - $t0"); job=$(last_job_seconds); gap=$(last_gap_seconds)
  [ "$r" = 1 ] && hwm_kb=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  if [ "${ONE_SHOT_ONLY:-0}" = 1 ]; then
    same=identical
    if [ "$r" = 1 ]; then
      mv "$work/tree_$$.json" "$work/tree_first_$$.json"
    else
      cmp -s <(tree_shape "$work/tree_$$.json") <(tree_shape "$work/tree_first_$$.json") ||
        same=DIFFERENT
      rm -f "$work/tree_$$.json"
    fi
    [ "$r" = "$repeats" ] && rm -f "$work/tree_first_$$.json"
    printf 'run %s: end-to-end %.2f s (gap %.3f s, job %.2f s) | tree as run 1: %s\n' \
      "$r" "$e2e_s" "$gap" "$job" "$same"
    continue
  fi
  t0=$(now)
  ds=$("$dendro" upload --transient "$logits" 2>/dev/null)
  "$dendro" l2h "$ds" --name bench-seq --out "$work/tree_seq_$$.json" >/dev/null
  t1=$(now)
  seq_s=$(calc "$t1 - $t0"); job_seq=$(last_job_seconds)
  same=DIFFERENT
  cmp -s <(tree_shape "$work/tree_$$.json") <(tree_shape "$work/tree_seq_$$.json") && same=identical
  rm -f "$work/tree_$$.json" "$work/tree_seq_$$.json"
  printf 'run %s: end-to-end %.2f s (gap %.3f s, job %.2f s) | sequential %.2f s (job %.2f s) | trees %s\n' \
    "$r" "$e2e_s" "$gap" "$job" "$seq_s" "$job_seq" "$same"
done
printf 'peak RSS: %.1f MB  (%.2f x logits)\n' "$(calc "$hwm_kb/1024")" \
  "$(calc "$hwm_kb*1024/$size")"
