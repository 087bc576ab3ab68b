//! `--budget`: at most N records in each calendar window, judged on the
//! wall clock from what the consumer saw; `--budget-exhausted stop`; the
//! budget in the figures.

use crate::common;

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use common::*;

/// Run `drip ARGS` over `input`, stamping each line of its stdout with the
/// wall clock as it is read; (status, stamped lines, stderr).
fn stamped(args: &[&str], input: &str) -> (i32, Vec<(f64, String)>, String) {
    let mut cmd = command(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut err = child.stderr.take().unwrap();
    let errs = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let mut out = child.stdout.take().unwrap();
    let (mut lines, mut pending, mut buf) = (Vec::new(), Vec::new(), [0u8; 65536]);
    loop {
        let n = out.read(&mut buf).expect("read stdout");
        if n == 0 {
            break;
        }
        let t = common::unix_now();
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            lines.push((t, String::from_utf8_lossy(&line[..i]).into_owned()));
        }
    }
    let status = wait_for(&mut child, Duration::from_secs(60));
    feeder.join().unwrap();
    (status.code().unwrap_or(-1), lines, errs.join().unwrap())
}

/// The records seen in each wall-clock second (UTC), by second, in order.
fn per_second(lines: &[(f64, String)]) -> Vec<(i64, usize)> {
    let mut seconds: Vec<(i64, usize)> = Vec::new();
    for (t, _) in lines {
        let s = t.floor() as i64;
        match seconds.last_mut() {
            Some((last, n)) if *last == s => *n += 1,
            _ => seconds.push((s, 1)),
        }
    }
    seconds
}

#[test]
fn a_budget_per_second_lets_20_go_in_each_wall_clock_second_from_its_start() {
    until_judged(6, Duration::from_secs(120), || {
        let (status, lines, stderr) = stamped(&["--budget", "20/second@UTC"], &numbered(1..=70));
        assert_eq!(status, 0, "{stderr}");
        let got: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        let want: Vec<String> = (1..=70).map(|i| i.to_string()).collect();
        assert_eq!(got, want, "every record, in order");
        let first = lines[0].0;
        if first.fract() > 0.85 {
            return Some(format!("began {first:.3}: too near a second's end to tell"));
        }
        let seconds = per_second(&lines);
        if seconds.windows(2).any(|w| w[1].0 != w[0].0 + 1) {
            return Some(format!("a second went by without a record: {seconds:?}"));
        }
        // Each window after the first begins on the second's boundary.
        for (second, _) in &seconds[1..] {
            let begun = lines
                .iter()
                .find(|(t, _)| t.floor() as i64 == *second)
                .unwrap()
                .0;
            if begun.fract() > 0.2 {
                return Some(format!(
                    "second {second} read {begun:.3}: the reader was late"
                ));
            }
        }
        let counts: Vec<usize> = seconds.iter().map(|&(_, n)| n).collect();
        assert_eq!(counts, [20, 20, 20, 10], "{seconds:?}");
        None
    });
}

#[test]
fn a_spent_budget_under_stop_ends_with_status_5_the_rest_undelivered() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let json = dir.path().join("stats.json");
    // A month's budget: the run never meets its end but at a month's
    // last instant, which the retry rules out.
    until_judged(3, Duration::from_secs(60), || {
        let _ = std::fs::remove_file(&dead);
        let began = common::unix_now();
        let (status, out, stderr) = run(
            &[
                "--budget",
                "5/month@UTC",
                "--budget-exhausted",
                "stop",
                "--dead-letter",
                dead.to_str().unwrap(),
                "--stats-json",
                json.to_str().unwrap(),
            ],
            &numbered(1..=20),
        );
        if common::unix_now().floor() as i64 / 86400 != began.floor() as i64 / 86400 {
            return Some("the run crossed midnight UTC".into());
        }
        assert_eq!(status, 5, "{stderr}");
        assert_eq!(out, numbered(1..=5));
        assert_eq!(std::fs::read_to_string(&dead).unwrap(), numbered(6..=20));
        assert!(
            stderr.contains(
                "drip: budget 5/month@UTC spent under --budget-exhausted stop; the records not written are undelivered"
            ),
            "{stderr}"
        );
        let v = last_json(&json);
        assert_books_add_up(&v);
        assert_eq!(v["written"], 5);
        assert_eq!(v["undelivered"], 15);
        assert_eq!(v["budgets"][0]["budget"], "5/month@UTC");
        assert_eq!(v["budgets"][0]["left"], 0);
        None
    });
}

