//! What the simulated clients know about players, sessions and rooms, and the
//! push invariants checked against it.
//!
//! Ordering is by a logical tick: one per request sent, per answer produced
//! (the `Effect::Reply`, whether or not the network then delivers it) and per
//! push. An answer is produced after the request's effect, if any: the
//! router runs a handler before answering, an `on_write` answer waits for
//! its save, and a write answered Indeterminate that lands later only lands
//! if its CAS still holds, so before any later committed write of the key.
//!
//! What is certain under faults, and so checked:
//! - a push goes to a session some login of that very player bound (never
//!   another player's, never an invented one), on the room message route;
//! - a push belongs to a `say` that was sent, to that say's room, and goes to
//!   each player at most once per say;
//! - a say answered `Ok(n)` emitted exactly n pushes; a say answered anything
//!   else emitted none;
//! - a push goes to a player who sent a join of that room before it, and,
//!   when acknowledged leaves are durable (rooms `on_write`, or no faults),
//!   not to a player whose leave was acknowledged before the say was sent
//!   unless one of its joins may have taken effect after that leave (a join
//!   not answered before the leave was sent: a leave takes effect anywhere
//!   between its sending and its answer).
//!
//! Not certain, so not checked during the faults: that a member gets a push
//! (presence notices are one-way and may be lost; `interval` state may be
//! lost in a crash). The calm phase checks the exact fan-out instead.

use std::collections::{BTreeMap, BTreeSet};

use crate::builtins::room::ROUTE_ROOM_MESSAGE;
use crate::ids::NodeId;
use crate::router::{ClientRef, Outcome, RequestId};

/// Players 1..=PLAYERS and rooms 1..=ROOMS: few, so they collide often.
pub(super) const PLAYERS: u64 = 4;
pub(super) const ROOMS: u64 = 2;

/// A services request the model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RoomOp {
    Bind,
    Join { player: u64, room: u64 },
    Leave { player: u64, room: u64 },
    Say { token: u64 },
}

/// One player's history in one room.
#[derive(Default)]
struct Pair {
    /// Every join sent: (tick sent, tick its answer was produced).
    joins: BTreeMap<RequestId, (u64, Option<u64>)>,
    /// The tick each leave not yet answered was sent at.
    leaves_sent: BTreeMap<RequestId, u64>,
    /// (tick sent, tick answered) of every leave answered Ok.
    leaves_acked: Vec<(u64, u64)>,
}

struct Say {
    room: u64,
    sent: u64,
    /// `None` until answered; then the push count an Ok answer gave, or
    /// `None` for an error.
    answer: Option<Option<u32>>,
    /// Player -> the session pushed to.
    pushed: BTreeMap<u64, ClientRef>,
}

#[derive(Default)]
pub(super) struct RoomModel {
    tick: u64,
    /// The current session of each logged-in simulated player.
    pub sessions: BTreeMap<u64, ClientRef>,
    /// (player, room) whose last join or leave sent was a join: where the
    /// player's says most likely succeed.
    pub joined: BTreeSet<(u64, u64)>,
    epochs: BTreeMap<u64, u32>,
    next_session: u64,
    /// Every session a bind was sent for.
    bound: BTreeSet<ClientRef>,
    ops: BTreeMap<RequestId, RoomOp>,
    pairs: BTreeMap<(u64, u64), Pair>,
    says: BTreeMap<u64, Say>,
    next_token: u64,
    /// Says pushed to or answered since the last `settle`.
    touched: BTreeSet<u64>,
    /// Whether an acknowledged leave survives every fault (see module docs).
    pub leaves_durable: bool,
    pub stats: RoomStats,
    error: Option<String>,
}

/// How much the push invariants were exercised.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoomStats {
    pub says_ok: u64,
    pub pushes: u64,
    /// Ok says for which some player with a join had certainly left: a push
    /// to that player would have failed the run.
    pub certain_non_members: u64,
}

impl RoomModel {
    fn fail(&mut self, error: String) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// A new login of `player` through `gateway`: its session id is new,
    /// its epoch one more than the player's last.
    pub fn login(&mut self, player: u64, gateway: u64) -> ClientRef {
        self.next_session += 1;
        let epoch = self.epochs.entry(player).or_default();
        *epoch += 1;
        let client = ClientRef {
            gateway_node: NodeId(gateway),
            session_id: self.next_session,
            session_epoch: *epoch,
            player_id: player,
        };
        self.bound.insert(client);
        self.sessions.insert(player, client);
        client
    }

    /// A say's body: the room id, then a text naming a fresh token.
    pub fn say_body(&mut self, room: u64) -> (u64, Vec<u8>) {
        self.next_token += 1;
        let mut body = room.to_le_bytes().to_vec();
        body.extend_from_slice(format!("say {}", self.next_token).as_bytes());
        (self.next_token, body)
    }

    pub fn sent(&mut self, id: RequestId, op: RoomOp, say_room: u64) {
        self.tick += 1;
        let tick = self.tick;
        self.ops.insert(id, op);
        match op {
            RoomOp::Leave { player, room } => {
                self.joined.remove(&(player, room));
                let pair = self.pairs.entry((player, room)).or_default();
                pair.leaves_sent.insert(id, tick);
            }
            RoomOp::Join { player, room } => {
                self.joined.insert((player, room));
                let pair = self.pairs.entry((player, room)).or_default();
                pair.joins.insert(id, (tick, None));
            }
            RoomOp::Say { token } => {
                let say = Say {
                    room: say_room,
                    sent: tick,
                    answer: None,
                    pushed: BTreeMap::new(),
                };
                self.says.insert(token, say);
            }
            RoomOp::Bind => {}
        }
    }

