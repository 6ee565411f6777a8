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
}
