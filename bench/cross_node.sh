#!/usr/bin/env bash
# player.incr through the node that does not own the players against the
# same players through their owner, in the same run: two nodes on loopback
# sharing one SQLite file (interval persistence), both pinned to the server
# CPU, loadgen on the other. Node 1 starts alone and creates every player,
# so node 1 owns them all; node 2 then joins. Each round runs loadgen once
# through node 1 (owner) and once through node 2 (every request crosses a
# link to node 1 and its answer comes back). Goal: cross/owner >= 0.5.
#
# Each run also counts the CPU time both routerd processes took per
# request (utime + stime from /proc, in a window inside the measured
# second: the run less its first and last half second). On a quiet machine
# the throughput ratio follows it; on a loaded one the throughput ratio
# does not mean much (other work takes the server CPU's time, and two
# processes get more of it than one), while the CPU time per request
# still does: CPU RATIO is owner/cross of it.
# Run by hand: bench/cross_node.sh (ROUNDS alternating pairs, 3 by default;
# BUILD=0 runs the binaries already built, ROUTERD=PATH another routerd;
# PERF_DIR=DIR records both nodes with `perf record -e cpu-clock -g` in each
# run's window, into DIR/NAME.perf.data).
set -euo pipefail
source "$(dirname "$0")/common.sh"

PLAYERS=${PLAYERS:-$CONNECTIONS}
if [ "${BUILD:-1}" = 1 ]; then build; fi
header "player.incr through a non-owner node vs through the owner, $ROUNDS rounds, $PLAYERS players"

# node ID GATEWAY_PORT ADMIN_PORT CLUSTER_PORT: starts node ID, pinned.
node() {
  local id=$1 gateway=$2 admin=$3 cluster=$4
  cat >"$WORK/node-$id.toml" <<TOML
[node]
id = $id
data_dir = "$WORK/data-$id"
[cores]
cpus = [$SERVER_CPUS]
[gateway]
listen = "127.0.0.1:$gateway"
[admin]
listen = "127.0.0.1:$admin"
[cluster]
listen = "127.0.0.1:$cluster"
[store]
backend = "sqlite"
path = "$WORK/cluster.db"
synchronous = "normal"
TOML
  "$ROUTERD" serve --config "$WORK/node-$id.toml" 2>"$WORK/node-$id.log" &
  PIDS+=($!)
  wait_port "$gateway"
}

