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
            ConfigError::Invalid { field, .. } | ConfigError::Env { field, .. } => Some(field),
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
