//! Unit tests for the edges of `Wheel`'s contract: the clock, past and extreme deadlines,
//! budgets, drain, geometry, cascades (early ones included) and ordering, `retain`, and memory.

use std::collections::{BTreeMap, BTreeSet};

use wheel_core::{Entry, Wheel};

/// Entries per chunk of a slot's array (an implementation detail the tests aim around).
const CHUNK: u64 = 63;

/// The values `advance(now)` hands out, in order.
fn due<T: Copy>(wheel: &mut Wheel<T>, now: u64) -> Vec<T> {
    wheel.advance(now).map(|e| e.value).collect()
}

/// A deterministic xorshift stream: `next(n)` is a number below `n`.
fn xorshift(mut state: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}

/// Runs `retain` in calls of `budget` until a round ends, and returns what each call examined.
fn retain_round<T: Copy + Ord>(
    wheel: &mut Wheel<T>,
    budget: usize,
    mut keep: impl FnMut(u64, &T) -> bool,
) -> Vec<Vec<(u64, T)>> {
    let mut calls = Vec::new();
    loop {
        let mut seen = Vec::new();
        let n = wheel.retain(budget, |deadline, value| {
            seen.push((deadline, *value));
            keep(deadline, value)
        });
        assert_eq!(n, seen.len());
        calls.push(seen);
        if n < budget {
            return calls;
        }
    }
}

// --- the clock -----------------------------------------------------------------------------

/// Regression: with the clock at 100, an entry due in the past sits in the current slot, and an
/// advance to a tick below the clock must count as the clock and hand it out.
#[test]
fn advance_below_clock_hands_out_past_entries() {
    let mut wheel = Wheel::new();
    wheel.advance(100).for_each(drop);
    wheel.insert(50, "past");
    assert_eq!(due(&mut wheel, 10), ["past"]);
    assert_eq!(wheel.now(), 100);
}

#[test]
fn clock_never_goes_back() {
    let mut wheel = Wheel::new();
    assert_eq!(due(&mut wheel, 100), Vec::<u32>::new());
    assert_eq!(wheel.now(), 100);
    assert_eq!(wheel.advance(50).next(), None);
    assert_eq!(wheel.now(), 100);
    wheel.insert(120, 1);
    assert!(due(&mut wheel, 0).is_empty());
    assert!(due(&mut wheel, 119).is_empty());
    assert_eq!(due(&mut wheel, 120), [1]);
}

#[test]
fn past_deadline_goes_out_on_next_advance() {
    let mut wheel = Wheel::new();
    wheel.advance(1_000).for_each(drop);
    wheel.insert(3, "late");
    assert_eq!(wheel.next_expiration(), Some(1_000));
    let out: Vec<_> = wheel.advance(1_000).collect();
    assert_eq!(
        out,
        [Entry {
            deadline: 3,
            value: "late"
        }]
    );
    assert!(wheel.is_empty());
}

#[test]
fn deadline_equal_to_now_is_due_now() {
    let mut wheel = Wheel::new();
    wheel.insert(0, "zero");
    assert_eq!(wheel.next_expiration(), Some(0));
    assert_eq!(due(&mut wheel, 0), ["zero"]);
    wheel.advance(777).for_each(drop);
    wheel.insert(777, "now");
    assert_eq!(wheel.next_expiration(), Some(777));
    assert_eq!(due(&mut wheel, 777), ["now"]);
}

#[test]
fn never_early_at_every_level() {
    let deadlines = [1, 63, 64, 65, 4095, 4096, 5000, 1 << 20, (1 << 40) + 3];
    for &d in &deadlines {
        let mut wheel = Wheel::new();
        wheel.insert(d, d);
        assert!(
            due(&mut wheel, d - 1).is_empty(),
            "deadline {d} came out early"
        );
        assert_eq!(due(&mut wheel, d), [d]);
    }
}

