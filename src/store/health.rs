//! What the store's answers say about the store: every failed operation is
//! counted by operation and kind, logged (at most one line per operation
//! and kind every `ERROR_LOG_INTERVAL_MS`, with a count of the lines
//! suppressed), and a run of failures marks the store failing, which
//! `/healthz` reports until an operation succeeds again.
//!
//! One `StoreHealth` per store, shared by every handle and written by
//! whichever core awaited the operation, so with atomic read-modify-write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::error::{BackendError, LoadError, MembershipError, WriteError};
use super::membership::MemberOutcome;
use super::record::WriteOutcome;

/// Consecutive failed operations after which the store counts as failing
/// (`/healthz` answers 503). One failure is a blip the callers retry; a
/// run of them, heartbeats included, is a store that does not answer.
pub const FAILURES_UNHEALTHY_MIN: u64 = 3;

/// At most one log line per operation and kind this often; the lines not
/// written are counted in the next one.
pub const ERROR_LOG_INTERVAL_MS: u64 = 5000;

/// Longest cause kept for `/healthz`, in bytes: a backend message can be
/// long, a health answer should not be.
pub const CAUSE_BYTES_MAX: usize = 512;

pub use crate::metrics::{ErrorKind, ErrorOp};

/// Whether `kind` says the store is failing. A full queue is the store
/// shedding load it cannot take yet, not a store that fails.
const fn is_failure(kind: ErrorKind) -> bool {
    !matches!(kind, ErrorKind::Overloaded | ErrorKind::TooLarge)
}

const OPS: usize = ErrorOp::ALL.len();
const KINDS: usize = ErrorKind::ALL.len();

/// What one answer says.
pub(crate) enum Verdict {
    /// The store answered (a refused CAS is an answer).
    Answered,
    /// The store failed the operation, for this reason.
    Failed(ErrorKind, String),
    /// The caller's own mistake (a state too large): says nothing of the
    /// store.
    Neither,
}

/// One store's error counts and its failing state.
#[derive(Debug)]
pub struct StoreHealth {
    errors: [[AtomicU64; KINDS]; OPS],
    /// When each (op, kind) last wrote a log line, in ms since `epoch`
    /// (0: never).
    logged_at_ms: [[AtomicU64; KINDS]; OPS],
    suppressed: [[AtomicU64; KINDS]; OPS],
    /// Failures in a row, of reads and of writes apart: a store whose
    /// reads answer while every write fails (a full disk, a file system
    /// remounted read-only, a lock held by a frozen process) is failing,
    /// though the polls and the `/healthz` probe, all reads, answer.
    consecutive_failures: [AtomicU64; 2],
    /// The last failure's cause, for `/healthz`.
    last_cause: Mutex<String>,
    epoch: Instant,
}

impl Default for StoreHealth {
    fn default() -> Self {
        StoreHealth {
            errors: Default::default(),
            logged_at_ms: Default::default(),
            suppressed: Default::default(),
            consecutive_failures: Default::default(),
            last_cause: Mutex::new(String::new()),
            epoch: Instant::now(),
        }
    }
}

impl StoreHealth {
    /// Errors counted for `op` and `kind` since the store opened.
    pub fn errors(&self, op: ErrorOp, kind: ErrorKind) -> u64 {
        self.errors[op as usize][kind as usize].load(Ordering::Relaxed)
    }

    /// `Some(cause)` while the store is failing: its last
    /// `FAILURES_UNHEALTHY_MIN` reads, or its last as many writes, or more,
    /// all failed.
    pub fn failing(&self) -> Option<String> {
        let [reads, writes] = &self.consecutive_failures;
        let in_a_row = reads
            .load(Ordering::Acquire)
            .max(writes.load(Ordering::Acquire));
        if in_a_row < FAILURES_UNHEALTHY_MIN {
            return None;
        }
        Some(self.cause())
    }

