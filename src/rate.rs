//! Rates: how many records may leave per period.
//!
//! A [`Rate`] is kept as an exact fraction, `count` records per `period_ns`
//! nanoseconds, so that long runs accumulate no rounding drift: the k-th
//! departure of a schedule is computed as `k * period_ns / count` rather than
//! by adding a rounded interval k times.

use std::fmt;
use std::time::Duration;

use crate::quantity::{parse_count, parse_size};
pub use crate::quantity::{LONGEST, LONGEST_TEXT};

/// A pacing rate: `count` records per `period_ns` nanoseconds, or unlimited.
///
/// Both numbers are at least 1 when the rate is limited. Decimal counts such
/// as `0.5/s` are scaled to whole numbers (`1` per `2 s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// No pacing: records leave as fast as stdout takes them.
    Unlimited,
    /// `count` records per `period_ns` nanoseconds.
    Limited {
        /// Records per period (≥ 1).
        count: u128,
        /// Length of the period in nanoseconds (≥ 1).
        period_ns: u128,
    },
}

impl Rate {
    /// One record per `interval`.
    ///
    /// # Errors
    /// A zero interval, or one longer than `LONGEST`.
    pub fn per_interval(interval: Duration) -> Result<Rate, String> {
        let ns = interval.as_nanos();
        if ns == 0 {
            return Err("the interval must be longer than zero".into());
        }
        if interval > LONGEST {
            return Err(format!("the interval is longer than {LONGEST_TEXT}"));
        }
        Ok(Rate::Limited {
            count: 1,
            period_ns: ns,
        })
    }

    /// Records per second as a float (infinite when unlimited), for display
    /// and statistics only; pacing never uses it.
    pub fn per_second(&self) -> f64 {
        match *self {
            Rate::Unlimited => f64::INFINITY,
            Rate::Limited { count, period_ns } => count as f64 * 1e9 / period_ns as f64,
        }
    }

    /// The rate exactly, as the command line takes it: a whole count per
    /// second, minute, hour or day (`10/s`, `100/min`), the smallest unit
    /// that gives one, else the fraction `COUNT/DURATION` (`3/7s`,
    /// `1/1s500ms`); `unit` after the count (` bytes`); `unlimited`.
    pub fn spelled(&self, unit: &str) -> String {
        let Rate::Limited { count, period_ns } = *self else {
            return self.to_string();
        };
        for (per, name) in [(1u128, "s"), (60, "min"), (3600, "h"), (86400, "d")] {
            let scaled = count.saturating_mul(per * 1_000_000_000);
            if scaled % period_ns == 0 {
                return format!("{}{unit}/{name}", scaled / period_ns);
            }
        }
        let period = u64::try_from(period_ns).map_or(LONGEST, Duration::from_nanos);
        format!("{count}{unit}/{}", crate::quantity::spell_duration(period))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::Unlimited => write!(f, "unlimited"),
            Rate::Limited { .. } => write!(f, "{}/s", trim_float(self.per_second())),
        }
    }
}

