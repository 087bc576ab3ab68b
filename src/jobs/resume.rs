//! `--resume JOBLOG`: run only what an earlier run left undone.
//!
//! The joblog of the earlier runs is read once, at the start: each line
//! whose `outcome` is `succeeded` credits the content digest in its `id`
//! (`DRIP_RECORD_ID`, `PLACE-HASH`: the hash part, 128 bits of SHA-256, so
//! a record is matched by its bytes, not its place in the input). A line
//! written by an earlier drip, whose hash part is a 64-bit FNV-1a (16 hex
//! digits, which two records can share), is matched by its `record` field
//! instead: the record's bytes, whose digest it credits (if they hash to
//! that FNV-1a; if not, the line is no entry). As records are read, a
//! record whose digest has a credit left spends it and is skipped (fate
//! `skipped_done`): a record that appears twice in the input is skipped
//! twice only if it succeeded twice. A success is logged only once its
//! job's exit is known, so a record whose job was cut short is run again.
//!
//! A joblog cut in the middle of a line (`kill -9`, a power cut) is read up
//! to its last whole line; lines that are not a joblog entry are counted and
//! passed over. A joblog that does not exist yet means nothing is done; a
//! file with lines and not one entry among them is no joblog (a mistyped
//! name, the input itself) and is refused before this run appends to it.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use crate::bucket::Segment;

/// The successes of earlier runs, by content digest
/// ([`super::attempt::content_hash`]), not yet spent.
#[derive(Debug, Default)]
pub struct Done {
    credits: HashMap<u128, u64>,
    /// Whole lines read that are not joblog entries (a torn line that a
    /// later run ended, a stray line).
    pub unreadable_lines: u64,
    /// Of those, lines that begin as drip writes an entry (`{"id":"`): entries a
    /// run killed mid-write cut short, ended by the next run's newline.
    pub cut_entries: u64,
    /// Successes read.
    pub successes: u64,
    /// Joblog entries read, whatever their outcome.
    pub entries: u64,
    /// Bytes at the end of the file after its last newline (a torn line).
    pub torn_bytes: usize,
}

/// How drip begins every joblog entry.
const ENTRY_START: &[u8] = b"{\"id\":\"";

/// Whether `line` begins as drip writes an entry, or is the beginning of
/// that (an entry cut short within its first bytes).
fn begins_as_an_entry(line: &[u8]) -> bool {
    let line = line.trim_ascii();
    line.starts_with(ENTRY_START) || (!line.is_empty() && ENTRY_START.starts_with(line))
}

