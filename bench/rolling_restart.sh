#!/usr/bin/env bash
# A rolling restart under load: three routerd nodes on loopback sharing one
# SQLite store, loadgen running `mixed` (get, incr, ping; persist on_write)
# with --reconnect across all three gateways; each node in turn is drained
# (`routerd drain`), exits, and is started again with the same id and
# ports. Prints the requests sent, answered and failed by code, the
# reconnects and redirects, the longest gap any connection saw between two
# answers, and checks that every player's final counter equals the
# increments acknowledged to it. Goal: 0 failed, 0 lost.
# Run by hand: bench/rolling_restart.sh   (CONNECTIONS, DURATION, PAUSE,
# BASE_PORT, GRACE_MS override the defaults below)
set -euo pipefail
CONNECTIONS=${CONNECTIONS:-24}
PIPELINE=${PIPELINE:-1}
DURATION=${DURATION:-40s}
WARMUP=${WARMUP:-2s}
# Seconds of load before the first drain and after each restart.
PAUSE=${PAUSE:-4}
BASE_PORT=${BASE_PORT:-27400}
GRACE_MS=${GRACE_MS:-5000}
source "$(dirname "$0")/common.sh"

NODES=(1 2 3)
export ROUTERD_AUTH_SECRET=rolling-restart-bench-secret
export ROUTERD_CLUSTER_SECRET=rolling-restart-bench-cluster-secret
declare -A NODE_PID

seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
gateway_of() { echo "127.0.0.1:$((BASE_PORT + $1))"; }
admin_of() { echo "127.0.0.1:$((BASE_PORT + 100 + $1))"; }

write_config() {
  local id=$1
  cat >"$WORK/node$id.toml" <<EOF
[node]
id = $id
data_dir = "$WORK/data$id"
[cores]
cpus = [$SERVER_CPUS]
[gateway]
listen = "$(gateway_of "$id")"
[admin]
listen = "$(admin_of "$id")"
[store]
backend = "sqlite"
path = "$WORK/cluster.db"
synchronous = "normal"
[cluster]
listen = "127.0.0.1:$((BASE_PORT + 200 + id * 10))"
redirect_grace_ms = $GRACE_MS
[services.player]
persist = "on_write"
EOF
}

start_node() {
  local id=$1
  "$ROUTERD" serve --config "$WORK/node$id.toml" 2>>"$WORK/node$id.log" &
  NODE_PID[$id]=$!
  PIDS+=("$!")
  for _ in $(seq 1 400); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$(admin_of "$id")/healthz" 2>/dev/null)" = 200 ]; then
      return 0
    fi
    sleep 0.05
  done
  echo "node $id did not come up; its log:" >&2
  tail -20 "$WORK/node$id.log" >&2
  return 1
}

# Waits until every node sees all three members up (and links them).
wait_cluster_up() {
  local node
  for _ in $(seq 1 200); do
    local ready=0
    for node in "${NODES[@]}"; do
      local up
      up=$(curl -s "http://$(admin_of "$node")/cluster" | grep -o '"state":"up"' | wc -l || true)
      [ "$up" -ge 4 ] && ready=$((ready + 1))
    done
    [ "$ready" = 3 ] && return 0
    sleep 0.05
  done
  echo "the cluster did not come up" >&2
  return 1
}

(cd "$ROOT" && cargo build --release -q -p loadgen -p routerd)
echo "== rolling restart under load"
echo "machine: $(nproc) CPUs ($(uname -m), $(uname -r)); nodes on CPU(s) $SERVER_CPUS, loadgen on CPU(s) $LOADGEN_CPUS"
echo "load: mixed (get,incr,ping 4:1:1), $CONNECTIONS connections x pipeline $PIPELINE, --reconnect over 3 gateways, $DURATION"
echo "nodes: 3 on loopback, one SQLite file, persist on_write, redirect grace $GRACE_MS ms"

for id in "${NODES[@]}"; do
  write_config "$id"
  start_node "$id"
done
wait_cluster_up
ADDRS=()
for id in "${NODES[@]}"; do ADDRS+=(--addr "$(gateway_of "$id")"); done

