//! What the reader holds outside the books: records read and not yet
//! offered to admission, and how it waits for room; what the reader asks
//! of the state (may it write to stdout itself, may records leave now,
//! which policy applies) and how a write of its own is accounted for.

use super::State;
use crate::bucket::{Overflow, Segment};
use crate::ledger::Ledger;
use crate::output;

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

impl State {
    /// Whether nothing is queued or being written: stdout is free for the
    /// reader to write to itself.
    pub(crate) fn idle(&self) -> bool {
        self.writing.waiting
            && self.adm.bucket().is_empty()
            && self.adm.outbox_len() == 0
            && self.reading.parked.is_none()
            && self.writing.tail.is_none()
            && !self.stop.reading
            && !self.adm.paused()
    }

    /// Whether the writer can take records now ([`super::Writing::may_take`]);
    /// never when only the writer releases them
    /// ([`crate::pace::Pace::released_by_the_writer`]).
    pub(crate) fn may_leave(&self, now: u64, unpaced: bool) -> bool {
        if self.adm.schedule().released_by_the_writer() {
            return false;
        }
        let slack = self.adm.schedule().slack_ns();
        self.writing
            .may_take(now, unpaced, self.adm.outbox_len(), slack)
    }

    /// The policy that applies now: unpaced, one read can bring thousands
    /// of records at once, so a drop or fail policy applies only once
    /// stdout has stopped making room for a while, never to the size of a
    /// read; until then, `block`.
    pub(crate) fn policy(&self, now: u64, unpaced: bool) -> Overflow {
        // Paused, the writer takes nothing: the policy applies as set.
        if !self.adm.paused() && self.writing.patient(now, unpaced) {
            Overflow::Block
        } else {
            self.adm.bucket().policy()
        }
    }

    /// Account for a write the reader made itself ([`output::Direct`]):
    /// returns the records it did not write, for the usual way, or `None`
    /// after a write error (the rest is then undelivered).
    pub(crate) fn settle_direct(
        &mut self,
        mut seg: Segment,
        written: output::Written,
        now: u64,
    ) -> Option<Option<Segment>> {
        self.writing.since = None;
        let whole = written.records;
        self.ledger.read(whole as usize);
        self.ledger.written(whole, written.bytes);
        self.departures.record(now, whole);
        if written.bytes > 0 {
            self.writing.last_take = now;
        }
        let done = seg.split_front(whole as usize);
        let begun = written.bytes as usize - done.bytes();
        if let Some(e) = written.error {
            self.stop.write_error = Some(e);
            self.ledger.read_undelivered(seg);
            return None;
        }
        if begun > 0 {
            let mut record = seg.split_front(1);
            record.arrived = now;
            self.ledger.read(1);
            self.writing.tail = Some((record, begun));
        }
        Some((!seg.is_empty()).then_some(seg))
    }

    /// Whether the reader is to be woken (`space_ready`): it waits for
    /// room and enough has been made, or (`emptied`) the writer let its
    /// whole parked read in. It counts as woken from here (it wants
    /// nothing more until it waits again), so it is woken once.
    pub(crate) fn reader_to_wake(&mut self, emptied: bool) -> bool {
        let (wants, bucket) = (self.reading.wants, self.adm.bucket());
        let wake = wants > 0 && (emptied || bucket.capacity() - bucket.len() >= wants);
        if wake {
            self.reading.wants = 0;
        }
        wake
    }
}
