//! The ingress checks, in-flight accounting, TIMEOUT and the request rate.

use super::*;

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
    assert_eq!(ingress.binding.target, Target::Services);
    assert_eq!(ingress.binding.player_id, 7);
    assert_eq!(ingress.binding.session_epoch, 1);
    assert_eq!(
        error_code(&frames(&outbox)[0]),
        ErrorCode::BadRequest as u16
    );
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
    f.core.complete_login(s, 1, admitted(7, 1), f.now);
    let mut released = Vec::new();
    f.core.take_released(&mut released);
    let (_, held) = released.pop().unwrap();
    assert_eq!(held.len(), 2);
    // Replayed at the same instant, they pass: they paid when read.
    for frame in &held {
        assert!(f.core.on_held_request(s, frame, f.now).is_some());
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
