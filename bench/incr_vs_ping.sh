#!/usr/bin/env bash
# routerd `player.incr` after login (the full routed path: gateway ->
# router -> player object, interval persistence) against `sys.ping` before
# login (gateway + auth service only), on the same node build in the same
# run. Goal: incr keeps >= 0.7 of the gateway-only throughput.
# Run by hand: bench/incr_vs_ping.sh (ROUNDS alternating pairs, 3 by
# default; the median ratio is the result).
set -euo pipefail
source "$(dirname "$0")/common.sh"

build
header "routerd player.incr (routed, interval) vs sys.ping before login (gateway only), $ROUNDS rounds"

for round in $(seq 1 "$ROUNDS"); do
  loadgen_run "ping-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload ping
  loadgen_run "incr-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-persist interval

  paired_round "$round" ping incr
done
echo "RATIO incr/ping throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 0.7)"
