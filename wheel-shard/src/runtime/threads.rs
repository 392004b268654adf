//! [`Handle`]: a running service's threads, from their start to their stop and join.
//!
//! `TimerService::new` starts them here: the core and the wheels are built first (everything
//! the config sizes is allocated before any thread starts), then the tick threads
//! (`wheel-tick-N`) and the workers (`wheel-exec-N`). `shutdown` and `shutdown_timeout` stop
//! them here too: the rings close, the tick threads stop and are joined, the executor
//! finishes what it was handed (or, past a deadline, is abandoned), and the pass over the
//! records (`runtime/hand_back.rs`) hands back every timer that had not fired. The drop of
//! the last `TimerService` clone drops the `Handle`, which shuts down the same way.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::contain::drop_contained;
use crate::error::ConfigError;
use crate::runtime::core::{Core, ThreadGuard, ThreadKind};
use crate::runtime::hand_back::{hand_back_abandoned, hand_back_pending};
use crate::runtime::pinning;
use crate::runtime::priority;
use crate::runtime::tick::ShardTick;
use crate::runtime::tick_thread::TickThread;
use crate::runtime::worker;
use crate::shard::{Shard, ShardWheel};
use crate::shutdown::{RunningCallback, ShutdownReport};
use crate::sync;
use crate::timer::{TimerId, Unfired};
use crate::Config;

/// Owns the threads; its drop (the last `TimerService` clone going away) shuts down.
pub(crate) struct Handle {
    pub(crate) core: Arc<Core>,
    /// Taken by the first `shutdown`, which joins them without holding the lock, so a
    /// callback's `shutdown` never waits on a lock its own shutdown holds.
    threads: Mutex<Option<Threads>>,
    /// Set when the first `shutdown` has finished; later callers outside the service wait
    /// for it.
    stopped: Mutex<bool>,
    stopped_signal: Condvar,
    /// Threads a `shutdown_timeout` stopped waiting for (a callback still running), not yet
    /// joined. A later `shutdown` from outside the service waits for them and joins them, a
    /// later `shutdown_timeout` as long as its own timeout allows; the drop of the last handle
    /// joins those that have finished and detaches the rest, never waiting: each holds the
    /// core, which goes with the last of them once its callback returns.
    stragglers: Mutex<Vec<JoinHandle<()>>>,
}

