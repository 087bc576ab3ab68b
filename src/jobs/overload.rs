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
//! what it was (`gate::RateRecovery`). An overload reported by an attempt
//! that started before the scope's latest overload is the same episode: it
//! may lengthen the pause, but neither grows the backoff nor lowers the
//! rate again.
//!
//! No threads, no clock, no I/O: times are ns on the caller's clock, rates
//! records per second.

use std::collections::HashMap;

use super::quota;
use super::retry::Aimd;
use crate::backoff::Backoff;

/// Quota windows kept (one per key) before those already over are
/// forgotten.
const QUOTA_WINDOWS_KEPT: usize = 4096;

/// The shortest quiet spell that ends a run of overloads (ns).
pub(crate) const QUIET_MIN: u64 = 1_000_000_000;

/// Whose starts an overload holds back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every start.
    All,
    /// The starts of records of this key (`--key`).
    Key(Box<[u8]>),
}

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

/// An overload an attempt reported: when the attempt started and when
/// its overload was reported (ns on the pool's clock), and the pause its
/// response asked for (`Retry-After`, ns), if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Overload {
    pub(super) started: u64,
    pub(super) now: u64,
    pub(super) retry_after_ns: Option<u64>,
}

/// How the runner answers overloads: `--backoff`'s pauses (when a
/// response gives no `Retry-After`), and under `--adapt` the configured
/// rate (records a second) that `adapt` lowers and never exceeds
/// (`None`: no `--adapt`, or no finite rate to adapt).
#[derive(Debug, Clone, Copy)]
pub(super) struct OverloadPolicy<'a> {
    pub(super) backoff: &'a Backoff,
    pub(super) adapt: Option<f64>,
}

/// What an overload decided ([`Overloads::overload`]), for the gate to
/// put in force: pause the scope for `wait` ns; when `fresh` (not the
/// same episode as the latest), slow it after the pause and, under
/// `--adapt`, space its starts `spacing` ns apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decision {
    pub(super) wait: u64,
    pub(super) fresh: bool,
    pub(super) spacing: Option<u64>,
}

impl Overloads {
    /// An overload of `scope` (`report`): the pause is its `Retry-After`,
    /// or else the `policy`'s backoff, which grows with the overloads in a
    /// row; under `--adapt` a fresh one lowers the rate. See the module's
    /// notes.
    pub(super) fn overload(
        &mut self,
        scope: &Scope,
        report: Overload,
        policy: OverloadPolicy<'_>,
    ) -> Decision {
        let Overload {
            started,
            now,
            retry_after_ns,
        } = report;
        let OverloadPolicy { backoff, adapt } = policy;
        self.overloads += 1;
        let book = self
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
        let wait = retry_after_ns.unwrap_or_else(|| backoff.wait(book.streak, &mut self.rng));
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
        Decision {
            wait,
            fresh,
            spacing,
        }
    }

    /// A pause lengthened by `lengthened` ns (`began`: none was under
    /// way), for the figures.
    pub(super) fn paused(&mut self, lengthened: u64, began: bool) {
        if lengthened > 0 {
            self.pauses += u64::from(began);
            self.paused_ns += lengthened;
        }
    }

    /// An attempt of `scope` succeeded: under `--adapt` its rate rises;
    /// the spacing of its starts now, if `--adapt` sets one.
    pub(super) fn succeeded(&mut self, scope: &Scope) -> Option<u64> {
        let aimd = self.books.get_mut(scope)?.aimd.as_mut()?;
        aimd.success();
        Some(aimd.spacing_ns())
    }

    /// The quota `q` a response of `scope` announced at `now`, read after
    /// `read_while` others while its request was in flight, as the
    /// scope's window keeps it ([`quota::QuotaWindow::observe`]).
    pub(super) fn observe_quota(
        &mut self,
        scope: &Scope,
        now: u64,
        q: quota::Quota,
        read_while: u64,
    ) -> Option<quota::Quota> {
        if self.windows.len() > QUOTA_WINDOWS_KEPT {
            self.windows.retain(|_, w| w.is_open(now));
        }
        self.windows
            .entry(scope.clone())
            .or_default()
            .observe(now, q, read_while)
            .quota()
    }

    /// The token quota of `budget` a response of `scope` announced at
    /// `now` (`read`, [`quota::Tokens::observe`]).
    pub(super) fn observe_tokens(
        &mut self,
        scope: &Scope,
        budget: &str,
        now: u64,
        read: quota::TokensRead,
    ) {
        if self.tokens.len() > QUOTA_WINDOWS_KEPT {
            self.tokens.retain(|_, w| w.is_open(now));
        }
        let key = (scope.clone(), Box::from(budget));
        self.tokens.entry(key).or_default().observe(now, read);
    }

    /// Whether a quota of `budget` is kept for `scope` (a response told of
    /// it).
    pub(super) fn reads_tokens(&self, scope: &Scope, budget: &str) -> bool {
        let key = (scope.clone(), Box::<str>::from(budget));
        self.tokens.contains_key(&key)
    }

    /// `budget`'s quota of `scope` is no longer read so (the requests'
    /// read as a window after a bucket): forgotten.
    pub(super) fn forget_tokens(&mut self, scope: &Scope, budget: &str) {
        let key = (scope.clone(), Box::<str>::from(budget));
        self.tokens.remove(&key);
    }

    /// A record of `scope` settled: what it was estimated to cost, and
    /// really spent, of each budget ([`quota::Tokens::settled`]).
    pub(super) fn settled_tokens(
        &mut self,
        scope: &Scope,
        estimated: &[(&str, u64)],
        spent: &[(&str, u64)],
    ) {
        for (&(budget, estimate), &(_, real)) in estimated.iter().zip(spent) {
            let key = (scope.clone(), Box::<str>::from(budget));
            if let Some(w) = self.tokens.get_mut(&key) {
                w.settled(estimate, real);
            }
        }
    }

    /// A start of `scope` at `now` costing `costs` tokens of each budget
    /// (with the tokens of the scope's requests in flight): when every
    /// token window of the scope has them ([`quota::Tokens::fits`]), they
    /// are spent, and `Ok` says the spacing (ns) the scope's next start
    /// waits (`None`: no window of the scope is known); else nothing is
    /// spent, and `Err` says until when the start waits.
    pub(super) fn spend_tokens(
        &mut self,
        scope: &Scope,
        now: u64,
        costs: &[quota::Spend],
    ) -> Result<Option<u64>, quota::Hold> {
        let key = |budget: &str| (scope.clone(), Box::<str>::from(budget));
        let (mut hold, mut found): (Option<quota::Hold>, bool) = (None, false);
        for c in costs {
            if let Some(w) = self.tokens.get(&key(c.budget)) {
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
            return Err(hold);
        }
        if !found {
            return Ok(None);
        }
        let mut spacing = 0;
        for c in costs {
            if let Some(w) = self.tokens.get_mut(&key(c.budget)) {
                spacing = spacing.max(w.spend(now, c.cost));
            }
        }
        Ok(Some(spacing))
    }

    /// The overloads' figures, `paused_left` ns of the pause of every
    /// start being still to come.
    pub(super) fn figures(&self, paused_left: u64) -> Figures {
        Figures {
            overloads: self.overloads,
            pauses: self.pauses,
            paused_ns: self.paused_ns.saturating_sub(paused_left),
            adapted_rate: self
                .books
                .get(&Scope::All)
                .and_then(|b| b.aimd)
                .map(|a| a.current()),
        }
    }
}
