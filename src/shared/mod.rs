//! One limit shared by many drips (`--share`): on one host through a state
//! file ([`file`]), across hosts through Redis ([`redis`]).
//!
//! The shared schedule is one GCRA per limit kept in the shared state
//! ([`gcra`]; in Redis by a Lua script running the same arithmetic on the
//! server's clock). Each drip *reserves* its next departure slots there and
//! sleeps on its own clock until each is due: [`SharedSchedule`] is the
//! [`Schedule`] admission and the writer see, pure over the local *lease*
//! of reserved slots, and a keeper thread ([`lease`]) does the reserving,
//! so no call under drip's state lock ever waits on the network.
//!
//! A slot lets one record go. When a limit counts bytes (`--byte-rate`),
//! each slot is reserved for the size of the waiting record it is for, and
//! costs the byte limits that size: it may carry any record of at most that
//! size, so every departure spent a slot reserved for at least its size and
//! the shared bound holds. A slot too small for the record at the head (the
//! queue changed since: a drop, an expiry, an eviction) is wasted (counted
//! as forfeited) and a slot for the real size is reserved.
//!
//! With `--key`, the limits per key are shared the same way, one GCRA per
//! key, by a keeper of their own ([`keys`]).

pub mod file;
pub mod gcra;
pub mod keys;
pub mod lease;
pub mod redis;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::keyed::KeyConfig;
use crate::pacer::{slack_for, Pacer};
use crate::rate::Rate;
use crate::schedule::{Limit, Limits, Schedule, Unit};
use crate::stats::{ShareCounts, ShareStats};
use lease::{LeaseState, SIZES_KEPT};

use lease::{Backend, Failure, Keeper, Lease, Mode, Retry, Voice};
pub use lease::{OnError, GIVE_BACK_WAIT};

/// A shared state outlives its schedule by this long (ns), then expires.
pub const EXPIRY_NS: i64 = 10_000_000_000;

/// How late (ns) a reserved slot may still be used: one emission interval
/// (`per_second`: slots a second at the tightest limit; for a slot
/// reserved for s bytes, a byte limit's rate / s), within 2 and 100 ms. A
/// wake-up that late puts at most one record more into a window (from
/// 500/s up, at most rate × 2 ms more, as a local schedule's slack does);
/// a slot later than that is forfeited (counted), as a local schedule
/// restarts after a stall, so a stalled drip never sends a catch-up burst.
fn late_ns(per_second: f64) -> u64 {
    (1e9 / per_second).clamp(2e6, 100e6) as u64
}

/// With no slot in the lease, the writer looks again this often (ns); the
/// keeper wakes it as soon as slots arrive.
const POLL_NS: u64 = 50_000_000;

/// Where the shared state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file on this host, by NAME.
    Host(String),
    /// A Redis (or Valkey) server: the redis-rs URL and the NAME.
    Redis {
        /// `redis://`, `rediss://` or `redis+unix://` URL without the NAME.
        url: String,
        /// The NAME.
        name: String,
    },
}

impl Target {
    /// The NAME shared.
    pub fn name(&self) -> &str {
        match self {
            Target::Host(name) | Target::Redis { name, .. } => name,
        }
    }
}

/// Everything `--share` and its companions say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Where.
    pub target: Target,
    /// What to do when the state cannot be reached.
    pub on_error: OnError,
    /// How many drips share (for `local`: each paces at rate / peers).
    pub peers: u64,
    /// No notices on stderr (`-q`): `wait` does not say it waits, `local`
    /// does not warn, a lost state is not reported (all still counted).
    pub quiet: bool,
}

/// The longest NAME, in characters (it is part of a file name and a key).
pub const NAME_MAX: usize = 200;

/// A NAME: letters, digits, `.`, `_`, `-`, `:`; not starting with `.`; at
/// most [`NAME_MAX`] characters.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if ok {
        Ok(())
    } else {
        let chars = name.chars().count();
        let (shown, long) = if chars > NAME_MAX {
            let shown: String = name.chars().take(40).collect();
            (
                format!("{shown}…"),
                format!(": {chars} characters, at most {NAME_MAX}"),
            )
        } else {
            (name.to_string(), String::new())
        };
        Err(format!(
            "'{shown}' is not a NAME{long} (1 to {NAME_MAX} letters, digits, '.', '_', '-', ':'; not starting with '.')"
        ))
    }
}

