//! Heartbeat latency while 256 writers saturate the store, with membership
//! in the object queue and group commit (`shared`, the lane layout before
//! the membership lane: the baseline) and on its own lane (`own`), measured
//! in the same run on the same store kind and printed as a ratio.
//!
//! The load is `routerd::testing::heartbeat_lane`'s, which
//! tests/store_heartbeat_lane.rs bounds: writers are tasks on one tokio
//! thread, as the tasks of a core, each advancing its own key by CAS; the
//! heartbeat loop runs on another thread, a CAS on its member row's
//! version every `HEARTBEAT_EVERY_MS`, as the membership agent does every
//! `cluster.heartbeat_interval_ms`, only more often, for more samples.
//! This bench also counts the heartbeats slower than the agent's
//! heartbeat deadline (3/4 of the 500 ms interval) and than
//! `fence_after_ms - heartbeat_interval_ms` (1500 ms), past which a node
//! whose heartbeats all took that long would fence.
//!
//! On PostgreSQL a second pair of cases adds a latency spike on the object
//! rows: another session locks every writer's row for `SPIKE_MS` in the
//! middle of the run (as a stalled transaction of another node would), so
//! every object group commit waits for it. A heartbeat in such a batch
//! waits as long; a heartbeat on its own lane does not.
//!
//! `heartbeat_lane sqlite|postgres [SECONDS]` (default 10 per case);
//! PostgreSQL runs on `ROUTERD_POSTGRES_URL` when set, else on a throwaway
//! server of its own. `bench/heartbeat_lane.sh` runs both.

use std::sync::Arc;
use std::time::Duration;

use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{open_postgres_lanes, open_sqlite_lanes, GroupCommit, MemberLane, Store};
use routerd::testing::heartbeat_lane::{measure, Load, Measured, WRITERS};
use routerd::testing::postgres_server::PgServer;

const HEARTBEAT_EVERY_MS: u64 = 20;
/// The defaults of `cluster.heartbeat_interval_ms` and `fence_after_ms`.
const HEARTBEAT_INTERVAL_MS: u64 = 500;
const FENCE_AFTER_MS: u64 = 2000;
/// The goal: a heartbeat p99 under a quarter of the interval.
const P99_GOAL_MS: u64 = HEARTBEAT_INTERVAL_MS / 4;
const WARMUP: Duration = Duration::from_millis(500);
/// How long the spike holds the object rows' locks: past
/// `fence_after_ms - heartbeat_interval_ms`, so a heartbeat stuck behind
/// it for the whole spike is one after which a node would fence.
const SPIKE_MS: u64 = 2000;

/// Runs one SQL text through psql against the bench's PostgreSQL.
type Psql = dyn Fn(&str) -> Result<(), String> + Send + Sync;

/// Opens a fresh store of the chosen backend, membership on `MemberLane`;
/// the name tells the cases' SQLite files apart.
type OpenStore = dyn Fn(MemberLane, &str) -> Store;

fn run(store: &Store, zone: u32, seconds: u64, spike: Option<&Psql>) -> Measured {
    let measured = measure(
        store,
        &Load {
            zone,
            warmup: WARMUP,
            measure: Duration::from_secs(seconds),
            heartbeat_every: Duration::from_millis(HEARTBEAT_EVERY_MS),
            spike: spike.map(|psql| (psql as _, Duration::from_millis(SPIKE_MS))),
        },
    );
    if let Some(error) = &measured.spike_error {
        eprintln!("the spike failed: {error}");
    }
    measured
}

fn report(lane: &str, measured: &Measured) -> Duration {
    let sorted = &measured.heartbeats;
    let p50 = measured.percentile(0.50);
    let p99 = measured.percentile(0.99);
    let max = measured.percentile(1.0);
    let deadline = Duration::from_millis(HEARTBEAT_INTERVAL_MS * 3 / 4);
    let fence = Duration::from_millis(FENCE_AFTER_MS - HEARTBEAT_INTERVAL_MS);
    let late = sorted.iter().filter(|d| **d > deadline).count();
    let fencing = sorted.iter().filter(|d| **d > fence).count();
    println!(
        "  {lane:>6}: heartbeat p50 {:8.2} ms  p99 {:8.2} ms  max {:8.2} ms  ({} samples, {} \
         failed, {late} over the {} ms heartbeat deadline, {fencing} over {} ms); object \
         writes {:.0}/s ({} failed), object queue up to {}",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        sorted.len(),
        measured.heartbeats_failed,
        deadline.as_millis(),
        fence.as_millis(),
        measured.object_writes_per_sec,
        measured.object_writes_failed,
        measured.queue_depth_max,
    );
    p99
}

