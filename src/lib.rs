//! drip: a leaky bucket for shell pipelines.
//!
//! Records are read from the inputs on a reader thread, queued in a bounded
//! [`bucket::Bucket`], and released by a [`pacer::Pacer`] (GCRA) on the
//! writer thread, which sleeps to absolute deadlines. A third thread, on a
//! small tokio runtime, handles signals, the stats stream and the progress
//! display. [`run`] ties them together and returns the exit status.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub mod bucket;
pub mod cli;
pub mod input;
pub mod output;
pub mod pacer;
pub mod progress;
pub mod rate;
pub mod scan;
mod signals;
pub mod stats;
mod sys;

use bucket::{Bucket, Fate, Offered, Overflow, Segment};
use cli::{Config, Input};
use input::{Flow, Splitter};
use pacer::Pacer;
use progress::{Snapshot, Ui};
use stats::{Counts, Departures, Summary};

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: a runtime error (unreadable input, oversized record, failed write).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: a usage error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the bucket overflowed under `--overflow fail`.
pub const EXIT_OVERFLOW: i32 = 3;

/// The bucket overflowed under `--overflow fail`.
#[derive(Debug)]
pub struct OverflowError {
    /// 1-based number of the record that did not fit.
    pub record: u64,
    /// The bucket's capacity in records.
    pub capacity: usize,
}

impl std::fmt::Display for OverflowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "overflow: record {} arrived at a full bucket (capacity {} records) under --overflow fail",
            self.record, self.capacity
        )
    }
}

impl std::error::Error for OverflowError {}

/// Map an error from [`run`] to drip's exit status.
pub fn exit_status(err: &anyhow::Error) -> i32 {
    if err.downcast_ref::<OverflowError>().is_some() {
        EXIT_OVERFLOW
    } else {
        EXIT_ERROR
    }
}

/// Monotonic nanoseconds since drip started.
#[derive(Debug, Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// The dead letter: where records that are not written go, byte-exact, each
/// with its delimiter.
#[derive(Debug)]
struct DeadLetter {
    file: Option<(PathBuf, BufWriter<File>)>,
    delimiter: u8,
    error: Option<anyhow::Error>,
}

impl DeadLetter {
    fn open(path: Option<&Path>, delimiter: u8) -> Result<DeadLetter> {
        let file = match path {
            Some(path) => {
                let name = format!("--dead-letter {}", path.display());
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| name.clone())?;
                let mut out = BufWriter::with_capacity(256 * 1024, f);
                // Appending to a file whose last record lacks its delimiter
                // would merge two records: end that record first.
                if ends_without(path, delimiter) {
                    out.write_all(&[delimiter]).with_context(|| name.clone())?;
                }
                Some((PathBuf::from(name), out))
            }
            None => None,
        };
        Ok(DeadLetter {
            file,
            delimiter,
            error: None,
        })
    }

    fn write(&mut self, seg: &Segment) {
        let Some((path, out)) = &mut self.file else {
            return;
        };
        if self.error.is_some() || seg.is_empty() {
            return;
        }
        let bytes = seg.as_bytes();
        let mut result = out.write_all(bytes);
        if result.is_ok() && bytes.last() != Some(&self.delimiter) {
            result = out.write_all(&[self.delimiter]);
        }
        if let Err(e) = result {
            self.error = Some(anyhow::Error::from(e).context(format!("{}", path.display())));
        }
    }

    fn finish(&mut self) -> Option<anyhow::Error> {
        if let Some((path, out)) = &mut self.file {
            if self.error.is_none() {
                if let Err(e) = out.flush() {
                    self.error =
                        Some(anyhow::Error::from(e).context(format!("{}", path.display())));
                }
            }
        }
        self.error.take()
    }
}

/// Whether `path` is a non-empty regular file whose last byte is not
/// `delimiter`.
fn ends_without(path: &Path, delimiter: u8) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = File::open(path) else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file() && m.len() > 0) {
        return false;
    }
    let mut last = [0u8];
    f.seek(SeekFrom::End(-1)).is_ok() && f.read_exact(&mut last).is_ok() && last[0] != delimiter
}