fn trim_float(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The accepted forms, for error messages.
pub const RATE_FORMS: &str =
    "COUNT[/UNIT] such as 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, 10, or inf";

/// Parse a rate: `COUNT` (per second), `COUNT/UNIT` or `COUNT/DURATION`, or
/// `inf` / `unlimited`.
///
/// `COUNT` is a positive decimal with up to 20 fractional digits; `UNIT` is a
/// bare humantime unit (`s`, `ms`, `min`, `h`, `d`, …) and `DURATION` any
/// humantime duration (`5s`, `250ms`, `1m30s`).
///
/// The rate is kept as the reduced fraction `count / period_ns`; a period
/// longer than `LONGEST` (`1/101y`, or `0.5/100y`, which is `1/200y`) or
/// a count above `u64::MAX` per period is beyond what the pacer computes
/// exactly, and is refused.
///
/// # Errors
/// A message naming what is wrong: a missing, zero, negative or malformed
/// count, an unknown unit, or a rate beyond those bounds.
///
/// # Examples
/// ```
/// use drip::testing::{parse_rate, Rate};
/// assert_eq!(parse_rate("90/min").unwrap().per_second(), 1.5);
/// assert_eq!(parse_rate("inf"), Ok(Rate::Unlimited));
/// assert!(parse_rate("10/fortnight").is_err());
/// ```
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let text = text.trim();
    if matches!(
        text.to_ascii_lowercase().as_str(),
        "inf" | "infinity" | "unlimited" | "max"
    ) {
        return Ok(Rate::Unlimited);
    }
    let (count_text, unit_text) = match text.split_once('/') {
        Some((c, u)) => (c.trim(), u.trim()),
        None => (text, "s"),
    };
    let (count, scale) = parse_decimal(count_text)?;
    if count == 0 {
        return Err("the count must be greater than zero".into());
    }
    let period = parse_period(unit_text)?;
    let period_ns = period.as_nanos();
    if period_ns == 0 {
        return Err("the period must be longer than zero".into());
    }
    // A period past u128 is ~10^20 times past the longest: too small.
    let scaled = period_ns.checked_mul(scale).ok_or_else(too_small)?;
    let (count, period_ns) = reduce(count, scaled);
    if period_ns > LONGEST.as_nanos() {
        // Less than one record per the longest period, or more precision
        // than a period of at most that holds.
        return match count.checked_mul(LONGEST.as_nanos()) {
            Some(most) if most < period_ns => Err(too_small()),
            _ if scale == 1 => Err(format!(
                "the period is longer than {LONGEST_TEXT} (one record per {}s at most)",
                LONGEST.as_secs()
            )),
            _ => Err(format!(
                "'{count_text}' has too many digits for a period of at most {LONGEST_TEXT}"
            )),
        };
    }
    if count > u128::from(u64::MAX) {
        return Err("too many records per period".into());
    }
    Ok(Rate::Limited { count, period_ns })
}

/// The accepted forms of a byte rate, for error messages.
pub const BYTE_RATE_FORMS: &str = "SIZE/UNIT such as 1MiB/s, 500KB/s, 10GB/h or 4096/250ms";

/// Parse a byte rate: `SIZE/UNIT` or `SIZE/DURATION`, where SIZE is a
/// number of bytes with an optional unit (`KB` is 1000 bytes, `KiB` 1024).
///
/// # Errors
/// A message naming what is wrong: a missing, zero, too large (over
/// 2^64 − 1 bytes) or malformed size, or an unknown unit.
///
/// # Examples
/// ```
/// use drip::testing::parse_byte_rate;
/// assert_eq!(parse_byte_rate("1MiB/s").unwrap().per_second(), 1048576.0);
/// assert!(parse_byte_rate("1MiB").is_err());
/// ```
pub fn parse_byte_rate(text: &str) -> Result<Rate, String> {
    let Some((size_text, unit_text)) = text.trim().split_once('/') else {
        return Err("missing '/UNIT' (a byte rate needs its period)".into());
    };
    let size = parse_size::parse_size(size_text.trim()).map_err(|e| match e {
        parse_size::Error::PosOverflow => format!(
            "'{}' is too large: at most {} bytes",
            size_text.trim(),
            u64::MAX
        ),
        _ => format!("'{}' is not a size", size_text.trim()),
    })?;
    if size == 0 {
        return Err("the size must be greater than zero".into());
    }
    let period_ns = parse_period(unit_text.trim())?.as_nanos();
    if period_ns == 0 {
        return Err("the period must be longer than zero".into());
    }
    let (count, period_ns) = reduce(u128::from(size), period_ns);
    if period_ns > LONGEST.as_nanos() {
        return Err(format!("the period is longer than {LONGEST_TEXT}"));
    }
    Ok(Rate::Limited { count, period_ns })
}

/// Parse a rate with its burst, as `--rate` takes it: `RATE` or
/// `RATE:BURST` (a count of records); an unlimited rate takes no burst.
///
/// # Errors
/// As [`parse_rate`], naming the accepted forms; a bad burst; a burst
/// after `inf`.
pub fn parse_rate_burst(text: &str) -> Result<(Rate, Option<u64>), String> {
    let (rate_text, burst) = match text.rsplit_once(':') {
        Some((rate, burst)) => (rate, Some(parse_burst(burst)?)),
        None => (text, None),
    };
    let rate =
        parse_rate(rate_text).map_err(|why| format!("{why} (expected {RATE_FORMS}[:BURST])"))?;
    if rate == Rate::Unlimited && burst.is_some() {
        return Err("an unlimited rate takes no burst".into());
    }
    Ok((rate, burst))
}

