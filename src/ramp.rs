//! Ramps (`--ramp`): the limits rise linearly from a start (a fraction of
//! the rate; 0 by default) to the rate set over a duration, from the first
//! departure, on the same exact schedule as a fixed rate: the n-th record
//! leaves when the integral of the rate since the ramp began reaches n.
//!
//! Done by warping time. With `f(t)` the ramp's fraction of the rate at
//! `t` (from `from` at the start `s` to 1 at the end `E = s + D`), the
//! warped time is `w(t) = E − ∫ₜᴱ f`, and `t` itself after `E`. Its slope
//! is `f`, so a schedule run on the warped clock (`pace::PaceClock` hands the
//! pace's base `w(now)` and gives back `w⁻¹` of its due times) lets
//! records go at `f(t)` times its own rate: every limit (records, bytes,
//! cost) rises together, and any `drip ctl … rate` or schedule row changes
//! the rate the ramp rises to. With `f = from + (1 − from)·(t − s)/D`:
//! `w(t) = t + (1 − from)·u²/(2D)` where `u = E − t`.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use std::fmt;

/// A ramp: from `from` (a fraction of the rate, at least 0, below 1) to
/// the rate over `over_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    /// The fraction of the rate the ramp starts at, in [0, 1).
    pub from: f64,
    /// How long it rises for (ns, > 0).
    pub over_ns: u64,
}

/// A ramp begun at a time: the warped clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Warp {
    ramp: Ramp,
    /// When the ramp ends (ns): `w(t) = t` from here on.
    end: u64,
    /// When it began (ns).
    start: u64,
}

impl Warp {
    /// `ramp` begun at `start` (ns).
    pub fn new(ramp: Ramp, start: u64) -> Warp {
        Warp {
            ramp,
            start,
            end: start.saturating_add(ramp.over_ns),
        }
    }

    /// `(1 − from) / 2D`, per ns.
    fn curve(&self) -> f64 {
        (1.0 - self.ramp.from) / (2.0 * self.ramp.over_ns as f64)
    }

    /// The warped time of `t` (ns), rounded down: `w(t)`; times before the
    /// start count as the start.
    pub fn warp(&self, t: u64) -> u64 {
        if t >= self.end {
            return t;
        }
        let t = t.max(self.start);
        let u = (self.end - t) as f64;
        t + (self.curve() * u * u).floor() as u64
    }

    /// The first time (ns) whose warped time is at least `x`: when a
    /// schedule on the warped clock due at `x` is due on the caller's.
    pub fn unwarp(&self, x: u64) -> u64 {
        if x >= self.end {
            return x;
        }
        let first = self.warp(self.start);
        if x <= first {
            return self.start;
        }
        // u = E − t solves c·u² − u + (E − x) = 0; the smaller root, in a
        // form exact as c goes to 0.
        let left = (self.end - x) as f64;
        let root = (1.0 - 4.0 * self.curve() * left).max(0.0).sqrt();
        let u = 2.0 * left / (1.0 + root);
        let mut t = (self.end as f64 - u).floor().max(self.start as f64) as u64;
        // Exact to the ns on the rounded warp: at most a step or two.
        while t > self.start && self.warp(t - 1) >= x {
            t -= 1;
        }
        while self.warp(t) < x {
            t += 1;
        }
        t
    }

    /// The fraction of the rate in force at `t`.
    pub fn fraction_at(&self, t: u64) -> f64 {
        if t >= self.end {
            return 1.0;
        }
        let done = t.saturating_sub(self.start) as f64 / self.ramp.over_ns as f64;
        self.ramp.from + (1.0 - self.ramp.from) * done
    }

    /// Whether the ramp is over at `t`.
    pub fn is_over(&self, t: u64) -> bool {
        t >= self.end
    }

    /// When it ends (ns).
    pub fn end(&self) -> u64 {
        self.end
    }
}

