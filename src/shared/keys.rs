//! Limits per key shared by many drips (`--key` and `--key-rate` with
//! `--share`).
//!
//! The shared state holds one GCRA per key ([`super::gcra`] with the one
//! `--key-rate` limit): in Redis a hash of its own per key,
//! `drip:{NAME}:key:HEX` (HEX: the key's bytes), expiring 10 s after its
//! schedule; in the state file a map from key to schedule, from which keys
//! whose schedule has rested are pruned ([`KeyBook`]). The stored limits
//! (the global ones and the key rate with its burst) are checked at the
//! start as for the global limits.
//!
//! As for the global limits, a keeper thread ([`Keeper`]) reserves slots
//! and the schedule ([`SharedKeys`], the [`KeySchedule`] the keyed queues
//! see) is pure over the per-key *leases* of reserved slots. One call
//! reserves slots for every key whose records want them (up to
//! [`MAX_BATCH`] keys), and calls are at least [`MIN_GAP`] apart, so the
//! state sees a few dozen calls a second from a drip however many keys are
//! busy. A key whose lease is empty waits in its queue (its lane timed, no
//! timer) until the keeper brings its slots and reports it arrived: a
//! round trip, never holding back other keys. Under a global limit of
//! records a key asks only when its turn nears, for slots no earlier than
//! the times the global limit lets its records go ([`KeyAsk`]), and the
//! keeper reserves them about [`crate::keyed::KeySchedule::lead`] ahead.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::gcra::{Gcra, Step};
use super::lease::{answered, Failure, Mode, OnError, Retry, Voice};
use super::{late_ns, EXPIRY_NS, POLL_NS};
use crate::keyed::{KeySchedule, LeaseHead, Want};
use crate::pacer::{Pacer, Position};

/// Keys one call reserves for at most.
pub const MAX_BATCH: usize = 500;
/// The least time between two calls of one drip's keeper, ns.
pub const MIN_GAP: Duration = Duration::from_millis(20);

/// Time a key asks before its turn besides the keeper's gap and round
/// trips, ns.
const LEAD_SPARE_NS: u64 = 10_000_000;

