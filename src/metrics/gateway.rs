//! The gateway's metrics: its counters (`GatewayStats`, named
//! as docs/protocol.md lists them), the request latency per route, and the
//! requests answered per route and answer code.

use std::time::Duration;

use super::family::{write_family_head, write_histogram_of, Family, Kind, LabelValue};
use super::histogram::Histogram;
use crate::metrics::Counter;
use crate::route::{Direction, RouteTable, ROUTES_MAX};

super::metric_set! {
    /// The gateway's counters and gauges, one set per core.
    pub struct GatewayStats {
        /// Client connections accepted.
        "routerd_gateway_sessions_accepted_total" Counter { sessions_accepted }
        /// Client connections refused because the node's session cap was reached: gateway.sessions_max,
        /// or less where the open-file limit leaves clients fewer descriptors.
        "routerd_gateway_sessions_refused_total" Counter { sessions_refused }
        /// Sessions that had not logged in, closed at the session cap to admit a new connection:
        /// the accepting core's oldest such session goes (a connection is refused only when its
        /// core has none).
        "routerd_gateway_unauthenticated_evicted_total" Counter { unauthenticated_evicted }
        /// Client sessions open.
        "routerd_gateway_sessions_active" Gauge { sessions_active }
        /// Client connections accepted while the core's registered file table
        /// (cores.registered_files) was full: they work, with a descriptor lookup per receive
        /// and send.
        "routerd_gateway_sessions_unregistered_total" Counter { sessions_unregistered }
        /// Client requests the gateway answered with an error before any service saw them, by
        /// reason.
        "routerd_gateway_ingress_rejected_total" Counter (reason) {
            ingress_unknown_route = "unknown_route",
            ingress_direction_rejected = "direction_rejected",
            ingress_auth_required = "auth_required",
            ingress_protocol_violation = "protocol_violation",
            ingress_overloaded = "overloaded",
            ingress_bad_request = "bad_request",
            ingress_rate_limited = "rate_limited",
            ingress_body_undecodable = "body_undecodable",
        }
        /// Frames for clients that the egress gate dropped, by the check that failed.
        "routerd_gateway_egress_rejected_total" Counter (reason) {
            egress_unknown_session = "unknown_session",
            egress_stale_epoch = "stale_epoch",
            egress_owner_mismatch = "owner_mismatch",
            egress_route_not_found = "route_not_found",
            egress_direction_rejected = "direction_rejected",
            egress_send_failed = "send_failed",
            egress_oversized = "oversized",
        }
        /// Sessions bound to a player by a bind that won the epoch compare-and-set.
        "routerd_gateway_binds_total" Counter { binds }
        /// Binds that lost the epoch compare-and-set to another bind.
        "routerd_gateway_binds_epoch_expired_total" Counter { binds_epoch_expired }
        /// Sessions kicked (sys.kicked, then closed).
        "routerd_gateway_kicks_total" Counter { kicks }
        /// Logged-in sessions kicked because the token of their login expired (counted in
        /// routerd_gateway_kicks_total as well).
        "routerd_gateway_token_expired_kicks_total" Counter { token_expired_kicks }
        /// Resumable sessions taken back by auth.resume on a new connection.
        "routerd_gateway_sessions_resumed_total" Counter { sessions_resumed }
        /// auth.resume requests refused, by reason (expired: the session's window passed;
        /// unknown: the token names no session of this node, or was used already; pushes_lost:
        /// more pushes were sent to the session than auth.resume_pushes_max since the client's
        /// last one; kicked: the session was kicked; token_expired: it was kicked because its
        /// login's token expired).
        "routerd_gateway_resumes_refused_total" Counter (reason) {
            resumes_refused_expired = "expired",
            resumes_refused_unknown = "unknown",
            resumes_refused_pushes_lost = "pushes_lost",
            resumes_refused_kicked = "kicked",
            resumes_refused_token_expired = "token_expired",
        }
        /// Detached sessions ended before their resume window passed because their core held
        /// its share of gateway.sessions_max detached sessions: the core's oldest goes first.
        "routerd_gateway_detached_evicted_total" Counter { detached_evicted }
        /// Sessions told to move to another gateway (sys.redirect) because this node drains.
        "routerd_gateway_redirects_total" Counter { redirects }
        /// Redirected sessions the gateway closed when cluster.redirect_grace_ms had passed (the
        /// others closed themselves first).
        "routerd_gateway_redirect_closed_total" Counter { redirect_closed }
        /// Requests refused with UNAVAILABLE because their session's redirect grace had passed.
        "routerd_gateway_redirect_refused_total" Counter { redirect_refused }
        /// Sessions told to move to their player's node (sys.redirect after a login another node
        /// answered, gateway.place_sessions); they are not closed.
        "routerd_gateway_placements_total" Counter { placements }
        /// Logins another node answered that got no placement redirect because that node serves
        /// no listener of the session's transport.
        "routerd_gateway_placements_without_transport_total" Counter { placements_without_transport }
        /// Requests the gateway answered TIMEOUT after gateway.request_timeout_ms.
        "routerd_gateway_timeouts_total" Counter { timeouts }
        /// Answers that arrived after their request was answered (timed out) and were dropped.
        "routerd_gateway_late_answers_total" Counter { late_answers }
        /// Logins the player object admitted after they had ended here (timed out, or the
        /// session closed), undone by an unbound notice so the player is not left bound to them.
        "routerd_gateway_late_logins_undone_total" Counter { late_logins_undone }
        /// Sessions that no longer stood as an object named them, released by an unbound notice
        /// to their player: asked about (a login refused under single because of them), or sent a
        /// push (closed without an unbind reaching the player, or of this node's earlier run).
        "routerd_gateway_stale_sessions_released_total" Counter { stale_sessions_released }
        /// Sessions closed because gateway.send_queue_max frames, or gateway.send_queue_bytes_max
        /// bytes, waited for them.
        "routerd_gateway_slow_readers_closed_total" Counter { slow_readers_closed }
        /// Closing connections reset because they had not sent what they owed within 5 s (a peer
        /// that stopped reading holds the last send in the kernel).
        "routerd_gateway_close_flush_timeouts_total" Counter { close_flush_timeouts }
        /// Batches of successful answers that waited to be written because the node's lease ran
        /// out after they were made (a pause): they leave when a heartbeat renews it.
        "routerd_gateway_answers_held_total" Counter { answers_held }
        /// Sessions closed when the node fenced, because answers made before the fence waited in
        /// them: those answers never leave.
        "routerd_gateway_sessions_closed_at_fence_total" Counter { sessions_closed_at_fence }
        /// Sessions closed after gateway.idle_timeout_ms without a complete frame.
        "routerd_gateway_idle_closed_total" Counter { idle_closed }
        /// TLS handshakes finished, by kind (full, or resumed from a ticket or session id).
        "routerd_gateway_tls_handshakes_total" Counter (kind) {
            tls_handshakes_full = "full",
            tls_handshakes_resumed = "resumed",
        }
        /// TLS connections closed before or during their handshake, by reason (plaintext: the
        /// first bytes were not a TLS record; bad_handshake: rustls refused what followed;
        /// client_hello_timeout: no whole ClientHello within
        /// gateway.tls_client_hello_timeout_ms; handshake_timeout: not done within
        /// gateway.tls_handshake_timeout_ms; evicted: the oldest pending handshake, closed to
        /// admit a new one when gateway.tls_handshakes_max were running on the core; tls_error: a
        /// bad record after the handshake).
        "routerd_gateway_tls_refused_total" Counter (reason) {
            tls_refused_plaintext = "plaintext",
            tls_refused_bad_handshake = "bad_handshake",
            tls_refused_client_hello_timeout = "client_hello_timeout",
            tls_refused_handshake_timeout = "handshake_timeout",
            tls_refused_evicted = "evicted",
            tls_refused_tls_error = "tls_error",
        }
        /// Reloads of gateway.tls_cert_file and gateway.tls_key_file after a change, by result
        /// (a failed one keeps the certificate in use).
        "routerd_gateway_tls_reloads_total" Counter (result) {
            tls_reloads_ok = "ok",
            tls_reloads_failed = "failed",
        }
        /// WebSocket upgrades refused, by HTTP status (400: missing or wrong headers, 403: Origin
        /// not in gateway.websocket_origins, 404: a path other than /, 431: headers too long).
        "routerd_gateway_websocket_upgrades_refused_total" Counter (status) {
            websocket_refused_400 = "400",
            websocket_refused_403 = "403",
            websocket_refused_404 = "404",
            websocket_refused_431 = "431",
        }
        /// WebSocket sessions upgraded.
        "routerd_gateway_websocket_upgrades_total" Counter { websocket_upgrades }
        /// WebSocket connections closed because their upgrade request was not read whole within
        /// gateway.websocket_upgrade_timeout_ms (of the accept, or of the TLS handshake's end).
        "routerd_gateway_websocket_upgrade_timeouts_total" Counter { websocket_upgrade_timeouts }
        /// WebSocket connections the gateway closed for a protocol error, by close code (1002:
        /// framing, e.g. an unmasked client frame or a close frame with a code that may not be
        /// sent; 1003: a text message; 1007: a close reason that is not UTF-8; 1009: a message
        /// over the bound).
        "routerd_gateway_websocket_protocol_errors_total" Counter (code) {
            websocket_closed_1002 = "1002",
            websocket_closed_1003 = "1003",
            websocket_closed_1007 = "1007",
            websocket_closed_1009 = "1009",
        }
        /// Notices sent to the target of a session that ended, by kind (unbound: kicked,
        /// disconnected: the connection ended).
        "routerd_gateway_notices_total" Counter (kind) {
            notices_unbound = "unbound",
            notices_disconnected = "disconnected",
        }
    }
}

