//! The gateway's body codec (`gateway.body_codec`): a node running the
//! example scripts (examples/scripts/) with a MessagePack plain listener
//! and a WebSocket listener without a codec. A MessagePack request on a
//! `json` route is answered in MessagePack with the handler's value, the
//! same object reads back as JSON over the other listener, a body that is
//! not MessagePack is BAD_REQUEST (counted) while the session serves on,
//! and the built-in binary routes and the `raw` routes are untouched.

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::path::Path;

use edge::{tcp_connect, WsClient};
use rmpv::Value as Pack;
use routerd::config::BodyCodec;
use support::{config, counter_of, TestNode};
use wire::client::{route, ErrorCode, FrameKind};

const ADD: u32 = 2001;
const GET: u32 = 2002;
const RAW: u32 = 2003;

fn pack(value: Pack) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &value).unwrap();
    out
}

fn map(pairs: &[(&str, i64)]) -> Pack {
    Pack::Map(
        pairs
            .iter()
            .map(|(name, value)| (Pack::from(*name), Pack::from(*value)))
            .collect(),
    )
}

fn node() -> TestNode {
    let mut config = config();
    config.scripts.dir = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scripts"));
    config.gateway.body_codec = BodyCodec::Msgpack;
    config.gateway.websocket_listen = Some("127.0.0.1:0".parse().unwrap());
    config.gateway.websocket_body_codec = BodyCodec::None;
    TestNode::start(config)
}

/// The MessagePack value of a RESPONSE.
fn answer(reply: support::Reply) -> Pack {
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    let mut body = reply.body.as_slice();
    let value = rmpv::decode::read_value(&mut body).unwrap();
    assert!(body.is_empty(), "one value, nothing after it");
    value
}

#[test]
fn msgpack_requests_are_answered_in_msgpack_and_the_json_listener_sees_the_same_object() {
    let node = node();
    let mut packed = node.connect();
    packed.login(7, 1);
    let by_five = pack(map(&[("by", 5)]));
    assert_eq!(answer(packed.call(ADD, 2, &by_five)), map(&[("n", 5)]));
    assert_eq!(
        answer(packed.call(ADD, 3, &pack(map(&[("by", 2)])))),
        map(&[("n", 7)])
    );
    // A key from a field of the decoded value.
    assert_eq!(
        answer(packed.call(GET, 4, &pack(map(&[("id", 7)])))),
        map(&[("n", 7)])
    );
    // A handler's refusal is an ERROR as on any listener.
    let refused = packed.call(ADD, 5, &pack(Pack::from("not a table")));
    assert_eq!(refused.kind, FrameKind::Error);
    assert_eq!(refused.error_code(), ErrorCode::BadRequest as u16);
    assert_eq!(refused.error_reason(), r#"body must be {"by": number}"#);

    // The same object over the WebSocket listener, in JSON.
    let mut json = WsClient::upgrade(Box::new(tcp_connect(node.websocket())));
    json.login(8, 1);
    let reply = json.call(GET, 2, br#"{"id": 7}"#);
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    let value: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(value, serde_json::json!({"n": 7}));
    let reply = json.call(ADD, 3, br#"{"by": 1}"#);
    let value: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(value, serde_json::json!({"n": 1}), "player 8's own counter");
}

#[test]
fn a_body_that_is_not_msgpack_is_bad_request_and_the_session_serves_on() {
    let node = node();
    let mut packed = node.connect();
    packed.login(7, 1);
    for (seq, body) in [
        (2, &[0xc1u8][..]),
        (3, &[0x92, 0x01][..]),
        (4, br#"{"by":1}"#),
    ] {
        let reply = packed.call(ADD, seq, body);
        assert_eq!(reply.kind, FrameKind::Error, "{reply:?}");
        assert_eq!(reply.error_code(), ErrorCode::BadRequest as u16);
        assert!(
            reply.error_reason().contains("not MessagePack"),
            "{}",
            reply.error_reason()
        );
    }
    node.wait_metric(
        "routerd_gateway_ingress_rejected_total{reason=\"body_undecodable\"}",
        3,
    );
    assert_eq!(
        answer(packed.call(ADD, 5, &pack(map(&[("by", 3)])))),
        map(&[("n", 3)]),
        "the refused bodies reached no object"
    );
    // Built-in binary routes and `raw` routes are the codec's business not.
    let reply = packed.call(route::PLAYER_INCR, 6, &2i64.to_le_bytes());
    assert_eq!(counter_of(&reply), 2);
    let reply = packed.call(RAW, 7, &[0xc1, 0xff]);
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    assert_eq!(reply.body, b"got 2 bytes");
}
