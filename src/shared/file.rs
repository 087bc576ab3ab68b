//! The shared state on one host, with no server: a small JSON file under
//! `$XDG_RUNTIME_DIR/drip/` (or `/tmp/drip-$UID/`), read and written under
//! an exclusive `flock`. Times are `CLOCK_MONOTONIC`, the one clock every
//! process on the host shares; the boot id is stored with them, and a state
//! from an earlier boot is started afresh.
//!
//! The lock is taken on a file of its own (`NAME.json.lock`), and the
//! state is replaced whole ([`FileStore::replace`]), so a drip killed in
//! the middle of a call leaves the state as it was or as it became, never
//! a part of it.
//!
//! With limits per key, the file holds each busy key's schedule too
//! ([`KeyBook`]), under the same lock: keys whose schedule has rested are
//! pruned at every call, so the file holds the keys busy within about the
//! last second (some 40 bytes each), and each call reads and writes them
//! all: cost O(busy keys) per call, a few dozen calls a second per drip.

use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{flock, FlockOperation};
use serde::{Deserialize, Serialize};

use super::gcra::{hex, unhex, Gcra, KeyAsk, KeyBook, Meter, Settlement, Weight};
use super::key_table::step_of;
use super::protocol::{
    Ask, Back, Count, Counted, Failure, Grant, JobLeases, JobOp, JobPool, Mark, Reply, Store,
    Taken, EXPIRY_NS, KEPT_NS, LEASE_TTL, WAIT_TTL,
};
use crate::keyed::KeyTable;

/// Bytes of a page at the least (the kernel's smallest page): a write of
/// at most this at the start of a file lies within one page.
const PAGE: usize = 4096;

/// What the file holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    boot_id: String,
    limits: String,
    /// How many times `drip ctl` changed the limits (0: never, the limits
    /// are the first drip's command line's).
    #[serde(default)]
    gen: u64,
    seq: u64,
    tats: Vec<Option<i64>>,
    /// What the cost limits were charged, the latest slot granted and
    /// the state's life (`CLOCK_MONOTONIC` when it started, moved on by
    /// `drip ctl`), for settlements ([`Gcra::settle`]).
    #[serde(default)]
    charged: u64,
    /// What the limits spending the other weights of a slot were charged
    /// (cost limits spending different costs: [`super::gcra::Weight`]),
    /// the second weight's first; absent where only the first is used
    /// (a state drip wrote before slots carried several weights).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    charged_more: Vec<u64>,
    #[serde(default)]
    last: Option<i64>,
    #[serde(default)]
    life: u64,
    /// Each busy key's schedule (limits per key).
    #[serde(default)]
    keys: KeyBook,
}

/// The state file of one NAME.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    spec: String,
    meters: Vec<Meter>,
    /// The limits per key, when shared.
    keys: Option<Arc<KeyTable>>,
    /// Why the last call found a state file it could not read and started
    /// the state afresh, until taken ([`Store::unreadable`]).
    unreadable: Option<String>,
    /// A test clock (ns) instead of `CLOCK_MONOTONIC`.
    pub clock: Option<i64>,
}

/// The directory of the state files: `$XDG_RUNTIME_DIR/drip` when
/// `XDG_RUNTIME_DIR` is an absolute path to an existing directory (the XDG
/// Base Directory spec has a relative one ignored), else `/tmp/drip-$UID`.
/// Only this last directory is ever created (by [`FileStore`]).
pub fn state_dir() -> PathBuf {
    state_dir_in(std::env::var_os("XDG_RUNTIME_DIR").as_deref())
}

/// [`state_dir`] for the value `runtime` of `XDG_RUNTIME_DIR`.
fn state_dir_in(runtime: Option<&std::ffi::OsStr>) -> PathBuf {
    match runtime.map(Path::new) {
        Some(dir) if dir.is_absolute() && dir.is_dir() => dir.join("drip"),
        _ => PathBuf::from(format!("/tmp/drip-{}", rustix::process::getuid().as_raw())),
    }
}

/// What a failure to use the `what` (state file or directory) at `path`
/// is: a setup no retry
/// mends (a directory or file drip may not write, a path through a file or
/// to nothing, a read-only file system) is [`Failure::Fatal`]; anything
/// else (say a full disk) may pass and is [`Failure::Unreachable`].
pub(super) fn failure(what: &str, path: &Path, e: &std::io::Error) -> Failure {
    use rustix::io::Errno;
    let permanent = [
        Errno::ACCESS,
        Errno::PERM,
        Errno::ROFS,
        Errno::NOTDIR,
        Errno::NOENT,
        Errno::ISDIR,
        Errno::LOOP,
    ];
    let why = format!("{}: {e}", path.display());
    match Errno::from_io_error(e) {
        Some(errno) if permanent.contains(&errno) => {
            Failure::Fatal(format!("the {what} cannot be used: {why}"))
        }
        _ => Failure::Unreachable(why),
    }
}

/// Make the directory `dir` (mode 0700) when absent; whether it then is a
/// directory of this user's that only it may write to.
///
/// # Errors
/// As mkdir(2) (but for an existing `dir`) and lstat(2).
pub(super) fn own_dir(dir: &Path) -> std::io::Result<bool> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let mine = meta.uid() == rustix::process::getuid().as_raw();
    Ok(meta.is_dir() && mine && meta.mode() & 0o022 == 0)
}

/// `path` opened to write, made (mode 0600) when absent; `truncate`:
/// emptied.
///
/// # Errors
/// As open(2).
fn private(path: &Path, truncate: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o600);
    options.open(path)
}

/// The lock file `path`, made (mode 0600) when absent, held (an exclusive
/// `flock`) until the file returned is dropped.
///
/// # Errors
/// As open(2) and flock(2).
pub(super) fn locked(path: &Path) -> std::io::Result<File> {
    let file = private(path, false)?;
    flock(&file, FlockOperation::LockExclusive)?;
    Ok(file)
}

/// `text` written whole to `tmp` (made with mode 0600, emptied) and
/// renamed over `path`: a drip killed at any moment leaves `path` as it
/// was or as written, never part of it.
///
/// # Errors
/// As open(2), write(2) and rename(2).
pub(super) fn write_over(path: &Path, tmp: &Path, text: &[u8]) -> std::io::Result<()> {
    private(tmp, true)?.write_all(text)?;
    std::fs::rename(tmp, path)
}

/// `CLOCK_MONOTONIC` in ns.
pub(super) fn monotonic() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}

