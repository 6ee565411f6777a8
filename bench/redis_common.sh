# Helpers of the scripts that compare routerd with Redis through one client
# (sourced after common.sh, not run). loadgen drives both servers, routerd
# over its own protocol and Redis over RESP2 (`--proto resp`), with the same
# connections, pipeline, pinning and duration, so the ratio compares the
# servers and not two clients.

REDIS_PORT=${REDIS_PORT:-17379}
# The shapes: a few busy clients, and many clients with one request each in
# flight (a game server's shape).
SMALL_CONNECTIONS=${SMALL_CONNECTIONS:-16}
MANY_CONNECTIONS=${MANY_CONNECTIONS:-1000}
# REDIS_BENCHMARK=1 also prints redis-benchmark's own figures per shape,
# labelled as another client; they take no part in any ratio.
REDIS_BENCHMARK=${REDIS_BENCHMARK:-0}

# 1000 connections need more descriptors than some shells allow.
ulimit -n 65536 2>/dev/null || true

ensure_redis() {
  if ! command -v redis-server >/dev/null \
    || { [ "$REDIS_BENCHMARK" = 1 ] && ! command -v redis-benchmark >/dev/null; }; then
    echo "installing redis-server from Debian's packages"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools
  fi
}

# One redis-server for the whole script, pinned like routerd, with no
# persistence: the comparison is against its in-memory commands.
start_redis() {
  start_background redis "$REDIS_PORT" taskset -c "$SERVER_CPUS" redis-server --port "$REDIS_PORT" \
    --bind 127.0.0.1 --save '' --appendonly no --daemonize no --logfile "$WORK/redis.log"
}

# redis_header TITLE [NODE] [SHAPES]: what the run compares; NODE says how
# routerd runs, SHAPES which shapes are measured (defaults: the shapes of
# compare_shape's scripts).
redis_header() {
  local node=${2:-one core, spawned per run}
  local shapes=${3:-"p1 = $SMALL_CONNECTIONS connections x pipeline 1; p16 = $SMALL_CONNECTIONS x 16 in batches (as redis-benchmark -P);
        c$MANY_CONNECTIONS = $MANY_CONNECTIONS connections x pipeline 1"}
  echo "== $1"
  echo "machine: $(nproc) CPUs ($(uname -m), $(uname -r)); server on CPU(s) $SERVER_CPUS, loadgen on CPU(s) $LOADGEN_CPUS"
  echo "servers: routerd $("$ROUTERD" --version 2>/dev/null | awk '{print $2}') ($ROUTERD; $node) and redis-server $(redis-server --version | awk '{print $3}'), both driven by loadgen"
  echo "shapes: $shapes; warm-up $WARMUP, $DURATION measured, $ROUNDS rounds each"
  echo "WARNING: absolute figures drift on a shared 2-core machine (other work, turbo, noisy neighbours);"
  echo "         the ratios measured in this run are the result."
}

SUMMARY=()

# compare_shape SHAPE CONNECTIONS PIPELINE "GOALS" "ROUTERD FLAGS" "REDIS FLAGS" [SHAPE FLAGS...]:
# ROUNDS pairs of one loadgen run against Redis and one against a fresh
# routerd node, in alternating order; prints each round, then the median
# ratios of throughput and p99 (routerd / Redis), and keeps them for the
# summary.
compare_shape() {
  local shape=$1 connections=$2 pipeline=$3 goals=$4 routerd_flags=$5 redis_flags=$6
  shift 6
  local round first second rounds_ratios
  RATIOS=()
  P99_RATIOS=()
  echo
  echo "== shape $shape: $connections connections x pipeline $pipeline $*"
  for round in $(seq 1 "$ROUNDS"); do
    # Alternate who goes first, so a drift of the machine does not always
    # favour the same side.
    if [ $((round % 2)) -eq 1 ]; then first=redis; second=routerd; else first=routerd; second=redis; fi
    for side in $first $second; do
      if [ "$side" = redis ]; then
        # shellcheck disable=SC2086 # flag strings split on purpose
        CONNECTIONS=$connections PIPELINE=$pipeline loadgen_run "redis-$shape-$round" \
          --proto resp --addr "127.0.0.1:$REDIS_PORT" $redis_flags "$@"
      else
        # shellcheck disable=SC2086
        CONNECTIONS=$connections PIPELINE=$pipeline loadgen_run "routerd-$shape-$round" \
          --spawn-node --node-cpus "$SERVER_CPUS" $routerd_flags "$@"
      fi
    done
    paired_round "$round" "redis-$shape" "routerd-$shape"
  done
  rounds_ratios="${RATIOS[*]}"
  local line
  line=$(printf 'RATIO %-6s routerd/redis throughput = %s, p99 = %s (%s); rounds: %s | p99 %s' \
    "$shape" "$(median "${RATIOS[@]}")" "$(median "${P99_RATIOS[@]}")" "$goals" "$rounds_ratios" "${P99_RATIOS[*]}")
  echo "$line"
  SUMMARY+=("$line")
  if [ "$REDIS_BENCHMARK" = 1 ]; then
    redis_benchmark_figures "$shape" "$connections" "$pipeline"
  fi
}

# redis_benchmark_figures SHAPE CONNECTIONS PIPELINE: redis-benchmark's own
# figures for the same shape (its -P batches like loadgen --batch), as many
# requests as loadgen's Redis run answered in its last round.
redis_benchmark_figures() {
  local shape=$1 connections=$2 pipeline=$3 rps seconds requests line
  rps=$(json_number "$WORK/redis-$shape-$ROUNDS.json" throughput)
  seconds=$(json_number "$WORK/redis-$shape-$ROUNDS.json" measured_s)
  requests=$(awk -v r="$rps" -v s="$seconds" 'BEGIN { n = int(r * s); if (n < 100000) n = 100000; print n }')
  taskset -c "$LOADGEN_CPUS" redis-benchmark -p "$REDIS_PORT" -c "$connections" -P "$pipeline" \
    -n "$requests" -r "$connections" -t "$REDIS_BENCHMARK_TEST" --csv > "$WORK/redis-benchmark-$shape.csv"
  # CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  line=$(grep -m1 -v '^"test"' "$WORK/redis-benchmark-$shape.csv")
  printf 'redis-benchmark (another client, not in the ratio) %s: %s: %.0f req/s p99 %.1f us\n' "$shape" \
    "$(echo "$line" | awk -F'","' '{gsub(/"/, "", $1); print $1}')" \
    "$(echo "$line" | awk -F'","' '{print $2}')" \
    "$(echo "$line" | awk -F'","' '{print $7 * 1000}')"
}
