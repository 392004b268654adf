//! The host stall probe: one watcher thread per vCPU that sleeps to every 250 µs boundary while
//! a round is measured and notes how late its timer woke it.
//!
//! On a VM the hypervisor stops a vCPU now and then (on this project's VM for up to 7–8 ms, a
//! few times a second). Every thread on that vCPU stops with it, so a timer service's callbacks
//! start late by as much, through no fault of the service. A watcher pinned to a vCPU asks for
//! a timer interrupt every 250 µs; a wake-up is late either because the interrupt itself came
//! late (the vCPU was not running: the host stopped it, or the guest kernel held interrupts
//! off) or because the guest kernel ran other threads first. The watcher tells them apart by
//! its own `schedstat` run-queue wait: the part of a late wake-up spent waiting for the CPU is
//! the guest's scheduling, the rest is a stall of the vCPU. A watcher runs at the lowest
//! real-time priority where the kernel allows it ([`make_realtime`]), so that it seldom waits:
//! a stall that comes while it waits is booked as the wait, and goes unseen.
//!
//! Why sleeping watchers and not a thread that spins on the clock: a spinner sees a stall only
//! while it runs. Under `SCHED_IDLE` it runs only on an idle CPU, so it is blind exactly when
//! the bench keeps every vCPU busy (a scheduling burst); at normal priority it takes a CPU from
//! the service. And a spinner keeps its vCPU from ever going idle, which on this project's VM
//! brings on stalls of its own: with both vCPUs busy the host stops the VM for about 5 ms at a
//! fixed phase of a 100 ms period (`docs/performance.md`, "How the probe sees the host"). A watcher wakes,
//! reads the clock and its schedstat, and sleeps again: a few microseconds every 250 µs. A
//! stall shorter than 250 µs can fall between two wake-ups, and a longer one reads up to 250
//! µs short (the wake-up measures from the boundary, not from the stall's start): what the
//! probe reports as the longest stall is a lower bound.
//!
//! Beside the watchers a second thread, the sleeper, sleeps to every millisecond boundary at
//! normal priority, as a timer service's threads do, and notes how late it wakes. A host stall
//! delays it too, but so does the guest kernel when every CPU is busy with the bench's and the
//! service's threads: its lateness is what any thread that sleeps until a deadline meets on
//! this machine under this load, the floor under a timer service's own lateness.
//!
//! A timer service whose timer thread hands due callbacks to other threads (wheel's tick
//! threads and workers, Netty's worker and its executor) meets that floor twice: the timer
//! thread wakes late, then the thread it wakes does. So the sleeper hands each boundary it woke
//! for to a third thread, the relay, which sleeps on a channel and notes how late it got the
//! boundary: the floor of a two-hop design on this machine under this load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use core_affinity::CoreId;
use serde::{Deserialize, Serialize};

use crate::host::proc;

/// Gaps longer than this are stalls (counted and added up); shorter ones only count towards
/// the longest gap. 200 µs is far above the loop's own step (tens of ns) and an interrupt's
/// handling, and far below a tick.
pub const STALL_THRESHOLD: Duration = Duration::from_micros(200);

/// The window over which stalls of one vCPU are added up for [`HostStalls::worst_10ms_ns`]:
/// stalls that come two or three in a row hold a timer up together, as one longer stall would.
pub const STALL_WINDOW: Duration = Duration::from_millis(10);

