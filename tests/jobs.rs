//! `--exec`: drip runs the jobs. Real processes (small shell scripts), and
//! real curl against a test HTTP server on 127.0.0.1 that enforces its own
//! quota: without curl those tests say so and pass, except under
//! `DRIP_REQUIRE_TOOLS=1` (`common::have`; CI installs it).

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    assert_books_add_up, command, curl_exec, json_lines as joblog, last_json, numbered, run,
    send_signal, temp_file, wait_for, Answer,
};
use serde_json::Value;

/// Whether any process of group `pgid` is alive (zombies, dead and
/// waiting for their parent to reap them, do not count).
fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // Fields after the name: state, ppid, pgrp.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return false;
        };
        let fields: Vec<&str> = rest.split(' ').collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

#[test]
fn each_record_runs_once_with_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("stats.json");
    let script = r#"echo "$1 $DRIP_RECORD $DRIP_ATTEMPT $DRIP_RECORD_ID""#;
    let (status, out, err) = run(
        &[
            "-r",
            "inf",
            "-j",
            "4",
            "-q",
            "--stats-json",
            s.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            script,
            "sh",
            "{}",
        ],
        &numbered(1..=30),
    );
    assert_eq!(status, 0, "{err}");
    let mut lines: Vec<Vec<String>> = out
        .lines()
        .map(|l| l.split(' ').map(String::from).collect())
        .collect();
    lines.sort_by_key(|f| f[0].parse::<u32>().unwrap());
    assert_eq!(lines.len(), 30);
    for (i, f) in lines.iter().enumerate() {
        let n = (i + 1).to_string();
        // Nothing dropped: the record's number is its line number.
        assert_eq!((&f[0], &f[1], f[2].as_str()), (&n, &n, "1"));
        assert!(f[3].starts_with(&format!("{n}-")), "{f:?}");
    }
    let s = last_json(&s);
    assert_eq!(
        (s["succeeded"].as_u64(), s["failed"].as_u64()),
        (Some(30), Some(0))
    );
    assert_books_add_up(&s);
}

#[test]
fn without_braces_the_record_is_the_last_argument_or_on_stdin() {
    let (status, out, _) = run(&["-r", "inf", "-q", "--exec", "echo", "a"], "x\ny\n");
    assert_eq!((status, out.as_str()), (0, "a x\na y\n"));
    let (status, out, _) = run(
        &[
            "-r",
            "inf",
            "-q",
            "--record-on-stdin",
            "--exec",
            "tr",
            "a-z",
            "A-Z",
        ],
        "xy\nz\n",
    );
    assert_eq!((status, out.as_str()), (0, "XY\nZ\n"));
}

#[test]
fn job_output_is_kept_whole() {
    // Eight jobs at once, each writing 300 lines slowly enough to overlap.
    let script =
        r#"for i in $(seq 300); do echo "$1 $i"; [ $((i % 100)) = 0 ] && sleep 0.01; done"#;
    let (status, out, _) = run(
        &[
            "-r", "inf", "-j", "8", "-q", "--exec", "sh", "-c", script, "sh",
        ],
        &numbered(1..=16),
    );
    assert_eq!(status, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 16 * 300);
    for block in lines.chunks(300) {
        let job = block[0].split(' ').next().unwrap();
        for (i, line) in block.iter().enumerate() {
            assert_eq!(*line, format!("{job} {}", i + 1), "interleaved output");
        }
    }
}

#[test]
fn job_output_without_a_final_newline_is_ended_with_one() {
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("err");
    let mut cmd = command(&[
        "-r",
        "inf",
        "-q",
        "--exec",
        "sh",
        "-c",
        "printf \"nonl$1\"; printf \"e$1\" >&2",
        "sh",
    ]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"1\n2\n3\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "nonl1\nnonl2\nnonl3\n"
    );
    assert_eq!(std::fs::read_to_string(&err).unwrap(), "e1\ne2\ne3\n");
}

