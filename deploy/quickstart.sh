#!/usr/bin/env bash
# From a fresh Debian 12 machine to a first hierarchy:
#   1. installs the Debian packages (deploy/install-deps.sh),
#   2. builds dendrod and dendro (deploy/build.sh),
#   3. starts dendrod on 127.0.0.1:50051 with data in ./dendro-data,
#   4. runs L2H on the bundled example logits and prints the result.
# The server keeps running afterwards; stop it with: kill "$(cat dendro-data/dendrod.pid)"
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash deploy/install-deps.sh
DENDRO_TESTS=OFF bash deploy/build.sh
bin="$root/build"
export DENDRO_SERVER="${DENDRO_SERVER:-127.0.0.1:50051}"
data="$root/dendro-data"
mkdir -p "$data" out

if [ -f "$data/dendrod.pid" ] && kill -0 "$(cat "$data/dendrod.pid")" 2>/dev/null; then
  echo "dendrod already running (pid $(cat "$data/dendrod.pid"))"
else
  "$bin/server/dendrod" --listen "$DENDRO_SERVER" --data_dir "$data" \
      >"$data/dendrod.log" 2>&1 &
  echo $! > "$data/dendrod.pid"
  for _ in $(seq 1 100); do
    "$bin/client/dendro" models list >/dev/null 2>&1 && break
    sleep 0.1
  done
  echo "dendrod started (pid $(cat "$data/dendrod.pid"), log $data/dendrod.log)"
fi

echo "== dendro l2h tests/data/example_logits.npy (4,000 points, 20 clusters)"
"$bin/client/dendro" l2h tests/data/example_logits.npy --labels tests/data/example_labels.npy \
  --name example --out out/example.json --out out/example.nwk --out out/example_linkage.npy
echo "== Newick tree (out/example.nwk)"
cat out/example.nwk; echo
echo "== 4 super-clusters of the training points (dendro assign --level 4)"
"$bin/client/dendro" assign --model example tests/data/example_logits.npy --level 4 \
  --out out/example_level4.npy
echo "wrote out/example.json, out/example.nwk, out/example_linkage.npy, out/example_level4.npy"
