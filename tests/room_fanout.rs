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

/// The process's resident set, in bytes (the node runs in this process).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn members_that_never_read_are_closed_at_the_byte_bound_of_their_send_queue() {
    const SILENT: u64 = 8;
    const SAYS_MAX: u32 = 12_000;
    let mut config = support::config();
    // Only the byte bound can close them: the frame bound is out of reach.
    config.gateway.send_queue_max = 1 << 20;
    assert_eq!(config.gateway.send_queue_bytes_max, 256 * 1024);
    let node = TestNode::start(config);
    let room = 11u64;
    let mut speaker = node.connect();
    speaker.login(100, 1);
    join(&mut speaker, room, 2);
    let silent: Vec<_> = (0..SILENT)
        .map(|i| {
            let mut member = node.connect();
            member.login(200 + i, 1);
            join(&mut member, room, 2);
            member
        })
        .collect();
    let rss_before = rss_bytes();
    // 1024-byte messages, 64 in flight at a time (their answers and the
    // speaker's own pushes stay well under its byte bound); the speaker
    // reads, the others read nothing.
    let text = "m".repeat(1024);
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(text.as_bytes());
    let closed = "routerd_gateway_slow_readers_closed_total";
    let mut seq = 10u32;
    let mut rss_peak = rss_before;
    while node.metric(closed) < SILENT as i64 {
        assert!(
            seq < SAYS_MAX,
            "{} of {SILENT} silent members closed after {seq} messages of 1 KiB",
            node.metric(closed)
        );
        for _ in 0..64 {
            speaker.send(route::ROOM_SAY, seq, &body);
            seq += 1;
        }
        let mut answered = 0;
        while answered < 64 {
            let frame = speaker.recv();
            if frame.kind == FrameKind::Response {
                answered += 1;
            }
        }
        rss_peak = rss_peak.max(rss_bytes());
    }
    // Each held at most about twice the bound (the queue, and the batch
    // whose send waits) beside what the kernel buffers.
    let grew = rss_peak.saturating_sub(rss_before);
    eprintln!(
        "{SILENT} silent members closed after {} messages; RSS grew {} KiB",
        seq - 10,
        grew / 1024
    );
    assert!(grew < 64 << 20, "RSS grew {} MiB", grew >> 20);
    drop(silent);
    // The room goes on for those who read: the speaker and a newcomer.
    let mut newcomer = node.connect();
    newcomer.login(300, 1);
    join(&mut newcomer, room, 2);
    assert_eq!(say(&mut newcomer, room, 3, "still here"), 2);
}