#[test]
fn u64_max_is_a_legal_deadline() {
    let mut wheel = Wheel::new();
    wheel.insert(u64::MAX, "max");
    wheel.insert(u64::MAX - 1, "max-1");
    wheel.insert(u64::MAX - 64, "max-64");
    assert!(wheel.next_expiration().unwrap() <= u64::MAX - 64);
    assert!(due(&mut wheel, u64::MAX - 65).is_empty());
    assert_eq!(due(&mut wheel, u64::MAX - 64), ["max-64"]);
    assert_eq!(due(&mut wheel, u64::MAX - 1), ["max-1"]);
    assert_eq!(due(&mut wheel, u64::MAX), ["max"]);
    assert_eq!(wheel.now(), u64::MAX);
    // At the end of time, everything is due at once, in deadline order.
    wheel.insert(u64::MAX, "again");
    wheel.insert(0, "past");
    assert_eq!(wheel.next_expiration(), Some(u64::MAX));
    assert_eq!(due(&mut wheel, u64::MAX), ["past", "again"]);
}

#[test]
fn following_next_expiration_hands_out_each_entry_exactly_on_time() {
    for slots in [2, 4, 64, 512, 4096] {
        let mut wheel = Wheel::with_slots(slots).unwrap();
        let deadlines: Vec<u64> = (0..64).map(|b| (1u64 << b) + b).chain([u64::MAX]).collect();
        for &d in &deadlines {
            wheel.insert(d, d);
        }
        let mut seen = Vec::new();
        while let Some(next) = wheel.next_expiration() {
            for entry in wheel.advance(next) {
                assert_eq!(entry.deadline, next, "{slots} slots: not exactly on time");
                seen.push(entry.value);
            }
        }
        assert_eq!(seen, deadlines, "{slots} slots");
    }
}

// --- budgets -------------------------------------------------------------------------------

#[test]
fn budget_leaves_the_rest_due_for_the_next_call() {
    let mut wheel = Wheel::new();
    for i in 0..10u64 {
        wheel.insert(i * 1_000, i);
    }
    assert_eq!(wheel.advance(50_000).take(3).count(), 3);
    assert_eq!(wheel.len(), 7);
    let clock = wheel.now();
    assert!(clock <= 50_000);
    assert!(wheel.next_expiration().unwrap() <= 3_000.max(clock));
    assert_eq!(wheel.advance(50_000).take(0).count(), 0);
    // A later insert does not jump the queue of entries already due.
    wheel.insert(40_000, 99);
    assert_eq!(due(&mut wheel, 50_000), [3, 4, 5, 6, 7, 8, 9, 99]);
    assert_eq!(wheel.now(), 50_000);
}

#[test]
fn budget_of_one_within_a_single_slot() {
    let mut wheel = Wheel::new();
    for i in 0..5 {
        wheel.insert(10, i);
    }
    for i in 0..5 {
        let out: Vec<_> = wheel.advance(10).take(1).map(|e| e.value).collect();
        assert_eq!(out, [i]);
        assert_eq!(wheel.len(), 4 - i);
    }
}

#[test]
fn budgeted_leftovers_come_out_with_an_earlier_target() {
    let mut wheel = Wheel::new();
    wheel.insert(10, 'a');
    wheel.insert(10, 'b');
    assert_eq!(wheel.advance(100).take(1).count(), 1);
    assert_eq!(wheel.now(), 10);
    // 'b' is still due: any advance, even to a tick below the clock, hands it out.
    assert_eq!(due(&mut wheel, 5), ['b']);
}

/// A slot of several chunks handed out in takes that end anywhere, chunk edges included: each
/// advance resumes exactly where the last one stopped.
#[test]
fn advance_resumes_after_partial_takes_across_chunks() {
    for take in [
        1,
        2,
        CHUNK as usize - 1,
        CHUNK as usize,
        CHUNK as usize + 1,
        100,
    ] {
        let mut wheel = Wheel::new();
        let n = 5 * CHUNK + 7;
        for i in 0..n {
            wheel.insert(30, i);
        }
        wheel.insert(31, n);
        let mut out = Vec::new();
        loop {
            let part: Vec<u64> = wheel.advance(30).take(take).map(|e| e.value).collect();
            assert!(part.len() <= take);
            if part.is_empty() {
                break;
            }
            out.extend(part);
            assert_eq!(wheel.now(), 30);
        }
        assert_eq!(out, (0..n).collect::<Vec<_>>(), "take {take}");
        assert_eq!(due(&mut wheel, 31), [n]);
    }
}

// --- drain ---------------------------------------------------------------------------------

