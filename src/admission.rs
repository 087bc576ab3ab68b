//! Admission: what happens to each arriving record.
//!
//! Records are decided one at a time, in input order, each at its arrival
//! time `t`:
//!
//! 1. if no record is waiting ahead of it and the [`Pace`] allows a
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
//! held to its deadline: when the [`Forecast`](crate::pace::Forecast) (the records waiting ahead
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
//! Admission holds the pause, the outbox, the schedule and the waiting
//! room ([`Waiting`]): where and how records wait (one bucket, or the
//! keys' queues) is the room's, in `crate::waiting`.
//!
//! Pure: no threads, no clock, no I/O. Times are ns on the caller's clock
//! and must not go backwards.

use crate::bucket::{Bucket, Fate, Offered, Overflow, Segment};
use crate::keyed::Keyed;
use crate::ledger::Ledger;
use crate::outflow::Outflow;
use crate::pace::Pace;
use crate::schedule::Limit;
use crate::waiting::{Fifo, Waiting};

/// The waiting room, the schedule in front of it, the outbox behind it,
/// and the pause.
#[derive(Debug)]
pub struct Admission {
    /// Where records wait: one bucket, or the keys' queues.
    room: Waiting,
    schedule: Pace,
    /// Records the schedule let go, in order, not yet taken by the writer.
    outbox: Vec<Segment>,
    outbox_len: usize,
    /// Records that waited longer than this (ns) expire.
    max_wait_ns: Option<u64>,
    /// The first record of the latest read (its delimiter included): the
    /// record a forecast of "a record arriving now" assumes.
    last_record: Vec<u8>,
    /// Paused (`drip ctl … pause`): nothing leaves, arrivals wait.
    paused: bool,
}

impl Admission {
    /// Admission into `bucket` under `schedule`; records that wait longer
    /// than `max_wait_ns` expire.
    pub fn new(bucket: Bucket, schedule: Pace, max_wait_ns: Option<u64>) -> Self {
        Admission {
            room: Waiting::Fifo(Fifo::new(bucket, max_wait_ns)),
            schedule,
            outbox: Vec::new(),
            outbox_len: 0,
            max_wait_ns,
            last_record: b"\n".to_vec(),
            paused: false,
        }
    }

    /// Admission with limits per key: records wait in `keyed`'s queues
    /// instead of the bucket, within its bounds and under its policy.
    pub fn with_keys(mut self, keyed: Keyed) -> Self {
        let policy = self.room.policy();
        let keyed = keyed
            .refusing(self.max_wait_ns, self.schedule.slack_ns())
            .overflowing(policy);
        self.room = Waiting::Keyed(keyed);
        self
    }

    /// The keys, to change their limit.
    pub fn keys_mut(&mut self) -> Option<&mut Keyed> {
        self.room.keys_mut()
    }

    /// The waiting records, in one bucket or in the keys' queues together.
    pub fn bucket(&self) -> &Waiting {
        &self.room
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
    pub fn schedule(&self) -> &Pace {
        &self.schedule
    }

    /// The schedule, to take a slot outside the bucket (a retried job) or
    /// change its limits: the forecast is made again after.
    pub fn schedule_mut(&mut self) -> &mut Pace {
        self.room.forget_forecast();
        &mut self.schedule
    }

    /// Enforce `limits` from `now` (ns) on (`drip ctl … rate`), counting
    /// from the last record that left, also one of the keys that the
    /// schedule was not asked about ([`Pace::replace_limits`]).
    ///
    /// # Errors
    /// As [`Pace::replace_limits`]: its limits are left as they were
    /// (the keys' last departure, told first, is a fact either way).
    pub fn replace_limits(&mut self, now: u64, limits: &[Limit]) -> Result<(), String> {
        if let Some(at) = self.room.left_unasked() {
            self.schedule.left_unasked(at);
        }
        self.schedule_mut().replace_limits(now, limits)
    }

    /// Records in the outbox.
    pub fn outbox_len(&self) -> usize {
        self.outbox_len
    }

    /// The departures at `now`: whether records may leave (`may_leave`,
    /// and not paused), the schedule, the outbox.
    fn departures(&mut self, now: u64, may_leave: bool) -> (&mut Waiting, Outflow<'_>) {
        let to = Outflow {
            now,
            may_leave: may_leave && !self.paused,
            schedule: &mut self.schedule,
            outbox: &mut self.outbox,
        };
        (&mut self.room, to)
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
        let (room, mut to) = self.departures(now, may_leave);
        let (back, sent) = room.arrive(seg, policy, ledger, &mut to);
        self.outbox_len += sent;
        back
    }

    /// How long (ns) a record arriving at `now`, like the first of the
    /// latest read, would wait before it leaves: the forecast over the records
    /// waiting ahead of it and every limit (not a pause, not a stalled
    /// stdout). `None` when the schedule cannot be forecast.
    pub fn forecast_wait(&mut self, now: u64) -> Option<u64> {
        self.room
            .forecast_wait(now, &self.schedule, &self.last_record)
    }

    /// How long (ns) a record may wait before it expires, if bounded.
    pub fn max_wait_ns(&self) -> Option<u64> {
        self.max_wait_ns
    }

    /// When the latest record handed back under `fail` was refused because
    /// the forecast put its departure past `--max-wait`: how long after its
    /// arrival (ns). `None` when it found the bucket full.
    pub fn refused_wait_ns(&self) -> Option<u64> {
        self.room.refused_wait_ns()
    }

    /// Let waiting records leave that the schedule allows at `now`, into
    /// the outbox. Returns how many left.
    pub fn release(&mut self, now: u64) -> usize {
        let (room, mut to) = self.departures(now, true);
        let n = room.release(&mut to);
        self.outbox_len += n;
        n
    }

    /// The writer wrote the next `records` of the outbox, its write
    /// returning at `now` (ns): the schedule hears of it
    /// ([`Pace::wrote`]).
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
        let (room, mut to) = self.departures(now, true);
        room.expire_before(cutoff, ledger, &mut to)
    }

