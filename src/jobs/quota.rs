//! The quota a server announces in its response headers, and the pace that
//! makes what remains of it last until it resets.
//!
//! Read from the last header block of a response (as `curl -D` writes it):
//!
//! - the IETF draft's fields (draft-ietf-httpapi-ratelimit-headers):
//!   `RateLimit: "name";r=REMAINING;t=RESET` (several policies: the
//!   tightest), `RateLimit-Policy: "name";q=QUOTA;w=WINDOW` for the quota;
//!   the earlier drafts' `RateLimit: limit=L, remaining=R, reset=T` and
//!   `RateLimit-Remaining` / `RateLimit-Reset` too; their reset is always
//!   delta seconds;
//! - the common `X-RateLimit-Remaining` and `X-RateLimit-Reset`
//!   (`X-RateLimit-Limit` for the quota), whose reset is delta seconds, or
//!   a Unix time in seconds (GitHub) when it is at least 10⁹ (2001), or in
//!   milliseconds when at least 10¹².
//!
//! A value that does not parse is reported (the caller says so once) and
//! the response counts as announcing nothing.
//!
//! Pure: no threads, no clock, no I/O; times are passed in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What remains of the quota, and when it resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests the server still allows before the reset.
    pub remaining: u64,
    /// Time from the response to the reset.
    pub reset: Duration,
}

/// A reset value at or above this is a Unix time in seconds, not a delta.
const UNIX_SECONDS_FROM: u64 = 1_000_000_000;
/// A reset value at or above this is a Unix time in milliseconds.
const UNIX_MILLIS_FROM: u64 = 1_000_000_000_000;

/// The quota announced in the last header block of `text` (what `curl -D`
/// wrote), received at `now`. `Ok(None)` when it announces none; `Err`
/// names a field whose value does not parse.
///
/// # Errors
/// The name and value of the first malformed field.
pub fn parse_quota(text: &str, now: SystemTime) -> Result<Option<Quota>, String> {
    let mut fields: Vec<(String, &str)> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("HTTP/") {
            fields.clear();
        } else if let Some((name, value)) = line.split_once(':') {
            fields.push((name.trim().to_ascii_lowercase(), value.trim()));
        }
    }
    let get = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    let bad = |name: &str, value: &str| format!("{name}: {value}");
    if let Some(value) = get("ratelimit") {
        return parse_ratelimit(value)
            .map(Some)
            .ok_or_else(|| bad("RateLimit", value));
    }
    for (remaining, reset, epoch) in [
        ("ratelimit-remaining", "ratelimit-reset", false),
        ("x-ratelimit-remaining", "x-ratelimit-reset", true),
    ] {
        let (Some(r), Some(t)) = (get(remaining), get(reset)) else {
            continue;
        };
        let remaining = r.parse::<u64>().map_err(|_| bad(remaining, r))?;
        let reset = parse_reset(t, epoch, now).ok_or_else(|| bad(reset, t))?;
        return Ok(Some(Quota { remaining, reset }));
    }
    Ok(None)
}

/// The `RateLimit` field: the draft's list of `"name";r=R;t=T` items (the
/// one with the least remaining per second left wins), or the earlier
/// drafts' `limit=L, remaining=R, reset=T`.
fn parse_ratelimit(value: &str) -> Option<Quota> {
    let mut tightest: Option<Quota> = None;
    let mut older = (None, None);
    for item in value.split(',') {
        let (mut r, mut t) = (None, None);
        for param in item.split(';') {
            let Some((key, v)) = param.trim().split_once('=') else {
                continue;
            };
            let v = v.trim().parse::<u64>().ok();
            match key.trim() {
                "r" => r = Some(v?),
                "t" => t = Some(v?),
                "remaining" => older.0 = Some(v?),
                "reset" => older.1 = Some(v?),
                _ => {}
            }
        }
        if let (Some(remaining), Some(t)) = (r, t) {
            let q = Quota {
                remaining,
                reset: Duration::from_secs(t),
            };
            if tightest.map_or(true, |old| per_second(&q) < per_second(&old)) {
                tightest = Some(q);
            }
        }
    }
    tightest.or(match older {
        (Some(remaining), Some(t)) => Some(Quota {
            remaining,
            reset: Duration::from_secs(t),
        }),
        _ => None,
    })
}

/// Requests left per second of the time to the reset.
fn per_second(q: &Quota) -> f64 {
    q.remaining as f64 / q.reset.as_secs_f64().max(1e-3)
}

