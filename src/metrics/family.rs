//! The exposition model and the one place a metric is declared.
//!
//! A metric family (name, help, type, an optional label) has series, each
//! reading one value out of a struct of metrics that every core (or the
//! node) owns. [`metric_set!`] declares such a struct and its families
//! together, so a metric is named, documented and typed once, beside its
//! field; [`write_families`] renders any struct's families, summed over
//! its instances, into the Prometheus text format (version 0.0.4).
//!
//! Rendering writes into the caller's buffer and allocates nothing else:
//! names, help and label values are `&'static str`, and values are summed
//! as they are written.

use std::fmt::Write as _;

use super::histogram::{Histogram, BUCKET_BOUNDS};

/// A family's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One series' current value in one instance.
pub enum Value<'a> {
    /// A counter: only grows.
    Count(u64),
    /// A gauge: a level that goes up and down.
    Level(i64),
    Distribution(&'a Histogram),
}

/// A type a family's series is stored in.
pub trait Metric {
    const KIND: Kind;
    fn value(&self) -> Value<'_>;
}

/// One series of a family: its label's value and how to read it.
pub struct Series<S: 'static> {
    /// The value of the family's label; `None` when the family has none.
    pub label_value: Option<&'static str>,
    pub read: for<'a> fn(&'a S) -> Value<'a>,
}

/// A metric family read from instances of `S`.
pub struct Family<S: 'static> {
    pub name: &'static str,
    /// One line; leading and trailing whitespace is trimmed.
    pub help: &'static str,
    pub kind: Kind,
    /// The label that tells the series apart.
    pub label: Option<&'static str>,
    pub series: &'static [Series<S>],
}

/// A struct of metrics and its families.
pub trait Families: Sized + 'static {
    const FAMILIES: &'static [Family<Self>];
}

/// Renders `S`'s families, each series summed over `instances` (one per
/// core, or a single one).
pub fn write_families<'s, S: Families>(
    out: &mut String,
    instances: impl Iterator<Item = &'s S> + Clone,
) {
    write_family_list(out, S::FAMILIES, instances);
}

/// [`write_families`] for a family list that is not a `Families` impl
/// (a node-level list, or families of a struct from another crate).
pub fn write_family_list<'s, S: 'static>(
    out: &mut String,
    families: &[Family<S>],
    instances: impl Iterator<Item = &'s S> + Clone,
) {
    for family in families {
        write_family_head(out, family);
        for series in family.series {
            let labels = Labels {
                name: family.label,
                value: series.label_value,
            };
            match family.kind {
                Kind::Counter | Kind::Gauge => {
                    write_value(out, family.name, labels, series, instances.clone())
                }
                Kind::Histogram => {
                    write_histogram(out, family.name, labels, series, instances.clone())
                }
            }
        }
    }
}

/// A label value as the text exposition format writes it: `\\`, `"` and
/// a line feed escaped. Values are mostly the node's own words, but a
/// script names its types and routes, and one name holding a quote or a
/// line feed would otherwise end the series early and make the whole
/// scrape unreadable (or add series of its own).
pub(crate) struct LabelValue<'a>(pub &'a str);

impl std::fmt::Display for LabelValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

/// The `# HELP` and `# TYPE` lines of `family`.
pub(crate) fn write_family_head<S: 'static>(out: &mut String, family: &Family<S>) {
    // Writing into a String cannot fail.
    let _ = writeln!(out, "# HELP {} {}", family.name, family.help.trim());
    let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind.name());
}

/// One histogram series whose label value is known only at run time (a
/// route of the node's table), summed over `histograms`.
pub(crate) fn write_histogram_of<'h>(
    out: &mut String,
    name: &str,
    label: Option<&'static str>,
    label_value: &str,
    histograms: impl Iterator<Item = &'h Histogram> + Clone,
) {
    let labels = Labels {
        name: label,
        value: None,
    };
    let write_labels = |out: &mut String, le: Option<&str>| {
        labels.write_with(out, Some(label_value), le);
    };
    write_distribution(out, name, write_labels, histograms);
}

/// A series' label pair, and `le` for a histogram bucket.
#[derive(Clone, Copy)]
struct Labels {
    name: Option<&'static str>,
    value: Option<&'static str>,
}

impl Labels {
    fn write(self, out: &mut String, le: Option<&str>) {
        self.write_with(out, self.value, le);
    }

    fn write_with(self, out: &mut String, value: Option<&str>, le: Option<&str>) {
        let pair = self.name.zip(value);
        if pair.is_none() && le.is_none() {
            return;
        }
        out.push('{');
        if let Some((name, value)) = pair {
            let _ = write!(out, "{name}=\"{}\"", LabelValue(value));
            if le.is_some() {
                out.push(',');
            }
        }
        if let Some(le) = le {
            let _ = write!(out, "le=\"{le}\"");
        }
        out.push('}');
    }
}

fn write_value<'s, S: 'static>(
    out: &mut String,
    name: &str,
    labels: Labels,
    series: &Series<S>,
    instances: impl Iterator<Item = &'s S>,
) {
    // Wide enough that neither counters nor gauges of many cores overflow.
    let mut sum = 0i128;
    for instance in instances {
        sum += match (series.read)(instance) {
            Value::Count(value) => i128::from(value),
            Value::Level(value) => i128::from(value),
            Value::Distribution(_) => {
                debug_assert!(false, "{name}: a histogram in a counter or gauge family");
                0
            }
        };
    }
    out.push_str(name);
    labels.write(out, None);
    let _ = writeln!(out, " {sum}");
}

/// The histogram of `series` in one instance; an empty one if the family
/// was declared with the wrong kind (a test keeps them consistent).
fn distribution<'a, S>(series: &Series<S>, instance: &'a S) -> Option<&'a Histogram> {
    match (series.read)(instance) {
        Value::Distribution(histogram) => Some(histogram),
        _ => None,
    }
}

