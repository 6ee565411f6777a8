//! `Store`: the cloneable handle every core holds, and the `Backend` trait
//! behind it. Limits common to all backends are checked here, once.

use std::sync::{Arc, Weak};

use wire::ObjectKey;

use super::bridge::{ready, StoreFuture};
use super::error::{LoadError, MembershipError, OpenError, WriteError};
use super::health::{self, ErrorKind, ErrorOp, StoreHealth, Verdict};
use super::membership::{
    self, MemberOutcome, MemberPage, MemberPoll, MemberVersion, MemberWrite, TableVersion,
    MEMBER_ROW_BYTES_MAX, POLL_ROWS_MAX,
};
use super::paired;
use super::record::NodeId;
use super::record::{RecordWrite, RouteRecord, WriteOutcome};
use crate::config::{Config, StoreBackend, StoreConfig};
use crate::metrics::StoreStats;

/// A store backend. Methods hand the request over before returning (so a
/// full queue is reported at once) and return a future that resolves on
/// any executor. `Store` has already checked the limits below.
pub trait Backend: Send + Sync + 'static {
    /// Reads the record of `key`; `None` when there is none.
    fn load(&self, key: ObjectKey) -> StoreFuture<Result<Option<RouteRecord>, LoadError>>;
    /// Applies `writes` in order, each under its own condition. Returns
    /// one outcome per write, in order.
    fn write_batch(
        &self,
        writes: Vec<RecordWrite>,
    ) -> StoreFuture<Result<Vec<WriteOutcome>, WriteError>>;
    /// One conditional membership write (see `membership`): a change moves
    /// the table version in the same atomic operation.
    fn write_member(
        &self,
        write: MemberWrite,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>>;
    /// Deletes the row of `node_id` if it is `left` at version `expected`,
    /// keeping its tombstone, and moves the table version, atomically.
    fn delete_member(
        &self,
        node_id: NodeId,
        expected: MemberVersion,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>>;
    /// The table version, then the rows of `nodes` (at most
    /// `POLL_ROWS_MAX`; a deleted row as its tombstone).
    fn poll_members(&self, nodes: Vec<NodeId>) -> StoreFuture<Result<MemberPoll, MembershipError>>;
    /// One page (at most `MEMBERS_PAGE_MAX` entries) of the rows changed
    /// after `since` with node ids above `after`, by node id; since 0,
    /// every live row.
    fn list_members(
        &self,
        since: TableVersion,
        after: NodeId,
    ) -> StoreFuture<Result<MemberPage, MembershipError>>;

    /// The operation latencies this backend records, if it records any
    /// (every backend behind a bridge does).
    fn stats(&self) -> Option<Arc<StoreStats>> {
        None
    }

    /// Requests waiting for the backend's thread, read when `/metrics` is
    /// scraped.
    fn queue_depth(&self) -> usize {
        0
    }
}

/// What `/metrics` reads of a store (`metrics::StoreProbe`). It holds the
/// backend weakly, so the store still closes when the last [`Store`] handle
/// goes.
#[derive(Clone)]
pub struct BackendProbe {
    stats: Arc<StoreStats>,
    health: Arc<StoreHealth>,
    backend: Weak<dyn Backend>,
}

impl BackendProbe {
    /// The store's operation latencies.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// Error counts and whether the store is failing.
    pub fn health(&self) -> &StoreHealth {
        &self.health
    }

    /// 0 once the store has closed.
    pub fn queue_depth(&self) -> usize {
        self.backend
            .upgrade()
            .map_or(0, |backend| backend.queue_depth())
    }
}

impl crate::metrics::StoreProbe for BackendProbe {
    fn stats(&self) -> &StoreStats {
        &self.stats
    }

    fn errors(&self, op: ErrorOp, kind: health::ErrorKind) -> u64 {
        self.health.errors(op, kind)
    }

    fn queue_depth(&self) -> usize {
        BackendProbe::queue_depth(self)
    }
}

impl std::fmt::Debug for BackendProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendProbe")
            .field("queue_depth", &self.queue_depth())
            .finish_non_exhaustive()
    }
}

