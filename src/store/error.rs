//! One narrow error enum per store operation. A timeout of a write is not an
//! error: it is `WriteOutcome::Indeterminate`, because the write may have
//! happened and the caller must re-read.

use std::path::PathBuf;
use std::sync::Arc;

/// What a backend reported. Shared (`Arc`) so that one failed group-commit
/// transaction can answer every caller it carried.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BackendError {
    /// SQLite refused or failed.
    #[error("sqlite: {0}")]
    Sqlite(Arc<rusqlite::Error>),
    /// The Scylla driver refused or failed.
    #[error("scylla: {0}")]
    Scylla(Arc<dyn std::error::Error + Send + Sync>),
    /// PostgreSQL refused or failed.
    #[cfg(feature = "postgres")]
    #[error("postgres: {}", super::postgres_sql::describe(.0))]
    Postgres(Arc<tokio_postgres::Error>),
    /// No connection to the store server could be had: the request was
    /// never sent, so a write did not happen.
    #[error("store server unavailable: no connection, request not sent")]
    Unavailable,
    /// A stored value this version cannot read (a bad blob, a negative
    /// counter): never silently defaulted.
    #[error("corrupt stored value: {0}")]
    Corrupt(&'static str),
    /// A fault the memory backend was told to inject.
    #[error("injected fault")]
    Injected,
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for BackendError {
    fn from(error: tokio_postgres::Error) -> Self {
        BackendError::Postgres(Arc::new(error))
    }
}

impl From<rusqlite::Error> for BackendError {
    fn from(error: rusqlite::Error) -> Self {
        BackendError::Sqlite(Arc::new(error))
    }
}

/// Whether SQLite said the file is damaged or is not a database.
pub(crate) fn is_corruption(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Why a load has no answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LoadError {
    /// The request queue is full; nothing was sent. Retry later.
    #[error("store overloaded: request queue full")]
    Overloaded,
    /// The store thread has stopped.
    #[error("store closed")]
    Closed,
    /// No answer within `store.request_timeout_ms`.
    #[error("store load timed out")]
    Timeout,
    /// The backend failed the read.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Why a write did not happen.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WriteError {
    /// The request queue is full; the write was never sent, so it did not
    /// happen.
    #[error("store overloaded: request queue full")]
    Overloaded,
    /// The store thread has stopped before the write was sent, so it did
    /// not happen.
    #[error("store closed")]
    Closed,
    /// The state blob is larger than `store.state_max_bytes`; nothing was
    /// written.
    #[error("state of {len} bytes exceeds store.state_max_bytes = {max}")]
    StateTooLarge {
        /// The state's bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A batch longer than `store.batch_max`; the caller splits it.
    #[error("batch of {len} writes exceeds store.batch_max = {max}")]
    BatchTooLarge {
        /// The batch's writes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The backend refused the write (the whole batch, for a batch): it
    /// did not happen.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Why a membership request has no answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum MembershipError {
    /// The request queue is full; nothing was sent.
    #[error("store overloaded: request queue full")]
    Overloaded,
    /// The store thread has stopped.
    #[error("store closed")]
    Closed,
    /// No answer within `store.request_timeout_ms` to a list (a write that
    /// timed out is `MemberOutcome::Indeterminate`).
    #[error("membership request timed out")]
    Timeout,
    /// A row too large to store (see `membership::MEMBER_ROW_BYTES_MAX`).
    #[error("member row of {len} bytes exceeds {max}")]
    RowTooLarge {
        /// The row's bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A poll of more rows than `membership::POLL_ROWS_MAX`.
    #[error("a poll of {len} member rows exceeds {max}")]
    PollTooLarge {
        /// The rows asked for.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The backend failed the request.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory of the SQLite file could not be made.
    #[error("cannot create the store directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// SQLite could not open the file.
    #[error("cannot open the SQLite store {path}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// `PRAGMA quick_check` (or the open itself) found the file damaged.
    #[error(
        "the SQLite store {path} is damaged: {report}; restore it from a backup or move it \
         aside to start with an empty store"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the check reported, bounded.
        report: String,
    },
    /// The file was written by an incompatible routerd version.
    #[error(
        "store schema version {found} in {path} is not supported (this build uses version \
         {expected}); use a matching routerd or a new store file"
    )]
    SchemaVersion {
        /// The file.
        path: PathBuf,
        /// The version the file says.
        found: i64,
        /// The version this build uses.
        expected: i64,
    },
    /// No session with the Scylla cluster could be had.
    #[error("cannot connect to the Scylla cluster: {0}")]
    Scylla(String),
    /// The PostgreSQL server could not be reached or set up.
    #[error("cannot open the PostgreSQL store: {0}")]
    Postgres(String),
    /// The database holds routerd tables of another version (0: tables
    /// without a version, not a routerd store).
    #[error(
        "PostgreSQL store schema version {found} is not supported (this build uses version \
         {expected}); use a matching routerd or another database"
    )]
    PostgresSchemaVersion {
        /// The version the database says.
        found: i64,
        /// The version this build uses.
        expected: i64,
    },
    /// The store's thread could not be started.
    #[error("cannot start the store thread: {0}")]
    Thread(std::io::Error),
    /// The store's configuration cannot be used; the message says why.
    #[error("invalid store configuration: {0}")]
    Config(&'static str),
    /// The config names a backend this binary was built without.
    #[error(
        "this routerd was built without the {backend} store backend: build it with the cargo \
         feature `{backend}` (on by default), or choose store.backend = \"sqlite\""
    )]
    NotBuilt {
        /// The backend's name, which is also its cargo feature's.
        backend: &'static str,
    },
}
