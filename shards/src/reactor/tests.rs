//! The reactor driven by hand, without an executor: full queues, an
//! overflowing completion queue and submit failures.

use super::*;

/// A reactor of its own, not run by an executor: the tests drive it.
fn reactor(entries: u32, cq_entries: u32) -> (Reactor, std::os::fd::OwnedFd) {
    // SAFETY: eventfd makes a new descriptor or fails; it is owned at once.
    let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(wake >= 0, "eventfd");
    // SAFETY: `wake` is a fresh descriptor nothing else owns.
    let wake = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(wake) };
    let config = RingConfig {
        entries,
        cq_entries,
        mode: TaskRun::Defer,
        recv_buffers: 4,
        recv_buffer_bytes: 64,
        registered_files: 0,
        recv_buffers_per_conn_max: 4,
    };
    let reactor = Reactor::new(config, std::os::fd::AsRawFd::as_raw_fd(&wake)).expect("ring");
    (reactor, wake)
}

/// Submits `count` no-ops; returns their slots.
fn nops(reactor: &Reactor, count: usize) -> Vec<usize> {
    (0..count)
        // SAFETY: a no-op points at no memory.
        .map(|_| unsafe { reactor.submit(opcode::Nop::new().build()) })
        .collect()
}

/// Enters and reaps until every slot of `ops` completed (or 5 s pass);
/// returns their results.
fn complete_all(reactor: &Reactor, ops: &[usize]) -> Vec<i32> {
    let mut cx = Context::from_waker(Waker::noop());
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut results = vec![None; ops.len()];
    while results.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "operations never completed");
        match reactor.enter(Some(Some(Duration::from_millis(10)))) {
            Ok(()) => {}
            Err(error) if error.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(error) => panic!("enter: {error}"),
        }
        reactor.reap();
        for (result, &op) in results.iter_mut().zip(ops) {
            if result.is_none() {
                if let Poll::Ready((res, _)) = reactor.poll_op(op, &mut cx) {
                    *result = Some(res);
                }
            }
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

/// A burst far past both queues' sizes in one turn: the submission
/// queue fills many times over and the completion queue overflows, and
/// still every operation completes once, none lost.
#[test]
fn a_burst_past_a_full_submission_queue_and_a_small_completion_queue() {
    let (reactor, _wake) = reactor(4, 8);
    let ops = nops(&reactor, 1000);
    assert!(
        reactor.ring.borrow_mut().submission().cq_overflow(),
        "the burst did not overflow the completion queue"
    );
    let results = complete_all(&reactor, &ops);
    assert!(results.iter().all(|&res| res == 0), "{results:?}");
    assert_eq!(reactor.in_flight(), 0);
}

/// A full submission queue whose submit fails for a while (the kernel
/// short of memory) keeps its entries, in order, for the next entry
/// instead of bringing the core down.
#[test]
fn a_transient_submit_failure_on_a_full_queue_is_retried_not_fatal() {
    for errno in [libc::EAGAIN, libc::ENOMEM, libc::EBUSY] {
        let (reactor, _wake) = reactor(4, 64);
        reactor.fail_submits.set((3, errno));
        let ops = nops(&reactor, 40);
        assert!(!reactor.backlog.borrow().is_empty(), "errno {errno}");
        assert!(reactor.needs_enter());
        // ENOMEM reaches the caller as an error, as it would the
        // executor, which sleeps a moment and enters again.
        let mut cx = Context::from_waker(Waker::noop());
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut done = vec![false; ops.len()];
        while done.iter().any(|done| !done) {
            assert!(Instant::now() < deadline, "errno {errno}: stuck");
            let _ = reactor.enter(None);
            reactor.reap();
            for (done, &op) in done.iter_mut().zip(&ops) {
                if !*done {
                    if let Poll::Ready((res, _)) = reactor.poll_op(op, &mut cx) {
                        assert_eq!(res, 0);
                        *done = true;
                    }
                }
            }
            // No-ops complete as they are submitted: what has completed
            // is always the first ones pushed, or the backlog let later
            // entries overtake it.
            let completed = done.iter().take_while(|done| **done).count();
            assert!(
                done[completed..].iter().all(|done| !done),
                "errno {errno}: submitted out of order: {done:?}"
            );
        }
        assert!(reactor.backlog.borrow().is_empty());
        assert_eq!(reactor.in_flight(), 0, "errno {errno}");
    }
}

/// A backlog the kernel refuses for want of memory (EAGAIN) does not stop
/// the entry from running the deferred completion work, which is what
/// frees the kernel's memory: a receive that completed meanwhile is
/// reaped in that same turn.
#[test]
fn a_refused_backlog_still_reaps_what_completed() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let (reactor, _wake) = reactor(4, 64);
    let (mut writer, reader) = std::os::unix::net::UnixStream::pair().expect("pair");
    let mut buf = Box::new([0u8; 8]);
    let recv = opcode::Recv::new(types::Fd(reader.as_raw_fd()), buf.as_mut_ptr(), 8).build();
    // SAFETY: `buf` is boxed and outlives the receive, which completes
    // below before it is read.
    let index = unsafe { reactor.submit(recv) };
    reactor.enter(None).expect("enter");
    reactor.reap();
    // The receive's completion is now deferred work of the ring.
    writer.write_all(b"hello").expect("write");
    // The kernel refuses the submit that would make room in the full
    // queue (a backlog forms), and the entry's flush of that backlog.
    reactor.fail_submits.set((2, libc::EAGAIN));
    let queued = nops(&reactor, 12);
    assert!(!reactor.backlog.borrow().is_empty());
    let _ = reactor.enter(None);
    reactor.reap();
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(
        reactor.poll_op(index, &mut cx),
        Poll::Ready((5, 0)),
        "the completion waited for a later turn"
    );
    assert_eq!(&buf[..5], b"hello");
    assert!(complete_all(&reactor, &queued).iter().all(|&res| res == 0));
}

