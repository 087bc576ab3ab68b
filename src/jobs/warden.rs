//! The jobs' warden: a process of its own that ends drip's running jobs
//! when drip is gone, however it went (`kill -9` too), so no job outlives
//! the drip that started it (nor, under `--share-jobs`, the lease that let
//! it start).
//!
//! It is drip's own program started again ([`crate::platform::program`])
//! with `DRIP_WARDEN_OF` set to drip's pid, in a process group of its own
//! (a terminal's signals do not reach it), ignoring the stopping signals,
//! its stdin the read end of a pipe whose write end only drip holds
//! (close-on-exec: no job inherits it). drip notes each job's process
//! group on the pipe as it starts and as its attempt ends, 5 bytes a note
//! (`+` or `-`, the pgid little-endian), one write each, so notes never
//! interleave. The pipe reads end-of-file only once drip is gone: at its
//! exit, or when the kernel closes the descriptors of a drip killed. The
//! warden then sends TERM to the groups of the attempts still running
//! and KILL [`crate::state::KILL_AFTER_LEAVE`] later to those with a
//! process left, and ends. A drip that ends normally has waited for its
//! jobs: nothing is left to end. A stopped drip (`SIGSTOP`) holds the pipe
//! open: its jobs run on.
//!
//! When the note is made: under `--share-jobs`, by the job's own process
//! before it runs its program (after the fork, [`Warden::note_in_child`]),
//! so no instant lies between a job's start and its note: a drip killed
//! after the fork still holds the pipe in that process until its note is
//! written, and the warden reads it before the end of the file. That
//! costs a fork(2) per job instead of a posix_spawn(3). Without
//! `--share-jobs`, drip notes the job right after starting it
//! ([`Warden::started`]): a kill in the microseconds between the two
//! leaves that one job running, as before the warden. A job that notes
//! itself and then fails to run its program (an argument too long) is
//! told of by drip ([`Warden::forget_gone`]), so the warden never keeps a
//! group whose id may be used again.
//!
//! Only a program that is drip serves ([`serve_if_asked`], from `main`):
//! drip as a library (the tests of its parts) starts no warden.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable that makes drip a warden: the pid of the
/// drip it watches, which must be its parent.
const WARDEN_OF: &str = "DRIP_WARDEN_OF";

/// A job's process group started.
const STARTED: u8 = b'+';
/// A job's attempt ended: its group is the warden's no more.
const ENDED: u8 = b'-';
/// A job noted by its own process may have failed to run its program:
/// forget the groups that no longer exist (the pgid field is 0).
const FORGET_GONE: u8 = b'?';

/// This program is drip and can be started again as a warden.
static SERVES: AtomicBool = AtomicBool::new(false);

/// drip's end of the pipe to its warden.
#[derive(Debug)]
pub(crate) struct Warden {
    /// The write end; closed only as drip ends.
    tell: File,
}

impl Warden {
    /// Start the warden of this drip's jobs: `None` when this program is
    /// not drip (no [`serve_if_asked`] was called).
    ///
    /// # Errors
    /// No pipe, no process, or this program's path unknown.
    pub(crate) fn start() -> io::Result<Option<Warden>> {
        if !SERVES.load(Ordering::SeqCst) {
            return Ok(None);
        }
        // Made before any job starts (the pool's start): no job inherits
        // it where the flags are set after (macOS). Both ends block: the
        // warden waits in its reads, drip in a write to a full pipe.
        let (read, write) = crate::platform::descriptors::pipe()?;
        crate::sys::set_blocking(read.as_fd())?;
        crate::sys::set_blocking(write.as_fd())?;
        let program = crate::platform::program::this_program()?;
        Command::new(program)
            .arg0("drip-warden")
            .env(WARDEN_OF, std::process::id().to_string())
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .current_dir("/")
            .process_group(0)
            .spawn()?;
        Ok(Some(Warden {
            tell: File::from(write),
        }))
    }

    /// The job in process group `pgid` started.
    pub(crate) fn started(&self, pgid: u32) {
        self.note(STARTED, pgid);
    }

    /// The attempt in process group `pgid` ended (reaped): the warden
    /// forgets the group, and processes the job left in it run on as at a
    /// normal end.
    pub(crate) fn ended(&self, pgid: u32) {
        self.note(ENDED, pgid);
    }

    /// A job whose process noted itself ([`Warden::note_in_child`]) did
    /// not start (its program could not run): its process, reaped, noted
    /// a group that is gone and whose id may come back. The warden
    /// forgets every group of its own that no longer exists.
    pub(crate) fn forget_gone(&self) {
        self.note(FORGET_GONE, 0);
    }

    /// Make `cmd`'s process note itself (its pid, its own process group's
    /// id) before it runs its program: `cmd` starts by fork(2).
    pub(crate) fn note_in_child(&self, cmd: &mut Command) {
        crate::sys::note_before_exec(cmd, self.tell.as_raw_fd(), STARTED);
    }

