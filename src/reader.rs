//! The reader thread: reads the inputs ([`crate::input`]) and hands each
//! read's records to admission, waiting while `block` holds it back.
//!
//! Unpaced (`--rate inf`), while nothing is queued, it writes a read to
//! stdout itself ([`crate::output::Direct`]) and hands on only what stdout did not
//! take at once.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::bucket::{Offered, Segment};
use crate::cost::Cost;
use crate::input::Input;
use crate::input::{self, Flow, OwnFile, ReadReport, Splitter};
use crate::jobs::resume::Done;
use crate::progress::{lock_ui, Ui};
use crate::state::{OverflowError, Shared, State, STALL_NS};
use crate::sys::Unpoisoned;

/// Unpaced, how long the reader watches a streaming input that ran dry
/// before it sleeps ([`input::read_all`]).
const LINGER: Duration = Duration::from_micros(50);

/// What the reader does to each read before admission sees it.
pub(crate) struct Screen {
    /// `--cost`: the first record whose cost cannot be read is named once
    /// on stderr (not with `--quiet`).
    pub cost: Option<Cost>,
    /// `--key host`: the first record that is not a URL with a host is
    /// named once on stderr (by its number: a record may hold a secret).
    pub host: bool,
    /// `--resume`: records done in earlier runs are skipped.
    pub done: Option<Done>,
    /// The record delimiter.
    pub delimiter: u8,
    /// With `--exec`, records read from stdin: an argument of the command
    /// after the record's place that names a file (`drip --exec curl {}
    /// urls.txt`), said once on stderr (not with `--quiet`).
    pub exec_file: Option<String>,
}

/// Start the reader thread over `inputs`, refusing any that is one of
/// drip's `own` files, each read passed through `screen`; it returns how
/// reading went.
///
/// # Errors
/// The thread cannot be started.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    ui: Arc<Mutex<Ui>>,
    inputs: Vec<Input>,
    own: Vec<OwnFile>,
    splitter: Splitter,
    screen: Screen,
) -> Result<JoinHandle<ReadReport>> {
    crate::sys::spawn("drip-reader", move || {
        read(&shared, &ui, &inputs, &own, splitter, screen)
    })
    .context("starting the reader thread")
}

/// The reader: its thread, or what reading on drip's main thread came to.
pub(crate) enum Reader {
    Thread(JoinHandle<ReadReport>),
    Done(ReadReport),
}

impl Reader {
    /// Read `inputs` (as [`spawn`] says): to their end on this thread
    /// when `at_hand` (the input is all there and its reading never
    /// waits, not even for room: the caller makes sure), else on a
    /// thread of its own.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub(crate) fn start(
        shared: Arc<Shared>,
        ui: Arc<Mutex<Ui>>,
        inputs: Vec<Input>,
        own: Vec<OwnFile>,
        splitter: Splitter,
        screen: Screen,
        at_hand: bool,
    ) -> Result<Reader> {
        if at_hand {
            let report = read(&shared, &ui, &inputs, &own, splitter, screen);
            return Ok(Reader::Done(report));
        }
        spawn(shared, ui, inputs, own, splitter, screen).map(Reader::Thread)
    }

    /// How reading went, once it is over.
    pub(crate) fn join(self) -> ReadReport {
        match self {
            Reader::Thread(thread) => thread.join().unwrap_or_default(),
            Reader::Done(report) => report,
        }
    }
}

