//! The ledger: the one place where a record's fate is recorded.
//!
//! Every record read ends in exactly one entry: written, dropped by policy
//! (newest or oldest), expired, skipped (`--oversize skip`), or
//! undelivered, so that `read = written + dropped_newest + dropped_oldest +
//! expired + skipped + undelivered`
//! once drip has finished ([`Counts::settled`]). Records that are not
//! written are kept, in the order they left, for the dead letter; the
//! ledger does no I/O: whoever holds it writes them out
//! ([`Ledger::take_dead`]). With `--exec`, a record given to a job ends as
//! one [`JobFate`], booked here.

use crate::bucket::{Fate, Piece, Segment};
use crate::stats::Counts;

/// Counts by fate, and the records waiting to go to the dead letter.
#[derive(Debug, Default)]
pub struct Ledger {
    counts: Counts,
    /// Records not written, oldest first; `None` when no dead letter is
    /// kept (the records are then only counted).
    dead: Option<Vec<Segment>>,
}

impl Ledger {
    /// A ledger that keeps the records not written when `dead_letter`.
    pub fn new(dead_letter: bool) -> Ledger {
        Ledger {
            counts: Counts::default(),
            dead: dead_letter.then(Vec::new),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// `records` records were read (entered the schedule, the bucket, or
    /// met the overflow policy).
    pub fn read(&mut self, records: usize) {
        self.counts.read += records as u64;
    }

    /// `bytes` bytes were read from the inputs.
    pub fn read_bytes(&mut self, bytes: usize) {
        self.counts.bytes_read += bytes as u64;
    }

    /// `records` whole records, `bytes` bytes in all, were written.
    pub fn written(&mut self, records: u64, bytes: u64) {
        self.counts.written += records;
        self.counts.bytes_written += bytes;
    }

    /// `records` records were run by a job that succeeded (`--exec`):
    /// nothing of them is written to stdout, so `bytes_written` stays.
    pub fn succeeded(&mut self, records: u64) {
        self.counts.succeeded += records;
    }

    /// `records` records, `bytes` bytes in all, were read and skipped: they
    /// succeeded in an earlier run (`--resume`).
    pub fn skipped_done(&mut self, records: usize, bytes: usize) {
        self.read(records);
        self.read_bytes(bytes);
        self.counts.skipped_done += records as u64;
    }

    /// The records of `seg` left other than by being written, as `fate`.
    pub fn dispose(&mut self, seg: Segment, fate: Fate) {
        self.counts.add(fate, seg.len() as u64);
        if let Some(dead) = &mut self.dead {
            if !seg.is_empty() {
                dead.push(seg);
            }
        }
    }

    /// The records of `seg` were dropped by the policy (`fate`) at an
    /// arrival because the schedule could not let them, or the record
    /// arriving, leave within `--max-wait`: counted as `fate` and as
    /// refused.
    pub fn refuse(&mut self, seg: Segment, fate: Fate) {
        self.counts.refused += seg.len() as u64;
        self.dispose(seg, fate);
    }

    /// The records of `seg` were read and are undelivered (drip stopped
    /// with them in hand).
    pub fn read_undelivered(&mut self, seg: Segment) {
        self.read(seg.len());
        self.dispose(seg, Fate::Undelivered);
    }

    /// A piece of a record too large to hold (`--oversize skip`) was read
    /// and passed on to the dead letter: counted as read, and as skipped
    /// once the record ends.
    pub fn skip_piece(&mut self, bytes: usize, piece: Piece) {
        self.counts.skip_piece(bytes, piece);
    }

    /// The records for the dead letter since the last call, oldest first.
    pub fn take_dead(&mut self) -> Vec<Segment> {
        match &mut self.dead {
            Some(dead) if !dead.is_empty() => std::mem::take(dead),
            _ => Vec::new(),
        }
    }
}

/// What became of a record given to a job (`--exec`): the one fate the
/// runner decides as the record's last attempt ends (or a stop, its
/// deadline or drip's leaving ends it before), with its name in the joblog
/// and its entry here. A new job outcome is a variant here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobFate {
    /// Its job succeeded.
    Succeeded,
    /// Its job failed: attempts exhausted, or a final status.
    Failed,
    /// Its `--deadline` passed.
    Expired,
    /// It was not run to its end: drip stopped, or left.
    Undelivered,
}

impl JobFate {
    /// The fate as the joblog names it (its `outcome` field).
    pub fn name(self) -> &'static str {
        match self {
            JobFate::Succeeded => "succeeded",
            JobFate::Failed => "failed",
            JobFate::Expired => "expired",
            JobFate::Undelivered => "undelivered",
        }
    }

    /// Book `record` in `ledger` as this fate: a success is counted, the
    /// other fates dispose of it (to the dead letter, with one).
    pub fn book(self, ledger: &mut Ledger, record: Segment) {
        let fate = match self {
            JobFate::Succeeded => return ledger.succeeded(record.len() as u64),
            JobFate::Failed => Fate::Failed,
            JobFate::Expired => Fate::Expired,
            JobFate::Undelivered => Fate::Undelivered,
        };
        ledger.dispose(record, fate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn seg(text: &str) -> Segment {
        Segment::new(Bytes::copy_from_slice(text.as_bytes()), b'\n')
    }

    #[test]
    fn fates_add_up_and_keep_their_order() {
        let mut l = Ledger::new(true);
        l.read(5);
        l.written(1, 2);
        l.dispose(seg("b\nc\n"), Fate::DroppedNewest);
        l.dispose(seg("d\n"), Fate::Expired);
        l.read_undelivered(seg("e\n"));
        let c = l.counts();
        assert_eq!((c.read, c.settled()), (6, 5));
        let dead: Vec<u8> = l
            .take_dead()
            .iter()
            .flat_map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(dead, b"b\nc\nd\ne\n");
        assert!(l.take_dead().is_empty());
    }

    #[test]
    fn without_a_dead_letter_records_are_only_counted() {
        let mut l = Ledger::new(false);
        l.dispose(seg("a\n"), Fate::DroppedOldest);
        assert_eq!(l.counts().dropped_oldest, 1);
        assert!(l.take_dead().is_empty());
    }

    #[test]
    fn each_fate_is_booked_where_the_summary_counts_it() {
        let mut ledger = Ledger::new(false);
        let record = || Segment::new(bytes::Bytes::from_static(b"a\n"), b'\n');
        for fate in [
            JobFate::Succeeded,
            JobFate::Failed,
            JobFate::Expired,
            JobFate::Undelivered,
        ] {
            fate.book(&mut ledger, record());
        }
        let counts = ledger.counts();
        assert_eq!(
            (
                counts.succeeded,
                counts.failed,
                counts.expired,
                counts.undelivered
            ),
            (1, 1, 1, 1)
        );
    }
}
