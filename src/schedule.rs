//! The schedule: when may records leave? Every limit drip enforces sits
//! behind the [`Schedule`] interface, so admission and the writer never
//! know how many limits there are or what kind.
//!
//! [`Limits`] is the local schedule: one GCRA ([`Pacer`]) per `--rate` and
//! `--byte-rate`. A record leaves only when every limit allows it, and then
//! takes its slot in all of them, so each limit's guarantee holds at once:
//! no window of length W holds more than `burst_i + rate_i × W` departures
//! (records, or bytes for a byte rate), up to the slack ([`Pacer`]). A new
//! kind of limit (per key, shared between processes) is another
//! implementation of [`Schedule`].
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use std::fmt;

use crate::pacer::{slack_for, Pacer};
use crate::rate::Rate;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Records: each record costs 1.
    Records,
    /// Bytes: each record costs its size, delimiter included.
    Bytes,
}

/// One limit: `rate` units per period, `burst` units back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// How many units per period (never [`Rate::Unlimited`] here).
    pub rate: Rate,
    /// Units that may leave back to back after an idle spell (≥ 1).
    pub burst: u64,
    /// Records or bytes.
    pub unit: Unit,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.unit {
            Unit::Records => write!(f, "{} records, burst {}", self.rate, self.burst),
            Unit::Bytes => write!(f, "{} bytes, burst {} bytes", self.rate, self.burst),
        }
    }
}

/// The interface every schedule offers to admission and the writer.
///
/// Records are offered in queue order; a schedule never lets a later record
/// leave before an earlier one.
pub trait Schedule: fmt::Debug + Send {
    /// Whether nothing is limited: every record may always leave.
    fn is_unlimited(&self) -> bool;

    /// Whether a record's size matters (some limit counts bytes). When it
    /// does not, callers may pass an empty `sizes` iterator to
    /// [`Schedule::release`] and any size to [`Schedule::next_due`].
    fn weighs_bytes(&self) -> bool;

    /// Of `available` records waiting in order, whose sizes in bytes
    /// (delimiter included) `sizes` yields, how many may leave at `now`
    /// (ns). They take their slots: call only for records that do leave.
    /// `now` must not go backwards between calls.
    fn release(
        &mut self,
        now: u64,
        available: usize,
        sizes: &mut dyn Iterator<Item = usize>,
    ) -> usize;

    /// The earliest time (ns) a record of `size` bytes may leave; 0 when it
    /// may leave at any time.
    fn next_due(&self, size: usize) -> u64;

    /// How late (ns) a wake-up may be without restarting the schedule: the
    /// least slack of its limits.
    fn slack_ns(&self) -> u64;

    /// The highest rate in records per second the schedule can reach
    /// (infinite when a limit counts bytes or nothing is limited): the
    /// writer coalesces wake-ups above 20,000/s.
    fn records_per_second(&self) -> f64;

    /// The earliest time (ns) a record of `key` may leave as far as a hold
    /// on that key alone goes (an overload's pause, a lowered rate after
    /// it: `jobs::gate`); 0 when nothing holds it. The keyed queues ask
    /// before a key's record leaves, so a held key waits in the line
    /// without holding back the others.
    fn key_due(&self, _key: &[u8]) -> u64 {
        0
    }

    /// A record of `key` left at `now` (ns): a hold spacing its starts
    /// counts from here.
    fn key_left(&mut self, _key: &[u8], _now: u64) {}

    /// The earliest time (ns) the `n`-th record from now (0: the next) of
    /// `size` bytes may leave, as far as known; `None` when not known yet
    /// (a shared schedule whose slots are not reserved yet). By default
    /// [`Schedule::next_due`] and one emission interval of the tightest
    /// record limit for each record before it (a burst may let them go
    /// sooner).
    fn nth_due(&self, size: usize, n: usize) -> Option<u64> {
        let per_second = self.records_per_second();
        let gap = if per_second.is_finite() && per_second > 0.0 {
            (1e9 / per_second) as u64
        } else {
            0
        };
        Some(
            self.next_due(size)
                .saturating_add(gap.saturating_mul(n as u64)),
        )
    }
}

/// The local schedule: several GCRA limits, all of which must allow a
/// record before it leaves.
#[derive(Debug, Clone)]
pub struct Limits {
    limits: Vec<(Unit, Pacer)>,
    weighs_bytes: bool,
    slack_ns: u64,
}

