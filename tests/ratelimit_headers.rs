//! Pacing from the quota a server announces in its headers: a loopback
//! server with a fixed window of N requests per W seconds answers each
//! request with what remains and when the window resets, and 429 (with
//! `Retry-After`) past the quota. drip, given a rate far above the quota,
//! gets no 429 and takes about the time the quota allows. The jobs are
//! curl's: without it those tests say so and pass, except under
//! `DRIP_REQUIRE_TOOLS=1` (`common::have`; CI installs it).

use crate::common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{command, curl_exec, http_server, temp_file, Answer};

/// The responses the server gave, by status.
#[derive(Debug, Default)]
struct Seen {
    ok: u32,
    refused: u32,
}

/// How the server announces its quota.
#[derive(Debug, Clone, Copy)]
enum Style {
    /// `X-RateLimit-Remaining` and `X-RateLimit-Reset` as delta seconds.
    XDelta,
    /// `X-RateLimit-Reset` as a Unix time (GitHub's way).
    XUnix,
    /// The IETF draft's `RateLimit` and `RateLimit-Policy`.
    Ietf,
    /// `X-RateLimit-Remaining: lots`: not a number.
    Malformed,
}

/// A server on 127.0.0.1 allowing `quota` requests in each fixed window of
/// `window` seconds from its start.
fn window_server(quota: u32, window: u64, style: Style) -> (u16, Arc<Mutex<Seen>>) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = Arc::clone(&seen);
    let start = Instant::now();
    let used = Mutex::new((0u64, 0u32));
    let port = http_server(move |_, _| {
        let now = start.elapsed();
        let this = now.as_secs() / window;
        let (status, remaining) = {
            let mut used = used.lock().unwrap();
            if used.0 != this {
                *used = (this, 0);
            }
            if used.1 < quota {
                used.1 += 1;
                (200, quota - used.1)
            } else {
                (429, 0)
            }
        };
        let end = Duration::from_secs((this + 1) * window);
        let reset = (end - now).as_secs_f64().ceil() as u64;
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            + (end - now);
        let mut headers = match style {
            Style::XDelta => format!(
                "X-RateLimit-Limit: {quota}\r\nX-RateLimit-Remaining: {remaining}\r\nX-RateLimit-Reset: {reset}\r\n"
            ),
            Style::XUnix => format!(
                "X-RateLimit-Limit: {quota}\r\nX-RateLimit-Remaining: {remaining}\r\nX-RateLimit-Reset: {}\r\n",
                unix.as_secs_f64().ceil() as u64
            ),
            Style::Malformed => format!(
                "X-RateLimit-Remaining: lots\r\nX-RateLimit-Reset: {reset}\r\n"
            ),
            Style::Ietf => format!(
                "RateLimit-Policy: \"w\";q={quota};w={window}\r\nRateLimit: \"w\";r={remaining};t={reset}\r\n"
            ),
        };
        if status == 429 {
            headers += &format!("Retry-After: {reset}\r\n");
        }
        {
            let mut log = log.lock().unwrap();
            if status == 200 {
                log.ok += 1;
            } else {
                log.refused += 1;
            }
        }
        Answer {
            headers,
            ..Answer::status(status)
        }
    });
    (port, seen)
}

/// `drip -r 100/s -j 4` (and `extra`) over `records` requests to a server
/// allowing `quota` per `window` seconds: (429s, seconds taken, stderr).
fn against_window(
    quota: u32,
    window: u64,
    records: usize,
    style: Style,
    extra: &[&str],
) -> (u32, f64, String) {
    let (port, seen) = window_server(quota, window, style);
    let urls: String = (0..records)
        .map(|i| format!("http://127.0.0.1:{port}/r{i}\n"))
        .collect();
    let input = temp_file(urls.as_bytes());
    let start = Instant::now();
    // Not -q: stderr (a pipe, so no display) says what drip noticed.
    let mut args = vec!["-r", "100/s", "-j", "4", "--retries", "5"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&curl_exec("{}"));
    let out = command(&args)
        .stdin(Stdio::from(input.reopen().unwrap()))
        .output()
        .unwrap();
    let took = start.elapsed().as_secs_f64();
    let refused = seen.lock().unwrap().refused;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        refused,
        took,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_announced_quota_is_spread_to_its_reset_without_a_429() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // 8 per 2 s window, 24 requests: 6 s as the quota allows (the reset
    // in whole seconds, rounded up, makes drip a little slower).
    for style in [Style::XDelta, Style::Ietf] {
        let (refused, took, _) = against_window(8, 2, 24, style, &[]);
        assert_eq!(refused, 0, "{style:?}: {refused} refusals in {took:.2} s");
        assert!(
            (4.5..8.5).contains(&took),
            "{style:?}: {took:.2} s for what the quota allows in 6"
        );
    }
}

#[test]
fn a_malformed_quota_is_ignored_and_said_once() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let (_, _, err) = against_window(100, 10, 6, Style::Malformed, &[]);
    let said = "drip: x-ratelimit-remaining: lots: not a quota drip can read";
    assert_eq!(err.matches(said).count(), 1, "{err}");
}

