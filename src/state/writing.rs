//! The way out: what has begun on stdout (or the sink) and is not
//! finished, and whether more may go; what the writer does to the state
//! besides taking the outbox (topping the bucket up from the parked read,
//! what a write did not finish, as undelivered).

use super::State;
use crate::bucket::{Fate, Offered, Overflow, Segment};

/// Unpaced, how long stdout may make no room before a drop or fail policy
/// applies, in ns: longer than a consumer that is merely descheduled.
pub(crate) const STALL_NS: u64 = 100_000_000;

/// The way out, under the state's lock.
///
/// Invariant: the records here are counted as read and have no fate yet;
/// the writer finishes `tail` before anything else, and `in_flight` is
/// what it is writing, until [`Writing::settled`].
#[derive(Debug, Default)]
pub(crate) struct Writing {
    /// *The begun record*: unpaced, the record the reader was writing to
    /// stdout itself when stdout filled, and how many of its bytes went
    /// out. The writer finishes it before anything else, even when
    /// stopping. Keeps: no record is ever cut.
    pub(crate) tail: Option<(Segment, usize)>,
    /// *The batch in flight*: what the writer is writing (a begun record's
    /// rest first), for a second signal that leaves mid-write; the bytes
    /// written so far are [`super::Shared::in_flight_written`]. Keeps:
    /// nothing is lost then.
    pub(crate) in_flight: Vec<Segment>,
    /// The begun record whose rest heads `in_flight`, whole.
    pub(crate) in_flight_begun: Option<Segment>,
    /// When the write under way began (ns).
    pub(crate) since: Option<u64>,
    /// When the writer last took records, making room (ns).
    pub(crate) last_take: u64,
    /// The writer waits for records: nothing is due or queued.
    pub(crate) waiting: bool,
    /// The writer sleeps on `data_ready` (in any of its waits) and no one
    /// has woken it since: the reader wakes it only then
    /// ([`State::writer_to_wake`]), so a wake-up costs a system call only
    /// when someone sleeps.
    pub(crate) asleep: bool,
    /// The sink has no room (every job slot is taken): arrivals wait.
    pub(crate) sink_full: bool,
}

impl Writing {
    /// Whether the writer can take records now. Unpaced: it is between
    /// writes and nothing waits for it in the outbox (`outbox_len`), so
    /// what it holds beyond the bucket is at most one read, the parked
    /// one. Paced: no write has been under way for longer than the
    /// schedule's `slack_ns` (stdout is taking records).
    pub(crate) fn may_take(
        &self,
        now: u64,
        unpaced: bool,
        outbox_len: usize,
        slack_ns: u64,
    ) -> bool {
        if self.sink_full {
            return false;
        }
        if unpaced {
            return outbox_len == 0 && self.since.is_none();
        }
        !matches!(self.since, Some(since) if now.saturating_sub(since) > slack_ns)
    }

    /// Unpaced, whether a full bucket is only stdout not keeping up yet: the
    /// writer waits for records, or took some less than [`STALL_NS`] ago.
    pub(crate) fn patient(&self, now: u64, unpaced: bool) -> bool {
        unpaced && (self.waiting || now.saturating_sub(self.last_take) < STALL_NS)
    }

    /// Since when the writer cannot make room (ns): a write under way, or
    /// a full sink (every job slot taken, since it last took records).
    pub(crate) fn held_since(&self) -> Option<u64> {
        self.since.or(self.sink_full.then_some(self.last_take))
    }

    /// A write begins at `now`, having taken records (making room).
    pub(crate) fn took(&mut self, now: u64) {
        self.since = Some(now);
        self.last_take = now;
    }

    /// The writer writes `records` (headed by the rest of `begun`, whole).
    pub(crate) fn hold(&mut self, records: &[Segment], begun: &Option<Segment>) {
        self.in_flight.clear();
        self.in_flight.extend_from_slice(records);
        self.in_flight_begun.clone_from(begun);
    }

    /// The write has ended and its records are accounted for.
    pub(crate) fn settled(&mut self) {
        self.in_flight.clear();
        self.in_flight_begun = None;
        self.since = None;
    }
}

impl State {
    /// Whether the writer is to be woken (`data_ready`): it sleeps and no
    /// one has woken it since; it counts as woken from here.
    pub(crate) fn writer_to_wake(&mut self) -> bool {
        std::mem::take(&mut self.writing.asleep)
    }

