//! How drip is stopping: what the threads were told (under the state's
//! lock), why (an overflow, a failed write), and what is seen without the
//! lock (the stop flags between write calls, the signals, the threads to
//! interrupt); stopping the threads, leaving after a second signal, and
//! what is left at a stop, as undelivered.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use super::writing::whole_again;
use super::{BudgetSpent, OverflowError, Shared, State, TOP_KEYS};
use crate::bucket::Fate;
use crate::output::{self, Stop};
use crate::report::keys::KeyStats;
use crate::sys::{self, Unpoisoned};

/// How drip is stopping, under the state's lock.
///
/// Invariant: `writing` implies `reading` (a stop stops reading first);
/// both only ever go from `false` to `true`.
#[derive(Debug, Default)]
pub(crate) struct Stopping {
    /// Stop reading: a signal, an overflow under fail, a failed output.
    pub(crate) reading: bool,
    /// Stop writing (after the record under way).
    pub(crate) writing: bool,
    /// Why reading stopped, under `--overflow fail`.
    pub(crate) overflow: Option<OverflowError>,
    /// Why drip stopped, under `--budget-exhausted stop`.
    pub(crate) budget: Option<BudgetSpent>,
    /// The error the reader met writing to stdout itself.
    pub(crate) write_error: Option<std::io::Error>,
    /// With limits per key, the keys' stats as they were when drip stopped,
    /// before the records still waiting were drained (undelivered).
    pub(crate) keys_at_stop: Option<KeyStats>,
}

/// How drip is stopping, as the threads see it without the lock: between
/// write calls, from a signal handler's task, while the lock is busy.
#[derive(Debug, Default)]
pub(crate) struct Stops {
    /// Mirror of [`Stopping::writing`] once a stop is not a drain: the
    /// writer begins no record more.
    pub(crate) now: AtomicBool,
    /// Leaving after a second signal ([`super::Shared::leave`]): every
    /// write ends at its next return, even inside a record.
    pub(crate) leave: AtomicBool,
    /// The first stopping signal's number (0: none yet), set without the
    /// lock so a second signal is recognized even while the lock is busy.
    first_signal: AtomicI32,
    /// The second stopping signal's number (0: none).
    second_signal: AtomicI32,
    /// The writer thread while it runs (0 otherwise), so a stop can
    /// interrupt a write blocked on a stalled stdout.
    writer_thread: Mutex<u64>,
    /// The reader thread while it runs (0 otherwise), interrupted as the
    /// writer is when drip leaves.
    reader_thread: Mutex<u64>,
}

impl Stops {
    /// Whether the writer is to begin no record more.
    pub(crate) fn now(&self) -> bool {
        self.now.load(Ordering::SeqCst)
    }

    /// Whether drip is leaving (a second signal).
    pub(crate) fn leaving(&self) -> bool {
        self.leave.load(Ordering::SeqCst)
    }

    /// What a write asks between its calls: end where it is (leaving),
    /// after the record under way (stopping), or go on.
    pub(crate) fn write_stop(&self) -> Stop {
        match (self.leaving(), self.now.load(Ordering::Relaxed)) {
            (true, _) => Stop::Now,
            (false, true) => Stop::AfterRecord,
            (false, false) => Stop::No,
        }
    }

    /// Whether a stopping signal has come.
    pub(crate) fn signalled(&self) -> bool {
        self.first_signal.load(Ordering::Relaxed) != 0
    }