/// The accepted forms of a Redis `--share`, for messages.
const REDIS_FORMS: &str = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME, rediss://... (TLS) or redis+unix:///SOCKET/NAME[?db=DB]";

/// The host and port of a URL's `[USER[:PASSWORD]@]HOST[:PORT]`; the port
/// as written (empty: none).
fn host_port(authority: &str) -> (&str, &str) {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':').unwrap_or(rest)),
            None => (v6, ""),
        },
        None => host_port.split_once(':').unwrap_or((host_port, "")),
    }
}

/// A database number: decimal digits.
fn check_db(db: &str, text: &str) -> Result<(), String> {
    if !db.is_empty() && db.len() <= 9 && db.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!(
            "'{text}': '{db}' is not a database number (expected {REDIS_FORMS})"
        ))
    }
}

/// Check a TCP URL's `[USER[:PASSWORD]@]HOST[:PORT][/DB]` (`base`) and
/// refuse a query string (redis-rs would read only `protocol` from it).
fn check_tcp(written: &str, base: &str, query: &str, text: &str) -> Result<(), String> {
    let (authority, db) = base.split_once('/').unwrap_or((base, ""));
    let (host, port) = host_port(authority);
    if host.is_empty() {
        return Err(format!(
            "'{text}' names no HOST (expected {written}://HOST[:PORT][/DB]/NAME)"
        ));
    }
    if !port.is_empty() && !port.parse::<u16>().is_ok_and(|p| p > 0) {
        return Err(format!(
            "'{text}': '{port}' is not a port (1 to 65535; expected {REDIS_FORMS})"
        ));
    }
    if !db.is_empty() {
        check_db(db, text)?;
    }
    if !query.is_empty() {
        return Err(format!(
            "'{text}': a query string ('?{query}') is not read over TCP (expected {REDIS_FORMS})"
        ));
    }
    Ok(())
}

/// Check a `redis+unix` URL's query string: only `db`, `user` and `pass`
/// are read.
fn check_unix_query(query: &str, text: &str) -> Result<(), String> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("db", db)) => check_db(db, text)?,
            Some(("user" | "pass", _)) => {}
            _ => {
                return Err(format!(
                    "'{text}': '{pair}' is not read (a redis+unix:// query takes db=DB, user=USER and pass=PASSWORD)"
                ))
            }
        }
    }
    Ok(())
}

/// Parse `--share`: `NAME`, or `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME`
/// (also `rediss://`, `redis+unix:///SOCKET/NAME[?db=DB]`, and `valkey`
/// for `redis`). A URL is checked whole here, as redis-rs reads it,
/// without connecting.
pub fn parse_target(text: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = text.split_once("://") else {
        check_name(text)?;
        return Ok(Target::Host(text.to_string()));
    };
    let written = scheme;
    let scheme = match scheme {
        "redis" | "valkey" => "redis",
        "rediss" | "valkeys" => "rediss",
        "redis+unix" | "valkey+unix" => "redis+unix",
        _ => {
            return Err(format!(
                "unknown scheme '{scheme}://' (expected NAME, {REDIS_FORMS}; valkey for redis)"
            ))
        }
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let unix = scheme == "redis+unix";
    let form = if unix {
        format!("{written}:///SOCKET/NAME")
    } else {
        format!("{written}://HOST/NAME")
    };
    let Some((base, name)) = path.rsplit_once('/').filter(|(_, name)| !name.is_empty()) else {
        return Err(format!("'{text}' names no NAME (expected {form})"));
    };
    if unix {
        if base.is_empty() || !base.starts_with('/') {
            return Err(format!("'{text}' names no SOCKET (expected {form})"));
        }
        check_unix_query(query, text)?;
    } else {
        check_tcp(written, base, query, text)?;
    }
    check_name(name)?;
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let url = format!("{scheme}://{base}{query}");
    ::redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| {
        #[allow(deprecated)] // the one text of a redis-rs error without its kind
        let why = e
            .detail()
            .unwrap_or_else(|| std::error::Error::description(&e));
        format!("'{text}' is not a Redis URL ({why}; expected {REDIS_FORMS})")
    })?;
    Ok(Target::Redis {
        url,
        name: name.to_string(),
    })
}

