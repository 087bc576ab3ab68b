//! What the reader, the writer and the monitor share, behind one lock.
//!
//! [`State`] holds the pure parts (admission with its bucket and schedule,
//! the ledger) and the few facts about the threads that they need to agree
//! on, grouped by whom they concern; the special cases that the design does
//! not make disappear are named inside each part:
//!
//! - [`Reading`] (`reading.rs`) — what the reader holds outside the books:
//!   *the parked read*, the `leftover` records of a stop, the record it is
//!   `finishing` itself at a stop, how much room it waits for; and the
//!   reader's face on the state (may it write to stdout itself, may records
//!   leave now, which policy applies, its own write accounted for).
//! - [`Writing`] (`writing.rs`) — the way out: *the begun record* (`tail`),
//!   *the batch in flight*, when the write began, whether the sink is full;
//!   and the writer's face (topping the bucket up from the parked read,
//!   what a write did not finish, as undelivered).
//! - [`Stopping`] and [`Stops`] (`stopping.rs`) — how drip is stopping:
//!   the stop flags and why (an overflow, a write error, the keys at the
//!   stop) under the lock; the flags a write reads between its calls, the
//!   signals and the threads to interrupt, without it; stopping the
//!   threads, leaving after a second signal, and what is left at a stop.
//! - `view.rs` — the monitor's face: the snapshot and the summary.
//! - [`Report`] (`report.rs`) — the report's parts in the order the views
//!   show them, set once by the wiring; the state's own parts.
//!
//! Invariant (checked at exit): every record read is in exactly one place —
//! the bucket, the outbox, the writer's batch, the begun record — or has
//! its fate in the ledger; the reader's holdings are records not yet
//! counted.

mod reading;
pub(crate) mod report;
mod stopping;
mod view;
mod writing;

pub(crate) use reading::Reading;
pub(crate) use report::Report;
pub(crate) use stopping::{Stopping, Stops};
pub(crate) use writing::{whole_again, Writing, STALL_NS};

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::admission::Admission;
use crate::bucket::Segment;
use crate::deadletter::{Backlog, DeadLetter};
use crate::keyed::NoRoom;
use crate::ledger::JobFate;
use crate::ledger::Ledger;
use crate::output;
use crate::report::runner::JobStats;
use crate::report::spell::format_ms;
use crate::stats::Departures;
use crate::sys::{self, Unpoisoned};

/// How many keys of each kind the summary names (`--key`).
const TOP_KEYS: usize = 10;

/// Monotonic nanoseconds since drip started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(pub(crate) Instant);

impl Clock {
    pub(crate) fn now(&self) -> u64 {
        sys::ns_since(self.0)
    }
}

/// A budget was spent while records waited, under `--budget-exhausted
/// stop`.
#[derive(Debug)]
pub struct BudgetSpent {
    /// The budget, as given: `20/second@UTC`.
    pub budget: String,
}

impl std::fmt::Display for BudgetSpent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "budget {} spent under --budget-exhausted stop; the records not written are undelivered",
            self.budget
        )
    }
}

impl std::error::Error for BudgetSpent {}

/// The bucket overflowed under `--overflow fail`.
#[derive(Debug)]
pub struct OverflowError {
    /// 1-based number of the record that did not fit.
    pub record: u64,
    /// What happened, in words: "arrived at a full bucket (capacity 10
    /// records)".
    pub why: String,
}

impl OverflowError {
    /// Record `record` found no room in what `adm` says was full.
    pub(crate) fn new(record: u64, adm: &Admission) -> OverflowError {
        let bucket = adm.bucket();
        let why = match (adm.refused_wait_ns(), adm.max_wait_ns()) {
            (Some(wait), Some(max)) => format!(
                "could not leave in time: the schedule puts its departure {} after its arrival, past --max-wait {}",
                format_ms(wait as f64 / 1e6),
                format_ms(max as f64 / 1e6)
            ),
            _ => match bucket.keys().map(|k| (k, k.no_room())) {
                Some((keys, NoRoom::Key)) => format!(
                    "arrived at its key's full queue (--key-capacity {})",
                    keys.key_capacity()
                ),
                Some((keys, NoRoom::Keys)) => format!(
                    "brought a new key while all {} remembered keys were busy (--max-keys {0})",
                    keys.max_keys()
                ),
                _ if bucket.capacity_bytes() == usize::MAX => format!(
                    "arrived at a full bucket (capacity {} records)",
                    bucket.capacity()
                ),
                _ => format!(
                    "arrived at a full bucket (capacity {} records, {} bytes)",
                    bucket.capacity(),
                    bucket.capacity_bytes()
                ),
            },
        };
        OverflowError { record, why }
    }
}

impl std::fmt::Display for OverflowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "overflow: record {} {} under --overflow fail",
            self.record, self.why
        )
    }
}

impl std::error::Error for OverflowError {}

/// Everything the threads share, behind one lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) adm: Admission,
    pub(crate) ledger: Ledger,
    /// When the first and the latest records were written, for the rate.
    pub(crate) departures: Departures,
    pub(crate) dead: DeadLetter,
    /// What the reader holds outside the books.
    pub(crate) reading: Reading,
    /// The way out: what has begun and not finished.
    pub(crate) writing: Writing,
    /// How drip is stopping.
    pub(crate) stop: Stopping,
}

