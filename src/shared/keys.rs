//! Limits per key shared by many drips (`--key` and `--key-rate` with
//! `--share`): the keys' leases ([`KeyLeases`], the grants the keeper
//! serves for the keys) and the [`KeySchedule`] the keyed queues see over
//! them ([`SharedKeys`]).
//!
//! The shared state holds one GCRA per key ([`super::gcra::KeyBook`] with
//! the one `--key-rate` limit): in Redis a hash of its own per key,
//! `drip:{NAME}:key:HEX` (HEX: the key's bytes), expiring 10 s after its
//! schedule; in the state file a map from key to schedule, from which keys
//! whose schedule has rested are pruned. The stored limits (the global
//! ones and the key rate with its burst) are checked at the start as for
//! the global limits.
//!
//! The keeper ([`super::keeper`], the same as the global limits') makes
//! one call for every key whose records want slots (up to [`MAX_BATCH`]
//! keys), at least [`MIN_GAP`] apart, so the state sees a few dozen calls
//! a second from a drip however many keys are busy. A key whose lease is
//! empty waits in its queue (its lane timed, no timer) until the keeper
//! brings its slots and reports it arrived: a round trip, never holding
//! back other keys. Under a global limit of records a key asks only when
//! its turn nears, for slots no earlier than the times the global limit
//! lets its records go ([`super::gcra::KeyAsk`]), and the keeper reserves
//! them about [`crate::keyed::KeySchedule::lead`] ahead.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::keeper::{Grants, Lease, Mode, Request, Return, Status, Turn};
use super::protocol::{horizon, late_ns, Reply, POLL_NS};
use crate::keyed::{KeySchedule, LeaseHead, Want};
use crate::pacer::{Pacer, Position};

/// Keys one call reserves for at most.
pub const MAX_BATCH: usize = 500;
/// The least time between two calls of one drip's keeper, ns.
pub const MIN_GAP: Duration = Duration::from_millis(20);

/// Time a key asks before its turn besides the keeper's gap and round
/// trips, ns.
const LEAD_SPARE_NS: u64 = 10_000_000;

/// One key's lease: its reserved slots, on drip's clock.
#[derive(Debug)]
struct KeyLease {
    key: Box<[u8]>,
    /// Each slot's time on drip's clock and on the shared one (ns), and
    /// which of this key's grants it came from.
    slots: VecDeque<(u64, i64, u64)>,
    /// Records of the key waiting, as last told, less those sent since.
    wanted: u32,
    /// The earliest time of its next slot (drip's clock, ns) and of each
    /// after it, ns apart: when the global limits let its records go.
    at: u64,
    every: u64,
    /// The key waits for slots (no timer in the keyed queues).
    waiting: bool,
    /// The key's grants so far, and the last one's reservation number.
    grants: u64,
    last_seq: u64,
    /// The key's schedule while pacing alone (`local`).
    local: Position,
}

impl KeyLease {
    /// The unused tail of its last grant.
    fn tail(&self) -> Option<Return> {
        let mut tail = self.slots.iter().rev().take_while(|s| s.2 == self.grants);
        let mut first = tail.next()?.1;
        let mut count = 1;
        for s in tail {
            first = s.1;
            count += 1;
        }
        Some(Return {
            key: Some(self.key.clone()),
            seq: self.last_seq,
            first_unused: first,
            size: 1,
            count,
        })
    }
}

/// The keys' leases, which [`SharedKeys`] and the keeper share.
#[derive(Debug)]
pub(crate) struct KeyLeases {
    /// By the keyed queues' slot number.
    keys: HashMap<u32, KeyLease>,
    /// Waiting keys that got slots: (first slot, key's slot number).
    arrived: Vec<(u64, u32)>,
    waiting: usize,
    /// Late unused slots of keys' last grants, going back.
    returning: Vec<Return>,
    /// The key rate, slots a second.
    per_second: f64,
    pub(crate) status: Status,
}

