//! The player object: a counter, the current session's client reference, and
//! the rooms it joined (so it can tell them of its presence). Written with
//! the public object API only, like any user type.

use super::{room, PLAYER_TYPE_ID};
use crate::config::DuplicateLogin;
use crate::object::codec::{put_client, Reader, CLIENT_LEN_MAX};
use crate::object::{
    ClientRef, ClientRoute, Context, DecodeError, ErrorCode, KeyFrom, Object, ObjectKey,
    ObjectType, Persist,
};

/// `sys.ping` after login: answers the body.
pub const OP_PING: u32 = 1;
/// `player.get`: answers `i64 counter`.
pub const OP_GET: u32 = 10;
/// `player.incr` (`i64 delta`): answers the new counter.
pub const OP_INCR: u32 = 11;
/// `room.join` (`u64 room_id`): recorded here, relayed to the room, which
/// answers.
pub const OP_ROOM_JOIN: u32 = 20;
/// `room.leave` (`u64 room_id`): relayed to the room, which answers (and
/// tells the player, `OP_ROOM_LEFT`).
pub const OP_ROOM_LEAVE: u32 = 21;
/// `room.say` (`u64 room_id`, text): relayed to the room, which answers,
/// if the player is in it; BAD_REQUEST here if not.
pub const OP_ROOM_SAY: u32 = 22;
/// Internal, from the gateway after `auth.login` verified the token, with
/// the request's client the new session. Answers `u64 player_id`, or
/// AUTH_FAILED under `single`. A kick of the old session is emitted before
/// the answer.
pub const OP_BIND: u32 = 1000;
/// Internal and one-way, from the gateway when a session closes.
pub const OP_UNBIND: u32 = 1001;

/// From a room, forwarding a join it took (`u64 room_id | u32
/// member_count`): the player records the room and answers the count.
pub const OP_ROOM_JOINED: u32 = 1002;

/// One-way, from a room that took a leave (`u64 room_id`): the player
/// drops the room from its list. The room's forward of a join it took
/// (`OP_ROOM_JOINED`) and this notice reach the player in the order the
/// room took the join and the leave, so a join answered after a leave of
/// the same room (pipelined: the room took the join first and answered
/// the leave at once) does not leave the room on the list.
pub const OP_ROOM_LEFT: u32 = 1003;

/// Rooms one player may be in: bounds the state and the presence fan-out.
pub const PLAYER_ROOMS_MAX: usize = 256;

/// The layout `encode` writes: `i64 counter | client | u32 n | n x u64 room`.
const STATE_VERSION: u16 = 1;

pub fn player_key(player_id: u64) -> ObjectKey {
    ObjectKey::new(PLAYER_TYPE_ID, 0, player_id)
}

/// The duplicate-login decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginDecision {
    /// Bind the new session; kick this old one first, if any.
    Bind { kick: Option<ClientRef> },
    /// Refuse the new login; the old session stays.
    Refuse,
}

/// What to do when `new` logs in while `current` is this player's session.
/// A re-bind of the same session (same gateway and session id) is never a
/// duplicate.
pub fn decide_login(
    policy: DuplicateLogin,
    current: Option<ClientRef>,
    new: ClientRef,
) -> LoginDecision {
    let Some(current) = current else {
        return LoginDecision::Bind { kick: None };
    };
    let same_session =
        current.gateway_node == new.gateway_node && current.session_id == new.session_id;
    if same_session {
        return LoginDecision::Bind { kick: None };
    }
    match policy {
        DuplicateLogin::KickOld => LoginDecision::Bind {
            kick: Some(current),
        },
        DuplicateLogin::Single => LoginDecision::Refuse,
        // Both stay bound at the gateway; this object pushes to the newest.
        DuplicateLogin::Multi => LoginDecision::Bind { kick: None },
    }
}

pub struct PlayerType {
    pub persist: Persist,
    pub duplicate_login: DuplicateLogin,
    /// `services.room.created_per_session_max`.
    pub created_per_session_max: u32,
}

impl ObjectType for PlayerType {
    type Object = Player;

    fn type_id(&self) -> u32 {
        PLAYER_TYPE_ID
    }

