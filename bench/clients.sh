#!/usr/bin/env bash
# What the client libraries cost: requests a second of `player.incr`
# through the Python and the TypeScript (Node.js, TCP) client against one
# node, next to loadgen's figure for the same shape (CONNECTIONS sessions,
# PIPELINE requests in flight on each), all measured in this run against
# the same node. Prints each figure and its ratio to loadgen's.
#
#   bench/clients.sh            # 16 connections x pipeline 16, 5 s each
set -euo pipefail
CONNECTIONS=${CONNECTIONS:-16}
DURATION=${DURATION:-5s}
source "$(dirname "$0")/common.sh"

PYTHON=${PYTHON:-python3}
SECRET="bench-clients-secret"
seconds=${DURATION%s}
warmup=${WARMUP%s}

# BUILD=0 runs the binaries already built (ROUTERD=..., $BIN/loadgen).
build
(cd "$ROOT/clients/typescript" && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; } && npx tsc -p .)

GW_PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/node.toml" <<TOML
[node]
id = 1
data_dir = "$WORK/data"
[store]
backend = "memory"
[gateway]
listen = "127.0.0.1:$GW_PORT"
[admin]
listen = "127.0.0.1:0"
[cluster]
listen = "127.0.0.1:0"
[auth]
secret = "$SECRET"
TOML
header "player.incr through each client library vs loadgen, one node"
start_routerd node "$WORK/node.toml" "$GW_PORT"

loadgen_run loadgen --addr "127.0.0.1:$GW_PORT" --secret "$SECRET" --workload incr > "$WORK/loadgen.log"
base=$(json_number "$WORK/loadgen.json" throughput)
echo "loadgen:    $base requests/s"

echo "-- python"
py=$(cd "$ROOT/clients/python" && PYTHONPATH=. taskset -c "$LOADGEN_CPUS" "$PYTHON" "$ROOT/bench/clients/python_rps.py" \
  "127.0.0.1:$GW_PORT" "$SECRET" "$CONNECTIONS" "$PIPELINE" "$warmup" "$seconds" | awk '/^rps/ {print $2}')
echo "python:     $py requests/s, ratio to loadgen $(ratio "$py" "$base")"

echo "-- typescript"
ts=$(taskset -c "$LOADGEN_CPUS" node "$ROOT/bench/clients/typescript_rps.mjs" \
  "127.0.0.1:$GW_PORT" "$SECRET" "$CONNECTIONS" "$PIPELINE" "$warmup" "$seconds" | awk '/^rps/ {print $2}')
echo "typescript: $ts requests/s, ratio to loadgen $(ratio "$ts" "$base")"
echo "RATIO python/loadgen = $(ratio "$py" "$base"), typescript/loadgen = $(ratio "$ts" "$base")"
