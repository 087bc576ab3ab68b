//! `--budget`s in front of another schedule: a shared one (`--share` with
//! a shared `--rate`), whose limits are not [`Limits`]. A record leaves
//! only while every budget has room and the inner schedule lets it; it
//! counts against every budget only once it does.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use crate::budget::{BudgetView, Counter, Exhausted};
use crate::schedule::{Limits, Schedule};

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
    fn inner(&self) -> Option<&dyn Schedule> {
        Some(&*self.inner)
    }

    fn inner_mut(&mut self) -> Option<&mut dyn Schedule> {
        Some(&mut *self.inner)
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::probe::{reached, Probe, PROVIDED};

    #[test]
    fn budgets_pass_on_every_call_they_do_not_answer_themselves() {
        let probe = Probe::default();
        let mut s = Budgeted::new(Box::new(probe.clone()), Vec::new(), Exhausted::Stop);
        // The budgets and the one spent are the wrapper's own.
        let passed: Vec<_> = PROVIDED
            .into_iter()
            .filter(|m| !["budgets", "exhausted"].contains(m))
            .collect();
        assert_eq!(reached(&mut s, &probe.0, 1_000_000_000), passed);
    }
}
