//! Pacing each key: the key limit (`--key-rate`: one [`Pacer`]'s
//! parameters for every key) and where each key's schedule stands, as
//! [`Pacing`]: this drip's own (each slot's [`Position`]), or shared with
//! other drips (the [`KeySchedule`](super::KeySchedule) of `shared.rs`).
//! Taking a key's slot as one of its records leaves.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use crate::pacer::{slack_for, Pacer, Position};
use crate::rate::Rate;

use super::shared::SharedSchedules;
use super::table::Slot;
use super::Keyed;

/// The key limit, the same for every key.
#[derive(Debug)]
pub(super) struct KeyLimit {
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
    /// Each key at `rate` with `burst`.
    ///
    /// # Panics
    /// If `rate` is unlimited or `burst` is 0 (the command line refuses
    /// them).
    pub(super) fn new(rate: Rate, burst: u64) -> KeyLimit {
        assert!(rate != Rate::Unlimited);
        let mut pacer = Pacer::new(rate, burst, slack_for(rate));
        let rest_after_first = pacer.rests_at(Pacer::first_departure(0));
        pacer.restore(Pacer::first_departure(0));
        let due_after_first = pacer.next_due();
        let key_gap = (1e9 / pacer.per_second()) as u64;
        KeyLimit {
            pacer,
            rest_after_first,
            due_after_first,
            key_gap,
        }
    }
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
            Pacing::Local(positions) => {
                position(&self.limit, positions, &self.table.slots[s as usize], s)
            }
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
        if now >= slot.rests_at {
            // A rested schedule restarts from now: no arithmetic needed,
            // and its position is noted in the slot (`fresh`), not written.
            slot.due = now.saturating_add(self.limit.due_after_first);
            slot.rests_at = now.saturating_add(self.limit.rest_after_first);
            slot.fresh = true;
            slot.sent += 1;
        } else {
            take_busy_slot(&mut self.limit, positions, slot, s, now);
        }
    }

    /// Limit each key to `rate` with `burst` from `now` (ns) on (`drip ctl
    /// … key-rate`): each key's schedule counts from its latest slot with
    /// no credit saved ([`Pacer::spent_at`]), a rested key stays rested
    /// (its position is cleared: its next departure restarts it, and a
    /// `fresh` slot's one departure is told by the limit it was taken
    /// under, which is going). A key already in line or on a timer keeps
    /// that turn (at most one record each leaves as the old limit said).
    /// Local keys only: shared keys' limits are the state's.
    ///
    /// # Panics
    /// If `rate` is unlimited or `burst` is 0 (the command refuses them).
    pub fn replace_limit(&mut self, now: u64, rate: Rate, burst: u64) {
        let mut new = KeyLimit::new(rate, burst);
        if let Pacing::Local(positions) = &mut self.pacing {
            for (s, slot) in self.table.slots.iter_mut().enumerate() {
                if slot.rests_at <= now {
                    positions[s] = Position::default();
                    slot.fresh = false;
                    continue;
                }
                let at = position(&self.limit, positions, slot, s as u32);
                self.limit.pacer.restore(at);
                let last = self.limit.pacer.last_slot().unwrap_or(now).min(now);
                let pacer = &mut new.pacer;
                pacer.spent_at(last);
                let at = pacer.position_now();
                positions[s] = at;
                slot.due = pacer.next_due();
                slot.rests_at = pacer.rests_at(at);
                slot.fresh = false;
            }
        }
        new.pacer.restore(Pacer::first_departure(0));
        self.limit = new;
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
