//! The monitor thread: signals, the stats stream and the progress display,
//! on a single-threaded tokio runtime.
//!
//! SIGINT, SIGTERM, SIGHUP and the other stopping signals
//! ([`crate::shutdown`]) stop drip (or, with `--drain`, stop reading); a
//! second one makes it leave at once. SIGUSR1 prints the summary, as
//! `--stats` does at exit.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::control::server::Accept;
use crate::progress::{lock_ui, Snapshot, Ui};
use crate::report::{Among, Sections};
use crate::schedule::InForce;
use crate::stalls::{to_stderr, Dropped, STDERR};
use crate::state::Shared;
use crate::sys::Unpoisoned;

/// How often a writer blocked after a stop is interrupted.
const NUDGE_EVERY: Duration = Duration::from_millis(50);

/// How often the progress display is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One line of the stats stream (`--stats-interval`): its frame (the
/// time, the records in and out, the counts, the pause) and the parts'
/// sections, each at its place ([`Among`]).
#[derive(Debug, Serialize)]
struct Tick {
    /// Seconds since drip started.
    time: f64,
    /// Records read during the interval.
    records_in: u64,
    /// Records written (with `--exec`, done) during the interval.
    records_out: u64,
    /// Records written per second during the interval.
    rate: f64,
    /// The sections with the waits (the waiting room's: `depth`,
    /// `oldest_age_ms`, `forecast_wait_ms`).
    #[serde(flatten)]
    waits: serde_json::Map<String, serde_json::Value>,
    /// Totals so far.
    read: u64,
    written: u64,
    dropped_newest: u64,
    dropped_oldest: u64,
    expired: u64,
    /// Of the dropped, those refused at arrival (past `--max-wait`).
    refused: u64,
    skipped: u64,
    /// The sections with the work (with `--exec`, the records done and
    /// the runner's figures).
    #[serde(flatten)]
    work: serde_json::Map<String, serde_json::Value>,
    /// Paused by `drip ctl … pause` (only said when `true`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
    /// Paused under a `--schedule` row that pauses: when the next row
    /// starts, RFC 3339 (only said then).
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_until: Option<String>,
    /// The sections in force, as each says (with limits per key, `keys`
    /// and `busy_keys`, the keys remembered and busy now; the others as
    /// in `--stats-json`: `schedule`, `ramp`, `budgets`, `costs`,
    /// `share`).
    #[serde(flatten)]
    sections: serde_json::Map<String, serde_json::Value>,
}

impl Tick {
    fn new(snap: &Snapshot, prev: &Snapshot, sections: &Sections) -> Tick {
        let c = &snap.counts;
        let secs = (snap.elapsed_ns - prev.elapsed_ns) as f64 / 1e9;
        let done = |c: &crate::stats::Counts| c.written + c.succeeded + c.failed;
        let records_out = done(c) - done(&prev.counts);
        let paused_until = sections.pause_end().filter(|_| snap.paused);
        Tick {
            time: snap.elapsed_ns as f64 / 1e9,
            records_in: c.read - prev.counts.read,
            records_out,
            rate: if secs > 0.0 {
                records_out as f64 / secs
            } else {
                0.0
            },
            waits: sections.at(Among::Waits).interval_fields(),
            read: c.read,
            written: c.written,
            dropped_newest: c.dropped_newest,
            dropped_oldest: c.dropped_oldest,
            expired: c.expired,
            refused: c.refused,
            skipped: c.skipped,
            work: sections.at(Among::Work).interval_fields(),
            paused: snap.paused,
            paused_until: paused_until.map(|end| end.at),
            sections: sections.at(Among::InForce).interval_fields(),
        }
    }
}

/// `--metrics`: where the figures go, and what the file says of the drip
/// besides its summary (its pid, name and start; the rest is filled in
/// each time).
#[derive(Debug, Clone)]
pub(crate) struct MetricsFile {
    pub(crate) path: std::path::PathBuf,
    pub(crate) base: crate::metrics::Gauges,
    /// The global limits in force.
    pub(crate) limits: InForce,
}

