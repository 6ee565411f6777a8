#!/usr/bin/env bash
# routerd `player.incr` after login (the full routed path: gateway ->
# router -> player object, interval persistence) against Redis INCR on one
# key per connection (`player:<id>`, one player per connection as on
# routerd), both driven by loadgen with the same connections, pipeline and
# pinning (server on CPU 0, loadgen on CPU 1). Three shapes: 16 connections
# at pipeline 1 and at pipeline 16 (batches), and 1000 connections at
# pipeline 1. Goals: throughput >= 1.3x Redis at pipeline 1, >= 1.5x at
# pipeline 16, >= 1.3x with 1000 connections, p99 no worse.
# Run by hand: bench/incr_vs_redis.sh (ROUNDS alternating pairs per shape,
# 3 by default; the median ratios are the result; REDIS_BENCHMARK=1 adds
# redis-benchmark's own figures, labelled as another client).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/redis_common.sh"

REDIS_BENCHMARK_TEST=incr
ensure_redis
build
redis_header "routerd player.incr (routed) vs Redis INCR, one client (loadgen) for both"
start_redis

compare_shape p1 "$SMALL_CONNECTIONS" 1 "goals >= 1.3, p99 <= 1.0" "--workload incr" "--workload incr"
compare_shape p16 "$SMALL_CONNECTIONS" 16 "goals >= 1.5, p99 <= 1.0" "--workload incr" "--workload incr" --batch
compare_shape "c$MANY_CONNECTIONS" "$MANY_CONNECTIONS" 1 "goals >= 1.3, p99 <= 1.0" "--workload incr" "--workload incr"

echo
echo "== summary (routerd / Redis, median of $ROUNDS rounds)"
printf '%s\n' "${SUMMARY[@]}"
