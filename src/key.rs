//! Keys: which part of a record names its subject (a host, a user, a
//! tenant), for limits per key (`--key`).
//!
//! A key is a field by number (`--key 3`, fields split on runs of blanks,
//! or on each `--field-separator` byte), or the first capture group of a
//! regular expression (`--key '^user=([^ ]+)'`, the `regex` crate's
//! syntax, matched against the record's bytes). A record with no such field,
//! or that the expression does not match (or whose group takes no part in
//! the match), has no key: it goes to the shared "no key" lane.
//!
//! The built-in host key (`--key host`, or `--key host:N` for the URL in
//! field N) is the host of the URL the record holds, read by a URL parser
//! and written in one spelling ([`crate::host`]): every spelling of one
//! host is one key, and a URL's user name and password are never part of
//! it. A record that is not a URL with a host has no key.
//!
//! Pure: no threads, no clock, no I/O.

use std::borrow::Cow;

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
    /// The host of the URL that is the record (blanks around it ignored),
    /// or that is field `index` (fields as for [`KeySpec::Field`]), as
    /// [`crate::host::host_key`] spells it.
    Host {
        /// Which field holds the URL, from 1; `None`: the whole record.
        index: Option<usize>,
        /// One separator byte; `None` for blanks.
        separator: Option<u8>,
    },
}

/// `--key` as given, before `--field-separator` is known.
#[derive(Debug, Clone)]
pub enum KeyArg {
    /// A field number (≥ 1).
    Field(usize),
    /// A regular expression with at least one capture group.
    Pattern(Regex),
    /// The host of a URL: the whole record's (`None`) or field N's.
    Host(Option<usize>),
}

impl KeyArg {
    /// Whether the key is found among fields (a field number, or the
    /// host of a field's URL), so `--field-separator` means something.
    pub fn splits_fields(&self) -> bool {
        matches!(self, KeyArg::Field(_) | KeyArg::Host(Some(_)))
    }
}

/// Parse `--key`: `host` is the host of the URL the record is, `host:N`
/// the host of the URL in field N; digits are a field number (from 1);
/// anything else is a regular expression whose first capture group is
/// the key.
///
/// # Errors
/// Field 0, an invalid expression, or an expression without a group.
pub fn parse_key(text: &str) -> Result<KeyArg, String> {
    if text == "host" {
        return Ok(KeyArg::Host(None));
    }
    if let Some(field) = text.strip_prefix("host:") {
        return match parse_field_or_group(field, "") {
            Ok(KeyArg::Field(n)) => Ok(KeyArg::Host(Some(n))),
            Err(e) if e.starts_with("field") => Err(format!("host:{field}: {e}")),
            _ => Err(format!(
                "host:{field}: after host: comes the field that holds the URL (host:2)"
            )),
        };
    }
    parse_field_or_group(text, "'^([^,]+),', for the key")
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
            KeyArg::Host(index) => KeySpec::Host { index, separator },
        }
    }

    /// Whether this is the built-in host key.
    pub fn is_host(&self) -> bool {
        matches!(self, KeySpec::Host { .. })
    }

    /// The key of `record` (its bytes without the delimiter), or `None`.
    /// Borrowed from `record` but for a host spelled otherwise there.
    #[inline]
    pub fn key<'a>(&self, record: &'a [u8]) -> Option<Cow<'a, [u8]>> {
        match self.part(record) {
            Some(found) => found.map(Cow::Borrowed),
            None => self.host(record),
        }
    }

    /// The key of `record` when it is a part of it (a field, a group):
    /// `Some` of what [`KeySpec::key`] finds; `None` for the host key,
    /// whose spelling may not be the record's ([`KeySpec::host`]). The
    /// keyed queues' look-ups take this way for every record.
    #[inline(always)]
    pub fn part<'a>(&self, record: &'a [u8]) -> Option<Option<&'a [u8]>> {
        match self {
            KeySpec::Field { index, separator } => Some(field(record, *index, *separator)),
            KeySpec::Pattern(re) => Some(
                re.captures(record)
                    .and_then(|c| c.get(1))
                    .map(|m| m.as_bytes()),
            ),
            KeySpec::Host { .. } => None,
        }
    }

    /// The host key of `record` ([`crate::host::host_key`]); `None` for
    /// the other specs, and for a record that is not a URL with a host.
    pub fn host<'a>(&self, record: &'a [u8]) -> Option<Cow<'a, [u8]>> {
        let KeySpec::Host { index, separator } = self else {
            return None;
        };
        let url = match index {
            Some(i) => field(record, *i, *separator)?,
            None => record,
        };
        crate::host::host_key(url)
    }
}

/// Field `index` (from 1) of `record`: split on each `separator`, or on
/// runs of blanks when `None`.
#[inline(always)]
fn field(record: &[u8], index: usize, separator: Option<u8>) -> Option<&[u8]> {
    match separator {
        Some(sep) => record.split(|&b| b == sep).nth(index - 1),
        None => blank_field(record, index),
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

    /// A spec whose keys are compared as plain byte slices.
    struct Spec(KeySpec);

    impl Spec {
        fn key<'a>(&self, record: &'a [u8]) -> Option<&'a [u8]> {
            match self.0.key(record)? {
                Cow::Borrowed(k) => Some(k),
                Cow::Owned(k) => panic!("{k:?} copied"),
            }
        }
    }

    fn spec(text: &str, separator: Option<u8>) -> Spec {
        Spec(KeySpec::new(parse_key(text).unwrap(), separator))
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
        let s = spec("^user=([^ ]+)", None);
        assert_eq!(s.key(b"user=alice op=read"), Some(&b"alice"[..]));
        assert_eq!(s.key(b"user=b"), Some(&b"b"[..]));
        assert_eq!(s.key(b"op=read user=alice"), None);
        // A group that takes no part in the match gives no key.
        assert_eq!(spec("x(y)?", None).key(b"x"), None);
        // Bytes that are not UTF-8 are matched as bytes.
        assert_eq!(spec("^(.)", None).key(b"\xff\n"), None);
        assert_eq!(spec("(?-u)^(.)", None).key(b"\xffz"), Some(&b"\xff"[..]));
    }

    #[test]
    fn host_keys_read_the_record_or_a_field_as_a_url() {
        let whole = KeySpec::new(parse_key("host").unwrap(), None);
        assert_eq!(
            whole
                .key(b"https://alice:pw@API.example.com:443/x")
                .as_deref(),
            Some(&b"api.example.com"[..])
        );
        assert_eq!(whole.key(b"GET https://api.example.com/").as_deref(), None);
        let second = KeySpec::new(parse_key("host:2").unwrap(), None);
        assert_eq!(
            second.key(b"GET https://api.example.com/ 3").as_deref(),
            Some(&b"api.example.com"[..])
        );
        assert_eq!(second.key(b"GET").as_deref(), None);
        let third = KeySpec::new(parse_key("host:3").unwrap(), Some(b','));
        assert_eq!(
            third.key(b"a,b,http://[0::1]:8080/,d").as_deref(),
            Some(&b"[::1]:8080"[..])
        );
        assert!(!parse_key("host").unwrap().splits_fields());
        assert!(parse_key("host:1").unwrap().splits_fields());
        assert_eq!(
            parse_key("host:0").unwrap_err(),
            "host:0: field numbers start at 1"
        );
        assert!(parse_key("host:x")
            .unwrap_err()
            .contains("the field that holds the URL"));
        assert!(parse_key("host:")
            .unwrap_err()
            .contains("the field that holds the URL"));
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
        assert!(parse_key("^user=").unwrap_err().contains("capture group"));
    }
}
