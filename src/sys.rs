//! The few operating-system calls std does not offer, through rustix's
//! safe wrappers where it has them, and how an error of theirs reads
//! ([`describe`]); those Linux offers through calls of its own, and the
//! other systems otherwise, are in [`crate::platform`]. `unsafe` lives
//! here and there only: here, the calls rustix does not wrap (signal
//! dispositions and handlers, the signal pipe's handler, a thread's
//! signal, its scheduling policy, a job's note to the warden made between
//! fork and exec),
//! tokio's registration of a descriptor and the prefetch instruction.
//! Beside them, two helpers every thread uses: a named thread's start
//! ([`spawn`]) and a lock taken whether or not a panic poisoned it
//! ([`Unpoisoned`]).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal};

/// drip's clock: ns since `origin` (saturating; `Instant` is monotonic).
pub fn ns_since(origin: std::time::Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A lock's guard (or a condition variable's, after a wait) taken whether
/// or not a thread panicked while holding the lock: what drip keeps under
/// a lock stays usable, and one thread's panic is reported, not spread.
pub trait Unpoisoned<T> {
    /// The guard, poisoned or not.
    fn unpoisoned(self) -> T;
}

impl<T> Unpoisoned<T> for std::sync::LockResult<T> {
    fn unpoisoned(self) -> T {
        self.unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Start a thread named `name` running `work`.
///
/// # Errors
/// As [`std::thread::Builder::spawn`]: the system did not start it.
pub fn spawn<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new().name(name.into()).spawn(work)
}

/// The reason in an I/O error, without std's "(os error N)" suffix.
pub fn describe(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Start bringing the cache line holding `value` into the caches, so a
/// read of it soon after does not wait for memory (a hint: on targets
/// without a prefetch instruction it does nothing). The keyed queues use
/// it to overlap the cache misses of a batch of look-ups.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it never faults, whatever the address,
    // and changes no memory or register the program sees; the pointer comes
    // from a reference anyway. (Newer compilers count the intrinsic as
    // safe, hence `unused_unsafe`.)
    #[allow(unused_unsafe)]
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Ask the kernel to wake this thread within `ns` nanoseconds of a timer's
/// expiry (Linux timer slack; the default of 50 µs would blur pacing).
/// Best effort: other systems, or a refusal, leave the default.
pub fn set_timer_slack(ns: u64) {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(ns));
    #[cfg(not(target_os = "linux"))]
    let _ = ns;
}

/// Mark this thread as a batch thread (Linux SCHED_BATCH, same nice
/// value): waking it never preempts the thread that woke it, which then
/// goes on until it sleeps or its time slice ends. Best effort.
pub fn set_batch_scheduling() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param; pid 0 names this thread.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        }
    }
}

/// The signal pipe: the handler of every signal drip catches
/// ([`catch_signals`]) writes the signal's number into it, one byte. Made
/// once for the process (the handlers stay installed), never closed, so
/// the descriptor the handler writes to is never another file's.
static SIGNAL_PIPE: std::sync::OnceLock<(OwnedFd, OwnedFd)> = std::sync::OnceLock::new();

/// The write end of [`SIGNAL_PIPE`], for the handler (-1 until it is made).
static SIGNAL_WRITE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The handler of every caught signal: its number, one byte, into the
/// signal pipe (a full pipe drops it: 64 KiB of signals wait already).
/// Only async-signal-safe calls; errno is left as it was found.
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_WRITE.load(std::sync::atomic::Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let byte = sig as u8;
    let errno = errno_location();
    // SAFETY: write(2) is async-signal-safe; `fd` is the signal pipe's
    // write end, open for the life of the process; the buffer is one
    // valid byte. errno is this thread's, read and put back around it.
    unsafe {
        let saved = *errno;
        libc::write(fd, (&byte as *const u8).cast(), 1);
        *errno = saved;
    }
}

/// This thread's errno.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: no preconditions; the pointer is this thread's errno.
    unsafe { libc::__errno_location() }
}

/// This thread's errno.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: no preconditions; the pointer is this thread's errno.
    unsafe { libc::__error() }
}

