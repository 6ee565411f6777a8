#!/usr/bin/env bash
# routerd `ping` (before login: gateway + auth service) against a minimal
# glommio echo server with the same framing: the ceiling for any server on
# this stack. Goal: ratio >= 0.85. Run by hand: bench/ping_vs_echo.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"

ECHO_PORT=${ECHO_PORT:-17500}
build
header "routerd ping vs glommio echo (same framing)"

taskset -c "$SERVER_CPUS" "$BIN/echo" --listen "127.0.0.1:$ECHO_PORT" --cpus "${SERVER_CPUS%%,*}" &
PIDS+=($!)
wait_port "$ECHO_PORT"
loadgen_run echo --addr "127.0.0.1:$ECHO_PORT" --workload ping
kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true; PIDS=()

loadgen_run routerd --spawn-node --node-cpus "$SERVER_CPUS" --workload ping

echo_rps=$(json_number "$WORK/echo.json" throughput)
routerd_rps=$(json_number "$WORK/routerd.json" throughput)
echo_p99=$(json_number "$WORK/echo.json" p99_us)
routerd_p99=$(json_number "$WORK/routerd.json" p99_us)
echo
printf 'echo     %12.0f req/s  p99 %10.1f us\n' "$echo_rps" "$echo_p99"
printf 'routerd  %12.0f req/s  p99 %10.1f us\n' "$routerd_rps" "$routerd_p99"
echo "RATIO routerd/echo throughput = $(ratio "$routerd_rps" "$echo_rps")  (goal >= 0.85)"