    fn name(&self) -> &'static str {
        "player"
    }

    /// The player's own routes, keyed by the session's player. `sys.ping`
    /// is open before login (the auth service echoes it there).
    fn routes(&self) -> Vec<ClientRoute> {
        let own = |id, name| ClientRoute::request(id, name, KeyFrom::Session);
        vec![
            own(OP_PING, "sys.ping").without_auth(),
            own(OP_GET, "player.get"),
            own(OP_INCR, "player.incr"),
            own(OP_ROOM_JOIN, "room.join"),
            own(OP_ROOM_LEAVE, "room.leave"),
            own(OP_ROOM_SAY, "room.say"),
        ]
    }

    fn persist(&self) -> Persist {
        self.persist
    }

    /// The counter, the session, and at most `PLAYER_ROOMS_MAX` rooms.
    fn state_len_max(&self) -> Option<usize> {
        Some(8 + CLIENT_LEN_MAX + 4 + PLAYER_ROOMS_MAX * 8)
    }

    fn state_version(&self) -> u16 {
        STATE_VERSION
    }

    fn create(&self, key: ObjectKey) -> Player {
        Player {
            player_id: key.object_id,
            duplicate_login: self.duplicate_login,
            created_per_session_max: self.created_per_session_max,
            ..Player::default()
        }
    }

    fn decode(&self, key: ObjectKey, version: u16, state: &[u8]) -> Result<Player, DecodeError> {
        if version != STATE_VERSION {
            return Err(DecodeError);
        }
        let mut player = Player::decode(state).ok_or(DecodeError)?;
        player.player_id = key.object_id;
        player.duplicate_login = self.duplicate_login;
        player.created_per_session_max = self.created_per_session_max;
        Ok(player)
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Player {
    player_id: u64,
    duplicate_login: DuplicateLogin,
    pub counter: i64,
    pub client: Option<ClientRef>,
    pub rooms: Vec<u64>,
    created_per_session_max: u32,
    /// Joins relayed as `room::OP_JOIN_CREATING` since the current session
    /// logged in. Not persisted: a bound on one session, not on the player.
    creating_joins: u32,
}

impl Player {
    /// The saved layout's fields (without the version), for the state
    /// viewer.
    pub(super) fn decode_saved(bytes: &[u8]) -> Option<Player> {
        Player::decode(bytes)
    }

    fn decode(bytes: &[u8]) -> Option<Player> {
        let mut reader = Reader::new(bytes);
        let counter = reader.i64()?;
        let client = reader.client()?;
        let count = reader.u32()? as usize;
        if count > PLAYER_ROOMS_MAX {
            return None;
        }
        let rooms = (0..count)
            .map(|_| reader.u64())
            .collect::<Option<Vec<u64>>>()?;
        reader.is_empty().then_some(Player {
            counter,
            client,
            rooms,
            ..Player::default()
        })
    }

    /// The session of the request if another session is bound to this
    /// player now: its login was superseded, and the kick that should have
    /// closed it was lost (its node was cut off or frozen when the kick was
    /// sent). Under `multi` every session that logged in stays served, and
    /// with no session bound (all closed) there is nobody to protect.
    fn superseded(&self, ctx: &Context<'_>) -> Option<ClientRef> {
        let client = ctx.client()?;
        let bound = self.client?;
        if self.duplicate_login == DuplicateLogin::Multi {
            return None;
        }
        let same =
            bound.gateway_node == client.gateway_node && bound.session_id == client.session_id;
        (!same).then_some(client)
    }

    /// The body as one `u64`, or BAD_REQUEST saying what it was.
    fn body_u64(ctx: &mut Context<'_>) -> Option<u64> {
        match ctx.body().try_into() {
            Ok(bytes) => Some(u64::from_le_bytes(bytes)),
            Err(_) => {
                let reason = body_len_reason(8, ctx.body().len());
                ctx.bad_request_because(&reason);
                None
            }
        }
    }

    fn incr(&mut self, ctx: &mut Context<'_>) {
        let Some(delta) = Self::body_u64(ctx).map(|d| d as i64) else {
            return;
        };
        // Overflow is BAD_REQUEST with the state unchanged.
        let Some(counter) = self.counter.checked_add(delta) else {
            return ctx.bad_request_because("counter would overflow");
        };
        self.counter = counter;
        ctx.mark_changed();
        ctx.answer(Ok(counter.to_le_bytes().to_vec()));
    }

    fn bind(&mut self, ctx: &mut Context<'_>) {
        let Some(new) = ctx.client() else {
            return ctx.bad_request_because("a login needs a session");
        };
        match decide_login(self.duplicate_login, self.client, new) {
            LoginDecision::Refuse => {
                // The session that keeps this login out may be gone without
                // an unbind ever coming (its node died or restarted, the
                // unbind was lost): its gateway says, and the refused
                // client's next try finds the player free if it was.
                if let Some(current) = self.client {
                    ctx.check_session(current);
                }
                ctx.fail(ErrorCode::AuthFailed)
            }
            LoginDecision::Bind { kick } => {
                if let Some(old) = kick {
                    ctx.kick(old);
                }
                let same_session = self.client.is_some_and(|current| {
                    current.gateway_node == new.gateway_node && current.session_id == new.session_id
                });
                if !same_session {
                    self.creating_joins = 0;
                }
                self.client = Some(new);
                ctx.mark_changed();
                self.presence(ctx);
                ctx.answer(Ok(self.player_id.to_le_bytes().to_vec()));
            }
        }
    }

    fn unbind(&mut self, ctx: &mut Context<'_>) {
        // Only the current session's close clears it: a kicked session's
        // late close must not unbind its successor.
        if ctx.client().is_some() && ctx.client() == self.client {
            self.client = None;
            ctx.mark_changed();
            self.presence(ctx);
        }
    }

    /// Takes the request's session as this player's when none is bound: it
    /// is logged in as this player at its gateway, whatever unbound it
    /// here (its node was declared down and came back, a close reached the
    /// player before a request the session sent earlier). The rooms hear of
    /// it, so pushes reach the player again. A session taken back after it
    /// closed is released at the first push its gateway cannot deliver.
    fn adopt(&mut self, ctx: &mut Context<'_>) {
        if self.client.is_some() {
            return;
        }
        let Some(client) = ctx.client().filter(|c| c.player_id == self.player_id) else {
            return;
        };
        self.client = Some(client);
        ctx.mark_changed();
        self.presence(ctx);
    }

    /// One-way presence notices to every room this player joined.
    fn presence(&self, ctx: &mut Context<'_>) {
        for room_id in &self.rooms {
            let body = room::presence_body(self.player_id, self.client);
            ctx.send(room::room_key(*room_id), room::OP_PRESENCE, body);
        }
    }

    /// `room.join`: relayed to the room, which forwards it back here once
    /// joined (`joined_room`). A room the player is not in is joined with
    /// the right to create it only while the session has made fewer than
    /// `created_per_session_max` such joins.
    fn join_room(&mut self, ctx: &mut Context<'_>) {
        let Some(room_id) = Self::body_u64(ctx) else {
            return;
        };
        let mut op = room::OP_JOIN;
        if !self.rooms.contains(&room_id) {
            if self.rooms.len() >= PLAYER_ROOMS_MAX {
                return ctx.bad_request_because(&rooms_full_reason());
            }
            if self.creating_joins < self.created_per_session_max {
                self.creating_joins += 1;
                op = room::OP_JOIN_CREATING;
            }
        }
        let body = ctx.body().to_vec();
        ctx.forward(room::room_key(room_id), op, body);
    }

    /// A join the room took: the room goes on the list (what `room.say`
    /// and presence go by) and the client gets the member count.
    fn joined_room(&mut self, ctx: &mut Context<'_>) {
        let mut reader = Reader::new(ctx.body());
        let (Some(room_id), Some(member_count)) = (reader.u64(), reader.u32()) else {
            return ctx.bad_request_because("a room's join notice must be 12 bytes");
        };
        // Joins of rooms not listed yet may be in flight together; the
        // bound holds over the list, and one past it is refused though the
        // room took it (the player leaves it by `room.leave`).
        if !self.rooms.contains(&room_id) {
            if self.rooms.len() >= PLAYER_ROOMS_MAX {
                return ctx.bad_request_because(&rooms_full_reason());
            }
            self.rooms.push(room_id);
            ctx.mark_changed();
        }
        ctx.answer(Ok(member_count.to_le_bytes().to_vec()));
    }

    /// `room.leave`: relayed to the room whether or not this player's list
    /// has it, so a membership the list lost (a state saved before the
    /// join) can still be ended. The room does not create itself for it.
    /// The room leaves the list now (nothing is said in it from here on)
    /// and again when the room took the leave (`left_room`): a join relayed
    /// before may be taken by the room, and come back, in between.
    fn leave_room(&mut self, ctx: &mut Context<'_>) {
        let Some(room_id) = Self::body_u64(ctx) else {
            return;
        };
        self.forget_room(ctx, room_id);
        let body = ctx.body().to_vec();
        ctx.forward(room::room_key(room_id), room::OP_LEAVE, body);
    }

    /// A leave the room took (one-way): the room is off the list.
    fn left_room(&mut self, ctx: &mut Context<'_>) {
        if let Some(room_id) = Self::body_u64(ctx) {
            self.forget_room(ctx, room_id);
        }
    }

    fn forget_room(&mut self, ctx: &mut Context<'_>, room_id: u64) {
        if self.rooms.contains(&room_id) {
            self.rooms.retain(|id| *id != room_id);
            ctx.mark_changed();
        }
    }

    /// `room.say`: relayed to a room the player is in (which checks the
    /// text); in any other the player is not a member: BAD_REQUEST here.
    fn say_in_room(&mut self, ctx: &mut Context<'_>) {
        let room_id = match ctx.body().first_chunk::<8>() {
            Some(id) => u64::from_le_bytes(*id),
            None => {
                let reason = format!(
                    "body must be a u64 room id then the text, got {} bytes",
                    ctx.body().len()
                );
                return ctx.bad_request_because(&reason);
            }
        };
        if !self.rooms.contains(&room_id) {
            return ctx.bad_request_because(&format!("not a member of room {room_id}"));
        }
        let body = ctx.body().to_vec();
        ctx.forward(room::room_key(room_id), room::OP_SAY, body);
    }
}

/// The refusal of a body of `got` bytes where `want` fit.
fn body_len_reason(want: usize, got: usize) -> String {
    format!("body must be {want} bytes, got {got}")
}

fn rooms_full_reason() -> String {
    format!("a player may be in {PLAYER_ROOMS_MAX} rooms at most")
}

impl Object for Player {
    fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(8 + 33 + 4 + self.rooms.len() * 8);
        out.extend_from_slice(&self.counter.to_le_bytes());
        put_client(out, self.client);
        out.extend_from_slice(&(self.rooms.len() as u32).to_le_bytes());
        for room_id in &self.rooms {
            out.extend_from_slice(&room_id.to_le_bytes());
        }
    }

    fn handle(&mut self, ctx: &mut Context<'_>) {
        if !matches!(ctx.op(), OP_BIND | OP_UNBIND) {
            if let Some(stale) = self.superseded(ctx) {
                // Kicked again, and not served: nothing a superseded
                // session asks reaches the player (docs/protocol.md). The
                // request is still answered, so its origin never waits for
                // an answer that cannot come; the gateway drops the answer
                // once the kick has closed the session.
                ctx.kick(stale);
                return ctx.fail_because(
                    ErrorCode::Unavailable,
                    "this session was replaced by a newer login of the player",
                );
            }
            self.adopt(ctx);
        }
        match ctx.op() {
            OP_PING => {
                let body = ctx.body().to_vec();
                ctx.answer(Ok(body))
            }
            OP_GET => ctx.answer(Ok(self.counter.to_le_bytes().to_vec())),
            OP_INCR => self.incr(ctx),
            OP_ROOM_JOIN => self.join_room(ctx),
            OP_ROOM_LEAVE => self.leave_room(ctx),
            OP_ROOM_SAY => self.say_in_room(ctx),
            OP_ROOM_JOINED => self.joined_room(ctx),
            OP_ROOM_LEFT => self.left_room(ctx),
            OP_BIND => self.bind(ctx),
            OP_UNBIND => self.unbind(ctx),
            op => ctx.bad_request_because(&format!("the player has no op {op}")),
        }
    }
}

#[cfg(test)]
#[path = "player_tests.rs"]
mod tests;