    /// Stopping signal `signo` came: whether it is the first.
    pub(crate) fn first(&self, signo: i32) -> bool {
        self.first_signal
            .compare_exchange(0, signo, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Leaving after the second stopping signal `signo`.
    pub(crate) fn second(&self, signo: i32) {
        self.second_signal.store(signo, Ordering::SeqCst);
        self.leave.store(true, Ordering::SeqCst);
    }

    /// The signal drip ends by (the second, if any), and whether it left
    /// after a second one.
    pub(crate) fn signal(&self) -> (Option<i32>, bool) {
        let second = self.second_signal.load(Ordering::SeqCst);
        match (second, self.first_signal.load(Ordering::SeqCst)) {
            (0, 0) => (None, false),
            (0, n) => (Some(n), false),
            (n, _) => (Some(n), true),
        }
    }

    /// Where a stop can reach the writer (`id`; 0: gone).
    pub(crate) fn set_writer(&self, id: u64) {
        *self.writer_thread.lock().unpoisoned() = id;
    }

    /// Where a stop can reach the reader (`id`; 0: gone).
    pub(crate) fn set_reader(&self, id: u64) {
        *self.reader_thread.lock().unpoisoned() = id;
    }

    /// If a stop was asked for and the writer is still running, interrupt
    /// the write it may be blocked in (it then finishes only the record
    /// under way).
    pub(crate) fn interrupt_writer(&self) {
        if !self.now() {
            return;
        }
        let thread = self.writer_thread.lock().unpoisoned();
        if *thread != 0 {
            sys::interrupt(*thread);
        }
    }

    /// Interrupt whatever system call the writer and the reader are
    /// blocked in (a write to a stalled stdout).
    pub(crate) fn interrupt_threads(&self) {
        self.interrupt_writer();
        let thread = self.reader_thread.lock().unpoisoned();
        if *thread != 0 {
            sys::interrupt(*thread);
        }
    }
}

impl Shared {
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

    pub(crate) fn wake_all(&self) {
        self.waker.wake();
        self.data_ready.notify_all();
        self.space_ready.notify_all();
        self.wake_jobs();
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
        self.interrupt_leaving();
    }

    /// The last resort after a second signal, when the threads have not
    /// let go in time: if the lock is free within a
    /// few milliseconds, move what is queued (and what the reader holds) to
    /// the dead letter and flush it, so leaving at once loses no record
    /// without a trace. Whether the books could be closed (the lock was
    /// had): only then is there a summary to tell.
    pub(crate) fn evacuate_now(&self) -> bool {
        // No job is left running, whatever the lock.
        let running = self.jobs.get().map(|j| j.abandon()).unwrap_or_default();
        let mut closed = false;
        for _ in 0..20 {
            if let Ok(mut st) = self.state.try_lock() {
                for (record, fate) in running {
                    fate.book(&mut st.ledger, record);
                }
                // The writer stops after the record under way (fewer
                // records end up both written and dead-lettered).
                self.stops.now.store(true, Ordering::SeqCst);
                st.drain_in_flight(self.in_flight_written.load(Ordering::SeqCst));
                st.drain_undelivered();
                st.flush_dead();
                closed = true;
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
        closed
    }

    /// Interrupt every thread a second signal must reach: the writer, the
    /// reader, and the jobs' threads passing output on.
    pub(crate) fn interrupt_leaving(&self) {
        self.stops.interrupt_threads();
        if let Some(jobs) = self.jobs.get() {
            jobs.interrupt_output();
        }
    }
}

impl State {
    /// Under `--budget-exhausted stop`, a budget spent at `now` stops
    /// drip: reading and writing stop (the records waiting are
    /// undelivered), and no retry starts. Returns whether it did (the
    /// caller wakes every thread: [`super::Shared::wake_all`]).
    pub(crate) fn budget_spent_stops(&mut self, now: u64) -> bool {
        let Some(budget) = self.adm.schedule().exhausted(now) else {
            return false;
        };
        self.stop.budget = Some(super::BudgetSpent { budget });
        self.stop.reading = true;
        self.stop.writing = true;
        true
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

    /// Everything still queued, then what the reader held, as undelivered.
    /// The keys' stats are taken first ([`Stopping::keys_at_stop`]), so the
    /// summary names the keys whose records were left.
    pub(crate) fn drain_undelivered(&mut self) {
        if self.stop.keys_at_stop.is_none() {
            self.stop.keys_at_stop = self.adm.bucket().keys().map(|k| k.stats(TOP_KEYS));
        }
        // A begun record is older than anything queued.
        if let Some((record, _)) = self.writing.tail.take() {
            self.ledger.dispose(record, Fate::Undelivered);
        }
        self.adm.drain(Fate::Undelivered, &mut self.ledger);
        self.reading.undelivered(&mut self.ledger);
    }
}
