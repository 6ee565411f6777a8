//! The room object: persistent membership bounded by `members_max`, and each
//! member's current session while logged in (told by the player object, see
//! the module docs of `services`). Written with the public object API only.

use std::collections::BTreeMap;

use super::ROOM_TYPE_ID;
use crate::object::codec::{put_client, Reader};
use crate::object::{
    ClientRef, ClientRoute, Context, DecodeError, KeyFrom, Object, ObjectKey, ObjectType, Persist,
};

/// Relayed `room.join` (body `u64 room_id`, client the joining session):
/// answers `u32 member_count`.
pub const OP_JOIN: u32 = 20;
/// Relayed `room.leave`: answers an empty body.
pub const OP_LEAVE: u32 = 21;
/// `room.say` (`u64 room_id`, UTF-8 text): answers `u32` pushes sent.
pub const OP_SAY: u32 = 22;
/// One-way, from a player: `u64 player_id`, then an optional client.
pub const OP_PRESENCE: u32 = 1100;
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
}

impl ObjectType for RoomType {
    type Object = Room;

    fn type_id(&self) -> u32 {
        ROOM_TYPE_ID
    }

    fn name(&self) -> &'static str {
        "room"
    }

    /// `room.say` goes to the room its body names; `room.join` and
    /// `room.leave` are the player's routes (it relays them here).
    fn routes(&self) -> Vec<ClientRoute> {
        vec![
            ClientRoute::request(OP_SAY, "room.say", KeyFrom::BodyU64),
            ClientRoute::push(ROUTE_ROOM_MESSAGE, "room.message"),
        ]
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
        }
    }

    fn decode(&self, key: ObjectKey, version: u16, state: &[u8]) -> Result<Room, DecodeError> {
        if version != STATE_VERSION {
            return Err(DecodeError);
        }
        let mut room = self.create(key);
        let mut reader = Reader::new(state);
        let count = reader.u32().ok_or(DecodeError)? as usize;
        if count > self.members_max {
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

pub struct Room {
    room_id: u64,
    members_max: usize,
    /// Member -> current session while logged in.
    members: BTreeMap<u64, Option<ClientRef>>,
}

impl Room {
    fn join(&mut self, ctx: &mut Context<'_>) {
        let Some(client) = ctx.client() else {
            return ctx.bad_request();
        };
        let known = self.members.contains_key(&client.player_id);
        if !known && self.members.len() >= self.members_max {
            return ctx.bad_request();
        }
        self.members.insert(client.player_id, Some(client));
        ctx.mark_changed();
        ctx.answer(Ok((self.members.len() as u32).to_le_bytes().to_vec()));
    }

    fn leave(&mut self, ctx: &mut Context<'_>) {
        let Some(client) = ctx.client() else {
            return ctx.bad_request();
        };
        if self.members.remove(&client.player_id).is_some() {
            ctx.mark_changed();
        }
        ctx.answer(Ok(Vec::new()));
    }

    fn say(&mut self, ctx: &mut Context<'_>) {
        let Some(client) = ctx.client() else {
            return ctx.bad_request();
        };
        let mut reader = Reader::new(ctx.body());
        let text_ok = reader.u64() == Some(self.room_id)
            && reader.rest().len() <= SAY_TEXT_MAX
            && std::str::from_utf8(reader.rest()).is_ok();
        if !text_ok || !self.members.contains_key(&client.player_id) {
            return ctx.bad_request();
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
            OP_JOIN => self.join(ctx),
            OP_LEAVE => self.leave(ctx),
            OP_SAY => self.say(ctx),
            OP_PRESENCE => self.presence(ctx),
            _ => ctx.bad_request(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ErrorCode;
    use crate::router::{HandlerOutput, HandlerReply, ObjectState, Request, RequestId};
    use crate::store::NodeId;

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
        }
    }

    fn client(player_id: u64, session_id: u64) -> ClientRef {
        ClientRef {
            gateway_node: NodeId(1),
            session_id,
            session_epoch: 1,
            player_id,
        }
    }

    fn request(op: u32, body: Vec<u8>, client: Option<ClientRef>) -> Request {
        Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq: 1,
            },
            op,
            body,
            client,
            needs_reply: true,
        }
    }

    fn room(members_max: usize) -> Box<dyn ObjectState> {
        let kind = RoomType {
            persist: Persist::Interval,
            members_max,
        };
        crate::router::ObjectType::decode(&kind, room_key(7), None).expect("new room")
    }

    fn run(state: &mut Box<dyn ObjectState>, request: Request) -> HandlerOutput {
        let mut out = HandlerOutput::default();
        state.handle(room_key(7), &request, &mut out);
        out
    }

    fn answer(out: &HandlerOutput) -> Option<Result<Vec<u8>, ErrorCode>> {
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

    #[test]
    fn join_counts_and_is_bounded_by_members_max() {
        let mut state = room(2);
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        assert_eq!(answer(&out), Some(Ok(1u32.to_le_bytes().to_vec())));
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(2, 2))));
        assert_eq!(answer(&out), Some(Ok(2u32.to_le_bytes().to_vec())));
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(3, 3))));
        assert_eq!(answer(&out), Some(Err(ErrorCode::BadRequest)));
        // A member joining again is not a new member.
        let out = run(&mut state, request(OP_JOIN, Vec::new(), Some(client(1, 1))));
        assert_eq!(answer(&out), Some(Ok(2u32.to_le_bytes().to_vec())));
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
        assert_eq!(answer(&out), Some(Err(ErrorCode::BadRequest)));
        let long = "x".repeat(SAY_TEXT_MAX + 1);
        let out = run(&mut state, request(OP_SAY, say(&long), Some(client(1, 1))));
        assert_eq!(answer(&out), Some(Err(ErrorCode::BadRequest)));
        let out = run(&mut state, request(OP_SAY, vec![1, 2], Some(client(1, 1))));
        assert_eq!(answer(&out), Some(Err(ErrorCode::BadRequest)));
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
        };
        let mut decoded =
            crate::router::ObjectType::decode(&kind, room_key(7), Some(&state.encode()))
                .expect("decodes");
        let out = run(&mut decoded, request(OP_SAY, say("x"), Some(client(2, 2))));
        assert_eq!(answer(&out), Some(Ok(1u32.to_le_bytes().to_vec())));
        let bad = [1, 0, 5, 0, 0, 0];
        assert!(crate::router::ObjectType::decode(&kind, room_key(7), Some(&bad)).is_err());
    }
}
