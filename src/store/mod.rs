//! Ownership persistence: route records under compare-and-set, and the
//! membership table, behind one executor-agnostic handle, [`Store`].
//!
//! Backends: SQLite (embedded default, group commit), PostgreSQL
//! (conditional statements, group commit over a pool), ScyllaDB
//! (lightweight transactions) and memory (tests, with fault injection).
//!
//! The public face is the [`Backend`] trait with the [`Store`] handle over
//! it, the records a backend keeps (route records, member rows) and each
//! backend's opener. The in-memory tables, the memory backend's fault
//! injection and the choice of a membership lane are for tests and
//! benchmarks: public under the `testing` feature only
//! (`tests/architecture.rs` holds the face to that).

mod api;
mod bridge;
mod error;
#[cfg(feature = "testing")]
pub mod health;
#[cfg(not(feature = "testing"))]
mod health;
mod membership;
mod memory;
#[cfg(feature = "testing")]
pub mod memory_table;
#[cfg(not(feature = "testing"))]
mod memory_table;
mod paired;
// The server backends are cargo features (on by default), so
// `--no-default-features` builds an SQLite-only node without their drivers.
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_batch;
#[cfg(feature = "postgres")]
mod postgres_membership;
#[cfg(feature = "postgres")]
mod postgres_sql;
#[cfg(feature = "postgres")]
mod postgres_statements;
pub mod record;
#[cfg(feature = "scylla")]
mod scylla;
mod sqlite;
mod sqlite_checkpoint;
mod sqlite_file;

pub use crate::config::POSTGRES_POOL_SIZE_MAX;
pub use api::{Backend, BackendProbe, Store};
pub use bridge::StoreFuture;
#[cfg(feature = "testing")]
pub use bridge::{MemberLane, MEMBER_QUEUE_MAX};
pub use error::{BackendError, LoadError, MembershipError, OpenError, WriteError};
// Their old path, for code written before they moved to the ground floor.
#[allow(unused_imports)]
pub(crate) use crate::gateway_addresses::{GatewayAddresses, Transport};
pub use health::StoreHealth;
pub use membership::{
    AdvertisedActor, MemberCondition, MemberOutcome, MemberPage, MemberPoll, MemberRow,
    MemberState, MemberTimers, MemberVersion, MemberWrite, TableVersion, MEMBERS_PAGE_MAX,
    MEMBER_ROW_BYTES_MAX, POLL_ROWS_MAX,
};
#[cfg(feature = "testing")]
pub use memory::{open_memory, Fault, MemoryFaults, FAULTS_MAX};
#[cfg(feature = "testing")]
pub use memory_table::{MemberTable, MemoryTable, RowCounts};
#[cfg(all(feature = "postgres", feature = "testing"))]
pub use postgres::open_postgres_lanes;
#[cfg(feature = "postgres")]
pub use postgres::{open_postgres, BATCH_BYTES_MAX};
#[cfg(feature = "postgres")]
pub use postgres_sql::POSTGRES_SCHEMA_VERSION;
pub use record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
#[cfg(feature = "scylla")]
pub use scylla::open_scylla;
#[cfg(feature = "testing")]
pub use sqlite::open_sqlite_lanes;
pub use sqlite::INTEGRITY_CHECK_MS_MAX;
pub use sqlite::{open_sqlite, GroupCommit, SCHEMA_VERSION};
