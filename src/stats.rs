//! The accounting: every record read is written, dropped, expired,
//! skipped or undelivered, and these counts prove it.

use serde::Serialize;

use crate::bucket::{Fate, Piece};
use crate::report::spell::{columns, format_ms, format_rate};
use crate::report::{Among, Clause, Sections, Wording};

/// Counts of records by what became of them, and a few gauges.
///
/// Invariant once drip has finished:
/// `read = written + dropped_newest + dropped_oldest + expired + skipped +
/// undelivered`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Records read from the inputs.
    pub read: u64,
    /// Records written whole to stdout.
    pub written: u64,
    /// Records discarded on arrival at a full bucket (`drop-newest`).
    pub dropped_newest: u64,
    /// Records evicted from a full bucket (`drop-oldest`).
    pub dropped_oldest: u64,
    /// Records that waited longer than `--max-wait`.
    pub expired: u64,
    /// Of the records dropped by policy (`dropped_newest`,
    /// `dropped_oldest`), those dropped at an arrival because the schedule
    /// already put a departure later than `--max-wait` after its arrival
    /// (not for want of room): also counted there, so not in the sum.
    pub refused: u64,
    /// Records over `--max-record` or `--capacity-bytes`, passed by under
    /// `--oversize skip` (never queued).
    pub skipped: u64,
    /// Records still queued or being written when drip stopped.
    pub undelivered: u64,
    /// Records whose job succeeded (`--exec`).
    pub succeeded: u64,
    /// Records whose job failed for good (`--exec`).
    pub failed: u64,
    /// Records skipped because they succeeded in an earlier run
    /// (`--resume`).
    pub skipped_done: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes of records written to stdout (0 with `--exec`: jobs' output is
    /// not counted).
    pub bytes_written: u64,
}

impl Counts {
    /// Count `n` records that left the bucket as `fate`.
    pub fn add(&mut self, fate: Fate, n: u64) {
        match fate {
            Fate::DroppedNewest => self.dropped_newest += n,
            Fate::DroppedOldest => self.dropped_oldest += n,
            Fate::Expired => self.expired += n,
            Fate::Undelivered => self.undelivered += n,
            Fate::Failed => self.failed += n,
        }
    }

    /// Account for a piece of a skipped record (`--oversize skip`):
    /// `bytes` of it were read, and unless it is a `Piece::Part` the
    /// record is complete.
    pub fn skip_piece(&mut self, bytes: usize, piece: Piece) {
        self.bytes_read += bytes as u64;
        if piece != Piece::Part {
            self.read += 1;
            self.skipped += 1;
        }
    }

    /// Records dropped by either policy.
    pub fn dropped(&self) -> u64 {
        self.dropped_newest + self.dropped_oldest
    }

    /// Records accounted for in some way; equals `read` at the end.
    pub fn settled(&self) -> u64 {
        self.written
            + self.succeeded
            + self.failed
            + self.skipped_done
            + self.dropped()
            + self.expired
            + self.skipped
            + self.undelivered
    }
}

/// When records left: the first and the last write to stdout, so that the
/// rate is measured between departures rather than over the whole run (a
/// run's first record leaves at once, its last one a full interval after
/// the one before; the time drip spends waiting for input, or at a stop, is
/// no part of the rate).
///
/// [`Departures::record`] is called with every write of records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Departures {
    /// When the first write of records ended, ns since start.
    pub first_ns: u64,
    /// When the latest write of records ended, ns since start.
    pub last_ns: u64,
    /// Records the first write carried (1 when records leave one at a time;
    /// more after a `--burst`, or unpaced).
    pub first_records: u64,
    /// Records written in all.
    pub records: u64,
}

impl Departures {
    /// `records` records were written, the write ending at `now_ns`.
    pub fn record(&mut self, now_ns: u64, records: u64) {
        if records == 0 {
            return;
        }
        if self.records == 0 {
            self.first_ns = now_ns;
            self.first_records = records;
        }
        self.last_ns = self.last_ns.max(now_ns);
        self.records += records;
    }

    /// Time from the first departure to the last, ns.
    pub fn span_ns(&self) -> u64 {
        self.last_ns.saturating_sub(self.first_ns)
    }

    /// Records per second between the first departure and the last: the
    /// records that left after the first write over the time since it,
    /// `(written - 1) / span` when records leave one at a time. `None` until
    /// a second write, some time after the first, gives a span.
    pub fn rate(&self) -> Option<f64> {
        let after_first = self.records.saturating_sub(self.first_records);
        let span = self.span_ns();
        (after_first > 0 && span > 0).then(|| after_first as f64 * 1e9 / span as f64)
    }

