//! The keeper: one thread per drip ([`Keeper`]) that looks after every
//! duty ([`Duty`]) the shared state has for it in turn, each a step at a
//! time, and sleeps until one is due or its bell ([`Bell`]) is rung: the
//! global limits' lease ([`super::lease`]) and the keys' leases
//! ([`super::keys`]), each a [`Leasing`] that speaks the lease protocol
//! ([`super::protocol`]), and each shared budget's count
//! ([`super::budget`]). The leases only ever change under a short lock,
//! so admission and the writer never wait on the network.
//!
//! A [`Leasing`]'s step: when a lease wants slots or holds slots to give
//! back ([`Grants::turn`]), give back first, then reserve; put the
//! granted slots in the leases; on a state that cannot be reached, back
//! off ([`Retry`]) and, under `local`, let the leases pace alone until the
//! state answers again, then change over to the shared schedule with the
//! local pace still held for [`CHANGEOVER_NS`]; at exit give back the
//! unused slots.
//!
//! What goes back is only ever the unused tail of a grant's *last*
//! reservation, and only if no one reserved on that schedule since (the
//! state checks the reservation's number): those slots are then the
//! latest the schedule granted, and taking them back leaves it exactly as
//! if they had never been granted (or later), so no slot another drip
//! holds is granted twice, and none is pulled earlier.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SendError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::gcra::{Settlement, Weight};
use super::protocol::{expired, Ask, Back, ClockOffset, Failure, Reply, Store, Wake};
use super::voice::{OnError, Retry, Voice, BACKOFF};
use crate::sys::Unpoisoned;

/// How long the stop path waits for a keeper to give back its unused
/// slots before drip leaves without it (a hung server).
pub const GIVE_BACK_WAIT: Duration = Duration::from_millis(100);

/// How long (ns) a drip that shares again after pacing alone (`local`)
/// still holds its lone pace too: the longest pause between two attempts
/// of a drip pacing alone (2 s) and one call's timeout (1 s). By then
/// every drip that paced alone through the same outage has asked again
/// and shares too, so the drips change over together: while any of them
/// paces alone, each sends at most its share (rate / `--share-peers`).
pub const CHANGEOVER_NS: u64 = BACKOFF.max_ns + 1_000_000_000;

/// How narrow (ns) the clocks' offset must be for a grant's slots to be
/// placed without reading the shared clock again ([`Leasing::settle_offset`]):
/// a millisecond, within the least late allowance
/// ([`super::protocol::late_ns`], 2 ms), so a slot placed late by the
/// offset still goes out on its turn.
const SETTLED_NS: i64 = 1_000_000;

/// The most calls (the hello and reservations among them) that narrow the
/// clocks' offset before a grant's slots are placed without another
/// reading, at the start or after the shared clock started again; a link
/// whose round trip is longer than [`SETTLED_NS`] costs that many calls
/// once.
const SETTLING_CALLS: u32 = 5;

/// How a lease paces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// From the lease.
    #[default]
    Shared,
    /// Alone, at the configured rate divided by the peers (`local`).
    Local,
    /// From the lease and, until this time (ns on drip's clock), at the
    /// lone pace too: the change-over after `local`.
    Changing(u64),
}

impl Mode {
    /// Whether the lone pace applies at `now` (alone, or changing over).
    pub fn paced_alone(self, now: u64) -> bool {
        match self {
            Mode::Shared => false,
            Mode::Local => true,
            Mode::Changing(until) => now < until,
        }
    }
}

/// What every lease keeps besides its slots: its mode and the counters.
#[derive(Debug, Default)]
pub(crate) struct Status {
    pub(crate) mode: Mode,
    pub(crate) closed: bool,
    /// The keeper's round trip (ns, smoothed).
    pub(crate) rtt: u64,
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

/// Slots one grant wants: up to `want`, for records of `sizes` bytes,
/// the first no earlier than `at` and each next `every` ns later (drip's
/// clock, ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRequest {
    pub(crate) key: Option<Box<[u8]>>,
    pub(crate) want: u64,
    pub(crate) sizes: Vec<Weight>,
    pub(crate) at: u64,
    pub(crate) every: u64,
    /// Slots only when the first is due within this long (ns), as
    /// [`Ask::within`].
    pub(crate) within: Option<i64>,
}

impl SlotRequest {
    /// The ask of a call made at `now`.
    pub(crate) fn ask_at(&self, now: u64) -> Ask<'_> {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Ask {
            key: self.key.as_deref(),
            want: self.want,
            sizes: &self.sizes,
            after: int(self.at.saturating_sub(now)),
            every: int(self.every),
            within: self.within,
        }
    }
}

/// Unused slots going back: the tail of one grant's last reservation
/// (`seq`), `count` slots from the one at `first_unused` (shared ns,
/// reserved for `size` bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Return {
    pub(crate) key: Option<Box<[u8]>>,
    pub(crate) seq: u64,
    pub(crate) first_unused: i64,
    pub(crate) size: Weight,
    pub(crate) count: u64,
}

impl Return {
    fn back(&self) -> Back<'_> {
        Back {
            key: self.key.as_deref(),
            seq: self.seq,
            first_unused: self.first_unused,
            size: self.size,
        }
    }
}

/// What the keeper does next.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// Slots to give back first.
    pub(crate) returns: Vec<Return>,
    /// Then slots to reserve.
    pub(crate) requests: Vec<SlotRequest>,
    /// Records to settle (`--settle`), before the reservation.
    pub(crate) settlements: Vec<Settlement>,
}

