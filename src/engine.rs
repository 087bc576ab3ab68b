//! The wiring: builds the pure parts from the configuration, starts the
//! reader, monitor and writer threads, and turns how they ended into an
//! [`Ending`] or an error. `docs/architecture.md` draws the whole machine.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::admission::Admission;
use crate::bucket::Bucket;
use crate::cli::{Config, Input};
use crate::control::server::Server;
use crate::deadletter::DeadLetter;
use crate::input::{Oversize, OwnFile, ReadReport, Splitter};
use crate::jobs::gate::{Gate, GateControl};
use crate::jobs::resume::Done;
use crate::jobs::{ExecError, Pool, RemoveHeaders, Runner, EXIT_FAILED};
use crate::keyed::Keyed;
use crate::monitor::{Listening, MetricsFile, Monitor};
use crate::progress::{lock_ui, Ui};
use crate::schedule::{Limit, Limits, Schedule, Unit};
use crate::shared;
use crate::state::{Clock, InForce, KeyInForce, OverflowError, Shared, State, Stops};
use crate::stats::Summary;
use crate::steer::{Follower, Steering};
use crate::sys::Unpoisoned;
use crate::writer::{self, Stdout};
use crate::{output, reader, stalls, sys};

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: a runtime error (unreadable input, oversized record, failed write).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: a usage error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the bucket overflowed under `--overflow fail`.
pub const EXIT_OVERFLOW: i32 = 3;
/// Exit status: the `--share` state could not be reached under
/// `--share-on-error fail`, or can never be used as set up.
pub const EXIT_SHARE: i32 = 4;
/// Exit status: a `--budget` was spent under `--budget-exhausted stop`.
pub const EXIT_BUDGET: i32 = 5;

/// Map an error from [`run`] to drip's exit status.
pub fn exit_status(err: &anyhow::Error) -> i32 {
    if err.downcast_ref::<OverflowError>().is_some() {
        EXIT_OVERFLOW
    } else if err.downcast_ref::<crate::state::BudgetSpent>().is_some() {
        EXIT_BUDGET
    } else if err.downcast_ref::<shared::Disagreement>().is_some() {
        EXIT_USAGE
    } else if err.downcast_ref::<shared::Unreachable>().is_some()
        || err.downcast_ref::<shared::Unusable>().is_some()
    {
        EXIT_SHARE
    } else if let Some(e) = err.downcast_ref::<ExecError>() {
        e.status()
    } else {
        EXIT_ERROR
    }
}

/// How drip ended, when it ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every input was read and every record accounted for.
    Finished,
    /// Some input could not be read (already reported); exit 1.
    InputFailed,
    /// Stopped by this signal.
    Signal(i32),
    /// Some records' jobs failed, or passed their `--deadline` (`--exec`).
    JobsFailed,
}

impl Ending {
    /// The exit status for this ending.
    pub fn status(self) -> i32 {
        match self {
            Ending::Finished => EXIT_OK,
            Ending::InputFailed => EXIT_ERROR,
            Ending::Signal(n) => 128 + n,
            Ending::JobsFailed => EXIT_FAILED,
        }
    }
}

/// Run drip with `config`, writing records to `out`.
///
/// Prints input warnings, the progress display and the summary on stderr as
/// configured. A closed `out` (broken pipe) ends the run quietly as
/// [`Ending::Finished`].
///
/// # Errors
/// The dead letter or stats file cannot be written, a record is over
/// `--max-record` or `--capacity-bytes`, a write to `out` fails, or the
/// bucket overflows under `fail` ([`OverflowError`], exit status 3). The
/// summary is printed before the error is returned.
pub fn run(config: Config, out: Box<dyn Write + Send>) -> Result<Ending> {
    run_watching(config, out, None, None)
}

/// [`run`] writing to this process's stdout, which is also watched: when
/// its reader goes away (`| head`), drip ends quietly at once rather than
/// at its next write.
///
/// # Errors
/// As [`run`]; also when stdout cannot be duplicated.
pub fn run_stdout(config: Config) -> Result<Ending> {
    use std::os::fd::AsFd;
    let dup = || std::io::stdout().as_fd().try_clone_to_owned();
    let out = File::from(dup().context("stdout")?);
    let out_fd = dup().context("stdout")?;
    let watch = dup().context("stdout")?;
    run_watching(config, Box::new(out), Some(out_fd), Some(watch))
}

/// Total size of the inputs when all are regular files, for the ETA.
fn input_size(inputs: &[Input]) -> Option<u64> {
    inputs.iter().try_fold(0u64, |sum, input| match input {
        Input::Path(p) => std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| sum + m.len()),
        Input::Stdin => None,
    })
}

