//! The rate table per key (`--key-rates FILE`, `--key-rate KEY=RATE`):
//! rows of a key or a pattern, each with a rate and its burst, and which
//! row a key takes.
//!
//! A row's pattern is an exact key (`github.com`), a domain suffix
//! (`*.github.com`: the keys ending in `.github.com` with something before
//! it, so its subdomains and not `github.com` itself) or `*` (every key).
//! The most specific row that matches wins: an exact row, else the longest
//! suffix, else `*`; a key no row matches takes the default (`--key-rate
//! RATE`), or has no limit of its own without one. With host keys (`--key
//! host`, `host:N`) a row's key is spelled as [`crate::host`] spells a
//! URL's host (lower case, punycode, no root dot), so `GitHub.COM.` is the
//! row of `github.com`.
//!
//! The file holds one row a line, `KEY RATE[:BURST] [JOBS]` (blanks
//! between): JOBS, when given, is the job limit of each key the row
//! matches (`--exec`: at most JOBS of its jobs at once, in place of
//! `--key-jobs`); blank lines are skipped, and a word starting with `#`
//! starts a comment to the end of its line.
//!
//! Pure: no threads, no clock, no I/O.

use std::collections::HashMap;

use crate::rate::Rate;
use crate::schedule::Limit;

/// What keys a row matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// This key alone.
    Exact(Box<[u8]>),
    /// The keys ending in these bytes (a dot and a domain: `.github.com`),
    /// with at least one byte before them.
    Suffix(Box<[u8]>),
    /// Every key (`*`).
    Any,
}

impl Pattern {
    /// Whether `key` is one of the keys this pattern matches.
    pub fn matches(&self, key: &[u8]) -> bool {
        match self {
            Pattern::Exact(k) => **k == *key,
            Pattern::Suffix(s) => key.len() > s.len() && key.ends_with(s),
            Pattern::Any => true,
        }
    }

    /// How specific it is: an exact key beats any suffix, a longer suffix a
    /// shorter one, and any suffix `*`.
    pub fn specificity(&self) -> usize {
        match self {
            Pattern::Exact(_) => usize::MAX,
            Pattern::Suffix(s) => s.len(),
            Pattern::Any => 0,
        }
    }
}

/// One row: a pattern, and the rate with its burst its keys take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The keys it matches.
    pub pattern: Pattern,
    /// The pattern as the figures name it (`*.github.com`, `github.com`,
    /// `*`; a host key as [`crate::host`] spells it).
    pub name: String,
    /// Each matching key's rate (records).
    pub rate: Rate,
    /// Each matching key's burst (≥ 1).
    pub burst: u64,
    /// Each matching key's job limit (≥ 1; the JOBS column); `None`:
    /// `--key-jobs`, if given.
    pub jobs: Option<u32>,
}

/// The rows, found by key: the most specific row first.
#[derive(Debug, Clone, Default)]
pub struct KeyRates {
    rows: Vec<Row>,
    exact: HashMap<Box<[u8]>, u32>,
    suffixes: HashMap<Box<[u8]>, u32>,
    any: Option<u32>,
}

impl KeyRates {
    /// A table of `rows`, no pattern given twice.
    ///
    /// # Errors
    /// A pattern given twice: its name.
    pub fn new(rows: Vec<Row>) -> Result<KeyRates, String> {
        let mut table = KeyRates::default();
        for (i, row) in rows.iter().enumerate() {
            let i = u32::try_from(i).map_err(|_| "too many rows".to_string())?;
            let taken = match &row.pattern {
                Pattern::Exact(k) => table.exact.insert(k.clone(), i).is_some(),
                Pattern::Suffix(s) => table.suffixes.insert(s.clone(), i).is_some(),
                Pattern::Any => table.any.replace(i).is_some(),
            };
            if taken {
                return Err(row.name.clone());
            }
        }
        table.rows = rows;
        Ok(table)
    }

    /// The rows, in the order given.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether a row has a job limit (a JOBS column).
    pub fn has_jobs(&self) -> bool {
        self.rows.iter().any(|r| r.jobs.is_some())
    }

    /// The row `key` takes (its number in [`KeyRates::rows`]): its exact
    /// row, else the longest suffix that matches, else `*`; `None` when no
    /// row matches. A hash look-up for the key and one for each dot in it.
    pub fn find(&self, key: &[u8]) -> Option<u32> {
        if let Some(&i) = self.exact.get(key) {
            return Some(i);
        }
        if !self.suffixes.is_empty() {
            // From the first dot after the key's first byte: the longest
            // suffix first.
            for at in memchr::memchr_iter(b'.', key).filter(|&at| at > 0) {
                if let Some(&i) = self.suffixes.get(&key[at..]) {
                    return Some(i);
                }
            }
        }
        self.any
    }
}

