//! The pacer: when may the next record leave?
//!
//! A pure function of time: nanoseconds in, a number of records out, no I/O
//! and no clock of its own, so tests drive it on virtual time.
//!
//! The algorithm is the Generic Cell Rate Algorithm (GCRA, ITU-T I.371, the
//! "virtual scheduling" form) with exact rational arithmetic. It keeps the
//! *theoretical arrival time* (TAT) of the next record on a strict schedule,
//! `emission interval T = period / count` apart. A record may leave at time
//! `t` when `t ≥ TAT − τ`, where the burst tolerance `τ = (burst − 1) · T`;
//! each departure advances TAT by `T`. Hence no window of length `W` ever
//! holds more than `burst + W / T` scheduled departures.
//!
//! The schedule is absolute: TAT is `anchor + k · T`, computed from the
//! anchor rather than accumulated, so rounding never drifts. When a departure
//! is late by no more than the *slack* (the OS woke us a little late), the
//! schedule is kept and the next record is still due at its original time.
//! When it is later than that (the input went idle, stdout or the process
//! stalled), the schedule restarts from now: `burst` records may leave at
//! once, never a catch-up burst.
//!
//! So one wake-up releases at most `burst + ⌊rate × slack⌋` records: the
//! burst, and those whose slots a wake-up late by up to the slack has
//! passed. Below 500/s the slack is shorter than an interval and that is
//! just `burst`; from 500/s up the slack is 2 ms, which covers
//! `⌊rate × 2 ms⌋` slots (2 more at 1000/s).

use crate::rate::Rate;

/// The least slack: lateness up to 2 ms always keeps the schedule.
pub const MIN_SLACK_NS: u64 = 2_000_000;
/// The most slack: lateness beyond 5 ms always restarts the schedule.
pub const MAX_SLACK_NS: u64 = 5_000_000;

/// The slack for `rate`: half the emission interval, within 2 to 5 ms.
///
/// Forgiving lateness keeps the long-run rate exact on a busy machine; it
/// lets at most `rate × slack` extra records into a window of real time,
/// which the bounds keep under half a record whenever the slack exceeds
/// 2 ms (so a 1 s window holds at most `rate × 1.002 + burst`).
pub fn slack_for(rate: Rate) -> u64 {
    match rate {
        Rate::Unlimited => MIN_SLACK_NS,
        Rate::Limited { count, period_ns } => {
            let half_interval = period_ns / count / 2;
            u64::try_from(half_interval)
                .unwrap_or(u64::MAX)
                .clamp(MIN_SLACK_NS, MAX_SLACK_NS)
        }
    }
}

/// GCRA pacer on an exact rational schedule. Times are nanoseconds from any
/// fixed origin (drip uses its start).
///
/// # Examples
/// ```
/// use drip::testing::Pacer;
/// use drip::testing::parse_rate;
/// // 10/s with a burst of 2: two at once, then one every 100 ms.
/// let mut pacer = Pacer::new(parse_rate("10/s").unwrap(), 2, 2_000_000);
/// assert_eq!(pacer.release(0, 5), 2);
/// assert_eq!(pacer.next_due(), 100_000_000);
/// assert_eq!(pacer.release(100_000_000, 5), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Pacer {
    /// `None` when unlimited.
    limit: Option<Ratio>,
    burst: u128,
    slack_ns: u64,
    /// The schedule's origin; `None` before the first departure.
    anchor: Option<u64>,
    /// Departures scheduled since `anchor`: TAT = anchor + k·period/count.
    k: u128,
    /// The emission interval in whole ns, when `period / count` is one
    /// (most rates people write: 1000/s, 5/s, 100/min): then
    /// [`Pacer::take_one`] needs no division.
    interval_ns: Option<u64>,
}

/// Where a schedule stands after [`Pacer::take_one`], with the two times a
/// caller keeping many schedules (one per key) caches beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTaken {
    /// The new position.
    pub position: Position,
    /// When (ns) its next one-unit record may leave: exactly
    /// [`Pacer::next_due`]; a record may leave at `now` iff `now ≥ due`.
    pub due: u64,
    /// When (ns) it rests: exactly [`Pacer::rests_at`].
    pub rests_at: u64,
}

/// Where one schedule stands: its anchor and the slots taken since it.
///
/// Many schedules with the same rate and burst (one per key) share one
/// [`Pacer`] for their parameters and keep only this (32 bytes):
/// [`Pacer::restore`] it, ask or commit, then [`Pacer::position`] it back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    anchor: Option<u64>,
    k: u128,
}

