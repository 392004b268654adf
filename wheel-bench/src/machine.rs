//! [`Machine`]: what the run ran on, from /proc.

use serde::{Deserialize, Serialize};

/// The machine's cores, CPU model, memory and kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// Processors listed in /proc/cpuinfo.
    pub cpuinfo_processors: usize,
    pub cpu_model: String,
    pub memory_bytes: u64,
    pub kernel: String,
    /// /proc/loadavg when the run started: a busy machine makes every figure worse.
    pub load_average: String,
}

impl Machine {
    /// Reads /proc/cpuinfo, /proc/meminfo and the kernel release.
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
        }
    }

    /// True when the 1-minute load average was above half the cores at the start.
    pub fn was_busy(&self) -> bool {
        let load: f64 = self
            .load_average
            .split_whitespace()
            .next()
            .and_then(|l| l.parse().ok())
            .unwrap_or(0.0);
        load > self.cores as f64 * 0.5
    }
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
        assert_eq!(
            field("model name\t: Xeon\nother: 1", "model name"),
            Some("Xeon")
        );
    }
}
