//! One limit shared by many drips (`--share`): on one host through a state
//! file ([`mod@file`]), across hosts through Redis ([`redis`]).
//!
//! The shared schedule is one GCRA per limit, and one per key with
//! `--key`, kept in the shared state ([`gcra`], the arithmetic; in Redis
//! the Lua scripts run the same on the server's clock). Each drip
//! *reserves* its next departure slots there and sleeps on its own clock
//! until each is due. Two kinds of grant speak one lease protocol
//! ([`protocol`]: reserve, give back, through one small [`protocol::Store`]
//! trait the file and Redis implement): the global limits' ([`lease`],
//! whose [`SharedSchedule`] is the [`crate::schedule::Schedule`] admission
//! and the writer see) and the keys' ([`keys`], whose [`keys::SharedKeys`]
//! is the keyed queues' [`crate::keyed::KeySchedule`]). Both schedules are
//! pure over their local *lease* of reserved slots; one keeper
//! ([`keeper`], a thread per kind of grant) does the reserving, the giving
//! back and the backing off, so no call under drip's state lock ever
//! waits on the network. [`open`] wires them; [`target`] parses the flags.

pub mod backend;
pub mod budget;
pub mod file;
pub mod gcra;
pub mod jobs;
pub mod keeper;
pub mod key_table;
pub mod keys;
pub mod lease;
pub mod protocol;
pub mod redis;
pub mod take;
pub mod target;
pub mod voice;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cost::Cost;
use crate::keyed::{KeyConfig, KeyTable};
use crate::rate::Rate;
use crate::report::share::{ShareCounts, ShareStats};
use crate::schedule::{Limit, Limits, Unit};
use crate::sys::Unpoisoned;
use gcra::{canonical_tagged, lone_order, PeerPace};
use keeper::{Grants, Greeting, Keeper, Lease, Leasing, Losses};
use keys::KeyLeases;
use lease::GlobalLease;
use protocol::{Failure, Store, Wake};
use voice::{Retry, Voice};

pub use keeper::GIVE_BACK_WAIT;
pub use lease::SharedSchedule;
pub use target::{parse_on_error, parse_target, Share, Target, SHARE_ON_ERROR};
pub use voice::{Disagreement, OnError, Unreachable, Unusable};

/// What is called when slots arrive (`false`: wake the writer) or drip
/// must stop (`true`).
pub type Notify = Box<dyn Fn(bool) + Send + Sync>;

/// The running share: the keeper (one thread, for the global limits, the
/// limits per key and the budgets' counts, each when shared) and what it
/// reports.
pub struct Handle {
    lease: Option<Arc<Lease<GlobalLease>>>,
    /// What each cost limit spends, as the state tags it ([`budget_tags`]).
    budget_tags: Vec<Option<String>>,
    keys: Option<Arc<Lease<KeyLeases>>>,
    keeper: Arc<Keeper>,
    /// Whether each lease's duty is over.
    done: Vec<Arc<AtomicBool>>,
    notify: Arc<Mutex<Notifier>>,
    name: String,
    spec: String,
    /// The spec a change of the limits was last told for (by either
    /// keeper).
    told: Arc<Mutex<String>>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").field("name", &self.name).finish()
    }
}

impl Handle {
    /// Set what the keepers call when slots arrive or drip must stop.
    /// A keeper that said drip must stop before this was set (a refusal
    /// answered after [`FIRST_ANSWER`]) is heard now.
    pub fn set_notify(&self, notify: Notify) {
        let mut bell = self.notify.lock().unpoisoned();
        if bell.stop_rung {
            notify(true);
        }
        bell.notify = Some(notify);
    }

