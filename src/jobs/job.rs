//! One record's job: its attempts, each judged as it ends (the verdict,
//! the quota its response announces, followed by a hook; an overload's
//! books), the waits between them (the backoff, a pause, a slot of the
//! schedule: a retry is a start too), and its joblog lines; the record's
//! fate ([`JobFate`]) at the end.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::attempt::{self, Ended, Files, Spec};
use super::gate::{GateControl, Scope};
use super::hooks::{AttemptEnd, AttemptStart, Heard, Hooks, Outcome};
use super::overload::{Overload, OverloadPolicy};
use super::parts::{ns, PoolParts, Who};
use super::retry::{parse_headers, Exit, Verdict};
use super::{ExecError, JobFate};
use crate::bucket::Segment;
use crate::sys::Unpoisoned;

/// After an attempt: the record is done, or tried again at a time (ns).
enum AfterAttempt {
    Done(JobFate),
    Retry(u64),
}

/// One record's job: the record, and what its attempts share.
pub(super) struct Job<'a> {
    pub(super) pool: &'a PoolParts,
    /// The pool's per-record features.
    hooks: &'a Hooks,
    /// The record, its delimiter included.
    pub(super) bytes: &'a [u8],
    /// The record as the joblog names it.
    who: Who<'a>,
    /// Whom an overload of it holds back.
    scope: Scope,
    /// Its headers file (read and removed after each attempt).
    headers_file: PathBuf,
    /// When it expires (`--deadline`), ns.
    deadline: Option<u64>,
}

/// Run `record`'s attempts, as record `number` of `pool` (whose
/// per-record features are `hooks`), until it is done, with the worker's
/// `files` (made if there are none); `rng` draws the backoffs. Its fate.
pub(super) fn run(
    pool: &PoolParts,
    hooks: &Hooks,
    number: u64,
    record: &Segment,
    files: &mut Option<Files>,
    rng: &mut fastrand::Rng,
) -> JobFate {
    let bytes = record.as_bytes();
    let body = pool.records.body_of(bytes);
    let id = attempt::record_id(place(record, number), body);
    let job = Job {
        pool,
        hooks,
        bytes,
        who: Who::new(number, &id, body),
        scope: pool.records.scope_of(bytes),
        headers_file: pool.headers.file(number),
        deadline: (pool.cfg.deadline).map(|d| record.arrived.saturating_add(ns(d))),
    };
    let cfg = &pool.cfg;
    let argv = attempt::command_line(&cfg.command, body, &job.headers_file, cfg.record_on_stdin);
    job.run(&argv, files, rng)
}

