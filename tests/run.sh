#!/usr/bin/env bash
# The test suite, from a clean checkout: installs the packages, builds with
# tests, runs every test (unit, server, black-box) through ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash deploy/install-deps.sh
BUILD_DIR="${BUILD_DIR:-$root/build}" bash deploy/build.sh
ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)" \
  --timeout 600 "$@"
# A bounded fuzzing pass of every target (clang, ASan + UBSan), from the
# committed seed corpora; FUZZ_SECONDS=0 skips it.
if [[ "${FUZZ_SECONDS:-30}" != 0 ]]; then
  bash tests/fuzz/run.sh "${FUZZ_SECONDS:-30}" "${FUZZ_BUILD_DIR:-$root/build-fuzz}"
fi
