#!/bin/bash
# Regenerates the t-NEB report table of docs/methods.md (issue 12): ARI at
# the true k, median and best over SEEDS fit seeds, on the five Figure-4
# recipes (the golden draw plus sample seeds 1-3, m = 15, the authors'
# setting for these sets) and every Densired set in DENSIRED (m = 25),
# standardised, beside k-means and a Gaussian mixture. Every t-NEB fit
# reports both merge orders (persistence and the paper's density).
#
# Usage: tests/bench/tneb_report.sh OUT [extra tneb_densired flags...]
#   env: BUILD (default build), SEEDS (10), DENSIRED (/work/shared/data/densired),
#        TIMEBOX per t-NEB run (e.g. 40m; default none), DENSIRED_SETS (a glob
#        of X files, default all), SKIP_FIG4=1, SKIP_BASELINES=1.
# One t-NEB output file per Densired set, so a run cut short by TIMEBOX keeps
# the sets it finished and the table says how many seeds each row has.
# Single-threaded at nice 19 (a shared machine); the 64-D sets take minutes
# per fit.
set -u
OUT=${1:?usage: tneb_report.sh OUT [flags]}
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
SEEDS=${SEEDS:-10}
DENSIRED=${DENSIRED:-/work/shared/data/densired}
BIN=$BUILD/tests/bench/tneb_densired
PY=/usr/bin/python3
mkdir -p "$OUT"
run() {  # run OUTFILE args...
  local out=$1
  shift
  if [ -n "${TIMEBOX:-}" ]; then
    timeout "$TIMEBOX" nice -n 19 "$BIN" --threads 1 --seeds "$SEEDS" "$@" > "$out" 2> "$out.err"
  else
    nice -n 19 "$BIN" --threads 1 --seeds "$SEEDS" "$@" > "$out" 2> "$out.err"
  fi
}

$PY "$SRC/tests/bench/tneb_fig4_draws.py" "$OUT/fig4" 1 2 3
fig4=()
for r in noisy_circles noisy_moons blobs aniso varied; do
  fig4+=("$SRC/tests/golden/tneb/fig4_${r}_X.npy" "$SRC/tests/golden/tneb/fig4_${r}_y.npy")
  for s in 1 2 3; do fig4+=("$OUT/fig4/fig4_${r}_rs${s}_X.npy" "$OUT/fig4/fig4_${r}_rs${s}_y.npy"); done
done
dens=()
for x in ${DENSIRED_SETS:-$DENSIRED/*_X.npy}; do dens+=("$x" "${x%_X.npy}_y.npy"); done

if [ -z "${SKIP_BASELINES:-}" ]; then
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 19 $PY "$SRC/tests/bench/tneb_baselines.py" \
    --seeds "$SEEDS" "${fig4[@]}" "${dens[@]}" > "$OUT/baselines.tsv"
fi
if [ -z "${SKIP_FIG4:-}" ]; then
  run "$OUT/tneb_fig4.out" --components 15 "$@" "${fig4[@]}"
fi
for ((i = 0; i < ${#dens[@]}; i += 2)); do
  name=$(basename "${dens[i]}" _X.npy)
  run "$OUT/tneb_$name.out" "$@" "${dens[i]}" "${dens[i+1]}"
done
$PY "$SRC/tests/bench/tneb_report_table.py" "$OUT/baselines.tsv" "$OUT"/tneb_*.out > "$OUT/table.md"
cat "$OUT/table.md"
