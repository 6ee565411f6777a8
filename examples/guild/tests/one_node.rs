//! A guild's whole life on one `guild-node`: create (a name is unique),
//! join, chat pushed to the members, the counter, leave, the name search,
//! and everything still there after a restart.

mod support;

use guild::refusal::{BAD_NAME, GUILD_EXISTS, NAME_TAKEN};
use support::guild::{
    assert_bad_request, assert_refused, create, find, incr, join, leave, message, say, u32_of,
};
use support::Cluster;

#[test]
fn a_guild_is_created_joined_chatted_in_counted_left_and_kept() {
    let cluster = Cluster::new();
    let node = cluster.start(1, &[]);
    let mut alice = node.connect();
    alice.login(1);
    let mut bob = node.connect();
    bob.login(2);

    assert_eq!(create(&mut alice, 7, "Red  Dragons").ok(), b"");
    // The same guild twice, and the same name (normalised) for another.
    // Three refusals, three codes and reasons.
    assert_refused(
        create(&mut bob, 7, "other"),
        GUILD_EXISTS,
        "this guild id is taken",
    );
    assert_refused(
        create(&mut bob, 8, " red dragons "),
        NAME_TAKEN,
        "another guild holds this name",
    );
    assert_refused(
        create(&mut bob, 9, "no;names"),
        BAD_NAME,
        "the guild name is empty, too long or not UTF-8",
    );
    // A guild nobody created takes no members.
    assert_bad_request(
        bob.call(guild::route::GUILD_JOIN, &9u64.to_le_bytes()),
        "no such guild",
    );
    assert_eq!(create(&mut bob, 8, "ice wolves").ok(), b"");

    assert_eq!(join(&mut bob, 7), 2, "the creator is the first member");
    assert_eq!(join(&mut bob, 7), 2, "joining twice is one membership");

    // Chat: every member gets the push, the sender too; a non-member may
    // not speak.
    assert_eq!(u32_of(&say(&mut bob, 7, "hello").ok()), 2);
    assert_eq!(message(alice.push()), (7, 2, "hello".to_string()));
    assert_eq!(message(bob.push()), (7, 2, "hello".to_string()));
    let mut carol = node.connect();
    carol.login(3);
    assert_bad_request(
        say(&mut carol, 7, "let me in"),
        "not a member of this guild",
    );

    // The counter is the guild's, shared by its members.
    assert_eq!(incr(&mut alice, 7, 5), 5);
    assert_eq!(incr(&mut bob, 7, -2), 3);
    assert_eq!(incr(&mut bob, 8, 1), 1, "the creator of guild 8");
    assert_bad_request(
        carol.call(
            guild::route::GUILD_INCR,
            &support::guild::with_id(7, &1i64.to_le_bytes()),
        ),
        "not a member of this guild",
    );

    // The search finds a guild by any spelling of its name.
    assert_eq!(find(&mut carol, "RED dragons"), (7, 1));
    assert_eq!(find(&mut carol, "ice   Wolves"), (8, 1));
    assert_eq!(find(&mut carol, "grey owls"), (0, 1));
    assert_bad_request(
        carol.call(guild::route::GUILD_FIND, b"  "),
        "the name is empty, too long or not UTF-8",
    );

    assert_eq!(leave(&mut bob, 7), 1);
    assert_bad_request(
        say(&mut bob, 7, "still here?"),
        "not a member of this guild",
    );
    assert_eq!(u32_of(&say(&mut alice, 7, "alone").ok()), 1);
    assert_eq!(message(alice.push()), (7, 1, "alone".to_string()));

    // A restart reads everything back from the store.
    node.stop();
    let node = cluster.start(1, &[]);
    let mut alice = node.connect();
    alice.login(1);
    assert_eq!(incr(&mut alice, 7, 0), 3);
    assert_eq!(join(&mut alice, 7), 1, "alice is still the only member");
    assert_refused(
        create(&mut alice, 10, "Red Dragons"),
        NAME_TAKEN,
        "another guild holds this name",
    );
    assert_eq!(find(&mut alice, "red dragons"), (7, 1));
}
