//! The job slots (`-j`) and the records being run, under one lock, and the
//! one condition variable every wait of the runner sleeps on (for a slot,
//! for every job's end, for a retry's backoff, a pause or a slot of the
//! schedule). Whatever such a wait waits for notifies it: a slot freed, `-j`
//! changed, the gate changed, a stop, a pause lifted, new limits, slots
//! from `--share` ([`crate::state::Jobs::wake`]); a wait for a time sleeps
//! until that time, or until notified. No wait looks again on a timer.
//!
//! The workers, threads that run one record's attempts at a time, wait on
//! a condition variable of their own under the same lock: only a record
//! handed over wakes one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use super::attempt::Unwritten;
use super::{ExecError, JobFate};
use crate::bucket::Segment;
use crate::sys::Unpoisoned;

/// Attempts whose durations give the p50 and p99 in the stats: the
/// latest ones, so memory stays flat however long drip runs.
const DURATIONS_KEPT: usize = 10_000;

/// The slots, the records being run, and the pool's own figures.
#[derive(Debug, Default)]
pub(super) struct SlotTable {
    /// Job slots taken (a job keeps its slot through its retries).
    pub(super) busy: usize,
    /// Job slots in all (`-j`; `drip ctl` may change it).
    pub(super) slots: usize,
    /// Records being run, by number.
    pub(super) running: BTreeMap<u64, Running>,
    /// Records handed to the workers, not yet picked up.
    queue: VecDeque<(u64, Segment)>,
    /// Worker threads started, and how many wait for a record.
    workers: usize,
    idle: usize,
    /// The number of the latest record started.
    pub(super) next_number: u64,
    /// The command could not be run.
    pub(super) fatal: Option<ExecError>,
    /// The command could not be run for a record whose fate is not booked
    /// yet: it becomes `fatal` as that record settles, so the records
    /// never started are booked after it ([`super::Pool::settle`]).
    pub(super) unrunnable: Option<ExecError>,
    /// Notifications so far: a wait that looked before the latest one
    /// does not sleep ([`Slots::wait_since`]).
    epoch: u64,
    /// Retries started.
    pub(super) retries: u64,
    /// The latest attempts' durations, ns, at most [`DURATIONS_KEPT`].
    pub(super) durations_ns: VecDeque<u64>,
    /// The longest a record waited from being read to its job's start, ns.
    pub(super) longest_wait_ns: u64,
    /// Output that could not be passed on.
    pub(super) unwritten: Unwritten,
    /// Attempts whose process runs now (started, not yet waited for).
    pub(super) processes: usize,
    /// Jobs waiting for room to start (`Job::with_room`), and whether
    /// one was said on stderr.
    pub(super) room_waiting: usize,
    pub(super) room_said: bool,
}

/// A record being run.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) record: Segment,
    /// Its fate, once its last attempt ended and the output is being
    /// passed on, with the bytes of that output (for leaving without the
    /// thread: [`crate::state::Jobs::abandon`]).
    pub(super) decided: Option<(JobFate, u64)>,
    /// The responses of its scope read while its attempt ran: they may
    /// have reached the server after its request ([`ReadWhile`]).
    pub(super) read_while: ReadWhile,
}

/// The responses read while an attempt ran (from its process's start to
/// its own response read): how many, and what they spent of each token
/// budget. A response says what remained when its request reached the
/// server, and these may have been counted since
/// ([`super::quota::Window`]).
#[derive(Debug, Default)]
pub(super) struct ReadWhile {
    /// Whether its request is in flight: its attempt spent its tokens to
    /// start, and its response is not read yet.
    pub(super) in_flight: bool,
    /// When the attempt started (ns).
    pub(super) since: u64,
    pub(super) responses: u64,
    /// Tokens by budget name.
    tokens: Vec<(Box<str>, u64)>,
}

impl ReadWhile {
    /// A response read, of a record costing `costs` on each budget.
    pub(super) fn add(&mut self, costs: &[(&str, u64)]) {
        self.responses += 1;
        for &(budget, cost) in costs {
            match self.tokens.iter_mut().find(|(b, _)| &**b == budget) {
                Some((_, had)) => *had = had.saturating_add(cost),
                None => self.tokens.push((budget.into(), cost)),
            }
        }
    }

