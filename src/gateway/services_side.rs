//! The seam between the gateway and the services side: whatever serves a
//! logged-in session's requests (on a node, the port of `node/port.rs` in
//! front of the router's objects and services). Per core:
//!
//! - ingress: the gateway calls [`ServicesSide::deliver_ingress`] on the
//!   session's core with every accepted request of a session bound to
//!   [`Target::Services`](super::Target::Services), as a plain [`Ingress`]: the
//!   port is this core's, so the call stays on the core and needs no frame
//!   (docs/architecture.md: rkyv frames are for messages that cross cores; encoding
//!   and decoding one here was a measurable share of a routed request).
//!   It calls [`ServicesSide::login`] when `auth.login` verified a token: the
//!   player object decides the login (duplicate logins are decided there,
//!   cluster-wide) and the answer comes back through
//!   [`GatewayHandle::complete_login`](super::GatewayHandle::complete_login);
//!   and [`ServicesSide::deliver`] with a `SessionUnbound` /
//!   `SessionDisconnected` frame when a logged-in session ends;
//! - egress: the services side answers with an [`EgressRef`](super::EgressRef)
//!   (echoing `session_id`, `session_epoch` and `player_id` of the ingress)
//!   passed to [`GatewayHandle::egress_ref`](super::GatewayHandle::egress_ref)
//!   on ANY core: a session of that core goes straight into the egress gate
//!   by a plain call, any other is encoded as a `ClientEgress` frame for its
//!   owning core over the mesh. A `ClientEgress` frame may also be passed to
//!   [`GatewayHandle::egress`](super::GatewayHandle::egress);
//! - kick: [`GatewayHandle::kick`](super::GatewayHandle::kick) from any core.

use std::time::Instant;

use wire::frame::FrameBuf;

use super::Ingress;

/// A login whose token was verified, for the player object to decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginRequest {
    pub gateway_node: u64,
    pub session_id: u64,
    /// The session's epoch now (the answer is gated on it).
    pub session_epoch: u32,
    /// The epoch the session will have once bound: the player object
    /// addresses its pushes to the session with it.
    pub bound_epoch: u32,
    pub player_id: u64,
    /// The `auth.login` request's seq.
    pub seq: u32,
}

/// The services side's per-core entry point, as the gateway sees it (the
/// router's `ClientSide` is the other way round).
pub trait ServicesSide {
    /// Hands a verified login to the player object of `login.player_id`;
    /// its decision comes back through `GatewayHandle::complete_login` on
    /// this core. Gives the login back when it cannot (the gateway then
    /// answers UNAVAILABLE).
    fn login(&self, login: LoginRequest, now: Instant) -> Result<(), LoginRequest>;

    /// Takes a frame for the services side, or hands it back when it cannot
    /// (the gateway then answers an ingress with UNAVAILABLE).
    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf>;

    /// Takes an accepted client request of a session of this core (an
    /// in-core call: no frame), or hands it back when it cannot (the
    /// gateway then answers UNAVAILABLE). `gateway_node` is this node;
    /// `now` is when the request's read completed (the gateway's one clock
    /// reading per read batch).
    fn deliver_ingress<'a>(
        &self,
        gateway_node: u64,
        ingress: Ingress<'a>,
        now: Instant,
    ) -> Result<(), Ingress<'a>>;
}
