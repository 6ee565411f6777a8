//! Test machinery shared by the crate's own tests, the integration tests and
//! the benchmarks: built under `cfg(test)` or the `testing` feature, never
//! in a shipped build.
//!
//! - [`client`]: a blocking client of the client protocol (connect, log
//!   in, send a request, read a frame) that the integration tests and the
//!   guild example's tests share.
//! - [`postgres_server`]: a throwaway PostgreSQL server (`initdb` into a
//!   fresh directory) for the PostgreSQL store's tests and benchmarks.
//! - [`heartbeat_lane`]: object writers saturating a store while a loop
//!   measures heartbeats, for the test that bounds heartbeat latency and the
//!   benchmark that compares lane layouts.
//! - [`builtin_routes`] and [`node_metrics`]: a node's tables with the
//!   built-in routes, for the tests of the layers below the built-ins.
//! - [`answer_store`]: performs one router store operation on an in-memory
//!   table, the fault-free store every unit test of a router core drives.
//!   The simulator (`crate::sim`) answers through its own faulty store.

pub mod client;
pub mod heartbeat_lane;
pub mod postgres_server;

use std::sync::Arc;

use crate::metrics::NodeMetrics;
use crate::route::RouteTable;
use crate::router::{StoreOp, StoreReply};
use crate::store::MemoryTable;

/// The route table of a node with only the built-in objects (player and
/// room): what the lower layers' tests check against without reaching up
/// to the built-ins themselves.
pub fn builtin_routes() -> RouteTable {
    crate::builtins::builtin_routes()
}

/// The metrics of a node of `core_count` cores with the built-in routes.
pub fn node_metrics(core_count: usize) -> NodeMetrics {
    let mut metrics = NodeMetrics::with_routes(core_count, Arc::new(builtin_routes()));
    metrics.types = vec![
        (crate::builtins::PLAYER_TYPE_ID, "player"),
        (crate::builtins::ROOM_TYPE_ID, "room"),
    ];
    metrics
}

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
