//! Stats lines and the progress display are never worth waiting for: they
//! are written only when stderr (or the `--stats-json` file) can take them
//! at once. A line that cannot is dropped and counted, and drip says so at
//! exit if stderr has drained by then. So a stalled stderr never holds up
//! signals or the exit.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::progress::Ui;
use crate::sys;

/// stderr's descriptor.
pub(crate) const STDERR: BorrowedFd<'static> = rustix::stdio::stderr();

/// How long drip waits at exit for a stalled stderr to take the summary.
pub(crate) const AT_EXIT: Duration = Duration::from_secs(1);

/// Lines dropped because their destination was not taking them.
#[derive(Debug, Default)]
pub(crate) struct Dropped(AtomicU64);

impl Dropped {
    /// Run `write` if `fd` takes a line now; else count the line dropped.
    pub(crate) fn write_or_drop(&self, fd: BorrowedFd<'_>, write: impl FnOnce()) {
        if self.takes_now(fd) {
            write();
        }
    }

    /// Whether `fd` takes a line now; if not, the line is counted dropped.
    pub(crate) fn takes_now(&self, fd: BorrowedFd<'_>) -> bool {
        let takes = sys::writable(fd, 0);
        if !takes {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        takes
    }

    /// A line dropped for another reason (the display is busy).
    pub(crate) fn count(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Lines dropped so far.
    pub(crate) fn total(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Write to stderr through the display, if both are free now; else drop
/// the line and count it.
pub(crate) fn to_stderr(ui: &Mutex<Ui>, dropped: &Dropped, write: impl FnOnce(&mut Ui)) {
    match ui.try_lock() {
        Ok(mut ui) => dropped.write_or_drop(STDERR, || write(&mut ui)),
        Err(_) => dropped.count(),
    }
}

/// Whether stderr takes a line within `limit`.
pub(crate) fn stderr_ready(limit: Duration) -> bool {
    sys::writable(STDERR, i32::try_from(limit.as_millis()).unwrap_or(i32::MAX))
}

/// The note at exit about `dropped` lines.
pub(crate) fn note(dropped: u64) -> String {
    format!("stats: {dropped} lines dropped: stderr or the stats file was not taking them")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_socket_drops_and_counts_and_an_empty_one_writes() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let (mut a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let dropped = Dropped::default();
        let mut wrote = 0;
        dropped.write_or_drop(a.as_fd(), || wrote += 1);
        a.set_nonblocking(true).unwrap();
        while a.write(&[b'x'; 4096]).is_ok() {}
        dropped.write_or_drop(a.as_fd(), || wrote += 1);
        assert_eq!((wrote, dropped.total()), (1, 1));
    }
}
