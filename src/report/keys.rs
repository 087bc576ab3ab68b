//! The keys' section (`--key`): the keys seen, remembered and busy, the
//! records with no key, and the top keys by records written, lost and
//! waiting.

use serde::Serialize;

use crate::rate::Rate;

use super::exposition::{Exposition, MetricFamily};
use super::spell::{json_key, text_key, KeyName};
use super::{Clause, Section, Spot};

/// Counts about the keys, for `--stats` and `--stats-json`.
///
/// The top lists cover the keys remembered when the counts were taken: a
/// key forgotten when idle takes its counts with it (the totals keep
/// them), and counts again from 0 if it comes back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyStats {
    /// Keys taken into memory in all (a key forgotten and seen again counts
    /// again), the no-key lane included once used.
    pub keys_seen: u64,
    /// Keys remembered now.
    pub keys: u64,
    /// Keys with records waiting now.
    pub busy_keys: u64,
    /// Records of new keys dropped because every remembered key was busy
    /// (`--max-keys`): they never had a key's place, so no top list
    /// names them.
    pub dropped_unremembered: u64,
    /// Records read that had no key (no such field, no match, not a URL
    /// with a host): they shared the no-key lane.
    pub keyless: u64,
    /// The remembered keys that sent the most records to stdout, most first.
    pub top_written: Vec<(KeyName, u64)>,
    /// The remembered keys that lost the most records (dropped, expired).
    pub top_dropped: Vec<(KeyName, u64)>,
    /// The keys with the most records waiting now.
    pub top_waiting: Vec<(KeyName, u64)>,
    /// With a rate table (`--key-rates`, `--key-rate KEY=RATE`): the row
    /// and the limit in force of each key the top lists name, in the
    /// order they first appear there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_limits: Option<Vec<KeyLimitView>>,
    /// The key whose oldest record has waited longest (the oldest of all
    /// waiting), with its limit in force: the live display's and
    /// `--metrics`' (`None`: no record waits).
    #[serde(skip)]
    pub longest: Option<KeyLimitView>,
}

/// A remembered key's limit: its row of the rate table, and the rate with
/// its burst in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyLimitView {
    /// The key (`null`: the lane of records without a key).
    pub key: KeyName,
    /// Its row's pattern (`github.com`, `*.github.com`, `*`); `null`: no
    /// row matches it, and `--key-rate RATE` (or no limit) holds.
    pub row: Option<String>,
    /// Its limit, `RATE:BURST` as `drip ctl` takes it (`1/s:2`); `null`:
    /// no limit of its own.
    #[serde(serialize_with = "spell_limit")]
    pub rate: Option<(Rate, u64)>,
    /// Its records waiting now.
    pub waiting: u64,
    /// With `--exec`: its job limit (its row's JOBS, else `--key-jobs`;
    /// `null`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Option<u32>>,
    /// With `--exec`: its jobs running now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<u32>,
}

/// A key's job limit (`None`: none) and its jobs running.
pub type JobsOfKey = (Option<u32>, u32);

/// A key's limit as `RATE:BURST`, or `null`.
fn spell_limit<S: serde::Serializer>(limit: &Option<(Rate, u64)>, s: S) -> Result<S::Ok, S::Error> {
    match limit {
        Some((rate, burst)) => s.serialize_str(&format!("{}:{burst}", rate.spelled(""))),
        None => s.serialize_none(),
    }
}

impl KeyLimitView {
    /// The line `drip ctl … key-list` prints for it: the key (as
    /// `--stats` shows it), its row (`-`: none), its limit (`-`: none) and
    /// its records waiting, and with `--exec` its job limit (`-`: none)
    /// and its jobs running, separated by tabs.
    pub fn line(&self) -> String {
        let rate = match self.rate {
            Some((rate, burst)) => format!("{}:{burst}", rate.spelled("")),
            None => "-".to_string(),
        };
        let mut line = format!(
            "{}\t{}\t{rate}\t{}",
            text_key(self.key.0.as_deref()),
            self.row.as_deref().unwrap_or("-"),
            self.waiting
        );
        if let (Some(jobs), Some(running)) = (self.jobs, self.running) {
            let jobs = jobs.map_or("-".to_string(), |n| n.to_string());
            line.push_str(&format!("\t{jobs}\t{running}"));
        }
        line
    }

    /// With `--exec`, its job limit and jobs running: `of` gives them for
    /// a key (`None`: not counted).
    pub fn with_jobs(&mut self, of: &dyn Fn(&[u8]) -> Option<JobsOfKey>) {
        if let Some((jobs, running)) = of(self.key.0.as_deref().unwrap_or_default()) {
            (self.jobs, self.running) = (Some(jobs), Some(running));
        }
    }
}

