//! [`Machine`]: what the run ran on, from /proc.

use serde::{Deserialize, Serialize};

use crate::host::wake_floor::WakePrices;

/// The machine's cores, CPU model, memory and kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// Processors listed in /proc/cpuinfo.
    pub cpuinfo_processors: usize,
    pub cpu_model: String,
    pub memory_bytes: u64,
    pub kernel: String,
    /// /proc/loadavg when the run started.
    pub load_average: String,
    /// Share of all cores' time other processes used in the half second before the run:
    /// a busy machine makes every figure worse.
    pub busy_before: f64,
    /// One load that misses every cache, in ns ([`crate::host::floor`]): the floor under the
    /// per-timer figures of memory-bound runs (`None`: not measured).
    #[serde(default)]
    pub dram_miss_ns: Option<f64>,
    /// What a sleep and a wake-up cost a thread here ([`crate::host::wake_floor`]): the floor
    /// under the CPU of a service that sleeps every tick (`None`: not measured).
    #[serde(default)]
    pub wake_prices: Option<WakePrices>,
}

impl Machine {
    /// Reads /proc/cpuinfo, /proc/meminfo and the kernel release, and measures the memory
    /// floor and the wake-up prices (about 2.5 s).
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpuinfo_processors: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            cpu_model: field(&cpuinfo, "model name")
                .unwrap_or("unknown")
                .to_string(),
            memory_bytes: field(&meminfo, "MemTotal")
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            busy_before: busy_share(std::time::Duration::from_millis(500)),
            dram_miss_ns: crate::host::floor::dram_miss_ns(),
            wake_prices: crate::host::wake_floor::wake_prices(),
        }
    }

    /// True when other processes used over a quarter of the cores just before the run.
    pub fn was_busy(&self) -> bool {
        self.busy_before > 0.25
    }
}

/// Non-idle share of all cores' time over `window` (from /proc/stat; 0 where it is missing).
fn busy_share(window: std::time::Duration) -> f64 {
    let before = cpu_times();
    std::thread::sleep(window);
    let after = cpu_times();
    match (before, after) {
        (Some((idle0, total0)), Some((idle1, total1))) if total1 > total0 => {
            1.0 - (idle1 - idle0) as f64 / (total1 - total0) as f64
        }
        _ => 0.0,
    }
}

/// `(idle + iowait, total)` jiffies of the `cpu` line of /proc/stat.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((idle, fields.iter().take(8).sum()))
}

/// The value of the first `key: value` line.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine() {
        let m = Machine::read();
        assert!(m.cores >= 1);
        assert!(m.memory_bytes > 0);
        assert!((0.0..=1.0).contains(&m.busy_before), "{}", m.busy_before);
        assert!(m.dram_miss_ns.is_some_and(|ns| ns > 0.0), "{m:?}");
        assert_eq!(
            field("model name\t: Xeon\nother: 1", "model name"),
            Some("Xeon")
        );
    }
}
