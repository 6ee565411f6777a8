//! The catalog: which actors can take a msgId, and which one gets a key.
//!
//! - [`Catalog`] (one per node, shared by `Arc`): the remote actor registry
//!   fed by membership through [`ActorEvents`], its version, the snapshot
//!   rebuilt lazily once per version, and this node's local routes.
//! - [`CoreCatalog`] (one per core): lock-free, allocation-free lookups
//!   against the core's own `Arc` of the snapshot and the local routes.
//! - [`PickOne`] strategies: [`RendezvousHash`], [`WeightedStrategy`].
//! - [`lookup_linear_scan`]: the lookup without a table (the catalog
//!   design's fallback path, docs/origins.md), kept as the baseline.

mod actor;
mod core_view;
mod local;
#[cfg(test)]
mod model_tests;
mod pick;
mod registry;
mod snapshot;

pub use actor::{
    ActorConfig, AdvertiseError, ACTORS_PER_NODE_MAX, ADDRESS_LEN_MAX, MSG_IDS_PER_ACTOR_MAX,
    NODES_MAX, REGISTRY_ACTORS_MAX,
};
pub use core_view::CoreCatalog;
pub use pick::{pick_among, PickOne, RendezvousHash, WeightedStrategy};
pub use registry::{ActorEvents, Catalog};
pub use snapshot::{lookup_linear_scan, Snapshot};

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a catalog mutex. A poisoned lock is taken over rather than
/// propagated: every critical section here replaces whole values (an `Arc`,
/// a map entry) and leaves no half-written state behind a panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
