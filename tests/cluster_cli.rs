//! `routerd cluster status`, `routerd transfer` and `routerd drain`
//! against real nodes: what they print and how they exit.

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use support::cluster::{player_owner, wait_members_up, LocalCluster};

fn routerd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_routerd"))
        .args(args)
        .output()
        .expect("routerd runs")
}

fn text(output: &Output) -> (i32, String, String) {
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn status_transfer_and_drain_from_the_command_line() {
    let cluster = LocalCluster::new();
    let a = cluster.start(1);
    let b = cluster.start(2);
    wait_members_up(&a, &[2]);
    wait_members_up(&b, &[1]);
    let admin_a = a.admin.to_string();
    let admin_b = b.admin.to_string();
    let mut client = a.connect();
    client.login(7, 1);

    let (code, out, err) = text(&routerd(&["cluster", "status", "--admin", &admin_a]));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("node 1 (incarnation 1, up)"), "{out}");
    assert!(lines[1].starts_with("NODE  INCARNATION  STATE"), "{out}");
    assert!(
        lines[2].starts_with("1 ") && lines[2].contains(" self "),
        "{out}"
    );
    assert!(
        lines[3].starts_with("2 ") && lines[3].contains(&b.gateway.to_string()),
        "{out}"
    );
    assert!(lines[3].contains(" ms ago"), "the heartbeat's age: {out}");

    let owner = player_owner(a.admin, 7).unwrap().0;
    let other = 3 - owner;
    let to = other.to_string();
    let args = ["transfer", "--admin", &admin_a, "--id", "7", "--to", &to];
    let (code, out, err) = text(&routerd(&args));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("moved player 7 to node {other} (route version ")),
        "{out}"
    );
    let (code, out, _) = text(&routerd(&args));
    assert_eq!(
        (code, out.trim()),
        (0, format!("player 7 is on node {other} already").as_str())
    );
    let (code, _, err) = text(&routerd(&[
        "transfer", "--admin", &admin_b, "--id", "7", "--to", "42",
    ]));
    assert_eq!(code, 2, "a node id no member has: {err}");
    assert!(err.contains("player 7 not moved: unknown_node"), "{err}");
    let (code, _, err) = text(&routerd(&[
        "transfer", "--admin", &admin_b, "--id", "999", "--to", "1",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no_such_object"), "{err}");

    drop(client);
    let (code, out, err) = text(&routerd(&[
        "drain",
        "--admin",
        &admin_b,
        "--timeout-secs",
        "20",
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with(&format!("draining {admin_b}: ")), "{out}");
    assert!(
        out.trim_end()
            .ends_with("drained: the node left the cluster and stopped"),
        "{out}"
    );
    assert!(b.wait_exit_within(Duration::from_secs(10)).success());
    assert_eq!(
        player_owner(a.admin, 7).unwrap().0,
        1,
        "moved off the drained node"
    );

    let (code, _, err) = text(&routerd(&["drain", "--admin", &admin_b]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot connect"), "{err}");
}

/// A drain with nowhere to send its objects stops the node with them
/// (saved and released), which `routerd drain` reported as "drained",
/// exit 0: it says what was left, exit 3.
#[test]
fn a_drain_that_left_objects_behind_exits_3() {
    let cluster = LocalCluster::new();
    let alone = cluster.start(1);
    let admin = alone.admin.to_string();
    let mut client = alone.connect();
    client.login(7, 1);
    assert_eq!(player_owner(alone.admin, 7).unwrap().0, 1);
    drop(client);
    let (code, out, err) = text(&routerd(&[
        "drain",
        "--admin",
        &admin,
        "--timeout-secs",
        "20",
    ]));
    assert_eq!(code, 3, "{out}{err}");
    assert!(!out.contains("drained:"), "{out}");
    assert!(err.contains("objects not moved"), "{err}");
    assert!(err.contains("no other node takes objects"), "{err}");
    assert!(alone.wait_exit_within(Duration::from_secs(10)).success());
}
