//! Unit tests of the gateway state machine, without sockets.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::client::{decode_error_body, route, ErrorCode, FrameDecoder, FrameKind, Header, Peer};

use super::*;
use crate::store::{GatewayAddresses, Transport};
use crate::gateway::{Notice, NoticeKind, Target};
use crate::metrics::CoreMetrics;

const TIMEOUT: Duration = Duration::from_millis(100);

fn limits() -> Limits {
    Limits {
        inflight_max: 2,
        request_timeout: TIMEOUT,
        send_queue_max: 8,
        request_rate: None,
    }
}

struct Fixture {
    core: GatewayCore,
    metrics: Arc<CoreMetrics>,
    now: Instant,
}

/// A core of a node with the built-in routes (player and room).
fn new_core(core_id: usize, limits: Limits, metrics: Arc<CoreMetrics>) -> GatewayCore {
    let routes = Arc::new(crate::testing::builtin_routes());
    GatewayCore::with_incarnation(core_id, 1, limits, metrics, routes)
}

impl Fixture {
    fn new() -> Fixture {
        let metrics = Arc::new(CoreMetrics::default());
        Fixture {
            core: new_core(3, limits(), metrics.clone()),
            metrics,
            now: Instant::now(),
        }
    }

    fn open(&mut self) -> (u64, Rc<Outbox>) {
        let outbox = Rc::new(Outbox::new(limits().send_queue_max));
        (self.core.open_session(outbox.clone(), self.now), outbox)
    }

    fn request(
        &mut self,
        session_id: u64,
        route_id: u32,
        seq: u32,
    ) -> Option<crate::gateway::Ingress<'static>> {
        let header = Header {
            kind: FrameKind::Request,
            route_id,
            seq,
            body_len: 1,
        };
        self.core.on_request(session_id, header, b"x", self.now)
    }

    /// The notices queued for targets since the last call.
    fn notices(&mut self) -> Vec<Notice> {
        let mut notices = Vec::new();
        self.core.take_notices(&mut notices);
        notices
    }

    /// Unbound and Disconnected notices counted in the metrics.
    fn notices_counted(&self) -> u64 {
        let gateway = &self.metrics.gateway;
        gateway.notices_unbound.get() + gateway.notices_disconnected.get()
    }

    fn login(&mut self, session_id: u64, player_id: u64) -> u32 {
        self.core
            .apply_binding(session_id, Target::Player, player_id, 0)
            .unwrap()
            .session_epoch
    }
}

/// Every frame queued on `outbox`: (kind, route, seq, body).
fn frames(outbox: &Outbox) -> Vec<(FrameKind, u32, u32, Vec<u8>)> {
    let bytes = outbox.queued_bytes();
    let mut decoder = FrameDecoder::new(Peer::Server, 1 << 20);
    assert_eq!(decoder.extend(&bytes), bytes.len());
    let mut out = Vec::new();
    while let Some(frame) = decoder.next_frame().unwrap() {
        out.push((
            frame.header.kind,
            frame.header.route_id,
            frame.header.seq,
            frame.body.to_vec(),
        ));
    }
    out
}

fn error_code(frame: &(FrameKind, u32, u32, Vec<u8>)) -> u16 {
    assert_eq!(frame.0, FrameKind::Error);
    decode_error_body(&frame.3).unwrap().0
}

#[test]
fn session_ids_name_their_core_and_are_unique() {
    let mut f = Fixture::new();
    let (a, _) = f.open();
    let (b, _) = f.open();
    assert_ne!(a, b);
    assert_eq!(crate::gateway::session_core(a), 3);
    assert_eq!(crate::gateway::session_core(b), 3);
    assert_eq!(f.metrics.gateway.sessions_active.get(), 2);
}

