#!/usr/bin/env bash
# Spin before park: the same routerd build with `cores.spin_before_park_us`
# = 0 (a core with nothing to do sleeps in io_uring_enter at once) and =
# SPIN_US (it busy-polls its ring that long first), player.incr at pipeline
# 1 on 16 connections, node on CPU 0 and loadgen on CPU 1, alternating
# rounds. A spinning core trades idle CPU for the wake-up it saves.
# Run by hand: bench/spin_before_park.sh (SPIN_US=50, ROUNDS=3 by default).
set -euo pipefail
# Before common.sh, whose default (32) would win otherwise.
CONNECTIONS=${CONNECTIONS:-16}
source "$(dirname "$0")/common.sh"

SPIN_US=${SPIN_US:-50}
PIPELINE=1
build
header "routerd player.incr at pipeline 1: spin_before_park_us = $SPIN_US vs 0, $ROUNDS rounds"

for round in $(seq 1 "$ROUNDS"); do
  loadgen_run "park-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-spin-us 0
  loadgen_run "spin-$round" --spawn-node --node-cpus "$SERVER_CPUS" --workload incr --node-spin-us "$SPIN_US"
  paired_round "$round" park spin
done
echo "RATIO spin/park throughput = $(median "${RATIOS[@]}") median of ${RATIOS[*]}"
