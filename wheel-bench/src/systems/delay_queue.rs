//! Peer: tokio-util's `DelayQueue` on a current-thread runtime.
//!
//! Producers do not own the queue (it is `!Sync` and lives on the runtime thread), so they
//! *send* commands to it over an unbounded tokio mpsc channel, and the runtime thread inserts,
//! removes and resets. The producers' schedule throughput is therefore the channel's; the
//! queue's own cost shows up as lateness when the runtime thread falls behind. Callbacks run
//! on the runtime thread as entries expire.

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_util::time::delay_queue::{DelayQueue, Key};
use wheel_shard::Config;

use crate::harness::probe::RunHandle;
use crate::harness::task::Task;
use crate::harness::timers::{Finished, Outcome, OwnCounts, ThreadRoles, Timers};

type Callback = Box<dyn FnOnce() + Send>;

/// Commands handled per poll before expirations get their turn.
const COMMANDS_PER_POLL: usize = 4096;

enum Command {
    Insert {
        index: u32,
        deadline: Instant,
        callback: Callback,
    },
    Cancel(u32),
    Reschedule(u32, Instant),
}

#[derive(Default)]
struct Counters {
    /// Inserts sent (producers).
    sent: AtomicU64,
    /// Inserts that fired or were removed (runtime thread).
    resolved: AtomicU64,
    /// Removals that took effect (runtime thread).
    cancelled: AtomicU64,
    /// Cancel and reschedule commands sent (producers).
    follow_ups_sent: AtomicU64,
    /// Cancel and reschedule commands applied (runtime thread).
    follow_ups_applied: AtomicU64,
}

impl Counters {
    /// Commands and timers not yet done with: a round is over when none are left, so no
    /// late cancel or reschedule of it can reach the next round's timer of the same index.
    fn outstanding(&self) -> u64 {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let timers = load(&self.sent).saturating_sub(load(&self.resolved));
        timers + load(&self.follow_ups_sent).saturating_sub(load(&self.follow_ups_applied))
    }

    fn own_counts(&self) -> OwnCounts {
        OwnCounts {
            cancelled: Some(self.cancelled.load(Ordering::Relaxed)),
            counted: None,
        }
    }
}

/// The sending side; the queue lives on the `delay-queue` thread.
pub struct DelayQueueTimers {
    commands: UnboundedSender<Command>,
    counters: Arc<Counters>,
    thread: JoinHandle<u64>,
}

impl Timers for DelayQueueTimers {
    type Id = u32;
    const NAME: &'static str = "delay-queue";
    const METHOD: &'static str = "tokio-util DelayQueue on a current-thread runtime; producers send insert/remove/reset commands over an unbounded mpsc channel; callbacks (boxed) run on the runtime thread";

    fn start(_config: &Config, run: &RunHandle) -> Result<DelayQueueTimers, String> {
        let (commands, receiver) = unbounded_channel();
        let counters = Arc::new(Counters::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| e.to_string())?;
        let shared = Arc::clone(&counters);
        let run = run.clone();
        let thread = std::thread::Builder::new()
            .name("delay-queue".into())
            .spawn(move || {
                let mut state = QueueThread {
                    queue: DelayQueue::new(),
                    keys: Vec::new(),
                    receiver,
                    counters: shared,
                    run,
                };
                runtime.block_on(poll_fn(|cx| state.poll(cx)));
                state.queue.len() as u64
            })
            .map_err(|e| e.to_string())?;
        Ok(DelayQueueTimers {
            commands,
            counters,
            thread,
        })
    }

    #[inline(always)]
    fn schedule_at(&self, deadline: Instant, task: Task) -> Result<u32, String> {
        let index = task.index();
        let callback: Callback = Box::new(move || task.run());
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        self.commands
            .send(Command::Insert {
                index,
                deadline,
                callback,
            })
            .map_err(|_| "the DelayQueue thread is gone".to_string())?;
        Ok(index)
    }

    fn cancel(&self, index: &u32) -> Outcome {
        self.follow_up(Command::Cancel(*index))
    }

    fn reschedule_at(&self, index: &u32, deadline: Instant, _task: Task) -> Outcome {
        self.follow_up(Command::Reschedule(*index, deadline))
    }

    fn outstanding(&self) -> Option<u64> {
        Some(self.counters.outstanding())
    }

    fn own_counts(&self) -> OwnCounts {
        self.counters.own_counts()
    }

    fn threads(&self) -> ThreadRoles {
        ThreadRoles {
            timer: "delay-queue",
            executor: None,
        }
    }

    fn finish(self) -> Finished {
        drop(self.commands);
        let unfired = self.thread.join().unwrap_or(0);
        Finished {
            unfired,
            counts: self.counters.own_counts(),
            ..Finished::default()
        }
    }
}

impl DelayQueueTimers {
    /// Sends a cancel or reschedule, counted so a round can wait until it was applied.
    fn follow_up(&self, command: Command) -> Outcome {
        if self.commands.send(command).is_ok() {
            self.counters
                .follow_ups_sent
                .fetch_add(1, Ordering::Relaxed);
        }
        Outcome::Queued
    }
}

/// The runtime thread's state: the queue, each timer's key, and the command channel.
struct QueueThread {
    queue: DelayQueue<(u32, Callback)>,
    keys: Vec<Option<Key>>,
    receiver: UnboundedReceiver<Command>,
    counters: Arc<Counters>,
    run: RunHandle,
}

impl QueueThread {
    /// Applies waiting commands, then runs expired entries; ready when the channel closes.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..COMMANDS_PER_POLL {
            match self.receiver.poll_recv(cx) {
                Poll::Ready(Some(command)) => self.apply(command),
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(expired)) = self.queue.poll_expired(cx) {
            let (index, callback) = expired.into_inner();
            self.keys[index as usize] = None;
            callback();
            self.resolve();
        }
        if !self.receiver.is_empty() {
            // Commands left over: come back after the expirations just run.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    fn apply(&mut self, command: Command) {
        if !matches!(command, Command::Insert { .. }) {
            self.counters
                .follow_ups_applied
                .fetch_add(1, Ordering::Relaxed);
        }
        match command {
            Command::Insert {
                index,
                deadline,
                callback,
            } => {
                let key = self.queue.insert_at((index, callback), deadline.into());
                let index = index as usize;
                if self.keys.len() <= index {
                    self.keys.resize(index + 1, None);
                }
                self.keys[index] = Some(key);
            }
            Command::Cancel(index) => {
                if let Some(key) = self.keys.get_mut(index as usize).and_then(Option::take) {
                    drop(self.queue.remove(&key));
                    self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    self.resolve();
                }
            }
            Command::Reschedule(index, deadline) => {
                if let Some(Some(key)) = self.keys.get(index as usize) {
                    self.queue.reset_at(key, deadline.into());
                    self.run.set_deadline(index, deadline);
                }
            }
        }
    }

    fn resolve(&self) {
        self.counters.resolved.fetch_add(1, Ordering::Relaxed);
    }
}
