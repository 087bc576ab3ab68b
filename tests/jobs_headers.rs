//! The headers file a job leaves at `{headers}`: drip reads a regular
//! file only, and only its start, so a FIFO there never blocks the jobs or
//! a signal and `/dev/zero` never fills memory; and what it says decides:
//! a 403 that a rate limit sent is an overload, retried after a pause.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{command, drip, json_lines as joblog, send_signal, wait_for, Answer};
use serde_json::Value;

/// drip's stderr lines saying a headers file was passed over.
fn notices(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("drip: headers file"))
        .collect()
}

/// (exit, signal, http_status, outcome) of each joblog line, in order.
fn lines_of(log: &Path) -> Vec<(Value, Value, Value, String)> {
    joblog(log)
        .iter()
        .map(|e| {
            let outcome = e["outcome"].as_str().unwrap().to_string();
            (
                e["exit"].clone(),
                e["signal"].clone(),
                e["http_status"].clone(),
                outcome,
            )
        })
        .collect()
}

#[test]
fn a_fifo_at_headers_is_passed_over_and_the_exit_status_decides() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let log = dir.path().join("joblog");
    // Record 1 makes its headers file a FIFO, record 2 a link to one
    // (made elsewhere), and fails; record 3 a FIFO again.
    let script = format!(
        r#"if [ "$1" = 2 ]; then mkfifo {d}/f && ln -s {d}/f "$DRIP_HEADERS"; exit 3; fi
           mkfifo "$DRIP_HEADERS" && echo "$1""#,
        d = dir.path().display()
    );
    let out = drip(&["-r", "inf", "--joblog", log.to_str().unwrap()])
        .args(["--exec", "sh", "-c", &script, "sh"])
        .env("TMPDIR", &tmp)
        .write_stdin("1\n2\n3\n")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A failed record: 123, as xargs.
    assert_eq!(out.status.code(), Some(123), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n3\n");
    let null = Value::Null;
    assert_eq!(
        lines_of(&log),
        [
            (0.into(), null.clone(), null.clone(), "succeeded".into()),
            (3.into(), null.clone(), null.clone(), "failed".into()),
            (0.into(), null.clone(), null.clone(), "succeeded".into()),
        ]
    );
    // Said once, on one line.
    assert_eq!(
        notices(&stderr),
        [
            "drip: headers file of record 1: a FIFO, not a regular file: not read; \
          such files are passed over and the job's exit status decides"
        ],
        "{stderr}"
    );
    common::assert_no_temporary_left(&tmp);
}

#[test]
fn a_fifo_at_headers_does_not_hold_a_signal_up() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let started = dir.path().join("started");
    let script = format!(r#"mkfifo "$DRIP_HEADERS"; touch {}"#, started.display());
    let mut cmd = command(&["-r", "inf", "-j", "2", "-q", "--exec", "sh", "-c", &script]);
    // The input stays open: only the signal ends the run.
    cmd.env("TMPDIR", &tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"1\n").unwrap();
    let start = Instant::now();
    while !started.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "no job ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    send_signal(&child, libc::SIGTERM);
    // The first signal waits for the running job, which has ended.
    let status = wait_for(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(143));
    // Under -q, the FIFO passed over is not said.
    let stderr = common::stderr_of(&mut child);
    assert_eq!(notices(&stderr), Vec::<&str>::new(), "{stderr}");
    drop(stdin);
    common::assert_no_temporary_left(&tmp);
}

/// How a [`bounded`] run went.
struct Bounded {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// drip's peak resident size, KiB.
    peak_kib: i64,
}

