//! [`Config`]: every knob of the service, from code, a TOML file or `WHEEL_*` variables.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// How a [`TimerService`](crate::TimerService) is built. Every field has a default, so a TOML
/// file or the environment only names what it changes.
///
/// ```
/// use std::time::Duration;
/// use wheel_shard::Config;
///
/// let config = Config::from_toml_str("shards = 2\ntick = \"500us\"").unwrap();
/// assert_eq!(config.shards, 2);
/// assert_eq!(config.tick, Duration::from_micros(500));
///
/// let err = Config::from_toml_str("tick = \"0ms\"").unwrap_err();
/// assert!(err.to_string().contains("tick"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Wheel shards, each with its own tick thread, ring and wheel. Default: available cores.
    pub shards: usize,
    /// The wheel's resolution: deadlines are rounded up to a whole tick. Default 1 ms.
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
    /// Slots per wheel level, rounded up to a power of two (Netty's `ticksPerWheel`). Default 64.
    pub wheel_slots: usize,
    /// Threads that run expired callbacks. Default: available cores.
    pub executor_threads: usize,
    /// At most this many timers pending at once over the whole service (Netty's
    /// `maxPendingTimeouts`); `None` is unbounded.
    pub max_pending: Option<usize>,
    /// At most this many commands moved from a shard's ring into its wheel during one tick
    /// (Netty's rule; the rest waits for the next tick). Moves happen in small chunks between
    /// looks for due timers either way. Default 100 000.
    pub transfer_batch: usize,
    /// Commands each shard's pending ring holds, rounded up to a power of two (48 bytes each,
    /// allocated and written by [`TimerService::new`](crate::TimerService::new) for every
    /// shard). Default 4 096.
    ///
    /// This bounds how long a new timer can wait in the ring behind others before it reaches
    /// the wheel: a timer due soon, scheduled behind a backlog, is late by the time the tick
    /// thread needs to move that backlog. 4 096 is a few hundred microseconds of moving; a
    /// faster producer waits for room instead (backpressure), which leaves the CPU to the tick
    /// and executor threads. Raise it to absorb longer bursts where lateness matters less.
    pub ring_capacity: usize,
    /// Pin tick thread `i` to core `i mod cores`. Default true.
    pub pin_threads: bool,
    /// How long `schedule` waits for room in a full ring before it returns
    /// `ScheduleError::Saturated`. Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub saturation_timeout: Duration,
    /// Timers the service should hold at once without growing. Room for this many, split
    /// evenly over the shards (wheel places and timer cells, about 76 bytes a timer), is
    /// allocated and written by [`TimerService::new`](crate::TimerService::new), so the first
    /// burst up to there neither allocates in the tick threads nor waits for the kernel to
    /// supply fresh pages one at a time. Default 0: grow on demand.
    ///
    /// [`Config::memory_estimate`] adds this up with the rings; `TimerService::new` refuses a
    /// config over [`limits::memory_limit`] with [`ConfigError::TooLarge`].
    pub capacity: usize,
    /// A callback that runs longer than this is counted in `Stats::slow_callbacks` and logged
    /// with `tracing` (at most once a second per worker, naming the timer and its run time).
    /// It delays only the callbacks queued behind it on its worker, never a tick. Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub slow_callback: Duration,
}

/// The limits [`Config`] is checked against.
pub mod limits {
    use std::time::Duration;

    /// Most `shards`.
    pub const MAX_SHARDS: usize = 1024;
    /// Most `executor_threads`.
    pub const MAX_EXECUTOR_THREADS: usize = 1024;
    /// Shortest `tick`: below it, waking up costs more than the tick is worth.
    pub const MIN_TICK: Duration = Duration::from_micros(10);
    /// Longest `tick`.
    pub const MAX_TICK: Duration = Duration::from_secs(3600);
    /// Most `wheel_slots` (after rounding up to a power of two).
    pub const MAX_WHEEL_SLOTS: usize = 4096;
    /// Fewest `ring_capacity`.
    pub const MIN_RING_CAPACITY: usize = 2;
    /// Most `ring_capacity`.
    pub const MAX_RING_CAPACITY: usize = 1 << 26;
    /// Longest `saturation_timeout`.
    pub const MAX_SATURATION_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Shortest `slow_callback`.
    pub const MIN_SLOW_CALLBACK: Duration = Duration::from_micros(1);
    /// Longest `slow_callback`.
    pub const MAX_SLOW_CALLBACK: Duration = Duration::from_secs(3600);
    /// Most `capacity` (2^28 timers, about 20 GB reserved). A machine's memory may allow
    /// less: see [`memory_limit`].
    pub const MAX_CAPACITY: usize = 1 << 28;

