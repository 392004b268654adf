//! `floor`: the benchmark's operations done on a bare ring of 16-byte entries (a deadline and
//! an 8-byte reference), with no wheel at all: a lower bound for any timer store that keeps its
//! entries inline in arrays. It is measured in the same run as the wheel, so the wheel's
//! figures can be read as a ratio to what this machine's memory does at that size.
//!
//! Insert appends an entry at the ring's back; expire takes entries from its front, in the
//! order they were inserted (no deadlines looked at); retain takes entries from the front and
//! appends the live ones at the back again, reading each one's record as the wheel's `keep`
//! does. No levels, no slots, no cascades: whatever a real wheel adds to these is bookkeeping
//! on top.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use super::{chunk, Delays, Fixture, Op, Records, Ref, RETAIN_MAX};

pub(crate) struct FloorFixture {
    ring: VecDeque<(u64, Ref)>,
    now: u64,
    delays: Delays,
    records: Records,
}

impl FloorFixture {
    fn expire(&mut self, count: usize) {
        for _ in 0..count {
            let entry = self.ring.pop_front().expect("entries are pending");
            self.now = self.now.max(entry.0);
            black_box(entry);
        }
    }
}

impl Fixture for FloorFixture {
    const NAME: &'static str = "floor";

    fn filled(n: usize) -> Self {
        let mut delays = Delays::new();
        let mut records = Records::new(if n <= RETAIN_MAX { n } else { 1 });
        let mut ring = VecDeque::with_capacity(n + chunk(n));
        for _ in 0..n {
            ring.push_back((delays.next(), records.reference()));
        }
        FloorFixture {
            ring,
            now: 0,
            delays,
            records,
        }
    }

    fn supports(op: Op, n: usize) -> bool {
        op != Op::RetainPrefetched && (op != Op::Retain || n <= RETAIN_MAX)
    }

    fn run_chunk(&mut self, op: Op, count: usize) -> Duration {
        let entries: Vec<(u64, Ref)> = (0..count)
            .map(|_| (self.now + self.delays.next(), self.records.reference()))
            .collect();
        match op {
            Op::Insert => {
                let start = Instant::now();
                for &entry in &entries {
                    self.ring.push_back(entry);
                }
                let elapsed = start.elapsed();
                self.expire(count);
                elapsed
            }
            Op::Expire => {
                let start = Instant::now();
                self.expire(count);
                let elapsed = start.elapsed();
                self.ring.extend(entries);
                elapsed
            }
            Op::Retain => {
                let before = self.ring.len();
                let start = Instant::now();
                for _ in 0..count {
                    let entry = self.ring.pop_front().expect("entries are pending");
                    if self.records.is_live(&entry.1) {
                        self.ring.push_back(entry);
                    }
                }
                let elapsed = start.elapsed();
                for _ in self.ring.len()..before {
                    let entry = (self.now + self.delays.next(), self.records.stale());
                    self.ring.push_back(entry);
                }
                elapsed
            }
            Op::RetainPrefetched => unreachable!("the floor's retain has no prefetch"),
        }
    }
}
