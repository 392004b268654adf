//! Property tests: random operation sequences run against `Wheel` and against a reference model
//! (a `BTreeMap` ordered by deadline), checked against each other after every operation.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use proptest::sample::Index;
use wheel_core::{Entry, StaleKey, TimerKey, Wheel};

/// A deadline, chosen relative to the wheel's clock when the operation runs.
#[derive(Debug, Clone)]
enum When {
    /// `now + n` for small `n`: the lowest levels.
    Near(u64),
    /// `now + n` for `n` up to a few hundred thousand: the middle levels.
    Medium(u64),
    /// `now - n`: already due.
    Past(u64),
    /// Any tick at all.
    Anywhere(u64),
    /// `u64::MAX - n`.
    NearMax(u64),
}

impl When {
    fn resolve(&self, now: u64) -> u64 {
        match *self {
            When::Near(n) | When::Medium(n) => now.saturating_add(n),
            When::Past(n) => now.saturating_sub(n),
            When::Anywhere(tick) => tick,
            When::NearMax(n) => u64::MAX - n,
        }
    }
}

/// An advance target.
#[derive(Debug, Clone)]
enum Target {
    Step(u64),
    Jump(u64),
    NextExpiration,
    JustBeforeNextExpiration,
    /// Below the clock: counts as the clock.
    Backward(u64),
    Anywhere(u64),
    NearMax(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Insert(When),
    Remove(Index),
    Reschedule(Index, When),
    Advance {
        to: Target,
        budget: Option<usize>,
        /// Use `poll` one entry at a time, to check the clock after each entry.
        by_poll: bool,
    },
    /// Hand out this many entries of a drain, then drop it.
    Drain(usize),
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        6 => (0..130u64).prop_map(When::Near),
        3 => (0..300_000u64).prop_map(When::Medium),
        3 => (0..500u64).prop_map(When::Past),
        1 => any::<u64>().prop_map(When::Anywhere),
        1 => (0..300u64).prop_map(When::NearMax),
    ]
}

/// Mostly small and medium steps; a huge jump about once per case.
fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        60 => (0..70u64).prop_map(Target::Step),
        20 => (0..300_000u64).prop_map(Target::Jump),
        24 => Just(Target::NextExpiration),
        8 => Just(Target::JustBeforeNextExpiration),
        6 => (0..200u64).prop_map(Target::Backward),
        1 => any::<u64>().prop_map(Target::Anywhere),
        1 => (0..300u64).prop_map(Target::NearMax),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let advance = (
        target(),
        proptest::option::weighted(0.3, 0..8usize),
        any::<bool>(),
    )
        .prop_map(|(to, budget, by_poll)| Op::Advance {
            to,
            budget,
            by_poll,
        });
    prop_oneof![
        30 => when().prop_map(Op::Insert),
        9 => any::<Index>().prop_map(Op::Remove),
        9 => (any::<Index>(), when()).prop_map(|(i, w)| Op::Reschedule(i, w)),
        18 => advance,
        1 => (0..4usize).prop_map(Op::Drain),
    ]
}

/// The reference: live entries ordered by (deadline, stamp); the stamp tells entries with equal
/// deadlines apart.
#[derive(Default)]
struct Model {
    queue: BTreeMap<(u64, u64), (TimerKey, u64)>,
    live: HashMap<TimerKey, (u64, u64)>,
    stamps: u64,
}

impl Model {
    fn insert(&mut self, key: TimerKey, deadline: u64, value: u64) {
        self.stamps += 1;
        assert!(
            self.live.insert(key, (deadline, self.stamps)).is_none(),
            "key reused"
        );
        self.queue.insert((deadline, self.stamps), (key, value));
    }

    fn remove(&mut self, key: TimerKey) -> Option<u64> {
        let place = self.live.remove(&key)?;
        Some(self.queue.remove(&place).expect("queued").1)
    }

    fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        match self.remove(key) {
            Some(value) => {
                self.insert(key, deadline, value);
                true
            }
            None => false,
        }
    }

    /// Takes out an entry the wheel handed out by expiry: it must be live and unchanged. (Among
    /// entries with one deadline the order is not promised: a postponed entry stays where it
    /// was placed until its slot is reached.)
    fn expire(&mut self, entry: &Entry<u64>) {
        let place = self.live[&entry.key];
        assert_eq!(
            entry.deadline, place.0,
            "wrong deadline for {:?}",
            entry.key
        );
        self.forget(entry);
    }

    /// Takes out an entry handed out by a drain (any order).
    fn forget(&mut self, entry: &Entry<u64>) {
        let deadline = self.live.get(&entry.key).map(|p| p.0);
        assert_eq!(
            deadline,
            Some(entry.deadline),
            "unknown or repeated {entry:?}"
        );
        assert_eq!(self.remove(entry.key), Some(entry.value));
    }

    fn due(&self, now: u64) -> usize {
        self.queue
            .keys()
            .take_while(|&&(deadline, _)| deadline <= now)
            .count()
    }

    fn earliest(&self) -> Option<u64> {
        self.queue.keys().next().map(|&(deadline, _)| deadline)
    }
}

struct Harness {
    wheel: Wheel<u64>,
    model: Model,
    /// Every key ever issued, live or stale.
    issued: Vec<TimerKey>,
    last_target: u64,
}

