//! The pace: when may records leave? One pipeline in one fixed, visible
//! order, which admission, the waiting rooms and the writer ask:
//!
//! ```text
//! Pace { clock, base, stages }
//!   stages   the --budgets (budgets.rs), then the runner's gate (jobs::gate):
//!            each lets records through to the part behind it
//!   clock    the caller's time, or --ramp's warped time (clock.rs)
//!   base     Local: the limits (schedule::Limits)
//!            | Shared: slots leased from a shared state (shared::lease)
//! ```
//!
//! A release goes from the front stage to the base: each stage offers
//! what it allows to the part behind it and notes what went
//! ([`Stage::release`]); a due time comes back from the base through the
//! clock and each stage. The base offers what every record needs
//! ([`Schedule`]); what only one kind of base does is a port of its own:
//! the local limits change (`drip ctl … rate`) and count costs, a shared
//! base hears of writes and expiry ([`Leased`]), and each settles.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

mod budgets;
mod clock;
mod forecast;
mod stage;

pub use budgets::BudgetStage;
pub use clock::PaceClock;
pub use forecast::Forecast;
pub use stage::{Behind, Releasing, Stage};

use std::sync::Arc;

use crate::ramp::Ramp;
use crate::report::Section;
use crate::schedule::{Limit, Limits, Schedule};
use crate::settle::CostView;

/// [`Pace::key_due`] of a key held until a stage frees it
/// ([`Pace::keys_freed`]), not until a time: a key at its job limit
/// (`--key-jobs`), until one of its jobs ends.
pub const UNTIL_FREED: u64 = u64::MAX;

/// A shared base's own port: the events of its lease (`shared::lease`).
pub trait Leased: Schedule {
    /// The writer wrote the next `records` released records, its write
    /// returning at `now` (ns): the slots a write that late overtook are
    /// forfeited. Not called under `--exec`, whose runner records its
    /// starts itself.
    fn wrote(&mut self, now: u64, records: usize);

    /// Waiting records expired at `now` (ns), leaving `waiting` records
    /// waiting, in order from `records` (each with its delimiter): the
    /// slots held beyond them go back at once. Not called for the keyed
    /// queues.
    fn expired(&mut self, now: u64, waiting: usize, records: &mut dyn Iterator<Item = &[u8]>);

    /// A record that left (`record`) reported at `now` (ns) what it really
    /// spent of each cost (`spent`, in the order of the costs; `None`: its
    /// estimate stands): settled on the shared state.
    fn settle(&mut self, now: u64, record: &[u8], spent: &[Option<u64>]);
}

/// The base of the pace: whose slots records take.
#[derive(Debug)]
pub enum Base {
    /// This drip's own limits.
    Local(Limits),
    /// Slots leased from a state shared with other drips (`--share`).
    Shared(Box<dyn Leased>),
}

impl Base {
    /// The base as a schedule.
    pub fn schedule(&self) -> &dyn Schedule {
        match self {
            Base::Local(limits) => limits,
            Base::Shared(shared) => &**shared,
        }
    }

    /// The base as a schedule, to take slots.
    pub fn schedule_mut(&mut self) -> &mut dyn Schedule {
        match self {
            Base::Local(limits) => limits,
            Base::Shared(shared) => &mut **shared,
        }
    }

    /// Whether it limits nothing (a shared base always limits).
    fn is_unlimited(&self) -> bool {
        match self {
            Base::Local(limits) => limits.is_unlimited(),
            Base::Shared(_) => false,
        }
    }
}

/// The pace: a base on a clock, behind its stages. Records are offered in
/// queue order; a later record never leaves before an earlier one.
#[derive(Debug)]
pub struct Pace {
    clock: PaceClock,
    base: Base,
    /// In order from the base: each stage lets records through to the
    /// ones before it.
    stages: Vec<Box<dyn Stage>>,
}

impl Pace {
    /// The pace of `base` alone, on the caller's clock.
    pub fn new(base: Base) -> Pace {
        Pace {
            clock: PaceClock::Steady,
            base,
            stages: Vec::new(),
        }
    }

    /// The pace of this drip's own `limits` alone.
    pub fn local(limits: Limits) -> Pace {
        Pace::new(Base::Local(limits))
    }

    /// The same pace, its base's limits ramped by `ramp` from the first
    /// departure (`--ramp`).
    pub fn ramped(mut self, ramp: Ramp) -> Pace {
        self.clock = PaceClock::ramp(ramp);
        self
    }