impl Job<'_> {
    /// Run the record's attempts (its command line `argv`) until it is
    /// done, with the worker's `files` (made if there are none:
    /// [`Job::job_files`]); `rng` draws the backoffs.
    fn run(
        &self,
        argv: &[OsString],
        files: &mut Option<Files>,
        rng: &mut fastrand::Rng,
    ) -> JobFate {
        let number = self.who.number;
        for n in 1u32.. {
            let now = self.pool.shared.clock.now();
            if self.pool.groups.leaving() {
                return self.unstarted(n, JobFate::Undelivered);
            }
            if self.deadline.is_some_and(|d| now >= d) {
                return self.unstarted(n, JobFate::Expired);
            }
            // In flight from its spending on: a response read before its
            // process starts counts it.
            let start = AttemptStart {
                number,
                record: self.bytes,
                deadline: self.deadline,
                scope: &self.scope,
            };
            if let Err(fate) = self.hooks.before_attempt(self.pool, &start) {
                return self.unstarted(n, fate);
            }
            let spec = Spec {
                argv,
                env: environment(number, self.who.id, n, &self.headers_file),
                limit: self.attempt_limit(now),
                noted_by: (self.pool.groups.warden()).filter(|_| self.hooks.notes_itself()),
            };
            let ended = match self.attempt(n, &spec, files) {
                Ok(ended) => ended,
                Err(fate) => return fate,
            };
            let files = files.as_mut().expect("the attempt ran with them");
            let end = AttemptEnd {
                number,
                record: self.bytes,
                headers: &self.headers_file,
                files,
                ended: &ended,
            };
            self.hooks.attempt_ended(self.pool, &end);
            let step = self.judge(n, &ended, files, rng);
            self.pass_on(files);
            let at = match step {
                AfterAttempt::Done(fate) => return fate,
                AfterAttempt::Retry(at) => at,
            };
            if let Err(fate) = self.retry_at(n + 1, at) {
                return fate;
            }
        }
        unreachable!("attempts are bounded by --retries")
    }

    /// Attempt `n`, a retry, waits until `at` (ns), and for its slot of the
    /// schedule; `Err` with the record's fate when it will not start.
    fn retry_at(&self, n: u32, at: u64) -> Result<(), JobFate> {
        let number = self.who.number;
        self.pool.gate.retry_waits(number, at, self.scope.clone());
        let _announced = RetryAnnounced(&self.pool.gate, number);
        if !self.sleep_until(at) {
            return Err(self.unstarted(n, JobFate::Undelivered));
        }
        self.take_slot().map_err(|fate| self.unstarted(n, fate))
    }

    /// Run attempt `n` as `spec` says, with the worker's `files` (made
    /// for the record when it has none): how it ended, or the record's
    /// fate when it could not start (drip leaving while it waited for room
    /// to start, an argument the system refuses, a command that cannot run).
    fn attempt(&self, n: u32, spec: &Spec, files: &mut Option<Files>) -> Result<Ended, JobFate> {
        let number = self.who.number;
        let group = std::cell::Cell::new(None);
        let started = self.with_room(|running| {
            let set_group = |pgid| {
                if let (Some(warden), None) = (self.pool.groups.warden(), spec.noted_by) {
                    warden.started(pgid);
                }
                group.set(Some(pgid));
                running();
                self.pool.slots.process_started();
                self.pool.groups.started(number, pgid);
            };
            let run = attempt::run(spec, self.job_files(files)?, &set_group);
            if run.as_ref().is_err_and(super::short_of_resources) {
                // Not held while the job waits to start.
                *files = None;
            }
            run
        });
        // Its process reaped (or lost to a failed wait): the warden's no more.
        if let (Some(warden), Some(pgid)) = (self.pool.groups.warden(), group.get()) {
            warden.ended(pgid);
        }
        match started {
            None => Err(self.unstarted(n, JobFate::Undelivered)),
            Some(Ok(ended)) => {
                self.pool.slots.process_ended();
                self.pool.groups.attempt_ended(number);
                Ok(ended)
            }
            Some(Err(error)) if not_an_argument(&error) => Err(self.not_an_argument(n, &error)),
            Some(Err(error)) => {
                let fate = self.cannot_run(&spec.argv[0], error);
                Err(self.unstarted(n, fate))
            }
        }
    }

    /// Attempt `n` ended as `ended` (its output in `files`): read its
    /// headers file, tell the features of the response (the quota it
    /// announces is followed), judge the attempt, and log it; the next
    /// step (`rng` draws the backoff). A job drip killed on its way out is
    /// not retried, and its record is undelivered.
    fn judge(&self, n: u32, ended: &Ended, files: &Files, rng: &mut fastrand::Rng) -> AfterAttempt {
        let number = self.who.number;
        let text = (self.pool.headers).take(&self.headers_file, number, self.pool.cfg.quiet);
        let response = text.as_deref().and_then(parse_headers);
        let read = Heard {
            number,
            scope: &self.scope,
            headers: text.as_deref(),
            retry_after: response.as_ref().is_some_and(|r| r.retry_after.is_some()),
        };
        self.hooks.answered(self.pool, &read);
        let verdict =
            self.pool
                .cfg
                .policy
                .classify(ended.exit, response.as_ref(), SystemTime::now());
        let mut step = if self.killed_leaving(ended) {
            AfterAttempt::Done(JobFate::Undelivered)
        } else {
            self.next_step(verdict, n, ended, rng)
        };
        // The fate is recorded before the joblog tells it, and before the
        // output goes out (a stalled stdout cannot make finished work
        // undelivered); a record drip abandoned on its way out before
        // then is undelivered, and logged so.
        if let AfterAttempt::Done(fate) = step {
            let pending = if self.hooks.holds_output() {
                0
            } else {
                files.pending()
            };
            if !self.pool.slots.decided(number, fate, pending) {
                step = AfterAttempt::Done(JobFate::Undelivered);
            }
        }
        let status = response.map(|r| r.status);
        self.log(n, (ended, status), &step, verdict);
        step
    }

    /// An attempt's output goes to stdout whole, unless a feature takes
    /// it (`--keep-order` holds it until the record's turn).
    fn pass_on(&self, files: &mut Files) {
        if (self.hooks).pass_on(self.pool, self.who.number, files) {
            return;
        }
        self.pool.passing(|give_up| {
            // drip's stdout is held only while the output is passed on.
            let mut out = self.pool.out.lock().unpoisoned();
            files.pass_on(&mut **out, self.pool.records.delimiter, give_up)
        });
    }

    /// The record is done as `fate` before its attempt `n` started: a
    /// stop, or its deadline, came while a retry waited for its backoff,
    /// a pause or its slot (or the command could no longer be run). From
    /// the second attempt on, its fate is recorded and then its joblog
    /// line written, for the attempt that never ran (no exit, no signal,
    /// 0 µs), so every record that started a job ends with a line giving
    /// its fate; a record drip abandoned on its way out is undelivered.
    /// Before the first attempt no job started: no line. Returns the fate.
    fn unstarted(&self, n: u32, fate: JobFate) -> JobFate {
        if n <= 1 {
            return fate;
        }
        let fate = if self.pool.slots.decided(self.who.number, fate, 0) {
            fate
        } else {
            JobFate::Undelivered
        };
        self.log_entry(n, None, fate.name(), None);
        fate
    }

    /// Whether drip killed this attempt on its way out: it ended by a
    /// signal while drip was leaving (a second signal sends every job's
    /// process group TERM, then KILL). Its job did not run to its end, so
    /// its record is undelivered; a job that exited, with any status, is
    /// judged by its status.
    fn killed_leaving(&self, ended: &Ended) -> bool {
        matches!(ended.exit, Exit::Signal(_)) && self.pool.groups.leaving()
    }

    /// How long an attempt started at `now` may run: `--timeout`, and what
    /// is left before the record's deadline.
    fn attempt_limit(&self, now: u64) -> Option<Duration> {
        let left = self
            .deadline
            .map(|d| Duration::from_nanos(d.saturating_sub(now)));
        [self.pool.cfg.timeout, left].into_iter().flatten().min()
    }

    /// Attempt `attempt` could not start because the record cannot
    /// be an argument: the record fails alone (said on stderr and in the
    /// joblog); the batch goes on.
    fn not_an_argument(&self, attempt: u32, error: &std::io::Error) -> JobFate {
        let why = match error.raw_os_error() {
            Some(libc::E2BIG) => "longer than the system's argument limit".to_string(),
            _ => crate::sys::describe(error),
        };
        eprintln!(
            "drip: --exec: record {}: cannot be an argument: {why}",
            self.who.number
        );
        self.log_entry(attempt, None, JobFate::Failed.name(), Some(&why));
        JobFate::Failed
    }

    /// The command cannot be started: reported once, and drip stops as
    /// the record settles ([`Pool::settle`]).
    fn cannot_run(&self, program: &OsString, error: std::io::Error) -> JobFate {
        let mut table = self.pool.slots.lock();
        if table.fatal.is_none() && table.unrunnable.is_none() {
            table.unrunnable = Some(ExecError {
                program: program.to_string_lossy().into_owned(),
                error,
            });
        }
        JobFate::Undelivered
    }

    /// What follows an attempt that ended as `verdict`: the books for
    /// retries, overloads and `--adapt` (of the record's scope), and the next step
    /// (`rng` draws the backoff).
    fn next_step(
        &self,
        verdict: Verdict,
        n: u32,
        ended: &Ended,
        rng: &mut fastrand::Rng,
    ) -> AfterAttempt {
        let (deadline, scope) = (self.deadline, &self.scope);
        let now = self.pool.shared.clock.now();
        self.pool.slots.lock().attempt_took(ns(ended.duration));
        let retry_after = match verdict {
            Verdict::Succeeded => {
                if self.pool.gate.succeeded(scope) {
                    self.pool.slots.wake();
                }
                return AfterAttempt::Done(JobFate::Succeeded);
            }
            Verdict::Final => return AfterAttempt::Done(JobFate::Failed),
            Verdict::Transient => None,
            Verdict::Overload { retry_after_ns } => Some(retry_after_ns),
        };
        if let Some(retry_after_ns) = retry_after {
            let started = now.saturating_sub(ns(ended.duration));
            // The configured rate, which `--adapt` never exceeds.
            let rate = self.pool.gate.full_rate(&Scope::All);
            let adapt = (self.pool.cfg.adapt && rate.is_finite()).then_some(rate);
            let report = Overload {
                started,
                now,
                retry_after_ns,
            };
            let policy = OverloadPolicy {
                backoff: &self.pool.cfg.backoff,
                adapt,
            };
            self.pool.gate.overload(scope, report, policy);
            self.pool.shared.data_ready.notify_all();
            self.pool.slots.wake();
        }
        if matches!(ended.exit, Exit::TimedOut { .. }) && deadline.is_some_and(|d| now >= d) {
            return AfterAttempt::Done(JobFate::Expired);
        }
        if n > self.pool.cfg.retries {
            return AfterAttempt::Done(JobFate::Failed);
        }
        if self.pool.stopping() {
            // No retry starts at a stop: the record is undelivered.
            return AfterAttempt::Done(JobFate::Undelivered);
        }
        let wait = self.pool.cfg.backoff.wait(n - 1, rng);
        let at = now
            .saturating_add(wait)
            .max(self.pool.gate.paused_until(scope));
        if deadline.is_some_and(|d| at >= d) {
            return AfterAttempt::Done(JobFate::Expired);
        }
        self.pool.slots.lock().retries += 1;
        AfterAttempt::Retry(at)
    }

    /// Sleep until `until` (ns) and any pause of the record's scope is
    /// over; `false` at a stop.
    fn sleep_until(&self, until: u64) -> bool {
        let scope = &self.scope;
        let mut table = self.pool.slots.lock();
        loop {
            let now = self.pool.shared.clock.now();
            let until = until.max(self.pool.gate.paused_until(scope));
            if now >= until {
                return true;
            }
            if self.pool.stopping() {
                return false;
            }
            table = self.pool.slots.wait(table, Some(until - now));
        }
    }

    /// A retry is a start too: wait for a slot of the schedule (the rate,
    /// a pause, the spacing of the record's scope) and take it, ahead of the records
    /// in the bucket (the gate keeps the slot for it: it was announced
    /// with [`GateControl::retry_waits`]). `Err` with the record's fate at
    /// a stop (undelivered) or past its deadline (expired).
    fn take_slot(&self) -> Result<(), JobFate> {
        let (record, deadline, scope) = (self.bytes, self.deadline, &self.scope);
        loop {
            let seen = self.pool.slots.epoch();
            let wait = {
                let mut st = self.pool.shared.lock();
                let now = self.pool.shared.clock.now();
                if deadline.is_some_and(|d| now >= d) {
                    return Err(JobFate::Expired);
                }
                let held = self.pool.gate.due(scope);
                if st.stop.budget.is_some() || st.budget_spent_stops(now) {
                    // A retry is a start: none once a budget is spent
                    // under `--budget-exhausted stop`.
                    drop(st);
                    self.pool.shared.wake_all();
                    return Err(JobFate::Undelivered);
                }
                if st.adm.paused() {
                    // Paused (`drip ctl`), a retry waits too: until resumed,
                    // or its deadline.
                    deadline.map(|d| d - now)
                } else if held > now {
                    Some(held - now)
                } else {
                    let schedule = st.adm.schedule_mut();
                    let taken = self.pool.gate.as_retry(|| {
                        if schedule.release(now, 1, &mut std::iter::once(record)) == 1 {
                            None
                        } else {
                            Some(schedule.next_due(record).saturating_sub(now))
                        }
                    });
                    match taken {
                        None => {
                            self.pool.gate.started(scope, now);
                            return Ok(());
                        }
                        Some(wait) => Some(wait.max(1_000)),
                    }
                }
            };
            if self.pool.stopping() {
                return Err(JobFate::Undelivered);
            }
            self.pool.slots.wait_since(seen, wait);
        }
    }

    /// The joblog's line for attempt `attempt`, which ran (`ran`: its end,
    /// and its HTTP status when known) and was followed by `step` (its
    /// `verdict`).
    fn log(&self, attempt: u32, ran: (&Ended, Option<u16>), step: &AfterAttempt, verdict: Verdict) {
        let outcome = match (step, verdict) {
            (AfterAttempt::Retry(_), Verdict::Overload { .. }) => "overload",
            (AfterAttempt::Retry(_), _) => "retry",
            (AfterAttempt::Done(fate), _) => fate.name(),
        };
        self.log_entry(attempt, Some(ran), outcome, None);
    }

    /// Attempt `attempt` ended as `outcome` (a joblog outcome
    /// name), with `error` saying why, when known: `ran` is its end and
    /// HTTP status, or `None` for an attempt that never ran (no process);
    /// told to the features (the joblog's line).
    fn log_entry(
        &self,
        attempt: u32,
        ran: Option<(&Ended, Option<u16>)>,
        outcome: &'static str,
        error: Option<&str>,
    ) {
        self.hooks.outcome(&Outcome {
            who: &self.who,
            attempt,
            ran,
            outcome,
            error,
        });
    }
}

