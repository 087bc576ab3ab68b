//! What drip shows on stderr: error lines, and the live progress display.
//!
//! All stderr output goes through [`Ui`] so that a message never tears the
//! progress display: the display line is cleared, the message printed, and
//! the display drawn again below it.
//!
//! The display is one line. On its own terminal it is redrawn in place
//! (`\r`, the line, erase to its end), a few columns short of the width so
//! that the `^C` a terminal echoes never wraps it onto a second line. When
//! stdout is the same terminal, records and display would mix on one
//! screen: drip then draws nothing unless `--progress` asks, and then pins
//! the display to the bottom row and lets the records scroll above it (a
//! scroll region, as `apt` does).
//!
//! With `--exec` no record is written: the jobs' figures take the place of
//! the records out (running, succeeded, failed, retries, overload pauses,
//! the start rate, and the pause under way). The jobs write to the
//! terminal themselves (their output, their errors), so there the display
//! is always pinned to the bottom row, whether stdout is the terminal or
//! not, and drawn unless `-q` or a stderr that is no terminal says no.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::Duration;

use crate::report::capacity::CapacityFor;
use crate::report::runner::JobStats;
use crate::report::spell::text_key;
use crate::report::spell::{clock, format_duration_ms, format_rate, seconds};
use crate::report::{PauseEnd, Spot};
use crate::stats::{Counts, Departures};
use crate::sys::Unpoisoned;

/// How long a write may be under way before the display says output is
/// blocked.
const BLOCKED_AFTER_NS: u64 = 250_000_000;

/// Width assumed when stderr is not a terminal (`--progress` into a file).
const PLAIN_WIDTH: usize = 100;

/// Columns left free at the end of the line, for an echoed `^C`.
const ECHO_ROOM: usize = 3;

/// Columns of the bucket's gauge.
const GAUGE: usize = 24;

/// When to draw the live progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// When stderr is a terminal.
    Auto,
    /// Always (`--progress`).
    Always,
    /// Never (`--quiet`).
    Never,
}

/// A moment's view of drip, for the display and the stats stream.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Counts so far.
    pub counts: Counts,
    /// When records left.
    pub departures: Departures,
    /// Records queued.
    pub depth: u64,
    /// Bytes queued.
    pub bytes: u64,
    /// The most records ever queued.
    pub max_depth: u64,
    /// Age of the oldest queued record, ns.
    pub oldest_age_ns: u64,
    /// How long a record arriving now would wait, ns, as forecast
    /// ([`crate::admission::Admission::forecast_wait`]); `None` when it
    /// cannot be forecast.
    pub forecast_wait_ns: Option<u64>,
    /// How long the write under way has taken, ns (0 when none is).
    pub writing_for_ns: u64,
    /// Time since start, ns.
    pub elapsed_ns: u64,
    /// Whether reading has ended.
    pub reading_done: bool,
    /// With limits per key: keys remembered, and those with records waiting.
    pub keys: Option<(u64, u64)>,
    /// Paused by `drip ctl … pause` (or a `--schedule` row).
    pub paused: bool,
    /// While paused under a `--schedule` row that pauses, when the row
    /// after it lets records go again (which ends a `drip ctl` pause too).
    pub paused_until: Option<PauseEnd>,
    /// The report's sections' items of the display, in order, each where
    /// it goes (`report::Section::shown`: the keys, the budget with the
    /// least left, the `--schedule` row, the `--ramp`).
    pub shown: Vec<(Spot, String)>,
}

/// The display's sign for a pause: `paused`, and when it ends if it is
/// known (`paused until 18:00`).
fn paused(snap: &Snapshot) -> String {
    match &snap.paused_until {
        Some(end) => format!("paused until {}", end.clock),
        None => "paused".into(),
    }
}

/// What the display shows of the command runner (`--exec`).
#[derive(Debug, Clone, Default)]
pub struct JobsView {
    /// The runner's figures.
    pub stats: JobStats,
    /// How much longer every start stays paused for an overload, ns (0:
    /// not paused).
    pub paused_left_ns: u64,
    /// With `--key`: the keys whose starts an overload paused, sorted.
    pub paused_keys: Vec<Box<[u8]>>,
}

/// Where the display is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// Redrawn in place on the current line of stderr.
    Line,
    /// On the bottom row of the terminal, below a scroll region in which
    /// the records (stdout, on the same terminal) scroll.
    Pinned,
    /// Not drawn: a dumb terminal cannot redraw a line. The summary is
    /// still printed at exit.
    Hidden,
}

/// Where to draw the display, if anywhere, given `mode`, what stderr and
/// stdout are, and whether `jobs` run (`--exec`): `None` means no display
/// and no summary unless `--stats`.
fn choose(
    mode: ProgressMode,
    stderr_tty: bool,
    stdout_same_tty: bool,
    dumb: bool,
    jobs: bool,
) -> Option<Surface> {
    match mode {
        ProgressMode::Never => None,
        // Records on the same screen would interleave with the display;
        // jobs write no records, and their figures are the progress.
        ProgressMode::Auto if stdout_same_tty && !jobs => None,
        ProgressMode::Auto if !stderr_tty => None,
        _ if stderr_tty && dumb => Some(Surface::Hidden),
        // Jobs write to the terminal at any time (stdout, stderr): below
        // a scroll region their lines never tear the display.
        _ if stdout_same_tty || (jobs && stderr_tty) => Some(Surface::Pinned),
        _ => Some(Surface::Line),
    }
}

/// The live display's drawing state.
#[derive(Debug)]
struct Display {
    surface: Surface,
    /// stderr is a terminal, whose size can be asked.
    tty: bool,
    colour: bool,
    /// The display line is on screen.
    drawn: bool,
    /// Pinned: the terminal rows the scroll region was set for (0: none).
    region_rows: u16,
}

/// stderr, with or without a live progress display.
#[derive(Debug, Default)]
pub struct Ui {
    display: Option<Display>,
    capacity: u64,
    /// Total input bytes, when every input is a regular file.
    input_size: Option<u64>,
    /// Records per second allowed (infinite when unpaced).
    rate: f64,
    meter: RateMeter,
    /// Whether a write was under way at each of the latest redraws.
    busy: VecDeque<bool>,
    /// The display line last drawn, without colour.
    text: String,
    /// `--capacity` given as a duration, as written: `30s`.
    capacity_for: Option<String>,
    /// The bucket's bound is in bytes (a duration sized by a byte rate).
    in_bytes: bool,
    /// stderr is a terminal that can move its cursor (not `dumb`), and
    /// drip may write more than errors to it (not `--quiet`).
    terminal: bool,
    /// `--quiet`: stderr gets errors, and what `--stats` and
    /// `--stats-interval` ask for, but no notices.
    quiet: bool,
}