    /// Job starts per second (`--exec`: a departure is a job's start), as
    /// [`Departures::rate`], but only over enough of them to be a rate: at
    /// least [`MEASURED_STARTS`] starts spanning at least
    /// [`MEASURED_SPAN_NS`]. Fewer, or closer together (jobs started at
    /// once, unpaced), give `None`: their quotient would be the scheduler's
    /// jitter, not a rate.
    pub fn start_rate(&self) -> Option<f64> {
        if self.records < MEASURED_STARTS || self.span_ns() < MEASURED_SPAN_NS {
            return None;
        }
        self.rate()
    }
}

/// The fewest job starts whose rate the summary measures.
pub const MEASURED_STARTS: u64 = 3;

/// The shortest span of job starts whose rate the summary measures, ns
/// (100 ms).
pub const MEASURED_SPAN_NS: u64 = 100_000_000;

/// The widest a line of the summary may be, `drip: ` included.
pub const SUMMARY_WIDTH: usize = 80;

/// What every line of the summary starts with.
const PREFIX: &str = "drip: ";

/// `clauses`, each with the separator that follows it, as lines of at most
/// [`SUMMARY_WIDTH`] columns ([`columns`]; unless one clause alone is
/// wider), each starting `drip: `, broken between clauses.
fn wrap(clauses: Vec<Clause>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::from(PREFIX);
    let mut pending_sep = "";
    for (clause, sep) in clauses {
        let fits = columns(&line) + pending_sep.len() + 1 + columns(&clause) <= SUMMARY_WIDTH;
        if line.len() > PREFIX.len() && !fits {
            lines.push(std::mem::replace(&mut line, String::from(PREFIX)));
        } else if line.len() > PREFIX.len() {
            line.push_str(pending_sep);
            line.push(' ');
        }
        line.push_str(&clause);
        pending_sep = sep;
    }
    lines.push(line);
    lines
}

/// The summary printed at exit (`--stats`) and written as JSON
/// (`--stats-json`): the counts and the frame every run has (the deepest
/// the bucket was, the longest wait, the rate, the pause), and the parts'
/// sections, each at its place ([`Among`]).
#[derive(Debug, Clone)]
pub struct Summary {
    /// Record counts.
    pub counts: Counts,
    /// The most records the bucket held at once.
    pub max_depth: u64,
    /// The longest any written record waited in the bucket, in
    /// milliseconds; with `--exec`, the longest any record waited from
    /// being read to its job's start.
    pub max_wait_ms: f64,
    /// Wall time from start to exit, in milliseconds.
    pub elapsed_ms: f64,
    /// Records written per second between the first and the last departure
    /// ([`Departures::rate`]); `null` when fewer than two writes were made.
    /// With `--exec` a departure is a job's start (a record's first
    /// attempt; retries are not counted), and the rate is measured only
    /// over enough starts ([`Departures::start_rate`]).
    pub rate: Option<f64>,
    /// Time from the first departure to the last, in milliseconds.
    pub span_ms: f64,
    /// Paused by `drip ctl … pause` (only said when `true`).
    pub paused: bool,
    /// The parts' sections (the waiting room, the bounds given as
    /// durations, the runner's figures, with limits per key the keys', the
    /// `--schedule` row in force, where the `--ramp` stands, the
    /// `--budget`s, the cost limits' spend, `--share`'s counters), each
    /// at its place.
    pub sections: Sections,
}

/// The summary's JSON object, in the order of its frame: the counts, the
/// bounds and the times, the sections with the waits and the work, the
/// pause, the sections in force.
#[derive(Serialize)]
struct Frame<'a> {
    #[serde(flatten)]
    counts: &'a Counts,
    max_depth: u64,
    max_wait_ms: f64,
    elapsed_ms: f64,
    rate: Option<f64>,
    span_ms: f64,
    #[serde(flatten)]
    waits: Sections,
    #[serde(flatten)]
    work: Sections,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
    #[serde(flatten)]
    in_force: Sections,
}

impl Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Frame {
            counts: &self.counts,
            max_depth: self.max_depth,
            max_wait_ms: self.max_wait_ms,
            elapsed_ms: self.elapsed_ms,
            rate: self.rate,
            span_ms: self.span_ms,
            waits: self.sections.at(Among::Waits),
            work: self.sections.at(Among::Work),
            paused: self.paused,
            in_force: self.sections.at(Among::InForce),
        }
        .serialize(serializer)
    }
}

