//! [`Config`]: every knob of the service, from code, a TOML file or `WHEEL_*` variables.

use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

mod fields;

/// How a [`TimerService`](crate::TimerService) is built. Every field has a default, so a TOML
/// file or the environment only names what it changes.
///
/// Every field has a row in [`limits::FIELDS`], which gives its environment variable and its
/// range; `with_env` and `validate` walk that table, and the tests check `wheel.toml` and the
/// README's table against it.
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
    /// Wheel shards, each with its own pending rings, timer table and wheel. Default: available
    /// cores.
    pub shards: usize,
    /// Threads that tick the shards' wheels: tick thread `i` drives shards `i`,
    /// `i + tick_threads`, `i + 2·tick_threads` … (never more threads than shards). Default
    /// `None`: one per [`SHARDS_PER_TICK_THREAD`](limits::SHARDS_PER_TICK_THREAD) shards,
    /// rounded up; [`Config::tick_thread_count`] says how many a config starts.
    ///
    /// A tick thread with timers pending sleeps and wakes once a tick, and on a virtual
    /// machine that costs about 20 µs of CPU each time (`docs/performance.md`, "Wake-ups: the price of a sleep"), whatever the
    /// work it wakes to. Driving several shards, it pays that once for all of them. Shards
    /// keep producers on different threads from contending for one ring and one table; more
    /// tick threads pay where producers on many cores together schedule faster than one tick
    /// thread moves new timers into its wheels (tens of millions a second).
    pub tick_threads: Option<usize>,
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
    /// Commands each shard's pending ring holds, rounded up to a power of two (24 bytes each,
    /// allocated by [`TimerService::new`](crate::TimerService::new) for every shard; the
    /// allocation comes zeroed, so its pages take memory only once a burst reaches them).
    /// Default 65 536 (1.5 MiB a shard at most). On Linux a shard also has a lane of this
    /// size, a ring of its own for the one producer thread that schedules most on it (taken
    /// once a thread has scheduled a few hundred timers there, given up when that thread
    /// ends): that thread's timers fill its lane, then the shared ring, and it waits for room
    /// only when both are full.
    ///
    /// This bounds how long a new timer can wait in the ring behind others before it reaches
    /// the wheel: a timer due soon, scheduled behind a backlog, is late by the time the tick
    /// thread needs to move that backlog (tens of nanoseconds a command). A producer that
    /// finds the ring full waits for room (backpressure). The default lets a burst of a million
    /// timers go in at about the producer's own speed; lower it where timers due within
    /// milliseconds of a burst must not wait behind it (`docs/performance.md` has what ring
    /// sizes measured).
    pub ring_capacity: usize,
    /// Pin each tick thread to a core. Default false.
    ///
    /// Tick threads are numbered across the process in the order services start them, and
    /// the `k`-th goes to the `k`-th core counted down from the last one the starting thread
    /// may run on: a service's tick threads, and those of several services in one process,
    /// take different cores while there are cores enough, and the first keep off core 0.
    ///
    /// Pinning pays where the tick threads have cores of their own (more cores than shards,
    /// or the application's threads pinned elsewhere). Where the application's threads share
    /// the cores with them, a pinned tick thread cannot be moved off the core a busy producer
    /// runs on, and the two halve it (`docs/performance.md` has the measurement).
    pub pin_threads: bool,
    /// Run tick threads under `SCHED_FIFO` at the lowest real-time priority, so a tick thread
    /// that wakes takes its core from any normal thread at once instead of waiting for it.
    /// Default false. Linux only; where the OS refuses (it takes `CAP_SYS_NICE` or an
    /// `RLIMIT_RTPRIO` of at least 1), the tick threads run at normal priority, a warning is
    /// logged, and [`Stats::realtime_ticks`](crate::Stats::realtime_ticks) says how many got
    /// it.
    ///
    /// This pays where the application's threads keep the cores busy: there, at normal
    /// priority, a tick thread can wait a scheduler slice or more (milliseconds) for its core,
    /// and the timers due meanwhile are that late. (At normal priority a tick thread can ask
    /// for a short scheduler slice instead, [`Config::short_tick_slice`], which needs no
    /// privilege; `realtime_ticks` goes further.) The price is the application's: a tick
    /// thread with work (moving a burst of new timers into its wheel, handing out what falls
    /// due) now runs before the application's threads on its core, so a producer scheduling
    /// flat out goes slower. Workers keep normal priority, since they run user callbacks
    /// (`docs/performance.md` has the measurement).
    pub realtime_ticks: bool,
    /// At normal priority (without `realtime_ticks`), tick threads ask Linux 6.12 and later
    /// for the shortest scheduler slice, 0.1 ms, instead of the default (0.7 ms × (1 + log2 of
    /// the CPUs)). A thread with a shorter slice may preempt one with a longer slice when it
    /// wakes, so a tick thread that wakes beside a busy thread gets its core sooner and the
    /// timers due then are less late. Its share of the CPU does not change, and no privilege
    /// is needed. Default true; earlier kernels and other systems ignore it.
    ///
    /// The price is the same as `realtime_ticks`', smaller: where a tick thread shares a core
    /// with a producer scheduling flat out, it takes its turns sooner, and the producer goes
    /// somewhat slower (`docs/performance.md` has both measurements). Set it to false where
    /// the producer's rate matters more than the timers' tail.
    pub short_tick_slice: bool,
    /// How long `schedule` waits for room in a full ring before it returns
    /// `ScheduleError::Saturated`. Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub saturation_timeout: Duration,
    /// Timers the service should hold at once without growing. Room for this many, split
    /// evenly over the shards (wheel places and timer cells, about 56 bytes a timer), is
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

