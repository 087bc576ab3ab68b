//! The runner's per-record features, each a [`Hook`] on a job's life: the
//! pool ([`super::pool`]) keeps the slots, the process groups and the
//! output, and tells its hooks of each moment of a record's job (may it
//! start, it starts, an attempt ends, the record ends, the run ends), in
//! the order they are registered ([`Hooks::of`]).
//!
//! A new per-job feature is one file here with its `Hook`, and one line in
//! [`Hooks::of`] that registers it (when its flag is given).

mod joblog;
mod keep_order;
mod key_jobs;
mod pacing;
mod settle;
mod share_jobs;

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;

use super::attempt::{Ended, Files, Unwritten};
use super::gate::Scope;
use super::parts::{PoolParts, Who};

use super::quota::CostBudgets;
use super::{JobConfig, JobFate};
use crate::report::Section;

/// What became of an attempt of a record (or of one that never ran), as
/// the joblog tells it.
pub(super) struct Outcome<'a> {
    /// The record.
    pub(super) who: &'a Who<'a>,
    /// The attempt's number, from 1.
    pub(super) attempt: u32,
    /// How it ended, and the HTTP status of its headers when known;
    /// `None` for an attempt that never ran (no process).
    pub(super) ran: Option<(&'a Ended, Option<u16>)>,
    /// A joblog outcome name (`succeeded`, `retry`, `overload`, …).
    pub(super) outcome: &'static str,
    /// Why it could not start, when known.
    pub(super) error: Option<&'a str>,
}

/// An attempt about to start.
pub(super) struct AttemptStart<'a> {
    /// Its record's number.
    pub(super) number: u64,
    /// The record, its delimiter included.
    pub(super) record: &'a [u8],
    /// The record's deadline (ns), if it has one.
    pub(super) deadline: Option<u64>,
    /// Whom an overload of the record holds back.
    pub(super) scope: &'a Scope,
}

/// The response to an attempt: its headers file read.
pub(super) struct Heard<'a> {
    /// Its record's number.
    pub(super) number: u64,
    /// Whom an overload of the record holds back.
    pub(super) scope: &'a Scope,
    /// The headers file's text, when the attempt wrote one.
    pub(super) headers: Option<&'a str>,
    /// Whether they said `Retry-After`.
    pub(super) retry_after: bool,
}

/// An attempt that ran to its end, its output in its files.
pub(super) struct AttemptEnd<'a> {
    /// Its record's number.
    pub(super) number: u64,
    /// The record, its delimiter included.
    pub(super) record: &'a [u8],
    /// Its headers file (the usage file is beside it).
    pub(super) headers: &'a Path,
    /// Its output.
    pub(super) files: &'a Files,
    /// How it ended.
    pub(super) ended: &'a Ended,
}

/// A per-record feature of the runner, told of each moment of a job's life
/// it needs; every method does nothing unless the feature says otherwise.
pub(super) trait Hook: Send + Sync {
    /// Whether record `number` may start now (read under the slots' lock,
    /// with no lock of its own).
    fn admits(&self, _number: u64) -> bool {
        true
    }

    /// A record's job is about to start, its slot taken: take what else
    /// it needs (waiting for it); `false`, nothing taken, once `stop` or
    /// the `pool` says to stop.
    fn acquire(&self, _pool: &PoolParts, _stop: &dyn Fn() -> bool) -> bool {
        true
    }

    /// Give back what [`Hook::acquire`] took: the record did not start
    /// after all.
    fn release(&self) {}

    /// Whether a job's own process notes itself to the warden before its
    /// program runs (rather than drip noting it right after the start).
    fn notes_itself(&self) -> bool {
        false
    }

    /// Attempt `start` may start, as far as the feature knows (waiting
    /// until it may); `Err` with the record's fate when it will not (a
    /// stop, its deadline).
    fn before_attempt(&self, _pool: &PoolParts, _start: &AttemptStart) -> Result<(), JobFate> {
        Ok(())
    }

    /// An attempt ran to its end (`end`), before its headers file is
    /// read.
    fn attempt_ended(&self, _pool: &PoolParts, _end: &AttemptEnd) {}

    /// The response to an attempt is read, before the attempt is judged.
    fn answered(&self, _pool: &PoolParts, _answer: &Heard) {}

    /// An attempt's outcome (or one that never ran), after the record's
    /// fate is recorded when it is the last.
    fn outcome(&self, _outcome: &Outcome) {}

    /// Whether it holds the attempts' output ([`Hook::pass_on`]): what a
    /// record abandoned did not write is then its to count
    /// ([`Hook::abandon`]).
    fn holds_output(&self) -> bool {
        false
    }

