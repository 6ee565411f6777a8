//! The in-memory events and effects of the router state machine. Drivers
//! translate them to and from wire frames (rkyv router heads, client frames).

use wire::ObjectKey;

use crate::ids::{NodeId, RouteVersion};
use crate::store::{CasVersion, RecordWrite, RouteRecord, WriteOutcome};

/// The router head every routed message carries (`SSRouterHead` in
/// docs/origins.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterHead {
    pub key: ObjectKey,
    /// The sender's route version for `key`; 0 when it knew none.
    pub route_version: RouteVersion,
    /// The node the request entered the cluster at. Forwarding preserves it,
    /// so `router_update_sync` reaches the original caller.
    pub source_node: NodeId,
    /// Forwarding hops taken so far; refused past `forward_hops_max`. The
    /// wire carries it in the head's `transfer_ttl` field.
    pub forward_hops: u32,
}

impl RouterHead {
    /// The head of a request entering the cluster at `node` (from its gateway
    /// or from an object's handler), before any routing decision.
    pub fn local(key: ObjectKey, node: NodeId) -> RouterHead {
        RouterHead {
            key,
            route_version: RouteVersion(0),
            source_node: node,
            forward_hops: 0,
        }
    }
}

/// A request's identity, unique in the cluster: the node whose gateway holds
/// the client's session and a number that node chose. The answer goes there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    pub origin_node: NodeId,
    pub seq: u64,
}

/// A reference to one client session, enough for the gateway's egress gate
/// to accept or refuse a PUSH (a stale epoch is refused there, not here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientRef {
    /// The node whose gateway holds the session.
    pub gateway_node: NodeId,
    /// Unique on its gateway node across restarts (the gateway puts the
    /// node's incarnation at start in it).
    pub session_id: u64,
    /// The session's binding epoch (the gateway's `u32`).
    pub session_epoch: u32,
    /// The logged-in player (0 before login).
    pub player_id: u64,
}

/// What the object's handler is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    /// Service-defined operation (a client route id or an internal message).
    pub op: u32,
    pub body: Vec<u8>,
    /// The session the request came from, when it came from a client.
    pub client: Option<ClientRef>,
    /// False for one-way object-to-object notifications: nobody waits, so
    /// the router emits no `Reply` for them.
    pub needs_reply: bool,
    /// Whether `body` ends with the client's nonzero `u64` request key
    /// (docs/protocol.md, section 12): the object answers a keyed request
    /// once per requesting player and gives a retry the remembered answer.
    /// The key rides at the end of the body rather than in a field of its
    /// own so that a request still fits the router's 128-byte input slot
    /// (`an_input_fits_in_128_bytes`): keyless requests pay nothing.
    pub keyed: bool,
}

/// Bytes of a request key at the end of a keyed request's body.
const REQUEST_KEY_LEN: usize = 8;

impl Request {
    /// The client's request key, 0 for none.
    pub fn request_key(&self) -> u64 {
        match self.body.last_chunk::<REQUEST_KEY_LEN>() {
            Some(key) if self.keyed => u64::from_le_bytes(*key),
            _ => 0,
        }
    }

    /// The route's own body: `body` without the request key.
    pub fn route_body(&self) -> &[u8] {
        match self.body.len().checked_sub(REQUEST_KEY_LEN) {
            Some(len) if self.keyed => &self.body[..len],
            _ => &self.body,
        }
    }

    /// Appends `request_key` to `body` (nothing for 0, which is no key).
    pub fn add_request_key(&mut self, request_key: u64) {
        if request_key != 0 && !self.keyed {
            self.body.extend_from_slice(&request_key.to_le_bytes());
            self.keyed = true;
        }
    }
}

/// Error answers: the client protocol's own ERROR codes (docs/protocol.md),
/// one enum from the wire to the handler, so the gateway writes a handler's
/// code as it is. A handler answers with the codes from `AuthFailed` on;
/// the first three are the gateway's own refusals.
pub use wire::client::ErrorCode;

pub use wire::client::AppCode;

