#!/usr/bin/env bash
# The test suite, from a clean checkout (CI runs exactly this):
#   1. installs the packages (deploy/install-deps.sh);
#   2. builds every target with the release flags (build/) and runs every
#      ctest entry: unit, server on both catalogues, black-box with the real
#      binaries, quality, load;
#   3. runs every libFuzzer target (clang, ASan + UBSan) for FUZZ_SECONDS
#      (default 30) from its seed corpus (build-fuzz/).
#
#   SANITIZE=all tests/run.sh       step 2 under the sanitizers instead
#                                   (tests/sanitize.sh): every entry with
#                                   ASan + UBSan in build-asan/, then the
#                                   server tests with TSan in build-tsan/;
#                                   any report fails the run
#   SANITIZE=address | thread       one of the two
#   FUZZ_SECONDS=0                  skips step 3
# Further arguments go to ctest (e.g. -R robustness).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash deploy/install-deps.sh
status=0
case "${SANITIZE:-none}" in
  none)
    BUILD_DIR="${BUILD_DIR:-$root/build}" bash deploy/build.sh
    ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)" \
      --timeout 600 "$@" || status=1
    ;;
  all | address | thread)
    bash tests/sanitize.sh "$SANITIZE" "$@" || status=1
    ;;
  *) echo "tests/run.sh: SANITIZE must be all, address, thread or none" >&2; exit 2 ;;
esac
if [[ "${FUZZ_SECONDS:-30}" != 0 ]]; then
  bash tests/fuzz/run.sh "${FUZZ_SECONDS:-30}" "${FUZZ_BUILD_DIR:-$root/build-fuzz}" || status=1
fi
exit $status
