//! The player object alone, its requests run by hand.

use super::*;
use crate::builtins::tests_fixtures::{player_type, request};
use crate::router::{HandlerOutput, HandlerReply, ObjectState, Request};

/// A session of player 9, the player these tests run.
fn client(session_id: u64) -> ClientRef {
    crate::builtins::tests_fixtures::client(9, session_id)
}

/// The room's forward of a join it took (`OP_ROOM_JOINED`).
fn room_took(state: &mut Box<dyn ObjectState>, room_id: u64, session: u64) -> HandlerOutput {
    let mut body = room_id.to_le_bytes().to_vec();
    body.extend_from_slice(&1u32.to_le_bytes());
    run(state, request(OP_ROOM_JOINED, body, Some(client(session))))
}

fn player() -> Box<dyn ObjectState> {
    let kind = player_type(DuplicateLogin::KickOld, 2);
    crate::router::ObjectType::decode(&kind, player_key(9), None).expect("new player")
}

fn run(state: &mut Box<dyn ObjectState>, request: Request) -> HandlerOutput {
    let mut out = HandlerOutput::default();
    state.handle(player_key(9), &request, &mut out);
    out
}

/// BAD_REQUEST with the player's `reason`.
fn bad_request(reason: &str) -> crate::router::Outcome {
    Err(crate::router::Refusal::explained(
        ErrorCode::BadRequest,
        reason,
    ))
}

fn answer(out: &HandlerOutput) -> Option<&crate::router::Outcome> {
    match &out.reply {
        HandlerReply::Answer(outcome) => Some(outcome),
        HandlerReply::Delegated => None,
    }
}

#[test]
fn incr_adds_and_overflow_is_bad_request_with_state_unchanged() {
    let mut state = player();
    let out = run(
        &mut state,
        request(OP_INCR, 5i64.to_le_bytes().to_vec(), None),
    );
    assert_eq!(answer(&out), Some(&Ok(5i64.to_le_bytes().to_vec())));
    assert!(out.mutated);
    let out = run(
        &mut state,
        request(OP_INCR, i64::MAX.to_le_bytes().to_vec(), None),
    );
    assert_eq!(answer(&out), Some(&bad_request("counter would overflow")));
    assert!(!out.mutated);
    let out = run(&mut state, request(OP_GET, Vec::new(), None));
    assert_eq!(answer(&out), Some(&Ok(5i64.to_le_bytes().to_vec())));
    let out = run(&mut state, request(OP_INCR, vec![1, 2, 3], None));
    assert_eq!(
        answer(&out),
        Some(&bad_request("body must be 8 bytes, got 3"))
    );
    let out = run(&mut state, request(OP_INCR, vec![1], None));
    assert_eq!(
        answer(&out),
        Some(&bad_request("body must be 8 bytes, got 1"))
    );
}

#[test]
fn duplicate_login_policies() {
    let (old, new) = (client(1), client(2));
    let bind = |kick| LoginDecision::Bind { kick };
    assert_eq!(decide_login(DuplicateLogin::KickOld, None, new), bind(None));
    assert_eq!(
        decide_login(DuplicateLogin::KickOld, Some(old), new),
        bind(Some(old))
    );
    assert_eq!(
        decide_login(DuplicateLogin::Single, Some(old), new),
        LoginDecision::Refuse
    );
    assert_eq!(
        decide_login(DuplicateLogin::Multi, Some(old), new),
        bind(None)
    );
    // A re-bind of the same session (a new epoch) is not a duplicate.
    let rebind = ClientRef {
        session_epoch: 2,
        ..old
    };
    assert_eq!(
        decide_login(DuplicateLogin::Single, Some(old), rebind),
        bind(None)
    );
}

#[test]
fn bind_refreshes_the_client_kicks_the_old_and_tells_the_rooms() {
    let mut state = player();
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(1))));
    let out = run(
        &mut state,
        request(OP_ROOM_JOIN, 7u64.to_le_bytes().to_vec(), Some(client(1))),
    );
    assert!(matches!(out.reply, HandlerReply::Delegated));
    assert_eq!(out.sends.len(), 1);
    assert_eq!(out.sends[0].0, room::room_key(7));
    assert_eq!(out.sends[0].1.op, room::OP_JOIN_CREATING);
    // The room took the join: the player lists it and answers.
    let out = room_took(&mut state, 7, 1);
    assert_eq!(answer(&out), Some(&Ok(1u32.to_le_bytes().to_vec())));
    let out = run(&mut state, request(OP_BIND, Vec::new(), Some(client(2))));
    assert_eq!(out.kicks, vec![client(1)]);
    assert_eq!(answer(&out), Some(&Ok(9u64.to_le_bytes().to_vec())));
    assert_eq!(out.sends.len(), 1, "presence to room 7");
    assert!(!out.sends[0].1.needs_reply);
    // The kicked session's late close does not unbind the new one.
    let out = run(&mut state, request(OP_UNBIND, Vec::new(), Some(client(1))));
    assert!(!out.mutated);
    let bytes = state.encode();
    assert_eq!(bytes[..2], STATE_VERSION.to_le_bytes(), "versioned");
    let decoded = Player::decode(&bytes[2..]).expect("round trip");
    assert_eq!(decoded.client, Some(client(2)));
    assert_eq!(decoded.rooms, vec![7]);
}