/// Whether `file`, open at `path`, is still the file `path` names: one
/// removed (a cleaner, a user's `rm`) and made again is another file,
/// which the others lock.
fn still_named(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
        _ => false,
    }
}

impl FileStore {
    /// The state of `name` in `dir`, for limits `spec` (all of them):
    /// the global limits' `meters`, and the key limit's step when the
    /// limits per key are shared.
    pub fn new(
        dir: &Path,
        name: &str,
        spec: String,
        meters: Vec<Meter>,
        keys: Option<Arc<KeyTable>>,
    ) -> FileStore {
        FileStore {
            path: dir.join(format!("{name}.json")),
            spec,
            meters,
            keys,
            unreadable: None,
            clock: None,
        }
    }

    /// Take the state's lock: open its lock file (`NAME.json.lock`, made
    /// if missing and never replaced, so every drip waits on the same one)
    /// and lock it; create the directory (mode 0700, not its parents) if
    /// needed. A directory another user owns, or others may write to, is
    /// refused ([`Failure::Fatal`]): they could change the schedule or swap
    /// the file. Errors as [`failure`] sorts them, naming the state file.
    fn lock(&self) -> Result<File, Failure> {
        if let Some(dir) = self.path.parent() {
            let own = own_dir(dir).map_err(|e| failure("state directory", dir, &e))?;
            if !own {
                return Err(Failure::Fatal(format!(
                    "the state directory cannot be used: {} is not a directory of this user's that only it may write to",
                    dir.display()
                )));
            }
        }
        let path = self.beside("lock", false);
        loop {
            let file = locked(&path).map_err(|e| failure("state file", &self.path, &e))?;
            if still_named(&file, &path) {
                // Its time kept fresh: a cleaner of old files in /tmp
                // leaves it be while drips use it.
                let _ = file.set_modified(std::time::SystemTime::now());
                return Ok(file);
            }
            // Removed or replaced while this drip waited for it: the
            // others now lock the file the name holds.
        }
    }

    /// The file beside the state's of this `suffix`: `NAME.json.SUFFIX`, or
    /// hidden, `.NAME.json.SUFFIX`.
    fn beside(&self, suffix: &str, hidden: bool) -> PathBuf {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let dot = if hidden { "." } else { "" };
        self.path.with_file_name(format!("{dot}{name}.{suffix}"))
    }

    /// The state file's bytes (none when there is no file), under the lock.
    fn read(&self) -> Result<Vec<u8>, Failure> {
        match std::fs::read(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            read => read.map_err(|e| failure("state file", &self.path, &e)),
        }
    }

    /// Replace the state with `text` whole, under the lock, where it was
    /// `old` bytes long. A drip killed at any moment (`kill -9`) leaves the
    /// old state or the new one, never an empty or partial file, which
    /// would read as no state at all: the schedule started afresh, as a
    /// lost state. Both within a page (the global limits, and a few dozen
    /// busy keys), it is one write at the start of the file, padded with
    /// spaces to the old length, and costs one system call: a write of
    /// one page from memory just written is in practice copied whole or
    /// not at all (Linux does not promise it in so many words).
    /// Larger, it is written beside (`.NAME.json.tmp`, which only the
    /// lock's holder writes) and renamed over the state.
    fn replace(&self, text: &str, old: usize) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if text.len() <= PAGE && old <= PAGE {
            let mut bytes = text.as_bytes().to_vec();
            bytes.resize(old.max(text.len()), b' ');
            return private(&self.path, false)?.write_all_at(&bytes, 0);
        }
        write_over(&self.path, &self.beside("tmp", true), text.as_bytes())
    }

    /// The state stored in `text`: none when it is empty (or blank: no
    /// drip has written it yet; or NULs: a file whose blocks a power cut
    /// never wrote, from before this boot, when no drip holds slots); an error saying why when it is not a
    /// state drip wrote (not UTF-8, not JSON, not drip's fields), which
    /// drip cannot use and no retry mends.
    fn parse(&self, text: &[u8]) -> Result<Option<Stored>, String> {
        if text.iter().all(|&b| b.is_ascii_whitespace() || b == 0) {
            return Ok(None);
        }
        serde_json::from_slice(text).map(Some).map_err(|e| {
            let what = if std::str::from_utf8(text).is_ok() {
                "not a state drip wrote"
            } else {
                "not text"
            };
            format!("{} was {what} ({e})", self.path.display())
        })
    }

    /// Run `step` on the state under the lock: the stored state (fresh:
    /// absent, from another boot, expired, or unreadable) and the clock's
    /// now. An unreadable state is a lost one: started afresh (the file
    /// replaced) and its cause kept for [`Store::unreadable`].
    fn with_state<T>(
        &mut self,
        step: impl FnOnce(&mut Gcra, &mut KeyBook, i64, bool) -> T,
    ) -> Result<T, Failure> {
        self.with_any_state(false, step)
    }

    /// [`FileStore::with_state`]; `relimit`: whatever the stored limits,
    /// store ours as changed by `drip ctl` (one more generation).
    fn with_any_state<T>(
        &mut self,
        relimit: bool,
        step: impl FnOnce(&mut Gcra, &mut KeyBook, i64, bool) -> T,
    ) -> Result<T, Failure> {
        let lock = self.lock()?;
        let text = self.read()?;
        let now = self.clock.unwrap_or_else(monotonic);
        // Read at each call: FreeBSD's moves with a step of the wall clock.
        let boot_id = crate::platform::host::boot_id();
        let stored = self.parse(&text).unwrap_or_else(|why| {
            self.unreadable = Some(why);
            None
        });
        let live = stored.filter(|s| {
            s.boot_id == boot_id
                && s.tats
                    .iter()
                    .flatten()
                    .copied()
                    .chain(s.keys.idle_from())
                    .max()
                    .map_or(true, |t| now < t + EXPIRY_NS)
        });
        if let Some(s) = live.as_ref().filter(|s| s.limits != self.spec && !relimit) {
            return Err(if s.gen > 0 {
                Failure::Changed(s.limits.clone())
            } else {
                Failure::Mismatch(s.limits.clone())
            });
        }
        let fresh = live.is_none();
        let stored = live.unwrap_or_default();
        let gen = stored.gen + u64::from(relimit);
        let mut gcra = Gcra {
            tats: stored.tats,
            seq: stored.seq,
            charged: Weight(std::array::from_fn(|c| match c {
                0 => stored.charged,
                c => stored.charged_more.get(c - 1).copied().unwrap_or(0),
            })),
            last: stored.last,
            life: if fresh {
                now.unsigned_abs()
            } else {
                stored.life
            },
        };
        let mut keys = stored.keys;
        keys.prune(now);
        let out = step(&mut gcra, &mut keys, now, fresh);
        let new = Stored {
            boot_id,
            limits: self.spec.clone(),
            gen,
            seq: gcra.seq,
            tats: gcra.tats,
            charged: gcra.charged.0[0],
            charged_more: {
                let mut more = gcra.charged.0[1..].to_vec();
                while more.last() == Some(&0) {
                    more.pop();
                }
                more
            },
            last: gcra.last,
            life: gcra.life,
            keys,
        };
        let new_text = serde_json::to_string(&new).expect("plain data");
        self.replace(&new_text, text.len())
            .map_err(|e| failure("state file", &self.path, &e))?;
        drop(lock);
        Ok(out)
    }
}

