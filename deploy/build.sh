#!/usr/bin/env bash
# Configures and builds Dendro into BUILD_DIR (default: build/).
#   deploy/build.sh            everything, with tests
#   DENDRO_TESTS=OFF deploy/build.sh   just dendrod and dendro
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
# Let ccache share results between checkouts in different directories (CI
# builds a fresh clone each time): paths below the checkout are hashed
# relative to it, and the working directory is left out of the hash.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DDENDRO_BUILD_TESTS="${DENDRO_TESTS:-ON}" \
  -DDENDRO_NATIVE="${DENDRO_NATIVE:-ON}" >/dev/null
cmake --build "$build" -j "$jobs"
