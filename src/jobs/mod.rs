//! Running a command per record (`--exec`): the command runner is a
//! [`crate::writer::Sink`] that starts one job per record released by the
//! schedule, at most `--jobs` at once, retries transient failures with
//! backoff and jitter, and listens to the server: an overload pauses every
//! start, or with `--key` the refused record's key only ([`gate`]), the
//! rate comes back gradually after the pause, and with `--adapt` it is
//! lowered for longer.
//!
//! - [`retry`] (pure): verdicts, backoff, `Retry-After`, AIMD;
//! - [`gate`] (pure): the schedule wrapper that pauses and spaces starts;
//! - `overload` (pure): the overload books and quota windows, in the gate;
//! - [`key_jobs`] (pure): each key's jobs against `--key-jobs`, in the gate;
//! - `attempt`: one attempt of one job (process group, timeout, output);
//! - `runner`: the sink the writer hands records to;
//! - `pool`: the pool of jobs, starting and settling records
//!   ([`crate::ledger::JobFate`]), the runner's face to the other threads;
//! - `slots`: the job slots and the one condition variable the waits sleep
//!   on; `groups`: the process groups, the warden and the second signal;
//! - [`warden`]: the process that ends the running jobs when drip is gone
//!   (`kill -9` too);
//! - `job`: one record's attempts, judged, and the waits between them;
//!   `room`: a job short of a resource to start waits for room;
//! - `hooks`: the per-record features (`--share-jobs`, `--key-jobs`, the
//!   quotas' pacing, `--settle`, `--keep-order`, the joblog), each told of
//!   the moments of a job's life it needs;
//! - [`joblog`]: `--joblog` lines;
//! - [`order`]: `--keep-order`, the outputs held until their turn;
//! - [`resume`]: `--resume`, the records done in earlier runs;
//! - [`quota`] (pure): the quota a server announces in its headers, and the
//!   pace that makes it last.

mod attempt;
pub mod gate;
mod groups;
mod hooks;
mod job;
pub mod joblog;
pub mod key_jobs;
pub mod order;
mod overload;
mod parts;
mod pool;
pub mod quota;
pub mod resume;
pub mod retry;
mod room;
mod runner;
mod slots;
pub mod warden;

use std::path::PathBuf;
use std::time::Duration;

pub(crate) use crate::ledger::JobFate;
pub(crate) use parts::Records;
pub(crate) use pool::{Pool, RemoveHeaders};
pub(crate) use runner::Runner;

use retry::{Backoff, Policy};

/// Exit status: some records failed (or passed their `--deadline`).
pub const EXIT_FAILED: i32 = 123;

/// The command runner's configuration, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfig {
    /// The program and its arguments, `{}` where the record goes.
    pub command: Vec<String>,
    /// At most this many jobs at once (≥ 1).
    pub jobs: usize,
    /// The record goes on the job's stdin.
    pub record_on_stdin: bool,
    /// Retries after the first attempt.
    pub retries: u32,
    /// Which exit statuses are transient or overload.
    pub policy: Policy,
    /// The wait before a retry.
    pub backoff: Backoff,
    /// The longest an attempt may run.
    pub timeout: Option<Duration>,
    /// The longest a record may take from being read to its last attempt.
    pub deadline: Option<Duration>,
    /// Adapt the rate to overloads.
    pub adapt: bool,
    /// The joblog file.
    pub joblog: Option<PathBuf>,
    /// `--resume`: the joblog of earlier runs, appended to.
    pub resume: Option<PathBuf>,
    /// Pace from the quota announced in the headers file.
    pub quota_pacing: bool,
    /// `-q`: no notices on stderr (a malformed quota field is ignored
    /// without a word), only errors.
    pub quiet: bool,
    /// `--keep-order`: outputs in input order, at most this many records
    /// started ahead of the oldest not written out.
    pub keep_order: Option<usize>,
    /// `--share NAME`: where the job limits are shared, `--share-jobs`'
    /// and with `--key` each key's (every drip on the NAME holds them).
    pub share: Option<crate::shared::Target>,
    /// `--share-jobs N`: at most N jobs at once across every drip on the
    /// shared NAME.
    pub share_jobs: Option<u64>,
    /// `--key-jobs N`: at most N jobs of one key at once (with `--key`;
    /// under `--share`, across every drip on the NAME).
    pub key_jobs: Option<usize>,
    /// With `--key`: each key's jobs are counted, against `--key-jobs` or
    /// its row's JOBS column in the rate table (now, or when the table is
    /// read again).
    pub count_key_jobs: bool,
    /// `--settle`: each cost settled (its place among `--cost`'s costs)
    /// and the estimate read from a job's output for it.
    pub settle: Vec<(usize, crate::cost::Estimate)>,
}

