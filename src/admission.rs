//! Admission: what happens to each arriving record.
//!
//! Records are decided one at a time, in input order, each at its arrival
//! time `t`:
//!
//! 1. if no record is waiting ahead of it and the [`Schedule`] allows a
//!    departure at `t`, it leaves now: it takes its slot and goes to the
//!    outbox (the writer's), never occupying a place in the bucket;
//! 2. otherwise, if the bucket has room, it waits there;
//! 3. otherwise the overflow policy applies ([`Overflow`]): `block` hands
//!    it back to the caller (who stops reading until there is room),
//!    `drop-newest` drops it, `drop-oldest` evicts the oldest *waiting*
//!    record (never one already in the outbox), `fail` hands it back as an
//!    overflow.
//!
//! Waiting records leave, in order, as soon as the schedule allows
//! ([`Admission::release`]); records that waited longer than `--max-wait`
//! expire ([`Admission::expire`]). A dropped or expired record takes no
//! slot of the schedule.
//!
//! With `--max-wait` and a policy other than `block`, a record is first
//! held to its deadline: when the [`Forecast`] (the records waiting ahead
//! of it, leaving as soon as every limit allows) already puts its
//! departure later than `--max-wait` after its arrival, less the
//! schedule's slack (a wake-up that late keeps the schedule, and the
//! record must not expire then), it is refused at once: `drop-newest` drops it, `drop-oldest` evicts the fewest oldest
//! waiting records that let it leave in time (or drops it when even an
//! empty bucket would not), `fail` hands it back. Only the schedule is
//! forecast: a record delayed later (stdout stalled, a pause) still
//! expires while waiting. The forecast is kept as records join the line
//! and made again from the schedule when departures did not keep to it
//! (a late release, an eviction, an expiry).
//!
//! Records read together may be decided together, but only where the
//! outcome is exactly the one-at-a-time outcome: a test on virtual time
//! (`tests/admission.rs`) holds this code against a plain one-at-a-time
//! model over random arrivals and random cuts of them into reads.
//!
//! Pure: no threads, no clock, no I/O. Times are ns on the caller's clock
//! and must not go backwards.

use crate::bucket::{Bucket, Fate, Offered, Overflow, Segment};
use crate::keyed::Keyed;
use crate::ledger::Ledger;
use crate::schedule::{Forecast, Limit, Schedule};

/// A moment's view of the waiting records, in one bucket or in the keys'
/// queues together ([`Admission::bucket`]).
#[derive(Debug, Clone, Copy)]
pub struct Gauge {
    len: usize,
    bytes: usize,
    capacity: usize,
    capacity_bytes: usize,
    policy: Overflow,
    max_depth: usize,
    oldest_arrival: Option<u64>,
}

impl Gauge {
    /// Records waiting.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The most records that may wait.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// The most bytes that may wait (`usize::MAX` when unbounded).
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }
    /// The overflow policy.
    pub fn policy(&self) -> Overflow {
        self.policy
    }
    /// The most records that ever waited at once.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }
    /// When the oldest waiting record arrived (ns).
    pub fn oldest_arrival(&self) -> Option<u64> {
        self.oldest_arrival
    }
}

/// How each record of one arrival is held to `--max-wait`.
#[derive(Debug, Clone, Copy)]
struct Terms {
    /// The latest departure (ns) that makes it: `--max-wait` after the
    /// arrival, less the schedule's slack.
    deadline: u64,
    policy: Overflow,
    /// Every record costs 1: what befalls one befalls those after it.
    alike: bool,
    /// As `alike`, and the bucket is not bounded in bytes: room for one
    /// is room for the next.
    room_alike: bool,
}

/// What became of a record held to its deadline and the bucket's room.
enum Held {
    /// It may wait (older records evicted for it, when `evicted`).
    Waits { evicted: bool },
    /// It was refused or dropped (with the records alike after it).
    Disposed,
    /// It overflowed under `fail`.
    Overflowed,
}

/// The bucket, the schedule in front of it, and the outbox behind it.
#[derive(Debug)]
pub struct Admission {
    bucket: Bucket,
    schedule: Box<dyn Schedule>,
    /// Records the schedule let go, in order, not yet taken by the writer.
    outbox: Vec<Segment>,
    outbox_len: usize,
    /// Records that waited longer than this (ns) expire.
    max_wait_ns: Option<u64>,
    /// The longest any record waited in the bucket before leaving (ns).
    longest_wait_ns: u64,
    /// With limits per key: the keys' queues, used instead of `bucket`
    /// (which then only gives the bounds and the policy).
    keyed: Option<Box<Keyed>>,
    /// The schedule after every waiting record has left when the forecast
    /// says; `None` when not known (made again when asked).
    forecast: Option<Forecast>,
    /// The first record of the latest read (its delimiter included): the
    /// record a forecast of "a record arriving now" assumes.
    last_record: Vec<u8>,
    /// Under `fail`: how long (ns) after its arrival the forecast put the
    /// departure of the record handed back, when that was why.
    refused_wait_ns: Option<u64>,
    /// Paused (`drip ctl … pause`): nothing leaves, arrivals wait.
    paused: bool,
    /// With limits per key: when records of the keys last left (ns). The
    /// keyed queues do not ask a schedule that limits nothing and holds no
    /// key, so it does not know; a change of limits is told
    /// ([`Admission::replace_limits`]). Noted once a call, not a record.
    keys_left_at: Option<u64>,
}

