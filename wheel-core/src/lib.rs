//! `wheel-core`: a single-threaded hierarchical hashed timing wheel.
//!
//! [`Wheel<T>`] keeps values that fall due at a tick (a `u64` the caller counts; the wheel knows
//! no clock, no threads and no atomics). Insert, remove and reschedule are O(1); handing out due
//! entries costs O(1) amortised per entry; finding the next due tick never scans empty slots.
//!
//! # The algorithm
//!
//! The wheel is a stack of levels, each a ring of `S = 2^b` slots (64 by default). A slot on
//! level `k` is `S^k` ticks wide, so level 0 counts single ticks, level 1 counts blocks of `S`
//! ticks, and so on: a tick count written in base `S` has one digit per level, and digit `k` is
//! that tick's slot on level `k`. With 64 slots, 11 levels give every `u64` tick a slot, so any
//! deadline up to `u64::MAX` is legal and no arithmetic can overflow.
//!
//! An entry with deadline `d`, inserted when the wheel's clock reads `now`, goes on the level of
//! the *highest digit in which `d` and `now` differ*, into the slot named by that digit of `d`.
//! Because the digits above it agree, that slot is in the level's current rotation and after
//! the current slot, so nothing wraps around and nothing needs a round counter (which is what
//! makes Netty's single wheel rescan long buckets). An entry already due (`d <= now`) goes into
//! the current level-0 slot and leaves on the next advance.
//!
//! Every level keeps a bitmap of its non-empty slots. The next due slot is the first set bit at
//! or after the clock's digit on the lowest level that has one: a slot on level `k` starts at a
//! later tick than every slot on the levels below, which all lie in the current level-`k` slot.
//! So [`Wheel::next_expiration`] is a handful of `trailing_zeros`, and a caller can sleep
//! exactly until then: an empty wheel, or an empty stretch of time, costs nothing.
//!
//! Advancing to tick `t` takes due slots in order. A due level-0 slot hands out its entries (all
//! due by then; one postponed meanwhile is placed again instead). A due higher slot
//! *cascades*: the clock moves to the slot's first tick and each entry is placed again
//! relative to it, landing on a lower level (or handed out, once on level 0). An entry moves
//! down at most once per level, which is where the amortised O(1) comes from, and it is never
//! handed out before its own deadline. Postponing an entry only
//! writes its new deadline: its slot starts before the old one, so the entry is reached in
//! time and placed again from there (a timeout pushed back on every message moves once).
//!
//! A slot high up can hold a great many entries (every timer due in a 4-second stretch sits
//! in one level-2 slot of a 1 ms wheel), and cascading it all at once would stall the caller
//! while timers due right then wait. So the wheel also cascades *early*: each level keeps a
//! second set of slots for its next rotation, and with every insert and hand-out, each level
//! moves a couple of entries of its next slot into the next rotation of the level below. When
//! the clock reaches that rotation it becomes the current one (a flag flips); whatever the early
//! cascade had not moved yet cascades then as before.
//!
//! Entries live in one slab (chunks that never move, with a stack of vacant places). Each
//! slot is an array of `u32` slab indices and each entry records where it is (level, slot,
//! position), so insert appends, and remove only touches the entry's own node: the reference
//! it leaves in the array reads as stale because the node no longer says it is there, and
//! stale references are skipped when the slot is walked, or compacted away once they
//! outnumber the live ones, a few references per removal so that no single call pays for a
//! whole slot: O(1), with no allocation once the arrays have grown. Walking a slot's array
//! issues independent loads, and the walk prefetches nodes a few entries ahead, so a cascade
//! over entries that are cold in cache overlaps the misses (an intrusive linked list would pay
//! them one by one). A [`TimerKey`] is the slab index plus a generation, so a
//! stale key is recognised and never touches a newer entry that reuses the place.
//!
//! # A worked example
//!
//! With 64 slots per level and the clock at 0, insert an entry due at tick 5000 (5 s of 1 ms
//! ticks). In base 64, 5000 is `1·64² + 14·64 + 8`, and 0 differs from it first in digit 2:
//!
//! 1. It goes on **level 2, slot 1**, which covers ticks 4096..8192.
//!    `next_expiration()` is 4096: nothing can be due before.
//! 2. Advancing to 4096 makes that slot due. It cascades: with the clock at 4096 (`1·64²`), the
//!    entry differs first in digit 1, so it goes on **level 1, slot 14**, ticks 4992..5056.
//!    `next_expiration()` is now 4992.
//! 3. Advancing to 4992 cascades again: the clock is `1·64² + 14·64`, the entry differs in
//!    digit 0 only, so it goes on **level 0, slot 8**, which is tick 5000 exactly.
//! 4. Advancing to any tick ≥ 5000 hands it out, and not a tick sooner.
//!
//! # Levels of the default wheel (64 slots), read with a 1 ms tick
//!
//! | level | slot width (ticks) | level span (ticks) | slot width at 1 ms | span at 1 ms |
//! |------:|-------------------:|-------------------:|-------------------:|-------------:|
//! | 0 | 1 | 64 | 1 ms | 64 ms |
//! | 1 | 64 | 4 096 | 64 ms | 4.1 s |
//! | 2 | 4 096 | 262 144 | 4.1 s | 4.4 min |
//! | 3 | 262 144 | 2²⁴ | 4.4 min | 4.7 h |
//! | 4 | 2²⁴ | 2³⁰ | 4.7 h | 12.4 days |
//! | 5 | 2³⁰ | 2³⁶ | 12.4 days | 2.2 years |
//! | 6 | 2³⁶ | 2⁴² | 2.2 years | 139 years |
//! | 7–10 | 2⁴²–2⁶⁰ | up to 2⁶⁴ | … | … |
//!
//! # Example
//!
//! ```
//! use wheel_core::Wheel;
//!
//! let mut wheel = Wheel::new();
//! let key = wheel.insert(5000, "request 42 timed out");
//! assert_eq!(wheel.next_expiration(), Some(4096));
//! assert_eq!(wheel.advance(4999).count(), 0);
//!
//! let fired: Vec<_> = wheel.advance(5000).collect();
//! assert_eq!(fired[0].value, "request 42 timed out");
//! assert_eq!(wheel.remove(key), None); // handed out: the key is stale
//! ```

#![warn(missing_docs)]

mod free;
mod key;
mod level;
mod refs;
mod slab;
mod wheel;

pub use key::{StaleKey, TimerKey};
pub use wheel::{Advance, Drain, Entry, InvalidSlots, Wheel};
