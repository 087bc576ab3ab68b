//! The global limits' lease: the departure slots this drip has reserved
//! in the shared state and not used yet, as times on drip's own clock
//! ([`GlobalLease`], the grant the keeper serves), and the [`Schedule`]
//! admission and the writer see over it ([`SharedSchedule`]), which only
//! ever takes the lease's lock, never the network.
//!
//! One reservation takes as many slots as the records waiting want, at
//! most one *chunk* of the shared schedule ([`fitting`], [`chunk`]: 50 ms,
//! or four round trips, at most 200 ms), and the keeper asks again when
//! the lease is nearly used ([`ahead`]). Fairness: as each call takes at
//! most one chunk, busy participants take turns in the order their calls
//! reach the state, one chunk each, and converge to equal shares within
//! one round of turns (while the turns of all of them fit in the horizon,
//! 1 s: some 20 busy drips on a fast link).
//!
//! A slot lets one record go. When a limit counts bytes (`--byte-rate`),
//! each slot is reserved for the size of the waiting record it is for, and
//! costs the byte limits that size: it may carry any record of at most that
//! size, so every departure spent a slot reserved for at least its size and
//! the shared bound holds. A slot too small for the record at the head (the
//! queue changed since: a drop, an expiry, an eviction) is wasted (counted
//! as forfeited) and a slot for the real size is reserved.
//!
//! Slots no record waits for any more (their records expired) go back at
//! once, the end of the lease first, as far as they came from the last
//! reservation ([`Held::send_back_tail`]): when no one reserved
//! after it, the schedule resumes from them as if they had never been
//! granted; when someone did, the state refuses them, and they serve this
//! drip's next records instead. A slot no record took in time (none came
//! before the slot was late) goes back when it ends the lease and came
//! from the last reservation ([`super::keeper`]); otherwise it is
//! forfeited (counted).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::gcra::{Meter, Settlement, Weight, WEIGHTS};
use super::keeper::{Grants, Lease, Mode, Return, SlotRequest, Status, Turn};
use super::protocol::{
    ahead, byte_late_ns, chunk, fitting, late_ns, Grant, Mark, Reply, HORIZON, POLL_NS,
};
use crate::cost::Cost;
use crate::pace::Leased;
use crate::schedule::{Limit, Limits, Schedule};
use crate::settle::{record_hash, take_newest, MOST_IN_FLIGHT};
use crate::sys::Unpoisoned;

/// The sizes of waiting records the lease keeps at most (more than one
/// reservation's worth, as a reservation never takes more than 200 ms).
pub(crate) const SIZES_KEPT: usize = 4096;

/// One reserved slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldSlot {
    /// When it is due, on drip's clock (ns).
    pub(crate) at: u64,
    /// The size (bytes, or the weights of its costs) it was reserved
    /// for, which it may carry a record
    /// of at most (1 when no limit counts bytes).
    pub(crate) size: Weight,
    /// Which of this drip's grants it came from (counted from 1).
    pub(crate) grant: u64,
    /// Its time on the shared clock (ns), for giving it back.
    pub(crate) shared: i64,
    /// Where the state stood before its reservation, for settling its
    /// record (`--settle`).
    pub(crate) mark: Mark,
}

/// The slots one lease holds from this drip's grants (the global limits'
/// lease, or one key's, [`super::keys`]) and those of them going back:
/// one grant type for both, so a slot no record takes goes back, serves
/// the next records or is forfeited alike.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// The key of a key's lease (`None`: the global limits').
    pub(crate) key: Option<Box<[u8]>>,
    /// Reserved departure slots, in order.
    pub(crate) slots: VecDeque<HeldSlot>,
    /// The lease's grants so far, and the last one's reservation number.
    pub(crate) grants: u64,
    pub(crate) last_seq: u64,
    /// Late unused slots of the last grant that ended the lease, or slots
    /// at its end no record waits for: going back.
    pub(crate) returning: Option<Return>,
    /// The slots of `returning` taken from the lease while still usable
    /// (no record waited for them), and those of the give-back under way
    /// (with its reservation's number): if the state refuses them, they
    /// serve the next records ([`Held::refused`]).
    offered: Vec<HeldSlot>,
    giving: (u64, Vec<HeldSlot>),
}

impl Held {
    /// `count` slots of the last reservation going back, from `first`.
    fn run(&self, first: &HeldSlot, count: u64) -> Return {
        Return {
            key: self.key.clone(),
            seq: self.last_seq,
            first_unused: first.shared,
            size: first.size,
            count,
        }
    }

    /// Send `run` back at the keeper's next turn, with `slots`, those of
    /// its slots still usable. Slots of the same reservation already going
    /// back go with them, from the earliest; those of an earlier one (the
    /// state would refuse them: this drip reserved since) are forfeited
    /// (counted in `forfeited`), but for the usable ones, kept for the
    /// next records.
    fn send_back(&mut self, run: Return, slots: Vec<HeldSlot>, forfeited: &mut u64) {
        match &mut self.returning {
            Some(r) if r.seq == run.seq => {
                r.count += run.count;
                if run.first_unused < r.first_unused {
                    (r.first_unused, r.size) = (run.first_unused, run.size);
                }
            }
            Some(r) => {
                let old = std::mem::take(&mut self.offered);
                *forfeited += r.count - old.len() as u64;
                self.keep(old);
                self.returning = Some(run);
            }
            None => self.returning = Some(run),
        }
        self.offered.extend(slots);
    }

    /// The slots going back, for a give-back now: what it sends
    /// ([`Held::returning`]), its usable slots kept in case the state
    /// refuses them.
    pub(crate) fn take_returning(&mut self) -> Option<Return> {
        let run = self.returning.take();
        let seq = run.as_ref().map_or(0, |r| r.seq);
        self.giving = (seq, std::mem::take(&mut self.offered));
        run
    }

    /// Put `slots` back in the lease, in order, to serve the next
    /// records: the state did not take them back (someone reserved after
    /// them), so they can never go back (nor be given back at exit).
    fn keep(&mut self, slots: Vec<HeldSlot>) {
        for mut slot in slots {
            slot.grant = 0;
            let at = self.slots.partition_point(|s| s.at <= slot.at);
            self.slots.insert(at, slot);
        }
    }

    /// Send back up to `count` slots at the end of the lease, as far as
    /// they came from the last reservation: slots no record waits for (a
    /// record expired while its slot was held, or before its slot came).
    /// Sent back at once, not when late: by then another drip may have
    /// reserved after them, and the state would refuse them. Slots of
    /// earlier reservations stay, for the next records (or are forfeited
    /// late).
    pub(crate) fn send_back_tail(&mut self, count: usize, forfeited: &mut u64) {
        let mut tail = Vec::new();
        while tail.len() < count {
            match self.slots.back() {
                Some(s) if s.grant == self.grants => tail.extend(self.slots.pop_back()),
                _ => break,
            }
        }
        let Some(&first) = tail.last() else { return };
        tail.reverse();
        let run = self.run(&first, tail.len() as u64);
        self.send_back(run, tail, forfeited)
    }

    /// Drop the slots too late to use at `now` (`late`: how late a slot
    /// of a size may be). Those of the last grant that leave the lease
    /// empty go back; the others are forfeited (counted in `forfeited`).
    pub(crate) fn drop_late(
        &mut self,
        now: u64,
        late: impl Fn(Weight) -> u64,
        forfeited: &mut u64,
    ) {
        let mut run: Option<Return> = None;
        while let Some(&slot) = self.slots.front().filter(|s| s.at + late(s.size) < now) {
            self.slots.pop_front();
            match &mut run {
                _ if slot.grant != self.grants => *forfeited += 1,
                Some(r) => r.count += 1,
                None => run = Some(self.run(&slot, 1)),
            }
        }
        match run {
            Some(run) if self.slots.is_empty() => self.send_back(run, Vec::new(), forfeited),
            Some(run) => *forfeited += run.count,
            None => {}
        }
    }

    /// Put the slots of `grant` in the lease, reserved for `sizes` (1
    /// each beyond them), the reply's `now` being `shared_now` on the
    /// shared clock and `base` on drip's. Returns the latest (drip's ns).
    pub(crate) fn take(
        &mut self,
        grant: &Grant,
        sizes: &[Weight],
        reply: (i64, Mark),
        base: u64,
    ) -> u64 {
        let (shared_now, mark) = reply;
        self.grants += 1;
        self.last_seq = grant.seq;
        let floor = self.slots.back().map_or(0, |s| s.at);
        let mut latest = 0;
        for (j, &d) in grant.slots.iter().enumerate() {
            let at = base
                .saturating_add(u64::try_from(d).unwrap_or(0))
                .max(floor);
            self.slots.push_back(HeldSlot {
                at,
                size: sizes.get(j).copied().unwrap_or(Weight::from(1)),
                grant: self.grants,
                shared: shared_now.saturating_add(d),
                mark,
            });
            latest = latest.max(at);
        }
        latest
    }

    /// Slots of `returns` (this lease's) that did not go back (someone
    /// reserved since, or the state cannot be reached): those still usable
    /// when sent serve the next records; the others are lost (counted in
    /// `forfeited`). Returns how many were kept.
    pub(crate) fn refused(&mut self, returns: &[Return], forfeited: &mut u64) -> usize {
        let (seq, slots) = std::mem::take(&mut self.giving);
        let (mut lost, mut ours) = (0, false);
        for r in returns {
            lost += r.count;
            ours |= r.seq == seq;
        }
        let kept = if ours { slots.len() } else { 0 };
        if ours {
            self.keep(slots);
        }
        *forfeited += lost - kept as u64;
        kept
    }

