//! The gateway (docs/protocol.md, sessions and login; docs/architecture.md,
//! a client request).
//!
//! Sans-IO parts, unit-tested without sockets:
//! - [`session`]: `Session` and the epoch compare-and-set `apply_binding`;
//! - the route table it checks against lives in `crate::route`;
//! - [`core`]: the per-core registry, ingress checks, in-flight accounting
//!   and TIMEOUT, the six-check egress gate, kick and close ordering;
//! - [`inflight`]: a session's table of requests in flight;
//! - [`outbox`]: a session's bounded send queue;
//! - [`rate`]: a session's request rate limit (a token bucket);
//! - [`auth`]: the stateless per-core auth service (`auth.login`,
//!   `sys.ping` before login);
//! - [`body_codec`]: a listener's body codec (MessagePack to and from the
//!   JSON of `json` routes);
//!
//! IO: [`driver`] runs the above on the core's runtime (accept loop, one
//! task per connection that reads and writes, the deadline timer, mesh
//! dispatch), and [`services_side`] is the seam the services side plugs into.
//!
//! A `session_id` is made by `wire::ids::make(core, incarnation, serial)`:
//! it names the core that owns the session, so an egress frame finds its
//! core with no table shared between cores or nodes, and carries the node's
//! incarnation at start, so a reference kept from an earlier run of the
//! node (a player object's, a room's) never reaches a session of this run.

pub mod auth;
pub mod body_codec;
pub mod core;
pub mod driver;
pub mod inflight;
pub mod outbox;
pub mod rate;
pub mod services_side;
pub mod session;
pub mod transport;

use wire::frame::{ClientWire, FrameBuf, FrameEncodeError, Message};

pub use self::core::{
    BindError, CloseReason, EgressRef, EgressRejected, GatewayCore, HeldFrame, Limits,
    LoginOutcome, ResumeRefusal, ResumeSettings, ResumeToken, SessionPush, SessionRow,
};
pub use self::driver::{GatewayHandle, ResumeHub};
pub use self::services_side::{LoginRequest, ServicesSide};
pub use self::session::{Binding, EpochExpired, Session, Target, K_ANY_EPOCH};

/// The core that owns `session_id` (see `wire::ids`).
pub fn session_core(session_id: u64) -> usize {
    wire::ids::core_of(session_id)
}

/// An accepted client REQUEST with the binding snapshotted at ingress
/// (ingress epochs are not checked again later: the egress gate checks). The
/// body is borrowed from the connection's read buffer: the auth service
/// answers from it in place, and only a target that keeps the request
/// copies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ingress<'a> {
    pub session_id: u64,
    pub binding: Binding,
    /// Which of the session's connections sent it: its answer carries it
    /// back ([`EgressRef::connection`]).
    pub connection: u32,
    pub route_id: u32,
    pub seq: u32,
    pub body: &'a [u8],
    /// A version-2 REQUEST's key (`Some(0)`: version 2 without one); `None`
    /// for version 1 (docs/protocol.md, section 12).
    pub request_key: Option<u64>,
    /// The JSON of the value `body` holds, decoded once by the listener's
    /// body codec (`body_codec`) for a `json` route; `None` when the body
    /// is what the route reads (no codec, another route, an empty body).
    /// The object reads it instead of `body` (`decoded_request` in
    /// docs/origins.md).
    pub decoded_request: Option<Vec<u8>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// The gateway kicked the session.
    Unbound,
    /// The connection ended by itself.
    Disconnected,
}

/// A control notification for the target a session was bound to when it
/// ended; at most one per session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub session_id: u64,
    /// The binding before invalidation: the target and the last epoch.
    pub binding: Binding,
}

/// Session `session_id` of `gateway_node` as its target holds it under
/// `binding`, as frames name it.
pub(crate) fn client_wire(gateway_node: u64, session_id: u64, binding: Binding) -> ClientWire {
    ClientWire {
        gateway_node,
        session_id,
        session_epoch: binding.session_epoch,
        player_id: binding.player_id,
    }
}

impl Notice {
    pub fn to_frame(&self, gateway_node: u64) -> Result<FrameBuf, FrameEncodeError> {
        let client = client_wire(gateway_node, self.session_id, self.binding);
        FrameBuf::encode_local(&match self.kind {
            NoticeKind::Unbound => Message::SessionUnbound { client },
            NoticeKind::Disconnected => Message::SessionDisconnected { client },
        })
    }
}
