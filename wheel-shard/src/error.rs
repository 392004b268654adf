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
    TooManyPending { limit: usize },
    /// The shard's pending ring stayed full for `Config::saturation_timeout`: the tick thread
    /// cannot keep up with the producers.
    #[error("a shard's pending ring stayed full for the saturation timeout (config field `saturation_timeout`)")]
    Saturated,
}

/// A [`Config`](crate::Config) that cannot be used. The message names the field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field's value is out of range.
    #[error("config field `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// The TOML text did not parse, or a value had the wrong type.
    #[error("config{}: {message}", field.as_ref().map(|f| format!(" field `{f}`")).unwrap_or_default())]
    Toml {
        message: String,
        field: Option<String>,
    },
    /// A `WHEEL_*` variable did not parse.
    #[error(
        "environment variable {var} (config field `{field}`) = {value:?}: expected {expected}"
    )]
    Env {
        var: String,
        field: &'static str,
        value: String,
        expected: String,
    },
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A service thread could not be started.
    #[error("cannot start a timer thread: {source}")]
    Spawn { source: std::io::Error },
    /// An error found in a named file.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
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
