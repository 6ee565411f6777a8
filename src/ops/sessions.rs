//! Reaching sessions from the admin endpoint: closing one (`POST
//! /sessions/{id}/kick?player=N`: the core that holds it pushes
//! `sys.kicked` and closes it, as a duplicate login's kick does), and a
//! one-way message from the node to an object (the room's system message
//! of `POST /rooms/{id}/message`).

use futures_channel::oneshot;

use super::listing::{ListRefused, CORE_ANSWER_WAIT};
use super::{Command, Ops, Unreached};
use crate::gateway::{session_core, GatewayHandle};
use wire::ObjectKey;

/// The reason the kicked client reads in `sys.kicked`.
pub const OPERATOR_KICK_REASON: &str = "closed by an operator";

/// On the core that holds `session_id`: kicks it if it is there and bound
/// to `player_id` (a session id is never reused, the player check makes a
/// stale listing harmless). Whether it kicked.
pub(super) fn core_kick(gateway: &GatewayHandle, session_id: u64, player_id: u64) -> bool {
    let held = gateway
        .sessions_page(Some(player_id), session_id.checked_sub(1), 1)
        .first()
        .is_some_and(|row| row.session_id == session_id);
    if held {
        gateway.kick(session_id, player_id, OPERATOR_KICK_REASON);
    }
    held
}

impl Ops {
    /// Kicks this node's session `session_id` of `player_id`; `Ok(false)`
    /// when no such session is here (closed already, another player's, or
    /// another node's).
    pub async fn kick_session(&self, session_id: u64, player_id: u64) -> Result<bool, ListRefused> {
        let core = session_core(session_id);
        let Some(sender) = self.0.cores.get(core) else {
            return Ok(false);
        };
        let (reply, answer) = oneshot::channel();
        let sent = sender
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .try_send(Command::Kick {
                session_id,
                player_id,
                reply,
            });
        match sent {
            Ok(()) => {}
            Err(error) if error.is_full() => return Err(Unreached::Busy.into()),
            Err(_) => return Err(Unreached::Stopped.into()),
        }
        match tokio::time::timeout(CORE_ANSWER_WAIT, answer).await {
            Ok(Ok(kicked)) => Ok(kicked),
            Err(_) => Err(ListRefused::Busy),
            Ok(Err(_)) => Err(ListRefused::Stopped),
        }
    }

    /// Sends `body` as the one-way op `op` from this node to the object
    /// `key`, wherever it lives; returns once it is on its way (nobody
    /// answers a one-way message).
    pub async fn send_one_way(
        &self,
        key: ObjectKey,
        op: u32,
        body: Vec<u8>,
    ) -> Result<(), ListRefused> {
        let (reply, answer) = oneshot::channel();
        let sent = self.0.cores[0]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .try_send(Command::OneWay {
                key,
                op,
                body,
                reply,
            });
        match sent {
            Ok(()) => {}
            Err(error) if error.is_full() => return Err(Unreached::Busy.into()),
            Err(_) => return Err(Unreached::Stopped.into()),
        }
        match tokio::time::timeout(CORE_ANSWER_WAIT, answer).await {
            Ok(Ok(())) => Ok(()),
            Err(_) => Err(ListRefused::Busy),
            Ok(Err(_)) => Err(ListRefused::Stopped),
        }
    }
}
