//! A strict parser of the Prometheus text exposition format (0.0.4), for
//! tests: stricter than Prometheus itself where routerd promises more.
//!
//! It fails (with the line) unless: every line is `# HELP`, `# TYPE` or a
//! sample; every family has exactly one HELP and one TYPE, both before its
//! samples; a family's samples are contiguous; every sample belongs to a
//! declared family (`_bucket`, `_sum`, `_count` for a histogram); names,
//! label names and values are well formed; no label repeats; every value
//! is a number and no sample repeats. For each histogram series: `le`
//! values increase and end with `+Inf`, bucket counts never decrease, and
//! `+Inf` equals `_count`, with `_sum` present.

use std::collections::{BTreeMap, BTreeSet};

/// One sample: its full name (with `_bucket` etc.), labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Family {
    pub help: String,
    pub kind: String,
    pub samples: Vec<Sample>,
}

/// A parsed scrape, by family name.
#[derive(Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    /// The value of the sample `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.families
            .values()
            .flat_map(|family| &family.samples)
            .find(|sample| sample.name == name && sample.labels == want)
            .map(|sample| sample.value)
    }
}

fn is_name(text: &str, colons: bool) -> bool {
    let mut chars = text.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':');
    chars.next().is_some_and(first_ok) && chars.all(|c| first_ok(c) || c.is_ascii_digit())
}

/// Parses `name{a="b",c="d"} value` (no timestamp: routerd writes none).
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| format!("no value: {line}"))?;
    let name = &line[..name_end];
    if !is_name(name, true) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let end;
        loop {
            // label name
            let start = chars.peek().map(|&(i, _)| i).ok_or("unterminated labels")?;
            if inner[start..].starts_with('}') {
                end = start + 1;
                break;
            }
            let eq = inner[start..]
                .find('=')
                .ok_or_else(|| format!("label without '=': {line}"))?
                + start;
            let label = &inner[start..eq];
            if !is_name(label, false) {
                return Err(format!("bad label name {label:?} in {line}"));
            }
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label value not quoted: {line}"));
            }
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('"') => break,
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => return Err(format!("bad escape {other:?} in {line}")),
                    },
                    Some('\n') | None => return Err(format!("unterminated value: {line}")),
                    Some(c) => value.push(c),
                }
            }
            if labels.insert(label.to_string(), value).is_some() {
                return Err(format!("label {label} repeats in {line}"));
            }
            match chars.next() {
                Some((_, ',')) => continue,
                Some((i, '}')) => {
                    end = i + 1;
                    break;
                }
                other => return Err(format!("expected ',' or '}}', got {other:?}: {line}")),
            }
        }
        rest = &inner[end..];
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or_else(|| format!("no space before the value: {line}"))?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        number => number
            .parse()
            .map_err(|_| format!("bad value {number:?} (or a timestamp): {line}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The family a sample belongs to, given the declared types.
fn family_of(sample: &str, kinds: &BTreeMap<String, String>) -> Option<String> {
    if kinds.contains_key(sample) && kinds[sample] != "histogram" {
        return Some(sample.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix) {
            if kinds.get(base).map(String::as_str) == Some("histogram") {
                return Some(base.to_string());
            }
        }
    }
    None
}

pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut exposition = Exposition::default();
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut seen_samples: BTreeSet<String> = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad HELP: {line}"))?;
            let family = exposition.families.entry(name.to_string()).or_default();
            if !family.help.is_empty() || !family.samples.is_empty() || finished.contains(name) {
                return Err(format!("second HELP, or HELP after samples: {line}"));
            }
            if help.trim().is_empty() {
                return Err(format!("empty HELP: {line}"));
            }
            family.help = help.to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad TYPE: {line}"))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("unknown type: {line}"));
            }
            let family = exposition.families.entry(name.to_string()).or_default();
            if !family.kind.is_empty() || !family.samples.is_empty() || finished.contains(name) {
                return Err(format!("second TYPE, or TYPE after samples: {line}"));
            }
            if family.help.is_empty() {
                return Err(format!("TYPE before HELP: {line}"));
            }
            family.kind = kind.to_string();
            kinds.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line {line:?}"));
        }
        let sample = parse_sample(line)?;
        let name = family_of(&sample.name, &kinds)
            .ok_or_else(|| format!("sample of no declared family: {line}"))?;
        if current.as_deref() != Some(name.as_str()) {
            if let Some(previous) = current.replace(name.clone()) {
                finished.insert(previous);
            }
            if finished.contains(&name) {
                return Err(format!("family {name} is split: {line}"));
            }
        }
        let key = format!("{}{:?}", sample.name, sample.labels);
        if !seen_samples.insert(key) {
            return Err(format!("sample repeats: {line}"));
        }
        exposition
            .families
            .get_mut(&name)
            .expect("declared")
            .samples
            .push(sample);
    }
    for (name, family) in &exposition.families {
        if family.help.is_empty() || family.kind.is_empty() {
            return Err(format!("{name} lacks HELP or TYPE"));
        }
        if family.kind == "histogram" {
            check_histogram(name, family)?;
        }
    }
    Ok(exposition)
}

fn check_histogram(name: &str, family: &Family) -> Result<(), String> {
    // Series by their labels other than `le`.
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for sample in &family.samples {
        let mut labels = sample.labels.clone();
        let le = labels.remove("le");
        let key = format!("{labels:?}");
        match sample.name.strip_prefix(name) {
            Some("_bucket") => {
                let le = le.ok_or_else(|| format!("{name}: a bucket without le"))?;
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().map_err(|_| format!("{name}: bad le {le:?}"))?
                };
                buckets.entry(key).or_default().push((bound, sample.value));
            }
            Some("_sum") => drop(sums.insert(key, sample.value)),
            Some("_count") => drop(counts.insert(key, sample.value)),
            _ => return Err(format!("{name}: unexpected sample {}", sample.name)),
        }
    }
    if buckets.is_empty() {
        return Err(format!("{name}: a histogram with no buckets"));
    }
    for (series, buckets) in &buckets {
        for pair in buckets.windows(2) {
            if pair[0].0 >= pair[1].0 {
                return Err(format!("{name}{series}: le not increasing"));
            }
            if pair[0].1 > pair[1].1 {
                return Err(format!("{name}{series}: buckets not cumulative"));
            }
        }
        let &(last_bound, last_count) = buckets.last().expect("non-empty");
        if last_bound != f64::INFINITY {
            return Err(format!("{name}{series}: no +Inf bucket"));
        }
        if counts.get(series) != Some(&last_count) {
            return Err(format!("{name}{series}: +Inf != _count"));
        }
        if !sums.contains_key(series) {
            return Err(format!("{name}{series}: no _sum"));
        }
    }
    Ok(())
}
