//! The one table of [`Config`]'s fields ([`FIELDS`]): each field's name (its TOML key, and
//! after `WHEEL_` in capitals its environment variable), the values it accepts, and how to
//! read and write it. [`Config::with_vars`] and [`Config::validate`] walk the table, and
//! `tests/service/config/fields.rs` checks `wheel.toml` and the README's configuration table against it, so a
//! new field is added here once and cannot be half-documented.

use std::time::Duration;

use super::limits::*;
use super::Config;
use crate::error::ConfigError;

/// A row of [`FIELDS`]: `field!(name, Kind { bounds }, too_small: "why")`. The name is both
/// the struct field and its TOML key; the kind is the variant of [`Kind`] and of [`Value`].
macro_rules! field {
    (
        $name:ident, $kind:ident $({ $($bound:ident: $value:expr),* })?
        $(, too_small: $why:literal)?
    ) => {
        Field {
            name: stringify!($name),
            kind: Kind::$kind $({ $($bound: $value),* })?,
            too_small: field!(@why $($why)?),
            get: |config| Value::$kind(config.$name),
            set: |config, value| match value {
                Value::$kind(value) => config.$name = value,
                other => unreachable!("{other:?} for `{}`", stringify!($name)),
            },
        }
    };
    (@why $why:literal) => { Some($why) };
    (@why) => { None };
}

/// Every field of [`Config`], in the order the README and `wheel.toml` list them.
#[rustfmt::skip]
pub const FIELDS: &[Field] = &[
    field!(shards, Count { min: 1, max: MAX_SHARDS }),
    field!(tick_threads, OptionalCount { min: 1, max: MAX_SHARDS },
        too_small: "would leave the shards without a tick thread; leave it out for one per four shards"),
    field!(tick, Duration { min: MIN_TICK, max: MAX_TICK }),
    field!(wheel_slots, Count { min: 1, max: MAX_WHEEL_SLOTS }),
    field!(executor_threads, Count { min: 1, max: MAX_EXECUTOR_THREADS }),
    field!(max_pending, OptionalCount { min: 1, max: MAX_COUNT },
        too_small: "would refuse every timer; leave it out for no limit"),
    field!(transfer_batch, Count { min: 1, max: MAX_COUNT },
        too_small: "would never move a command into the wheel"),
    field!(ring_capacity, Count { min: MIN_RING_CAPACITY, max: MAX_RING_CAPACITY }),
    field!(pin_threads, Bool),
    field!(realtime_ticks, Bool),
    field!(short_tick_slice, Bool),
    field!(saturation_timeout, Duration { min: Duration::ZERO, max: MAX_SATURATION_TIMEOUT }),
    field!(capacity, Count { min: 0, max: MAX_CAPACITY }),
    field!(slow_callback, Duration { min: MIN_SLOW_CALLBACK, max: MAX_SLOW_CALLBACK }),
];

/// One field of [`Config`]: its name, its environment variable and the values it accepts.
/// The rows are in [`FIELDS`].
#[derive(Clone, Copy, Debug)]
pub struct Field {
    name: &'static str,
    kind: Kind,
    /// Why a value below the range is refused, where the range alone does not say it.
    too_small: Option<&'static str>,
    get: fn(&Config) -> Value,
    set: fn(&mut Config, Value),
}

/// What a field holds, and the range it is checked against.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A whole number in `min..=max` (`usize::MAX`: no upper bound).
    Count { min: usize, max: usize },
    /// A whole number in `min..=max`, or none.
    OptionalCount { min: usize, max: usize },
    /// A duration in `min..=max`.
    Duration { min: Duration, max: Duration },
    /// `true` or `false`.
    Bool,
}

/// A field's value, of its [`Kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    Count(usize),
    OptionalCount(Option<usize>),
    Duration(Duration),
    Bool(bool),
}

impl Field {
    /// The field's name in [`Config`] and its key in TOML, e.g. `ring_capacity`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The environment variable [`Config::with_env`] reads for it, e.g. `WHEEL_RING_CAPACITY`.
    pub fn env_var(&self) -> String {
        format!("WHEEL_{}", self.name.to_ascii_uppercase())
    }

    /// The values it accepts, as the README's table states them: `1..=1024`, `"10us"..="1h"`,
    /// `1..` (no upper bound), `none or 1..`, `true or false`.
    pub fn accepts(&self) -> String {
        match self.kind {
            Kind::Count { min, max } => range(min, max),
            Kind::OptionalCount { min, max } => format!("none or {}", range(min, max)),
            Kind::Duration { min, max } => range(min, max),
            Kind::Bool => "true or false".to_string(),
        }
    }

