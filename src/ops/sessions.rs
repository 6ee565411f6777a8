//! Reaching sessions from the admin endpoint: closing one (`POST
//! /sessions/{id}/kick?player=N`: the core that holds it pushes
//! `sys.kicked` and closes it, as a duplicate login's kick does), and a
//! one-way message from the node to an object (the room's system message
//! of `POST /rooms/{id}/message`), a PUSH to one session (`POST
//! /sessions/{id}/push?player=N`), and a player's sessions on every member
//! (`GET /sessions?player=N&scope=cluster`, in `find.rs`).

use futures_channel::oneshot;

use super::listing::{ListRefused, CORE_ANSWER_WAIT};
use super::{Command, Ops, Unreached};
use crate::gateway::{session_core, GatewayHandle, SessionPush};
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
        self.ask_session_core(session_id, false, |reply| Command::Kick {
            session_id,
            player_id,
            reply,
        })
        .await
    }

    /// PUSHes `body` on `route_id` to this node's session `session_id`
    /// while it is bound to `player_id`.
    pub async fn push_to_session(
        &self,
        session_id: u64,
        player_id: u64,
        route_id: u32,
        body: Vec<u8>,
    ) -> Result<SessionPush, ListRefused> {
        let push = |reply| Command::Push {
            session_id,
            player_id,
            route_id,
            body,
            reply,
        };
        self.ask_session_core(session_id, SessionPush::NoSession, push)
            .await
    }

    /// Sends the command `make` builds to the core that holds `session_id`
    /// and waits for its answer; `absent` when no core of this node can
    /// hold it.
    async fn ask_session_core<T>(
        &self,
        session_id: u64,
        absent: T,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ListRefused> {
        match self.0.cores.get(session_core(session_id)) {
            Some(_) => self.ask_core(session_core(session_id), make).await,
            None => Ok(absent),
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
        self.ask_core(0, |reply| Command::OneWay {
            key,
            op,
            body,
            reply,
        })
        .await
    }

    /// Sends the command `make` builds to core `core` (which exists) and
    /// waits up to `CORE_ANSWER_WAIT` for its answer.
    async fn ask_core<T>(
        &self,
        core: usize,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ListRefused> {
        let (reply, answer) = oneshot::channel();
        let sent = self.0.cores[core]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .try_send(make(reply));
        match sent {
            Ok(()) => {}
            Err(error) if error.is_full() => return Err(Unreached::Busy.into()),
            Err(_) => return Err(Unreached::Stopped.into()),
        }
        match tokio::time::timeout(CORE_ANSWER_WAIT, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Err(_) => Err(ListRefused::Busy),
            Ok(Err(_)) => Err(ListRefused::Stopped),
        }
    }
}
