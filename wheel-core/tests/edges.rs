//! Unit tests for the edges of `Wheel`'s contract: the clock, past and extreme deadlines,
//! budgets, rescheduling, stale keys, drain, geometry, cascades, ordering and footprint.

use wheel_core::{Entry, StaleKey, TimerKey, Wheel};

/// The values `advance(now)` hands out, in order.
fn due<T>(wheel: &mut Wheel<T>, now: u64) -> Vec<T> {
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

/// Asserts every operation on `key` reports it as stale.
fn assert_stale<T: std::fmt::Debug>(wheel: &mut Wheel<T>, key: TimerKey) {
    assert!(!wheel.contains(key));
    assert_eq!(wheel.deadline(key), None);
    assert!(wheel.get(key).is_none());
    assert!(wheel.get_mut(key).is_none());
    assert_eq!(wheel.reschedule(key, 7), Err(StaleKey(key)));
    assert!(wheel.remove(key).is_none());
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
    assert_eq!(wheel.poll(50), None);
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
    let key = wheel.insert(3, "late");
    assert_eq!(wheel.deadline(key), Some(3));
    assert_eq!(wheel.next_expiration(), Some(1_000));
    assert_eq!(due(&mut wheel, 1_000), ["late"]);
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
    // At the end of time, everything is due at once.
    wheel.insert(u64::MAX, "again");
    wheel.insert(0, "past");
    assert_eq!(wheel.next_expiration(), Some(u64::MAX));
    assert_eq!(due(&mut wheel, u64::MAX), ["again", "past"]);
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
        assert_eq!(
            wheel
                .advance(10)
                .take(1)
                .map(|e| e.value)
                .collect::<Vec<_>>(),
            [i]
        );
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

// --- reschedule ----------------------------------------------------------------------------

#[test]
fn reschedule_later_earlier_and_into_the_past() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(5_000, "x");
    wheel.reschedule(key, 100_000).unwrap();
    assert_eq!(wheel.deadline(key), Some(100_000));
    assert!(due(&mut wheel, 99_999).is_empty());
    wheel.reschedule(key, 100_050).unwrap();
    wheel.reschedule(key, 99_999).unwrap();
    assert_eq!(wheel.next_expiration(), Some(99_999));
    wheel.reschedule(key, 7).unwrap();
    assert_eq!(wheel.deadline(key), Some(7));
    assert_eq!(wheel.next_expiration(), Some(99_999));
    let out: Vec<Entry<&str>> = wheel.advance(99_999).collect();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].key, out[0].deadline, out[0].value), (key, 7, "x"));
    assert_stale(&mut wheel, key);
}

#[test]
fn a_postponed_entry_is_placed_again_when_its_old_slot_is_reached() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(300, 'a');
    wheel.insert(300, 'b');
    wheel.reschedule(a, 300).unwrap();
    assert_eq!(
        due(&mut wheel, 300),
        ['a', 'b'],
        "the same deadline: nothing moves"
    );
    let c = wheel.insert(400, 'c');
    wheel.reschedule(c, 100_000).unwrap();
    assert_eq!(wheel.deadline(c), Some(100_000));
    // Its old slot comes first (a wake-up with nothing due), then the real one.
    assert!(wheel.next_expiration().unwrap() <= 400);
    assert!(due(&mut wheel, 99_999).is_empty());
    assert!(wheel.next_expiration().unwrap() > 400);
    assert_eq!(due(&mut wheel, 100_000), ['c']);
    assert!(wheel.is_empty());
}

#[test]
fn reschedule_across_levels_keeps_the_key() {
    let mut wheel = Wheel::with_slots(4).unwrap();
    let key = wheel.insert(3, 0);
    for d in [1 << 40, 2, u64::MAX, 17, 1 << 20] {
        wheel.reschedule(key, d).unwrap();
        assert_eq!(wheel.deadline(key), Some(d));
        assert!(wheel.next_expiration().unwrap() <= d);
    }
    assert!(due(&mut wheel, (1 << 20) - 1).is_empty());
    assert_eq!(due(&mut wheel, 1 << 20), [0]);
}

// --- stale keys ----------------------------------------------------------------------------