/// Client requests from arrival at the gateway to their answer (or the
/// gateway's TIMEOUT), per route: the latency a client sees, less the
/// network. Indexed like the node's `RouteTable` (one histogram per route
/// the table can hold); only client-to-server routes are requests, so the
/// others stay empty and are not exported. Not timed: requests refused at
/// ingress (counted by reason instead) and the rare ERROR the gateway
/// answers itself when a session's target is gone
/// (`GatewayCore::answer_error`, which is given no clock reading).
#[derive(Debug)]
pub struct RequestLatency {
    by_route: Box<[Histogram]>,
}

impl Default for RequestLatency {
    fn default() -> Self {
        RequestLatency {
            by_route: (0..ROUTES_MAX).map(|_| Histogram::default()).collect(),
        }
    }
}

impl RequestLatency {
    /// Records one answered request of the route at `route_index` in the
    /// node's route table, on the core that owns its session.
    pub fn record(&self, route_index: usize, elapsed: Duration) {
        if let Some(histogram) = self.by_route.get(route_index) {
            histogram.record(elapsed);
        }
    }

    /// The histogram of the route at `route_index`.
    pub fn route(&self, route_index: usize) -> Option<&Histogram> {
        self.by_route.get(route_index)
    }
}

/// The `code` label's values: `OK` for a RESPONSE, the protocol's name of
/// an ERROR's code (docs/protocol.md), `OTHER` for a code the protocol
/// does not list (an object type's own). Indexed by [`answer_slot`].
pub const ANSWER_CODES: [&str; ANSWER_SLOTS] = [
    "OK",
    "UNKNOWN_ROUTE",
    "DIRECTION_REJECTED",
    "AUTH_REQUIRED",
    "AUTH_FAILED",
    "BAD_REQUEST",
    "OVERLOADED",
    "UNAVAILABLE",
    "TIMEOUT",
    "INTERNAL",
    "OTHER",
];

