//! Holding each record to its deadline (`--max-wait` under a drop or fail
//! policy), with limits per key: a record whose departure is foreseen later
//! than its deadline is refused as it arrives (see
//! [`crate::admission`]), and the wait a record arriving now would face.
//!
//! The foresight is a floor: its key's limit must let the records of its
//! key ahead of it go first ([`Pacer::nth_due`](crate::pacer::Pacer::nth_due),
//! exact for a line of records each leaving when due), and each global
//! record limit as many ([`Pace::earliest`]). Other keys' records that
//! the round robin puts first are not counted: how many turns they take
//! depends on their own limits. So a record refused could not have made
//! it, and one let in may still expire. With shared key schedules nothing
//! is foreseen.

use std::hash::BuildHasher;

use super::lookup::body_of;
use super::{Keyed, NO_KEY};
use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::ledger::Ledger;
use crate::pace::Pace;

/// What holding a record to its deadline made of it.
pub(super) enum Judged {
    /// It may leave in time (or nothing is foreseen): it goes on to wait.
    Admit,
    /// It was dropped as refused.
    Refused,
    /// Under `fail`: hand this back.
    Back(Offered),
}

/// Holding records to `--max-wait`.
#[derive(Debug, Default)]
pub(super) struct Refusal {
    /// With `--max-wait` under a drop or fail policy: a record foreseen to
    /// leave later than this after it arrives, less the slack below (ns),
    /// is refused.
    max_wait_ns: Option<u64>,
    /// The global schedule's slack (ns).
    global_slack_ns: u64,
    /// The largest slack of the key limits (ns), as they change.
    pub(super) slack_ns: u64,
    /// Under `fail`: how long after its arrival the record handed back was
    /// foreseen to leave, when that was why (ns).
    refused_wait_ns: Option<u64>,
}

impl Refusal {
    /// A record foreseen to leave later than this after it arrives (ns) is
    /// refused: `--max-wait` less the larger slack, the global schedule's
    /// or the key limits'.
    fn refuse_after(&self) -> Option<u64> {
        let slack = self.global_slack_ns.max(self.slack_ns);
        self.max_wait_ns.map(|m| m.saturating_sub(slack))
    }
}

impl Keyed {
    /// Refuse at arrival the records foreseen to leave later than
    /// `max_wait_ns` after they arrive (with `--max-wait`), less the larger
    /// of the global schedule's slack `global_slack_ns` and the key
    /// limit's: a wake-up that late keeps the schedules, and a record let
    /// in must not expire for it. Only under a drop or fail policy.
    pub fn refusing(mut self, max_wait_ns: Option<u64>, global_slack_ns: u64) -> Keyed {
        self.refusal.max_wait_ns = max_wait_ns;
        self.refusal.global_slack_ns = global_slack_ns;
        self.refusal.slack_ns = self.limits.slack_ns();
        self
    }

    /// When the latest record handed back under `fail` was refused because
    /// it was foreseen to leave too late: how long after its arrival (ns).
    pub fn refused_wait_ns(&self) -> Option<u64> {
        self.refusal.refused_wait_ns
    }