    /// The writer, about to take the outbox: while the bucket has room,
    /// let the parked read arrive into it, as the reader would on waking.
    /// The writer can take what leaves now. Returns whether that emptied
    /// the parked read.
    ///
    /// At every turn, not only once the bucket is half empty: a bucket
    /// kept full lets more records leave each turn, so the run ends in
    /// fewer of the writer's wake-ups (docs/benchmarks.md, limits per key).
    pub(crate) fn top_up(&mut self, now: u64) -> bool {
        let bucket = self.adm.bucket();
        if bucket.len() >= bucket.capacity() || bucket.bytes() >= bucket.capacity_bytes() {
            return false;
        }
        let Some(held) = self.reading.parked.take() else {
            return false;
        };
        match self
            .adm
            .arrive(now, held, Overflow::Block, true, &mut self.ledger)
        {
            Offered::Done => true,
            Offered::Wait(rest) | Offered::Overflowed(rest) => {
                self.reading.parked = Some(rest);
                false
            }
        }
    }

    /// The records of `batch` after the first `skip`, as undelivered.
    pub(crate) fn dispose_after(&mut self, batch: Vec<Segment>, mut skip: usize) {
        for mut seg in batch {
            if skip >= seg.len() {
                skip -= seg.len();
                continue;
            }
            seg.split_front(skip);
            skip = 0;
            self.ledger.dispose(seg, Fate::Undelivered);
        }
    }
}

