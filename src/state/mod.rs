//! What the reader, the writer and the monitor share, behind one lock.
//!
//! [`State`] holds the pure parts (admission with its bucket and schedule,
//! the ledger) and the few facts about the threads that they need to agree
//! on, grouped by whom they concern; the special cases that the design does
//! not make disappear are named inside each part:
//!
//! - [`Reading`] (`reading.rs`) — what the reader holds outside the books:
//!   *the parked read*, the `leftover` records of a stop, the record it is
//!   `finishing` itself at a stop, how much room it waits for.
//! - [`Writing`] (`writing.rs`) — the way out: *the begun record* (`tail`),
//!   *the batch in flight*, when the write began, whether the sink is full.
//! - [`Stopping`] and [`Stops`] (`stopping.rs`) — how drip is stopping:
//!   the stop flags and why (an overflow, a write error, the keys at the
//!   stop) under the lock; the flags a write reads between its calls, the
//!   signals and the threads to interrupt, without it.
//!
//! Invariant (checked at exit): every record read is in exactly one place —
//! the bucket, the outbox, the writer's batch, the begun record — or has
//! its fate in the ledger; the reader's holdings are records not yet
//! counted.

mod reading;
mod stopping;
mod writing;

pub(crate) use reading::Reading;
pub(crate) use stopping::{Stopping, Stops};
pub(crate) use writing::{Writing, STALL_NS};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::admission::Admission;
use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::deadletter::{Backlog, DeadLetter};
use crate::keyed::NoRoom;
use crate::ledger::Ledger;
use crate::output;
use crate::progress::Snapshot;
use crate::stats::{Departures, JobStats, KeyStats, Summary};
use crate::sys;

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
        let mut why = format!(
            "arrived at a full bucket (capacity {} records",
            bucket.capacity()
        );
        if bucket.capacity_bytes() != usize::MAX {
            why += &format!(", {} bytes", bucket.capacity_bytes());
        }
        why += ")";
        if let Some(keys) = adm.keys() {
            match keys.no_room() {
                NoRoom::Bucket => {}
                NoRoom::Key => {
                    why = format!(
                        "arrived at its key's full queue (--key-capacity {})",
                        keys.key_capacity()
                    );
                }
                NoRoom::Keys => {
                    why = format!(
                        "brought a new key while all {} remembered keys were busy (--max-keys {0})",
                        keys.max_keys()
                    );
                }
            }
        }
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
    /// The longest a started record waited from being read to its job's
    /// start, ns (the summary's `max_wait_ms`).
    fn longest_wait_ns(&self) -> u64;
    /// A second signal: TERM every job's process group now and KILL it
    /// [`KILL_AFTER_LEAVE`] later, without waiting; each job's record is
    /// undelivered as its attempt ends.
    fn terminate(&self);
    /// Leaving without the threads (they did not let go in time): TERM,
    /// then KILL, every job's process group; returns their records, now
    /// undelivered.
    fn abandon(&self) -> Vec<Segment>;
    /// How many jobs may run at once (`-j`).
    fn slots(&self) -> usize;
    /// Let `n` jobs run at once from now on (`drip ctl … -j`): more start
    /// at once when raised; when lowered, running jobs finish and no new
    /// one starts until fewer than `n` run.
    fn set_slots(&self, n: usize);
    /// The jobs running now: each one's number (in order of start) and
    /// its record, without the delimiter.
    fn running(&self) -> Vec<(u64, Vec<u8>)>;
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

    /// Leaving mid-write (a second signal): what the writer and the reader
    /// were still writing, as undelivered; `written` bytes of the writer's
    /// batch went out. A record under way goes to the dead letter whole.
    pub(crate) fn drain_in_flight(&mut self, written: usize) {
        let mut batch = std::mem::take(&mut self.writing.in_flight);
        let skip = output::whole_records(&batch, written) as usize;
        whole_again(&mut batch, self.writing.in_flight_begun.take(), skip);
        self.dispose_after(batch, skip);
        if let Some(record) = self.reading.finishing.take() {
            self.ledger.read_undelivered(record);
        }
    }

    /// The records of `batch` after the first `skip`, as undelivered.
    pub(crate) fn dispose_after(&mut self, batch: Vec<Segment>, mut skip: usize) {
        for mut seg in batch {
            if skip >= seg.len() {
                skip -= seg.len();
                continue;
            }
            seg.split_front(skip);
            skip = 0;
            self.ledger.dispose(seg, Fate::Undelivered);
        }
    }

    /// Everything still queued, then what the reader held, as undelivered.
    /// The keys' stats are taken first ([`Stopping::keys_at_stop`]), so the
    /// summary names the keys whose records were left.
    pub(crate) fn drain_undelivered(&mut self) {
        if self.stop.keys_at_stop.is_none() {
            self.stop.keys_at_stop = self.adm.keys().map(|k| k.stats(TOP_KEYS));
        }
        // A begun record is older than anything queued.
        if let Some((record, _)) = self.writing.tail.take() {
            self.ledger.dispose(record, Fate::Undelivered);
        }
        self.adm.drain(Fate::Undelivered, &mut self.ledger);
        self.reading.undelivered(&mut self.ledger);
    }

    /// Whether nothing is queued or being written: stdout is free for the
    /// reader to write to itself.
    pub(crate) fn idle(&self) -> bool {
        self.writing.waiting
            && self.adm.bucket().is_empty()
            && self.adm.outbox_len() == 0
            && self.reading.parked.is_none()
            && self.writing.tail.is_none()
            && !self.stop.reading
            && !self.adm.paused()
    }

    /// Whether the writer can take records now ([`Writing::may_take`]).
    pub(crate) fn may_leave(&self, now: u64, unpaced: bool) -> bool {
        let slack = self.adm.schedule().slack_ns();
        self.writing
            .may_take(now, unpaced, self.adm.outbox_len(), slack)
    }

    /// The policy that applies now: unpaced, one read can bring thousands
    /// of records at once, so a drop or fail policy applies only once
    /// stdout has stopped making room for a while, never to the size of a
    /// read; until then, `block`.
    pub(crate) fn policy(&self, now: u64, unpaced: bool) -> Overflow {
        // Paused, the writer takes nothing: the policy applies as set.
        if !self.adm.paused() && self.writing.patient(now, unpaced) {
            Overflow::Block
        } else {
            self.adm.bucket().policy()
        }
    }

    /// Account for a write the reader made itself ([`output::Direct`]):
    /// returns the records it did not write, for the usual way, or `None`
    /// after a write error (the rest is then undelivered).
    pub(crate) fn settle_direct(
        &mut self,
        mut seg: Segment,
        written: output::Written,
        now: u64,
    ) -> Option<Option<Segment>> {
        self.writing.since = None;
        let whole = written.records;
        self.ledger.read(whole as usize);
        self.ledger.written(whole, written.bytes);
        self.departures.record(now, whole);
        if written.bytes > 0 {
            self.writing.last_take = now;
        }
        let done = seg.split_front(whole as usize);
        let begun = written.bytes as usize - done.bytes();
        if let Some(e) = written.error {
            self.stop.write_error = Some(e);
            self.ledger.read_undelivered(seg);
            return None;
        }
        if begun > 0 {
            let mut record = seg.split_front(1);
            record.arrived = now;
            self.ledger.read(1);
            self.writing.tail = Some((record, begun));
        }
        Some((!seg.is_empty()).then_some(seg))
    }

    /// The writer, about to take the outbox: once the bucket is at most
    /// half full, let the parked read arrive, as the reader would on waking
    /// (in large steps: each costs a cut). The writer can take what leaves
    /// now. Returns whether that emptied the parked read.
    pub(crate) fn top_up(&mut self, now: u64) -> bool {
        let bucket = self.adm.bucket();
        if bucket.len() * 2 > bucket.capacity()
            || bucket.bytes().saturating_mul(2) > bucket.capacity_bytes()
        {
            return false;
        }
        let Some(held) = self.reading.parked.take() else {
            return false;
        };
        match self
            .adm
            .arrive(now, held, Overflow::Block, true, &mut self.ledger)
        {
            Offered::Done => true,
            Offered::Wait(rest) | Offered::Overflowed(rest) => {
                self.reading.parked = Some(rest);
                false
            }
        }
    }

    /// Whether the reader waits for room and enough has been made.
    pub(crate) fn reader_can_go(&self) -> bool {
        self.reading.can_go(&self.adm.bucket())
    }
}