/// A key's bytes as they appear in the shared state: lowercase hex.
pub fn hex(key: &[u8]) -> String {
    use std::fmt::Write;
    key.iter()
        .fold(String::with_capacity(key.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// One key's shared schedule in the state file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    /// Reservations made for this key (for giving back).
    pub seq: u64,
    /// Its theoretical arrival time, ns on the shared clock.
    pub tat: i64,
}

/// The per-key schedules of a state file, by [`hex`] key. Pure: times are
/// the caller's (ns on the shared clock).
///
/// Only keys whose schedule has not rested are kept ([`KeyBook::prune`]):
/// a key whose `TAT` has passed schedules exactly as a new one, so the
/// book holds the keys busy within about the last second of schedule, and
/// each call reads and writes all of them (O(busy keys) per call).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyBook {
    /// Schedules by key.
    pub keys: BTreeMap<String, KeyState>,
}

impl KeyBook {
    /// Reserve up to `want` slots of key `key` at `now` (as
    /// [`Gcra::reserve`]). Returns the reservation's seq and the departure
    /// times (ns).
    pub fn reserve(
        &mut self,
        step: Step,
        now: i64,
        key: &str,
        want: u64,
        horizon: i64,
    ) -> (u64, Vec<i64>) {
        self.reserve_at(step, now, key, KeyAsk::new(want), horizon)
    }

    /// Reserve up to `ask.want` (≥ 1) slots of key `key` at `now`, slot `j`
    /// no earlier than `now + ask.after + j × ask.every`: every slot due
    /// within `horizon` ns of the first one's earliest time, and at least
    /// one. Each slot is an arrival on the key's GCRA at its own time, so
    /// the key's bound holds whatever the order of the reservations (see
    /// `docs/architecture.md`). Returns the reservation's seq and the
    /// departure times (ns).
    pub fn reserve_at(
        &mut self,
        step: Step,
        now: i64,
        key: &str,
        ask: KeyAsk,
        horizon: i64,
    ) -> (u64, Vec<i64>) {
        let old = self.keys.get(key).copied();
        let start = now.saturating_add(ask.after.max(0));
        let mut tat = old.map_or(now, |k| k.tat).max(now);
        let mut slots = Vec::new();
        while (slots.len() as u64) < ask.want.max(1) {
            let from = start.saturating_add(ask.every.max(0).saturating_mul(slots.len() as i64));
            let due = from.max(tat.saturating_sub(step.tolerance));
            if !slots.is_empty() && due > start.saturating_add(horizon) {
                break;
            }
            tat = tat.max(due).saturating_add(step.interval);
            slots.push(due);
        }
        let seq = old.map_or(0, |k| k.seq) + 1;
        self.keys.insert(key.to_string(), KeyState { seq, tat });
        (seq, slots)
    }

    /// Give back key `key`'s slots from `first_unused` on, if no one
    /// reserved for it after reservation `seq` (as [`Gcra::give_back`]).
    pub fn give_back(&mut self, step: Step, key: &str, seq: u64, first_unused: i64) -> bool {
        let Some(k) = self.keys.get_mut(key) else {
            return false;
        };
        let mut g = Gcra {
            tats: vec![Some(k.tat)],
            seq: k.seq,
        };
        let back = g.give_back(&[step], seq, first_unused);
        k.tat = g.idle_from().unwrap_or(k.tat);
        back
    }

    /// Forget the keys whose schedule has rested by `now` (their `TAT` has
    /// passed): a new schedule departs exactly as theirs would.
    pub fn prune(&mut self, now: i64) {
        self.keys.retain(|_, k| k.tat > now);
    }

    /// The latest `TAT` of any key (ns).
    pub fn idle_from(&self) -> Option<i64> {
        self.keys.values().map(|k| k.tat).max()
    }
}

/// Slots granted by one call, for many keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrant {
    /// The shared clock's time of the call, ns.
    pub now: i64,
    /// The state (its stored limits) did not exist before this call.
    pub fresh: bool,
    /// For each key asked, in order: the reservation's seq and its
    /// departure times, ns after `now`.
    pub keys: Vec<(u64, Vec<i64>)>,
}

/// What one key asks of a reservation: up to `want` slots, slot `j` no
/// earlier than `after + j × every` ns after the call's time (the times
/// the global limits let the key's records go, when they bind; 0 and 0:
/// as soon as the key's own limit lets them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAsk {
    /// Slots wanted (at least one is reserved).
    pub want: u64,
    /// The first slot's earliest time, ns after the call's.
    pub after: i64,
    /// The least spacing of the slots' earliest times, ns.
    pub every: i64,
}

impl KeyAsk {
    /// Up to `want` slots, as soon as the key's limit lets them.
    pub fn new(want: u64) -> KeyAsk {
        KeyAsk {
            want,
            after: 0,
            every: 0,
        }
    }
}

/// A place that keeps the per-key schedules: the state file, or Redis.
pub trait KeyBackend: Send {
    /// Check that the stored limits are ours (storing them when there are
    /// none). Returns whether the state was fresh.
    fn hello(&mut self) -> Result<bool, Failure>;
    /// For each `(key, ask)`, reserve slots as [`KeyBook::reserve_at`]
    /// does, in one step.
    fn reserve(&mut self, asks: &[(&[u8], KeyAsk)], horizon: i64) -> Result<KeyGrant, Failure>;
    /// For each `(key, seq, first_unused)`, give back the key's slots from
    /// `first_unused` (shared ns) on, if no one reserved for it after
    /// reservation `seq`.
    fn give_back(&mut self, backs: &[(&[u8], u64, i64)]) -> Result<(), Failure>;
    /// The shared clock's now when it is this host's `CLOCK_MONOTONIC`
    /// (see [`super::lease::Backend::host_clock`]).
    fn host_clock(&self) -> Option<i64> {
        None
    }
}

