//! The overloads' books: each scope's overloads in a row, `--adapt`'s
//! rate, and the quota window its responses announce, kept with the
//! gate's holds under its one lock, so an overload's pause, ramp and
//! narrowing are decided at once.
//!
//! An overload pauses its scope for `Retry-After`, or else for a backoff
//! drawn with full jitter whose ceiling doubles with each overload in a
//! row ([`OverloadBook`]); only a quiet spell (no overload for as long as that
//! ceiling, at least [`QUIET_MIN`]) starts it again from `--backoff`'s
//! MIN. After each pause the scope's rate comes back gradually from half
//! what it was ([`super::gate::Ramp`]). An overload reported by an attempt
//! that started before the scope's latest overload is the same episode: it
//! may lengthen the pause, but neither grows the backoff nor lowers the
//! rate again.
//!
//! No threads, no clock, no I/O: times are ns on the caller's clock, rates
//! records per second.

use std::collections::HashMap;

use super::gate::{GateControl, Scope};
use super::quota;
use super::retry::Aimd;
use crate::backoff::Backoff;

/// Quota windows kept (one per key) before those already over are
/// forgotten.
const QUOTA_WINDOWS_KEPT: usize = 4096;

/// The shortest quiet spell that ends a run of overloads (ns).
pub(crate) const QUIET_MIN: u64 = 1_000_000_000;

/// One scope's overloads (every start's, or a key's).
#[derive(Debug, Default)]
struct OverloadBook {
    /// Overloads in a row (no quiet spell between them): the pause's
    /// backoff ceiling is `--backoff`'s for this many failures.
    streak: u32,
    /// When the latest overload that grew the streak came (ns).
    last: Option<u64>,
    /// `--adapt`'s rate for the scope.
    aimd: Option<Aimd>,
}

/// The books of every scope, and the overloads' figures.
#[derive(Debug, Default)]
pub(super) struct Overloads {
    books: HashMap<Scope, OverloadBook>,
    /// The server's quota window of each scope, as the responses tell it.
    windows: HashMap<Scope, quota::QuotaWindow>,
    /// The token windows of each scope, by the budget they pace ("" the
    /// unnamed one).
    tokens: HashMap<(Scope, Box<str>), quota::Tokens>,
    rng: fastrand::Rng,
    /// Overload responses, pauses begun, and the time paused (ns).
    overloads: u64,
    pauses: u64,
    paused_ns: u64,
}

/// The overloads' figures for the stats.
#[derive(Debug, Clone, Copy)]
pub(super) struct Figures {
    /// Overload responses.
    pub(super) overloads: u64,
    /// Pauses begun.
    pub(super) pauses: u64,
    /// Time paused, ns, the pause under way counted to its end.
    pub(super) paused_ns: u64,
    /// `--adapt`'s rate of every start (`None`: not lowered by it).
    pub(super) adapted_rate: Option<f64>,
}

impl GateControl {
    /// An overload of `scope` reported at `now` by an attempt that started
    /// at `started` (ns): pause the scope for `Retry-After`
    /// (`retry_after_ns`), or else for a `backoff` that grows with the
    /// overloads in a row; then its rate comes back gradually; under
    /// `--adapt` (`adapt`: the configured rate) its rate is lowered. See
    /// the module's notes.
    pub(super) fn overload(
        &self,
        scope: &Scope,
        (started, now): (u64, u64),
        retry_after_ns: Option<u64>,
        (backoff, adapt): (&Backoff, Option<f64>),
    ) {
        let full = self.full_rate(scope);
        let mut holds = self.lock();
        let books = &mut holds.overloads;
        books.overloads += 1;
        let book = books
            .books
            .entry(scope.clone())
            .or_insert_with(|| OverloadBook {
                aimd: adapt.map(Aimd::new),
                ..OverloadBook::default()
            });
        let quiet = backoff.ceiling(book.streak).max(QUIET_MIN);
        if book.last.is_some_and(|t| now.saturating_sub(t) > quiet) {
            book.streak = 0;
        }
        // An attempt started before the latest overload: the same episode.
        let fresh = book.last.map_or(true, |t| started >= t);
        let wait = retry_after_ns.unwrap_or_else(|| backoff.wait(book.streak, &mut books.rng));
        if fresh {
            book.streak = book.streak.saturating_add(1);
            book.last = Some(now);
        }
        // Under `--adapt` a fresh overload lowers the rate.
        let spacing = match (&mut book.aimd, fresh) {
            (Some(aimd), true) => {
                aimd.overload();
                Some(aimd.spacing_ns())
            }
            _ => None,
        };
        let was_paused = holds.paused_until(scope) > now;
        let lengthened = holds.pause(scope, now, now.saturating_add(wait));
        if lengthened > 0 {
            holds.overloads.pauses += u64::from(!was_paused);
            holds.overloads.paused_ns += lengthened;
        }
        if fresh {
            if full.is_finite() {
                let resume = holds.paused_until(scope);
                holds.slow(scope, now, resume, full);
            }
            if let Some(spacing) = spacing {
                holds.narrow(scope, spacing);
            }
        }
    }

