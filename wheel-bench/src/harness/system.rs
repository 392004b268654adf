//! [`System`]: a timer system as the runner sees it, and [`InProcess`], which makes one of an
//! in-process [`Timers`] run under the shared [`driver`].

use crate::harness::driver;
use crate::harness::plan::Plan;
use crate::harness::result::RunResult;
use crate::harness::timers::Timers;

/// A timer system the bench can measure.
pub trait System {
    /// Its name in tables and file names.
    fn name(&self) -> &'static str;
    /// Why it cannot run `plan` on this machine, if it cannot.
    fn skip_reason(&self, plan: &Plan<'_>) -> Option<String>;
    /// Runs `plan` and measures it.
    fn run(&self, plan: &Plan<'_>) -> Result<RunResult, String>;
    /// How the system is driven, for the report.
    fn method(&self) -> &'static str;
}

/// An in-process system as a [`System`]: the harness's driver runs it.
pub struct InProcess<T>(std::marker::PhantomData<T>);

impl<T: Timers> InProcess<T> {
    /// The adapter for `T`.
    pub fn new() -> InProcess<T> {
        InProcess(std::marker::PhantomData)
    }
}

impl<T: Timers> System for InProcess<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn skip_reason(&self, plan: &Plan<'_>) -> Option<String> {
        T::unsupported(plan.scenario)
    }

    fn run(&self, plan: &Plan<'_>) -> Result<RunResult, String> {
        driver::drive::<T>(plan)
    }

    fn method(&self) -> &'static str {
        T::METHOD
    }
}
