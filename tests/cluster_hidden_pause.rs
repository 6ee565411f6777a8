//! A pause no clock counts: node 1 runs under libfaketime, is stopped
//! (`SIGSTOP`) past `down_after_ms`, and its clocks are set back by the
//! length of the stop before it resumes, so none of them shows it. Node 2
//! declares it down and takes its player over meanwhile. When node 1
//! resumes, a read queued on its session while it was stopped must not be
//! answered from its old copy (the kernel's timer counted the pause, and
//! node 1 serves nothing until a heartbeat sent after it applies).
//! Skipped, saying so, where libfaketime is not installed (Debian's
//! `faketime` package).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::cluster::{login_eventually, player_owner, wait_members_up, LocalCluster};
use support::{counter_of, ServeProcess};
use wire::client::{route, FrameKind};

fn libfaketime() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("ROUTERD_LIBFAKETIME").map(PathBuf::from),
        Some("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into()),
        Some("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1".into()),
        Some("/usr/lib/faketime/libfaketime.so.1".into()),
    ];
    candidates.into_iter().flatten().find(|path| path.exists())
}

/// Starts node `id` of `cluster` with both sessions of a player kept (the
/// new one must not kick the old), `wrap` adding to its command.
fn start(
    cluster: &LocalCluster,
    id: u64,
    wrap: impl FnOnce(&mut std::process::Command),
) -> ServeProcess {
    let mut command = cluster.command_with_auth(id, "duplicate_login = \"multi\"\n");
    wrap(&mut command);
    ServeProcess::spawn(command)
}

#[test]
fn a_pause_hidden_from_every_clock_serves_nothing_stale_after_a_takeover() {
    let Some(library) = libfaketime() else {
        println!("skipped: libfaketime is not installed (apt-get install faketime)");
        return;
    };
    let cluster = LocalCluster::new();
    let offset_file = cluster.dir().join("faketime-offset");
    std::fs::write(&offset_file, "+0\n").unwrap();
    // Node 1 under libfaketime: every clock read goes through the offset
    // file, read again at each call.
    let faked = start(&cluster, 1, |command| {
        command
            .env("LD_PRELOAD", &library)
            .env("FAKETIME_TIMESTAMP_FILE", &offset_file)
            .env("FAKETIME_NO_CACHE", "1");
    });
    let other = start(&cluster, 2, |_| {});
    wait_members_up(&faked, &[2]);
    wait_members_up(&other, &[1]);
    // A player node 1 owns, with a session on node 1.
    let (player, mut old_session) = (1..64)
        .find_map(|player| {
            let (client, _) = login_eventually(faked.gateway, player, Duration::from_secs(10));
            let owner = player_owner(faked.admin, player)?;
            (owner.0 == 1).then_some((player, client))
        })
        .expect("node 1 owns some player");
    for seq in 2..5 {
        counter_of(&old_session.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes()));
    }
    // Stopped for exactly `hidden` seconds; node 2 declares it down and
    // takes the player over, acknowledging two more increments.
    let hidden = 4;
    let stopped = Instant::now();
    faked.freeze();
    let (mut new_session, _) = login_eventually(other.gateway, player, Duration::from_secs(3));
    counter_of(&new_session.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes()));
    let acknowledged = counter_of(&new_session.call(route::PLAYER_INCR, 3, &1i64.to_le_bytes()));
    assert_eq!(
        acknowledged, 5,
        "node 2 claimed the player from its last save"
    );
    // A read on the old session, queued while node 1 is stopped.
    old_session.send(route::PLAYER_GET, 10, &[]);
    let resume_at = stopped + Duration::from_secs(hidden);
    assert!(Instant::now() < resume_at, "the takeover took too long");
    std::thread::sleep(resume_at - Instant::now());
    // Every clock of node 1 set back by the stop, then resumed.
    std::fs::write(&offset_file, format!("-{hidden}\n")).unwrap();
    faked.thaw();
    let reply = old_session.recv();
    if reply.kind == FrameKind::Response {
        let read = counter_of(&reply);
        assert!(
            read >= acknowledged,
            "a stale read after the takeover: {read} < {acknowledged} acknowledged on node 2"
        );
    }
}
