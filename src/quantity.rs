//! Quantities given on the command line: counts, sizes in bytes, a byte,
//! and durations of at most [`LONGEST`]; their parsers and bounds.

use std::time::Duration;

/// The longest duration drip accepts anywhere (an interval, a rate's
/// period, `--max-wait`, `--stats-interval`): 100 years of 365.25 days.
/// Deadlines are nanoseconds in a `u64`, which would wrap after 584 years.
pub const LONGEST: Duration = Duration::from_secs(100 * 31_557_600);

/// [`LONGEST`] as written in messages and documentation.
pub const LONGEST_TEXT: &str = "100 years";

/// `duration` exactly, in days, hours, minutes, seconds, ms, us and ns
/// (`1d2h`, `2ms500us`, `1ns`; `0s` for none): as the duration parser reads
/// it back, with no months or years, whose length a reader must guess.
pub fn spell_duration(duration: Duration) -> String {
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let mut left = duration.as_nanos();
    if left == 0 {
        return "0s".into();
    }
    let mut text = String::new();
    for (ns, unit) in UNITS {
        if left >= ns {
            text.push_str(&format!("{}{unit}", left / ns));
            left %= ns;
        }
    }
    text
}

/// Parse a count of at least 1.
///
/// # Errors
/// Zero, a negative number, not a whole number, or more than `u64::MAX`.
pub fn parse_count(text: &str) -> Result<u64, String> {
    parse_whole(text, 1, u64::MAX).map_err(|e| match e {
        WholeError::NotWhole => "expected a whole number of at least 1".into(),
        e => e.to_string(),
    })
}

/// Parse a count of at least 1 that fits a `usize`.
///
/// # Errors
/// As [`parse_count`], or too large for this machine.
pub fn parse_count_usize(text: &str) -> Result<usize, String> {
    let most = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    parse_whole(text, 1, most)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .map_err(|e| match e {
            WholeError::NotWhole => "expected a whole number of at least 1".into(),
            e => e.to_string(),
        })
}

/// Why a whole number was refused ([`parse_whole`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WholeError {
    /// Not digits (nor `-` and digits).
    NotWhole,
    /// A whole number below the least accepted.
    Small(u64),
    /// A whole number above the largest accepted.
    Large(u64),
}

impl std::fmt::Display for WholeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WholeError::NotWhole => write!(f, "expected a whole number"),
            WholeError::Small(least) => write!(f, "must be at least {least}"),
            WholeError::Large(most) => write!(f, "too large: at most {most}"),
        }
    }
}

/// Parse a whole number from `least` to `most`, telling a number out of
/// range (however many digits it has) from text that is no number.
///
/// # Errors
/// [`WholeError`]: not a whole number, or below `least`, or above `most`.
pub fn parse_whole(text: &str, least: u64, most: u64) -> Result<u64, WholeError> {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    // A leading `+`, as the standard parser takes it.
    let text = text.strip_prefix('+').unwrap_or(text);
    if text.strip_prefix('-').is_some_and(digits) {
        return Err(WholeError::Small(least));
    }
    if !digits(text) {
        return Err(WholeError::NotWhole);
    }
    // All digits: a failure to parse is an overflow.
    match text.parse::<u64>() {
        Ok(n) if n < least => Err(WholeError::Small(least)),
        Ok(n) if n <= most => Ok(n),
        _ => Err(WholeError::Large(most)),
    }
}

/// Parse a size in bytes: `4096`, `512KiB`, `64MiB`, `1GB` (`KB` is 1000
/// bytes, `KiB` 1024).
///
/// # Errors
/// Not a size, zero, or too large for this machine.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let too_large = || format!("too large: at most {} bytes", usize::MAX);
    let n = parse_size::parse_size(text).map_err(|e| match e {
        parse_size::Error::PosOverflow => too_large(),
        _ => "expected a size such as 4096, 512KiB or 64MiB".to_string(),
    })?;
    if n == 0 {
        return Err("must be at least 1 byte".into());
    }
    usize::try_from(n).map_err(|_| too_large())
}

/// Parse a byte (a delimiter, a field separator): one byte, or `\n`, `\t`,
/// `\r`, `\0`, `\\`, `\xHH`.
///
/// # Errors
/// Anything else, naming the accepted forms.
pub fn parse_byte(text: &str) -> Result<u8, String> {
    const FORMS: &str = "expected one byte such as ',' or an escape such as '\\t', '\\0', '\\x1e'";
    let bytes = text.as_bytes();
    match bytes {
        [b] => Ok(*b),
        [b'\\', b'n'] => Ok(b'\n'),
        [b'\\', b't'] => Ok(b'\t'),
        [b'\\', b'r'] => Ok(b'\r'),
        [b'\\', b'0'] => Ok(0),
        [b'\\', b'\\'] => Ok(b'\\'),
        [b'\\', b'x', hex @ ..] if hex.len() == 2 => std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| FORMS.to_string()),
        _ => Err(FORMS.into()),
    }
}

