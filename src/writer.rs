//! The writer thread: takes what the schedule lets go (the outbox), lets
//! waiting records go as they come due, and writes them to the sink.
//!
//! The sink is stdout ([`Stdout`]) or, with `--exec`, the command runner
//! (`jobs::Runner`); both implement [`Sink`], and the loop is the same.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::Duration;

use crate::bucket::Segment;
use crate::output::{self, Stop, Written};
use crate::state::{whole_again, Shared, State};
use crate::sys::{self, Unpoisoned};

/// Shortest sleep of the writer at rates above 20,000/s, in ns.
const COALESCE_NS: u64 = 50_000;

/// Where released records go.
pub(crate) trait Sink {
    /// Write the records of `batch` in order. `stop` is asked between
    /// write calls (after [`Stop::AfterRecord`] only the record under way
    /// is finished; [`Stop::Now`] ends the batch where it is); `progress`
    /// is told the bytes of the batch written so far.
    fn write(
        &mut self,
        batch: &[Segment],
        stop: &dyn Fn() -> Stop,
        progress: &dyn Fn(usize),
    ) -> Written;

    /// Whether the sink records the fate of what it takes itself (a
    /// command runner: succeeded or failed, later); the writer then counts
    /// nothing as written.
    fn settles_itself(&self) -> bool {
        false
    }

    /// Whether the sink can take a record now (a free job slot). While it
    /// cannot, the writer lets nothing go and arrivals wait in the bucket.
    fn ready(&self) -> bool {
        true
    }
}

/// The sink of a pipeline: a byte stream (stdout).
///
/// Records are never joined: an input's unterminated last record that
/// another record follows (keys let records overtake one another) is ended
/// with the delimiter just before that record is written; written last, it
/// stays as it was read.
pub(crate) struct Stdout {
    out: Box<dyn Write + Send>,
    /// The delimiter owed before the next record: the last bytes written
    /// ended a record without it.
    owed: Option<u8>,
    /// The descriptor `out` writes to, polled for room when it is full
    /// (non-blocking); none for a writer of a library caller.
    fd: Option<OwnedFd>,
}

impl Stdout {
    pub(crate) fn new(out: Box<dyn Write + Send>, fd: Option<OwnedFd>) -> Stdout {
        Stdout {
            out,
            owed: None,
            fd,
        }
    }