struct Threads {
    ticks: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Handle {
    /// Validates `config`, builds the core and the wheels, and starts the threads.
    pub(crate) fn start(config: Config, clock: Clock) -> Result<Handle, ConfigError> {
        config.validate()?;
        crate::memory::check(&config)?;
        let core = Core::new(config, clock)?;
        let wheels = (0..core.shards.len())
            .map(|_| ShardTick::wheel(&core))
            .collect::<Result<Vec<_>, _>>()?;
        let core = Arc::new(core);
        let mut threads = Threads {
            ticks: Vec::new(),
            workers: Vec::new(),
        };
        let started = spawn_threads(&core, wheels, &mut threads);
        let handle = Handle {
            core,
            threads: Mutex::new(Some(threads)),
            stopped: Mutex::new(false),
            stopped_signal: Condvar::new(),
            stragglers: Mutex::new(Vec::new()),
        };
        started.map_err(|source| ConfigError::Spawn { source })?;
        Ok(handle)
    }

    /// `TimerService::shutdown`; with `wait_for_stragglers`, a later call from outside the
    /// service also waits for the threads a `shutdown_timeout` left running (the drop of the
    /// last handle does not).
    pub(crate) fn shutdown(&self, wait_for_stragglers: bool) -> Vec<Unfired> {
        let Some(threads) = self.take_threads() else {
            // Another call is shutting down or has. A service thread must not wait for it: that
            // call may be joining this very thread.
            if !self.core.is_own_thread() {
                self.wait_until_stopped(None);
                if wait_for_stragglers {
                    self.wait_for_stragglers(None);
                }
            }
            return Vec::new();
        };
        let unfired = self.stop(threads);
        self.mark_stopped();
        unfired
    }

    /// `TimerService::shutdown_timeout`.
    pub(crate) fn shutdown_timeout(&self, timeout: Duration) -> ShutdownReport {
        let deadline = Instant::now().checked_add(timeout);
        let Some(threads) = self.take_threads() else {
            // As in `shutdown`, but waiting at most until the deadline.
            if !self.core.is_own_thread() && self.wait_until_stopped(deadline) {
                self.wait_for_stragglers(deadline);
            }
            return ShutdownReport {
                unfired: Vec::new(),
                still_running: self.running_callbacks(),
            };
        };
        let report = match deadline {
            Some(deadline) => self.stop_by(threads, deadline),
            None => ShutdownReport {
                unfired: self.stop(threads),
                still_running: Vec::new(),
            },
        };
        self.mark_stopped();
        report
    }

    /// The threads, for the first shutdown call; `None` for any later one.
    fn take_threads(&self) -> Option<Threads> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Tells later shutdown calls that the first one is done.
    fn mark_stopped(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stopped_signal.notify_all();
    }

    /// Waits until the first shutdown call is done, or until `deadline` (`None`: none);
    /// whether it is done.
    fn wait_until_stopped(&self, deadline: Option<Instant>) -> bool {
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            let Some(deadline) = deadline else {
                stopped = self
                    .stopped_signal
                    .wait(stopped)
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return false;
            }
            stopped = self
                .stopped_signal
                .wait_timeout(stopped, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Closes the service to new timers and moves and tells the tick threads to stop.
    fn close(&self) {
        let core = &self.core;
        core.closed.store(true, Ordering::SeqCst);
        for shard in core.shards.iter() {
            shard.close_rings();
            shard.stop.store(true, Ordering::SeqCst);
            shard.wake();
        }
        if core.shards.iter().any(Shard::has_lane) {
            // Every lane push is now visible, or its holder sees the lane closed and takes its
            // timer back (`shard/lane.rs`), before the records are read below.
            sync::heavy_barrier();
        }
    }

    /// Stops and joins every thread but the calling one, and collects the unfired timers.
    fn stop(&self, threads: Threads) -> Vec<Unfired> {
        let core = &self.core;
        self.close();
        for tick in threads.ticks {
            join_unless_current(tick);
        }
        core.executor.stop();
        for worker in threads.workers {
            join_unless_current(worker);
        }
        // Last, by the records: every timer still pending, wherever its references are (see
        // `runtime/hand_back.rs`).
        let mut unfired = Vec::new();
        // One allocation for the whole list; where the allocator refuses it, the list grows.
        let _ = unfired.try_reserve_exact(core.pending());
        for shard in core.shards.iter() {
            hand_back_pending(core, shard, &mut unfired);
        }
        core.collected.store(true, Ordering::SeqCst);
        unfired
    }

    /// [`Handle::stop`] that waits for the threads only until `deadline`: then the executor is
    /// abandoned (no worker starts another callback), the pass over the records takes back
    /// every timer still pending and makes every repeating run in progress its timer's last
    /// (`runtime/hand_back.rs`), the callbacks still running are read off their workers, and
    /// the threads that have not finished are kept as stragglers.
    fn stop_by(&self, threads: Threads, deadline: Instant) -> ShutdownReport {
        let core = &self.core;
        self.close();
        // Called from a callback, the calling worker is not waited for (it cannot finish).
        let own = core.own_worker();
        // The tick threads first, as in `stop`: what they hand out on their way is the
        // executor's to run.
        core.exits
            .wait_until(Some(deadline), |live| live.ticks == 0);
        core.executor.stop();
        let others = usize::from(own.is_some());
        core.exits
            .wait_until(Some(deadline), |live| live.workers <= others);
        // Whoever is still running, no callback starts from here on; what they queued or hold
        // is pending in its record, and the pass takes it.
        core.executor.abandon();
        let mut unfired = Vec::new();
        let _ = unfired.try_reserve_exact(core.pending());
        for shard in core.shards.iter() {
            hand_back_abandoned(core, shard, &mut unfired);
        }
        core.collected.store(true, Ordering::SeqCst);
        let still_running = self.running_callbacks();
        let stragglers = self.join_finished(threads.ticks.into_iter().chain(threads.workers));
        self.stragglers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(stragglers);
        ShutdownReport {
            unfired,
            still_running,
        }
    }

    /// The callbacks the workers run now, longest-running first, but the calling callback's.
    fn running_callbacks(&self) -> Vec<RunningCallback> {
        let core = &self.core;
        let own = core.own_worker();
        let now = core.clock.real_nanos();
        let mut running: Vec<RunningCallback> = core
            .executor
            .workers
            .iter()
            .enumerate()
            .filter(|&(index, _)| Some(index) != own)
            .filter_map(|(_, worker)| worker.current_run())
            .map(|(slot, shard_gen, since)| RunningCallback {
                id: TimerId::from_parts(core.tag, slot, shard_gen),
                running_for: Duration::from_nanos(now.saturating_sub(since)),
            })
            .collect();
        running.sort_by_key(|run| std::cmp::Reverse(run.running_for));
        running
    }

    /// Joins the threads of `handles` that have finished, or have left their bodies and
    /// finish within [`TEARDOWN`] (together), and returns the others. The calling thread's
    /// own handle is dropped: it finishes on its own once the call returns.
    fn join_finished(&self, handles: impl Iterator<Item = JoinHandle<()>>) -> Vec<JoinHandle<()>> {
        let me = thread::current().id();
        let teardown_until = Instant::now() + TEARDOWN;
        let mut running = Vec::new();
        for handle in handles {
            if handle.thread().id() == me {
                continue;
            }
            if self.finishes_by(&handle, teardown_until) {
                join_unless_current(handle);
            } else {
                running.push(handle);
            }
        }
        running
    }

    /// Whether `handle`'s thread has finished, or has left its body (only its teardown is
    /// left: its thread-locals' destructors) and finishes by `until`.
    fn finishes_by(&self, handle: &JoinHandle<()>, until: Instant) -> bool {
        if handle.is_finished() {
            return true;
        }
        if !self.core.exits.has_left(handle.thread().id()) {
            return false;
        }
        while !handle.is_finished() {
            if Instant::now() >= until {
                return false;
            }
            thread::yield_now();
        }
        true
    }

    /// Joins the stragglers a `shutdown_timeout` left (see [`Handle::stragglers`]) as they
    /// finish, until none is left (`true`) or `deadline` passes (`None`: no deadline).
    fn wait_for_stragglers(&self, deadline: Option<Instant>) -> bool {
        loop {
            let waiting: Vec<thread::ThreadId> = {
                let mut stragglers = self.stragglers.lock().unwrap_or_else(|e| e.into_inner());
                let (finished, waiting): (Vec<_>, Vec<_>) =
                    stragglers.drain(..).partition(JoinHandle::is_finished);
                *stragglers = waiting;
                finished.into_iter().for_each(|handle| {
                    join_unless_current(handle);
                });
                stragglers.iter().map(|h| h.thread().id()).collect()
            };
            if waiting.is_empty() {
                return true;
            }
            let exits = &self.core.exits;
            let left = exits.wait_until(deadline, |live| {
                waiting.iter().all(|id| live.left.contains(id))
            });
            if !left || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
            }
            // They have left their bodies: only their teardown is left.
            thread::yield_now();
        }
    }

    /// At the drop of the last handle: joins the stragglers that have finished and detaches
    /// the others, without waiting for any.
    fn release_stragglers(&self) {
        let stragglers =
            std::mem::take(&mut *self.stragglers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in stragglers {
            if handle.is_finished() {
                join_unless_current(handle);
            }
        }
    }
}

/// How long a bounded shutdown gives the threads that have left their bodies to finish
/// (their thread-locals' destructors), all together, before it leaves them to a later join.
const TEARDOWN: Duration = Duration::from_millis(20);

/// Joins `handle`, unless it is the calling thread (a callback that dropped the last handle or
/// called `shutdown` itself): that thread finishes on its own once the call returns.
fn join_unless_current<T>(handle: JoinHandle<T>) -> Option<T> {
    if handle.thread().id() == thread::current().id() {
        return None;
    }
    match handle.join() {
        Ok(value) => Some(value),
        Err(_) => {
            tracing::error!("a wheel thread panicked");
            None
        }
    }
}

/// Moves tick thread `index` to real-time priority (`Config::realtime_ticks`), or warns that
/// it stays at normal priority.
fn make_tick_thread_realtime<T>(core: &Core, index: usize, handle: &JoinHandle<T>) {
    match priority::make_realtime(handle) {
        Ok(()) => {
            core.realtime_ticks.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => tracing::warn!(
            tick_thread = index,
            %error,
            "realtime_ticks: the OS refused real-time priority; the tick thread runs at normal priority"
        ),
    }
}

/// The shards (index and wheel) each tick thread drives: thread `i` every
/// `Config::tick_thread_count`-th shard from shard `i`.
fn shards_of_tick_threads(core: &Core, wheels: Vec<ShardWheel>) -> Vec<Vec<(usize, ShardWheel)>> {
    let threads = core.config.tick_thread_count();
    let mut groups: Vec<Vec<(usize, ShardWheel)>> = (0..threads).map(|_| Vec::new()).collect();
    for (index, wheel) in wheels.into_iter().enumerate() {
        groups[index % threads].push((index, wheel));
    }
    groups
}

fn spawn_threads(
    core: &Arc<Core>,
    wheels: Vec<ShardWheel>,
    threads: &mut Threads,
) -> std::io::Result<()> {
    let groups = shards_of_tick_threads(core, wheels);
    let cores = if core.config.pin_threads {
        pinning::tick_thread_cores(groups.len())
    } else {
        Vec::new()
    };
    // The field that sets how many tick threads there are, for a refusal's message.
    let field = match core.config.tick_threads {
        Some(_) => "tick_threads",
        None => "shards",
    };
    let count = core.config.tick_thread_count();
    for (index, shards) in groups.into_iter().enumerate() {
        let pin = cores.get(index).copied();
        let driven: Vec<usize> = shards.iter().map(|&(shard, _)| shard).collect();
        let thread_core = ThreadGuard::new(Arc::clone(core), ThreadKind::Tick);
        let realtime = core.config.realtime_ticks;
        let short_slice = core.config.short_tick_slice;
        let handle = spawn_named(format!("wheel-tick-{index}"), field, count, move || {
            // Under `realtime_ticks` the spawning thread sets the policy instead.
            if !realtime && short_slice {
                if let Err(error) = priority::ask_short_slice() {
                    tracing::debug!(tick_thread = index, %error, "no short slice");
                }
            }
            if let Some(id) = pin {
                if !core_affinity::set_for_current(id) {
                    tracing::warn!(
                        tick_thread = index,
                        "could not pin tick thread; it runs unpinned"
                    );
                }
            }
            thread_core.enter_thread();
            // No user code runs on a tick thread, so no shutdown runs here: the shutdown
            // that stopped this loop joins it and takes what it hands back.
            TickThread::new(&thread_core, shards).run()
        })?;
        for shard in driven {
            core.shards[shard].set_thread(handle.thread().clone());
        }
        if core.config.realtime_ticks {
            make_tick_thread_realtime(core, index, &handle);
        }
        threads.ticks.push(handle);
    }
    for index in 0..core.config.executor_threads {
        let thread_core = ThreadGuard::new(Arc::clone(core), ThreadKind::Worker);
        let handle = spawn_named(
            format!("wheel-exec-{index}"),
            "executor_threads",
            core.config.executor_threads,
            move || {
                thread_core.enter_worker(index);
                worker::work(&thread_core, index);
            },
        )?;
        threads.workers.push(handle);
    }
    Ok(())
}

/// Starts thread `name` running `body`, one of the `count` that config field `field` asks
/// for. The OS's refusal comes back as an `io::Error` of the same kind whose message names the
/// thread and the field (what `ConfigError::Spawn` shows), and whose source is the OS's error.
fn spawn_named<T: Send + 'static>(
    name: String,
    field: &'static str,
    count: usize,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    thread::Builder::new()
        .name(name.clone())
        .spawn(body)
        .map_err(|source| {
            let kind = source.kind();
            let refused = SpawnRefused {
                thread: name,
                field,
                count,
                source,
            };
            std::io::Error::new(kind, refused)
        })
}

/// See [`spawn_named`].
#[derive(Debug)]
struct SpawnRefused {
    thread: String,
    field: &'static str,
    count: usize,
    source: std::io::Error,
}

impl fmt::Display for SpawnRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, one of the {} threads config field `{}` asks for: {}",
            self.thread, self.count, self.field, self.source
        )
    }
}