#[test]
fn under_quiet_a_malformed_quota_is_ignored_without_a_word() {
    let input = temp_file(b"1\n2\n3\n");
    let script = "printf 'HTTP/1.1 200 OK\\r\\nX-RateLimit-Remaining: lots\\r\\nX-RateLimit-Reset: 2\\r\\n\\r\\n' > \"$1\"";
    let said = "drip: x-ratelimit-remaining: lots: not a quota drip can read";
    for (quiet, times) in [(false, 1), (true, 0)] {
        let mut args = vec!["-r", "inf", "-j", "1"];
        if quiet {
            args.push("-q");
        }
        args.extend(["--exec", "sh", "-c", script, "sh", "{headers}"]);
        let out = command(&args)
            .stdin(Stdio::from(input.reopen().unwrap()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(stderr.matches(said).count(), times, "-q {quiet}: {stderr}");
        if quiet {
            assert_eq!(stderr, "");
        }
    }
}

#[test]
fn without_quota_pacing_the_rate_runs_into_the_quota() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let (refused, took, _) = against_window(8, 2, 16, Style::XUnix, &["--no-quota-pacing"]);
    assert!(refused > 0, "no refusal in {took:.2} s");
}

#[test]
fn an_unlimited_rate_is_paced_by_the_quota_too() {
    let _t = common::beside_timing();
    // Every response says 2 remain for 2 s: the 4 starts spread over
    // more than a second, not all at once because the rate is `inf`.
    let input = temp_file(b"1\n2\n3\n4\n");
    let script = "printf 'HTTP/1.1 200 OK\\r\\nX-RateLimit-Remaining: 2\\r\\nX-RateLimit-Reset: 2\\r\\n\\r\\n' > \"$1\"; date +%s.%N";
    let out = command(&[
        "-q",
        "-r",
        "inf",
        "-j",
        "1",
        "--exec",
        "sh",
        "-c",
        script,
        "sh",
        "{headers}",
    ])
    .stdin(Stdio::from(input.reopen().unwrap()))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let starts: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(starts.len(), 4, "{starts:?}");
    let span = starts[3] - starts[0];
    assert!(span > 1.0, "4 starts within {span:.3} s: {starts:?}");
}

/// The issue's target: 30 requests per 10 s window, `-r 100/s -j 4` over
/// 120 records: no 429 and within 10% of the 40 s the quota allows. Long:
/// run with `cargo test --test suite ratelimit_headers:: -- --ignored`.
#[test]
#[ignore]
fn thirty_per_ten_seconds_over_120_records() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let (refused, took, _) = against_window(30, 10, 120, Style::XDelta, &[]);
    eprintln!("120 records, 30 per 10 s: {refused} refusals, {took:.2} s");
    assert_eq!(refused, 0);
    assert!((36.0..=44.0).contains(&took), "{took:.2} s");
}

/// Each request's key, when it came (seconds since the start) and its
/// status.
type Requests = Arc<Mutex<Vec<(char, f64, u16)>>>;

/// When a server started: the origin of the times it gives its requests,
/// as an instant and as Unix time (s), to set beside a joblog's.
struct Origin {
    at: Instant,
    unix: f64,
}

/// A server on 127.0.0.1 with a fixed window per key (the first path
/// segment): `quotas[k]` requests per `window` seconds for key `k`
/// (`/a/…`, `/b/…`), announced as `X-RateLimit-*`. Returns the port, each
/// request's (key, seconds since start, status), and when it started.
fn keyed_window_server(quotas: [u32; 2], window: u64) -> (u16, Requests, Origin) {
    let seen: Requests = Arc::default();
    let log = Arc::clone(&seen);
    let start = Instant::now();
    let origin = Origin {
        at: start,
        unix: common::unix_now(),
    };
    let used = Mutex::new([(0u64, 0u32); 2]);
    let port = http_server(move |_, path| {
        let key = path.chars().nth(1).unwrap_or('a');
        let k = usize::from(key == 'b');
        let now = start.elapsed();
        let this = now.as_secs() / window;
        let (status, remaining) = {
            let mut used = used.lock().unwrap();
            if used[k].0 != this {
                used[k] = (this, 0);
            }
            if used[k].1 < quotas[k] {
                used[k].1 += 1;
                (200, quotas[k] - used[k].1)
            } else {
                (429, 0)
            }
        };
        let end = Duration::from_secs((this + 1) * window);
        let reset = (end - now).as_secs_f64().ceil() as u64;
        log.lock().unwrap().push((key, now.as_secs_f64(), status));
        let mut headers = format!(
            "X-RateLimit-Limit: {}\r\nX-RateLimit-Remaining: {remaining}\r\nX-RateLimit-Reset: {reset}\r\n",
            quotas[k]
        );
        if status == 429 {
            headers += &format!("Retry-After: {reset}\r\n");
        }
        Answer {
            headers,
            ..Answer::status(status)
        }
    });
    (port, seen, origin)
}

/// How long drip's threads may have waited for a CPU (s, all told, in
/// the first second, within which b's requests must come) before a run
/// whose b came late is not judged. b's last request comes 0.35 s after
/// the start (b's quota spread over its reset, a start every 67 ms): 0.65
/// s to spare, more than drip's threads held up under this long and jobs
/// each under [`JOB_SLOW`] can take from it.
const HELD_UP: f64 = 0.15;

/// How long (s) a job started in that second may have taken (curl, from
/// the moment drip spawns it to its exit, the server answering at once;
/// 10 to 20 ms on a quiet machine) before a run whose b came late is not
/// judged: a curl that slow was held up by the machine, the request
/// reaching the server late and the job holding one of the 4 slots.
const JOB_SLOW: f64 = 0.15;

#[test]
fn with_key_each_keys_quota_paces_that_key_only() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // Key a allows 3 per 2 s, key b 30: a's 6 requests take two windows,
    // b's 6 go at the rate, and neither gets a 429. That b's last request
    // comes within the second is the clock's to say: a busy machine can
    // start drip's jobs late, or make its curls slow to reach the server
    // (each holding one of the 4 slots as long). A run that breaks it is
    // judged where drip's threads waited for a CPU under [`HELD_UP`] and
    // no job took [`JOB_SLOW`]; otherwise it is made again
    // ([`common::until_judged`]).
    common::until_judged(5, Duration::from_secs(60), keyed_quota_run);
}

