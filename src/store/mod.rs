//! Ownership persistence: route records under compare-and-set, and the
//! membership table, behind one executor-agnostic handle, [`Store`].
//!
//! Backends: SQLite (embedded default, group commit), PostgreSQL
//! (conditional statements, group commit over a pool), ScyllaDB
//! (lightweight transactions) and memory (tests, with fault injection).

mod api;
mod bridge;
mod error;
mod gateway_addresses;
pub mod health;
mod membership;
mod memory;
pub mod memory_table;
mod postgres;
mod postgres_batch;
mod postgres_membership;
mod postgres_sql;
mod postgres_statements;
pub mod record;
mod scylla;
mod sqlite;

pub use crate::config::POSTGRES_POOL_SIZE_MAX;
pub use api::{Backend, BackendProbe, Store};
pub use bridge::StoreFuture;
pub use bridge::{MemberLane, MEMBER_QUEUE_MAX};
pub use error::{BackendError, LoadError, MembershipError, OpenError, WriteError};
pub use gateway_addresses::{GatewayAddresses, Transport};
pub use health::StoreHealth;
pub use membership::{
    AdvertisedActor, MemberCondition, MemberOutcome, MemberRow, MemberState, MemberVersion,
    MemberWrite, MEMBERS_MAX, MEMBER_ROW_BYTES_MAX,
};
pub use memory::{open_memory, Fault, MemoryFaults, FAULTS_MAX};
pub use memory_table::{MemberTable, MemoryTable};
pub use postgres::{open_postgres, open_postgres_lanes, BATCH_BYTES_MAX};
pub use postgres_sql::POSTGRES_SCHEMA_VERSION;
pub use record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
pub use scylla::open_scylla;
pub use sqlite::INTEGRITY_CHECK_MS_MAX;
pub use sqlite::{open_sqlite, open_sqlite_lanes, GroupCommit, SCHEMA_VERSION};
