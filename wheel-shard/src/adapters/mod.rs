//! Adapters from the timer service to other ways of waiting: `async` futures (`Sleep`,
//! `Timeout`) for any executor, behind the `async` feature.

#[cfg(feature = "async")]
pub(crate) mod futures;