    /// What the responses read spent of `budget`.
    pub(super) fn tokens(&self, budget: &str) -> u64 {
        self.tokens
            .iter()
            .find(|(b, _)| &**b == budget)
            .map_or(0, |(_, t)| *t)
    }
}

impl SlotTable {
    /// An attempt took `ns`: kept for the percentiles.
    pub(super) fn attempt_took(&mut self, ns: u64) {
        if self.durations_ns.len() == DURATIONS_KEPT {
            self.durations_ns.pop_front();
        }
        self.durations_ns.push_back(ns);
    }
}

/// The table under its lock, and the waits on it.
#[derive(Debug)]
pub(super) struct Slots {
    table: Mutex<SlotTable>,
    /// Every wait but the workers' sleeps here.
    changed: Condvar,
    /// Idle workers wait here for a record.
    work: Condvar,
    /// Taken by the job trying again to start after a resource ran out
    /// (`Job::with_room`): such jobs try one at a time.
    pub(super) room: Mutex<()>,
}

impl Slots {
    /// `n` slots, none taken.
    pub(super) fn new(n: usize) -> Slots {
        Slots {
            table: Mutex::new(SlotTable {
                slots: n,
                ..SlotTable::default()
            }),
            changed: Condvar::new(),
            work: Condvar::new(),
            room: Mutex::new(()),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlotTable> {
        self.table.lock().unpoisoned()
    }

    /// The table, unless it is busy now.
    pub(super) fn try_lock(&self) -> Option<MutexGuard<'_, SlotTable>> {
        match self.table.try_lock() {
            Ok(table) => Some(table),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Change the table with `change`, then wake every wait.
    pub(super) fn notify<R>(&self, change: impl FnOnce(&mut SlotTable) -> R) -> R {
        let mut table = self.lock();
        let r = change(&mut table);
        table.epoch += 1;
        drop(table);
        self.changed.notify_all();
        r
    }

    /// Wake every wait: what it waits for may have come.
    pub(super) fn wake(&self) {
        self.notify(|_| ());
    }

    /// Sleep on `table` until notified, or for `timeout` ns (`None`: no
    /// limit).
    pub(super) fn wait<'a>(
        &self,
        table: MutexGuard<'a, SlotTable>,
        timeout: Option<u64>,
    ) -> MutexGuard<'a, SlotTable> {
        match timeout {
            None => self.changed.wait(table).unpoisoned(),
            Some(ns) => {
                self.changed
                    .wait_timeout(table, Duration::from_nanos(ns))
                    .unpoisoned()
                    .0
            }
        }
    }

    /// The notifications so far, for [`Slots::wait_since`].
    pub(super) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Sleep until notified after `seen` ([`Slots::epoch`], read before
    /// what was looked at), or for `timeout` ns: no notification that
    /// came while the caller looked elsewhere (under the state's lock) is
    /// missed.
    pub(super) fn wait_since(&self, seen: u64, timeout: Option<u64>) {
        let table = self.lock();
        if table.epoch == seen {
            drop(self.wait(table, timeout));
        }
    }

    /// Wait until no slot is taken: every job has ended.
    pub(super) fn wait_all(&self) {
        let table = self.lock();
        drop(self.changed.wait_while(table, |t| t.busy > 0));
    }

    /// Give a slot back.
    pub(super) fn release(&self) {
        self.notify(|table| table.busy -= 1);
    }

    /// Record `record` is run from now on, as the next number (its slot
    /// taken): handed to an idle worker, or `true` with its number when a
    /// new worker must be started for it.
    pub(super) fn hand(&self, record: Segment) -> (u64, bool) {
        let mut table = self.lock();
        table.next_number += 1;
        let number = table.next_number;
        table.running.insert(
            number,
            Running {
                record: record.clone(),
                decided: None,
                read_while: ReadWhile::default(),
            },
        );
        table.queue.push_back((number, record));
        // Enough workers wait to take everything queued (the slots bound
        // the jobs; a worker is only a thread to run them on).
        if table.queue.len() <= table.idle {
            drop(table);
            self.work.notify_one();
            return (number, false);
        }
        table.workers += 1;
        (number, true)
    }

    /// The worker for record `number` could not be started: it is taken
    /// back from the queue.
    pub(super) fn no_worker(&self, number: u64) {
        let mut table = self.lock();
        table.workers -= 1;
        table.queue.retain(|(n, _)| *n != number);
    }

    /// An attempt's process runs.
    pub(super) fn process_started(&self) {
        self.lock().processes += 1;
    }

    /// Record `number`'s attempt spent its tokens and starts at `now`
    /// (ns): its request is in flight from now, and the responses read
    /// while it is are counted from now (under the lock the caller holds
    /// on `table`).
    pub(super) fn ask(table: &mut SlotTable, number: u64, now: u64) {
        if let Some(job) = table.running.get_mut(&number) {
            job.read_while = ReadWhile {
                in_flight: true,
                since: now,
                ..ReadWhile::default()
            };
        }
    }

    /// An attempt's process ended: a job waiting for room to start tries
    /// again.
    pub(super) fn process_ended(&self) {
        let mut table = self.lock();
        table.processes = table.processes.saturating_sub(1);
        let waiting = table.room_waiting > 0;
        drop(table);
        if waiting {
            self.wake();
        }
    }

    /// A worker's next record, waiting for one; `None` when the worker
    /// is `holding` its jobs' files and a job waits for room to start
    /// ([`Slots::wait_for_room`]): it closes them (they may be what that
    /// job needs) and asks again.
    pub(super) fn next_record(&self, holding: bool) -> Option<(u64, Segment)> {
        let mut table = self.lock();
        loop {
            if let Some(next) = table.queue.pop_front() {
                return Some(next);
            }
            if holding && table.room_waiting > 0 {
                return None;
            }
            table.idle += 1;
            table = self.work.wait(table).unpoisoned();
            table.idle -= 1;
        }
    }

    /// A job short of a resource to start waits, at most `for_ns` (ns),
    /// for a running job to end ([`Slots::process_ended`] wakes it); the
    /// idle workers are woken to close their files first
    /// ([`Slots::next_record`]).
    pub(super) fn wait_for_room<'a>(
        &'a self,
        mut table: MutexGuard<'a, SlotTable>,
        for_ns: u64,
    ) -> MutexGuard<'a, SlotTable> {
        table.room_waiting += 1;
        if table.idle > 0 {
            self.work.notify_all();
        }
        let mut table = self.wait(table, Some(for_ns));
        table.room_waiting -= 1;
        table
    }

