//! A job limit shared by every drip on one NAME (`--share-jobs N`): at
//! most N jobs running at once across them all, through the state file
//! (on this host) or Redis (across hosts).
//!
//! Each running job holds a *lease* in the shared state: a member with an
//! expiry, [`LEASE_TTL`] after it was taken or last renewed. A lease is
//! taken only while fewer than N unexpired ones are held
//! ([`SharedJobs::acquire`], polling every [`POLL`] while the fleet is
//! full), first come first served: a job that finds the fleet full waits
//! in a line kept in the state (its place held while it asks again within
//! [`WAIT_TTL`]), and a lease freed goes to the jobs at the head of the
//! line, whichever drip asks first; so a drip that gives a lease back and
//! asks again at once cannot starve one that polls. Leases are given back
//! when their jobs end ([`SharedJobs::release`]), and
//! renewed by a thread of the drip's own every [`RENEW_EVERY`]. So the
//! leases of a drip that died (`kill -9`, a lost host) lapse at most
//! [`LEASE_TTL`] after its last renewal, and the fleet gets that capacity
//! back then.
//!
//! In the file, `NAME.jobs.json` (beside `NAME.json`, under the lock of
//! `NAME.jobs.json.lock`) holds the members and their expiries on
//! `CLOCK_MONOTONIC`, and the line; in Redis the sorted set
//! `drip:{NAME}:jobs` holds them, scored by their expiry on the server's
//! clock, and `drip:{NAME}:jobs:waiting` and `…:asking` the line (by
//! arrival, and by when each waiting job stops counting), changed only by
//! `jobs.lua`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;
use serde::{Deserialize, Serialize};

use super::file::{locked, monotonic, write_over};
use super::protocol::Failure;
use super::redis::RedisStore;
use super::target::Target;
use crate::report::share_jobs::ShareJobsFigures;
use crate::sys::Unpoisoned;

/// How long a lease holds without a renewal: a dead holder's jobs stop
/// counting this long after its last renewal at the latest.
pub const LEASE_TTL: Duration = Duration::from_secs(5);

/// How often a drip renews the leases of its running jobs.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How often a drip whose job waits for a lease asks again while the
/// fleet is full.
pub const POLL: Duration = Duration::from_millis(100);

/// How long a job waiting for a lease keeps its place in the line without
/// asking again: a drip that died while its jobs waited holds the line
/// this long at most.
pub const WAIT_TTL: Duration = Duration::from_secs(1);

/// The script that changes the leases in Redis.
const SCRIPT: &str = include_str!("jobs.lua");

/// What a call does to the leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Take the lease of the one member given, if fewer than the limit
    /// are held and fewer members wait ahead of it than leases are free;
    /// else it waits in line (joining it at the back when new).
    Acquire,
    /// Push the expiry of the members given on (or hold them again).
    Renew,
    /// Give the members given back (or take them out of the line).
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

/// What a call answered: whether it was done (an acquire may find the
/// fleet full, or the state just lost), the leases held after it, the
/// state's epoch, and whether the state was lost since the caller's
/// epoch (the caller knew one, and it is gone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Answer {
    done: bool,
    held: u64,
    epoch: String,
    lost: bool,
}

/// Where the leases are.
trait Place: Send {
    /// Do `op` on `members` under `limit`, the caller knowing the state's
    /// epoch `known` (empty: none yet).
    fn call(
        &mut self,
        op: Op,
        limit: u64,
        members: &[String],
        known: &str,
    ) -> Result<Answer, Failure>;
}

/// The leases in the file, as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    boot_id: String,
    /// Member → expiry, ns of `CLOCK_MONOTONIC`.
    leases: BTreeMap<String, i64>,
    /// The jobs waiting for a lease: member → (arrival, when it stops
    /// counting unless it asks again), ns of `CLOCK_MONOTONIC`.
    #[serde(default)]
    waiting: BTreeMap<String, (i64, i64)>,
    /// Which life of the leases this is: made anew when the file is (a
    /// drip that knew another finds them lost).
    #[serde(default)]
    epoch: String,
    /// After a loss, no lease is taken before this (ns of
    /// `CLOCK_MONOTONIC`): the drips running jobs renew theirs first.
    #[serde(default)]
    quiet_until: i64,
}

impl Stored {
    /// Meet a caller that knows the epoch `known` at `now`: a state made
    /// anew (no epoch) gets one; one the caller knew under another epoch
    /// was lost, and takes no lease for a lease's length, while the drips
    /// running jobs renew theirs. Returns whether it was lost.
    fn meet(&mut self, known: &str, now: i64) -> bool {
        if self.epoch.is_empty() {
            self.epoch = format!("{:016x}", fastrand::u64(..));
        }
        let lost = !known.is_empty() && known != self.epoch;
        if lost {
            self.quiet_until = self.quiet_until.max(now + ttl_ns());
        }
        lost
    }