    /// Stop the keepers (they give back the slots reserved and unused,
    /// best effort) and return the error that stopped drip, if any:
    /// [`Disagreement`], [`Unreachable`] or [`Unusable`]. Waits for the
    /// keepers at most `bound` (a keeper blocked on a hung server is left
    /// behind, to end with the process), [`GIVE_BACK_WAIT`] at a stop, and
    /// not at all once `hurry` says so (a second signal).
    pub fn finish(&mut self, bound: Duration, hurry: &dyn Fn() -> bool) -> Option<anyhow::Error> {
        if let Some(lease) = &self.lease {
            lease.close();
        }
        if let Some(keys) = &self.keys {
            keys.close();
        }
        let until = Instant::now() + bound;
        // Looked at every millisecond, at most `bound` once at exit: a
        // second signal, which cuts the wait short, notifies nothing this
        // thread could wait on beside the keepers' end.
        while self.done.iter().any(|d| !d.load(Ordering::SeqCst))
            && Instant::now() < until
            && !hurry()
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        /// The failure that stops drip, if `lease`'s keeper found one.
        fn fatal<G: Grants>(lease: &Lease<G>) -> Option<Failure> {
            lease.lock().status().fatal.clone()
        }
        let global = self.lease.as_deref().and_then(fatal);
        let per_key = self.keys.as_deref().and_then(fatal);
        global.or(per_key).map(|f| self.error(f))
    }

    /// What a keeper calls when slots arrive or drip must stop
    /// (`true`): the notify set ([`Handle::set_notify`]), or, before one
    /// is, a stop kept for it.
    fn wake(&self) -> Wake {
        let notify = Arc::clone(&self.notify);
        Arc::new(move |stop| {
            let mut bell = notify.lock().unpoisoned();
            bell.stop_rung |= stop;
            if let Some(f) = &bell.notify {
                f(stop);
            }
        })
    }

    fn error(&self, failure: Failure) -> anyhow::Error {
        let name = self.name.clone();
        match failure {
            Failure::Mismatch(theirs) | Failure::Changed(theirs) => Disagreement {
                name,
                ours: key_table::describe_spec(&self.spec),
                theirs: key_table::describe_spec(&theirs),
            }
            .into(),
            Failure::Unreachable(why) => Unreachable { name, why }.into(),
            Failure::Fatal(why) => Unusable { name, why }.into(),
        }
    }

    /// The keeper of this drip, which a shared budget's count is given to
    /// ([`budget::start`]).
    pub fn keeper(&self) -> &Arc<Keeper> {
        &self.keeper
    }

    /// How `drip ctl NAME rate` changes the shared limits of this drip's
    /// NAME ([`Relimiter`]).
    pub fn relimiter(&self, share: &Share) -> Relimiter {
        Relimiter {
            share: share.clone(),
            budget_tags: self.budget_tags.clone(),
            keys: self.keys.clone(),
            global: self.lease.is_some(),
        }
    }

    /// Keep `in_force` (what `drip ctl` and `--metrics` show) the shared
    /// limits, and `key_in_force` the limit per key, when `drip ctl`
    /// changes them, on any drip of the NAME.
    pub fn follow_in_force(
        &self,
        in_force: &crate::schedule::InForce,
        key_in_force: &crate::schedule::KeyInForce,
    ) {
        if let Some(lease) = &self.lease {
            lease.lock().in_force = Some(Arc::clone(in_force));
        }
        if let Some(keys) = &self.keys {
            keys.lock().in_force = Some(Arc::clone(key_in_force));
        }
    }

    /// Where the counters are, for reading them from another thread at any
    /// time (SIGUSR1), before and after [`Handle::finish`].
    pub fn counters(&self) -> Counters {
        Counters {
            lease: self.lease.clone(),
            keys: self.keys.clone(),
            losses: self.keeper.losses(),
            name: self.name.clone(),
        }
    }
}

/// Where a [`Handle`]'s counters are ([`Handle::counters`]).
#[derive(Debug, Clone)]
pub struct Counters {
    lease: Option<Arc<Lease<GlobalLease>>>,
    keys: Option<Arc<Lease<KeyLeases>>>,
    /// The losses of the state every feature saw (the global limits', a
    /// budget's count, the job leases').
    losses: Arc<Losses>,
    name: String,
}

impl Counters {
    /// The counters for `--stats` and `--stats-json`: reservations, slots
    /// forfeited, losses, failed calls, for the global limits and for the
    /// limits per key.
    pub fn stats(&self) -> ShareStats {
        fn counts<G: Grants>(lease: &Lease<G>) -> ShareCounts {
            let mut g = lease.lock();
            let st = g.status();
            ShareCounts {
                reservations: st.reservations,
                slots_forfeited: st.forfeited,
                state_lost: st.lost,
                failed_calls: st.failures,
            }
        }
        let mut global = self.lease.as_deref().map(counts);
        let mut per_key = self.keys.as_deref().map(counts);
        // Counted once, with the global limits (with the keys when only
        // they are shared).
        if let Some(c) = global.as_mut().or(per_key.as_mut()) {
            c.state_lost += self.losses.count();
        }
        ShareStats {
            name: self.name.clone(),
            global,
            per_key,
        }
    }
}

