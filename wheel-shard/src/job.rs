//! [`Job`]: a scheduled callback, one-shot or repeating, behind one boxed trait object.

/// The user's callback, as the wheel and the executor carry it.
pub(crate) trait Job: Send {
    fn run(&mut self);

    /// Ticks between runs of a repeating job; `None` for a one-shot. Kept in the box rather than
    /// beside it, so a one-shot timer pays nothing for it.
    fn period(&self) -> Option<u64>;
}

/// A one-shot callback; a second `run` does nothing.
pub(crate) struct Once<F>(pub(crate) Option<F>);

impl<F: FnOnce() + Send> Job for Once<F> {
    fn run(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }

    fn period(&self) -> Option<u64> {
        None
    }
}

/// A repeating callback, every `period` ticks.
pub(crate) struct Every<F> {
    pub(crate) f: F,
    pub(crate) period: u64,
}

impl<F: FnMut() + Send> Job for Every<F> {
    fn run(&mut self) {
        (self.f)();
    }

    fn period(&self) -> Option<u64> {
        Some(self.period)
    }
}

pub(crate) type BoxedJob = Box<dyn Job>;

/// A timer on its way to, or in, a shard's wheel: 24 bytes.
pub(crate) struct Armed {
    pub(crate) slot: u32,
    pub(crate) gen: u32,
    pub(crate) job: BoxedJob,
}

/// A new timer on its way through a shard's ring. Its deadline travels with it because the
/// producer never touches the timer's cell: the tick thread writes it when the timer arrives
/// (see `TimerCell::arrive`), so a `schedule` does not wait on that cache miss.
pub(crate) struct NewTimer {
    pub(crate) armed: Armed,
    pub(crate) deadline: u64,
    /// `armed.job.period().is_some()`, read by the producer while the box is in its cache, so
    /// the tick thread need not touch the box to arm the cell.
    pub(crate) repeating: bool,
}

/// The next deadline of a repeating timer that was due at `deadline`: fixed rate, no drift. A
/// run that ends after later deadlines passed skips them (no burst of catch-up runs) but keeps
/// the phase: the next run is the first `deadline + k·period` after `now`.
pub(crate) fn next_run(deadline: u64, period: u64, now: u64) -> u64 {
    let next = deadline.saturating_add(period);
    if next > now {
        return next;
    }
    let missed = (now - deadline) / period;
    deadline.saturating_add(period.saturating_mul(missed + 1))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::next_run;

    #[test]
    fn fixed_rate_skips_missed_runs_keeping_phase() {
        assert_eq!(next_run(100, 10, 100), 110);
        assert_eq!(next_run(100, 10, 109), 110);
        assert_eq!(next_run(100, 10, 110), 120);
        assert_eq!(next_run(100, 10, 135), 140);
        assert_eq!(next_run(u64::MAX - 1, 10, 0), u64::MAX);
    }
}