/// Read `inputs` to their end on this thread, as the reader thread does
/// ([`spawn`]): for an input all there already, whose reading never
/// waits (see [`Reader::start`]).
fn read(
    shared: &Shared,
    ui: &Mutex<Ui>,
    inputs: &[Input],
    own: &[OwnFile],
    mut splitter: Splitter,
    screen: Screen,
) -> ReadReport {
    // Unpaced, reading speed is drip's speed: linger on a streaming input.
    let linger = if shared.unpaced {
        LINGER
    } else {
        Duration::ZERO
    };
    shared.stops.set_reader(crate::sys::this_thread());
    // Stopped before reading began (a signal while drip's own files
    // were opened): not one record is read.
    if shared.lock().stop.reading {
        return ReadReport::default();
    }
    let mut costs = screen.cost.map(|c| CostCheck { cost: c, seen: 0 });
    let mut hosts = screen.host;
    let mut done = screen.done;
    // The place in the input of the next record handed on.
    let mut next_number = 1u64;
    if let Some(msg) = done.as_ref().and_then(passed_over) {
        lock_ui(ui).notice(&msg);
    }
    if let Some(msg) = from_stdin(reads_a_terminal(inputs), screen.exec_file.as_deref()) {
        lock_ui(ui).notice(&msg);
    }
    let report = input::read_all(
        inputs,
        &mut splitter,
        &shared.waker,
        linger,
        own,
        &mut |mut seg| {
            seg.number = next_number;
            next_number += seg.len() as u64;
            if let Some(check) = costs.as_mut() {
                if let Some(msg) = check.first_unreadable(&seg) {
                    lock_ui(ui).notice(&msg);
                    costs = None;
                }
            }
            let flow = match done.as_mut() {
                None if seg.is_empty() => Flow::Continue,
                None => deliver(shared, seg),
                Some(done) => deliver_not_done(shared, done, seg, screen.delimiter),
            };
            if hosts {
                if let Some(msg) = first_keyless(shared) {
                    lock_ui(ui).notice(&msg);
                    hosts = false;
                }
            }
            flow
        },
        &mut |msg| lock_ui(ui).message(&msg),
    );
    read_to_the_end(shared, &mut splitter, &report);
    report
}

/// Hand on the records of `seg` that `--resume` does not find `done`, in
/// runs consecutive in the input ([`skip_done`]), until one is told to
/// stop.
fn deliver_not_done(shared: &Shared, done: &mut Done, seg: Segment, delimiter: u8) -> Flow {
    for run in skip_done(shared, done, seg, delimiter) {
        if deliver(shared, run) == Flow::Stop {
            return Flow::Stop;
        }
    }
    Flow::Continue
}

/// The reading ended as `report` says: the record over the limits and
/// what followed it in the read (consumed, never offered) kept as
/// undelivered, the reading marked done, the writer woken.
fn read_to_the_end(shared: &Shared, splitter: &mut Splitter, report: &ReadReport) {
    shared.stops.set_reader(0);
    let mut st = shared.lock();
    if report.record_error.is_some() {
        st.reading.leftover.extend(splitter.take_rest());
    }
    st.reading.done = true;
    drop(st);
    shared.data_ready.notify_all();
}

/// Said once (unless `--quiet`) when records are read from a terminal: a
/// drip that waits for typed lines looks stuck (`drip --exec curl {}
/// urls.txt`: the file went to curl).
const FROM_THE_TERMINAL: &str = "reading records from the terminal (end with Ctrl-D)";

/// What is said once as drip starts reading stdin, if anything: that it
/// reads the terminal (`terminal`), and that `exec_file`, a file named
/// after the record's place in `--exec`'s command, went to the command:
/// in one line when both.
fn from_stdin(terminal: bool, exec_file: Option<&str>) -> Option<String> {
    let file = exec_file.map(|f| {
        format!("{f} is an argument of the command (put it before --exec to read records from it)")
    });
    match (terminal, file) {
        (true, Some(file)) => Some(format!("{FROM_THE_TERMINAL}; --exec: {file}")),
        (true, None) => Some(FROM_THE_TERMINAL.into()),
        (false, Some(file)) => Some(format!("--exec: records are read from stdin; {file}")),
        (false, None) => None,
    }
}

/// An argument of `--exec`'s `command` that names a file and comes after
/// the record's place (the last argument with `{}`), shown as a key is
/// (`text_key`): `urls.txt` in `curl -sS {} urls.txt`, meant as drip's FILE
/// but taken by the command. Not an option nor an option's value (`-o
/// out.txt`; after `--`, any), not one with `{`; none when the record is
/// appended last or goes on the job's stdin (no `{}`), where a file given
/// (`python3 fetch.py`) is the command's own.
pub(crate) fn file_after_the_record(command: &[String]) -> Option<String> {
    let record = command.iter().rposition(|a| a.contains("{}"))?;
    let option = |a: &String| a.starts_with('-') && a != "--";
    (record + 1..command.len())
        .filter(|&i| !option(&command[i - 1]))
        .map(|i| &command[i])
        .find(|a| !a.starts_with('-') && !a.contains('{') && std::path::Path::new(a).is_file())
        .map(|a| crate::report::spell::text_key(Some(a.as_bytes())))
}

/// Whether stdin is among `inputs` and is a terminal.
fn reads_a_terminal(inputs: &[Input]) -> bool {
    use std::io::IsTerminal;
    inputs.iter().any(|i| matches!(i, Input::Stdin)) && std::io::stdin().is_terminal()
}

