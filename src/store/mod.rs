//! Ownership persistence: the record types, and the backends behind one
//! trait (the store issue fills in the trait and the backends).

pub mod memory_table;
pub mod record;

pub use memory_table::MemoryTable;
pub use record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
