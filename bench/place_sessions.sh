#!/usr/bin/env bash
# Sessions placed on their player's node (gateway.place_sessions = true)
# against sessions that stay on the gateway they reached (false): three
# nodes on loopback sharing one SQLite file (interval persistence), all
# pinned to the server CPU, loadgen on the other, its connections spread
# round-robin over the three gateways. The same loadgen, players and load
# for both; each run starts a fresh cluster with the key set or not. A new
# player is created on its rendezvous node whichever gateway it reached,
# so without placement about two thirds of the requests cross to another
# node and back; with it, a login answered by another node is followed by
# sys.redirect there, which loadgen follows before the measured phase.
#
# Prints per run the throughput and the share of client requests that
# crossed nodes (routerd_router_client_requests_remote_total over local +
# remote, summed over the three nodes, setup and warm-up included), and the
# median throughput ratio with/without over ROUNDS rounds.
# Run by hand: bench/place_sessions.sh; DURATION=2s WARMUP=1s ROUNDS=1 for a
# short check; PROFILE=dev measures debug builds (quick to build, slow).
set -euo pipefail
source "$(dirname "$0")/common.sh"
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
  build
else
  (cd "$ROOT" && cargo build -q -p loadgen -p routerd)
  BIN=$TARGET/debug
  ROUTERD=${ROUTERD_UNDER_TEST:-$BIN/routerd}
fi
PLAYERS=${PLAYERS:-$CONNECTIONS}
BASE_PORT=${BASE_PORT:-27400}
header "three nodes, connections round-robin: place_sessions = true vs false, $ROUNDS rounds, $PLAYERS players"

# start_cluster NAME PLACE: nodes 1-3 with gateway.place_sessions = PLACE,
# gateway port BASE_PORT + id, admin BASE_PORT + 100 + id.
start_cluster() {
  local name=$1 place=$2 id
  mkdir -p "$WORK/$name"
  for id in 1 2 3; do
    cat >"$WORK/$name/node-$id.toml" <<TOML
[node]
id = $id
data_dir = "$WORK/$name/data-$id"
[cores]
cpus = [$SERVER_CPUS]
[gateway]
listen = "127.0.0.1:$((BASE_PORT + id))"
place_sessions = $place
[admin]
listen = "127.0.0.1:$((BASE_PORT + 100 + id))"
[cluster]
listen = "127.0.0.1:0"
[store]
backend = "sqlite"
path = "$WORK/$name/cluster.db"
synchronous = "normal"
TOML
    taskset -c "$SERVER_CPUS" "$ROUTERD" serve --config "$WORK/$name/node-$id.toml" \
      2>"$WORK/$name/node-$id.log" &
    PIDS+=($!)
    wait_port "$((BASE_PORT + id))"
  done
  for _ in $(seq 1 200); do
    if [ "$(curl -s "http://127.0.0.1:$((BASE_PORT + 101))/cluster" | grep -o '"state":"up"' | wc -l)" -ge 3 ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "the three nodes did not come up" >&2
  return 1
}

stop_cluster() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}

# answered: "LOCAL REMOTE", client requests answered on the node the
# session is on and on another node, summed over the three nodes.
answered() {
  local id local=0 remote=0 text
  sleep 0.5 # the cores mirror these counts every quarter second
  for id in 1 2 3; do
    text=$(curl -s "http://127.0.0.1:$((BASE_PORT + 100 + id))/metrics")
    local=$((local + $(echo "$text" | awk '$1 == "routerd_router_client_requests_local_total" { print $2 }')))
    remote=$((remote + $(echo "$text" | awk '$1 == "routerd_router_client_requests_remote_total" { print $2 }')))
  done
  echo "$local $remote"
}

# run NAME PLACE ROUND: one cluster, one loadgen run; prints its figures.
run() {
  local name=$1 place=$2 round=$3 before after crossed
  start_cluster "$name-$round" "$place"
  before=$(answered)
  loadgen_run "$name-$round" --addr "127.0.0.1:$((BASE_PORT + 1))" --addr "127.0.0.1:$((BASE_PORT + 2))" \
    --addr "127.0.0.1:$((BASE_PORT + 3))" --players "$PLAYERS" --workload incr
  after=$(answered)
  crossed=$(echo "$before $after" | awk '{ l = $3 - $1; r = $4 - $2; if (l + r > 0) printf "%.3f", r / (l + r); else print "n/a" }')
  CROSSED+=("$crossed")
  printf '%s: place_sessions = %s, crossed nodes %s of %s requests (share %s), redirects followed %s\n' \
    "$name" "$place" "$(echo "$before $after" | awk '{ print $4 - $2 }')" \
    "$(echo "$before $after" | awk '{ print $3 - $1 + $4 - $2 }')" "$crossed" \
    "$(json_number "$WORK/$name-$round.json" redirects)"
  stop_cluster
}

CROSSED=()
for round in $(seq 1 "$ROUNDS"); do
  run stay false "$round"
  run placed true "$round"
  paired_round "$round" stay placed
done
echo "crossed-node share, stay/placed by run: ${CROSSED[*]}"
echo "RATIO placed/stay throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}"
