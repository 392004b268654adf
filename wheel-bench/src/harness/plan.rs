//! [`Plan`]: the parameters of one run, the same for every system
//! ([`Options::plan`](crate::options::Options::plan) makes them).

use std::path::Path;
use std::time::Duration;

use wheel_shard::Config;

use crate::harness::scenario::Scenario;
use crate::host::progress::Progress;

/// One run's parameters, the same for every system.
pub struct Plan<'a> {
    pub scenario: Scenario,
    pub timers: u64,
    pub spread: Duration,
    pub producers: usize,
    pub seed: u64,
    pub idle_for: Duration,
    /// wheel's config; peers take their thread counts and tick from it.
    pub config: &'a Config,
    /// Where a system may write build products (Netty's compiled harness).
    pub work_dir: &'a Path,
    pub jvm_warmup_rounds: u32,
    /// Unmeasured rounds of this plan an in-process system runs, on the same instance,
    /// before the measured one.
    pub warmup_rounds: u32,
    /// Whether a host stall probe watches the measured round (see [`crate::host::stalls`]).
    pub stall_probe: bool,
    pub progress: &'a Progress,
}
