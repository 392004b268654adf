//! The harness: how one run of one in-process system is done and measured, the same for every
//! system; and [`system::System`], how the runner sees any system (in-process or not).
//!
//! [`driver::drive`] starts a system ([`timers::Timers`]), runs the [`plan::Plan`]'s warm-up
//! rounds and its measured round: [`producer`] threads schedule the [`scenario`]'s timers
//! (delays from [`delays`]), each timer's [`task::Task`] records its lateness into the
//! [`probe`] (a [`fired`] list per thread, checked against a [`bitset`] when the run ends,
//! tells that each fired once), and the driver gathers the
//! figures into a [`result::RunResult`] (percentiles from [`histogram`]).

pub(crate) mod bitset;
pub(crate) mod delays;
pub(crate) mod driver;
pub(crate) mod fired;
pub(crate) mod histogram;
pub(crate) mod plan;
pub(crate) mod probe;
pub(crate) mod producer;
pub(crate) mod result;
pub(crate) mod sample_lock;
pub(crate) mod scenario;
pub(crate) mod system;
pub(crate) mod task;
pub(crate) mod timers;
