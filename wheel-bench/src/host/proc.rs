//! What the kernel says about this process: resident memory, per-thread CPU time and run-queue
//! wait, and the machine's steal time.

use std::collections::HashMap;
use std::fs;

/// Resident memory now (`VmRSS`) and its peak (`VmHWM`), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub rss: u64,
    pub peak: u64,
}

/// Reads `VmRSS` and `VmHWM` from /proc/self/status (zeros where /proc is missing).
pub fn memory() -> Memory {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    Memory {
        rss: status_kib(&status, "VmRSS:") * 1024,
        peak: status_kib(&status, "VmHWM:") * 1024,
    }
}

fn status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// Resets the peak (`VmHWM`) to the current RSS, so each run reports its own peak. Returns
/// false when the kernel refused (then the peak is the process's since start).
pub fn reset_peak_memory() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// CPU time (ns) and sleeps of every live thread of this process, by thread id, with its
/// name.
#[derive(Clone, Debug, Default)]
pub struct ThreadTimes {
    threads: HashMap<u32, ThreadUsage>,
}

/// One thread's figures so far.
#[derive(Clone, Debug, Default)]
struct ThreadUsage {
    name: String,
    cpu_ns: u64,
    /// Times it gave up its CPU of its own accord (`voluntary_ctxt_switches`): a sleep, a
    /// wait for a wake-up, or a blocking call; `None` where the kernel does not say.
    sleeps: Option<u64>,
}

/// Reads every thread's name (`comm`), CPU time (`schedstat`, else `stat` in clock ticks)
/// and sleeps (`status`).
pub fn thread_times() -> ThreadTimes {
    let mut threads = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc/self/task") else {
        return ThreadTimes { threads };
    };
    for entry in entries.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let dir = entry.path();
        let name = fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if let Some(cpu_ns) = cpu_ns(&dir) {
            let status = fs::read_to_string(dir.join("status")).unwrap_or_default();
            let usage = ThreadUsage {
                name: name.trim_end().to_string(),
                cpu_ns,
                sleeps: status_count(&status, "voluntary_ctxt_switches:"),
            };
            threads.insert(tid, usage);
        }
    }
    ThreadTimes { threads }
}

/// CPU time (ns) of the calling thread so far, from `CLOCK_THREAD_CPUTIME_ID`.
///
/// Not from `/proc/thread-self/schedstat`: the kernel brings a running thread's figure there
/// up to date only at a scheduler tick or a switch, so a busy thread reading its own file sees
/// a value up to a tick old, and a millisecond of scheduling could read as no CPU at all. The
/// clock brings it up to date before it answers.
pub fn this_thread_cpu_ns() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write, and the clock id is a constant.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (status == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

/// The calling thread's `schedstat`, kept open so that each read is one `pread`: the watchers
/// of the stall probe read it at every wake-up.
pub struct ThreadSchedstat {
    file: Option<fs::File>,
}

impl ThreadSchedstat {
    /// Opens the calling thread's file (`/proc/thread-self` names the thread that opens it,
    /// whichever thread reads it later).
    pub fn open() -> ThreadSchedstat {
        ThreadSchedstat {
            file: fs::File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// CPU time and time spent runnable but waiting for a CPU (the guest kernel ran another
    /// thread), both in ns; `None` where the file cannot be read.
    pub fn read(&mut self) -> Option<(u64, u64)> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let len = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..len]).ok()?;
        let mut fields = text.split_whitespace().map(|v| v.parse::<u64>().ok());
        Some((fields.next()??, fields.next()??))
    }

    /// The run-queue wait so far (0 where it cannot be read: every late wake-up then counts
    /// as a stall).
    pub fn wait_ns(&mut self) -> u64 {
        self.read().map_or(0, |(_, wait)| wait)
    }
}

/// Steal time of all CPUs together so far (ns): time the hypervisor ran something else while
/// a vCPU had work. From /proc/stat, in clock ticks; `None` where it is not reported.
pub fn steal_ns() -> Option<u64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    // user nice system idle iowait irq softirq steal ...
    let steal: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(steal * NS_PER_CLOCK_TICK)
}

/// USER_HZ is 100 on Linux.
const NS_PER_CLOCK_TICK: u64 = 10_000_000;

fn cpu_ns(task_dir: &std::path::Path) -> Option<u64> {
    if let Ok(schedstat) = fs::read_to_string(task_dir.join("schedstat")) {
        if let Some(ns) = schedstat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
        {
            return Some(ns);
        }
    }
    let stat = fs::read_to_string(task_dir.join("stat")).ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14 and stime 15.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * NS_PER_CLOCK_TICK)
}

/// The count after `key` in a `status` file.
fn status_count(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))?
        .trim()
        .parse()
        .ok()
}

impl ThreadTimes {
    /// CPU time spent since `earlier` by threads whose name starts with `prefix` (threads
    /// that did not exist then count from zero).
    pub fn since(&self, earlier: &ThreadTimes, prefix: &str) -> u64 {
        self.sum_since(earlier, prefix, |usage| Some(usage.cpu_ns))
            .unwrap_or(0)
    }

    /// Sleeps since `earlier` of threads whose name starts with `prefix`, as [`Self::since`];
    /// `None` where the kernel does not count them.
    pub fn sleeps_since(&self, earlier: &ThreadTimes, prefix: &str) -> Option<u64> {
        self.sum_since(earlier, prefix, |usage| usage.sleeps)
    }

