//! The store's metrics, recorded where every backend's requests pass: the
//! bridge to the backend's thread.

use std::sync::Arc;

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
/// store's health (`StoreProbe::errors`). Every pair is written, zero
/// included, so a rate over it starts from the first scrape.
pub(crate) fn write_store_errors<'s>(
    out: &mut String,
    stores: impl Iterator<Item = &'s Arc<dyn StoreProbe>> + Clone,
) {
    use std::fmt::Write as _;
    let family = super::Family::<()> {
        name: STORE_ERRORS,
        help: "Store operations that failed, by operation and kind (timeout, overloaded, closed, \
               corrupt, io, unavailable, conflict_unknown: a write whose outcome is unknown, \
               backend, injected, too_large: a state over store.state_max_bytes, never sent).",
        kind: super::Kind::Counter,
        label: None,
        series: &[],
    };
    super::family::write_family_head(out, &family);
    for op in ErrorOp::ALL {
        for kind in ErrorKind::ALL {
            let count: u64 = stores.clone().map(|store| store.errors(op, kind)).sum();
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

/// What `/metrics` reads of a store at scrape time. Defined here and
/// implemented by the store, so that the metrics import nothing of the
/// store.
pub trait StoreProbe: Send + Sync + std::fmt::Debug {
    /// The store's operation latencies.
    fn stats(&self) -> &StoreStats;
    /// The operations of `op` that failed with `kind` so far.
    fn errors(&self, op: ErrorOp, kind: ErrorKind) -> u64;
    /// Requests waiting for the backend's thread; 0 once the store closed.
    fn queue_depth(&self) -> usize;
}

/// The store operations errors are counted for, as the metric's `op` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorOp {
    /// `load`: reading one record.
    Load,
    /// `write`: a compare-and-set of records.
    Write,
    /// `write_member`: a write of a membership row.
    WriteMember,
    /// `list_members`: reading the membership table.
    ListMembers,
}

impl ErrorOp {
    /// Every operation, in the order the metric lists them.
    pub const ALL: [ErrorOp; 4] = [
        ErrorOp::Load,
        ErrorOp::Write,
        ErrorOp::WriteMember,
        ErrorOp::ListMembers,
    ];

    /// The `op` label's value.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorOp::Load => "load",
            ErrorOp::Write => "write",
            ErrorOp::WriteMember => "write_member",
            ErrorOp::ListMembers => "list_members",
        }
    }
}

/// Why an operation failed, as the metric's `kind` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No answer within `store.request_timeout_ms` (a read) or before its
    /// caller gave up (a membership poll or list), or another process held
    /// SQLite's write lock past `busy_timeout`.
    Timeout,
    /// The request queue was full; nothing was sent.
    Overloaded,
    /// The store's thread had stopped.
    Closed,
    /// The store holds data this build cannot read: a damaged SQLite file
    /// (`SQLITE_CORRUPT`, `SQLITE_NOTADB`) or a bad stored value.
    Corrupt,
    /// The disk or the connection to the store server failed.
    Io,
    /// No connection to the store server could be had; nothing was sent.
    Unavailable,
    /// A write whose outcome is unknown (timed out, given up by its caller
    /// as a heartbeat past its deadline is, or its connection was lost
    /// after it was sent): the caller must re-read.
    ConflictUnknown,
    /// Any other refusal by the backend.
    Backend,
    /// A fault the memory backend was told to inject.
    Injected,
    /// A write of a state over `store.state_max_bytes`, refused before it
    /// was sent: the object's fault, not the store's (it does not make
    /// the store failing), and its changes stay unsaved.
    TooLarge,
}

impl ErrorKind {
    /// Every kind, in the order the metric lists them.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Timeout,
        ErrorKind::Overloaded,
        ErrorKind::Closed,
        ErrorKind::Corrupt,
        ErrorKind::Io,
        ErrorKind::Unavailable,
        ErrorKind::ConflictUnknown,
        ErrorKind::Backend,
        ErrorKind::Injected,
        ErrorKind::TooLarge,
    ];

    /// The `kind` label's value.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Closed => "closed",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Io => "io",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::ConflictUnknown => "conflict_unknown",
            ErrorKind::Backend => "backend",
            ErrorKind::Injected => "injected",
            ErrorKind::TooLarge => "too_large",
        }
    }
}
