//! The dead-letter file: where records that are not written to stdout go,
//! byte-exact, each with its delimiter, in the order they left
//! ([`crate::ledger::Ledger::take_dead`] hands them over).
//!
//! The file is written by a thread of its own, never under the state lock:
//! [`DeadLetter::write`] only queues. What is queued is flushed to the file
//! [`FLUSH_SOON`] after the last flush once the queue runs dry, and within
//! [`FLUSH_EVERY`] while shedding goes on (and, for a regular file, synced
//! to the disk at most once a second): at most one flush every
//! [`FLUSH_SOON`], however many records are shed. The queue is
//! bounded in bytes ([`BACKLOG`]): beyond it, [`Backlog::wait_for_room`]
//! holds the reader back (shedding must not go on without a trace), so
//! input stops being read until the dead letter drains. A failed write is
//! reported at once through the `failed` callback (drip stops, exit
//! status 1); nothing is written after it.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::bucket::{Piece, Segment};
use crate::sys::Unpoisoned;

/// Longest a record shed stays in drip's buffer before it is handed to
/// the file (written to the kernel), while shedding goes on.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// Least time between two flushes: once the queue runs dry, what was
/// written to the buffer is flushed this long after the last flush (so a
/// record refused at arrival reaches the file within a few ms, and a steady
/// trickle of shed records costs at most 200 flushes a second).
pub const FLUSH_SOON: Duration = Duration::from_millis(5);

/// How often a regular dead-letter file is synced to the disk (at most).
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Bytes queued for the dead letter beyond which reading waits.
pub const BACKLOG: usize = 1 << 20;

/// Bytes the dead-letter thread takes from the queue at a time.
const BATCH: usize = 16 * 1024;

/// One thing to write, in order.
#[derive(Debug)]
enum Item {
    /// Records; the last one gets the delimiter if it lacks it.
    Records(Segment),
    /// Raw bytes of a skipped record, and how many records end in them
    /// (0 or 1).
    Bytes(Vec<u8>, usize),
}

impl Item {
    fn len(&self) -> usize {
        match self {
            Item::Records(seg) => seg.bytes(),
            Item::Bytes(b, _) => b.len(),
        }
    }

    fn records(&self) -> usize {
        match self {
            Item::Records(seg) => seg.len(),
            Item::Bytes(_, ends) => *ends,
        }
    }
}

/// The queue between drip and the dead-letter thread.
#[derive(Debug, Default)]
struct Pending {
    items: VecDeque<Item>,
    /// Bytes queued or being written.
    bytes: usize,
    /// Records queued or being written.
    records: usize,
    /// No more items will come.
    closed: bool,
    /// The thread has written (or let go) everything and ended.
    finished: bool,
    error: Option<anyhow::Error>,
}

/// The queue, shared by drip's threads and the dead-letter thread.
#[derive(Debug, Default)]
pub struct Backlog {
    queue: Mutex<Pending>,
    /// Signalled when items arrive or the queue is closed.
    more: Condvar,
    /// Signalled when queued bytes were written (or dropped after an error).
    room: Condvar,
}

impl Backlog {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.queue.lock().unpoisoned()
    }

    /// Wait while more than [`BACKLOG`] bytes wait for the dead letter,
    /// asking `give_up` every few milliseconds (a stop). Returns at once
    /// when the queue has room, and after a failed write.
    pub fn wait_for_room(&self, give_up: &dyn Fn() -> bool) {
        loop {
            let q = self.lock();
            if q.bytes <= BACKLOG || q.error.is_some() {
                return;
            }
            // Woken when room is made; the stop `give_up` asks about is
            // the state's flag, which notifies nothing here (the writer
            // queues under the state's lock, so the queue's lock cannot
            // wait on it): looked at every 10 ms.
            drop(self.room.wait_timeout(q, Duration::from_millis(10)));
            // Asked without the queue's lock: `give_up` may take others.
            if give_up() {
                return;
            }
        }
    }

    /// No more items will come: the thread writes out the rest and ends.
    pub fn close(&self) {
        self.lock().closed = true;
        self.more.notify_all();
    }

    /// After [`Backlog::close`], wait at most `limit` for the thread to
    /// have written and flushed everything; returns the records still not
    /// written then (0 after a failed write: that is reported instead).
    pub fn wait_finished(&self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        let mut q = self.lock();
        while !q.finished && q.error.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return q.records;
            }
            q = self.room.wait_timeout(q, left).unpoisoned().0;
        }
        0
    }
}

