//! The router's frames: its node messages, requests and answers as flat
//! rkyv messages (`wire::frame::Message`), one conversion each way. Frames
//! between cores and between nodes are the same; only a frame for another
//! node carries its checksum (`FrameBuf::encode` rather than
//! `encode_local`). The round-trip tests below hold every variant to the
//! router's own types, so the two definitions cannot drift.

use wire::frame::{
    ArchivedClientWire, ArchivedKeyWire, ArchivedMessage, ClientWire, KeyWire, Message,
    RouterHead as WireHead,
};
use wire::ObjectKey;

use crate::ids::{NodeId, RouteVersion};
use crate::router::types::{
    refusal_from_wire, refusal_wire, ClientRef, NodeMessage, Outcome, Request, RequestId,
    RouterHead, RouterTransfer,
};
use crate::store::CasVersion;

fn key_wire(key: ObjectKey) -> KeyWire {
    KeyWire {
        type_id: key.type_id,
        zone_id: key.zone_id,
        object_id: key.object_id,
    }
}

fn key_native(key: &ArchivedKeyWire) -> ObjectKey {
    ObjectKey::new(
        key.type_id.to_native(),
        key.zone_id.to_native(),
        key.object_id.to_native(),
    )
}

pub(crate) fn client_wire(client: ClientRef) -> ClientWire {
    ClientWire {
        gateway_node: client.gateway_node.0,
        session_id: client.session_id,
        session_epoch: client.session_epoch,
        player_id: client.player_id,
    }
}

pub(crate) fn client_native(client: &ArchivedClientWire) -> ClientRef {
    ClientRef {
        gateway_node: NodeId(client.gateway_node.to_native()),
        session_id: client.session_id.to_native(),
        session_epoch: client.session_epoch.to_native(),
        player_id: client.player_id.to_native(),
    }
}

/// The session of a request as its frame carries it (zeros without one).
fn request_client(request: &Request) -> ClientWire {
    request.client.map(client_wire).unwrap_or(ClientWire {
        gateway_node: 0,
        session_id: 0,
        session_epoch: 0,
        player_id: 0,
    })
}

pub(crate) fn encode_request(head: &RouterHead, request: &Request) -> Message {
    Message::RouterRequest {
        head: WireHead {
            key: key_wire(head.key),
            route_version: head.route_version.0,
            source_node: head.source_node.0,
            transfer_ttl: head.forward_hops,
        },
        origin_node: request.id.origin_node.0,
        request_seq: request.id.seq,
        op: request.op,
        needs_reply: u8::from(request.needs_reply),
        has_client: u8::from(request.client.is_some()),
        client: request_client(request),
        request_key: request.request_key(),
        body: request.route_body().to_vec(),
    }
}

pub(crate) fn decode_request(message: &ArchivedMessage) -> Option<(RouterHead, Request)> {
    let ArchivedMessage::RouterRequest {
        head,
        origin_node,
        request_seq,
        op,
        needs_reply,
        has_client,
        client,
        request_key,
        body,
    } = message
    else {
        return None;
    };
    let head = RouterHead {
        key: key_native(&head.key),
        route_version: RouteVersion(head.route_version.to_native()),
        source_node: NodeId(head.source_node.to_native()),
        forward_hops: head.transfer_ttl.to_native(),
    };
    let mut request = request_native(
        origin_node.to_native(),
        request_seq.to_native(),
        op.to_native(),
        *needs_reply,
        (*has_client != 0).then_some(client),
        body,
    );
    request.add_request_key(request_key.to_native());
    Some((head, request))
}

/// A request from the fields its frame carries: a routed request's and a
/// service request's are the same.
fn request_native(
    origin_node: u64,
    seq: u64,
    op: u32,
    needs_reply: u8,
    client: Option<&ArchivedClientWire>,
    body: &[u8],
) -> Request {
    Request {
        id: RequestId {
            origin_node: NodeId(origin_node),
            seq,
        },
        op,
        body: body.to_vec(),
        client: client.map(client_native),
        needs_reply: needs_reply != 0,
        keyed: false,
    }
}

/// The frame of one answer, for the core of `request.origin_node` that
/// made `request.seq`.
pub(crate) fn encode_reply(request: RequestId, outcome: Outcome) -> Message {
    let (error_code, body) = match outcome {
        Ok(body) => (0, body),
        Err(refusal) => refusal_wire(refusal),
    };
    Message::RouterReply {
        origin_node: request.origin_node.0,
        request_seq: request.seq,
        error_code,
        body,
    }
}

