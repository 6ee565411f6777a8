//! Moving a draining node's sessions away (`GatewayCore::redirect_all`):
//! PUSH `sys.redirect`, answers through the grace, then the close. And
//! placing one session on its player's node (`GatewayCore::place_session`):
//! the same PUSH once, and no close.

use std::time::{Duration, Instant};

use wire::client::FrameKind;

use super::{CloseReason, GatewayCore, PushError};
use crate::gateway_addresses::GatewayAddresses;

/// Sessions are being moved away: the node drains.
#[derive(Clone, Debug)]
pub(super) struct Redirecting {
    pub(super) grace: Duration,
    /// Gateways of other nodes, spread over by session id among those
    /// that serve the session's transport; empty when there is none.
    pub(super) targets: Vec<GatewayAddresses>,
}

/// The body of `sys.redirect`: `u32 grace_ms` (LE), then the UTF-8
/// `host:port` of another gateway (empty: any other the client knows).
pub fn redirect_body(grace: Duration, target: &str) -> Vec<u8> {
    let grace_ms = u32::try_from(grace.as_millis()).unwrap_or(u32::MAX);
    let mut body = Vec::with_capacity(4 + target.len());
    body.extend_from_slice(&grace_ms.to_le_bytes());
    body.extend_from_slice(target.as_bytes());
    body
}

impl GatewayCore {
    /// The node drains: every session, and every one opened from now on,
    /// gets PUSH `sys.redirect` naming one of `targets` (another node's
    /// gateway, spread by session id; empty when there is none) and
    /// `grace`. Its requests are answered as before until the client closes
    /// the connection or the grace ends (`close_redirected`).
    pub fn redirect_all(&mut self, now: Instant, grace: Duration, targets: Vec<GatewayAddresses>) {
        self.redirecting = Some(Redirecting { grace, targets });
        let sessions: Vec<u64> = self.sessions.keys().copied().collect();
        for session_id in sessions {
            self.redirect(session_id, now);
        }
    }

    /// The gateways later redirects name (the up members change).
    pub fn set_redirect_targets(&mut self, targets: Vec<GatewayAddresses>) {
        if let Some(redirecting) = self.redirecting.as_mut() {
            redirecting.targets = targets;
        }
    }

    /// Sends `sys.redirect` to one session, once.
    pub(super) fn redirect(&mut self, session_id: u64, now: Instant) {
        let Some(redirecting) = self.redirecting.as_ref() else {
            return;
        };
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return;
        };
        if entry.redirect_until().is_some() {
            return;
        }
        entry.transit().redirect_until = Some(now + redirecting.grace);
        // Only the gateways that speak this session's transport: a TLS
        // client sent to a plain port could not connect.
        let transport = entry.transport;
        let serving = redirecting
            .targets
            .iter()
            .filter_map(|target| target.get(transport));
        let target = match serving.clone().count() {
            0 => "",
            n => serving
                .clone()
                .nth((session_id % n as u64) as usize)
                .unwrap_or_default(),
        };
        let body = redirect_body(redirecting.grace, target);
        self.metrics.gateway.redirects.inc();
        let pushed =
            entry
                .outbox
                .push_frame(FrameKind::Push, wire::client::route::SYS_REDIRECT, 0, &body);
        if pushed == Err(PushError::Full) {
            self.close_slow_reader(session_id);
        }
    }

    /// Tells a logged-in session that its player lives on another node,
    /// whose gateway listeners are `owner`: PUSH `sys.redirect` naming the
    /// listener of the session's own transport, with `grace`. Unlike a
    /// drain's, this redirect closes nothing: a client that stays keeps
    /// being served through the node it is on. At most once per session,
    /// never to a session a drain redirected, and never when the owner
    /// serves no listener of the session's transport (a TLS client sent
    /// to a plain port could not connect). Returns whether it was sent.
    pub fn place_session(
        &mut self,
        session_id: u64,
        grace: Duration,
        owner: &GatewayAddresses,
    ) -> bool {
        if self.redirecting.is_some() {
            return false;
        }
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return false;
        };
        if entry.placed || entry.redirect_until().is_some() || entry.closing {
            return false;
        }
        if entry.session.player_id == 0 {
            return false;
        }
        let Some(target) = owner.get(entry.transport) else {
            self.metrics.gateway.placements_without_transport.inc();
            return false;
        };
        entry.placed = true;
        let body = redirect_body(grace, target);
        self.metrics.gateway.placements.inc();
        let pushed =
            entry
                .outbox
                .push_frame(FrameKind::Push, wire::client::route::SYS_REDIRECT, 0, &body);
        if pushed == Err(PushError::Full) {
            self.close_slow_reader(session_id);
        }
        true
    }

    /// Ends the grace of redirected sessions at `now`: a session that owes
    /// nothing is closed (its queued frames flushed first); one that does
    /// refuses new requests and closes once answered (each answer comes
    /// within `request_timeout`: TIMEOUT at worst). Returns how many
    /// sessions are still open on this core.
    pub fn close_redirected(&mut self, now: Instant) -> usize {
        if self.redirecting.is_none() {
            return self.sessions.len();
        }
        let mut done = Vec::new();
        for (&session_id, entry) in self.sessions.iter_mut() {
            if entry.redirect_until().is_none_or(|until| now < until) {
                continue;
            }
            entry.closing = true;
            if entry.inflight.is_empty() && entry.login().is_none() {
                done.push(session_id);
            }
        }
        for session_id in done {
            self.metrics.gateway.redirect_closed.inc();
            self.close(session_id, CloseReason::Redirected);
        }
        self.sessions.len()
    }
}
