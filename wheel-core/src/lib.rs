//! `wheel-core`: a single-threaded hierarchical hashed timing wheel.
//!
//! [`Wheel<T>`] keeps `(deadline, value)` entries that fall due at a tick (a `u64` the caller
//! counts; the wheel knows no clock, no threads and no atomics). `T` is a small `Copy`
//! reference to the caller's own record, stored inline in the wheel's arrays: inserting,
//! cascading and handing out walk arrays and never chase a pointer per entry. Insert is O(1),
//! handing out due entries costs O(1) amortised per entry, and finding the next due tick never
//! scans empty slots.
//!
//! There is no remove: the wheel hands out no keys. A caller that cancels or postpones a timer
//! marks its own record and leaves the entry where it is, *stale*; it recognises a stale entry
//! when the wheel hands it out, and asks [`Wheel::retain`] to compact stale entries away in
//! bounded batches meanwhile.
//!
//! # The algorithm
//!
//! The wheel is a stack of levels, each a ring of `S = 2^b` slots (64 by default). A slot on
//! level `k` is `S^k` ticks wide, so level 0 counts single ticks, level 1 counts blocks of `S`
//! ticks, and so on: a tick count written in base `S` has one digit per level, and digit `k` is
//! that tick's slot on level `k`. The levels stop where a slot would be wider than 2^32 ticks
//! (6 levels of 64 slots, spanning 2^36 ticks), because a slot's array keeps only the low 32
//! bits of each deadline: every deadline in a slot agrees with the slot's first tick above
//! them. Any deadline up to `u64::MAX` is still legal (see "Outside the levels").
//!
//! An entry with deadline `d`, inserted when the wheel's clock reads `now`, goes on the level of
//! the *highest digit in which `d` and `now` differ*, into the slot named by that digit of `d`.
//! Because the digits above it agree, that slot is in the level's current rotation and after
//! the current slot, so nothing wraps around and nothing needs a round counter (which is what
//! makes Netty's single wheel rescan long buckets). An entry due at `now` goes into the
//! current level-0 slot and leaves on the next advance.
//!
//! # Outside the levels
//!
//! Two kinds of entry have no slot, and wait in two lists of their own that keep the whole
//! deadline (4 bytes more per entry): one inserted *overdue* (`d < now`), which the next
//! advance hands out first, before any slot; and one *beyond* the top level (`d` differs from
//! `now` above the top level's digit: more than 2^36 ticks ahead with 64 slots, 2.2 years of
//! 1 ms ticks). Entries beyond wait in buckets by the number of their top-level rotation (`d`
//! above the levels' bits), as a radix heap keeps keys: bucket `b` holds the rotations whose
//! highest bit differing from a base rotation is bit `b − 1`, so a lower bucket's rotations all
//! come before a higher one's. The clock stops at the earliest deadline in the lowest bucket,
//! which becomes the base, and that bucket's entries are placed again relative to it: those in
//! this rotation on the levels, the others in lower buckets. An entry moves at most once per
//! bit of its rotation number, however many distinct rotations hold entries. Both kinds are
//! rare, and the slots' arrays stay at half the bytes a whole deadline would cost.
//!
//! Every level keeps a bitmap of its non-empty slots. The next due slot is the first set bit at
//! or after the clock's digit on the lowest level that has one: a slot on level `k` starts at a
//! later tick than every slot on the levels below, which all lie in the current level-`k` slot.
//! So [`Wheel::next_expiration`] is a handful of `trailing_zeros`, and a caller can sleep
//! exactly until then: an empty wheel, or an empty stretch of time, costs nothing.
//!
//! Advancing to tick `t` takes due slots in order. A due level-0 slot hands out its entries, all
//! due by then. A due higher slot *cascades*: the clock moves to the slot's first tick and
//! each entry is placed again relative to it, landing on a lower level (or handed out, once on
//! level 0). An entry moves down at most once per level, which is where the amortised O(1)
//! comes from, and it is never handed out before its own deadline.
//!
//! A slot high up can hold a great many entries (every timer due in a 4-second stretch sits
//! in one level-2 slot of a 1 ms wheel), and cascading it all at once would stall the caller
//! while timers due right then wait. So the wheel also cascades *early*: each level keeps a
//! second rotation of slots for its next turn, and with every insert and hand-out, each level
//! moves a couple of entries of its next slot into the next rotation of the level below. When
//! the clock reaches that rotation it becomes the current one (a flag flips); whatever the early
//! cascade had not moved yet cascades then as before.
//!
//! Entries are stored inline: each slot is an array of `(low 32 bits of the deadline, value)`
//! in arrival order, kept in fixed 1 KiB chunks (84 entries with an 8-byte value, 126 with a
//! 4-byte one) linked into a list. Insert
//! appends to the slot's last chunk, a hand-out or an early cascade takes from the first, and a
//! cascade walks the whole list, giving each chunk back as it goes; a walk starts loading the
//! next chunk while it reads one, the only prefetching left. Chunks come from one pool
//! for the whole wheel and go back to it, so a slot never copies its array to grow it and a
//! long-running wheel holds about as much memory as its entries at their peak.
//! [`Wheel::retain`] walks the slots with a cursor kept across calls, moving the entries kept
//! down over the ones removed, in order, a bounded number per call.
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
//! | beyond | | up to 2⁶⁴ | | |
//!
//! # Example
//!
//! ```
//! use wheel_core::Wheel;
//!
//! // What the caller puts in the wheel: a reference to its own record, and a ticket that
//! // tells whether the record still means this timer.
//! #[derive(Clone, Copy, Debug, PartialEq)]
//! struct Ref {
//!     record: u32,
//!     ticket: u32,
//! }
//! let mut tickets = vec![0u32; 2]; // the caller's records: the live ticket of each
//!
//! let mut wheel = Wheel::new();
//! wheel.insert(5000, Ref { record: 0, ticket: 0 });
//! wheel.insert(5000, Ref { record: 1, ticket: 0 });
//! assert_eq!(wheel.next_expiration(), Some(4096));
//! assert_eq!(wheel.advance(4999).count(), 0);
//!
//! tickets[1] += 1; // timer 1 is cancelled: its entry is stale now
//! let live = |r: &Ref| tickets[r.record as usize] == r.ticket;
//! let fired: Vec<_> = wheel.advance(5000).filter(|e| live(&e.value)).collect();
//! assert_eq!(fired.len(), 1);
//! assert_eq!(fired[0].value, Ref { record: 0, ticket: 0 });
//!
//! // Stale entries can also be compacted away before they fall due.
//! wheel.insert(9000, Ref { record: 1, ticket: 0 });
//! assert_eq!(wheel.retain(100, |_, r| live(r)), 1);
//! assert!(wheel.is_empty());
//! ```

#![warn(missing_docs)]

/// The crate's own `README.md` (the one its package shows), whose example runs as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;

// Layers, each using only those above it: an entry and the level arithmetic; blocks of
// zeroed memory from the system; the chunks that hold entries; a rotation (a ring of slots,
// each a list of chunks); a level (its current and next rotation); the wheel (the levels, the
// clock, the iterators).
mod entry;
mod geometry;

mod block;
mod chunks;

mod rotation;

mod level;

mod wheel;

pub use entry::Entry;
pub use wheel::{Advance, Drain, InvalidSlots, Wheel};