/// Catch each of `signals` (by number, each below 256) with a handler
/// that writes its number, one byte, into the signal pipe, and return
/// the pipe's reading end (non-blocking, its own descriptor; bytes left
/// from an earlier call are dropped). Of those `keep_ignored` says, one
/// the parent set to be ignored (SIG_IGN, as `nohup` leaves SIGHUP and a
/// shell leaves SIGINT for a background job) stays ignored. The handler
/// is installed with SA_RESTART, so other threads' calls are not cut
/// short: the self-pipe way (D. J. Bernstein's, as in signal-hook), with
/// sigaction(2) alone.
///
/// One sigaction(2) a signal, which installs the handler and reads the
/// action it replaces: an ignored one is put back. Meanwhile this thread
/// blocks the signals, and one that comes in between stays pending, to be
/// discarded as its action is set back to SIG_IGN (POSIX, "Signal
/// Actions"); asking first and installing after took two calls a signal,
/// 90 in all on Linux.
///
/// # Errors
/// The pipe cannot be made (out of descriptors), or a handler installed.
pub fn catch_signals(signals: &[i32], keep_ignored: impl Fn(i32) -> bool) -> io::Result<OwnedFd> {
    if SIGNAL_PIPE.get().is_none() {
        // Made by another thread meanwhile: this one is closed unused.
        let _ = SIGNAL_PIPE.set(crate::platform::descriptors::pipe()?);
    }
    let (read, write) = SIGNAL_PIPE.get().expect("set just above");
    let fd = std::os::fd::AsRawFd::as_raw_fd(write);
    SIGNAL_WRITE.store(fd, std::sync::atomic::Ordering::Relaxed);
    let mut stale = [0u8; 256];
    while rustix::io::read(read, &mut stale).is_ok_and(|n| n > 0) {}
    let blocked = SignalsBlocked::new(signals);
    for &sig in signals {
        // SAFETY: the handler only makes async-signal-safe calls; the
        // structs are zeroed and then filled as sigaction(2) requires.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = libc::SA_RESTART;
            let mut old: libc::sigaction = std::mem::zeroed();
            let mut rc = libc::sigaction(sig, &action, &mut old);
            if rc == 0 && old.sa_sigaction == libc::SIG_IGN && keep_ignored(sig) {
                rc = libc::sigaction(sig, &old, std::ptr::null_mut());
            }
            rc
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    drop(blocked);
    read.try_clone()
}

/// Signals blocked in this thread until dropped, when its mask is set
/// back as it was.
struct SignalsBlocked(libc::sigset_t);

impl SignalsBlocked {
    fn new(signals: &[i32]) -> SignalsBlocked {
        // SAFETY: the sets are zeroed, then filled by sigemptyset and
        // sigaddset as pthread_sigmask(3) requires; `old` receives the
        // mask in force.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in signals {
                libc::sigaddset(&mut set, sig);
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SignalsBlocked(old)
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: the mask is the one pthread_sigmask(3) gave back.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// The size of the terminal on `fd` as (columns, rows), or `None` when
/// `fd` is no terminal or the size is not known.
pub fn terminal_size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    let size = rustix::termios::tcgetwinsize(fd).ok()?;
    (size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}

/// Whether the reading end of `fd` (a pipe or socket) has gone away, as
/// when `| head` has exited. Never blocks; false for files and terminals.
pub fn peer_closed(fd: BorrowedFd<'_>) -> bool {
    let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::empty())];
    let rc = poll(&mut pfd, Some(&Timespec::default()));
    rc.is_ok_and(|n| n > 0) && pfd[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// poll(2)'s timeout of `ms` milliseconds (negative: none, for ever).
fn poll_timeout(ms: i32) -> Option<Timespec> {
    (ms >= 0).then(|| Timespec {
        tv_sec: i64::from(ms / 1000),
        tv_nsec: i64::from(ms % 1000) * 1_000_000,
    })
}

/// Whether `fd` can take a write of a line (up to PIPE_BUF bytes) without
/// waiting, waiting at most `timeout_ms` for it (0: never waits). A
/// descriptor that cannot be polled counts as writable.
pub fn writable(fd: BorrowedFd<'_>, timeout_ms: i32) -> bool {
    let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::OUT)];
    // One descriptor: ready (whatever its events) or a failing poll, 1 or an error.
    !matches!(poll(&mut pfd, poll_timeout(timeout_ms).as_ref()), Ok(0))
}

/// Whether `fd` can be read within `timeout_ms` milliseconds (negative:
/// no limit): data, end of file and an error are all "ready"; a signal
/// that cuts the wait short is not.
pub fn readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> bool {
    let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    matches!(poll(&mut pfd, poll_timeout(timeout_ms).as_ref()), Ok(n) if n > 0)
}

/// Open `path` with `options` (to write to it) without waiting on a FIFO
/// that no one reads yet: a FIFO is opened with O_NONBLOCK, again while it
/// has no reader (ENXIO), asking `give_up` between tries (it waits a
/// little, as for a signal); `None` when it gave up. The FIFO opened, its
/// descriptor waits again (O_NONBLOCK cleared). Anything else is opened
/// as `options` says.
///
/// # Errors
/// As open(2) and fcntl(2).
pub fn open_to_write(
    options: &std::fs::OpenOptions,
    path: &std::path::Path,
    give_up: &mut dyn FnMut() -> bool,
) -> io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let fifo = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo());
    if !fifo {
        return options.open(path).map(Some);
    }
    let mut options = options.clone();
    options.custom_flags(libc::O_NONBLOCK);
    loop {
        match options.open(path) {
            Ok(file) => {
                set_blocking(std::os::fd::AsFd::as_fd(&file))?;
                return Ok(Some(file));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if give_up() {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Clear O_NONBLOCK on `fd`, so that reads wait again.
///
/// # Errors
/// As fcntl(2).
pub fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(fd)?;
    Ok(fcntl_setfl(fd, flags.difference(OFlags::NONBLOCK))?)
}

/// What kind of file `fd` is, for choosing how to write to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file or block device: writes wait only for the disk.
    Storage,
    /// A pipe, socket or character device: writes may wait for a consumer.
    Stream,
    /// Anything else, or `fd` cannot be examined.
    Other,
}

/// The kind of file open on `fd`.
pub fn file_kind(fd: BorrowedFd<'_>) -> FileKind {
    use rustix::fs::FileType;
    let Ok(st) = rustix::fs::fstat(fd) else {
        return FileKind::Other;
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile | FileType::BlockDevice => FileKind::Storage,
        FileType::Fifo | FileType::Socket | FileType::CharacterDevice => FileKind::Stream,
        _ => FileKind::Other,
    }
}

/// Whether a write to `fd` never waits on anyone: a regular file, a block
/// device or the null device. A pipe, a socket, a terminal (stopped with
/// ^S) or another device may hold a write up for good.
pub fn writes_never_wait(fd: BorrowedFd<'_>) -> bool {
    use rustix::fs::FileType;
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false;
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile | FileType::BlockDevice => true,
        FileType::CharacterDevice => rustix::fs::stat("/dev/null").is_ok_and(|null| {
            FileType::from_raw_mode(null.st_mode) == FileType::CharacterDevice
                && null.st_rdev == st.st_rdev
        }),
        _ => false,
    }
}

/// Register `fd` with the current tokio runtime for [`WATCH`] events: epoll
/// reports an error on a pipe's writing end once its reader has gone, and a
/// hang-up on a socket or terminal. `None` when `fd` cannot be watched
/// (files, /dev/null). Call within a runtime.
pub fn watch_errors(fd: OwnedFd) -> Option<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the OwnedFd is moved in: it stays open, the same description,
    // until the AsyncFd is dropped, and as_raw_fd always returns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, WATCH).ok() }
}