impl fmt::Display for Ramp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let over = crate::quantity::spell_duration(std::time::Duration::from_nanos(self.over_ns));
        if self.from > 0.0 {
            write!(f, "from {:.0}% over {over}", self.from * 100.0)
        } else {
            write!(f, "over {over}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::Pace;
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Unit};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn ramped(rate: &str, burst: u64, ramp: Ramp) -> Pace {
        let limits = Limits::new(&[Limit {
            rate: parse_rate(rate).unwrap(),
            burst,
            unit: Unit::Records,
        }]);
        Pace::local(limits).ramped(ramp)
    }

    /// Departures of `n` records always waiting from `start`, the writer
    /// woken exactly when due.
    fn departures(s: &mut Pace, start: u64, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut now = start;
        while out.len() < n {
            let k = s.release(now, 1, &mut std::iter::empty());
            out.extend(std::iter::repeat_n(now, k));
            let due = s.next_due(b"x\n");
            assert!(k > 0 || due > now, "nothing released at {now} although due");
            now = now.max(due);
        }
        out
    }

    /// The plain model's integral of the rate, `from·r` at the start
    /// rising to `r` over `over` seconds, then `r`, from 0 to `t` seconds.
    fn integral(r: f64, from: f64, over: f64, t: f64) -> f64 {
        if t <= over {
            r * (from * t + (1.0 - from) * t * t / (2.0 * over))
        } else {
            r * (over * (1.0 + from) / 2.0 + (t - over))
        }
    }

    /// The time (seconds after the start) the model's integral reaches
    /// `n`, by bisection.
    fn model(r: f64, from: f64, over: f64, n: f64) -> f64 {
        let (mut lo, mut hi) = (0.0, over + n / r + 1.0);
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if integral(r, from, over, mid) >= n {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// Whether the departures `t` (ns) of records 0, 1, … from `start`
    /// keep to the model: at each, the integral of the rate is its number,
    /// to within what 3 ns of the schedule hold (the schedule's times are
    /// whole ns, rounded up).
    fn keeps_to_the_model(
        t: &[u64],
        start: u64,
        r: f64,
        from: f64,
        over: f64,
    ) -> Result<(), String> {
        for (n, &at) in t.iter().enumerate() {
            let since = (at - start) as f64 / 1e9;
            let area = integral(r, from, over, since);
            if (area - n as f64).abs() > r * 3e-9 + 1e-9 {
                return Err(format!(
                    "record {n} at {since} s: the integral is {area}; the model's time {} s",
                    model(r, from, over, n as f64)
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn from_zero_the_nth_record_leaves_when_the_integral_reaches_n() {
        // 100/s over 2 s from 0: the n-th record at sqrt(2·2·n/100) s:
        // 0, 0.2 s, 0.2828 s, … and 200 records by 2 s (the area is 100),
        // then one every 10 ms.
        let mut s = ramped(
            "100/s",
            1,
            Ramp {
                from: 0.0,
                over_ns: 2 * S,
            },
        );
        let t = departures(&mut s, 5 * S, 150);
        keeps_to_the_model(&t, 5 * S, 100.0, 0.0, 2.0).unwrap();
        assert_eq!(t[1] - t[0], 200 * MS);
        assert_eq!(t[149] - t[148], 10 * MS);
    }

    #[test]
    fn a_ramp_from_a_start_rate() {
        // 10/s rising to 100/s over 10 s: the first gaps are about 100 ms,
        // the last ones 10 ms.
        let mut s = ramped(
            "100/s",
            1,
            Ramp {
                from: 0.1,
                over_ns: 10 * S,
            },
        );
        let t = departures(&mut s, 0, 700);
        let gap = |i: usize| (t[i + 1] - t[i]) as f64 / 1e6;
        // 10·t + 4.5·t² = 1: t = 95.9 ms.
        assert!((gap(0) - 95.9).abs() < 0.1, "{}", gap(0));
        assert_eq!(t[699] - t[698], 10 * MS);
        keeps_to_the_model(&t, 0, 100.0, 0.1, 10.0).unwrap();
    }

    #[test]
    fn unwarp_is_the_least_time_whose_warp_reaches() {
        let w = Warp::new(
            Ramp {
                from: 0.25,
                over_ns: 3 * S,
            },
            7 * S,
        );
        for x in (w.warp(7 * S)..11 * S).step_by(12_345_677) {
            let t = w.unwarp(x);
            assert!(w.warp(t) >= x);
            assert!(t == 7 * S || w.warp(t - 1) < x, "{x}");
        }
        assert_eq!(w.warp(10 * S), 10 * S);
        assert!((w.fraction_at(8_500 * MS) - 0.625).abs() < 1e-12);
    }

    #[test]
    fn a_rate_changed_during_the_ramp_is_what_it_rises_to() {
        // 100/s over 2 s; at 1 s (the fraction 1/2) the rate becomes 10/s:
        // the gaps are 1/(10·f) s from there, 100 ms after the ramp.
        let mut s = ramped(
            "100/s",
            1,
            Ramp {
                from: 0.0,
                over_ns: 2 * S,
            },
        );
        let _ = departures(&mut s, 0, 51);
        s.replace_limits(
            S,
            &[Limit {
                rate: parse_rate("10/s").unwrap(),
                burst: 1,
                unit: Unit::Records,
            }],
        )
        .unwrap();
        let t = departures(&mut s, S, 20);
        let last = t[19] - t[18];
        assert_eq!(last, 100 * MS, "{t:?}");
        assert!(t[1] - t[0] > 100 * MS, "{t:?}");
    }

    proptest! {
        #[test]
        fn ramps_keep_to_the_model(
            per_second in 1u64..2000,
            from in 0.0f64..0.95,
            over_ms in 1u64..20_000,
            start_ms in 0u64..100_000,
        ) {
            let rate = format!("{per_second}/s");
            let mut s = ramped(&rate, 1, Ramp { from, over_ns: over_ms * MS });
            let n = ((per_second * over_ms / 1000) as usize + 20).min(3000);
            let t = departures(&mut s, start_ms * MS, n);
            let kept = keeps_to_the_model(&t, start_ms * MS, per_second as f64, from, over_ms as f64 / 1e3);
            prop_assert!(kept.is_ok(), "{}", kept.unwrap_err());
        }
    }
}
