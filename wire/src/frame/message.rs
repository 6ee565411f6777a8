//! The messages cores and nodes exchange. Flat on purpose: fixed-width
//! integers, fixed arrays and byte vectors only, so validating an archive is
//! a bounded walk with no maps, shared pointers or niches to check.

use rkyv::{Archive, Deserialize, Serialize};

/// A stateful object's key (`ObjectKey`).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct KeyWire {
    pub type_id: u32,
    pub zone_id: u32,
    pub object_id: u64,
}

/// Addressing for a message routed to a stateful object (the router's
/// `RouterHead`, field for field).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct RouterHead {
    pub key: KeyWire,
    /// The sender's view of the object's route; a receiver with a newer
    /// version knows the sender's cache is stale.
    pub route_version: u64,
    /// The node the request entered the cluster at (forwarding keeps it).
    pub source_node: u64,
    /// Forwarding hops taken so far; the router refuses one more past
    /// `router.forward_hops_max`, which bounds loops while routes converge.
    pub transfer_ttl: u32,
}

/// One client session (the router's `ClientRef`, field for field).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct ClientWire {
    pub gateway_node: u64,
    pub session_id: u64,
    pub session_epoch: u32,
    pub player_id: u64,
}

/// One frame's content.
///
/// The archived tag is the variant's position, so new variants go at the
/// END and existing ones are never reordered or removed: nodes of one
/// cluster must agree on every tag they exchange. (This is format version 2
/// of the checksum seed: version 1's router variants did not match the
/// router's node messages and never crossed a node.)
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub enum Message {
    /// A client REQUEST handed from the gateway core that owns the session
    /// to the core that routes it.
    ClientIngress {
        client: ClientWire,
        route_id: u32,
        seq: u32,
        body: Vec<u8>,
    },
    /// A frame for a client (RESPONSE, PUSH or ERROR), sent to the gateway
    /// core that owns the session, on this node or another. `kind` is the
    /// client `FrameKind` byte.
    ClientEgress {
        session_id: u64,
        session_epoch: u32,
        player_id: u64,
        kind: u8,
        route_id: u32,
        seq: u32,
        body: Vec<u8>,
    },
    /// Gateway control, to the core that owns `session_id`: close that
    /// session in the kick order (PUSH `sys.kicked` with `reason`, `Unbound`
    /// to its target, invalidate, remove, close), if it is still bound to
    /// `player_id`. Sent by the duplicate-login decision (kick_old).
    SessionKick {
        session_id: u64,
        player_id: u64,
        reason: Vec<u8>,
    },
    /// Gateway to a session's target: the gateway closed (kicked) the
    /// session; `client.session_epoch` is the last epoch before
    /// invalidation.
    SessionUnbound { client: ClientWire },
    /// Gateway to a session's target: the connection ended by itself (peer
    /// closed, protocol violation, idle, slow reader). Sent only while the
    /// binding is live, so a kick racing a disconnect notifies once.
    SessionDisconnected { client: ClientWire },
    /// The router's `NodeMessage::Routed`: a request for one object, sent
    /// or forwarded towards its owner; its answer goes to the core of
    /// `origin_node` named in `request_seq`.
    RouterRequest {
        head: RouterHead,
        origin_node: u64,
        request_seq: u64,
        op: u32,
        needs_reply: u8,
        has_client: u8,
        client: ClientWire,
        body: Vec<u8>,
    },
    /// The one answer to a `RouterRequest`, sent to the core that made
    /// `request_seq`: `error_code` 0 with a RESPONSE body, or a client
    /// protocol ERROR code.
    RouterReply {
        origin_node: u64,
        request_seq: u64,
        error_code: u16,
        body: Vec<u8>,
    },
    /// The router's `NodeMessage::RouterUpdateSync`.
    RouterUpdateSync {
        key: KeyWire,
        owner_node: u64,
        owner_incarnation: u64,
        route_version: u64,
    },
    /// The router's `NodeMessage::RouterTransfer`: the state the sender
    /// persisted with the receiver as owner.
    RouterTransfer {
        key: KeyWire,
        transfer_id: u64,
        owner_incarnation: u64,
        route_version: u64,
        cas_version: u64,
        save_timepoint_ms: u64,
        state: Vec<u8>,
    },
    /// The router's `NodeMessage::TransferAck`.
    RouterTransferAck {
        key: KeyWire,
        transfer_id: u64,
        accepted: u8,
    },
    /// The router's `NodeMessage::ServiceRequest`: a request for a stateless
    /// service on the node the sender picked; no route head (nothing is
    /// owned or forwarded). Its answer is a `RouterReply` like any other.
    ServiceRequest {
        key: KeyWire,
        origin_node: u64,
        request_seq: u64,
        op: u32,
        needs_reply: u8,
        has_client: u8,
        client: ClientWire,
        body: Vec<u8>,
    },
}
