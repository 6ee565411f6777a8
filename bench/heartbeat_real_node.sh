#!/usr/bin/env bash
# A real node under store load keeps its lease: `routerd serve` on SQLite
# (a cluster of one, so membership heartbeats every 500 ms with the
# default timers), loadgen with 256 connections of `player.incr` under
# persist = "on_write" (every increment a CAS write acknowledged after its
# commit) for DURATION (default 60s). Prints the node's fences
# (routerd_router_fences_total, routerd_cluster_fenced), the heartbeat
# write latency p99 as its histogram buckets bound it
# (routerd_store_operation_duration_seconds{op="write_member"}), store
# errors, and loadgen's throughput. BASELINE_ROUTERD=PATH runs the same
# load on another build first (a build of the previous tree, say) and
# prints the p99 ratio of this build to it.
# Run by hand: bench/heartbeat_real_node.sh; PROFILE=dev for debug builds.
set -euo pipefail
source "$(dirname "$0")/common.sh"
CONNECTIONS=256
PIPELINE=1
DURATION=${DURATION:-60s}
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
  build
else
  (cd "$ROOT" && cargo build -q -p loadgen -p routerd)
  BIN=$TARGET/debug
  ROUTERD=${ROUTERD_UNDER_TEST:-$BIN/routerd}
fi
header "a real node's heartbeats under 256 on_write writers"

GATEWAY_PORT=${GATEWAY_PORT:-17400}
ADMIN_PORT=${ADMIN_PORT:-17464}
SECRET=heartbeat-bench-secret

# run_node NAME BINARY: one node, one load, its figures into $WORK/NAME.*
run_node() {
  local name=$1 binary=$2 dir=$WORK/$1
  mkdir -p "$dir"
  cat >"$dir/node.toml" <<TOML
[node]
id = 1
data_dir = "$dir/data"
[cores]
cpus = [${SERVER_CPUS}]
[gateway]
listen = "127.0.0.1:$GATEWAY_PORT"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[cluster]
listen = "127.0.0.1:0"
[auth]
secret = "$SECRET"
[services.player]
persist = "on_write"
TOML
  taskset -c "$SERVER_CPUS" "$binary" serve --config "$dir/node.toml" 2>"$dir/node.log" &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$GATEWAY_PORT"
  wait_port "$ADMIN_PORT"
  local before
  before=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics")
  echo "-- $name ($binary)"
  "$BIN/loadgen" --addr "127.0.0.1:$GATEWAY_PORT" --secret "$SECRET" --workload incr \
    --connections "$CONNECTIONS" --pipeline "$PIPELINE" --duration "$DURATION" \
    --warmup "$WARMUP" --threads 1 --cpus "$LOADGEN_CPUS" --json "$dir/loadgen.json" --quiet
  curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" >"$dir/metrics.txt"
  echo "$before" >"$dir/metrics-before.txt"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  wait_port_closed "$GATEWAY_PORT"
  report "$name" "$dir"
}

# metric FILE NAME: the value of the series NAME (with its labels) in FILE.
metric() {
  awk -v name="$2" '$1 == name { print $2; found = 1 } END { if (!found) print 0 }' "$1"
}

# p99_ms FILE: the upper bound, in ms, of the bucket holding the 99th
# percentile of the write_member histogram.
p99_ms() {
  awk '
    /^routerd_store_operation_duration_seconds_bucket\{op="write_member",le="/ {
      match($1, /le="[^"]*"/); le = substr($1, RSTART + 4, RLENGTH - 5)
      n++; les[n] = le; counts[n] = $2
    }
    END {
      total = counts[n]
      if (total == 0) { print "n/a"; exit }
      for (i = 1; i <= n; i++) if (counts[i] >= 0.99 * total) {
        if (les[i] == "+Inf") print "inf"; else printf "%.3f\n", les[i] * 1000
        exit
      }
    }' "$1"
}

report() {
  local name=$1 dir=$2
  local fences fenced beats p99 errors rps
  fences=$(metric "$dir/metrics.txt" routerd_router_fences_total)
  fenced=$(metric "$dir/metrics.txt" routerd_cluster_fenced)
  beats=$(metric "$dir/metrics.txt" 'routerd_store_operation_duration_seconds_count{op="write_member"}')
  p99=$(p99_ms "$dir/metrics.txt")
  errors=$(awk '/^routerd_store_errors_total\{/ { sum += $2 } END { print sum + 0 }' "$dir/metrics.txt")
  rps=$(json_number "$dir/loadgen.json" throughput)
  printf '%-9s fences %s (fenced now: %s); %s heartbeats, p99 <= %s ms; store errors %s; %.0f incr/s\n' \
    "$name" "$fences" "$fenced" "$beats" "$p99" "$errors" "$rps"
  echo "$p99" >"$dir/p99"
}

if [ -n "${BASELINE_ROUTERD:-}" ]; then
  run_node baseline "$BASELINE_ROUTERD"
fi
run_node this "$ROUTERD"
if [ -n "${BASELINE_ROUTERD:-}" ]; then
  echo "RATIO heartbeat p99 this/baseline = $(ratio "$(cat "$WORK/this/p99")" "$(cat "$WORK/baseline/p99")") (bucket bounds)"
fi
echo "goal: 0 fences, heartbeat p99 < 125 ms"
