//! `--key-jobs N`: at most N jobs of one key at once. The gate keeps this
//! book under its lock ([`super::gate`]): a record of a key counts from the
//! moment the keyed queues let it go ([`KeyJobs::left`], promised a job as
//! a `-j` slot is promised) until its record is done
//! ([`KeyJobs::ended`], told by the job hook `hooks/key_jobs.rs`). A key
//! at its limit is held ([`KeyJobs::at_limit`]): its records wait in its
//! own queue, out of the round-robin line, and the other keys go on; when
//! one of its jobs ends it is freed ([`KeyJobs::take_freed`]) and joins
//! the line again. So no record of a key at its limit ever takes a job
//! slot to wait in it, which would hold up every other key.
//!
//! The keyless lane counts as one key (the empty key).
//!
//! Pure: no threads, no clock, no I/O.

use std::collections::HashMap;

/// One key's jobs.
#[derive(Debug, Default)]
struct KeyCount {
    /// Records let go and not done yet.
    running: u32,
    /// Its records wait for one of its jobs to end (the queues were told
    /// it is at its limit).
    waiting: bool,
}

/// Where each key's jobs stand against its limit.
#[derive(Debug, Default)]
pub struct KeyJobs {
    /// The limit of every key (`--key-jobs`, `drip ctl … key-jobs`);
    /// `None`: none, and nothing is counted.
    limit: Option<u32>,
    /// The keys with jobs, or held (a key with neither is not kept).
    counts: HashMap<Box<[u8]>, KeyCount>,
    /// Keys held that may go again, not yet told to the queues.
    freed: Vec<Box<[u8]>>,
    /// Keys told they are at their limit, in all (a figure).
    holds: u64,
}

impl KeyJobs {
    /// Whether a limit is set: records are counted.
    pub fn is_limited(&self) -> bool {
        self.limit.is_some()
    }

    /// The job limit of every key, when set (a key's own may differ:
    /// [`KeyJobs::limit_of`]).
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// The job limit of `key` ([`limit_for`]).
    pub fn limit_of(&self, key: &[u8]) -> Option<u32> {
        limit_for(self.limit, key)
    }

    /// At most `n` jobs of a key from now on. A key held whose jobs are
    /// now below it is freed; a key above it starts no job until enough
    /// of its jobs ended.
    pub fn set_limit(&mut self, n: u32) {
        self.limit = Some(n);
        let limit = self.limit;
        let below =
            |key: &[u8], c: &KeyCount| limit_for(limit, key).map_or(true, |n| c.running < n);
        let freed: Vec<Box<[u8]>> = self
            .counts
            .iter_mut()
            .filter(|(key, c)| c.waiting && below(key, c))
            .map(|(key, c)| {
                c.waiting = false;
                key.clone()
            })
            .collect();
        self.freed.extend(freed);
    }

    /// Whether `key` runs as many jobs as it may: if so it is held until
    /// one of them ends.
    pub fn at_limit(&mut self, key: &[u8]) -> bool {
        let Some(limit) = self.limit_of(key) else {
            return false;
        };
        match self.counts.get_mut(key) {
            Some(c) if c.running >= limit => {
                self.holds += u64::from(!c.waiting);
                c.waiting = true;
                true
            }
            _ => false,
        }
    }

    /// A record of `key` left the queues: it counts until it is done.
    pub fn left(&mut self, key: &[u8]) {
        if !self.is_limited() {
            return;
        }
        match self.counts.get_mut(key) {
            Some(c) => c.running = c.running.saturating_add(1),
            None => {
                let count = KeyCount {
                    running: 1,
                    waiting: false,
                };
                self.counts.insert(key.into(), count);
            }
        }
    }

    /// A record of `key` is done: a key held below its limit again is
    /// freed.
    pub fn ended(&mut self, key: &[u8]) {
        let limit = self.limit_of(key);
        let Some(c) = self.counts.get_mut(key) else {
            return;
        };
        c.running = c.running.saturating_sub(1);
        if c.waiting && limit.map_or(true, |n| c.running < n) {
            c.waiting = false;
            self.freed.push(key.into());
        }
        if c.running == 0 && !c.waiting {
            self.counts.remove(key);
        }
    }

    /// The keys freed since the last call, each once.
    pub fn take_freed(&mut self) -> Vec<Box<[u8]>> {
        std::mem::take(&mut self.freed)
    }

    /// Jobs of `key` counted now.
    #[cfg(test)]
    pub fn running(&self, key: &[u8]) -> u32 {
        self.counts.get(key).map_or(0, |c| c.running)
    }

    /// Keys held at their limit now, and how many times a key was held.
    #[cfg(test)]
    pub fn figures(&self) -> (u64, u64) {
        let now = self.counts.values().filter(|c| c.waiting).count();
        (now as u64, self.holds)
    }
}

/// The job limit of `key` when every key's is `limit`. The one seam for
/// limits that differ by key: a per-key table's job column would be
/// looked up here (its row for `key`, else `limit`).
fn limit_for(limit: Option<u32>, _key: &[u8]) -> Option<u32> {
    limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_at_its_limit_is_held_until_one_of_its_jobs_ends() {
        let mut book = KeyJobs::default();
        book.left(b"a");
        assert!(!book.at_limit(b"a"), "nothing is counted without a limit");
        assert_eq!(book.running(b"a"), 0);
        book.set_limit(2);
        book.left(b"a");
        assert!(!book.at_limit(b"a"));
        book.left(b"a");
        assert!(book.at_limit(b"a"));
        assert!(!book.at_limit(b"b"), "another key is not held");
        assert!(book.take_freed().is_empty());
        book.ended(b"a");
        assert_eq!(book.take_freed(), vec![Box::from(&b"a"[..])]);
        assert!(book.take_freed().is_empty(), "told once");
        assert!(!book.at_limit(b"a"));
        assert_eq!(book.figures(), (0, 1));
    }

    #[test]
    fn a_key_not_held_is_never_freed_and_an_idle_one_is_forgotten() {
        let mut book = KeyJobs::default();
        book.set_limit(1);
        book.left(b"a");
        book.ended(b"a");
        assert!(book.take_freed().is_empty());
        assert!(book.counts.is_empty());
        book.ended(b"z");
        assert!(book.counts.is_empty(), "an end of a key not counted");
    }

    #[test]
    fn a_new_limit_frees_the_keys_below_it_and_holds_those_above() {
        let mut book = KeyJobs::default();
        book.set_limit(1);
        book.left(b"a");
        book.left(b"b");
        assert!(book.at_limit(b"a") && book.at_limit(b"b"));
        book.left(b"b");
        book.set_limit(2);
        assert_eq!(book.take_freed(), vec![Box::from(&b"a"[..])]);
        assert!(book.at_limit(b"b"), "b runs 2");
        book.set_limit(1);
        book.ended(b"b");
        assert!(book.take_freed().is_empty(), "b still runs 1 of 1");
        book.ended(b"b");
        assert_eq!(book.take_freed(), vec![Box::from(&b"b"[..])]);
    }
}
