//! The shared state the threads hold: admission over the schedule of
//! the configured limits (local or `--share`d, budgets, a ramp, the
//! runner's gate), the dead letter, and the keepers of `--share` waking
//! and stopping it.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::admission::Admission;
use crate::bucket::Bucket;
use crate::cli::Config;
use crate::deadletter::DeadLetter;
use crate::jobs::gate::{Gate, GateControl};
use crate::keyed::Keyed;
use crate::pace::{Base, BudgetStage, Pace};
use crate::report::capacity::SizedBound;
use crate::report::schedule::ScheduleRow;
use crate::report::Kept;
use crate::schedule::{InForce, Limit, Limits, LimitsInForce};
use crate::shared;
use crate::state::report::{self as parts, Report};
use crate::state::{Clock, Shared, State, Stops};
use crate::{output, sys};

/// Where the `--schedule` row in force is kept for the report.
pub(super) type RowShown = Arc<Kept<ScheduleRow>>;

/// The shared state for `config`: admission over the configured limits
/// (local, or `--share`d, and behind `gate` with `--exec`), the running
/// `--share`, if any, and with `--schedule` where its row in force is
/// kept for the report.
pub(super) fn shared_state(
    config: &Config,
    out_fd: Option<std::os::fd::OwnedFd>,
    gate: Option<Arc<GateControl>>,
    give_up: &mut dyn FnMut() -> bool,
    books: &mut Vec<Arc<shared::budget::Book>>,
) -> Result<(Arc<Shared>, Option<shared::Handle>, Option<RowShown>)> {
    let origin = Instant::now();
    let (schedule, key_schedule, share) = schedule_of(config, origin, gate, books)?;
    let (dead, keep_dead, stopped_by) = dead_letter(config, give_up)?;
    let dead_backlog = dead.backlog();
    // A schedule's rows may set a rate: the writer paces.
    let unpaced = config.limits.is_empty()
        && config.budgets.is_empty()
        && config.key.is_none()
        && config.schedule.is_none();
    let adm = admission(config, schedule, key_schedule);
    let row = config.schedule.as_ref().map(|_| RowShown::default());
    let report = report_of(config, row.clone(), share.as_ref());
    let shared = Arc::new(Shared {
        state: Mutex::new(State::new(adm, dead, keep_dead)),
        data_ready: Condvar::new(),
        space_ready: Condvar::new(),
        waker: sys::Waker::new().context("creating a pipe")?,
        clock: Clock(origin),
        unpaced,
        direct: out_fd.filter(|_| unpaced).and_then(output::Direct::new),
        in_flight_written: AtomicUsize::new(0),
        stops: Stops::default(),
        dead_backlog,
        jobs: OnceLock::new(),
        report,
    });
    let _ = stopped_by.set(Arc::downgrade(&shared));
    Ok((shared, share, row))
}

/// The report's parts for `config`, in the order every view shows them
/// (each by its section's place): the waiting room (with the bounds given
/// as durations), the runner, the keys, the `--schedule` row (kept in `row`),
/// the `--ramp`, the pace's stages and costs, the job hooks, `--share`'s
/// counters. A new figure is one line here.
fn report_of(config: &Config, row: Option<RowShown>, share: Option<&shared::Handle>) -> Report {
    let counters = share.map(shared::Handle::counters);
    let bounds = [
        config.capacity_for.clone().map(SizedBound::capacity),
        config
            .key_capacity_for
            .clone()
            .map(SizedBound::key_capacity),
    ];
    let mut report = Report::default()
        .with(parts::queue(bounds.into_iter().flatten().collect()))
        .with(parts::runner)
        .with(parts::keys);
    if let Some(row) = row {
        report = report.with_kept(row);
    }
    report = report
        .with(parts::ramp)
        .with(parts::pace)
        .with(parts::hooks);
    if let Some(counters) = counters {
        // Not under the state's lock: the keepers take theirs first.
        report = report.with(move |_, into| into.push(counters.stats()));
    }
    report
}

/// A run's pace, the per-key grants of a `--share`d key rate, and the
/// running `--share`.
type Scheduled = (
    Pace,
    Option<shared::keys::SharedKeys>,
    Option<shared::Handle>,
);