# http_get PORT PATH: the body of an admin GET.
http_get() {
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET %s HTTP/1.1\r\nhost: 127.0.0.1:%s\r\nconnection: close\r\n\r\n' "$2" "$1" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

# cpu_ticks: utime + stime of both nodes, in clock ticks.
cpu_ticks() {
  local pid sum=0 ticks
  for pid in "${PIDS[@]}"; do
    read -r -a ticks < <(process_ticks "$pid")
    sum=$((sum + ticks[0] + ticks[1]))
  done
  echo "$sum"
}

# measured_run NAME ARGS...: loadgen_run, and the nodes' CPU time in the
# window into $WORK/NAME.ticks.
measured_run() {
  local name=$1 window
  window=$(awk -v d="$(seconds_of "$DURATION")" 'BEGIN { print d - 1 }')
  (
    sleep "$(awk -v w="$(seconds_of "$WARMUP")" 'BEGIN { print w + 0.5 }')"
    start=$(cpu_ticks)
    if [ -n "${PERF_DIR:-}" ]; then
      # The software clock event: hardware counters may not be there.
      perf record -q -e cpu-clock -F "${PERF_FREQ:-4000}" -g -o "$PERF_DIR/$name.perf.data" \
        -p "$(IFS=,; echo "${PIDS[*]}")" -- sleep "$window" 2>/dev/null
    else
      sleep "$window"
    fi
    echo "$(($(cpu_ticks) - start)) $window" >"$WORK/$name.ticks"
  ) &
  local sampler=$!
  loadgen_run "$@"
  wait "$sampler"
}

# cpu_us_per_request NAME: both nodes' CPU microseconds per answered request.
cpu_us_per_request() {
  local ticks window rps
  read -r ticks window <"$WORK/$1.ticks"
  rps=$(json_number "$WORK/$1.json" throughput)
  awk -v t="$ticks" -v w="$window" -v r="$rps" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { if (r > 0) printf "%.3f", t / hz * 1e6 / (r * w); else print "n/a" }'
}

CPU_RATIOS=()

node 1 7410 9471 7610
# Node 1 alone places every player on itself.
"$BIN/loadgen" --addr 127.0.0.1:7410 --connections "$CONNECTIONS" --players "$PLAYERS" \
  --workload incr --duration 1s --warmup 0s --threads 1 --cpus "$LOADGEN_CPUS" --quiet \
  --json "$WORK/create.json"
node 2 7420 9472 7620
for _ in $(seq 1 100); do
  if http_get 9472 /cluster | grep -q '"node_id":1,"state":"up"\|"state":"up".*"node_id":1'; then
    break
  fi
  sleep 0.1
done
owner=$(http_get 9472 /objects/player/1 | sed -E 's/.*"owner":([0-9]+).*/\1/')
if [ "$owner" != 1 ]; then
  echo "player 1 is owned by node $owner, not node 1: the comparison would be wrong" >&2
  exit 1
fi

for round in $(seq 1 "$ROUNDS"); do
  measured_run "owner-$round" --addr 127.0.0.1:7410 --players "$PLAYERS" --workload incr
  measured_run "cross-$round" --addr 127.0.0.1:7420 --players "$PLAYERS" --workload incr
  paired_round "$round" owner cross
  owner_cpu=$(cpu_us_per_request "owner-$round")
  cross_cpu=$(cpu_us_per_request "cross-$round")
  CPU_RATIOS+=("$(ratio "$owner_cpu" "$cross_cpu")")
  echo "round $round: CPU of both nodes per request: owner $owner_cpu us, cross $cross_cpu us, owner/cross ${CPU_RATIOS[-1]}"
done
owner=$(http_get 9472 /objects/player/1 | sed -E 's/.*"owner":([0-9]+).*/\1/')
echo "player 1 still owned by node $owner"
echo "RATIO cross/owner throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 0.5)"
echo "RATIO cross/owner p99 = $(median "${P99_RATIOS[@]}") median of ${P99_RATIOS[*]}"
echo "CPU RATIO owner/cross CPU time per request = $(median "${CPU_RATIOS[@]}") median of ${CPU_RATIOS[*]}"
# How the links batched: the frames each node's links sent per send, and
# the frames received per record (one record is one send of the peer's).
for port in 9472 9471; do
  http_get "$port" /metrics | awk -v port="$port" '
    /^routerd_cluster_link_frames_sent_total/ { sent += $NF }
    /^routerd_cluster_link_sends_total/ { sends += $NF; by[$1] = $NF }
    /^routerd_cluster_link_frames_received_total/ { received += $NF }
    /^routerd_cluster_link_records_received_total/ { records += $NF }
    /^routerd_cluster_link_records_sent_total/ { records_sent += $NF }
    /^routerd_cluster_link_record_bytes_sent_total/ { bytes_sent += $NF }
    END {
      printf "links of the node with admin port %s: %d frames in %d sends (%.1f per send), %d frames received in %d records (%.1f per record)\n",
        port, sent, sends, sends ? sent / sends : 0, received, records, records ? received / records : 0
      printf "  sent %d records of %.0f bytes on average (%.0f bytes per frame, heads, padding and tags included)\n",
        records_sent, records_sent ? bytes_sent / records_sent : 0, sent ? bytes_sent / sent : 0
      for (series in by) printf "  %s %d\n", series, by[series]
    }'
done
