//! Which file a SQLite store has open, so that a file deleted or
//! replaced under a running node is noticed.
//!
//! SQLite keeps writing to the file it opened: deleted (`rm`, a `data_dir`
//! cleaned) its inode lives on unnamed until the process ends, and every
//! commit is acknowledged into it and gone at the next start; replaced, the
//! node writes to the old file while another process (a restart of a node
//! sharing the path) opens a new, empty one beside it. SQLite notices a
//! moved file only when it opens a rollback journal, which WAL mode never
//! does. So each write transaction first checks that the path still names
//! the file opened: one `stat` beside a commit's sync. A write refused here
//! fails like a disk failing (`io`): nothing more is acknowledged, the
//! heartbeats fail, and the node's lease runs out.
//!
//! The WAL file beside it (`<path>-wal`) is checked the same way. Deleting
//! it is a common remedy for "database is locked", and SQLite goes on
//! appending commits to the unlinked file it holds open: at the next open
//! every commit since the last checkpoint is gone. Its identity is taken
//! when the store opens (the open's reads create it), or at the first
//! write that finds it if it was not there yet.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::error::BackendError;

/// The device and inode of the store file and its WAL when the store
/// opened them.
#[derive(Debug)]
pub(super) struct OpenedFile {
    path: PathBuf,
    identity: (u64, u64),
    wal: PathBuf,
    wal_identity: OnceLock<(u64, u64)>,
}

/// The device and inode `path` names now, `None` when it names nothing.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path)
        .ok()
        .map(|metadata| (metadata.dev(), metadata.ino()))
}

/// The WAL file of the store file at `path`.
pub(super) fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

impl OpenedFile {
    /// The file `path` names now (it exists: the store just opened it),
    /// and its WAL if there is one yet.
    pub(super) fn at(path: &Path) -> std::io::Result<OpenedFile> {
        let metadata = std::fs::metadata(path)?;
        let wal = wal_path(path);
        let wal_identity = OnceLock::new();
        if let Some(found) = identity(&wal) {
            let _ = wal_identity.set(found);
        }
        Ok(OpenedFile {
            path: path.to_path_buf(),
            identity: (metadata.dev(), metadata.ino()),
            wal,
            wal_identity,
        })
    }

    /// `Err` when the path no longer names the file opened, or its WAL
    /// path the WAL the store writes to.
    pub(super) fn check(&self) -> Result<(), BackendError> {
        if identity(&self.path) != Some(self.identity) {
            return Err(refused(
                &self.path,
                "its writes would be lost at the next start",
            ));
        }
        let wal = identity(&self.wal);
        let opened = match (self.wal_identity.get(), wal) {
            (Some(opened), _) => *opened,
            // None yet: SQLite makes it at the first transaction.
            (None, None) => return Ok(()),
            (None, Some(found)) => *self.wal_identity.get_or_init(|| found),
        };
        if wal != Some(opened) {
            return Err(refused(
                &self.wal,
                "the commits since the last checkpoint, and every further one, would be lost \
                 at the next start",
            ));
        }
        Ok(())
    }
}

/// The error of a write refused because `path` was deleted or replaced.
fn refused(path: &Path, loss: &str) -> BackendError {
    let failure = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR);
    let reason = format!(
        "the store file {} was deleted or replaced while the node ran: {loss}, so no write is \
         made",
        path.display()
    );
    rusqlite::Error::SqliteFailure(failure, Some(reason)).into()
}
