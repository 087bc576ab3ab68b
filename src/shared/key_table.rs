//! The limits per key as the shared state holds them (`--key-rate RATE`,
//! and under `--share` the rate table too: `--key-rates FILE`,
//! `--key-rate KEY=RATE`): each key the limit of its row (the most
//! specific match, as [`crate::keyed::KeyRates::find`] says), else the
//! default; a key with neither has no limit of its own, and never asks the
//! state for slots.
//!
//! Every drip on a NAME must hold the same table: it is part of the spec
//! the state stores and checks at every call ([`KeyTable::spec`]), so a
//! drip started with another table is refused as one with other limits is,
//! and one following a change `drip ctl` made reads the new table from it
//! ([`KeyTable::parse`]).
//!
//! Pure: no threads, no clock, no I/O.

use super::gcra::{hex, limits_of, spec, unhex, Step};
use crate::keyed::rates::{row, KeyTable, Row};
use crate::keyed::KeyRates;
use crate::schedule::{Limit, Unit};

/// The table as the shared state records it, after `key:`: one limit
/// as [`spec`] writes it; with rows, the default's spec (`none`: none),
/// then each row, sorted by its pattern, as `;HEX=SPEC` (HEX: the
/// pattern's bytes in lowercase hex, so any key may be a pattern).
pub fn table_spec(table: &KeyTable) -> String {
    let one = |l: &Limit| spec(std::slice::from_ref(l));
    let default = table.default().as_ref().map_or("none".to_string(), one);
    if !table.has_rows() {
        return default;
    }
    let mut rows: Vec<(&str, Limit)> = (table.rows().rows().iter())
        .map(|r| (r.name.as_str(), Limit::records(r.rate, Some(r.burst))))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    rows.iter().fold(default, |out, (name, l)| {
        format!("{out};{}={}", hex(name.as_bytes()), one(l))
    })
}

/// The table a [`table_spec`] records; `None` for text drip does not
/// write.
pub fn parse(text: &str) -> Option<KeyTable> {
    let mut parts = text.split(';');
    let default = match parts.next()? {
        "none" => None,
        one => Some(record_limit(one)?),
    };
    let mut rows = Vec::new();
    for part in parts {
        let (name, limit) = part.split_once('=')?;
        let name = String::from_utf8(unhex(name)?).ok()?;
        let limit = record_limit(limit)?;
        let mut r: Row = row(&name, "1/s", None).ok()?;
        (r.rate, r.burst) = (limit.rate, limit.burst);
        rows.push(r);
    }
    if rows.is_empty() && default.is_none() {
        return None;
    }
    Some(KeyTable::new(KeyRates::new(rows).ok()?, default))
}

/// The table for messages: `per key 5/s, burst 1`; with rows, each row's
/// pattern and limit, then the others'.
pub fn describe(table: &KeyTable) -> String {
    let one = |l: &Limit| super::gcra::describe(&spec(std::slice::from_ref(l)));
    if !table.has_rows() {
        return match table.default() {
            Some(l) => format!("per key {}", one(&l)),
            None => "no limit per key".to_string(),
        };
    }
    let mut rows: Vec<String> = (table.rows().rows().iter())
        .map(|r| format!("{} {}", r.name, one(&Limit::records(r.rate, Some(r.burst)))))
        .collect();
    rows.sort();
    if let Some(l) = table.default() {
        rows.push(format!("other keys {}", one(&l)));
    }
    format!("per key: {}", rows.join("; "))
}

/// The limits as the shared state records them: the global limits'
/// [`super::gcra::spec_tagged`], then, when limits per key are shared,
/// `key:` and their [`table_spec`] (comma-separated; one limit per key
/// spelled as before tables).
pub fn spec_with_table(
    limits: &[Limit],
    tags: &[Option<String>],
    table: Option<&KeyTable>,
) -> String {
    let global = super::gcra::spec_tagged(limits, tags);
    match table {
        Some(t) if limits.is_empty() => format!("key:{}", table_spec(t)),
        Some(t) => format!("{global},key:{}", table_spec(t)),
        None => global,
    }
}

/// The global limits and the limits per key a spec records (the global
/// limits' [`spec`], then `key:` and the [`table_spec`]), in its order;
/// `None` when it holds an unlimited rate or text drip does not write.
pub fn split_spec(spec: &str) -> Option<(Vec<Limit>, Option<KeyTable>)> {
    let (global, key) = match spec.split_once("key:") {
        Some((global, key)) => (global.strip_suffix(',').unwrap_or(global), Some(key)),
        None => (spec, None),
    };
    let limits = if global.is_empty() {
        Vec::new()
    } else {
        limits_of(global)?
    };
    let key = match key {
        Some(k) => Some(parse(k)?),
        None => None,
    };
    Some((limits, key))
}

/// The limits a spec records, for messages ([`super::gcra::describe`],
/// a rate table row by row: [`describe`]).
pub fn describe_spec(spec: &str) -> String {
    match spec.split_once("key:") {
        Some((global, key)) if key.contains(';') => {
            let table = parse(key).map_or_else(|| key.to_string(), |t| describe(&t));
            match global.strip_suffix(',') {
                Some(global) => format!("{}; {table}", super::gcra::describe(global)),
                None => table,
            }
        }
        _ => super::gcra::describe(spec),
    }
}