/// The limits per key: a table's rows and the default.
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    /// The rows (their rate and burst; their JOBS column is each drip's
    /// own and not shared here).
    rows: KeyRates,
    /// Each row's limit, by row number, then the default's (last; `None`:
    /// no default).
    limits: Vec<Option<Limit>>,
}

impl KeyTable {
    /// `rows`, and `default` for the keys no row matches.
    pub fn new(rows: KeyRates, default: Option<Limit>) -> KeyTable {
        let limits = rows
            .rows()
            .iter()
            .map(|r| Some(Limit::records(r.rate, Some(r.burst))))
            .chain(std::iter::once(default))
            .collect();
        KeyTable { rows, limits }
    }

    /// One limit for every key.
    pub fn one(limit: Limit) -> KeyTable {
        KeyTable::new(KeyRates::default(), Some(limit))
    }

    /// Whether it has rows (not one limit for every key).
    pub fn has_rows(&self) -> bool {
        !self.rows.is_empty()
    }

    /// The rows.
    pub fn rows(&self) -> &KeyRates {
        &self.rows
    }

    /// The limit of the keys no row matches.
    pub fn default(&self) -> Option<Limit> {
        self.limits.last().copied().flatten()
    }

    /// Every limit, each row's then the default's, by [`KeyTable::index`].
    pub fn limits(&self) -> &[Option<Limit>] {
        &self.limits
    }

    /// `key`'s limit's number in [`KeyTable::limits`]: its row's, else
    /// the default's (the last).
    pub fn index(&self, key: &[u8]) -> usize {
        self.rows
            .find(key)
            .map_or(self.rows.rows().len(), |i| i as usize)
    }

    /// Whether every key has a limit: a default, or a `*` row.
    pub fn limits_every_key(&self) -> bool {
        self.default().is_some() || self.rows.rows().iter().any(|r| r.pattern == Pattern::Any)
    }

    /// `key`'s limit (`None`: none of its own).
    pub fn limit_of(&self, key: &[u8]) -> Option<Limit> {
        self.limits[self.index(key)]
    }
}

/// How a row's key is spelled before it is matched: as written, or as a
/// host (`--key host`, `host:N`).
pub type Normalize<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Read one row, `KEY RATE[:BURST]` split already: `key` and `rate`.
///
/// # Errors
/// A bad pattern or rate: why, in words.
pub fn row(key: &str, rate: &str, host: Option<Normalize>) -> Result<Row, String> {
    let (rate, burst) = crate::rate::parse_key_rate(rate)?;
    let spelled = |text: &str| -> Result<String, String> {
        match host {
            Some(normalize) => normalize(text)
                .ok_or_else(|| format!("'{key}': not a host name (--key host keys are hosts)")),
            None => Ok(text.to_string()),
        }
    };
    let (pattern, name) = if key == "*" {
        (Pattern::Any, "*".to_string())
    } else if let Some(domain) = key.strip_prefix("*.") {
        if domain.is_empty() || domain.contains('*') {
            return Err(format!("'{key}': expected *.DOMAIN, a key, or *"));
        }
        let domain = spelled(domain)?;
        let suffix = format!(".{domain}").into_bytes().into_boxed_slice();
        (Pattern::Suffix(suffix), format!("*.{domain}"))
    } else if key.contains('*') {
        return Err(format!(
            "'{key}': a * only as * (every key) or at the start of *.DOMAIN"
        ));
    } else {
        let key = spelled(key)?;
        (Pattern::Exact(key.clone().into_bytes().into()), key)
    };
    Ok(Row {
        pattern,
        name,
        rate,
        burst: burst.unwrap_or(1),
        jobs: None,
    })
}

/// Read a row's JOBS column: a whole number from 1 to 4096 (as `-j` and
/// `--key-jobs`).
///
/// # Errors
/// Not a whole number, or out of that range: why, in words.
pub fn jobs(text: &str) -> Result<u32, String> {
    const FORM: &str = "expected KEY RATE[:BURST] [JOBS]";
    match crate::quantity::parse_whole(text, 1, 4096) {
        Ok(n) => Ok(n as u32),
        Err(crate::quantity::WholeError::NotWhole) => Err(format!(
            "'{text}': not a job limit, a whole number from 1 to 4096 ({FORM})"
        )),
        Err(crate::quantity::WholeError::Small(_)) => {
            Err(format!("'{text}': a job limit is at least 1 ({FORM})"))
        }
        Err(crate::quantity::WholeError::Large(_)) => Err(format!(
            "'{text}': a job limit is at most 4096, as -j's ({FORM})"
        )),
    }
}

