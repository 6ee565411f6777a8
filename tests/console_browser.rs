//! The console in a browser: headless Chromium (Debian's `chromium`,
//! driven by playwright-core from tests/browser) loads `/console/` of a
//! three-node cluster, shows three members up (node 1 with its requests/s,
//! p99 and error ratio), node 1's history charts moving under the test's
//! load, `player.incr` in the per-route table, the player type's calls in
//! the per-type table (`GET /calls-by-type`) and node 1's health, fits
//! the members table into 420 px, looks up a player and finds its session,
//! shows node 3 down after a `kill -9`, and a drain of node 2 started from
//! the page keeps its result on the page and ends with node 2 `left`; a
//! session gets the room message the page sends as the system, then is
//! kicked from the page: it reads `sys.kicked` and is closed.
//! tests/browser/console.mjs is the browser's side.
//!
//! The screenshots are written to `<target dir>/tmp/console-browser/`
//! (`CARGO_TARGET_TMPDIR`): 1-three-members.png, 2-charts-under-load.png,
//! 3-narrow-420px.png, 4-member-down.png, 5-drained.png,
//! 6-session-kicked.png (taken before the drain, numbered as added),
//! 12-calls-by-type.png (the per-type table; 7 to 11 are the second run's).
//!
//! A second run (`the_console_keeps_its_history_...`, script
//! tests/browser/console_ops.mjs) shows the charts filled from the nodes'
//! own history after a reload, the hottest objects, the sessions pages
//! back and forth, a player found on another node and pushed to, and a
//! room's members with who is online: 7-history-after-reload.png,
//! 8-hottest-objects.png, 9-sessions-paged.png, 10-found-and-pushed.png,
//! 11-room-members.png.
//!
//! .ci/run installs Chromium and playwright-core and exports
//! ROUTERD_CHROMIUM and ROUTERD_BROWSER_MODULES: without them the test
//! fails in CI and skips outside.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use support::cluster::{eventually, login_eventually, wait_members_up, LocalCluster};
use wire::client::{route, ErrorCode, FrameKind};

/// One browser run at a time: two clusters and two Chromiums at once on a
/// small machine would make each run's timings the other's.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The whole browser run, cluster start excluded.
const BROWSER_LIMIT: Duration = Duration::from_secs(75);

/// Chromium and playwright-core, or `None` when the test must skip.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let chromium = std::env::var_os("ROUTERD_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let modules = std::env::var_os("ROUTERD_BROWSER_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("tests/browser/node_modules"));
    let node = Command::new("node").arg("--version").output().is_ok();
    let missing = [
        (!chromium.is_file()).then(|| format!("no browser at {}", chromium.display())),
        (!modules.join("playwright-core").is_dir())
            .then(|| format!("no playwright-core in {}", modules.display())),
        (!node).then(|| "no node".to_string()),
    ];
    let missing: Vec<String> = missing.into_iter().flatten().collect();
    if missing.is_empty() {
        return Some((chromium, modules));
    }
    let why = missing.join("; ");
    assert!(
        std::env::var_os("CI").is_none(),
        "the browser test cannot run: {why} (.ci/run installs chromium and runs npm ci in tests/browser)"
    );
    eprintln!("skipped: {why} (apt-get install chromium; npm ci in tests/browser)");
    None
}