/// Parse `--share-on-error`.
pub fn parse_on_error(text: &str) -> Result<OnError, String> {
    match text {
        "wait" => Ok(OnError::Wait),
        "local" => Ok(OnError::Local),
        "fail" => Ok(OnError::Fail),
        _ => Err("expected wait, local or fail".into()),
    }
}

/// What `--share-on-error` can say, for completion and help: (value,
/// meaning).
pub const SHARE_ON_ERROR: &[(&str, &str)] = &[
    (
        "wait",
        "send nothing, retry with backoff; records wait in the bucket",
    ),
    (
        "local",
        "pace alone at the rate divided by --share-peers, warn once",
    ),
    ("fail", "exit with status 4"),
];

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

/// The schedule of a drip sharing its limits: the slots of the lease, or,
/// while the shared state is out of reach under `local`, its own limits at
/// the rate divided by the peers.
#[derive(Debug)]
pub struct SharedSchedule {
    lease: Arc<Lease>,
    local: Limits,
    /// The tightest record limit, records per second (infinite: none).
    per_second: f64,
    /// The highest byte rate, bytes per second (infinite: none).
    bytes_per_second: f64,
    /// Some limit counts bytes: slots are reserved for sizes.
    weighs_bytes: bool,
    last_now: u64,
}

/// Of `available` records waiting in order (sizes from `sizes`), release
/// those whose slot is due at `now`, each on a slot reserved for at least
/// its size: a slot at the head too small for the record at the head is
/// wasted (forfeited). Then record what the records left waiting want:
/// how many the lease does not cover, and the sizes of the first of them.
fn release_sized(
    st: &mut LeaseState,
    now: u64,
    available: usize,
    sizes: &mut dyn Iterator<Item = usize>,
) -> usize {
    let mut sizes = sizes.take(available).map(|s| s as u64).peekable();
    let mut n = 0;
    while let Some(&size) = sizes.peek() {
        while st.slots.front().is_some_and(|&(_, tag)| tag < size) {
            st.slots.pop_front();
            st.forfeited += 1;
        }
        if !st.slots.front().is_some_and(|&(t, _)| t <= now) {
            break;
        }
        st.slots.pop_front();
        sizes.next();
        n += 1;
    }
    let covered = st.slots.len();
    st.wanted = (available - n).saturating_sub(covered);
    st.wanted_sizes.clear();
    st.wanted_sizes
        .extend(sizes.skip(covered).take(SIZES_KEPT.min(st.wanted)));
    n
}

impl Schedule for SharedSchedule {
    fn is_unlimited(&self) -> bool {
        false
    }

    fn weighs_bytes(&self) -> bool {
        self.weighs_bytes
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.mode == Mode::Local {
            return self.local.release(now, available, records);
        }
        while st
            .slots
            .front()
            .is_some_and(|&(t, tag)| t + self.late_ns(tag) < now)
        {
            st.slots.pop_front();
            st.forfeited += 1;
        }
        let before = st.wanted;
        let n = if self.weighs_bytes {
            release_sized(&mut st, now, available, &mut records.map(<[u8]>::len))
        } else {
            let mut n = 0;
            while n < available && st.slots.front().is_some_and(|&(t, _)| t <= now) {
                st.slots.pop_front();
                n += 1;
            }
            st.wanted = (available - n).saturating_sub(st.slots.len());
            n
        };
        if st.wanted > 0 && (before == 0 || st.slots.is_empty()) {
            self.lease.wake.notify_one();
        }
        n
    }

    fn next_due(&self, record: &[u8]) -> u64 {
        let size = record.len();
        let st = self.lease.lock();
        if st.mode == Mode::Local {
            return self.local.next_due(record);
        }
        match st.slots.front() {
            // Too small for this record: wasted at the next release.
            Some(&(_, tag)) if self.weighs_bytes && tag < size as u64 => self.last_now,
            Some(&(t, _)) => t,
            None => self.last_now.saturating_add(POLL_NS),
        }
    }

    fn slack_ns(&self) -> u64 {
        self.local.slack_ns()
    }

    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        let st = self.lease.lock();
        if st.mode == Mode::Local {
            return self.local.nth_due(record, n);
        }
        // The slots reserved: the later ones are not known yet.
        st.slots.get(n).map(|&(t, _)| t)
    }

    fn records_per_second(&self) -> f64 {
        if self.weighs_bytes {
            return f64::INFINITY;
        }
        self.per_second
    }
}

