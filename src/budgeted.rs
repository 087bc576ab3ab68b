//! `--budget`s in front of another schedule: a shared one (`--share` with
//! a shared `--rate`), whose limits are not [`Limits`]. A record leaves
//! only while every budget has room and the inner schedule lets it; it
//! counts against every budget only once it does.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use crate::budget::{BudgetView, Budgets, Counter, Exhausted};
use crate::schedule::{Limits, Schedule};

/// `budgets` in front of `inner`.
#[derive(Debug)]
pub struct Budgeted {
    inner: Box<dyn Schedule>,
    budgets: Budgets,
}

impl Budgeted {
    /// `budgets` in front of `inner`; `exhausted` says what a spent one
    /// does.
    pub fn new(inner: Box<dyn Schedule>, budgets: Vec<Counter>, exhausted: Exhausted) -> Budgeted {
        let budgets = Budgets {
            counters: budgets,
            exhausted,
        };
        Budgeted { inner, budgets }
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

    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        let room = self.budgets.room(now, available);
        if room == 0 {
            return 0;
        }
        let n = self.inner.release(now, room, records);
        if n > 0 {
            self.budgets.spend(now, n);
        }
        n
    }

    fn next_due(&self, record: &[u8]) -> u64 {
        self.inner.next_due(record).max(self.budgets.due())
    }

    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        Some(self.inner.nth_due(record, n)?.max(self.budgets.due()))
    }

    fn forecast(&self) -> Option<Limits> {
        let limits = self.inner.forecast()?;
        let Budgets {
            counters,
            exhausted,
        } = self.budgets.clone();
        Some(limits.with_budgets(counters, exhausted))
    }

    fn forecast_due(&self, record: &[u8]) -> u64 {
        self.inner.forecast_due(record).max(self.budgets.due())
    }

    fn earliest(&self, now: u64, record: &[u8], n: u64) -> Option<u64> {
        let inner = self.inner.earliest(now, record, n)?;
        Some(inner.max(self.budgets.floor(now, n)))
    }

    fn budgets(&self, now: u64) -> Vec<BudgetView> {
        self.budgets.views(now)
    }

    fn exhausted(&self, now: u64) -> Option<String> {
        self.budgets.exhausted(now)
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
