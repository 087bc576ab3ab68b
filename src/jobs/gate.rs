//! The gate: a stage of the pace ([`Stage`]) in front of the configured
//! limits that the command runner (or anything else that learns a service
//! is overloaded) closes and narrows, for every start or for one key's.
//! Admission and the writer see only the pace, so a pause holds records in
//! the bucket,
//! where the overflow policy applies (with `block`, the producer upstream
//! is held back).
//!
//! # The interface
//!
//! Whoever holds the [`GateControl`] acts on a [`Scope`]: every start
//! ([`Scope::All`]) or the starts of one key ([`Scope::Key`], with `--key`;
//! the keyed queues ask [`crate::pace::Pace::key_due`] for each key, so a
//! held key waits in the line and never holds back another):
//!
//! - [`GateControl::pause`]: nothing of the scope starts before a time;
//! - `slow`: after a pause the scope's rate comes back gradually
//!   ([`RateRecovery`]), from half the rate it had, not at once;
//! - `narrow`: a least spacing of starts (the lowered rate of `--adapt`; 0
//!   lifts it);
//! - the runner pauses, slows and narrows a scope through its overload
//!   books, kept here under the same lock ([`super::overload`]:
//!   `GateControl::overload`, `GateControl::succeeded`), so the three are
//!   decided at once;
//! - [`GateControl::set_quota_spacing`]: another least spacing, the pace
//!   that makes the quota a server announces last until its reset (the
//!   larger spacing holds);
//! - [`GateControl::due`]: when the scope may next start (for the runner's
//!   retries, which take their slots themselves);
//! - [`GateControl::limit_key_jobs`]: at most N jobs of one key at once
//!   (`--key-jobs`, [`super::key_jobs`]; a key's own from the JOBS column
//!   of the rate table, [`GateControl::key_job_rows`]): a key at its limit is held until
//!   one of its jobs ends ([`GateControl::key_job_ended`]), when the
//!   keyed queues hear it is free ([`Stage::keys_freed`]).
//!
//! A retry whose backoff has ended goes ahead of the records waiting in the
//! bucket: the runner announces it ([`GateControl::retry_waits`]); while it
//! is due and waits, the gate lets no waiting record take the next slot,
//! and the retry takes it ([`GateControl::as_retry`]). Unlimited schedules
//! have no slots to give first: there the job slot is the retry's.
//!
//! No threads, no clock, no I/O: the state is behind one short lock that
//! takes no other; times are ns on the caller's clock, rates records per
//! second.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::key_jobs::KeyJobs;
pub use super::overload::Scope;
use super::overload::{Decision, Figures, Overload, OverloadPolicy, Overloads};
use super::quota;
use crate::pace::{Behind, Releasing, Stage, UNTIL_FREED};
use crate::sys::Unpoisoned;

/// After a pause, the rate comes back gradually: from `from` at `start`,
/// rising by a tenth of `full` a second (the additive increase of AIMD,
/// Chiu and Jain, 1989), up to `full`. Records per second; ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateRecovery {
    /// The scope's configured rate.
    pub full: f64,
    /// The rate when the ramp starts.
    pub from: f64,
    /// When it starts (the pause's end).
    pub start: u64,
}

impl RateRecovery {
    /// The rate at `t` (ns).
    pub fn rate_at(&self, t: u64) -> f64 {
        let secs = t.saturating_sub(self.start) as f64 / 1e9;
        (self.from + self.full / 10.0 * secs).min(self.full)
    }

    /// The least spacing of starts at `t` (ns; 0 once back at `full`).
    pub fn spacing_at(&self, t: u64) -> u64 {
        let rate = self.rate_at(t);
        if rate < self.full {
            (1e9 / rate) as u64
        } else {
            0
        }
    }

    /// Whether the ramp is over at `t`.
    pub fn is_over(&self, t: u64) -> bool {
        self.rate_at(t) >= self.full
    }
}

/// What holds one scope back.
#[derive(Debug, Clone, Default)]
struct ScopeHold {
    paused_until: u64,
    /// `--adapt`'s least spacing, ns.
    spacing_ns: u64,
    /// The announced quota's least spacing, ns.
    quota_ns: u64,
    /// The spacing the tokens of the last start take, ns (announced token
    /// quotas: [`super::quota::Tokens`]).
    tokens_ns: u64,
    ramp: Option<RateRecovery>,
    /// When the scope's last record started (ns).
    last: Option<u64>,
}

impl ScopeHold {
    /// The least spacing after a start at `t`, ns.
    fn spacing_after(&self, t: u64) -> u64 {
        let ramp = self.ramp.map_or(0, |r| r.spacing_at(t));
        self.spacing_ns
            .max(self.quota_ns)
            .max(self.tokens_ns)
            .max(ramp)
    }

    /// When the scope may next start (ns; 0: now).
    fn due(&self) -> u64 {
        let spaced = match self.last {
            Some(last) => last.saturating_add(self.spacing_after(last)),
            None => 0,
        };
        self.paused_until.max(spaced)
    }

    /// Whether it holds nothing back from `now` on.
    fn is_idle(&self, now: u64) -> bool {
        self.paused_until <= now
            && self.spacing_ns == 0
            && self.quota_ns == 0
            && (self.tokens_ns == 0
                || self
                    .last
                    .map_or(true, |t| t.saturating_add(self.tokens_ns) <= now))
            && self.ramp.map_or(true, |r| r.is_over(now))
    }
}