impl SharedSchedule {
    /// How late (ns) a slot reserved for `size` bytes may still be used
    /// ([`late_ns`]): one emission interval of the tightest record limit,
    /// and, with byte limits, no longer than the slot takes at the highest
    /// byte rate.
    fn late_ns(&self, size: u64) -> u64 {
        let mut per_second = self.per_second;
        if self.weighs_bytes {
            per_second = per_second.min(self.bytes_per_second / size.max(1) as f64);
        }
        late_ns(per_second)
    }
}

/// What is called when slots arrive (`false`: wake the writer) or drip
/// must stop (`true`).
pub type Notify = Box<dyn Fn(bool) + Send + Sync>;

/// The running share: the keepers' threads (one for the global limits, one
/// for the limits per key, each when shared) and what they report.
pub struct Handle {
    lease: Option<Arc<Lease>>,
    keys: Option<Arc<keys::KeysLease>>,
    keepers: Vec<JoinHandle<()>>,
    notify: Arc<Mutex<Option<Notify>>>,
    name: String,
    spec: String,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").field("name", &self.name).finish()
    }
}

impl Handle {
    /// Set what the keepers call when slots arrive or drip must stop.
    pub fn set_notify(&self, notify: Notify) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(notify);
    }

    /// Stop the keepers (they give back the slots reserved and unused,
    /// best effort) and return the error that stopped drip, if any:
    /// [`Disagreement`], [`Unreachable`] or [`Unusable`]. Waits for the
    /// keepers at most `bound` (a keeper blocked on a hung server is left
    /// behind, to end with the process), [`GIVE_BACK_WAIT`] at a stop, and
    /// not at all once `hurry` says so (a second signal).
    pub fn finish(&mut self, bound: Duration, hurry: &dyn Fn() -> bool) -> Option<anyhow::Error> {
        if let Some(lease) = &self.lease {
            lease.lock().closed = true;
            lease.wake.notify_all();
        }
        if let Some(keys) = &self.keys {
            keys.lock().closed = true;
            keys.wake.notify_all();
        }
        let until = Instant::now() + bound;
        while self.keepers.iter().any(|k| !k.is_finished()) && Instant::now() < until && !hurry() {
            std::thread::sleep(Duration::from_millis(1));
        }
        for keeper in self.keepers.drain(..) {
            if keeper.is_finished() {
                let _ = keeper.join();
            }
        }
        let global = self.lease.as_ref().and_then(|l| l.lock().fatal.clone());
        let per_key = self.keys.as_ref().and_then(|k| k.lock().fatal.clone());
        global.or(per_key).map(|f| self.error(f))
    }

    fn error(&self, failure: Failure) -> anyhow::Error {
        match failure {
            Failure::Mismatch(theirs) => Disagreement {
                name: self.name.clone(),
                ours: gcra::describe(&self.spec),
                theirs: gcra::describe(&theirs),
            }
            .into(),
            Failure::Unreachable(why) => Unreachable {
                name: self.name.clone(),
                why,
            }
            .into(),
            Failure::Fatal(why) => Unusable {
                name: self.name.clone(),
                why,
            }
            .into(),
        }
    }

    /// The counters for `--stats` and `--stats-json` now ([`Counters::stats`]).
    pub fn stats(&self) -> ShareStats {
        self.counters().stats()
    }

    /// Where the counters are, for reading them from another thread at any
    /// time (SIGUSR1), before and after [`Handle::finish`].
    pub fn counters(&self) -> Counters {
        Counters {
            lease: self.lease.clone(),
            keys: self.keys.clone(),
            name: self.name.clone(),
        }
    }
}

/// Where a [`Handle`]'s counters are ([`Handle::counters`]).
#[derive(Debug, Clone)]
pub struct Counters {
    lease: Option<Arc<Lease>>,
    keys: Option<Arc<keys::KeysLease>>,
    name: String,
}

