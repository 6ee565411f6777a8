//! Relay fronts: a connection that resumed a session (`resume.rs`) is
//! served by a session of its own on the core that accepted it, a *front*,
//! which hands every frame it reads to the resumed session's core (on this
//! core or another) and writes what that session's core pumps back to it.
//! Only the bookkeeping is here; the driver's `resume.rs` moves the frames.

use wire::client::ErrorCode;

use super::login::HeldFrame;
use super::resume::ResumeRefusal;
use super::{GatewayCore, PushError};
use crate::gateway::NoticeKind;
use crate::gateway_addresses::Transport;

/// What the fronts of a core owe other cores, for the driver to take.
#[derive(Default)]
pub(super) struct RelayTables {
    /// Frames fronts read, for their sessions' cores (`take_relayed`):
    /// (session, front, frame).
    relayed: Vec<(u64, u64, HeldFrame)>,
    /// Fronts whose connection ended (`take_fronts_ended`): (session,
    /// front).
    fronts_ended: Vec<(u64, u64)>,
}

impl RelayTables {
    /// Whether a frame or an ended front waits to be taken.
    pub(super) fn has_queued(&self) -> bool {
        !self.relayed.is_empty() || !self.fronts_ended.is_empty()
    }
}

impl GatewayCore {
    /// Makes `front` (a new connection's session whose `auth.resume` is
    /// on its way to `session_id`'s core) a relay: the frames it reads
    /// from now on go to that session (`take_relayed`). Returns the
    /// transport of the front's listener, which the session takes if the
    /// resume succeeds; `None` if the front is gone.
    pub fn begin_relay(&mut self, front: u64, session_id: u64) -> Option<Transport> {
        let entry = self.sessions.get_mut(&front)?;
        entry.set_relay_to(session_id);
        Some(entry.transport)
    }

    /// The resume a front relays was accepted: its `auth.resume` request
    /// `seq` is answered through the relay, not by this session.
    pub fn relay_established(&mut self, front: u64, seq: u32) {
        if let Some(entry) = self.sessions.get_mut(&front) {
            entry.inflight.remove(seq);
        }
    }

    /// The resume a front relays was refused: it is a connection of its
    /// own again, and its `auth.resume` gets `refusal`.
    pub fn relay_refused(&mut self, front: u64, seq: u32, refusal: ResumeRefusal) {
        if let Some(entry) = self.sessions.get_mut(&front) {
            entry.set_relay_to(0);
        }
        self.answer_error(front, seq, refusal.code(), refusal.reason());
    }

    /// An ERROR for a frame a front relayed that its session did not take
    /// (its resume was refused).
    pub fn relay_error(
        &mut self,
        front: u64,
        route_id: u32,
        seq: u32,
        code: ErrorCode,
        reason: &str,
    ) {
        self.push_error(front, route_id, seq, code, reason);
    }

    /// Frames of the session's connection, pumped to its front: queued as
    /// they are. `false` if the front is gone.
    pub fn relay_write(&mut self, front: u64, bytes: &[u8], answers: bool) -> bool {
        let Some(entry) = self.sessions.get(&front) else {
            return false;
        };
        match entry.outbox.push_bytes(bytes, answers) {
            Ok(()) => true,
            Err(PushError::Full) => {
                self.close_slow_reader(front);
                false
            }
            Err(PushError::Closed) => false,
        }
    }

    /// The session behind a front closed (or aborted) its connection:
    /// the front closes after what it has queued.
    pub fn relay_end(&mut self, front: u64, abort: bool) {
        if let Some(entry) = self.sessions.get_mut(&front) {
            entry.set_relay_to(0);
        }
        self.finish(front, NoticeKind::Disconnected, abort);
    }

    /// Frames relay fronts read since the last call: (session, front,
    /// frame), for the sessions' cores.
    pub fn take_relayed(&mut self, into: &mut Vec<(u64, u64, HeldFrame)>) {
        into.append(&mut self.relays.relayed);
    }

    /// Fronts whose connection ended since the last call: (session, front).
    pub fn take_fronts_ended(&mut self, into: &mut Vec<(u64, u64)>) {
        into.append(&mut self.relays.fronts_ended);
    }

    /// A frame read on a relay front goes to its session.
    pub(super) fn relay_frame(&mut self, front: u64, session_id: u64, frame: HeldFrame) {
        self.relays.relayed.push((session_id, front, frame));
    }

    /// A relay front's connection ended.
    pub(super) fn front_closed(&mut self, front: u64, session_id: u64) {
        self.relays.fronts_ended.push((session_id, front));
    }
}
