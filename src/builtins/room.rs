//! The room object: persistent membership bounded by `members_max`, and each
//! member's current session while logged in (told by the player object, see
//! the module docs of `services`). Written with the public object API only.
//!
//! Who may create a room: only a join the player object relays as
//! [`OP_JOIN_CREATING`] (it does so within its session's
//! `created_per_session_max`), and only while the node holds fewer than
//! `rooms_per_node_max` rooms ([`RoomType::may_create`]). Every other
//! request for a room that does not exist is answered without creating it,
//! so the router's `entries_per_core_max` is left to rooms someone joined.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{player, ROOM_TYPE_ID};
use crate::object::codec::{put_client, Reader, CLIENT_LEN_MAX};
use crate::object::{
    ClientRef, ClientRoute, Context, DecodeError, ErrorCode, Object, ObjectKey, ObjectType,
    Outcome, Persist, Refusal,
};

/// Relayed `room.join` (body `u64 room_id`, client the joining session):
/// forwards `player::OP_ROOM_JOINED` back to the player, which answers.
/// Joins a room that exists; for one that does not, it is answered
/// OVERLOADED and creates nothing.
pub const OP_JOIN: u32 = 20;
/// `OP_JOIN` that may create the room: the player sends it for a room it
/// is not in while its session may still create rooms.
pub const OP_JOIN_CREATING: u32 = 1101;
/// Relayed `room.leave`: answers an empty body, and tells the player
/// (`player::OP_ROOM_LEFT`, one-way).
pub const OP_LEAVE: u32 = 21;
/// `room.say` (`u64 room_id`, UTF-8 text): answers `u32` pushes sent.
pub const OP_SAY: u32 = 22;
/// One-way, from a player: `u64 player_id`, then an optional client.
pub const OP_PRESENCE: u32 = 1100;
/// One-way, from the node (an operator's `POST /rooms/{id}/message`): UTF-8
/// text, pushed to every logged-in member as a room message from player 0,
/// the system. Never creates the room.
pub const OP_SYSTEM_MESSAGE: u32 = 1102;
/// The PUSH route of a room message.
pub const ROUTE_ROOM_MESSAGE: u32 = 100;
/// Longest `room.say` text, in bytes (docs/protocol.md).
pub const SAY_TEXT_MAX: usize = 1024;

/// The layout `encode` writes: `u32 n | n x (u64 player | client)`.
const STATE_VERSION: u16 = 1;

pub fn room_key(room_id: u64) -> ObjectKey {
    ObjectKey::new(ROOM_TYPE_ID, 0, room_id)
}

/// The body of the one-way presence notice a player sends to a room it
/// joined (`OP_PRESENCE`).
pub fn presence_body(player_id: u64, client: Option<ClientRef>) -> Vec<u8> {
    let mut body = player_id.to_le_bytes().to_vec();
    put_client(&mut body, client);
    body
}

pub struct RoomType {
    pub persist: Persist,
    pub members_max: usize,
    /// Rooms the node may hold in memory (over its cores) and still create
    /// one more; rooms that exist are loaded whatever the count.
    pub rooms_per_node_max: usize,
    /// The rooms this node holds now: one node's type is shared by its
    /// cores, so this is the node's count.
    pub rooms_live: RoomCount,
}

/// How many room objects a node holds: each [`Room`] counts itself from
/// its creation (or load) to its drop (saved and released, or moved).
#[derive(Clone, Debug, Default)]
pub struct RoomCount(Arc<AtomicUsize>);

impl RoomCount {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn hold(&self) -> RoomHeld {
        self.0.fetch_add(1, Ordering::Relaxed);
        RoomHeld(self.0.clone())
    }
}

/// One room's share of its node's [`RoomCount`].
struct RoomHeld(Arc<AtomicUsize>);

impl Drop for RoomHeld {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for RoomType {
    /// The type as the default configuration sets it up.
    fn default() -> Self {
        let config = crate::config::RoomConfig::default();
        RoomType {
            persist: config.persist,
            members_max: config.members_max,
            rooms_per_node_max: config.rooms_per_node_max,
            rooms_live: RoomCount::default(),
        }
    }
}

impl ObjectType for RoomType {
    type Object = Room;

    fn type_id(&self) -> u32 {
        ROOM_TYPE_ID
    }

    fn name(&self) -> &'static str {
        "room"
    }

    /// `room.join`, `room.leave` and `room.say` are the player's routes (it
    /// relays them here, `room.say` only to a room it joined, so a client
    /// cannot name a room into existence by saying in it).
    fn routes(&self) -> Vec<ClientRoute> {
        vec![ClientRoute::push(ROUTE_ROOM_MESSAGE, "room.message")]
    }

