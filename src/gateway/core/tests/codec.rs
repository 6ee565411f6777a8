//! A listener's body codec in the state machine: a `json` route's
//! MessagePack body decoded once at ingress (or refused BAD_REQUEST), its
//! answer encoded on the way out; other routes and listeners untouched.

use super::*;
use crate::config::BodyCodec;
use crate::gateway::body_codec::ListenerCodecs;
use crate::gateway_addresses::{GatewayAddresses, Transport};
use crate::route::{ClientRoute, KeyFrom, RouteTable, Served};

const COUNTER_ADD: u32 = 2001;

/// A core with `counter.add` (a `json` route) beside `player.incr`, whose
/// plain listener speaks MessagePack and whose TLS listener does not.
fn msgpack_core(metrics: Arc<CoreMetrics>) -> GatewayCore {
    let routes = RouteTable::build([
        (
            ClientRoute::request(COUNTER_ADD, "counter.add", KeyFrom::Session).json_body(),
            200,
            Served::Object,
        ),
        (
            ClientRoute::request(route::PLAYER_INCR, "player.incr", KeyFrom::Session),
            2,
            Served::Object,
        ),
    ])
    .unwrap();
    let mut core = GatewayCore::with_incarnation(3, 1, limits(), metrics, Arc::new(routes));
    core.set_listener_codecs(ListenerCodecs {
        plain: BodyCodec::Msgpack,
        ..ListenerCodecs::default()
    });
    core
}

fn header(route_id: u32, seq: u32, body: &[u8]) -> Header {
    Header {
        kind: FrameKind::Request,
        route_id,
        seq,
        body_len: body.len() as u32,
    }
}

fn msgpack_by(by: i64) -> Vec<u8> {
    let mut body = Vec::new();
    let value = rmpv::Value::Map(vec![(rmpv::Value::from("by"), rmpv::Value::from(by))]);
    rmpv::encode::write_value(&mut body, &value).unwrap();
    body
}

