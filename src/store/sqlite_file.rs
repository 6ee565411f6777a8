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

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::error::BackendError;

/// The device and inode of the file at `path` when the store opened it.
#[derive(Debug)]
pub(super) struct OpenedFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl OpenedFile {
    /// The file `path` names now (it exists: the store just opened it).
    pub(super) fn at(path: &Path) -> std::io::Result<OpenedFile> {
        let metadata = std::fs::metadata(path)?;
        Ok(OpenedFile {
            path: path.to_path_buf(),
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }

    /// `Err` when the path no longer names the file opened.
    pub(super) fn check(&self) -> Result<(), BackendError> {
        let now = std::fs::metadata(&self.path)
            .ok()
            .map(|metadata| (metadata.dev(), metadata.ino()));
        if now == Some((self.device, self.inode)) {
            return Ok(());
        }
        let failure = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR);
        let reason = format!(
            "the store file {} was deleted or replaced while the node ran: its writes would be \
             lost at the next start, so none is made",
            self.path.display()
        );
        Err(rusqlite::Error::SqliteFailure(failure, Some(reason)).into())
    }
}