impl KeyStats {
    /// The keys' clauses of the summary, each with the separator after it:
    /// `keys seen 3 (remembered 3, busy 0); top written: a 10, b 5; top
    /// dropped: a 2; top waiting: none`, keys shown by [`text_key`].
    pub fn clauses(&self) -> Vec<Clause> {
        let mut clauses = vec![(
            format!(
                "keys seen {} (remembered {}, busy {})",
                self.keys_seen, self.keys, self.busy_keys
            ),
            ";",
        )];
        if self.dropped_unremembered > 0 {
            clauses.push((
                format!(
                    "{} records dropped: every remembered key busy",
                    self.dropped_unremembered
                ),
                ";",
            ));
        }
        for (title, list) in [
            ("top written", &self.top_written),
            ("top dropped", &self.top_dropped),
            ("top waiting", &self.top_waiting),
        ] {
            if list.is_empty() {
                clauses.push((format!("{title}: none"), ";"));
            }
            for (i, (key, n)) in list.iter().enumerate() {
                let item = format!("{} {n}", text_key(key.0.as_deref()));
                let clause = if i == 0 {
                    format!("{title}: {item}")
                } else {
                    item
                };
                clauses.push((clause, if i + 1 == list.len() { ";" } else { "," }));
            }
        }
        if self.keyless > 0 {
            let records = if self.keyless == 1 {
                "record"
            } else {
                "records"
            };
            clauses.push((format!("{} {records} with no key", self.keyless), ";"));
        }
        if let Some(last) = clauses.last_mut() {
            last.1 = "";
        }
        clauses
    }
}

impl Section for KeyStats {
    fn key(&self) -> &'static str {
        "keys"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self)
    }

    fn lines(&self) -> Vec<Vec<Clause>> {
        vec![self.clauses()]
    }

    /// On the display: `keys 9 (9 busy)`.
    /// `keys 9 (3 busy)`, and while records wait the key waiting longest
    /// with its limit: `longest github.com 1/s:2` (`-`: none of its own;
    /// with `--exec`, `jobs 2/2`: its jobs running of its job limit).
    fn shown(&self) -> Option<(Spot, String)> {
        let mut text = format!("keys {} ({} busy)", self.keys, self.busy_keys);
        if let Some(v) = &self.longest {
            let limit = v.rate.map_or("-".to_string(), |(rate, burst)| {
                format!("{}:{burst}", rate.spelled(""))
            });
            text.push_str(&format!(
                " longest {} {limit}",
                text_key(v.key.0.as_deref())
            ));
            if let (Some(jobs), Some(running)) = (v.jobs, v.running) {
                let jobs = jobs.map_or("-".to_string(), |n| n.to_string());
                text.push_str(&format!(" jobs {running}/{jobs}"));
            }
        }
        Some((Spot::Figures, text))
    }

    /// On a `--stats-interval` line, the keys remembered and busy now.
    fn interval_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("keys", serde_json::json!(self.keys)),
            ("busy_keys", serde_json::json!(self.busy_keys)),
        ]
    }

    /// The counts of keys, and the top keys only (at most ten a list), so
    /// the series stay bounded whatever the input.
    fn metrics(&self, out: &mut Exposition) {
        out.gauge("drip_keys", "Keys remembered now.", self.keys as f64);
        out.gauge(
            "drip_keys_busy",
            "Keys with records waiting now.",
            self.busy_keys as f64,
        );
        out.counter(
            "drip_keys_seen_total",
            "Keys taken into memory in all.",
            self.keys_seen as f64,
        );
        out.counter(
            "drip_keyless_records_total",
            "Records read that had no key (no such field, no match, not a URL with a host).",
            self.keyless as f64,
        );
        for (family, help, list) in [
            (
                "drip_top_key_written",
                "Records written, of the keys that wrote the most (the records without a key: has_key=\"false\").",
                &self.top_written,
            ),
            (
                "drip_top_key_dropped",
                "Records lost (dropped, expired), of the keys that lost the most.",
                &self.top_dropped,
            ),
            (
                "drip_top_key_waiting",
                "Records waiting, of the keys with the most waiting.",
                &self.top_waiting,
            ),
        ] {
            let mut f = MetricFamily::new(out, family, "gauge", help);
            for (key, n) in list {
                let (key, has_key) = key_labels(key);
                f.sample(&[("has_key", has_key), ("key", &key)], *n as f64);
            }
        }
        if let Some(limits) = &self.key_limits {
            let mut f = MetricFamily::new(
                out,
                "drip_top_key_limit_records_per_second",
                "gauge",
                "The limit in force, of each key the top lists name that has one, and its row of the rate table (row=\"\": none matches, --key-rate holds).",
            );
            for view in limits {
                let Some((rate, _)) = view.rate else { continue };
                let (key, has_key) = key_labels(&view.key);
                let row = view.row.as_deref().unwrap_or("");
                let labels = [("has_key", has_key), ("key", key.as_str()), ("row", row)];
                f.sample(&labels, rate.per_second());
            }
            if limits.iter().any(|v| v.running.is_some()) {
                job_families(out, limits);
            }
        }
        if let Some(v) = &self.longest {
            let mut f = MetricFamily::new(
                out,
                "drip_key_longest_waiting",
                "gauge",
                "The key whose oldest record has waited longest (drip_oldest_age_seconds is that record's age): its records waiting, its row of the rate table (row=\"\": none matches) and its limit in force (rate=\"\": none of its own).",
            );
            let (key, has_key) = key_labels(&v.key);
            let row = v.row.as_deref().unwrap_or("");
            let rate = v
                .rate
                .map_or(String::new(), |(r, b)| format!("{}:{b}", r.spelled("")));
            let labels = [
                ("has_key", has_key),
                ("key", key.as_str()),
                ("row", row),
                ("rate", rate.as_str()),
            ];
            f.sample(&labels, v.waiting as f64);
        }
    }
}