/// What the gate's lock guards: each scope's hold, the retries waiting,
/// and the overloads' books ([`super::overload`]).
#[derive(Debug, Default)]
pub(super) struct Holds {
    all: ScopeHold,
    keys: HashMap<Box<[u8]>, ScopeHold>,
    /// Retries announced: by the runner's record number, when their
    /// backoff ends (ns) and their scope.
    retries: BTreeMap<u64, (u64, Scope)>,
    /// A retry is taking its slot now.
    retry_turn: bool,
    /// The job slots (`-j`) neither running a record nor promised to one
    /// released and not started yet: a release never lets more records
    /// go than there are such slots, so a record leaves (and spends its
    /// budgets) when it can start, not long before, waiting for a slot
    /// that retries hold. Below 0 while `drip ctl NAME -j` took away
    /// slots still busy. `None`: not counted (no runner).
    unpromised: Option<i64>,
    /// Each scope's overloads and quota window.
    pub(super) overloads: Overloads,
    /// Each key's jobs against `--key-jobs`.
    key_jobs: KeyJobs,
}

impl Holds {
    /// A record of `key` started at `now`: its hold counts its spacing from
    /// there, and goes once idle.
    fn key_started(&mut self, key: &[u8], now: u64) {
        if let Some(hold) = self.keys.get_mut(key) {
            hold.last = Some(now);
            if hold.is_idle(now) {
                self.keys.remove(key);
            }
        }
    }

    fn hold(&self, scope: &Scope) -> Option<&ScopeHold> {
        match scope {
            Scope::All => Some(&self.all),
            Scope::Key(k) => self.keys.get(k),
        }
    }

    fn hold_mut(&mut self, scope: &Scope) -> &mut ScopeHold {
        match scope {
            Scope::All => &mut self.all,
            Scope::Key(k) => self.keys.entry(k.clone()).or_default(),
        }
    }

    fn due(&self, scope: &Scope) -> u64 {
        let own = self.hold(scope).map_or(0, ScopeHold::due);
        match scope {
            Scope::All => own,
            Scope::Key(_) => own.max(self.all.paused_until),
        }
    }

    /// Nothing of `scope` starts before `until` (ns); a pause only ever
    /// lengthens. Returns how much it lengthened the pause from `now` (ns;
    /// 0: it was paused as long already).
    pub(super) fn pause(&mut self, scope: &Scope, now: u64, until: u64) -> u64 {
        let hold = self.hold_mut(scope);
        let before = hold.paused_until.max(now);
        hold.paused_until = hold.paused_until.max(until);
        until.saturating_sub(before)
    }

    /// When `scope`'s pause ends (ns); a key's ends no earlier than every
    /// start's.
    pub(super) fn paused_until(&self, scope: &Scope) -> u64 {
        let own = self.hold(scope).map_or(0, |h| h.paused_until);
        own.max(self.all.paused_until)
    }

    /// After an overload at `now`, `scope`'s rate (`full` when back)
    /// comes back gradually from `resume` on, from half the rate it had.
    pub(super) fn slow(&mut self, scope: &Scope, now: u64, resume: u64, full: f64) {
        let hold = self.hold_mut(scope);
        let had = hold.ramp.map_or(full, |r| r.rate_at(now));
        hold.ramp = Some(RateRecovery {
            full,
            from: (had / 2.0).max(full / 1000.0),
            start: resume,
        });
    }

    /// A start of `scope` at `now` spent tokens that take `ns`: its next
    /// start waits that long after this one.
    pub(super) fn space_tokens(&mut self, scope: &Scope, now: u64, ns: u64) {
        let hold = self.hold_mut(scope);
        hold.tokens_ns = ns;
        hold.last = Some(hold.last.map_or(now, |t| t.max(now)));
    }

    /// Keep `scope`'s starts at least `ns` apart (`--adapt`; 0: lifted).
    pub(super) fn narrow(&mut self, scope: &Scope, ns: u64) {
        self.hold_mut(scope).spacing_ns = ns;
    }

    /// Retries whose backoff and scope let them start by `t`.
    fn retries_due_by(&self, t: u64) -> usize {
        self.retries
            .values()
            .filter(|(at, scope)| *at <= t && self.due(scope) <= t)
            .count()
    }
}

/// What the runner sets: pauses, ramps and spacings of starts, per scope,
/// and the retries waiting for a slot. See the module's notes.
#[derive(Debug)]
pub struct GateControl {
    holds: Mutex<Holds>,
    /// The configured rate, and each key's (records per second; infinite:
    /// no ramp after a pause).
    rate: f64,
    key_rate: f64,
}

impl Default for GateControl {
    fn default() -> GateControl {
        GateControl::new(f64::INFINITY, f64::INFINITY)
    }
}

