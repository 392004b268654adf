//! The service's threads and what they share: [`core::Core`], the tick loop of each shard, the
//! executor's workers, and the manual clock that drives them in virtual time.

pub(crate) mod core;
pub(crate) mod manual_clock;
pub(crate) mod priority;
pub(crate) mod rouse;
pub(crate) mod tick;
pub(crate) mod worker;
