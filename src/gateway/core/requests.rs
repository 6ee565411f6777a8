//! A session's requests: the ingress checks in docs/protocol.md's order,
//! the in-flight table they fill, and TIMEOUT for those unanswered at their
//! deadline (one deadline-heap entry per session, see
//! `GatewayCore::deadlines`).

use std::cmp::Reverse;
use std::time::Instant;

use wire::client::{ErrorCode, Header};

use super::egress::Answered;
use super::login::HeldFrame;
use super::{Entry, GatewayCore, Limits};
use crate::gateway::body_codec::decode_request;
use crate::gateway::inflight::InFlight;
use crate::gateway::Ingress;
use crate::metrics::GatewayStats;
use crate::route::{Direction, RouteBody, RouteTable};

impl GatewayCore {
    /// Ingress of one decoded REQUEST read from the session's connection,
    /// checked in docs/protocol.md's order: the session's request rate
    /// first, then route exists, direction, auth, then in-flight limits. A
    /// rejected request is answered here with its ERROR (and counted) and
    /// never reaches a service; an accepted one is recorded in flight and
    /// returned, with a snapshot of the live binding, for the driver to
    /// deliver to `binding.target`.
    pub fn on_request<'a>(
        &mut self,
        session_id: u64,
        header: Header,
        body: &'a [u8],
        now: Instant,
    ) -> Option<Ingress<'a>> {
        self.on_keyed_request(session_id, header, None, body, now)
    }

    /// [`Self::on_request`] for a frame that may be a version-2 REQUEST,
    /// whose key (`request_key`, `None` for version 1) the ingress carries
    /// to the object.
    pub fn on_keyed_request<'a>(
        &mut self,
        session_id: u64,
        header: Header,
        request_key: Option<u64>,
        body: &'a [u8],
        now: Instant,
    ) -> Option<Ingress<'a>> {
        self.admit(session_id, Arrival::Read, header, request_key, body, now)
    }

    /// A request that waited behind a login, replayed once it ended
    /// (`take_released`): checked like [`Self::on_request`] but for the
    /// rate, which it was charged when it was read.
    pub fn on_held_request<'a>(
        &mut self,
        session_id: u64,
        frame: &'a HeldFrame,
        now: Instant,
    ) -> Option<Ingress<'a>> {
        self.admit(
            session_id,
            Arrival::Replayed,
            frame.header,
            frame.request_key,
            &frame.body,
            now,
        )
    }

    /// Holds `frame`, released from behind a login that ended, again
    /// behind the session's next login if one began meanwhile (a held
    /// login replayed before it): moved, where `on_held_request` would
    /// copy its body. Each refused login released every frame behind it,
    /// and each replay copied the rest again behind the next, a cost of
    /// logins times frames times bodies (about 16 GiB of copying for 32
    /// MiB a client sent). `Some`: the frame, for `on_held_request`.
    pub fn hold_again(&mut self, session_id: u64, frame: HeldFrame) -> Option<HeldFrame> {
        let inflight_max = self.limits.inflight_max;
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return Some(frame);
        };
        let waits = !entry.closing && entry.login().is_some();
        if !waits || !entry.may_hold_another(inflight_max) {
            return Some(frame);
        }
        entry.transit().held.push(frame);
        None
    }

    /// The ingress checks, on one lookup of the session (this runs for
    /// every request).
    fn admit<'a>(
        &mut self,
        session_id: u64,
        arrival: Arrival,
        header: Header,
        request_key: Option<u64>,
        body: &'a [u8],
        now: Instant,
    ) -> Option<Ingress<'a>> {
        let limits = self.limits;
        let entry = self.sessions.get_mut(&session_id)?;
        let stats = &self.metrics.gateway;
        let route_id = header.route_id;
        let seq = header.seq;
        let checked = match arrival {
            Arrival::Read => on_read(entry, &limits, stats, now),
            Arrival::Replayed => Ok(()),
        }
        .and_then(|()| {
            check_request(
                &self.routes,
                entry,
                &limits,
                stats,
                header,
                request_key,
                body,
            )
        });
        let decoded_request = match checked {
            Ok(decoded_request) => decoded_request,
            Err(NotAdmitted::Held) => return None,
            Err(NotAdmitted::Relayed(session)) => {
                let body = body.to_vec();
                let frame = HeldFrame {
                    header,
                    body,
                    request_key,
                };
                self.relay_frame(session_id, session, frame);
                return None;
            }
            Err(NotAdmitted::Refused(code, reason)) => {
                self.push_error(session_id, route_id, seq, code, reason);
                return None;
            }
            Err(NotAdmitted::Undecodable(reason)) => {
                self.push_error(session_id, route_id, seq, ErrorCode::BadRequest, &reason);
                return None;
            }
        };
        let deadline = now + limits.request_timeout;
        entry.inflight.insert(seq, InFlight { route_id, deadline });
        if !entry.armed {
            entry.armed = true;
            self.deadlines.push(Reverse((deadline, session_id)));
        }
        Some(Ingress {
            session_id,
            binding: entry.session.binding(),
            connection: entry.connection(),
            route_id,
            seq,
            body,
            request_key,
            decoded_request,
        })
    }

    /// Answers an in-flight request with an ERROR from the gateway itself
    /// (its target could not be reached, or it timed out).
    pub fn answer_error(
        &mut self,
        session_id: u64,
        seq: u32,
        code: ErrorCode,
        reason: &str,
    ) -> bool {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return false;
        };
        let Some(inflight) = entry.inflight.remove(seq) else {
            return false;
        };
        // Not timed (no clock reading here), but counted: an error ratio
        // must see every answer.
        if let Some((route_index, _)) = self.routes.lookup_indexed(inflight.route_id) {
            let slot = crate::metrics::answer_slot(Some(code as u16));
            self.metrics.answers.count(route_index, slot);
        }
        self.push_error(session_id, inflight.route_id, seq, code, reason);
        true
    }

    /// Answers TIMEOUT to every request whose deadline is at or before
    /// `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while let Some(&Reverse((at, session_id))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            let Some(entry) = self.sessions.get_mut(&session_id) else {
                continue; // closed since it was armed
            };
            entry.armed = false;
            let mut earliest_left: Option<Instant> = None;
            for (seq, inflight) in entry.inflight.iter() {
                if inflight.deadline <= now {
                    self.due.push((seq, inflight.route_id, inflight.deadline));
                } else if earliest_left.is_none_or(|left| inflight.deadline < left) {
                    earliest_left = Some(inflight.deadline);
                }
            }
            for &(seq, _, _) in &self.due {
                entry.inflight.remove(seq);
                // A login that timed out ends: its session stays logged
                // out, and what waited behind it is released.
                if entry.login().is_some_and(|login| login.seq == seq) {
                    let transit = entry.transit();
                    transit.login = None;
                    if !transit.held.is_empty() {
                        self.released.push(session_id);
                    }
                    entry.settle();
                }
            }
            if let Some(left) = earliest_left {
                entry.armed = true;
                self.deadlines.push(Reverse((left, session_id)));
            }
            let mut due = std::mem::take(&mut self.due);
            // Answer in seq order: a map's iteration order is arbitrary.
            due.sort_unstable();
            for &(seq, route_id, deadline) in &due {
                self.metrics.gateway.timeouts.inc();
                if let Some((route_index, _)) = self.routes.lookup_indexed(route_id) {
                    let answered = Answered {
                        route_index,
                        deadline,
                        answer_slot: crate::metrics::answer_slot(Some(ErrorCode::Timeout as u16)),
                    };
                    self.record_latency(answered, now);
                }
                expired += 1;
                self.push_error(
                    session_id,
                    route_id,
                    seq,
                    ErrorCode::Timeout,
                    "no answer in time",
                );
            }
            due.clear();
            self.due = due;
        }
        expired
    }

    /// When `expire` may next have work: at or before the earliest deadline
    /// of a request in flight (a request answered since its session was
    /// armed can leave it earlier).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _))| *at)
    }
}

