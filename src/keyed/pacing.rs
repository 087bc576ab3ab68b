//! Pacing each key: the key limits (`KeyLimits`: one [`Pacer`]'s
//! parameters for each row of the rate table, `--key-rates`, and one for
//! the keys no row matches, `--key-rate RATE`; each slot's row beside the
//! slots) and where each key's schedule stands, as
//! [`Pacing`]: this drip's own (each slot's [`Position`]), or shared with
//! other drips (the [`KeySchedule`](super::KeySchedule) of `shared.rs`).
//! Taking a key's slot as one of its records leaves.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use crate::pacer::{slack_for, Pacer, Position};
use crate::rate::Rate;

use super::rates::KeyRates;

use super::shared::SharedSchedules;
use super::table::Slot;
use super::Keyed;

/// One key limit: a row's, or the default's.
#[derive(Debug, Clone)]
pub(super) struct KeyLimit {
    /// Its rate (unlimited: the keys no row matches, without `--key-rate`).
    pub(super) rate: Rate,
    /// Its burst.
    pub(super) burst: u64,
    /// One key's schedule, restored to a key's position when asked.
    pub(super) pacer: Pacer,
    /// How long after one departure from a rested schedule it rests again.
    pub(super) rest_after_first: u64,
    /// How long after one departure from a rested schedule the next is due.
    pub(super) due_after_first: u64,
    /// The spacing of one key's records (ns).
    pub(super) key_gap: u64,
}

impl KeyLimit {
    /// Each key at `rate` with `burst` (an unlimited `rate`: no limit of
    /// its own; its schedule rests right after each departure).
    ///
    /// # Panics
    /// If `burst` is 0 (the command line refuses it).
    pub(super) fn new(rate: Rate, burst: u64) -> KeyLimit {
        let mut pacer = Pacer::new(rate, burst, slack_for(rate));
        let rest_after_first = pacer.rests_at(Pacer::first_departure(0));
        pacer.restore(Pacer::first_departure(0));
        let due_after_first = pacer.next_due();
        let key_gap = (1e9 / pacer.per_second()) as u64;
        KeyLimit {
            rate,
            burst,
            pacer,
            rest_after_first,
            due_after_first,
            key_gap,
        }
    }
}

/// The key limits: each row's of the rate table, then the default's
/// (last), and each slot's among them.
#[derive(Debug)]
pub(super) struct KeyLimits {
    /// Each row's limit, by row number, then the default's.
    pub(super) by_row: Vec<KeyLimit>,
    /// Each slot's limit, its number in `by_row`, by slot number (a side
    /// vector: the slot's cache line is full).
    pub(super) of_slot: Vec<u32>,
    /// The rate table its rows are.
    pub(super) rates: KeyRates,
}

impl KeyLimits {
    /// The limits of `rates`' rows, and `default` for the keys no row
    /// matches; room for `max_keys` slots.
    pub(super) fn new(rates: KeyRates, default: (Rate, u64), max_keys: usize) -> KeyLimits {
        KeyLimits {
            by_row: by_row(&rates, default),
            of_slot: super::table::reserved(rates.rows().len() as u32, max_keys),
            rates,
        }
    }

    /// Key slot `s`'s limit's number in `by_row`: without a table, the
    /// default's (0) without reading `of_slot`, which would cost a cache
    /// miss a record in a random order of keys.
    #[inline(always)]
    pub(super) fn index(&self, s: u32) -> usize {
        if self.rates.is_empty() {
            0
        } else {
            self.of_slot[s as usize] as usize
        }
    }

    /// Key slot `s`'s limit.
    #[inline(always)]
    pub(super) fn of(&self, s: u32) -> &KeyLimit {
        &self.by_row[self.index(s)]
    }

    /// The keys no row matches: their limit.
    pub(super) fn default(&self) -> &KeyLimit {
        self.by_row.last().expect("the default is always there")
    }

    /// Key slot `s`'s row: its number in the table, `None` for the default.
    pub(super) fn row(&self, s: u32) -> Option<usize> {
        let i = self.of_slot[s as usize] as usize;
        (i < self.rates.rows().len()).then_some(i)
    }

    /// Key `key` was remembered in slot `s` (`added`: a new slot).
    pub(super) fn remember(&mut self, s: u32, added: bool, key: &[u8]) {
        let row = self.row_of(key);
        if added {
            self.of_slot.push(row);
        } else {
            self.of_slot[s as usize] = row;
        }
    }

