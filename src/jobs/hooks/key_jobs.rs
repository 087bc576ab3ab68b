//! `--key-jobs N`, or a row's JOBS column in the rate table: at most N
//! jobs of one key at once. The keyed queues let
//! a record of a key go only while its key runs fewer than N (the gate
//! counts it as it leaves them: [`crate::jobs::key_jobs`]); this hook
//! gives its count back as the record ends, whatever its fate, so a key
//! held at its limit joins the line again (the pool wakes the writer as
//! the record settles).

use super::Hook;
use crate::jobs::parts::PoolParts;
use crate::jobs::JobConfig;

/// A record's job counted against its key's limit.
pub(in crate::jobs) struct KeyJobsEnd;

impl KeyJobsEnd {
    /// Each key's jobs counted, with `--key` (against `--key-jobs` or its
    /// row's JOBS).
    pub(in crate::jobs) fn of(cfg: &JobConfig) -> Option<KeyJobsEnd> {
        (cfg.key_jobs.is_some() || cfg.count_key_jobs).then_some(KeyJobsEnd)
    }
}

impl Hook for KeyJobsEnd {
    /// Its key's count goes back (the record's key as the keyed queues
    /// read it: a record with no key counts as the empty key).
    fn ended(&self, pool: &PoolParts, number: u64) {
        let key = pool.slots.lock().running.get(&number).map(|job| {
            let key = pool.records.key_of(job.record.as_bytes());
            Box::<[u8]>::from(key)
        });
        if let Some(key) = key {
            pool.gate.key_job_ended(&key);
        }
    }
}
