//! The retry policy, pure: what an attempt's end means (succeeded, a
//! transient failure, overload, a final failure), how long to back off, what
//! a server's `Retry-After` asks for, and the rate adjustment under
//! `--adapt`.
//!
//! Backoff is exponential with full jitter (a random wait between 0 and
//! `min(MAX, MIN·2^n)`), as described in "Exponential Backoff and Jitter"
//! (Marc Brooker, AWS Architecture Blog, 2015). `--adapt` is additive
//! increase, multiplicative decrease (Chiu and Jain, 1989), the rule TCP's
//! congestion control uses. `Retry-After` is RFC 9110 §10.2.3: seconds or
//! an HTTP date.
//!
//! No threads, no clock, no I/O: times are passed in (ns, or the wall time
//! for an HTTP date) and randomness comes from a caller's seeded RNG.

pub use crate::backoff::Backoff;
use std::time::{Duration, SystemTime};

/// Exit statuses retried by default (`--retry-on`): 75 (`EX_TEMPFAIL`,
/// sysexits.h) and curl's transient failures: 6 (could not resolve host),
/// 7 (could not connect), 28 (timed out), 35 (TLS handshake failed), 52
/// (empty reply), 55 (send failed), 56 (receive failed).
pub const DEFAULT_RETRY_ON: &[i32] = &[6, 7, 28, 35, 52, 55, 56, 75];

/// HTTP statuses that mean a transient failure (retried).
pub const HTTP_TRANSIENT: &[u16] = &[408, 500, 502, 504];

/// HTTP statuses that mean overload: retried, and every start pauses.
pub const HTTP_OVERLOAD: &[u16] = &[429, 503];

/// The HTTP status that means overload only when the response says a rate
/// limit refused it ([`Response::rate_limited`]): GitHub's primary and
/// secondary rate limits answer 403 so. Otherwise it is a final failure.
pub const HTTP_FORBIDDEN: u16 = 403;

/// How one attempt ended, as the operating system tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this status.
    Code(i32),
    /// Killed by this signal (not by drip's `--timeout`).
    Signal(i32),
    /// Killed by drip after `--timeout` (or at the record's deadline):
    /// how it then ended, by a signal (TERM, or KILL a second later) or,
    /// when it caught TERM, with an exit status.
    TimedOut {
        /// The exit status, when it exited.
        code: Option<i32>,
        /// The signal that ended it, when one did.
        signal: Option<i32>,
    },
}

/// The server's answer, from the headers file a job wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code of the last status line.
    pub status: u16,
    /// Its `Retry-After`, if any.
    pub retry_after: Option<RetryAfter>,
    /// Whether it says a rate limit refused it: it has a `Retry-After`
    /// field (whatever its value), or `X-RateLimit-Remaining: 0` (or the
    /// draft's `RateLimit-Remaining: 0`).
    pub rate_limited: bool,
}

/// A `Retry-After` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// Wait this many seconds.
    Seconds(u64),
    /// Wait until this time.
    Date(SystemTime),
}

impl RetryAfter {
    /// How long to wait from `now` (wall time), in ns; 0 for a date past.
    pub fn wait_ns(self, now: SystemTime) -> u64 {
        let wait = match self {
            RetryAfter::Seconds(s) => Duration::from_secs(s),
            RetryAfter::Date(at) => at.duration_since(now).unwrap_or_default(),
        };
        u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What an attempt's end means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The record is done.
    Succeeded,
    /// A transient failure: retry after a backoff.
    Transient,
    /// The service is overloaded: pause every start (for `Retry-After`, ns
    /// from now, when given), then retry.
    Overload {
        /// The server's `Retry-After`, ns from the attempt's end.
        retry_after_ns: Option<u64>,
    },
    /// A final failure: not retried (a 404, a status not in `--retry-on`).
    Final,
}

/// The statuses the user classed (`--retry-on`, `--overload-on`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Exit statuses that are transient failures.
    pub retry_on: Vec<i32>,
    /// Exit statuses that mean overload.
    pub overload_on: Vec<i32>,
}

impl Policy {
    /// Classify an attempt that ended as `exit`, having written `response`
    /// (when the job wrote a headers file), at wall time `now`.
    ///
    /// The HTTP status decides when there is one and it is not a success:
    /// 429 and 503 are overload, and a 403 that says a rate limit refused
    /// it ([`Response::rate_limited`]); 408, 500, 502 and 504 are transient,
    /// any other status of 400 or more final. Otherwise the exit status decides: 0
    /// succeeded, `--overload-on` overload, `--retry-on` (or a timeout)
    /// transient, anything else final.
    pub fn classify(&self, exit: Exit, response: Option<&Response>, now: SystemTime) -> Verdict {
        if let Some(r) = response {
            let retry_after_ns = r.retry_after.map(|ra| ra.wait_ns(now));
            if HTTP_OVERLOAD.contains(&r.status) || (r.status == HTTP_FORBIDDEN && r.rate_limited) {
                return Verdict::Overload { retry_after_ns };
            }
            if HTTP_TRANSIENT.contains(&r.status) {
                return Verdict::Transient;
            }
            if r.status >= 400 {
                return Verdict::Final;
            }
        }
        match exit {
            Exit::Code(0) => Verdict::Succeeded,
            Exit::Code(c) if self.overload_on.contains(&c) => Verdict::Overload {
                retry_after_ns: None,
            },
            Exit::Code(c) if self.retry_on.contains(&c) => Verdict::Transient,
            Exit::TimedOut { .. } => Verdict::Transient,
            Exit::Code(_) | Exit::Signal(_) => Verdict::Final,
        }
    }
}

