//! The last step of a shutdown: every timer still pending comes back as an [`Unfired`], found
//! by its record rather than by a reference.
//!
//! Once the tick threads and the workers have stopped, a timer still pending is a record in
//! the SCHEDULED state, wherever its references are: in a wheel, a ring, a notice, a worker's
//! batch, or nowhere yet (a `reschedule` that began before the shutdown sends its notice
//! late). So the pass reads every record ever used, in address order, and takes back the
//! pending ones; the wheels and rings go without a look. A walk of the wheels' references
//! would find the same timers at the cost of a cache miss a record (they are in deadline
//! order, the records in address order); the pass streams through the tables instead. A
//! shutdown called from a callback cannot join its own worker, whose batch in hand still
//! holds references: the pass takes those timers too, and the worker later finds its
//! references stale.
//!
//! A `shutdown_timeout` that stopped waiting for its workers makes the same pass while some
//! of them still run callbacks, so it must leave nothing a worker could act on afterwards
//! ([`hand_back_abandoned`]): the executor is abandoned first (a worker takes no reference
//! any more), every pending timer is taken as above (a claim racing the pass is decided by
//! the record's CAS: the pass takes the timer, or the worker fires it), and a repeating
//! timer whose run is in progress is marked as on its last run, so that no re-arm after the
//! pass leaves it armed with nobody to fire it or hand it back.

use std::sync::atomic::Ordering;

use crate::runtime::core::Core;
use crate::shard::{AtShutdown, Shard};
use crate::timer::{TimerId, Unfired};

/// Takes back every timer pending in `shard`'s table into `unfired`: each record retired, its
/// slot and its `max_pending` place given back, and the timers counted as handed back.
pub(crate) fn hand_back_pending(core: &Core, shard: &Shard, unfired: &mut Vec<Unfired>) {
    let before = unfired.len();
    for slot in 0..shard.table.high_water() {
        let Some(record) = shard.table.record(slot) else {
            continue;
        };
        let Some((gen, deadline, task)) = record.hand_back_pending() else {
            continue;
        };
        shard.table.release(slot);
        unfired.push(Unfired {
            id: TimerId::new(core.tag, shard.index, slot, gen),
            deadline: core.clock.instant(deadline),
            task,
        });
    }
    let taken = unfired.len() - before;
    core.handed_back.fetch_add(taken as u64, Ordering::Relaxed);
    core.limit.release_many(taken);
}

/// [`hand_back_pending`] for a shutdown whose workers may still be running callbacks (see the
/// module doc): also makes every repeating timer's run in progress its last, counting the
/// timer as ended (`Core::ended_with_run`) and giving back its `max_pending` place here, as a
/// `cancel` during a run does; its worker retires the record and drops the task when the run
/// returns.
pub(crate) fn hand_back_abandoned(core: &Core, shard: &Shard, unfired: &mut Vec<Unfired>) {
    let before = unfired.len();
    let mut ended = 0;
    for slot in 0..shard.table.high_water() {
        let Some(record) = shard.table.record(slot) else {
            continue;
        };
        match record.at_shutdown() {
            AtShutdown::Nothing => {}
            AtShutdown::RunEnds => ended += 1,
            AtShutdown::Pending(gen, deadline, task) => {
                shard.table.release(slot);
                unfired.push(Unfired {
                    id: TimerId::new(core.tag, shard.index, slot, gen),
                    deadline: core.clock.instant(deadline),
                    task,
                });
            }
        }
    }
    let taken = unfired.len() - before;
    core.handed_back.fetch_add(taken as u64, Ordering::Relaxed);
    core.ended_with_run.fetch_add(ended, Ordering::Relaxed);
    core.limit.release_many(taken + ended as usize);
}