    /// At exit (or the lease's end): the give-back pending and the unused
    /// tail of the last grant, one give-back per reservation (the
    /// earliest of a reservation's covers the later).
    pub(crate) fn unused(&mut self) -> Vec<Return> {
        let mut out: Vec<Return> = self.take_returning().into_iter().collect();
        let count = self
            .slots
            .iter()
            .rev()
            .take_while(|s| s.grant == self.grants)
            .count();
        if count > 0 {
            out.push(self.run(&self.slots[self.slots.len() - count], count as u64));
        }
        out.sort_by_key(|r| (r.seq, r.first_unused));
        out.dedup_by(|later, earlier| {
            later.seq == earlier.seq && {
                earlier.count += later.count;
                true
            }
        });
        out
    }
}

/// The global limits' lease, which the schedule and the keeper share.
#[derive(Debug, Default)]
pub(crate) struct GlobalLease {
    /// Its slots.
    pub(crate) held: Held,
    /// Records waiting that the lease does not cover yet.
    pub(crate) wanted: usize,
    /// When a limit counts bytes: the sizes (bytes) of the first of those
    /// records, in order, at most [`SIZES_KEPT`] (empty otherwise).
    pub(crate) wanted_sizes: Vec<Weight>,
    pub(crate) status: Status,
    /// The shared limits, for sizing a reservation to one chunk.
    meters: Vec<Meter>,
    /// The shared limits `drip ctl` changed (in the command line's order,
    /// [`super::gcra::lone_order`]) and their meters, until the schedule takes
    /// them ([`SharedSchedule`]'s next release).
    pub(crate) relimited: Option<(Vec<Limit>, Vec<Meter>)>,
    /// What each cost limit of the command line spends, in its order, as
    /// the state tags it ([`super::budget_tags`]): how stored limits map
    /// back to them.
    pub(crate) budget_tags: Vec<Option<String>>,
    /// The limits in force, as `drip ctl` and `--metrics` show them.
    pub(crate) in_force: Option<crate::schedule::InForce>,
    /// `--settle`: slots are reserved only when due within a chunk (none
    /// placed far ahead, where a settlement's give-back could no longer
    /// reach), and the settlements go to the state at the keeper's next
    /// turn.
    pub(crate) settling: bool,
    /// Settlements not sent yet (kept when the state cannot be reached;
    /// beyond [`MOST_SETTLEMENTS`], folded together).
    pub(crate) settlements: Vec<Settlement>,
    /// When the state said the next slot is not due yet: ask again no
    /// sooner than this (drip's clock, ns), unless settling first.
    not_before: u64,
}

/// The most settlements kept waiting for the state: beyond, those of one
/// life are folded into one ([`Settlement::fold`]: what they give back
/// comes back from the earliest's floor).
pub(crate) const MOST_SETTLEMENTS: usize = 256;

/// How long (ns) at most a lease told its next slot is not due yet waits
/// before asking again: a give-back (this drip's or another's) may have
/// made it due sooner.
const RECHECK_NS: u64 = 100_000_000;

impl GlobalLease {
    pub(crate) fn new(meters: Vec<Meter>) -> GlobalLease {
        GlobalLease {
            meters,
            ..GlobalLease::default()
        }
    }

    /// A record's settlement, for the keeper's next turn.
    pub(crate) fn settle(&mut self, s: Settlement) {
        self.settlements.push(s);
        if self.settlements.len() > MOST_SETTLEMENTS {
            let mut folded: Vec<Settlement> = Vec::new();
            for s in self.settlements.drain(..) {
                match folded.iter_mut().find(|f| f.life == s.life) {
                    Some(f) => f.fold(&s),
                    None => folded.push(s),
                }
            }
            self.settlements = folded;
        }
    }

    /// [`Held::send_back_tail`] of this lease (the records' wants are
    /// noted after).
    pub(crate) fn send_back_tail(&mut self, count: usize) {
        self.held.send_back_tail(count, &mut self.status.forfeited);
    }

    /// [`Held::drop_late`] of this lease (the records' wants are noted
    /// after).
    fn drop_late(&mut self, now: u64, late: impl Fn(Weight) -> u64) {
        self.held.drop_late(now, late, &mut self.status.forfeited);
    }

    /// Note what the records left waiting want: `left` of them, the sizes
    /// of the first from `sizes` (when weighed).
    fn note_wanted(&mut self, left: usize, sizes: Option<&mut dyn Iterator<Item = Weight>>) {
        let covered = self.held.slots.len();
        self.wanted = left.saturating_sub(covered);
        self.wanted_sizes.clear();
        if let Some(sizes) = sizes {
            self.wanted_sizes
                .extend(sizes.skip(covered).take(SIZES_KEPT.min(self.wanted)));
        }
    }
}

impl Grants for GlobalLease {
    fn status(&mut self) -> &mut Status {
        &mut self.status
    }

    fn turn(&mut self, now: u64, _since_call: Option<Duration>) -> Result<Turn, Duration> {
        let rtt = i64::try_from(self.status.rtt).unwrap_or(i64::MAX);
        let mut turn = Turn::default();
        turn.returns.extend(self.held.take_returning());
        turn.settlements = std::mem::take(&mut self.settlements);
        let mut want = self.wanted;
        if !self.wanted_sizes.is_empty() {
            want = want.min(self.wanted_sizes.len());
        }
        let mut wait = Duration::from_secs(1);
        if want > 0 {
            let end = self.held.slots.back().map_or(0, |s| s.at);
            let mut until = end.saturating_sub(ahead(rtt).unsigned_abs());
            if turn.settlements.is_empty() {
                until = until.max(self.not_before);
            }
            if until <= now {
                let sizes: Vec<Weight> = self.wanted_sizes.iter().take(want).copied().collect();
                let want = fitting(&self.meters, want as u64, &sizes, chunk(rtt));
                let sizes = sizes[..sizes.len().min(want as usize)].to_vec();
                turn.requests.push(SlotRequest {
                    key: None,
                    want,
                    sizes,
                    at: 0,
                    every: 0,
                    within: self.settling.then(|| chunk(rtt)),
                });
            } else {
                wait = Duration::from_nanos(until - now);
            }
        }
        if turn.returns.is_empty() && turn.requests.is_empty() && turn.settlements.is_empty() {
            Err(wait)
        } else {
            Ok(turn)
        }
    }

    fn horizon(&self) -> i64 {
        HORIZON
    }

    fn take(&mut self, requests: &[SlotRequest], reply: Reply, base: u64) {
        if let Some(due) = reply.not_yet {
            let rtt = i64::try_from(self.status.rtt).unwrap_or(i64::MAX);
            let wait = due.saturating_sub(ahead(rtt)).max(0).unsigned_abs();
            self.not_before = base.saturating_add(wait.min(RECHECK_NS));
            return;
        }
        let (Some(request), Some(grant)) = (requests.first(), reply.grants.first()) else {
            return;
        };
        let n = grant.slots.len();
        // Records that expired while their slots were being reserved.
        let unwanted = n.saturating_sub(self.wanted);
        self.wanted = self.wanted.saturating_sub(n);
        let covered = n.min(self.wanted_sizes.len());
        self.wanted_sizes.drain(..covered);
        let latest = self
            .held
            .take(grant, &request.sizes, (reply.now, reply.mark), base);
        self.status.reserved_until = self.status.reserved_until.max(latest);
        self.send_back_tail(unwanted);
    }

    fn refused(&mut self, returns: &[Return]) {
        // The slots kept cover as many of the records wanting slots.
        let kept = self.held.refused(returns, &mut self.status.forfeited);
        let covered = kept.min(self.wanted);
        self.wanted -= covered;
        self.wanted_sizes
            .drain(..covered.min(self.wanted_sizes.len()));
    }

    fn unused(&mut self) -> Vec<Return> {
        self.held.unused()
    }

    fn unsettled(&mut self, settlements: Vec<Settlement>) {
        let newer = std::mem::replace(&mut self.settlements, settlements);
        for s in newer {
            self.settle(s);
        }
    }

    fn settlements(&mut self) -> Vec<Settlement> {
        std::mem::take(&mut self.settlements)
    }

    fn go_local(&mut self, _now: u64) {
        self.status.mode = Mode::Local;
    }

    fn adopt(
        &mut self,
        limits: &[Limit],
        tags: &[Option<String>],
        _key: Option<&crate::keyed::KeyTable>,
    ) -> bool {
        if limits.is_empty() {
            return false;
        }
        self.meters = super::gcra::meters(limits, tags);
        let lone = super::gcra::lone_order(limits, tags, &self.budget_tags);
        if let Some(in_force) = &self.in_force {
            *in_force.lock().unpoisoned() = lone.clone();
        }
        self.relimited = Some((lone, self.meters.clone()));
        true
    }
}