impl KeyLeases {
    pub(crate) fn new(per_second: f64) -> KeyLeases {
        KeyLeases {
            keys: HashMap::new(),
            arrived: Vec::new(),
            waiting: 0,
            returning: Vec::new(),
            per_second,
            status: Status::default(),
        }
    }

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
            grants: 0,
            last_seq: 0,
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
    /// have proved wrong. Late slots of its last grant that leave its
    /// lease empty go back; the others are forfeited.
    fn drop_late(&mut self, s: u32, now: u64, late: u64) {
        let Some(k) = self.keys.get_mut(&s) else {
            return;
        };
        let mut run: Option<Return> = None;
        while let Some(&(_, shared, grant)) = k.slots.front().filter(|t| t.0 + late < now) {
            k.slots.pop_front();
            k.wanted = 0;
            if grant != k.grants {
                self.status.forfeited += 1;
                continue;
            }
            match &mut run {
                Some(r) => r.count += 1,
                None => {
                    run = Some(Return {
                        key: Some(k.key.clone()),
                        seq: k.last_seq,
                        first_unused: shared,
                        size: 1,
                        count: 1,
                    })
                }
            }
        }
        match run {
            Some(run) if k.slots.is_empty() => self.returning.push(run),
            Some(run) => self.status.forfeited += run.count,
            None => {}
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

/// What the keys want at `now`: each key whose records want more slots
/// than its lease holds, whose lease is empty or ends within `ahead` ns,
/// and whose next slot is wanted within `ahead` ns, asks for them (at
/// most `cap`, a second of the key rate), up to [`MAX_BATCH`] keys; and
/// when the next of the others will ask.
fn needs(st: &KeyLeases, now: u64, ahead: u64, cap: u64) -> (Vec<Request>, Option<u64>) {
    let mut asks = Vec::new();
    let mut soonest: Option<u64> = None;
    for k in st.keys.values() {
        let want = u64::from(k.wanted).saturating_sub(k.slots.len() as u64);
        if want == 0 {
            continue;
        }
        let low = k
            .slots
            .back()
            .map_or(0, |&(end, _, _)| end.saturating_sub(ahead));
        let low = low.max(k.at.saturating_sub(ahead));
        if low <= now {
            if asks.len() < MAX_BATCH {
                // The slots after those held keep their spacing.
                let at =
                    k.at.saturating_add(k.every.saturating_mul(k.slots.len() as u64));
                asks.push(Request {
                    key: Some(k.key.clone()),
                    want: want.min(cap),
                    sizes: Vec::new(),
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

impl Grants for KeyLeases {
    fn status(&mut self) -> &mut Status {
        &mut self.status
    }

    fn turn(&mut self, now: u64, since_call: Option<Duration>) -> Result<Turn, Duration> {
        let cap = u64::try_from(self.per_second.ceil() as i64)
            .unwrap_or(1)
            .max(1);
        let rtt = i64::try_from(self.status.rtt).unwrap_or(i64::MAX);
        let gap = since_call.map_or(Duration::ZERO, |t| MIN_GAP.saturating_sub(t));
        let (requests, soonest) = needs(self, now, (horizon(rtt) / 2).unsigned_abs(), cap);
        if gap.is_zero() && !(requests.is_empty() && self.returning.is_empty()) {
            let returns = std::mem::take(&mut self.returning);
            return Ok(Turn { returns, requests });
        }
        Err(if !requests.is_empty() || !self.returning.is_empty() {
            gap
        } else {
            soonest.map_or(Duration::from_secs(1), |t| {
                Duration::from_nanos(t.saturating_sub(now)).max(gap)
            })
        })
    }

    fn horizon(&self) -> i64 {
        horizon(i64::try_from(self.status.rtt).unwrap_or(i64::MAX))
    }

    fn take(&mut self, requests: &[Request], reply: Reply, base: u64) {
        for (request, grant) in requests.iter().zip(reply.grants) {
            let key = request.key.as_deref().unwrap_or_default();
            let Some((&s, lease)) = self.keys.iter_mut().find(|(_, l)| *l.key == *key) else {
                continue; // forgotten meanwhile
            };
            lease.grants += 1;
            lease.last_seq = grant.seq;
            let floor = lease.slots.back().map_or(0, |t| t.0);
            for &d in &grant.slots {
                let t = base
                    .saturating_add(u64::try_from(d).unwrap_or(0))
                    .max(floor);
                lease
                    .slots
                    .push_back((t, reply.now.saturating_add(d), lease.grants));
                self.status.reserved_until = self.status.reserved_until.max(t);
            }
            let first = lease.slots.front().map(|t| t.0);
            if let (true, Some(first)) = (lease.waiting, first) {
                lease.waiting = false;
                self.waiting -= 1;
                self.arrived.push((first, s));
            }
        }
    }

    fn unused(&mut self) -> Vec<Return> {
        let mut out = std::mem::take(&mut self.returning);
        out.extend(self.keys.values().filter_map(KeyLease::tail));
        out
    }

    fn go_local(&mut self, now: u64) {
        self.status.mode = Mode::Local;
        self.wake_all(now);
    }
}

/// The per-key schedule of a drip sharing its key limits: each key's
/// lease, or, while the state is out of reach under `local`, each key's
/// own schedule at the key rate divided by the peers (and both while it
/// changes over).
#[derive(Debug)]
pub struct SharedKeys {
    lease: Arc<Lease<KeyLeases>>,
    /// The divided key limit, for `local`.
    pacer: Pacer,
    /// How late a slot may still be used (ns).
    late: u64,
    last_now: u64,
}

impl SharedKeys {
    pub(crate) fn new(lease: Arc<Lease<KeyLeases>>, pacer: Pacer, per_second: f64) -> SharedKeys {
        SharedKeys {
            lease,
            pacer,
            late: late_ns(per_second),
            last_now: 0,
        }
    }

    /// Whether the lone pace lets key `s` go at `now` (its position
    /// restored into the pacer).
    fn alone_allows(&mut self, st: &mut KeyLeases, now: u64, s: u32, key: &[u8]) -> bool {
        self.pacer.restore(st.lease(s, key).local);
        self.pacer.allows(now, 1)
    }
}

impl KeySchedule for SharedKeys {
    fn allows(&mut self, now: u64, s: u32, key: &[u8]) -> bool {
        self.last_now = now;
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        let mode = st.status.mode;
        if mode == Mode::Local {
            return self.alone_allows(&mut st, now, s, key);
        }
        st.drop_late(s, now, self.late);
        let due = st.lease(s, key).slots.front().is_some_and(|t| t.0 <= now);
        due && (!mode.paced_alone(now) || self.alone_allows(&mut st, now, s, key))
    }

    fn commit(&mut self, now: u64, s: u32, key: &[u8]) {
        let mut st = self.lease.lock();
        let mode = st.status.mode;
        let lease = st.lease(s, key);
        lease.wanted = lease.wanted.saturating_sub(1);
        if mode.paced_alone(now) {
            self.pacer.restore(lease.local);
            self.pacer.commit(now, 1);
            lease.local = self.pacer.position_now();
        }
        if mode != Mode::Local {
            lease.slots.pop_front();
        }
    }

    fn first_slot(&mut self, now: u64, s: u32, key: &[u8]) -> LeaseHead {
        self.last_now = now;
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        let mode = st.status.mode;
        let alone = |this: &mut Self, st: &mut KeyLeases| {
            if this.alone_allows(st, now, s, key) {
                now
            } else {
                this.pacer.next_due()
            }
        };
        if mode == Mode::Local {
            return LeaseHead::At(alone(self, &mut st));
        }
        st.drop_late(s, now, self.late);
        let head = match st.lease(s, key) {
            l if !l.slots.is_empty() => LeaseHead::At(l.slots[0].0),
            l if l.waiting => LeaseHead::Asked,
            _ => LeaseHead::Empty,
        };
        match head {
            LeaseHead::At(t) if mode.paced_alone(now) => LeaseHead::At(t.max(alone(self, &mut st))),
            head => head,
        }
    }

    fn ask(&mut self, now: u64, s: u32, key: &[u8], want: Want) {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.status.mode == Mode::Local {
            return;
        }
        // Slots too late to use count as none: a lease holding only those
        // must ask, or the key would wait for ever.
        st.drop_late(s, now, self.late);
        if !st.returning.is_empty() {
            self.lease.wake.notify_one();
        }
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
            // Its records went (expired, dropped) before the slots asked
            // for came, and it wants none now: it waits for none, or it
            // would wait for ever, the keeper asking nothing for it.
            if std::mem::take(&mut lease.waiting) {
                st.waiting -= 1;
            }
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
        let rtt = self.lease.lock().status.rtt;
        (MIN_GAP.as_nanos() as u64)
            .saturating_add(rtt.saturating_mul(2))
            .saturating_add(LEAD_SPARE_NS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::protocol::Ask;
    use std::time::Instant;

    fn request(key: &[u8], want: u64, at: u64, every: u64) -> Request {
        Request {
            key: Some(key.into()),
            want,
            sizes: Vec::new(),
            at,
            every,
        }
    }

    /// A key's records want slots: it asks when its lease is empty or
    /// ends soon, at most a second of its rate, and other keys' times are
    /// where the keeper waits for.
    #[test]
    fn keys_ask_when_their_lease_runs_low() {
        let mut st = KeyLeases::new(10.0);
        st.lease(1, b"a").wanted = 50;
        let b = st.lease(2, b"b");
        b.wanted = 3;
        b.slots.extend([(100, 0, 1), (900, 0, 1)]);
        st.lease(3, b"c").wanted = 0;
        let (asks, soonest) = needs(&st, 0, 400, 10);
        assert_eq!(asks, vec![request(b"a", 10, 0, 0)]);
        assert_eq!(soonest, Some(500));
        let (asks, _) = needs(&st, 500, 400, 10);
        assert_eq!(asks.len(), 2);
    }

    /// A key whose lease holds only slots too late to use asks for new
    /// ones (it would otherwise wait for ever, no timer and no ask).
    #[test]
    fn a_lease_of_late_slots_asks_again() {
        let lease = Arc::new(Lease::new(KeyLeases::new(10.0), Instant::now()));
        let pacer = Pacer::new(crate::rate::parse_rate("10/s").unwrap(), 1, 2_000_000);
        let mut keys = SharedKeys::new(Arc::clone(&lease), pacer, 10.0);
        {
            let mut st = lease.lock();
            let a = st.lease(1, b"a");
            // A slot of an earlier grant than the key's last.
            a.grants = 2;
            a.slots.push_back((0, 0, 1));
        }
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
        assert_eq!(lease.lock().status.forfeited, 1);
    }

    /// A key that asked for slots and then wants none before they came
    /// (its records expired or were dropped meanwhile, say while the state
    /// did not answer) waits for none: its next records ask anew, instead
    /// of waiting for ever for slots the keeper no longer asks for.
    #[test]
    fn a_key_that_wants_no_slot_any_more_waits_for_none() {
        let lease = Arc::new(Lease::new(KeyLeases::new(10.0), Instant::now()));
        let pacer = Pacer::new(crate::rate::parse_rate("10/s").unwrap(), 1, 2_000_000);
        let mut keys = SharedKeys::new(Arc::clone(&lease), pacer, 10.0);
        let want = |records| Want {
            records,
            at: 0,
            every: 0,
        };
        keys.ask(0, 1, b"a", want(2));
        assert_eq!(keys.first_slot(0, 1, b"a"), LeaseHead::Asked);
        // Its records expired before the keeper asked; a new one joins the
        // line, asking for nothing yet (it asks at its turn).
        keys.ask(1_000, 1, b"a", want(0));
        assert_eq!(keys.first_slot(1_000, 1, b"a"), LeaseHead::Empty);
        assert_eq!(lease.lock().waiting, 0);
        // At its turn it asks, and the keeper asks for it.
        keys.ask(2_000, 1, b"a", want(1));
        assert_eq!(keys.first_slot(2_000, 1, b"a"), LeaseHead::Asked);
        let (asks, _) = needs(&lease.lock(), 2_000, 400, 10);
        assert_eq!(asks.len(), 1);
    }

    /// A key held back by the global limits asks only when its records'
    /// turn nears, for slots at the times the global limits let them go.
    #[test]
    fn a_key_asks_when_its_turn_nears_for_slots_spaced_as_its_turns() {
        let mut st = KeyLeases::new(10.0);
        let a = st.lease(1, b"a");
        (a.wanted, a.at, a.every) = (3, 1000, 250);
        let (asks, soonest) = needs(&st, 0, 400, 10);
        assert!(asks.is_empty());
        assert_eq!(soonest, Some(600));
        let (asks, _) = needs(&st, 600, 400, 10);
        assert_eq!((asks[0].at, asks[0].every), (1000, 250));
        assert_eq!(
            asks[0].ask_at(600),
            Ask {
                key: Some(b"a"),
                want: 3,
                sizes: &[],
                after: 400,
                every: 250
            }
        );
    }
}
