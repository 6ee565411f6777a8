//! Test machinery shared by the crate's own tests, the integration tests and
//! the benchmarks: built under `cfg(test)` or the `testing` feature, never
//! in a shipped build.
//!
//! - [`postgres_server`]: a throwaway PostgreSQL server (`initdb` into a
//!   fresh directory) for the PostgreSQL store's tests and benchmarks.
//! - [`answer_store`]: performs one router store operation on an in-memory
//!   table, the fault-free store every unit test of a router core drives.
//!   The simulator (`crate::sim`) answers through its own faulty store.

pub mod postgres_server;

use crate::router::{StoreOp, StoreReply};
use crate::store::MemoryTable;

/// Performs `op` on `table` and answers it as a store driver would, without
/// faults: a load reads the record, a write is a compare-and-set, a batch is
/// its writes in order.
pub fn answer_store(table: &mut MemoryTable, op: StoreOp) -> StoreReply {
    match op {
        StoreOp::Load(key) => StoreReply::Loaded(table.load(key)),
        StoreOp::Write(write) => StoreReply::Written(table.write(&write)),
        StoreOp::WriteBatch(writes) => {
            StoreReply::WrittenBatch(writes.iter().map(|w| table.write(w)).collect())
        }
    }
}
