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
//! - `attempt`: one attempt of one job (process group, timeout, output);
//! - `runner`: the pool of jobs, their accounting and the sink;
//! - [`joblog`]: `--joblog` lines;
//! - [`order`]: `--keep-order`, the outputs held until their turn;
//! - [`resume`]: `--resume`, the records done in earlier runs;
//! - [`quota`] (pure): the quota a server announces in its headers, and the
//!   pace that makes it last.

mod attempt;
pub mod gate;
pub mod joblog;
pub mod order;
pub mod quota;
pub mod resume;
pub mod retry;
mod runner;

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::Args;

pub(crate) use runner::{Pool, RemoveHeaders, Runner};

use retry::{Backoff, Policy, DEFAULT_RETRY_ON};

/// Exit status: some records failed (or passed their `--deadline`).
pub const EXIT_FAILED: i32 = 123;

/// The flags of the command runner.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Running a command per record")]
pub struct JobArgs {
    /// Run COMMAND once per record instead of writing records to stdout: {}
    /// in an argument is replaced by the record (delimiter excluded);
    /// without {}, the record is the last argument. {headers} is the path
    /// of a file for the job's HTTP response headers (curl -D {headers}):
    /// 429 and 503 there mean overload, 408, 500, 502 and 504 a transient
    /// failure, other statuses from 400 a final one. Jobs get DRIP_RECORD,
    /// DRIP_RECORD_ID (an idempotency key), DRIP_ATTEMPT and DRIP_HEADERS.
    /// No shell (write sh -c '...' for one). Takes the rest of the command
    /// line, or up to a ';'
    #[arg(long, value_name = "COMMAND", num_args = 1.., allow_hyphen_values = true, value_terminator = ";", value_hint = clap::ValueHint::CommandName)]
    pub exec: Vec<String>,

    /// At most N jobs at once (the rate limits starts; both hold) [default:
    /// 1]
    #[arg(short, long, value_name = "N", value_parser = jobs_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub jobs: Option<usize>,

    /// Give each job its record on stdin instead of as an argument
    #[arg(long)]
    pub record_on_stdin: bool,

    /// Retry a record up to N times after a transient failure or an overload
    /// [default: 0]
    #[arg(long, value_name = "N", value_parser = retries_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub retries: Option<u32>,

    /// Exit statuses that are transient failures, retried: a list such as
    /// 1,75,100-110 [default: 6,7,28,35,52,55,56,75: EX_TEMPFAIL and curl's
    /// could-not-connect, timeout and send/receive failures]
    #[arg(long, value_name = "STATUSES", value_parser = statuses_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub retry_on: Option<Statuses>,

    /// Exit statuses that mean the service is overloaded, as 429 and 503
    /// do: every start pauses (with --key, the starts of the record's key
    /// only), for Retry-After or else a backoff that grows with each
    /// overload in a row; then the rate comes back gradually, and the
    /// record is retried
    #[arg(long, value_name = "STATUSES", value_parser = statuses_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub overload_on: Option<Statuses>,

    /// Wait before retry n: a random time between 0 and min(MAX, MIN·2^n)
    /// (exponential backoff, full jitter) [default: 100ms..30s]
    #[arg(long, value_name = "MIN..MAX", value_parser = backoff_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub backoff: Option<Backoff>,

    /// Kill an attempt that runs longer than DURATION: TERM to its process
    /// group, KILL one second later
    #[arg(long, value_name = "DURATION", value_parser = job_duration_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    /// Give up on a record DURATION after it was read, counting its time in
    /// the bucket and all its attempts: it expires
    #[arg(long, value_name = "DURATION", value_parser = job_duration_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub deadline: Option<Duration>,

    /// Lower the rate on each overload (halve it) and raise it back on
    /// successes, never above the configured rate (with --key, the rate of
    /// the key refused)
    #[arg(long)]
    pub adapt: bool,

    /// Write one JSON line per attempt to FILE (truncated first; each line
    /// flushed as written): id (DRIP_RECORD_ID), number (DRIP_RECORD),
    /// record (a JSON string: valid UTF-8 as it is, a backslash as \\,
    /// each byte of invalid UTF-8 as \xNN), attempt (from 1), start_us
    /// (Unix time, whole microseconds), duration_us, exit or signal (null
    /// when not), timed_out, http_status (null when no headers file) and
    /// outcome: retry, overload, or the record's fate on its last line
    /// (succeeded, failed, expired, undelivered); error when the record
    /// could not be an argument (a NUL byte, over the system's limit: it
    /// fails alone)
    #[arg(long, value_name = "FILE", value_parser = clap::builder::PathBufValueParser::new().try_map(crate::output::not_stdout), value_hint = clap::ValueHint::FilePath)]
    pub joblog: Option<PathBuf>,

    /// Skip the records that succeeded in earlier runs logged in JOBLOG,
    /// matched by content (the hash in DRIP_RECORD_ID), not by place: a
    /// record that appears twice runs again unless it succeeded twice.
    /// Skipped records count as skipped_done. This run's lines are appended
    /// to JOBLOG (created if it does not exist yet: everything runs); a last
    /// line cut short by a killed run is passed over
    #[arg(long, value_name = "JOBLOG", value_parser = clap::builder::PathBufValueParser::new().try_map(crate::output::not_stdout), value_hint = clap::ValueHint::FilePath)]
    pub resume: Option<PathBuf>,

