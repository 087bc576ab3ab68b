//! The bounds given as durations (`--capacity 30s`, `--key-capacity
//! 30s`): what each came to, shown with the waiting room's figures.

use serde::Serialize;

use super::spell::format_duration_ms;
use super::Clause;

/// A capacity given as a duration (`--capacity 30s`, `--key-capacity`):
/// the records (or bytes) the tightest limit lets go in that time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityFor {
    /// The duration given, ms.
    pub duration_ms: f64,
    /// What it came to: records, or bytes when only byte limits are given.
    pub capacity: u64,
    /// `records` or `bytes`.
    pub unit: &'static str,
    /// The limit that set it: `--rate 10/s`.
    pub set_by: String,
}

impl CapacityFor {
    /// The summary's clause, `what` being `cap` or `key cap`: `cap 300
    /// (30s, by --rate 10/s)`.
    pub fn clause(&self, what: &str) -> String {
        let unit = if self.unit == "bytes" { " bytes" } else { "" };
        format!(
            "{what} {}{unit} ({}, by {})",
            self.capacity,
            format_duration_ms(self.duration_ms),
            self.set_by
        )
    }
}

/// A bound given as a duration, as the waiting room's section shows it
/// ([`super::waiting::Queue`]): its clause in the summary, with the waits,
/// and its object in the JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SizedBound {
    /// Its key: `capacity_for`, `key_capacity_for`.
    key: &'static str,
    /// Its name in the summary: `cap`, `key cap`.
    what: &'static str,
    /// What it came to.
    sized: CapacityFor,
}

impl SizedBound {
    /// `--capacity` given as a duration, sized so.
    pub fn capacity(sized: CapacityFor) -> SizedBound {
        SizedBound {
            key: "capacity_for",
            what: "cap",
            sized,
        }
    }

    /// `--key-capacity` given as a duration, sized so.
    pub fn key_capacity(sized: CapacityFor) -> SizedBound {
        SizedBound {
            key: "key_capacity_for",
            what: "key cap",
            sized,
        }
    }

    /// Its field in the JSON: `"capacity_for": {"duration_ms": …}`.
    pub fn field(&self) -> (&'static str, serde_json::Value) {
        (self.key, serde_json::json!(self.sized))
    }

    /// Its clause in the summary: `cap 300 (30s, by --rate 10/s);`.
    pub fn clause(&self) -> Clause {
        (self.sized.clause(self.what), ";")
    }
}
