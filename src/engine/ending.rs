//! How a run ends: stock taken once the threads have stopped, the
//! summary told, and the outcome picked (the ending's own error first).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Mutex;

use anyhow::Result;

use super::Ending;
use crate::cli::Config;
use crate::deadletter::DeadLetter;
use crate::input::ReadReport;
use crate::jobs::ExecError;
use crate::monitor::Monitor;
use crate::progress::{lock_ui, Ui};
use crate::stalls;
use crate::state::Shared;
use crate::stats::Summary;

/// How drip ends: the ending's own error first, then the share's (a state
/// that failed at the end), then a job's fatal error.
pub(super) fn first_error(
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

/// With `--exec`, a run that otherwise finished fails (123) when a record
/// failed or passed its deadline. Records expire at the shorter of
/// `--deadline` and `--max-wait`: only a deadline's expiry is a failure.
pub(super) fn jobs_outcome(config: &Config, shared: &Shared, ending: Ending) -> Ending {
    let counts = shared.lock().ledger.counts();
    let deadline = config.jobs.as_ref().and_then(|j| j.deadline);
    let deadline_passed = counts.expired > 0
        && deadline.is_some_and(|d| !matches!(config.max_wait, Some(w) if w < d));
    if ending == Ending::Finished && (counts.failed > 0 || deadline_passed) {
        return Ending::JobsFailed;
    }
    ending
}

/// Tell the summary: on stderr (`--stats`, or after the display), and in
/// the `--stats-json` file. After a second signal (`hurried`) drip leaves
/// without a summary on stderr; a stalled stderr gets a moment to take it,
/// never more. After a signal (`stopped`) the terminal is left on a clean
/// line ([`Ui::stopped`]). Returns the stats file's write error, if any.
fn tell(
    config: &Config,
    ui: &Mutex<Ui>,
    stats_file: Option<BufWriter<File>>,
    dropped: u64,
    summary: &Summary,
    stopped: bool,
    hurried: bool,
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
pub(super) fn finish(
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
    let (stats_file, dropped) = monitor.finish(shared);
    let (signal, hurried) = shared.stops.signal();
    let summary = shared.summary();
    let stats_error = tell(
        config,
        ui,
        stats_file,
        dropped,
        &summary,
        signal.is_some(),
        hurried,
    );
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
