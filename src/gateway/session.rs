//! The session binding (as the gateway design calls it, docs/origins.md):
//! the single source of truth for where a connection's requests go,
//! guarded by an epoch compare-and-set.

use crate::config::BodyCodec;

/// The unconditional-replacement sentinel of `apply_binding`, used only for
/// invalidation (the close and kick paths). A normal bind always passes the
/// epoch it expects.
pub const K_ANY_EPOCH: u32 = u32::MAX;

/// Where a session's client requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Invalidated: the session is closing; nothing is delivered or notified.
    None,
    /// The accepting core's auth service (before login).
    Auth,
    /// The services side (after login): every route of the node's table,
    /// for the player of `Session::player_id`.
    Services,
}

/// A snapshot of a session's binding, as `apply_binding` returns it and as
/// an ingress or a notification carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub target: Target,
    /// 0 means "no player" (docs/protocol.md: player ids are never 0).
    pub player_id: u64,
    pub session_epoch: u32,
}

/// A bind whose expected epoch is not the current one: another bind won.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("epoch expired: expected {expected}, current {current}")]
pub struct EpochExpired {
    pub expected: u32,
    pub current: u32,
}

/// One connection's binding.
///
/// No mutex: a session is created, bound, read and closed only by the core
/// that accepted its connection (requests to bind it from elsewhere arrive
/// as messages on that core), so every `apply_binding` runs to completion
/// before the next one starts, and `&mut self` is the whole lock. The
/// compare-and-set still decides a single winner among binds that were
/// computed against the same epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub target: Target,
    pub player_id: u64,
    pub session_epoch: u32,
    /// The body codec of the listener that accepted the connection: how
    /// the bodies of its `json` routes are decoded on the way in and the
    /// answers encoded on the way out (`super::body_codec`).
    pub protocol_profile: BodyCodec,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A new connection: epoch 0, bound to the auth service, no player.
    pub fn new() -> Session {
        Session {
            target: Target::Auth,
            player_id: 0,
            session_epoch: 0,
            protocol_profile: BodyCodec::None,
        }
    }

    pub fn binding(&self) -> Binding {
        Binding {
            target: self.target,
            player_id: self.player_id,
            session_epoch: self.session_epoch,
        }
    }

    /// Whether a target still holds this session (so closing it must notify
    /// that target).
    pub fn is_live(&self) -> bool {
        self.target != Target::None
    }

    pub fn is_logged_in(&self) -> bool {
        self.player_id != 0
    }

    /// The bind compare-and-set (`apply_binding` in docs/origins.md):
    /// succeeds only when `expected_epoch` is the current epoch or
    /// [`K_ANY_EPOCH`]; then writes target and player, increments the epoch
    /// and returns the new binding.
    ///
    /// The epoch never takes the value `K_ANY_EPOCH` (so a reference can
    /// never match the sentinel by accident); a session that has used every
    /// other value refuses further binds instead of wrapping.
    pub fn apply_binding(
        &mut self,
        target: Target,
        player_id: u64,
        expected_epoch: u32,
    ) -> Result<Binding, EpochExpired> {
        let expired = EpochExpired {
            expected: expected_epoch,
            current: self.session_epoch,
        };
        if expected_epoch != self.session_epoch && expected_epoch != K_ANY_EPOCH {
            return Err(expired);
        }
        let next = match self.session_epoch.checked_add(1) {
            Some(next) if next != K_ANY_EPOCH => next,
            _ => return Err(expired),
        };
        self.target = target;
        self.player_id = player_id;
        self.session_epoch = next;
        Ok(self.binding())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_session_is_auth_at_epoch_zero() {
        let session = Session::new();
        assert_eq!(
            session.binding(),
            Binding {
                target: Target::Auth,
                player_id: 0,
                session_epoch: 0
            }
        );
        assert!(session.is_live());
        assert!(!session.is_logged_in());
    }

    #[test]
    fn winner_and_loser() {
        let mut session = Session::new();
        // Two binds computed against epoch 0: the first wins.
        let won = session.apply_binding(Target::Services, 7, 0).unwrap();
        assert_eq!(
            won,
            Binding {
                target: Target::Services,
                player_id: 7,
                session_epoch: 1
            }
        );
        let lost = session.apply_binding(Target::Services, 8, 0).unwrap_err();
        assert_eq!(
            lost,
            EpochExpired {
                expected: 0,
                current: 1
            }
        );
        // The loser changed nothing.
        assert_eq!(session.player_id, 7);
        assert_eq!(session.session_epoch, 1);
        // Refreshing the reference and retrying succeeds.
        assert_eq!(
            session
                .apply_binding(Target::Services, 8, 1)
                .unwrap()
                .session_epoch,
            2
        );
    }

    #[test]
    fn future_epoch_is_rejected_too() {
        let mut session = Session::new();
        assert!(session.apply_binding(Target::Services, 7, 5).is_err());
        assert_eq!(session.session_epoch, 0);
    }

    #[test]
    fn any_epoch_always_replaces() {
        let mut session = Session::new();
        session.apply_binding(Target::Services, 7, 0).unwrap();
        let invalidated = session.apply_binding(Target::None, 0, K_ANY_EPOCH).unwrap();
        assert_eq!(
            invalidated,
            Binding {
                target: Target::None,
                player_id: 0,
                session_epoch: 2
            }
        );
        assert!(!session.is_live());
        // Every reference taken before invalidation is now stale.
        assert!(session.apply_binding(Target::Services, 7, 1).is_err());
    }

    #[test]
    fn epoch_is_monotonic_and_never_the_sentinel() {
        let mut session = Session::new();
        let mut last = session.session_epoch;
        for i in 0..100u32 {
            let expected = if i % 3 == 0 { K_ANY_EPOCH } else { last };
            let binding = session
                .apply_binding(Target::Services, 1, expected)
                .unwrap();
            assert_eq!(binding.session_epoch, last + 1);
            last = binding.session_epoch;
        }
        session.session_epoch = K_ANY_EPOCH - 1;
        assert!(session
            .apply_binding(Target::Services, 1, K_ANY_EPOCH - 1)
            .is_err());
        assert!(session
            .apply_binding(Target::Services, 1, K_ANY_EPOCH)
            .is_err());
        assert_eq!(session.session_epoch, K_ANY_EPOCH - 1);
    }
}