    /// Do `op` on `members` under `limit` at `now` (ns), the lapsed leases
    /// and waiting jobs dropped first; whether it was done.
    fn apply(&mut self, op: Op, limit: u64, members: &[String], now: i64) -> bool {
        self.leases.retain(|_, expiry| *expiry > now);
        self.waiting.retain(|_, (_, until)| *until > now);
        match op {
            Op::Acquire => {
                let Some(member) = members.first() else {
                    return false;
                };
                if now < self.quiet_until {
                    let arrived = self.waiting.get(member).map_or(now, |w| w.0);
                    self.waiting
                        .insert(member.clone(), (arrived, now + wait_ttl_ns()));
                    return false;
                }
                let arrived = self.waiting.get(member).map_or(now, |w| w.0);
                let ahead = self
                    .waiting
                    .iter()
                    .filter(|(m, w)| (w.0, *m) < (arrived, member))
                    .count() as u64;
                let free = limit.saturating_sub(self.leases.len() as u64);
                if ahead >= free {
                    self.waiting
                        .insert(member.clone(), (arrived, now + wait_ttl_ns()));
                    return false;
                }
                self.waiting.remove(member);
                self.leases.insert(member.clone(), now + ttl_ns());
            }
            Op::Renew => {
                for m in members {
                    self.leases.insert(m.clone(), now + ttl_ns());
                }
            }
            Op::Release => {
                for m in members {
                    self.leases.remove(m);
                    self.waiting.remove(m);
                }
            }
        }
        true
    }
}

/// The leases of one NAME on this host: `NAME.jobs.json`.
struct FilePlace {
    path: PathBuf,
}

fn ttl_ns() -> i64 {
    i64::try_from(LEASE_TTL.as_nanos()).unwrap_or(i64::MAX)
}

fn wait_ttl_ns() -> i64 {
    i64::try_from(WAIT_TTL.as_nanos()).unwrap_or(i64::MAX)
}

impl FilePlace {
    fn io(&self, e: &std::io::Error) -> Failure {
        Failure::Unreachable(format!("{}: {e}", self.path.display()))
    }
}

impl Place for FilePlace {
    fn call(
        &mut self,
        op: Op,
        limit: u64,
        members: &[String],
        known: &str,
    ) -> Result<Answer, Failure> {
        if let Some(dir) = self.path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
        }
        let lock_path = self.path.with_extension("json.lock");
        let lock = locked(&lock_path).map_err(|e| self.io(&e))?;
        let now = monotonic();
        // Read at each call: FreeBSD's moves with a step of the wall clock.
        let boot_id = crate::platform::host::boot_id();
        let mut stored: Stored = std::fs::read(&self.path)
            .ok()
            .and_then(|text| serde_json::from_slice(&text).ok())
            .filter(|s: &Stored| s.boot_id == boot_id)
            .unwrap_or_default();
        let lost = stored.meet(known, now);
        let done = stored.apply(op, limit, members, now);
        stored.boot_id = boot_id;
        let text = serde_json::to_string(&stored).expect("plain data");
        // Written beside and renamed over: a drip killed mid-write leaves
        // the leases as they were.
        let beside = self.path.with_extension("json.tmp");
        write_over(&self.path, &beside, text.as_bytes()).map_err(|e| self.io(&e))?;
        drop(lock);
        Ok(Answer {
            done,
            held: stored.leases.len() as u64,
            epoch: stored.epoch,
            lost,
        })
    }
}

/// The leases of one NAME on a Redis server: `drip:{NAME}:jobs`.
struct RedisPlace {
    store: RedisStore,
    /// The leases, the line by arrival, the line by when each stops
    /// counting, the epoch.
    keys: [String; 4],
    sha: String,
}