impl Done {
    /// The successes recorded in the joblog at `path`; none when it does
    /// not exist.
    ///
    /// # Errors
    /// It exists but cannot be read, or is no joblog ([`Done::not_a_joblog`]).
    pub fn read(path: &Path) -> Result<Done> {
        let context = || format!("--resume {}", path.display());
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(context),
        };
        let done = Done::parse(&text);
        match done.not_a_joblog(&text) {
            Some(why) => Err(anyhow!("not a joblog ({why})")).with_context(context),
            None => Ok(done),
        }
    }

    /// Why `text`, read as `self`, is no joblog at all, if it is not: it
    /// has lines and not one of them is an entry. A line cut short
    /// (beginning as an entry does, `{"`, whole or the torn tail) may be a
    /// joblog's, and is not refused; blank lines (NULs too) are no lines.
    pub fn not_a_joblog(&self, text: &[u8]) -> Option<String> {
        let torn = &text[text.len() - self.torn_bytes..];
        let torn = torn.trim_ascii();
        let lines = self.unreadable_lines + u64::from(!torn.is_empty());
        let a_torn_entry = self.cut_entries > 0 || torn.starts_with(b"{\"");
        if self.entries > 0 || lines == 0 || a_torn_entry {
            return None;
        }
        Some(match lines {
            1 => "its one line is not a joblog entry".to_string(),
            n => format!("none of its {n} lines is a joblog entry"),
        })
    }

    /// The successes recorded in a joblog's bytes.
    pub fn parse(text: &[u8]) -> Done {
        let whole = text
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        let mut done = Done {
            torn_bytes: text.len() - whole,
            ..Done::default()
        };
        for line in text[..whole].split(|&b| b == b'\n') {
            // A page of NULs (a file cut short by a power cut) is blank.
            if line.iter().all(|&b| b.is_ascii_whitespace() || b == 0) {
                continue;
            }
            match success_of(line) {
                Some(Some(hash)) => {
                    *done.credits.entry(hash).or_default() += 1;
                    done.successes += 1;
                    done.entries += 1;
                }
                Some(None) => done.entries += 1,
                None => {
                    done.unreadable_lines += 1;
                    if begins_as_an_entry(line) {
                        done.cut_entries += 1;
                    }
                }
            }
        }
        done
    }

    /// Whether the record whose content digest is `hash` succeeded before
    /// (and was not skipped yet as often as it did): if so, the credit is
    /// spent.
    pub fn take(&mut self, hash: u128) -> bool {
        match self.credits.get_mut(&hash) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// The records of `seg` (ending in `delimiter`) not done before, as
    /// runs of records consecutive in the input (each keeps its place in
    /// the input: [`Segment::number`]), and how many records and bytes
    /// were skipped. `seg` comes back as it is when none is skipped.
    pub fn filter(&mut self, mut seg: Segment, delimiter: u8) -> (Vec<Segment>, usize, usize) {
        let mut runs = Vec::new();
        let (mut skipped, mut skipped_bytes) = (0, 0);
        // The records kept since the last skipped one: the front of `seg`.
        let (mut kept, mut kept_bytes) = (0, 0);
        let whole = seg.clone();
        for record in whole.records() {
            let body = record.strip_suffix(&[delimiter]).unwrap_or(record);
            if self.take(super::attempt::content_hash(body)) {
                if kept > 0 {
                    runs.push(seg.split_known(kept_bytes, kept));
                    (kept, kept_bytes) = (0, 0);
                }
                seg.skip_known(record.len(), 1);
                skipped += 1;
                skipped_bytes += record.len();
            } else {
                kept += 1;
                kept_bytes += record.len();
            }
        }
        if !seg.is_empty() {
            runs.push(seg);
        }
        (runs, skipped, skipped_bytes)
    }
}

/// A joblog line: `None` when it is not one; `Some(Some(digest))` for a
/// success, `Some(None)` for another outcome. A line of an earlier drip
/// (a 64-bit FNV-1a in its id) gives the digest of its `record`.
fn success_of(line: &[u8]) -> Option<Option<u128>> {
    let entry: serde_json::Value = serde_json::from_slice(line).ok()?;
    let id = entry.get("id")?.as_str()?;
    let outcome = entry.get("outcome")?.as_str()?;
    let (_, hash) = id.rsplit_once('-')?;
    let succeeded = outcome == "succeeded";
    match hash.len() {
        32 => {
            let digest = u128::from_str_radix(hash, 16).ok()?;
            Some(succeeded.then_some(digest))
        }
        16 => {
            let fnv = u64::from_str_radix(hash, 16).ok()?;
            if !succeeded {
                return Some(None);
            }
            let record = unshown(entry.get("record")?.as_str()?)?;
            (super::attempt::fnv1a_64(&record) == fnv)
                .then(|| Some(super::attempt::content_hash(&record)))
        }
        _ => None,
    }
}

