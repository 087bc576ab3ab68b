//! The `--budget`s' section: each budget's window as it stands (its
//! limit, what is left, when the next window starts).

use serde::Serialize;

use super::exposition::{Exposition, MetricFamily};
use super::spell::{format_ms, seconds};
use super::{Clause, Section, Spot};

/// One `--budget` at a moment, for the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetStats {
    /// The budget as given, its zone named: `20/second@UTC`.
    pub budget: String,
    /// Records each window allows.
    pub limit: u64,
    /// Records left in the window now.
    pub left: u64,
    /// When the next window starts, as the zone's clock shows it.
    pub reset: String,
    /// When the next window starts, seconds since the Unix epoch.
    pub reset_unix: f64,
    /// How long until then, ms.
    pub reset_in_ms: f64,
}

impl BudgetStats {
    /// The figures of `view`, seen at `now` (ns on the schedule's clock).
    pub fn of(view: &crate::budget::BudgetView, now: u64) -> BudgetStats {
        BudgetStats {
            budget: view.budget.clone(),
            limit: view.count,
            left: view.left,
            reset: view.reset_text.clone(),
            reset_unix: view.reset_unix_ns as f64 / 1e9,
            reset_in_ms: view.reset_at.saturating_sub(now) as f64 / 1e6,
        }
    }

    /// How long until the next window: `300.0ms` under a second, else
    /// to the second in days, hours, minutes and seconds (`28d7h48m53s`).
    fn reset_in(&self) -> String {
        if self.reset_in_ms < 1000.0 {
            format_ms(self.reset_in_ms)
        } else {
            let whole = std::time::Duration::from_secs((self.reset_in_ms / 1000.0) as u64);
            crate::quantity::spell_duration(whole)
        }
    }

    /// The summary's line: `budget 20/second@UTC: 5 of 20 left, next
    /// window 2026-12-03 15:52:00 UTC (in 300.0ms)`.
    fn clauses(&self) -> Vec<Clause> {
        vec![
            (format!("budget {}:", self.budget), ""),
            (format!("{} of {} left", self.left, self.limit), ","),
            (
                format!("next window {} (in {})", self.reset, self.reset_in()),
                "",
            ),
        ]
    }
}

/// Every `--budget` at a moment: the section, left out when there are none.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetsSection(pub Vec<BudgetStats>);

impl BudgetsSection {
    /// The budgets of `views`, seen at `now` (ns on the schedule's clock);
    /// `None` without a budget.
    pub fn of(views: &[crate::budget::BudgetView], now: u64) -> Option<BudgetsSection> {
        let stats: Vec<_> = views.iter().map(|b| BudgetStats::of(b, now)).collect();
        (!stats.is_empty()).then_some(BudgetsSection(stats))
    }
}

impl Section for BudgetsSection {
    fn key(&self) -> &'static str {
        "budgets"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self.0)
    }

    /// A line each: `budget 20/second@UTC: 5 of 20 left, next window
    /// 2026-12-03 15:52:00 UTC (in 300.0ms)`.
    fn lines(&self) -> Vec<Vec<Clause>> {
        self.0.iter().map(BudgetStats::clauses).collect()
    }

    /// On the display, the budget with the least left: `budget 970/1000
    /// reset 3.2s`.
    fn shown(&self) -> Option<(Spot, String)> {
        let b = self.0.iter().min_by_key(|b| b.left)?;
        let reset_in = seconds((b.reset_in_ms * 1e6) as u64);
        let text = format!("budget {}/{} reset {reset_in}", b.left, b.limit);
        Some((Spot::Figures, text))
    }

    /// Each window's limit, what is left of it, when the next starts;
    /// labelled by the budget as given.
    fn metrics(&self, out: &mut Exposition) {
        type BudgetFigure = fn(&BudgetStats) -> f64;
        let families: [(&str, &str, BudgetFigure); 3] = [
            (
                "drip_budget_limit",
                "Records each window of a --budget allows.",
                |b| b.limit as f64,
            ),
            (
                "drip_budget_remaining",
                "Records left in the current window of a --budget.",
                |b| b.left as f64,
            ),
            (
                "drip_budget_reset_time_seconds",
                "When the next window of a --budget starts, seconds since the epoch.",
                |b| b.reset_unix,
            ),
        ];
        for (name, help, figure) in families {
            let mut family = MetricFamily::new(out, name, "gauge", help);
            for b in &self.0 {
                family.sample(&[("budget", &b.budget)], figure(b));
            }
        }
    }
}