/// An ERROR answer: one of the protocol's codes (the reason the client
/// reads is then the router's, docs/protocol.md section 4), a protocol code
/// with the object's own reason, or an object type's own code in the
/// application range with the reason it gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A protocol code.
    Code(ErrorCode),
    /// A protocol code with the words of the object that refused (`not a
    /// member of room 7`), cut to `wire::client::APP_REASON_LEN_MAX` bytes:
    /// clients branch on the code, people read the reason.
    Explained {
        /// The protocol code clients branch on.
        code: ErrorCode,
        /// Words for a person (the client prints them).
        reason: Box<str>,
    },
    /// An object type's own code and its reason, cut to
    /// `wire::client::APP_REASON_LEN_MAX` bytes.
    App {
        /// The code, from `wire::client::APP_CODE_MIN` on.
        code: AppCode,
        /// Words for a person (the client prints them).
        reason: Box<str>,
    },
}

impl Refusal {
    /// The application error `code` with `reason` (cut to
    /// `wire::client::APP_REASON_LEN_MAX` bytes).
    pub fn app(code: AppCode, reason: &str) -> Refusal {
        Refusal::App {
            code,
            reason: wire::client::bounded_reason(reason).into(),
        }
    }

    /// The protocol code `code` with `reason` (cut to
    /// `wire::client::APP_REASON_LEN_MAX` bytes); an empty reason leaves the
    /// router's own.
    pub fn explained(code: ErrorCode, reason: &str) -> Refusal {
        if reason.is_empty() {
            return Refusal::Code(code);
        }
        Refusal::Explained {
            code,
            reason: wire::client::bounded_reason(reason).into(),
        }
    }

    /// The protocol code, `None` for an application error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Refusal::Code(code) | Refusal::Explained { code, .. } => Some(*code),
            Refusal::App { .. } => None,
        }
    }

    /// The reason the object gave, `None` when it gave none.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Refusal::Code(_) => None,
            Refusal::Explained { reason, .. } | Refusal::App { reason, .. } => Some(reason),
        }
    }

    /// The code as the wire carries it.
    pub fn wire_code(&self) -> u16 {
        match self {
            Refusal::Code(code) | Refusal::Explained { code, .. } => *code as u16,
            Refusal::App { code, .. } => code.get(),
        }
    }
}

impl From<ErrorCode> for Refusal {
    fn from(code: ErrorCode) -> Refusal {
        Refusal::Code(code)
    }
}

impl PartialEq<ErrorCode> for Refusal {
    fn eq(&self, other: &ErrorCode) -> bool {
        self.code() == Some(*other)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Code(code) => f.write_str(code.name()),
            Refusal::Explained { code, reason } => write!(f, "{}: {reason}", code.name()),
            Refusal::App { code, reason } => {
                write!(f, "application error {}: {reason}", code.get())
            }
        }
    }
}

/// The code and the bytes that follow it of a refusal in a router frame:
/// a reason rides where a RESPONSE's body would, so the frame layout is
/// the one every peer already reads (a peer that reads no reason after a
/// protocol code answers with the router's own).
pub(crate) fn refusal_wire(refusal: Refusal) -> (u16, Vec<u8>) {
    match refusal {
        Refusal::Code(code) => (code as u16, Vec::new()),
        Refusal::Explained { code, reason } => (code as u16, reason.into_string().into_bytes()),
        Refusal::App { code, reason } => (code.get(), reason.into_string().into_bytes()),
    }
}

/// The refusal a router frame's nonzero `code` and `rest` carry: a code
/// keeps its reason (bounded, lossy UTF-8: a peer's bad bytes cost the
/// reason's letters, not the answer); a code this build does not know is
/// a fault of that peer, answered INTERNAL without its words.
pub(crate) fn refusal_from_wire(code: u16, rest: &[u8]) -> Refusal {
    let reason = String::from_utf8_lossy(rest);
    match (AppCode::new(code), ErrorCode::from_u16(code)) {
        (Some(code), _) => Refusal::app(code, &reason),
        (None, Some(code)) => Refusal::explained(code, &reason),
        (None, None) => Refusal::Code(ErrorCode::Internal),
    }
}

/// The answer to one request: a RESPONSE body or an ERROR.
pub type Outcome = Result<Vec<u8>, Refusal>;

/// A node-to-node message of the router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeMessage {
    /// A request sent or forwarded to the node believed to own `head.key`.
    Routed { head: RouterHead, request: Request },
    /// `router_update_sync`: a newer route for a cache the receiver may hold.
    RouterUpdateSync {
        key: ObjectKey,
        owner_node: NodeId,
        owner_incarnation: u64,
        route_version: RouteVersion,
    },
    /// `router_transfer`: the sender persisted `owner_node = receiver` with
    /// this route version and CAS version, and ships the state it wrote.
    RouterTransfer(RouterTransfer),
    /// The receiver of a `RouterTransfer` confirms (or refuses) ownership.
    TransferAck {
        key: ObjectKey,
        transfer_id: u64,
        accepted: bool,
    },
    /// A request for a stateless service, sent to the node the sender's
    /// catalog picked: the receiver runs it (no ownership, no forwarding),
    /// or answers UNAVAILABLE when it does not run that service.
    ServiceRequest { key: ObjectKey, request: Request },
}

