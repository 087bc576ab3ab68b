//! The departures to come, on a copy of the pace ([`super::Pace::forecast`]).
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use super::Pace;

/// The departures to come, on a copy of the pace: each record put in line
/// ([`Forecast::push`]) leaves as soon as the limits allow after the one
/// before it, and takes its slots on the copy. So after the waiting
/// records are pushed, [`Forecast::peek`] says when one more would leave:
/// the earliest it can, as the records ahead and every limit put it.
///
/// The same arithmetic as the writer's, one record at a time, so the times
/// are exact while departures keep to them (a wake-up late by up to the
/// slack keeps the schedule, [`crate::pacer`]).
#[derive(Debug)]
pub struct Forecast {
    /// A copy: local limits on the caller's clock, the stages that limit.
    pace: Pace,
    /// When the last record pushed leaves (ns); a later one never leaves
    /// before it.
    last: u64,
}

impl Clone for Forecast {
    fn clone(&self) -> Forecast {
        let pace = self.pace.forecast().expect("a forecast's copy is local");
        Forecast {
            pace,
            last: self.last,
        }
    }
}

impl Forecast {
    /// A forecast from `pace` (a [`Pace::forecast`]) as it stands at `now`
    /// (ns), with nothing in line.
    pub fn new(pace: Pace, now: u64) -> Forecast {
        Forecast { pace, last: now }
    }

    /// When `record` (its delimiter included) put in line at `now` (ns,
    /// not before the forecast's start) would leave (ns), without putting
    /// it in line.
    pub fn peek(&self, now: u64, record: &[u8]) -> u64 {
        self.pace.next_due(record).max(self.last).max(now)
    }

    /// Put `record` in line at `now`; returns when it leaves (ns).
    pub fn push(&mut self, now: u64, record: &[u8]) -> u64 {
        let at = self.peek(now, record);
        let n = self.pace.release(at, 1, &mut std::iter::once(record));
        debug_assert_eq!(n, 1, "a record is let go at its due time");
        self.last = at;
        at
    }

    /// The time the forecast stands at: the last departure in line, or its
    /// start (ns).
    #[cfg(test)]
    pub fn last(&self) -> u64 {
        self.last
    }
}
