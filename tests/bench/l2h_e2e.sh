#!/usr/bin/env bash
# End-to-end L2H benchmark through the real server and CLI.
#
#   tests/bench/l2h_e2e.sh BUILD_DIR WORK_DIR N K
#
# Generates N x K synthetic logits (tests/bench/make_logits.py) unless present,
# starts a fresh dendrod, then reports:
#   upload      `dendro upload` wall time and throughput (MB/s),
#   end-to-end  `dendro l2h LOGITS --out tree.json` wall time (upload + job +
#               tree download),
#   job         server-side job time (start_time..end_time of the job),
#   peak RSS    dendrod's VmHWM at the end, and its ratio to the logits size.
set -euo pipefail
build="$1"; work="$2"; n="$3"; k="$4"
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
t0=$(now); "$dendro" upload "$logits" >/dev/null; t1=$(now)
upload_s=$(calc "$t1 - $t0")
t0=$(now); "$dendro" l2h "$logits" --name bench --out "$work/tree_$$.json" >/dev/null; t1=$(now)
e2e_s=$(calc "$t1 - $t0")
job=$("$dendro" jobs list --json | /usr/bin/python3 -c '
import json, re, sys
from datetime import datetime
j = json.load(sys.stdin)["jobs"][-1]
def p(s):
    s = re.sub(r"(\.\d{6})\d*", r"\1", s.replace("Z", "+00:00"))
    return datetime.fromisoformat(s)
print((p(j["end_time"]) - p(j["start_time"])).total_seconds())')
hwm_kb=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
rm -f "$work/tree_$$.json"
printf 'N=%s K=%s logits=%.1f MB\n' "$n" "$k" "$(calc "$size/1e6")"
printf 'upload:      %.2f s  (%.0f MB/s)\n' "$upload_s" "$(calc "$size/1e6/$upload_s")"
printf 'end-to-end:  %.2f s  (dendro l2h: upload + job + tree)\n' "$e2e_s"
printf 'job:         %.2f s  (server-side, start to end)\n' "$job"
printf 'peak RSS:    %.1f MB  (%.2f x logits)\n' "$(calc "$hwm_kb/1024")" \
  "$(calc "$hwm_kb*1024/$size")"
