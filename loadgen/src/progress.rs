//! The live one-line display (stderr, terminals only): each second, the
//! answers, p50/p99 and failed requests of the last second, over all threads.

use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::runner::Snapshot;
use crate::stats::Progress;

/// Prints until every thread has hung up its sender.
pub fn display(rx: Receiver<Snapshot>, threads: usize) {
    let mut latest: Vec<Progress> = vec![Progress::default(); threads];
    let mut previous = Progress::default();
    let mut last_print = Instant::now();
    let started = Instant::now();
    let mut printed = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(snapshot) => {
                if let Some(slot) = latest.get_mut(snapshot.thread_index) {
                    *slot = snapshot.progress;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let elapsed = last_print.elapsed();
        if elapsed < Duration::from_secs(1) {
            continue;
        }
        last_print = Instant::now();
        let mut total = Progress::default();
        for progress in &latest {
            total.merge(progress);
        }
        let mut interval = total.latency_ns.clone();
        // The cumulative histogram only grows, so this cannot underflow; a
        // failure would only blank one progress line.
        let _ = interval.subtract(&previous.latency_ns);
        let answers = total.responses.saturating_sub(previous.responses);
        let failures = total.failures.saturating_sub(previous.failures);
        let line = if answers == 0 && total.responses == 0 {
            format!("[{:>4.0}s] warming up", started.elapsed().as_secs_f64())
        } else {
            format!(
                "[{:>4.0}s] {:>10.0} answers/s  p50 {:>8.1} us  p99 {:>8.1} us  failed {}  protocol errors {}",
                started.elapsed().as_secs_f64(),
                answers as f64 / elapsed.as_secs_f64(),
                interval.value_at_quantile(0.5) as f64 / 1000.0,
                interval.value_at_quantile(0.99) as f64 / 1000.0,
                failures,
                total.protocol_errors,
            )
        };
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
        printed = true;
        previous = total;
    }
    if printed {
        eprintln!();
    }
}
