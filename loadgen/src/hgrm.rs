//! HdrHistogram's percentile distribution text (`.hgrm`), the file
//! HdrHistogram's plotter and wrk2 read.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;

/// HdrHistogram's percentile distribution text, values in milliseconds
/// (what HdrHistogram's plotter and wrk2 print). `TotalCount` is the count
/// of samples at or below the row's value, as in HdrHistogram's
/// `outputPercentileDistribution`: cumulative, ending at the total.
pub fn hgrm(histogram: &Histogram<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut total_count = 0u64;
    for v in histogram.iter_quantiles(5) {
        total_count += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let inverse = if q < 1.0 {
            1.0 / (1.0 - q)
        } else {
            f64::INFINITY
        };
        let _ = writeln!(
            out,
            "{:>12.3} {:>14.12} {:>10} {:>14.2}",
            ms(v.value_iterated_to()),
            q,
            total_count,
            inverse
        );
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
        histogram.mean() / 1e6,
        histogram.stdev() / 1e6
    );
    let _ = writeln!(
        out,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        ms(histogram.max()),
        histogram.len()
    );
    out
}

/// Where one op's distribution goes beside `path`: `run.hgrm` gives
/// `run.get.hgrm`; a path without an extension gets `.get.hgrm` appended.
pub fn op_path(path: &Path, op_name: &str) -> PathBuf {
    match (path.file_stem(), path.extension()) {
        (Some(stem), Some(extension)) => {
            let mut name = stem.to_os_string();
            name.push(format!(".{op_name}."));
            name.push(extension);
            path.with_file_name(name)
        }
        _ => {
            let mut name = path.as_os_str().to_os_string();
            name.push(format!(".{op_name}.hgrm"));
            PathBuf::from(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::LATENCY_MAX_NS;

    #[test]
    fn per_op_files_sit_beside_the_total() {
        assert_eq!(
            op_path(Path::new("out/run.hgrm"), "get"),
            Path::new("out/run.get.hgrm")
        );
        assert_eq!(
            op_path(Path::new("run"), "incr"),
            Path::new("run.incr.hgrm")
        );
    }

    /// Rows of an hgrm text: (value in ns, percentile, total count).
    fn parse_hgrm(text: &str) -> Vec<(u64, f64, u64)> {
        text.lines()
            .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
            .skip(1) // the column names
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(fields.len(), 4, "row {line:?}");
                let value_ms: f64 = fields[0].parse().expect("value");
                let percentile: f64 = fields[1].parse().expect("percentile");
                let total: u64 = fields[2].parse().expect("total count");
                ((value_ms * 1e6).round() as u64, percentile, total)
            })
            .collect()
    }

    /// Reads an hgrm file back into a histogram (each row's new samples at
    /// its value) and compares it with the one it was written from: with a
    /// per-row TotalCount, the rebuilt histogram has the wrong count and
    /// the wrong shape.
    #[test]
    fn hgrm_total_count_is_cumulative_and_reads_back() {
        let mut original = Histogram::<u64>::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("bounds");
        // 1..=1000 us once each, and a tail of ten 50 ms samples.
        for us in 1..=1000u64 {
            original.record(us * 1000).expect("in range");
        }
        original.record_n(50_000_000, 10).expect("in range");
        let rows = parse_hgrm(&hgrm(&original));
        assert!(rows.len() > 20, "{} rows", rows.len());
        for pair in rows.windows(2) {
            assert!(pair[0].2 <= pair[1].2, "TotalCount went down: {pair:?}");
        }
        assert_eq!(rows.last().map(|r| r.2), Some(original.len()));

        let mut rebuilt = Histogram::<u64>::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("bounds");
        let mut previous = 0u64;
        for &(value_ns, _, total) in &rows {
            let new_samples = total.checked_sub(previous).expect("cumulative column");
            rebuilt
                .record_n(value_ns.max(1), new_samples)
                .expect("in range");
            previous = total;
        }
        assert_eq!(rebuilt.len(), original.len());
        assert!(rebuilt.max().abs_diff(original.max()) <= 50_000, "max");
        // Rows are spaced at quantile ticks and the rebuilt histogram holds
        // each sample at its row's value, so compare at ticks.
        for q in [0.5, 0.75, 0.9] {
            let want = original.value_at_quantile(q) as f64;
            let got = rebuilt.value_at_quantile(q) as f64;
            assert!((got - want).abs() <= want * 0.03, "q {q}: {got} vs {want}");
        }
        for &(value_ns, percentile, total) in &rows {
            // TotalCount is the number of samples at or below the value
            // (printed to 1 us, so within a microsecond of it).
            let low = original.count_between(0, value_ns.saturating_sub(1_000));
            let high = original.count_between(0, value_ns + 1_000);
            assert!(
                (low..=high).contains(&total),
                "{total} not in {low}..={high}"
            );
            let fraction = total as f64 / original.len() as f64;
            assert!(
                fraction + 1e-9 >= percentile,
                "{total} below percentile {percentile}"
            );
        }
    }
}
