#!/usr/bin/env bash
# Two builds of routerd through one client: the same loadgen binary drives
# a node of BASE and a node of SUBJECT in alternating rounds, so the ratio
# is the builds' and not the clients'. For a change to the release profile
# or to the code: build the baseline into another target directory first.
#
#   git worktree add /tmp/base-src BASE_COMMIT
#   (cd /tmp/base-src && cargo build --release -p routerd --target-dir /tmp/base)
#   BASE=/tmp/base/release/routerd bench/build_vs_build.sh
#
# Compare builds of the shipped profile (fat LTO, one codegen unit, about
# 5 minutes a build on 2 cores). Builds with LTO off and several codegen
# units are faster to make but inline differently: the same pair of
# commits measured 0.915-0.943 that way and 0.869 as shipped.
#
# SUBJECT defaults to this tree's release build. The shape is the routed
# `player.incr` of incr_vs_redis.sh at pipeline 16 in batches unless
# CONNECTIONS, PIPELINE and WORKLOAD say otherwise (BATCH=0 for a steady
# pipeline). Prints each round and the median ratio SUBJECT / BASE, and
# each node's CPU time per request (user and system), the steadier figure
# on a shared machine.
set -euo pipefail
# Before common.sh, whose defaults (32 connections) give way to these.
CONNECTIONS=${CONNECTIONS:-16}
source "$(dirname "$0")/common.sh"

: "${BASE:?BASE=path of the baseline routerd binary}"
WORKLOAD=${WORKLOAD:-incr}
BATCH=${BATCH:-1}
ROUNDS=${ROUNDS:-5}

build
SUBJECT=${SUBJECT:-$BIN/routerd}
header "routerd $SUBJECT vs routerd $BASE, workload $WORKLOAD, one client (loadgen)"

shape_flags=(--workload "$WORKLOAD")
if [ "$BATCH" = 1 ]; then shape_flags+=(--batch); fi

for round in $(seq 1 "$ROUNDS"); do
  # Alternate who goes first, so a drift of the machine does not always
  # favour the same side.
  if [ $((round % 2)) -eq 1 ]; then order=(base subject); else order=(subject base); fi
  for side in "${order[@]}"; do
    if [ "$side" = base ]; then binary=$BASE; else binary=$SUBJECT; fi
    loadgen_with_cpu "$side-$round" "^$binary " --spawn-node --routerd "$binary" \
      --node-cpus "$SERVER_CPUS" "${shape_flags[@]}" > "$WORK/$side-$round.log"
    cat "$WORK/$side-$round.cpu" >> "$WORK/$side.cpu"
  done
  paired_round "$round" base subject
  echo "         node CPU per request (user system, ns): base $(cat "$WORK/base-$round.cpu")" \
    "| subject $(cat "$WORK/subject-$round.cpu")"
done
echo "RATIO subject/base throughput = $(median "${RATIOS[@]}"), p99 = $(median "${P99_RATIOS[@]}");" \
  "rounds: ${RATIOS[*]} | p99 ${P99_RATIOS[*]}"
for side in base subject; do
  echo "CPU per request, $side (median of rounds): user $(median $(cut -d' ' -f1 "$WORK/$side.cpu")) ns," \
    "system $(median $(cut -d' ' -f2 "$WORK/$side.cpu")) ns"
done
