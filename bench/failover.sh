#!/usr/bin/env bash
# Failover of a killed owner with the default membership timers (heartbeat
# 500 ms, fence_after 2000 ms, down_after 4000 ms): three nodes on loopback
# sharing one SQLite file, PLAYERS players placed on node 1, one client per
# player on node 2 or 3 sending player.incr; node 1 gets SIGKILL. Prints,
# per player, the time from the kill to its first successful answer (p50,
# p99, p100; goal p100 <= down_after + 1 s) and checks that no player's
# acknowledged values went back.
# Run by hand: bench/failover.sh [PLAYERS] (default 200).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build --release -q -p routerd -p bench --bin failover)
echo "== failover of a killed owner (defaults: heartbeat 500 ms, fence_after 2000 ms, down_after 4000 ms)"
"$TARGET/release/failover" "$TARGET/release/routerd" "${1:-200}"
