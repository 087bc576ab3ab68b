//! The report: what the run's parts have to show, as sections. Each
//! part's figures are one [`Section`] in a file of their own here, and
//! every view renders every section alike: the `--stats` summary (its
//! clauses and lines), `--stats-json` (its key and JSON value), the
//! `--stats-interval` lines and `drip ctl info` (its fields there: by
//! default the same) and `--metrics` (its metric families), each among
//! what it belongs with in the view's frame ([`Among`]). So a new figure is a file here
//! and one line where its part is registered (the engine's list of the
//! report's parts), and no figure type, renderer or view grows a field or
//! a branch for it.
//!
//! Pure: no threads, no clock, no I/O; the figures are taken before.

pub mod budgets;
pub mod capacity;
pub mod costs;
pub mod exposition;
pub mod keys;
pub mod ramp;
pub mod runner;
pub mod schedule;
pub mod share;
pub mod share_jobs;
pub mod spell;
pub mod waiting;

use std::fmt;
use std::sync::{Arc, Mutex};

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

/// What a section goes among in each view's frame (the counts, the
/// waits, the rate and what is in force), so that each view shows it
/// beside what it belongs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Among {
    /// With the waits: on the summary's first line after the counts,
    /// before the deepest and the longest wait (`cap 300 (30s, by --rate
    /// 10/s);`, `waiting 20 (oldest 1.20s, wait 2.10s)`); in the JSON after
    /// the span; on a `--stats-interval` line after the rate; in
    /// `--metrics` after the queue's gauges.
    Waits,
    /// With the work done: on the summary's first line after the longest
    /// wait, before the rate (`jobs: running 2, …;`); in the JSON after the
    /// waits, before `paused`; on a `--stats-interval` line after the
    /// counts, before `paused`; in `--metrics` after the pace's gauges.
    Work,
    /// With what is in force (the default): on the summary's first line
    /// after the rate and the pause, before the time elapsed; in every
    /// other view after the frame.
    InForce,
}

/// How the summary's counts read where a section changes what they mean
/// ([`Section::wording`]): with `--exec` records go to jobs, so succeeded
/// and failed stand for written, the longest wait is to a job's start and
/// the rate is of starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Wording {
    /// The clauses in place of `written N`, each with its separator.
    pub left: Vec<Clause>,
    /// The longest wait's name: `max wait`.
    pub wait: &'static str,
    /// The measured rate's name: `rate`.
    pub rate: &'static str,
}

/// When a pause in force ends ([`Section::pause_end`]): at the start of
/// the `--schedule` row after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseEnd {
    /// As the display says it: `18:00`, `Mon 09:00`
    /// ([`schedule::clock_at`]).
    pub clock: String,
    /// RFC 3339 with the schedule zone's offset, for the stats stream.
    pub at: String,
}

/// One part's figures, as every view shows them.
pub trait Section: fmt::Debug + Send + Sync {
    /// Its name in `--stats-json`, the `--stats-interval` lines and `drip
    /// ctl info` (a JSON object's key: `budgets`, `costs`).
    fn key(&self) -> &'static str;

    /// Its value there, and by default its one field in each view.
    fn json(&self) -> serde_json::Value;

    /// Its fields in `--stats-json` and `drip ctl stats` (by default its
    /// key and JSON value; a section whose figures sit among the summary's
    /// own fields gives them one by one).
    fn fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![(self.key(), self.json())]
    }

    /// What it goes among in each view's frame ([`Among::InForce`] by
    /// default).
    fn place(&self) -> Among {
        Among::InForce
    }

    /// Its clauses on the `--stats` summary's first line, at its place
    /// (none by default).
    fn clauses(&self) -> Vec<Clause> {
        Vec::new()
    }

    /// How the summary's counts read, when this part changes what they
    /// mean (none by default: `written`, `max wait`, `rate`).
    fn wording(&self) -> Option<Wording> {
        None
    }

    /// When a pause in force ends, if this part knows (none by default).
    fn pause_end(&self) -> Option<PauseEnd> {
        None
    }

    /// Its own lines of the `--stats` summary, after the counts' (each a
    /// list of clauses, wrapped as the counts' are; none by default).
    fn lines(&self) -> Vec<Vec<Clause>> {
        Vec::new()
    }

    /// Its fields on a `--stats-interval` line (by default its fields in
    /// the JSON).
    fn interval_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.fields()
    }

    /// Its fields in `drip ctl info` (by default its fields in the JSON).
    fn info_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.fields()
    }

    /// Its metric families in `--metrics`.
    fn metrics(&self, out: &mut Exposition);

    /// Its item of the live display, and where it goes (none by default).
    fn shown(&self) -> Option<(Spot, String)> {
        None
    }
}

