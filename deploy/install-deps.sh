#!/usr/bin/env bash
# Installs the Debian 12 packages listed in deploy/packages.txt.
# Idempotent: packages already present are skipped. Needs root (or sudo).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
#   install-deps.sh [LIST] [--no-tests]
# --no-tests stops at the list's "# tests and benchmarks" line (image builds).
list="${1:-$here/packages.txt}"
if [[ "${2:-}" == "--no-tests" ]]; then
  mapfile -t pkgs < <(sed '/^# tests and benchmarks/,$d' "$list" | grep -v '^\s*#' | grep -v '^\s*$')
else
  mapfile -t pkgs < <(grep -v '^\s*#' "$list" | grep -v '^\s*$')
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (apt-get needs it)" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