    /// `figure` summed over the threads named `prefix…`, each less its value in `earlier`.
    fn sum_since(
        &self,
        earlier: &ThreadTimes,
        prefix: &str,
        figure: impl Fn(&ThreadUsage) -> Option<u64>,
    ) -> Option<u64> {
        self.threads
            .iter()
            .filter(|(_, usage)| usage.name.starts_with(prefix))
            .map(|(tid, usage)| {
                let before = earlier.threads.get(tid).map_or(Some(0), &figure)?;
                Some(figure(usage)?.saturating_sub(before))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_and_nonzero() {
        let m = memory();
        assert!(m.rss > 1 << 20, "{m:?}");
        assert!(m.peak >= m.rss);
    }

    /// Spins until the calling thread has had `cpu_ns` of CPU by its own clock, or `limit` of
    /// wall time has passed; returns the CPU time it got. The spin is bounded by CPU time, not
    /// wall time: on a loaded machine a spin of 50 ms of wall time gets as little as a quarter
    /// of that on a CPU.
    fn spin_for_cpu(cpu_ns: u64, limit: std::time::Duration) -> u64 {
        let start = std::time::Instant::now();
        let before = this_thread_cpu_ns().unwrap();
        loop {
            let spent = this_thread_cpu_ns().unwrap() - before;
            if spent >= cpu_ns || start.elapsed() >= limit {
                return spent;
            }
            for _ in 0..1_000 {
                std::hint::black_box(0u64);
            }
        }
    }

    /// Generous: even on a loaded CI machine a spinning thread gets 50 ms of CPU in far less.
    const SPIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

    #[test]
    fn a_busy_named_thread_shows_cpu_time() {
        let before = thread_times();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::Builder::new()
            .name("probe-busy-1".into())
            .spawn(move || {
                tx.send(spin_for_cpu(50_000_000, SPIN_LIMIT)).unwrap();
                done_rx.recv().unwrap();
            })
            .unwrap();
        let spent = rx.recv().unwrap();
        let after = thread_times();
        done_tx.send(()).unwrap();
        worker.join().unwrap();
        assert!(spent >= 50_000_000, "the worker got {spent} ns of CPU");
        // The worker may still run between its send and its recv, and its schedstat lags a
        // running thread by up to a scheduler tick (10 ms at most): hence 20 of the 50 ms.
        let busy = after.since(&before, "probe-busy-");
        assert!(busy >= 20_000_000, "{busy} ns");
        assert_eq!(after.since(&before, "no-such-thread"), 0);
        assert_eq!(after.sleeps_since(&before, "no-such-thread"), Some(0));
    }

    #[test]
    fn a_sleeping_named_thread_shows_its_sleeps() {
        let before = thread_times();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::Builder::new()
            .name("probe-sleepy-1".into())
            .spawn(move || {
                for _ in 0..20 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                tx.send(()).unwrap();
                done_rx.recv().unwrap();
            })
            .unwrap();
        rx.recv().unwrap();
        let after = thread_times();
        done_tx.send(()).unwrap();
        sleeper.join().unwrap();
        // Twenty sleeps, and perhaps a wait for the channel's lock; never fewer.
        let sleeps = after.sleeps_since(&before, "probe-sleepy-").unwrap();
        assert!((20..40).contains(&sleeps), "{sleeps} sleeps");
    }

    #[test]
    fn this_thread_figures_are_read() {
        // The thread's CPU clock moves while it spins, and not faster than the wall clock around
        // it (a wrong unit would break one or the other); the tenth and the millisecond allow
        // for the two clocks' sources disagreeing slightly.
        let wall = std::time::Instant::now();
        let before = this_thread_cpu_ns().unwrap();
        let spent = spin_for_cpu(10_000_000, SPIN_LIMIT);
        let after = this_thread_cpu_ns().unwrap();
        let elapsed = wall.elapsed().as_nanos() as u64;
        assert!(spent >= 10_000_000, "{spent} ns of CPU in {elapsed} ns");
        assert!(
            after - before <= elapsed + elapsed / 10 + 1_000_000,
            "{before} -> {after}: more CPU than the {elapsed} ns of wall time"
        );
        let mut schedstat = ThreadSchedstat::open();
        let (run, _wait) = schedstat.read().unwrap();
        assert!(run > 0);
        // The file stays open and reads afresh: this thread's CPU time moves on (the yield
        // brings the figure up to date).
        spin_for_cpu(20_000_000, SPIN_LIMIT);
        std::thread::yield_now();
        let (later, _) = schedstat.read().unwrap();
        assert!(later > run, "{run} -> {later}");
        // Steal time is a machine figure: present on Linux, possibly zero.
        assert!(steal_ns().is_some());
    }

    /// A few hundred microseconds of work between two reads, with no tick or switch in
    /// between, is what the bench's quick runs ask of the producer's figure. A spell the host
    /// or another thread interrupts reads less, so the bound is on the median.
    #[test]
    fn a_short_busy_spell_of_this_thread_is_counted() {
        let mut spells: Vec<u64> = (0..51)
            .map(|_| {
                let before = this_thread_cpu_ns().unwrap();
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_micros(300) {
                    std::hint::black_box(0u64);
                }
                this_thread_cpu_ns().unwrap() - before
            })
            .collect();
        assert!(spells.iter().all(|&ns| ns > 0), "{spells:?}");
        spells.sort_unstable();
        assert!(
            spells[25] >= 250_000,
            "300 µs busy spells read {spells:?} ns"
        );
    }
}
