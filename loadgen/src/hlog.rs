//! HdrHistogram's interval log (`.hlog`, written beside the `.hgrm`): one
//! histogram per second of the measured phase, by intended send time, in
//! the compressed V2 encoding HdrHistogram's own log processor and plotter
//! read (`HistogramLogProcessor`, HdrHistogramVisualizer). Values are
//! nanoseconds; the per-interval max column is in milliseconds (the
//! divisor 10^6, as the Java writer prints nanosecond logs).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;

use crate::stats::Second;

/// Nanoseconds per millisecond: the max column's unit.
const MAX_VALUE_DIVISOR: f64 = 1e6;

/// The log of `series`, whose second 0 began at `start` (wall clock).
/// Seconds keep 2 significant digits from 1 µs (`stats::Second`), so the
/// log does too; the `.hgrm` holds the whole run at 3 digits.
pub fn hlog(series: &[Second], start: SystemTime) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut writer = IntervalLogWriterBuilder::new()
        .add_comment("loadgen: latency of the answers to requests due in each second (ns)")
        .with_start_time(start)
        .with_base_time(start)
        .with_max_value_divisor(MAX_VALUE_DIVISOR)
        .begin_log_with(&mut out, &mut serializer)
        .map_err(|e| format!("hlog header: {e}"))?;
    for (second, interval) in series.iter().enumerate() {
        writer
            .write_histogram(
                &interval.latency_ns,
                Duration::from_secs(second as u64),
                Duration::from_secs(1),
                None,
            )
            .map_err(|e| format!("hlog second {second}: {e:?}"))?;
    }
    Ok(out)
}

/// Where the log goes beside an `.hgrm`: `run.hgrm` gives `run.hlog`, a
/// path without an extension gets `.hlog` appended.
pub fn hlog_path(hgrm: &Path) -> PathBuf {
    if hgrm.extension().is_some() {
        hgrm.with_extension("hlog")
    } else {
        let mut name = hgrm.as_os_str().to_os_string();
        name.push(".hlog");
        PathBuf::from(name)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::stats::Stats;
    use crate::workload::Op;
    use base64::Engine as _;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::Histogram;

    /// Every interval of an `.hlog`: (start s, duration s, histogram).
    pub fn read_hlog(bytes: &[u8]) -> Vec<(f64, f64, Histogram<u64>)> {
        let mut deserializer = Deserializer::new();
        IntervalLogIterator::new(bytes)
            .map(|entry| entry.expect("a well-formed log"))
            .filter_map(|entry| match entry {
                LogEntry::Interval(interval) => Some(interval),
                _ => None,
            })
            .map(|interval| {
                let encoded = base64::engine::general_purpose::STANDARD
                    .decode(interval.encoded_histogram())
                    .expect("base64");
                let histogram: Histogram<u64> = deserializer
                    .deserialize(&mut encoded.as_slice())
                    .expect("a V2 histogram");
                (
                    interval.start_timestamp().as_secs_f64(),
                    interval.duration().as_secs_f64(),
                    histogram,
                )
            })
            .collect()
    }

    /// A log written from a series reads back, second by second, with the
    /// counts and the tail each second had.
    #[test]
    fn an_hlog_reads_back_with_every_answer() {
        const S: u64 = 1_000_000_000;
        let mut stats = Stats::default();
        stats.start_series(0);
        for second in 0..3u64 {
            for i in 0..(100 * (second + 1)) {
                let intended = second * S + i;
                stats.record_sent(Op::Incr, intended);
                stats.record_response(Op::Incr, intended, intended + 50_000 * (second + 1));
            }
        }
        let bytes = hlog(
            stats.series(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
        .expect("written");
        let text = String::from_utf8(bytes.clone()).expect("a text log");
        assert!(text.contains("#[BaseTime: 1700000000.000"), "{text}");
        let intervals = read_hlog(&bytes);
        assert_eq!(intervals.len(), 3);
        let total: u64 = intervals.iter().map(|(_, _, h)| h.len()).sum();
        assert_eq!(total, stats.responses());
        for (second, (start, duration, histogram)) in intervals.iter().enumerate() {
            assert_eq!(*start, second as f64);
            assert_eq!(*duration, 1.0);
            assert_eq!(histogram.len(), 100 * (second as u64 + 1));
            let max = histogram.max();
            let want = 50_000 * (second as u64 + 1);
            assert!(max.abs_diff(want) <= want / 50, "{max} vs {want}");
        }
        assert_eq!(
            hlog_path(Path::new("out/run.hgrm")),
            Path::new("out/run.hlog")
        );
        assert_eq!(hlog_path(Path::new("run")), Path::new("run.hlog"));
    }
}