/// What the probe saw during one measured round (results.json: `host_stalls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStalls {
    /// How long the probe watched.
    pub observed_ns: u64,
    /// The longest stall of any vCPU: the latest a watcher woke, less the part of it the
    /// watcher spent waiting for its CPU while the guest kernel ran other threads.
    pub longest_ns: u64,
    /// Stalls: late wake-ups whose vCPU-stopped part was over 200 µs (all vCPUs together).
    pub gaps_over_200us: u64,
    /// Time lost in those stalls (their vCPU-stopped parts, added up over the vCPUs).
    pub lost_ns: u64,
    /// The most stall time of one vCPU within any [`STALL_WINDOW`] (the stalls over 200 µs
    /// that ended in it, added up): what a thread on that vCPU lost in its worst 10 ms, which
    /// is more than [`HostStalls::longest_ns`] when stalls come in a row (0 in results written
    /// before).
    #[serde(default)]
    pub worst_10ms_ns: u64,
    /// Wake-ups over 200 µs late that were the guest's own scheduling (the watcher waited for
    /// its CPU while other threads, mostly the bench's, ran): not stalls.
    pub preempted_gaps: u64,
    /// Time the watchers waited for their CPUs during those wake-ups.
    pub preempted_ns: u64,
    /// Steal time of all CPUs over the round (/proc/stat, 10 ms resolution), where the kernel
    /// reports it: the hypervisor's own count of time a vCPU wanted to run and did not.
    pub steal_ns: Option<u64>,
    /// vCPUs watched, one watcher pinned to each CPU the process may run on (0 in results
    /// written before the watchers, when one spinning thread watched whichever CPU it ran on).
    #[serde(default)]
    pub watched_cpus: u64,
    /// Watchers that ran at real-time priority (`SCHED_FIFO` 1), and so never waited behind
    /// the bench's or the service's threads: a host stall that came while one of those held
    /// the CPU is then a late wake-up of the watcher's, not a run-queue wait (0 where the
    /// kernel refused, or in results written before).
    #[serde(default)]
    pub realtime_watchers: u64,
    /// The sleeper's wake-ups over the round (one per millisecond; 0: no sleeper ran).
    #[serde(default)]
    pub sleeper_wakes: u64,
    /// How late the sleeper woke: the 99.9th percentile of its wake-ups.
    #[serde(default)]
    pub sleeper_p999_ns: u64,
    /// How late the sleeper woke at most.
    #[serde(default)]
    pub sleeper_max_ns: u64,
    /// How late the relay got the sleeper's boundaries (timer wake-up, then a thread woken by
    /// it): the 99.9th percentile.
    #[serde(default)]
    pub relay_p999_ns: u64,
    /// How late the relay got a boundary at most.
    #[serde(default)]
    pub relay_max_ns: u64,
}

/// How late the sleeper woke, one figure per wake-up; pure, so it can be fed synthetic ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WakeTally {
    late_ns: Vec<u64>,
}

impl WakeTally {
    /// One wake-up, `late_ns` after the boundary it slept to.
    pub fn woke(&mut self, late_ns: u64) {
        self.late_ns.push(late_ns);
    }

    /// (wake-ups, 99.9th percentile, most), the percentile as the nearest rank.
    pub fn figures(mut self) -> (u64, u64, u64) {
        let wakes = self.late_ns.len();
        if wakes == 0 {
            return (0, 0, 0);
        }
        self.late_ns.sort_unstable();
        let rank = (wakes * 999).div_ceil(1000).max(1);
        (
            wakes as u64,
            self.late_ns[rank - 1],
            self.late_ns[wakes - 1],
        )
    }
}

/// Adds up late wake-ups (or, fed so, gaps between clock reads); pure, so it can be fed
/// synthetic ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StallTally {
    longest_ns: u64,
    gaps: u64,
    lost_ns: u64,
    preempted_gaps: u64,
    preempted_ns: u64,
    /// The stalls that ended within the last [`STALL_WINDOW`]: (when it ended, its length).
    recent: VecDeque<(u64, u64)>,
    /// Their total, and the most it has been.
    recent_ns: u64,
    worst_window_ns: u64,
}

impl StallTally {
    /// One wake-up at `at_ns` (monotonic), `gap_ns` late (or one gap between two clock reads
    /// ending then), `waited_ns` of which the watcher spent runnable but waiting for its CPU.
    pub fn gap(&mut self, at_ns: u64, gap_ns: u64, waited_ns: u64) {
        let waited = waited_ns.min(gap_ns);
        let stopped = gap_ns - waited;
        self.longest_ns = self.longest_ns.max(stopped);
        if gap_ns <= threshold_ns() {
            return;
        }
        self.preempted_ns += waited;
        if stopped > threshold_ns() {
            self.gaps += 1;
            self.lost_ns += stopped;
            self.in_window(at_ns, stopped);
        } else {
            self.preempted_gaps += 1;
        }
    }