    /// The most memory [`TimerService::new`](crate::TimerService::new) allocates up front on
    /// this machine, in bytes: half its memory — physical RAM, or the memory limit of the
    /// process's cgroup (a container's) when that is lower, as Linux reports them. Where
    /// neither can be read, only the address space bounds it (and a refusal by the allocator
    /// is still an error, never an abort).
    ///
    /// This is checked by `TimerService::new`, not [`Config::validate`](crate::Config::validate):
    /// a config is often validated on one machine (a build, a deploy tool) and run on another,
    /// so validation must not depend on where it runs.
    ///
    /// Half, because what `new` allocates is written at once and stays resident before a
    /// single task is stored: the timers that fill it bring their tasks, and the application
    /// around them needs room too.
    pub fn memory_limit() -> u64 {
        crate::memory::limit()
    }
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for Config {
    fn default() -> Self {
        Config {
            shards: available_cores(),
            tick: Duration::from_millis(1),
            wheel_slots: 64,
            executor_threads: available_cores(),
            max_pending: None,
            transfer_batch: 100_000,
            ring_capacity: 1 << 12,
            pin_threads: true,
            saturation_timeout: Duration::from_millis(100),
            capacity: 0,
            slow_callback: Duration::from_millis(100),
        }
    }
}

impl Config {
    /// Reads a TOML document; fields it leaves out keep their defaults. Unknown fields are an
    /// error (a typo should not silently fall back to a default).
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Toml {
            message: e.message().to_string(),
            field: toml_error_field(text, &e),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a TOML file (see [`Config::from_toml_str`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text).map_err(|e| e.in_file(path))
    }

    /// Overrides fields from `WHEEL_SHARDS`, `WHEEL_TICK`, `WHEEL_WHEEL_SLOTS`,
    /// `WHEEL_EXECUTOR_THREADS`, `WHEEL_MAX_PENDING` (a number, or `none`),
    /// `WHEEL_TRANSFER_BATCH`, `WHEEL_RING_CAPACITY`, `WHEEL_PIN_THREADS` (`true`/`false`/`1`/`0`),
    /// `WHEEL_SATURATION_TIMEOUT`, `WHEEL_CAPACITY` and `WHEEL_SLOW_CALLBACK`. Durations read
    /// like "1ms", "500us", "2s".
    pub fn with_env(self) -> Result<Config, ConfigError> {
        self.with_vars(|name| std::env::var(name).ok())
    }

    /// [`Config::with_env`] reading from `lookup` instead of the process environment.
    pub fn with_vars(
        mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let var = |field: &'static str| {
            let name = format!("WHEEL_{}", field.to_ascii_uppercase());
            lookup(&name).map(|value| EnvVar { name, field, value })
        };
        if let Some(v) = var("shards") {
            self.shards = v.parse_number()?;
        }
        if let Some(v) = var("tick") {
            self.tick = v.parse_duration()?;
        }
        if let Some(v) = var("wheel_slots") {
            self.wheel_slots = v.parse_number()?;
        }
        if let Some(v) = var("executor_threads") {
            self.executor_threads = v.parse_number()?;
        }
        if let Some(v) = var("max_pending") {
            self.max_pending = match v.value.trim() {
                "none" | "" => None,
                _ => Some(v.parse_number()?),
            };
        }
        if let Some(v) = var("transfer_batch") {
            self.transfer_batch = v.parse_number()?;
        }
        if let Some(v) = var("ring_capacity") {
            self.ring_capacity = v.parse_number()?;
        }
        if let Some(v) = var("pin_threads") {
            self.pin_threads = v.parse_bool()?;
        }
        if let Some(v) = var("saturation_timeout") {
            self.saturation_timeout = v.parse_duration()?;
        }
        if let Some(v) = var("capacity") {
            self.capacity = v.parse_number()?;
        }
        if let Some(v) = var("slow_callback") {
            self.slow_callback = v.parse_duration()?;
        }
        self.validate()?;
        Ok(self)
    }

    /// Bytes [`TimerService::new`](crate::TimerService::new) allocates up front for this
    /// config, all of it written at once so it is resident from the start:
    ///
    /// - per shard, its ring: `ring_capacity` (rounded up to a power of two) × 48 bytes;
    /// - per shard, its share of `capacity` (`capacity / shards`, rounded up): a timer cell of
    ///   24 bytes per slot in whole segments of 64 Ki, and a wheel place of 52 bytes per timer
    ///   in whole chunks of 16 Ki — about 76 bytes a timer;
    /// - per shard, its wheel's slot tables (2 × levels × `wheel_slots`, rounded up to a power
    ///   of two, × 40 bytes: 58 KiB at 64 slots, 1.9 MiB at 4096) and its timer table's
    ///   directory (96 KiB);
    /// - per executor thread, its lateness histogram (264 KiB).
    ///
    /// Not counted: what grows later with the timers actually scheduled (their tasks, the wheel
    /// slots' arrays), and thread stacks, which are reserved address space that is only
    /// touched as used.
    ///
    /// ```
    /// use wheel_shard::Config;
    ///
    /// let small = Config { shards: 2, capacity: 0, ..Config::default() };
    /// let big = Config { capacity: 1_000_000, ..small.clone() };
    /// assert!(big.memory_estimate() - small.memory_estimate() >= 76_000_000);
    /// ```
    pub fn memory_estimate(&self) -> u64 {
        crate::memory::estimate(self)
    }

