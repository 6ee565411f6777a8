//! The router's cross-core frames: requests and their answers as flat rkyv
//! messages, and the error codes on both sides.

use wire::client::ErrorCode as WireErrorCode;
use wire::frame::{ArchivedMessage, Message, RouterHead as WireHead};
use wire::ObjectKey;

use crate::router::types::{ClientRef, ErrorCode, Request, RequestId, RouterHead};
use crate::store::{NodeId, RouteVersion};

pub(super) fn wire_error_code(code: ErrorCode) -> WireErrorCode {
    WireErrorCode::from_u16(code as u16).unwrap_or(WireErrorCode::Internal)
}

pub(super) fn error_code_from_wire(code: u16) -> ErrorCode {
    match code {
        4 => ErrorCode::AuthFailed,
        5 => ErrorCode::BadRequest,
        6 => ErrorCode::Overloaded,
        7 => ErrorCode::Unavailable,
        _ => ErrorCode::Internal,
    }
}

pub(super) fn encode_request(head: &RouterHead, request: &Request) -> Message {
    let client = request.client;
    Message::RouterRequest {
        head: WireHead {
            type_id: head.key.type_id,
            zone_id: head.key.zone_id,
            object_id: head.key.object_id,
            route_version: head.route_version.0,
            source_node: head.source_node.0,
            transfer_ttl: head.transfer_ttl,
        },
        origin_node: request.id.origin_node.0,
        request_seq: request.id.seq,
        op: request.op,
        needs_reply: u8::from(request.needs_reply),
        has_client: u8::from(client.is_some()),
        client_gateway_node: client.map_or(0, |c| c.gateway_node.0),
        client_session_id: client.map_or(0, |c| c.session_id),
        client_session_epoch: client.map_or(0, |c| c.session_epoch),
        client_player_id: client.map_or(0, |c| c.player_id),
        body: request.body.clone(),
    }
}

pub(super) fn decode_request(message: &ArchivedMessage) -> Option<(RouterHead, Request)> {
    let ArchivedMessage::RouterRequest {
        head,
        origin_node,
        request_seq,
        op,
        needs_reply,
        has_client,
        client_gateway_node,
        client_session_id,
        client_session_epoch,
        client_player_id,
        body,
    } = message
    else {
        return None;
    };
    let head = RouterHead {
        key: ObjectKey::new(
            head.type_id.to_native(),
            head.zone_id.to_native(),
            head.object_id.to_native(),
        ),
        route_version: RouteVersion(head.route_version.to_native()),
        source_node: NodeId(head.source_node.to_native()),
        transfer_ttl: head.transfer_ttl.to_native(),
    };
    let client = (*has_client != 0).then(|| ClientRef {
        gateway_node: NodeId(client_gateway_node.to_native()),
        session_id: client_session_id.to_native(),
        session_epoch: client_session_epoch.to_native(),
        player_id: client_player_id.to_native(),
    });
    let request = Request {
        id: RequestId {
            origin_node: NodeId(origin_node.to_native()),
            seq: request_seq.to_native(),
        },
        op: op.to_native(),
        body: body.to_vec(),
        client,
        needs_reply: *needs_reply != 0,
    };
    Some((head, request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::driver::replies::REQUEST_CORE_SHIFT;
    use crate::services::player;
    use wire::frame::FrameBuf;

    #[test]
    fn request_frames_round_trip() {
        let head = RouterHead {
            key: ObjectKey::new(2, 0, 42),
            route_version: RouteVersion(3),
            source_node: NodeId(1),
            transfer_ttl: 2,
        };
        let request = Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq: 1 << REQUEST_CORE_SHIFT | 5,
            },
            op: player::OP_INCR,
            body: 9i64.to_le_bytes().to_vec(),
            client: Some(ClientRef {
                gateway_node: NodeId(1),
                session_id: 77,
                session_epoch: 2,
                player_id: 42,
            }),
            needs_reply: true,
        };
        let frame = FrameBuf::encode(&encode_request(&head, &request)).unwrap();
        assert_eq!(decode_request(frame.message()), Some((head, request)));
    }
}
