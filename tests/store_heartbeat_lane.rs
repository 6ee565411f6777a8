//! Heartbeats are not starved by object traffic: while 256 writers keep the
//! object lane saturated with CAS writes, membership writes (a heartbeat
//! loop) answer with a p99 under a quarter of the default heartbeat
//! interval. SQLite always; PostgreSQL on a throwaway server when one can
//! be started (says it skipped otherwise), where another session also
//! locks every writer's row for `SPIKE` in the middle of the run: every
//! object group commit waits for it, and no heartbeat may.
//! `bench/heartbeat_lane.sh` is the long version, with the baseline of a
//! shared lane; both run `routerd::testing::heartbeat_lane`.

use std::time::Duration;

use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{open_postgres, open_sqlite, GroupCommit, Store};
use routerd::testing::heartbeat_lane::{measure, Load, Measured, Psql, WRITERS};
use routerd::testing::postgres_server::{PgServer, PgServerError};

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

fn run(store: &Store, zone: u32, spike: Option<Psql<'_>>) -> Measured {
    measure(
        store,
        &Load {
            zone,
            // Let the writers fill the queue before measuring.
            warmup: Duration::from_millis(300),
            measure: MEASURE,
            heartbeat_every: HEARTBEAT_EVERY,
            spike: spike.map(|psql| (psql, SPIKE)),
        },
    )
}

fn check(backend: &str, run: &Measured) -> Duration {
    let p50 = run.percentile(0.50);
    let p99 = run.percentile(0.99);
    let max = run.percentile(1.0);
    println!(
        "{backend}: {} heartbeats, p50 {p50:?}, p99 {p99:?}, max {max:?}; {} object writes; \
         object queue depth up to {}",
        run.heartbeats.len(),
        run.object_writes,
        run.queue_depth_max
    );
    assert_eq!(run.spike_error, None, "{backend}: the spike failed");
    assert_eq!(
        run.heartbeats_failed, 0,
        "{backend}: heartbeats were not applied"
    );
    assert_eq!(
        run.object_writes_failed, 0,
        "{backend}: object CAS writes were not applied"
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
    check("sqlite", &run(&store, 1, None));
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
    let psql = |sql: &str| server.psql("postgres", sql).map(drop);
    let max = check("postgres", &run(&store, 2, Some(&psql)));
    assert!(
        max < HEARTBEAT_MAX_IN_SPIKE,
        "a heartbeat took {max:?} while the object rows were locked for {SPIKE:?}"
    );
}
