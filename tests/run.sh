#!/usr/bin/env bash
# The test suite, from a clean checkout (CI runs exactly this):
#   1. installs the packages (deploy/install-deps.sh);
#   2. builds every target with AddressSanitizer and UndefinedBehaviorSanitizer
#      (build-asan/) and runs every ctest entry there: unit, server on both
#      catalogues, black-box with the real binaries, quality, load; then
#      builds the server tests and L2H's threaded core tests with
#      ThreadSanitizer (build-tsan/) and runs
#      them (tests/sanitize.sh); any sanitizer report fails the run;
#   3. checks the annotated locks with clang's -Wthread-safety
#      (tests/thread_safety.sh, syntax only);
#   4. runs every libFuzzer target (clang, ASan + UBSan) for FUZZ_SECONDS
#      (default 30) from its seed corpus (build-fuzz/).
#
#   SANITIZE=none tests/run.sh      step 2 with the release build instead
#                                   (build/, the flags dendrod ships with)
#   SANITIZE=address | thread       one of the two sanitizer passes
#   FUZZ_SECONDS=0                  skips step 4
# Further arguments go to ctest (e.g. -R robustness).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash deploy/install-deps.sh
status=0
sanitize="${SANITIZE:-all}"
case "$sanitize" in
  none)
    BUILD_DIR="${BUILD_DIR:-$root/build}" bash deploy/build.sh
    ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)" \
      --timeout 600 "$@" || status=1
    ;;
  all | address | thread)
    bash tests/sanitize.sh "$sanitize" "$@" || status=1
    ;;
  *) echo "tests/run.sh: SANITIZE must be all, address, thread or none" >&2; exit 2 ;;
esac
# Clang's thread-safety analysis of the annotated locks (syntax only), with
# the generated headers of whichever build ran.
for dir in "${ASAN_BUILD_DIR:-$root/build-asan}" "${TSAN_BUILD_DIR:-$root/build-tsan}" \
           "${BUILD_DIR:-$root/build}"; do
  if [[ -d "$dir/proto/gen" ]]; then
    bash tests/thread_safety.sh "$dir" || status=1
    break
  fi
done
if [[ "${FUZZ_SECONDS:-30}" != 0 ]]; then
  bash tests/fuzz/run.sh "${FUZZ_SECONDS:-30}" "${FUZZ_BUILD_DIR:-$root/build-fuzz}" || status=1
fi
exit $status