    /// Adds a stall of `stopped_ns` that ended at `at_ns` to the window of those that ended
    /// within [`STALL_WINDOW`] before it, and notes the window's total.
    fn in_window(&mut self, at_ns: u64, stopped_ns: u64) {
        let window = STALL_WINDOW.as_nanos() as u64;
        while let Some(&(ended, stopped)) = self.recent.front() {
            if ended + window > at_ns {
                break;
            }
            self.recent.pop_front();
            self.recent_ns -= stopped;
        }
        self.recent.push_back((at_ns, stopped_ns));
        self.recent_ns += stopped_ns;
        self.worst_window_ns = self.worst_window_ns.max(self.recent_ns);
    }

    /// Adds up another watcher's tally: the longest of both, the worst window of either (each
    /// watcher's vCPU stalls on its own), the sums of the rest.
    pub fn merge(&mut self, other: &StallTally) {
        self.longest_ns = self.longest_ns.max(other.longest_ns);
        self.worst_window_ns = self.worst_window_ns.max(other.worst_window_ns);
        self.gaps += other.gaps;
        self.lost_ns += other.lost_ns;
        self.preempted_gaps += other.preempted_gaps;
        self.preempted_ns += other.preempted_ns;
    }

    /// The figures, for `observed_ns` of watching.
    pub fn figures(&self, observed_ns: u64, steal_ns: Option<u64>) -> HostStalls {
        HostStalls {
            observed_ns,
            longest_ns: self.longest_ns,
            gaps_over_200us: self.gaps,
            lost_ns: self.lost_ns,
            worst_10ms_ns: self.worst_window_ns,
            preempted_gaps: self.preempted_gaps,
            preempted_ns: self.preempted_ns,
            steal_ns,
            ..HostStalls::default()
        }
    }
}

fn threshold_ns() -> u64 {
    STALL_THRESHOLD.as_nanos() as u64
}

/// How often each watcher wakes: a stall shorter than this can fall between two wake-ups, and
/// a longer one reads up to this much short.
pub const WATCH_EVERY: Duration = Duration::from_micros(250);

/// A running probe; [`StallProbe::finish`] stops it and returns what it saw.
pub struct StallProbe {
    stop: Arc<AtomicBool>,
    /// How many watchers got real-time priority.
    realtime: Arc<AtomicU64>,
    started: Instant,
    watchers: Vec<JoinHandle<StallTally>>,
    sleeper: JoinHandle<()>,
    relay: JoinHandle<(WakeTally, WakeTally)>,
    steal_before: Option<u64>,
}

impl StallProbe {
    /// Starts a watcher (`bench-watch-N`) on each CPU this process may run on, the sleeper
    /// (`bench-sleeper`) and its relay (`bench-relay`), until [`StallProbe::finish`].
    pub fn start() -> StallProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let realtime = Arc::new(AtomicU64::new(0));
        let steal_before = proc::steal_ns();
        let watchers = watched_cpus()
            .into_iter()
            .map(|cpu| {
                let (flag, realtime) = (Arc::clone(&stop), Arc::clone(&realtime));
                std::thread::Builder::new()
                    .name(format!("bench-watch-{}", cpu.id))
                    .spawn(move || watch(cpu, &flag, &realtime))
                    .expect("spawn a stall watcher")
            })
            .collect();
        let flag = Arc::clone(&stop);
        let (hand, handed) = std::sync::mpsc::channel();
        let sleeper = std::thread::Builder::new()
            .name("bench-sleeper".into())
            .spawn(move || sleep_to_each_millisecond(&flag, &hand))
            .expect("spawn the sleeper thread");
        let relay = std::thread::Builder::new()
            .name("bench-relay".into())
            .spawn(move || relay(&handed))
            .expect("spawn the relay thread");
        StallProbe {
            stop,
            realtime,
            started: Instant::now(),
            watchers,
            sleeper,
            relay,
            steal_before,
        }
    }

    /// Stops the probe and returns its figures.
    pub fn finish(self) -> HostStalls {
        self.stop.store(true, Ordering::Relaxed);
        let observed_ns = self.started.elapsed().as_nanos() as u64;
        let watched_cpus = self.watchers.len() as u64;
        let mut tally = StallTally::default();
        for watcher in self.watchers {
            tally.merge(&watcher.join().expect("a stall watcher panicked"));
        }
        self.sleeper.join().expect("the sleeper panicked");
        let (slept, relayed) = self.relay.join().expect("the relay panicked");
        let (sleeper_wakes, sleeper_p999_ns, sleeper_max_ns) = slept.figures();
        let (_, relay_p999_ns, relay_max_ns) = relayed.figures();
        let steal = self
            .steal_before
            .zip(proc::steal_ns())
            .map(|(before, after)| after.saturating_sub(before));
        HostStalls {
            watched_cpus,
            realtime_watchers: self.realtime.load(Ordering::Relaxed),
            sleeper_wakes,
            sleeper_p999_ns,
            sleeper_max_ns,
            relay_p999_ns,
            relay_max_ns,
            ..tally.figures(observed_ns, steal)
        }
    }
}

