//! Resumable sessions: the token PUSH, numbered and kept pushes, the
//! detached session and its window, and a resume's answers.

use super::*;
use crate::gateway::core::push_ring::PushRing;
use crate::gateway_addresses::Transport;

const TOKEN: ResumeToken = [7; 16];
const WINDOW: Duration = Duration::from_millis(500);

fn resumable_core(pushes_max: u32) -> Fixture {
    let mut f = Fixture::new();
    f.core.set_resume_settings(ResumeSettings::new(
        WINDOW.as_millis() as u64,
        pushes_max,
        usize::MAX,
    ));
    f
}

/// A session logged in as player 7 by a version-2 login offered resuming.
fn resumable_login(f: &mut Fixture) -> (u64, Rc<Outbox>) {
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7).unwrap();
    f.core.offer_resume(s, TOKEN);
    f.core.complete_login(s, 1, admitted(7, 1), f.now);
    (s, outbox)
}

fn push(f: &mut Fixture, s: u64, epoch: u32, body: &'static [u8]) {
    let mut push = egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0);
    push.body = body;
    f.core.egress(&push, f.now).unwrap();
}

fn relay_outbox() -> Rc<Outbox> {
    Rc::new(Outbox::new(usize::MAX))
}

/// A new connection, accepted on the plain listener, whose front is
/// `front` and whose frames for the client go to `outbox`.
fn via(front: u64, outbox: Rc<Outbox>) -> NewConnection {
    NewConnection {
        front,
        transport: Transport::Plain,
        outbox,
    }
}

#[test]
fn the_ring_keeps_the_last_pushes_and_knows_what_it_lost() {
    let mut ring = PushRing::new(3, usize::MAX);
    for n in 1..=5u8 {
        assert_eq!(ring.record(100, &[n]), u32::from(n));
    }
    // 3, 4 and 5 are kept: a client that saw 2 or more can resume.
    assert!(ring.after(1).is_none());
    let seqs = |last| ring.after(last).unwrap().map(|p| p.seq).collect::<Vec<_>>();
    assert_eq!(seqs(2), [3, 4, 5]);
    assert_eq!(seqs(4), [5]);
    assert!(seqs(5).is_empty());
    assert!(seqs(9).is_empty(), "a client ahead has everything");
    assert!(PushRing::new(3, usize::MAX)
        .after(0)
        .unwrap()
        .next()
        .is_none());
}

/// The ring is bounded in bytes too: 1,024 pushes of 64 KiB each were
/// 64 MiB kept for every resumable session, connected or not.
#[test]
fn the_ring_is_bounded_in_bytes() {
    let mut ring = PushRing::new(1024, 10_000);
    for n in 1..=5u8 {
        ring.record(100, &[n; 4_000]);
    }
    // 8,000 bytes fit: pushes 4 and 5 are kept.
    assert!(ring.after(2).is_none(), "push 3 was let go");
    let seqs: Vec<u32> = ring.after(3).unwrap().map(|p| p.seq).collect();
    assert_eq!(seqs, [4, 5]);
    // A push larger than the bound is still kept, alone.
    ring.record(100, &[6; 20_000]);
    let seqs: Vec<u32> = ring.after(5).unwrap().map(|p| p.seq).collect();
    assert_eq!(seqs, [6]);
    assert!(ring.after(4).is_none());
}

#[test]
fn push_numbers_that_wrapped_past_u32_max_still_resume_exactly() {
    // Four pushes across the wrap: MAX - 1, MAX, 1, 2 (0 is no number).
    let mut ring = PushRing::after_pushes(16, u64::from(u32::MAX) - 2);
    let numbers: Vec<u32> = (0..4).map(|n| ring.record(100, &[n])).collect();
    assert_eq!(numbers, [u32::MAX - 1, u32::MAX, 1, 2]);
    let seqs = |last| {
        ring.after(last)
            .map(|pushes| pushes.map(|p| p.seq).collect::<Vec<_>>())
    };
    assert_eq!(seqs(u32::MAX - 1), Some(vec![u32::MAX, 1, 2]));
    assert_eq!(seqs(u32::MAX), Some(vec![1, 2]));
    assert_eq!(seqs(1), Some(vec![2]), "not `pushes lost`");
    assert_eq!(seqs(2), Some(vec![]));
    assert_eq!(seqs(u32::MAX - 2), Some(numbers.clone()), "all four");
    // A number from before the ones kept: lost, said so.
    assert_eq!(seqs(7), None);
}

