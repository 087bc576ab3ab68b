//! A stage of the pace: a limit or a hold in front of the base, such as
//! the `--budget`s (`budgets.rs`) or the runner's gate (`jobs::gate`).
//! Each is handed the part of the pace behind it ([`Behind`],
//! [`Releasing`]) and says how many records may go now, when the next may
//! go, what went, and its figures.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use std::fmt;

use std::sync::Arc;

use crate::report::Section;

use super::{Base, PaceClock};

/// One stage of the pace. Stages are composed in one fixed order
/// ([`super::Pace::with_stage`]); each answers for itself given the part
/// behind it, so none passes a call on by default.
pub trait Stage: fmt::Debug + Send {
    /// Let records go at `now` (ns): of `available` waiting, offer as many
    /// as this stage allows to the part behind it (`behind.release(k)`,
    /// which lets go as many as it allows), note those that went, and
    /// return how many did.
    fn release(&mut self, now: u64, available: usize, behind: &mut Releasing<'_, '_, '_>) -> usize;

    /// The earliest time (ns) `record` may leave, given when the part
    /// behind lets it ([`Behind::next_due`]); 0: at any time.
    fn next_due(&self, record: &[u8], behind: &Behind<'_>) -> u64;

    /// The earliest time (ns) the `n`-th record from now (0: the next),
    /// `record`, may leave, given the part behind; `None` when not known
    /// yet (a shared base whose slots are not reserved yet).
    fn nth_due(&self, record: &[u8], n: usize, behind: &Behind<'_>) -> Option<u64>;

    /// Whether the stage limits records (counts them: a budget), rather
    /// than holding them for a while (a pause: the gate). Only a stage
    /// that limits is part of a forecast ([`Stage::copy`],
    /// [`Stage::floor`]) and makes the pace limited.
    fn limits(&self) -> bool;

    /// A copy to forecast departures on (`super::Forecast`), of a stage
    /// that limits; `None` for a hold.
    fn copy(&self) -> Option<Box<dyn Stage>>;

    /// At the earliest, when the `n`-th record from `now` (ns) may leave as
    /// far as this stage goes: `now` when it sets no floor. A floor, not a
    /// forecast.
    fn floor(&self, now: u64, n: u64) -> u64;

    /// Whether the stage may hold one key back ([`Stage::key_due`]): when
    /// no stage does, the keyed queues ask neither as a record leaves.
    fn holds_keys(&self) -> bool {
        false
    }

    /// The earliest time (ns) a record of `key` may leave as far as a hold
    /// on that key alone goes (an overload's pause); 0 when none holds it;
    /// [`super::UNTIL_FREED`] when it is held until the stage frees it
    /// ([`Stage::keys_freed`]: a key at its job limit).
    fn key_due(&self, _key: &[u8]) -> u64 {
        0
    }

    /// A record of `key` left at `now` (ns): a hold spacing its starts
    /// counts from here, a key's job limit counts it.
    fn key_left(&mut self, _key: &[u8], _now: u64) {}

    /// Hand `freed` each key held [`super::UNTIL_FREED`] that may go
    /// again since the last call, once.
    fn keys_freed(&mut self, _freed: &mut dyn FnMut(&[u8])) {}

    /// Its figures at `now` (ns): its section of the report (none by
    /// default).
    fn section(&self, _now: u64) -> Option<Arc<dyn Section>> {
        None
    }

    /// Under `--budget-exhausted stop`, the budget it keeps spent at `now`
    /// (ns), in words: records waiting then need not wait for its next
    /// window. `None` when none is.
    fn exhausted(&self, _now: u64) -> Option<String> {
        None
    }
}

/// The part of the pace behind a stage, to ask: the stages nearer the
/// base, the clock and the base.
pub struct Behind<'a> {
    pub(super) clock: &'a PaceClock,
    pub(super) base: &'a Base,
    pub(super) stages: &'a [Box<dyn Stage>],
    /// Asking for a forecast: the stages that only hold are passed over.
    pub(super) forecasting: bool,
}

impl Behind<'_> {
    /// Whether nothing behind limits records: every record may always
    /// leave but for a hold.
    pub fn is_unlimited(&self) -> bool {
        self.base.is_unlimited() && self.stages.iter().all(|s| !s.limits())
    }

    /// The stage nearest the front, and the part behind it (`None`: the
    /// base alone).
    fn split(&self) -> Option<(&dyn Stage, Behind<'_>)> {
        let mut stages = self.stages;
        while let Some((stage, rest)) = stages.split_last() {
            let behind = Behind {
                stages: rest,
                ..*self
            };
            if !self.forecasting || stage.limits() {
                return Some((&**stage, behind));
            }
            stages = rest;
        }
        None
    }

    /// The earliest time (ns) `record` may leave as far as this part goes.
    pub fn next_due(&self, record: &[u8]) -> u64 {
        match self.split() {
            Some((stage, behind)) => stage.next_due(record, &behind),
            None => self.clock.unwarped(self.base.schedule().next_due(record)),
        }
    }

    /// The earliest time (ns) the `n`-th record from now may leave as far
    /// as this part goes; `None`: not known yet.
    pub fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        match self.split() {
            Some((stage, behind)) => stage.nth_due(record, n, &behind),
            None => {
                let due = self.base.schedule().nth_due(record, n)?;
                Some(self.clock.unwarped(due))
            }
        }
    }
}

/// The part of the pace behind a stage, to let records go through at one
/// release.
pub struct Releasing<'a, 'r, 's> {
    pub(super) clock: &'a mut PaceClock,
    pub(super) base: &'a mut Base,
    pub(super) stages: &'a mut [Box<dyn Stage>],
    pub(super) now: u64,
    pub(super) records: &'r mut dyn Iterator<Item = &'s [u8]>,
}

impl Releasing<'_, '_, '_> {
    /// Whether nothing behind limits records.
    pub fn is_unlimited(&self) -> bool {
        self.base.is_unlimited() && self.stages.iter().all(|s| !s.limits())
    }

    /// Let at most `available` of the waiting records go as far as this
    /// part allows; returns how many went (they took their slots).
    pub fn release(&mut self, available: usize) -> usize {
        match self.stages.split_last_mut() {
            Some((stage, rest)) => {
                let mut behind = Releasing {
                    clock: &mut *self.clock,
                    base: &mut *self.base,
                    stages: rest,
                    now: self.now,
                    records: &mut *self.records,
                };
                stage.release(self.now, available, &mut behind)
            }
            None => {
                let at = self.clock.start(self.now);
                let base = self.base.schedule_mut();
                base.release(at, available, &mut *self.records)
            }
        }
    }
}