/// Read a table's file: one row a line, `KEY RATE[:BURST] [JOBS]`; blank
/// lines and comments (from a word starting with `#`) skipped. A JOBS
/// column is refused unless `jobs` (drip runs jobs: `--exec`).
///
/// # Errors
/// A malformed row, a JOBS column where `jobs` is false, or a pattern
/// given twice: its line number (from 1) and why, in words.
pub fn parse(text: &str, host: Option<Normalize>, jobs: bool) -> Result<Vec<Row>, (usize, String)> {
    let mut rows: Vec<(usize, Row)> = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        let words: Vec<&str> = line
            .split_whitespace()
            .take_while(|w| !w.starts_with('#'))
            .collect();
        let row = match words.as_slice() {
            [] => continue,
            [key, rate] => row(key, rate, host).map_err(|why| (n, why))?,
            [key, rate, limit] => {
                let limit = self::jobs(limit).map_err(|why| (n, why))?;
                if !jobs {
                    return Err((
                        n,
                        format!(
                            "'{limit}': a job limit only with --exec (it limits the jobs running)"
                        ),
                    ));
                }
                let row = row(key, rate, host).map_err(|why| (n, why))?;
                Row {
                    jobs: Some(limit),
                    ..row
                }
            }
            [key] => {
                return Err((
                    n,
                    format!("'{key}': no rate (expected KEY RATE[:BURST] [JOBS])"),
                ))
            }
            _ => {
                return Err((
                    n,
                    format!(
                        "{} words (expected KEY RATE[:BURST] [JOBS]; a key holds no blank)",
                        words.len()
                    ),
                ))
            }
        };
        if let Some((first, _)) = rows.iter().find(|(_, r)| r.pattern == row.pattern) {
            return Err((n, format!("'{}' is on line {first} too", row.name)));
        }
        rows.push((n, row));
    }
    Ok(rows.into_iter().map(|(_, row)| row).collect())
}

/// A `--key-rate` value: the rate of the keys no row matches (`RATE[:BURST]`),
/// or a row (`KEY=RATE[:BURST]`, split at its last `=`: no rate holds one).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyRateArg {
    /// `RATE[:BURST]`.
    Default(Rate, Option<u64>),
    /// `KEY=RATE[:BURST]`: the key (read against `--key` later) and the
    /// rate as written, read already.
    Row(String, String),
}