/// One kind of grant as the keeper sees it: the global limits' lease, or
/// the keys' leases.
pub(crate) trait Grants: Send + 'static {
    /// The mode and counters.
    fn status(&mut self) -> &mut Status;
    /// What to do at `now` (drip's clock, ns), `since_call` after the last
    /// call: a turn, or how long to wait before looking again.
    fn turn(&mut self, now: u64, since_call: Option<Duration>) -> Result<Turn, Duration>;
    /// How far beyond the first slot one reservation reaches (ns).
    fn horizon(&self) -> i64;
    /// Put the slots of `reply` for `requests` in the leases; `base` is the
    /// reply's `now` on drip's clock.
    fn take(&mut self, requests: &[SlotRequest], reply: Reply, base: u64);
    /// Slots that did not go back (someone reserved since): lost (the
    /// global lease keeps those still usable, [`super::lease`]).
    fn refused(&mut self, returns: &[Return]) {
        let st = self.status();
        st.forfeited += returns.iter().map(|r| r.count).sum::<u64>();
    }
    /// At exit: the unused tail of each grant's last reservation.
    fn unused(&mut self) -> Vec<Return>;
    /// Settlements the state could not be reached for: kept for the next
    /// turn (the global limits' lease; the keys' settle nothing).
    fn unsettled(&mut self, settlements: Vec<Settlement>) {
        let _ = settlements;
    }
    /// At exit: the settlements not sent yet.
    fn settlements(&mut self) -> Vec<Settlement> {
        Vec::new()
    }
    /// Pace alone from `now` on (`local`).
    fn go_local(&mut self, now: u64);
    /// Follow `limits` (the global ones) and `key` (the limits per key),
    /// changed by `drip ctl` for every drip on the state, from now on;
    /// `false` when this kind of grant cannot (the limits it serves are
    /// gone).
    /// `tags` are the global limits' ([`super::gcra::spec_tagged`]).
    fn adopt(
        &mut self,
        limits: &[crate::schedule::Limit],
        tags: &[Option<String>],
        key: Option<&crate::keyed::KeyTable>,
    ) -> bool {
        let _ = (limits, tags, key);
        false
    }
}

/// The leases of one kind of grant under a lock, and the keeper's bell.
#[derive(Debug)]
pub(crate) struct Lease<G> {
    pub(crate) state: Mutex<G>,
    pub(crate) wake: Arc<Bell>,
    /// drip's clock origin.
    pub(crate) origin: Instant,
}

impl<G: Grants> Lease<G> {
    /// A lease with a bell of its own (the tests').
    #[cfg(test)]
    pub(crate) fn new(grants: G, origin: Instant) -> Lease<G> {
        Lease::with_bell(grants, origin, Arc::default())
    }

    /// A lease whose changes ring `bell`, the keeper's of this drip.
    pub(crate) fn with_bell(grants: G, origin: Instant, bell: Arc<Bell>) -> Lease<G> {
        Lease {
            state: Mutex::new(grants),
            wake: bell,
            origin,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, G> {
        self.state.lock().unpoisoned()
    }

    /// drip's clock (ns since `origin`).
    pub(crate) fn now(&self) -> u64 {
        crate::sys::ns_since(self.origin)
    }

    /// Stop its keeper: it gives back what is unused and ends.
    pub(crate) fn close(&self) {
        self.lock().status().closed = true;
        self.wake.notify_all();
    }
}

/// What wakes the keeper's thread: rung by every side that wants it
/// (records wanting slots, a budget asking for more, a close), so that one
/// thread waits for all its duties at once. It counts its rings: one rung
/// between the keeper's look at its duties and its wait is not missed.
#[derive(Debug, Default)]
pub(crate) struct Bell {
    rings: Mutex<u64>,
    rung: Condvar,
}

impl Bell {
    /// Ring (named as a `Condvar`'s, for the leases' sides).
    pub(crate) fn notify_one(&self) {
        self.notify_all();
    }

    /// Ring.
    pub(crate) fn notify_all(&self) {
        *self.rings.lock().unpoisoned() += 1;
        self.rung.notify_all();
    }

    /// The rings so far.
    fn rings(&self) -> u64 {
        *self.rings.lock().unpoisoned()
    }

    /// Wait until it rings after `seen` rings, at most `d`.
    fn wait(&self, seen: u64, d: Duration) {
        let rings = self.rings.lock().unpoisoned();
        drop(
            self.rung
                .wait_timeout_while(rings, d, |r| *r == seen)
                .unpoisoned(),
        );
    }
}

/// What a duty says when the keeper looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Poll {
    /// It did something (a call): look again at once.
    Worked,
    /// Nothing to do for this long at most (or until the bell rings).
    Idle(Duration),
    /// It is over: never look again.
    Done,
}

/// One duty of the keeper: one step of it at each look, never a wait
/// (but for the calls to the shared state).
pub(crate) trait Duty: Send {
    /// Do what is due now, if anything.
    fn poll(&mut self) -> Poll;
}

/// A duty given to the keeper, and whether it is over.
type Given = (Box<dyn Duty>, Arc<AtomicBool>);

/// The losses of the shared state one drip saw, whichever feature saw
/// them: the global limits (a state found fresh, or unreadable), a
/// budget's count and the job leases (each an epoch not the one the drip
/// knew). One loss (a `FLUSHALL`, the state files removed) is seen by
/// each feature at its next call, and happened after that feature's
/// answer before: a loss a feature finds since its last answer that
/// another feature's loss could be (their spans since their last answers
/// meet) is that loss, said once (by the first to find it) and counted
/// once (`state lost`).
#[derive(Debug, Default)]
pub(crate) struct Losses {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Losses counted.
    count: u64,
    /// Each feature's last answer.
    heard: Vec<(&'static str, Instant)>,
    /// The span the last loss counted happened in.
    last: Option<(Instant, Instant)>,
}

impl Losses {
    /// `feature`'s state answered, `lost` or not: whether that is a loss
    /// not yet counted, then counted; its finder says it.
    pub(crate) fn heard(&self, feature: &'static str, lost: bool) -> bool {
        let now = Instant::now();
        let mut seen = self.seen.lock().unpoisoned();
        let since = match seen.heard.iter_mut().find(|(f, _)| *f == feature) {
            Some((_, at)) => Some(std::mem::replace(at, now)),
            None => {
                seen.heard.push((feature, now));
                None
            }
        };
        if !lost {
            return false;
        }
        // A feature that had no answer before knew no state to lose but
        // a garbled one: its loss is at this call.
        let from = since.unwrap_or(now);
        match seen.last {
            Some((f, t)) if from < t || (from == t && f == t) => {
                seen.last = Some((f.max(from), t.min(now)));
                false
            }
            _ => {
                seen.count += 1;
                seen.last = Some((from, now));
                true
            }
        }
    }