/// A watcher's loop: pinned to `cpu`, sleeps to each [`WATCH_EVERY`] boundary of the monotonic
/// clock and notes how late it woke and how much of that it waited for the CPU, until told to
/// stop.
fn watch(cpu: CoreId, stop: &AtomicBool, realtime: &AtomicU64) -> StallTally {
    // Left unpinned where the kernel refuses: the watcher then watches whichever CPU it runs on.
    core_affinity::set_for_current(cpu);
    exact_timers();
    if make_realtime() {
        realtime.fetch_add(1, Ordering::Relaxed);
    }
    let step = WATCH_EVERY.as_nanos() as u64;
    let mut schedstat = proc::ThreadSchedstat::open();
    let mut waited_before = schedstat.wait_ns();
    let mut tally = StallTally::default();
    let mut boundary = (monotonic_ns() / step + 1) * step;
    while !stop.load(Ordering::Relaxed) {
        sleep_until(boundary);
        let now = monotonic_ns();
        let waited_now = schedstat.wait_ns();
        tally.gap(
            now,
            now.saturating_sub(boundary),
            waited_now.saturating_sub(waited_before),
        );
        waited_before = waited_now;
        // The next boundary still ahead: a stall that spans several boundaries is one late
        // wake-up, not several.
        boundary = (monotonic_ns() / step + 1) * step;
    }
    tally
}

/// Moves the calling watcher to `SCHED_FIFO` at the lowest real-time priority, where the
/// kernel allows it (root, `CAP_SYS_NICE` or `RLIMIT_RTPRIO`); returns whether it did.
///
/// Why: a watcher at normal priority that wakes while the bench's or the service's threads
/// hold its CPU waits for them, and its `schedstat` books the whole wait as the guest's
/// scheduling. A host stall that comes during such a wait is then not counted as one: with
/// both vCPUs busy the probe reported a longest stall of 1.6 ms in a round whose tail was one
/// tick 35 ms late, and a scheduler trace of another round showed 42 ms with no event on
/// either vCPU (`docs/performance.md`, "How the probe sees the host"). A real-time watcher takes its CPU
/// as soon as it wakes, so its lateness is the vCPU's. It runs a few microseconds every
/// [`WATCH_EVERY`], as before.
fn make_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid `sched_param` for the call to read; pid 0 is this thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// The CPUs this process may run on (its affinity mask), one watcher each; CPU 0 alone where
/// the mask cannot be read.
fn watched_cpus() -> Vec<CoreId> {
    core_affinity::get_core_ids()
        .filter(|ids| !ids.is_empty())
        .unwrap_or_else(|| vec![CoreId { id: 0 }])
}