/// One run of [`with_key_each_keys_quota_paces_that_key_only`]: `None`
/// when judged, or why it could not be.
fn keyed_quota_run() -> Option<String> {
    let (port, seen, origin) = keyed_window_server([3, 30], 2);
    let urls: String = (0..6)
        .flat_map(|i| {
            [
                format!("http://127.0.0.1:{port}/a/{i}\n"),
                format!("http://127.0.0.1:{port}/b/{i}\n"),
            ]
        })
        .collect();
    let input = temp_file(urls.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joblog");
    let mut cmd = command(
        &[
            &[
                "-q",
                "-r",
                "50/s",
                "-j",
                "4",
                "--retries",
                "5",
                "--key",
                "/([ab])/",
                "--key-rate",
                "50/s",
                "--joblog",
                log.to_str().unwrap(),
            ][..],
            &curl_exec("{}"),
        ]
        .concat(),
    );
    cmd.stdin(Stdio::from(input.reopen().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let waits = common::watch_cpu_waits(child.id(), origin.at);
    let (status, _, stderr) = common::output_of(child);
    assert_eq!(status, 0, "{stderr}");
    let samples = waits.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().all(|s| s.2 == 200), "{seen:?}");
    let last = |key: char| {
        seen.iter()
            .filter(|s| s.0 == key)
            .map(|s| s.1)
            .fold(0.0, f64::max)
    };
    // Every request answered 200: a's 6 came in two windows, however busy
    // the machine.
    assert!(
        last('a') >= 2.0,
        "a's 6 went inside one window of 3: {seen:?}"
    );
    // b's last request within the second (it comes at 0.35 s on a quiet
    // machine). Where it came later, what held the run up in that second
    // says whether the machine did: drip's threads' waits for a CPU, and
    // the slowest job started in it (its start against the server's, and
    // how long it ran).
    if last('b') < 1.0 {
        return None;
    }
    let drip: f64 = common::threads_cpu_wait_between(&samples, 0.0, 1.0);
    let slowest = common::json_lines(&log)
        .iter()
        .filter(|e| e["start_us"].as_u64().unwrap() as f64 / 1e6 - origin.unix < 1.0)
        .map(|e| e["duration_us"].as_u64().unwrap() as f64 / 1e6)
        .fold(0.0, f64::max);
    let what = format!("b waited for a's quota: {seen:?}");
    let account = format!(
        "in the first second drip's threads waited {drip:.3} s for a CPU, and the slowest \
         job started in it took {slowest:.3} s"
    );
    assert!(
        drip >= HELD_UP || slowest >= JOB_SLOW,
        "{what}\n(not the machine's doing: {account})"
    );
    Some(format!("{what}; {account}"))
}

/// How a token server announces its tokens.
#[derive(Debug, Clone, Copy)]
enum Provider {
    /// OpenAI's `x-ratelimit-*-tokens`, the reset a Go duration.
    OpenAi,
    /// Anthropic's `anthropic-ratelimit-tokens-*` (and the input and
    /// output families, which pace no budget without named costs), the
    /// reset an RFC 3339 time.
    Anthropic,
}

/// A reset as Go writes a duration: seconds with up to 9 decimals (Go
/// leaves out trailing zeros, as here).
fn go_duration(d: Duration) -> String {
    let s = format!("{:.9}", d.as_secs_f64());
    format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
}

/// A server on 127.0.0.1 metering tokens as OpenAI and Anthropic do: a
/// bucket holding `quota` tokens when full (as at the start) that gets
/// them back in `window` seconds, a request costing the number after `/c`
/// in its path (`/c200/7`); past what it holds it answers 429 with
/// `Retry-After`. It announces its requests (plenty) and what remains of
/// its tokens, and when it is full again, as `provider` does. Returns the
/// port and what it answered.
fn token_server(quota: u64, window: u64, provider: Provider) -> (u16, Arc<Mutex<Seen>>) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = Arc::clone(&seen);
    let start = Instant::now();
    // What the bucket holds spent, and when it last refilled (seconds).
    let used = Mutex::new((0.0f64, 0.0f64));
    let per_second = quota as f64 / window as f64;
    let port = http_server(move |_, path| {
        let cost: u64 = path
            .strip_prefix("/c")
            .and_then(|p| p.split('/').next())
            .and_then(|c| c.parse().ok())
            .unwrap_or(1);
        let now = start.elapsed().as_secs_f64();
        let (status, remaining, left, wait) = {
            let mut used = used.lock().unwrap();
            *used = ((used.0 - (now - used.1) * per_second).max(0.0), now);
            let fits = used.0 + cost as f64 <= quota as f64;
            let wait = (used.0 + cost as f64 - quota as f64) / per_second;
            if fits {
                used.0 += cost as f64;
            }
            let remaining = (quota as f64 - used.0).floor() as u64;
            let left = Duration::from_secs_f64(used.0 / per_second);
            (if fits { 200 } else { 429 }, remaining, left, wait)
        };
        let mut headers = match provider {
            Provider::OpenAi => format!(
                "x-ratelimit-limit-requests: 10000\r\nx-ratelimit-remaining-requests: 9999\r\nx-ratelimit-reset-requests: 6ms\r\n\
                 x-ratelimit-limit-tokens: {quota}\r\nx-ratelimit-remaining-tokens: {remaining}\r\nx-ratelimit-reset-tokens: {}\r\n",
                go_duration(left)
            ),
            Provider::Anthropic => {
                let at = jiff::Timestamp::try_from(std::time::SystemTime::now() + left).unwrap();
                let later = jiff::Timestamp::try_from(std::time::SystemTime::now() + Duration::from_secs(60)).unwrap();
                format!(
                    "anthropic-ratelimit-requests-limit: 10000\r\nanthropic-ratelimit-requests-remaining: 9999\r\nanthropic-ratelimit-requests-reset: {later}\r\n\
                     anthropic-ratelimit-tokens-limit: {quota}\r\nanthropic-ratelimit-tokens-remaining: {remaining}\r\nanthropic-ratelimit-tokens-reset: {at}\r\n\
                     anthropic-ratelimit-input-tokens-remaining: 0\r\nanthropic-ratelimit-input-tokens-reset: {later}\r\n\
                     anthropic-ratelimit-output-tokens-remaining: 0\r\nanthropic-ratelimit-output-tokens-reset: {later}\r\n"
                )
            }
        };
        if status == 429 {
            headers += &format!("Retry-After: {}\r\n", wait.ceil() as u64);
        }
        {
            let mut log = log.lock().unwrap();
            if status == 200 {
                log.ok += 1;
            } else {
                log.refused += 1;
            }
        }
        Answer {
            headers,
            ..Answer::status(status)
        }
    });
    (port, seen)
}

/// `drip -r 100/s -j 4 --cost … --cost-rate 1000000/s` (and `extra`) over
/// `records` requests costing `cost` each to a [`token_server`]: (200s,
/// 429s, seconds taken, stderr).
fn against_tokens(
    (quota, window, provider): (u64, u64, Provider),
    records: usize,
    cost: u64,
    extra: &[&str],
) -> (u32, u32, f64, String) {
    let (port, seen) = token_server(quota, window, provider);
    let urls: String = (0..records)
        .map(|i| format!("http://127.0.0.1:{port}/c{cost}/{i}\n"))
        .collect();
    let input = temp_file(urls.as_bytes());
    let start = Instant::now();
    let mut args = vec![
        "-r",
        "100/s",
        "-j",
        "4",
        "--retries",
        "5",
        "--cost",
        "/c([0-9]+)/",
        "--cost-rate",
        "1000000/s:1000000",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&curl_exec("{}"));
    let out = command(&args)
        .stdin(Stdio::from(input.reopen().unwrap()))
        .output()
        .unwrap();
    let took = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let seen = seen.lock().unwrap();
    (seen.ok, seen.refused, took, stderr)
}

#[test]
fn announced_tokens_pace_the_cost_and_a_record_past_them_waits_for_the_reset() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // 1000 tokens per 2 s window, 15 requests of 200: 5 a window, so the
    // last goes in the third window, 4 s from the start; drip pauses for
    // each reset, then goes, and no request is refused. The cost rate is
    // far above the quota: only the headers hold drip back.
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let (ok, refused, took, err) = against_tokens((1000, 2, provider), 15, 200, &[]);
        assert_eq!(
            refused, 0,
            "{provider:?}: {refused} refusals in {took:.2} s: {err}"
        );
        assert_eq!(ok, 15, "{provider:?}: {err}");
        assert!(
            (3.9..12.0).contains(&took),
            "{provider:?}: {took:.2} s for what the quota allows from 4 s on"
        );
        assert!(!err.contains("not a quota"), "{provider:?}: {err}");
    }
}