#[test]
fn stats_count_starts_and_waits_and_no_bytes_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("stats.json");
    // One job at a time, 200 ms each: starts at about 0, 0.2 and 0.4 s, so
    // the third record waits about 400 ms for its start.
    let (status, _, _) = run(
        &[
            "-r",
            "inf",
            "-q",
            "--stats-json",
            s.to_str().unwrap(),
            "--record-on-stdin",
            "--exec",
            "sleep",
            "0.2",
        ],
        &numbered(1..=3),
    );
    assert_eq!(status, 0);
    let s = last_json(&s);
    assert_eq!(
        (s["written"].as_u64(), s["bytes_written"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(s["bytes_read"].as_u64(), Some(6), "{s}");
    let rate = s["rate"].as_f64().unwrap_or_else(|| panic!("no rate: {s}"));
    assert!((2.5..=5.5).contains(&rate), "start rate {rate}: {s}");
    let span = s["span_ms"].as_f64().unwrap();
    assert!((350.0..2000.0).contains(&span), "{s}");
    let wait = s["max_wait_ms"].as_f64().unwrap();
    assert!((350.0..2000.0).contains(&wait), "{s}");
    assert_books_add_up(&s);
}

#[test]
fn jobs_bound_concurrency_and_the_rate_paces_starts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let running = dir.path().join("running");
    std::fs::create_dir(&running).unwrap();
    // Each job counts the jobs running beside it.
    let script = format!(
        r#"touch {r}/$1; ls {r} | wc -l; sleep 0.3; rm {r}/$1"#,
        r = running.display()
    );
    let s = dir.path().join("stats.json");
    let (status, out, _) = run(
        &[
            "-r",
            "inf",
            "-j",
            "3",
            "-q",
            "--stats-interval",
            "100ms",
            "--stats-json",
            s.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            &script,
            "sh",
        ],
        &numbered(1..=9),
    );
    assert_eq!(status, 0);
    let most = out.lines().map(|l| l.trim().parse::<u32>().unwrap()).max();
    assert_eq!(most, Some(3), "{out}");
    // The stats stream carries the runner's figures.
    let text = std::fs::read_to_string(&s).unwrap();
    let ticks: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(ticks.len() >= 3, "{text}");
    assert!(ticks
        .iter()
        .all(|t| t["jobs_running"].as_u64().unwrap() <= 3));
    assert!(ticks.iter().any(|t| t["jobs_running"] == 3), "{text}");
    // 20/s with 8 slots: 11 starts take at least 10 intervals.
    let stats = dir.path().join("starts.json");
    let (status, _, _) = run(
        &[
            "-r",
            "20/s",
            "-j",
            "8",
            "-q",
            "--joblog",
            log.to_str().unwrap(),
            "--stats-json",
            stats.to_str().unwrap(),
            "--exec",
            "true",
        ],
        &numbered(1..=11),
    );
    assert_eq!(status, 0);
    let mut starts: Vec<f64> = joblog(&log)
        .iter()
        .map(|e| e["start_us"].as_u64().unwrap() as f64 / 1e6)
        .collect();
    starts.sort_by(f64::total_cmp);
    // Never early, on drip's own clock: ten intervals of 50 ms from the
    // first start to the last (half an interval less, for a first start
    // the machine held up). A burst one too big or a rate 20 % fast takes
    // an interval or more off (450 ms, 417 ms).
    let span = last_json(&stats)["span_ms"].as_f64().unwrap();
    assert!(
        span >= 10.0 * 50.0 - 25.0,
        "11 starts at 20/s in {span} ms: {starts:?}"
    );
    // On pace as the joblog saw it (see common::drift): the second half
    // not ahead of the first.
    let drift = common::drift(&starts, 0.05);
    assert!(drift >= -0.005, "starts {drift} s ahead: {starts:?}");
}

#[test]
fn transient_failures_are_retried_until_they_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let s = dir.path().join("stats.json");
    // Fails with 75 (EX_TEMPFAIL) on the first two attempts of each record.
    let script = r#"[ "$DRIP_ATTEMPT" -ge 3 ] && echo "ok $1" || exit 75"#;
    let (status, out, err) = run(
        &[
            "-r",
            "inf",
            "-j",
            "4",
            "-q",
            "--retries",
            "3",
            "--backoff",
            "10ms..40ms",
            "--joblog",
            log.to_str().unwrap(),
            "--stats-json",
            s.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            script,
            "sh",
        ],
        &numbered(1..=5),
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(out.lines().count(), 5);
    let entries = joblog(&log);
    assert_eq!(entries.len(), 15);
    let retried = entries.iter().filter(|e| e["outcome"] == "retry").count();
    assert_eq!(retried, 10);
    assert!(entries
        .iter()
        .all(|e| e["outcome"] != "retry" || e["exit"] == 75));
    let s = last_json(&s);
    assert_eq!(
        (s["succeeded"].as_u64(), s["retries"].as_u64()),
        (Some(5), Some(10))
    );
    assert_books_add_up(&s);
}

#[test]
fn a_job_that_always_fails_ends_failed_in_the_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let dead = dir.path().join("dead");
    let s = dir.path().join("stats.json");
    let (status, _, _) = run(
        &[
            "-r",
            "inf",
            "-j",
            "2",
            "-q",
            "--retries",
            "2",
            "--backoff",
            "1ms..5ms",
            "--joblog",
            log.to_str().unwrap(),
            "--dead-letter",
            dead.to_str().unwrap(),
            "--stats-json",
            s.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            r#"[ "$1" = 2 ] && exit 75; [ "$1" = 3 ] && exit 1; true"#,
            "sh",
        ],
        &numbered(1..=4),
    );
    assert_eq!(status, 123, "some records failed");
    let mut dead: Vec<String> = std::fs::read_to_string(&dead)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    dead.sort();
    assert_eq!(dead, ["2", "3"]);
    let entries = joblog(&log);
    let attempts = |r: u64| entries.iter().filter(|e| e["number"] == r).count();
    // 75 is transient: three attempts; 1 is final: one.
    assert_eq!((attempts(2), attempts(3)), (3, 1));
    let s = last_json(&s);
    assert_eq!(
        (s["succeeded"].as_u64(), s["failed"].as_u64()),
        (Some(2), Some(2))
    );
    assert_books_add_up(&s);
}