impl Summary {
    /// The human summary, without the `drip: ` prefix: the clauses in
    /// order, each with the separator that follows it: the records'
    /// fates, the sections' with the waits (the bounds given as durations,
    /// what waits now), the deepest and the longest wait, the sections'
    /// with the work (the runner's), the rate, the pause and the sections'
    /// in force (the schedule's row, the ramp), the time elapsed. A
    /// section may change how the counts read ([`Wording`]).
    fn clauses(&self) -> Vec<Clause> {
        let wording = self.sections.wording().unwrap_or_else(|| Wording {
            left: vec![(format!("written {}", self.counts.written), ",")],
            wait: "max wait",
            rate: "rate",
        });
        let mut clauses = self.fates(wording.left);
        clauses.extend(self.sections.at(Among::Waits).clauses());
        clauses.extend([
            (format!("max depth {}", self.max_depth), ","),
            (
                format!("{} {}", wording.wait, format_ms(self.max_wait_ms)),
                ";",
            ),
        ]);
        clauses.extend(self.sections.at(Among::Work).clauses());
        if let Some(rate) = self.rate {
            clauses.push((format!("{} {}", wording.rate, format_rate(rate)), ","));
        }
        if self.paused {
            clauses.push(("paused".to_string(), ","));
        }
        clauses.extend(self.sections.at(Among::InForce).clauses());
        clauses.push((format!("elapsed {}", format_ms(self.elapsed_ms)), ""));
        clauses
    }

    /// What became of the records read: `read 10, written 5, dropped 3
    /// (newest 1, oldest 2), expired 1, undelivered 1;`, `left` being the
    /// clauses of the records that left (`written 5`).
    fn fates(&self, left: Vec<Clause>) -> Vec<Clause> {
        let c = &self.counts;
        let mut clauses = vec![(format!("read {}", c.read), ",")];
        clauses.extend(left);
        let dropped = if c.refused > 0 {
            format!(
                "dropped {} (newest {}, oldest {}; refused at arrival {})",
                c.dropped(),
                c.dropped_newest,
                c.dropped_oldest,
                c.refused
            )
        } else if c.dropped() > 0 {
            format!(
                "dropped {} (newest {}, oldest {})",
                c.dropped(),
                c.dropped_newest,
                c.dropped_oldest
            )
        } else {
            "dropped 0".to_string()
        };
        clauses.extend([(dropped, ","), (format!("expired {}", c.expired), ",")]);
        if c.skipped > 0 {
            clauses.push((format!("skipped {}", c.skipped), ","));
        }
        if c.skipped_done > 0 {
            clauses.push((format!("skipped done {}", c.skipped_done), ","));
        }
        clauses.push((format!("undelivered {}", c.undelivered), ";"));
        clauses
    }

    /// The human summary as lines of at most [`SUMMARY_WIDTH`] columns,
    /// each starting `drip: ` and broken between clauses (so one line with
    /// small counts is about two): the counts' (with the sections'
    /// clauses at their places), then each section's own lines (the
    /// keys', the budgets', the costs', `--share`'s), each broken alike.
    pub fn lines(&self) -> Vec<String> {
        let sections = self.sections.lines().flat_map(wrap);
        wrap(self.clauses()).into_iter().chain(sections).collect()
    }

    /// The human summary, its lines joined with newlines (no newline at
    /// the end).
    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// The summary as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("plain data serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::budgets::{BudgetStats, BudgetsSection};
    use crate::report::capacity::{CapacityFor, SizedBound};
    use crate::report::costs::{CostStats, CostsSection};
    use crate::report::keys::KeyStats;
    use crate::report::runner::{JobStats, RunnerFigures};
    use crate::report::schedule::ScheduleRow;
    use crate::report::share::{ShareCounts, ShareStats};
    use crate::report::spell::{json_key, text_key, KeyName, KEY_SHOWN};
    use crate::report::waiting::Queue;
    use crate::report::Section;

    /// The sections of a summary that has `section` alone.
    fn one(section: impl Section + 'static) -> Sections {
        let mut sections = Sections::default();
        sections.push(section);
        sections
    }

