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
use std::time::Instant;

use crate::keyed::KeyConfig;
use crate::pacer::{slack_for, Pacer};
use crate::rate::Rate;
use crate::schedule::{Limit, Limits, Schedule, Unit};
use crate::stats::{ShareCounts, ShareStats};

pub use lease::OnError;
use lease::{Backend, Failure, Keeper, Lease, Mode, Retry, Voice};

/// A shared state outlives its schedule by this long (ns), then expires.
pub const EXPIRY_NS: i64 = 10_000_000_000;

/// How late (ns) a reserved slot may still be used: one emission interval,
/// within 2 and 100 ms. A wake-up that late puts at most one record more
/// into a window (from 500/s up, at most rate × 2 ms more, as a local
/// schedule's slack does); a slot later than that is forfeited (counted),
/// as a local schedule restarts after a stall, so a stalled drip never
/// sends a catch-up burst.
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

/// A NAME: letters, digits, `.`, `_`, `-`, `:`; not starting with `.`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a NAME (letters, digits, '.', '_', '-', ':'; not starting with '.')"
        ))
    }
}

/// The host of a URL's `[USER[:PASSWORD]@]HOST[:PORT][/DB]`.
fn host(base: &str) -> &str {
    let authority = base.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    }
}

/// Parse `--share`: `NAME`, or `redis://HOST[:PORT][/DB]/NAME` (also
/// `rediss://`, `redis+unix:///SOCKET/NAME`, and `valkey` for `redis`).
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
                "unknown scheme '{scheme}://' (expected NAME, redis://HOST[:PORT][/DB]/NAME, rediss://, redis+unix://SOCKET/NAME or valkey://)"
            ))
        }
    };
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, format!("?{query}")),
        None => (rest, String::new()),
    };
    let Some((base, name)) = path.rsplit_once('/').filter(|(_, name)| !name.is_empty()) else {
        return Err(format!(
            "'{text}' names no NAME (expected {written}://HOST/NAME)"
        ));
    };
    if scheme == "redis+unix" && base.is_empty() {
        return Err(format!(
            "'{text}' names no SOCKET (expected {written}:///SOCKET/NAME)"
        ));
    }
    if scheme != "redis+unix" && host(base).is_empty() {
        return Err(format!(
            "'{text}' names no HOST (expected {written}://HOST[:PORT][/DB]/NAME)"
        ));
    }
    check_name(name)?;
    Ok(Target::Redis {
        url: format!("{scheme}://{base}{query}"),
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
            "--share {}: this drip's limits ({}) differ from the shared ones ({}): wait until the shared state expires, {} s after its last use, or choose another NAME",
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

/// The schedule of a drip sharing its limits: the slots of the lease, or,
/// while the shared state is out of reach under `local`, its own limits at
/// the rate divided by the peers.
#[derive(Debug)]
pub struct SharedSchedule {
    lease: Arc<Lease>,
    local: Limits,
    per_second: f64,
    last_now: u64,
}

impl Schedule for SharedSchedule {
    fn is_unlimited(&self) -> bool {
        false
    }

    fn weighs_bytes(&self) -> bool {
        false
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        sizes: &mut dyn Iterator<Item = usize>,
    ) -> usize {
        self.last_now = now;
        let mut st = self.lease.lock();
        if st.mode == Mode::Local {
            return self.local.release(now, available, sizes);
        }
        let late = late_ns(self.per_second);
        while st.slots.front().is_some_and(|&t| t + late < now) {
            st.slots.pop_front();
            st.forfeited += 1;
        }
        let mut n = 0;
        while n < available && st.slots.front().is_some_and(|&t| t <= now) {
            st.slots.pop_front();
            n += 1;
        }
        let before = st.wanted;
        st.wanted = (available - n).saturating_sub(st.slots.len());
        if st.wanted > 0 && (before == 0 || st.slots.is_empty()) {
            self.lease.wake.notify_one();
        }
        n
    }

    fn next_due(&self, size: usize) -> u64 {
        let st = self.lease.lock();
        if st.mode == Mode::Local {
            return self.local.next_due(size);
        }
        st.slots
            .front()
            .copied()
            .unwrap_or(self.last_now.saturating_add(POLL_NS))
    }

    fn slack_ns(&self) -> u64 {
        self.local.slack_ns()
    }

    fn records_per_second(&self) -> f64 {
        self.per_second
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

    /// Stop the keepers (they give back the slots reserved and unused) and
    /// return the error that stopped drip, if any: [`Disagreement`] or
    /// [`Unreachable`].
    pub fn finish(&mut self) -> Option<anyhow::Error> {
        if let Some(lease) = &self.lease {
            lease.lock().closed = true;
            lease.wake.notify_all();
        }
        if let Some(keys) = &self.keys {
            keys.lock().closed = true;
            keys.wake.notify_all();
        }
        for keeper in self.keepers.drain(..) {
            let _ = keeper.join();
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

/// Start sharing `limits` (record limits) and, with `key`, the limits per
/// key, as `share` says; `origin` is drip's clock. Checks, before anything
/// is read, that the stored limits (all of them) agree with ours.
///
/// # Errors
/// [`Disagreement`] (exit status 2); [`Unreachable`] under `fail` (exit
/// status 4); a URL redis-rs refuses.
pub fn open(
    share: &Share,
    limits: &[Limit],
    key: Option<&KeyConfig>,
    origin: Instant,
) -> anyhow::Result<Opened> {
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

/// The backend of the global limits for `share`.
fn global_backend(
    share: &Share,
    spec: &str,
    steps: Vec<gcra::Step>,
) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match &share.target {
        Target::Host(name) => Box::new(file::FileBackend::new(
            &file::state_dir(),
            name,
            spec.to_string(),
            steps,
        )),
        Target::Redis { url, name } => Box::new(
            redis::RedisBackend::new(url, name, spec.to_string(), steps)
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
    let steps: Vec<gcra::Step> = limits.iter().map(gcra::Step::of).collect();
    let backend = global_backend(share, spec, steps)?;
    let lease = Arc::new(Lease::new(origin));
    handle.lease = Some(Arc::clone(&lease));
    let mut keeper = Keeper {
        lease: Arc::clone(&lease),
        backend,
        on_error: share.on_error,
        per_second: limits
            .iter()
            .map(|l| l.rate.per_second())
            .fold(f64::INFINITY, f64::min),
        notify: Arc::clone(notify),
        voice: Voice::new(
            format!("--share {}", handle.name),
            share.on_error,
            share.quiet,
        ),
        retry: Retry::new(fastrand::Rng::new()),
    };
    keeper.hello().map_err(|failure| handle.error(failure))?;
    let per_second = keeper.per_second;
    let thread = std::thread::Builder::new()
        .name("drip-lease".into())
        .spawn(move || keeper.run())?;
    handle.keepers.push(thread);
    let local: Vec<Limit> = limits.iter().map(|l| divided(l, share.peers)).collect();
    Ok(SharedSchedule {
        lease,
        local: Limits::new(&local),
        per_second,
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

    #[test]
    fn on_error_values() {
        assert_eq!(parse_on_error("wait"), Ok(OnError::Wait));
        assert_eq!(parse_on_error("local"), Ok(OnError::Local));
        assert_eq!(parse_on_error("fail"), Ok(OnError::Fail));
        assert!(parse_on_error("retry").is_err());
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
