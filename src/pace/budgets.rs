//! The `--budget`s as a stage of the pace, in front of the base (local
//! or shared): a record leaves only while every budget has room and the
//! part behind lets it; it counts against every budget once it does.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use std::sync::Arc;

use crate::budget::{Budgets, Counter, Exhausted};
use crate::report::budgets::BudgetsSection;
use crate::report::Section;

use super::{Behind, Releasing, Stage};

/// The `--budget`s in front of the base.
#[derive(Debug, Clone)]
pub struct BudgetStage(Budgets);

impl BudgetStage {
    /// `counters`, one per `--budget`; `exhausted` says what a spent one
    /// does.
    pub fn new(counters: Vec<Counter>, exhausted: Exhausted) -> BudgetStage {
        BudgetStage(Budgets {
            counters,
            exhausted,
        })
    }
}

impl Stage for BudgetStage {
    fn release(&mut self, now: u64, available: usize, behind: &mut Releasing<'_, '_, '_>) -> usize {
        let room = self.0.room(now, available);
        if room == 0 {
            return 0;
        }
        let n = behind.release(room);
        if n > 0 {
            self.0.spend(now, n);
        }
        n
    }

    fn next_due(&self, record: &[u8], behind: &Behind<'_>) -> u64 {
        behind.next_due(record).max(self.0.due())
    }

    /// The part behind's answer moved as far as the budgets move the
    /// first (a spent window's end): the records after it keep their
    /// spacing from there.
    fn nth_due(&self, record: &[u8], n: usize, behind: &Behind<'_>) -> Option<u64> {
        let nth = behind.nth_due(record, n)?;
        let due = self.0.due();
        let later = due.saturating_sub(behind.next_due(record));
        Some(nth.saturating_add(later).max(due))
    }

    fn limits(&self) -> bool {
        !self.0.is_empty()
    }

    fn copy(&self) -> Option<Box<dyn Stage>> {
        Some(Box::new(self.clone()))
    }

    fn floor(&self, now: u64, n: u64) -> u64 {
        self.0.floor(now, n)
    }

    /// Where each budget stands at `now`.
    fn section(&self, now: u64) -> Option<Arc<dyn Section>> {
        let section = BudgetsSection::of(&self.0.views(now), now)?;
        Some(Arc::new(section))
    }

    fn exhausted(&self, now: u64) -> Option<String> {
        self.0.exhausted(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::parse_budget;
    use crate::pace::Pace;
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Unit};

    const MS: u64 = 1_000_000;

    /// 10/s behind `2/second@UTC`, the window's two spent at 0: the next
    /// record waits for the next window (1 s), and the n-th after it keeps
    /// the rate's spacing from there, as when the limits held the budgets.
    #[test]
    fn the_nth_departure_after_a_spent_window_keeps_the_rates_spacing() {
        let limits = Limits::new(&[Limit {
            rate: parse_rate("10/s").unwrap(),
            burst: 2,
            unit: Unit::Records,
        }]);
        let counter = Counter::new(parse_budget("2/second@UTC").unwrap(), 0);
        let stage = BudgetStage::new(vec![counter], Exhausted::Wait);
        let mut pace = Pace::local(limits).with_stage(Box::new(stage));
        assert_eq!(pace.release(0, 5, &mut std::iter::empty()), 2);
        assert_eq!(pace.next_due(b"x"), 1000 * MS);
        assert_eq!(pace.nth_due(b"x", 0), Some(1000 * MS));
        assert_eq!(pace.nth_due(b"x", 3), Some(1300 * MS));
    }
}
