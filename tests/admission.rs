//! Admission on virtual time, held against a plain one-at-a-time model.
//!
//! Random arrival times and record sizes, random capacity (records and
//! bytes), bursts, policies, expiry and limits (one or two record rates, a
//! byte rate, a cost rate spending a number read from each record, some of
//! which cannot be read and cost 1); the records that arrive at one instant are cut into reads at
//! random. Whatever the cut, every record must meet the fate the model gives
//! it, and a record that is written must leave at the same time.
//!
//! With `--max-wait` under a drop or fail policy, the model refuses at
//! arrival a record whose departure, simulated record by record behind
//! those waiting, is later than `--max-wait` after its arrival, less the
//! slack (under
//! drop-oldest it evicts the oldest waiting records one by one until the
//! arriving one makes it); drip keeps a forecast instead of simulating
//! again. The counts of drops by kind and of refusals must agree too.

use std::collections::VecDeque;

use bytes::Bytes;
use drip::testing::{
    slack_for, Admission, Bucket, Cost, KeyArg, KeySpec, Ledger, Limit, Limits, Offered, Overflow,
    Pace, Rate, Segment, Unit,
};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Written(u64),
    /// Dropped by the policy, newest or oldest (told apart by the counts).
    Dropped,
    Expired,
    Undelivered,
}

/// Drops by kind, and how many of them were refusals at arrival.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    dropped_newest: u64,
    dropped_oldest: u64,
    refused: u64,
}

#[derive(Debug, Clone)]
struct Case {
    /// (gap before it in ms, size in bytes with the delimiter) per record.
    arrivals: Vec<(u64, usize)>,
    /// (interval per unit in ns, burst, unit) per limit.
    limits: Vec<(u64, u64, Unit)>,
    capacity: usize,
    capacity_bytes: Option<usize>,
    policy: Overflow,
    max_wait_ms: Option<u64>,
    /// Sizes of the reads that cut each instant's arrivals (cycled).
    cuts: Vec<usize>,
    /// Each record's cost, field 2 (cycled): `None` is a cost that cannot
    /// be read.
    costs: Vec<Option<u64>>,
}

fn case() -> impl Strategy<Value = Case> {
    let gap = prop_oneof![3 => Just(0u64), 2 => 1u64..40, 1 => 100u64..700];
    let record_limit = (
        prop_oneof![Just(10 * MS), Just(25 * MS), Just(100 * MS), Just(333 * MS)],
        1u64..5,
    )
        .prop_map(|(t, b)| (t, b, Unit::Records));
    let byte_limit =
        (prop_oneof![Just(MS), Just(5 * MS)], 1u64..60).prop_map(|(t, b)| (t, b, Unit::Bytes));
    let cost_limit =
        (prop_oneof![Just(MS), Just(10 * MS)], 1u64..40).prop_map(|(t, b)| (t, b, Unit::Cost));
    let cost = prop_oneof![1 => Just(None), 2 => Just(Some(0)), 6 => (1u64..60).prop_map(Some)];
    (
        (
            prop::collection::vec((gap, 2usize..30), 1..60),
            prop::collection::vec(cost, 1..10),
        ),
        prop::collection::vec(record_limit, 1..3),
        (prop::option::of(byte_limit), prop::option::of(cost_limit)),
        1usize..8,
        prop::option::of(30usize..120),
        prop_oneof![
            Just(Overflow::Block),
            Just(Overflow::DropNewest),
            Just(Overflow::DropOldest),
            Just(Overflow::Fail)
        ],
        prop::option::of(5u64..400),
        prop::collection::vec(1usize..6, 1..8),
    )
        .prop_map(
            |(
                (arrivals, costs),
                mut limits,
                (bytes, cost),
                capacity,
                capacity_bytes,
                policy,
                max_wait_ms,
                cuts,
            )| {
                limits.extend(bytes);
                limits.extend(cost);
                Case {
                    arrivals,
                    costs,
                    limits,
                    capacity,
                    capacity_bytes,
                    policy,
                    max_wait_ms,
                    cuts,
                }
            },
        )
}

