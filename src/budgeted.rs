//! `--budget`s in front of another schedule: a shared one (`--share` with
//! a shared `--rate`), whose limits are not [`Limits`]. A record leaves
//! only while every budget has room and the inner schedule lets it; it
//! counts against every budget only once it does.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use crate::budget::{BudgetView, Counter, Exhausted};
use crate::schedule::{Limit, Limits, Schedule};

/// `budgets` in front of `inner`.
#[derive(Debug)]
pub struct Budgeted {
    inner: Box<dyn Schedule>,
    budgets: Vec<Counter>,
    exhausted: Exhausted,
}

impl Budgeted {
    /// `budgets` in front of `inner`; `exhausted` says what a spent one
    /// does.
    pub fn new(inner: Box<dyn Schedule>, budgets: Vec<Counter>, exhausted: Exhausted) -> Budgeted {
        Budgeted {
            inner,
            budgets,
            exhausted,
        }
    }

    /// When the budgets let the next record leave (ns): 0 while all have
    /// room.
    fn budgets_due(&self) -> u64 {
        self.budgets.iter().map(Counter::due).max().unwrap_or(0)
    }
}

impl Schedule for Budgeted {
    fn is_unlimited(&self) -> bool {
        false
    }

    fn weighs_bytes(&self) -> bool {
        self.inner.weighs_bytes()
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        let room = self
            .budgets
            .iter_mut()
            .map(|b| {
                b.ask(now, available as u64);
                usize::try_from(b.room(now)).unwrap_or(usize::MAX)
            })
            .fold(available, usize::min);
        if room == 0 {
            return 0;
        }
        let n = self.inner.release(now, room, records);
        if n > 0 {
            for b in &mut self.budgets {
                b.spend(now, n as u64);
            }
        }
        n
    }

    fn next_due(&self, record: &[u8]) -> u64 {
        self.inner.next_due(record).max(self.budgets_due())
    }

    fn slack_ns(&self) -> u64 {
        self.inner.slack_ns()
    }

    fn records_per_second(&self) -> f64 {
        self.inner.records_per_second()
    }

    fn holds_keys(&self) -> bool {
        self.inner.holds_keys()
    }

    fn key_due(&self, key: &[u8]) -> u64 {
        self.inner.key_due(key)
    }

    fn key_left(&mut self, key: &[u8], now: u64) {
        self.inner.key_left(key, now);
    }

    fn left_unasked(&mut self, at: u64) {
        self.inner.left_unasked(at);
    }

    fn wrote(&mut self, now: u64, records: usize) {
        self.inner.wrote(now, records);
    }

    fn expired(&mut self, now: u64, waiting: usize, records: &mut dyn Iterator<Item = &[u8]>) {
        self.inner.expired(now, waiting, records);
    }

    fn released_by_the_writer(&self) -> bool {
        self.inner.released_by_the_writer()
    }

    fn replace_limits(&mut self, now: u64, limits: &[Limit]) -> Result<(), String> {
        self.inner.replace_limits(now, limits)
    }

    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        Some(self.inner.nth_due(record, n)?.max(self.budgets_due()))
    }

    fn forecast(&self) -> Option<Limits> {
        let limits = self.inner.forecast()?;
        Some(limits.with_budgets(self.budgets.clone(), self.exhausted))
    }

    fn forecast_due(&self, record: &[u8]) -> u64 {
        self.inner.forecast_due(record).max(self.budgets_due())
    }

    fn earliest(&self, now: u64, record: &[u8], n: u64) -> Option<u64> {
        let inner = self.inner.earliest(now, record, n)?;
        let budgets = self.budgets.iter().map(|b| b.floor(now, n)).max();
        Some(inner.max(budgets.unwrap_or(now)))
    }

    fn budgets(&self, now: u64) -> Vec<BudgetView> {
        self.budgets.iter().map(|b| b.view(now)).collect()
    }

    fn exhausted(&self, now: u64) -> Option<String> {
        if self.exhausted != Exhausted::Stop {
            return None;
        }
        self.budgets
            .iter()
            .find(|b| b.spent_at(now))
            .map(|b| b.budget().to_string())
    }
}