#[test]
fn a_version_2_login_gets_its_token_and_numbered_pushes() {
    let mut f = resumable_core(16);
    let (s, outbox) = resumable_login(&mut f);
    push(&mut f, s, 1, b"a");
    push(&mut f, s, 1, b"b");
    let frames = frames(&outbox);
    assert_eq!(
        (frames[0].0, frames[0].1),
        (FrameKind::Response, route::AUTH_LOGIN)
    );
    let session = &frames[1];
    assert_eq!(
        (session.0, session.1, session.2),
        (FrameKind::Push, route::SYS_SESSION, 0)
    );
    let mut body = TOKEN.to_vec();
    body.extend_from_slice(&500u32.to_le_bytes());
    assert_eq!(session.3, body);
    let pushes: Vec<_> = frames[2..].iter().map(|f| (f.2, f.3.clone())).collect();
    assert_eq!(pushes, [(1, b"a".to_vec()), (2, b"b".to_vec())]);
    let mut events = Vec::new();
    f.core.take_token_events(&mut events);
    assert_eq!(events, [TokenEvent::Held(TOKEN, s)]);
}

#[test]
fn a_version_1_session_is_unchanged() {
    let mut f = resumable_core(16);
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7).unwrap();
    f.core.complete_login(s, 1, admitted(7, 1), f.now);
    push(&mut f, s, 1, b"a");
    let frames = frames(&outbox);
    assert_eq!(frames.len(), 2, "no sys.session");
    assert_eq!((frames[1].1, frames[1].2), (route::ROOM_MESSAGE, 0));
    // Its end is a disconnect, as ever.
    assert!(f.core.close(s, CloseReason::PeerClosed));
    assert!(f.core.session(s).is_none());
}

#[test]
fn a_refused_login_offers_nothing() {
    let mut f = resumable_core(16);
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7).unwrap();
    f.core.offer_resume(s, TOKEN);
    let refused = LoginOutcome::Refused(ErrorCode::AuthFailed, "no");
    f.core.complete_login(s, 1, refused, f.now);
    assert_eq!(frames(&outbox).len(), 1, "the ERROR only");
    let resumed = f.core.resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(resumed, Err(ResumeRefusal::Unknown));
}

#[test]
fn a_detached_session_keeps_its_pushes_and_resumes_once_after_the_last_seen() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    push(&mut f, s, 1, b"a");
    push(&mut f, s, 1, b"b");
    // The connection ends by itself: no notice, the session stays bound.
    assert!(f.core.close(s, CloseReason::PeerClosed));
    assert!(f.notices().is_empty(), "the player is not told");
    assert_eq!(f.core.session(s).unwrap().player_id, 7);
    push(&mut f, s, 1, b"c");
    // The client saw push 1: 2 and 3 come again, after the RESPONSE.
    let relay = relay_outbox();
    let resumed = f
        .core
        .resume(&TOKEN, 1, 4, via(99, relay.clone()), f.now)
        .unwrap();
    assert_eq!(
        (resumed.session_id, resumed.player_id, resumed.replayed),
        (s, 7, 2)
    );
    push(&mut f, s, 1, b"d");
    let frames: Vec<_> = frames(&relay)
        .iter()
        .map(|f| (f.0, f.1, f.2, f.3.clone()))
        .collect();
    assert_eq!(
        frames,
        [
            (
                FrameKind::Response,
                route::AUTH_RESUME,
                4,
                7u64.to_le_bytes().to_vec()
            ),
            (FrameKind::Push, route::ROOM_MESSAGE, 2, b"b".to_vec()),
            (FrameKind::Push, route::ROOM_MESSAGE, 3, b"c".to_vec()),
            (FrameKind::Push, route::ROOM_MESSAGE, 4, b"d".to_vec()),
        ]
    );
    // The token resumes once: the second use is refused.
    let again = f.core.resume(&TOKEN, 1, 1, via(98, relay_outbox()), f.now);
    assert_eq!(again, Err(ResumeRefusal::Unknown));
    assert_eq!(f.metrics.gateway.sessions_resumed.get(), 1);
    assert_eq!(f.metrics.gateway.resumes_refused_unknown.get(), 1);
    // Once the resumed connection ends, the token resumes it again.
    assert!(f.core.carries(s, 99));
    f.core.front_ended(s, 99);
    assert!(f
        .core
        .resume(&TOKEN, 4, 1, via(97, relay_outbox()), f.now)
        .is_ok());
}