    /// The record at the front of `seg` (`size` bytes), of key `slot`,
    /// arriving at `now` under `policy`, held to its deadline: refused
    /// when foreseen to leave too late (`drop-newest` drops it,
    /// `drop-oldest` evicts its key's oldest records until it can make it,
    /// or drops it when even its key's empty queue would not do, `fail`
    /// hands it back).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hold(
        &mut self,
        now: u64,
        slot: Option<u32>,
        seg: &mut Segment,
        size: usize,
        policy: Overflow,
        global: &Pace,
        ledger: &mut Ledger,
    ) -> Judged {
        self.refusal.refused_wait_ns = None;
        let (Some(s), Some(after)) = (slot, self.refusal.refuse_after()) else {
            return Judged::Admit;
        };
        if policy == Overflow::Block || self.pacing.is_shared() {
            return Judged::Admit;
        }
        let deadline = now.saturating_add(after);
        let front = seg.clone();
        let record = &front.as_bytes()[..size];
        let ahead = |k: &Keyed| u64::from(k.table.slots[s as usize].len);
        let Some(leaves) = self.foresee(now, s, record, ahead(self), global) else {
            return Judged::Admit;
        };
        if leaves <= deadline {
            return Judged::Admit;
        }
        match policy {
            Overflow::Fail => {
                self.refusal.refused_wait_ns = Some(leaves - now);
                Judged::Back(Offered::Overflowed(seg.clone()))
            }
            Overflow::DropOldest
                if self
                    .foresee(now, s, record, 0, global)
                    .is_some_and(|t| t <= deadline) =>
            {
                while self
                    .foresee(now, s, record, ahead(self), global)
                    .is_some_and(|t| t > deadline)
                {
                    let Some(old) = self.pop_head(s) else { break };
                    self.table.dropped(s);
                    ledger.refuse(old, Fate::DroppedOldest);
                }
                Judged::Admit
            }
            _ => {
                let refused = seg.split_known(size, 1);
                ledger.read(1);
                self.table.dropped(s);
                ledger.refuse(refused, Fate::DroppedNewest);
                Judged::Refused
            }
        }
    }

    /// At the earliest, when `record` of key `s` arriving at `now` would
    /// leave behind `n` records of its key (ns): its key's limit lets the
    /// `n` go first, and the global limits let it go as the `n`-th from
    /// now. `None` when the global schedule cannot be foreseen.
    fn foresee(&mut self, now: u64, s: u32, record: &[u8], n: u64, global: &Pace) -> Option<u64> {
        let global = global.earliest(now, record, n)?;
        let at = self.position(s);
        let limits = &mut self.limits;
        let i = limits.index(s);
        let pacer = &mut limits.by_row[i].pacer;
        pacer.restore(at);
        Some(pacer.nth_due(now, n).max(global))
    }

    /// At the earliest, how long (ns) a record like `record` arriving at
    /// `now` would wait: the longest over the keys with records waiting
    /// (behind all of its key's), or what the global limits say when none
    /// waits. `None` when nothing can be foreseen (shared schedules).
    pub fn forecast_wait(&mut self, now: u64, global: &Pace, record: &[u8]) -> Option<u64> {
        if self.pacing.is_shared() {
            return None;
        }
        let mut leaves = global.earliest(now, record, 0)?;
        // Every key with records waiting is in the line: in `ready`, or on
        // `timers` (entries there and in `ready` may outlive their queue,
        // and are passed over).
        let busy: Vec<(u32, u64)> = self
            .line
            .ready
            .iter()
            .copied()
            .chain(self.line.timers.keys())
            .map(|s| (s, u64::from(self.table.slots[s as usize].len)))
            .filter(|&(_, n)| n > 0)
            .collect();
        for (s, n) in busy {
            leaves = leaves.max(self.foresee(now, s, record, n, global)?);
        }
        Some(leaves.saturating_sub(now))
    }

    /// At the earliest, when `record` arriving at `now` would leave (ns):
    /// behind the records of its key waiting (none for a key not
    /// remembered). `None` when nothing can be foreseen.
    pub fn foresee_record(&mut self, now: u64, record: &[u8], global: &Pace) -> Option<u64> {
        if self.pacing.is_shared() {
            return None;
        }
        let key = self.spec.key(body_of(record, self.delimiter));
        let slot = match key {
            Some(k) => self.table.find(&k, self.table.hasher.hash_one(&*k)),
            None => Some(NO_KEY),
        };
        match slot {
            Some(s) => {
                let n = u64::from(self.table.slots[s as usize].len);
                self.foresee(now, s, record, n, global)
            }
            None => global.earliest(now, record, 0),
        }
    }
}