/// Parse what `curl -D FILE` writes: header blocks, one per response
/// (redirects and `100 Continue` included). Returns the last status line's
/// code, and the `Retry-After` and whether a rate limit refused it, of
/// that block; `None` without a status line.
pub fn parse_headers(text: &str) -> Option<Response> {
    let mut last: Option<Response> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("HTTP/") {
            let status = line.split_whitespace().nth(1)?.parse().ok()?;
            last = Some(Response {
                status,
                retry_after: None,
                rate_limited: false,
            });
        } else if let (Some(r), Some((name, value))) = (&mut last, line.split_once(':')) {
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("retry-after") {
                r.retry_after = parse_retry_after(value);
                r.rate_limited = true;
            } else if ["x-ratelimit-remaining", "ratelimit-remaining"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
                && value.parse::<u64>() == Ok(0)
            {
                r.rate_limited = true;
            }
        }
    }
    last
}

/// Parse a `Retry-After` value: whole seconds, or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<RetryAfter> {
    if let Ok(s) = value.parse::<u64>() {
        return Some(RetryAfter::Seconds(s));
    }
    httpdate::parse_http_date(value).ok().map(RetryAfter::Date)
}

/// The rate under `--adapt`: halved on each overload, raised back on
/// successes by a tenth of the configured rate per second of successes,
/// never above the configured rate nor below a thousandth of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aimd {
    configured: f64,
    current: f64,
}

impl Aimd {
    /// Start at the configured rate (records per second, finite, > 0).
    pub fn new(configured: f64) -> Aimd {
        Aimd {
            configured,
            current: configured,
        }
    }

    /// The rate now, records per second.
    pub fn current(&self) -> f64 {
        self.current
    }

    /// Whether the rate is below the configured one.
    pub fn is_lowered(&self) -> bool {
        self.current < self.configured
    }

    /// An overload: multiplicative decrease.
    pub fn overload(&mut self) {
        self.current = (self.current / 2.0).max(self.configured / 1000.0);
    }

    /// A success: additive increase. Successes come at about the current
    /// rate, so each adds `configured / 10 / current`: the rate climbs by a
    /// tenth of the configured rate per second.
    pub fn success(&mut self) {
        let step = self.configured / 10.0 / self.current;
        self.current = (self.current + step).min(self.configured);
    }

    /// The least spacing of starts at the current rate, ns (0 when at the
    /// configured rate: the schedule alone paces).
    pub fn spacing_ns(&self) -> u64 {
        if self.is_lowered() {
            (1e9 / self.current) as u64
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            retry_on: DEFAULT_RETRY_ON.to_vec(),
            overload_on: vec![9],
        }
    }

