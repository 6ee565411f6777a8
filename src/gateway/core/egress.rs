//! Frames for a client from its session's target: the egress gate's six
//! checks in their fixed order, the answer's request accounting, and the
//! latency an answered request records.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use wire::client::{encode_error_body, ErrorCode, FrameKind};

use super::resume::number_push;
use super::{Entry, GatewayCore, PushError};
use crate::gateway::body_codec::encode_answer;
use crate::route::{Direction, RouteBody};

/// A frame for a client, from a session's target (a RESPONSE, ERROR or
/// PUSH), borrowed from a `ClientEgress` message or built locally.
#[derive(Clone, Copy, Debug)]
pub struct EgressRef<'a> {
    pub session_id: u64,
    pub session_epoch: u32,
    pub player_id: u64,
    pub kind: u8,
    pub route_id: u32,
    pub seq: u32,
    pub body: &'a [u8],
    /// For an answer, the session's connection that sent the request
    /// (`Ingress::connection`): one the session moved on from since is
    /// late. `None` for a PUSH, and for a frame from another core or node
    /// (`ClientEgress` does not carry it: answers are made on the
    /// session's own core).
    pub connection: Option<u32>,
}

/// Why the egress gate dropped a frame, in the gate's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressRejected {
    #[error("unknown session")]
    UnknownSession,
    #[error("stale epoch")]
    StaleEpoch,
    #[error("owner mismatch")]
    OwnerMismatch,
    #[error("route not found")]
    RouteNotFound,
    #[error("direction rejected")]
    DirectionRejected,
    /// A RESPONSE or ERROR for a request that is no longer in flight (it
    /// timed out, or was answered already): request accounting, not one of
    /// the six checks.
    #[error("late answer")]
    LateAnswer,
    #[error("send failed")]
    SendFailed,
    /// A PUSH whose body is longer than `gateway.body_max_bytes`, which a
    /// client need not accept (docs/protocol.md, section 1).
    #[error("push longer than gateway.body_max_bytes")]
    Oversized,
}

/// A request the egress gate saw answered, for the latency histogram.
#[derive(Clone, Copy)]
pub(super) struct Answered {
    /// The route's index in the node's `RouteTable`.
    pub(super) route_index: usize,
    pub(super) deadline: Instant,
    /// The answer's slot in the requests counter (`metrics::answer_slot`).
    pub(super) answer_slot: usize,
}

/// Request accounting: an answer must close an in-flight request of the
/// same route, sent on the session's connection of now, else it is late
/// (timed out already, or sent on a connection a resume replaced) and
/// dropped.
fn close_request(
    entry: &mut Entry,
    egress: &EgressRef<'_>,
    kind: FrameKind,
    route_index: usize,
) -> Result<Answered, EgressRejected> {
    if egress
        .connection
        .is_some_and(|connection| connection != entry.connection())
    {
        return Err(EgressRejected::LateAnswer);
    }
    match entry.inflight.remove(egress.seq) {
        Some(inflight) if inflight.route_id == egress.route_id => Ok(Answered {
            route_index,
            deadline: inflight.deadline,
            answer_slot: crate::metrics::answer_slot(error_code_of(kind, egress.body)),
        }),
        Some(other) => {
            // Another route's request under this seq stays in flight.
            entry.inflight.insert(egress.seq, other);
            Err(EgressRejected::LateAnswer)
        }
        None => Err(EgressRejected::LateAnswer),
    }
}

/// The ERROR code an answer carries; `None` for a RESPONSE. An ERROR body
/// too short for a code counts as a code the protocol does not list.
pub(super) fn error_code_of(kind: FrameKind, body: &[u8]) -> Option<u16> {
    match kind {
        FrameKind::Error => Some(match body {
            [low, high, ..] => u16::from_le_bytes([*low, *high]),
            _ => u16::MAX,
        }),
        _ => None,
    }
}

/// Logs a warning at most once per `WARN_INTERVAL` per reason, with the
/// count suppressed since, so a flood of stale replies cannot flood the log.
#[derive(Default)]
pub(super) struct WarnLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

const WARN_INTERVAL: Duration = Duration::from_secs(1);

impl WarnLimiter {
    pub(super) fn warn(
        &mut self,
        now: Instant,
        reason: EgressRejected,
        session_id: u64,
        route_id: u32,
    ) {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < WARN_INTERVAL => {
                self.suppressed += 1;
            }
            _ => {
                tracing::warn!(%reason, session_id, route_id, suppressed = self.suppressed, "egress dropped");
                self.last = Some(now);
                self.suppressed = 0;
            }
        }
    }
}

impl GatewayCore {
    /// The egress gate: its six checks in order, then the write.
    /// Fire-and-forget: a rejected frame is counted and logged (rate
    /// limited), never answered.
    pub fn egress(&mut self, egress: &EgressRef<'_>, now: Instant) -> Result<(), EgressRejected> {
        self.egress_with_clock(egress, || now)
    }