impl Counters {
    /// The counters for `--stats` and `--stats-json`: reservations, slots
    /// forfeited, losses, failed calls, for the global limits and for the
    /// limits per key.
    pub fn stats(&self) -> ShareStats {
        let global = self.lease.as_ref().map(|l| {
            let st = l.lock();
            ShareCounts {
                reservations: st.reservations,
                slots_forfeited: st.forfeited,
                state_lost: st.lost,
                failed_calls: st.failures,
            }
        });
        let per_key = self.keys.as_ref().map(|k| {
            let st = k.lock();
            ShareCounts {
                reservations: st.reservations,
                slots_forfeited: st.forfeited,
                state_lost: st.lost,
                failed_calls: st.failures,
            }
        });
        ShareStats {
            name: self.name.clone(),
            global,
            per_key,
        }
    }
}

/// `limit` at its rate divided by `peers`.
fn divided(limit: &Limit, peers: u64) -> Limit {
    let rate = match limit.rate {
        Rate::Limited { count, period_ns } => Rate::Limited {
            count,
            period_ns: period_ns.saturating_mul(u128::from(peers.max(1))),
        },
        Rate::Unlimited => Rate::Unlimited,
    };
    Limit { rate, ..*limit }
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
    origin: Instant,
) -> anyhow::Result<Opened> {
    let limits = &canonical(limits);
    let key_limit = key.map(|k| Limit {
        rate: k.rate,
        burst: k.burst,
        unit: Unit::Records,
    });
    let spec = match &key_limit {
        Some(k) => gcra::spec_with_key(limits, k),
        None => gcra::spec(limits),
    };
    let name = share.target.name().to_string();
    let notify: Arc<Mutex<Option<Notify>>> = Arc::new(Mutex::new(None));
    let mut handle = Handle {
        lease: None,
        keys: None,
        keepers: Vec::new(),
        notify: Arc::clone(&notify),
        name: name.clone(),
        spec: spec.clone(),
    };
    let notify: Arc<dyn Fn(bool) + Send + Sync> = Arc::new(move |stop| {
        if let Some(f) = &*notify.lock().unwrap_or_else(|e| e.into_inner()) {
            f(stop);
        }
    });
    let schedule = if limits.is_empty() {
        None
    } else {
        Some(open_global(
            share,
            limits,
            &spec,
            origin,
            &notify,
            &mut handle,
        )?)
    };
    let keys = match &key_limit {
        Some(k) => Some(open_keys(share, k, &spec, origin, &notify, &mut handle)?),
        None => None,
    };
    Ok(Opened {
        schedule,
        keys,
        handle,
    })
}

/// The limits in one order, whatever order they were given in: records
/// before bytes, then the tightest rate first, then the smaller burst,
/// then by their [`gcra::spec`] text. Drips given the same set thus store
/// and compare the same spec, and keep the state's per-limit `TAT`s in
/// the same order.
fn canonical(limits: &[Limit]) -> Vec<Limit> {
    let mut sorted = limits.to_vec();
    sorted.sort_by(|a, b| {
        (a.unit == Unit::Bytes)
            .cmp(&(b.unit == Unit::Bytes))
            .then(a.rate.per_second().total_cmp(&b.rate.per_second()))
            .then(a.burst.cmp(&b.burst))
            .then_with(|| {
                gcra::spec(std::slice::from_ref(a)).cmp(&gcra::spec(std::slice::from_ref(b)))
            })
    });
    sorted
}

/// The backend of the global limits for `share`.
fn global_backend(
    share: &Share,
    spec: &str,
    meters: Vec<gcra::Meter>,
) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match &share.target {
        Target::Host(name) => Box::new(file::FileBackend::new(
            &file::state_dir(),
            name,
            spec.to_string(),
            meters,
        )),
        Target::Redis { url, name } => Box::new(
            redis::RedisBackend::new(url, name, spec.to_string(), meters)
                .map_err(|why| anyhow::anyhow!("--share {name}: {why}"))?,
        ),
    })
}