#[test]
fn an_open_old_connection_is_kicked_by_a_resume() {
    let mut f = resumable_core(16);
    let (s, old) = resumable_login(&mut f);
    assert!(f
        .core
        .resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now)
        .is_ok());
    let last = frames(&old).pop().unwrap();
    assert_eq!((last.0, last.1), (FrameKind::Push, route::SYS_KICKED));
    assert_eq!(last.3, RESUMED_ELSEWHERE_REASON.as_bytes());
    assert_ne!(old.state(), crate::gateway::outbox::OutboxState::Open);
    // The old connection's end does not touch the resumed session.
    assert!(!f.core.close_connection(s, &old, CloseReason::PeerClosed));
    assert!(f.core.session(s).is_some());
    assert!(f.notices().is_empty());
}

#[test]
fn the_window_ends_a_detached_session_as_a_disconnect() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    f.core.close(s, CloseReason::PeerClosed);
    // The first sweep starts the window; one a window later ends it.
    assert_eq!(f.core.expire_detached(f.now), 0);
    assert_eq!(f.core.expire_detached(f.now + WINDOW), 1);
    let notices = f.notices();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].kind, NoticeKind::Disconnected);
    assert!(f.core.session(s).is_none());
    let late = f
        .core
        .resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now + WINDOW);
    assert_eq!(late, Err(ResumeRefusal::Expired));
    assert_eq!(f.metrics.gateway.resumes_refused_expired.get(), 1);
    assert_eq!(f.core.detached_sessions(), 0);
    // Remembered a while (a minute at least), then forgotten.
    f.core.expire_detached(f.now + Duration::from_secs(61));
    let forgotten = f.core.resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(forgotten, Err(ResumeRefusal::Unknown));
}

#[test]
fn a_resume_after_the_window_but_before_the_sweep_is_expired() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    f.core.close(s, CloseReason::PeerClosed);
    f.core.expire_detached(f.now);
    let late = f
        .core
        .resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now + WINDOW * 2);
    assert_eq!(late, Err(ResumeRefusal::Expired));
    assert!(f.core.session(s).is_none());
    assert_eq!(f.notices()[0].kind, NoticeKind::Disconnected);
}

#[test]
fn more_pushes_than_kept_are_lost() {
    let mut f = resumable_core(2);
    let (s, _) = resumable_login(&mut f);
    f.core.close(s, CloseReason::PeerClosed);
    for _ in 0..3 {
        push(&mut f, s, 1, b"x");
    }
    let lost = f.core.resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(lost, Err(ResumeRefusal::PushesLost));
    assert_eq!(ResumeRefusal::PushesLost.reason(), "pushes lost");
    assert_eq!(f.metrics.gateway.resumes_refused_pushes_lost.get(), 1);
    // A client that saw the first still gets the other two.
    assert_eq!(
        f.core
            .resume(&TOKEN, 1, 1, via(99, relay_outbox()), f.now)
            .map(|r| r.replayed),
        Ok(2)
    );
}

/// Under `kick_old`, device A's session is detached when device B logs
/// in and kicks it: A never read the `sys.kicked`. A's resume is told of
/// the kick, not `unknown session`, so A does not log in afresh and kick
/// B in turn. The token is remembered as an expired one is, then
/// forgotten.
#[test]
fn a_kicked_session_s_resume_is_told_of_the_kick() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    f.core.close(s, CloseReason::PeerClosed);
    assert!(f.core.kick(s, Some(7), "logged in elsewhere"));
    assert_eq!(f.notices()[0].kind, NoticeKind::Unbound);
    assert!(f.core.session(s).is_none());
    assert_eq!(f.core.detached_sessions(), 0);
    let mut events = Vec::new();
    f.core.take_token_events(&mut events);
    assert_eq!(
        events,
        [TokenEvent::Held(TOKEN, s)],
        "the node's directory still sends the token here"
    );
    let resumed = f.core.resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(resumed, Err(ResumeRefusal::Kicked));
    assert_eq!(ResumeRefusal::Kicked.reason(), "session kicked");
    assert_eq!(f.metrics.gateway.resumes_refused_kicked.get(), 1);
    // Remembered a while (a minute at least), then forgotten.
    f.core.expire_detached(f.now);
    f.core.expire_detached(f.now + Duration::from_secs(61));
    f.core.take_token_events(&mut events);
    assert_eq!(events.last(), Some(&TokenEvent::Forgotten(TOKEN)));
    let forgotten = f.core.resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(forgotten, Err(ResumeRefusal::Unknown));
}