/// The limits [`Config`] is checked against, and the table of its fields
/// ([`FIELDS`](crate::limits::FIELDS)) that environment parsing and validation walk.
pub mod limits {
    use std::time::Duration;

    pub use super::fields::{Field, FIELDS};

    /// Most `shards`.
    pub const MAX_SHARDS: usize = 1024;
    /// Shards a tick thread drives when `tick_threads` is left out.
    pub const SHARDS_PER_TICK_THREAD: usize = 4;
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
    /// Most `max_pending` and `transfer_batch`: the largest whole number TOML holds (2^63-1),
    /// so that every valid config can be written back as TOML.
    pub const MAX_COUNT: usize = i64::MAX as usize;
    /// Longest config file [`Config::from_file`](crate::Config::from_file) reads: 1 MiB, a
    /// hundred times `wheel.toml` with every field commented.
    pub const MAX_FILE_BYTES: u64 = 1 << 20;
    /// Most `capacity` (2^28 timers, about 21.5 GB reserved). A machine's memory may allow
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
            tick_threads: None,
            tick: Duration::from_millis(1),
            wheel_slots: 64,
            executor_threads: available_cores(),
            max_pending: None,
            transfer_batch: 100_000,
            ring_capacity: 1 << 16,
            pin_threads: false,
            realtime_ticks: false,
            short_tick_slice: true,
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
        let config: Config = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a TOML file (see [`Config::from_toml_str`]): a regular file (or a link to one) of
    /// at most [`limits::MAX_FILE_BYTES`]. A directory, a pipe (a FIFO, or a shell's `<(…)`)
    /// or a device is refused at once with [`ConfigError::Io`], never waited on or read
    /// without end; to read a config from one, read the text yourself and call
    /// `from_toml_str`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = read_config_file(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text).map_err(|e| e.in_file(path))
    }

    /// Overrides each field whose variable is set: `WHEEL_` and the field's name in capitals
    /// (`WHEEL_RING_CAPACITY` for `ring_capacity`; [`limits::FIELDS`] lists them). Numbers may
    /// group digits with `_`, `WHEEL_MAX_PENDING` and `WHEEL_TICK_THREADS` take `none` (an
    /// empty value is an error, not `none`), booleans `true`/`false`/`1`/`0` (and
    /// `yes`/`no`/`on`/`off`, in any case), and durations read like "1ms", "500us", "2s". A value
    /// that does not parse is an error naming the variable and the field; then the whole config
    /// is validated.
    ///
    /// Only these names are read: a misspelt or lower-case variable (`WHEEL_SHARD`,
    /// `wheel_shards`) is not an error, it is simply not one of them. A variable of a field
    /// whose value is not UTF-8 is an error naming it.
    pub fn with_env(self) -> Result<Config, ConfigError> {
        self.with_lookup(|name| match std::env::var(name) {
            Ok(text) => Ok(Some(text)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(raw)) => Err(raw),
        })
    }

    /// [`Config::with_env`] reading from `lookup` instead of the process environment.
    pub fn with_vars(self, lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        self.with_lookup(|name| Ok(lookup(name)))
    }

    /// Sets each field whose variable `lookup` finds (`Err`: set, but not UTF-8), then
    /// validates the whole config.
    fn with_lookup(
        mut self,
        lookup: impl Fn(&str) -> Result<Option<String>, std::ffi::OsString>,
    ) -> Result<Config, ConfigError> {
        for field in limits::FIELDS {
            let var = field.env_var();
            match lookup(&var) {
                Ok(Some(text)) => field.set_from_env(&mut self, var, text)?,
                Ok(None) => {}
                Err(raw) => return Err(field.not_unicode(var, &raw)),
            }
        }
        self.validate()?;
        Ok(self)
    }

    /// Bytes [`TimerService::new`](crate::TimerService::new) allocates up front for this
    /// config (the records and wheel places for `capacity` written at once, so they are
    /// resident from the start; the rings and histograms zeroed, resident as they are used):
    ///
    /// - per shard, its rings: `ring_capacity` (rounded up to a power of two) × 24 bytes, and
    ///   24 KiB for new timers due soon;
    /// - per shard, its share of `capacity` (`capacity / shards`, rounded up): a timer record
    ///   of 48 bytes per slot, and a wheel place of 8 bytes per timer in whole chunks (126 to
    ///   a 1 KiB chunk), with room for partly filled ones — about 56 bytes a timer;
    /// - per shard, its wheel's slot tables (2 × levels × `wheel_slots`, rounded up to a power
    ///   of two, × 8 bytes, where levels keep slots up to 2^32 ticks wide: 8 KiB at 64 slots,
    ///   196 KiB at 4096), its timer table's
    ///   directories of records and free slots (12 KiB) and its ring of due references for the workers (320 KiB);
    /// - per executor thread, its histograms of lateness, callback time and queue delay
    ///   (3 × 261 KiB).
    ///
    /// Not counted: what grows later with the timers actually scheduled (their tasks, the wheel
    /// slots' arrays, and with more than one executor thread what idle workers make resident
    /// ahead of a growing shard: at most 4 MiB of records and 4 MiB of wheel chunks a shard
    /// beyond the most timers it has held),
    /// and thread stacks, which are reserved address space that is only touched as used.
    ///
    /// ```
    /// use wheel_shard::Config;
    ///
    /// let small = Config { shards: 2, capacity: 0, ..Config::default() };
    /// let big = Config { capacity: 1_000_000, ..small.clone() };
    /// assert!(big.memory_estimate() - small.memory_estimate() >= 56_000_000);
    /// ```
    pub fn memory_estimate(&self) -> u64 {
        crate::memory::estimate(self)
    }

    /// The tick threads a service with this config starts: `tick_threads`, or one per
    /// [`SHARDS_PER_TICK_THREAD`](limits::SHARDS_PER_TICK_THREAD) shards, rounded up; never
    /// more than `shards`.
    ///
    /// ```
    /// use wheel_shard::Config;
    ///
    /// let config = Config { shards: 6, tick_threads: None, ..Config::default() };
    /// assert_eq!(config.tick_thread_count(), 2);
    /// assert_eq!(Config { tick_threads: Some(3), ..config.clone() }.tick_thread_count(), 3);
    /// assert_eq!(Config { tick_threads: Some(10), ..config }.tick_thread_count(), 6);
    /// ```
    pub fn tick_thread_count(&self) -> usize {
        let threads = self
            .tick_threads
            .unwrap_or_else(|| self.shards.div_ceil(limits::SHARDS_PER_TICK_THREAD));
        threads.clamp(1, self.shards.max(1))
    }

    /// Checks every field against its range in [`limits::FIELDS`]; the error names the first
    /// field out of range (in the table's order), with its value and the range.
    ///
    /// The checks depend on the config alone, never on the machine, so a config valid here is
    /// valid everywhere. Whether the machine has the memory the config sizes
    /// ([`Config::memory_estimate`] against [`limits::memory_limit`]) is checked by
    /// [`TimerService::new`](crate::TimerService::new).
    pub fn validate(&self) -> Result<(), ConfigError> {
        limits::FIELDS
            .iter()
            .try_for_each(|field| field.check(self))
    }
}

