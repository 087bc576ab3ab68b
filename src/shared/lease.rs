//! The lease and its keeper.
//!
//! The *lease* is the departure slots this drip has reserved in the shared
//! state and not used yet, as times on drip's own clock. The schedule
//! ([`super::SharedSchedule`]) only ever looks at it under a short lock, so
//! admission and the writer never wait on the network. The *keeper* is a
//! thread of its own that reserves more slots when the lease is nearly
//! used (one call to the backend reserves as many slots as the records
//! waiting want, at most one *chunk* of the shared schedule: 50 ms, or four
//! round trips, at most 200 ms), gives unused slots back at exit, and
//! reports a shared state that cannot be reached, disagrees, or was lost.
//!
//! Fairness: as each call takes at most one chunk, and a drip calls again
//! only when its lease is nearly used, busy participants take turns in the
//! order their calls reach the state, one chunk each, and converge to equal
//! shares within one round of turns (while the turns of all of them fit in
//! the horizon, 1 s: some 20 busy drips on a fast link).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::gcra::Meter;
use crate::backoff::Backoff;

/// Why the shared state could not serve a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The stored limits differ from ours (their spec).
    Mismatch(String),
    /// The state could not be reached or read (why).
    Unreachable(String),
    /// The state can never be used as set up (why: a state directory
    /// drip may not write, a password the server wants): drip stops with
    /// exit status 4 under every `--share-on-error`.
    Fatal(String),
}

/// Slots granted by one reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The reservation's number in the shared state.
    pub seq: u64,
    /// The shared clock's time of the reservation, ns.
    pub now: i64,
    /// The state did not exist before this call.
    pub fresh: bool,
    /// Departure times, ns after `now`, in order.
    pub slots: Vec<i64>,
}

/// A place where the shared state lives: a file on this host, or Redis.
pub trait Backend: Send {
    /// Check that the stored limits are ours (storing them when there are
    /// none). Returns whether the state was fresh.
    fn hello(&mut self) -> Result<bool, Failure>;
    /// Reserve up to `want` slots due within `horizon` ns (at least one),
    /// slot `j` for a record of `sizes[j]` bytes (1 past the end of
    /// `sizes`, as for record limits only).
    fn reserve(&mut self, want: u64, sizes: &[u64], horizon: i64) -> Result<Grant, Failure>;
    /// Give back the slots from `first_unused` (shared ns; reserved for
    /// `size` bytes) on, if no one reserved after reservation `seq`.
    /// Returns whether they were.
    fn give_back(&mut self, seq: u64, first_unused: i64, size: u64) -> Result<bool, Failure>;
    /// The shared clock's now (ns) when it is this host's
    /// `CLOCK_MONOTONIC`, which drip's clock also runs on: slots then map
    /// exactly. `None` for a clock elsewhere.
    fn host_clock(&self) -> Option<i64> {
        None
    }
}

/// How the schedule paces while the state cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// From the lease.
    Shared,
    /// Alone, at the configured rate divided by the peers (`local`).
    Local,
}

/// What the schedule and the keeper share.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Reserved departure slots, in order: each one's time on drip's
    /// clock (ns) and the size (bytes) it was reserved for, which it may
    /// carry a record of at most (1 when no limit counts bytes).
    pub(crate) slots: VecDeque<(u64, u64)>,
    /// Records waiting that the lease does not cover yet.
    pub(crate) wanted: usize,
    /// When a limit counts bytes: the sizes (bytes) of the first of those
    /// records, in order, at most [`SIZES_KEPT`] (empty otherwise).
    pub(crate) wanted_sizes: Vec<u64>,
    pub(crate) mode: Mode,
    pub(crate) closed: bool,
    /// The last reservation's seq and the shared times of the slots in
    /// the lease, in order (at least the last of them: for giving back
    /// those unused at exit).
    pub(crate) last: Option<(u64, VecDeque<i64>)>,
    /// The latest slot ever reserved, on drip's clock (ns).
    pub(crate) reserved_until: u64,
    /// Counters for the summary.
    pub(crate) reservations: u64,
    pub(crate) lost: u64,
    pub(crate) failures: u64,
    pub(crate) forfeited: u64,
    /// A fatal failure: drip stops (`fail`, or disagreeing limits).
    pub(crate) fatal: Option<Failure>,
}

