#!/usr/bin/env bash
# Heartbeat write latency while 256 CAS writers saturate the store, on
# SQLite and on PostgreSQL: membership in the object queue and group
# commit (the baseline) against membership on its own lane, in the same
# run; prints p50/p99/max of each and the p99 ratio own/shared, against the
# goal p99 < 125 ms (a quarter of the default 500 ms heartbeat interval).
# Run by hand: bench/heartbeat_lane.sh [SECONDS] (default 10 a case).
# PROFILE=dev measures a debug build (faster to build, same store path:
# the time goes to SQLite, PostgreSQL and the queues).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
  (cd "$ROOT" && cargo build --release -q -p bench --bin heartbeat_lane)
  BIN=$TARGET/release/heartbeat_lane
else
  (cd "$ROOT" && cargo build -q -p bench --bin heartbeat_lane)
  BIN=$TARGET/debug/heartbeat_lane
fi
SECONDS_A_CASE=${1:-10}
"$BIN" sqlite "$SECONDS_A_CASE"
"$BIN" postgres "$SECONDS_A_CASE"
