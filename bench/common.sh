# Shared helpers of the whole-system bench scripts (sourced, not run).
# Every script measures routerd and its baseline in the same run with the
# same connections, pipeline depth and duration, and prints the ratio.

CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
# The server under test gets CPU 0, the generator CPU 1 (on a 2-CPU machine).
SERVER_CPUS=${SERVER_CPUS:-0}
LOADGEN_CPUS=${LOADGEN_CPUS:-1}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release
# The routerd binary the scripts run: this tree's release build, or
# ROUTERD=PATH (the profile-guided build of tuning/pgo_build.sh, say).
ROUTERD=${ROUTERD:-$BIN/routerd}
WORK=$(mktemp -d -t routerd-bench.XXXXXX)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

header() {
  echo "== $1"
  echo "routerd: $ROUTERD ($("$ROUTERD" --version 2>/dev/null || echo "not built"))"
  echo "machine: $(nproc) CPUs ($(uname -m), $(uname -r)); server on CPU(s) $SERVER_CPUS, loadgen on CPU(s) $LOADGEN_CPUS"
  echo "load: $CONNECTIONS connections x pipeline $PIPELINE, warm-up $WARMUP, $DURATION measured"
  echo "WARNING: absolute figures drift on a shared 2-core machine (other work, turbo, noisy neighbours);"
  echo "         the ratio measured in this run is the result."
}

# build: this tree's release binaries; BUILD=0 runs those already built.
build() {
  if [ "${BUILD:-1}" = 0 ]; then return 0; fi
  (cd "$ROOT" && cargo build --release -q -p loadgen -p echo -p routerd "$@")
}

# json_number FILE KEY: the first numeric value of "KEY" in loadgen's JSON.
json_number() {
  grep -m1 "\"$2\":" "$1" | sed -E 's/.*: *([-0-9.eE+]+).*/\1/'
}

# start_background NAME PORT COMMAND...: runs COMMAND in the background,
# its stderr appended to $WORK/NAME.log, known to the exit trap (so a
# failed run does not leave it listening), and waits until PORT accepts.
# STARTED_PID is its pid.
start_background() {
  local name=$1 port=$2
  shift 2
  "$@" 2>>"$WORK/$name.log" &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
  wait_port "$port"
}

# stop_background PID PORT: stops what start_background started, and waits
# until its listener on PORT is gone: it outlives the process by
# milliseconds (its ring holds it; shards/src/net/claim.rs), long enough
# for the next start's wait_port to connect to it instead of the new one.
stop_background() {
  local stopped=$1 port=$2
  kill "$stopped"
  wait "$stopped" 2>/dev/null || true
  wait_port_closed "$port"
  local pid others=()
  for pid in "${PIDS[@]}"; do
    if [ "$pid" != "$stopped" ]; then others+=("$pid"); fi
  done
  PIDS=("${others[@]}")
}

# start_routerd NAME CONFIG PORT...: `routerd serve --config CONFIG` pinned
# to $SERVER_CPUS (log: $WORK/NAME.log), once every PORT accepts.
# NODE_PID is its pid.
start_routerd() {
  local name=$1 config=$2 port
  shift 2
  start_background "$name" "$1" taskset -c "$SERVER_CPUS" "$ROUTERD" serve --config "$config"
  NODE_PID=$STARTED_PID
  for port in "$@"; do wait_port "$port"; done
}

# start_echo ARGS...: the echo baseline (bench/echo) with ARGS on
# $ECHO_PORT, pinned like routerd (log: $WORK/echo.log).
start_echo() {
  start_background echo "$ECHO_PORT" taskset -c "$SERVER_CPUS" "$BIN/echo" \
    --listen "127.0.0.1:$ECHO_PORT" --cpus "${SERVER_CPUS%%,*}" "$@"
  ECHO_PID=$STARTED_PID
}

stop_echo() {
  stop_background "$ECHO_PID" "$ECHO_PORT"
}

# wait_port_closed PORT: returns once nothing accepts connections on PORT.
wait_port_closed() {
  local port=$1
  for _ in $(seq 1 200); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.01
  done
  echo "something still listens on port $port" >&2
  return 1
}

wait_port() {
  local port=$1
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  echo "nothing listens on port $port" >&2
  return 1
}

# loadgen_run NAME ARGS...: runs loadgen with the common load, JSON into
# $WORK/NAME.json; a failed run (exit 1) is reported and fails the script.
# A node it spawns runs $ROUTERD unless ARGS name another (--routerd).
loadgen_run() {
  local name=$1
  shift
  local node=()
  if [[ " $* " == *" --spawn-node "* && " $* " != *" --routerd "* ]]; then
    node=(--routerd "$ROUTERD")
  fi
  echo "-- $name"
  "$BIN/loadgen" --connections "$CONNECTIONS" --pipeline "$PIPELINE" \
    --duration "$DURATION" --warmup "$WARMUP" --threads 1 --cpus "$LOADGEN_CPUS" \
    --json "$WORK/$name.json" --quiet "${node[@]}" "$@"
}

