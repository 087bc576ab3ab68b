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
//! A key's limit is its row's JOBS column in the rate table
//! (`--key-rates`), else `--key-jobs` ([`limit_for`]); it is looked up as
//! the key's first job is counted, and again for every key counted when
//! either changes (`drip ctl … key-rates`, SIGHUP, `drip ctl … key-jobs`).
//!
//! The keyless lane counts as one key (the empty key).
//!
//! Pure: no threads, no clock, no I/O.

use std::collections::HashMap;

use crate::keyed::KeyRates;

/// One key's jobs.
#[derive(Debug, Default)]
struct KeyCount {
    /// Records let go and not done yet.
    running: u32,
    /// Its records wait for one of its jobs to end (the queues were told
    /// it is at its limit).
    waiting: bool,
    /// Its job limit ([`limit_for`]); `None`: none.
    limit: Option<u32>,
}

/// Where each key's jobs stand against its limit.
#[derive(Debug, Default)]
pub struct KeyJobs {
    /// Jobs are counted (`--key-jobs`, or a rate table that may hold a
    /// JOBS column).
    counting: bool,
    /// The limit of every key whose row has no JOBS (`--key-jobs`, `drip
    /// ctl … key-jobs`); `None`: none.
    limit: Option<u32>,
    /// The rate table, when a row has a JOBS column.
    rows: Option<KeyRates>,
    /// The keys with jobs, or held (a key with neither is not kept).
    counts: HashMap<Box<[u8]>, KeyCount>,
    /// Keys held that may go again, not yet told to the queues.
    freed: Vec<Box<[u8]>>,
    /// Keys told they are at their limit, in all (a figure).
    holds: u64,
}

impl KeyJobs {
    /// Whether records are counted.
    pub fn is_limited(&self) -> bool {
        self.counting
    }

    /// The job limit of every key whose row has none, when set (a key's
    /// own may differ: [`KeyJobs::limit_of`]).
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// The job limit of `key` ([`limit_for`]).
    pub fn limit_of(&self, key: &[u8]) -> Option<u32> {
        limit_for(self.limit, self.rows.as_ref(), key)
    }

    /// `key`'s job limit (`None`: none) and its jobs counted now; `None`
    /// when jobs are not counted.
    pub fn of(&self, key: &[u8]) -> Option<(Option<u32>, u32)> {
        let running = self.counts.get(key).map_or(0, |c| c.running);
        self.counting.then(|| (self.limit_of(key), running))
    }

    /// At most `n` jobs of a key whose row has none from now on
    /// ([`KeyJobs::relimit`]).
    pub fn set_limit(&mut self, n: u32) {
        self.counting = true;
        self.limit = Some(n);
        self.relimit();
    }

    /// The rate table `rows` gives each key its job limit from now on (its
    /// row's JOBS, else `--key-jobs`; [`KeyJobs::relimit`]).
    pub fn set_rows(&mut self, rows: &KeyRates) {
        self.counting = true;
        self.rows = rows.has_jobs().then(|| rows.clone());
        self.relimit();
    }

    /// Each key counted takes its limit again: a key held whose jobs are
    /// now below it is freed; a key above it starts no job until enough
    /// of its jobs ended.
    fn relimit(&mut self) {
        let (limit, rows) = (self.limit, self.rows.as_ref());
        let mut freed = Vec::new();
        for (key, c) in &mut self.counts {
            c.limit = limit_for(limit, rows, key);
            if c.waiting && c.limit.map_or(true, |n| c.running < n) {
                c.waiting = false;
                freed.push(key.clone());
            }
        }
        self.freed.extend(freed);
    }

    /// Whether `key` runs as many jobs as it may: if so it is held until
    /// one of them ends.
    pub fn at_limit(&mut self, key: &[u8]) -> bool {
        match self.counts.get_mut(key) {
            Some(c) if c.limit.is_some_and(|n| c.running >= n) => {
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
                    limit: self.limit_of(key),
                };
                self.counts.insert(key.into(), count);
            }
        }
    }

    /// A record of `key` is done: a key held below its limit again is
    /// freed.
    pub fn ended(&mut self, key: &[u8]) {
        let Some(c) = self.counts.get_mut(key) else {
            return;
        };
        c.running = c.running.saturating_sub(1);
        if c.waiting && c.limit.map_or(true, |n| c.running < n) {
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

/// The job limit of `key`: the JOBS column of its row in `rows` (the rate
/// table, [`KeyRates::find`]: its most specific row), else `limit`
/// (`--key-jobs`). The one place a key's job limit is looked up.
pub fn limit_for(limit: Option<u32>, rows: Option<&KeyRates>, key: &[u8]) -> Option<u32> {
    let own = rows.and_then(|rows| {
        let i = rows.find(key)?;
        rows.rows()[i as usize].jobs
    });
    own.or(limit)
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

    fn rows(text: &str) -> KeyRates {
        KeyRates::new(crate::keyed::rates::parse(text, None, true).unwrap()).unwrap()
    }

    #[test]
    fn a_keys_row_gives_its_job_limit_and_key_jobs_the_rest() {
        let t = rows("github.com 1/s 2\n*.cdn.net 50/s 8\nslow.org 1/s\n");
        assert_eq!(limit_for(Some(4), Some(&t), b"github.com"), Some(2));
        assert_eq!(limit_for(None, Some(&t), b"a.cdn.net"), Some(8));
        assert_eq!(
            limit_for(Some(4), Some(&t), b"slow.org"),
            Some(4),
            "no JOBS"
        );
        assert_eq!(
            limit_for(Some(4), Some(&t), b"other.org"),
            Some(4),
            "no row"
        );
        assert_eq!(limit_for(None, Some(&t), b"other.org"), None);
        assert_eq!(limit_for(Some(3), None, b"github.com"), Some(3));
    }

    #[test]
    fn each_key_is_held_at_its_own_limit() {
        let mut book = KeyJobs::default();
        book.set_rows(&rows("a 1/s 1\nb 1/s 3\n"));
        for key in [b"a", b"b", b"c"] {
            book.left(key);
            book.left(key);
        }
        assert!(book.at_limit(b"a"), "a runs 2 of 1");
        assert!(!book.at_limit(b"b"), "b runs 2 of 3");
        assert!(!book.at_limit(b"c"), "no row, no --key-jobs: no limit");
        book.left(b"b");
        assert!(book.at_limit(b"b"));
        book.set_limit(2);
        assert!(
            book.at_limit(b"c"),
            "--key-jobs 2 for the keys with no JOBS"
        );
        assert_eq!(book.of(b"b"), Some((Some(3), 3)));
        assert_eq!(book.of(b"z"), Some((Some(2), 0)));
        assert_eq!(KeyJobs::default().of(b"z"), None, "not counted");
    }

    #[test]
    fn a_table_read_again_frees_the_keys_below_their_new_limits() {
        let mut book = KeyJobs::default();
        book.set_rows(&rows("a 1/s 1\nb 1/s 1\n"));
        book.left(b"a");
        book.left(b"b");
        book.left(b"b");
        assert!(book.at_limit(b"a") && book.at_limit(b"b"));
        book.set_rows(&rows("a 1/s 2\nb 1/s 2\n"));
        assert_eq!(book.take_freed(), vec![Box::from(&b"a"[..])]);
        assert!(book.at_limit(b"b"), "b runs 2 of 2");
        book.set_rows(&rows("a 1/s\n"));
        assert_eq!(
            book.take_freed(),
            vec![Box::from(&b"b"[..])],
            "no limit now"
        );
        assert_eq!(book.of(b"b"), Some((None, 2)));
    }
}