    /// One note, in one write. A warden gone (EPIPE: drip ignores
    /// SIGPIPE) can be told nothing more: ignored.
    fn note(&self, tag: u8, pgid: u32) {
        let mut message = [tag, 0, 0, 0, 0];
        message[1..].copy_from_slice(&pgid.to_le_bytes());
        let _ = (&self.tell).write_all(&message);
    }
}

/// Called first thing by drip's `main`: when this process was started as
/// a warden, serve until its drip is gone and return the exit status;
/// otherwise note that this program can serve, and return `None`.
///
/// A warden is started as drip starts it: named `drip-warden`,
/// `DRIP_WARDEN_OF` set to a pid, its stdin a pipe. It serves even when
/// its drip is already gone (its parent is then another process): the
/// end of the pipe ends the jobs told of. A `DRIP_WARDEN_OF` left in a
/// user's environment alone makes no warden of a drip.
pub fn serve_if_asked() -> Option<u8> {
    let named = std::env::args_os()
        .next()
        .is_some_and(|name| name == "drip-warden");
    let asked = std::env::var_os(WARDEN_OF)
        .and_then(|v| v.into_string().ok())
        .is_some_and(|v| v.parse::<u32>().is_ok());
    let piped = rustix::fs::fstat(io::stdin().as_fd()).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
    });
    if !(named && asked && piped) {
        SERVES.store(true, Ordering::SeqCst);
        return None;
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        crate::sys::ignore_signal(sig);
    }
    let running = running_at_end(io::stdin().lock());
    end_groups(&running);
    Some(0)
}

/// The process groups still running when `notes` ends (end of file, or
/// an error reading it), in increasing order.
fn running_at_end(mut notes: impl Read) -> Vec<u32> {
    let mut running: HashSet<u32> = HashSet::new();
    let mut message = [0u8; 5];
    while notes.read_exact(&mut message).is_ok() {
        let mut id = [0u8; 4];
        id.copy_from_slice(&message[1..]);
        let pgid = u32::from_le_bytes(id);
        match message[0] {
            STARTED => {
                running.insert(pgid);
            }
            ENDED => {
                running.remove(&pgid);
            }
            FORGET_GONE => running.retain(|&g| crate::sys::group_exists(g)),
            _ => {}
        }
    }
    let mut running: Vec<u32> = running.into_iter().collect();
    running.sort_unstable();
    running
}

/// TERM process groups `groups`, then KILL those with a process left
/// [`crate::state::KILL_AFTER_LEAVE`] later (no wait when none is left). Whether a group
/// is empty is looked at every 5 ms: nothing tells when the processes of
/// a group that are not drip's children are gone.
pub(super) fn end_groups(groups: &[u32]) {
    for &pgid in groups {
        crate::sys::kill_group(pgid, libc::SIGTERM);
    }
    let start = std::time::Instant::now();
    while groups.iter().any(|&g| crate::sys::group_exists(g)) {
        if start.elapsed() >= crate::state::KILL_AFTER_LEAVE {
            for &pgid in groups {
                crate::sys::kill_group(pgid, libc::SIGKILL);
            }
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn note(tag: u8, pgid: u32) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&pgid.to_le_bytes());
        m
    }

    #[test]
    fn the_groups_running_at_the_end_are_those_started_and_not_ended() {
        let notes: Vec<u8> = [
            note(STARTED, 10),
            note(STARTED, 70_000),
            note(STARTED, 12),
            note(ENDED, 10),
            note(STARTED, 12),
            note(ENDED, 99),
        ]
        .concat();
        assert_eq!(running_at_end(&notes[..]), vec![12, 70_000]);
    }

    #[test]
    fn a_torn_last_note_is_no_note() {
        let mut notes = note(STARTED, 5);
        notes.extend_from_slice(&note(STARTED, 6)[..3]);
        assert_eq!(running_at_end(&notes[..]), vec![5]);
    }

    #[test]
    fn the_groups_gone_are_forgotten_when_a_job_did_not_start() {
        let own = u32::try_from(rustix::process::getpgrp().as_raw_nonzero().get()).unwrap();
        // Beyond any pid_max Linux allows (2^22): no such group.
        let gone = 5_000_000;
        let notes: Vec<u8> = [
            note(STARTED, own),
            note(STARTED, gone),
            note(FORGET_GONE, 0),
        ]
        .concat();
        assert_eq!(running_at_end(&notes[..]), vec![own]);
    }

    #[test]
    fn only_drip_serves_and_a_library_starts_no_warden() {
        // The tests' program is not drip: nothing called serve_if_asked.
        assert!(Warden::start().unwrap().is_none());
    }
}