impl std::error::Error for SpawnRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl Drop for Handle {
    /// Shuts the service down as `shutdown` does, then joins the threads a `shutdown_timeout`
    /// left running that have finished since, and detaches the others without waiting for
    /// them.
    fn drop(&mut self) {
        let unfired = self.shutdown(false);
        self.release_stragglers();
        if !unfired.is_empty() {
            tracing::debug!(
                count = unfired.len(),
                "timer service dropped; unfired timers dropped unrun"
            );
        }
        for timer in unfired {
            drop_contained(timer, "an unfired task", &self.core.drop_panics);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Tick thread `t` drives every `tick_thread_count`-th shard from shard `t`.
    #[test]
    fn tick_threads_take_every_nth_shard() {
        for (tick_threads, expected) in [
            (None, vec![vec![0, 2, 4], vec![1, 3]]),
            (Some(1), vec![vec![0, 1, 2, 3, 4]]),
            (Some(3), vec![vec![0, 3], vec![1, 4], vec![2]]),
            (Some(9), vec![vec![0], vec![1], vec![2], vec![3], vec![4]]),
        ] {
            let config = Config {
                shards: 5,
                tick_threads,
                executor_threads: 1,
                ..Config::default()
            };
            let clock = Clock::new(config.tick);
            let core = Core::new(config, clock).unwrap();
            let wheels = (0..5).map(|_| ShardTick::wheel(&core).unwrap()).collect();
            let groups: Vec<Vec<usize>> = shards_of_tick_threads(&core, wheels)
                .into_iter()
                .map(|group| group.into_iter().map(|(shard, _)| shard).collect())
                .collect();
            assert_eq!(groups, expected, "tick_threads {tick_threads:?}");
        }
    }
}