/// The routes version 2 adds (docs/protocol.md, section 12).
fn is_version_2_route(route_id: u32) -> bool {
    route_id == wire::client::route::AUTH_RESUME || route_id == wire::client::route::SYS_SESSION
}

/// Why a request read from a session goes no further now.
enum NotAdmitted {
    /// Read on a connection that resumed another session: that session's
    /// core checks and runs it (`relay_frame`).
    Relayed(u64),
    /// Held until the session's login ends (`on_held_request` replays it).
    Held,
    /// Answered with this ERROR (and counted): it never reaches a service.
    Refused(ErrorCode, &'static str),
    /// Its body failed the listener's codec: BAD_REQUEST with the reason.
    Undecodable(String),
}

/// How a request reached the ingress checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Read from the session's connection just now.
    Read,
    /// Held behind a login and replayed: already charged its rate.
    Replayed,
}

/// What reading a frame does before any check of the frame itself: the
/// session was active now; a relay front hands the frame on; the
/// session's request rate is charged.
fn on_read(
    entry: &mut Entry,
    limits: &Limits,
    stats: &GatewayStats,
    now: Instant,
) -> Result<(), NotAdmitted> {
    entry.last_frame = now;
    if entry.relay_to() != 0 {
        return Err(NotAdmitted::Relayed(entry.relay_to()));
    }
    if let Some(rate) = &limits.request_rate {
        if !entry.bucket.admit(rate, now) {
            stats.ingress_rate_limited.inc();
            return Err(NotAdmitted::Refused(
                ErrorCode::Overloaded,
                "session request rate over gateway.session_requests_per_sec_max",
            ));
        }
    }
    Ok(())
}

