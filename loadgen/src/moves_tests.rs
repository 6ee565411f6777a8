//! Redirects, reconnects and player switches through the real engine,
//! against the fake gateways of `testing.rs`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::report::{verdict, Summary};
use crate::runner::Outcome;
use crate::testing::{gateway, run_against, Behaviour, Record};
use crate::workload::Op;

fn sorted(mut players: Vec<u64>) -> Vec<u64> {
    players.sort_unstable();
    players.dedup();
    players
}

/// Two connections at pipeline 4 against gateway A, which behaves as
/// `a_behaviour` says given gateway B's address: the run passes and both
/// sessions were redirected once.
fn redirected_run(
    a_behaviour: impl FnOnce(SocketAddr) -> Behaviour,
) -> (Outcome, Arc<Record>, Arc<Record>) {
    let (b, b_record) = gateway(Behaviour::default());
    let (a, a_record) = gateway(a_behaviour(b));
    let outcome = run_against(
        &[a],
        &[
            "--workload",
            "incr",
            "--connections",
            "2",
            "--pipeline",
            "4",
        ],
    );
    assert_eq!(outcome.error, None);
    let verdict = verdict(&outcome.stats, None, 1.0);
    assert!(verdict.is_empty(), "{verdict:?}");
    assert_eq!(a_record.redirects.load(Ordering::SeqCst), 2);
    assert_eq!(outcome.stats.redirects, 2);
    (outcome, a_record, b_record)
}

/// Gateway A redirects each session to B after 50 requests: loadgen
/// finishes what is in flight on A (and sends A nothing new), logs in on
/// B as the same player and goes on; nothing fails.
#[test]
fn a_redirect_moves_each_session_to_the_named_gateway() {
    let (outcome, a_record, b_record) = redirected_run(|b| Behaviour {
        redirect_after: Some((50, b.to_string())),
        ..Behaviour::default()
    });
    let stats = &outcome.stats;
    assert_eq!(stats.lost(), 0);
    assert_eq!(stats.failures(), 0);
    assert_eq!(
        stats.reconnects, 0,
        "following a redirect is not a reconnect"
    );
    // Only requests already in flight reached A after its push: at most a
    // pipeline's worth per connection.
    assert!(a_record.after_redirect.load(Ordering::SeqCst) <= 2 * 4);
    assert_eq!(
        sorted(b_record.logins.lock().expect("lock").clone()),
        [1, 2]
    );
    assert!(b_record.answered.load(Ordering::SeqCst) > 100);
    assert!(stats.ops[Op::Incr.index()].responses > 100);
}

/// Gateway A redirects each session right after its login answer (a node
/// placing sessions on their player's node): the run does not fail in
/// setup; each connection moves to B before the measured phase and every
/// request of it is answered there.
#[test]
fn a_redirect_at_login_moves_the_session_before_the_run() {
    let (outcome, a_record, b_record) = redirected_run(|b| Behaviour {
        redirect_at_login: Some(b.to_string()),
        ..Behaviour::default()
    });
    let stats = &outcome.stats;
    assert_eq!(stats.failures(), 0);
    assert_eq!(
        a_record.answered.load(Ordering::SeqCst),
        0,
        "nothing sent to A"
    );
    assert_eq!(
        sorted(b_record.logins.lock().expect("lock").clone()),
        [1, 2]
    );
    assert!(stats.ops[Op::Incr.index()].responses > 100);
}

/// An empty target sends the session to another `--addr`: the one after
/// the gateway it was on.
#[test]
fn an_empty_redirect_goes_to_another_addr() {
    let (a, a_record) = gateway(Behaviour {
        redirect_after: Some((50, String::new())),
        ..Behaviour::default()
    });
    let (b, b_record) = gateway(Behaviour::default());
    let outcome = run_against(
        &[a, b],
        &[
            "--workload",
            "incr",
            "--connections",
            "2",
            "--pipeline",
            "2",
        ],
    );
    assert_eq!(outcome.error, None);
    assert!(verdict(&outcome.stats, None, 1.0).is_empty());
    // Connection 0 started on A, connection 1 on B; 0 moved to B.
    assert_eq!(*a_record.logins.lock().expect("lock"), [1]);
    assert_eq!(
        sorted(b_record.logins.lock().expect("lock").clone()),
        [1, 2]
    );
    assert_eq!(outcome.stats.redirects, 1);
}

