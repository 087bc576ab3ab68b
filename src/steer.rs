//! Steering a running drip from its control socket (`drip ctl`): the
//! wiring's answer to each [`Request`], applied through the parts' own
//! methods under the state lock (admission's pause, the schedule's and the
//! keys' "new limits from now", the runner's job slots), then the threads
//! woken so the change is in force at once.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::control::protocol::{spell, Request};
use crate::control::server::Steer;
use crate::progress::{lock_ui, Ui};
use crate::schedule::{records_per_second, Limit, Unit};
use crate::state::{InForce, Shared};
use crate::stats::json_key;

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
    /// The limit per key in force (`--key-rate`, as changed).
    key_limit: Mutex<Option<Limit>>,
    /// `--share`'s name: its limits are not changed from here.
    share: Option<String>,
}

impl Steering {
    /// Steering for the drip whose state is `shared` and display `ui`,
    /// with `limits` in force and `key_limit`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        ui: Arc<Mutex<Ui>>,
        name: Option<String>,
        (limits, key_limit): (InForce, Option<Limit>),
        share: Option<String>,
    ) -> Steering {
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Steering {
            shared,
            name,
            started,
            limits,
            ui,
            key_limit: Mutex::new(key_limit),
            share,
        }
    }

    /// Who this drip is and where it stands (an entry of `drip ctl list`).
    fn info(&self) -> Value {
        let limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        let spelled = |unit: Unit| -> Vec<String> {
            limits
                .iter()
                .filter(|l| l.unit == unit)
                .map(spell)
                .collect()
        };
        let snap = self.shared.snapshot();
        let key_limit = *self.key_limit.lock().unwrap_or_else(|e| e.into_inner());
        let mut info = json!({
            "pid": std::process::id(),
            "name": self.name,
            "rate": spelled(Unit::Records),
            "byte_rate": spelled(Unit::Bytes),
            "paused": snap.paused,
            "depth": snap.depth,
            "read": snap.counts.read,
            "written": snap.counts.written,
            "started": self.started,
        });
        if let Some(limit) = key_limit {
            info["key_rate"] = json!(spell(&limit));
        }
        if let Some(jobs) = self.shared.jobs.get() {
            info["jobs"] = json!(jobs.slots());
            if let Some(shared) = jobs.stats().share_jobs {
                info["share_jobs"] = json!(shared);
            }
            info["succeeded"] = json!(snap.counts.succeeded);
            info["failed"] = json!(snap.counts.failed);
        }
        if let Some(share) = &self.share {
            info["share"] = json!(share);
        }
        let budgets = self.shared.summary().budgets;
        if !budgets.is_empty() {
            info["budgets"] = json!(budgets);
        }
        info
    }

    /// Pause or resume, and wake the writer (and a reader waiting for
    /// room) to see it.
    fn pause(&self, paused: bool) {
        self.shared.lock().adm.pause(paused);
        self.shared.data_ready.notify_all();
        self.shared.space_ready.notify_all();
        self.shared.wake_jobs();
    }

    /// New global limits from now on: the kinds given replace those in
    /// force.
    fn rate(&self, records: Option<&Vec<Limit>>, bytes: Option<&Vec<Limit>>) -> Result<(), String> {
        if let Some(share) = &self.share {
            return Err(format!(
                "this drip shares its limits with others (--share {share}): they are the same for every drip on the state; stop the drips and start them with the new limits"
            ));
        }
        if self.shared.unpaced {
            return Err(
                "this drip started without a limit (--rate inf): it has no schedule to change; start it with a --rate"
                    .to_string(),
            );
        }
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
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

    /// A new limit per key from now on.
    fn key_rate(&self, limit: Limit) -> Result<(), String> {
        if let Some(share) = &self.share {
            return Err(format!(
                "this drip shares its limits with others (--share {share}): stop the drips and start them with the new --key-rate"
            ));
        }
        let mut st = self.shared.lock();
        let now = self.shared.clock.now();
        let Some(keys) = st.adm.keys_mut() else {
            return Err("this drip has no limits per key (--key)".to_string());
        };
        keys.replace_limit(now, limit.rate, limit.burst);
        drop(st);
        *self.key_limit.lock().unwrap_or_else(|e| e.into_inner()) = Some(limit);
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
                let keys = self.shared.summary().keys;
                return keys
                    .map(|k| serde_json::to_value(k).expect("plain data"))
                    .ok_or_else(|| "this drip has no limits per key (--key)".to_string());
            }
            Request::Jobs => return self.jobs(),
            Request::Pause => self.pause(true),
            Request::Resume => self.pause(false),
            Request::Rate { records, bytes } => self.rate(records.as_ref(), bytes.as_ref())?,
            Request::KeyRate(limit) => self.key_rate(*limit)?,
            Request::Slots(n) => self.jobs_or_refuse()?.set_slots(*n),
        }
        Ok(self.info())
    }
}