#[test]
fn drain_hands_out_everything_with_its_deadline() {
    let mut wheel = Wheel::new();
    wheel.advance(10).for_each(drop);
    let deadlines = [3, 10, 11, 5_000, 1 << 33, u64::MAX, 11];
    for (i, &d) in deadlines.iter().enumerate() {
        wheel.insert(d, i);
    }
    let mut out: Vec<_> = wheel.drain().map(|e| (e.deadline, e.value)).collect();
    out.sort();
    let mut expected: Vec<_> = deadlines.iter().enumerate().map(|(i, &d)| (d, i)).collect();
    expected.sort();
    assert_eq!(out, expected);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!(wheel.now(), 10, "drain leaves the clock alone");
}

#[test]
fn dropping_drain_early_empties_the_wheel_all_the_same() {
    let mut wheel = Wheel::new();
    for i in 0..1_000u64 {
        wheel.insert(i * 37, i);
    }
    let mut drain = wheel.drain();
    assert_eq!(drain.size_hint(), (1_000, Some(1_000)));
    assert_eq!(drain.by_ref().take(2).count(), 2);
    assert_eq!(drain.len(), 998);
    drop(drain);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    assert!(due(&mut wheel, u64::MAX - 1).is_empty());
    wheel.insert(u64::MAX, 7);
    wheel.insert(u64::MAX - 1, 8);
    assert_eq!(due(&mut wheel, u64::MAX), [8, 7]);
}

/// A forgotten `Drain` leaves a consistent wheel: the entries it did not hand out are still
/// there and still due on time.
#[test]
fn forgotten_drain_leaves_a_consistent_wheel() {
    let mut wheel = Wheel::new();
    wheel.insert(10, "a");
    wheel.insert(10, "b");
    let mut drain = wheel.drain();
    assert_eq!(drain.next().map(|e| e.value), Some("a"));
    std::mem::forget(drain);
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.next_expiration(), Some(10));
    wheel.insert(10, "c");
    assert_eq!(due(&mut wheel, 10), ["b", "c"]);
    assert!(wheel.is_empty());
}

// --- geometry ------------------------------------------------------------------------------

#[test]
fn with_slots_rounds_up_to_a_power_of_two() {
    let cases = [
        (1, 2, 33),
        (2, 2, 33),
        (3, 4, 17),
        (4, 4, 17),
        (64, 64, 6),
        (500, 512, 4),
        (4096, 4096, 3),
    ];
    for (asked, slots, levels) in cases {
        let wheel = Wheel::<u8>::with_slots(asked).unwrap();
        assert_eq!(
            (wheel.slots_per_level(), wheel.levels()),
            (slots, levels),
            "{asked}"
        );
    }
    let default = Wheel::<u8>::new();
    assert_eq!(default.slots_per_level(), Wheel::<u8>::DEFAULT_SLOTS);
    assert_eq!(default.levels(), 6, "slots up to 2^32 ticks wide");
}

#[test]
fn with_slots_rejects_zero_and_too_many() {
    for bad in [0, Wheel::<u8>::MAX_SLOTS + 1, usize::MAX] {
        let err = Wheel::<u8>::with_slots(bad).unwrap_err();
        assert_eq!(err.0, bad);
        assert!(err.to_string().contains("slots per level"));
    }
}

// --- cascades and ordering -----------------------------------------------------------------

#[test]
fn cascade_through_every_level_of_a_two_slot_wheel() {
    let mut wheel = Wheel::with_slots(2).unwrap();
    let mut deadlines: Vec<u64> = (0..64).map(|b| 1u64 << b).collect();
    deadlines.extend([u64::MAX, u64::MAX - 1, (1 << 63) + 1]);
    for &d in &deadlines {
        wheel.insert(d, d);
    }
    deadlines.sort_unstable();
    for &d in &deadlines {
        assert!(due(&mut wheel, d - 1).is_empty(), "{d} came out early");
        assert_eq!(due(&mut wheel, d), [d]);
    }
    assert!(wheel.is_empty());
}

