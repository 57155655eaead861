#!/usr/bin/env bash
# Downloading a tree larger than one gRPC message.
#
#   tests/bench/large_tree.sh BUILD_DIR WORK_DIR N K [MAX_MESSAGE_MB]
#
# Fits L2H on N x K synthetic logits (tests/bench/make_logits.py) in a fresh
# dendrod started with --max_message_mb MAX_MESSAGE_MB (default 8), then
# downloads the tree with every point's leaf (`dendro tree NAME --out
# tree.json`, which reads GetTreeStream) and reports:
#   the JSON size against the message limit,
#   the download's wall time and throughput,
#   the peak RSS (VmHWM) of a freshly restarted dendrod before and after the
#   download,
#   a check with Python's json module that point_leaf has N entries.
set -euo pipefail
build="$1"; work="$2"; n="$3"; k="$4"; limit_mb="${5:-8}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work"
logits="$work/logits_${n}x${k}.npy"
[ -f "$logits" ] || /usr/bin/python3 "$here/make_logits.py" "$n" "$k" "$logits"

data="$work/data_$$"
rm -rf "$data"; mkdir -p "$data"
start_server() {
  rm -f "$data/port"
  "$build/server/dendrod" --data_dir "$data" --listen 127.0.0.1:0 --port_file "$data/port" \
    --max_message_mb "$limit_mb" --log_level warn &
  pid=$!
  for _ in $(seq 1 100); do [ -s "$data/port" ] && break; sleep 0.1; done
  export DENDRO_SERVER="127.0.0.1:$(cat "$data/port")"
}
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data" "$work/tree_$$.json"' EXIT
dendro="$build/client/dendro"
now() { date +%s.%N; }
calc() { awk "BEGIN { print $* }"; }

start_server
"$dendro" l2h "$logits" --name big >/dev/null
# A fresh server, so that its peak RSS is the download's, not the fit's.
kill "$pid"; wait "$pid" 2>/dev/null || true
start_server
hwm_before=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
t0=$(now); "$dendro" tree big --out "$work/tree_$$.json" >/dev/null; t1=$(now)
# Again, with the model already loaded in the server's cache.
t2=$(now); "$dendro" tree big --out "$work/tree_$$.json" >/dev/null; t3=$(now)
hwm_after=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
bytes=$(stat -c %s "$work/tree_$$.json")
points=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["point_leaf"]))' \
  "$work/tree_$$.json")
printf 'N=%s K=%s, message limit %s MiB, load average %s\n' "$n" "$k" "$limit_mb" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'tree.json:   %.1f MB (%.1f x the message limit), point_leaf entries: %s\n' \
  "$(calc "$bytes/1e6")" "$(calc "$bytes/($limit_mb*1048576)")" "$points"
printf 'download:    %.2f s (%.0f MB/s) with the model load; %.2f s (%.0f MB/s) from the cache\n' \
  "$(calc "$t1 - $t0")" "$(calc "$bytes/1e6/($t1 - $t0)")" \
  "$(calc "$t3 - $t2")" "$(calc "$bytes/1e6/($t3 - $t2)")"
printf 'dendrod peak RSS: %.1f MB before the download, %.1f MB after\n' \
  "$(calc "$hwm_before/1024")" "$(calc "$hwm_after/1024")"
[ "$points" = "$n" ] || { echo "point_leaf has $points entries, expected $n" >&2; exit 1; }
