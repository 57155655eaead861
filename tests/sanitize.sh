#!/usr/bin/env bash
# The test suite under sanitizers, each build in a directory of its own:
#
#   tests/sanitize.sh address   every ctest entry, ASan + UBSan   (build-asan/)
#   tests/sanitize.sh thread    the server and job-manager tests, L2H's threaded core
#                               tests and the gHHC core tests, TSan, built without
#                               -march=native (build-tsan/)
#   tests/sanitize.sh           both, one after the other
#
# Every report is fatal (-fno-sanitize-recover=all, halt_on_error) and is
# also written to a log file of its own (log_path), so a report from a
# dendrod that a black-box test started, stopped and did not check still
# fails the run: the script fails when any such file exists at the end.
# Suppressions live in tests/sanitizers/*.supp, one line each with the
# upstream bug it works around.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# (Computed here: nproc honours OMP_THREAD_LIMIT, which the TSan run sets.)
jobs="${JOBS:-$(nproc)}"

configure_and_build() {  # DIR SANITIZER NATIVE [TARGET...]
  local dir=$1 sanitizer=$2 native=$3
  shift 3
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDENDRO_SANITIZE="$sanitizer" -DDENDRO_NATIVE="$native" \
    -DDENDRO_BUILD_BENCHMARKS=OFF >/dev/null
  if [[ $# -gt 0 ]]; then
    local targets=()
    for t in "$@"; do targets+=(--target "$t"); done
    cmake --build "$dir" -j "$jobs" "${targets[@]}"
  else
    cmake --build "$dir" -j "$jobs"
  fi
}

# Fails (after printing them) if any sanitizer left a report in DIR.
check_reports() {  # DIR NAME
  local dir=$1 name=$2
  shopt -s nullglob
  local reports=("$dir"/*)
  shopt -u nullglob
  if [[ ${#reports[@]} -gt 0 ]]; then
    echo "sanitize $name: ${#reports[@]} report file(s):"
    for r in "${reports[@]}"; do
      echo "== $r"
      head -60 "$r"
    done
    return 1
  fi
  echo "sanitize $name: no reports"
}

run_address() {
  local build="${ASAN_BUILD_DIR:-$root/build-asan}"
  configure_and_build "$build" address,undefined ON
  local logs="$build/sanitizer-reports"
  rm -rf "$logs" && mkdir -p "$logs"
  # detect_leaks: LeakSanitizer at every exit of an instrumented process.
  # quarantine_size_mb: a smaller quarantine than the default 256 MiB keeps
  # the load test's RSS bound meaningful; use-after-free detection still
  # covers the most recent 32 MiB of frees.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:quarantine_size_mb=32:detect_stack_use_after_return=0:log_path=$logs/asan"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0:log_path=$logs/lsan"
  local status=0
  ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900 \
    -E '^fuzz_run' "$@" || status=1
  check_reports "$logs" address,undefined || status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
  return $status
}

run_thread() {
  local build="${TSAN_BUILD_DIR:-$root/build-tsan}"
  # The binaries behind ctest's "server" label and dendrod, which some of
  # them start; L2H's tests of its own worker threads; and the gHHC core
  # tests, whose fits are the most sensitive to the floating-point path.
  # Built without -march=native (DENDRO_NATIVE=OFF), where the address pass
  # uses it, so every run checks the suite on both vector paths.
  configure_and_build "$build" thread OFF dendrod server_test tneb_server_test hppca_server_test \
    ghhc_server_test robustness_server_test auth_test model_cache_test registry_labels_test \
    catalogue_test sweep_test artifact_store_test upload_validator_test stream_limiter_test \
    stream_caps_test method_bounds_test model_table_test api_test serving_gate_test \
    elastic_pool_test batcher_test \
    job_lifecycle_test \
    l2h_worker_pool_test l2h_run_test ghhc_fit_test ghhc_refine_test
  local logs="$build/sanitizer-reports"
  rm -rf "$logs" && mkdir -p "$logs"
  # Debian's Abseil, gRPC and libgomp are not built with TSan, so the
  # synchronisation inside them is invisible to it:
  # - ignore_noninstrumented_modules: no reports from interceptors (memcpy,
  #   memmove, ...) called by those libraries, e.g. absl::Mutex's deadlock
  #   graph;
  # - OMP_THREAD_LIMIT=1: OpenMP regions run on the calling thread, since
  #   libgomp's barriers would look like races (TSan needs an instrumented
  #   OpenMP runtime for them). The threads under test are the server's.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$root/tests/sanitizers/tsan.supp:log_path=$logs/tsan"
  export OMP_THREAD_LIMIT=1
  local status=0
  ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900 -L '^server$' \
    "$@" || status=1
  ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900 \
    -R '^(L2hWorkerPool|L2hRun|GhhcFitTest|GhhcRefineTest|GhhcModelTreesTest)\.' "$@" ||
    status=1
  check_reports "$logs" thread || status=1
  unset TSAN_OPTIONS OMP_THREAD_LIMIT
  return $status
}

case "${1:-all}" in
  address) shift; run_address "$@" ;;
  thread) shift; run_thread "$@" ;;
  all)
    shift || true
    status=0
    run_address "$@" || status=1
    run_thread "$@" || status=1
    exit $status
    ;;
  *) echo "usage: tests/sanitize.sh [address|thread|all] [ctest args...]" >&2; exit 2 ;;
esac
