//! The job limits shared by every drip on the NAME
//! ([`crate::shared::jobs`]): with `--share-jobs`, a job starts only with
//! a lease of the fleet's limit, taken as its slot is (by the writer);
//! with `--key` under `--share`, a record of a key with a job limit
//! (`--key-jobs`, a row's JOBS) starts its first attempt only with a
//! lease of its key's, taken by its own job's thread, so a key whose
//! fleet runs N holds up only its own records (each holding its `-j`
//! slot, at most N of them: the keyed queues let no more of a key go).
//! Both go back as the record ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{AttemptStart, Hook};
use crate::jobs::parts::PoolParts;
use crate::jobs::{JobConfig, JobFate};
use crate::report::Section;
use crate::shared::jobs::{JobPool, SharedJobs};
use crate::sys::Unpoisoned;

/// The job leases shared with the other drips.
pub(in crate::jobs) struct ShareJobs {
    jobs: Arc<SharedJobs>,
    /// N of `--share-jobs`: a lease of the fleet's for every start.
    fleet: Option<u64>,
    /// Each key's job limit is shared (`--key` under `--share`).
    keys: bool,
    /// The records holding a lease of their key's, by number: each key.
    holding: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl ShareJobs {
    /// The shared job limits, with `--share-jobs` or `--key` under
    /// `--share`.
    ///
    /// # Errors
    /// The shared state cannot be opened.
    pub(in crate::jobs) fn of(cfg: &JobConfig) -> anyhow::Result<Option<ShareJobs>> {
        let Some(target) = &cfg.share else {
            return Ok(None);
        };
        if cfg.share_jobs.is_none() && !cfg.count_key_jobs {
            return Ok(None);
        }
        Ok(Some(ShareJobs {
            jobs: SharedJobs::open(target, cfg.share_jobs, cfg.quiet)?,
            fleet: cfg.share_jobs,
            keys: cfg.count_key_jobs,
            holding: Mutex::new(HashMap::new()),
        }))
    }

    /// Take a lease of the key of record `start` when its key has a job
    /// limit, unless it holds one (a retry): waiting while the fleet runs
    /// the limit of the key (the one the gate holds now), until the
    /// record's deadline or a stop.
    fn key_lease(&self, pool: &PoolParts, start: &AttemptStart) -> Result<(), JobFate> {
        if !self.keys || self.holding.lock().unpoisoned().contains_key(&start.number) {
            return Ok(());
        }
        let key = pool.records.key_of(start.record);
        let Some(limit) = pool.gate.key_jobs_of(&key).and_then(|(limit, _)| limit) else {
            return Ok(());
        };
        let key: Box<[u8]> = key.into();
        let expired = || start.deadline.is_some_and(|d| pool.shared.clock.now() >= d);
        let stop = || pool.stopping() || expired();
        if !(self.jobs).acquire(&JobPool::Key(key.clone()), u64::from(limit), &stop) {
            return Err(if expired() {
                JobFate::Expired
            } else {
                JobFate::Undelivered
            });
        }
        self.holding.lock().unpoisoned().insert(start.number, key);
        Ok(())
    }
}

impl Hook for ShareJobs {
    /// Take a lease of the fleet's, waiting while the fleet runs N jobs.
    fn acquire(&self, pool: &PoolParts, stop: &dyn Fn() -> bool) -> bool {
        let Some(n) = self.fleet else {
            return true;
        };
        self.jobs
            .acquire(&JobPool::Fleet, n, &|| stop() || pool.stopping())
    }

    fn release(&self) {
        if self.fleet.is_some() {
            self.jobs.release(&JobPool::Fleet);
        }
    }

    /// A job's process holds a lease of the fleet's: it is noted to the
    /// warden before its program runs, so none outlives drip unnoted.
    fn notes_itself(&self) -> bool {
        true
    }

    /// The first attempt takes its key's lease ([`ShareJobs::key_lease`]).
    fn before_attempt(&self, pool: &PoolParts, start: &AttemptStart) -> Result<(), JobFate> {
        self.key_lease(pool, start)
    }

    /// Its leases go back first (calls to the shared state).
    fn ended(&self, _pool: &PoolParts, number: u64) {
        let key = self.holding.lock().unpoisoned().remove(&number);
        if let Some(key) = key {
            self.jobs.release(&JobPool::Key(key));
        }
        self.release();
    }

    fn close(&self) {
        self.jobs.close();
    }

    /// The fleet's figures, with `--share-jobs`.
    fn section(&self) -> Option<Arc<dyn Section>> {
        self.fleet
            .map(|_| Arc::new(self.jobs.figures()) as Arc<dyn Section>)
    }
}
