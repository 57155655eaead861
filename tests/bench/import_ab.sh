#!/usr/bin/env bash
# One-shot L2H through the CLI, the file read in place by the server (a
# same-host import) against the file uploaded, in alternating runs on one
# fresh dendrod.
#
#   tests/bench/import_ab.sh BUILD_DIR LOGITS.npy [ROUNDS]
#
# dendrod runs with default flags plus --import_dirs over the file's
# directory. Each round runs `dendro l2h LOGITS --import on` (A) and then
# `--import off` (B), each timed as a whole process (wall clock), with the
# server's CPU time over the run read from /proc. Every run starts PAUSE
# seconds (default 3) after the one before, so that the server's background
# deletion of the last transient dataset (seconds of page freeing after a
# 5 GB upload) is not charged to the next run. Prints every run, the
# medians, and whether every tree equals the first one (metadata aside).
set -euo pipefail
build="$1"; logits="$(realpath "$2")"; rounds="${3:-5}"
data="$(mktemp -d "${TMPDIR:-/tmp}/dendro-import-ab.XXXXXX")"
"${DENDROD:-$build/server/dendrod}" --data_dir "$data/data" --listen 127.0.0.1:0 \
  --port_file "$data/port" --max_message_mb 256 --import_dirs "$(dirname "$logits")" \
  >"$data/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do [ -s "$data/port" ] && break; sleep 0.1; done
export DENDRO_SERVER="127.0.0.1:$(cat "$data/port")"
dendro="${DENDRO:-$build/client/dendro}"
# shellcheck source=tests/bench/ab_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ab_lib.sh"

run() {  # run MODE OUT: prints "wall server_cpu"
  local c0 t0 t1 c1
  sleep "${PAUSE:-3}"
  c0=$(server_cpu); t0=$(date +%s.%N)
  "$dendro" l2h "$logits" --name ab --import "$1" --out "$2" >/dev/null
  t1=$(date +%s.%N); c1=$(server_cpu)
  awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" 'BEGIN { printf "%.3f %.2f\n", b - a, d - c }'
}
# One of each first, not counted: the file's pages and the server warm up.
run on "$data/warm.json" >/dev/null; run off "$data/warm.json" >/dev/null
tree_a="$data/tree.json"; tree_b="$data/tree.json"
run_a() { run on "$tree_a"; }
run_b() { run off "$tree_b"; }
ab_rounds "$rounds" import upload "$data/warm.json"
grep -c "imported (linked)" "$data/log" | sed 's/^/linked imports: /'