#[test]
fn stale_key_never_touches_the_entry_reusing_its_place() {
    let mut wheel = Wheel::new();
    let old = wheel.insert(10, "old");
    assert_eq!(wheel.remove(old), Some("old"));
    let new = wheel.insert(20, "new");
    assert_eq!(new.index(), old.index(), "the slab reuses the place");
    assert_ne!(new.generation(), old.generation());
    assert_stale(&mut wheel, old);
    assert_eq!(wheel.deadline(new), Some(20));
    assert_eq!(wheel.get(new), Some(&"new"));
    assert_eq!(due(&mut wheel, 20), ["new"]);
}

#[test]
fn keys_of_handed_out_and_drained_entries_are_stale() {
    let mut wheel = Wheel::new();
    let fired = wheel.insert(1, 1);
    let drained = wheel.insert(1_000, 2);
    assert_eq!(wheel.poll(1).map(|e| e.key), Some(fired));
    let reused = wheel.insert(5, 3);
    assert_eq!(reused.index(), fired.index());
    assert_stale(&mut wheel, fired);
    let mut drained_keys: Vec<_> = wheel.drain().map(|e| e.key).collect();
    drained_keys.sort();
    assert_eq!(drained_keys, [reused, drained]);
    assert_stale(&mut wheel, drained);
    assert_stale(&mut wheel, reused);
}

#[test]
fn get_mut_edits_the_value_in_place() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(3, String::from("a"));
    wheel.get_mut(key).unwrap().push('b');
    assert_eq!(due(&mut wheel, 3), ["ab"]);
}

#[test]
fn key_round_trips_through_u64() {
    let mut wheel = Wheel::new();
    wheel.insert(1, ());
    let key = wheel.insert(2, ());
    assert_eq!(TimerKey::from_u64(key.to_u64()), key);
    assert!(StaleKey(key).to_string().contains("stale"));
}

// --- drain ---------------------------------------------------------------------------------

#[test]
fn drain_hands_out_everything_with_its_deadline() {
    let mut wheel = Wheel::new();
    wheel.advance(10).for_each(drop);
    let deadlines = [3, 10, 11, 5_000, 1 << 33, u64::MAX];
    let keys: Vec<_> = deadlines.iter().map(|&d| wheel.insert(d, d)).collect();
    let mut out: Vec<_> = wheel
        .drain()
        .map(|e| (e.key, e.deadline, e.value))
        .collect();
    out.sort_by_key(|&(_, d, _)| d);
    let expected: Vec<_> = keys
        .iter()
        .zip(deadlines)
        .map(|(&k, d)| (k, d, d))
        .collect();
    assert_eq!(out, expected);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!(wheel.now(), 10, "drain leaves the clock alone");
}

#[test]
fn dropping_drain_early_leaves_an_empty_usable_wheel() {
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..100u64).map(|i| wheel.insert(i * 37, i)).collect();
    let mut drain = wheel.drain();
    assert_eq!(drain.size_hint(), (100, Some(100)));
    assert_eq!(drain.by_ref().take(2).count(), 2);
    assert_eq!(drain.size_hint(), (98, Some(98)));
    drop(drain);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    assert!(due(&mut wheel, u64::MAX - 1).is_empty());
    for key in keys {
        assert_stale(&mut wheel, key);
    }
    wheel.insert(u64::MAX, 7);
    wheel.insert(u64::MAX - 1, 8);
    assert_eq!(due(&mut wheel, u64::MAX), [8, 7]);
}

#[test]
fn drain_drops_the_values_it_does_not_hand_out() {
    let witness = std::rc::Rc::new(());
    let mut wheel = Wheel::new();
    for i in 0..10 {
        wheel.insert(i, std::rc::Rc::clone(&witness));
    }
    drop(wheel.drain().take(3).collect::<Vec<_>>());
    assert_eq!(std::rc::Rc::strong_count(&witness), 1);
}

// --- geometry ------------------------------------------------------------------------------