    /// The same pace behind `stage`, in front of the stages it has.
    pub fn with_stage(mut self, stage: Box<dyn Stage>) -> Pace {
        self.stages.push(stage);
        self
    }

    /// The whole pace, to ask; `forecasting`: the holds passed over.
    fn behind(&self, forecasting: bool) -> Behind<'_> {
        Behind {
            clock: &self.clock,
            base: &self.base,
            stages: &self.stages,
            forecasting,
        }
    }

    /// Of `available` records waiting in order, which `records` yields
    /// (each with its delimiter, when it has one), how many may leave at
    /// `now` (ns). They take their slots: call only for records that do
    /// leave. `now` must not go backwards between calls.
    pub fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        let mut all = Releasing {
            clock: &mut self.clock,
            base: &mut self.base,
            stages: &mut self.stages,
            now,
            records,
        };
        all.release(available)
    }

    /// The earliest time (ns) `record` may leave; 0 when it may leave at
    /// any time.
    pub fn next_due(&self, record: &[u8]) -> u64 {
        self.behind(false).next_due(record)
    }

    /// The earliest time (ns) the `n`-th record from now (0: the next),
    /// `record`, may leave, as far as known; `None` when not known yet (a
    /// shared base whose slots are not reserved yet).
    pub fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        self.behind(false).nth_due(record, n)
    }

    /// When `record` may leave as far as a forecast goes (ns):
    /// [`Pace::next_due`] without a hold. Admission compares a release
    /// with it to know whether the departures kept to the forecast.
    pub fn forecast_due(&self, record: &[u8]) -> u64 {
        self.behind(true).next_due(record)
    }

    /// At the earliest, when `record` may leave (ns, at least `now`) as the
    /// `n`-th record from now (0: the next), as far as a forecast goes:
    /// the base's floor ([`Limits::earliest`]) and each stage's. `None`:
    /// no forecast can be made (a shared base).
    pub fn earliest(&self, now: u64, record: &[u8], n: u64) -> Option<u64> {
        let Base::Local(limits) = &self.base else {
            return None;
        };
        let base = limits.earliest(self.clock.warped(now), record, n);
        let stages = self.stages.iter().filter(|s| s.limits());
        let floor = stages.map(|s| s.floor(now, n)).max().unwrap_or(now);
        let due = self.forecast_due(record);
        Some(self.clock.unwarped(base).max(floor).max(due).max(now))
    }

    /// A copy of the pace as it stands, to forecast departures on: when
    /// records would leave if each left as soon as the limits allowed. A
    /// hold on departures for a while (a pause) is no part of it. `None`:
    /// no forecast can be made (a shared base, a ramp not over).
    pub fn forecast(&self) -> Option<Pace> {
        let Base::Local(limits) = &self.base else {
            return None;
        };
        if !self.clock.is_steady() {
            return None;
        }
        Some(Pace {
            clock: PaceClock::Steady,
            base: Base::Local(limits.clone()),
            stages: self.stages.iter().filter_map(|s| s.copy()).collect(),
        })
    }

    /// The `--ramp` the base's limits rise by, if any.
    pub fn ramp(&self) -> Option<Ramp> {
        match self.clock {
            PaceClock::Ramp { ramp, .. } => Some(ramp),
            PaceClock::Steady => None,
        }
    }

    /// How late (ns) a wake-up may be without restarting the schedule: the
    /// least slack of the base's limits.
    pub fn slack_ns(&self) -> u64 {
        self.base.schedule().slack_ns()
    }

    /// The highest rate in records per second the base can reach (infinite
    /// when a limit counts bytes or nothing is limited): the writer
    /// coalesces wake-ups above 20,000/s.
    pub fn records_per_second(&self) -> f64 {
        self.base.schedule().records_per_second()
    }

    /// Whether a record's content matters (some limit counts bytes or
    /// cost). When it does not, callers may pass an empty `records`
    /// iterator to [`Pace::release`] and any record to [`Pace::next_due`].
    pub fn weighs_bytes(&self) -> bool {
        self.base.schedule().weighs_bytes()
    }

    /// Whether nothing is limited: every record may always leave but for
    /// a hold.
    pub fn is_unlimited(&self) -> bool {
        self.behind(false).is_unlimited()
    }

    /// Whether a stage may hold a key back ([`Pace::key_due`]); when not,
    /// the keyed queues ask neither as a record leaves at once.
    pub fn holds_keys(&self) -> bool {
        self.stages.iter().any(|s| s.holds_keys())
    }

    /// The earliest time (ns) a record of `key` may leave as far as a hold
    /// on that key alone goes; 0 when nothing holds it. The keyed queues
    /// ask before a key's record leaves, so a held key waits in the line
    /// without holding back the others.
    pub fn key_due(&self, key: &[u8]) -> u64 {
        self.stages
            .iter()
            .map(|s| s.key_due(key))
            .max()
            .unwrap_or(0)
    }

    /// The keys held `UNTIL_FREED` that may go again since the last
    /// call, each handed to `freed` once.
    pub fn keys_freed(&mut self, freed: &mut dyn FnMut(&[u8])) {
        for stage in &mut self.stages {
            stage.keys_freed(freed);
        }
    }

    /// A record of `key` left at `now` (ns).
    pub fn key_left(&mut self, key: &[u8], now: u64) {
        self.clock.start(now);
        for stage in &mut self.stages {
            stage.key_left(key, now);
        }
    }

    /// Records left at `at` (ns) without asking the pace (the keyed queues
    /// do not, when it limits nothing and holds no key): a change of
    /// limits ([`Pace::replace_limits`]) counts from the latest departure,
    /// these included.
    pub fn left_unasked(&mut self, at: u64) {
        let at = self.clock.start(at);
        if let Base::Local(limits) = &mut self.base {
            limits.left_unasked(at);
        }
    }

    /// The writer wrote the next `records` released records, its write
    /// returning at `now` (ns) ([`Leased::wrote`]).
    pub fn wrote(&mut self, now: u64, records: usize) {
        if let Base::Shared(shared) = &mut self.base {
            shared.wrote(self.clock.warped(now), records);
        }
    }

    /// Waiting records expired at `now` (ns), leaving `waiting` records
    /// waiting, in order from `records` ([`Leased::expired`]).
    pub fn expired(&mut self, now: u64, waiting: usize, records: &mut dyn Iterator<Item = &[u8]>) {
        if let Base::Shared(shared) = &mut self.base {
            shared.expired(self.clock.warped(now), waiting, records);
        }
    }

    /// Whether records may leave only on the writer, just before it writes
    /// them, never on the reader's arrival: a shared base's slots are
    /// other drips' neighbours.
    pub fn released_by_the_writer(&self) -> bool {
        matches!(self.base, Base::Shared(_))
    }

    /// Enforce `limits` instead from `now` (ns) on (`drip ctl … rate`)
    /// ([`Limits::replace_limits`]).
    ///
    /// # Errors
    /// A shared base's limits cannot change this way: it says so, in
    /// words, and is left as it was.
    pub fn replace_limits(&mut self, now: u64, limits: &[Limit]) -> Result<(), String> {
        let at = self.clock.warped(now);
        match &mut self.base {
            Base::Local(own) => {
                own.replace_limits(at, limits);
                Ok(())
            }
            Base::Shared(_) => Err("these limits cannot be changed while drip runs".to_string()),
        }
    }

    /// A record that left (`record`, its delimiter included or not)
    /// reported at `now` (ns) what it really spent of each cost (`spent`,
    /// in the order of the costs; `None`: its estimate stands): the base's
    /// cost limits are given back an overestimate and charged an
    /// underestimate (`settle.rs`).
    pub fn settle(&mut self, now: u64, record: &[u8], spent: &[Option<u64>]) {
        let at = self.clock.warped(now);
        match &mut self.base {
            Base::Local(limits) => limits.settle(at, record, spent),
            Base::Shared(shared) => shared.settle(at, record, spent),
        }
    }

    /// The stages' sections of the report at `now` (ns): the `--budget`s'.
    pub fn sections(&self, now: u64) -> Vec<Arc<dyn Section>> {
        self.stages.iter().filter_map(|s| s.section(now)).collect()
    }

    /// What each named cost's limits were charged, settled and hold in
    /// flight ([`CostView`]): the local limits' (a shared base counts
    /// none).
    pub fn costs(&self) -> Vec<CostView> {
        match &self.base {
            Base::Local(limits) => limits.costs(),
            Base::Shared(_) => Vec::new(),
        }
    }

    /// Under `--budget-exhausted stop`, the budget spent at `now` (ns), in
    /// words (`20/second@UTC`): records waiting then are not to wait for
    /// its next window.
    pub fn exhausted(&self, now: u64) -> Option<String> {
        self.stages.iter().find_map(|s| s.exhausted(now))
    }
}
