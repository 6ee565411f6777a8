//! Third-party log lines, rate-limited as routerd limits its own refusals:
//! a dependency that logs once per bad input (rustls warns once per
//! handshake whose SNI is an IP address) cannot let a client flood the
//! log. routerd's own lines are not limited here: the code that logs a
//! refusal limits it itself, with the count it left out.
//!
//! A line of a crate outside the workspace passes at most once per
//! [`THIRD_PARTY_LINE_INTERVAL`] per target and level; the others are
//! dropped. A target the log filter names (`info,rustls=debug`) is not
//! limited: whoever names it wants every line.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The workspace's crates, whose lines are routerd's own.
const OWN_CRATES: &[&str] = &["routerd", "shards", "wire", "loadgen", "bench", "guild"];
/// At most one line per third-party target and level in this time.
pub const THIRD_PARTY_LINE_INTERVAL: Duration = Duration::from_secs(5);
/// Targets remembered at once; past it the memory starts over (a flood of
/// distinct targets gets a line each, once).
const TARGETS_MAX: usize = 1024;

/// When each third-party target last had a line through.
#[derive(Default)]
struct LineBudget {
    last: HashMap<(String, Level), Instant>,
}

impl LineBudget {
    /// Whether a line of `target` at `level` may go out at `now`.
    fn admit(&mut self, target: &str, level: Level, now: Instant) -> bool {
        if let Some(last) = self.last.get_mut(&(target.to_string(), level)) {
            if now.saturating_duration_since(*last) < THIRD_PARTY_LINE_INTERVAL {
                return false;
            }
            *last = now;
            return true;
        }
        if self.last.len() >= TARGETS_MAX {
            self.last.clear();
        }
        self.last.insert((target.to_string(), level), now);
        true
    }
}

/// Whether `target` is one of the workspace's crates' (`routerd::gateway`).
fn is_own(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    OWN_CRATES.contains(&krate)
}

/// The targets a filter in `ROUTERD_LOG`'s syntax names (`rustls` of
/// `info,rustls=debug`; a bare level names none).
fn named_targets(filter: &str) -> Vec<String> {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    filter
        .split(',')
        .filter_map(|directive| directive.split(['=', '[']).next())
        .map(str::trim)
        .filter(|target| {
            !target.is_empty() && !LEVELS.contains(&target.to_ascii_lowercase().as_str())
        })
        .map(str::to_string)
        .collect()
}

/// The layer that drops third-party lines past their budget.
#[derive(Default)]
pub(super) struct ThirdPartyLimit {
    named: RwLock<Vec<String>>,
    budget: Mutex<LineBudget>,
}

impl ThirdPartyLimit {
    /// Follows the filter now in force: the targets it names are not
    /// limited.
    pub(super) fn set_filter(&self, filter: &str) {
        *self
            .named
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = named_targets(filter);
    }

    fn admit(&self, target: &str, level: Level) -> bool {
        if is_own(target) {
            return true;
        }
        let named = self
            .named
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if named.iter().any(|name| target.starts_with(name.as_str())) {
            return true;
        }
        drop(named);
        self.budget
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .admit(target, level, Instant::now())
    }
}

/// The layer of the process's subscriber: it shares its state with the
/// handle `log_level` keeps, to follow filter changes.
pub(super) struct Shared(pub(super) std::sync::Arc<ThirdPartyLimit>);

impl<S: Subscriber> Layer<S> for Shared {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        // A `log` record (rustls logs through `log`) comes as an event of
        // target `log`, its own target in a field.
        if metadata.target() == "log" {
            let mut target = LogTarget(None);
            event.record(&mut target);
            if let Some(target) = target.0 {
                return self.0.admit(&target, *metadata.level());
            }
        }
        self.0.admit(metadata.target(), *metadata.level())
    }
}

/// The `log.target` field of an event made from a `log` record.
struct LogTarget(Option<String>);

impl Visit for LogTarget {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "log.target" {
            self.0 = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_third_party_target_gets_one_line_per_interval_and_level() {
        let mut budget = LineBudget::default();
        let start = Instant::now();
        let target = "rustls::msgs::handshake";
        assert!(budget.admit(target, Level::WARN, start));
        for ms in [1, 100, 4_999] {
            let now = start + Duration::from_millis(ms);
            assert!(!budget.admit(target, Level::WARN, now), "{ms}");
        }
        // Another level or target has a budget of its own.
        assert!(budget.admit(target, Level::ERROR, start));
        assert!(budget.admit("hyper::proto", Level::WARN, start));
        assert!(budget.admit(target, Level::WARN, start + THIRD_PARTY_LINE_INTERVAL));
    }

    #[test]
    fn own_and_named_targets_are_not_limited() {
        let limit = ThirdPartyLimit::default();
        for _ in 0..3 {
            assert!(limit.admit("routerd::gateway::tls", Level::WARN));
            assert!(limit.admit("shards", Level::WARN));
        }
        assert!(limit.admit("rustls::server", Level::WARN));
        assert!(!limit.admit("rustls::server", Level::WARN));
        limit.set_filter("info, rustls=debug");
        assert!(limit.admit("rustls::server", Level::WARN));
        assert!(limit.admit("rustls::server", Level::WARN));
        limit.set_filter("warn");
        assert!(!limit.admit("rustls::server", Level::WARN));
        assert_eq!(
            named_targets("debug,routerd::cluster=trace,h2[conn]=info, WARN"),
            vec!["routerd::cluster", "h2"]
        );
    }
}