/// The wait before a retry unless `--backoff` says otherwise.
pub(crate) const DEFAULT_BACKOFF: Backoff = Backoff {
    min_ns: 100_000_000,
    max_ns: 30_000_000_000,
};

/// A command that cannot be run at all: reported once, exit 127 (not
/// found) or 126 (not executable), as xargs does; or a job that could not
/// start for want of a resource ([`short_of_resources`]) however long it
/// waited: exit 1, a runtime error.
#[derive(Debug)]
pub struct ExecError {
    /// The program.
    pub program: String,
    /// What went wrong.
    pub error: std::io::Error,
}

impl ExecError {
    /// 127 when the program was not found; 1 when a resource ran out, or
    /// for an error of drip's own (a job's output file: an error of kind
    /// `Other`, which no system error is); 126 otherwise.
    pub fn status(&self) -> i32 {
        if self.error.kind() == std::io::ErrorKind::NotFound {
            127
        } else if short_of_resources(&self.error) || self.error.kind() == std::io::ErrorKind::Other
        {
            1
        } else {
            126
        }
    }
}

/// Whether `error` says the system or drip ran out of a resource a job
/// needs to start (file descriptors: `EMFILE`, `ENFILE`; processes:
/// `EAGAIN`; memory: `ENOMEM`), which a job that ends gives back, rather
/// than that the command cannot run.
pub fn short_of_resources(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)
    )
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.error.kind() {
            std::io::ErrorKind::NotFound => "command not found".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ if short_of_resources(&self.error) => format!(
                "a job cannot start: {}",
                crate::sys::describe(&self.error).to_lowercase()
            ),
            _ => crate::sys::describe(&self.error),
        };
        write!(f, "--exec {}: {why}", self.program)
    }
}

impl std::error::Error for ExecError {}

/// Parse a number of job slots (`-j`, and `drip ctl TARGET -j`): 1 to 4096.
///
/// # Errors
/// Not a whole number, or out of that range: why, in words.
pub(crate) fn jobs_arg(text: &str) -> Result<usize, String> {
    whole_arg(text, 1, 4096).map(|n| n as usize)
}

pub(crate) fn window_arg(text: &str) -> Result<usize, String> {
    whole_arg(text, 1, 1_000_000).map(|n| n as usize)
}

pub(crate) fn retries_arg(text: &str) -> Result<u32, String> {
    whole_arg(text, 0, 1000).map(|n| n as u32)
}

/// A whole number from `least` to `most`: one out of range is named as
/// such, text that is none names the range.
fn whole_arg(text: &str, least: u64, most: u64) -> Result<u64, String> {
    crate::quantity::parse_whole(text, least, most).map_err(|e| match e {
        crate::quantity::WholeError::NotWhole => {
            format!("expected a whole number from {least} to {most}")
        }
        e => e.to_string(),
    })
}

/// A list of exit statuses (`--retry-on`, `--overload-on`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statuses(pub Vec<i32>);

