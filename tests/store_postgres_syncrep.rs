//! The PostgreSQL store on a primary with a synchronous standby that stops
//! acknowledging: a write that times out while its commit waits for the
//! standby must not become visible on the primary before the standby has
//! it. Were it visible (a commit whose wait was cancelled is committed on
//! the primary alone), the retry would take it for its own applied write,
//! and a failover to the standby would take it back: an acknowledged
//! change lost. Runs a primary and a standby of its own; says it skipped
//! when PostgreSQL is not installed.

use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{
    open_postgres, CasVersion, GroupCommit, NodeId, RecordWrite, RouteVersion, Store,
    WriteCondition, WriteError, WriteOutcome,
};
use routerd::testing::postgres_server::{PgServer, PgServerError};
use wire::ObjectKey;

const DATABASE: &str = "routerd";

/// The store's request timeout, and so its sessions' `statement_timeout`
/// (and twice it, `idle_in_transaction_session_timeout`).
const REQUEST_TIMEOUT_MS: u64 = 500;

/// A primary whose commits wait for its standby, and the standby, or None
/// (after saying why) when PostgreSQL is not installed.
fn servers() -> Option<(PgServer, PgServer)> {
    let skipped = |why: String| {
        println!("skipped: {why}");
        None
    };
    let primary = match PgServer::start() {
        Ok(server) => server,
        Err(PgServerError::Unavailable(why)) => return skipped(why),
        Err(error) => panic!("{error}"),
    };
    let sql = |statement: &str| primary.psql("postgres", statement).expect(statement);
    sql(&format!("CREATE DATABASE {DATABASE}"));
    let standby = match PgServer::standby_of(&primary) {
        Ok(server) => server,
        Err(PgServerError::Unavailable(why)) => return skipped(why),
        Err(error) => panic!("{error}"),
    };
    sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
    sql("SELECT pg_reload_conf()");
    wait_for(
        &primary,
        "postgres",
        "SELECT string_agg(sync_state, ',') FROM pg_stat_replication",
        "sync",
    );
    Some((primary, standby))
}

/// Polls `sql` (one value) on `server` until it prints `want`, for at most
/// ten seconds.
fn wait_for(server: &PgServer, database: &str, sql: &str, want: &str) {
    let started = Instant::now();
    loop {
        let got = server.psql(database, sql);
        if got.as_deref() == Ok(want) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waited for `{sql}` = {want}, last {got:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn key(id: u64) -> ObjectKey {
    ObjectKey::new(3, 0, id)
}

fn insert(id: u64) -> RecordWrite {
    RecordWrite {
        key: key(id),
        condition: WriteCondition::Absent,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: id,
        state: id.to_le_bytes().to_vec(),
    }
}

fn update(id: u64, expected: u64) -> RecordWrite {
    RecordWrite {
        condition: WriteCondition::CasEquals(CasVersion(expected)),
        owner_node: NodeId(2),
        route_version: RouteVersion(expected + 1),
        ..insert(id)
    }
}

/// The CAS versions of keys 1, 2 and 3 as `server` shows them to a plain
/// session: `cas1,cas2,cas3`, `-` for an absent key.
const VERSIONS: &str = "SELECT string_agg(coalesce(r.cas_version::text, '-'), ',' ORDER BY k.id) \
     FROM unnest(ARRAY[1, 2, 3]) AS k(id) LEFT JOIN routerd_routes AS r \
     ON r.type_id = 3 AND r.zone_id = 0 AND r.object_id = k.id";

/// A write that timed out is answered Indeterminate, or not sent at all.
fn assert_unknown_or_unavailable(answer: Result<Vec<WriteOutcome>, WriteError>, what: &str) {
    match answer {
        Ok(outcomes) => assert!(
            outcomes.iter().all(|o| *o == WriteOutcome::Indeterminate),
            "{what}: {outcomes:?}"
        ),
        Err(WriteError::Backend(_)) => {}
        Err(error) => panic!("{what}: {error}"),
    }
}

/// The standby stops acknowledging. A single write (committed at the end
/// of its statement) and a batch of two (an explicit `COMMIT`) time out
/// while their commits wait for it; they are answered Indeterminate, and a
/// plain session on the primary still shows the old records: the store
/// cancelled neither wait (it terminates a timed-out batch's backend only
/// when it is not committing), and neither the sessions'
/// `statement_timeout` nor their `idle_in_transaction_session_timeout`,
/// nor the store dropping those connections, cut them short. A retry of
/// the single write waits behind the first and is Indeterminate too. Once
/// the standby goes on, both commits finish, on both servers alike.
#[test]
fn a_timed_out_commit_waiting_for_the_standby_stays_invisible_until_the_standby_has_it() {
    let Some((primary, standby)) = servers() else {
        return;
    };
    let config = StoreConfig {
        backend: StoreBackend::Postgres,
        url: primary.url(DATABASE),
        request_timeout_ms: REQUEST_TIMEOUT_MS,
        pool_size: 2,
        ..StoreConfig::default()
    };
    let store = open_postgres(&config, GroupCommit::On).expect("open");
    let write = |store: &Store, write: RecordWrite| block_on(store.write(write)).map(|o| vec![o]);
    assert_eq!(
        write(&store, insert(1)).expect("insert"),
        vec![WriteOutcome::Applied(CasVersion(1))]
    );
    wait_for(&standby, DATABASE, VERSIONS, "1,-,-");

    let stalled = standby.stop_wal_receiver().expect("stop the standby");
    let started = Instant::now();
    assert_unknown_or_unavailable(write(&store, update(1, 1)), "single write");
    assert_unknown_or_unavailable(
        block_on(store.write_batch(vec![insert(2), insert(3)])),
        "batch",
    );
    // Both commits wait for the standby: committed nowhere yet.
    assert_eq!(primary.psql(DATABASE, VERSIONS).expect("read"), "1,-,-");
    wait_for(
        &primary,
        DATABASE,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'routerd' \
         AND wait_event = 'SyncRep'",
        "2",
    );
    // The retry waits on the row the first write still holds.
    assert_unknown_or_unavailable(write(&store, update(1, 1)), "retry");
    let load = block_on(store.load(key(1))).expect("load").expect("record");
    assert_eq!(load.cas_version, CasVersion(1));
    // Past both session timeouts, the commits still wait, unseen.
    let idle_timeout = Duration::from_millis(2 * REQUEST_TIMEOUT_MS);
    std::thread::sleep(
        (idle_timeout + Duration::from_millis(300)).saturating_sub(started.elapsed()),
    );
    assert_eq!(primary.psql(DATABASE, VERSIONS).expect("read"), "1,-,-");
    assert_eq!(standby.psql(DATABASE, VERSIONS).expect("read"), "1,-,-");

    stalled.resume();
    wait_for(&primary, DATABASE, VERSIONS, "2,1,1");
    wait_for(&standby, DATABASE, VERSIONS, "2,1,1");
    let record = block_on(store.load(key(1))).expect("load").expect("record");
    assert_eq!(
        (record.cas_version, record.owner_node),
        (CasVersion(2), NodeId(2))
    );
    assert_eq!(
        write(&store, update(1, 2)).expect("update"),
        vec![WriteOutcome::Applied(CasVersion(3))]
    );
}
