//! The report: what the run's parts have to show, as sections. Each
//! part's figures are one [`Section`] in a file of their own here, and
//! every view renders every section alike: the `--stats` summary (its
//! clauses and lines), `--stats-json` (its key and JSON value), the
//! `--stats-interval` lines and `drip ctl info` (its fields there: by
//! default the same) and `--metrics` (its metric families). So a new
//! figure is a file here and one line where its part hands it over
//! (`state::view`), and no figure type, renderer or view grows a field or
//! a branch for it.
//!
//! Pure: no threads, no clock, no I/O; the figures are taken before.

pub mod budgets;
pub mod costs;
pub mod exposition;
pub mod keys;
pub mod ramp;
pub mod schedule;
pub mod share;
pub mod share_jobs;
pub mod spell;

use std::fmt;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};

use exposition::Exposition;

/// A clause of the summary, with the separator that follows it (`,`, `;`
/// or nothing).
pub type Clause = (String, &'static str);

/// Where a section's item goes on the live display: among the figures,
/// before the rate; or after the ETA, with what is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spot {
    /// Before the rate (`keys 9 (9 busy)`, `budget 970/1000 reset 3.2s`).
    Figures,
    /// After the ETA (`row 2 * 50/s`, `ramp 40%`).
    InForce,
}

/// One part's figures, as every view shows them.
pub trait Section: fmt::Debug + Send + Sync {
    /// Its name in `--stats-json`, the `--stats-interval` lines and `drip
    /// ctl info` (a JSON object's key: `budgets`, `costs`).
    fn key(&self) -> &'static str;

    /// Its value there, and by default its one field on a
    /// `--stats-interval` line and in `drip ctl info`.
    fn json(&self) -> serde_json::Value;

    /// Its clauses on the `--stats` summary's first line, after the rate
    /// and before the time elapsed (none by default).
    fn clauses(&self) -> Vec<Clause> {
        Vec::new()
    }

    /// Its own lines of the `--stats` summary, after the counts' (each a
    /// list of clauses, wrapped as the counts' are; none by default).
    fn lines(&self) -> Vec<Vec<Clause>> {
        Vec::new()
    }

    /// Its fields on a `--stats-interval` line (by default its key and
    /// JSON value).
    fn interval_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![(self.key(), self.json())]
    }

    /// Its fields in `drip ctl info` (by default its key and JSON value).
    fn info_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![(self.key(), self.json())]
    }

    /// Its metric families in `--metrics`.
    fn metrics(&self, out: &mut Exposition);

    /// Its item of the live display, and where it goes (none by default).
    fn shown(&self) -> Option<(Spot, String)> {
        None
    }
}

/// The sections of a report, in the order the views show them.
#[derive(Debug, Clone, Default)]
pub struct Sections(Vec<Arc<dyn Section>>);

impl Sections {
    /// `section` after the others.
    ///
    /// # Panics
    /// In a debug build, if a section of its key is there already: each
    /// section is one field of the JSON it is flattened into.
    pub fn push(&mut self, section: impl Section + 'static) {
        debug_assert!(
            self.iter().all(|s| s.key() != section.key()),
            "two sections named {}",
            section.key()
        );
        self.0.push(Arc::new(section));
    }

    /// `section`, handed over shared, after the others.
    ///
    /// # Panics
    /// As [`Sections::push`].
    pub fn add(&mut self, section: Arc<dyn Section>) {
        debug_assert!(
            self.iter().all(|s| s.key() != section.key()),
            "two sections named {}",
            section.key()
        );
        self.0.push(section);
    }

    /// `section`, if there is one, after the others.
    pub fn extend(&mut self, section: Option<impl Section + 'static>) {
        if let Some(section) = section {
            self.push(section);
        }
    }

    /// Every section, in order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Section> {
        self.0.iter().map(|s| s.as_ref())
    }

    /// Every section's clauses of the summary's first line, in order.
    pub fn clauses(&self) -> impl Iterator<Item = Clause> + '_ {
        self.iter().flat_map(|s| s.clauses())
    }

    /// Every section's lines of the summary, in order.
    pub fn lines(&self) -> impl Iterator<Item = Vec<Clause>> + '_ {
        self.iter().flat_map(|s| s.lines())
    }

    /// Every section's fields of a `--stats-interval` line, in order.
    pub fn interval_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let fields = self.iter().flat_map(|s| s.interval_fields());
        fields.map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// Every section's fields of `drip ctl info`, in order.
    pub fn info_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let fields = self.iter().flat_map(|s| s.info_fields());
        fields.map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// Every section's items of the live display, in order.
    pub fn shown(&self) -> Vec<(Spot, String)> {
        self.iter().filter_map(|s| s.shown()).collect()
    }

    /// Every section's metric families, in order.
    pub fn metrics(&self, out: &mut Exposition) {
        for section in self.iter() {
            section.metrics(out);
        }
    }
}

/// As the fields of the JSON object it is flattened into: each section's
/// key and value, in order.
impl Serialize for Sections {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for section in self.iter() {
            map.serialize_entry(section.key(), &section.json())?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Said(&'static str, u64);

    impl Section for Said {
        fn key(&self) -> &'static str {
            self.0
        }
        fn json(&self) -> serde_json::Value {
            serde_json::json!(self.1)
        }
        fn lines(&self) -> Vec<Vec<Clause>> {
            vec![vec![(format!("{} {}", self.0, self.1), "")]]
        }
        fn clauses(&self) -> Vec<Clause> {
            vec![(format!("{}={}", self.0, self.1), ",")]
        }
        fn info_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
            vec![("said", serde_json::json!(self.0))]
        }
        fn metrics(&self, out: &mut Exposition) {
            out.gauge(&format!("drip_{}", self.0), "A figure.", self.1 as f64);
        }
    }

    #[test]
    fn every_view_shows_every_section_in_order() {
        let mut sections = Sections::default();
        sections.push(Said("b", 2));
        sections.push(Said("a", 1));
        assert_eq!(
            serde_json::to_string(&sections).unwrap(),
            r#"{"b":2,"a":1}"#
        );
        let lines: Vec<_> = sections.lines().collect();
        assert_eq!(
            lines,
            [vec![("b 2".to_string(), "")], vec![("a 1".to_string(), "")]]
        );
        let mut out = Exposition {
            out: String::new(),
            drip: "x".to_string(),
        };
        sections.metrics(&mut out);
        assert_eq!(
            out.out,
            "# HELP drip_b A figure.\n# TYPE drip_b gauge\ndrip_b{drip=\"x\"} 2\n\
             # HELP drip_a A figure.\n# TYPE drip_a gauge\ndrip_a{drip=\"x\"} 1\n"
        );
        let clauses: Vec<_> = sections.clauses().collect();
        assert_eq!(
            clauses,
            [("b=2".to_string(), ","), ("a=1".to_string(), ",")]
        );
        // The interval's fields are the JSON's by default; ctl info's as
        // the section says.
        assert_eq!(
            serde_json::Value::Object(sections.interval_fields()),
            serde_json::json!({"b": 2, "a": 1})
        );
        let info = serde_json::Value::Object(sections.info_fields());
        assert_eq!(
            info.to_string(),
            r#"{"said":"a"}"#,
            "one field said twice: the last"
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "two sections named b")]
    fn two_sections_of_one_key_are_refused() {
        let mut sections = Sections::default();
        sections.push(Said("b", 2));
        sections.push(Said("b", 3));
    }
}