    /// Wait until `out` can take more: poll(2) for room on its descriptor
    /// (a stop's interrupt ends the wait too). A writer of a library
    /// caller has no descriptor to poll: it is asked again a moment later.
    fn wait_room(fd: Option<&OwnedFd>) {
        match fd {
            Some(fd) => drop(sys::writable(fd.as_fd(), -1)),
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

impl Sink for Stdout {
    /// An unterminated record inside the batch (one another record follows
    /// in the same write) ends the write there, so that the next part
    /// begins with its delimiter: two records are never joined.
    fn write(
        &mut self,
        batch: &[Segment],
        stop: &dyn Fn() -> Stop,
        progress: &dyn Fn(usize),
    ) -> Written {
        let last = batch.iter().rposition(|s| s.bytes() > 0);
        let cut = batch
            .iter()
            .enumerate()
            .position(|(i, s)| Some(i) < last && s.bytes() > 0 && s.ends_unterminated());
        let Some(cut) = cut else {
            return self.write_part(batch, stop, progress);
        };
        let (head, rest) = batch.split_at(cut + 1);
        let head_bytes: usize = head.iter().map(Segment::bytes).sum();
        // `bytes` counts a delimiter owed from before; `progress` does not.
        let owed = u64::from(self.owed.is_some());
        let first = self.write_part(head, stop, progress);
        if first.error.is_some() || first.stopped || first.bytes < head_bytes as u64 + owed {
            return first;
        }
        let mut then = self.write(rest, stop, &|n| progress(head_bytes + n));
        then.records += first.records;
        then.bytes += first.bytes;
        then
    }
}

impl Stdout {
    /// Write `batch`, in which only the last record may lack its
    /// delimiter: first the delimiter owed to an unterminated record
    /// written before, if any records follow it.
    fn write_part(
        &mut self,
        batch: &[Segment],
        stop: &dyn Fn() -> Stop,
        progress: &dyn Fn(usize),
    ) -> Written {
        let total: usize = batch.iter().map(Segment::bytes).sum();
        let mut owed = 0;
        if let Some(delimiter) = self.owed.filter(|_| total > 0) {
            let wait = || Stdout::wait_room(self.fd.as_ref());
            match output::write_delimiter(&mut *self.out, delimiter, stop, &wait) {
                Ok(true) => (self.owed, owed) = (None, 1),
                Ok(false) => {
                    return Written {
                        stopped: true,
                        ..Written::default()
                    }
                }
                Err(e) => {
                    return Written {
                        error: Some(e),
                        ..Written::default()
                    }
                }
            }
        }
        let wait = || Stdout::wait_room(self.fd.as_ref());
        let mut written = output::write_batch(&mut *self.out, batch, stop, progress, &wait);
        if total > 0 && written.bytes == total as u64 {
            let last = batch.iter().rev().find(|s| s.bytes() > 0).expect("bytes");
            self.owed = last.ends_unterminated().then(|| last.delimiter());
        }
        written.bytes += owed;
        written
    }
}

/// What the writer writes next.
#[derive(Default)]
struct Batch {
    records: Vec<Segment>,
    /// The whole record of a begun record (`Writing::tail`) whose rest heads
    /// `records`.
    begun: Option<Segment>,
    /// The last batch: the rest of a begun record, finished at a stop.
    last: bool,
}

impl Batch {
    /// Take the record the reader began (`Writing::tail`), if any: its rest
    /// goes next, and the whole is kept for the dead letter.
    fn take_tail(&mut self, st: &mut State) {
        if let Some((record, begun)) = st.writing.tail.take() {
            self.records.push(record.rest_after(begun));
            self.begun = Some(record);
        }
    }
}

/// Run the writer until everything is written or drip stops. Returns the
/// write error that ended it, if any (a closed pipe included).
pub(crate) fn write_loop(shared: &Shared, sink: &mut dyn Sink) -> Option<std::io::Error> {
    sys::set_timer_slack(1);
    if shared.unpaced {
        sys::set_batch_scheduling();
    }
    let per_second = shared.lock().adm.schedule().records_per_second();
    // At rates above 1/COALESCE a wake-up per record would cost more than
    // the records: wake at most every COALESCE and write what has come due
    // together. The schedule stays absolute, so this delays records
    // without losing rate.
    let coalesce = if !shared.unpaced && per_second > 1e9 / COALESCE_NS as f64 {
        COALESCE_NS
    } else {
        0
    };
    let mut batch = Batch::default();
    let settles_itself = sink.settles_itself();
    let mut st = shared.lock();
    loop {
        // The lock is kept from settling one write to taking the next:
        // let go in between, it would only wake the reader to wait again.
        drop(next_batch(shared, st, coalesce, &mut batch, &*sink)?);
        let written = write_batch(shared, sink, &batch);
        // The write's end, read before waiting for the lock: a reader
        // holding it (admitting a large read) must not make the write look
        // late to the schedule.
        let now = shared.clock.now();
        st = shared.lock();
        let ended = written.error.is_some() || written.stopped || batch.last;
        if !settles_itself {
            // A runner records its starts itself, each as it happens.
            st.departures.record(now, written.records);
            st.adm
                .wrote(now, usize::try_from(written.records).unwrap_or(usize::MAX));
        }
        let written_bytes = if settles_itself {
            None
        } else {
            Some(written.bytes)
        };
        settle(&mut st, &mut batch, written.records, written_bytes);
        if ended {
            drop(st);
            if written.error.is_some() {
                shared.stop(false);
            }
            return written.error;
        }
    }
}

/// Wait for records to write to `sink` and put them in `batch`, waking
/// at most every `coalesce` ns; `None` when there is nothing more to
/// write. Takes and returns the lock. The reader, when it
/// is to be woken, is woken as the lock is about to be let go (not before
/// the work under it, which it would only wait out again).
fn next_batch<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    coalesce: u64,
    batch: &mut Batch,
    sink: &dyn Sink,
) -> Option<MutexGuard<'a, State>> {
    let runner = sink.settles_itself();
    let mut wake_reader = false;
    loop {
        if st.stop.writing {
            // A record the reader began is finished, even now (unless
            // drip is leaving: it goes to the dead letter whole); what the
            // schedule let go is written unless a stop says otherwise
            // (`Stops::now`: then nothing more is begun).
            if shared.stops.leaving() {
                return None;
            }
            batch.take_tail(&mut st);
            st.adm.take_outbox(&mut batch.records);
            if runner {
                undelivered_at_stop(shared, &mut st, batch);
            }
            if batch.records.is_empty() {
                return None;
            }
            batch.last = true;
            break;
        }
        let now = shared.clock.now();
        let State { adm, ledger, .. } = &mut *st;
        let expired = adm.expire(now, ledger) > 0;
        st.writing.sink_full = !sink.ready();
        if st.writing.sink_full {
            // Woken when a job ends (or the slots change, or a stop), and
            // when the next waiting record expires.
            wake_reader |= expired && st.reader_to_wake(false);
            st.flush_dead();
            wake(shared, &mut wake_reader);
            let expiry = st.adm.next_expiry().map(|t| t.saturating_sub(now));
            st = sleep(shared, st, expiry.map(Duration::from_nanos));
            continue;
        }
        st.adm.release(now);
        if budget_stop(shared, &mut st, now) {
            continue;
        }
        if !st.stop.reading && st.top_up(now) {
            // The parked read is all in: the reader may read on.
            wake_reader |= st.reader_to_wake(true);
        }
        // Room the expiries made and the top-up left (it fills the rest
        // itself: a reader woken for it would find the bucket full again).
        wake_reader |= expired && st.reader_to_wake(false);
        st.flush_dead();
        // The rest of a record the reader began goes first.
        batch.take_tail(&mut st);
        if st.adm.take_outbox(&mut batch.records) > 0 || batch.begun.is_some() {
            st.writing.took(now);
            wake_reader |= st.reader_to_wake(false);
            wake(shared, &mut wake_reader);
            break;
        }
        wake(shared, &mut wake_reader);
        st = wait(shared, st, now, coalesce)?;
    }
    // Where a second signal finds it, should the write block.
    st.writing.hold(&batch.records, &batch.begun);
    shared.in_flight_written.store(0, Ordering::SeqCst);
    Some(st)
}

/// Under `--budget-exhausted stop`: when records wait at `now` and a budget
/// is spent, stop reading and writing (the records the schedule already
/// let go are still written; what waits is undelivered), noting which
/// budget. Whether it stopped drip.
fn budget_stop(shared: &Shared, st: &mut State, now: u64) -> bool {
    if st.stop.writing || st.adm.bucket().is_empty() || !st.budget_spent_stops(now) {
        return false;
    }
    shared.wake_all();
    true
}

/// A runner's stop: what the schedule did not let go is undelivered now,
/// before the running jobs end; what it let go (`batch`) starts but at a
/// signal (`Stops::now`: no job starts), when it is undelivered too, and
/// first: the dead letter keeps input order.
fn undelivered_at_stop(shared: &Shared, st: &mut State, batch: &mut Batch) {
    if shared.stops.write_stop() != Stop::No {
        st.dispose_after(std::mem::take(&mut batch.records), 0);
    }
    st.drain_undelivered();
    st.flush_dead();
}

/// Wake the reader (`space_ready`) if `to_wake` says so, once.
fn wake(shared: &Shared, to_wake: &mut bool) {
    if std::mem::take(to_wake) {
        shared.space_ready.notify_one();
    }
}

/// Sleep on `data_ready` for at most `timeout` (`None`: until woken),
/// noted in the state so the reader wakes the writer only while it sleeps
/// ([`State::writer_to_wake`]).
fn sleep<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    timeout: Option<Duration>,
) -> MutexGuard<'a, State> {
    st.writing.asleep = true;
    let mut st = match timeout {
        Some(timeout) => shared.data_ready.wait_timeout(st, timeout).unpoisoned().0,
        None => shared.data_ready.wait(st).unpoisoned(),
    };
    st.writing.asleep = false;
    st
}

