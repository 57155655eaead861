#!/usr/bin/env bash
# Builds the Dockerfile with buildah and checks the image runs: dendrod
# starts with API keys and a health port, the image's own `dendro` passes
# the health check, is refused without a key and served with one, and
# every shared library of both binaries resolves.
#
#   sudo bash deploy/test-image.sh
#
# Installs what it needs (deploy/image-packages.txt: buildah, podman,
# debootstrap) when missing. With no docker daemon, the debian:12 base image is made
# with debootstrap from the machine's own Debian mirror and imported into
# podman's store; buildah builds with chroot isolation and the container
# shares the host network.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image=${IMAGE:-dendro:test}
work=$(mktemp -d "${TMPDIR:-/tmp}/dendro-image.XXXXXX")
ctr=""
server_pid=""
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null || true
  [[ -n $ctr ]] && buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [[ -f $work/dendrod.log ]] && tail -20 "$work/dendrod.log" >&2; exit 1; }

# --- tools -----------------------------------------------------------------
bash "$root/deploy/install-deps.sh" "$root/deploy/image-packages.txt" >"$work/apt.log" 2>&1 ||
  { tail -20 "$work/apt.log"; fail "installing deploy/image-packages.txt"; }

# --- base image ------------------------------------------------------------
if ! podman image exists docker.io/library/debian:12; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
           true)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "making debian:12 with debootstrap from $mirror"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
  tar -C "$work/rootfs" -c . | podman import - docker.io/library/debian:12 >/dev/null
  rm -rf "$work/rootfs"
fi

# --- build -----------------------------------------------------------------
start=$(date +%s)
buildah bud --isolation chroot --layers=false -t "$image" "$root" >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; fail "buildah bud"; }
echo "image built in $(( $(date +%s) - start )) s"

# --- run -------------------------------------------------------------------
ctr=$(buildah from "$image")
in_ctr() { buildah run --isolation chroot "$ctr" -- "$@"; }
for bin in dendrod dendro; do
  missing=$(in_ctr sh -c "ldd /usr/local/bin/$bin | grep 'not found' || true")
  [[ -z $missing ]] || fail "$bin in the image lacks libraries: $missing"
done
in_ctr dendrod --version | grep -q '^dendrod ' || fail "dendrod --version"

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
hport=$(free_port)
key=$(in_ctr dendro keys new ci writer | head -1)
line=$(printf '%s\n' "$key" | in_ctr dendro keys hash ci writer)
in_ctr sh -c "mkdir -p /tmp/keys && echo '$line' > /tmp/keys/keys"
# As the image's ENTRYPOINT + CMD do, on free ports (the host network is shared).
buildah run --isolation chroot "$ctr" -- dendrod --listen "0.0.0.0:$port" \
  --data_dir /tmp/dendro-data --health_listen "127.0.0.1:$hport" \
  --auth_keys /tmp/keys/keys >"$work/dendrod.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  in_ctr dendro --server "127.0.0.1:$hport" health >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || fail "dendrod exited in the container"
  sleep 0.3
done
[[ $(in_ctr dendro --server "127.0.0.1:$hport" health) == SERVING ]] || fail "health check"
if in_ctr dendro --server "127.0.0.1:$port" models list >/dev/null 2>&1; then
  fail "the image served a call without a key"
fi
in_ctr env DENDRO_API_KEY="$key" dendro --server "127.0.0.1:$port" models list >/dev/null ||
  fail "the image refused its own key"
echo "ok: image $image runs (health, keys, libraries)"
