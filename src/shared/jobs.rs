//! A job limit shared by every drip on one NAME (`--share-jobs N`): at
//! most N jobs running at once across them all, through the state file
//! (on this host) or Redis (across hosts).
//!
//! Each running job holds a *lease* in the shared state: a member with an
//! expiry, [`LEASE_TTL`] after it was taken or last renewed. A lease is
//! taken only while fewer than N unexpired ones are held
//! ([`SharedJobs::acquire`], polling every [`POLL`] while the fleet is
//! full), given back when its job ends ([`SharedJobs::release`]), and
//! renewed by a thread of the drip's own every [`RENEW_EVERY`]. So the
//! leases of a drip that died (`kill -9`, a lost host) lapse at most
//! [`LEASE_TTL`] after its last renewal, and the fleet gets that capacity
//! back then.
//!
//! In the file, `NAME.jobs.json` (beside `NAME.json`, under the lock of
//! `NAME.jobs.json.lock`) holds the members and their expiries on
//! `CLOCK_MONOTONIC`; in Redis the sorted set `drip:{NAME}:jobs` holds
//! them, scored by their expiry on the server's clock, changed only by
//! `jobs.lua`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;
use rustix::fs::{flock, FlockOperation};
use serde::{Deserialize, Serialize};

use super::protocol::Failure;
use super::redis::RedisStore;
use super::target::Target;

/// How long a lease holds without a renewal: a dead holder's jobs stop
/// counting this long after its last renewal at the latest.
pub const LEASE_TTL: Duration = Duration::from_secs(5);

/// How often a drip renews the leases of its running jobs.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How often a drip whose job waits for a lease asks again while the
/// fleet is full.
pub const POLL: Duration = Duration::from_millis(100);

/// The script that changes the leases in Redis.
const SCRIPT: &str = include_str!("jobs.lua");

/// What a call does to the leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Take the lease of the one member given, if fewer than the limit
    /// are held.
    Acquire,
    /// Push the expiry of the members given on (or hold them again).
    Renew,
    /// Give the members given back.
    Release,
}

impl Op {
    fn word(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Renew => "renew",
            Op::Release => "release",
        }
    }
}

/// Where the leases are.
trait Place: Send {
    /// Do `op` on `members` under `limit`; whether it was done (an acquire
    /// may find the fleet full), and the leases held after it.
    fn call(&mut self, op: Op, limit: u64, members: &[String]) -> Result<(bool, u64), Failure>;
}

/// The leases in the file, as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    boot_id: String,
    /// Member → expiry, ns of `CLOCK_MONOTONIC`.
    leases: BTreeMap<String, i64>,
}

/// The leases of one NAME on this host: `NAME.jobs.json`.
struct FilePlace {
    path: PathBuf,
    boot_id: String,
}

/// `CLOCK_MONOTONIC` in ns.
fn monotonic() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}

fn ttl_ns() -> i64 {
    i64::try_from(LEASE_TTL.as_nanos()).unwrap_or(i64::MAX)
}

impl FilePlace {
    fn io(&self, e: &std::io::Error) -> Failure {
        Failure::Unreachable(format!("{}: {e}", self.path.display()))
    }
}

impl Place for FilePlace {
    fn call(&mut self, op: Op, limit: u64, members: &[String]) -> Result<(bool, u64), Failure> {
        if let Some(dir) = self.path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
        }
        let lock_path = self.path.with_extension("json.lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| self.io(&e))?;
        flock(&lock, FlockOperation::LockExclusive).map_err(|e| self.io(&e.into()))?;
        let now = monotonic();
        let mut stored: Stored = std::fs::read(&self.path)
            .ok()
            .and_then(|text| serde_json::from_slice(&text).ok())
            .filter(|s: &Stored| s.boot_id == self.boot_id)
            .unwrap_or_default();
        stored.leases.retain(|_, expiry| *expiry > now);
        let held = stored.leases.len() as u64;
        let done = match op {
            Op::Acquire if held >= limit => false,
            Op::Acquire | Op::Renew => {
                for m in members {
                    stored.leases.insert(m.clone(), now + ttl_ns());
                }
                true
            }
            Op::Release => {
                for m in members {
                    stored.leases.remove(m);
                }
                true
            }
        };
        stored.boot_id.clone_from(&self.boot_id);
        let text = serde_json::to_string(&stored).expect("plain data");
        // Written beside and renamed over: a drip killed mid-write leaves
        // the leases as they were.
        let beside = self.path.with_extension("json.tmp");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&beside)
            .map_err(|e| self.io(&e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| std::fs::rename(&beside, &self.path))
            .map_err(|e| self.io(&e))?;
        drop(lock);
        Ok((done, stored.leases.len() as u64))
    }
}

