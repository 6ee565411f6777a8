#!/usr/bin/env bash
# player.incr through the node that does not own the players against the
# same players through their owner, in the same run: two nodes on loopback
# sharing one SQLite file (interval persistence), both pinned to the server
# CPU, loadgen on the other. Node 1 starts alone and creates every player,
# so node 1 owns them all; node 2 then joins. Each round runs loadgen once
# through node 1 (owner) and once through node 2 (every request crosses a
# link to node 1 and its answer comes back). Goal: cross/owner >= 0.5.
# Run by hand: bench/cross_node.sh (ROUNDS alternating pairs, 3 by default).
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
  "$ROUTERD" serve --config "$WORK/node-$id.toml" 2>"$WORK/node-$id.log" &
  PIDS+=($!)
  wait_port "$gateway"
}

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
echo "RATIO cross/owner throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 0.5)"
