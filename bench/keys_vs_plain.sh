#!/usr/bin/env bash
# Request keys (docs/protocol.md, section 12): keyed `player.incr` (a
# version-2 REQUEST, its answer remembered by the player object) against
# plain `player.incr`, through the same loadgen, on the same node build, in
# the same run, at pipeline 1 and 16; goal: ratio >= 0.9 at both. Then the
# memory a player's remembered answers cost: the resident set of a
# one-core node after PLAYERS players were each sent KEYS_PER_PLAYER keyed
# increments (router.request_keys_max, 128 by default, is what it keeps),
# against a node whose players were sent as many plain ones, per player.
# Run by hand: bench/keys_vs_plain.sh (ROUNDS alternating pairs at each
# depth, 3 by default; the median ratios are the result). PLAYERS (default
# 2000), KEYS_PER_PLAYER (default 130), MEMORY_SECONDS (default 60: long
# enough that every player is visited; the switches printed say so).
set -euo pipefail
source "$(dirname "$0")/common.sh"

PLAYERS=${PLAYERS:-2000}
KEYS_PER_PLAYER=${KEYS_PER_PLAYER:-130}
SECRET=bench-keys-secret

build
header "routerd player.incr keyed vs plain, pipeline 1 and 16, $ROUNDS rounds; memory of $PLAYERS players x $KEYS_PER_PLAYER keys"

RESULTS=()
for depth in 1 16; do
  RATIOS=()
  for round in $(seq 1 "$ROUNDS"); do
    PIPELINE=$depth loadgen_run "plain-p$depth-$round" --spawn-node --node-cpus "$SERVER_CPUS" \
      --workload incr --node-persist interval
    PIPELINE=$depth loadgen_run "keyed-p$depth-$round" --spawn-node --node-cpus "$SERVER_CPUS" \
      --workload incr --node-persist interval --keys
    paired_round "$round" "plain-p$depth" "keyed-p$depth"
  done
  RESULTS+=("RATIO keyed/plain incr throughput at pipeline $depth = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 0.9)")
done

# rss_kb PID: the resident set of PID in KiB.
rss_kb() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# node_rss NAME LOADGEN_ARGS...: a fresh one-core node, every player sent
# KEYS_PER_PLAYER increments by loadgen with LOADGEN_ARGS; prints the node's
# resident set in KiB after the run.
node_rss() {
  local name=$1
  shift
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$WORK/$name.toml" <<TOML
[node]
id = 1
data_dir = "$WORK/$name-data"
[cores]
count = 1
[store]
backend = "memory"
[gateway]
listen = "127.0.0.1:$port"
[admin]
listen = "127.0.0.1:0"
[cluster]
listen = "127.0.0.1:0"
[auth]
secret = "$SECRET"
TOML
  start_routerd "$name" "$WORK/$name.toml" "$port" >&2
  # Each connection logs in as its players in turn, KEYS_PER_PLAYER
  # requests each, until every player was visited (the logins are counted
  # as player switches; a second pass changes nothing: 128 answers are
  # kept).
  "$BIN/loadgen" --addr "127.0.0.1:$port" --secret "$SECRET" --workload incr \
    --connections 32 --pipeline 16 --duration "${MEMORY_SECONDS:-60}s" --warmup 0s \
    --players "$PLAYERS" --requests-per-login "$KEYS_PER_PLAYER" --threads 1 --cpus "$LOADGEN_CPUS" \
    --json "$WORK/$name.json" --quiet "$@" >&2
  echo "$name: $(json_number "$WORK/$name.json" player_switches) player switches (of $PLAYERS players)" >&2
  rss_kb "$NODE_PID"
  stop_background "$NODE_PID" "$port"
}

plain_kb=$(node_rss plain-memory)
keyed_kb=$(node_rss keyed-memory --keys)
per_player=$(awk -v k="$keyed_kb" -v p="$plain_kb" -v n="$PLAYERS" 'BEGIN { printf "%.0f", (k - p) * 1024 / n }')
echo
echo "memory: plain $plain_kb KiB, keyed $keyed_kb KiB resident after $PLAYERS players x $KEYS_PER_PLAYER increments"
for line in "${RESULTS[@]}"; do echo "$line"; done
echo "RESULT remembered answers cost $per_player bytes per player (128 kept each, resident set keyed - plain)"
