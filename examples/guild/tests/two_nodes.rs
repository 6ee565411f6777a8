//! Two `guild-node`s sharing a store: a guild lives on one of them, and
//! members connected to either create, join, chat, count and search
//! alike; the pushes cross to the other node's sessions.

mod support;

use support::guild::{create, find, incr, join, message, say, u32_of};
use support::{call_json, get_json, Cluster};

#[test]
fn members_on_two_nodes_share_one_guild() {
    let cluster = Cluster::new();
    let one = cluster.start(1, &[]);
    let two = cluster.start(2, &[]);
    one.wait_up(&[2]);
    two.wait_up(&[1]);

    let mut alice = one.connect();
    alice.login(1);
    let mut bob = two.connect();
    bob.login(2);

    assert_eq!(create(&mut bob, 40, "night watch").ok(), b"");
    assert_eq!(join(&mut alice, 40), 2);
    assert_eq!(u32_of(&say(&mut alice, 40, "from one").ok()), 2);
    assert_eq!(message(bob.push()), (40, 1, "from one".to_string()));
    assert_eq!(message(alice.push()), (40, 1, "from one".to_string()));
    assert_eq!(u32_of(&say(&mut bob, 40, "from two").ok()), 2);
    assert_eq!(message(alice.push()), (40, 2, "from two".to_string()));
    assert_eq!(message(bob.push()), (40, 2, "from two".to_string()));

    assert_eq!(incr(&mut alice, 40, 10), 10);
    assert_eq!(incr(&mut bob, 40, 1), 11);

    // Both nodes run the search; either finds the guild from either side.
    let (found, node) = find(&mut alice, "Night Watch");
    assert_eq!(found, 40);
    assert!(node == 1 || node == 2, "{node}");
    assert_eq!(find(&mut bob, "night   watch").0, 40);

    // The admin endpoint knows the registered types by name: the guild is
    // looked up and moved as `guild`, as `routerd transfer --type guild`
    // asks for it.
    let owner = get_json(one.admin, "/objects/guild/40")["owner"]
        .as_u64()
        .expect("an owner");
    let target = if owner == 1 { 2 } else { 1 };
    let moved = call_json(
        two.admin,
        "POST",
        &format!("/objects/guild/40/transfer?to={target}"),
    );
    assert_eq!(moved["owner"].as_u64(), Some(target), "{moved}");
    assert_eq!(incr(&mut alice, 40, 1), 12, "served where it moved");
    let unknown = get_json(one.admin, "/objects/dragon/40");
    assert!(
        unknown["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("player, room, guild, guild_name")),
        "{unknown}"
    );
}
