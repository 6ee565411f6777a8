#!/usr/bin/env bash
# Memory per session: the resident set of a one-core routerd node with
# CONNECTIONS idle client connections (each answered one sys.ping), per
# connection, then with each logged in as a player of its own, per player;
# and for scale the same per-connection figure for bench/echo on the same
# runtime. Goals: at most 1 KB per idle connection and 1.5 KB per logged-in
# player, excluding the kernel's socket buffers (not in the resident set).
# Both are read against a baseline taken after 100 warm-up sessions, so
# what the first session pages in once (the node's code) is not charged
# per session.
# Client and server each hold CONNECTIONS descriptors: keep it under
# `ulimit -n`.
# Run by hand: bench/memory_per_session.sh [CONNECTIONS] (default 10000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CONNECTIONS=${1:-10000}
(cd "$ROOT" && cargo build --release -q -p routerd -p echo && cargo build --release -q -p bench --bin memory_per_session)
echo "== memory per session: $CONNECTIONS connections to one core ($(uname -r), ulimit -n $(ulimit -n))"
"$TARGET/release/memory_per_session" "$TARGET/release/routerd" "$TARGET/release/echo" "$CONNECTIONS"
