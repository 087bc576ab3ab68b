//! The `--share-jobs` section: the job limit shared by the drips on the
//! NAME, as this drip sees it.

use serde::Serialize;

use super::exposition::Exposition;
use super::{Clause, Section};

/// What `--stats`, `--metrics` and `drip ctl` show of the shared job
/// limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShareJobsFigures {
    /// N of `--share-jobs`.
    pub limit: u64,
    /// Leases this drip holds (its running jobs).
    pub held: u64,
    /// Leases held across every drip on the NAME, at the last call.
    pub fleet: u64,
    /// Times a job waited because the fleet was full.
    pub waits: u64,
    /// Calls to the shared state that failed.
    pub failed_calls: u64,
}

impl Section for ShareJobsFigures {
    fn key(&self) -> &'static str {
        "share_jobs"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain data")
    }

    /// `shared jobs 3 of 8 held here (8 across the drips, waited 12
    /// times)`.
    fn clauses(&self) -> Vec<Clause> {
        let text = format!(
            "shared jobs {} of {} held here ({} across the drips, waited {} times)",
            self.held, self.limit, self.fleet, self.waits
        );
        vec![(text, ",")]
    }

    fn metrics(&self, out: &mut Exposition) {
        out.gauge(
            "drip_share_jobs_limit",
            "--share-jobs: jobs that may run at once across the drips on the NAME.",
            self.limit as f64,
        );
        out.gauge(
            "drip_share_jobs_held",
            "--share-jobs: leases this drip holds (its running jobs).",
            self.held as f64,
        );
        out.gauge(
            "drip_share_jobs_fleet",
            "--share-jobs: leases held across the drips on the NAME, at the last call.",
            self.fleet as f64,
        );
        out.counter(
            "drip_share_jobs_waits_total",
            "--share-jobs: times a job waited because the drips ran N jobs.",
            self.waits as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_job_limit_reads_in_every_view() {
        let f = ShareJobsFigures {
            limit: 8,
            held: 3,
            fleet: 8,
            waits: 12,
            failed_calls: 0,
        };
        assert_eq!(
            f.clauses(),
            [(
                "shared jobs 3 of 8 held here (8 across the drips, waited 12 times)".to_string(),
                ","
            )]
        );
        assert_eq!(f.json()["fleet"], 8);
        let mut out = Exposition {
            out: String::new(),
            drip: "x".to_string(),
        };
        f.metrics(&mut out);
        assert!(
            out.out.contains("\ndrip_share_jobs_held{drip=\"x\"} 3\n"),
            "{}",
            out.out
        );
        assert!(out
            .out
            .contains("\ndrip_share_jobs_waits_total{drip=\"x\"} 12\n"));
    }
}
