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
//!   milliseconds when at least 10¹²;
//! - OpenAI's `X-RateLimit-Remaining-Requests` / `-Reset-Requests` and
//!   `-Tokens`, whose reset is a Go duration (`1s`, `6m0s`, `20ms`,
//!   `1h2m3.5s`: [`parse_go_duration`]);
//! - Anthropic's `Anthropic-RateLimit-Requests-Remaining` / `-Reset`, and
//!   the same of `-Tokens-`, `-Input-Tokens-` and `-Output-Tokens-`, whose
//!   reset is an RFC 3339 time ([`parse_rfc3339`]).
//!
//! The first family of requests present is the requests' quota; a token
//! family is the quota of the budget its tokens count ([`IN`], [`OUT`],
//! [`IN_OUT`]). OpenAI's and Anthropic's families (requests and tokens)
//! are buckets refilled continuously; their `-Limit` field is what the
//! quota holds when whole (read as a bucket with it, [`FamilyQuota`]).
//! A family whose value does not parse is reported (the caller says so
//! once) and counts as announcing nothing; the others still count.
//!
//! Pure: no threads, no clock, no I/O; times are passed in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cost::Cost;

/// What remains of the quota, and when it resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests (or tokens, of a token family) the server still allows
    /// before the reset.
    pub remaining: u64,
    /// Time from the response to the reset.
    pub reset: Duration,
}

/// The budget of input tokens (Anthropic's `-Input-Tokens-` family).
pub const IN: &str = "in";
/// The budget of output tokens (Anthropic's `-Output-Tokens-` family).
pub const OUT: &str = "out";
/// The budget of input and output tokens together (OpenAI's and
/// Anthropic's `-Tokens` families).
pub const IN_OUT: &str = "in+out";
/// The budget of requests, each costing 1: the requests' quota read as a
/// bucket is kept as a token budget of this name ([`Tokens`]). No cost's
/// name (letters, digits, `_` and `-`, joined by `+`) is it.
pub const REQUESTS: &str = "(requests)";

/// A reset value at or above this is a Unix time in seconds, not a delta.
const UNIX_SECONDS_FROM: u64 = 1_000_000_000;
/// A reset value at or above this is a Unix time in milliseconds.
const UNIX_MILLIS_FROM: u64 = 1_000_000_000_000;

/// How a family writes its reset.
#[derive(Debug, Clone, Copy)]
enum Reset {
    /// Delta seconds.
    Delta,
    /// Delta seconds, or a Unix time ([`UNIX_SECONDS_FROM`]).
    DeltaOrUnix,
    /// A Go duration.
    Go,
    /// An RFC 3339 time.
    Rfc3339,
}

/// One family of fields: its remaining, its reset and its limit fields,
/// how it writes its reset, the budget its remaining counts (`None`:
/// requests), the most its remaining may be rounded up by, and whether
/// its quota is a bucket refilled continuously, its reset the time it is
/// full again (OpenAI's and Anthropic's), not a window's end.
struct Family {
    remaining: &'static str,
    reset: &'static str,
    limit: &'static str,
    form: Reset,
    budget: Option<&'static str>,
    rounded: u64,
    refills: bool,
}

/// Anthropic gives its token remainders rounded to the nearest thousand:
/// a remaining of a round thousand may be up to this much above what is
/// left.
const ANTHROPIC_ROUNDING: u64 = 500;

/// The families a response can announce its quotas in.
const FAMILIES: [Family; 8] = [
    Family {
        remaining: "ratelimit-remaining",
        reset: "ratelimit-reset",
        limit: "ratelimit-limit",
        form: Reset::Delta,
        budget: None,
        rounded: 0,
        refills: false,
    },
    Family {
        remaining: "x-ratelimit-remaining",
        reset: "x-ratelimit-reset",
        limit: "x-ratelimit-limit",
        form: Reset::DeltaOrUnix,
        budget: None,
        rounded: 0,
        refills: false,
    },
    Family {
        remaining: "x-ratelimit-remaining-requests",
        reset: "x-ratelimit-reset-requests",
        limit: "x-ratelimit-limit-requests",
        form: Reset::Go,
        budget: None,
        rounded: 0,
        refills: true,
    },
    Family {
        remaining: "anthropic-ratelimit-requests-remaining",
        reset: "anthropic-ratelimit-requests-reset",
        limit: "anthropic-ratelimit-requests-limit",
        form: Reset::Rfc3339,
        budget: None,
        rounded: 0,
        refills: true,
    },
    Family {
        remaining: "x-ratelimit-remaining-tokens",
        reset: "x-ratelimit-reset-tokens",
        limit: "x-ratelimit-limit-tokens",
        form: Reset::Go,
        budget: Some(IN_OUT),
        rounded: 0,
        refills: true,
    },
    Family {
        remaining: "anthropic-ratelimit-tokens-remaining",
        reset: "anthropic-ratelimit-tokens-reset",
        limit: "anthropic-ratelimit-tokens-limit",
        form: Reset::Rfc3339,
        budget: Some(IN_OUT),
        rounded: ANTHROPIC_ROUNDING,
        refills: true,
    },
    Family {
        remaining: "anthropic-ratelimit-input-tokens-remaining",
        reset: "anthropic-ratelimit-input-tokens-reset",
        limit: "anthropic-ratelimit-input-tokens-limit",
        form: Reset::Rfc3339,
        budget: Some(IN),
        rounded: ANTHROPIC_ROUNDING,
        refills: true,
    },
    Family {
        remaining: "anthropic-ratelimit-output-tokens-remaining",
        reset: "anthropic-ratelimit-output-tokens-reset",
        limit: "anthropic-ratelimit-output-tokens-limit",
        form: Reset::Rfc3339,
        budget: Some(OUT),
        rounded: ANTHROPIC_ROUNDING,
        refills: true,
    },
];

/// What one family announces of its quota (requests, or a budget's
/// tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyQuota {
    /// What remains, and when it resets.
    pub quota: Quota,
    /// What the quota holds when whole (a full bucket), when the family's
    /// limit field says it (only a bucket's is read).
    pub limit: Option<u64>,
    /// Whether the quota is a bucket refilled continuously, its reset the
    /// time it is full again (OpenAI's and Anthropic's families, of
    /// requests and of tokens), rather than a window ending at its reset.
    pub refills: bool,
}

impl FamilyQuota {
    /// A quota read as a window: no limit, no refill (the generic
    /// families').
    fn window(quota: Quota) -> FamilyQuota {
        FamilyQuota {
            quota,
            limit: None,
            refills: false,
        }
    }

    /// Whether it is read as a bucket ([`Tokens`]): it refills, and its
    /// limit says what it lacks; else as a window.
    pub fn is_bucket(&self) -> bool {
        self.refills && self.limit.is_some()
    }
}

/// What a token family announces of its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenQuota {
    /// The budget its tokens count ([`IN`], [`OUT`], [`IN_OUT`]).
    pub budget: &'static str,
    /// What it announces.
    pub said: FamilyQuota,
}

/// What a response announces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announced {
    /// The requests' quota.
    pub requests: Option<FamilyQuota>,
    /// Each token budget's quota, at most one a budget.
    pub tokens: Vec<TokenQuota>,
    /// The first field whose value does not parse, `name: value`.
    pub malformed: Option<String>,
}

