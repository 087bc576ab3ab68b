//! What the reader holds outside the books: records read and not yet
//! offered to admission, and how it waits for room.

use crate::admission::Gauge;
use crate::bucket::Segment;
use crate::ledger::Ledger;

/// What the reader holds, under the state's lock.
///
/// Invariant: the records held here are not counted as read; they are
/// offered (the parked read), or, when drip stops, counted read and
/// undelivered ([`Reading::undelivered`]), in input order.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// *The parked read*: under `block`, the records of one read that did
    /// not fit. They arrive when room is made, offered again before any
    /// newer read, by the reader or by the writer's top-up. Keeps:
    /// backpressure without losing a read's tail, and a schedule that never
    /// starves while the reader sleeps.
    pub(crate) parked: Option<Segment>,
    /// Records read but never offered because drip stopped. Keeps: they
    /// are counted, as undelivered, in input order.
    pub(crate) leftover: Vec<Segment>,
    /// The begun record the reader is finishing itself at a stop (counted
    /// as read). Keeps: a second signal finds it for the dead letter.
    pub(crate) finishing: Option<Segment>,
    /// While the reader waits for room: how many free places wake it (a
    /// low-water mark, so it is not woken for every record written; 0: it
    /// does not wait).
    pub(crate) wants: usize,
    /// The reader has finished (end of input, error, or stop).
    pub(crate) done: bool,
}

impl Reading {
    /// Whether the reader waits for room and `bucket` has enough.
    pub(crate) fn can_go(&self, bucket: &Gauge) -> bool {
        self.wants > 0 && bucket.capacity() - bucket.len() >= self.wants
    }

    /// Drip stopped: the parked read, then the leftovers, as read and
    /// undelivered.
    pub(crate) fn undelivered(&mut self, ledger: &mut Ledger) {
        for seg in self
            .parked
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.leftover))
        {
            ledger.read_undelivered(seg);
        }
    }
}