#[test]
fn without_quota_pacing_the_cost_runs_into_the_token_quota() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let (_, refused, took, _) =
        against_tokens((1000, 2, Provider::OpenAi), 15, 200, &["--no-quota-pacing"]);
    assert!(refused > 0, "no refusal in {took:.2} s");
}

#[test]
fn a_malformed_token_reset_is_ignored_and_said_once() {
    let _t = common::beside_timing();
    let input = temp_file(b"1\n2\n3\n");
    let script = "printf 'HTTP/1.1 200 OK\\r\\nx-ratelimit-remaining-tokens: 0\\r\\nx-ratelimit-reset-tokens: 1x\\r\\n\\r\\n' > \"$1\"";
    let out = command(&[
        "-r",
        "inf",
        "-j",
        "1",
        "--cost",
        "1",
        "--cost-rate",
        "1000/s",
        "--exec",
        "sh",
        "-c",
        script,
        "sh",
        "{headers}",
    ])
    .stdin(Stdio::from(input.reopen().unwrap()))
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said = "drip: x-ratelimit-reset-tokens: 1x: not a quota drip can read";
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
}

#[test]
fn a_record_waiting_for_the_token_reset_expires_at_its_deadline() {
    let _t = common::beside_timing();
    // The first response says no token is left for 60 s: the records
    // after it wait for that reset, but no longer than their deadline.
    let input = temp_file(b"1\n2\n3\n");
    let script = "printf 'HTTP/1.1 200 OK\\r\\nx-ratelimit-remaining-tokens: 0\\r\\nx-ratelimit-reset-tokens: 1m0s\\r\\n\\r\\n' > \"$1\"; echo ran";
    let start = Instant::now();
    let out = command(&[
        "-q",
        "-r",
        "inf",
        "-j",
        "1",
        "--deadline",
        "2s",
        "--cost",
        "1",
        "--cost-rate",
        "1000/s",
        "--exec",
        "sh",
        "-c",
        script,
        "sh",
        "{headers}",
    ])
    .stdin(Stdio::from(input.reopen().unwrap()))
    .output()
    .unwrap();
    let took = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(123), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n", "{stderr}");
    assert!(took < 30.0, "{took:.2} s: the wait outlived the deadline");
}

/// What a server's meter counts of a request: its input tokens, its
/// output tokens, both together, or the request itself (1 each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counts {
    In,
    Out,
    Requests,
    Both,
}

