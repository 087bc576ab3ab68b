//! `--budget` shared (`--share`): one count per calendar window for every
//! drip on the NAME, kept in the shared state under a name that holds the
//! window's start (`NAME:budget:WINDOW@ZONE:START`), so a count is never
//! carried into another window and lapses a little after its own ends.
//!
//! A [`Book`] is a drip's side of it ([`crate::budget::Allowance`]): what
//! each window has granted this drip and whether its count is spent. Its
//! duty on the drip's keeper ([`Counting`], a [`super::keeper::Duty`])
//! takes grants from the store as the local schedule asks:
//! each call adds to the window's count, atomically, no more than keeps it
//! within the budget's N (under the state file's lock, or in one Lua
//! script in Redis), so the drips together never pass N in a window, as
//! far as the shared count lasts (a count lost, flushed or its file
//! removed, is found by the budgets' epoch at the next call and made
//! again from what the drips still counting hold: see
//! `docs/sharing.md`). A drip asks for about a second of its rate beyond
//! what it sent ([`crate::budget::Counter::shared`]); what it was granted
//! and did not send goes back to the count when it leaves
//! ([`Book::leave`]), as far as its window lasts and the count answers in
//! time (a drip killed gives nothing back: that only leaves the others
//! less).
//!
//! The count goes through the NAME's backend ([`super::backend`], the
//! operation [`Store::count`]): the state file's `NAME.budget`, or in
//! Redis one server, the primary the sentinels name (fenced), or the node
//! of a cluster that owns drip's slot; the key is in the hash slot of
//! `drip:{NAME}`. While the count cannot be reached,
//! `--share-on-error` decides: `wait` grants nothing, `local` lets the
//! drip count alone (at most N / `--share-peers` a window, told to the
//! count when it answers again), `fail` stops drip (status 4).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::backend;
use super::keeper::{Bell, Duty, Keeper, Losses, Poll};
use super::protocol::{Count, Counted, Failure, Store, Wake, KEPT_NS};
use super::target::Share;
use super::voice::{OnError, Retry, Unreachable, Unusable};
use crate::budget::{Allowance, Budget};
use crate::sys::Unpoisoned;

/// One window as this drip sees it.
#[derive(Debug, Default, Clone, Copy)]
struct Slice {
    end: i128,
    granted: u64,
    wanted: u64,
    spent: bool,
    /// The shared count as last heard.
    counted: Option<u64>,
    /// Granted while counting alone (`local`), not yet told to the count.
    alone: u64,
    /// Records this drip sent in the window.
    sent: u64,
    /// Granted and not sent, to give back to the count (drip leaves).
    back: u64,
}

#[derive(Default)]
struct Inner {
    windows: BTreeMap<i128, Slice>,
    wake: Option<Wake>,
    /// Why drip stops: the count cannot be reached under `fail`, or can
    /// never be used.
    fatal: Option<Failure>,
}

/// This drip's grants of one shared budget, window by window.
#[derive(Default)]
pub struct Book {
    inner: Mutex<Inner>,
    /// Rung when the keeper answered (what [`Book::given_back`] waits on).
    asked: Condvar,
    /// The keeper's, rung when a window asks for more or drip leaves.
    bell: Arc<Bell>,
}

impl std::fmt::Debug for Book {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book").finish_non_exhaustive()
    }
}

impl Book {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unpoisoned()
    }

    /// Call `wake(false)` whenever a grant arrives, and `wake(true)` when
    /// drip must stop (at once, if it already must).
    pub fn set_wake(&self, wake: Wake) {
        let stop = {
            let mut inner = self.lock();
            inner.wake = Some(Arc::clone(&wake));
            inner.fatal.is_some()
        };
        if stop {
            wake(true);
        }
    }

    /// The error that stops drip, if the keeper found one: the count
    /// cannot be reached under `--share-on-error fail` ([`Unreachable`]),
    /// or can never be used ([`Unusable`]); both exit with status 4.
    pub fn failed(&self, name: &str) -> Option<anyhow::Error> {
        let name = name.to_string();
        Some(match self.lock().fatal.clone()? {
            Failure::Unreachable(why) => Unreachable { name, why }.into(),
            Failure::Fatal(why) | Failure::Mismatch(why) | Failure::Changed(why) => {
                Unusable { name, why }.into()
            }
        })
    }
}

impl Book {
    /// Drip leaves: what each window not yet over granted it and it did
    /// not send is to go back to the count, and nothing more is asked
    /// for; the keeper gives it back at once ([`Book::given_back`] waits
    /// for it).
    pub fn leave(&self) {
        let now = unix_now();
        let mut inner = self.lock();
        for w in inner.windows.values_mut().filter(|w| w.end > now) {
            w.wanted = w.sent;
            w.back = w.granted.saturating_sub(w.sent);
        }
        drop(inner);
        self.asked.notify_all();
        self.bell.notify_all();
    }

