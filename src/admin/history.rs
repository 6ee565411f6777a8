//! `GET /history`: the node's own figures over the last hour, one sample
//! every [`SAMPLE_EVERY`], so the console's charts start full after a
//! reload (or on a page opened later) instead of from nothing.
//!
//! A sample is computed from two consecutive renderings of the node's own
//! `/metrics`, read as a scraper reads them: the history says what a
//! Prometheus would have said of the same interval, and no counter is read
//! a second way. Sampling runs on the admin thread (cold: one rendering
//! every five seconds); the ring is a bounded `VecDeque` behind a mutex
//! that a request holds only to copy it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::routes::{json_response, Body};

/// How often the node samples itself.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: an hour at [`SAMPLE_EVERY`].
pub const SAMPLES_KEPT: usize = 720;

/// The answer codes counted as the server's failures (as the console's
/// error ratio counts them).
const SERVER_ERRORS: [&str; 4] = ["UNAVAILABLE", "TIMEOUT", "INTERNAL", "OVERLOADED"];
const REQUESTS: &str = "routerd_gateway_requests_total";
const LATENCY_BUCKET: &str = "routerd_gateway_request_duration_seconds_bucket";
const STORE_BUCKET: &str = "routerd_store_operation_duration_seconds_bucket";
const SESSIONS: &str = "routerd_gateway_sessions_active";
const OBJECTS: &str = "routerd_router_objects";
const HEARTBEAT_AGE: &str = "routerd_cluster_peer_heartbeat_age_seconds";

/// What one rendering of `/metrics` says, kept until the next.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Reading {
    at_ms: u64,
    requests: f64,
    errors: f64,
    /// Cumulative counts by upper bound (seconds), summed over routes.
    latency: Vec<(f64, f64)>,
    store_latency: Vec<(f64, f64)>,
    sessions: f64,
    objects: f64,
    /// The oldest heartbeat among the peers, in seconds.
    heartbeat_age: Option<f64>,
}

/// The value of `label` in a sample's label set (`{route="a",code="OK"}`).
fn label<'a>(labels: &'a str, label: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{label}=\""))? + label.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// Adds `count` to the bucket of upper bound `le` (kept sorted).
fn add_bucket(buckets: &mut Vec<(f64, f64)>, le: Option<&str>, count: f64) {
    let le = match le {
        Some("+Inf") => f64::INFINITY,
        Some(le) => match le.parse() {
            Ok(le) => le,
            Err(_) => return,
        },
        None => return,
    };
    match buckets.iter_mut().find(|(bound, _)| *bound == le) {
        Some(bucket) => bucket.1 += count,
        None => {
            buckets.push((le, count));
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
}

impl Reading {
    /// Reads the series the history needs from an exposition.
    pub(super) fn parse(text: &str, at_ms: u64) -> Reading {
        let mut reading = Reading {
            at_ms,
            ..Reading::default()
        };
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            match name {
                REQUESTS => {
                    reading.requests += value;
                    if label(labels, "code").is_some_and(|code| SERVER_ERRORS.contains(&code)) {
                        reading.errors += value;
                    }
                }
                LATENCY_BUCKET => add_bucket(&mut reading.latency, label(labels, "le"), value),
                STORE_BUCKET => add_bucket(&mut reading.store_latency, label(labels, "le"), value),
                SESSIONS => reading.sessions += value,
                OBJECTS => reading.objects += value,
                HEARTBEAT_AGE => {
                    reading.heartbeat_age = Some(reading.heartbeat_age.unwrap_or(0.0).max(value))
                }
                _ => {}
            }
        }
        reading
    }
}

/// Prometheus's `histogram_quantile` over cumulative `(le, count)` pairs;
/// `None` when they count nothing.
fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower_bound, mut lower_count) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower_bound);
            }
            let in_bucket = count - lower_count;
            return Some(if in_bucket > 0.0 {
                lower_bound + (le - lower_bound) * ((rank - lower_count) / in_bucket)
            } else {
                le
            });
        }
        (lower_bound, lower_count) = (le, count);
    }
    Some(lower_bound)
}

