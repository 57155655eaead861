#!/usr/bin/env bash
# Configures and builds Dendro into BUILD_DIR (default: build/).
#   deploy/build.sh            everything, with tests
#   DENDRO_TESTS=OFF deploy/build.sh   just dendrod and dendro
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
# (CMakeLists.txt sets up ccache when it is installed.)
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DDENDRO_BUILD_TESTS="${DENDRO_TESTS:-ON}" \
  -DDENDRO_NATIVE="${DENDRO_NATIVE:-ON}" >/dev/null
cmake --build "$build" -j "$jobs"