/// A session kicked because its token expired, whose client lost the
/// connection before it read the kick: its resume is told `token
/// expired`, after which a client may log in with a fresh token.
#[test]
fn a_session_kicked_for_its_expired_token_is_told_so_at_its_resume() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    f.core.set_token_expiry(s, 100);
    assert_eq!(f.core.kick_expired(100), 1);
    let resumed = f.core.resume(&TOKEN, 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(resumed, Err(ResumeRefusal::TokenExpired));
    assert_eq!(ResumeRefusal::TokenExpired.reason(), "token expired");
    assert_eq!(f.metrics.gateway.resumes_refused_token_expired.get(), 1);
}

#[test]
fn a_relay_front_hands_its_frames_to_the_session() {
    let mut f = resumable_core(16);
    let (front, front_outbox) = f.open();
    f.core.begin_relay(front, 42);
    assert!(f.request(front, route::PLAYER_GET, 5).is_none());
    let mut relayed = Vec::new();
    f.core.take_relayed(&mut relayed);
    assert_eq!(relayed.len(), 1);
    assert_eq!((relayed[0].0, relayed[0].1), (42, front));
    assert_eq!(relayed[0].2.header.seq, 5);
    // What the session writes is queued as it is; its end closes the front.
    assert!(f.core.relay_write(front, b"\x01\x02", false));
    assert_eq!(front_outbox.queued_bytes(), b"\x01\x02");
    f.core.relay_end(front, false);
    assert!(f.core.session(front).is_none());
    let mut ended = Vec::new();
    f.core.take_fronts_ended(&mut ended);
    assert!(ended.is_empty(), "the session ended it");
}

#[test]
fn a_front_that_ends_detaches_its_session() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    let (front, _) = f.open();
    f.core.begin_relay(front, s);
    assert!(f
        .core
        .resume(&TOKEN, 0, 1, via(front, relay_outbox()), f.now)
        .is_ok());
    f.core.close(front, CloseReason::PeerClosed);
    let mut ended = Vec::new();
    f.core.take_fronts_ended(&mut ended);
    assert_eq!(ended, [(s, front)]);
    f.core.front_ended(s, front);
    push(&mut f, s, 1, b"kept");
    assert!(f
        .core
        .resume(&TOKEN, 0, 1, via(5, relay_outbox()), f.now)
        .is_ok());
}

#[test]
fn an_offer_of_a_login_that_timed_out_is_not_the_next_logins() {
    let mut f = resumable_core(16);
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7).unwrap();
    f.core.offer_resume(s, TOKEN);
    assert_eq!(f.core.expire(f.now + TIMEOUT), 1);
    // A version-1 login follows: no token, no numbering.
    f.request(s, route::AUTH_LOGIN, 2).unwrap();
    f.core.begin_login(s, 2, 7).unwrap();
    f.core.complete_login(s, 2, admitted(7, 1), f.now);
    push(&mut f, s, 1, b"a");
    let frames = frames(&outbox);
    assert!(frames.iter().all(|frame| frame.1 != route::SYS_SESSION));
    assert_eq!(frames.last().map(|frame| frame.2), Some(0));
}

#[test]
fn version_1_frames_on_the_version_2_routes_are_unknown_routes() {
    let mut f = resumable_core(16);
    let (s, outbox) = f.open();
    assert!(f.request(s, route::AUTH_RESUME, 1).is_none());
    assert!(f.request(s, route::SYS_SESSION, 2).is_none());
    let frames = frames(&outbox);
    assert_eq!(error_code(&frames[0]), ErrorCode::UnknownRoute as u16);
    assert_eq!(error_code(&frames[1]), ErrorCode::UnknownRoute as u16);
    assert_eq!(f.metrics.gateway.ingress_unknown_route.get(), 2);
    // As a version-2 REQUEST, auth.resume goes to the auth service.
    let header = Header {
        kind: FrameKind::Request,
        route_id: route::AUTH_RESUME,
        seq: 3,
        body_len: 28,
    };
    let ingress = f.core.on_keyed_request(s, header, Some(0), &[0; 20], f.now);
    assert_eq!(ingress.map(|i| i.binding.target), Some(Target::Auth));
}