/// Under `--budget-exhausted stop` with `--exec --retries`, a retry is a
/// start like any: once the budget is spent no retry starts, and drip
/// exits 5 as soon as the jobs running then have ended (it used to start
/// the retries in the next windows, spending them, and ran on).
#[test]
fn retries_start_no_more_once_a_budget_is_spent_under_stop() {
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("jobs.ndjson");
    let json = dir.path().join("stats.json");
    let began = std::time::Instant::now();
    let (status, _, stderr) = run(
        &[
            "-j",
            "4",
            "--budget",
            "3/month@UTC",
            "--budget-exhausted",
            "stop",
            "--retries",
            "3",
            "--retry-on",
            "1",
            "--backoff",
            "10ms..20ms",
            "--joblog",
            joblog.to_str().unwrap(),
            "--stats-json",
            json.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            "sleep 0.2; exit 1",
        ],
        &numbered(1..=10),
    );
    assert_eq!(status, 5, "{stderr}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(
        stderr.contains("budget 3/month@UTC spent under --budget-exhausted stop"),
        "{stderr}"
    );
    let lines = common::json_lines(&joblog);
    let ran: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["outcome"] != "undelivered")
        .collect();
    assert_eq!(ran.len(), 3, "three starts, the budget's: {lines:?}");
    assert!(ran.iter().all(|l| l["attempt"] == 1), "{lines:?}");
    let v = last_json(&json);
    assert_books_add_up(&v);
    assert_eq!(v["undelivered"], 10, "{v}");
}

#[test]
fn a_budget_with_room_under_stop_finishes_with_status_0() {
    let (status, out, stderr) = run(
        &["--budget", "50/month@UTC", "--budget-exhausted", "stop"],
        &numbered(1..=20),
    );
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(out, numbered(1..=20));
}

#[test]
fn the_summary_and_the_metrics_tell_what_is_left_and_the_next_reset() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("drip.prom");
    let (status, _, stderr) = run(
        &[
            "--budget",
            "1000/day@America/Los_Angeles",
            "--stats",
            "--metrics",
            metrics.to_str().unwrap(),
        ],
        &numbered(1..=30),
    );
    assert_eq!(status, 0, "{stderr}");
    assert!(
        stderr.contains("drip: budget 1000/day@America/Los_Angeles: 970 of 1000 left"),
        "{stderr}"
    );
    // Midnight Pacific: 00:00:00 PST or PDT.
    assert!(stderr.contains(" 00:00:00 P"), "{stderr}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains("drip_budget_remaining{drip=\"")
            && text.contains(",budget=\"1000/day@America/Los_Angeles\"} 970\n"),
        "{text}"
    );
    assert!(text.contains("# TYPE drip_budget_reset_time_seconds gauge"));
    // Prometheus's own checker finds the file sound, where it is here.
    if common::have(&["promtool"]) {
        let mut check = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        check
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let done = check.wait_with_output().unwrap();
        assert!(
            done.status.success(),
            "{}{}",
            String::from_utf8_lossy(&done.stdout),
            String::from_utf8_lossy(&done.stderr)
        );
    }
}