/// The dead letter, when `--dead-letter` names one.
#[derive(Debug)]
pub struct DeadLetter {
    backlog: Arc<Backlog>,
    thread: Option<JoinHandle<()>>,
    delimiter: u8,
    /// While a skipped record (`--oversize skip`) is being written piece
    /// by piece: the records that left meanwhile, written after it.
    held: Option<Vec<Segment>>,
}

/// Called once, from the dead-letter thread, when a write fails.
pub type OnFailure = Box<dyn FnOnce() + Send>;

impl DeadLetter {
    /// Open `path` for appending and start its thread (none: records are
    /// only counted). `failed` is called when a write fails. A FIFO that
    /// no one reads is waited for while `give_up` says not to
    /// ([`crate::sys::open_to_write`]); given up, `None`.
    ///
    /// # Errors
    /// The file cannot be opened, its last record cannot be ended, or the
    /// thread cannot be started.
    pub fn open(
        path: Option<&Path>,
        delimiter: u8,
        failed: OnFailure,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<Option<DeadLetter>> {
        let Some(path) = path else {
            return Ok(Some(DeadLetter::none(delimiter)));
        };
        let name = format!("--dead-letter {}", path.display());
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        let Some(f) =
            crate::sys::open_to_write(&options, path, give_up).with_context(|| name.clone())?
        else {
            return Ok(None);
        };
        let regular = f.metadata().is_ok_and(|m| m.is_file());
        let mut out = BufWriter::with_capacity(64 * 1024, f);
        // Appending to a file whose last record lacks its delimiter
        // would merge two records: end that record first.
        if ends_without(path, delimiter) {
            out.write_all(&[delimiter]).with_context(|| name.clone())?;
        }
        let file = Output {
            name: PathBuf::from(name),
            out,
            regular,
            delimiter,
        };
        let backlog = Arc::new(Backlog::default());
        let thread = crate::sys::spawn("drip-dead-letter", {
            let backlog = Arc::clone(&backlog);
            move || run(&backlog, file, failed)
        })
        .context("starting the dead-letter thread")?;
        Ok(Some(DeadLetter {
            backlog,
            thread: Some(thread),
            delimiter,
            held: None,
        }))
    }

    /// No dead letter: records are only counted.
    pub fn none(delimiter: u8) -> DeadLetter {
        let backlog = Arc::new(Backlog::default());
        backlog.lock().finished = true;
        DeadLetter {
            backlog,
            thread: None,
            delimiter,
            held: None,
        }
    }

    /// The queue, for waiting on it ([`Backlog::wait_for_room`]).
    pub fn backlog(&self) -> Arc<Backlog> {
        Arc::clone(&self.backlog)
    }

    fn push(&self, item: Item) {
        if self.thread.is_none() || item.len() == 0 {
            return;
        }
        let mut q = self.backlog.lock();
        if q.error.is_some() {
            return;
        }
        q.bytes += item.len();
        q.records += item.records();
        q.items.push_back(item);
        drop(q);
        self.backlog.more.notify_one();
    }

    /// A piece of a skipped record ([`crate::input::OversizeSink`]), as
    /// read; the record gets its delimiter if it ends without one.
    pub fn piece(&mut self, bytes: &[u8], piece: Piece) {
        let mut data = bytes.to_vec();
        if piece == Piece::EndUnterminated {
            data.push(self.delimiter);
        }
        let ends = usize::from(piece != Piece::Part);
        self.push(Item::Bytes(data, ends));
        if piece == Piece::Part {
            self.held.get_or_insert_with(Vec::new);
        } else if let Some(held) = self.held.take() {
            self.write(&held);
        }
    }

    /// Queue `segs`' records, in order. Never waits.
    pub fn write(&mut self, segs: &[Segment]) {
        for seg in segs.iter().filter(|s| !s.is_empty()) {
            match &mut self.held {
                Some(held) => held.push(seg.clone()),
                None => self.push(Item::Records(seg.clone())),
            }
        }
    }

    /// Write out everything queued and stop the thread; returns the first
    /// error met, if any. Waits as long as the file takes.
    pub fn finish(&mut self) -> Option<anyhow::Error> {
        if self.held.is_some() {
            // Leaving in the middle of a skipped record: end it.
            self.piece(&[], Piece::EndUnterminated);
        }
        self.backlog.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.backlog.lock().error.take()
    }
}

/// The open file, on the dead-letter thread.
struct Output {
    name: PathBuf,
    out: BufWriter<File>,
    regular: bool,
    delimiter: u8,
}

impl Output {
    fn write(&mut self, item: &Item) -> std::io::Result<()> {
        match item {
            Item::Bytes(b, _) => self.out.write_all(b),
            Item::Records(seg) => {
                let bytes = seg.as_bytes();
                self.out.write_all(bytes)?;
                if bytes.last() != Some(&self.delimiter) {
                    self.out.write_all(&[self.delimiter])?;
                }
                Ok(())
            }
        }
    }
}

/// The file and when it was last flushed and synced.
struct Flusher {
    file: Output,
    last_flush: Instant,
    last_sync: Instant,
    /// Written to the buffer since the last flush.
    unflushed: bool,
}

impl Flusher {
    /// How long the thread may wait for more, with the queue dry, before
    /// it must flush.
    fn flush_in(&self) -> Option<Duration> {
        self.unflushed
            .then(|| (self.last_flush + FLUSH_SOON).saturating_duration_since(Instant::now()))
    }

