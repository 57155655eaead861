#!/usr/bin/env bash
# Clang's thread-safety analysis over every source whose locks are
# annotated (ABSL_GUARDED_BY and friends, see core/common/mutex.h): a member
# read or written without its mutex, or a function called without the lock
# it requires, fails the run. A syntax-only pass: nothing is built.
#
#   tests/thread_safety.sh [BUILD_DIR]   (default build-asan: its generated
#                                         protobuf headers and version.h
#                                         are needed)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-asan}"
clang=clang++-14
if ! command -v "$clang" >/dev/null; then
  echo "thread_safety: $clang is not installed (Debian package clang-14)" >&2
  exit 1
fi
if [[ ! -d "$build/proto/gen" ]]; then
  echo "thread_safety: $build/proto/gen is missing; build the tree first" >&2
  exit 1
fi
cd "$root"
# Every .cc under core/ and server/ that annotates a lock, or whose header does.
annotations='ABSL_GUARDED_BY\|ABSL_EXCLUSIVE_LOCKS_REQUIRED\|ABSL_LOCKS_EXCLUDED'
mapfile -t sources < <(
  for cc in $(find core server -name '*.cc' | sort); do
    h="${cc%.cc}.h"
    if grep -q "$annotations" "$cc" || { [[ -f "$h" ]] && grep -q "$annotations" "$h"; }; then
      echo "$cc"
    fi
  done)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "thread_safety: no annotated sources found" >&2
  exit 1
fi
# pkg-config's -D flags too: httplib.h declares its TLS members only with
# CPPHTTPLIB_OPENSSL_SUPPORT, as the build defines it.
printf '%s\n' "${sources[@]}" |
  xargs -P "$(nproc)" -I{} "$clang" -std=c++17 -fsyntax-only -Wthread-safety \
    -Wthread-safety-beta -Werror -I"$root" -I"$build/proto/gen" -I"$build/generated" \
    -isystem /usr/include/eigen3 \
    $(pkg-config --cflags libpqxx cpp-httplib 2>/dev/null) {}
echo "thread_safety: ${#sources[@]} file(s) checked, no finding"
