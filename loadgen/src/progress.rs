//! The live figures, once a second over all threads: the answers, p50/p99,
//! failed requests and bytes of the last second. On a terminal, one line
//! on stderr rewritten in place; with `--progress`, a table on stdout, one
//! row a second, whatever stdout is (a pipe, a file, a CI log).

use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::runner::Snapshot;
use crate::stats::Progress;

/// Where the figures go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// One line on stderr, rewritten each second (a terminal).
    Line,
    /// A row a second on stdout, under a header (`--progress`).
    Table,
}

/// The table's header; [`row`] lines up under it.
pub const TABLE_HEADER: &str =
    "  second   requests/s     p50 us     p99 us   failed       in/s      out/s";

/// One second of the figures, from the totals now and a second ago.
struct Interval {
    second: f64,
    requests_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    failed: u64,
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
}

fn interval(total: &Progress, previous: &Progress, elapsed: Duration, second: f64) -> Interval {
    let mut latency = total.latency_ns.clone();
    // The cumulative histogram only grows, so this cannot underflow; a
    // failure would only blank one row.
    let _ = latency.subtract(&previous.latency_ns);
    let per_s = |now: u64, before: u64| now.saturating_sub(before) as f64 / elapsed.as_secs_f64();
    Interval {
        second,
        requests_per_s: per_s(total.responses, previous.responses),
        p50_us: latency.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: latency.value_at_quantile(0.99) as f64 / 1000.0,
        failed: total.failures.saturating_sub(previous.failures),
        bytes_in_per_s: per_s(total.bytes_in, previous.bytes_in),
        bytes_out_per_s: per_s(total.bytes_out, previous.bytes_out),
    }
}

fn row(i: &Interval) -> String {
    format!(
        "{:>8.0} {:>12.0} {:>10.1} {:>10.1} {:>8} {:>10} {:>10}",
        i.second,
        i.requests_per_s,
        i.p50_us,
        i.p99_us,
        i.failed,
        crate::report::bytes(i.bytes_in_per_s),
        crate::report::bytes(i.bytes_out_per_s),
    )
}

fn line(i: &Interval, total: &Progress) -> String {
    format!(
        "[{:>4.0}s] {:>10.0} answers/s  p50 {:>8.1} us  p99 {:>8.1} us  failed {}  protocol errors {}",
        i.second, i.requests_per_s, i.p50_us, i.p99_us, i.failed, total.protocol_errors,
    )
}

/// Prints until every thread has hung up its sender.
pub fn display(rx: Receiver<Snapshot>, threads: usize, display: Display) {
    match display {
        Display::Line => run(
            rx,
            threads,
            Duration::from_secs(1),
            &mut std::io::stderr(),
            display,
        ),
        Display::Table => run(
            rx,
            threads,
            Duration::from_secs(1),
            &mut std::io::stdout(),
            display,
        ),
    }
}

/// The display loop, writing to `out` every `every`.
fn run(
    rx: Receiver<Snapshot>,
    threads: usize,
    every: Duration,
    out: &mut dyn Write,
    display: Display,
) {
    let mut latest: Vec<Progress> = vec![Progress::default(); threads];
    let mut previous = Progress::default();
    let mut last_print = Instant::now();
    let started = Instant::now();
    let mut printed = false;
    loop {
        match rx.recv_timeout(every.min(Duration::from_millis(200))) {
            Ok(snapshot) => {
                if let Some(slot) = latest.get_mut(snapshot.thread_index) {
                    *slot = snapshot.progress;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let elapsed = last_print.elapsed();
        if elapsed < every {
            continue;
        }
        last_print = Instant::now();
        let mut total = Progress::default();
        for progress in &latest {
            total.merge(progress);
        }
        let second = started.elapsed().as_secs_f64();
        let figures = interval(&total, &previous, elapsed, second);
        // Write failures (a closed pipe) cost the display, never the run.
        match display {
            // The warm-up measures nothing: no row until answers count.
            Display::Table if total.responses == 0 => {}
            Display::Table => {
                if !printed {
                    let _ = writeln!(out, "{TABLE_HEADER}");
                }
                let _ = writeln!(out, "{}", row(&figures));
                let _ = out.flush();
                printed = true;
            }
            Display::Line => {
                let text = if total.responses == 0 {
                    format!("[{second:>4.0}s] warming up")
                } else {
                    line(&figures, &total)
                };
                let _ = write!(out, "\r\x1b[2K{text}");
                let _ = out.flush();
                printed = true;
            }
        }
        previous = total;
    }
    if printed && display == Display::Line {
        let _ = writeln!(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots of one thread that answered `per_tick` requests of 100 us
    /// and moved 10 bytes each way per request, `ticks` times.
    fn feed(ticks: u64, per_tick: u64) -> Receiver<Snapshot> {
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        std::thread::spawn(move || {
            let mut progress = Progress::default();
            for _ in 0..ticks {
                for _ in 0..per_tick {
                    progress.responses += 1;
                    progress.bytes_in += 10;
                    progress.bytes_out += 10;
                    progress.latency_ns.record(100_000).unwrap();
                }
                let snapshot = Snapshot {
                    thread_index: 0,
                    progress: progress.clone(),
                };
                tx.send(snapshot).unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        rx
    }

    #[test]
    fn the_table_has_a_header_and_a_row_per_interval_whatever_the_output() {
        let mut out = Vec::new();
        let rx = feed(10, 50);
        run(rx, 1, Duration::from_millis(60), &mut out, Display::Table);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], TABLE_HEADER, "{text}");
        assert!(lines.len() >= 3, "{text}");
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cells.len(), 7, "{}", lines[1]);
        assert_eq!(cells[2], "100.0", "p50 us: {}", lines[1]);
        assert!(cells[5].ends_with('B'), "in/s: {}", lines[1]);
    }

    #[test]
    fn the_table_prints_nothing_while_nothing_is_answered() {
        let mut out = Vec::new();
        let rx = feed(5, 0);
        run(rx, 1, Duration::from_millis(40), &mut out, Display::Table);
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }
}
