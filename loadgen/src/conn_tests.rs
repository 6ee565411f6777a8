use wire::client::{
    encode_error_body, encode_frame, route, ErrorCode, FrameDecoder, FrameKind, Header, Peer,
};

use super::*;
use crate::workload::Pacer;
use wire::client::route::SYS_REDIRECT;

const MS: u64 = 1_000_000;
const ALL: Window = Window {
    start_ns: 0,
    end_ns: u64::MAX,
};

/// The requests a fake server reads from the connection's output.
fn drain_requests(conn: &mut Conn) -> Vec<(Header, Vec<u8>)> {
    let bytes = std::mem::take(conn.out_mut());
    let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
    assert_eq!(decoder.extend(&bytes), bytes.len());
    let mut requests = Vec::new();
    while let Some(frame) = decoder.next_frame().expect("loadgen writes valid frames") {
        requests.push((frame.header, frame.body.to_vec()));
    }
    requests
}

fn frame(kind: FrameKind, route_id: u32, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&mut out, kind, route_id, seq, body);
    out
}

fn ready_conn(inflight_max: usize) -> Conn {
    let mut conn = Conn::new(Proto::Routerd, 7, 1, inflight_max, 1 << 16);
    conn.skip_setup();
    conn
}

#[test]
fn answers_match_by_seq_in_any_order() {
    let mut conn = ready_conn(4);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    for i in 0..3u64 {
        conn.send(Op::Ping, b"abcd", i * MS, true, &mut stats)
            .expect("room for three");
    }
    let requests = drain_requests(&mut conn);
    let seqs: Vec<u32> = requests.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(seqs.len(), 3);
    assert_ne!(seqs[0], seqs[1]);
    // Answered in reverse order, at 10 ms.
    for (header, body) in requests.iter().rev() {
        conn.feed(&frame(
            FrameKind::Response,
            header.route_id,
            header.seq,
            body,
        ));
    }
    conn.receive(10 * MS, ALL, &mut stats, &mut events)
        .expect("valid frames");
    assert_eq!(stats.responses(), 3);
    assert_eq!(stats.protocol_errors, 0);
    assert_eq!(conn.outstanding(), 0);
    // Latency counts from each request's intended time: 10, 9, 8 ms.
    let latency = &stats.ops[Op::Ping.index()].latency_ns;
    assert_eq!(latency.len(), 3);
    assert!(latency.max() >= 9_990_000);
    assert!(latency.min() <= 8_010_000);
}

#[test]
fn unmatched_and_duplicate_answers_are_protocol_errors() {
    let mut conn = ready_conn(4);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    conn.send(Op::Ping, b"x", 0, true, &mut stats)
        .expect("room");
    let (header, body) = drain_requests(&mut conn).remove(0);
    let answer = frame(FrameKind::Response, header.route_id, header.seq, &body);
    conn.feed(&answer);
    conn.feed(&answer); // the same seq twice: the second matches nothing
    conn.feed(&frame(FrameKind::Response, header.route_id, 999, &body));
    conn.receive(MS, ALL, &mut stats, &mut events)
        .expect("framing is fine");
    assert_eq!(stats.responses(), 1);
    assert_eq!(stats.protocol_errors, 2);

    // Right seq, wrong route; and a ping echo of the wrong length.
    conn.send(Op::Ping, b"x", 0, true, &mut stats)
        .expect("room");
    conn.send(Op::Ping, b"x", 0, true, &mut stats)
        .expect("room");
    let requests = drain_requests(&mut conn);
    conn.feed(&frame(
        FrameKind::Response,
        route::PLAYER_GET,
        requests[0].0.seq,
        b"",
    ));
    conn.feed(&frame(
        FrameKind::Response,
        route::SYS_PING,
        requests[1].0.seq,
        b"xy",
    ));
    conn.receive(MS, ALL, &mut stats, &mut events)
        .expect("framing is fine");
    assert_eq!(stats.protocol_errors, 4);
    assert_eq!(stats.responses(), 1);
}

