#!/usr/bin/env bash
# Routed `player.incr` over WebSocket (gateway.websocket_listen: RFC 6455
# framing, one binary message per batch each way) against plain TCP on the
# same node, through one client (loadgen, --websocket), 16 connections at
# pipeline 16 (and pipeline 1 for the record). Goal (issue 27): >= 0.85x
# plaintext at pipeline 16. WSS=1 measures WebSocket over TLS as well.
# Run by hand: bench/websocket_vs_plain.sh (ROUNDS alternating pairs per
# shape, 3 by default; the median ratios are the result).
set -euo pipefail
# Before common.sh, whose default (32) would win otherwise.
CONNECTIONS=${CONNECTIONS:-16}
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/edge_common.sh"

edge_begin "routerd player.incr over WebSocket vs plain TCP, one node, one client (loadgen)"
start_edge_node
edge_shape ws-p16 16 "goal >= 0.85" --addr "127.0.0.1:$WS_PORT" --websocket
edge_shape ws-p1 1 "no goal" --addr "127.0.0.1:$WS_PORT" --websocket
stop_edge_node
if [ "${WSS:-0}" = 1 ]; then
  start_edge_node true
  edge_shape wss-p16 16 "no goal" --addr "127.0.0.1:$WS_PORT" --websocket --tls --ca-file "$WORK/cert.pem"
  stop_edge_node
fi
edge_summary "WebSocket / plain"
