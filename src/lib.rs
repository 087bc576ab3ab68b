//! drip: a leaky bucket for shell pipelines.
//!
//! Records are read on a reader thread ([`reader`], [`input`]), decided one
//! at a time by [`admission`] against the [`schedule`] (one GCRA
//! [`pacer`] per limit) and the bounded [`bucket`], written by the writer
//! thread ([`writer`], [`output`]), and accounted for in the [`ledger`]. A
//! monitor thread handles signals, the stats stream and the progress
//! display. [`run`] ties them together (`engine`) and returns how drip
//! ended; `docs/architecture.md` draws the whole machine.

pub mod admission;
pub mod backoff;
pub mod bucket;
pub mod cli;
pub mod control;
pub mod cost;
mod deadletter;
mod engine;
pub mod input;
pub mod jobs;
pub mod key;
pub mod keyed;
pub mod ledger;
pub mod metrics;
mod monitor;
pub mod output;
pub mod pacer;
pub mod progress;
pub mod quantity;
pub mod rate;
mod reader;
pub mod scan;
pub mod schedule;
pub mod shared;
mod shutdown;
mod stalls;
mod state;
pub mod stats;
mod steer;
mod sys;
mod writer;

pub use engine::{
    exit_status, run, run_stdout, Ending, EXIT_ERROR, EXIT_OK, EXIT_OVERFLOW, EXIT_SHARE,
    EXIT_USAGE,
};
pub use state::OverflowError;