/// The local schedule for `config`'s limits, costs read as `--cost` says,
/// with its `--budget`s counted on the wall clock whose reading at the
/// schedule's 0 is `origin` (ns since the Unix epoch), each through its
/// book in `books` when `--share`d.
fn local_limits(config: &Config, origin: i128, books: &[Arc<shared::budget::Book>]) -> Limits {
    let budgets = counters(config, origin, books);
    let limits = Limits::new(&config.limits).with_budgets(budgets, config.budget_exhausted);
    let limits = match &config.cost {
        Some(cost) => limits.with_cost(cost.clone()),
        None => limits,
    };
    match &config.jobs {
        Some(jobs) if !jobs.settle.is_empty() => limits.with_settling(),
        _ => limits,
    }
}

/// The counters of `config`'s `--budget`s on the wall clock whose reading
/// at the schedule's 0 is `origin` (ns since the Unix epoch), each through
/// its book in `books` when `--share`d.
fn counters(
    config: &Config,
    origin: i128,
    books: &[Arc<shared::budget::Book>],
) -> Vec<crate::budget::Counter> {
    // A second of the rate (every record at once when unpaced).
    let per_second = config.records_per_second();
    let ahead = if per_second.is_finite() {
        per_second.ceil() as u64
    } else {
        u64::MAX
    };
    config
        .budgets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let counter = crate::budget::Counter::new(b.clone(), origin);
            match books.get(i) {
                Some(book) => counter.shared(Arc::clone(book) as _, ahead),
                None => counter,
            }
        })
        .collect()
}

/// The shared state for `config`: admission over the configured limits
/// (local, or `--share`d, and behind `gate` with `--exec`), and the running
/// `--share`, if any.
fn shared_state(
    config: &Config,
    out_fd: Option<std::os::fd::OwnedFd>,
    gate: Option<Arc<GateControl>>,
    (give_up, books): (
        &mut dyn FnMut() -> bool,
        &mut Vec<Arc<shared::budget::Book>>,
    ),
) -> Result<(Arc<Shared>, Option<shared::Handle>)> {
    let origin = Instant::now();
    // The wall clock at `origin`, where the budgets' windows are found.
    let wall = shared::budget::unix_now();
    let (mut schedule, key_schedule, share): (Box<dyn Schedule>, _, _) = match &config.share {
        Some(share) => {
            let opened = shared::open(
                share,
                &config.limits,
                (config.key.as_ref(), config.cost.as_ref()),
                origin,
            )?;
            *books = config
                .budgets
                .iter()
                .map(|b| shared::budget::start(share, b))
                .collect::<Result<_>>()?;
            let schedule: Box<dyn Schedule> = match opened.schedule {
                Some(schedule) if books.is_empty() => Box::new(schedule),
                Some(schedule) => Box::new(crate::budgeted::Budgeted::new(
                    Box::new(schedule),
                    counters(config, wall, books),
                    config.budget_exhausted,
                )),
                None => Box::new(local_limits(config, wall, books)),
            };
            (schedule, opened.keys, Some(opened.handle))
        }
        None => (Box::new(local_limits(config, wall, &[])), None, None),
    };
    if let Some(ramp) = config.ramp {
        schedule = Box::new(crate::ramp::Ramped::new(schedule, ramp));
    }
    if let Some(gate) = gate {
        schedule = Box::new(Gate::new(schedule, gate));
    }
    // A failed dead-letter write stops drip at once: any further record
    // not written would be lost without a trace.
    let cell = Arc::new(OnceLock::<Weak<Shared>>::new());
    let to_stop = Arc::clone(&cell);
    let failed = Box::new(move || {
        if let Some(shared) = to_stop.get().and_then(Weak::upgrade) {
            shared.stop(false);
        }
    });
    // A dead letter given up (a FIFO no one read before a signal) is
    // none: its records are only counted.
    let dead = DeadLetter::open(
        config.dead_letter.as_deref(),
        config.delimiter,
        failed,
        give_up,
    )?;
    let keep_dead = config.dead_letter.is_some() && dead.is_some();
    let dead = dead.unwrap_or_else(|| DeadLetter::none(config.delimiter));
    let dead_backlog = dead.backlog();
    // A schedule's rows may set a rate: the writer paces.
    let unpaced = config.limits.is_empty()
        && config.budgets.is_empty()
        && config.key.is_none()
        && config.schedule.is_none();
    let bucket = Bucket::new(config.capacity, config.capacity_bytes, config.overflow);
    // A record's --deadline counts its time in the bucket too.
    let deadline = config.jobs.as_ref().and_then(|j| j.deadline);
    let max_wait_ns = [config.max_wait, deadline]
        .into_iter()
        .flatten()
        .min()
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut adm = Admission::new(bucket, schedule, max_wait_ns);
    if let Some(keyed) = keyed(config, key_schedule) {
        adm = adm.with_keys(keyed);
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(State::new(adm, dead, keep_dead)),
        data_ready: Condvar::new(),
        space_ready: Condvar::new(),
        waker: sys::Waker::new().context("creating a pipe")?,
        clock: Clock(origin),
        unpaced,
        direct: out_fd.filter(|_| unpaced).and_then(output::Direct::new),
        in_flight_written: AtomicUsize::new(0),
        stops: Stops::default(),
        dead_backlog,
        jobs: OnceLock::new(),
        share: OnceLock::new(),
        capacity_for: config.capacity_for.clone(),
        key_capacity_for: config.key_capacity_for.clone(),
        schedule_row: Mutex::new(None),
        ramp: config.ramp,
    });
    let _ = cell.set(Arc::downgrade(&shared));
    Ok((shared, share))
}