/// Parse a key's limit, as `--key-rate` takes it: as [`parse_rate_burst`],
/// but a limit (not `inf`).
///
/// # Errors
/// As [`parse_rate_burst`], and an unlimited rate.
pub fn parse_key_rate(text: &str) -> Result<(Rate, Option<u64>), String> {
    let forms = RATE_FORMS.trim_end_matches(", or inf");
    match parse_rate_burst(text) {
        Ok((Rate::Unlimited, _)) => Err(format!(
            "each key needs a limit, not inf (expected {forms}[:BURST])"
        )),
        Ok(rate) => Ok(rate),
        Err(why) => Err(why.replace(RATE_FORMS, forms)),
    }
}

/// Parse a byte rate with its burst, as `--byte-rate` takes it:
/// `SIZE/UNIT` or `SIZE/UNIT:BURST` (BURST a size in bytes, default 1).
///
/// # Errors
/// As [`parse_byte_rate`], naming the accepted forms; a bad burst.
pub fn parse_byte_rate_burst(text: &str) -> Result<(Rate, u64), String> {
    let (rate_text, burst) = match text.rsplit_once(':') {
        Some((rate, burst)) => (rate, parse_size(burst)? as u64),
        None => (text, 1),
    };
    let rate = parse_byte_rate(rate_text)
        .map_err(|why| format!("{why} (expected {BYTE_RATE_FORMS}[:BURST])"))?;
    Ok((rate, burst))
}

/// Parse `--cost-rate`: `N/UNIT` or `N/UNIT:BURST` (BURST a count of cost
/// units, default 1).
///
/// # Errors
/// An invalid rate or burst, or `inf` (a cost limit needs a rate).
pub fn parse_cost_rate_burst(text: &str) -> Result<(Rate, u64), String> {
    let (rate_text, burst) = match text.rsplit_once(':') {
        Some((rate, burst)) => (rate, parse_burst(burst)?),
        None => (text, 1),
    };
    match parse_rate(rate_text) {
        Ok(Rate::Unlimited) => Err(format!(
            "a cost limit needs a rate, not inf (expected {RATE_FORMS}[:BURST])"
        )),
        Ok(rate) => Ok((rate, burst)),
        Err(why) => Err(format!("{why} (expected {RATE_FORMS}[:BURST])")),
    }
}

/// Parse the burst after a colon: a count of records.
fn parse_burst(text: &str) -> Result<u64, String> {
    parse_count(text).map_err(|why| format!("burst '{text}': {why}"))
}

/// A unit (`s`, `min`) or a duration (`5s`, `250ms`).
fn parse_period(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("missing unit after '/'".into());
    }
    let with_number = if text.starts_with(|c: char| c.is_ascii_digit()) {
        text.to_string()
    } else {
        format!("1{text}")
    };
    humantime::parse_duration(&with_number).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            format!("the period is out of range (1ns to {LONGEST_TEXT})")
        }
        _ => format!("unknown unit '{text}'"),
    })
}

/// Why a rate below one record per [`LONGEST`] is refused.
fn too_small() -> String {
    format!(
        "the rate is too small: the smallest is one record per {LONGEST_TEXT} ({}s)",
        LONGEST.as_secs()
    )
}