/// Start the keeper of the global limits; its schedule.
fn open_global(
    share: &Share,
    limits: &[Limit],
    spec: &str,
    origin: Instant,
    notify: &Arc<dyn Fn(bool) + Send + Sync>,
    handle: &mut Handle,
) -> anyhow::Result<SharedSchedule> {
    let meters: Vec<gcra::Meter> = limits.iter().map(gcra::Meter::of).collect();
    let weighs_bytes = meters.iter().any(gcra::Meter::weighs_bytes);
    let backend = global_backend(share, spec, meters.clone())?;
    let lease = Arc::new(Lease::new(origin));
    handle.lease = Some(Arc::clone(&lease));
    let mut keeper = Keeper {
        lease: Arc::clone(&lease),
        backend,
        on_error: share.on_error,
        meters,
        notify: Arc::clone(notify),
        voice: Voice::new(
            format!("--share {}", handle.name),
            share.on_error,
            share.quiet,
        ),
        retry: Retry::new(fastrand::Rng::new()),
    };
    keeper.hello().map_err(|failure| handle.error(failure))?;
    let per_second = limits
        .iter()
        .filter(|l| l.unit == Unit::Records)
        .map(|l| l.rate.per_second())
        .fold(f64::INFINITY, f64::min);
    let thread = std::thread::Builder::new()
        .name("drip-lease".into())
        .spawn(move || keeper.run())?;
    handle.keepers.push(thread);
    let local: Vec<Limit> = limits.iter().map(|l| divided(l, share.peers)).collect();
    Ok(SharedSchedule {
        lease,
        local: Limits::new(&local),
        per_second,
        bytes_per_second: limits
            .iter()
            .filter(|l| l.unit == Unit::Bytes)
            .map(|l| l.rate.per_second())
            .fold(0.0, f64::max),
        weighs_bytes,
        last_now: 0,
    })
}

