//! The service's threads and what they share: [`core::Core`], their start, stop and join
//! ([`threads::Handle`]), the tick threads and each shard's part in them, the executor's
//! workers, and the manual clock that drives them in virtual time.

pub(crate) mod core;
pub(crate) mod hand_back;
pub(crate) mod manual_clock;
pub(crate) mod pinning;
pub(crate) mod priority;
pub(crate) mod threads;
pub(crate) mod tick;
pub(crate) mod tick_thread;
pub(crate) mod wake_policy;
pub(crate) mod worker;