impl Store for FileStore {
    fn hello(&mut self) -> Result<bool, Failure> {
        self.with_state(|_, _, _, fresh| fresh)
    }

    fn reserve(&mut self, asks: &[Ask<'_>], horizon: i64) -> Result<Reply, Failure> {
        let (meters, table) = (self.meters.clone(), self.keys.clone());
        self.with_state(|g, book, now, fresh| {
            let mark = Mark {
                charged: g.charged,
                life: g.life,
            };
            let mut not_yet = None;
            let grants = asks
                .iter()
                .map(|ask| {
                    let (seq, slots) = match (ask.key, &table) {
                        (Some(key), Some(table)) => {
                            let want = KeyAsk {
                                want: ask.want,
                                after: ask.after,
                                every: ask.every,
                            };
                            book.reserve_at(step_of(table, key), now, &hex(key), want, horizon)
                        }
                        _ => {
                            let want = (ask.want, ask.sizes);
                            match g.reserve_within(&meters, now, want, horizon, ask.within) {
                                Ok(slots) => (g.seq, slots),
                                Err(due) => {
                                    not_yet = Some(due - now);
                                    (g.seq, Vec::new())
                                }
                            }
                        }
                    };
                    Grant {
                        seq,
                        slots: slots.into_iter().map(|d| d - now).collect(),
                    }
                })
                .collect();
            Reply {
                now,
                fresh,
                grants,
                mark,
                not_yet,
            }
        })
    }

    fn settle(&mut self, settlements: &[Settlement]) -> Result<(), Failure> {
        let meters = self.meters.clone();
        self.with_state(|g, _, now, fresh| {
            for s in settlements {
                g.settle(&meters, now, s, fresh);
            }
        })
    }

    fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
        let (meters, table) = (self.meters.clone(), self.keys.clone());
        self.with_state(|g, book, _, fresh| {
            backs
                .iter()
                .map(|b| match (b.key, &table) {
                    (Some(key), Some(table)) => {
                        book.give_back(step_of(table, key), &hex(key), b.seq, b.first_unused)
                    }
                    _ => !fresh && g.give_back_sized(&meters, b.seq, b.first_unused, b.size),
                })
                .collect()
        })
    }

    fn relimit(&mut self) -> Result<(), Failure> {
        let (meters, table) = (self.meters.clone(), self.keys.clone());
        self.with_any_state(true, |g, book, now, _| {
            g.relimit(&meters, now);
            if let Some(table) = table {
                book.relimit(&|key| Some(step_of(&table, &unhex(key)?)), now);
            }
        })
    }

    fn adopt(&mut self, spec: String, meters: Vec<Meter>, keys: Option<Arc<KeyTable>>) {
        self.spec = spec;
        if self.keys.is_some() {
            self.keys = keys.or(self.keys.take());
        } else {
            self.meters = meters;
        }
    }

    fn unreadable(&mut self) -> Option<String> {
        self.unreadable.take()
    }

    /// Under the lock ([`Gcra::take`]).
    fn take(&mut self, size: Weight, within: i64) -> Result<Taken, Failure> {
        let meters = self.meters.clone();
        self.with_state(|g, _, now, _| {
            let (due, taken) = match g.take(&meters, now, size, within) {
                Ok(due) => (due, true),
                Err(due) => (due, false),
            };
            Taken {
                now,
                due: due - now,
                taken,
            }
        })
    }

    /// In `NAME.budget` ([`count_in`]).
    fn count(&mut self, call: &Count) -> Result<Counted, Failure> {
        count_in(&self.path.with_extension("budget"), call)
    }

    /// In `NAME.jobs.json` ([`jobs_in`]).
    fn jobs(
        &mut self,
        pool: &JobPool,
        op: JobOp,
        limit: u64,
        members: &[String],
        known: &str,
    ) -> Result<JobLeases, Failure> {
        jobs_in(
            &self.path.with_extension("jobs.json"),
            pool,
            op,
            limit,
            members,
            known,
        )
    }

    fn host_clock(&self) -> Option<i64> {
        Some(self.clock.unwrap_or_else(monotonic))
    }
}

/// The file `PATH.SUFFIX`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// The label of the count file's epoch line.
const EPOCH_LABEL: &str = "budget:epoch:";