/// The buckets of `now` minus those of `before` (the same bounds, as one
/// binary renders them).
fn window(now: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    now.iter()
        .map(|&(le, count)| {
            let earlier = before.iter().find(|(bound, _)| *bound == le);
            (le, (count - earlier.map_or(0.0, |(_, c)| *c)).max(0.0))
        })
        .collect()
}

/// One point of the history: the interval that ends at `at_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    pub requests_per_s: f64,
    /// `None` when no request was answered in the interval.
    pub p99_ms: Option<f64>,
    pub errors_per_s: f64,
    pub sessions: f64,
    pub objects: f64,
    pub store_p99_ms: Option<f64>,
    /// The oldest peer heartbeat this node saw; `None` without peers.
    pub heartbeat_age_ms: Option<f64>,
}

impl Sample {
    /// The interval between two readings; `None` when it has no length.
    pub(super) fn between(before: &Reading, now: &Reading) -> Option<Sample> {
        let seconds = now.at_ms.checked_sub(before.at_ms)? as f64 / 1e3;
        if seconds <= 0.0 {
            return None;
        }
        // Counters only grow; a smaller one is another process's (a
        // restart), whose interval says nothing.
        let asked = (now.requests - before.requests).max(0.0);
        let failed = (now.errors - before.errors).max(0.0);
        Some(Sample {
            at_ms: now.at_ms,
            requests_per_s: asked / seconds,
            p99_ms: quantile(0.99, &window(&now.latency, &before.latency)).map(|s| s * 1e3),
            errors_per_s: failed / seconds,
            sessions: now.sessions,
            objects: now.objects,
            store_p99_ms: quantile(0.99, &window(&now.store_latency, &before.store_latency))
                .map(|s| s * 1e3),
            heartbeat_age_ms: now.heartbeat_age.map(|age| age * 1e3),
        })
    }

    fn to_json(self) -> Value {
        json!({
            "at_ms": self.at_ms,
            "requests_per_s": self.requests_per_s,
            "p99_ms": self.p99_ms,
            "errors_per_s": self.errors_per_s,
            "sessions": self.sessions,
            "objects": self.objects,
            "store_p99_ms": self.store_p99_ms,
            "heartbeat_age_ms": self.heartbeat_age_ms,
        })
    }
}

/// `GET /history?since=MS`: the samples after `since` (ms since the
/// epoch; all of them without it).
pub(super) fn get(state: &super::AdminState, query: Option<&str>) -> Response<Body> {
    let mut since_ms = 0;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("since", value)) => match value.parse() {
                Ok(value) => since_ms = value,
                Err(_) => return bad_request("since must be a time in ms since the epoch"),
            },
            _ => return bad_request("the query takes since=MS only"),
        }
    }
    let mut answer = state.history.to_json(since_ms);
    answer["node_id"] = json!(state.cluster.as_ref().map(|view| view.me().0));
    json_response(answer)
}

fn bad_request(reason: &str) -> Response<Body> {
    super::forward::refused(StatusCode::BAD_REQUEST, "bad_request", reason)
}

/// Samples the node every [`SAMPLE_EVERY`] into `state.history`, until
/// the admin runtime ends.
pub(super) async fn sample(state: Arc<super::AdminState>) {
    let render = || {
        let mut text = state.metrics.render();
        if let Some(view) = &state.cluster {
            super::peers::write_peer_metrics(&mut text, view);
        }
        Reading::parse(&text, wall_clock_ms())
    };
    let mut before = render();
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: the first sample comes one interval on.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let now = render();
        if let Some(sample) = Sample::between(&before, &now) {
            state.history.push(sample);
        }
        before = now;
    }
}

/// Milliseconds since the Unix epoch: a sample's time is the browser's
/// kind (`Date.now()`), not the node's own clock, which starts at its boot.
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// The ring of samples, shared by the sampler and the requests.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<VecDeque<Sample>>>);

