//! The messages cores and nodes exchange. Flat on purpose: fixed-width
//! integers, fixed arrays and byte vectors only, so validating an archive is
//! a bounded walk with no maps, shared pointers or niches to check.

use rkyv::{Archive, Deserialize, Serialize};

/// Addressing for a message routed to a stateful object.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct RouterHead {
    pub type_id: u32,
    pub zone_id: u32,
    pub object_id: u64,
    /// The sender's view of the object's route; a receiver with a newer
    /// version knows the sender's cache is stale.
    pub route_version: u64,
    pub source_node: u64,
    /// Forwarding hops left; a message at 0 is not forwarded again, which
    /// bounds loops while routes converge.
    pub transfer_ttl: u32,
}

/// One frame's content.
///
/// The archived tag is the variant's position, so new variants go at the
/// END and existing ones are never reordered or removed: nodes of one
/// cluster must agree on every tag they exchange.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub enum Message {
    /// A client REQUEST forwarded from the gateway core that owns the
    /// session. `session_id`'s high bits name that core (the gateway
    /// defines the split); `session_epoch` lets the gateway drop answers
    /// meant for a previous binding of the session.
    ClientIngress {
        gateway_node: u64,
        session_id: u64,
        session_epoch: u32,
        player_id: u64,
        route_id: u32,
        seq: u32,
        body: Vec<u8>,
    },
    /// A frame for a client (RESPONSE, PUSH or ERROR), sent to the gateway
    /// core that owns the session. `kind` is the client `FrameKind` byte.
    ClientEgress {
        session_id: u64,
        session_epoch: u32,
        player_id: u64,
        kind: u8,
        route_id: u32,
        seq: u32,
        body: Vec<u8>,
    },
    /// A service message for one object, forwarded towards its owner.
    Routed { head: RouterHead, payload: Vec<u8> },
    /// Tells caches where an object lives now.
    RouterUpdateSync {
        type_id: u32,
        zone_id: u32,
        object_id: u64,
        owner_node: u64,
        route_version: u64,
    },
    /// Hands an object's state to its new owner.
    RouterTransfer {
        type_id: u32,
        zone_id: u32,
        object_id: u64,
        owner_node: u64,
        route_version: u64,
        cas_version: u64,
        state: Vec<u8>,
    },
    /// The new owner's answer to a `RouterTransfer`.
    RouterTransferAck {
        type_id: u32,
        zone_id: u32,
        object_id: u64,
        result: u32,
    },
    /// Gateway control, to the core that owns `session_id`: close that
    /// session in the kick order (PUSH `sys.kicked` with `reason`, `Unbound`
    /// to its target, invalidate, remove, close), if it is still bound to
    /// `player_id`. Sent by the duplicate-login policy (kick_old).
    SessionKick {
        session_id: u64,
        player_id: u64,
        reason: Vec<u8>,
    },
    /// Gateway to a session's target: the gateway closed (kicked) the
    /// session; `session_epoch` is the last epoch before invalidation.
    SessionUnbound {
        gateway_node: u64,
        session_id: u64,
        session_epoch: u32,
        player_id: u64,
    },
    /// Gateway to a session's target: the connection ended by itself (peer
    /// closed, protocol violation, idle, slow reader). Sent only while the
    /// binding is live, so a kick racing a disconnect notifies once.
    SessionDisconnected {
        gateway_node: u64,
        session_id: u64,
        session_epoch: u32,
        player_id: u64,
    },
    /// Gateway to a session's new target: `auth.login` bound the session
    /// to `player_id` under `session_epoch`, so the player object learns
    /// its current session (for PUSHes and room presence).
    SessionBound {
        gateway_node: u64,
        session_id: u64,
        session_epoch: u32,
        player_id: u64,
    },
    /// A request for one router object, between cores (and nodes): the
    /// router head, the request's identity (`origin_node`, `request_seq`:
    /// where its answer goes), the service op and body, and the client
    /// session it came from (`has_client` 0 or 1).
    RouterRequest {
        head: RouterHead,
        origin_node: u64,
        request_seq: u64,
        op: u32,
        needs_reply: u8,
        has_client: u8,
        client_gateway_node: u64,
        client_session_id: u64,
        client_session_epoch: u64,
        client_player_id: u64,
        body: Vec<u8>,
    },
    /// The one answer to a `RouterRequest`, sent to the core that made
    /// `request_seq`: `error_code` 0 with a RESPONSE body, or a
    /// docs/protocol.md ERROR code.
    RouterReply {
        origin_node: u64,
        request_seq: u64,
        error_code: u16,
        body: Vec<u8>,
    },
}
