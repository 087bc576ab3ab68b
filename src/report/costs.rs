//! The cost limits' section: what each named cost spent (the estimates
//! charged as records left, what settlement gave back or charged on top,
//! what is in flight).

use serde::Serialize;

use super::exposition::{Exposition, MetricFamily};
use super::{Clause, Section};

/// What one named cost spent, for the summary: its cost limits' charges
/// in the cost's units (tokens, say), several of one name counted once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CostStats {
    /// The cost limit's name as given (`in`, `in+out`); `""` for the
    /// unnamed cost.
    pub cost: String,
    /// What was spent: `estimated - settled_back + settled_extra`.
    pub spent: u64,
    /// Charged as records left: their estimates.
    pub estimated: u64,
    /// Given back by settlement (`--settle`): spent below the estimates.
    pub settled_back: u64,
    /// Charged by settlement on top: spent above the estimates.
    pub settled_extra: u64,
    /// With `--settle`: the estimates of the records not settled yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
}

impl CostStats {
    /// The figures of `view`.
    pub fn of(view: &crate::settle::CostView) -> CostStats {
        CostStats {
            cost: view.name.clone(),
            spent: view.spent(),
            estimated: view.estimated,
            settled_back: view.settled_back,
            settled_extra: view.settled_extra,
            in_flight: view.in_flight,
        }
    }

    /// The summary's line: `cost in: 340 spent (estimated 350, 60
    /// settled back, 50 settled extra), 50 in flight`; the parenthesis
    /// once settlement changed something, the last clause with `--settle`.
    fn clauses(&self) -> Vec<Clause> {
        let name = match self.cost.as_str() {
            "" => "cost:".to_string(),
            name => format!("cost {name}:"),
        };
        let settled = self.settled_back > 0 || self.settled_extra > 0;
        let sep = if settled { "" } else { "," };
        let mut clauses = vec![(format!("{name} {} spent", self.spent), sep)];
        if settled {
            clauses.push((
                format!(
                    "(estimated {}, {} settled back, {} settled extra)",
                    self.estimated, self.settled_back, self.settled_extra
                ),
                ",",
            ));
        }
        if let Some(in_flight) = self.in_flight {
            clauses.push((format!("{in_flight} in flight"), ""));
        }
        clauses
    }
}

/// Every named cost's figures: the section, left out without a cost limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostsSection(pub Vec<CostStats>);

impl CostsSection {
    /// The figures of `views`; `None` when there are none.
    pub fn of(views: &[crate::settle::CostView]) -> Option<CostsSection> {
        let stats: Vec<_> = views.iter().map(CostStats::of).collect();
        (!stats.is_empty()).then_some(CostsSection(stats))
    }
}

impl Section for CostsSection {
    fn key(&self) -> &'static str {
        "costs"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self.0)
    }

    fn lines(&self) -> Vec<Vec<Clause>> {
        self.0.iter().map(CostStats::clauses).collect()
    }

    /// What each named cost was charged as records left (their
    /// estimates), what settlement gave back or charged on top (counters,
    /// which only rise), what it spent all told (a gauge: it falls as
    /// settlement gives back), what is in flight (with `--settle`);
    /// labelled by the cost's name as given (`""`: the unnamed).
    fn metrics(&self, out: &mut Exposition) {
        type CostFigure = fn(&CostStats) -> f64;
        let families: [(&str, &str, &str, CostFigure); 4] = [
            (
                "drip_cost_estimated_total",
                "counter",
                "Cost charged as records left: their estimates.",
                |c| c.estimated as f64,
            ),
            (
                "drip_cost_settled_back_total",
                "counter",
                "Cost settlement gave back: what records spent below their estimates.",
                |c| c.settled_back as f64,
            ),
            (
                "drip_cost_settled_extra_total",
                "counter",
                "Cost settlement charged on top: what records spent above their estimates.",
                |c| c.settled_extra as f64,
            ),
            (
                "drip_cost_spent",
                "gauge",
                "Cost spent: the estimates charged, less what settlement gave back, plus what it charged on top.",
                |c| c.spent as f64,
            ),
        ];
        for (name, kind, help, figure) in families {
            let mut family = MetricFamily::new(out, name, kind, help);
            for c in &self.0 {
                family.sample(&[("cost", &c.cost)], figure(c));
            }
        }
        if self.0.iter().any(|c| c.in_flight.is_some()) {
            let mut family = MetricFamily::new(
                out,
                "drip_cost_in_flight",
                "gauge",
                "Cost estimated for the records not settled yet (--settle).",
            );
            for c in &self.0 {
                if let Some(in_flight) = c.in_flight {
                    family.sample(&[("cost", &c.cost)], in_flight as f64);
                }
            }
        }
    }
}