impl Limits {
    /// A schedule enforcing every limit in `limits` (none: unlimited).
    ///
    /// # Panics
    /// If a limit's rate is [`Rate::Unlimited`] or its burst is 0 (the
    /// command line drops unlimited rates and rejects a zero burst).
    pub fn new(limits: &[Limit]) -> Limits {
        let pacers = limits
            .iter()
            .map(|l| {
                assert!(l.rate != Rate::Unlimited, "an unlimited rate is no limit");
                (l.unit, Pacer::new(l.rate, l.burst, slack_for(l.rate)))
            })
            .collect::<Vec<_>>();
        let slack_ns = limits
            .iter()
            .map(|l| slack_for(l.rate))
            .min()
            .unwrap_or_else(|| slack_for(Rate::Unlimited));
        Limits {
            weighs_bytes: limits.iter().any(|l| l.unit == Unit::Bytes),
            limits: pacers,
            slack_ns,
        }
    }

    fn cost(unit: Unit, size: usize) -> u64 {
        match unit {
            Unit::Records => 1,
            Unit::Bytes => size as u64,
        }
    }

    /// Release, in order, the records whose sizes `sizes` yields (at most
    /// `available`) while every limit allows: each limit's budget at `now`
    /// is taken once, then spent record by record.
    fn release_weighed(
        &mut self,
        now: u64,
        available: usize,
        sizes: &mut dyn Iterator<Item = usize>,
    ) -> usize {
        let mut budgets: Vec<i128> = self.limits.iter().map(|(_, p)| p.budget(now)).collect();
        let mut spent = vec![0u64; self.limits.len()];
        let mut n = 0;
        for size in sizes.take(available) {
            let fits = self
                .limits
                .iter()
                .zip(&budgets)
                .all(|((unit, p), &budget)| p.fits(budget, Self::cost(*unit, size)));
            if !fits {
                break;
            }
            for (((unit, _), budget), spent) in self.limits.iter().zip(&mut budgets).zip(&mut spent)
            {
                let cost = Self::cost(*unit, size);
                *budget = budget.saturating_sub(i128::from(cost));
                *spent += cost;
            }
            n += 1;
        }
        for ((_, p), units) in self.limits.iter_mut().zip(spent) {
            p.commit(now, units);
        }
        n
    }
}

impl Schedule for Limits {
    fn is_unlimited(&self) -> bool {
        self.limits.is_empty()
    }

    fn weighs_bytes(&self) -> bool {
        self.weighs_bytes
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        sizes: &mut dyn Iterator<Item = usize>,
    ) -> usize {
        if !self.weighs_bytes {
            // Every record costs 1 everywhere: the tightest limit decides.
            let n = self
                .limits
                .iter()
                .map(|(_, p)| p.allowed(now, available as u64))
                .min()
                .unwrap_or(available as u64);
            for (_, p) in &mut self.limits {
                p.commit(now, n);
            }
            return n as usize;
        }
        self.release_weighed(now, available, sizes)
    }

    fn next_due(&self, size: usize) -> u64 {
        self.limits
            .iter()
            .map(|(unit, p)| p.next_due_for(Self::cost(*unit, size)))
            .max()
            .unwrap_or(0)
    }

    fn slack_ns(&self) -> u64 {
        self.slack_ns
    }