    /// Record `number` is done as `fate`, its output (`pending` bytes) to
    /// be passed on; `false` when drip abandoned it on its way out.
    pub(super) fn decided(&self, number: u64, fate: JobFate, pending: u64) -> bool {
        match self.lock().running.get_mut(&number) {
            Some(job) => {
                job.decided = Some((fate, pending));
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    /// A wait given the notifications it saw before it looked elsewhere
    /// (under the state's lock) does not sleep through one that came
    /// meanwhile; one that comes while it sleeps wakes it.
    #[test]
    fn no_notification_is_missed_while_the_waiter_looks_elsewhere() {
        let slots = Arc::new(Slots::new(1));
        let seen = slots.epoch();
        slots.wake();
        let (woke, said) = mpsc::channel();
        let waiter = {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || {
                slots.wait_since(seen, None);
                woke.send("came before").unwrap();
                let seen = slots.epoch();
                woke.send("looking").unwrap();
                slots.wait_since(seen, None);
                woke.send("came after").unwrap();
            })
        };
        let ten = Duration::from_secs(10);
        assert_eq!(said.recv_timeout(ten), Ok("came before"));
        assert_eq!(said.recv_timeout(ten), Ok("looking"));
        slots.wake();
        assert_eq!(said.recv_timeout(ten), Ok("came after"));
        waiter.join().unwrap();
    }

    /// Every job's end is waited for without a timer: the last slot given
    /// back wakes the wait.
    #[test]
    fn the_last_slot_given_back_ends_the_wait_for_every_job() {
        let slots = Arc::new(Slots::new(2));
        slots.lock().busy = 2;
        let (ended, said) = mpsc::channel();
        let waiter = {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || {
                slots.wait_all();
                ended.send(()).unwrap();
            })
        };
        slots.release();
        assert!(
            said.recv_timeout(Duration::from_millis(200)).is_err(),
            "one job runs"
        );
        slots.release();
        assert_eq!(said.recv_timeout(Duration::from_secs(10)), Ok(()));
        waiter.join().unwrap();
    }
}