#[test]
fn ingress_rejections_in_order_and_counted() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    assert!(f.request(s, 9999, 1).is_none());
    assert!(f.request(s, route::ROOM_MESSAGE, 2).is_none());
    assert!(f.request(s, route::PLAYER_GET, 3).is_none());
    let ok = f.request(s, route::SYS_PING, 4).unwrap();
    assert_eq!(ok.binding.target, Target::Auth);
    assert_eq!(
        (ok.route_id, ok.seq, ok.body),
        (route::SYS_PING, 4, &b"x"[..])
    );
    assert!(f.request(s, route::SYS_PING, 4).is_none(), "duplicate seq");
    assert!(f.request(s, route::SYS_PING, 5).is_some());
    assert!(
        f.request(s, route::SYS_PING, 6).is_none(),
        "past inflight_max"
    );
    let codes: Vec<u16> = frames(&outbox).iter().map(error_code).collect();
    assert_eq!(
        codes,
        [
            ErrorCode::UnknownRoute,
            ErrorCode::DirectionRejected,
            ErrorCode::AuthRequired,
            ErrorCode::BadRequest,
            ErrorCode::Overloaded
        ]
        .map(|code| code as u16)
    );
    let g = &f.metrics.gateway;
    assert_eq!(
        (
            g.ingress_unknown_route.get(),
            g.ingress_direction_rejected.get(),
            g.ingress_auth_required.get()
        ),
        (1, 1, 1)
    );
    assert_eq!(
        (g.ingress_bad_request.get(), g.ingress_overloaded.get()),
        (1, 1)
    );
}

#[test]
fn login_on_a_logged_in_session_is_bad_request_and_auth_routes_pass() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.login(s, 7);
    assert!(f.request(s, route::AUTH_LOGIN, 1).is_none());
    let ingress = f.request(s, route::PLAYER_GET, 2).unwrap();
    assert_eq!(ingress.binding.target, Target::Player);
    assert_eq!(ingress.binding.player_id, 7);
    assert_eq!(ingress.binding.session_epoch, 1);
    assert_eq!(
        error_code(&frames(&outbox)[0]),
        ErrorCode::BadRequest as u16
    );
}

#[test]
fn bind_winner_and_loser_are_counted() {
    let mut f = Fixture::new();
    let (s, _) = f.open();
    assert_eq!(
        f.core
            .apply_binding(s, Target::Player, 7, 0)
            .unwrap()
            .session_epoch,
        1
    );
    assert!(matches!(
        f.core.apply_binding(s, Target::Player, 8, 0),
        Err(BindError::EpochExpired(_))
    ));
    assert_eq!(
        f.core.apply_binding(99, Target::Player, 8, 0),
        Err(BindError::UnknownSession)
    );
    assert_eq!(f.metrics.gateway.binds.get(), 1);
    assert_eq!(f.metrics.gateway.binds_epoch_expired.get(), 1);
    assert_eq!(f.core.session(s).unwrap().player_id, 7);
}

fn egress(
    session_id: u64,
    epoch: u32,
    player_id: u64,
    kind: FrameKind,
    route_id: u32,
    seq: u32,
) -> EgressRef<'static> {
    EgressRef {
        session_id,
        session_epoch: epoch,
        player_id,
        kind: kind as u8,
        route_id,
        seq,
        body: b"ok",
    }
}

/// Each check is reached only when the ones before it pass: every probe
/// fails exactly one check and is rejected by that one, including probes
/// that would also fail a later check.
#[test]
fn egress_gate_checks_in_order() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    let now = f.now;
    let cases = [
        // unknown session, with a wrong epoch, owner, route and direction too
        (
            egress(s + 1, epoch + 5, 8, FrameKind::Request, 9999, 1),
            EgressRejected::UnknownSession,
        ),
        // stale epoch, also wrong owner, route and direction
        (
            egress(s, epoch - 1, 8, FrameKind::Request, 9999, 1),
            EgressRejected::StaleEpoch,
        ),
        (
            egress(s, epoch, 8, FrameKind::Request, 9999, 1),
            EgressRejected::OwnerMismatch,
        ),
        (
            egress(s, epoch, 7, FrameKind::Request, 9999, 1),
            EgressRejected::RouteNotFound,
        ),
        // a PUSH on a client-to-server route, a RESPONSE on a push route
        (
            egress(s, epoch, 7, FrameKind::Push, route::PLAYER_GET, 0),
            EgressRejected::DirectionRejected,
        ),
        (
            egress(s, epoch, 7, FrameKind::Response, route::ROOM_MESSAGE, 1),
            EgressRejected::DirectionRejected,
        ),
        (
            egress(s, epoch, 7, FrameKind::Request, route::PLAYER_GET, 1),
            EgressRejected::DirectionRejected,
        ),
        // an answer for a request not in flight
        (
            egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 2),
            EgressRejected::LateAnswer,
        ),
    ];
    for (probe, expected) in &cases {
        assert_eq!(f.core.egress(probe, now), Err(*expected), "{probe:?}");
    }
    let g = &f.metrics.gateway;
    assert_eq!(g.egress_unknown_session.get(), 1);
    assert_eq!(g.egress_stale_epoch.get(), 1);
    assert_eq!(g.egress_owner_mismatch.get(), 1);
    assert_eq!(g.egress_route_not_found.get(), 1);
    assert_eq!(g.egress_direction_rejected.get(), 3);
    assert_eq!(g.late_answers.get(), 1);
    assert!(
        outbox.queued_bytes().is_empty(),
        "nothing rejected reached the queue"
    );
    // All checks pass: written, and the request leaves the in-flight table.
    f.core
        .egress(
            &egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1),
            now,
        )
        .unwrap();
    assert_eq!(f.core.inflight_count(s), 0);
    f.core
        .egress(
            &egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0),
            now,
        )
        .unwrap();
    let written = frames(&outbox);
    assert_eq!(written.len(), 2);
    assert_eq!((written[0].0, written[0].2), (FrameKind::Response, 1));
    assert_eq!(written[1].0, FrameKind::Push);
    // Answering twice: the second is late.
    assert_eq!(
        f.core.egress(
            &egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1),
            now
        ),
        Err(EgressRejected::LateAnswer)
    );
}

