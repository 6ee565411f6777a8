//! The player and room objects together, their messages delivered by hand
//! in the order the objects send them: the player's room list ends as the
//! answers describe, whatever the client pipelines.

use super::player::{player_key, OP_BIND, OP_ROOM_JOIN, OP_ROOM_LEAVE, PLAYER_ROOMS_MAX};
use super::room::{room_key, RoomType};
use super::tests_fixtures::{client, player_type, request};
use crate::config::DuplicateLogin;
use crate::object::{ErrorCode, ObjectKey, Persist};
use crate::router::{HandlerOutput, HandlerReply, ObjectState, ObjectType, Outcome, Request};

const PLAYER: u64 = 9;

struct Pair {
    player: Box<dyn ObjectState>,
    room: Box<dyn ObjectState>,
    /// Requests sent and not yet handled, in order, with their object.
    in_flight: Vec<(ObjectKey, Request)>,
    answers: Vec<Outcome>,
}

impl Pair {
    fn new() -> Pair {
        let player = player_type(DuplicateLogin::KickOld, 1);
        let room = RoomType {
            persist: Persist::OnWrite,
            members_max: 10,
            ..RoomType::default()
        };
        let mut pair = Pair {
            player: ObjectType::decode(&player, player_key(PLAYER), None).expect("player"),
            room: ObjectType::decode(&room, room_key(7), None).expect("room"),
            in_flight: Vec::new(),
            answers: Vec::new(),
        };
        pair.client(OP_BIND, Vec::new());
        pair.answers.clear();
        pair
    }

    /// A request of the player's session, handled by the player at once.
    fn client(&mut self, op: u32, body: Vec<u8>) {
        let request = request(op, body, Some(client(PLAYER, 1)));
        self.handle(player_key(PLAYER), request);
    }

    fn handle(&mut self, key: ObjectKey, request: Request) {
        let mut out = HandlerOutput::default();
        let state = if key == player_key(PLAYER) {
            &mut self.player
        } else {
            assert_eq!(key, room_key(7), "only room 7 is in play");
            &mut self.room
        };
        state.handle(key, &request, &mut out);
        if let HandlerReply::Answer(outcome) = out.reply {
            self.answers.push(outcome);
        }
        self.in_flight.append(&mut out.sends);
    }

    /// Delivers every message in flight, each object's in the order sent.
    fn settle(&mut self) {
        while !self.in_flight.is_empty() {
            let (key, request) = self.in_flight.remove(0);
            self.handle(key, request);
        }
    }

    fn rooms(&self) -> Vec<u64> {
        let bytes = self.player.encode();
        let mut reader = crate::object::codec::Reader::new(&bytes[2..]);
        reader.i64().expect("counter");
        reader.client().expect("client");
        let count = reader.u32().expect("count");
        (0..count).map(|_| reader.u64().expect("room")).collect()
    }
}

#[test]
fn a_pipelined_join_then_leave_leaves_the_room_off_the_players_list() {
    let mut pair = Pair::new();
    let room = 7u64.to_le_bytes().to_vec();
    for _ in 0..PLAYER_ROOMS_MAX + 10 {
        // Both sent before either is answered: the player relays both, the
        // room takes the join, then the leave (answered at once, while the
        // join's answer goes back through the player).
        pair.client(OP_ROOM_JOIN, room.clone());
        pair.client(OP_ROOM_LEAVE, room.clone());
        pair.settle();
        assert_eq!(pair.answers.len(), 2, "{:?}", pair.answers);
        assert!(pair.answers.drain(..).all(|answer| answer.is_ok()));
        assert_eq!(pair.rooms(), Vec::<u64>::new(), "in no room");
    }
    // The player can still join, and is then in the room.
    pair.client(OP_ROOM_JOIN, room);
    pair.settle();
    assert_eq!(pair.answers, vec![Ok(1u32.to_le_bytes().to_vec())]);
    assert_eq!(pair.rooms(), vec![7]);
}

#[test]
fn a_leave_is_answered_once_and_takes_the_room_off_the_list() {
    let mut pair = Pair::new();
    let room = 7u64.to_le_bytes().to_vec();
    pair.client(OP_ROOM_JOIN, room.clone());
    pair.settle();
    assert_eq!(pair.rooms(), vec![7]);
    pair.client(OP_ROOM_LEAVE, room.clone());
    pair.settle();
    assert_eq!(pair.answers.pop(), Some(Ok(Vec::new())));
    assert!(pair.rooms().is_empty());
    // A leave of a room it is not in is still answered, once.
    pair.client(OP_ROOM_LEAVE, room);
    pair.settle();
    assert_eq!(pair.answers.len(), 2, "{:?}", pair.answers);
    let bad: Outcome = Err(ErrorCode::BadRequest.into());
    assert!(!pair.answers.contains(&bad));
}
