//! The store's metrics, recorded where every backend's requests pass: the
//! bridge to the backend's thread.

super::metric_set! {
    /// Store operation latencies, one set per store. Written by whichever
    /// core awaited the operation, so with atomic additions
    /// ([`Histogram::record_shared`](super::Histogram::record_shared)).
    pub struct StoreStats {
        /// Store operations from the call to the answer (queue wait, backend work, commit), by
        /// operation; timeouts included.
        "routerd_store_operation_duration_seconds" Histogram (op) {
            load = "load",
            write = "write",
            write_member = "write_member",
            list_members = "list_members",
        }
    }
}
