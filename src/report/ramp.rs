//! The `--ramp` section: the fraction of the rate in force, the time left.

use serde::Serialize;

use super::exposition::Exposition;
use super::spell::format_ms;
use super::{Clause, Section, Spot};

/// Where a `--ramp` stands: the fraction of the rate in force.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RampState {
    /// The fraction of the rate the ramp starts at (0 to 1).
    pub from: f64,
    /// How long the ramp rises for, ms.
    pub over_ms: f64,
    /// The fraction of the rate in force now (1 once the ramp is over).
    pub fraction: f64,
    /// How long the ramp has left, ms (0 once it is over); it begins with
    /// the first record that leaves.
    pub left_ms: f64,
}

impl RampState {
    /// The summary's clause: `ramp 40% (2.00s left)`, `ramp done`.
    fn clause(&self) -> String {
        if self.left_ms > 0.0 {
            format!(
                "ramp {:.0}% ({} left)",
                self.fraction * 100.0,
                format_ms(self.left_ms)
            )
        } else {
            "ramp done".to_string()
        }
    }
}

impl Section for RampState {
    fn key(&self) -> &'static str {
        "ramp"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self)
    }

    fn clauses(&self) -> Vec<Clause> {
        vec![(self.clause(), ",")]
    }

    /// On the display while it rises: `ramp 40%`.
    fn shown(&self) -> Option<(Spot, String)> {
        let text = format!("ramp {:.0}%", self.fraction * 100.0);
        (self.left_ms > 0.0).then_some((Spot::InForce, text))
    }

    fn metrics(&self, out: &mut Exposition) {
        out.gauge(
            "drip_ramp_fraction",
            "The fraction of the rate a --ramp lets go now (1 once it is over).",
            self.fraction,
        );
    }
}
