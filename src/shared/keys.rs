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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::keeper::{Grants, Lease, Mode, Return, SlotRequest, Status, Turn};
use super::lease::Held;
use super::protocol::{horizon, late_ns, Reply, POLL_NS};
use crate::keyed::{KeySchedule, KeyTable, LeaseHead, Want};
use crate::pacer::{slack_for, Pacer, Position};
use crate::schedule::Limit;
use crate::sys::Unpoisoned;

/// Keys one call reserves for at most.
pub const MAX_BATCH: usize = 500;
/// The least time between two calls of one drip's keeper, ns.
pub const MIN_GAP: Duration = Duration::from_millis(20);

/// Time a key asks before its turn besides the keeper's gap and round
/// trips, ns.
const LEAD_SPARE_NS: u64 = 10_000_000;

/// One key's lease: its reserved slots, on drip's clock (one grant type
/// with the global limits' lease, [`Held`]), and what its records want.
#[derive(Debug, Default)]
struct KeyLease {
    held: Held,
    /// Records of the key waiting, as last told, less those sent since.
    wanted: u32,
    /// Some of them expired since it last asked: slots granted beyond
    /// those left go back.
    expired: bool,
    /// The earliest time of its next slot (drip's clock, ns) and of each
    /// after it, ns apart: when the global limits let its records go.
    at: u64,
    every: u64,
    /// The key waits for slots (no timer in the keyed queues).
    waiting: bool,
    /// The key's schedule while pacing alone (`local`).
    local: Position,
    /// Its limit's number in the table's limits ([`KeyTable::index`]).
    limit: usize,
}

impl KeyLease {
    /// Whether it is `key`'s.
    fn is(&self, key: &[u8]) -> bool {
        self.held.key.as_deref() == Some(key)
    }
}

/// The keys' leases, which [`SharedKeys`] and the keeper share.
#[derive(Debug, Default)]
pub(crate) struct KeyLeases {
    /// By the keyed queues' slot number.
    keys: HashMap<u32, KeyLease>,
    /// Waiting keys that got slots: (first slot, key's slot number).
    arrived: Vec<(u64, u32)>,
    waiting: usize,
    /// What the leases of keys forgotten left to give back.
    returning: Vec<Return>,
    /// The limits per key in force.
    pub(crate) table: Arc<KeyTable>,
    /// The most slots one call asks for a key, by its limit's number: a
    /// second of its rate.
    caps: Vec<u64>,
    pub(crate) status: Status,
    /// The limits per key `drip ctl` changed, until the keys' schedule
    /// takes them ([`SharedKeys::relimited`]).
    relimited: Option<Arc<KeyTable>>,
    /// The limit per key in force, as `drip ctl` shows it.
    pub(crate) in_force: Option<crate::schedule::KeyInForce>,
}

impl KeyLeases {
    pub(crate) fn new(table: Arc<KeyTable>) -> KeyLeases {
        KeyLeases {
            caps: caps(&table),
            table,
            ..KeyLeases::default()
        }
    }

    /// Key `key`'s limit's number in the table, when it has a limit of its
    /// own (a key with none asks the state for nothing).
    fn limited(&self, key: &[u8]) -> Option<usize> {
        let i = self.table.index(key);
        self.table.limits()[i].map(|_| i)
    }

    /// The lease of key `s` (`key`'s bytes), new when it has none or held
    /// another key's (a key forgotten and its slot number taken by
    /// another: [`KeyLeases::retire`]).
    fn lease(&mut self, s: u32, key: &[u8]) -> &mut KeyLease {
        if self.keys.get(&s).is_some_and(|l| !l.is(key)) {
            self.retire(s);
        }
        let limit = self.table.index(key);
        let lease = self.keys.entry(s).or_insert_with(|| KeyLease {
            limit,
            ..KeyLease::default()
        });
        lease.held.key.get_or_insert_with(|| key.into());
        lease
    }

