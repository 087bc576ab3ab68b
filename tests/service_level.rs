//! The bucket sized by a service level: `--capacity DURATION`, records that
//! cannot make `--max-wait` refused at arrival, and the wait a record
//! arriving now would face, against the real binary.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{command, drip, json_lines, numbered, shell, spawn, timed_lines, wait_for};
use predicates::prelude::*;

#[test]
fn a_capacity_for_a_duration_holds_what_the_rate_drains_in_it() {
    // seq 100 | drip -r 10/s -c 3s -o drop-newest: the first leaves at
    // once, 30 wait, and the last of them leaves 3 s later.
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let start = Instant::now();
    let mut child = command(&["-r", "10/s", "-c", "3s", "-o", "drop-newest", "--stats"])
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(numbered(1..=100).as_bytes()).unwrap();
    }
    let lines = timed_lines(&mut child, start);
    let status = wait_for(&mut child, Duration::from_secs(20));
    assert!(status.success());
    let written: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    let expected: Vec<String> = (1..=31).map(|i| i.to_string()).collect();
    assert_eq!(written, expected);
    let last = lines.last().unwrap().0 - lines[0].0;
    assert!(
        (2.9..3.6).contains(&last),
        "the last left {last:.2}s after the first"
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("cap 30 (3s, by --rate 10/s)"), "{stderr}");
    let summary = json_lines(&stats).pop().unwrap();
    assert_eq!(summary["capacity_for"]["capacity"], 30);
    assert_eq!(summary["capacity_for"]["set_by"], "--rate 10/s");
    assert_eq!(summary["dropped_newest"], 69);
    assert_eq!(summary["refused"], 0);
}

#[test]
fn a_capacity_for_a_duration_with_no_rate_is_a_usage_error() {
    drip(&["-r", "inf", "-c", "30s"])
        .write_stdin("1\n")
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with(
            "drip: --capacity 30s: a duration needs a --rate",
        ));
}

#[test]
fn what_cannot_make_max_wait_goes_to_the_dead_letter_at_once() {
    // seq 100 | drip -r 10/s --max-wait 2050ms -o drop-newest --dead-letter
    // dl: 1..21 leave over 2 s; 22..100 reach the dead letter (a FIFO read
    // here as it is written) as soon as they are read, not 2 s later.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("dl");
    let stats = dir.path().join("stats.json");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let file = std::fs::File::open(fifo).unwrap();
            BufReader::new(file)
                .lines()
                .map(|l| (start.elapsed().as_secs_f64(), l.unwrap()))
                .collect::<Vec<_>>()
        })
    };
    let mut child = spawn(shell(&format!(
        "seq 100 | exec drip -r 10/s --max-wait 2050ms -o drop-newest --dead-letter {} --stats-json {}",
        fifo.display(),
        stats.display()
    )));
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(20)).success());
    let dead = reader.join().unwrap();
    let written: Vec<String> = lines.iter().map(|(_, l)| l.clone()).collect();
    assert_eq!(written, (1..=21).map(|i| i.to_string()).collect::<Vec<_>>());
    let span = lines.last().unwrap().0 - lines[0].0;
    assert!((1.9..2.6).contains(&span), "1..21 over {span:.2}s");
    let dead_ids: Vec<String> = dead.iter().map(|(_, l)| l.clone()).collect();
    assert_eq!(
        dead_ids,
        (22..=100).map(|i| i.to_string()).collect::<Vec<_>>()
    );
    // All 100 are read at once, when record 1 leaves: the refused ones
    // reach the file a few ms later (the dead letter flushes 5 ms after its
    // last flush once its queue is dry; 100 ms allows a loaded machine),
    // not at its 200 ms flush while shedding goes on, nor 2 s later.
    let latest = dead.last().unwrap().0 - lines[0].0;
    assert!(
        latest < 0.1,
        "the last refused record reached the file {latest:.3}s after record 1 left"
    );
    let summary = json_lines(&stats).pop().unwrap();
    assert_eq!(summary["refused"], 79);
    assert_eq!(summary["dropped_newest"], 79);
    assert_eq!(summary["expired"], 0);
}

#[test]
fn drop_oldest_keeps_the_newest_records_that_can_make_it() {
    // All 100 are read at once: 1 leaves, and each record from 12 on evicts
    // the oldest waiting one, so 91..100 leave within the second.
    let out = drip(&[
        "-r",
        "10/s",
        "--max-wait",
        "1050ms",
        "-o",
        "drop-oldest",
        "--stats",
    ])
    .write_stdin(numbered(1..=100))
    .assert()
    .success()
    .stderr(predicate::str::contains(
        "dropped 89 (newest 0, oldest 89; refused at arrival 89)",
    ))
    .get_output()
    .stdout
    .clone();
    let expected: String = std::iter::once(1)
        .chain(91..=100)
        .map(|i| format!("{i}\n"))
        .collect();
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn fail_stops_at_the_first_record_that_cannot_make_it() {
    // 1 leaves at once; 2..11 would leave by 1 s; 12 would leave at 1.1 s.
    // fail stops drip there, as a full bucket does.
    drip(&["-r", "10/s", "--max-wait", "1050ms", "-o", "fail"])
        .write_stdin(numbered(1..=20))
        .assert()
        .code(3)
        .stdout("1\n")
        .stderr(predicate::str::starts_with(
            "drip: overflow: record 12 could not leave in time: the schedule puts its departure 1.10s after its arrival, past --max-wait 1.05s",
        ));
}

#[test]
fn the_stream_shows_the_oldest_age_the_wait_and_the_refused() {
    // 20 records at once at 10/s, --max-wait 1.55 s: 1..16 leave by 1.5 s,
    // 17..20 are refused.
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    drip(&["-r", "10/s", "--max-wait", "1550ms", "-o", "drop-newest"])
        .args(["--stats-interval", "500ms", "--stats-json"])
        .arg(&stats)
        .write_stdin(numbered(1..=20))
        .assert()
        .success();
    let lines = json_lines(&stats);
    let first = &lines[0];
    assert_eq!(first["refused"], 4);
    let wait = first["forecast_wait_ms"].as_f64().unwrap();
    let age = first["oldest_age_ms"].as_f64().unwrap();
    // At 0.5 s: 7..16 wait (the last leaves at 1.5 s), the oldest since
    // the start; one more would leave at 1.6 s, 1.1 s later.
    assert!((900.0..1200.0).contains(&wait), "forecast wait {wait} ms");
    assert!((400.0..800.0).contains(&age), "oldest age {age} ms");
    let summary = lines.last().unwrap();
    assert_eq!(summary["refused"], 4);
    assert_eq!(summary["depth"], 0);
    assert!(summary["forecast_wait_ms"].is_number());
}

#[test]
fn with_keys_only_the_key_that_cannot_make_it_is_refused() {
    // --key 1 --key-rate 10/s --max-wait 1050ms -o drop-newest: key a's
    // 0..10 leave by 1 s, its 11..19 are refused at once; b's leaves now.
    let mut input: String = (0..20).map(|n| format!("a {n}\n")).collect();
    input.push_str("b 0\n");
    let out = drip(&["--key", "1", "--key-rate", "10/s", "--max-wait", "1050ms"])
        .args(["-o", "drop-newest", "--stats"])
        .write_stdin(input)
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "dropped 9 (newest 9, oldest 0; refused at arrival 9)",
        ))
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    let mut expected: Vec<String> = (0..=10).map(|n| format!("a {n}")).collect();
    expected.push("b 0".into());
    expected.sort_unstable();
    assert_eq!(lines, expected);
}