#[test]
fn a_json_route_s_msgpack_body_is_decoded_once_and_its_answer_encoded() {
    let metrics = Arc::new(CoreMetrics::default());
    let mut core = msgpack_core(metrics.clone());
    let now = Instant::now();
    let outbox = Rc::new(Outbox::new(8));
    let s = core.open_session_via(outbox.clone(), Transport::Plain, now);
    assert_eq!(
        core.session(s).unwrap().protocol_profile,
        BodyCodec::Msgpack
    );
    let epoch = core
        .apply_binding(s, Target::Services, 7, 0)
        .unwrap()
        .session_epoch;
    let body = msgpack_by(5);
    let ingress = core
        .on_request(s, header(COUNTER_ADD, 1, &body), &body, now)
        .unwrap();
    assert_eq!(ingress.body, body.as_slice(), "the raw bytes ride along");
    assert_eq!(
        ingress.decoded_request.as_deref(),
        Some(&br#"{"by":5}"#[..])
    );
    // A built-in binary route's body is nobody's business but its own.
    let incr = 3i64.to_le_bytes();
    let ingress = core
        .on_request(s, header(route::PLAYER_INCR, 2, &incr), &incr, now)
        .unwrap();
    assert_eq!(ingress.decoded_request, None);
    for (seq, route_id, answer) in [
        (1, COUNTER_ADD, &br#"{"n":5}"#[..]),
        (2, route::PLAYER_INCR, &8u64.to_le_bytes()[..]),
    ] {
        let answer = EgressRef {
            body: answer,
            ..egress(s, epoch, 7, FrameKind::Response, route_id, seq)
        };
        core.egress(&answer, now).unwrap();
    }
    let written = frames(&outbox);
    let n5 = rmpv::Value::Map(vec![(rmpv::Value::from("n"), rmpv::Value::from(5))]);
    let mut expected = Vec::new();
    rmpv::encode::write_value(&mut expected, &n5).unwrap();
    assert_eq!(written[0], (FrameKind::Response, COUNTER_ADD, 1, expected));
    assert_eq!(
        written[1],
        (
            FrameKind::Response,
            route::PLAYER_INCR,
            2,
            8u64.to_le_bytes().to_vec()
        )
    );
}

#[test]
fn a_body_that_does_not_decode_is_bad_request_at_the_gateway_and_counted() {
    let metrics = Arc::new(CoreMetrics::default());
    let mut core = msgpack_core(metrics.clone());
    let now = Instant::now();
    let outbox = Rc::new(Outbox::new(8));
    let s = core.open_session_via(outbox.clone(), Transport::Plain, now);
    core.apply_binding(s, Target::Services, 7, 0).unwrap();
    let bad = [0xc1u8, 0x00];
    assert!(core
        .on_request(s, header(COUNTER_ADD, 1, &bad), &bad, now)
        .is_none());
    assert_eq!(metrics.gateway.ingress_body_undecodable.get(), 1);
    assert_eq!(core.inflight_count(s), 0, "never in flight");
    let written = frames(&outbox);
    assert_eq!(written.len(), 1);
    assert_eq!(error_code(&written[0]), ErrorCode::BadRequest as u16);
    assert!(
        String::from_utf8_lossy(&written[0].3).contains("not MessagePack"),
        "{written:?}"
    );
    // The session goes on: the next request is taken.
    let body = msgpack_by(1);
    assert!(core
        .on_request(s, header(COUNTER_ADD, 2, &body), &body, now)
        .is_some());
}

#[test]
fn a_listener_without_a_codec_passes_json_routes_through() {
    let metrics = Arc::new(CoreMetrics::default());
    let mut core = msgpack_core(metrics.clone());
    let now = Instant::now();
    let outbox = Rc::new(Outbox::new(8));
    let s = core.open_session_via(outbox.clone(), Transport::Tls, now);
    assert_eq!(core.session(s).unwrap().protocol_profile, BodyCodec::None);
    let epoch = core
        .apply_binding(s, Target::Services, 7, 0)
        .unwrap()
        .session_epoch;
    let body = br#"{"by":5}"#;
    let ingress = core
        .on_request(s, header(COUNTER_ADD, 1, body), body, now)
        .unwrap();
    assert_eq!(ingress.decoded_request, None);
    let answer = EgressRef {
        body: br#"{"n":5}"#,
        ..egress(s, epoch, 7, FrameKind::Response, COUNTER_ADD, 1)
    };
    core.egress(&answer, now).unwrap();
    assert_eq!(frames(&outbox)[0].3, br#"{"n":5}"#.to_vec());
    assert_eq!(metrics.gateway.ingress_body_undecodable.get(), 0);
}

/// A session logged in on the MessagePack plain listener and resumed on
/// the TLS one, which has no codec, speaks as its new connection does:
/// JSON bodies taken as they are, answers not encoded, and a drain's
/// `sys.redirect` naming a TLS listener.
#[test]
fn a_resumed_session_speaks_its_new_connection_s_codec_and_transport() {
    let metrics = Arc::new(CoreMetrics::default());
    let mut core = msgpack_core(metrics.clone());
    core.set_resume_settings(ResumeSettings::new(500, 16, usize::MAX));
    let now = Instant::now();
    let s = core.open_session_via(Rc::new(Outbox::new(8)), Transport::Plain, now);
    let token = [7; 16];
    core.on_request(s, header(route::AUTH_LOGIN, 1, b"t"), b"t", now)
        .unwrap();
    core.begin_login(s, 1, 7).unwrap();
    core.offer_resume(s, token);
    core.complete_login(s, 1, admitted(7, 1), now);
    assert!(core.close(s, CloseReason::PeerClosed), "detached");
    let relay = Rc::new(Outbox::new(usize::MAX));
    let via = NewConnection {
        front: 99,
        transport: Transport::Tls,
        outbox: relay.clone(),
    };
    core.resume(&token, 0, 1, via, now).unwrap();
    assert_eq!(core.session(s).unwrap().protocol_profile, BodyCodec::None);
    let body = br#"{"by":5}"#;
    let ingress = core
        .on_request(s, header(COUNTER_ADD, 2, body), body, now)
        .expect("a JSON body is no MessagePack error");
    assert_eq!(ingress.decoded_request, None);
    assert_eq!(metrics.gateway.ingress_body_undecodable.get(), 0);
    let answer = EgressRef {
        body: br#"{"n":5}"#,
        ..egress(s, 1, 7, FrameKind::Response, COUNTER_ADD, 2)
    };
    core.egress(&answer, now).unwrap();
    let mut addresses = GatewayAddresses::plain("10.0.0.2:7400");
    addresses.set(Transport::Tls, "10.0.0.2:7443");
    core.redirect_all(now, Duration::from_millis(500), vec![addresses]);
    let written = frames(&relay);
    let answered: Vec<_> = written.iter().filter(|f| f.1 == COUNTER_ADD).collect();
    assert_eq!(answered[0].3, br#"{"n":5}"#.to_vec(), "not MessagePack");
    let redirect = written.iter().find(|f| f.1 == route::SYS_REDIRECT).unwrap();
    assert_eq!(
        redirect.3,
        redirect_body(Duration::from_millis(500), "10.0.0.2:7443")
    );
}