#[test]
fn one_huge_jump_hands_out_everything_in_deadline_order() {
    let mut wheel = Wheel::new();
    let mut deadlines: Vec<u64> = (0..2_000u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20)
        .collect();
    for &d in &deadlines {
        wheel.insert(d, d);
    }
    deadlines.sort_unstable();
    assert_eq!(due(&mut wheel, u64::MAX), deadlines);
}

#[test]
fn many_entries_in_one_slot_keep_fifo_order_through_retain() {
    let mut wheel = Wheel::new();
    for i in 0..10_000u32 {
        wheel.insert(123_456, i);
    }
    retain_round(&mut wheel, 97, |_, i| i % 3 != 1);
    let expected: Vec<u32> = (0..10_000).filter(|i| i % 3 != 1).collect();
    assert_eq!(wheel.len(), expected.len());
    assert!(due(&mut wheel, 123_455).is_empty());
    assert_eq!(due(&mut wheel, 123_456), expected);
}

#[test]
fn fifo_within_a_tick_across_insert_times() {
    let mut wheel = Wheel::new();
    wheel.insert(5_000, 'a'); // level 2, seen from tick 0
    wheel.advance(4_000).for_each(drop);
    wheel.insert(5_000, 'b'); // behind 'a' in the same level-2 slot
    wheel.advance(4_999).for_each(drop); // both cascade down to level 0, in order
    wheel.insert(5_000, 'c'); // straight onto level 0, behind them
    wheel.insert(4_999, 'p'); // already due: the current slot, which comes first
    assert_eq!(due(&mut wheel, 5_000), ['p', 'a', 'b', 'c']);
}

/// A slot big enough that cascading it at once would be a stall: 200 000 entries due within
/// one level-2 slot (ticks 4 096·3 .. 4 096·4), with the wheel stepped tick by tick and kept
/// busy. The early cascade moves that slot down while the slot before it runs; every entry
/// still comes out at its own tick, in insertion order within the tick.
#[test]
fn a_huge_slot_is_cascaded_early_and_every_entry_is_on_time() {
    let mut next = xorshift(0x0123_4567_89AB_CDEF);
    let mut wheel = Wheel::new();
    let first = 3 * 4_096;
    let mut expected: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for i in 0..200_000u64 {
        let deadline = first + next(4_096);
        wheel.insert(deadline, i);
        expected.entry(deadline).or_default().push(i);
    }
    // Background traffic: short timers inserted and handed out all along.
    let mut serial = 1 << 40;
    for now in 1..first + 4_096 {
        for _ in 0..8 {
            let deadline = now + 1 + next(50);
            wheel.insert(deadline, serial);
            expected.entry(deadline).or_default().push(serial);
            serial += 1;
        }
        let out: Vec<u64> = wheel.advance(now).map(|e| e.value).collect();
        assert_eq!(out, expected.remove(&now).unwrap_or_default(), "tick {now}");
    }
    let rest: usize = expected.values().map(Vec::len).sum();
    assert_eq!(wheel.len(), rest);
}