#[test]
fn a_timeout_kills_the_job_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let pids = dir.path().join("pids");
    // The job leaves a child behind and waits on it; its group is its pid.
    let script = format!(r#"echo $$ >> {}; sleep 30 & wait"#, pids.display());
    let start = Instant::now();
    let (status, _, _) = run(
        &[
            "-r",
            "inf",
            "-j",
            "2",
            "-q",
            "--timeout",
            "300ms",
            "--joblog",
            log.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            &script,
            "sh",
        ],
        &numbered(1..=2),
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(status, 123);
    assert!(joblog(&log)
        .iter()
        .all(|e| e["timed_out"] == true && e["outcome"] == "failed"));
    // sh dies of the TERM drip sends at the timeout: the joblog says so.
    assert!(
        joblog(&log)
            .iter()
            .all(|e| e["signal"] == libc::SIGTERM && e["exit"].is_null()),
        "{:?}",
        joblog(&log)
    );
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        assert!(!group_alive(pid.parse().unwrap()), "job {pid} left running");
    }
}

#[test]
fn records_expired_by_a_shorter_max_wait_are_no_failure() {
    // --max-wait 300ms expires records long before the 10 s deadline:
    // expired under --max-wait, they exit 0 as without --exec.
    let (status, out, err) = run(
        &[
            "-r",
            "2/s",
            "-q",
            "--max-wait",
            "300ms",
            "--deadline",
            "10s",
            "--exec",
            "echo",
        ],
        &numbered(1..=4),
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, "1\n");
}

#[test]
fn a_deadline_expires_records_still_in_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let s = dir.path().join("stats.json");
    // At 2/s the second record is due 500 ms after the first: past 300 ms.
    let (status, out, _) = run(
        &[
            "-r",
            "2/s",
            "-q",
            "--deadline",
            "300ms",
            "--dead-letter",
            dead.to_str().unwrap(),
            "--stats-json",
            s.to_str().unwrap(),
            "--exec",
            "echo",
        ],
        &numbered(1..=4),
    );
    assert_eq!(status, 123, "records passed their deadline");
    assert_eq!(out, "1\n");
    assert_eq!(std::fs::read_to_string(&dead).unwrap(), "2\n3\n4\n");
    let s = last_json(&s);
    assert_eq!(
        (s["succeeded"].as_u64(), s["expired"].as_u64()),
        (Some(1), Some(3))
    );
    assert_books_add_up(&s);
}

#[test]
fn a_missing_command_is_reported_once() {
    let (status, out, err) = run(
        &[
            "-r",
            "inf",
            "-j",
            "4",
            "-q",
            "--exec",
            "drip-no-such-command",
        ],
        &numbered(1..=20),
    );
    assert_eq!(status, 127);
    assert_eq!(out, "");
    assert_eq!(
        err,
        "drip: --exec drip-no-such-command: command not found\n"
    );
    let f = temp_file(b"#!/bin/sh\n");
    let (status, _, err) = run(
        &["-r", "inf", "-q", "--exec", f.path().to_str().unwrap()],
        "x\n",
    );
    assert_eq!(status, 126);
    assert!(err.ends_with(": permission denied\n"), "{err}");
}

#[test]
fn a_missing_command_leaves_the_dead_letter_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    for _ in 0..3 {
        let _ = std::fs::remove_file(&dead);
        let (status, _, _) = run(
            &[
                "-r",
                "inf",
                "-q",
                "--dead-letter",
                dead.to_str().unwrap(),
                "--exec",
                "drip-no-such-command",
                "{}",
            ],
            &numbered(1..=5),
        );
        assert_eq!(status, 127);
        assert_eq!(std::fs::read_to_string(&dead).unwrap(), numbered(1..=5));
    }
}

#[test]
fn the_headers_directory_is_private_and_removed_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    // Each job prints its headers directory's mode.
    let script = r#"stat -c %a "$(dirname "$DRIP_HEADERS")""#;
    for (program, status, out) in [("sh", 0, "700\n700\n"), ("drip-no-such-command", 127, "")] {
        let mut cmd = command(&["-r", "inf", "-q", "--exec", program, "-c", script]);
        cmd.env("TMPDIR", dir.path()).stdin(Stdio::piped());
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"1\n2\n").unwrap();
        let (code, stdout, _) = common::output_of(child);
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        assert_eq!((code, stdout.as_str()), (status, out), "{program}");
        common::assert_no_temporary_left(dir.path());
    }
}

/// drip running `sleep` jobs from a file, with the pids of its jobs.
fn sleeping(dir: &Path, seconds: &str) -> std::process::Child {
    sleeping_after(dir, "", seconds)
}