    /// The losses counted.
    pub(crate) fn count(&self) -> u64 {
        self.seen.lock().unpoisoned().count
    }
}

/// How long the keeper sleeps at most with nothing due.
const IDLE: Duration = Duration::from_secs(1);

/// The keeper of one drip: one thread, started with its first duty, that
/// looks after each of its duties in turn and sleeps until one is due or
/// the bell rings; it ends once no duty is left and no one can add one.
#[derive(Debug, Default)]
pub struct Keeper {
    bell: Arc<Bell>,
    losses: Arc<Losses>,
    added: Mutex<Vec<Given>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for dyn Duty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Duty")
    }
}

/// The keepers of this process, by NAME: the one [`super::open`] made for
/// a NAME is the one its job leases (opened later, by the jobs' pool)
/// give their renewal to.
static KEEPERS: Mutex<Vec<(String, Weak<Keeper>)>> = Mutex::new(Vec::new());

impl Keeper {
    /// The keeper of the drip sharing `name`: the one made for it while it
    /// lives, else a new one.
    pub(crate) fn of(name: &str) -> Arc<Keeper> {
        let mut keepers = KEEPERS.lock().unpoisoned();
        keepers.retain(|(_, held)| held.strong_count() > 0);
        let held = keepers.iter().find(|(n, _)| n == name);
        if let Some(keeper) = held.and_then(|(_, held)| held.upgrade()) {
            return keeper;
        }
        let keeper = Arc::new(Keeper::default());
        keepers.push((name.to_string(), Arc::downgrade(&keeper)));
        keeper
    }

    /// The keeper's bell, for what its duties serve to ring.
    pub(crate) fn bell(&self) -> Arc<Bell> {
        Arc::clone(&self.bell)
    }

    /// The losses of the shared state its duties saw.
    pub(crate) fn losses(&self) -> Arc<Losses> {
        Arc::clone(&self.losses)
    }

    /// Look after `duty` from now on, the thread started if it is not
    /// running; what is returned says when it is over.
    ///
    /// # Errors
    /// No thread can be started.
    pub(crate) fn add(self: &Arc<Self>, duty: Box<dyn Duty>) -> std::io::Result<Arc<AtomicBool>> {
        let done = Arc::new(AtomicBool::new(false));
        self.added
            .lock()
            .unpoisoned()
            .push((duty, Arc::clone(&done)));
        let mut thread = self.thread.lock().unpoisoned();
        if thread.as_ref().map_or(true, JoinHandle::is_finished) {
            let keeper = Arc::clone(self);
            *thread = Some(crate::sys::spawn("drip-keeper", move || keeper.keep())?);
        }
        drop(thread);
        self.bell.notify_all();
        Ok(done)
    }

    /// The thread's loop.
    fn keep(self: Arc<Self>) {
        let mut duties: Vec<Given> = Vec::new();
        loop {
            let seen = self.bell.rings();
            duties.append(&mut self.added.lock().unpoisoned());
            let (mut worked, mut wait) = (false, IDLE);
            duties.retain_mut(|(duty, done)| match duty.poll() {
                Poll::Worked => {
                    worked = true;
                    true
                }
                Poll::Idle(d) => {
                    wait = wait.min(d);
                    true
                }
                Poll::Done => {
                    done.store(true, Ordering::SeqCst);
                    false
                }
            });
            if duties.is_empty() {
                // Under the lock `add` takes: a duty added from now on
                // starts a thread of its own.
                let mut thread = self.thread.lock().unpoisoned();
                if self.added.lock().unpoisoned().is_empty() {
                    *thread = None;
                    return;
                }
                continue;
            }
            if !worked {
                self.bell.wait(seen, wait);
            }
        }
    }
}

impl<G: Grants> Duty for Leasing<G> {
    fn poll(&mut self) -> Poll {
        self.step()
    }
}

/// A [`Leasing`] whose first step is its hello, the outcome sent on
/// `answer` while the start still waits for it (a refusal no one waits
/// for any more is [`Leasing::fatal`]): a refusal waited for stops drip
/// before it reads.
pub(crate) struct Greeting<G> {
    pub(crate) leasing: Leasing<G>,
    pub(crate) answer: Option<SyncSender<Result<(), Failure>>>,
}

impl<G: Grants> Duty for Greeting<G> {
    fn poll(&mut self) -> Poll {
        let Some(answer) = self.answer.take() else {
            return self.leasing.step();
        };
        let greeted = self.leasing.hello();
        let refused = greeted.is_err();
        match answer.send(greeted) {
            Ok(()) if refused => Poll::Done,
            Err(SendError(Err(failure))) => {
                self.leasing.fatal(failure);
                Poll::Done
            }
            _ => Poll::Worked,
        }
    }
}

/// The keeper's duty for one kind of grant.
pub(crate) struct Leasing<G> {
    pub(crate) lease: Arc<Lease<G>>,
    pub(crate) store: Box<dyn Store>,
    pub(crate) on_error: OnError,
    /// Called when slots arrive (wakes the writer) and when drip must stop.
    pub(crate) notify: Wake,
    /// What it says on stderr.
    pub(crate) voice: Voice,
    /// The pause before the next attempt after a failed one.
    pub(crate) retry: Retry,
    /// Where a shared clock elsewhere (Redis's) stands against drip's.
    pub(crate) offset: ClockOffset,
    /// The limits the store asks with (their spec), as `drip ctl` changed
    /// them.
    pub(crate) spec: String,
    /// The spec this drip last said it follows, shared by its keepers
    /// (global and per key), so that a change is told once.
    pub(crate) told: Arc<Mutex<String>>,
    /// When the last reservation was sent.
    pub(crate) last_call: Option<Instant>,
    /// Paused until then (backing off), and whether to ask the state
    /// again after (pacing alone, `local`).
    pub(crate) paused: Option<(Instant, bool)>,
    /// The drip's losses, which a loss of the global limits' state is
    /// counted in and said through (the other features see it too);
    /// `None`: counted in the lease (the limits per key).
    pub(crate) losses: Option<Arc<Losses>>,
}

impl<G: Grants> Leasing<G> {
    /// Check the stored limits before anything is read. An unreachable
    /// state is fatal only under `fail`; otherwise it is reported as a
    /// failed call is.
    pub(crate) fn hello(&mut self) -> Result<(), Failure> {
        match self.greet() {
            Ok(fresh) => {
                self.note_fresh(fresh);
                Ok(())
            }
            Err(Failure::Unreachable(why)) if self.on_error != OnError::Fail => {
                self.lease.lock().status().failures += 1;
                self.unreachable(&why);
                Ok(())
            }
            Err(failure) => Err(failure),
        }
    }

