//! What became of a record given to a job: the one fate type the runner
//! decides as a record's last attempt ends (or a stop, its deadline or
//! drip's leaving ends it before), the name the joblog gives it, and
//! where the ledger books it. A new job outcome is a variant here, with
//! its joblog name and its place in the ledger.
//!
//! Pure: no threads, no clock, no I/O.

use crate::bucket::{Fate, Segment};
use crate::ledger::Ledger;

/// What became of a record given to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobFate {
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
    pub(crate) fn name(self) -> &'static str {
        match self {
            JobFate::Succeeded => "succeeded",
            JobFate::Failed => "failed",
            JobFate::Expired => "expired",
            JobFate::Undelivered => "undelivered",
        }
    }

    /// Book `record` in `ledger` as this fate: a success is counted, the
    /// other fates dispose of it (to the dead letter, with one).
    pub(crate) fn book(self, ledger: &mut Ledger, record: Segment) {
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