/// [`sleeping`], each job running `setup` first; a joblog in `dir/joblog`.
fn sleeping_after(dir: &Path, setup: &str, seconds: &str) -> std::process::Child {
    let dead = dir.join("dead");
    let log = dir.join("joblog");
    let input = dir.join("input");
    std::fs::write(&input, numbered(1..=10)).unwrap();
    let script = format!(
        r#"{setup}echo $$ >> {}/pids; sleep {seconds}"#,
        dir.display()
    );
    let mut cmd = command(&[
        "-r",
        "inf",
        "-j",
        "2",
        "-q",
        "--dead-letter",
        dead.to_str().unwrap(),
        "--joblog",
        log.to_str().unwrap(),
        input.to_str().unwrap(),
        "--exec",
        "sh",
        "-c",
        &script,
        "sh",
    ]);
    // drip's temporary files go here (see `assert_no_temporary_left`).
    std::fs::create_dir(dir.join("tmp")).unwrap();
    cmd.env("TMPDIR", dir.join("tmp"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // Wait until both jobs run.
    let pids = dir.join("pids");
    let start = Instant::now();
    while std::fs::read_to_string(&pids).map_or(0, |t| t.lines().count()) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "jobs did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn a_first_signal_waits_for_the_running_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = sleeping(dir.path(), "0.5");
    send_signal(&child, libc::SIGTERM);
    let start = Instant::now();
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(10)).code(),
        Some(143)
    );
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "did not wait for the jobs"
    );
    // The two that ran succeeded; the other eight are undelivered.
    let dead = std::fs::read_to_string(dir.path().join("dead")).unwrap();
    assert_eq!(dead, numbered(3..=10));
    common::assert_no_temporary_left(&dir.path().join("tmp"));
}

#[test]
fn a_second_signal_kills_the_jobs_and_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = sleeping(dir.path(), "30");
    send_signal(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(100));
    send_signal(&child, libc::SIGTERM);
    let start = Instant::now();
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(10)).code(),
        Some(143)
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    let mut dead: Vec<u32> = std::fs::read_to_string(dir.path().join("dead"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    dead.sort_unstable();
    assert_eq!(
        dead,
        (1..=10).collect::<Vec<_>>(),
        "every record undelivered"
    );
    for pid in std::fs::read_to_string(dir.path().join("pids"))
        .unwrap()
        .lines()
    {
        assert!(!group_alive(pid.parse().unwrap()), "job {pid} left running");
    }
    common::assert_no_temporary_left(&dir.path().join("tmp"));
}

#[test]
fn a_second_signal_terms_the_jobs_at_once_and_kills_them_200ms_later() {
    let dir = tempfile::tempdir().unwrap();
    // The jobs ignore TERM: only the KILL 200 ms later ends them.
    let mut child = sleeping_after(dir.path(), "trap '' TERM; ", "30");
    send_signal(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGINT);
    let start = Instant::now();
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(10)).code(),
        Some(130)
    );
    let took = start.elapsed();
    // Not the one-second wait for threads that do not let go.
    assert!(
        took >= Duration::from_millis(180) && took < Duration::from_millis(950),
        "{took:?}"
    );
    let log = joblog(&dir.path().join("joblog"));
    assert_eq!(log.len(), 2, "{log:?}");
    for e in &log {
        assert_eq!(e["outcome"], "undelivered", "{e}");
        assert_eq!(e["signal"], libc::SIGKILL, "{e}");
    }
    // Those not started at the first signal, then the two killed.
    let dead = std::fs::read_to_string(dir.path().join("dead")).unwrap();
    let mut dead: Vec<&str> = dead.lines().collect();
    dead[8..].sort_unstable();
    assert_eq!(dead.join("\n") + "\n", numbered(3..=10) + &numbered(1..=2));
    for pid in std::fs::read_to_string(dir.path().join("pids"))
        .unwrap()
        .lines()
    {
        assert!(!group_alive(pid.parse().unwrap()), "job {pid} left running");
    }
    common::assert_no_temporary_left(&dir.path().join("tmp"));
}