/// The gateway drops every connection after 200 requests, with requests
/// in flight. With --reconnect each connection comes back, logs in again
/// and goes on; the requests lost with the old connections are reported
/// by reason, and the run stands.
#[test]
fn reconnect_after_the_server_drops_connections() {
    let (addr, record) = gateway(Behaviour {
        close_after: Some(200),
        ..Behaviour::default()
    });
    let outcome = run_against(
        &[addr],
        &[
            "--workload",
            "incr",
            "--connections",
            "2",
            "--pipeline",
            "8",
            "--reconnect",
        ],
    );
    assert_eq!(outcome.error, None);
    let stats = &outcome.stats;
    assert!(
        verdict(stats, None, 1.0).is_empty(),
        "{:?}",
        verdict(stats, None, 1.0)
    );
    assert!(stats.reconnects >= 4, "{} reconnects", stats.reconnects);
    assert!(stats.lost() > 0, "requests in flight were dropped");
    assert_eq!(stats.connections_lost, 0);
    assert_eq!(stats.protocol_errors, 0);
    assert!(stats.responses() > 400);
    let logins = record.logins.lock().expect("lock").clone();
    for player in [1, 2] {
        assert!(logins.iter().filter(|p| **p == player).count() >= 3);
    }
    let args = <crate::cli::Args as clap::Parser>::parse_from(["loadgen", "--reconnect"]);
    let summary = Summary::new(&args, stats, vec![], vec![]);
    let table = summary.table();
    assert!(table.contains("CONNECTION_LOST="), "{table}");
    assert!(table.contains("reconnects"), "{table}");
    assert_eq!(summary.lost, stats.lost());
}

/// Without --reconnect, a dropped connection stays an error, as before.
#[test]
fn without_reconnect_a_dropped_connection_fails_the_run() {
    let (addr, _) = gateway(Behaviour {
        close_after: Some(200),
        ..Behaviour::default()
    });
    let outcome = run_against(
        &[addr],
        &[
            "--workload",
            "incr",
            "--connections",
            "2",
            "--pipeline",
            "8",
        ],
    );
    let stats = &outcome.stats;
    assert_eq!(stats.connections_lost, 2);
    assert_eq!(stats.reconnects, 0);
    let failures = verdict(stats, None, 1.0);
    assert!(
        failures.iter().any(|f| f.contains("connections lost")),
        "{failures:?}"
    );
}

/// Six players on two connections: each connection logs in as its own
/// players in turn, every player gets requests, and no player is ever
/// logged in on two connections (which kick_old would punish).
#[test]
fn players_share_connections_without_overlap() {
    let (addr, record) = gateway(Behaviour::default());
    let outcome = run_against(
        &[addr],
        &[
            "--workload",
            "incr",
            "--connections",
            "2",
            "--players",
            "6",
            "--requests-per-login",
            "30",
            "--pipeline",
            "4",
            // Every player must get its turn on a busy machine too.
            "--duration",
            "3s",
        ],
    );
    assert_eq!(outcome.error, None);
    let stats = &outcome.stats;
    assert!(
        verdict(stats, None, 3.0).is_empty(),
        "{:?}",
        verdict(stats, None, 1.0)
    );
    assert_eq!(record.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(
        sorted(record.logins.lock().expect("lock").clone()),
        [1, 2, 3, 4, 5, 6]
    );
    assert!(stats.player_switches >= 6, "{}", stats.player_switches);
    assert_eq!(stats.lost(), 0, "a switch waits for the answers it is owed");
    assert_eq!(stats.failures(), 0);
}
