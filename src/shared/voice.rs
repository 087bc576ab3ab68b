//! What the keeper does when the shared state cannot be reached: the
//! `--share-on-error` policy ([`OnError`]), the pauses between attempts
//! ([`Retry`]), and what it says on stderr ([`Voice`]). Pure but for the
//! messages on stderr: no threads, no clock.

use std::fmt;
use std::time::Duration;

use super::key_table::describe_spec as describe;
use super::protocol::EXPIRY_NS;
use crate::backoff::Backoff;

/// What the keeper does when the state cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Send nothing; retry with capped backoff and jitter.
    Wait,
    /// Pace alone at rate / peers; warn once.
    Local,
    /// Stop drip with exit status 4.
    Fail,
}

/// The pauses between attempts to reach the state: from 50 ms doubling to
/// 2 s, with full jitter.
pub(crate) const BACKOFF: Backoff = Backoff {
    min_ns: 50_000_000,
    max_ns: 2_000_000_000,
};

/// The pause before each attempt to reach the state after a failed one:
/// exponential backoff with full jitter ([`Backoff`]: uniform in 0 ..=
/// min(2 s, 50 ms · 2^n) before retry n), starting again from 50 ms after
/// a call that succeeds. Pure: the randomness is the caller's RNG.
#[derive(Debug)]
pub(crate) struct Retry {
    /// Failed calls since the last success.
    failed: u32,
    rng: fastrand::Rng,
}

impl Retry {
    pub(crate) fn new(rng: fastrand::Rng) -> Retry {
        Retry { failed: 0, rng }
    }

    /// A call failed: how long to pause before the next one.
    pub(crate) fn failed(&mut self) -> Duration {
        let wait = BACKOFF.wait(self.failed, &mut self.rng);
        self.failed = self.failed.saturating_add(1);
        Duration::from_nanos(wait)
    }

    /// A call succeeded: the next failure pauses from 50 ms again.
    pub(crate) fn succeeded(&mut self) {
        self.failed = 0;
    }
}

/// What a keeper says on stderr about reaching the state.
#[derive(Debug)]
pub(crate) struct Voice {
    /// What the messages call the shared state.
    pub(crate) name: String,
    pub(crate) on_error: OnError,
    /// Whether `local` paces alone (and warned so).
    pub(crate) warned: bool,
    /// Whether `wait` is waiting for the state (and said so).
    pub(crate) waiting: bool,
    /// No notices on stderr (`-q`): only errors (not `local`'s warning,
    /// nor a lost state; both are still counted).
    pub(crate) quiet: bool,
    /// What may pass when the state is lost.
    pub(crate) may_pass: &'static str,
}

impl Voice {
    pub(crate) fn new(
        name: String,
        may_pass: &'static str,
        on_error: OnError,
        quiet: bool,
    ) -> Voice {
        Voice {
            name,
            may_pass,
            on_error,
            warned: false,
            waiting: false,
            quiet,
        }
    }

    /// Say `what` on stderr, after this drip's name, unless quiet.
    fn say(&self, what: std::fmt::Arguments<'_>) {
        if !self.quiet {
            eprintln!("drip: {}: {what}", self.name);
        }
    }

    /// The state cannot be reached (not under `fail`): `local` warns and
    /// `wait` says that it waits, each once per outage (neither says
    /// anything when quiet; the failed calls are counted all the same).
    pub(crate) fn unreachable(&mut self, why: &str) {
        match self.on_error {
            OnError::Local if !self.warned => {
                self.say(format_args!(
                    "the shared state cannot be reached: {why}; pacing alone until it answers again (--share-on-error local)"
                ));
                self.warned = true;
            }
            OnError::Wait if !self.waiting => {
                self.waiting = true;
                self.say(format_args!(
                    "the shared state cannot be reached: {why}; sending nothing until it answers (--share-on-error wait)"
                ));
            }
            OnError::Local | OnError::Wait | OnError::Fail => {}
        }
    }

