#!/usr/bin/env bash
# routerd `player.incr` over TLS (gateway.tls_listen) against Redis INCR
# over TLS (Debian's redis-server with --tls-port), the same certificate,
# through one client (loadgen --tls, --proto resp for Redis), 16
# connections at pipeline 1 and at pipeline 16 in batches. Goals (issue
# 27): >= 1.0x Redis at pipeline 1, >= 1.2x at pipeline 16, p99 no worse.
# Run by hand: bench/tls_vs_redis.sh (ROUNDS alternating pairs per shape,
# 3 by default; the median ratios are the result).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/redis_common.sh"
source "$(dirname "$0")/edge_common.sh"

REDIS_TLS_PORT=${REDIS_TLS_PORT:-17380}
ensure_redis
build
redis_header "routerd player.incr over TLS vs Redis INCR over TLS, one client (loadgen --tls) for both" \
  "one core, one node for the whole run" \
  "p1 = $SMALL_CONNECTIONS connections x pipeline 1; p16 = $SMALL_CONNECTIONS x 16 in batches, both over TLS with one certificate"
make_cert
start_background redis "$REDIS_TLS_PORT" taskset -c "$SERVER_CPUS" redis-server --port 0 \
  --tls-port "$REDIS_TLS_PORT" --bind 127.0.0.1 --tls-cert-file "$WORK/cert.pem" \
  --tls-key-file "$WORK/key.pem" --tls-auth-clients no --save '' --appendonly no \
  --daemonize no --logfile "$WORK/redis.log"
start_edge_node

tls_pair() {
  local shape=$1 pipeline=$2 goals=$3
  shift 3
  RATIOS=()
  P99_RATIOS=()
  local round side first second
  for round in $(seq 1 "$ROUNDS"); do
    # Alternate who goes first, so a drift of the machine does not always
    # favour the same side.
    if [ $((round % 2)) -eq 1 ]; then first=redis; second=routerd; else first=routerd; second=redis; fi
    for side in $first $second; do
      if [ "$side" = redis ]; then
        CONNECTIONS=$SMALL_CONNECTIONS PIPELINE=$pipeline loadgen_run "redis-$shape-$round" \
          --proto resp --addr "127.0.0.1:$REDIS_TLS_PORT" --tls --ca-file "$WORK/cert.pem" --workload incr "$@"
      else
        CONNECTIONS=$SMALL_CONNECTIONS PIPELINE=$pipeline loadgen_run "routerd-$shape-$round" \
          --addr "127.0.0.1:$TLS_PORT" --tls --ca-file "$WORK/cert.pem" --workload incr \
          --secret "$EDGE_SECRET" "$@"
      fi
    done
    paired_round "$round" "redis-$shape" "routerd-$shape"
  done
  SUMMARY+=("RATIO $shape routerd/redis over TLS throughput = $(median "${RATIOS[@]}"), p99 = $(median "${P99_RATIOS[@]}") ($goals); rounds ${RATIOS[*]}")
  echo "${SUMMARY[-1]}"
}
tls_pair p1 1 "goals >= 1.0, p99 <= 1.0"
tls_pair p16 16 "goals >= 1.2, p99 <= 1.0" --batch
echo
echo "== summary (routerd / Redis over TLS, median of $ROUNDS rounds)"
printf '%s\n' "${SUMMARY[@]}"