/// A dense wheel, stepped tick by tick while timers come and go the way the service handles
/// them: a cancelled or postponed timer leaves its entry behind, stale, and a postponed one is
/// inserted again; stale entries are skipped when handed out and compacted by `retain` a few
/// dozen at a time. Against a `BTreeMap`: nothing live comes out early, late, twice, or not at
/// all, on any slot count, and `retain` keeps the stale entries from piling up.
#[test]
fn dense_wheel_with_stale_entries_matches_a_sorted_map() {
    for slots in [2, 4, 64] {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let mut wheel = Wheel::with_slots(slots).unwrap();
        // (deadline, timer) of live timers, and each timer's current ticket.
        let mut live: BTreeMap<(u64, u64), ()> = BTreeMap::new();
        let mut tickets: Vec<(u64, u32)> = Vec::new(); // (deadline, ticket)
        let mut handed_out_stale = 0usize;
        for now in 1..6_000u64 {
            for _ in 0..next(12) {
                let deadline = now + next(9_000);
                let timer = tickets.len() as u64;
                tickets.push((deadline, 0));
                wheel.insert(deadline, [timer as u32, 0]);
                live.insert((deadline, timer), ());
            }
            if next(2) == 0 && !tickets.is_empty() {
                let timer = next(tickets.len() as u64);
                let (deadline, ticket) = tickets[timer as usize];
                if live.remove(&(deadline, timer)).is_some() {
                    if next(2) == 0 {
                        tickets[timer as usize] = (u64::MAX, ticket + 1); // cancelled
                    } else {
                        let moved = now + next(3_000);
                        tickets[timer as usize] = (moved, ticket + 1);
                        wheel.insert(moved, [timer as u32, ticket + 1]);
                        live.insert((moved, timer), ());
                    }
                }
            }
            let is_live = |value: &[u32; 2]| tickets[value[0] as usize].1 == value[1];
            let mut out = Vec::new();
            for entry in wheel.advance(now) {
                assert!(entry.deadline <= now, "early");
                if is_live(&entry.value) {
                    out.push((entry.deadline, entry.value[0] as u64));
                } else {
                    handed_out_stale += 1;
                }
            }
            let due: Vec<(u64, u64)> = live.range(..(now + 1, 0)).map(|(&k, _)| k).collect();
            for k in &due {
                live.remove(k);
            }
            for &(_, timer) in &out {
                tickets[timer as usize].1 += 1; // fired: any copy left is stale
            }
            out.sort_unstable();
            assert_eq!(out, due, "{slots} slots, tick {now}");
            let is_live = |value: &[u32; 2]| tickets[value[0] as usize].1 == value[1];
            wheel.retain(40, |_, value| is_live(value));
            assert!(wheel.len() >= live.len());
            if let Some(next_tick) = wheel.next_expiration() {
                let earliest = live.keys().next().map(|&(d, _)| d);
                assert!(earliest.is_none_or(|d| next_tick <= d.max(now)));
            }
        }
        assert!(
            wheel.len() < 2 * live.len() + 200,
            "{slots} slots: {} held for {} live",
            wheel.len(),
            live.len()
        );
        assert!(
            handed_out_stale > 0,
            "some stale entries reached their slot"
        );
    }
}

// --- retain --------------------------------------------------------------------------------

#[test]
fn retain_on_an_empty_wheel_examines_nothing() {
    let mut wheel = Wheel::<u64>::new();
    assert_eq!(wheel.retain(10, |_, _| unreachable!()), 0);
    assert_eq!(wheel.retain(0, |_, _| unreachable!()), 0);
    wheel.insert(5, 5);
    assert_eq!(wheel.retain(0, |_, _| unreachable!()), 0, "budget 0");
}

/// Entries on many levels and both rotations: a round in small calls examines each once, in
/// calls of exactly `budget` but the last; the next round starts over from the first slot.
#[test]
fn retain_walks_a_round_and_wraps_around() {
    let mut wheel = Wheel::new();
    let mut all = BTreeSet::new();
    for i in 0..3_000u64 {
        let deadline = (i * i * 7919) % 10_000_000 + i % 3;
        wheel.insert(deadline, i);
        all.insert((deadline, i));
    }
    for budget in [1, 7, 64, 1_000, 5_000] {
        // First call ends any round under way.
        while wheel.retain(budget, |_, _| true) == budget {}
        let calls = retain_round(&mut wheel, budget, |_, _| true);
        let (last, full) = calls.split_last().unwrap();
        assert!(full.iter().all(|c| c.len() == budget));
        assert!(last.len() < budget);
        let seen: Vec<(u64, u64)> = calls.concat();
        assert_eq!(seen.len(), all.len(), "budget {budget}: once each");
        assert_eq!(seen.iter().copied().collect::<BTreeSet<_>>(), all);
    }
}

/// A round in calls that stop inside slots, with rejections: the survivors are exactly the
/// kept ones, each slot keeps its order, and the rounds that follow see only survivors.
#[test]
fn retain_resumes_inside_slots_and_keeps_order() {
    let mut wheel = Wheel::new();
    for i in 0..20_000u64 {
        wheel.insert(100_000 + i % 4, i); // one level-2 slot, four ticks
    }
    let calls = retain_round(&mut wheel, 100, |_, &i| i % 5 != 0);
    assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), 20_000);
    assert_eq!(wheel.len(), 16_000);
    let again: Vec<(u64, u64)> = retain_round(&mut wheel, 333, |_, _| true).concat();
    assert!(again.iter().all(|&(_, i)| i % 5 != 0));
    assert_eq!(again.len(), 16_000);
    for tick in 100_000..100_004 {
        let expected: Vec<u64> = (0..20_000)
            .filter(|i| i % 4 == tick - 100_000 && i % 5 != 0)
            .collect();
        assert_eq!(due(&mut wheel, tick), expected, "tick {tick}");
    }
}