/// With `--exec`, each named key's job limit (a key with none left out)
/// and its jobs running, labelled as its rate limit is.
fn job_families(out: &mut Exposition, limits: &[KeyLimitView]) {
    for (family, help, value) in [
        (
            "drip_top_key_job_limit",
            "The job limit of each key the top lists name that has one (its row's JOBS, else --key-jobs), and its row.",
            (|v: &KeyLimitView| v.jobs.flatten().map(f64::from)) as fn(&KeyLimitView) -> Option<f64>,
        ),
        (
            "drip_top_key_jobs_running",
            "The jobs running of each key the top lists name, and its row.",
            |v: &KeyLimitView| v.running.map(f64::from),
        ),
    ] {
        let mut f = MetricFamily::new(out, family, "gauge", help);
        for view in limits {
            let Some(n) = value(view) else { continue };
            let (key, has_key) = key_labels(&view.key);
            let row = view.row.as_deref().unwrap_or("");
            f.sample(&[("has_key", has_key), ("key", key.as_str()), ("row", row)], n);
        }
    }
}

/// A key's labels: `key` as `--stats-json` spells it, and `has_key`,
/// `false` for the no-key lane (whose `key` is empty, as the empty key's
/// is): every sample of a family has the same labels.
fn key_labels(key: &KeyName) -> (String, &'static str) {
    match key.0.as_deref() {
        Some(bytes) => (json_key(bytes), "true"),
        None => (String::new(), "false"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The display and `--metrics` name the key waiting longest with its
    /// limit, and with `--exec` its jobs of its job limit.
    #[test]
    fn the_key_waiting_longest_is_shown_with_its_limit() {
        let view = |jobs: Option<Option<u32>>, running: Option<u32>| KeyLimitView {
            key: KeyName(Some(b"github.com".to_vec())),
            row: Some("*.github.com".into()),
            rate: Some((crate::rate::parse_rate("1/s").unwrap(), 2)),
            waiting: 340,
            jobs,
            running,
        };
        let mut keys = KeyStats {
            keys: 9,
            busy_keys: 3,
            ..KeyStats::default()
        };
        assert_eq!(keys.shown().unwrap().1, "keys 9 (3 busy)");
        keys.longest = Some(view(None, None));
        assert_eq!(
            keys.shown().unwrap().1,
            "keys 9 (3 busy) longest github.com 1/s:2"
        );
        keys.longest = Some(view(Some(Some(2)), Some(2)));
        assert_eq!(
            keys.shown().unwrap().1,
            "keys 9 (3 busy) longest github.com 1/s:2 jobs 2/2"
        );
        keys.longest = Some(KeyLimitView {
            rate: None,
            row: None,
            ..view(Some(None), Some(1))
        });
        assert_eq!(
            keys.shown().unwrap().1,
            "keys 9 (3 busy) longest github.com - jobs 1/-"
        );
        let mut out = Exposition {
            out: String::new(),
            drip: "a".into(),
        };
        keys.longest = Some(view(None, None));
        keys.metrics(&mut out);
        let text = out.out;
        assert!(
            text.contains(
                "drip_key_longest_waiting{drip=\"a\",has_key=\"true\",key=\"github.com\",row=\"*.github.com\",rate=\"1/s:2\"} 340"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_stats_interval_line_has_the_keys_counts_alone() {
        let keys = KeyStats {
            keys_seen: 9,
            keys: 3,
            busy_keys: 1,
            top_written: vec![(KeyName(None), 4)],
            ..KeyStats::default()
        };
        assert_eq!(
            keys.interval_fields(),
            [
                ("keys", serde_json::json!(3)),
                ("busy_keys", serde_json::json!(1))
            ]
        );
        assert_eq!(keys.json()["keys_seen"], 9);
    }
}
