//! The operations of the shared state, each a plain request and reply,
//! and the one trait both backends implement ([`Store`]: the state file,
//! Redis): the lease protocol every grant speaks, the global limits' and
//! each key's alike (what a call asks, [`Ask`], what it answers,
//! [`Reply`], what goes back, [`Back`]; settlements, new limits), `drip
//! take`'s one slot ([`Taken`]), a shared budget's count ([`Count`],
//! [`Counted`]) and the job leases ([`JobPool`], [`JobOp`], [`JobLeases`]). Also the
//! protocol's constants and its pure sizing rules: how much one
//! reservation takes, how late a slot may be used, when a state found
//! fresh was lost. Pure: no threads, clock or I/O.

use std::sync::Arc;
use std::time::Duration;

use super::gcra::{Meter, Settlement, Weight};

/// A shared state outlives its schedule by this long (ns), then expires.
pub const EXPIRY_NS: i64 = 10_000_000_000;

/// With no slot in a lease, the writer looks again this often (ns); the
/// keeper wakes it as soon as slots arrive.
pub const POLL_NS: u64 = 50_000_000;

/// How far ahead of the shared now a reservation's slots may be, beyond
/// the first (ns): the turns of the others ahead of it.
pub const HORIZON: i64 = 1_000_000_000;

/// Shortest and longest chunk of the shared schedule one reservation of
/// the global limits takes, ns.
const MIN_CHUNK: i64 = 50_000_000;
const MAX_CHUNK: i64 = 200_000_000;

/// Why the shared state could not serve a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The stored limits differ from ours (their spec).
    Mismatch(String),
    /// The stored limits differ from ours and were put there by `drip
    /// ctl NAME rate` (their spec): the drip follows them.
    Changed(String),
    /// The state could not be reached or read (why).
    Unreachable(String),
    /// The state can never be used as set up (why: a state directory
    /// drip may not write, a password the server wants): drip stops with
    /// exit status 4 under every `--share-on-error`.
    Fatal(String),
}

/// What one grant asks of a reservation: the global limits' (`key`
/// `None`) or one key's. Up to `want` (at least one) slots, slot `j` for
/// a record of `sizes[j]` bytes (1 past the end of `sizes`) and no
/// earlier than `after + j × every` ns after the call's time, all due
/// within the horizon of the first one's earliest time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask<'a> {
    /// The key's bytes; `None` for the global limits.
    pub key: Option<&'a [u8]>,
    /// Slots wanted (at least one is reserved).
    pub want: u64,
    /// The sizes (bytes, or the weights of their costs) of the records
    /// they are for (global limits).
    pub sizes: &'a [Weight],
    /// The first slot's earliest time, ns after the call's.
    pub after: i64,
    /// The least spacing of the slots' earliest times, ns.
    pub every: i64,
    /// Grant slots only when the first is due within this long (ns) of
    /// the call (`--settle`: no slot is placed far ahead, where a
    /// settlement could no longer give back before it); `None`: always
    /// at least one.
    pub within: Option<i64>,
}

/// The slots one grant got from a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The reservation's number in that grant's schedule.
    pub seq: u64,
    /// Departure times, ns after the reply's `now`, in order.
    pub slots: Vec<i64>,
}

/// The answer to one reservation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// The shared clock's time of the call, ns.
    pub now: i64,
    /// The state (its stored limits) did not exist before this call.
    pub fresh: bool,
    /// One grant per ask, in order.
    pub grants: Vec<Grant>,
    /// Where the state stood before this call, for settling the records
    /// of its slots (global limits).
    pub mark: Mark,
    /// An ask `within` a time granted nothing: when its first slot would
    /// be due, ns after `now`.
    pub not_yet: Option<i64>,
}

/// Where the shared state stood before a reservation, which the records
/// of its slots settle against ([`Settlement`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    /// [`super::gcra::Gcra::charged`].
    pub charged: Weight,
    /// [`super::gcra::Gcra::life`].
    pub life: u64,
}

