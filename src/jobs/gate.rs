//! The gate: a [`Schedule`] in front of the configured limits that the
//! command runner can close ("nothing starts before time t": a pause on
//! overload) and narrow (a least spacing of starts: the lowered rate under
//! `--adapt`). Admission and the writer see only a schedule, so a pause
//! holds records in the bucket, where the overflow policy applies (with
//! `block`, the producer upstream is held back).
//!
//! No threads, no clock, no I/O: the runner sets two numbers in a
//! [`GateControl`]; times are ns on the caller's clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::schedule::Schedule;

/// What the runner sets: when starts may resume, and their least spacing
/// (the lowered rate of `--adapt`, and the pace of the quota a server
/// announces: the larger holds).
#[derive(Debug, Default)]
pub struct GateControl {
    pause_until: AtomicU64,
    spacing_ns: AtomicU64,
    quota_ns: AtomicU64,
}

impl GateControl {
    /// Allow nothing before `until` (ns); a pause only ever lengthens.
    pub fn pause_until(&self, until: u64) {
        self.pause_until.fetch_max(until, Ordering::SeqCst);
    }

    /// When starts may resume (ns; 0: not paused).
    pub fn paused_until(&self) -> u64 {
        self.pause_until.load(Ordering::SeqCst)
    }

    /// Keep starts at least `ns` apart (0: only the limits pace).
    pub fn set_spacing(&self, ns: u64) {
        self.spacing_ns.store(ns, Ordering::SeqCst);
    }

    /// Keep starts at least `ns` apart so the quota the server announced
    /// lasts until its reset (0: the quota does not pace).
    pub fn set_quota_spacing(&self, ns: u64) {
        self.quota_ns.store(ns, Ordering::SeqCst);
    }

    fn spacing(&self) -> u64 {
        self.spacing_ns
            .load(Ordering::SeqCst)
            .max(self.quota_ns.load(Ordering::SeqCst))
    }
}

/// The configured schedule behind a gate.
#[derive(Debug)]
pub struct Gate {
    inner: Box<dyn Schedule>,
    control: Arc<GateControl>,
    /// When the last record left (ns), for the spacing.
    last: Option<u64>,
}

impl Gate {
    /// `inner` behind a gate that `control` opens and closes.
    pub fn new(inner: Box<dyn Schedule>, control: Arc<GateControl>) -> Gate {
        Gate {
            inner,
            control,
            last: None,
        }
    }

    fn spaced_due(&self) -> u64 {
        match (self.last, self.control.spacing()) {
            (Some(last), spacing) if spacing > 0 => last.saturating_add(spacing),
            _ => 0,
        }
    }
}

impl Schedule for Gate {
    fn is_unlimited(&self) -> bool {
        self.inner.is_unlimited()
    }

    fn weighs_bytes(&self) -> bool {
        self.inner.weighs_bytes()
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        if now < self.control.paused_until() || now < self.spaced_due() {
            return 0;
        }
        let available = if self.control.spacing() > 0 {
            available.min(1)
        } else {
            available
        };
        let n = self.inner.release(now, available, records);
        if n > 0 {
            self.last = Some(now);
        }
        n
    }