impl Ui {
    /// A Ui drawing progress per `mode` for a bucket of `capacity` records
    /// paced at `rate` records per second; `jobs`: with `--exec`.
    pub fn new(
        mode: ProgressMode,
        capacity: usize,
        input_size: Option<u64>,
        rate: f64,
        jobs: bool,
    ) -> Ui {
        let stderr_tty = io::stderr().is_terminal();
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        let same_tty = stdout_is_stderr_terminal();
        let display = choose(mode, stderr_tty, same_tty, dumb, jobs).map(|surface| Display {
            surface,
            tty: stderr_tty,
            colour: colours_allowed(),
            drawn: false,
            region_rows: 0,
        });
        Ui {
            display,
            capacity: capacity as u64,
            input_size,
            rate,
            terminal: stderr_tty && !dumb && mode != ProgressMode::Never,
            quiet: mode == ProgressMode::Never,
            ..Ui::default()
        }
    }

    /// The display of a capacity given as a duration (`sized`): the
    /// duration beside the capacity, `12/300 (30s) queued`, and with a
    /// capacity in bytes the gauge in bytes (`capacity_bytes`).
    pub fn sized(mut self, sized: Option<&CapacityFor>, capacity_bytes: Option<usize>) -> Ui {
        if let Some(sized) = sized {
            self.capacity_for = Some(format_duration_ms(sized.duration_ms));
            if sized.unit == "bytes" {
                self.in_bytes = true;
                self.capacity = capacity_bytes.map_or(sized.capacity, |b| b as u64);
            }
        }
        self
    }

    /// Whether the live display is on (then the summary is printed at
    /// exit, where the display was).
    pub fn showing_progress(&self) -> bool {
        self.display.is_some()
    }

    /// Print `drip: <message>` on stderr.
    pub fn message(&self, message: &str) {
        self.line(&format!("drip: {message}"));
    }

    /// Print `drip: <notice>` on stderr unless `--quiet`: a notice or a
    /// warning, which drip goes on after (errors go through
    /// [`Ui::message`]).
    pub fn notice(&self, notice: &str) {
        if !self.quiet {
            self.message(notice);
        }
    }

    /// Print a raw line on stderr (stats JSON). A closed stderr is ignored:
    /// diagnostics never stop the records.
    pub fn line(&self, line: &str) {
        match &self.display {
            Some(d) if d.drawn && d.surface == Surface::Line => {
                // Clear the display, print, and draw it again below.
                let again = self.render(d);
                emit(&format!("\r\x1b[K{line}\n{again}"));
            }
            _ => emit(&format!("{line}\n")),
        }
    }

    /// Redraw the display from `snap`.
    /// The rate records should leave at, records per second (`drip ctl`
    /// changed it), for judging whether stdout is slow.
    pub fn set_rate(&mut self, rate: f64) {
        self.rate = rate;
    }

    /// Redraw the display for `snap` (and, with `--exec`, `jobs`).
    pub fn update(&mut self, snap: &Snapshot, jobs: Option<&JobsView>) {
        if self.display.is_none() {
            return;
        }
        self.meter.push(&snap.departures);
        self.busy.push_back(snap.writing_for_ns > 0);
        if self.busy.len() > BUSY_SAMPLES {
            self.busy.pop_front();
        }
        self.text = self.compose(snap, jobs);
        let Some(d) = &mut self.display else { return };
        let mut out = String::new();
        match d.surface {
            Surface::Hidden => return,
            Surface::Line => {}
            Surface::Pinned => {
                let rows = terminal_size().map_or(0, |(_, rows)| rows);
                if rows < 3 {
                    // Too small to keep a row apart: draw nothing.
                    return;
                }
                if d.region_rows == 0 {
                    // Make room below the cursor, keep the bottom row
                    // out of the scroll region, and go back up into it.
                    out.push_str(&format!("\n\x1b7\x1b[1;{}r\x1b8\x1b[1A", rows - 1));
                } else if d.region_rows != rows {
                    out.push_str(&format!("\x1b7\x1b[1;{}r\x1b8", rows - 1));
                }
                d.region_rows = rows;
            }
        }
        d.drawn = true;
        let d = self.display.as_ref().expect("checked above");
        out.push_str(&self.render(d));
        emit(&out);
    }

    /// The display line as drawn on `d`, with the escapes that place it.
    fn render(&self, d: &Display) -> String {
        let width = if d.tty {
            terminal_size().map_or(80, |(cols, _)| cols as usize)
        } else {
            PLAIN_WIDTH
        };
        let text = fit(&self.text, width.saturating_sub(ECHO_ROOM));
        let text = if d.colour { colour_gauge(&text) } else { text };
        match d.surface {
            Surface::Line => format!("\r{text}\x1b[K"),
            Surface::Pinned => format!("\x1b7\x1b[{};1H{text}\x1b[K\x1b8", d.region_rows),
            Surface::Hidden => String::new(),
        }
    }

    /// The display's text for `snap`; with `--exec`, `jobs`: their figures
    /// in place of the records out, the start rate, and the pause under
    /// way in place of the output's signs.
    fn compose(&self, snap: &Snapshot, jobs: Option<&JobsView>) -> String {
        let c = &snap.counts;
        let measured = self.meter.rate(snap.elapsed_ns);
        let mut text = self.queued(snap);
        match jobs {
            None => text.push_str(&format!(
                " | in {} out {} dropped {}",
                c.read,
                c.written + c.succeeded + c.failed,
                c.dropped()
            )),
            Some(_) => {
                text.push_str(&format!(" | in {}", c.read));
                if c.dropped() > 0 {
                    text.push_str(&format!(" dropped {}", c.dropped()));
                }
            }
        }
        if c.expired > 0 {
            text.push_str(&format!(" expired {}", c.expired));
        }
        if let Some(jobs) = jobs {
            let s = &jobs.stats;
            text.push_str(&format!(
                " | running {} succeeded {} failed {} retries {} pauses {}",
                s.jobs_running, c.succeeded, c.failed, s.retries, s.pauses
            ));
        }
        if snap.depth > 0 {
            text.push_str(&format!(" | oldest {}", seconds(snap.oldest_age_ns)));
        }
        if let Some(wait) = snap.forecast_wait_ns {
            let sep = if snap.depth > 0 { "" } else { " |" };
            text.push_str(&format!("{sep} wait {}", seconds(wait)));
        }
        for (_, item) in snap.shown.iter().filter(|(at, _)| *at == Spot::Figures) {
            text.push_str(&format!(" | {item}"));
        }
        // With jobs, a departure is a job's start.
        text.push_str(if jobs.is_some() { " | starts " } else { " | " });
        text.push_str(&measured.map_or("-/s".into(), format_rate));
        let eta = match jobs {
            None => eta(snap, self.input_size, measured),
            Some(jobs) => jobs_eta(snap, self.input_size, measured, &jobs.stats),
        };
        if let Some(eta) = eta {
            text.push_str(&format!(" | ETA {}", clock(eta)));
        }
        for (_, item) in snap.shown.iter().filter(|(at, _)| *at == Spot::InForce) {
            text.push_str(&format!(" | {item}"));
        }
        let sign = match jobs {
            None => self.output_sign(snap, measured),
            Some(jobs) => pause_sign(snap, jobs),
        };
        if let Some(sign) = sign {
            text.push_str(&format!(" | {sign}"));
        }
        text
    }