    /// The limit `key` takes, by its number in `by_row`.
    fn row_of(&self, key: &[u8]) -> u32 {
        (self.rates.find(key)).unwrap_or(self.rates.rows().len() as u32)
    }

    /// The largest slack of the limits (ns).
    pub(super) fn slack_ns(&self) -> u64 {
        self.by_row
            .iter()
            .map(|l| l.pacer.slack_ns())
            .max()
            .unwrap_or(0)
    }
}

/// The limits of `rates`' rows, then `default`'s.
fn by_row(rates: &KeyRates, default: (Rate, u64)) -> Vec<KeyLimit> {
    let rows = rates.rows().iter().map(|r| KeyLimit::new(r.rate, r.burst));
    rows.chain([KeyLimit::new(default.0, default.1)]).collect()
}

/// Where each key's schedule stands.
#[derive(Debug)]
pub(super) enum Pacing {
    /// This drip's alone: each slot's [`Position`] under the key limit, by
    /// slot number, apart from the slot's one cache line (a `fresh` slot's
    /// is in the slot itself).
    Local(Vec<Position>),
    /// Shared with other drips (`--share`): each key's lease.
    Shared(SharedSchedules),
}

impl Pacing {
    /// Whether the keys' schedules are shared.
    #[inline(always)]
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Pacing::Shared(_))
    }

    /// The shared schedules (only where [`Pacing::is_shared`]).
    pub(super) fn shared(&self) -> &SharedSchedules {
        match self {
            Pacing::Shared(shared) => shared,
            Pacing::Local(_) => unreachable!("the keys' schedules are not shared"),
        }
    }

    /// The shared schedules, to change (only where [`Pacing::is_shared`]).
    pub(super) fn shared_mut(&mut self) -> &mut SharedSchedules {
        match self {
            Pacing::Shared(shared) => shared,
            Pacing::Local(_) => unreachable!("the keys' schedules are not shared"),
        }
    }

    /// A slot was added to the table: it starts rested.
    pub(super) fn add_slot(&mut self) {
        if let Pacing::Local(positions) = self {
            positions.push(Position::default());
        }
    }

    /// Key `s` is forgotten.
    pub(super) fn forget(&mut self, s: u32) {
        match self {
            Pacing::Local(positions) => positions[s as usize] = Position::default(),
            Pacing::Shared(shared) => shared.schedule.forget(s),
        }
    }

    /// Start fetching key `s`'s position, which a record leaving soon will
    /// read (local schedules).
    #[inline]
    pub(super) fn prefetch(&self, s: u32) {
        if let Pacing::Local(positions) = self {
            crate::sys::prefetch(&positions[s as usize]);
        }
    }
}

/// Where key `slot` (number `s`) stands under `limit`: its position in
/// `positions`, or, when the slot is `fresh`, the one departure from rested
/// that it notes.
#[inline]
pub(super) fn position(limit: &KeyLimit, positions: &[Position], slot: &Slot, s: u32) -> Position {
    if slot.fresh {
        Pacer::first_departure(slot.rests_at - limit.rest_after_first)
    } else {
        positions[s as usize]
    }
}

impl Keyed {
    /// Where key `s`'s schedule stands (local schedules).
    pub(super) fn position(&self, s: u32) -> Position {
        match &self.pacing {
            Pacing::Local(positions) => position(
                self.limits.of(s),
                positions,
                &self.table.slots[s as usize],
                s,
            ),
            Pacing::Shared(_) => Position::default(),
        }
    }

    /// Key `s`, whose schedule allows it, takes its slot at `now`.
    #[inline(always)]
    pub(super) fn take_slot(&mut self, s: u32, now: u64) {
        let Pacing::Local(positions) = &mut self.pacing else {
            return self.take_shared_slot(s, now);
        };
        let slot = &mut self.table.slots[s as usize];
        let limits = &mut self.limits;
        let i = limits.index(s);
        let limit = &mut limits.by_row[i];
        if now >= slot.rests_at {
            // A rested schedule restarts from now: no arithmetic needed,
            // and its position is noted in the slot (`fresh`), not written.
            slot.due = now.saturating_add(limit.due_after_first);
            slot.rests_at = now.saturating_add(limit.rest_after_first);
            slot.fresh = true;
            slot.sent += 1;
        } else {
            take_busy_slot(limit, positions, slot, s, now);
        }
    }