"$BIN/loadgen" --workload mixed --connections "$CONNECTIONS" --pipeline "$PIPELINE" \
  --duration "$DURATION" --warmup "$WARMUP" --threads 1 --cpus "$LOADGEN_CPUS" \
  --reconnect "${ADDRS[@]}" --json "$WORK/load.json" --ledger "$WORK/ledger.txt" --quiet \
  >"$WORK/load.txt" 2>&1 &
LOADGEN=$!
PIDS+=("$LOADGEN")

sleep "$((PAUSE + 2))"
started=$(date +%s.%N)
for id in "${NODES[@]}"; do
  t0=$(date +%s.%N)
  if ! "$BIN/routerd" drain --admin "$(admin_of "$id")" --timeout-secs 60 >"$WORK/drain$id.txt" 2>&1; then
    echo "drain of node $id failed:" >&2
    cat "$WORK/drain$id.txt" >&2
    exit 1
  fi
  status=0
  wait "${NODE_PID[$id]}" || status=$?
  t1=$(date +%s.%N)
  start_node "$id"
  wait_cluster_up
  t2=$(date +%s.%N)
  printf 'node %d: drained and exited %d in %.2f s, serving again after %.2f s\n' \
    "$id" "$status" "$(seconds "$t0" "$t1")" "$(seconds "$t1" "$t2")"
  if [ "$status" != 0 ]; then
    echo "node $id exited $status after its drain" >&2
    exit 1
  fi
  sleep "$PAUSE"
done
printf 'all three restarted within %.1f s\n' "$(seconds "$started" "$(date +%s.%N)")"

load_status=0
wait "$LOADGEN" || load_status=$?
echo
cat "$WORK/load.txt"

# The counters: each player's, read through node 1, against its ledger.
mismatched=0
uncertain_total=0
acked_total=0
players=0
while read -r player acked max uncertain; do
  [ "${player:0:1}" = "#" ] && continue
  counter=$(printf 'get\n' | "$BIN/routerd" client --addr "$(gateway_of 1)" --player-id "$player" \
    --config "$WORK/node1.toml" 2>/dev/null | awk '$1 == "OK" && $2 == "get" { print $3 }')
  players=$((players + 1))
  acked_total=$((acked_total + acked))
  uncertain_total=$((uncertain_total + uncertain))
  if [ -z "$counter" ] || [ "$counter" -lt "$acked" ] || [ "$counter" -gt "$((acked + uncertain))" ]; then
    echo "player $player: counter ${counter:-unreadable}, acknowledged $acked (+$uncertain uncertain)"
    mismatched=$((mismatched + 1))
  elif [ "$counter" != "$acked" ]; then
    echo "player $player: counter $counter = $acked acknowledged + $((counter - acked)) of $uncertain uncertain"
  fi
done <"$WORK/ledger.txt"

sent=$(json_number "$WORK/load.json" sent)
answered=$(json_number "$WORK/load.json" responses)
failed=$(json_number "$WORK/load.json" failed)
gap=$(json_number "$WORK/load.json" longest_answer_gap_ms)
echo
echo "== result"
echo "requests (measured): sent $sent, answered $answered, failed $failed"
echo "failed by code: $(tr -d '\n ' <"$WORK/load.json" | grep -o '"errors":{[^}]*}' || echo none), lost with a connection $(json_number "$WORK/load.json" lost)"
echo "moves: redirects $(json_number "$WORK/load.json" redirects), reconnects $(json_number "$WORK/load.json" reconnects), login retries $(json_number "$WORK/load.json" login_retries)"
echo "longest gap between two answers on one connection: $gap ms"
echo "counters: $players players, $acked_total increments acknowledged, $uncertain_total uncertain, $mismatched counters that disagree"
if [ "$failed" = 0 ] && [ "$mismatched" = 0 ] && [ "$uncertain_total" = 0 ] && [ "$load_status" = 0 ]; then
  echo "RESULT: PASS (0 failed requests, 0 lost acknowledged increments)"
else
  echo "RESULT: FAIL"
  exit 1
fi
