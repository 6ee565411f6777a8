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

ratios=()
for round in $(seq 1 "$ROUNDS"); do
  loadgen_run "ping-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload ping
  loadgen_run "incr-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-persist interval

  ping_rps=$(json_number "$WORK/ping-$round.json" throughput)
  incr_rps=$(json_number "$WORK/incr-$round.json" throughput)
  ping_p99=$(json_number "$WORK/ping-$round.json" p99_us)
  incr_p99=$(json_number "$WORK/incr-$round.json" p99_us)
  ratios+=("$(ratio "$incr_rps" "$ping_rps")")
  printf 'round %d: ping %10.0f req/s p99 %7.1f us | incr %10.0f req/s p99 %7.1f us | ratio %s\n' \
    "$round" "$ping_rps" "$ping_p99" "$incr_rps" "$incr_p99" "${ratios[-1]}"
done
echo "RATIO incr/ping throughput = $(median "${ratios[@]}") median of ${ratios[*]}  (goal >= 0.7)"
