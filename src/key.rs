//! Keys: which part of a record names its subject (a host, a user, a
//! tenant), for limits per key (`--key`).
//!
//! A key is a field by number (`--key 3`, fields split on runs of blanks,
//! or on each `--field-separator` byte), or the first capture group of a
//! regular expression (`--key '^https?://([^/:]+)'`, the `regex` crate's
//! syntax, matched against the record's bytes). A record with no such field,
//! or that the expression does not match (or whose group takes no part in
//! the match), has no key: it goes to the shared "no key" lane.
//!
//! Pure: no threads, no clock, no I/O.

use regex::bytes::Regex;

use crate::scan;

/// How a record's key is found.
#[derive(Debug, Clone)]
pub enum KeySpec {
    /// Field `index` (1-based), fields separated by `separator`, or by runs
    /// of blanks (space, tab, CR) when `None`, as awk does.
    Field {
        /// Which field, from 1.
        index: usize,
        /// One separator byte; `None` for blanks.
        separator: Option<u8>,
    },
    /// The first capture group of this expression (it has one).
    Pattern(Regex),
}

/// `--key` as given, before `--field-separator` is known.
#[derive(Debug, Clone)]
pub enum KeyArg {
    /// A field number (≥ 1).
    Field(usize),
    /// A regular expression with at least one capture group.
    Pattern(Regex),
}

/// Parse `--key`: digits are a field number (from 1); anything else is a
/// regular expression whose first capture group is the key.
///
/// # Errors
/// Field 0, an invalid expression, or an expression without a group.
pub fn parse_key(text: &str) -> Result<KeyArg, String> {
    parse_field_or_group(text, "'^https?://([^/:]+)', for the key")
}

/// Parse a field number (from 1) or a regular expression with a capture
/// group, as `--key` and `--cost` take them; `group_example` ends the error
/// for an expression without a group (an example and what the group finds).
///
/// # Errors
/// Field 0, an invalid expression, or an expression without a group.
pub fn parse_field_or_group(text: &str, group_example: &str) -> Result<KeyArg, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<usize>() {
            Ok(0) => Err("field numbers start at 1".into()),
            Ok(n) => Ok(KeyArg::Field(n)),
            Err(_) => Err("field number too large".into()),
        };
    }
    let re = Regex::new(text).map_err(|e| {
        let why = e.to_string();
        let last = why.lines().last().unwrap_or("invalid").trim();
        let last = last.strip_prefix("error: ").unwrap_or(last).to_string();
        format!("invalid regular expression: {last}")
    })?;
    if re.captures_len() < 2 {
        return Err(format!(
            "the expression needs a capture group, such as {group_example}"
        ));
    }
    Ok(KeyArg::Pattern(re))
}

impl KeySpec {
    /// The spec for `arg`, fields split on `separator` (blanks when `None`).
    pub fn new(arg: KeyArg, separator: Option<u8>) -> KeySpec {
        match arg {
            KeyArg::Field(index) => KeySpec::Field { index, separator },
            KeyArg::Pattern(re) => KeySpec::Pattern(re),
        }
    }

    /// The key of `record` (its bytes without the delimiter), or `None`.
    pub fn key<'a>(&self, record: &'a [u8]) -> Option<&'a [u8]> {
        match self {
            KeySpec::Field { index, separator } => match separator {
                Some(sep) => record.split(|b| b == sep).nth(index - 1),
                None => blank_field(record, *index),
            },
            KeySpec::Pattern(re) => re.captures(record)?.get(1).map(|m| m.as_bytes()),
        }
    }
}

