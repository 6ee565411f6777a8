#!/usr/bin/env bash
# Where a server's CPU goes per request: user, system and softirq time of
# the server's CPU(s) from /proc/stat, and TCP segments sent (both
# directions, all of loopback) from /proc/net/snmp, each divided by the
# requests answered in the same window. Redis INCR, routerd `player.incr`
# (routed) and the echo baseline, one after the other, driven by the same
# loadgen at one shape (CONNECTIONS x PIPELINE, BATCH=1 for batches).
#
# It answers "how far can this server go at this shape": the kernel's
# share (system + softirq: the TCP stack, the wake-ups of the client) is
# set by the segments per request, the same for every server that answers
# a batch with one send; what a server can still win is in its user time.
# Run by hand: CONNECTIONS=16 PIPELINE=16 BATCH=1 bench/cpu_per_request.sh
# (ROUNDS runs per server, 3 by default; medians per server).
#
# The window is the measured run less its first and last half second. It
# counts everything on the server's CPU, so run it on an otherwise idle
# machine; the jiffy counters resolve 1/CLK_TCK s, about 1% of a 4 s
# window at 100 Hz.
set -euo pipefail
# Before common.sh, whose defaults give way to these.
CONNECTIONS=${CONNECTIONS:-16}
PIPELINE=${PIPELINE:-16}
DURATION=${DURATION:-6s}
WARMUP=${WARMUP:-1s}
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/redis_common.sh"

BATCH=${BATCH:-1}
ECHO_PORT=${ECHO_PORT:-17500}

# cpu_jiffies: user, system and softirq jiffies summed over SERVER_CPUS.
cpu_jiffies() {
  local cpu sum_user=0 sum_system=0 sum_softirq=0 fields
  for cpu in ${SERVER_CPUS//,/ }; do
    read -r -a fields < <(grep "^cpu$cpu " /proc/stat)
    # cpuN user nice system idle iowait irq softirq ...
    sum_user=$((sum_user + fields[1] + fields[2]))
    sum_system=$((sum_system + fields[3]))
    sum_softirq=$((sum_softirq + fields[7]))
  done
  echo "$sum_user $sum_system $sum_softirq"
}

tcp_out_segments() {
  awk '/^Tcp:/ { if (header) { print $(column) ; exit } for (i = 1; i <= NF; i++) if ($i == "OutSegs") column = i; header = 1 }' /proc/net/snmp
}

# measure NAME LOADGEN-ARGS...: one run; appends "rps user sys softirq
# segments" (nanoseconds and segments per request) to $WORK/NAME.rows.
measure() {
  local name=$1
  shift
  local warmup duration start window before after segments_before segments_after rps
  warmup=$(seconds_of "$WARMUP")
  duration=$(seconds_of "$DURATION")
  window=$(awk -v d="$duration" 'BEGIN { print d - 1 }')
  start=$(awk -v w="$warmup" 'BEGIN { print w + 0.5 }')
  local flags=()
  if [ "$BATCH" = 1 ]; then flags+=(--batch); fi
  loadgen_run "$name" "${flags[@]}" "$@" &
  local loadgen=$!
  # Connections are set up before the warm-up starts; a second is plenty
  # on loopback.
  sleep 1
  sleep "$start"
  before=$(cpu_jiffies)
  segments_before=$(tcp_out_segments)
  sleep "$window"
  after=$(cpu_jiffies)
  segments_after=$(tcp_out_segments)
  wait "$loadgen"
  rps=$(json_number "$WORK/$name.json" throughput)
  awk -v rps="$rps" -v window="$window" -v hz="$(getconf CLK_TCK)" \
    -v before="$before" -v after="$after" -v s0="$segments_before" -v s1="$segments_after" 'BEGIN {
      split(before, b, " "); split(after, a, " ")
      requests = rps * window; ns = 1e9 / hz
      printf "%.0f %.0f %.0f %.0f %.3f\n", rps, (a[1] - b[1]) * ns / requests,
        (a[2] - b[2]) * ns / requests, (a[3] - b[3]) * ns / requests, (s1 - s0) / requests }' \
    >> "$WORK/$name.rows"
}

# show ROUND NAME: the last row of NAME.
show() {
  tail -1 "$WORK/$2.rows" | awk -v round="$1" -v name="$2" '{ printf "round %d %-8s %10.0f req/s  user %4d  system %4d  softirq %4d ns  segments %.3f\n", round, name, $1, $2, $3, $4, $5 }'
}

ensure_redis
build
header "CPU time and TCP segments per request on the server's CPU, $ROUNDS rounds"
echo "batches: $BATCH"
start_redis
start_echo

for round in $(seq 1 "$ROUNDS"); do
  measure redis --proto resp --addr "127.0.0.1:$REDIS_PORT" --workload incr > /dev/null
  show "$round" redis
  measure routerd --spawn-node --node-cpus "$SERVER_CPUS" --workload incr > /dev/null 2>&1
  show "$round" routerd
  measure echo --addr "127.0.0.1:$ECHO_PORT" --workload ping > /dev/null
  show "$round" echo
done

echo
echo "== medians per request (ns of the server's CPU; segments over loopback)"
for name in redis routerd echo; do
  line="$name"
  for column in 1 2 3 4 5; do
    line="$line $(median $(awk -v c="$column" '{ print $c }' "$WORK/$name.rows"))"
  done
  echo "$line" | awk '{ printf "%-8s %10.0f req/s  user %4.0f  system %4.0f  softirq %4.0f  kernel %4.0f  total %4.0f ns  segments %.3f\n",
    $1, $2, $3, $4, $5, $4 + $5, $3 + $4 + $5, $6 }'
done
