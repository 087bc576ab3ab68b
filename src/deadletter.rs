//! The dead-letter file: where records that are not written to stdout go,
//! byte-exact, each with its delimiter, in the order they left
//! ([`crate::ledger::Ledger::take_dead`] hands them over).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::bucket::Segment;
use crate::input::Piece;

/// The dead letter, when `--dead-letter` names one.
#[derive(Debug)]
pub struct DeadLetter {
    file: Option<(PathBuf, BufWriter<File>)>,
    delimiter: u8,
    error: Option<anyhow::Error>,
    /// While a skipped record (`--oversize skip`) is being written piece
    /// by piece: the records that left meanwhile, written after it.
    held: Option<Vec<Segment>>,
}

impl DeadLetter {
    /// Open `path` for appending (none: records are only counted).
    ///
    /// # Errors
    /// The file cannot be opened or its last record cannot be ended.
    pub fn open(path: Option<&Path>, delimiter: u8) -> Result<DeadLetter> {
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
            held: None,
        })
    }

    /// A piece of a skipped record ([`crate::input::OversizeSink`]), as
    /// read; the record gets its delimiter if it ends without one.
    pub fn piece(&mut self, bytes: &[u8], piece: Piece) {
        let Some((path, out)) = &mut self.file else {
            return;
        };
        if self.error.is_none() {
            let mut result = out.write_all(bytes);
            if result.is_ok() && piece == Piece::EndUnterminated {
                result = out.write_all(&[self.delimiter]);
            }
            if let Err(e) = result {
                self.error = Some(anyhow::Error::from(e).context(format!("{}", path.display())));
            }
        }
        if piece == Piece::Part {
            self.held.get_or_insert_with(Vec::new);
        } else if let Some(held) = self.held.take() {
            self.write(&held);
        }
    }

    /// Append `segs`' records. The first error is kept for
    /// [`DeadLetter::finish`]; nothing more is written after it.
    pub fn write(&mut self, segs: &[Segment]) {
        for seg in segs {
            self.write_one(seg);
        }
    }

    fn write_one(&mut self, seg: &Segment) {
        let Some((path, out)) = &mut self.file else {
            return;
        };
        if self.error.is_some() || seg.is_empty() {
            return;
        }
        if let Some(held) = &mut self.held {
            held.push(seg.clone());
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

    /// Flush what is buffered; returns the first error met, if any.
    pub fn finish(&mut self) -> Option<anyhow::Error> {
        if self.held.is_some() {
            // Leaving in the middle of a skipped record: end it.
            self.piece(&[], Piece::EndUnterminated);
        }
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
