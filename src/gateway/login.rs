//! The duplicate-login decision. It belongs to the player side, not the
//! gateway (seed: "per-player uniqueness is adjudicated by the player
//! module"); until the player object exists it sits behind [`LoginPolicy`],
//! with a per-node implementation, [`NodeLogins`].

use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::DuplicateLogin;

/// What the policy says about a login that passed token verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoginDecision {
    /// Bind the new session; then kick these sessions (ids name their cores).
    Admit { kick: Vec<u64> },
    /// Answer AUTH_FAILED with this reason; the session stays unbound.
    Reject { reason: &'static str },
}

/// The duplicate-login seam. Called from any core, at login and at the end
/// of a logged-in session, never on the request path.
pub trait LoginPolicy: Send + Sync {
    /// Decides `session_id`'s login as `player_id` and, when admitted,
    /// records it.
    fn admit(&self, player_id: u64, session_id: u64) -> LoginDecision;
    /// Forgets `session_id` as a session of `player_id` (it ended, or its
    /// bind failed after `admit`). A no-op for an unknown pair.
    fn release(&self, player_id: u64, session_id: u64);
}

/// The per-node registry `player_id -> live sessions`, applying the
/// configured [`DuplicateLogin`] policy. Bounded: a session appears at most
/// once and is released when it ends, so it holds at most `sessions_max`
/// entries. The mutex is held for a map lookup only, at login and logout.
pub struct NodeLogins {
    policy: DuplicateLogin,
    players: Mutex<HashMap<u64, Vec<u64>>>,
}

impl NodeLogins {
    pub fn new(policy: DuplicateLogin) -> NodeLogins {
        NodeLogins {
            policy,
            players: Mutex::new(HashMap::new()),
        }
    }

    /// The sessions recorded for `player_id`.
    pub fn sessions_of(&self, player_id: u64) -> Vec<u64> {
        self.lock().get(&player_id).cloned().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<u64>>> {
        // A panic while holding this lock fail-stops the node (shards), so a
        // poisoned map is never observed by a live node; take it anyway.
        self.players
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl LoginPolicy for NodeLogins {
    fn admit(&self, player_id: u64, session_id: u64) -> LoginDecision {
        let mut players = self.lock();
        let sessions = players.entry(player_id).or_default();
        sessions.retain(|&existing| existing != session_id);
        match self.policy {
            DuplicateLogin::Single if !sessions.is_empty() => LoginDecision::Reject {
                reason: "player already logged in",
            },
            DuplicateLogin::KickOld => {
                let kick = std::mem::replace(sessions, vec![session_id]);
                LoginDecision::Admit { kick }
            }
            DuplicateLogin::Single | DuplicateLogin::Multi => {
                sessions.push(session_id);
                LoginDecision::Admit { kick: Vec::new() }
            }
        }
    }

    fn release(&self, player_id: u64, session_id: u64) {
        let mut players = self.lock();
        if let Some(sessions) = players.get_mut(&player_id) {
            sessions.retain(|&existing| existing != session_id);
            if sessions.is_empty() {
                players.remove(&player_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kick_old_replaces_and_returns_the_old_sessions() {
        let logins = NodeLogins::new(DuplicateLogin::KickOld);
        assert_eq!(logins.admit(7, 1), LoginDecision::Admit { kick: vec![] });
        assert_eq!(logins.admit(7, 2), LoginDecision::Admit { kick: vec![1] });
        assert_eq!(logins.sessions_of(7), vec![2]);
        // The kicked session's release does not touch the new one.
        logins.release(7, 1);
        assert_eq!(logins.sessions_of(7), vec![2]);
        logins.release(7, 2);
        assert!(logins.sessions_of(7).is_empty());
        assert!(logins.lock().is_empty());
    }

    #[test]
    fn single_rejects_the_second_until_the_first_ends() {
        let logins = NodeLogins::new(DuplicateLogin::Single);
        assert_eq!(logins.admit(7, 1), LoginDecision::Admit { kick: vec![] });
        assert!(matches!(logins.admit(7, 2), LoginDecision::Reject { .. }));
        assert_eq!(logins.sessions_of(7), vec![1]);
        logins.release(7, 1);
        assert_eq!(logins.admit(7, 2), LoginDecision::Admit { kick: vec![] });
    }

    #[test]
    fn multi_keeps_both() {
        let logins = NodeLogins::new(DuplicateLogin::Multi);
        logins.admit(7, 1);
        assert_eq!(logins.admit(7, 2), LoginDecision::Admit { kick: vec![] });
        assert_eq!(logins.sessions_of(7), vec![1, 2]);
        // Other players are independent.
        assert_eq!(logins.admit(8, 3), LoginDecision::Admit { kick: vec![] });
    }
}
