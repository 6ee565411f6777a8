//! A node cut off from its peers while it still reaches the store: it
//! keeps its heartbeat, so nobody may declare it down or claim its
//! objects; it serves its own clients on, the others answer errors for its
//! objects, and nobody ever answers a value that goes back. Healed, the
//! links come up again and every node serves every object.
//!
//! Each node runs in a network namespace of its own, joined to the test
//! by a bridge; the cut is a pair of blackhole routes between two
//! namespaces (the bridge and the shared SQLite file stay reachable). It
//! needs root and `ip`; it says it skipped otherwise.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{
    eventually, get_json, listeners_on, login_eventually, player_owner, wait_members_up,
    LocalCluster, DOWN_AFTER_MS,
};
use support::netns::{Family, Net};
use support::{counter_of, ServeProcess};
use wire::client::{route, FrameKind};

/// The partition test's namespaces: names `rdp...`, addresses 10.100.0.0
/// to 10.149.255.255, apart from the other tests' nets.
const NETS: Family = Family {
    prefix: "rdp",
    second_octet_min: 100,
};

/// Starts node `id` in its namespace.
fn start(net: &Net, cluster: &LocalCluster, id: usize) -> ServeProcess {
    let host = net.host(id);
    let dir = cluster
        .dir()
        .join(format!("ns-node-{id}-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    let body = format!(
        "{}\n{}",
        cluster.body_on(id as u64, "the partition test's secret", &host),
        listeners_on(&host)
    );
    std::fs::write(&path, body).unwrap();
    let mut command = net.command_in(id, env!("CARGO_BIN_EXE_routerd"));
    command.args(["serve", "--config"]).arg(&path);
    ServeProcess::spawn(command)
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn incr(client: &mut support::Client, seq: u32) -> Option<i64> {
    let reply = client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
    match reply.kind {
        FrameKind::Response => Some(counter_of(&reply)),
        FrameKind::Error => None,
        _ => panic!("unexpected {reply:?}"),
    }
}

#[test]
fn a_node_cut_from_its_peers_keeps_its_objects_and_nobody_serves_them_twice() {
    let net = match Net::build(&NETS, 3) {
        Ok(net) => net,
        Err(why) => {
            println!("skipped: network namespaces unavailable ({why})");
            return;
        }
    };
    let cluster = LocalCluster::new();
    let nodes: Vec<ServeProcess> = (1..=3).map(|id| start(&net, &cluster, id)).collect();
    wait_members_up(&nodes[0], &[2, 3]);
    wait_members_up(&nodes[1], &[1, 3]);
    wait_members_up(&nodes[2], &[1, 2]);
    // A player node 1 owns, whose session is on node 1, and one whose
    // session is on node 2.
    let owned: Vec<u64> = (1..)
        .filter(|&player| {
            nodes[0].connect().login(player, 1);
            player_owner(nodes[0].admin, player).map(|(node, _)| node) == Some(1)
        })
        .take(2)
        .collect();
    let (mut local, _) = login_eventually(nodes[0].gateway, owned[0], Duration::from_secs(5));
    let (mut remote, _) = login_eventually(nodes[1].gateway, owned[1], Duration::from_secs(5));
    let mut last = [incr(&mut local, 2).unwrap(), incr(&mut remote, 2).unwrap()];

    net.cut_pair(1, 2, true).unwrap();
    net.cut_pair(1, 3, true).unwrap();
    let cut = Instant::now();
    let mut seq = 3;
    let mut remote_errors = 0;
    // Three times down_after: long enough that a wrong declaration would
    // have happened.
    while cut.elapsed() < Duration::from_millis(3 * DOWN_AFTER_MS) {
        seq += 1;
        let value = incr(&mut local, seq).expect("node 1 serves its own clients on");
        assert!(value > last[0], "{value} after {}", last[0]);
        last[0] = value;
        match incr(&mut remote, seq) {
            Some(value) => {
                assert!(value > last[1], "{value} after {}", last[1]);
                last[1] = value;
            }
            None => remote_errors += 1,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(remote_errors > 0, "node 2 cannot reach node 1's objects");
    for node in &nodes[1..] {
        let view = get_json(node.admin, "/cluster");
        let member = view["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["node_id"] == 1)
            .unwrap()
            .clone();
        assert_eq!(member["state"], "up", "still heartbeating: {view}");
    }
    for player in &owned {
        assert_eq!(player_owner(nodes[1].admin, *player), Some((1, 1)));
    }

    net.cut_pair(1, 2, false).unwrap();
    net.cut_pair(1, 3, false).unwrap();
    let healed = eventually(Duration::from_secs(10), "node 2 serves again", || {
        seq += 1;
        incr(&mut remote, seq)
    });
    assert!(healed > last[1], "{healed} after {}", last[1]);
    seq += 1;
    assert!(incr(&mut local, seq).unwrap() > last[0]);
}
