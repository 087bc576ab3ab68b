//! Waiting for a job's end with a time limit, without reaping it (the
//! caller reaps it with [`std::process::Child::wait`]): Linux's pidfd
//! (pidfd_open(2), polled), kqueue's process filter (`EVFILT_PROC`,
//! `NOTE_EXIT`) on macOS and FreeBSD. Elsewhere, and under the `portable`
//! feature on Linux, there is none: [`ChildEnd::watch`] fails with
//! `Unsupported` and the caller looks at the job now and then instead.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// A child process watched for its end.
#[derive(Debug)]
pub struct ChildEnd {
    /// The pidfd, or the kqueue the process is registered with.
    fd: OwnedFd,
}

impl ChildEnd {
    /// Watch process `pid`, a child of drip's not yet waited for.
    ///
    /// # Errors
    /// No descriptor to spare, a kernel without the call (Linux before
    /// 5.3), a process already gone, or a system without a way
    /// (`Unsupported`).
    pub fn watch(pid: u32) -> io::Result<ChildEnd> {
        imp::open(pid).map(|fd| ChildEnd { fd })
    }

    /// Whether the process has ended, waiting at most `time` for it (not
    /// at all when it has). A failing wait counts as an end: the caller
    /// then waits for the child itself.
    pub fn ended_within(&self, time: Duration) -> bool {
        imp::ended_within(&self.fd, time)
    }
}

/// `pid` as a process id: `InvalidInput` for 0 and what does not fit.
#[cfg(any(
    all(target_os = "linux", not(feature = "portable")),
    target_vendor = "apple",
    target_os = "freebsd"
))]
fn pid_of(pid: u32) -> io::Result<rustix::process::Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::ErrorKind::InvalidInput.into())
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod imp {
    use super::{io, pid_of, Duration, OwnedFd};
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use std::os::fd::AsFd;

    /// A descriptor that becomes readable when `pid` exits.
    pub fn open(pid: u32) -> io::Result<OwnedFd> {
        let flags = rustix::process::PidfdFlags::empty();
        Ok(rustix::process::pidfd_open(pid_of(pid)?, flags)?)
    }

    pub fn ended_within(fd: &OwnedFd, time: Duration) -> bool {
        let timeout = Timespec::try_from(time).ok();
        let mut pfd = [PollFd::from_borrowed_fd(fd.as_fd(), PollFlags::IN)];
        rustix::io::retry_on_intr(|| poll(&mut pfd, timeout.as_ref())).map_or(true, |n| n > 0)
    }
}

#[cfg(all(
    not(all(target_os = "linux", not(feature = "portable"))),
    any(target_vendor = "apple", target_os = "freebsd")
))]
mod imp {
    #![allow(unsafe_code)]
    use super::{io, pid_of, Duration, OwnedFd};
    use rustix::event::kqueue::{kevent, kqueue, Event, EventFilter, EventFlags, ProcessEvents};
    use std::mem::MaybeUninit;
    use std::time::Instant;

    /// A kqueue with `pid`'s exit registered: it has an event once the
    /// process has exited (at once for one that exited already and is
    /// not reaped; ESRCH for one that is gone).
    pub fn open(pid: u32) -> io::Result<OwnedFd> {
        let queue = kqueue()?;
        let exit = EventFilter::Proc {
            pid: pid_of(pid)?,
            flags: ProcessEvents::EXIT,
        };
        let change = Event::new(exit, EventFlags::ADD, std::ptr::null_mut());
        let none: &mut [MaybeUninit<Event>] = &mut [];
        // SAFETY: the event names a process, not a descriptor, so nothing
        // it refers to can be closed before the kqueue.
        unsafe { kevent(&queue, &[change], none, Some(Duration::ZERO)) }?;
        Ok(queue)
    }

    pub fn ended_within(queue: &OwnedFd, time: Duration) -> bool {
        let until = Instant::now() + time;
        loop {
            let mut events = [MaybeUninit::<Event>::uninit(); 1];
            let left = until.saturating_duration_since(Instant::now());
            // SAFETY: as in `open`: the kqueue watches a process only.
            match unsafe { kevent(queue, &[], &mut events, Some(left)) } {
                Ok((got, _)) => return !got.is_empty(),
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return true,
            }
        }
    }
}

#[cfg(not(any(
    all(target_os = "linux", not(feature = "portable")),
    target_vendor = "apple",
    target_os = "freebsd"
)))]
mod imp {
    use super::{io, Duration, OwnedFd};

    pub fn open(_pid: u32) -> io::Result<OwnedFd> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub fn ended_within(_fd: &OwnedFd, _time: Duration) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Whether this build has a way to watch a job.
    const WATCHES: bool = cfg!(any(
        all(target_os = "linux", not(feature = "portable")),
        target_vendor = "apple",
        target_os = "freebsd"
    ));

    #[test]
    fn a_job_is_watched_to_its_end_where_the_system_can() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let watched = ChildEnd::watch(child.id());
        if !WATCHES {
            let e = watched.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::Unsupported);
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
        let end = watched.unwrap();
        assert!(!end.ended_within(Duration::ZERO));
        assert!(!end.ended_within(Duration::from_millis(20)));
        child.kill().unwrap();
        assert!(end.ended_within(Duration::from_secs(10)));
        // Not reaped by the watch: the child's status is the caller's.
        assert!(child.wait().unwrap().code().is_none());
    }

    #[test]
    fn a_job_that_ended_before_the_watch_is_seen_at_once() {
        let mut child = Command::new("true").spawn().unwrap();
        // Time to exit: a zombie, not yet reaped.
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(end) = ChildEnd::watch(child.id()) {
            assert!(end.ended_within(Duration::ZERO));
        }
        assert!(child.wait().unwrap().success());
    }
}
