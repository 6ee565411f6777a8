//! Whether this kernel lets go of a file removed from a registered file
//! table while an older operation on another index still runs.
//!
//! Before Linux 6.13 a removed file was released only once every
//! operation issued before its removal had completed: the table's
//! resource nodes were freed in order, and each operation on a registered
//! file held the node current when it was issued. A connection's multishot
//! receive lives as long as the connection, so one idle session kept the
//! socket of every connection closed after it open: its peer never saw the
//! end of the stream. Since 6.13 each file is counted on its own.
//!
//! Rather than trust a version number (distributions backport), the
//! runtime probes once per process: on a ring of its own it arms a receive
//! on one registered socket, removes another through the ring as a dropped
//! stream does, and looks whether that socket's peer sees the end. If not,
//! the cores use descriptors only.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

/// How long the probe waits for the removed socket's peer to see the end:
/// a kernel that releases it does so within a kernel entry or two.
const PROBE_PATIENCE: Duration = Duration::from_millis(100);

const PROBE_RECV: u64 = 1;
const PROBE_CLOSE: u64 = 2;
const PROBE_CANCEL: u64 = 3;

/// How a core's sockets are named in its ring's operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisteredFiles {
    /// By index in the ring's registered file table (as many as
    /// `registered_files` allows): the kernel releases a removed file
    /// at once.
    Registered,
    /// By descriptor: the probe saw this kernel keep a removed file open
    /// behind an older operation.
    DescriptorsOnly,
    /// By descriptor: the probe could not run (the reason is logged).
    Unprobed,
}

impl RegisteredFiles {
    /// The mode's name, for logs and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            RegisteredFiles::Registered => "registered",
            RegisteredFiles::DescriptorsOnly => "descriptors_only",
            RegisteredFiles::Unprobed => "unprobed",
        }
    }
}

/// What the probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// The removed socket was released while the older receive ran.
    Prompt,
    /// It stayed open behind the receive.
    Pinned,
}

/// This process's mode, probed on first use and logged once.
pub(crate) fn mode() -> RegisteredFiles {
    static MODE: OnceLock<RegisteredFiles> = OnceLock::new();
    *MODE.get_or_init(|| match probe() {
        Ok(Release::Prompt) => {
            tracing::info!(
                mode = RegisteredFiles::Registered.name(),
                "the kernel releases removed registered files at once; sockets use the file table"
            );
            RegisteredFiles::Registered
        }
        Ok(Release::Pinned) => {
            tracing::warn!(
                mode = RegisteredFiles::DescriptorsOnly.name(),
                "this kernel keeps a file removed from a registered file table open until \
                 older operations end (Linux before 6.13): sockets use descriptors only"
            );
            RegisteredFiles::DescriptorsOnly
        }
        Err(error) => {
            tracing::warn!(
                mode = RegisteredFiles::Unprobed.name(),
                %error,
                "cannot probe how the kernel releases registered files: sockets use descriptors only"
            );
            RegisteredFiles::Unprobed
        }
    })
}

/// Runs the probe on a ring of its own.
pub(crate) fn probe() -> io::Result<Release> {
    probe_removing(true)
}

/// The probe; `remove` false leaves the socket in the table (the tests'
/// control: its peer must then not see the end).
fn probe_removing(remove: bool) -> io::Result<Release> {
    let mut ring = IoUring::new(8)?;
    ring.submitter().register_files_sparse(2)?;
    let (idle, _idle_peer) = UnixStream::pair()?;
    let (removed, mut removed_peer) = UnixStream::pair()?;
    removed_peer.set_nonblocking(true)?;
    ring.submitter()
        .register_files_update(0, &[idle.as_raw_fd(), removed.as_raw_fd()])?;
    // The receive's buffer outlives the ring unless the receive is seen to
    // complete below.
    let buf: &'static mut [u8; 1] = Box::leak(Box::new([0u8; 1]));
    let recv = opcode::Recv::new(types::Fixed(0), buf.as_mut_ptr(), 1)
        .build()
        .user_data(PROBE_RECV);
    let close = if remove {
        opcode::Close::new(types::Fixed(1)).build()
    } else {
        opcode::Nop::new().build()
    }
    .user_data(PROBE_CLOSE);
    // SAFETY: the receive writes into `buf`, leaked unless its completion
    // is reaped (then it is freed); the close points at no memory.
    unsafe {
        let mut queue = ring.submission();
        queue.push(&recv).map_err(io::Error::other)?;
        queue.push(&close).map_err(io::Error::other)?;
    }
    ring.submit_and_wait(1)?;
    // The ring's table holds no reference to `removed` now; this drops the
    // last but the kernel's own.
    drop(removed);
    let deadline = Instant::now() + PROBE_PATIENCE;
    let release = loop {
        // A kernel entry runs whatever release work is deferred to it.
        ring.submit_and_wait(0)?;
        match removed_peer.read(&mut [0u8; 1]) {
            Ok(0) => break Release::Prompt,
            Ok(_) => return Err(io::Error::other("the probe's socket received bytes")),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
        if Instant::now() >= deadline {
            break Release::Pinned;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    finish(&mut ring, buf);
    Ok(release)
}

/// Cancels the probe's receive; frees its buffer once the kernel is seen
/// to be done with it (else leaves it leaked: one byte).
fn finish(ring: &mut IoUring, buf: &'static mut [u8; 1]) {
    let cancel = opcode::AsyncCancel::new(PROBE_RECV)
        .build()
        .user_data(PROBE_CANCEL);
    // SAFETY: a cancel points at no memory.
    if unsafe { ring.submission().push(&cancel) }.is_err() {
        return;
    }
    let deadline = Instant::now() + PROBE_PATIENCE;
    while Instant::now() < deadline {
        if ring.submit_and_wait(1).is_err() {
            return;
        }
        if ring.completion().any(|cqe| cqe.user_data() == PROBE_RECV) {
            // SAFETY: the receive completed: nothing else refers to `buf`.
            drop(unsafe { Box::from_raw(buf as *mut [u8; 1]) });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's release (major, minor), from its release string.
    fn kernel_version() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
        let mut parts = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|part| part.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    /// The probe agrees with what the kernel's version says (6.13 counts
    /// each registered file on its own). A backport on an older kernel
    /// would make this fail: then the probe is right and this test wrong.
    #[test]
    fn the_probe_sees_what_this_kernel_does() {
        let expected = if kernel_version() >= (6, 13) {
            Release::Prompt
        } else {
            Release::Pinned
        };
        assert_eq!(probe().expect("the probe runs"), expected);
    }

    /// The probe sees a socket the table still holds as pinned: what it
    /// measures is the table's hold, not the descriptor's close.
    #[test]
    fn a_socket_left_in_the_table_reads_as_pinned() {
        assert_eq!(
            probe_removing(false).expect("the probe runs"),
            Release::Pinned
        );
    }
}
