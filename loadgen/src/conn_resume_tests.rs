//! `--resume` on one connection, against scripted server bytes: the
//! version-2 login and its `sys.session` token, the push numbers, the
//! `auth.resume` request, its answer or refusal, and the check of every
//! push number.

use wire::client::{
    encode_error_body, encode_frame, route, ErrorCode, FrameDecoder, FrameKind, Peer,
};

use crate::cli::Proto;
use crate::conn::{Conn, Event, Phase, Window};
use crate::resume::{ResumeLedger, TOKEN_LEN};
use crate::stats::{Failure, Stats};
use crate::workload::Op;

const MS: u64 = 1_000_000;
const ALL: Window = Window {
    start_ns: 0,
    end_ns: u64::MAX,
};
const PLAYER: u64 = 7;
const ROOM: u64 = 3;
const TOKEN: [u8; TOKEN_LEN] = [0xab; TOKEN_LEN];

/// A request the fake server read: header fields, request key, body.
#[derive(Debug)]
struct Sent {
    version: u8,
    route_id: u32,
    seq: u32,
    key: Option<u64>,
    body: Vec<u8>,
}

fn sent(conn: &mut Conn) -> Vec<Sent> {
    let bytes = std::mem::take(conn.out_mut());
    let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16).accept_version_2();
    assert_eq!(decoder.extend(&bytes), bytes.len());
    let mut requests = Vec::new();
    while let Some(frame) = decoder.next_frame().expect("valid frames") {
        requests.push(Sent {
            // Only a version-2 REQUEST carries a key (`Some(0)`: none).
            version: if frame.request_key.is_some() { 2 } else { 1 },
            route_id: frame.header.route_id,
            seq: frame.header.seq,
            key: frame.request_key,
            body: frame.body.to_vec(),
        });
    }
    requests
}

fn frame(kind: FrameKind, route_id: u32, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&mut out, kind, route_id, seq, body);
    out
}

/// The RESPONSE of `auth.login` or `auth.resume`: the session's player.
fn player_answer(route_id: u32, seq: u32) -> Vec<u8> {
    frame(FrameKind::Response, route_id, seq, &PLAYER.to_le_bytes())
}

fn session_offer() -> Vec<u8> {
    let mut body = TOKEN.to_vec();
    body.extend_from_slice(&30_000u32.to_le_bytes());
    frame(FrameKind::Push, route::SYS_SESSION, 0, &body)
}

/// A `room.message` PUSH numbered `push_seq`, sent at 1 ms.
fn room_push(push_seq: u32) -> Vec<u8> {
    let mut body = ROOM.to_le_bytes().to_vec();
    body.extend_from_slice(&5u64.to_le_bytes());
    body.extend_from_slice(b"1000000");
    frame(FrameKind::Push, route::ROOM_MESSAGE, push_seq, &body)
}

fn receive(conn: &mut Conn, stats: &mut Stats) -> Vec<Event> {
    let mut events = Vec::new();
    conn.receive(2 * MS, ALL, stats, &mut events)
        .expect("valid frames");
    events
}

/// A connection logged in with version 2, offered `TOKEN`, `Ready`.
fn logged_in(stats: &mut Stats, keys: bool) -> Conn {
    let mut conn = Conn::new(Proto::Routerd, PLAYER, ROOM, 4, 1 << 16)
        .with_keys(keys)
        .with_resume(true);
    conn.start_login("v1.7.9.mac", 0);
    let login = sent(&mut conn).remove(0);
    assert_eq!((login.version, login.key), (2, Some(0)), "{login:?}");
    assert_eq!(
        (login.route_id, login.body.as_slice()),
        (route::AUTH_LOGIN, b"v1.7.9.mac".as_slice())
    );
    conn.feed(&player_answer(route::AUTH_LOGIN, login.seq));
    conn.feed(&session_offer());
    assert_eq!(receive(&mut conn, stats), vec![Event::LoggedIn]);
    assert!(conn.can_send());
    conn
}

/// Resets `conn` (its connection ended) and sends `auth.resume`.
fn reconnect_and_resume(conn: &mut Conn, stats: &mut Stats) -> Sent {
    conn.reset(PLAYER, stats);
    assert!(conn.start_resume(3 * MS, stats), "a session to take back");
    assert_eq!(conn.phase(), Phase::LoggingIn);
    let mut requests = sent(conn);
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests.remove(0)
}

#[test]
fn a_version_1_login_stays_version_1_without_resume() {
    let mut conn = Conn::new(Proto::Routerd, PLAYER, ROOM, 4, 1 << 16).with_resume(false);
    conn.start_login("v1.7.9.mac", 0);
    let login = sent(&mut conn).remove(0);
    assert_eq!((login.version, login.key), (1, None));
    let mut stats = Stats::default();
    let mut idle = Conn::new(Proto::Routerd, PLAYER, ROOM, 4, 1 << 16);
    assert!(!idle.start_resume(0, &mut stats), "no session to resume");
    assert_eq!((idle.phase(), stats.resume.attempted), (Phase::Idle, 0));
}

#[test]
fn the_token_and_the_last_push_go_into_auth_resume() {
    let mut stats = Stats::default();
    let mut conn = logged_in(&mut stats, false);
    conn.feed(&room_push(1));
    conn.feed(&room_push(2));
    receive(&mut conn, &mut stats);
    assert_eq!(conn.last_push_seq(), 2);
    assert_eq!(stats.pushes, 2);

    let resume = reconnect_and_resume(&mut conn, &mut stats);
    assert_eq!(
        (resume.version, resume.route_id, resume.key),
        (2, route::AUTH_RESUME, Some(0))
    );
    let mut body = TOKEN.to_vec();
    body.extend_from_slice(&2u32.to_le_bytes());
    assert_eq!(resume.body, body);
    assert_eq!(stats.resume.attempted, 1);
}