    /// The start of the display: the elapsed time, the gauge and the queue.
    fn queued(&self, snap: &Snapshot) -> String {
        let (depth, unit) = if self.in_bytes {
            (snap.bytes, " bytes")
        } else {
            (snap.depth, "")
        };
        let sized = self
            .capacity_for
            .as_ref()
            .map_or(String::new(), |d| format!(" ({d})"));
        format!(
            "{} [{}] {}/{}{unit}{sized} queued",
            hms(Duration::from_nanos(snap.elapsed_ns)),
            gauge(depth, self.capacity),
            depth.min(self.capacity),
            self.capacity,
        )
    }

    /// The sign at the end of the display when records are written: a
    /// pause (`drip ctl`), or stdout holding records up.
    fn output_sign(&self, snap: &Snapshot, measured: Option<f64>) -> Option<String> {
        if snap.paused {
            Some(paused(snap))
        } else if snap.writing_for_ns >= BLOCKED_AFTER_NS {
            Some("output blocked".into())
        } else if self.output_slow(snap, measured) {
            Some("output slow".into())
        } else {
            None
        }
    }

    /// Whether stdout takes records slower than the rate: records are
    /// waiting, a write was under way at most of the latest redraws (the
    /// writer is held up by stdout, not by the schedule), and less than
    /// 90 % of the rate leaves.
    fn output_slow(&self, snap: &Snapshot, measured: Option<f64>) -> bool {
        let busy = self.busy.iter().filter(|b| **b).count();
        let behind = match measured {
            Some(rate) => rate < 0.9 * self.rate,
            None => self.rate.is_infinite(),
        };
        snap.depth > 0
            && self.busy.len() >= BUSY_SAMPLES / 2
            && busy * 2 >= self.busy.len()
            && behind
    }

    /// Clear the display, leaving the screen as it was (and a pinned
    /// display's scroll region undone), with the cursor at the start of a
    /// clean line: what follows (the summary, the shell's prompt) never
    /// lands after a `^C` the terminal echoed.
    ///
    /// A line display is cleared from column 0, the echo with it. A pinned
    /// display's cursor is where the records or the jobs left it, at a
    /// column drip cannot know: [`to_clean_line`] moves it to a line of
    /// its own without erasing what is there.
    pub fn finish(&mut self) {
        let Some(d) = &mut self.display else { return };
        if !d.drawn {
            return;
        }
        match d.surface {
            Surface::Line => emit("\r\x1b[K"),
            Surface::Pinned => emit(&format!(
                "\x1b7\x1b[r\x1b[{};1H\x1b[K\x1b8{}",
                d.region_rows,
                to_clean_line(terminal_size().map_or(80, |(cols, _)| cols))
            )),
            Surface::Hidden => {}
        }
        d.drawn = false;
        d.region_rows = 0;
    }

    /// After a stop by signal: clear the display ([`Ui::finish`]), and
    /// with none drawn on a terminal, still move the cursor to the start
    /// of a clean line, past the `^C` the terminal echoed where the
    /// records left it ([`to_clean_line`]).
    pub fn stopped(&mut self) {
        let drawn = self
            .display
            .as_ref()
            .is_some_and(|d| d.drawn && d.surface != Surface::Hidden);
        if drawn {
            self.finish();
        } else if self.terminal {
            emit(&to_clean_line(terminal_size().map_or(80, |(cols, _)| cols)));
        }
    }
}

/// The escapes that take the cursor, at an unknown column of a terminal
/// `cols` wide, to column 0 of a clean line, keeping the text before it:
/// a full line of spaces, then back to column 0 and erase. From column 0
/// the spaces fill the line and the cursor waits at its end without
/// wrapping, so the line stays the same; from any other column (after an
/// echoed `^C`, or a job's output without a newline) they wrap onto the
/// next line, which is the one cleared.
fn to_clean_line(cols: u16) -> String {
    format!("{}\r\x1b[K", " ".repeat(usize::from(cols.max(1))))
}

/// The sign at the end of the display with `--exec`: a pause by `drip
/// ctl`, or one for an overload: every start's (`paused 1.2s`, the time
/// left), or with `--key` the keys paused (`paused api.example.com +1`,
/// the first of them, shown safe for a terminal, and how many more).
fn pause_sign(snap: &Snapshot, jobs: &JobsView) -> Option<String> {
    if snap.paused {
        return Some(paused(snap));
    }
    if jobs.paused_left_ns > 0 {
        return Some(format!("paused {}", seconds(jobs.paused_left_ns)));
    }
    let (first, rest) = jobs.paused_keys.split_first()?;
    let more = match rest.len() {
        0 => String::new(),
        n => format!(" +{n}"),
    };
    Some(format!("paused {}{more}", text_key(Some(first))))
}

