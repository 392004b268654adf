//! The service's typed errors.

use std::path::{Path, PathBuf};

/// Why `schedule` refused a timer. Nothing is ever dropped silently: a refused task is dropped
/// unrun and the caller is told why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The service was shut down (explicitly, or by dropping its last handle).
    #[error("the timer service is shut down")]
    Shutdown,
    /// `Config::max_pending` timers are pending already.
    #[error("{limit} timers are pending, the configured max_pending")]
    TooManyPending {
        /// The configured `max_pending`.
        limit: usize,
    },
    /// The shard the timer went to has no room for it: either its pending ring stayed full for
    /// `Config::saturation_timeout` (at once, for `try_schedule`), so the tick thread cannot keep
    /// up with the producers; or its timer table holds the most live timers a shard can,
    /// 2^28 (268 million), until some of them end.
    #[error("a shard is saturated: its pending ring stayed full for the saturation timeout (config field `saturation_timeout`), or it holds its maximum of 2^28 live timers")]
    Saturated,
}

/// A [`Config`](crate::Config) that cannot be used. The message names the field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field's value is out of range.
    #[error("config field `{field}`: {reason}")]
    Invalid {
        /// The field's name, as in TOML.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The TOML text did not parse, or a value had the wrong type.
    #[error("config{}: {message}", field.as_ref().map(|f| format!(" field `{f}`")).unwrap_or_default())]
    Toml {
        /// The parser's message.
        message: String,
        /// The field it is about, where one can be told.
        field: Option<String>,
    },
    /// A `WHEEL_*` variable did not parse.
    #[error(
        "environment variable {var} (config field `{field}`) = {value:?}: expected {expected}"
    )]
    Env {
        /// The variable's name.
        var: String,
        /// The config field it sets.
        field: &'static str,
        /// Its value.
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The memory the config sizes, allocated and written up front by `TimerService::new`
    /// ([`Config::memory_estimate`](crate::Config::memory_estimate)), is over what the service
    /// may take on this machine ([`limits::memory_limit`](crate::limits::memory_limit)).
    /// `field` is the one with the largest share.
    #[error(
        "config field `{field}`: the service would allocate {} up front, most of it for this field, over its limit of {} on this machine (half its memory)",
        human(*bytes),
        human(*limit)
    )]
    TooLarge {
        /// The field with the largest share of the memory.
        field: &'static str,
        /// The whole config's estimate, in bytes.
        bytes: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The allocator refused memory that `field` sizes, while `TimerService::new` made it.
    #[error("config field `{field}`: the allocator refused the {} it sizes", human(*bytes))]
    OutOfMemory {
        /// The field that sizes the refused memory.
        field: &'static str,
        /// The bytes the field sizes in all (estimated).
        bytes: u64,
    },
    /// A service thread could not be started.
    #[error("cannot start a timer thread: {source}")]
    Spawn {
        /// The operating system's refusal.
        source: std::io::Error,
    },
    /// An error found in a named file.
    #[error("{}: {source}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// The error in it.
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The config field the error is about, where there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. }
            | ConfigError::Env { field, .. }
            | ConfigError::TooLarge { field, .. }
            | ConfigError::OutOfMemory { field, .. } => Some(field),
            ConfigError::Toml { field, .. } => field.as_deref(),
            ConfigError::Io { .. } | ConfigError::Spawn { .. } => None,
            ConfigError::InFile { source, .. } => source.field(),
        }
    }

    pub(crate) fn in_file(self, path: &Path) -> ConfigError {
        ConfigError::InFile {
            path: path.to_path_buf(),
            source: Box::new(self),
        }
    }
}

/// `bytes` for a message: "512 B", "3.2 MiB", "19.0 GiB".
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 20), "3.0 MiB");
        assert_eq!(human(20_401_094_656), "19.0 GiB");
        assert_eq!(human(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn memory_errors_name_their_field() {
        let error = ConfigError::TooLarge {
            field: "capacity",
            bytes: 20 << 30,
            limit: 12 << 30,
        };
        assert_eq!(error.field(), Some("capacity"));
        let message = error.to_string();
        assert!(
            message.contains("`capacity`") && message.contains("20.0 GiB"),
            "{message}"
        );
        let error = ConfigError::OutOfMemory {
            field: "ring_capacity",
            bytes: 1 << 40,
        };
        assert_eq!(error.field(), Some("ring_capacity"));
        assert!(error.to_string().contains("1.0 TiB"), "{error}");
    }
}