/// The schedule of a drip sharing its limits: the slots of the lease, or,
/// while the shared state is out of reach under `local`, its own limits at
/// the rate divided by the peers (and both while it changes over).
#[derive(Debug)]
pub struct SharedSchedule {
    pub(crate) lease: Arc<Lease<GlobalLease>>,
    pub(crate) local: Limits,
    /// The tightest record limit, records per second (infinite: none).
    pub(crate) per_second: f64,
    /// The highest byte rate, bytes per second (infinite: none).
    pub(crate) bytes_per_second: f64,
    /// Some limit counts bytes (or cost): slots are reserved for sizes
    /// (or costs).
    pub(crate) weighs_bytes: bool,
    /// How a record's cost is read, when the weighed limits count cost
    /// (`--cost-rate`, never beside a shared `--byte-rate`).
    pub(crate) cost: Option<Cost>,
    /// Which cost limit's spending (its place in `cost`'s) each weight of a
    /// slot is, when the cost limits spend different costs
    /// ([`super::gcra::meters`]); empty: one weight, the first cost (or
    /// the size in bytes).
    pub(crate) budgets: Vec<usize>,
    /// The highest rate (units a second) of the limits spending each
    /// weight (0: none), for how late a slot may be.
    pub(crate) weight_rates: [f64; WEIGHTS],
    pub(crate) last_now: u64,
    /// `--share-peers`, which the lone pace divides the rates by.
    pub(crate) peers: u64,
    /// The slots of the records released and not written yet, and how far
    /// a late write overtook the slots after it.
    pub(crate) written: Writes,
    /// `--settle`: the records released on slots and not settled yet,
    /// oldest first, at most [`MOST_IN_FLIGHT`]: each one's hash
    /// ([`record_hash`]), the size its slot was reserved for (what it was
    /// charged) and where the state stood before that slot's reservation.
    pub(crate) in_flight: Option<VecDeque<(u64, Weight, Mark)>>,
    /// The most a slot may be reserved for, and the notice of the first
    /// record weighing more.
    pub(crate) heaviest: Heaviest,
}

/// The most a shared slot may be reserved for (bytes, or cost:
/// [`super::gcra::most_weight`], 32 days of the weighed limits), and
/// whether the first record weighing more was said on stderr.
#[derive(Debug)]
pub(crate) struct Heaviest {
    /// The most a slot is reserved for, of each weight (`u64::MAX`: no
    /// bound).
    pub(crate) most: Weight,
    /// Who says it (`--share NAME`).
    pub(crate) who: String,
    /// Said nothing (`--quiet`), or said already.
    pub(crate) said: std::cell::Cell<bool>,
}

impl Heaviest {
    /// No bound (no weighed limit).
    #[cfg(test)]
    pub(crate) fn none() -> Heaviest {
        Heaviest {
            most: Weight([u64::MAX; WEIGHTS]),
            who: String::new(),
            said: std::cell::Cell::new(true),
        }
    }

    /// What a record weighing `weight` is charged: its weight, or the most
    /// a slot may be, said once on stderr.
    pub(crate) fn cap(&self, weight: Weight) -> Weight {
        if self.most.covers(&weight) {
            return weight;
        }
        let c = (0..WEIGHTS)
            .find(|&c| weight.0[c] > self.most.0[c])
            .unwrap_or(0);
        if !self.said.replace(true) {
            eprintln!(
                "drip: {}: a record weighs {}, more than a shared slot may charge (32 days of the limit): each such record is charged {}",
                self.who, weight.0[c], self.most.0[c]
            );
        }
        weight.least(&self.most)
    }
}

/// A record's weights, its costs `costs` (as [`Cost::estimates`]): weight
/// `c` what cost limit `budgets[c]` spends of them (0 past `budgets`).
pub(crate) fn weigh(cost: &Cost, budgets: &[usize], costs: &[Option<u64>]) -> Weight {
    Weight(std::array::from_fn(|c| {
        budgets.get(c).map_or(0, |&b| cost.spend(b, costs))
    }))
}

/// The highest rate (units a second) of the limits of `meters` spending
/// each weight of a slot (0: none).
pub(crate) fn weight_rates(meters: &[Meter]) -> [f64; WEIGHTS] {
    let mut rates = [0.0; WEIGHTS];
    for m in meters {
        if let Meter::Bytes(b) = m {
            let c = b.weight.min(WEIGHTS - 1);
            rates[c] = f64::max(rates[c], b.count as f64 * 1e9 / b.period as f64);
        }
    }
    rates
}

/// What the writes did with the slots released ([`Leased::wrote`]).
///
/// A record leaves when its write returns, not when its slot is spent: a
/// writer held up between the two (a loaded machine) writes it later than
/// its slot by more than a slot may be late ([`late_ns`]), among the slots
/// after it. Each record written so late takes the place of this drip's
/// next slot due before the write's end, which is *overtaken*: forfeited,
/// never used nor given back (a slot given back would let another drip's
/// record go beside the late one). A slot after it still within its
/// allowance may be used at once, beside the late record (slots 0, 5, 10
/// ms at 200/s, the first record written at 12 ms: the 5 ms slot goes,
/// the 10 ms one may carry the next record at 12 ms), so a writer held up
/// can still put one record among the next drip's slots; a drip at a high
/// rate (whose allowance is 2 ms, many slots) loses one slot for each
/// record late, not every slot the write outlasted. Key leases are not
/// overtaken.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    /// Released, not written yet, in order: each record's slot (its time
    /// on drip's clock, ns, and the size it was reserved for). At most
    /// [`SIZES_KEPT`], the oldest let go: under a sink that never reports
    /// its writes (`--exec`) it fills and rotates, unread.
    unwritten: VecDeque<(u64, Weight)>,
    /// Slots still to forfeit for records written late, and the end of
    /// the last such write (drip's clock, ns): only slots due before it
    /// are overtaken. Those the lease holds go at the write itself
    /// ([`Leased::wrote`]), so a give-back at a stop never returns them;
    /// the rest, if slots due before it come, at the next release.
    overtaken: usize,
    until: u64,
}

impl SharedSchedule {
    /// Pace by `limits` (the state metering them as `meters`) from `now`
    /// on, changed by `drip ctl` for every drip on the state: the lone
    /// pace (rate / peers, from the last departure, no credit carried)
    /// and how late a slot may be.
    fn follow(&mut self, now: u64, limits: &[Limit], meters: &[Meter]) {
        let pace = super::gcra::PeerPace::of(limits, self.peers);
        self.local.replace_limits(now, &pace.local);
        self.per_second = pace.per_second;
        self.bytes_per_second = pace.bytes_per_second;
        self.weight_rates = weight_rates(meters);
        self.heaviest.most = super::gcra::most_weights(meters);
    }

    /// What `record` weighs on the weighed limits: its cost under cost
    /// limits (each weight the spending of its cost limit, when they
    /// spend different costs), else its size in bytes.
    fn weight(&self, record: &[u8]) -> Weight {
        self.heaviest.cap(match &self.cost {
            Some(cost) if !self.budgets.is_empty() => {
                weigh(cost, &self.budgets, &cost.estimates(record))
            }
            Some(cost) => Weight::from(cost.of(record)),
            None => Weight::from(record.len() as u64),
        })
    }

    /// What a record spent of each weight, its costs `costs` (as
    /// [`Cost::estimates`]): as [`SharedSchedule::weight`].
    fn spent(&self, cost: &Cost, costs: &[Option<u64>]) -> Weight {
        self.heaviest.cap(if self.budgets.is_empty() {
            Weight::from(cost.spend(0, costs))
        } else {
            weigh(cost, &self.budgets, costs)
        })
    }

    /// How late (ns) a slot reserved for `size` bytes may still be used:
    /// half an emission interval of the tightest record limit
    /// ([`late_ns`]); with byte limits, also no later than the slot is
    /// long at the highest byte rate ([`byte_late_ns`]), so a record limit
    /// beside a byte limit keeps its half interval.
    ///
    /// With weights of several costs, no later than the slot is long at
    /// the highest rate of each cost it weighs (a weight of 0 spends
    /// nothing, and bounds nothing).
    fn late_ns(&self, size: Weight) -> u64 {
        let records = if self.per_second.is_finite() {
            late_ns(self.per_second)
        } else {
            u64::MAX
        };
        if !self.weighs_bytes {
            return late_ns(self.per_second);
        }
        let weighed = (0..WEIGHTS).filter(|&c| self.weight_rates[c] > 0.0 && size.0[c] > 0);
        let lates = weighed.map(|c| byte_late_ns(self.weight_rates[c] / size.0[c] as f64));
        match lates.min() {
            Some(late) if !self.budgets.is_empty() => records.min(late),
            _ => records.min(byte_late_ns(
                self.bytes_per_second / size.0[0].max(1) as f64,
            )),
        }
    }

    /// Of `available` records waiting in order (from `records`), release
    /// those whose slot is due at `now`, each on a slot reserved
    /// for at least its size: a slot at the head too small for the record
    /// at the head is wasted (forfeited). While changing over, each must
    /// also be allowed by the lone pace. Then note what the records left
    /// waiting want.
    fn release_slots(
        &mut self,
        st: &mut GlobalLease,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        let alone = st.status.mode.paced_alone(now);
        let mut records = records.take(available).peekable();
        let mut n = 0;
        while let Some(&record) = records.peek() {
            let size = self.weight(record);
            if self.weighs_bytes {
                while st.held.slots.front().is_some_and(|s| !s.size.covers(&size)) {
                    st.held.slots.pop_front();
                    st.status.forfeited += 1;
                }
            }
            if !st.held.slots.front().is_some_and(|s| s.at <= now) {
                break;
            }
            if alone && self.local.release(now, 1, &mut std::iter::once(record)) == 0 {
                break;
            }
            if let Some(slot) = st.held.slots.pop_front() {
                self.written.released(&slot);
                self.note_in_flight(record, &slot);
            }
            records.next();
            n += 1;
        }
        self.note_wanted(st, available - n, &mut records);
        n
    }