/// One slot for OK, one per protocol error code, one for the rest.
const ANSWER_SLOTS: usize = 11;

/// The slot of an answer: `None` for a RESPONSE, `Some(code)` for an ERROR.
pub fn answer_slot(error_code: Option<u16>) -> usize {
    match error_code {
        None => 0,
        Some(code) => match wire::client::ErrorCode::from_u16(code) {
            Some(known) => usize::from(known as u16),
            None => ANSWER_SLOTS - 1,
        },
    }
}

/// Client requests answered, per route (indexed like the node's
/// `RouteTable`) and answer code: the numerator and denominator of a
/// route's error ratio. Counted where the latency is recorded (the same
/// requests: admitted, then answered or timed out), and where the gateway
/// answers an ERROR itself without a clock reading.
#[derive(Debug)]
pub struct RequestCounts {
    by_route_code: Box<[Counter]>,
}

impl Default for RequestCounts {
    fn default() -> Self {
        RequestCounts {
            by_route_code: (0..ROUTES_MAX * ANSWER_SLOTS)
                .map(|_| Counter::default())
                .collect(),
        }
    }
}

impl RequestCounts {
    /// Counts one answer of the route at `route_index`, in `slot`
    /// ([`answer_slot`]); a route past the table's bound is not counted.
    pub fn count(&self, route_index: usize, slot: usize) {
        if slot < ANSWER_SLOTS {
            if let Some(counter) = self.by_route_code.get(route_index * ANSWER_SLOTS + slot) {
                counter.inc();
            }
        }
    }