    /// Limit the keys no row matches to `rate` with `burst` from `now`
    /// (ns) on (`drip ctl … key-rate`), as [`Keyed::replace_rates`] does.
    /// Local keys only: shared keys' limits are the state's.
    ///
    /// # Panics
    /// If `burst` is 0 (the command refuses it).
    pub fn replace_limit(&mut self, now: u64, rate: Rate, burst: u64) {
        let mut by_row = self.limits.by_row.clone();
        *by_row.last_mut().expect("the default") = KeyLimit::new(rate, burst);
        let of_slot = self.limits.of_slot.clone();
        self.relimit(now, by_row, of_slot);
    }

    /// Put the rate table `rates` in force from `now` (ns) on (`drip ctl
    /// … key-rates`, SIGHUP), the keys no row matches keeping the default:
    /// each remembered key takes its row again, and a key whose limit
    /// changed counts from its latest slot with no credit saved
    /// ([`Pacer::spent_at`]); a rested key stays rested (its position is
    /// cleared: its next departure restarts it). A key whose limit is the
    /// same (its row's rate and burst) keeps its place as it is. A key on
    /// a timer waits for its slot under the new limit; a key already due
    /// (in line) keeps its turn (at most one record each leaves as the old
    /// limit said). Local keys only.
    pub fn replace_rates(&mut self, now: u64, rates: KeyRates) {
        let default = self.limits.default();
        let by_row = by_row(&rates, (default.rate, default.burst));
        let old = std::mem::replace(&mut self.limits.rates, rates);
        let of_slot = (0..self.table.slots.len() as u32)
            .map(|s| match s {
                super::NO_KEY => self.limits.rates.rows().len() as u32,
                s => self
                    .limits
                    .row_of(self.table.slots[s as usize].key.as_bytes()),
            })
            .collect();
        drop(old);
        self.relimit(now, by_row, of_slot);
    }

    /// Each key `s` from its limit now to `by_row[of_slot[s]]` from `now`
    /// on (see [`Keyed::replace_rates`]).
    fn relimit(&mut self, now: u64, mut by_row: Vec<KeyLimit>, of_slot: Vec<u32>) {
        if let Pacing::Local(positions) = &mut self.pacing {
            for (s, slot) in self.table.slots.iter_mut().enumerate() {
                let old = &mut self.limits.by_row[self.limits.of_slot[s] as usize];
                let new = &mut by_row[of_slot[s] as usize];
                if slot.rests_at <= now {
                    positions[s] = Position::default();
                    slot.fresh = false;
                    continue;
                }
                let at = position(old, positions, slot, s as u32);
                if (old.rate, old.burst) == (new.rate, new.burst) {
                    // The same limit: its place as it stands.
                    positions[s] = at;
                    slot.fresh = false;
                    continue;
                }
                old.pacer.restore(at);
                let last = old.pacer.last_slot().unwrap_or(now).min(now);
                let pacer = &mut new.pacer;
                pacer.spent_at(last);
                let at = pacer.position_now();
                positions[s] = at;
                slot.due = pacer.next_due();
                slot.rests_at = pacer.rests_at(at);
                slot.fresh = false;
            }
        }
        if !self.pacing.is_shared() {
            // A key on a timer waits for its slot under its new limit.
            let slots = &self.table.slots;
            self.line.timers.retime(|s| slots[s as usize].due);
        }
        for limit in &mut by_row {
            limit.pacer.restore(Pacer::first_departure(0));
        }
        self.limits.by_row = by_row;
        self.limits.of_slot = of_slot;
        self.refusal.slack_ns = self.limits.slack_ns();
    }
}

/// [`Keyed::take_slot`] for a key not rested: its schedule's arithmetic.
/// Kept out of line, so the rested case stays small enough to inline.
#[inline(never)]
fn take_busy_slot(
    limit: &mut KeyLimit,
    positions: &mut [Position],
    slot: &mut Slot,
    s: u32,
    now: u64,
) {
    let at = position(limit, positions, slot, s);
    let taken = limit.pacer.take_one(at, now);
    positions[s as usize] = taken.position;
    (slot.due, slot.rests_at) = (taken.due, taken.rests_at);
    slot.fresh = false;
    slot.sent += 1;
}