impl MetricsFile {
    /// The file's text now, with `summary` (taken by the caller, so the
    /// last one at exit is the summary's).
    pub(crate) fn text(&self, shared: &Shared, summary: &crate::stats::Summary) -> String {
        let snap = shared.snapshot();
        let limits = self.limits.lock().unpoisoned();
        let rate_limit = crate::schedule::records_per_second(&limits);
        drop(limits);
        let gauges = crate::metrics::Gauges {
            depth: snap.depth,
            oldest_age_ns: snap.oldest_age_ns,
            rate_limit,
            ..self.base.clone()
        };
        crate::metrics::render(summary, &gauges)
    }

    /// Replace the file with the figures now.
    ///
    /// # Errors
    /// The file cannot be written (see [`crate::metrics::replace_file`]).
    pub(crate) fn write(&self, shared: &Shared, summary: &crate::stats::Summary) -> Result<()> {
        crate::metrics::replace_file(&self.path, &self.text(shared, summary))
            .with_context(|| format!("--metrics {}", self.path.display()))
    }
}

/// The running monitor thread.
pub(crate) struct Monitor {
    cancel: CancellationToken,
    dropped: Arc<Dropped>,
    /// What the thread works with, until it takes it as it starts.
    work: Arc<Mutex<Option<(Work, Listening)>>>,
    /// `None` while it is not started ([`Monitor::later`]).
    thread: Option<JoinHandle<Option<BufWriter<File>>>>,
}

/// What the monitor thread works with: taken by the thread as it starts,
/// or back by [`Monitor::finish`] should drip be done before it did (on
/// a busy machine a one-record run can end before a new thread is first
/// given a processor: then it is not waited for).
pub(crate) struct Work {
    pub(crate) shared: Arc<Shared>,
    pub(crate) ui: Arc<Mutex<Ui>>,
    pub(crate) drain: bool,
    /// `--stats-interval`.
    pub(crate) stats_every: Option<Duration>,
    pub(crate) stats_file: Option<BufWriter<File>>,
    /// stdout, watched for its reader going away.
    pub(crate) watch_output: Option<OwnedFd>,
    pub(crate) metrics: Option<MetricsFile>,
    /// The control socket's thread, started by the monitor's once a first
    /// client connects.
    pub(crate) control: Option<crate::control::server::Accept>,
    /// With `--key-rates FILE`: what SIGHUP does instead of stopping drip
    /// (the table read again).
    pub(crate) reload: Option<Reload>,
}

/// What SIGHUP does when it does not stop drip: `Err(why)` is told on
/// stderr, one line, and drip goes on.
pub(crate) type Reload = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The signal handlers, installed, and the pipe they write to: what
/// [`Monitor::start_now`] runs on. A signal that arrives before the monitor
/// reads it waits in the pipe (or, read by [`Listening::wait_signal`], in
/// `early`).
pub(crate) struct Listening {
    /// SIGHUP reads the rate table per key again (`--key-rates`).
    hup_reloads: bool,
    pipe: OwnedFd,
    early: VecDeque<i32>,
}

impl Listening {
    /// Install the signal handlers: before anything can hold drip up (a
    /// `--share` state that does not answer), so that no stopping signal
    /// ever ends drip by its default action.
    ///
    /// # Errors
    /// The signal pipe cannot be made or a handler installed.
    pub(crate) fn install(hup_reloads: bool) -> Result<Listening> {
        let pipe = crate::shutdown::listen(hup_reloads).context("installing signal handlers")?;
        Ok(Listening {
            pipe,
            early: VecDeque::new(),
            hup_reloads,
        })
    }

    /// Whether `signo` stops drip: not SIGUSR1, nor SIGHUP when it reads
    /// the rate table per key again.
    fn stops(&self, signo: i32) -> bool {
        signo != libc::SIGUSR1 && !(self.hup_reloads && signo == libc::SIGHUP)
    }