impl NodeMessage {
    /// The key this message is about: the receiving driver hands it to the
    /// core `shard_of(key, cores)`.
    pub fn key(&self) -> ObjectKey {
        match self {
            NodeMessage::Routed { head, .. } => head.key,
            NodeMessage::RouterUpdateSync { key, .. } => *key,
            NodeMessage::RouterTransfer(transfer) => transfer.key,
            NodeMessage::TransferAck { key, .. } => *key,
            NodeMessage::ServiceRequest { key, .. } => *key,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterTransfer {
    pub key: ObjectKey,
    pub transfer_id: u64,
    /// The receiver's incarnation as the sender wrote it into the record.
    pub owner_incarnation: u64,
    pub route_version: RouteVersion,
    pub cas_version: CasVersion,
    pub save_timepoint_ms: u64,
    pub state: Vec<u8>,
}

/// Names one store request of one core; the reply carries it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreToken(pub u64);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Load(ObjectKey),
    Write(RecordWrite),
    /// Applied independently (each its own CAS) but in one round trip.
    WriteBatch(Vec<RecordWrite>),
}

/// Why a store request failed without an outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFailure {
    /// Transient (EN_ROUTER_EAGAIN in docs/origins.md): retried after a
    /// randomised wait. For a write, nothing was applied.
    Busy,
    /// Terminal for this attempt (timeout of a load, store down). For a
    /// write, nothing was applied: a write that may have applied is
    /// `WriteOutcome::Indeterminate` instead.
    Failed,
}

/// The store's answer to a `StoreOp`, fed back with `on_store_reply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreReply {
    Loaded(Option<RouteRecord>),
    Written(WriteOutcome),
    /// One outcome per write of the batch, in order.
    WrittenBatch(Vec<WriteOutcome>),
    Failed(StoreFailure),
}

/// A timer the core asked for. Timers are never cancelled: a stale one finds
/// nothing to do when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// The periodic sweep: saves, idle degradation, cache cleanup.
    Sweep,
    /// Retry a pull of `key` after a randomised wait (EAGAIN).
    PullRetry { key: ObjectKey },
    /// Give up waiting for the `TransferAck` of `transfer_id`.
    TransferAck { key: ObjectKey, transfer_id: u64 },
    /// The shutdown deadline passed.
    ShutdownDeadline,
    /// Write a copy again whose last write failed or had no known outcome
    /// (a save, a release at shutdown, or a fenced copy's readopt).
    WriteRetry { key: ObjectKey },
    /// A timer an object asked for (`HandlerOutput::timers`): the object
    /// gets a timer event if it is still writable here.
    Object {
        key: ObjectKey,
        activation: u64,
        tag: u64,
    },
}

