//! The `--share` section: what the keepers did with the shared state,
//! for the global limits and for the limits per key.

use serde::Serialize;

use super::exposition::{Exposition, MetricFamily};
use super::spell::text_key;
use super::{Clause, Section};

/// The counters of `--share`, in the summary: what the keepers did with
/// the shared state, for the global limits and for the limits per key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShareStats {
    /// `--share`'s NAME.
    pub name: String,
    /// The global limits' counters (`--rate`), when they are shared.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub global: Option<ShareCounts>,
    /// The limits per key's counters (`--key-rate`), when they are shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_key: Option<ShareCounts>,
}

/// What a forfeited slot is, said beside the count in `--stats`: one this
/// drip reserved and no record used, found out when it was too late to give
/// it back to the other drips.
pub const FORFEITED: &str = "reserved, unused, too late to give back";

/// What one keeper did with the shared state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShareCounts {
    /// Reservations made (calls that granted slots).
    pub reservations: u64,
    /// Reserved slots not used because drip woke up too late for them.
    pub slots_forfeited: u64,
    /// Times the state was found fresh while in use (a restart, a flush).
    pub state_lost: u64,
    /// Calls that failed: the state could not be reached.
    pub failed_calls: u64,
}

impl ShareStats {
    /// The `--stats` lines: `shared NAME: 3
    /// reservations, 0 slots forfeited late (reserved, unused, too late to
    /// give back), state lost 0 times, 0 failed calls`, and the same with
    /// `shared NAME per key:`; NAME shown as a key is ([`text_key`]: at
    /// most [`KEY_SHOWN`](super::spell::KEY_SHOWN) columns).
    fn summary_lines(&self) -> Vec<Vec<Clause>> {
        let name = text_key(Some(self.name.as_bytes()));
        let clauses = |part: &str, c: &ShareCounts| {
            vec![
                (format!("shared {name}{part}:"), ""),
                (format!("{} reservations", c.reservations), ","),
                (
                    format!("{} slots forfeited late ({FORFEITED})", c.slots_forfeited),
                    ",",
                ),
                (format!("state lost {} times", c.state_lost), ","),
                (format!("{} failed calls", c.failed_calls), ""),
            ]
        };
        let global = self.global.as_ref().map(|c| clauses("", c));
        let per_key = self.per_key.as_ref().map(|c| clauses(" per key", c));
        global.into_iter().chain(per_key).collect()
    }
}

impl Section for ShareStats {
    fn key(&self) -> &'static str {
        "share"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self)
    }

    fn lines(&self) -> Vec<Vec<Clause>> {
        self.summary_lines()
    }

    /// In `drip ctl info`, `share` is the NAME alone.
    fn info_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![("share", serde_json::json!(self.name))]
    }

    /// The calls to the shared state and the outages, labelled by the
    /// NAME and the limits (`global`, `per_key`).
    fn metrics(&self, out: &mut Exposition) {
        let parts: Vec<(&str, &ShareCounts)> = [
            ("global", self.global.as_ref()),
            ("per_key", self.per_key.as_ref()),
        ]
        .into_iter()
        .filter_map(|(part, c)| Some((part, c?)))
        .collect();
        for (family, help, get) in [
            (
                "drip_share_reservations_total",
                "Calls to the shared state that granted slots.",
                (|c: &ShareCounts| c.reservations) as fn(&ShareCounts) -> u64,
            ),
            (
                "drip_share_failed_calls_total",
                "Calls to the shared state that failed: it could not be reached.",
                |c| c.failed_calls,
            ),
            (
                "drip_share_state_lost_total",
                "Times the shared state was found fresh while in use.",
                |c| c.state_lost,
            ),
            (
                "drip_share_slots_forfeited_total",
                "Reserved slots not used in time.",
                |c| c.slots_forfeited,
            ),
        ] {
            let mut f = MetricFamily::new(out, family, "counter", help);
            for (part, c) in &parts {
                f.sample(&[("share", &self.name), ("limits", part)], get(c) as f64);
            }
        }
    }
}