/// Asks the kernel to fire this thread's sleep timers on time: the default slack (50 µs) lets
/// it batch wake-ups, which would read as lateness.
fn exact_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and touches only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// The sleeper's loop: sleep to the next millisecond boundary of the monotonic clock (an
/// absolute sleep, so the time spent handing one wake-up on does not shift the next), hand the
/// boundary and the time it woke to the relay, until told to stop.
fn sleep_to_each_millisecond(stop: &AtomicBool, relay: &Sender<(u64, u64)>) {
    const MS: u64 = 1_000_000;
    let mut boundary = (monotonic_ns() / MS + 1) * MS;
    while !stop.load(Ordering::Relaxed) {
        sleep_until(boundary);
        let now = monotonic_ns();
        if relay.send((boundary, now)).is_err() {
            return;
        }
        // The next boundary still ahead: a wake-up later than a whole millisecond skips the
        // boundaries it overslept instead of counting them as late again.
        boundary = (now / MS + 1) * MS;
    }
}

/// The relay's loop: takes each boundary the sleeper woke for as it comes (asleep on the
/// channel in between, as a worker waits for due callbacks) and notes how late the sleeper
/// woke and how late the boundary reached the relay, until the sleeper stops.
fn relay(handed: &Receiver<(u64, u64)>) -> (WakeTally, WakeTally) {
    let (mut slept, mut relayed) = (WakeTally::default(), WakeTally::default());
    while let Ok((boundary, woke)) = handed.recv() {
        let now = monotonic_ns();
        slept.woke(woke.saturating_sub(boundary));
        relayed.woke(now.saturating_sub(boundary));
    }
    (slept, relayed)
}

