//! The built-in player and room are object types like a user's: they
//! implement the public `routerd::object::ObjectType`, reach a node only
//! through `NodeBuilder`, and their code uses routerd's public object API
//! and nothing private. A node built from them alone, the way a user
//! builds one, serves the protocol.

mod support;

use routerd::builtins::player::PlayerType;
use routerd::builtins::room::RoomType;
use routerd::config::{DuplicateLogin, Persist};
use routerd::object::ObjectType;
use routerd::NodeBuilder;
use support::Client;
use wire::client::{route, FrameKind};

fn public_type<T: ObjectType>(kind: T) -> T {
    kind
}

#[test]
fn the_builtins_are_registered_as_public_object_types() {
    let player = public_type(PlayerType {
        persist: Persist::OnWrite,
        duplicate_login: DuplicateLogin::KickOld,
        created_per_session_max: 64,
    });
    let room = public_type(RoomType {
        persist: Persist::Interval,
        members_max: 8,
        ..RoomType::default()
    });
    assert_eq!((player.type_id(), player.name()), (2, "player"));
    assert_eq!((room.type_id(), room.name()), (3, "room"));
    assert_eq!(
        NodeBuilder::new(support::config()).registered(),
        vec!["player", "room"],
        "a node's built-in types are the builder's first registrations"
    );
    let by_hand = NodeBuilder::without_builtins(support::config())
        .object_type(player)
        .object_type(room);
    assert_eq!(by_hand.registered(), vec!["player", "room"]);
    // The same type twice is refused, as a user's would be.
    let twice = NodeBuilder::new(support::config()).object_type(PlayerType {
        persist: Persist::OnWrite,
        duplicate_login: DuplicateLogin::KickOld,
        created_per_session_max: 64,
    });
    let error = twice
        .start()
        .err()
        .expect("a second player type is refused");
    assert!(error.to_string().contains("type id 2"), "{error}");
}

/// The non-test part of a built-in type's source: what it may use of
/// routerd is the public object API and the config, nothing else.
#[test]
fn the_builtin_sources_use_only_the_public_object_api() {
    for file in ["src/builtins/player.rs", "src/builtins/room.rs"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let source = std::fs::read_to_string(&path).unwrap();
        let code = source.split("#[cfg(test)]").next().unwrap();
        let mut uses = 0;
        for (line_no, line) in code.lines().enumerate() {
            for (at, _) in line.match_indices("crate::") {
                let path = &line[at + "crate::".len()..];
                uses += 1;
                assert!(
                    path.starts_with("object") || path.starts_with("config"),
                    "{file}:{}: uses crate::{path}",
                    line_no + 1
                );
            }
        }
        assert!(uses > 0, "{file}: the check saw its imports");
        assert!(
            !code.contains("HandlerOutput") && !code.contains("ObjectState"),
            "{file}: the router's own handler types"
        );
    }
}

fn push_of(client: &mut Client, want_route: u32) -> support::Reply {
    let frame = client.recv();
    assert_eq!(
        (frame.kind, frame.route_id),
        (FrameKind::Push, want_route),
        "{frame:?}"
    );
    frame
}

#[test]
fn a_node_built_from_the_public_types_alone_serves_the_protocol() {
    let node = NodeBuilder::without_builtins(support::config())
        .object_type(PlayerType {
            persist: Persist::Interval,
            duplicate_login: DuplicateLogin::KickOld,
            created_per_session_max: 64,
        })
        .object_type(RoomType {
            persist: Persist::Interval,
            members_max: 8,
            ..RoomType::default()
        })
        .start()
        .expect("node starts");
    let gateway = node.gateway_address();
    let mut alice = Client::connect(gateway);
    alice.login(1, 1);
    let mut bob = Client::connect(gateway);
    bob.login(2, 1);
    let incr = alice.call(route::PLAYER_INCR, 2, &5i64.to_le_bytes());
    assert_eq!(support::counter_of(&incr), 5);
    for (client, seq) in [(&mut alice, 3), (&mut bob, 2)] {
        let joined = client.call(route::ROOM_JOIN, seq, &7u64.to_le_bytes());
        assert_eq!(joined.kind, FrameKind::Response, "{joined:?}");
    }
    let mut say = 7u64.to_le_bytes().to_vec();
    say.extend_from_slice(b"hi");
    bob.send(route::ROOM_SAY, 3, &say);
    let pushed = push_of(&mut alice, route::ROOM_MESSAGE);
    assert_eq!(&pushed.body[8..16], &2u64.to_le_bytes(), "from bob");
    assert_eq!(&pushed.body[16..], b"hi");
    node.shutdown_handle().trigger();
    node.wait().expect("clean stop");
}