    fn records_per_second(&self) -> f64 {
        if self.weighs_bytes {
            return f64::INFINITY;
        }
        self.limits
            .iter()
            .map(|(_, p)| p.per_second())
            .fold(f64::INFINITY, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_rate;

    const MS: u64 = 1_000_000;

    fn limit(rate: &str, burst: u64, unit: Unit) -> Limit {
        Limit {
            rate: parse_rate(rate).unwrap(),
            burst,
            unit,
        }
    }

    /// Departure times of `sizes`, always waiting, woken exactly when due.
    fn departures(s: &mut Limits, sizes: &[usize]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut now = 0;
        while out.len() < sizes.len() {
            let rest = &sizes[out.len()..];
            let n = s.release(now, rest.len(), &mut rest.iter().copied());
            out.extend(std::iter::repeat_n(now, n));
            if out.len() < sizes.len() {
                let due = s.next_due(sizes[out.len()]);
                assert!(n > 0 || due > now, "nothing released although due");
                now = now.max(due);
            }
        }
        out
    }

    #[test]
    fn no_limit_releases_everything() {
        let mut s = Limits::new(&[]);
        assert!(s.is_unlimited());
        assert_eq!(s.release(0, 500, &mut std::iter::empty()), 500);
        assert_eq!(s.next_due(10), 0);
    }

    #[test]
    fn the_tightest_limit_decides_and_every_limit_is_charged() {
        // 10/s with a burst of 5, and 2 per 100 ms (20/s, burst 2): two
        // leave at once, then one every 50 ms while the first limit's burst
        // lasts, then one every 100 ms.
        let mut s = Limits::new(&[
            limit("10/s", 5, Unit::Records),
            limit("2/100ms", 2, Unit::Records),
        ]);
        let t = departures(&mut s, &[1; 9]);
        assert_eq!(
            t,
            vec![
                0,
                0,
                50 * MS,
                100 * MS,
                150 * MS,
                200 * MS,
                250 * MS,
                300 * MS,
                400 * MS
            ]
        );
    }

    #[test]
    fn layered_quota_holds_each_window() {
        // "10 per second and 30 per 5 seconds": a long backlog leaves at
        // 10/s for the first burst, then at 30 per 5 s.
        let mut s = Limits::new(&[
            limit("10/s", 10, Unit::Records),
            limit("30/5s", 30, Unit::Records),
        ]);
        let t = departures(&mut s, &[1; 100]);
        for (rate_per_s, burst) in [(10.0, 10.0), (6.0, 30.0)] {
            for window in [MS * 1000, MS * 5000, MS * 20_000] {
                let bound = burst + rate_per_s * window as f64 / 1e9;
                for (i, &start) in t.iter().enumerate() {
                    let n = t[i..].iter().take_while(|&&x| x < start + window).count();
                    assert!(n as f64 <= bound, "{n} in {window} ns (bound {bound})");
                }
            }
        }
    }

    #[test]
    fn byte_rate_spends_a_records_size() {
        // 1000 bytes/s, burst 1000: a 600-byte record, then one of 600 must
        // wait until 1200 bytes of schedule have passed the burst (200 ms).
        let mut s = Limits::new(&[limit("1000/s", 1000, Unit::Bytes)]);
        assert!(s.weighs_bytes());
        assert_eq!(
            departures(&mut s, &[600, 600, 400]),
            vec![0, 200 * MS, 600 * MS]
        );
    }

    #[test]
    fn a_record_larger_than_the_byte_burst_leaves_alone_then_pays() {
        // Burst 100 bytes: a 500-byte record leaves at once (a full burst
        // is saved) and puts the schedule 400 bytes in debt; a 10-byte
        // record then leaves when the schedule reaches 500 + 10 − 100
        // bytes: 410 ms at 1000 bytes/s.
        let mut s = Limits::new(&[limit("1000/s", 100, Unit::Bytes)]);
        assert_eq!(departures(&mut s, &[500, 10]), vec![0, 410 * MS]);
    }

    #[test]
    fn byte_window_bound_holds() {
        let sizes: Vec<usize> = (0..300).map(|i| 1 + (i * 37) % 90).collect();
        let mut s = Limits::new(&[limit("5000/s", 400, Unit::Bytes)]);
        let t = departures(&mut s, &sizes);
        for window in [MS, 100 * MS, 1000 * MS] {
            let bound = 400.0 + 5000.0 * window as f64 / 1e9;
            for i in 0..t.len() {
                let bytes: usize = (i..t.len())
                    .take_while(|&j| t[j] < t[i] + window)
                    .map(|j| sizes[j])
                    .sum();
                assert!(bytes as f64 <= bound, "{bytes} bytes in {window} ns");
            }
        }
    }

    #[test]
    fn records_and_bytes_together() {
        let mut s = Limits::new(&[
            limit("2/s", 1, Unit::Records),
            limit("100/s", 100, Unit::Bytes),
        ]);
        // Small records: the record rate paces. A 100-byte record after a
        // 100-byte one: the byte rate does (1 s).
        assert_eq!(
            departures(&mut s, &[10, 10, 100, 100]),
            vec![0, 500 * MS, 1000 * MS, 2000 * MS]
        );
    }
}
