//! The jobs' process groups and the second signal: each running job's
//! group, the groups that ended jobs left processes in (a job's background
//! children), those a second signal sent TERM (KILL follows
//! [`KILL_AFTER_LEAVE`] later), and the threads passing a job's output on,
//! interrupted when drip leaves. All under one short lock that waits on
//! nothing (it is taken while signals are sent, never across I/O).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::warden::{end_groups, Warden};
use crate::state::KILL_AFTER_LEAVE;
use crate::sys::Unpoisoned;

/// Lingering groups kept before those now empty are forgotten.
const LINGERING_KEPT: usize = 1024;

#[derive(Debug)]
struct Known {
    /// The running jobs' process groups, by record number.
    jobs: HashMap<u64, u32>,
    /// Process groups of ended attempts that still had processes in them:
    /// TERM and KILL at a stop by signal.
    lingering: Vec<u32>,
    /// After a second signal, the process groups sent TERM, for KILL;
    /// `None` once KILL was sent (a job starting after that is killed at
    /// once).
    terminated: Option<Vec<u32>>,
    /// The threads passing a job's output on now.
    passing: Vec<u64>,
}

/// The jobs' process groups, and drip's leaving.
#[derive(Debug)]
pub(super) struct Groups {
    /// A second signal came: no attempt starts, every job is signalled.
    /// Set before any lock is taken, so no busy lock delays it.
    leaving: AtomicBool,
    known: Arc<Mutex<Known>>,
    /// The process that ends the running jobs when drip is gone (none
    /// when drip runs as a library).
    warden: Option<Warden>,
}

impl Groups {
    /// No group yet; `warden` ends the running jobs' groups when drip is
    /// gone.
    pub(super) fn new(warden: Option<Warden>) -> Groups {
        Groups {
            warden,
            leaving: AtomicBool::new(false),
            known: Arc::new(Mutex::new(Known {
                jobs: HashMap::new(),
                lingering: Vec::new(),
                terminated: Some(Vec::new()),
                passing: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unpoisoned()
    }

    /// The jobs' warden, if there is one.
    pub(super) fn warden(&self) -> Option<&Warden> {
        self.warden.as_ref()
    }

    /// Whether drip is leaving (a second signal).
    pub(super) fn leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
    }

    /// Job `number` runs in process group `pgid`; signalled at once if
    /// drip is leaving.
    pub(super) fn started(&self, number: u64, pgid: u32) {
        let mut known = self.lock();
        known.jobs.insert(number, pgid);
        if self.leaving() {
            match &mut known.terminated {
                Some(groups) => {
                    groups.push(pgid);
                    crate::sys::kill_group(pgid, libc::SIGTERM);
                }
                None => crate::sys::kill_group(pgid, libc::SIGKILL),
            }
        }
    }

    /// The attempt of job `number` ended: its process group is kept if
    /// processes it left behind still run in it.
    pub(super) fn attempt_ended(&self, number: u64) {
        let mut known = self.lock();
        let Some(&pgid) = known.jobs.get(&number) else {
            return;
        };
        if !crate::sys::group_exists(pgid) {
            return;
        }
        if known.lingering.len() >= LINGERING_KEPT {
            known.lingering.retain(|&g| crate::sys::group_exists(g));
        }
        known.lingering.push(pgid);
    }

    /// Job `number` is over.
    pub(super) fn forget(&self, number: u64) {
        self.lock().jobs.remove(&number);
    }

    /// A second signal: no attempt starts from now; TERM every job's
    /// process group (and the lingering ones) now, and KILL them
    /// [`KILL_AFTER_LEAVE`] later from a thread of its own, without
    /// waiting.
    pub(super) fn terminate(&self) {
        self.leaving.store(true, Ordering::SeqCst);
        let mut known = self.lock();
        let mut groups: Vec<u32> = known.jobs.values().copied().collect();
        groups.append(&mut known.lingering);
        for &pgid in &groups {
            crate::sys::kill_group(pgid, libc::SIGTERM);
        }
        if let Some(terminated) = &mut known.terminated {
            terminated.extend(groups);
        }
        drop(known);
        let to_kill = Arc::clone(&self.known);
        let killer = move || {
            std::thread::sleep(KILL_AFTER_LEAVE);
            let groups = to_kill.lock().unpoisoned().terminated.take();
            for pgid in groups.unwrap_or_default() {
                crate::sys::kill_group(pgid, libc::SIGKILL);
            }
        };
        let spawned = crate::sys::spawn("drip-kill", killer);
        if spawned.is_err() {
            // No thread for the wait: the evacuation kills them later.
            self.lock().terminated = None;
        }
    }

    /// At the end of a stop by signal: TERM the process groups that jobs
    /// which ended left behind, and KILL those still there
    /// [`KILL_AFTER_LEAVE`] later (at once when nothing is left). The
    /// groups a second signal sent TERM are among them: drip does not
    /// leave before they are gone, whether or not the thread that waits
    /// to KILL them has run yet.
    pub(super) fn end_lingering(&self) {
        let groups = {
            let mut known = self.lock();
            let mut groups = std::mem::take(&mut known.lingering);
            groups.extend(known.terminated.take().unwrap_or_default());
            groups
        };
        end_groups(&groups);
    }

    /// Leaving without the threads: TERM, then KILL, every group drip
    /// knows (the running jobs', the lingering ones, those sent TERM).
    pub(super) fn end_all(&self) {
        let groups = {
            let mut known = self.lock();
            let mut groups: Vec<u32> = known.jobs.drain().map(|(_, g)| g).collect();
            groups.append(&mut known.lingering);
            groups.extend(known.terminated.take().unwrap_or_default());
            groups
        };
        end_groups(&groups);
    }

    /// Run `pass` (passing a job's output on) on a thread that leaving
    /// interrupts ([`Groups::interrupt_output`]).
    pub(super) fn passing<R>(&self, pass: impl FnOnce() -> R) -> R {
        let me = crate::sys::this_thread();
        self.lock().passing.push(me);
        let r = pass();
        let mut known = self.lock();
        if let Some(at) = known.passing.iter().position(|&t| t == me) {
            known.passing.swap_remove(at);
        }
        r
    }

    /// Interrupt the writes of the threads passing output on.
    pub(super) fn interrupt_output(&self) {
        for &thread in self.lock().passing.iter() {
            crate::sys::interrupt(thread);
        }
    }
}
