//! Ownership persistence: route records under compare-and-set, and the
//! membership table, behind one executor-agnostic handle, [`Store`].
//!
//! Backends: SQLite (embedded default, group commit), PostgreSQL
//! (conditional statements, group commit over a pool), ScyllaDB
//! (lightweight transactions) and memory (tests, with fault injection).

mod api;
mod bridge;
mod error;
pub mod health;
mod membership;
mod memory;
pub mod memory_table;
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

pub use crate::config::POSTGRES_POOL_SIZE_MAX;
pub use api::{Backend, BackendProbe, Store};
pub use bridge::StoreFuture;
pub use bridge::{MemberLane, MEMBER_QUEUE_MAX};
pub use error::{BackendError, LoadError, MembershipError, OpenError, WriteError};
// A member row advertises them; they live on the ground floor.
pub use crate::gateway_addresses::{GatewayAddresses, Transport};
pub use health::StoreHealth;
pub use membership::{
    AdvertisedActor, MemberCondition, MemberOutcome, MemberPage, MemberPoll, MemberRow,
    MemberState, MemberVersion, MemberWrite, TableVersion, MEMBERS_PAGE_MAX, MEMBER_ROW_BYTES_MAX,
    POLL_ROWS_MAX,
};
pub use memory::{open_memory, Fault, MemoryFaults, FAULTS_MAX};
pub use memory_table::{MemberTable, MemoryTable, RowCounts};
#[cfg(feature = "postgres")]
pub use postgres::{open_postgres, open_postgres_lanes, BATCH_BYTES_MAX};
#[cfg(feature = "postgres")]
pub use postgres_sql::POSTGRES_SCHEMA_VERSION;
pub use record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
#[cfg(feature = "scylla")]
pub use scylla::open_scylla;
pub use sqlite::INTEGRITY_CHECK_MS_MAX;
pub use sqlite::{open_sqlite, open_sqlite_lanes, GroupCommit, SCHEMA_VERSION};