    /// At most `members_max` members, each a player and its session.
    fn state_len_max(&self) -> Option<usize> {
        Some(4 + self.members_max * (8 + CLIENT_LEN_MAX))
    }

    /// A room that does not exist is created only by `OP_JOIN_CREATING`,
    /// and only while the node holds fewer than `rooms_per_node_max` rooms
    /// (checked and counted on one core at a time, so cores creating at the
    /// same instant may pass it by one each). A plain join past the
    /// session's creation bound is OVERLOADED; the rest is answered as a
    /// room with no members would answer it: a leave is done, a say is
    /// BAD_REQUEST.
    fn may_create(&self, op: u32) -> Result<(), Outcome> {
        let refused = |code, reason: &str| Err(Err(Refusal::explained(code, reason)));
        match op {
            OP_JOIN_CREATING if self.rooms_live.get() < self.rooms_per_node_max => Ok(()),
            OP_JOIN_CREATING => refused(
                ErrorCode::Overloaded,
                &format!(
                    "the room does not exist and this node holds {} rooms, its bound \
                     (services.room.rooms_per_node_max)",
                    self.rooms_per_node_max
                ),
            ),
            OP_JOIN => refused(
                ErrorCode::Overloaded,
                "the room does not exist and this session may create no more rooms \
                 (services.room.created_per_session_max)",
            ),
            OP_LEAVE => Err(Ok(Vec::new())),
            OP_SAY => refused(
                ErrorCode::BadRequest,
                "not a member of the room: it does not exist",
            ),
            op => refused(ErrorCode::BadRequest, &format!("the room has no op {op}")),
        }
    }

    fn persist(&self) -> Persist {
        self.persist
    }

    fn state_version(&self) -> u16 {
        STATE_VERSION
    }

    fn create(&self, key: ObjectKey) -> Room {
        Room {
            room_id: key.object_id,
            members_max: self.members_max,
            members: BTreeMap::new(),
            _held: self.rooms_live.hold(),
        }
    }

    fn decode(&self, key: ObjectKey, version: u16, state: &[u8]) -> Result<Room, DecodeError> {
        if version != STATE_VERSION {
            return Err(DecodeError);
        }
        let mut room = self.create(key);
        let mut reader = Reader::new(state);
        let count = reader.u32().ok_or(DecodeError)? as usize;
        // Each member takes at least 9 bytes: a count past that is garbage.
        // A room saved with more members than this node's `members_max`
        // (a node configured with more, or the bound lowered) loads whole
        // and refuses new joins: refusing to decode it would leave it
        // with no node that can serve it.
        if count > state.len() / 9 {
            return Err(DecodeError);
        }
        for _ in 0..count {
            let player_id = reader.u64().ok_or(DecodeError)?;
            let client = reader.client().ok_or(DecodeError)?;
            room.members.insert(player_id, client);
        }
        if !reader.is_empty() {
            return Err(DecodeError);
        }
        Ok(room)
    }
}

/// A membership change needs the session of the player it is about.
const NO_SESSION: &str = "a room's members are players with a session";

pub struct Room {
    room_id: u64,
    members_max: usize,
    /// Member -> current session while logged in.
    members: BTreeMap<u64, Option<ClientRef>>,
    _held: RoomHeld,
}

impl Room {
    fn join(&mut self, ctx: &mut Context<'_>) {
        let Some(client) = ctx.client() else {
            return ctx.bad_request_because(NO_SESSION);
        };
        let known = self.members.contains_key(&client.player_id);
        if !known && self.members.len() >= self.members_max {
            let reason = format!(
                "room {} is full: {} members (services.room.members_max)",
                self.room_id, self.members_max
            );
            return ctx.bad_request_because(&reason);
        }
        self.members.insert(client.player_id, Some(client));
        ctx.mark_changed();
        // Back to the player, which records the room and answers: a player
        // lists only rooms that exist and took it in.
        let mut body = self.room_id.to_le_bytes().to_vec();
        body.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        ctx.forward(
            player::player_key(client.player_id),
            player::OP_ROOM_JOINED,
            body,
        );
    }

    fn leave(&mut self, ctx: &mut Context<'_>) {
        let Some(client) = ctx.client() else {
            return ctx.bad_request_because(NO_SESSION);
        };
        if self.members.remove(&client.player_id).is_some() {
            ctx.mark_changed();
        }
        // The player hears of the leave after any join the room took
        // before it (whose forward went out first), so its list ends as
        // the room's membership does, whatever order the answers take.
        ctx.send(
            player::player_key(client.player_id),
            player::OP_ROOM_LEFT,
            self.room_id.to_le_bytes().to_vec(),
        );
        ctx.answer(Ok(Vec::new()));
    }