/// Slots going back: those of one grant from `first_unused` (shared ns;
/// reserved for `size` bytes) on, if no one reserved on that grant's
/// schedule after reservation `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Back<'a> {
    /// The key's bytes; `None` for the global limits.
    pub key: Option<&'a [u8]>,
    /// The reservation the slots came from, the grant's last.
    pub seq: u64,
    /// The shared time of the first slot going back, ns.
    pub first_unused: i64,
    /// The size (bytes, or weights) that slot was reserved for.
    pub size: Weight,
}

/// What a keeper calls when grants arrive (`false`: wake the writer) or
/// drip must stop (`true`): the limits' keepers and the budgets' alike.
pub type Wake = Arc<dyn Fn(bool) + Send + Sync>;

/// What one take call answered (`drip take`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// The shared clock's time of the call, ns.
    pub now: i64,
    /// When the slot is (or would be) due, ns after `now`.
    pub due: i64,
    /// Whether it was taken (else nothing was spent).
    pub taken: bool,
}

/// The most a shared budget counts a window, and the most jobs
/// `--share-jobs` shares: the range every count of the shared state keeps
/// in both backends, within Redis's exact integers (Lua's numbers, exact
/// below 2^53), as the times of a shared schedule are. A window's count
/// holds at most what the drips were granted (N), what they granted
/// themselves alone and told it (N at most) and, after a loss, what they
/// held again (N at most): 3N, with one call's additions 4N, below 2^53.
pub const MOST_COUNT: u64 = 1 << 51;
pub const MOST_JOBS: u64 = 1 << 53;

/// A shared budget's window count outlives the window's end by this long
/// (ns).
pub const KEPT_NS: i128 = 10_000_000_000;

/// One call on a shared budget's window count: the window `[start, end)`
/// (ns since the Unix epoch) of the calendar `calendar` (`day@UTC`), the
/// budget's `count`, what is `owed` (granted alone), what goes `back`
/// (granted, not sent, drip leaving) and how many more are asked for;
/// `now`, the wall clock (ns since the Unix epoch), drops the counts of
/// windows more than [`KEPT_NS`] over. The caller knows the budgets'
/// state by its epoch `known` (empty: none yet); a state made anew since
/// (lost: flushed, its file removed) first takes back what the caller
/// `holds` of the window, so the count is made again from the grants of
/// the drips that still count.
#[derive(Debug, Clone, Default)]
pub struct Count {
    /// The budget's calendar window (`day@America/Los_Angeles`).
    pub calendar: String,
    /// The window's start, ns since the Unix epoch.
    pub start: i128,
    /// The window's end, ns since the Unix epoch.
    pub end: i128,
    /// The budget's N a window.
    pub count: u64,
    /// Granted alone (`local`), added to the count first.
    pub owed: u64,
    /// Granted and not sent (drip leaving), taken from the count.
    pub back: u64,
    /// How many more are asked for.
    pub ask: u64,
    /// The wall clock, ns since the Unix epoch.
    pub now: i128,
    /// The epoch of the budgets' state the caller knows ("": none yet).
    pub known: String,
    /// What the caller was granted of the window through the count (not
    /// alone), added back to a count made anew since `known`.
    pub holds: u64,
}

/// What a call to the count answered: `granted` more, the count `after`;
/// in the file, the lines passed over as not drip's, and whether the file
/// held no text at all (its counts lost, started afresh).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counted {
    /// Added beyond what was owed.
    pub granted: u64,
    /// The count after the call.
    pub after: u64,
    /// Lines of the count file passed over as not drip's.
    pub passed_over: usize,
    /// The count file held no text (its counts lost, started afresh).
    pub garbled: bool,
    /// The epoch of the budgets' state.
    pub epoch: String,
    /// The state was made anew since the caller's epoch: lost.
    pub lost: bool,
}

