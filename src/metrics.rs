//! `--metrics FILE`: drip's figures in the Prometheus text exposition
//! format (version 0.0.4), for the node_exporter textfile collector's
//! convention for batch jobs: the whole file is written anew and renamed
//! over the old one, so a scrape never reads half of it.
//!
//! Counters end in `_total`; records by fate are one family with a `fate`
//! label, jobs by outcome one with `outcome`. Per key, only the top keys
//! of the summary are exported (at most 10 a list), so the number of
//! series stays bounded whatever the input.
//!
//! Every sample carries the label `drip`, the drip's `--name` or, unnamed,
//! its pid (a name is never all digits), so that the files of several
//! drips in one textfile directory, a finished drip's left there included,
//! never hold the same series: node_exporter would serve one file's and
//! drop the other's.

use std::io::Write as _;
use std::path::Path;

use crate::report::exposition::{Exposition, MetricFamily};
use crate::report::Among;
use crate::stats::Summary;

/// What the file says besides the summary.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// The drip's process id, and its `--name`, as labels of `drip_info`.
    pub pid: u32,
    /// `--name`, if given.
    pub name: Option<String>,
    /// Records waiting now.
    pub depth: u64,
    /// Age of the oldest waiting record, ns.
    pub oldest_age_ns: u64,
    /// The tightest record limit in force, records per second (infinite:
    /// none).
    pub rate_limit: f64,
    /// When drip started, seconds since the epoch.
    pub started: f64,
}

/// The file's text for `summary` and `gauges`.
pub fn render(summary: &Summary, gauges: &Gauges) -> String {
    let pid = gauges.pid.to_string();
    let name = gauges.name.clone().unwrap_or_default();
    let drip = gauges.name.clone().unwrap_or_else(|| pid.clone());
    let mut out = Exposition {
        out: String::new(),
        drip,
    };
    MetricFamily::new(
        &mut out,
        "drip_info",
        "gauge",
        "The drip these figures are of.",
    )
    .sample(&[("pid", &pid), ("name", &name)], 1.0);
    records(&mut out, summary);
    times(&mut out, summary, gauges);
    queue(&mut out, summary, gauges);
    let sections = &summary.sections;
    sections.at(Among::Waits).metrics(&mut out);
    pace(&mut out, summary, gauges);
    sections.at(Among::Work).metrics(&mut out);
    sections.at(Among::InForce).metrics(&mut out);
    out.out
}

/// When drip started, and the time since.
fn times(out: &mut Exposition, summary: &Summary, g: &Gauges) {
    out.gauge(
        "drip_start_time_seconds",
        "When drip started, seconds since the epoch.",
        g.started,
    );
    out.gauge(
        "drip_elapsed_seconds",
        "Time since drip started, seconds.",
        summary.elapsed_ms / 1e3,
    );
}

/// The records waiting: now, at most, and the oldest one's age (the
/// waiting room's section adds the wait foreseen for one arriving now).
fn queue(out: &mut Exposition, summary: &Summary, g: &Gauges) {
    out.gauge("drip_queue_depth", "Records waiting now.", g.depth as f64);
    out.gauge(
        "drip_queue_max_depth",
        "The most records that waited at once.",
        summary.max_depth as f64,
    );
    out.gauge(
        "drip_oldest_age_seconds",
        "Age of the oldest waiting record, seconds (0: none waits).",
        g.oldest_age_ns as f64 / 1e9,
    );
}

/// The limit in force, the rate kept, and whether paused.
fn pace(out: &mut Exposition, summary: &Summary, g: &Gauges) {
    if g.rate_limit.is_finite() {
        out.gauge(
            "drip_rate_limit_records_per_second",
            "The tightest record limit in force, records per second.",
            g.rate_limit,
        );
    }
    out.gauge(
        "drip_rate_records_per_second",
        "Records written (jobs started) per second between the first departure and the last.",
        summary.rate.unwrap_or(0.0),
    );
    out.gauge(
        "drip_paused",
        "1 while paused by drip ctl, else 0.",
        f64::from(u8::from(summary.paused)),
    );
}

/// Records and bytes, by fate.
fn records(out: &mut Exposition, s: &Summary) {
    let c = &s.counts;
    out.counter(
        "drip_records_read_total",
        "Records read from the inputs.",
        c.read as f64,
    );
    let mut f = MetricFamily::new(
        out,
        "drip_records_total",
        "counter",
        "Records by what became of them.",
    );
    for (fate, n) in [
        ("written", c.written),
        ("succeeded", c.succeeded),
        ("failed", c.failed),
        ("dropped_newest", c.dropped_newest),
        ("dropped_oldest", c.dropped_oldest),
        ("expired", c.expired),
        ("skipped", c.skipped),
        ("undelivered", c.undelivered),
    ] {
        f.sample(&[("fate", fate)], n as f64);
    }
    out.counter(
        "drip_records_refused_total",
        "Of the records dropped, those refused at arrival: they could not leave within --max-wait.",
        c.refused as f64,
    );
    out.counter(
        "drip_bytes_read_total",
        "Bytes read from the inputs.",
        c.bytes_read as f64,
    );
    out.counter(
        "drip_bytes_written_total",
        "Bytes of records written to stdout.",
        c.bytes_written as f64,
    );
}