/// The command runner (`--exec`), as the other threads see it.
pub(crate) trait Jobs: Send + Sync + std::fmt::Debug {
    /// Whether a job slot is free.
    fn has_room(&self) -> bool;
    /// The runner's figures now.
    fn stats(&self) -> JobStats;

    /// The sections of the report its per-job features keep (the shared
    /// job limit's, say).
    fn sections(&self) -> Vec<std::sync::Arc<dyn crate::report::Section>>;
    /// What the live display shows of the jobs now: the figures (the
    /// attempts' median only), and the overload pauses under way; `None`
    /// when the figures are busy (the display skips a frame rather than
    /// wait: it is drawn by the thread that handles the signals).
    fn view(&self) -> Option<crate::progress::JobsView>;
    /// The longest a started record waited from being read to its job's
    /// start, ns (the summary's `max_wait_ms`).
    fn longest_wait_ns(&self) -> u64;
    /// A second signal: TERM every job's process group now and KILL it
    /// [`KILL_AFTER_LEAVE`] later, without waiting; a job killed so is
    /// undelivered as its attempt ends, one that exited keeps its fate.
    fn terminate(&self);
    /// Leaving without the threads (they did not let go in time): TERM,
    /// then KILL, every job's process group; returns their records, each
    /// with its fate: a job that ended (its output still being passed on)
    /// by its status, the others undelivered.
    fn abandon(&self) -> Vec<(Segment, JobFate)>;
    /// Leaving: interrupt the writes of the threads passing a job's output
    /// on (a stalled stdout or stderr), which then give up; called again
    /// and again until the threads let go.
    fn interrupt_output(&self);
    /// How many jobs may run at once (`-j`).
    fn slots(&self) -> usize;
    /// Let `n` jobs run at once from now on (`drip ctl … -j`): more start
    /// at once when raised; when lowered, running jobs finish and no new
    /// one starts until fewer than `n` run.
    fn set_slots(&self, n: usize);
    /// At most `n` jobs of one key at once (`--key-jobs`), when set.
    fn key_jobs(&self) -> Option<usize>;
    /// Let `n` jobs of one key run at once from now on (`drip ctl …
    /// key-jobs`): a key held at its limit goes again at once when
    /// raised; when lowered, no job of a key starts until fewer than `n`
    /// of it run.
    ///
    /// # Errors
    /// drip was started without `--key-jobs`: its jobs are not counted.
    fn set_key_jobs(&self, n: usize) -> Result<(), String>;
    /// Each key's job limit from now on its row's JOBS column in `rows`
    /// (the rate table read again), else `--key-jobs`: a key held below
    /// its new limit goes again at once.
    fn set_key_job_rows(&self, rows: &crate::keyed::KeyRates);
    /// `key`'s job limit (`None`: none) and its jobs running now; `None`:
    /// each key's jobs are not counted (no `--key`).
    fn key_jobs_of(&self, key: &[u8]) -> Option<(Option<u32>, u32)>;
    /// The jobs running now: each one's number (in order of start) and
    /// its record, without the delimiter.
    fn running(&self) -> Vec<(u64, Vec<u8>)>;
    /// Something the runner's waits wait for may have come: a stop, a
    /// pause lifted or new limits (`drip ctl`), slots from `--share`.
    fn wake(&self);
}

/// After a second signal, how long jobs have between TERM and KILL.
pub(crate) const KILL_AFTER_LEAVE: Duration = Duration::from_millis(200);

impl State {
    /// A state around `adm`, with nothing read yet.
    pub(crate) fn new(adm: Admission, dead: DeadLetter, keep_dead: bool) -> State {
        State {
            adm,
            ledger: Ledger::new(keep_dead),
            departures: Departures::default(),
            dead,
            reading: Reading::default(),
            writing: Writing::default(),
            stop: Stopping::default(),
        }
    }

    /// Write what the ledger set aside for the dead letter.
    pub(crate) fn flush_dead(&mut self) {
        let dead = self.ledger.take_dead();
        if !dead.is_empty() {
            self.dead.write(&dead);
        }
    }
}

/// The state and how the threads reach each other.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// The writer waits here for records, deadlines and stops.
    pub(crate) data_ready: Condvar,
    /// The reader waits here for room in the bucket.
    pub(crate) space_ready: Condvar,
    /// Wakes the reader from a wait for input.
    pub(crate) waker: sys::Waker,
    pub(crate) clock: Clock,
    /// Nothing is limited: `--rate inf`.
    pub(crate) unpaced: bool,
    /// Unpaced: how the reader may write to stdout itself.
    pub(crate) direct: Option<output::Direct>,
    /// Bytes of the writer's batch ([`Writing::in_flight`]) written so far.
    pub(crate) in_flight_written: AtomicUsize,
    /// How drip is stopping, seen without the lock.
    pub(crate) stops: Stops,
    /// What waits for the dead-letter thread; reading waits while it is
    /// full.
    pub(crate) dead_backlog: Arc<Backlog>,
    /// The command runner, with `--exec`.
    pub(crate) jobs: OnceLock<Arc<dyn Jobs>>,
    /// The report's parts, in order: what each view shows.
    pub(crate) report: Report,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unpoisoned()
    }

    /// Wake the command runner's waits, with `--exec` ([`Jobs::wake`]).
    pub(crate) fn wake_jobs(&self) {
        if let Some(jobs) = self.jobs.get() {
            jobs.wake();
        }
    }
}
