//! The seam between the gateway and the player side (the router's player
//! objects). Per core:
//!
//! - ingress: the gateway calls [`PlayerPort::deliver`] on the session's
//!   core with a `ClientIngress` frame for every accepted request of a
//!   session bound to [`Target::Player`](super::Target::Player), and with a
//!   `SessionBound` frame when `auth.login` bound a session to its player,
//!   and a `SessionUnbound` / `SessionDisconnected` frame when such a
//!   session ends;
//! - egress: the player side answers with a `ClientEgress` frame (echoing
//!   `session_id`, `session_epoch` and `player_id` of the ingress) passed to
//!   [`GatewayHandle::egress`](super::GatewayHandle::egress) on ANY core:
//!   the handle routes it to the owning core (directly when local, else over
//!   the mesh) and into the egress gate;
//! - kick: [`GatewayHandle::kick`](super::GatewayHandle::kick) from any core.

use wire::frame::FrameBuf;

/// The player side's per-core entry point.
pub trait PlayerPort {
    /// Takes a frame for the player side, or hands it back when it cannot
    /// (the gateway then answers an ingress with UNAVAILABLE).
    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf>;
}