    /// Wait up to `limit` for a stopping signal, before the monitor runs
    /// (while a FIFO drip writes to has no reader): its number, if one
    /// came. A later signal, and SIGUSR1, stay for the monitor (a second
    /// stopping one: leave).
    pub(crate) fn wait_signal(&mut self, limit: Duration) -> Option<i32> {
        let until = std::time::Instant::now() + limit;
        loop {
            let stopping = self.early.iter().position(|&s| self.stops(s));
            if let Some(at) = stopping {
                return self.early.remove(at);
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            if !crate::sys::readable(self.pipe.as_fd(), ms) {
                continue;
            }
            if !crate::shutdown::read_pipe(&self.pipe, &mut self.early) {
                std::thread::sleep(left);
            }
        }
    }
}

impl Monitor {
    /// The monitor on `work`, not started: [`Monitor::start_now`] starts
    /// it, and [`Monitor::finish`] tells the signals caught meanwhile.
    pub(crate) fn later(listening: Listening, work: Work) -> Monitor {
        Monitor {
            cancel: CancellationToken::new(),
            dropped: Arc::new(Dropped::default()),
            work: Arc::new(Mutex::new(Some((work, listening)))),
            thread: None,
        }
    }

    /// The control socket's thread to start when a first client connects,
    /// given before the monitor starts.
    pub(crate) fn set_control(&mut self, accept: crate::control::server::Accept) {
        if let Some((work, _)) = self.work.lock().unpoisoned().as_mut() {
            work.control = Some(accept);
        }
    }

    /// Start the thread, if it is not started.
    ///
    /// # Errors
    /// The runtime or the thread cannot be started.
    pub(crate) fn start_now(&mut self) -> Result<()> {
        if self.thread.is_some() {
            return Ok(());
        }
        let token = self.cancel.clone();
        let counter = Arc::clone(&self.dropped);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the monitor's runtime")?;
        let cell = Arc::clone(&self.work);
        let thread = crate::sys::spawn("drip-monitor", move || {
            let Some((work, listening)) = cell.lock().unpoisoned().take() else {
                return None; // drip was done before this thread started
            };
            let signals = (listening.pipe, listening.early);
            runtime.block_on(watch(work, signals, token, counter))
        })
        .context("starting the monitor thread")?;
        self.thread = Some(thread);
        Ok(())
    }

    /// Stop the thread; returns the stats file for the summary, and how
    /// many stats lines were dropped because stderr (or the file) stalled.
    /// A thread that has not started yet is not waited for: it finds its
    /// work taken and ends at once. A stopping signal caught meanwhile is
    /// then recorded in `shared` as the monitor would have (the first).
    pub(crate) fn finish(self, shared: &Shared) -> (Option<BufWriter<File>>, u64) {
        let unstarted = self.work.lock().unpoisoned().take();
        if let Some((work, mut listening)) = unstarted {
            let mut caught = std::mem::take(&mut listening.early);
            crate::shutdown::read_pipe(&listening.pipe, &mut caught);
            if let Some(signo) = caught.into_iter().find(|&s| listening.stops(s)) {
                shared.stops.first(signo);
            }
            return (work.stats_file, self.dropped.total());
        }
        self.cancel.cancel();
        let file = self.thread.and_then(|t| t.join().unwrap_or(None));
        (file, self.dropped.total())
    }
}

/// stdout, registered with the runtime, and, once its other end has
/// stopped sending (a half-closed socket), when to look at it next.
struct Watched {
    fd: AsyncFd<OwnedFd>,
    half_closed: Option<Instant>,
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
            if crate::sys::peer_closed(output.fd.get_ref().as_fd()) {
                return true;
            }
            continue;
        }
        let Ok(mut event) = output.fd.ready(crate::sys::WATCH).await else {
            return false;
        };
        if crate::sys::peer_closed(output.fd.get_ref().as_fd()) {
            return true;
        }
        if event.ready().is_read_closed() {
            // The other end only stopped sending (shutdown(SHUT_WR)).
            output.half_closed = Some(Instant::now() + HALF_CLOSED_EVERY);
        }
        event.clear_ready();
        // Never starve the signals, whatever the readiness does.
        tokio::task::yield_now().await;
    }
}