    /// Wait until what [`Book::leave`] set aside went back to the count,
    /// until `by` at the latest, and not at all once `leaving` says so (a
    /// second signal). Best effort: a count that does not answer in time
    /// keeps it.
    pub fn given_back(&self, by: std::time::Instant, leaving: &dyn Fn() -> bool) {
        let mut inner = self.lock();
        while inner.windows.values().any(|w| w.back > 0) && inner.fatal.is_none() {
            let left = by.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || leaving() {
                return;
            }
            let slice = left.min(Duration::from_millis(50));
            inner = self.asked.wait_timeout(inner, slice).unpoisoned().0;
        }
    }
}

impl Allowance for Book {
    fn granted(&self, start: i128) -> (u64, bool) {
        self.lock()
            .windows
            .get(&start)
            .map_or((0, false), |w| (w.granted, w.spent))
    }

    fn counted(&self, start: i128) -> Option<u64> {
        self.lock().windows.get(&start).and_then(|w| w.counted)
    }

    fn sent(&self, start: i128, spent: u64) {
        if let Some(w) = self.lock().windows.get_mut(&start) {
            w.sent = w.sent.max(spent);
        }
    }

    fn want(&self, start: i128, end: i128, total: u64) {
        let mut inner = self.lock();
        let w = inner.windows.entry(start).or_default();
        w.end = end;
        if total > w.wanted {
            w.wanted = total;
            if !w.spent && w.wanted > w.granted {
                self.asked.notify_all();
                self.bell.notify_all();
            }
        }
    }
}

/// The wall clock, ns since the Unix epoch.
pub(crate) fn unix_now() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0))
}

/// The keeper's duty for one shared budget: takes what the book asks for.
struct Counting {
    book: Weak<Book>,
    store: Box<dyn Store>,
    /// The budget's calendar window (`day@UTC`).
    calendar: String,
    count: u64,
    name: String,
    quiet: bool,
    on_error: OnError,
    /// The most a window grants this drip in all while it counts alone
    /// (`local`): the budget's count divided by `--share-peers`.
    alone_cap: u64,
    retry: Retry,
    /// The count did not answer the last call (and that was said).
    failing: bool,
    /// Said: the count file was not text; it held lines not drip's.
    said: (bool, bool),
    /// Paused until then, after a call the count did not answer.
    paused: Option<Instant>,
    /// The epoch of the budgets' state as last heard (empty: none yet).
    epoch: String,
    /// The drip's losses of the state, which a lost count is counted in.
    losses: Arc<Losses>,
}

impl Counting {
    /// The next window that wants more than it was granted, or owes the
    /// count what it granted alone: the call for it.
    fn next_call(&self, book: &Book) -> Option<Count> {
        let mut inner = book.lock();
        let count = self.count;
        let find = |inner: &Inner| {
            inner
                .windows
                .iter()
                .find(|(_, w)| (!w.spent && w.wanted > w.granted) || w.alone > 0 || w.back > 0)
                .map(|(&start, w)| Count {
                    calendar: self.calendar.clone(),
                    start,
                    end: w.end,
                    count,
                    owed: w.alone,
                    back: w.back,
                    ask: if w.spent || w.back > 0 {
                        0
                    } else {
                        w.wanted.saturating_sub(w.granted)
                    },
                    now: unix_now(),
                    known: self.epoch.clone(),
                    holds: w.granted.saturating_sub(w.alone),
                })
        };
        let now = unix_now();
        inner.windows.retain(|_, w| w.end + KEPT_NS >= now);
        find(&inner)
    }

