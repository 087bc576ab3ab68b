//! The job limits shared by every drip on one NAME: `--share-jobs N`, at
//! most N jobs running at once across them all, and under `--share`
//! each key's job limit (`--key-jobs N`, a row's JOBS), at most N jobs of
//! that key at once across them all; through the state file (on this
//! host) or Redis (across hosts). Each is a *pool* of leases
//! ([`JobPool`]): the fleet's, or one key's, held to the limit each call
//! passes.
//!
//! Each running job holds a *lease* in its pool: a member with an
//! expiry, [`LEASE_TTL`] after it was taken or last renewed. A lease is
//! taken only while fewer than N unexpired ones are held
//! ([`SharedJobs::acquire`], polling every [`POLL`] while the pool is
//! full), first come first served: a job that finds the pool full waits
//! in a line kept in the state (its place held while it asks again within
//! [`super::protocol::WAIT_TTL`]), and a lease freed goes to the jobs at the head of the
//! line, whichever drip asks first; so a drip that gives a lease back and
//! asks again at once cannot starve one that polls. Leases are given back
//! when their jobs end ([`SharedJobs::release`]), and
//! renewed every [`RENEW_EVERY`] by the drip's keeper ([`Keeper`]). So the
//! leases of a drip that died (`kill -9`, a lost host) lapse at most
//! [`LEASE_TTL`] after its last renewal, and the fleet gets that capacity
//! back then.
//!
//! In the file, `NAME.jobs.json` (beside `NAME.json`, under the lock of
//! `NAME.jobs.json.lock`) holds the members and their expiries on
//! `CLOCK_MONOTONIC`, and the line, of each pool; in Redis the sorted set
//! `drip:{NAME}:jobs` (a key's: `drip:{NAME}:jobs:key:HEX`) holds them,
//! scored by their expiry on the server's clock, and `…:waiting` and
//! `…:asking` beside it the line (by arrival, and by when each waiting
//! job stops counting), changed only by `jobs.lua`. One epoch, for every
//! pool, tells a lost state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::backend;
use super::keeper::{Bell, Duty, Keeper, Losses, Poll};
use super::protocol::{Failure, JobLeases, JobOp, Store};
use super::target::Target;
use crate::report::share_jobs::ShareJobsFigures;
use crate::sys::Unpoisoned;

pub use super::protocol::{JobPool, LEASE_TTL};

/// How often a drip renews the leases of its running jobs.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How often a drip whose job waits for a lease asks again while the
/// fleet is full.
pub const POLL: Duration = Duration::from_millis(100);

/// The leases this drip holds in one pool.
#[derive(Debug, Default)]
struct Holding {
    /// The pool's limit at the last acquire (a renewal passes it on).
    limit: u64,
    /// Members held now, one per running job of the pool.
    members: Vec<String>,
}

/// The leases this drip holds and what it saw of the fleet's.
struct HeldJobs {
    store: Box<dyn Store>,
    /// The leases held now, by pool (a pool with none is not kept).
    pools: HashMap<JobPool, Holding>,
    /// Members made so far (each lease gets a new one).
    made: u64,
    /// The leases held across the fleet at the last call on its pool.
    fleet: u64,
    /// Times a job waited for a lease of the fleet's (it was full).
    waits: u64,
    /// Calls that failed.
    failures: u64,
    /// A failure was said on stderr, and not yet that it passed.
    said: bool,
    /// The epoch of the leases' state as last heard (empty: none yet).
    epoch: String,
}

impl HeldJobs {
    /// Do `op` on `members` of `pool` under `limit`, the answer's epoch
    /// kept.
    fn call(
        &mut self,
        pool: &JobPool,
        op: JobOp,
        limit: u64,
        members: &[String],
    ) -> Result<JobLeases, Failure> {
        let answer = self.store.jobs(pool, op, limit, members, &self.epoch)?;
        self.epoch.clone_from(&answer.epoch);
        if *pool == JobPool::Fleet {
            self.fleet = answer.held;
        }
        Ok(answer)
    }
}

/// The shared job limits of one drip: the fleet's and each key's pool.
pub struct SharedJobs {
    /// N of `--share-jobs`, when given (the fleet's pool is renewed every
    /// [`RENEW_EVERY`] then, held or not, for its figures).
    fleet: Option<u64>,
    name: String,
    quiet: bool,
    prefix: String,
    held: Mutex<HeldJobs>,
    closed: AtomicBool,
    /// The keeper's bell, rung by [`SharedJobs::close`]: the renewal is
    /// over.
    bell: Arc<Bell>,
    /// The drip's losses of the state, which a loss of the leases' is
    /// counted in.
    losses: Arc<Losses>,
}

impl std::fmt::Debug for SharedJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedJobs")
            .field("name", &self.name)
            .field("fleet", &self.fleet)
            .finish()
    }
}

impl SharedJobs {
    /// The job limits shared under `target`: the fleet's `fleet` (N of
    /// `--share-jobs`), and each key's as [`SharedJobs::acquire`] is
    /// given it; their renewal given to the keeper of the drip sharing
    /// the NAME ([`Keeper::of`]).
    ///
    /// # Errors
    /// A Redis URL redis-rs refuses; no thread for the keeper.
    pub fn open(
        target: &Target,
        fleet: Option<u64>,
        quiet: bool,
    ) -> anyhow::Result<Arc<SharedJobs>> {
        let store = backend::open(target, "", Vec::new(), None)
            .map_err(|why| anyhow::anyhow!("--share {}: {why}", target.name()))?;
        let keeper = Keeper::of(target.name());
        let prefix = format!(
            "{}:{}:{:08x}",
            crate::platform::host::host_name(),
            std::process::id(),
            fastrand::u32(..)
        );
        let jobs = Arc::new(SharedJobs {
            fleet,
            name: target.name().to_string(),
            quiet,
            prefix,
            held: Mutex::new(HeldJobs {
                store,
                pools: HashMap::new(),
                made: 0,
                fleet: 0,
                waits: 0,
                failures: 0,
                said: false,
                epoch: String::new(),
            }),
            closed: AtomicBool::new(false),
            bell: keeper.bell(),
            losses: keeper.losses(),
        });
        let renewing = Arc::clone(&jobs);
        keeper.add(Box::new(Renewal {
            jobs: renewing,
            next: Instant::now() + RENEW_EVERY,
        }))?;
        Ok(jobs)
    }