/// Start the keeper of the limits per key (`key`); their schedule.
fn open_keys(
    share: &Share,
    key: &Limit,
    spec: &str,
    origin: Instant,
    notify: &Arc<dyn Fn(bool) + Send + Sync>,
    handle: &mut Handle,
) -> anyhow::Result<keys::SharedKeys> {
    let step = gcra::Step::of(key);
    let backend: Box<dyn keys::KeyBackend> = match &share.target {
        Target::Host(name) => Box::new(file::FileKeys::new(
            &file::state_dir(),
            name,
            spec.to_string(),
            step,
        )),
        Target::Redis { url, name } => Box::new(
            redis::RedisKeys::new(url, name, spec.to_string(), step)
                .map_err(|why| anyhow::anyhow!("--share {name}: {why}"))?,
        ),
    };
    let lease = Arc::new(keys::KeysLease::new(origin));
    handle.keys = Some(Arc::clone(&lease));
    let per_second = key.rate.per_second();
    let mut keeper = keys::Keeper {
        lease: Arc::clone(&lease),
        backend,
        on_error: share.on_error,
        per_second,
        notify: Arc::clone(notify),
        voice: Voice::new(
            format!("--share {} (limits per key)", handle.name),
            share.on_error,
            share.quiet,
        ),
        retry: Retry::new(fastrand::Rng::new()),
    };
    keeper.hello().map_err(|failure| handle.error(failure))?;
    let thread = std::thread::Builder::new()
        .name("drip-key-lease".into())
        .spawn(move || keeper.run())?;
    handle.keepers.push(thread);
    let local = divided(key, share.peers);
    let pacer = Pacer::new(local.rate, local.burst, slack_for(local.rate));
    Ok(keys::SharedKeys::new(lease, pacer, per_second))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of these sizes in bytes.
    fn sized(sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes.iter().map(|&n| vec![b'x'; n]).collect()
    }

    #[test]
    fn targets() {
        assert_eq!(parse_target("quota"), Ok(Target::Host("quota".into())));
        assert!(parse_target("a/b").is_err());
        assert!(parse_target(".hidden").is_err());
        assert!(parse_target("").is_err());
        let redis = |url: &str, name: &str| {
            Ok(Target::Redis {
                url: url.into(),
                name: name.into(),
            })
        };
        assert_eq!(parse_target("redis://h/api"), redis("redis://h", "api"));
        assert_eq!(
            parse_target("redis://h:6380/2/api"),
            redis("redis://h:6380/2", "api")
        );
        assert_eq!(parse_target("valkey://h/api"), redis("redis://h", "api"));
        #[cfg(feature = "tls")]
        assert_eq!(parse_target("rediss://h/api"), redis("rediss://h", "api"));
        assert_eq!(
            parse_target("redis+unix:///run/r.sock/api"),
            redis("redis+unix:///run/r.sock", "api")
        );
        assert_eq!(
            parse_target("redis+unix:///run/r.sock/api?db=3"),
            redis("redis+unix:///run/r.sock?db=3", "api")
        );
        assert_eq!(
            parse_target("redis://u:p@[::1]:6380/api"),
            redis("redis://u:p@[::1]:6380", "api")
        );
        let why = |text: &str| parse_target(text).unwrap_err();
        assert!(why("redis://h").contains("'redis://h' names no NAME"));
        assert!(why("redis://h/").contains("names no NAME"));
        assert!(why("redis:///q")
            .contains("'redis:///q' names no HOST (expected redis://HOST[:PORT][/DB]/NAME)"));
        assert!(why("valkey://:6379/q").contains("names no HOST (expected valkey://"));
        assert!(why("redis://u@/0/q").contains("names no HOST"));
        assert!(why("redis+unix:///q").contains("names no SOCKET"));
        assert!(parse_target("http://h/api").is_err());
    }

    /// A URL redis-rs would refuse only when connecting is refused when
    /// parsed, with what is wrong and the accepted forms.
    #[test]
    fn bad_urls_are_refused_when_parsed() {
        let why = |text: &str| parse_target(text).unwrap_err();
        for (text, says) in [
            (
                "redis://127.0.0.1:99999/x",
                "'99999' is not a port (1 to 65535",
            ),
            ("redis://h:0/x", "'0' is not a port"),
            ("redis://h:port/x", "'port' is not a port"),
            ("redis://h/abc/x", "'abc' is not a database number"),
            ("redis://h/1/2/x", "'1/2' is not a database number"),
            ("redis://h/-1/x", "'-1' is not a database number"),
            (
                "redis://h/x?timeout=1",
                "a query string ('?timeout=1') is not read",
            ),
            ("redis://h/0/x?db=1", "is not read over TCP"),
            ("redis+unix:///s/x?db=a", "'a' is not a database number"),
            ("redis+unix:///s/x?timeout=1", "'timeout=1' is not read"),
            ("redis+unix:///s/x?protocol=3", "'protocol=3' is not read"),
            (
                "redis://a b/x",
                "is not a Redis URL (Redis URL did not parse",
            ),
        ] {
            let got = why(text);
            assert!(got.contains(says), "{text}: {got}");
            assert!(
                got.contains(REDIS_FORMS) || got.contains("db=DB"),
                "{text}: {got}"
            );
        }
        assert!(why("redis+unix:///").contains("expected redis+unix:///SOCKET/NAME"));
        assert!(why("valkey+unix:///x").contains("expected valkey+unix:///SOCKET/NAME"));
        assert!(why("redis+unix://sock/x").contains("names no SOCKET"));
        let redis = |url: &str, name: &str| {
            Ok(Target::Redis {
                url: url.into(),
                name: name.into(),
            })
        };
        assert_eq!(
            parse_target("redis+unix:///s/x?db=2&pass=pw"),
            redis("redis+unix:///s?db=2&pass=pw", "x")
        );
        assert_eq!(
            parse_target("redis://:p%40w@h:6379/0/x"),
            redis("redis://:p%40w@h:6379/0", "x")
        );
    }

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

    /// A NAME too long says how long it is and how long it may be.
    #[test]
    fn a_long_name_is_refused_with_the_limit() {
        let long = "a".repeat(NAME_MAX + 1);
        let got = parse_target(&long).unwrap_err();
        assert!(
            got.contains("is not a NAME: 201 characters, at most 200"),
            "{got}"
        );
        assert!(got.contains("1 to 200 letters"), "{got}");
        assert!(got.len() < 200, "{got}");
        assert!(parse_target(&"a".repeat(NAME_MAX)).is_ok());
    }

    #[test]
    fn on_error_values() {
        assert_eq!(parse_on_error("wait"), Ok(OnError::Wait));
        assert_eq!(parse_on_error("local"), Ok(OnError::Local));
        assert_eq!(parse_on_error("fail"), Ok(OnError::Fail));
        assert!(parse_on_error("retry").is_err());
    }

    const MS: u64 = 1_000_000;

    fn byte_schedule(slots: &[(u64, u64)]) -> SharedSchedule {
        let lease = Arc::new(Lease::new(Instant::now()));
        lease.lock().slots.extend(slots.iter().copied());
        SharedSchedule {
            lease,
            local: Limits::new(&[Limit {
                rate: crate::rate::parse_byte_rate("1KB/s").unwrap(),
                burst: 1000,
                unit: Unit::Bytes,
            }]),
            per_second: f64::INFINITY,
            bytes_per_second: 1000.0,
            weighs_bytes: true,
            last_now: 0,
        }
    }

    /// Under a byte limit a slot carries a record of at most the size it
    /// was reserved for; one too small for the record at the head is
    /// wasted (forfeited), and the records the lease does not cover want
    /// slots for their sizes.
    #[test]
    fn a_slot_carries_a_record_of_at_most_its_size() {
        let mut s = byte_schedule(&[(0, 100), (0, 50), (10 * MS, 80)]);
        assert!(s.weighs_bytes());
        assert_eq!(s.records_per_second(), f64::INFINITY);
        let sizes = [100usize, 60, 80, 30];
        assert_eq!(
            s.release(0, 4, &mut sized(&sizes).iter().map(Vec::as_slice)),
            1
        );
        {
            let st = s.lease.lock();
            // The 50-byte slot was too small for the 60-byte record.
            assert_eq!(st.forfeited, 1);
            assert_eq!(st.slots, [(10 * MS, 80)]);
            // 60 has the 80-byte slot; 80 and 30 want theirs.
            assert_eq!(st.wanted, 2);
            assert_eq!(st.wanted_sizes, [80, 30]);
        }
        assert_eq!(s.next_due(&[b'x'; 60]), 10 * MS);
        // A record larger than the head slot (the queue changed) is due
        // at once: the next release wastes the slot and wants one for it.
        assert_eq!(s.next_due(&[b'x'; 90]), 0);
        assert_eq!(
            s.release(10 * MS, 2, &mut sized(&[90, 30]).iter().map(Vec::as_slice)),
            0
        );
        let st = s.lease.lock();
        assert_eq!(st.forfeited, 2);
        assert!(st.slots.is_empty());
        assert_eq!((st.wanted, st.wanted_sizes.clone()), (2, vec![90, 30]));
    }

    /// A smaller record may take a larger slot: the bound still holds.
    #[test]
    fn a_smaller_record_takes_a_larger_slot() {
        let mut s = byte_schedule(&[(0, 500), (MS, 500)]);
        assert_eq!(
            s.release(MS, 2, &mut sized(&[10, 490]).iter().map(Vec::as_slice)),
            2
        );
        let st = s.lease.lock();
        assert_eq!((st.forfeited, st.wanted), (0, 0));
        assert!(st.wanted_sizes.is_empty());
    }

    /// A slot reserved for s bytes may be used as late as it takes at the
    /// byte rate (within 2 and 100 ms), no later.
    #[test]
    fn a_byte_slot_may_be_as_late_as_it_is_long() {
        // At 1000 bytes a second: 50 bytes take 50 ms, 1 byte 1 ms (2).
        let mut s = byte_schedule(&[(0, 50), (0, 1), (0, 1)]);
        assert_eq!(
            s.release(40 * MS, 1, &mut sized(&[50]).iter().map(Vec::as_slice)),
            1
        );
        assert_eq!(
            s.release(41 * MS, 1, &mut sized(&[1]).iter().map(Vec::as_slice)),
            0
        );
        assert_eq!(s.lease.lock().forfeited, 2);
        let mut s = byte_schedule(&[(0, 50)]);
        assert_eq!(
            s.release(51 * MS, 1, &mut sized(&[50]).iter().map(Vec::as_slice)),
            0
        );
        assert_eq!(s.lease.lock().forfeited, 1);
    }

    /// Under `local`, the byte limit paces alone (at the rate divided by
    /// the peers), sizes and all.
    #[test]
    fn local_mode_paces_bytes_alone() {
        let mut s = byte_schedule(&[]);
        s.local = Limits::new(&[divided(
            &Limit {
                rate: crate::rate::parse_byte_rate("1KB/s").unwrap(),
                burst: 100,
                unit: Unit::Bytes,
            },
            2,
        )]);
        s.lease.lock().mode = Mode::Local;
        // 500 bytes a second each: 100 bytes now, the next 100 in 200 ms.
        assert_eq!(
            s.release(0, 2, &mut sized(&[100, 100]).iter().map(Vec::as_slice)),
            1
        );
        assert_eq!(s.next_due(&[b'x'; 100]), 200 * MS);
        assert_eq!(s.lease.lock().wanted, 0);
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