/// Write `text` to `path` whole: into a temporary file beside it, then
/// renamed over it.
///
/// # Errors
/// `path` is there and is not a regular file (a device, a FIFO, a
/// directory: the rename would put a file in its place, `/dev/null`
/// included); the temporary file cannot be made or written (said so,
/// naming its directory: the path itself may be fine), or the rename
/// fails.
pub fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            return Err(std::io::Error::other(
                "not a regular file (drip replaces the metrics file whole at every write)",
            ));
        }
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let beside = |e: std::io::Error| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot write a temporary file beside it (.drip-metrics-* in {}): {e}",
                dir.display()
            ),
        )
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".drip-metrics-")
        .tempfile_in(dir)
        .map_err(beside)?;
    tmp.write_all(text.as_bytes()).map_err(beside)?;
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(beside)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::keys::KeyStats;
    use crate::report::runner::{JobStats, RunnerFigures};
    use crate::report::share::{ShareCounts, ShareStats};
    use crate::report::spell::KeyName;
    use crate::stats::Counts;
    use openmetrics_parser::prometheus::parse_prometheus;
    use openmetrics_parser::PrometheusValue;

    fn summary() -> Summary {
        Summary {
            counts: Counts {
                read: 10,
                succeeded: 7,
                failed: 1,
                expired: 2,
                ..Counts::default()
            },
            max_depth: 4,
            max_wait_ms: 1.5,
            elapsed_ms: 2500.0,
            rate: Some(3.25),
            span_ms: 2000.0,
            paused: true,
            sections: {
                let mut sections = crate::report::Sections::default();
                sections.push(crate::report::waiting::Queue {
                    forecast_wait_ms: Some(250.0),
                    ..crate::report::waiting::Queue::default()
                });
                sections.push(RunnerFigures {
                    stats: JobStats {
                        retries: 3,
                        pauses: 1,
                        paused_ms: 1500.0,
                        outputs_cut: 2,
                        output_bytes_unwritten: 70,
                        ..JobStats::default()
                    },
                    slots: 1,
                    succeeded: 7,
                    failed: 1,
                });
                sections.push(KeyStats {
                    keys_seen: 2,
                    top_written: vec![
                        (KeyName(Some(b"a\"b\\c\nd".to_vec())), 5),
                        (KeyName(None), 2),
                        (KeyName(Some(Vec::new())), 1),
                    ],
                    key_limits: Some(vec![
                        crate::report::keys::KeyLimitView {
                            key: KeyName(Some(b"api.github.com".to_vec())),
                            row: Some("*.github.com".into()),
                            rate: Some((crate::rate::parse_rate("2/min").unwrap(), 2)),
                            waiting: 3,
                            jobs: Some(Some(2)),
                            running: Some(1),
                        },
                        crate::report::keys::KeyLimitView {
                            key: KeyName(Some(b"b".to_vec())),
                            row: None,
                            rate: Some((crate::rate::parse_rate("5/s").unwrap(), 1)),
                            waiting: 0,
                            jobs: Some(None),
                            running: Some(0),
                        },
                        crate::report::keys::KeyLimitView {
                            key: KeyName(None),
                            row: None,
                            rate: None,
                            waiting: 0,
                            jobs: None,
                            running: None,
                        },
                    ]),
                    ..KeyStats::default()
                });
                sections.push(crate::report::schedule::ScheduleRow {
                    row: 2,
                    text: Some("* 50/s".into()),
                    until: Some("2026-12-04T09:00:00+01:00".into()),
                    zone: "Europe/Berlin".into(),
                    until_unix: Some(1_796_371_200.0),
                    until_clock: Some("Fri 09:00".into()),
                    pauses: false,
                });
                sections.push(crate::report::ramp::RampState {
                    from: 0.1,
                    over_ms: 3000.0,
                    fraction: 0.55,
                    left_ms: 1500.0,
                });
                sections.push(ShareStats {
                    name: "quota".into(),
                    global: Some(ShareCounts {
                        reservations: 9,
                        failed_calls: 2,
                        ..ShareCounts::default()
                    }),
                    per_key: None,
                });
                sections
            },
        }
    }

    #[test]
    fn every_family_parses_with_its_values() {
        let gauges = Gauges {
            pid: 7,
            name: Some("n".into()),
            depth: 3,
            oldest_age_ns: 1_500_000_000,
            rate_limit: f64::INFINITY,
            started: 1.7e9,
        };
        let text = render(&summary(), &gauges);
        let m = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e:?}:\n{text}"));
        // Every sample is labelled with the drip's name (or pid); the
        // parser keeps label names sorted, and `drip` comes first.
        let get = |family: &str, labels: &[&str]| -> f64 {
            let labels: Vec<String> = std::iter::once("n")
                .chain(labels.iter().copied())
                .map(|s| s.to_string())
                .collect();
            let sample = m.families[family]
                .get_sample_by_label_values(&labels)
                .unwrap_or_else(|| panic!("{family}{labels:?}:\n{text}"));
            match &sample.value {
                PrometheusValue::Gauge(n) => n.as_f64(),
                PrometheusValue::Counter(c) => c.value.as_f64(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(get("drip_records_total", &["expired"]), 2.0);
        assert_eq!(get("drip_jobs_total", &["succeeded"]), 7.0);
        assert_eq!(get("drip_overload_paused_seconds_total", &[]), 1.5);
        assert_eq!(get("drip_job_outputs_cut_total", &[]), 2.0);
        assert_eq!(get("drip_job_output_bytes_unwritten_total", &[]), 70.0);
        assert_eq!(get("drip_oldest_age_seconds", &[]), 1.5);
        assert_eq!(get("drip_forecast_wait_seconds", &[]), 0.25);
        assert_eq!(get("drip_records_refused_total", &[]), 0.0);
        assert_eq!(get("drip_paused", &[]), 1.0);
        assert_eq!(get("drip_schedule_row", &[]), 2.0);
        assert_eq!(
            get("drip_schedule_next_change_timestamp_seconds", &[]),
            1_796_371_200.0
        );
        assert_eq!(get("drip_ramp_fraction", &[]), 0.55);
        // The key as --stats-json spells it (a backslash doubled).
        assert_eq!(get("drip_top_key_written", &["true", "a\"b\\\\c\nd"]), 5.0);
        // The no-key lane apart from the empty key.
        assert_eq!(get("drip_top_key_written", &["false", ""]), 2.0);
        assert_eq!(get("drip_top_key_written", &["true", ""]), 1.0);
        // Each named key's limit with its row; a key without one left out.
        let limit = "drip_top_key_limit_records_per_second";
        let row = ["true", "api.github.com", "*.github.com"];
        assert_eq!(get(limit, &row), 2.0 / 60.0);
        assert_eq!(get(limit, &["true", "b", ""]), 5.0);
        assert_eq!(
            text.matches("drip_top_key_limit_records_per_second{")
                .count(),
            2,
            "{text}"
        );
        // With --exec: each named key's job limit (a key with none left
        // out) and its jobs running.
        assert_eq!(get("drip_top_key_job_limit", &row), 2.0);
        assert_eq!(text.matches("drip_top_key_job_limit{").count(), 1, "{text}");
        assert_eq!(get("drip_top_key_jobs_running", &row), 1.0);
        assert_eq!(get("drip_top_key_jobs_running", &["true", "b", ""]), 0.0);
        assert_eq!(
            get("drip_share_failed_calls_total", &["global", "quota"]),
            2.0
        );
        // No limit of records: no such gauge, rather than +Inf.
        assert!(!m
            .families
            .contains_key("drip_rate_limit_records_per_second"));
    }

    /// The families come in the frame's order, each section's among what
    /// it belongs with: the queue's gauges and the forecast wait, the
    /// pace's, the runner's, then the sections in force.
    #[test]
    fn the_families_follow_the_frame() {
        let text = render(&summary(), &Gauges::default());
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let at = |family: &str| {
            families
                .iter()
                .position(|f| *f == family)
                .unwrap_or_else(|| panic!("no {family}: {families:?}"))
        };
        let order = [
            "drip_elapsed_seconds",
            "drip_queue_depth",
            "drip_queue_max_depth",
            "drip_oldest_age_seconds",
            "drip_forecast_wait_seconds",
            "drip_rate_records_per_second",
            "drip_paused",
            "drip_jobs_total",
            "drip_job_start_rate",
            "drip_keys",
            "drip_schedule_row",
            "drip_ramp_fraction",
        ];
        for pair in order.windows(2) {
            assert!(at(pair[0]) < at(pair[1]), "{pair:?}: {families:?}");
        }
        assert_eq!(
            at("drip_forecast_wait_seconds"),
            at("drip_oldest_age_seconds") + 1
        );
        assert_eq!(at("drip_jobs_total"), at("drip_paused") + 1);
    }

    #[test]
    fn every_sample_is_labelled_with_the_drips_name_or_else_its_pid() {
        for (name, drip) in [(Some("nightly".to_string()), "nightly"), (None, "7")] {
            let gauges = Gauges {
                pid: 7,
                name,
                ..Gauges::default()
            };
            let text = render(&summary(), &gauges);
            let samples = text.lines().filter(|l| !l.starts_with('#'));
            for line in samples {
                assert!(line.contains(&format!("{{drip=\"{drip}\"")), "{line}");
            }
        }
    }
}