#[test]
fn full_send_queue_fails_the_send_and_closes_the_slow_reader() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let epoch = f.login(s, 7);
    let now = f.now;
    for _ in 0..limits().send_queue_max {
        f.core
            .egress(
                &egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0),
                now,
            )
            .unwrap();
    }
    assert_eq!(
        f.core.egress(
            &egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0),
            now
        ),
        Err(EgressRejected::SendFailed)
    );
    assert_eq!(f.metrics.gateway.egress_send_failed.get(), 1);
    assert_eq!(f.metrics.gateway.slow_readers_closed.get(), 1);
    assert!(f.core.session(s).is_none());
    assert_eq!(outbox.state(), crate::gateway::outbox::OutboxState::Aborted);
    let notices = f.notices();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].kind, NoticeKind::Disconnected);
}

#[test]
fn timeout_is_answered_once_and_the_late_answer_dropped() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    assert_eq!(f.core.next_deadline(), Some(f.now + TIMEOUT));
    assert_eq!(f.core.expire(f.now + TIMEOUT - Duration::from_millis(1)), 0);
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1);
    assert_eq!(f.core.expire(f.now + TIMEOUT * 2), 0);
    assert_eq!(f.core.next_deadline(), None);
    let later = f.now + TIMEOUT * 2;
    assert_eq!(
        f.core.egress(
            &egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1),
            later
        ),
        Err(EgressRejected::LateAnswer)
    );
    let written = frames(&outbox);
    assert_eq!(written.len(), 1);
    assert_eq!(error_code(&written[0]), ErrorCode::Timeout as u16);
    assert_eq!((written[0].1, written[0].2), (route::PLAYER_GET, 1));
    assert_eq!(f.metrics.gateway.timeouts.get(), 1);
    assert_eq!(f.metrics.gateway.late_answers.get(), 1);
    // The seq is free again.
    assert!(f.request(s, route::PLAYER_GET, 1).is_some());
}

#[test]
fn answers_and_timeouts_are_timed_from_arrival_per_route() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    f.request(s, route::PLAYER_INCR, 2).unwrap();
    // player.get answered 3 ms after it arrived; a PUSH is no answer.
    let answer = egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1);
    f.core
        .egress(&answer, f.now + Duration::from_millis(3))
        .unwrap();
    let push = egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0);
    f.core.egress(&push, f.now).unwrap();
    // player.incr timed out.
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1);
    let routes = crate::testing::builtin_routes();
    let index = |route_id| routes.lookup_indexed(route_id).unwrap().0;
    let histogram = |route_id| f.metrics.requests.route(index(route_id)).unwrap();
    let get = histogram(route::PLAYER_GET);
    assert_eq!(get.count(), 1);
    assert_eq!(get.sum_ns(), 3_000_000);
    let incr = histogram(route::PLAYER_INCR);
    assert_eq!(incr.count(), 1);
    assert_eq!(incr.sum_ns(), TIMEOUT.as_nanos() as u64);
    assert_eq!(histogram(route::ROOM_MESSAGE).count(), 0);
}

