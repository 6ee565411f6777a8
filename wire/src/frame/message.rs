//! The messages cores and nodes exchange. Flat on purpose: fixed-width
//! integers, fixed arrays and byte vectors only, so validating an archive is
//! a bounded walk with no maps, shared pointers or niches to check.

use rkyv::{Archive, Deserialize, Serialize};

/// A stateful object's key (`ObjectKey`).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct KeyWire {
    /// [`ObjectKey::type_id`](crate::ObjectKey::type_id).
    pub type_id: u32,
    /// [`ObjectKey::zone_id`](crate::ObjectKey::zone_id).
    pub zone_id: u32,
    /// [`ObjectKey::object_id`](crate::ObjectKey::object_id).
    pub object_id: u64,
}

/// Addressing for a message routed to a stateful object (the router's
/// `RouterHead`, field for field).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct RouterHead {
    /// The object the request is for; the receiving node hands the frame to
    /// its core `shard_of(key, cores)`.
    pub key: KeyWire,
    /// The sender's view of the object's route (0 when it knew none); a
    /// receiver with a newer version knows the sender's cache is stale.
    pub route_version: u64,
    /// The node the request entered the cluster at (forwarding keeps it).
    pub source_node: u64,
    /// Forwarding hops taken so far (the router's `forward_hops`; the field
    /// keeps its first name so the archive layout stays); the router refuses
    /// one more past `router.forward_hops_max`, which bounds loops while
    /// routes converge.
    pub transfer_ttl: u32,
}