/// `(origin_node, request_seq, outcome)` of a `RouterReply`.
pub(crate) fn decode_reply(message: &ArchivedMessage) -> Option<(NodeId, u64, Outcome)> {
    let ArchivedMessage::RouterReply {
        origin_node,
        request_seq,
        error_code,
        body,
    } = message
    else {
        return None;
    };
    let outcome = match error_code.to_native() {
        0 => Ok(body.to_vec()),
        code => Err(refusal_from_wire(code, body)),
    };
    Some((
        NodeId(origin_node.to_native()),
        request_seq.to_native(),
        outcome,
    ))
}

/// A node message as a frame's content.
pub(crate) fn encode_node_message(message: &NodeMessage) -> Message {
    match message {
        NodeMessage::Routed { head, request } => encode_request(head, request),
        NodeMessage::RouterUpdateSync {
            key,
            owner_node,
            owner_incarnation,
            route_version,
        } => Message::RouterUpdateSync {
            key: key_wire(*key),
            owner_node: owner_node.0,
            owner_incarnation: *owner_incarnation,
            route_version: route_version.0,
        },
        NodeMessage::RouterTransfer(transfer) => Message::RouterTransfer {
            key: key_wire(transfer.key),
            transfer_id: transfer.transfer_id,
            owner_incarnation: transfer.owner_incarnation,
            route_version: transfer.route_version.0,
            cas_version: transfer.cas_version.0,
            save_timepoint_ms: transfer.save_timepoint_ms,
            state: transfer.state.clone(),
        },
        NodeMessage::TransferAck {
            key,
            transfer_id,
            accepted,
        } => Message::RouterTransferAck {
            key: key_wire(*key),
            transfer_id: *transfer_id,
            accepted: u8::from(*accepted),
        },
        NodeMessage::ServiceRequest { key, request } => Message::ServiceRequest {
            key: key_wire(*key),
            origin_node: request.id.origin_node.0,
            request_seq: request.id.seq,
            op: request.op,
            needs_reply: u8::from(request.needs_reply),
            has_client: u8::from(request.client.is_some()),
            client: request_client(request),
            body: request.body.clone(),
        },
    }
}