    /// Run alone until the lease is closed, then give back what is
    /// unused: the keeper's loop over this one duty (the tests').
    #[cfg(test)]
    pub(crate) fn run(mut self) {
        let bell = Arc::clone(&self.lease.wake);
        loop {
            let seen = bell.rings();
            match self.step() {
                Poll::Worked => {}
                Poll::Idle(d) => bell.wait(seen, d),
                Poll::Done => return,
            }
        }
    }

    /// One step: after a pause, ask the state again if pacing alone;
    /// pacing alone, pause first; else the lease's turn, if it has one.
    fn step(&mut self) -> Poll {
        if let Some((until, rejoin)) = self.paused {
            let closed = self.lease.lock().status().closed;
            let left = until.saturating_duration_since(Instant::now());
            if !closed && !left.is_zero() {
                return Poll::Idle(left);
            }
            self.paused = None;
            if rejoin {
                if closed || !self.rejoin() {
                    self.finish();
                    return Poll::Done;
                }
                return Poll::Worked;
            }
        }
        if self.lease.lock().status().mode == Mode::Local {
            let pause = self.retry.failed();
            self.paused = Some((Instant::now() + pause, true));
            return Poll::Worked;
        }
        let turn = {
            let mut g = self.lease.lock();
            if g.status().closed {
                drop(g);
                self.finish();
                return Poll::Done;
            }
            let now = self.lease.now();
            match g.turn(now, self.last_call.map(|t| t.elapsed())) {
                Ok(turn) => turn,
                Err(wait) => return Poll::Idle(wait),
            }
        };
        if !turn.returns.is_empty() {
            self.give_back(&turn.returns);
        }
        if !turn.settlements.is_empty() {
            match self.settle(turn.settlements) {
                Err(failure) => {
                    self.fatal(failure);
                    return Poll::Done;
                }
                Ok(false) => return Poll::Worked,
                Ok(true) => {}
            }
        }
        if turn.requests.is_empty() {
            return Poll::Worked;
        }
        self.last_call = Some(Instant::now());
        if let Err(failure) = self.reserve(&turn.requests) {
            self.fatal(failure);
            return Poll::Done;
        }
        Poll::Worked
    }

    /// The lease is closed: give back what is unused, and send the
    /// settlements not sent yet.
    fn finish(&mut self) {
        let unused = self.lease.lock().unused();
        if !unused.is_empty() {
            self.give_back(&unused);
        }
        let left = self.lease.lock().settlements();
        if !left.is_empty() && self.store.settle(&left).is_err() && !self.voice.quiet {
            let (n, s) = (left.len(), if left.len() == 1 { "" } else { "s" });
            eprintln!(
                "drip: {}: {n} settlement{s} of records did not reach the shared state at exit (what they gave back or charged is lost)",
                self.voice.name,
            );
        }
    }

    /// Send `settlements` to the state. A failure that stops drip is
    /// returned; when the state cannot be reached they are kept for the
    /// next turn and the failure is reported as a reservation's is
    /// (`Ok(false)`: paused on or pacing alone, no reservation now).
    fn settle(&mut self, settlements: Vec<Settlement>) -> Result<bool, Failure> {
        let failure = match self.store.settle(&settlements) {
            Ok(()) => return Ok(true),
            Err(failure) => failure,
        };
        self.lease.lock().unsettled(settlements);
        match failure {
            Failure::Changed(theirs) if self.follow(&theirs) => Ok(false),
            Failure::Unreachable(why) => self.failed_call(why).map(|()| false),
            failure => Err(failure),
        }
    }

    /// A call found the state out of reach (`why`): counted; fatal under
    /// `fail`; otherwise reported, and paused on under `wait` (under
    /// `local`, [`Leasing::rejoin`] pauses).
    fn failed_call(&mut self, why: String) -> Result<(), Failure> {
        self.lease.lock().status().failures += 1;
        if self.on_error == OnError::Fail {
            return Err(Failure::Unreachable(why));
        }
        self.unreachable(&why);
        if self.on_error == OnError::Wait {
            let pause = self.retry.failed();
            self.pause(pause);
        }
        Ok(())
    }

    /// One reservation for `requests`. A failure that stops drip is
    /// returned; an unreachable state is reported, and paused on under
    /// `wait` (under `local`, [`Leasing::rejoin`] pauses).
    fn reserve(&mut self, requests: &[SlotRequest]) -> Result<(), Failure> {
        let now = self.lease.now();
        let asks: Vec<Ask> = requests.iter().map(|r| r.ask_at(now)).collect();
        let horizon = self.lease.lock().horizon();
        let started = Instant::now();
        let sent = self.lease.now();
        match self.store.reserve(&asks, horizon) {
            Ok(reply) => {
                let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                {
                    let mut g = self.lease.lock();
                    let st = g.status();
                    st.rtt = if st.rtt == 0 {
                        took
                    } else {
                        (st.rtt * 7 + took) / 8
                    };
                }
                self.retry.succeeded();
                self.voice.reached();
                self.take(requests, reply, sent);
                Ok(())
            }
            Err(Failure::Changed(theirs)) if self.follow(&theirs) => Ok(()),
            Err(failure @ (Failure::Mismatch(_) | Failure::Changed(_) | Failure::Fatal(_))) => {
                Err(failure)
            }
            Err(Failure::Unreachable(why)) => self.failed_call(why),
        }
    }