#[test]
fn a_resumed_session_gets_the_replay_in_order_and_is_ready() {
    let mut stats = Stats::default();
    let mut conn = logged_in(&mut stats, false);
    conn.feed(&room_push(1));
    receive(&mut conn, &mut stats);
    let resume = reconnect_and_resume(&mut conn, &mut stats);
    // The answer, the two pushes the session missed right behind it.
    conn.feed(&player_answer(route::AUTH_RESUME, resume.seq));
    conn.feed(&room_push(2));
    conn.feed(&room_push(3));
    assert_eq!(receive(&mut conn, &mut stats), vec![Event::Resumed]);
    assert_eq!(conn.phase(), Phase::Ready);
    // A push of a later read is a new one.
    conn.feed(&room_push(4));
    receive(&mut conn, &mut stats);
    assert_eq!(
        stats.resume,
        ResumeLedger {
            attempted: 1,
            resumed: 1,
            pushes_replayed: 2,
            pushes_checked: 4,
            ..ResumeLedger::default()
        }
    );
    assert_eq!(stats.protocol_errors, 0);
    assert!(crate::report::verdict(&stats, None, 1.0).is_empty());
}

#[test]
fn a_refused_resume_is_counted_by_reason_and_logs_in_afresh() {
    let mut stats = Stats::default();
    let mut conn = logged_in(&mut stats, false);
    conn.feed(&room_push(1));
    receive(&mut conn, &mut stats);
    let resume = reconnect_and_resume(&mut conn, &mut stats);
    let refusal = encode_error_body(ErrorCode::AuthFailed, "unknown session");
    conn.feed(&frame(
        FrameKind::Error,
        route::AUTH_RESUME,
        resume.seq,
        &refusal,
    ));
    assert_eq!(receive(&mut conn, &mut stats), vec![Event::ResumeRefused]);
    assert_eq!(conn.phase(), Phase::Idle);
    assert_eq!(stats.resume.refused_unknown_session, 1);
    // The session is gone: the next connection could not resume it.
    assert!(!conn.start_resume(0, &mut stats));
    // A fresh session numbers its pushes from 1 again: no duplicate.
    conn.start_login("v1.7.9.mac", 0);
    let login = sent(&mut conn).remove(0);
    conn.feed(&player_answer(route::AUTH_LOGIN, login.seq));
    conn.feed(&session_offer());
    conn.feed(&room_push(1));
    assert_eq!(receive(&mut conn, &mut stats), vec![Event::LoggedIn]);
    assert_eq!(
        (stats.resume.push_duplicates, stats.resume.push_gaps),
        (0, 0)
    );
    assert_eq!(stats.resume.attempted, 1);
}

#[test]
fn a_push_skipped_or_delivered_twice_across_a_resume_fails_the_run() {
    let mut stats = Stats::default();
    let mut conn = logged_in(&mut stats, false);
    conn.feed(&room_push(1));
    conn.feed(&room_push(2));
    receive(&mut conn, &mut stats);
    let resume = reconnect_and_resume(&mut conn, &mut stats);
    // The server replays 2 again, then skips 3.
    conn.feed(&player_answer(route::AUTH_RESUME, resume.seq));
    conn.feed(&room_push(2));
    conn.feed(&room_push(4));
    receive(&mut conn, &mut stats);
    assert_eq!(
        (stats.resume.push_duplicates, stats.resume.push_gaps),
        (1, 1)
    );
    let failures = crate::report::verdict(&stats, None, 1.0);
    assert!(
        failures.iter().any(|f| f.contains("--resume promises")),
        "{failures:?}"
    );
}

#[test]
fn an_increment_in_flight_at_a_cut_is_sent_again_with_its_key_after_the_resume() {
    let mut stats = Stats::default();
    let mut conn = logged_in(&mut stats, true);
    conn.send(Op::Incr, b"", MS, true, &mut stats)
        .expect("room");
    let incr = sent(&mut conn).remove(0);
    assert!(incr.key.is_some_and(|key| key != 0));
    // Cut before its answer: lost, and queued to go again.
    let resume = reconnect_and_resume(&mut conn, &mut stats);
    assert_eq!(stats.ops[Op::Incr.index()].failed[Failure::Lost.slot()], 1);
    conn.feed(&player_answer(route::AUTH_RESUME, resume.seq));
    assert_eq!(receive(&mut conn, &mut stats), vec![Event::Resumed]);
    assert!(conn.send_retries(u64::MAX / 2, &mut stats));
    let retry = sent(&mut conn).remove(0);
    assert_eq!((retry.route_id, retry.key), (route::PLAYER_INCR, incr.key));
    conn.feed(&frame(
        FrameKind::Response,
        route::PLAYER_INCR,
        retry.seq,
        &1i64.to_le_bytes(),
    ));
    receive(&mut conn, &mut stats);
    assert_eq!(
        (stats.keys.acknowledged, stats.keys.retried_acknowledged),
        (1, 1)
    );
}

#[test]
fn a_session_offer_without_a_version_2_login_or_malformed_is_a_protocol_error() {
    let mut stats = Stats::default();
    let mut conn = Conn::new(Proto::Routerd, PLAYER, ROOM, 4, 1 << 16);
    conn.skip_setup();
    conn.feed(&session_offer());
    receive(&mut conn, &mut stats);
    assert_eq!(stats.protocol_errors, 1);
    let mut conn = logged_in(&mut stats, false);
    conn.feed(&frame(FrameKind::Push, route::SYS_SESSION, 0, &[1; 3]));
    receive(&mut conn, &mut stats);
    assert_eq!(stats.protocol_errors, 2);
}
