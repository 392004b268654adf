//! Property tests: random operation sequences run against `Wheel` and against a reference model
//! (a multiset of `(deadline, value)`), checked against each other after every operation.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::Index;
use wheel_core::{Entry, Wheel};

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
    /// Insert a copy of an entry the wheel holds: the wheel is a multiset.
    Duplicate(Index),
    /// A burst of inserts, so slots hold several chunks and the early cascade has work.
    Burst(When, u16),
    Advance {
        to: Target,
        budget: Option<usize>,
    },
    Retain {
        budget: usize,
        /// Which values the predicate rejects: those whose hash with this salt is 0 mod 3.
        salt: u64,
        prefetched: bool,
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
    let advance = (target(), proptest::option::weighted(0.3, 0..8usize))
        .prop_map(|(to, budget)| Op::Advance { to, budget });
    let retain = (
        prop_oneof![4 => 0..12usize, 2 => 12..200usize, 1 => Just(usize::MAX)],
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(budget, salt, prefetched)| Op::Retain {
            budget,
            salt,
            prefetched,
        });
    prop_oneof![
        30 => when().prop_map(Op::Insert),
        4 => any::<Index>().prop_map(Op::Duplicate),
        3 => (when(), 1..300u16).prop_map(|(w, n)| Op::Burst(w, n)),
        18 => advance,
        12 => retain,
        1 => (0..4usize).prop_map(Op::Drain),
    ]
}

