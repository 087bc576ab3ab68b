//! The few operating-system calls std does not offer. All `unsafe` lives here.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// drip's clock: ns since `origin` (saturating; `Instant` is monotonic).
pub fn ns_since(origin: std::time::Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
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
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
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

/// Whether signal `sig` is ignored (SIG_IGN), as `nohup` leaves SIGHUP and
/// a shell leaves SIGINT for a background job; drip keeps it ignored.
pub fn is_ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one
    // into `old`, a zeroed, properly sized struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The size of the terminal on `fd` as (columns, rows), or `None` when
/// `fd` is no terminal or the size is not known.
pub fn terminal_size(fd: RawFd) -> Option<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}

/// Whether the reading end of `fd` (a pipe or socket) has gone away, as
/// when `| head` has exited. Never blocks; false for files and terminals.
pub fn peer_closed(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd structure; timeout 0 never blocks.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    rc > 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Whether `fd` can take a write of a line (up to PIPE_BUF bytes) without
/// waiting, waiting at most `timeout_ms` for it (0: never waits). A
/// descriptor that cannot be polled counts as writable.
pub fn writable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd structure.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    rc != 0 && (rc < 0 || pfd.revents & libc::POLLNVAL != 0 || pfd.revents != 0)
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
                set_blocking(file.as_raw_fd())?;
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
pub fn set_blocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL and F_SETFL take and return plain integers; `fd` is
    // the caller's open descriptor.
    let rc = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
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
pub fn file_kind(fd: RawFd) -> FileKind {
    // SAFETY: fstat fills the zeroed struct it is given and reads nothing else.
    let mode = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return FileKind::Other;
        }
        st.st_mode & libc::S_IFMT
    };
    match mode {
        libc::S_IFREG | libc::S_IFBLK => FileKind::Storage,
        libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR => FileKind::Stream,
        _ => FileKind::Other,
    }
}

/// Write `buf` to `fd` at its file position; with `nowait`, only what can
/// be written without waiting (Linux pwritev2(2) with RWF_NOWAIT): fewer
/// bytes than asked, or `WouldBlock` when none fit. `nowait` fails with
/// EOPNOTSUPP, EINVAL or ENOSYS where the file or the kernel cannot do it.
///
/// # Errors
/// As write(2).
pub fn write_at_position(fd: RawFd, buf: &[u8], nowait: bool) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
    // SAFETY: one iovec describing `buf`, which outlives the call and is
    // only read; offset -1 means the file position, as write(2).
    let n = unsafe { libc::pwritev2(fd, &iov, 1, -1, flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
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
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and ours alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Waker { read, write })
    }

    /// Wake every current and future [`Waker::wait_readable`] call.
    pub fn wake(&self) {
        let byte = [1u8];
        // SAFETY: writes one byte from a valid buffer; a full pipe (EAGAIN)
        // already means "woken".
        unsafe {
            libc::write(self.write.as_raw_fd(), byte.as_ptr().cast(), 1);
        }
    }

    /// Block until `fd` is readable (or at end of file, or in error) and
    /// return `true`; return `false` as soon as [`Waker::wake`] was called.
    ///
    /// # Errors
    /// A failing poll(2) other than EINTR.
    pub fn wait_readable(&self, fd: RawFd) -> io::Result<bool> {
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `fds` is a valid array of two pollfd structures.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if rc >= 0 {
                break;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        Ok(fds[1].revents == 0)
    }

    /// Whether `fd` can be read without waiting (data, end of file or an
    /// error are all "ready"). Never blocks.
    pub fn ready_now(&self, fd: RawFd) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd structure; timeout 0 never blocks.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        rc > 0
    }
}

/// A descriptor that becomes readable when process `pid` exits (Linux
/// pidfd_open(2)), for waiting on a job with a timeout.
///
/// # Errors
/// The process is gone, or the kernel is older than 5.3.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; the descriptor is owned by the returned OwnedFd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Wait up to `timeout_ms` (-1: for ever) for `fd` to become readable;
/// returns whether it did.
pub fn wait_readable_for(fd: RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is one valid pollfd structure.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc >= 0 {
            return rc > 0;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return true;
        }
    }
}

/// Send `signal` to every process of the process group `pgid`; a group
/// that is gone is no error.
pub fn kill_group(pgid: u32, signal: i32) {
    if pgid == 0 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it has
    // no memory-safety preconditions.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), signal);
    }
}

/// Whether process group `pgid` has a process left (one drip may not
/// signal counts).
pub fn group_exists(pgid: u32) -> bool {
    if pgid == 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks; no memory-safety
    // preconditions.
    let rc = unsafe { libc::kill(-(pgid as libc::pid_t), 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waker_interrupts_a_wait() {
        let source = Waker::new().unwrap(); // its read end never becomes readable
        let waker = std::sync::Arc::new(Waker::new().unwrap());
        let w = std::sync::Arc::clone(&waker);
        let t = std::thread::spawn(move || w.wait_readable(source.read.as_raw_fd()).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
        waker.wake();
        assert!(!t.join().unwrap());
    }

    #[test]
    fn readable_fd_is_reported() {
        let source = Waker::new().unwrap();
        source.wake();
        let waker = Waker::new().unwrap();
        assert!(waker.wait_readable(source.read.as_raw_fd()).unwrap());
    }
}
