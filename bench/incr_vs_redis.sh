#!/usr/bin/env bash
# routerd `incr` (full routed path, interval persistence) against
# redis-server INCR driven by redis-benchmark at the same connection count
# and pipeline depth. Goal: throughput ratio >= 1.0 with a p99 no worse.
# redis-benchmark runs a request count, not a duration, so it is given the
# count routerd answered in DURATION: both runs then last about as long.
# Run by hand: bench/incr_vs_redis.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"

REDIS_PORT=${REDIS_PORT:-17379}
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "installing redis-server from Debian's packages"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools
fi

build
header "routerd incr vs redis-server INCR ($(redis-server --version | awk '{print $3}'))"

loadgen_run routerd --spawn-node --node-cpus "$SERVER_CPUS" --workload incr
routerd_rps=$(json_number "$WORK/routerd.json" throughput)
routerd_p99=$(json_number "$WORK/routerd.json" p99_us)
duration_s=$(json_number "$WORK/routerd.json" measured_s)
requests=$(awk -v r="$routerd_rps" -v d="$duration_s" 'BEGIN { n = int(r * d); if (n < 100000) n = 100000; print n }')

# No persistence in Redis: the comparison is against its in-memory INCR.
taskset -c "$SERVER_CPUS" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
  --save '' --appendonly no --daemonize no --logfile "$WORK/redis.log" &
PIDS+=($!)
wait_port "$REDIS_PORT"
echo "-- redis ($requests requests)"
# Keys spread over as many counters as routerd has players (one per connection).
taskset -c "$LOADGEN_CPUS" redis-benchmark -p "$REDIS_PORT" -c "$CONNECTIONS" -P "$PIPELINE" \
  -n "$requests" -r "$CONNECTIONS" -t incr --csv > "$WORK/redis.csv"
# CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
redis_line=$(grep -m1 '^"INCR"' "$WORK/redis.csv")
redis_rps=$(echo "$redis_line" | awk -F'","' '{print $2}')
redis_p99_ms=$(echo "$redis_line" | awk -F'","' '{print $7}')
redis_p99=$(awk -v ms="$redis_p99_ms" 'BEGIN { printf "%.1f", ms * 1000 }')

echo
printf 'redis    %12.0f req/s  p99 %10.1f us\n' "$redis_rps" "$redis_p99"
printf 'routerd  %12.0f req/s  p99 %10.1f us\n' "$routerd_rps" "$routerd_p99"
echo "RATIO routerd/redis throughput = $(ratio "$routerd_rps" "$redis_rps")  (goal >= 1.0)"
echo "RATIO routerd/redis p99        = $(ratio "$routerd_p99" "$redis_p99")  (goal <= 1.0)"
