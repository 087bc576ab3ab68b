//! A job short of a resource to start (file descriptors, processes,
//! memory): it tries again as drip's other jobs end, each giving back what
//! it held, one such job at a time.

use std::time::{Duration, Instant};

use super::attempt::Files;
use super::job::Job;
use super::parts::ns;
use crate::sys::Unpoisoned;

/// How often a job that cannot start for want of a resource tries again,
/// at most, between the ends of drip's other jobs: the resource may also
/// come back from outside drip, which nothing tells of.
const ROOM_POLL: Duration = Duration::from_millis(50);

/// How long a job that cannot start for want of a resource keeps trying
/// while no other job of drip runs (so none will give one back).
const ROOM_PATIENCE: Duration = Duration::from_secs(5);

impl Job<'_> {
    /// The files of an attempt's job, `files`, made if there are none
    /// (its stdout and stderr, and with `--record-on-stdin` its stdin),
    /// holding the record for its stdin. An error other than a resource
    /// running out is said as one of drip's own (exit 1).
    pub(super) fn job_files<'f>(
        &self,
        files: &'f mut Option<Files>,
    ) -> std::io::Result<&'f mut Files> {
        let record = self.bytes;
        let made = match files {
            Some(files) => Ok(files),
            None => Files::new(self.pool.cfg.record_on_stdin).map(|made| files.insert(made)),
        };
        let set = made.and_then(|files| files.set_record(record).map(|()| files));
        set.map_err(|e| {
            if super::short_of_resources(&e) {
                return e;
            }
            let why = crate::sys::describe(&e).to_lowercase();
            std::io::Error::other(format!("a job's output file: {why}"))
        })
    }

    /// Do `start` (make a job's files, start its process; it calls the
    /// function it is given once the process runs). While it fails for
    /// want of a resource ([`super::short_of_resources`]: file descriptors,
    /// processes, memory), try again as other jobs end (each gives back
    /// what it held: the end of an attempt's process wakes the wait), and
    /// every [`ROOM_POLL`] at least; while no other job of drip runs, for
    /// [`ROOM_PATIENCE`] at most: then its error. The jobs waiting so try
    /// one at a time, each until its process runs (they would otherwise
    /// take from each other what each needs to start). Said once on stderr
    /// (not with `-q`). `None` when drip stops meanwhile: the job did not
    /// start.
    pub(super) fn with_room<T>(
        &self,
        mut start: impl FnMut(&dyn Fn()) -> std::io::Result<T>,
    ) -> Option<std::io::Result<T>> {
        match start(&|| {}) {
            Err(e) if super::short_of_resources(&e) => {}
            done => return Some(done),
        }
        let turn = std::cell::RefCell::new(Some(self.pool.slots.room.lock().unpoisoned()));
        let running = || drop(turn.borrow_mut().take());
        let mut alone_since: Option<Instant> = None;
        loop {
            // The job before may have just started, or given up: the turn
            // begins with a try.
            let error = match start(&running) {
                Err(e) if super::short_of_resources(&e) => e,
                done => return Some(done),
            };
            if self.pool.stopping() || self.pool.groups.leaving() {
                return None;
            }
            let mut table = self.pool.slots.lock();
            if table.processes > 0 {
                alone_since = None;
            } else if alone_since.get_or_insert_with(Instant::now).elapsed() >= ROOM_PATIENCE {
                return Some(Err(error));
            }
            if !std::mem::replace(&mut table.room_said, true) && !self.pool.cfg.quiet {
                // Not under the lock: stderr may be stalled.
                drop(table);
                eprintln!(
                    "drip: --exec: a job cannot start yet: {}; it waits for a running job to end",
                    crate::sys::describe(&error).to_lowercase()
                );
                table = self.pool.slots.lock();
            }
            drop(self.pool.slots.wait_for_room(table, ns(ROOM_POLL)));
        }
    }
}