#[test]
fn with_slots_rounds_up_to_a_power_of_two() {
    let cases = [
        (1, 2, 64),
        (2, 2, 64),
        (3, 4, 32),
        (4, 4, 32),
        (64, 64, 11),
        (500, 512, 8),
    ];
    for (asked, slots, levels) in cases.into_iter().chain([(4096, 4096, 6)]) {
        let wheel = Wheel::<()>::with_slots(asked).unwrap();
        assert_eq!(
            (wheel.slots_per_level(), wheel.levels()),
            (slots, levels),
            "{asked}"
        );
    }
    let default = Wheel::<()>::new();
    assert_eq!(default.slots_per_level(), Wheel::<()>::DEFAULT_SLOTS);
    assert_eq!(default.levels(), 11);
}

#[test]
fn with_slots_rejects_zero_and_too_many() {
    for bad in [0, Wheel::<()>::MAX_SLOTS + 1, usize::MAX] {
        let err = Wheel::<()>::with_slots(bad).unwrap_err();
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
fn many_entries_in_one_slot_keep_fifo_order() {
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..10_000u32).map(|i| wheel.insert(123_456, i)).collect();
    for key in keys.iter().skip(1).step_by(3) {
        wheel.remove(*key).unwrap();
    }
    let expected: Vec<u32> = (0..10_000).filter(|i| i % 3 != 1).collect();
    assert!(due(&mut wheel, 123_455).is_empty());
    assert_eq!(due(&mut wheel, 123_456), expected);
}

/// Removed entries leave stale references in their slot's array until it is walked or
/// compacted, and their nodes are reused at once, often into the same slot. Heavy churn on a
/// few slots (compactions, reuse into the slot a node just left, reschedules within a slot)
/// must still hand out exactly the live entries, each once, FIFO within a deadline.
#[test]
fn churn_through_stale_references_loses_and_duplicates_nothing() {
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    let mut wheel = Wheel::new();
    let deadlines = [3u64, 70, 5_000, 300_000];
    // (deadline, serial) -> key; BTreeMap order is the expected hand-out order.
    let mut live = std::collections::BTreeMap::new();
    let mut serial = 0u64;
    for round in 0..40 {
        for _ in 0..500 {
            let deadline = deadlines[next(4) as usize];
            let key = wheel.insert(deadline, (deadline, serial));
            live.insert((deadline, serial), key);
            serial += 1;
        }
        let picks: Vec<_> = live.keys().copied().filter(|_| next(10) < 7).collect();
        for (deadline, s) in picks {
            let key = live.remove(&(deadline, s)).unwrap();
            if next(4) == 0 {
                // Out of its slot (one tick earlier, often the same slot higher up) and
                // postponed back: a new place, and a postponement to settle on the way.
                wheel.reschedule(key, deadline - 1).unwrap();
                wheel.reschedule(key, deadline).unwrap();
                *wheel.get_mut(key).unwrap() = (deadline, serial);
                live.insert((deadline, serial), key);
                serial += 1;
            } else {
                assert_eq!(wheel.remove(key), Some((deadline, s)), "round {round}");
            }
        }
        assert_eq!(wheel.len(), live.len());
    }
    let mut out: Vec<_> = wheel.advance(u64::MAX).map(|e| e.value).collect();
    assert!(
        out.windows(2).all(|w| w[0].0 <= w[1].0),
        "in deadline order"
    );
    out.sort();
    let expected: Vec<_> = live.keys().copied().collect();
    assert_eq!(out, expected);
    assert!(wheel.is_empty());
}

/// A slot's array lives in chunks of 1 024 references that compaction and emptying give back
/// to the level's pool. Thousands of entries in one slot, removed and re-added in waves, make
/// compactions run across chunk boundaries and reuse positions past the cut: the live entries
/// must still come out once each, in FIFO order.
#[test]
fn compaction_across_chunks_keeps_exactly_the_live_entries_in_order() {
    let mut next = xorshift(0xC0FF_EE00_1234_5678);
    let mut wheel = Wheel::new();
    let deadline = 300_000; // a level-2 slot, then a cascade through levels 1 and 0
    let mut live: Vec<(u64, wheel_core::TimerKey)> = Vec::new(); // (serial, key), FIFO
    let mut serial = 0u64;
    for wave in 0..6 {
        for _ in 0..3_000 {
            live.push((serial, wheel.insert(deadline, serial)));
            serial += 1;
        }
        let mut kept = Vec::new();
        let mut moved = Vec::new();
        for (s, key) in live.drain(..) {
            match next(10) {
                0..=6 => assert_eq!(wheel.remove(key), Some(s), "wave {wave}"),
                7 => {
                    // Out of its place and postponed back, under a new serial.
                    wheel.reschedule(key, deadline - 1).unwrap();
                    wheel.reschedule(key, deadline).unwrap();
                    *wheel.get_mut(key).unwrap() = serial;
                    moved.push((serial, key));
                    serial += 1;
                }
                _ => kept.push((s, key)),
            }
        }
        kept.extend(moved);
        live = kept;
        assert_eq!(wheel.len(), live.len());
    }
    assert!(due(&mut wheel, deadline - 1).is_empty());
    let mut expected: Vec<u64> = live.iter().map(|&(s, _)| s).collect();
    let mut out = due(&mut wheel, deadline);
    expected.sort();
    out.sort();
    assert_eq!(out, expected);
    assert!(wheel.is_empty());
}

/// A dense wheel, stepped tick by tick while entries come and go, against a `BTreeMap`: the
/// early cascade moves entries into levels' next rotations as the clock runs, and nothing may
/// come out early, late, twice, or not at all, on any slot count.
#[test]
fn dense_wheel_stepped_tick_by_tick_matches_a_sorted_map() {
    for slots in [2, 4, 64] {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let mut wheel = Wheel::with_slots(slots).unwrap();
        let mut model = std::collections::BTreeMap::new();
        let mut keys = Vec::new();
        let mut serial = 0u64;
        for now in 1..6_000u64 {
            for _ in 0..next(12) {
                let deadline = now + next(9_000);
                let key = wheel.insert(deadline, serial);
                model.insert((deadline, serial), key);
                keys.push((deadline, serial, key));
                serial += 1;
            }
            if next(4) == 0 && !keys.is_empty() {
                let (deadline, s, key) = keys.swap_remove(next(keys.len() as u64) as usize);
                if model.remove(&(deadline, s)).is_some() {
                    if next(2) == 0 {
                        assert_eq!(wheel.remove(key), Some(s));
                    } else {
                        let moved = now + next(3_000);
                        wheel.reschedule(key, moved).unwrap();
                        model.insert((moved, s), key);
                        keys.push((moved, s, key));
                    }
                }
            }
            let out: Vec<(u64, u64)> = wheel.advance(now).map(|e| (e.deadline, e.value)).collect();
            let due: Vec<(u64, u64)> = model.range(..(now + 1, 0)).map(|(&k, _)| k).collect();
            for k in &due {
                model.remove(k);
            }
            let mut sorted = out.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, due, "{slots} slots, tick {now}");
            assert!(out.iter().all(|&(d, _)| d <= now), "nothing early");
            assert_eq!(wheel.len(), model.len());
            if let Some(next_tick) = wheel.next_expiration() {
                let earliest = model.keys().next().map(|&(d, _)| d);
                assert!(
                    earliest.is_none_or(|d| next_tick <= d.max(now)),
                    "{slots} slots, tick {now}: next_expiration {next_tick} after {earliest:?}"
                );
            }
        }
    }
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

// --- memory --------------------------------------------------------------------------------

#[test]
fn bookkeeping_per_entry_is_at_most_32_bytes() {
    let footprints = [
        Wheel::<u64>::entry_footprint(),
        Wheel::<usize>::entry_footprint(),
        Wheel::<()>::entry_footprint(),
        Wheel::<Box<dyn FnOnce() + Send>>::entry_footprint(),
    ];
    for footprint in footprints {
        assert!(footprint <= 32, "{footprints:?} bytes");
    }
}

#[test]
fn inserting_after_warm_up_does_not_grow_capacity() {
    let mut wheel = Wheel::new();
    wheel.reserve(1_000);
    let reserved = wheel.capacity();
    assert!(reserved >= 1_000);
    for round in 0..5u64 {
        let keys: Vec<_> = (0..1_000)
            .map(|i| wheel.insert(round * 10_000 + i * 7, i))
            .collect();
        assert_eq!(wheel.capacity(), reserved, "round {round}");
        for key in keys.iter().step_by(2) {
            wheel.remove(*key);
        }
        wheel.advance((round + 1) * 10_000).for_each(drop);
        assert!(wheel.is_empty());
    }
}

#[test]
fn clone_is_independent() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(10, 1);
    let mut copy = wheel.clone();
    copy.remove(key);
    assert_eq!(due(&mut wheel, 10), [1]);
    assert!(copy.is_empty());
    assert!(format!("{wheel:?}").contains("now: 10"));
}

