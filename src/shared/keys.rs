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
//! round trip, never holding back other keys.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::gcra::{Gcra, Step};
use super::lease::{Failure, Mode, OnError, Retry, Voice};
use super::{late_ns, EXPIRY_NS, POLL_NS};
use crate::keyed::KeySchedule;
use crate::pacer::{Pacer, Position};

/// Keys one call reserves for at most.
pub const MAX_BATCH: usize = 500;
/// The least time between two calls of one drip's keeper, ns.
pub const MIN_GAP: Duration = Duration::from_millis(20);

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
        let old = self.keys.get(key).copied().unwrap_or_default();
        let mut g = Gcra {
            tats: self
                .keys
                .get(key)
                .map(|k| vec![Some(k.tat)])
                .unwrap_or_default(),
            seq: old.seq,
        };
        let slots = g.reserve(&[step], now, want, horizon);
        let tat = g.idle_from().unwrap_or(now);
        self.keys
            .insert(key.to_string(), KeyState { seq: g.seq, tat });
        (g.seq, slots)
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

/// A place that keeps the per-key schedules: the state file, or Redis.
pub trait KeyBackend: Send {
    /// Check that the stored limits are ours (storing them when there are
    /// none). Returns whether the state was fresh.
    fn hello(&mut self) -> Result<bool, Failure>;
    /// For each `(key, want)`, reserve up to `want` slots due within
    /// `horizon` ns (at least one), in one step.
    fn reserve(&mut self, asks: &[(&[u8], u64)], horizon: i64) -> Result<KeyGrant, Failure>;
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

    /// Drop key `s`'s slots too late to use at `now`.
    fn drop_late(&mut self, s: u32, now: u64, late: u64) {
        if let Some(k) = self.keys.get_mut(&s) {
            while k.slots.front().is_some_and(|&t| t + late < now) {
                k.slots.pop_front();
                self.forfeited += 1;
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

    fn next_due(&mut self, now: u64, s: u32, key: &[u8], waiting: u32) -> Option<u64> {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.mode == Mode::Local {
            self.pacer.restore(st.lease(s, key).local);
            return Some(if self.pacer.allows(now, 1) {
                now
            } else {
                self.pacer.next_due()
            });
        }
        st.drop_late(s, now, self.late);
        let lease = st.lease(s, key);
        let covered = lease.wanted as usize <= lease.slots.len();
        lease.wanted = waiting;
        if let Some(&t) = lease.slots.front() {
            if covered && lease.slots.len() < waiting as usize {
                // More records than slots, which the keeper did not know.
                self.lease.wake.notify_one();
            }
            return Some(t);
        }
        if !lease.waiting {
            lease.waiting = true;
            st.waiting += 1;
        }
        self.lease.wake.notify_one();
        None
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
        (self.lease.lock().waiting > 0).then(|| self.last_now.saturating_add(POLL_NS))
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

/// One key's ask: its slot number, bytes and how many slots it wants.
type Ask = (u32, Box<[u8]>, u64);

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
        while let Some(asks) = self.await_need(super::lease::horizon(rtt) / 2, last_call) {
            let started = Instant::now();
            last_call = Some(started);
            let pairs: Vec<(&[u8], u64)> = asks.iter().map(|(_, k, w)| (&**k, *w)).collect();
            match self.backend.reserve(&pairs, super::lease::horizon(rtt)) {
                Ok(grant) => {
                    let took = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
                    rtt = if rtt == 0 { took } else { (rtt * 7 + took) / 8 };
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
                    let pause = self.retry.failed();
                    self.pause(pause);
                }
            }
        }
        self.give_back();
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
        let mut st = self.lease.lock();
        if lost {
            st.lost += 1;
            self.voice.lost("one burst more per key");
        }
        st.reservations += 1;
        st.mode = Mode::Shared;
        for ((s, key, _), (seq, slots)) in asks.iter().zip(grant.keys) {
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
/// than its lease holds and whose lease is empty or ends within `ahead`
/// ns asks for them (at most `cap`, a second of the key rate), up to
/// [`MAX_BATCH`] keys; and when the next of the others runs low.
fn needs(st: &KeysState, now: u64, ahead: u64, cap: u64) -> (Vec<Ask>, Option<u64>) {
    let mut asks = Vec::new();
    let mut soonest: Option<u64> = None;
    for (&s, k) in &st.keys {
        let want = u64::from(k.wanted).saturating_sub(k.slots.len() as u64);
        if want == 0 {
            continue;
        }
        let low = k.slots.back().map_or(0, |&end| end.saturating_sub(ahead));
        if low <= now || st.mode == Mode::Local {
            if asks.len() < MAX_BATCH {
                asks.push((s, k.key.clone(), want.min(cap)));
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
        assert_eq!(asks, vec![(1, Box::from(&b"a"[..]), 10)]);
        assert_eq!(soonest, Some(500));
        let (asks, _) = needs(&st, 500, 400, 10);
        assert_eq!(asks.len(), 2);
    }
}