    fn summary() -> Summary {
        let mut counts = Counts {
            read: 10,
            bytes_read: 90,
            written: 5,
            ..Counts::default()
        };
        counts.add(Fate::DroppedNewest, 1);
        counts.add(Fate::DroppedOldest, 2);
        counts.add(Fate::Expired, 1);
        counts.add(Fate::Undelivered, 1);
        counts.skip_piece(7, Piece::Part);
        counts.skip_piece(3, Piece::End);
        Summary {
            counts,
            max_depth: 4,
            max_wait_ms: 12.5,
            elapsed_ms: 2500.0,
            rate: Some(2.0),
            span_ms: 2000.0,
            paused: false,
            sections: Sections::default(),
        }
    }

    /// Each section goes among what it belongs with, whatever the order
    /// it was handed over in: the waiting room's bounds and queue with
    /// the waits, the runner's figures (and its wording of the counts)
    /// after the longest wait, the schedule's row after the rate and the
    /// pause; in the JSON, the waits' and the work's fields before
    /// `paused`, the sections in force after it.
    #[test]
    fn each_section_goes_among_what_it_belongs_with() {
        let mut sections = Sections::default();
        sections.push(ScheduleRow {
            row: 1,
            text: Some("* 50/s".into()),
            until: None,
            zone: "UTC".into(),
            until_unix: None,
            until_clock: None,
            pauses: false,
        });
        sections.push(RunnerFigures {
            stats: JobStats {
                jobs_running: 2,
                effective_rate: 10.0,
                configured_rate: 10.0,
                ..JobStats::default()
            },
            slots: 2,
            succeeded: 3,
            failed: 1,
        });
        let sized = |capacity, set_by: &str| CapacityFor {
            duration_ms: 30_000.0,
            capacity,
            unit: "records",
            set_by: set_by.into(),
        };
        sections.push(Queue {
            depth: 20,
            oldest_age_ms: 1200.0,
            forecast_wait_ms: Some(2100.0),
            bounds: vec![
                SizedBound::capacity(sized(300, "--rate 10/s")),
                SizedBound::key_capacity(sized(60, "--key-rate 2/s")),
            ],
        });
        let s = Summary {
            paused: true,
            sections,
            ..summary()
        };
        let text = s.clauses().into_iter().map(|(c, sep)| format!("{c}{sep}"));
        assert_eq!(
            text.collect::<Vec<_>>().join(" "),
            "read 11, succeeded 3, failed 1, dropped 3 (newest 1, oldest 2), expired 1, \
             skipped 1, undelivered 1; cap 300 (30s, by --rate 10/s); key cap 60 (30s, \
             by --key-rate 2/s); waiting 20 (oldest 1.20s, wait 2.10s), max depth 4, \
             max wait to start 12.5ms; jobs: running 2, retries 0, overload responses 0, \
             pauses 0 (0.0ms), start limit 10.00/s, attempt p50 0.0ms p99 0.0ms; \
             measured start rate 2.00/s, paused, schedule row 1 '* 50/s', elapsed 2.50s"
        );
        let v: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let after_span = &keys[keys.iter().position(|k| *k == "span_ms").unwrap() + 1..];
        assert_eq!(
            after_span,
            [
                "depth",
                "oldest_age_ms",
                "forecast_wait_ms",
                "capacity_for",
                "key_capacity_for",
                "jobs_running",
                "retries",
                "overload_responses",
                "pauses",
                "paused_ms",
                "effective_rate",
                "attempt_p50_ms",
                "attempt_p99_ms",
                "outputs_cut",
                "output_bytes_unwritten",
                "paused",
                "schedule",
            ]
        );
        assert_eq!(v["capacity_for"]["set_by"], "--rate 10/s");
        assert_eq!(v["key_capacity_for"]["capacity"], 60);
    }

