#!/usr/bin/env bash
# The `dendro` CLI against a dendrod with API keys: keys files made by
# `dendro keys`, keys from DENDRO_API_KEY or --api-key-file, readable
# refusals carrying the server's request id, and `dendro health` (open).
# The per-RPC role matrix is tested in auth_test.py.
#
#   cli_auth_test.sh PATH/TO/dendrod PATH/TO/dendro
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh" "$@"

# --- keys hash / keys new ---------------------------------------------------------
key=reader-key-for-the-cli-test
line=$(printf '%s\n' "$key" | "$DENDRO" keys hash alice reader)
want="$(printf %s "$key" | sha256sum | cut -d' ' -f1)  alice  reader"
[[ $line == "$want" ]] || fail "keys hash printed '$line', expected '$want'"
"$DENDRO" keys new ci writer >new.txt
[[ $(wc -l <new.txt) -eq 2 ]] || fail "keys new printed $(wc -l <new.txt) lines"
newkey=$(head -1 new.txt)
[[ $(tail -1 new.txt) == "$(printf %s "$newkey" | sha256sum | cut -d' ' -f1)  ci  writer" ]] ||
  fail "keys new: the line does not hash the key: $(cat new.txt)"
[[ ${#newkey} -ge 40 ]] || fail "keys new made a short key: $newkey"
run keys hash bob root </dev/null
[[ $RC -eq 2 && $(wc -l <err.txt) -eq 1 ]] || fail "bad role: exit $RC, $(cat err.txt)"
printf 'short\n' >short.txt
run keys hash bob reader <short.txt
[[ $RC -eq 1 ]] && grep -q "at least 16" err.txt || fail "short key: exit $RC, $(cat err.txt)"
pass "keys hash / keys new"

# --- a server with keys -------------------------------------------------------------
{ echo "$line"; tail -1 new.txt; } >keys
start_server auth --auth_keys "$WORK/keys"
SERVER_PID=$STARTED_PID
export DENDRO_SERVER="127.0.0.1:$STARTED_PORT"

run health
[[ $RC -eq 0 && $(cat out.txt) == SERVING ]] || fail "health without a key: $RC $(cat err.txt)"
expect_error 1 "needs a valid API key.*request [0-9a-f]{16}" models list
DENDRO_API_KEY=$key run models list
[[ $RC -eq 0 ]] || fail "reader key from DENDRO_API_KEY refused: $(cat err.txt)"
head -1 new.txt >writer.key
run --api-key-file writer.key datasets list
[[ $RC -eq 0 ]] || fail "writer key from --api-key-file refused: $(cat err.txt)"
DENDRO_API_KEY=$key expect_error 1 "permission denied: .*admin" models delete nothing
DENDRO_API_KEY=wrong-key-wrong-key expect_error 1 "unknown API key" models list
expect_error 1 "cannot read the API key file" --api-key-file missing.key models list
grep -q "$key" "$WORK/auth.log" && fail "the server log holds a key"
"$DENDRO" --help | grep -q DENDRO_API_KEY || fail "--help does not mention DENDRO_API_KEY"
pass "keys from the environment and from a file; refusals say what to do"
