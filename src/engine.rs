//! The wiring: builds the pure parts from the configuration, starts the
//! reader, monitor and writer threads, and turns how they ended into an
//! [`Ending`] or an error. `docs/architecture.md` draws the whole machine.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::admission::Admission;
use crate::bucket::Bucket;
use crate::cli::{Config, Input};
use crate::deadletter::DeadLetter;
use crate::input::{Oversize, OwnFile, ReadReport, Splitter};
use crate::keyed::Keyed;
use crate::monitor::Monitor;
use crate::progress::{lock_ui, Ui};
use crate::schedule::Limits;
use crate::state::{Clock, OverflowError, Shared, State};
use crate::writer::{self, Stdout};
use crate::{output, reader, sys};

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: a runtime error (unreadable input, oversized record, failed write).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: a usage error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the bucket overflowed under `--overflow fail`.
pub const EXIT_OVERFLOW: i32 = 3;

/// Map an error from [`run`] to drip's exit status.
pub fn exit_status(err: &anyhow::Error) -> i32 {
    if err.downcast_ref::<OverflowError>().is_some() {
        EXIT_OVERFLOW
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
}

impl Ending {
    /// The exit status for this ending.
    pub fn status(self) -> i32 {
        match self {
            Ending::Finished => EXIT_OK,
            Ending::InputFailed => EXIT_ERROR,
            Ending::Signal(n) => 128 + n,
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
    use std::os::fd::{AsFd, AsRawFd};
    let dup = || std::io::stdout().as_fd().try_clone_to_owned();
    let out = File::from(dup().context("stdout")?);
    let out_fd = out.as_raw_fd();
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

/// The shared state for `config`: admission over the configured limits.
fn shared_state(config: &Config, out_fd: Option<std::os::fd::RawFd>) -> Result<Shared> {
    let dead = DeadLetter::open(config.dead_letter.as_deref(), config.delimiter)?;
    let schedule = Limits::new(&config.limits);
    let unpaced = config.limits.is_empty() && config.key.is_none();
    let bucket = Bucket::new(config.capacity, config.capacity_bytes, config.overflow);
    let max_wait_ns = config
        .max_wait
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut adm = Admission::new(bucket, Box::new(schedule), max_wait_ns);
    if let Some(key) = &config.key {
        let keyed = Keyed::new(
            key.clone(),
            config.delimiter,
            config.capacity,
            config.capacity_bytes,
        );
        adm = adm.with_keys(keyed);
    }
    Ok(Shared {
        state: Mutex::new(State::new(adm, dead, config.dead_letter.is_some())),
        data_ready: Condvar::new(),
        space_ready: Condvar::new(),
        stop_now: AtomicBool::new(false),
        in_flight_written: AtomicUsize::new(0),
        waker: sys::Waker::new().context("creating a pipe")?,
        clock: Clock(Instant::now()),
        unpaced,
        direct: out_fd.filter(|_| unpaced).and_then(output::Direct::new),
        first_signal: AtomicI32::new(0),
        writer_thread: Mutex::new(0),
    })
}

/// `out_fd`: the descriptor `out` writes to (open while `out` lives), for
/// writing to it directly when unpaced. `watch_output`: a duplicate of it,
/// watched for its reader going away.
fn run_watching(
    config: Config,
    out: Box<dyn Write + Send>,
    out_fd: Option<std::os::fd::RawFd>,
    watch_output: Option<std::os::fd::OwnedFd>,
) -> Result<Ending> {
    let stats_file = match &config.stats_json {
        Some(path) => Some(
            File::create(path)
                .with_context(|| format!("--stats-json {}", path.display()))
                .map(BufWriter::new)?,
        ),
        None => None,
    };
    let shared = Arc::new(shared_state(&config, out_fd)?);
    let ui = Arc::new(Mutex::new(Ui::new(
        config.progress,
        config.capacity,
        input_size(&config.inputs),
        config.records_per_second(),
    )));
    let monitor = Monitor::start(
        Arc::clone(&shared),
        Arc::clone(&ui),
        config.drain,
        config.stats_interval,
        stats_file,
        watch_output,
    )?;
    let mut splitter = Splitter::new(config.delimiter, config.max_record, config.capacity_bytes);
    if config.oversize == Oversize::Skip {
        // Oversized records go to the dead letter as they are read, after
        // every record that left before them.
        let shared = Arc::clone(&shared);
        splitter = splitter.skipping(Box::new(move |bytes, piece| {
            let mut st = shared.lock();
            st.ledger.skip_piece(bytes.len(), piece);
            st.flush_dead();
            st.dead.piece(bytes, piece);
        }));
    }
    // Created by now: an input that is one of them is refused.
    let own = OwnFile::of_config(&config);
    let reader = reader::spawn(
        Arc::clone(&shared),
        Arc::clone(&ui),
        config.inputs.clone(),
        own,
        splitter,
    )?;
    let write_error = write(&shared, out);
    // Whatever ended the writer, reading stops too.
    shared.stop(false);
    let report = reader.join().unwrap_or_default();
    finish(&config, &shared, &ui, monitor, report, write_error)
}

/// Run the writer on this thread, where a stop can interrupt it.
fn write(shared: &Shared, out: Box<dyn Write + Send>) -> Option<std::io::Error> {
    sys::install_interrupt_handler();
    let set_writer = |id| {
        *shared
            .writer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = id
    };
    set_writer(sys::this_thread());
    let write_error = writer::write_loop(shared, &mut Stdout(out));
    set_writer(0);
    write_error
}

/// Take stock once every thread but the monitor has stopped: what is left
/// is undelivered; print the summary; pick the outcome.
fn finish(
    config: &Config,
    shared: &Shared,
    ui: &Mutex<Ui>,
    monitor: Monitor,
    report: ReadReport,
    write_error: Option<std::io::Error>,
) -> Result<Ending> {
    // The reader may have met the error, writing directly.
    let write_error = write_error.or_else(|| shared.lock().write_error.take());
    let (overflow, dead_error) = {
        let mut st = shared.lock();
        st.drain_undelivered();
        st.flush_dead();
        let counts = st.ledger.counts();
        debug_assert_eq!(counts.read, counts.settled(), "{counts:?}");
        (st.overflow.take(), st.dead.finish())
    };
    let signal = match shared.first_signal.load(Ordering::SeqCst) {
        0 => None,
        n => Some(n),
    };
    let summary = shared.summary();
    let stats_file = monitor.finish();
    lock_ui(ui).finish();
    let ui = lock_ui(ui);
    if config.stats || ui.showing_progress() {
        ui.message(&summary.line());
        if let Some(keys) = summary.keys_line() {
            ui.message(&keys);
        }
    }
    let mut stats_error = None;
    if let (Some(mut file), Some(path)) = (stats_file, &config.stats_json) {
        let result = writeln!(file, "{}", summary.json()).and_then(|()| file.flush());
        if let Err(e) = result {
            stats_error =
                Some(anyhow::Error::from(e).context(format!("--stats-json {}", path.display())));
        }
    }
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