/// The store handle: cheap to clone, `Send + Sync`, one per core.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// Every answer passes here (see `health`), whichever the backend.
    health: Arc<StoreHealth>,
    state_max_bytes: usize,
    batch_max: usize,
    /// For the paired assertion that a poll's table version never goes
    /// back (`paired`).
    table_version: Arc<paired::TableVersionSeen>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("state_max_bytes", &self.state_max_bytes)
            .field("batch_max", &self.batch_max)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the backend `config.store.backend` names.
    pub fn open(config: &Config) -> Result<Store, OpenError> {
        match config.store.backend {
            StoreBackend::Sqlite => super::sqlite::open_sqlite(
                &config.sqlite_path(),
                &config.store,
                super::sqlite::GroupCommit::On,
            ),
            StoreBackend::Memory => Ok(super::memory::open_memory(&config.store).0),
            #[cfg(feature = "scylla")]
            StoreBackend::Scylla => super::scylla::open_scylla(&config.store),
            #[cfg(not(feature = "scylla"))]
            StoreBackend::Scylla => Err(OpenError::NotBuilt { backend: "scylla" }),
            #[cfg(feature = "postgres")]
            StoreBackend::Postgres => {
                super::postgres::open_postgres(&config.store, super::sqlite::GroupCommit::On)
            }
            #[cfg(not(feature = "postgres"))]
            StoreBackend::Postgres => Err(OpenError::NotBuilt {
                backend: "postgres",
            }),
        }
    }

    /// Wraps a backend, enforcing `config`'s state and batch limits.
    pub fn from_backend(backend: Arc<dyn Backend>, config: &StoreConfig) -> Store {
        Store {
            backend,
            health: Arc::default(),
            state_max_bytes: config.state_max_bytes,
            batch_max: config.batch_max,
            table_version: Arc::default(),
        }
    }

    /// The store's metrics, for the node's `/metrics`.
    pub fn probe(&self) -> BackendProbe {
        BackendProbe {
            stats: self.backend.stats().unwrap_or_default(),
            health: self.health.clone(),
            backend: Arc::downgrade(&self.backend),
        }
    }

    /// `Some(cause)` while the store is failing (see `health`).
    pub fn failing(&self) -> Option<String> {
        self.health.failing()
    }

    /// The largest state one record may carry, in bytes.
    pub fn state_max_bytes(&self) -> usize {
        self.state_max_bytes
    }

    /// The most records one batch may write.
    pub fn batch_max(&self) -> usize {
        self.batch_max
    }

    /// The record of `key`, `None` when there is none.
    pub fn load(&self, key: ObjectKey) -> StoreFuture<Result<Option<RouteRecord>, LoadError>> {
        self.observed(ErrorOp::Load, self.backend.load(key), health::load_verdict)
    }

    /// One conditional write. A timeout is `Ok(WriteOutcome::Indeterminate)`.
    pub fn write(&self, write: RecordWrite) -> StoreFuture<Result<WriteOutcome, WriteError>> {
        if let Err(error) = self.check_state(&write) {
            return ready(Err(error));
        }
        let outcomes = self.observed(
            ErrorOp::Write,
            self.backend.write_batch(vec![write]),
            health::write_verdict,
        );
        Box::pin(async move {
            let mut outcomes = outcomes.await?;
            // A backend answers one outcome per write; an empty answer
            // would be a backend bug, and the only safe reading is "unknown".
            debug_assert_eq!(outcomes.len(), 1);
            Ok(outcomes.pop().unwrap_or(WriteOutcome::Indeterminate))
        })
    }

    /// Several conditional writes (shutdown saves), at most `batch_max`.
    /// Each write keeps its own condition and outcome, in order. On SQLite,
    /// PostgreSQL and memory a backend error fails the whole batch with none
    /// of it applied (a lost PostgreSQL connection makes every write of the
    /// batch `Indeterminate`); Scylla applies writes one by one, so an error after the
    /// first write reports that write and the rest `Indeterminate`.
    pub fn write_batch(
        &self,
        writes: Vec<RecordWrite>,
    ) -> StoreFuture<Result<Vec<WriteOutcome>, WriteError>> {
        if writes.len() > self.batch_max {
            return ready(Err(WriteError::BatchTooLarge {
                len: writes.len(),
                max: self.batch_max,
            }));
        }
        if writes.is_empty() {
            return ready(Ok(Vec::new()));
        }
        if let Some(error) = writes
            .iter()
            .find_map(|write| self.check_state(write).err())
        {
            return ready(Err(error));
        }
        // In debug builds each answer is held to its condition; release
        // builds skip the copy of the conditions and the wrapping future.
        let conditions: Option<Vec<_>> =
            cfg!(debug_assertions).then(|| writes.iter().map(|write| write.condition).collect());
        let answer = self.backend.write_batch(writes);
        let answer: StoreFuture<_> = match conditions {
            Some(conditions) => Box::pin(async move {
                let result = answer.await;
                if let Ok(outcomes) = &result {
                    paired::record_outcomes(&conditions, outcomes);
                }
                result
            }),
            None => answer,
        };
        self.observed(ErrorOp::Write, answer, health::write_verdict)
    }

    /// One conditional write of a membership row. A timeout is
    /// `Ok(MemberOutcome::Indeterminate)`.
    pub fn write_member(
        &self,
        write: MemberWrite,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        let len = membership::encoded_len(&write.row);
        if len > MEMBER_ROW_BYTES_MAX {
            return ready(Err(MembershipError::RowTooLarge {
                len,
                max: MEMBER_ROW_BYTES_MAX,
            }));
        }
        let (condition, next) = (write.condition, write.next_version());
        let answer = self.backend.write_member(write);
        let answer = Box::pin(async move {
            let result = answer.await;
            if let Ok(outcome) = &result {
                paired::member_outcome(condition, next, outcome);
            }
            result
        });
        self.observed(ErrorOp::WriteMember, answer, health::member_write_verdict)
    }

    /// Deletes the row of a node that left, by CAS on its version: the
    /// tombstone keeps its incarnation and version, so neither repeats.
    pub fn delete_member(
        &self,
        node_id: NodeId,
        expected: MemberVersion,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        let answer = self.backend.delete_member(node_id, expected);
        let answer = Box::pin(async move {
            let result = answer.await;
            if let Ok(outcome) = &result {
                paired::deletion_outcome(expected, outcome);
            }
            result
        });
        self.observed(ErrorOp::WriteMember, answer, health::member_write_verdict)
    }

    /// The table version and the rows of `nodes` (live or not: liveness is
    /// the observer's judgement, on its own clock). More than
    /// `POLL_ROWS_MAX` nodes is refused.
    pub fn poll_members(
        &self,
        nodes: Vec<NodeId>,
    ) -> StoreFuture<Result<MemberPoll, MembershipError>> {
        if nodes.len() > POLL_ROWS_MAX {
            return ready(Err(MembershipError::PollTooLarge {
                len: nodes.len(),
                max: POLL_ROWS_MAX,
            }));
        }
        let (seen, before) = (self.table_version.clone(), self.table_version.before());
        let answer = self.backend.poll_members(nodes);
        let answer = Box::pin(async move {
            let result = answer.await;
            if let Ok(poll) = &result {
                seen.polled(before, poll.version);
            }
            result
        });
        self.observed(ErrorOp::ListMembers, answer, health::list_verdict)
    }

    /// One page of the rows changed after table version `since` (every
    /// live row since 0), node ids above `after`, by node id.
    pub fn list_members(
        &self,
        since: TableVersion,
        after: NodeId,
    ) -> StoreFuture<Result<MemberPage, MembershipError>> {
        self.observed(
            ErrorOp::ListMembers,
            self.backend.list_members(since, after),
            health::list_verdict,
        )
    }

    /// An operation `op` whose caller stopped waiting for it after
    /// `waited` (a heartbeat past its deadline) and dropped its future: no
    /// answer in time is a failure of the store like any other. It is
    /// counted and weighed into the store's health as the store's own
    /// timeout would be (a write's outcome unknown, a read timed out), and
    /// `waited`, the least it took, recorded as its latency. Without this a
    /// store answering every heartbeat a little late lapsed the lease with
    /// no error counted and `/healthz` saying ok.
    pub fn gave_up(&self, op: ErrorOp, waited: std::time::Duration) {
        let waited_ms = waited.as_millis() as u64;
        let verdict = match op {
            ErrorOp::Write | ErrorOp::WriteMember => Verdict::Failed(
                ErrorKind::ConflictUnknown,
                format!(
                    "{} outcome unknown: no answer within {waited_ms} ms, when its caller \
                     stopped waiting",
                    op.name()
                ),
            ),
            ErrorOp::Load | ErrorOp::ListMembers => Verdict::Failed(
                ErrorKind::Timeout,
                format!(
                    "{}: no answer within {waited_ms} ms, when its caller stopped waiting",
                    op.name()
                ),
            ),
        };
        self.health.note(op, verdict);
        if let Some(stats) = self.backend.stats() {
            let histogram = match op {
                ErrorOp::Load => &stats.load,
                ErrorOp::Write => &stats.write,
                ErrorOp::WriteMember => &stats.write_member,
                ErrorOp::ListMembers => &stats.list_members,
            };
            histogram.record_shared(waited);
        }
    }

    /// `answer`, noting what it says of the store once it is in.
    fn observed<T: Send + 'static>(
        &self,
        op: ErrorOp,
        answer: StoreFuture<T>,
        verdict: fn(&T) -> Verdict,
    ) -> StoreFuture<T> {
        let health = self.health.clone();
        Box::pin(async move {
            let result = answer.await;
            health.note(op, verdict(&result));
            result
        })
    }

    /// Refuses a state over `store.state_max_bytes` before it is sent,
    /// counted (`too_large`) and logged like a store error, though it does
    /// not make the store failing: nothing is wrong with the store.
    fn check_state(&self, write: &RecordWrite) -> Result<(), WriteError> {
        if write.state.len() > self.state_max_bytes {
            let error = WriteError::StateTooLarge {
                len: write.state.len(),
                max: self.state_max_bytes,
            };
            let verdict = Verdict::Failed(ErrorKind::TooLarge, error.to_string());
            self.health.note(ErrorOp::Write, verdict);
            return Err(error);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::sqlite::{open_sqlite, GroupCommit};

    #[test]
    fn an_operation_given_up_is_a_failure_with_its_wait_as_latency() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig::default();
        let store =
            open_sqlite(&dir.path().join("store.db"), &config, GroupCommit::On).expect("open");
        let probe = store.probe();
        for _ in 0..health::FAILURES_UNHEALTHY_MIN {
            store.gave_up(ErrorOp::WriteMember, Duration::from_millis(400));
        }
        let unknown = probe
            .health()
            .errors(ErrorOp::WriteMember, ErrorKind::ConflictUnknown);
        assert_eq!(unknown, health::FAILURES_UNHEALTHY_MIN);
        let cause = store.failing().expect("failing");
        assert!(cause.contains("no answer within 400 ms"), "{cause}");
        let latencies = &probe.stats().write_member;
        assert_eq!(latencies.count(), health::FAILURES_UNHEALTHY_MIN);
        assert!(latencies.sum_ns() >= 3 * 400_000_000);
        store.gave_up(ErrorOp::ListMembers, Duration::from_millis(5));
        let timeouts = probe
            .health()
            .errors(ErrorOp::ListMembers, ErrorKind::Timeout);
        assert_eq!(timeouts, 1);
    }
}
