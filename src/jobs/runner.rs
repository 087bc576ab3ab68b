//! The pool of jobs: starts one job per record the schedule releases (at
//! most `--jobs` at once), runs its attempts on a thread of its own,
//! retries (a retry whose backoff has ended takes the next slot, ahead of
//! the bucket), pauses on overload (with `--key` the refused record's key
//! only, otherwise every start), and records each record's fate
//! (succeeded, failed, expired, undelivered) in the ledger.
//!
//! An overload pauses its scope for `Retry-After`, or else for a backoff
//! drawn with full jitter whose ceiling doubles with each overload in a
//! row ([`Book`]); only a quiet spell (no overload for as long as that
//! ceiling, at least [`QUIET_MIN`]) starts it again from `--backoff`'s
//! MIN. After each pause the scope's rate comes back gradually from half
//! what it was ([`super::gate::Ramp`]). An overload reported by an attempt
//! that started before the scope's latest overload is the same episode: it
//! may lengthen the pause, but neither grows the backoff nor lowers the
//! rate again.
//!
//! Locks: the state's lock is always taken before the pool's; under the
//! pool's only the short locks below it are taken (the list of groups sent
//! TERM, the gate's), never one that waits on I/O, and the pool's is never
//! held across a write to stdout (`--keep-order`'s window is read without a lock), so a
//! stalled stdout holds only the threads writing to it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

use super::attempt::{self, Ended, Files, Spec, Unwritten};
use super::gate::{GateControl, Scope};
use super::joblog::{micros, unix_micros, Entry, Joblog};
use super::order::{Held, Order};
use super::quota;
use super::retry::{parse_headers, Aimd, Exit, Verdict};
use super::{ExecError, JobConfig};
use crate::bucket::{Fate, Segment};
use crate::key::KeySpec;
use crate::output::{Stop, Written};
use crate::state::{JobFate, Jobs, Shared, KILL_AFTER_LEAVE};
use crate::stats::JobStats;
use crate::writer::Sink;

/// How often a wait (for a slot, a pause, a backoff) looks for a stop.
const POLL: Duration = Duration::from_millis(10);

/// How often a job that cannot start for want of a resource tries again,
/// at most, between the ends of other jobs.
const ROOM_POLL: Duration = Duration::from_millis(50);

/// How long a job that cannot start for want of a resource keeps trying
/// while no other job of drip runs (so none will give one back).
const ROOM_PATIENCE: Duration = Duration::from_secs(5);

/// Quota windows kept (one per key) before those already over are
/// forgotten.
const QUOTA_WINDOWS_KEPT: usize = 4096;

/// What became of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    Expired,
    Undelivered,
}

/// After an attempt: the record is done, or tried again at a time (ns).
enum Step {
    Done(Outcome),
    Retry(u64),
}

#[derive(Debug, Default)]
struct Inner {
    /// Job slots taken (a job keeps its slot through its retries).
    busy: usize,
    /// Job slots in all (`-j`; `drip ctl` may change it).
    slots: usize,
    /// Records being run, by number.
    running: BTreeMap<u64, Running>,
    /// Records handed to the workers, not yet picked up.
    queue: VecDeque<(u64, Segment)>,
    /// Worker threads started, and how many wait for a record.
    workers: usize,
    idle: usize,
    next_number: u64,
    fatal: Option<ExecError>,
    retries: u64,
    overloads: u64,
    /// Each scope's overload books (every start's, or each key's).
    books: HashMap<Scope, Book>,
    pauses: u64,
    paused_ns: u64,
    /// The latest attempts' durations, ns, at most [`DURATIONS_KEPT`].
    durations_ns: VecDeque<u64>,
    /// The longest a record waited from being read to its job's start, ns.
    longest_wait_ns: u64,
    rng: fastrand::Rng,
    /// Process groups of ended attempts that still had processes in them
    /// (a job's background children): TERM and KILL at a stop by signal.
    lingering: Vec<u32>,
    /// Output that could not be passed on.
    unwritten: Unwritten,
    /// Attempts whose process runs now (started, not yet waited for).
    processes: usize,
    /// A job waiting for room to start was said on stderr.
    room_said: bool,
}

/// A record being run.
#[derive(Debug)]
struct Running {
    record: Segment,
    /// Its job's process group (0 until the first attempt starts).
    group: u32,
    /// Its fate, once its last attempt ended and the output is being
    /// passed on, with the bytes of that output (for leaving without
    /// the thread: [`Jobs::abandon`]).
    decided: Option<(Outcome, u64)>,
}

/// Lingering groups kept before those now empty are forgotten.
const LINGERING_KEPT: usize = 1024;

/// One scope's overloads (every start's, or a key's).
#[derive(Debug, Default)]
struct Book {
    /// Overloads in a row (no quiet spell between them): the pause's
    /// backoff ceiling is `--backoff`'s for this many failures.
    streak: u32,
    /// When the latest overload that grew the streak came (ns).
    last: Option<u64>,
    /// `--adapt`'s rate for the scope.
    aimd: Option<Aimd>,
}

/// The shortest quiet spell that ends a run of overloads (ns).
pub(crate) const QUIET_MIN: u64 = 1_000_000_000;

/// After a second signal, the process groups sent TERM, for KILL; `None`
/// once KILL was sent (a job starting after that is killed at once).
type Terminated = Arc<Mutex<Option<Vec<u32>>>>;

