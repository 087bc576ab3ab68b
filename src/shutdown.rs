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

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
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

/// Listen for every stopping signal the parent did not set to be ignored
/// (`nohup`, a background job): those stay ignored. Call within a runtime.
///
/// # Errors
/// A handler cannot be installed.
pub(crate) fn listen() -> std::io::Result<Vec<(i32, Signal)>> {
    stopping_signals()
        .into_iter()
        .filter(|&sig| !crate::sys::is_ignored(sig))
        .map(|sig| Ok((sig, signal(SignalKind::from_raw(sig))?)))
        .collect()
}

/// The next stopping signal received, by number.
pub(crate) async fn next(signals: &mut [(i32, Signal)]) -> i32 {
    poll_fn(|cx| {
        for (sig, listener) in signals.iter_mut() {
            if listener.poll_recv(cx).is_ready() {
                return Poll::Ready(*sig);
            }
        }
        Poll::Pending
    })
    .await
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