/// One key's lease: its reserved slots, on drip's clock.
#[derive(Debug)]
struct KeyLease {
    key: Box<[u8]>,
    slots: VecDeque<u64>,
    /// Records of the key waiting, as last told, less those sent since.
    wanted: u32,
    /// The earliest time of its next slot (drip's clock, ns) and of each
    /// after it, ns apart: when the global limits let its records go.
    at: u64,
    every: u64,
    /// The key waits for slots (no timer in the keyed queues).
    waiting: bool,
    /// The last reservation: its seq and its slots' shared times.
    last: Option<(u64, Vec<i64>)>,
    /// The key's schedule while pacing alone (`local`).
    local: Position,
}

/// What [`SharedKeys`] and the keeper share.
#[derive(Debug)]
pub(crate) struct KeysState {
    /// By the keyed queues' slot number.
    keys: HashMap<u32, KeyLease>,
    /// Waiting keys that got slots: (first slot, key's slot number).
    arrived: Vec<(u64, u32)>,
    waiting: usize,
    /// The keeper's round trip (ns, smoothed).
    rtt: u64,
    pub(crate) mode: Mode,
    pub(crate) closed: bool,
    pub(crate) reservations: u64,
    pub(crate) lost: u64,
    pub(crate) failures: u64,
    pub(crate) forfeited: u64,
    pub(crate) fatal: Option<Failure>,
}

/// The per-key leases under a lock, and the keeper's wake-up.
#[derive(Debug)]
pub(crate) struct KeysLease {
    pub(crate) state: Mutex<KeysState>,
    pub(crate) wake: Condvar,
    origin: Instant,
}

impl KeysLease {
    pub(crate) fn new(origin: Instant) -> KeysLease {
        KeysLease {
            state: Mutex::new(KeysState {
                keys: HashMap::new(),
                arrived: Vec::new(),
                waiting: 0,
                rtt: 0,
                mode: Mode::Shared,
                closed: false,
                reservations: 0,
                lost: 0,
                failures: 0,
                forfeited: 0,
                fatal: None,
            }),
            wake: Condvar::new(),
            origin,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, KeysState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        crate::sys::ns_since(self.origin)
    }
}

impl KeysState {
    /// The lease of key `s` (`key`'s bytes), new when it has none or held
    /// another key's.
    fn lease(&mut self, s: u32, key: &[u8]) -> &mut KeyLease {
        let fresh = || KeyLease {
            key: key.into(),
            slots: VecDeque::new(),
            wanted: 0,
            at: 0,
            every: 0,
            waiting: false,
            last: None,
            local: Position::default(),
        };
        if let Some(old) = self.keys.get(&s).filter(|l| *l.key != *key) {
            // A key forgotten and its slot number taken by another.
            if old.waiting {
                self.waiting -= 1;
            }
            self.keys.remove(&s);
        }
        self.keys.entry(s).or_insert_with(fresh)
    }

    /// Drop key `s`'s slots too late to use at `now`. Its records ask
    /// again, for when they are expected then: the times asked for before
    /// have proved wrong.
    fn drop_late(&mut self, s: u32, now: u64, late: u64) {
        if let Some(k) = self.keys.get_mut(&s) {
            while k.slots.front().is_some_and(|&t| t + late < now) {
                k.slots.pop_front();
                self.forfeited += 1;
                k.wanted = 0;
            }
        }
    }

    /// Every waiting key is due now (pacing alone from now on).
    fn wake_all(&mut self, now: u64) {
        for (&s, k) in &mut self.keys {
            if k.waiting {
                k.waiting = false;
                self.arrived.push((now, s));
            }
        }
        self.waiting = 0;
    }
}

/// The per-key schedule of a drip sharing its key limits: each key's
/// lease, or, while the state is out of reach under `local`, each key's
/// own schedule at the key rate divided by the peers.
#[derive(Debug)]
pub struct SharedKeys {
    lease: Arc<KeysLease>,
    /// The divided key limit, for `local`.
    pacer: Pacer,
    /// How late a slot may still be used (ns).
    late: u64,
    last_now: u64,
}

impl SharedKeys {
    pub(crate) fn new(lease: Arc<KeysLease>, pacer: Pacer, per_second: f64) -> SharedKeys {
        SharedKeys {
            lease,
            pacer,
            late: late_ns(per_second),
            last_now: 0,
        }
    }
}

impl KeySchedule for SharedKeys {
    fn allows(&mut self, now: u64, s: u32, key: &[u8]) -> bool {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.mode == Mode::Local {
            self.pacer.restore(st.lease(s, key).local);
            return self.pacer.allows(now, 1);
        }
        st.drop_late(s, now, self.late);
        st.lease(s, key).slots.front().is_some_and(|&t| t <= now)
    }