/// The checks of the request itself, in docs/protocol.md's order after
/// the rate: the session's state, then the route; then the listener's
/// body codec, once, before the request counts as in flight (a body it
/// cannot decode never reaches an object). `Ok` holds the decoded body.
fn check_request(
    routes: &RouteTable,
    entry: &mut Entry,
    limits: &Limits,
    stats: &GatewayStats,
    header: Header,
    request_key: Option<u64>,
    body: &[u8],
) -> Result<Option<Vec<u8>>, NotAdmitted> {
    if entry.closing || entry.login().is_some() {
        return Err(hold_or_refuse(
            entry,
            limits,
            stats,
            header,
            request_key,
            body,
        ));
    }
    if request_key.is_none() && is_version_2_route(header.route_id) {
        // Version 1 knows no such route: its clients see no change.
        stats.ingress_unknown_route.inc();
        return Err(NotAdmitted::Refused(
            ErrorCode::UnknownRoute,
            "unknown route",
        ));
    }
    let route_body = check_route(routes, entry, limits, stats, header)?;
    match route_body {
        RouteBody::Json => decode_request(entry.session.protocol_profile, body, limits.body_max)
            .map_err(|reason| {
                stats.ingress_body_undecodable.inc();
                NotAdmitted::Undecodable(reason)
            }),
        RouteBody::Bytes => Ok(None),
    }
}

/// A request to a session that is closing, or waiting on its login: the
/// session's state decides before any route is looked at.
fn hold_or_refuse(
    entry: &mut Entry,
    limits: &Limits,
    stats: &GatewayStats,
    header: Header,
    request_key: Option<u64>,
    body: &[u8],
) -> NotAdmitted {
    if entry.closing {
        // The redirect's grace is over: the client was told where to go.
        stats.redirect_refused.inc();
        return NotAdmitted::Refused(
            ErrorCode::Unavailable,
            "node draining: reconnect to another gateway",
        );
    }
    // The login's outcome decides how these are checked: hold them until
    // it ends, in order, within the session's in-flight bound.
    if !entry.may_hold_another(limits.inflight_max) {
        stats.ingress_overloaded.inc();
        return NotAdmitted::Refused(ErrorCode::Overloaded, "too many requests behind a login");
    }
    entry.transit().held.push(HeldFrame {
        header,
        body: body.to_vec(),
        request_key,
    });
    NotAdmitted::Held
}

/// The route checks, in docs/protocol.md's order: the route exists, its
/// direction, auth, then the in-flight limits. `Ok`: the route's body, for
/// the listener's codec.
#[inline]
fn check_route(
    routes: &RouteTable,
    entry: &Entry,
    limits: &Limits,
    stats: &GatewayStats,
    header: Header,
) -> Result<RouteBody, NotAdmitted> {
    let route_id = header.route_id;
    let seq = header.seq;
    let (code, reason) = match routes.lookup(route_id) {
        None => {
            stats.ingress_unknown_route.inc();
            (ErrorCode::UnknownRoute, "unknown route")
        }
        Some(route) if route.direction != Direction::ClientToServer => {
            stats.ingress_direction_rejected.inc();
            (ErrorCode::DirectionRejected, "server-to-client route")
        }
        Some(route) if route.requires_auth && !entry.session.is_logged_in() => {
            stats.ingress_auth_required.inc();
            (ErrorCode::AuthRequired, "login first")
        }
        Some(_) if entry.inflight.contains(seq) => {
            stats.ingress_bad_request.inc();
            (ErrorCode::BadRequest, "duplicate in-flight seq")
        }
        Some(_) if entry.inflight.len() >= limits.inflight_max => {
            stats.ingress_overloaded.inc();
            (ErrorCode::Overloaded, "too many in-flight requests")
        }
        Some(_)
            if (route_id == wire::client::route::AUTH_LOGIN
                || route_id == wire::client::route::AUTH_RESUME)
                && entry.session.is_logged_in() =>
        {
            stats.ingress_bad_request.inc();
            (ErrorCode::BadRequest, "already logged in")
        }
        Some(route) => return Ok(route.body),
    };
    Err(NotAdmitted::Refused(code, reason))
}
