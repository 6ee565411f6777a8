#!/usr/bin/env bash
# routerd `incr` (full routed path, interval persistence) against
# redis-server INCR driven by redis-benchmark at the same connection count
# and pipeline depth, pipelined the same way (batches of the depth). Goal:
# throughput ratio >= 1.0 with a p99 no worse.
# redis-benchmark runs a request count, not a duration, so it is given the
# count routerd answered in DURATION: both runs then last about as long.
# Run by hand: bench/incr_vs_redis.sh (ROUNDS pairs, 3 by default; the
# median ratios are the result).
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
header "routerd incr vs redis-server INCR ($(redis-server --version | awk '{print $3}')), $ROUNDS rounds"

# No persistence in Redis: the comparison is against its in-memory INCR.
taskset -c "$SERVER_CPUS" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
  --save '' --appendonly no --daemonize no --logfile "$WORK/redis.log" &
PIDS+=($!)
wait_port "$REDIS_PORT"

p99_ratios=()
for round in $(seq 1 "$ROUNDS"); do
  # --batch: loadgen pipelines as redis-benchmark -P does (send the depth,
  # wait for every answer, send again), so both sides see the same load
  # and their latencies compare; keeping the depth in flight instead would
  # put more requests in flight and so more latency on routerd's side.
  loadgen_run "routerd-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --batch
  routerd_rps=$(json_number "$WORK/routerd-$round.json" throughput)
  routerd_p99=$(json_number "$WORK/routerd-$round.json" p99_us)
  duration_s=$(json_number "$WORK/routerd-$round.json" measured_s)
  requests=$(awk -v r="$routerd_rps" -v d="$duration_s" 'BEGIN { n = int(r * d); if (n < 100000) n = 100000; print n }')

  echo "-- redis-$round ($requests requests)"
  # Keys spread over as many counters as routerd has players (one per connection).
  taskset -c "$LOADGEN_CPUS" redis-benchmark -p "$REDIS_PORT" -c "$CONNECTIONS" -P "$PIPELINE" \
    -n "$requests" -r "$CONNECTIONS" -t incr --csv > "$WORK/redis-$round.csv"
  # CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  redis_line=$(grep -m1 '^"INCR"' "$WORK/redis-$round.csv")
  redis_rps=$(echo "$redis_line" | awk -F'","' '{print $2}')
  redis_p99_ms=$(echo "$redis_line" | awk -F'","' '{print $7}')
  redis_p99=$(awk -v ms="$redis_p99_ms" 'BEGIN { printf "%.1f", ms * 1000 }')

  RATIOS+=("$(ratio "$routerd_rps" "$redis_rps")")
  p99_ratios+=("$(ratio "$routerd_p99" "$redis_p99")")
  printf 'round %d: redis %10.0f req/s p99 %7.1f us | routerd %10.0f req/s p99 %7.1f us | ratio %s, p99 ratio %s\n' \
    "$round" "$redis_rps" "$redis_p99" "$routerd_rps" "$routerd_p99" "${RATIOS[-1]}" "${p99_ratios[-1]}"
done
echo "RATIO routerd/redis throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 1.0)"
echo "RATIO routerd/redis p99        = $(median "${p99_ratios[@]}") median of ${p99_ratios[*]}  (goal <= 1.0)"
