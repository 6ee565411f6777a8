#!/usr/bin/env bash
# Two builds of the echo baseline (bench/echo: one core of routerd's
# runtime, routerd's framing) through one client, for a change to the
# runtime: the same loadgen drives ECHO_BASE and ECHO_SUBJECT in
# alternating rounds. Each round prints both sides' throughput and the
# server's CPU time per request (utime + stime of the echo process from
# /proc, over the whole run): on a shared machine the CPU per request moves
# far less than the throughput, so it is the figure to compare.
#
#   mkdir ../base && git archive <commit> | tar -x -C ../base && \
#     (cd ../base && cargo build --release -p echo --target-dir ../base-target)
#   ECHO_BASE=../base-target/release/echo PIPELINE=1 bench/echo_build_vs_build.sh
#
# ECHO_SUBJECT defaults to this tree's release build. Prints the median
# ratios SUBJECT / BASE.
set -euo pipefail
source "$(dirname "$0")/common.sh"

: "${ECHO_BASE:?ECHO_BASE=path of the baseline echo binary}"
ROUNDS=${ROUNDS:-5}
ECHO_PORT=${ECHO_PORT:-17502}

# Only the client and the subject: no routerd is run here.
(cd "$ROOT" && cargo build --release -q -p loadgen -p echo)
ECHO_SUBJECT=${ECHO_SUBJECT:-$BIN/echo}
header "echo $ECHO_SUBJECT vs echo $ECHO_BASE (ping), one client (loadgen)"

# cpu_ticks PID: user + system clock ticks the process has used.
cpu_ticks() {
  local ticks
  read -r -a ticks < <(process_ticks "$1")
  echo $((ticks[0] + ticks[1]))
}

CPU_RATIOS=()
for round in $(seq 1 "$ROUNDS"); do
  # Alternate who goes first, so a drift of the machine does not always
  # favour the same side.
  if [ $((round % 2)) -eq 1 ]; then order=(base subject); else order=(subject base); fi
  for side in "${order[@]}"; do
    if [ "$side" = base ]; then binary=$ECHO_BASE; else binary=$ECHO_SUBJECT; fi
    start_background echo "$ECHO_PORT" taskset -c "$SERVER_CPUS" "$binary" \
      --listen "127.0.0.1:$ECHO_PORT" --cpus "${SERVER_CPUS%%,*}"
    ECHO_PID=$STARTED_PID
    before=$(cpu_ticks "$ECHO_PID")
    loadgen_run "$side-$round" --addr "127.0.0.1:$ECHO_PORT" --workload ping > "$WORK/$side-$round.log"
    after=$(cpu_ticks "$ECHO_PID")
    stop_echo
    rps=$(json_number "$WORK/$side-$round.json" throughput)
    # The run's requests: warm-up and measured window at the measured rate
    # (the CPU ticks cover both).
    seconds=$(awk -v d="${DURATION%s}" -v w="${WARMUP%s}" 'BEGIN { print d + w }')
    cpu_us=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v r="$rps" -v s="$seconds" \
      'BEGIN { printf "%.3f", t * 1e6 / hz / (r * s) }')
    printf -v "cpu_$side" '%s' "$cpu_us"
  done
  paired_round "$round" base subject
  CPU_RATIOS+=("$(ratio "$cpu_subject" "$cpu_base")")
  echo "round $round: server CPU per request: base $cpu_base us, subject $cpu_subject us," \
    "ratio ${CPU_RATIOS[-1]}"
done
echo "RATIO subject/base throughput = $(median "${RATIOS[@]}"), p99 = $(median "${P99_RATIOS[@]}")," \
  "server CPU per request = $(median "${CPU_RATIOS[@]}"); CPU rounds: ${CPU_RATIOS[*]}"
