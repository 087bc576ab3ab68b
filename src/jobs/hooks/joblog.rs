//! `--joblog FILE` (and `--resume FILE`, appending to it): a line for each
//! attempt's outcome ([`crate::jobs::joblog::Entry`]).

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use anyhow::Result;

use super::{Hook, Outcome};
use crate::jobs::joblog::{micros, unix_micros, Entry, Joblog};
use crate::jobs::JobConfig;
use crate::sys::Unpoisoned;

/// The joblog the attempts are written to.
pub(in crate::jobs) struct LogAttempts(Mutex<Joblog>);

impl LogAttempts {
    /// The joblog of `--resume` (appended to) or `--joblog` (made anew),
    /// when given. A FIFO that no one reads is waited for while `give_up`
    /// says not to; given up, nothing is logged (drip is stopping).
    ///
    /// # Errors
    /// The joblog cannot be opened.
    pub(in crate::jobs) fn of(
        cfg: &JobConfig,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<Option<LogAttempts>> {
        let joblog = match (&cfg.resume, &cfg.joblog) {
            (Some(path), _) => Some(Joblog::append(path)?),
            (None, Some(path)) => Joblog::create(path, give_up)?,
            (None, None) => None,
        };
        Ok(joblog.map(|j| LogAttempts(Mutex::new(j))))
    }
}

impl Hook for LogAttempts {
    /// The attempt's line: an attempt that never ran has no exit, no
    /// signal, 0 µs, and started now.
    fn outcome(&self, o: &Outcome) {
        let (started, duration, (exit, signal, timed_out), http_status) = match o.ran {
            Some((ended, status)) => (
                ended.started,
                ended.duration,
                Entry::exit_fields(ended.exit),
                status,
            ),
            None => (SystemTime::now(), Duration::ZERO, (None, None, false), None),
        };
        let entry = Entry {
            id: o.who.id,
            number: o.who.number,
            record: o.who.shown(),
            attempt: o.attempt,
            start_us: unix_micros(started),
            duration_us: micros(duration),
            exit,
            signal,
            timed_out,
            http_status,
            outcome: o.outcome,
            error: o.error,
        };
        self.0.lock().unpoisoned().write(&entry);
    }
}
