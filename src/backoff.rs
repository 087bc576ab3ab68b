//! Exponential backoff with full jitter: after failure number `n` a wait
//! drawn uniformly from `0 ..= min(MAX, MIN · 2^n)` (the "full jitter" of
//! AWS's architecture blog, "Exponential Backoff And Jitter", 2015). Used by
//! the job runner's retries and the `--share` keeper's reconnects.
//!
//! Pure: the random draw comes from the caller's generator.

/// Exponential backoff with full jitter between `min_ns` and `max_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first ceiling, ns (> 0).
    pub min_ns: u64,
    /// The largest ceiling, ns (≥ `min_ns`).
    pub max_ns: u64,
}

impl Backoff {
    /// The ceiling before retry number `n` (0 for the first retry):
    /// `min(MAX, MIN·2^n)`, ns.
    pub fn ceiling(&self, n: u32) -> u64 {
        let doubled = self
            .min_ns
            .saturating_mul(1u64.checked_shl(n).unwrap_or(u64::MAX));
        doubled.min(self.max_ns)
    }

    /// A wait before retry number `n`: uniform in `0..=ceiling(n)`, ns.
    pub fn wait(&self, n: u32, rng: &mut fastrand::Rng) -> u64 {
        rng.u64(0..=self.ceiling(n))
    }
}