    /// When something next changes without an arrival (ns): a waiting
    /// record comes due, or expires. `None` when nothing waits. Paused,
    /// only an expiry.
    pub fn next_event(&self) -> Option<u64> {
        let expiry = self.next_expiry();
        if self.paused {
            return expiry;
        }
        let due = self.room.next_event(&self.schedule);
        [due, expiry].into_iter().flatten().min()
    }

    /// When the oldest waiting record expires (ns), if it can.
    pub fn next_expiry(&self) -> Option<u64> {
        self.max_wait_ns
            .zip(self.room.oldest_arrival())
            .map(|(max_wait, oldest)| oldest.saturating_add(max_wait).saturating_add(1))
    }

    /// Move the outbox's records to `out`, in order; returns how many.
    pub fn take_outbox(&mut self, out: &mut Vec<Segment>) -> usize {
        let n = self.outbox_len;
        out.append(&mut self.outbox);
        self.outbox_len = 0;
        n
    }

    /// Empty the waiting room and the outbox, the outbox first (its records
    /// are older), disposing of everything as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        for seg in self.outbox.drain(..) {
            ledger.dispose(seg, fate);
        }
        self.outbox_len = 0;
        self.room.drain(fate, ledger);
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
        Admission::new(
            Bucket::new(capacity, None, policy),
            Pace::local(limits),
            None,
        )
    }

    fn numbers(segs: &[Segment]) -> Vec<String> {
        segs.iter()
            .flat_map(|s| {
                s.records()
                    .map(|r| String::from_utf8_lossy(r).trim().to_string())
            })
            .collect()
    }

    /// A forecast asked for before records arrive (the `--metrics` file is
    /// written at the start) goes on with the records that join the
    /// bucket: the wait a record arriving later would face is the one a
    /// forecast made then says (it read 0: the records that joined were
    /// left out).
    #[test]
    fn a_forecast_made_early_counts_the_records_that_join_later() {
        for policy in [Overflow::Block, Overflow::DropNewest, Overflow::DropOldest] {
            let mut early = admission("10/s", 1, 100, policy);
            let mut ledger = Ledger::new(false);
            assert_eq!(early.forecast_wait(0), Some(0));
            early.arrive(0, seg(1, 20), policy, true, &mut ledger);
            let mut fresh = admission("10/s", 1, 100, policy);
            fresh.arrive(0, seg(1, 20), policy, true, &mut ledger);
            assert_eq!(early.forecast_wait(0), fresh.forecast_wait(0), "{policy:?}");
            assert!(early.forecast_wait(0) > Some(S), "{policy:?}");
        }
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
        Admission::new(bucket, Pace::local(limits), Some(max_wait))
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
        let gate = Box::new(Gate::new(control.clone()));
        let bucket = Bucket::new(1000, None, Overflow::DropNewest);
        let mut a = Admission::new(bucket, Pace::local(limits).with_stage(gate), Some(S));
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
            rates: Default::default(),
            max_keys: 100,
            key_capacity: 100,
        };
        let bucket = Bucket::new(1000, None, Overflow::Block);
        let a = Admission::new(bucket, Pace::local(Limits::new(&[])), None);
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
        let mut a = Admission::new(bucket, Pace::local(limits), Some(S / 2));
        let mut ledger = Ledger::new(false);
        a.arrive(0, seg(1, 3), Overflow::Block, true, &mut ledger);
        assert_eq!(a.next_event(), Some(S / 2 + 1));
        assert_eq!(a.expire(S / 2 + 1, &mut ledger), 2);
        // The next arrival finds the slot at 1 s free, as if none expired.
        a.arrive(S, seg(4, 4), Overflow::Block, true, &mut ledger);
        assert_eq!(a.outbox_len(), 2);
    }
}