/// Nothing to write at `now`: sleep until the next record is due or
/// expires, or something arrives. `None` when nothing more will come.
fn wait<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    now: u64,
    coalesce: u64,
) -> Option<MutexGuard<'a, State>> {
    // Paused, no room will be made until a resume wakes the writer.
    let parked = st.reading.parked.is_some() && !st.stop.reading && !st.adm.paused();
    let Some(event) = st.adm.next_event() else {
        if parked {
            // The parked read waits for room the writer cannot make:
            // the reader offers it again (an expiry or a policy). Left
            // looking again every millisecond: this case was not
            // reproduced, so no test shows that the reader's offer always
            // wakes the writer (docs/architecture.md, "Waits that look").
            return Some(sleep(shared, st, Some(Duration::from_millis(1))));
        }
        if st.stop.reading || (st.reading.done && st.adm.bucket().is_empty()) {
            return None;
        }
        // Records wait and no schedule says when they may go (paused,
        // or slots yet to come from a shared state): what changes that
        // wakes the writer (a resume, a grant, a stop), as an arrival does
        // while the input lasts; they are never taken for undeliverable.
        st.writing.waiting = !st.reading.done;
        st = sleep(shared, st, None);
        st.writing.waiting = false;
        return Some(st);
    };
    let wake = event.max(now + coalesce);
    let timeout = Duration::from_nanos(wake.saturating_sub(now));
    Some(sleep(shared, st, Some(timeout)))
}

