#!/usr/bin/env bash
# player.incr through the node that does not own the players against the
# same players through their owner, in the same run: two nodes on loopback
# sharing one SQLite file (interval persistence), both pinned to the server
# CPU, loadgen on the other. Node 1 starts alone and creates every player,
# so node 1 owns them all; node 2 then joins. Each round runs loadgen once
# through node 1 (owner) and once through node 2 (every request crosses a
# link to node 1 and its answer comes back). Goal: cross/owner >= 0.5.
# Run by hand: bench/cross_node.sh (ROUNDS alternating pairs, 3 by default).
# It also prints what the links carried (records, frames and bytes per
# sealed record, from each node's metrics), the shape bench/link_records
# takes; PERF=1 adds a cpu-clock profile of both nodes during one more run
# through node 2 and the share of it in sealing and opening the links'
# records (AES-GCM; HMAC-SHA256 symbols too, for a build of link version 2).
set -euo pipefail
source "$(dirname "$0")/common.sh"

PLAYERS=${PLAYERS:-$CONNECTIONS}
build
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
  start_routerd "node-$id" "$WORK/node-$id.toml" "$gateway"
  NODE_PIDS+=("$NODE_PID")
}
NODE_PIDS=()

# http_get PORT PATH: the body of an admin GET.
http_get() {
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET %s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n' "$2" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

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
  loadgen_run "owner-$round" --addr 127.0.0.1:7410 --players "$PLAYERS" --workload incr
  loadgen_run "cross-$round" --addr 127.0.0.1:7420 --players "$PLAYERS" --workload incr
  paired_round "$round" owner cross
done
owner=$(http_get 9472 /objects/player/1 | sed -E 's/.*"owner":([0-9]+).*/\1/')
echo "player 1 still owned by node $owner"

# metric_sum PORT NAME: the sum over a node's cores of a counter.
metric_sum() {
  http_get "$1" /metrics | awk -v name="$2" '$1 == name || index($1, name "{") == 1 { s += $2 } END { printf "%.0f", s }'
}
# What each node's links sent over the whole script (the first second's
# placement included): requests go from node 2 to node 1, answers back.
for admin in 9472 9471; do
  records=$(metric_sum "$admin" routerd_cluster_link_records_sent_total)
  frames=$(metric_sum "$admin" routerd_cluster_link_frames_sent_total)
  bytes=$(metric_sum "$admin" routerd_cluster_link_record_bytes_sent_total)
  awk -v a="$admin" -v r="$records" -v f="$frames" -v b="$bytes" 'BEGIN {
    if (r == 0) { printf "links of the node with admin %s: no record sent\n", a; exit }
    printf "links of the node with admin %s: %d records, %d frames, %d bytes: %.2f frames and %.0f bytes per record, %.0f bytes per frame\n",
      a, r, f, b, f / r, b / r, (b - 21 * r - 5 * f) / f }'
done

if [ "${PERF:-0}" = 1 ]; then
  pids=$(IFS=,; echo "${NODE_PIDS[*]}")
  echo "-- perf: cpu-clock of both nodes ($pids) during one run through node 2"
  # The profile covers the run's warm-up and measured phase.
  perf record -q -e cpu-clock -F 1999 -g -p "$pids" -o "$WORK/perf.data" \
    -- sleep "$(awk -v w="${WARMUP%s}" -v d="${DURATION%s}" 'BEGIN { print w + d }')" >/dev/null 2>&1 &
  perf_pid=$!
  loadgen_run "cross-perf" --addr 127.0.0.1:7420 --players "$PLAYERS" --workload incr
  wait "$perf_pid" || true
  perf report -i "$WORK/perf.data" --no-children --sort sym --stdio 2>/dev/null \
    | grep -E '^ +[0-9.]+%' >"$WORK/perf.txt" || true
  echo "top of the profile (share of both nodes' samples):"
  head -15 "$WORK/perf.txt"
  local_pattern='aes_gcm|gcm_|ghash|aes_hw|aesni|sha2::|sha256|hmac'
  echo "record sealing and opening (AES-GCM, SHA-256 and HMAC symbols):"
  grep -iE "$local_pattern" "$WORK/perf.txt" || echo "  none sampled"
  grep -iE "$local_pattern" "$WORK/perf.txt" \
    | awk '{ gsub("%", "", $1); s += $1 } END { printf "SHARE of both nodes cpu-clock samples in link record crypto: %.2f%%\n", s }'
fi
echo "RATIO cross/owner throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 0.5)"