    /// One step: paused, grant alone under `local`; else the call the
    /// book wants, if any (looked at again within 100 ms).
    fn step(&mut self) -> Poll {
        let Some(book) = self.book.upgrade() else {
            return Poll::Done;
        };
        if let Some(until) = self.paused {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                if self.on_error == OnError::Local {
                    self.grant_alone(&book);
                }
                return Poll::Idle(left);
            }
            self.paused = None;
        }
        let Some(call) = self.next_call(&book) else {
            return Poll::Idle(Duration::from_millis(100));
        };
        match self.store.count(&call) {
            Ok(counted) => {
                self.passed_over(&counted);
                self.note_lost(&counted);
                self.granted(&book, &call, counted.granted, counted.after);
            }
            Err(Failure::Unreachable(why)) if self.on_error != OnError::Fail => {
                self.unreachable(&why);
                let pause = self.retry.failed();
                self.paused = Some(Instant::now() + pause);
                if self.on_error == OnError::Local {
                    self.grant_alone(&book);
                }
            }
            Err(failure) => {
                stop(&book, failure);
                return Poll::Done;
            }
        }
        Poll::Worked
    }

    /// The count answered `call`: `granted` more, the count `after`.
    fn granted(&mut self, book: &Book, call: &Count, granted: u64, after: u64) {
        if self.failing && !self.quiet {
            let shared = if self.on_error == OnError::Local {
                "; counting shared"
            } else {
                ""
            };
            eprintln!(
                "drip: --share {}: the shared budget answers again{shared}",
                self.name
            );
        }
        self.failing = false;
        self.retry.succeeded();
        let wake = {
            let mut inner = book.lock();
            if let Some(w) = inner.windows.get_mut(&call.start) {
                w.granted = (w.granted + granted).saturating_sub(call.back);
                w.alone = w.alone.saturating_sub(call.owed);
                w.back = w.back.saturating_sub(call.back);
                w.counted = Some(after);
                w.spent |= granted < call.ask || after >= self.count;
            }
            inner.wake.clone()
        };
        // The book's leave waits for what went back.
        book.asked.notify_all();
        // Outside the book's lock: the writer takes it under drip's state
        // lock, which waking takes.
        if let Some(wake) = wake {
            wake(false);
        }
    }

    /// Say, once each (not when quiet), that the count file held lines
    /// drip did not write, or was not text: its counts lost, started
    /// afresh.
    fn passed_over(&mut self, counted: &Counted) {
        let name = &self.name;
        if counted.garbled && !self.said.0 && !self.quiet {
            eprintln!(
                "drip: --share {name}: the shared budget's count file ({name}.budget) held something drip did not write (not text): its counts are lost, started afresh"
            );
        }
        if counted.passed_over > 0 && !self.said.1 && !self.quiet {
            let lines = if counted.passed_over == 1 {
                "line"
            } else {
                "lines"
            };
            eprintln!(
                "drip: --share {name}: the shared budget's count file ({name}.budget) held {} {lines} drip did not write: passed over, and gone at its next write",
                counted.passed_over
            );
        }
        self.said.0 |= counted.garbled;
        self.said.1 |= counted.passed_over > 0;
    }

    /// The count answered from a state made anew since the epoch this
    /// drip knew (flushed, removed, not text): lost. Counted in the drip's
    /// losses, and said once unless another feature just said it (or the
    /// count file's garbage was).
    fn note_lost(&mut self, counted: &Counted) {
        self.epoch.clone_from(&counted.epoch);
        let lost = counted.lost || counted.garbled;
        if self.losses.heard("budget", lost) && !counted.garbled && !self.quiet {
            eprintln!(
                "drip: --share {}: the shared state was lost (a restart or a flush); the budget's count is made again from what the drips still counting hold; beyond the budget, at most {} more may pass in its window",
                self.name, self.count
            );
        }
    }

    /// The count cannot be reached (not under `fail`): say so once an
    /// outage (not when quiet).
    fn unreachable(&mut self, why: &str) {
        if !self.failing && !self.quiet {
            let name = &self.name;
            match self.on_error {
                OnError::Local => eprintln!(
                    "drip: --share {name}: the shared budget cannot be reached: {why}; counting alone, at most {} of it a window, until it answers again (--share-on-error local)",
                    self.alone_cap
                ),
                _ => eprintln!(
                    "drip: --share {name}: the shared budget cannot be reached: {why}; records wait until it answers (--share-on-error wait)"
                ),
            }
        }
        self.failing = true;
    }

    /// Counting alone (`local`): grant each window what it asks, up to
    /// [`Counting::alone_cap`] in all, and owe the count that.
    fn grant_alone(&self, book: &Book) {
        let wake = {
            let mut inner = book.lock();
            let mut any = false;
            for w in inner.windows.values_mut().filter(|w| !w.spent) {
                let more = w.wanted.saturating_sub(w.granted);
                let give = more.min(self.alone_cap.saturating_sub(w.granted));
                if give > 0 {
                    w.granted += give;
                    w.alone += give;
                    any = true;
                }
            }
            any.then(|| inner.wake.clone()).flatten()
        };
        if let Some(wake) = wake {
            wake(false);
        }
    }
}

/// Drip must stop for `failure`: kept in the book, and said to the writer.
fn stop(book: &Book, failure: Failure) {
    let wake = {
        let mut inner = book.lock();
        inner.fatal = Some(failure);
        inner.wake.clone()
    };
    if let Some(wake) = wake {
        wake(true);
    }
}

impl Duty for Counting {
    fn poll(&mut self) -> Poll {
        self.step()
    }
}

/// Start sharing `budget` through `share`'s state: its book, whose count
/// `keeper` (the drip's) keeps until the book is dropped.
///
/// # Errors
/// A Redis URL redis-rs does not accept; a thread that cannot start.
pub fn start(share: &Share, budget: &Budget, keeper: &Arc<Keeper>) -> anyhow::Result<Arc<Book>> {
    let name = share.target.name().to_string();
    let store = backend::open(&share.target, "", Vec::new(), None)
        .map_err(|e| anyhow::anyhow!("--share {name}: {e}"))?;
    let book = Arc::new(Book {
        bell: keeper.bell(),
        ..Book::default()
    });
    let counting = Counting {
        book: Arc::downgrade(&book),
        store,
        calendar: budget.calendar.to_string(),
        count: budget.count,
        name,
        quiet: share.quiet,
        on_error: share.on_error,
        alone_cap: budget.count / share.peers.max(1),
        retry: Retry::new(fastrand::Rng::new()),
        failing: false,
        said: (false, false),
        paused: None,
        epoch: String::new(),
        losses: keeper.losses(),
    };
    keeper.add(Box::new(counting))?;
    Ok(book)
}