/// The pace for `config`'s limits from `origin` on, in its one order: the
/// base, local or `--share`d (with the per-key grants of a shared key
/// rate), on a `--ramp`'s clock; the `--budget`s (their books put in
/// `books` when shared); the gate with `--exec`. And the running
/// `--share`, if any.
fn schedule_of(
    config: &Config,
    origin: Instant,
    gate: Option<Arc<GateControl>>,
    books: &mut Vec<Arc<shared::budget::Book>>,
) -> Result<Scheduled> {
    // The wall clock at `origin`, where the budgets' windows are found.
    let wall = shared::budget::unix_now();
    let (base, key_schedule, share) = match &config.share {
        Some(share) => {
            let opened = shared::open(
                share,
                &config.limits,
                config.key.as_ref(),
                Some(&config.cost).filter(|c| c.weighs()),
                origin,
            )?;
            *books = config
                .budgets
                .iter()
                .map(|b| shared::budget::start(share, b, opened.handle.keeper()))
                .collect::<Result<_>>()?;
            let base = match opened.schedule {
                Some(schedule) => Base::Shared(Box::new(schedule)),
                None => Base::Local(local_limits(config)),
            };
            (base, opened.keys, Some(opened.handle))
        }
        None => (Base::Local(local_limits(config)), None, None),
    };
    let mut pace = Pace::new(base);
    if let Some(ramp) = config.ramp {
        pace = pace.ramped(ramp);
    }
    if !config.budgets.is_empty() {
        let counters = counters(config, wall, books);
        pace = pace.with_stage(Box::new(BudgetStage::new(
            counters,
            config.budget_exhausted,
        )));
    }
    if let Some(gate) = gate {
        pace = pace.with_stage(Box::new(Gate::new(gate)));
    }
    Ok((pace, key_schedule, share))
}

/// Where the drip that a failed dead-letter write stops will be, once
/// made.
type StoppedBy = Arc<OnceLock<Weak<Shared>>>;

/// The dead letter of `config` (none, its records only counted, when it
/// is a FIFO no one read before `give_up` said so), whether its records
/// are kept, and where the drip it stops on a failed write will be.
fn dead_letter(
    config: &Config,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(DeadLetter, bool, StoppedBy)> {
    // A failed dead-letter write stops drip at once: any further record
    // not written would be lost without a trace.
    let cell = Arc::new(OnceLock::<Weak<Shared>>::new());
    let to_stop = Arc::clone(&cell);
    let failed = Box::new(move || {
        if let Some(shared) = to_stop.get().and_then(Weak::upgrade) {
            shared.stop(false);
        }
    });
    let dead = DeadLetter::open(
        config.dead_letter.as_deref(),
        config.delimiter,
        failed,
        give_up,
    )?;
    let keep_dead = config.dead_letter.is_some() && dead.is_some();
    let dead = dead.unwrap_or_else(|| DeadLetter::none(config.delimiter));
    Ok((dead, keep_dead, cell))
}

/// Admission for `config`: its bucket, `schedule`, the longest a record
/// may wait (`--max-wait`, or a job's `--deadline`, which counts its time
/// in the bucket too), and with `--key` the keyed queues.
fn admission(
    config: &Config,
    schedule: Pace,
    key_schedule: Option<shared::keys::SharedKeys>,
) -> Admission {
    let bucket = Bucket::new(config.capacity, config.capacity_bytes, config.overflow);
    let deadline = config.jobs.as_ref().and_then(|j| j.deadline);
    let max_wait_ns = [config.max_wait, deadline]
        .into_iter()
        .flatten()
        .min()
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let adm = Admission::new(bucket, schedule, max_wait_ns);
    match keyed(config, key_schedule) {
        Some(keyed) => adm.with_keys(keyed),
        None => adm,
    }
}

/// The local limits of `config`, costs read as `--cost` says.
fn local_limits(config: &Config) -> Limits {
    let limits = Limits::new(&config.limits).with_cost(config.cost.clone());
    match &config.jobs {
        Some(jobs) if !jobs.settle.is_empty() => limits.with_settling(),
        _ => limits,
    }
}

/// The counters of `config`'s `--budget`s on the wall clock whose reading
/// at the schedule's 0 is `origin` (ns since the Unix epoch), each through
/// its book in `books` when `--share`d.
fn counters(
    config: &Config,
    origin: i128,
    books: &[Arc<shared::budget::Book>],
) -> Vec<crate::budget::Counter> {
    // A second of the rate (every record at once when unpaced).
    let per_second = config.records_per_second();
    let ahead = if per_second.is_finite() {
        per_second.ceil() as u64
    } else {
        u64::MAX
    };
    config
        .budgets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let counter = crate::budget::Counter::new(b.clone(), origin);
            match books.get(i) {
                Some(book) => counter.shared(Arc::clone(book) as _, ahead),
                None => counter,
            }
        })
        .collect()
}

