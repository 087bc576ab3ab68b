//! drip: a leaky bucket for shell pipelines.
//!
//! Records are read on a reader thread (`reader`, `input`), decided one at
//! a time by `admission` against the `schedule` (one GCRA `pacer` per
//! limit) and the bounded `bucket`, written by the writer thread (`writer`,
//! `output`), and accounted for in the `ledger`. A monitor thread handles
//! signals, the stats stream and the progress display. [`run`] ties them
//! together (`engine`) and returns how drip ended; `docs/architecture.md`
//! draws the whole machine.
//!
//! The library is the binary's: the command line ([`Cli`], checked into a
//! [`Config`]; `-h`'s [`SUMMARY`]), [`run_stdout`] and the exit statuses,
//! and `drip ctl` ([`ctl`]). The parts are private to the crate; the integration tests
//! that drive some of them directly reach them through [`testing`].

mod admission;
mod backoff;
mod bucket;
mod budget;
mod calendar;
mod cli;
mod control;
mod cost;
mod deadletter;
mod engine;
mod host;
mod input;
mod jobs;
mod key;
mod keyed;
mod ledger;
mod metrics;
mod monitor;
mod outflow;
mod output;
mod pace;
mod pacer;
mod platform;
mod progress;
mod quantity;
mod ramp;
mod rate;
mod reader;
mod report;
mod scan;
mod schedule;
mod settle;
mod shared;
mod shutdown;
mod stalls;
mod state;
mod stats;
mod steer;
mod sys;
mod timetable;
mod waiting;
mod writer;

pub use cli::{Cli, Command, Config, CtlArgs, TakeArgs, SUMMARY};
pub use control::client::run as ctl;
pub use engine::{
    exit_status, run, run_stdout, Ending, EXIT_BUDGET, EXIT_ERROR, EXIT_OK, EXIT_OVERFLOW,
    EXIT_SHARE, EXIT_USAGE,
};
pub use jobs::warden::serve_if_asked as serve_as_warden_if_asked;
pub use shared::take::EXIT_TIMEOUT;
pub use state::OverflowError;

/// `drip take`: take one slot from the shared limit `args` name, saying
/// what went wrong on `err`; the exit status (0, [`EXIT_TIMEOUT`], 2, 4).
pub fn take(args: TakeArgs, err: &mut dyn std::io::Write) -> i32 {
    match cli::take_request(args) {
        Ok(request) => shared::take::run(&request, err),
        Err(why) => {
            let _ = writeln!(err, "drip: {why}");
            EXIT_USAGE
        }
    }
}
pub use sys::describe;

/// The parts the integration tests drive directly, without a process:
/// admission, the bucket, the keyed queues and the schedule on virtual
/// time, the splitter, the shared GCRA arithmetic and the two stores, and
/// the manual's text the man page is generated from. For `tests/` only:
/// no promise is made to other users.
pub mod testing {
    pub use crate::admission::Admission;
    pub use crate::bucket::{Bucket, Fate, Offered, Overflow, Segment};
    pub use crate::cli::{
        Paragraph, CONTROL, DESCRIPTION, ENVIRONMENT, EXAMPLES, EXIT_PRECEDENCE, EXIT_STATUSES,
        FILES, SEE_ALSO, SIGNALS,
    };
    pub use crate::cost::Cost;
    pub use crate::input::Splitter;
    pub use crate::key::{parse_key, KeyArg, KeySpec};
    pub use crate::keyed::rates;
    pub use crate::keyed::{KeyConfig, KeyRates, KeySchedule, KeyTable, Keyed, LeaseHead, Want};
    pub use crate::ledger::Ledger;
    pub use crate::outflow::Outflow;
    pub use crate::pace::{Base, Leased, Pace};
    pub use crate::pacer::{slack_for, Pacer};
    pub use crate::rate::{parse_byte_rate, parse_rate, Rate};
    pub use crate::report::spell::KeyName;
    pub use crate::schedule::{Limit, Limits, Schedule, Unit};
    pub use crate::shared::file::FileStore;
    pub use crate::shared::gcra::{
        most_weight, ByteStep, Gcra, KeyAsk, KeyBook, Meter, Settlement, Step, Weight,
    };
    pub use crate::shared::parse_target;
    pub use crate::shared::protocol::{
        Ask, Back, Count, Grant, JobOp, JobPool, Reply, Store, MOST_COUNT,
    };
    pub use crate::shared::redis::RedisStore;
    pub use crate::stats::Counts;
}
