//! The waiting room without keys: one bounded line in input order (the
//! [`Bucket`]), its records leaving as soon as the schedule allows, and
//! each arriving record held to `--max-wait` by the [`Forecast`] of the
//! line's departures (see [`crate::admission`] for the rules).
//!
//! The forecast is kept as records join the line and made again from the
//! schedule when departures did not keep to it (a late release, an
//! eviction, an expiry, a change of limits).
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use crate::bucket::{Bucket, Fate, Offered, Overflow, Segment};
use crate::ledger::Ledger;
use crate::outflow::Outflow;
use crate::pace::{Forecast, Pace};

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
enum Arrival {
    /// It may wait (older records evicted for it, when `evicted`).
    Waits { evicted: bool },
    /// It was refused or dropped (with the records alike after it).
    Disposed,
    /// It overflowed under `fail`.
    Overflowed,
}

/// The bucket and the forecast of its records' departures.
#[derive(Debug)]
pub struct Fifo {
    bucket: Bucket,
    /// Records that waited longer than this (ns) expire; with a drop or
    /// fail policy, those foreseen to are refused as they arrive.
    max_wait_ns: Option<u64>,
    /// The schedule after every waiting record has left when the forecast
    /// says; `None` when not known (made again when asked).
    forecast: Option<Forecast>,
    /// Under `fail`: how long (ns) after its arrival the forecast put the
    /// departure of the record handed back, when that was why.
    refused_wait_ns: Option<u64>,
    /// The longest any record waited in the bucket before leaving (ns).
    longest_wait_ns: u64,
}