/// How long a job lease holds without a renewal: a dead holder's jobs
/// stop counting this long after its last renewal at the latest.
pub const LEASE_TTL: Duration = Duration::from_secs(5);

/// How long a job waiting for a lease keeps its place in the line without
/// asking again: a drip that died while its jobs waited holds the line
/// this long at most.
pub const WAIT_TTL: Duration = Duration::from_secs(1);

/// What a call does to the job leases (`--share-jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOp {
    /// Take the lease of the one member given, if fewer than the limit
    /// are held and fewer members wait ahead of it than leases are free;
    /// else it waits in line (joining it at the back when new).
    Acquire,
    /// Push the expiry of the members given on (or hold them again).
    Renew,
    /// Give the members given back (or take them out of the line).
    Release,
}

impl JobOp {
    /// The word `jobs.lua` knows it by.
    pub fn word(self) -> &'static str {
        match self {
            JobOp::Acquire => "acquire",
            JobOp::Renew => "renew",
            JobOp::Release => "release",
        }
    }
}

/// Whose leases a call on the job leases is on: the fleet's
/// (`--share-jobs N`: every job of the drips on the NAME), or one key's
/// (`--key-jobs N` under `--share`: the jobs of that key). Each pool has
/// its leases, its line and its limit apart; the state's epoch is one for
/// all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobPool {
    /// Every job (`--share-jobs`).
    Fleet,
    /// The jobs of one key, its bytes as the keyed queues read it (the
    /// empty key for the records with none).
    Key(Box<[u8]>),
}

/// What a call on the job leases answered: whether it was done (an
/// acquire may find the fleet full, or the state just lost), the leases
/// held after it, the state's epoch, and whether the state was lost since
/// the caller's epoch (the caller knew one, and it is gone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobLeases {
    /// The call was done (an acquire took its lease).
    pub done: bool,
    /// The leases held across the fleet after it.
    pub held: u64,
    /// The state's epoch.
    pub epoch: String,
    /// The state was lost since the caller's epoch.
    pub lost: bool,
}