/// The leases of one NAME on a Redis server: `drip:{NAME}:jobs`.
struct RedisPlace {
    store: RedisStore,
    key: String,
    sha: String,
}

impl Place for RedisPlace {
    fn call(&mut self, op: Op, limit: u64, members: &[String]) -> Result<(bool, u64), Failure> {
        let mut args = vec![
            op.word().to_string(),
            limit.to_string(),
            LEASE_TTL.as_millis().to_string(),
        ];
        args.extend(members.iter().cloned());
        let keys = [self.key.clone()];
        let reply = self.store.eval_script(SCRIPT, &self.sha, &keys, &args)?;
        match reply.as_slice() {
            [Value::Int(done), Value::Int(held)] => {
                Ok((*done == 1, u64::try_from(*held).unwrap_or(0)))
            }
            _ => Err(Failure::Unreachable(format!("unexpected reply {reply:?}"))),
        }
    }
}

/// The leases this drip holds and what it saw of the fleet's.
struct Held {
    place: Box<dyn Place>,
    /// Members held now, one per running job.
    members: Vec<String>,
    /// Members made so far (each lease gets a new one).
    made: u64,
    /// The leases held across the fleet at the last call.
    fleet: u64,
    /// Times a job waited for a lease (the fleet was full).
    waits: u64,
    /// Calls that failed.
    failures: u64,
    /// A failure was said on stderr, and not yet that it passed.
    said: bool,
}

/// What `--stats`, `--metrics` and `drip ctl` show of the shared job
/// limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShareJobsFigures {
    /// N of `--share-jobs`.
    pub limit: u64,
    /// Leases this drip holds (its running jobs).
    pub held: u64,
    /// Leases held across every drip on the NAME, at the last call.
    pub fleet: u64,
    /// Times a job waited because the fleet was full.
    pub waits: u64,
    /// Calls to the shared state that failed.
    pub failed_calls: u64,
}

/// The shared job limit of one drip.
pub struct SharedJobs {
    limit: u64,
    name: String,
    quiet: bool,
    prefix: String,
    held: Mutex<Held>,
    closed: AtomicBool,
    /// The renewer sleeps on this, and is woken by [`SharedJobs::close`].
    renewer: (Mutex<()>, Condvar),
}

impl std::fmt::Debug for SharedJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedJobs")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .finish()
    }
}