fn write_histogram<'s, S: 'static>(
    out: &mut String,
    name: &str,
    labels: Labels,
    series: &Series<S>,
    instances: impl Iterator<Item = &'s S> + Clone,
) {
    let histograms = instances.filter_map(|instance| distribution(series, instance));
    write_distribution(out, name, |out, le| labels.write(out, le), histograms);
}

/// The buckets, sum and count of one histogram series summed over
/// `histograms`; `labels` writes the series' labels (with `le` for a
/// bucket).
fn write_distribution<'h>(
    out: &mut String,
    name: &str,
    labels: impl Fn(&mut String, Option<&str>),
    histograms: impl Iterator<Item = &'h Histogram> + Clone,
) {
    // Each bucket is read once, and the count is the last cumulative
    // bucket: the exposition stays consistent (`+Inf` = `_count`, buckets
    // never decrease) while cores keep recording.
    let mut cumulative = 0u64;
    let bucket_count = |bucket: usize| -> u64 {
        histograms
            .clone()
            .map(|histogram| histogram.bucket(bucket))
            .sum()
    };
    for (bucket, (_, le)) in BUCKET_BOUNDS.iter().enumerate() {
        cumulative += bucket_count(bucket);
        let _ = write!(out, "{name}_bucket");
        labels(out, Some(le));
        let _ = writeln!(out, " {cumulative}");
    }
    cumulative += bucket_count(BUCKET_BOUNDS.len());
    let _ = write!(out, "{name}_bucket");
    labels(out, Some("+Inf"));
    let _ = writeln!(out, " {cumulative}");
    let sum_ns: u64 = histograms.map(Histogram::sum_ns).sum();
    let _ = write!(out, "{name}_sum");
    labels(out, None);
    let _ = writeln!(out, " {}", sum_ns as f64 / 1e9);
    let _ = write!(out, "{name}_count");
    labels(out, None);
    let _ = writeln!(out, " {cumulative}");
}

/// The `Option` of a family's label name, from an optional identifier.
macro_rules! metric_label {
    () => {
        None
    };
    ($label:ident) => {
        Some(stringify!($label))
    };
}

/// The `Option` of a series' label value, from an optional literal.
macro_rules! metric_label_value {
    () => {
        None
    };
    ($value:literal) => {
        Some($value)
    };
}

/// Declares a struct of metrics and its [`Families`] in one place.
///
/// Each family is its doc comment (the `# HELP` text), its name, the type
/// of its series (`Counter`, `Gauge` or `Histogram`), the name of its label
/// in parentheses if it has one, and its series in braces: a field each,
/// with the label's value after `=` when the family has a label.
///
/// ```ignore
/// metric_set! {
///     pub struct Example {
///         /// Requests refused, by reason.
///         "routerd_example_refused_total" Counter (reason) {
///             refused_busy = "busy",
///             refused_closed = "closed",
///         }
///         /// Requests in flight.
///         "routerd_example_inflight" Gauge { inflight }
///     }
/// }
/// ```
macro_rules! metric_set {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $help:literal])+
                $family:literal $kind:ident $(($label:ident))? {
                    $($field:ident $(= $value:literal)?),+ $(,)?
                }
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        $vis struct $name {
            $($(pub $field: $crate::metrics::$kind,)+)*
        }

        impl $crate::metrics::Families for $name {
            const FAMILIES: &'static [$crate::metrics::Family<Self>] = &[$(
                $crate::metrics::Family {
                    name: $family,
                    help: concat!($($help),+),
                    kind: <$crate::metrics::$kind as $crate::metrics::Metric>::KIND,
                    label: $crate::metrics::metric_label!($($label)?),
                    series: &[$(
                        $crate::metrics::Series {
                            label_value: $crate::metrics::metric_label_value!($($value)?),
                            read: |set: &$name| $crate::metrics::Metric::value(&set.$field),
                        },
                    )+],
                },
            )*];
        }
    };
}

/// [`metric_set!`] for a sans-IO state machine's counters: declares `$plain`,
/// a struct of `u64` fields the machine increments with no atomics (so the
/// simulator can clone and compare it), and `$cells`, its twin of
/// [`Counter`](super::Counter)s with the families, which the machine's
/// driver fills with `$cells::mirror` after each batch of work.
macro_rules! counter_set {
    (
        $(#[$meta:meta])*
        $vis:vis struct $plain:ident mirrored by $cells:ident {
            $(
                $(#[doc = $help:literal])+
                $family:literal $(($label:ident))? {
                    $($field:ident $(= $value:literal)?),+ $(,)?
                }
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        $vis struct $plain {
            $($(pub $field: u64,)+)*
        }

        $crate::metrics::metric_set! {
            #[doc = concat!("The exported twin of [`", stringify!($plain), "`].")]
            $vis struct $cells {
                $(
                    $(#[doc = $help])+
                    $family Counter $(($label))? {
                        $($field $(= $value)?),+
                    }
                )*
            }
        }

        impl $cells {
            /// Copies every counter of `from`, kept on this core.
            pub fn mirror(&self, from: &$plain) {
                $($(self.$field.mirror(from.$field);)+)*
            }
        }
    };
}

pub(crate) use {counter_set, metric_label, metric_label_value, metric_set};

#[cfg(test)]
mod label_tests {
    use super::LabelValue;

    #[test]
    fn a_label_value_is_escaped_as_the_exposition_format_says() {
        let shown = LabelValue("a\"b\nc\\d").to_string();
        assert_eq!(shown, r#"a\"b\nc\\d"#);
        assert_eq!(LabelValue("room.say").to_string(), "room.say");
    }
}
