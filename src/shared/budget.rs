//! `--budget` shared (`--share`): one count per calendar window for every
//! drip on the NAME, kept in the shared state under a name that holds the
//! window's start (`NAME:budget:WINDOW@ZONE:START`), so a count is never
//! carried into another window and lapses a little after its own ends.
//!
//! A [`Book`] is a drip's side of it ([`crate::budget::Allowance`]): what
//! each window has granted this drip and whether its count is spent. Its
//! keeper thread takes grants from the store as the local schedule asks:
//! each call adds to the window's count, atomically, no more than keeps it
//! within the budget's N (under the state file's lock, or in one Lua
//! script in Redis), so the drips together never pass N in a window, as
//! far as the shared count lasts (a flush resets it: see
//! `docs/sharing.md`). Grants a drip does not use before its window ends
//! are not given back: they only leave the others less.

use std::collections::BTreeMap;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use rustix::fs::{flock, FlockOperation};

use super::target::{Share, Target};
use crate::budget::{Allowance, Budget};

/// A window's count outlives the window's end by this long (ns).
const KEPT_NS: i128 = 10_000_000_000;

/// How long one call to Redis may take.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// One window as this drip sees it.
#[derive(Debug, Default, Clone, Copy)]
struct Slice {
    end: i128,
    granted: u64,
    wanted: u64,
    spent: bool,
    /// The shared count as last heard.
    counted: Option<u64>,
}

/// What the writer calls when a grant arrives.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Inner {
    windows: BTreeMap<i128, Slice>,
    wake: Option<Wake>,
}

/// This drip's grants of one shared budget, window by window.
#[derive(Default)]
pub struct Book {
    inner: Mutex<Inner>,
    asked: Condvar,
}

impl std::fmt::Debug for Book {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book").finish_non_exhaustive()
    }
}

impl Book {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Call `wake` whenever a grant arrives.
    pub fn set_wake(&self, wake: Wake) {
        self.lock().wake = Some(wake);
    }
}

impl Allowance for Book {
    fn granted(&self, start: i128) -> (u64, bool) {
        self.lock()
            .windows
            .get(&start)
            .map_or((0, false), |w| (w.granted, w.spent))
    }

    fn counted(&self, start: i128) -> Option<u64> {
        self.lock().windows.get(&start).and_then(|w| w.counted)
    }

    fn want(&self, start: i128, end: i128, total: u64) {
        let mut inner = self.lock();
        let w = inner.windows.entry(start).or_default();
        w.end = end;
        if total > w.wanted {
            w.wanted = total;
            if !w.spent && w.wanted > w.granted {
                self.asked.notify_all();
            }
        }
    }
}

/// Where a shared budget's counts live.
enum Place {
    /// A file on this host, beside the state file, under its own lock.
    File(PathBuf),
    /// Redis, one key per window.
    Redis {
        client: Box<redis::Client>,
        con: Option<redis::Connection>,
    },
}

/// Add up to `ask` to the count `label` of the window `[start, end)`
/// (ns since the Unix epoch) keeping it within `count`; returns what was
/// added and the count after.
const SCRIPT: &str = r"
local n = tonumber(ARGV[1])
local ask = tonumber(ARGV[2])
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local g = math.max(math.min(ask, n - c), 0)
if g > 0 then c = redis.call('INCRBY', KEYS[1], g) end
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return {g, c}
";

impl Place {
    /// Add up to `ask` to the window's count, within `count`: (added,
    /// the count after).
    fn take(
        &mut self,
        label: &str,
        (start, end): (i128, i128),
        count: u64,
        ask: u64,
    ) -> Result<(u64, u64), String> {
        match self {
            Place::File(path) => take_in_file(path, label, (start, end), count, ask)
                .map_err(|e| format!("{}: {e}", path.display())),
            Place::Redis { client, con } => {
                let result = take_in_redis(client, con, label, (start, end), count, ask);
                if result.is_err() {
                    *con = None;
                }
                result.map_err(|e| e.to_string())
            }
        }
    }
}

fn take_in_redis(
    client: &redis::Client,
    con: &mut Option<redis::Connection>,
    label: &str,
    (start, end): (i128, i128),
    count: u64,
    ask: u64,
) -> redis::RedisResult<(u64, u64)> {
    if con.is_none() {
        let c = client.get_connection_with_timeout(TIMEOUT)?;
        c.set_read_timeout(Some(TIMEOUT))?;
        c.set_write_timeout(Some(TIMEOUT))?;
        *con = Some(c);
    }
    let con = con.as_mut().expect("just made");
    let expire_ms = (end + KEPT_NS) / 1_000_000;
    redis::Script::new(SCRIPT)
        .key(format!("{label}:{start}"))
        .arg(count)
        .arg(ask)
        .arg(expire_ms.to_string())
        .invoke(con)
}

/// The wall clock, ns since the Unix epoch.
fn unix_now() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0))
}