/// The quotas announced in the last header block of `text` (what `curl
/// -D` wrote), received at `now`: the requests' and each token budget's;
/// a family with a malformed value is left out and named in
/// [`Announced::malformed`]. A remaining without its reset announces
/// nothing.
pub fn parse_quotas(text: &str, now: SystemTime) -> Announced {
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
    let mut announced = Announced::default();
    let mut bad = |name: &str, value: &str| {
        announced
            .malformed
            .get_or_insert_with(|| format!("{name}: {value}"));
    };
    let mut requests = None;
    if let Some(value) = get("ratelimit") {
        match parse_ratelimit(value) {
            Some(q) => requests = Some(FamilyQuota::window(q)),
            None => bad("RateLimit", value),
        }
    }
    let mut tokens: Vec<TokenQuota> = Vec::new();
    for family in &FAMILIES {
        let (Some(r), Some(t)) = (get(family.remaining), get(family.reset)) else {
            continue;
        };
        let taken = match family.budget {
            None => requests.is_some(),
            Some(b) => tokens.iter().any(|had| had.budget == b),
        };
        if taken {
            continue;
        }
        let Ok(left) = r.parse::<u64>() else {
            bad(family.remaining, r);
            continue;
        };
        let Some(reset) = parse_reset(t, family.form, now) else {
            bad(family.reset, t);
            continue;
        };
        // A round remainder may have been rounded up: the least it says.
        let left = match family.rounded {
            0 => left,
            r if left % (2 * r) == 0 => left.saturating_sub(r),
            _ => left,
        };
        // A bucket's limit: what it lacks comes back by the reset.
        let limit = match (family.refills, get(family.limit)) {
            (true, Some(l)) => match l.parse::<u64>() {
                Ok(l) => Some(l),
                Err(_) => {
                    bad(family.limit, l);
                    None
                }
            },
            _ => None,
        };
        let said = FamilyQuota {
            quota: Quota {
                remaining: left,
                reset,
            },
            limit,
            refills: family.refills,
        };
        match family.budget {
            None => requests = Some(said),
            Some(budget) => tokens.push(TokenQuota { budget, said }),
        }
    }
    announced.requests = requests;
    announced.tokens = tokens;
    announced
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

/// A reset written as `form` says, from `now` (a time past gives 0).
fn parse_reset(value: &str, form: Reset, now: SystemTime) -> Option<Duration> {
    let until = |at: SystemTime| at.duration_since(now).unwrap_or(Duration::ZERO);
    match form {
        Reset::Go => parse_go_duration(value),
        Reset::Rfc3339 => parse_rfc3339(value).map(until),
        Reset::Delta | Reset::DeltaOrUnix => {
            let n = value.parse::<u64>().ok()?;
            if matches!(form, Reset::Delta) || n < UNIX_SECONDS_FROM {
                Some(Duration::from_secs(n))
            } else if n >= UNIX_MILLIS_FROM {
                Some(until(UNIX_EPOCH + Duration::from_millis(n)))
            } else {
                Some(until(UNIX_EPOCH + Duration::from_secs(n)))
            }
        }
    }
}

/// A duration as Go writes it (`time.Duration.String`, read back by
/// `time.ParseDuration`): one or more numbers, each with a unit (`ns`,
/// `us` or `µs`, `ms`, `s`, `m`, `h`), a number whole or with a fraction
/// (`1h2m3.5s`, `0.5s`, `20ms`, `6m0s`), or `0` alone. `None` for anything
/// else: a sign (a reset is never negative), a missing or unknown unit,
/// an empty value, or more than 2^64 − 1 ns (584 years). A fraction finer
/// than a nanosecond is cut.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.as_bytes();
    if rest.is_empty() {
        return None;
    }
    let digits = |b: &[u8]| b.iter().take_while(|d| d.is_ascii_digit()).count();
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, after) = rest.split_at(digits(rest));
        let (fraction, after) = match after.strip_prefix(b".") {
            Some(after) => after.split_at(digits(after)),
            None => (&b""[..], after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let unit_len = after
            .iter()
            .take_while(|b| !b.is_ascii_digit() && **b != b'.')
            .count();
        let (unit, after) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            b"ns" => 1,
            // `us`, and `µs` with the micro sign or the Greek mu.
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return None,
        };
        let number = |d: &[u8]| {
            d.iter().try_fold(0u128, |n, &d| {
                n.checked_mul(10)?.checked_add(u128::from(d - b'0'))
            })
        };
        // A nanosecond of an hour is 1/3.6e12: 19 digits of a fraction are
        // more than enough, and keep the arithmetic within u128.
        let fraction = &fraction[..fraction.len().min(19)];
        let part = number(whole)?
            .checked_mul(unit_ns)?
            .checked_add(number(fraction)? * unit_ns / 10u128.pow(fraction.len() as u32))?;
        total = total.checked_add(part)?;
        rest = after;
    }
    u64::try_from(total).ok().map(Duration::from_nanos)
}

/// An RFC 3339 time (`2025-06-01T12:00:03Z`, `2025-06-01T14:00:03.25+02:00`):
/// a date, `T`, a time of day with seconds and perhaps a fraction, and `Z`
/// or an offset. `None` for anything else (a date alone, a time without
/// seconds or offset, a day or hour out of range).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let digits = |at: usize, n: usize| {
        b.get(at..at + n)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    let date_time = digits(0, 4)
        && at(4, b"-")
        && digits(5, 2)
        && at(7, b"-")
        && digits(8, 2)
        && at(10, b"Tt")
        && digits(11, 2)
        && at(13, b":")
        && digits(14, 2)
        && at(16, b":")
        && digits(17, 2);
    if !date_time {
        return None;
    }
    let mut zone = &b[19..];
    if let Some(fraction) = zone.strip_prefix(b".") {
        let n = fraction.iter().take_while(|d| d.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        zone = &fraction[n..];
    }
    // An offset's hour is 00 to 23, its minute 00 to 59.
    let two = |d: &[u8]| {
        d.iter()
            .try_fold(0, |n, d| d.is_ascii_digit().then(|| n * 10 + (d - b'0')))
    };
    let offset = zone.len() == 6
        && matches!(zone[0], b'+' | b'-')
        && two(&zone[1..3]).is_some_and(|h| h <= 23)
        && zone[3] == b':'
        && two(&zone[4..]).is_some_and(|m| m <= 59);
    if !(offset || zone == b"Z" || zone == b"z") {
        return None;
    }
    text.parse::<jiff::Timestamp>().ok().map(SystemTime::from)
}

/// The reset of the current window, as tight as the responses tell it.
///
/// A reset in whole seconds is rounded (up, as servers do): each response
/// says the window ends no later than its arrival plus its reset, and
/// responses arriving at different moments of a second narrow that to
/// the earliest of those times. A response after the estimated end starts
/// a new window.
///
/// Responses can be read in another order than their requests reached the
/// server: of several requests in flight at once, the one that reached it
/// first may be answered last. A response read while other responses
/// were read (after its request started) may show less than the server
/// counted since: those requests may have reached it after this one. What
/// it says remains is therefore lowered by what they spent (its
/// `read_while`), which makes it a bound no later count can undercut; and
/// it shows a new window only when even that bound is above what the
/// window was last known to hold. Otherwise more remaining than before is
/// stale, and changes nothing ([`QuotaWindow::observe`] gives `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotaWindow {
    /// The estimated end (ns) and the least the quota held when last
    /// read (its announced remaining less its `read_while`).
    last: Option<(u64, u64)>,
}

impl QuotaWindow {
    /// Whether the window is known to last past `now` (ns).
    pub fn is_open(&self, now: u64) -> bool {
        self.last.is_some_and(|(end, _)| end > now)
    }

    /// `quota` announced by a response received at `now` (ns), while
    /// responses spending `read_while` of the quota were read since its
    /// request started: the quota with what remains lowered by
    /// `read_while` (the least that can remain) and its reset tightened by
    /// what earlier responses of the same window said, or a stale
    /// response (see [`QuotaWindow`]), which changes nothing.
    pub fn observe(&mut self, now: u64, quota: Quota, read_while: u64) -> QuotaReading {
        let least = quota.remaining.saturating_sub(read_while);
        let says = now.saturating_add(u64::try_from(quota.reset.as_nanos()).unwrap_or(u64::MAX));
        let (end, same) = match self.last {
            Some((end, held)) if now < end && quota.remaining <= held => (end.min(says), true),
            Some((end, held)) if now < end && least <= held => return QuotaReading::Stale,
            _ => (says, false),
        };
        self.last = Some((end, least));
        let q = Quota {
            remaining: least,
            reset: Duration::from_nanos(end - now),
        };
        if same {
            QuotaReading::Same(q)
        } else {
            QuotaReading::New(q)
        }
    }
}

/// What a response tells of its quota's window ([`QuotaWindow::observe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaReading {
    /// The window known: what remains at the least, and its reset.
    Same(Quota),
    /// A new window (the last one's end passed, or more remains than it
    /// held even counting what this response may not show).
    New(Quota),
    /// More remaining than the window held, which may only be a response
    /// to a request that reached the server before others read already.
    Stale,
}

impl QuotaReading {
    /// The quota, unless the response is stale.
    pub fn quota(self) -> Option<Quota> {
        match self {
            QuotaReading::Same(q) | QuotaReading::New(q) => Some(q),
            QuotaReading::Stale => None,
        }
    }
}

/// One token budget's quota: what the responses announced remains of it,
/// less what the starts since spent, and, read as a window, the pace that
/// spreads it to the reset as [`pace`] spreads requests: a start costing
/// `c` tokens holds the next back `c` × reset ÷ (left + 1), and a start
/// costing more than is left waits for the reset.
///
/// The requests' quota read as a bucket ([`FamilyQuota::is_bucket`]) is
/// one too, the budget [`REQUESTS`], each request costing 1 token of it:
/// what follows of tokens holds of its requests (those in flight, those
/// read while a response's request was, what comes back). The requests'
/// quota read as a window is paced by [`QuotaWindow`] and [`pace`].
///
/// Read as a bucket (a family that refills continuously, its reset the
/// time it is full again, with its limit field: OpenAI's and
/// Anthropic's), what a response says remains is not all there is until
/// the reset: the tokens it lacks of the limit come back at a steady rate
/// until then, (limit − remaining) ÷ reset. What may be spent at `t` is
/// what was left at the response plus what came back since (all of the
/// limit − remaining at the reset), less what the starts since spent: a
/// start goes when its cost fits, unspaced, and else waits until that
/// much will have come back (no later than the reset; the starts try again
/// at each response read meanwhile, which may say more came back, and
/// the scope does not pause). Anthropic's remainders, rounded to the
/// nearest thousand, are read as the least they may be, so the rate read
/// is at most (limit − least) ÷ reset: what comes back by any time before
/// the reset is never more than the server will have. Without a limit
/// field, a bucket is read as a window (what it lacks of the limit is not
/// known).
///
/// What is left is a bound no response read undercuts. A response says
/// what remained when its request reached the server; less the tokens of
/// the requests still in flight, that is what it says is left, and less
/// those of the responses read while its request was in flight (which
/// may have reached the server after it, [`QuotaWindow`]) the least that can
/// be left. In one window, or before a bucket's reset, what was left
/// (what earlier responses told, less the starts since) is kept between
/// the two: it is only above what a response says when others spent what
/// drip did not see.
///
/// A start is spaced by what it is expected to spend: its cost (an
/// estimate) times what the records settled so far spent of theirs
/// ([`Tokens::settled`]; all of it before any). What is left is still
/// spent by the estimate: an estimate above what a request spends slows
/// the spacing no more than that request does, and never lets a start
/// past what is left.
///
/// Past the reset, until a response to a request started since tells of
/// the new window (or of the bucket), the new window is assumed to allow
/// what a window allows (the family's limit field, else the most a
/// response said remained), a full bucket the same, and to last as long
/// as the longest reset read: the requests in flight spend from that, the
/// first start always going. A cost above the limit never fits a bucket:
/// it waits for the reset, and goes as that first start, as in a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokens {
    /// The reset, narrowed as the responses tell it (a window's).
    window: QuotaWindow,
    /// When the window resets, or the bucket is full (ns).
    end: u64,
    /// Tokens left when last read.
    left: u64,
    /// Tokens the starts spent since.
    drawn: u64,
    /// Read as a bucket: what comes back until the reset.
    refill: Option<Refill>,
    /// The spacing a token takes, ns (a window's).
    per_token: f64,
    /// What a whole window allows, as far as the responses told it.
    allows: Option<u64>,
    /// The longest reset read (ns): a window's length at the most.
    span: u64,
    /// The window assumed past the last reset read: when it began (ns),
    /// and the tokens of the requests started before it and answered in
    /// it (its own starts are in flight until one is answered, which ends
    /// it).
    assumed: Option<(u64, u64)>,
    /// Tokens estimated and really spent, over the records settled
    /// (`--settle`): what a start is expected to spend of its estimate.
    settled: (u64, u64),
}

