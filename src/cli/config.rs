//! The checked configuration: everything `run` needs, resolved from the
//! command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::args::Cli;
use crate::bucket::Overflow;
use crate::cost::Cost;
use crate::input::{Input, Oversize};
use crate::keyed::KeyConfig;
use crate::progress::ProgressMode;
use crate::schedule::{Limit, Unit};
use crate::shared;

/// Everything `run` needs, checked and resolved from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// Inputs, read in order.
    pub inputs: Vec<Input>,
    /// The limits every record must pass (none: unlimited, `--rate inf`).
    pub limits: Vec<Limit>,
    /// The calendar budgets (`--budget`).
    pub budgets: Vec<crate::budget::Budget>,
    /// What a spent budget does (`--budget-exhausted`).
    pub budget_exhausted: crate::budget::Exhausted,
    /// Records the bucket holds (≥ 1).
    pub capacity: usize,
    /// Bytes the bucket holds, when bounded.
    pub capacity_bytes: Option<usize>,
    /// `--capacity` given as a duration: what it came to.
    pub capacity_for: Option<crate::report::capacity::CapacityFor>,
    /// `--key-capacity` given as a duration: what it came to.
    pub key_capacity_for: Option<crate::report::capacity::CapacityFor>,
    /// Overflow policy.
    pub overflow: Overflow,
    /// Record delimiter.
    pub delimiter: u8,
    /// Longest record in bytes, delimiter excluded.
    pub max_record: usize,
    /// What becomes of a record over the limits.
    pub oversize: Oversize,
    /// Longest a record may wait before it expires.
    pub max_wait: Option<Duration>,
    /// Dead-letter file.
    pub dead_letter: Option<PathBuf>,
    /// Drain the bucket on the first signal.
    pub drain: bool,
    /// Print the summary on stderr.
    pub stats: bool,
    /// Write the summary as JSON here.
    pub stats_json: Option<PathBuf>,
    /// Period of the stats stream.
    pub stats_interval: Option<Duration>,
    /// Progress display.
    pub progress: ProgressMode,
    /// The limits are shared with other drips (`--share`).
    pub share: Option<shared::Share>,
    /// The command to run per record (`--exec`), instead of stdout.
    pub jobs: Option<crate::jobs::JobConfig>,
    /// Limits per key (`--key`, `--key-rate`), if any.
    pub key: Option<KeyConfig>,
    /// Where the rate table per key came from (`--key-rates`, `--key-rate
    /// KEY=RATE`), to read it again on a change; `None` without one.
    pub key_table: Option<crate::cli::RateTable>,
    /// How a record's cost is read (`--cost`), for the cost limits
    /// ([`Cost::none`] without `--cost`).
    pub cost: Cost,
    /// `--metrics`: the Prometheus text file kept up to date.
    pub metrics: Option<PathBuf>,
    /// `--name`, for `drip ctl`.
    pub name: Option<String>,
    /// Listen on a control socket (no `--no-control`).
    pub control: bool,
    /// `--schedule`: limits by the time of day.
    pub schedule: Option<crate::timetable::Timetable>,
    /// `--ramp`: the limits rise to the rate from the first departure.
    pub ramp: Option<crate::ramp::Ramp>,
}

impl Config {
    /// A configuration with drip's defaults reading `inputs`.
    pub fn new(inputs: Vec<Input>) -> Config {
        Config::try_from(Cli::parse_from(["drip"]))
            .expect("the defaults are valid")
            .with_inputs(inputs)
    }

    /// The highest record rate the limits allow, records per second
    /// (infinite when no limit counts records), for display only.
    pub fn records_per_second(&self) -> f64 {
        crate::schedule::records_per_second(&self.limits)
    }

    /// The cost limit that spends the costs `name` names (`in`, `out`,
    /// `in+out` in any order; `None`: the unnamed cost), and its place in
    /// `limits`: the budget a server's "tokens remaining" paces (OpenAI's
    /// `-tokens`: `in+out` or the unnamed one; Anthropic's
    /// `-input-tokens`: `in`, `-output-tokens`: `out`). `None` when no
    /// cost limit spends just those costs.
    pub fn cost_limit(&self, name: Option<&str>) -> Option<(usize, &Limit)> {
        let budget = self.cost.budget(name)?;
        self.limits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.unit == Unit::Cost)
            .nth(budget)
    }

    fn with_inputs(mut self, inputs: Vec<Input>) -> Config {
        self.inputs = inputs;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Rate;

    #[test]
    fn defaults() {
        let c = Config::new(vec![Input::Stdin]);
        let one_per_second = Rate::Limited {
            count: 1,
            period_ns: 1_000_000_000,
        };
        assert_eq!(
            c.limits,
            [Limit {
                rate: one_per_second,
                burst: 1,
                unit: Unit::Records
            }]
        );
        assert_eq!(c.capacity, 1000);
        assert_eq!(c.overflow, Overflow::Block);
        assert_eq!(c.delimiter, b'\n');
        assert_eq!(c.max_record, 64 << 20);
        assert_eq!(c.oversize, Oversize::Fail);
    }
}
