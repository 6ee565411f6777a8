//! `room.say` reaches exactly the members logged in at that moment, each on
//! its current session, and answers with that count.

mod support;

use support::{Client, TestNode};
use wire::client::{route, ErrorCode, FrameKind};

fn join(client: &mut Client, room: u64, seq: u32) -> u32 {
    let reply = client.call(route::ROOM_JOIN, seq, &room.to_le_bytes());
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    u32::from_le_bytes(reply.body.as_slice().try_into().unwrap())
}

fn say(client: &mut Client, room: u64, seq: u32, text: &str) -> u32 {
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(text.as_bytes());
    client.send(route::ROOM_SAY, seq, &body);
    // The sender is a member too: its PUSH and its RESPONSE come in either
    // order.
    let mut count = None;
    let mut pushed = false;
    while count.is_none() || !pushed {
        let frame = client.recv();
        match frame.kind {
            FrameKind::Response => {
                assert_eq!(frame.seq, seq);
                count = Some(u32::from_le_bytes(
                    frame.body.as_slice().try_into().unwrap(),
                ));
            }
            FrameKind::Push => {
                assert_message(&frame, room, text);
                pushed = true;
            }
            _ => panic!("unexpected {frame:?}"),
        }
    }
    count.unwrap()
}

fn assert_message(frame: &support::Reply, room: u64, text: &str) {
    assert_eq!(
        (frame.kind, frame.route_id, frame.seq),
        (FrameKind::Push, route::ROOM_MESSAGE, 0)
    );
    assert_eq!(&frame.body[..8], &room.to_le_bytes());
    assert_eq!(&frame.body[16..], text.as_bytes());
}

#[test]
fn say_reaches_exactly_the_logged_in_members_on_their_current_session() {
    let node = TestNode::start(support::config());
    let room = 7u64;
    let mut alice = node.connect();
    alice.login(1, 1);
    let mut bob = node.connect();
    bob.login(2, 1);
    let mut carol = node.connect();
    carol.login(3, 1);
    assert_eq!(join(&mut alice, room, 2), 1);
    assert_eq!(join(&mut bob, room, 2), 2);
    assert_eq!(join(&mut carol, room, 2), 3);
    // Dave is logged in but not a member.
    let mut dave = node.connect();
    dave.login(4, 1);

    // Carol leaves the game (not the room): she stays a member, logged out.
    carol.shutdown();
    drop(carol);
    std::thread::sleep(std::time::Duration::from_millis(100));

    assert_eq!(say(&mut alice, room, 3, "hello"), 2, "alice and bob");
    let push = bob.recv();
    assert_message(&push, room, "hello");
    assert_eq!(&push.body[8..16], &1u64.to_le_bytes(), "from alice");

    // Bob logs in again elsewhere: the old session is kicked, and the next
    // message reaches the new one only.
    let mut bob_again = node.connect();
    bob_again.login(2, 1);
    let kicked = bob.recv();
    assert_eq!(
        (kicked.kind, kicked.route_id),
        (FrameKind::Push, route::SYS_KICKED)
    );
    bob.expect_closed();
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(say(&mut alice, room, 4, "again"), 2);
    assert_message(&bob_again.recv(), room, "again");

    // Saying in a room one is not a member of is BAD_REQUEST; nobody hears.
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(b"intruder");
    assert_eq!(
        dave.call(route::ROOM_SAY, 2, &body).error_code(),
        ErrorCode::BadRequest as u16
    );
    // Leaving stops the messages: Alice leaves, Bob says, only Bob hears.
    let reply = alice.call(route::ROOM_LEAVE, 5, &room.to_le_bytes());
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    assert_eq!(say(&mut bob_again, room, 2, "bye"), 1);
    // Alice got nothing after leaving: her next frame is her own ping.
    assert_eq!(alice.call(route::SYS_PING, 6, b"p").body, b"p");
}
