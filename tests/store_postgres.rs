//! PostgreSQL-specific behaviour: schema versioning, a clear error for a
//! server that is not there, and CAS across two processes sharing one
//! database. Runs on a throwaway server of its own; says it skipped when
//! PostgreSQL is not installed.

mod support;

use std::time::{Duration, Instant};

use routerd::config::{StoreBackend, StoreConfig};
use routerd::store::{open_postgres, GroupCommit, OpenError, POSTGRES_SCHEMA_VERSION};
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

#[test]
fn a_server_that_is_not_there_is_a_clear_startup_error() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port();
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