/// One meter of a [`meter_server`] (of tokens, or of requests), and how
/// its headers announce it.
#[derive(Debug, Clone, Copy)]
struct Meter {
    /// What it counts.
    counts: Counts,
    /// Whose family of fields announces it (OpenAI has one for both only).
    provider: Provider,
    /// Tokens allowed in each fixed window of `window` seconds from the
    /// server's start, or by a bucket that holds that many when full and
    /// gets them back in `window` seconds (`refills`), as OpenAI and
    /// Anthropic meter; held to (429 past them); `None`: announced as none
    /// left until `window` seconds from the server's start (and not at
    /// all after), and not held to: only a drip that read it would wait.
    quota: Option<u64>,
    window: u64,
    /// A bucket (its fields with the limit, as the providers send them),
    /// or a fixed window (announced without the limit field, which drip
    /// then reads as a window).
    refills: bool,
    /// Of a bucket, the tokens it lacks at the server's start.
    spent: u64,
}

impl Meter {
    /// A meter of `counts` allowing `quota` tokens per `window` seconds,
    /// a bucket full at the start.
    fn new(provider: Provider, counts: Counts, quota: u64, window: u64) -> Meter {
        Meter {
            counts,
            provider,
            quota: Some(quota),
            window,
            refills: true,
            spent: 0,
        }
    }

    /// The same as a fixed window, announced without its limit.
    fn window(provider: Provider, counts: Counts, quota: u64, window: u64) -> Meter {
        Meter {
            refills: false,
            ..Meter::new(provider, counts, quota, window)
        }
    }

    /// A meter of `counts` announcing that nothing is left until a minute
    /// from the server's start, and holding to nothing.
    fn spent(provider: Provider, counts: Counts) -> Meter {
        Meter {
            counts,
            provider,
            quota: None,
            window: 60,
            refills: false,
            spent: 0,
        }
    }

    /// What a request of `input` and `output` tokens spends of it.
    fn cost(&self, (input, output): (u64, u64)) -> u64 {
        match self.counts {
            Counts::In => input,
            Counts::Out => output,
            Counts::Both => input + output,
            Counts::Requests => 1,
        }
    }

    /// Its fields: limit (of a bucket), remaining and reset (`left` from
    /// now).
    fn fields(&self, limit: u64, remaining: u64, left: Duration) -> String {
        let text = match (self.provider, self.counts) {
            (Provider::OpenAi, Counts::Both) => format!(
                "x-ratelimit-limit-tokens: {limit}\r\nx-ratelimit-remaining-tokens: {remaining}\r\nx-ratelimit-reset-tokens: {}\r\n",
                go_duration(left)
            ),
            (Provider::OpenAi, Counts::Requests) => format!(
                "x-ratelimit-limit-requests: {limit}\r\nx-ratelimit-remaining-requests: {remaining}\r\nx-ratelimit-reset-requests: {}\r\n",
                go_duration(left)
            ),
            (Provider::OpenAi, counts) => panic!("OpenAI announces no {counts:?} tokens apart"),
            (Provider::Anthropic, counts) => {
                let family = match counts {
                    Counts::In => "input-tokens",
                    Counts::Out => "output-tokens",
                    Counts::Both => "tokens",
                    Counts::Requests => "requests",
                };
                let at = jiff::Timestamp::try_from(std::time::SystemTime::now() + left).unwrap();
                format!(
                    "anthropic-ratelimit-{family}-limit: {limit}\r\nanthropic-ratelimit-{family}-remaining: {remaining}\r\nanthropic-ratelimit-{family}-reset: {at}\r\n"
                )
            }
        };
        if self.refills {
            return text;
        }
        text.lines()
            .filter(|l| !l.contains("-limit-") && !l.contains("-limit:"))
            .map(|l| format!("{l}\n"))
            .collect()
    }
}

/// Each request's status and when it came (seconds since the server's
/// start).
type Answered = Arc<Mutex<Vec<(f64, u16)>>>;

/// A server on 127.0.0.1 metering tokens (and perhaps requests) as
/// `meters` say, a request spending the input and output tokens its path
/// gives (`/i50/o200/7`); a request past a meter's quota is answered 429
/// with `Retry-After`. Every answer announces each meter as its provider
/// does, and the requests (plenty) unless a meter counts them. Returns
/// the port and what it answered.
fn meter_server(meters: Vec<Meter>) -> (u16, Answered) {
    let seen: Answered = Arc::default();
    let log = Arc::clone(&seen);
    let start = Instant::now();
    // Each meter's window (its number), or its bucket's last refill
    // (seconds from the start), and what it holds spent.
    let used = Mutex::new(
        meters
            .iter()
            .map(|m| (0u64, m.spent as f64, 0.0f64))
            .collect::<Vec<_>>(),
    );
    let port = http_server(move |_, path| {
        let number = |prefix: char| -> u64 {
            path.split('/')
                .find_map(|p| p.strip_prefix(prefix)?.parse().ok())
                .unwrap_or(0)
        };
        let tokens = (number('i'), number('o'));
        let now = start.elapsed();
        let mut used = used.lock().unwrap();
        for (m, u) in meters.iter().zip(used.iter_mut()) {
            let this = now.as_secs() / m.window;
            match m.quota {
                Some(q) if m.refills => {
                    let back = (now.as_secs_f64() - u.2) * q as f64 / m.window as f64;
                    *u = (this, (u.1 - back).max(0.0), now.as_secs_f64());
                }
                _ if u.0 != this => *u = (this, 0.0, 0.0),
                _ => {}
            }
        }
        let fits = |m: &Meter, u: &(u64, f64, f64)| {
            m.quota
                .map_or(true, |q| u.1 + m.cost(tokens) as f64 <= q as f64)
        };
        let admitted = meters.iter().zip(used.iter()).all(|(m, u)| fits(m, u));
        let mut headers = match meters[0].provider {
            _ if meters.iter().any(|m| m.counts == Counts::Requests) => String::new(),
            Provider::OpenAi => "x-ratelimit-limit-requests: 10000\r\nx-ratelimit-remaining-requests: 9999\r\nx-ratelimit-reset-requests: 6ms\r\n".to_string(),
            Provider::Anthropic => format!(
                "anthropic-ratelimit-requests-limit: 10000\r\nanthropic-ratelimit-requests-remaining: 9999\r\nanthropic-ratelimit-requests-reset: {}\r\n",
                jiff::Timestamp::try_from(std::time::SystemTime::now() + Duration::from_secs(60)).unwrap()
            ),
        };
        let mut wait = 0;
        for (m, u) in meters.iter().zip(used.iter_mut()) {
            let mut left = Duration::from_secs((u.0 + 1) * m.window) - now;
            let Some(quota) = m.quota else {
                if u.0 == 0 {
                    headers += &m.fields(1_000_000, 0, left);
                }
                continue;
            };
            let cost = m.cost(tokens) as f64;
            let per_second = quota as f64 / m.window as f64;
            if !admitted && u.1 + cost > quota as f64 {
                let until = match m.refills {
                    true => (u.1 + cost - quota as f64) / per_second,
                    false => left.as_secs_f64(),
                };
                wait = wait.max(until.ceil() as u64);
            }
            if admitted {
                u.1 += cost;
            }
            if m.refills {
                // When the bucket is full again.
                left = Duration::from_secs_f64(u.1 / per_second);
            }
            headers += &m.fields(quota, (quota as f64 - u.1).floor() as u64, left);
        }
        drop(used);
        let status = if admitted { 200 } else { 429 };
        if !admitted {
            headers += &format!("Retry-After: {wait}\r\n");
        }
        log.lock().unwrap().push((now.as_secs_f64(), status));
        Answer {
            headers,
            ..Answer::status(status)
        }
    });
    (port, seen)
}