/// Register `fd` (non-blocking) with the current tokio runtime to be read
/// as it becomes readable; `None` when it cannot be. Call within a runtime.
pub fn watch_readable(fd: OwnedFd) -> Option<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: as in `watch_errors`: the OwnedFd is moved in and stays open,
    // the same description, until the AsyncFd is dropped.
    unsafe { tokio::io::unix::AsyncFd::register(fd).ok() }
}

/// What [`watch_errors`] watches for: errors, and readability, under which
/// tokio reports a hang-up (epoll's EPOLLHUP).
pub const WATCH: tokio::io::Interest =
    tokio::io::Interest::ERROR.add(tokio::io::Interest::READABLE);

/// The signal used to interrupt a thread blocked in a system call. SIGURG
/// is ignored by default, so a stray one from outside does nothing.
const INTERRUPT: libc::c_int = libc::SIGURG;

extern "C" fn on_interrupt(_: libc::c_int) {}

/// Install a do-nothing handler for the interrupt signal, without
/// SA_RESTART, so that [`interrupt`] makes a blocking write(2) return early
/// (EINTR, or the bytes written so far).
pub fn install_interrupt_handler() {
    // SAFETY: installs a handler that does nothing (async-signal-safe); the
    // struct is zeroed and then filled as sigaction(2) requires.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_interrupt as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = 0;
        libc::sigaction(INTERRUPT, &action, std::ptr::null_mut());
    }
}