    /// The state was found fresh while in use: say so (unless quiet).
    pub(crate) fn lost(&self) {
        self.say(format_args!(
            "the shared state was lost (a restart or a flush); beyond the limit, at most {} may pass",
            self.may_pass
        ));
    }

    /// The stored state could not be read (`why`, naming it) and was
    /// started afresh: a lost state; say so (unless quiet).
    pub(crate) fn unreadable(&self, why: &str) {
        self.say(format_args!(
            "the shared state was lost: {why}; started afresh; beyond the limit, at most {} may pass",
            self.may_pass
        ));
    }

    /// A call succeeded: say that the outage is over (`wait`: the wait;
    /// `local`: pacing alone).
    pub(crate) fn reached(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.say(format_args!("the shared state answers again; sending"));
        }
        if std::mem::take(&mut self.warned) {
            self.say(format_args!(
                "the shared state answers again; pacing shared"
            ));
        }
    }
}

/// The limits of this drip differ from those stored under the NAME: exit
/// status 2.
#[derive(Debug)]
pub struct Disagreement {
    /// `--share`'s NAME.
    pub name: String,
    /// Ours, as text.
    pub ours: String,
    /// The stored ones, as text.
    pub theirs: String,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--share {}: this drip's limits ({}) differ from the shared ones ({}): wait until the shared state expires, {} s after the end of its reserved schedule, or choose another NAME",
            self.name,
            self.ours,
            self.theirs,
            EXPIRY_NS / 1_000_000_000
        )
    }
}

impl std::error::Error for Disagreement {}

/// What a drip (or `drip take`) says when it finds the shared limits of
/// `name` changed by `drip ctl` to `theirs`, not the ones it had (`ours`,
/// specs): it follows the stored ones from now on.
pub fn told(name: &str, ours: &str, theirs: &str) -> String {
    format!(
        "--share {name}: the shared limits were changed by drip ctl to {} (this drip had {}): it follows them",
        describe(theirs),
        describe(ours)
    )
}

/// The shared state cannot be reached under `--share-on-error fail`: exit
/// status 4.
#[derive(Debug)]
pub struct Unreachable {
    /// `--share`'s NAME.
    pub name: String,
    /// Why.
    pub why: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--share {}: the shared state cannot be reached: {} (--share-on-error fail)",
            self.name, self.why
        )
    }
}

impl std::error::Error for Unreachable {}

/// The shared state can never be used as set up (a state directory drip
/// may not write, a password the server wants): exit status 4 under every
/// `--share-on-error`.
#[derive(Debug)]
pub struct Unusable {
    /// `--share`'s NAME.
    pub name: String,
    /// Why, naming what to change.
    pub why: String,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--share {}: {}", self.name, self.why)
    }
}

impl std::error::Error for Unusable {}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Retry n pauses at most min(2 s, 50 ms · 2^n), spread over that
    /// whole range, and from 50 ms again after a success.
    #[test]
    fn retries_back_off_from_50_ms_doubling_to_2_s_and_start_again_after_a_success() {
        let ceilings = [50, 100, 200, 400, 800, 1600, 2000, 2000, 2000].map(|c| c * MS);
        let mut sums = [Duration::ZERO; 9];
        let mut retry = Retry::new(fastrand::Rng::with_seed(11));
        for _ in 0..400 {
            for (n, ceiling) in ceilings.iter().enumerate() {
                let pause = retry.failed();
                assert!(pause <= *ceiling, "retry {n}: {pause:?}");
                sums[n] += pause;
            }
            retry.succeeded();
        }
        // Full jitter: the mean is about half the ceiling.
        for (n, ceiling) in ceilings.iter().enumerate() {
            let mean = sums[n] / 400;
            assert!(
                mean > *ceiling * 2 / 5 && mean < *ceiling * 3 / 5,
                "retry {n}: mean {mean:?}"
            );
        }
    }
}
