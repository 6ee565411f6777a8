#!/usr/bin/env bash
# A scripted object type against the built-in one, on the same node build
# in the same run: the Luau `counter.add` of examples/scripts (route 2001,
# JSON body `{"by":1}`, decoded, run in the sandbox, state re-encoded)
# against the built-in `player.incr` (route 304, a binary i64), both
# routed to an object per player of the connection, both persisted by
# `interval` so that the store's write does not hide the handler's cost
# (the example declares `on_write`; this run loads a copy that says
# `interval`). Goal: counter.add >= 0.5 of player.incr at pipeline 16.
# The same pair then runs through a listener with `body_codec = "msgpack"`
# (the gateway decodes counter.add's MessagePack body `{"by":1}` and
# encodes the answer in MessagePack; player.incr's binary body is as it
# is), and a last line compares counter.add through the two listeners.
#
# Then memory per live scripted object: OBJECTS logins each create one
# player (player.incr) on one node, and on another node one player and
# one counter (counter.add); the difference of the two nodes' resident
# growth, per login, is what a live counter with a small state costs.
#
# Run by hand: bench/scripts_vs_builtin.sh (PIPELINES="1 16" by default,
# ROUNDS alternating pairs per pipeline, CODECS="none msgpack",
# OBJECTS=20000).
set -euo pipefail
source "$(dirname "$0")/common.sh"

PIPELINES=${PIPELINES:-1 16}
CODECS=${CODECS:-none msgpack}
# counter.add's body, `{"by":1}`, as each listener takes it.
declare -A LUAU_BODY=([none]='{"by":1}' [msgpack]='hex:81a2627901')
OBJECTS=${OBJECTS:-20000}
MEMORY_RUN=${MEMORY_RUN:-15s}
SECRET=${SECRET:-bench-secret-of-the-scripts-run}
PYTHON=${PYTHON:-python3}

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

mkdir -p "$WORK/scripts"
sed 's/persist = "on_write"/persist = "interval"/' "$ROOT/examples/scripts/counter.luau" \
  > "$WORK/scripts/counter.luau"
grep -q 'persist = "interval"' "$WORK/scripts/counter.luau" \
  || { echo "counter.luau no longer declares persist = \"on_write\"" >&2; exit 1; }

# node_config NAME PORT [CODEC]: a one-core node with the scripts loaded,
# its listener's body codec CODEC (none by default).
node_config() {
  local name=$1 port=$2 codec=${3:-none}
  cat > "$WORK/$name.toml" <<TOML
[node]
id = 1
data_dir = "$WORK/$name-data"
[cores]
cpus = [${SERVER_CPUS%%,*}]
[gateway]
listen = "127.0.0.1:$port"
body_codec = "$codec"
[admin]
listen = "127.0.0.1:0"
[cluster]
listen = "127.0.0.1:0"
[auth]
secret = "$SECRET"
[services.player]
persist = "interval"
[scripts]
dir = "$WORK/scripts"
TOML
}

build
header "Luau counter.add vs built-in player.incr (one core, interval), pipelines $PIPELINES, $ROUNDS rounds each"

# median_rps NAME: the median throughput of the rounds NAME-1 ... NAME-ROUNDS.
median_rps() {
  local values=() round
  for round in $(seq 1 "$ROUNDS"); do
    values+=("$(json_number "$WORK/$1-$round.json" throughput)")
  done
  median "${values[@]}"
}