    /// An answer was produced (the router checks it is the only one).
    pub fn replied(&mut self, id: RequestId, outcome: &Outcome) {
        self.tick += 1;
        let tick = self.tick;
        match self.ops.get(&id).copied() {
            Some(RoomOp::Join { player, room }) => {
                if let Some(join) = self
                    .pairs
                    .get_mut(&(player, room))
                    .and_then(|pair| pair.joins.get_mut(&id))
                {
                    join.1 = Some(tick);
                }
            }
            Some(RoomOp::Leave { player, room }) => {
                let pair = self.pairs.entry((player, room)).or_default();
                if let Some(sent) = pair.leaves_sent.remove(&id) {
                    if outcome.is_ok() {
                        pair.leaves_acked.push((sent, tick));
                    }
                }
            }
            Some(RoomOp::Say { token }) => {
                let count = match outcome {
                    Ok(body) => match <[u8; 4]>::try_from(body.as_slice()) {
                        Ok(bytes) => Some(u32::from_le_bytes(bytes)),
                        Err(_) => return self.fail(format!("say {token}: answer {body:?}")),
                    },
                    Err(_) => None,
                };
                if let Some(say) = self.says.get_mut(&token) {
                    say.answer = Some(count);
                    if count.is_some() {
                        let (room, sent) = (say.room, say.sent);
                        self.stats.says_ok += 1;
                        self.stats.certain_non_members += (1..=PLAYERS)
                            .filter(|p| {
                                self.pairs.contains_key(&(*p, room))
                                    && !self.may_be_member(*p, room, sent)
                            })
                            .count()
                            as u64;
                    }
                }
                self.touched.insert(token);
            }
            _ => {}
        }
    }

    pub fn kick(&mut self, client: ClientRef) {
        if !self.bound.contains(&client) {
            self.fail(format!("kick of a session never bound: {client:?}"));
        }
    }

    pub fn push(&mut self, client: ClientRef, route_id: u32, body: &[u8]) {
        self.tick += 1;
        self.stats.pushes += 1;
        if let Err(error) = self.check_push(client, route_id, body) {
            self.fail(format!("push to {client:?}: {error}"));
        }
    }

    fn check_push(&mut self, client: ClientRef, route_id: u32, body: &[u8]) -> Result<(), String> {
        if route_id != ROUTE_ROOM_MESSAGE {
            return Err(format!("route {route_id}"));
        }
        if !self.bound.contains(&client) {
            return Err("a session no login of that player bound".into());
        }
        let (Some(room), Some(token)) = (
            body.get(..8)
                .and_then(|b| Some(u64::from_le_bytes(b.try_into().ok()?))),
            body.get(16..)
                .and_then(|text| std::str::from_utf8(text).ok())
                .and_then(|text| text.strip_prefix("say "))
                .and_then(|token| token.parse::<u64>().ok()),
        ) else {
            return Err(format!("body {body:?}"));
        };
        let Some(say) = self.says.get_mut(&token) else {
            return Err(format!("say {token} was never sent"));
        };
        if say.room != room {
            return Err(format!("say {token} to room {} pushed as {room}", say.room));
        }
        let player = client.player_id;
        if let Some(first) = say.pushed.insert(player, client) {
            return Err(format!(
                "say {token}: second push to player {player} ({first:?})"
            ));
        }
        self.touched.insert(token);
        let sent = say.sent;
        if !self.may_be_member(player, room, sent) {
            return Err(format!(
                "say {token}: player {player} is certainly not a member of room {room}"
            ));
        }
        Ok(())
    }

    /// Whether `player` may be a member of `room` when a say sent at tick
    /// `say_sent` runs (now).
    fn may_be_member(&self, player: u64, room: u64, say_sent: u64) -> bool {
        let Some(pair) = self.pairs.get(&(player, room)) else {
            return false;
        };
        if pair.joins.is_empty() {
            return false;
        }
        if !self.leaves_durable {
            return true;
        }
        // Certainly out after a leave acknowledged before the say was sent
        // if every join was answered before that leave was even sent. A
        // join answered later is concurrent with the leave (or after it):
        // the leave may have run first, however late its own answer came.
        !pair
            .leaves_acked
            .iter()
            .any(|&(leave_sent, leave_answered)| {
                leave_answered < say_sent
                    && pair
                        .joins
                        .values()
                        .all(|(_, answered)| answered.is_some_and(|t| t < leave_sent))
            })
    }

    /// After one core's effects: every say answered or pushed to since the
    /// last call has exactly as many pushes as its Ok answer counts.
    pub fn settle(&mut self) {
        for token in std::mem::take(&mut self.touched) {
            let Some(say) = self.says.get(&token) else {
                continue;
            };
            let pushed = say.pushed.len();
            let error = match say.answer {
                Some(Some(n)) if n as usize != pushed => {
                    format!("say {token} answered Ok({n}) but pushed {pushed}")
                }
                Some(None) | None if pushed > 0 => {
                    format!("say {token} pushed {pushed} without an Ok answer")
                }
                _ => continue,
            };
            self.fail(error);
        }
    }

    /// The sessions a say pushed to, by player.
    pub fn pushed(&self, token: u64) -> Option<&BTreeMap<u64, ClientRef>> {
        self.says.get(&token).map(|say| &say.pushed)
    }

    pub fn answer(&self, token: u64) -> Option<Option<u32>> {
        self.says.get(&token).and_then(|say| say.answer)
    }
}