    /// Checks every field against [`limits`]; the error names the first field out of range.
    ///
    /// The checks depend on the config alone, never on the machine, so a config valid here is
    /// valid everywhere. Whether the machine has the memory the config sizes
    /// ([`Config::memory_estimate`] against [`limits::memory_limit`]) is checked by
    /// [`TimerService::new`](crate::TimerService::new).
    pub fn validate(&self) -> Result<(), ConfigError> {
        use limits::*;
        let invalid =
            |field: &'static str, reason: String| Err(ConfigError::Invalid { field, reason });
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return invalid(
                "shards",
                format!("{} is not in 1..={MAX_SHARDS}", self.shards),
            );
        }
        if self.tick < MIN_TICK || self.tick > MAX_TICK {
            return invalid(
                "tick",
                format!(
                    "{} is not between {} and {}",
                    humantime::format_duration(self.tick),
                    humantime::format_duration(MIN_TICK),
                    humantime::format_duration(MAX_TICK)
                ),
            );
        }
        if self.wheel_slots == 0 || self.wheel_slots > MAX_WHEEL_SLOTS {
            return invalid(
                "wheel_slots",
                format!("{} is not in 1..={MAX_WHEEL_SLOTS}", self.wheel_slots),
            );
        }
        if self.executor_threads == 0 || self.executor_threads > MAX_EXECUTOR_THREADS {
            return invalid(
                "executor_threads",
                format!(
                    "{} is not in 1..={MAX_EXECUTOR_THREADS}",
                    self.executor_threads
                ),
            );
        }
        if self.max_pending == Some(0) {
            return invalid(
                "max_pending",
                "0 would refuse every timer; leave it out for no limit".into(),
            );
        }
        if self.transfer_batch == 0 {
            return invalid(
                "transfer_batch",
                "0 would never move a command into the wheel".into(),
            );
        }
        if self.ring_capacity < MIN_RING_CAPACITY || self.ring_capacity > MAX_RING_CAPACITY {
            return invalid(
                "ring_capacity",
                format!(
                    "{} is not in {MIN_RING_CAPACITY}..={MAX_RING_CAPACITY}",
                    self.ring_capacity
                ),
            );
        }
        if self.capacity > MAX_CAPACITY {
            return invalid(
                "capacity",
                format!("{} is over {MAX_CAPACITY}", self.capacity),
            );
        }
        if self.saturation_timeout > MAX_SATURATION_TIMEOUT {
            return invalid(
                "saturation_timeout",
                format!(
                    "{} is over an hour",
                    humantime::format_duration(self.saturation_timeout)
                ),
            );
        }
        if self.slow_callback < MIN_SLOW_CALLBACK || self.slow_callback > MAX_SLOW_CALLBACK {
            return invalid(
                "slow_callback",
                format!(
                    "{} is not between {} and {}",
                    humantime::format_duration(self.slow_callback),
                    humantime::format_duration(MIN_SLOW_CALLBACK),
                    humantime::format_duration(MAX_SLOW_CALLBACK)
                ),
            );
        }
        Ok(())
    }
}

/// The config field a TOML error is about: serde names unknown and mistyped fields in
/// backticks ("unknown field `tcik`"); otherwise the key on the line the error points at.
fn toml_error_field(text: &str, error: &toml::de::Error) -> Option<String> {
    let message = error.message();
    if message.contains("field `") {
        let name = &message[message.find('`')? + 1..];
        return Some(name[..name.find('`')?].to_string());
    }
    let at = error.span()?.start;
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next()?;
    let key = line.split('=').next()?.trim();
    (!key.is_empty() && line.contains('=')).then(|| key.to_string())
}

struct EnvVar {
    name: String,
    field: &'static str,
    value: String,
}

impl EnvVar {
    fn error(&self, expected: &str) -> ConfigError {
        ConfigError::Env {
            var: self.name.clone(),
            field: self.field,
            value: self.value.clone(),
            expected: expected.to_string(),
        }
    }

    fn parse_number(&self) -> Result<usize, ConfigError> {
        self.value
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| self.error("a whole number"))
    }

    fn parse_duration(&self) -> Result<Duration, ConfigError> {
        humantime::parse_duration(self.value.trim())
            .map_err(|_| self.error("a duration such as \"1ms\", \"500us\" or \"2s\""))
    }

    fn parse_bool(&self) -> Result<bool, ConfigError> {
        match self.value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(self.error("true or false")),
        }
    }
}