/// A forgotten `Drain` leaves the entries it did not hand out in the wheel, still due on time.
#[test]
fn forgotten_drain_leaves_a_consistent_wheel() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(10, "a");
    wheel.insert(10, "b");
    let mut drain = wheel.drain();
    let first = drain.next().unwrap();
    std::mem::forget(drain);
    assert_eq!(first.key, a);
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.next_expiration(), Some(10));
    let c = wheel.insert(10, "c");
    assert!(wheel.contains(c));
    let due: Vec<_> = wheel.advance(10).map(|e| e.value).collect();
    assert_eq!(due, ["b", "c"]);
    assert!(wheel.is_empty());
}

/// `reserve` creates vacant places ahead of time: they hold nothing, a key naming one is not
/// live, inserts use them without growing the wheel, and a drain hands out only live entries.
#[test]
fn reserved_places_are_vacant_until_used() {
    let mut wheel = Wheel::new();
    let early = wheel.insert(5, "early");
    wheel.reserve(50_000);
    let capacity = wheel.capacity();
    assert!(capacity >= 50_001);
    assert_eq!(wheel.len(), 1);
    let unused = TimerKey::from_u64(40_000u64 << 32); // generation 0
    assert!(!wheel.contains(unused));
    assert_eq!(wheel.remove(unused), None);
    let keys: Vec<_> = (0..50_000u64)
        .map(|i| wheel.insert(10 + i, "later"))
        .collect();
    assert_eq!(
        wheel.capacity(),
        capacity,
        "no growth up to the reservation"
    );
    assert_eq!(wheel.remove(early), Some("early"));
    assert_eq!(wheel.deadline(keys[123]), Some(133));
    wheel.reserve(10); // enough vacant places already: nothing to do
    assert_eq!(wheel.capacity(), capacity);
    let drained: Vec<_> = wheel.drain().collect();
    assert_eq!(drained.len(), 50_000);
    assert!(wheel.is_empty());
}