impl Admission {
    /// Admission into `bucket` under `schedule`; records that wait longer
    /// than `max_wait_ns` expire.
    pub fn new(bucket: Bucket, schedule: Box<dyn Schedule>, max_wait_ns: Option<u64>) -> Self {
        Admission {
            bucket,
            schedule,
            outbox: Vec::new(),
            outbox_len: 0,
            max_wait_ns,
            longest_wait_ns: 0,
            keyed: None,
            forecast: None,
            last_record: b"\n".to_vec(),
            refused_wait_ns: None,
            paused: false,
            keys_left_at: None,
        }
    }

    /// Admission with limits per key: records wait in `keyed`'s queues,
    /// within the bucket's bounds and under its policy.
    pub fn with_keys(mut self, keyed: Keyed) -> Self {
        let max_wait = self.max_wait_ns;
        let keyed = keyed.refusing(max_wait, self.schedule.slack_ns());
        self.keyed = Some(Box::new(keyed));
        self
    }

    /// The keys, with limits per key.
    pub fn keys(&self) -> Option<&Keyed> {
        self.keyed.as_deref()
    }

    /// The keys, to change their limit.
    pub fn keys_mut(&mut self) -> Option<&mut Keyed> {
        self.keyed.as_deref_mut()
    }

    /// The waiting records, seen together.
    pub fn bucket(&self) -> Gauge {
        let b = &self.bucket;
        let mut gauge = Gauge {
            len: b.len(),
            bytes: b.bytes(),
            capacity: b.capacity(),
            capacity_bytes: b.capacity_bytes(),
            policy: b.policy(),
            max_depth: b.max_depth(),
            oldest_arrival: b.oldest_arrival(),
        };
        if let Some(k) = &self.keyed {
            gauge.len = k.len();
            gauge.bytes = k.bytes();
            gauge.max_depth = k.max_depth();
            gauge.oldest_arrival = k.oldest_arrival();
        }
        gauge
    }

    /// Pause (`true`) or resume: while paused nothing leaves, neither on
    /// arrival nor from the bucket; arrivals wait and meet the overflow
    /// policy as always, and `--max-wait` goes on counting. What the
    /// schedule let go before the pause (the outbox) is still written.
    pub fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Whether paused.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The schedule.
    pub fn schedule(&self) -> &dyn Schedule {
        &*self.schedule
    }

    /// The schedule, to take a slot outside the bucket (a retried job) or
    /// change its limits: the forecast is made again after.
    pub fn schedule_mut(&mut self) -> &mut dyn Schedule {
        self.forecast = None;
        &mut *self.schedule
    }

    /// Enforce `limits` from `now` (ns) on (`drip ctl … rate`), counting
    /// from the last record that left, also one of the keys that the
    /// schedule was not asked about ([`Schedule::replace_limits`]).
    ///
    /// # Errors
    /// As [`Schedule::replace_limits`]: its limits are left as they were
    /// (the keys' last departure, told first, is a fact either way).
    pub fn replace_limits(&mut self, now: u64, limits: &[Limit]) -> Result<(), String> {
        if let Some(at) = self.keys_left_at {
            self.schedule.left_unasked(at);
        }
        self.schedule_mut().replace_limits(now, limits)
    }

    /// Records in the outbox.
    pub fn outbox_len(&self) -> usize {
        self.outbox_len
    }

    /// The longest any released record waited in the bucket, ns.
    pub fn longest_wait_ns(&self) -> u64 {
        let keyed = self.keyed.as_ref().map_or(0, |k| k.longest_wait_ns());
        self.longest_wait_ns.max(keyed)
    }

    /// Records of `seg` arrive at `now`. `may_leave`: whether the writer
    /// can take records now (false while stdout is blocked: arrivals then
    /// wait); `policy`: the overflow policy to apply (the bucket's own, or
    /// `block` while the caller is patient).
    ///
    /// Returns what the policy handed back: under `block`, the records that
    /// did not fit (not counted as read: offer them again later); under
    /// `fail`, those from the one that overflowed. Everything else is
    /// counted in `ledger`.
    ///
    /// Every record must be at most the bucket's `capacity_bytes` (the
    /// splitter guarantees it): a larger one would be handed back under
    /// `block` for ever.
    pub fn arrive(
        &mut self,
        now: u64,
        mut seg: Segment,
        policy: Overflow,
        may_leave: bool,
        ledger: &mut Ledger,
    ) -> Offered {
        seg.arrived = now;
        if let Some(first) = seg.first_record() {
            self.last_record.clear();
            self.last_record.extend_from_slice(first);
        }
        self.expire(now, ledger);
        let may_leave = may_leave && !self.paused;
        if let Some(keyed) = self.keyed.as_deref_mut() {
            let mut sent = 0;
            if may_leave {
                sent = keyed.release(now, &mut *self.schedule, &mut self.outbox);
            }
            let (back, arrived_sent) = keyed.arrive(
                now,
                seg,
                policy,
                may_leave,
                &mut *self.schedule,
                ledger,
                &mut self.outbox,
            );
            sent += arrived_sent;
            self.outbox_len += sent;
            if sent > 0 {
                self.keys_left_at = Some(now);
            }
            return back;
        }
        if may_leave {
            // Waiting records that are due go first.
            self.release(now);
            if self.bucket.is_empty() {
                let n = self.schedule.release(now, seg.len(), &mut seg.records());
                if n > 0 {
                    ledger.read(n);
                    self.push_outbox(seg.split_front(n));
                }
                if seg.is_empty() {
                    return Offered::Done;
                }
            }
        }
        if self.refuses(policy) && self.forecast_at(now).is_some() {
            return self.wait_in_time(now, seg, policy, may_leave, ledger);
        }
        if may_leave && policy == Overflow::DropOldest && self.schedule.weighs_bytes() {
            // An eviction can put a smaller record at the head, which may
            // be due at once under a byte rate: decide one at a time.
            while !seg.is_empty() {
                let one = seg.split_front(1);
                self.wait(now, one, policy, ledger);
                self.release(now);
            }
            return Offered::Done;
        }
        self.wait(now, seg, policy, ledger)
    }