fn rate_of(interval_ns: u64) -> Rate {
    Rate::Limited {
        count: 1,
        period_ns: u128::from(interval_ns),
    }
}

fn arrival_times(case: &Case) -> Vec<u64> {
    let mut t = 0;
    case.arrivals
        .iter()
        .map(|&(gap, _)| {
            t += gap * MS;
            t
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The model: each limit is a theoretical arrival time (TAT), each record is
// decided alone, and waiting records leave the moment every limit allows.

#[derive(Clone)]
struct ModelLimit {
    interval: u64,
    burst: u64,
    unit: Unit,
    slack: u64,
    tat: Option<u64>,
}

impl ModelLimit {
    fn cost(&self, size: usize, cost: u64) -> u64 {
        match self.unit {
            Unit::Records => 1,
            Unit::Bytes => size as u64,
            Unit::Cost => cost,
        }
    }

    /// TAT at `t`: restarted at `t` when idle or later than the slack.
    fn tat_at(&self, t: u64) -> u64 {
        match self.tat {
            Some(tat) if t <= tat + self.slack => tat,
            _ => t,
        }
    }

    /// A record may leave when its cost (at most a burst of it) fits within
    /// the burst tolerance: TAT + (min(cost, burst) − burst)·T ≤ t.
    /// A record costing nothing may always leave.
    fn due(&self, t: u64, (size, cost): (usize, u64)) -> i128 {
        if self.cost(size, cost) == 0 {
            return 0;
        }
        let counted = self.cost(size, cost).min(self.burst) as i128;
        self.tat_at(t) as i128 + (counted - self.burst as i128) * self.interval as i128
    }

    /// A record costing nothing changes nothing.
    fn take(&mut self, t: u64, (size, cost): (usize, u64)) {
        if self.cost(size, cost) == 0 {
            return;
        }
        self.tat = Some(self.tat_at(t) + self.cost(size, cost) * self.interval);
    }
}

struct Model<'a> {
    case: &'a Case,
    limits: Vec<ModelLimit>,
    /// (record, size, arrived) waiting, oldest first.
    waiting: VecDeque<(usize, usize, u64)>,
    fates: Vec<Option<Fate>>,
    tally: Tally,
}

impl Model<'_> {
    /// The size and the cost of `record`, `size` bytes.
    fn weight(&self, record: usize, size: usize) -> (usize, u64) {
        (size, cost_of(self.case, record).unwrap_or(1))
    }

    fn conforms(&self, t: u64, record: usize, size: usize) -> bool {
        let w = self.weight(record, size);
        self.limits.iter().all(|l| l.due(t, w) <= t as i128)
    }

    fn leave(&mut self, t: u64, record: usize, size: usize) {
        let w = self.weight(record, size);
        for l in &mut self.limits {
            l.take(t, w);
        }
        self.fates[record] = Some(Fate::Written(t));
    }

    fn release(&mut self, t: u64) {
        while let Some(&(record, size, _)) = self.waiting.front() {
            if !self.conforms(t, record, size) {
                break;
            }
            self.waiting.pop_front();
            self.leave(t, record, size);
        }
    }

    fn expire(&mut self, t: u64) {
        let Some(max_wait) = self.case.max_wait_ms.map(|m| m * MS) else {
            return;
        };
        while let Some(&(record, _, arrived)) = self.waiting.front() {
            if arrived + max_wait >= t {
                break;
            }
            self.waiting.pop_front();
            self.fates[record] = Some(Fate::Expired);
        }
    }

    /// When `record` of `size` bytes arriving at `t` would leave behind
    /// the waiting records but the first `skip`, each leaving as soon as
    /// every limit allows: simulated one by one on a copy of the limits.
    fn leaves(&self, t: u64, skip: usize, record: usize, size: usize) -> u64 {
        let mut limits = self.limits.clone();
        let mut at = t;
        let ahead = self.waiting.iter().skip(skip).map(|w| (w.0, w.1));
        for (r, s) in ahead.chain(std::iter::once((record, size))) {
            let w = self.weight(r, s);
            let due = limits.iter().map(|l| l.due(at, w)).max().expect("a limit");
            at = at.max(due.max(0) as u64);
            for l in &mut limits {
                l.take(at, w);
            }
        }
        at
    }

    fn drop_newest(&mut self, record: usize, refused: bool) {
        self.fates[record] = Some(Fate::Dropped);
        self.tally.dropped_newest += 1;
        self.tally.refused += u64::from(refused);
    }

    fn drop_oldest(&mut self, refused: bool) {
        let (old, _, _) = self.waiting.pop_front().expect("waiting");
        self.fates[old] = Some(Fate::Dropped);
        self.tally.dropped_oldest += 1;
        self.tally.refused += u64::from(refused);
    }

    fn has_room(&self, size: usize) -> bool {
        let bytes: usize = self.waiting.iter().map(|w| w.1).sum();
        self.waiting.len() < self.case.capacity
            && self
                .case
                .capacity_bytes
                .map_or(true, |cap| bytes + size <= cap)
    }

    /// Record `record` arrives at `t`: false when it must wait for room
    /// (block) or drip stopped (fail).
    fn arrive(&mut self, t: u64, record: usize, size: usize) -> Result<bool, ()> {
        if self.waiting.is_empty() && self.conforms(t, record, size) {
            self.leave(t, record, size);
            return Ok(true);
        }
        let policy = self.case.policy;
        if let Some(max_wait) = self.case.max_wait_ms.map(|m| m * MS) {
            // Less the slack: a wake-up that late must not expire it.
            let slack = self.limits.iter().map(|l| l.slack).min().expect("a limit");
            let deadline = (t + max_wait).saturating_sub(slack);
            if policy != Overflow::Block && self.leaves(t, 0, record, size) > deadline {
                match policy {
                    Overflow::Fail => return Err(()),
                    Overflow::DropOldest
                        if self.leaves(t, self.waiting.len(), record, size) <= deadline =>
                    {
                        while self.leaves(t, 0, record, size) > deadline {
                            self.drop_oldest(true);
                        }
                    }
                    _ => {
                        self.drop_newest(record, true);
                        return Ok(true);
                    }
                }
            }
        }
        if !self.has_room(size) {
            match policy {
                Overflow::Block => return Ok(false),
                Overflow::Fail => return Err(()),
                Overflow::DropNewest => {
                    self.drop_newest(record, false);
                    return Ok(true);
                }
                Overflow::DropOldest => {
                    while !self.has_room(size) {
                        self.drop_oldest(false);
                    }
                }
            }
        }
        self.waiting.push_back((record, size, t));
        self.release(t);
        Ok(true)
    }

    fn next_event(&self, t: u64) -> Option<u64> {
        let &(record, size, arrived) = self.waiting.front()?;
        let w = self.weight(record, size);
        let due = self
            .limits
            .iter()
            .map(|l| l.due(t, w))
            .max()
            .expect("a limit")
            .max(t as i128 + 1) as u64;
        let expiry = self
            .case
            .max_wait_ms
            .map_or(u64::MAX, |m| arrived + m * MS + 1);
        Some(due.min(expiry))
    }
}

fn model(case: &Case) -> (Vec<Fate>, Tally) {
    let times = arrival_times(case);
    let mut m = Model {
        case,
        limits: case
            .limits
            .iter()
            .map(|&(interval, burst, unit)| ModelLimit {
                interval,
                burst,
                unit,
                slack: slack_for(rate_of(interval)),
                tat: None,
            })
            .collect(),
        waiting: VecDeque::new(),
        fates: vec![None; times.len()],
        tally: Tally::default(),
    };
    let mut next = 0; // next record to arrive
    let mut t = 0;
    loop {
        m.expire(t);
        m.release(t);
        while next < times.len() && times[next] <= t {
            match m.arrive(t, next, record_bytes(case, next).len()) {
                Ok(true) => next += 1,
                Ok(false) => break,
                Err(()) => {
                    for f in &mut m.fates[next..] {
                        *f = Some(Fate::Undelivered);
                    }
                    for &(w, _, _) in &m.waiting {
                        m.fates[w] = Some(Fate::Undelivered);
                    }
                    let fates = m.fates.into_iter().map(Option::unwrap).collect();
                    return (fates, m.tally);
                }
            }
        }
        let blocked = next < times.len() && times[next] <= t;
        let arrival = (!blocked && next < times.len()).then(|| times[next]);
        t = match (arrival, m.next_event(t)) {
            (Some(a), Some(e)) => a.min(e),
            (a, e) => match a.or(e) {
                Some(x) => x,
                None => break,
            },
        };
    }
    let fates = m.fates.into_iter().map(|f| f.expect("decided")).collect();
    (fates, m.tally)
}

// ---------------------------------------------------------------------------
// drip's admission, driven by the same events, with reads cut at random.

/// The cost of `record`, `None` when it cannot be read.
fn cost_of(case: &Case, record: usize) -> Option<u64> {
    case.costs[record % case.costs.len()]
}

/// Record `record` of about its size in bytes (at least its number, its
/// cost and the delimiter): `7 12 ....`, or `7 x ....` when its cost cannot
/// be read.
fn record_bytes(case: &Case, record: usize) -> Vec<u8> {
    let size = case.arrivals[record].1;
    let mut bytes = match cost_of(case, record) {
        Some(cost) => format!("{record} {cost} "),
        None => format!("{record} x "),
    }
    .into_bytes();
    bytes.resize(size.max(bytes.len() + 1) - 1, b'.');
    bytes.push(b'\n');
    bytes
}

fn ids(seg: &Segment) -> Vec<usize> {
    seg.records()
        .map(|r| {
            let digits: String = r
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|&b| b as char)
                .collect();
            digits.parse().expect("a numbered record")
        })
        .collect()
}

