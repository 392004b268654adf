//! Adapters from the timer service to other ways of waiting: `async` futures (`Sleep`,
//! `Timeout`) and the repeating `Interval` for any executor, behind the `async` feature.

#[cfg(feature = "async")]
pub(crate) mod futures;
#[cfg(feature = "async")]
pub(crate) mod interval;