    #[test]
    fn a_budget_tells_what_is_left_and_when_the_next_window_starts() {
        let budget = |reset_in_ms| BudgetStats {
            budget: "1000/day@America/Los_Angeles".into(),
            limit: 1000,
            left: 970,
            reset: "2026-12-04 00:00:00 PST".into(),
            reset_unix: 1_796_371_200.0,
            reset_in_ms,
        };
        let mut sections = Sections::default();
        sections.push(BudgetsSection(vec![budget(29_733_500.0), budget(300.0)]));
        let s = Summary {
            sections,
            ..summary()
        };
        let lines = s.lines();
        assert_eq!(
            lines[2..],
            [
                "drip: budget 1000/day@America/Los_Angeles: 970 of 1000 left",
                "drip: next window 2026-12-04 00:00:00 PST (in 8h15m33s)",
                "drip: budget 1000/day@America/Los_Angeles: 970 of 1000 left",
                "drip: next window 2026-12-04 00:00:00 PST (in 300.0ms)",
            ]
        );
        assert!(s.json().contains(r#""budgets":[{"budget":"1000/day@America/Los_Angeles","limit":1000,"left":970,"reset":"2026-12-04 00:00:00 PST","reset_unix":1796371200.0,"reset_in_ms":29733500.0}"#));
    }

    #[test]
    fn a_cost_tells_what_it_spent_settled_and_has_in_flight() {
        let settled = CostStats {
            cost: "in".into(),
            spent: 12_345,
            estimated: 20_000,
            settled_back: 8_000,
            settled_extra: 345,
            in_flight: Some(1_000),
        };
        let plain = CostStats {
            cost: String::new(),
            spent: 70,
            estimated: 70,
            settled_back: 0,
            settled_extra: 0,
            in_flight: None,
        };
        let mut sections = Sections::default();
        sections.push(CostsSection(vec![settled, plain]));
        let s = Summary {
            sections,
            ..summary()
        };
        assert_eq!(
            s.lines()[2..],
            [
                "drip: cost in: 12345 spent",
                "drip: (estimated 20000, 8000 settled back, 345 settled extra), 1000 in flight",
                "drip: cost: 70 spent",
            ]
        );
        assert!(s.json().contains(r#""costs":[{"cost":"in","spent":12345,"estimated":20000,"settled_back":8000,"settled_extra":345,"in_flight":1000},{"cost":"","spent":70,"estimated":70,"settled_back":0,"settled_extra":0}]"#));
        assert!(!summary().json().contains("costs"));
    }

    #[test]
    fn counts_add_up() {
        let s = summary();
        assert_eq!(s.counts.settled(), s.counts.read);
        assert_eq!(s.counts.dropped(), 3);
    }

    #[test]
    fn lines_name_every_count_and_fit_80_columns() {
        assert_eq!(
            summary().lines(),
            [
                "drip: read 11, written 5, dropped 3 (newest 1, oldest 2), expired 1, skipped 1",
                "drip: undelivered 1; max depth 4, max wait 12.5ms; rate 2.00/s, elapsed 2.50s",
            ]
        );
        // Large counts wrap onto more lines, none wider than 80.
        let mut big = summary();
        big.counts.read = 12_345_678_901;
        big.counts.written = 12_345_678_000;
        big.counts.dropped_oldest = 901;
        big.max_depth = 1_000_000;
        let lines = big.lines();
        assert!(lines.len() >= 2, "{lines:?}");
        for line in &lines {
            assert!(line.len() <= SUMMARY_WIDTH, "{line:?}");
            assert!(line.starts_with("drip: "), "{line:?}");
        }
        assert!(lines[0].starts_with("drip: read 12345678901, written 12345678000"));
        // Nothing dropped, typical counts: two lines.
        let mut none = summary();
        none.counts = Counts {
            read: 1000,
            written: 16,
            undelivered: 984,
            ..Counts::default()
        };
        none.max_depth = 1000;
        none.max_wait_ms = 3000.0;
        assert_eq!(
            none.lines(),
            [
                "drip: read 1000, written 16, dropped 0, expired 0, undelivered 984",
                "drip: max depth 1000, max wait 3.00s; rate 2.00/s, elapsed 2.50s",
            ]
        );
    }

    #[test]
    fn the_readme_example() {
        let s = Summary {
            counts: Counts {
                read: 100,
                written: 90,
                dropped_newest: 10,
                ..Counts::default()
            },
            max_depth: 10,
            max_wait_ms: 9010.0,
            elapsed_ms: 9010.0,
            rate: Some(10.0),
            span_ms: 8900.0,
            paused: false,
            sections: Sections::default(),
        };
        assert_eq!(
            s.text(),
            "drip: read 100, written 90, dropped 10 (newest 10, oldest 0), expired 0\n\
             drip: undelivered 0; max depth 10, max wait 9.01s; rate 10.00/s, elapsed 9.01s"
        );
    }

    #[test]
    fn no_rate_before_a_second_departure() {
        let mut s = summary();
        s.rate = None;
        assert!(!s.text().contains("rate"), "{}", s.text());
        let v: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert!(v["rate"].is_null());
    }

    #[test]
    fn rate_is_measured_between_departures() {
        let mut d = Departures::default();
        assert_eq!(d.rate(), None);
        // One record at 1 ms: no span yet (`-r 1/5s | head -1`).
        d.record(1_000_000, 1);
        assert_eq!(d.rate(), None);
        assert_eq!(d.span_ns(), 0);
        // 30 more, one every 100 ms: 10/s exactly, however long the run.
        for k in 1..=30 {
            d.record(1_000_000 + k * 100_000_000, 1);
        }
        assert_eq!(d.records, 31);
        assert!((d.rate().unwrap() - 10.0).abs() < 1e-9, "{:?}", d.rate());
        // A burst of 50 first, then 10/s: the burst does not inflate it.
        let mut b = Departures::default();
        b.record(0, 50);
        for k in 1..=20 {
            b.record(k * 100_000_000, 1);
        }
        assert!((b.rate().unwrap() - 10.0).abs() < 1e-9);
        // A write of no records is no departure.
        b.record(99_000_000_000, 0);
        assert_eq!(b.last_ns, 2_000_000_000);
    }

    #[test]
    fn json_has_the_documented_keys() {
        let v: serde_json::Value = serde_json::from_str(&summary().json()).unwrap();
        for key in [
            "read",
            "written",
            "dropped_newest",
            "dropped_oldest",
            "expired",
            "skipped",
            "undelivered",
            "max_depth",
            "max_wait_ms",
            "elapsed_ms",
            "rate",
            "span_ms",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["dropped_oldest"], 2);
        assert_eq!(v["skipped"], 1);
        assert_eq!(v["bytes_read"], 100);
        assert!(v.get("share").is_none(), "no --share, no share object");
    }

    /// A long NAME is cut as a key is, so the share lines keep to 80
    /// columns.
    #[test]
    fn a_long_share_name_is_cut_to_fit_80_columns() {
        let s = ShareStats {
            name: "n".repeat(200),
            global: Some(ShareCounts {
                reservations: u64::MAX,
                ..ShareCounts::default()
            }),
            per_key: Some(ShareCounts::default()),
        };
        let lines = Summary {
            sections: one(s),
            ..summary()
        }
        .lines()[2..]
            .to_vec();
        let cut = format!("{}…", "n".repeat(KEY_SHOWN - 1));
        assert_eq!(lines[0], format!("drip: shared {cut}:"));
        assert!(
            lines[1].starts_with(&format!("drip: {} reservations", u64::MAX)),
            "{lines:?}"
        );
        assert!(lines.contains(&format!("drip: shared {cut} per key: 0 reservations")));
        for line in &lines {
            assert!(columns(line) <= SUMMARY_WIDTH, "{line}");
        }
    }

    #[test]
    fn the_share_counters_are_a_line_and_a_json_object() {
        let s = Summary {
            sections: one(ShareStats {
                name: "quota".into(),
                global: Some(ShareCounts {
                    reservations: 7,
                    slots_forfeited: 1,
                    state_lost: 2,
                    failed_calls: 3,
                }),
                per_key: Some(ShareCounts {
                    reservations: 4,
                    ..ShareCounts::default()
                }),
            }),
            ..summary()
        };
        assert_eq!(
            s.lines()[2..],
            [
                "drip: shared quota: 7 reservations",
                "drip: 1 slots forfeited late (reserved, unused, too late to give back)",
                "drip: state lost 2 times, 3 failed calls",
                "drip: shared quota per key: 4 reservations",
                "drip: 0 slots forfeited late (reserved, unused, too late to give back)",
                "drip: state lost 0 times, 0 failed calls",
            ]
        );
        let v: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(
            v["share"],
            serde_json::json!({
                "name": "quota",
                "reservations": 7,
                "slots_forfeited": 1,
                "state_lost": 2,
                "failed_calls": 3,
                "per_key": {
                    "reservations": 4,
                    "slots_forfeited": 0,
                    "state_lost": 0,
                    "failed_calls": 0,
                },
            })
        );
    }

    fn key(k: &str, n: u64) -> (KeyName, u64) {
        (KeyName(Some(k.as_bytes().to_vec())), n)
    }

    #[test]
    fn the_keys_lines_break_between_clauses_at_80_columns() {
        let s = Summary {
            sections: one(KeyStats {
                keys_seen: 1,
                keys: 1,
                top_written: vec![key("1", 5)],
                ..KeyStats::default()
            }),
            ..summary()
        };
        assert_eq!(
            s.lines()[2..],
            [
                "drip: keys seen 1 (remembered 1, busy 0); top written: 1 5; top dropped: none",
                "drip: top waiting: none",
            ]
        );
        // Ten long keys in each list: many lines, none wider than 80.
        let long: Vec<_> = (0..10)
            .map(|i| key(&format!("{i}-{}", "x".repeat(100)), 1_000_000 + i))
            .collect();
        let s = Summary {
            sections: one(KeyStats {
                keys_seen: 12,
                keys: 10,
                busy_keys: 10,
                dropped_unremembered: 7,
                keyless: 0,
                top_written: long.clone(),
                top_dropped: long.clone(),
                top_waiting: long,
                key_limits: None,
                longest: None,
            }),
            ..summary()
        };
        let lines = s.lines();
        assert!(lines.len() > 10, "{lines:?}");
        for line in &lines {
            assert!(line.chars().count() <= SUMMARY_WIDTH, "{line:?}");
            assert!(line.starts_with("drip: "), "{line:?}");
        }
        assert_eq!(lines[2], "drip: keys seen 12 (remembered 10, busy 10)");
        assert_eq!(
            lines[3],
            "drip: 7 records dropped: every remembered key busy"
        );
        assert!(
            lines[4].starts_with("drip: top written: 0-xxxxxxxxx")
                && lines[4].ends_with("… 1000000"),
            "{lines:?}"
        );
    }

    #[test]
    fn records_with_no_key_are_counted_when_any() {
        let clauses = |keyless| {
            let k = KeyStats {
                keyless,
                ..KeyStats::default()
            };
            k.clauses().into_iter().map(|(c, _)| c).collect::<Vec<_>>()
        };
        assert!(!clauses(0).iter().any(|c| c.contains("no key")));
        assert!(clauses(1).contains(&"1 record with no key".to_string()));
        assert!(clauses(5).contains(&"5 records with no key".to_string()));
    }

    #[test]
    fn wide_keys_break_between_entries_at_80_columns() {
        // 20 CJK characters take 40 columns, the widest key shown; 日本語キー
        // takes 10.
        let wide = "東".repeat(20);
        let s = Summary {
            sections: one(KeyStats {
                keys_seen: 4,
                keys: 4,
                top_written: vec![
                    key(&wide, 10),
                    key("api.example.com", 10),
                    key("日本語キー", 10),
                    key("cdn.example.com", 10),
                ],
                ..KeyStats::default()
            }),
            ..summary()
        };
        let lines = s.lines();
        assert_eq!(
            lines[2..],
            [
                "drip: keys seen 4 (remembered 4, busy 0)".to_string(),
                format!("drip: top written: {wide} 10"),
                "drip: api.example.com 10, 日本語キー 10, cdn.example.com 10; top dropped: none"
                    .to_string(),
                "drip: top waiting: none".to_string(),
            ]
        );
        for line in &lines {
            assert!(columns(line) <= SUMMARY_WIDTH, "{line:?}");
        }
        // A key is cut to 40 columns, not 40 characters.
        let cut = text_key(Some("東".repeat(30).as_bytes()));
        assert_eq!(cut, format!("{}…", "東".repeat(19)));
        assert_eq!(columns(&cut), 39);
    }

    #[test]
    fn keys_are_shown_safely() {
        let shown = |k: &[u8]| text_key(Some(k));
        assert_eq!(shown(b"example.com"), "example.com");
        assert_eq!(shown(b"\x1b[2Jevil"), "\\x1b[2Jevil");
        assert_eq!(shown(b"a\nb\tc\rd\\e\x7f"), "a\\nb\\tc\\rd\\\\e\\x7f");
        assert_eq!(shown(b"caf\xc3\xa9 \xff"), "\"caf\u{e9} \\xff\"");
        assert_eq!(shown("\u{9b}2J\u{202e}".as_bytes()), "\\u{009b}2J\\u{202e}");
        assert_eq!(shown(b""), "\"\"");
        assert_eq!(shown(b"a,b"), "\"a,b\"");
        assert_eq!(shown(b"a;b"), "\"a;b\"");
        assert_eq!(shown(b"say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(shown(b"(no key)"), "\"(no key)\"");
        assert_eq!(text_key(None), "(no key)");
        // Long keys are cut to 40 characters, `…` included.
        let forty = "k".repeat(40);
        assert_eq!(shown(forty.as_bytes()), forty);
        let cut = shown("k".repeat(200_000).as_bytes());
        assert_eq!(cut, format!("{}…", "k".repeat(39)));
        // An escape is never cut in two.
        let cut = shown(format!("{}\x1b", "k".repeat(38)).as_bytes());
        assert_eq!(cut, format!("{}…", "k".repeat(38)));
        assert_eq!(cut.chars().count(), 39);
    }

    #[test]
    fn keys_in_json_stay_distinct() {
        assert_eq!(json_key(b"plain"), "plain");
        assert_eq!(json_key(b"a\\b"), "a\\\\b");
        assert_eq!(json_key(b"\xff\xfe"), "\\xff\\xfe");
        // The key spelled `\xff` and the byte 0xff differ.
        assert_ne!(json_key(b"\\xff"), json_key(b"\xff"));
        assert_eq!(json_key("\u{e9}\n".as_bytes()), "\u{e9}\n");
        let s = Summary {
            sections: one(KeyStats {
                top_written: vec![(KeyName(None), 3), key("(no key)", 2), key("\u{fffd}", 1)],
                top_dropped: vec![(KeyName(Some(b"\xff".to_vec())), 1)],
                ..KeyStats::default()
            }),
            ..summary()
        };
        let v: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(
            v["keys"]["top_written"],
            serde_json::json!([[null, 3], ["(no key)", 2], ["\u{fffd}", 1]])
        );
        assert_eq!(v["keys"]["top_dropped"], serde_json::json!([["\\xff", 1]]));
        assert_eq!(v["keys"]["dropped_unremembered"], 0);
    }

    #[test]
    fn the_readme_keys_example() {
        let s = Summary {
            sections: one(KeyStats {
                keys_seen: 3,
                keys: 3,
                busy_keys: 2,
                top_written: vec![
                    key("api.example.com", 40),
                    key("cdn.example.com", 12),
                    (KeyName(None), 1),
                ],
                top_waiting: vec![key("api.example.com", 960), key("cdn.example.com", 30)],
                ..KeyStats::default()
            }),
            ..summary()
        };
        assert_eq!(
            s.lines()[2..].join("\n"),
            "drip: keys seen 3 (remembered 3, busy 2); top written: api.example.com 40\n\
             drip: cdn.example.com 12, (no key) 1; top dropped: none\n\
             drip: top waiting: api.example.com 960, cdn.example.com 30"
        );
    }

    #[test]
    fn job_clauses_name_the_limit_apart_from_the_measured_rate() {
        let ran = Counts {
            read: 20,
            succeeded: 20,
            ..Counts::default()
        };
        let summary = |stats: JobStats, rate: Option<f64>| Summary {
            counts: ran,
            max_depth: 0,
            max_wait_ms: 864.9,
            elapsed_ms: 2100.0,
            rate,
            span_ms: 2000.0,
            paused: false,
            sections: one(RunnerFigures {
                stats,
                slots: 1,
                succeeded: ran.succeeded,
                failed: ran.failed,
            }),
        };
        let lowered = JobStats {
            effective_rate: 4.8,
            configured_rate: 10.0,
            ..JobStats::default()
        };
        let joined = |s: Summary| {
            let clauses = s.clauses().into_iter();
            clauses
                .map(|(c, sep)| format!("{c}{sep}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let text = joined(summary(lowered, Some(9.59)));
        assert!(
            text.contains("max depth 0, max wait to start 864.9ms;"),
            "{text}"
        );
        assert!(
            text.contains("start limit 4.80/s (lowered from 10.00/s),"),
            "{text}"
        );
        assert!(
            text.contains("; measured start rate 9.59/s, elapsed"),
            "{text}"
        );
        assert!(!text.contains("; rate "), "{text}");
        // Too few starts to measure: no rate at all.
        let text = summary(JobStats::default(), None).text();
        assert!(!text.contains("measured"), "{text}");
        let cut = JobStats {
            outputs_cut: 4,
            output_bytes_unwritten: 11_934_468,
            ..JobStats::default()
        };
        let text = joined(summary(cut, None));
        assert!(
            text.contains("outputs cut 4 (11934468 bytes not written);"),
            "{text}"
        );
    }

    #[test]
    fn a_start_rate_needs_three_starts_over_100ms() {
        let mut d = Departures::default();
        // Three jobs started together, unpaced: no rate.
        for t in [1_000_000, 1_020_000, 1_055_000] {
            d.record(t, 1);
        }
        assert!(d.rate().is_some_and(|r| r > 30_000.0));
        assert_eq!(d.start_rate(), None);
        // Two starts 1 s apart: one interval is no rate either.
        let mut d = Departures::default();
        d.record(0, 1);
        d.record(1_000_000_000, 1);
        assert_eq!(d.start_rate(), None);
        // Three over 200 ms: 10/s.
        d = Departures::default();
        for t in [0, 100_000_000, 200_000_000] {
            d.record(t, 1);
        }
        assert_eq!(d.start_rate(), Some(10.0));
    }
}