/// The keyed queues of `--key`, if given: over `shared_keys`, the
/// per-key grants of a `--share`d key rate, when there are.
fn keyed(config: &Config, shared_keys: Option<shared::keys::SharedKeys>) -> Option<Keyed> {
    let key = config.key.as_ref()?;
    let mut keyed = Keyed::new(
        key.clone(),
        config.delimiter,
        config.capacity,
        config.capacity_bytes,
    );
    if let Some(shared_keys) = shared_keys {
        keyed = keyed.with_shared(Box::new(shared_keys));
    }
    if config.jobs.is_some() {
        // The runner times each record from its arrival.
        keyed = keyed.records_apart();
    }
    Some(keyed)
}

/// The keeper of `--share` wakes the writer when slots arrive, and stops
/// drip when it must.
fn notify_from_share(shared: &Arc<Shared>) -> shared::Notify {
    let shared = Arc::downgrade(shared);
    Box::new(move |stop| {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if stop {
            shared.stop(false);
        } else {
            let _st = shared.lock();
            shared.data_ready.notify_all();
            // A retry waiting for a slot takes one of these too.
            shared.wake_jobs();
        }
    })
}

/// The keepers of `--share` (its limits' and each shared `--budget`'s)
/// wake the writer of `shared`, and stop it.
pub(super) fn wake_from_share(
    shared: &Arc<Shared>,
    share: Option<&shared::Handle>,
    books: &[Arc<shared::budget::Book>],
) {
    for book in books {
        book.set_wake(Arc::from(notify_from_share(shared)));
    }
    if let Some(share) = share {
        share.set_notify(notify_from_share(shared));
    }
}

/// The global limits and the limit per key in force, as given at the
/// start; under `--share`, its keepers keep them the shared ones as
/// `drip ctl` changes them on any drip of the NAME.
pub(super) fn limits_in_force(config: &Config, share: Option<&shared::Handle>) -> LimitsInForce {
    let in_force: InForce = Arc::new(Mutex::new(config.limits.clone()));
    let key_limit = config.key.as_ref();
    let key_limit = key_limit.map(|k| Limit::records(k.rate, Some(k.burst)));
    let key_in_force = Arc::new(Mutex::new(key_limit));
    if let Some(share) = share {
        share.follow_in_force(&in_force, &key_in_force);
    }
    LimitsInForce {
        limits: in_force,
        key: key_in_force,
    }
}

/// What stopped a shared `--budget`'s keeper, if anything did: its count
/// unreachable under `--share-on-error fail`, or unusable.
fn budget_error(config: &Config, books: &[Arc<shared::budget::Book>]) -> Option<anyhow::Error> {
    let name = config.share.as_ref()?.target.name();
    books.iter().find_map(|b| b.failed(name))
}

/// At the end, the unused slots and budget grants go back before drip
/// takes stock, best effort: a keeper held up by a hung server is not
/// waited for beyond a short bound, and not at all after a second
/// signal. What stopped the share or a shared budget, if anything did.
pub(super) fn give_back(
    config: &Config,
    shared: &Shared,
    share: Option<&mut shared::Handle>,
    books: &[Arc<shared::budget::Book>],
) -> Option<anyhow::Error> {
    let leaving = || shared.stops.leaving();
    let share_error = share
        .and_then(|s| s.finish(shared::GIVE_BACK_WAIT, &leaving))
        .or_else(|| budget_error(config, books));
    // Every book's grants go back at once, waited for together.
    let given_back_by = Instant::now() + shared::GIVE_BACK_WAIT;
    for book in books {
        book.leave();
    }
    for book in books {
        book.given_back(given_back_by, &leaving);
    }
    share_error
}