fn compare(before: Duration, after: Duration) {
    println!(
        "  p99 own/shared = {:.3} ({:.2} ms / {:.2} ms); goal p99 < {P99_GOAL_MS} ms: {}",
        after.as_secs_f64() / before.as_secs_f64(),
        after.as_secs_f64() * 1e3,
        before.as_secs_f64() * 1e3,
        if after < Duration::from_millis(P99_GOAL_MS) {
            "met"
        } else {
            "NOT met"
        }
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "sqlite".to_string());
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("routerd-heartbeat-lane-{}", std::process::id()));
    let mut server = None;
    let mut psql: Option<Arc<Psql>> = None;
    let open: Box<OpenStore> = match backend.as_str() {
        "sqlite" => {
            std::fs::create_dir_all(&dir).expect("bench directory");
            let dir = dir.clone();
            Box::new(move |lane, name| {
                let config = StoreConfig::default();
                let path = dir.join(format!("{name}.db"));
                open_sqlite_lanes(&path, &config, GroupCommit::On, lane).expect("open sqlite")
            })
        }
        "postgres" => {
            let url = match std::env::var("ROUTERD_POSTGRES_URL") {
                Ok(url) => url,
                Err(_) => {
                    let started = PgServer::start().expect("a throwaway PostgreSQL server");
                    let url = started.url("postgres");
                    server = Some(Arc::new(started));
                    url
                }
            };
            psql = match (&server, std::env::var_os("ROUTERD_PG_BIN")) {
                (Some(server), _) => {
                    let server = server.clone();
                    Some(Arc::new(move |sql: &str| {
                        server.psql("postgres", sql).map(drop)
                    }))
                }
                (None, Some(bin)) => {
                    let (url, bin) = (url.clone(), std::path::PathBuf::from(bin));
                    Some(Arc::new(move |sql: &str| {
                        let output = std::process::Command::new(bin.join("psql"))
                            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql, &url])
                            .output()
                            .map_err(|error| format!("psql: {error}"))?;
                        if output.status.success() {
                            Ok(())
                        } else {
                            Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
                        }
                    }))
                }
                (None, None) => None,
            };
            Box::new(move |lane, _| {
                let config = StoreConfig {
                    backend: StoreBackend::Postgres,
                    url: url.clone(),
                    ..StoreConfig::default()
                };
                open_postgres_lanes(&config, GroupCommit::On, lane).expect("open postgres")
            })
        }
        other => {
            eprintln!("usage: heartbeat_lane sqlite|postgres [SECONDS] (not {other:?})");
            std::process::exit(2);
        }
    };
    println!(
        "== {backend}: heartbeat write latency under {WRITERS} CAS writers, {seconds} s a case, \
         a heartbeat every {HEARTBEAT_EVERY_MS} ms"
    );
    // Distinct zones: each case writes keys and a member row of its own.
    let before = {
        let store = open(MemberLane::Shared, "shared");
        report("shared", &run(&store, 10, seconds, None))
    };
    let after = {
        let store = open(MemberLane::Own, "own");
        report("own", &run(&store, 11, seconds, None))
    };
    compare(before, after);
    match psql {
        Some(psql) => {
            println!("== {backend}, with a {SPIKE_MS} ms lock on every writer's row a third in");
            let before = {
                let store = open(MemberLane::Shared, "shared-spike");
                report("shared", &run(&store, 12, seconds, Some(&*psql)))
            };
            let after = {
                let store = open(MemberLane::Own, "own-spike");
                report("own", &run(&store, 13, seconds, Some(&*psql)))
            };
            compare(before, after);
        }
        None if backend == "postgres" => {
            println!("  (the spike cases need psql: ROUTERD_PG_BIN, or no ROUTERD_POSTGRES_URL)")
        }
        None => {}
    }
    drop(server);
    drop(std::fs::remove_dir_all(&dir));
}