#[test]
fn kick_order_pushes_kicked_notifies_unbound_invalidates_and_closes() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    assert!(
        !f.core.kick(s, Some(8), "wrong player"),
        "guarded by player"
    );
    assert!(f.core.kick(s, Some(7), ""));
    let notices = f.notices();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].kind, NoticeKind::Unbound);
    assert_eq!(
        notices[0].binding.session_epoch, epoch,
        "the last epoch before invalidation"
    );
    assert_eq!(notices[0].binding.player_id, 7);
    assert!(f.core.session(s).is_none());
    assert_eq!(outbox.state(), crate::gateway::outbox::OutboxState::Closing);
    let written = frames(&outbox);
    assert_eq!(
        written,
        vec![(FrameKind::Push, route::SYS_KICKED, 0, b"kicked".to_vec())]
    );
    // The in-flight request's answer reaches nobody, and no TIMEOUT follows.
    assert_eq!(
        f.core.egress(
            &egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1),
            f.now
        ),
        Err(EgressRejected::UnknownSession)
    );
    assert_eq!(f.core.expire(f.now + TIMEOUT), 0);
    assert_eq!(f.metrics.gateway.kicks.get(), 1);
    assert_eq!(f.metrics.gateway.sessions_active.get(), 0);
}

#[test]
fn kick_then_disconnect_notifies_once() {
    let mut f = Fixture::new();
    let (s, _) = f.open();
    f.login(s, 7);
    assert!(f.core.kick(s, None, "dup"));
    assert!(!f.core.close(s, CloseReason::PeerClosed));
    let notices = f.notices();
    assert_eq!(
        notices.iter().map(|n| n.kind).collect::<Vec<_>>(),
        [NoticeKind::Unbound]
    );
    assert_eq!(f.notices_counted(), 1);
}

#[test]
fn disconnect_then_kick_notifies_once() {
    let mut f = Fixture::new();
    let (s, _) = f.open();
    f.login(s, 7);
    assert!(f.core.close(s, CloseReason::PeerClosed));
    assert!(!f.core.kick(s, None, "dup"));
    let notices = f.notices();
    assert_eq!(
        notices.iter().map(|n| n.kind).collect::<Vec<_>>(),
        [NoticeKind::Disconnected]
    );
    assert_eq!(f.metrics.gateway.kicks.get(), 0);
    assert_eq!(f.notices_counted(), 1);
}

#[test]
fn protocol_violation_sends_one_error_and_closes() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.core
        .protocol_violation(s, wire::client::FrameError::BadVersion(9));
    assert!(f.core.session(s).is_none());
    assert_eq!(f.metrics.gateway.ingress_protocol_violation.get(), 1);
    let written = frames(&outbox);
    assert_eq!(written.len(), 1);
    assert_eq!(error_code(&written[0]), ErrorCode::BadRequest as u16);
}

#[test]
fn stale_reply_after_rebind_never_reaches_the_wire() {
    // The seed's in-flight window: an ingress snapshotted at epoch 0, a bind
    // to epoch 1, then the handler answers with the epoch-0 reference.
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let ping = f.request(s, route::SYS_PING, 1).unwrap();
    f.login(s, 7);
    let stale = egress(
        s,
        ping.binding.session_epoch,
        0,
        FrameKind::Response,
        route::SYS_PING,
        1,
    );
    assert_eq!(
        f.core.egress(&stale, f.now),
        Err(EgressRejected::StaleEpoch)
    );
    assert!(outbox.queued_bytes().is_empty());
    // The request still gets its one answer: TIMEOUT.
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1);
}

#[test]
fn a_reused_seq_keeps_its_own_deadline() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    f.core
        .egress(
            &egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1),
            f.now,
        )
        .unwrap();
    // The same seq again, later: the first request's deadline must not
    // time the second one out.
    let first = f.now;
    f.now += TIMEOUT / 2;
    f.request(s, route::PLAYER_GET, 1).unwrap();
    assert_eq!(
        f.core.next_deadline(),
        Some(first + TIMEOUT),
        "still armed at the first deadline: a lower bound"
    );
    assert_eq!(f.core.expire(first + TIMEOUT), 0);
    assert_eq!(f.core.inflight_count(s), 1);
    assert_eq!(
        f.core.next_deadline(),
        Some(f.now + TIMEOUT),
        "re-armed at the second"
    );
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1);
    assert_eq!(f.core.next_deadline(), None);
    assert_eq!(f.core.inflight_count(s), 0);
    let written = frames(&outbox);
    assert_eq!(written.len(), 2);
    assert_eq!(error_code(&written[1]), ErrorCode::Timeout as u16);
    assert_eq!(f.metrics.gateway.timeouts.get(), 1);
}