/// A compaction stopped inside a slot, then the slot's first chunk is handed out and reused by
/// another slot before the compaction goes on: it must not write into the chunk it no longer
/// owns.
#[test]
fn retain_resumes_after_its_chunks_were_handed_out_and_reused() {
    let mut wheel = Wheel::new();
    for i in 0..3 * CHUNK {
        wheel.insert(10, i);
    }
    // Keep the even ones of the first chunk (it keeps room at its end), and stop a few
    // entries into the second chunk, whose kept entries went into the first.
    let budget = CHUNK as usize + 5;
    assert_eq!(wheel.retain(budget, |_, &i| i % 2 == 0), budget);
    let kept_before: Vec<u64> = (0..CHUNK + 5).filter(|i| i % 2 == 0).collect();
    // Hand out all of those: the first chunk goes back to the pool...
    let out: Vec<u64> = wheel
        .advance(10)
        .take(kept_before.len())
        .map(|e| e.value)
        .collect();
    assert_eq!(out, kept_before);
    // ...and another slot takes it.
    wheel.insert(20, 1_000);
    // The compaction goes on; entries it keeps must stay in slot 10.
    while wheel.retain(10, |_, &i| i % 2 == 0 || i == 1_000) == 10 {}
    let rest: Vec<u64> = (CHUNK + 5..3 * CHUNK).filter(|i| i % 2 == 0).collect();
    assert_eq!(due(&mut wheel, 10), rest);
    assert_eq!(due(&mut wheel, 20), [1_000]);
    assert!(wheel.is_empty());
}

/// `retain` while the early cascade is half-way through a slot: part of it has moved into the
/// next rotation of the level below, part waits in the slot. A round sees every entry once,
/// wherever it is, and removes exactly the rejected ones; each comes out on time afterwards.
#[test]
fn retain_during_a_partly_cascaded_slot() {
    let mut wheel = Wheel::new();
    let rejected = |i: u64| i.is_multiple_of(7);
    let mut expected: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut insert = |wheel: &mut Wheel<u64>, deadline: u64, i: u64| {
        wheel.insert(deadline, i);
        if !rejected(i) {
            expected.entry(deadline).or_default().push(i);
        }
    };
    // Ticks 4 160..4 224: level 2, slot 1, seen from tick 0. The advance to 4 096 moves them
    // all early into level 1's next rotation, slot 1, which then turns current: at 4 096,
    // level 1's next slot holds 5 000 entries, and its early cascade moves two per operation.
    let n = 5_000u64;
    for i in 0..n {
        insert(&mut wheel, 4_160 + i % 64, i);
    }
    assert_eq!(wheel.advance(4_096).count(), 0);
    for batch in 0..20u64 {
        // Each batch earns 200 early moves, short of the 5 000.
        for j in 0..100 {
            let i = n + batch * 100 + j;
            insert(&mut wheel, 4_400 + i % 50, i);
        }
        assert_eq!(wheel.advance(4_096).count(), 0);
        let held = wheel.len();
        let seen: Vec<(u64, u64)> = retain_round(&mut wheel, 37, |_, &i| !rejected(i)).concat();
        let unique: BTreeSet<_> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "batch {batch}: seen twice");
        assert_eq!(seen.len(), held, "batch {batch}: a round sees every entry");
    }
    for tick in 4_096..4_500 {
        assert_eq!(
            due(&mut wheel, tick),
            expected.remove(&tick).unwrap_or_default(),
            "tick {tick}"
        );
    }
    assert!(wheel.is_empty());
}

#[test]
fn retain_prefetched_sees_every_value_ahead_of_keep() {
    let mut wheel = Wheel::new();
    for i in 0..1_000u64 {
        wheel.insert(50 + i % 300, i);
    }
    let fetched = std::cell::RefCell::new(BTreeSet::new());
    let mut late = 0;
    let n = wheel.retain_prefetched(
        usize::MAX,
        |&i| {
            fetched.borrow_mut().insert(i);
        },
        |_, i| {
            if !fetched.borrow().contains(i) {
                late += 1;
            }
            i % 2 == 0
        },
    );
    assert_eq!(n, 1_000);
    assert_eq!(late, 0, "every value was prefetched before keep saw it");
    assert_eq!(wheel.len(), 500);
}

