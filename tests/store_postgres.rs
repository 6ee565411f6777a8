//! PostgreSQL-specific behaviour: schema versioning, a clear error for a
//! server that is not there, and CAS across two processes sharing one
//! database. Runs on a throwaway server of its own; says it skipped when
//! PostgreSQL is not installed.

mod support;

use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{
    open_postgres, GroupCommit, MemberCondition, MemberOutcome, MemberRow, MemberState,
    MemberVersion, MemberWrite, NodeId, OpenError, TableVersion, POSTGRES_SCHEMA_VERSION,
};
use routerd::testing::postgres_server::{PgServer, PgServerError};
use support::store_race;

fn server() -> Option<PgServer> {
    match PgServer::start() {
        Ok(server) => Some(server),
        Err(PgServerError::Unavailable(why)) => {
            println!("skipped: {why}");
            None
        }
        Err(error) => panic!("{error}"),
    }
}

fn config(url: String) -> StoreConfig {
    StoreConfig {
        backend: StoreBackend::Postgres,
        url,
        ..StoreConfig::default()
    }
}

#[test]
fn a_newer_or_foreign_schema_is_a_clear_startup_error() {
    let Some(server) = server() else { return };
    for database in ["newer", "unversioned"] {
        server
            .psql("postgres", &format!("CREATE DATABASE {database}"))
            .expect("create database");
    }
    let newer = config(server.url("newer"));
    drop(open_postgres(&newer, GroupCommit::On).expect("create"));
    // Reopening a database of this version works.
    drop(open_postgres(&newer, GroupCommit::On).expect("reopen"));
    server
        .psql(
            "newer",
            &format!(
                "UPDATE routerd_schema SET version = {}",
                POSTGRES_SCHEMA_VERSION + 1
            ),
        )
        .expect("bump version");
    match open_postgres(&newer, GroupCommit::On) {
        Err(OpenError::PostgresSchemaVersion { found, expected }) => {
            assert_eq!(found, POSTGRES_SCHEMA_VERSION + 1);
            assert_eq!(expected, POSTGRES_SCHEMA_VERSION);
        }
        Err(other) => panic!("expected a schema version error, got {other}"),
        Ok(_) => panic!("a newer schema opened"),
    }
    // A table of routerd's name without a version is not ours either.
    server
        .psql("unversioned", "CREATE TABLE routerd_routes (x INTEGER)")
        .expect("foreign table");
    let error = open_postgres(&config(server.url("unversioned")), GroupCommit::On)
        .expect_err("foreign database refused");
    assert!(error.to_string().contains("schema version 0"), "{error}");
}