#[test]
fn a_session_keeps_one_deadline_entry_however_many_requests() {
    let mut f = Fixture::new();
    let outbox = Rc::new(Outbox::new(1 << 20));
    let s = f.core.open_session(outbox.clone(), f.now);
    let epoch = f.login(s, 7);
    // A request that is never answered, and a stream of answered ones.
    f.request(s, route::PLAYER_GET, 2).unwrap();
    let held = f.now + TIMEOUT;
    for _ in 0..1_000u32 {
        f.now += Duration::from_micros(1);
        f.request(s, route::PLAYER_GET, 1).unwrap();
        f.core
            .egress(
                &egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1),
                f.now,
            )
            .unwrap();
        assert_eq!(f.core.deadline_entries(), 1);
    }
    assert_eq!(f.core.next_deadline(), Some(held));
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1, "only the held one");
    assert_eq!(f.core.next_deadline(), None);
    assert_eq!(f.core.deadline_entries(), 0);
    assert_eq!(f.metrics.gateway.timeouts.get(), 1);
}

#[test]
fn expiry_answers_every_due_request_in_seq_order_and_rearms_for_the_rest() {
    let mut f = Fixture::new();
    f.core = new_core(
        3,
        Limits {
            inflight_max: 16,
            ..limits()
        },
        f.metrics.clone(),
    );
    let outbox = Rc::new(Outbox::new(1 << 20));
    let s = f.core.open_session(outbox.clone(), f.now);
    f.login(s, 7);
    let start = f.now;
    for seq in [9, 3, 5] {
        f.request(s, route::PLAYER_GET, seq).unwrap();
    }
    f.now += TIMEOUT / 2;
    f.request(s, route::PLAYER_GET, 1).unwrap();
    assert_eq!(f.core.expire(start + TIMEOUT), 3);
    let timed_out: Vec<u32> = frames(&outbox).iter().map(|frame| frame.2).collect();
    assert_eq!(timed_out, vec![3, 5, 9]);
    assert_eq!(f.core.next_deadline(), Some(f.now + TIMEOUT));
    assert_eq!(f.core.inflight_count(s), 1);
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1);
    assert_eq!(f.core.inflight_count(s), 0);
    assert_eq!(f.core.deadline_entries(), 0);
}

#[test]
fn a_closed_sessions_deadline_entry_expires_harmlessly() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    assert!(f.core.close(s, CloseReason::PeerClosed));
    assert_eq!(f.core.deadline_entries(), 1);
    assert_eq!(f.core.expire(f.now + TIMEOUT), 0);
    assert_eq!(f.core.deadline_entries(), 0);
    assert_eq!(f.metrics.gateway.timeouts.get(), 0);
}

#[test]
fn close_idle_closes_only_sessions_silent_for_the_whole_period() {
    let mut f = Fixture::new();
    let idle = Duration::from_millis(500);
    let (quiet, quiet_outbox) = f.open();
    let (busy, _) = f.open();
    f.now += idle / 2;
    f.request(busy, route::SYS_PING, 1).unwrap();
    f.now += idle / 2;
    assert_eq!(f.core.close_idle(f.now, idle), 1);
    assert!(f.core.session(quiet).is_none());
    assert_eq!(
        quiet_outbox.state(),
        crate::gateway::outbox::OutboxState::Closing
    );
    assert!(f.core.session(busy).is_some(), "a frame half a period ago");
    assert_eq!(f.metrics.gateway.idle_closed.get(), 1);
    let notices = f.notices();
    assert_eq!(notices.len(), 1);
    assert_eq!(
        (notices[0].kind, notices[0].session_id),
        (NoticeKind::Disconnected, quiet)
    );
    f.now += idle / 2;
    assert_eq!(f.core.close_idle(f.now, idle), 1);
    assert_eq!(f.core.session_count(), 0);
}

