//! Steering a running drip from its control socket (`drip ctl`): the
//! wiring's answer to each [`Request`], applied through the parts' own
//! methods under the state lock (admission's pause, the schedule's and the
//! keys' "new limits from now", the runner's job slots), then the threads
//! woken so the change is in force at once.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::cli::RateTable;
use crate::control::protocol::{spell, Request};
use crate::control::server::Steer;
use crate::cost::Cost;
use crate::progress::{lock_ui, Ui};
use crate::report::keys::KeyLimitView;
use crate::report::schedule::ScheduleRow;
use crate::report::spell::json_key;
use crate::report::Kept;
use crate::schedule::{records_per_second, Limit, Unit};
use crate::schedule::{InForce, KeyInForce, LimitsInForce};
use crate::shared::KeyChange;
use crate::state::Shared;
use crate::sys::Unpoisoned;
use crate::timetable::{Action, Timetable};

/// What the control socket steers: the running drip's state and the
/// limits in force.
pub(crate) struct Steering {
    shared: Arc<Shared>,
    name: Option<String>,
    /// When drip started, seconds since the epoch.
    started: f64,
    /// The global limits in force (`--rate`, `--byte-rate`, as changed),
    /// also read for `--metrics`.
    limits: InForce,
    /// The display, told the new rate.
    ui: Arc<Mutex<Ui>>,
    /// The limit per key in force (`--key-rate`, as changed; under
    /// `--share`, as any drip on the NAME changed it).
    key_limit: KeyInForce,
    /// `--share`'s name, and how its shared limits are changed.
    share: Option<(String, crate::shared::Relimiter)>,
    /// Which costs each cost limit spends (`--cost-rate NAME=`;
    /// [`Cost::none`] without cost limits).
    cost: Cost,
    /// Where the rate table per key comes from (with `--key`: the file
    /// read last, the command line's rows), read again by `key-rates` and
    /// SIGHUP.
    key_table: Mutex<Option<RateTable>>,
}

