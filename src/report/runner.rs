//! The command runner's section (`--exec`): its figures, which change
//! how the summary's counts read (records go to jobs).

use serde::Serialize;

use super::exposition::{Exposition, MetricFamily};
use super::spell::{format_ms, format_rate};
use super::{Among, Clause, Section, Wording};

/// The command runner's figures (`--exec`), in the summary and the stats
/// stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct JobStats {
    /// Jobs running now (a job waiting for its retry included).
    pub jobs_running: u64,
    /// Attempts started again after a failure or an overload.
    pub retries: u64,
    /// Attempts answered with overload (429, 503, a rate limit's 403,
    /// `--overload-on`).
    pub overload_responses: u64,
    /// Times every start paused for an overload.
    pub pauses: u64,
    /// Time spent paused so far, ms.
    pub paused_ms: f64,
    /// The rate starts are held to now (lowered by `--adapt`), per second.
    pub effective_rate: f64,
    /// Median attempt duration, ms.
    pub attempt_p50_ms: f64,
    /// 99th percentile attempt duration, ms.
    pub attempt_p99_ms: f64,
    /// Jobs' outputs (an attempt's stdout or stderr; with `--keep-order`
    /// a record's held output) not passed on whole: a closed stdout, a
    /// failed write, or a stalled one at a second signal.
    pub outputs_cut: u64,
    /// Bytes of those outputs not written.
    pub output_bytes_unwritten: u64,
    /// The configured rate of starts, per second (infinite: unpaced); not
    /// in the JSON, where `effective_rate` says the rate in force.
    #[serde(skip)]
    pub configured_rate: f64,
}

impl JobStats {
    /// The jobs' clauses of the summary, each with the separator after it
    /// (the records' fates, succeeded and failed, are among the counts):
    /// the jobs running, the retries, the overloads, the limit on starts (`start limit 10.00/s`, `lowered from` the
    /// configured rate by an overload's ramp, `--adapt` or a quota; `starts
    /// unpaced` when none), the attempt durations only when an attempt
    /// ended (`ended`: records whose job ended), and the outputs cut when
    /// any.
    pub fn clauses(&self, ended: u64) -> Vec<Clause> {
        let limit = if !self.effective_rate.is_finite() {
            "starts unpaced".to_string()
        } else if self.effective_rate < self.configured_rate * 0.995 {
            let from = if self.configured_rate.is_finite() {
                format_rate(self.configured_rate)
            } else {
                "unpaced".to_string()
            };
            format!(
                "start limit {} (lowered from {from})",
                format_rate(self.effective_rate)
            )
        } else {
            format!("start limit {}", format_rate(self.effective_rate))
        };
        let mut clauses = vec![
            (format!("jobs: running {}", self.jobs_running), ","),
            (format!("retries {}", self.retries), ","),
            (
                format!("overload responses {}", self.overload_responses),
                ",",
            ),
            (
                format!("pauses {} ({})", self.pauses, format_ms(self.paused_ms)),
                ",",
            ),
            (limit, ","),
        ];
        if ended + self.retries > 0 {
            clauses.push((
                format!(
                    "attempt p50 {} p99 {}",
                    format_ms(self.attempt_p50_ms),
                    format_ms(self.attempt_p99_ms)
                ),
                ",",
            ));
        }
        if self.outputs_cut > 0 {
            clauses.push((
                format!(
                    "outputs cut {} ({} bytes not written)",
                    self.outputs_cut, self.output_bytes_unwritten
                ),
                ",",
            ));
        }
        if let Some(last) = clauses.last_mut() {
            last.1 = ";";
        }
        clauses
    }
}

/// The runner's section: its figures, the job slots, and the records
/// whose job succeeded or failed for good (the ledger's counts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunnerFigures {
    /// The runner's figures.
    pub stats: JobStats,
    /// The job slots (`-j`, or as `drip ctl … -j` set them).
    pub slots: usize,
    /// Records whose job succeeded.
    pub succeeded: u64,
    /// Records whose job failed for good.
    pub failed: u64,
}

