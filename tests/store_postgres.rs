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

/// A database as a build of schema version 1 left it, with one member row.
const VERSION_1: &str = "CREATE TABLE routerd_schema (version BIGINT NOT NULL);
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
        '127.0.0.1:9004', '\\x00000000', 1, '\\x00000000', 9);";

/// What a build of schema version 2 ran on a version 1 database: the
/// membership table version and the two functions every membership write
/// went through (its text as that build had it).
const VERSION_1_TO_2: &str = r"ALTER TABLE routerd_members ADD COLUMN changed BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN deleted BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX routerd_members_changed ON routerd_members (changed);
CREATE TABLE routerd_members_version (
    id BIGINT PRIMARY KEY CHECK (id = 0),
    version BIGINT NOT NULL
);
INSERT INTO routerd_members_version (id, version) VALUES (0, 1);
UPDATE routerd_schema SET version = 2;
CREATE FUNCTION routerd_write_member(p_node BIGINT, p_incarnation BIGINT, p_state BIGINT,
    p_heartbeat BIGINT, p_gateway TEXT, p_admin TEXT, p_cluster BYTEA, p_core_count BIGINT,
    p_actors BYTEA, p_expected BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $fn$
DECLARE
    cur routerd_members%ROWTYPE;
    stamp BIGINT;
BEGIN
    SELECT * INTO cur FROM routerd_members WHERE node_id = p_node FOR UPDATE;
    IF NOT FOUND THEN
        IF p_expected <> 0 THEN
            RETURN 0;
        END IF;
        INSERT INTO routerd_members (node_id, incarnation, state, heartbeat, gateway, admin,
            cluster, core_count, actors, version, changed, deleted)
        VALUES (p_node, p_incarnation, p_state, p_heartbeat, p_gateway, p_admin, p_cluster,
            p_core_count, p_actors, 1, 0, false)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
        UPDATE routerd_members_version SET version = version + 1 WHERE id = 0
            RETURNING version INTO stamp;
        UPDATE routerd_members SET changed = stamp WHERE node_id = p_node;
        RETURN 1;
    END IF;
    IF p_expected = 0 OR cur.version <> p_expected THEN
        RETURN 0;
    END IF;
    stamp := cur.changed;
    IF cur.deleted OR cur.incarnation <> p_incarnation OR cur.state <> p_state
        OR cur.gateway <> p_gateway OR cur.admin <> p_admin OR cur.cluster <> p_cluster
        OR cur.core_count <> p_core_count OR cur.actors <> p_actors THEN
        UPDATE routerd_members_version SET version = version + 1 WHERE id = 0
            RETURNING version INTO stamp;
    END IF;
    UPDATE routerd_members SET incarnation = p_incarnation, state = p_state,
        heartbeat = p_heartbeat, gateway = p_gateway, admin = p_admin, cluster = p_cluster,
        core_count = p_core_count, actors = p_actors, version = p_expected + 1,
        changed = stamp, deleted = false
    WHERE node_id = p_node;
    RETURN p_expected + 1;
END
$fn$;
CREATE FUNCTION routerd_delete_member(p_node BIGINT, p_expected BIGINT, p_left BIGINT,
    p_cluster BYTEA, p_actors BYTEA) RETURNS BIGINT LANGUAGE plpgsql AS $fn$
DECLARE
    cur routerd_members%ROWTYPE;
    stamp BIGINT;
BEGIN
    SELECT * INTO cur FROM routerd_members WHERE node_id = p_node FOR UPDATE;
    IF NOT FOUND OR cur.deleted OR cur.version <> p_expected OR cur.state <> p_left THEN
        RETURN 0;
    END IF;
    UPDATE routerd_members_version SET version = version + 1 WHERE id = 0
        RETURNING version INTO stamp;
    UPDATE routerd_members SET heartbeat = 0, gateway = '', admin = '', cluster = p_cluster,
        core_count = 0, actors = p_actors, version = p_expected + 1, changed = stamp,
        deleted = true
    WHERE node_id = p_node;
    RETURN p_expected + 1;
END
$fn$;";

/// A database of schema version 1 (membership without a table version) is
/// migrated at open: its member rows are listed, a heartbeat leaves the
/// table version alone and a change moves it.
#[test]
fn a_version_1_database_is_migrated() {
    let Some(server) = server() else { return };
    server
        .psql("postgres", "CREATE DATABASE old")
        .expect("create database");
    server.psql("old", VERSION_1).expect("version 1 database");
    let store = open_postgres(&config(server.url("old")), GroupCommit::On).expect("migrate");
    let page = block_on(store.list_members(TableVersion(0), NodeId(0))).expect("list");
    assert_eq!(page.rows.len(), 1);
    let row = page.rows[0].clone();
    assert_eq!((row.incarnation, row.version), (3, MemberVersion(9)));
    assert_eq!(row.timers, None, "a row from before the timers has none");
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
    assert_eq!(
        server.psql("old", "SELECT version FROM routerd_schema"),
        Ok("3".to_string())
    );
    // Reopened: nothing migrated twice.
    let store = open_postgres(&config(server.url("old")), GroupCommit::On).expect("reopen");
    let changed = block_on(store.list_members(TableVersion(1), NodeId(0))).expect("changes");
    assert_eq!(changed.rows.len(), 1);
    assert_eq!(changed.rows[0].state, MemberState::Left);
}

/// A database of schema version 2 (rows without timers, the write function
/// without them) is migrated at open: its rows read without timers, a
/// write with them is read back whole and is a change, and the version 2
/// write function, which a node of the previous build still running calls,
/// leaves a row without timers rather than the ones before it.
#[test]
fn a_version_2_database_is_migrated_and_its_write_function_writes_no_timers() {
    let Some(server) = server() else { return };
    server
        .psql("postgres", "CREATE DATABASE two")
        .expect("create database");
    server.psql("two", VERSION_1).expect("version 1 database");
    server
        .psql("two", VERSION_1_TO_2)
        .expect("version 2 database");
    let beat = "SELECT routerd_write_member(4, 3, 2, 18, '127.0.0.1:7004', '127.0.0.1:9004', \
                '\\x00000000', 1, '\\x00000000', 9)";
    assert_eq!(server.psql("two", beat), Ok("10".to_string()));

    let store = open_postgres(&config(server.url("two")), GroupCommit::On).expect("migrate");
    assert_eq!(
        server.psql("two", "SELECT version FROM routerd_schema"),
        Ok("3".to_string())
    );
    let polled = block_on(store.poll_members(vec![NodeId(4)])).expect("poll");
    let row = polled.rows[0].clone();
    assert_eq!(
        (row.heartbeat, row.version, row.timers),
        (18, MemberVersion(10), None)
    );
    let version =
        support::member_timers::timers_are_written_as_a_change(&store, row, polled.version);
    assert_eq!(version, MemberVersion(11));
    // A node of the previous build heartbeats through the old function.
    let old_beat = "SELECT routerd_write_member(4, 3, 2, 20, '127.0.0.1:7004', \
                    '127.0.0.1:9004', '\\x00000000', 1, '\\x00000000', 11)";
    assert_eq!(server.psql("two", old_beat), Ok("12".to_string()));
    let polled = block_on(store.poll_members(vec![NodeId(4)])).expect("poll");
    assert_eq!(
        (polled.rows[0].heartbeat, polled.rows[0].timers),
        (20, None)
    );
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
