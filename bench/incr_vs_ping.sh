#!/usr/bin/env bash
# routerd `player.incr` after login (the full routed path: gateway ->
# router -> player object, interval persistence) against `sys.ping` before
# login (gateway + auth service only), on the same node in the same run.
# Goal: incr keeps >= 0.7 of the gateway-only throughput.
# Run by hand: bench/incr_vs_ping.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"

build
header "routerd player.incr (routed, interval) vs sys.ping before login (gateway only)"
loadgen_run ping --spawn-node --node-cpus "$SERVER_CPUS" --workload ping
loadgen_run incr --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-persist interval

ping_rps=$(json_number "$WORK/ping.json" throughput)
incr_rps=$(json_number "$WORK/incr.json" throughput)
ping_p99=$(json_number "$WORK/ping.json" p99_us)
incr_p99=$(json_number "$WORK/incr.json" p99_us)
echo
printf 'ping (gateway)  %12.0f req/s  p99 %10.1f us\n' "$ping_rps" "$ping_p99"
printf 'incr (routed)   %12.0f req/s  p99 %10.1f us\n' "$incr_rps" "$incr_p99"
echo "RATIO incr/ping throughput = $(ratio "$incr_rps" "$ping_rps")  (goal >= 0.7)"
