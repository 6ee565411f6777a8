#!/usr/bin/env bash
# routerd `sys.ping` before login (gateway + auth service on the accepting
# core) against Redis PING, both echoing the same BODY_BYTES (16 by
# default; Redis gets `PING <body>` and answers it as a bulk string; 0
# sends a bare PING answered +PONG), both driven by loadgen with the same
# connections, pipeline and pinning (server on CPU 0, loadgen on CPU 1).
# Three shapes: 16 connections at pipeline 1 and at pipeline 16 (batches),
# and 1000 connections at pipeline 1. Goal (issue 12): >= 1.0x Redis PING
# at pipeline 1.
# Run by hand: bench/ping_vs_redis.sh (ROUNDS alternating pairs per shape,
# 3 by default; the median ratios are the result; REDIS_BENCHMARK=1 adds
# redis-benchmark's own figures, labelled as another client).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/redis_common.sh"

BODY_BYTES=${BODY_BYTES:-16}
REDIS_BENCHMARK_TEST=ping_mbulk
ensure_redis
build
redis_header "routerd sys.ping before login vs Redis PING ($BODY_BYTES-byte body), one client (loadgen) for both"
start_redis

flags="--workload ping --body-bytes $BODY_BYTES"
compare_shape p1 "$SMALL_CONNECTIONS" 1 "goal >= 1.0" "$flags" "$flags"
compare_shape p16 "$SMALL_CONNECTIONS" 16 "no goal" "$flags" "$flags" --batch
compare_shape "c$MANY_CONNECTIONS" "$MANY_CONNECTIONS" 1 "goal >= 1.0" "$flags" "$flags"

echo
echo "== summary (routerd / Redis, median of $ROUNDS rounds)"
printf '%s\n' "${SUMMARY[@]}"