/// What `--resume` says of the lines of its joblog it passed over, if any.
fn passed_over(done: &Done) -> Option<String> {
    let mut what = Vec::new();
    if done.torn_bytes > 0 {
        what.push(format!(
            "a last line cut short ({} bytes) is passed over",
            done.torn_bytes
        ));
    }
    if done.unreadable_lines > 0 {
        what.push(format!(
            "{} lines that are not joblog entries are passed over",
            done.unreadable_lines
        ));
    }
    (!what.is_empty()).then(|| format!("--resume: {}", what.join("; ")))
}

/// `--resume`: the records of `seg` done in an earlier run are read and
/// skipped (`skipped_done`); the rest go on, in runs consecutive in the
/// input.
fn skip_done(shared: &Shared, done: &mut Done, seg: Segment, delimiter: u8) -> Vec<Segment> {
    let (kept, skipped, bytes) = done.filter(seg, delimiter);
    if skipped > 0 {
        shared.lock().ledger.skipped_done(skipped, bytes);
    }
    kept
}

/// What to say of the first record read that is not a URL with a host
/// under `--key host`, once the keyed queues have met one: its number,
/// not its bytes (it may hold a secret).
fn first_keyless(shared: &Shared) -> Option<String> {
    let number = shared.lock().adm.bucket().keys()?.first_keyless()?;
    Some(format!(
        "--key: record {number} is not a URL with a host; such records share the no-key lane (--stats counts them: records with no key)"
    ))
}

/// Looks for the first record whose cost (`--cost`) cannot be read.
struct CostCheck {
    cost: Cost,
    /// Records looked at so far.
    seen: u64,
}

impl CostCheck {
    /// What to say of the first record of `seg` whose cost cannot be read,
    /// if any.
    fn first_unreadable(&mut self, seg: &Segment) -> Option<String> {
        for record in seg.records() {
            self.seen += 1;
            if let Some(name) = self.cost.unreadable(record) {
                // Credentials are hidden before the record is cut, so a
                // cut never leaves part of one.
                let whole = String::from_utf8_lossy(record);
                let shown: String = crate::host::without_userinfo(&whole)
                    .chars()
                    .take(60)
                    .collect();
                let (flag, which) = if name.is_empty() {
                    ("--cost".to_string(), String::new())
                } else {
                    (format!("--cost {name}"), format!(" {name}"))
                };
                return Some(format!(
                    "{flag}: record {} has no{which} cost to read ('{}'); such records cost {}",
                    self.seen,
                    shown.trim_end(),
                    crate::cost::UNREADABLE_COST
                ));
            }
        }
        None
    }
}

/// The reader's hand-off: admit `seg`'s records, applying the policy.
fn deliver(shared: &Shared, seg: Segment) -> Flow {
    // What is shed must reach the dead letter: while it lags, wait.
    shared
        .dead_backlog
        .wait_for_room(&|| shared.lock().stop.reading);
    let mut st = shared.lock();
    // Records count as read once they are admitted or meet the policy;
    // those still in the reader's hands are counted if drip stops with
    // them (as undelivered).
    st.ledger.read_bytes(seg.bytes());
    let seg = match shared.direct.as_ref() {
        Some(direct) if direct.usable() && st.idle() => match write_direct(shared, st, seg) {
            Some((guard, Some(rest))) => {
                st = guard;
                rest
            }
            Some((_, None)) => return Flow::Continue,
            None => return Flow::Stop,
        },
        _ => seg,
    };
    offer(shared, st, seg)
}

/// The lock again, and the records a direct write left for the usual way.
type Left<'a> = (MutexGuard<'a, State>, Option<Segment>);

