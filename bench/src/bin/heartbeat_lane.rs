//! Heartbeat latency while 256 writers saturate the store, with membership
//! in the object queue and group commit (`shared`, the lane layout before
//! the membership lane: the baseline) and on its own lane (`own`), measured
//! in the same run on the same store kind and printed as a ratio.
//!
//! Writers are tasks on one tokio thread, as the tasks of a core: each
//! owns one key and advances it by CAS, awaiting each answer before its
//! next write. The heartbeat loop runs on another thread, a CAS on its
//! member row's version every `HEARTBEAT_EVERY_MS`, as the membership
//! agent does every `cluster.heartbeat_interval_ms`, only more often, for
//! more samples. It also counts the heartbeats slower than the agent's
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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{
    open_postgres_lanes, open_sqlite_lanes, GroupCommit, MemberCondition, MemberLane,
    MemberOutcome, MemberRow, MemberState, MemberVersion, MemberWrite, NodeId, RecordWrite,
    RouteVersion, Store, WriteCondition, WriteOutcome,
};
use routerd::testing::postgres_server::PgServer;
use wire::ObjectKey;

const WRITERS: usize = 256;
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

fn route_write(key: ObjectKey, condition: WriteCondition, round: u64) -> RecordWrite {
    RecordWrite {
        key,
        condition,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(round),
        save_timepoint_ms: round,
        state: vec![7; 64],
    }
}

fn member(node: u64, heartbeat: u64, condition: MemberCondition) -> MemberWrite {
    MemberWrite {
        condition,
        row: MemberRow {
            node_id: NodeId(node),
            incarnation: 1,
            state: MemberState::Up,
            heartbeat,
            gateway: "127.0.0.1:1".to_string(),
            admin: "127.0.0.1:2".to_string(),
            cluster: Vec::new(),
            core_count: 1,
            actors: Vec::new(),
            version: MemberVersion(0),
        },
    }
}

struct Measured {
    heartbeats: Vec<Duration>,
    failed: u64,
    writes_per_sec: f64,
}

/// Opens a fresh store of the chosen backend, membership on `MemberLane`;
/// the name tells the cases' SQLite files apart.
type OpenStore = dyn Fn(MemberLane, &str) -> Store;

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn measure(store: &Store, zone: u32, seconds: u64, spike: Option<Arc<Psql>>) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writers = {
        let (store, stop, counting, writes) = (
            store.clone(),
            stop.clone(),
            counting.clone(),
            writes.clone(),
        );
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async move {
                let tasks: Vec<_> = (0..WRITERS)
                    .map(|writer| {
                        let (store, stop, counting, writes) = (
                            store.clone(),
                            stop.clone(),
                            counting.clone(),
                            writes.clone(),
                        );
                        let key = ObjectKey::new(1, zone, writer as u64);
                        tokio::spawn(async move {
                            let first = route_write(key, WriteCondition::Absent, 0);
                            let Ok(WriteOutcome::Applied(mut cas)) = store.write(first).await
                            else {
                                panic!("the first write of {key:?} was not applied");
                            };
                            let mut round = 1;
                            while !stop.load(Ordering::Relaxed) {
                                let write = route_write(key, WriteCondition::CasEquals(cas), round);
                                match store.write(write).await {
                                    Ok(WriteOutcome::Applied(version)) => cas = version,
                                    // Timed out behind the spike, say: the
                                    // record tells where the key stands.
                                    _ => {
                                        if let Ok(Some(record)) = store.load(key).await {
                                            cas = record.cas_version;
                                        }
                                    }
                                }
                                if counting.load(Ordering::Relaxed) {
                                    writes.fetch_add(1, Ordering::Relaxed);
                                }
                                round += 1;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("writer task");
                }
            });
        })
    };
    std::thread::sleep(WARMUP);
    let node = 1000 + u64::from(zone);
    let mut version = match block_on(store.write_member(member(node, 0, MemberCondition::Absent))) {
        Ok(MemberOutcome::Applied(version)) => version,
        other => panic!("the first member write gave {other:?}"),
    };
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let spiker = spike.map(|psql| {
        let at = Duration::from_secs(seconds) / 3;
        std::thread::spawn(move || {
            std::thread::sleep(at);
            // In the store's lock order (by key), so that the spike waits
            // for a batch or a batch for it, never both.
            let sql = format!(
                "BEGIN; SELECT count(*) FROM (SELECT 1 FROM routerd_routes WHERE zone_id = {zone} \
                 ORDER BY type_id, zone_id, object_id FOR UPDATE) AS locked; \
                 SELECT pg_sleep({}); COMMIT;",
                SPIKE_MS as f64 / 1000.0
            );
            if let Err(error) = psql(&sql) {
                eprintln!("the spike failed: {error}");
            }
        })
    });
    let (mut heartbeats, mut failed, mut beat) = (Vec::new(), 0, 1);
    while started.elapsed() < Duration::from_secs(seconds) {
        let sent = Instant::now();
        let condition = MemberCondition::VersionEquals(version);
        match block_on(store.write_member(member(node, beat, condition))) {
            Ok(MemberOutcome::Applied(next)) => version = next,
            // A timed-out heartbeat: its row may have moved; read it back
            // so the loop goes on, and count it.
            _ => {
                failed += 1;
                let rows = block_on(store.poll_members(vec![NodeId(node)]))
                    .map(|poll| poll.rows)
                    .unwrap_or_default();
                if let Some(row) = rows.iter().find(|row| row.node_id == NodeId(node)) {
                    version = row.version;
                }
            }
        }
        heartbeats.push(sent.elapsed());
        beat += 1;
        std::thread::sleep(Duration::from_millis(HEARTBEAT_EVERY_MS));
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(spiker) = spiker {
        spiker.join().expect("spike");
    }
    counting.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    writers.join().expect("writers");
    heartbeats.sort();
    Measured {
        heartbeats,
        failed,
        writes_per_sec: writes.load(Ordering::Relaxed) as f64 / elapsed,
    }
}

fn report(lane: &str, measured: &Measured) -> Duration {
    let sorted = &measured.heartbeats;
    let p50 = percentile(sorted, 0.50);
    let p99 = percentile(sorted, 0.99);
    let max = *sorted.last().expect("samples");
    let deadline = Duration::from_millis(HEARTBEAT_INTERVAL_MS * 3 / 4);
    let fence = Duration::from_millis(FENCE_AFTER_MS - HEARTBEAT_INTERVAL_MS);
    let late = sorted.iter().filter(|d| **d > deadline).count();
    let fencing = sorted.iter().filter(|d| **d > fence).count();
    println!(
        "  {lane:>6}: heartbeat p50 {:8.2} ms  p99 {:8.2} ms  max {:8.2} ms  ({} samples, {} \
         failed, {late} over the {} ms heartbeat deadline, {fencing} over {} ms); object \
         writes {:.0}/s",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        sorted.len(),
        measured.failed,
        deadline.as_millis(),
        fence.as_millis(),
        measured.writes_per_sec,
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
        report("shared", &measure(&store, 10, seconds, None))
    };
    let after = {
        let store = open(MemberLane::Own, "own");
        report("own", &measure(&store, 11, seconds, None))
    };
    compare(before, after);
    match psql {
        Some(psql) => {
            println!("== {backend}, with a {SPIKE_MS} ms lock on every writer's row a third in");
            let before = {
                let store = open(MemberLane::Shared, "shared-spike");
                report("shared", &measure(&store, 12, seconds, Some(psql.clone())))
            };
            let after = {
                let store = open(MemberLane::Own, "own-spike");
                report("own", &measure(&store, 13, seconds, Some(psql)))
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