/// Parse a `--key-rate` value.
///
/// # Errors
/// A bad rate (`inf` among them: each key needs a limit), or an empty key.
pub fn parse_key_rate_arg(text: &str) -> Result<KeyRateArg, String> {
    match text.rsplit_once('=') {
        None => {
            crate::rate::parse_key_rate(text).map(|(rate, burst)| KeyRateArg::Default(rate, burst))
        }
        Some(("", _)) => {
            Err("no key before '=' (expected RATE[:BURST] or KEY=RATE[:BURST])".to_string())
        }
        Some((key, rate)) => {
            crate::rate::parse_key_rate(rate)?;
            Ok(KeyRateArg::Row(key.to_string(), rate.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn host(text: &str) -> Option<String> {
        crate::host::host_row(text)
    }

    fn table(text: &str) -> KeyRates {
        KeyRates::new(parse(text, None, true).unwrap()).unwrap()
    }

    fn name_of(t: &KeyRates, key: &str) -> Option<String> {
        t.find(key.as_bytes())
            .map(|i| t.rows()[i as usize].name.clone())
    }

    #[test]
    fn the_most_specific_row_wins() {
        let t =
            table("# hosts\n* 10/s\n*.com 20/s\n\n*.github.com 1/s:2  # GitHub\ngithub.com 3/s\n");
        assert_eq!(name_of(&t, "github.com").as_deref(), Some("github.com"));
        assert_eq!(
            name_of(&t, "api.github.com").as_deref(),
            Some("*.github.com")
        );
        assert_eq!(
            name_of(&t, "a.b.github.com").as_deref(),
            Some("*.github.com")
        );
        assert_eq!(name_of(&t, "example.com").as_deref(), Some("*.com"));
        assert_eq!(name_of(&t, "example.org").as_deref(), Some("*"));
        let row = &t.rows()[t.find(b"api.github.com").unwrap() as usize];
        assert_eq!((row.rate.spelled(""), row.burst), ("1/s".to_string(), 2));
    }

    #[test]
    fn a_suffix_matches_subdomains_only() {
        let t = table("*.github.com 1/s\n");
        assert_eq!(t.find(b"github.com"), None);
        assert_eq!(t.find(b".github.com"), None);
        assert_eq!(t.find(b"xgithub.com"), None);
        assert_eq!(t.find(b"a.github.com"), Some(0));
    }

    #[test]
    fn host_rows_are_spelled_as_host_keys_are() {
        let rows = parse("GitHub.COM. 1/s\n*.BÜCHER.de 2/s\n", Some(&host), false).unwrap();
        assert_eq!(rows[0].name, "github.com");
        assert_eq!(rows[1].name, "*.xn--bcher-kva.de");
        assert_eq!(
            rows[1].pattern,
            Pattern::Suffix(b".xn--bcher-kva.de".to_vec().into())
        );
        let e = parse("* 1/s\nhttp://[ 1/s\n", Some(&host), false).unwrap_err();
        assert_eq!(e.0, 2);
        assert!(e.1.contains("not a host name"), "{}", e.1);
    }

    #[test]
    fn malformed_rows_are_refused_with_their_line() {
        for (text, line, says) in [
            ("a 1/s\nb\n", 2, "no rate"),
            ("a 1/s 2 b\n", 1, "4 words"),
            ("a 1/s b\n", 1, "'b': not a job limit"),
            ("a 1/s 0\n", 1, "at least 1"),
            ("a 1/s -1\n", 1, "at least 1"),
            ("a 1/s 4097\n", 1, "at most 4096"),
            ("\n\na x/s\n", 3, "'x' is not a number"),
            ("a inf\n", 1, "not inf"),
            ("a 1/s:0\n", 1, "burst"),
            ("*. 1/s\n", 1, "expected *.DOMAIN"),
            ("a*b 1/s\n", 1, "a * only as"),
            ("*.a.* 1/s\n", 1, "expected *.DOMAIN"),
            ("a 1/s\n# x\nb 2/s\na 3/s\n", 4, "'a' is on line 1 too"),
            ("* 1/s\n* 2/s\n", 2, "'*' is on line 1 too"),
        ] {
            let (n, why) = parse(text, None, true).unwrap_err();
            assert_eq!(n, line, "{text:?}: {why}");
            assert!(why.contains(says), "{text:?}: {why}");
        }
    }

    #[test]
    fn a_jobs_column_is_each_matching_keys_job_limit() {
        let t = table("github.com 1/s 2\n*.cdn.net 50/s:5 8 # at once\n* 10/s\n");
        let jobs = |key: &str| {
            t.find(key.as_bytes())
                .and_then(|i| t.rows()[i as usize].jobs)
        };
        assert_eq!(jobs("github.com"), Some(2));
        assert_eq!(jobs("a.cdn.net"), Some(8));
        assert_eq!(jobs("example.org"), None, "the row has no JOBS");
        assert!(t.has_jobs());
        assert!(!table("a 1/s\n").has_jobs());
        assert_eq!(t.rows()[1].burst, 5);
    }

    #[test]
    fn a_jobs_column_is_refused_without_jobs_to_limit() {
        let (n, why) = parse("a 1/s\nb 2/s 3\n", None, false).unwrap_err();
        assert_eq!(n, 2);
        assert!(why.contains("only with --exec"), "{why}");
    }

    #[test]
    fn comments_and_blank_lines_are_skipped() {
        let rows = parse("  # all\n\n a 1/s # one\n\t\nb 2/min:3 #x\n", None, false).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].burst, 3);
    }

    #[test]
    fn a_row_given_twice_in_a_table_is_refused() {
        let a = row("a", "1/s", None).unwrap();
        assert_eq!(KeyRates::new(vec![a.clone(), a]).unwrap_err(), "a");
    }

    /// The rows' patterns drawn from a few labels, so keys and rows meet.
    fn pattern() -> impl Strategy<Value = String> {
        let label = prop::sample::select(vec!["a", "b", "com", "x"]);
        let labels = prop::collection::vec(label, 1..4).prop_map(|l| l.join("."));
        prop_oneof![
            Just("*".to_string()),
            labels.clone().prop_map(|d| format!("*.{d}")),
            labels,
        ]
    }

    proptest! {
        /// The table finds what a linear scan for the most specific
        /// matching row finds.
        #[test]
        fn find_is_the_most_specific_match(
            patterns in prop::collection::vec(pattern(), 0..8),
            keys in prop::collection::vec(
                prop::collection::vec(prop::sample::select(vec!["a", "b", "com", "x", ""]), 1..5)
                    .prop_map(|l| l.join(".")),
                1..8,
            ),
        ) {
            let mut rows: Vec<Row> = Vec::new();
            for p in patterns {
                let r = row(&p, "1/s", None).unwrap();
                if rows.iter().all(|o| o.pattern != r.pattern) {
                    rows.push(r);
                }
            }
            let t = KeyRates::new(rows.clone()).unwrap();
            for key in keys {
                let model = rows
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.pattern.matches(key.as_bytes()))
                    .max_by_key(|(_, r)| r.pattern.specificity())
                    .map(|(i, _)| i as u32);
                prop_assert_eq!(t.find(key.as_bytes()), model, "key {:?}", key);
            }
        }
    }
}