SUMMARY=()
FIRST_PLAYER=0
declare -A LUAU_MEDIAN
for CODEC in $CODECS; do
  GW_PORT=$(free_port)
  node_config "node-$CODEC" "$GW_PORT" "$CODEC"
  start_routerd "node-$CODEC" "$WORK/node-$CODEC.toml" "$GW_PORT"
  NODE=$NODE_PID
  for PIPELINE in $PIPELINES; do
    RATIOS=()
    P99_RATIOS=()
    for round in $(seq 1 "$ROUNDS"); do
      # Players of their own for each run: the example counter refuses to
      # pass 1,000,000, which a few runs on the same players would reach
      # (a refusal is fast and counts for nothing).
      FIRST_PLAYER=$((FIRST_PLAYER + 100000))
      loadgen_run "incr-$CODEC-p$PIPELINE-$round" --addr "127.0.0.1:$GW_PORT" \
        --secret "$SECRET" --workload incr --player-base "$FIRST_PLAYER"
      loadgen_run "luau-$CODEC-p$PIPELINE-$round" --addr "127.0.0.1:$GW_PORT" \
        --secret "$SECRET" --workload custom --route 2001 --body "${LUAU_BODY[$CODEC]}" \
        --player-base "$FIRST_PLAYER"
      paired_round "$round" "incr-$CODEC-p$PIPELINE" "luau-$CODEC-p$PIPELINE"
    done
    SUMMARY+=("RATIO counter.add/player.incr throughput, $CODEC listener, pipeline $PIPELINE = $(median "${RATIOS[@]}") median of ${RATIOS[*]}, p99 ratio $(median "${P99_RATIOS[@]}")")
    LUAU_MEDIAN[$CODEC-$PIPELINE]=$(median_rps "luau-$CODEC-p$PIPELINE")
  done
  stop_background "$NODE" "$GW_PORT"
done
if [[ " $CODECS " == *" none "* && " $CODECS " == *" msgpack "* ]]; then
  for PIPELINE in $PIPELINES; do
    SUMMARY+=("RATIO counter.add msgpack/none listener throughput at pipeline $PIPELINE = $(ratio "${LUAU_MEDIAN[msgpack-$PIPELINE]}" "${LUAU_MEDIAN[none-$PIPELINE]}") (medians of rounds run one listener after the other: less sure than the paired ratios)")
  done
fi

# rss_kb PID: the resident set of a process, in KiB.
rss_kb() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# growth NAME ARGS...: a fresh node, then OBJECTS logins of new players
# each sending one request of ARGS; prints the node's resident growth in
# KiB once the run ended (the sessions are closed, the objects stay live).
growth() {
  local name=$1 port before after
  shift
  port=$(free_port)
  node_config "$name" "$port"
  start_routerd "$name" "$WORK/$name.toml" "$port"
  sleep 1
  before=$(rss_kb "$NODE_PID")
  "$BIN/loadgen" --addr "127.0.0.1:$port" --secret "$SECRET" --connections 16 --pipeline 1 \
    --players "$OBJECTS" --requests-per-login 1 --duration "$MEMORY_RUN" --warmup 0s \
    --threads 1 --cpus "$LOADGEN_CPUS" --quiet --json "$WORK/$name.json" "$@" >/dev/null
  # Players are taken in turn: a run that answered fewer requests than
  # OBJECTS left some never created.
  local answered
  answered=$(json_number "$WORK/$name.json" responses)
  if [ "${answered%.*}" -lt "$OBJECTS" ]; then
    echo "only $answered requests answered in $MEMORY_RUN: raise MEMORY_RUN" >&2
    exit 1
  fi
  sleep 1
  after=$(rss_kb "$NODE_PID")
  stop_background "$NODE_PID" "$port"
  echo $((after - before))
}

echo "-- memory: $OBJECTS logins, each one request"
incr_kb=$(growth mem-incr --workload incr)
luau_kb=$(growth mem-luau --workload custom --route 2001 --body '{"by":1}')
echo "player.incr: resident +$incr_kb KiB; counter.add: resident +$luau_kb KiB"
for line in "${SUMMARY[@]}"; do echo "$line"; done
awk -v a="$luau_kb" -v b="$incr_kb" -v n="$OBJECTS" \
  'BEGIN { printf "memory per live scripted object (counter, small state) = %.0f bytes\n", (a - b) * 1024 / n }'