    fn commit(&mut self, now: u64, s: u32, key: &[u8]) {
        let mut st = self.lease.lock();
        let local = st.mode == Mode::Local;
        let lease = st.lease(s, key);
        lease.wanted = lease.wanted.saturating_sub(1);
        if local {
            self.pacer.restore(lease.local);
            self.pacer.commit(now, 1);
            lease.local = self.pacer.position_now();
        } else {
            lease.slots.pop_front();
        }
    }

    fn first_slot(&mut self, now: u64, s: u32, key: &[u8]) -> LeaseHead {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.mode == Mode::Local {
            self.pacer.restore(st.lease(s, key).local);
            return LeaseHead::At(if self.pacer.allows(now, 1) {
                now
            } else {
                self.pacer.next_due()
            });
        }
        st.drop_late(s, now, self.late);
        let lease = st.lease(s, key);
        match lease.slots.front() {
            Some(&t) => LeaseHead::At(t),
            None if lease.waiting => LeaseHead::Asked,
            None => LeaseHead::Empty,
        }
    }

    fn ask(&mut self, now: u64, s: u32, key: &[u8], want: Want) {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.mode == Mode::Local {
            return;
        }
        // Slots too late to use count as none: a lease holding only those
        // must ask, or the key would wait for ever.
        st.drop_late(s, now, self.late);
        let lease = st.lease(s, key);
        let covered = lease.wanted as usize <= lease.slots.len();
        (lease.wanted, lease.at, lease.every) = (want.records, want.at, want.every);
        if !lease.slots.is_empty() {
            if covered && lease.slots.len() < want.records as usize {
                // More records than slots, which the keeper did not know.
                self.lease.wake.notify_one();
            }
            return;
        }
        if want.records == 0 {
            return;
        }
        if !lease.waiting {
            lease.waiting = true;
            st.waiting += 1;
        }
        self.lease.wake.notify_one();
    }

    fn arrived(&mut self) -> Vec<(u64, u32)> {
        std::mem::take(&mut self.lease.lock().arrived)
    }

    fn forget(&mut self, s: u32) {
        let mut st = self.lease.lock();
        if st.keys.remove(&s).is_some_and(|k| k.waiting) {
            st.waiting -= 1;
        }
    }

    fn next_poll(&self) -> Option<u64> {
        // Asked while records wait: look again at least this often, so a
        // key whose slots are slow to come (an outage, a lost state) is
        // never left without a wake-up, and drip never takes the line
        // for finished while records wait in it.
        Some(self.last_now.saturating_add(POLL_NS))
    }

    fn lead(&self) -> u64 {
        // The keeper's gathering, a round trip with room to spare, and a
        // wake-up's lateness.
        let rtt = self.lease.lock().rtt;
        (MIN_GAP.as_nanos() as u64)
            .saturating_add(rtt.saturating_mul(2))
            .saturating_add(LEAD_SPARE_NS)
    }
}

/// The keeper of the per-key leases: reserves for the keys whose records
/// want slots, gives back what is unused at exit.
pub(crate) struct Keeper {
    pub(crate) lease: Arc<KeysLease>,
    pub(crate) backend: Box<dyn KeyBackend>,
    pub(crate) on_error: OnError,
    /// The key rate in records per second.
    pub(crate) per_second: f64,
    /// Called when slots arrive (wakes the writer) and when drip must stop.
    pub(crate) notify: Arc<dyn Fn(bool) + Send + Sync>,
    pub(crate) voice: Voice,
    pub(crate) retry: Retry,
}

/// One key's ask: its slot number, bytes, how many slots it wants and
/// their earliest times (drip's clock, ns).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ask {
    s: u32,
    key: Box<[u8]>,
    want: u64,
    at: u64,
    every: u64,
}

