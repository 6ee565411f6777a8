//! The simulated players' requests to the real `player` and `room` services:
//! logins (binds) with fresh sessions, logouts, room joins and leaves through
//! the player, and room says; and the calm phase's exact fan-out check.

use rand::RngExt;
use wire::ObjectKey;

use super::answers::ANSWER_DEADLINE_MS;
use super::check::Invariant;
use super::effects::Submission;
use super::room_model::{RoomOp, PLAYERS, ROOMS};
use super::world::{Fate, World};
use crate::builtins::player::{self, player_key};
use crate::builtins::room::{self, room_key};
use crate::router::ClientRef;

/// Who joins which room in the calm phase: overlapping, every room has
/// members, player 1 is in room 1 only.
fn calm_member(player: u64, room: u64) -> bool {
    !(player + room).is_multiple_of(3)
}

impl World {
    /// Every key the simulation uses: counters, players, rooms.
    pub(super) fn tracked_keys(&self) -> impl Iterator<Item = ObjectKey> {
        let counters =
            (0..self.config.keys).map(|id| ObjectKey::new(super::counter::COUNTER_TYPE_ID, 0, id));
        counters
            .chain((1..=PLAYERS).map(player_key))
            .chain((1..=ROOMS).map(room_key))
    }

    /// One random request of a simulated player.
    pub(super) fn room_step(&mut self) {
        let up = self.up_nodes();
        if up.is_empty() {
            return;
        }
        let player = self.rng.random_range(1..=PLAYERS);
        let mut room = self.rng.random_range(1..=ROOMS);
        // A session lives on its gateway: when that node is down, the
        // session is gone and the player logs in again elsewhere.
        let session = self
            .rooms
            .sessions
            .get(&player)
            .copied()
            .filter(|client| up.contains(&client.gateway_node.0));
        let roll = self.rng.random_range(0..100);
        match session {
            Some(client) if roll < 5 => {
                self.rooms.sessions.remove(&player);
                self.notify(Submission {
                    origin: client.gateway_node.0,
                    key: player_key(player),
                    op: player::OP_UNBIND,
                    body: Vec::new(),
                    client: Some(client),
                });
            }
            Some(client) if roll < 30 => self.join_or_leave(client, room, true, false),
            Some(client) if roll < 42 => self.join_or_leave(client, room, false, false),
            Some(client) if roll < 92 => {
                // Mostly in a room the player joined (joining one first), so
                // the say is answered Ok and pushes; sometimes anywhere
                // (BAD_REQUEST when not a member).
                let joined: Vec<u64> = (1..=ROOMS)
                    .filter(|room| self.rooms.joined.contains(&(player, *room)))
                    .collect();
                if joined.is_empty() && self.rng.random_bool(0.7) {
                    return self.join_or_leave(client, room, true, false);
                }
                if !joined.is_empty() && self.rng.random_bool(0.8) {
                    room = joined[self.rng.random_range(0..joined.len())];
                }
                self.say(client, room, false);
            }
            _ => {
                let gateway = up[self.rng.random_range(0..up.len())];
                self.login(player, gateway, false);
            }
        }
    }

    fn login(&mut self, player: u64, gateway: u64, calm: bool) -> ClientRef {
        let client = self.rooms.login(player, gateway);
        let submission = Submission {
            origin: gateway,
            key: player_key(player),
            op: player::OP_BIND,
            body: Vec::new(),
            client: Some(client),
        };
        self.submit_request(submission, 0, calm, Some((RoomOp::Bind, 0)));
        client
    }

    fn join_or_leave(&mut self, client: ClientRef, room: u64, join: bool, calm: bool) {
        let player = client.player_id;
        let (op, room_op) = if join {
            (player::OP_ROOM_JOIN, RoomOp::Join { player, room })
        } else {
            (player::OP_ROOM_LEAVE, RoomOp::Leave { player, room })
        };
        let submission = Submission {
            origin: client.gateway_node.0,
            key: player_key(player),
            op,
            body: room.to_le_bytes().to_vec(),
            client: Some(client),
        };
        self.submit_request(submission, 0, calm, Some((room_op, 0)));
    }

