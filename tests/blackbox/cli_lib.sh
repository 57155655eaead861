# Shared by the CLI black-box scripts: argument handling, a scratch
# directory removed on exit, dendrod start-up on a free port, and helpers to
# run the CLI and check its error contract.
#
#   source cli_lib.sh DENDROD DENDRO
#
# Sets DENDROD, DENDRO (absolute), PY (Debian's python3), WORK (cwd after
# sourcing). Scripts that start extra servers add their pids to EXTRA_PIDS.
DENDROD=${1:?usage: SCRIPT DENDROD DENDRO}
DENDRO=${2:?usage: SCRIPT DENDROD DENDRO}
PY=/usr/bin/python3
DENDROD=$(realpath "$DENDROD")
DENDRO=$(realpath "$DENDRO")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dendro-cli-test.XXXXXX")
SERVER_PID=""
EXTRA_PIDS=""
cleanup() {
  for pid in $SERVER_PID $EXTRA_PIDS; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for log in "$WORK"/*.log; do
    [[ -f "$log" ]] || continue
    echo "--- $(basename "$log") (tail) ---" >&2
    tail -20 "$log" >&2
  done
  exit 1
}
pass() { echo "ok: $*"; }

cd "$WORK"

# --- server --------------------------------------------------------------------
# start_server NAME [FLAGS...]: starts dendrod with data dir and port file
# $WORK/NAME.*, sets STARTED_PID and STARTED_PORT.
start_server() {
  local name=$1
  shift
  "$DENDROD" --listen 127.0.0.1:0 --data_dir "$WORK/$name.data" --port_file "$WORK/$name.port" \
    "$@" >"$WORK/$name.log" 2>&1 &
  STARTED_PID=$!
  for _ in $(seq 1 300); do
    [[ -s "$WORK/$name.port" ]] && break
    kill -0 "$STARTED_PID" 2>/dev/null || fail "dendrod ($name) exited during startup"
    sleep 0.1
  done
  [[ -s "$WORK/$name.port" ]] || fail "dendrod ($name) wrote no port file within 30 s"
  STARTED_PORT=$(tr -d '[:space:]' <"$WORK/$name.port")
}

# start_main_server: the server the CLI talks to by default (DENDRO_SERVER).
start_main_server() {
  start_server server
  SERVER_PID=$STARTED_PID
  export DENDRO_SERVER="127.0.0.1:$STARTED_PORT"
  pass "dendrod listening on $DENDRO_SERVER"
}

# Runs the CLI; leaves exit code in RC, stdout in out.txt, stderr in err.txt.
run() {
  set +e
  "$DENDRO" "$@" >out.txt 2>err.txt
  RC=$?
  set -e
}

# expect_error WANT_RC PATTERN ARGS...: the command fails with exit WANT_RC
# ("any": non-zero) and one stderr line "dendro: ..." matching PATTERN.
expect_error() {  # expect_error WANT_RC GREP_PATTERN ARGS...
  local want=$1 pattern=$2
  shift 2
  run "$@"
  [[ $RC -ne 0 ]] || fail "'dendro $*' succeeded, expected an error"
  [[ $want == any || $RC -eq $want ]] || fail "'dendro $*' exited $RC, expected $want"
  [[ $(wc -l <err.txt) -eq 1 ]] || fail "'dendro $*' wrote $(wc -l <err.txt) stderr lines: $(cat err.txt)"
  grep -q '^dendro: ' err.txt || fail "'dendro $*' stderr does not start with 'dendro: ': $(cat err.txt)"
  grep -Eqi -- "$pattern" err.txt || fail "'dendro $*' stderr lacks /$pattern/: $(cat err.txt)"
}