    fn say(&mut self, ctx: &mut Context<'_>) {
        let Some(client) = ctx.client() else {
            return ctx.bad_request_because(NO_SESSION);
        };
        let mut reader = Reader::new(ctx.body());
        let refusal = match reader.u64() {
            Some(room_id) if room_id != self.room_id => Some(format!(
                "the body names room {room_id}, this is room {}",
                self.room_id
            )),
            None => Some("body must be a u64 room id then the text".to_string()),
            Some(_) if !self.members.contains_key(&client.player_id) => {
                Some(format!("not a member of room {}", self.room_id))
            }
            Some(_) if reader.rest().len() > SAY_TEXT_MAX => Some(format!(
                "text must be at most {SAY_TEXT_MAX} bytes, got {}",
                reader.rest().len()
            )),
            Some(_) if std::str::from_utf8(reader.rest()).is_err() => {
                Some("text must be UTF-8".to_string())
            }
            Some(_) => None,
        };
        if let Some(reason) = refusal {
            return ctx.bad_request_because(&reason);
        }
        let mut body = self.room_id.to_le_bytes().to_vec();
        body.extend_from_slice(&client.player_id.to_le_bytes());
        body.extend_from_slice(reader.rest());
        let mut pushed = 0u32;
        for member in self.members.values().flatten() {
            ctx.push(*member, ROUTE_ROOM_MESSAGE, body.clone());
            pushed += 1;
        }
        ctx.answer(Ok(pushed.to_le_bytes().to_vec()));
    }

    /// The system's message: from player 0, to every logged-in member.
    /// Only the node sends it (no session); a bad text is dropped, as a
    /// one-way message has nobody to answer.
    fn system_message(&mut self, ctx: &mut Context<'_>) {
        let text = ctx.body();
        if ctx.client().is_some() || text.len() > SAY_TEXT_MAX || std::str::from_utf8(text).is_err()
        {
            return;
        }
        let mut body = self.room_id.to_le_bytes().to_vec();
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(text);
        for member in self.members.values().flatten() {
            ctx.push(*member, ROUTE_ROOM_MESSAGE, body.clone());
        }
    }

    fn presence(&mut self, ctx: &mut Context<'_>) {
        let mut reader = Reader::new(ctx.body());
        let (Some(player_id), Some(client)) = (reader.u64(), reader.client()) else {
            return;
        };
        // Only members are tracked; a notice from a player who left (or whose
        // join was refused) is ignored. Presence is session state: it is
        // saved with the next save, not on its own.
        if let Some(slot) = self.members.get_mut(&player_id) {
            *slot = client;
        }
    }
}

