//! The pace's clock: the caller's, or with `--ramp` the ramp's warped
//! clock ([`crate::ramp::Warp`]) the base runs on from the first
//! departure, so every limit of the base rises in step. The stages in
//! front of the base keep the caller's clock.
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use crate::ramp::{Ramp, Warp};

/// The clock the base runs on.
#[derive(Debug, Clone, Copy, Default)]
pub enum PaceClock {
    /// The caller's time.
    #[default]
    Steady,
    /// A ramp's warped time, from the first departure on.
    Ramp {
        ramp: Ramp,
        /// Set at the first departure.
        warp: Option<Warp>,
        /// The latest time the pace was told (ns): whether the ramp is
        /// over, for a forecast.
        latest: u64,
    },
}

impl PaceClock {
    /// The clock of `ramp`, begun at the first departure.
    pub fn ramp(ramp: Ramp) -> PaceClock {
        PaceClock::Ramp {
            ramp,
            warp: None,
            latest: 0,
        }
    }

    /// The base's time of `now` (ns), the ramp begun at `now` if not yet.
    pub fn start(&mut self, now: u64) -> u64 {
        match self {
            PaceClock::Steady => now,
            PaceClock::Ramp { ramp, warp, latest } => {
                *latest = (*latest).max(now);
                warp.get_or_insert_with(|| Warp::new(*ramp, now)).warp(now)
            }
        }
    }

    /// The base's time of `now` (ns): the caller's before the ramp begins.
    pub fn warped(&self, now: u64) -> u64 {
        match self {
            PaceClock::Ramp { warp: Some(w), .. } => w.warp(now),
            _ => now,
        }
    }

    /// The caller's time of a due time `x` on the base's clock (0 stays 0:
    /// any time).
    pub fn unwarped(&self, x: u64) -> u64 {
        match self {
            PaceClock::Ramp { warp: Some(w), .. } if x > 0 => w.unwarp(x),
            _ => x,
        }
    }

    /// Whether the base's time is the caller's from now on (no ramp, or
    /// one over): only then can its departures be forecast.
    pub fn is_steady(&self) -> bool {
        match self {
            PaceClock::Steady => true,
            PaceClock::Ramp { warp, latest, .. } => warp.is_some_and(|w| w.is_over(*latest)),
        }
    }
}
