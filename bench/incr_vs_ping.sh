#!/usr/bin/env bash
# routerd `player.incr` after login (the full routed path: gateway ->
# router -> player object, interval persistence) against `sys.ping` before
# login (gateway + auth service only) and against the echo baseline of
# ping_vs_echo.sh, on the same node build in the same run. Goal: the
# routed path keeps >= 0.8 of the echo baseline's throughput; incr/ping
# says how much of that the router costs beside the gateway.
# Run by hand: bench/incr_vs_ping.sh (ROUNDS alternating triples, 3 by
# default; the median ratios are the result).
#
# At the default shape (32 connections at pipeline 16) one loadgen thread
# is nearly saturated by the echo and by ping (about 97% of its CPU), so
# those two baselines are close to the client's ceiling: the ratios say how
# far the routed path is from it.
set -euo pipefail
source "$(dirname "$0")/common.sh"

ECHO_PORT=${ECHO_PORT:-17500}
build
header "routerd player.incr (routed, interval) vs sys.ping before login (gateway only) vs echo, $ROUNDS rounds"

ECHO_RATIOS=()
for round in $(seq 1 "$ROUNDS"); do
  start_echo
  loadgen_run "echo-$round" --addr "127.0.0.1:$ECHO_PORT" --workload ping
  stop_echo

  loadgen_run "ping-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload ping
  loadgen_run "incr-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-persist interval

  paired_round "$round" echo incr
  ECHO_RATIOS+=("${RATIOS[-1]}")
  unset 'RATIOS[-1]'
  paired_round "$round" ping incr
done
echo "RATIO incr/ping throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}"
echo "RATIO incr/echo throughput = $(median "${ECHO_RATIOS[@]}") median of ${ECHO_RATIOS[*]}  (goal >= 0.8)"