    /// Whether records that cannot leave within `--max-wait` are refused
    /// at arrival under `policy`: with `--max-wait`, under a policy that
    /// drops or fails.
    fn refuses(&self, policy: Overflow) -> bool {
        self.max_wait_ns.is_some() && policy != Overflow::Block
    }

    /// The forecast of the waiting records' departures at `now`, made
    /// again from the schedule when not known: O(waiting records) then.
    /// `None` when the schedule cannot be forecast.
    fn forecast_at(&mut self, now: u64) -> Option<&mut Forecast> {
        if self.bucket.is_empty() {
            // Records that left at once took slots it does not know of.
            self.forecast = None;
        }
        if self.forecast.is_none() {
            let mut forecast = Forecast::new(self.schedule.forecast()?, now);
            for record in self.bucket.records() {
                forecast.push(now, record);
            }
            self.forecast = Some(forecast);
        }
        self.forecast.as_mut()
    }

    /// Records of `seg` arrive at `now` under `policy`, which refuses what
    /// cannot leave by `now + --max-wait`: one at a time, each is held to
    /// its deadline ([`Admission::arrive`]), then waits or meets the policy
    /// as the bucket's room says. Needs a forecast.
    fn wait_in_time(
        &mut self,
        now: u64,
        mut seg: Segment,
        policy: Overflow,
        may_leave: bool,
        ledger: &mut Ledger,
    ) -> Offered {
        // With every record costing 1, what befell one record at this
        // instant befalls those after it, as long as the bucket is not
        // bounded in bytes.
        let alike = !self.schedule.weighs_bytes();
        let terms = Terms {
            // A wake-up late by up to the slack keeps the schedule, but the
            // record would then have waited past --max-wait and expire: a
            // record is let in only if it leaves by the slack before it.
            deadline: now
                .saturating_add(self.max_wait_ns.unwrap_or(u64::MAX))
                .saturating_sub(self.schedule.slack_ns()),
            policy,
            alike,
            room_alike: alike && self.bucket.capacity_bytes() == usize::MAX,
        };
        while !seg.is_empty() {
            if may_leave && self.bucket.is_empty() {
                // A refusal can leave nothing waiting ahead of the next.
                let n = self.schedule.release(now, seg.len(), &mut seg.records());
                if n > 0 {
                    ledger.read(n);
                    self.push_outbox(seg.split_front(n));
                    continue;
                }
            }
            let first = seg.clone().split_front(1);
            let record = first.as_bytes();
            let Some(forecast) = self.forecast_at(now) else {
                return self.wait(now, seg, policy, ledger);
            };
            let leaves = forecast.peek(now, record);
            let evicted = match self.hold(now, leaves, terms, &mut seg, record, ledger) {
                Held::Waits { evicted } => evicted,
                Held::Disposed => continue,
                Held::Overflowed => return Offered::Overflowed(seg),
            };
            self.wait(now, seg.split_front(1), policy, ledger);
            match self.forecast.as_mut() {
                Some(forecast) if !evicted => {
                    forecast.push(now, record);
                }
                _ => self.forecast = None,
            }
            if evicted && may_leave {
                // An eviction can put a smaller record at the head, which
                // may be due at once under a byte rate.
                self.release(now);
            }
        }
        Offered::Done
    }

    /// `record`, the first of `seg`, arriving at `now` and forecast to
    /// leave at `leaves`: held to its deadline, then to the bucket's room,
    /// under `terms`. A record refused or dropped is disposed of here (with
    /// the records alike after it); one that may wait is left in `seg`.
    fn hold(
        &mut self,
        now: u64,
        leaves: u64,
        terms: Terms,
        seg: &mut Segment,
        record: &[u8],
        ledger: &mut Ledger,
    ) -> Held {
        let mut evicted = false;
        if leaves > terms.deadline {
            match terms.policy {
                Overflow::Fail => {
                    self.refused_wait_ns = Some(leaves - now);
                    return Held::Overflowed;
                }
                Overflow::DropOldest if self.evict_in_time(now, terms.deadline, record, ledger) => {
                    evicted = true;
                }
                _ => {
                    let n = if terms.alike { seg.len() } else { 1 };
                    ledger.read(n);
                    ledger.refuse(seg.split_front(n), Fate::DroppedNewest);
                    return Held::Disposed;
                }
            }
        }
        if !self.bucket.has_room(record.len()) {
            match terms.policy {
                Overflow::Fail => {
                    self.refused_wait_ns = None;
                    return Held::Overflowed;
                }
                Overflow::DropNewest => {
                    let n = if terms.room_alike { seg.len() } else { 1 };
                    ledger.read(n);
                    ledger.dispose(seg.split_front(n), Fate::DroppedNewest);
                    return Held::Disposed;
                }
                _ => evicted = true,
            }
        }
        Held::Waits { evicted }
    }

