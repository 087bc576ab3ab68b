//! The pool of jobs: starts one job per record the schedule releases (at
//! most `--jobs` at once) on a worker thread, which runs its attempts
//! ([`super::job`]); passes each attempt's output on; records each
//! record's fate ([`JobFate`]) in the ledger; and is the runner's face to
//! the other threads ([`Jobs`]).
//!
//! Its parts: the slots and the records being run, with the one condition
//! variable the runner's waits sleep on ([`super::slots`]); the process
//! groups, the warden and the second signal ([`super::groups`]); each
//! scope's pauses, overload books and quota windows, in the gate
//! ([`super::gate`], [`super::overload`]); and the per-record features
//! (`--share-jobs`, `--key-jobs`, the quotas' pacing, `--settle`,
//! `--keep-order`, the joblog), hooks told of each moment of a job's life ([`super::hooks`]).
//!
//! Locks: the state's lock is always taken before the slots'; under the
//! slots' only the short locks below it are taken (the gate's, the
//! groups'), never one that waits on I/O, and the slots' is never held
//! across a write to stdout (`--keep-order`'s window is read without a
//! lock), so a stalled stdout holds only the threads writing to it.

use std::io::Write;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use super::attempt::{Files, HeadersDir, Unwritten};
use super::gate::{GateControl, Scope};
use super::groups::Groups;
use super::hooks::Hooks;
use super::parts::{PoolParts, Records};
use super::quota::CostBudgets;
use super::slots::{Running, SlotTable, Slots};
use super::warden::Warden;
use super::{ExecError, JobConfig, JobFate};
use crate::bucket::Segment;
use crate::report::runner::JobStats;
use crate::state::{Jobs, Shared};

/// The jobs drip runs.
pub(crate) struct Pool {
    /// What every job and hook reaches: the run's state, the gate, the
    /// slots, the groups, the output, how records are read.
    parts: PoolParts,
    /// The per-record features, told of each moment of a job's life.
    pub(super) hooks: Hooks,
}

impl std::ops::Deref for Pool {
    type Target = PoolParts;

    fn deref(&self) -> &PoolParts {
        &self.parts
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("cfg", &self.cfg).finish()
    }
}