/// The backend of one NAME: the state file on this host, or Redis. Every
/// feature shared under `--share` goes through it, each call one of the
/// operations below, one atomic step on the state; the two
/// implementations are [`super::file::FileStore`] and
/// [`super::redis::RedisStore`].
pub trait Store: Send {
    /// Check that the stored limits are ours (storing them when there are
    /// none). Returns whether the state was fresh.
    fn hello(&mut self) -> Result<bool, Failure>;
    /// [`Store::hello`], and the shared clock's time (ns, as a reply's
    /// `now`) that the call read, for a clock elsewhere (Redis's): the
    /// keeper times the call to narrow the clocks' offset
    /// ([`ClockOffset`]) before its first reservation's slots are placed,
    /// and calls it again to read the clock while that offset is not yet
    /// narrow. `None` for a clock that is this host's
    /// ([`Store::host_clock`]).
    fn hello_timed(&mut self) -> Result<(bool, Option<i64>), Failure> {
        self.hello().map(|fresh| (fresh, None))
    }
    /// Reserve slots for each ask ([`super::gcra::Gcra::reserve_sized`],
    /// [`super::gcra::KeyBook::reserve_at`]), `horizon` ns at most beyond
    /// the first. The asks of one call are all of the global limits or all
    /// of keys (a keeper serves one kind of grant).
    fn reserve(&mut self, asks: &[Ask<'_>], horizon: i64) -> Result<Reply, Failure>;
    /// Give back each of `backs`; returns, for each, whether it went back.
    fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure>;
    /// Settle records on the global limits, in order, in one atomic step
    /// ([`super::gcra::Gcra::settle`]).
    fn settle(&mut self, settlements: &[Settlement]) -> Result<(), Failure> {
        let _ = settlements;
        Err(Failure::Fatal("records cannot be settled on it".into()))
    }
    /// Put this store's limits in the state as the shared ones from now
    /// on, whatever is stored ([`super::gcra::Gcra::relimit`]: no credit,
    /// the slots reserved before kept, none of them going back), marked
    /// as changed by `drip ctl` so that every drip follows them.
    fn relimit(&mut self) -> Result<(), Failure> {
        Err(Failure::Fatal("its limits cannot be changed".into()))
    }
    /// Use `spec` (the global limits' `meters`, the limits per key
    /// `keys`) as this store's limits from now on: the stored ones,
    /// changed by `drip ctl`. A store of the keys keeps no global meters,
    /// one of the global limits no limits per key.
    fn adopt(
        &mut self,
        spec: String,
        meters: Vec<Meter>,
        keys: Option<std::sync::Arc<crate::keyed::KeyTable>>,
    ) {
        let _ = (spec, meters, keys);
    }
    /// Why a call since the last asked found a stored state it could not
    /// read (a state file of garbage) and started the state afresh: a lost
    /// state, whatever this drip had reserved. Taken: `None` until another
    /// call finds one.
    fn unreadable(&mut self) -> Option<String> {
        None
    }
    /// The shared clock's now (ns) when it is this host's
    /// `CLOCK_MONOTONIC`, which drip's clock also runs on: slots then map
    /// exactly. `None` for a clock elsewhere.
    fn host_clock(&self) -> Option<i64> {
        None
    }
    /// `drip take`'s one slot of `size` (bytes, or cost), taken only when
    /// due within `within` ns ([`super::gcra::Gcra::take`]).
    fn take(&mut self, size: Weight, within: i64) -> Result<Taken, Failure> {
        let _ = (size, within);
        Err(Failure::Fatal("a slot cannot be taken from it".into()))
    }
    /// Add what `call` owes to its window's count and take what goes
    /// back, then add up to its ask within the budget's count.
    fn count(&mut self, call: &Count) -> Result<Counted, Failure> {
        let _ = call;
        Err(Failure::Fatal("a budget cannot be counted on it".into()))
    }
    /// Do `op` on the job leases of `members` in `pool` under `limit`
    /// (the caller's: the limit a pool is held to is the one each call
    /// passes), the caller knowing the state's epoch `known` (empty: none
    /// yet).
    fn jobs(
        &mut self,
        pool: &JobPool,
        op: JobOp,
        limit: u64,
        members: &[String],
        known: &str,
    ) -> Result<JobLeases, Failure> {
        let _ = (pool, op, limit, members, known);
        Err(Failure::Fatal("job leases cannot be held on it".into()))
    }
}

/// How late (ns) a reserved slot may still be used: half an emission
/// interval (`per_second`: slots a second at the tightest limit; for a
/// slot reserved for s bytes, a byte limit's rate / s), within 2 and
/// 100 ms, as the local pacer's slack ([`crate::pacer::slack_for`]).
///
/// The bound it keeps: GCRA puts at most `burst + ⌊W × rate⌋` slots in
/// any span W, and a record leaves between its slot and `late_ns` after
/// it, so a window W of departures holds the slots of a span
/// `W + late_ns`: at most `burst + ⌊(W + late_ns) × rate⌋`, one record
/// more than the schedule (from 250/s up, where 2 ms is more than half an
/// interval, `⌈rate × 2 ms⌉`: two at 1000/s). Half an interval, not a whole one, leaves
/// the other half for the way to the reader (the write, the pipe, its
/// wake-up): records read up to half an interval after their departure
/// still make at most one more in a window, where a whole interval's
/// allowance leaves the reader no time at all (a slot sent a whole
/// interval late and read 1 ms later than the next one makes 3 records
/// in 4 ms at 200/s, burst 1). A slot later than that is not used, as a
/// local schedule restarts after a stall, so a stalled drip never sends a
/// catch-up burst.
pub fn late_ns(per_second: f64) -> u64 {
    (0.5e9 / per_second).clamp(2e6, 100e6) as u64
}

/// How late (ns) a slot reserved for a record's size under a byte (or
/// cost) limit may still be used: one whole emission interval
/// (`per_second`: the slot's, the byte rate / its size), within 2 and
/// 100 ms; a record limit beside keeps its own half interval
/// ([`late_ns`]), the lesser of the two applying. Late by that much it
/// puts at most its own size more into a window (a record's bytes). Not
/// half, as [`late_ns`]: the slots after a slot not used are reserved for
/// the sizes of the records after its record, so each record after it
/// meets a slot meant for another and wastes those too small for it until
/// the lease ends (`bench/share.py`'s three drips sharing 20,000 bytes/s
/// through the state file in lines of 1 to 200 bytes, ten runs of 3 s
/// each: slots wasted in 7 and 8 runs of 10 at half an interval, in 3 at
/// a whole one, as in 2 and 3 before the records' allowance was halved).
pub fn byte_late_ns(per_second: f64) -> u64 {
    (1e9 / per_second).clamp(2e6, 100e6) as u64
}

/// How far ahead one reservation of keys reaches: a few round trips,
/// within 200 ms and 1 s.
pub fn horizon(rtt: i64) -> i64 {
    rtt.saturating_mul(4).clamp(200_000_000, HORIZON)
}

/// How much of the shared schedule (ns) one reservation of the global
/// limits takes at most: a few round trips (`rtt`, ns), within 50 and
/// 200 ms.
pub fn chunk(rtt: i64) -> i64 {
    rtt.saturating_mul(4).clamp(MIN_CHUNK, MAX_CHUNK)
}

/// When the global limits' lease asks again: once its last slot is less
/// than this (ns) away, half a chunk or two round trips, so the next
/// turn's answer is back before the lease runs out.
pub fn ahead(rtt: i64) -> i64 {
    (chunk(rtt) / 2).max(rtt.saturating_mul(2))
}

/// How many of `want` waiting records (of `sizes` bytes, 1 past them) one
/// reservation takes: as many as fit in `chunk` ns of every limit's
/// schedule (`meters`), at least one (a record larger than that leaves
/// alone).
pub fn fitting<W: Copy + Into<Weight>>(
    meters: &[Meter],
    want: u64,
    sizes: &[W],
    chunk: i64,
) -> u64 {
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
        let size: Weight = size.into();
        let fits = meters
            .iter()
            .zip(&spent)
            .all(|(m, &s)| s.saturating_add(m.cost(size.on(m))) <= chunk);
        if !fits && n > 0 {
            break;
        }
        for (m, s) in meters.iter().zip(spent.iter_mut()) {
            *s = s.saturating_add(m.cost(size.on(m)));
        }
        n += 1;
    }
    n.max(1)
}

/// Whether a state found fresh may simply have expired: this drip's latest
/// slot (`reserved_until`, ns on drip's clock) is at least the expiry ago
/// at `now`, less a second for the offset between drip's clock and the
/// shared one (a slot lands on drip's clock up to one call, at most 1 s,
/// late). Such a state is no loss: every `TAT` of ours had passed, and a
/// fresh state schedules the same (another drip that used it since, and
/// finds it gone too soon, reports the loss).
pub fn expired(reserved_until: u64, now: u64) -> bool {
    let margin = EXPIRY_NS.saturating_sub(1_000_000_000).unsigned_abs();
    now >= reserved_until.saturating_add(margin)
}

/// How fast the bounds of the clocks' offset widen as they age, parts per
/// million: the drift of two clocks NTP keeps. It must stay small: each
/// call that narrows the bounds back puts the slots after it that much
/// earlier against those before (at 1000 ppm, a call every 50 ms put
/// 10,000/s shared through Redis 20 records over in a second). Clocks that
/// drift apart faster are caught within a round trip, when a call's bounds
/// no longer meet the old ones.
const DRIFT_PPM: u64 = 20;

/// Where the shared clock stands against drip's: the offset `θ` (shared
/// time less drip's, ns) narrowed down from every call's answer. A call
/// sent at `sent` and answered at `received` (drip's clock) that read the
/// shared clock at `shared` did so between the two, so `shared − received
/// ≤ θ ≤ shared − sent`; the calls together narrow it to the intersection
/// (the best bound of the round trips, as NTP's filter takes the least
/// delay), each bound widened by [`DRIFT_PPM`] of its age. A call whose
/// bounds do not meet it (the shared clock stepped, a state made afresh
/// counts from a new epoch) starts it again from that call.
///
/// A slot at shared time `d` is put at `d − θ_lo` on drip's clock: never
/// earlier than it is (the lower bound), and later by less than the
/// shortest round trip seen, where counting from the answer's arrival
/// puts it later by that answer's whole delay (a keeper woken late on a
/// loaded machine, a slow network), and lets it crowd the next drip's
/// slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockOffset {
    /// The bounds of `θ` (ns) and when they were last narrowed (drip's
    /// clock, ns); `None` before the first call.
    known: Option<(i64, i64, u64)>,
    /// The calls that narrowed the bounds since they were last started.
    calls: u32,
}

