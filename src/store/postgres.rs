//! The PostgreSQL backend: ownership CAS as conditional statements,
//! group-committed and pipelined over a small pool of connections.
//!
//! Shape: the bridge's bounded object queue feeds one dispatcher thread
//! (`store-postgres`), which hands batches to `store.pool_size` connection
//! workers running tokio-postgres on a one-worker tokio runtime. No core
//! ever waits: a full queue answers `Overloaded` in the bridge.
//!
//! Membership has a lane of its own: the bridge's membership queue feeds a
//! second dispatcher (`store-postgres-members`) with one connection outside
//! the pool, one request a round trip (a membership write is one
//! autocommit statement). A heartbeat never waits for a pool connection and
//! never rides in an object group commit, so a slow batch (a lock wait, a
//! big state) cannot delay it. A node holds `pool_size + 1` connections.
//!
//! Group commit: the dispatcher takes the first queued request, waits for
//! an idle connection, and only then drains the queue (up to `batch_max`
//! writes and `BATCH_BYTES_MAX` bytes of state), so a batch holds every
//! request that arrived while all connections were busy: under load the
//! batches grow, and one fsync commits many writes. One batch runs as one
//! pipelined transaction (see `postgres_batch` for its exact semantics).
//!
//! Time: every request carries its deadline (`request_timeout_ms` after it
//! was sent). A request still queued at its deadline is answered as timed
//! out (a write `Indeterminate`); a batch runs under the earliest deadline
//! in it. A batch cut short by its deadline has its backend terminated
//! before its writes are answered `Indeterminate` (see `Worker::abandon`),
//! so such a write either committed before the answer or never will;
//! unless it was already committing, then it is left to finish: a commit
//! waiting for a synchronous standby stays invisible, its rows locked,
//! until the standby has it (see `postgres_sql::TERMINATE_UNLESS_COMMITTING`).
//!
//! Connections: a worker whose connection is lost reconnects by itself,
//! with exponential backoff and jitter. While no connection is up (for
//! longer than `RECONNECT_GRACE` after the last was lost), requests are
//! answered at once with `BackendError::Unavailable`: they were never sent,
//! so a write did not happen.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::mpsc;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::{Client, NoTls};

use super::api::Store;
use super::bridge::{Bridge, Lanes, MemberLane, Op, Request};
use super::error::{BackendError, OpenError};
use super::postgres_batch;
use super::postgres_sql::{self as sql, describe, POSTGRES_SCHEMA_VERSION};
use super::postgres_statements::Statements;
use super::sqlite::GroupCommit;
use crate::config::{StoreConfig, POSTGRES_POOL_SIZE_MAX};

/// State bytes one batch carries at most, so that a batch of large states
/// never holds more than this in flight on one connection. A single
/// request larger than this still runs, alone.
pub const BATCH_BYTES_MAX: usize = 16 << 20;

/// The oldest server the store runs on, as `server_version_num` spells it.
pub const POSTGRES_SERVER_VERSION_MIN: i64 = 140_000;

/// Terminating an abandoned batch's backend may take this long at most,
/// connecting included; past it the batch's writes are answered anyway.
const ABANDON_TIMEOUT: Duration = Duration::from_secs(1);

/// Connecting every pool connection and checking the schema at open may
/// take this long at most.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// One reconnect attempt may take this long at most.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Backoff between reconnect attempts of one worker: doubles from the
/// first to the last, each wait drawn in [delay / 2, delay].
const RECONNECT_DELAY_FIRST: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_LAST: Duration = Duration::from_secs(2);

/// How long after the last connection was lost requests still wait for a
/// reconnect instead of being answered `Unavailable` at once.
const RECONNECT_GRACE: Duration = Duration::from_secs(1);

/// Opens the PostgreSQL store at `config.url` with `config.pool_size`
/// connections, creating the tables if absent. Blocks the caller until
/// every connection is up; fails at once on a schema of another version.
/// `GroupCommit::Off` runs one request per round trip (the benchmark's
/// baseline).
pub fn open_postgres(config: &StoreConfig, group_commit: GroupCommit) -> Result<Store, OpenError> {
    open_postgres_lanes(config, group_commit, MemberLane::Own)
}

/// [`open_postgres`] with membership on its own connection or, for a
/// benchmark's baseline, in the pool's queue and group commits.
pub fn open_postgres_lanes(
    config: &StoreConfig,
    group_commit: GroupCommit,
    lane: MemberLane,
) -> Result<Store, OpenError> {
    let target = Target::new(config)?;
    let (bridge, lanes) = Bridge::new(
        config.queue_max,
        Duration::from_millis(config.request_timeout_ms),
        lane,
    );
    let batch_max = match group_commit {
        GroupCommit::On => config.batch_max.max(1),
        GroupCommit::Off => 1,
    };
    let pool_size = config.pool_size;
    let (ready_sender, ready_receiver) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("store-postgres".to_string())
        .spawn(move || driver_thread(target, pool_size, batch_max, lanes, ready_sender))
        .map_err(OpenError::Thread)?;
    match ready_receiver.recv() {
        Ok(Ok(())) => Ok(Store::from_backend(Arc::new(bridge), config)),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(OpenError::Postgres("the store thread stopped".to_string())),
    }
}