impl GateControl {
    /// A gate over starts at `rate` records per second, each key's at
    /// `key_rate` (infinite when not limited).
    pub fn new(rate: f64, key_rate: f64) -> GateControl {
        GateControl {
            holds: Mutex::new(Holds::default()),
            rate,
            key_rate,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Holds> {
        self.holds.lock().unpoisoned()
    }

    /// The runner has `slots` job slots, none busy: releases are counted
    /// against them from now on (with `--budget`: a shared schedule, which
    /// reserves slots for the records waiting, is told of fewer then).
    pub fn count_slots(&self, slots: usize) {
        self.lock().unpromised = Some(i64::try_from(slots).unwrap_or(i64::MAX));
    }

    /// A job slot was given back (its record done).
    pub(super) fn slot_freed(&self) {
        self.slots_changed(1, 0);
    }

    /// The job slots changed from `old` to `new` (`drip ctl NAME -j`).
    pub(super) fn slots_changed(&self, new: usize, old: usize) {
        let signed = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(n) = self.lock().unpromised.as_mut() {
            *n = n.saturating_add(signed(new)).saturating_sub(signed(old));
        }
    }

    /// The configured rate of `scope` (infinite: not limited).
    pub(super) fn full_rate(&self, scope: &Scope) -> f64 {
        match scope {
            Scope::All => self.rate,
            Scope::Key(_) => self.key_rate,
        }
    }

    /// Nothing of `scope` starts before `until` (ns); a pause only ever
    /// lengthens. Returns how much it lengthened the pause from `now` (ns;
    /// 0: it was paused as long already).
    pub fn pause(&self, scope: &Scope, now: u64, until: u64) -> u64 {
        self.lock().pause(scope, now, until)
    }

    /// When `scope`'s pause ends (ns; at or before now: not paused). A
    /// key's pause ends no earlier than every start's.
    pub fn paused_until(&self, scope: &Scope) -> u64 {
        self.lock().paused_until(scope)
    }

    /// When `scope` may next start (ns): its pause, and its spacing after
    /// its last start.
    pub fn due(&self, scope: &Scope) -> u64 {
        self.lock().due(scope)
    }

    /// After an overload at `now`, `scope`'s rate comes back gradually from
    /// `resume` on (the pause's end): from half the rate it had at `now`
    /// ([`RateRecovery`]). Nothing when its rate is not limited. (The runner slows
    /// a scope through its overload books: `GateControl::overload`.)
    #[cfg(test)]
    pub fn slow(&self, scope: &Scope, now: u64, resume: u64) {
        let full = self.full_rate(scope);
        if !full.is_finite() {
            return;
        }
        self.lock().slow(scope, now, resume, full);
    }

    /// The rate `scope` may start at, at `now` (records per second): its
    /// ramp's, or its configured rate.
    pub fn rate_at(&self, scope: &Scope, now: u64) -> f64 {
        let holds = self.lock();
        let full = self.full_rate(scope);
        holds
            .hold(scope)
            .and_then(|h| h.ramp)
            .map_or(full, |r| r.rate_at(now))
    }

    /// Keep `scope`'s starts at least `ns` apart (0: only the limits pace).
    /// (The runner narrows a scope through its overload books.)
    #[cfg(test)]
    pub fn narrow(&self, scope: &Scope, ns: u64) {
        self.lock().narrow(scope, ns);
    }

    /// Keep `scope`'s starts at least `ns` apart so the quota a server
    /// announced lasts until its reset (0: the quota does not pace).
    pub fn set_quota_spacing(&self, scope: &Scope, ns: u64) {
        let mut holds = self.lock();
        holds.hold_mut(scope).quota_ns = ns;
    }

    /// A record of `scope` started at `now` (every start's is noted by the
    /// gate itself when it releases one; a start later than its release
    /// is noted here).
    pub fn started(&self, scope: &Scope, now: u64) {
        let mut holds = self.lock();
        if *scope == Scope::All {
            holds.all.last = Some(now);
        }
        if let Scope::Key(key) = scope {
            holds.key_started(key, now);
        }
    }

    /// Keys held back at `now`: paused, slowed or narrowed.
    #[cfg(test)]
    pub fn held_keys(&self, now: u64) -> Vec<Box<[u8]>> {
        let holds = self.lock();
        let mut keys: Vec<Box<[u8]>> = holds
            .keys
            .iter()
            .filter(|(_, h)| !h.is_idle(now))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Keys whose own pause lasts past `now` (sorted): those an overload
    /// stopped, not those only slowed or narrowed (`held_keys`).
    pub fn paused_keys(&self, now: u64) -> Vec<Box<[u8]>> {
        let holds = self.lock();
        let mut keys: Vec<Box<[u8]>> = holds
            .keys
            .iter()
            .filter(|(_, h)| h.paused_until > now)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// At most `n` jobs of one key at once from now on (`--key-jobs`,
    /// `drip ctl … key-jobs`): each key's records count from the moment
    /// the keyed queues let them go until they are done
    /// ([`GateControl::key_job_ended`]).
    pub fn limit_key_jobs(&self, n: u32) {
        self.lock().key_jobs.set_limit(n);
    }

    /// Each key's job limit from now on its row's JOBS column in `rows`
    /// (the rate table per key), else `--key-jobs` ([`super::key_jobs::limit_for`]);
    /// a key held below its new limit goes again at once.
    pub fn key_job_rows(&self, rows: &crate::keyed::KeyRates) {
        self.lock().key_jobs.set_rows(rows);
    }

    /// `key`'s job limit (`None`: none) and its jobs running (counted from
    /// leaving the keyed queues until done); `None`: jobs are not counted.
    pub fn key_jobs_of(&self, key: &[u8]) -> Option<(Option<u32>, u32)> {
        self.lock().key_jobs.of(key)
    }

    /// The job limit of every key, if one is set.
    pub fn key_jobs_limit(&self) -> Option<usize> {
        let limit = self.lock().key_jobs.limit()?;
        Some(usize::try_from(limit).unwrap_or(usize::MAX))
    }

    /// A record of `key` is done (it ran, or will not): a key held at its
    /// job limit may go again (the caller wakes the writer).
    pub fn key_job_ended(&self, key: &[u8]) {
        self.lock().key_jobs.ended(key);
    }

    /// Keys held at their job limit now, and how many times a key was.
    #[cfg(test)]
    pub fn key_jobs_figures(&self) -> (u64, u64) {
        self.lock().key_jobs.figures()
    }

    /// Retry `id` of `scope` may start at `at` (ns): from then until it
    /// starts ([`GateControl::as_retry`]) or is given up
    /// ([`GateControl::retry_done`]), it goes before the waiting records.
    pub fn retry_waits(&self, id: u64, at: u64, scope: Scope) {
        self.lock().retries.insert(id, (at, scope));
    }

    /// Retry `id` started or was given up.
    pub fn retry_done(&self, id: u64) {
        self.lock().retries.remove(&id);
    }

    /// Run `f` (taking a slot of the schedule) as a retry: the slots kept
    /// for retries are its to take.
    pub fn as_retry<R>(&self, f: impl FnOnce() -> R) -> R {
        self.lock().retry_turn = true;
        let r = f();
        self.lock().retry_turn = false;
        r
    }
}

/// The overloads' books (`overload.rs`), decided under the gate's lock
/// and put in force on its holds at once.
impl GateControl {
    /// An overload of `scope` (`report`, [`Overloads::overload`]): its
    /// scope paused for its `Retry-After` or the `policy`'s growing
    /// backoff, then its rate back gradually; under `--adapt` its rate
    /// lowered.
    pub(super) fn overload(&self, scope: &Scope, report: Overload, policy: OverloadPolicy<'_>) {
        let full = self.full_rate(scope);
        let now = report.now;
        let mut holds = self.lock();
        let verdict: Decision = holds.overloads.overload(scope, report, policy);
        let began = holds.paused_until(scope) <= now;
        let lengthened = holds.pause(scope, now, now.saturating_add(verdict.wait));
        holds.overloads.paused(lengthened, began);
        if verdict.fresh {
            if full.is_finite() {
                let resume = holds.paused_until(scope);
                holds.slow(scope, now, resume, full);
            }
            if let Some(spacing) = verdict.spacing {
                holds.narrow(scope, spacing);
            }
        }
    }

    /// An attempt of `scope` succeeded: under `--adapt` its rate rises.
    /// Whether the gate changed.
    pub(super) fn succeeded(&self, scope: &Scope) -> bool {
        let mut holds = self.lock();
        let Some(spacing) = holds.overloads.succeeded(scope) else {
            return false;
        };
        holds.narrow(scope, spacing);
        true
    }

    /// The quota `q` a response of `scope` announced ([`Overloads::observe_quota`]).
    pub(super) fn observe_quota(
        &self,
        scope: &Scope,
        now: u64,
        q: quota::Quota,
        read_while: u64,
    ) -> Option<quota::Quota> {
        self.lock()
            .overloads
            .observe_quota(scope, now, q, read_while)
    }

    /// The token quota of `budget` a response of `scope` announced
    /// ([`Overloads::observe_tokens`]).
    pub(super) fn observe_tokens(
        &self,
        scope: &Scope,
        budget: &str,
        now: u64,
        read: quota::TokensRead,
    ) {
        self.lock()
            .overloads
            .observe_tokens(scope, budget, now, read);
    }

    /// Whether a quota of `budget` is kept for `scope`.
    pub(super) fn reads_tokens(&self, scope: &Scope, budget: &str) -> bool {
        self.lock().overloads.reads_tokens(scope, budget)
    }

    /// `budget`'s quota of `scope` forgotten.
    pub(super) fn forget_tokens(&self, scope: &Scope, budget: &str) {
        self.lock().overloads.forget_tokens(scope, budget);
    }

    /// A record of `scope` settled ([`Overloads::settled_tokens`]).
    pub(super) fn settled_tokens(
        &self,
        scope: &Scope,
        estimated: &[(&str, u64)],
        spent: &[(&str, u64)],
    ) {
        self.lock()
            .overloads
            .settled_tokens(scope, estimated, spent);
    }

    /// A start of `scope` at `now` costing `costs` tokens of each budget
    /// ([`Overloads::spend_tokens`]): spent, and the scope's next start
    /// spaced by them; or `Err` says until when the start waits, a scope
    /// waiting for a reset paused until then.
    pub(super) fn spend_tokens(
        &self,
        scope: &Scope,
        now: u64,
        costs: &[quota::Spend],
    ) -> Result<(), quota::Hold> {
        let mut holds = self.lock();
        match holds.overloads.spend_tokens(scope, now, costs) {
            Err(hold) => {
                if let quota::Hold::Reset(until) = hold {
                    holds.pause(scope, now, until);
                }
                Err(hold)
            }
            Ok(Some(spacing)) => {
                holds.space_tokens(scope, now, spacing);
                Ok(())
            }
            Ok(None) => Ok(()),
        }
    }

    /// The overloads' figures at `now`.
    pub(super) fn overload_figures(&self, now: u64) -> Figures {
        let holds = self.lock();
        let paused_left = holds.paused_until(&Scope::All).saturating_sub(now);
        holds.overloads.figures(paused_left)
    }
}

/// The gate: a stage of the pace, in front of the limits, that
/// [`GateControl`] closes (a pause), slows or narrows.
#[derive(Debug)]
pub struct Gate {
    control: Arc<GateControl>,
}

impl Gate {
    /// A gate that `control` opens and closes.
    pub fn new(control: Arc<GateControl>) -> Gate {
        Gate { control }
    }

    /// Whether announced retries may take slots ahead of waiting records:
    /// only where there are slots (a limit behind, or a spacing).
    fn retries_first(holds: &Holds, t: u64, unlimited: bool) -> bool {
        !holds.retry_turn && (!unlimited || holds.all.spacing_after(t) > 0)
    }

    /// How much later than the first the `n`-th departure from now may
    /// be, ns (`None`: not known yet).
    fn after_first(holds: &Holds, record: &[u8], n: usize, behind: &Behind<'_>) -> Option<u64> {
        let later = behind
            .nth_due(record, n)?
            .saturating_sub(behind.next_due(record));
        let spacing = holds.all.spacing_after(holds.all.due());
        Some(later.max(spacing.saturating_mul(n as u64)))
    }
}

impl Stage for Gate {
    fn release(&mut self, now: u64, available: usize, behind: &mut Releasing<'_, '_, '_>) -> usize {
        let mut holds = self.control.lock();
        if now < holds.all.due() {
            return 0;
        }
        if Gate::retries_first(&holds, now, behind.is_unlimited()) && holds.retries_due_by(now) > 0
        {
            return 0;
        }
        let available = if holds.all.spacing_after(now) > 0 {
            available.min(1)
        } else {
            available
        };
        // A retry holds its slot; a record leaving now is promised one.
        let promised = (!holds.retry_turn).then_some(holds.unpromised).flatten();
        let available = promised.map_or(available, |free| {
            available.min(usize::try_from(free.max(0)).unwrap_or(usize::MAX))
        });
        let n = behind.release(available);
        if n > 0 {
            holds.all.last = Some(now);
        }
        if !holds.retry_turn {
            if let Some(free) = holds.unpromised.as_mut() {
                *free -= i64::try_from(n).unwrap_or(i64::MAX);
            }
        }
        n
    }

    fn next_due(&self, record: &[u8], behind: &Behind<'_>) -> u64 {
        let holds = self.control.lock();
        let due = behind.next_due(record).max(holds.all.due());
        if !Gate::retries_first(&holds, due, behind.is_unlimited()) {
            return due;
        }
        // The retries due by then take the slots from `due` on.
        match holds.retries_due_by(due) {
            0 => due,
            k => {
                let later = Gate::after_first(&holds, record, k, behind);
                due.saturating_add(later.unwrap_or(1_000_000))
            }
        }
    }

    fn nth_due(&self, record: &[u8], n: usize, behind: &Behind<'_>) -> Option<u64> {
        // The answer of the part behind (a shared base knows it only for
        // the slots it holds), moved as far as a pause moves the first.
        let after_first = Gate::after_first(&self.control.lock(), record, n, behind)?;
        Some(self.next_due(record, behind).saturating_add(after_first))
    }

    fn limits(&self) -> bool {
        false
    }

    fn copy(&self) -> Option<Box<dyn Stage>> {
        None
    }

    fn floor(&self, now: u64, _: u64) -> u64 {
        now
    }

    fn holds_keys(&self) -> bool {
        true
    }

    fn key_due(&self, key: &[u8]) -> u64 {
        let mut holds = self.control.lock();
        if holds.key_jobs.at_limit(key) {
            return UNTIL_FREED;
        }
        holds.keys.get(key).map_or(0, ScopeHold::due)
    }

    fn key_left(&mut self, key: &[u8], now: u64) {
        let mut holds = self.control.lock();
        holds.key_started(key, now);
        holds.key_jobs.left(key);
    }

    fn keys_freed(&mut self, freed: &mut dyn FnMut(&[u8])) {
        let keys = self.control.lock().key_jobs.take_freed();
        keys.iter().for_each(|key| freed(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::{Base, Leased, Pace};
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Schedule, Unit};

    const MS: u64 = 1_000_000;

    fn gate(rate: &str) -> (Pace, Arc<GateControl>) {
        let limits: Vec<Limit> = match parse_rate(rate).unwrap() {
            crate::rate::Rate::Unlimited => vec![],
            r => vec![Limit {
                rate: r,
                burst: 1,
                unit: Unit::Records,
            }],
        };
        let control = Arc::new(GateControl::default());
        (gated(Limits::new(&limits), &control), control)
    }

    /// `limits` behind a gate that `control` opens and closes.
    fn gated(limits: Limits, control: &Arc<GateControl>) -> Pace {
        Pace::local(limits).with_stage(Box::new(Gate::new(Arc::clone(control))))
    }

    fn release(g: &mut Pace, now: u64, available: usize) -> usize {
        g.release(now, available, &mut std::iter::empty())
    }

    /// A base that does not know when its later records may go (as a
    /// shared one before its slots are reserved).
    #[derive(Debug)]
    struct Unknowing(Limits);

    impl Schedule for Unknowing {
        fn weighs_bytes(&self) -> bool {
            false
        }
        fn release(&mut self, now: u64, n: usize, s: &mut dyn Iterator<Item = &[u8]>) -> usize {
            self.0.release(now, n, s)
        }
        fn next_due(&self, record: &[u8]) -> u64 {
            self.0.next_due(record)
        }
        fn nth_due(&self, _: &[u8], _: usize) -> Option<u64> {
            None
        }
        fn slack_ns(&self) -> u64 {
            self.0.slack_ns()
        }
        fn records_per_second(&self) -> f64 {
            self.0.records_per_second()
        }
    }

    impl Leased for Unknowing {
        fn wrote(&mut self, _: u64, _: usize) {}
        fn expired(&mut self, _: u64, _: usize, _: &mut dyn Iterator<Item = &[u8]>) {}
        fn settle(&mut self, _: u64, _: &[u8], _: &[Option<u64>]) {}
    }

    #[test]
    fn the_nth_departure_is_the_inner_schedules_moved_by_a_pause() {
        let (g, c) = gate("10/s");
        assert_eq!(g.nth_due(b"x", 3), Some(300 * MS));
        c.pause(&Scope::All, 0, 1000 * MS);
        assert_eq!(g.nth_due(b"x", 3), Some(1300 * MS));
        let limits = [Limit {
            rate: parse_rate("10/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        }];
        let unknowing = Pace::new(Base::Shared(Box::new(Unknowing(Limits::new(&limits)))))
            .with_stage(Box::new(Gate::new(c)));
        assert_eq!(
            unknowing.nth_due(b"x", 3),
            None,
            "not a guess from the rate"
        );
    }

    /// With job slots counted, a release lets go no more records than
    /// there are slots neither busy nor promised: a record leaves (and
    /// spends a budget's count) when it can start, not while the slots are
    /// held by retries. A retry, holding its slot, is not counted.
    #[test]
    fn a_release_lets_go_no_more_records_than_free_job_slots() {
        let budget = crate::budget::parse_budget("3/second@UTC").unwrap();
        let budgets = crate::pace::BudgetStage::new(
            vec![crate::budget::Counter::new(budget, 0)],
            crate::budget::Exhausted::Wait,
        );
        let control = Arc::new(GateControl::default());
        let mut g = Pace::local(Limits::new(&[]))
            .with_stage(Box::new(budgets))
            .with_stage(Box::new(Gate::new(Arc::clone(&control))));
        control.count_slots(1);
        assert_eq!(release(&mut g, 0, 5), 1, "one slot: one record");
        assert_eq!(release(&mut g, MS, 5), 0, "its slot is promised");
        // The record's attempts fail; its retries take the window's other
        // two starts, holding the slot.
        assert_eq!(control.as_retry(|| release(&mut g, 2 * MS, 1)), 1);
        assert_eq!(control.as_retry(|| release(&mut g, 3 * MS, 1)), 1);
        control.slot_freed();
        assert_eq!(
            release(&mut g, 4 * MS, 5),
            0,
            "the window's three are spent"
        );
        assert_eq!(release(&mut g, 1000 * MS, 5), 1, "the next window's first");
        // `drip ctl NAME -j 3`: two more slots.
        control.slots_changed(3, 1);
        assert_eq!(release(&mut g, 1001 * MS, 5), 2);
        assert_eq!(release(&mut g, 1002 * MS, 5), 0);
        // `-j 1` while the three run: none is free until two have ended
        // and the third is done.
        control.slots_changed(1, 3);
        control.slot_freed();
        control.slot_freed();
        assert_eq!(release(&mut g, 2000 * MS, 5), 0);
        control.slot_freed();
        assert_eq!(release(&mut g, 2001 * MS, 5), 1);
        assert_eq!(release(&mut g, 2002 * MS, 5), 0);
    }

    #[test]
    fn a_pause_allows_nothing_before_its_end_then_the_rate_resumes() {
        let (mut g, c) = gate("10/s");
        assert_eq!(release(&mut g, 0, 5), 1);
        c.pause(&Scope::All, 0, 1000 * MS);
        for t in [100, 500, 999] {
            assert_eq!(release(&mut g, t * MS, 5), 0, "at {t} ms");
        }
        assert_eq!(g.next_due(b"x"), 1000 * MS);
        // A shorter pause does not shorten it.
        c.pause(&Scope::All, 0, 10 * MS);
        assert_eq!(g.next_due(b"x"), 1000 * MS);
        // Resumes with one record, no catch-up burst, then 100 ms apart.
        assert_eq!(release(&mut g, 1000 * MS, 5), 1);
        assert_eq!(release(&mut g, 1050 * MS, 5), 0);
        assert_eq!(release(&mut g, 1100 * MS, 5), 1);
    }

    #[test]
    fn unlimited_behind_a_pause_is_held_too() {
        let (mut g, c) = gate("inf");
        assert_eq!(release(&mut g, 0, 50), 50);
        c.pause(&Scope::All, 0, 20 * MS);
        assert_eq!(release(&mut g, 10 * MS, 50), 0);
        assert_eq!(g.next_due(b"x"), 20 * MS);
        assert_eq!(release(&mut g, 20 * MS, 50), 50);
    }

    #[test]
    fn spacing_lowers_the_rate_and_lifts_with_it() {
        let (mut g, c) = gate("100/s");
        c.narrow(&Scope::All, 50 * MS);
        assert_eq!(release(&mut g, 0, 5), 1);
        assert_eq!(release(&mut g, 10 * MS, 5), 0);
        assert_eq!(g.next_due(b"x"), 50 * MS);
        assert_eq!(release(&mut g, 50 * MS, 5), 1);
        c.narrow(&Scope::All, 0);
        assert_eq!(release(&mut g, 60 * MS, 5), 1);
        assert_eq!(g.next_due(b"x"), 70 * MS);
    }

    fn keyed(rate: &str) -> crate::keyed::Keyed {
        use crate::key::{parse_key, KeySpec};
        let config = crate::keyed::KeyConfig {
            spec: KeySpec::new(parse_key("1").unwrap(), None),
            rate: parse_rate(rate).unwrap(),
            burst: 1,
            rates: Default::default(),
            max_keys: 100,
            key_capacity: 100,
        };
        crate::keyed::Keyed::new(config, b'\n', 1000, None)
    }

    /// Drive `keyed` behind `g` as the writer does: records arrive at 0,
    /// then it wakes at every event. Returns (record, ms) as they left.
    fn departures(keyed: &mut crate::keyed::Keyed, g: &mut Pace, text: &str) -> Vec<(String, u64)> {
        use crate::bucket::{Overflow, Segment};
        let mut ledger = crate::ledger::Ledger::new(false);
        let mut outbox = Vec::new();
        let mut left = Vec::new();
        let seg = Segment::new(bytes::Bytes::from(text.to_string()), b'\n');
        keyed.arrive(
            seg,
            Overflow::Block,
            &mut ledger,
            &mut crate::outflow::Outflow::at(0, g, &mut outbox),
        );
        let mut now = 0;
        loop {
            for seg in outbox.drain(..) {
                for r in seg.records() {
                    left.push((String::from_utf8_lossy(r).trim_end().to_string(), now / MS));
                }
            }
            match keyed.next_event(&*g) {
                Some(t) => now = t.max(now),
                None => return left,
            }
            keyed.release(&mut crate::outflow::Outflow::at(now, g, &mut outbox));
        }
    }

    #[test]
    fn a_paused_key_waits_and_the_other_keys_go_on() {
        let (mut g, c) = gate("inf");
        let mut k = keyed("10/s");
        c.pause(&Scope::Key(b"a"[..].into()), 0, 1000 * MS);
        let left = departures(&mut k, &mut g, "a 1\nb 1\na 2\nb 2\nb 3\n");
        let at = |r: &str| left.iter().find(|(x, _)| x == r).unwrap().1;
        assert_eq!((at("b 1"), at("b 2"), at("b 3")), (0, 100, 200));
        assert_eq!((at("a 1"), at("a 2")), (1000, 1100));
    }

    /// [`departures`] with a job for each record that leaves, of
    /// `job_ms(key)`, its end told to `c`: returns (record, ms) as they
    /// left, and the most jobs of one key that ran at once.
    fn departures_with_jobs(
        keyed: &mut crate::keyed::Keyed,
        g: &mut Pace,
        c: &GateControl,
        text: &str,
        job_ms: fn(&str) -> u64,
    ) -> (Vec<(String, u64)>, u32) {
        use crate::bucket::{Overflow, Segment};
        let mut ledger = crate::ledger::Ledger::new(false);
        let mut outbox = Vec::new();
        let (mut left, mut running, mut most) = (Vec::new(), Vec::<(u64, String)>::new(), 0);
        let seg = Segment::new(bytes::Bytes::from(text.to_string()), b'\n');
        let mut out = crate::outflow::Outflow::at(0, g, &mut outbox);
        keyed.arrive(seg, Overflow::Block, &mut ledger, &mut out);
        let mut now = 0;
        loop {
            for seg in outbox.drain(..) {
                for r in seg.records() {
                    let r = String::from_utf8_lossy(r).trim_end().to_string();
                    let key = r.split(' ').next().unwrap().to_string();
                    running.push((now + job_ms(&key) * MS, key.clone()));
                    let of_key = running.iter().filter(|(_, k)| *k == key).count();
                    most = most.max(of_key as u32);
                    left.push((r, now / MS));
                }
            }
            let end = running.iter().map(|(t, _)| *t).min();
            match [keyed.next_event(&*g), end].into_iter().flatten().min() {
                Some(t) => now = t.max(now),
                None => return (left, most),
            }
            running.retain(|(t, key)| {
                let ended = *t <= now;
                if ended {
                    c.key_job_ended(key.as_bytes());
                }
                !ended
            });
            keyed.release(&mut crate::outflow::Outflow::at(now, g, &mut outbox));
        }
    }

    /// a's jobs take a second, b's 5 ms.
    fn a_slow(key: &str) -> u64 {
        if key == "a" {
            1000
        } else {
            5
        }
    }

    #[test]
    fn a_key_at_its_job_limit_waits_and_the_other_keys_go_on() {
        let (mut g, c) = gate("inf");
        c.limit_key_jobs(1);
        let mut k = keyed("100/s");
        let text = "a 1\na 2\nb 1\na 3\nb 2\nb 3\n";
        let (left, most) = departures_with_jobs(&mut k, &mut g, &c, text, a_slow);
        let at = |r: &str| left.iter().find(|(x, _)| x == r).unwrap().1;
        assert_eq!((at("b 1"), at("b 2"), at("b 3")), (0, 10, 20), "{left:?}");
        assert_eq!((at("a 1"), at("a 2"), at("a 3")), (0, 1000, 2000));
        assert_eq!(most, 1);
        // Two at once: a's second job starts at its own rate.
        let (mut g, c) = gate("inf");
        c.limit_key_jobs(2);
        let mut k = keyed("100/s");
        let (left, most) = departures_with_jobs(&mut k, &mut g, &c, text, a_slow);
        let at = |r: &str| left.iter().find(|(x, _)| x == r).unwrap().1;
        assert_eq!((at("a 1"), at("a 2"), at("a 3")), (0, 10, 1000));
        assert_eq!((at("b 1"), at("b 2"), at("b 3")), (0, 10, 20));
        assert_eq!(most, 2);
        assert_eq!(c.key_jobs_figures(), (0, 1), "a held once");
    }

    #[test]
    fn a_key_at_its_job_limit_does_not_hold_the_line_under_a_global_rate() {
        // 10/s for all: while a's job runs, b's records take every slot.
        let (mut g, c) = gate("10/s");
        c.limit_key_jobs(1);
        let mut k = keyed("100/s");
        let text = "a 1\na 2\na 3\nb 1\nb 2\nb 3\nb 4\nb 5\nb 6\nb 7\n";
        let (left, most) =
            departures_with_jobs(
                &mut k,
                &mut g,
                &c,
                text,
                |key| {
                    if key == "a" {
                        250
                    } else {
                        5
                    }
                },
            );
        assert_eq!(most, 1);
        let times: Vec<u64> = left.iter().map(|(_, t)| *t).collect();
        assert_eq!(
            times,
            (0..10).map(|i| i * 100).collect::<Vec<_>>(),
            "{left:?}"
        );
        let a: Vec<u64> = left
            .iter()
            .filter(|(r, _)| r.starts_with('a'))
            .map(|(_, t)| *t)
            .collect();
        assert!(a.windows(2).all(|w| w[1] - w[0] >= 250), "{left:?}");
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn every_start_paused_holds_every_key() {
        let (mut g, c) = gate("100/s");
        let mut k = keyed("10/s");
        c.pause(&Scope::All, 0, 500 * MS);
        let left = departures(&mut k, &mut g, "a 1\nb 1\n");
        assert!(left.iter().all(|(_, t)| *t >= 500), "{left:?}");
    }

    #[test]
    fn a_slowed_key_comes_back_to_its_rate_gradually() {
        let c = Arc::new(GateControl::new(f64::INFINITY, 10.0));
        let mut g = gated(Limits::new(&[]), &c);
        let mut k = keyed("10/s");
        let a = Scope::Key(b"a"[..].into());
        c.pause(&a, 0, 1000 * MS);
        c.slow(&a, 0, 1000 * MS);
        let text: String = (1..=80).map(|i| format!("a {i}\n")).collect();
        let left = departures(&mut k, &mut g, &text);
        let gaps: Vec<u64> = left.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert_eq!(left[0].1, 1000);
        // From 5/s (200 ms apart), a tenth of 10/s faster each second,
        // back to 100 ms apart.
        assert_eq!(gaps[0], 200);
        assert!(gaps.windows(2).all(|w| w[1] <= w[0] + 5), "{gaps:?}");
        assert_eq!(*gaps.last().unwrap(), 100, "{gaps:?}");
        // A second overload halves the rate it had then.
        let had = c.rate_at(&a, 10_000 * MS);
        c.slow(&a, 10_000 * MS, 10_000 * MS);
        assert_eq!(c.rate_at(&a, 10_000 * MS), had / 2.0);
    }

    #[test]
    fn a_due_retry_takes_the_next_slot_before_the_bucket() {
        let (mut g, c) = gate("4/s");
        assert_eq!(release(&mut g, 0, 5), 1);
        // A retry may start from 10 ms: the 250 ms slot is its.
        c.retry_waits(7, 10 * MS, Scope::All);
        assert_eq!(
            g.next_due(b"x"),
            500 * MS,
            "the bucket's head goes after it"
        );
        assert_eq!(release(&mut g, 250 * MS, 5), 0);
        assert_eq!(c.as_retry(|| release(&mut g, 250 * MS, 1)), 1);
        c.retry_done(7);
        assert_eq!(g.next_due(b"x"), 500 * MS);
        assert_eq!(release(&mut g, 500 * MS, 5), 1);
        // Not yet due: the bucket goes first.
        c.retry_waits(8, 900 * MS, Scope::All);
        assert_eq!(release(&mut g, 750 * MS, 5), 1);
        // A retry of a paused key is not due before the key's pause ends.
        c.retry_done(8);
        let a = Scope::Key(b"a"[..].into());
        c.pause(&a, 750 * MS, 2000 * MS);
        c.retry_waits(9, 800 * MS, a);
        assert_eq!(release(&mut g, 1000 * MS, 5), 1);
    }

    #[test]
    fn a_pause_is_counted_as_far_as_it_lengthens() {
        let c = GateControl::default();
        assert_eq!(c.pause(&Scope::All, 100, 300), 200);
        assert_eq!(c.pause(&Scope::All, 150, 250), 0);
        assert_eq!(c.pause(&Scope::All, 200, 400), 100);
        let a = Scope::Key(b"a"[..].into());
        assert_eq!(c.paused_until(&a), 400, "a key waits for every start's");
        assert_eq!(c.held_keys(0), Vec::<Box<[u8]>>::new());
        c.pause(&a, 0, 500);
        assert_eq!(c.held_keys(450), vec![Box::from(&b"a"[..])]);
        assert_eq!(c.held_keys(500), Vec::<Box<[u8]>>::new());
    }

    #[test]
    fn a_key_slowed_after_its_pause_is_held_but_no_longer_paused() {
        let c = GateControl::new(10.0, 10.0);
        let a = Scope::Key(b"a"[..].into());
        let b = Scope::Key(b"b"[..].into());
        c.pause(&b, 0, 2000 * MS);
        c.pause(&a, 0, 1000 * MS);
        c.slow(&a, 0, 1000 * MS);
        let key = |k: &[u8]| Box::<[u8]>::from(k);
        assert_eq!(c.paused_keys(500 * MS), vec![key(b"a"), key(b"b")]);
        // a's pause is over, its rate still coming back: held, not paused.
        assert_eq!(c.paused_keys(1500 * MS), vec![key(b"b")]);
        assert!(c.held_keys(1500 * MS).contains(&key(b"a")));
        // Every start's pause is no key's.
        c.pause(&Scope::All, 0, 9000 * MS);
        assert_eq!(c.paused_keys(2500 * MS), Vec::<Box<[u8]>>::new());
    }

    /// Starts of these costs on each budget, none in flight.
    fn spends<'a>(costs: &[(&'a str, u64)]) -> Vec<super::super::quota::Spend<'a>> {
        costs
            .iter()
            .map(|&(budget, cost)| super::super::quota::Spend {
                budget,
                cost,
                in_flight: 0,
            })
            .collect()
    }

    #[test]
    fn a_start_spends_its_scopes_tokens_and_one_past_them_pauses_that_scope_only() {
        use super::super::quota::Hold;
        use super::super::quota::Quota;
        const S: u64 = 1_000_000_000;
        let c = GateControl::default();
        let a = Scope::Key(b"a"[..].into());
        let b = Scope::Key(b"b"[..].into());
        // Nothing announced: a start spends nothing and is not held.
        assert_eq!(c.spend_tokens(&a, 0, &spends(&[("", 500)])), Ok(()));
        assert_eq!(c.due(&a), 0);
        // Key a: 99 tokens left for 10 s, 49 of them in flight.
        let q = Quota {
            remaining: 99,
            reset: std::time::Duration::from_secs(10),
        };
        c.observe_tokens(
            &a,
            "",
            0,
            super::super::quota::TokensRead {
                quota: q,
                limit: None,
                refills: false,
                in_flight: 49,
                read_while: 0,
                started: 0,
                cost: 0,
            },
        );
        // 50 left: a start of 10 spends them and spaces the next 10 × 10 s / 51.
        assert_eq!(c.spend_tokens(&a, S, &spends(&[("", 10)])), Ok(()));
        assert_eq!(c.due(&a), S + 10 * 10 * S / 51);
        // 40 left: a start of 41 waits for the reset, its key paused.
        assert_eq!(
            c.spend_tokens(&a, 2 * S, &spends(&[("", 41)])),
            Err(Hold::Reset(10 * S))
        );
        assert_eq!(c.paused_until(&a), 10 * S);
        assert_eq!(c.paused_until(&Scope::All), 0);
        assert_eq!(c.paused_until(&b), 0);
        assert_eq!(c.spend_tokens(&b, 2 * S, &spends(&[("", 41)])), Ok(()));
        // A budget with no window, and 40 of a's: it fits.
        assert_eq!(
            c.spend_tokens(&a, 2 * S, &spends(&[("", 40), ("in", 9000)])),
            Ok(())
        );
        // At the reset the window is over: no tokens, no spacing.
        assert_eq!(c.spend_tokens(&a, 10 * S, &spends(&[("", 9000)])), Ok(()));
        assert_eq!(c.due(&a), 10 * S);
    }
}