fn rejects(salt: u64, value: u64) -> bool {
    (value ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60 < 5
}

/// The reference: how many copies of each `(deadline, value)` the wheel should hold.
#[derive(Default, Debug)]
struct Model {
    held: BTreeMap<(u64, u64), usize>,
    len: usize,
}

impl Model {
    fn insert(&mut self, deadline: u64, value: u64) {
        *self.held.entry((deadline, value)).or_default() += 1;
        self.len += 1;
    }

    /// Takes out one copy of an entry the wheel handed out or removed: it must be held.
    fn take(&mut self, entry: &Entry<u64>) {
        let key = (entry.deadline, entry.value);
        let count = self
            .held
            .get_mut(&key)
            .unwrap_or_else(|| panic!("{entry:?} is not held (lost, made up or twice)"));
        *count -= 1;
        if *count == 0 {
            self.held.remove(&key);
        }
        self.len -= 1;
    }

    fn due(&self, now: u64) -> usize {
        self.held
            .iter()
            .take_while(|&(&(deadline, _), _)| deadline <= now)
            .map(|(_, &n)| n)
            .sum()
    }

    fn earliest(&self) -> Option<u64> {
        self.held.keys().next().map(|&(deadline, _)| deadline)
    }

    fn nth(&self, index: &Index) -> Option<(u64, u64)> {
        (!self.held.is_empty())
            .then(|| *self.held.keys().nth(index.index(self.held.len())).unwrap())
    }
}

struct Harness {
    wheel: Wheel<u64>,
    model: Model,
    serial: u64,
    last_target: u64,
}

impl Harness {
    fn new(slots: usize) -> Self {
        Harness {
            wheel: Wheel::with_slots(slots).unwrap(),
            model: Model::default(),
            serial: 0,
            last_target: 0,
        }
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Insert(when) => self.insert(when.resolve(self.wheel.now())),
            Op::Duplicate(index) => {
                if let Some((deadline, value)) = self.model.nth(index) {
                    self.wheel.insert(deadline, value);
                    self.model.insert(deadline, value);
                }
            }
            Op::Burst(when, n) => {
                let deadline = when.resolve(self.wheel.now());
                for i in 0..*n as u64 {
                    self.insert(deadline.saturating_add(i % 5));
                }
            }
            Op::Advance { to, budget } => self.advance(to, *budget),
            Op::Retain {
                budget,
                salt,
                prefetched,
            } => self.retain(*budget, *salt, *prefetched),
            Op::Drain(n) => self.drain_partly(*n),
        }
        self.check();
    }

    fn insert(&mut self, deadline: u64) {
        let value = self.serial;
        self.serial += 1;
        self.wheel.insert(deadline, value);
        self.model.insert(deadline, value);
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

    fn advance(&mut self, to: &Target, budget: Option<usize>) {
        let target = self.resolve(to);
        self.last_target = self.last_target.max(target);
        let before = self.wheel.now();
        let effective = target.max(before);
        let due = self.model.due(effective);
        let out: Vec<Entry<u64>> = match budget {
            Some(n) => self.wheel.advance(target).take(n).collect(),
            None => self.wheel.advance(target).collect(),
        };
        assert_eq!(out.len(), budget.map_or(due, |n| n.min(due)), "due {due}");
        for entry in &out {
            assert!(
                entry.deadline <= effective,
                "early: {entry:?} at {effective}"
            );
            self.model.take(entry);
        }
        let now = self.wheel.now();
        assert!(
            before <= now && now <= effective,
            "clock {before} -> {now}, {effective}"
        );
        if budget.is_none_or(|n| out.len() < n) {
            // The advance ran to its end: the clock is at the target, nothing due is left.
            assert_eq!(now, effective);
            assert!(self.wheel.next_expiration().is_none_or(|t| t > now));
        }
    }

    /// A retain call: every entry it examines is held, none twice, and it removes exactly the
    /// ones the predicate rejected.
    fn retain(&mut self, budget: usize, salt: u64, prefetched: bool) {
        let mut examined: Vec<(u64, u64)> = Vec::new();
        let mut fetched: Vec<u64> = Vec::new();
        let mut keep = |deadline: u64, value: &u64| {
            examined.push((deadline, *value));
            !rejects(salt, *value)
        };
        let returned = if prefetched {
            self.wheel
                .retain_prefetched(budget, |value| fetched.push(*value), &mut keep)
        } else {
            self.wheel.retain(budget, &mut keep)
        };
        assert_eq!(returned, examined.len());
        assert!(returned <= budget && returned <= self.model.len);
        let mut seen: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for &(deadline, value) in &examined {
            let count = seen.entry((deadline, value)).or_default();
            *count += 1;
            let held = self.model.held.get(&(deadline, value)).copied();
            assert!(
                held.is_some_and(|n| n >= *count),
                "examined ({deadline}, {value}) {count} times, held {held:?}"
            );
        }
        for &(deadline, value) in &examined {
            if rejects(salt, value) {
                self.model.take(&Entry { deadline, value });
            }
        }
        for value in fetched {
            assert!(
                self.model.held.keys().any(|&(_, v)| v == value)
                    || examined.iter().any(|&(_, v)| v == value),
                "prefetched {value}, which the wheel does not hold"
            );
        }
    }

    fn drain_partly(&mut self, n: usize) {
        let out: Vec<_> = self.wheel.drain().take(n).collect();
        for entry in &out {
            self.model.take(entry);
        }
        self.model = Model::default();
    }

    fn check(&mut self) {
        assert_eq!(self.wheel.len(), self.model.len);
        assert_eq!(self.wheel.is_empty(), self.model.len == 0);
        let now = self.wheel.now();
        match (self.wheel.next_expiration(), self.model.earliest()) {
            (None, None) => {}
            (Some(next), Some(earliest)) => {
                assert!(
                    now <= next && next <= earliest.max(now),
                    "next {next}, now {now}, earliest {earliest}"
                )
            }
            (next, earliest) => panic!("next_expiration {next:?}, earliest {earliest:?}"),
        }
    }

    /// Ends the round of `retain` under way, then runs one whole round in calls of `budget`
    /// with a predicate that rejects by `salt`: it examines every entry once and removes
    /// exactly the rejected ones.
    fn retain_round(&mut self, budget: usize, salt: u64) {
        let budget = budget.max(1);
        while self.wheel.retain(budget, |_, _| true) == budget {}
        let mut examined: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        loop {
            let n = self.wheel.retain(budget, |deadline, &value| {
                *examined.entry((deadline, value)).or_default() += 1;
                !rejects(salt, value)
            });
            if n < budget {
                break;
            }
        }
        assert_eq!(
            examined, self.model.held,
            "a round examines each entry once"
        );
        let rejected: Vec<(u64, u64)> = examined
            .iter()
            .filter(|&(&(_, value), _)| rejects(salt, value))
            .flat_map(|(&key, &n)| std::iter::repeat_n(key, n))
            .collect();
        for (deadline, value) in rejected {
            self.model.take(&Entry { deadline, value });
        }
        self.check();
    }

    /// Drains the rest: exactly the model's entries come out, and the wheel stays usable.
    fn finish(mut self) {
        let out: Vec<_> = self.wheel.drain().collect();
        for entry in &out {
            self.model.take(entry);
        }
        assert!(self.model.held.is_empty(), "lost: {:?}", self.model.held);
        self.check();
        assert_eq!(self.wheel.next_expiration(), None);
        let now = self.wheel.now();
        self.wheel.insert(now.saturating_add(1), 7);
        let out: Vec<_> = self.wheel.advance(now.saturating_add(1)).collect();
        assert_eq!(
            out,
            [Entry {
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
        round_budget in 1..100usize,
        round_salt in any::<u64>(),
    ) {
        let mut harness = Harness::new(slots);
        for op in &ops {
            harness.run(op);
        }
        harness.retain_round(round_budget, round_salt);
        harness.finish();
    }
}
