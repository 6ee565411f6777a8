#!/usr/bin/env bash
# The nemesis test (tests/nemesis/) on a longer schedule, in release mode:
# real routerd processes killed, frozen, cut off and starved, the store
# stopped and frozen, a same-id takeover; then the checker. Prints the
# seed, the schedule, the summary (operations, acknowledged, uncertain,
# failed, share answered OK, longest gap, each fault with its time) and
# any violation with the operations that show it.
# Run by hand: bench/nemesis.sh MINUTES [PERSIST] [STORE]
#   PERSIST: interval (default) or on_write
#   STORE:   sqlite, postgres or both (default)
# NEMESIS_SEED=N replays a schedule; NEMESIS_FAULTS (say freeze_mid,kill),
# NEMESIS_NODES (3-5), NEMESIS_PLAYERS and NEMESIS_HISTORY=FILE pass
# through. Partitions need root and `ip netns`.
set -euo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
  echo "usage: $0 MINUTES [interval|on_write] [sqlite|postgres|both]" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export NEMESIS_SECONDS=$(( $1 * 60 ))
export NEMESIS_PERSIST=${2:-interval}
export NEMESIS_STORE=${3:-both}
case $NEMESIS_PERSIST in interval|on_write) ;; *) echo "PERSIST is interval or on_write" >&2; exit 2;; esac
case $NEMESIS_STORE in sqlite|postgres|both) ;; *) echo "STORE is sqlite, postgres or both" >&2; exit 2;; esac
echo "== nemesis: $1 min a store, persist $NEMESIS_PERSIST, store $NEMESIS_STORE"
cd "$ROOT"
# One run at a time (the test serializes them anyway); only the schedules
# run, not the standalone takeover tests.
exec cargo test --release -p routerd --test nemesis -- --nocapture --test-threads 1 nemesis_on_