impl ClockOffset {
    /// Narrow the offset with a call sent at `sent` and answered at
    /// `received` (drip's clock, ns) that read the shared clock at `shared`
    /// (ns). Returns drip's time (ns) of that reading: `shared − θ_lo`.
    pub fn observe(&mut self, shared: i64, sent: u64, received: u64) -> u64 {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let lo = shared.saturating_sub(int(received));
        let hi = shared.saturating_sub(int(sent.min(received)));
        let narrowed = self.known.and_then(|(old_lo, old_hi, at)| {
            let drift = int(received.saturating_sub(at) / 1_000_000 * DRIFT_PPM);
            let lo = lo.max(old_lo.saturating_sub(drift));
            let hi = hi.min(old_hi.saturating_add(drift));
            (lo <= hi).then_some((lo, hi))
        });
        self.calls = if narrowed.is_some() {
            self.calls + 1
        } else {
            1
        };
        let (lo, hi) = narrowed.unwrap_or((lo, hi));
        self.known = Some((lo, hi, received));
        self.place(shared)
    }

    /// drip's time (ns) of the shared clock's `shared` (ns), by the
    /// offset known: `shared − θ_lo` (`shared` itself before any call).
    pub fn place(&self, shared: i64) -> u64 {
        let lo = self.known.map_or(0, |(lo, _, _)| lo);
        u64::try_from(shared.saturating_sub(lo)).unwrap_or(0)
    }

