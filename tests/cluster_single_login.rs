//! Under `auth.duplicate_login = "single"` only a session that still
//! stands keeps its player logged in; otherwise every later login would be
//! refused `AUTH_FAILED` for good, since nothing would ever unbind the
//! player object from that session:
//! - a login whose connection closed while its player object was out of
//!   reach is admitted later, when nobody waits for it: the gateway undoes
//!   it (`routerd_gateway_late_logins_undone_total`);
//! - a session whose node was killed: once membership declares the node
//!   down, a refused login finds the session gone;
//! - a session of a node that restarted since: a refused login asks the
//!   node, whose new start does not know it
//!   (`routerd_gateway_stale_sessions_released_total`).

mod support;

use std::time::{Duration, Instant};

use support::cluster::{
    login_eventually, metric_at, players_owned_by, wait_members_up, wait_metric_at, LocalCluster,
};
use support::{token, Client, ServeProcess};
use wire::client::route;

const SESSIONS: &str = "routerd_gateway_sessions_active";

fn start(cluster: &LocalCluster, id: u64) -> ServeProcess {
    ServeProcess::spawn(cluster.command_with_auth(id, "duplicate_login = \"single\"\n"))
}

/// Polls `name` on `node` until it equals `want`, for 5 s at most.
fn wait_metric(node: &ServeProcess, name: &str, want: i64) {
    wait_metric_at(node.admin, name, want);
}

fn a_login_abandoned_while_its_player_was_out_of_reach_is_undone(cluster: LocalCluster) {
    let gateway = start(&cluster, 1);
    let owner = start(&cluster, 2);
    wait_members_up(&gateway, &[2]);
    wait_members_up(&owner, &[1]);
    let player = players_owned_by(&owner, 2, 1)[0];

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

fn a_session_of_a_node_that_died_or_restarted_keeps_nobody_out(cluster: LocalCluster) {
    let gateway = start(&cluster, 1);
    let owner = start(&cluster, 2);
    wait_members_up(&gateway, &[2]);
    wait_members_up(&owner, &[1]);
    let players = players_owned_by(&owner, 2, 2);
    let sessions: Vec<Client> = players
        .iter()
        .map(|&player| login_eventually(gateway.gateway, player, Duration::from_secs(3)).0)
        .collect();
    let mut refused = Client::connect(owner.gateway);
    let reply = refused.call(route::AUTH_LOGIN, 1, token(players[0], 3600).as_bytes());
    assert!(
        reply.error_reason().contains("already logged in"),
        "{reply:?}"
    );

    // Node 1 dies with both sessions. Once node 2 declares it down (800
    // ms), the first player logs in there.
    gateway.kill_9();
    drop(sessions);
    let (_, took) = login_eventually(owner.gateway, players[0], Duration::from_secs(5));
    println!("logged in again {took:?} after the kill");

    // Node 1 starts again, without the sessions of its last start: the
    // second player's login there asks it about the old one.
    let restarted = start(&cluster, 1);
    wait_members_up(&owner, &[1]);
    let released = metric_at(
        restarted.admin,
        "routerd_gateway_stale_sessions_released_total",
    );
    login_eventually(restarted.gateway, players[1], Duration::from_secs(3));
    assert!(
        metric_at(
            restarted.admin,
            "routerd_gateway_stale_sessions_released_total"
        ) > released,
        "the restarted node released the old session"
    );
}

on_every_store!(
    a_login_abandoned_while_its_player_was_out_of_reach_is_undone,
    a_session_of_a_node_that_died_or_restarted_keeps_nobody_out,
);
