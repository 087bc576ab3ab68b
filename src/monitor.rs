//! The monitor thread: signals, the stats stream and the progress display,
//! on a single-threaded tokio runtime.
//!
//! SIGINT, SIGTERM and SIGHUP stop drip (or, with `--drain`, stop reading);
//! a second one exits at once. SIGUSR1 prints one stats line.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::progress::{lock_ui, Snapshot, Ui};
use crate::state::Shared;

/// How often a writer blocked after a stop is interrupted.
const NUDGE_EVERY: Duration = Duration::from_millis(50);

/// How often the progress display is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One line of the stats stream (`--stats-interval`).
#[derive(Debug, Serialize)]
struct Tick {
    /// Seconds since drip started.
    time: f64,
    /// Records read during the interval.
    records_in: u64,
    /// Records written during the interval.
    records_out: u64,
    /// Records written per second during the interval.
    rate: f64,
    /// Records queued now.
    depth: u64,
    /// Age of the oldest queued record, in milliseconds.
    oldest_age_ms: f64,
    /// Totals so far.
    read: u64,
    written: u64,
    dropped_newest: u64,
    dropped_oldest: u64,
    expired: u64,
    skipped: u64,
    /// With limits per key: keys remembered now.
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<u64>,
    /// With limits per key: keys with records waiting now.
    #[serde(skip_serializing_if = "Option::is_none")]
    busy_keys: Option<u64>,
}

impl Tick {
    fn new(snap: &Snapshot, prev: &Snapshot) -> Tick {
        let c = &snap.counts;
        let secs = (snap.elapsed_ns - prev.elapsed_ns) as f64 / 1e9;
        let records_out = c.written - prev.counts.written;
        Tick {
            time: snap.elapsed_ns as f64 / 1e9,
            records_in: c.read - prev.counts.read,
            records_out,
            rate: if secs > 0.0 {
                records_out as f64 / secs
            } else {
                0.0
            },
            depth: snap.depth,
            oldest_age_ms: snap.oldest_age_ns as f64 / 1e6,
            read: c.read,
            written: c.written,
            dropped_newest: c.dropped_newest,
            dropped_oldest: c.dropped_oldest,
            expired: c.expired,
            skipped: c.skipped,
            keys: snap.keys.map(|k| k.0),
            busy_keys: snap.keys.map(|k| k.1),
        }
    }
}

/// The running monitor thread.
pub(crate) struct Monitor {
    cancel: CancellationToken,
    thread: JoinHandle<Option<BufWriter<File>>>,
}

impl Monitor {
    /// Install the signal handlers and start the thread.
    pub(crate) fn start(
        shared: Arc<Shared>,
        ui: Arc<Mutex<Ui>>,
        drain: bool,
        stats_every: Option<Duration>,
        stats_file: Option<BufWriter<File>>,
        watch_output: Option<OwnedFd>,
    ) -> Result<Monitor> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the signal runtime")?;
        // Handlers are installed here, before any record moves.
        // A signal the parent set to be ignored (nohup, a background job)
        // stays ignored: no handler is installed for it.
        let handle = |sig: i32, kind: SignalKind| -> std::io::Result<(i32, Option<Signal>)> {
            if crate::sys::is_ignored(sig) {
                return Ok((sig, None));
            }
            Ok((sig, Some(signal(kind)?)))
        };
        let signals = runtime.block_on(async {
            Ok::<_, std::io::Error>([
                handle(libc::SIGINT, SignalKind::interrupt())?,
                handle(libc::SIGTERM, SignalKind::terminate())?,
                handle(libc::SIGHUP, SignalKind::hangup())?,
            ])
        });
        let signals = signals.context("installing signal handlers")?;
        let usr1 = runtime
            .block_on(async { signal(SignalKind::user_defined1()) })
            .context("installing signal handlers")?;
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let thread = std::thread::Builder::new()
            .name("drip-monitor".into())
            .spawn(move || {
                runtime.block_on(watch(
                    shared,
                    ui,
                    drain,
                    stats_every,
                    stats_file,
                    (signals, usr1),
                    watch_output,
                    token,
                ))
            })
            .context("starting the monitor thread")?;
        Ok(Monitor { cancel, thread })
    }

    /// Stop the thread; returns the stats file for the summary.
    pub(crate) fn finish(self) -> Option<BufWriter<File>> {
        self.cancel.cancel();
        self.thread.join().unwrap_or(None)
    }
}

/// stdout, registered with the runtime, and, once its other end has
/// stopped sending (a half-closed socket), when to look at it next.
struct Watched {
    fd: AsyncFd<OwnedFd>,
    half_closed: Option<tokio::time::Instant>,
}