    /// Pacing alone (`local`), paused as the backoff says: ask the state
    /// whether it answers; if it does, change over to the shared schedule
    /// (and say so). Returns `false` once stopped (the stored limits
    /// differ now).
    fn rejoin(&mut self) -> bool {
        match self.greet() {
            Ok(fresh) => {
                self.retry.succeeded();
                self.voice.reached();
                self.note_fresh(fresh);
                let now = self.lease.now();
                self.lease.lock().status().mode = Mode::Changing(now + CHANGEOVER_NS);
                (self.notify)(false);
                true
            }
            Err(Failure::Unreachable(why)) => {
                self.voice.unreachable(&why);
                self.lease.lock().status().failures += 1;
                true
            }
            Err(failure) => {
                self.fatal(failure);
                false
            }
        }
    }

    /// The store's hello, again after following limits `drip ctl`
    /// changed, timed: the shared clock's time it read narrows the clocks'
    /// offset ([`Leasing::read_clock`]). Returns whether the state was
    /// fresh.
    fn greet(&mut self) -> Result<bool, Failure> {
        loop {
            match self.read_clock() {
                Err(Failure::Changed(theirs)) if self.follow(&theirs) => {}
                hello => return hello,
            }
        }
    }

    /// The store's hello, timed on drip's clock: the shared clock's time
    /// it read, for a clock elsewhere, narrows the clocks' offset as a
    /// reservation's does. Returns whether the state was fresh.
    fn read_clock(&mut self) -> Result<bool, Failure> {
        let sent = self.lease.now();
        let (fresh, shared) = self.store.hello_timed()?;
        if let Some(shared) = shared {
            self.offset.observe(shared, sent, self.lease.now());
        }
        Ok(fresh)
    }

    /// The stored limits are `theirs` (a spec), put there by `drip ctl`:
    /// follow them from now on, if this kind of grant can (the global
    /// limits' lease), and say so (unless quiet). Returns whether it
    /// does; if not, they are a mismatch that stops drip.
    fn follow(&mut self, theirs: &str) -> bool {
        let Some((limits, key)) = super::key_table::split_spec(theirs) else {
            return false;
        };
        let tags = super::gcra::tags_of(theirs);
        if !self.lease.lock().adopt(&limits, &tags, key.as_ref()) {
            return false;
        }
        let meters = super::gcra::meters(&limits, &tags);
        let mut told = self.told.lock().unpoisoned();
        if !self.voice.quiet && *told != theirs {
            let name = self.voice.name.trim_start_matches("--share ");
            let name = name.trim_end_matches(" (limits per key)");
            eprintln!("drip: {}", super::voice::told(name, &self.spec, theirs));
        }
        theirs.clone_into(&mut told);
        drop(told);
        self.spec = theirs.to_string();
        self.store
            .adopt(self.spec.clone(), meters, key.map(Arc::new));
        (self.notify)(false);
        true
    }

    /// The state cannot be reached (not under `fail`): say so, and under
    /// `local` pace alone.
    fn unreachable(&mut self, why: &str) {
        self.voice.unreachable(why);
        if self.on_error == OnError::Local {
            let now = self.lease.now();
            self.lease.lock().go_local(now);
            (self.notify)(false);
        }
    }

    /// A state found `fresh` after this drip reserved from it, and before
    /// it could have expired, was lost (a flush, a restart), and so was
    /// one the store could not read, at any time: count it and say so
    /// (without the lease's lock: a stalled stderr must not hold up the
    /// writer, which takes it for every record).
    fn note_fresh(&mut self, fresh: bool) {
        if let Some(why) = self.store.unreadable() {
            if self.new_loss(true) {
                self.voice.unreadable(&why);
            }
            return;
        }
        let now = self.lease.now();
        let lost = fresh && {
            let mut g = self.lease.lock();
            let st = g.status();
            st.reservations > 0 && !expired(st.reserved_until, now)
        };
        if self.new_loss(lost) {
            self.voice.lost();
        }
    }

    /// The state answered, `lost` or not: a loss is counted (in the
    /// drip's losses, or the lease's counter); whether to say it (not
    /// when another feature found the same loss first).
    fn new_loss(&mut self, lost: bool) -> bool {
        match &self.losses {
            Some(losses) => losses.heard("limits", lost),
            None => {
                if lost {
                    self.lease.lock().status().lost += 1;
                }
                lost
            }
        }
    }

    /// Put the granted slots of a call sent at `sent` (drip's clock) in
    /// the leases, on drip's clock, by the offset of the two clocks
    /// ([`ClockOffset`]: never earlier than the shared schedule says). When
    /// the shared clock is this host's, its reading now, between two of
    /// drip's, narrows the offset to the closest such pair seen: a keeper
    /// preempted between the two readings does not put the grant late by
    /// that long (onto the next drip's slots, beyond the late allowance).
    /// Otherwise the calls' round trips narrow it (the hello's too, and
    /// more readings of the clock while it is still wide at the start:
    /// [`Leasing::settle_offset`]), so a slot is later by less than the
    /// shortest round trip, not by this answer's delay, the first
    /// grant's too.
    fn take(&mut self, requests: &[SlotRequest], reply: Reply, sent: u64) {
        let before = self.lease.now();
        let base = match self.store.host_clock() {
            Some(shared_now) => {
                let at_now = self.offset.observe(shared_now, before, self.lease.now());
                let since_reply = shared_now.saturating_sub(reply.now).max(0).unsigned_abs();
                at_now.saturating_sub(since_reply)
            }
            None => {
                self.offset.observe(reply.now, sent, self.lease.now());
                self.settle_offset();
                self.offset.place(reply.now)
            }
        };
        self.note_fresh(reply.fresh);
        {
            let mut g = self.lease.lock();
            g.take(requests, reply, base);
            let st = g.status();
            st.reservations += 1;
            if st.mode == Mode::Local {
                st.mode = Mode::Shared;
            }
        }
        (self.notify)(false);
    }