/// Each `--stats-interval` line says what is left of each budget and when
/// its next window starts, and the wait a record arriving then would
/// face counts the budget's windows ahead, with `--exec` and beside
/// `--metrics` too (it read 0 there: the forecast made for the metrics
/// file before the records came left them out).
#[test]
fn the_stats_stream_tells_the_budgets_and_the_wait_for_their_windows() {
    let dir = tempfile::tempdir().unwrap();
    for exec in [false, true] {
        until_judged(3, Duration::from_secs(60), || {
            let metrics = dir.path().join("drip.prom");
            let began = common::unix_now();
            let mut args = vec![
                "-q",
                "-r",
                "50/s",
                "--budget",
                "10/hour@UTC",
                "--stats-interval",
                "300ms",
                "--metrics",
                metrics.to_str().unwrap(),
            ];
            if exec {
                args.extend(["--exec", "true"]);
            }
            let mut child = common::command(&args)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(numbered(1..=30).as_bytes())
                .unwrap();
            std::thread::sleep(Duration::from_millis(1000));
            common::send_signal(&child, libc::SIGTERM);
            let err = common::stderr_of(&mut child);
            common::wait_for(&mut child, Duration::from_secs(20));
            if common::unix_now().floor() as i64 / 3600 != (began.floor() as i64 + 1) / 3600 {
                return Some("an hour's end passed".into());
            }
            let lines: Vec<serde_json::Value> = err
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert!(lines.len() >= 2, "{err}");
            let last = &lines[lines.len() - 1];
            assert_eq!(last["budgets"][0]["budget"], "10/hour@UTC", "{last}");
            assert_eq!(last["budgets"][0]["left"], 0, "{last}");
            assert!(
                last["budgets"][0]["reset_in_ms"].as_f64().unwrap() > 0.0,
                "{last}"
            );
            // 20 records wait: two more hours' windows, then the next.
            let wait = last["forecast_wait_ms"].as_f64().unwrap();
            assert!(wait > 2.0 * 3600e3, "exec {exec}: {last}");
            None
        });
    }
}

#[test]
fn bad_budgets_are_usage_errors() {
    for (args, says) in [
        (&["--budget", "10/fortnight"][..], "no window \"fortnight\""),
        (&["--budget", "10/day@Mars/Olympus"][..], "no time zone"),
        (&["--budget", "0/day"][..], "at least 1"),
        (&["--budget-exhausted", "later"][..], "later"),
    ] {
        let (status, _, stderr) = run(args, "");
        assert_eq!(status, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn the_local_zone_comes_from_tz() {
    let (status, _, stderr) = {
        let mut cmd = command(&["--budget", "10/day", "--stats"]);
        cmd.env("TZ", "Europe/Berlin");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        output_of(cmd.spawn().unwrap())
    };
    assert_eq!(status, 0, "{stderr}");
    assert!(stderr.contains("budget 10/day@Europe/Berlin"), "{stderr}");
    assert!(stderr.contains(" 00:00:00 CE"), "{stderr}");
}

#[test]
fn max_wait_counts_the_wait_for_the_next_window() {
    // A month's budget of 5: the others would wait for the next month,
    // past --max-wait, so they are refused as they arrive.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let (status, out, stderr) = run(
        &[
            "--budget",
            "5/month@UTC",
            "--max-wait",
            "10s",
            "-o",
            "drop-newest",
            "--stats-json",
            json.to_str().unwrap(),
        ],
        &numbered(1..=20),
    );
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(out, numbered(1..=5));
    let v = last_json(&json);
    assert_books_add_up(&v);
    assert_eq!(v["refused"], 15, "{v}");
}

#[test]
fn a_record_arriving_after_the_budget_is_spent_stops_drip_under_stop() {
    // Stdin stays open: drip stops because record 6 waits for the next
    // window, not because the input ended.
    let mut cmd = command(&["--budget", "5/month@UTC", "--budget-exhausted", "stop"]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(numbered(1..=5).as_bytes()).unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while seen.iter().filter(|&&b| b == b'\n').count() < 5 {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "stdout ended early: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    stdin.write_all(numbered(6..=8).as_bytes()).unwrap();
    let status = wait_for(&mut child, Duration::from_secs(20));
    let stderr = common::stderr_of(&mut child);
    assert_eq!(status.code(), Some(5), "{stderr}");
    out.read_to_end(&mut seen).unwrap();
    assert_eq!(String::from_utf8(seen).unwrap(), numbered(1..=5));
    drop(stdin);
}
