//! The egress gate, the slow reader and the answer latency.

use super::*;

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

/// No frame carries a body longer than clients are told to accept,
/// whatever the object type made (a script can return any length): an
/// answer that long is an ERROR saying so, a push that long is dropped.
#[test]
fn a_body_past_body_max_is_never_sent() {
    let mut f = Fixture::new();
    let bounds = Limits {
        body_max: 100,
        ..limits()
    };
    f.core = new_core(3, bounds, f.metrics.clone());
    let (s, outbox) = f.open();
    let epoch = f.login(s, 7);
    f.request(s, route::PLAYER_GET, 1).unwrap();
    let now = f.now;
    let long = vec![b'x'; bounds.body_max + 1];
    let at_limit = vec![b'y'; bounds.body_max];
    let push = EgressRef {
        body: &long,
        ..egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0)
    };
    assert_eq!(f.core.egress(&push, now), Err(EgressRejected::Oversized));
    assert_eq!(f.metrics.gateway.egress_oversized.get(), 1);
    let answer = EgressRef {
        body: &long,
        ..egress(s, epoch, 7, FrameKind::Response, route::PLAYER_GET, 1)
    };
    f.core.egress(&answer, now).unwrap();
    assert_eq!(f.core.inflight_count(s), 0, "the request is answered");
    let fits = EgressRef {
        body: &at_limit,
        ..egress(s, epoch, 7, FrameKind::Push, route::ROOM_MESSAGE, 0)
    };
    f.core.egress(&fits, now).unwrap();
    let written = frames(&outbox);
    assert_eq!(written.len(), 2);
    let (kind, _, seq, body) = &written[0];
    assert_eq!((*kind, *seq), (FrameKind::Error, 1));
    let (code, reason) = decode_error_body(body).unwrap();
    assert_eq!(code, ErrorCode::Internal as u16);
    assert!(reason.contains("gateway.body_max_bytes"), "{reason}");
    assert_eq!(
        written[1].3.len(),
        bounds.body_max,
        "a body at the limit goes"
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
fn stale_reply_after_rebind_never_reaches_the_wire() {
    // The in-flight window (docs/origins.md): an ingress snapshotted at
    // epoch 0, a bind to epoch 1, then the handler answers with the epoch-0
    // reference.
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