# seconds_of DURATION: loadgen's "6s" or "500ms" in seconds.
seconds_of() {
  case $1 in
    *ms) awk -v v="${1%ms}" 'BEGIN { print v / 1000 }' ;;
    *s) echo "${1%s}" ;;
    *) echo "$1" ;;
  esac
}

# process_ticks PID: the user and system clock ticks PID has used, read
# past the command's parentheses in /proc/PID/stat (a command name may hold
# spaces): there state is field 3, utime 14 and stime 15.
process_ticks() {
  local fields
  read -r -a fields < <(sed 's/.*) //' "/proc/$1/stat")
  echo "${fields[11]} ${fields[12]}"
}

# loadgen_with_cpu NAME PATTERN ARGS...: loadgen_run NAME ARGS, and the CPU
# time per request (user and system, in ns, from /proc/PID/stat) of the
# newest process whose command line matches PATTERN (pgrep -f), over a
# window inside the measured run, written as "user sys" to $WORK/NAME.cpu.
# Throughput moves with a shared machine's noise, a server's CPU per
# request much less; and a server that is not the bottleneck shows only
# here.
loadgen_with_cpu() {
  local name=$1 pattern=$2
  shift 2
  loadgen_run "$name" "$@" &
  local run=$! warmup duration pid start end t_start t_end
  warmup=$(seconds_of "$WARMUP")
  duration=$(seconds_of "$DURATION")
  # The server is up and the warm-up over within 2 s past the warm-up;
  # the window ends before the measured run does.
  sleep "$(awk -v w="$warmup" 'BEGIN { print w + 2 }')"
  pid=$(pgrep -n -f "$pattern")
  read -r -a start < <(process_ticks "$pid")
  t_start=$(date +%s.%N)
  sleep "$(awk -v d="$duration" 'BEGIN { print d - 2 }')"
  read -r -a end < <(process_ticks "$pid")
  t_end=$(date +%s.%N)
  wait "$run"
  awk -v rps="$(json_number "$WORK/$name.json" throughput)" -v clk="$(getconf CLK_TCK)" \
    -v user=$((end[0] - start[0])) -v sys=$((end[1] - start[1])) -v t0="$t_start" -v t1="$t_end" \
    'BEGIN { n = rps * (t1 - t0); printf "%.1f %.1f\n", user / clk * 1e9 / n, sys / clk * 1e9 / n }' \
    > "$WORK/$name.cpu"
}

ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'
}

# Rounds of a paired comparison: the baseline and the subject alternate,
# each round gives its own ratio, and the median ratio is the result, so a
# drift of the machine during one run does not decide it.
ROUNDS=${ROUNDS:-3}
RATIOS=()
P99_RATIOS=()

# paired_round ROUND BASE SUBJECT: from $WORK/BASE-ROUND.json and
# $WORK/SUBJECT-ROUND.json, prints the round's figures and appends the
# ratios SUBJECT/BASE of throughput to RATIOS and of p99 to P99_RATIOS.
paired_round() {
  local round=$1 base=$2 subject=$3
  local base_rps subject_rps base_p99 subject_p99
  base_rps=$(json_number "$WORK/$base-$round.json" throughput)
  subject_rps=$(json_number "$WORK/$subject-$round.json" throughput)
  base_p99=$(json_number "$WORK/$base-$round.json" p99_us)
  subject_p99=$(json_number "$WORK/$subject-$round.json" p99_us)
  RATIOS+=("$(ratio "$subject_rps" "$base_rps")")
  P99_RATIOS+=("$(ratio "$subject_p99" "$base_p99")")
  printf 'round %d: %s %10.0f req/s p99 %7.1f us | %s %10.0f req/s p99 %7.1f us | ratio %s\n' \
    "$round" "$base" "$base_rps" "$base_p99" "$subject" "$subject_rps" "$subject_p99" "${RATIOS[-1]}"
  # A refused request is answered fast and counts for nothing: a run with
  # refusals measured something else than its workload.
  local run failed
  for run in "$base" "$subject"; do
    failed=$(json_number "$WORK/$run-$round.json" failed)
    if [[ -n $failed && $failed != 0 ]]; then
      echo "WARNING round $round: $run had $failed failed requests; its throughput is not the workload's"
    fi
  done
}

# median NUMBERS...: the median (the mean of the middle two for an even count).
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "n/a"; exit }
    if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