fn segment_of(case: &Case, records: std::ops::Range<usize>) -> Segment {
    let data: Vec<u8> = records.flat_map(|r| record_bytes(case, r)).collect();
    Segment::new(Bytes::from(data), b'\n')
}

struct Harness {
    adm: Admission,
    ledger: Ledger,
    fates: Vec<Option<Fate>>,
}

impl Harness {
    fn settle_dead(&mut self, fate: Fate) {
        for seg in self.ledger.take_dead() {
            for id in ids(&seg) {
                assert!(self.fates[id].is_none(), "record {id} decided twice");
                self.fates[id] = Some(fate);
            }
        }
    }

    fn settle_outbox(&mut self, t: u64) {
        let mut out = Vec::new();
        self.adm.take_outbox(&mut out);
        for seg in &out {
            self.ledger.written(seg.len() as u64, seg.bytes() as u64);
            for id in ids(seg) {
                assert!(self.fates[id].is_none(), "record {id} decided twice");
                self.fates[id] = Some(Fate::Written(t));
            }
        }
    }
}

fn tally(ledger: &Ledger) -> Tally {
    let c = ledger.counts();
    Tally {
        dropped_newest: c.dropped_newest,
        dropped_oldest: c.dropped_oldest,
        refused: c.refused,
    }
}