impl Position {
    /// A schedule whose theoretical arrival time is `now`, no slot taken
    /// since: where a schedule of the records after one leaving at `now`
    /// starts.
    pub fn at(now: u64) -> Position {
        Position {
            anchor: Some(now),
            k: 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Ratio {
    count: u128,
    period_ns: u128,
}

impl Pacer {
    /// A pacer for `rate` allowing `burst` (≥ 1) records back to back and
    /// forgiving lateness up to `slack_ns`.
    ///
    /// # Panics
    /// If `burst` is zero (the command line rejects it earlier).
    pub fn new(rate: Rate, burst: u64, slack_ns: u64) -> Pacer {
        assert!(burst >= 1, "burst must be at least 1");
        let limit = match rate {
            Rate::Unlimited => None,
            Rate::Limited { count, period_ns } => Some(Ratio { count, period_ns }),
        };
        let interval_ns = limit.and_then(|l| {
            let whole = l.period_ns % l.count == 0;
            whole
                .then(|| u64::try_from(l.period_ns / l.count).ok())
                .flatten()
        });
        Pacer {
            limit,
            burst: u128::from(burst),
            slack_ns,
            anchor: None,
            k: 0,
            interval_ns,
        }
    }

    /// Take one slot at `now` for a schedule standing at `position` that
    /// allows a departure then (`now ≥` its due time), as [`Pacer::restore`],
    /// [`Pacer::commit`] of one unit, [`Pacer::next_due`] and
    /// [`Pacer::rests_at`] would, and return the result. With a whole-ns
    /// interval this is a few multiplications (the per-key hot path);
    /// otherwise it takes that long way. Leaves the pacer restored to the
    /// new position.
    pub fn take_one(&mut self, position: Position, now: u64) -> SlotTaken {
        if let Some(taken) = self
            .take_one_narrow(position, now)
            .or_else(|| self.take_one_whole(position, now))
        {
            self.restore(taken.position);
            return taken;
        }
        self.restore(position);
        self.commit(now, 1);
        let position = self.position_now();
        let due = self.next_due();
        SlotTaken {
            position,
            due,
            rests_at: self.rests_at(position),
        }
    }

    /// [`Pacer::take_one_whole`] in 64 bits, where every time fits (u128
    /// arithmetic costs a call per multiplication): the same result, or
    /// `None` when a step would overflow (then the wide way decides).
    #[inline]
    fn take_one_narrow(&self, position: Position, now: u64) -> Option<SlotTaken> {
        let t = self.interval_ns?;
        let burst = u64::try_from(self.burst).ok()?;
        let (anchor, k) = match position.anchor {
            Some(anchor) => {
                let k = u64::try_from(position.k).ok()?;
                let tat = anchor.checked_add(k.checked_mul(t)?)?;
                if u128::from(now) > u128::from(tat) + u128::from(self.slack_ns) {
                    (now, 0)
                } else {
                    (anchor, k)
                }
            }
            None => (now, 0),
        };
        let mut k = k + 1;
        let mut anchor = anchor;
        if k > burst {
            anchor = anchor.checked_add((k - burst).checked_mul(t)?)?;
            k = burst;
        }
        let due = if k + 1 > burst {
            anchor.checked_add(t)?
        } else {
            anchor
        };
        let rests_at = anchor
            .checked_add(k.checked_mul(t)?)?
            .saturating_add(self.slack_ns)
            .saturating_add(1);
        Some(SlotTaken {
            position: Position {
                anchor: Some(anchor),
                k: u128::from(k),
            },
            due,
            rests_at,
        })
    }

    /// [`Pacer::take_one`] for a whole-ns interval `T`: TAT = anchor + k·T
    /// exactly, so the anchor may move by single slots instead of whole
    /// periods (the times derived are the same). `None` when the interval
    /// is not whole or a time would not fit in u64.
    fn take_one_whole(&self, position: Position, now: u64) -> Option<SlotTaken> {
        let t = u128::from(self.interval_ns?);
        let (anchor, k) = match position.anchor {
            Some(anchor) => {
                let tat = u128::from(anchor).checked_add(position.k.checked_mul(t)?)?;
                if u128::from(now) > tat.saturating_add(u128::from(self.slack_ns)) {
                    (u128::from(now), 0)
                } else {
                    (u128::from(anchor), position.k)
                }
            }
            None => (u128::from(now), 0),
        };
        let mut k = k + 1;
        let mut anchor = anchor;
        if k > self.burst {
            anchor = anchor.checked_add((k - self.burst).checked_mul(t)?)?;
            k = self.burst;
        }
        // Next due: slot k + 1 − burst (≤ 1 here), never before the anchor.
        let due = if k + 1 > self.burst {
            anchor + t
        } else {
            anchor
        };
        let rests_at = anchor
            .checked_add(k * t)?
            .saturating_add(u128::from(self.slack_ns))
            .saturating_add(1);
        Some(SlotTaken {
            position: Position {
                anchor: Some(u64::try_from(anchor).ok()?),
                k,
            },
            due: u64::try_from(due).ok()?,
            rests_at: u64::try_from(rests_at).unwrap_or(u64::MAX),
        })
    }

    /// Where its schedule stands now (see `Position`).
    pub fn position_now(&self) -> Position {
        Position {
            anchor: self.anchor,
            k: self.k,
        }
    }

    /// Put its schedule where `position` says (one taken from a pacer of
    /// the same rate, burst and slack, or the default: nothing sent yet).
    pub fn restore(&mut self, position: Position) {
        self.anchor = position.anchor;
        self.k = position.k;
    }

    /// From when (ns) a schedule that stands at `position` is *rested*: it
    /// has recovered its full burst and passed the slack, so it would
    /// restart from any later `now` exactly as a fresh one does, and
    /// forgetting it changes nothing. 0 for a schedule never used.
    pub fn rests_at(&mut self, position: Position) -> u64 {
        self.restore(position);
        if position.anchor.is_none() {
            return 0;
        }
        let tat = self.next_due_for(u64::try_from(self.burst).unwrap_or(u64::MAX));
        tat.saturating_add(self.slack_ns).saturating_add(1)
    }

    /// Where a schedule stands after one departure at `now` from a rested
    /// one (or one never used): anchored at `now`, one slot taken. Exactly
    /// what [`Pacer::commit`] of one unit makes of it, without arithmetic.
    pub fn first_departure(now: u64) -> Position {
        Position {
            anchor: Some(now),
            k: 1,
        }
    }

    /// Put the schedule where it stands right after a departure at `at`
    /// that spent its whole burst: no credit is left, the budget is 0 at
    /// `at` and grows by one unit every emission interval from there (a
    /// record limit's next record may leave at `at + T`, a byte limit's
    /// record of `s` bytes at `at + min(s, burst) · T`). A schedule that
    /// then idles past its slack restarts with its full burst as always.
    /// Used when the limits change while drip runs: the new schedule counts
    /// from the last departure, so neither the old rate's unused credit nor
    /// a catch-up burst carries over.
    pub fn spent_at(&mut self, at: u64) {
        self.anchor = Some(at);
        self.k = self.burst;
    }

    /// When the latest slot taken was scheduled (ns): the theoretical
    /// departure of the last record, never before the anchor; `None` when
    /// nothing was sent or the pacer is unlimited.
    pub fn last_slot(&self) -> Option<u64> {
        let (limit, anchor) = (self.limit?, self.anchor?);
        let k = i128::try_from(self.k).unwrap_or(i128::MAX);
        let offset = Self::slot_offset(limit, k - 1).max(0);
        u64::try_from(i128::from(anchor).saturating_add(offset)).ok()
    }

    /// How late (ns) a departure may be and keep the schedule.
    pub fn slack_ns(&self) -> u64 {
        self.slack_ns
    }

    /// Whether the pacer limits anything at all.
    pub fn is_unlimited(&self) -> bool {
        self.limit.is_none()
    }

    /// Units per second allowed (infinite when unlimited), for display and
    /// coalescing only; pacing never uses it.
    pub fn per_second(&self) -> f64 {
        self.limit
            .map_or(f64::INFINITY, |l| l.count as f64 * 1e9 / l.period_ns as f64)
    }

    /// Offset from the anchor of scheduled slot `j` (may be negative inside
    /// the burst allowance), rounded up, in ns. Saturates rather than wraps
    /// (the command line keeps rates far inside the range anyway).
    fn slot_offset(limit: Ratio, j: i128) -> i128 {
        let period = i128::try_from(limit.period_ns).unwrap_or(i128::MAX);
        let count = i128::try_from(limit.count).unwrap_or(i128::MAX);
        let product = j.saturating_mul(period);
        let floor = product.div_euclid(count);
        if product.rem_euclid(count) == 0 {
            floor
        } else {
            floor + 1
        }
    }

    /// The earliest time (ns) at which the next record may leave; `0` when it
    /// may leave at any time (nothing sent yet, or unlimited).
    pub fn next_due(&self) -> u64 {
        self.next_due_for(1)
    }

    /// The earliest time (ns) at which a record costing `cost` units (1 for
    /// a record limit, its size in bytes for a byte limit, the number read
    /// from it for a cost limit) may leave; `0` when it may leave at any
    /// time (a record costing nothing always may).
    pub fn next_due_for(&self, cost: u64) -> u64 {
        let (Some(limit), Some(anchor)) = (self.limit, self.anchor) else {
            return 0;
        };
        if cost == 0 {
            return 0;
        }
        let k = i128::try_from(self.k).unwrap_or(i128::MAX);
        let slot = k.saturating_add(self.counted(cost) as i128) - self.burst_i128();
        let due = i128::from(anchor).saturating_add(Self::slot_offset(limit, slot).max(0));
        u64::try_from(due).unwrap_or(u64::MAX)
    }

    /// When the `n`-th one-unit record from now (0: the next) may leave
    /// (ns, at least `now`), each one before it leaving as soon as allowed
    /// and taking its slot: the schedule as it stands at `now` (restarted
    /// when rested), slot `k + n + 1 − burst` from its anchor. Departures at
    /// their due times never restart it, so this is exact for such a line;
    /// a later one only puts the rest later. `0`-cost: unlimited, `now`.
    pub fn nth_due(&self, now: u64, n: u64) -> u64 {
        let Some(limit) = self.limit else {
            return now;
        };
        let (anchor, k) = self.position(limit, now);
        let k = i128::try_from(k).unwrap_or(i128::MAX);
        let slot = k
            .saturating_add(i128::from(n))
            .saturating_add(1)
            .saturating_sub(self.burst_i128());
        let due = i128::from(anchor).saturating_add(Self::slot_offset(limit, slot).max(0));
        u64::try_from(due).unwrap_or(u64::MAX).max(now)
    }

    /// The part of `cost` that must fit the burst tolerance: a record larger
    /// than the burst may leave once a full burst is saved up, and then puts
    /// the schedule in debt for the rest (as a token bucket with debt).
    fn counted(&self, cost: u64) -> u128 {
        u128::from(cost).min(self.burst)
    }

    /// The schedule's anchor and the slots taken since it, as they stand at
    /// `now`: restarted from `now` when idle or stalled past the slack.
    fn position(&self, limit: Ratio, now: u64) -> (u64, u128) {
        match self.anchor {
            Some(anchor) => {
                let k = i128::try_from(self.k).unwrap_or(i128::MAX);
                let tat = i128::from(anchor).saturating_add(Self::slot_offset(limit, k));
                if i128::from(now) > tat.saturating_add(i128::from(self.slack_ns)) {
                    // Idle, or stalled past the slack: restart from now.
                    (now, 0)
                } else {
                    (anchor, self.k)
                }
            }
            None => (now, 0),
        }
    }

    /// Slots up to which the schedule allows departures at `now`, counting
    /// from the anchor: slot j may leave when `anchor + (j − (burst − 1))·T
    /// ≤ now`. Returns (anchor, slots taken, one past the last allowed).
    fn allowance(&self, limit: Ratio, now: u64) -> (u64, u128, u128) {
        let (anchor, k) = self.position(limit, now);
        // j ≤ floor((now - anchor)·count / period) + burst - 1.
        let elapsed = u128::from(now.saturating_sub(anchor));
        (
            anchor,
            k,
            (elapsed.saturating_mul(limit.count) / limit.period_ns).saturating_add(self.burst),
        )
    }

    /// Whether a record costing `cost` units may leave at `now` (no change).
    pub fn allows(&self, now: u64, cost: u64) -> bool {
        self.fits(self.budget(now), cost)
    }

    /// How many units the schedule lets go at `now` (no change): a record
    /// costing `cost` may leave while `min(cost, burst)` is within it, and
    /// then spends all of `cost` (the budget may go below zero: debt).
    /// Unlimited: `i128::MAX`.
    pub fn budget(&self, now: u64) -> i128 {
        let Some(limit) = self.limit else {
            return i128::MAX;
        };
        let (_, k, end) = self.allowance(limit, now);
        let end = i128::try_from(end).unwrap_or(i128::MAX);
        end.saturating_sub(i128::try_from(k).unwrap_or(i128::MAX))
    }

    /// Whether a record costing `cost` fits a `budget` from
    /// [`Pacer::budget`]. A record costing nothing always fits, even while
    /// the schedule is in debt.
    pub fn fits(&self, budget: i128, cost: u64) -> bool {
        self.limit.is_none() || cost == 0 || self.counted(cost) as i128 <= budget
    }

    /// How many of `available` one-unit records may leave at `now` (no
    /// change).
    pub fn allowed(&self, now: u64, available: u64) -> u64 {
        let Some(limit) = self.limit else {
            return available;
        };
        let (_, k, end) = self.allowance(limit, now);
        let n = end.saturating_sub(k).min(u128::from(available));
        u64::try_from(n).unwrap_or(available)
    }

    /// Take `units` slots at `now` for records this schedule allowed.
    ///
    /// `now` must not go backwards between calls.
    pub fn commit(&mut self, now: u64, units: u64) {
        let Some(limit) = self.limit else {
            return;
        };
        if units == 0 {
            return;
        }
        let (anchor, k) = self.position(limit, now);
        self.anchor = Some(anchor);
        self.k = k.saturating_add(u128::from(units));
        self.renormalize(limit);
    }

    /// Release records at time `now` (ns): returns how many of `available`
    /// queued one-unit records may leave now, and counts them as sent.
    ///
    /// `now` must not go backwards between calls.
    pub fn release(&mut self, now: u64, available: u64) -> u64 {
        let n = self.allowed(now, available);
        self.commit(now, n);
        n
    }

    /// Where a schedule standing at `position` stands after `units` more
    /// slots taken at `now` ([`Pacer::commit`] on a copy).
    pub fn advanced(&self, position: Position, now: u64, units: u64) -> Position {
        let mut copy = self.clone();
        copy.restore(position);
        copy.commit(now, units);
        copy.position_now()
    }

    /// The theoretical arrival time (ns) of a schedule standing at
    /// `position`: its anchor plus the slots taken (0: never used).
    pub fn tat_of(&self, position: Position) -> u64 {
        let (Some(limit), Some(anchor)) = (self.limit, position.anchor) else {
            return 0;
        };
        let k = i128::try_from(position.k).unwrap_or(i128::MAX);
        let tat = i128::from(anchor).saturating_add(Self::slot_offset(limit, k));
        u64::try_from(tat.max(0)).unwrap_or(u64::MAX)
    }

    /// Give back `units` slots at `now` (a record charged more than it
    /// spent), but never so many that the theoretical arrival time goes
    /// below `floor`'s ([`Pacer::tat_of`]): the slots taken since by the
    /// records that left after it stay taken. A schedule rested at `now`
    /// has nothing to give back.
    pub fn refund(&mut self, now: u64, units: u64, floor: Position) {
        let Some(limit) = self.limit else {
            return;
        };
        let (anchor, k) = self.position(limit, now);
        let floor_tat = u128::from(self.tat_of(floor).saturating_sub(anchor));
        // The fewest slots from the anchor whose arrival time reaches the
        // floor: ⌈floor · count / period⌉.
        let least = floor_tat
            .saturating_mul(limit.count)
            .div_ceil(limit.period_ns)
            .min(k);
        self.anchor = Some(anchor);
        self.k = k.saturating_sub(u128::from(units)).max(least);
    }

    /// The burst as a signed number (it is at most `u64::MAX`).
    fn burst_i128(&self) -> i128 {
        i128::try_from(self.burst).unwrap_or(i128::MAX)
    }

    /// Move the anchor forward by whole periods so `k` stays small; exact,
    /// because whole periods are whole nanoseconds. `k` stays ≥ `burst`, so
    /// the schedule allows nothing more before the anchor; in debt (a record
    /// larger than the burst) the anchor may pass `now`, and the budget then
    /// stays at or below zero until the debt is paid.
    fn renormalize(&mut self, limit: Ratio) {
        let periods = self.k.saturating_sub(self.burst) / limit.count;
        if periods > 0 {
            if let Some(anchor) = self.anchor.as_mut() {
                let shift = periods.saturating_mul(limit.period_ns);
                let moved = u128::from(*anchor).saturating_add(shift);
                if let Ok(new_anchor) = u64::try_from(moved) {
                    *anchor = new_anchor;
                    self.k -= periods * limit.count;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_rate;

    const MS: u64 = 1_000_000;

    fn pacer(rate: &str, burst: u64) -> Pacer {
        Pacer::new(parse_rate(rate).unwrap(), burst, 2 * MS)
    }

    /// The long way of [`Pacer::take_one`]: restore, commit one, read back.
    fn take_one_slowly(p: &mut Pacer, position: Position, now: u64) -> SlotTaken {
        p.restore(position);
        p.commit(now, 1);
        let position = p.position_now();
        let due = p.next_due();
        SlotTaken {
            position,
            due,
            rests_at: p.rests_at(position),
        }
    }

    proptest::proptest! {
        /// The whole-interval shortcut gives the times the long way gives,
        /// departure after departure, whatever the arrivals: late past the
        /// slack (a restart), within it, or exactly due; and a record is
        /// allowed exactly when `now ≥ due`.
        #[test]
        fn take_one_matches_the_long_way(
            count in 1u64..5000,
            per in proptest::sample::select(vec![1u64, 60, 3600]),
            burst in 1u64..6,
            slack in proptest::sample::select(vec![2 * MS, 5 * MS]),
            gaps in proptest::collection::vec(0u64..40 * MS, 1..60),
        ) {
            let rate = Rate::Limited { count: u128::from(count), period_ns: u128::from(per) * 1_000_000_000 };
            let mut fast = Pacer::new(rate, burst, slack);
            let mut slow = fast.clone();
            let (mut pf, mut ps) = (Position::default(), Position::default());
            let mut due = 0;
            let mut now = 0;
            for gap in gaps {
                now += gap;
                slow.restore(ps);
                proptest::prop_assert_eq!(slow.allows(now, 1), now >= due);
                let now = now.max(due);
                let a = fast.take_one(pf, now);
                let b = take_one_slowly(&mut slow, ps, now);
                proptest::prop_assert_eq!((a.due, a.rests_at), (b.due, b.rests_at));
                (pf, ps, due) = (a.position, b.position, a.due);
            }
        }
    }

    proptest::proptest! {
        /// The 64-bit shortcut gives exactly what the 128-bit one gives
        /// (position included), from any position, and gives way to it
        /// only near the end of u64's range.
        #[test]
        fn take_one_in_64_bits_matches_128(
            interval in proptest::sample::select(vec![1u64, 73, 1_000_000, 1 << 40]),
            burst in 1u64..6,
            k in 0u64..6,
            anchor in proptest::option::of(proptest::sample::select(vec![
                0u64, 5, 1 << 40, u64::MAX / 2, u64::MAX - (1 << 41), u64::MAX - 3,
            ])),
            ahead in 0u64..10_000_000,
            late in proptest::bool::ANY,
        ) {
            let rate = Rate::Limited { count: 1, period_ns: u128::from(interval) };
            let p = Pacer::new(rate, burst, 2 * MS);
            let position = Position { anchor, k: u128::from(k.min(burst)) };
            let base = anchor.unwrap_or(0);
            let now = if late { base.saturating_add(ahead) } else { base.saturating_sub(ahead) };
            let narrow = p.take_one_narrow(position, now);
            let wide = p.take_one_whole(position, now);
            if let Some(n) = narrow {
                proptest::prop_assert_eq!(Some(n), wide);
            }
            if base < u64::MAX / 4 && now < u64::MAX / 4 {
                proptest::prop_assert!(narrow.is_some());
            }
        }
    }

    proptest::proptest! {
        /// The n-th departure from now is where a line of records, each
        /// released when due, puts it: whatever the schedule's state.
        #[test]
        fn the_nth_departure_is_where_a_line_puts_it(
            count in 1u64..50,
            per in proptest::sample::select(vec![1u64, 3, 60]),
            burst in 1u64..6,
            before in proptest::collection::vec(0u64..400 * MS, 0..8),
            gap in 0u64..2000 * MS,
            n in 0u64..20,
        ) {
            let rate = Rate::Limited { count: u128::from(count), period_ns: u128::from(per) * 1_000_000_000 };
            let mut p = Pacer::new(rate, burst, 2 * MS);
            let mut now = 0;
            for g in before {
                now = (now + g).max(p.next_due());
                p.commit(now, 1);
            }
            let now = now + gap;
            let predicted = p.nth_due(now, n);
            let mut line = p.clone();
            let mut t = now;
            for _ in 0..=n {
                t = t.max(line.next_due());
                proptest::prop_assert_eq!(line.release(t, 1), 1);
            }
            proptest::prop_assert_eq!(predicted, t);
        }
    }

    /// Drive a pacer with an always-full queue, waking exactly when due
    /// (plus `late` ns), and return the departure times of `n` records.
    fn departures(p: &mut Pacer, n: usize, late: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut now = 0;
        while out.len() < n {
            let k = p.release(now, (n - out.len()) as u64);
            out.extend(std::iter::repeat_n(now, k as usize));
            now = now.max(p.next_due()) + late;
            if k == 0 && p.next_due() <= now - late {
                panic!("pacer released nothing although due");
            }
        }
        out
    }

    #[test]
    fn first_record_leaves_at_once_then_strict_spacing() {
        let mut p = pacer("10/s", 1);
        assert_eq!(p.next_due(), 0);
        assert_eq!(
            departures(&mut p, 4, 0),
            vec![0, 100 * MS, 200 * MS, 300 * MS]
        );
    }

    #[test]
    fn never_early() {
        let mut p = pacer("10/s", 1);
        assert_eq!(p.release(0, 5), 1);
        assert_eq!(p.release(100 * MS - 1, 5), 0);
        assert_eq!(p.next_due(), 100 * MS);
        assert_eq!(p.release(100 * MS, 5), 1);
    }

    #[test]
    fn fractional_intervals_do_not_drift() {
        // 3 per 1 ns... use 3/s: T = 333_333_333.33 ns.
        let mut p = pacer("3/s", 1);
        let times = departures(&mut p, 3001, 0);
        // Record 3000 is due exactly 1000 s after the first.
        assert_eq!(times[3000], 1000 * 1_000_000_000);
        assert_eq!(times[1], 333_333_334); // rounded up, never early
        assert_eq!(times[2], 666_666_667);
    }

    #[test]
    fn small_lateness_keeps_the_absolute_schedule() {
        // Waking 0.5 ms late every time must not slow the long-run rate.
        let mut p = pacer("100/s", 1);
        let times = departures(&mut p, 1001, MS / 2);
        // Each departure is at most 0.5 ms after its slot; slot 1000 is 10 s.
        assert!(times[1000] <= 10_000 * MS + MS / 2, "{}", times[1000]);
        assert!(times[1000] >= 10_000 * MS);
    }

    #[test]
    fn stall_restarts_schedule_without_catch_up() {
        let mut p = pacer("10/s", 1);
        assert_eq!(p.release(0, 10), 1);
        // Stalled for 5 s: only one record may leave now, the next 100 ms later.
        assert_eq!(p.release(5_000 * MS, 10), 1);
        assert_eq!(p.release(5_000 * MS + 1, 10), 0);
        assert_eq!(p.next_due(), 5_100 * MS);
    }

    #[test]
    fn window_bound_holds_through_stalls() {
        // Records always waiting; now and then a wake-up is 3 to 8 ms late,
        // past the slack. No window of W holds more than
        // burst + (W + slack) · rate.
        for (rate, burst) in [("1000/s", 1), ("100/s", 1), ("1000/s", 3), ("37/s", 2)] {
            let mut p = pacer(rate, burst);
            let per_s = parse_rate(rate).unwrap().per_second();
            let mut times = Vec::new();
            let mut now = 0;
            for wake in 0u64..5000 {
                let n = p.release(now, 10);
                times.extend(std::iter::repeat_n(now, n as usize));
                let late = if wake % 211 == 5 {
                    (3 + wake / 211 % 6) * MS
                } else {
                    0
                };
                now = now.max(p.next_due()) + late;
            }
            for window in [1_000 * MS, 100 * MS] {
                let bound = burst as f64 + (window + 2 * MS) as f64 / 1e9 * per_s;
                for (i, &start) in times.iter().enumerate() {
                    let n = times[i..]
                        .iter()
                        .take_while(|&&t| t < start + window)
                        .count();
                    assert!(
                        n as f64 <= bound,
                        "{rate} burst {burst}: {n} in {window} ns"
                    );
                }
            }
        }
    }

    #[test]
    fn stall_with_burst_allows_only_burst() {
        let mut p = pacer("10/s", 3);
        assert_eq!(p.release(0, 10), 3);
        assert_eq!(p.next_due(), 100 * MS);
        assert_eq!(p.release(100 * MS, 10), 1);
        assert_eq!(p.release(60_000 * MS, 10), 3);
        assert_eq!(p.release(60_000 * MS, 10), 0);
    }

    #[test]
    fn burst_refills_at_the_rate() {
        let mut p = pacer("10/s", 5);
        assert_eq!(p.release(0, 100), 5);
        // After 250 ms, two more tokens have accrued (at 100 and 200 ms).
        assert_eq!(p.release(250 * MS, 100), 2);
    }

    #[test]
    fn lateness_within_slack_releases_due_records_together() {
        let mut p = pacer("1000/s", 1);
        assert_eq!(p.release(0, 100), 1);
        // Woken 1.5 ms late: slots at 1 ms has passed, so one record is due
        // (slot at 2 ms is not yet).
        assert_eq!(p.release(MS + MS / 2, 100), 1);
        assert_eq!(p.next_due(), 2 * MS);
        // Woken at 3.9 ms (within slack of the 2 ms slot): slots 2 and 3 ms.
        assert_eq!(p.release(3 * MS + 900_000, 100), 2);
    }

    #[test]
    fn window_bound_holds() {
        // No 1 s window holds more than burst + rate records.
        for (rate, burst) in [("10/s", 1), ("100/s", 4), ("7/3s", 2)] {
            let mut p = pacer(rate, burst);
            let times = departures(&mut p, 400, 37_000);
            let per_s = parse_rate(rate).unwrap().per_second();
            let bound = burst as f64 + per_s * (1.0 + 0.002);
            for (i, &start) in times.iter().enumerate() {
                let n = times[i..]
                    .iter()
                    .take_while(|&&t| t < start + 1_000 * MS)
                    .count();
                assert!(n as f64 <= bound, "{rate} burst {burst}: {n} in a window");
            }
        }
    }

    #[test]
    fn slack_is_half_the_interval_within_bounds() {
        assert_eq!(slack_for(parse_rate("10/s").unwrap()), MAX_SLACK_NS);
        assert_eq!(slack_for(parse_rate("160/s").unwrap()), 3_125_000);
        assert_eq!(slack_for(parse_rate("1000/s").unwrap()), MIN_SLACK_NS);
        assert_eq!(slack_for(Rate::Unlimited), MIN_SLACK_NS);
    }

    #[test]
    fn unlimited_releases_everything() {
        let mut p = Pacer::new(Rate::Unlimited, 1, 0);
        assert!(p.is_unlimited());
        assert_eq!(p.release(0, 12345), 12345);
        assert_eq!(p.next_due(), 0);
    }

    #[test]
    fn high_rates_release_due_records_in_batches() {
        let mut p = pacer("1000000/s", 1);
        assert_eq!(p.release(0, 1_000_000), 1);
        // 60 µs later, 60 more slots have come due.
        assert_eq!(p.release(60_000, 1_000_000), 60);
        assert_eq!(p.next_due(), 61_000);
    }

    /// The most records one wake-up releases together, for `rate` and
    /// `burst`, under drip's own slack: `burst + ⌊rate × slack⌋`. Below
    /// 500/s the slack is shorter than an interval, so that is `burst`; from
    /// 500/s up the slack is 2 ms, which covers one interval or more.
    #[test]
    fn back_to_back_is_burst_plus_the_records_the_slack_covers() {
        for (rate, burst, expected) in [
            ("10/s", 1, 1),
            ("10/s", 4, 4),
            ("250/s", 1, 1),
            ("400/s", 1, 1),
            ("500/s", 1, 2),
            ("1000/s", 1, 3),
            ("1000/s", 3, 5),
            ("2500/s", 1, 6),
            ("20000/s", 1, 41),
            ("1000000/s", 1, 2001),
        ] {
            let r = parse_rate(rate).unwrap();
            let slack = slack_for(r);
            let Rate::Limited { count, period_ns } = r else {
                unreachable!()
            };
            // Every rate here has a whole-nanosecond interval.
            assert_eq!(period_ns % count, 0);
            let interval = u64::try_from(period_ns / count).unwrap();
            let covered = u64::try_from(u128::from(slack) * count / period_ns).unwrap();
            assert_eq!(burst + covered, expected, "{rate} burst {burst}");

            // Always waking as late as still keeps the schedule (the slack
            // past the next record's slot) reaches the bound every time.
            let mut p = Pacer::new(r, burst, slack);
            let mut most = p.release(0, u64::MAX);
            for _ in 0..200 {
                let now = p.next_due() + (burst - 1) * interval + slack;
                let n = p.release(now, u64::MAX);
                assert_eq!(n, expected, "{rate} burst {burst} at {now}");
                most = most.max(n);
            }
            assert_eq!(most, expected);

            // Any other lateness, within the slack or past it, stays under it.
            let mut p = Pacer::new(r, burst, slack);
            let mut seed = 0x2545_f491_u64;
            let mut now = 0;
            for _ in 0..5000 {
                let n = p.release(now, u64::MAX);
                assert!(n <= expected, "{rate} burst {burst}: {n} at once");
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let late = (seed >> 33) % (3 * slack + interval);
                now = now.max(p.next_due()) + late;
            }
        }
    }

    #[test]
    fn extreme_rates_and_bursts_neither_wrap_nor_release_early() {
        // The command line caps periods at 100 years and counts at u64::MAX;
        // the pacer itself saturates, whatever it is given.
        let longest = crate::rate::LONGEST.as_nanos();
        let max = u128::from(u64::MAX);
        for (count, period_ns) in [(1, longest), (max, 1), (max, longest), (1, u128::MAX)] {
            for burst in [1, 2, u64::MAX] {
                let rate = Rate::Limited { count, period_ns };
                let mut p = Pacer::new(rate, burst, 2 * MS);
                let first = p.release(0, u64::MAX);
                assert!(first >= burst, "{count}/{period_ns} b{burst}");
                let due = p.next_due();
                if count == 1 {
                    // One record per 100 years or more: nothing more for ages.
                    assert!(
                        due >= 99 * 365 * 86_400 * 1_000_000_000,
                        "{period_ns} b{burst}: {due}"
                    );
                    assert_eq!(p.release(due - 1, u64::MAX), 0);
                }
                // At the largest time there is: a restart (or, when the next
                // slot lies beyond it, nothing), no wrap.
                let late = p.release(u64::MAX - 1, u64::MAX);
                assert_eq!(
                    late >= 1,
                    due < u64::MAX / 2,
                    "{count}/{period_ns} b{burst}"
                );
                let _ = p.next_due();
            }
        }
    }

    #[test]
    fn renormalization_keeps_exact_times() {
        let mut p = pacer("3/s", 1);
        let times = departures(&mut p, 10, 0);
        assert_eq!(times[3], 1_000_000_000);
        assert_eq!(times[4], 1_333_333_334);
        assert_eq!(times[9], 3_000_000_000);
    }
}
