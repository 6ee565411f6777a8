//! The login handshake: the binding, held requests and their replay.

use super::*;
use crate::gateway::Binding;

#[test]
fn bind_winner_and_loser_are_counted() {
    let mut f = Fixture::new();
    let (s, _) = f.open();
    assert_eq!(
        f.core
            .apply_binding(s, Target::Services, 7, 0)
            .unwrap()
            .session_epoch,
        1
    );
    assert!(matches!(
        f.core.apply_binding(s, Target::Services, 8, 0),
        Err(BindError::EpochExpired(_))
    ));
    assert_eq!(
        f.core.apply_binding(99, Target::Services, 8, 0),
        Err(BindError::UnknownSession)
    );
    assert_eq!(f.metrics.gateway.binds.get(), 1);
    assert_eq!(f.metrics.gateway.binds_epoch_expired.get(), 1);
    assert_eq!(f.core.session(s).unwrap().player_id, 7);
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
    let bound = f.core.complete_login(s, 1, admitted(7, 1), f.now);
    assert_eq!(bound.map(|b| (b.player_id, b.session_epoch)), Some((7, 1)));
    let answer = &frames(&outbox)[0];
    assert_eq!((answer.0, answer.2), (FrameKind::Response, 1));
    assert_eq!(answer.3, 7u64.to_le_bytes());
    // A second decision for the same login is late, and changes nothing.
    assert!(f.core.complete_login(s, 1, admitted(7, 1), f.now).is_none());
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
    f.core.complete_login(s, 1, admitted(7, 1), f.now);
    f.core.take_released(&mut released);
    assert_eq!(released.len(), 1);
    let (session, held) = &released[0];
    assert_eq!(*session, s);
    let seqs: Vec<u32> = held.iter().map(|frame| frame.header.seq).collect();
    assert_eq!(seqs, [2]);
    // Replayed, they pass the checks as the logged-in session.
    let frame = &held[0];
    let ingress = f.core.on_held_request(s, frame, f.now).unwrap();
    assert_eq!(ingress.binding.player_id, 7);
    assert!(
        f.core.sessions[&s].transit.is_none(),
        "a logged-in session keeps nothing of its login"
    );
}

/// Frames released by a refused login, behind a second login that the
/// replay begins, are held again by move: the same bodies, not copies.
#[test]
fn frames_held_again_behind_the_next_login_keep_their_bodies() {
    let mut f = Fixture::new();
    f.core.limits.inflight_max = 8;
    let (s, _outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    assert!(f.request(s, route::AUTH_LOGIN, 2).is_none());
    assert!(f.request(s, route::PLAYER_GET, 3).is_none());
    let refused = LoginOutcome::Refused(ErrorCode::AuthFailed, "player already logged in");
    f.core.complete_login(s, 1, refused, f.now);
    let mut released = Vec::new();
    f.core.take_released(&mut released);
    let mut frames = released.pop().unwrap().1.into_iter();
    // The second login, replayed, begins (as the driver begins it).
    let login = frames.next().unwrap();
    assert!(
        f.core.hold_again(s, login.clone()).is_some(),
        "no login waits yet"
    );
    assert!(f.core.on_held_request(s, &login, f.now).is_some());
    f.core.begin_login(s, 2, 7);
    // The request behind it waits again, in the very buffer it came in.
    let request = frames.next().unwrap();
    let body = request.body.as_ptr();
    assert!(f.core.hold_again(s, request).is_none());
    let held = &f.core.sessions[&s].transit.as_ref().unwrap().held;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].header.seq, 3);
    assert_eq!(held[0].body.as_ptr(), body);
}