/// Clear the display of `ui` on the way out of the process (a second
/// signal), if it can be had within a few milliseconds: the shell's prompt
/// then starts on a clean line ([`Ui::stopped`]).
pub fn clear_before_exit(ui: &Mutex<Ui>) {
    for _ in 0..20 {
        match ui.try_lock() {
            Ok(mut ui) => return ui.stopped(),
            Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner().stopped(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Lock the shared display (a thread that panicked holding it leaves it
/// usable).
pub fn lock_ui(ui: &std::sync::Mutex<Ui>) -> std::sync::MutexGuard<'_, Ui> {
    ui.lock().unpoisoned()
}

/// Redraws whose busy flags decide whether output is slow (one second).
const BUSY_SAMPLES: usize = 10;

/// The live output rate, measured from the departure times themselves:
/// over the latest window that holds at least [`MIN_DEPARTURES`]
/// departures and [`MIN_SPAN_NS`], or, at low rates, all departures of
/// the last [`HORIZON_NS`] (at least two).
#[derive(Debug, Default)]
struct RateMeter {
    /// (time of a write, records written in all by then), oldest first.
    samples: VecDeque<(u64, u64)>,
}

const MIN_DEPARTURES: u64 = 10;
const MIN_SPAN_NS: u64 = 1_000_000_000;
const HORIZON_NS: u64 = 10_000_000_000;

impl RateMeter {
    /// Note the latest departures, if records left since the last call.
    fn push(&mut self, d: &Departures) {
        if self.samples.is_empty() && d.records > d.first_records {
            // The first write is known exactly: a figure from the start.
            self.samples.push_back((d.first_ns, d.first_records));
        }
        if d.records > self.samples.back().map_or(0, |s| s.1) {
            self.samples.push_back((d.last_ns, d.records));
        }
        let newest = d.last_ns;
        while self.samples.len() > 2 && self.samples[0].0 + HORIZON_NS < newest {
            self.samples.pop_front();
        }
    }

    /// Records per second at `now_ns`; `None` before a second departure.
    /// When no record has left for longer than the usual gap, the time
    /// since counts too, so a stalled output reads ever closer to 0, and 0
    /// after [`HORIZON_NS`] (or four gaps) without one.
    fn rate(&self, now_ns: u64) -> Option<f64> {
        let &(t1, w1) = self.samples.back()?;
        let mut first = None;
        for &(t0, w0) in self.samples.iter().rev().skip(1) {
            first = Some((t0, w0));
            if w1 - w0 >= MIN_DEPARTURES && t1 - t0 >= MIN_SPAN_NS {
                break;
            }
        }
        let (t0, w0) = first?;
        let n = w1 - w0;
        let span = t1.checked_sub(t0).filter(|s| *s > 0)?;
        let gap = span / n;
        if now_ns.saturating_sub(t1) >= HORIZON_NS.max(4 * gap) {
            // Long past the usual gap without a record: output stopped.
            return Some(0.0);
        }
        let since_first = now_ns.saturating_sub(t0).saturating_sub(gap);
        Some(n as f64 * 1e9 / span.max(since_first) as f64)
    }
}

/// Time left: the records still to come and those queued, at the measured
/// output rate. Reading a regular file, the records still to come are the
/// file's total at the bytes per record seen so far (written records when
/// there are any: the reader may hold bytes not yet admitted) less those
/// already through the bucket; once the input has ended, only what waits.
fn eta(snap: &Snapshot, input_size: Option<u64>, measured: Option<f64>) -> Option<Duration> {
    in_force(snap, records_left(snap, input_size)?, measured)
}

/// Time left for `left` records to leave: the measured rate's answer,
/// never before the schedule's own forecast of the queue's end (the
/// rates and the budgets' windows: what the rate measured before a
/// budget was spent says nothing of its next window); once every record
/// is read and nothing was measured yet, that forecast. The forecast
/// knows no job slots or slow consumer, so it is only a floor.
fn in_force(snap: &Snapshot, left: f64, measured: Option<f64>) -> Option<Duration> {
    let forecast = snap
        .forecast_wait_ns
        .filter(|_| left >= 1.0)
        .map(Duration::from_nanos);
    let by_rate = measured
        .filter(|&rate| rate > 0.0)
        .and_then(|rate| time_left(left, rate));
    match (forecast, by_rate) {
        (Some(f), Some(r)) => Some(r.max(f)),
        (f, r) => r.or(f.filter(|_| snap.reading_done)),
    }
}

/// Time left with `--exec`: the records still to start (as for [`eta`])
/// at the measured start rate, and then a median attempt for the last of
/// them to end; once every record has started, a median attempt while
/// jobs run.
fn jobs_eta(
    snap: &Snapshot,
    input_size: Option<u64>,
    measured: Option<f64>,
    jobs: &JobStats,
) -> Option<Duration> {
    let attempt = Duration::from_secs_f64(jobs.attempt_p50_ms.max(0.0) / 1e3);
    let left = records_left(snap, input_size)?;
    if left < 1.0 {
        return Some(if jobs.jobs_running > 0 {
            attempt
        } else {
            Duration::ZERO
        });
    }
    Some(in_force(snap, left, measured)? + attempt)
}

/// The records still to leave (with `--exec`, to start): those waiting,
/// and reading a regular file, the rest of it (see [`eta`]); `None` while
/// reading an input of unknown size.
fn records_left(snap: &Snapshot, input_size: Option<u64>) -> Option<f64> {
    let c = &snap.counts;
    let waiting = snap.depth as f64;
    match (snap.reading_done, input_size) {
        (true, _) => Some(waiting),
        (false, Some(size)) => {
            let (records, bytes) = if c.written > 0 {
                (c.written, c.bytes_written)
            } else {
                (c.read, c.bytes_read)
            };
            if records == 0 || bytes == 0 {
                return None;
            }
            let total = size as f64 * records as f64 / bytes as f64;
            let through = c.read.saturating_sub(snap.depth) as f64;
            Some((total - through).max(waiting))
        }
        _ => None,
    }
}

/// How long `records` records take to leave at `rate` records per
/// second: the first leaves within one interval, the last `records - 1`
/// intervals after it. `None` without a rate, or beyond 100 hours (an
/// estimate that says nothing).
fn time_left(records: f64, rate: f64) -> Option<Duration> {
    if rate <= 0.0 || !rate.is_finite() {
        return None;
    }
    let secs = (records - 1.0).max(0.0) / rate;
    (secs < 360_000.0).then(|| Duration::from_secs_f64(secs))
}

/// The bucket's fill as `=====>    `, [`GAUGE`] columns.
fn gauge(depth: u64, capacity: u64) -> String {
    let fill = (depth.min(capacity) * GAUGE as u64 / capacity.max(1)) as usize;
    if fill >= GAUGE {
        "=".repeat(GAUGE)
    } else if depth == 0 {
        " ".repeat(GAUGE)
    } else {
        format!("{}>{}", "=".repeat(fill), " ".repeat(GAUGE - fill - 1))
    }
}

/// `text` in the gauge's colour (cyan), when the gauge is on the line whole.
fn colour_gauge(text: &str) -> String {
    match (text.find(" ["), text.find("] ")) {
        (Some(open), Some(close)) if close == open + 2 + GAUGE => format!(
            "{}\x1b[36m{}\x1b[0m{}",
            &text[..open + 2],
            &text[open + 2..close],
            &text[close..]
        ),
        _ => text.to_string(),
    }
}

/// `text` in at most `width` columns (the display is ASCII): what matters
/// most stays. Too long, it loses the oldest age and the wait first, then
/// the gauge, then the counts (the summary has them), then the keys (the
/// stats stream has them), keeping the time, the queue, the rate, the ETA
/// and the sign; with `--exec` then the jobs' figures that are 0 (retries,
/// pauses, failed), then the queue, keeping the running and the succeeded.
/// Only then is it cut, between items or after a number ([`cut`]).
fn fit(text: &str, width: usize) -> String {
    if text.len() <= width {
        return text.to_string();
    }
    let mut text = text.to_string();
    // The oldest age and the wait go first (the stats stream has them).
    if !drop_item(&mut text, " | oldest ") {
        drop_item(&mut text, " | wait ");
    }
    if text.len() <= width {
        return text;
    }
    if let (Some(open), Some(close)) = (text.find(" ["), text.find("] ")) {
        text.replace_range(open + 1..close + 2, "");
    }
    for item in [" | in ", " | keys ", " | budget "] {
        if text.len() > width {
            drop_item(&mut text, item);
        }
    }
    for zero in [" retries 0", " pauses 0", " failed 0"] {
        if text.len() <= width {
            break;
        }
        if let Some(start) = text.find(zero) {
            text.replace_range(start..start + zero.len(), "");
        }
    }
    if text.len() > width && text.contains(" | running ") {
        if let (Some(start), Some(end)) = (text.find(' '), text.find(" queued")) {
            text.replace_range(start..end + " queued".len(), "");
        }
    }
    cut(&text, width)
}

/// Removes from `text` the item that starts with `start` (` | ` and its
/// name) up to the next ` | `; false when there is none.
fn drop_item(text: &mut String, start: &str) -> bool {
    let Some(from) = text.find(start) else {
        return false;
    };
    let to = text[from + 1..]
        .find(" | ")
        .map_or(text.len(), |i| from + 1 + i);
    text.replace_range(from..to, "");
    true
}

/// The longest start of `text` in `width` columns that ends at the end of
/// an item, after the clock, or between two figures of one item (after a
/// word with a digit, before a label and its number: `running 2 | succeeded
/// 14` may end after `running 2`), so that no figure loses its number or
/// its unit (`17/1000 bytes queued` stays whole) and no quoted key is cut;
/// the first `width` columns when there is no such place.
fn cut(text: &str, width: usize) -> String {
    if text.len() <= width {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let clock_end = text.find(' ');
    let place = (1..=width).rev().find(|&end| {
        bytes[end] == b' '
            && (text[end..].starts_with(" | ")
                || Some(end) == clock_end
                || between_figures(&text[..end], &text[end + 1..]))
    });
    match place {
        Some(end) => text[..end].to_string(),
        None => text.chars().take(width).collect(),
    }
}

/// Whether `before` ends a figure (its last word has a digit, outside
/// quotes) and `after` starts another (a label, then a word with a digit)
/// or is the item's last word, a name without a unit (`queued`).
fn between_figures(before: &str, after: &str) -> bool {
    let digit = |w: &str| w.bytes().any(|b| b.is_ascii_digit());
    let quoted = before.bytes().filter(|&b| b == b'"').count() % 2 == 1;
    let mut next = after.split(' ');
    let label = next.next().unwrap_or("");
    let then = next.next();
    !quoted
        && digit(before.rsplit(' ').next().unwrap_or(""))
        && !label.is_empty()
        && !digit(label)
        && match then {
            None => true,
            Some(w) => w == "|" || digit(w),
        }
}

/// `HH:MM:SS`, the elapsed time at the start of the display.
fn hms(d: Duration) -> String {
    let s = d.as_secs();
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Colour only when neither `NO_COLOR` nor `TERM=dumb` says no.
fn colours_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb
}

/// Whether stdout is the very terminal stderr is (same device).
fn stdout_is_stderr_terminal() -> bool {
    use std::os::unix::fs::MetadataExt;
    if !io::stdout().is_terminal() || !io::stderr().is_terminal() {
        return false;
    }
    let device = |fd: std::os::fd::BorrowedFd<'_>| {
        let file = File::from(fd.try_clone_to_owned().ok()?);
        file.metadata().ok().map(|m| m.rdev())
    };
    // When either cannot be told, both are terminals: assume the same one.
    device(io::stdout().as_fd())
        .zip(device(io::stderr().as_fd()))
        .map_or(true, |(out, err)| out == err)
}

/// stderr's terminal size (columns, rows).
fn terminal_size() -> Option<(u16, u16)> {
    crate::sys::terminal_size(io::stderr().as_fd())
}

/// Write `s` to stderr in one piece. A closed stderr is ignored.
fn emit(s: &str) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(s.as_bytes()).and_then(|()| err.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn clock_format() {
        assert_eq!(clock(Duration::from_secs(75)), "1:15");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
        assert_eq!(hms(Duration::from_secs(3725)), "01:02:05");
    }

    /// A meter fed, every 100 ms for `secs`, with writes of one record each
    /// due at `rate` per second (`per_write` records per write), and read
    /// at each redraw: every reading once a second departure is known.
    fn readings(rate: f64, per_write: u64, secs: f64) -> Vec<f64> {
        let mut meter = RateMeter::default();
        let mut d = Departures::default();
        let gap = (per_write as f64 / rate * 1e9) as u64;
        let mut next = 0;
        let mut readings = Vec::new();
        let mut now = 0;
        while now < (secs * 1e9) as u64 {
            now += 100_000_000;
            while next <= now {
                d.record(next, per_write);
                next += gap;
            }
            meter.push(&d);
            readings.extend(meter.rate(now));
        }
        readings
    }

    fn assert_near(readings: &[f64], want: f64, tolerance: f64) {
        assert!(!readings.is_empty());
        for r in readings {
            assert!(
                (r / want - 1.0).abs() <= tolerance,
                "read {r}, want {want}: {readings:?}"
            );
        }
    }

    #[test]
    fn live_rate_reads_right_from_half_a_record_to_a_million_a_second() {
        // Each reading, from the first, within 3 % of the rate; never 0.
        assert_near(&readings(0.5, 1, 12.0), 0.5, 0.03);
        assert_near(&readings(2.0, 1, 5.0), 2.0, 0.03);
        assert_near(&readings(5.0, 1, 5.0), 5.0, 0.03);
        assert_near(&readings(50.0, 1, 5.0), 50.0, 0.03);
        assert_near(&readings(1000.0, 1, 3.0), 1000.0, 0.03);
        // Fast rates leave in batches (one write every 50 µs).
        assert_near(&readings(1_000_000.0, 50, 3.0), 1_000_000.0, 0.03);
        // The first reading comes with the second departure.
        assert_eq!(readings(0.5, 1, 1.9).len(), 0);
        assert!(!readings(0.5, 1, 2.1).is_empty());
    }

    #[test]
    fn live_rate_follows_an_irregular_consumer() {
        // 19 records a second, in uneven steps (0, 1 or 2 per 50/s slot).
        let mut meter = RateMeter::default();
        let mut d = Departures::default();
        let mut written = 0;
        for tick in 1..=100u64 {
            let now = tick * 100_000_000;
            let due = now * 19 / S;
            if due > written && tick % 3 != 0 {
                d.record(now - 7_000_000, due - written);
                written = due;
            }
            meter.push(&d);
        }
        let rate = meter.rate(10 * S).unwrap();
        assert!((17.0..21.0).contains(&rate), "{rate}");
    }

    #[test]
    fn live_rate_falls_when_output_stops() {
        let mut meter = RateMeter::default();
        let mut d = Departures::default();
        for k in 0..100 {
            d.record(k * S / 50, 1);
            meter.push(&d);
        }
        let last = 99 * S / 50;
        assert!((meter.rate(last).unwrap() - 50.0).abs() < 0.5);
        // Three seconds without a record.
        let stalled = meter.rate(last + 3 * S).unwrap();
        assert!(stalled < 20.0, "{stalled}");
        assert_eq!(meter.rate(last + 30 * S), Some(0.0));
    }

    /// The ETA is the schedule's, with every limit in force: records that
    /// wait for a budget's next window (or a ramp's slow start) take as
    /// long as the forecast says, not what the rate measured so far makes
    /// of them (`ETA 0:05` with a 5-minute budget wait ahead).
    #[test]
    fn eta_waits_for_every_limit_in_force() {
        let waiting = Snapshot {
            counts: Counts {
                read: 50,
                bytes_read: 500,
                written: 40,
                bytes_written: 400,
                ..Counts::default()
            },
            depth: 10,
            reading_done: true,
            forecast_wait_ns: Some(300 * S),
            ..Snapshot::default()
        };
        assert_eq!(
            eta(&waiting, None, Some(10.0)),
            Some(Duration::from_secs(300))
        );
        // Nothing measured yet: the forecast still says it.
        assert_eq!(eta(&waiting, None, None), Some(Duration::from_secs(300)));
        // A measured rate slower than the forecast (jobs, a slow
        // consumer) stands.
        let slow = Snapshot {
            forecast_wait_ns: Some(S),
            ..waiting.clone()
        };
        assert_eq!(eta(&slow, None, Some(0.1)), time_left(10.0, 0.1));
        // Still reading a file: the measured rate's answer, never less
        // than the forecast.
        let reading = Snapshot {
            reading_done: false,
            ..waiting.clone()
        };
        assert_eq!(
            eta(&reading, Some(1000), Some(10.0)),
            Some(Duration::from_secs(300))
        );
        let soon = Snapshot {
            forecast_wait_ns: Some(S),
            ..reading.clone()
        };
        let by_rate = eta(&soon, Some(1000), Some(10.0)).unwrap();
        assert!(by_rate > Duration::from_secs(5), "{by_rate:?}");
        // With jobs: the forecast, then a median attempt.
        let jobs = JobStats {
            attempt_p50_ms: 2000.0,
            ..JobStats::default()
        };
        assert_eq!(
            jobs_eta(&waiting, None, Some(10.0), &jobs),
            Some(Duration::from_secs(302))
        );
    }

    #[test]
    fn eta_from_the_measured_rate() {
        let snap = Snapshot {
            counts: Counts {
                read: 50,
                bytes_read: 500,
                ..Counts::default()
            },
            depth: 10,
            ..Snapshot::default()
        };
        // 50 more records to read plus 10 queued, at 10/s measured: the
        // last leaves 59 intervals after the next, whatever the configured
        // rate.
        assert_eq!(
            eta(&snap, Some(1000), Some(10.0)),
            Some(Duration::from_millis(5900))
        );
        assert_eq!(
            eta(&snap, Some(1000), Some(2.0)),
            Some(Duration::from_millis(29_500))
        );
        // Nothing measured yet: no estimate.
        assert_eq!(eta(&snap, Some(1000), None), None);
        // Unknown input size while reading: no estimate.
        assert_eq!(eta(&snap, None, Some(10.0)), None);
    }

    #[test]
    fn the_display_shows_the_budget_left_and_its_reset() {
        let ui = Ui::new(ProgressMode::Never, 1000, None, 10.0, false);
        let budget = crate::report::budgets::BudgetStats {
            budget: "1000/day@UTC".into(),
            limit: 1000,
            left: 970,
            reset: "2026-12-08 00:00:00 UTC".into(),
            reset_unix: 1_796_688_000.0,
            reset_in_ms: 3_200.0,
        };
        let mut sections = crate::report::Sections::default();
        sections.push(crate::report::budgets::BudgetsSection(vec![budget]));
        let snap = Snapshot {
            shown: sections.shown(),
            ..Snapshot::default()
        };
        let text = ui.compose(&snap, None);
        assert!(text.contains(" | budget 970/1000 reset 3.2s | "), "{text}");
        assert!(!ui.compose(&Snapshot::default(), None).contains("budget"));
    }

    #[test]
    fn the_display_shows_a_capacity_for_a_duration_the_oldest_age_and_the_wait() {
        let sized = CapacityFor {
            duration_ms: 30_000.0,
            capacity: 300,
            unit: "records",
            set_by: "--rate 10/s".into(),
        };
        let ui = Ui::new(ProgressMode::Never, 300, None, 10.0, false).sized(Some(&sized), None);
        let snap = Snapshot {
            depth: 12,
            oldest_age_ns: 1_200_000_000,
            forecast_wait_ns: Some(12_400_000_000),
            ..Snapshot::default()
        };
        let text = ui.compose(&snap, None);
        assert!(text.contains("12/300 (30s) queued"), "{text}");
        assert!(text.contains("| oldest 1.2s wait 12.4s"), "{text}");
        // Nothing waiting: the wait alone.
        let idle = Snapshot {
            forecast_wait_ns: Some(0),
            ..Snapshot::default()
        };
        let text = ui.compose(&idle, None);
        assert!(
            !text.contains("oldest") && text.contains("| wait 0.0s"),
            "{text}"
        );
        // On a narrow terminal they go first, before the gauge.
        let text = fit(&ui.compose(&snap, None), 90);
        assert!(
            text.contains("] 12/300 (30s) queued") && !text.contains("wait"),
            "{text}"
        );
    }

    #[test]
    fn slow_output_needs_a_queue_a_busy_writer_and_a_shortfall() {
        let mut ui = Ui {
            display: None,
            capacity: 1000,
            input_size: None,
            rate: 50.0,
            meter: RateMeter::default(),
            busy: VecDeque::from(vec![true; BUSY_SAMPLES]),
            text: String::new(),
            capacity_for: None,
            in_bytes: false,
            terminal: false,
            quiet: false,
        };
        let snap = Snapshot {
            depth: 300,
            ..Snapshot::default()
        };
        assert!(ui.output_slow(&snap, Some(19.0)));
        // Keeping up with the rate is not slow.
        assert!(!ui.output_slow(&snap, Some(49.0)));
        // Nothing waiting: the input is what is slow.
        assert!(!ui.output_slow(&Snapshot::default(), Some(19.0)));
        // A writer that is mostly idle is waiting for the schedule.
        ui.busy = VecDeque::from(vec![false; BUSY_SAMPLES]);
        assert!(!ui.output_slow(&snap, Some(19.0)));
    }

    #[test]
    fn a_rate_changed_by_drip_ctl_is_the_one_judged_and_a_pause_is_said() {
        let mut ui = Ui {
            display: None,
            capacity: 1000,
            input_size: None,
            rate: 50.0,
            meter: RateMeter::default(),
            busy: VecDeque::from(vec![true; BUSY_SAMPLES]),
            text: String::new(),
            capacity_for: None,
            in_bytes: false,
            terminal: false,
            quiet: false,
        };
        let snap = Snapshot {
            depth: 300,
            ..Snapshot::default()
        };
        assert!(ui.output_slow(&snap, Some(19.0)));
        // Lowered to 20/s: 19/s keeps up.
        ui.set_rate(20.0);
        assert!(!ui.output_slow(&snap, Some(19.0)));
        let paused = Snapshot {
            paused: true,
            ..snap.clone()
        };
        assert!(ui.compose(&paused, None).ends_with(" | paused"));
        assert!(!ui.compose(&snap, None).contains("paused"));
        // Under a --schedule row that pauses: until when.
        let until = Snapshot {
            paused_until: Some(PauseEnd {
                clock: "18:00".into(),
                at: "2026-12-04T18:00:00+01:00".into(),
            }),
            ..paused
        };
        assert!(ui.compose(&until, None).ends_with(" | paused until 18:00"));
    }

    #[test]
    fn the_schedules_row_and_the_ramp_are_shown() {
        use crate::report::ramp::RampState;
        use crate::report::schedule::ScheduleRow;
        let ui = Ui::new(ProgressMode::Never, 10, None, 50.0, false);
        let rows = ["Mon-Fri 09:00-18:00 pause", "* 50/s"];
        let at = |schedule_row: Option<usize>, ramp_fraction: Option<f64>| {
            let mut sections = crate::report::Sections::default();
            sections.extend(schedule_row.map(|row| ScheduleRow {
                row,
                text: row.checked_sub(1).map(|i| rows[i].to_string()),
                until: None,
                zone: "UTC".into(),
                until_unix: None,
                until_clock: None,
                pauses: false,
            }));
            sections.extend(ramp_fraction.map(|fraction| RampState {
                from: 0.0,
                over_ms: 1000.0,
                fraction,
                left_ms: 600.0,
            }));
            let snap = Snapshot {
                shown: sections.shown(),
                ..Snapshot::default()
            };
            ui.compose(&snap, None)
        };
        assert!(
            at(Some(2), None).ends_with(" | row 2 * 50/s"),
            "{}",
            at(Some(2), None)
        );
        assert!(at(Some(0), None).ends_with(" | no row"));
        assert!(at(None, Some(0.4)).ends_with(" | ramp 40%"));
        assert!(!at(None, None).contains("row"));
    }

    #[test]
    fn where_the_display_goes() {
        use ProgressMode::*;
        // stderr a terminal, stdout elsewhere: drawn on its line.
        assert_eq!(choose(Auto, true, false, false, false), Some(Surface::Line));
        // stdout the same terminal: nothing, unless asked; then pinned.
        assert_eq!(choose(Auto, true, true, false, false), None);
        assert_eq!(
            choose(Always, true, true, false, false),
            Some(Surface::Pinned)
        );
        // Not a terminal: only when asked.
        assert_eq!(choose(Auto, false, false, false, false), None);
        assert_eq!(
            choose(Always, false, false, false, false),
            Some(Surface::Line)
        );
        // A dumb terminal cannot redraw: summary only.
        assert_eq!(
            choose(Auto, true, false, true, false),
            Some(Surface::Hidden)
        );
        assert_eq!(choose(Never, true, false, false, false), None);
        // Jobs write no records: drawn with stdout on the terminal too,
        // and always pinned, as jobs write to the terminal themselves.
        assert_eq!(choose(Auto, true, true, false, true), Some(Surface::Pinned));
        assert_eq!(
            choose(Auto, true, false, false, true),
            Some(Surface::Pinned)
        );
        assert_eq!(choose(Auto, false, false, false, true), None);
        assert_eq!(
            choose(Always, false, false, false, true),
            Some(Surface::Line)
        );
        assert_eq!(choose(Auto, true, true, true, true), Some(Surface::Hidden));
        assert_eq!(choose(Never, true, true, false, true), None);
    }

    fn jobs_ui() -> Ui {
        Ui::new(ProgressMode::Never, 1000, Some(400), 10.0, true)
    }

    #[test]
    fn the_display_for_jobs_shows_their_figures_the_start_rate_and_the_pause() {
        let snap = Snapshot {
            counts: Counts {
                read: 40,
                bytes_read: 200,
                succeeded: 20,
                failed: 1,
                ..Counts::default()
            },
            depth: 12,
            oldest_age_ns: 1_200_000_000,
            elapsed_ns: 3 * S,
            ..Snapshot::default()
        };
        let mut jobs = JobsView {
            stats: JobStats {
                jobs_running: 2,
                retries: 3,
                pauses: 1,
                attempt_p50_ms: 500.0,
                ..JobStats::default()
            },
            ..JobsView::default()
        };
        let text = jobs_ui().compose(&snap, Some(&jobs));
        assert!(
            text.contains("12/1000 queued | in 40 | running 2 succeeded 20 failed 1 retries 3 pauses 1 | oldest 1.2s | starts -/s"),
            "{text}"
        );
        assert!(
            !text.contains(" out ") && !text.contains("dropped"),
            "{text}"
        );
        assert!(!text.contains("paused"), "{text}");
        // Every start paused for an overload: the time left.
        jobs.paused_left_ns = 1_500_000_000;
        let text = jobs_ui().compose(&snap, Some(&jobs));
        assert!(text.ends_with(" | paused 1.5s"), "{text}");
        // With --key: the keys paused, the first shown safe.
        jobs.paused_left_ns = 0;
        jobs.paused_keys = vec![b"a.example"[..].into()];
        let text = jobs_ui().compose(&snap, Some(&jobs));
        assert!(text.ends_with(" | paused a.example"), "{text}");
        jobs.paused_keys = vec![b"\x1b[2J"[..].into(), b"b.example"[..].into()];
        let text = jobs_ui().compose(&snap, Some(&jobs));
        assert!(text.ends_with(" | paused \\x1b[2J +1"), "{text}");
        // drip ctl's pause says so first.
        let paused = Snapshot {
            paused: true,
            ..snap.clone()
        };
        assert!(jobs_ui()
            .compose(&paused, Some(&jobs))
            .ends_with(" | paused"));
        // Drops and expiries are said when there are any.
        let shed = Snapshot {
            counts: Counts {
                dropped_newest: 4,
                expired: 2,
                ..snap.counts
            },
            ..snap
        };
        let text = jobs_ui().compose(&shed, Some(&jobs));
        assert!(text.contains("| in 40 dropped 4 expired 2 |"), "{text}");
    }

    #[test]
    fn a_narrow_terminal_keeps_the_jobs_running_and_succeeded() {
        let line = format!(
            "00:00:03 [{}] 12/1000 queued | in 40 | running 2 succeeded 20 failed 0 retries 0 pauses 0 | oldest 1.2s | starts 3.20/s | ETA 0:12 | paused 1.5s",
            gauge(12, 1000)
        );
        assert_eq!(fit(&line, 200), line);
        assert_eq!(
            fit(&line, 125),
            "00:00:03 12/1000 queued | in 40 | running 2 succeeded 20 failed 0 retries 0 pauses 0 | starts 3.20/s | ETA 0:12 | paused 1.5s"
        );
        assert_eq!(
            fit(&line, 100),
            "00:00:03 12/1000 queued | running 2 succeeded 20 failed 0 | starts 3.20/s | ETA 0:12 | paused 1.5s"
        );
        // An 80-column terminal.
        assert_eq!(
            fit(&line, 77),
            "00:00:03 | running 2 succeeded 20 | starts 3.20/s | ETA 0:12 | paused 1.5s"
        );
        assert_eq!(fit(&line, 30), "00:00:03 | running 2");
    }

    #[test]
    fn the_eta_of_jobs_counts_the_starts_to_come_and_an_attempt() {
        let jobs = JobStats {
            jobs_running: 2,
            attempt_p50_ms: 500.0,
            ..JobStats::default()
        };
        // 400 bytes of 5-byte records: 80 in the file, 40 read of which
        // 10 wait, 30 started: 50 still to start at 10/s, then an attempt.
        let snap = Snapshot {
            counts: Counts {
                read: 40,
                bytes_read: 200,
                ..Counts::default()
            },
            depth: 10,
            ..Snapshot::default()
        };
        assert_eq!(
            jobs_eta(&snap, Some(400), Some(10.0), &jobs),
            Some(Duration::from_millis(5400))
        );
        // No start rate yet: no estimate.
        assert_eq!(jobs_eta(&snap, Some(400), None, &jobs), None);
        // Every record started, two still running: an attempt, whatever
        // the start rate (0 once starts have stopped).
        let started = Snapshot {
            depth: 0,
            reading_done: true,
            ..snap
        };
        assert_eq!(
            jobs_eta(&started, None, Some(0.0), &jobs),
            Some(Duration::from_millis(500))
        );
        let idle = JobStats {
            jobs_running: 0,
            ..jobs
        };
        assert_eq!(jobs_eta(&started, None, None, &idle), Some(Duration::ZERO));
    }

    #[test]
    fn gauge_and_fit() {
        assert_eq!(gauge(0, 10), " ".repeat(GAUGE));
        assert_eq!(gauge(10, 10), "=".repeat(GAUGE));
        assert_eq!(
            gauge(5, 10),
            format!("{}>{}", "=".repeat(12), " ".repeat(11))
        );
        assert_eq!(fit("abcdef", 4), "abcd");
        let line = format!("00:00:01 [{}] 5/10 queued", gauge(5, 10));
        let coloured = colour_gauge(&line);
        assert!(coloured.contains("\x1b[36m============>"), "{coloured:?}");
        // A line cut inside the gauge is left plain.
        assert_eq!(colour_gauge(&fit(&line, 20)), fit(&line, 20));
    }

    #[test]
    fn a_narrow_terminal_keeps_the_rate_eta_and_sign() {
        let line = format!(
            "00:00:02 [{}] 437/100000 queued | in 500 out 63 dropped 0 | 21.79/s | ETA 0:12 | output blocked",
            gauge(437, 100_000)
        );
        assert_eq!(fit(&line, 200), line);
        assert_eq!(
            fit(&line, 90),
            "00:00:02 437/100000 queued | in 500 out 63 dropped 0 | 21.79/s | ETA 0:12 | output blocked"
        );
        assert_eq!(
            fit(&line, 77),
            "00:00:02 437/100000 queued | 21.79/s | ETA 0:12 | output blocked"
        );
        assert_eq!(fit(&line, 19), "00:00:02 437/100000");
    }

    #[test]
    fn a_narrow_terminal_gives_up_the_keys_before_the_rate_and_eta() {
        let line = format!(
            "00:00:02 [{}] 17/1000 queued | in 30 out 13 dropped 0 | oldest 3.4s wait 1.2s | keys 9 (9 busy) | 5.00/s | ETA 3:15 | output blocked",
            gauge(17, 1000)
        );
        for (width, want) in [
            (120, "00:00:02 17/1000 queued | in 30 out 13 dropped 0 | keys 9 (9 busy) | 5.00/s | ETA 3:15 | output blocked"),
            (70, "00:00:02 17/1000 queued | 5.00/s | ETA 3:15 | output blocked"),
            (50, "00:00:02 17/1000 queued | 5.00/s | ETA 3:15"),
            (30, "00:00:02 17/1000 queued"),
        ] {
            assert_eq!(fit(&line, width), want, "at {width} columns");
        }
        // Cut only between items or after a number, never inside one.
        assert_eq!(fit(&line, 40), "00:00:02 17/1000 queued | 5.00/s");
        assert_eq!(fit(&line, 20), "00:00:02 17/1000");
        assert_eq!(fit(&line, 12), "00:00:02");
        // A byte depth keeps its unit or goes whole; a quoted key is never cut.
        let bytes = "00:00:02 17/1048576 bytes queued | 5.00/s | ETA 3:15";
        for width in [20, 25, 30] {
            assert_eq!(fit(bytes, width), "00:00:02", "at {width} columns");
        }
        assert_eq!(fit(bytes, 33), "00:00:02 17/1048576 bytes queued");
        let paused = "00:00:02 17/1000 queued | 5.00/s | paused \"GET /v2 x\" +1";
        assert_eq!(fit(paused, 46), "00:00:02 17/1000 queued | 5.00/s");
    }

    #[test]
    fn time_left_counts_the_intervals_after_the_next_record() {
        // Three records at 0.5/s: the next within 2 s, the last 4 s after.
        assert_eq!(time_left(3.0, 0.5), Some(Duration::from_secs(4)));
        assert_eq!(time_left(1.0, 0.5), Some(Duration::ZERO));
        assert_eq!(time_left(0.0, 10.0), Some(Duration::ZERO));
        assert_eq!(
            time_left(2900.0, 100.0),
            Some(Duration::from_millis(28_990))
        );
        assert_eq!(time_left(5.0, 0.0), None);
    }

    #[test]
    fn eta_counts_the_rest_of_a_file_the_reader_has_taken_in() {
        // The reader took in the whole 10000-byte file, but only 1000
        // records are admitted (900 wait, 100 written at 5 bytes each):
        // 2000 records in the file, 1900 still to leave, at 100/s.
        let snap = Snapshot {
            counts: Counts {
                read: 1000,
                bytes_read: 10_000,
                written: 100,
                bytes_written: 500,
                ..Counts::default()
            },
            depth: 900,
            ..Snapshot::default()
        };
        assert_eq!(
            eta(&snap, Some(10_000), Some(100.0)),
            Some(Duration::from_millis(18_990))
        );
        // Input ended: only what waits.
        let ended = Snapshot {
            reading_done: true,
            ..snap
        };
        assert_eq!(
            eta(&ended, Some(10_000), Some(100.0)),
            Some(Duration::from_millis(8_990))
        );
    }

    #[test]
    fn eta_beyond_a_duration_is_none() {
        // One record per 100 years, 10^12 records queued: 10^14 years.
        let snap = Snapshot {
            depth: 1_000_000_000_000,
            reading_done: true,
            ..Snapshot::default()
        };
        let rate = 1.0 / crate::rate::LONGEST.as_secs_f64();
        assert_eq!(eta(&snap, None, Some(rate)), None);
    }
}
