//! The core's registered file table: each connection's socket enters the
//! ring's fixed-file table once, so every receive and send on it finds the
//! file by index instead of looking the descriptor up and taking a
//! reference (`fget`/`fput`). With 1000 connections at pipeline 1 that
//! lookup cost about 2% of a core: a cache miss on each socket's `struct
//! file` per operation.
//!
//! A stream keeps its ordinary descriptor too, for socket options,
//! `shutdown` and the final close. Registering is one system call per
//! connection (`IORING_REGISTER_FILES_UPDATE`); a full table, or a failed
//! update, leaves the stream on its descriptor alone, which works the same
//! and is counted.
//!
//! An index is reused only after the ring has completed the close of its
//! previous file (`IORING_OP_CLOSE` on the index, queued behind every
//! operation already queued for it): an operation still in the submission
//! queue can never reach the next connection's socket.
//!
//! A kernel that keeps a removed file open behind older operations (before
//! Linux 6.13, see `probe.rs`) gets no table at all: its streams use their
//! descriptors, or a closed connection's peer could wait for its end as
//! long as any older connection lives.

mod probe;

pub use probe::RegisteredFiles;

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::RawFd;

use io_uring::IoUring;

pub(crate) struct FileTable {
    /// Indexes free to register into, popped from the back.
    free: RefCell<Vec<u32>>,
    size: u32,
    /// Streams that stayed on their descriptor: the table was full or the
    /// update failed.
    unregistered: Cell<u64>,
}

impl FileTable {
    /// Registers a sparse table of `wanted` entries on `ring`, or of the
    /// process's open-file limit if that is lower (the kernel refuses a
    /// larger table). Zero registers none: every stream uses its
    /// descriptor.
    pub fn register(ring: &IoUring, wanted: u32) -> io::Result<FileTable> {
        let size = if wanted > 0 && registered_files_mode() == RegisteredFiles::Registered {
            wanted.min(open_file_limit())
        } else {
            0
        };
        if size > 0 {
            ring.submitter().register_files_sparse(size)?;
        }
        Ok(FileTable {
            free: RefCell::new((0..size).rev().collect()),
            size,
            unregistered: Cell::new(0),
        })
    }

    /// Puts `fd` into a free index of the table; `None` (counted) when the
    /// table is full or the kernel refuses.
    pub fn insert(&self, ring: &IoUring, fd: RawFd) -> Option<u32> {
        let Some(index) = self.free.borrow_mut().pop() else {
            self.unregistered.set(self.unregistered.get() + 1);
            return None;
        };
        match ring.submitter().register_files_update(index, &[fd]) {
            Ok(1) => Some(index),
            _ => {
                self.free.borrow_mut().push(index);
                self.unregistered.set(self.unregistered.get() + 1);
                None
            }
        }
    }

    /// `index` is empty again: its close has completed.
    pub fn release(&self, index: u32) {
        debug_assert!(index < self.size);
        self.free.borrow_mut().push(index);
    }

    /// Indexes holding a file or waiting for their close to complete.
    pub fn in_use(&self) -> u32 {
        self.size - self.free.borrow().len() as u32
    }

    pub fn unregistered(&self) -> u64 {
        self.unregistered.get()
    }
}

/// How this process's cores name their sockets in ring operations: the
/// kernel's behaviour, probed once and logged when the first core starts.
pub fn registered_files_mode() -> RegisteredFiles {
    probe::mode()
}

fn open_file_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    u32::try_from(limit.rlim_cur).unwrap_or(u32::MAX)
}
