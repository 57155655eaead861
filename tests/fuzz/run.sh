#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan + UBSan) in their own
# build directory and runs each for SECONDS, starting from its committed
# seed corpus (tests/fuzz/corpus/<target>/). New inputs go to a scratch
# corpus, not the repository. A crash stops the run with the reproducer's
# path; copy it into the seed corpus and add a unit test for the fix.
#
#   tests/fuzz/run.sh [SECONDS] [BUILD_DIR]     (defaults: 60, build-fuzz)
#
# Runs JOBS targets at a time (default 2). Prints one line per target:
# executions, and the exit status.
set -euo pipefail
SECONDS_PER_TARGET=${1:-60}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${2:-$ROOT/build-fuzz}
JOBS=${JOBS:-2}

command -v clang++-14 >/dev/null || { echo "fuzz: clang++-14 is not installed (deploy/packages.txt lists it)"; exit 1; }
CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDENDRO_FUZZ=ON -DDENDRO_BUILD_SERVER=OFF -DDENDRO_BUILD_TESTS=OFF -DDENDRO_NATIVE=OFF >/dev/null
# (A failed build prints its errors: its output is kept only then.)
if ! cmake --build "$BUILD" -j "$JOBS" >"${TMPDIR:-/tmp}/dendro-fuzz-build.log" 2>&1; then
  grep -E "error|Error" "${TMPDIR:-/tmp}/dendro-fuzz-build.log" | head -20
  echo "fuzz: the build failed"
  exit 1
fi

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/dendro-fuzz.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
# Runs one target; its exit status goes to $SCRATCH/<name>.rc.
run_target() {
  local target=$1 name
  name=$(basename "$target" _fuzz)
  mkdir -p "$SCRATCH/$name" "$SCRATCH/$name.crashes"
  local rc=0
  "$target" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$SCRATCH/$name.crashes/" \
    "$SCRATCH/$name" "$ROOT/tests/fuzz/corpus/$name" >"$SCRATCH/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$SCRATCH/$name.rc"
}

# JOBS targets at a time (each is one process on one core).
targets=("$BUILD"/tests/fuzz/*_fuzz)
for target in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
  run_target "$target" &
done
wait

status=0
for target in "${targets[@]}"; do
  name=$(basename "$target" _fuzz)
  rc=$(cat "$SCRATCH/$name.rc")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$SCRATCH/$name.log" | grep -o '[0-9]*$' || echo "?")
  echo "fuzz $name: $execs executions in ${SECONDS_PER_TARGET} s, exit $rc"
  if [[ $rc -ne 0 ]]; then
    status=1
    tail -40 "$SCRATCH/$name.log"
    mkdir -p "$ROOT/build-fuzz-crashes"
    cp -r "$SCRATCH/$name.crashes" "$ROOT/build-fuzz-crashes/" 2>/dev/null || true
    echo "fuzz $name: reproducers copied to build-fuzz-crashes/$name.crashes/"
  fi
done
exit $status