impl Pool {
    /// A pool running `cfg` for records of `shared`, writing job output to
    /// `out`, pausing starts through `gate` (which holds the configured
    /// rate, which `--adapt` never exceeds); `records` says where a record
    /// ends and, with a key, that an overload holds back the key of the
    /// record refused, not every start; `budgets` are the costs the token
    /// quotas announced pace. A `--joblog` FIFO that no one
    /// reads is waited for while `give_up` says not to; given up, the pool
    /// logs nothing (drip is stopping).
    ///
    /// # Errors
    /// The joblog or the headers directory cannot be created, or the
    /// jobs' warden cannot be started.
    pub(crate) fn new(
        shared: Arc<Shared>,
        cfg: JobConfig,
        gate: Arc<GateControl>,
        out: Box<dyn Write + Send>,
        records: Records,
        budgets: CostBudgets,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<Arc<Pool>> {
        let hooks = Hooks::of(&cfg, &budgets, give_up)?;
        let headers = HeadersDir::new()?;
        let warden = Warden::start().context("starting the jobs' warden")?;
        let parts = PoolParts {
            shared: Arc::clone(&shared),
            gate,
            out: Mutex::new(out),
            slots: Slots::new(cfg.jobs),
            groups: Groups::new(warden),
            headers,
            cfg,
            records,
        };
        let pool = Arc::new(Pool { parts, hooks });
        let _ = shared.jobs.set(Arc::clone(&pool) as Arc<dyn Jobs>);
        Ok(pool)
    }

    /// Wait until every job has ended.
    pub(crate) fn wait_all(&self) {
        self.slots.wait_all();
    }

    /// The command that could not be run, if one could not.
    pub(crate) fn take_fatal(&self) -> Option<ExecError> {
        self.slots.lock().fatal.take()
    }

    /// At the end of a stop by signal: the process groups of the jobs that
    /// ended and left processes behind are ended too
    /// ([`Groups::end_lingering`]).
    pub(crate) fn end_lingering(&self) {
        self.groups.end_lingering();
    }

    /// Whether the next record may start: a slot is free, and the
    /// features admit it (`--keep-order`'s window).
    pub(super) fn has_room_in(&self, table: &SlotTable) -> bool {
        table.busy < table.slots && self.hooks.admits(table.next_number + 1)
    }

    /// `record`'s job starts now: a departure (the summary's rate is
    /// starts per second), and how long it waited since it was read.
    pub(super) fn starting(&self, record: &Segment) {
        let mut st = self.shared.lock();
        let now = self.shared.clock.now();
        st.departures.record(now, 1);
        let mut table = self.slots.lock();
        let waited = now.saturating_sub(record.arrived);
        table.longest_wait_ns = table.longest_wait_ns.max(waited);
    }

    /// Start a job for `record` (a slot is taken) on an idle worker, or a
    /// new one (each with its own files, reused).
    pub(super) fn start(self: &Arc<Self>, record: Segment) {
        let (number, new_worker) = self.slots.hand(record);
        if !new_worker {
            return;
        }
        let pool = Arc::clone(self);
        let spawned = crate::sys::spawn("drip-job", move || pool.work());
        if spawned.is_err() {
            self.slots.no_worker(number);
            self.settle(number, JobFate::Undelivered);
        }
    }

    /// A worker: run the records handed to it, one at a time, for ever.
    /// Its jobs' files are reused from one record to the next (making them
    /// anew for each job cost about 40 µs of drip's CPU a job), and closed
    /// while it is idle only when a job waits for a file descriptor to
    /// start ([`super::job::Job::with_room`]): that job gets those of the workers that
    /// have no job, and is woken as they go. A settled record's output is
    /// emptied at once, so an idle worker holds no space in the temporary
    /// directory.
    fn work(&self) {
        let mut files: Option<Files> = None;
        let mut rng = fastrand::Rng::new();
        loop {
            let (number, record) = loop {
                match self.slots.next_record(files.is_some()) {
                    Some(next) => break next,
                    None => {
                        files = None;
                        self.slots.wake();
                    }
                }
            };
            let fate = super::job::run(
                &self.parts,
                &self.hooks,
                number,
                &record,
                &mut files,
                &mut rng,
            );
            self.settle(number, fate);
            if files.as_mut().is_some_and(|f| f.empty().is_err()) {
                files = None;
            }
        }
    }

    /// Record the fate of record `number` and free its slot (unless drip
    /// abandoned it on the way out).
    fn settle(&self, number: u64, fate: JobFate) {
        // The features first, under no lock of drip's: the shared lease
        // goes back (a call to the shared state), the held output goes
        // out while its job still counts as running.
        self.hooks.ended(self, number);
        self.groups.forget(number);
        let mut st = self.shared.lock();
        // A command that could not be run stops further starts as its
        // slot is freed, and the writer hands back the records not started
        // only under the state's lock: after this record, in input order.
        let (removed, unrunnable) = self.slots.notify(|table| {
            let unrunnable = table.unrunnable.take().map(|e| {
                table.fatal.get_or_insert(e);
            });
            let job = table.running.remove(&number);
            if job.is_some() {
                table.busy -= 1;
                self.gate.slot_freed();
            }
            (job, unrunnable.is_some())
        });
        if let Some(Running { record, .. }) = removed {
            st.writing.sink_full = false;
            fate.book(&mut st.ledger, record);
            st.flush_dead();
        }
        drop(st);
        if unrunnable {
            self.shared.stop(false);
        }
        self.shared.data_ready.notify_all();
    }

    /// The figures of `table`, but for the attempts' percentiles (left 0),
    /// and the latest attempts' durations (ns, unsorted) they come from.
    fn figures(&self, table: &SlotTable) -> (JobStats, Vec<u64>) {
        let now = self.shared.clock.now();
        let overloads = self.gate.overload_figures(now);
        let rate = self.gate.full_rate(&Scope::All);
        let stats = JobStats {
            jobs_running: table.running.len() as u64,
            retries: table.retries,
            overload_responses: overloads.overloads,
            pauses: overloads.pauses,
            paused_ms: overloads.paused_ns as f64 / 1e6,
            effective_rate: overloads
                .adapted_rate
                .unwrap_or(rate)
                .min(self.gate.rate_at(&Scope::All, now)),
            attempt_p50_ms: 0.0,
            attempt_p99_ms: 0.0,
            configured_rate: rate,
            outputs_cut: table.unwritten.outputs,
            output_bytes_unwritten: table.unwritten.bytes,
        };
        (stats, table.durations_ns.iter().copied().collect())
    }
}

impl Jobs for Pool {
    fn has_room(&self) -> bool {
        self.has_room_in(&self.slots.lock())
    }

    fn slots(&self) -> usize {
        self.slots.lock().slots
    }

