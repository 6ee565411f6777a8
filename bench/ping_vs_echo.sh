#!/usr/bin/env bash
# routerd `ping` (before login: gateway + auth service) against a minimal
# glommio echo server with the same framing: the ceiling for any server on
# this stack. Goal: ratio >= 0.85. Run by hand: bench/ping_vs_echo.sh
# (ROUNDS alternating pairs, 3 by default; the median ratio is the result).
set -euo pipefail
source "$(dirname "$0")/common.sh"

ECHO_PORT=${ECHO_PORT:-17500}
build
header "routerd ping vs glommio echo (same framing), $ROUNDS rounds"

ratios=()
for round in $(seq 1 "$ROUNDS"); do
  taskset -c "$SERVER_CPUS" "$BIN/echo" --listen "127.0.0.1:$ECHO_PORT" --cpus "${SERVER_CPUS%%,*}" 2>/dev/null &
  PIDS+=($!)
  wait_port "$ECHO_PORT"
  loadgen_run "echo-$round" --addr "127.0.0.1:$ECHO_PORT" --workload ping
  kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true; PIDS=()

  loadgen_run "routerd-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload ping

  echo_rps=$(json_number "$WORK/echo-$round.json" throughput)
  routerd_rps=$(json_number "$WORK/routerd-$round.json" throughput)
  echo_p99=$(json_number "$WORK/echo-$round.json" p99_us)
  routerd_p99=$(json_number "$WORK/routerd-$round.json" p99_us)
  ratios+=("$(ratio "$routerd_rps" "$echo_rps")")
  printf 'round %d: echo %10.0f req/s p99 %7.1f us | routerd %10.0f req/s p99 %7.1f us | ratio %s\n' \
    "$round" "$echo_rps" "$echo_p99" "$routerd_rps" "$routerd_p99" "${ratios[-1]}"
done
echo "RATIO routerd/echo throughput = $(median "${ratios[@]}") median of ${ratios[*]}  (goal >= 0.85)"