    fn say(&mut self, client: ClientRef, room: u64, calm: bool) -> u64 {
        let (token, body) = self.rooms.say_body(room);
        let submission = Submission {
            origin: client.gateway_node.0,
            key: room_key(room),
            op: room::OP_SAY,
            body,
            client: Some(client),
        };
        self.submit_request(submission, 0, calm, Some((RoomOp::Say { token }, room)));
        token
    }

    /// With faults off: every player logs in, leaves every room, joins its
    /// calm rooms, some log in again elsewhere, and one member per room says
    /// something. Every request must succeed and each say must reach exactly
    /// the members, each on its newest session.
    pub(super) fn calm_rooms(&mut self) -> Result<(), String> {
        let nodes = self.config.nodes;
        // Without faults a request is answered within a few network and
        // store delays (each at most 20 ms); pulls and saves included,
        // 300 ms is ample, and each stage waits for the previous one's
        // answers. The first waits for what the faults left in flight: a
        // login of the fault phase still queued somewhere would otherwise
        // race the calm one, and either may win.
        let step = 300;
        self.until_answered()?;
        for player in 1..=PLAYERS {
            self.login(player, 1 + player % nodes, true);
        }
        self.calm_stage(step)?;
        for player in 1..=PLAYERS {
            let client = self.rooms.sessions[&player];
            for room in 1..=ROOMS {
                self.join_or_leave(client, room, false, true);
            }
        }
        self.calm_stage(step)?;
        for player in 1..=PLAYERS {
            let client = self.rooms.sessions[&player];
            for room in (1..=ROOMS).filter(|room| calm_member(player, *room)) {
                self.join_or_leave(client, room, true, true);
            }
        }
        self.calm_stage(step)?;
        // A login elsewhere moves the player's pushes to the new session.
        for player in (1..=PLAYERS).filter(|p| p % 2 == 0) {
            self.login(player, 1 + (player + 1) % nodes, true);
        }
        self.calm_stage(step)?;
        let mut says = Vec::new();
        for room in 1..=ROOMS {
            let Some(speaker) = (1..=PLAYERS).find(|p| calm_member(*p, room)) else {
                continue;
            };
            let client = self.rooms.sessions[&speaker];
            says.push((room, self.say(client, room, true)));
        }
        self.calm_stage(step)?;
        self.check_calm_acked()?;
        for (room, token) in says {
            let expected: Vec<(u64, ClientRef)> = (1..=PLAYERS)
                .filter(|p| calm_member(*p, room))
                .map(|p| (p, self.rooms.sessions[&p]))
                .collect();
            let pushed: Vec<(u64, ClientRef)> = self
                .rooms
                .pushed(token)
                .map(|pushed| pushed.iter().map(|(p, c)| (*p, *c)).collect())
                .unwrap_or_default();
            let answer = self.rooms.answer(token);
            if pushed != expected || answer != Some(Some(expected.len() as u32)) {
                return Err(Invariant::Calm.fail(format!(
                    "calm say {token} in room {room} answered {answer:?}, pushed to \
                     {pushed:?}, expected {expected:?}"
                )));
            }
        }
        Ok(())
    }

    /// Runs `step_ms`, then on until every request sent was answered: a
    /// client sends its session's next request once the last was answered
    /// (the gateway holds a session's requests until its login ended), so a
    /// join never overtakes the login it follows, whatever held the login.
    fn calm_stage(&mut self, step_ms: u64) -> Result<(), String> {
        self.run_until(self.now_ms + step_ms)?;
        self.until_answered()
    }

    /// Runs until no request is outstanding, for the answer deadline at
    /// most (a request still unanswered then fails `check_answers`).
    fn until_answered(&mut self) -> Result<(), String> {
        let deadline = self.now_ms + ANSWER_DEADLINE_MS;
        self.run_while(deadline, |world| world.answers.outstanding() > 0)
    }

    /// Every calm-phase request got a successful answer.
    pub(super) fn check_calm_acked(&self) -> Result<(), String> {
        match self
            .ops
            .iter()
            .find(|(_, op)| op.calm && op.fate != Fate::Acked)
        {
            Some((id, op)) => Err(Invariant::Calm.fail(format!(
                "calm request {id:?} for {:?} ended {:?}",
                op.key, op.fate
            ))),
            None => Ok(()),
        }
    }
}