#[test]
fn garbage_state_is_a_decode_error_not_a_panic() {
    let kind = PlayerType {
        persist: Persist::Interval,
        duplicate_login: DuplicateLogin::KickOld,
        created_per_session_max: 2,
    };
    let decode = |bytes: &[u8]| {
        crate::router::ObjectType::decode(&kind, player_key(1), Some(bytes)).is_err()
    };
    // Garbage after a good version, and versions this build never wrote.
    for bytes in [
        &[1, 0][..],
        &[1, 0, 1, 2, 3],
        &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
    ] {
        assert!(decode(bytes), "{bytes:?}");
    }
    let mut good = STATE_VERSION.to_le_bytes().to_vec();
    Player::default().encode(&mut good);
    assert!(!decode(&good), "a good state decodes");
    for version in [0u16, 2, u16::MAX] {
        let mut other = good.clone();
        other[..2].copy_from_slice(&version.to_le_bytes());
        assert!(decode(&other), "version {version}");
    }
    assert!(decode(&[]) && decode(&[1]));
}

#[test]
fn a_superseded_session_is_kicked_again_and_not_served() {
    let mut state = player();
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(1))));
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(2))));
    // Session 1's kick was lost; its next request is not served.
    let out = run(
        &mut state,
        request(OP_INCR, 1i64.to_le_bytes().to_vec(), Some(client(1))),
    );
    assert_eq!(out.kicks, vec![client(1)]);
    let refusal = answer(&out).unwrap().as_ref().unwrap_err();
    assert_eq!(*refusal, ErrorCode::Unavailable);
    assert!(refusal.reason().unwrap().contains("newer login"));
    assert!(!out.mutated);
    let out = run(
        &mut state,
        request(OP_INCR, 1i64.to_le_bytes().to_vec(), Some(client(2))),
    );
    assert_eq!(answer(&out), Some(&Ok(1i64.to_le_bytes().to_vec())));
}

/// The op the player relayed its request as, and to which room.
fn relayed(out: &HandlerOutput) -> Option<(u64, u32)> {
    assert!(out.sends.len() <= 1);
    let (key, request) = out.sends.first()?;
    Some((key.object_id, request.op))
}

fn join(state: &mut Box<dyn ObjectState>, room_id: u64, session: u64) -> HandlerOutput {
    let body = room_id.to_le_bytes().to_vec();
    run(state, request(OP_ROOM_JOIN, body, Some(client(session))))
}

#[test]
fn a_session_joins_with_the_right_to_create_up_to_its_bound() {
    // The fixture's type: created_per_session_max = 2.
    let mut state = player();
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(1))));
    assert_eq!(
        relayed(&join(&mut state, 1, 1)),
        Some((1, room::OP_JOIN_CREATING))
    );
    room_took(&mut state, 1, 1);
    assert_eq!(
        relayed(&join(&mut state, 2, 1)),
        Some((2, room::OP_JOIN_CREATING))
    );
    room_took(&mut state, 2, 1);
    // Past the bound: a plain join, which joins a room that exists and
    // creates none; a room that refused it is not listed.
    assert_eq!(relayed(&join(&mut state, 3, 1)), Some((3, room::OP_JOIN)));
    // A room it is in costs nothing and never creates.
    assert_eq!(relayed(&join(&mut state, 1, 1)), Some((1, room::OP_JOIN)));
    // Leaving and joining again does not give the right back.
    let leave = 2u64.to_le_bytes().to_vec();
    run(&mut state, request(OP_ROOM_LEAVE, leave, Some(client(1))));
    assert_eq!(relayed(&join(&mut state, 2, 1)), Some((2, room::OP_JOIN)));
    // A re-bind of the same session keeps its count; a new session
    // starts at zero.
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(1))));
    assert_eq!(relayed(&join(&mut state, 4, 1)), Some((4, room::OP_JOIN)));
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(5))));
    assert_eq!(
        relayed(&join(&mut state, 5, 5)),
        Some((5, room::OP_JOIN_CREATING))
    );
    let bytes = state.encode();
    assert_eq!(Player::decode(&bytes[2..]).unwrap().rooms, vec![1]);
}

#[test]
fn say_reaches_only_a_room_the_player_joined() {
    let mut state = player();
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(1))));
    join(&mut state, 7, 1);
    room_took(&mut state, 7, 1);
    let mut body = 7u64.to_le_bytes().to_vec();
    body.extend_from_slice(b"hi");
    let out = run(&mut state, request(OP_ROOM_SAY, body, Some(client(1))));
    assert_eq!(relayed(&out), Some((7, room::OP_SAY)));
    let mut body = 8u64.to_le_bytes().to_vec();
    body.extend_from_slice(b"hi");
    let out = run(&mut state, request(OP_ROOM_SAY, body, Some(client(1))));
    assert_eq!(relayed(&out), None, "room 8 is never touched");
    assert_eq!(answer(&out), Some(&bad_request("not a member of room 8")));
    let out = run(
        &mut state,
        request(OP_ROOM_SAY, vec![7, 0], Some(client(1))),
    );
    assert_eq!(
        answer(&out),
        Some(&bad_request(
            "body must be a u64 room id then the text, got 2 bytes"
        ))
    );
}

#[test]
fn a_player_in_every_room_it_may_join_is_as_large_as_its_type_says() {
    // The node checks that bound against the store's at start.
    let mut state = player();
    run(&mut state, request(OP_BIND, Vec::new(), Some(client(1))));
    for room_id in 1..=PLAYER_ROOMS_MAX as u64 {
        room_took(&mut state, room_id, 1);
    }
    let kind = player_type(DuplicateLogin::KickOld, 2);
    let len_max = ObjectType::state_len_max(&kind).unwrap();
    assert_eq!(state.encode().len(), 2 + len_max);
}
