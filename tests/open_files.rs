//! Every socket is a descriptor of one budget, `ulimit -n`. A node keeps
//! part of it for itself: client connections past what the limit leaves
//! them evict a silent one or are refused, so a flood of silent connections
//! cannot take the admin endpoint or a peer's link with it. The node raises its soft limit
//! to the hard one, and refuses to start, saying why, when the limit
//! leaves its clients almost nothing.

mod support;

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use support::cluster::{http_get, player_owner, wait_members_up, LocalCluster};
use support::{counter_of, prometheus, Client, ServeProcess};
use wire::client::{route, FrameKind};

/// Starts the command with an open-file limit of `soft` (and `hard`).
fn with_open_files(command: &mut Command, soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit is async-signal-safe and reads only `limit`, a
    // copy the closure owns.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

fn metric(node: &ServeProcess, name: &str) -> f64 {
    let (status, text) = http_get(node.admin, "/metrics");
    assert_eq!(status, 200, "{text}");
    let exposition = prometheus::parse(&text).unwrap();
    exposition.value(name, &[]).unwrap_or(0.0)
}

fn incr(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes()))
}

/// The command that starts node 1 of `cluster` with an open-file limit of
/// `soft` (and `hard`).
fn node_with_open_files(cluster: &LocalCluster, soft: u64, hard: u64) -> Command {
    let dir = cluster.dir().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = ServeProcess::command(&dir, &cluster.body(1, "the test cluster's secret"));
    with_open_files(&mut command, soft, hard);
    command
}

#[test]
fn a_flood_of_client_connections_leaves_the_admin_endpoint_and_the_links_working() {
    let cluster = LocalCluster::new();
    // Two cores keep 256 + 2 * 80 + 1024 / 8 = 544: 480 sessions at most.
    let a = ServeProcess::spawn(node_with_open_files(&cluster, 1024, 1024));
    a.assert_logged(&[
        "client sessions take what the open-file limit",
        "sessions_cap=480",
    ]);
    assert_eq!(metric(&a, "process_max_fds"), 1024.0);

    // Player 7 lives on node 1.
    let mut first = a.connect();
    first.login(7, 1);
    assert_eq!(incr(&mut first, 2), 1);

    // More silent connections than the process has descriptors: past the
    // cap each evicts an older silent one (never the logged-in session) or
    // is refused, and the sessions stay at the cap.
    let flood: Vec<TcpStream> = (0..1200)
        .map(|_| TcpStream::connect(a.gateway).unwrap())
        .collect();
    support::cluster::eventually(Duration::from_secs(10), "the flood turned away", || {
        let refused = metric(&a, "routerd_gateway_sessions_refused_total");
        let evicted = metric(&a, "routerd_gateway_unauthenticated_evicted_total");
        (refused + evicted >= (1200 - 479) as f64).then_some(())
    });
    assert_eq!(metric(&a, "routerd_gateway_sessions_active"), 480.0);
    // The admin endpoint still answers (every scrape above), and the node
    // keeps room under its limit.
    assert!(metric(&a, "process_open_fds") < 1024.0 - 64.0);

    // A peer that starts now links to node 1, and node 1 back to it: the
    // player's requests through node 2 are served on node 1.
    let b = cluster.start(2);
    wait_members_up(&a, &[2]);
    wait_members_up(&b, &[1]);
    let mut second = b.connect();
    second.login(7, 1);
    let kicked = first.recv();
    assert_eq!(
        (kicked.kind, kicked.route_id),
        (FrameKind::Push, route::SYS_KICKED),
        "{kicked:?}"
    );
    assert_eq!(incr(&mut second, 2), 2);
    assert_eq!(player_owner(b.admin, 7).map(|(node, _)| node), Some(1));
    assert!(metric(&a, "routerd_cluster_link_frames_received_total") >= 1.0);

    // Once the flood ends, clients are served on node 1 again.
    drop(flood);
    support::cluster::eventually(Duration::from_secs(10), "the flood closed", || {
        (metric(&a, "routerd_gateway_sessions_active") == 0.0).then_some(())
    });
    let mut third = a.connect();
    third.login(8, 1);
    assert_eq!(incr(&mut third, 2), 1);
}

#[test]
fn the_node_raises_its_soft_open_file_limit_to_the_hard_one() {
    let cluster = LocalCluster::new();
    let node = ServeProcess::spawn(node_with_open_files(&cluster, 1024, 4096));
    assert_eq!(metric(&node, "process_max_fds"), 4096.0);
    // 4096 leaves 4096 - (256 + 160 + 512) = 3168 sessions.
    node.assert_logged(&["sessions_cap=3168"]);
}

#[test]
fn a_limit_that_leaves_clients_too_few_sessions_refuses_the_start_with_the_reason() {
    let cluster = LocalCluster::new();
    // Two cores keep 256 + 160 + 64 of 512: 32 left, under 64.
    let command = node_with_open_files(&cluster, 512, 512);
    let (status, stderr) = support::run_to_exit(command, Duration::from_secs(20))
        .expect("a node with 512 open files started");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the open-file limit is 512 (ulimit -n)") && stderr.contains("32 for"),
        "{stderr}"
    );
}