    /// While the clocks' offset is wider than [`SETTLED_NS`], at the start
    /// or after the shared clock started again (a restart, a new epoch),
    /// read the shared clock again (a hello), up to [`SETTLING_CALLS`]
    /// calls: a first answer read late (a keeper woken late on a loaded
    /// machine) would otherwise put the first grant's slots late by that
    /// long, onto the next drip's. A failed reading is left to the next
    /// reservation.
    fn settle_offset(&mut self) {
        for _ in 0..SETTLING_CALLS {
            if !self.offset.unsettled(SETTLED_NS, SETTLING_CALLS) {
                break;
            }
            match self.read_clock() {
                Ok(fresh) => self.note_fresh(fresh),
                Err(_) => break,
            }
        }
    }

    /// Give `returns` back; those refused (someone reserved since, or the
    /// state cannot be reached) are lost.
    fn give_back(&mut self, returns: &[Return]) {
        let backs: Vec<Back> = returns.iter().map(Return::back).collect();
        match self.store.give_back(&backs) {
            Ok(given) => {
                self.note_fresh(false);
                let refused: Vec<Return> = returns
                    .iter()
                    .zip(given.iter().chain(std::iter::repeat(&false)))
                    .filter(|(_, &back)| !back)
                    .map(|(r, _)| r.clone())
                    .collect();
                self.lease.lock().refused(&refused);
            }
            Err(_) => self.lease.lock().refused(returns),
        }
    }

    /// Pause for `d` (backing off), or until the lease is closed. The
    /// writer's wake-ups (records wanting slots) do not cut it short: that
    /// would retry at the writer's pace instead of backing off.
    fn pause(&mut self, d: Duration) {
        self.paused = Some((Instant::now() + d, false));
    }

    fn fatal(&self, failure: Failure) {
        self.lease.lock().status().fatal = Some(failure);
        (self.notify)(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::gcra::{Gcra, Meter, Step};
    use crate::shared::lease::GlobalLease;
    use crate::shared::protocol::{ahead, chunk, fitting, HORIZON};
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU64, Ordering};

    const MS: Duration = Duration::from_millis(1);

    /// One loss found by every feature at its next call is one loss,
    /// said (by the first) and counted once; a loss a feature finds after
    /// its own answer since the last one counted is another.
    #[test]
    fn a_loss_every_feature_finds_is_counted_once() {
        let losses = Losses::default();
        for f in ["limits", "budget", "jobs"] {
            assert!(!losses.heard(f, false));
        }
        // The state is lost: each feature finds it at its next call.
        assert!(losses.heard("jobs", true));
        assert!(!losses.heard("limits", true));
        assert!(!losses.heard("budget", true));
        assert_eq!(losses.count(), 1);
        // The limits answered since: a loss they find now is another.
        assert!(!losses.heard("limits", false));
        std::thread::sleep(MS);
        assert!(losses.heard("limits", true));
        // The budget had not answered since the first: the same as one
        // of the two, not a third.
        assert!(!losses.heard("budget", true));
        assert_eq!(losses.count(), 2);
    }

    /// A keeper of a records lease of one slot per `interval` (ns) on
    /// drip's clock from `origin`, asking `store`, on `on_error`; and its
    /// lease.
    fn keeper_over(
        store: Box<dyn Store>,
        interval: i64,
        on_error: OnError,
        origin: Instant,
    ) -> (Arc<Lease<GlobalLease>>, Leasing<GlobalLease>) {
        let meters = vec![Meter::Records(Step {
            interval,
            tolerance: 0,
        })];
        let lease = Arc::new(Lease::new(GlobalLease::new(meters), origin));
        let keeper = Leasing {
            lease: Arc::clone(&lease),
            store,
            on_error,
            notify: Arc::new(|_| {}),
            voice: Voice::new("--share test".into(), "", on_error, true),
            retry: Retry::new(fastrand::Rng::with_seed(5)),
            offset: ClockOffset::default(),
            spec: String::new(),
            told: Arc::default(),
            last_call: None,
            paused: None,
            losses: None,
        };
        (lease, keeper)
    }

    /// The request of one record for the global lease, due now.
    fn one_record() -> SlotRequest {
        SlotRequest {
            key: None,
            want: 1,
            sizes: Vec::new(),
            at: 0,
            every: 0,
            within: None,
        }
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
                    let want = fitting(&meters, 10_000, &[0u64; 0], chunk(0));
                    let slots = state.reserve_sized(&meters, now, want, &[0u64; 0], HORIZON);
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

    /// One keeper thread looks after every duty given to it, each until
    /// it is done, waking on its bell; once none is left its thread ends,
    /// and a duty given after that starts it again.
    #[test]
    fn one_keeper_serves_every_duty_it_is_given() {
        struct Steps(Arc<AtomicU64>, u64);
        impl Duty for Steps {
            fn poll(&mut self) -> Poll {
                if self.0.fetch_add(1, Ordering::SeqCst) + 1 >= self.1 {
                    Poll::Done
                } else {
                    Poll::Idle(Duration::from_secs(60))
                }
            }
        }
        let keeper = Arc::new(Keeper::default());
        let wait_done = |done: &AtomicBool| {
            let started = Instant::now();
            while !done.load(Ordering::SeqCst) {
                assert!(started.elapsed() < Duration::from_secs(10));
                keeper.bell().notify_all();
                std::thread::sleep(MS);
            }
        };
        let (a, b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let done_a = keeper.add(Box::new(Steps(Arc::clone(&a), 3))).unwrap();
        let done_b = keeper.add(Box::new(Steps(Arc::clone(&b), 5))).unwrap();
        wait_done(&done_a);
        wait_done(&done_b);
        assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (3, 5));
        let started = Instant::now();
        while keeper.thread.lock().unpoisoned().is_some() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the thread ended"
            );
            std::thread::sleep(MS);
        }
        let c = Arc::new(AtomicU64::new(0));
        let done_c = keeper.add(Box::new(Steps(Arc::clone(&c), 2))).unwrap();
        wait_done(&done_c);
        assert_eq!(c.load(Ordering::SeqCst), 2);
    }

    /// A state that is never reached, counting the calls.
    struct Down(Arc<AtomicU64>);