    /// Do not pace from the quota the server announces in the headers file
    /// (RateLimit, RateLimit-Policy, X-RateLimit-Remaining and
    /// X-RateLimit-Reset): by default, when a job writes {headers}, the
    /// remaining quota is spread over the time to its reset, the requests
    /// in flight counted against it, never faster than --rate
    #[arg(long)]
    pub no_quota_pacing: bool,

    /// Write each job's output in input order, whole, whatever order the
    /// jobs end in (stderr is passed on as it comes). Outputs wait for the
    /// records before them; at most --order-window records start ahead of
    /// the oldest one not written out, so a long job holds new starts back
    #[arg(short = 'k', long)]
    pub keep_order: bool,

    /// With --keep-order: how many records may start ahead of the oldest
    /// one whose output is not written out yet (each record's output is
    /// held in memory up to 64 KiB, in a temporary file beyond) [default:
    /// 1000]
    #[arg(long, value_name = "N", value_parser = window_arg, value_hint = clap::ValueHint::Other, allow_hyphen_values = true)]
    pub order_window: Option<usize>,
}

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
}

/// The wait before a retry unless `--backoff` says otherwise.
const DEFAULT_BACKOFF: Backoff = Backoff {
    min_ns: 100_000_000,
    max_ns: 30_000_000_000,
};

impl JobArgs {
    /// The runner's configuration, when `--exec` is given.
    ///
    /// # Errors
    /// A runner's flag without `--exec`, or a flag without the runner's flag
    /// it needs: what to say.
    pub fn config(&self) -> Result<Option<JobConfig>, String> {
        if self.order_window.is_some() && !self.keep_order {
            return Err("--order-window: only with --keep-order".into());
        }
        if let (Some(resume), Some(joblog)) = (&self.resume, &self.joblog) {
            // One file by any name: the same device and inode, or the
            // same name in the same directory (not created yet).
            if resume != joblog && !crate::input::same_file(resume, joblog) {
                return Err("--joblog: --resume appends to its JOBLOG; give one of them".into());
            }
        }
        if self.exec.is_empty() {
            return match self.stray_flag() {
                Some(flag) => Err(format!(
                    "{flag}: only with --exec (the command to run per record)"
                )),
                None => Ok(None),
            };
        }
        Ok(Some(JobConfig {
            command: self.exec.clone(),
            jobs: self.jobs.unwrap_or(1),
            record_on_stdin: self.record_on_stdin,
            retries: self.retries.unwrap_or(0),
            policy: Policy {
                retry_on: self
                    .retry_on
                    .clone()
                    .map_or_else(|| DEFAULT_RETRY_ON.to_vec(), |s| s.0),
                overload_on: self.overload_on.clone().map(|s| s.0).unwrap_or_default(),
            },
            backoff: self.backoff.unwrap_or(DEFAULT_BACKOFF),
            timeout: self.timeout,
            deadline: self.deadline,
            adapt: self.adapt,
            joblog: self.joblog.clone(),
            resume: self.resume.clone(),
            quota_pacing: !self.no_quota_pacing,
            quiet: false,
            keep_order: self
                .keep_order
                .then(|| self.order_window.unwrap_or(order::DEFAULT_WINDOW)),
        }))
    }

    /// The first runner's flag given, if any.
    fn stray_flag(&self) -> Option<&'static str> {
        [
            (self.jobs.is_some(), "--jobs"),
            (self.record_on_stdin, "--record-on-stdin"),
            (self.retries.is_some(), "--retries"),
            (self.retry_on.is_some(), "--retry-on"),
            (self.overload_on.is_some(), "--overload-on"),
            (self.backoff.is_some(), "--backoff"),
            (self.timeout.is_some(), "--timeout"),
            (self.deadline.is_some(), "--deadline"),
            (self.adapt, "--adapt"),
            (self.joblog.is_some(), "--joblog"),
            (self.keep_order, "--keep-order"),
            (self.resume.is_some(), "--resume"),
            (self.no_quota_pacing, "--no-quota-pacing"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

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
                crate::input::describe(&self.error).to_lowercase()
            ),
            _ => crate::input::describe(&self.error),
        };
        write!(f, "--exec {}: {why}", self.program)
    }
}

impl std::error::Error for ExecError {}

fn jobs_arg(text: &str) -> Result<usize, String> {
    whole_arg(text, 1, 4096).map(|n| n as usize)
}

fn window_arg(text: &str) -> Result<usize, String> {
    whole_arg(text, 1, 1_000_000).map(|n| n as usize)
}

fn retries_arg(text: &str) -> Result<u32, String> {
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
fn statuses_arg(text: &str) -> Result<Statuses, String> {
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
fn backoff_arg(text: &str) -> Result<Backoff, String> {
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
fn job_duration_arg(text: &str) -> Result<Duration, String> {
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
    fn status_lists_reach_the_policy() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "drip",
            "--retry-on",
            "1,75",
            "--overload-on",
            "9",
            "--exec",
            "true",
        ])
        .unwrap();
        let policy = cli.job_args.config().unwrap().unwrap().policy;
        assert_eq!(
            (policy.retry_on, policy.overload_on),
            (vec![1, 75], vec![9])
        );
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