/// What a bucket read at `from` (ns) gets back by its reset `over` ns
/// later: `tokens` (its limit less what it said remained), at a steady
/// rate.
#[derive(Debug, Clone, Copy)]
struct Refill {
    tokens: u64,
    from: u64,
    over: u64,
}

impl Refill {
    /// The tokens back by `now` (ns): all of them from the reset on.
    fn by(&self, now: u64) -> u64 {
        let passed = now.saturating_sub(self.from);
        if passed >= self.over {
            return self.tokens;
        }
        (u128::from(self.tokens) * u128::from(passed) / u128::from(self.over)) as u64
    }

    /// When (ns) `tokens` of them are back (`None`: more than come back).
    fn when(&self, tokens: u64) -> Option<u64> {
        if tokens > self.tokens {
            return None;
        }
        if tokens == 0 {
            return Some(self.from);
        }
        // The least time after which `by` gives `tokens`.
        let passed = (u128::from(tokens) * u128::from(self.over)).div_ceil(u128::from(self.tokens));
        Some(self.from.saturating_add(passed as u64))
    }
}

/// Why a start waits for a token quota ([`Tokens::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Until the window's reset (ns): the starts of its scope pause.
    Reset(u64),
    /// Until a response tells of the window begun at the last reset, or
    /// at the latest this long (ns); no pause: the starts try again at
    /// each response read.
    Word(u64),
    /// Until a bucket will have refilled enough (ns), at the latest; no
    /// pause: the starts try again at each response read.
    Refill(u64),
}

impl Hold {
    /// Until when (ns), at the latest.
    pub fn until(self) -> u64 {
        match self {
            Hold::Reset(t) | Hold::Word(t) | Hold::Refill(t) => t,
        }
    }

    /// Of two holds, the one a start waits for: a reset before the
    /// others (a pause holds), else the later of the two.
    pub fn or_later(self, other: Hold) -> Hold {
        match (self, other) {
            (Hold::Reset(a), Hold::Reset(b)) => Hold::Reset(a.max(b)),
            (Hold::Reset(a), _) | (_, Hold::Reset(a)) => Hold::Reset(a),
            (a, b) if b.until() > a.until() => b,
            (a, _) => a,
        }
    }
}

/// What a start spends of one token budget ([`Tokens::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spend<'a> {
    /// The budget's name.
    pub budget: &'a str,
    /// The record's cost on it.
    pub cost: u64,
    /// The tokens of it the scope's requests in flight cost.
    pub in_flight: u64,
}

/// A response of a token family (or of the requests' bucket, each request
/// a token), read ([`Tokens::observe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokensRead {
    /// What it announced.
    pub quota: Quota,
    /// The family's limit field, when the response has one.
    pub limit: Option<u64>,
    /// Whether the family is a bucket ([`FamilyQuota::refills`]).
    pub refills: bool,
    /// Tokens of the requests started and not yet answered (they spend
    /// what remains).
    pub in_flight: u64,
    /// Tokens of the responses read while its request was in flight.
    pub read_while: u64,
    /// When its request started (ns).
    pub started: u64,
    /// Tokens its own request cost.
    pub cost: u64,
}

impl TokensRead {
    /// What a family announced (`said`), its request started at `started`
    /// (ns), `read_while` tokens of the responses read while it was in
    /// flight; the tokens in flight and its own cost to be told.
    pub fn of(said: FamilyQuota, read_while: u64, started: u64) -> TokensRead {
        TokensRead {
            quota: said.quota,
            limit: said.limit,
            refills: said.refills,
            in_flight: 0,
            read_while,
            started,
            cost: 0,
        }
    }
}

impl Tokens {
    /// A response `r` received at `now` (ns). One to a request started
    /// before an assumed window ([`Tokens`]) began may tell of the window
    /// before, or of this one (it reached the server after the reset):
    /// it tells nothing, and what its request cost is counted in the
    /// assumed window, whose starts and requests in flight counted it
    /// until now.
    pub fn observe(&mut self, now: u64, r: TokensRead) {
        if let Some((since, spent)) = self.assumed(now) {
            if r.started < since {
                self.assumed = Some((since, spent.saturating_add(r.cost)));
                return;
            }
        }
        let quota = r.quota;
        self.allows = match r.limit {
            Some(limit) => Some(limit),
            None => Some(self.allows.unwrap_or(0).max(quota.remaining)),
        };
        let open = self.is_open(now);
        let says = quota.remaining.saturating_sub(r.in_flight);
        let least = says.saturating_sub(r.read_while);
        // In one window, or before a bucket's reset: no less than the
        // least the response allows, and no more than it says (what was
        // left, less the starts since, is only more when others spent
        // what drip did not see).
        let kept = least.max(self.available(now).min(says));
        let reset = u64::try_from(quota.reset.as_nanos()).unwrap_or(u64::MAX);
        if let (true, Some(limit)) = (r.refills, r.limit) {
            self.left = if open { kept } else { least };
            self.drawn = 0;
            self.refill = Some(Refill {
                tokens: limit.saturating_sub(quota.remaining),
                from: now,
                over: reset,
            });
            self.window = QuotaWindow::default();
            self.end = now.saturating_add(reset);
            self.span = self.span.max(reset);
            self.assumed = None;
            return;
        }
        self.refill = None;
        let q = match self.window.observe(now, quota, r.read_while) {
            QuotaReading::Stale => {
                self.keep(kept);
                return;
            }
            QuotaReading::Same(q) if open => {
                self.keep(kept);
                q
            }
            QuotaReading::Same(q) | QuotaReading::New(q) => {
                self.keep(least);
                q
            }
        };
        let reset = u64::try_from(q.reset.as_nanos()).unwrap_or(u64::MAX);
        self.end = now.saturating_add(reset);
        self.span = self.span.max(reset);
        self.assumed = None;
        self.per_token = reset as f64 / (self.left as f64 + 1.0);
    }

    /// What is left is `left`, none spent since.
    fn keep(&mut self, left: u64) {
        self.left = left;
        self.drawn = 0;
    }

    /// What may be spent at `now` (ns) before the reset: what was left
    /// when last read, and what came back since (a bucket's), less what
    /// the starts spent since.
    fn available(&self, now: u64) -> u64 {
        let back = self.refill.map_or(0, |r| r.by(now));
        self.left.saturating_add(back).saturating_sub(self.drawn)
    }

    /// Whether the window is known to last past `now` (ns), or the bucket
    /// to be short of full.
    pub fn is_open(&self, now: u64) -> bool {
        self.end > now
    }

    /// The window assumed at `now` (ns), past the reset: when it began,
    /// and the tokens of the requests started before it and answered in
    /// it. A window assumed as long as the longest reset read is followed
    /// by the next; none is assumed where every reset read was 0.
    fn assumed(&self, now: u64) -> Option<(u64, u64)> {
        if self.is_open(now) || self.allows.is_none() || self.span == 0 {
            return None;
        }
        let (mut since, mut counted) = self.assumed.unwrap_or((self.end, 0));
        if now >= since.saturating_add(self.span) {
            let windows = (now - since) / self.span;
            since = since.saturating_add(windows.saturating_mul(self.span));
            counted = 0;
        }
        Some((since, counted))
    }