/// Where and how to connect.
struct Target {
    config: tokio_postgres::Config,
    session_sql: String,
}

/// Whether `url` (a URL or `key=value` pairs) sets `sslmode` to one that
/// requires TLS. The connections are made without TLS, so such a URL
/// would fail at connect with the driver's words (`require`), or at parse
/// as an unknown value (`verify-ca`, `verify-full`).
fn asks_for_tls(url: &str) -> bool {
    url.match_indices("sslmode=").any(|(at, key)| {
        let value = &url[at + key.len()..];
        let value = value
            .split(['&', ' ', '\t', '\n'])
            .next()
            .unwrap_or_default()
            .trim_matches(['\'', '"']);
        matches!(value, "require" | "verify-ca" | "verify-full")
    })
}

/// One live connection and its prepared statements.
struct Conn {
    client: Client,
    statements: Statements,
    /// The server process serving this connection, which `Worker::abandon`
    /// terminates.
    backend_pid: i32,
}

impl Target {
    fn new(config: &StoreConfig) -> Result<Target, OpenError> {
        if config.url.is_empty() {
            return Err(OpenError::Config("store.url is empty"));
        }
        if config.pool_size == 0 || config.pool_size > POSTGRES_POOL_SIZE_MAX {
            return Err(OpenError::Config(
                "store.pool_size must be between 1 and 64",
            ));
        }
        if asks_for_tls(&config.url) {
            return Err(OpenError::Config(
                "store.url asks for TLS (sslmode=require, verify-ca or verify-full), and this \
                 build does not support TLS to PostgreSQL: reach the server on a trusted network \
                 or through a TLS tunnel, with sslmode=disable or prefer (docs/cluster.md)",
            ));
        }
        // The message never echoes the URL: it may hold a password.
        let mut pg: tokio_postgres::Config = config
            .url
            .parse()
            .map_err(|error| OpenError::Postgres(format!("store.url: {}", describe(&error))))?;
        if pg.get_application_name().is_none() {
            // Lets an operator tell routerd's connections apart in
            // pg_stat_activity.
            pg.application_name("routerd");
        }
        // A standby (or a server made read-only) refuses every write, and
        // a connection to one would be kept and fail them all: unless the
        // URL says otherwise, a connection is made only to a server that
        // takes writes (with several hosts in the URL, the one that does),
        // at the start and at every reconnect after a failover.
        if !config.url.contains("target_session_attrs") {
            pg.target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        pg.connect_timeout(CONNECT_TIMEOUT);
        // A peer that vanished without a FIN is found by keepalives while
        // the connection is idle, and by the request deadline otherwise.
        pg.keepalives_idle(Duration::from_secs(10));
        Ok(Target {
            config: pg,
            session_sql: sql::session_sql(config.request_timeout_ms),
        })
    }

    /// A connection with the session settings, not yet prepared.
    async fn connect_raw(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %describe(&error), "postgres connection ended");
            }
        });
        client.batch_execute(&self.session_sql).await?;
        Ok(client)
    }

    async fn connect(&self) -> Result<Conn, tokio_postgres::Error> {
        let client = self.connect_raw().await?;
        Conn::prepare(client).await
    }
}

impl Conn {
    async fn prepare(client: Client) -> Result<Conn, tokio_postgres::Error> {
        let statements = Statements::prepare(&client).await?;
        let backend_pid = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .try_get(0)?;
        Ok(Conn {
            client,
            statements,
            backend_pid,
        })
    }
}

fn open_error(error: tokio_postgres::Error) -> OpenError {
    OpenError::Postgres(describe(&error))
}

/// Refuses a server older than `POSTGRES_SERVER_VERSION_MIN`: an abandoned
/// batch's backend is terminated with `pg_terminate_backend(pid, timeout)`,
/// whose waiting form came with PostgreSQL 14.
async fn check_server_version(client: &Client) -> Result<(), OpenError> {
    let row = client
        .query_one("SELECT current_setting('server_version_num')::bigint", &[])
        .await
        .map_err(open_error)?;
    let found: i64 = row.try_get(0).map_err(open_error)?;
    if found < POSTGRES_SERVER_VERSION_MIN {
        return Err(OpenError::Postgres(format!(
            "PostgreSQL {} or newer is needed, the server is version {found}",
            POSTGRES_SERVER_VERSION_MIN / 10_000
        )));
    }
    Ok(())
}

