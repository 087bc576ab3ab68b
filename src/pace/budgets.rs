//! The `--budget`s as a stage of the pace, in front of the base (local
//! or shared): a record leaves only while every budget has room and the
//! part behind lets it; it counts against every budget once it does.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use crate::budget::{BudgetView, Budgets, Counter, Exhausted};

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

    fn nth_due(&self, record: &[u8], n: usize, behind: &Behind<'_>) -> Option<u64> {
        Some(behind.nth_due(record, n)?.max(self.0.due()))
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

    fn budgets(&self, now: u64) -> Vec<BudgetView> {
        self.0.views(now)
    }

    fn exhausted(&self, now: u64) -> Option<String> {
        self.0.exhausted(now)
    }
}