    /// Whether a start costing `cost` tokens may go at `now` (ns), while
    /// requests costing `in_flight` tokens are in flight: not when more
    /// than is left of an open window (until its reset), nor more than a
    /// bucket has (until it will have, at the latest its reset), nor, in
    /// an assumed one, when the requests in flight (its starts, and any
    /// started before the reset: they may reach the server after it) and
    /// those started before it and answered in it come to more than a
    /// window allows with this one (until a response tells of the new
    /// window, at the latest the assumed window's end). The first start
    /// of an assumed window goes whatever its cost.
    pub fn fits(&self, now: u64, cost: u64, in_flight: u64) -> Result<(), Hold> {
        if self.is_open(now) && cost > self.available(now) {
            return Err(match self.refill {
                None => Hold::Reset(self.end),
                Some(r) => {
                    let short = cost.saturating_add(self.drawn).saturating_sub(self.left);
                    Hold::Refill(r.when(short).map_or(self.end, |t| t.min(self.end)))
                }
            });
        }
        match (self.assumed(now), self.allows) {
            (Some((since, counted)), Some(allows)) => {
                let held = counted.saturating_add(in_flight);
                if held > 0 && held.saturating_add(cost) > allows {
                    return Err(Hold::Word(since.saturating_add(self.span)));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A record estimated at `estimate` tokens really spent `spent`
    /// (settled).
    pub fn settled(&mut self, estimate: u64, spent: u64) {
        self.settled = (
            self.settled.0.saturating_add(estimate),
            self.settled.1.saturating_add(spent),
        );
    }

    /// What a start is expected to spend of its estimate: what the
    /// records settled spent of theirs (1 before any).
    fn expected(&self) -> f64 {
        match self.settled {
            (0, _) => 1.0,
            (estimated, spent) => spent as f64 / estimated as f64,
        }
    }

    /// A start costing `cost` tokens at `now` (ns), which [`Tokens::fits`]:
    /// the tokens are spent; the least spacing (ns) before the next start
    /// (for what it is expected to spend), never past the reset (0 once
    /// the window is over, and of a bucket: what fits it goes).
    pub fn spend(&mut self, now: u64, cost: u64) -> u64 {
        if !self.is_open(now) {
            // In an assumed window the start is counted in flight.
            self.assumed = self.assumed(now);
            return 0;
        }
        self.drawn = self.drawn.saturating_add(cost);
        if self.refill.is_some() {
            return 0;
        }
        ((cost as f64 * self.expected() * self.per_token) as u64).min(self.end - now)
    }
}

/// The cost budgets a record spends, each by its name, and how a record's
/// cost on it is read: the providers' token families pace the budget
/// their tokens count. The one place a budget's name meets a cost reader.
#[derive(Debug, Clone, Default)]
pub struct CostBudgets {
    /// How a record's costs are read ([`Cost::none`] without `--cost`).
    cost: Cost,
    /// Each cost limit's name (`""`: the unnamed one), in the order given.
    names: Vec<Box<str>>,
}

impl CostBudgets {
    /// The budgets of `--cost` and the `--cost-rate` limits `cost` knows
    /// (none without it): with no named cost, the one unnamed budget.
    pub fn of(cost: Cost) -> CostBudgets {
        let names = if cost.weighs() && cost.budgets() == 0 {
            vec![Box::from("")]
        } else {
            cost.budget_names()
                .map(|n| Box::from(n.unwrap_or("")))
                .collect()
        };
        CostBudgets { cost, names }
    }

    /// The budget a token family counting `family` ([`IN`], [`OUT`],
    /// [`IN_OUT`]) paces: the budget of that name (`in+out` in either
    /// order), else for [`IN_OUT`] the unnamed one (a record's whole
    /// cost). `None`: no such budget, and the family paces nothing.
    pub fn paced_by(&self, family: &str) -> Option<&str> {
        let cost = &self.cost;
        let place = if cost.budgets() == 0 {
            (family == IN_OUT && cost.cost_named(None).is_some()).then_some(0)
        } else {
            cost.budget(Some(family))
                .or_else(|| (family == IN_OUT).then(|| cost.budget(None)).flatten())
        };
        self.names.get(place?).map(|n| &**n)
    }

    /// What `record` (with or without its delimiter) costs on `budget`: 1
    /// on [`REQUESTS`] (a request), 0 on a budget it does not know.
    pub fn cost(&self, budget: &str, record: &[u8]) -> u64 {
        if budget == REQUESTS {
            return 1;
        }
        let Some(place) = self.names.iter().position(|n| &**n == budget) else {
            return 0;
        };
        self.cost.spend(place, &self.cost.estimates(record))
    }

    /// What `record` cost on each budget, once a name, as its job
    /// reported (`spent`, by named cost, as `--settle` reads it; a cost
    /// not reported stands at its estimate): as [`CostBudgets::costs`].
    pub fn settled(&self, record: &[u8], spent: &[Option<u64>]) -> Vec<(&str, u64)> {
        let cost = &self.cost;
        let actual: Vec<Option<u64>> = cost
            .estimates(record)
            .iter()
            .enumerate()
            .map(|(i, e)| spent.get(i).copied().flatten().or(*e))
            .collect();
        let mut costs: Vec<(&str, u64)> = Vec::with_capacity(self.names.len());
        for (place, name) in self.names.iter().enumerate() {
            if !costs.iter().any(|(had, _)| *had == &**name) {
                costs.push((name, cost.spend(place, &actual)));
            }
        }
        costs
    }

    /// What `record` costs on each budget, once a name: several cost
    /// limits of one name (`--cost-rate 1000/s --cost-rate 90000/min`)
    /// spend the same costs, and a token window of that name is spent
    /// once a start.
    pub fn costs(&self, record: &[u8]) -> Vec<(&str, u64)> {
        let cost = &self.cost;
        let estimates = cost.estimates(record);
        let mut costs: Vec<(&str, u64)> = Vec::with_capacity(self.names.len());
        for (place, name) in self.names.iter().enumerate() {
            if !costs.iter().any(|(had, _)| *had == &**name) {
                costs.push((name, cost.spend(place, &estimates)));
            }
        }
        costs
    }

    /// Whether there is no budget.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// How starts go so that `quota` lasts until its reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaPace {
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
pub fn pace(quota: Quota, in_flight: u64) -> QuotaPace {
    let left = quota.remaining.saturating_sub(in_flight);
    if left == 0 {
        return QuotaPace::Pause(quota.reset);
    }
    QuotaPace::Every(quota.reset / u32::try_from(left.saturating_add(1)).unwrap_or(u32::MAX))
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

    /// A token family's quota of `budget`: every one is a bucket.
    fn tq(budget: &'static str, quota: Quota, limit: Option<u64>) -> TokenQuota {
        TokenQuota {
            budget,
            said: refilled(quota, limit),
        }
    }

    /// A provider's family's quota (a bucket with its limit).
    fn refilled(quota: Quota, limit: Option<u64>) -> FamilyQuota {
        FamilyQuota {
            quota,
            limit,
            refills: true,
        }
    }

    /// The requests' quota of `text`, or the malformed field.
    fn parse_quota(text: &str, now: SystemTime) -> Result<Option<Quota>, String> {
        let announced = parse_quotas(text, now);
        match announced.malformed {
            Some(field) => Err(field),
            None => Ok(announced.requests.map(|r| r.quota)),
        }
    }

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
        // The common fields are a window: their limit is not read.
        let a = parse_quotas(&h(8), at(NOW));
        assert_eq!(a.requests, quota(4, 8).map(FamilyQuota::window));
        assert!(!a.requests.unwrap().is_bucket());
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
        let mut w = QuotaWindow::default();
        // The window ends at 10.2 s; resets are rounded up.
        const MS: u64 = 1_000_000;
        assert_eq!(
            w.observe(100 * MS, quota(29, 11).unwrap(), 0)
                .quota()
                .unwrap()
                .reset,
            Duration::from_secs(11)
        );
        let q = w
            .observe(500 * MS, quota(28, 10).unwrap(), 0)
            .quota()
            .unwrap();
        assert_eq!(q.reset, Duration::from_millis(10_000), "ends by 10.5 s");
        let q = w
            .observe(900 * MS, quota(27, 10).unwrap(), 0)
            .quota()
            .unwrap();
        assert_eq!(
            q.reset,
            Duration::from_millis(9_600),
            "still by 10.5 s, not 10.9"
        );
        let q = w
            .observe(1300 * MS, quota(26, 9).unwrap(), 0)
            .quota()
            .unwrap();
        assert_eq!(q.reset, Duration::from_millis(9_000), "by 10.3 s");
        // More remaining: a new window, whatever the estimate said.
        let q = w
            .observe(10_400 * MS, quota(29, 10).unwrap(), 0)
            .quota()
            .unwrap();
        assert_eq!(q.reset, Duration::from_secs(10));
        // Past the estimated end: a new window too.
        let mut w = QuotaWindow::default();
        w.observe(0, quota(1, 1).unwrap(), 0);
        let q = w.observe(2 * S, quota(0, 5).unwrap(), 0).quota().unwrap();
        assert_eq!(q.reset, Duration::from_secs(5));
    }

    #[test]
    fn what_remains_is_spread_to_the_reset_and_in_flight_requests_spend_it() {
        let q = quota(11, 10).unwrap();
        assert_eq!(pace(q, 2), QuotaPace::Every(Duration::from_secs(1)));
        assert_eq!(pace(q, 0), QuotaPace::Every(Duration::from_secs(10) / 12));
        assert_eq!(pace(q, 11), QuotaPace::Pause(Duration::from_secs(10)));
        assert_eq!(pace(q, 30), QuotaPace::Pause(Duration::from_secs(10)));
    }

    /// A server allowing `quota` requests in each fixed window of
    /// `window_s` seconds, announcing its reset rounded up to whole
    /// seconds; one request at a time, each answered `latency` ns after it
    /// starts, the next started as [`pace`] and [`QuotaWindow`] say. Returns
    /// the requests served in each window and the refusals, over `n`
    /// requests.
    fn against_fixed_window(quota: u64, window_s: u64, n: usize, latency: u64) -> (Vec<u64>, u64) {
        const S: u64 = 1_000_000_000;
        let mut served: Vec<u64> = Vec::new();
        let (mut refused, mut start, mut w) = (0, 0u64, QuotaWindow::default());
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
            let q = w
                .observe(answered, Quota { remaining, reset }, 0)
                .quota()
                .unwrap();
            start = match pace(q, 0) {
                QuotaPace::Every(d) => answered.max(start + d.as_nanos() as u64),
                QuotaPace::Pause(d) => answered + d.as_nanos() as u64,
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

    fn go(text: &str) -> Option<Duration> {
        parse_go_duration(text)
    }

    #[test]
    fn go_durations_as_openai_writes_them() {
        assert_eq!(go("1s"), Some(Duration::from_secs(1)));
        assert_eq!(go("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(go("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(go("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(go("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(go("0"), Some(Duration::ZERO));
        assert_eq!(go("0s"), Some(Duration::ZERO));
        assert_eq!(go(".25s"), Some(Duration::from_millis(250)));
        assert_eq!(go("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(go("3us"), Some(Duration::from_micros(3)));
        assert_eq!(go("3µs"), Some(Duration::from_micros(3)));
        assert_eq!(go("3μs"), Some(Duration::from_micros(3)));
        assert_eq!(go("1.5h"), Some(Duration::from_secs(5400)));
        // Finer than a nanosecond is cut.
        assert_eq!(
            go("1.0000000019s"),
            Some(Duration::from_nanos(1_000_000_001))
        );
        // 2^64 - 1 ns is the most.
        assert_eq!(
            go("18446744073709551615ns"),
            Some(Duration::from_nanos(u64::MAX))
        );
    }

    #[test]
    fn a_malformed_go_duration_is_none() {
        for bad in [
            "",
            "1x",
            "-1s",
            "+1s",
            "1",
            "s",
            ".s",
            "1.s.",
            "1 s",
            " 1s",
            "1s ",
            "1S",
            "1sec",
            "1h-2m",
            "1..5s",
            "0x10s",
            "18446744073709551616ns",
            "9999999999999999999999h",
            "99999999999999999999999999999999999999999h",
        ] {
            assert_eq!(go(bad), None, "{bad:?}");
        }
    }

    fn unix(text: &str) -> Option<Duration> {
        parse_rfc3339(text).map(|t| t.duration_since(UNIX_EPOCH).unwrap())
    }

    #[test]
    fn rfc3339_times_with_offsets_and_fractions() {
        // 2025-06-15T12:00:00Z is 1_749_988_800.
        const T: u64 = 1_749_988_800;
        let s = Duration::from_secs;
        assert_eq!(unix("2025-06-15T12:00:00Z"), Some(s(T)));
        assert_eq!(unix("2025-06-15t12:00:00z"), Some(s(T)));
        assert_eq!(unix("2025-06-15T14:00:00+02:00"), Some(s(T)));
        assert_eq!(unix("2025-06-15T07:30:00-04:30"), Some(s(T)));
        assert_eq!(unix("2025-06-15T12:00:00+00:00"), Some(s(T)));
        assert_eq!(unix("2025-06-15T12:00:00-00:00"), Some(s(T)));
        assert_eq!(
            unix("2025-06-15T12:00:00.25Z"),
            Some(s(T) + Duration::from_millis(250))
        );
        assert_eq!(
            unix("2025-06-15T13:00:00.000000001+01:00"),
            Some(s(T) + Duration::from_nanos(1))
        );
    }

    #[test]
    fn a_malformed_rfc3339_time_is_none() {
        for bad in [
            "",
            "2025-06-15",
            "2025-06-15T12:00Z",
            "2025-06-15T12:00:00",
            "2025-06-15 12:00:00Z",
            "2025-06-15T12:00:00.Z",
            "2025-06-15T12:00:00+0200",
            "2025-06-15T12:00:00+02",
            "2025-06-15T12:00:00 Z",
            "2025-13-15T12:00:00Z",
            "2025-02-30T12:00:00Z",
            "2025-06-15T25:00:00Z",
            "2025-06-15T12:00:00+25:00",
            "1749988800",
            "Sun, 15 Jun 2025 12:00:00 GMT",
            "2025-06-15T12:00:00Z[UTC]",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn openais_request_and_token_families() {
        let h = "HTTP/1.1 200 OK\r\nx-ratelimit-limit-requests: 60\r\nx-ratelimit-limit-tokens: 150000\r\nx-ratelimit-remaining-requests: 59\r\nx-ratelimit-remaining-tokens: 149984\r\nx-ratelimit-reset-requests: 1s\r\nx-ratelimit-reset-tokens: 6m0s\r\n\r\n";
        let a = parse_quotas(h, at(NOW));
        assert_eq!(a.malformed, None);
        // The requests' family with its limit: a bucket.
        assert_eq!(a.requests, Some(refilled(quota(59, 1).unwrap(), Some(60))));
        assert!(a.requests.unwrap().is_bucket());
        assert_eq!(
            a.tokens,
            [tq(IN_OUT, quota(149_984, 360).unwrap(), Some(150_000))]
        );
        // Tokens alone: no requests' quota.
        let h = "HTTP/2 200\nx-ratelimit-remaining-tokens: 10\nx-ratelimit-reset-tokens: 20ms\n";
        let a = parse_quotas(h, at(NOW));
        assert_eq!(a.requests, None);
        let q = Quota {
            remaining: 10,
            reset: Duration::from_millis(20),
        };
        assert_eq!(a.tokens, [tq(IN_OUT, q, None)]);
    }

    #[test]
    fn anthropics_four_families() {
        let h = "HTTP/1.1 200 OK\r\n\
            anthropic-ratelimit-requests-limit: 50\r\n\
            anthropic-ratelimit-requests-remaining: 49\r\n\
            anthropic-ratelimit-requests-reset: 2025-06-15T12:00:01Z\r\n\
            anthropic-ratelimit-tokens-limit: 90000\r\n\
            anthropic-ratelimit-tokens-remaining: 8000\r\n\
            anthropic-ratelimit-tokens-reset: 2025-06-15T12:00:30.5Z\r\n\
            anthropic-ratelimit-input-tokens-remaining: 70000\r\n\
            anthropic-ratelimit-input-tokens-reset: 2025-06-15T14:00:10+02:00\r\n\
            anthropic-ratelimit-output-tokens-remaining: 8000\r\n\
            anthropic-ratelimit-output-tokens-reset: 2025-06-15T12:00:20Z\r\n\r\n";
        let now = at(1_749_988_800);
        let a = parse_quotas(h, now);
        assert_eq!(a.malformed, None);
        assert_eq!(a.requests, Some(refilled(quota(49, 1).unwrap(), Some(50))));
        let half = |remaining, ms| Quota {
            remaining,
            reset: Duration::from_millis(ms),
        };
        // The token remainders are rounded to the nearest thousand: a
        // round one may be 500 above what is left.
        assert_eq!(
            a.tokens,
            [
                tq(IN_OUT, half(7500, 30_500), Some(90_000)),
                tq(IN, half(69_500, 10_000), None),
                tq(OUT, half(7500, 20_000), None),
            ]
        );
        // A reset already past is now.
        let a = parse_quotas(h, at(1_749_988_900));
        assert_eq!(a.requests, Some(refilled(quota(49, 0).unwrap(), Some(50))));
    }

    #[test]
    fn a_malformed_family_is_named_and_the_others_still_count() {
        let h = "HTTP/1.1 200 OK\n\
            x-ratelimit-remaining-requests: 5\n\
            x-ratelimit-reset-requests: 1x\n\
            x-ratelimit-remaining-tokens: 900\n\
            x-ratelimit-reset-tokens: 2s\n";
        let a = parse_quotas(h, at(NOW));
        assert_eq!(
            a.malformed.as_deref(),
            Some("x-ratelimit-reset-requests: 1x")
        );
        assert_eq!(a.requests, None);
        assert_eq!(a.tokens, [tq(IN_OUT, quota(900, 2).unwrap(), None)]);
        // A requests' limit that does not parse is named; the family is
        // read without it, as a window.
        let h = "HTTP/1.1 200 OK\nx-ratelimit-limit-requests: lots\nx-ratelimit-remaining-requests: 5\nx-ratelimit-reset-requests: 1s\n";
        let a = parse_quotas(h, at(NOW));
        assert_eq!(
            a.malformed.as_deref(),
            Some("x-ratelimit-limit-requests: lots")
        );
        assert_eq!(a.requests, Some(refilled(quota(5, 1).unwrap(), None)));
        assert!(!a.requests.unwrap().is_bucket());
        for (remaining, reset) in [
            ("-1", "1s"),
            ("", "1s"),
            ("9", "-1s"),
            ("9", ""),
            ("lots", "1s"),
        ] {
            let h = format!("HTTP/1.1 200 OK\nx-ratelimit-remaining-tokens: {remaining}\nx-ratelimit-reset-tokens: {reset}\n");
            let a = parse_quotas(&h, at(NOW));
            assert!(a.malformed.is_some(), "{remaining:?} {reset:?}");
            assert_eq!(a.tokens, [], "{remaining:?} {reset:?}");
        }
        let h = "HTTP/1.1 200 OK\nanthropic-ratelimit-output-tokens-remaining: 9\nanthropic-ratelimit-output-tokens-reset: 2025-06-15T12:00:20\n";
        let a = parse_quotas(h, at(NOW));
        assert_eq!(
            a.malformed.as_deref(),
            Some("anthropic-ratelimit-output-tokens-reset: 2025-06-15T12:00:20")
        );
        assert_eq!(a.tokens, []);
    }

    #[test]
    fn absent_fields_announce_nothing() {
        for h in [
            "HTTP/1.1 200 OK\nx-ratelimit-remaining-tokens: 9\n",
            "HTTP/1.1 200 OK\nx-ratelimit-reset-tokens: 1s\n",
            "HTTP/1.1 200 OK\nx-ratelimit-limit-tokens: 9\nx-ratelimit-limit-requests: 9\n",
            "HTTP/1.1 200 OK\nanthropic-ratelimit-input-tokens-remaining: 9\n",
            "HTTP/1.1 200 OK\nanthropic-ratelimit-requests-reset: 2025-06-15T12:00:20Z\n",
            "HTTP/1.1 200 OK\n",
            "",
        ] {
            assert_eq!(parse_quotas(h, at(NOW)), Announced::default(), "{h:?}");
        }
    }

    #[test]
    fn mixed_families_in_one_response() {
        // The common fields and OpenAI's: the first family present is the
        // requests' quota; OpenAI's and Anthropic's tokens both count
        // in+out, the first of them kept.
        let h = "HTTP/1.1 200 OK\n\
            X-RateLimit-Remaining: 7\nX-RateLimit-Reset: 3\n\
            x-ratelimit-remaining-requests: 100\nx-ratelimit-reset-requests: 1m0s\n\
            x-ratelimit-remaining-tokens: 500\nx-ratelimit-reset-tokens: 4s\n\
            anthropic-ratelimit-tokens-remaining: 9\nanthropic-ratelimit-tokens-reset: 2025-06-15T12:00:20Z\n\
            anthropic-ratelimit-input-tokens-remaining: 40\nanthropic-ratelimit-input-tokens-reset: 2025-06-15T12:00:05Z\n";
        let a = parse_quotas(h, at(1_749_988_800));
        assert_eq!(a.malformed, None);
        assert_eq!(a.requests, quota(7, 3).map(FamilyQuota::window));
        assert_eq!(
            a.tokens,
            [
                tq(IN_OUT, quota(500, 4).unwrap(), None),
                tq(IN, quota(40, 5).unwrap(), None)
            ]
        );
        // The IETF field, then OpenAI's requests when it is malformed.
        let h = "HTTP/1.1 200 OK\nRateLimit: \"a\";r=x;t=1\nx-ratelimit-remaining-requests: 3\nx-ratelimit-reset-requests: 2s\n";
        let a = parse_quotas(h, at(NOW));
        assert_eq!(a.malformed.as_deref(), Some("RateLimit: \"a\";r=x;t=1"));
        // Without its limit, a provider's family is read as a window.
        assert_eq!(a.requests, Some(refilled(quota(3, 2).unwrap(), None)));
        assert!(!a.requests.unwrap().is_bucket());
    }

    /// A token response announcing `q`, its request started at `started`
    /// (ns), with `in_flight` and `read_while` tokens, and no limit field.
    fn read(q: Option<Quota>, in_flight: u64, read_while: u64, started: u64) -> TokensRead {
        TokensRead {
            quota: q.unwrap(),
            limit: None,
            refills: false,
            in_flight,
            read_while,
            started,
            cost: 0,
        }
    }

    #[test]
    fn a_token_window_spreads_its_tokens_and_a_larger_cost_waits_for_the_reset() {
        const S: u64 = 1_000_000_000;
        let mut t = Tokens::default();
        // Nothing announced: anything goes, unspaced.
        assert_eq!(t.fits(0, u64::MAX, 0), Ok(()));
        assert_eq!(t.spend(0, 100), 0);
        // 1000 left for 10 s, 199 in flight: 801 left, 10 s / 802 a token.
        t.observe(0, read(quota(1000, 10), 199, 0, 0));
        assert_eq!(t.fits(0, 801, 0), Ok(()));
        assert_eq!(t.fits(0, 802, 0), Err(Hold::Reset(10 * S)));
        // Never spaced past the reset.
        let mut late = t;
        assert_eq!(late.spend(9 * S, 801), S);
        let spacing = t.spend(0, 401);
        assert_eq!(spacing, (401.0 * 10e9 / 802.0) as u64);
        assert_eq!(t.fits(S, 400, 0), Ok(()));
        assert_eq!(t.fits(S, 401, 0), Err(Hold::Reset(10 * S)));
        t.spend(S, 400);
        assert_eq!(t.fits(2 * S, 1, 0), Err(Hold::Reset(10 * S)));
        // A cost of 0 always goes.
        assert_eq!(t.fits(2 * S, 0, 0), Ok(()));
        // At the reset the window is over: the next is assumed to allow
        // the most a response said remained (1000), and to last the
        // longest reset read (10 s); its first start goes, unspaced,
        // whatever its cost.
        assert_eq!(t.fits(10 * S, 5000, 0), Ok(()));
        assert_eq!(t.spend(10 * S, 5000), 0);
        // The next, with it in flight, waits for word of the new window,
        // at most until the assumed window's end.
        assert_eq!(t.fits(10 * S, 1, 5000), Err(Hold::Word(20 * S)));
        // A response to a request started before the reset tells nothing
        // of the new window: nothing changes but its cost, counted in the
        // assumed window (it may have reached the server after the reset).
        t.observe(
            10 * S,
            TokensRead {
                cost: 1000,
                ..read(quota(1000, 5), 0, 0, 9 * S)
            },
        );
        assert_eq!(t.fits(10 * S, 1, 0), Err(Hold::Word(20 * S)));
        // A new response, with more left: a new window.
        t.observe(11 * S, read(quota(1000, 5), 0, 0, 11 * S));
        assert_eq!(t.fits(11 * S, 1000, 0), Ok(()));
        assert_eq!(t.fits(11 * S, 1001, 0), Err(Hold::Reset(16 * S)));
    }

    #[test]
    fn a_start_is_spaced_by_what_the_records_settled_spent_of_their_estimates() {
        const S: u64 = 1_000_000_000;
        let mut t = Tokens::default();
        // 999 left for 10 s: 10 ms a token.
        t.observe(0, read(quota(999, 10), 0, 0, 0));
        assert_eq!(t.spend(0, 100), S, "none settled: the estimate");
        // The records settled spent a quarter of their estimates: a start
        // estimated at 100 is spaced as 25.
        t.settled(400, 100);
        t.settled(400, 100);
        let spacing = t.spend(0, 100);
        assert_eq!(spacing, (100.0 * 0.25 * 10e9 / 1000.0) as u64);
        // What is left is still spent by the estimate: 799.
        assert_eq!(t.fits(0, 799, 0), Ok(()));
        assert_eq!(t.fits(0, 800, 0), Err(Hold::Reset(10 * S)));
    }

    #[test]
    fn past_the_reset_the_starts_spend_what_a_window_allows_until_it_tells() {
        // 1000 tokens a 2 s window (the limit field), 200 a request, 8
        // jobs: at the reset, 5 start, not 8, until a response to one of
        // them tells of the new window.
        const S: u64 = 1_000_000_000;
        let mut t = Tokens::default();
        let limited = TokensRead {
            limit: Some(1000),
            ..read(quota(0, 2), 0, 0, 0)
        };
        t.observe(0, limited);
        assert_eq!(t.fits(S, 200, 0), Err(Hold::Reset(2 * S)));
        // The requests in flight count against the assumed window too (one
        // started before the reset may reach the server after it).
        let b = t;
        assert_eq!(b.fits(2 * S, 200, 800), Ok(()));
        assert_eq!(b.fits(2 * S, 200, 801), Err(Hold::Word(4 * S)));
        assert_eq!(b.fits(2 * S, 5000, 0), Ok(()), "with none held, any");
        // Its own starts are in flight (the pool counts them so).
        for n in 0..5 {
            assert_eq!(t.fits(2 * S, 200, 200 * n), Ok(()), "start {n}");
            assert_eq!(t.spend(2 * S, 200), 0, "unspaced");
        }
        assert_eq!(
            t.fits(2 * S, 200, 1000),
            Err(Hold::Word(4 * S)),
            "the sixth"
        );
        assert_eq!(t.fits(2 * S, 0, 1000), Ok(()));
        // A request started just before the reset, answered after it, may
        // have reached the server after it: its 200 count in the window.
        let mut straggler = b;
        straggler.observe(
            2 * S,
            TokensRead {
                cost: 200,
                ..read(quota(0, 2), 0, 0, 2 * S - 1)
            },
        );
        assert_eq!(straggler.fits(2 * S, 200, 600), Ok(()));
        assert_eq!(straggler.fits(2 * S, 200, 601), Err(Hold::Word(4 * S)));
        // No word of the new window (its answers carried no quota): the
        // next one is assumed at 4 s.
        assert_eq!(t.fits(4 * S, 200, 0), Ok(()));
        // The first response of the new window: 800 remaining, the other
        // four in flight (800): none left.
        let mut told = t;
        told.observe(2 * S + 1, read(quota(800, 2), 800, 0, 2 * S));
        assert_eq!(told.fits(2 * S + 1, 1, 0), Err(Hold::Reset(4 * S + 1)));
    }

    /// A bucket's response: `q` announced of a bucket holding `limit`
    /// when full, with `in_flight` and `read_while` tokens, its request
    /// started at `started` (ns).
    fn bucket(q: Option<Quota>, limit: u64, in_flight: u64, read_while: u64) -> TokensRead {
        TokensRead {
            limit: Some(limit),
            refills: true,
            ..read(q, in_flight, read_while, 0)
        }
    }

    #[test]
    fn a_bucket_spends_what_comes_back_before_its_reset() {
        const S: u64 = 1_000_000_000;
        const MS: u64 = 1_000_000;
        // A bucket of 3000 with 300 left, full in 27 s: 100 tokens a
        // second come back.
        let mut b = Tokens::default();
        b.observe(0, bucket(quota(300, 27), 3000, 0, 0));
        assert_eq!(b.fits(0, 300, 0), Ok(()));
        assert_eq!(
            b.fits(0, 301, 0),
            Err(Hold::Refill(10 * MS)),
            "1 more in 10 ms"
        );
        assert_eq!(b.spend(0, 300), 0, "unspaced");
        assert_eq!(b.fits(0, 1, 0), Err(Hold::Refill(10 * MS)));
        // A second on, 100 have come back.
        assert_eq!(b.fits(S, 100, 0), Ok(()));
        b.spend(S, 100);
        assert_eq!(b.fits(S, 200, 0), Err(Hold::Refill(3 * S)));
        // More than comes back by the reset waits for it (no pause), then
        // goes as the assumed full bucket's first start.
        assert_eq!(b.fits(S, 2601, 0), Err(Hold::Refill(27 * S)));
        assert_eq!(b.fits(27 * S, 2601, 0), Ok(()));
        // By the reset all 2700 came back: 2600 may be spent.
        let mut late = b;
        assert_eq!(late.fits(27 * S - 1, 2600, 0), Err(Hold::Refill(27 * S)));
        late.observe(20 * S, bucket(quota(2000, 10), 3000, 0, 0));
        assert_eq!(late.fits(20 * S, 2000, 0), Ok(()));
        // Read as a window, the same response leaves the 2700 that come
        // back unspent until the reset: a second on, nothing fits.
        let mut w = Tokens::default();
        w.observe(
            0,
            TokensRead {
                refills: false,
                ..bucket(quota(300, 27), 3000, 0, 0)
            },
        );
        w.spend(0, 300);
        assert_eq!(w.fits(S, 100, 0), Err(Hold::Reset(27 * S)));
        // Without a limit a bucket is read as a window.
        let mut n = Tokens::default();
        n.observe(
            0,
            TokensRead {
                limit: None,
                ..bucket(quota(300, 27), 3000, 0, 0)
            },
        );
        n.spend(0, 300);
        assert_eq!(n.fits(S, 100, 0), Err(Hold::Reset(27 * S)));
    }

    #[test]
    fn a_bucket_counts_the_requests_in_flight_and_the_responses_read_while() {
        const S: u64 = 1_000_000_000;
        // 1000 of 2000 left, full in 10 s (100 a second back), 400 in
        // flight: 600 now.
        let mut b = Tokens::default();
        b.observe(0, bucket(quota(1000, 10), 2000, 400, 0));
        assert_eq!(b.fits(0, 600, 0), Ok(()));
        assert_eq!(b.fits(0, 601, 0), Err(Hold::Refill(S / 100)));
        b.spend(0, 600);
        // A response read after 300 were read since its request started,
        // saying 900 (its request reached the server before theirs): at
        // least 900 − 300 less 100 in flight; what was thought left (100
        // back by 1 s) is within what it says, and kept.
        let mut stale = b;
        stale.observe(S, bucket(quota(900, 9), 2000, 100, 300));
        assert_eq!(stale.fits(S, 500, 0), Ok(()));
        assert_eq!(
            stale.fits(S, 501, 0),
            Err(Hold::Refill(S + (9 * S).div_ceil(1100)))
        );
        // The same read fresh (none read since): it says 800.
        b.observe(S, bucket(quota(900, 9), 2000, 100, 0));
        assert_eq!(b.fits(S, 800, 0), Ok(()));
        // A response saying less than thought (others spent) lowers it.
        b.observe(S, bucket(quota(50, 19), 2000, 0, 0));
        assert_eq!(
            b.fits(S, 51, 0),
            Err(Hold::Refill(S + (19 * S).div_ceil(1950)))
        );
        // Past the reset the bucket is full: its limit less what is in
        // flight, until a response tells.
        assert_eq!(b.fits(20 * S, 1500, 500), Ok(()));
        assert_eq!(b.fits(20 * S, 1501, 500), Err(Hold::Word(39 * S)));
    }

    #[test]
    fn a_reset_waits_before_a_refill_and_two_refills_for_the_later() {
        assert_eq!(Hold::Refill(5).or_later(Hold::Reset(3)), Hold::Reset(3));
        assert_eq!(Hold::Refill(5).or_later(Hold::Word(7)), Hold::Word(7));
        assert_eq!(Hold::Refill(9).or_later(Hold::Word(7)), Hold::Refill(9));
        assert_eq!(Hold::Refill(5).or_later(Hold::Refill(4)), Hold::Refill(5));
    }

    /// A request in flight: its start, cost, the tokens of the responses
    /// read since it started, and what the server answered (what remained,
    /// and the time to full) once it has.
    type Flight = (u64, u64, u64, Option<(u64, Duration)>);

    /// Costs of 50 to 299 tokens drawn from `seed`.
    fn drawn(seed: u64) -> impl FnMut() -> u64 {
        let mut rng = seed;
        move || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            50 + (rng >> 33) % 250
        }
    }

    /// A server's bucket holding `limit` tokens when full, refilled at
    /// `limit` per `period` ns (30 s), starting at `level`; up to `jobs`
    /// (4) requests in flight, each reaching it `latency` (50 ms) after its
    /// start and read as long again after, costing what `cost` draws, the
    /// starts as [`Tokens`] says (read as a bucket or as a window). Over
    /// `run` ns: the tokens admitted and the requests refused. Each
    /// response says the bucket's level (less what it lacks of a token),
    /// and when it is full again.
    fn against_a_bucket(
        refills: bool,
        limit: u64,
        level: u64,
        mut cost: impl FnMut() -> u64,
        run: u64,
    ) -> (u64, u64) {
        const MS: u64 = 1_000_000;
        let (period, jobs, latency) = (30_000 * MS, 4usize, 50 * MS);
        let mut t = Tokens::default();
        let mut server = level as f64;
        let mut flight: Vec<Flight> = Vec::new();
        let (mut admitted, mut refused) = (0, 0);
        let mut next = cost();
        for now in (0..run).step_by(MS as usize) {
            server = (server + limit as f64 * MS as f64 / period as f64).min(limit as f64);
            for f in flight.iter_mut().filter(|f| f.0 + latency == now) {
                if server >= f.1 as f64 {
                    server -= f.1 as f64;
                    admitted += f.1;
                } else {
                    refused += 1;
                }
                let reset = (limit as f64 - server) * period as f64 / limit as f64;
                f.3 = Some((server as u64, Duration::from_nanos(reset.ceil() as u64)));
            }
            while let Some(i) = flight.iter().position(|f| f.0 + 2 * latency == now) {
                let (started, c, read_while, answer) = flight.remove(i);
                let (remaining, reset) = answer.unwrap();
                let in_flight = flight.iter().map(|f| f.1).sum();
                t.observe(
                    now,
                    TokensRead {
                        quota: Quota { remaining, reset },
                        limit: Some(limit),
                        refills,
                        in_flight,
                        read_while,
                        started,
                        cost: c,
                    },
                );
                for f in &mut flight {
                    f.2 += c;
                }
            }
            let in_flight = flight.iter().map(|f| f.1).sum();
            while flight.len() < jobs && t.fits(now, next, in_flight).is_ok() {
                t.spend(now, next);
                flight.push((now, next, 0, None));
                next = cost();
            }
        }
        (admitted, refused)
    }

    #[test]
    fn against_a_bucket_read_mid_refill_reading_it_so_spends_what_a_window_reading_leaves() {
        // A bucket of 6000 a 30 s, a fifth full at the start (the first
        // four requests, started before any answer, fit): in 20 s it
        // gives 1200 + 4000. Read as a bucket, drip spends nearly all of
        // it and no request is refused; read as a window (what remains
        // spread to the time it is full), far less.
        const S: u64 = 1_000_000_000;
        for seed in 1..=5 {
            let (spent, refused) = against_a_bucket(true, 6000, 1200, drawn(seed), 20 * S);
            assert_eq!(refused, 0, "seed {seed}");
            assert!(spent >= 4800, "seed {seed}: {spent} of 5200");
            let (window, refused) = against_a_bucket(false, 6000, 1200, drawn(seed), 20 * S);
            assert_eq!(refused, 0, "seed {seed}");
            assert!(
                window * 10 < spent * 8,
                "seed {seed}: {window}, as a bucket {spent}"
            );
        }
    }

    /// The requests' quota of a response of OpenAI's fields (`limit`,
    /// `remaining`, the reset a Go duration), read as the pool reads it:
    /// with `in_flight` requests in flight and `read_while` responses read
    /// while its request was, each request costing 1.
    fn requests_read(fields: (u64, u64, &str), in_flight: u64, read_while: u64) -> TokensRead {
        let (limit, remaining, reset) = fields;
        let h = format!("HTTP/1.1 200 OK\r\nx-ratelimit-limit-requests: {limit}\r\nx-ratelimit-remaining-requests: {remaining}\r\nx-ratelimit-reset-requests: {reset}\r\n\r\n");
        let said = parse_quotas(&h, at(NOW)).requests.unwrap();
        assert!(said.is_bucket(), "{said:?}");
        TokensRead {
            in_flight,
            cost: 1,
            ..TokensRead::of(said, read_while, 0)
        }
    }

    #[test]
    fn a_requests_bucket_read_mid_refill_lets_starts_go_as_it_refills() {
        const S: u64 = 1_000_000_000;
        const MS: u64 = 1_000_000;
        // 60 requests when full, 3 left, full in 57 s: one a second comes
        // back. One request in flight: 2 now, then one a second.
        let mut r = Tokens::default();
        r.observe(0, requests_read((60, 3, "57s"), 1, 0));
        for _ in 0..2 {
            assert_eq!(r.fits(0, 1, 1), Ok(()));
            assert_eq!(r.spend(0, 1), 0, "unspaced");
        }
        assert_eq!(r.fits(0, 1, 3), Err(Hold::Refill(S)), "the next at 1 s");
        assert_eq!(r.fits(S - 1, 1, 3), Err(Hold::Refill(S)));
        assert_eq!(r.fits(S, 1, 3), Ok(()));
        r.spend(S, 1);
        assert_eq!(r.fits(1500 * MS, 1, 4), Err(Hold::Refill(2 * S)));
        // By 10 s, 10 came back: 9 more.
        for _ in 0..9 {
            assert_eq!(r.fits(10 * S, 1, 4), Ok(()));
            r.spend(10 * S, 1);
        }
        assert_eq!(r.fits(10 * S, 1, 4), Err(Hold::Refill(11 * S)));
        // Read as a window, the same response leaves the 57 that come back
        // unspent: once the 2 are spent, nothing before the reset.
        let mut w = Tokens::default();
        w.observe(
            0,
            TokensRead {
                refills: false,
                ..requests_read((60, 3, "57s"), 1, 0)
            },
        );
        w.spend(0, 1);
        w.spend(0, 1);
        assert_eq!(w.fits(10 * S, 1, 3), Err(Hold::Reset(57 * S)));
    }

    #[test]
    fn a_requests_bucket_counts_the_requests_in_flight_and_the_responses_read_while() {
        const S: u64 = 1_000_000_000;
        // 10 of 100 left, full in 90 s (1 a second back), 4 requests in
        // flight: 6 now.
        let mut r = Tokens::default();
        r.observe(0, requests_read((100, 10, "1m30s"), 4, 0));
        assert_eq!(r.fits(0, 6, 4), Ok(()));
        assert_eq!(r.fits(0, 7, 4), Err(Hold::Refill(S)));
        // A response saying 9, read after 3 others were (its request
        // reached the server before theirs), with 2 in flight: at least
        // 9 − 2 − 3 = 4, not the 7 it says.
        let mut stale = r;
        stale.spend(0, 6);
        stale.observe(0, requests_read((100, 9, "1m31s"), 2, 3));
        assert_eq!(stale.fits(0, 4, 2), Ok(()));
        assert_eq!(stale.fits(0, 5, 2), Err(Hold::Refill(S)));
        // More remaining than was thought left, read after others: what
        // was thought left holds, up to what it says.
        let mut more = r;
        more.spend(0, 6);
        more.observe(0, requests_read((100, 20, "1m20s"), 0, 19));
        assert_eq!(more.fits(0, 1, 0), Ok(()));
        assert_eq!(more.fits(0, 2, 0), Err(Hold::Refill(S)));
    }

    #[test]
    fn past_its_reset_a_requests_bucket_is_full_less_the_requests_in_flight() {
        const S: u64 = 1_000_000_000;
        // 0 of 8 left, full in 4 s; past that, 8 may be in flight until a
        // response tells, each start counted in flight.
        let mut r = Tokens::default();
        r.observe(0, requests_read((8, 0, "4s"), 0, 0));
        assert_eq!(r.fits(2 * S, 5, 0), Err(Hold::Refill(5 * S / 2)), "4 back");
        assert_eq!(r.fits(2 * S, 4, 0), Ok(()));
        for in_flight in 0..8 {
            assert_eq!(r.fits(4 * S, 1, in_flight), Ok(()), "start {in_flight}");
            assert_eq!(r.spend(4 * S, 1), 0);
        }
        assert_eq!(r.fits(4 * S, 1, 8), Err(Hold::Word(8 * S)), "the ninth");
        // A response to one of them tells of the bucket: 7 left, full in
        // 0.5 s, the other 7 in flight.
        r.observe(
            4 * S + 1,
            TokensRead {
                started: 4 * S,
                ..requests_read((8, 7, "500ms"), 7, 0)
            },
        );
        assert_eq!(
            r.fits(4 * S + 1, 1, 7),
            Err(Hold::Refill(4 * S + 1 + S / 2))
        );
    }

    #[test]
    fn against_a_requests_bucket_read_mid_refill_reading_it_so_spends_what_a_window_reading_leaves()
    {
        // A bucket of 60 requests a 30 s (2 a second), 12 left at the
        // start: in 20 s it gives 12 + 40. Each request costs 1.
        const S: u64 = 1_000_000_000;
        let (spent, refused) = against_a_bucket(true, 60, 12, || 1, 20 * S);
        assert_eq!(refused, 0);
        assert!(spent >= 48, "{spent} of 52");
        let (window, refused) = against_a_bucket(false, 60, 12, || 1, 20 * S);
        assert_eq!(refused, 0);
        assert!(window * 10 < spent * 8, "{window}, as a bucket {spent}");
    }

    #[test]
    fn where_every_reset_read_was_0_no_window_is_assumed() {
        // OpenAI's `reset-tokens: 0s`: no window to wait for the word of
        // (a wait that ended before it began spun the start for ever).
        let mut t = Tokens::default();
        t.observe(
            5,
            TokensRead {
                limit: Some(1000),
                ..read(quota(0, 0), 0, 0, 0)
            },
        );
        assert_eq!(t.fits(5, 900, 900), Ok(()));
    }

    #[test]
    fn a_response_read_after_others_is_lowered_by_what_they_spent() {
        // 1000 tokens a window; four requests of 200 start, and reach the
        // server in the order 2, 1, 4, 3: it answers 800, 600, 400, 200
        // remaining, and has 200 left.
        const S: u64 = 1_000_000_000;
        let mut t = Tokens::default();
        // 1's response is read first (2 to 4 in flight): 600 less 600.
        t.observe(S, read(quota(600, 9), 600, 0, S));
        assert_eq!(t.fits(S, 1, 0), Err(Hold::Reset(10 * S)), "nothing left");
        // 2's, read after 1's (3 and 4 in flight): 800 less 400 would be
        // two more requests where the server takes one; less the 200 of 1
        // read since 2 started, it is one.
        t.observe(S, read(quota(800, 9), 400, 200, S));
        assert_eq!(t.fits(S, 200, 0), Ok(()));
        assert_eq!(t.fits(S, 201, 0), Err(Hold::Reset(10 * S)));
        // A response read while no other was is the newest word: one that
        // shows less than is thought left (spent by others) lowers it.
        let mut t = Tokens::default();
        t.observe(S, read(quota(1000, 9), 0, 0, S));
        t.observe(S, read(quota(300, 9), 0, 0, S));
        assert_eq!(t.fits(S, 300, 0), Ok(()));
        assert_eq!(t.fits(S, 301, 0), Err(Hold::Reset(10 * S)));
        // So does one read after others, as far as it says.
        t.observe(S, read(quota(250, 9), 0, 100, S));
        assert_eq!(t.fits(S, 250, 0), Ok(()));
        assert_eq!(t.fits(S, 251, 0), Err(Hold::Reset(10 * S)));
        // Past the window's end, a response starts the next window.
        t.observe(11 * S, read(quota(1000, 5), 0, 0, 11 * S));
        assert_eq!(t.fits(11 * S, 1000, 0), Ok(()));
        // The requests' window: more remaining than it held, read after
        // others, is stale unless more remains even less what they spent.
        let mut w = QuotaWindow::default();
        assert!(matches!(
            w.observe(S, quota(2, 9).unwrap(), 0),
            QuotaReading::New(_)
        ));
        assert_eq!(w.observe(S, quota(5, 9).unwrap(), 3), QuotaReading::Stale);
        let q = w.observe(S, quota(1, 9).unwrap(), 1).quota().unwrap();
        assert_eq!(q.remaining, 0, "1 less the 1 read since");
        assert!(matches!(
            w.observe(S, quota(7, 9).unwrap(), 2),
            QuotaReading::New(_)
        ));
    }

    #[test]
    fn token_families_pace_the_budget_they_count() {
        let none = CostBudgets::default();
        assert_eq!(none.paced_by(IN_OUT), None);
        let cost = Cost::new(
            crate::key::KeySpec::new(crate::key::parse_key("2").unwrap(), None),
            b'\n',
        );
        let unnamed = CostBudgets::of(cost);
        assert_eq!(unnamed.paced_by(IN_OUT), Some(""));
        assert_eq!(unnamed.paced_by(IN), None);
        assert_eq!(unnamed.paced_by(OUT), None);
        assert_eq!(unnamed.cost("", b"a 40\n"), 40);
        assert_eq!(unnamed.cost(IN, b"a 40\n"), 0);
        assert_eq!(unnamed.costs(b"a 40"), [("", 40)]);
        let field = |f: &str| crate::cost::CostArg::Key(crate::key::parse_key(f).unwrap());
        let named = CostBudgets::of(
            Cost::with_budgets(
                vec![
                    (Some(IN.into()), field("2")),
                    (Some(OUT.into()), field("3")),
                ],
                &[Some(IN.into()), Some("out+in".into())],
                None,
                b'\n',
            )
            .unwrap(),
        );
        assert_eq!(named.paced_by(IN), Some(IN));
        assert_eq!(named.paced_by(IN_OUT), Some("out+in"));
        assert_eq!(named.cost("out+in", b"a 40 2\n"), 42);
        assert_eq!(named.costs(b"a 40 2"), [(IN, 40), ("out+in", 42)]);
        assert_eq!(named.paced_by(OUT), None);
    }

    #[test]
    fn cost_limits_of_one_name_spend_a_token_window_once() {
        let field = |f: &str| crate::cost::CostArg::Key(crate::key::parse_key(f).unwrap());
        let unnamed = CostBudgets::of(
            Cost::with_budgets(vec![(None, field("2"))], &[None, None], None, b'\n').unwrap(),
        );
        assert_eq!(unnamed.paced_by(IN_OUT), Some(""));
        assert_eq!(unnamed.costs(b"a 40"), [("", 40)]);
        let named = CostBudgets::of(
            Cost::with_budgets(
                vec![
                    (Some(IN.into()), field("2")),
                    (Some(OUT.into()), field("3")),
                ],
                &[Some(IN.into()), Some(OUT.into()), Some(IN.into())],
                None,
                b'\n',
            )
            .unwrap(),
        );
        assert_eq!(named.costs(b"a 40 2"), [(IN, 40), (OUT, 2)]);
    }
}