    /// Under `drop-oldest`: evict the fewest waiting records, oldest first,
    /// that let `record` arriving at `now` leave by
    /// `deadline`, as refused. Returns false, evicting nothing, when even
    /// an empty bucket would not let it. A binary search over how many to
    /// evict (fewer records ahead never leave a record later): O(waiting
    /// records × log of them).
    fn evict_in_time(
        &mut self,
        now: u64,
        deadline: u64,
        record: &[u8],
        ledger: &mut Ledger,
    ) -> bool {
        let Some(limits) = self.schedule.forecast() else {
            return false;
        };
        let bucket = &self.bucket;
        let leaves_after = |evicted: usize| {
            let mut forecast = Forecast::new(limits.clone(), now);
            for waiting in bucket.records().skip(evicted) {
                forecast.push(now, waiting);
            }
            forecast.peek(now, record)
        };
        let len = bucket.len();
        if leaves_after(len) > deadline {
            return false;
        }
        // Evicting `late` is not enough, evicting `enough` is.
        let (mut late, mut enough) = (0, len);
        while enough - late > 1 {
            let mid = late + (enough - late) / 2;
            if leaves_after(mid) <= deadline {
                enough = mid;
            } else {
                late = mid;
            }
        }
        self.bucket
            .evict(enough, Fate::DroppedOldest, &mut |s, f| ledger.refuse(s, f));
        self.forecast = None;
        true
    }

    /// How long (ns) a record arriving at `now`, like the first of the
    /// latest read, would wait before it leaves: the forecast over the records
    /// waiting ahead of it and every limit (not a pause, not a stalled
    /// stdout). `None` when the schedule cannot be forecast.
    pub fn forecast_wait(&mut self, now: u64) -> Option<u64> {
        if let Some(keyed) = self.keyed.as_deref_mut() {
            return keyed.forecast_wait(now, &*self.schedule, &self.last_record);
        }
        let record = std::mem::take(&mut self.last_record);
        let leaves = self.forecast_at(now).map(|f| f.peek(now, &record));
        self.last_record = record;
        let leaves = leaves?;
        Some(leaves.saturating_sub(now))
    }

    /// How long (ns) a record may wait before it expires, if bounded.
    pub fn max_wait_ns(&self) -> Option<u64> {
        self.max_wait_ns
    }

    /// When the latest record handed back under `fail` was refused because
    /// the forecast put its departure past `--max-wait`: how long after its
    /// arrival (ns). `None` when it found the bucket full.
    pub fn refused_wait_ns(&self) -> Option<u64> {
        match &self.keyed {
            Some(keyed) => keyed.refused_wait_ns(),
            None => self.refused_wait_ns,
        }
    }

    /// Records of `seg` wait in the bucket, or meet `policy`.
    fn wait(&mut self, now: u64, seg: Segment, policy: Overflow, ledger: &mut Ledger) -> Offered {
        let len = seg.len();
        let offered = self
            .bucket
            .offer_as(policy, seg, now, &mut |s, f| ledger.dispose(s, f));
        let back = match &offered {
            Offered::Done => 0,
            Offered::Wait(rest) | Offered::Overflowed(rest) => rest.len(),
        };
        ledger.read(len - back);
        offered
    }

    fn push_outbox(&mut self, seg: Segment) {
        self.outbox_len += seg.len();
        self.outbox.push(seg);
    }

    /// Let waiting records leave that the schedule allows at `now`, into
    /// the outbox. Returns how many left.
    pub fn release(&mut self, now: u64) -> usize {
        if self.paused {
            return 0;
        }
        if let Some(keyed) = self.keyed.as_deref_mut() {
            let n = keyed.release(now, &mut *self.schedule, &mut self.outbox);
            self.outbox_len += n;
            if n > 0 {
                self.keys_left_at = Some(now);
            }
            return n;
        }
        let Some(front) = self.bucket.front_record() else {
            return 0;
        };
        let late = self.forecast.is_some()
            && now > (self.schedule.forecast_due(front)).saturating_add(self.schedule.slack_ns());
        let available = self.bucket.len();
        let n = self
            .schedule
            .release(now, available, &mut self.bucket.records());
        if n > 0 {
            if late {
                // The schedule may have restarted: the forecast is off.
                self.forecast = None;
            }
            if let Some(oldest) = self.bucket.oldest_arrival() {
                self.longest_wait_ns = self.longest_wait_ns.max(now.saturating_sub(oldest));
            }
            let before = self.outbox.len();
            self.bucket.take(n, &mut self.outbox);
            self.outbox_len += self.outbox[before..]
                .iter()
                .map(Segment::len)
                .sum::<usize>();
        }
        n
    }

    /// The writer wrote the next `records` of the outbox, its write
    /// returning at `now` (ns): the schedule hears of it
    /// ([`Schedule::wrote`]).
    pub fn wrote(&mut self, now: u64, records: usize) {
        self.schedule.wrote(now, records);
    }

    /// Expire waiting records older than `--max-wait` at `now`. Returns how
    /// many expired.
    pub fn expire(&mut self, now: u64, ledger: &mut Ledger) -> usize {
        let Some(max_wait) = self.max_wait_ns else {
            return 0;
        };
        let cutoff = now.saturating_sub(max_wait);
        if let Some(keyed) = self.keyed.as_deref_mut() {
            return keyed.expire_before(cutoff, ledger);
        }
        let n = self
            .bucket
            .expire_before(cutoff, &mut |s, f| ledger.dispose(s, f));
        if n > 0 {
            self.forecast = None;
            let waiting = self.bucket.len();
            self.schedule
                .expired(now, waiting, &mut self.bucket.records());
        }
        n
    }