#[test]
fn a_login_binds_only_when_its_player_object_admits_it() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    let login = f.request(s, route::AUTH_LOGIN, 1).unwrap();
    assert_eq!(login.binding.target, Target::Auth);
    // The player object is asked with the epoch the session will have.
    assert_eq!(f.core.begin_login(s, 1, 7), Some(1));
    assert_eq!(f.core.begin_login(s, 1, 7), None, "one login at a time");
    assert_eq!(f.core.session(s).unwrap().player_id, 0, "not bound yet");
    let bound = f.core.complete_login(s, 1, LoginOutcome::Admitted, f.now);
    assert_eq!(bound.map(|b| (b.player_id, b.session_epoch)), Some((7, 1)));
    let answer = &frames(&outbox)[0];
    assert_eq!((answer.0, answer.2), (FrameKind::Response, 1));
    assert_eq!(answer.3, 7u64.to_le_bytes());
    // A second decision for the same login is late, and changes nothing.
    assert!(f
        .core
        .complete_login(s, 1, LoginOutcome::Admitted, f.now)
        .is_none());
    assert_eq!(f.core.session(s).unwrap().session_epoch, 1);
}

#[test]
fn a_refused_login_leaves_the_session_logged_out_with_the_reason() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    let refused = LoginOutcome::Refused(ErrorCode::AuthFailed, "player already logged in");
    assert!(f.core.complete_login(s, 1, refused, f.now).is_none());
    let answer = &frames(&outbox)[0];
    assert_eq!(error_code(answer), ErrorCode::AuthFailed as u16);
    assert_eq!(
        decode_error_body(&answer.3).unwrap().1,
        "player already logged in"
    );
    assert!(!f.core.session(s).unwrap().is_logged_in());
}

#[test]
fn requests_behind_a_pending_login_wait_then_replay_in_order() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    // Pipelined behind the login: held, not answered AUTH_REQUIRED (the
    // fixture allows two in flight: the login and this one).
    assert!(f.request(s, route::PLAYER_GET, 2).is_none());
    let mut released = Vec::new();
    f.core.take_released(&mut released);
    assert!(released.is_empty(), "nothing to replay while pending");
    f.core.complete_login(s, 1, LoginOutcome::Admitted, f.now);
    f.core.take_released(&mut released);
    assert_eq!(released.len(), 1);
    let (session, held) = &released[0];
    assert_eq!(*session, s);
    let seqs: Vec<u32> = held.iter().map(|frame| frame.header.seq).collect();
    assert_eq!(seqs, [2]);
    // Replayed, they pass the checks as the logged-in session.
    let frame = &held[0];
    let ingress = f
        .core
        .on_held_request(s, frame.header, &frame.body, f.now)
        .unwrap();
    assert_eq!(ingress.binding.player_id, 7);
}

#[test]
fn a_login_that_times_out_releases_what_waited_behind_it() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    assert!(f.request(s, route::PLAYER_GET, 2).is_none());
    let later = f.now + limits().request_timeout;
    assert_eq!(f.core.expire(later), 1);
    assert_eq!(error_code(&frames(&outbox)[0]), ErrorCode::Timeout as u16);
    let mut released = Vec::new();
    f.core.take_released(&mut released);
    assert_eq!(released.len(), 1, "the held get is replayed");
    // The late decision finds no login pending.
    assert!(f
        .core
        .complete_login(s, 1, LoginOutcome::Admitted, later)
        .is_none());
    assert!(!f.core.session(s).unwrap().is_logged_in());
}

#[test]
fn held_requests_are_bounded_by_the_in_flight_limit() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    let max = limits().inflight_max as u32;
    for seq in 2..=max {
        assert!(f.request(s, route::PLAYER_GET, seq).is_none());
    }
    assert!(frames(&outbox).is_empty(), "{max} in flight or held");
    assert!(f.request(s, route::PLAYER_GET, max + 1).is_none());
    assert_eq!(
        error_code(&frames(&outbox)[0]),
        ErrorCode::Overloaded as u16
    );
}

