//! Ownership persistence: route records under compare-and-set, and the
//! membership table, behind one executor-agnostic handle, [`Store`].
//!
//! Backends: SQLite (embedded default, group commit), ScyllaDB
//! (lightweight transactions) and memory (tests, with fault injection).

mod api;
mod bridge;
mod error;
mod membership;
mod memory;
pub mod memory_table;
pub mod record;
mod scylla;
mod sqlite;

pub use api::{Backend, Store, StoreProbe};
pub use bridge::StoreFuture;
pub use error::{BackendError, LoadError, MembershipError, OpenError, WriteError};
pub use membership::{
    AdvertisedActor, MemberCondition, MemberOutcome, MemberRow, MemberState, MemberVersion,
    MemberWrite, MEMBERS_MAX, MEMBER_ROW_BYTES_MAX,
};
pub use memory::{open_memory, Fault, MemoryFaults, FAULTS_MAX};
pub use memory_table::{MemberTable, MemoryTable};
pub use record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
pub use scylla::open_scylla;
pub use sqlite::{open_sqlite, GroupCommit, SCHEMA_VERSION};
