#!/usr/bin/env bash
# The question that moved routerd's cores off glommio, kept measurable: the
# same minimal echo server (bench/echo: routerd's framing, one pinned core)
# on glommio 0.9, whose rings run completion work by interrupt, and on
# routerd's runtime with its rings set up SINGLE_ISSUER|DEFER_TASKRUN
# ("defer", what routerd runs) and COOP_TASKRUN ("coop"), all driven by
# loadgen at pipeline 1 and 16. Prints each side's throughput and p99 and
# the median ratios against glommio.
# Run by hand: bench/runtime_vs_glommio.sh (ROUNDS rounds, 3 by default).
set -euo pipefail
source "$(dirname "$0")/common.sh"

ECHO_PORT=${ECHO_PORT:-17501}
build
header "echo on routerd's runtime (defer, coop) vs echo on glommio, $ROUNDS rounds"

# run_echo NAME ARGS...: starts the echo with ARGS, runs loadgen as NAME.
run_echo() {
  local name=$1
  shift
  start_echo "$@"
  loadgen_run "$name" --addr "127.0.0.1:$ECHO_PORT" --workload ping
  stop_echo
}

for shape in "16 1" "32 16"; do
  read -r CONNECTIONS PIPELINE <<<"$shape"
  defer_ratios=()
  coop_ratios=()
  echo "== $CONNECTIONS connections x pipeline $PIPELINE"
  for round in $(seq 1 "$ROUNDS"); do
    run_echo "glommio-$round" --runtime glommio
    run_echo "defer-$round" --runtime shards
    run_echo "coop-$round" --runtime shards --taskrun coop
    RATIOS=()
    paired_round "$round" glommio defer
    defer_ratios+=("${RATIOS[-1]}")
    paired_round "$round" glommio coop
    coop_ratios+=("${RATIOS[-1]}")
  done
  echo "RATIO defer/glommio throughput = $(median "${defer_ratios[@]}") median of ${defer_ratios[*]}"
  echo "RATIO coop/glommio throughput  = $(median "${coop_ratios[@]}") median of ${coop_ratios[*]}"
done