#[test]
fn a_draining_gateway_redirects_every_session_answers_within_the_grace_then_closes() {
    let mut f = Fixture::new();
    let grace = Duration::from_millis(500);
    let (idle, idle_outbox) = f.open();
    let (busy, busy_outbox) = f.open();
    let epoch = f.login(busy, 7);
    f.request(busy, route::PLAYER_GET, 1).unwrap();
    let targets = ["10.0.0.2:7400", "10.0.0.3:7400"];
    // A third node serves TLS only: no plain session is sent there.
    let mut tls_only = GatewayAddresses::default();
    tls_only.set(Transport::Tls, "10.0.0.4:7443");
    let advertised: Vec<GatewayAddresses> = targets
        .iter()
        .map(|target| GatewayAddresses::plain(*target))
        .chain([tls_only])
        .collect();
    f.core.redirect_all(f.now, grace, advertised.clone());
    for (session, outbox) in [(idle, &idle_outbox), (busy, &busy_outbox)] {
        let pushes: Vec<_> = frames(outbox)
            .into_iter()
            .filter(|frame| frame.1 == route::SYS_REDIRECT)
            .collect();
        let target = targets[(session % 2) as usize];
        assert_eq!(
            pushes,
            vec![(
                FrameKind::Push,
                route::SYS_REDIRECT,
                0,
                redirect_body(grace, target)
            )]
        );
    }
    // docs/protocol.md's vector.
    assert_eq!(
        redirect_body(Duration::from_millis(5000), "10.0.0.2:7400"),
        b"\x88\x13\x00\x0010.0.0.2:7400".to_vec()
    );
    // Within the grace: requests are accepted and answered as before, and
    // a second redirect_all sends nothing again.
    f.core.redirect_all(f.now, grace, advertised);
    assert!(f.request(busy, route::PLAYER_INCR, 2).is_some());
    assert_eq!(f.core.close_redirected(f.now + grace / 2), 2);
    // The grace ends: the idle session closes; the busy one owes answers,
    // so it refuses new requests and stays until they are answered.
    assert_eq!(f.core.close_redirected(f.now + grace), 1);
    assert!(f.core.session(idle).is_none());
    assert_eq!(
        idle_outbox.state(),
        crate::gateway::outbox::OutboxState::Closing
    );
    assert!(f.request(busy, route::PLAYER_GET, 3).is_none());
    let refused = frames(&busy_outbox).pop().unwrap();
    assert_eq!(
        (refused.2, error_code(&refused)),
        (3, ErrorCode::Unavailable as u16)
    );
    for seq in [1, 2] {
        let route_id = if seq == 1 {
            route::PLAYER_GET
        } else {
            route::PLAYER_INCR
        };
        f.core
            .egress(
                &egress(busy, epoch, 7, FrameKind::Response, route_id, seq),
                f.now,
            )
            .unwrap();
    }
    assert_eq!(f.core.close_redirected(f.now + grace), 0);
    assert_eq!(f.metrics.gateway.redirects.get(), 2);
    assert_eq!(f.metrics.gateway.redirect_closed.get(), 2);
    assert_eq!(f.metrics.gateway.redirect_refused.get(), 1);
    // A session opened while draining is told at once, with no target
    // when there is none.
    f.core.set_redirect_targets(Vec::new());
    let (_, late) = f.open();
    assert_eq!(
        frames(&late),
        vec![(
            FrameKind::Push,
            route::SYS_REDIRECT,
            0,
            500u32.to_le_bytes().to_vec()
        )]
    );
}

/// An answer's latency is from the request's arrival to the clock reading
/// of its answer, whether the answer comes before the deadline or after it
/// (before the timer expired the request).
#[test]
fn an_answer_records_its_latency_from_the_request_arrival() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    f.request(s, route::PLAYER_GET, 2).unwrap();
    let answer = |seq| egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, seq);
    let early = f.now + Duration::from_micros(300);
    f.core.egress_with_clock(&answer(1), || early).unwrap();
    let late = f.now + TIMEOUT + Duration::from_millis(50);
    f.core.egress_with_clock(&answer(2), || late).unwrap();

    let (index, _) = f.core.routes.lookup_indexed(route::PLAYER_GET).unwrap();
    let latency = f.metrics.requests.route(index).unwrap();
    assert_eq!(latency.count(), 2);
    assert_eq!(latency.sum_ns(), 300_000 + 150_000_000);
}

/// A core whose sessions may send 1000 requests a second in bursts of 3
/// (and keep 16 in flight, so only the rate refuses).
fn rate_limited() -> Fixture {
    let mut f = Fixture::new();
    f.core = new_core(
        3,
        Limits {
            inflight_max: 16,
            request_rate: crate::gateway::rate::RequestRate::new(1000, 3),
            ..limits()
        },
        f.metrics.clone(),
    );
    f
}