/// What a run against a [`meter_server`] came to.
#[derive(Debug)]
struct Metered {
    /// Every request's arrival (seconds from the server's start, whose
    /// windows count from there) and its status, in the order answered.
    seen: Vec<(f64, u16)>,
    /// Seconds from drip's start to its end.
    took: f64,
    stderr: String,
}

impl Metered {
    /// Requests answered 200.
    fn ok(&self) -> usize {
        self.seen.iter().filter(|s| s.1 == 200).count()
    }

    /// Requests answered 429.
    fn refused(&self) -> usize {
        self.seen.len() - self.ok()
    }

    /// When the last request answered 200 came (seconds from the
    /// server's start).
    fn last(&self) -> f64 {
        self.seen
            .iter()
            .filter(|s| s.1 == 200)
            .map(|s| s.0)
            .fold(0.0, f64::max)
    }
}

/// `drip -r 100/s -j 4 --retries 5` with `costs` (the cost flags) over
/// `records` requests of `tokens` (input, output) each to a
/// [`meter_server`] metering `meters`.
fn against_meters(
    meters: Vec<Meter>,
    records: usize,
    tokens: (u64, u64),
    costs: &[&str],
) -> Metered {
    let (port, seen) = meter_server(meters);
    let urls: String = (0..records)
        .map(|n| format!("http://127.0.0.1:{port}/i{}/o{}/{n}\n", tokens.0, tokens.1))
        .collect();
    let input = temp_file(urls.as_bytes());
    let mut args = vec!["-r", "100/s", "-j", "4", "--retries", "5"];
    args.extend_from_slice(costs);
    args.extend_from_slice(&curl_exec("{}"));
    let start = Instant::now();
    let out = command(&args)
        .stdin(Stdio::from(input.reopen().unwrap()))
        .output()
        .unwrap();
    let took = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    Metered { seen, took, stderr }
}

/// The named costs `in` and `out`, read from the request's path, and
/// their limits (`budgets`: `in`, `out`, `in+out`…), each far above the
/// servers' quotas so that only the headers hold drip back.
fn named_costs(budgets: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["--cost", "in=/i([0-9]+)/", "--cost", "out=/o([0-9]+)/"]
        .map(String::from)
        .into();
    for b in budgets {
        args.extend(["--cost-rate".into(), format!("{b}=1000000/s:1000000")]);
    }
    args
}

#[test]
fn anthropics_input_and_output_tokens_pace_the_in_and_out_budgets() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // 15 requests of 200 tokens of one kind and 1 of the other; the
    // server allows 1000 of the first kind per 2 s window (5 requests)
    // and 100,000 of the other. Its input and output families pace the
    // budgets named in and out: no 429, the last request in the third
    // window, 4 s from the start; the loose family holds nothing back.
    // Were the tight family to pace the other budget (a token a request),
    // or none, drip would start requests on what the responses said was
    // left, less 1 a request in flight, not 200: past the quota.
    use Counts::{In, Out};
    for (tight, loose, tokens) in [(Out, In, (1, 200)), (In, Out, (200, 1))] {
        let meters = vec![
            Meter::new(Provider::Anthropic, tight, 1000, 2),
            Meter::new(Provider::Anthropic, loose, 100_000, 2),
        ];
        let costs = named_costs(&["in", "out"]);
        let costs: Vec<&str> = costs.iter().map(String::as_str).collect();
        let run = against_meters(meters, 15, tokens, &costs);
        assert_eq!(run.refused(), 0, "{tight:?} tight: {run:?}");
        assert_eq!(run.ok(), 15, "{tight:?} tight: {run:?}");
        assert!(run.last() >= 4.0, "{tight:?} tight: {run:?}");
        assert!(
            run.took < 12.0,
            "{tight:?} tight: {:.2} s for what the quota allows from 4 s on: {run:?}",
            run.took
        );
        assert!(!run.stderr.contains("not a quota"), "{run:?}");
    }
}