/// The login's state is made when a login begins and dropped when it
/// ends, so no session keeps it after: held in every entry, it made each
/// one 64 bytes larger.
#[test]
fn a_login_s_state_lasts_only_while_the_login_runs() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    assert!(f.core.sessions[&s].transit.is_none());
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    assert!(f.core.sessions[&s].transit.is_some());
    f.core.complete_login(s, 1, admitted(7, 1), f.now);
    assert!(f.core.session(s).unwrap().is_logged_in());
    assert!(f.core.sessions[&s].transit.is_none());
    // A login that times out leaves none either, once what waited behind
    // it is replayed.
    let (timed_out, _outbox) = f.open();
    f.request(timed_out, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(timed_out, 1, 8);
    assert!(f.request(timed_out, route::PLAYER_GET, 2).is_none());
    f.core.expire(f.now + limits().request_timeout);
    let mut released = Vec::new();
    f.core.take_released(&mut released);
    assert_eq!(released.len(), 1);
    assert!(f.core.sessions[&timed_out].transit.is_none());
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
    assert!(f.core.complete_login(s, 1, admitted(7, 1), later).is_none());
    assert!(!f.core.session(s).unwrap().is_logged_in());
}

fn unbound(session_id: u64, player_id: u64, session_epoch: u32) -> Notice {
    Notice {
        kind: NoticeKind::Unbound,
        session_id,
        binding: Binding {
            target: Target::Services,
            player_id,
            session_epoch,
        },
    }
}

/// Nothing here will ever unbind a session from its player object if the
/// gateway never bound it: a login the player object admitted after it
/// timed out, or after its session closed, is undone by a notice naming
/// the very binding the player object made (under `single`, the player
/// could otherwise never log in again).
#[test]
fn a_login_admitted_after_it_ended_here_is_undone() {
    let mut f = Fixture::new();
    // Timed out: the session stays open, logged out.
    let (s, _outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    assert_eq!(f.core.begin_login(s, 1, 7), Some(1));
    let later = f.now + limits().request_timeout;
    assert_eq!(f.core.expire(later), 1);
    assert!(f.core.complete_login(s, 1, admitted(7, 1), later).is_none());
    assert_eq!(f.notices(), [unbound(s, 7, 1)]);
    // Closed: the session is gone when the admission arrives.
    let (closed, _outbox) = f.open();
    f.request(closed, route::AUTH_LOGIN, 1).unwrap();
    assert_eq!(f.core.begin_login(closed, 1, 8), Some(1));
    assert!(f.core.close(closed, CloseReason::PeerClosed));
    assert!(
        f.notices()
            .iter()
            .all(|notice| notice.binding.target != Target::Services),
        "never bound here: the player object hears nothing at the close"
    );
    assert!(f
        .core
        .complete_login(closed, 1, admitted(8, 1), later)
        .is_none());
    assert_eq!(f.notices(), [unbound(closed, 8, 1)]);
    assert_eq!(f.metrics.gateway.late_logins_undone.get(), 2);
    assert_eq!(f.metrics.gateway.late_answers.get(), 2);
}

/// A session whose first login timed out logs in again: both logins make
/// the same binding (same session, player and epoch), which the second
/// owns, whether the first's admission arrives before or after it ends.
#[test]
fn a_late_admission_leaves_the_same_binding_a_later_login_makes() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.begin_login(s, 1, 7);
    let later = f.now + limits().request_timeout;
    f.core.expire(later);
    f.request(s, route::AUTH_LOGIN, 2).unwrap();
    assert_eq!(f.core.begin_login(s, 2, 7), Some(1));
    // The first's admission while the second is pending.
    assert!(f.core.complete_login(s, 1, admitted(7, 1), later).is_none());
    let bound = f.core.complete_login(s, 2, admitted(7, 1), later);
    assert_eq!(bound.map(|b| (b.player_id, b.session_epoch)), Some((7, 1)));
    // And once it is bound (a duplicate of the first's admission).
    assert!(f.core.complete_login(s, 1, admitted(7, 1), later).is_none());
    assert_eq!(f.notices(), []);
    assert_eq!(f.metrics.gateway.late_logins_undone.get(), 0);
    assert!(f.core.session(s).unwrap().is_logged_in());
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
fn a_logged_in_session_is_kicked_from_the_second_its_token_expires() {
    let mut f = Fixture::new();
    let (s, outbox) = f.open();
    f.request(s, route::AUTH_LOGIN, 1).unwrap();
    f.core.set_token_expiry(s, 1_000);
    f.core.begin_login(s, 1, 7);
    f.core.complete_login(s, 1, admitted(7, 1), f.now);
    // A session that is not logged in has no login to expire.
    let (unbound, _) = f.open();
    f.core.set_token_expiry(unbound, 1_000);
    assert_eq!(f.core.kick_expired(999), 0, "valid while now < expiry");
    assert!(f.core.session(s).is_some());
    assert_eq!(
        f.core.kick_expired(1_000),
        1,
        "expired from the second expiry on"
    );
    assert!(f.core.session(s).is_none(), "the session is gone");
    assert!(f.core.session(unbound).is_some(), "the unbound one stays");
    let pushed = frames(&outbox);
    let kicked = pushed.last().unwrap();
    assert_eq!((kicked.0, kicked.1), (FrameKind::Push, route::SYS_KICKED));
    assert_eq!(kicked.3, TOKEN_EXPIRED_REASON.as_bytes());
    assert_eq!(f.metrics.gateway.token_expired_kicks.get(), 1);
    assert_eq!(f.metrics.gateway.kicks.get(), 1);
    assert_eq!(f.core.kick_expired(2_000), 0, "kicked once");
}

/// A player object asks whether a session that keeps a login out still
/// stands: one bound as it names it, or about to be, does; any other is
/// released with the very binding the player object holds.
#[test]
fn a_session_check_releases_only_a_session_that_no_longer_stands() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    f.login(s, 7);
    let bound = f.core.session(s).unwrap().binding();
    f.core.check_session(s, bound);
    assert_eq!(f.notices(), [], "bound as named: it stands");
    // Named with an older epoch: not as it stands.
    let older = Binding {
        session_epoch: bound.session_epoch - 1,
        ..bound
    };
    f.core.check_session(s, older);
    assert_eq!(f.notices(), [unbound(s, 7, older.session_epoch)]);
    // A session logging in as the player is about to be bound so.
    let (pending, _outbox) = f.open();
    f.request(pending, route::AUTH_LOGIN, 1).unwrap();
    let epoch = f.core.begin_login(pending, 1, 7).unwrap();
    f.core
        .check_session(pending, unbound(pending, 7, epoch).binding);
    assert_eq!(f.notices(), []);
    // Closed, or never of this start of the node.
    assert!(f.core.close(s, CloseReason::PeerClosed));
    f.notices();
    f.core.check_session(s, bound);
    f.core.check_session(12_345, bound);
    assert_eq!(
        f.notices(),
        [
            unbound(s, 7, bound.session_epoch),
            unbound(12_345, 7, bound.session_epoch)
        ]
    );
    assert_eq!(f.metrics.gateway.stale_sessions_released.get(), 3);
}