/// A reset: delta seconds; with `epoch`, a Unix time in seconds from 10⁹
/// up, or in milliseconds from 10¹² up (a time past gives 0).
fn parse_reset(value: &str, epoch: bool, now: SystemTime) -> Option<Duration> {
    let n = value.parse::<u64>().ok()?;
    if !epoch || n < UNIX_SECONDS_FROM {
        return Some(Duration::from_secs(n));
    }
    let at = if n >= UNIX_MILLIS_FROM {
        UNIX_EPOCH + Duration::from_millis(n)
    } else {
        UNIX_EPOCH + Duration::from_secs(n)
    };
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The reset of the current window, as tight as the responses tell it.
///
/// A reset in whole seconds is rounded (up, as servers do): each response
/// says the window ends no later than its arrival plus its reset, and
/// responses arriving at different moments of a second narrow that to
/// the earliest of those times. A response with more remaining than the
/// one before, or one after the estimated end, starts a new window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    /// The estimated end (ns) and the remaining quota last seen.
    last: Option<(u64, u64)>,
}

impl Window {
    /// Whether the window is known to last past `now` (ns).
    pub fn is_open(&self, now: u64) -> bool {
        self.last.is_some_and(|(end, _)| end > now)
    }

    /// `quota` announced by a response received at `now` (ns), with its
    /// reset tightened by what earlier responses of the same window said.
    pub fn observe(&mut self, now: u64, quota: Quota) -> Quota {
        let says = now.saturating_add(u64::try_from(quota.reset.as_nanos()).unwrap_or(u64::MAX));
        let end = match self.last {
            Some((end, remaining)) if now < end && quota.remaining <= remaining => end.min(says),
            _ => says,
        };
        self.last = Some((end, quota.remaining));
        Quota {
            reset: Duration::from_nanos(end - now),
            ..quota
        }
    }
}

/// How starts go so that `quota` lasts until its reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// One start every this long (at most: the rate may be slower).
    Every(Duration),
    /// Nothing is left: no start until this long from now.
    Pause(Duration),
}