fn drip_admission(case: &Case) -> (Vec<Fate>, Tally) {
    let limits: Vec<Limit> = case
        .limits
        .iter()
        .map(|&(interval, burst, unit)| Limit {
            rate: rate_of(interval),
            burst,
            unit,
        })
        .collect();
    let bucket = Bucket::new(case.capacity, case.capacity_bytes, case.policy);
    let mut h = Harness {
        adm: Admission::new(
            bucket,
            Pace::local(
                Limits::new(&limits)
                    .with_cost(Cost::new(KeySpec::new(KeyArg::Field(2), None), b'\n')),
            ),
            case.max_wait_ms.map(|m| m * MS),
        ),
        ledger: Ledger::new(true),
        fates: vec![None; case.arrivals.len()],
    };
    let times = arrival_times(case);
    let mut next = 0;
    let mut pending: Option<Segment> = None;
    let mut cuts = case.cuts.iter().cycle();
    let mut t = 0;
    loop {
        h.adm.expire(t, &mut h.ledger);
        h.settle_dead(Fate::Expired);
        h.adm.release(t);
        h.settle_outbox(t);
        // This instant's arrivals, after any read handed back earlier.
        let mut reads: VecDeque<Segment> = pending.take().into_iter().collect();
        while next < times.len() && times[next] <= t {
            let n = (*cuts.next().expect("cycled")).min(times.len() - next);
            let end = (next..next + n)
                .take_while(|&r| times[r] <= t)
                .last()
                .expect("one")
                + 1;
            reads.push_back(segment_of(case, next..end));
            next = end;
        }
        while let Some(seg) = reads.pop_front() {
            let back = h.adm.arrive(t, seg, case.policy, true, &mut h.ledger);
            h.settle_dead(Fate::Dropped);
            h.settle_outbox(t);
            match back {
                Offered::Done => {}
                Offered::Wait(rest) => {
                    // Reading stops: what is left arrives when there is room.
                    let mut data = rest.as_bytes().to_vec();
                    for s in reads.drain(..) {
                        data.extend_from_slice(s.as_bytes());
                    }
                    pending = Some(Segment::new(Bytes::from(data), b'\n'));
                }
                Offered::Overflowed(rest) => {
                    h.ledger.read_undelivered(rest);
                    for s in reads.drain(..) {
                        h.ledger.read_undelivered(s);
                    }
                    if next < times.len() {
                        h.ledger
                            .read_undelivered(segment_of(case, next..times.len()));
                    }
                    h.adm.drain(drip::testing::Fate::Undelivered, &mut h.ledger);
                    h.settle_dead(Fate::Undelivered);
                    let t = tally(&h.ledger);
                    return (
                        h.fates.into_iter().map(|f| f.expect("decided")).collect(),
                        t,
                    );
                }
            }
        }
        let arrival = (pending.is_none() && next < times.len()).then(|| times[next]);
        t = match (arrival, h.adm.next_event()) {
            (Some(a), Some(e)) => a.min(e.max(t + 1)),
            (None, Some(e)) => e.max(t + 1),
            (Some(a), None) => a,
            (None, None) => break,
        };
    }
    let counts = h.ledger.counts();
    assert_eq!(counts.read, counts.settled(), "{counts:?}");
    let t = tally(&h.ledger);
    (
        h.fates.into_iter().map(|f| f.expect("decided")).collect(),
        t,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn admission_matches_the_one_at_a_time_model(case in case()) {
        let expected = model(&case);
        let got = drip_admission(&case);
        prop_assert_eq!(got, expected);
    }
}

/// The three commands of the issue that asked for one-at-a-time admission,
/// on virtual time: the fate no longer depends on how the input was cut.
#[test]
fn the_same_records_cut_differently_meet_the_same_fate() {
    let case = |gaps: Vec<u64>, burst, capacity| Case {
        arrivals: gaps.into_iter().map(|g| (g, 2)).collect(),
        limits: vec![(1000 * MS, burst, Unit::Records)],
        capacity,
        capacity_bytes: None,
        policy: Overflow::DropNewest,
        max_wait_ms: None,
        cuts: vec![1, 4, 2],
        costs: vec![Some(1)],
    };
    let written = |(fates, _): (Vec<Fate>, Tally)| -> Vec<usize> {
        fates
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f, Fate::Written(_)))
            .map(|(i, _)| i + 1)
            .collect()
    };
    // printf '1\n2\n3\n4\n5\n' | drip -r 1/s -c 2 -o drop-newest
    assert_eq!(written(drip_admission(&case(vec![0; 5], 1, 2))), [1, 2, 3]);
    // the same with 10 ms between records
    assert_eq!(
        written(drip_admission(&case(vec![0, 10, 10, 10, 10], 1, 2))),
        [1, 2, 3]
    );
    // seq 15 | drip -r 1/s -b 5 -c 1 -o drop-newest: five at once, the
    // sixth a second later
    let fates = drip_admission(&case(vec![0; 15], 5, 1));
    assert_eq!(written(fates.clone()), [1, 2, 3, 4, 5, 6]);
    let fates = fates.0;
    assert_eq!(fates[4], Fate::Written(0));
    assert_eq!(fates[5], Fate::Written(1000 * MS));
}
