# Helpers of the TLS and WebSocket bench scripts (sourced after common.sh):
# a test certificate made at run time (never committed), and one routerd
# node serving plain TCP, TLS and WebSocket listeners at once, so each
# comparison is the same node through one client (loadgen).

PLAIN_PORT=${PLAIN_PORT:-17510}
TLS_PORT=${TLS_PORT:-17511}
WS_PORT=${WS_PORT:-17512}
# The benchmarks' own throwaway secret (the node listens on loopback only).
EDGE_SECRET=edge-bench-secret

# make_cert: a self-signed P-256 certificate for localhost in $WORK
# (cert.pem, key.pem), not a CA (webpki refuses a CA as the end entity).
make_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
}

# start_edge_node [WEBSOCKET_TLS]: one node on CPU(s) $SERVER_CPUS with the
# three listeners; WEBSOCKET_TLS=true makes the WebSocket one wss.
start_edge_node() {
  local websocket_tls=${1:-false}
  cat >"$WORK/node.toml" <<TOML
[node]
id = 1
[cores]
cpus = [${SERVER_CPUS}]
[gateway]
listen = "127.0.0.1:$PLAIN_PORT"
tls_listen = "127.0.0.1:$TLS_PORT"
tls_cert_file = "$WORK/cert.pem"
tls_key_file = "$WORK/key.pem"
websocket_listen = "127.0.0.1:$WS_PORT"
websocket_tls = $websocket_tls
[admin]
listen = "127.0.0.1:0"
[cluster]
listen = "127.0.0.1:0"
[store]
backend = "memory"
[auth]
secret = "$EDGE_SECRET"
TOML
  ROUTERD_AUTH_SECRET=$EDGE_SECRET "$ROUTERD" serve --config "$WORK/node.toml" 2>>"$WORK/node.log" &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
  wait_port "$PLAIN_PORT"
  wait_port "$TLS_PORT"
  wait_port "$WS_PORT"
}

stop_edge_node() {
  stop_started "$NODE_PID" "$PLAIN_PORT"
}

# edge_begin TITLE: what the edge-versus-plain scripts do first: build,
# print the header, make the certificate.
edge_begin() {
  SUMMARY=()
  build
  header "$1"
  make_cert
}

# edge_summary WHAT: the summary lines edge_shape gathered.
edge_summary() {
  echo
  echo "== summary ($1, median of $ROUNDS rounds)"
  printf '%s\n' "${SUMMARY[@]}"
}

# edge_shape NAME PIPELINE GOAL SUBJECT_ARGS...: ROUNDS alternating pairs
# of plain TCP and the subject (SUBJECT_ARGS: the subject's --addr and
# layer flags) at PIPELINE, routed player.incr; prints the median ratio.
edge_shape() {
  local name=$1 pipeline=$2 goal=$3
  shift 3
  RATIOS=()
  P99_RATIOS=()
  for round in $(seq 1 "$ROUNDS"); do
    PIPELINE=$pipeline loadgen_run "plain-$name-$round" --addr "127.0.0.1:$PLAIN_PORT" \
      --workload incr --secret "$EDGE_SECRET"
    PIPELINE=$pipeline loadgen_run "$name-$round" "$@" --workload incr --secret "$EDGE_SECRET"
    paired_round "$round" "plain-$name" "$name"
  done
  SUMMARY+=("RATIO $name/plain throughput = $(median "${RATIOS[@]}") (${RATIOS[*]}); p99 $(median "${P99_RATIOS[@]}")  ($goal)")
  echo "${SUMMARY[-1]}"
}