/// A push names the binding its sender holds for the session: one that
/// meets a session not holding it (closed, of an earlier run of the node,
/// logged in again, as another player) releases that binding, so the
/// player stops counting the session; a push the session takes, or one
/// naming no player, releases nothing.
#[test]
fn a_push_to_a_session_that_no_longer_stands_releases_its_binding() {
    let mut f = Fixture::new();
    let (s, _outbox) = f.open();
    let epoch = f.login(s, 7);
    let now = f.now;
    let push = |session, epoch, player| {
        egress(
            session,
            epoch,
            player,
            FrameKind::Push,
            route::ROOM_MESSAGE,
            0,
        )
    };
    f.core.egress(&push(s, epoch, 7), now).unwrap();
    assert_eq!(f.notices(), [], "taken: it stands");
    let stale = [push(s, epoch - 1, 7), push(s, epoch, 8), push(s + 1, 3, 7)];
    for probe in &stale {
        assert!(f.core.egress(probe, now).is_err());
    }
    assert_eq!(
        f.notices(),
        [
            unbound(s, 7, epoch - 1),
            unbound(s, 8, epoch),
            unbound(s + 1, 7, 3)
        ]
    );
    // An answer that misses, and a push for no player, release nothing.
    let answer = egress(s + 1, 3, 7, FrameKind::Response, route::PLAYER_GET, 1);
    assert!(f.core.egress(&answer, now).is_err());
    assert!(f.core.egress(&push(s + 1, 3, 0), now).is_err());
    assert_eq!(f.notices(), []);
    assert_eq!(f.metrics.gateway.stale_sessions_released.get(), 3);
}