/// Field `index` (from 1) of `record`, fields separated by runs of blanks
/// (space, tab, CR), leading and trailing blanks ignored, as awk splits.
/// A plain loop but for the field's end ([`field_end`]): this runs for
/// every record with `--key N`.
fn blank_field(record: &[u8], index: usize) -> Option<&[u8]> {
    let mut at = 0;
    let mut left = index;
    loop {
        while at < record.len() && is_blank(record[at]) {
            at += 1;
        }
        if at == record.len() {
            return None;
        }
        let start = at;
        at = field_end(record, start);
        left -= 1;
        if left == 0 {
            return Some(&record[start..at]);
        }
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

/// The first blank of `record` at or after `from`, or its length. Eight
/// bytes a step ([`scan::matches`] for each blank), and the last step on
/// the record's last eight bytes, so a record of eight bytes or more takes
/// no byte-by-byte loop: a field and its record are mostly short.
#[inline]
fn field_end(record: &[u8], from: usize) -> usize {
    const BLANKS: [u64; 3] = [scan::splat(b' '), scan::splat(b'\t'), scan::splat(b'\r')];
    let blanks = |word: &[u8]| BLANKS.iter().fold(0, |m, &b| m | scan::matches(word, b));
    let len = record.len();
    if len < 8 {
        return (from..len).find(|&i| is_blank(record[i])).unwrap_or(len);
    }
    let mut at = from;
    while at + 8 <= len {
        let found = blanks(&record[at..at + 8]);
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    if at == len {
        return len;
    }
    // The last eight bytes, less the `at - (len - 8)` (1 to 7) looked at.
    let found = blanks(&record[len - 8..]) & (u64::MAX << ((at - (len - 8)) * 8));
    if found == 0 {
        len
    } else {
        len - 8 + (found.trailing_zeros() / 8) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str, separator: Option<u8>) -> KeySpec {
        KeySpec::new(parse_key(text).unwrap(), separator)
    }

    proptest::proptest! {
        /// The loop splits as awk does, the plain way: split on each blank
        /// and skip the empty pieces. Records of up to 40 bytes (several
        /// words, and a last word that overlaps), among bytes one bit from
        /// a blank.
        #[test]
        fn blank_fields_match_the_plain_split(
            record in proptest::collection::vec(
                proptest::sample::select(vec![
                    b'a', b'b', b' ', b'\t', b'\r', b',', 0xa0, 0x89, 0x8d, b'!', 0x08, 0x0c,
                    0x00, 0xff,
                ]),
                0..40,
            ),
            index in 1usize..6,
        ) {
            let plain = record
                .split(|b| matches!(b, b' ' | b'\t' | b'\r'))
                .filter(|f| !f.is_empty())
                .nth(index - 1);
            proptest::prop_assert_eq!(blank_field(&record, index), plain);
        }
    }

    #[test]
    fn fields_split_on_blanks_by_default() {
        let s = spec("2", None);
        assert_eq!(s.key(b"  a \t b  c"), Some(&b"b"[..]));
        assert_eq!(s.key(b"a b\r"), Some(&b"b"[..]));
        assert_eq!(s.key(b"only"), None);
        assert_eq!(s.key(b""), None);
        assert_eq!(spec("1", None).key(b"GET /x"), Some(&b"GET"[..]));
    }

    #[test]
    fn fields_split_on_each_separator() {
        let s = spec("3", Some(b','));
        assert_eq!(s.key(b"a,b,c,d"), Some(&b"c"[..]));
        assert_eq!(s.key(b"a,,c"), Some(&b"c"[..]));
        assert_eq!(s.key(b"a,b,"), Some(&b""[..]));
        assert_eq!(s.key(b"a,b"), None);
    }

    #[test]
    fn a_pattern_keys_on_its_first_group() {
        let s = spec("^https?://([^/:]+)", None);
        assert_eq!(
            s.key(b"https://api.example.com:8443/v1"),
            Some(&b"api.example.com"[..])
        );
        assert_eq!(s.key(b"http://a/b"), Some(&b"a"[..]));
        assert_eq!(s.key(b"ftp://a/b"), None);
        // A group that takes no part in the match gives no key.
        assert_eq!(spec("x(y)?", None).key(b"x"), None);
        // Bytes that are not UTF-8 are matched as bytes.
        assert_eq!(spec("^(.)", None).key(b"\xff\n"), None);
        assert_eq!(spec("(?-u)^(.)", None).key(b"\xffz"), Some(&b"\xff"[..]));
    }

    #[test]
    fn bad_keys_say_why() {
        assert_eq!(parse_key("0").unwrap_err(), "field numbers start at 1");
        assert!(parse_key("99999999999999999999999")
            .unwrap_err()
            .contains("too large"));
        let e = parse_key("(unclosed").unwrap_err();
        assert!(e.starts_with("invalid regular expression"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(parse_key("^https?://")
            .unwrap_err()
            .contains("capture group"));
    }
}