    fn next_due(&self, record: &[u8]) -> u64 {
        self.inner
            .next_due(record)
            .max(self.control.paused_until())
            .max(self.spaced_due())
    }

    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        // The inner schedule's answer (a shared one knows it only for the
        // slots it holds), moved as far as a pause moves the first.
        let after_first = self
            .inner
            .nth_due(record, n)?
            .saturating_sub(self.inner.next_due(record));
        Some(self.next_due(record).saturating_add(after_first))
    }

    fn slack_ns(&self) -> u64 {
        self.inner.slack_ns()
    }

    fn replace_limits(
        &mut self,
        now: u64,
        limits: &[crate::schedule::Limit],
    ) -> Result<(), String> {
        self.inner.replace_limits(now, limits)
    }

    fn records_per_second(&self) -> f64 {
        self.inner.records_per_second()
    }

    /// The limits behind the gate: a pause holds records back for a while
    /// (they may expire), it is no forecast of when they leave.
    fn forecast(&self) -> Option<crate::schedule::Limits> {
        self.inner.forecast()
    }

    fn forecast_due(&self, record: &[u8]) -> u64 {
        self.inner.forecast_due(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Unit};

    const MS: u64 = 1_000_000;

    fn gate(rate: &str) -> (Gate, Arc<GateControl>) {
        let limits: Vec<Limit> = match parse_rate(rate).unwrap() {
            crate::rate::Rate::Unlimited => vec![],
            r => vec![Limit {
                rate: r,
                burst: 1,
                unit: Unit::Records,
            }],
        };
        let control = Arc::new(GateControl::default());
        let g = Gate::new(Box::new(Limits::new(&limits)), Arc::clone(&control));
        (g, control)
    }

    fn release(g: &mut Gate, now: u64, available: usize) -> usize {
        g.release(now, available, &mut std::iter::empty())
    }

    /// A schedule that does not know when its later records may go (as a
    /// shared one before its slots are reserved).
    #[derive(Debug)]
    struct Unknowing(Limits);

    impl Schedule for Unknowing {
        fn is_unlimited(&self) -> bool {
            false
        }
        fn weighs_bytes(&self) -> bool {
            false
        }
        fn release(&mut self, now: u64, n: usize, s: &mut dyn Iterator<Item = &[u8]>) -> usize {
            self.0.release(now, n, s)
        }
        fn next_due(&self, record: &[u8]) -> u64 {
            self.0.next_due(record)
        }
        fn nth_due(&self, _: &[u8], _: usize) -> Option<u64> {
            None
        }
        fn slack_ns(&self) -> u64 {
            self.0.slack_ns()
        }
        fn records_per_second(&self) -> f64 {
            self.0.records_per_second()
        }
    }

    #[test]
    fn the_nth_departure_is_the_inner_schedules_moved_by_a_pause() {
        let (g, c) = gate("10/s");
        assert_eq!(g.nth_due(b"x", 3), Some(300 * MS));
        c.pause_until(1000 * MS);
        assert_eq!(g.nth_due(b"x", 3), Some(1300 * MS));
        let limits = [Limit {
            rate: parse_rate("10/s").unwrap(),
            burst: 1,
            unit: Unit::Records,
        }];
        let unknowing = Gate::new(Box::new(Unknowing(Limits::new(&limits))), c);
        assert_eq!(
            unknowing.nth_due(b"x", 3),
            None,
            "not a guess from the rate"
        );
    }

    #[test]
    fn a_pause_allows_nothing_before_its_end_then_the_rate_resumes() {
        let (mut g, c) = gate("10/s");
        assert_eq!(release(&mut g, 0, 5), 1);
        c.pause_until(1000 * MS);
        for t in [100, 500, 999] {
            assert_eq!(release(&mut g, t * MS, 5), 0, "at {t} ms");
        }
        assert_eq!(g.next_due(b"x"), 1000 * MS);
        // A shorter pause does not shorten it.
        c.pause_until(10 * MS);
        assert_eq!(g.next_due(b"x"), 1000 * MS);
        // Resumes with one record, no catch-up burst, then 100 ms apart.
        assert_eq!(release(&mut g, 1000 * MS, 5), 1);
        assert_eq!(release(&mut g, 1050 * MS, 5), 0);
        assert_eq!(release(&mut g, 1100 * MS, 5), 1);
    }

    #[test]
    fn unlimited_behind_a_pause_is_held_too() {
        let (mut g, c) = gate("inf");
        assert_eq!(release(&mut g, 0, 50), 50);
        c.pause_until(20 * MS);
        assert_eq!(release(&mut g, 10 * MS, 50), 0);
        assert_eq!(g.next_due(b"x"), 20 * MS);
        assert_eq!(release(&mut g, 20 * MS, 50), 50);
    }

    #[test]
    fn spacing_lowers_the_rate_and_lifts_with_it() {
        let (mut g, c) = gate("100/s");
        c.set_spacing(50 * MS);
        assert_eq!(release(&mut g, 0, 5), 1);
        assert_eq!(release(&mut g, 10 * MS, 5), 0);
        assert_eq!(g.next_due(b"x"), 50 * MS);
        assert_eq!(release(&mut g, 50 * MS, 5), 1);
        c.set_spacing(0);
        assert_eq!(release(&mut g, 60 * MS, 5), 1);
        assert_eq!(g.next_due(b"x"), 70 * MS);
    }
}
