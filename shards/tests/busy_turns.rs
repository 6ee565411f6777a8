//! A core kept busy by a task that always has more to do still fires its
//! timers on time: a turn polls tasks for a bounded time, not only a
//! bounded count, before it looks at timers and the ring.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one poll of the busy task costs: a router poll handling a full
/// batch of requests that each run a script is of this order.
const POLL_WORK: Duration = Duration::from_millis(4);

#[test]
fn a_timer_fires_on_time_beside_a_task_that_never_runs_out_of_work() {
    let seen = Arc::new(Mutex::new(None));
    let report = seen.clone();
    let (runtime, shutdown) = common::on_a_core(common::one_core(), move || {
        let report = report.clone();
        async move {
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let busy = {
                let stop = stop.clone();
                shards::spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let until = Instant::now() + POLL_WORK;
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                        shards::yield_now().await;
                    }
                })
            };
            let mut late = Duration::ZERO;
            for _ in 0..10 {
                let asked = Instant::now();
                shards::sleep(Duration::from_millis(10)).await;
                late = late.max(asked.elapsed().saturating_sub(Duration::from_millis(10)));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            busy.await;
            *report.lock().unwrap() = Some(late);
        }
    });
    let late = common::wait_for_within(&seen, Duration::from_secs(60));
    shutdown.trigger();
    runtime.join().unwrap();
    // A turn of 256 such polls ran for about a second before the timers
    // were looked at; now a turn ends after about a poll.
    assert!(
        late < POLL_WORK * 5,
        "a 10 ms sleep ended up to {late:?} late beside a busy task"
    );
}