impl Place for RedisPlace {
    fn call(
        &mut self,
        op: Op,
        limit: u64,
        members: &[String],
        known: &str,
    ) -> Result<Answer, Failure> {
        let mut args = vec![
            op.word().to_string(),
            limit.to_string(),
            LEASE_TTL.as_millis().to_string(),
            WAIT_TTL.as_millis().to_string(),
            known.to_string(),
        ];
        args.extend(members.iter().cloned());
        let reply = self
            .store
            .eval_script(SCRIPT, &self.sha, &self.keys, &args)?;
        match reply.as_slice() {
            [Value::Int(done), Value::Int(held), Value::BulkString(epoch), Value::Int(lost)] => {
                Ok(Answer {
                    done: *done == 1,
                    held: u64::try_from(*held).unwrap_or(0),
                    epoch: String::from_utf8_lossy(epoch).into_owned(),
                    lost: *lost == 1,
                })
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
    /// The epoch of the leases' state as last heard (empty: none yet).
    epoch: String,
    /// A loss of the state was said on stderr.
    lost_said: bool,
}

impl Held {
    /// Do `op` on `members` under `limit`, the answer's epoch kept.
    fn call(&mut self, op: Op, limit: u64, members: &[String]) -> Result<Answer, Failure> {
        let answer = self.place.call(op, limit, members, &self.epoch)?;
        self.epoch.clone_from(&answer.epoch);
        Ok(answer)
    }
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
            }),
            Target::Redis { url, name } => Box::new(RedisPlace {
                store: RedisStore::new(url, name, String::new(), Vec::new(), None)
                    .map_err(|why| anyhow::anyhow!("--share {name}: {why}"))?,
                keys: [
                    format!("drip:{{{name}}}:jobs"),
                    format!("drip:{{{name}}}:jobs:waiting"),
                    format!("drip:{{{name}}}:jobs:asking"),
                    format!("drip:{{{name}}}:jobs:epoch"),
                ],
                sha: redis::Script::new(SCRIPT).get_hash().to_string(),
            }),
        };
        let prefix = format!(
            "{}:{}:{:08x}",
            crate::platform::host::host_name(),
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
                epoch: String::new(),
                lost_said: false,
            }),
            closed: AtomicBool::new(false),
            renewer: (Mutex::new(()), Condvar::new()),
        });
        let renewing = Arc::clone(&jobs);
        crate::sys::spawn("drip-job-leases", move || renewing.renew_until_closed())?;
        Ok(jobs)
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unpoisoned()
    }

    /// Note a call's outcome: a failure is counted and said once on
    /// stderr (unless `-q`) until a call succeeds again.
    fn noted(&self, held: &mut Held, r: Result<Answer, Failure>) -> Option<Answer> {
        match r {
            Ok(v) => {
                if std::mem::take(&mut held.said) && !self.quiet {
                    eprintln!("drip: --share {}: the job leases answer again", self.name);
                }
                if v.lost && !std::mem::replace(&mut held.lost_said, true) && !self.quiet {
                    eprintln!(
                        "drip: --share {}: the job leases' state was lost (flushed, restarted, removed): no new job starts for {} s while the drips' running jobs hold their leases again",
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
                        "drip: --share {}: the job leases cannot be reached: {why}; no job starts until they answer (--share-jobs)",
                        self.name
                    );
                }
                None
            }
        }
    }

    /// Take a lease for a job, waiting in line while the fleet holds N
    /// (or the state does not answer), asking again every [`POLL`];
    /// `false` once `stop` says so (its place in the line given up).
    pub fn acquire(&self, stop: &dyn Fn() -> bool) -> bool {
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
                    let r = held.call(Op::Release, self.limit, &[member]);
                    let _ = self.noted(&mut held, r);
                }
                return false;
            }
            {
                let mut held = self.lock();
                let r = held.call(Op::Acquire, self.limit, std::slice::from_ref(&member));
                if let Some(Answer {
                    done, held: fleet, ..
                }) = self.noted(&mut held, r)
                {
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
        let r = held.call(Op::Release, self.limit, &[member]);
        if let Some(answer) = self.noted(&mut held, r) {
            held.fleet = answer.held;
        }
    }

    /// Give every lease back and stop renewing (drip is leaving).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.renewer.1.notify_all();
        let mut held = self.lock();
        let members = std::mem::take(&mut held.members);
        if !members.is_empty() {
            let _ = held.call(Op::Release, self.limit, &members);
        }
    }

    /// Renew the leases held every [`RENEW_EVERY`] until closed.
    fn renew_until_closed(&self) {
        loop {
            let guard = self.renewer.0.lock().unpoisoned();
            let _ = self.renewer.1.wait_timeout(guard, RENEW_EVERY).unpoisoned();
            if self.closed.load(Ordering::Relaxed) {
                return;
            }
            let mut held = self.lock();
            let members = held.members.clone();
            let r = held.call(Op::Renew, self.limit, &members);
            if let Some(answer) = self.noted(&mut held, r) {
                held.fleet = answer.held;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str) -> Vec<String> {
        vec![name.to_string()]
    }

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_lease_freed_goes_to_the_job_waiting_first_not_to_the_one_that_asks_first() {
        let mut st = Stored::default();
        assert!(st.apply(Op::Acquire, 1, &m("a:1"), 0));
        // b waits; a gives its lease back and asks again at once.
        assert!(!st.apply(Op::Acquire, 1, &m("b:1"), S / 10));
        assert!(st.apply(Op::Release, 1, &m("a:1"), S / 10 + 1));
        assert!(!st.apply(Op::Acquire, 1, &m("a:2"), S / 10 + 2));
        // b, asking again, has it; a waits behind.
        assert!(st.apply(Op::Acquire, 1, &m("b:1"), S / 5));
        assert!(!st.apply(Op::Acquire, 1, &m("a:2"), S / 5 + 1));
        assert_eq!(st.leases.keys().collect::<Vec<_>>(), ["b:1"]);
        assert_eq!(st.waiting.keys().collect::<Vec<_>>(), ["a:2"]);
    }

    #[test]
    fn as_many_wait_as_leases_are_free_at_the_head_of_the_line() {
        let mut st = Stored::default();
        for (i, who) in ["a", "b", "c"].iter().enumerate() {
            assert!(st.apply(Op::Acquire, 3, &m(who), i as i64));
        }
        assert!(!st.apply(Op::Acquire, 3, &m("d"), 10));
        assert!(!st.apply(Op::Acquire, 3, &m("e"), 11));
        assert!(!st.apply(Op::Acquire, 3, &m("f"), 12));
        st.apply(Op::Release, 3, &[String::from("a"), String::from("b")], 20);
        // Two free: d and e may take them, in any order; f may not.
        assert!(!st.apply(Op::Acquire, 3, &m("f"), 21));
        assert!(st.apply(Op::Acquire, 3, &m("e"), 22));
        assert!(st.apply(Op::Acquire, 3, &m("d"), 23));
        assert!(!st.apply(Op::Acquire, 3, &m("f"), 24));
    }

    #[test]
    fn a_job_that_stops_asking_loses_its_place_after_the_wait_ttl() {
        let mut st = Stored::default();
        assert!(st.apply(Op::Acquire, 1, &m("a"), 0));
        assert!(!st.apply(Op::Acquire, 1, &m("dead"), 1));
        assert!(!st.apply(Op::Acquire, 1, &m("b"), 2));
        st.apply(Op::Release, 1, &m("a"), 3);
        // The dead drip's job holds the line until its place lapses.
        assert!(!st.apply(Op::Acquire, 1, &m("b"), 1 + wait_ttl_ns() - 1));
        assert!(st.apply(Op::Acquire, 1, &m("b"), 1 + wait_ttl_ns()));
    }

    #[test]
    fn a_job_given_up_leaves_the_line_at_once() {
        let mut st = Stored::default();
        assert!(st.apply(Op::Acquire, 1, &m("a"), 0));
        assert!(!st.apply(Op::Acquire, 1, &m("gone"), 1));
        assert!(!st.apply(Op::Acquire, 1, &m("b"), 2));
        st.apply(
            Op::Release,
            1,
            &[String::from("a"), String::from("gone")],
            3,
        );
        assert!(st.apply(Op::Acquire, 1, &m("b"), 4));
    }

    /// A state that a caller knew under another epoch was lost: no lease
    /// is taken for a lease's length, while the leases of the jobs still
    /// running are renewed (held again); a first caller finds nothing
    /// lost.
    #[test]
    fn a_lost_state_takes_no_lease_until_the_holders_renewed_theirs() {
        let mut st = Stored::default();
        assert!(!st.meet("", 0), "a first call loses nothing");
        let epoch = st.epoch.clone();
        assert!(!st.meet(&epoch, 1));
        // Flushed: made anew, met by a drip that knew the old one.
        let mut st = Stored::default();
        assert!(st.meet(&epoch, 10));
        assert_ne!(st.epoch, epoch);
        assert!(!st.apply(Op::Acquire, 2, &m("waiting:1"), 10));
        assert!(st.apply(
            Op::Renew,
            2,
            &[String::from("a:1"), String::from("a:2")],
            20
        ));
        assert!(!st.apply(Op::Acquire, 2, &m("waiting:1"), 10 + ttl_ns() - 1));
        // The two held again fill the limit; once one ends, the waiting
        // job has its lease.
        assert!(!st.apply(Op::Acquire, 2, &m("waiting:1"), 10 + ttl_ns()));
        st.apply(Op::Release, 2, &m("a:1"), 10 + ttl_ns() + 1);
        assert!(st.apply(Op::Acquire, 2, &m("waiting:1"), 10 + ttl_ns() + 2));
    }

    #[test]
    fn a_file_written_before_the_line_was_kept_still_reads() {
        let old = r#"{"boot_id":"x","leases":{"a":5}}"#;
        let st: Stored = serde_json::from_str(old).unwrap();
        assert_eq!(st.leases.len(), 1);
        assert!(st.waiting.is_empty());
    }
}
