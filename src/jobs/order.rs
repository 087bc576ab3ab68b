//! `--keep-order`: each job's output reaches stdout in input order, whole,
//! whatever order the jobs end in.
//!
//! Records are numbered as their jobs start (1, 2, …: input order). A job's
//! output (every attempt's, in turn) is held until the job's record is done
//! and every record before it has been written out; then the run of
//! consecutive done records goes to stdout. What is held is bounded by a
//! window of records: record n may start only while n is less than the
//! oldest record not yet written out plus the window, so a long job (a
//! retry, a slow server) holds new starts back rather than memory growing.
//! A record's output stays in memory up to [`IN_MEMORY`] bytes and is moved
//! to an unlinked temporary file beyond that.
//!
//! Locks: the outputs held are under one lock, never held across a write
//! to stdout (a stalled stdout would hold every job ending, and whoever
//! asks about the window, behind it). The run of done records is taken
//! out under it and written after, when the run's turn comes (the writing
//! turn goes to runs in input order). The window is read without a lock.
//! A run taken out and not written out yet is kept in view (`in_hand`, the
//! bytes of each record's output still to be written), so drip leaving
//! without the threads counts it as not written.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};

use super::attempt::{pass, Unwritten};
use crate::sys::Unpoisoned;

/// Records started ahead of the oldest one whose output is not yet written,
/// unless `--order-window` says.
pub const DEFAULT_WINDOW: usize = 1000;

/// Bytes of one record's output held in memory before it moves to a file.
pub const IN_MEMORY: usize = 64 * 1024;

/// Where the outputs are written: drip's stdout, behind its lock.
pub type Out = Mutex<Box<dyn Write + Send>>;

/// One record's output, held until its turn.
#[derive(Debug, Default)]
pub struct HeldOutput {
    memory: Vec<u8>,
    file: Option<File>,
}