/// Ignore signal `sig` from now on (SIG_IGN), as the jobs' warden does
/// the stopping signals (it ends when drip does, and only then).
pub fn ignore_signal(sig: i32) {
    // SAFETY: SIG_IGN installs no handler; the struct is zeroed and then
    // filled as sigaction(2) requires.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_IGN;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
    }
}

/// Make `cmd`'s process write `tag` and its pid (4 bytes, little-endian)
/// to `fd` before it runs its program, in the new process, so the note is
/// made whatever becomes of drip after the fork. The process has SIGPIPE
/// ignored for the write only: a reader gone away (EPIPE) or any other
/// failure leaves the note unmade and the program runs. This makes
/// `cmd` start by fork(2) rather than posix_spawn(3). `fd` must stay open
/// until `cmd` has started.
pub fn note_before_exec(cmd: &mut std::process::Command, fd: i32, tag: u8) {
    use std::os::unix::process::CommandExt;
    let note = move || {
        // SAFETY: between fork and exec only async-signal-safe calls are
        // made (getpid, sigaction, write: rustix's own system call, or
        // libc's with errno read on this thread), on memory of this closure's
        // stack; `fd` is open (the caller keeps it so, and close-on-exec
        // closes it only at the exec).
        unsafe {
            let pid = libc::getpid() as u32;
            let mut message = [tag, 0, 0, 0, 0];
            message[1..].copy_from_slice(&pid.to_le_bytes());
            let mut ignore: libc::sigaction = std::mem::zeroed();
            ignore.sa_sigaction = libc::SIG_IGN;
            libc::sigemptyset(&mut ignore.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGPIPE, &ignore, &mut old);
            let to = BorrowedFd::borrow_raw(fd);
            let _ = rustix::io::retry_on_intr(|| rustix::io::write(to, &message));
            libc::sigaction(libc::SIGPIPE, &old, std::ptr::null_mut());
        }
        Ok(())
    };
    // SAFETY: `note` makes only async-signal-safe calls (above).
    unsafe {
        cmd.pre_exec(note);
    }
}

/// The calling thread, for [`interrupt`].
pub fn this_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// Interrupt `thread` (from [`this_thread`]) if it is blocked in a system
/// call. The thread must still be running.
pub fn interrupt(thread: u64) {
    // SAFETY: the caller guarantees the thread is alive (it is joined only
    // after the last call); the handler does nothing.
    unsafe {
        libc::pthread_kill(thread as libc::pthread_t, INTERRUPT);
    }
}

/// A self-pipe: one thread waits for a file descriptor to become readable,
/// another wakes it by writing a byte.
#[derive(Debug)]
pub struct Waker {
    read: OwnedFd,
    write: OwnedFd,
}

impl Waker {
    /// A new non-blocking pipe pair.
    ///
    /// # Errors
    /// When the process is out of file descriptors.
    pub fn new() -> io::Result<Waker> {
        let (read, write) = crate::platform::descriptors::pipe()?;
        Ok(Waker { read, write })
    }

    /// Wake every current and future [`Waker::wait_readable`] call.
    pub fn wake(&self) {
        // A full pipe (EAGAIN) already means "woken".
        let _ = rustix::io::write(&self.write, &[1]);
    }

    /// Block until `fd` is readable (or at end of file, or in error) and
    /// return `true`; return `false` as soon as [`Waker::wake`] was called.
    ///
    /// # Errors
    /// A failing poll(2) other than EINTR.
    pub fn wait_readable(&self, fd: BorrowedFd<'_>) -> io::Result<bool> {
        let mut fds = [
            PollFd::from_borrowed_fd(fd, PollFlags::IN),
            PollFd::new(&self.read, PollFlags::IN),
        ];
        rustix::io::retry_on_intr(|| poll(&mut fds, None))?;
        Ok(fds[1].revents().is_empty())
    }

    /// Whether `fd` can be read without waiting (data, end of file or an
    /// error are all "ready"). Never blocks.
    pub fn ready_now(&self, fd: BorrowedFd<'_>) -> bool {
        let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        poll(&mut pfd, Some(&Timespec::default())).is_ok_and(|n| n > 0)
    }
}