/// Everything the threads share, behind one lock.
#[derive(Debug)]
struct State {
    bucket: Bucket,
    counts: Counts,
    /// When the first and the latest records were written.
    departures: Departures,
    dead: DeadLetter,
    /// The reader has finished (end of input, error, or stop).
    reading_done: bool,
    /// Stop reading: a signal, an overflow under fail, a failed output.
    stop_reading: bool,
    /// Stop writing (after the record under way).
    stop_writing: bool,
    writer_waiting: bool,
    /// While the reader waits for room: how many free places wake it (a
    /// low-water mark, so it is not woken for every record written).
    reader_wants: usize,
    /// When the writer last took records, making room (ns).
    last_take: u64,
    /// When the write under way began (ns).
    writing_since: Option<u64>,
    max_wait_ns: u64,
    overflow: Option<OverflowError>,
    /// Records read but never queued because drip stopped; they follow the
    /// bucket's records into the dead letter, keeping input order.
    leftover: Vec<Segment>,
    /// The records of one read that did not fit the full bucket, parked
    /// where the writer reaches them (not yet counted as read; never counted
    /// towards the capacity): unpaced it takes them with the bucket's, and
    /// the reader reads on; paced it tops the bucket up from them, and the
    /// reader waits. The reader offers them again before newer records.
    pending: Option<Segment>,
    /// Unpaced: the record the reader was writing to stdout itself when
    /// stdout filled up, and how many of its bytes went out. The writer
    /// finishes it before anything else, even when stopping, so no record
    /// is ever cut. Counted as read.
    tail: Option<(Segment, usize)>,
    /// The error the reader met writing to stdout itself.
    write_error: Option<std::io::Error>,
    /// The batch the writer is writing (as written: a begun record's rest
    /// first), and that record whole; [`Shared::in_flight_written`] says how
    /// far it got. Only for a second signal, which leaves mid-write.
    in_flight: Vec<Segment>,
    in_flight_begun: Option<Segment>,
    /// The begun record the reader is finishing itself at a stop.
    finishing: Option<Segment>,
}

impl State {
    /// Count and dead-letter records leaving other than to stdout.
    fn dispose(counts: &mut Counts, dead: &mut DeadLetter, seg: Segment, fate: Fate) {
        counts.add(fate, seg.len() as u64);
        dead.write(&seg);
    }

    /// Expire records older than `max_wait`; returns how many expired.
    fn expire(&mut self, now: u64, max_wait: Option<Duration>) -> usize {
        let Some(max_wait) = max_wait else {
            return 0;
        };
        let cutoff = now.saturating_sub(max_wait.as_nanos() as u64);
        let State {
            bucket,
            counts,
            dead,
            ..
        } = self;
        bucket.expire_before(cutoff, &mut |s, f| State::dispose(counts, dead, s, f))
    }

    /// Leaving mid-write (a second signal): what the writer and the reader
    /// were still writing, as undelivered; `written` bytes of the writer's
    /// batch went out. A record under way goes to the dead letter whole.
    fn drain_in_flight(&mut self, written: usize) {
        let mut batch = std::mem::take(&mut self.in_flight);
        let mut skip = output::whole_records(&batch, written) as usize;
        if let Some(whole) = self.in_flight_begun.take() {
            if skip == 0 && !batch.is_empty() {
                batch[0] = whole;
            }
        }
        for mut seg in batch {
            if skip >= seg.len() {
                skip -= seg.len();
                continue;
            }
            seg.split_front(skip);
            skip = 0;
            State::dispose(&mut self.counts, &mut self.dead, seg, Fate::Undelivered);
        }
        if let Some(record) = self.finishing.take() {
            self.counts.read += 1;
            State::dispose(&mut self.counts, &mut self.dead, record, Fate::Undelivered);
        }
    }

    /// Everything still queued, then what the reader held, as undelivered.
    fn drain_undelivered(&mut self) {
        let State {
            bucket,
            counts,
            dead,
            leftover,
            pending,
            tail,
            ..
        } = self;
        // A begun record is older than anything queued.
        if let Some((record, _)) = tail.take() {
            State::dispose(counts, dead, record, Fate::Undelivered);
        }
        bucket.drain(Fate::Undelivered, &mut |s, f| {
            State::dispose(counts, dead, s, f)
        });
        for seg in pending.take().into_iter().chain(std::mem::take(leftover)) {
            counts.read += seg.len() as u64;
            State::dispose(counts, dead, seg, Fate::Undelivered);
        }
    }