/// The read of the wake-up eventfd waits as a poll on the descriptor, not
/// on a worker thread: a cancel ends it at once, with no write.
#[test]
fn the_wake_read_waits_as_a_poll_that_a_cancel_ends() {
    let (reactor, _wake) = reactor(4, 64);
    reactor.arm_wake();
    reactor.enter(None).expect("enter");
    reactor.reap();
    assert!(reactor.wake_armed.get(), "the read waits");
    let cancel_all = opcode::AsyncCancel2::new(types::CancelBuilder::any()).build();
    // SAFETY: a cancel points at no memory.
    unsafe { reactor.submit_ignored(cancel_all) };
    let deadline = Instant::now() + Duration::from_secs(1);
    while reactor.wake_armed.get() {
        assert!(Instant::now() < deadline, "the cancel did not end the read");
        let _ = reactor.enter(Some(Some(Duration::from_millis(10))));
        reactor.reap();
    }
}

/// Submits a send of `buf` to `fd` that nobody awaits (a reply started and
/// not polled); returns its slot.
fn unawaited_send(reactor: &Reactor, fd: i32, buf: &[u8]) -> usize {
    let chain = Rc::new(SendChain::default());
    let entry = opcode::Send::new(types::Fd(fd), buf.as_ptr(), buf.len() as u32).build();
    // SAFETY: `buf` outlives the send: the callers complete it before
    // they let the buffer go.
    unsafe { reactor.submit_send(entry, &chain) }
}

/// At pipeline 1 a reply's send, which completes while the entry submits
/// it and wakes no one, does not end the wait for the next request: one
/// kernel entry submits the send and sleeps until the completion that
/// matters (here a 30 µs timeout standing in for the next request).
#[test]
fn a_send_nobody_awaits_does_not_end_the_wait() {
    let (reactor, _wake) = reactor(16, 64);
    if !reactor.min_timeout {
        eprintln!("skipped: this kernel has no IORING_FEAT_MIN_TIMEOUT");
        return;
    }
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let reply = b"reply".to_vec();
    let send = unawaited_send(&reactor, std::os::fd::AsRawFd::as_raw_fd(&ours), &reply);
    let next_request = types::Timespec::new().nsec(30_000);
    // SAFETY: the kernel copies the timespec when it takes the entry.
    let timeout = unsafe { reactor.submit(opcode::Timeout::new(&next_request).build()) };
    let mut cx = Context::from_waker(Waker::noop());
    assert!(reactor.poll_op(timeout, &mut cx).is_pending(), "awaited");
    let before = reactor.enters.get();
    let deadline = Instant::now() + Duration::from_secs(5);
    while reactor.poll_op(timeout, &mut cx).is_pending() {
        assert!(Instant::now() < deadline, "the timeout never completed");
        reactor.enter(Some(None)).expect("enter");
        reactor.reap();
    }
    assert_eq!(
        reactor.enters.get() - before,
        1,
        "kernel entries to submit a reply and wait for the next request"
    );
    let mut got = [0u8; 5];
    std::io::Read::read_exact(&mut theirs, &mut got).expect("read");
    assert_eq!(&got, b"reply");
    assert_eq!(complete_all(&reactor, &[send]), vec![5]);
    drop(reply);
}

/// A wait that counted on a quiet completion still ends soon after it
/// came when nothing else does (the short bound), not at the loop's
/// timeout: a core with nothing else to do parks again at once.
#[test]
fn a_wait_for_more_than_the_quiet_completions_ends_at_its_short_bound() {
    let (reactor, _wake) = reactor(16, 64);
    let (ours, _theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let reply = b"reply".to_vec();
    let send = unawaited_send(&reactor, std::os::fd::AsRawFd::as_raw_fd(&ours), &reply);
    let started = Instant::now();
    reactor
        .enter(Some(Some(Duration::from_secs(10))))
        .expect("enter");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the wait held out for its full timeout: {:?}",
        started.elapsed()
    );
    reactor.reap();
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(reactor.poll_op(send, &mut cx), Poll::Ready((5, 0)));
    drop(reply);
}