#[test]
fn a_late_answer_to_the_old_connection_never_answers_the_new_ones_same_seq() {
    let mut f = resumable_core(16);
    let (s, _) = resumable_login(&mut f);
    let old = f.request(s, route::PLAYER_INCR, 3).unwrap().connection;
    assert!(f.core.close(s, CloseReason::PeerClosed));
    let relay = relay_outbox();
    f.core
        .resume(&TOKEN, 0, 1, via(99, relay.clone()), f.now)
        .unwrap();
    // The new connection starts its seqs again: 3 on the same route.
    let new = f.request(s, route::PLAYER_INCR, 3).unwrap().connection;
    assert_ne!(old, new);
    let mut late = egress(s, 1, 7, FrameKind::Response, route::PLAYER_INCR, 3);
    late.body = b"old";
    late.connection = Some(old);
    assert_eq!(f.core.egress(&late, f.now), Err(EgressRejected::LateAnswer));
    let mut answer = egress(s, 1, 7, FrameKind::Response, route::PLAYER_INCR, 3);
    answer.body = b"new";
    answer.connection = Some(new);
    f.core.egress(&answer, f.now).unwrap();
    let answers: Vec<_> = frames(&relay)
        .into_iter()
        .filter(|frame| frame.1 == route::PLAYER_INCR)
        .map(|frame| frame.3)
        .collect();
    assert_eq!(answers, [b"new".to_vec()]);
}

/// Under `multi` one player's client can log in and drop its connection
/// over and over: each session is detached, with its token and kept
/// pushes, for the window. A core keeps at most `detached_max` of them;
/// past it the oldest ends as at the end of its window (the player is told
/// it disconnected, its token is answered `resume window expired`).
#[test]
fn detached_sessions_are_bounded_and_the_oldest_ends_first() {
    let mut f = Fixture::new();
    let settings = ResumeSettings::new(WINDOW.as_millis() as u64, 16, usize::MAX);
    // A node of 12 sessions over 4 cores: 3 detached sessions a core.
    f.core.set_resume_settings(settings.for_core_of(12, 4));
    let mut sessions = Vec::new();
    for n in 0..10u8 {
        let (s, _) = f.open();
        f.request(s, route::AUTH_LOGIN, 1).unwrap();
        f.core.begin_login(s, 1, 7).unwrap();
        f.core.offer_resume(s, [n; 16]);
        f.core.complete_login(s, 1, admitted(7, 1), f.now);
        assert!(f.core.close(s, CloseReason::PeerClosed));
        assert!(f.core.detached_sessions() <= 3);
        sessions.push(s);
    }
    assert_eq!(f.core.detached_sessions(), 3);
    assert_eq!(f.core.session_count(), 3);
    assert_eq!(f.metrics.gateway.detached_evicted.get(), 7);
    let notices = f.notices();
    assert_eq!(notices.len(), 7);
    assert!(notices.iter().all(|n| n.kind == NoticeKind::Disconnected));
    let ended: Vec<u64> = notices.iter().map(|n| n.session_id).collect();
    assert_eq!(ended, sessions[..7], "the oldest first");
    // The newest three resume; an evicted one is told its window passed,
    // as long as the core remembers its token: the last `detached_max`
    // ended tokens.
    let evicted = f
        .core
        .resume(&[6; 16], 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(evicted, Err(ResumeRefusal::Expired));
    let oldest = f
        .core
        .resume(&[3; 16], 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(oldest, Err(ResumeRefusal::Unknown), "past the bound");
    for n in 7..10u8 {
        let resumed = f
            .core
            .resume(&[n; 16], 0, 1, via(99, relay_outbox()), f.now);
        assert_eq!(resumed.map(|r| r.session_id), Ok(sessions[n as usize]));
    }
    assert_eq!(f.core.detached_sessions(), 0);
    // The evicted token is forgotten, stamped by the sweep, a while later.
    f.core.expire_detached(f.now);
    f.core.expire_detached(f.now + Duration::from_secs(61));
    let forgotten = f
        .core
        .resume(&[6; 16], 0, 1, via(99, relay_outbox()), f.now);
    assert_eq!(forgotten, Err(ResumeRefusal::Unknown));
}