/// A record stopped while its retry waits out the backoff ends with a
/// joblog line giving its fate, for the attempt that never ran; it is
/// undelivered in the books and the dead letter.
#[test]
fn a_stop_during_a_retry_backoff_ends_the_record_with_its_joblog_line() {
    let dir = tempfile::tempdir().unwrap();
    let (log, dead, stats) = (
        dir.path().join("joblog"),
        dir.path().join("dead"),
        dir.path().join("stats.json"),
    );
    let input = temp_file(b"a\n");
    // 75 is a transient failure; the backoff before the retry is drawn
    // up to 20 days: the retry never comes before the signal.
    let mut child = command(&[
        "-r",
        "inf",
        "-q",
        "--retries",
        "3",
        "--backoff",
        "20days..20days",
        "--joblog",
        log.to_str().unwrap(),
        "--dead-letter",
        dead.to_str().unwrap(),
        "--stats-json",
        stats.to_str().unwrap(),
        input.path().to_str().unwrap(),
        "--exec",
        "sh",
        "-c",
        "exit 75",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no attempt ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    send_signal(&child, libc::SIGTERM);
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(10)).code(),
        Some(143)
    );
    let log = joblog(&log);
    let lines: Vec<(u64, &Value, &Value, &Value)> = log
        .iter()
        .map(|e| {
            (
                e["attempt"].as_u64().unwrap(),
                &e["exit"],
                &e["signal"],
                &e["outcome"],
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (1, &Value::from(75), &Value::Null, &Value::from("retry")),
            (2, &Value::Null, &Value::Null, &Value::from("undelivered")),
        ],
        "{log:?}"
    );
    assert_eq!(log[1]["duration_us"], 0);
    assert_eq!(log[0]["id"], log[1]["id"]);
    assert_eq!(std::fs::read_to_string(&dead).unwrap(), "a\n");
    let s = last_json(&stats);
    assert_books_add_up(&s);
    assert_eq!(
        (s["undelivered"].as_u64(), s["retries"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
}

/// What the test server saw: (seconds since it started, path, status).
type Seen = Arc<Mutex<Vec<(f64, String, u16)>>>;

/// An HTTP server on 127.0.0.1 enforcing its own quota: a token bucket of
/// `per_second` (burst 4); over it, 429 with `Retry-After: 1` (or none);
/// every 13th request that passes gets 503 instead.
fn quota_server(per_second: f64, retry_after: bool) -> (u16, Seen, Instant) {
    let seen: Seen = Arc::default();
    let start = Instant::now();
    let log = Arc::clone(&seen);
    // (tokens, when last filled, requests let through).
    let bucket = Mutex::new((4.0f64, 0.0f64, 0u32));
    let port = common::http_server(move |_, path| {
        let mut bucket = bucket.lock().unwrap();
        let (tokens, last, passed) = &mut *bucket;
        let now = start.elapsed().as_secs_f64();
        *tokens = (*tokens + (now - *last) * per_second).min(4.0);
        *last = now;
        let status = if *tokens < 1.0 {
            429
        } else {
            *tokens -= 1.0;
            *passed += 1;
            if *passed % 13 == 0 {
                503
            } else {
                200
            }
        };
        log.lock().unwrap().push((now, path.to_string(), status));
        let mut answer = Answer::status(status);
        if status != 200 && retry_after {
            answer.headers = "Retry-After: 1\r\n".into();
        }
        answer
    });
    (port, seen, start)
}

/// (start, end) in Unix seconds, and HTTP status, of each attempt.
fn attempts(log: &Path) -> Vec<(f64, f64, Option<u64>)> {
    joblog(log)
        .iter()
        .map(|e| {
            let start = e["start_us"].as_u64().unwrap() as f64 / 1e6;
            let end = start + e["duration_us"].as_u64().unwrap() as f64 / 1e6;
            (start, end, e["http_status"].as_u64())
        })
        .collect()
}

/// drip at 40/s against a quota of 20/s (burst 4) answering 429 and a
/// 503 in 13 with Retry-After: 1. A run whose requests never outran the
/// quota (a busy machine started the curls too slowly) tells nothing of
/// Retry-After: it is run again ([`common::until_judged`]), and a drip
/// that never sends fast enough fails as not judged.
#[test]
fn curl_against_a_quota_gets_every_record_through_and_honours_retry_after() {
    if !common::have(&["curl"]) {
        return;
    }
    common::until_judged(5, Duration::from_secs(120), || {
        let (port, seen, _) = quota_server(20.0, true);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("joblog");
        let s = dir.path().join("stats.json");
        let url = format!("http://127.0.0.1:{port}/{{}}");
        let (status, _, err) = run(
            &[
                &[
                    "-r",
                    "40/s",
                    "-j",
                    "16",
                    "-q",
                    "--retries",
                    "10",
                    "--backoff",
                    "50ms..1s",
                    "--joblog",
                    log.to_str().unwrap(),
                    "--stats-json",
                    s.to_str().unwrap(),
                ][..],
                &curl_exec(&url),
            ]
            .concat(),
            &numbered(1..=20),
        );
        assert_eq!(status, 0, "{err}");
        let seen = seen.lock().unwrap().clone();
        // Every record got through, once.
        let mut ok: Vec<u32> = seen
            .iter()
            .filter(|(_, _, st)| *st == 200)
            .map(|(_, p, _)| p[1..].parse().unwrap())
            .collect();
        ok.sort_unstable();
        assert_eq!(ok, (1..=20).collect::<Vec<_>>());
        // The joblog and the stats agree with the server.
        let tries = attempts(&log);
        assert_eq!(tries.len(), seen.len());
        let count = |st: u16| seen.iter().filter(|s| s.2 == st).count();
        let logged = |st: u64| tries.iter().filter(|t| t.2 == Some(st)).count();
        if count(429) == 0 {
            let span = seen[seen.len() - 1].0 - seen[0].0;
            return Some(format!(
                "the quota was never hit: {} requests in {span:.2} s",
                seen.len()
            ));
        }
        assert_eq!((logged(429), logged(503)), (count(429), count(503)));
        let s = last_json(&s);
        assert_eq!(s["succeeded"].as_u64(), Some(20));
        assert_eq!(
            s["overload_responses"].as_u64(),
            Some((count(429) + count(503)) as u64)
        );
        assert!(s["pauses"].as_u64().unwrap() >= 1);
        assert_books_add_up(&s);
        // Once drip saw a 429 or 503 (Retry-After: 1), nothing started for 1 s.
        for &(_, end, st) in tries.iter().filter(|t| matches!(t.2, Some(429 | 503))) {
            for &(start, _, _) in &tries {
                assert!(
                    !(end + 0.05 < start && start < end + 0.99),
                    "an attempt started {:.3} s after a {st:?}",
                    start - end
                );
            }
        }
        None
    });
}

/// The share of 429s among the server's last `n` requests.
fn late_429_share(seen: &[(f64, String, u16)], n: usize) -> f64 {
    let late = &seen[seen.len().saturating_sub(n)..];
    late.iter().filter(|s| s.2 == 429).count() as f64 / late.len() as f64
}

#[test]
fn adapt_lowers_the_rate_to_the_quota() {
    if !common::have(&["curl"]) {
        return;
    }
    let run_at = |adapt: bool| {
        let (port, seen, _) = quota_server(20.0, false);
        let url = format!("http://127.0.0.1:{port}/{{}}");
        let mut args = vec![
            "-r",
            "40/s",
            "-j",
            "4",
            "-q",
            "--retries",
            "20",
            "--backoff",
            "20ms..200ms",
        ];
        if adapt {
            args.push("--adapt");
        }
        args.extend(curl_exec(&url));
        let (status, _, err) = run(&args, &numbered(1..=80));
        assert_eq!(status, 0, "{err}");
        let seen = seen.lock().unwrap().clone();
        late_429_share(&seen, 40)
    };
    let adapted = run_at(true);
    eprintln!("429 share of the last 40 requests: adapt {adapted:.2}");
    assert!(
        adapted < 0.15,
        "429s stay frequent with --adapt: {adapted:.2}"
    );
}

#[test]
fn a_runner_flag_without_exec_is_a_usage_error_naming_it() {
    let (status, _, err) = run(&["--retries", "3"], "");
    assert_eq!(status, 2);
    assert!(
        err.starts_with("drip: --retries: only with --exec"),
        "{err}"
    );
    let (status, _, err) = run(&["-r", "inf", "--backoff", "2s..1s", "--exec", "true"], "");
    assert_eq!(status, 2);
    assert!(err.contains("--backoff"), "{err}");
}

#[test]
fn a_negative_runner_value_is_an_error_naming_its_flag() {
    for (flag, value) in [
        ("--retries", "-1"),
        ("--jobs", "-2"),
        ("--timeout", "-1s"),
        ("--deadline", "-1s"),
        ("--backoff", "-1s..2s"),
        ("--retry-on", "-5"),
        ("--overload-on", "-5"),
    ] {
        let (status, _, err) = run(&["-r", "inf", flag, value, "--exec", "true"], "");
        assert_eq!(status, 2, "{flag}");
        assert!(
            err.starts_with(&format!("drip: invalid value '{value}' for '{flag}")),
            "{err}"
        );
    }
}

#[test]
fn joblog_refuses_dash() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&["-r", "inf", "--joblog", "-", "--exec", "true"]);
    cmd.current_dir(dir.path()).stdin(Stdio::null());
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--joblog") && err.contains("carries the records"),
        "{err}"
    );
    assert!(!dir.path().join("-").exists(), "a file named - was made");
}

#[test]
fn a_deadline_kills_an_attempt_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let start = Instant::now();
    let (status, _, _) = run(
        &[
            "-r",
            "inf",
            "-q",
            "--deadline",
            "300ms",
            "--retries",
            "5",
            "--joblog",
            log.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            "sleep 20",
            "sh",
        ],
        "x\n",
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(status, 123);
    let entries = joblog(&log);
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (&entries[0]["timed_out"], &entries[0]["outcome"]),
        (&Value::Bool(true), &Value::from("expired"))
    );
}

