//! The report's parts: each part with figures hands its sections over at
//! each view (the summary, a `--stats-interval` line, `drip ctl info`, the
//! display), in the order of [`Report`], which the wiring sets once; and
//! the state's own parts (the waiting room, the runner, the keys, the
//! ramp, the pace's stages and costs, the job hooks).

use std::fmt;
use std::sync::Arc;

use super::Shared;
use crate::progress::Snapshot;
use crate::report::capacity::SizedBound;
use crate::report::costs::CostsSection;
use crate::report::keys::KeyStats;
use crate::report::ramp::RampState;
use crate::report::runner::RunnerFigures;
use crate::report::waiting::Queue;
use crate::report::{Kept, Section, Sections};

/// The moment a view is of: the state, the snapshot taken, and how much
/// of the report the view shows.
pub(crate) struct Moment<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) snap: &'a Snapshot,
    pub(crate) detail: Detail,
}

/// How much of the report a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    /// The report whole: the summary, `drip ctl info`.
    Whole,
    /// A `--stats-interval` line's: the keys' counts alone, as the
    /// snapshot has them (the top lists, sorted over every key under the
    /// state's lock, are not made at each tick).
    Line,
    /// The display's: a line's, and the key waiting longest.
    Display,
}

/// A part of the report: the sections it hands over at a moment.
type Part = Box<dyn Fn(&Moment<'_>, &mut Sections) + Send + Sync>;

/// The report's parts, in the order the views show their sections (each
/// view by place: [`crate::report::Among`]).
#[derive(Default)]
pub(crate) struct Report(Vec<Part>);

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Report({} parts)", self.0.len())
    }
}

impl Report {
    /// `part` after the others.
    pub(crate) fn with(
        mut self,
        part: impl Fn(&Moment<'_>, &mut Sections) + Send + Sync + 'static,
    ) -> Report {
        self.0.push(Box::new(part));
        self
    }

    /// The latest section its part `kept`, after the others.
    pub(crate) fn with_kept<T: Section + Clone + 'static>(self, kept: Arc<Kept<T>>) -> Report {
        self.with(move |_, into| into.extend(kept.get()))
    }

    /// Every part's sections at `at`.
    pub(crate) fn sections(&self, at: &Moment<'_>) -> Sections {
        let mut sections = Sections::default();
        for part in &self.0 {
            part(at, &mut sections);
        }
        sections
    }
}

/// The waiting room's part: its `bounds` given as durations (fixed at
/// the start), what waits, and the wait foreseen.
pub(crate) fn queue(bounds: Vec<SizedBound>) -> impl Fn(&Moment<'_>, &mut Sections) {
    move |at, into| {
        let snap = at.snap;
        into.push(Queue {
            depth: snap.depth,
            oldest_age_ms: snap.oldest_age_ns as f64 / 1e6,
            forecast_wait_ms: snap.forecast_wait_ns.map(|w| w as f64 / 1e6),
            bounds: bounds.clone(),
        });
    }
}

/// The runner's part, with `--exec`: its figures, slots and records done.
pub(crate) fn runner(at: &Moment<'_>, into: &mut Sections) {
    if let Some(jobs) = at.shared.jobs.get() {
        into.push(RunnerFigures {
            stats: jobs.stats(),
            slots: jobs.slots(),
            succeeded: at.snap.counts.succeeded,
            failed: at.snap.counts.failed,
        });
    }
}

/// The keys' part, with limits per key: their stats in the report whole,
/// their counts on a line, and on the display the key waiting longest
/// too.
pub(crate) fn keys(at: &Moment<'_>, into: &mut Sections) {
    let counts = |(keys, busy_keys)| KeyStats {
        keys,
        busy_keys,
        ..KeyStats::default()
    };
    let keys = match at.detail {
        Detail::Whole => at.shared.keys_stats(),
        Detail::Line => at.snap.keys.map(counts),
        Detail::Display => at.snap.keys.map(|n| KeyStats {
            longest: at.shared.longest_key(),
            ..counts(n)
        }),
    };
    into.extend(keys);
}

/// The `--ramp`'s part: where it stands at the snapshot (it began with
/// the first departure).
pub(crate) fn ramp(at: &Moment<'_>, into: &mut Sections) {
    let Some(ramp) = at.shared.lock().adm.schedule().ramp() else {
        return;
    };
    let snap = at.snap;
    let (fraction, left_ns) = if snap.departures.records == 0 {
        (ramp.from, ramp.over_ns)
    } else {
        let warp = crate::ramp::Warp::new(ramp, snap.departures.first_ns);
        let now = snap.elapsed_ns;
        (warp.fraction_at(now), warp.end().saturating_sub(now))
    };
    into.push(RampState {
        from: ramp.from,
        over_ms: ramp.over_ns as f64 / 1e6,
        fraction,
        left_ms: left_ns as f64 / 1e6,
    });
}

/// The pace's part: its stages' sections (the `--budget`s') and the cost
/// limits' spend.
pub(crate) fn pace(at: &Moment<'_>, into: &mut Sections) {
    let st = at.shared.lock();
    let now = at.shared.clock.now();
    let schedule = st.adm.schedule();
    schedule.sections(now).into_iter().for_each(|s| into.add(s));
    into.extend(CostsSection::of(&schedule.costs()));
}

/// The job hooks' part, with `--exec`: each per-job feature's section
/// (`--share-jobs`').
pub(crate) fn hooks(at: &Moment<'_>, into: &mut Sections) {
    let jobs = at.shared.jobs.get().map(|j| j.sections());
    jobs.unwrap_or_default()
        .into_iter()
        .for_each(|s| into.add(s));
}