impl Harness {
    fn new(slots: usize) -> Self {
        Harness {
            wheel: Wheel::with_slots(slots).unwrap(),
            model: Model::default(),
            issued: Vec::new(),
            last_target: 0,
        }
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Insert(when) => self.insert(when.resolve(self.wheel.now())),
            Op::Remove(index) => {
                if let Some(key) = self.pick(index) {
                    assert_eq!(self.wheel.remove(key), self.model.remove(key));
                }
            }
            Op::Reschedule(index, when) => {
                if let Some(key) = self.pick(index) {
                    let deadline = when.resolve(self.wheel.now());
                    let live = self.model.reschedule(key, deadline);
                    let expected = if live { Ok(()) } else { Err(StaleKey(key)) };
                    assert_eq!(self.wheel.reschedule(key, deadline), expected);
                }
            }
            Op::Advance {
                to,
                budget,
                by_poll,
            } => self.advance(to, *budget, *by_poll),
            Op::Drain(n) => self.drain_partly(*n),
        }
        self.check();
    }

    fn insert(&mut self, deadline: u64) {
        let value = self.issued.len() as u64;
        let key = self.wheel.insert(deadline, value);
        // A key equal to a stale one would let the stale key reach the new entry.
        assert!(
            !self.issued.contains(&key),
            "fresh {key:?} equals a stale key"
        );
        self.model.insert(key, deadline, value);
        self.issued.push(key);
    }

    fn pick(&self, index: &Index) -> Option<TimerKey> {
        (!self.issued.is_empty()).then(|| *index.get(&self.issued))
    }

    fn resolve(&self, to: &Target) -> u64 {
        let base = self.last_target.max(self.wheel.now());
        let next = self.wheel.next_expiration();
        match *to {
            Target::Step(n) | Target::Jump(n) => base.saturating_add(n),
            Target::NextExpiration => next.unwrap_or(base),
            Target::JustBeforeNextExpiration => next.map_or(base, |t| t.saturating_sub(1)),
            Target::Backward(n) => self.wheel.now().saturating_sub(n),
            Target::Anywhere(tick) => tick.max(base),
            Target::NearMax(n) => u64::MAX - n,
        }
    }

    fn advance(&mut self, to: &Target, budget: Option<usize>, by_poll: bool) {
        let target = self.resolve(to);
        self.last_target = self.last_target.max(target);
        let before = self.wheel.now();
        let effective = target.max(before);
        let due = self.model.due(effective);
        let out: Vec<Entry<u64>> = match budget {
            Some(n) => self.wheel.advance(target).take(n).collect(),
            None if by_poll => self.poll_all(target),
            None => self.wheel.advance(target).collect(),
        };
        assert_eq!(out.len(), budget.map_or(due, |n| n.min(due)), "due {due}");
        for entry in &out {
            assert!(
                entry.deadline <= effective,
                "early: {entry:?} at {effective}"
            );
            self.model.expire(entry);
        }
        let now = self.wheel.now();
        assert!(
            before <= now && now <= effective,
            "clock {before} -> {now}, {effective}"
        );
        if budget.map_or(true, |n| out.len() < n) {
            // The advance ran to its end: the clock is at the target, nothing due is left.
            assert_eq!(now, effective);
            assert!(self.wheel.next_expiration().map_or(true, |t| t > now));
        }
    }

    /// Polls until nothing is due, checking where the clock stands after each entry.
    fn poll_all(&mut self, target: u64) -> Vec<Entry<u64>> {
        let mut out = Vec::new();
        loop {
            let before = self.wheel.now();
            let Some(entry) = self.wheel.poll(target) else {
                return out;
            };
            // Already due: it waited at the clock. Otherwise the clock moved to its deadline.
            assert_eq!(self.wheel.now(), entry.deadline.max(before), "{entry:?}");
            out.push(entry);
        }
    }

    fn drain_partly(&mut self, n: usize) {
        let out: Vec<_> = self.wheel.drain().take(n).collect();
        for entry in &out {
            self.model.forget(entry);
        }
        self.model = Model::default();
    }

    fn check(&mut self) {
        assert_eq!(self.wheel.len(), self.model.live.len());
        assert_eq!(self.wheel.is_empty(), self.model.live.is_empty());
        let now = self.wheel.now();
        match (self.wheel.next_expiration(), self.model.earliest()) {
            (None, None) => {}
            (Some(next), Some(earliest)) => {
                assert!(
                    now <= next && next <= earliest.max(now),
                    "next {next}, now {now}"
                )
            }
            (next, earliest) => panic!("next_expiration {next:?}, earliest {earliest:?}"),
        }
        for &key in &self.issued {
            let live = self.model.live.get(&key).map(|&(deadline, _)| deadline);
            assert_eq!(self.wheel.deadline(key), live, "{key:?}");
            assert_eq!(self.wheel.contains(key), live.is_some());
            let value = self.model.live.get(&key).map(|p| self.model.queue[p].1);
            assert_eq!(self.wheel.get(key).copied(), value);
        }
    }

    /// Drains the rest: exactly the model's entries come out, and the wheel stays usable.
    fn finish(mut self) {
        let out: Vec<_> = self.wheel.drain().collect();
        for entry in &out {
            self.model.forget(entry);
        }
        assert!(self.model.live.is_empty(), "lost: {:?}", self.model.live);
        self.check();
        assert_eq!(self.wheel.next_expiration(), None);
        let now = self.wheel.now();
        let key = self.wheel.insert(now.saturating_add(1), 7);
        let out: Vec<_> = self.wheel.advance(now.saturating_add(1)).collect();
        assert_eq!(
            out,
            [Entry {
                key,
                deadline: now.saturating_add(1),
                value: 7
            }]
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn wheel_matches_model(
        slots in prop_oneof![Just(2usize), Just(4), Just(64), Just(512)],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut harness = Harness::new(slots);
        for op in &ops {
            harness.run(op);
        }
        harness.finish();
    }
}
