#!/usr/bin/env bash
# A release build of routerd optimized with the profile of a training run
# (profile-guided optimization, PGO): the compiler lays out and inlines the
# code for the branches a loaded node takes. Measured against a plain
# release build with bench/build_vs_build.sh (16 connections x pipeline 16
# in batches, player.incr): 1.04x to 1.14x the throughput, depending on
# the build (see README.md, "A profile-guided build").
#
#   tuning/pgo_build.sh      # prints the binary's path: target/pgo/use/release/routerd
#
# 1. builds routerd instrumented to count what it runs (target/pgo/gen);
# 2. drives it with loadgen through every workload (TRAIN_WORKLOADS, all
#    of loadgen's by default) at three shapes: 16 connections at pipeline
#    1, at pipeline 16 in batches, and 1000 connections; rooms at 64
#    connections (TRAIN_DURATION each, 3 s by default; about a minute);
# 3. merges the counts with llvm-profdata, from the toolchain's llvm-tools
#    component (added with rustup when it is missing: it must be the
#    compiler's own LLVM version);
# 4. builds routerd with them (target/pgo/use).
#
# Each build is a full fat-LTO release build: about three minutes each on
# two cores. The profile describes this tree's code: rebuild after a change
# (a stale profile is not wrong, it only stops helping the functions that
# changed). The bench scripts run this binary with ROUTERD=PATH.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PGO=$ROOT/target/pgo
TRAIN_DURATION=${TRAIN_DURATION:-3s}
TRAIN_WORKLOADS=${TRAIN_WORKLOADS:-ping ping-routed incr mixed room}
SERVER_CPUS=${SERVER_CPUS:-0}
LOADGEN_CPUS=${LOADGEN_CPUS:-1}
cd "$ROOT"

host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
  echo "== adding the llvm-tools component (llvm-profdata)"
  rustup component add llvm-tools
fi

echo "== 1/4 routerd instrumented"
rm -rf "$PGO/profiles"
mkdir -p "$PGO/profiles"
RUSTFLAGS="-Cprofile-generate=$PGO/profiles" \
  cargo build --release -q -p routerd --target-dir "$PGO/gen"
cargo build --release -q -p loadgen

echo "== 2/4 training (server on CPU $SERVER_CPUS, loadgen on CPU $LOADGEN_CPUS, $TRAIN_DURATION per run)"
train() {
  echo "-- $*"
  "$ROOT/target/release/loadgen" --spawn-node --routerd "$PGO/gen/release/routerd" \
    --node-cpus "$SERVER_CPUS" --threads 1 --cpus "$LOADGEN_CPUS" \
    --duration "$TRAIN_DURATION" --warmup 500ms --quiet "$@" > /dev/null
}
for workload in $TRAIN_WORKLOADS; do
  if [ "$workload" = room ]; then
    train --workload room --connections 64 --pipeline 1
    continue
  fi
  train --workload "$workload" --connections 16 --pipeline 1
  train --workload "$workload" --connections 16 --pipeline 16 --batch
  train --workload "$workload" --connections 1000 --pipeline 1
done

echo "== 3/4 merging the profiles"
"$profdata" merge -o "$PGO/routerd.profdata" "$PGO/profiles"

echo "== 4/4 routerd optimized with the profile"
# ROUTERD_PGO_BUILD marks the build: `routerd --version` says 0.1.0+pgo.
ROUTERD_PGO_BUILD=1 RUSTFLAGS="-Cprofile-use=$PGO/routerd.profdata" \
  cargo build --release -q -p routerd --target-dir "$PGO/use"
echo "$PGO/use/release/routerd"