/// The lease: state under a lock and the keeper's wake-up.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) state: Mutex<LeaseState>,
    pub(crate) wake: Condvar,
    /// drip's clock origin.
    pub(crate) origin: Instant,
}

impl Lease {
    pub(crate) fn new(origin: Instant) -> Lease {
        Lease {
            state: Mutex::new(LeaseState {
                slots: VecDeque::new(),
                wanted: 0,
                wanted_sizes: Vec::new(),
                mode: Mode::Shared,
                closed: false,
                last: None,
                reserved_until: 0,
                reservations: 0,
                lost: 0,
                failures: 0,
                forfeited: 0,
                fatal: None,
            }),
            wake: Condvar::new(),
            origin,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// drip's clock (ns since `origin`).
    pub(crate) fn now(&self) -> u64 {
        crate::sys::ns_since(self.origin)
    }
}

/// What a `hello` asked while pacing alone (`local`) means, for either
/// keeper: `Ok(true)` when the state answers (the backoff starts afresh,
/// and drip says it shares again), `Ok(false)` when it still cannot be
/// reached (said once per outage), or the failure that stops drip.
pub(crate) fn answered(
    hello: Result<bool, Failure>,
    retry: &mut Retry,
    voice: &mut Voice,
) -> Result<bool, Failure> {
    match hello {
        Ok(_) => {
            retry.succeeded();
            voice.reached();
            Ok(true)
        }
        Err(Failure::Unreachable(why)) => {
            voice.unreachable(&why);
            Ok(false)
        }
        Err(failure) => Err(failure),
    }
}

/// Whether a state found fresh may simply have expired: this drip's latest
/// slot (`reserved_until`, ns on drip's clock) is at least the expiry ago
/// at `now`, less a second for the offset between drip's clock and the
/// shared one (a slot lands on drip's clock up to one call, at most 1 s,
/// late). Such a state is no loss: every `TAT` of ours had passed, and a
/// fresh state schedules the same (another drip that used it since, and
/// finds it gone too soon, reports the loss).
fn expired(reserved_until: u64, now: u64) -> bool {
    let margin = super::EXPIRY_NS
        .saturating_sub(1_000_000_000)
        .unsigned_abs();
    now >= reserved_until.saturating_add(margin)
}

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

/// The keeper's settings.
pub(crate) struct Keeper {
    pub(crate) lease: Arc<Lease>,
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) on_error: OnError,
    /// The shared limits, for sizing a reservation to one chunk of their
    /// schedule.
    pub(crate) meters: Vec<Meter>,
    /// Called when slots arrive (wakes the writer) and when drip must stop.
    pub(crate) notify: Arc<dyn Fn(bool) + Send + Sync>,
    /// What it says on stderr.
    pub(crate) voice: Voice,
    /// The pause before the next attempt after a failed one.
    pub(crate) retry: Retry,
}

/// The sizes of waiting records the lease keeps at most (more than one
/// reservation's worth, as a reservation never takes more than 200 ms).
pub(crate) const SIZES_KEPT: usize = 4096;

/// Shortest and longest chunk of the shared schedule one reservation
/// takes, ns.
const MIN_CHUNK: i64 = 50_000_000;
const MAX_CHUNK: i64 = 200_000_000;
/// How far ahead of the shared now a reservation's slots may be, beyond
/// the first (ns): the turns of the others ahead of it.
pub(crate) const HORIZON: i64 = 1_000_000_000;
/// How long the stop path waits for a keeper to give back its unused
/// slots before drip leaves without it (a hung server).
pub const GIVE_BACK_WAIT: Duration = Duration::from_millis(100);
/// The pauses between attempts to reach the state: from 50 ms doubling to
/// 2 s, with full jitter.
const BACKOFF: Backoff = Backoff {
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

/// How far ahead one reservation of the keys' keeper ([`super::keys`])
/// reaches: a few round trips, within 200 ms and 1 s.
pub(crate) fn horizon(rtt: i64) -> i64 {
    rtt.saturating_mul(4).clamp(200_000_000, HORIZON)
}

/// How much of the shared schedule (ns) one reservation takes at most: a
/// few round trips (`rtt`, ns), within 50 and 200 ms.
pub(crate) fn chunk(rtt: i64) -> i64 {
    rtt.saturating_mul(4).clamp(MIN_CHUNK, MAX_CHUNK)
}

/// When the keeper reserves again: once the lease's last slot is less than
/// this (ns) away, half a chunk or two round trips, so the next turn's
/// answer is back before the lease runs out.
pub(crate) fn ahead(rtt: i64) -> i64 {
    (chunk(rtt) / 2).max(rtt.saturating_mul(2))
}

/// How many of `want` waiting records (of `sizes` bytes, 1 past them) one
/// reservation takes: as many as fit in `chunk` ns of every limit's
/// schedule (`meters`), at least one (a record larger than that leaves
/// alone).
pub(crate) fn fitting(meters: &[Meter], want: u64, sizes: &[u64], chunk: i64) -> u64 {
    if sizes.is_empty() {
        let interval = meters.iter().map(|m| m.cost(1)).max().unwrap_or(1).max(1);
        return want
            .min(u64::try_from(chunk / interval).unwrap_or(0))
            .max(1);
    }
    let mut spent = vec![0i64; meters.len()];
    let mut n = 0;
    for &size in sizes
        .iter()
        .take(usize::try_from(want).unwrap_or(usize::MAX))
    {
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        let fits = meters
            .iter()
            .zip(&spent)
            .all(|(m, &s)| s.saturating_add(m.cost(size)) <= chunk);
        if !fits && n > 0 {
            break;
        }
        for (m, s) in meters.iter().zip(spent.iter_mut()) {
            *s = s.saturating_add(m.cost(size));
        }
        n += 1;
    }
    n.max(1)
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
}

impl Voice {
    pub(crate) fn new(name: String, on_error: OnError, quiet: bool) -> Voice {
        Voice {
            name,
            on_error,
            warned: false,
            waiting: false,
            quiet,
        }
    }

    /// The state cannot be reached (not under `fail`): `local` warns and
    /// `wait` says that it waits, each once per outage (neither says
    /// anything when quiet; the failed calls are counted all the same).
    pub(crate) fn unreachable(&mut self, why: &str) {
        match self.on_error {
            OnError::Local if !self.warned => {
                if !self.quiet {
                    eprintln!(
                        "drip: {}: the shared state cannot be reached: {why}; pacing alone until it answers again (--share-on-error local)",
                        self.name
                    );
                }
                self.warned = true;
            }
            OnError::Wait if !self.waiting => {
                self.waiting = true;
                if !self.quiet {
                    eprintln!(
                        "drip: {}: the shared state cannot be reached: {why}; sending nothing until it answers (--share-on-error wait)",
                        self.name
                    );
                }
            }
            OnError::Local | OnError::Wait | OnError::Fail => {}
        }
    }

    /// The state was found fresh while in use: say so (unless quiet);
    /// `what` is what may pass: "one burst more", "one burst more per key".
    pub(crate) fn lost(&self, what: &str) {
        if !self.quiet {
            eprintln!(
                "drip: {}: the shared state was lost (a restart or a flush); at most {what} may pass",
                self.name
            );
        }
    }

    /// A call succeeded: say that the outage is over (`wait`: the wait;
    /// `local`: pacing alone).
    pub(crate) fn reached(&mut self) {
        if self.waiting {
            self.waiting = false;
            if !self.quiet {
                eprintln!(
                    "drip: {}: the shared state answers again; sending",
                    self.name
                );
            }
        }
        if self.warned {
            self.warned = false;
            if !self.quiet {
                eprintln!(
                    "drip: {}: the shared state answers again; pacing shared",
                    self.name
                );
            }
        }
    }
}

impl Keeper {
    /// Check the stored limits before anything is read (see
    /// [`Backend::hello`]). An unreachable state is fatal only under
    /// `fail`; otherwise it is reported as [`Keeper::unreachable`] does.
    pub(crate) fn hello(&mut self) -> Result<(), Failure> {
        match self.backend.hello() {
            Ok(_) => Ok(()),
            Err(Failure::Unreachable(why)) if self.on_error != OnError::Fail => {
                self.lease.lock().failures += 1;
                self.unreachable(&why);
                Ok(())
            }
            Err(failure) => Err(failure),
        }
    }

    /// Run until the lease is closed, then give back what is unused.
    /// Under `local`, while pacing alone, ask the state again after each
    /// pause of the backoff, and share again once it answers.
    pub(crate) fn run(mut self) {
        let mut rtt = 0i64;
        loop {
            if self.lease.lock().mode == Mode::Local {
                if !self.rejoin() {
                    break;
                }
                continue;
            }
            let Some((want, sizes)) = self.await_need(ahead(rtt)) else {
                break;
            };
            let want = fitting(&self.meters, want, &sizes, chunk(rtt));
            let sizes = &sizes[..sizes.len().min(want as usize)];
            let started = Instant::now();
            match self.backend.reserve(want, sizes, HORIZON) {
                Ok(grant) => {
                    let took = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
                    rtt = if rtt == 0 { took } else { (rtt * 7 + took) / 8 };
                    self.retry.succeeded();
                    self.voice.reached();
                    self.take(grant, sizes);
                }
                Err(failure @ (Failure::Mismatch(_) | Failure::Fatal(_))) => {
                    return self.fatal(failure)
                }
                Err(Failure::Unreachable(why)) => {
                    self.lease.lock().failures += 1;
                    if self.on_error == OnError::Fail {
                        return self.fatal(Failure::Unreachable(why));
                    }
                    self.unreachable(&why);
                    // Under `local`, `rejoin` pauses.
                    if self.on_error == OnError::Wait {
                        let pause = self.retry.failed();
                        self.pause(pause);
                    }
                }
            }
        }
        self.give_back();
    }

    /// Pacing alone (`local`): pause as the backoff says, then ask the
    /// state whether it answers ([`Backend::hello`]); if it does, pace
    /// from the lease again (and say so). Returns `false` once closed or
    /// stopped (the stored limits differ now).
    fn rejoin(&mut self) -> bool {
        let pause = self.retry.failed();
        self.pause(pause);
        if self.lease.lock().closed {
            return false;
        }
        match answered(self.backend.hello(), &mut self.retry, &mut self.voice) {
            Ok(true) => {
                self.lease.lock().mode = Mode::Shared;
                (self.notify)(false);
                true
            }
            Ok(false) => {
                self.lease.lock().failures += 1;
                true
            }
            Err(failure) => {
                self.fatal(failure);
                false
            }
        }
    }

    /// The state cannot be reached (not under `fail`): say so, and under
    /// `local` pace alone.
    fn unreachable(&mut self, why: &str) {
        self.voice.unreachable(why);
        if self.on_error == OnError::Local {
            self.lease.lock().mode = Mode::Local;
            (self.notify)(false);
        }
    }

    /// Wait until the lease runs low (its last slot is less than `ahead`
    /// ns away) while records want slots; returns how many to ask for and
    /// their sizes (empty when no limit counts bytes), or `None` once
    /// closed.
    fn await_need(&self, ahead: i64) -> Option<(u64, Vec<u64>)> {
        let mut st = self.lease.lock();
        loop {
            if st.closed {
                return None;
            }
            let mut want = st.wanted;
            if !st.wanted_sizes.is_empty() {
                want = want.min(st.wanted_sizes.len());
            }
            if want > 0 {
                let now = self.lease.now();
                let end = st.slots.back().map_or(0, |&(t, _)| t);
                let until = end.saturating_sub(ahead as u64);
                if until <= now {
                    let sizes = st.wanted_sizes.iter().take(want).copied().collect();
                    return Some((want as u64, sizes));
                }
                st = self.wait(st, Duration::from_nanos(until - now));
            } else {
                st = self.wait(st, Duration::from_secs(1));
            }
        }
    }

    fn wait<'a>(
        &'a self,
        st: MutexGuard<'a, LeaseState>,
        d: Duration,
    ) -> MutexGuard<'a, LeaseState> {
        self.lease
            .wake
            .wait_timeout(st, d)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Put the granted slots in the lease, on drip's clock: exactly when
    /// the shared clock is this host's; otherwise counted from when the
    /// answer arrived (never earlier than the shared schedule says). Each
    /// is tagged with the size it was reserved for (`sizes`, 1 past them).
    fn take(&mut self, grant: Grant, sizes: &[u64]) {
        let base = match self.backend.host_clock() {
            Some(shared_now) => {
                let ours = i64::try_from(self.lease.now()).unwrap_or(i64::MAX);
                let at_grant = ours.saturating_sub(shared_now.saturating_sub(grant.now));
                u64::try_from(at_grant).unwrap_or(0)
            }
            None => self.lease.now(),
        };
        let lost = {
            let st = self.lease.lock();
            grant.fresh && st.reservations > 0 && !expired(st.reserved_until, self.lease.now())
        };
        if lost {
            // Said without the lease's lock: a stalled stderr must not
            // hold up the writer, which takes it for every record.
            self.voice.lost("one burst more");
        }
        let mut st = self.lease.lock();
        if lost {
            st.lost += 1;
        }
        st.reservations += 1;
        st.mode = Mode::Shared;
        let n = grant.slots.len();
        st.wanted = st.wanted.saturating_sub(n);
        let covered = n.min(st.wanted_sizes.len());
        st.wanted_sizes.drain(..covered);
        let unused = st.slots.len();
        let mut shared_times = st.last.take().map(|(_, t)| t).unwrap_or_default();
        shared_times.drain(..shared_times.len().saturating_sub(unused));
        shared_times.extend(grant.slots.iter().map(|d| grant.now + d));
        st.last = Some((grant.seq, shared_times));
        let floor = st.slots.back().map_or(0, |&(t, _)| t);
        for (j, d) in grant.slots.into_iter().enumerate() {
            let t = base
                .saturating_add(u64::try_from(d).unwrap_or(0))
                .max(floor);
            st.slots.push_back((t, sizes.get(j).copied().unwrap_or(1)));
            st.reserved_until = st.reserved_until.max(t);
        }
        drop(st);
        (self.notify)(false);
    }

    /// Pause for `d`, or until the lease is closed. The writer's wake-ups
    /// (records wanting slots) do not cut it short: that would retry at
    /// the writer's pace instead of backing off.
    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut st = self.lease.lock();
        while !st.closed {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self.wait(st, left);
        }
    }