    /// Checks the field's value in `config` against its range.
    pub(super) fn check(&self, config: &Config) -> Result<(), ConfigError> {
        match ((self.get)(config), self.kind) {
            (Value::Count(n), Kind::Count { min, max })
            | (Value::OptionalCount(Some(n)), Kind::OptionalCount { min, max }) => {
                check(self, n, min..=max)
            }
            (Value::Duration(d), Kind::Duration { min, max }) => check(self, d, min..=max),
            _ => Ok(()),
        }
    }

    /// Sets the field in `config` from the text of its environment variable `var`; the range
    /// is checked later, with the rest, by [`Config::validate`].
    pub(super) fn set_from_env(
        &self,
        config: &mut Config,
        var: String,
        text: String,
    ) -> Result<(), ConfigError> {
        let parsed = match self.kind {
            Kind::Count { .. } => parse_number(&text).map(Value::Count),
            Kind::OptionalCount { .. } => match text.trim() {
                "none" => Some(Value::OptionalCount(None)),
                number => parse_number(number).map(|n| Value::OptionalCount(Some(n))),
            },
            Kind::Duration { .. } => humantime::parse_duration(text.trim())
                .ok()
                .map(Value::Duration),
            Kind::Bool => match text.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Some(Value::Bool(true)),
                "false" | "0" | "no" | "off" => Some(Value::Bool(false)),
                _ => None,
            },
        };
        let value = parsed.ok_or_else(|| ConfigError::Env {
            var,
            field: self.name,
            value: text,
            expected: self.expected().to_string(),
        })?;
        (self.set)(config, value);
        Ok(())
    }

    /// The error for this field's variable `var` holding `value`, which is not UTF-8.
    pub(super) fn not_unicode(&self, var: String, value: &std::ffi::OsStr) -> ConfigError {
        ConfigError::Env {
            var,
            field: self.name,
            value: value.to_string_lossy().into_owned(),
            expected: format!("{}, in UTF-8", self.expected()),
        }
    }

    /// What an environment variable of this kind must look like.
    fn expected(&self) -> &'static str {
        match self.kind {
            Kind::Count { .. } => "a whole number below 2^64",
            Kind::OptionalCount { .. } => "a whole number below 2^64, or none",
            Kind::Duration { .. } => "a duration such as \"1ms\", \"500us\" or \"2s\"",
            Kind::Bool => "true or false",
        }
    }
}

/// Agrona's `check*` validators as one helper: `Ok` when `value` lies in `range`, otherwise
/// [`ConfigError::Invalid`] naming the field, with the value and the range it missed (or, below
/// the range, the field's own reason when it has one).
fn check<T: Bound>(
    field: &Field,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let reason = match field.too_small {
        Some(why) if value < *range.start() => format!("{} {why}", value.shown()),
        _ => format!(
            "{} is not in {}",
            value.shown(),
            self::range(*range.start(), *range.end())
        ),
    };
    Err(ConfigError::Invalid {
        field: field.name,
        reason,
    })
}

/// A value a range is made of, and how messages and the README show it.
trait Bound: PartialOrd + Copy {
    /// The value as a user writes it.
    fn shown(self) -> String;
    /// A bound as the README states it: large powers of two as `2^k`.
    fn bound(self) -> String {
        self.shown()
    }
    /// No upper bound.
    fn is_unbounded(self) -> bool;
}

impl Bound for usize {
    fn shown(self) -> String {
        self.to_string()
    }
    fn bound(self) -> String {
        if self == MAX_COUNT {
            "2^63-1".to_string()
        } else if self >= 1 << 16 && self.is_power_of_two() {
            format!("2^{}", self.trailing_zeros())
        } else {
            self.to_string()
        }
    }
    fn is_unbounded(self) -> bool {
        self == usize::MAX
    }
}

impl Bound for Duration {
    fn shown(self) -> String {
        format!("\"{}\"", humantime::format_duration(self))
    }
    fn is_unbounded(self) -> bool {
        self == Duration::MAX
    }
}

/// `min..=max`, or `min..` without an upper bound.
fn range<T: Bound>(min: T, max: T) -> String {
    if max.is_unbounded() {
        format!("{}..", min.bound())
    } else {
        format!("{}..={}", min.bound(), max.bound())
    }
}

/// A whole number; `_` may group digits (`1_000_000`).
fn parse_number(text: &str) -> Option<usize> {
    text.trim().replace('_', "").parse().ok()
}
