#!/usr/bin/env bash
# Routed `player.incr` over TLS (gateway.tls_listen: rustls, records in
# userspace) against plain TCP on the same node, through one client
# (loadgen, --tls), 16 connections at pipeline 1 and at pipeline 16. Goal
# (issue 27): >= 0.8x plaintext at pipeline 16, where one TLS record per
# batch of answers (not one per answer) is what keeps the cost down.
# Run by hand: bench/tls_vs_plain.sh (ROUNDS alternating pairs per shape,
# 3 by default; the median ratios are the result).
set -euo pipefail
# Before common.sh, whose default (32) would win otherwise.
CONNECTIONS=${CONNECTIONS:-16}
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/edge_common.sh"

edge_begin "routerd player.incr over TLS vs plain TCP, one node, one client (loadgen)"
start_edge_node
edge_shape tls-p1 1 "no goal" --addr "127.0.0.1:$TLS_PORT" --tls --ca-file "$WORK/cert.pem"
edge_shape tls-p16 16 "goal >= 0.8" --addr "127.0.0.1:$TLS_PORT" --tls --ca-file "$WORK/cert.pem"
stop_edge_node
edge_summary "TLS / plain"