/// The place in the input of `record`, run as record `number` of this run
/// (its number when it has none): the first part of its id, so a resumed
/// run, which skips records before it, gives it the same id.
fn place(record: &Segment, number: u64) -> u64 {
    if record.number > 0 {
        record.number
    } else {
        number
    }
}

/// Whether a failed start says the record cannot be an argument (a NUL
/// byte in it, or longer than the system's limit): the record's fault,
/// not the command's.
fn not_an_argument(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::InvalidInput || error.raw_os_error() == Some(libc::E2BIG)
}

/// A retry announced to the gate ([`GateControl::retry_waits`]): withdrawn
/// when dropped, whether it started or was given up.
struct RetryAnnounced<'a>(&'a GateControl, u64);

impl Drop for RetryAnnounced<'_> {
    fn drop(&mut self) {
        self.0.retry_done(self.1);
    }
}

/// The environment of attempt `n` of record `number` (`id`: its stable
/// id), whose headers go to `headers` and what it spent to the usage file
/// beside it (`{usage}`).
fn environment(number: u64, id: &str, n: u32, headers: &Path) -> [(&'static str, OsString); 5] {
    [
        ("DRIP_RECORD", number.to_string().into()),
        ("DRIP_RECORD_ID", id.into()),
        ("DRIP_ATTEMPT", n.to_string().into()),
        ("DRIP_HEADERS", headers.as_os_str().to_owned()),
        ("DRIP_USAGE", attempt::usage_file(headers).into_os_string()),
    ]
}