#[test]
fn an_overload_exit_status_pauses_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("stats.json");
    let log = dir.path().join("joblog");
    // The first attempt of record 1 says "overloaded" (exit 9).
    let script = r#"[ "$1" = 1 ] && [ "$DRIP_ATTEMPT" = 1 ] && exit 9; sleep 0.05"#;
    let (status, _, err) = run(
        &[
            "-r",
            "inf",
            "-j",
            "2",
            "-q",
            "--overload-on",
            "9",
            "--retries",
            "1",
            "--backoff",
            "1s..1s",
            "--joblog",
            log.to_str().unwrap(),
            "--stats-json",
            s.to_str().unwrap(),
            "--exec",
            "sh",
            "-c",
            script,
            "sh",
        ],
        &numbered(1..=6),
    );
    assert_eq!(status, 0, "{err}");
    let s = last_json(&s);
    assert_eq!(
        (s["overload_responses"].as_u64(), s["pauses"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (s["succeeded"].as_u64(), s["retries"].as_u64()),
        (Some(6), Some(1))
    );
    let tries = attempts(&log);
    let first = joblog(&log)
        .iter()
        .position(|e| e["outcome"] == "overload")
        .unwrap();
    // Nothing started during the pause (its length is in the stats), once
    // drip had seen the exit (a start may slip in while it reads it).
    let (end, paused) = (tries[first].1, s["paused_ms"].as_f64().unwrap() / 1e3);
    assert!(paused > 0.0);
    for &(start, _, _) in tries.iter().filter(|t| t.0 > end + 0.05) {
        assert!(
            start >= end + paused - 0.005,
            "started {:.3} s into a {paused:.3} s pause",
            start - end
        );
    }
}

/// Each of six records fails once (75) and is retried after at most
/// 1 ms: the twelve starts are paced by 10/s. Judged from the joblog's
/// start stamps against the moment before drip was started: start `k`
/// (in order) no sooner than `k` intervals after it
/// ([`common::ahead_of_start`]). A start stamped late (the machine held
/// up the job's thread between its slot and its spawn) moves only itself;
/// a retry started at once, without a slot, stands an interval early
/// unless drip's first start came half a second late, and such a run is
/// run again ([`common::until_judged`]).
#[test]
fn retries_are_starts_paced_by_the_rate() {
    common::until_judged(5, Duration::from_secs(60), || {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("joblog");
        let origin = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let (status, _, err) = run(
            &[
                "-r",
                "10/s",
                "-j",
                "4",
                "-q",
                "--retries",
                "1",
                "--backoff",
                "1ms..1ms",
                "--joblog",
                log.to_str().unwrap(),
                "--exec",
                "sh",
                "-c",
                r#"[ "$DRIP_ATTEMPT" = 2 ] || exit 75"#,
                "sh",
            ],
            &numbered(1..=6),
        );
        assert_eq!(status, 0, "{err}");
        let mut starts: Vec<f64> = attempts(&log).iter().map(|t| t.0 - origin).collect();
        starts.sort_by(f64::total_cmp);
        assert_eq!(starts.len(), 12);
        let early = common::ahead_of_start(&starts, 0.1);
        assert!(
            early <= 0.0,
            "a start {early:.3} s early at 10/s: {starts:?}"
        );
        (starts[0] >= 0.5).then(|| format!("the first start came {:.3} s after drip's", starts[0]))
    });
}

/// drip with two jobs, each leaving `sleep 7.123` behind in its process
/// group (ignoring TERM: only a KILL ends it); the second job also runs
/// on for `seconds`. The jobs' process groups go to `dir/pids`.
fn leaving_children(dir: &Path, seconds: &str) -> std::process::Child {
    two_jobs(&format!(
        r#"(trap '' TERM; exec sleep 7.123) & echo $$ >> {}/pids; [ "$1" = 2 ] && sleep {seconds}; exit 0"#,
        dir.display()
    ))
}

/// drip running `sh -c script` on records 1 and 2, two jobs at once.
/// stdin stays open: drip ends only by the signals.
fn two_jobs(script: &str) -> std::process::Child {
    let mut cmd = command(&[
        "-r", "inf", "-j", "2", "-q", "--exec", "sh", "-c", script, "sh",
    ]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let _ = child.stdin.as_mut().unwrap().write_all(b"1\n2\n");
    child
}

/// The process groups of the two jobs of [`leaving_children`], once both
/// have started.
fn started_groups(dir: &Path) -> Vec<i32> {
    let pids = dir.join("pids");
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        if text.lines().count() == 2 {
            return text.lines().map(|l| l.parse().unwrap()).collect();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "jobs did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Within a second, no process of `groups` is left.
fn assert_groups_end(groups: &[i32]) {
    let start = Instant::now();
    while groups.iter().any(|&g| group_alive(g)) {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "a job's background child outlived drip: {groups:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_signal_ends_what_the_jobs_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = leaving_children(dir.path(), "0.3");
    let groups = started_groups(dir.path());
    send_signal(&child, libc::SIGTERM);
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(10)).code(),
        Some(143)
    );
    assert_groups_end(&groups);
}

/// The first job ends at once, leaving a child that ignores TERM; the
/// second's whole group ends at TERM. At the second signal drip leaves as
/// soon as the second job is gone, and the first job's child must not
/// outlive it: the KILL meant for it is not left to a timer that drip's
/// exit can beat.
#[test]
fn a_second_signal_kills_what_an_ended_job_left_before_drip_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = two_jobs(&format!(
        r#"echo $$ >> {pids}; [ "$1" = 1 ] && {{ (trap '' TERM; exec sleep 7.321) & exit 0; }}; exec sleep 30"#,
        pids = dir.path().join("pids").display()
    ));
    let groups = started_groups(dir.path());
    // The first job has ended (its child lingers) before the signals.
    std::thread::sleep(Duration::from_millis(300));
    term_twice(&mut child);
    assert_groups_end(&groups);
}

/// TERM, and TERM again 100 ms later: drip leaves with status 143.
fn term_twice(child: &mut std::process::Child) {
    send_signal(child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(100));
    send_signal(child, libc::SIGTERM);
    assert_eq!(wait_for(child, Duration::from_secs(10)).code(), Some(143));
}

#[test]
fn a_second_signal_ends_what_the_jobs_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = leaving_children(dir.path(), "30");
    let groups = started_groups(dir.path());
    term_twice(&mut child);
    assert_groups_end(&groups);
}

/// `sh -c 'ulimit -n LIMIT; exec drip ARGS'` over `input`: (status,
/// stdout, stderr).
fn run_with_descriptors(limit: u32, args: &str, input: &str) -> (i32, String, String) {
    let file = temp_file(input.as_bytes());
    let out = common::shell(&format!("ulimit -n {limit} && exec drip {args}"))
        .stdin(Stdio::from(file.reopen().unwrap()))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Out of file descriptors at a job's start (far more jobs at once than
/// the descriptors allow), the job waits for a running one to end and
/// starts then: every record runs, drip says so once and exits 0.
#[test]
fn a_job_short_of_file_descriptors_waits_for_a_running_one_to_end() {
    let (status, out, err) = run_with_descriptors(
        40,
        r#"-r inf -j 60 --exec sh -c 'sleep 0.1; echo "$1"' sh"#,
        &numbered(1..=60),
    );
    assert_eq!(status, 0, "{err}");
    let mut lines: Vec<u32> = out.lines().map(|l| l.parse().unwrap()).collect();
    lines.sort_unstable();
    assert_eq!(lines, (1..=60).collect::<Vec<_>>(), "{err}");
    assert_eq!(
        err.matches("drip: --exec: a job cannot start yet: too many open files; it waits for a running job to end\n")
            .count(),
        1,
        "{err}"
    );
}

/// With so few file descriptors that no job can ever start (drip itself
/// starts), drip gives up after a bounded wait with status 1, a resource
/// error, not 126 (not executable): the limits tried go up from those
/// drip cannot start with to those a job runs with.
#[test]
fn a_job_that_can_never_start_for_want_of_descriptors_ends_drip_with_status_1() {
    for limit in 8..=64 {
        let (status, _, err) = run_with_descriptors(limit, "-r inf -j 2 --exec true", "a\nb\n");
        assert!(![126, 127].contains(&status), "ulimit -n {limit}: {err}");
        if status == 0 {
            panic!("ulimit -n {limit}: a job ran before one was ever refused");
        }
        if err.contains("--exec") {
            assert_eq!(status, 1, "ulimit -n {limit}: {err}");
            assert!(
                err.ends_with("drip: --exec true: a job cannot start: too many open files\n"),
                "ulimit -n {limit}: {err}"
            );
            return;
        }
    }
    panic!("drip did not start with 64 descriptors");
}

/// With --exec and records read from stdin, a file named after the
/// record's place (`{}`) went to the command, not to drip: said once, in
/// one line (not with -q); a file before `{}`, or drip's own FILE, is not.
#[test]
fn a_file_after_the_record_in_exec_is_named_when_stdin_is_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("urls.txt"), "from the file\n").unwrap();
    let exec = ["--exec", "echo", "got", "{}", "urls.txt"];
    let out = command(&[&["-r", "inf"][..], &exec].concat())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "drip: --exec: records are read from stdin; urls.txt is an argument of the command \
         (put it before --exec to read records from it)\n"
    );
    // Said once, the records from stdin run as they come.
    let (status, stdout, stderr) =
        run_in(dir.path(), &[&["-r", "inf"][..], &exec].concat(), "a\nb\n");
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(stdout, "got a urls.txt\ngot b urls.txt\n");
    assert_eq!(
        stderr.matches("urls.txt is an argument").count(),
        1,
        "{stderr}"
    );
    // Nothing said with -q, with the FILE before --exec, or with the file
    // before the record (the command's own, as a script is).
    for args in [
        &["-r", "inf", "-q", "--exec", "echo", "got", "{}", "urls.txt"][..],
        &["-r", "inf", "urls.txt", "--exec", "echo", "got", "{}"],
        &["-r", "inf", "--exec", "echo", "urls.txt", "{}"],
        &["-r", "inf", "--exec", "echo", "{}", "-o", "urls.txt"],
    ] {
        let (status, _, stderr) = run_in(dir.path(), args, "a\n");
        assert_eq!(status, 0, "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

/// drip run in `dir` with `args` on `input`: its status, stdout and stderr.
fn run_in(dir: &Path, args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = command(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