/// `CLOCK_MONOTONIC` in nanoseconds (what `Instant` reads on Linux).
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write, and the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Sleeps until `CLOCK_MONOTONIC` reads `deadline_ns` (returns early only on a signal).
fn sleep_until(deadline_ns: u64) {
    let deadline = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `deadline` is a valid timespec; the remaining time is not asked for.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &deadline,
            std::ptr::null_mut(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    /// Feeds clock reads (ns) with the run-queue wait read after each, as a watcher does.
    fn tally_of(reads: &[(u64, u64)]) -> StallTally {
        let mut tally = StallTally::default();
        for pair in reads.windows(2) {
            let ((t0, w0), (t1, w1)) = (pair[0], pair[1]);
            tally.gap(t1, t1 - t0, w1 - w0);
        }
        tally
    }

    #[test]
    fn small_gaps_only_set_the_longest() {
        let tally = tally_of(&[(0, 0), (50, 0), (150 * US, 0), (160 * US, 0)]);
        let figures = tally.figures(160 * US, None);
        assert_eq!(figures.longest_ns, 150 * US - 50);
        assert_eq!((figures.gaps_over_200us, figures.lost_ns), (0, 0));
        assert_eq!((figures.preempted_gaps, figures.preempted_ns), (0, 0));
    }

    #[test]
    fn host_stalls_are_counted_and_added_up() {
        // Two stalls of 7 ms and 300 µs with no run-queue wait; one gap of exactly 200 µs
        // (not over the threshold).
        let reads = [
            (0, 0),
            (7 * MS, 0),
            (7 * MS + 10, 0),
            (7 * MS + 10 + 300 * US, 0),
            (7 * MS + 10 + 500 * US, 0),
        ];
        let figures = tally_of(&reads).figures(8 * MS, Some(10 * MS));
        assert_eq!(figures.longest_ns, 7 * MS);
        assert_eq!(figures.gaps_over_200us, 2);
        assert_eq!(figures.lost_ns, 7 * MS + 300 * US);
        assert_eq!(figures.preempted_gaps, 0);
        assert_eq!(figures.steal_ns, Some(10 * MS));
    }

    #[test]
    fn guest_preemption_is_not_a_host_stall() {
        // A 4 ms gap the probe spent waiting on the run queue: the guest ran someone else.
        // Then a 3 ms gap of which 1 ms was waiting: a 2 ms host stall.
        let reads = [(0, 0), (4 * MS, 4 * MS), (7 * MS, 5 * MS)];
        let figures = tally_of(&reads).figures(7 * MS, None);
        assert_eq!(figures.longest_ns, 2 * MS);
        assert_eq!((figures.gaps_over_200us, figures.lost_ns), (1, 2 * MS));
        assert_eq!(figures.preempted_gaps, 1);
        assert_eq!(figures.preempted_ns, 5 * MS);
    }

    #[test]
    fn watchers_tallies_add_up_with_the_longest_of_all() {
        let mut first = tally_of(&[(0, 0), (3 * MS, 0)]);
        let second = tally_of(&[(0, 0), (MS, 0), (2 * MS, MS)]);
        first.merge(&second);
        let figures = first.figures(3 * MS, None);
        assert_eq!(figures.longest_ns, 3 * MS);
        assert_eq!((figures.gaps_over_200us, figures.lost_ns), (2, 4 * MS));
        assert_eq!((figures.preempted_gaps, figures.preempted_ns), (1, MS));
    }

    /// Stalls that end within 10 ms of each other add up in the worst window; one that ends
    /// later starts a window of its own; a preempted wait adds nothing; each vCPU's windows
    /// are its own.
    #[test]
    fn stalls_in_a_row_add_up_in_the_worst_window() {
        let mut tally = StallTally::default();
        tally.gap(10 * MS, 3 * MS, 0);
        tally.gap(15 * MS, 2 * MS, 0); // ends 5 ms after the first: 5 ms in one window
        tally.gap(20 * MS, 4 * MS, 4 * MS); // the guest's scheduling, not a stall
        tally.gap(40 * MS, 4 * MS, 0); // alone
        let figures = tally.figures(40 * MS, None);
        assert_eq!(
            (figures.longest_ns, figures.worst_10ms_ns),
            (4 * MS, 5 * MS)
        );
        let mut other = StallTally::default();
        other.gap(4 * MS, 4 * MS, 0);
        other.gap(9 * MS, 5 * MS, 0);
        other.gap(15 * MS, 6 * MS, 0); // the first ended 11 ms before: out of the window
        tally.merge(&other);
        let figures = tally.figures(40 * MS, None);
        assert_eq!(
            (figures.longest_ns, figures.worst_10ms_ns),
            (6 * MS, 11 * MS)
        );
    }

    #[test]
    fn wait_beyond_the_gap_is_clamped() {
        // Run-queue wait is read after the gap, so it can include waits before it.
        let mut tally = StallTally::default();
        tally.gap(MS, MS, 3 * MS);
        let figures = tally.figures(MS, None);
        assert_eq!((figures.longest_ns, figures.gaps_over_200us), (0, 0));
        assert_eq!((figures.preempted_gaps, figures.preempted_ns), (1, MS));
    }

    #[test]
    fn the_sleepers_figures_are_its_tail() {
        assert_eq!(WakeTally::default().figures(), (0, 0, 0));
        let mut tally = WakeTally::default();
        // 2000 wake-ups: 1996 at 50 µs, then 2, 3, 4 and 9 ms late.
        (0..1996).for_each(|_| tally.woke(50 * US));
        [2 * MS, 3 * MS, 4 * MS, 9 * MS]
            .into_iter()
            .for_each(|late| tally.woke(late));
        // The 99.9th percentile of 2000 is the 1998th smallest.
        assert_eq!(tally.figures(), (2000, 3 * MS, 9 * MS));
    }

    #[test]
    fn the_probe_runs_and_stops() {
        let probe = StallProbe::start();
        std::thread::sleep(Duration::from_millis(30));
        let figures = probe.finish();
        assert!(figures.observed_ns >= 20 * MS, "{figures:?}");
        assert_eq!(
            figures.watched_cpus as usize,
            watched_cpus().len(),
            "one watcher per CPU"
        );
        assert!(figures.lost_ns <= figures.observed_ns);
        assert!(
            figures.realtime_watchers <= figures.watched_cpus,
            "{figures:?}"
        );
        assert!(figures.sleeper_wakes >= 5, "{figures:?}");
        assert!(figures.sleeper_p999_ns <= figures.sleeper_max_ns);
        // Each boundary reaches the relay after the sleeper woke for it, so the relay's order
        // statistics are at least the sleeper's.
        assert!(
            figures.sleeper_p999_ns <= figures.relay_p999_ns,
            "{figures:?}"
        );
        assert!(
            figures.sleeper_max_ns <= figures.relay_max_ns,
            "{figures:?}"
        );
        assert!(figures.relay_p999_ns <= figures.relay_max_ns);
    }
}
