//! The seam between the gateway and the player side (the router's player
//! objects). Per core:
//!
//! - ingress: the gateway calls [`PlayerPort::deliver`] on the session's
//!   core with a `ClientIngress` frame for every accepted request of a
//!   session bound to [`Target::Player`](super::Target::Player), and with a
//!   `SessionUnbound` / `SessionDisconnected` frame when such a session ends;
//! - egress: the player side answers with a `ClientEgress` frame (echoing
//!   `session_id`, `session_epoch` and `player_id` of the ingress) passed to
//!   [`GatewayHandle::egress`](super::GatewayHandle::egress) on ANY core:
//!   the handle routes it to the owning core (directly when local, else over
//!   the mesh) and into the egress gate;
//! - kick: [`GatewayHandle::kick`](super::GatewayHandle::kick) from any core.

use wire::client::{route, FrameKind};
use wire::frame::{ArchivedMessage, FrameBuf, Message};

use super::driver::GatewayHandle;

/// The player side's per-core entry point.
pub trait PlayerPort {
    /// Takes a frame for the player side, or hands it back when it cannot
    /// (the gateway then answers an ingress with UNAVAILABLE).
    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf>;
}

/// INTERIM player target, installed on every core until the router's player
/// objects replace it (router integration): it answers `sys.ping` after
/// login by echoing the body through the real egress path, and leaves every
/// other player route unanswered, so those requests get the gateway's
/// TIMEOUT. It ignores session notices.
pub struct InterimPlayer {
    gateway: GatewayHandle,
}

impl InterimPlayer {
    pub fn new(gateway: GatewayHandle) -> InterimPlayer {
        InterimPlayer { gateway }
    }
}

impl PlayerPort for InterimPlayer {
    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf> {
        let ArchivedMessage::ClientIngress {
            session_id,
            session_epoch,
            player_id,
            route_id,
            seq,
            body,
            ..
        } = frame.message()
        else {
            return Ok(());
        };
        if route_id.to_native() != route::SYS_PING {
            return Ok(());
        }
        let answer = FrameBuf::encode(&Message::ClientEgress {
            session_id: session_id.to_native(),
            session_epoch: session_epoch.to_native(),
            player_id: player_id.to_native(),
            kind: FrameKind::Response as u8,
            route_id: route::SYS_PING,
            seq: seq.to_native(),
            body: body.as_slice().to_vec(),
        });
        match answer {
            Ok(answer) => self.gateway.egress(answer),
            Err(error) => tracing::warn!(%error, "interim player cannot encode an answer"),
        }
        Ok(())
    }
}