impl Ask {
    /// The ask of a call made at `now`.
    fn ask_at(&self, now: u64) -> KeyAsk {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        KeyAsk {
            want: self.want,
            after: int(self.at.saturating_sub(now)),
            every: int(self.every),
        }
    }
}

impl Keeper {
    /// Check the stored limits before anything is read; an unreachable
    /// state is fatal only under `fail`.
    pub(crate) fn hello(&mut self) -> Result<(), Failure> {
        match self.backend.hello() {
            Ok(_) => Ok(()),
            Err(Failure::Unreachable(why)) if self.on_error != OnError::Fail => {
                self.lease.lock().failures += 1;
                self.unreachable(&why);
                Ok(())
            }
            Err(failure) => Err(failure),
        }
    }

    /// Run until closed, then give back what is unused.
    pub(crate) fn run(mut self) {
        let mut rtt = 0i64;
        let mut last_call: Option<Instant> = None;
        let mut last_ok: Option<Instant> = None;
        loop {
            if self.lease.lock().mode == Mode::Local {
                if !self.rejoin() {
                    break;
                }
                continue;
            }
            let Some(asks) = self.await_need(super::lease::horizon(rtt) / 2, last_call) else {
                break;
            };
            let started = Instant::now();
            last_call = Some(started);
            let now = self.lease.now();
            let pairs: Vec<(&[u8], KeyAsk)> =
                asks.iter().map(|a| (&*a.key, a.ask_at(now))).collect();
            match self.backend.reserve(&pairs, super::lease::horizon(rtt)) {
                Ok(grant) => {
                    let took = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
                    rtt = if rtt == 0 { took } else { (rtt * 7 + took) / 8 };
                    self.lease.lock().rtt = u64::try_from(rtt).unwrap_or(0);
                    self.retry.succeeded();
                    self.voice.reached();
                    // Lost: the stored limits vanished while in use.
                    let lost = grant.fresh
                        && last_ok.is_some_and(|t| t.elapsed().as_nanos() < EXPIRY_NS as u128);
                    last_ok = Some(Instant::now());
                    self.take(&asks, grant, lost);
                }
                Err(failure @ (Failure::Mismatch(_) | Failure::Fatal(_))) => {
                    return self.fatal(failure)
                }
                Err(Failure::Unreachable(why)) => {
                    self.lease.lock().failures += 1;
                    if self.on_error == OnError::Fail {
                        return self.fatal(Failure::Unreachable(why));
                    }
                    self.unreachable(&why);
                    // Under `local`, `rejoin` pauses.
                    if self.on_error == OnError::Wait {
                        let pause = self.retry.failed();
                        self.pause(pause);
                    }
                }
            }
        }
        self.give_back();
    }

    /// Pacing alone (`local`): pause as the backoff says, then ask the
    /// state whether it answers; if it does, the keys ask for shared slots
    /// again (and drip says so). Returns `false` once closed or stopped
    /// (the stored limits differ now).
    fn rejoin(&mut self) -> bool {
        let pause = self.retry.failed();
        self.pause(pause);
        if self.lease.lock().closed {
            return false;
        }
        match answered(self.backend.hello(), &mut self.retry, &mut self.voice) {
            Ok(true) => {
                self.lease.lock().mode = Mode::Shared;
                (self.notify)(false);
                true
            }
            Ok(false) => {
                self.lease.lock().failures += 1;
                true
            }
            Err(failure) => {
                self.fatal(failure);
                false
            }
        }
    }

    /// The state cannot be reached (not under `fail`): say so, and under
    /// `local` let every key pace alone.
    fn unreachable(&mut self, why: &str) {
        self.voice.unreachable(why);
        if self.on_error == OnError::Local {
            let now = self.lease.now();
            let mut st = self.lease.lock();
            st.mode = Mode::Local;
            st.wake_all(now);
            drop(st);
            (self.notify)(false);
        }
    }