    /// Write `items`; flush when `closing`, when [`FLUSH_EVERY`] has
    /// passed, or when the queue is `dry` and [`FLUSH_SOON`] has passed;
    /// sync a regular file at most every [`SYNC_EVERY`].
    fn write(&mut self, items: &[Item], closing: bool, dry: bool) -> std::io::Result<()> {
        for item in items {
            self.file.write(item)?;
        }
        self.unflushed |= !items.is_empty();
        let since = self.last_flush.elapsed();
        let due = closing || since >= FLUSH_EVERY || (dry && since >= FLUSH_SOON);
        if !self.unflushed || !due {
            return Ok(());
        }
        self.file.out.flush()?;
        self.last_flush = Instant::now();
        self.unflushed = false;
        if self.file.regular && (closing || self.last_sync.elapsed() >= SYNC_EVERY) {
            self.file.out.get_ref().sync_data()?;
            self.last_sync = Instant::now();
        }
        Ok(())
    }
}

/// The next batch to write (at most about [`BATCH`] bytes), once there is
/// one, the queue is closed, or a flush is due; whether it is the last;
/// whether writing may go on; and whether the queue is dry after it.
fn next_batch(backlog: &Backlog, flusher: &Flusher) -> (Vec<Item>, bool, bool, bool) {
    let mut q = backlog.lock();
    while q.items.is_empty() && !q.closed {
        match flusher.flush_in() {
            None => q = backlog.more.wait(q).unpoisoned(),
            Some(left) if left.is_zero() => break,
            Some(left) => {
                q = backlog.more.wait_timeout(q, left).unpoisoned().0;
            }
        }
    }
    // A bounded batch, so that room is made (and reading goes on) as the
    // file takes it, not only after the whole queue.
    let mut items = Vec::new();
    let mut taken = 0;
    while taken < BATCH {
        let Some(item) = q.items.pop_front() else {
            break;
        };
        taken += item.len();
        items.push(item);
    }
    let dry = q.items.is_empty();
    (items, q.closed && dry, q.error.is_none(), dry)
}

/// The dead-letter thread: write what is queued, flush [`FLUSH_SOON`] after
/// the last flush once the queue is dry and within [`FLUSH_EVERY`] while it
/// is not, sync at most every [`SYNC_EVERY`], until closed.
fn run(backlog: &Backlog, file: Output, failed: OnFailure) {
    let mut failed = Some(failed);
    let mut flusher = Flusher {
        file,
        last_flush: Instant::now(),
        last_sync: Instant::now(),
        unflushed: false,
    };
    loop {
        let (items, closing, ok, dry) = next_batch(backlog, &flusher);
        let result = if ok {
            flusher.write(&items, closing, dry)
        } else {
            Ok(())
        };
        let mut q = backlog.lock();
        for item in &items {
            q.bytes -= item.len();
            q.records -= item.records();
        }
        if let Err(e) = result {
            let name = flusher.file.name.display().to_string();
            q.error = Some(anyhow::Error::from(e).context(name));
            // Nothing more is written: what is queued is let go.
            q.items.clear();
            q.bytes = 0;
            q.records = 0;
            flusher.unflushed = false;
        }
        let done = q.closed && q.items.is_empty() && !flusher.unflushed;
        q.finished = done;
        let report = q.error.is_some();
        drop(q);
        backlog.room.notify_all();
        if report {
            if let Some(failed) = failed.take() {
                failed();
            }
        }
        if done {
            return;
        }
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
