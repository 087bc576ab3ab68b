//! `--joblog FILE`: one JSON line per attempt ([`Entry`]), flushed as it
//! is written.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use super::retry::Exit;

/// One attempt, as the joblog records it: one JSON object a line, its
/// fields in this order.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    /// The record's stable id (`DRIP_RECORD_ID`: its place in the input
    /// and a digest of its bytes: 128 bits of their SHA-256), the same in
    /// every run over the same input: what a later run matches finished
    /// records by (the digest).
    pub id: &'a str,
    /// The record's number (`DRIP_RECORD`: 1-based, in the order records
    /// were run).
    pub number: u64,
    /// The record, without its delimiter, as a JSON string: valid UTF-8 as
    /// it is, a backslash as `\\`, each byte of invalid UTF-8 as `\xNN`
    /// (as keys are written in the stats).
    pub record: &'a str,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// When it started: Unix time in whole microseconds.
    pub start_us: u64,
    /// How long it ran, whole microseconds.
    pub duration_us: u64,
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
    /// a pause), `failed`, `expired` or `undelivered`. The record's last
    /// line holds its fate: `succeeded`, `failed`, `expired` or
    /// `undelivered`.
    pub outcome: &'static str,
    /// Why the attempt could not start, when it could not (the record
    /// cannot be an argument: a NUL byte, over the system's limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
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

/// Unix time in whole microseconds.
pub fn unix_micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A duration in whole microseconds.
pub fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The joblog file.
#[derive(Debug)]
pub struct Joblog {
    file: BufWriter<File>,
}

impl Joblog {
    /// Create (truncate) `path`. A FIFO that no one reads is waited for
    /// while `give_up` says not to ([`crate::sys::open_to_write`]); given
    /// up, `None`.
    ///
    /// # Errors
    /// When it cannot be created.
    pub fn create(path: &Path, give_up: &mut dyn FnMut() -> bool) -> Result<Option<Joblog>> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        let file = crate::sys::open_to_write(&options, path, give_up)
            .with_context(|| format!("--joblog {}", path.display()))?;
        Ok(file.map(|file| Joblog {
            file: BufWriter::new(file),
        }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_the_record_as_a_string_and_whole_microseconds() {
        let record = crate::report::spell::json_key(b"a \"b\"\\\xff");
        let entry = Entry {
            id: "1-00",
            number: 1,
            record: &record,
            attempt: 2,
            start_us: unix_micros(UNIX_EPOCH + std::time::Duration::from_nanos(1_500_000_900)),
            duration_us: micros(std::time::Duration::from_nanos(58_672_104_123)),
            exit: Some(0),
            signal: None,
            timed_out: false,
            http_status: None,
            outcome: "succeeded",
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            r#"{"id":"1-00","number":1,"record":"a \"b\"\\\\\\xff","attempt":2,"start_us":1500000,"duration_us":58672104,"exit":0,"signal":null,"timed_out":false,"http_status":null,"outcome":"succeeded"}"#
        );
    }
}
