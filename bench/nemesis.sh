#!/usr/bin/env bash
# The nemesis test (tests/nemesis/) on a longer schedule, in release mode:
# real routerd processes killed, frozen (also inside busy turns), cut off,
# starved and restarted with another core count; the store stopped and
# frozen around each of its timers, its connections reset and delayed;
# SQLite's disk filled; transfers, drains and a node joining with a
# rebalance during faults; a same-id takeover. Then the checker. Prints
# the seed, the timers drawn for the run, the schedule, the summary
# (operations, acknowledged increments, reads, uncertain, failed, share
# answered OK, longest gap, faults by kind, each fault with its time) and
# any violation with the schedule and the operations that show it.
#
# Run by hand: bench/nemesis.sh MINUTES [PERSIST] [STORE]
#   PERSIST: interval (default) or on_write
#   STORE:   sqlite, postgres or both (default)
# Environment, passed through to the test:
#   NEMESIS_SEED=N            replays a run: the schedule and the timers are
#                             drawn from it (printed by every run)
#   NEMESIS_FAULTS=K1,K2      the kinds of fault drawn (names or prefixes of
#                             tests/nemesis/faults.rs KINDS, say store_freeze,kill);
#                             `all` for every kind; default: the kinds on by
#                             default there (what `cargo test` runs)
#   NEMESIS_SAVE_MS=N         router.object_save_interval_ms (default: drawn
#                             from the seed)
#   NEMESIS_STORE_TIMEOUT_MS=N  store.request_timeout_ms (default: drawn)
#   NEMESIS_TIMERS=all        draws the timers among every value tests/nemesis/procs.rs
#                             lists, not only those on by default, and in one run of
#                             two a node (1 to 3) whose lease is twice the others'
#   NEMESIS_LONG_LEASE=N|none that node (N), or none, whatever was drawn
#   NEMESIS_KEYS=0|1          1 (the default here; `cargo test` runs 0): every
#                             increment carries a request key and an uncertain one
#                             is retried with it until answered; the checker
#                             demands exactly-once and prints the keys' ledger
#                             (acknowledged, retried, answered from memory, resent)
#   NEMESIS_NODES (3-5), NEMESIS_PLAYERS, NEMESIS_HISTORY=FILE (every
#   operation, fault and poll, one a line)
# A violation prints the line that replays it. Partitions, the store's
# connection faults on separate nodes and the disk faults need root (`ip
# netns`, tmpfs); without them the run says what it skipped.
# Example: the store frozen repeatedly under interval, 200 ms saves, a 300
# ms store timeout, 10 minutes on PostgreSQL:
#   NEMESIS_FAULTS=store_freeze NEMESIS_SAVE_MS=200 NEMESIS_STORE_TIMEOUT_MS=300 \
#     bench/nemesis.sh 10 interval postgres
set -euo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
  echo "usage: $0 MINUTES [interval|on_write] [sqlite|postgres|both]" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export NEMESIS_SECONDS=$(( $1 * 60 ))
export NEMESIS_PERSIST=${2:-interval}
export NEMESIS_STORE=${3:-both}
export NEMESIS_KEYS=${NEMESIS_KEYS:-1}
case $NEMESIS_PERSIST in interval|on_write) ;; *) echo "PERSIST is interval or on_write" >&2; exit 2;; esac
case $NEMESIS_STORE in sqlite|postgres|both) ;; *) echo "STORE is sqlite, postgres or both" >&2; exit 2;; esac
echo "== nemesis: $1 min a store, persist $NEMESIS_PERSIST, store $NEMESIS_STORE, keys $NEMESIS_KEYS, faults ${NEMESIS_FAULTS:-default}${NEMESIS_SEED:+, seed $NEMESIS_SEED}"
cd "$ROOT"
# One run at a time (the test serializes them anyway); only the schedules
# run, not the standalone takeover tests.
exec cargo test --release -p routerd --test nemesis -- --nocapture --test-threads 1 nemesis_on_
