#!/usr/bin/env bash
# The `dendro` CLI against a dendrod with API keys: keys files made by
# `dendro keys`, keys from DENDRO_API_KEY or --api-key-file, readable
# refusals carrying the server's request id, and `dendro health` (open).
#
# Only the client side is covered here. The end-to-end role checks (which
# RPC each of reader/writer/admin may call, certificates' roles, reloads)
# live with the server tests: auth_test.py and tests/server.
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
[[ $newkey =~ ^[A-Za-z0-9_-]{43}$ ]] || fail "keys new: not 32 bytes of URL-safe base64: $newkey"
"$DENDRO" keys new ci writer >new2.txt
[[ $(head -1 new2.txt) != "$newkey" ]] || fail "keys new made the same key twice"
# A CRLF line end and trailing blanks are not part of the key.
[[ $(printf '%s \r\n' "$key" | "$DENDRO" keys hash alice reader) == "$want" ]] ||
  fail "keys hash kept the line end in the key"
expect_error 2 "reader, writer, importer or admin" keys hash bob root </dev/null
expect_error 2 "one word" keys hash 'bob smith' reader </dev/null
printf 'short\n' >short.txt
expect_error 1 "at least 16" keys hash bob reader <short.txt
expect_error 1 "no key on stdin" keys hash bob reader </dev/null
printf 'two words in one key\n' >spaced.txt
expect_error 1 "whitespace" keys hash bob reader <spaced.txt
"$DENDRO" keys --help | grep -q "hash" || fail "'dendro keys --help' does not list hash"
pass "keys hash / keys new"

# --- keys new --append, certs new ---------------------------------------------------
(umask 022 && "$DENDRO" keys new etl writer --append appended.keys >etl.key 2>etl.err)
[[ $(wc -l <etl.key) -eq 1 ]] || fail "keys new --append printed more than the key"
[[ $(stat -c %a appended.keys) == 600 ]] || fail "a new keys file is $(stat -c %a appended.keys)"
[[ $(cat appended.keys) == "$(printf %s "$(cat etl.key)" | sha256sum | cut -d' ' -f1)  etl  writer" ]] ||
  fail "keys new --append wrote: $(cat appended.keys)"
grep -q "SIGHUP" etl.err || fail "keys new --append does not say how to load the key"
chmod 640 appended.keys
printf '%s\n' "$key" | "$DENDRO" keys hash alice reader --append appended.keys 2>/dev/null
[[ $(wc -l <appended.keys) -eq 2 && $(stat -c %a appended.keys) == 640 ]] ||
  fail "a second --append did not add a line keeping the file's mode"
expect_error 1 "one role" keys new etl admin --append appended.keys
printf '%s\n' "$key" >same.txt
expect_error 1 "already holds this key" keys hash alice reader --append appended.keys <same.txt
[[ $(wc -l <appended.keys) -eq 2 ]] || fail "a refused --append changed the file"
"$DENDRO" certs new --ca-dir pki --host db.example --host 10.1.2.3 --client etl >certs.out
for f in ca.pem ca.key server.pem server.key etl.pem etl.key; do
  [[ -s pki/$f ]] || fail "certs new did not write pki/$f"
done
for f in ca.key server.key etl.key; do
  [[ $(stat -c %a pki/$f) == 600 ]] || fail "pki/$f is mode $(stat -c %a pki/$f)"
done
grep -q "cn:etl  etl  ROLE" certs.out || fail "certs new does not print the client's keys line"
ca_before=$(sha256sum <pki/ca.pem)
"$DENDRO" certs new --ca-dir pki --client ops --role admin --append appended.keys >/dev/null
[[ $(sha256sum <pki/ca.pem) == "$ca_before" ]] || fail "certs new replaced an existing CA"
[[ $(tail -1 appended.keys) == "cn:ops  ops  admin" ]] || fail "certs new --append: $(tail -1 appended.keys)"
if command -v openssl >/dev/null; then
  openssl verify -CAfile pki/ca.pem pki/server.pem pki/etl.pem pki/ops.pem >/dev/null ||
    fail "the certificates do not chain to the CA"
  openssl x509 -in pki/server.pem -noout -ext subjectAltName | grep -q "DNS:db.example, IP Address:10.1.2.3" ||
    fail "the server certificate's SANs: $(openssl x509 -in pki/server.pem -noout -ext subjectAltName)"