impl Steering {
    /// Steering for the drip whose state is `shared` and display `ui`,
    /// with `limits` in force and `key_limit`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        ui: Arc<Mutex<Ui>>,
        name: Option<String>,
        in_force: LimitsInForce,
        share: Option<(String, crate::shared::Relimiter)>,
    ) -> Steering {
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Steering {
            shared,
            name,
            started,
            limits: in_force.limits,
            ui,
            key_limit: in_force.key,
            share,
            cost: Cost::none(),
            key_table: Mutex::new(None),
        }
    }

    /// The same steering, reading the rate table per key of `table` again
    /// on a change.
    pub(crate) fn with_key_table(self, table: Option<RateTable>) -> Steering {
        *self.key_table.lock().unpoisoned() = table;
        self
    }

    /// Put the rate table per key in force again, read from `file`, or
    /// (`None`: SIGHUP) from the file read last: each key takes its row
    /// again and keeps its place ([`crate::keyed::Keyed::replace_rates`]),
    /// and with `--exec` its job limit (its row's JOBS, else `--key-jobs`).
    /// The file is read outside the state lock.
    ///
    /// # Errors
    /// No limits per key, `--share`, no file to read again, or a file that
    /// cannot be read or holds a malformed row (the table in force stays):
    /// why, in words.
    pub(crate) fn key_rates(&self, file: Option<&std::path::Path>) -> Result<(), String> {
        let mut table = self.key_table.lock().unpoisoned();
        let Some(source) = table.as_mut() else {
            return Err("this drip has no limits per key (--key)".to_string());
        };
        let Some(file) = file
            .or(source.file.as_deref())
            .map(std::path::Path::to_path_buf)
        else {
            return Err("key-rates: no --key-rates FILE to read again".to_string());
        };
        let rates = source.read(Some(&file))?;
        if let Some((_, relimiter)) = &self.share {
            // Every drip on the NAME (this one too) takes the rows as its
            // keeper follows the change; the JOBS column is this drip's.
            let limits = self.limits.lock().unpoisoned().clone();
            relimiter.relimit(&limits, KeyChange::Rows(&rates))?;
            if let Some(jobs) = self.shared.jobs.get() {
                jobs.set_key_job_rows(&rates);
            }
            source.file = Some(file);
            return Ok(());
        }
        let mut st = self.shared.lock();
        let now = self.shared.clock.now();
        let Some(keys) = st.adm.keys_mut() else {
            return Err("this drip has no limits per key (--key)".to_string());
        };
        let job_rows = self.shared.jobs.get().map(|jobs| (jobs, rates.clone()));
        keys.replace_rates(now, rates);
        drop(st);
        if let Some((jobs, rows)) = job_rows {
            jobs.set_key_job_rows(&rows);
        }
        source.file = Some(file);
        self.shared.data_ready.notify_all();
        self.shared.wake_jobs();
        Ok(())
    }

    /// Every remembered key's row, limit and records waiting, one line
    /// each ([`KeyLimitView::line`]).
    fn key_list(&self) -> Result<Value, String> {
        let st = self.shared.lock();
        let Some(keys) = st.adm.bucket().keys() else {
            return Err("this drip has no limits per key (--key)".to_string());
        };
        let mut views = keys.key_limits();
        drop(st);
        if let Some(jobs) = self.shared.jobs.get() {
            views
                .iter_mut()
                .for_each(|v| v.with_jobs(&|k| jobs.key_jobs_of(k)));
        }
        let lines: Vec<String> = views.iter().map(KeyLimitView::line).collect();
        Ok(json!({ "keys": lines }))
    }

    /// The same steering, knowing which costs each cost limit spends
    /// (`drip ctl … cost-rate NAME=…` finds its limits by them).
    pub(crate) fn with_cost(mut self, cost: Cost) -> Steering {
        self.cost = cost;
        self
    }

    /// The cost limits of `limits` as `--cost-rate` gives them: each
    /// `NAME=RATE:BURST` (`RATE:BURST` for the unnamed cost).
    fn spelled_costs(&self, limits: &[Limit]) -> Vec<String> {
        let names: Vec<Option<&str>> = self.cost.budget_names().collect();
        limits
            .iter()
            .filter(|l| l.unit == Unit::Cost)
            .enumerate()
            .map(|(i, l)| match names.get(i).copied().flatten() {
                Some(name) => format!("{name}={}", spell(l)),
                None => spell(l),
            })
            .collect()
    }

    /// Who this drip is and where it stands (an entry of `drip ctl list`).
    fn info(&self) -> Value {
        // A copy: not held while the figures are read (a keeper following
        // a change holds its lease's lock, which they take, and then takes
        // this one).
        let limits = self.limits.lock().unpoisoned().clone();
        let spelled = |unit: Unit| -> Vec<String> {
            limits
                .iter()
                .filter(|l| l.unit == unit)
                .map(spell)
                .collect()
        };
        let snap = self.shared.snapshot();
        let key_limit = *self.key_limit.lock().unpoisoned();
        let mut info = json!({
            "pid": std::process::id(),
            "name": self.name,
            "rate": spelled(Unit::Records),
            "byte_rate": spelled(Unit::Bytes),
            "cost_rate": self.spelled_costs(&limits),
            "paused": snap.paused,
            "depth": snap.depth,
            "read": snap.counts.read,
            "written": snap.counts.written,
            "started": self.started,
        });
        if let Some(limit) = key_limit.filter(|l| l.rate != crate::rate::Rate::Unlimited) {
            info["key_rate"] = json!(spell(&limit));
        }
        if let Some(source) = &*self.key_table.lock().unpoisoned() {
            if let Some(file) = &source.file {
                info["key_rates"] = json!(file.to_string_lossy());
            }
        }
        // The parts' fields, the runner's (its slots, the records done)
        // first.
        if let Value::Object(fields) = &mut info {
            fields.extend(self.shared.sections_at(&snap).info_fields());
        }
        info
    }

    /// Put a `--schedule` row's action in force, as `drip ctl` would:
    /// `pause` pauses; a rate resumes after a pause and replaces the record
    /// limits (`None`: those of the command line, `base`).
    fn apply(
        &self,
        action: Option<Action>,
        base: &[Limit],
        was_paused: bool,
    ) -> Result<(), String> {
        match action {
            Some(Action::Pause) => {
                self.pause(true);
                return Ok(());
            }
            Some(Action::Rate(limit)) => self.local_records(limit.into_iter().collect())?,
            None => self.local_records(base.to_vec())?,
        }
        if was_paused {
            self.pause(false);
        }
        Ok(())
    }

    /// New record limits of this drip alone (a `--schedule` row's), the
    /// other kinds as they are.
    fn local_records(&self, records: Vec<Limit>) -> Result<(), String> {
        let new = Self::replaced(&self.limits.lock().unpoisoned(), Some(&records), None);
        self.local_rate(new)
    }

    /// Pause or resume, and wake the writer (and a reader waiting for
    /// room) to see it.
    fn pause(&self, paused: bool) {
        self.shared.lock().adm.pause(paused);
        self.shared.data_ready.notify_all();
        self.shared.space_ready.notify_all();
        self.shared.wake_jobs();
    }

    /// New global limits from now on (`drip ctl NAME rate`): the kinds
    /// given replace those in force, and the cost limits of each budget
    /// given (`costs`) theirs; under `--share`, the shared limits of every
    /// drip on the NAME, through the state (each drip follows them at its
    /// keeper's next call, this one too).
    ///
    /// # Errors
    /// A cost limit given that this drip does not have, a schedule that
    /// cannot change, or a shared state that cannot be changed: why.
    fn rate(
        &self,
        records: Option<&Vec<Limit>>,
        bytes: Option<&Vec<Limit>>,
        costs: &[(Option<String>, Limit)],
    ) -> Result<(), String> {
        let mut new = Self::replaced(&self.limits.lock().unpoisoned(), records, bytes);
        let others = new.iter().filter(|l| l.unit != Unit::Cost).count();
        let costs = self.costs_replaced(&new[others..], costs)?;
        new.truncate(others);
        new.extend(costs);
        let Some((_, relimiter)) = &self.share else {
            return self.local_rate(new);
        };
        // Not under the limits' lock: the keeper takes it, under its
        // lease's, when it follows the change.
        relimiter.relimit(&new, KeyChange::Same)?;
        lock_ui(&self.ui).set_rate(records_per_second(&new));
        *self.limits.lock().unpoisoned() = new;
        Ok(())
    }

    /// The cost limits `costs` (in order) with those of each budget in
    /// `given` replaced, in order, by the values given for it (a budget:
    /// the costs a limit spends, `in`, `in+out`, or the unnamed cost).
    ///
    /// # Errors
    /// No cost limit of this drip spends what a value names, or a budget
    /// is given a number of values other than the number of its limits.
    fn costs_replaced(
        &self,
        costs: &[Limit],
        given: &[(Option<String>, Limit)],
    ) -> Result<Vec<Limit>, String> {
        let mut new = costs.to_vec();
        if given.is_empty() {
            return Ok(new);
        }
        let cost = &self.cost;
        if costs.is_empty() || !cost.weighs() {
            return Err("this drip has no cost limit (--cost-rate)".to_string());
        }
        let places = |name: &Option<String>| -> Vec<usize> {
            let places = cost.budgets_named(name.as_deref());
            if places.iter().all(|&p| p < costs.len()) {
                places
            } else {
                Vec::new()
            }
        };
        for (name, _) in given {
            let mine = places(name);
            let shown = name
                .as_deref()
                .map_or("the unnamed cost".to_string(), |n| format!("'{n}'"));
            if mine.is_empty() {
                let spent: Vec<&str> = cost
                    .budget_names()
                    .map(|n| n.unwrap_or("(unnamed)"))
                    .collect();
                return Err(format!(
                    "cost-rate: no cost limit of this drip spends {shown} (its cost limits spend: {})",
                    spent.join(", ")
                ));
            }
            let values: Vec<Limit> = given
                .iter()
                .filter(|(n, _)| places(n) == mine)
                .map(|(_, l)| *l)
                .collect();
            if values.len() != mine.len() {
                return Err(format!(
                    "cost-rate: {shown}: this drip has {} cost limit(s) spending it; give one value for each (got {})",
                    mine.len(),
                    values.len()
                ));
            }
            for (&p, v) in mine.iter().zip(values) {
                new[p] = v;
            }
        }
        Ok(new)
    }

    /// The global limits `limits` with the kinds given replaced.
    fn replaced(
        limits: &[Limit],
        records: Option<&Vec<Limit>>,
        bytes: Option<&Vec<Limit>>,
    ) -> Vec<Limit> {
        let keep = |unit: Unit, given: Option<&Vec<Limit>>| -> Vec<Limit> {
            match given {
                Some(new) => new.clone(),
                None => limits.iter().filter(|l| l.unit == unit).copied().collect(),
            }
        };
        let mut new = keep(Unit::Records, records);
        new.extend(keep(Unit::Bytes, bytes));
        // Limits of another kind (`--cost-rate`) stay as they are.
        new.extend(
            limits
                .iter()
                .filter(|l| !matches!(l.unit, Unit::Records | Unit::Bytes))
                .copied(),
        );
        new
    }

    /// New global limits of this drip alone from now on (`drip ctl`, and
    /// `--schedule`'s rows): `new`, all of them.
    fn local_rate(&self, new: Vec<Limit>) -> Result<(), String> {
        if let Some((share, _)) = &self.share {
            return Err(format!(
                "this drip shares its limits with others (--share {share}): they are the same for every drip on the state; change them with drip ctl"
            ));
        }
        if self.shared.unpaced {
            return Err(
                "this drip started without a limit (--rate inf): it has no schedule to change; start it with a --rate"
                    .to_string(),
            );
        }
        let mut limits = self.limits.lock().unpoisoned();
        // The time is read under the lock.
        let mut st = self.shared.lock();
        st.adm.replace_limits(self.shared.clock.now(), &new)?;
        drop(st);
        lock_ui(&self.ui).set_rate(records_per_second(&new));
        *limits = new;
        self.shared.data_ready.notify_all();
        self.shared.wake_jobs();
        Ok(())
    }

    /// A new limit per key from now on; under `--share`, for every drip on
    /// the NAME, through the state (as [`Steering::rate`]).
    fn key_rate(&self, limit: Limit) -> Result<(), String> {
        if let Some((_, relimiter)) = &self.share {
            let limits = self.limits.lock().unpoisoned().clone();
            relimiter.relimit(&limits, KeyChange::Default(&limit))?;
            *self.key_limit.lock().unpoisoned() = Some(limit);
            return Ok(());
        }
        let mut st = self.shared.lock();
        let now = self.shared.clock.now();
        let Some(keys) = st.adm.keys_mut() else {
            return Err("this drip has no limits per key (--key)".to_string());
        };
        keys.replace_limit(now, limit.rate, limit.burst);
        drop(st);
        *self.key_limit.lock().unpoisoned() = Some(limit);
        self.shared.data_ready.notify_all();
        self.shared.wake_jobs();
        Ok(())
    }

    /// The running jobs.
    fn jobs(&self) -> Result<Value, String> {
        let jobs = self.jobs_or_refuse()?;
        let running: Vec<Value> = jobs
            .running()
            .into_iter()
            .map(|(number, record)| json!({ "job": number, "record": json_key(&record) }))
            .collect();
        let mut stats = serde_json::to_value(jobs.stats()).expect("plain data");
        stats["jobs"] = json!(jobs.slots());
        if let Some(n) = jobs.key_jobs() {
            stats["key_jobs"] = json!(n);
        }
        // The per-job features' figures (the shared job limit's).
        for section in jobs.sections() {
            for (key, value) in section.info_fields() {
                stats[key] = value;
            }
        }
        stats["running"] = Value::Array(running);
        Ok(stats)
    }

    fn jobs_or_refuse(&self) -> Result<&Arc<dyn crate::state::Jobs>, String> {
        self.shared
            .jobs
            .get()
            .ok_or_else(|| "this drip runs no jobs (--exec)".to_string())
    }
}