/// Changes the limits shared under one NAME for every drip on it (`drip
/// ctl NAME rate` on any of them), through the state: a call of its own,
/// from the control socket's thread, never under drip's state lock.
#[derive(Debug, Clone)]
pub struct Relimiter {
    share: Share,
    /// What each cost limit spends, in the command line's order, as the
    /// state tags it ([`budget_tags`]).
    budget_tags: Vec<Option<String>>,
    /// The leases of the limits per key, when they are shared too: the
    /// table in force there.
    keys: Option<Arc<Lease<KeyLeases>>>,
    /// Global limits are shared (not only limits per key).
    global: bool,
}

/// What a change of the shared limits does to the limits per key
/// ([`Relimiter::relimit`]).
#[derive(Debug, Clone, Copy)]
pub enum KeyChange<'a> {
    /// They stay as they are in force.
    Same,
    /// The keys no row matches take this limit (`drip ctl … key-rate`).
    Default(&'a Limit),
    /// The table's rows are these from now on (`drip ctl … key-rates`).
    Rows(&'a crate::keyed::KeyRates),
}

impl Relimiter {
    /// Store `limits` (the global ones, all of them) and, when the limits
    /// per key are shared, those in force changed as `key` says, as the shared limits
    /// from now on ([`protocol::Store::relimit`]). Every drip on the NAME,
    /// this one too, follows them at its keeper's next call.
    ///
    /// # Errors
    /// A limit is unlimited, global limits would be added or taken away
    /// (the drips on the NAME pace by the kinds they started with), or the
    /// state cannot be reached or used (why, in a sentence).
    pub fn relimit(&self, limits: &[Limit], key: KeyChange<'_>) -> Result<(), String> {
        let name = self.share.target.name();
        if self.keys.is_none() && !matches!(key, KeyChange::Same) {
            return Err(format!(
                "this drip has no limits per key (--key); those it shares (--share {name}) are global"
            ));
        }
        let key = self.keys.as_ref().map(|keys| {
            let now = keys.lock().table.as_ref().clone();
            match key {
                KeyChange::Same => now,
                KeyChange::Default(l) => KeyTable::new(now.rows().clone(), Some(*l)),
                KeyChange::Rows(rows) => KeyTable::new(rows.clone(), now.default()),
            }
        });
        let key = key.as_ref();
        if key.is_some_and(|t| !t.limits_every_key()) {
            return Err(format!(
                "--share {name}: every key needs a limit: the table needs a * row, or the drips a --key-rate RATE; the table in force stays"
            ));
        }
        if (limits.is_empty() && key.is_none()) || limits.iter().any(|l| l.rate == Rate::Unlimited)
        {
            return Err(format!(
                "--share {name}: a shared limit must be a rate: this would leave none"
            ));
        }
        if limits.is_empty() == self.global {
            return Err(format!(
                "--share {name}: the drips on it share {} global limit (--rate, --byte-rate, --cost-rate): one cannot be {} from here; stop the drips and start them with the new limits",
                if self.global { "a" } else { "no" },
                if self.global { "taken away" } else { "added" }
            ));
        }
        in_range(limits, key).map_err(|why| format!("--share {name}: {why}"))?;
        let tags = tag_limits(limits, &self.budget_tags);
        let (limits, tags) = canonical_tagged(limits, &tags);
        let meters = gcra::meters(&limits, &tags);
        let spec = key_table::spec_with_table(&limits, &tags, key);
        let keys = key.cloned().map(Arc::new);
        let mut store = store(&self.share, &spec, meters, keys).map_err(|e| e.to_string())?;
        store.relimit().map_err(|f| match f {
            Failure::Unreachable(why) | Failure::Fatal(why) => format!(
                "--share {name}: the shared state cannot be changed: {why}; the limits are as they were"
            ),
            Failure::Mismatch(w) | Failure::Changed(w) => format!("--share {name}: {w}"),
        })
    }
}

/// What [`open`] starts: the schedules to pace by and the running share.
#[derive(Debug)]
pub struct Opened {
    /// The global limits' schedule (`None`: no global limit).
    pub schedule: Option<SharedSchedule>,
    /// The per-key schedules (`None`: no limits per key).
    pub keys: Option<keys::SharedKeys>,
    /// The keepers.
    pub handle: Handle,
}

/// Start sharing `limits` (of records and of bytes) and, with `key`, the limits per
/// key, as `share` says; `origin` is drip's clock. Checks, before anything
/// is read, that the stored limits (all of them) agree with ours.
///
/// # Errors
/// [`Disagreement`] (exit status 2); [`Unreachable`] under `fail` (exit
/// status 4); [`Unusable`] (exit status 4).
pub fn open(
    share: &Share,
    limits: &[Limit],
    key: Option<&KeyConfig>,
    cost: Option<&Cost>,
    origin: Instant,
) -> anyhow::Result<Opened> {
    let budget_tags = budget_tags(cost);
    let (limits, tags) = canonical_tagged(limits, &tag_limits(limits, &budget_tags));
    let limits = &limits;
    let table = key.map(|k| {
        let default = (k.rate != Rate::Unlimited).then(|| Limit::records(k.rate, Some(k.burst)));
        KeyTable::new(k.rates.clone(), default)
    });
    let spec = key_table::spec_with_table(limits, &tags, table.as_ref());
    let name = share.target.name().to_string();
    let mut handle = Handle {
        lease: None,
        budget_tags,
        keys: None,
        keeper: Keeper::of(&name),
        done: Vec::new(),
        notify: Arc::default(),
        name: name.clone(),
        spec,
        told: Arc::default(),
    };
    let schedule = if limits.is_empty() {
        None
    } else {
        Some(open_global(
            share,
            limits,
            &tags,
            cost,
            origin,
            &mut handle,
        )?)
    };
    let keys = match table {
        Some(t) => Some(open_keys(share, t, origin, &mut handle)?),
        None => None,
    };
    Ok(Opened {
        schedule,
        keys,
        handle,
    })
}

/// What each cost limit of `cost` spends, in its order, as the shared
/// state tags it: `None` for each where they all spend the same costs (one
/// weight a slot, the spec as before slots carried several), else the
/// costs it spends ([`Cost::budget_tag`]: `in`, `in+out`).
pub(crate) fn budget_tags(cost: Option<&Cost>) -> Vec<Option<String>> {
    match cost {
        Some(cost) if !cost.one_weight() => (0..cost.budgets())
            .map(|i| Some(cost.budget_tag(i)))
            .collect(),
        Some(cost) => vec![None; cost.budgets()],
        None => Vec::new(),
    }
}

/// Which cost limit's spending (its place among `cost`'s) each weight of a
/// shared slot is, the limits tagged `tags` ([`gcra::meters`] numbers the
/// weights); empty where the cost limits all spend the same costs (one
/// weight, the first cost).
pub(crate) fn weight_budgets(cost: Option<&Cost>, tags: &[Option<String>]) -> Vec<usize> {
    match cost {
        Some(cost) if !cost.one_weight() => gcra::weight_tags(tags)
            .iter()
            .filter_map(|t| (0..cost.budgets()).find(|&i| cost.budget_tag(i) == *t))
            .collect(),
        _ => Vec::new(),
    }
}

/// The tag of each of `limits` (in the command line's order): each cost
/// limit the next of `budget_tags`, the others none.
pub(crate) fn tag_limits(limits: &[Limit], budget_tags: &[Option<String>]) -> Vec<Option<String>> {
    let mut next = budget_tags.iter();
    limits
        .iter()
        .map(|l| match l.unit {
            Unit::Cost => next.next().cloned().flatten(),
            _ => None,
        })
        .collect()
}

/// The store of `share` for `meters` (the global limits) and the limits
/// per key `keys` ([`backend::open`]).
fn store(
    share: &Share,
    spec: &str,
    meters: Vec<gcra::Meter>,
    keys: Option<Arc<KeyTable>>,
) -> anyhow::Result<Box<dyn Store>> {
    backend::open(&share.target, spec, meters, keys)
        .map_err(|why| anyhow::anyhow!("--share {}: {why}", share.target.name()))
}

/// How long [`open`] waits under `local` for the state's first answer (a
/// keeper's hello) before drip starts without it, pacing alone until the
/// state answers (then changing over, as after an outage); a refusal
/// answered later stops drip then. Under `wait` and `fail` nothing could
/// leave before the answer anyway, and [`open`] waits for it (at most a
/// call's timeout or two; the signals are caught meanwhile).
const FIRST_ANSWER: Duration = Duration::from_millis(250);

/// What the keepers call: the engine's [`Notify`] once set; a stop asked
/// for before that is kept, and asked for again when it is set.
#[derive(Default)]
struct Notifier {
    notify: Option<Notify>,
    stop_rung: bool,
}

/// Give the keeper the duty of `lease` through `store`, its hello first,
/// waited for (under `local` at most [`FIRST_ANSWER`]): a refusal waited
/// for stops drip before it reads. `voice` says on stderr what befalls
/// the state it keeps; `lease_losses` counts what it loses.
fn start_keeper<G: Grants>(
    share: &Share,
    store: Box<dyn Store>,
    lease: &Arc<Lease<G>>,
    voice: Voice,
    handle: &mut Handle,
    lease_losses: Option<Arc<Losses>>,
) -> anyhow::Result<()> {
    let leasing = Leasing {
        lease: Arc::clone(lease),
        store,
        on_error: share.on_error,
        notify: handle.wake(),
        voice,
        retry: Retry::new(fastrand::Rng::new()),
        offset: protocol::ClockOffset::default(),
        spec: handle.spec.clone(),
        told: Arc::clone(&handle.told),
        last_call: None,
        paused: None,
        losses: lease_losses,
    };
    // A rendezvous: an answer no one waits for any more is not sent.
    let (answer, answered) = std::sync::mpsc::sync_channel(0);
    let duty = Greeting {
        leasing,
        answer: Some(answer),
    };
    let done = handle.keeper.add(Box::new(duty))?;
    let greeted = match share.on_error {
        OnError::Local => answered.recv_timeout(FIRST_ANSWER).ok(),
        _ => answered.recv().ok(),
    };
    match greeted {
        Some(Err(failure)) => return Err(handle.error(failure)),
        Some(Ok(())) => {}
        None if share.on_error == OnError::Local => {
            let now = lease.now();
            lease.lock().go_local(now);
        }
        None => {}
    }
    handle.done.push(done);
    Ok(())
}

/// What a keeper of `share` says on stderr, naming the state `name` in
/// its messages; `may_pass` says what a lost state lets through.
fn voice(share: &Share, name: String, may_pass: &'static str) -> Voice {
    Voice::new(name, may_pass, share.on_error, share.quiet)
}

/// Start the keeper of the global limits (`limits`, in the shared
/// state's order, tagged `tags`; the cost limits spending `cost`'s
/// costs), for the state `handle` keeps; their schedule.
fn open_global(
    share: &Share,
    limits: &[Limit],
    tags: &[Option<String>],
    cost: Option<&Cost>,
    origin: Instant,
    handle: &mut Handle,
) -> anyhow::Result<SharedSchedule> {
    let meters: Vec<gcra::Meter> = gcra::meters(limits, tags);
    let weighs_bytes = meters.iter().any(gcra::Meter::weighs_bytes);
    let store = store(share, &handle.spec, meters.clone(), None)?;
    let mut global = GlobalLease::new(meters.clone());
    global.settling = share.settle;
    global.budget_tags = handle.budget_tags.clone();
    let budgets = weight_budgets(cost, tags);
    let local = lone_order(limits, tags, &handle.budget_tags);
    let limits = &local[..];
    let lease = Arc::new(Lease::with_bell(global, origin, handle.keeper.bell()));
    handle.lease = Some(Arc::clone(&lease));
    let voice = voice(share, format!("--share {}", handle.name), LOST_GLOBAL);
    let losses = Some(handle.keeper.losses());
    start_keeper(share, store, &lease, voice, handle, losses)?;
    let pace = PeerPace::of(limits, share.peers);
    let local = match cost {
        Some(cost) if share.settle => Limits::new(&pace.local)
            .with_cost(cost.clone())
            .with_settling(),
        Some(cost) => Limits::new(&pace.local).with_cost(cost.clone()),
        None => Limits::new(&pace.local),
    };
    Ok(SharedSchedule {
        lease,
        local,
        cost: cost.cloned(),
        budgets,
        weight_rates: lease::weight_rates(&meters),
        per_second: pace.per_second,
        bytes_per_second: pace.bytes_per_second,
        weighs_bytes,
        last_now: 0,
        peers: share.peers,
        written: lease::Writes::default(),
        in_flight: share.settle.then(std::collections::VecDeque::new),
        heaviest: lease::Heaviest {
            most: gcra::most_weights(&meters),
            who: format!("--share {}", handle.name),
            said: std::cell::Cell::new(share.quiet),
        },
    })
}

/// Whether `limits` (and the limits per key of `key`: each row's, named
/// by its pattern, and the default) can be shared: each within
/// the range a shared schedule keeps exactly in both backends
/// ([`gcra::out_of_range`]).
///
/// # Errors
/// One line naming the flag and the limit out of range, and why.
pub fn in_range(limits: &[Limit], key: Option<&KeyTable>) -> Result<(), String> {
    let rows = key.map(|t| t.rows().rows()).unwrap_or_default();
    for row in rows {
        let limit = Limit::records(row.rate, Some(row.burst));
        if let Some(why) = gcra::out_of_range(&limit) {
            return Err(format!("the rate table's row {}: {why}", row.name));
        }
    }
    let flagged = limits
        .iter()
        .map(|l| {
            let flag = match l.unit {
                crate::schedule::Unit::Records => "--rate",
                crate::schedule::Unit::Bytes => "--byte-rate",
                crate::schedule::Unit::Cost => "--cost-rate",
            };
            (flag, *l)
        })
        .chain(key.and_then(KeyTable::default).map(|k| ("--key-rate", k)));
    for (flag, limit) in flagged {
        if let Some(why) = gcra::out_of_range(&limit) {
            let shown = gcra::describe(&gcra::spec(std::slice::from_ref(&limit)));
            return Err(format!("{flag} {shown}: {why}"));
        }
    }
    Ok(())
}

/// Whether the counts shared are within the range both backends keep
/// exactly ([`protocol::MOST_COUNT`], [`protocol::MOST_JOBS`]): each
/// budget's N, and the job limit.
///
/// # Errors
/// One line naming the flag and the count out of range.
pub fn counts_in_range(budgets: &[crate::budget::Budget], jobs: Option<u64>) -> Result<(), String> {
    if let Some(b) = budgets.iter().find(|b| b.count > protocol::MOST_COUNT) {
        return Err(format!(
            "--budget {b}: more than 2^51 ({}) a window, the most a shared budget counts",
            protocol::MOST_COUNT
        ));
    }
    match jobs {
        Some(n) if n > protocol::MOST_JOBS => Err(format!(
            "--share-jobs {n}: more than 2^53 ({}), the most jobs a shared limit counts",
            protocol::MOST_JOBS
        )),
        _ => Ok(()),
    }
}

/// Start the keeper of the limits per key (`table`), for the state
/// `handle` keeps; their schedule.
fn open_keys(
    share: &Share,
    table: KeyTable,
    origin: Instant,
    handle: &mut Handle,
) -> anyhow::Result<keys::SharedKeys> {
    let table = Arc::new(table);
    let store = store(share, &handle.spec, Vec::new(), Some(Arc::clone(&table)))?;
    let bell = handle.keeper.bell();
    let lease = Arc::new(Lease::with_bell(
        KeyLeases::new(Arc::clone(&table)),
        origin,
        bell,
    ));
    handle.keys = Some(Arc::clone(&lease));
    let name = format!("--share {} (limits per key)", handle.name);
    let voice = voice(share, name, LOST_PER_KEY);
    start_keeper(share, store, &lease, voice, handle, None)?;
    Ok(keys::SharedKeys::new(lease, &table, share.peers))
}

/// What a lost state lets through beyond the bound, as the message says
/// it: one burst, and the slots the drips had reserved and not yet used
/// (see `docs/sharing.md`).
const LOST_GLOBAL: &str = "one burst and the slots already reserved";
const LOST_PER_KEY: &str = "one burst and the slots already reserved, per key,";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacer::slack_for;
    use crate::schedule::Schedule;
    use gcra::{canonical, divided};

    const MS: u64 = 1_000_000;

    /// The same limits in any order are one spec, one order of `TAT`s.
    #[test]
    fn limits_in_any_order_are_shared_in_one() {
        let limit = |count: u128, period_ns: u128, burst: u64, unit: Unit| Limit {
            rate: Rate::Limited { count, period_ns },
            burst,
            unit,
        };
        let a = limit(100, 60_000_000_000, 5, Unit::Records);
        let b = limit(10, 1_000_000_000, 1, Unit::Records);
        let c = limit(2048, 1_000_000_000, 4096, Unit::Bytes);
        let d = limit(10, 1_000_000_000, 3, Unit::Records);
        let want = vec![a, b, d, c];
        for given in [[a, b, c, d], [c, d, b, a], [b, c, a, d], [d, a, c, b]] {
            assert_eq!(canonical(&given), want, "{given:?}");
        }
        assert_eq!(
            gcra::spec(&canonical(&[b, a])),
            gcra::spec(&canonical(&[a, b]))
        );
    }

    /// Under `local`, the byte limit paces alone (at the rate divided by
    /// the peers), sizes and all.
    #[test]
    fn local_mode_paces_bytes_alone() {
        let mut s = lease::tests::byte_schedule(&[]);
        s.local = Limits::new(&[divided(
            &Limit {
                rate: crate::rate::parse_byte_rate("1KB/s").unwrap(),
                burst: 100,
                unit: Unit::Bytes,
            },
            2,
        )]);
        s.lease.lock().status.mode = keeper::Mode::Local;
        // 500 bytes a second each: 100 bytes now, the next 100 in 200 ms.
        assert_eq!(
            s.release(0, 2, &mut [[b'x'; 100], [b'x'; 100]].iter().map(|r| &r[..])),
            1
        );
        assert_eq!(s.next_due(&[b'x'; 100]), 200 * MS);
        assert_eq!(s.lease.lock().wanted, 0);
    }

    /// A cost limit of `count` a second and `burst`.
    fn cost_limit(count: u128, burst: u64) -> Limit {
        Limit {
            rate: Rate::Limited {
                count,
                period_ns: 1_000_000_000,
            },
            burst,
            unit: Unit::Cost,
        }
    }

    /// Named cost limits sorted with their tags, and put back in the
    /// command line's order by what each spends, whatever order they are
    /// stored in: the lone pace and `drip ctl` see each under its name.
    #[test]
    fn tagged_cost_limits_go_back_to_the_command_lines_order() {
        let r = Limit::records(crate::rate::parse_rate("10/s").unwrap(), None);
        let given = [
            cost_limit(800, 100),
            r,
            cost_limit(200, 40),
            cost_limit(800, 100),
        ];
        let budget_tags = [
            Some("in".to_string()),
            Some("out".to_string()),
            Some("in+out".to_string()),
        ];
        let tags = tag_limits(&given, &budget_tags);
        assert_eq!(
            tags,
            [
                budget_tags[0].clone(),
                None,
                budget_tags[1].clone(),
                budget_tags[2].clone()
            ]
        );
        let (limits, sorted) = canonical_tagged(&given, &tags);
        assert_eq!(
            limits,
            [
                r,
                cost_limit(200, 40),
                cost_limit(800, 100),
                cost_limit(800, 100)
            ]
        );
        assert_eq!(
            sorted,
            [
                None,
                budget_tags[1].clone(),
                budget_tags[0].clone(),
                budget_tags[2].clone()
            ]
        );
        let lone = lone_order(&limits, &sorted, &budget_tags);
        assert_eq!(
            lone,
            [
                r,
                cost_limit(800, 100),
                cost_limit(200, 40),
                cost_limit(800, 100)
            ]
        );
        // The same set given in another order is one spec.
        let other = [given[2], given[3], given[1], given[0]];
        let other_tags = [
            budget_tags[1].clone(),
            budget_tags[2].clone(),
            None,
            budget_tags[0].clone(),
        ];
        let (l2, t2) = canonical_tagged(&other, &other_tags);
        assert_eq!(
            gcra::spec_tagged(&l2, &t2),
            gcra::spec_tagged(&limits, &sorted)
        );
        // Untagged (one weight): as given.
        assert_eq!(
            lone_order(&given, &[], &[None, None, None]),
            [r, given[0], given[2], given[3]]
        );
    }

    proptest::proptest! {
        /// Two named costs of different weights (`--cost-rate in=…
        /// --cost-rate out=…`, given in either order) shared through one
        /// state, the way `open` sets them up (tags, canonical order,
        /// meters, each weight's cost limit): a record asked for alone at
        /// each time leaves when a lone drip's limits (the local pacer,
        /// exact rationals) let it, never sooner, and later only by the
        /// shared arithmetic's rounding up (a nanosecond a slot at most)
        /// and the lone pacer's slacks (a record that comes up to a
        /// limit's slack after its time keeps that limit's lone schedule,
        /// where GCRA's restarts from it: `crate::pacer`; the departure
        /// the other limit then counts from is that much later, so the
        /// two limits' slacks add up: a seed where one limit's slack alone
        /// was the bound failed at 2.07 ms against 2 ms). A limit that one
        /// budget's cost spent (the other's, or both summed) fails it.
        #[test]
        fn two_named_costs_shared_leave_as_a_lone_drip_lets_them(
            (in_rate, in_burst, out_rate, out_burst) in (1u128..=2000, 1u64..=500, 1u128..=2000, 1u64..=500),
            records in proptest::collection::vec((0u64..=300, 0u64..=300, 0u64..=300), 1..40),
            out_first: bool,
        ) {
            use crate::cost::parse_one_cost;
            let costs = vec![
                (Some("in".to_string()), parse_one_cost("i").unwrap()),
                (Some("out".to_string()), parse_one_cost("o").unwrap()),
            ];
            let (mut given, mut names) = (
                vec![cost_limit(in_rate, in_burst), cost_limit(out_rate, out_burst)],
                vec![Some("in".to_string()), Some("out".to_string())],
            );
            if out_first {
                given.reverse();
                names.reverse();
            }
            let cost = Cost::with_budgets(costs, &names, None, b'\n').unwrap();
            let mut lone = Limits::new(&given).with_cost(cost.clone());
            let tags = tag_limits(&given, &budget_tags(Some(&cost)));
            let (limits, tags) = canonical_tagged(&given, &tags);
            let meters = gcra::meters(&limits, &tags);
            let budgets = weight_budgets(Some(&cost), &tags);
            proptest::prop_assert_eq!(budgets.len(), 2);
            let slack: i64 = given.iter().map(|l| slack_for(l.rate) as i64).sum();
            let mut g = gcra::Gcra::default();
            let mut now = 0u64;
            for (n, &(i, o, gap)) in records.iter().enumerate() {
                now += gap * MS;
                let record = format!("{{\"i\":{i},\"o\":{o}}}\n");
                let record = record.as_bytes();
                let due = lone.next_due(record).max(now);
                proptest::prop_assert_eq!(lone.release(due, 1, &mut std::iter::once(record)), 1);
                let w = lease::weigh(&cost, &budgets, &cost.estimates(record));
                let slot = g.reserve_within(&meters, now as i64, (1, &[w]), 0, None).unwrap()[0];
                let late = slot - due as i64;
                proptest::prop_assert!((0..=slack + 2 * (n as i64 + 1)).contains(&late),
                    "record {} ({} in, {} out): shared {} ns, lone {} ns", n, i, o, slot, due);
                now = due;
            }
        }
    }

    #[test]
    fn local_pace_divides_the_rate() {
        let l = Limit {
            rate: crate::rate::parse_rate("10/s").unwrap(),
            burst: 2,
            unit: crate::schedule::Unit::Records,
        };
        let d = divided(&l, 4);
        assert_eq!(d.rate.per_second(), 2.5);
        assert_eq!(d.burst, 2);
    }
}