impl Object for Room {
    fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(4 + self.members.len() * 41);
        out.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        for (player_id, client) in &self.members {
            out.extend_from_slice(&player_id.to_le_bytes());
            put_client(out, *client);
        }
    }

    fn handle(&mut self, ctx: &mut Context<'_>) {
        match ctx.op() {
            OP_JOIN | OP_JOIN_CREATING => self.join(ctx),
            OP_LEAVE => self.leave(ctx),
            OP_SAY => self.say(ctx),
            OP_PRESENCE => self.presence(ctx),
            OP_SYSTEM_MESSAGE => self.system_message(ctx),
            op => ctx.bad_request_because(&format!("the room has no op {op}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::tests_fixtures::{client, request};
    use crate::ids::NodeId;
    use crate::object::ErrorCode;
    use crate::router::{HandlerOutput, HandlerReply, ObjectState, Request, RequestId};

    /// BAD_REQUEST with the room's `reason`.
    fn bad_request(reason: &str) -> Outcome {
        Err(Refusal::explained(ErrorCode::BadRequest, reason))
    }

    /// The one-way notice the player object sends (see `Player::presence`).
    fn presence_request(player_id: u64, client: Option<ClientRef>) -> Request {
        Request {
            id: RequestId {
                origin_node: NodeId::NONE,
                seq: 0,
            },
            op: OP_PRESENCE,
            body: presence_body(player_id, client),
            client: None,
            needs_reply: false,
            keyed: false,
        }
    }

    fn room(members_max: usize) -> Box<dyn ObjectState> {
        let kind = RoomType {
            persist: Persist::Interval,
            members_max,
            ..RoomType::default()
        };
        crate::router::ObjectType::decode(&kind, room_key(7), None).expect("new room")
    }

    fn run(state: &mut Box<dyn ObjectState>, request: Request) -> HandlerOutput {
        let mut out = HandlerOutput::default();
        state.handle(room_key(7), &request, &mut out);
        out
    }

    fn answer(out: &HandlerOutput) -> Option<crate::router::Outcome> {
        match &out.reply {
            HandlerReply::Answer(outcome) => Some(outcome.clone()),
            HandlerReply::Delegated => None,
        }
    }

    fn say(text: &str) -> Vec<u8> {
        let mut body = 7u64.to_le_bytes().to_vec();
        body.extend_from_slice(text.as_bytes());
        body
    }

    /// The member count a join forwarded back to the player.
    fn joined(out: &HandlerOutput, player_id: u64) -> Option<u32> {
        assert!(
            matches!(out.reply, HandlerReply::Delegated),
            "{:?}",
            out.reply
        );
        let (key, request) = out.sends.first()?;
        assert_eq!(*key, player::player_key(player_id));
        assert_eq!(request.op, player::OP_ROOM_JOINED);
        assert_eq!(request.body[..8], 7u64.to_le_bytes());
        Some(u32::from_le_bytes(request.body[8..].try_into().ok()?))
    }

    #[test]
    fn join_counts_and_is_bounded_by_members_max() {
        let mut state = room(2);
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        assert_eq!(joined(&out, 1), Some(1));
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(2, 2))));
        assert_eq!(joined(&out, 2), Some(2));
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(3, 3))));
        assert_eq!(
            answer(&out),
            Some(bad_request(
                "room 7 is full: 2 members (services.room.members_max)"
            ))
        );
        // A member joining again is not a new member.
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        assert_eq!(joined(&out, 1), Some(2));
        // A full room is as large as its type says a room can be (after
        // the state version): the node checks that bound against the
        // store's at start.
        let kind = RoomType {
            members_max: 2,
            ..RoomType::default()
        };
        assert_eq!(state.encode().len(), 2 + kind.state_len_max().unwrap());
    }

    #[test]
    fn say_pushes_once_to_each_logged_in_member_on_its_current_session() {
        let mut state = room(10);
        for player in 1..=3 {
            run(
                &mut state,
                request(OP_JOIN, Vec::new(), Some(client(player, player))),
            );
        }
        // Player 2 logs out; player 3 logs in again on session 30.
        run(&mut state, presence_request(2, None));
        run(&mut state, presence_request(3, Some(client(3, 30))));
        // A non-member's presence is ignored.
        run(&mut state, presence_request(9, Some(client(9, 9))));
        let out = run(&mut state, request(OP_SAY, say("hi"), Some(client(1, 1))));
        assert_eq!(answer(&out), Some(Ok(2u32.to_le_bytes().to_vec())));
        let sessions: Vec<u64> = out.pushes.iter().map(|(c, _, _)| c.session_id).collect();
        assert_eq!(sessions, vec![1, 30]);
        let (_, route, body) = &out.pushes[0];
        assert_eq!(*route, ROUTE_ROOM_MESSAGE);
        assert_eq!(&body[8..16], &1u64.to_le_bytes());
        assert_eq!(&body[16..], b"hi");
    }

    #[test]
    fn say_by_a_non_member_or_with_a_bad_body_is_bad_request() {
        let mut state = room(10);
        run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        let out = run(&mut state, request(OP_SAY, say("hi"), Some(client(2, 2))));
        assert_eq!(answer(&out), Some(bad_request("not a member of room 7")));
        let long = "x".repeat(SAY_TEXT_MAX + 1);
        let out = run(&mut state, request(OP_SAY, say(&long), Some(client(1, 1))));
        assert_eq!(
            answer(&out),
            Some(bad_request("text must be at most 1024 bytes, got 1025"))
        );
        let mut bad_text = 7u64.to_le_bytes().to_vec();
        bad_text.push(0xFF);
        let out = run(&mut state, request(OP_SAY, bad_text, Some(client(1, 1))));
        assert_eq!(answer(&out), Some(bad_request("text must be UTF-8")));
        let out = run(&mut state, request(OP_SAY, vec![1, 2], Some(client(1, 1))));
        assert_eq!(
            answer(&out),
            Some(bad_request("body must be a u64 room id then the text"))
        );
    }

    #[test]
    fn a_system_message_reaches_every_logged_in_member_from_player_0() {
        let mut state = room(10);
        run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        run(&mut state, request(OP_JOIN, Vec::new(), Some(client(2, 2))));
        run(&mut state, presence_request(2, None));
        let mut notice = request(OP_SYSTEM_MESSAGE, b"maintenance at 5".to_vec(), None);
        notice.needs_reply = false;
        let out = run(&mut state, notice.clone());
        assert_eq!(out.pushes.len(), 1, "player 2 is logged out");
        let (to, route, body) = &out.pushes[0];
        assert_eq!((to.player_id, *route), (1, ROUTE_ROOM_MESSAGE));
        assert_eq!(&body[..8], &7u64.to_le_bytes());
        assert_eq!(&body[8..16], &0u64.to_le_bytes());
        assert_eq!(&body[16..], b"maintenance at 5");
        // From a session it is nobody's to send.
        notice.client = Some(client(1, 1));
        assert!(run(&mut state, notice).pushes.is_empty());
    }

    #[test]
    fn membership_survives_encode_and_leave_removes() {
        let mut state = room(10);
        run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        run(&mut state, request(OP_JOIN, Vec::new(), Some(client(2, 2))));
        run(
            &mut state,
            request(OP_LEAVE, Vec::new(), Some(client(1, 1))),
        );
        let kind = RoomType {
            persist: Persist::Interval,
            members_max: 10,
            ..RoomType::default()
        };
        let mut decoded =
            crate::router::ObjectType::decode(&kind, room_key(7), Some(&state.encode()))
                .expect("decodes");
        let out = run(&mut decoded, request(OP_SAY, say("x"), Some(client(2, 2))));
        assert_eq!(answer(&out), Some(Ok(1u32.to_le_bytes().to_vec())));
        let bad = [1, 0, 5, 0, 0, 0];
        assert!(crate::router::ObjectType::decode(&kind, room_key(7), Some(&bad)).is_err());
    }

    #[test]
    fn a_room_saved_past_this_nodes_bound_loads_whole_and_takes_no_new_member() {
        let mut state = room(10);
        for player in 1..=3 {
            run(
                &mut state,
                request(OP_JOIN, Vec::new(), Some(client(player, player))),
            );
        }
        // A node whose `members_max` is 2 takes the room over.
        let small = RoomType {
            persist: Persist::Interval,
            members_max: 2,
            ..RoomType::default()
        };
        let mut moved =
            crate::router::ObjectType::decode(&small, room_key(7), Some(&state.encode()))
                .expect("a room larger than the bound still loads");
        let out = run(&mut moved, request(OP_SAY, say("x"), Some(client(3, 3))));
        assert_eq!(answer(&out), Some(Ok(3u32.to_le_bytes().to_vec())));
        let out = run(&mut moved, request(OP_JOIN, Vec::new(), Some(client(4, 4))));
        assert_eq!(answer(&out).map(|o| o.is_err()), Some(true), "full");
    }

    #[test]
    fn only_a_creating_join_creates_and_only_below_the_node_bound() {
        let kind = RoomType {
            rooms_per_node_max: 2,
            ..RoomType::default()
        };
        let may_create = |op| crate::object::ObjectType::may_create(&kind, op);
        assert_eq!(may_create(OP_JOIN_CREATING), Ok(()));
        let refusal = |op| match may_create(op) {
            Err(Err(refusal)) => refusal,
            other => panic!("op {op}: {other:?}"),
        };
        assert_eq!(refusal(OP_JOIN), ErrorCode::Overloaded);
        assert!(refusal(OP_JOIN)
            .reason()
            .unwrap()
            .contains("created_per_session_max"));
        assert_eq!(may_create(OP_LEAVE), Err(Ok(Vec::new())), "not a member");
        for op in [OP_SAY, OP_PRESENCE] {
            assert_eq!(refusal(op), ErrorCode::BadRequest, "op {op}");
            assert!(refusal(op).reason().is_some(), "op {op}");
        }
        // Every room the node holds counts, created or loaded, until it is
        // dropped.
        let decode = crate::router::ObjectType::decode;
        let first = decode(&kind, room_key(1), None).expect("new room");
        let second = decode(&kind, room_key(2), Some(&first.encode())).expect("loads");
        assert_eq!(kind.rooms_live.get(), 2);
        assert_eq!(refusal(OP_JOIN_CREATING), ErrorCode::Overloaded);
        assert!(refusal(OP_JOIN_CREATING)
            .reason()
            .unwrap()
            .contains("holds 2 rooms"));
        drop(second);
        assert_eq!(kind.rooms_live.get(), 1);
        assert_eq!(may_create(OP_JOIN_CREATING), Ok(()));
        drop(first);
        assert_eq!(kind.rooms_live.get(), 0);
    }
}