    /// Whether nothing is queued or being written: stdout is free for the
    /// reader to write to itself.
    fn idle(&self) -> bool {
        self.writer_waiting
            && self.bucket.is_empty()
            && self.pending.is_none()
            && self.tail.is_none()
            && !self.stop_reading
    }

    /// Account for a write the reader made itself ([`output::Direct`]):
    /// returns the records it did not write, for the usual way, or `None`
    /// after a write error (the rest is then undelivered).
    fn settle_direct(
        &mut self,
        mut seg: Segment,
        written: output::Written,
        now: u64,
    ) -> Option<Option<Segment>> {
        self.writing_since = None;
        let whole = written.records;
        self.counts.read += whole;
        self.counts.written += whole;
        self.counts.bytes_written += written.bytes;
        self.departures.record(now, whole);
        if written.bytes > 0 {
            self.last_take = now;
        }
        let done = seg.split_front(whole as usize);
        let begun = written.bytes as usize - done.bytes();
        if let Some(e) = written.error {
            self.write_error = Some(e);
            self.counts.read += seg.len() as u64;
            State::dispose(&mut self.counts, &mut self.dead, seg, Fate::Undelivered);
            return None;
        }
        if begun > 0 {
            let mut record = seg.split_front(1);
            record.arrived = now;
            self.counts.read += 1;
            self.tail = Some((record, begun));
        }
        Some((!seg.is_empty()).then_some(seg))
    }

    /// Paced: once the bucket is half empty, move what it has room for
    /// from the reader's parked read into it, as the reader would on
    /// waking (in large steps: each move costs a cut). Returns whether that
    /// emptied the parked read.
    fn top_up(&mut self, now: u64) -> bool {
        if self.bucket.len() * 2 > self.bucket.capacity()
            || self.bucket.bytes().saturating_mul(2) > self.bucket.capacity_bytes()
        {
            return false;
        }
        let Some(held) = self.pending.take() else {
            return false;
        };
        let len = held.len() as u64;
        let State {
            bucket,
            counts,
            dead,
            ..
        } = self;
        match bucket.offer_as(Overflow::Block, held, now, &mut |s, f| {
            State::dispose(counts, dead, s, f)
        }) {
            Offered::Done => {
                counts.read += len;
                true
            }
            Offered::Wait(rest) | Offered::Overflowed(rest) => {
                counts.read += len - rest.len() as u64;
                self.pending = Some(rest);
                false
            }
        }
    }

    /// Whether the reader waits for room and enough has been made.
    fn reader_can_go(&self) -> bool {
        self.reader_wants > 0 && self.bucket.capacity() - self.bucket.len() >= self.reader_wants
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// The writer waits here for records, deadlines and stops.
    data_ready: Condvar,
    /// The reader waits here for room in the bucket.
    space_ready: Condvar,
    /// Mirror of `stop_writing`, read between write calls without the lock.
    stop_now: AtomicBool,
    /// Bytes of the writer's batch (`State::in_flight`) written so far.
    in_flight_written: AtomicUsize,
    /// Wakes the reader from a wait for input.
    waker: sys::Waker,
    clock: Clock,
    max_wait: Option<Duration>,
    /// The rate is unlimited.
    unpaced: bool,
    /// Unpaced: how the reader may write to stdout itself.
    direct: Option<output::Direct>,
    /// The first stopping signal's number (0: none yet), set without the
    /// lock so a second signal is recognized even while the lock is busy.
    first_signal: AtomicI32,
    /// The writer thread while it runs (0 otherwise), so a stop can
    /// interrupt a write blocked on a stalled stdout.
    writer_thread: Mutex<u64>,
}

/// Unpaced, how long stdout may make no room before a drop or fail policy
/// applies, in ns: longer than a consumer that is merely descheduled.
const STALL_NS: u64 = 100_000_000;

/// Unpaced, how long the reader watches a streaming input that ran dry
/// before it sleeps ([`input::read_all`]).
const LINGER: Duration = Duration::from_micros(50);

/// Shortest sleep of the writer at rates above 20,000/s, in ns.
const COALESCE_NS: u64 = 50_000;

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stop reading (and, unless `drain`, writing), waking every thread.
    fn stop(&self, drain: bool) {
        let mut st = self.lock();
        st.stop_reading = true;
        if !drain {
            st.stop_writing = true;
            self.stop_now.store(true, Ordering::SeqCst);
        }
        drop(st);
        self.waker.wake();
        self.data_ready.notify_all();
        self.space_ready.notify_all();
        if !drain {
            self.interrupt_writer();
        }
    }