/// drip's arguments for jobs `sh -c SCRIPT sh RECORD` paced by `pace`,
/// the input tokens of a record (`/i200/` in its URL) its cost, the
/// cost's own limit far above any server's quota.
fn input_tokens_jobs<'a>(pace: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = pace.to_vec();
    args.extend([
        "--cost",
        "in=/i([0-9]+)/",
        "--cost-rate",
        "in=1000000/s:1000000",
        "--exec",
        "sh",
        "-c",
        script,
        "sh",
        "{}",
    ]);
    args
}

#[test]
fn a_response_read_after_later_requests_were_counted_spends_no_more_than_is_left() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // 1000 input tokens per 3 s window, requests of 200. Of the first
    // four, the fourth reaches the server first (800 remaining) and is
    // read last, 1 s on; the other three wait 0.4 s, then reach it (600,
    // 400, 200) and are read at once. Three more records come at 1.3 s,
    // each a request that takes 1 s to reach the server. The fourth's 800
    // is stale by the 600 read since it started: one more fits in the
    // window, and the other two wait for the reset. Read as a new window,
    // its 800 let the three go about 0.4 s apart, and the second, reaching
    // the server at about 2.7 s, was refused. A window, announced without
    // its limit: drip reads it as a window.
    let meters = vec![Meter::window(Provider::Anthropic, Counts::In, 1000, 3)];
    let (port, seen) = meter_server(meters);
    let url = |n: u32| format!("http://127.0.0.1:{port}/i200/o1/{n}");
    let first: String = [(0.4, 0.0), (0.4, 0.0), (0.4, 0.0), (0.0, 1.0)]
        .iter()
        .zip(1..)
        .map(|((before, after), n)| format!("{before} {after} {}\n", url(n)))
        .collect();
    let then: String = (5..8).map(|n| format!("1 0 {}\n", url(n))).collect();
    // Each record: seconds to wait before the request, and after it.
    let script = r#"set -- $1; sleep "$1"; curl -sS -o /dev/null -D "$DRIP_HEADERS" "$3"; e=$?; sleep "$2"; exit $e"#;
    let args = input_tokens_jobs(&["-r", "100/s", "-j", "4", "--retries", "5"], script);
    let mut drip = command(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = drip.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    std::io::Write::write_all(&mut stdin, then.as_bytes()).unwrap();
    drop(stdin);
    let out = drip.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    let refused = seen.iter().filter(|s| s.1 != 200).count();
    assert_eq!(refused, 0, "{seen:?} {stderr}");
    assert_eq!(seen.len(), 7, "{seen:?} {stderr}");
}

#[test]
fn at_a_reset_the_jobs_start_no_more_than_a_window_allows() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // 1000 input tokens per 2 s window, requests of 200, 8 jobs at once,
    // 30 records, no rate but the headers'; each job ends 0.3 s after its
    // answer. In the first window nothing is known yet: 8 start, and the
    // server refuses 3. After, no window is refused anything: at a reset
    // no more start than the window allows (the limit field) until a
    // response of the new window is read, and the requests in flight
    // are counted against it, the records waiting for a job not. Were
    // every job to start at a reset, windows had 3 of 8 refused.
    common::until_judged(4, Duration::from_secs(120), a_reset_run);
}

/// One run of [`at_a_reset_the_jobs_start_no_more_than_a_window_allows`]:
/// `None` when judged (and passed), else why it could not be judged.
fn a_reset_run() -> Option<String> {
    let meters = vec![Meter::new(Provider::Anthropic, Counts::In, 1000, 2)];
    let (port, seen) = meter_server(meters);
    let urls: String = (0..30)
        .map(|n| format!("http://127.0.0.1:{port}/i200/o1/{n}\n"))
        .collect();
    let input = temp_file(urls.as_bytes());
    // Each job ends 0.3 s after its answer: that long, the new window
    // is not told.
    let script = r#"curl -sS -o /dev/null -D "$DRIP_HEADERS" "$1"; e=$?; sleep 0.3; exit $e"#;
    let args = input_tokens_jobs(&["-r", "inf", "-j", "8", "--retries", "20"], script);
    let child = command(&args)
        .stdin(Stdio::from(input.reopen().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cpu_wait = common::watch_cpu_wait(child.id());
    let out = child.wait_with_output().unwrap();
    let waited = cpu_wait.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|s| s.1 == 200).count(), 30, "{seen:?}");
    let late: Vec<_> = seen.iter().filter(|s| s.1 != 200 && s.0 >= 2.0).collect();
    // A response read late, the machine too busy to run drip's threads
    // (and the jobs) in time, is no judge of the pace.
    if !late.is_empty() && waited > 0.5 {
        return Some(format!(
            "refused after the first window: {late:?}; drip's threads waited {waited:.2} s for a CPU"
        ));
    }
    assert!(
        late.is_empty(),
        "refused after the first window: {late:?} of {seen:?}"
    );
    None
}

#[test]
fn the_tokens_family_paces_the_in_plus_out_budget() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // 15 requests of 200 input and output tokens together; the server
    // allows 1000 of them per 2 s window (5 requests), announced as
    // OpenAI's -tokens and as Anthropic's -tokens-. They pace the budget
    // named in+out (or out+in), not in or out: no 429, the last request
    // in the third window. A request's input is 1 token in the first run
    // and its output in the second, so that a family pacing the budget
    // of one kind would start requests on 1 token a request in flight,
    // not 200: past the quota.
    for (provider, both, tokens) in [
        (Provider::OpenAi, "in+out", (1, 199)),
        (Provider::Anthropic, "out+in", (199, 1)),
    ] {
        let meters = vec![Meter::new(provider, Counts::Both, 1000, 2)];
        let costs = named_costs(&["in", "out", both]);
        let costs: Vec<&str> = costs.iter().map(String::as_str).collect();
        let run = against_meters(meters, 15, tokens, &costs);
        assert_eq!(run.refused(), 0, "{provider:?}: {run:?}");
        assert_eq!(run.ok(), 15, "{provider:?}: {run:?}");
        assert!(run.last() >= 4.0, "{provider:?}: {run:?}");
        assert!(
            run.took < 12.0,
            "{provider:?}: {:.2} s for what the quota allows from 4 s on: {run:?}",
            run.took
        );
        assert!(!run.stderr.contains("not a quota"), "{run:?}");
    }
}