    fn set_slots(&self, n: usize) {
        self.slots.notify(|table| {
            self.gate.slots_changed(n, table.slots);
            table.slots = n;
        });
        let _st = self.shared.lock();
        self.shared.data_ready.notify_all();
    }

    fn key_jobs(&self) -> Option<usize> {
        self.cfg.key_jobs.and(self.gate.key_jobs_limit())
    }

    fn set_key_jobs(&self, n: usize) -> Result<(), String> {
        if self.cfg.key_jobs.is_none() {
            return Err("this drip has no job limit per key (--key-jobs)".to_string());
        }
        self.gate
            .limit_key_jobs(u32::try_from(n).unwrap_or(u32::MAX));
        let _st = self.shared.lock();
        self.shared.data_ready.notify_all();
        Ok(())
    }

    fn set_key_job_rows(&self, rows: &crate::keyed::KeyRates) {
        self.gate.key_job_rows(rows);
        let _st = self.shared.lock();
        self.shared.data_ready.notify_all();
    }

    fn key_jobs_of(&self, key: &[u8]) -> Option<(Option<u32>, u32)> {
        self.gate.key_jobs_of(key)
    }

    fn running(&self) -> Vec<(u64, Vec<u8>)> {
        let table = self.slots.lock();
        table
            .running
            .iter()
            .map(|(n, job)| {
                let bytes = job.record.as_bytes();
                let body = self.records.body_of(bytes);
                (*n, body.to_vec())
            })
            .collect()
    }

    fn sections(&self) -> Vec<std::sync::Arc<dyn crate::report::Section>> {
        self.hooks.sections()
    }

    fn stats(&self) -> JobStats {
        let (mut stats, mut durations) = self.figures(&self.slots.lock());
        stats.attempt_p50_ms = percentile_ms(&mut durations, 0.5);
        stats.attempt_p99_ms = percentile_ms(&mut durations, 0.99);
        stats
    }

    fn view(&self) -> Option<crate::progress::JobsView> {
        // The display skips a frame rather than wait for the lock.
        let table = self.slots.try_lock()?;
        let (mut stats, mut durations) = self.figures(&table);
        drop(table);
        // The display shows the median only.
        stats.attempt_p50_ms = percentile_ms(&mut durations, 0.5);
        let now = self.shared.clock.now();
        Some(crate::progress::JobsView {
            stats,
            paused_left_ns: self.gate.paused_until(&Scope::All).saturating_sub(now),
            paused_keys: self.gate.paused_keys(now),
        })
    }

    fn longest_wait_ns(&self) -> u64 {
        self.slots.lock().longest_wait_ns
    }

    fn terminate(&self) {
        self.groups.terminate();
        self.interrupt_output();
    }

    fn abandon(&self) -> Vec<(Segment, JobFate)> {
        let running = std::mem::take(&mut self.slots.lock().running);
        self.groups.end_all();
        // drip exits next, without the wiring: nothing is left behind.
        self.headers.remove();
        let mut cut = self.hooks.abandon();
        let left = running
            .into_values()
            .map(|job| {
                // A job that ended, its output not passed on whole: its
                // own fate.
                let fate = match job.decided {
                    Some((fate, pending)) => {
                        cut = cut.and(Unwritten::of(pending));
                        fate
                    }
                    None => JobFate::Undelivered,
                };
                (job.record, fate)
            })
            .collect();
        let mut table = self.slots.lock();
        table.unwritten = table.unwritten.and(cut);
        left
    }

    fn interrupt_output(&self) {
        self.groups.interrupt_output();
    }

    fn wake(&self) {
        self.slots.wake();
    }
}

/// The `p` (0 to 1) percentile of `durations` (ns, in any order: they are
/// partly reordered, without a full sort), ms; 0 when there is none
/// (nearest rank).
fn percentile_ms(durations: &mut [u64], p: f64) -> f64 {
    if durations.is_empty() {
        return 0.0;
    }
    let at = ((durations.len() - 1) as f64 * p).round() as usize;
    *durations.select_nth_unstable(at).1 as f64 / 1e6
}

/// Removes the pool's headers directory when dropped: on every way out of
/// the wiring, errors included.
pub(crate) struct RemoveHeaders(pub(crate) Arc<Pool>);

impl Drop for RemoveHeaders {
    fn drop(&mut self) {
        if self.0.shared.stops.signalled() {
            self.0.end_lingering();
        }
        self.0.headers.remove();
        self.0.hooks.close();
    }
}