/// A record's bytes from the joblog's `record` field
/// ([`crate::report::spell::json_key`]: a backslash as `\\`, a byte of invalid
/// UTF-8 as `\xNN`); `None` if it is not written so.
fn unshown(shown: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(shown.len());
    let mut rest = shown.as_bytes();
    while let Some(at) = memchr::memchr(b'\\', rest) {
        bytes.extend_from_slice(&rest[..at]);
        rest = &rest[at + 1..];
        match rest {
            [b'\\', tail @ ..] => {
                bytes.push(b'\\');
                rest = tail;
            }
            [b'x', hi, lo, tail @ ..] if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => {
                let hex = std::str::from_utf8(&[*hi, *lo]).ok()?.to_owned();
                bytes.push(u8::from_str_radix(&hex, 16).ok()?);
                rest = tail;
            }
            _ => return None,
        }
    }
    bytes.extend_from_slice(rest);
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::attempt::{content_hash, record_id};

    fn line(number: u64, record: &str, outcome: &str) -> String {
        format!(
            "{{\"record\":{number},\"id\":\"{}\",\"attempt\":1,\"outcome\":\"{outcome}\"}}\n",
            record_id(number, record.as_bytes())
        )
    }

    fn seg(text: &str) -> Segment {
        Segment::new(bytes::Bytes::copy_from_slice(text.as_bytes()), b'\n')
    }

    /// The runs' records, one after the other.
    fn joined(runs: &[Segment]) -> Vec<u8> {
        runs.iter().flat_map(|r| r.as_bytes().to_vec()).collect()
    }

    #[test]
    fn successes_are_matched_by_content_not_place() {
        let log = line(1, "a", "succeeded") + &line(2, "b", "failed") + &line(3, "c", "succeeded");
        let mut done = Done::parse(log.as_bytes());
        assert_eq!(done.successes, 2);
        // Another order, a record added: a and c are skipped.
        let (kept, skipped, bytes) = done.filter(seg("c\nnew\nb\na\n"), b'\n');
        assert_eq!(
            (&joined(&kept)[..], skipped, bytes),
            (&b"new\nb\n"[..], 2, 4)
        );
        // Spent: a second a runs.
        let (kept, skipped, _) = done.filter(seg("a\n"), b'\n');
        assert_eq!((&joined(&kept)[..], skipped), (&b"a\n"[..], 0));
    }

    #[test]
    fn a_duplicate_is_skipped_as_often_as_it_succeeded() {
        let log = line(1, "x", "succeeded") + &line(4, "x", "retry");
        let mut done = Done::parse(log.as_bytes());
        let (kept, skipped, _) = done.filter(seg("x\ny\nx\n"), b'\n');
        assert_eq!((&joined(&kept)[..], skipped), (&b"y\nx\n"[..], 1));
        assert_eq!(kept.iter().map(Segment::len).sum::<usize>(), 2);
    }

    #[test]
    fn a_torn_last_line_is_not_read_and_stray_lines_are_counted() {
        let whole = line(1, "a", "succeeded");
        let torn = line(2, "b", "succeeded");
        let text = format!("{whole}not json\n\n{}", &torn[..torn.len() - 3]);
        let mut done = Done::parse(text.as_bytes());
        assert_eq!(done.successes, 1);
        assert_eq!(done.unreadable_lines, 1);
        assert_eq!(done.torn_bytes, torn.len() - 3);
        assert!(done.take(content_hash(b"a")));
        assert!(!done.take(content_hash(b"b")));
        // The torn line cut just before its newline: still not whole.
        let cut = format!("{whole}{}", torn.trim_end());
        assert_eq!(Done::parse(cut.as_bytes()).successes, 1);
    }

    #[test]
    fn a_missing_joblog_means_nothing_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let done = Done::read(&dir.path().join("none")).unwrap();
        assert_eq!(done.successes, 0);
        assert!(Done::read(dir.path()).is_err(), "a directory is no joblog");
    }

    #[test]
    fn a_file_without_one_entry_is_no_joblog() {
        let refused = |text: &str| Done::parse(text.as_bytes()).not_a_joblog(text.as_bytes());
        assert_eq!(
            refused("https://a\n\nhttps://b\nhttps://c"),
            Some("none of its 3 lines is a joblog entry".to_string())
        );
        assert_eq!(
            refused("https://a\n"),
            Some("its one line is not a joblog entry".to_string())
        );
        assert_eq!(
            refused("{\"x\":1}\n"),
            Some("its one line is not a joblog entry".into())
        );
        let entry = line(1, "a", "failed");
        for fine in [
            String::new(),
            "\n \n".to_string(),
            format!("stray\n{entry}"),
            entry[..entry.len() - 5].to_string(),
            // A run killed mid-write, its line then ended by the next run.
            "{\"id\":\"1-0a1b2c\n".to_string(),
            "{\"i\n".to_string(),
            // A page of NULs after a power cut, then the cut entry.
            format!("{}\n{{\"id\":\"2-", "\0".repeat(300)),
        ] {
            assert_eq!(refused(&fine), None, "{fine:?}");
        }
    }

    /// A line as an earlier drip wrote it: a 64-bit FNV-1a in its id.
    fn old_line(number: u64, record: &[u8], outcome: &str) -> String {
        let entry = serde_json::json!({
            "id": format!("{number}-{:016x}", crate::jobs::attempt::fnv1a_64(record)),
            "number": number,
            "record": crate::report::spell::json_key(record),
            "attempt": 1,
            "outcome": outcome,
        });
        format!("{entry}\n")
    }

    #[test]
    fn records_an_old_hash_did_not_tell_apart_are_told_apart() {
        let (a, b) = ("78eafc5a458f3669", "05d19705f609f65d");
        for log in [
            line(1, a, "succeeded"),
            old_line(1, a.as_bytes(), "succeeded"),
        ] {
            let mut done = Done::parse(log.as_bytes());
            assert_eq!(done.successes, 1, "{log}");
            let (kept, skipped, _) = done.filter(seg(&format!("{b}\n{a}\n")), b'\n');
            assert_eq!(
                (&joined(&kept)[..], skipped),
                (format!("{b}\n").as_bytes(), 1)
            );
        }
    }

    #[test]
    fn an_old_joblog_is_matched_by_its_records() {
        let odd = b"a\\x41 \xff\\";
        let log = old_line(1, odd, "succeeded")
            + &old_line(2, b"b", "failed")
            + &old_line(3, b"c", "succeeded");
        let mut done = Done::parse(log.as_bytes());
        assert_eq!((done.successes, done.entries), (2, 3));
        let mut input = odd.to_vec();
        input.extend_from_slice(b"\nb\nc\n");
        let read = Segment::new(bytes::Bytes::from(input), b'\n');
        let (kept, skipped, _) = done.filter(read, b'\n');
        assert_eq!((&joined(&kept)[..], skipped), (&b"b\n"[..], 2));
        // A record field that does not give the id's hash: no entry.
        let forged = old_line(1, b"x", "succeeded").replace("\"x\"", "\"y\"");
        let done = Done::parse(forged.as_bytes());
        assert_eq!((done.successes, done.unreadable_lines), (0, 1));
    }

    #[test]
    fn the_last_record_without_a_delimiter_is_matched_too() {
        let mut done = Done::parse(line(1, "tail", "succeeded").as_bytes());
        let (kept, skipped, _) = done.filter(seg("a\ntail"), b'\n');
        assert_eq!((&joined(&kept)[..], skipped), (&b"a\n"[..], 1));
    }

    #[test]
    fn the_records_kept_keep_their_place_in_the_input() {
        let log = line(1, "b", "succeeded") + &line(2, "d", "succeeded");
        let mut done = Done::parse(log.as_bytes());
        let mut read = seg("a\nb\nc\nd\ne\nf\n");
        read.number = 11;
        let (kept, skipped, _) = done.filter(read, b'\n');
        let runs: Vec<(u64, &[u8])> = kept.iter().map(|r| (r.number, r.as_bytes())).collect();
        assert_eq!(
            runs,
            [(11, &b"a\n"[..]), (13, b"c\n"), (15, b"e\nf\n")],
            "{skipped}"
        );
    }
}
