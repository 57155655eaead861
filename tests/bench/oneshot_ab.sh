#!/usr/bin/env bash
# One-shot `dendro l2h LOGITS --out tree.json` against two dendrod builds,
# each its own fresh server, in alternating runs.
#
#   tests/bench/oneshot_ab.sh DENDROD_A DENDROD_B DENDRO LOGITS.npy [ROUNDS] [-- CLI FLAGS]
#
# Both servers run with default flags plus --import_dirs over the file's
# directory (so the CLI's default, --import auto, reads the file in place;
# pass `-- --import off` to upload it instead). The same CLI (DENDRO) talks
# to both. After two unmeasured runs against each, every round runs A and
# then B, each timed as a whole process (wall clock), with that server's CPU
# time over the run read from /proc. Prints every round, the medians, the
# median of the per-round ratios A/B, and whether every tree equals A's
# first one (metadata aside).
set -euo pipefail
dendrod_a="$1"; dendrod_b="$2"; dendro="$3"; logits="$(realpath "$4")"; rounds="${5:-10}"
shift $(($# < 5 ? $# : 5))
[ "${1:-}" = "--" ] && shift
flags=("$@")
work="$(mktemp -d "${TMPDIR:-/tmp}/dendro-oneshot-ab.XXXXXX")"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)
for side in a b; do
  bin="$dendrod_a"; [ "$side" = b ] && bin="$dendrod_b"
  mkdir -p "$work/$side"
  "$bin" --data_dir "$work/$side/data" --listen 127.0.0.1:0 --port_file "$work/$side/port" \
    --max_message_mb 256 --import_dirs "$(dirname "$logits")" >"$work/$side/log" 2>&1 &
  pids+=($!)
done
for side in a b; do
  for _ in $(seq 1 100); do [ -s "$work/$side/port" ] && break; sleep 0.1; done
done
# shellcheck source=tests/bench/ab_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ab_lib.sh"

run() {  # run SIDE PID: prints "wall server_cpu"
  local port c0 t0 t1 c1
  port=$(cat "$work/$1/port")
  c0=$(awk -v t="$ticks" '{ print ($14 + $15) / t }' "/proc/$2/stat"); t0=$(date +%s.%N)
  "$dendro" --server "127.0.0.1:$port" l2h "$logits" --name ab --out "$work/$1/tree.json" \
    "${flags[@]}" >/dev/null
  t1=$(date +%s.%N); c1=$(awk -v t="$ticks" '{ print ($14 + $15) / t }' "/proc/$2/stat")
  awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" 'BEGIN { printf "%.4f %.3f\n", b - a, d - c }'
}
for _ in 1 2; do run a "${pids[0]}" >/dev/null; run b "${pids[1]}" >/dev/null; done
tree_a="$work/a/tree.json"; tree_b="$work/b/tree.json"
run_a() { run a "${pids[0]}"; }
run_b() { run b "${pids[1]}"; }
ab_rounds "$rounds" A B "$tree_a"
