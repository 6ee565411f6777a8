//! Heartbeats are not starved by object traffic: while 256 writers keep the
//! object lane saturated with CAS writes, membership writes (a heartbeat
//! loop) answer with a p99 under a quarter of the default heartbeat
//! interval. SQLite always; PostgreSQL on a throwaway server when one can
//! be started (says it skipped otherwise), where another session also
//! locks every writer's row for `SPIKE` in the middle of the run: every
//! object group commit waits for it, and no heartbeat may. `bench/heartbeat_lane.sh` is the
//! long version, with the baseline of a shared lane.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{
    open_postgres, open_sqlite, GroupCommit, MemberCondition, MemberOutcome, MemberRow,
    MemberState, MemberVersion, MemberWrite, NodeId, RecordWrite, RouteVersion, Store,
    WriteCondition, WriteOutcome,
};
use routerd::testing::postgres_server::{PgServer, PgServerError};
use wire::ObjectKey;

/// Concurrent object writers, as the load.
const WRITERS: usize = 256;
/// How long the load runs with heartbeats measured.
const MEASURE: Duration = Duration::from_secs(3);
/// Between two heartbeats of the measured loop: more samples than the
/// real 500 ms interval gives in a few seconds, the same operation.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(20);
/// A quarter of the default `cluster.heartbeat_interval_ms` (500).
const HEARTBEAT_P99_MAX: Duration = Duration::from_millis(125);
/// The PostgreSQL lock spike, and the longest a heartbeat may take while
/// it lasts: a heartbeat stuck behind the locked rows would take it all.
const SPIKE: Duration = Duration::from_millis(1000);
const HEARTBEAT_MAX_IN_SPIKE: Duration = Duration::from_millis(500);

/// Object requests queued at some point of the run at least: the object
/// lane was saturated, not idle.
const QUEUE_DEPTH_MIN: usize = WRITERS / 4;

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

/// What one run measured.
struct Run {
    heartbeats: Vec<Duration>,
    object_writes: u64,
    queue_depth_max: usize,
}

fn percentile(samples: &mut [Duration], fraction: f64) -> Duration {
    samples.sort();
    let rank = ((samples.len() as f64) * fraction).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Saturates `store`'s object lane with `WRITERS` CAS loops (tasks on one
/// tokio thread, as the tasks of a core) and measures a heartbeat loop on
/// another thread.
fn run(store: &Store, zone: u32, spike: Option<std::process::Command>) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writers = {
        let (store, stop, writes) = (store.clone(), stop.clone(), writes.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let tasks: Vec<_> = (0..WRITERS)
                    .map(|writer| {
                        let (store, stop, writes) = (store.clone(), stop.clone(), writes.clone());
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
                                    other => panic!("a CAS write gave {other:?}"),
                                }
                                writes.fetch_add(1, Ordering::Relaxed);
                                round += 1;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("writer");
                }
            });
        })
    };
    // Let the writers fill the queue before measuring.
    std::thread::sleep(Duration::from_millis(300));
    let probe = store.probe();
    let node = 1000 + u64::from(zone);
    let mut version = match block_on(store.write_member(member(node, 0, MemberCondition::Absent))) {
        Ok(MemberOutcome::Applied(version)) => version,
        other => panic!("the first member write gave {other:?}"),
    };
    let mut heartbeats = Vec::new();
    let mut queue_depth_max = 0;
    let started = Instant::now();
    let mut beat = 1;
    let spiker = spike.map(|mut psql| {
        std::thread::spawn(move || {
            std::thread::sleep(MEASURE / 3);
            // In the store's lock order (by key), so the spike and a batch
            // wait for each other one way only.
            let sql = format!(
                "BEGIN; SELECT count(*) FROM (SELECT 1 FROM routerd_routes WHERE zone_id = {zone} \
                 ORDER BY type_id, zone_id, object_id FOR UPDATE) AS locked; \
                 SELECT pg_sleep({}); COMMIT;",
                SPIKE.as_secs_f64()
            );
            let output = psql.args(["-c", &sql]).output().expect("psql runs");
            assert!(
                output.status.success(),
                "the spike: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        })
    });
    while started.elapsed() < MEASURE {
        queue_depth_max = queue_depth_max.max(probe.queue_depth());
        let sent = Instant::now();
        let condition = MemberCondition::VersionEquals(version);
        match block_on(store.write_member(member(node, beat, condition))) {
            Ok(MemberOutcome::Applied(next)) => version = next,
            other => panic!("heartbeat {beat} gave {other:?}"),
        }
        heartbeats.push(sent.elapsed());
        beat += 1;
        std::thread::sleep(HEARTBEAT_EVERY);
    }
    if let Some(spiker) = spiker {
        spiker.join().expect("spike");
    }
    stop.store(true, Ordering::Relaxed);
    writers.join().expect("writers");
    Run {
        heartbeats,
        object_writes: writes.load(Ordering::Relaxed),
        queue_depth_max,
    }
}

fn check(backend: &str, mut run: Run) -> Duration {
    let p50 = percentile(&mut run.heartbeats, 0.50);
    let p99 = percentile(&mut run.heartbeats, 0.99);
    let max = percentile(&mut run.heartbeats, 1.0);
    println!(
        "{backend}: {} heartbeats, p50 {p50:?}, p99 {p99:?}, max {max:?}; {} object writes; \
         object queue depth up to {}",
        run.heartbeats.len(),
        run.object_writes,
        run.queue_depth_max
    );
    assert!(
        run.queue_depth_max >= QUEUE_DEPTH_MIN,
        "{backend}: the object lane was not saturated (queue depth up to {})",
        run.queue_depth_max
    );
    assert!(
        run.object_writes > 0,
        "{backend}: no object write completed"
    );
    assert!(
        p99 < HEARTBEAT_P99_MAX,
        "{backend}: heartbeat p99 {p99:?} is not under {HEARTBEAT_P99_MAX:?}"
    );
    max
}

#[test]
fn sqlite_heartbeats_are_not_starved_by_object_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig::default();
    let store = open_sqlite(&dir.path().join("lane.db"), &config, GroupCommit::On).expect("open");
    check("sqlite", run(&store, 1, None));
}

#[test]
fn postgres_heartbeats_are_not_starved_by_object_writes() {
    let server = match PgServer::start() {
        Ok(server) => server,
        Err(PgServerError::Unavailable(why)) => {
            println!("skipped: {why}");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    let config = StoreConfig {
        backend: StoreBackend::Postgres,
        url: server.url("postgres"),
        ..StoreConfig::default()
    };
    let store = open_postgres(&config, GroupCommit::On).expect("open");
    let max = check(
        "postgres",
        run(&store, 2, Some(server.psql_command("postgres"))),
    );
    assert!(
        max < HEARTBEAT_MAX_IN_SPIKE,
        "a heartbeat took {max:?} while the object rows were locked for {SPIKE:?}"
    );
}