#[test]
fn errors_are_counted_by_code_and_leftovers_are_unanswered() {
    let mut conn = ready_conn(8);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    for _ in 0..3 {
        conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
    }
    // Sent during warm-up: not measured, not counted when it goes unanswered.
    conn.send(Op::Incr, &[], 0, false, &mut stats)
        .expect("room");
    let requests = drain_requests(&mut conn);
    let overloaded = encode_error_body(ErrorCode::Overloaded, "busy");
    conn.feed(&frame(
        FrameKind::Error,
        route::PLAYER_INCR,
        requests[0].0.seq,
        &overloaded,
    ));
    conn.feed(&frame(
        FrameKind::Error,
        route::PLAYER_INCR,
        requests[1].0.seq,
        &[1],
    ));
    conn.receive(MS, ALL, &mut stats, &mut events)
        .expect("framing is fine");
    let incr = &stats.ops[Op::Incr.index()];
    assert_eq!(incr.failed[ErrorCode::Overloaded as usize], 1);
    assert_eq!(stats.failures(), 1);
    assert_eq!(stats.protocol_errors, 1, "a 1-byte ERROR body is malformed");
    assert_eq!(stats.sent(), 3);
    conn.abandon(&mut stats);
    assert_eq!(stats.unanswered, 1);
}

#[test]
fn pipeline_depth_is_a_hard_bound() {
    let mut conn = ready_conn(2);
    let mut stats = Stats::default();
    conn.send(Op::Ping, b"", 0, true, &mut stats).expect("1");
    conn.send(Op::Ping, b"", 0, true, &mut stats).expect("2");
    assert_eq!(
        conn.send(Op::Ping, b"", 0, true, &mut stats),
        Err(SendError::Full)
    );
    assert_eq!(stats.sent(), 2);
}

#[test]
fn bad_framing_closes_and_counts() {
    let mut conn = ready_conn(2);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    conn.feed(b"XX\x01\x02\0\0\0\0\0\0\0\0\0\0\0\0");
    assert!(conn.receive(0, ALL, &mut stats, &mut events).is_err());
    assert_eq!(stats.protocol_errors, 1);
    assert_eq!(conn.phase(), Phase::Closed);
    assert_eq!(
        conn.send(Op::Ping, b"", 0, true, &mut stats),
        Err(SendError::NotReady)
    );
}

