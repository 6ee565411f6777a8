//! `[scripts]`: the Luau object types a node loads at start (src/scripts).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[scripts]`: where the node's scripted object types are, and the bounds
/// every call of their handlers runs under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptsConfig {
    /// A directory whose every `*.luau` file is one object type; none when
    /// unset (the node serves no scripted type).
    pub dir: Option<PathBuf>,
    /// Wall-clock time one handler call may run, in microseconds: past it
    /// the call is stopped, its changes dropped, and the request answered
    /// INTERNAL.
    pub call_budget_us: u64,
    /// Memory the scripts of one core may hold, in bytes: an allocation
    /// past it fails the call that made it.
    pub memory_max_bytes: u64,
}

impl Default for ScriptsConfig {
    fn default() -> Self {
        Self {
            dir: None,
            call_budget_us: 10_000,
            memory_max_bytes: 64 << 20,
        }
    }
}

impl ScriptsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.call_budget_us == 0 {
            return Err(ConfigError::Invalid(
                "scripts.call_budget_us must be positive".to_string(),
            ));
        }
        if self.memory_max_bytes < 1 << 20 {
            return Err(ConfigError::Invalid(
                "scripts.memory_max_bytes must be at least 1048576 (1 MiB)".to_string(),
            ));
        }
        Ok(())
    }
}