/// The keyed queues of `--key`, if given: over `shared_keys`, the
/// per-key grants of a `--share`d key rate, when there are.
fn keyed(config: &Config, shared_keys: Option<shared::keys::SharedKeys>) -> Option<Keyed> {
    let key = config.key.as_ref()?;
    let mut keyed = Keyed::new(
        key.clone(),
        config.delimiter,
        config.capacity,
        config.capacity_bytes,
    );
    if let Some(shared_keys) = shared_keys {
        keyed = keyed.with_shared(Box::new(shared_keys));
    }
    if config.jobs.is_some() {
        // The runner times each record from its arrival.
        keyed = keyed.records_apart();
    }
    Some(keyed)
}

/// The keeper of `--share` wakes the writer when slots arrive, and stops
/// drip when it must.
fn notify_from_share(shared: &Arc<Shared>) -> shared::Notify {
    let shared = Arc::downgrade(shared);
    Box::new(move |stop| {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if stop {
            shared.stop(false);
        } else {
            let _st = shared.lock();
            shared.data_ready.notify_all();
            // A retry waiting for a slot takes one of these too.
            shared.wake_jobs();
        }
    })
}

/// `out_fd`: a duplicate of the descriptor `out` writes to, for writing to
/// it directly when unpaced. `watch_output`: another, watched for its
/// reader going away.
fn run_watching(
    config: Config,
    out: Box<dyn Write + Send>,
    out_fd: Option<std::os::fd::OwnedFd>,
    watch_output: Option<std::os::fd::OwnedFd>,
) -> Result<Ending> {
    inputs_kept(&config)?;
    // Read before anything is written (a `--resume` file that is no joblog is refused).
    let screen = screen(&config)?;
    // Signals are caught from before `--share` first asks its state, and
    // before drip's own files are opened (a FIFO waits for its reader).
    let mut opening = Opening::new(Listening::install()?);
    let mut give_up = || opening.give_up();
    let stats_file = stats_file(&config, &mut give_up)?;
    // Running jobs, the reader never writes to stdout itself.
    let out_fd = out_fd.filter(|_| config.jobs.is_none());
    let room_fd = out_fd.as_ref().and_then(|fd| fd.try_clone().ok());
    let gate = gate(&config);
    let mut books = Vec::new();
    let (shared, mut share) =
        shared_state(&config, out_fd, gate.clone(), (&mut give_up, &mut books))?;
    wake_from_share(&shared, share.as_ref(), &books);
    let way = sink(&config, &shared, gate, out, &mut give_up)?;
    let listening = opening.stop_if_signalled(&shared, config.drain);
    let pool = match &way {
        Way::Jobs(pool) => Some(Arc::clone(pool)),
        Way::Stdout(_) => None,
    };
    // Whatever way drip leaves from here, the jobs' headers go.
    let _headers = pool.as_ref().map(|p| RemoveHeaders(Arc::clone(p)));
    let (in_force, key_in_force) = limits_in_force(&config, share.as_ref());
    let metrics = metrics_file(&config, &shared, &in_force)?;
    let ui = ui(&config);
    let relimiter = share
        .as_ref()
        .zip(config.share.as_ref())
        .map(|(handle, s)| (s.target.name().to_string(), handle.relimiter(s)));
    let steering = Arc::new(steering(
        &config,
        &shared,
        &ui,
        ((in_force, key_in_force), relimiter),
    ));
    let follower = follow_schedule(&config, &steering)?;
    // The control socket's directory is checked now, its socket made as
    // the monitor starts (`Later`).
    control_dir(&config)?;
    let work = crate::monitor::Work {
        shared: Arc::clone(&shared),
        ui: Arc::clone(&ui),
        drain: config.drain,
        stats_every: config.stats_interval,
        stats_file,
        watch_output,
        metrics: metrics.clone(),
        control: None,
    };
    // Started now when the run shows or tells something as it goes, or
    // runs jobs; else once the run outlasts QUICK_RUN (ended_within).
    let at_once = config.jobs.is_some()
        || config.stats_interval.is_some()
        || metrics.is_some()
        || lock_ui(&ui).showing_progress();
    let mut later = Later {
        monitor: Monitor::later(listening, work),
        steering: Some(steering),
        control: None,
    };
    if at_once {
        later.start(&config)?;
    }
    let reader = reader::Reader::start(
        Arc::clone(&shared),
        Arc::clone(&ui),
        (config.inputs.clone(), own_files(&config)),
        splitter(&config, &shared),
        screen,
        !at_once && input_at_hand(&config),
    )?;
    let never_waits = room_fd
        .as_ref()
        .is_some_and(|fd| sys::writes_never_wait(std::os::fd::AsFd::as_fd(fd)));
    if !ended_within(&shared, QUICK_RUN, never_waits) {
        if let Err(e) = later.start(&config) {
            shared.stop(false);
            let _ = reader.join();
            return Err(e);
        }
    }
    let Later {
        monitor, control, ..
    } = later;
    let write_error = match way {
        Way::Stdout(out) => write(&shared, &mut Stdout::new(out, room_fd)),
        Way::Jobs(pool) => write(&shared, &mut Runner(pool)),
    };
    // Jobs under way end first (a stop has already stopped new starts).
    let fatal = pool.and_then(|pool| {
        pool.wait_all();
        pool.take_fatal()
    });
    // Whatever ended the writer, reading stops too.
    shared.stop(false);
    let report = reader.join();
    // Unused slots and budget grants go back before drip takes stock, best
    // effort: a keeper held up by a hung server is not waited for beyond a
    // short bound, and not at all after a second signal.
    let leaving = || shared.stops.leaving();
    let share_error = share
        .as_mut()
        .and_then(|s| s.finish(shared::GIVE_BACK_WAIT, &leaving))
        .or_else(|| budget_error(&config, &books));
    // Every book's grants go back at once, waited for together.
    let given_back_by = std::time::Instant::now() + shared::GIVE_BACK_WAIT;
    for book in &books {
        book.leave();
    }
    for book in &books {
        book.given_back(given_back_by, &leaving);
    }
    let ending = finish(&config, &shared, &ui, monitor, report, write_error);
    if let Some(control) = control {
        control.finish();
    }
    if let Some(follower) = follower {
        follower.finish();
    }
    let ending = metrics_at_exit(&shared, metrics, ending);
    let ending = first_error(ending, share_error, fatal)?;
    Ok(jobs_outcome(&config, &shared, ending))
}