/// Parse a humantime duration (`250ms`, `2s`, `1m30s`) of at most
/// [`LONGEST`] (100 years): longer ones would wrap drip's deadlines.
///
/// # Errors
/// Not a duration, or longer than [`LONGEST`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| duration_error(text, &e))?;
    if d > LONGEST {
        return Err(format!(
            "must be at most {LONGEST_TEXT} ({}s)",
            LONGEST.as_secs()
        ));
    }
    Ok(d)
}

/// What is wrong with `text`, which humantime refused with `error`, in
/// drip's words: negative, too long, an unknown unit, or no duration.
pub fn duration_error(text: &str, error: &humantime::DurationError) -> String {
    const FORMS: &str = "expected a duration such as 100ms, 2s, 1m";
    let text = text.trim();
    if text.starts_with('-') {
        return "a duration cannot be negative".into();
    }
    match error {
        humantime::DurationError::NumberOverflow => {
            format!("must be at most {LONGEST_TEXT} ({}s)", LONGEST.as_secs())
        }
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            format!("a unit is needed, such as {text}s ({FORMS})")
        }
        humantime::DurationError::UnknownUnit { unit, .. } => {
            format!("unknown unit '{unit}' ({FORMS})")
        }
        _ => FORMS.into(),
    }
}

/// Parse a non-zero duration of at most [`LONGEST`].
///
/// # Errors
/// As [`parse_duration`], or zero.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err("must be longer than zero (expected a duration such as 100ms, 2s, 1m)".into());
    }
    Ok(d)
}

/// A bound given as a number of records, or as a duration: what the
/// schedule drains in that time (`--capacity 30s`, `--key-capacity 5m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// This many records (≥ 1).
    Count(usize),
    /// As many as the tightest limit lets go in this time (> 0).
    Time(Duration),
}

/// The multipliers a count in a bound may carry: decimal, as `10k` records
/// are ten thousand (`m` is no multiplier: a duration's minutes).
const COUNT_SUFFIXES: [(char, u32); 4] = [('k', 3), ('K', 3), ('M', 6), ('G', 9)];

/// What a bound is, in its errors.
const BOUND_FORMS: &str =
    "expected a number of records (1000, 10k, 2M) or a duration (30s, 5m, 1h)";

/// Parse a bound: a count of at least 1 (`1000`; `10k`, `2M`, `1G` are
/// 10^3, 10^6 and 10^9 records, and `1.5k` is 1500), or a duration of at
/// most [`LONGEST`] (`30s`, `5m`, `1h`; a month spelled `month` or
/// `months`, since `M` is a million here).
///
/// # Errors
/// Neither a count nor a duration, zero, a count that is not whole
/// (`1.2345k`), `M` among a duration's units, or longer than
/// [`LONGEST`].
pub fn parse_bound(text: &str) -> Result<Bound, String> {
    let number = text.strip_prefix('-').unwrap_or(text);
    if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
        return parse_count_usize(text).map(Bound::Count);
    }
    if text.starts_with('-') {
        return Err("cannot be negative".into());
    }
    if let Some(count) = suffixed_count(text) {
        return count.map(Bound::Count);
    }
    // humantime reads `M` as a month: here it is a million, so a duration
    // with it is no duration (`1M2d`).
    if text
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|unit| unit == "M")
    {
        return Err(format!(
            "M is a million records (2M); a month is spelled month ({BOUND_FORMS})"
        ));
    }
    match humantime::parse_duration(text) {
        Ok(_) => parse_interval(text).map(Bound::Time),
        Err(humantime::DurationError::UnknownUnit { unit, .. }) if unit.starts_with("mo") => Err(
            format!("unknown unit '{unit}': a month is spelled month or months ({BOUND_FORMS})"),
        ),
        Err(humantime::DurationError::UnknownUnit { unit, .. }) if !unit.is_empty() => {
            Err(format!("unknown unit '{unit}' ({BOUND_FORMS})"))
        }
        Err(_) => Err(BOUND_FORMS.into()),
    }
}

/// A count with a decimal multiplier (`10k`, `2M`, `1.5G`, `+3k`):
/// `None` when `text` is not one; else the count, or why it is refused
/// (not whole, zero, too large).
fn suffixed_count(text: &str) -> Option<Result<usize, String>> {
    let last = text.chars().last()?;
    let (_, exponent) = COUNT_SUFFIXES.iter().find(|(c, _)| *c == last)?;
    let number = &text[..text.len() - 1];
    let number = number.strip_prefix('+').unwrap_or(number);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let most = u128::try_from(usize::MAX).unwrap_or(u128::MAX);
    let too_large = || format!("too large: at most {most}");
    // Digits past the multiplier's must be zeros: `1.5k` is 1500,
    // `1.2345k` no whole count.
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > *exponent as usize {
        return Some(Err(format!(
            "{text} is no whole number of records ({BOUND_FORMS})"
        )));
    }
    let scale = 10u128.pow(*exponent);
    let shift = 10u128.pow(*exponent - fraction.len() as u32);
    let count = whole
        .parse::<u128>()
        .ok()
        .and_then(|w| w.checked_mul(scale))
        .and_then(|w| w.checked_add(fraction.parse::<u128>().unwrap_or(0) * shift));
    Some(match count {
        None => Err(too_large()),
        Some(0) => Err("must be at least 1".into()),
        Some(n) if n > most => Err(too_large()),
        Some(n) => Ok(usize::try_from(n).expect("at most usize::MAX")),
    })
}