/// Parse a list of exit statuses: `75`, `1,2,3`, `100-110`.
pub(crate) fn statuses_arg(text: &str) -> Result<Statuses, String> {
    const FORMS: &str = "expected exit statuses from 1 to 255 such as 75 or 1,75,100-110";
    let status = |t: &str| {
        t.trim()
            .parse::<i32>()
            .ok()
            .filter(|n| (1..=255).contains(n))
            .ok_or_else(|| FORMS.to_string())
    };
    let mut out = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (status(lo)?, status(hi)?);
                if lo > hi {
                    return Err(FORMS.into());
                }
                out.extend(lo..=hi);
            }
            None => out.push(status(part)?),
        }
    }
    Ok(Statuses(out))
}

/// Parse `--backoff MIN..MAX` (durations, 0 < MIN ≤ MAX).
pub(crate) fn backoff_arg(text: &str) -> Result<Backoff, String> {
    const FORMS: &str = "expected MIN..MAX such as 100ms..30s";
    let (min, max) = text.split_once("..").ok_or(FORMS)?;
    let ns = |t: &str| {
        job_duration_arg(t)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .map_err(|e| format!("{e}; {FORMS}"))
    };
    let (min_ns, max_ns) = (ns(min)?, ns(max)?);
    if min_ns > max_ns {
        return Err(format!("MIN is longer than MAX; {FORMS}"));
    }
    Ok(Backoff { min_ns, max_ns })
}

/// Parse a job duration: more than zero, at most a day less a second
/// (drip's clock in ms for poll(2) must hold it).
pub(crate) fn job_duration_arg(text: &str) -> Result<Duration, String> {
    if text.trim().starts_with('-') {
        return Err("a duration cannot be negative".into());
    }
    if text.trim().parse::<f64>().is_ok() {
        let n = text.trim();
        return Err(format!("a unit is needed, such as {n}s (or {n}ms, {n}m)"));
    }
    let d = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => "must be at most 24 days".into(),
        e => crate::quantity::duration_error(text, &e),
    })?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    if d > Duration::from_secs(24 * 3600 * 24) {
        return Err("must be at most 24 days".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_lists_and_ranges() {
        assert_eq!(statuses_arg("75"), Ok(Statuses(vec![75])));
        assert_eq!(statuses_arg("1,3-5"), Ok(Statuses(vec![1, 3, 4, 5])));
        assert!(statuses_arg("0").is_err());
        assert!(statuses_arg("256").is_err());
        assert!(statuses_arg("5-3").is_err());
        assert!(statuses_arg("x").is_err());
    }

    #[test]
    fn backoff_takes_min_and_max() {
        assert_eq!(
            backoff_arg("100ms..2s"),
            Ok(Backoff {
                min_ns: 100_000_000,
                max_ns: 2_000_000_000
            })
        );
        assert!(backoff_arg("2s..1s").is_err());
        assert!(backoff_arg("1s").is_err());
        assert!(backoff_arg("0s..1s").is_err());
    }

    #[test]
    fn jobs_and_retries_are_bounded() {
        assert_eq!(jobs_arg("8"), Ok(8));
        assert!(jobs_arg("0").is_err());
        assert!(jobs_arg("5000").is_err());
        assert_eq!(retries_arg("0"), Ok(0));
        assert!(retries_arg("-1").is_err());
        assert!(job_duration_arg("25d").is_err());
        assert_eq!(
            job_duration_arg("5"),
            Err("a unit is needed, such as 5s (or 5ms, 5m)".into())
        );
    }

    #[test]
    fn exec_statuses_follow_xargs() {
        let e = |kind| ExecError {
            program: "x".into(),
            error: std::io::Error::from(kind),
        };
        assert_eq!(e(std::io::ErrorKind::NotFound).status(), 127);
        assert_eq!(e(std::io::ErrorKind::PermissionDenied).status(), 126);
        let short = ExecError {
            program: "x".into(),
            error: std::io::Error::from_raw_os_error(libc::EMFILE),
        };
        assert_eq!(
            short.status(),
            1,
            "a resource error, not one of the command"
        );
        assert_eq!(
            short.to_string(),
            "--exec x: a job cannot start: too many open files"
        );
        assert_eq!(
            e(std::io::ErrorKind::NotFound).to_string(),
            "--exec x: command not found"
        );
    }
}