    /// `left` records still want slots, in order from `records`
    /// ([`GlobalLease::note_wanted`], weighed when a limit weighs them).
    fn note_wanted(
        &self,
        st: &mut GlobalLease,
        left: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) {
        let mut sizes = records.map(|r| self.weight(r));
        let weighed = &mut sizes as &mut dyn Iterator<Item = Weight>;
        st.note_wanted(left, self.weighs_bytes.then_some(weighed));
    }
}

impl SharedSchedule {
    /// `--settle`: `record` left on `slot`; note it in flight.
    fn note_in_flight(&mut self, record: &[u8], slot: &HeldSlot) {
        let (Some(flight), Some(cost)) = (self.in_flight.as_mut(), self.cost.as_ref()) else {
            return;
        };
        if flight.len() == MOST_IN_FLIGHT {
            flight.pop_front();
        }
        flight.push_back((record_hash(cost.body(record)), slot.size, slot.mark));
    }
}

impl Schedule for SharedSchedule {
    fn weighs_bytes(&self) -> bool {
        self.weighs_bytes
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        self.last_now = now;
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        if let Some((limits, meters)) = st.relimited.take() {
            self.follow(now, &limits, &meters);
        }
        if st.status.mode == Mode::Local {
            return self.local.release(now, available, records);
        }
        let before = (st.wanted, st.held.returning.is_some());
        self.written.overtake(&mut st);
        st.drop_late(now, |size| self.late_ns(size));
        let n = if self.weighs_bytes || st.status.mode.paced_alone(now) {
            self.release_slots(&mut st, now, available, records)
        } else {
            let mut n = 0;
            while n < available && st.held.slots.front().is_some_and(|s| s.at <= now) {
                if let Some(slot) = st.held.slots.pop_front() {
                    self.written.released(&slot);
                }
                n += 1;
            }
            st.note_wanted(available - n, None);
            n
        };
        let asks = st.wanted > 0 && (before.0 == 0 || st.held.slots.is_empty());
        if asks || (!before.1 && st.held.returning.is_some()) {
            lease.wake.notify_one();
        }
        n
    }

    fn next_due(&self, record: &[u8]) -> u64 {
        let size = self.weight(record);
        let st = self.lease.lock();
        if st.status.mode == Mode::Local {
            return self.local.next_due(record);
        }
        let due = match st.held.slots.front() {
            // Too small for this record: wasted at the next release.
            Some(s) if self.weighs_bytes && !s.size.covers(&size) => self.last_now,
            Some(s) => s.at,
            None => self.last_now.saturating_add(POLL_NS),
        };
        if st.status.mode.paced_alone(self.last_now) {
            due.max(self.local.next_due(record))
        } else {
            due
        }
    }

    fn slack_ns(&self) -> u64 {
        self.local.slack_ns()
    }

    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        let st = self.lease.lock();
        if st.status.mode == Mode::Local {
            return self.local.nth_due(record, n);
        }
        // The slots reserved: the later ones are not known yet.
        st.held.slots.get(n).map(|s| s.at)
    }

    fn records_per_second(&self) -> f64 {
        if self.weighs_bytes {
            return f64::INFINITY;
        }
        self.per_second
    }
}

impl Leased for SharedSchedule {
    fn expired(&mut self, now: u64, waiting: usize, records: &mut dyn Iterator<Item = &[u8]>) {
        let lease = Arc::clone(&self.lease);
        let mut st = lease.lock();
        if st.status.mode == Mode::Local {
            return;
        }
        let going = st.held.returning.is_some();
        self.written.overtake(&mut st);
        st.drop_late(now, |size| self.late_ns(size));
        let beyond = st.held.slots.len().saturating_sub(waiting);
        st.send_back_tail(beyond);
        self.note_wanted(&mut st, waiting, records);
        if !going && st.held.returning.is_some() {
            lease.wake.notify_one();
        }
    }

    /// A record released on a slot settles on the shared state (at the
    /// keeper's next turn, or once it answers again when pacing alone):
    /// what its slot was reserved for beyond what it spent goes back,
    /// what it spent beyond is charged, from where the state stood before
    /// the slot's reservation (`Gcra::settle`). A
    /// record released by the lone pace (`local`), or forgotten, settles
    /// on the local limits, and, unless pacing alone, its underestimate
    /// is charged on the shared state too (nothing is given back).
    /// Identical records: the oldest's mark (the higher floor), the
    /// newest's slot, as `settle.rs`.
    fn settle(&mut self, now: u64, record: &[u8], spent: &[Option<u64>]) {
        let (Some(_), Some(cost)) = (self.in_flight.as_ref(), self.cost.as_ref()) else {
            return;
        };
        let hash = record_hash(cost.body(record));
        let estimates = cost.estimates(record);
        let actual: Vec<Option<u64>> = estimates
            .iter()
            .enumerate()
            .map(|(i, e)| spent.get(i).copied().flatten().or(*e))
            .collect();
        let real = self.spent(cost, &actual);
        let estimate = self.spent(cost, &estimates);
        let Some(flight) = self.in_flight.as_mut() else {
            return;
        };
        let found = take_newest(flight, |e| e.0 == hash, |oldest| oldest.2);
        let on_slot = found.is_some();
        let s = match found {
            Some((mark, (_, size, _))) => Settlement {
                back: size.minus(&real),
                more: real.minus(&size),
                before: mark.charged,
                slot: size,
                life: mark.life,
            },
            None => {
                self.local.settle(now, record, spent);
                // Not found (forgotten, or let go by the lone pace): an
                // underestimate is still charged, nothing given back.
                Settlement {
                    more: real.minus(&estimate),
                    ..Settlement::default()
                }
            }
        };
        if s.back.is_zero() && s.more.is_zero() {
            return;
        }
        let mut st = self.lease.lock();
        if on_slot || st.status.mode != Mode::Local {
            st.settle(s);
            drop(st);
            self.lease.wake.notify_one();
        }
    }

    fn wrote(&mut self, now: u64, records: usize) {
        let mut late = 0;
        for _ in 0..records {
            let Some((at, size)) = self.written.unwritten.pop_front() else {
                break;
            };
            late += usize::from(now > at.saturating_add(self.late_ns(size)));
        }
        if late > 0 {
            self.written.overtaken += late;
            self.written.until = now;
            // Forfeited at once, not at the next release: drip may stop or
            // its input end first, and the give-back must not hold them.
            let lease = Arc::clone(&self.lease);
            let mut st = lease.lock();
            if st.status.mode != Mode::Local {
                self.written.overtake(&mut st);
            }
        }
    }
}

impl Writes {
    /// Forfeit the slots of `st` that records written late overtook.
    fn overtake(&mut self, st: &mut GlobalLease) {
        while self.overtaken > 0 {
            match st.held.slots.front() {
                Some(s) if s.at < self.until => {}
                // No slot yet (a grant on its way): the count waits for it.
                None => break,
                Some(_) => {
                    self.overtaken = 0;
                    break;
                }
            }
            st.held.slots.pop_front();
            st.status.forfeited += 1;
            self.overtaken -= 1;
        }
    }