// --- memory --------------------------------------------------------------------------------

#[test]
fn a_slot_keeps_the_value_and_the_low_half_of_the_deadline() {
    assert_eq!(std::mem::size_of::<Entry<[u32; 2]>>(), 16);
    assert_eq!(Wheel::<[u32; 2]>::entry_footprint(), 12);
    assert_eq!(Wheel::<u64>::entry_footprint(), 16);
    assert_eq!(Wheel::<u32>::entry_footprint(), 8);
}

/// Chunks go back to the pool as slots empty and come out of it again: a wheel filled and
/// emptied over and over, by hand-outs, drains and `retain`, allocates only in the first round.
#[test]
fn the_chunk_pool_is_reused() {
    let mut wheel = Wheel::new();
    let mut bytes = None;
    for round in 0..7u64 {
        let base = wheel.now();
        for i in 0..50_000 {
            wheel.insert(base + 1 + (i * 7919) % 20_000, i);
        }
        if let Some(bytes) = bytes {
            assert_eq!(wheel.allocated_bytes(), bytes, "round {round}");
        }
        match round % 3 {
            0 => assert_eq!(wheel.advance(base + 20_001).count(), 50_000),
            1 => assert_eq!(wheel.drain().count(), 50_000),
            _ => while wheel.retain(1_000, |_, _| false) == 1_000 {},
        }
        assert!(wheel.is_empty(), "round {round}");
        // The first round's hand-out, with its cascades, is the high-water mark.
        let after = wheel.allocated_bytes();
        assert_eq!(*bytes.get_or_insert(after), after, "round {round}");
    }
}

/// `try_reserve` makes room up front: inserting that many afterwards, and cascading them,
/// allocates nothing more.
#[test]
fn try_reserve_makes_room_that_inserts_and_cascades_use() {
    let mut wheel = Wheel::new();
    wheel.try_reserve(200_000).unwrap();
    let bytes = wheel.allocated_bytes();
    assert_eq!(bytes, Wheel::<u64>::reserved_bytes(64, 200_000));
    for i in 0..200_000u64 {
        wheel.insert(1 + (i * 7919) % 10_000, i);
    }
    assert_eq!(wheel.allocated_bytes(), bytes);
    let mut handed_out = 0;
    for now in (0..=10_000).step_by(10) {
        handed_out += wheel.advance(now).count();
        assert_eq!(wheel.allocated_bytes(), bytes, "tick {now}");
    }
    assert_eq!(handed_out, 200_000);
    wheel.try_reserve(10).unwrap();
    assert_eq!(wheel.allocated_bytes(), bytes, "room enough already");
}

#[test]
fn try_reserve_reports_what_cannot_be_had() {
    let mut wheel = Wheel::<u64>::new();
    wheel.insert(5, 5);
    let bytes = wheel.allocated_bytes();
    assert!(wheel.try_reserve(usize::MAX).is_err());
    assert!(
        wheel.try_reserve(u32::MAX as usize * 64).is_err(),
        "past the chunk ids"
    );
    assert_eq!(
        wheel.allocated_bytes(),
        bytes,
        "nothing allocated for a refusal"
    );
    assert_eq!(due(&mut wheel, 5), [5]);
}