impl Steer for Steering {
    fn answer(&self, request: &Request) -> Result<Value, String> {
        match request {
            Request::Info => {}
            Request::Stats => {
                return Ok(serde_json::to_value(self.shared.summary()).expect("plain data"))
            }
            Request::Keys => {
                let keys = self.shared.keys_stats();
                return keys
                    .map(|k| serde_json::to_value(k).expect("plain data"))
                    .ok_or_else(|| "this drip has no limits per key (--key)".to_string());
            }
            Request::Jobs => return self.jobs(),
            Request::Pause => self.pause(true),
            Request::Resume => self.pause(false),
            Request::Rate {
                records,
                bytes,
                costs,
            } => self.rate(records.as_ref(), bytes.as_ref(), costs)?,
            Request::KeyRate(limit) => self.key_rate(*limit)?,
            Request::KeyRates(file) => self.key_rates(Some(file))?,
            Request::KeyList => return self.key_list(),
            Request::Slots(n) => self.jobs_or_refuse()?.set_slots(*n),
            Request::KeyJobs(n) => self.jobs_or_refuse()?.set_key_jobs(*n)?,
        }
        Ok(self.info())
    }
}

/// The thread that follows `--schedule`: it puts each row in force at its
/// start on the wall clock, through the same steering as `drip ctl`.
pub(crate) struct Follower {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The longest the follower sleeps before it reads the wall clock again
/// (a clock set while drip runs is seen within this).
const FOLLOW_AT_MOST: Duration = Duration::from_secs(30);

impl Follower {
    /// Put the row in force now (before any record leaves), then start the
    /// thread that follows `table`; `base`: the command line's record
    /// limits, in force while no row matches; `shown`: where the row in
    /// force is kept for the report.
    pub(crate) fn start(
        steering: Arc<Steering>,
        table: Timetable,
        base: Vec<Limit>,
        shown: Arc<Kept<ScheduleRow>>,
    ) -> std::io::Result<Follower> {
        let mut follow = Following {
            steering,
            table,
            base,
            shown,
            row: None,
            paused: false,
            first: true,
        };
        follow.step(jiff::Timestamp::now());
        let (stop, stopped) = mpsc::channel();
        let thread = crate::sys::spawn("drip-schedule", move || follow.run(&stopped))?;
        Ok(Follower {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stop the thread and wait for it.
    pub(crate) fn finish(mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The follower's books: the row in force and whether it paused.
struct Following {
    steering: Arc<Steering>,
    table: Timetable,
    base: Vec<Limit>,
    /// The row in force as the report shows it.
    shown: Arc<Kept<ScheduleRow>>,
    row: Option<usize>,
    paused: bool,
    first: bool,
}

impl Following {
    fn run(&mut self, stopped: &mpsc::Receiver<()>) {
        loop {
            let now = jiff::Timestamp::now();
            let wait = self
                .table
                .next_change(now)
                .and_then(|next| Duration::try_from(next.duration_since(now)).ok())
                .map_or(FOLLOW_AT_MOST, |d| d.min(FOLLOW_AT_MOST));
            match stopped.recv_timeout(wait) {
                Err(mpsc::RecvTimeoutError::Timeout) => self.step(jiff::Timestamp::now()),
                _ => return,
            }
        }
    }

    /// Put the row in force at `now` in force, if it changed, and say so.
    fn step(&mut self, now: jiff::Timestamp) {
        let row = self.table.row_at(now);
        if row != self.row || self.first {
            let action = row.map(|i| self.table.rows()[i].action);
            // Refused only when drip has no schedule to change, which the
            // command line rules out.
            let _ = self.steering.apply(action, &self.base, self.paused);
            self.paused = action == Some(Action::Pause);
            self.row = row;
            self.first = false;
        }
        let zone = self.table.zone();
        let next = self.table.next_change(now);
        let shown = ScheduleRow {
            row: row.map_or(0, |i| i + 1),
            text: row.map(|i| self.table.rows()[i].text.clone()),
            until: next.map(|t| {
                t.to_zoned(zone.clone())
                    .strftime("%Y-%m-%dT%H:%M:%S%:z")
                    .to_string()
            }),
            zone: zone.iana_name().unwrap_or("local").to_string(),
            until_unix: next.map(|t| t.as_millisecond() as f64 / 1e3),
            until_clock: next.map(|t| crate::report::schedule::clock_at(t, now, zone)),
            pauses: row.is_some_and(|i| self.table.rows()[i].action == Action::Pause),
        };
        self.shown.set(shown);
    }
}