/// `key`'s limit's constants in `table`, the same in both stores. A key
/// with no limit of its own is never asked for (every key has one under
/// `--share`, and [`super::keys::SharedKeys`] lets one with none go as it
/// comes); asked, it would get a slot a nanosecond, no limit to speak of.
pub fn step_of(table: &KeyTable, key: &[u8]) -> Step {
    table.limit_of(key).as_ref().map_or(
        Step {
            interval: 1,
            tolerance: 0,
        },
        Step::of,
    )
}

/// One record limit as [`spec`] writes it.
fn record_limit(text: &str) -> Option<Limit> {
    match limits_of(text)?.as_slice() {
        [one] if one.unit == Unit::Records => Some(*one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::rates::parse as rows_of;
    use crate::rate::Rate;
    use crate::schedule::Unit;

    fn table(text: &str, default: Option<&str>) -> KeyTable {
        let rows = KeyRates::new(rows_of(text, None, false).unwrap()).unwrap();
        let default = default.map(|d| {
            let (rate, burst) = crate::rate::parse_key_rate(d).unwrap();
            Limit::records(rate, burst)
        });
        KeyTable::new(rows, default)
    }

    #[test]
    fn each_key_takes_its_rows_limit_else_the_default() {
        let t = table("github.com 1/s:2\n*.cdn.net 50/s\n", Some("10/s"));
        let rate = |key: &str| (t.limit_of(key.as_bytes())).map(|l| (l.rate.per_second(), l.burst));
        assert_eq!(rate("github.com"), Some((1.0, 2)));
        assert_eq!(rate("a.cdn.net"), Some((50.0, 1)));
        assert_eq!(rate("cdn.net"), Some((10.0, 1)));
        let none = table("github.com 1/s\n", None);
        assert_eq!(none.limit_of(b"gitlab.com"), None);
        assert_eq!(step_of(&none, b"gitlab.com").interval, 1);
        assert_eq!(step_of(&none, b"github.com").interval, 1_000_000_000);
    }

    /// The spec reads back as the same table, whatever the rows' order;
    /// one limit is written as before tables (older drips read it).
    #[test]
    fn the_spec_reads_back_and_one_limit_is_spelled_as_before() {
        let a = table(
            "github.com 1/s:2\n*.cdn.net 50/s\n* 3/s\nweird;=key 2/s\n",
            Some("10/s"),
        );
        let b = table(
            "weird;=key 2/s\n* 3/s\n*.cdn.net 50/s\ngithub.com 1/s:2\n",
            Some("10/s"),
        );
        assert_eq!(table_spec(&a), table_spec(&b));
        let back = parse(&table_spec(&a)).unwrap();
        assert_eq!(table_spec(&back), table_spec(&a));
        assert_eq!(back.limit_of(b"x.cdn.net"), a.limit_of(b"x.cdn.net"));
        assert_eq!(back.limit_of(b"weird;=key"), a.limit_of(b"weird;=key"));
        let none = table("github.com 1/s\n", None);
        assert!(
            table_spec(&none).starts_with("none;"),
            "{}",
            table_spec(&none)
        );
        assert_eq!(
            table_spec(&parse(&table_spec(&none)).unwrap()),
            table_spec(&none)
        );
        let one = KeyTable::one(Limit::records(
            Rate::Limited {
                count: 5,
                period_ns: 1_000_000_000,
            },
            Some(1),
        ));
        assert_eq!(table_spec(&one), spec(&[one.default().unwrap()]));
        assert_eq!(describe(&one), "per key 5/s, burst 1");
        assert_ne!(
            table_spec(&a),
            table_spec(&table("github.com 1/s:3\n*.cdn.net 50/s\n", Some("10/s")))
        );
        for bad in [
            "",
            "none",
            "x",
            "none;zz=1/1000000000ns:1",
            "none;61=1/1000ns",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    /// A spec reads back as the global limits and the limits per key it
    /// records, tags and all; the global limits' reader refuses a key
    /// limit's text.
    #[test]
    fn a_spec_splits_into_the_global_limits_and_the_table() {
        let limits = [
            Limit::records(crate::rate::parse_rate("10/s").unwrap(), Some(3)),
            Limit {
                rate: crate::rate::parse_byte_rate("2KB/s").unwrap(),
                burst: 512,
                unit: Unit::Bytes,
            },
        ];
        let tags = [None, None];
        let split = |spec: &str| split_spec(spec).map(|(l, k)| (l, k.map(|t| table_spec(&t))));
        for key in [
            KeyTable::one(limits[0]),
            table("github.com 1/s:2\n", Some("10/s")),
            table("github.com 1/s:2\n", None),
        ] {
            let both = spec_with_table(&limits, &tags, Some(&key));
            assert_eq!(limits_of(&both), None);
            assert_eq!(
                split(&both),
                Some((limits.to_vec(), Some(table_spec(&key))))
            );
            let alone = spec_with_table(&[], &[], Some(&key));
            assert_eq!(split(&alone), Some((vec![], Some(table_spec(&key)))));
        }
        let one = spec_with_table(&limits, &tags, Some(&KeyTable::one(limits[0])));
        assert_eq!(one, format!("{},key:{}", spec(&limits), spec(&limits[..1])));
        assert_eq!(split(&spec(&limits)), Some((limits.to_vec(), None)));
    }

    #[test]
    fn a_table_is_described_row_by_row() {
        let t = table("github.com 1/s:2\n", Some("10/s"));
        assert_eq!(
            describe(&t),
            "per key: github.com 1/s, burst 2; other keys 10/s, burst 1"
        );
    }
}