/// Creates the tables in a database that has none of them, or checks the
/// version of one that has. Runs under an advisory lock, so two processes
/// opening a new database at once create the tables once.
async fn ensure_schema(client: &mut Client) -> Result<(), OpenError> {
    let transaction = client.transaction().await.map_err(open_error)?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&sql::SCHEMA_LOCK_KEY])
        .await
        .map_err(open_error)?;
    let mut present = [false; 3];
    for (table, present) in sql::TABLES.iter().zip(present.iter_mut()) {
        let row = transaction
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[table])
            .await
            .map_err(open_error)?;
        *present = row.try_get(0).map_err(open_error)?;
    }
    match present {
        [false, false, false] => {
            transaction
                .batch_execute(&sql::create_schema_sql())
                .await
                .map_err(open_error)?;
            migrate_1_to_2(&transaction).await?;
            migrate_2_to_3(&transaction).await?;
            tracing::info!("postgres store: tables created");
        }
        [true, true, true] => {
            let rows = transaction
                .query("SELECT version FROM routerd_schema", &[])
                .await
                .map_err(open_error)?;
            // Anything but one row holding this build's version is a store
            // this build cannot vouch for.
            let found = match rows.as_slice() {
                [row] => row.try_get::<_, i64>(0).map_err(open_error)?,
                _ => 0,
            };
            if found == 1 || found == 2 {
                if found == 1 {
                    migrate_1_to_2(&transaction).await?;
                }
                migrate_2_to_3(&transaction).await?;
                tracing::info!(
                    "postgres store: schema migrated from version {found} to {POSTGRES_SCHEMA_VERSION}"
                );
            } else if found != POSTGRES_SCHEMA_VERSION {
                return Err(OpenError::PostgresSchemaVersion {
                    found,
                    expected: POSTGRES_SCHEMA_VERSION,
                });
            }
        }
        // Some of routerd's tables without the others: not a store this
        // build wrote.
        _ => {
            return Err(OpenError::PostgresSchemaVersion {
                found: 0,
                expected: POSTGRES_SCHEMA_VERSION,
            })
        }
    }
    transaction.commit().await.map_err(open_error)
}

/// Version 1 to 2: the membership table version.
async fn migrate_1_to_2(transaction: &tokio_postgres::Transaction<'_>) -> Result<(), OpenError> {
    use super::postgres_membership::MIGRATE_1_TO_2;
    transaction
        .batch_execute(MIGRATE_1_TO_2)
        .await
        .map_err(open_error)
}

/// Version 2 to 3: the member rows' timers, and the membership functions
/// that write them.
async fn migrate_2_to_3(transaction: &tokio_postgres::Transaction<'_>) -> Result<(), OpenError> {
    use super::postgres_membership::{MEMBER_FUNCTIONS_SQL, MIGRATE_2_TO_3};
    transaction
        .batch_execute(MIGRATE_2_TO_3)
        .await
        .map_err(open_error)?;
    transaction
        .batch_execute(MEMBER_FUNCTIONS_SQL)
        .await
        .map_err(open_error)
}

/// Connects the whole pool, the first connection checking the schema,
/// and then the membership connection, which is the last one returned.
async fn open_pool(target: &Target, pool_size: usize) -> Result<Vec<Conn>, OpenError> {
    let pool_size = pool_size + 1;
    let mut first = target.connect_raw().await.map_err(open_error)?;
    check_server_version(&first).await?;
    ensure_schema(&mut first).await?;
    let mut pool = vec![Conn::prepare(first).await.map_err(open_error)?];
    while pool.len() < pool_size {
        pool.push(target.connect().await.map_err(open_error)?);
    }
    Ok(pool)
}

#[path = "postgres_lane.rs"]
mod lane;
use self::lane::driver_thread;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_a_server_that_takes_writes_unless_the_url_says_otherwise() {
        let attrs = |url: &str| {
            let config = StoreConfig {
                url: url.to_string(),
                ..StoreConfig::default()
            };
            let target = Target::new(&config).expect("target");
            target.config.get_target_session_attrs()
        };
        let read_write = TargetSessionAttrs::ReadWrite;
        assert_eq!(attrs("postgresql://routerd@127.0.0.1/routerd"), read_write);
        assert_eq!(attrs("host=127.0.0.1 dbname=routerd"), read_write);
        assert_eq!(
            attrs("postgresql://routerd@127.0.0.1/routerd?target_session_attrs=any"),
            TargetSessionAttrs::Any
        );
    }

    #[test]
    fn a_url_that_asks_for_tls_is_refused_saying_so() {
        let target = |url: &str| {
            Target::new(&StoreConfig {
                url: url.to_string(),
                ..StoreConfig::default()
            })
        };
        for url in [
            "postgresql://routerd@db.example/routerd?sslmode=require",
            "postgresql://routerd@db.example/routerd?application_name=a&sslmode=verify-full",
            "host=db.example dbname=routerd sslmode=verify-ca",
            "host=db.example sslmode='require' dbname=routerd",
        ] {
            let error = target(url).err().expect(url).to_string();
            assert!(
                error.contains("does not support TLS to PostgreSQL"),
                "{url}: {error}"
            );
        }
        for url in [
            "postgresql://routerd@db.example/routerd",
            "postgresql://routerd@db.example/routerd?sslmode=prefer",
            "host=db.example dbname=routerd sslmode=disable",
        ] {
            assert!(target(url).is_ok(), "{url}");
        }
    }
}