/// Parse a positive decimal into `(digits, 10^fraction_digits)`.
fn parse_decimal(text: &str) -> Result<(u128, u128), String> {
    if text.starts_with('-') {
        return Err("the count must be greater than zero".into());
    }
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !all_digits(int) || !all_digits(frac) {
        return Err(format!("'{text}' is not a number"));
    }
    // Below 10^-20 per nanosecond at most: under one record per LONGEST.
    if int.bytes().all(|b| b == b'0') && frac.len() > 20 && frac[..20].bytes().all(|b| b == b'0') {
        return Err(too_small());
    }
    // At most 38 digits in all: they fit a u128.
    if int.len() > 18 || frac.len() > 20 {
        return Err(format!("'{text}' has too many digits"));
    }
    let digits: u128 = format!("{int}{frac}").parse().unwrap_or(0);
    Ok((digits, 10u128.pow(frac.len() as u32)))
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn reduce(count: u128, period_ns: u128) -> (u128, u128) {
    let g = gcd(count, period_ns).max(1);
    (count / g, period_ns / g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(n: u128) -> u128 {
        n * 1_000_000_000
    }

    fn limited(count: u128, period_ns: u128) -> Rate {
        let (count, period_ns) = reduce(count, period_ns);
        Rate::Limited { count, period_ns }
    }

    #[test]
    fn parses_units_and_durations() {
        assert_eq!(parse_rate("10/s"), Ok(limited(10, seconds(1))));
        assert_eq!(parse_rate("90/min"), Ok(limited(90, seconds(60))));
        assert_eq!(parse_rate("2/h"), Ok(limited(2, seconds(3600))));
        assert_eq!(parse_rate("1/d"), Ok(limited(1, seconds(86_400))));
        assert_eq!(parse_rate("3/5s"), Ok(limited(3, seconds(5))));
        assert_eq!(parse_rate("1/250ms"), Ok(limited(1, 250_000_000)));
        assert_eq!(parse_rate("10"), Ok(limited(10, seconds(1))));
        assert_eq!(parse_rate("0.5/s"), Ok(limited(1, seconds(2))));
        assert_eq!(parse_rate("2.5/min"), Ok(limited(5, seconds(120))));
        assert_eq!(parse_rate("1000000/s"), Ok(limited(1, 1000)));
    }

    #[test]
    fn rate_errors_show_the_accepted_form() {
        let e = parse_rate_burst("10/fortnight").unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
        assert!(e.contains("10/s"), "{e}");
    }

    #[test]
    fn parses_unlimited() {
        for text in ["inf", "INF", "unlimited", "infinity"] {
            assert_eq!(parse_rate(text), Ok(Rate::Unlimited), "{text}");
        }
    }

    #[test]
    fn rejects_bad_rates() {
        for text in [
            "0",
            "0/s",
            "0.0/s",
            "-1/s",
            "10/fortnight",
            "",
            "/s",
            "abc",
            "10/",
            "1e3/s",
            "1/0s",
        ] {
            assert!(parse_rate(text).is_err(), "{text:?} should be rejected");
        }
    }

    #[test]
    fn byte_rates() {
        assert_eq!(parse_byte_rate("1MiB/s"), Ok(limited(1 << 20, seconds(1))));
        assert_eq!(
            parse_byte_rate("500KB/min"),
            Ok(limited(500_000, seconds(60)))
        );
        assert_eq!(
            parse_byte_rate("4096/250ms"),
            Ok(limited(4096, 250_000_000))
        );
        for text in [
            "1MiB",
            "0/s",
            "lots/s",
            "1MiB/fortnight",
            "1MiB/0s",
            "1/101y",
        ] {
            assert!(
                parse_byte_rate(text).is_err(),
                "{text:?} should be rejected"
            );
        }
    }

    #[test]
    fn rejects_periods_beyond_the_longest_duration() {
        assert_eq!(parse_rate("1/100y"), Ok(limited(1, LONGEST.as_nanos())));
        assert_eq!(parse_rate("3/100y"), Ok(limited(3, LONGEST.as_nanos())));
        for text in [
            "1/101y",
            "0.5/100y",
            "1/18446744074s",
            "1/99999999999999999999y",
            "0.000000001/4y",
        ] {
            let e = parse_rate(text).unwrap_err();
            assert!(e.contains("100 years"), "{text}: {e}");
        }
        // Eighteen digits and nine decimals per nanosecond: more than the
        // u64 count the pacer multiplies by.
        assert!(parse_rate("999999999999999999.999999999/1ns").is_err());
        assert!(parse_rate("999999999999999999/1ns").is_ok());
    }

    #[test]
    fn interval_has_a_ceiling() {
        assert!(Rate::per_interval(LONGEST).is_ok());
        assert!(Rate::per_interval(LONGEST + Duration::from_nanos(1)).is_err());
    }

    #[test]
    fn displays_per_second() {
        assert_eq!(parse_rate("90/min").unwrap().to_string(), "1.5/s");
        assert_eq!(parse_rate("inf").unwrap().to_string(), "unlimited");
        assert_eq!(parse_rate("1/250ms").unwrap().per_second(), 4.0);
    }

    #[test]
    fn interval_is_one_record_per_duration() {
        let rate = Rate::per_interval(Duration::from_millis(100)).unwrap();
        assert_eq!(rate.per_second(), 10.0);
        assert!(Rate::per_interval(Duration::ZERO).is_err());
    }
}
