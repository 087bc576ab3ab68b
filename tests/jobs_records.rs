//! `--exec`, record by record: what the joblog says of each record, and
//! records that cannot be a job's argument. Real processes.

use crate::common;

use common::{json_lines as joblog, run_bytes as run};
use serde_json::Value;

#[test]
fn the_joblog_carries_the_record_as_a_string_and_whole_microseconds() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let input = b"plain\nsay \"hi\"\\\tx\nbad \xff byte\n";
    let (status, _, err) = run(
        &[
            "-q",
            "-r",
            "inf",
            "--joblog",
            log.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            "sleep 0.01",
        ],
        input,
    );
    assert_eq!(status, 0, "{err}");
    let mut entries = joblog(&log);
    entries.sort_by_key(|e| e["number"].as_u64().unwrap());
    let records: Vec<&str> = entries
        .iter()
        .map(|e| e["record"].as_str().unwrap())
        .collect();
    assert_eq!(records, ["plain", "say \"hi\"\\\\\tx", "bad \\xff byte"]);
    let text = std::fs::read_to_string(&log).unwrap();
    let first = text.lines().next().unwrap();
    let fields = serde_json::from_str::<serde_json::Map<String, Value>>(first).unwrap();
    // Every field, in the documented order (serde_json's map sorts keys,
    // so look at the line itself for the order).
    let order = [
        "id",
        "number",
        "record",
        "attempt",
        "start_us",
        "duration_us",
        "exit",
        "signal",
        "timed_out",
        "http_status",
        "outcome",
    ];
    assert_eq!(fields.len(), order.len(), "{first}");
    let at: Vec<usize> = order
        .iter()
        .map(|k| first.find(&format!("\"{k}\":")).expect(k))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{first}");
    for e in &entries {
        let id = e["id"].as_str().unwrap();
        assert!(id.starts_with(&format!("{}-", e["number"])), "{e}");
        let us = e["duration_us"].as_u64().expect("whole microseconds");
        assert!((10_000..10_000_000).contains(&us), "{e}");
        assert!(
            e["start_us"].as_u64().unwrap() > 1_600_000_000_000_000,
            "{e}"
        );
        assert_eq!(e["outcome"], "succeeded");
    }
}

#[test]
fn a_record_that_cannot_be_an_argument_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let dead = dir.path().join("dead");
    let long = "a".repeat(200 * 1024);
    let input = format!("ok1\nx\0y\nok3\n{long}\nok5\n");
    let (status, out, err) = run(
        &[
            "-q",
            "-r",
            "inf",
            "--joblog",
            log.to_str().unwrap(),
            "--dead-letter",
            dead.to_str().unwrap(),
            "--exec",
            "echo",
            "{}",
        ],
        input.as_bytes(),
    );
    assert_eq!(status, 123, "{err}");
    assert_eq!(String::from_utf8_lossy(&out), "ok1\nok3\nok5\n");
    assert_eq!(err.matches("cannot be an argument").count(), 2, "{err}");
    assert_eq!(
        std::fs::read(&dead).unwrap(),
        format!("x\0y\n{long}\n").into_bytes()
    );
    let failed: Vec<Value> = joblog(&log)
        .into_iter()
        .filter(|e| e["outcome"] == "failed")
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|e| e["error"].is_string()), "{failed:?}");
}
