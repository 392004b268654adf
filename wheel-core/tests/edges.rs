//! Unit tests for the edges of `Wheel`'s contract.

use wheel_core::Wheel;

/// Regression: with the clock at 100, an entry due in the past sits in the current slot, and an
/// advance to a tick below the clock must count as the clock and hand it out.
#[test]
fn advance_below_clock_hands_out_past_entries() {
    let mut wheel = Wheel::new();
    wheel.advance(100).for_each(drop);
    wheel.insert(50, "past");
    assert_eq!(
        wheel.advance(10).map(|e| e.value).collect::<Vec<_>>(),
        ["past"]
    );
    assert_eq!(wheel.now(), 100);
}
