//! The waiting room's section: its bounds given as durations, what waits
//! now, and the wait a record arriving now would face (the figures to
//! compare with a service level).

use super::capacity::SizedBound;
use super::exposition::Exposition;
use super::spell::format_ms;
use super::{Among, Clause, Section};

/// The waiting records at a moment, the wait a record arriving then would
/// face, and the bounds given as durations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Queue {
    /// Records waiting.
    pub depth: u64,
    /// How long the oldest waiting record has waited, ms (0: none waits).
    pub oldest_age_ms: f64,
    /// How long a record arriving now (the size of the latest one read)
    /// would wait before it leaves, ms: the forecast over the records
    /// waiting ahead of it and every limit, with limits per key the
    /// longest over the keys with records waiting; `null` when it cannot
    /// be forecast (`--share`).
    pub forecast_wait_ms: Option<f64>,
    /// The bounds given as durations (`-c 30s`, `--key-capacity 30s`):
    /// what they came to.
    pub bounds: Vec<SizedBound>,
}

impl Queue {
    /// The summary's clause while records wait: `waiting 20 (oldest
    /// 1.20s, wait 2.10s)`; `None` when nothing waits.
    pub fn clause(&self) -> Option<String> {
        if self.depth == 0 {
            return None;
        }
        let wait = self
            .forecast_wait_ms
            .map_or(String::new(), |w| format!(", wait {}", format_ms(w)));
        Some(format!(
            "waiting {} (oldest {}{wait})",
            self.depth,
            format_ms(self.oldest_age_ms)
        ))
    }
}

impl Section for Queue {
    fn key(&self) -> &'static str {
        "queue"
    }

    fn json(&self) -> serde_json::Value {
        let fields = self.fields().into_iter();
        serde_json::Value::Object(fields.map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// Among the summary's own fields: `depth`, `oldest_age_ms`,
    /// `forecast_wait_ms`, and each bound given as a duration
    /// (`capacity_for`, `key_capacity_for`).
    fn fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        let mut fields = self.interval_fields();
        fields.extend(self.bounds.iter().map(SizedBound::field));
        fields
    }

    fn place(&self) -> Among {
        Among::Waits
    }

    /// The bounds given as durations, then what waits: `cap 300 (30s, by
    /// --rate 10/s); waiting 20 (oldest 1.20s, wait 2.10s),`.
    fn clauses(&self) -> Vec<Clause> {
        let mut clauses: Vec<Clause> = self.bounds.iter().map(SizedBound::clause).collect();
        clauses.extend(self.clause().map(|c| (c, ",")));
        clauses
    }

    /// What waits now (the bounds are said once, in the summary).
    fn interval_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("depth", serde_json::json!(self.depth)),
            ("oldest_age_ms", serde_json::json!(self.oldest_age_ms)),
            ("forecast_wait_ms", serde_json::json!(self.forecast_wait_ms)),
        ]
    }

    /// None: `drip ctl info` says the depth among its own fields.
    fn info_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }

    /// The forecast wait (the depth and the oldest age are the file's own
    /// gauges, read as it is written).
    fn metrics(&self, out: &mut Exposition) {
        if let Some(wait_ms) = self.forecast_wait_ms {
            out.gauge(
                "drip_forecast_wait_seconds",
                "The wait a record arriving now would face, as the schedule foresees it, seconds.",
                wait_ms / 1e3,
            );
        }
    }
}