/// How many units `per_period` units every `period_ns` let go in
/// `duration`: ⌊per_period × duration / period⌋, exact.
pub fn drained(per_period: u128, period_ns: u128, duration: Duration) -> u128 {
    per_period.saturating_mul(duration.as_nanos()) / period_ns.max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_duration_is_spelled_exactly_without_months_or_years() {
        for (ns, text) in [
            (0, "0s"),
            (1, "1ns"),
            (2_500_000, "2ms500us"),
            (90_000_000_000, "1m30s"),
            (40 * 86_400_000_000_000, "40d"),
            (100 * 86_400_000_000_000 + 1, "100d1ns"),
        ] {
            let d = Duration::from_nanos(ns);
            assert_eq!(spell_duration(d), text);
            assert_eq!(parse_duration(text).ok(), Some(d), "{text}");
        }
    }

    use super::*;

    #[test]
    fn a_whole_number_may_carry_a_plus_sign() {
        assert_eq!(parse_whole("+5", 1, 10), Ok(5));
        assert_eq!(parse_count("+12"), Ok(12));
        assert_eq!(parse_whole("+", 1, 10), Err(WholeError::NotWhole));
        assert_eq!(parse_whole("+11", 1, 10), Err(WholeError::Large(10)));
    }

    #[test]
    fn bounds_are_counts_or_durations() {
        assert_eq!(parse_bound("300"), Ok(Bound::Count(300)));
        assert_eq!(parse_bound("30s"), Ok(Bound::Time(Duration::from_secs(30))));
        assert_eq!(
            parse_bound("1h"),
            Ok(Bound::Time(Duration::from_secs(3600)))
        );
        assert!(parse_bound("0").is_err());
        assert!(parse_bound("0s").is_err());
        assert!(parse_bound("-3").is_err());
        assert!(parse_bound("lots").unwrap_err().contains("duration (30s"));
        assert!(parse_bound("2mo").unwrap_err().contains("spelled month"));
        assert_eq!(drained(10, 1_000_000_000, Duration::from_secs(3)), 30);
        assert_eq!(drained(1, 60_000_000_000, Duration::from_secs(30)), 0);
    }

    #[test]
    fn a_bound_counts_thousands_millions_and_billions() {
        for (text, n) in [
            ("10k", 10_000),
            ("10K", 10_000),
            ("2M", 2_000_000),
            ("1G", 1_000_000_000),
            ("1.5k", 1500),
            ("0.5M", 500_000),
            ("2.000k", 2000),
            ("+3k", 3000),
        ] {
            assert_eq!(parse_bound(text), Ok(Bound::Count(n)), "{text}");
        }
        assert!(parse_bound("1.2345k")
            .unwrap_err()
            .contains("no whole number"));
        assert!(parse_bound("0k").unwrap_err().contains("at least 1"));
        assert!(parse_bound("0.0001k").is_err());
        assert!(parse_bound("-2M").unwrap_err().contains("negative"));
        assert!(parse_bound("99999999999999999999999G")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_bound("k").is_err());
        assert!(parse_bound(".5k").is_err());
    }

    #[test]
    fn a_bound_keeps_durations_and_spells_months_out() {
        let minutes = Bound::Time(Duration::from_secs(120));
        assert_eq!(parse_bound("2m"), Ok(minutes));
        assert_eq!(parse_bound("2min"), Ok(minutes));
        assert_eq!(
            parse_bound("2d"),
            Ok(Bound::Time(Duration::from_secs(2 * 86_400)))
        );
        let month = humantime::parse_duration("1month").unwrap();
        assert_eq!(parse_bound("1month"), Ok(Bound::Time(month)));
        assert_eq!(parse_bound("2months"), Ok(Bound::Time(month * 2)));
        // M is a million, never a month, even among other units.
        assert!(parse_bound("1M2d").unwrap_err().contains("million"));
    }

    #[test]
    fn bytes() {
        assert_eq!(parse_byte(","), Ok(b','));
        assert_eq!(parse_byte("\\t"), Ok(b'\t'));
        assert_eq!(parse_byte("\\0"), Ok(0));
        assert_eq!(parse_byte("\\x1e"), Ok(0x1e));
        assert!(parse_byte("ab").is_err());
        assert!(parse_byte("\\xZZ").is_err());
        assert!(parse_byte("").is_err());
    }

    #[test]
    fn sizes_and_counts() {
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_count("0").is_err());
        assert!(parse_count("-3").is_err());
        assert_eq!(parse_count_usize("7"), Ok(7));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_interval("100ms"), Ok(Duration::from_millis(100)));
        assert!(parse_interval("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn durations_have_a_ceiling() {
        assert_eq!(parse_duration("100y"), Ok(LONGEST));
        for text in ["100y 1ns", "101y", "18446744073s", "18446744074s"] {
            let e = parse_interval(text).unwrap_err();
            assert!(e.contains("at most 100 years"), "{text}: {e}");
        }
    }
}