    /// The answers of the route at `route_index` in `slot`.
    pub fn get(&self, route_index: usize, slot: usize) -> u64 {
        if slot >= ANSWER_SLOTS {
            return 0;
        }
        self.by_route_code
            .get(route_index * ANSWER_SLOTS + slot)
            .map_or(0, Counter::get)
    }
}

const REQUESTS_TOTAL: &str = "routerd_gateway_requests_total";

/// `routerd_gateway_requests_total{route, code}` for every client-to-server
/// route of `routes` and every code, zero included (a rate over it starts
/// at the first scrape), summed over `cores`.
pub(super) fn write_request_counts<'s>(
    out: &mut String,
    routes: &RouteTable,
    cores: impl Iterator<Item = &'s RequestCounts> + Clone,
) {
    use std::fmt::Write as _;
    let family = Family::<()> {
        name: REQUESTS_TOTAL,
        help: "Client requests answered, by route and answer code (OK, a protocol error code's \
               name such as TIMEOUT, or OTHER).",
        kind: Kind::Counter,
        label: None,
        series: &[],
    };
    write_family_head(out, &family);
    for (index, route) in routes.routes().iter().enumerate() {
        if route.direction != Direction::ClientToServer {
            continue;
        }
        for (slot, code) in ANSWER_CODES.iter().enumerate() {
            let total: u64 = cores.clone().map(|core| core.get(index, slot)).sum();
            // Writing into a String cannot fail.
            let _ = writeln!(
                out,
                "{REQUESTS_TOTAL}{{route=\"{}\",code=\"{code}\"}} {total}",
                LabelValue(route.name)
            );
        }
    }
}

/// The name, help and label of the request latency family.
pub(super) const REQUEST_LATENCY: Family<RequestLatency> = Family {
    name: "routerd_gateway_request_duration_seconds",
    help: "Client requests from their arrival at the gateway to their answer or TIMEOUT, by \
           route.",
    kind: Kind::Histogram,
    label: Some("route"),
    series: &[],
};

/// Renders the request latency of every client-to-server route of
/// `routes`, summed over `cores`; allocates nothing but `out`'s growth.
pub(super) fn write_request_latency<'s>(
    out: &mut String,
    routes: &RouteTable,
    cores: impl Iterator<Item = &'s RequestLatency> + Clone,
) {
    write_family_head(out, &REQUEST_LATENCY);
    for (index, route) in routes.routes().iter().enumerate() {
        if route.direction != Direction::ClientToServer {
            continue;
        }
        let histograms = cores.clone().filter_map(move |core| core.route(index));
        write_histogram_of(
            out,
            REQUEST_LATENCY.name,
            REQUEST_LATENCY.label,
            route.name,
            histograms,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_the_table_can_hold_has_a_histogram() {
        let latency = RequestLatency::default();
        assert!(latency.route(ROUTES_MAX - 1).is_some());
        assert!(latency.route(ROUTES_MAX).is_none());
        latency.record(ROUTES_MAX, Duration::from_millis(1));
    }

    #[test]
    fn answers_are_counted_by_route_and_code_within_the_bounds() {
        let counts = RequestCounts::default();
        counts.count(3, answer_slot(None));
        counts.count(3, answer_slot(Some(8)));
        counts.count(3, answer_slot(Some(8)));
        counts.count(3, answer_slot(Some(40_000)));
        // Past the table or the slots: dropped, not another route's count.
        counts.count(ROUTES_MAX, 0);
        counts.count(2, ANSWER_SLOTS);
        assert_eq!(counts.get(3, 0), 1);
        assert_eq!(ANSWER_CODES[answer_slot(Some(8))], "TIMEOUT");
        assert_eq!(counts.get(3, answer_slot(Some(8))), 2);
        assert_eq!(counts.get(3, ANSWER_SLOTS - 1), 1);
        assert_eq!(counts.get(4, 0), 0);
        assert_eq!(counts.get(ROUTES_MAX, 0), 0);
        assert_eq!(counts.get(2, ANSWER_SLOTS), 0);
        // Every protocol code has its own slot, named as the protocol names it.
        for code in wire::client::ErrorCode::ALL {
            assert_eq!(ANSWER_CODES[answer_slot(Some(code as u16))], code.name());
        }
    }
}
