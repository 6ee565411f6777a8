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

/// `routerd_store_errors_total{op, kind}`: two labels, which the one-label
/// families above cannot say, so written here from each store's
/// [`StoreHealth`](crate::store::StoreHealth). Every pair is written, zero
/// included, so a rate over it starts from the first scrape.
pub(crate) fn write_store_errors<'s>(
    out: &mut String,
    stores: impl Iterator<Item = &'s crate::store::StoreProbe> + Clone,
) {
    use crate::store::health::{ErrorKind, ErrorOp};
    use std::fmt::Write as _;
    let family = super::Family::<()> {
        name: STORE_ERRORS,
        help: "Store operations that failed, by operation and kind (timeout, overloaded, closed, \
               corrupt, io, unavailable, conflict_unknown: a write whose outcome is unknown, \
               backend, injected).",
        kind: super::Kind::Counter,
        label: None,
        series: &[],
    };
    super::family::write_family_head(out, &family);
    for op in ErrorOp::ALL {
        for kind in ErrorKind::ALL {
            let count: u64 = stores
                .clone()
                .map(|store| store.health().errors(op, kind))
                .sum();
            // Writing into a String cannot fail.
            let _ = writeln!(
                out,
                "{STORE_ERRORS}{{op=\"{}\",kind=\"{}\"}} {count}",
                op.name(),
                kind.name()
            );
        }
    }
}

const STORE_ERRORS: &str = "routerd_store_errors_total";
