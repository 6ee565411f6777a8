#!/usr/bin/env bash
# Full TLS handshakes per second on one core: routerd's TLS gateway
# (gateway.tls_listen) against nginx terminating TLS on one core (one
# worker, pinned; Debian's nginx with its `stream` module and `ssl`), the
# same certificate for both, both driven by `openssl s_time` (the one
# client) on the other CPU. Then resumption the same way (`s_time -reuse`,
# TLS 1.2: a session id or ticket). Goal: >= 1.0x nginx, for
# full handshakes and for resumption.
#
# TLS 1.3 resumption cannot be measured with s_time: a TLS 1.3 ticket comes
# after the handshake, and s_time (without -www, which speaks HTTP) reads
# nothing, so it never holds one and every `-reuse -tls1_3` connection is a
# full handshake (its progress line shows '*', not 'r'). Each run's count
# of resumed connections is printed, and a resumption shape whose runs did
# not resume fails the script. tests/gateway_tls.rs asserts that TLS 1.3
# resumption works, with Python's ssl client.
#
# The certificate is RSA 2048 by default (CERT_KEY=ec for P-256): an RSA
# signature costs the server far more than its check costs the client, so
# one s_time process can keep one server core busy and the figure is the
# server's; with P-256 the client's check costs more than the server's
# signature and the figure would be s_time's own.
#
# Each s_time run is timed by the wall clock here (s_time's own "real
# seconds" are whole seconds); handshakes/s = connections / seconds.
# Run by hand: bench/handshakes_vs_nginx.sh (SECONDS_PER_RUN=10 and
# ROUNDS=3 by default: alternating pairs, the median ratio is the result;
# BUILD=0 runs the release binary already built).
set -euo pipefail
source "$(dirname "$0")/common.sh"

SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CERT_KEY=${CERT_KEY:-rsa}
ROUTERD_TLS_PORT=${ROUTERD_TLS_PORT:-17521}
NGINX_PORT=${NGINX_PORT:-17522}
NGINX_STREAM_MODULE=/usr/lib/nginx/modules/ngx_stream_module.so

ensure_nginx() {
  if ! command -v nginx >/dev/null || [ ! -f "$NGINX_STREAM_MODULE" ]; then
    echo "installing nginx and its stream module from Debian's packages"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      nginx libnginx-mod-stream
  fi
  # Where Debian's package starts a system nginx (port 80), it is left
  # alone: this script runs its own, on its own port and CPU.
}

make_handshake_cert() {
  local key
  if [ "$CERT_KEY" = ec ]; then key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)
  else key=(-newkey rsa:2048); fi
  openssl req -x509 "${key[@]}" -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
}

# cpu_mask CPU: nginx's worker_cpu_affinity bit mask of one CPU.
cpu_mask() {
  local cpu=$1 mask="1"
  for _ in $(seq 1 "$cpu"); do mask="${mask}0"; done
  echo "$mask"
}

start_nginx() {
  local cpu=${SERVER_CPUS%%,*}
  cat >"$WORK/nginx.conf" <<CONF
load_module $NGINX_STREAM_MODULE;
daemon off;
worker_processes 1;
worker_cpu_affinity $(cpu_mask "$cpu");
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
stream {
  ssl_certificate $WORK/cert.pem;
  ssl_certificate_key $WORK/key.pem;
  ssl_protocols TLSv1.2 TLSv1.3;
  # Resumption as routerd serves it: session ids (a cache) and tickets.
  ssl_session_cache shared:bench:10m;
  ssl_session_tickets on;
  server {
    listen 127.0.0.1:$NGINX_PORT ssl;
    return "";
  }
}
CONF
  start_background nginx "$NGINX_PORT" taskset -c "$cpu" nginx -e "$WORK/nginx-error.log" \
    -p "$WORK" -c "$WORK/nginx.conf"
  NGINX_PID=$STARTED_PID
}

