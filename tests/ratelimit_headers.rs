//! Pacing from the quota a server announces in its headers: a loopback
//! server with a fixed window of N requests per W seconds answers each
//! request with what remains and when the window resets, and 429 (with
//! `Retry-After`) past the quota. drip, given a rate far above the quota,
//! gets no 429 and takes about the time the quota allows.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{command, curl_exec, curl_present, http_server, temp_file, Answer};

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
    assert!(curl_present(), "curl is required (apt-get install curl)");
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
    let (refused, took, _) = against_window(8, 2, 16, Style::XUnix, &["--no-quota-pacing"]);
    assert!(refused > 0, "no refusal in {took:.2} s");
}

#[test]
fn an_unlimited_rate_is_paced_by_the_quota_too() {
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
/// run with `cargo test --test ratelimit_headers -- --ignored`.
#[test]
#[ignore]
fn thirty_per_ten_seconds_over_120_records() {
    let (refused, took, _) = against_window(30, 10, 120, Style::XDelta, &[]);
    eprintln!("120 records, 30 per 10 s: {refused} refusals, {took:.2} s");
    assert_eq!(refused, 0);
    assert!((36.0..=44.0).contains(&took), "{took:.2} s");
}

/// Each request's key, when it came (seconds since the start) and its
/// status.
type Requests = Arc<Mutex<Vec<(char, f64, u16)>>>;

/// A server on 127.0.0.1 with a fixed window per key (the first path
/// segment): `quotas[k]` requests per `window` seconds for key `k`
/// (`/a/…`, `/b/…`), announced as `X-RateLimit-*`. Returns the port and
/// each request's (key, seconds since start, status).
fn keyed_window_server(quotas: [u32; 2], window: u64) -> (u16, Requests) {
    let seen: Requests = Arc::default();
    let log = Arc::clone(&seen);
    let start = Instant::now();
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
    (port, seen)
}

#[test]
fn with_key_each_keys_quota_paces_that_key_only() {
    // Key a allows 3 per 2 s, key b 30: a's 6 requests take two windows,
    // b's 6 go at the rate, and neither gets a 429.
    assert!(curl_present(), "curl is required (apt-get install curl)");
    let (port, seen) = keyed_window_server([3, 30], 2);
    let urls: String = (0..6)
        .flat_map(|i| {
            [
                format!("http://127.0.0.1:{port}/a/{i}\n"),
                format!("http://127.0.0.1:{port}/b/{i}\n"),
            ]
        })
        .collect();
    let input = temp_file(urls.as_bytes());
    let out = command(
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
            ][..],
            &curl_exec("{}"),
        ]
        .concat(),
    )
    .stdin(Stdio::from(input.reopen().unwrap()))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = seen.lock().unwrap();
    assert!(seen.iter().all(|s| s.2 == 200), "{seen:?}");
    let last = |key: char| {
        seen.iter()
            .filter(|s| s.0 == key)
            .map(|s| s.1)
            .fold(0.0, f64::max)
    };
    assert!(last('b') < 1.0, "b waited for a's quota: {seen:?}");
    assert!(
        last('a') >= 2.0,
        "a's 6 went inside one window of 3: {seen:?}"
    );
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

/// A server on 127.0.0.1 allowing `quota` tokens in each fixed window of
/// `window` seconds from its start, a request costing the number after
/// `/c` in its path (`/c200/7`); past the quota it answers 429 with
/// `Retry-After`. It announces its requests (plenty) and what remains of
/// its tokens as `provider` does. Returns the port and what it answered.
fn token_server(quota: u64, window: u64, provider: Provider) -> (u16, Arc<Mutex<Seen>>) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = Arc::clone(&seen);
    let start = Instant::now();
    let used = Mutex::new((0u64, 0u64));
    let port = http_server(move |_, path| {
        let cost: u64 = path
            .strip_prefix("/c")
            .and_then(|p| p.split('/').next())
            .and_then(|c| c.parse().ok())
            .unwrap_or(1);
        let now = start.elapsed();
        let this = now.as_secs() / window;
        let (status, remaining) = {
            let mut used = used.lock().unwrap();
            if used.0 != this {
                *used = (this, 0);
            }
            if used.1 + cost <= quota {
                used.1 += cost;
                (200, quota - used.1)
            } else {
                (429, quota - used.1)
            }
        };
        let left = Duration::from_secs((this + 1) * window) - now;
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
            headers += &format!("Retry-After: {}\r\n", left.as_secs_f64().ceil() as u64);
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
    assert!(curl_present(), "curl is required (apt-get install curl)");
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
    let (_, refused, took, _) =
        against_tokens((1000, 2, Provider::OpenAi), 15, 200, &["--no-quota-pacing"]);
    assert!(refused > 0, "no refusal in {took:.2} s");
}

#[test]
fn a_malformed_token_reset_is_ignored_and_said_once() {
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
