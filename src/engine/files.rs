//! drip's own files: an input that is one of them refused, the
//! `--stats-json` and `--metrics` files opened (a FIFO waited for, a
//! signal giving it up), and the metrics written at exit.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::Ending;
use crate::cli::Config;
use crate::input::OwnFile;
use crate::monitor::{Listening, MetricsFile};
use crate::schedule::InForce;
use crate::state::Shared;

/// How often a FIFO drip writes to is tried again while it has no reader.
const FIFO_RETRY: Duration = Duration::from_millis(25);

/// Opening drip's own files (`--stats-json`, the dead letter, the joblog)
/// before the monitor runs: while a FIFO among them has no reader, a
/// stopping signal is waited for, [`FIFO_RETRY`] at a time; one that
/// comes gives the opening up.
pub(super) struct Opening {
    listening: Listening,
    caught: Option<i32>,
}

impl Opening {
    pub(super) fn new(listening: Listening) -> Opening {
        Opening {
            listening,
            caught: None,
        }
    }

    /// Whether to give up a FIFO with no reader: a signal came (waits up
    /// to [`FIFO_RETRY`] for one).
    pub(super) fn give_up(&mut self) -> bool {
        if self.caught.is_none() {
            self.caught = self.listening.wait_signal(FIFO_RETRY);
        }
        self.caught.is_some()
    }

    /// Stop drip, as the monitor does at a first signal, if one came while
    /// a file was opened; the handlers, for the monitor.
    pub(super) fn stop_if_signalled(self, shared: &Shared, drain: bool) -> Listening {
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
pub(super) fn stats_file(
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

/// drip's own output files, created by now: an input that is one of them
/// is refused as it is read.
pub(super) fn own_files(config: &Config) -> Vec<OwnFile> {
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

/// Refuse an input that is a file drip empties or replaces as it starts
/// (`--stats-json`, `--joblog` without `--resume`, `--metrics`), before any
/// is written: not a byte of the input is lost. (One drip appends to,
/// `--dead-letter` or `--resume`'s joblog, is refused as it is read.)
///
/// # Errors
/// `NAME: input file is the FLAG file` (exit status 1).
pub(super) fn inputs_kept(config: &Config) -> Result<()> {
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
pub(super) fn metrics_file(
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

/// The `--metrics` figures at exit, once the books are closed; a failed
/// write is the run's error unless it already has one.
pub(super) fn metrics_at_exit(
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