/// Write `batch` to `sink`: the rest of a begun record is finished whatever
/// happens; a stop is seen between write calls.
fn write_batch(shared: &Shared, sink: &mut dyn Sink, batch: &Batch) -> Written {
    let now = || shared.stops.leaving();
    let stop = || shared.stops.write_stop();
    let progress = |bytes| shared.in_flight_written.store(bytes, Ordering::SeqCst);
    let records = &batch.records;
    if batch.begun.is_none() {
        return sink.write(records, &stop, &progress);
    }
    let finish = || if now() { Stop::Now } else { Stop::No };
    let mut first = sink.write(&records[..1], &finish, &progress);
    if first.error.is_some() || first.stopped || records.len() == 1 {
        return first;
    }
    if stop() != Stop::No {
        first.stopped = true;
        return first;
    }
    let done = first.bytes as usize;
    let rest = sink.write(&records[1..], &stop, &|bytes| progress(done + bytes));
    Written {
        records: first.records + rest.records,
        bytes: first.bytes + rest.bytes,
        ..rest
    }
}

/// Account for a batch of which `records` whole records (`bytes` bytes)
/// were written (taken, by a sink that settles them itself: `bytes` is
/// `None`): the rest is undelivered.
fn settle(st: &mut State, batch: &mut Batch, records: u64, bytes: Option<u64>) {
    st.writing.settled();
    if let Some(bytes) = bytes {
        st.ledger.written(records, bytes);
    }
    let total: u64 = batch.records.iter().map(|s| s.len() as u64).sum();
    // Not finished: a begun record goes to the dead letter whole.
    whole_again(&mut batch.records, batch.begun.take(), records as usize);
    if records < total {
        st.dispose_after(std::mem::take(&mut batch.records), records as usize);
        st.flush_dead();
    }
    batch.records.clear();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;

    use super::*;

    /// Bytes written, kept where the test can see them.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<u8>>>);

    impl Write for Seen {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An unterminated record gets its delimiter only when a record is
    /// written after it, and that byte is counted as written.
    #[test]
    fn an_unterminated_record_is_ended_only_when_another_follows() {
        for d in [b'\n', 0] {
            let seen = Seen::default();
            let mut out = Stdout::new(Box::new(seen.clone()), None);
            let seg = |text: &[u8]| Segment::new(Bytes::copy_from_slice(text), d);
            let mut write = |batch: &[Segment]| out.write(batch, &|| Stop::No, &|_| {});
            let first = write(&[seg(&[b'a', d]), seg(b"b")]);
            assert_eq!((first.records, first.bytes), (2, 3));
            assert_eq!(*seen.0.lock().unwrap(), [b'a', d, b'b']);
            assert_eq!(write(&[]).bytes, 0, "nothing follows yet");
            let then = write(&[seg(&[b'c', d])]);
            assert_eq!((then.records, then.bytes), (1, 3));
            assert_eq!(*seen.0.lock().unwrap(), [b'a', d, b'b', d, b'c', d]);
        }
    }

    /// An unterminated record followed by another in one write (keys let
    /// both go together) gets its delimiter between them; the progress told
    /// is of the batch's bytes, without the delimiters added.
    #[test]
    fn an_unterminated_record_inside_one_write_is_ended() {
        for d in [b'\n', 0] {
            let seen = Seen::default();
            let mut out = Stdout::new(Box::new(seen.clone()), None);
            let seg = |text: &[u8]| Segment::new(Bytes::copy_from_slice(text), d);
            out.write(&[seg(b"x")], &|| Stop::No, &|_| {});
            let told = std::sync::Mutex::new(Vec::new());
            let written = out.write(
                &[seg(b"b 3"), seg(&[b'a', b' ', b'2', d])],
                &|| Stop::No,
                &|n| told.lock().unwrap().push(n),
            );
            assert_eq!(told.lock().unwrap().last(), Some(&7), "the batch's 7 bytes");
            assert_eq!((written.records, written.bytes), (2, 9));
            assert_eq!(
                *seen.0.lock().unwrap(),
                [b'x', d, b'b', b' ', b'3', d, b'a', b' ', b'2', d]
            );
        }
    }
}