start_handshake_node() {
  cat >"$WORK/node.toml" <<TOML
[node]
id = 1
[cores]
cpus = [${SERVER_CPUS%%,*}]
[gateway]
listen = "127.0.0.1:0"
tls_listen = "127.0.0.1:$ROUTERD_TLS_PORT"
tls_cert_file = "$WORK/cert.pem"
tls_key_file = "$WORK/key.pem"
[admin]
listen = "127.0.0.1:0"
[cluster]
listen = "127.0.0.1:0"
[store]
backend = "memory"
TOML
  start_routerd node "$WORK/node.toml" "$ROUTERD_TLS_PORT"
}

# s_time_run NAME PORT ARGS...: one timed s_time run, pinned to the client
# CPU; prints "handshakes/s reused-connections".
s_time_run() {
  local name=$1 port=$2
  shift 2
  local start end connections reused
  start=$(date +%s.%N)
  taskset -c "$LOADGEN_CPUS" openssl s_time -connect "127.0.0.1:$port" -time "$SECONDS_PER_RUN" \
    "$@" >"$WORK/$name.out" 2>&1 || true
  end=$(date +%s.%N)
  connections=$(grep -m1 -oE '^[0-9]+ connections in [0-9.]+s' "$WORK/$name.out" | awk '{print $1}')
  # s_time prints one character per connection: '*' new, 'r' reused.
  reused=$(grep -E '^[*r]+$' "$WORK/$name.out" | tr -cd 'r' | wc -c || true)
  if [ -z "$connections" ]; then
    echo "s_time failed against $name:" >&2
    cat "$WORK/$name.out" >&2
    exit 1
  fi
  awk -v n="$connections" -v a="$start" -v b="$end" -v r="$reused" 'BEGIN { printf "%.1f %d\n", n / (b - a), r }'
}

# handshake_shape SHAPE GOAL S_TIME_ARGS...: ROUNDS alternating pairs of
# nginx and routerd; the median ratio routerd/nginx.
handshake_shape() {
  local shape=$1 goal=$2
  shift 2
  local round first second side figures rps reused nginx_rps routerd_rps
  RATIOS=()
  for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then first=nginx; second=routerd; else first=routerd; second=nginx; fi
    for side in $first $second; do
      if [ "$side" = nginx ]; then port=$NGINX_PORT; else port=$ROUTERD_TLS_PORT; fi
      figures=$(s_time_run "$side-$shape-$round" "$port" "$@")
      rps=${figures% *}
      reused=${figures#* }
      if [ "$side" = nginx ]; then nginx_rps=$rps; else routerd_rps=$rps; fi
      echo "  $side $shape round $round: $rps handshakes/s ($reused connections resumed)"
      if [[ " $* " == *" -reuse "* && "$reused" -eq 0 ]]; then
        echo "$side resumed no session in $shape: the figure would be of full handshakes" >&2
        exit 1
      fi
    done
    RATIOS+=("$(ratio "$routerd_rps" "$nginx_rps")")
    echo "round $round: nginx $nginx_rps | routerd $routerd_rps | ratio ${RATIOS[-1]}"
  done
  SUMMARY+=("RATIO $shape routerd/nginx handshakes/s = $(median "${RATIOS[@]}") ($goal); rounds ${RATIOS[*]}")
  echo "${SUMMARY[-1]}"
}

SUMMARY=()
ensure_nginx
build
echo "== TLS handshakes per second on one core: routerd vs nginx (stream, ssl), one client (openssl s_time)"
echo "routerd: $ROUTERD ($("$ROUTERD" --version 2>/dev/null || echo "not built")); $(nginx -v 2>&1); $(openssl version)"
echo "machine: $(nproc) CPUs ($(uname -m), $(uname -r)); servers on CPU ${SERVER_CPUS%%,*}, s_time on CPU $LOADGEN_CPUS"
echo "certificate: $CERT_KEY; $SECONDS_PER_RUN s per run, $ROUNDS rounds per shape"
echo "WARNING: absolute figures drift on a shared 2-core machine; the ratio measured in this run is the result."
make_handshake_cert
start_nginx
start_handshake_node
handshake_shape full-tls13 "goal >= 1.0" -new -tls1_3
handshake_shape full-tls12 "no goal" -new -tls1_2
handshake_shape resumed-tls12 "goal >= 1.0" -reuse -tls1_2
echo
echo "== summary (routerd / nginx, median of $ROUNDS rounds)"
printf '%s\n' "${SUMMARY[@]}"
