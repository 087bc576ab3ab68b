//! A moment's view of the state, for the monitor: the display's and the
//! stats stream's snapshot, and the summary.

use super::report::{Detail, Moment};
use super::{Shared, TOP_KEYS};
use crate::progress::Snapshot;
use crate::report::keys::KeyStats;
use crate::report::Sections;
use crate::stats::Summary;

impl Shared {
    /// A moment's view, for the display and the stats stream.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut st = self.lock();
        let now = self.clock.now();
        let forecast_wait_ns = st.adm.forecast_wait(now);
        let bucket = st.adm.bucket();
        Snapshot {
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
        }
    }

    /// A moment's view for the display: the snapshot, each section's item
    /// of the display (`report::Section::shown`), and while paused when a
    /// section says the pause ends (under a `--schedule` row that pauses,
    /// the next row's start).
    pub(crate) fn display_snapshot(&self) -> Snapshot {
        let snap = self.snapshot();
        let sections = self.report.sections(&Moment {
            shared: self,
            snap: &snap,
            detail: Detail::Display,
        });
        Snapshot {
            shown: sections.shown(),
            paused_until: sections.pause_end().filter(|_| snap.paused),
            ..snap
        }
    }

    /// The key waiting longest, with its limit (and with `--exec` its
    /// jobs), for the display.
    pub(crate) fn longest_key(&self) -> Option<crate::report::keys::KeyLimitView> {
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
    /// the frame and the report's sections (the keys' as they were at the
    /// stop, once drip has stopped).
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
            paused: snap.paused,
            sections: self.sections_at(&snap),
        }
    }

    /// The report's sections, `snap` being the moment's view: each part's
    /// ([`super::report::Report`]), the report whole.
    pub(crate) fn sections_at(&self, snap: &Snapshot) -> Sections {
        self.report.sections(&Moment {
            shared: self,
            snap,
            detail: Detail::Whole,
        })
    }

    /// The sections of a `--stats-interval` line and the display, `snap`
    /// being the moment's view: as [`Shared::sections_at`], but a line's
    /// (the keys' are their counts alone, as the snapshot has them).
    pub(crate) fn interval_sections_at(&self, snap: &Snapshot) -> Sections {
        self.report.sections(&Moment {
            shared: self,
            snap,
            detail: Detail::Line,
        })
    }
}