    /// When something next changes without an arrival (ns): the head of the
    /// bucket comes due, or expires. `None` when nothing waits. Paused,
    /// only an expiry.
    pub fn next_event(&self) -> Option<u64> {
        if self.paused {
            return self.next_expiry();
        }
        if let Some(keyed) = &self.keyed {
            let event = keyed.next_event(&*self.schedule);
            return match (event, self.next_expiry()) {
                (Some(e), Some(x)) => Some(e.min(x)),
                (e, x) => e.or(x),
            };
        }
        let front = self.bucket.front_record()?;
        let due = self.schedule.next_due(front);
        Some(self.next_expiry().map_or(due, |e| e.min(due)))
    }

    /// When the oldest waiting record expires (ns), if it can.
    pub fn next_expiry(&self) -> Option<u64> {
        self.max_wait_ns
            .zip(self.bucket().oldest_arrival())
            .map(|(max_wait, oldest)| oldest.saturating_add(max_wait).saturating_add(1))
    }

    /// Move the outbox's records to `out`, in order; returns how many.
    pub fn take_outbox(&mut self, out: &mut Vec<Segment>) -> usize {
        let n = self.outbox_len;
        out.append(&mut self.outbox);
        self.outbox_len = 0;
        n
    }

    /// Empty the bucket and the outbox, the outbox first (its records are
    /// older), disposing of everything as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        for seg in self.outbox.drain(..) {
            ledger.dispose(seg, fate);
        }
        self.outbox_len = 0;
        self.forecast = None;
        if let Some(keyed) = self.keyed.as_deref_mut() {
            keyed.drain(fate, ledger);
        }
        self.bucket.drain(fate, &mut |s, f| ledger.dispose(s, f));
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Unit};
    use bytes::Bytes;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn seg(from: usize, to: usize) -> Segment {
        let text: String = (from..=to).map(|i| format!("{i}\n")).collect();
        Segment::new(Bytes::from(text), b'\n')
    }

    fn admission(rate: &str, burst: u64, capacity: usize, policy: Overflow) -> Admission {
        let limits = Limits::new(&[Limit {
            rate: parse_rate(rate).unwrap(),
            burst,
            unit: Unit::Records,
        }]);
        Admission::new(Bucket::new(capacity, None, policy), Box::new(limits), None)
    }

    fn numbers(segs: &[Segment]) -> Vec<String> {
        segs.iter()
            .flat_map(|s| {
                s.records()
                    .map(|r| String::from_utf8_lossy(r).trim().to_string())
            })
            .collect()
    }

    #[test]
    fn burst_leaves_at_once_without_taking_places_in_the_bucket() {
        // seq 15 | drip -r 1/s -b 5 -c 1 -o drop-newest: 1..5 leave now, 6
        // waits, 7..15 are dropped; 6 leaves a second later.
        let mut a = admission("1/s", 5, 1, Overflow::DropNewest);
        let mut ledger = Ledger::new(true);
        let back = a.arrive(0, seg(1, 15), Overflow::DropNewest, true, &mut ledger);
        assert!(matches!(back, Offered::Done));
        let mut out = Vec::new();
        assert_eq!(a.take_outbox(&mut out), 5);
        assert_eq!(numbers(&out), ["1", "2", "3", "4", "5"]);
        assert_eq!(a.bucket().len(), 1);
        assert_eq!(ledger.counts().dropped_newest, 9);
        assert_eq!(a.next_event(), Some(S));
        assert_eq!(a.release(S), 1);
        out.clear();
        a.take_outbox(&mut out);
        assert_eq!(numbers(&out), ["6"]);
        assert_eq!(ledger.counts().read, 15);
    }

    #[test]
    fn one_read_or_five_decide_the_same() {
        // printf '1\n2\n3\n4\n5\n' | drip -r 1/s -c 2 -o drop-newest
        for cuts in [vec![5], vec![1, 1, 1, 1, 1], vec![2, 3]] {
            let mut a = admission("1/s", 1, 2, Overflow::DropNewest);
            let mut ledger = Ledger::new(false);
            let mut first = 1;
            for n in cuts {
                a.arrive(
                    0,
                    seg(first, first + n - 1),
                    Overflow::DropNewest,
                    true,
                    &mut ledger,
                );
                first += n;
            }
            let mut out = Vec::new();
            a.take_outbox(&mut out);
            a.release(S);
            a.release(2 * S);
            a.take_outbox(&mut out);
            assert_eq!(numbers(&out), ["1", "2", "3"]);
            assert_eq!(ledger.counts().dropped_newest, 2);
        }
    }

    #[test]
    fn drop_oldest_never_evicts_what_the_schedule_let_go() {
        let mut a = admission("1/s", 2, 1, Overflow::DropOldest);
        let mut ledger = Ledger::new(true);
        a.arrive(0, seg(1, 4), Overflow::DropOldest, true, &mut ledger);
        let mut out = Vec::new();
        a.take_outbox(&mut out);
        assert_eq!(numbers(&out), ["1", "2"]);
        assert_eq!(numbers(&ledger.take_dead()), ["3"]);
        assert_eq!(a.bucket().len(), 1);
    }

    #[test]
    fn a_blocked_stdout_makes_arrivals_wait() {
        let mut a = admission("10/s", 1, 10, Overflow::Block);
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 1), Overflow::Block, false, &mut ledger);
        assert_eq!((a.outbox_len(), a.bucket().len()), (0, 1));
        a.arrive(S / 100, seg(2, 2), Overflow::Block, true, &mut ledger);
        assert_eq!((a.outbox_len(), a.bucket().len()), (1, 1));
    }

    #[test]
    fn block_hands_back_what_does_not_fit_uncounted() {
        let mut a = admission("1/s", 1, 2, Overflow::Block);
        let mut ledger = Ledger::new(false);
        match a.arrive(0, seg(1, 6), Overflow::Block, true, &mut ledger) {
            Offered::Wait(rest) => assert_eq!(rest.len(), 3),
            other => panic!("{other:?}"),
        }
        assert_eq!(ledger.counts().read, 3);
    }

    fn admission_waiting(rate: &str, policy: Overflow, max_wait: u64) -> Admission {
        let limits = Limits::new(&[Limit {
            rate: parse_rate(rate).unwrap(),
            burst: 1,
            unit: Unit::Records,
        }]);
        let bucket = Bucket::new(1000, None, policy);
        Admission::new(bucket, Box::new(limits), Some(max_wait))
    }

    #[test]
    fn what_cannot_leave_within_max_wait_is_refused_at_arrival() {
        // seq 100 | drip -r 10/s --max-wait 2050ms -o drop-newest: 1 leaves
        // now, 2..21 leave by 2 s, 22..100 go to the dead letter at once.
        let mut a = admission_waiting("10/s", Overflow::DropNewest, 2050 * S / 1000);
        let mut ledger = Ledger::new(true);
        a.arrive(0, seg(1, 100), Overflow::DropNewest, true, &mut ledger);
        assert_eq!(a.bucket().len(), 20);
        let c = ledger.counts();
        assert_eq!((c.dropped_newest, c.refused, c.expired), (79, 79, 0));
        assert_eq!(numbers(&ledger.take_dead())[0], "22");
        // The next record would leave at 2.1 s: 2.1 s after it arrives.
        assert_eq!(a.forecast_wait(0), Some(21 * S / 10));
    }

    #[test]
    fn drop_oldest_evicts_the_oldest_so_the_newest_makes_it() {
        // seq 100 | drip -r 10/s --max-wait 1050ms -o drop-oldest: 1
        // leaves, and each record from 12 on evicts the oldest waiting one.
        let mut a = admission_waiting("10/s", Overflow::DropOldest, S + S / 20);
        let mut ledger = Ledger::new(true);
        a.arrive(0, seg(1, 100), Overflow::DropOldest, true, &mut ledger);
        let c = ledger.counts();
        assert_eq!((c.dropped_oldest, c.dropped_newest, c.refused), (89, 0, 89));
        let mut out = Vec::new();
        for t in 1..=10 {
            a.release(t * S / 10);
        }
        a.take_outbox(&mut out);
        let expected: Vec<String> = std::iter::once(1)
            .chain(91..=100)
            .map(|i| i.to_string())
            .collect();
        assert_eq!(numbers(&out), expected);
    }

    #[test]
    fn drop_oldest_drops_the_newest_when_nothing_evicted_would_do() {
        // -r 1/s --max-wait 500ms: the second record could not leave in
        // time even with nothing ahead of it.
        let mut a = admission_waiting("1/s", Overflow::DropOldest, S / 2);
        let mut ledger = Ledger::new(true);
        a.arrive(0, seg(1, 3), Overflow::DropOldest, true, &mut ledger);
        let c = ledger.counts();
        assert_eq!((c.dropped_newest, c.dropped_oldest, c.refused), (2, 0, 2));
    }

    #[test]
    fn fail_hands_back_what_cannot_leave_in_time_and_says_when_it_would() {
        let mut a = admission_waiting("10/s", Overflow::Fail, S + S / 20);
        let mut ledger = Ledger::new(false);
        match a.arrive(0, seg(1, 20), Overflow::Fail, true, &mut ledger) {
            Offered::Overflowed(rest) => assert_eq!(numbers(&[rest])[0], "12"),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.refused_wait_ns(), Some(11 * S / 10));
        assert_eq!(ledger.counts().read, 11);
    }

    #[test]
    fn block_never_refuses() {
        let mut a = admission_waiting("10/s", Overflow::Block, S);
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 20), Overflow::Block, true, &mut ledger);
        assert_eq!((a.bucket().len(), ledger.counts().refused), (19, 0));
    }

    #[test]
    fn records_held_up_after_arrival_expire_and_are_not_refused() {
        // Records 2..5 could leave by 400 ms, but stdout takes nothing
        // until 2 s: they expire while waiting, as without a forecast.
        let mut a = admission_waiting("10/s", Overflow::DropNewest, S + S / 20);
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 5), Overflow::DropNewest, true, &mut ledger);
        a.arrive(S / 2, seg(6, 6), Overflow::DropNewest, false, &mut ledger);
        assert_eq!(ledger.counts().refused, 0);
        a.expire(2 * S, &mut ledger);
        let c = ledger.counts();
        assert_eq!((c.expired, c.refused), (5, 0));
    }

    #[test]
    fn a_late_release_makes_the_forecast_again() {
        // 10/s: 1 leaves, 2..11 wait for 100 ms .. 1 s. The writer is held
        // up until 600 ms: the schedule restarts there, so 3..11 leave at
        // 700 ms .. 1.5 s and a record arriving now would leave at 1.6 s.
        let mut a = admission_waiting("10/s", Overflow::DropNewest, 10 * S);
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 11), Overflow::DropNewest, true, &mut ledger);
        assert_eq!(a.forecast_wait(0), Some(11 * S / 10));
        assert_eq!(a.release(6 * S / 10), 1);
        assert_eq!(a.forecast_wait(6 * S / 10), Some(S));
    }

    #[test]
    fn a_pause_is_no_part_of_the_forecast() {
        use crate::jobs::gate::{Gate, GateControl, Scope};
        use std::sync::Arc;
        let limits = Limits::new(&[Limit {
            rate: parse_rate("10/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        }]);
        let control = Arc::new(GateControl::default());
        let gate = Gate::new(Box::new(limits), control.clone());
        let bucket = Bucket::new(1000, None, Overflow::DropNewest);
        let mut a = Admission::new(bucket, Box::new(gate), Some(S));
        let mut ledger = Ledger::new(false);
        control.pause(&Scope::All, 0, 5 * S);
        a.arrive(0, seg(1, 5), Overflow::DropNewest, true, &mut ledger);
        // Paused: nothing leaves, and nothing is refused: the limits alone
        // would let all five go within 400 ms.
        assert_eq!((a.outbox_len(), ledger.counts().refused), (0, 0));
        assert_eq!(a.forecast_wait(0), Some(5 * S / 10));
        a.expire(5 * S, &mut ledger);
        assert_eq!(ledger.counts().expired, 5);
    }

    #[test]
    fn paused_nothing_leaves_and_the_policy_applies() {
        // -r 1000/s -c 2 -o drop-newest, paused: 1 and 2 wait, 3 is
        // dropped, nothing is due; resumed, 1 and 2 leave.
        let mut a = admission("1000/s", 5, 2, Overflow::DropNewest);
        let mut ledger = Ledger::new(false);
        a.pause(true);
        a.arrive(0, seg(1, 3), Overflow::DropNewest, true, &mut ledger);
        assert_eq!((a.outbox_len(), a.bucket().len()), (0, 2));
        assert_eq!(ledger.counts().dropped_newest, 1);
        assert_eq!(a.next_event(), None);
        assert_eq!(a.release(S), 0);
        a.pause(false);
        assert_eq!(a.next_event(), Some(0));
        assert_eq!(a.release(S), 2);
    }

    #[test]
    fn paused_nothing_is_refused_for_the_pause() {
        // -r 10/s --max-wait 1050ms -o drop-newest, paused: the schedule
        // alone would let 1..5 go within 400 ms, so none is refused; held
        // by the pause, they expire.
        let mut a = admission_waiting("10/s", Overflow::DropNewest, S + S / 20);
        let mut ledger = Ledger::new(false);
        a.pause(true);
        a.arrive(0, seg(1, 5), Overflow::DropNewest, true, &mut ledger);
        assert_eq!((a.bucket().len(), ledger.counts().refused), (5, 0));
        assert_eq!(a.forecast_wait(0), Some(5 * S / 10));
        a.expire(2 * S, &mut ledger);
        assert_eq!(ledger.counts().expired, 5);
        // Resumed: the forecast starts again from the schedule.
        a.pause(false);
        a.arrive(2 * S, seg(6, 7), Overflow::DropNewest, true, &mut ledger);
        assert_eq!(a.outbox_len(), 1);
        assert_eq!(a.forecast_wait(2 * S), Some(2 * S / 10));
    }

    #[test]
    fn a_new_rate_makes_the_forecast_again() {
        // 10/s: 1 leaves, 2..11 wait; a record arriving now would leave at
        // 1.1 s. At 1/s from now on, 2..11 leave 1 s apart: at 10 s.
        let mut a = admission_waiting("10/s", Overflow::DropNewest, 100 * S);
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 11), Overflow::DropNewest, true, &mut ledger);
        assert_eq!(a.forecast_wait(0), Some(11 * S / 10));
        let slower = Limit {
            rate: parse_rate("1/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        };
        a.schedule_mut().replace_limits(0, &[slower]).unwrap();
        assert_eq!(a.forecast_wait(0), Some(11 * S));
    }

    #[test]
    fn after_a_new_rate_the_forecast_is_what_the_writer_does() {
        // 10/s: 1 leaves at 0, 2 at 100 ms, 3..11 wait. At 100 ms the rate
        // becomes 2/s (3..11 leave 0.6 s .. 4.6 s, one more at 5.1 s) or
        // 20/s (0.15 s .. 0.55 s, one more at 0.6 s). Record 12 arriving
        // then leaves when the forecast said, not at the old rate's 1.1 s.
        for (rate, wait) in [("2/s", 5 * S), ("20/s", S / 2)] {
            let mut a = admission_waiting("10/s", Overflow::DropNewest, 100 * S);
            let mut ledger = Ledger::new(false);
            a.arrive(0, seg(1, 11), Overflow::DropNewest, true, &mut ledger);
            assert_eq!(a.release(S / 10), 1);
            assert_eq!(a.forecast_wait(S / 10), Some(S));
            let limit = Limit {
                rate: parse_rate(rate).unwrap(),
                burst: 1,
                unit: Unit::Records,
            };
            a.schedule_mut().replace_limits(S / 10, &[limit]).unwrap();
            assert_eq!(a.forecast_wait(S / 10), Some(wait), "{rate}");
            a.arrive(S / 10, seg(12, 12), Overflow::DropNewest, true, &mut ledger);
            let mut left = None;
            while let Some(t) = a.next_event() {
                a.release(t);
                let mut out = Vec::new();
                a.take_outbox(&mut out);
                if numbers(&out).iter().any(|n| n == "12") {
                    left = Some(t);
                }
            }
            assert_eq!(left, Some(S / 10 + wait), "{rate}");
        }
    }

    /// Keyed admission at `key_rate` per key (the first word), no global
    /// limit.
    fn keyed_unlimited(key_rate: &str) -> Admission {
        use crate::key::{parse_key, KeySpec};
        use crate::keyed::KeyConfig;
        let config = KeyConfig {
            spec: KeySpec::new(parse_key("1").unwrap(), None),
            rate: parse_rate(key_rate).unwrap(),
            burst: 1,
            max_keys: 100,
            key_capacity: 100,
        };
        let bucket = Bucket::new(1000, None, Overflow::Block);
        let a = Admission::new(bucket, Box::new(Limits::new(&[])), None);
        a.with_keys(Keyed::new(config, b'\n', 1000, None))
    }

    fn text(t: &str) -> Segment {
        Segment::new(Bytes::from(t.to_string()), b'\n')
    }

    /// When `last` leaves, the writer woken at every event from `now` on.
    fn left_at(a: &mut Admission, now: u64, last: &str) -> Option<u64> {
        let mut out = Vec::new();
        a.take_outbox(&mut out);
        let mut left = numbers(&out).iter().any(|r| r == last).then_some(now);
        while let Some(t) = a.next_event() {
            a.release(t);
            out.clear();
            a.take_outbox(&mut out);
            if numbers(&out).iter().any(|r| r == last) {
                left = Some(t);
            }
        }
        left
    }

    #[test]
    fn a_rate_set_on_keys_without_one_counts_from_their_last_departure() {
        // --key 1 --key-rate 20/s, no --rate: a 1..a 10 leave 50 ms
        // apart, a 10 at 450 ms (from the line), or x 1 and y 1 at 100 ms
        // (at once). At 600 ms the rate becomes 1/5s: b 1 arriving then
        // leaves 5 s after the last departure, not at once.
        let ten: String = (1..=10).map(|i| format!("a {i}\n")).collect();
        for (first, last) in [(ten.as_str(), 450), ("x 1\ny 1\n", 100)] {
            let mut a = keyed_unlimited("20/s");
            let mut ledger = Ledger::new(false);
            let at = if last == 100 { last * MS } else { 0 };
            a.arrive(at, text(first), Overflow::Block, true, &mut ledger);
            left_at(&mut a, at, "no such record");
            let slower = Limit {
                rate: parse_rate("1/5s").unwrap(),
                burst: 1,
                unit: Unit::Records,
            };
            a.replace_limits(600 * MS, &[slower]).unwrap();
            a.arrive(600 * MS, text("b 1\n"), Overflow::Block, true, &mut ledger);
            assert_eq!(
                left_at(&mut a, 600 * MS, "b 1"),
                Some(last * MS + 5 * S),
                "{first:?}"
            );
        }
    }

    #[test]
    fn with_keys_the_wait_foreseen_is_behind_the_busiest_keys_records() {
        // --key 1 --key-rate 2/s: a 1 and b 1 leave at once; a 2..a 30
        // wait for 0.5 s .. 14.5 s, b 2 and b 3 for 0.5 s and 1 s. A record
        // of key a arriving now would leave at 15 s, as a 31 does.
        let mut input: String = (1..=30).map(|i| format!("a {i}\n")).collect();
        input.push_str("b 1\nb 2\nb 3\n");
        let mut a = keyed_unlimited("2/s");
        let mut ledger = Ledger::new(false);
        a.arrive(0, text(&input), Overflow::Block, true, &mut ledger);
        assert_eq!(a.forecast_wait(0), Some(15 * S));
        // At 5 s, a 11 has left: 10 s to go.
        while let Some(t) = a.next_event().filter(|&t| t <= 5 * S) {
            a.release(t);
        }
        assert_eq!(a.forecast_wait(5 * S), Some(10 * S));
        a.arrive(5 * S, text("a 31\n"), Overflow::Block, true, &mut ledger);
        assert_eq!(left_at(&mut a, 5 * S, "a 31"), Some(15 * S));
    }

    #[test]
    fn paused_max_wait_goes_on_counting() {
        let mut a = admission("1000/s", 1, 10, Overflow::Block);
        a.max_wait_ns = Some(S);
        let mut ledger = Ledger::new(false);
        a.pause(true);
        a.arrive(0, seg(1, 2), Overflow::Block, true, &mut ledger);
        assert_eq!(a.next_event(), Some(S + 1));
        assert_eq!(a.expire(S + 1, &mut ledger), 2);
    }

    #[test]
    fn expiry_takes_no_slot() {
        let limits = Limits::new(&[Limit {
            rate: parse_rate("1/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        }]);
        let bucket = Bucket::new(10, None, Overflow::Block);
        let mut a = Admission::new(bucket, Box::new(limits), Some(S / 2));
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 3), Overflow::Block, true, &mut ledger);
        assert_eq!(a.next_event(), Some(S / 2 + 1));
        assert_eq!(a.expire(S / 2 + 1, &mut ledger), 2);
        // The next arrival finds the slot at 1 s free, as if none expired.
        a.arrive(S, seg(4, 4), Overflow::Block, true, &mut ledger);
        assert_eq!(a.outbox_len(), 2);
    }
}