    fn cause(&self) -> String {
        self.last_cause
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn note(&self, op: ErrorOp, verdict: Verdict) {
        match verdict {
            Verdict::Answered => self.consecutive_failures[side(op)].store(0, Ordering::Release),
            Verdict::Failed(kind, cause) => self.failed(op, kind, cause),
            Verdict::Neither => {}
        }
    }

    fn failed(&self, op: ErrorOp, kind: ErrorKind, cause: String) {
        let (o, k) = (op as usize, kind as usize);
        self.errors[o][k].fetch_add(1, Ordering::Relaxed);
        if is_failure(kind) {
            let mut cause = cause.clone();
            truncate(&mut cause, CAUSE_BYTES_MAX);
            *self
                .last_cause
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = cause;
            self.consecutive_failures[side(op)].fetch_add(1, Ordering::AcqRel);
        }
        // Never 0, so 0 stays "never logged".
        let now_ms = self.epoch.elapsed().as_millis() as u64 + 1;
        let last_ms = self.logged_at_ms[o][k].load(Ordering::Relaxed);
        let due = last_ms == 0 || now_ms.saturating_sub(last_ms) >= ERROR_LOG_INTERVAL_MS;
        // One core wins the line; the others count themselves suppressed.
        if due
            && self.logged_at_ms[o][k]
                .compare_exchange(last_ms, now_ms, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let suppressed = self.suppressed[o][k].swap(0, Ordering::AcqRel);
            tracing::warn!(
                op = op.name(),
                kind = kind.name(),
                suppressed,
                interval_ms = ERROR_LOG_INTERVAL_MS,
                "store operation failed: {cause}"
            );
        } else {
            self.suppressed[o][k].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Which count of failures in a row `op` moves: 0 reads, 1 writes.
const fn side(op: ErrorOp) -> usize {
    match op {
        ErrorOp::Load | ErrorOp::ListMembers => 0,
        ErrorOp::Write | ErrorOp::WriteMember => 1,
    }
}

fn truncate(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

/// The kind of a backend's error.
pub fn backend_kind(error: &BackendError) -> ErrorKind {
    match error {
        BackendError::Sqlite(error) => sqlite_kind(error),
        #[cfg(feature = "postgres")]
        BackendError::Postgres(error) => {
            let timed_out = error
                .as_db_error()
                .is_some_and(|db| *db.code() == tokio_postgres::error::SqlState::QUERY_CANCELED);
            if timed_out {
                ErrorKind::Timeout
            } else if error.is_closed() || error.as_db_error().is_none() {
                ErrorKind::Io
            } else {
                ErrorKind::Backend
            }
        }
        BackendError::Scylla(_) => ErrorKind::Backend,
        BackendError::Unavailable => ErrorKind::Unavailable,
        BackendError::Corrupt(_) => ErrorKind::Corrupt,
        BackendError::Injected => ErrorKind::Injected,
    }
}

fn sqlite_kind(error: &rusqlite::Error) -> ErrorKind {
    use rusqlite::ErrorCode;
    let rusqlite::Error::SqliteFailure(failure, _) = error else {
        // A value of the wrong type in a column this build wrote.
        return match error {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => ErrorKind::Corrupt,
            _ => ErrorKind::Backend,
        };
    };
    match failure.code {
        ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => ErrorKind::Corrupt,
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => ErrorKind::Timeout,
        ErrorCode::SystemIoFailure
        | ErrorCode::DiskFull
        | ErrorCode::CannotOpen
        | ErrorCode::ReadOnly
        | ErrorCode::PermissionDenied
        | ErrorCode::FileLockingProtocolFailed
        | ErrorCode::OutOfMemory => ErrorKind::Io,
        _ => ErrorKind::Backend,
    }
}

pub(crate) fn load_verdict<T>(result: &Result<T, LoadError>) -> Verdict {
    match result {
        Ok(_) => Verdict::Answered,
        Err(error) => Verdict::Failed(
            match error {
                LoadError::Overloaded => ErrorKind::Overloaded,
                LoadError::Closed => ErrorKind::Closed,
                LoadError::Timeout => ErrorKind::Timeout,
                LoadError::Backend(error) => backend_kind(error),
            },
            error.to_string(),
        ),
    }
}

/// A write that timed out answers `Indeterminate`: counted, with the
/// cause said plainly since there is no error to print.
pub(crate) fn write_verdict(result: &Result<Vec<WriteOutcome>, WriteError>) -> Verdict {
    match result {
        Ok(outcomes) if outcomes.contains(&WriteOutcome::Indeterminate) => Verdict::Failed(
            ErrorKind::ConflictUnknown,
            "write outcome unknown: no answer within store.request_timeout_ms, or the \
             connection was lost after it was sent"
                .to_string(),
        ),
        Ok(_) => Verdict::Answered,
        Err(error) => Verdict::Failed(
            match error {
                WriteError::Overloaded => ErrorKind::Overloaded,
                WriteError::Closed => ErrorKind::Closed,
                WriteError::Backend(error) => backend_kind(error),
                WriteError::StateTooLarge { .. } | WriteError::BatchTooLarge { .. } => {
                    ErrorKind::TooLarge
                }
            },
            error.to_string(),
        ),
    }
}

pub(crate) fn member_write_verdict(result: &Result<MemberOutcome, MembershipError>) -> Verdict {
    match result {
        Ok(MemberOutcome::Indeterminate) => Verdict::Failed(
            ErrorKind::ConflictUnknown,
            "membership write outcome unknown: no answer within store.request_timeout_ms, or \
             the connection was lost after it was sent"
                .to_string(),
        ),
        Ok(_) => Verdict::Answered,
        Err(error) => membership_failure(error),
    }
}

pub(crate) fn list_verdict<T>(result: &Result<T, MembershipError>) -> Verdict {
    match result {
        Ok(_) => Verdict::Answered,
        Err(error) => membership_failure(error),
    }
}

fn membership_failure(error: &MembershipError) -> Verdict {
    let kind = match error {
        MembershipError::Overloaded => ErrorKind::Overloaded,
        MembershipError::Closed => ErrorKind::Closed,
        MembershipError::Timeout => ErrorKind::Timeout,
        MembershipError::Backend(error) => backend_kind(error),
        MembershipError::RowTooLarge { .. } | MembershipError::PollTooLarge { .. } => {
            return Verdict::Neither
        }
    };
    Verdict::Failed(kind, error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(health: &StoreHealth, kind: ErrorKind) {
        health.note(ErrorOp::Load, Verdict::Failed(kind, format!("{kind:?}")));
    }

    #[test]
    fn a_run_of_failures_marks_the_store_failing_until_an_answer() {
        let health = StoreHealth::default();
        for _ in 1..FAILURES_UNHEALTHY_MIN {
            fail(&health, ErrorKind::Corrupt);
            assert_eq!(health.failing(), None);
        }
        fail(&health, ErrorKind::Corrupt);
        assert_eq!(health.failing().as_deref(), Some("Corrupt"));
        health.note(ErrorOp::Load, Verdict::Neither);
        assert!(
            health.failing().is_some(),
            "a caller's mistake is no answer"
        );
        health.note(ErrorOp::Load, Verdict::Answered);
        assert_eq!(health.failing(), None);
        assert_eq!(
            health.errors(ErrorOp::Load, ErrorKind::Corrupt),
            FAILURES_UNHEALTHY_MIN
        );
        assert_eq!(health.errors(ErrorOp::Write, ErrorKind::Corrupt), 0);
    }

    #[test]
    fn writes_that_keep_failing_mark_the_store_failing_however_reads_answer() {
        // A full disk: polls and the /healthz probe (reads) answer, every
        // heartbeat and save (writes) fails.
        let health = StoreHealth::default();
        for _ in 0..FAILURES_UNHEALTHY_MIN {
            health.note(ErrorOp::Load, Verdict::Answered);
            let cause = "database or disk is full".to_string();
            health.note(ErrorOp::WriteMember, Verdict::Failed(ErrorKind::Io, cause));
            health.note(ErrorOp::ListMembers, Verdict::Answered);
        }
        assert_eq!(
            health.failing().as_deref(),
            Some("database or disk is full")
        );
        health.note(ErrorOp::Write, Verdict::Answered);
        assert_eq!(health.failing(), None, "a write answered again");
    }

    #[test]
    fn a_full_queue_is_counted_but_is_not_a_failing_store() {
        let health = StoreHealth::default();
        for _ in 0..FAILURES_UNHEALTHY_MIN * 2 {
            fail(&health, ErrorKind::Overloaded);
        }
        assert_eq!(health.failing(), None);
        assert_eq!(
            health.errors(ErrorOp::Load, ErrorKind::Overloaded),
            FAILURES_UNHEALTHY_MIN * 2
        );
    }

    #[test]
    fn log_lines_are_limited_per_op_and_kind() {
        let health = StoreHealth::default();
        for _ in 0..10 {
            fail(&health, ErrorKind::Io);
        }
        // The first was logged, the nine after it within the interval not.
        let (o, k) = (ErrorOp::Load as usize, ErrorKind::Io as usize);
        assert_ne!(health.logged_at_ms[o][k].load(Ordering::Relaxed), 0);
        assert_eq!(health.suppressed[o][k].load(Ordering::Relaxed), 9);
        // Another kind has its own line.
        fail(&health, ErrorKind::Timeout);
        let t = ErrorKind::Timeout as usize;
        assert_eq!(health.suppressed[o][t].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn sqlite_corruption_is_its_own_kind() {
        let corrupt = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            None,
        );
        let not_a_db = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
            None,
        );
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        for (error, kind) in [
            (corrupt, ErrorKind::Corrupt),
            (not_a_db, ErrorKind::Corrupt),
            (busy, ErrorKind::Timeout),
        ] {
            let error = BackendError::from(error);
            assert_eq!(backend_kind(&error), kind, "{error}");
        }
        assert_eq!(
            backend_kind(&BackendError::Unavailable),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn a_long_cause_is_cut_on_a_char_boundary() {
        let mut text = "é".repeat(CAUSE_BYTES_MAX);
        truncate(&mut text, CAUSE_BYTES_MAX + 1);
        assert!(text.len() <= CAUSE_BYTES_MAX + 1);
        assert!(text.is_char_boundary(text.len()));
    }
}
