//! Peer: a `BinaryHeap` under one `Mutex`, with worker threads waiting on a `Condvar` — the
//! shape of the JDK's `DelayQueue` / `ScheduledThreadPoolExecutor` (leader/follower waiting,
//! lazy removal of cancelled entries, as with `setRemoveOnCancelPolicy(false)`, the default).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use wheel_shard::Config;

use crate::harness::probe::RunHandle;
use crate::harness::task::Task;
use crate::harness::timers::{Finished, Outcome, ThreadRoles, Timers};

type Callback = Box<dyn FnOnce() + Send>;

/// A heap entry: valid while its slot still holds a task with this generation and deadline.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    deadline: Instant,
    slot: u32,
    generation: u32,
}

struct Slot {
    generation: u32,
    deadline: Instant,
    task: Option<Callback>,
}

struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The worker waiting for the head's deadline; the others wait untimed.
    leader: Option<usize>,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    available: Condvar,
    wakeups: AtomicU64,
}

/// The heap timer: producers lock to insert; `workers` threads take due tasks and run them.
pub struct HeapTimers {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// `(slot, generation)`.
pub type HeapId = (u32, u32);

fn lock(shared: &Shared) -> MutexGuard<'_, Queue> {
    shared.queue.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Timers for HeapTimers {
    type Id = HeapId;
    const NAME: &'static str = "binary-heap";
    const METHOD: &'static str = "BinaryHeap + Mutex/Condvar, one worker per executor thread taking due tasks (JDK ScheduledThreadPoolExecutor shape); callbacks boxed";

    fn start(config: &Config, _run: &RunHandle) -> Result<HeapTimers, String> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                heap: BinaryHeap::new(),
                slots: Vec::new(),
                free: Vec::new(),
                leader: None,
                stop: false,
            }),
            available: Condvar::new(),
            wakeups: AtomicU64::new(0),
        });
        let workers = (0..config.executor_threads)
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("heap-timer-{i}"))
                    .spawn(move || work(&shared, i))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        Ok(HeapTimers { shared, workers })
    }

    #[inline(always)]
    fn schedule_at(&self, deadline: Instant, task: Task) -> Result<HeapId, String> {
        let callback: Callback = Box::new(move || task.run());
        let mut queue = lock(&self.shared);
        let slot = match queue.free.pop() {
            Some(slot) => slot,
            None => {
                queue.slots.push(Slot {
                    generation: 0,
                    deadline,
                    task: None,
                });
                (queue.slots.len() - 1) as u32
            }
        };
        let entry = &mut queue.slots[slot as usize];
        entry.deadline = deadline;
        entry.task = Some(callback);
        let generation = entry.generation;
        push(
            &mut queue,
            &self.shared,
            Entry {
                deadline,
                slot,
                generation,
            },
        );
        Ok((slot, generation))
    }

    fn cancel(&self, &(slot, generation): &HeapId) -> Outcome {
        let mut queue = lock(&self.shared);
        let Some(entry) = live_entry(&mut queue, slot, generation) else {
            return Outcome::TooLate;
        };
        let task = entry.task.take();
        release(&mut queue, slot);
        drop(queue);
        drop(task);
        Outcome::Done
    }

    fn reschedule_at(
        &self,
        &(slot, generation): &HeapId,
        deadline: Instant,
        _task: Task,
    ) -> Outcome {
        let mut queue = lock(&self.shared);
        let Some(entry) = live_entry(&mut queue, slot, generation) else {
            return Outcome::TooLate;
        };
        // The old heap entry stays and is skipped when it surfaces (its deadline no longer
        // matches), as a cancelled ScheduledFutureTask is.
        entry.deadline = deadline;
        push(
            &mut queue,
            &self.shared,
            Entry {
                deadline,
                slot,
                generation,
            },
        );
        Outcome::Done
    }

    fn wakeups(&self) -> Option<u64> {
        Some(self.shared.wakeups.load(Ordering::Relaxed))
    }

    fn threads(&self) -> ThreadRoles {
        ThreadRoles {
            timer: "heap-timer-",
            executor: None,
        }
    }

    fn finish(self) -> Finished {
        let mut queue = lock(&self.shared);
        queue.stop = true;
        drop(queue);
        self.shared.available.notify_all();
        for worker in self.workers {
            let _ = worker.join();
        }
        let queue = lock(&self.shared);
        let unfired = queue.slots.iter().filter(|s| s.task.is_some()).count() as u64;
        Finished {
            unfired,
            ..Finished::default()
        }
    }
}

/// Inserts `entry`; a new head means the leader's wait is too long, so a waiter is woken.
fn push(queue: &mut Queue, shared: &Shared, entry: Entry) {
    queue.heap.push(Reverse(entry));
    let is_head = queue.heap.peek().is_some_and(|Reverse(head)| {
        let slot = &queue.slots[head.slot as usize];
        slot.generation == head.generation && slot.deadline == head.deadline
    });
    if is_head {
        queue.leader = None;
        shared.available.notify_one();
    }
}

/// The slot of timer `(slot, generation)` while that timer is still pending.
fn live_entry(queue: &mut Queue, slot: u32, generation: u32) -> Option<&mut Slot> {
    let entry = &mut queue.slots[slot as usize];
    (entry.generation == generation && entry.task.is_some()).then_some(entry)
}

fn release(queue: &mut Queue, slot: u32) {
    let entry = &mut queue.slots[slot as usize];
    entry.generation = entry.generation.wrapping_add(1);
    queue.free.push(slot);
}

/// A worker: wait for the head's deadline (leader) or for a signal (followers), take the due
/// task, run it outside the lock.
fn work(shared: &Shared, me: usize) {
    let mut queue = lock(shared);
    loop {
        if queue.stop {
            return;
        }
        let now = Instant::now();
        let head = queue.heap.peek().map(|Reverse(e)| e.deadline);
        match head {
            Some(deadline) if deadline <= now => {
                let Reverse(entry) = queue.heap.pop().expect("peeked");
                let task = take_if_current(&mut queue, &entry);
                if queue.leader.is_none() && !queue.heap.is_empty() {
                    shared.available.notify_one();
                }
                if let Some(task) = task {
                    drop(queue);
                    task();
                    queue = lock(shared);
                }
            }
            Some(deadline) if queue.leader.is_none() => {
                queue.leader = Some(me);
                queue = shared
                    .available
                    .wait_timeout(queue, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                if queue.leader == Some(me) {
                    queue.leader = None;
                }
                shared.wakeups.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                queue = shared
                    .available
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                shared.wakeups.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn take_if_current(queue: &mut Queue, entry: &Entry) -> Option<Callback> {
    let slot = &mut queue.slots[entry.slot as usize];
    if slot.generation != entry.generation || slot.deadline != entry.deadline {
        return None;
    }
    let task = slot.task.take()?;
    release(queue, entry.slot);
    Some(task)
}