    /// [`Self::egress`] that reads `clock` only when it answers a request
    /// (for the request latency histogram) or must log a drop: the driver
    /// passes `Instant::now`, so a PUSH costs no clock read.
    pub fn egress_with_clock(
        &mut self,
        egress: &EgressRef<'_>,
        clock: impl FnOnce() -> Instant,
    ) -> Result<(), EgressRejected> {
        let result = self.gate(egress);
        if let Ok(Some(answered)) = result {
            self.record_latency(answered, clock());
            return Ok(());
        }
        if let Err(reason) = result {
            let stats = &self.metrics.gateway;
            let (counter, slot) = match reason {
                EgressRejected::UnknownSession => (&stats.egress_unknown_session, 0),
                EgressRejected::StaleEpoch => (&stats.egress_stale_epoch, 1),
                EgressRejected::OwnerMismatch => (&stats.egress_owner_mismatch, 2),
                EgressRejected::RouteNotFound => (&stats.egress_route_not_found, 3),
                EgressRejected::DirectionRejected => (&stats.egress_direction_rejected, 4),
                EgressRejected::LateAnswer => (&stats.late_answers, 5),
                EgressRejected::SendFailed => (&stats.egress_send_failed, 6),
                EgressRejected::Oversized => (&stats.egress_oversized, 7),
            };
            counter.inc();
            self.warn[slot].warn(clock(), reason, egress.session_id, egress.route_id);
            let binding_missing = matches!(
                reason,
                EgressRejected::UnknownSession
                    | EgressRejected::StaleEpoch
                    | EgressRejected::OwnerMismatch
            );
            if binding_missing && egress.kind == FrameKind::Push as u8 {
                self.release_pushed_binding(egress);
            }
        }
        result.map(drop)
    }

    /// Records how long an answered request took, from its arrival (its
    /// deadline less the request timeout: the in-flight table keeps no
    /// second timestamp) to `now`. One `Instant` subtraction: the request
    /// timeout less the time left before the deadline, or plus the time
    /// past it (an answer the timer has not expired yet).
    pub(super) fn record_latency(&self, answered: Answered, now: Instant) {
        let timeout = self.limits.request_timeout;
        let elapsed = match answered.deadline.checked_duration_since(now) {
            Some(left) => timeout.saturating_sub(left),
            None => timeout + now.duration_since(answered.deadline),
        };
        self.metrics.requests.record(answered.route_index, elapsed);
        self.metrics
            .answers
            .count(answered.route_index, answered.answer_slot);
    }

    /// The egress gate; `Some` when the frame answered a request in flight.
    fn gate(&mut self, egress: &EgressRef<'_>) -> Result<Option<Answered>, EgressRejected> {
        // 1. registry hit
        let entry = self
            .sessions
            .get_mut(&egress.session_id)
            .ok_or(EgressRejected::UnknownSession)?;
        // 2. epoch equal
        if egress.session_epoch != entry.session.session_epoch {
            return Err(EgressRejected::StaleEpoch);
        }
        // 3. owner player_id equal
        if egress.player_id != entry.session.player_id {
            return Err(EgressRejected::OwnerMismatch);
        }
        // 4. route exists
        let (route_index, route) = self
            .routes
            .lookup_indexed(egress.route_id)
            .ok_or(EgressRejected::RouteNotFound)?;
        // 5. direction allows server-to-client: a PUSH on a server-to-client
        // route, or the RESPONSE/ERROR answering a client's REQUEST.
        let kind = FrameKind::from_u8(egress.kind);
        let allowed = match kind {
            Some(FrameKind::Push) => route.direction == Direction::ServerToClient,
            Some(FrameKind::Response) | Some(FrameKind::Error) => {
                route.direction == Direction::ClientToServer
            }
            _ => false,
        };
        let Some(kind) = kind.filter(|_| allowed) else {
            return Err(EgressRejected::DirectionRejected);
        };
        let mut answered = None;
        if kind != FrameKind::Push {
            answered = Some(close_request(entry, egress, kind, route_index)?);
        }
        // The session's profile encodes the answer of a `json` route.
        let encoded = match (kind, route.body) {
            (FrameKind::Response, RouteBody::Json) => {
                encode_answer(entry.session.protocol_profile, egress.body)
            }
            _ => None,
        };
        let body = encoded.as_deref().unwrap_or(egress.body);
        let (kind, body) = within_body_max(kind, body, self.limits.body_max, &mut answered)?;
        // A resumable session numbers its pushes and keeps them for a
        // resume; one with no connection only keeps them.
        let mut seq = egress.seq;
        if kind == FrameKind::Push {
            match number_push(&mut entry.resume, egress.route_id, &body) {
                Some((_, true)) => return Ok(None),
                Some((numbered, false)) => seq = numbered,
                None => {}
            }
        }
        // 6. the session's bounded send queue
        let pushed = entry.outbox.push_frame(kind, egress.route_id, seq, &body);
        match pushed {
            Ok(()) => Ok(answered),
            Err(PushError::Closed) => Err(EgressRejected::SendFailed),
            Err(PushError::Full) => {
                self.close_slow_reader(egress.session_id);
                Err(EgressRejected::SendFailed)
            }
        }
    }
}

/// A frame as it may go to a client, who need accept no body longer than
/// `body_max` (`gateway.body_max_bytes`, docs/protocol.md section 1),
/// whatever an object type made: as it is when it fits; an answer longer
/// becomes an ERROR `INTERNAL` saying so (and `answered` counts it so); a
/// push longer is dropped.
fn within_body_max<'a>(
    kind: FrameKind,
    body: &'a [u8],
    body_max: usize,
    answered: &mut Option<Answered>,
) -> Result<(FrameKind, Cow<'a, [u8]>), EgressRejected> {
    if body.len() <= body_max {
        return Ok((kind, Cow::Borrowed(body)));
    }
    if kind == FrameKind::Push {
        return Err(EgressRejected::Oversized);
    }
    let reason = format!(
        "the answer is {} bytes, more than gateway.body_max_bytes ({body_max})",
        body.len()
    );
    if let Some(answered) = answered {
        answered.answer_slot = crate::metrics::answer_slot(Some(ErrorCode::Internal as u16));
    }
    let refused = encode_error_body(ErrorCode::Internal, &reason);
    Ok((FrameKind::Error, Cow::Owned(refused)))
}
