//! The name search is a stateless service: run by two of three nodes
//! (weights 1 and 3), called from the third. Each request runs on the node
//! the weighted rendezvous pick over the catalog snapshot gives its key,
//! the same on every try; the shares follow the weights; and when one
//! serving node stops, its keys (and only those) move to the other.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use routerd::catalog::{pick_among, ActorConfig};
use routerd::object::{stable_hash64, ObjectKey};
use support::guild::find;
use support::{eventually, Cluster};

const NAMES: usize = 400;

fn name(index: usize) -> String {
    format!("guild {index}")
}

/// Which node the pick gives `name`, computed here from the rule rather
/// than asked of a node: the request key is the search type's key with the
/// hash of the body as its id; each node advertises one actor per
/// registration, `node_id << 16 | position` (player 1, room 2, guild 3,
/// guild_name 4, guild_search 5).
fn expected_node(name: &str, serving: &[(u64, u32)]) -> u64 {
    let key = ObjectKey::new(guild::SEARCH_TYPE_ID, 0, stable_hash64(name.as_bytes()));
    let actors: Vec<ActorConfig> = serving
        .iter()
        .map(|&(node_id, weight)| ActorConfig {
            actor_id: node_id << 16 | 5,
            node_id,
            actor_type: guild::SEARCH_TYPE_ID,
            shard: 0,
            supported_msg_ids: Arc::from([guild::route::GUILD_FIND]),
            weight,
            address: Arc::from(""),
        })
        .collect();
    let msg_key = stable_hash64(&key.to_le_bytes());
    pick_among(true, msg_key, actors.iter()).unwrap().node_id
}

/// Where each name's search ran, asked through `client`.
fn spread(client: &mut support::Client) -> Vec<u64> {
    (0..NAMES)
        .map(|index| {
            let (found, node) = find(client, &name(index));
            assert_eq!(found, 0, "no guild has this name");
            node
        })
        .collect()
}

fn counts(nodes: &[u64]) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for node in nodes {
        *counts.entry(*node).or_default() += 1;
    }
    counts
}

#[test]
fn searches_follow_the_weighted_pick_and_a_stopped_node_moves_only_its_keys() {
    let cluster = Cluster::new();
    let one = cluster.start(1, &["--search-weight", "1"]);
    let two = cluster.start(2, &["--search-weight", "3"]);
    let three = cluster.start(3, &["--no-search"]);
    three.wait_up(&[1, 2]);
    one.wait_up(&[2, 3]);
    two.wait_up(&[1, 3]);

    let mut client = three.connect();
    client.login(9);
    let before = spread(&mut client);
    let share = counts(&before);
    println!("searches per node (weights 1 and 3): {share:?}");
    assert_eq!(share.get(&3), None, "node 3 does not run the search");
    // Weights 1 and 3: node 2 takes about three quarters (400 keys: one
    // standard deviation is 2.2 points; these bounds are 6).
    let two_share = share[&2] as f64 / NAMES as f64;
    assert!((0.62..=0.88).contains(&two_share), "{share:?}");
    // Not only the shares: each key went exactly where the pick sends it.
    for (index, node) in before.iter().enumerate() {
        assert_eq!(
            *node,
            expected_node(&name(index), &[(1, 1), (2, 3)]),
            "{}",
            name(index)
        );
    }
    assert_eq!(spread(&mut client), before, "the same key, the same node");

    // Node 1 stops (a clean leave); once nodes 2 and 3 have seen it go,
    // node 1's keys run on node 2 and node 2's stay where they were. Node
    // 2 must have seen it too: a search it runs passes the request on to
    // the name's index object, and an index node 1 held, asked while node
    // 2 still counted node 1 up, would meet node 1's exit (an uncertain
    // TIMEOUT, as for any request racing a stop).
    one.stop();
    eventually(Duration::from_secs(10), "node 1 gone", || {
        let gone = |node: &support::GuildNode| node.member_state(1).as_deref() != Some("up");
        (gone(&two) && gone(&three)).then_some(())
    });
    let after = spread(&mut client);
    for (index, (was, now)) in before.iter().zip(&after).enumerate() {
        assert_eq!(*now, 2, "{} ran on {now}, was on {was}", name(index));
    }
    let moved = before
        .iter()
        .zip(&after)
        .filter(|(was, now)| was != now)
        .count();
    assert_eq!(moved, share[&1], "exactly node 1's keys moved");
}