/// Unpaced, with nothing queued: write what stdout takes at once; returns
/// the lock and what is left, or `None` when a write error stopped drip.
fn write_direct<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    mut seg: Segment,
) -> Option<Left<'a>> {
    let direct = shared.direct.as_ref().expect("direct writes");
    st.writing.since = Some(shared.clock.now());
    drop(st);
    let mut written = direct.write(&seg, &shared.stops.now, &shared.stops.leave);
    st = shared.lock();
    let whole = written.records as usize;
    let begun = whole < seg.len() && written.bytes as usize > seg.bytes_of_first(whole);
    if st.stop.reading && begun && written.error.is_none() {
        // Stopping (even with --drain): the writer may be gone, so the
        // begun record is finished here. The records after it wait with the
        // leftovers, where a second signal finds them.
        let mut rest = seg.clone();
        seg = rest.split_front(whole + 1);
        if !rest.is_empty() {
            st.reading.leftover.push(rest);
        }
        let mut record = seg.clone();
        record.split_front(whole);
        st.reading.finishing = Some(record);
        drop(st);
        written = direct.finish_record(&seg, written, &shared.stops.leave);
        st = shared.lock();
        st.reading.finishing = None;
    }
    let now = shared.clock.now();
    match st.settle_direct(seg, written, now) {
        Some(rest) => {
            if st.writing.tail.is_some() {
                shared.data_ready.notify_one();
            }
            Some((st, rest))
        }
        None => {
            st.flush_dead();
            drop(st);
            shared.stop(false);
            None
        }
    }
}

/// Offer `seg` (and first any parked read) to admission until it is all
/// in, waiting for room while `block` holds it back. The writer, when it
/// is to be woken, is woken as the lock is let go (not before another
/// read is admitted under it, which it would only wait out again).
fn offer<'a>(shared: &'a Shared, mut st: MutexGuard<'a, State>, seg: Segment) -> Flow {
    let mut next = Some(seg);
    let mut wake_writer = false;
    loop {
        let now = shared.clock.now();
        if st.stop.reading {
            // A parked read stays for `drain_undelivered`, before these.
            st.reading.leftover.extend(next);
            st.flush_dead();
            let_go(shared, st, wake_writer);
            return Flow::Stop;
        }
        // Oldest first: a parked read goes before this one.
        let (seg, parked) = match st.reading.parked.take() {
            Some(older) => (older, true),
            None => match next.take() {
                Some(seg) => (seg, false),
                None => {
                    st.flush_dead();
                    let_go(shared, st, wake_writer);
                    return Flow::Continue;
                }
            },
        };
        let policy = st.policy(now, shared.unpaced);
        let may_leave = st.may_leave(now, shared.unpaced);
        let due_before = st.adm.next_event();
        let State { adm, ledger, .. } = &mut *st;
        let offered = adm.arrive(now, seg, policy, may_leave, ledger);
        // Wake the writer for records to write, or a due time that came
        // nearer (under a byte rate an eviction can put a smaller record
        // at the head).
        let due_after = st.adm.next_event();
        let nearer = due_after.is_some_and(|after| due_before.map_or(true, |b| after < b));
        wake_writer |= st.adm.outbox_len() > 0 || nearer;
        st.flush_dead();
        match offered {
            Offered::Done => {}
            Offered::Wait(rest) => {
                st.reading.parked = Some(rest);
                // Unpaced, one read may be parked while the reader goes on
                // reading (the writer takes it with the bucket); with two,
                // it waits. Paced, the writer tops the bucket up from it.
                if shared.unpaced && !parked {
                    let_go(shared, st, wake_writer);
                    return Flow::Continue;
                }
                if std::mem::take(&mut wake_writer) && st.writer_to_wake() {
                    shared.data_ready.notify_one();
                }
                st = wait_for_room(shared, st, policy, now);
            }
            Offered::Overflowed(rest) => {
                let record = st.ledger.counts().read + 1;
                st.stop.overflow = Some(OverflowError::new(record, &st.adm));
                st.reading.leftover.push(rest);
                st.reading.leftover.extend(next);
                drop(st);
                shared.stop_at_overflow();
                return Flow::Stop;
            }
        }
    }
}

/// Let the lock go, then wake the writer if `wake` (records to write, or
/// a due time nearer) and it sleeps.
fn let_go(shared: &Shared, mut st: MutexGuard<'_, State>, wake: bool) {
    let wake = wake && st.writer_to_wake();
    drop(st);
    if wake {
        shared.data_ready.notify_one();
    }
}

/// How long a write may be under way before the reader expires records
/// itself, and how often it looks meanwhile, in ns.
const EXPIRY_TAKEOVER_NS: u64 = 10_000_000;

/// When the reader, waiting for room, wakes for `--max-wait`'s sake: the
/// writer expires records at each of its turns (and moves the parked read
/// in), so the reader takes that over only once the writer has been held
/// (`since`: a write under way, stdout stalled; or a full sink) for
/// [`EXPIRY_TAKEOVER_NS`], and until then looks no more often than that.
/// Woken at each deadline instead, it woke at nearly every turn of the
/// writer to find the room already filled. `None`: no record can expire.
fn expiry_watch(next_expiry: Option<u64>, since: Option<u64>, now: u64) -> Option<u64> {
    let takeover = since.unwrap_or(now).saturating_add(EXPIRY_TAKEOVER_NS);
    next_expiry.map(|at| at.max(takeover))
}