/// The sections of a report, in the order the views show them: by what
/// they go among ([`Among`]), and there in the order they were handed
/// over.
#[derive(Debug, Clone, Default)]
pub struct Sections(Vec<Arc<dyn Section>>);

impl Sections {
    /// `section` after the others it goes among.
    ///
    /// # Panics
    /// As [`Sections::add`].
    pub fn push(&mut self, section: impl Section + 'static) {
        self.add(Arc::new(section));
    }

    /// `section`, handed over shared, after the others it goes among.
    ///
    /// # Panics
    /// In a debug build, if a section of its key is there already: each
    /// section is one field of the JSON it is flattened into.
    pub fn add(&mut self, section: Arc<dyn Section>) {
        debug_assert!(
            self.iter().all(|s| s.key() != section.key()),
            "two sections named {}",
            section.key()
        );
        let at = self.0.partition_point(|s| s.place() <= section.place());
        self.0.insert(at, section);
    }

    /// The sections at `place` alone, in order.
    pub fn at(&self, place: Among) -> Sections {
        Sections(
            self.0
                .iter()
                .filter(|s| s.place() == place)
                .cloned()
                .collect(),
        )
    }

    /// How the summary's counts read: as the first section that changes
    /// their meaning says ([`Section::wording`]), if any does.
    pub fn wording(&self) -> Option<Wording> {
        self.iter().find_map(|s| s.wording())
    }

    /// When the pause in force ends, as the first section that knows says
    /// ([`Section::pause_end`]).
    pub fn pause_end(&self) -> Option<PauseEnd> {
        self.iter().find_map(|s| s.pause_end())
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
/// fields ([`Section::fields`]), in order.
impl Serialize for Sections {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.iter().flat_map(|s| s.fields()) {
            map.serialize_entry(key, &value)?;
        }
        map.end()
    }
}

/// A part's latest section, kept for the views by the part that makes it
/// (the `--schedule` row the schedule's follower last put in force):
/// set by the part, read by the report at each view.
#[derive(Debug)]
pub struct Kept<T>(Mutex<Option<T>>);

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept(Mutex::new(None))
    }
}

impl<T: Clone> Kept<T> {
    /// `section` from now on.
    pub fn set(&self, section: T) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(section);
    }

    /// The latest section set, if any.
    pub fn get(&self) -> Option<T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
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

    /// A section of the work, handed over after one in force.
    #[derive(Debug)]
    struct Work;

    impl Section for Work {
        fn key(&self) -> &'static str {
            "work"
        }
        fn json(&self) -> serde_json::Value {
            serde_json::json!(true)
        }
        fn place(&self) -> Among {
            Among::Work
        }
        fn metrics(&self, _: &mut Exposition) {}
    }

    #[test]
    fn sections_go_in_order_of_what_they_go_among() {
        let mut sections = Sections::default();
        sections.push(Said("b", 2));
        sections.push(Work);
        sections.push(Said("a", 1));
        let keys: Vec<_> = sections.iter().map(|s| s.key()).collect();
        assert_eq!(keys, ["work", "b", "a"]);
        let info = serde_json::Value::Object(sections.info_fields());
        assert_eq!(info.to_string(), r#"{"work":true,"said":"a"}"#);
        let work: Vec<_> = sections.at(Among::Work).iter().map(|s| s.key()).collect();
        assert_eq!(work, ["work"]);
        assert_eq!(sections.at(Among::Waits).iter().count(), 0);
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