#[test]
fn login_and_join_then_pushes_are_timed() {
    let mut conn = Conn::new(Proto::Routerd, 42, 3, 4, 1 << 16);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    conn.start_login("v1.42.9.mac", 0);
    let (login, token) = drain_requests(&mut conn).remove(0);
    assert_eq!(login.route_id, route::AUTH_LOGIN);
    assert_eq!(token, b"v1.42.9.mac");
    conn.feed(&frame(
        FrameKind::Response,
        route::AUTH_LOGIN,
        login.seq,
        &42u64.to_le_bytes(),
    ));
    conn.receive(0, ALL, &mut stats, &mut events).expect("ok");
    assert_eq!(events, vec![Event::LoggedIn]);
    conn.start_join(0);
    let (join, room) = drain_requests(&mut conn).remove(0);
    assert_eq!(room, 3u64.to_le_bytes());
    conn.feed(&frame(
        FrameKind::Response,
        route::ROOM_JOIN,
        join.seq,
        &2u32.to_le_bytes(),
    ));
    conn.receive(0, ALL, &mut stats, &mut events).expect("ok");
    assert_eq!(events, vec![Event::LoggedIn, Event::Joined]);
    assert!(conn.can_send());

    let mut push = 3u64.to_le_bytes().to_vec();
    push.extend_from_slice(&5u64.to_le_bytes());
    push.extend_from_slice(b"1000000");
    conn.feed(&frame(FrameKind::Push, route::ROOM_MESSAGE, 0, &push));
    conn.feed(&frame(FrameKind::Push, route::ROOM_MESSAGE, 0, b"garbage"));
    conn.feed(&frame(FrameKind::Push, route::SYS_KICKED, 0, b"bye"));
    conn.receive(4 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    assert_eq!(stats.pushes, 1);
    assert!(stats.push_latency_ns.max() >= 2_990_000);
    assert_eq!(stats.protocol_errors, 1);
    assert_eq!(stats.kicked, 1);
    assert_eq!(events.last(), Some(&Event::Kicked));
}

#[test]
fn failed_login_is_a_setup_failure() {
    let mut conn = Conn::new(Proto::Routerd, 42, 0, 4, 1 << 16);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    conn.start_login("forged", 0);
    let (login, _) = drain_requests(&mut conn).remove(0);
    let body = encode_error_body(ErrorCode::AuthFailed, "bad mac");
    conn.feed(&frame(
        FrameKind::Error,
        route::AUTH_LOGIN,
        login.seq,
        &body,
    ));
    conn.receive(0, ALL, &mut stats, &mut events).expect("ok");
    assert!(matches!(
        &events[0],
        Event::SetupFailed { reason, transient: false } if reason.contains("code 4")
    ));
    assert_eq!(conn.phase(), Phase::Closed);
    // A login the server could not answer now may be tried again.
    let mut conn = Conn::new(Proto::Routerd, 42, 0, 4, 1 << 16);
    conn.start_login("v1.42.9.mac", 0);
    let (login, _) = drain_requests(&mut conn).remove(0);
    let body = encode_error_body(ErrorCode::Unavailable, "player unavailable");
    conn.feed(&frame(
        FrameKind::Error,
        route::AUTH_LOGIN,
        login.seq,
        &body,
    ));
    let mut events = Vec::new();
    conn.receive(0, ALL, &mut stats, &mut events).expect("ok");
    assert!(matches!(
        &events[0],
        Event::SetupFailed {
            transient: true,
            ..
        }
    ));
}

/// The ledger counts every increment answered OK (measured or not) with
/// the counter it showed, and every increment whose outcome is unknown;
/// the longest wait between two answers spans a reconnect.
#[test]
fn the_ledger_and_the_longest_gap() {
    let mut conn = ready_conn(8);
    let mut stats = Stats::default();
    stats.enable_ledger();
    let mut events = Vec::new();
    for measured in [true, false, true, true] {
        conn.send(Op::Incr, &[], 0, measured, &mut stats)
            .expect("room");
    }
    let requests = drain_requests(&mut conn);
    let answers = [
        frame(
            FrameKind::Response,
            route::PLAYER_INCR,
            requests[0].0.seq,
            &5i64.to_le_bytes(),
        ),
        frame(
            FrameKind::Response,
            route::PLAYER_INCR,
            requests[1].0.seq,
            &6i64.to_le_bytes(),
        ),
        frame(
            FrameKind::Error,
            route::PLAYER_INCR,
            requests[2].0.seq,
            &encode_error_body(ErrorCode::Unavailable, ""),
        ),
    ];
    conn.feed(&answers.concat());
    conn.receive(10 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    // The fourth is lost with the connection.
    conn.reset(7, &mut stats);
    conn.skip_setup();
    conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
    let requests = drain_requests(&mut conn);
    conn.feed(&frame(
        FrameKind::Response,
        route::PLAYER_INCR,
        requests[0].0.seq,
        &7i64.to_le_bytes(),
    ));
    conn.receive(250 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    let ledger = stats.ledger.as_ref().expect("enabled");
    assert_eq!(
        ledger[&7],
        crate::stats::PlayerLedger {
            acked: 3,
            max_counter: Some(7),
            uncertain: 2,
            ..Default::default()
        }
    );
    assert_eq!(stats.longest_answer_gap_ns, 240 * MS);
    let mut merged = Stats::default();
    merged.merge(&stats);
    merged.merge(&stats);
    assert_eq!(merged.ledger.as_ref().unwrap()[&7].acked, 6);
    assert_eq!(merged.longest_answer_gap_ns, 240 * MS);
}

/// One connection, one request in flight, open loop at 1000/s for 10 s.
/// The server answers in 0.5 ms except for a 1 s stall at t = 5 s. Measured
/// from the intended send time (what loadgen does), the stall shows in the
/// tail; measured from the actual send time it would hide behind one sample.
#[test]
fn coordinated_omission_is_corrected() {
    let mut conn = ready_conn(1);
    let mut corrected = Stats::default();
    let mut naive = Stats::default();
    let mut events = Vec::new();
    let mut pacer = Pacer::new(0, 1000.0);
    let mut now = 0u64;
    let end = 10_000 * MS;
    let mut intended_times = std::collections::VecDeque::new();
    while now < end {
        while let Some(due) = pacer.pop_due(now) {
            intended_times.push_back(due);
        }
        let Some(intended) = intended_times.pop_front() else {
            now = pacer.next_due_ns();
            continue;
        };
        let sent_at = now;
        conn.send(Op::Ping, b"", intended, true, &mut corrected)
            .expect("one in flight at a time");
        let (header, _) = drain_requests(&mut conn).remove(0);
        let service = if (5_000 * MS..5_001 * MS).contains(&sent_at) {
            1_000 * MS
        } else {
            MS / 2
        };
        now = sent_at + service;
        conn.feed(&frame(
            FrameKind::Response,
            route::SYS_PING,
            header.seq,
            b"",
        ));
        conn.receive(now, ALL, &mut corrected, &mut events)
            .expect("ok");
        naive.record_response(Op::Ping, 0, service);
    }
    let p50 = corrected.latency_ns().value_at_quantile(0.50);
    let p99 = corrected.latency_ns().value_at_quantile(0.99);
    let naive_p99 = naive.latency_ns().value_at_quantile(0.99);
    assert!(p50 < 3 * MS, "p50 {p50}");
    assert!(p99 > 500 * MS, "corrected p99 {p99} hides the stall");
    assert!(naive_p99 < 2 * MS, "naive p99 {naive_p99}");
    assert_eq!(corrected.protocol_errors, 0);
    assert!(corrected.responses() >= 9_900);
}

/// `sys.redirect` stops new requests at once; the answers owed still
/// count; a malformed redirect is a protocol error and changes nothing.
#[test]
fn a_redirect_drains_the_connection() {
    let mut conn = ready_conn(4);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
    let (incr, _) = drain_requests(&mut conn).remove(0);

    conn.feed(&frame(FrameKind::Push, SYS_REDIRECT, 0, &[1, 0]));
    conn.receive(MS, ALL, &mut stats, &mut events).expect("ok");
    assert_eq!(
        stats.protocol_errors, 1,
        "a 2-byte redirect body is malformed"
    );
    assert_eq!(conn.phase(), Phase::Ready);

    let mut body = 1500u32.to_le_bytes().to_vec();
    body.extend_from_slice(b"10.0.0.2:7400");
    conn.feed(&frame(FrameKind::Push, SYS_REDIRECT, 0, &body));
    conn.receive(MS, ALL, &mut stats, &mut events).expect("ok");
    assert_eq!(
        events,
        vec![Event::Redirect(Redirect {
            grace_ms: 1500,
            target: "10.0.0.2:7400".to_string(),
        })]
    );
    assert_eq!(stats.redirects, 1);
    assert_eq!(conn.phase(), Phase::Draining);
    assert!(!conn.can_send());
    assert_eq!(
        conn.send(Op::Incr, &[], 0, true, &mut stats),
        Err(SendError::NotReady)
    );
    // The answer owed arrives on the old connection and counts.
    conn.feed(&frame(
        FrameKind::Response,
        route::PLAYER_INCR,
        incr.seq,
        &5i64.to_le_bytes(),
    ));
    conn.receive(2 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    assert_eq!(stats.ops[Op::Incr.index()].responses, 1);
    assert_eq!(conn.outstanding(), 0);

    // An empty target is allowed: the client picks another gateway.
    let mut empty = ready_conn(1);
    empty.feed(&frame(
        FrameKind::Push,
        SYS_REDIRECT,
        0,
        &0u32.to_le_bytes(),
    ));
    let mut events = Vec::new();
    empty.receive(0, ALL, &mut stats, &mut events).expect("ok");
    assert!(matches!(&events[0], Event::Redirect(r) if r.target.is_empty()));
}

/// A connection that closes loses what it had in flight, each request
/// counted under its own kind as CONNECTION_LOST; the next connection
/// starts clean, as the next player, and logs in again.
#[test]
fn a_reset_counts_the_lost_requests_and_starts_over() {
    let mut conn = ready_conn(8);
    let mut stats = Stats::default();
    let mut events = Vec::new();
    conn.send(Op::Incr, &[], 0, true, &mut stats).expect("room");
    conn.send(Op::Ping, b"ab", 0, true, &mut stats)
        .expect("room");
    conn.send(Op::Ping, b"ab", 0, false, &mut stats)
        .expect("room");
    assert_eq!(conn.sent_since_login(), 3);
    let requests = drain_requests(&mut conn);
    // Half a frame of an answer is in the decoder when the socket closes.
    let answer = frame(
        FrameKind::Response,
        route::PLAYER_INCR,
        requests[0].0.seq,
        &[0; 8],
    );
    conn.feed(&answer[..10]);
    conn.receive(MS, ALL, &mut stats, &mut events).expect("ok");

    conn.reset(8, &mut stats);
    assert_eq!(stats.lost(), 2, "the unmeasured ping is not counted");
    assert_eq!(stats.ops[Op::Incr.index()].failed[Failure::Lost.slot()], 1);
    assert_eq!(stats.ops[Op::Ping.index()].failed[Failure::Lost.slot()], 1);
    assert_eq!(conn.outstanding(), 0);
    assert_eq!(conn.phase(), Phase::Idle);
    assert_eq!(conn.player_id(), 8);
    assert_eq!(conn.sent_since_login(), 0);

    // The old half frame is gone: a whole new answer stream decodes.
    conn.start_login("v1.8.9.mac", 2 * MS);
    let (login, _) = drain_requests(&mut conn).remove(0);
    conn.feed(&frame(
        FrameKind::Response,
        route::AUTH_LOGIN,
        login.seq,
        &8u64.to_le_bytes(),
    ));
    conn.receive(3 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    assert_eq!(events, vec![Event::LoggedIn]);
    assert_eq!(stats.protocol_errors, 0);
    // abandon() at the end counts what is left as unanswered, not lost.
    conn.send(Op::Get, &[], 0, true, &mut stats).expect("room");
    conn.abandon(&mut stats);
    assert_eq!(stats.unanswered, 1);
    assert_eq!(stats.lost(), 2);
}

#[test]
fn keys_make_state_changing_requests_version_2_with_keys_of_their_own() {
    let mut conn = Conn::new(Proto::Routerd, 7, 1, 4, 1 << 16).with_keys(true);
    conn.skip_setup();
    let mut stats = Stats::default();
    conn.send(Op::Incr, b"", 0, true, &mut stats).expect("room");
    conn.send(Op::Incr, b"", 0, true, &mut stats).expect("room");
    conn.send(Op::Get, b"", 0, true, &mut stats).expect("room");
    let bytes = std::mem::take(conn.out_mut());
    let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16).accept_version_2();
    decoder.extend(&bytes);
    let mut seen = Vec::new();
    while let Some(frame) = decoder.next_frame().expect("valid frames") {
        seen.push((
            frame.header.route_id,
            frame.request_key,
            frame.body.to_vec(),
        ));
    }
    let one = 1i64.to_le_bytes().to_vec();
    let (first, second) = match (seen[0].1, seen[1].1) {
        (Some(first), Some(second)) => (first, second),
        other => panic!("incr without a key: {other:?}"),
    };
    assert!(first != 0 && second != 0 && first != second);
    assert_eq!((seen[0].0, &seen[0].2), (route::PLAYER_INCR, &one));
    assert_eq!(
        (seen[2].0, seen[2].1),
        (route::PLAYER_GET, None),
        "reads go plain"
    );
}

/// The keyed requests in the connection's output: seq and key.
fn keyed_requests(conn: &mut Conn) -> Vec<(u32, Option<u64>)> {
    let bytes = std::mem::take(conn.out_mut());
    let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16).accept_version_2();
    decoder.extend(&bytes);
    let mut seen = Vec::new();
    while let Some(frame) = decoder.next_frame().expect("valid frames") {
        seen.push((frame.header.seq, frame.request_key));
    }
    seen
}

fn counter(seq: u32, value: i64) -> Vec<u8> {
    frame(
        FrameKind::Response,
        route::PLAYER_INCR,
        seq,
        &value.to_le_bytes(),
    )
}

#[test]
fn keys_retry_an_uncertain_increment_with_its_key_and_count_it_once() {
    let mut conn = Conn::new(Proto::Routerd, 7, 1, 4, 1 << 16).with_keys(true);
    conn.skip_setup();
    let mut stats = Stats::default();
    stats.enable_ledger();
    let mut events = Vec::new();
    conn.send(Op::Incr, b"", 0, true, &mut stats).expect("room");
    conn.send(Op::Incr, b"", 0, true, &mut stats).expect("room");
    let first = keyed_requests(&mut conn);
    // The first is answered UNAVAILABLE (it may have run), the second 2.
    let unavailable = encode_error_body(ErrorCode::Unavailable, "player unavailable");
    conn.feed(&frame(
        FrameKind::Error,
        route::PLAYER_INCR,
        first[0].0,
        &unavailable,
    ));
    conn.feed(&counter(first[1].0, 2));
    conn.receive(MS, ALL, &mut stats, &mut events).expect("ok");
    // Sent again with its key once its pause is over.
    assert!(!conn.send_retries(MS, &mut stats));
    assert!(conn.send_retries(100 * MS, &mut stats));
    let retry = keyed_requests(&mut conn);
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].1, first[0].1);
    // It had run: the answer is the remembered 1, below the 2 shown.
    conn.feed(&counter(retry[0].0, 1));
    conn.receive(101 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    // An increment lost with its connection goes again, with its key, on
    // the same player's next one.
    conn.send(Op::Incr, b"", 200 * MS, true, &mut stats)
        .expect("room");
    let lost = keyed_requests(&mut conn);
    conn.reset(7, &mut stats);
    conn.skip_setup();
    assert!(conn.send_retries(300 * MS, &mut stats));
    let again = keyed_requests(&mut conn);
    assert_eq!(again[0].1, lost[0].1);
    conn.feed(&counter(again[0].0, 3));
    conn.receive(301 * MS, ALL, &mut stats, &mut events)
        .expect("ok");
    // One lost as the connection moves to another player is given up.
    conn.send(Op::Incr, b"", 400 * MS, true, &mut stats)
        .expect("room");
    conn.reset(8, &mut stats);
    assert_eq!(
        stats.keys,
        crate::keys::KeyLedger {
            acknowledged: 3,
            retried: 2,
            retries_sent: 2,
            retried_acknowledged: 2,
            answered_from_memory: 1,
            given_up: 1,
            duplicates: None,
        }
    );
    let ledger = &stats.ledger.as_ref().expect("enabled")[&7];
    assert_eq!(
        (ledger.acked, ledger.uncertain, ledger.duplicates),
        (3, 1, 0)
    );
    assert_eq!(stats.keyed_duplicates(), Some(0));
    // The failures of the first attempts still count as measured.
    assert_eq!(stats.lost(), 2);
}

#[test]
fn keys_count_a_value_acknowledged_to_two_keys() {
    let mut conn = Conn::new(Proto::Routerd, 7, 1, 4, 1 << 16).with_keys(true);
    conn.skip_setup();
    let mut stats = Stats::default();
    stats.enable_ledger();
    let mut events = Vec::new();
    conn.send(Op::Incr, b"", 0, true, &mut stats).expect("room");
    conn.send(Op::Incr, b"", 0, true, &mut stats).expect("room");
    let sent = keyed_requests(&mut conn);
    conn.feed(&counter(sent[0].0, 5));
    conn.feed(&counter(sent[1].0, 5));
    conn.receive(MS, ALL, &mut stats, &mut events).expect("ok");
    assert_eq!(stats.keyed_duplicates(), Some(1));
    let failures = crate::report::verdict(&stats, None, 1.0);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("acknowledged to two keys")),
        "{failures:?}"
    );
}