    /// Wait until some keys want slots (their lease empty, or ending less
    /// than `ahead` ns from now) and `MIN_GAP` has passed since the last
    /// call; returns what to ask for, or `None` once closed.
    fn await_need(&self, ahead: i64, last_call: Option<Instant>) -> Option<Vec<Ask>> {
        let cap = u64::try_from(self.per_second.ceil() as i64)
            .unwrap_or(1)
            .max(1);
        let mut st = self.lease.lock();
        loop {
            if st.closed {
                return None;
            }
            let gap = last_call.map_or(Duration::ZERO, |t| MIN_GAP.saturating_sub(t.elapsed()));
            let now = self.lease.now();
            let (asks, soonest) = needs(&st, now, ahead.max(0) as u64, cap);
            let wait = if !asks.is_empty() && (gap.is_zero() || st.mode == Mode::Local) {
                return Some(asks);
            } else if !asks.is_empty() {
                gap
            } else {
                soonest.map_or(Duration::from_secs(1), |t| {
                    Duration::from_nanos(t.saturating_sub(now)).max(gap)
                })
            };
            st = self
                .lease
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Put the granted slots in the keys' leases, on drip's clock (as the
    /// global keeper does), and report the waiting keys that got some.
    fn take(&mut self, asks: &[Ask], grant: KeyGrant, lost: bool) {
        let base = match self.backend.host_clock() {
            Some(shared_now) => {
                let ours = i64::try_from(self.lease.now()).unwrap_or(i64::MAX);
                u64::try_from(ours.saturating_sub(shared_now.saturating_sub(grant.now)))
                    .unwrap_or(0)
            }
            None => self.lease.now(),
        };
        if lost {
            // Said without the lease's lock: a stalled stderr must not
            // hold up the writer.
            self.voice.lost("one burst more per key");
        }
        let mut st = self.lease.lock();
        if lost {
            st.lost += 1;
        }
        st.reservations += 1;
        st.mode = Mode::Shared;
        for (Ask { s, key, .. }, (seq, slots)) in asks.iter().zip(grant.keys) {
            let Some(lease) = st.keys.get_mut(s).filter(|l| l.key == *key) else {
                continue; // forgotten meanwhile
            };
            let floor = lease.slots.back().copied().unwrap_or(0);
            for &d in &slots {
                let t = base
                    .saturating_add(u64::try_from(d).unwrap_or(0))
                    .max(floor);
                lease.slots.push_back(t);
            }
            lease.last = Some((seq, slots.iter().map(|d| grant.now + d).collect()));
            let first = lease.slots.front().copied();
            if let (true, Some(first)) = (lease.waiting, first) {
                lease.waiting = false;
                st.waiting -= 1;
                st.arrived.push((first, *s));
            }
        }
        drop(st);
        (self.notify)(false);
    }

    /// Pause for `d`, or until closed.
    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut st = self.lease.lock();
        while !st.closed {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .lease
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn fatal(&self, failure: Failure) {
        self.lease.lock().fatal = Some(failure);
        (self.notify)(true);
    }

    /// At exit: each key's unused slots of its last reservation go back,
    /// in one call, if no one reserved for that key since.
    fn give_back(&mut self) {
        let st = self.lease.lock();
        let backs: Vec<(Box<[u8]>, u64, i64)> = st
            .keys
            .values()
            .filter_map(|k| {
                let (seq, times) = k.last.as_ref()?;
                let unused = k.slots.len();
                (unused > 0 && unused <= times.len())
                    .then(|| (k.key.clone(), *seq, times[times.len() - unused]))
            })
            .collect();
        drop(st);
        for chunk in backs.chunks(MAX_BATCH) {
            let refs: Vec<(&[u8], u64, i64)> =
                chunk.iter().map(|(k, seq, t)| (&**k, *seq, *t)).collect();
            let _ = self.backend.give_back(&refs);
        }
    }
}

/// What the keys want at `now`: each key whose records want more slots
/// than its lease holds, whose lease is empty or ends within `ahead` ns,
/// and whose next slot is wanted within `ahead` ns, asks for them (at
/// most `cap`, a second of the key rate), up to [`MAX_BATCH`] keys; and
/// when the next of the others will ask.
fn needs(st: &KeysState, now: u64, ahead: u64, cap: u64) -> (Vec<Ask>, Option<u64>) {
    let mut asks = Vec::new();
    let mut soonest: Option<u64> = None;
    for (&s, k) in &st.keys {
        let want = u64::from(k.wanted).saturating_sub(k.slots.len() as u64);
        if want == 0 {
            continue;
        }
        let low = k.slots.back().map_or(0, |&end| end.saturating_sub(ahead));
        let low = low.max(k.at.saturating_sub(ahead));
        if low <= now || st.mode == Mode::Local {
            if asks.len() < MAX_BATCH {
                // The slots after those held keep their spacing.
                let at =
                    k.at.saturating_add(k.every.saturating_mul(k.slots.len() as u64));
                asks.push(Ask {
                    s,
                    key: k.key.clone(),
                    want: want.min(cap),
                    at,
                    every: k.every,
                });
            }
        } else {
            soonest = Some(soonest.map_or(low, |t: u64| t.min(low)));
        }
    }
    (asks, soonest)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn step(per_second: i64, burst: i64) -> Step {
        let interval = 1000 * MS / per_second;
        Step {
            interval,
            tolerance: interval * (burst - 1),
        }
    }

    /// The most departures in any window of `w` ns.
    fn most_in(times: &mut [i64], w: i64) -> usize {
        times.sort_unstable();
        (0..times.len())
            .map(|i| times[i..].iter().take_while(|&&t| t < times[i] + w).count())
            .max()
            .unwrap_or(0)
    }

    /// Three participants reserving for three keys in batches on virtual
    /// time: per key, no window holds more than burst + rate × W, and the
    /// keys do not hold each other back.
    #[test]
    fn participants_keep_each_keys_bound_and_keys_are_independent() {
        let s = step(5, 2);
        let mut book = KeyBook::default();
        let mut per_key: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        let mut now = 0;
        for round in 0..300u64 {
            for p in 0..3u64 {
                for key in ["a", "b", "c"] {
                    let want = 1 + (round + p) % 4;
                    let (_, got) = book.reserve(s, now, key, want, 200 * MS);
                    per_key.entry(key).or_default().extend(got);
                }
            }
            now += 50 * MS;
        }
        for (key, times) in &mut per_key {
            let most = most_in(times, 1000 * MS);
            assert!(most <= 5 + 2, "key {key}: {most} in a second");
            let span = (times[times.len() - 1] - times[1]) as f64 / 1e9;
            let rate = (times.len() - 2) as f64 / span;
            assert!((rate - 5.0).abs() < 0.1, "key {key}: {rate}/s");
        }
        // Each key's first slot was at 0: no key waited for another.
        assert!(per_key.values().all(|t| t[0] == 0));
    }

    #[test]
    fn a_rested_key_is_pruned_and_starts_as_a_new_one() {
        let s = step(10, 1);
        let mut book = KeyBook::default();
        assert_eq!(
            book.reserve(s, 0, "a", 3, 1000 * MS).1,
            vec![0, 100 * MS, 200 * MS]
        );
        book.reserve(s, 0, "b", 1, 0);
        book.prune(150 * MS);
        // b's schedule rested at 100 ms; a's runs to 300 ms.
        assert_eq!(book.keys.keys().collect::<Vec<_>>(), ["a"]);
        book.prune(300 * MS);
        assert!(book.keys.is_empty());
        assert_eq!(book.reserve(s, 300 * MS, "a", 1, 0).1, vec![300 * MS]);
    }

    #[test]
    fn giving_back_restores_one_keys_schedule_unless_someone_reserved() {
        let s = step(10, 1);
        let mut book = KeyBook::default();
        let (seq, t) = book.reserve(s, 0, "a", 5, 1000 * MS);
        book.reserve(s, 0, "b", 5, 1000 * MS);
        assert!(book.give_back(s, "a", seq, t[2]));
        assert_eq!(book.reserve(s, 0, "a", 1, 0).1, vec![t[2]]);
        // Someone reserved for a since: nothing goes back.
        assert!(!book.give_back(s, "a", seq, t[3]));
        // b is untouched by a's give-back.
        assert_eq!(book.reserve(s, 0, "b", 1, 0).1, vec![500 * MS]);
    }

    #[test]
    fn hex_keys() {
        assert_eq!(hex(b"a/\xff"), "612fff");
    }

    /// A key's records want slots: it asks when its lease is empty or
    /// ends soon, at most a second of its rate, and other keys' times are
    /// where the keeper waits for.
    #[test]
    fn keys_ask_when_their_lease_runs_low() {
        let lease = KeysLease::new(Instant::now());
        let mut st = lease.lock();
        st.lease(1, b"a").wanted = 50;
        let b = st.lease(2, b"b");
        b.wanted = 3;
        b.slots.extend([100, 900]);
        st.lease(3, b"c").wanted = 0;
        let (asks, soonest) = needs(&st, 0, 400, 10);
        let a = Ask {
            s: 1,
            key: Box::from(&b"a"[..]),
            want: 10,
            at: 0,
            every: 0,
        };
        assert_eq!(asks, vec![a]);
        assert_eq!(soonest, Some(500));
        let (asks, _) = needs(&st, 500, 400, 10);
        assert_eq!(asks.len(), 2);
    }

    /// A key whose lease holds only slots too late to use asks for new
    /// ones (it would otherwise wait for ever, no timer and no ask).
    #[test]
    fn a_lease_of_late_slots_asks_again() {
        let lease = Arc::new(KeysLease::new(Instant::now()));
        let pacer = Pacer::new(crate::rate::parse_rate("10/s").unwrap(), 1, 2_000_000);
        let mut keys = SharedKeys::new(Arc::clone(&lease), pacer, 10.0);
        lease.lock().lease(1, b"a").slots.push_back(0);
        let want = Want {
            records: 1,
            at: 0,
            every: 0,
        };
        // Half a second on: the slot at 0 is far past its lateness.
        keys.ask(500_000_000, 1, b"a", want);
        assert_eq!(
            keys.first_slot(500_000_000, 1, b"a"),
            LeaseHead::Asked,
            "asked for a new slot"
        );
        assert_eq!(lease.lock().forfeited, 1);
    }

    /// A key held back by the global limits asks only when its records'
    /// turn nears, for slots at the times the global limits let them go.
    #[test]
    fn a_key_asks_when_its_turn_nears_for_slots_spaced_as_its_turns() {
        let lease = KeysLease::new(Instant::now());
        let mut st = lease.lock();
        let a = st.lease(1, b"a");
        (a.wanted, a.at, a.every) = (3, 1000, 250);
        let (asks, soonest) = needs(&st, 0, 400, 10);
        assert!(asks.is_empty());
        assert_eq!(soonest, Some(600));
        let (asks, _) = needs(&st, 600, 400, 10);
        assert_eq!((asks[0].at, asks[0].every), (1000, 250));
        assert_eq!(
            asks[0].ask_at(600),
            KeyAsk {
                want: 3,
                after: 400,
                every: 250
            }
        );
    }

    /// Slots asked for at later times are arrivals at those times: a key's
    /// slots asked for by several participants at spaced times keep its
    /// bound, and come no earlier than asked.
    #[test]
    fn slots_asked_for_later_keep_the_keys_bound() {
        let s = step(5, 2);
        let mut book = KeyBook::default();
        let mut times = Vec::new();
        for round in 0..100i64 {
            for p in 0..3i64 {
                let ask = KeyAsk {
                    want: 3,
                    after: (p * 70 + round % 3 * 40) * MS,
                    every: 130 * MS,
                };
                let now = round * 150 * MS;
                let (_, got) = book.reserve_at(s, now, "a", ask, 300 * MS);
                for (j, &t) in got.iter().enumerate() {
                    assert!(t >= now + ask.after + j as i64 * ask.every);
                }
                times.extend(got);
            }
        }
        assert!(most_in(&mut times, 1000 * MS) <= 5 + 2);
    }
}