/// A batch headed by the rest of a begun record (`begun`, whole), of which
/// `written` records went out: if none did, the begun record takes its
/// rest's place, so it goes to the dead letter whole.
pub(crate) fn whole_again(batch: &mut [Segment], begun: Option<Segment>, written: usize) {
    if let (Some(whole), 0, Some(first)) = (begun, written, batch.first_mut()) {
        *first = whole;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Admission;
    use crate::bucket::Bucket;
    use crate::deadletter::DeadLetter;
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Unit};

    /// A bucket of 10 at 100,000 records a second, and a parked read of
    /// 100 records.
    fn small_bucket_with_a_parked_read() -> State {
        let limits = Limits::new(&[Limit {
            rate: parse_rate("100000/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        }]);
        let bucket = Bucket::new(10, None, Overflow::Block);
        let adm = Admission::new(bucket, crate::pace::Pace::local(limits), None);
        let mut st = State::new(adm, DeadLetter::none(b'\n'), false);
        let text: String = (1..=100).map(|i| format!("{i}\n")).collect();
        st.reading.parked = Some(Segment::new(text.into(), b'\n'));
        st
    }

    /// Each side is woken once, and only while it sleeps: the writer
    /// while it waits on `data_ready`, the reader while it waits for room
    /// (and enough was made, or its parked read was let in whole).
    #[test]
    fn a_sleeper_is_woken_once_and_only_while_it_sleeps() {
        let mut st = small_bucket_with_a_parked_read();
        assert!(!st.writer_to_wake(), "the writer is not asleep");
        st.writing.asleep = true;
        assert!(st.writer_to_wake());
        assert!(!st.writer_to_wake(), "woken once");
        assert!(st.top_up(0) || st.adm.bucket().len() == 10);
        assert!(!st.reader_to_wake(true), "the reader does not wait");
        st.reading.wants = 5;
        assert!(!st.reader_to_wake(false), "no room made");
        assert!(st.reader_to_wake(true), "its parked read is in");
        assert!(!st.reader_to_wake(true), "woken once");
        st.reading.wants = 5;
        let mut out = Vec::new();
        st.adm.release(100_000);
        st.adm.take_outbox(&mut out);
        assert!(st.reader_to_wake(false), "room for what it wants");
        assert_eq!(st.reading.wants, 0);
    }

    /// The writer fills a small bucket from the parked read itself, at
    /// each turn, rather than wait for the reader to wake and do it: at a
    /// high rate, a reader refilling a few records at a time held drip up
    /// (2 s of schedule took up to 3 s). The records arrive in order.
    #[test]
    fn the_writer_tops_the_bucket_up_from_the_parked_read() {
        let mut st = small_bucket_with_a_parked_read();
        // One leaves at once, ten wait: the rest stays parked.
        assert!(!st.top_up(0));
        assert_eq!(st.adm.outbox_len(), 1);
        assert_eq!(st.adm.bucket().len(), 10);
        assert_eq!(st.reading.parked.as_ref().map(Segment::len), Some(89));
        // Full: nothing moves in, even with a record due (admission would
        // let it go and take one more in).
        assert!(!st.top_up(10_000));
        assert_eq!(st.adm.outbox_len(), 1);
        assert_eq!(st.reading.parked.as_ref().map(Segment::len), Some(89));
        // Three more due (10 µs apart): the three places they leave are
        // filled at once, not only once the bucket is half empty.
        let mut out = Vec::new();
        st.adm.release(30_000);
        assert!(!st.top_up(30_000));
        assert_eq!(st.adm.bucket().len(), 10);
        assert_eq!(st.reading.parked.as_ref().map(Segment::len), Some(86));
        st.adm.take_outbox(&mut out);
        let later = 20 * 10_000;
        st.adm.release(later);
        assert!(!st.top_up(later));
        assert_eq!(st.adm.bucket().len(), 10);
        st.adm.take_outbox(&mut out);
        let first: Vec<&[u8]> = out.iter().flat_map(|s| s.records()).collect();
        let want: Vec<String> = (1..=first.len()).map(|i| format!("{i}\n")).collect();
        let want: Vec<&[u8]> = want.iter().map(|s| s.as_bytes()).collect();
        assert_eq!(first, want);
        // Every record at last, in order, and the parked read emptied.
        let mut now = later;
        while st.reading.parked.is_some() || !st.adm.bucket().is_empty() {
            now += 10_000;
            st.adm.release(now);
            st.top_up(now);
            st.adm.take_outbox(&mut out);
            assert!(now < 1_000_000_000, "stuck");
        }
        let all: Vec<&[u8]> = out.iter().flat_map(|s| s.records()).collect();
        assert_eq!(all.len(), 100);
        assert_eq!(all.last(), Some(&&b"100\n"[..]));
    }

    /// A bucket full by its bytes (`--capacity-bytes`) takes nothing in
    /// either, though it has places for records.
    #[test]
    fn a_bucket_full_of_bytes_is_not_topped_up() {
        let limits = Limits::new(&[Limit {
            rate: parse_rate("100000/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        }]);
        let bucket = Bucket::new(100, Some(20), Overflow::Block);
        let adm = Admission::new(bucket, crate::pace::Pace::local(limits), None);
        let mut st = State::new(adm, DeadLetter::none(b'\n'), false);
        st.reading.parked = Some(Segment::new("a\n".repeat(100).into(), b'\n'));
        // One leaves at once, ten of two bytes fill the bucket's 20.
        assert!(!st.top_up(0));
        assert_eq!((st.adm.bucket().len(), st.adm.bucket().bytes()), (10, 20));
        assert_eq!(st.adm.outbox_len(), 1);
        assert!(!st.top_up(10_000));
        assert_eq!(st.adm.outbox_len(), 1);
        assert_eq!(st.reading.parked.as_ref().map(Segment::len), Some(89));
    }

    /// Under a shared schedule a record leaves on the writer only, which
    /// writes it at once, never on the reader's arrival, to be written
    /// whenever the writer next runs: on a busy machine that was up to 20
    /// ms after its slot, onto other drips' slots. A local schedule lets
    /// the reader release what is due.
    #[test]
    fn a_shared_slot_is_spent_by_the_writer_only() {
        let shared = crate::shared::lease::tests::records_schedule([0, 5_000_000]);
        let adm = Admission::new(
            Bucket::new(10, None, Overflow::Block),
            crate::pace::Pace::new(crate::pace::Base::Shared(Box::new(shared))),
            None,
        );
        let mut st = State::new(adm, DeadLetter::none(b'\n'), false);
        assert!(!st.may_leave(0, false));
        let may_leave = st.may_leave(1_000, false);
        let State { adm, ledger, .. } = &mut st;
        let seg = Segment::new(b"1\n2\n".to_vec().into(), b'\n');
        adm.arrive(1_000, seg, Overflow::Block, may_leave, ledger);
        assert_eq!(st.adm.outbox_len(), 0);
        assert_eq!(st.adm.bucket().len(), 2);
        assert_eq!(st.adm.release(1_000), 1);
        let st = small_bucket_with_a_parked_read();
        assert!(st.may_leave(0, false));
    }
}
