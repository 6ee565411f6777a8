//! Unit tests of the gateway state machine, without sockets.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::client::{decode_error_body, route, ErrorCode, FrameDecoder, FrameKind, Header, Peer};

use super::*;
use crate::gateway::{Notice, NoticeKind, Target};
use crate::metrics::CoreMetrics;

mod codec;
mod egress;
mod login;
mod redirect;
mod requests;
mod resume;

const TIMEOUT: Duration = Duration::from_millis(100);

fn limits() -> Limits {
    Limits {
        inflight_max: 2,
        request_timeout: TIMEOUT,
        send_queue_max: 8,
        request_rate: None,
        body_max: 65536,
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
            .apply_binding(session_id, Target::Services, player_id, 0)
            .unwrap()
            .session_epoch
    }
}

/// Every frame queued on `outbox`: (kind, route, seq, body).
/// The player object's admission of a login as `player_id` at `epoch`.
fn admitted(player_id: u64, session_epoch: u32) -> LoginOutcome<'static> {
    LoginOutcome::Admitted {
        player_id,
        session_epoch,
    }
}

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
        connection: None,
    }
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

/// At the session cap the oldest session with no login goes first: one
/// logged in, or logging in, is never evicted, nor is one closed already;
/// with none left there is nothing to evict.
#[test]
fn eviction_takes_the_oldest_session_that_never_logged_in() {
    let mut f = Fixture::new();
    let (logged_in, _) = f.open();
    f.login(logged_in, 7);
    let (logging_in, _) = f.open();
    f.request(logging_in, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(logging_in, 1, 8);
    let (closed, _) = f.open();
    let (oldest, oldest_outbox) = f.open();
    let (newer, newer_outbox) = f.open();
    assert!(f.core.close(closed, CloseReason::PeerClosed));
    // Pinging keeps a session from idling out, not from eviction.
    f.request(oldest, route::SYS_PING, 1).unwrap();

    assert!(f.core.evict_unauthenticated());
    assert!(f.core.session(oldest).is_none());
    assert_eq!(
        oldest_outbox.state(),
        crate::gateway::outbox::OutboxState::Aborted
    );
    assert!(f.core.evict_unauthenticated());
    assert!(f.core.session(newer).is_none());
    assert_eq!(
        newer_outbox.state(),
        crate::gateway::outbox::OutboxState::Aborted
    );
    assert!(
        !f.core.evict_unauthenticated(),
        "only accountable ones left"
    );
    assert!(f.core.session(logged_in).is_some());
    assert!(f.core.session(logging_in).is_some());
    assert_eq!(f.metrics.gateway.unauthenticated_evicted.get(), 2);
}

/// The queue of sessions with no login stays within twice the sessions
/// however many log in and close: its stale ids are dropped as it grows.
#[test]
fn the_eviction_queue_stays_bounded_by_the_sessions() {
    let mut f = Fixture::new();
    let (silent, _) = f.open();
    for player in 1..10_000 {
        let (s, _) = f.open();
        f.login(s, player);
        assert!(f.core.close(s, CloseReason::PeerClosed));
    }
    assert!(f.core.unauthenticated_queued() <= 2 * f.core.session_count() + 65);
    assert!(f.core.evict_unauthenticated());
    assert!(f.core.session(silent).is_none());
}

/// The bytes one slot of a hash table holds.
fn slot_bytes<K, V, S>(_: &std::collections::HashMap<K, V, S>) -> usize {
    std::mem::size_of::<(K, V)>()
}

/// A session's slot in the core's table is a key and a pointer: the table
/// has more slots than sessions (16,384 for 10,000), and an entry held in
/// its slot made every empty one as large as an entry.
#[test]
fn a_session_s_table_slot_is_a_key_and_a_pointer() {
    let mut fixture = Fixture::new();
    fixture.open();
    assert!(
        slot_bytes(&fixture.core.sessions) <= 16,
        "a slot of the sessions table takes {} bytes",
        slot_bytes(&fixture.core.sessions)
    );
}
