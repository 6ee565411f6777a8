#!/usr/bin/env bash
# routerd `incr` with persist = "on_write" (acknowledged after the save
# commits) against persist = "interval". Goal: ratio >= 0.3.
# Run by hand: bench/onwrite_vs_interval.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"

build
header "routerd incr: persist on_write vs interval"
loadgen_run interval --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-persist interval
loadgen_run on_write --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-persist on-write

interval_rps=$(json_number "$WORK/interval.json" throughput)
onwrite_rps=$(json_number "$WORK/on_write.json" throughput)
interval_p99=$(json_number "$WORK/interval.json" p99_us)
onwrite_p99=$(json_number "$WORK/on_write.json" p99_us)
echo
printf 'interval  %12.0f req/s  p99 %10.1f us\n' "$interval_rps" "$interval_p99"
printf 'on_write  %12.0f req/s  p99 %10.1f us\n' "$onwrite_rps" "$onwrite_p99"
echo "RATIO on_write/interval throughput = $(ratio "$onwrite_rps" "$interval_rps")  (goal >= 0.3)"