    #[test]
    fn backoff_ceiling_doubles_up_to_max() {
        let b = Backoff {
            min_ns: 100,
            max_ns: 1000,
        };
        let ceilings: Vec<u64> = (0..6).map(|n| b.ceiling(n)).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.ceiling(200), 1000);
    }

    #[test]
    fn backoff_is_full_jitter_within_the_ceiling() {
        let b = Backoff {
            min_ns: 1_000,
            max_ns: 1_000_000,
        };
        let mut rng = fastrand::Rng::with_seed(7);
        let waits: Vec<u64> = (0..2000).map(|_| b.wait(3, &mut rng)).collect();
        assert!(waits.iter().all(|&w| w <= 8_000));
        // Full jitter: spread over the whole range, not bunched at the top.
        let low = waits.iter().filter(|&&w| w < 2_000).count();
        let high = waits.iter().filter(|&&w| w > 6_000).count();
        assert!((350..650).contains(&low), "{low}");
        assert!((350..650).contains(&high), "{high}");
        // Seeded: the same seed gives the same waits.
        let mut again = fastrand::Rng::with_seed(7);
        assert_eq!(b.wait(3, &mut again), waits[0]);
    }

    #[test]
    fn http_status_decides_before_the_exit_status() {
        let p = policy();
        let now = SystemTime::UNIX_EPOCH;
        let r = |status| Response {
            status,
            retry_after: Some(RetryAfter::Seconds(2)),
            rate_limited: true,
        };
        assert_eq!(
            p.classify(Exit::Code(0), Some(&r(429)), now),
            Verdict::Overload {
                retry_after_ns: Some(2_000_000_000)
            }
        );
        assert!(matches!(
            p.classify(Exit::Code(0), Some(&r(503)), now),
            Verdict::Overload { .. }
        ));
        for s in [408, 500, 502, 504] {
            assert_eq!(
                p.classify(Exit::Code(0), Some(&r(s)), now),
                Verdict::Transient
            );
        }
        assert_eq!(
            p.classify(Exit::Code(0), Some(&r(404)), now),
            Verdict::Final
        );
        assert_eq!(
            p.classify(Exit::Code(0), Some(&r(200)), now),
            Verdict::Succeeded
        );
        // A 2xx with a failing exit: the exit status decides.
        assert_eq!(
            p.classify(Exit::Code(7), Some(&r(200)), now),
            Verdict::Transient
        );
    }

    #[test]
    fn a_403_is_overload_only_when_a_rate_limit_refused_it() {
        let p = policy();
        let now = SystemTime::UNIX_EPOCH;
        let verdict = |headers: &str| {
            let text =
                format!("HTTP/1.1 200 OK\r\nRetry-After: 5\r\n\r\nHTTP/2 403 \r\n{headers}\r\n");
            p.classify(Exit::Code(0), parse_headers(&text).as_ref(), now)
        };
        // GitHub's primary limit: nothing left of the quota.
        for spent in [
            "x-ratelimit-remaining: 0",
            "X-RateLimit-Remaining:0",
            "RateLimit-Remaining: 0",
        ] {
            assert_eq!(
                verdict(&format!("{spent}\r\nx-ratelimit-reset: 1700000000\r\n")),
                Verdict::Overload {
                    retry_after_ns: None
                },
                "{spent}"
            );
        }
        // Its secondary limit: a Retry-After, whatever it says.
        assert_eq!(
            verdict("retry-after: 60\r\n"),
            Verdict::Overload {
                retry_after_ns: Some(60_000_000_000)
            }
        );
        assert_eq!(
            verdict("Retry-After: later\r\n"),
            Verdict::Overload {
                retry_after_ns: None
            }
        );
        // A plain 403 (the earlier block's Retry-After is not its own), or
        // one with quota left, is final.
        assert_eq!(verdict(""), Verdict::Final);
        assert_eq!(verdict("X-RateLimit-Remaining: 10\r\n"), Verdict::Final);
        assert_eq!(verdict("X-RateLimit-Remaining: 00x\r\n"), Verdict::Final);
        // Other statuses are as they were: a 404 with nothing left is final.
        let text = "HTTP/1.1 404 Not Found\r\nX-RateLimit-Remaining: 0\r\n";
        assert_eq!(
            p.classify(Exit::Code(0), parse_headers(text).as_ref(), now),
            Verdict::Final
        );
    }

    #[test]
    fn exit_statuses_follow_the_policy() {
        let p = policy();
        let now = SystemTime::UNIX_EPOCH;
        assert_eq!(p.classify(Exit::Code(0), None, now), Verdict::Succeeded);
        assert_eq!(p.classify(Exit::Code(75), None, now), Verdict::Transient);
        assert_eq!(p.classify(Exit::Code(1), None, now), Verdict::Final);
        assert_eq!(
            p.classify(
                Exit::TimedOut {
                    code: None,
                    signal: Some(15)
                },
                None,
                now
            ),
            Verdict::Transient
        );
        assert_eq!(p.classify(Exit::Signal(9), None, now), Verdict::Final);
        assert_eq!(
            p.classify(Exit::Code(9), None, now),
            Verdict::Overload {
                retry_after_ns: None
            }
        );
    }

    #[test]
    fn headers_give_the_last_status_and_its_retry_after() {
        let text = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 301 Moved\r\nRetry-After: 9\r\n\r\n\
                    HTTP/2 429 \r\ncontent-type: text/plain\r\nretry-after: 3\r\n\r\n";
        assert_eq!(
            parse_headers(text),
            Some(Response {
                status: 429,
                retry_after: Some(RetryAfter::Seconds(3)),
                rate_limited: true,
            })
        );
        let text =
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n";
        let r = parse_headers(text).unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(r.retry_after, Some(RetryAfter::Date(at)));
        assert_eq!(
            r.retry_after.unwrap().wait_ns(at - Duration::from_secs(4)),
            4_000_000_000
        );
        assert_eq!(
            r.retry_after.unwrap().wait_ns(at + Duration::from_secs(4)),
            0
        );
        assert_eq!(
            parse_headers("HTTP/1.1 200 OK\r\n").unwrap().retry_after,
            None
        );
        assert_eq!(parse_headers(""), None);
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn aimd_halves_on_overload_and_climbs_back_to_the_configured_rate() {
        let mut a = Aimd::new(40.0);
        assert_eq!(a.spacing_ns(), 0);
        a.overload();
        assert_eq!(a.current(), 20.0);
        assert_eq!(a.spacing_ns(), 50_000_000);
        a.overload();
        assert_eq!(a.current(), 10.0);
        // One second of successes at about the current rate adds a tenth
        // of the configured rate (4/s).
        for _ in 0..10 {
            a.success();
        }
        assert!((a.current() - 13.7).abs() < 0.3, "{}", a.current());
        for _ in 0..10_000 {
            a.success();
        }
        assert_eq!(a.current(), 40.0);
        assert!(!a.is_lowered());
        for _ in 0..100 {
            a.overload();
        }
        assert_eq!(a.current(), 0.04);
    }
}
