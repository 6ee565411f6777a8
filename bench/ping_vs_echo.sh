#!/usr/bin/env bash
# routerd `ping` (before login: gateway + auth service) against a minimal
# echo server with the same framing on the same runtime and ring setup: the
# ceiling for any server on this stack. Goal: ratio >= 0.85. Run by hand: bench/ping_vs_echo.sh
# (ROUNDS alternating pairs, 3 by default; the median ratio is the result).
set -euo pipefail
source "$(dirname "$0")/common.sh"

ECHO_PORT=${ECHO_PORT:-17500}
build
header "routerd ping vs echo (same framing, same runtime), $ROUNDS rounds"

for round in $(seq 1 "$ROUNDS"); do
  start_echo
  loadgen_run "echo-$round" --addr "127.0.0.1:$ECHO_PORT" --workload ping
  stop_echo

  loadgen_run "routerd-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload ping

  paired_round "$round" echo routerd
done
echo "RATIO routerd/echo throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}  (goal >= 0.85)"