impl Write for HeldOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.file.is_none() && self.memory.len() + buf.len() > IN_MEMORY {
            let mut file = tempfile::tempfile()?;
            file.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(file);
        }
        match &mut self.file {
            Some(file) => file.write(buf),
            None => {
                self.memory.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl HeldOutput {
    /// Write it all to `out` (a write interrupted while `give_up()` says
    /// so ends it: [`pass`]); the bytes not written.
    fn write_to(self, out: &mut dyn Write, give_up: &dyn Fn() -> bool) -> u64 {
        let left = match self.file {
            Some(mut file) => {
                let len = file.metadata().map_or(0, |m| m.len());
                match file.seek(SeekFrom::Start(0)) {
                    Ok(_) => pass(&mut file, out, len, give_up),
                    Err(_) => len,
                }
            }
            None => pass(
                &mut &self.memory[..],
                out,
                self.memory.len() as u64,
                give_up,
            ),
        };
        let _ = out.flush();
        left
    }

    /// Its size, bytes.
    fn len(&self) -> u64 {
        match &self.file {
            Some(file) => file.metadata().map_or(0, |m| m.len()),
            None => self.memory.len() as u64,
        }
    }

    /// Add `output` to it.
    fn append(&mut self, output: HeldOutput) -> io::Result<()> {
        match output.file {
            Some(mut file) => {
                file.seek(SeekFrom::Start(0))?;
                io::copy(&mut file, self)?;
            }
            None => self.write_all(&output.memory)?,
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Turns {
    /// The oldest record whose output is not taken out to be written yet.
    next: u64,
    /// Output of records after `next` (and of `next` while it runs), and
    /// whether the record is done.
    held: BTreeMap<u64, (HeldOutput, bool)>,
}

/// The records' outputs, written out in input order.
#[derive(Debug)]
pub struct Order {
    window: u64,
    line: Mutex<Turns>,
    /// The oldest record whose output is not written out yet once the
    /// run being written is done: the turn to write goes to the run that
    /// begins with it.
    turn: Mutex<u64>,
    /// Notified as the turn moves.
    turn_moved: Condvar,
    /// The oldest record whose output is not written out yet, read without
    /// a lock (the window); it moves on as each record of a run is written.
    written_up_to: AtomicU64,
    /// The records of runs taken out of the line and not written out yet
    /// (waiting for their turn, or being written), by number: the bytes of
    /// each one's output not written yet. A short lock, taken last and
    /// never held across a write; whoever removes a record's entry counts
    /// what of it was not written, so nothing is counted twice.
    in_hand: Mutex<BTreeMap<u64, u64>>,
    /// Leaving, a write was cut short (stdout took no more): the outputs
    /// not written yet are given up without a try.
    stalled: AtomicBool,
}

impl Order {
    /// Outputs in order, at most `window` (≥ 1) records started ahead of
    /// the oldest not written out.
    pub fn new(window: usize) -> Order {
        Order {
            window: window.max(1) as u64,
            line: Mutex::new(Turns {
                next: 1,
                held: BTreeMap::new(),
            }),
            turn: Mutex::new(1),
            turn_moved: Condvar::new(),
            written_up_to: AtomicU64::new(1),
            in_hand: Mutex::new(BTreeMap::new()),
            stalled: AtomicBool::new(false),
        }
    }

    fn lock_in_hand(&self) -> MutexGuard<'_, BTreeMap<u64, u64>> {
        self.in_hand.lock().unpoisoned()
    }

    /// Record `number`'s output is written, or given up, with `left` bytes
    /// not written: what to count, nothing if a hurried exit
    /// ([`Order::flush_all`]) counted it already.
    fn let_go(&self, number: u64, left: u64) -> Unwritten {
        match self.lock_in_hand().remove(&number) {
            Some(_) => Unwritten::of(left),
            None => Unwritten::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Turns> {
        self.line.lock().unpoisoned()
    }

    /// Whether record `number` (from 1) may start: it is inside the window.
    /// Takes no lock: safe to ask under any.
    pub fn admits(&self, number: u64) -> bool {
        number
            < self
                .written_up_to
                .load(Ordering::SeqCst)
                .saturating_add(self.window)
    }

    /// Add `output` to what record `number` has written so far.
    ///
    /// # Errors
    /// The output could not be held (a temporary file could not be written).
    pub fn hold(&self, number: u64, output: HeldOutput) -> io::Result<()> {
        let mut line = self.lock();
        let (held, _) = line.held.entry(number).or_default();
        match output.file {
            None if held.file.is_none() && held.memory.is_empty() => held.memory = output.memory,
            _ => held.append(output)?,
        }
        Ok(())
    }

    /// Record `number` is done: write out, to `out`, every done record's
    /// output from the oldest on, in order, up to the first not done; a
    /// write interrupted while `give_up()` says so (drip is leaving) ends
    /// that output there, and no output after it is tried (stdout is
    /// stalled). Leaving, the outputs are still written as far as stdout
    /// takes them. A write error ends nothing else: the records' fates
    /// are already settled, and stdout's reader going away is noticed
    /// elsewhere. Returns what was not written.
    pub fn done(&self, number: u64, out: &Out, give_up: &dyn Fn() -> bool) -> Unwritten {
        let (first, run) = {
            let mut line = self.lock();
            line.held.entry(number).or_default().1 = true;
            let first = line.next;
            let mut run = Vec::new();
            let mut in_hand = self.lock_in_hand();
            while let Some((_, true)) = line.held.get(&line.next) {
                let next = line.next;
                let held = line.held.remove(&next).expect("looked at").0;
                in_hand.insert(next, held.len());
                run.push(held);
                line.next += 1;
            }
            (first, run)
        };
        if run.is_empty() {
            return Unwritten::default();
        }
        let mut cut = Unwritten::default();
        let stalled = || self.stalled.load(Ordering::SeqCst);
        if !self.wait_turn(first, &stalled) {
            for (number, held) in (first..).zip(run) {
                cut = cut.and(self.let_go(number, held.len()));
            }
            return cut;
        }
        let after = first + run.len() as u64;
        {
            let mut out = out.lock().unpoisoned();
            for (number, held) in (first..).zip(run) {
                // Leaving, the outputs go out as far as stdout takes them:
                // once a write was cut short, the rest are not tried (each
                // would block until the next interruption).
                let left = if stalled() {
                    held.len()
                } else {
                    let mut tally = Tally {
                        out: &mut **out,
                        in_hand: &self.in_hand,
                        number,
                    };
                    let left = held.write_to(&mut tally, give_up);
                    if left > 0 && give_up() {
                        self.stalled.store(true, Ordering::SeqCst);
                    }
                    left
                };
                cut = cut.and(self.let_go(number, left));
                // The window moves on as each record is written out.
                self.written_up_to.store(number + 1, Ordering::SeqCst);
            }
        }
        let mut turn = self.turn.lock().unpoisoned();
        *turn = after;
        drop(turn);
        self.turn_moved.notify_all();
        cut
    }

    /// Wait until the run beginning with record `first` may be written
    /// (every record before it is written out); `false` once `give_up()`
    /// says so first. Only the run holding the turn makes `give_up()` say
    /// so (its write cut short, leaving), and it moves the turn next: the
    /// turn's moving wakes the wait, which looks at nothing on a timer.
    fn wait_turn(&self, first: u64, give_up: &dyn Fn() -> bool) -> bool {
        let mut turn = self.turn.lock().unpoisoned();
        while *turn != first {
            if give_up() {
                return false;
            }
            turn = self.turn_moved.wait(turn).unpoisoned();
        }
        true
    }

    /// At a hurried exit: the outputs still held, and those of the runs
    /// taken out and not written out yet (waiting for their turn, or being
    /// written: what is left of them), as not written (drip leaves at once:
    /// writing them could block on a stalled stdout). Waits for no lock
    /// but the short one of the runs taken out: with the outputs' lock
    /// busy, the outputs held are not counted here. Returns what was not
    /// written.
    pub fn flush_all(&self) -> Unwritten {
        let held = match self.line.try_lock() {
            Ok(mut line) => std::mem::take(&mut line.held),
            Err(TryLockError::Poisoned(e)) => std::mem::take(&mut e.into_inner().held),
            Err(TryLockError::WouldBlock) => BTreeMap::new(),
        };
        let mut cut = Unwritten::default();
        for (_, (held, _)) in held {
            cut = cut.and(Unwritten::of(held.len()));
        }
        for (_, left) in std::mem::take(&mut *self.lock_in_hand()) {
            cut = cut.and(Unwritten::of(left));
        }
        cut
    }
}

/// drip's stdout as one record's output is written to it: each write
/// takes what it wrote off the record's bytes left in `in_hand`.
struct Tally<'a> {
    out: &'a mut dyn Write,
    in_hand: &'a Mutex<BTreeMap<u64, u64>>,
    number: u64,
}

impl Write for Tally<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        let mut in_hand = self.in_hand.lock().unpoisoned();
        if let Some(left) = in_hand.get_mut(&self.number) {
            *left = left.saturating_sub(n as u64);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc, Condvar};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    fn out() -> (Out, std::sync::Arc<Mutex<Vec<u8>>>) {
        #[derive(Clone)]
        struct Shared(std::sync::Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let bytes = std::sync::Arc::new(Mutex::new(Vec::new()));
        (
            Mutex::new(Box::new(Shared(std::sync::Arc::clone(&bytes)))),
            bytes,
        )
    }

    fn held(bytes: &[u8]) -> HeldOutput {
        let mut h = HeldOutput::default();
        h.write_all(bytes).unwrap();
        h
    }

    #[test]
    fn outputs_leave_in_input_order_whatever_order_jobs_end_in() {
        let order = Order::new(10);
        let (sink, written) = out();
        for (n, text) in [(3, "c\n"), (1, "a\n"), (2, "b1\n"), (2, "b2\n")] {
            order.hold(n, held(text.as_bytes())).unwrap();
        }
        order.done(3, &sink, &|| false);
        order.done(2, &sink, &|| false);
        assert!(written.lock().unwrap().is_empty(), "1 is not done");
        order.done(1, &sink, &|| false);
        assert_eq!(&*written.lock().unwrap(), b"a\nb1\nb2\nc\n");
        // A record with no output still takes its turn.
        order.done(5, &sink, &|| false);
        order.hold(4, held(b"d\n")).unwrap();
        order.done(4, &sink, &|| false);
        assert_eq!(&*written.lock().unwrap(), b"a\nb1\nb2\nc\nd\n");
    }

    #[test]
    fn the_oldest_record_holds_the_window() {
        let order = Order::new(3);
        let (sink, _) = out();
        assert!(order.admits(3) && !order.admits(4));
        order.done(2, &sink, &|| false);
        order.done(3, &sink, &|| false);
        assert!(!order.admits(4), "1 still holds the window");
        order.done(1, &sink, &|| false);
        assert!(order.admits(6) && !order.admits(7));
    }

    #[test]
    fn a_large_output_moves_to_a_file_and_comes_back_whole() {
        let order = Order::new(2);
        let (sink, written) = out();
        let big: Vec<u8> = (0..3 * IN_MEMORY).map(|i| (i % 251) as u8).collect();
        let h = held(&big);
        assert!(h.file.is_some() && h.memory.is_empty());
        order.hold(2, h).unwrap();
        order.hold(2, held(b"tail")).unwrap();
        order.hold(1, held(b"first\n")).unwrap();
        order.done(2, &sink, &|| false);
        order.done(1, &sink, &|| false);
        let mut expected = b"first\n".to_vec();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(b"tail");
        assert!(*written.lock().unwrap() == expected);
    }

    /// A stdout that takes nothing beginning with `stall_on` until `open`
    /// is set, saying when a write waits.
    struct Stalled {
        stall_on: u8,
        open: Arc<(Mutex<bool>, Condvar)>,
        waiting: mpsc::Sender<()>,
        bytes: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (open, moved) = &*self.open;
            let mut open = open.lock().unwrap();
            if buf.first() == Some(&self.stall_on) && !*open {
                let _ = self.waiting.send(());
            }
            while buf.first() == Some(&self.stall_on) && !*open {
                open = moved.wait(open).unwrap();
            }
            self.bytes.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A [`Stalled`] stdout as an [`Out`], with what a test watches and
    /// frees it by.
    struct StalledOut {
        sink: Arc<Out>,
        open: Arc<(Mutex<bool>, Condvar)>,
        /// The bytes written so far.
        bytes: Arc<Mutex<Vec<u8>>>,
        stalled: mpsc::Receiver<()>,
    }

    impl StalledOut {
        /// A stdout that stalls on the writes beginning with `stall_on`.
        fn new(stall_on: u8) -> Self {
            let open = Arc::new((Mutex::new(false), Condvar::new()));
            let bytes = Arc::new(Mutex::new(Vec::new()));
            let (waiting, stalled) = mpsc::channel();
            let sink: Arc<Out> = Arc::new(Mutex::new(Box::new(Stalled {
                stall_on,
                open: Arc::clone(&open),
                waiting,
                bytes: Arc::clone(&bytes),
            })));
            Self {
                sink,
                open,
                bytes,
                stalled,
            }
        }

        /// Wait until a write stalls (10 s at most).
        fn wait_for_a_stall(&self) {
            self.stalled.recv_timeout(Duration::from_secs(10)).unwrap();
        }

        /// Let every write through from now on.
        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }

        /// Record `number` done in `order` on a thread of its own, written
        /// here.
        fn done_on_a_thread(&self, order: &Arc<Order>, number: u64) -> JoinHandle<Unwritten> {
            let (order, sink) = (Arc::clone(order), Arc::clone(&self.sink));
            std::thread::spawn(move || order.done(number, &sink, &|| false))
        }
    }

    #[test]
    fn a_stalled_write_holds_neither_the_window_nor_the_outputs() {
        let order = Arc::new(Order::new(2));
        let out = StalledOut::new(b'a');
        order.hold(1, held(b"a\n")).unwrap();
        let first = out.done_on_a_thread(&order, 1);
        out.wait_for_a_stall();
        // Record 1 is being written: the others go on, bounded in time.
        let (said, answer) = mpsc::channel();
        let second = {
            let (order, sink) = (Arc::clone(&order), Arc::clone(&out.sink));
            std::thread::spawn(move || {
                said.send((order.admits(2), order.admits(3))).unwrap();
                order.hold(2, held(b"b\n")).unwrap();
                said.send((true, true)).unwrap();
                order.done(2, &sink, &|| false)
            })
        };
        let answers = (0..2)
            .map(|_| answer.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect::<Vec<_>>();
        assert_eq!(answers[0], (true, false), "1 not written holds the window");
        assert!(out.bytes.lock().unwrap().is_empty());
        out.open();
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(&*out.bytes.lock().unwrap(), b"a\nb\n");
        assert!(order.admits(4) && !order.admits(5));
    }

    #[test]
    fn the_window_moves_on_as_each_record_of_a_run_is_written() {
        let order = Arc::new(Order::new(2));
        let out = StalledOut::new(b'b');
        order.hold(2, held(b"b\n")).unwrap();
        order.done(2, &out.sink, &|| false);
        order.hold(1, held(b"a\n")).unwrap();
        // The run 1, 2: 1 is written, 2 stalls.
        let run = out.done_on_a_thread(&order, 1);
        out.wait_for_a_stall();
        assert_eq!(&*out.bytes.lock().unwrap(), b"a\n");
        assert!(order.admits(3) && !order.admits(4), "1 is written out");
        out.open();
        run.join().unwrap();
        assert!(order.admits(4) && !order.admits(5));
    }

    #[test]
    fn a_hurried_exit_counts_the_runs_taken_out_and_not_written() {
        let order = Arc::new(Order::new(10));
        let out = StalledOut::new(b'a');
        // Record 1's run is being written (stdout took its first piece,
        // then nothing); record 2's run is taken out and waits for its
        // turn; record 3's output is still held. None of the threads lets
        // go.
        let mut one = vec![b'x'; crate::jobs::attempt::PIECE];
        one.extend_from_slice(b"a1\n");
        order.hold(1, held(&one)).unwrap();
        let first = out.done_on_a_thread(&order, 1);
        out.wait_for_a_stall();
        order.hold(2, held(b"bb2\n")).unwrap();
        let second = out.done_on_a_thread(&order, 2);
        let start = Instant::now();
        while order.lock().next != 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "2 not taken out");
            std::thread::sleep(Duration::from_millis(1));
        }
        order.hold(3, held(b"c\n")).unwrap();
        assert_eq!(
            order.flush_all(),
            Unwritten {
                outputs: 3,
                bytes: 3 + 4 + 2
            }
        );
        // Let go at last, the threads count nothing twice.
        out.open();
        assert_eq!(first.join().unwrap(), Unwritten::default());
        assert_eq!(second.join().unwrap(), Unwritten::default());
    }
}