/// `pid` as a process (or group) id: `None` for 0, which names none.
fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// Send `signal` (a named one, such as `libc::SIGTERM`) to every process
/// of the process group `pgid`; a group that is gone is no error.
pub fn kill_group(pgid: u32, signal: i32) {
    let signal = Signal::from_named_raw(signal);
    debug_assert!(signal.is_some(), "not a named signal");
    if let (Some(pgid), Some(signal)) = (pid_of(pgid), signal) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// Whether process `pid` exists (a signal to it would not fail for want
/// of it: one of another user's counts).
pub fn process_exists(pid: u32) -> bool {
    pid_of(pid).is_some_and(|pid| {
        let test = rustix::process::test_kill_process(pid);
        !matches!(test, Err(rustix::io::Errno::SRCH))
    })
}

/// Whether process group `pgid` has a process left (one drip may not
/// signal counts).
pub fn group_exists(pgid: u32) -> bool {
    pid_of(pgid).is_some_and(|pgid| {
        matches!(
            rustix::process::test_kill_process_group(pgid),
            Ok(()) | Err(rustix::io::Errno::PERM)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::process::CommandExt;

    #[test]
    fn describe_drops_the_os_error_number() {
        let e = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe(&e), "No such file or directory");
    }

    #[test]
    fn waker_interrupts_a_wait() {
        let source = Waker::new().unwrap(); // its read end never becomes readable
        let waker = std::sync::Arc::new(Waker::new().unwrap());
        let w = std::sync::Arc::clone(&waker);
        let t = std::thread::spawn(move || w.wait_readable(source.read.as_fd()).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
        waker.wake();
        assert!(!t.join().unwrap());
    }

    #[test]
    fn set_blocking_clears_o_nonblock_only() {
        use rustix::fs::{fcntl_getfl, OFlags};
        let pipe = Waker::new().unwrap();
        let before = fcntl_getfl(&pipe.write).unwrap();
        assert!(before.contains(OFlags::NONBLOCK));
        set_blocking(pipe.write.as_fd()).unwrap();
        let after = fcntl_getfl(&pipe.write).unwrap();
        assert_eq!(after, before.difference(OFlags::NONBLOCK));
    }

    #[test]
    fn process_groups_are_signalled_and_seen() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id();
        assert!(group_exists(pgid));
        kill_group(pgid, libc::SIGKILL);
        child.wait().unwrap();
        assert!(!group_exists(pgid));
        assert!(!group_exists(0));
    }

    #[test]
    fn only_files_and_the_null_device_never_hold_a_write_up() {
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        assert!(writes_never_wait(null.as_fd()));
        let file = tempfile::tempfile().unwrap();
        assert!(writes_never_wait(file.as_fd()));
        let (read, write) = crate::platform::descriptors::pipe().unwrap();
        assert!(!writes_never_wait(write.as_fd()));
        assert!(!writes_never_wait(read.as_fd()));
    }

    #[test]
    fn readable_fd_is_reported() {
        let source = Waker::new().unwrap();
        source.wake();
        let waker = Waker::new().unwrap();
        assert!(waker.wait_readable(source.read.as_fd()).unwrap());
    }

    /// What is in `read` now (at most 64 bytes), without waiting.
    fn notes(read: &OwnedFd) -> Vec<u8> {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
        let flags = fcntl_getfl(read).unwrap();
        fcntl_setfl(read, flags | OFlags::NONBLOCK).unwrap();
        let mut got = vec![0u8; 64];
        let n = rustix::io::read(read, &mut got).unwrap_or(0);
        got.truncate(n);
        got
    }

    #[test]
    fn a_process_notes_its_pid_before_its_program_runs() {
        use std::os::fd::AsRawFd;
        let (read, write) = rustix::pipe::pipe().unwrap();
        let mut cmd = std::process::Command::new("true");
        note_before_exec(&mut cmd, write.as_raw_fd(), b'+');
        let mut child = cmd.spawn().unwrap();
        let mut want = vec![b'+'];
        want.extend_from_slice(&child.id().to_le_bytes());
        assert!(child.wait().unwrap().success());
        assert_eq!(notes(&read), want);
        // Made before the exec: a program that cannot run noted itself.
        let mut cmd = std::process::Command::new("/nonexistent/drip-test");
        note_before_exec(&mut cmd, write.as_raw_fd(), b'+');
        assert!(cmd.spawn().is_err());
        assert_eq!(notes(&read).len(), 5);
    }

    #[test]
    fn a_note_to_a_closed_pipe_leaves_the_program_to_run() {
        use std::os::fd::AsRawFd;
        let (read, write) = rustix::pipe::pipe().unwrap();
        drop(read);
        let mut cmd = std::process::Command::new("true");
        note_before_exec(&mut cmd, write.as_raw_fd(), b'+');
        // No SIGPIPE ends it before its program: it runs, and exits 0.
        assert!(cmd.status().unwrap().success());
    }
}