/// drip running `script` for records 1 and 2 one at a time, its TMPDIR
/// `tmp`, its address space bounded to 1 GB so that a run reading without
/// end stops there rather than taking the machine's memory. A run that
/// hangs is killed after 60 s and fails.
fn bounded(tmp: &Path, script: &str) -> Bounded {
    use std::io::Read;
    // sh sets the bound, then becomes drip: the same process.
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", r#"ulimit -v 1000000 && exec "$@""#, "sh"])
        .args([
            common::bin(),
            "-r",
            "inf",
            "--exec",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .env("LC_ALL", "C")
        .env("XDG_RUNTIME_DIR", common::runtime_dir())
        .env("TMPDIR", tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    common::feed(&mut child, b"1\n2\n");
    let read_all = |mut from: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            from.read_to_string(&mut text).unwrap();
            text
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().unwrap()));
    let stderr = read_all(Box::new(child.stderr.take().unwrap()));
    let (code, peak_kib) = wait_measured(&mut child, Duration::from_secs(60));
    Bounded {
        code,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        peak_kib,
    }
}

/// Wait for `child` at most `limit` (kill it and fail past that): its
/// exit status (`None` when a signal ended it) and its peak resident
/// size, KiB (wait4(2)'s `ru_maxrss`, of this process alone).
#[allow(unsafe_code)]
fn wait_measured(child: &mut std::process::Child, limit: Duration) -> (Option<i32>, i64) {
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: all-zero bytes are a valid rusage.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `status` and `usage` are ours, written by the call only;
        // `pid` is our child, not reaped yet (WNOHANG: never waits).
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if rc == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return (code, usage.ru_maxrss);
        }
        assert_eq!(rc, 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("drip did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A run takes a few MB (a MiB of headers at a time on top), and ended:
/// reading a file of no end whole would take the gigabyte allowed, and
/// then fail (or drip be ended).
fn assert_small(run: &Bounded) {
    let peak = run.peak_kib;
    eprintln!("drip peaked at {peak} KiB resident");
    assert!(peak < 200 * 1024, "drip peaked at {peak} KiB resident");
}

#[test]
fn a_headers_file_without_end_is_not_read_and_a_long_one_only_in_part() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    // /dev/zero never ends: not read.
    let run = bounded(tmp, r#"ln -s /dev/zero "$DRIP_HEADERS"; echo "$1""#);
    assert_small(&run);
    let err = &run.stderr;
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "1\n2\n"),
        "{err}"
    );
    assert_eq!(
        notices(err),
        [
            "drip: headers file of record 1: a character device, not a regular file: not read; \
          such files are passed over and the job's exit status decides"
        ],
        "{err}"
    );
    common::assert_no_temporary_left(tmp);
    // A terabyte (sparse) after a 404's headers: the start is read, and
    // decides; the rest is passed over.
    let script = r#"printf 'HTTP/1.1 404 Not Found\r\n\r\n' > "$DRIP_HEADERS"
                    truncate -s 1T "$DRIP_HEADERS"; echo "$1""#;
    let long = bounded(tmp, script);
    assert_small(&long);
    let err = &long.stderr;
    assert_eq!(
        (long.code, long.stdout.as_str()),
        (Some(123), "1\n2\n"),
        "{err}"
    );
    assert_eq!(
        notices(err),
        [
            "drip: headers file of record 1: 1099511627776 bytes: only the first 1048576 \
          are read; the rest of such files is passed over"
        ],
        "{err}"
    );
    common::assert_no_temporary_left(tmp);
}

/// The requests a test server saw: (path, status).
type Seen = Arc<Mutex<Vec<(String, u16)>>>;

/// An HTTP server on 127.0.0.1 refusing the first request for each path
/// with 403: under `/primary/` as GitHub's primary rate limit does
/// (`X-RateLimit-Remaining: 0`, the reset a Unix time two seconds on),
/// under `/secondary/` as its secondary limit (`Retry-After: 1`); then
/// 200. Under `/plain/` every request is a plain 403. Returns its port and
/// the requests it saw, (path, status).
fn forbidding_server() -> (u16, Seen) {
    let seen = Seen::default();
    let log = Arc::clone(&seen);
    let port = common::http_server(move |_, path| {
        let mut seen = log.lock().unwrap();
        let first = !seen.iter().any(|(p, _)| p == path);
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 2;
        let mut answer = Answer::status(403);
        match path.split('/').nth(1).unwrap_or("") {
            "primary" if first => {
                answer.headers = format!(
                    "X-RateLimit-Limit: 5000\r\nX-RateLimit-Remaining: 0\r\n\
                     X-RateLimit-Reset: {reset}\r\n"
                );
            }
            "secondary" if first => answer.headers = "Retry-After: 1\r\n".into(),
            "plain" => {}
            _ => answer = Answer::status(200),
        }
        seen.push((path.to_string(), answer.status));
        answer
    });
    (port, seen)
}

#[test]
fn a_403_from_a_rate_limit_is_an_overload_and_a_plain_one_final() {
    if !common::have(&["curl"]) {
        return;
    }
    let (port, seen) = forbidding_server();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let stats = dir.path().join("stats.json");
    let input: String = ["primary", "secondary", "plain"]
        .iter()
        .flat_map(|kind| (1..=2).map(move |i| format!("http://127.0.0.1:{port}/{kind}/{i}\n")))
        .collect();
    let out = drip(&["-r", "inf", "-j", "2", "-q", "--retries", "3"])
        .args([
            "--backoff",
            "10ms..100ms",
            "--joblog",
            log.to_str().unwrap(),
            "--stats-json",
            stats.to_str().unwrap(),
        ])
        .args(common::curl_exec("{}"))
        .write_stdin(input)
        .output()
        .unwrap();
    // The plain 403s failed: 123.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(123), "{stderr}");
    let entries = joblog(&log);
    let of = |kind: &str, i: u32| -> Vec<(u64, String, f64, f64)> {
        let record = format!("http://127.0.0.1:{port}/{kind}/{i}");
        entries
            .iter()
            .filter(|e| e["record"] == record.as_str())
            .map(|e| {
                let start = e["start_us"].as_u64().unwrap() as f64 / 1e6;
                let end = start + e["duration_us"].as_u64().unwrap() as f64 / 1e6;
                let outcome = e["outcome"].as_str().unwrap().to_string();
                (e["http_status"].as_u64().unwrap(), outcome, start, end)
            })
            .collect()
    };
    for i in 1..=2 {
        for kind in ["primary", "secondary"] {
            let tries = of(kind, i);
            let statuses: Vec<(u64, &str)> = tries.iter().map(|t| (t.0, t.1.as_str())).collect();
            assert_eq!(
                statuses,
                [(403, "overload"), (200, "succeeded")],
                "{kind}/{i}"
            );
        }
        // The reset held the retry: it came two seconds on from the
        // second the request was made in.
        let tries = of("primary", i);
        let reset = tries[0].2.floor() + 2.0;
        assert!(
            tries[1].2 >= reset - 0.05,
            "retried {:.3} s before the reset",
            reset - tries[1].2
        );
        // Retry-After: 1 held the retry a second.
        let tries = of("secondary", i);
        assert!(
            tries[1].2 - tries[0].3 >= 0.95,
            "retried {:.3} s after Retry-After: 1",
            tries[1].2 - tries[0].3
        );
        let tries = of("plain", i);
        let statuses: Vec<(u64, &str)> = tries.iter().map(|t| (t.0, t.1.as_str())).collect();
        assert_eq!(statuses, [(403, "failed")], "plain/{i}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 10, "{seen:?}");
    let stats = common::last_json(&stats);
    let count = |k: &str| stats[k].as_u64();
    assert_eq!(
        [
            count("overload_responses"),
            count("succeeded"),
            count("failed")
        ],
        [Some(4), Some(4), Some(2)]
    );
    common::assert_books_add_up(&stats);
}