/// A shared budget's count in the file at `path`: one line per window's
/// count (`budget:CALENDAR START END COUNT`), read and written whole under
/// an exclusive `flock` of `path.lock`; counts past their window's end by
/// [`KEPT_NS`] are dropped, and so are lines drip did not write (counted;
/// numbers drip never writes too).
/// A file that is not text (not UTF-8) is a lost count, started afresh,
/// as an unreadable `NAME.json` is; one made anew (removed, or not text)
/// gets a new epoch (a line `budget:epoch:HEX 0 END 0` that ends past
/// any window, so a drip of an older version keeps it), and a caller that
/// knew another finds the count lost and adds back what it holds of the
/// window ([`Count::holds`]); one drip cannot use (a directory, a
/// file it may not read or write, the lock's too) is [`Failure::Fatal`],
/// naming the path, as `NAME.json`'s is.
fn count_in(path: &Path, call: &Count) -> Result<Counted, Failure> {
    let label = format!("budget:{}", call.calendar);
    let dir_failure = |e: &std::io::Error| match path.parent() {
        Some(dir) => failure("state directory", dir, e),
        None => failure("shared budget's count file", path, e),
    };
    if let Some(dir) = path.parent() {
        if !own_dir(dir).map_err(|e| dir_failure(&e))? {
            return Err(Failure::Fatal(format!(
                "{}: the state directory is not a directory of this user's that only it may write to",
                dir.display()
            )));
        }
    }
    let lock_path = with_suffix(path, "lock");
    let lock =
        locked(&lock_path).map_err(|e| failure("shared budget's lock file", &lock_path, &e))?;
    let unusable = |e: &std::io::Error| failure("shared budget's count file", path, e);
    let mut counted = Counted::default();
    let text = match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(unusable(&e)),
        Ok(bytes) => String::from_utf8(bytes).unwrap_or_else(|_| {
            counted.garbled = true;
            String::new()
        }),
    };
    let mut kept = Vec::new();
    let mut found = 0;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let parsed = match fields[..] {
            // A window that ends past any time drip writes (its end and
            // the time a count is kept overflow) is no line of drip's.
            [l, s, e, c] => match (s.parse::<i128>(), e.parse::<i128>(), c.parse::<u64>()) {
                (Ok(s), Ok(e), Ok(c)) if e.checked_add(KEPT_NS).is_some() => Some((l, s, e, c)),
                _ => None,
            },
            _ => None,
        };
        let Some((l, s, e, c)) = parsed else {
            counted.passed_over += usize::from(!line.is_empty());
            continue;
        };
        if let Some(e) = l.strip_prefix(EPOCH_LABEL) {
            counted.epoch = e.to_string();
        } else if l == label && s == call.start {
            found = c;
        } else if e + KEPT_NS >= call.now {
            kept.push(line.to_string());
        }
    }
    counted.lost = !call.known.is_empty() && call.known != counted.epoch;
    if counted.epoch.is_empty() {
        counted.epoch = format!("{:016x}", fastrand::u64(..));
    }
    let held = if counted.lost { call.holds } else { 0 };
    let found = found
        .saturating_add(held)
        .saturating_add(call.owed)
        .saturating_sub(call.back);
    counted.granted = call.ask.min(call.count.saturating_sub(found));
    counted.after = found + counted.granted;
    kept.insert(
        0,
        format!("{EPOCH_LABEL}{} 0 {} 0", counted.epoch, i64::MAX),
    );
    kept.push(format!(
        "{label} {} {} {}",
        call.start, call.end, counted.after
    ));
    let text = kept.join("\n") + "\n";
    write_over(path, &with_suffix(path, "tmp"), text.as_bytes()).map_err(|e| unusable(&e))?;
    drop(lock);
    Ok(counted)
}

/// The leases of one pool in the file, and its line.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PoolLeases {
    /// Member → expiry, ns of `CLOCK_MONOTONIC`.
    leases: BTreeMap<String, i64>,
    /// The jobs waiting for a lease: member → (arrival, when it stops
    /// counting unless it asks again), ns of `CLOCK_MONOTONIC`.
    #[serde(default)]
    waiting: BTreeMap<String, (i64, i64)>,
}

/// The job leases in the file, as stored: the fleet's pool at the top (as
/// a drip wrote it before the keys had pools), each key's beside it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct JobsFile {
    boot_id: String,
    /// The fleet's (`--share-jobs`).
    #[serde(flatten)]
    fleet: PoolLeases,
    /// Each key's (`--key-jobs` under `--share`) that holds a lease or a
    /// waiting job, by the key's bytes in lowercase hex ([`hex`]); a pool
    /// left with neither is removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    keys: BTreeMap<String, PoolLeases>,
    /// Which life of the leases this is: made anew when the file is (a
    /// drip that knew another finds them lost).
    #[serde(default)]
    epoch: String,
    /// After a loss, no lease is taken before this (ns of
    /// `CLOCK_MONOTONIC`): the drips running jobs renew theirs first.
    #[serde(default)]
    quiet_until: i64,
}

fn ttl_ns() -> i64 {
    i64::try_from(LEASE_TTL.as_nanos()).unwrap_or(i64::MAX)
}

fn wait_ttl_ns() -> i64 {
    i64::try_from(WAIT_TTL.as_nanos()).unwrap_or(i64::MAX)
}

impl PoolLeases {
    /// Drop the leases lapsed at `now`, and the waiting jobs that stopped
    /// asking.
    fn lapse(&mut self, now: i64) {
        self.leases.retain(|_, expiry| *expiry > now);
        self.waiting.retain(|_, (_, until)| *until > now);
    }

    /// Do `op` on `members` under `limit` at `now` (ns), no lease taken
    /// while `quiet` (a loss's first lease length); whether it was done.
    fn apply(&mut self, op: JobOp, limit: u64, members: &[String], now: i64, quiet: bool) -> bool {
        match op {
            JobOp::Acquire => {
                let Some(member) = members.first() else {
                    return false;
                };
                let arrived = self.waiting.get(member).map_or(now, |w| w.0);
                let ahead = self
                    .waiting
                    .iter()
                    .filter(|(m, w)| (w.0, *m) < (arrived, member))
                    .count() as u64;
                let free = limit.saturating_sub(self.leases.len() as u64);
                if quiet || ahead >= free {
                    self.waiting
                        .insert(member.clone(), (arrived, now + wait_ttl_ns()));
                    return false;
                }
                self.waiting.remove(member);
                self.leases.insert(member.clone(), now + ttl_ns());
            }
            JobOp::Renew => {
                for m in members {
                    self.leases.insert(m.clone(), now + ttl_ns());
                }
            }
            JobOp::Release => {
                for m in members {
                    self.leases.remove(m);
                    self.waiting.remove(m);
                }
            }
        }
        true
    }
}

impl JobsFile {
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

    /// Do `op` on `members` of `pool` under `limit` at `now` (ns), the
    /// lapsed leases and waiting jobs of every pool dropped first, and
    /// the pool of each key left with neither removed after; whether it
    /// was done.
    fn apply(
        &mut self,
        pool: &JobPool,
        op: JobOp,
        limit: u64,
        members: &[String],
        now: i64,
    ) -> bool {
        let quiet = now < self.quiet_until;
        self.fleet.lapse(now);
        self.keys.values_mut().for_each(|p| p.lapse(now));
        let done = match pool {
            JobPool::Fleet => self.fleet.apply(op, limit, members, now, quiet),
            JobPool::Key(key) => {
                let leases = self.keys.entry(hex(key)).or_default();
                leases.apply(op, limit, members, now, quiet)
            }
        };
        self.keys
            .retain(|_, p| !(p.leases.is_empty() && p.waiting.is_empty()));
        done
    }

