#!/usr/bin/env bash
# The cost of authentication and metrics on single-row Predict: the same
# hierarchical PPCA model (K = 1,000, d = 640) served by dendrod without
# them and with --auth_keys + --metrics_listen (a scraper reading /metrics
# every second), measured alternately A B A B so drift hits both alike.
#
#   tests/bench/auth_metrics_overhead.sh BUILD_DIR [REQUESTS]
# Prints one JSON line per run (predict_latency's output plus the config).
set -euo pipefail
build=$(realpath "${1:?usage: auth_metrics_overhead.sh BUILD_DIR [REQUESTS]}")
requests=${2:-3000}
work=$(mktemp -d "${TMPDIR:-/tmp}/dendro-authbench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
key=bench-key-0123456789abcdef
printf '%s\n' "$key" | "$build/client/dendro" keys hash bench reader >"$work/keys"
mport=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

serve() {  # serve plain|secured
  rm -f "$work/port"
  local extra=()
  if [[ $1 == secured ]]; then
    extra=(--auth_keys "$work/keys" --metrics_listen "127.0.0.1:$mport")
  fi
  "$build/server/dendrod" --listen 127.0.0.1:0 --data_dir "$work/data" \
    --port_file "$work/port" --log_level warn "${extra[@]}" >>"$work/dendrod.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do [[ -s $work/port ]] && break; sleep 0.1; done
  port=$(cat "$work/port")
}
stop() { kill "${pids[-1]}"; wait "${pids[-1]}" || true; unset 'pids[-1]'; }

# Train once on a plain server (the model is reused by every run).
serve plain
"$build/tests/bench/predict_latency" --server "127.0.0.1:$port" --model bench \
  --requests 10 --warmup 10 >/dev/null
stop
for round in 1 2; do
  for config in plain secured; do
    serve "$config"
    scraper=""
    if [[ $config == secured ]]; then
      # A scraper, as Prometheus would be: one GET /metrics a second.
      ( while sleep 1; do
          { exec 3<>"/dev/tcp/127.0.0.1/$mport" &&
            printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3 >/dev/null; } 2>/dev/null || true
        done ) &
      scraper=$!
      export DENDRO_API_KEY=$key
    else
      unset DENDRO_API_KEY
    fi
    out=$("$build/tests/bench/predict_latency" --server "127.0.0.1:$port" --model bench \
      --requests "$requests" --warmup 300)
    [[ -n $scraper ]] && kill "$scraper" && wait "$scraper" 2>/dev/null || true
    echo "{\"round\": $round, \"config\": \"$config\", \"result\": $out}"
    stop
  done
done
