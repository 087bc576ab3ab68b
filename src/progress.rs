//! What drip shows on stderr: error lines, and the live progress display.
//!
//! All stderr output goes through [`Ui`] so that a message never tears the
//! progress display: the display is suspended while a line is printed.

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use crate::cli::ProgressMode;
use crate::stats::{format_rate, Counts};

/// How long a write may be under way before the display says output is
/// blocked.
const BLOCKED_AFTER_NS: u64 = 250_000_000;

/// A moment's view of drip, for the display and the stats stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Counts so far.
    pub counts: Counts,
    /// Records queued.
    pub depth: u64,
    /// The most records ever queued.
    pub max_depth: u64,
    /// Age of the oldest queued record, ns.
    pub oldest_age_ns: u64,
    /// How long the write under way has taken, ns (0 when none is).
    pub writing_for_ns: u64,
    /// Time since start, ns.
    pub elapsed_ns: u64,
    /// Whether reading has ended.
    pub reading_done: bool,
    /// With limits per key: keys remembered, and those with records waiting.
    pub keys: Option<(u64, u64)>,
}

/// stderr, with or without a live progress display.
#[derive(Debug)]
pub struct Ui {
    bar: Option<ProgressBar>,
    capacity: u64,
    /// Total input bytes, when every input is a regular file.
    input_size: Option<u64>,
    /// Records per second allowed, for the ETA.
    rate: f64,
    last: Option<(u64, u64)>,
}

impl Ui {
    /// A Ui drawing progress per `mode` for a bucket of `capacity` records.
    pub fn new(mode: ProgressMode, capacity: usize, input_size: Option<u64>, rate: f64) -> Ui {
        let show = match mode {
            ProgressMode::Never => false,
            ProgressMode::Always => true,
            ProgressMode::Auto => io::stderr().is_terminal(),
        };
        let bar = show.then(|| {
            let target = if io::stderr().is_terminal() {
                ProgressDrawTarget::stderr_with_hz(10)
            } else {
                ProgressDrawTarget::term_like_with_hz(Box::new(PlainStderr), 10)
            };
            let bar = ProgressBar::with_draw_target(Some(capacity as u64), target);
            bar.set_style(style(colours_allowed()));
            bar
        });
        Ui {
            bar,
            capacity: capacity as u64,
            input_size,
            rate,
            last: None,
        }
    }

    /// Whether the live display is on.
    pub fn showing_progress(&self) -> bool {
        self.bar.is_some()
    }

    /// Print `drip: <message>` on stderr.
    pub fn message(&self, message: &str) {
        self.line(&format!("drip: {message}"));
    }

    /// Print a raw line on stderr (stats JSON). A closed stderr is ignored:
    /// diagnostics never stop the records.
    pub fn line(&self, line: &str) {
        let print = || {
            let _ = writeln!(io::stderr(), "{line}");
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Redraw the display from `snap`.
    pub fn update(&mut self, snap: &Snapshot) {
        let Some(bar) = &self.bar else { return };
        let c = &snap.counts;
        // Output rate over the last update interval.
        let rate = match self.last {
            Some((t, written)) if snap.elapsed_ns > t => {
                (c.written - written) as f64 * 1e9 / (snap.elapsed_ns - t) as f64
            }
            _ => 0.0,
        };
        self.last = Some((snap.elapsed_ns, c.written));
        bar.set_position(snap.depth.min(self.capacity));
        let mut msg = format!(
            "in {} out {} dropped {}{} | {}",
            c.read,
            c.written,
            c.dropped(),
            if c.expired > 0 {
                format!(" expired {}", c.expired)
            } else {
                String::new()
            },
            format_rate(rate),
        );
        if let Some((keys, busy)) = snap.keys {
            msg.push_str(&format!(" | keys {keys} ({busy} busy)"));
        }
        if let Some(eta) = self.eta(snap) {
            msg.push_str(&format!(" | ETA {}", clock(eta)));
        }
        if snap.writing_for_ns >= BLOCKED_AFTER_NS {
            msg.push_str(" | output blocked");
        }
        bar.set_message(msg);
    }

    /// Time left: records still to come (estimated from the bytes read of
    /// the known input size) at the configured rate.
    fn eta(&self, snap: &Snapshot) -> Option<Duration> {
        let c = &snap.counts;
        let remaining_in = match (snap.reading_done, self.input_size) {
            (true, _) => 0.0,
            (false, Some(size)) if c.bytes_read > 0 && size >= c.bytes_read => {
                c.read as f64 * (size - c.bytes_read) as f64 / c.bytes_read as f64
            }
            _ => return None,
        };
        if !self.rate.is_finite() {
            return None;
        }
        let left = remaining_in + snap.depth as f64;
        // Beyond what a Duration holds (a rate of one per decades), no ETA.
        Duration::try_from_secs_f64(left / self.rate).ok()
    }

    /// Clear the display, leaving the screen as it was.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Lock the shared display (a thread that panicked holding it leaves it
/// usable).
pub fn lock_ui(ui: &std::sync::Mutex<Ui>) -> std::sync::MutexGuard<'_, Ui> {
    ui.lock().unwrap_or_else(|e| e.into_inner())
}

/// `H:MM:SS` or `M:SS`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// Colour only when neither `NO_COLOR` nor `TERM=dumb` says no.
fn colours_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb
}

fn style(colour: bool) -> ProgressStyle {
    let template = if colour {
        "{elapsed_precise} [{bar:24.cyan/blue}] {pos}/{len} queued | {msg}"
    } else {
        "{elapsed_precise} [{bar:24}] {pos}/{len} queued | {msg}"
    };
    ProgressStyle::with_template(template)
        .expect("valid template")
        .progress_chars("=> ")
}

/// stderr as a plain ANSI terminal, for `--progress` when stderr is not a
/// terminal (indicatif would otherwise hide the display).
#[derive(Debug)]
struct PlainStderr;

impl PlainStderr {
    fn put(&self, s: &str) -> io::Result<()> {
        io::stderr().write_all(s.as_bytes())
    }
}

impl TermLike for PlainStderr {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}A"))?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}B"))?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}C"))?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}D"))?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.put(s)?;
        self.put("\n")
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.put(s)
    }
    fn clear_line(&self) -> io::Result<()> {
        self.put("\r\x1b[2K")
    }
    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_format() {
        assert_eq!(clock(Duration::from_secs(75)), "1:15");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }

    #[test]
    fn eta_from_bytes_read_and_rate() {
        let ui = Ui {
            bar: None,
            capacity: 10,
            input_size: Some(1000),
            rate: 10.0,
            last: None,
        };
        let snap = Snapshot {
            counts: Counts {
                read: 50,
                bytes_read: 500,
                ..Counts::default()
            },
            depth: 10,
            ..Snapshot::default()
        };
        // 50 more records to read plus 10 queued, at 10/s: 6 s.
        assert_eq!(ui.eta(&snap), Some(Duration::from_secs(6)));
    }

    #[test]
    fn eta_beyond_a_duration_is_none() {
        // One record per 100 years, 10^12 records queued: 10^14 years.
        let ui = Ui {
            bar: None,
            capacity: 10,
            input_size: None,
            rate: 1.0 / crate::rate::LONGEST.as_secs_f64(),
            last: None,
        };
        let snap = Snapshot {
            depth: 1_000_000_000_000,
            reading_done: true,
            ..Snapshot::default()
        };
        assert_eq!(ui.eta(&snap), None);
    }
}