/// Where the screenshots go (see the module documentation).
fn screenshots() -> PathBuf {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-browser");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// A player's `player.incr` every 5 ms through `gateway` until stopped,
/// so the page has figures to show.
struct Load {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Load {
    fn start(gateway: std::net::SocketAddr, player: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let (mut client, _) = login_eventually(gateway, player, Duration::from_secs(10));
                let mut seq = 2;
                while !stop.load(Ordering::Relaxed) {
                    client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
                    seq += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        Load { stop, thread }
    }

    /// Stops it; whether it ran to the end (a call that timed out on a
    /// busy machine panics its thread).
    fn stop(self) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().is_ok()
    }
}

/// One of tests/browser's console scripts against `admin`'s console: its
/// lines are handed to `on_line` (which may answer on the script's stdin)
/// until it says `done` or `fail: ...`, or `BROWSER_LIMIT` passes.
/// Returns how it ended and everything it said.
fn run_console_script(
    script: &str,
    admin: std::net::SocketAddr,
    env: &[(&str, String)],
    mut on_line: impl FnMut(&str, &mut std::process::ChildStdin),
) -> (Result<(), String>, Vec<String>) {
    let (chromium, modules) = browser().expect("checked by the caller");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut command = Command::new("node");
    command
        .arg(&script)
        .env("ROUTERD_CONSOLE_URL", format!("http://{admin}/console/"))
        .env("ROUTERD_CHROMIUM", &chromium)
        .env("ROUTERD_BROWSER_MODULES", &modules)
        .env("ROUTERD_SCREENSHOTS", screenshots())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut driver = command.spawn().expect("node runs");
    let mut to_driver = driver.stdin.take().unwrap();
    let (said, lines) = std::sync::mpsc::channel();
    let stdout = driver.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if said.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut transcript = Vec::new();
    let outcome = loop {
        let left = BROWSER_LIMIT.saturating_sub(started.elapsed());
        let Ok(line) = lines.recv_timeout(left) else {
            break Err(format!("no end within {BROWSER_LIMIT:?}"));
        };
        transcript.push(line.clone());
        match line.as_str() {
            "done" => break Ok(()),
            fail if fail.starts_with("fail: ") => break Err(fail.to_string()),
            line => on_line(line, &mut to_driver),
        }
    };
    if outcome.is_err() {
        let _ = driver.kill();
    }
    let status = driver.wait().unwrap();
    let outcome = outcome.and_then(|()| {
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("the script exited {status}"))
    });
    (outcome, transcript)
}

/// Each of `wanted` is a line of `transcript`, and each screenshot of
/// `shots` was written.
fn assert_seen_and_shot(transcript: &[String], wanted: &[&str], shots: &[&str]) {
    for want in wanted {
        assert!(transcript.iter().any(|line| line == want), "{transcript:?}");
    }
    let dir = screenshots();
    for shot in shots {
        let bytes = std::fs::metadata(dir.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(bytes > 1000, "{shot}: {bytes} bytes");
    }
    eprintln!("screenshots in {}", dir.display());
}

#[test]
fn the_console_shows_members_a_kill_and_a_drain_started_from_the_page() {
    if browser().is_none() {
        return;
    }
    let _one = ONE_BROWSER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = LocalCluster::new();
    let one = cluster.start(1);
    let two = cluster.start(2);
    let three = cluster.start(3);
    wait_members_up(&one, &[2, 3]);
    // A player's requests through node 1, all along, so the page has
    // figures to show (requests/s, p99, error ratio).
    let load = Load::start(one.gateway, 77);

    // An idle session in room 5, which the page messages, then kicks.
    let (mut victim, _) = login_eventually(one.gateway, 88, Duration::from_secs(10));
    // A cluster just started may answer UNAVAILABLE for a moment (the
    // room's owner not yet reachable, a lease not yet admitted); a join
    // is safe to send again.
    let mut seq = 1;
    eventually(Duration::from_secs(10), "room 5 joined", || {
        seq += 1;
        let joined = victim.call(route::ROOM_JOIN, seq, &5u64.to_le_bytes());
        if joined.kind == FrameKind::Response {
            return Some(());
        }
        assert_eq!(
            joined.error_code(),
            ErrorCode::Unavailable as u16,
            "{joined:?}"
        );
        None
    });

    let mut three = Some(three);
    let (outcome, transcript) = run_console_script(
        "tests/browser/console.mjs",
        one.admin,
        &[],
        |line, to_driver| match line {
            "kill 3" => {
                three.take().expect("node 3 killed once").kill_9();
                writeln!(to_driver, "killed").unwrap();
            }
            // The room's message from the system (player 0) reached the
            // session in room 5 before the page goes on to kick it.
            "message sent" => {
                let message = victim.recv();
                assert_eq!(message.kind, FrameKind::Push, "{message:?}");
                assert_eq!(message.route_id, route::ROOM_MESSAGE, "{message:?}");
                assert_eq!(&message.body[..8], &5u64.to_le_bytes());
                assert_eq!(&message.body[8..16], &0u64.to_le_bytes());
                assert_eq!(&message.body[16..], b"hello from the operators");
                writeln!(to_driver, "received").unwrap();
            }
            _ => {}
        },
    );
    load.stop();
    if let Err(why) = outcome {
        panic!("{why}\nthe browser's side said:\n{}", transcript.join("\n"));
    }
    assert_seen_and_shot(
        &transcript,
        &[
            "seen: three members up, node 1 with requests/s, p99 and error ratio",
            "seen: the requests chart moves under load",
            "seen: player.incr per route and node 1's health",
            "seen: the members table fits 420 px",
            "seen: player 77's owner, saved counter and session",
            "seen: a message to room 5 sent from the page",
            "seen: player 88's session kicked from the page",
            "seen: node 3 down",
            "seen: the drain's result stays",
            "seen: node 2 left",
        ],
        &[
            "1-three-members.png",
            "2-charts-under-load.png",
            "3-narrow-420px.png",
            "4-member-down.png",
            "5-drained.png",
            "6-session-kicked.png",
        ],
    );
    // The drained node exits by itself, 0.
    let exit = two.wait_exit_within(Duration::from_secs(10));
    assert!(exit.success(), "node 2 after its drain: {exit}");
    // Why it was kicked, then the close.
    let kicked = victim.recv();
    assert_eq!(kicked.kind, FrameKind::Push, "{kicked:?}");
    assert_eq!(kicked.route_id, route::SYS_KICKED, "{kicked:?}");
    assert_eq!(kicked.body, b"closed by an operator");
    victim.expect_closed_within(Duration::from_secs(5));
    drop(one);
}

/// CSRF: a page of another origin, on the README's default endpoint (on
/// loopback, no token), sends `POST /log-level` with `mode: "no-cors"`
/// (no preflight, so the browser sends it): refused 403 on its `Origin`,
/// and the filter stays as it was. tests/browser/cross_origin.mjs is the
/// browser's side.
#[test]
fn a_page_of_another_origin_cannot_change_the_log_level() {
    let Some((chromium, modules)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "[node]\ndata_dir = {:?}\n",
        dir.path().display().to_string()
    );
    let node = support::ServeProcess::start(dir.path(), &body);
    let admin = node.admin;
    let filter = || {
        let answer = support::http::request(admin, "GET", "/log-level", &[], "");
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body
    };
    let refused = || {
        let answer = support::http::request(admin, "GET", "/metrics", &[], "");
        let series = "routerd_admin_refused_total{reason=\"origin\"} ";
        answer
            .body
            .lines()
            .find_map(|line| line.strip_prefix(series)?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {series} in the scrape"))
    };
    let before = filter();

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/cross_origin.mjs");
    let output = Command::new("node")
        .arg(&script)
        .env("ROUTERD_ADMIN_URL", format!("http://{admin}"))
        .env("ROUTERD_CHROMIUM", &chromium)
        .env("ROUTERD_BROWSER_MODULES", &modules)
        .output()
        .expect("node runs");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}: {said}", output.status);
    assert!(said.starts_with("sent from "), "{said}");

    // The browser sent it (and Origin with it): nothing changed, as it
    // was refused.
    assert_eq!(filter(), before, "{said}");
    assert_eq!(refused(), 1, "{said}");
    node.stop();
}

/// The console's history, hottest objects, sessions, push and rooms in a
/// browser, on two nodes: node 1 has sampled a load for 10 s before the
/// page opens, so after a reload its charts start before the page did;
/// player 41, busy, tops the hottest objects; node 1's 55 sessions page
/// forward and back; player 42, on node 2, is found from node 1's page
/// and pushed to (the test reads the `room.message` of room 0); room 9's
/// two members show online.
#[test]
fn the_console_keeps_its_history_finds_and_pushes_to_a_session_and_browses_a_room() {
    if browser().is_none() {
        return;
    }
    let _one = ONE_BROWSER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut cluster = LocalCluster::new();
    // The room browser shows members as saved: saved at each change.
    cluster.extra = "[services.room]\npersist = \"on_write\"\n".to_string();
    let one = cluster.start(1);
    let two = cluster.start(2);
    wait_members_up(&one, &[2]);
    wait_members_up(&two, &[1]);
    let load = Load::start(one.gateway, 41);
    // Room 9: player 42 (node 2's gateway) and player 43 (node 1's).
    let (mut found, _) = login_eventually(two.gateway, 42, Duration::from_secs(10));
    let (mut other, _) = login_eventually(one.gateway, 43, Duration::from_secs(10));
    for client in [&mut found, &mut other] {
        let joined = client.call(route::ROOM_JOIN, 2, &9u64.to_le_bytes());
        assert_eq!(joined.kind, FrameKind::Response, "{joined:?}");
    }
    // More than a page of sessions on node 1 (50 a page).
    let idle: Vec<_> = (100..153)
        .map(|player| login_eventually(one.gateway, player, Duration::from_secs(10)).0)
        .collect();
    // Node 1's history holds the load, and room 9's members are saved.
    let room_node =
        support::cluster::eventually(Duration::from_secs(20), "history and room 9", || {
            let history = support::cluster::get_json(one.admin, "/history");
            let sampled = history["samples"].as_array()?.len() >= 2;
            let room = support::cluster::get_json(one.admin, "/objects/room/9");
            let members = room["state"]["members"].as_array()?.len();
            (sampled && members == 2)
                .then(|| room["owner"].as_u64())
                .flatten()
        });

    let (outcome, transcript) = run_console_script(
        "tests/browser/console_ops.mjs",
        one.admin,
        &[("ROUTERD_ROOM_NODE", room_node.to_string())],
        |line, to_driver| {
            // The page's push to player 42's session on node 2.
            if line == "pushed" {
                let message = found.recv();
                assert_eq!(message.kind, FrameKind::Push, "{message:?}");
                assert_eq!(message.route_id, route::ROOM_MESSAGE, "{message:?}");
                assert_eq!(&message.body[..16], &[0u8; 16]);
                assert_eq!(&message.body[16..], b"hello, player 42");
                writeln!(to_driver, "received").unwrap();
            }
        },
    );
    // A load whose call timed out on a busy machine says so in its own
    // panic; the page's steps say what it missed.
    let loaded = load.stop();
    if let Err(why) = outcome {
        panic!(
            "{why} (the load ran to the end: {loaded})\nthe browser's side said:\n{}",
            transcript.join("\n")
        );
    }
    assert_seen_and_shot(
        &transcript,
        &[
            "seen: the charts start before the page, after a reload",
            "seen: player 41 the hottest object",
            "seen: node 1's sessions paged forward and back",
            "seen: player 42 found on node 2 and pushed to",
            "seen: room 9's two members online",
        ],
        &[
            "7-history-after-reload.png",
            "8-hottest-objects.png",
            "9-sessions-paged.png",
            "10-found-and-pushed.png",
            "11-room-members.png",
        ],
    );
    drop((idle, found, other, two, one));
}
