//! `--exec`'s summary names its figures: the limit on starts apart from the
//! measured start rate, the wait to a job's start, and no rate measured
//! over too few starts. Real processes.

use crate::common;

use std::path::Path;

use common::{drip, numbered};
use serde_json::Value;

fn summary(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// The `--stats` lines as one line, without their `drip: ` prefixes (a
/// line broken after a clause loses the clause's separator).
fn one_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(|l| l.trim_start_matches("drip: "))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_exec_summary_names_the_limit_the_measured_rate_and_the_wait_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s.json");
    // Three jobs started together: too few, too close, for a rate.
    let out = drip(&[
        "-r",
        "inf",
        "-j",
        "3",
        "--stats",
        "--stats-json",
        s.to_str().unwrap(),
        "--exec",
        "true",
    ])
    .write_stdin(numbered(1..=3))
    .output()
    .unwrap();
    assert!(out.status.success());
    let text = one_line(&out.stderr);
    assert!(text.contains("max wait to start "), "{text}");
    assert!(text.contains("starts unpaced"), "{text}");
    assert!(!text.contains("rate"), "{text}");
    assert!(summary(&s)["rate"].is_null(), "{}", summary(&s));

    // Paced: the limit and the measured rate, each named.
    common::until_judged(3, std::time::Duration::from_secs(60), || {
        paced_summary_run(&s)
    });
}

/// One paced run of [`the_exec_summary_names_the_limit_the_measured_rate_and_the_wait_to_start`]
/// (`-r 20/s`, six jobs): `None` when judged. The measured start rate is
/// wall clock over five intervals, never above the limit (with its
/// rounding); a run above it where drip's threads waited 10 ms or more
/// for a CPU (the first start recorded that late shortens the span so)
/// is not judged, and is made again.
fn paced_summary_run(s: &Path) -> Option<String> {
    let origin = std::time::Instant::now();
    let mut child = common::command(&[
        "-r",
        "20/s",
        "--stats",
        "--stats-json",
        s.to_str().unwrap(),
        "--exec",
        "true",
    ])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let waits = common::watch_cpu_waits(child.id(), origin);
    common::feed(&mut child, numbered(1..=6).as_bytes());
    let (status, _, stderr) = common::output_of(child);
    let waits = waits.join().unwrap();
    assert_eq!(status, 0, "{stderr}");
    let text = one_line(stderr.as_bytes());
    assert!(text.contains("start limit 20.00/s"), "{text}");
    let measured = text
        .split("measured start rate ")
        .nth(1)
        .and_then(|t| t.split("/s").next())
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no measured start rate: {text}"));
    // No bare rate beside the two named ones.
    let bare = text.replace("measured start rate", "");
    assert!(!bare.contains(" rate "), "{text}");
    assert!(summary(s)["rate"].as_f64().is_some(), "{}", summary(s));
    assert!(measured > 0.0, "{text}");
    if measured <= 21.0 {
        return None;
    }
    let waited = common::threads_cpu_wait_between(&waits, 0.0, origin.elapsed().as_secs_f64());
    assert!(
        waited >= 0.01,
        "measured {measured}/s above the limit, drip's threads waiting {waited:.3} s for a CPU: {text}"
    );
    Some(format!(
        "measured {measured}/s, drip's threads waiting {waited:.3} s for a CPU"
    ))
}

/// With `--exec` records go to jobs, not to stdout: the summary's counts
/// say what the jobs did, succeeded and failed, where `written 0` was (and
/// the jobs' clauses no longer repeat them); `--stats-json` keeps its
/// fields, `written` among them.
#[test]
fn the_exec_summary_counts_what_the_jobs_did_in_place_of_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s.json");
    let out = drip(&[
        "-r",
        "inf",
        "--stats",
        "--stats-json",
        s.to_str().unwrap(),
        "--exec",
        "sh",
        "-c",
        "test \"$1\" -le 3",
        "sh",
    ])
    .write_stdin(numbered(1..=4))
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(123));
    let text = one_line(&out.stderr);
    assert!(
        text.starts_with("read 4, succeeded 3, failed 1, dropped 0, expired 0, undelivered 0"),
        "{text}"
    );
    assert!(!text.contains("written"), "{text}");
    assert!(text.contains("jobs: running 0, retries 0"), "{text}");
    assert_eq!(text.matches("succeeded").count(), 1, "{text}");
    let json = summary(&s);
    assert_eq!(json["written"], 0, "{json}");
    assert_eq!(json["succeeded"], 3, "{json}");
    assert_eq!(json["failed"], 1, "{json}");
}