    impl Store for Down {
        fn hello(&mut self) -> Result<bool, Failure> {
            Err(Failure::Unreachable("down".into()))
        }
        fn reserve(&mut self, _: &[Ask<'_>], _: i64) -> Result<Reply, Failure> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(Failure::Unreachable("down".into()))
        }
        fn give_back(&mut self, _: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
            Err(Failure::Unreachable("down".into()))
        }
    }

    /// The writer wakes the keeper whenever records want slots (every
    /// 50 ms while the lease is empty; here every 2 ms): the keeper still
    /// pauses for its whole backoff between calls.
    #[test]
    fn the_writers_wake_ups_do_not_cut_the_backoff_short() {
        let calls = Arc::new(AtomicU64::new(0));
        let (lease, keeper) = keeper_over(
            Box::new(Down(Arc::clone(&calls))),
            50_000_000,
            OnError::Wait,
            Instant::now(),
        );
        let run = Duration::from_millis(1000);
        let started = Instant::now();
        let thread = std::thread::spawn(move || keeper.run());
        while started.elapsed() < run {
            lease.lock().wanted = 3;
            lease.wake.notify_one();
            std::thread::sleep(2 * MS);
        }
        lease.close();
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
        assert_eq!(lease.lock().status.failures, calls);
    }

    /// A state out of reach for its first `down` settling calls, then
    /// keeping what it was sent to settle.
    struct Flaky {
        down: u64,
        settled: Arc<Mutex<Vec<Settlement>>>,
    }

    impl Store for Flaky {
        fn hello(&mut self) -> Result<bool, Failure> {
            Ok(false)
        }
        fn reserve(&mut self, _: &[Ask<'_>], _: i64) -> Result<Reply, Failure> {
            Err(Failure::Unreachable("down".into()))
        }
        fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
            Ok(vec![true; backs.len()])
        }
        fn settle(&mut self, settlements: &[Settlement]) -> Result<(), Failure> {
            if self.down > 0 {
                self.down -= 1;
                return Err(Failure::Unreachable("down".into()));
            }
            self.settled.lock().unwrap().extend_from_slice(settlements);
            Ok(())
        }
    }

    /// Settlements the state cannot be reached for are kept, and sent,
    /// in order and once each, when it answers again (those made
    /// meanwhile with them); each failed call counted.
    #[test]
    fn settlements_wait_for_a_state_out_of_reach() {
        let settled = Arc::new(Mutex::new(Vec::new()));
        let store = Flaky {
            down: 2,
            settled: Arc::clone(&settled),
        };
        let (lease, keeper) =
            keeper_over(Box::new(store), 1_000_000, OnError::Wait, Instant::now());
        let one = |back: u64| Settlement {
            back: back.into(),
            life: 1,
            ..Settlement::default()
        };
        lease.lock().settle(one(1));
        lease.lock().settle(one(2));
        let thread = std::thread::spawn(move || keeper.run());
        lease.wake.notify_one();
        std::thread::sleep(50 * MS);
        lease.lock().settle(one(3));
        lease.wake.notify_one();
        let began = Instant::now();
        while settled.lock().unwrap().len() < 3 && began.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(10 * MS);
        }
        lease.close();
        thread.join().unwrap();
        let backs: Vec<u64> = settled
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.back.0[0])
            .collect();
        assert_eq!(backs, [1, 2, 3]);
        assert_eq!(lease.lock().status.failures, 2);
    }

    /// A state elsewhere (Redis) whose clock is drip's plus 5 s; the
    /// answer to its second call is read 40 ms after it read its clock (a
    /// keeper woken late).
    struct Far {
        origin: Instant,
        calls: u64,
    }

    impl Store for Far {
        fn hello(&mut self) -> Result<bool, Failure> {
            Ok(false)
        }
        fn reserve(&mut self, _: &[Ask<'_>], _: i64) -> Result<Reply, Failure> {
            self.calls += 1;
            let now = self.origin.elapsed().as_nanos() as i64 + 5_000_000_000;
            if self.calls == 2 {
                std::thread::sleep(40 * MS);
            }
            Ok(Reply {
                now,
                fresh: false,
                grants: vec![crate::shared::protocol::Grant {
                    seq: self.calls,
                    slots: vec![0],
                }],
                ..Reply::default()
            })
        }
        fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
            Ok(vec![true; backs.len()])
        }
    }

    /// A slot from a state elsewhere goes on drip's clock where the
    /// state's clock put it, however late its answer was read: the
    /// offset of the clocks that an earlier call's short round trip bounds
    /// places it, not the time the answer was read (that would put it
    /// 40 ms late, onto the next drip's slots).
    #[test]
    fn a_slot_is_placed_by_the_clocks_not_by_a_late_answer() {
        let origin = Instant::now();
        let store = Box::new(Far { origin, calls: 0 });
        let (lease, mut keeper) = keeper_over(store, 1_000_000, OnError::Wait, origin);
        // Two records wait for the two slots.
        lease.lock().wanted = 2;
        let request = one_record();
        keeper.reserve(std::slice::from_ref(&request)).unwrap();
        std::thread::sleep(10 * MS);
        let before = lease.now();
        keeper.reserve(std::slice::from_ref(&request)).unwrap();
        let at = lease.lock().held.slots[1].at;
        assert!(at >= before, "{at} before {before}");
        assert!(
            at < before + 30_000_000,
            "{} ms late",
            (at - before) / 1_000_000
        );
    }

    /// A state elsewhere (Redis) whose clock is drip's plus 5 s; the
    /// answers to its calls (hellos and reservations, in turn) are read
    /// `delays[i]` after it read its clock (a keeper woken late), none
    /// after those.
    struct Delayed {
        origin: Instant,
        delays: VecDeque<Duration>,
    }

    impl Delayed {
        /// The clock's now, the answer then read after the call's delay.
        fn now(&mut self) -> i64 {
            let now = self.origin.elapsed().as_nanos() as i64 + 5_000_000_000;
            std::thread::sleep(self.delays.pop_front().unwrap_or_default());
            now
        }
    }

