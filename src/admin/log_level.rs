//! The log filter, changeable at run time through `PUT /log-level`.
//!
//! `routerd serve` installs its subscriber with [`init`], which keeps a
//! reload handle here; an embedder that installs its own subscriber has
//! none, and the endpoint says so (404) rather than pretend to change it.

use std::sync::{Arc, Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

use super::log_limit::{Shared, ThirdPartyLimit};

/// The longest filter accepted, in bytes: a filter is a few directives.
pub const FILTER_BYTES_MAX: usize = 1024;

struct Installed {
    handle: reload::Handle<EnvFilter, Registry>,
    /// The filter as last set (an `EnvFilter` does not give it back as it
    /// was written).
    current: Mutex<String>,
    /// The third-party lines' rate limit, which follows the filter.
    limit: Arc<ThirdPartyLimit>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Installs the process's subscriber: `filter` (EnvFilter syntax), the
/// formatted lines on stderr, with colours when it is a terminal, and
/// third-party lines rate-limited (see `log_limit`). A filter that does
/// not parse is replaced by `info`, and the answer says why, for the
/// caller to tell whoever set it.
pub fn init(filter: &str) -> Result<(), String> {
    let (parsed, filter, refused) = match parse(filter) {
        Ok(parsed) => (parsed, filter, None),
        Err(error) => (EnvFilter::new("info"), "info", Some(error.to_string())),
    };
    let (layer, handle) = reload::Layer::new(parsed);
    let limit = Arc::new(ThirdPartyLimit::default());
    limit.set_filter(filter);
    let installed = tracing_subscriber::registry()
        .with(layer)
        .with(Shared(limit.clone()))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .try_init();
    if installed.is_ok() {
        let _ = INSTALLED.set(Installed {
            handle,
            current: Mutex::new(filter.to_string()),
            limit,
        });
    }
    refused.map_or(Ok(()), Err)
}

/// `filter` in EnvFilter syntax, its field values matched as written:
/// compiled as regular expressions (the default), a hundred bytes of
/// `a(a|b)(a|b)...` build an automaton of 2^n states with no bound, and
/// the thread that parses it (the admin endpoint's) stops for as long.
fn parse(filter: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    EnvFilter::builder().with_regex(false).parse(filter)
}

/// Why a filter was not set.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum SetRefused {
    /// This process's subscriber was not installed by [`init`].
    NotManaged,
    /// The filter does not parse (or is longer than [`FILTER_BYTES_MAX`]).
    Invalid(String),
}

/// The filter in force; `None` when this process's subscriber is not ours.
pub(super) fn current() -> Option<String> {
    let installed = INSTALLED.get()?;
    let current = installed
        .current
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Some(current.clone())
}

/// Replaces the filter.
pub(super) fn set(filter: &str) -> Result<(), SetRefused> {
    let filter = filter.trim();
    if filter.is_empty() || filter.len() > FILTER_BYTES_MAX {
        return Err(SetRefused::Invalid(format!(
            "a filter is 1 to {FILTER_BYTES_MAX} bytes"
        )));
    }
    let parsed = parse(filter).map_err(|error| SetRefused::Invalid(error.to_string()))?;
    let installed = INSTALLED.get().ok_or(SetRefused::NotManaged)?;
    installed.limit.set_filter(filter);
    installed
        .handle
        .reload(parsed)
        .map_err(|error| SetRefused::Invalid(error.to_string()))?;
    *installed
        .current
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = filter.to_string();
    tracing::info!(filter, "log filter changed");
    Ok(())
}
