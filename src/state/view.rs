//! A moment's view of the state, for the monitor: the display's and the
//! stats stream's snapshot, and the summary.

use super::{Shared, TOP_KEYS};
use crate::progress::{PauseEnd, Snapshot};
use crate::report::costs::CostsSection;
use crate::report::keys::KeyStats;
use crate::report::ramp::RampState;
use crate::report::schedule::ScheduleRow;
use crate::report::Sections;
use crate::stats::{Queue, Summary};
use crate::sys::Unpoisoned;

impl Shared {
    /// A moment's view, for the display and the stats stream.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut st = self.lock();
        let now = self.clock.now();
        let forecast_wait_ns = st.adm.forecast_wait(now);
        let bucket = st.adm.bucket();
        let snap = Snapshot {
            counts: st.ledger.counts(),
            depth: bucket.len() as u64,
            bytes: bucket.bytes() as u64,
            max_depth: bucket.max_depth() as u64,
            oldest_age_ns: bucket.oldest_arrival().map_or(0, |t| now.saturating_sub(t)),
            forecast_wait_ns,
            writing_for_ns: st.writing.since.map_or(0, |t| now.saturating_sub(t)),
            elapsed_ns: now,
            reading_done: st.reading.done,
            departures: st.departures,
            keys: bucket
                .keys()
                .map(|k| (k.keys() as u64, k.busy_keys() as u64)),
            paused: st.adm.paused(),
            paused_until: None,
            shown: Vec::new(),
        };
        drop(st);
        // Paused under a row that pauses: the next row ends it.
        let row = self.schedule_row().filter(|r| snap.paused && r.pauses);
        let paused_until = row.and_then(|r| {
            Some(PauseEnd {
                clock: r.until_clock?,
                at: r.until?,
            })
        });
        Snapshot {
            paused_until,
            ..snap
        }
    }

    /// A moment's view for the display: the snapshot, and each section's
    /// item of the display (`report::Section::shown`).
    pub(crate) fn display_snapshot(&self) -> Snapshot {
        let snap = self.snapshot();
        let keys = snap.keys.map(|(keys, busy_keys)| KeyStats {
            keys,
            busy_keys,
            longest: self.longest_key(),
            ..KeyStats::default()
        });
        let shown = self.sections_of(&snap, keys).shown();
        Snapshot { shown, ..snap }
    }

    /// The key waiting longest, with its limit (and with `--exec` its
    /// jobs), for the display.
    fn longest_key(&self) -> Option<crate::report::keys::KeyLimitView> {
        let st = self.lock();
        let mut view = st.adm.bucket().keys().and_then(|k| k.longest());
        drop(st);
        if let (Some(v), Some(jobs)) = (view.as_mut(), self.jobs.get()) {
            v.with_jobs(&|k| jobs.key_jobs_of(k));
        }
        view
    }

    /// With limits per key, the keys' stats: as they were when drip
    /// stopped, if it has, or now (with `--exec`, each key's jobs running
    /// now).
    pub(crate) fn keys_stats(&self) -> Option<KeyStats> {
        let st = self.lock();
        let now = || st.adm.bucket().keys().map(|k| k.stats(TOP_KEYS));
        let mut stats = st.stop.keys_at_stop.clone().or_else(now);
        drop(st);
        if let (Some(stats), Some(jobs)) = (stats.as_mut(), self.jobs.get()) {
            let limits = stats.key_limits.iter_mut().flatten();
            limits
                .chain(stats.longest.as_mut())
                .for_each(|v| v.with_jobs(&|k| jobs.key_jobs_of(k)));
        }
        stats
    }

    /// The summary for `--stats`, `--stats-json` and SIGUSR1: the counts,
    /// the runner's figures, the keys' (as they were at the stop, once drip
    /// has stopped) and `--share`'s counters.
    pub(crate) fn summary(&self) -> Summary {
        let snap = self.snapshot();
        let longest_wait_ns = match self.jobs.get() {
            Some(jobs) => jobs.longest_wait_ns(),
            None => self.lock().adm.bucket().longest_wait_ns(),
        };
        let elapsed_ms = snap.elapsed_ns as f64 / 1e6;
        Summary {
            counts: snap.counts,
            max_depth: snap.max_depth,
            max_wait_ms: longest_wait_ns as f64 / 1e6,
            elapsed_ms,
            // A job's start is a departure: measured over enough starts.
            rate: match self.jobs.get() {
                Some(_) => snap.departures.start_rate(),
                None => snap.departures.rate(),
            },
            span_ms: snap.departures.span_ns() as f64 / 1e6,
            queue: Queue {
                depth: snap.depth,
                oldest_age_ms: snap.oldest_age_ns as f64 / 1e6,
                forecast_wait_ms: snap.forecast_wait_ns.map(|w| w as f64 / 1e6),
            },
            capacity_for: self.capacity_for.clone(),
            key_capacity_for: self.key_capacity_for.clone(),
            jobs: self.jobs.get().map(|j| j.stats()),
            paused: snap.paused,
            sections: self.sections_at(&snap),
        }
    }

    /// The sections of the report the parts hand over, `snap` being the
    /// moment's view: the `--schedule` row in force, where the `--ramp`
    /// stands, the `--budget`s, the cost limits' spend. A new figure is
    /// one line here.
    pub(crate) fn sections_at(&self, snap: &Snapshot) -> Sections {
        self.sections_of(snap, self.keys_stats())
    }

    /// The sections of a `--stats-interval` line, `snap` being the
    /// moment's view: as [`Shared::sections_at`], but the keys' are their
    /// counts alone, as the snapshot has them (the line carries no more;
    /// the top lists, sorted over every key under the state's lock, are
    /// not made at each tick).
    pub(crate) fn interval_sections_at(&self, snap: &Snapshot) -> Sections {
        let keys = snap.keys.map(|(keys, busy_keys)| KeyStats {
            keys,
            busy_keys,
            ..KeyStats::default()
        });
        self.sections_of(snap, keys)
    }

    /// The sections with the keys' as `keys` says.
    fn sections_of(&self, snap: &Snapshot, keys: Option<KeyStats>) -> Sections {
        let mut sections = Sections::default();
        sections.extend(keys);
        sections.extend(self.schedule_row());
        sections.extend(self.ramp_state(snap));
        let st = self.lock();
        let now = self.clock.now();
        let schedule = st.adm.schedule();
        schedule
            .sections(now)
            .into_iter()
            .for_each(|s| sections.add(s));
        sections.extend(CostsSection::of(&schedule.costs()));
        drop(st);
        let jobs = self.jobs.get().map(|j| j.sections()).unwrap_or_default();
        jobs.into_iter().for_each(|s| sections.add(s));
        // Not under the state's lock: the keepers take theirs first.
        sections.extend(self.share.get().map(crate::shared::Counters::stats));
        sections
    }

    /// With `--schedule`, the row in force.
    pub(crate) fn schedule_row(&self) -> Option<ScheduleRow> {
        self.schedule_row.lock().unpoisoned().clone()
    }

    /// With `--ramp`, where it stands at the snapshot: it began with the
    /// first departure.
    pub(crate) fn ramp_state(&self, snap: &Snapshot) -> Option<RampState> {
        let ramp = self.lock().adm.schedule().ramp()?;
        let (fraction, left_ns) = if snap.departures.records == 0 {
            (ramp.from, ramp.over_ns)
        } else {
            let warp = crate::ramp::Warp::new(ramp, snap.departures.first_ns);
            let now = snap.elapsed_ns;
            (warp.fraction_at(now), warp.end().saturating_sub(now))
        };
        Some(RampState {
            from: ramp.from,
            over_ms: ramp.over_ns as f64 / 1e6,
            fraction,
            left_ms: left_ns as f64 / 1e6,
        })
    }
}