    /// Key `s`'s lease ends (its key is forgotten): the unused tail of its
    /// last grant goes back at the keeper's next turn, with what was going
    /// back; its other slots are forfeited.
    fn retire(&mut self, s: u32) {
        let Some(k) = self.keys.remove(&s) else {
            return;
        };
        self.waiting -= usize::from(k.waiting);
        let mut held = k.held;
        held.send_back_tail(held.slots.len(), &mut self.status.forfeited);
        self.status.forfeited += held.slots.len() as u64;
        self.returning.extend(held.take_returning());
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

/// The most slots one call asks for a key of each limit of `table`: a
/// second of its rate, at least one.
fn caps(table: &KeyTable) -> Vec<u64> {
    (table.limits().iter())
        .map(|l| l.map_or(1, |l| (l.rate.per_second().ceil() as u64).max(1)))
        .collect()
}

/// What the keys want at `now`: each key whose records want more slots
/// than its lease holds, whose lease is empty or ends within `ahead` ns,
/// and whose next slot is wanted within `ahead` ns, asks for them (at
/// most a second of its rate), up to [`MAX_BATCH`] keys; and when the
/// next of the others will ask.
fn needs(st: &KeyLeases, now: u64, ahead: u64) -> (Vec<SlotRequest>, Option<u64>) {
    let mut asks = Vec::new();
    let mut soonest: Option<u64> = None;
    for k in st.keys.values() {
        let want = u64::from(k.wanted).saturating_sub(k.held.slots.len() as u64);
        if want == 0 {
            continue;
        }
        let low = k
            .held
            .slots
            .back()
            .map_or(0, |t| t.at.saturating_sub(ahead));
        let low = low.max(k.at.saturating_sub(ahead));
        if low <= now {
            if asks.len() < MAX_BATCH {
                // The slots after those held keep their spacing.
                let held = k.held.slots.len() as u64;
                asks.push(SlotRequest {
                    key: k.held.key.clone(),
                    want: want.min(st.caps.get(k.limit).copied().unwrap_or(1)),
                    sizes: Vec::new(),
                    at: k.at.saturating_add(k.every.saturating_mul(held)),
                    every: k.every,
                    within: None,
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
        let rtt = i64::try_from(self.status.rtt).unwrap_or(i64::MAX);
        let gap = since_call.map_or(Duration::ZERO, |t| MIN_GAP.saturating_sub(t));
        let (requests, soonest) = needs(self, now, (horizon(rtt) / 2).unsigned_abs());
        let giving =
            !self.returning.is_empty() || self.keys.values().any(|k| k.held.returning.is_some());
        if gap.is_zero() && (giving || !requests.is_empty()) {
            let mut returns = std::mem::take(&mut self.returning);
            let held = self.keys.values_mut().map(|k| &mut k.held);
            returns.extend(held.filter_map(|h| h.returning.is_some().then(|| h.take_returning())?));
            return Ok(Turn {
                returns,
                requests,
                settlements: Vec::new(),
            });
        }
        Err(if giving || !requests.is_empty() {
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

    fn take(&mut self, requests: &[SlotRequest], reply: Reply, base: u64) {
        for (request, grant) in requests.iter().zip(&reply.grants) {
            let key = request.key.as_deref().unwrap_or_default();
            let Some((&s, lease)) = self.keys.iter_mut().find(|(_, l)| l.is(key)) else {
                continue; // forgotten meanwhile
            };
            let latest = lease.held.take(grant, &[], (reply.now, reply.mark), base);
            self.status.reserved_until = self.status.reserved_until.max(latest);
            if let (true, Some(first)) = (lease.waiting, lease.held.slots.front()) {
                lease.waiting = false;
                self.waiting -= 1;
                self.arrived.push((first.at, s));
            }
            if lease.expired {
                // Records that expired while their slots were being reserved.
                let unwanted = lease.held.slots.len().saturating_sub(lease.wanted as usize);
                lease
                    .held
                    .send_back_tail(unwanted, &mut self.status.forfeited);
            }
        }
    }

    /// Slots that did not go back: those still usable when sent serve the
    /// key's next records ([`Held::refused`]); those of keys forgotten are
    /// lost.
    fn refused(&mut self, returns: &[Return]) {
        for r in returns {
            let key = r.key.as_deref().unwrap_or_default();
            let lost = &mut self.status.forfeited;
            match self.keys.values_mut().find(|l| l.is(key)) {
                Some(l) => _ = l.held.refused(std::slice::from_ref(r), lost),
                None => *lost += r.count,
            }
        }
    }

    fn unused(&mut self) -> Vec<Return> {
        let mut out = std::mem::take(&mut self.returning);
        out.extend(self.keys.values_mut().flat_map(|k| k.held.unused()));
        out
    }

    fn go_local(&mut self, now: u64) {
        self.status.mode = Mode::Local;
        self.wake_all(now);
    }

    fn adopt(
        &mut self,
        _limits: &[Limit],
        _tags: &[Option<String>],
        key: Option<&KeyTable>,
    ) -> bool {
        let Some(table) = key else {
            return false;
        };
        let table = Arc::new(table.clone());
        self.caps = caps(&table);
        for lease in self.keys.values_mut() {
            lease.limit = table.index(lease.held.key.as_deref().unwrap_or_default());
        }
        self.table = Arc::clone(&table);
        if let Some(in_force) = &self.in_force {
            *in_force.lock().unpoisoned() = table.default();
        }
        self.relimited = Some(table);
        true
    }
}

/// The per-key schedule of a drip sharing its key limits: each key's
/// lease, or, while the state is out of reach under `local`, each key's
/// own schedule at its limit divided by the peers (and both while it
/// changes over). A key with no limit of its own (no row of the table
/// matches it, and no `--key-rate RATE`) goes as it comes.
#[derive(Debug)]
pub struct SharedKeys {
    lease: Arc<Lease<KeyLeases>>,
    /// Each limit of the table divided by the peers, for `local`, by its
    /// number ([`KeyTable::index`]; `None`: no limit).
    pacers: Vec<Option<Pacer>>,
    /// `--share-peers`, which the lone pace divides each key's rate by.
    peers: u64,
    /// How late a slot may still be used (ns), by the limit's number.
    lates: Vec<u64>,
    last_now: u64,
}

impl SharedKeys {
    /// The schedule over `lease` of the limits of `table`, each key's
    /// lone pace its limit divided by `peers`.
    pub(crate) fn new(lease: Arc<Lease<KeyLeases>>, table: &KeyTable, peers: u64) -> SharedKeys {
        let mut keys = SharedKeys {
            lease,
            pacers: Vec::new(),
            peers,
            lates: Vec::new(),
            last_now: 0,
        };
        keys.limit_by(table);
        keys
    }

    /// Pace alone by `table`'s limits, each divided by the peers.
    fn limit_by(&mut self, table: &KeyTable) {
        let pacer = |l: &Limit| {
            let local = super::gcra::divided(l, self.peers);
            Pacer::new(local.rate, local.burst, slack_for(local.rate))
        };
        self.pacers = table
            .limits()
            .iter()
            .map(|l| l.as_ref().map(pacer))
            .collect();
        self.lates = (table.limits().iter())
            .map(|l| l.map_or(0, |l| late_ns(l.rate.per_second())))
            .collect();
    }

    /// The lone pacer of key `s`'s limit, at the key's position.
    fn pacer(&mut self, st: &mut KeyLeases, s: u32, key: &[u8]) -> &mut Pacer {
        let lease = st.lease(s, key);
        let pacer = (self.pacers[lease.limit].as_mut()).expect("only keys with a limit pace");
        pacer.restore(lease.local);
        pacer
    }

    /// Drop key `s`'s slots too late to use at `now` ([`Held::drop_late`];
    /// the keeper woken for those going back). Its records ask again, for
    /// when they are expected then: the times asked for before have proved
    /// wrong.
    fn drop_late(&self, st: &mut KeyLeases, s: u32, now: u64) {
        let Some(k) = st.keys.get_mut(&s) else { return };
        let late = self.lates[k.limit];
        if k.held.slots.front().is_some_and(|t| t.at + late < now) {
            (k.wanted, k.expired) = (0, false);
        }
        k.held.drop_late(now, |_| late, &mut st.status.forfeited);
        if k.held.returning.is_some() {
            self.lease.wake.notify_one();
        }
    }

    /// Whether the lone pace lets key `s` go at `now` (its position
    /// restored into the pacer).
    fn alone_allows(&mut self, st: &mut KeyLeases, now: u64, s: u32, key: &[u8]) -> bool {
        self.pacer(st, s, key).allows(now, 1)
    }
}

impl KeySchedule for SharedKeys {
    fn allows(&mut self, now: u64, s: u32, key: &[u8]) -> bool {
        self.last_now = now;
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        if st.limited(key).is_none() {
            return true;
        }
        let mode = st.status.mode;
        if mode == Mode::Local {
            return self.alone_allows(&mut st, now, s, key);
        }
        self.drop_late(&mut st, s, now);
        let due = st
            .lease(s, key)
            .held
            .slots
            .front()
            .is_some_and(|t| t.at <= now);
        due && (!mode.paced_alone(now) || self.alone_allows(&mut st, now, s, key))
    }

    fn commit(&mut self, now: u64, s: u32, key: &[u8]) {
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        if st.limited(key).is_none() {
            return;
        }
        let mode = st.status.mode;
        if mode.paced_alone(now) {
            let pacer = self.pacer(&mut st, s, key);
            pacer.commit(now, 1);
            let at = pacer.position_now();
            st.lease(s, key).local = at;
        }
        let lease = st.lease(s, key);
        lease.wanted = lease.wanted.saturating_sub(1);
        if mode != Mode::Local {
            lease.held.slots.pop_front();
        }
    }

    fn first_slot(&mut self, now: u64, s: u32, key: &[u8]) -> LeaseHead {
        self.last_now = now;
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        if st.limited(key).is_none() {
            return LeaseHead::At(now);
        }
        let mode = st.status.mode;
        let alone = |this: &mut Self, st: &mut KeyLeases| {
            let pacer = this.pacer(st, s, key);
            if pacer.allows(now, 1) {
                now
            } else {
                pacer.next_due()
            }
        };
        if mode == Mode::Local {
            return LeaseHead::At(alone(self, &mut st));
        }
        self.drop_late(&mut st, s, now);
        let head = match st.lease(s, key) {
            l if !l.held.slots.is_empty() => LeaseHead::At(l.held.slots[0].at),
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
        if st.status.mode == Mode::Local || st.limited(key).is_none() {
            return;
        }
        // Slots too late to use count as none: a lease holding only those
        // must ask, or the key would wait for ever.
        self.drop_late(&mut st, s, now);
        let lease = st.lease(s, key);
        let covered = lease.wanted as usize <= lease.held.slots.len();
        (lease.wanted, lease.at, lease.every) = (want.records, want.at, want.every);
        lease.expired = false;
        if !lease.held.slots.is_empty() {
            if covered && lease.held.slots.len() < want.records as usize {
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
        st.retire(s);
        if !st.returning.is_empty() {
            self.lease.wake.notify_one();
        }
    }

    fn expired(&mut self, s: u32, key: &[u8], waiting: u32) {
        let mut guard = self.lease.lock();
        let st = &mut *guard;
        let local = st.status.mode == Mode::Local;
        let Some(lease) = st.keys.get_mut(&s).filter(|l| !local && l.is(key)) else {
            return;
        };
        lease.wanted = lease.wanted.min(waiting);
        lease.expired = true;
        if waiting == 0 && std::mem::take(&mut lease.waiting) {
            // It asks for nothing now: its queue hears of it as of slots
            // come, and finds itself empty.
            st.waiting -= 1;
            st.arrived.push((0, s));
        }
        let beyond = lease.held.slots.len().saturating_sub(waiting as usize);
        lease.held.send_back_tail(beyond, &mut st.status.forfeited);
        if lease.held.returning.is_some() {
            self.lease.wake.notify_one();
        }
    }

    fn next_poll(&self) -> Option<u64> {
        // Asked while records wait: look again at least this often, so a
        // key whose slots are slow to come (an outage, a lost state) is
        // never left without a wake-up, and drip never takes the line
        // for finished while records wait in it.
        Some(self.last_now.saturating_add(POLL_NS))
    }

    fn relimited(&mut self) -> Option<KeyTable> {
        let table = self.lease.lock().relimited.take()?;
        self.limit_by(&table);
        Some(KeyTable::clone(&table))
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
    use crate::shared::gcra::Weight;
    use crate::shared::lease::HeldSlot;
    use crate::shared::protocol::Ask;
    use std::time::Instant;

    /// 10/s for every key.
    fn ten() -> Arc<KeyTable> {
        let rate = crate::rate::parse_rate("10/s").unwrap();
        Arc::new(KeyTable::one(Limit::records(rate, Some(1))))
    }

    fn request(key: &[u8], want: u64, at: u64, every: u64) -> SlotRequest {
        SlotRequest {
            key: Some(key.into()),
            want,
            sizes: Vec::new(),
            at,
            every,
            within: None,
        }
    }

    /// A key's records want slots: it asks when its lease is empty or
    /// ends soon, at most a second of its rate, and other keys' times are
    /// where the keeper waits for.
    #[test]
    fn keys_ask_when_their_lease_runs_low() {
        let mut st = KeyLeases::new(ten());
        st.lease(1, b"a").wanted = 50;
        let b = st.lease(2, b"b");
        b.wanted = 3;
        b.held.slots.extend([100, 900].map(|at| HeldSlot {
            at,
            size: Weight::from(1),
            grant: 1,
            shared: 0,
            mark: crate::shared::protocol::Mark::default(),
        }));
        st.lease(3, b"c").wanted = 0;
        let (asks, soonest) = needs(&st, 0, 400);
        assert_eq!(asks, vec![request(b"a", 10, 0, 0)]);
        assert_eq!(soonest, Some(500));
        let (asks, _) = needs(&st, 500, 400);
        assert_eq!(asks.len(), 2);
    }

    /// A key whose lease holds only slots too late to use asks for new
    /// ones (it would otherwise wait for ever, no timer and no ask).
    #[test]
    fn a_lease_of_late_slots_asks_again() {
        let lease = Arc::new(Lease::new(KeyLeases::new(ten()), Instant::now()));
        let mut keys = SharedKeys::new(Arc::clone(&lease), &ten(), 1);
        {
            let mut st = lease.lock();
            let a = st.lease(1, b"a");
            // A slot of an earlier grant than the key's last.
            a.held.grants = 2;
            a.held.slots.push_back(HeldSlot {
                at: 0,
                size: Weight::from(1),
                grant: 1,
                shared: 0,
                mark: crate::shared::protocol::Mark::default(),
            });
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

    /// With a rate table, each key takes its own row: alone (`local`) it
    /// paces at its row's rate divided by the peers, a key with no row and
    /// no default goes as it comes and asks the state for nothing, and a
    /// key's asks are capped at a second of its own rate.
    #[test]
    fn each_key_paces_by_its_own_row() {
        let rows = crate::keyed::rates::parse("a 10/s\nb 2/s\n", None, false).unwrap();
        let table = Arc::new(KeyTable::new(
            crate::keyed::KeyRates::new(rows).unwrap(),
            None,
        ));
        let lease = Arc::new(Lease::new(
            KeyLeases::new(Arc::clone(&table)),
            Instant::now(),
        ));
        let mut keys = SharedKeys::new(Arc::clone(&lease), &table, 2);
        lease.lock().go_local(0);
        let sent = |keys: &mut SharedKeys, s: u32, key: &[u8]| {
            let mut n = 0;
            for ms in 0..10_000u64 {
                let now = ms * 1_000_000;
                if keys.allows(now, s, key) {
                    keys.commit(now, s, key);
                    n += 1;
                }
            }
            n
        };
        // 10 s at 10/s and 2/s, each halved by the two peers.
        assert_eq!(sent(&mut keys, 1, b"a"), 50);
        assert_eq!(sent(&mut keys, 2, b"b"), 10);
        assert_eq!(sent(&mut keys, 3, b"c"), 10_000);
        assert_eq!(keys.first_slot(5, 3, b"c"), LeaseHead::At(5));
        assert!(!lease.lock().keys.contains_key(&3), "c holds no lease");
        let mut st = lease.lock();
        st.status.mode = Mode::Shared;
        st.lease(1, b"a").wanted = 100;
        st.lease(2, b"b").wanted = 100;
        let (mut asks, _) = needs(&st, 0, 400);
        asks.sort_by(|x, y| x.key.cmp(&y.key));
        let wants: Vec<u64> = asks.iter().map(|a| a.want).collect();
        assert_eq!(wants, [10, 2]);
    }

    /// A key forgotten (`--max-keys`): the unused tail of its last grant
    /// goes back at the keeper's next turn, its other slots are forfeited
    /// (they vanished, neither given back nor counted).
    #[test]
    fn a_forgotten_keys_slots_go_back_or_are_forfeited() {
        let lease = Arc::new(Lease::new(KeyLeases::new(ten()), Instant::now()));
        let mut keys = SharedKeys::new(Arc::clone(&lease), &ten(), 1);
        {
            let mut st = lease.lock();
            let a = st.lease(1, b"a");
            (a.held.grants, a.held.last_seq) = (2, 7);
            let slot = |at: u64, grant| HeldSlot {
                at,
                size: Weight::from(1),
                grant,
                shared: at as i64,
                mark: crate::shared::protocol::Mark::default(),
            };
            a.held
                .slots
                .extend([slot(100, 1), slot(200, 2), slot(300, 2)]);
        }
        keys.forget(1);
        let mut st = lease.lock();
        assert_eq!(st.status.forfeited, 1);
        let back = Return {
            key: Some(b"a"[..].into()),
            seq: 7,
            first_unused: 200,
            size: Weight::from(1),
            count: 2,
        };
        assert_eq!(st.turn(0, None).map(|t| t.returns), Ok(vec![back]));
    }

    /// A key that asked for slots and then wants none before they came
    /// (its records expired or were dropped meanwhile, say while the state
    /// did not answer) waits for none: its next records ask anew, instead
    /// of waiting for ever for slots the keeper no longer asks for.
    #[test]
    fn a_key_that_wants_no_slot_any_more_waits_for_none() {
        let lease = Arc::new(Lease::new(KeyLeases::new(ten()), Instant::now()));
        let mut keys = SharedKeys::new(Arc::clone(&lease), &ten(), 1);
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
        let (asks, _) = needs(&lease.lock(), 2_000, 400);
        assert_eq!(asks.len(), 1);
    }

    /// A key held back by the global limits asks only when its records'
    /// turn nears, for slots at the times the global limits let them go.
    #[test]
    fn a_key_asks_when_its_turn_nears_for_slots_spaced_as_its_turns() {
        let mut st = KeyLeases::new(ten());
        let a = st.lease(1, b"a");
        (a.wanted, a.at, a.every) = (3, 1000, 250);
        let (asks, soonest) = needs(&st, 0, 400);
        assert!(asks.is_empty());
        assert_eq!(soonest, Some(600));
        let (asks, _) = needs(&st, 600, 400);
        assert_eq!((asks[0].at, asks[0].every), (1000, 250));
        assert_eq!(
            asks[0].ask_at(600),
            Ask {
                key: Some(b"a"),
                want: 3,
                sizes: &[],
                after: 400,
                every: 250,
                within: None
            }
        );
    }
}