    /// An attempt of `scope` succeeded: under `--adapt` its rate rises.
    /// Whether the gate changed.
    pub(super) fn succeeded(&self, scope: &Scope) -> bool {
        let mut holds = self.lock();
        let book = holds.overloads.books.get_mut(scope);
        let Some(aimd) = book.and_then(|b| b.aimd.as_mut()) else {
            return false;
        };
        aimd.success();
        let spacing = aimd.spacing_ns();
        holds.narrow(scope, spacing);
        true
    }

    /// The quota `q` a response of `scope` announced at `now`, read after
    /// `read_while` others while its request was in flight, as the
    /// scope's window keeps it ([`quota::QuotaWindow::observe`]).
    pub(super) fn observe_quota(
        &self,
        scope: &Scope,
        (now, read_while): (u64, u64),
        q: quota::Quota,
    ) -> Option<quota::Quota> {
        let windows = &mut self.lock().overloads.windows;
        if windows.len() > QUOTA_WINDOWS_KEPT {
            windows.retain(|_, w| w.is_open(now));
        }
        windows
            .entry(scope.clone())
            .or_default()
            .observe(now, q, read_while)
            .quota()
    }

    /// The token quota of `budget` a response of `scope` announced at
    /// `now` (`read`, [`quota::Tokens::observe`]).
    pub(super) fn observe_tokens(
        &self,
        scope: &Scope,
        budget: &str,
        now: u64,
        read: quota::TokensRead,
    ) {
        let tokens = &mut self.lock().overloads.tokens;
        if tokens.len() > QUOTA_WINDOWS_KEPT {
            tokens.retain(|_, w| w.is_open(now));
        }
        let key = (scope.clone(), Box::from(budget));
        tokens.entry(key).or_default().observe(now, read);
    }

    /// Whether a quota of `budget` is kept for `scope` (a response told of
    /// it).
    pub(super) fn reads_tokens(&self, scope: &Scope, budget: &str) -> bool {
        let key = (scope.clone(), Box::<str>::from(budget));
        self.lock().overloads.tokens.contains_key(&key)
    }

    /// `budget`'s quota of `scope` is no longer read so (the requests'
    /// read as a window after a bucket): forgotten.
    pub(super) fn forget_tokens(&self, scope: &Scope, budget: &str) {
        let key = (scope.clone(), Box::<str>::from(budget));
        self.lock().overloads.tokens.remove(&key);
    }

    /// A record of `scope` settled: what it was estimated to cost, and
    /// really spent, of each budget ([`quota::Tokens::settled`]).
    pub(super) fn settled_tokens(
        &self,
        scope: &Scope,
        estimated: &[(&str, u64)],
        spent: &[(&str, u64)],
    ) {
        let tokens = &mut self.lock().overloads.tokens;
        for (&(budget, estimate), &(_, real)) in estimated.iter().zip(spent) {
            let key = (scope.clone(), Box::<str>::from(budget));
            if let Some(w) = tokens.get_mut(&key) {
                w.settled(estimate, real);
            }
        }
    }

    /// A start of `scope` at `now` costing `costs` tokens of each budget
    /// (with the tokens of the scope's requests in flight): when every
    /// token window of the scope has them ([`quota::Tokens::fits`]), they
    /// are spent and the scope's next start waits the spacing they take
    /// (none once its windows are over); else nothing is spent, and `Err`
    /// says until when the start waits: a scope waiting for a reset
    /// pauses until the latest it waits for.
    pub(super) fn spend_tokens(
        &self,
        scope: &Scope,
        now: u64,
        costs: &[quota::Spend],
    ) -> Result<(), quota::Hold> {
        let mut holds = self.lock();
        let key = |budget: &str| (scope.clone(), Box::<str>::from(budget));
        let (mut hold, mut found): (Option<quota::Hold>, bool) = (None, false);
        for c in costs {
            if let Some(w) = holds.overloads.tokens.get(&key(c.budget)) {
                found = true;
                if let Err(h) = w.fits(now, c.cost, c.in_flight) {
                    hold = Some(match hold {
                        None => h,
                        Some(had) => had.or_later(h),
                    });
                }
            }
        }
        if let Some(hold) = hold {
            if let quota::Hold::Reset(until) = hold {
                holds.pause(scope, now, until);
            }
            return Err(hold);
        }
        if !found {
            return Ok(());
        }
        let mut spacing = 0;
        for c in costs {
            if let Some(w) = holds.overloads.tokens.get_mut(&key(c.budget)) {
                spacing = spacing.max(w.spend(now, c.cost));
            }
        }
        holds.space_tokens(scope, now, spacing);
        Ok(())
    }

    /// The overloads' figures at `now`.
    pub(super) fn overload_figures(&self, now: u64) -> Figures {
        let holds = self.lock();
        let books = &holds.overloads;
        let paused_left = holds.paused_until(&Scope::All).saturating_sub(now);
        Figures {
            overloads: books.overloads,
            pauses: books.pauses,
            paused_ns: books.paused_ns.saturating_sub(paused_left),
            adapted_rate: books
                .books
                .get(&Scope::All)
                .and_then(|b| b.aimd)
                .map(|a| a.current()),
        }
    }
}
