//! `--joblog FILE`: one JSON line per attempt.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use super::retry::Exit;

/// One attempt, as the joblog records it.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    /// The record's number (1-based, in the order records were run).
    pub record: u64,
    /// The record's stable id (`DRIP_RECORD_ID`).
    pub id: &'a str,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// When it started, seconds since the Unix epoch.
    pub start: f64,
    /// How long it ran, ms.
    pub duration_ms: f64,
    /// Its exit status, when it exited.
    pub exit: Option<i32>,
    /// The signal that ended it, when one did (after a timeout too: TERM,
    /// or KILL).
    pub signal: Option<i32>,
    /// Whether drip killed it at `--timeout` or the deadline (`exit` or
    /// `signal` then says how it ended).
    pub timed_out: bool,
    /// The HTTP status of its headers file, when it wrote one.
    pub http_status: Option<u16>,
    /// What became of it: `succeeded`, `retry`, `overload` (retried after
    /// a pause), `failed`, `expired` or `undelivered`.
    pub outcome: &'static str,
}

impl Entry<'_> {
    /// The exit fields of `exit`.
    pub fn exit_fields(exit: Exit) -> (Option<i32>, Option<i32>, bool) {
        match exit {
            Exit::Code(c) => (Some(c), None, false),
            Exit::Signal(s) => (None, Some(s), false),
            Exit::TimedOut { code, signal } => (code, signal, true),
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The joblog file.
#[derive(Debug)]
pub struct Joblog {
    file: BufWriter<File>,
}

impl Joblog {
    /// Create (truncate) `path`.
    ///
    /// # Errors
    /// When it cannot be created.
    pub fn create(path: &Path) -> Result<Joblog> {
        let file = File::create(path).with_context(|| format!("--joblog {}", path.display()))?;
        Ok(Joblog {
            file: BufWriter::new(file),
        })
    }

    /// Open `path` to append to it (`--resume`), creating it if need be. A
    /// last line cut short (the run that wrote it was killed) is ended
    /// first, so the lines appended start on a line of their own.
    ///
    /// # Errors
    /// When it cannot be opened or written.
    pub fn append(path: &Path) -> Result<Joblog> {
        let context = || format!("--resume {}", path.display());
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .read(true)
            .open(path)
            .with_context(context)?;
        let len = file.metadata().with_context(context)?.len();
        if len > 0 {
            let mut last = [0u8];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut last, len - 1)
                .with_context(context)?;
            if last[0] != b'\n' {
                file.write_all(b"\n").with_context(context)?;
            }
        }
        Ok(Joblog {
            file: BufWriter::new(file),
        })
    }

    /// Append one line and flush it (a reader may follow the file).
    pub fn write(&mut self, entry: &Entry) {
        let line = serde_json::to_string(entry).expect("plain data");
        let _ = writeln!(self.file, "{line}").and_then(|()| self.file.flush());
    }
}
