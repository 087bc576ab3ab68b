//! The wiring: builds the pure parts from the configuration, starts the
//! reader, monitor and writer threads, and turns how they ended into an
//! [`Ending`] or an error. `docs/architecture.md` draws the whole machine.

mod ending;
mod files;
mod later;
mod state;
mod steering;

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::cli::Config;
use crate::jobs::gate::GateControl;
use crate::jobs::{ExecError, Pool, Records, RemoveHeaders, Runner, EXIT_FAILED};
use crate::monitor::Listening;
use crate::shared;
use crate::state::{OverflowError, Shared};
use crate::sys;
use crate::writer::{self, Stdout};

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

/// `out_fd`: a duplicate of the descriptor `out` writes to, for writing to
/// it directly when unpaced. `watch_output`: another, watched for its
/// reader going away.
fn run_watching(
    config: Config,
    out: Box<dyn Write + Send>,
    out_fd: Option<std::os::fd::OwnedFd>,
    watch_output: Option<std::os::fd::OwnedFd>,
) -> Result<Ending> {
    files::inputs_kept(&config)?;
    // Read before anything is written (a `--resume` file that is no joblog is refused).
    let screen = steering::screen(&config)?;
    // Signals are caught from before `--share` first asks its state, and
    // before drip's own files are opened (a FIFO waits for its reader).
    // With `--key-rates FILE`, SIGHUP reads the table again instead.
    let reloads = config.key_table.as_ref().is_some_and(|t| t.file.is_some());
    let mut opening = files::Opening::new(Listening::install(reloads)?);
    let mut give_up = || opening.give_up();
    let stats_file = files::stats_file(&config, &mut give_up)?;
    // Running jobs, the reader never writes to stdout itself.
    let out_fd = out_fd.filter(|_| config.jobs.is_none());
    let room_fd = out_fd.as_ref().and_then(|fd| fd.try_clone().ok());
    let gate = gate(&config);
    let mut books = Vec::new();
    let (shared, mut share, row) =
        state::shared_state(&config, out_fd, gate.clone(), &mut give_up, &mut books)?;
    state::wake_from_share(&shared, share.as_ref(), &books);
    let way = sink(&config, &shared, gate, out, &mut give_up)?;
    let listening = opening.stop_if_signalled(&shared, config.drain);
    let pool = way.pool();
    // Whatever way drip leaves from here, the jobs' headers go.
    let _headers = pool.as_ref().map(|p| RemoveHeaders(Arc::clone(p)));
    let in_force = state::limits_in_force(&config, share.as_ref());
    let metrics = files::metrics_file(&config, &shared, &in_force.limits)?;
    let ui = steering::ui(&config);
    let (steering, follower) =
        steering::steer(&config, &shared, row, &ui, in_force, share.as_ref())?;
    let work = crate::monitor::Work {
        shared: Arc::clone(&shared),
        ui: Arc::clone(&ui),
        drain: config.drain,
        stats_every: config.stats_interval,
        stats_file,
        watch_output,
        metrics: metrics.clone(),
        control: None,
        reload: reloads.then(|| steering::reload(&steering)),
    };
    let (monitor, control, reader) = later::start(
        &config,
        &shared,
        listening,
        work,
        steering,
        screen,
        room_fd.as_ref(),
    )?;
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
    let share_error = state::give_back(&config, &shared, share.as_mut(), &books);
    let ending = ending::finish(&config, &shared, &ui, monitor, report, write_error);
    if let Some(control) = control {
        control.finish();
    }
    if let Some(follower) = follower {
        follower.finish();
    }
    let ending = files::metrics_at_exit(&shared, metrics, ending);
    let ending = ending::first_error(ending, share_error, fatal)?;
    Ok(ending::jobs_outcome(&config, &shared, ending))
}

/// With `--exec`, the gate the runner closes, slows and narrows, at the
/// configured rate (and key rate). With `--budget`, it lets records go no
/// faster than job slots free up ([`GateControl::count_slots`]), so a
/// record counts against a budget's window when it starts. With
/// `--key-jobs` or a rate table's JOBS column, it holds a key at its job
/// limit ([`GateControl::limit_key_jobs`], [`GateControl::key_job_rows`]).
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
        if let Some(n) = jobs.key_jobs {
            gate.limit_key_jobs(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some(key) = config.key.as_ref().filter(|_| jobs.count_key_jobs) {
            gate.key_job_rows(&key.rates);
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

impl Way {
    /// The pool of jobs, with `--exec`.
    fn pool(&self) -> Option<Arc<Pool>> {
        match self {
            Way::Jobs(pool) => Some(Arc::clone(pool)),
            Way::Stdout(_) => None,
        }
    }
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
    let records = Records {
        delimiter: config.delimiter,
        key: config.key.as_ref().map(|k| k.spec.clone()),
    };
    let budgets = crate::jobs::quota::CostBudgets::of(config.cost.clone());
    let pool = Pool::new(
        Arc::clone(shared),
        jobs.clone(),
        gate,
        out,
        records,
        budgets,
        give_up,
    )?;
    Ok(Way::Jobs(pool))
}

/// Run the writer on this thread, where a stop can interrupt it.
fn write(shared: &Shared, sink: &mut dyn writer::Sink) -> Option<std::io::Error> {
    sys::install_interrupt_handler();
    shared.stops.set_writer(sys::this_thread());
    let write_error = writer::write_loop(shared, sink);
    shared.stops.set_writer(0);
    write_error
}
