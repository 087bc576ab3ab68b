//! Which signals stop drip, and how drip leaves after a second one.
//!
//! Every signal whose default action would end the process, and that is
//! not the sign of a fault in drip itself, stops drip as SIGTERM does, the
//! books and the dead letter kept, exit status 128 + n: SIGINT, SIGTERM,
//! SIGHUP, SIGQUIT, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ,
//! SIGIO, SIGPWR, SIGSTKFLT and the real-time signals. SIGUSR1 prints the
//! stats line. Left at their default: the faults (SIGSEGV, SIGBUS, SIGFPE,
//! SIGILL, SIGTRAP, SIGSYS), SIGABRT (drip's own abort), and SIGKILL and
//! SIGSTOP, which cannot be caught. Signals whose default is to do nothing
//! (SIGWINCH, SIGCHLD, SIGURG, SIGCONT) change nothing.
//!
//! A second stopping signal makes drip leave at once ([`leave`]): every
//! thread is stopped from writing or disposing first (the jobs' threads
//! passing output on too), then everything consumed and not written goes
//! to the dead letter, from exact counts.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

use crate::state::Shared;

/// How often the threads are interrupted while drip leaves.
const NUDGE: Duration = Duration::from_millis(2);

/// How long the threads may take to let go after a second signal before
/// drip leaves without them (saving what it can).
const GRACE: Duration = Duration::from_secs(1);

/// The signals that stop drip, by number.
pub fn stopping_signals() -> Vec<i32> {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut signals = vec![
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGIO,
    ];
    #[cfg(target_os = "linux")]
    {
        signals.extend([libc::SIGPWR, libc::SIGSTKFLT]);
        signals.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    }
    signals
}

/// Catch every stopping signal the parent did not set to be ignored
/// (`nohup`, a background job: those stay ignored), and SIGUSR1, and
/// SIGHUP even when ignored if it reads the rate table per key again
/// (`hup_reloads`); returns the signal pipe they are written to
/// ([`crate::sys::catch_signals`]).
///
/// # Errors
/// The pipe cannot be made or a handler installed.
pub(crate) fn listen(hup_reloads: bool) -> std::io::Result<OwnedFd> {
    let mut signals = stopping_signals();
    signals.push(libc::SIGUSR1);
    crate::sys::catch_signals(&signals, |sig| {
        sig != libc::SIGUSR1 && !(hup_reloads && sig == libc::SIGHUP)
    })
}

/// Read what the signal pipe `pipe` holds now into `queue`, in the order
/// the signals came; whether the pipe can still be read (not at its end
/// or failing).
pub(crate) fn read_pipe(pipe: &OwnedFd, queue: &mut VecDeque<i32>) -> bool {
    let mut bytes = [0u8; 64];
    loop {
        match rustix::io::read(pipe, &mut bytes) {
            Ok(0) => return false,
            Ok(n) => queue.extend(bytes[..n].iter().map(|&b| i32::from(b))),
            Err(rustix::io::Errno::AGAIN) => return true,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// The signals caught, as the monitor reads them: the signal pipe,
/// registered with its runtime, and those read and not yet handled.
pub(crate) struct Signals {
    pipe: Option<AsyncFd<OwnedFd>>,
    queue: VecDeque<i32>,
}

impl Signals {
    /// The signals of `pipe`, after those of `early` (read before the
    /// monitor ran). Call within a runtime; should the pipe not register,
    /// only `early` is ever told.
    pub(crate) fn new(pipe: OwnedFd, early: VecDeque<i32>) -> Signals {
        Signals {
            pipe: crate::sys::watch_readable(pipe),
            queue: early,
        }
    }

    /// The next signal caught, by number (stopping ones and SIGUSR1).
    /// Cancel-safe: a signal read is queued before any wait.
    pub(crate) async fn next(&mut self) -> i32 {
        loop {
            if let Some(sig) = self.queue.pop_front() {
                return sig;
            }
            let Some(pipe) = &self.pipe else {
                return std::future::pending().await;
            };
            let Ok(mut ready) = pipe.readable().await else {
                self.pipe = None;
                continue;
            };
            if read_pipe(pipe.get_ref(), &mut self.queue) {
                ready.clear_ready();
            } else {
                drop(ready);
                self.pipe = None;
            }
        }
    }
}

/// A second signal `signo`: stop the threads where they are and let the
/// wiring take stock (it cancels `done` once it has, and then exits with
/// 128 + `signo`). Should the threads not let go within [`GRACE`] (a
/// write the kernel will not interrupt), move what can be had to the dead
/// letter, tell the books through `books_closed` if they could be closed
/// (the `--stats-json` and `--metrics` files), and exit here.
pub(crate) async fn leave(
    shared: &Shared,
    done: &CancellationToken,
    signo: i32,
    books_closed: &mut dyn FnMut(),
) {
    shared.leave(signo);
    let give_up = tokio::time::Instant::now() + GRACE;
    let mut nudge = tokio::time::interval(NUDGE);
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep_until(give_up) => {
                if shared.evacuate_now() {
                    books_closed();
                }
                crate::control::server::remove_socket();
                std::process::exit(128 + signo);
            }
            // A signal sent just before a thread entered its write is not
            // seen by that write: interrupt again until it has let go.
            _ = nudge.tick() => shared.interrupt_leaving(),
        }
    }
}