/// The control socket's thread to start, and the socket watched for a
/// first client; a socket that cannot be watched has its thread started
/// now.
fn doorbell(accept: Accept) -> Option<(AsyncFd<OwnedFd>, Accept)> {
    match accept.doorbell().ok().and_then(crate::sys::watch_readable) {
        Some(bell) => Some((bell, accept)),
        None => {
            accept.spawn();
            None
        }
    }
}

/// Once a client waits on the control socket (`None`: never).
async fn rung(control: Option<&(AsyncFd<OwnedFd>, Accept)>) {
    match control {
        Some((bell, _)) => {
            let _ = bell.readable().await;
        }
        None => std::future::pending().await,
    }
}

/// Redraw the display (with `--exec`, the jobs' figures too), unless
/// stderr is stalled (the next redraw catches up) or the display or the
/// jobs' figures are busy.
fn redraw_now(shared: &Shared, ui: &Mutex<Ui>) {
    let snap = shared.display_snapshot();
    let jobs = match shared.jobs.get().map(|j| j.view()) {
        // The jobs' figures are busy: this frame is skipped.
        Some(None) => return,
        view => view.flatten(),
    };
    if let Ok(mut ui) = ui.try_lock() {
        if crate::sys::writable(STDERR, 0) {
            ui.update(&snap, jobs.as_ref());
        }
    }
}

/// One line of the stats stream, to the stats file or stderr; dropped
/// (and counted) when it cannot be taken at once.
fn write_tick(line: &str, file: Option<&mut BufWriter<File>>, ui: &Mutex<Ui>, dropped: &Dropped) {
    match file {
        Some(file) => {
            // A failing stats file is reported once, at exit.
            if dropped.takes_now(file.get_ref().as_fd()) {
                let _ = writeln!(file, "{line}").and_then(|()| file.flush());
            }
        }
        None => to_stderr(ui, dropped, |ui| ui.line(line)),
    }
}

/// A second signal `signo`: leave now, once every record consumed and not
/// written is in the dead letter ([`crate::shutdown::leave`]). Should drip
/// leave without the wiring, the summary is still told to the files.
async fn leave_now(
    shared: &Shared,
    ui: &Mutex<Ui>,
    cancel: &CancellationToken,
    signo: i32,
    (stats_file, metrics): (&mut Option<BufWriter<File>>, &Option<MetricsFile>),
) {
    crate::progress::clear_before_exit(ui);
    let mut books_closed = || {
        let summary = shared.summary();
        if let Some(file) = stats_file.as_mut() {
            let _ = writeln!(file, "{}", summary.json()).and_then(|()| file.flush());
        }
        if let Some(metrics) = metrics {
            let _ = metrics.write(shared, &summary);
        }
    };
    crate::shutdown::leave(shared, cancel, signo, &mut books_closed).await;
}

/// `watch_output` watched for its reader going away. The kernel reports
/// an error on a pipe's writing end once its reader has gone, a hang-up on
/// a socket or terminal; files and /dev/null cannot be watched and need
/// not be (`None`).
fn watched(watch_output: Option<OwnedFd>) -> Option<Watched> {
    let fd = watch_output.and_then(crate::sys::watch_errors)?;
    Some(Watched {
        fd,
        half_closed: None,
    })
}

/// The monitor's timers: the display's redraw, the nudge of a writer
/// blocked at a stop, the `--stats-interval` lines and the `--metrics`
/// file.
struct Ticks {
    redraw: tokio::time::Interval,
    nudge: tokio::time::Interval,
    stats: tokio::time::Interval,
    metrics_every: tokio::time::Interval,
}

impl Ticks {
    /// The timers, a line every `stats_every` (the metrics written as
    /// often, or every second).
    fn new(stats_every: Option<Duration>) -> Ticks {
        // The first ticks one period from now. (Awaiting an interval's
        // "immediate" first tick waits for the timer wheel's next
        // millisecond: two of them held a one-record run up by 2 ms, the
        // monitor not yet listening for its end.)
        let after = |period: Duration| tokio::time::interval_at(Instant::now() + period, period);
        Ticks {
            redraw: tokio::time::interval(PROGRESS_EVERY),
            nudge: tokio::time::interval(NUDGE_EVERY),
            stats: after(stats_every.unwrap_or(Duration::from_secs(3600))),
            metrics_every: after(stats_every.unwrap_or(Duration::from_secs(1))),
        }
    }
}