impl SharedJobs {
    /// The job limit `limit` shared under `target`, its renewer started.
    ///
    /// # Errors
    /// A Redis URL redis-rs refuses; no thread for the renewer.
    pub fn open(target: &Target, limit: u64, quiet: bool) -> anyhow::Result<Arc<SharedJobs>> {
        let place: Box<dyn Place> = match target {
            Target::Host(name) => Box::new(FilePlace {
                path: super::file::state_dir().join(format!("{name}.jobs.json")),
                boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default(),
            }),
            Target::Redis { url, name } => Box::new(RedisPlace {
                store: RedisStore::new(url, name, String::new(), Vec::new(), None)
                    .map_err(|why| anyhow::anyhow!("--share {name}: {why}"))?,
                key: format!("drip:{{{name}}}:jobs"),
                sha: redis::Script::new(SCRIPT).get_hash().to_string(),
            }),
        };
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let prefix = format!(
            "{}:{}:{:08x}",
            host.trim(),
            std::process::id(),
            fastrand::u32(..)
        );
        let jobs = Arc::new(SharedJobs {
            limit,
            name: target.name().to_string(),
            quiet,
            prefix,
            held: Mutex::new(Held {
                place,
                members: Vec::new(),
                made: 0,
                fleet: 0,
                waits: 0,
                failures: 0,
                said: false,
            }),
            closed: AtomicBool::new(false),
            renewer: (Mutex::new(()), Condvar::new()),
        });
        let renewing = Arc::clone(&jobs);
        std::thread::Builder::new()
            .name("drip-job-leases".into())
            .spawn(move || renewing.renew_until_closed())?;
        Ok(jobs)
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Note a call's outcome: a failure is counted and said once on
    /// stderr (unless `-q`) until a call succeeds again.
    fn noted<T>(&self, held: &mut Held, r: Result<T, Failure>) -> Option<T> {
        match r {
            Ok(v) => {
                if std::mem::take(&mut held.said) && !self.quiet {
                    eprintln!("drip: --share {}: the job leases answer again", self.name);
                }
                Some(v)
            }
            Err(f) => {
                held.failures += 1;
                if !std::mem::replace(&mut held.said, true) && !self.quiet {
                    let why = match f {
                        Failure::Mismatch(w)
                        | Failure::Changed(w)
                        | Failure::Unreachable(w)
                        | Failure::Fatal(w) => w,
                    };
                    eprintln!(
                        "drip: --share {}: the job leases cannot be reached: {why}; no job starts until they answer (--share-jobs)",
                        self.name
                    );
                }
                None
            }
        }
    }

    /// Take a lease for a job, waiting while the fleet holds N (or the
    /// state does not answer), asking again every [`POLL`]; `false` once
    /// `stop` says so.
    pub fn acquire(&self, stop: &dyn Fn() -> bool) -> bool {
        let mut waited = false;
        loop {
            if stop() {
                return false;
            }
            {
                let mut held = self.lock();
                held.made += 1;
                let member = format!("{}:{}", self.prefix, held.made);
                let r = held
                    .place
                    .call(Op::Acquire, self.limit, std::slice::from_ref(&member));
                if let Some((done, fleet)) = self.noted(&mut held, r) {
                    held.fleet = fleet;
                    if done {
                        held.members.push(member);
                        return true;
                    }
                    if !std::mem::replace(&mut waited, true) {
                        held.waits += 1;
                    }
                }
            }
            std::thread::sleep(POLL);
        }
    }

    /// Give one lease back (a job ended); one not given back (the state
    /// did not answer) lapses within [`LEASE_TTL`].
    pub fn release(&self) {
        let mut held = self.lock();
        let Some(member) = held.members.pop() else {
            return;
        };
        let r = held.place.call(Op::Release, self.limit, &[member]);
        if let Some((_, fleet)) = self.noted(&mut held, r) {
            held.fleet = fleet;
        }
    }

    /// Give every lease back and stop renewing (drip is leaving).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.renewer.1.notify_all();
        let mut held = self.lock();
        let members = std::mem::take(&mut held.members);
        if !members.is_empty() {
            let _ = held.place.call(Op::Release, self.limit, &members);
        }
    }

    /// Renew the leases held every [`RENEW_EVERY`] until closed.
    fn renew_until_closed(&self) {
        loop {
            let guard = self.renewer.0.lock().unwrap_or_else(|e| e.into_inner());
            let _ = self
                .renewer
                .1
                .wait_timeout(guard, RENEW_EVERY)
                .unwrap_or_else(|e| e.into_inner());
            if self.closed.load(Ordering::Relaxed) {
                return;
            }
            let mut held = self.lock();
            let members = held.members.clone();
            let r = held.place.call(Op::Renew, self.limit, &members);
            if let Some((_, fleet)) = self.noted(&mut held, r) {
                held.fleet = fleet;
            }
        }
    }

    /// The figures for `--stats`, `--metrics` and `drip ctl`.
    pub fn figures(&self) -> ShareJobsFigures {
        let held = self.lock();
        ShareJobsFigures {
            limit: self.limit,
            held: held.members.len() as u64,
            fleet: held.fleet,
            waits: held.waits,
            failed_calls: held.failures,
        }
    }
}