impl History {
    fn ring(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a sample, dropping the oldest past [`SAMPLES_KEPT`].
    pub fn push(&self, sample: Sample) {
        let mut ring = self.ring();
        if ring.len() == SAMPLES_KEPT {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// The samples after `since_ms`, oldest first, as `GET /history`
    /// answers them.
    pub fn to_json(&self, since_ms: u64) -> Value {
        let samples: Vec<Value> = self
            .ring()
            .iter()
            .filter(|sample| sample.at_ms > since_ms)
            .map(|sample| sample.to_json())
            .collect();
        json!({
            "every_ms": SAMPLE_EVERY.as_millis() as u64,
            "kept": SAMPLES_KEPT,
            "samples": samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
# TYPE routerd_gateway_requests_total counter
routerd_gateway_requests_total{route=\"player.incr\",code=\"OK\"} 100
routerd_gateway_requests_total{route=\"player.incr\",code=\"TIMEOUT\"} 1
routerd_gateway_requests_total{route=\"room.say\",code=\"BAD_REQUEST\"} 5
routerd_gateway_request_duration_seconds_bucket{route=\"player.incr\",le=\"0.001\"} 90
routerd_gateway_request_duration_seconds_bucket{route=\"player.incr\",le=\"0.01\"} 101
routerd_gateway_request_duration_seconds_bucket{route=\"player.incr\",le=\"+Inf\"} 101
routerd_gateway_sessions_active{core=\"0\"} 3
routerd_router_objects{core=\"0\"} 7
";

    const NOW: &str = "\
routerd_gateway_requests_total{route=\"player.incr\",code=\"OK\"} 190
routerd_gateway_requests_total{route=\"player.incr\",code=\"TIMEOUT\"} 11
routerd_gateway_requests_total{route=\"room.say\",code=\"BAD_REQUEST\"} 5
routerd_gateway_request_duration_seconds_bucket{route=\"player.incr\",le=\"0.001\"} 90
routerd_gateway_request_duration_seconds_bucket{route=\"player.incr\",le=\"0.01\"} 191
routerd_gateway_request_duration_seconds_bucket{route=\"player.incr\",le=\"+Inf\"} 201
routerd_gateway_sessions_active{core=\"0\"} 3
routerd_gateway_sessions_active{core=\"1\"} 2
routerd_router_objects{core=\"0\"} 9
routerd_cluster_peer_heartbeat_age_seconds{node=\"2\"} 0.25
routerd_cluster_peer_heartbeat_age_seconds{node=\"3\"} 1.5
";

    #[test]
    fn a_sample_is_the_interval_between_two_scrapes() {
        let before = Reading::parse(BEFORE, 10_000);
        let now = Reading::parse(NOW, 15_000);
        let sample = Sample::between(&before, &now).unwrap();
        // 100 more answers in 5 s, 10 of them TIMEOUT; refusals are not
        // the server's errors.
        assert_eq!(sample.requests_per_s, 20.0);
        assert_eq!(sample.errors_per_s, 2.0);
        // Of the interval's 100, none under 1 ms, 90 under 10 ms, 10
        // slower: the 99th is past the last finite bound.
        assert_eq!(sample.p99_ms, Some(10.0));
        assert_eq!(sample.sessions, 5.0);
        assert_eq!(sample.objects, 9.0);
        assert_eq!(sample.store_p99_ms, None);
        assert_eq!(sample.heartbeat_age_ms, Some(1500.0));
        // No length, no sample; no request, no p99.
        assert!(Sample::between(&now, &now).is_none());
        let quiet = Reading::parse(NOW, 20_000);
        assert_eq!(Sample::between(&now, &quiet).unwrap().p99_ms, None);
    }

    #[test]
    fn the_ring_keeps_the_last_hour() {
        let history = History::default();
        let quiet = Sample::between(&Reading::parse("", 0), &Reading::parse("", 1)).unwrap();
        for at_ms in 1..=(SAMPLES_KEPT as u64 + 10) {
            history.push(Sample { at_ms, ..quiet });
        }
        let all = history.to_json(0);
        let samples = all["samples"].as_array().unwrap();
        assert_eq!(samples.len(), SAMPLES_KEPT);
        assert_eq!(samples[0]["at_ms"], 11);
        let recent = history.to_json(SAMPLES_KEPT as u64 + 8);
        assert_eq!(recent["samples"].as_array().unwrap().len(), 2);
    }
}