    /// Take the output of an attempt of record `number`, in `files`, to
    /// pass it on itself (`true`), or leave it to go to stdout at once.
    fn pass_on(&self, _pool: &PoolParts, _number: u64, _files: &mut Files) -> bool {
        false
    }

    /// Record `number` is done (its fate decided, or it never started),
    /// while its job still counts as running, before its slot is freed;
    /// under no lock of drip's.
    fn ended(&self, _pool: &PoolParts, _number: u64) {}

    /// drip leaves without the threads: what it holds is not written.
    fn abandon(&self) -> Unwritten {
        Unwritten::default()
    }

    /// The run is over: no job runs any more, or none will be waited for.
    fn close(&self) {}

    /// The feature's figures, its section of the report (none by
    /// default).
    fn section(&self) -> Option<Arc<dyn Section>> {
        None
    }
}

/// The hooks of a pool, in the order they are told of each moment.
#[derive(Default)]
pub(super) struct Hooks(Vec<Box<dyn Hook>>);

impl Hooks {
    /// The hooks of the features `cfg` asks for, with the cost `budgets`
    /// the token quotas pace (`give_up` says when to stop waiting for a
    /// `--joblog` FIFO's reader).
    ///
    /// # Errors
    /// A feature cannot be set up (the joblog, the shared job limit).
    pub(super) fn of(
        cfg: &JobConfig,
        budgets: &CostBudgets,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<Hooks> {
        let mut hooks = Hooks::default();
        hooks.add(joblog::LogAttempts::of(cfg, give_up)?);
        hooks.add(share_jobs::ShareJobs::of(cfg)?);
        hooks.add(key_jobs::KeyJobsEnd::of(cfg));
        hooks.add(settle::Settle::of(cfg, budgets));
        hooks.add(pacing::Quotas::of(cfg, budgets));
        hooks.add(keep_order::KeepOrder::of(cfg));
        Ok(hooks)
    }

    fn add(&mut self, hook: Option<impl Hook + 'static>) {
        self.0.extend(hook.map(|h| Box::new(h) as Box<dyn Hook>));
    }

    /// Every hook's [`Hook::acquire`], in turn; `false` when one could
    /// not, what the ones before it took given back.
    pub(super) fn acquire(&self, pool: &PoolParts, stop: &dyn Fn() -> bool) -> bool {
        for (i, hook) in self.0.iter().enumerate() {
            if !hook.acquire(pool, stop) {
                self.0[..i].iter().for_each(|h| h.release());
                return false;
            }
        }
        true
    }

    pub(super) fn admits(&self, number: u64) -> bool {
        self.0.iter().all(|h| h.admits(number))
    }

    pub(super) fn before_attempt(
        &self,
        pool: &PoolParts,
        start: &AttemptStart,
    ) -> Result<(), JobFate> {
        self.0
            .iter()
            .try_for_each(|h| h.before_attempt(pool, start))
    }

    pub(super) fn answered(&self, pool: &PoolParts, answer: &Heard) {
        self.0.iter().for_each(|h| h.answered(pool, answer));
    }

    pub(super) fn attempt_ended(&self, pool: &PoolParts, end: &AttemptEnd) {
        self.0.iter().for_each(|h| h.attempt_ended(pool, end));
    }

    pub(super) fn outcome(&self, outcome: &Outcome) {
        self.0.iter().for_each(|h| h.outcome(outcome));
    }

    pub(super) fn holds_output(&self) -> bool {
        self.0.iter().any(|h| h.holds_output())
    }

    /// The output goes to the first hook that takes it; `false` if none.
    pub(super) fn pass_on(&self, pool: &PoolParts, number: u64, files: &mut Files) -> bool {
        self.0.iter().any(|h| h.pass_on(pool, number, files))
    }

    pub(super) fn abandon(&self) -> Unwritten {
        self.0
            .iter()
            .fold(Unwritten::default(), |cut, h| cut.and(h.abandon()))
    }

    pub(super) fn release(&self) {
        self.0.iter().for_each(|h| h.release());
    }

    pub(super) fn notes_itself(&self) -> bool {
        self.0.iter().any(|h| h.notes_itself())
    }

    pub(super) fn ended(&self, pool: &PoolParts, number: u64) {
        self.0.iter().for_each(|h| h.ended(pool, number));
    }

    pub(super) fn close(&self) {
        self.0.iter().for_each(|h| h.close());
    }

    /// The hooks' sections of the report, in order.
    pub(super) fn sections(&self) -> Vec<Arc<dyn Section>> {
        self.0.iter().filter_map(|h| h.section()).collect()
    }
}