impl Section for RunnerFigures {
    fn key(&self) -> &'static str {
        "jobs"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self.stats)
    }

    /// Among the summary's own fields, one by one (`jobs_running`,
    /// `retries`, …).
    fn fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        let j = &self.stats;
        vec![
            ("jobs_running", serde_json::json!(j.jobs_running)),
            ("retries", serde_json::json!(j.retries)),
            (
                "overload_responses",
                serde_json::json!(j.overload_responses),
            ),
            ("pauses", serde_json::json!(j.pauses)),
            ("paused_ms", serde_json::json!(j.paused_ms)),
            ("effective_rate", serde_json::json!(j.effective_rate)),
            ("attempt_p50_ms", serde_json::json!(j.attempt_p50_ms)),
            ("attempt_p99_ms", serde_json::json!(j.attempt_p99_ms)),
            ("outputs_cut", serde_json::json!(j.outputs_cut)),
            (
                "output_bytes_unwritten",
                serde_json::json!(j.output_bytes_unwritten),
            ),
        ]
    }

    fn place(&self) -> Among {
        Among::Work
    }

    fn clauses(&self) -> Vec<Clause> {
        self.stats.clauses(self.succeeded + self.failed)
    }

    /// Records go to jobs: `succeeded N, failed N` for `written N`, the
    /// wait to a job's start, the measured rate of starts.
    fn wording(&self) -> Option<Wording> {
        Some(Wording {
            left: vec![
                (format!("succeeded {}", self.succeeded), ","),
                (format!("failed {}", self.failed), ","),
            ],
            wait: "max wait to start",
            rate: "measured start rate",
        })
    }

    /// The records done, then the runner's figures.
    fn interval_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        let mut fields = vec![
            ("succeeded", serde_json::json!(self.succeeded)),
            ("failed", serde_json::json!(self.failed)),
        ];
        fields.extend(self.fields());
        fields
    }

    /// The job slots and the records done.
    fn info_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("jobs", serde_json::json!(self.slots)),
            ("succeeded", serde_json::json!(self.succeeded)),
            ("failed", serde_json::json!(self.failed)),
        ]
    }

    fn metrics(&self, out: &mut Exposition) {
        let j = &self.stats;
        let mut f = MetricFamily::new(
            out,
            "drip_jobs_total",
            "counter",
            "Records whose job ended, by outcome.",
        );
        f.sample(&[("outcome", "succeeded")], self.succeeded as f64)
            .sample(&[("outcome", "failed")], self.failed as f64);
        out.gauge(
            "drip_jobs_running",
            "Jobs running now.",
            j.jobs_running as f64,
        );
        out.counter(
            "drip_job_retries_total",
            "Attempts started again after a failure or an overload.",
            j.retries as f64,
        );
        out.counter(
            "drip_overload_responses_total",
            "Attempts answered with overload.",
            j.overload_responses as f64,
        );
        out.counter(
            "drip_overload_pauses_total",
            "Times every start paused for an overload.",
            j.pauses as f64,
        );
        out.counter(
            "drip_overload_paused_seconds_total",
            "Time spent paused for overloads, seconds.",
            j.paused_ms / 1e3,
        );
        out.counter(
            "drip_job_outputs_cut_total",
            "Jobs' outputs not passed on whole (each attempt's stdout and stderr, or with --keep-order a record's held output): stdout or stderr closed, a failed write, or stalled when drip left.",
            j.outputs_cut as f64,
        );
        out.counter(
            "drip_job_output_bytes_unwritten_total",
            "Bytes of the jobs' outputs not written.",
            j.output_bytes_unwritten as f64,
        );
        out.gauge(
            "drip_job_start_rate",
            "The rate job starts are held to now, per second.",
            j.effective_rate,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields among the summary's are the figures' JSON, one by one
    /// (as `drip ctl jobs` gives them), infinite rates and all.
    #[test]
    fn the_fields_are_the_figures_json() {
        let figures = RunnerFigures {
            stats: JobStats {
                jobs_running: 2,
                retries: 3,
                paused_ms: 1.5,
                effective_rate: f64::INFINITY,
                attempt_p99_ms: 7.25,
                output_bytes_unwritten: 9,
                ..JobStats::default()
            },
            slots: 4,
            succeeded: 5,
            failed: 1,
        };
        let fields: serde_json::Map<_, _> = figures
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(
            serde_json::Value::Object(fields).to_string(),
            serde_json::to_string(&figures.stats).unwrap()
        );
    }

    #[test]
    fn job_clauses_say_unpaced_and_leave_out_attempts_when_none_ended() {
        let jobs = JobStats {
            effective_rate: f64::INFINITY,
            ..JobStats::default()
        };
        let text: Vec<String> = jobs
            .clauses(0)
            .into_iter()
            .map(|(t, sep)| format!("{t}{sep}"))
            .collect();
        let text = text.join(" ");
        assert!(text.ends_with("starts unpaced;"), "{text}");
        assert!(!text.contains("attempt"), "{text}");
        let paced = JobStats {
            effective_rate: 5.0,
            configured_rate: 5.0,
            attempt_p50_ms: 1.5,
            ..JobStats::default()
        };
        let text: Vec<String> = paced.clauses(2).into_iter().map(|(t, _)| t).collect();
        assert!(text.contains(&"start limit 5.00/s".to_string()), "{text:?}");
        assert!(
            text.contains(&"attempt p50 1.5ms p99 0.0ms".to_string()),
            "{text:?}"
        );
    }
}
