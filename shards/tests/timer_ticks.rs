//! A kernel timer's periods watched through the core's ring: every period
//! is seen, and a look costs a read system call only once the timer fired.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shards::TimerTicks;

/// Read-family system calls this thread made (`syscr` of
/// `/proc/thread-self/io`), or `None` without task IO accounting.
fn read_syscalls() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("syscr: "))
        .and_then(|count| count.trim().parse().ok())
}

#[test]
fn a_core_reads_its_timer_once_a_period_not_once_a_look() {
    let seen = Arc::new(Mutex::new(None));
    let report = seen.clone();
    let (runtime, shutdown) = common::on_a_core(common::one_core(), move || {
        let report = report.clone();
        async move {
            let mut ticks =
                TimerTicks::new(libc::CLOCK_MONOTONIC, Duration::from_millis(2)).unwrap();
            let mut counted = 0;
            let before = read_syscalls();
            // Ten thousand looks across about 60 ms of turns.
            for look in 0..10_000u32 {
                counted += ticks.take().unwrap_or(0);
                if look % 500 == 0 {
                    shards::sleep(Duration::from_millis(3)).await;
                }
            }
            let after = read_syscalls();
            *report.lock().unwrap() = Some((counted, before, after));
        }
    });
    let (counted, before, after) = common::wait_for_within(&seen, Duration::from_secs(10));
    shutdown.trigger();
    runtime.join().unwrap();
    // 20 sleeps of at least 3 ms: at least 30 ms of 2 ms periods, of which
    // all but the last read's are reaped by the last look.
    assert!(counted >= 10, "periods counted: {counted}");
    if let (Some(before), Some(after)) = (before, after) {
        // One read per period that ended (a look that reads each time
        // makes 10,000), and one for the second look at /proc itself.
        assert!(
            after - before <= counted + 2,
            "read system calls for 10,000 looks: {}",
            after - before
        );
    }
}

#[test]
fn a_timer_dropped_with_its_poll_armed_lets_the_core_stop() {
    let done = Arc::new(Mutex::new(None));
    let report = done.clone();
    let (runtime, shutdown) = common::on_a_core(common::one_core(), move || {
        let report = report.clone();
        async move {
            let ticks = TimerTicks::new(libc::CLOCK_MONOTONIC, Duration::from_secs(60)).unwrap();
            shards::sleep(Duration::from_millis(5)).await;
            drop(ticks);
            // The cancelled read's completion frees its slot.
            shards::sleep(Duration::from_millis(20)).await;
            *report.lock().unwrap() = Some(shards::ops_in_flight());
        }
    });
    let in_flight = common::wait_for(&done);
    shutdown.trigger();
    runtime.join().unwrap();
    assert_eq!(in_flight, 0, "operations left in the kernel");
}

thread_local! {
    /// Where a timer outlives the core's tasks, as a structure the last
    /// task's drop does not reach would keep it.
    static KEPT: std::cell::RefCell<Vec<TimerTicks>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[test]
fn a_timer_kept_past_the_tasks_does_not_hold_the_core_s_stop() {
    let done = Arc::new(Mutex::new(None));
    let report = done.clone();
    let (runtime, shutdown) = common::on_a_core(common::one_core(), move || {
        let report = report.clone();
        async move {
            let ticks = TimerTicks::new(libc::CLOCK_MONOTONIC, Duration::from_secs(60)).unwrap();
            shards::sleep(Duration::from_millis(5)).await;
            KEPT.with(|kept| kept.borrow_mut().push(ticks));
            *report.lock().unwrap() = Some(());
        }
    });
    common::wait_for(&done);
    let stopping = std::time::Instant::now();
    shutdown.trigger();
    runtime.join().unwrap();
    // The stop cancels the poll; its completion is the kernel letting go,
    // whether or not the timer ever looks again (it waited 2 s before).
    let stop = stopping.elapsed();
    assert!(
        stop < Duration::from_secs(1),
        "the core took {stop:?} to stop"
    );
}