    /// `slot` was spent on a record now on its way to the writer.
    fn released(&mut self, slot: &HeldSlot) {
        if self.unwritten.len() == SIZES_KEPT {
            self.unwritten.pop_front();
        }
        self.unwritten.push_back((slot.at, slot.size));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schedule::{Limit, Unit};
    use std::time::Instant;

    /// Records of these sizes in bytes.
    fn sized(sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes.iter().map(|&n| vec![b'x'; n]).collect()
    }

    const MS: u64 = 1_000_000;

    /// A schedule under 1000 bytes a second whose lease holds `slots`
    /// (time, size) of an earlier grant than its last.
    pub(crate) fn byte_schedule(slots: &[(u64, u64)]) -> SharedSchedule {
        let mut leases = GlobalLease::new(Vec::new());
        leases.held.grants = 1;
        leases
            .held
            .slots
            .extend(slots.iter().map(|&(at, size)| HeldSlot {
                at,
                size: Weight::from(size),
                grant: 0,
                shared: 0,
                mark: crate::shared::protocol::Mark::default(),
            }));
        let lease = Arc::new(Lease::new(leases, Instant::now()));
        SharedSchedule {
            lease,
            local: Limits::new(&[Limit {
                rate: crate::rate::parse_byte_rate("1KB/s").unwrap(),
                burst: 1000,
                unit: Unit::Bytes,
            }]),
            per_second: f64::INFINITY,
            bytes_per_second: 1000.0,
            weighs_bytes: true,
            cost: None,
            budgets: Vec::new(),
            weight_rates: [1000.0, 0.0, 0.0, 0.0],
            last_now: 0,
            peers: 1,
            written: Writes::default(),
            in_flight: None,
            heaviest: Heaviest::none(),
        }
    }

    /// Beyond [`MOST_SETTLEMENTS`] waiting, the settlements of each life
    /// are folded into one: the sums, from the earliest `before`, no slot.
    #[test]
    fn settlements_beyond_the_most_kept_are_folded_by_life() {
        let mut lease = GlobalLease::new(Vec::new());
        for i in 0..MOST_SETTLEMENTS as u64 {
            lease.settle(Settlement {
                back: Weight::from(2),
                more: Weight::from(1),
                before: Weight::from(10 + i),
                slot: Weight::from(3),
                life: 1 + i % 2,
            });
        }
        assert_eq!(lease.settlements.len(), MOST_SETTLEMENTS);
        lease.settle(Settlement {
            back: Weight::from(5),
            before: Weight::from(1000),
            life: 1,
            ..Settlement::default()
        });
        let half = MOST_SETTLEMENTS as u64 / 2;
        assert_eq!(
            lease.settlements,
            [
                Settlement {
                    back: Weight::from(2 * half + 5),
                    more: Weight::from(half),
                    before: Weight::from(10),
                    slot: Weight::from(0),
                    life: 1
                },
                Settlement {
                    back: Weight::from(2 * half),
                    more: Weight::from(half),
                    before: Weight::from(11),
                    slot: Weight::from(0),
                    life: 2
                },
            ]
        );
    }

    /// `--settle`: a record released on a slot settles against that
    /// slot's size and the mark of its reservation; one forgotten (or
    /// never released on a slot) still has its underestimate charged,
    /// and gives nothing back.
    #[test]
    fn records_settle_against_their_slots_and_a_forgotten_one_is_still_charged() {
        use crate::cost::{parse_one_cost, Cost};
        let cost = Cost::with_budgets(
            vec![(None, parse_one_cost("e").unwrap())],
            &[None],
            None,
            b'\n',
        )
        .unwrap();
        let mut s = byte_schedule(&[(0, 100)]);
        s.cost = Some(cost);
        s.in_flight = Some(VecDeque::new());
        let mark = Mark {
            charged: Weight::from(40),
            life: 9,
        };
        s.lease.lock().held.slots[0].mark = mark;
        let record = b"{\"e\":90}\n";
        assert_eq!(s.release(0, 1, &mut std::iter::once(&record[..])), 1);
        s.settle(5 * MS, record, &[Some(30)]);
        let unknown = b"{\"e\":20}\n";
        s.settle(5 * MS, unknown, &[Some(5)]);
        s.settle(5 * MS, unknown, &[Some(25)]);
        let sent = std::mem::take(&mut s.lease.lock().settlements);
        assert_eq!(
            sent,
            [
                Settlement {
                    back: Weight::from(70),
                    more: Weight::from(0),
                    before: Weight::from(40),
                    slot: Weight::from(100),
                    life: 9
                },
                Settlement {
                    more: Weight::from(5),
                    ..Settlement::default()
                }
            ]
        );
    }

    /// `--settle` while pacing alone: a record that left on a shared slot
    /// before the outage still has its underestimate charged on the
    /// shared state (kept until it answers), as its overestimate is given
    /// back; only a record let go by the lone pace is not.
    #[test]
    fn a_record_of_a_shared_slot_settled_while_pacing_alone_is_still_charged() {
        use crate::cost::{parse_one_cost, Cost};
        let cost = Cost::with_budgets(
            vec![(None, parse_one_cost("e").unwrap())],
            &[None],
            None,
            b'\n',
        )
        .unwrap();
        let mut s = byte_schedule(&[(0, 100), (0, 100)]);
        s.cost = Some(cost);
        s.in_flight = Some(VecDeque::new());
        let mark = Mark {
            charged: Weight::from(40),
            life: 9,
        };
        s.lease.lock().held.slots[0].mark = mark;
        s.lease.lock().held.slots[1].mark = mark;
        let (over, under) = (&b"{\"e\":90,\"n\":1}\n"[..], &b"{\"e\":90,\"n\":2}\n"[..]);
        assert_eq!(s.release(0, 2, &mut [over, under].into_iter()), 2);
        s.lease.lock().status.mode = Mode::Local;
        s.settle(5 * MS, over, &[Some(30)]);
        s.settle(5 * MS, under, &[Some(130)]);
        let sent = std::mem::take(&mut s.lease.lock().settlements);
        let settled = |back: u64, more: u64| Settlement {
            back: back.into(),
            more: more.into(),
            before: Weight::from(40),
            slot: Weight::from(100),
            life: 9,
        };
        assert_eq!(sent, [settled(70, 0), settled(0, 30)]);
    }

    /// Under a byte limit a slot carries a record of at most the size it
    /// was reserved for; one too small for the record at the head is
    /// wasted (forfeited), and the records the lease does not cover want
    /// slots for their sizes.
    #[test]
    fn a_slot_carries_a_record_of_at_most_its_size() {
        let mut s = byte_schedule(&[(0, 100), (0, 50), (10 * MS, 80)]);
        assert!(s.weighs_bytes());
        assert_eq!(s.records_per_second(), f64::INFINITY);
        let sizes = [100usize, 60, 80, 30];
        assert_eq!(
            s.release(0, 4, &mut sized(&sizes).iter().map(Vec::as_slice)),
            1
        );
        {
            let st = s.lease.lock();
            // The 50-byte slot was too small for the 60-byte record.
            assert_eq!(st.status.forfeited, 1);
            assert_eq!(
                st.held
                    .slots
                    .iter()
                    .map(|s| (s.at, s.size))
                    .collect::<Vec<_>>(),
                [(10 * MS, Weight::from(80))]
            );
            // 60 has the 80-byte slot; 80 and 30 want theirs.
            assert_eq!(st.wanted, 2);
            assert_eq!(st.wanted_sizes, [80, 30]);
        }
        assert_eq!(s.next_due(&[b'x'; 60]), 10 * MS);
        // A record larger than the head slot (the queue changed) is due
        // at once: the next release wastes the slot and wants one for it.
        assert_eq!(s.next_due(&[b'x'; 90]), 0);
        assert_eq!(
            s.release(10 * MS, 2, &mut sized(&[90, 30]).iter().map(Vec::as_slice)),
            0
        );
        let st = s.lease.lock();
        assert_eq!(st.status.forfeited, 2);
        assert!(st.held.slots.is_empty());
        assert_eq!(
            (st.wanted, st.wanted_sizes.clone()),
            (2, vec![Weight::from(90), Weight::from(30)])
        );
    }

    /// A smaller record may take a larger slot: the bound still holds.
    #[test]
    fn a_smaller_record_takes_a_larger_slot() {
        let mut s = byte_schedule(&[(0, 500), (MS, 500)]);
        assert_eq!(
            s.release(MS, 2, &mut sized(&[10, 490]).iter().map(Vec::as_slice)),
            2
        );
        let st = s.lease.lock();
        assert_eq!((st.status.forfeited, st.wanted), (0, 0));
        assert!(st.wanted_sizes.is_empty());
    }

    /// A slot reserved for s bytes may be used as late as it takes at the
    /// byte rate (within 2 and 100 ms), no later.
    #[test]
    fn a_byte_slot_may_be_as_late_as_it_is_long() {
        // At 1000 bytes a second: 50 bytes take 50 ms, 1 byte 1 ms (2).
        let mut s = byte_schedule(&[(0, 50), (0, 1), (0, 1)]);
        assert_eq!(
            s.release(40 * MS, 1, &mut sized(&[50]).iter().map(Vec::as_slice)),
            1
        );
        assert_eq!(
            s.release(41 * MS, 1, &mut sized(&[1]).iter().map(Vec::as_slice)),
            0
        );
        assert_eq!(s.lease.lock().status.forfeited, 2);
        let mut s = byte_schedule(&[(0, 50)]);
        assert_eq!(
            s.release(51 * MS, 1, &mut sized(&[50]).iter().map(Vec::as_slice)),
            0
        );
        assert_eq!(s.lease.lock().status.forfeited, 1);
    }
    /// Case: a drip changing over after pacing alone (`local`) sends at
    /// most its lone pace (rate / peers) until the change-over ends, even
    /// with the lease's slots due at the shared rate; then the lease's.
    #[test]
    fn changing_over_holds_the_lone_pace_too() {
        let limit = Limit {
            rate: crate::rate::parse_rate("100/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        };
        let mut leases = GlobalLease::new(Vec::new());
        leases.held.grants = 1;
        leases.held.slots.extend((0..100).map(|i| HeldSlot {
            at: i * 10 * MS,
            size: Weight::from(1),
            grant: 1,
            shared: 0,
            mark: crate::shared::protocol::Mark::default(),
        }));
        leases.status.mode = Mode::Changing(500 * MS);
        let mut s = SharedSchedule {
            lease: Arc::new(Lease::new(leases, Instant::now())),
            // 4 peers: 25/s each.
            local: Limits::new(&[Limit {
                rate: crate::rate::parse_rate("25/s").unwrap(),
                ..limit
            }]),
            per_second: 100.0,
            bytes_per_second: f64::INFINITY,
            weighs_bytes: false,
            cost: None,
            budgets: Vec::new(),
            weight_rates: [0.0; WEIGHTS],
            last_now: 0,
            peers: 1,
            written: Writes::default(),
            in_flight: None,
            heaviest: Heaviest::none(),
        };
        let (mut before, mut after) = (0, 0);
        for ms in 0..1000 {
            let n = s.release(ms * MS, 1000, &mut std::iter::repeat(&b"x"[..]));
            if ms < 500 {
                before += n;
            } else {
                after += n;
            }
        }
        // 25/s for 0.5 s (the first at 0), then 100/s again.
        assert_eq!(before, 13);
        assert!((45..=51).contains(&after), "{after}");
    }

    /// A schedule under 200/s, burst 1 (an interval of 5 ms) whose lease
    /// holds slots at `slots` (ns), grants of ten in turn.
    pub(crate) fn records_schedule(slots: impl IntoIterator<Item = u64>) -> SharedSchedule {
        let limit = Limit {
            rate: crate::rate::parse_rate("200/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        };
        let mut leases = GlobalLease::new(Vec::new());
        leases
            .held
            .slots
            .extend(slots.into_iter().enumerate().map(|(j, at)| HeldSlot {
                at,
                size: Weight::from(1),
                grant: 1 + j as u64 / 10,
                shared: at as i64,
                mark: crate::shared::protocol::Mark::default(),
            }));
        leases.held.grants = leases.held.slots.back().map_or(0, |s| s.grant);
        SharedSchedule {
            lease: Arc::new(Lease::new(leases, Instant::now())),
            local: Limits::new(&[limit]),
            per_second: 200.0,
            bytes_per_second: f64::INFINITY,
            weighs_bytes: false,
            cost: None,
            budgets: Vec::new(),
            weight_rates: [0.0; WEIGHTS],
            last_now: 0,
            peers: 1,
            written: Writes::default(),
            in_flight: None,
            heaviest: Heaviest::none(),
        }
    }

    /// Case: a slot may be used up to half an interval late, no later (at
    /// 200/s, 2.5 ms): one used later would bunch with the next slot,
    /// another drip's, closer than the bound leaves room for.
    #[test]
    fn a_slot_is_used_at_most_half_an_interval_late() {
        let records = || std::iter::repeat(&b"x"[..]);
        let mut s = records_schedule([0, 5 * MS, 10 * MS]);
        assert_eq!(s.release(2_500_000, 3, &mut records()), 1);
        assert_eq!(s.release(7_600_000, 3, &mut records()), 0);
        assert_eq!(s.lease.lock().status.forfeited, 1);
        assert_eq!(s.release(10 * MS, 3, &mut records()), 1);
        // A byte limit beside, looser per slot (a 1-byte slot is 10 ms
        // long at 100 bytes/s), leaves the record limit's half interval.
        let mut s = records_schedule([0, 5 * MS, 10 * MS]);
        s.weighs_bytes = true;
        s.bytes_per_second = 100.0;
        assert_eq!(s.release(2_500_000, 3, &mut records()), 1);
        assert_eq!(s.release(7_600_000, 3, &mut records()), 0);
        assert_eq!(s.lease.lock().status.forfeited, 1);
    }

    /// Records that expire while their slots are held leave slots no
    /// record waits for: those at the end of the lease, of its last
    /// reservation, go back at once (not once late: by then another drip
    /// may have reserved after them, and the state would refuse them).
    /// Refused all the same (someone reserved since), they stay and serve
    /// the next records, and never go back again: late, they are
    /// forfeited.
    #[test]
    fn slots_of_expired_records_go_back_at_once_or_serve_the_next() {
        let records = || std::iter::repeat(&b"x"[..]);
        let mut s = records_schedule([0, 5 * MS, 10 * MS, 15 * MS]);
        s.lease.lock().held.last_seq = 7;
        assert_eq!(s.release(0, 4, &mut records()), 1);
        // Two of the three waiting expire: the slots at 10 and 15 ms go
        // back, the one at 5 ms is the record left's.
        s.expired(MS, 1, &mut records());
        let mut st = s.lease.lock();
        assert_eq!(
            st.held.slots.iter().map(|s| s.at).collect::<Vec<_>>(),
            [5 * MS]
        );
        assert_eq!(st.wanted, 0);
        let turn = st.turn(MS, None).unwrap();
        let back = Return {
            key: None,
            seq: 7,
            first_unused: 10 * MS as i64,
            size: Weight::from(1),
            count: 2,
        };
        assert_eq!(
            (turn.returns.as_slice(), turn.requests.len()),
            (&[back][..], 0)
        );
        st.refused(&turn.returns);
        assert_eq!(st.held.slots.len(), 3);
        assert_eq!(st.status.forfeited, 0);
        drop(st);
        // Two records come: one each for 5 and 10 ms; 15 ms goes late.
        assert_eq!(s.release(5 * MS, 1, &mut records()), 1);
        assert_eq!(s.release(10 * MS, 1, &mut records()), 1);
        assert_eq!(s.release(30 * MS, 1, &mut records()), 0);
        let mut st = s.lease.lock();
        assert_eq!((st.status.forfeited, st.wanted), (1, 1));
        assert!(st.held.returning.is_none());
        assert!(st.unused().is_empty());
    }

    /// A record that expires while its slot is being reserved leaves the
    /// slot unwanted when it comes: it goes back at once, and at exit if
    /// the keeper had no turn since.
    #[test]
    fn a_slot_that_comes_after_its_record_expired_goes_back() {
        let records = || std::iter::repeat(&b"x"[..]);
        let mut s = records_schedule([]);
        assert_eq!(s.release(0, 1, &mut records()), 0);
        let requests = s.lease.lock().turn(0, None).unwrap().requests;
        assert_eq!(requests.len(), 1);
        s.expired(MS, 0, &mut records());
        let reply = Reply {
            now: 0,
            fresh: false,
            grants: vec![crate::shared::protocol::Grant {
                seq: 3,
                slots: vec![5 * MS as i64],
            }],
            ..Reply::default()
        };
        let mut st = s.lease.lock();
        st.take(&requests, reply, 0);
        assert!(st.held.slots.is_empty());
        let back = Return {
            key: None,
            seq: 3,
            first_unused: 5 * MS as i64,
            size: Weight::from(1),
            count: 1,
        };
        assert_eq!(st.unused(), [back]);
    }

    /// A record written later than its slot may be late (the writer held
    /// up after the slot was spent) overtakes this drip's next slot due
    /// before the write's end: it is forfeited, so the next record waits
    /// for a slot after the late one instead of following it at once (at
    /// 200/s: a record written 7 ms late, then the next on its slot 2 ms
    /// late, then the one after on time would be three records in 3 ms).
    /// One slot a record late, none due after the write's end; a write on
    /// time leaves the slots after it, a burst's too.
    #[test]
    fn a_record_written_late_overtakes_the_next_slot() {
        let records = || std::iter::repeat(&b"x"[..]);
        let mut s = records_schedule([0, 5 * MS, 10 * MS, 15 * MS]);
        assert_eq!(s.release(100_000, 4, &mut records()), 1);
        s.wrote(7 * MS, 1);
        assert_eq!(s.release(7_100_000, 4, &mut records()), 0);
        assert_eq!(s.lease.lock().status.forfeited, 1);
        assert_eq!(s.next_due(b"x"), 10 * MS);
        assert_eq!(s.release(10 * MS, 4, &mut records()), 1);
        s.wrote(10 * MS + 50_000, 1);
        assert_eq!(s.release(15 * MS, 4, &mut records()), 1);
        assert_eq!(s.lease.lock().status.forfeited, 1);
        // One record late overtakes one slot, not every slot its write
        // outlasted; none due after the write's end.
        let mut s = records_schedule([0, 5 * MS, 10 * MS, 15 * MS]);
        assert_eq!(s.release(100_000, 4, &mut records()), 1);
        s.wrote(12 * MS, 1);
        assert_eq!(s.release(12 * MS, 4, &mut records()), 1);
        assert_eq!(s.lease.lock().status.forfeited, 1);
        let mut s = records_schedule([0, 5 * MS]);
        assert_eq!(s.release(0, 4, &mut records()), 1);
        s.wrote(4 * MS, 1);
        assert_eq!(s.release(5 * MS, 4, &mut records()), 1);
        assert_eq!(s.lease.lock().status.forfeited, 0);
        // Slots of a burst, due together, their records written one by one
        // on time: none overtaken.
        let mut s = records_schedule([0, 0, 0]);
        for k in 0..3u64 {
            assert_eq!(s.release(k * 100_000, 1, &mut records()), 1);
            s.wrote(k * 100_000 + 50_000, 1);
        }
        assert_eq!(s.lease.lock().status.forfeited, 0);
    }

    /// Slots overtaken by a late write are forfeited at the write, not at
    /// the next release: when drip stops or its input ends right after it,
    /// the give-back starts after them (at 200/s, slots 0/5/10/15 ms, the
    /// record of the 0 ms slot written at 7 ms: the 5 ms slot does not go
    /// back).
    #[test]
    fn overtaken_slots_are_not_given_back_at_exit() {
        let records = || std::iter::repeat(&b"x"[..]);
        let mut s = records_schedule([0, 5 * MS, 10 * MS, 15 * MS]);
        assert_eq!(s.release(100_000, 4, &mut records()), 1);
        s.wrote(7 * MS, 1);
        let back = s.lease.lock().unused();
        let first: Vec<i64> = back.iter().map(|r| r.first_unused).collect();
        assert_eq!(first, vec![10 * MS as i64], "the 5 ms slot was overtaken");
        assert_eq!(back[0].count, 2);
    }

    /// A late write while the lease holds no slot (a grant on its way):
    /// the slot due before the write's end that comes later is forfeited.
    #[test]
    fn a_late_write_overtakes_a_slot_granted_after_it() {
        let records = || std::iter::repeat(&b"x"[..]);
        let mut s = records_schedule([0]);
        assert_eq!(s.release(100_000, 4, &mut records()), 1);
        s.wrote(7 * MS, 1);
        {
            let mut st = s.lease.lock();
            let grant = st.held.grants + 1;
            st.held.slots.extend([5 * MS, 10 * MS].map(|at| HeldSlot {
                at,
                size: Weight::from(1),
                grant,
                shared: at as i64,
                mark: crate::shared::protocol::Mark::default(),
            }));
            st.held.grants = grant;
        }
        assert_eq!(
            s.release(5 * MS, 4, &mut records()),
            0,
            "the 5 ms slot was overtaken"
        );
        assert_eq!(s.lease.lock().status.forfeited, 1);
    }

    /// Keys whose slots are asked for only at their turns under a binding
    /// global limit ([`crate::keyed::KeySchedule`]): none until asked, then
    /// one at the time asked for.
    #[derive(Debug, Default)]
    struct TurnKeys {
        asked: std::collections::HashMap<u32, u64>,
        arrived: Vec<(u64, u32)>,
    }

    impl crate::keyed::KeySchedule for TurnKeys {
        fn allows(&mut self, now: u64, s: u32, _: &[u8]) -> bool {
            self.asked.get(&s).is_some_and(|&t| t <= now)
        }
        fn commit(&mut self, _: u64, s: u32, _: &[u8]) {
            self.asked.remove(&s);
        }
        fn first_slot(&mut self, _: u64, s: u32, _: &[u8]) -> crate::keyed::LeaseHead {
            self.asked
                .get(&s)
                .map_or(crate::keyed::LeaseHead::Empty, |&t| {
                    crate::keyed::LeaseHead::At(t)
                })
        }
        fn ask(&mut self, _: u64, s: u32, _: &[u8], want: crate::keyed::Want) {
            if want.records > 0 && !self.asked.contains_key(&s) {
                self.asked.insert(s, want.at);
                self.arrived.push((want.at, s));
            }
        }
        fn arrived(&mut self) -> Vec<(u64, u32)> {
            std::mem::take(&mut self.arrived)
        }
        fn forget(&mut self, s: u32) {
            self.asked.remove(&s);
        }
        fn next_poll(&self) -> Option<u64> {
            None
        }
        fn lead(&self) -> u64 {
            30 * MS
        }
    }

    /// Case: records of three keys (5/s each) under a shared global limit
    /// of 12/s, which binds (the keys ask for their slots at their
    /// turns), arrive 100 ms after the start: the shared state was slow to
    /// answer drip's hello. The global lease, empty and told nothing
    /// since its start, is told what waits and reserves, and the records
    /// flow; they waited for ever when its look (50 ms after its last
    /// release, at the start) had gone by before anything waited.
    #[test]
    fn keys_waiting_for_their_turns_tell_an_empty_global_lease() {
        use crate::bucket::{Overflow, Segment};
        use crate::keyed::{KeyConfig, Keyed};
        let config = KeyConfig {
            spec: crate::key::KeySpec::new(crate::key::parse_key("1").unwrap(), None),
            rate: crate::rate::parse_rate("5/s").unwrap(),
            burst: 2,
            rates: Default::default(),
            max_keys: 100,
            key_capacity: 100,
        };
        let mut keyed =
            Keyed::new(config, b'\n', 1000, None).with_shared(Box::new(TurnKeys::default()));
        let mut global = records_schedule([]);
        global.per_second = 12.0;
        let lease = Arc::clone(&global.lease);
        let mut global = crate::pace::Pace::new(crate::pace::Base::Shared(Box::new(global)));
        let interval = 1_000_000_000 / 12;
        let mut ledger = crate::ledger::Ledger::new(true);
        let mut outbox = Vec::new();
        let text: String = (1..=10)
            .flat_map(|i| ["a", "b", "c"].map(|k| format!("{k} {i}\n")))
            .collect();
        let seg = Segment::new(bytes::Bytes::from(text), b'\n');
        let start = 100 * MS;
        keyed.arrive(
            seg,
            Overflow::Block,
            &mut ledger,
            &mut crate::outflow::Outflow::at(start, &mut global, &mut outbox),
        );
        let (mut sent, mut next_slot) = (outbox.len(), 0);
        for now in (start..start + 3_000 * MS).step_by(MS as usize) {
            outbox.clear();
            keyed.release(&mut crate::outflow::Outflow::at(
                now,
                &mut global,
                &mut outbox,
            ));
            sent += outbox.iter().map(|s| s.records().count()).sum::<usize>();
            // The keeper: slots at 12/s for what the lease wants.
            let mut st = lease.lock();
            if st.wanted > 0 && st.held.slots.is_empty() {
                for _ in 0..st.wanted.min(3) {
                    next_slot = u64::max(next_slot + interval, now + 3 * MS);
                    st.held.slots.push_back(HeldSlot {
                        at: next_slot,
                        size: Weight::from(1),
                        grant: 1,
                        shared: 0,
                        mark: crate::shared::protocol::Mark::default(),
                    });
                }
                st.held.grants = 1;
            }
        }
        // 3 s at 12/s: some 30 records (fewer under the keys' 5/s turns).
        assert!(sent >= 20, "{sent} sent");
    }

    /// The bound the late allowance keeps ([`late_ns`]), on virtual time:
    /// three drips hold a 200/s, burst 1 schedule in turns of ten slots;
    /// each writer wakes for its next slot late (up to 2.5 ms one time in
    /// two, up to 6 ms the other), and each
    /// record it lets go is read up to half an interval after that. No
    /// window W of the reads holds more than `1 + ⌊W × rate⌋ + 1`.
    #[test]
    fn late_wakes_and_late_reads_add_at_most_one_record() {
        // With a byte limit beside the record limit or without.
        for bytes in [false, true] {
            late_wakes_and_late_reads_with(bytes);
        }
    }

    fn late_wakes_and_late_reads_with(bytes_beside: bool) {
        const INTERVAL: u64 = 5 * MS;
        let mut rng = fastrand::Rng::with_seed(19);
        let mut reads = Vec::new();
        let mut forfeited = 0;
        for drip in 0..3u64 {
            let slots = (0..3000u64)
                .filter(|k| k / 10 % 3 == drip)
                .map(|k| k * INTERVAL);
            let mut s = records_schedule(slots);
            s.weighs_bytes = bytes_beside;
            s.bytes_per_second = 100.0;
            loop {
                let Some(due) = s.lease.lock().held.slots.front().map(|s| s.at) else {
                    break;
                };
                let late = if rng.bool() { INTERVAL / 2 } else { 6 * MS };
                let now = due + rng.u64(0..=late);
                let n = s.release(now, 100, &mut std::iter::repeat(&b"x"[..]));
                reads.extend((0..n).map(|_| now + rng.u64(0..=INTERVAL / 2)));
            }
            forfeited += s.lease.lock().status.forfeited;
        }
        reads.sort_unstable();
        assert!(forfeited > 0 && reads.len() > 2000, "{forfeited}");
        for (i, &t) in reads.iter().enumerate() {
            for (k, &u) in reads[i + 1..].iter().enumerate().take(50) {
                // k + 2 records in u − t: at most 2 + ⌊(u − t) / interval⌋.
                assert!(
                    k as u64 * INTERVAL <= u - t,
                    "{} records in {} ns (bytes beside: {bytes_beside})",
                    k + 2,
                    u - t
                );
            }
        }
    }
}

/// The protocol on virtual time: leases, their keepers' turns and the
/// shared schedule ([`super::gcra::Gcra`]) with one clock for all.
#[cfg(test)]
mod protocol_tests {
    use super::*;
    use crate::shared::gcra::{Gcra, Step};
    use crate::shared::protocol::{ahead, chunk, Grant};

    const MS: u64 = 1_000_000;

    fn meters(interval_ms: u64, burst: i64) -> Vec<Meter> {
        let interval = (interval_ms * MS) as i64;
        vec![Meter::Records(Step {
            interval,
            tolerance: interval * (burst - 1),
        })]
    }

    /// One keeper turn of `lease` at `now` against `state`: give back,
    /// then reserve (as the keeper does, the slots mapped one to one).
    fn serve(lease: &mut GlobalLease, state: &mut Gcra, now: u64) {
        let Ok(turn) = lease.turn(now, None) else {
            return;
        };
        let meters = lease.meters.clone();
        for r in &turn.returns {
            if !state.give_back_sized(&meters, r.seq, r.first_unused, r.size) {
                lease.refused(std::slice::from_ref(r));
            }
        }
        for request in &turn.requests {
            let slots = state.reserve_sized(&meters, now as i64, request.want, &[0u64; 0], HORIZON);
            let reply = Reply {
                now: now as i64,
                fresh: false,
                grants: vec![Grant {
                    seq: state.seq,
                    slots: slots.iter().map(|&t| t - now as i64).collect(),
                }],
                ..Reply::default()
            };
            lease.take(std::slice::from_ref(request), reply, now);
            lease.status.reservations += 1;
        }
    }

    /// Records waiting in `lease` at `now`, wanting slots.
    fn want(lease: &mut GlobalLease, records: usize) {
        let covered = lease.held.slots.len();
        lease.note_wanted(records + covered, None);
    }

    /// Case: a drip stopping gives back only the unused tail of its last
    /// reservation. Drip a reserved, b after it, a again; a stops holding
    /// a slot of its first reservation and its whole second one. Giving
    /// back from that first slot would pull the schedule back onto b's
    /// slots (granted twice); only a's last reservation goes back, and a
    /// third drip's slots follow b's.
    #[test]
    fn a_give_back_returns_only_the_last_reservations_unused_tail() {
        let meters = meters(10, 1);
        let mut state = Gcra::default();
        let (mut a, mut b, mut c) = (
            GlobalLease::new(meters.clone()),
            GlobalLease::new(meters.clone()),
            GlobalLease::new(meters.clone()),
        );
        want(&mut a, 5);
        serve(&mut a, &mut state, 0);
        want(&mut b, 5);
        serve(&mut b, &mut state, 0);
        let mut used: Vec<u64> = Vec::new();
        // a sends its slots at 0, 10, 20, 30 ms and reserves again.
        for t in [0, 10, 20, 30] {
            assert_eq!(a.held.slots.pop_front().map(|s| s.at), Some(t * MS));
            used.push(t * MS);
        }
        want(&mut a, 5);
        serve(&mut a, &mut state, 30 * MS);
        assert_eq!(a.held.slots.len(), 6, "{:?}", a.held.slots);
        // a stops at 35 ms: its slots at 40 ms and from 100 ms unused.
        for r in a.unused() {
            state.give_back_sized(&meters, r.seq, r.first_unused, r.size);
        }
        used.extend(b.held.slots.drain(..).map(|s| s.at));
        want(&mut c, 5);
        serve(&mut c, &mut state, 35 * MS);
        used.extend(c.held.slots.iter().map(|s| s.at));
        used.sort_unstable();
        for pair in used.windows(2) {
            assert!(pair[1] >= pair[0] + 10 * MS, "{used:?}");
        }
        // The 40 ms slot is lost, the rest went back: c starts at 100 ms.
        assert_eq!(c.held.slots[0].at, 100 * MS);
    }

    /// Case: a slot reserved for a record that expired goes back when no
    /// record took it in time. At 2/s, burst 5: records 1 to 5 leave at
    /// once, 6 reserves the slot at 500 ms and expires (100 ms); 7 comes
    /// at 1.5 s, 8 at 1.55 s, 9 at 1.8 s. With the unused slot given
    /// back, 9's slot is at 1.8 s, as without sharing; spent, it would be
    /// at 2 s, after 9 expired.
    #[test]
    fn a_slot_whose_record_expired_goes_back() {
        let meters = meters(500, 5);
        let mut state = Gcra::default();
        let mut lease = GlobalLease::new(meters.clone());
        want(&mut lease, 6);
        // One slot a reservation at 2/s (a chunk is 50 ms).
        for _ in 0..6 {
            serve(&mut lease, &mut state, 0);
        }
        let at: Vec<u64> = lease.held.slots.iter().map(|s| s.at).collect();
        assert_eq!(at, [0, 0, 0, 0, 0, 500 * MS]);
        lease.held.slots.drain(..5);
        // 6 expired at 100 ms; 7 arrives at 1.5 s: the 500 ms slot is late.
        let mut due = Vec::new();
        for t in [1500, 1550, 1800] {
            let now = t * MS;
            lease.drop_late(now, |_| 100 * MS);
            want(&mut lease, 1);
            serve(&mut lease, &mut state, now);
            due.push(lease.held.slots.pop_front().map(|s| s.at / MS));
        }
        assert_eq!(due, [Some(1500), Some(1550), Some(1800)]);
        assert_eq!(lease.status.forfeited, 0);
    }

    /// Records of `lease` expired: `waiting` are left (as
    /// [`SharedSchedule`]'s `expired` tells the lease).
    fn expire(lease: &mut GlobalLease, waiting: usize) {
        lease.send_back_tail(lease.held.slots.len().saturating_sub(waiting));
        lease.note_wanted(waiting, None);
    }

    /// Case: two drips share 1/s, burst 5 (the GCRA table of throttled and
    /// redis-cell), every record waiting at most 150 ms. a is given six
    /// records at 0, 7 at 3 s; b `x` at 500 ms, 8 at 3.1 s, 9 at 3.4 s.
    /// Together they get what GCRA lets the records through: 1 to 5 at 0;
    /// 6 and `x` expire (the slot after the burst, at 1 s, is too far),
    /// each slot going back as its record expires, so neither is spent; 7,
    /// 8 and 9 as they come. Sent back once late, both went back refused
    /// (the other drip had reserved since), and 9's slot was at 4 s. When
    /// b reserves before a's record expires, a's slot cannot go back: it
    /// serves a's next record.
    #[test]
    fn the_slot_of_a_record_expired_goes_back_at_once_or_serves_the_next() {
        let fresh = || GlobalLease::new(meters(1000, 5));
        let mut state = Gcra::default();
        let (mut a, mut b) = (fresh(), fresh());
        want(&mut a, 6);
        for _ in 0..6 {
            serve(&mut a, &mut state, 0);
        }
        let at: Vec<u64> = a.held.slots.drain(..5).map(|s| s.at).collect();
        assert_eq!(at, [0; 5]);
        expire(&mut a, 0);
        serve(&mut a, &mut state, 150 * MS);
        want(&mut b, 1);
        serve(&mut b, &mut state, 500 * MS);
        assert_eq!(b.held.slots[0].at, 1_000 * MS, "the slot a gave back");
        expire(&mut b, 0);
        serve(&mut b, &mut state, 650 * MS);
        let mut due = Vec::new();
        for (first, t) in [(true, 3_000), (false, 3_100), (false, 3_400)] {
            let lease = if first { &mut a } else { &mut b };
            want(lease, 1);
            serve(lease, &mut state, t * MS);
            due.push(lease.held.slots.pop_front().map(|s| s.at / MS));
        }
        assert_eq!(due, [Some(3_000), Some(3_100), Some(3_400)]);
        assert_eq!((a.status.forfeited, b.status.forfeited), (0, 0));

        // b reserves (at 2 s) before a's 6 expires: refused, a's slot at
        // 1 s stays, and serves a's next record, come at 900 ms.
        let mut state = Gcra::default();
        let (mut a, mut b) = (fresh(), fresh());
        want(&mut a, 6);
        for _ in 0..6 {
            serve(&mut a, &mut state, 0);
        }
        a.held.slots.drain(..5);
        want(&mut b, 1);
        serve(&mut b, &mut state, 100 * MS);
        expire(&mut a, 0);
        serve(&mut a, &mut state, 150 * MS);
        assert!(a.held.returning.is_none());
        assert_eq!(
            a.held.slots.iter().map(|s| s.at).collect::<Vec<_>>(),
            [1_000 * MS]
        );
        assert!(a.unused().is_empty(), "can never go back");
        a.note_wanted(1, None);
        assert_eq!((a.wanted, a.status.forfeited), (0, 0));
    }

    /// The most of `times` (sorted) in any window of `w` ns.
    fn most_in(times: &[u64], w: u64) -> u64 {
        (0..times.len())
            .map(|i| times[i..].iter().take_while(|&&t| t < times[i] + w).count() as u64)
            .max()
            .unwrap_or(0)
    }

    /// Case: a state lost while in use (a flush, a restart) lets through,
    /// beyond the bound, one burst and the slots the drips held reserved
    /// and unused at that moment: each drip's lease is at most what it
    /// held when it last asked (its slots within [`ahead`] of then, at
    /// most a burst and that much of the rate) and one chunk ([`chunk`]),
    /// 75 ms of the rate on a fast link. More than one burst: busy drips
    /// reserve ahead of one another. Three busy drips at 200/s, burst 1,
    /// the state flushed at random moments, on virtual time.
    #[test]
    fn a_lost_state_lets_through_one_burst_and_the_slots_held() {
        let meters = meters(5, 1);
        let (rate, burst, drips) = (200, 1, 3);
        let held = drips * (rate * (ahead(0) + chunk(0)) as u64 / 1_000_000_000 + burst + 1);
        let mut most_over = 0;
        let mut rng = fastrand::Rng::with_seed(19);
        for _ in 0..20 {
            let flush = rng.u64(1000..2000) * MS;
            let mut state = Gcra::default();
            let mut leases: Vec<GlobalLease> = (0..drips)
                .map(|_| GlobalLease::new(meters.clone()))
                .collect();
            let mut sent = Vec::new();
            for ms in 0..3000 {
                let now = ms * MS;
                if now == flush {
                    state = Gcra::default();
                }
                for lease in &mut leases {
                    while lease.held.slots.front().is_some_and(|s| s.at <= now) {
                        sent.push(lease.held.slots.pop_front().unwrap().at);
                    }
                    want(lease, 1000);
                    serve(lease, &mut state, now);
                }
            }
            sent.sort_unstable();
            for w in [50 * MS, 200 * MS, 1000 * MS] {
                let bound = burst + rate * w / 1000 / MS + 1;
                let over = most_in(&sent, w).saturating_sub(bound);
                assert!(over <= burst + held, "{over} over in {w} ns");
                most_over = most_over.max(over);
            }
        }
        // Not one burst only: the slots held pass too.
        assert!(most_over > burst, "{most_over}");
    }
}