/// The most an input read on the main thread may hold, in bytes (a
/// pipe's default size).
const AT_HAND: usize = 64 * 1024;

/// Whether the input may be read to its end on the main thread, before
/// the writer starts, sparing a one-record run the reader's thread: stdin
/// alone, a pipe whose writers are all gone holding at most [`AT_HAND`]
/// bytes, no more than the bucket takes (records, each at least a byte,
/// and bytes), so that reading never waits, for input or for room. Not
/// with jobs, limits per key or `--share`, where records may wait for
/// more than room.
fn input_at_hand(config: &Config) -> bool {
    use std::os::fd::AsFd;
    if config.inputs != [Input::Stdin]
        || config.jobs.is_some()
        || config.key.is_some()
        || config.share.is_some()
    {
        return false;
    }
    let Some(bytes) = crate::platform::descriptors::ended_pipe(std::io::stdin().as_fd()) else {
        return false;
    };
    bytes <= AT_HAND
        && bytes <= config.capacity
        && config.capacity_bytes.map_or(true, |most| bytes <= most)
}

/// How long a run may go without the monitor thread: a signal, a client
/// of the control socket or a reader of stdout gone away waits at most
/// this long to be seen (the signal in its pipe, the client in the
/// socket's queue). A one-record run (`echo x | drip -r inf`) ends well
/// within it and never starts the thread: 0.1 ms of its 1 ms.
const QUICK_RUN: Duration = Duration::from_millis(5);