#[test]
fn a_token_family_of_a_budget_drip_has_no_cost_for_paces_nothing() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    // Only the input tokens are costed (--cost in=…). The server says
    // that no output tokens, nor tokens of both kinds, are left until a
    // minute from its start: those families name budgets drip has not,
    // and are passed over without a word; no request waits for that
    // minute. In the first run the server also holds the input tokens to
    // 1000 per 2 s window (15 requests of 200: three windows), and its
    // input family paces them; in the others nothing paces.
    use Counts::{Both, In, Out};
    use Provider::{Anthropic, OpenAi};
    for (meters, paced) in [
        (
            vec![
                Meter::new(Anthropic, In, 1000, 2),
                Meter::spent(Anthropic, Out),
                Meter::spent(Anthropic, Both),
            ],
            true,
        ),
        (
            vec![Meter::spent(Anthropic, Out), Meter::spent(Anthropic, Both)],
            false,
        ),
        (vec![Meter::spent(OpenAi, Both)], false),
    ] {
        let costs = [
            "--cost",
            "in=/i([0-9]+)/",
            "--cost-rate",
            "in=1000000/s:1000000",
        ];
        let said = format!("{meters:?}");
        let run = against_meters(meters, 15, (200, 50), &costs);
        assert_eq!(run.refused(), 0, "{said}: {run:?}");
        assert_eq!(run.ok(), 15, "{said}: {run:?}");
        assert!(!paced || run.last() >= 4.0, "{said}: {run:?}");
        assert!(
            run.took < 30.0,
            "{said}: waited for a family that paces nothing: {run:?}"
        );
        assert_eq!(run.stderr, "", "{said}: {run:?}");
    }
}

#[test]
fn a_bucket_read_mid_refill_is_spent_as_it_refills_without_a_429() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::timing();
    // A bucket of 12,000 tokens that gets them back in 30 s (400 a
    // second), 1,000 left at the start, announced as Anthropic's input
    // tokens and as OpenAI's tokens; 20 requests of 200. Read as a bucket,
    // the first five go at once and the others as their tokens come back,
    // one every half second: the last about 7.5 s on, no 429, and nearly
    // all the bucket gave by then spent. Read as a window (what remains
    // spread to the time it is full, 27 s away), the tokens that came back
    // meanwhile went unspent: the last came 22 to 26 s on, 35-40 % of
    // what the bucket gave by then spent, each start held back by a share
    // of the time to the bucket's reset.
    use Counts::{Both, In};
    use Provider::{Anthropic, OpenAi};
    for (provider, counts, tokens, budgets) in [
        (Anthropic, In, (200, 1), &["in", "out"][..]),
        (OpenAi, Both, (199, 1), &["in", "out", "in+out"][..]),
    ] {
        common::until_judged(3, Duration::from_secs(120), || {
            let meters = vec![Meter {
                spent: 11_000,
                ..Meter::new(provider, counts, 12_000, 30)
            }];
            let costs = named_costs(budgets);
            let costs: Vec<&str> = costs.iter().map(String::as_str).collect();
            let run = against_meters(meters, 20, tokens, &costs);
            assert_eq!(run.refused(), 0, "{provider:?}: {run:?}");
            assert_eq!(run.ok(), 20, "{provider:?}: {run:?}");
            // Of what the bucket gave from the start to the last answer,
            // the share spent.
            let share = 4000.0 / (1000.0 + 400.0 * run.last());
            eprintln!(
                "{provider:?}: last at {:.2} s, {:.1} % spent",
                run.last(),
                100.0 * share
            );
            (share < 0.8).then(|| format!("{provider:?}: {:.1} % spent: {run:?}", 100.0 * share))
        });
    }
}

#[test]
fn a_requests_bucket_read_mid_refill_is_spent_as_it_refills_without_a_429() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::timing();
    // A bucket of 40 requests that gets them back in 20 s (2 a second),
    // 4 left at the start, announced as OpenAI's and as Anthropic's
    // requests (their -limit field with them); no cost, no token quota;
    // 20 requests at -r 100/s -j 4. Read as a bucket, the first four go
    // at once and the others as the requests come back, one every half
    // second: the last about 8 s on, no 429, nearly all the bucket gave
    // by then spent. Read as a window (what remains spread to the time
    // it is full, 18 s away), nothing is left after the first four, and
    // the starts pause until the bucket is full: the last came 20 s on,
    // less than half of what the bucket gave by then spent.
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        common::until_judged(3, Duration::from_secs(120), || {
            let meters = vec![Meter {
                spent: 36,
                ..Meter::new(provider, Counts::Requests, 40, 20)
            }];
            let run = against_meters(meters, 20, (1, 1), &[]);
            assert_eq!(run.refused(), 0, "{provider:?}: {run:?}");
            assert_eq!(run.ok(), 20, "{provider:?}: {run:?}");
            assert!(!run.stderr.contains("not a quota"), "{run:?}");
            // Of what the bucket gave from the start to the last answer,
            // the share spent.
            let share = 20.0 / (4.0 + 2.0 * run.last());
            eprintln!(
                "{provider:?}: last at {:.2} s, {:.1} % spent",
                run.last(),
                100.0 * share
            );
            (share < 0.8).then(|| format!("{provider:?}: {:.1} % spent: {run:?}", 100.0 * share))
        });
    }
}