/// A batch headed by the rest of a begun record (`begun`, whole), of which
/// `written` records went out: if none did, the begun record takes its
/// rest's place, so it goes to the dead letter whole.
pub(crate) fn whole_again(batch: &mut [Segment], begun: Option<Segment>, written: usize) {
    if let (Some(whole), 0, Some(first)) = (begun, written, batch.first_mut()) {
        *first = whole;
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
    /// The counters of `--share`, when set.
    pub(crate) share: OnceLock<crate::shared::Counters>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stop reading (and, unless `drain`, writing), waking every thread.
    pub(crate) fn stop(&self, drain: bool) {
        let mut st = self.lock();
        st.stop.reading = true;
        if !drain {
            st.stop.writing = true;
            self.stops.now.store(true, Ordering::SeqCst);
        }
        drop(st);
        self.wake_all();
        if !drain {
            self.stops.interrupt_writer();
        }
    }

    /// An overflow under `fail`: stop reading, and stop writing once the
    /// records the schedule already let go (the outbox) are written: they
    /// left before the overflow, so their fate does not depend on how soon
    /// the writer took them. Waiting records are undelivered.
    pub(crate) fn stop_at_overflow(&self) {
        let mut st = self.lock();
        st.stop.reading = true;
        st.stop.writing = true;
        drop(st);
        self.wake_all();
    }

    fn wake_all(&self) {
        self.waker.wake();
        self.data_ready.notify_all();
        self.space_ready.notify_all();
    }

    /// A second signal `signo`: stop every thread from writing or disposing
    /// at its next step (a write under way ends where its call returns) and
    /// wake them all; the wiring then takes stock as at any stop, from
    /// exact counts ([`crate::shutdown`]).
    pub(crate) fn leave(&self, signo: i32) {
        self.stops.second(signo);
        self.stop(false);
        if let Some(jobs) = self.jobs.get() {
            jobs.terminate();
        }
        self.stops.interrupt_threads();
    }

    /// The last resort after a second signal, when the threads have not
    /// let go in time: if the lock is free within a
    /// few milliseconds, move what is queued (and what the reader holds) to
    /// the dead letter and flush it, so leaving at once loses no record
    /// without a trace.
    pub(crate) fn evacuate_now(&self) {
        // No job is left running, whatever the lock.
        let running = self.jobs.get().map(|j| j.abandon()).unwrap_or_default();
        for _ in 0..20 {
            if let Ok(mut st) = self.state.try_lock() {
                for record in running {
                    st.ledger.dispose(record, Fate::Undelivered);
                }
                // The writer stops after the record under way (fewer
                // records end up both written and dead-lettered).
                self.stops.now.store(true, Ordering::SeqCst);
                st.drain_in_flight(self.in_flight_written.load(Ordering::SeqCst));
                st.drain_undelivered();
                st.flush_dead();
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        // The dead letter is written by its own thread: give it a moment.
        self.dead_backlog.close();
        let lost = self.dead_backlog.wait_finished(Duration::from_millis(500));
        if lost > 0 {
            eprintln!("drip: --dead-letter: {lost} records not written: the file took no more");
        }
    }

    /// A moment's view, for the display and the stats stream.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let st = self.lock();
        let now = self.clock.now();
        let bucket = st.adm.bucket();
        Snapshot {
            counts: st.ledger.counts(),
            depth: bucket.len() as u64,
            max_depth: bucket.max_depth() as u64,
            oldest_age_ns: bucket.oldest_arrival().map_or(0, |t| now.saturating_sub(t)),
            writing_for_ns: st.writing.since.map_or(0, |t| now.saturating_sub(t)),
            elapsed_ns: now,
            reading_done: st.reading.done,
            departures: st.departures,
            keys: st
                .adm
                .keys()
                .map(|k| (k.keys() as u64, k.busy_keys() as u64)),
            paused: st.adm.paused(),
        }
    }

    /// With limits per key, the keys' stats: as they were when drip
    /// stopped, if it has, or now.
    fn keys_stats(&self) -> Option<KeyStats> {
        let st = self.lock();
        let now = || st.adm.keys().map(|k| k.stats(TOP_KEYS));
        st.stop.keys_at_stop.clone().or_else(now)
    }

    /// The summary for `--stats`, `--stats-json` and SIGUSR1: the counts,
    /// the runner's figures, the keys' (as they were at the stop, once drip
    /// has stopped) and `--share`'s counters.
    pub(crate) fn summary(&self) -> Summary {
        let snap = self.snapshot();
        let longest_wait_ns = match self.jobs.get() {
            Some(jobs) => jobs.longest_wait_ns(),
            None => self.lock().adm.longest_wait_ns(),
        };
        let elapsed_ms = snap.elapsed_ns as f64 / 1e6;
        Summary {
            counts: snap.counts,
            max_depth: snap.max_depth,
            max_wait_ms: longest_wait_ns as f64 / 1e6,
            elapsed_ms,
            rate: snap.departures.rate(),
            span_ms: snap.departures.span_ns() as f64 / 1e6,
            jobs: self.jobs.get().map(|j| j.stats()),
            keys: self.keys_stats(),
            // Not under the state's lock: the keepers take theirs first.
            share: self.share.get().map(crate::shared::Counters::stats),
            paused: snap.paused,
        }
    }
}
