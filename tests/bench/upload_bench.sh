#!/usr/bin/env bash
# Upload throughput of two dendrod builds side by side (e.g. before and after a
# change to the write path): for each build, a fresh server on a fresh data
# directory, then `dendro upload` of the same .npy, durable and --transient,
# alternating builds, REPS times each. Prints one line per run: wall time,
# throughput, and the CPU time (user + system) dendrod and the client spent.
# CPU time is the steadier figure on a loaded machine.
#
#   tests/bench/upload_bench.sh NPY REPS NAME=BUILD_DIR [NAME=BUILD_DIR ...]
# BUILD_DIR holds server/dendrod and client/dendro.
set -euo pipefail
npy=$1; reps=$2; shift 2
work=$(mktemp -d "${TMPDIR:-/tmp}/dendro-upload-bench.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
bytes=$(stat -c %s "$npy")
echo "file $npy, $bytes bytes; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$reps"); do
  for spec in "$@"; do
    name=${spec%%=*}; dir=${spec#*=}
    for mode in durable transient; do
      data="$work/$name-$rep-$mode"; mkdir -p "$data"
      "$dir/server/dendrod" --listen 127.0.0.1:0 --data_dir "$data" --port_file "$data/port" \
        >"$data.log" 2>&1 &
      pid=$!
      while [[ ! -s $data/port ]]; do sleep 0.05; done
      flag=""; [[ $mode == transient ]] && flag="--transient"
      start=$(date +%s.%N)
      /usr/bin/time -o "$data.client" -f "%U %S" \
        "$dir/client/dendro" --server "127.0.0.1:$(cat "$data/port")" upload "$npy" $flag >/dev/null
      end=$(date +%s.%N)
      ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
      kill "$pid"; wait "$pid" 2>/dev/null || true
      awk -v n="$name" -v m="$mode" -v r="$rep" -v s="$start" -v e="$end" -v b="$bytes" \
        -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v c="$(cat "$data.client")" \
        'BEGIN { split(c, cc, " ");
                 printf "%s\t%s\trep %d\t%.2f s\t%.0f MB/s\tdendrod CPU %.2f s\tclient CPU %.2f s\n",
                        n, m, r, e - s, b / (e - s) / 1e6, t / hz, cc[1] + cc[2] }'
      rm -f "$data.client"
      rm -rf "$data"
    done
  done
done