/// How often a half-closed socket stdout is checked for a hang-up.
const HALF_CLOSED_EVERY: Duration = Duration::from_secs(1);

/// Whether the reader of `output` (a pipe, socket or terminal) has gone
/// away: waits for an event on it and checks; `false` if watching fails;
/// never, without one.
async fn reader_gone(output: Option<&mut Watched>) -> bool {
    let Some(output) = output else {
        return std::future::pending().await;
    };
    loop {
        if let Some(next) = output.half_closed {
            // tokio keeps a socket's read-closed readiness for good, so it
            // can no longer wake us for a hang-up: look once a second (the
            // deadline is kept, as this future is made anew each round).
            tokio::time::sleep_until(next).await;
            output.half_closed = Some(next + HALF_CLOSED_EVERY);
            if crate::sys::peer_closed(output.fd.as_raw_fd()) {
                return true;
            }
            continue;
        }
        let Ok(mut event) = output.fd.ready(crate::sys::WATCH).await else {
            return false;
        };
        if crate::sys::peer_closed(output.fd.as_raw_fd()) {
            return true;
        }
        if event.ready().is_read_closed() {
            // The other end only stopped sending (shutdown(SHUT_WR)).
            output.half_closed = Some(tokio::time::Instant::now() + HALF_CLOSED_EVERY);
        }
        event.clear_ready();
        // Never starve the signals, whatever the readiness does.
        tokio::task::yield_now().await;
    }
}

/// The next delivery of `signal`; never, when it is not handled.
async fn recv(signal: &mut Option<Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[allow(clippy::too_many_arguments)]
async fn watch(
    shared: Arc<Shared>,
    ui: Arc<Mutex<Ui>>,
    drain: bool,
    stats_every: Option<Duration>,
    mut stats_file: Option<BufWriter<File>>,
    (signals, mut usr1): ([(i32, Option<Signal>); 3], Signal),
    watch_output: Option<OwnedFd>,
    cancel: CancellationToken,
) -> Option<BufWriter<File>> {
    let [(int_no, mut int), (term_no, mut term), (hup_no, mut hup)] = signals;
    // The kernel reports an error on a pipe's writing end once its reader
    // has gone, a hang-up on a socket or terminal; files and /dev/null
    // cannot be watched and need not be.
    let mut output = watch_output
        .and_then(crate::sys::watch_errors)
        .map(|fd| Watched {
            fd,
            half_closed: None,
        });
    let progress = lock_ui(&ui).showing_progress();
    let mut redraw = tokio::time::interval(PROGRESS_EVERY);
    let mut nudge = tokio::time::interval(NUDGE_EVERY);
    let mut stats = tokio::time::interval(stats_every.unwrap_or(Duration::from_secs(3600)));
    stats.tick().await; // the first tick is immediate
    let mut prev = Snapshot::default();
    loop {
        let signo = tokio::select! {
            _ = cancel.cancelled() => break,
            _ = recv(&mut int) => int_no,
            _ = recv(&mut term) => term_no,
            _ = recv(&mut hup) => hup_no,
            _ = usr1.recv() => {
                let line = shared.summary().line();
                lock_ui(&ui).message(&line);
                continue;
            }
            closed = reader_gone(output.as_mut()) => {
                // At a slow rate the next write may be far off: notice a
                // reader that went away (| head) now, and end quietly.
                if closed {
                    shared.stop(false);
                }
                output = None;
                continue;
            }
            _ = nudge.tick(), if shared.first_signal.load(Ordering::Relaxed) != 0 => {
                // A stop may find the writer blocked on a stalled stdout:
                // interrupt its write until it has let go.
                shared.interrupt_writer();
                continue;
            }
            _ = redraw.tick(), if progress => {
                let snap = shared.snapshot();
                lock_ui(&ui).update(&snap);
                continue;
            }
            _ = stats.tick(), if stats_every.is_some() => {
                let snap = shared.snapshot();
                let line = serde_json::to_string(&Tick::new(&snap, &prev)).expect("plain data");
                prev = snap;
                match &mut stats_file {
                    Some(file) => {
                        // A failing stats file is reported once, at exit.
                        let _ = writeln!(file, "{line}").and_then(|()| file.flush());
                    }
                    None => lock_ui(&ui).line(&line),
                }
                continue;
            }
        };
        let first = shared
            .first_signal
            .compare_exchange(0, signo, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !first {
            // A second signal: leave now, saving what the dead letter has
            // buffered if the state can be had at once (it may be held by
            // a blocked write; then leaving matters more).
            shared.evacuate_now();
            std::process::exit(128 + signo);
        }
        shared.stop(drain);
        shared.interrupt_writer();
    }
    stats_file
}
