//! Each core's io_uring ring and how it is set up.
//!
//! Why the setup matters: a ring without cooperative or deferred task
//! running delivers each completion's task work by an inter-processor
//! interrupt while the core runs in user space, which at low pipeline depth
//! costs more than the request itself (docs/architecture.md, "The runtime"). routerd's rings are created by the core that uses them, only
//! that core submits, and completions are reaped only when it asks:
//! `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (Linux 6.1),
//! with `IORING_SETUP_TASKRUN_FLAG` so the core can see cheaply whether
//! deferred work waits. `TaskRun::Coop` (`COOP_TASKRUN`, no deferral) exists
//! to measure the difference. A kernel that refuses the flags is not
//! silently given a slower ring: the core refuses to start and says why.

use std::io;

use io_uring::IoUring;

/// How completions' task work runs; `cores.ring_taskrun` in the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskRun {
    /// `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG`: task work runs only
    /// when the core enters the kernel to reap completions.
    Defer,
    /// `SINGLE_ISSUER | COOP_TASKRUN | TASKRUN_FLAG`: task work runs at the
    /// core's next kernel transition, without an interrupt.
    Coop,
}

impl TaskRun {
    /// The ring flags this mode sets, as the start-up log names them.
    pub fn name(self) -> &'static str {
        match self {
            TaskRun::Defer => "single_issuer+defer_taskrun",
            TaskRun::Coop => "single_issuer+coop_taskrun",
        }
    }
}

/// Why a ring could not be created.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The kernel refuses the ring's flags (older than it needs).
    #[error(
        "this kernel refuses io_uring {flags} (EINVAL): routerd needs Linux 6.1 or newer \
         (found {kernel}); set cores.ring_taskrun = \"coop\" on Linux 6.0"
    )]
    Unsupported {
        /// The flags refused.
        flags: &'static str,
        /// The running kernel's release.
        kernel: String,
    },
    #[error(
        "io_uring is not permitted here ({source}): a container's seccomp profile may block \
         io_uring_setup, or /proc/sys/kernel/io_uring_disabled is set"
    )]
    /// io_uring is blocked (seccomp, `io_uring_disabled`).
    NotPermitted {
        /// What `io_uring_setup` answered.
        source: io::Error,
    },
    #[error(
        "cannot create an io_uring ring of {entries} entries ({source}): raise the locked-memory \
         limit (ulimit -l) or lower cores.ring_depth"
    )]
    /// The ring's memory is over the locked-memory limit.
    NoMemory {
        /// The submission queue entries asked for.
        entries: u32,
        /// What `io_uring_setup` answered.
        source: io::Error,
    },
    /// Any other failure of `io_uring_setup`.
    #[error("cannot create an io_uring ring: {0}")]
    Other(io::Error),
    /// The provided-buffer ring could not be registered.
    #[error("cannot register the receive buffer ring: {0}")]
    BufRing(io::Error),
    /// The registered file table could not be registered.
    #[error(
        "cannot register the ring's file table ({0}): lower cores.registered_files, \
         or set it to 0 to use descriptors only"
    )]
    FileTable(io::Error),
}

/// Builds a ring with `entries` submission entries and a completion queue
/// `cq_entries` long, set up as `mode` says.
pub(crate) fn build(entries: u32, cq_entries: u32, mode: TaskRun) -> Result<IoUring, RingError> {
    let mut builder = IoUring::builder();
    builder
        .setup_cqsize(cq_entries)
        .setup_single_issuer()
        .setup_taskrun_flag()
        .setup_submit_all();
    match mode {
        TaskRun::Defer => builder.setup_defer_taskrun(),
        TaskRun::Coop => builder.setup_coop_taskrun(),
    };
    builder
        .build(entries)
        .map_err(|error| classify(error, entries, mode))
}

/// Names what a failed `io_uring_setup` means for an operator.
pub(crate) fn classify(error: io::Error, entries: u32, mode: TaskRun) -> RingError {
    match error.raw_os_error() {
        Some(libc::EINVAL) => RingError::Unsupported {
            flags: mode.name(),
            kernel: kernel_release(),
        },
        Some(libc::EPERM) | Some(libc::ENOSYS) | Some(libc::EACCES) => {
            RingError::NotPermitted { source: error }
        }
        Some(libc::ENOMEM) => RingError::NoMemory {
            entries,
            source: error,
        },
        _ => RingError::Other(error),
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_string())
        .unwrap_or_else(|_| "an unknown version".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_their_cause() {
        let einval = classify(
            io::Error::from_raw_os_error(libc::EINVAL),
            8,
            TaskRun::Defer,
        );
        let text = einval.to_string();
        assert!(text.contains("Linux 6.1"), "{text}");
        assert!(text.contains("defer_taskrun"), "{text}");
        let eperm = classify(io::Error::from_raw_os_error(libc::EPERM), 8, TaskRun::Defer);
        assert!(eperm.to_string().contains("seccomp"), "{eperm}");
        let enomem = classify(io::Error::from_raw_os_error(libc::ENOMEM), 8, TaskRun::Coop);
        assert!(enomem.to_string().contains("ulimit -l"), "{enomem}");
    }

    /// What the setup changes, observed: a receive completes when data
    /// arrives, but with DEFER_TASKRUN its completion appears only when the
    /// ring's owner enters the kernel to reap, never on its own (a ring
    /// with COOP_TASKRUN posts it at the owner's next system call; a ring
    /// without either would post it at once, by an interrupt).
    #[test]
    fn deferred_completions_wait_for_the_owner_to_reap() {
        use io_uring::{opcode, types};
        use std::io::Write;
        use std::os::fd::AsRawFd;
        for mode in [TaskRun::Defer, TaskRun::Coop] {
            let mut ring = build(8, 16, mode).expect("ring");
            let (mut writer, reader) = std::os::unix::net::UnixStream::pair().expect("pair");
            let mut buf = [0u8; 8];
            let recv = opcode::Recv::new(types::Fd(reader.as_raw_fd()), buf.as_mut_ptr(), 8)
                .build()
                .user_data(7);
            // SAFETY: `buf` outlives the operation, which completes below.
            unsafe { ring.submission().push(&recv).expect("queue has room") };
            ring.submit().expect("submit");
            writer.write_all(b"hello").expect("write");
            // Any system call: a ring that runs task work at the owner's
            // kernel transitions (COOP) posts the completion here.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let visible = ring.completion().len();
            match mode {
                TaskRun::Defer => assert_eq!(visible, 0, "a deferred completion showed early"),
                TaskRun::Coop => assert_eq!(visible, 1, "COOP posts at the next transition"),
            }
            ring.submit_and_wait(1).expect("reap");
            let cqe = ring.completion().next().expect("completion");
            assert_eq!((cqe.user_data(), cqe.result()), (7, 5));
        }
    }

    #[test]
    fn both_setups_build_on_this_kernel() {
        for mode in [TaskRun::Defer, TaskRun::Coop] {
            let ring = build(8, 16, mode).expect("the test machine runs Linux >= 6.1");
            assert!(ring.params().is_setup_single_issuer());
        }
    }
}