/// What the driver must do after an event.
///
/// Every request's answer is an `Effect::Reply` pushed into the core's
/// effect list and moved out of it again, so the enum is kept at most 128
/// bytes, which the compiler moves in registers instead of calling
/// `memcpy` (152 bytes cost the routed path 4% of a core at pipeline 16):
/// the large payloads of the rarer variants are boxed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send to another node. The receiving driver calls the matching `on_*`
    /// method of core `shard_of(message.key(), its cores)`.
    SendToNode {
        node: NodeId,
        message: Box<NodeMessage>,
    },
    /// Hand a new request to this node's router: the core
    /// `shard_of(head.key, cores)` (possibly this one) gets `on_request`.
    /// Objects use this to message other objects.
    Submit {
        head: RouterHead,
        request: Box<Request>,
    },
    /// Ask the store; answer with `on_store_reply(token, ..)`. Every token
    /// must get exactly one reply (a timeout is a reply: Indeterminate for a
    /// write, `Failed` for a load).
    Store { token: StoreToken, op: StoreOp },
    /// Call `on_timer(timer)` at `at_ms` or later.
    ArmTimer { at_ms: u64, timer: Timer },
    /// The one answer to `request`: deliver it to the gateway of
    /// `request.origin_node` (this node or another).
    Reply {
        request: RequestId,
        outcome: Outcome,
    },
    /// A server-to-client PUSH (`route_id`, body) for one session; the
    /// gateway of `client.gateway_node` checks the epoch before writing it.
    Push {
        client: ClientRef,
        route_id: u32,
        body: Vec<u8>,
    },
    /// Ask the gateway of `client.gateway_node` to kick (PUSH `sys.kicked`,
    /// then close) that session: a duplicate-login decision.
    Kick { client: ClientRef },
    /// Ask the gateway of `client.gateway_node` whether that session still
    /// stands as `client` names it; if not, it sends the session's
    /// `SessionUnbound` (its player object forgets it).
    CheckSession { client: ClientRef },
    /// The node of `client`'s session has no live incarnation (declared
    /// down, or left): the session is gone, its player object forgets it.
    SessionGone { client: ClientRef },
    /// Like `Submit`, for a request whose answer goes back to the object
    /// `caller` as an answer event (`handler::answer_event(tag, ..)`): the
    /// driver gives `request` an id of its own and keeps where its answer
    /// goes, answering TIMEOUT to the caller if none comes in time.
    Call {
        head: RouterHead,
        request: Box<Request>,
        caller: ObjectKey,
        tag: u64,
    },
    /// Call `on_flush` once the events already being delivered to this core
    /// were delivered (the end of the current batch), not from inside them.
    /// Emitted at most once until that `on_flush`: `on_write` objects whose
    /// mutations are held then start one save each covering all of them.
    FlushSavesAfterBatch,
    /// A transfer asked for with `RouterCore::transfer` ended (whoever
    /// waits for it, an operator's call or a drain, learns how). Emitted
    /// exactly once per transfer that `transfer` accepted.
    TransferDone(TransferDone),
}

#[cfg(test)]
impl Effect {
    /// A `SendToNode`'s node and message, for tests that match on the
    /// message.
    pub(crate) fn sent(&self) -> Option<(NodeId, &NodeMessage)> {
        match self {
            Effect::SendToNode { node, message } => Some((*node, message)),
            _ => None,
        }
    }

    /// `sent`, owned.
    pub(crate) fn into_sent(self) -> Option<(NodeId, NodeMessage)> {
        match self {
            Effect::SendToNode { node, message } => Some((node, *message)),
            _ => None,
        }
    }
}

/// How one transfer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferDone {
    pub key: ObjectKey,
    pub target: NodeId,
    pub outcome: TransferOutcome,
    /// The route version the record has now: the one that names `target`
    /// when the record was written, else the one this node knows.
    pub route_version: RouteVersion,
}

/// The end of a transfer, seen from the old owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferOutcome {
    /// The record names the target and the target confirmed it by CAS: it
    /// serves the object now.
    Confirmed,
    /// The record names the target, which refused to confirm (it knew a
    /// newer route, was busy with the key, or cannot serve): it loads the
    /// object from the store on its next request.
    Refused,
    /// The record names the target, which did not answer within
    /// `transfer_ack_timeout_ms` (or could not be sent to).
    NoAnswer,
    /// The record names the target; nobody was told (`need_notify` off).
    Written,
    /// The record was not written: the object did not move (this node
    /// still owns it, or lost it to a newer owner meanwhile).
    NotMoved,
}

impl TransferOutcome {
    /// Whether the record now names the target.
    pub fn moved(self) -> bool {
        !matches!(self, TransferOutcome::NotMoved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// See `Effect`: past 128 bytes every reply is moved by `memcpy` calls.
    #[test]
    fn an_effect_fits_in_128_bytes() {
        assert!(
            std::mem::size_of::<Effect>() <= 128,
            "{}",
            std::mem::size_of::<Effect>()
        );
    }
}

/// Why `transfer` refused to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferError {
    UnknownType,
    /// This core holds no writable copy of the key.
    NotWritable,
    SameNode,
    /// A transfer of this key is already in progress or queued.
    InProgress,
    ShuttingDown,
    /// No member of the cluster has the target's id: no membership row
    /// names it (never started, or its row was deleted after it left).
    UnknownNode,
    /// Membership knows the target but not up (down or left).
    TargetUnavailable,
    /// The target drains: no object is placed on it.
    TargetDraining,
    /// This node is fenced, or its lease ran out: it moves nothing until
    /// it serves again.
    Fenced,
}