    /// On the way out after a second signal: if the lock is free within a
    /// few milliseconds, move what is queued (and what the reader holds) to
    /// the dead letter and flush it, so leaving at once loses no record
    /// without a trace.
    fn evacuate_now(&self) {
        for _ in 0..20 {
            if let Ok(mut st) = self.state.try_lock() {
                // The writer stops after the record under way (fewer
                // records end up both written and dead-lettered).
                self.stop_now.store(true, Ordering::SeqCst);
                st.drain_in_flight(self.in_flight_written.load(Ordering::SeqCst));
                st.drain_undelivered();
                st.dead.finish();
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// If a stop was asked for and the writer is still running, interrupt
    /// the write it may be blocked in (it then finishes only the record
    /// under way).
    fn interrupt_writer(&self) {
        if !self.stop_now.load(Ordering::SeqCst) {
            return;
        }
        let thread = self.writer_thread.lock().unwrap_or_else(|e| e.into_inner());
        if *thread != 0 {
            sys::interrupt(*thread);
        }
    }

    fn snapshot(&self) -> Snapshot {
        let st = self.lock();
        let now = self.clock.now();
        Snapshot {
            counts: st.counts,
            departures: st.departures,
            depth: st.bucket.len() as u64,
            max_depth: st.bucket.max_depth() as u64,
            oldest_age_ns: st
                .bucket
                .oldest_arrival()
                .map_or(0, |t| now.saturating_sub(t)),
            writing_for_ns: st.writing_since.map_or(0, |t| now.saturating_sub(t)),
            elapsed_ns: now,
            reading_done: st.reading_done,
        }
    }

    fn summary(&self) -> Summary {
        let snap = self.snapshot();
        let max_wait_ns = self.lock().max_wait_ns;
        let elapsed_ms = snap.elapsed_ns as f64 / 1e6;
        Summary {
            counts: snap.counts,
            max_depth: snap.max_depth,
            max_wait_ms: max_wait_ns as f64 / 1e6,
            elapsed_ms,
            rate: snap.departures.rate(),
            span_ms: snap.departures.span_ns() as f64 / 1e6,
        }
    }

    /// The reader's hand-off: queue `seg`, applying the overflow policy.
    fn deliver(&self, seg: Segment) -> Flow {
        let mut st = self.lock();
        // Records count as read once they enter the bucket or meet the
        // policy; those still in the reader's hands are counted if drip
        // stops with them (as undelivered).
        st.counts.bytes_read += seg.bytes() as u64;
        // Unpaced, with nothing queued, the reader writes what stdout takes
        // at once itself; the rest goes the usual way.
        let seg = match self.direct.as_ref() {
            Some(direct) if direct.usable() && st.idle() => {
                st.writing_since = Some(self.clock.now());
                drop(st);
                let mut seg = seg;
                let mut written = direct.write(&seg, &self.stop_now);
                st = self.lock();
                let whole = written.records as usize;
                let begun = whole < seg.len() && written.bytes as usize > seg.bytes_of_first(whole);
                if st.stop_reading && begun && written.error.is_none() {
                    // Stopping (even with --drain): the writer may be gone,
                    // so the begun record is finished here. The records
                    // after it wait with the leftovers, where a second
                    // signal finds them.
                    let mut rest = seg.clone();
                    seg = rest.split_front(whole + 1);
                    if !rest.is_empty() {
                        st.leftover.push(rest);
                    }
                    let mut record = seg.clone();
                    record.split_front(whole);
                    st.finishing = Some(record);
                    drop(st);
                    written = direct.finish_record(&seg, written);
                    st = self.lock();
                    st.finishing = None;
                }
                let now = self.clock.now();
                match st.settle_direct(seg, written, now) {
                    Some(rest) => {
                        if st.tail.is_some() {
                            self.data_ready.notify_one();
                        }
                        match rest {
                            Some(rest) => rest,
                            None => return Flow::Continue,
                        }
                    }
                    None => {
                        drop(st);
                        self.stop(false);
                        return Flow::Stop;
                    }
                }
            }
            _ => seg,
        };
        // This read's records not yet offered.
        let mut next = Some(seg);
        loop {
            let now = self.clock.now();
            st.expire(now, self.max_wait);
            if st.stop_reading {
                // A parked read stays for `drain_undelivered`, before these.
                st.leftover.extend(next);
                return Flow::Stop;
            }
            // Oldest first: a read parked for the writer (unpaced) that it
            // has not taken yet goes before this one.
            let (seg, parked) = match st.pending.take() {
                Some(older) => (older, true),
                None => match next.take() {
                    Some(seg) => (seg, false),
                    None => return Flow::Continue,
                },
            };
            let State {
                bucket,
                counts,
                dead,
                last_take,
                writer_waiting,
                ..
            } = &mut *st;
            // Unpaced, one read can bring thousands of records at once; a
            // drop or fail policy applies only once stdout has stopped
            // making room for a while, never to the size of a read.
            let patient =
                self.unpaced && (*writer_waiting || now.saturating_sub(*last_take) < STALL_NS);
            let policy = if patient {
                Overflow::Block
            } else {
                bucket.policy()
            };
            let offered_len = seg.len() as u64;
            let offered = bucket.offer_as(policy, seg, now, &mut |s, f| {
                State::dispose(counts, dead, s, f)
            });
            counts.read += offered_len
                - match &offered {
                    Offered::Done => 0,
                    Offered::Wait(rest) | Offered::Overflowed(rest) => rest.len() as u64,
                };
            if st.writer_waiting && !st.bucket.is_empty() {
                self.data_ready.notify_one();
            }
            match offered {
                Offered::Done => {}
                Offered::Wait(rest) => {
                    let wants = rest.len().min(st.bucket.capacity() / 4).max(1);
                    // What did not fit is parked where the writer reaches
                    // it. Unpaced, the writer takes it along with the
                    // bucket: one hand-off per read, not per bucketful, and
                    // one read may be parked while the reader goes on
                    // reading; with two, it waits. Paced, the writer tops
                    // the bucket up from it, so a reader slow to wake never
                    // leaves the schedule without records.
                    st.pending = Some(rest);
                    if self.unpaced && !parked {
                        return Flow::Continue;
                    }
                    st.reader_wants = wants;
                    // With --max-wait, the oldest record's deadline makes
                    // room too, even while the writer is stuck in a write;
                    // a policy held back above applies when its time is up.
                    let expiry = self
                        .max_wait
                        .zip(st.bucket.oldest_arrival())
                        .map(|(max_wait, oldest)| oldest + max_wait.as_nanos() as u64 + 1);
                    let patience =
                        (policy != st.bucket.policy()).then_some(st.last_take + STALL_NS);
                    st = match expiry.into_iter().chain(patience).min() {
                        Some(deadline) => {
                            let timeout = Duration::from_nanos(deadline.saturating_sub(now));
                            self.space_ready
                                .wait_timeout(st, timeout)
                                .unwrap_or_else(|e| e.into_inner())
                                .0
                        }
                        None => self.space_ready.wait(st).unwrap_or_else(|e| e.into_inner()),
                    };
                    st.reader_wants = 0;
                }
                Offered::Overflowed(rest) => {
                    let record = st.counts.read + 1;
                    st.overflow = Some(OverflowError {
                        record,
                        capacity: st.bucket.capacity(),
                    });
                    st.leftover.push(rest);
                    st.leftover.extend(next);
                    drop(st);
                    self.stop(false);
                    return Flow::Stop;
                }
            }
        }
    }
}

/// The writer: release records when the pacer allows and write them out.
/// Returns the write error that ended it, if any (a closed pipe included).
fn write_loop(shared: &Shared, config: &Config, out: &mut dyn Write) -> Option<std::io::Error> {
    sys::set_timer_slack(1);
    if config.rate == rate::Rate::Unlimited {
        sys::set_batch_scheduling();
    }
    let mut pacer = Pacer::new(config.rate, config.burst, pacer::slack_for(config.rate));
    let mut batch: Vec<Segment> = Vec::new();
    // The whole record of a tail (`State::tail`) at the head of `batch`.
    let mut tail_record: Option<Segment> = None;
    // This batch is the last: the rest of a record, finished at a stop.
    let mut last = false;
    let coalesce = if config.rate.per_second() > 1e9 / COALESCE_NS as f64 {
        COALESCE_NS
    } else {
        0
    };
    loop {
        {
            let mut st = shared.lock();
            loop {
                if st.stop_writing {
                    // A record the reader began is finished, even now.
                    let (record, begun) = st.tail.take()?;
                    batch.push(record.rest_after(begun));
                    tail_record = Some(record);
                    last = true;
                    break;
                }
                let now = shared.clock.now();
                if st.expire(now, shared.max_wait) > 0 && st.reader_can_go() {
                    shared.space_ready.notify_one();
                }
                if !shared.unpaced && !st.stop_reading && st.top_up(now) {
                    // The parked read is all in: the reader may read on.
                    shared.space_ready.notify_one();
                }
                let available = st.bucket.len() as u64;
                // Unpaced, a read parked for the writer goes with the bucket.
                let parked = shared.unpaced && !st.stop_reading && st.pending.is_some();
                let begun = st.tail.is_some();
                if available == 0 && !parked && !begun {
                    if st.reading_done || st.stop_reading {
                        return None;
                    }
                    st.writer_waiting = true;
                    st = shared
                        .data_ready
                        .wait(st)
                        .unwrap_or_else(|e| e.into_inner());
                    st.writer_waiting = false;
                    continue;
                }
                let n = pacer.release(now, available);
                if n > 0 || parked || begun {
                    // The rest of a record the reader began goes first.
                    if let Some((record, begun)) = st.tail.take() {
                        batch.push(record.rest_after(begun));
                        tail_record = Some(record);
                    }
                    st.bucket.take(n as usize, &mut batch);
                    if let Some(first) = batch.first() {
                        st.max_wait_ns = st.max_wait_ns.max(now.saturating_sub(first.arrived));
                    }
                    if parked && st.bucket.is_empty() {
                        if let Some(held) = st.pending.take() {
                            st.counts.read += held.len() as u64;
                            batch.push(held);
                        }
                    }
                    st.writing_since = Some(now);
                    st.last_take = now;
                    if st.reader_can_go() {
                        shared.space_ready.notify_one();
                    }
                    break;
                }
                // At rates above 1/COALESCE a wake-up per record would cost
                // more than the records: wake at most every COALESCE and
                // write what has come due together. The schedule stays
                // absolute, so this delays records without losing rate.
                let mut wake = pacer.next_due().max(now + coalesce);
                if let (Some(max_wait), Some(oldest)) =
                    (shared.max_wait, st.bucket.oldest_arrival())
                {
                    wake = wake.min(oldest + max_wait.as_nanos() as u64 + 1);
                }
                let timeout = Duration::from_nanos(wake.saturating_sub(now));
                st = shared
                    .data_ready
                    .wait_timeout(st, timeout)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            // Where a second signal finds it, should the write block.
            st.in_flight.clone_from(&batch);
            st.in_flight_begun.clone_from(&tail_record);
            shared.in_flight_written.store(0, Ordering::SeqCst);
        }
        let stop = || shared.stop_now.load(Ordering::Relaxed);
        let progress = |bytes| shared.in_flight_written.store(bytes, Ordering::SeqCst);
        let written = if tail_record.is_some() {
            // The rest of a begun record is finished whatever happens.
            let mut first = output::write_batch(out, &batch[..1], &|| false, &progress);
            if first.error.is_some() || batch.len() == 1 {
                first
            } else if stop() {
                first.stopped = true;
                first
            } else {
                let done = first.bytes as usize;
                let rest = output::write_batch(out, &batch[1..], &stop, &|bytes| {
                    progress(done + bytes);
                });
                output::Written {
                    records: first.records + rest.records,
                    bytes: first.bytes + rest.bytes,
                    ..rest
                }
            }
        } else {
            output::write_batch(out, &batch, &stop, &progress)
        };
        let mut st = shared.lock();
        st.in_flight.clear();
        st.in_flight_begun = None;
        st.writing_since = None;
        st.counts.written += written.records;
        st.counts.bytes_written += written.bytes;
        st.departures.record(shared.clock.now(), written.records);
        let total: u64 = batch.iter().map(|s| s.len() as u64).sum();
        if let Some(record) = tail_record.take() {
            if written.records == 0 {
                // Not finished: the record goes to the dead letter whole.
                batch[0] = record;
            }
        }
        if written.records < total {
            // What was not written whole is undelivered.
            let mut skip = written.records as usize;
            let State { counts, dead, .. } = &mut *st;
            for mut seg in batch.drain(..) {
                if skip >= seg.len() {
                    skip -= seg.len();
                    continue;
                }
                seg.split_front(skip);
                skip = 0;
                State::dispose(counts, dead, seg, Fate::Undelivered);
            }
        }
        batch.clear();
        if written.error.is_some() || written.stopped || last {
            drop(st);
            if written.error.is_some() {
                shared.stop(false);
            }
            return written.error;
        }
    }
}

/// Total size of the inputs when all are regular files, for the ETA.
fn input_size(inputs: &[Input]) -> Option<u64> {
    inputs.iter().try_fold(0u64, |sum, input| match input {
        Input::Path(p) => std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| sum + m.len()),
        Input::Stdin => None,
    })
}

/// How drip ended, when it ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every input was read and every record accounted for.
    Finished,
    /// Some input could not be read (already reported); exit 1.
    InputFailed,
    /// Stopped by this signal.
    Signal(i32),
}

impl Ending {
    /// The exit status for this ending.
    pub fn status(self) -> i32 {
        match self {
            Ending::Finished => EXIT_OK,
            Ending::InputFailed => EXIT_ERROR,
            Ending::Signal(n) => 128 + n,
        }
    }
}

/// Run drip with `config`, writing records to `out`.
///
/// Prints input warnings, the progress display and the summary on stderr as
/// configured. A closed `out` (broken pipe) ends the run quietly as
/// [`Ending::Finished`].
///
/// # Errors
/// The dead letter or stats file cannot be written, a record is over
/// `--max-record` or `--capacity-bytes`, a write to `out` fails, or the
/// bucket overflows under `fail` ([`OverflowError`], exit status 3). The
/// summary is printed before the error is returned.
pub fn run(config: Config, out: Box<dyn Write + Send>) -> Result<Ending> {
    run_watching(config, out, None, None)
}

/// [`run`] writing to this process's stdout, which is also watched: when
/// its reader goes away (`| head`), drip ends quietly at once rather than
/// at its next write.
///
/// # Errors
/// As [`run`]; also when stdout cannot be duplicated.
pub fn run_stdout(config: Config) -> Result<Ending> {
    use std::os::fd::{AsFd, AsRawFd};
    let dup = || std::io::stdout().as_fd().try_clone_to_owned();
    let out = File::from(dup().context("stdout")?);
    let out_fd = out.as_raw_fd();
    let watch = dup().context("stdout")?;
    run_watching(config, Box::new(out), Some(out_fd), Some(watch))
}

/// `out_fd`: the descriptor `out` writes to (open while `out` lives), for
/// writing to it directly when unpaced. `watch_output`: a duplicate of it,
/// watched for its reader going away.
fn run_watching(
    config: Config,
    mut out: Box<dyn Write + Send>,
    out_fd: Option<std::os::fd::RawFd>,
    watch_output: Option<std::os::fd::OwnedFd>,
) -> Result<Ending> {
    let clock = Clock(Instant::now());
    let dead = DeadLetter::open(config.dead_letter.as_deref(), config.delimiter)?;
    let mut stats_file = match &config.stats_json {
        Some(path) => Some(
            File::create(path)
                .with_context(|| format!("--stats-json {}", path.display()))
                .map(BufWriter::new)?,
        ),
        None => None,
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            bucket: Bucket::new(config.capacity, config.capacity_bytes, config.overflow),
            counts: Counts::default(),
            departures: Departures::default(),
            dead,
            reading_done: false,
            stop_reading: false,
            stop_writing: false,
            writer_waiting: false,
            reader_wants: 0,
            writing_since: None,
            last_take: 0,
            max_wait_ns: 0,
            overflow: None,
            leftover: Vec::new(),
            pending: None,
            tail: None,
            write_error: None,
            in_flight: Vec::new(),
            in_flight_begun: None,
            finishing: None,
        }),
        data_ready: Condvar::new(),
        space_ready: Condvar::new(),
        stop_now: AtomicBool::new(false),
        in_flight_written: AtomicUsize::new(0),
        waker: sys::Waker::new().context("creating a pipe")?,
        clock,
        max_wait: config.max_wait,
        unpaced: config.rate == rate::Rate::Unlimited,
        direct: out_fd
            .filter(|_| config.rate == rate::Rate::Unlimited)
            .and_then(output::Direct::new),
        first_signal: AtomicI32::new(0),
        writer_thread: Mutex::new(0),
    });
    let ui = Arc::new(Mutex::new(Ui::new(
        config.progress,
        config.capacity,
        input_size(&config.inputs),
        config.rate.per_second(),
    )));

    let monitor = signals::Monitor::start(
        Arc::clone(&shared),
        Arc::clone(&ui),
        config.drain,
        config.stats_interval,
        stats_file.take(),
        watch_output,
    )?;

    // Unpaced, reading speed is drip's speed: linger on a streaming input.
    let linger = if shared.unpaced {
        LINGER
    } else {
        Duration::ZERO
    };
    let reader = {
        let shared = Arc::clone(&shared);
        let ui = Arc::clone(&ui);
        let inputs = config.inputs.clone();
        let mut splitter =
            Splitter::new(config.delimiter, config.max_record, config.capacity_bytes);
        thread::Builder::new()
            .name("drip-reader".into())
            .spawn(move || {
                let report = input::read_all(
                    &inputs,
                    &mut splitter,
                    &shared.waker,
                    linger,
                    &mut |seg| shared.deliver(seg),
                    &mut |msg| lock_ui(&ui).message(&msg),
                );
                shared.lock().reading_done = true;
                shared.data_ready.notify_all();
                report
            })
            .context("starting the reader thread")?
    };

    sys::install_interrupt_handler();
    *shared
        .writer_thread
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = sys::this_thread();
    let write_error = write_loop(&shared, &config, &mut *out);
    *shared
        .writer_thread
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = 0;
    // Whatever ended the writer, reading stops too.
    shared.stop(false);
    let report = reader.join().unwrap_or_default();
    // The reader may have met the error, writing directly.
    let write_error = write_error.or_else(|| shared.lock().write_error.take());
    let (signal, overflow, dead_error) = {
        let mut st = shared.lock();
        st.drain_undelivered();
        debug_assert_eq!(st.counts.read, st.counts.settled(), "{:?}", st.counts);
        let signal = match shared.first_signal.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n),
        };
        (signal, st.overflow.take(), st.dead.finish())
    };
    let summary = shared.summary();
    let stats_file = monitor.finish();
    lock_ui(&ui).finish();
    let ui = lock_ui(&ui);
    if config.stats || ui.showing_progress() {
        ui.message(&summary.line());
    }
    let mut stats_error = None;
    if let (Some(mut file), Some(path)) = (stats_file, &config.stats_json) {
        let result = writeln!(file, "{}", summary.json()).and_then(|()| file.flush());
        if let Err(e) = result {
            stats_error =
                Some(anyhow::Error::from(e).context(format!("--stats-json {}", path.display())));
        }
    }

    if let Some(e) = write_error {
        // The reader went away: a pipe's (EPIPE) or a socket's (ECONNRESET).
        if !matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ) {
            return Err(anyhow::Error::from(e).context("stdout"));
        }
    }
    if let Some(e) = dead_error.or(stats_error) {
        return Err(e);
    }
    if let Some(overflow) = overflow {
        return Err(overflow.into());
    }
    if let Some(n) = signal {
        return Ok(Ending::Signal(n));
    }
    if let Some(e) = report.record_error {
        return Err(e.into());
    }
    if report.failed_inputs > 0 {
        return Ok(Ending::InputFailed);
    }
    Ok(Ending::Finished)
}

fn lock_ui(ui: &Mutex<Ui>) -> MutexGuard<'_, Ui> {
    ui.lock().unwrap_or_else(|e| e.into_inner())
}