    /// Whether the offset is not yet known to within `within` ns (the
    /// most a slot may be placed late by it) and fewer than `calls` calls
    /// narrowed it since it was last started: one more reading of the
    /// shared clock may narrow it. Before any call, it is not.
    pub fn unsettled(&self, within: i64, calls: u32) -> bool {
        self.known
            .is_some_and(|(lo, hi, _)| hi.saturating_sub(lo) > within && self.calls < calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::gcra::{ByteStep, Step};

    const MS: u64 = 1_000_000;

    /// The offset narrows to the shortest round trip: an answer that
    /// waited long before the keeper read it does not push its slots
    /// late, and a slot is never put earlier than it is. A clock that
    /// stepped back starts it again.
    #[test]
    fn the_clock_offset_keeps_the_shortest_round_trip() {
        // The shared clock is drip's + 5 s.
        let theta = 5_000 * MS as i64;
        let shared = |ours: u64| ours as i64 + theta;
        let mut c = ClockOffset::default();
        // Read at 1000 ms, answered at once (0.1 ms round trip).
        assert_eq!(
            c.observe(shared(1_000 * MS), 1_000 * MS - MS / 10, 1_000 * MS),
            1_000 * MS
        );
        // Read at 1100 ms, the answer read 40 ms later (a keeper woken
        // late): its time is still 1100 ms, within the drift of 100 ms.
        let at = c.observe(shared(1_100 * MS), 1_100 * MS - MS / 10, 1_140 * MS);
        assert!((1_100 * MS..1_100 * MS + MS / 5).contains(&at), "{at}");
        // Never earlier than it is, whatever the delays.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut c = ClockOffset::default();
        for i in 0..1000u64 {
            let read = 2_000 * MS + i * 20 * MS;
            let sent = read - rng.u64(0..5 * MS);
            let received = read + rng.u64(0..50 * MS);
            let at = c.observe(shared(read), sent, received);
            assert!(at >= read, "{i}: {at} before {read}");
            if i > 100 {
                assert!(at < read + 5 * MS, "{i}: {at} for {read}");
            }
        }
        // The shared clock steps back 2 s (a state made afresh counts from
        // a later epoch): the next call starts the offset again.
        let back = |ours: u64| ours as i64 + theta - 2_000 * MS as i64;
        let read = 30_000 * MS;
        assert_eq!(c.observe(back(read), read - MS, read), read);
    }

    /// The offset is unsettled while wider than asked and narrowed by
    /// fewer calls than asked; a clock that stepped starts the count
    /// again, and before any call there is nothing to settle.
    #[test]
    fn the_clock_offset_is_unsettled_while_wide_and_new() {
        let mut c = ClockOffset::default();
        assert!(!c.unsettled(MS as i64, 3));
        // A 40 ms round trip, then a 0.1 ms one: settled.
        c.observe(5_000 * MS as i64, 0, 40 * MS);
        assert!(c.unsettled(MS as i64, 3));
        assert_eq!(c.place(5_000 * MS as i64), 40 * MS);
        c.observe(5_050 * MS as i64, 50 * MS, 50 * MS + MS / 10);
        assert!(!c.unsettled(MS as i64, 3));
        // The first reading was at 0 ms, not at the 40 ms its answer came.
        assert_eq!(c.place(5_000 * MS as i64), MS / 10);
        // Wide calls only: settled by their count.
        let mut c = ClockOffset::default();
        for i in 0..3 {
            assert!(i == 0 || c.unsettled(MS as i64, 3));
            c.observe(5_000 * MS as i64, i * 10 * MS, i * 10 * MS + 40 * MS);
        }
        assert!(!c.unsettled(MS as i64, 3));
        // The clock steps: one call since, unsettled again.
        c.observe(1_000 * MS as i64, 100 * MS, 140 * MS);
        assert!(c.unsettled(MS as i64, 3));
    }

    /// One reservation takes at most one chunk of every limit's schedule,
    /// at least one slot, and no more than the records waiting.
    #[test]
    fn a_reservation_takes_at_most_one_chunk() {
        let ms = 1_000_000;
        let records = [Meter::Records(Step {
            interval: 10 * ms,
            tolerance: 0,
        })];
        assert_eq!(fitting(&records, 100, &[0u64; 0], 50 * ms), 5);
        assert_eq!(fitting(&records, 3, &[0u64; 0], 50 * ms), 3);
        assert_eq!(fitting(&records, 1, &[0u64; 0], ms), 1);
        // 1000 bytes a second: a byte costs 1 ms.
        let bytes = [Meter::Bytes(ByteStep {
            count: 1000,
            period: 1_000 * ms,
            burst: 100,
            weight: 0,
        })];
        assert_eq!(fitting(&bytes, 4, &[20, 20, 20, 100], 50 * ms), 2);
        assert_eq!(fitting(&bytes, 1, &[100], 50 * ms), 1);
        assert_eq!(chunk(0), 50 * ms);
        assert_eq!(chunk(100 * ms), 200 * ms);
        assert_eq!(ahead(0), 25 * ms);
        assert_eq!(horizon(0), 200 * ms);
    }
}