    fn fatal(&self, failure: Failure) {
        let mut st = self.lease.lock();
        st.fatal = Some(failure);
        drop(st);
        (self.notify)(true);
    }

    /// At exit: the slots still unused go back, from the first, if no
    /// one reserved since this drip's last reservation (the slots between
    /// its reservations were then all its own).
    fn give_back(&mut self) {
        let mut st = self.lease.lock();
        let unused = st.slots.len();
        let size = st.slots.front().map_or(1, |&(_, size)| size);
        let Some((seq, times)) = st.last.take() else {
            return;
        };
        drop(st);
        // Only when the shared time of every unused slot is known.
        if unused > 0 && unused <= times.len() {
            let _ = self
                .backend
                .give_back(seq, times[times.len() - unused], size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

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

    use crate::shared::gcra::{ByteStep, Gcra, Step};

    /// One reservation takes at most one chunk of every limit's schedule,
    /// at least one slot, and no more than the records waiting.
    #[test]
    fn a_reservation_takes_at_most_one_chunk() {
        let ms = 1_000_000;
        let records = [Meter::Records(Step {
            interval: 10 * ms,
            tolerance: 0,
        })];
        assert_eq!(fitting(&records, 100, &[], 50 * ms), 5);
        assert_eq!(fitting(&records, 3, &[], 50 * ms), 3);
        assert_eq!(fitting(&records, 1, &[], ms), 1);
        // 1000 bytes a second: a byte costs 1 ms.
        let bytes = [Meter::Bytes(ByteStep {
            count: 1000,
            period: 1_000 * ms,
            burst: 100,
        })];
        assert_eq!(fitting(&bytes, 4, &[20, 20, 20, 100], 50 * ms), 2);
        assert_eq!(fitting(&bytes, 1, &[100], 50 * ms), 1);
        assert_eq!(chunk(0), 50 * ms);
        assert_eq!(chunk(100 * ms), 200 * ms);
        assert_eq!(ahead(0), 25 * ms);
    }

    /// On virtual time: four busy drips (deep queues) sharing 400/s, each
    /// reserving as the keeper does (when its lease is nearly used, one
    /// chunk, in turn), get 100 slots each in every second, whichever
    /// reserved first.
    #[test]
    fn busy_drips_taking_turns_get_equal_shares() {
        let ms = 1_000_000;
        let meters = [Meter::Records(Step {
            interval: 2_500_000,
            tolerance: 0,
        })];
        let mut state = Gcra::default();
        let mut leases: Vec<VecDeque<i64>> = vec![VecDeque::new(); 4];
        let mut sent = [[0u32; 5]; 4];
        for now in (0..5_000 * ms).step_by(ms as usize) {
            for (i, lease) in leases.iter_mut().enumerate() {
                while lease.front().is_some_and(|&t| t <= now) {
                    lease.pop_front();
                    sent[i][(now / (1_000 * ms)) as usize] += 1;
                }
                if lease.back().map_or(true, |&t| t - now < ahead(0)) {
                    let want = fitting(&meters, 10_000, &[], chunk(0));
                    let slots = state.reserve_sized(&meters, now, want, &[], HORIZON);
                    lease.extend(slots);
                }
            }
        }
        for (i, seconds) in sent.iter().enumerate() {
            for &n in &seconds[1..] {
                assert!((95..=105).contains(&n), "drip {i}: {seconds:?}");
            }
        }
    }

    /// A state that is never reached, counting the calls.
    struct Down(Arc<AtomicU64>);

    impl Backend for Down {
        fn hello(&mut self) -> Result<bool, Failure> {
            Err(Failure::Unreachable("down".into()))
        }
        fn reserve(&mut self, _: u64, _: &[u64], _: i64) -> Result<Grant, Failure> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(Failure::Unreachable("down".into()))
        }
        fn give_back(&mut self, _: u64, _: i64, _: u64) -> Result<bool, Failure> {
            Err(Failure::Unreachable("down".into()))
        }
    }

    /// The writer wakes the keeper whenever records want slots (every
    /// 50 ms while the lease is empty; here every 2 ms): the keeper still
    /// pauses for its whole backoff between calls.
    #[test]
    fn the_writers_wake_ups_do_not_cut_the_backoff_short() {
        let calls = Arc::new(AtomicU64::new(0));
        let lease = Arc::new(Lease::new(Instant::now()));
        let keeper = Keeper {
            lease: Arc::clone(&lease),
            backend: Box::new(Down(Arc::clone(&calls))),
            on_error: OnError::Wait,
            meters: vec![Meter::Records(super::super::gcra::Step {
                interval: 50_000_000,
                tolerance: 0,
            })],
            notify: Arc::new(|_| {}),
            voice: Voice::new("--share test".into(), OnError::Wait, true),
            retry: Retry::new(fastrand::Rng::with_seed(5)),
        };
        let run = Duration::from_millis(1000);
        let started = Instant::now();
        let thread = std::thread::spawn(move || keeper.run());
        while started.elapsed() < run {
            lease.lock().wanted = 3;
            lease.wake.notify_one();
            std::thread::sleep(2 * MS);
        }
        lease.lock().closed = true;
        lease.wake.notify_all();
        thread.join().unwrap();
        let elapsed = started.elapsed();
        // The calls the same pauses allow in that time (one more for a
        // late close on a loaded machine).
        let mut retry = Retry::new(fastrand::Rng::with_seed(5));
        let mut at = Duration::ZERO;
        let mut allowed = 1;
        while at < elapsed {
            at += retry.failed();
            allowed += 1;
        }
        let calls = calls.load(Ordering::SeqCst);
        assert!(
            calls >= 2 && calls <= allowed,
            "{calls} calls, {allowed} allowed"
        );
        assert_eq!(lease.lock().failures, calls);
    }
}