/// `reserved_bytes` is what a reserved wheel allocates: the entries in chunks (12 bytes each
/// with an 8-byte value, 84 to a 1 KiB chunk, plus room for partly filled chunks) and the
/// levels' tables.
#[test]
fn reserved_bytes_counts_entries_and_tables() {
    let empty = Wheel::<[u32; 2]>::reserved_bytes(64, 0);
    assert_eq!(empty, Wheel::<[u32; 2]>::new().allocated_bytes());
    assert!(Wheel::<[u32; 2]>::reserved_bytes(4096, 0) > 16 * empty);
    for entries in [1, 1_000, 1_000_000, 5_000_000] {
        let bytes = Wheel::<[u32; 2]>::reserved_bytes(64, entries) - empty;
        assert!(bytes >= 12 * entries, "{entries}");
        // 1 KiB per 84 entries, room for 4 × 64 + 64 partly filled 1 KiB chunks, a chunk for
        // rounding up, and the blocks' pointers.
        let most = entries * 1024 / 84 + 320 * 1024 + 1024 + 8 * 1024;
        assert!(bytes <= most, "{entries}: {bytes} > {most}");
        let mut wheel = Wheel::<[u32; 2]>::new();
        wheel.try_reserve(entries).unwrap();
        assert_eq!(
            wheel.allocated_bytes(),
            Wheel::<[u32; 2]>::reserved_bytes(64, entries)
        );
    }
    assert_eq!(
        Wheel::<u64>::reserved_bytes(0, 0),
        Wheel::<u64>::reserved_bytes(1, 0)
    );
}

#[test]
fn clone_is_independent() {
    let mut wheel = Wheel::new();
    wheel.insert(10, 1);
    let mut copy = wheel.clone();
    copy.drain().for_each(drop);
    copy.insert(12, 2);
    assert_eq!(due(&mut wheel, 12), [1]);
    assert_eq!(due(&mut copy, 12), [2]);
    assert!(format!("{wheel:?}").contains("now: 12"));
}

/// Deadlines past the top level (2^36 ticks with 64 slots) wait outside the levels; the clock
/// places them when it reaches the top rotation of the earliest, not at every rotation on the
/// way, and each still comes out exactly on time.
#[test]
fn far_deadlines_wait_beyond_the_levels_and_come_out_on_time() {
    let mut wheel = Wheel::new();
    let deadlines = [
        (1u64 << 36) - 1,
        1 << 36,
        1 << 40,
        (1 << 40) + 5,
        (1 << 62) + 7,
        u64::MAX,
    ];
    for &d in deadlines.iter().rev() {
        wheel.insert(d, d);
    }
    let mut seen = Vec::new();
    let mut steps = 0;
    while let Some(next) = wheel.next_expiration() {
        steps += 1;
        assert!(due(&mut wheel, next - 1).is_empty(), "early before {next}");
        for d in due(&mut wheel, next) {
            assert_eq!(d, next, "exactly on time");
            seen.push(d);
        }
    }
    assert_eq!(seen, deadlines);
    assert!(
        steps < 100,
        "{steps} steps: the far list stepped through rotations"
    );
}

/// An entry inserted due already comes out first on the next advance, in insertion order
/// among its kind, and `retain` examines it like any other.
#[test]
fn entries_inserted_due_come_first_and_retain_sees_them() {
    let mut wheel = Wheel::new();
    wheel.insert(1_000, 'b');
    assert!(due(&mut wheel, 999).is_empty());
    wheel.insert(5, 'a');
    wheel.insert(3, 'c');
    wheel.insert(7, 'd');
    assert_eq!(wheel.next_expiration(), Some(999));
    let mut examined = Vec::new();
    assert_eq!(
        wheel.retain(10, |deadline, &v| {
            examined.push((deadline, v));
            v != 'c'
        }),
        4
    );
    examined.sort_unstable();
    assert_eq!(examined, [(3, 'c'), (5, 'a'), (7, 'd'), (1_000, 'b')]);
    assert_eq!(due(&mut wheel, 1_000), ['a', 'd', 'b']);
    assert!(wheel.is_empty());
}

/// `retain` empties the far list; the clock moves past where its entry was due; a new far
/// entry then sets its own time, not the removed one's.
#[test]
fn a_far_entry_removed_by_retain_leaves_no_stale_wake_up() {
    let mut wheel = Wheel::new();
    wheel.insert(1 << 40, 1u32);
    assert_eq!(wheel.retain(10, |_, _| false), 1);
    assert!(due(&mut wheel, (1 << 40) + 1).is_empty());
    let far = (1u64 << 41) + 3;
    wheel.insert(far, 2);
    let next = wheel.next_expiration().unwrap();
    assert!(next > wheel.now() && next <= far, "{next}");
    assert_eq!(due(&mut wheel, far - 1), []);
    assert_eq!(due(&mut wheel, far), [2]);
}
