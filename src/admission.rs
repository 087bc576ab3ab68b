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
use crate::schedule::Schedule;

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
    /// Paused (`drip ctl … pause`): nothing leaves, arrivals wait.
    paused: bool,
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
            paused: false,
        }
    }

    /// Admission with limits per key: records wait in `keyed`'s queues,
    /// within the bucket's bounds and under its policy.
    pub fn with_keys(mut self, keyed: Keyed) -> Self {
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

    /// The schedule, to take a slot outside the bucket (a retried job).
    pub fn schedule_mut(&mut self) -> &mut dyn Schedule {
        &mut *self.schedule
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
        self.expire(now, ledger);
        let may_leave = may_leave && !self.paused;
        if let Some(keyed) = self.keyed.as_deref_mut() {
            if may_leave {
                self.outbox_len += keyed.release(now, &mut *self.schedule, &mut self.outbox);
            }
            let (back, sent) = keyed.arrive(
                now,
                seg,
                policy,
                may_leave,
                &mut *self.schedule,
                ledger,
                &mut self.outbox,
            );
            self.outbox_len += sent;
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
            return n;
        }
        if self.bucket.is_empty() {
            return 0;
        }
        let available = self.bucket.len();
        let n = self
            .schedule
            .release(now, available, &mut self.bucket.records());
        if n > 0 {
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
        self.bucket
            .expire_before(cutoff, &mut |s, f| ledger.dispose(s, f))
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