/// The node message a frame carries, if it carries one.
pub(crate) fn decode_node_message(message: &ArchivedMessage) -> Option<NodeMessage> {
    Some(match message {
        ArchivedMessage::RouterRequest { .. } => {
            let (head, request) = decode_request(message)?;
            NodeMessage::Routed { head, request }
        }
        ArchivedMessage::RouterUpdateSync {
            key,
            owner_node,
            owner_incarnation,
            route_version,
        } => NodeMessage::RouterUpdateSync {
            key: key_native(key),
            owner_node: NodeId(owner_node.to_native()),
            owner_incarnation: owner_incarnation.to_native(),
            route_version: RouteVersion(route_version.to_native()),
        },
        ArchivedMessage::RouterTransfer {
            key,
            transfer_id,
            owner_incarnation,
            route_version,
            cas_version,
            save_timepoint_ms,
            state,
        } => NodeMessage::RouterTransfer(RouterTransfer {
            key: key_native(key),
            transfer_id: transfer_id.to_native(),
            owner_incarnation: owner_incarnation.to_native(),
            route_version: RouteVersion(route_version.to_native()),
            cas_version: CasVersion(cas_version.to_native()),
            save_timepoint_ms: save_timepoint_ms.to_native(),
            state: state.to_vec(),
        }),
        ArchivedMessage::RouterTransferAck {
            key,
            transfer_id,
            accepted,
        } => NodeMessage::TransferAck {
            key: key_native(key),
            transfer_id: transfer_id.to_native(),
            accepted: *accepted != 0,
        },
        ArchivedMessage::ServiceRequest {
            key,
            origin_node,
            request_seq,
            op,
            needs_reply,
            has_client,
            client,
            body,
        } => NodeMessage::ServiceRequest {
            key: key_native(key),
            request: request_native(
                origin_node.to_native(),
                request_seq.to_native(),
                op.to_native(),
                *needs_reply,
                (*has_client != 0).then_some(client),
                body,
            ),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::types::{AppCode, ErrorCode, Refusal};
    use wire::frame::FrameBuf;

    fn key() -> ObjectKey {
        ObjectKey::new(2, 7, u64::MAX - 3)
    }

    fn client() -> ClientRef {
        ClientRef {
            gateway_node: NodeId(3),
            session_id: 1 << 56 | 77,
            session_epoch: u32::MAX - 1,
            player_id: 42,
        }
    }

    /// Every node message, with no two fields of one message equal, so a
    /// swapped field shows.
    fn node_messages() -> Vec<NodeMessage> {
        let head = RouterHead {
            key: key(),
            route_version: RouteVersion(11),
            source_node: NodeId(12),
            forward_hops: 13,
        };
        let request = |client: Option<ClientRef>, needs_reply| Request {
            id: RequestId {
                origin_node: NodeId(14),
                seq: 1 << 56 | 15,
            },
            op: 16,
            body: vec![17; 300],
            client,
            needs_reply,
            keyed: false,
        };
        vec![
            NodeMessage::Routed {
                head,
                request: request(Some(client()), true),
            },
            NodeMessage::Routed {
                head,
                request: request(None, false),
            },
            NodeMessage::RouterUpdateSync {
                key: key(),
                owner_node: NodeId(21),
                owner_incarnation: 22,
                route_version: RouteVersion(23),
            },
            NodeMessage::RouterTransfer(RouterTransfer {
                key: key(),
                transfer_id: 31,
                owner_incarnation: 32,
                route_version: RouteVersion(33),
                cas_version: CasVersion(34),
                save_timepoint_ms: 35,
                state: b"state bytes".to_vec(),
            }),
            NodeMessage::TransferAck {
                key: key(),
                transfer_id: 41,
                accepted: true,
            },
            NodeMessage::TransferAck {
                key: key(),
                transfer_id: 42,
                accepted: false,
            },
            NodeMessage::ServiceRequest {
                key: ObjectKey::new(101, 0, 51),
                request: request(Some(client()), true),
            },
            NodeMessage::ServiceRequest {
                key: ObjectKey::new(101, 0, 52),
                request: request(None, false),
            },
        ]
    }

    /// Each node message survives the trip a frame makes between nodes:
    /// encoded with its checksum, sent as bytes, validated on receipt.
    #[test]
    fn node_messages_round_trip_through_network_frames() {
        for message in node_messages() {
            let frame = FrameBuf::encode(&encode_node_message(&message)).unwrap();
            let received = FrameBuf::from_network(frame.as_bytes()).unwrap();
            assert_eq!(decode_node_message(received.message()), Some(message));
        }
    }

    #[test]
    fn replies_round_trip_and_others_are_not_node_messages() {
        let id = RequestId {
            origin_node: NodeId(5),
            seq: 2 << 56 | 9,
        };
        for outcome in [
            Ok(vec![1, 2, 3]),
            Err(ErrorCode::AuthFailed.into()),
            Err(ErrorCode::BadRequest.into()),
            Err(ErrorCode::Overloaded.into()),
            Err(ErrorCode::Unavailable.into()),
            Err(ErrorCode::Timeout.into()),
            Err(ErrorCode::Internal.into()),
            Err(Refusal::app(AppCode::nth(1), "name taken")),
            Err(Refusal::explained(
                ErrorCode::BadRequest,
                "not a member of room 7",
            )),
            Err(Refusal::app(AppCode::nth(0x7FFF), "")),
        ] {
            let frame = FrameBuf::encode(&encode_reply(id, outcome.clone())).unwrap();
            let received = FrameBuf::from_network(frame.as_bytes()).unwrap();
            assert_eq!(
                decode_reply(received.message()),
                Some((id.origin_node, id.seq, outcome))
            );
            assert_eq!(decode_node_message(received.message()), None);
        }
    }

    #[test]
    fn a_peer_s_refusal_is_read_whatever_it_carries() {
        // An application code keeps its reason; bad UTF-8 costs letters,
        // not the answer, and a long reason is cut to the bound.
        assert_eq!(
            refusal_from_wire(0x8002, b"taken"),
            Refusal::app(AppCode::nth(2), "taken")
        );
        let Refusal::App { reason, .. } = refusal_from_wire(0x8002, &[b'a', 0xFF]) else {
            panic!("an application code");
        };
        assert_eq!(&*reason, "a\u{FFFD}");
        let long = vec![b'x'; wire::client::APP_REASON_LEN_MAX + 10];
        let Refusal::App { reason, .. } = refusal_from_wire(0x8002, &long) else {
            panic!("an application code");
        };
        assert_eq!(reason.len(), wire::client::APP_REASON_LEN_MAX);
        // A protocol code this build does not know is INTERNAL, its bytes
        // ignored.
        assert_eq!(
            refusal_from_wire(77, b"x"),
            Refusal::Code(ErrorCode::Internal)
        );
        assert_eq!(
            refusal_from_wire(5, b""),
            Refusal::Code(ErrorCode::BadRequest)
        );
        // A protocol code keeps the object's reason across nodes.
        assert_eq!(
            refusal_from_wire(5, b"counter would overflow"),
            Refusal::explained(ErrorCode::BadRequest, "counter would overflow")
        );
    }
}
