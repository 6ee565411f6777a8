#!/usr/bin/env bash
# Connection churn beside idle connections: one core (CPU 0) serves
# connections that each log in as a new player, send one `player.incr` and
# close (loadgen on CPU 1, CONNECTIONS at once), first with no other
# connection open, then while IDLE idle connections are open on the same
# core. The ratio (with idle / without) is the result: a close whose cost
# grows with the core's connections makes it fall (it was 0.24 at 10,000
# idle connections when each close cancelled by descriptor). Rounds
# alternate the two, and the median ratio is printed, with the node's CPU
# time per churn in each.
#
#   bench/churn_with_idle.sh            # IDLE=10000, 3 rounds of 10 s
#
# The idle connections are held by a Python process that only connects
# (the node's idle timeout is raised for the run). Server and holder each
# keep IDLE descriptors: raise `ulimit -n` past it.
set -euo pipefail
CONNECTIONS=${CONNECTIONS:-64}
PIPELINE=1
IDLE=${IDLE:-10000}
source "$(dirname "$0")/common.sh"

PYTHON=${PYTHON:-python3}
SECRET="bench-churn-secret"
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" -lt $((IDLE + 1024)) ]; then
  echo "IDLE=$IDLE needs ulimit -n above $((IDLE + 1024)) (hard limit: $(ulimit -Hn))" >&2
  exit 1
fi

build
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GW_PORT=$(free_port)
ADMIN_PORT=$(free_port)
cat > "$WORK/node.toml" <<TOML
[node]
id = 1
data_dir = "$WORK/data"
[cores]
cpus = [${SERVER_CPUS%%,*}]
[gateway]
listen = "127.0.0.1:$GW_PORT"
idle_timeout_ms = 3600000
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[cluster]
listen = "127.0.0.1:0"
[auth]
secret = "$SECRET"
TOML

# The holder: opens $IDLE connections, says so, and holds them until its
# stdin closes. It connects from another loopback address (127.0.0.2):
# from loadgen's own address, its connections take ephemeral ports of the
# same (source, destination) pair as the churn's, and each churn connect
# then searched the kernel's port tables past them (__inet_hash_connect,
# __inet_check_established: two thirds of loadgen's CPU, the node's core
# two thirds idle). That measured the client's kernel, not the node; a
# gateway's idle clients come from many addresses.
cat > "$WORK/hold.py" <<'PY'
import resource, socket, sys
count, port = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)

def connect_from_other_address(port):
    # The port is picked at connect, not at bind: a port bind() picks is
    # the bind's alone, and 10,000 of them left the churn too few.
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    s.bind(("127.0.0.2", 0))
    s.connect(("127.0.0.1", port))
    return s

held = []
for _ in range(count):
    held.append(connect_from_other_address(port))
print("open", len(held), flush=True)
sys.stdin.read()
PY

sessions() {
  "$PYTHON" - "$ADMIN_PORT" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
print(sum(float(l.split()[-1]) for l in body.splitlines() if l.startswith("routerd_gateway_sessions_active")))
PY
}

header "churn (connect, login, one player.incr, close) beside $IDLE idle connections vs none, one core"
start_routerd node "$WORK/node.toml" "$GW_PORT" "$ADMIN_PORT"
# Serving once /healthz says ok (it owns objects only then).
"$PYTHON" - "$ADMIN_PORT" <<'PY'
import sys, time, urllib.request
for _ in range(600):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz").read().strip() == b"ok":
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit("the node never reported /healthz ok")
PY
churn() {
  loadgen_with_cpu "$1" "^$ROUTERD serve" --addr "127.0.0.1:$GW_PORT" --secret "$SECRET" \
    --workload incr --players 10000000 --requests-per-login 1
  cat "$WORK/$1.cpu" >> "$WORK/${1%-*}.cpu"
}
for round in $(seq 1 "$ROUNDS"); do
  churn "none-$round"
  coproc HOLDER { taskset -c "$LOADGEN_CPUS" "$PYTHON" "$WORK/hold.py" "$IDLE" "$GW_PORT"; }
  read -r _ opened <&"${HOLDER[0]}"
  echo "holder: $opened idle connections open; node sessions active: $(sessions)"
  churn "idle-$round"
  eval "exec ${HOLDER[1]}>&-"
  wait "$HOLDER_PID" 2>/dev/null || true
  sleep 2
  paired_round "$round" "none" "idle"
  echo "         node CPU per churn (user system, ns): none $(cat "$WORK/none-$round.cpu")" \
    "| idle $(cat "$WORK/idle-$round.cpu")"
done
echo "median ratio (churn beside $IDLE idle / churn alone): $(median "${RATIOS[@]}")"
# The node's CPU per churn (connect, login, one incr, close): flat when a
# close costs the same beside any number of connections, whether or not
# the node is what bounds the rate.
for phase in none idle; do
  echo "node CPU per churn, $phase (median of rounds): user $(median $(cut -d' ' -f1 "$WORK/$phase.cpu")) ns," \
    "system $(median $(cut -d' ' -f2 "$WORK/$phase.cpu")) ns"
done