/// Reads the text of a config file: a regular file of at most [`limits::MAX_FILE_BYTES`].
fn read_config_file(path: &Path) -> io::Result<String> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Opening a FIFO for reading waits for a writer; non-blocking, it returns at once and
        // is refused below. On a regular file the flag changes nothing.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a directory, pipe or device); \
             read its text and call Config::from_toml_str instead",
        ));
    }
    let mut text = String::new();
    file.take(limits::MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limits::MAX_FILE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "longer than {} bytes; a config file is a few KiB",
                limits::MAX_FILE_BYTES
            ),
        ));
    }
    Ok(text)
}

/// A TOML error as a [`ConfigError::Toml`]: the parser's message with the line and column it
/// points at, and the field it is about where one can be told.
fn toml_error(text: &str, error: &toml::de::Error) -> ConfigError {
    let mut message = error.message().trim().to_string();
    if message.is_empty() {
        message = "not valid TOML".to_string();
    }
    if let Some(span) = error.span() {
        let before = &text[..span.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        message = format!("{message} (line {line}, column {column})");
    }
    ConfigError::Toml {
        message,
        field: toml_error_field(text, error),
    }
}

/// The config field a TOML error is about: serde names unknown, missing and duplicate fields
/// in backticks at the start of its message ("unknown field `tcik`"); otherwise the key of
/// the line the error points at, `key = …` or a table header `[key]`.
fn toml_error_field(text: &str, error: &toml::de::Error) -> Option<String> {
    let message = error.message();
    for prefix in ["unknown field `", "missing field `", "duplicate field `"] {
        if let Some(rest) = message.strip_prefix(prefix) {
            return Some(rest[..rest.find('`')?].to_string());
        }
    }
    let at = error.span()?.start.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    key_of_line(text[line_start..].lines().next()?)
}

/// The top-level key a TOML line names: `key = …`, `[key]`, `[[key]]` or `key.more = …`,
/// without quotes (`"shards" = …` is the field `shards`).
fn key_of_line(line: &str) -> Option<String> {
    let line = line.trim();
    let key = match line.strip_prefix('[') {
        Some(header) => header.trim_start_matches('[').split(']').next()?,
        None => line.split_once('=')?.0,
    };
    let key = key.trim();
    let key = match key.chars().next()? {
        quote @ ('"' | '\'') => key[1..].split(quote).next()?,
        _ => key.split('.').next()?.trim(),
    };
    (!key.is_empty()).then(|| key.to_string())
}