/// A database of schema version 1 (membership without a table version) is
/// migrated at open: its member rows are listed, a heartbeat leaves the
/// table version alone and a change moves it.
#[test]
fn a_version_1_database_is_migrated() {
    let Some(server) = server() else { return };
    server
        .psql("postgres", "CREATE DATABASE old")
        .expect("create database");
    server
        .psql(
            "old",
            "CREATE TABLE routerd_schema (version BIGINT NOT NULL);
             INSERT INTO routerd_schema (version) VALUES (1);
             CREATE TABLE routerd_routes (type_id BIGINT NOT NULL, zone_id BIGINT NOT NULL,
                 object_id BIGINT NOT NULL, owner_node BIGINT NOT NULL,
                 owner_incarnation BIGINT NOT NULL, route_version BIGINT NOT NULL,
                 save_timepoint_ms BIGINT NOT NULL, cas_version BIGINT NOT NULL,
                 state BYTEA NOT NULL, PRIMARY KEY (type_id, zone_id, object_id));
             CREATE TABLE routerd_members (node_id BIGINT PRIMARY KEY,
                 incarnation BIGINT NOT NULL, state BIGINT NOT NULL, heartbeat BIGINT NOT NULL,
                 gateway TEXT NOT NULL, admin TEXT NOT NULL, cluster BYTEA NOT NULL,
                 core_count BIGINT NOT NULL, actors BYTEA NOT NULL, version BIGINT NOT NULL);
             INSERT INTO routerd_members VALUES (4, 3, 2, 17, '127.0.0.1:7004',
                 '127.0.0.1:9004', '\\x00000000', 1, '\\x00000000', 9);",
        )
        .expect("version 1 database");
    let store = open_postgres(&config(server.url("old")), GroupCommit::On).expect("migrate");
    let page = block_on(store.list_members(TableVersion(0), NodeId(0))).expect("list");
    assert_eq!(page.rows.len(), 1);
    let row = page.rows[0].clone();
    assert_eq!((row.incarnation, row.version), (3, MemberVersion(9)));
    let version = block_on(store.poll_members(vec![NodeId(4)])).expect("poll");
    assert_eq!(version.version, TableVersion(1));
    assert_eq!(version.rows, vec![row.clone()]);
    let beat = MemberWrite {
        row: MemberRow {
            heartbeat: 18,
            ..row.clone()
        },
        condition: MemberCondition::VersionEquals(MemberVersion(9)),
    };
    assert_eq!(
        block_on(store.write_member(beat)).expect("heartbeat"),
        MemberOutcome::Applied(MemberVersion(10))
    );
    let polled = block_on(store.poll_members(Vec::new())).expect("poll");
    assert_eq!(polled.version, TableVersion(1));
    let left = MemberWrite {
        row: MemberRow {
            state: MemberState::Left,
            ..row
        },
        condition: MemberCondition::VersionEquals(MemberVersion(10)),
    };
    assert_eq!(
        block_on(store.write_member(left)).expect("left"),
        MemberOutcome::Applied(MemberVersion(11))
    );
    let polled = block_on(store.poll_members(Vec::new())).expect("poll");
    assert_eq!(polled.version, TableVersion(2));
    drop(store);
    // Reopened: version 2 now, nothing migrated twice.
    let store = open_postgres(&config(server.url("old")), GroupCommit::On).expect("reopen");
    let changed = block_on(store.list_members(TableVersion(1), NodeId(0))).expect("changes");
    assert_eq!(changed.rows.len(), 1);
    assert_eq!(changed.rows[0].state, MemberState::Left);
}

#[test]
fn a_server_that_is_not_there_is_a_clear_startup_error() {
    let (_held, port) = support::refusing_port();
    let started = Instant::now();
    let url = format!("postgresql://routerd@127.0.0.1:{port}/routerd");
    match open_postgres(&config(url), GroupCommit::On) {
        Err(OpenError::Postgres(message)) => {
            assert!(!message.is_empty());
        }
        Err(other) => panic!("expected a connection error, got {other}"),
        Ok(_) => panic!("opened a store on a closed port"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let error = open_postgres(&config("not a url=".to_string()), GroupCommit::On)
        .expect_err("bad url refused");
    assert!(error.to_string().contains("store.url"), "{error}");
}

const RACE_ENV: &str = "ROUTERD_PG_RACE_URL";
const RACE_KEYS: u64 = 300;

/// The other process of `two_processes_race_insert_if_absent`.
#[test]
#[ignore = "run as a child process by two_processes_race_insert_if_absent"]
fn race_child() {
    let Ok(url) = std::env::var(RACE_ENV) else {
        return;
    };
    let store = open_postgres(&config(url), GroupCommit::On).expect("open");
    store_race::child(&store, RACE_KEYS);
}

/// Two processes, each with its own pool, race insert-if-absent on the
/// same keys: every key has exactly one winner, and the stored record is
/// the winner's.
#[test]
fn two_processes_race_insert_if_absent() {
    let Some(server) = server() else { return };
    server
        .psql("postgres", "CREATE DATABASE race")
        .expect("create database");
    let url = server.url("race");
    drop(open_postgres(&config(url.clone()), GroupCommit::On).expect("create"));
    store_race::parent(
        RACE_KEYS,
        RACE_ENV,
        url.as_ref(),
        Duration::from_secs(60),
        || open_postgres(&config(url.clone()), GroupCommit::On).expect("open"),
    );
}