#[test]
fn a_burst_over_the_bucket_is_answered_overloaded_and_counted() {
    let mut f = rate_limited();
    let (s, outbox) = f.open();
    for seq in 1..=3 {
        assert!(f.request(s, route::SYS_PING, seq).is_some(), "seq {seq}");
    }
    assert!(f.request(s, route::SYS_PING, 4).is_none());
    assert!(f.request(s, route::SYS_PING, 5).is_none());
    let refused = frames(&outbox);
    assert_eq!(refused.len(), 2);
    for frame in &refused {
        let (code, reason) = decode_error_body(&frame.3).unwrap();
        assert_eq!(code, ErrorCode::Overloaded as u16);
        assert!(
            reason.contains("gateway.session_requests_per_sec_max"),
            "{reason}"
        );
    }
    assert_eq!(refused[0].2, 4);
    assert_eq!(f.metrics.gateway.ingress_rate_limited.get(), 2);
    assert_eq!(f.metrics.gateway.ingress_overloaded.get(), 0);
    // Refused requests never entered the in-flight table.
    assert_eq!(f.core.inflight_count(s), 3);
}

#[test]
fn the_bucket_refills_with_the_drivers_time_only() {
    let mut f = rate_limited();
    let (s, _outbox) = f.open();
    for seq in 1..=3 {
        f.request(s, route::SYS_PING, seq).unwrap();
    }
    assert!(f.request(s, route::SYS_PING, 4).is_none());
    // The core reads no clock: without a later `now`, nothing refills,
    // however much real time passes.
    std::thread::sleep(Duration::from_millis(5));
    assert!(f.request(s, route::SYS_PING, 5).is_none());
    // One token a millisecond of the driver's time.
    f.now += Duration::from_millis(1);
    assert!(f.request(s, route::SYS_PING, 6).is_some());
    assert!(f.request(s, route::SYS_PING, 7).is_none());
    f.now += Duration::from_secs(1);
    for seq in 8..=10 {
        assert!(f.request(s, route::SYS_PING, seq).is_some(), "seq {seq}");
    }
    assert!(
        f.request(s, route::SYS_PING, 11).is_none(),
        "never fuller than the burst"
    );
    assert_eq!(f.metrics.gateway.ingress_rate_limited.get(), 4);
}

#[test]
fn one_sessions_empty_bucket_leaves_the_others_served() {
    let mut f = rate_limited();
    // A queue deep enough for every refusal: the flooder is not closed
    // as a slow reader before it has met the rate.
    let flooded = Rc::new(Outbox::new(1 << 20));
    let flooder = f.core.open_session(flooded.clone(), f.now);
    let (other, other_outbox) = f.open();
    for seq in 1..=50 {
        f.request(flooder, route::SYS_PING, seq);
    }
    assert_eq!(f.metrics.gateway.ingress_rate_limited.get(), 47);
    for seq in 1..=3 {
        assert!(
            f.request(other, route::SYS_PING, seq).is_some(),
            "seq {seq}"
        );
    }
    assert!(frames(&other_outbox).is_empty());
    assert_eq!(frames(&flooded).len(), 47);
}

#[test]
fn a_held_request_is_charged_once() {
    let mut f = rate_limited();
    let (s, _outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    // Two more read behind the login: the bucket is empty now.
    assert!(f.request(s, route::PLAYER_GET, 2).is_none());
    assert!(f.request(s, route::PLAYER_GET, 3).is_none());
    f.core.complete_login(s, 1, LoginOutcome::Admitted, f.now);
    let mut released = Vec::new();
    f.core.take_released(&mut released);
    let (_, held) = released.pop().unwrap();
    assert_eq!(held.len(), 2);
    // Replayed at the same instant, they pass: they paid when read.
    for frame in &held {
        assert!(f
            .core
            .on_held_request(s, frame.header, &frame.body, f.now)
            .is_some());
    }
    assert_eq!(f.metrics.gateway.ingress_rate_limited.get(), 0);
    assert!(f.request(s, route::PLAYER_GET, 4).is_none(), "still empty");
}

#[test]
fn no_rate_limit_when_it_is_zero() {
    let config = GatewayConfig {
        session_requests_per_sec_max: 0,
        ..GatewayConfig::default()
    };
    assert_eq!(Limits::from(&config).request_rate, None);
    let defaults = Limits::from(&GatewayConfig::default());
    assert!(defaults.request_rate.is_some());
}