/// The jobs drip runs.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    cfg: JobConfig,
    gate: Arc<GateControl>,
    /// drip's stdout, where each job's output goes whole.
    out: Mutex<Box<dyn Write + Send>>,
    inner: Mutex<Inner>,
    freed: Condvar,
    /// Taken by the job trying again to start after a resource ran out
    /// ([`Pool::with_room`]): such jobs try one at a time.
    room: Mutex<()>,
    /// Workers wait here for records.
    work: Condvar,
    joblog: Option<Mutex<Joblog>>,
    /// The directory of the jobs' headers files (mode 0700), and its path
    /// (the directory is removed at exit: [`Pool::remove_headers`]).
    headers: Mutex<Option<tempfile::TempDir>>,
    headers_dir: PathBuf,
    terminated: Terminated,
    /// A second signal came: no attempt starts, every job is signalled.
    /// Set before any lock is taken, so no busy lock delays it.
    leaving: std::sync::atomic::AtomicBool,
    /// The threads passing a job's output on now (see [`Pool::passing`]),
    /// interrupted at a second signal; under a lock of their own, held
    /// only to change or read the list.
    passing: Mutex<Vec<u64>>,
    /// The configured rate, records per second.
    rate: f64,
    /// The record delimiter, left out of the record in arguments.
    delimiter: u8,
    /// With `--key`: an overload pauses the refused record's key only.
    key: Option<KeySpec>,
    /// With `--keep-order`: the outputs held until their turn.
    order: Option<Order>,
    /// A malformed quota field was said on stderr.
    quota_malformed: std::sync::atomic::AtomicBool,
    /// Part of a headers file was passed over, and said on stderr.
    headers_passed_over: std::sync::atomic::AtomicBool,
    /// The server's quota window of each scope (every start's, or each
    /// key's), as the responses tell it.
    quota_windows: Mutex<HashMap<Scope, quota::Window>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("cfg", &self.cfg).finish()
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Pool {
    /// A pool running `cfg` for records of `shared`, writing job output to
    /// `out`, pausing starts through `gate`; `rate` is the configured rate
    /// (records per second), which `--adapt` never exceeds; `delimiter`
    /// ends records; with `key`, an overload holds back the key of the
    /// record refused, not every start. A `--joblog` FIFO that no one
    /// reads is waited for while `give_up` says not to; given up, the pool
    /// logs nothing (drip is stopping).
    ///
    /// # Errors
    /// The joblog or the headers directory cannot be created.
    pub(crate) fn new(
        shared: Arc<Shared>,
        cfg: JobConfig,
        gate: Arc<GateControl>,
        out: Box<dyn Write + Send>,
        (rate, delimiter): (f64, u8),
        key: Option<KeySpec>,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<Arc<Pool>> {
        let joblog = match (&cfg.resume, &cfg.joblog) {
            (Some(path), _) => Some(Mutex::new(Joblog::append(path)?)),
            (None, Some(path)) => Joblog::create(path, give_up)?.map(Mutex::new),
            (None, None) => None,
        };
        // Only the user may read the jobs' headers.
        let headers = tempfile::Builder::new()
            .prefix("drip-headers-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .context("creating a directory for DRIP_HEADERS")?;
        let inner = Inner {
            slots: cfg.jobs,
            ..Inner::default()
        };
        let pool = Arc::new(Pool {
            shared: Arc::clone(&shared),
            gate,
            out: Mutex::new(out),
            inner: Mutex::new(inner),
            freed: Condvar::new(),
            room: Mutex::new(()),
            work: Condvar::new(),
            joblog,
            headers_dir: headers.path().to_path_buf(),
            headers: Mutex::new(Some(headers)),
            terminated: Arc::new(Mutex::new(Some(Vec::new()))),
            leaving: std::sync::atomic::AtomicBool::new(false),
            passing: Mutex::new(Vec::new()),
            order: cfg.keep_order.map(Order::new),
            quota_malformed: std::sync::atomic::AtomicBool::new(false),
            headers_passed_over: std::sync::atomic::AtomicBool::new(false),
            quota_windows: Mutex::new(HashMap::new()),
            cfg,
            rate,
            delimiter,
            key,
        });
        let _ = shared.jobs.set(Arc::clone(&pool) as Arc<dyn Jobs>);
        Ok(pool)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn passing_threads(&self) -> MutexGuard<'_, Vec<u64>> {
        self.passing.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopping(&self) -> bool {
        self.shared.stops.now.load(Ordering::Relaxed)
    }

    /// Wait until every job has ended.
    pub(crate) fn wait_all(&self) {
        let mut inner = self.lock();
        while inner.busy > 0 {
            inner = self
                .freed
                .wait_timeout(inner, POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Remove the headers directory and what is in it (once no job runs,
    /// or none will be waited for); again, nothing.
    pub(crate) fn remove_headers(&self) {
        let dir = self
            .headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(dir) = dir {
            let _ = dir.close();
        }
    }

    /// The command that could not be run, if one could not.
    pub(crate) fn take_fatal(&self) -> Option<ExecError> {
        self.lock().fatal.take()
    }

    /// Take a job slot, waiting for one; `false` at a stop, or once the
    /// command could not be run (even with a slot free: a record started
    /// after the stop would settle after the records the writer gives
    /// back, out of input order).
    fn acquire(&self, stop: &dyn Fn() -> bool) -> bool {
        let mut inner = self.lock();
        loop {
            if stop() || inner.fatal.is_some() {
                return false;
            }
            if inner.busy < inner.slots && self.in_window(&inner) {
                break;
            }
            inner = self
                .freed
                .wait_timeout(inner, POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        inner.busy += 1;
        true
    }

    /// Whether the next record may start as far as `--keep-order`'s window
    /// goes.
    fn in_window(&self, inner: &Inner) -> bool {
        self.order
            .as_ref()
            .map_or(true, |o| o.admits(inner.next_number + 1))
    }

    fn release_slot(&self) {
        self.lock().busy -= 1;
        self.freed.notify_all();
    }

    /// Sleep until `until` (ns) and any pause of `scope` is over; `false`
    /// at a stop.
    fn sleep_until(&self, until: u64, scope: &Scope) -> bool {
        loop {
            let now = self.shared.clock.now();
            let until = until.max(self.gate.paused_until(scope));
            if now >= until {
                return true;
            }
            if self.stopping() {
                return false;
            }
            std::thread::sleep(Duration::from_nanos(until - now).min(POLL));
        }
    }

    /// Wait until every start's pause is over, and with `spaced` until its
    /// spacing after the last start has passed too, then count this as a
    /// start; `false` at a stop.
    fn wait_turn(&self, spaced: bool) -> bool {
        loop {
            let now = self.shared.clock.now();
            let due = if spaced {
                self.gate.due(&Scope::All)
            } else {
                self.gate.paused_until(&Scope::All)
            };
            if now >= due {
                if spaced {
                    self.gate.started(&Scope::All, now);
                }
                return true;
            }
            if self.stopping() {
                return false;
            }
            std::thread::sleep(Duration::from_nanos(due - now).min(POLL));
        }
    }

    /// A retry is a start too: wait for a slot of the schedule (the rate,
    /// a pause, the spacing of `scope`) and take it, ahead of the records
    /// in the bucket (the gate keeps the slot for it: it was announced
    /// with [`GateControl::retry_waits`]). `Err` with the record's outcome
    /// at a stop (undelivered) or past its deadline (expired).
    fn take_slot(
        &self,
        record: &[u8],
        deadline: Option<u64>,
        scope: &Scope,
    ) -> Result<(), Outcome> {
        loop {
            let wait = {
                let mut st = self.shared.lock();
                let now = self.shared.clock.now();
                if deadline.is_some_and(|d| now >= d) {
                    return Err(Outcome::Expired);
                }
                // Paused (`drip ctl`), a retry waits too.
                let paused = st.adm.paused();
                let held = self.gate.due(scope);
                if paused {
                    10_000_000
                } else if held > now {
                    held - now
                } else {
                    let schedule = st.adm.schedule_mut();
                    let taken = self.gate.as_retry(|| {
                        if schedule.release(now, 1, &mut std::iter::once(record)) == 1 {
                            None
                        } else {
                            Some(schedule.next_due(record).saturating_sub(now))
                        }
                    });
                    match taken {
                        None => {
                            self.gate.started(scope, now);
                            return Ok(());
                        }
                        Some(wait) => wait,
                    }
                }
            };
            if self.stopping() {
                return Err(Outcome::Undelivered);
            }
            std::thread::sleep(Duration::from_nanos(wait.max(1_000)).min(POLL));
        }
    }

    /// `record`'s job starts now: a departure (the summary's rate is
    /// starts per second), and how long it waited since it was read.
    fn starting(&self, record: &Segment) {
        let mut st = self.shared.lock();
        let now = self.shared.clock.now();
        st.departures.record(now, 1);
        let mut inner = self.lock();
        let waited = now.saturating_sub(record.arrived);
        inner.longest_wait_ns = inner.longest_wait_ns.max(waited);
    }

    /// Start a job for `record` (a slot is taken) on an idle worker, or a
    /// new one (each with its own files, reused).
    fn start(self: &Arc<Self>, record: Segment) {
        let mut inner = self.lock();
        inner.next_number += 1;
        let number = inner.next_number;
        inner.running.insert(
            number,
            Running {
                record: record.clone(),
                group: 0,
                decided: None,
            },
        );
        inner.queue.push_back((number, record));
        // Enough workers wait to take everything queued (the slots bound
        // the jobs; a worker is only a thread to run them on).
        if inner.queue.len() <= inner.idle {
            drop(inner);
            self.work.notify_one();
            return;
        }
        inner.workers += 1;
        drop(inner);
        let pool = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("drip-job".into())
            .spawn(move || pool.work());
        if spawned.is_err() {
            let mut inner = self.lock();
            inner.workers -= 1;
            inner.queue.retain(|(n, _)| *n != number);
            drop(inner);
            self.settle(number, Outcome::Undelivered);
        }
    }

    /// A worker: run the records handed to it, one at a time, for ever.
    /// Its jobs' files are reused from one record to the next, and closed
    /// while it is idle: a job waiting for a file descriptor to start
    /// ([`Pool::with_room`]) gets those of the workers that have no job.
    fn work(&self) {
        let mut files = None;
        loop {
            let next = self.lock().queue.pop_front();
            let (number, record) = next.unwrap_or_else(|| {
                files = None;
                let mut inner = self.lock();
                loop {
                    if let Some(next) = inner.queue.pop_front() {
                        break next;
                    }
                    inner.idle += 1;
                    inner = self.work.wait(inner).unwrap_or_else(|e| e.into_inner());
                    inner.idle -= 1;
                }
            });
            let outcome = self.run_record(number, &record, &mut files);
            self.settle(number, outcome);
        }
    }

    /// Run `record`'s attempts until it is done, with the worker's `files`
    /// (made if there are none: [`Pool::job_files`]).
    fn run_record(&self, number: u64, record: &Segment, files: &mut Option<Files>) -> Outcome {
        let bytes = record.as_bytes();
        let body = match bytes.split_last() {
            Some((&last, body)) if last == self.delimiter => body,
            _ => bytes,
        };
        let id = attempt::record_id(place(record, number), body);
        // The record as the joblog shows it, made once.
        let shown = if self.joblog.is_some() {
            crate::stats::json_key(body)
        } else {
            String::new()
        };
        let scope = self.scope_of(bytes);
        // The job's headers file (read and removed after each attempt).
        let headers = self.headers_dir.join(number.to_string());
        let argv =
            attempt::command_line(&self.cfg.command, body, &headers, self.cfg.record_on_stdin);
        let deadline = self
            .cfg
            .deadline
            .map(|d| record.arrived.saturating_add(ns(d)));
        let who = Who {
            number,
            id: &id,
            record: &shown,
        };
        for n in 1u32.. {
            let now = self.shared.clock.now();
            if self.leaving() {
                return self.unstarted(&who, n, Outcome::Undelivered);
            }
            if deadline.is_some_and(|d| now >= d) {
                return self.unstarted(&who, n, Outcome::Expired);
            }
            let spec = Spec {
                argv: &argv,
                env: environment(number, &id, n, &headers),
                limit: self.attempt_limit(deadline, now),
            };
            let set_group = |pgid| self.set_group(number, pgid);
            let started = self.with_room(|running| {
                let set_group = |pgid| {
                    running();
                    set_group(pgid);
                };
                let run = attempt::run(&spec, self.job_files(files, bytes)?, &set_group);
                if run.as_ref().is_err_and(super::short_of_resources) {
                    // Not held while the job waits to start.
                    *files = None;
                }
                run
            });
            let ended = match started {
                None => return self.unstarted(&who, n, Outcome::Undelivered),
                Some(Ok(started)) => {
                    self.attempt_ended(number);
                    started
                }
                Some(Err(error)) if not_an_argument(&error) => {
                    return self.not_an_argument(&who, n, &error);
                }
                Some(Err(error)) => {
                    let outcome = self.cannot_run(&argv[0], error);
                    return self.unstarted(&who, n, outcome);
                }
            };
            let files = files.as_mut().expect("the attempt ran with them");
            let step = self.judge(&who, n, (&ended, &*files), &headers, (deadline, &scope));
            self.pass_on(number, files);
            let at = match step {
                Step::Done(outcome) => return outcome,
                Step::Retry(at) => at,
            };
            self.gate.retry_waits(number, at, scope.clone());
            let _announced = Announced(&self.gate, number);
            if !self.sleep_until(at, &scope) {
                return self.unstarted(&who, n + 1, Outcome::Undelivered);
            }
            if let Err(outcome) = self.take_slot(bytes, deadline, &scope) {
                return self.unstarted(&who, n + 1, outcome);
            }
        }
        unreachable!("attempts are bounded by --retries")
    }

    /// Attempt `n` of `who` ended as `ended`: read its headers file
    /// (`headers`), follow the quota it announces, judge the attempt, and
    /// log it; the next step. A job drip killed on its way out is not
    /// retried, and its record is undelivered.
    fn judge(
        &self,
        who: &Who,
        n: u32,
        (ended, files): (&Ended, &Files),
        headers: &Path,
        (deadline, scope): (Option<u64>, &Scope),
    ) -> Step {
        let (text, passed_over) = attempt::take_headers(headers);
        if let Some(passed) = passed_over {
            if !self.headers_passed_over.swap(true, Ordering::Relaxed) && !self.cfg.quiet {
                eprintln!("{}", passed.notice(who.number));
            }
        }
        let response = text.as_deref().and_then(parse_headers);
        if let (Some(text), None) = (&text, response.as_ref().and_then(|r| r.retry_after)) {
            // Retry-After wins: the overload's pause holds starts.
            self.follow_quota(text, scope);
        }
        let verdict = self
            .cfg
            .policy
            .classify(ended.exit, response.as_ref(), SystemTime::now());
        let mut step = if self.killed_leaving(ended) {
            Step::Done(Outcome::Undelivered)
        } else {
            self.next_step(verdict, n, (deadline, scope), ended)
        };
        // The fate is recorded before the joblog tells it, and before the
        // output goes out (a stalled stdout cannot make finished work
        // undelivered); a record drip abandoned on its way out before
        // then is undelivered, and logged so.
        if let Step::Done(outcome) = step {
            let pending = if self.order.is_some() {
                0
            } else {
                files.pending()
            };
            if !self.decided(who.number, outcome, pending) {
                step = Step::Done(Outcome::Undelivered);
            }
        }
        let status = response.map(|r| r.status);
        self.log(who, n, ended, status, (&step, verdict));
        step
    }

    /// Whom an overload of `record` (its delimiter included) holds back:
    /// its key with `--key` (every start for a record without one).
    fn scope_of(&self, record: &[u8]) -> Scope {
        self.key
            .as_ref()
            .and_then(|spec| crate::keyed::record_key(spec, record, self.delimiter))
            .map_or(Scope::All, |key| Scope::Key(key.into()))
    }

    /// An attempt's output goes to stdout whole; with `--keep-order`, it is
    /// held until the record's turn.
    fn pass_on(&self, number: u64, files: &mut Files) {
        let Some(order) = &self.order else {
            return self.passing(|give_up| {
                // drip's stdout is held only while the output is passed on.
                let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
                files.pass_on(&mut **out, self.delimiter, give_up)
            });
        };
        let mut held = Held::default();
        self.passing(|give_up| files.pass_on(&mut held, self.delimiter, give_up));
        if let Err(e) = order.hold(number, held) {
            eprintln!("drip: --keep-order: holding a job's output: {e}");
        }
    }

    /// Pass output on with `pass` from a thread a second signal interrupts
    /// ([`Jobs::interrupt_output`]): a write blocked on a stalled stdout or
    /// stderr then gives up (`give_up`: drip is leaving), rather than
    /// holding drip's exit. What was not written is counted.
    fn passing(&self, pass: impl FnOnce(&dyn Fn() -> bool) -> Unwritten) {
        let me = crate::sys::this_thread();
        self.passing_threads().push(me);
        let give_up = || self.shared.stops.leaving();
        let cut = pass(&give_up);
        let mut passing = self.passing_threads();
        if let Some(at) = passing.iter().position(|&t| t == me) {
            passing.swap_remove(at);
        }
        drop(passing);
        let mut inner = self.lock();
        inner.unwritten = inner.unwritten.and(cut);
    }

    /// Record `number` is done as `outcome`; its last attempt's output
    /// (`pending` bytes; 0 with `--keep-order`, which holds it) is passed
    /// on next. `false` when drip abandoned the record on its way out
    /// ([`Jobs::abandon`]): the record is undelivered.
    fn decided(&self, number: u64, outcome: Outcome, pending: u64) -> bool {
        match self.lock().running.get_mut(&number) {
            Some(job) => {
                job.decided = Some((outcome, pending));
                true
            }
            None => false,
        }
    }

    /// Record `who` is done as `outcome` before its attempt `n` started: a
    /// stop, or its deadline, came while a retry waited for its backoff,
    /// a pause or its slot (or the command could no longer be run). From
    /// the second attempt on, its fate is recorded and then its joblog
    /// line written, for the attempt that never ran (no exit, no signal,
    /// 0 µs), so every record that started a job ends with a line giving
    /// its fate; a record drip abandoned on its way out is undelivered.
    /// Before the first attempt no job started: no line. Returns the fate.
    fn unstarted(&self, who: &Who, n: u32, outcome: Outcome) -> Outcome {
        if n <= 1 {
            return outcome;
        }
        let outcome = if self.decided(who.number, outcome, 0) {
            outcome
        } else {
            Outcome::Undelivered
        };
        self.log_never_ran(who, n, outcome_name(outcome), None);
        outcome
    }

    /// Whether drip killed this attempt on its way out: it ended by a
    /// signal while drip was leaving (a second signal sends every job's
    /// process group TERM, then KILL). Its job did not run to its end, so
    /// its record is undelivered; a job that exited, with any status, is
    /// judged by its status.
    fn killed_leaving(&self, ended: &Ended) -> bool {
        matches!(ended.exit, Exit::Signal(_)) && self.leaving()
    }

    /// Pace the starts so the quota announced in a response's headers
    /// (`text`) lasts until its reset, the requests in flight counted
    /// against it ([`quota::pace`]), for the record's `scope` (its key's
    /// quota with `--key`). A malformed quota field is ignored, and said
    /// once on stderr (unless `-q`).
    fn follow_quota(&self, text: &str, scope: &Scope) {
        if !self.cfg.quota_pacing {
            return;
        }
        let q = match quota::parse_quota(text, SystemTime::now()) {
            Ok(Some(q)) => q,
            Ok(None) => return,
            Err(field) => {
                if !self.quota_malformed.swap(true, Ordering::Relaxed) && !self.cfg.quiet {
                    eprintln!("drip: {field}: not a quota drip can read; such fields are ignored");
                }
                return;
            }
        };
        let now = self.shared.clock.now();
        let q = {
            let mut windows = self.quota_windows.lock().unwrap_or_else(|e| e.into_inner());
            if windows.len() > QUOTA_WINDOWS_KEPT {
                windows.retain(|_, w| w.is_open(now));
            }
            windows.entry(scope.clone()).or_default().observe(now, q)
        };
        // This job's request is answered; the others of its scope running
        // are not.
        let in_flight = self.running_in(scope).saturating_sub(1);
        match quota::pace(q, in_flight) {
            quota::Pace::Every(d) => self.gate.set_quota_spacing(scope, ns(d)),
            quota::Pace::Pause(d) => {
                self.gate.set_quota_spacing(scope, 0);
                self.gate.pause(scope, now, now.saturating_add(ns(d)));
                self.shared.data_ready.notify_all();
            }
        }
    }

    /// Records of `scope` whose jobs are running (every record's, for
    /// every start's scope).
    fn running_in(&self, scope: &Scope) -> u64 {
        let inner = self.lock();
        match scope {
            Scope::All => inner.running.len() as u64,
            Scope::Key(_) => inner
                .running
                .values()
                .filter(|job| self.scope_of(job.record.as_bytes()) == *scope)
                .count() as u64,
        }
    }

    /// How long an attempt started at `now` may run: `--timeout`, and what
    /// is left before the record's deadline.
    fn attempt_limit(&self, deadline: Option<u64>, now: u64) -> Option<Duration> {
        let left = deadline.map(|d| Duration::from_nanos(d.saturating_sub(now)));
        [self.cfg.timeout, left].into_iter().flatten().min()
    }

    /// Job `number` runs in process group `pgid`; signalled at once if
    /// drip is leaving.
    fn set_group(&self, number: u64, pgid: u32) {
        let mut inner = self.lock();
        inner.processes += 1;
        if let Some(job) = inner.running.get_mut(&number) {
            job.group = pgid;
        }
        if self.leaving() {
            let mut terminated = self.terminated.lock().unwrap_or_else(|e| e.into_inner());
            match &mut *terminated {
                Some(groups) => {
                    groups.push(pgid);
                    crate::sys::kill_group(pgid, libc::SIGTERM);
                }
                None => crate::sys::kill_group(pgid, libc::SIGKILL),
            }
        }
    }

    fn leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
    }

    /// The attempt of record `number` ended: its process group is kept
    /// if processes it left behind still run in it.
    fn attempt_ended(&self, number: u64) {
        let mut inner = self.lock();
        inner.processes = inner.processes.saturating_sub(1);
        let Some(pgid) = inner.running.get(&number).map(|job| job.group) else {
            return;
        };
        if !crate::sys::group_exists(pgid) {
            return;
        }
        if inner.lingering.len() >= LINGERING_KEPT {
            inner.lingering.retain(|&g| crate::sys::group_exists(g));
        }
        inner.lingering.push(pgid);
    }

    /// At the end of a stop by signal: TERM the process groups that jobs
    /// which ended left behind, and KILL those still there
    /// [`KILL_AFTER_LEAVE`] later (at once when nothing is left). The
    /// groups a second signal sent TERM are among them: drip does not
    /// leave before they are gone, whether or not the thread that waits
    /// to KILL them has run yet.
    pub(crate) fn end_lingering(&self) {
        let mut groups = std::mem::take(&mut self.lock().lingering);
        let terminated = self
            .terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        groups.extend(terminated.unwrap_or_default());
        end_groups(&groups);
    }

    /// Attempt `attempt` of `who` could not start because the record cannot
    /// be an argument: the record fails alone (said on stderr and in the
    /// joblog); the batch goes on.
    fn not_an_argument(&self, who: &Who, attempt: u32, error: &std::io::Error) -> Outcome {
        let why = match error.raw_os_error() {
            Some(libc::E2BIG) => "longer than the system's argument limit".to_string(),
            _ => crate::sys::describe(error),
        };
        eprintln!(
            "drip: --exec: record {}: cannot be an argument: {why}",
            who.number
        );
        self.log_never_ran(who, attempt, "failed", Some(&why));
        Outcome::Failed
    }

    /// The files of an attempt's job, `files`, made if there are none
    /// (its stdout and stderr, and with `--record-on-stdin` its stdin),
    /// holding `record` for its stdin. An error other than a resource
    /// running out is said as one of drip's own (exit 1).
    fn job_files<'f>(
        &self,
        files: &'f mut Option<Files>,
        record: &[u8],
    ) -> std::io::Result<&'f mut Files> {
        let made = match files {
            Some(files) => Ok(files),
            None => Files::new(self.cfg.record_on_stdin).map(|made| files.insert(made)),
        };
        let set = made.and_then(|files| files.set_record(record).map(|()| files));
        set.map_err(|e| {
            if super::short_of_resources(&e) {
                return e;
            }
            let why = crate::sys::describe(&e).to_lowercase();
            std::io::Error::other(format!("a job's output file: {why}"))
        })
    }

    /// Do `start` (make a job's files, start its process; it calls the
    /// function it is given once the process runs). While it fails for
    /// want of a resource ([`super::short_of_resources`]: file descriptors,
    /// processes, memory), try again as other jobs end (each gives back
    /// what it held), every [`ROOM_POLL`] at least; while no other job of
    /// drip runs, for [`ROOM_PATIENCE`] at most: then its error. The jobs
    /// waiting so try one at a time, each until its process runs (they
    /// would otherwise take from each other what each needs to start).
    /// Said once on stderr (not with `-q`). `None` when drip stops
    /// meanwhile: the job did not start.
    fn with_room<T>(
        &self,
        mut start: impl FnMut(&dyn Fn()) -> std::io::Result<T>,
    ) -> Option<std::io::Result<T>> {
        match start(&|| {}) {
            Err(e) if super::short_of_resources(&e) => {}
            done => return Some(done),
        }
        let turn =
            std::cell::RefCell::new(Some(self.room.lock().unwrap_or_else(|e| e.into_inner())));
        let running = || drop(turn.borrow_mut().take());
        let mut alone_since: Option<std::time::Instant> = None;
        loop {
            // The job before may have just started, or given up: the turn
            // begins with a try.
            let error = match start(&running) {
                Err(e) if super::short_of_resources(&e) => e,
                done => return Some(done),
            };
            if self.stopping() || self.leaving() {
                return None;
            }
            let mut inner = self.lock();
            if inner.processes > 0 {
                alone_since = None;
            } else if alone_since
                .get_or_insert_with(std::time::Instant::now)
                .elapsed()
                >= ROOM_PATIENCE
            {
                return Some(Err(error));
            }
            if !std::mem::replace(&mut inner.room_said, true) && !self.cfg.quiet {
                // Not under the lock: stderr may be stalled.
                drop(inner);
                eprintln!(
                    "drip: --exec: a job cannot start yet: {}; it waits for a running job to end",
                    crate::sys::describe(&error).to_lowercase()
                );
                inner = self.lock();
            }
            drop(self.freed.wait_timeout(inner, ROOM_POLL));
        }
    }

    /// The command cannot be started: reported once, and drip stops.
    fn cannot_run(&self, program: &OsString, error: std::io::Error) -> Outcome {
        let mut inner = self.lock();
        if inner.fatal.is_none() {
            inner.fatal = Some(ExecError {
                program: program.to_string_lossy().into_owned(),
                error,
            });
        }
        drop(inner);
        self.shared.stop(false);
        Outcome::Undelivered
    }

    /// What follows an attempt that ended as `verdict`: the books for
    /// retries, overloads and `--adapt` (of `scope`), and the next step.
    fn next_step(
        &self,
        verdict: Verdict,
        n: u32,
        (deadline, scope): (Option<u64>, &Scope),
        ended: &Ended,
    ) -> Step {
        let now = self.shared.clock.now();
        let mut inner = self.lock();
        if inner.durations_ns.len() == DURATIONS_KEPT {
            inner.durations_ns.pop_front();
        }
        inner.durations_ns.push_back(ns(ended.duration));
        let retry_after = match verdict {
            Verdict::Succeeded => {
                let book = inner.books.get_mut(scope);
                if let Some(aimd) = book.and_then(|b| b.aimd.as_mut()) {
                    aimd.success();
                    self.gate.narrow(scope, aimd.spacing_ns());
                }
                return Step::Done(Outcome::Succeeded);
            }
            Verdict::Final => return Step::Done(Outcome::Failed),
            Verdict::Transient => None,
            Verdict::Overload { retry_after_ns } => Some(retry_after_ns),
        };
        if let Some(retry_after_ns) = retry_after {
            let started = now.saturating_sub(ns(ended.duration));
            self.overload(&mut inner, scope, (started, now), retry_after_ns);
        }
        if matches!(ended.exit, Exit::TimedOut { .. }) && deadline.is_some_and(|d| now >= d) {
            return Step::Done(Outcome::Expired);
        }
        if n > self.cfg.retries {
            return Step::Done(Outcome::Failed);
        }
        if self.stopping() {
            // No retry starts at a stop: the record is undelivered.
            return Step::Done(Outcome::Undelivered);
        }
        let backoff = self.cfg.backoff;
        let wait = backoff.wait(n - 1, &mut inner.rng);
        let at = now.saturating_add(wait).max(self.gate.paused_until(scope));
        if deadline.is_some_and(|d| at >= d) {
            return Step::Done(Outcome::Expired);
        }
        inner.retries += 1;
        Step::Retry(at)
    }

    /// An overload of `scope` reported at `now` by an attempt that started
    /// at `started` (ns): pause the scope for `Retry-After`, or else for a
    /// backoff that grows with the overloads in a row; then its rate comes
    /// back gradually; under `--adapt` its rate is lowered. See the
    /// module's notes.
    fn overload(
        &self,
        inner: &mut Inner,
        scope: &Scope,
        (started, now): (u64, u64),
        retry_after_ns: Option<u64>,
    ) {
        inner.overloads += 1;
        let backoff = self.cfg.backoff;
        let Inner { books, rng, .. } = inner;
        let book = books.entry(scope.clone()).or_insert_with(|| Book {
            aimd: (self.cfg.adapt && self.rate.is_finite()).then(|| Aimd::new(self.rate)),
            ..Book::default()
        });
        let quiet = backoff.ceiling(book.streak).max(QUIET_MIN);
        if book.last.is_some_and(|t| now.saturating_sub(t) > quiet) {
            book.streak = 0;
        }
        // An attempt started before the latest overload: the same episode.
        let fresh = book.last.map_or(true, |t| started >= t);
        let wait = retry_after_ns.unwrap_or_else(|| backoff.wait(book.streak, rng));
        if fresh {
            book.streak = book.streak.saturating_add(1);
            book.last = Some(now);
        }
        let was_paused = self.gate.paused_until(scope) > now;
        let lengthened = self.gate.pause(scope, now, now.saturating_add(wait));
        if lengthened > 0 {
            inner.pauses += u64::from(!was_paused);
            inner.paused_ns += lengthened;
        }
        if fresh {
            self.gate.slow(scope, now, self.gate.paused_until(scope));
            if let Some(aimd) = &mut book.aimd {
                aimd.overload();
                self.gate.narrow(scope, aimd.spacing_ns());
            }
        }
        self.shared.data_ready.notify_all();
    }

    /// The joblog's line for attempt `attempt` of `who`, which never ran
    /// (no process: no exit, no signal, 0 µs, started now), as `outcome`
    /// (a joblog outcome name), with `error` saying why, when known.
    fn log_never_ran(&self, who: &Who, attempt: u32, outcome: &'static str, error: Option<&str>) {
        let Some(joblog) = &self.joblog else {
            return;
        };
        let entry = Entry {
            id: who.id,
            number: who.number,
            record: who.record,
            attempt,
            start_us: unix_micros(SystemTime::now()),
            duration_us: 0,
            exit: None,
            signal: None,
            timed_out: false,
            http_status: None,
            outcome,
            error,
        };
        joblog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .write(&entry);
    }

    /// The joblog's line for attempt `attempt` of `who`, which ended as
    /// `ended` (with `http_status`, when known) and was followed by `step`.
    fn log(
        &self,
        who: &Who,
        attempt: u32,
        ended: &Ended,
        http_status: Option<u16>,
        (step, verdict): (&Step, Verdict),
    ) {
        let Some(joblog) = &self.joblog else {
            return;
        };
        let outcome = match (step, verdict) {
            (Step::Retry(_), Verdict::Overload { .. }) => "overload",
            (Step::Retry(_), _) => "retry",
            (Step::Done(outcome), _) => outcome_name(*outcome),
        };
        let (exit, signal, timed_out) = Entry::exit_fields(ended.exit);
        let entry = Entry {
            id: who.id,
            number: who.number,
            record: who.record,
            attempt,
            start_us: unix_micros(ended.started),
            duration_us: micros(ended.duration),
            exit,
            signal,
            timed_out,
            http_status,
            outcome,
            error: None,
        };
        joblog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .write(&entry);
    }

    /// The figures of `inner`, but for the attempts' percentiles (left 0),
    /// and the latest attempts' durations (ns, unsorted) they come from.
    fn figures(&self, inner: &Inner) -> (JobStats, Vec<u64>) {
        let now = self.shared.clock.now();
        let paused_left = self.gate.paused_until(&Scope::All).saturating_sub(now);
        let stats = JobStats {
            jobs_running: inner.running.len() as u64,
            retries: inner.retries,
            overload_responses: inner.overloads,
            pauses: inner.pauses,
            paused_ms: inner.paused_ns.saturating_sub(paused_left) as f64 / 1e6,
            effective_rate: inner
                .books
                .get(&Scope::All)
                .and_then(|b| b.aimd)
                .map_or(self.rate, |a| a.current())
                .min(self.gate.rate_at(&Scope::All, now)),
            attempt_p50_ms: 0.0,
            attempt_p99_ms: 0.0,
            configured_rate: self.rate,
            outputs_cut: inner.unwritten.outputs,
            output_bytes_unwritten: inner.unwritten.bytes,
        };
        (stats, inner.durations_ns.iter().copied().collect())
    }

    /// Record the fate of record `number` and free its slot (unless drip
    /// abandoned it on the way out).
    fn settle(&self, number: u64, outcome: Outcome) {
        // Its output goes out first, while its job still counts as running:
        // drip waits for running jobs before it exits.
        if let Some(order) = &self.order {
            self.passing(|give_up| order.done(number, &self.out, give_up));
        }
        let mut st = self.shared.lock();
        let mut inner = self.lock();
        let Some(Running { record, .. }) = inner.running.remove(&number) else {
            return;
        };
        inner.busy -= 1;
        drop(inner);
        st.writing.sink_full = false;
        match outcome {
            Outcome::Succeeded => st.ledger.succeeded(1),
            Outcome::Failed => st.ledger.dispose(record, Fate::Failed),
            Outcome::Expired => st.ledger.dispose(record, Fate::Expired),
            Outcome::Undelivered => st.ledger.dispose(record, Fate::Undelivered),
        }
        st.flush_dead();
        drop(st);
        self.freed.notify_all();
        self.shared.data_ready.notify_all();
    }
}

impl Jobs for Pool {
    fn has_room(&self) -> bool {
        let inner = self.lock();
        inner.busy < inner.slots && self.in_window(&inner)
    }

    fn slots(&self) -> usize {
        self.lock().slots
    }

    fn set_slots(&self, n: usize) {
        self.lock().slots = n;
        self.freed.notify_all();
        let _st = self.shared.lock();
        self.shared.data_ready.notify_all();
    }

    fn running(&self) -> Vec<(u64, Vec<u8>)> {
        let inner = self.lock();
        inner
            .running
            .iter()
            .map(|(n, job)| {
                let bytes = job.record.as_bytes();
                let body = bytes.strip_suffix(&[self.delimiter]).unwrap_or(bytes);
                (*n, body.to_vec())
            })
            .collect()
    }

    fn stats(&self) -> JobStats {
        let (mut stats, mut durations) = self.figures(&self.lock());
        durations.sort_unstable();
        stats.attempt_p50_ms = percentile_ms(&durations, 0.5);
        stats.attempt_p99_ms = percentile_ms(&durations, 0.99);
        stats
    }

    fn view(&self) -> Option<crate::progress::JobsView> {
        // The display skips a frame rather than wait for the lock.
        let inner = match self.inner.try_lock() {
            Ok(inner) => inner,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let (mut stats, mut durations) = self.figures(&inner);
        drop(inner);
        // The display shows the median only: no full sort.
        if !durations.is_empty() {
            let at = ((durations.len() - 1) as f64 * 0.5).round() as usize;
            durations.select_nth_unstable(at);
            stats.attempt_p50_ms = durations[at] as f64 / 1e6;
        }
        let now = self.shared.clock.now();
        Some(crate::progress::JobsView {
            stats,
            paused_left_ns: self.gate.paused_until(&Scope::All).saturating_sub(now),
            paused_keys: self.gate.paused_keys(now),
        })
    }

    fn longest_wait_ns(&self) -> u64 {
        self.lock().longest_wait_ns
    }

    fn terminate(&self) {
        // First what takes no busy lock: no attempt starts, and the
        // threads blocked writing output give up.
        self.leaving.store(true, Ordering::SeqCst);
        self.interrupt_output();
        let mut inner = self.lock();
        let mut groups: Vec<u32> = inner.running.values().map(|job| job.group).collect();
        groups.append(&mut inner.lingering);
        for &pgid in &groups {
            crate::sys::kill_group(pgid, libc::SIGTERM);
        }
        let mut terminated = self.terminated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(terminated) = &mut *terminated {
            terminated.extend(groups.into_iter().filter(|&g| g != 0));
        }
        drop(terminated);
        drop(inner);
        let to_kill = Arc::clone(&self.terminated);
        let killer = move || {
            std::thread::sleep(KILL_AFTER_LEAVE);
            let groups = to_kill.lock().unwrap_or_else(|e| e.into_inner()).take();
            for pgid in groups.unwrap_or_default() {
                crate::sys::kill_group(pgid, libc::SIGKILL);
            }
        };
        let spawned = std::thread::Builder::new()
            .name("drip-kill".into())
            .spawn(killer);
        if spawned.is_err() {
            // No thread for the wait: the evacuation kills them later.
            *self.terminated.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    fn abandon(&self) -> Vec<(Segment, JobFate)> {
        let (running, lingering) = {
            let mut inner = self.lock();
            let lingering = std::mem::take(&mut inner.lingering);
            (std::mem::take(&mut inner.running), lingering)
        };
        let terminated = self
            .terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let mut groups: Vec<u32> = running.values().map(|job| job.group).collect();
        groups.extend(lingering);
        groups.extend(terminated.unwrap_or_default());
        end_groups(&groups);
        // drip exits next, without the wiring: nothing is left behind.
        self.remove_headers();
        let mut cut = match &self.order {
            Some(order) => order.flush_all(),
            None => Unwritten::default(),
        };
        let left = running
            .into_values()
            .map(|job| {
                // A job that ended, its output not passed on whole: its
                // own fate.
                let fate = match job.decided {
                    Some((outcome, pending)) => {
                        cut = cut.and(Unwritten::of(pending));
                        match outcome {
                            Outcome::Succeeded => JobFate::Succeeded,
                            Outcome::Failed => JobFate::Disposed(Fate::Failed),
                            Outcome::Expired => JobFate::Disposed(Fate::Expired),
                            Outcome::Undelivered => JobFate::Disposed(Fate::Undelivered),
                        }
                    }
                    None => JobFate::Disposed(Fate::Undelivered),
                };
                (job.record, fate)
            })
            .collect();
        let mut inner = self.lock();
        inner.unwritten = inner.unwritten.and(cut);
        left
    }

    fn interrupt_output(&self) {
        for &thread in self.passing_threads().iter() {
            crate::sys::interrupt(thread);
        }
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

/// A record's fate as the joblog names it.
fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::Failed => "failed",
        Outcome::Expired => "expired",
        Outcome::Undelivered => "undelivered",
    }
}

/// A record as the joblog names it.
struct Who<'a> {
    /// Its number (`DRIP_RECORD`).
    number: u64,
    /// Its stable id (`DRIP_RECORD_ID`).
    id: &'a str,
    /// The record, as a JSON string's text.
    record: &'a str,
}

/// TERM process groups `groups`, then KILL those with a process left
/// [`KILL_AFTER_LEAVE`] later (no wait when none is left).
fn end_groups(groups: &[u32]) {
    for &pgid in groups {
        crate::sys::kill_group(pgid, libc::SIGTERM);
    }
    let start = std::time::Instant::now();
    while groups.iter().any(|&g| crate::sys::group_exists(g)) {
        if start.elapsed() >= KILL_AFTER_LEAVE {
            for &pgid in groups {
                crate::sys::kill_group(pgid, libc::SIGKILL);
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
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
struct Announced<'a>(&'a GateControl, u64);

impl Drop for Announced<'_> {
    fn drop(&mut self) {
        self.0.retry_done(self.1);
    }
}

/// Removes the pool's headers directory when dropped: on every way out of
/// the wiring, errors included.
pub(crate) struct RemoveHeaders(pub(crate) Arc<Pool>);

impl Drop for RemoveHeaders {
    fn drop(&mut self) {
        if self.0.shared.stops.signalled() {
            self.0.end_lingering();
        }
        self.0.remove_headers();
    }
}

/// The environment of attempt `n` of record `number` (`id`: its stable
/// id), whose headers go to `headers`.
fn environment(number: u64, id: &str, n: u32, headers: &Path) -> [(&'static str, OsString); 4] {
    [
        ("DRIP_RECORD", number.to_string().into()),
        ("DRIP_RECORD_ID", id.into()),
        ("DRIP_ATTEMPT", n.to_string().into()),
        ("DRIP_HEADERS", headers.as_os_str().to_owned()),
    ]
}

/// The `p` (0 to 1) percentile of `sorted` (ns, ascending), ms; 0 when
/// there is none (nearest rank).
fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at] as f64 / 1e6
}

/// Attempts whose durations give the p50 and p99 in the stats: the
/// latest ones, so memory stays flat however long drip runs.
const DURATIONS_KEPT: usize = 10_000;

/// The sink that runs a job per record.
pub(crate) struct Runner(pub(crate) Arc<Pool>);

impl Sink for Runner {
    fn write(
        &mut self,
        batch: &[Segment],
        stop: &dyn Fn() -> Stop,
        progress: &dyn Fn(usize),
    ) -> Written {
        // A job is whole or not started: any stop stops further starts.
        let stop = || stop() != Stop::No;
        let stop: &dyn Fn() -> bool = &stop;
        let mut done = Written::default();
        // The gate released the batch's first record at its slot; the
        // others wait for theirs (a spacing learned since, from a quota,
        // holds them too, even when the rate is unlimited).
        let mut first = true;
        for seg in batch {
            let mut seg = seg.clone();
            while !seg.is_empty() {
                let record = seg.split_front(1);
                if !self.0.acquire(stop) {
                    done.stopped = true;
                    return done;
                }
                if !self.0.wait_turn(!std::mem::take(&mut first)) {
                    self.0.release_slot();
                    done.stopped = true;
                    return done;
                }
                done.bytes += record.bytes() as u64;
                done.records += 1;
                self.0.starting(&record);
                self.0.start(record);
                if !self.0.has_room() {
                    // Arrivals wait in the bucket from now, not in the
                    // outbox, so a start never comes late off its slot.
                    self.0.shared.lock().writing.sink_full = true;
                }
                progress(done.bytes as usize);
            }
        }
        done
    }

    fn settles_itself(&self) -> bool {
        true
    }

    fn ready(&self) -> bool {
        self.0.has_room()
    }
}
