//! A record's cost (`--cost`): a whole number read from the record (tokens,
//! a weight), spent on the cost limits (`--cost-rate`) the way a byte rate
//! spends a record's size.
//!
//! The number is a field by number (`--cost 2`, fields split as for
//! `--key`) or the first capture group of a regular expression
//! (`--cost '"tokens":([0-9]+)'`). It is ASCII digits, perhaps with blanks
//! around them. A record whose cost cannot be read (no such field, no match,
//! not a whole number, above 2^53) costs [`UNREADABLE_COST`]: it is still
//! paced and passed on, never lost; the reader says so once on stderr.
//!
//! Pure: no threads, no clock, no I/O.

use crate::key::{parse_field_or_group, KeyArg, KeySpec};

/// What a record whose cost cannot be read costs (units of the cost limits).
pub const UNREADABLE_COST: u64 = 1;

/// The largest cost read (2^53, the largest whole number a JSON reader keeps
/// exactly): a larger number is not read.
pub const MAX_COST: u64 = 1 << 53;

/// How a record's cost is found.
#[derive(Debug, Clone)]
pub struct Cost {
    spec: KeySpec,
    delimiter: u8,
}

impl Cost {
    /// Costs found by `spec` in records ending in `delimiter`.
    pub fn new(spec: KeySpec, delimiter: u8) -> Cost {
        Cost { spec, delimiter }
    }

    /// The cost of `record` (with or without its delimiter), or `None` when
    /// it cannot be read.
    pub fn read(&self, record: &[u8]) -> Option<u64> {
        let record = record.strip_suffix(&[self.delimiter]).unwrap_or(record);
        parse_cost(self.spec.key(record)?)
    }

    /// The cost `record` spends: its cost, or `UNREADABLE_COST`.
    pub fn of(&self, record: &[u8]) -> u64 {
        self.read(record).unwrap_or(UNREADABLE_COST)
    }
}

/// Parse `--cost`: a field number (from 1), or a regular expression whose
/// first capture group is the cost.
///
/// # Errors
/// Field 0, an invalid expression, or an expression without a group.
pub fn parse_cost_arg(text: &str) -> Result<KeyArg, String> {
    parse_field_or_group(text, r#"'"tokens": *([0-9]+)', around the cost"#)
}

/// A whole number of at most [`MAX_COST`], ASCII digits with optional blanks
/// (space, tab, CR) around them.
fn parse_cost(text: &[u8]) -> Option<u64> {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r');
    let start = text.iter().position(|b| !blank(b))?;
    let end = text.iter().rposition(|b| !blank(b))? + 1;
    let digits = &text[start..end];
    if digits.len() > 16 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    (n <= MAX_COST).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{parse_key, KeySpec};

    fn cost(spec: &str) -> Cost {
        Cost::new(KeySpec::new(parse_key(spec).unwrap(), None), b'\n')
    }

    #[test]
    fn a_field_or_a_group_is_the_cost() {
        assert_eq!(cost("2").read(b"a 17 b\n"), Some(17));
        assert_eq!(cost("2").read(b"a\t 0"), Some(0));
        let c = cost(r#""tokens": *([0-9]+)"#);
        assert_eq!(c.read(b"{\"q\":\"x\",\"tokens\": 250}\n"), Some(250));
    }

    #[test]
    fn an_unreadable_cost_is_none_and_costs_one() {
        let c = cost("2");
        for record in [
            &b"a\n"[..],
            b"a -3",
            b"a 1.5",
            b"a 12x",
            b"a 99999999999999999",
        ] {
            assert_eq!(c.read(record), None, "{record:?}");
            assert_eq!(c.of(record), UNREADABLE_COST);
        }
        assert_eq!(cost("([0-9]+)").read(b" 9007199254740992 "), Some(MAX_COST));
        assert_eq!(cost("([0-9]+)").read(b"9007199254740993"), None);
    }

    #[test]
    fn an_expression_without_a_group_is_refused_in_the_terms_of_a_cost() {
        let why = parse_cost_arg("tokens").unwrap_err();
        assert!(why.contains("around the cost"), "{why}");
        assert!(!why.contains("key"), "{why}");
        assert!(parse_cost_arg("0").is_err());
        assert!(matches!(parse_cost_arg("2"), Ok(KeyArg::Field(2))));
    }

    #[test]
    fn blanks_around_the_number_are_allowed() {
        assert_eq!(parse_cost(b" 42\r"), Some(42));
        assert_eq!(parse_cost(b"4 2"), None);
        assert_eq!(parse_cost(b""), None);
        assert_eq!(parse_cost(b"  "), None);
    }
}