/// One client session (the router's `ClientRef`, field for field).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug), compare(PartialEq))]
pub struct ClientWire {
    /// The node whose gateway holds the session; answers and pushes go
    /// there.
    pub gateway_node: u64,
    /// The session, unique on its gateway node across restarts: its core
    /// index and the node's incarnation are in it ([`crate::ids`]).
    pub session_id: u64,
    /// The session's binding epoch, set by its gateway and raised by one at
    /// every login that binds it; the gateway's egress gate drops a frame
    /// whose epoch is not the session's current one.
    pub session_epoch: u32,
    /// The logged-in player, 0 before a login.
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
    /// to the core that routes it. No node of this version sends it (the
    /// gateway hands a request to its own core's router in process); it
    /// stays so that the variants after it keep their tags.
    ClientIngress {
        /// The session that sent the request.
        client: ClientWire,
        /// The REQUEST's `route_id`.
        route_id: u32,
        /// The REQUEST's `seq`, which the answer echoes.
        seq: u32,
        /// The REQUEST's body.
        body: Vec<u8>,
    },
    /// A frame for a client (RESPONSE, PUSH or ERROR), sent to the gateway
    /// core that owns the session, on this node or another. `kind` is the
    /// client `FrameKind` byte.
    ClientEgress {
        /// The session to write to; its core index picks the gateway core.
        session_id: u64,
        /// The binding epoch the sender addressed; the egress gate drops the
        /// frame if the session has been bound again since.
        session_epoch: u32,
        /// The player the sender addressed; the egress gate drops the frame
        /// if the session is bound to another.
        player_id: u64,
        /// The client frame kind: 2 RESPONSE, 3 PUSH or 4 ERROR.
        kind: u8,
        /// The client frame's `route_id`.
        route_id: u32,
        /// The client frame's `seq`: the REQUEST's for an answer, 0 for a
        /// PUSH.
        seq: u32,
        /// The client frame's body (for an ERROR, the ERROR body: code then
        /// reason).
        body: Vec<u8>,
    },
    /// Gateway control, to the core that owns `session_id`: close that
    /// session in the kick order (PUSH `sys.kicked` with `reason`, `Unbound`
    /// to its target, invalidate, remove, close), if it is still bound to
    /// `player_id`. Sent by the duplicate-login decision (kick_old).
    SessionKick {
        /// The session to close.
        session_id: u64,
        /// The player the session must still be bound to; a session bound
        /// to another player meanwhile is left alone.
        player_id: u64,
        /// UTF-8 text for the `sys.kicked` PUSH.
        reason: Vec<u8>,
    },
    /// Gateway to a session's target: the gateway closed (kicked) the
    /// session; `client.session_epoch` is the last epoch before
    /// invalidation.
    SessionUnbound {
        /// The kicked session, with its last epoch.
        client: ClientWire,
    },
    /// Gateway to a session's target: the connection ended by itself (peer
    /// closed, protocol violation, idle, slow reader). Sent only while the
    /// binding is live, so a kick racing a disconnect notifies once.
    SessionDisconnected {
        /// The session that ended, with its current epoch.
        client: ClientWire,
    },
    /// The router's `NodeMessage::Routed`: a request for one object, sent
    /// or forwarded towards its owner; its answer goes to the core of
    /// `origin_node` named in `request_seq`.
    RouterRequest {
        /// The object and its route as the sender knows it.
        head: RouterHead,
        /// The node that made the request and waits for its answer.
        origin_node: u64,
        /// The origin node's number for the request, unique there; its core
        /// index is in it ([`crate::ids`]), so the answer finds that core.
        request_seq: u64,
        /// What the object is asked to do: a client route id, or an
        /// operation an object type defines for messages between objects.
        op: u32,
        /// 1 if the origin waits for a `RouterReply`, 0 for a message that
        /// gets none (one object telling another).
        needs_reply: u8,
        /// 1 if `client` names the session the request came from, 0 if it
        /// came from no session (then `client` is all zeros).
        has_client: u8,
        /// The session the request came from, when `has_client` is 1.
        client: ClientWire,
        /// The client's request key (0: none): the object answers a keyed
        /// request of one player once (docs/protocol.md, section 12).
        request_key: u64,
        /// The request body, as the object type encodes it.
        body: Vec<u8>,
    },
    /// The one answer to a `RouterRequest`, sent to the core that made
    /// `request_seq`: `error_code` 0 with a RESPONSE body, or a client
    /// protocol ERROR code.
    RouterReply {
        /// The `origin_node` of the request answered.
        origin_node: u64,
        /// The `request_seq` of the request answered.
        request_seq: u64,
        /// 0 for a RESPONSE; otherwise a protocol [`ErrorCode`] (1 to 9) or
        /// an application code ([`APP_CODE_MIN`] and up). A code the
        /// receiver does not know is taken as INTERNAL.
        ///
        /// [`ErrorCode`]: crate::client::ErrorCode
        /// [`APP_CODE_MIN`]: crate::client::APP_CODE_MIN
        error_code: u16,
        /// The RESPONSE body; for an application code, its reason (UTF-8);
        /// empty for a protocol code.
        body: Vec<u8>,
    },
    /// The router's `NodeMessage::RouterUpdateSync`: the object's newer
    /// route, sent to a request's `source_node` whose head carried an older
    /// one, so its cache stops sending to the wrong node.
    RouterUpdateSync {
        /// The object.
        key: KeyWire,
        /// The node that owns it now.
        owner_node: u64,
        /// That owner's incarnation, as its ownership record names it.
        owner_incarnation: u64,
        /// The route version of that ownership record.
        route_version: u64,
    },
    /// The router's `NodeMessage::RouterTransfer`: the state the sender
    /// persisted with the receiver as owner.
    RouterTransfer {
        /// The object handed over.
        key: KeyWire,
        /// The sender's number for this handoff; the ack names it, so a late
        /// ack of an earlier handoff is not taken for this one.
        transfer_id: u64,
        /// The receiver's incarnation, as the sender wrote it into the
        /// ownership record.
        owner_incarnation: u64,
        /// The route version of the record the sender wrote.
        route_version: u64,
        /// The CAS version that record has in the store; the receiver's next
        /// write names it.
        cas_version: u64,
        /// When the sender saved, in the sender's unix milliseconds: copied
        /// into the receiver's record for operators, never compared with the
        /// receiver's clock.
        save_timepoint_ms: u64,
        /// The object's encoded state, as written to the store.
        state: Vec<u8>,
    },
    /// The router's `NodeMessage::TransferAck`: the receiver of a
    /// `RouterTransfer` answers whether it took the object.
    RouterTransferAck {
        /// The object handed over.
        key: KeyWire,
        /// The `transfer_id` of the `RouterTransfer` answered.
        transfer_id: u64,
        /// 1 if the receiver now serves the object, 0 if it refused it.
        accepted: u8,
    },
    /// The router's `NodeMessage::ServiceRequest`: a request for a stateless
    /// service on the node the sender picked; no route head (nothing is
    /// owned or forwarded). Its answer is a `RouterReply` like any other.
    ServiceRequest {
        /// The service (its `type_id`) and the key its route derived from
        /// the request; the receiving node hands the frame to its core
        /// `shard_of(key, cores)`.
        key: KeyWire,
        /// As in `RouterRequest`.
        origin_node: u64,
        /// As in `RouterRequest`.
        request_seq: u64,
        /// As in `RouterRequest`.
        op: u32,
        /// As in `RouterRequest`.
        needs_reply: u8,
        /// As in `RouterRequest`.
        has_client: u8,
        /// As in `RouterRequest`.
        client: ClientWire,
        /// As in `RouterRequest`.
        body: Vec<u8>,
    },
    /// A session's target to the core that owns the session: is it still
    /// bound as `client` says? If not (closed, never bound there, bound
    /// again since, or unknown to this start of the node) the gateway sends
    /// `SessionUnbound` with this very `client`, so the target forgets it.
    /// Sent by a player object that refused a login under `single` because
    /// of that session.
    SessionCheck {
        /// The session as the target holds it.
        client: ClientWire,
    },
}