/// The pace for `quota`, `in_flight` requests already started and not yet
/// answered (they spend what remains): the `left` requests left are
/// spread evenly over the time to the reset, one spacing of reset ÷
/// (left + 1) apart, so the last starts one spacing before the reset, not
/// at it (where it would fall into the next window and leave one request
/// of this one unspent).
pub fn pace(quota: Quota, in_flight: u64) -> Pace {
    let left = quota.remaining.saturating_sub(in_flight);
    if left == 0 {
        return Pace::Pause(quota.reset);
    }
    Pace::Every(quota.reset / u32::try_from(left.saturating_add(1)).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn quota(remaining: u64, reset_s: u64) -> Option<Quota> {
        Some(Quota {
            remaining,
            reset: Duration::from_secs(reset_s),
        })
    }

    const NOW: u64 = 1_750_000_000;

    #[test]
    fn the_drafts_fields() {
        let h = "HTTP/1.1 200 OK\r\nRateLimit-Policy: \"burst\";q=100;w=60, \"day\";q=1000;w=86400\r\nRateLimit: \"burst\";r=50;t=30, \"day\";r=5;t=3600\r\n\r\n";
        // 5 in an hour is tighter than 50 in 30 s.
        assert_eq!(parse_quota(h, at(NOW)), Ok(quota(5, 3600)));
        let older = "HTTP/1.1 200 OK\nRateLimit: limit=100, remaining=7, reset=12\n";
        assert_eq!(parse_quota(older, at(NOW)), Ok(quota(7, 12)));
        let split = "HTTP/2 200\nratelimit-remaining: 3\nratelimit-reset: 2\n";
        assert_eq!(parse_quota(split, at(NOW)), Ok(quota(3, 2)));
    }

    #[test]
    fn x_ratelimit_reset_as_delta_or_unix_time() {
        let h = |reset: u64| {
            format!("HTTP/1.1 200 OK\r\nX-RateLimit-Limit: 30\r\nX-RateLimit-Remaining: 4\r\nX-RateLimit-Reset: {reset}\r\n")
        };
        assert_eq!(parse_quota(&h(8), at(NOW)), Ok(quota(4, 8)));
        assert_eq!(parse_quota(&h(NOW + 8), at(NOW)), Ok(quota(4, 8)));
        assert_eq!(parse_quota(&h((NOW + 8) * 1000), at(NOW)), Ok(quota(4, 8)));
        // A Unix time already past: the reset is now.
        assert_eq!(parse_quota(&h(NOW - 5), at(NOW)), Ok(quota(4, 0)));
    }

    #[test]
    fn the_last_block_counts_and_malformed_values_are_named() {
        let h = "HTTP/1.1 301 Moved\nX-RateLimit-Remaining: 9\nX-RateLimit-Reset: 9\n\nHTTP/1.1 200 OK\nContent-Type: text/plain\n";
        assert_eq!(parse_quota(h, at(NOW)), Ok(None));
        let bad = "HTTP/1.1 200 OK\nX-RateLimit-Remaining: lots\nX-RateLimit-Reset: 9\n";
        assert_eq!(
            parse_quota(bad, at(NOW)),
            Err("x-ratelimit-remaining: lots".into())
        );
        let bad = "HTTP/1.1 200 OK\nRateLimit: \"a\";r=-1;t=9\n";
        assert!(parse_quota(bad, at(NOW)).is_err());
        // Remaining without a reset announces nothing.
        let half = "HTTP/1.1 200 OK\nX-RateLimit-Remaining: 9\n";
        assert_eq!(parse_quota(half, at(NOW)), Ok(None));
    }

    #[test]
    fn responses_narrow_a_reset_in_whole_seconds() {
        const S: u64 = 1_000_000_000;
        let mut w = Window::default();
        // The window ends at 10.2 s; resets are rounded up.
        const MS: u64 = 1_000_000;
        assert_eq!(
            w.observe(100 * MS, quota(29, 11).unwrap()).reset,
            Duration::from_secs(11)
        );
        let q = w.observe(500 * MS, quota(28, 10).unwrap());
        assert_eq!(q.reset, Duration::from_millis(10_000), "ends by 10.5 s");
        let q = w.observe(900 * MS, quota(27, 10).unwrap());
        assert_eq!(
            q.reset,
            Duration::from_millis(9_600),
            "still by 10.5 s, not 10.9"
        );
        let q = w.observe(1300 * MS, quota(26, 9).unwrap());
        assert_eq!(q.reset, Duration::from_millis(9_000), "by 10.3 s");
        // More remaining: a new window, whatever the estimate said.
        let q = w.observe(10_400 * MS, quota(29, 10).unwrap());
        assert_eq!(q.reset, Duration::from_secs(10));
        // Past the estimated end: a new window too.
        let mut w = Window::default();
        w.observe(0, quota(1, 1).unwrap());
        let q = w.observe(2 * S, quota(0, 5).unwrap());
        assert_eq!(q.reset, Duration::from_secs(5));
    }

    #[test]
    fn what_remains_is_spread_to_the_reset_and_in_flight_requests_spend_it() {
        let q = quota(11, 10).unwrap();
        assert_eq!(pace(q, 2), Pace::Every(Duration::from_secs(1)));
        assert_eq!(pace(q, 0), Pace::Every(Duration::from_secs(10) / 12));
        assert_eq!(pace(q, 11), Pace::Pause(Duration::from_secs(10)));
        assert_eq!(pace(q, 30), Pace::Pause(Duration::from_secs(10)));
    }

    /// A server allowing `quota` requests in each fixed window of
    /// `window_s` seconds, announcing its reset rounded up to whole
    /// seconds; one request at a time, each answered `latency` ns after it
    /// starts, the next started as [`pace`] and [`Window`] say. Returns
    /// the requests served in each window and the refusals, over `n`
    /// requests.
    fn against_fixed_window(quota: u64, window_s: u64, n: usize, latency: u64) -> (Vec<u64>, u64) {
        const S: u64 = 1_000_000_000;
        let mut served: Vec<u64> = Vec::new();
        let (mut refused, mut start, mut w) = (0, 0u64, Window::default());
        for _ in 0..n {
            let i = (start / (window_s * S)) as usize;
            served.resize(served.len().max(i + 1), 0);
            if served[i] < quota {
                served[i] += 1;
            } else {
                refused += 1;
            }
            let answered = start + latency;
            let end = (i as u64 + 1) * window_s * S;
            let reset = Duration::from_secs((end - answered).div_ceil(S));
            let remaining = quota - served[i];
            let q = w.observe(answered, Quota { remaining, reset });
            start = match pace(q, 0) {
                Pace::Every(d) => answered.max(start + d.as_nanos() as u64),
                Pace::Pause(d) => answered + d.as_nanos() as u64,
            };
        }
        (served, refused)
    }

    #[test]
    fn every_window_spends_its_whole_quota_before_the_reset() {
        // 5 per 3 s, 15 requests: 5 in each window, none refused (spaced
        // by reset ÷ remaining, the last of each window fell at the reset
        // and every window served 4).
        for latency in [0, 1_000_000, 30_000_000] {
            let (served, refused) = against_fixed_window(5, 3, 15, latency);
            assert_eq!(refused, 0, "latency {latency} ns: {served:?}");
            assert_eq!(served, [5, 5, 5], "latency {latency} ns");
        }
    }
}