/// Wait until the writer has made room for the parked read, an expiry is
/// due, or (unpaced, patient) the policy held back applies.
fn wait_for_room<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    policy: crate::bucket::Overflow,
    now: u64,
) -> MutexGuard<'a, State> {
    let wants = st
        .reading
        .parked
        .as_ref()
        .map_or(1, Segment::len)
        .min(st.adm.bucket().capacity() / 4)
        .max(1);
    st.reading.wants = wants;
    // With --max-wait, the oldest record's deadline makes room too, even
    // while the writer is held (stuck in a write, or every job slot
    // taken); a policy held back applies when its time is up.
    let expiry = expiry_watch(st.adm.next_expiry(), st.writing.held_since(), now);
    let patience = (policy != st.adm.bucket().policy())
        .then_some(st.writing.last_take.saturating_add(STALL_NS));
    // No deadline: a wait without one (std waits for ever when the
    // timeout is past what its clock can hold).
    let deadline = expiry.into_iter().chain(patience).min();
    let timeout = deadline.map_or(Duration::MAX, |at| {
        Duration::from_nanos(at.saturating_sub(now))
    });
    st = shared.space_ready.wait_timeout(st, timeout).unpoisoned().0;
    st.reading.wants = 0;
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_after_the_record_in_the_command_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("urls.txt");
        std::fs::write(&file, "x\n").unwrap();
        let file = file.to_str().unwrap().to_string();
        let line = |words: &[&str]| -> Vec<String> {
            words.iter().map(|w| w.replace("FILE", &file)).collect()
        };
        for (words, found) in [
            (&["curl", "-sS", "{}", "FILE"][..], true),
            (&["curl", "{}", "--", "FILE"], true),
            (&["sh", "-c", "x \"$1\"", "sh", "{}", "FILE"], true),
            // The command's own: before the record, appended last, an
            // option's value, a directory, no such file.
            (&["python3", "FILE", "{}"], false),
            (&["python3", "FILE"], false),
            (&["cmd", "{}", "-o", "FILE"], false),
            (&["cmd", "{}", "--config=FILE"], false),
            (&["cmd", "{}", "/"], false),
            (&["cmd", "{}", "no-such-file.txt"], false),
        ] {
            let said = file_after_the_record(&line(words));
            assert_eq!(said.is_some(), found, "{words:?}");
        }
    }

    #[test]
    fn stdin_read_for_records_is_said_once_in_one_line() {
        assert_eq!(from_stdin(false, None), None);
        assert_eq!(from_stdin(true, None).as_deref(), Some(FROM_THE_TERMINAL));
        let said = from_stdin(false, Some("urls.txt")).unwrap();
        assert!(said.starts_with("--exec: records are read from stdin; urls.txt is an argument"));
        let said = from_stdin(true, Some("urls.txt")).unwrap();
        assert!(said.starts_with(FROM_THE_TERMINAL), "{said}");
        assert!(said.contains("; --exec: urls.txt is an argument of the command"));
        assert!(!said.contains('\n'));
    }

    /// The reader waiting for room wakes for an expiry only once the
    /// writer has been held (a write under way, a full sink) for the
    /// takeover time; otherwise no sooner than that from now (the writer
    /// expires records at its turns).
    #[test]
    fn the_reader_takes_expiry_over_only_from_a_write_under_way() {
        let ms = 1_000_000;
        assert_eq!(expiry_watch(None, Some(0), 50 * ms), None);
        // The writer between writes: look again in the takeover time.
        assert_eq!(expiry_watch(Some(51 * ms), None, 50 * ms), Some(60 * ms));
        // A write under way since 45 ms: from 55 ms on the reader expires.
        assert_eq!(
            expiry_watch(Some(51 * ms), Some(45 * ms), 50 * ms),
            Some(55 * ms)
        );
        // Stalled for long: each deadline as it comes.
        assert_eq!(expiry_watch(Some(51 * ms), Some(0), 50 * ms), Some(51 * ms));
        assert_eq!(expiry_watch(Some(80 * ms), None, 50 * ms), Some(80 * ms));
    }
}