impl Fifo {
    /// Records wait in `bucket`; held to `max_wait_ns` when given.
    pub fn new(bucket: Bucket, max_wait_ns: Option<u64>) -> Fifo {
        Fifo {
            bucket,
            max_wait_ns,
            forecast: None,
            refused_wait_ns: None,
            longest_wait_ns: 0,
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// The longest any released record waited in the bucket, ns.
    pub fn longest_wait_ns(&self) -> u64 {
        self.longest_wait_ns
    }

    /// See [`Waiting::refused_wait_ns`](super::Waiting::refused_wait_ns).
    pub fn refused_wait_ns(&self) -> Option<u64> {
        self.refused_wait_ns
    }

    /// The forecast is made again when next asked.
    pub fn forget_forecast(&mut self) {
        self.forecast = None;
    }

    /// See [`Waiting::arrive`](super::Waiting::arrive).
    ///
    /// Every record must be at most the bucket's `capacity_bytes` (the
    /// splitter guarantees it): a larger one would be handed back under
    /// `block` for ever.
    pub fn arrive(
        &mut self,
        mut seg: Segment,
        policy: Overflow,
        ledger: &mut Ledger,
        to: &mut Outflow,
    ) -> (Offered, usize) {
        let now = to.now;
        let mut sent = 0;
        if to.may_leave {
            // Waiting records that are due go first.
            sent += self.release(to);
            if self.bucket.is_empty() {
                let n = to.schedule.release(now, seg.len(), &mut seg.records());
                if n > 0 {
                    // They took slots a forecast made before does not know.
                    self.forecast = None;
                    ledger.read(n);
                    to.outbox.push(seg.split_front(n));
                    sent += n;
                }
                if seg.is_empty() {
                    return (Offered::Done, sent);
                }
            }
        }
        if self.refuses(policy) && self.forecast_at(now, &*to.schedule).is_some() {
            let (back, more) = self.wait_in_time(seg, policy, ledger, to);
            return (back, sent + more);
        }
        if to.may_leave && policy == Overflow::DropOldest && to.schedule.weighs_bytes() {
            // An eviction can put a smaller record at the head, which may
            // be due at once under a byte rate: decide one at a time.
            self.forecast = None;
            while !seg.is_empty() {
                let one = seg.split_front(1);
                self.wait(now, one, policy, ledger);
                sent += self.release(to);
            }
            return (Offered::Done, sent);
        }
        let before = self.bucket.len();
        let offered = self.wait(now, seg, policy, ledger);
        self.joined(now, before, policy);
        (offered, sent)
    }

    /// Records joined the bucket behind the `before` that waited, not held
    /// to a deadline: a forecast kept goes on with them in line (one
    /// `drop-oldest` may have evicted from is made again when asked).
    fn joined(&mut self, now: u64, before: usize, policy: Overflow) {
        let Some(forecast) = self.forecast.as_mut() else {
            return;
        };
        if policy == Overflow::DropOldest {
            self.forecast = None;
            return;
        }
        for record in self.bucket.records().skip(before) {
            forecast.push(now, record);
        }
    }

    /// Whether records that cannot leave within `--max-wait` are refused
    /// at arrival under `policy`: with `--max-wait`, under a policy that
    /// drops or fails.
    fn refuses(&self, policy: Overflow) -> bool {
        self.max_wait_ns.is_some() && policy != Overflow::Block
    }

    /// The forecast of the waiting records' departures at `now` under
    /// `schedule`, made again from the schedule when not known:
    /// O(waiting records) then. `None` when the schedule cannot be
    /// forecast.
    fn forecast_at(&mut self, now: u64, schedule: &Pace) -> Option<&mut Forecast> {
        if self.bucket.is_empty() {
            // Records that left at once took slots it does not know of.
            self.forecast = None;
        }
        if self.forecast.is_none() {
            let mut forecast = Forecast::new(schedule.forecast()?, now);
            for record in self.bucket.records() {
                forecast.push(now, record);
            }
            self.forecast = Some(forecast);
        }
        self.forecast.as_mut()
    }

    /// Records of `seg` arrive at `to.now` under `policy`, which refuses
    /// what cannot leave by `now + --max-wait`: one at a time, each is held
    /// to its deadline, then waits or meets the policy as the bucket's
    /// room says. Needs a forecast. Returns, as [`Fifo::arrive`], what was
    /// handed back and how many left.
    fn wait_in_time(
        &mut self,
        mut seg: Segment,
        policy: Overflow,
        ledger: &mut Ledger,
        to: &mut Outflow,
    ) -> (Offered, usize) {
        let now = to.now;
        // With every record costing 1, what befell one record at this
        // instant befalls those after it, as long as the bucket is not
        // bounded in bytes.
        let alike = !to.schedule.weighs_bytes();
        let terms = Terms {
            // A wake-up late by up to the slack keeps the schedule, but the
            // record would then have waited past --max-wait and expire: a
            // record is let in only if it leaves by the slack before it.
            deadline: now
                .saturating_add(self.max_wait_ns.unwrap_or(u64::MAX))
                .saturating_sub(to.schedule.slack_ns()),
            policy,
            alike,
            room_alike: alike && self.bucket.capacity_bytes() == usize::MAX,
        };
        let mut sent = 0;
        while !seg.is_empty() {
            if to.may_leave && self.bucket.is_empty() {
                // A refusal can leave nothing waiting ahead of the next.
                let n = to.schedule.release(now, seg.len(), &mut seg.records());
                if n > 0 {
                    ledger.read(n);
                    to.outbox.push(seg.split_front(n));
                    sent += n;
                    continue;
                }
            }
            let first = seg.clone().split_front(1);
            let record = first.as_bytes();
            let Some(forecast) = self.forecast_at(now, &*to.schedule) else {
                return (self.wait(now, seg, policy, ledger), sent);
            };
            let leaves = forecast.peek(now, record);
            let held = self.hold(now, leaves, terms, &mut seg, record, &*to.schedule, ledger);
            let evicted = match held {
                Arrival::Waits { evicted } => evicted,
                Arrival::Disposed => continue,
                Arrival::Overflowed => return (Offered::Overflowed(seg), sent),
            };
            self.wait(now, seg.split_front(1), policy, ledger);
            match self.forecast.as_mut() {
                Some(forecast) if !evicted => {
                    forecast.push(now, record);
                }
                _ => self.forecast = None,
            }
            if evicted && to.may_leave {
                // An eviction can put a smaller record at the head, which
                // may be due at once under a byte rate.
                sent += self.release(to);
            }
        }
        (Offered::Done, sent)
    }

    /// `record`, the first of `seg`, arriving at `now` and forecast to
    /// leave at `leaves`: held to its deadline, then to the bucket's room,
    /// under `terms`. A record refused or dropped is disposed of here (with
    /// the records alike after it); one that may wait is left in `seg`.
    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        now: u64,
        leaves: u64,
        terms: Terms,
        seg: &mut Segment,
        record: &[u8],
        schedule: &Pace,
        ledger: &mut Ledger,
    ) -> Arrival {
        let mut evicted = false;
        if leaves > terms.deadline {
            match terms.policy {
                Overflow::Fail => {
                    self.refused_wait_ns = Some(leaves - now);
                    return Arrival::Overflowed;
                }
                Overflow::DropOldest
                    if self.evict_in_time(now, terms.deadline, record, schedule, ledger) =>
                {
                    evicted = true;
                }
                _ => {
                    let n = if terms.alike { seg.len() } else { 1 };
                    ledger.read(n);
                    ledger.refuse(seg.split_front(n), Fate::DroppedNewest);
                    return Arrival::Disposed;
                }
            }
        }
        if !self.bucket.has_room(record.len()) {
            match terms.policy {
                Overflow::Fail => {
                    self.refused_wait_ns = None;
                    return Arrival::Overflowed;
                }
                Overflow::DropNewest => {
                    let n = if terms.room_alike { seg.len() } else { 1 };
                    ledger.read(n);
                    ledger.dispose(seg.split_front(n), Fate::DroppedNewest);
                    return Arrival::Disposed;
                }
                _ => evicted = true,
            }
        }
        Arrival::Waits { evicted }
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
        schedule: &Pace,
        ledger: &mut Ledger,
    ) -> bool {
        let Some(start) = schedule.forecast().map(|pace| Forecast::new(pace, now)) else {
            return false;
        };
        let bucket = &self.bucket;
        let leaves_after = |evicted: usize| {
            let mut forecast = start.clone();
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

    /// How long (ns) `record` arriving at `now` would wait before it
    /// leaves: the forecast over the records waiting ahead of it and every
    /// limit of `schedule` (not a pause, not a stalled stdout). `None` when
    /// the schedule cannot be forecast.
    pub fn forecast_wait(&mut self, now: u64, schedule: &Pace, record: &[u8]) -> Option<u64> {
        let leaves = self.forecast_at(now, schedule)?.peek(now, record);
        Some(leaves.saturating_sub(now))
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

    /// See [`Waiting::release`](super::Waiting::release).
    pub fn release(&mut self, to: &mut Outflow) -> usize {
        let now = to.now;
        let Some(front) = self.bucket.front_record() else {
            return 0;
        };
        let late = self.forecast.is_some()
            && now > (to.schedule.forecast_due(front)).saturating_add(to.schedule.slack_ns());
        let available = self.bucket.len();
        let n = to
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
            self.bucket.take(n, to.outbox);
        }
        n
    }

    /// See [`Waiting::expire_before`](super::Waiting::expire_before).
    pub fn expire_before(&mut self, cutoff: u64, ledger: &mut Ledger, to: &mut Outflow) -> usize {
        let n = self
            .bucket
            .expire_before(cutoff, &mut |s, f| ledger.dispose(s, f));
        if n > 0 {
            self.forecast = None;
            let waiting = self.bucket.len();
            to.schedule
                .expired(to.now, waiting, &mut self.bucket.records());
        }
        n
    }

    /// When the head of the bucket comes due (ns); `None` when nothing
    /// waits.
    pub fn next_event(&self, schedule: &Pace) -> Option<u64> {
        let front = self.bucket.front_record()?;
        Some(schedule.next_due(front))
    }

    /// Every waiting record, oldest first, as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        self.forecast = None;
        self.bucket.drain(fate, &mut |s, f| ledger.dispose(s, f));
    }
}