/// Whether the run is over but for the writer's last look, waiting up to
/// `limit` for it: the input read to its end and nothing left to wait
/// for, nor to write unless `never_waits` (stdout takes a write at once:
/// a file, the null device). Woken as the writer is (the reader's
/// arrivals, its end, a stop); `false` at the first records to pace, or
/// to write where a write may wait, as the writer then has work that may
/// take long.
fn ended_within(shared: &Shared, limit: Duration, never_waits: bool) -> bool {
    let until = Instant::now() + limit;
    let mut st = shared.lock();
    loop {
        let queued = !st.adm.bucket().is_empty()
            || (st.adm.outbox_len() > 0 && !never_waits)
            || st.adm.next_event().is_some()
            || st.reading.parked.is_some();
        if queued {
            return false;
        }
        if st.reading.done {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        st.writing.asleep = true;
        st = shared.data_ready.wait_timeout(st, left).unpoisoned().0;
        st.writing.asleep = false;
    }
}

/// The keepers of `--share` (its limits' and each shared `--budget`'s)
/// wake the writer of `shared`, and stop it; `shared` shows the share's
/// counters.
fn wake_from_share(
    shared: &Arc<Shared>,
    share: Option<&shared::Handle>,
    books: &[Arc<shared::budget::Book>],
) {
    for book in books {
        book.set_wake(Arc::from(notify_from_share(shared)));
    }
    if let Some(share) = share {
        share.set_notify(notify_from_share(shared));
        let _ = shared.share.set(share.counters());
    }
}

/// The global limits and the limit per key in force, as given at the
/// start; under `--share`, its keepers keep them the shared ones as
/// `drip ctl` changes them on any drip of the NAME.
fn limits_in_force(config: &Config, share: Option<&shared::Handle>) -> (InForce, KeyInForce) {
    let in_force: InForce = Arc::new(Mutex::new(config.limits.clone()));
    let key_limit = config.key.as_ref();
    let key_limit = key_limit.map(|k| Limit::records(k.rate, Some(k.burst)));
    let key_in_force = Arc::new(Mutex::new(key_limit));
    if let Some(share) = share {
        share.follow_in_force(&in_force, &key_in_force);
    }
    (in_force, key_in_force)
}

/// What stopped a shared `--budget`'s keeper, if anything did: its count
/// unreachable under `--share-on-error fail`, or unusable.
fn budget_error(config: &Config, books: &[Arc<shared::budget::Book>]) -> Option<anyhow::Error> {
    let name = config.share.as_ref()?.target.name();
    books.iter().find_map(|b| b.failed(name))
}

/// How drip ends: the ending's own error first, then the share's (a state
/// that failed at the end), then a job's fatal error.
fn first_error(
    ending: Result<Ending>,
    share_error: Option<anyhow::Error>,
    fatal: Option<ExecError>,
) -> Result<Ending> {
    let ending = match (ending, share_error) {
        (Ok(_), Some(e)) => return Err(e),
        (ending, _) => ending?,
    };
    match fatal {
        Some(e) => Err(e.into()),
        None => Ok(ending),
    }
}

/// How often a FIFO drip writes to is tried again while it has no reader.
const FIFO_RETRY: Duration = Duration::from_millis(25);

/// Opening drip's own files (`--stats-json`, the dead letter, the joblog)
/// before the monitor runs: while a FIFO among them has no reader, a
/// stopping signal is waited for, [`FIFO_RETRY`] at a time; one that
/// comes gives the opening up.
struct Opening {
    listening: Listening,
    caught: Option<i32>,
}

impl Opening {
    fn new(listening: Listening) -> Opening {
        Opening {
            listening,
            caught: None,
        }
    }

    /// Whether to give up a FIFO with no reader: a signal came (waits up
    /// to [`FIFO_RETRY`] for one).
    fn give_up(&mut self) -> bool {
        if self.caught.is_none() {
            self.caught = self.listening.wait_signal(FIFO_RETRY);
        }
        self.caught.is_some()
    }

    /// Stop drip, as the monitor does at a first signal, if one came while
    /// a file was opened; the handlers, for the monitor.
    fn stop_if_signalled(self, shared: &Shared, drain: bool) -> Listening {
        if let Some(signo) = self.caught {
            shared.stops.first(signo);
            shared.stop(drain);
        }
        self.listening
    }
}

/// The `--stats-json` file, created (truncated) now; none when it is a
/// FIFO no one read before `give_up` said so.
///
/// # Errors
/// It cannot be created.
fn stats_file(
    config: &Config,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<Option<BufWriter<File>>> {
    let Some(path) = &config.stats_json else {
        return Ok(None);
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    let file = crate::sys::open_to_write(&options, path, give_up)
        .with_context(|| format!("--stats-json {}", path.display()))?;
    Ok(file.map(BufWriter::new))
}

/// With `--exec`, the gate the runner closes, slows and narrows, at the
/// configured rate (and key rate). With `--budget`, it lets records go no
/// faster than job slots free up ([`GateControl::count_slots`]), so a
/// record counts against a budget's window when it starts.
fn gate(config: &Config) -> Option<Arc<GateControl>> {
    config.jobs.as_ref().map(|jobs| {
        let key_rate = config
            .key
            .as_ref()
            .map_or(f64::INFINITY, |k| k.rate.per_second());
        let gate = GateControl::new(config.records_per_second(), key_rate);
        if !config.budgets.is_empty() {
            gate.count_slots(jobs.jobs);
        }
        Arc::new(gate)
    })
}

/// Where records go.
enum Way {
    /// Written to stdout.
    Stdout(Box<dyn Write + Send>),
    /// A job each (`--exec`).
    Jobs(Arc<Pool>),
}

/// Where records go: with `--exec`, a pool of jobs (their output to
/// `out`); else `out` itself.
///
/// # Errors
/// The pool cannot be made (its joblog or headers directory).
fn sink(
    config: &Config,
    shared: &Arc<Shared>,
    gate: Option<Arc<GateControl>>,
    out: Box<dyn Write + Send>,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<Way> {
    let (Some(jobs), Some(gate)) = (&config.jobs, gate) else {
        return Ok(Way::Stdout(out));
    };
    let rate = (config.records_per_second(), config.delimiter);
    let key = config.key.as_ref().map(|k| k.spec.clone());
    let budgets = crate::jobs::quota::Budgets::of(config.cost.clone());
    let pool = Pool::new(
        Arc::clone(shared),
        jobs.clone(),
        gate,
        out,
        rate,
        (key, budgets),
        give_up,
    )?;
    Ok(Way::Jobs(pool))
}

/// drip's own output files, created by now: an input that is one of them
/// is refused as it is read.
fn own_files(config: &Config) -> Vec<OwnFile> {
    let resume = config.jobs.as_ref().and_then(|j| j.resume.as_deref());
    let mut own = OwnFile::of_all(&[
        ("--dead-letter", config.dead_letter.as_deref()),
        ("--stats-json", config.stats_json.as_deref()),
        ("--resume", resume),
    ]);
    own.extend(
        config
            .metrics
            .as_deref()
            .and_then(|path| OwnFile::replaced("--metrics", path)),
    );
    own
}

/// The `--metrics` figures at exit, once the books are closed; a failed
/// write is the run's error unless it already has one.
fn metrics_at_exit(
    shared: &Shared,
    metrics: Option<MetricsFile>,
    ending: Result<Ending>,
) -> Result<Ending> {
    let metrics_error = metrics.and_then(|m| m.write(shared, &shared.summary()).err());
    match (ending, metrics_error) {
        (Ok(_), Some(e)) => Err(e),
        (ending, _) => ending,
    }
}

/// Refuse an input that is a file drip empties or replaces as it starts
/// (`--stats-json`, `--joblog` without `--resume`, `--metrics`), before any
/// is written: not a byte of the input is lost. (One drip appends to,
/// `--dead-letter` or `--resume`'s joblog, is refused as it is read.)
///
/// # Errors
/// `NAME: input file is the FLAG file` (exit status 1).
fn inputs_kept(config: &Config) -> Result<()> {
    let joblog = config
        .jobs
        .as_ref()
        .filter(|j| j.resume.is_none())
        .and_then(|j| j.joblog.as_deref());
    let emptied = [
        ("--stats-json", config.stats_json.as_deref()),
        ("--joblog", joblog),
        ("--metrics", config.metrics.as_deref()),
    ];
    match crate::input::emptied_at_start(&config.inputs, &emptied) {
        Some((name, flag)) => anyhow::bail!("{name}: input file is the {flag} file"),
        None => Ok(()),
    }
}

/// When drip started, seconds since the epoch.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `--metrics`: the file, written once now so a path that cannot be
/// written stops drip before any record moves.
fn metrics_file(
    config: &Config,
    shared: &Shared,
    in_force: &InForce,
) -> Result<Option<MetricsFile>> {
    let Some(path) = &config.metrics else {
        return Ok(None);
    };
    let file = MetricsFile {
        path: path.clone(),
        base: crate::metrics::Gauges {
            pid: std::process::id(),
            name: config.name.clone(),
            started: unix_now(),
            ..Default::default()
        },
        limits: Arc::clone(in_force),
    };
    file.write(shared, &shared.summary())?;
    Ok(Some(file))
}

/// The steering of `drip ctl` and `--schedule`.
fn steering(
    config: &Config,
    shared: &Arc<Shared>,
    ui: &Arc<Mutex<Ui>>,
    (in_force, share): ((InForce, KeyInForce), Option<(String, shared::Relimiter)>),
) -> Steering {
    Steering::new(
        Arc::clone(shared),
        Arc::clone(ui),
        config.name.clone(),
        in_force,
        share,
    )
    .with_cost(config.cost.clone())
}

/// What a run starts once it needs it (see [`QUICK_RUN`]): the monitor
/// thread, and the control socket (unless `--no-control`), whose thread
/// the monitor's starts.
struct Later {
    monitor: Monitor,
    /// The control socket's steering, until the socket is made.
    steering: Option<Arc<Steering>>,
    control: Option<Server>,
}

impl Later {
    /// Make the control socket and start the monitor, if not done yet.
    /// After the signal handlers: whatever way drip leaves from here,
    /// the socket goes.
    ///
    /// # Errors
    /// The socket cannot be made, or the monitor started.
    fn start(&mut self, config: &Config) -> Result<()> {
        if let Some(steering) = self.steering.take() {
            if let Some((server, accept)) = start_control(config, steering)? {
                self.monitor.set_control(accept);
                self.control = Some(server);
            }
        }
        self.monitor.start_now()
    }
}

/// The control sockets' directory, made if missing and checked (unless
/// `--no-control`): drip refuses to start when it is not this user's
/// alone.
fn control_dir(config: &Config) -> Result<()> {
    if config.control {
        let dir = crate::control::socket_dir();
        crate::control::ensure_dir(&dir).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The control socket for `drip ctl`, unless `--no-control`: bound, and
/// its thread to be started.
fn start_control(
    config: &Config,
    steering: Arc<Steering>,
) -> Result<Option<(Server, crate::control::server::Accept)>> {
    if !config.control {
        return Ok(None);
    }
    let server = Server::start(config.name.as_deref(), steering)?;
    Ok(Some(server))
}

/// `--schedule`: its row in force now, and the thread that follows it.
fn follow_schedule(config: &Config, steering: &Arc<Steering>) -> Result<Option<Follower>> {
    let Some(table) = &config.schedule else {
        return Ok(None);
    };
    let base = config
        .limits
        .iter()
        .filter(|l| l.unit == Unit::Records)
        .copied()
        .collect();
    let follower = Follower::start(Arc::clone(steering), table.clone(), base)
        .context("starting the schedule's thread")?;
    Ok(Some(follower))
}

/// The display (progress, the summary's lines) for `config`.
fn ui(config: &Config) -> Arc<Mutex<Ui>> {
    let ui = Ui::new(
        config.progress,
        config.capacity,
        input_size(&config.inputs),
        config.records_per_second(),
        config.jobs.is_some(),
    );
    let rows = config.schedule.as_ref().map_or(Vec::new(), |t| {
        t.rows().iter().map(|r| r.text.clone()).collect()
    });
    Arc::new(Mutex::new(
        ui.sized(config.capacity_for.as_ref(), config.capacity_bytes)
            .with_rows(rows),
    ))
}

/// What the reader does to each read for `config`: `--cost`'s check,
/// `--key host`'s check, and `--resume`'s records done before (read from
/// its joblog now); with `--exec` reading stdin, a file the command was
/// given after the record, to be named.
///
/// # Errors
/// The `--resume` joblog exists but cannot be read.
fn screen(config: &Config) -> Result<reader::Screen> {
    let resume = config.jobs.as_ref().and_then(|j| j.resume.as_deref());
    Ok(reader::Screen {
        cost: config.cost.clone(),
        host: config.key.as_ref().is_some_and(|k| k.spec.is_host()),
        done: resume.map(Done::read).transpose()?,
        delimiter: config.delimiter,
        exec_file: config
            .jobs
            .as_ref()
            .filter(|_| config.inputs.iter().any(|i| matches!(i, Input::Stdin)))
            .and_then(|j| reader::file_after_the_record(&j.command)),
    })
}

/// The splitter for `config`: with `--oversize skip`, oversized records go
/// to the dead letter as they are read, after every record that left
/// before them.
fn splitter(config: &Config, shared: &Arc<Shared>) -> Splitter {
    let splitter = Splitter::new(config.delimiter, config.max_record, config.capacity_bytes);
    if config.oversize != Oversize::Skip {
        return splitter;
    }
    let shared = Arc::clone(shared);
    splitter.skipping(Box::new(move |bytes, piece| {
        shared
            .dead_backlog
            .wait_for_room(&|| shared.lock().stop.reading);
        let mut st = shared.lock();
        st.ledger.skip_piece(bytes.len(), piece);
        st.flush_dead();
        st.dead.piece(bytes, piece);
    }))
}

/// With `--exec`, a run that otherwise finished fails (123) when a record
/// failed or passed its deadline. Records expire at the shorter of
/// `--deadline` and `--max-wait`: only a deadline's expiry is a failure.
fn jobs_outcome(config: &Config, shared: &Shared, ending: Ending) -> Ending {
    let counts = shared.lock().ledger.counts();
    let deadline = config.jobs.as_ref().and_then(|j| j.deadline);
    let deadline_passed = counts.expired > 0
        && deadline.is_some_and(|d| !matches!(config.max_wait, Some(w) if w < d));
    if ending == Ending::Finished && (counts.failed > 0 || deadline_passed) {
        return Ending::JobsFailed;
    }
    ending
}

/// Run the writer on this thread, where a stop can interrupt it.
fn write(shared: &Shared, sink: &mut dyn writer::Sink) -> Option<std::io::Error> {
    sys::install_interrupt_handler();
    shared.stops.set_writer(sys::this_thread());
    let write_error = writer::write_loop(shared, sink);
    shared.stops.set_writer(0);
    write_error
}

/// Tell the summary: on stderr (`--stats`, or after the display), and in
/// the `--stats-json` file. After a second signal (`hurried`) drip leaves
/// without a summary on stderr; a stalled stderr gets a moment to take it,
/// never more. After a signal (`stopped`) the terminal is left on a clean
/// line ([`Ui::stopped`]). Returns the stats file's write error, if any.
fn tell(
    config: &Config,
    ui: &Mutex<Ui>,
    (stats_file, dropped): (Option<BufWriter<File>>, u64),
    summary: &Summary,
    (stopped, hurried): (bool, bool),
) -> Option<anyhow::Error> {
    let mut ui = lock_ui(ui);
    let summarize = !hurried && (config.stats || ui.showing_progress());
    let wanted = summarize || dropped > 0 || ui.showing_progress() || stopped;
    if wanted && stalls::stderr_ready(stalls::AT_EXIT) {
        if stopped {
            ui.stopped();
        } else {
            ui.finish();
        }
        if summarize {
            ui.line(&summary.text());
        }
        if dropped > 0 {
            ui.message(&stalls::note(dropped));
        }
    }
    let (Some(mut file), Some(path)) = (stats_file, &config.stats_json) else {
        return None;
    };
    let result = writeln!(file, "{}", summary.json()).and_then(|()| file.flush());
    result
        .err()
        .map(|e| anyhow::Error::from(e).context(format!("--stats-json {}", path.display())))
}

/// Take stock once every thread but the monitor has stopped: what is left
/// is undelivered; print the summary (with `--share`'s counters, if any);
/// pick the outcome.
fn finish(
    config: &Config,
    shared: &Shared,
    ui: &Mutex<Ui>,
    monitor: Monitor,
    report: ReadReport,
    write_error: Option<std::io::Error>,
) -> Result<Ending> {
    // The reader may have met the error, writing directly.
    let write_error = write_error.or_else(|| shared.lock().stop.write_error.take());
    let (overflow, budget, mut dead) = {
        let mut st = shared.lock();
        st.drain_undelivered();
        st.flush_dead();
        let counts = st.ledger.counts();
        debug_assert_eq!(counts.read, counts.settled(), "{counts:?}");
        let none = DeadLetter::none(config.delimiter);
        (
            st.stop.overflow.take(),
            st.stop.budget.take(),
            std::mem::replace(&mut st.dead, none),
        )
    };
    // Without the lock: the monitor (signals, stats) goes on meanwhile.
    let dead_error = dead.finish();
    let told = monitor.finish(shared);
    let (signal, hurried) = shared.stops.signal();
    let summary = shared.summary();
    let stats_error = tell(config, ui, told, &summary, (signal.is_some(), hurried));
    if let Some(e) = write_error {
        // The reader went away: a pipe's (EPIPE) or a socket's (ECONNRESET).
        if !matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ) {
            return Err(anyhow::Error::from(e).context("stdout"));
        }
    }
    if let Some(e) = dead_error.or(stats_error) {
        return Err(e);
    }
    if let Some(overflow) = overflow {
        return Err(overflow.into());
    }
    if let Some(budget) = budget {
        return Err(budget.into());
    }
    if let Some(n) = signal {
        return Ok(Ending::Signal(n));
    }
    if let Some(e) = report.record_error {
        return Err(e.into());
    }
    if report.failed_inputs > 0 {
        return Ok(Ending::InputFailed);
    }
    Ok(Ending::Finished)
}