    /// The leases `pool` holds.
    fn held(&self, pool: &JobPool) -> u64 {
        let leases = match pool {
            JobPool::Fleet => Some(&self.fleet),
            JobPool::Key(key) => self.keys.get(&hex(key)),
        };
        leases.map_or(0, |p| p.leases.len() as u64)
    }
}

/// Do `op` on the job leases in the file at `path` (`NAME.jobs.json`,
/// under the lock of `NAME.jobs.json.lock`), their expiries on
/// `CLOCK_MONOTONIC`; an I/O error is [`Failure::Unreachable`].
fn jobs_in(
    path: &Path,
    pool: &JobPool,
    op: JobOp,
    limit: u64,
    members: &[String],
    known: &str,
) -> Result<JobLeases, Failure> {
    let io = |e: &std::io::Error| Failure::Unreachable(format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        let _ = DirBuilder::new().mode(0o700).create(dir);
    }
    let lock = locked(&with_suffix(path, "lock")).map_err(|e| io(&e))?;
    let now = monotonic();
    // Read at each call: FreeBSD's moves with a step of the wall clock.
    let boot_id = crate::platform::host::boot_id();
    let mut stored: JobsFile = std::fs::read(path)
        .ok()
        .and_then(|text| serde_json::from_slice(&text).ok())
        .filter(|s: &JobsFile| s.boot_id == boot_id)
        .unwrap_or_default();
    let lost = stored.meet(known, now);
    let done = stored.apply(pool, op, limit, members, now);
    stored.boot_id = boot_id;
    let text = serde_json::to_string(&stored).expect("plain data");
    // Written beside and renamed over: a drip killed mid-write leaves the
    // leases as they were.
    write_over(path, &with_suffix(path, "tmp"), text.as_bytes()).map_err(|e| io(&e))?;
    drop(lock);
    Ok(JobLeases {
        done,
        held: stored.held(pool),
        epoch: stored.epoch,
        lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::gcra::Step;

    const MS: i64 = 1_000_000;

    fn backend(dir: &Path, spec: &str) -> FileStore {
        let meters = vec![Meter::Records(Step {
            interval: 100 * MS,
            tolerance: 0,
        })];
        FileStore::new(dir, "quota", spec.into(), meters, None)
    }

    /// A lock file removed while a drip waited on it: the drip locks the
    /// file its name holds afterwards, the one every later drip locks,
    /// not the removed one no one else can reach.
    #[test]
    fn a_lock_file_removed_while_waited_on_is_not_the_one_taken() {
        let dir = tempfile::tempdir().unwrap();
        let store = backend(dir.path(), "r=10/s");
        let path = store.beside("lock", false);
        let held = store.lock().unwrap();
        let waiter = std::thread::spawn(move || {
            let file = store.lock().unwrap();
            let path = store.beside("lock", false);
            let named = std::fs::metadata(path).map(|m| m.ino()).ok();
            named == Some(file.metadata().unwrap().ino())
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        std::fs::remove_file(&path).unwrap();
        drop(held);
        assert!(waiter.join().unwrap(), "the removed lock file was taken");
    }

    /// One global ask of `want` slots.
    fn reserve(store: &mut FileStore, want: u64, horizon: i64) -> (u64, i64, bool, Vec<i64>) {
        let ask = Ask {
            key: None,
            want,
            sizes: &[],
            after: 0,
            every: 0,
            within: None,
        };
        let reply = store.reserve(&[ask], horizon).unwrap();
        let grant = reply.grants.into_iter().next().unwrap();
        (grant.seq, reply.now, reply.fresh, grant.slots)
    }

    fn give_back(store: &mut FileStore, seq: u64, first_unused: i64) -> bool {
        let back = Back {
            key: None,
            seq,
            first_unused,
            size: Weight::from(1),
        };
        store.give_back(&[back]).unwrap()[0]
    }

    /// A state file of garbage, binary or text, is a lost state: the
    /// call succeeds on a fresh state, says why (naming the file) once,
    /// and leaves the file a state drip reads again.
    #[test]
    fn an_unreadable_state_file_is_started_afresh_and_said() {
        let garbage: [(&[u8], &str); 3] = [
            (b"\xff\xfe\x00garbage\x80", "was not text"),
            (b"garbage{", "was not a state drip wrote"),
            (b"{\"seq\": 3}", "was not a state drip wrote"),
        ];
        for (bytes, why) in garbage {
            let dir = tempfile::tempdir().unwrap();
            let mut a = backend(dir.path(), "10/s");
            std::fs::write(&a.path, bytes).unwrap();
            assert!(a.hello().unwrap(), "{why}");
            let said = a.unreadable().expect("unreadable");
            assert!(said.contains(why), "{said}");
            assert!(said.contains(&a.path.display().to_string()), "{said}");
            assert_eq!(a.unreadable(), None, "said once");
            let (_, _, fresh, slots) = reserve(&mut a, 2, 1_000 * MS);
            assert!(!fresh);
            assert_eq!(slots.len(), 2);
            assert_eq!(a.unreadable(), None, "{why}: the file was not replaced");
        }
    }

    /// An empty or blank file (made, not yet written), or one of NULs, is
    /// no state, not an unreadable one.
    #[test]
    fn a_blank_state_file_is_no_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = backend(dir.path(), "10/s");
        std::fs::write(&a.path, b"  ").unwrap();
        assert!(a.hello().unwrap());
        assert_eq!(a.unreadable(), None);
        // A page of NULs (a power cut before its blocks were written).
        let dir = tempfile::tempdir().unwrap();
        let mut b = backend(dir.path(), "10/s");
        std::fs::write(&b.path, [0u8; 300]).unwrap();
        assert!(b.hello().unwrap());
        assert_eq!(b.unreadable(), None);
    }

    #[test]
    fn participants_share_one_schedule_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = backend(dir.path(), "10/s");
        let mut b = backend(dir.path(), "10/s");
        assert!(a.hello().unwrap());
        assert!(!b.hello().unwrap());
        let (seq_a, now_a, _, slots_a) = reserve(&mut a, 3, 250 * MS);
        assert_eq!(slots_a, vec![0, 100 * MS, 200 * MS]);
        let (seq_b, now_b, fresh_b, slots_b) = reserve(&mut b, 1, 0);
        // b's slot follows a's on the same clock.
        assert!(now_b + slots_b[0] >= now_a + 300 * MS);
        assert!(!fresh_b);
        // a cannot give back: b reserved since.
        assert!(!give_back(&mut a, seq_a, now_a + slots_a[1]));
        assert!(give_back(&mut b, seq_b, now_b + slots_b[0]));
    }

    #[test]
    fn different_limits_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = backend(dir.path(), "10/s");
        reserve(&mut a, 1, 0);
        let mut b = backend(dir.path(), "20/s");
        assert_eq!(b.hello(), Err(Failure::Mismatch("10/s".into())));
    }

    #[test]
    fn a_directory_others_may_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut a = backend(dir.path(), "10/s");
        match a.hello() {
            Err(Failure::Fatal(why)) => assert!(why.contains("only it may write"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A state directory drip may not use is a setup no retry mends:
    /// fatal, naming the path.
    #[test]
    fn an_unusable_state_directory_is_fatal_and_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // Through a file.
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        let mut a = backend(&plain.join("sub"), "10/s");
        assert_eq!(
            a.hello(),
            Err(Failure::Fatal(format!(
                "the state directory cannot be used: {}: Not a directory (os error 20)",
                plain.join("sub").display()
            )))
        );
        // Under a directory that is not there: only the last one is made.
        let mut b = backend(&dir.path().join("no/such"), "10/s");
        match b.hello() {
            Err(Failure::Fatal(why)) => assert!(why.contains("no/such: No such file"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(!dir.path().join("no").exists());
        // The state file is a directory.
        std::fs::create_dir(dir.path().join("quota.json")).unwrap();
        let mut c = backend(dir.path(), "10/s");
        match c.hello() {
            Err(Failure::Fatal(why)) => {
                assert!(why.contains("quota.json: Is a directory"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        // A directory drip may not write to (unless root, who writes anywhere).
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        if std::fs::write(locked.join("probe"), "").is_err() {
            let mut d = backend(&locked, "10/s");
            assert_eq!(
                d.hello(),
                Err(Failure::Fatal(format!(
                    "the state file cannot be used: {}: Permission denied (os error 13)",
                    locked.join("quota.json").display()
                )))
            );
        }
    }

    /// `XDG_RUNTIME_DIR` counts only when it is an absolute path to an
    /// existing directory.
    #[test]
    fn the_runtime_dir_must_exist_and_be_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = PathBuf::from(format!("/tmp/drip-{}", rustix::process::getuid().as_raw()));
        assert_eq!(
            state_dir_in(Some(dir.path().as_os_str())),
            dir.path().join("drip")
        );
        assert_eq!(state_dir_in(None), tmp);
        assert_eq!(state_dir_in(Some("".as_ref())), tmp);
        assert_eq!(state_dir_in(Some("/nonexistent/dir".as_ref())), tmp);
        // Relative, even when it names a directory from here.
        assert_eq!(state_dir_in(Some("src".as_ref())), tmp);
    }

    /// A drip killed (`kill -9`) in the middle of a call leaves the state
    /// whole (an empty or cut file would read as no state: the schedule
    /// started afresh, as a lost one). A child process (this test, run
    /// again) reserves as fast as it can and is killed at a random moment
    /// after its first reservation; each time, the file holds a whole state
    /// and its seq has moved on (so the kill did land mid-run).
    #[test]
    fn a_drip_killed_mid_call_leaves_the_state_whole() {
        const NAME: &str = "shared::file::tests::a_drip_killed_mid_call_leaves_the_state_whole";
        if let Some(dir) = std::env::var_os("DRIP_TEST_RESERVE_IN") {
            let mut child = backend(Path::new(&dir), "10/s");
            loop {
                reserve(&mut child, 1, 0);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let mut a = backend(dir.path(), "10/s");
        a.hello().unwrap();
        let seq_in = |path: &Path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            serde_json::from_str::<Stored>(&text).map(|s| s.seq)
        };
        // hello reserves nothing: each kill below must find the seq moved on.
        let mut seq = seq_in(&a.path).unwrap();
        let mut rng = fastrand::Rng::with_seed(19);
        for kill in 0..20 {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
                .env("DRIP_TEST_RESERVE_IN", dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // The kill lands mid-run: once the child has reserved (however
            // slow a loaded machine makes its start), at a random moment.
            let started = std::time::Instant::now();
            while seq_in(&a.path).map_or(true, |now| now <= seq) {
                let waited = started.elapsed();
                assert!(waited.as_secs() < 20, "kill {kill}: no reservation");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::thread::sleep(std::time::Duration::from_millis(rng.u64(0..40)));
            child.kill().unwrap();
            child.wait().unwrap();
            let text = std::fs::read_to_string(&a.path).unwrap_or_default();
            let whole = serde_json::from_str::<Stored>(&text);
            let after = whole.unwrap_or_else(|e| panic!("kill {kill} left {text:?}: {e}"));
            assert!(
                after.seq > seq,
                "kill {kill}: seq {} after {seq}",
                after.seq
            );
            seq = after.seq;
        }
    }

    /// Drips replacing the state one after another, each call under the
    /// lock: every slot follows the one before.
    #[test]
    fn drips_replacing_the_state_take_turns() {
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let mut store = backend(&dir, "10/s");
                    (0..50)
                        .map(|_| {
                            let (_, now, _, slots) = reserve(&mut store, 1, 0);
                            now + slots[0]
                        })
                        .collect::<Vec<i64>>()
                })
            })
            .collect();
        let mut all: Vec<i64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        for pair in all.windows(2) {
            assert!(pair[1] - pair[0] >= 100 * MS, "{all:?}");
        }
    }

    #[test]
    fn a_state_from_another_boot_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = backend(dir.path(), "10/s");
        reserve(&mut a, 5, 1000 * MS);
        let path = dir.path().join("quota.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let ours = format!(r#""boot_id":"{}""#, crate::platform::host::boot_id());
        assert!(text.contains(&ours), "{text}");
        let text = text.replace(&ours, r#""boot_id":"another boot""#);
        std::fs::write(&path, text).unwrap();
        let mut b = backend(dir.path(), "10/s");
        let (_, _, fresh, slots) = reserve(&mut b, 1, 0);
        assert!(fresh);
        assert_eq!(slots, vec![0]);
    }

    // The shared budgets' count file.

    /// In the file, what a drip granted itself alone is added to the
    /// window's count before the ask, and an ask is granted only within
    /// the budget: the count may pass it by what was owed, never by a
    /// grant.
    #[test]
    fn the_file_adds_what_is_owed_then_grants_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.budget");
        let now = 1_700_000_000_000_000_000;
        let end = now + 3_600_000_000_000;
        let call = |owed, ask| Count {
            calendar: "hour@UTC".into(),
            start: 0,
            end,
            count: 10,
            owed,
            back: 0,
            ask,
            now,
            ..Count::default()
        };
        let take = |c| {
            let counted = count_in(&path, &c).unwrap();
            assert_eq!((counted.passed_over, counted.garbled), (0, false));
            (counted.granted, counted.after)
        };
        assert_eq!(take(call(0, 3)), (3, 3));
        assert_eq!(take(call(2, 3)), (3, 8));
        assert_eq!(take(call(0, 5)), (2, 10));
        assert_eq!(take(call(4, 1)), (0, 14));
        // A leaving drip gives back what it did not send; never below 0.
        assert_eq!(
            take(Count {
                back: 6,
                ..call(0, 0)
            }),
            (0, 8)
        );
        assert_eq!(take(call(0, 5)), (2, 10));
        assert_eq!(
            take(Count {
                back: 99,
                ..call(0, 0)
            }),
            (0, 0)
        );
    }

    /// A call asking 4 of an hour's count of 10 at `now`, holding nothing.
    fn hour_call(now: i128) -> Count {
        Count {
            calendar: "hour@UTC".into(),
            start: 0,
            end: now + 3_600_000_000_000,
            count: 10,
            owed: 0,
            back: 0,
            ask: 4,
            now,
            ..Count::default()
        }
    }

    /// A count file of bytes that are not text is a lost count, started
    /// afresh; lines drip did not write are passed over and counted; a
    /// count file or a lock that is a directory can never be used.
    #[test]
    fn a_count_file_drip_cannot_read_is_lost_or_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.budget");
        let now = 1_700_000_000_000_000_000;
        let call = hour_call(now);
        std::fs::write(&path, b"budget:hour@UTC 0 1 9\n\xff\xfe\n").unwrap();
        let counted = count_in(&path, &call).unwrap();
        assert!(counted.garbled);
        assert_eq!((counted.granted, counted.after), (4, 4), "started afresh");
        std::fs::write(
            &path,
            "junk\nbudget:hour@UTC 0 x 1\n\nbudget:hour@UTC 0 1 2\n",
        )
        .unwrap();
        let counted = count_in(&path, &call).unwrap();
        assert_eq!(counted.passed_over, 2);
        assert_eq!((counted.granted, counted.after), (4, 6));
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        match count_in(&path, &call) {
            Err(Failure::Fatal(why)) => assert!(
                why.contains("count file cannot be used") && why.contains("q.budget"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir(&path).unwrap();
        let lock = dir.path().join("q.budget.lock");
        std::fs::remove_file(&lock).unwrap();
        std::fs::create_dir(&lock).unwrap();
        match count_in(&path, &call) {
            Err(Failure::Fatal(why)) => assert!(
                why.contains("lock file cannot be used") && why.contains("q.budget.lock"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A line whose window ends past any time drip writes is a line drip
    /// did not write: passed over, never added to (its end plus the time a
    /// count is kept overflowed, and the budget's keeper panicked).
    #[test]
    fn a_count_line_ending_past_any_time_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.budget");
        let now = 1_700_000_000_000_000_000;
        std::fs::write(&path, format!("budget:hour@UTC 7 {} 3\n", i128::MAX)).unwrap();
        let call = hour_call(now);
        let counted = count_in(&path, &call).unwrap();
        assert_eq!(counted.passed_over, 1);
        assert_eq!((counted.granted, counted.after), (4, 4));
        let text = std::fs::read_to_string(&path).unwrap();
        // The epoch's line first, then the one count.
        let (epoch, counts) = text.split_once('\n').unwrap();
        assert!(epoch.starts_with(EPOCH_LABEL), "{text}");
        assert_eq!(counts, format!("budget:hour@UTC 0 {} 4\n", call.end));
    }

    // The job leases' file.

    fn m(name: &str) -> Vec<String> {
        vec![name.to_string()]
    }

    const FLEET: JobPool = JobPool::Fleet;

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_lease_freed_goes_to_the_job_waiting_first_not_to_the_one_that_asks_first() {
        let mut st = JobsFile::default();
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("a:1"), 0));
        // b waits; a gives its lease back and asks again at once.
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("b:1"), S / 10));
        assert!(st.apply(&FLEET, JobOp::Release, 1, &m("a:1"), S / 10 + 1));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("a:2"), S / 10 + 2));
        // b, asking again, has it; a waits behind.
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("b:1"), S / 5));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("a:2"), S / 5 + 1));
        assert_eq!(st.fleet.leases.keys().collect::<Vec<_>>(), ["b:1"]);
        assert_eq!(st.fleet.waiting.keys().collect::<Vec<_>>(), ["a:2"]);
    }

    #[test]
    fn as_many_wait_as_leases_are_free_at_the_head_of_the_line() {
        let mut st = JobsFile::default();
        for (i, who) in ["a", "b", "c"].iter().enumerate() {
            assert!(st.apply(&FLEET, JobOp::Acquire, 3, &m(who), i as i64));
        }
        assert!(!st.apply(&FLEET, JobOp::Acquire, 3, &m("d"), 10));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 3, &m("e"), 11));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 3, &m("f"), 12));
        st.apply(
            &FLEET,
            JobOp::Release,
            3,
            &[String::from("a"), String::from("b")],
            20,
        );
        // Two free: d and e may take them, in any order; f may not.
        assert!(!st.apply(&FLEET, JobOp::Acquire, 3, &m("f"), 21));
        assert!(st.apply(&FLEET, JobOp::Acquire, 3, &m("e"), 22));
        assert!(st.apply(&FLEET, JobOp::Acquire, 3, &m("d"), 23));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 3, &m("f"), 24));
    }

    #[test]
    fn a_job_that_stops_asking_loses_its_place_after_the_wait_ttl() {
        let mut st = JobsFile::default();
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("a"), 0));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("dead"), 1));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("b"), 2));
        st.apply(&FLEET, JobOp::Release, 1, &m("a"), 3);
        // The dead drip's job holds the line until its place lapses.
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("b"), 1 + wait_ttl_ns() - 1));
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("b"), 1 + wait_ttl_ns()));
    }

    #[test]
    fn a_job_given_up_leaves_the_line_at_once() {
        let mut st = JobsFile::default();
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("a"), 0));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("gone"), 1));
        assert!(!st.apply(&FLEET, JobOp::Acquire, 1, &m("b"), 2));
        st.apply(
            &FLEET,
            JobOp::Release,
            1,
            &[String::from("a"), String::from("gone")],
            3,
        );
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("b"), 4));
    }

    /// A state that a caller knew under another epoch was lost: no lease
    /// is taken for a lease's length, while the leases of the jobs still
    /// running are renewed (held again); a first caller finds nothing
    /// lost.
    #[test]
    fn a_lost_state_takes_no_lease_until_the_holders_renewed_theirs() {
        let mut st = JobsFile::default();
        assert!(!st.meet("", 0), "a first call loses nothing");
        let epoch = st.epoch.clone();
        assert!(!st.meet(&epoch, 1));
        // Flushed: made anew, met by a drip that knew the old one.
        let mut st = JobsFile::default();
        assert!(st.meet(&epoch, 10));
        assert_ne!(st.epoch, epoch);
        assert!(!st.apply(&FLEET, JobOp::Acquire, 2, &m("waiting:1"), 10));
        assert!(st.apply(
            &FLEET,
            JobOp::Renew,
            2,
            &[String::from("a:1"), String::from("a:2")],
            20
        ));
        assert!(!st.apply(
            &FLEET,
            JobOp::Acquire,
            2,
            &m("waiting:1"),
            10 + ttl_ns() - 1
        ));
        // The two held again fill the limit; once one ends, the waiting
        // job has its lease.
        assert!(!st.apply(&FLEET, JobOp::Acquire, 2, &m("waiting:1"), 10 + ttl_ns()));
        st.apply(&FLEET, JobOp::Release, 2, &m("a:1"), 10 + ttl_ns() + 1);
        assert!(st.apply(
            &FLEET,
            JobOp::Acquire,
            2,
            &m("waiting:1"),
            10 + ttl_ns() + 2
        ));
    }

    fn key(k: &str) -> JobPool {
        JobPool::Key(k.as_bytes().into())
    }

    /// A key's pool is apart from the fleet's and from another key's, and
    /// held to the limit each call passes: a key at 1 lets a job of
    /// another key and of the fleet take theirs, and takes a second when a
    /// call says 2 (`drip ctl … key-jobs 2` reaches the next acquire).
    #[test]
    fn each_keys_pool_is_apart_and_held_to_the_limit_each_call_passes() {
        let mut st = JobsFile::default();
        assert!(st.apply(&key("a"), JobOp::Acquire, 1, &m("a:1"), 0));
        assert!(!st.apply(&key("a"), JobOp::Acquire, 1, &m("a:2"), 1));
        assert!(st.apply(&key("b"), JobOp::Acquire, 1, &m("b:1"), 2));
        assert!(st.apply(&FLEET, JobOp::Acquire, 1, &m("f:1"), 3));
        assert_eq!((st.held(&key("a")), st.held(&key("b"))), (1, 1));
        assert_eq!(st.held(&FLEET), 1);
        assert!(st.apply(&key("a"), JobOp::Acquire, 2, &m("a:2"), 4));
        assert_eq!(st.held(&key("a")), 2);
        // Lowered again: no lease until fewer than 1 are held.
        assert!(!st.apply(&key("a"), JobOp::Acquire, 1, &m("a:3"), 5));
        st.apply(&key("a"), JobOp::Release, 1, &m("a:1"), 6);
        assert!(!st.apply(&key("a"), JobOp::Acquire, 1, &m("a:3"), 7));
        st.apply(&key("a"), JobOp::Release, 1, &m("a:2"), 8);
        assert!(st.apply(&key("a"), JobOp::Acquire, 1, &m("a:3"), 9));
        // The key's bytes name its pool in hex.
        let names: Vec<&String> = st.keys.keys().collect();
        assert_eq!(names, ["61", "62"]);
    }

    /// A key's pool with no lease and no one waiting is removed: given
    /// back, or lapsed (its holder dead) and met by a call on any pool;
    /// the file does not grow with every key ever seen.
    #[test]
    fn a_keys_pool_left_empty_is_removed_from_the_file() {
        let mut st = JobsFile::default();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            assert!(st.apply(&key(k), JobOp::Acquire, 1, &m(k), i as i64));
        }
        // A job of c waits; a gives its lease back.
        assert!(!st.apply(&key("c"), JobOp::Acquire, 1, &m("c:2"), 3));
        st.apply(&key("a"), JobOp::Release, 1, &m("a"), 4);
        assert_eq!(st.keys.keys().collect::<Vec<_>>(), ["62", "63"]);
        // b's holder died: its lease lapses, and c's waiting job stops
        // asking; a call on the fleet's pool drops both pools.
        st.apply(&key("c"), JobOp::Release, 1, &m("c"), 5);
        let later = 5 + ttl_ns().max(wait_ttl_ns());
        assert_eq!(st.keys.len(), 2, "b held, c's line waits");
        assert!(st.apply(&FLEET, JobOp::Renew, 1, &[], later));
        assert!(st.keys.is_empty(), "{:?}", st.keys);
        let text = serde_json::to_string(&st).unwrap();
        assert!(!text.contains("keys"), "{text}");
    }

    /// After a loss, no lease of a key's pool is taken for a lease's
    /// length either, while the running jobs' are held again: one epoch
    /// for every pool.
    #[test]
    fn a_lost_state_takes_no_keys_lease_until_the_holders_renewed_theirs() {
        let mut st = JobsFile::default();
        assert!(st.meet("known", 10), "met by a drip that knew another");
        assert!(!st.apply(&key("a"), JobOp::Acquire, 2, &m("w"), 10));
        assert!(st.apply(&key("a"), JobOp::Renew, 2, &m("a:1"), 20));
        assert!(!st.apply(&key("a"), JobOp::Acquire, 2, &m("w"), 10 + ttl_ns() - 1));
        assert!(st.apply(&key("a"), JobOp::Acquire, 2, &m("w"), 10 + ttl_ns()));
        assert!(!st.meet(&st.epoch.clone(), 10 + ttl_ns()));
    }

    #[test]
    fn a_file_written_before_the_line_was_kept_still_reads() {
        let old = r#"{"boot_id":"x","leases":{"a":5}}"#;
        let st: JobsFile = serde_json::from_str(old).unwrap();
        assert_eq!(st.fleet.leases.len(), 1);
        assert!(st.fleet.waiting.is_empty() && st.keys.is_empty());
    }
}