fi
expect_error 1 "already exist" certs new --ca-dir pki --host db.example
expect_error 2 "--ca-dir" certs new --host x
expect_error 2 "--append needs --role" certs new --ca-dir pki --client y --append appended.keys
expect_error 2 "client name" certs new --ca-dir pki --client ../evil
rm pki/ca.key
expect_error 1 "ca.pem but not ca.key" certs new --ca-dir pki --client z
pass "keys new --append, certs new"

# --- client-side checks (no server needed) ---------------------------------------------
"$DENDRO" --help | grep -q DENDRO_API_KEY || fail "--help does not mention DENDRO_API_KEY"
"$DENDRO" --help | grep -q -- --api-key-file || fail "--help does not mention --api-key-file"
expect_error 1 "cannot read the API key file" --api-key-file missing.key models list
: >empty.key
expect_error 1 "holds no key" --api-key-file empty.key models list
# The key file is read only when a verb talks to the server.
printf '%s\n' "$key" | "$DENDRO" --api-key-file missing.key keys hash alice reader >/dev/null ||
  fail "an offline verb failed on an unreadable --api-key-file"
DENDRO_API_KEY='two words' expect_error 1 "whitespace or non-printable" models list
expect_error 2 "--tls-cert and --tls-key" --tls-cert nothing.pem models list
expect_error 1 "client certificate" --tls-cert nothing.pem --tls-key nothing.key models list
pass "key and certificate options are checked before anything is sent"

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
printf '%s\r\n# a comment line is not read\n' "$(cat writer.key)" >writer-crlf.key
run datasets list --api-key-file=writer-crlf.key
[[ $RC -eq 0 ]] || fail "a key file with CRLF line ends was refused: $(cat err.txt)"
DENDRO_API_KEY=$key expect_error 1 "permission denied: .*admin" models delete nothing
DENDRO_API_KEY=wrong-key-wrong-key expect_error 1 "unknown API key" models list
grep -q "$key" "$WORK/auth.log" && fail "the server log holds a key"
pass "keys from the environment and from a file; refusals say what to do"

# --- TLS mismatches are named -------------------------------------------------------
command -v openssl >/dev/null || { echo "SKIP TLS mismatch checks: openssl is not installed"; exit 0; }
openssl req -x509 -newkey rsa:2048 -nodes -keyout tls.key -out tls.pem -days 1 \
  -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
start_server tls --tls_cert "$WORK/tls.pem" --tls_key "$WORK/tls.key"
TLS_PID=$STARTED_PID
tls_server="127.0.0.1:$STARTED_PORT"
expect_error 1 "expects TLS but this client connected in plaintext.*--tls" \
  --server "$tls_server" --timeout 10 models list
expect_error 1 "not signed by a trusted CA.*--tls-ca" --server "$tls_server" --tls --timeout 10 models list
run --server "$tls_server" --tls-ca tls.pem models list
[[ $RC -eq 0 ]] || fail "--tls-ca with the server's certificate was refused: $(cat err.txt)"
kill "$TLS_PID"
start_server plain
PLAIN_PID=$STARTED_PID
expect_error 1 "does not speak TLS" --server "127.0.0.1:$STARTED_PORT" --tls-ca tls.pem \
  --timeout 10 models list
kill "$PLAIN_PID"
# A transport error names the address and never an RPC.
run --server "127.0.0.1:1" --timeout 5 models list
grep -q "ListModels" err.txt && fail "an error names the RPC: $(cat err.txt)"
grep -q "cannot reach dendrod at 127.0.0.1:1" err.txt || fail "unexpected: $(cat err.txt)"
pass "plaintext vs TLS mismatches and untrusted certificates are named"