/// `signo` as the monitor takes it: a signal that stops drip, or `None`
/// for SIGUSR1, which writes every line `--stats` prints at exit, in one
/// write, and for SIGHUP under `reload`, which it calls (a failure told
/// on stderr, one line).
fn stopping(
    signo: i32,
    shared: &Shared,
    reload: Option<&Reload>,
    ui: &Mutex<Ui>,
    dropped: &Dropped,
) -> Option<i32> {
    if let Some(reload) = reload.filter(|_| signo == libc::SIGHUP) {
        if let Err(why) = reload() {
            let line = format!("drip: SIGHUP: {why}; the table in force stays");
            to_stderr(ui, dropped, |ui| ui.line(&line));
        }
        return None;
    }
    if signo != libc::SIGUSR1 {
        return Some(signo);
    }
    let text = shared.summary().text();
    to_stderr(ui, dropped, |ui| ui.line(&text));
    None
}

/// The `--stats-interval` line of now, against the snapshot of the line
/// before (`prev`, then replaced by now's).
fn interval_line(shared: &Shared, prev: &mut Snapshot) -> String {
    let snap = shared.snapshot();
    let tick = Tick::new(&snap, prev, &shared.interval_sections_at(&snap));
    let line = serde_json::to_string(&tick).expect("plain data");
    *prev = snap;
    line
}

/// The monitor's loop on `work` and the signal pipe (`signals`, with
/// those read before it ran) until `cancel`; returns the stats file.
async fn watch(
    work: Work,
    signals: (OwnedFd, VecDeque<i32>),
    cancel: CancellationToken,
    dropped: Arc<Dropped>,
) -> Option<BufWriter<File>> {
    let Work {
        shared,
        ui,
        drain,
        stats_every,
        mut stats_file,
        watch_output,
        metrics,
        control,
        reload,
    } = work;
    let mut control = control.and_then(doorbell);
    let mut output = watched(watch_output);
    let mut signals = crate::shutdown::Signals::new(signals.0, signals.1);
    let progress = lock_ui(&ui).showing_progress();
    let mut every = Ticks::new(stats_every);
    let mut prev = Snapshot::default();
    loop {
        let signo = tokio::select! {
            _ = cancel.cancelled() => break,
            signo = signals.next() => match stopping(signo, &shared, reload.as_ref(), &ui, &dropped) {
                Some(signo) => signo,
                None => continue,
            },
            closed = reader_gone(output.as_mut()) => {
                // At a slow rate the next write may be far off: notice a
                // reader that went away (| head) now, and end quietly.
                if closed {
                    shared.stop(false);
                }
                output = None;
                continue;
            }
            _ = rung(control.as_ref()), if control.is_some() => {
                // A first client: its thread answers it, and the next ones.
                if let Some((_, accept)) = control.take() {
                    accept.spawn();
                }
                continue;
            }
            _ = every.nudge.tick(), if shared.stops.signalled() => {
                // A stop may find the writer blocked on a stalled stdout:
                // interrupt its write until it has let go.
                shared.stops.interrupt_writer();
                continue;
            }
            _ = every.metrics_every.tick(), if metrics.is_some() => {
                // A failing write is reported at exit, by the last one.
                if let Some(metrics) = &metrics {
                    let _ = metrics.write(&shared, &shared.summary());
                }
                continue;
            }
            _ = every.redraw.tick(), if progress => {
                redraw_now(&shared, &ui);
                continue;
            }
            _ = every.stats.tick(), if stats_every.is_some() => {
                let line = interval_line(&shared, &mut prev);
                write_tick(&line, stats_file.as_mut(), &ui, &dropped);
                continue;
            }
        };
        if !shared.stops.first(signo) {
            leave_now(&shared, &ui, &cancel, signo, (&mut stats_file, &metrics)).await;
            break;
        }
        // stop(false) interrupts a blocked write itself; --drain lets the
        // writer go on.
        shared.stop(drain);
    }
    stats_file
}