/// `try_reserve` makes the same room as `reserve`, and a request past the index space comes
/// back as an error, with the wheel as it was, instead of a panic.
#[test]
fn try_reserve_reports_what_reserve_cannot_do() {
    let mut wheel = Wheel::new();
    let early = wheel.insert(5, "early");
    wheel.try_reserve(50_000).unwrap();
    let capacity = wheel.capacity();
    assert!(capacity >= 50_001);
    assert!(
        wheel.try_reserve(u32::MAX as usize).is_err(),
        "one live entry and u32::MAX more"
    );
    assert!(wheel.try_reserve(usize::MAX).is_err());
    assert_eq!(
        wheel.capacity(),
        capacity,
        "nothing allocated for a refusal"
    );
    assert_eq!(wheel.len(), 1);
    let keys: Vec<_> = (0..50_000u64)
        .map(|i| wheel.insert(10 + i, "later"))
        .collect();
    assert_eq!(wheel.capacity(), capacity, "the room is usable");
    assert_eq!(wheel.remove(early), Some("early"));
    assert_eq!(wheel.deadline(keys[7]), Some(17));
}

/// `reserved_bytes` counts at least the places `reserve` makes, and the levels on top.
#[test]
fn reserved_bytes_grows_with_entries_and_slots() {
    let per_entry = std::mem::size_of::<u64>() + Wheel::<u64>::entry_footprint();
    let empty = Wheel::<u64>::reserved_bytes(64, 0);
    assert!(empty > 0, "the levels' slot tables");
    assert!(Wheel::<u64>::reserved_bytes(4096, 0) > 32 * empty);
    let full = Wheel::<u64>::reserved_bytes(64, 1_000_000);
    assert!(full - empty >= 1_000_000 * per_entry);
    assert!(full - empty <= 1_000_000 * per_entry + 2 * 16_384 * per_entry);
    assert_eq!(
        Wheel::<u64>::reserved_bytes(0, 0),
        Wheel::<u64>::reserved_bytes(1, 0)
    );
}
