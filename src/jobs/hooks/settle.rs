//! `--settle`: what each attempt really spent, read from the usage file it
//! wrote (`{usage}`) or its stdout, settled on the cost limits (an
//! overestimate given back, an underestimate charged) and on the token
//! windows of the quotas.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{AttemptEnd, Hook};
use crate::cost::Estimate;
use crate::jobs::attempt;
use crate::jobs::parts::PoolParts;
use crate::jobs::quota::CostBudgets;
use crate::jobs::retry::Exit;
use crate::jobs::JobConfig;

/// The most of a job's stdout read to settle its cost (bytes).
const SETTLE_MOST: u64 = 1 << 20;

/// The costs settled, and how.
pub(in crate::jobs) struct Settle {
    /// Each cost settled (its place among `--cost`'s costs) and the
    /// estimate read from a job's output for it.
    settle: Vec<(usize, Estimate)>,
    /// The cost budgets the token quotas pace.
    budgets: CostBudgets,
    /// `-q`: nothing said on stderr.
    quiet: bool,
    /// An output with no number to settle was said on stderr.
    unread_said: AtomicBool,
}

impl Settle {
    /// The settlement `--settle` asks for, with the cost `budgets`.
    pub(in crate::jobs) fn of(cfg: &JobConfig, budgets: &CostBudgets) -> Option<Settle> {
        (!cfg.settle.is_empty()).then(|| Settle {
            settle: cfg.settle.clone(),
            budgets: budgets.clone(),
            quiet: cfg.quiet,
            unread_said: AtomicBool::new(false),
        })
    }
}

impl Hook for Settle {
    /// What the attempt really spent, read from the usage file it wrote
    /// beside its headers file, else from its stdout, settled on the cost
    /// limits; the writer is woken, as records may go sooner. A
    /// successful attempt whose output has no such number keeps its
    /// estimate, said once on stderr.
    fn attempt_ended(&self, pool: &PoolParts, end: &AttemptEnd) {
        let settle = &self.settle;
        let Some(costs) = settle.iter().map(|(i, _)| i + 1).max() else {
            return;
        };
        let (output, len) = attempt::take_usage(end.headers, SETTLE_MOST)
            .map(|u| {
                let len = u.len() as u64;
                (u, len)
            })
            .or_else(|| end.files.stdout_text(SETTLE_MOST))
            .unwrap_or_default();
        let spent = crate::cost::spent_from(settle, costs, &output, len);
        let succeeded = matches!(end.ended.exit, Exit::Code(0));
        let unread = succeeded && settle.iter().any(|(i, _)| spent[*i].is_none());
        if unread && !self.unread_said.swap(true, Ordering::Relaxed) && !self.quiet {
            let why = if len > SETTLE_MOST {
                "is larger than 1 MiB, and its last line has no number to settle"
            } else {
                "has no number to settle"
            };
            eprintln!(
                "drip: --settle: the output of record {} {why}; its estimate stands (said once)",
                end.number
            );
        }
        let record = end.record;
        let mut st = pool.shared.lock();
        let now = pool.shared.clock.now();
        st.adm.schedule_mut().settle(now, record, &spent);
        drop(st);
        pool.shared.data_ready.notify_all();
        // The token windows space starts by what records spend.
        let estimated = self.budgets.costs(record);
        let settled = self.budgets.settled(record, &spent);
        pool.gate
            .settled_tokens(&pool.records.scope_of(record), &estimated, &settled);
    }
}
