//! Who keeps a session slot: a session silent for the idle timeout is
//! closed, a login lasts no longer than its token, and at the session cap a
//! connection that never logged in is the first to go.
//!
//! A client holds a slot from its connect, so connections that never log
//! in (silent, or pinging before login) would keep every later client out
//! until their idle timeout, however many real players came. At the cap,
//! the oldest session of the accepting core that has not logged in, nor is
//! logging in, is closed to admit the new connection: a client that logs in
//! soon after it connects is not the oldest for long while such a flood
//! goes on, and a logged-in session is never evicted.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use super::{CloseReason, GatewayCore, TOKEN_EXPIRED_REASON};

/// Sessions that had not logged in when they opened, oldest first. Kept
/// lazily: a session that logged in or closed since leaves when it reaches
/// the front, or when the queue grew to twice the core's sessions.
#[derive(Default)]
pub(super) struct Unauthenticated(VecDeque<u64>);

impl GatewayCore {
    /// Closes every session whose last complete frame is `idle` or more
    /// before `now` (a silent client, or one stuck in a half frame);
    /// returns how many. A walk over the core's sessions, so the driver
    /// runs it on a period (a fraction of `idle`), not per read.
    pub fn close_idle(&mut self, now: Instant, idle: Duration) -> usize {
        let idle_sessions: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, entry)| {
                now.saturating_duration_since(entry.last_frame) >= idle
                    && !entry.resume.as_ref().is_some_and(|resume| resume.detached)
            })
            .map(|(&session_id, _)| session_id)
            .collect();
        for &session_id in &idle_sessions {
            self.close(session_id, CloseReason::Idle);
        }
        idle_sessions.len()
    }

    /// Records the expiry of the token `auth.login` verified for
    /// `session_id`, before its player object decides the login.
    pub fn set_token_expiry(&mut self, session_id: u64, expiry_unix_s: u64) {
        if let Some(entry) = self.sessions.get_mut(&session_id) {
            // An expiry of 0 is as past as one of 1: both kick at once.
            entry.token_expiry_unix_s =
                Some(NonZeroU64::new(expiry_unix_s).unwrap_or(NonZeroU64::MIN));
        }
    }

    /// Kicks (PUSH `sys.kicked` with reason `token expired`, then close)
    /// every logged-in session whose token expired at `now_unix_s`: a
    /// login lasts no longer than its token. Returns how many. A walk over
    /// the core's sessions, run on the idle sweep's period.
    pub fn kick_expired(&mut self, now_unix_s: u64) -> usize {
        let expired: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, entry)| {
                entry.session.is_logged_in()
                    && entry
                        .token_expiry_unix_s
                        .is_some_and(|expiry| now_unix_s >= expiry.get())
            })
            .map(|(&session_id, _)| session_id)
            .collect();
        for &session_id in &expired {
            self.metrics.gateway.token_expired_kicks.inc();
            self.kick(session_id, None, TOKEN_EXPIRED_REASON);
        }
        expired.len()
    }

    /// Queues a session that just opened (not logged in yet).
    pub(super) fn note_unauthenticated(&mut self, session_id: u64) {
        self.unauthenticated.0.push_back(session_id);
        if self.unauthenticated.0.len() > 2 * self.sessions.len() + 64 {
            let mut queue = std::mem::take(&mut self.unauthenticated.0);
            queue.retain(|&id| self.is_unauthenticated(id));
            self.unauthenticated.0 = queue;
        }
    }

    /// Closes this core's oldest session that has not logged in, nor is
    /// logging in, to make room for a new connection at the session cap
    /// (reset, no frame; `routerd_gateway_unauthenticated_evicted_total`).
    /// Whether there was one.
    pub fn evict_unauthenticated(&mut self) -> bool {
        while let Some(session_id) = self.unauthenticated.0.pop_front() {
            if self.is_unauthenticated(session_id) {
                self.metrics.gateway.unauthenticated_evicted.inc();
                return self.close(session_id, CloseReason::Evicted);
            }
        }
        false
    }

    /// The ids queued, stale ones included.
    #[cfg(test)]
    pub(super) fn unauthenticated_queued(&self) -> usize {
        self.unauthenticated.0.len()
    }

    /// Whether `session_id` is open and has no login, finished or under
    /// way: it holds a slot nobody is accountable for. A connection that
    /// resumed a session fronts a logged-in one, and counts as logged in.
    fn is_unauthenticated(&self, session_id: u64) -> bool {
        self.sessions.get(&session_id).is_some_and(|entry| {
            !entry.session.is_logged_in()
                && entry.login().is_none()
                && entry.relay_to() == 0
                && entry.resume.is_none()
        })
    }
}