/// The file `PATH.SUFFIX`.
fn beside(path: &std::path::Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// [`Place::take`] in the file at `path`: one line per window's count
/// (`LABEL START END COUNT`), read and written whole under an exclusive
/// `flock` of `path.lock`; counts past their window's end by [`KEPT_NS`]
/// are dropped.
fn take_in_file(
    path: &std::path::Path,
    label: &str,
    (start, end): (i128, i128),
    count: u64,
    ask: u64,
) -> std::io::Result<(u64, u64)> {
    if let Some(dir) = path.parent() {
        match DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir()
            || meta.uid() != rustix::process::getuid().as_raw()
            || meta.mode() & 0o022 != 0
        {
            return Err(std::io::Error::other(
                "the state directory is not a directory of this user's that only it may write to",
            ));
        }
    }
    let lock = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(beside(path, "lock"))?;
    flock(&lock, FlockOperation::LockExclusive)?;
    let mut text = String::new();
    match std::fs::File::open(path) {
        Ok(mut f) => {
            f.read_to_string(&mut text)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let now = unix_now();
    let mut kept = Vec::new();
    let mut found = 0;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [l, s, e, c] = fields[..] else { continue };
        let (Ok(s), Ok(e), Ok(c)) = (s.parse::<i128>(), e.parse::<i128>(), c.parse::<u64>()) else {
            continue;
        };
        if l == label && s == start {
            found = c;
        } else if e + KEPT_NS >= now {
            kept.push(line.to_string());
        }
    }
    let granted = ask.min(count.saturating_sub(found));
    let after = found + granted;
    kept.push(format!("{label} {start} {end} {after}"));
    let tmp = beside(path, "tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all((kept.join("\n") + "\n").as_bytes())?;
    std::fs::rename(&tmp, path)?;
    drop(lock);
    Ok((granted, after))
}

/// The keeper of one shared budget: takes what the book asks for.
struct Keeper {
    book: Weak<Book>,
    place: Place,
    label: String,
    count: u64,
    name: String,
    quiet: bool,
}

impl Keeper {
    /// The next window that wants more than it was granted: its start, end
    /// and how many more; waits for one up to 100 ms.
    fn next_ask(book: &Book) -> Option<(i128, i128, u64)> {
        let mut inner = book.lock();
        let find = |inner: &Inner| {
            inner
                .windows
                .iter()
                .find(|(_, w)| !w.spent && w.wanted > w.granted)
                .map(|(&s, w)| (s, w.end, w.wanted - w.granted))
        };
        if find(&inner).is_none() {
            inner = book
                .asked
                .wait_timeout(inner, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let now = unix_now();
        inner.windows.retain(|_, w| w.end + KEPT_NS >= now);
        find(&inner)
    }

    fn run(mut self) {
        let mut failing = false;
        let mut pause = Duration::from_millis(50);
        loop {
            let Some(book) = self.book.upgrade() else {
                return;
            };
            let Some((start, end, more)) = Keeper::next_ask(&book) else {
                continue;
            };
            match self.place.take(&self.label, (start, end), self.count, more) {
                Ok((granted, after)) => {
                    if failing && !self.quiet {
                        eprintln!(
                            "drip: --share {}: the shared budget answers again",
                            self.name
                        );
                    }
                    failing = false;
                    pause = Duration::from_millis(50);
                    let wake = {
                        let mut inner = book.lock();
                        if let Some(w) = inner.windows.get_mut(&start) {
                            w.granted += granted;
                            w.counted = Some(after);
                            w.spent |= granted < more || after >= self.count;
                        }
                        inner.wake.clone()
                    };
                    // Outside the book's lock: the writer takes it under
                    // drip's state lock, which waking takes.
                    if let Some(wake) = wake {
                        wake();
                    }
                }
                Err(why) => {
                    if !failing && !self.quiet {
                        eprintln!(
                            "drip: --share {}: the shared budget cannot be reached: {why}; records wait until it answers",
                            self.name
                        );
                    }
                    failing = true;
                    drop(book);
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

/// Start sharing `budget` through `share`'s state: its book, whose keeper
/// runs on a thread of its own until the book is dropped.
///
/// # Errors
/// A Redis URL redis-rs does not accept; a thread that cannot start.
pub fn start(share: &Share, budget: &Budget) -> anyhow::Result<Arc<Book>> {
    let name = share.target.name().to_string();
    let calendar = budget.calendar.to_string();
    let (place, label) = match &share.target {
        Target::Host(name) => (
            Place::File(super::file::state_dir().join(format!("{name}.budget"))),
            format!("budget:{calendar}"),
        ),
        Target::Redis { url, name } => (
            Place::Redis {
                client: Box::new(
                    redis::Client::open(url.as_str())
                        .map_err(|e| anyhow::anyhow!("--share {name}: {e}"))?,
                ),
                con: None,
            },
            format!("drip:{{{name}}}:budget:{calendar}"),
        ),
    };
    let book = Arc::new(Book::default());
    let keeper = Keeper {
        book: Arc::downgrade(&book),
        place,
        label,
        count: budget.count,
        name,
        quiet: share.quiet,
    };
    std::thread::Builder::new()
        .name("drip-budget".into())
        .spawn(move || keeper.run())?;
    Ok(book)
}