    impl Store for Delayed {
        fn hello(&mut self) -> Result<bool, Failure> {
            self.hello_timed().map(|(fresh, _)| fresh)
        }
        fn hello_timed(&mut self) -> Result<(bool, Option<i64>), Failure> {
            Ok((false, Some(self.now())))
        }
        fn reserve(&mut self, _: &[Ask<'_>], _: i64) -> Result<Reply, Failure> {
            Ok(Reply {
                now: self.now(),
                fresh: false,
                grants: vec![crate::shared::protocol::Grant {
                    seq: 1,
                    slots: vec![0],
                }],
                mark: crate::shared::protocol::Mark::default(),
                not_yet: None,
            })
        }
        fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
            Ok(vec![true; backs.len()])
        }
    }

    /// A drip's first grant from a state elsewhere goes on drip's clock
    /// where the state's clock put it, though the first reservation's
    /// answer was read 40 ms late: the hello's round trip places it, or,
    /// when the hello's answer was late too, the readings of the clock
    /// after it (that answer alone would put it 40 ms late, onto the next
    /// drip's slots).
    #[test]
    fn a_first_grant_read_late_is_placed_by_the_clocks() {
        let late = 40 * MS;
        for delays in [vec![MS / 10, late], vec![late, late]] {
            let origin = Instant::now();
            let store = Box::new(Delayed {
                origin,
                delays: delays.clone().into(),
            });
            let (lease, mut keeper) = keeper_over(store, 1_000_000, OnError::Wait, origin);
            keeper.hello().unwrap();
            lease.lock().wanted = 1;
            let before = lease.now();
            keeper.reserve(&[one_record()]).unwrap();
            let at = lease.lock().held.slots[0].at;
            assert!(at >= before, "{delays:?}: {at} before {before}");
            assert!(
                at < before + 20_000_000,
                "{delays:?}: {} ms late",
                (at - before) / 1_000_000
            );
        }
    }

    /// A state on this host's clock whose clock is read, at the keeper's
    /// second call, 40 ms before the keeper reads its own (a keeper
    /// preempted between the two).
    struct Host {
        calls: std::cell::Cell<u64>,
    }

    fn monotonic() -> i64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        t.tv_sec * 1_000_000_000 + t.tv_nsec
    }

    impl Store for Host {
        fn hello(&mut self) -> Result<bool, Failure> {
            Ok(false)
        }
        fn reserve(&mut self, _: &[Ask<'_>], _: i64) -> Result<Reply, Failure> {
            self.calls.set(self.calls.get() + 1);
            Ok(Reply {
                now: monotonic(),
                fresh: false,
                grants: vec![crate::shared::protocol::Grant {
                    seq: self.calls.get(),
                    slots: vec![0],
                }],
                ..Reply::default()
            })
        }
        fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
            Ok(vec![true; backs.len()])
        }
        fn host_clock(&self) -> Option<i64> {
            let now = monotonic();
            if self.calls.get() == 2 {
                std::thread::sleep(40 * MS);
            }
            Some(now)
        }
    }

    /// A slot from a state on this host's clock goes on drip's clock
    /// where the state put it, even when the keeper reads its own clock
    /// 40 ms after the state's: the closest pair of readings seen places
    /// it, not that one (that would put it 40 ms late, onto the next
    /// drip's slots).
    #[test]
    fn a_slot_on_the_hosts_clock_is_placed_by_the_closest_readings() {
        let store = Box::new(Host {
            calls: std::cell::Cell::new(0),
        });
        let (lease, mut keeper) = keeper_over(store, 1_000_000, OnError::Wait, Instant::now());
        lease.lock().wanted = 2;
        let request = one_record();
        keeper.reserve(std::slice::from_ref(&request)).unwrap();
        let before = lease.now();
        keeper.reserve(std::slice::from_ref(&request)).unwrap();
        let at = lease.lock().held.slots[1].at;
        assert!(at >= before, "{at} before {before}");
        assert!(
            at < before + 20_000_000,
            "{} ms late",
            (at - before) / 1_000_000
        );
    }

    /// A state that answers one reservation, then cannot be reached for
    /// a few calls, then answers again, found fresh (restarted empty).
    struct Restarted {
        calls: u32,
    }

    impl Store for Restarted {
        fn hello(&mut self) -> Result<bool, Failure> {
            self.calls += 1;
            match self.calls {
                ..=3 => Err(Failure::Unreachable("down".into())),
                // The hello stores the limits: fresh only the first time.
                4 => Ok(true),
                _ => Ok(false),
            }
        }
        fn reserve(&mut self, asks: &[Ask<'_>], _: i64) -> Result<Reply, Failure> {
            self.calls += 1;
            if (2..4).contains(&self.calls) {
                return Err(Failure::Unreachable("down".into()));
            }
            Ok(Reply {
                now: 0,
                fresh: false,
                grants: vec![crate::shared::protocol::Grant {
                    seq: 1,
                    slots: vec![0; asks[0].want as usize],
                }],
                ..Reply::default()
            })
        }
        fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
            Ok(vec![false; backs.len()])
        }
    }

    /// Case: under `local`, a state that answers again after an outage,
    /// found fresh, was lost and is counted so; and the drip changes over
    /// (its lone pace held for [`CHANGEOVER_NS`]) instead of sharing at
    /// once.
    #[test]
    fn rejoining_counts_a_lost_state_and_changes_over() {
        let (lease, keeper) = keeper_over(
            Box::new(Restarted { calls: 0 }),
            1_000_000,
            OnError::Local,
            Instant::now(),
        );
        lease.lock().wanted = 3;
        let thread = std::thread::spawn(move || keeper.run());
        let started = Instant::now();
        // The first reservation, then records keep wanting slots until
        // the state answers again.
        while !matches!(lease.lock().status.mode, Mode::Changing(_)) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "never rejoined"
            );
            lease.lock().wanted = 3;
            lease.wake.notify_one();
            std::thread::sleep(MS);
        }
        lease.close();
        thread.join().unwrap();
        let mut g = lease.lock();
        let st = g.status();
        assert_eq!(st.lost, 1);
        let Mode::Changing(until) = st.mode else {
            unreachable!()
        };
        assert!(until >= CHANGEOVER_NS, "{until}");
    }
}
