//! A login whose connection closes while its player object is out of
//! reach: the player object admits it later, when nobody waits for it
//! any more. Under `auth.duplicate_login = "single"` that admission must
//! not keep the player logged in to a session that no longer exists
//! (every later login would be refused `AUTH_FAILED` for good): the
//! gateway undoes it (`routerd_gateway_late_logins_undone_total`).

mod support;

use std::time::{Duration, Instant};

use support::cluster::{login_eventually, metric_at, player_owner, wait_members_up, LocalCluster};
use support::{token, Client, ServeProcess};
use wire::client::route;

const SESSIONS: &str = "routerd_gateway_sessions_active";

fn start(cluster: &LocalCluster, id: u64) -> ServeProcess {
    ServeProcess::spawn(cluster.command_with_auth(id, "duplicate_login = \"single\"\n"))
}

/// Polls `name` on `node` until it equals `want`, for 5 s at most.
fn wait_metric(node: &ServeProcess, name: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = metric_at(node.admin, name);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} = {got}, want {want}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn a_login_abandoned_while_its_player_was_out_of_reach_is_undone(cluster: LocalCluster) {
    let gateway = start(&cluster, 1);
    let owner = start(&cluster, 2);
    wait_members_up(&gateway, &[2]);
    wait_members_up(&owner, &[1]);
    // A player node 2 owns, logged out again.
    let player = (1..64)
        .find(|&player| {
            let (client, _) = login_eventually(owner.gateway, player, Duration::from_secs(10));
            let owned_by_2 = player_owner(owner.admin, player).is_some_and(|(node, _)| node == 2);
            client.shutdown();
            owned_by_2
        })
        .expect("node 2 owns some player");
    wait_metric(&owner, SESSIONS, 0);

    // Node 2 stops; a login on node 1 sends its bind there, and its
    // connection closes before any answer. Node 2 resumes well within its
    // lease (400 ms) and admits the bind: node 1's session is gone.
    owner.freeze();
    let stopped = Instant::now();
    let mut abandoned = Client::connect(gateway.gateway);
    abandoned.send(route::AUTH_LOGIN, 1, token(player, 3600).as_bytes());
    std::thread::sleep(Duration::from_millis(50));
    abandoned.shutdown();
    wait_metric(&gateway, SESSIONS, 0);
    owner.thaw();
    assert!(
        stopped.elapsed() < Duration::from_millis(300),
        "node 2 was stopped {:?}: its lease may have lapsed",
        stopped.elapsed()
    );
    wait_metric(&gateway, "routerd_gateway_late_logins_undone_total", 1);

    // The player logs in again, on either node, at once.
    let (_, took) = login_eventually(gateway.gateway, player, Duration::from_secs(3));
    assert!(took < Duration::from_secs(1), "the login took {took:?}");
}

on_every_store!(a_login_abandoned_while_its_player_was_out_of_reach_is_undone);
