//! The waiting room: where records wait between their arrival and their
//! departure, in one of its forms. [`Admission`](crate::admission::Admission)
//! holds one and hands it each arrival and each wake-up; it need not know
//! which form it holds.
//!
//! - [`Fifo`] (`fifo.rs`): one bounded line in input order
//!   ([`Bucket`](crate::bucket::Bucket)), held to `--max-wait` by the
//!   forecast of its departures;
//! - [`Keyed`] (`crate::keyed`): limits per key (`--key`), each key's own
//!   queue and round-robin turns between them.
//!
//! A new kind of waiting room is a variant of [`Waiting`], its own file
//! beside `fifo.rs` (or its own module, as `keyed`), and one arm in each
//! method below (in `each!` and `gauge!` for the methods every form has
//! alike): what a record arriving does, what leaves when, what
//! expires, what is left at the end, and the figures (the gauge) the
//! reader, the writer and the monitor read.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

mod fifo;

pub use fifo::Fifo;

use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::keyed::Keyed;
use crate::ledger::Ledger;
use crate::outflow::Outflow;
use crate::pace::Pace;

/// The waiting records, in one of the rooms' forms (see the module's notes).
// One per drip, made once and never moved after: a form held in a box
// would only be a pointer more to follow at every call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Waiting {
    /// One line in input order.
    Fifo(Fifo),
    /// Limits per key.
    Keyed(Keyed),
}

/// `$call` on the room's form, bound to `$room`: the Fifo itself (`each`),
/// or its bucket (`gauge`, for the figures), or the keys.
macro_rules! each {
    ($waiting:expr, $room:ident => $call:expr) => {
        match $waiting {
            Waiting::Fifo($room) => $call,
            Waiting::Keyed($room) => $call,
        }
    };
}

macro_rules! gauge {
    ($waiting:expr, $room:ident => $call:expr) => {
        match $waiting {
            Waiting::Fifo(fifo) => {
                let $room = fifo.bucket();
                $call
            }
            Waiting::Keyed($room) => $call,
        }
    };
}

impl Waiting {
    /// Records of `seg` arrive at `to.now`, under `policy` (the bucket's
    /// own, or `block` while the caller is patient): due waiting records
    /// leave first, then each record leaves now, waits, is refused (it
    /// cannot make `--max-wait`) or meets the policy. Returns what `block`
    /// or `fail` handed back (not counted as read) and how many records
    /// went to the outbox.
    pub fn arrive(
        &mut self,
        seg: Segment,
        policy: Overflow,
        ledger: &mut Ledger,
        to: &mut Outflow,
    ) -> (Offered, usize) {
        match self {
            Waiting::Fifo(fifo) => fifo.arrive(seg, policy, ledger, to),
            Waiting::Keyed(keyed) => {
                let sent = if to.may_leave { keyed.release(to) } else { 0 };
                let (back, arrived) = keyed.arrive(seg, policy, ledger, to);
                (back, sent + arrived)
            }
        }
    }

    /// Let the waiting records leave that the schedule allows at `to.now`,
    /// into the outbox (none unless `to.may_leave`). Returns how many left.
    pub fn release(&mut self, to: &mut Outflow) -> usize {
        if !to.may_leave {
            return 0;
        }
        each!(self, room => room.release(to))
    }

    /// Expire the waiting records that arrived before `cutoff` (ns), oldest
    /// first, at `to.now` (the schedule hears of it: [`Pace::expired`]).
    /// Returns how many expired.
    pub fn expire_before(&mut self, cutoff: u64, ledger: &mut Ledger, to: &mut Outflow) -> usize {
        match self {
            Waiting::Fifo(fifo) => fifo.expire_before(cutoff, ledger, to),
            Waiting::Keyed(keyed) => keyed.expire_before(cutoff, ledger),
        }
    }

    /// When a waiting record next may leave under `schedule`, or something
    /// else changes without an arrival (ns); `None` when nothing waits.
    /// Expiry is no part of it.
    pub fn next_event(&self, schedule: &Pace) -> Option<u64> {
        each!(self, room => room.next_event(schedule))
    }

    /// Every waiting record, oldest first, as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        each!(self, room => room.drain(fate, ledger))
    }

    /// How long (ns) `record` arriving at `now` would wait before it
    /// leaves, as far as `schedule` and the records ahead of it say (see
    /// each form). `None` when it cannot be foreseen.
    pub fn forecast_wait(&mut self, now: u64, schedule: &Pace, record: &[u8]) -> Option<u64> {
        each!(self, room => room.forecast_wait(now, schedule, record))
    }

    /// The schedule may have changed (new limits, a slot taken outside the
    /// room): a forecast kept is made again when next asked.
    pub fn forget_forecast(&mut self) {
        if let Waiting::Fifo(fifo) = self {
            fifo.forget_forecast();
        }
    }

    /// When the latest record handed back under `fail` was refused because
    /// it was foreseen to leave past `--max-wait`: how long after its
    /// arrival (ns). `None` when it found no room.
    pub fn refused_wait_ns(&self) -> Option<u64> {
        each!(self, room => room.refused_wait_ns())
    }

    /// When records last left without the schedule being asked (ns): the
    /// keyed queues ask no schedule that limits nothing and holds no key.
    pub fn left_unasked(&self) -> Option<u64> {
        self.keys().and_then(Keyed::left_at)
    }

    /// The keys, with limits per key.
    pub fn keys(&self) -> Option<&Keyed> {
        match self {
            Waiting::Keyed(keyed) => Some(keyed),
            Waiting::Fifo(_) => None,
        }
    }

    /// The keys, to change their limit.
    pub fn keys_mut(&mut self) -> Option<&mut Keyed> {
        match self {
            Waiting::Keyed(keyed) => Some(keyed),
            Waiting::Fifo(_) => None,
        }
    }

    /// The longest any record that left waited (ns).
    pub fn longest_wait_ns(&self) -> u64 {
        each!(self, room => room.longest_wait_ns())
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        gauge!(self, room => room.len())
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        gauge!(self, room => room.bytes())
    }

    /// The most records that may wait (all keys together).
    pub fn capacity(&self) -> usize {
        gauge!(self, room => room.capacity())
    }

    /// The most bytes that may wait (`usize::MAX` when unbounded).
    pub fn capacity_bytes(&self) -> usize {
        gauge!(self, room => room.capacity_bytes())
    }

    /// The overflow policy.
    pub fn policy(&self) -> Overflow {
        gauge!(self, room => room.policy())
    }

    /// The most records that ever waited at once.
    pub fn max_depth(&self) -> usize {
        gauge!(self, room => room.max_depth())
    }

    /// When the oldest waiting record arrived (ns).
    pub fn oldest_arrival(&self) -> Option<u64> {
        gauge!(self, room => room.oldest_arrival())
    }
}