    fn lock(&self) -> MutexGuard<'_, HeldJobs> {
        self.held.lock().unpoisoned()
    }

    /// Note a call's outcome: a failure is counted and said once on
    /// stderr (unless `-q`) until a call succeeds again.
    fn noted(&self, held: &mut HeldJobs, r: Result<JobLeases, Failure>) -> Option<JobLeases> {
        match r {
            Ok(v) => {
                if std::mem::take(&mut held.said) && !self.quiet {
                    eprintln!("drip: --share {}: the job leases answer again", self.name);
                }
                if self.losses.heard("jobs", v.lost) && !self.quiet {
                    eprintln!(
                        "drip: --share {}: the shared state was lost (a restart or a flush); no new job starts for {} s while the drips' running jobs hold their leases again",
                        self.name,
                        LEASE_TTL.as_secs()
                    );
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
                        "drip: --share {}: the job leases cannot be reached: {why}; no job starts until they answer",
                        self.name
                    );
                }
                None
            }
        }
    }

    /// Take a lease of `pool` for a job, waiting in its line while the
    /// fleet holds `limit` of it (or the state does not answer), asking
    /// again every [`POLL`]; `false` once `stop` says so (its place in the
    /// line given up).
    pub fn acquire(&self, pool: &JobPool, limit: u64, stop: &dyn Fn() -> bool) -> bool {
        let mut waited = false;
        let member = {
            let mut held = self.lock();
            held.made += 1;
            format!("{}:{}", self.prefix, held.made)
        };
        loop {
            if stop() {
                if waited {
                    let mut held = self.lock();
                    let r = held.call(pool, JobOp::Release, limit, &[member]);
                    let _ = self.noted(&mut held, r);
                }
                return false;
            }
            {
                let mut held = self.lock();
                let r = held.call(pool, JobOp::Acquire, limit, std::slice::from_ref(&member));
                if let Some(JobLeases { done, .. }) = self.noted(&mut held, r) {
                    if done {
                        let holding = held.pools.entry(pool.clone()).or_default();
                        holding.limit = limit;
                        holding.members.push(member);
                        return true;
                    }
                    if !std::mem::replace(&mut waited, true) && *pool == JobPool::Fleet {
                        held.waits += 1;
                    }
                }
            }
            std::thread::sleep(POLL);
        }
    }

    /// Give one lease of `pool` back (a job ended); one not given back
    /// (the state did not answer) lapses within [`LEASE_TTL`].
    pub fn release(&self, pool: &JobPool) {
        let mut held = self.lock();
        let Some(holding) = held.pools.get_mut(pool) else {
            return;
        };
        let (limit, member) = (holding.limit, holding.members.pop());
        if holding.members.is_empty() {
            held.pools.remove(pool);
        }
        if let Some(member) = member {
            let r = held.call(pool, JobOp::Release, limit, &[member]);
            let _ = self.noted(&mut held, r);
        }
    }

    /// Give every lease back and stop renewing (drip is leaving).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.bell.notify_all();
        let mut held = self.lock();
        for (pool, holding) in std::mem::take(&mut held.pools) {
            let _ = held.call(&pool, JobOp::Release, holding.limit, &holding.members);
        }
    }

    /// Renew the leases held, one call a pool (the fleet's made with
    /// none, for its figures).
    fn renew(&self) {
        let mut held = self.lock();
        let mut pools: Vec<(JobPool, u64, Vec<String>)> = held
            .pools
            .iter()
            .map(|(pool, h)| (pool.clone(), h.limit, h.members.clone()))
            .collect();
        if let Some(n) = self
            .fleet
            .filter(|_| !held.pools.contains_key(&JobPool::Fleet))
        {
            pools.push((JobPool::Fleet, n, Vec::new()));
        }
        for (pool, limit, members) in pools {
            let r = held.call(&pool, JobOp::Renew, limit, &members);
            let _ = self.noted(&mut held, r);
        }
    }

    /// The figures of the fleet's pool for `--stats`, `--metrics` and
    /// `drip ctl`.
    pub fn figures(&self) -> ShareJobsFigures {
        let held = self.lock();
        let here = held.pools.get(&JobPool::Fleet);
        ShareJobsFigures {
            limit: self.fleet.unwrap_or(0),
            held: here.map_or(0, |h| h.members.len() as u64),
            fleet: held.fleet,
            waits: held.waits,
            failed_calls: held.failures,
        }
    }
}

/// The renewal of the leases a drip holds, a duty of its keeper: every
/// [`RENEW_EVERY`], until closed.
struct Renewal {
    jobs: Arc<SharedJobs>,
    next: Instant,
}

impl Duty for Renewal {
    fn poll(&mut self) -> Poll {
        if self.jobs.closed.load(Ordering::Relaxed) {
            return Poll::Done;
        }
        let left = self.next.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            return Poll::Idle(left);
        }
        self.next = Instant::now() + RENEW_EVERY;
        self.jobs.renew();
        Poll::Worked
    }
}
