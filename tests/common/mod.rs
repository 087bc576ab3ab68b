//! Shared helpers for the integration tests: the real binary, in a hermetic
//! environment.
#![allow(dead_code)]

pub mod hosts;
pub mod llm;
pub mod redis_server;
pub mod running;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The lines of the file at `path` (a joblog, a stats stream), each one
/// JSON value.
pub fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The suite's one timing lock: the tests that judge wall-clock timing
/// hold it, so that two of them that must not run at once never do,
/// whichever files they are in (the suite is one binary, its tests run on
/// eight threads; on a 2-core machine two pacing runs at once hold each
/// other's processes back: a `find | drip | xargs` beside a curl test once
/// held up its first second by 270 ms). A test that fails while holding it does not
/// fail the others: a poisoned lock is taken as it is.
static TIMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// For a test that judges wall-clock timing and must run alone among the
/// clock-judged tests: a pacing, window or lease bound on real time that
/// another pipeline of drips beside it could break. It waits for the
/// tests holding [`beside_timing`] to end, and they wait for it.
pub fn timing() -> std::sync::RwLockWriteGuard<'static, ()> {
    TIMING.write().unwrap_or_else(|e| e.into_inner())
}

/// For a test that may run beside others like it, but not beside one that
/// holds [`timing`]: its bounds on real time leave room for its
/// neighbours' load, or it judges none but starts drips enough to disturb
/// a test that holds [`timing`].
pub fn beside_timing() -> std::sync::RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|e| e.into_inner())
}

/// A temporary file holding `bytes`.
pub fn temp_file(bytes: &[u8]) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

/// The lines `"i\n"` for `i` in `range`, as `seq` prints them.
pub fn numbered(range: std::ops::RangeInclusive<usize>) -> String {
    range.map(|i| format!("{i}\n")).collect()
}

/// Path of the drip binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_drip")
}

thread_local! {
    /// The running test's runtime directory, made on first use and removed
    /// when the test's thread ends.
    static RUNTIME_DIR: tempfile::TempDir = tempfile::tempdir().unwrap();
}

/// A directory for `XDG_RUNTIME_DIR` and `TMPDIR` of the test running on
/// this thread: the control sockets and `--exec` headers directories of
/// the drips it starts go there, and go with it, rather than into the
/// user's `/tmp/drip-$UID` and `/tmp/drip-headers-*` where a drip killed
/// with SIGKILL would leave them behind. A test that sets its own
/// `XDG_RUNTIME_DIR` or `TMPDIR` after [`command`], [`drip`] or [`shell`]
/// overrides it.
pub fn runtime_dir() -> std::path::PathBuf {
    RUNTIME_DIR.with(|dir| dir.path().to_path_buf())
}

/// Variables that could change drip's output, removed from every run.
const NOISY_ENV: &[&str] = &["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "TERM", "COLUMNS"];

/// `drip ARGS` with a clean environment, as a std Command.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    for var in NOISY_ENV {
        cmd.env_remove(var);
    }
    cmd.env("LC_ALL", "C")
        .env("XDG_RUNTIME_DIR", runtime_dir())
        .env("TMPDIR", runtime_dir());
    cmd
}

/// `drip ARGS` as an assert_cmd Command with a clean environment; a run
/// that hangs is killed after 60 s and fails, rather than stalling CI.
pub fn drip(args: &[&str]) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(bin());
    cmd.args(args).timeout(Duration::from_secs(60));
    for var in NOISY_ENV {
        cmd.env_remove(var);
    }
    cmd.env("LC_ALL", "C")
        .env("XDG_RUNTIME_DIR", runtime_dir())
        .env("TMPDIR", runtime_dir());
    cmd
}

/// A shell pipeline, with `drip` on PATH as the binary under test.
pub fn shell(script: &str) -> Command {
    let dir = std::path::Path::new(bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).env("PATH", path);
    for var in NOISY_ENV {
        cmd.env_remove(var);
    }
    cmd.env("LC_ALL", "C")
        .env("XDG_RUNTIME_DIR", runtime_dir())
        .env("TMPDIR", runtime_dir());
    cmd
}

/// Read `child`'s stdout to the end, timestamping every line as it arrives
/// (seconds since `start`).
pub fn timed_lines(child: &mut Child, start: Instant) -> Vec<(f64, String)> {
    let out = child.stdout.take().expect("piped stdout");
    let mut lines = Vec::new();
    each_timed_line(out, start, &mut |t, line| lines.push((t, line)));
    lines
}

/// Read `out` to its end, handing each whole line (without its newline)
/// to `line` with the time it was read (seconds since `start`).
///
/// # Panics
/// If reading fails.
pub fn each_timed_line(mut out: impl Read, start: Instant, line: &mut dyn FnMut(f64, String)) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = out.read(&mut buf).expect("read stdout");
        if n == 0 {
            break;
        }
        let t = start.elapsed().as_secs_f64();
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let bytes: Vec<u8> = pending.drain(..=i).collect();
            line(t, String::from_utf8_lossy(&bytes[..i]).into_owned());
        }
    }
}

/// Spawn `cmd` with piped stdout and stderr.
pub fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn")
}

/// Wait for `child` at most `limit`; kill it and panic if it takes longer.
pub fn wait_for(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// All `child` writes to its piped stderr until it closes it (reads to
/// the end: the child has exited, or closed its stderr).
pub fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

/// Write `bytes` to `child`'s piped stdin, then close it: the child reads
/// them, then the end of its input.
pub fn feed(child: &mut Child, bytes: &[u8]) {
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(bytes)
        .unwrap();
}

/// A program (or file) from outside that tests drive for real, and the
/// Debian package that installs it.
pub struct Tool {
    /// The name tests ask for it by ([`have`]), and the program's on the
    /// PATH (unless `programs` names others).
    pub name: &'static str,
    /// The Debian package that installs it.
    pub package: &'static str,
    /// Other names of the program on the PATH, any one of which will do.
    programs: &'static [&'static str],
    /// A file it installs: it must be there (and no program need be,
    /// unless `needs_program`).
    file: Option<&'static str>,
    /// Whether a program is needed beside the file.
    needs_program: bool,
}

impl Tool {
    /// The program `name` on the PATH, from `package`.
    const fn program(name: &'static str, package: &'static str) -> Tool {
        Tool {
            name,
            package,
            programs: &[],
            file: None,
            needs_program: true,
        }
    }

    /// Where the tool's program is on the PATH, if it is.
    fn path(&self) -> Option<std::path::PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::var_os("PATH").unwrap_or_default();
        let names: Vec<&str> = std::iter::once(self.name)
            .chain(self.programs.iter().copied())
            .collect();
        std::env::split_paths(&path)
            .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }

    /// Whether the tool is here.
    fn found(&self) -> bool {
        self.file
            .map_or(true, |f| std::path::Path::new(f).is_file())
            && (!self.needs_program || self.path().is_some())
    }
}

/// Every outside tool a test drives for real, and its Debian package.
/// README.md's "Development" installs them all with one `apt-get`, and
/// `.ci/run` installs those missing (`docs::` checks both name every
/// package).
pub const TOOLS: &[Tool] = &[
    Tool::program("curl", "curl"),
    Tool::program("find", "findutils"),
    Tool::program("xargs", "findutils"),
    Tool::program("tmux", "tmux"),
    Tool::program("fish", "fish"),
    Tool::program("zsh", "zsh"),
    // The loader bash sources for the completions of other commands.
    Tool {
        name: "bash-completion",
        package: "bash-completion",
        programs: &[],
        file: Some("/usr/share/bash-completion/bash_completion"),
        needs_program: false,
    },
    // git with its bash completion: a command that completes its own words.
    Tool {
        name: "git",
        package: "git",
        programs: &[],
        file: Some("/usr/share/bash-completion/completions/git"),
        needs_program: true,
    },
    Tool::program("man", "man-db"),
    Tool::program("redis-server", "redis-server"),
    Tool::program("redis-cli", "redis-tools"),
    Tool::program("openssl", "openssl"),
    Tool {
        name: "prometheus-node-exporter",
        package: "prometheus-node-exporter",
        programs: &["node_exporter"],
        file: None,
        needs_program: true,
    },
    Tool::program("promtool", "prometheus"),
];

/// The tool `name` of [`TOOLS`].
fn tool(name: &str) -> &'static Tool {
    TOOLS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} is not in common::TOOLS"))
}

/// Whether a missing tool fails a test rather than skips it:
/// `DRIP_REQUIRE_TOOLS=1` (as `.ci/run` sets), or `CI=true`.
pub fn tools_required() -> bool {
    std::env::var("DRIP_REQUIRE_TOOLS").as_deref() == Ok("1")
        || std::env::var("CI").as_deref() == Ok("true")
}

/// Whether every tool of `names` (of [`TOOLS`]) is here. When one is not,
/// the test is skipped: this says so on stderr in one line, naming the
/// tools and the command that installs them, and returns false (the test
/// returns at once, or leaves out the part that needs them); under
/// [`tools_required`] it fails instead.
pub fn have(names: &[&str]) -> bool {
    let missing: Vec<&Tool> = names
        .iter()
        .map(|name| tool(name))
        .filter(|t| !t.found())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let what: Vec<&str> = missing.iter().map(|t| t.name).collect();
    let mut packages: Vec<&str> = Vec::new();
    for t in &missing {
        if !packages.contains(&t.package) {
            packages.push(t.package);
        }
    }
    let how = format!(
        "{} {} not installed (apt-get install -y {})",
        what.join(" and "),
        if what.len() == 1 { "is" } else { "are" },
        packages.join(" ")
    );
    assert!(
        !tools_required(),
        "{how}: DRIP_REQUIRE_TOOLS=1 or CI=true, so a missing tool fails the test"
    );
    eprintln!("skipped: {how}");
    false
}

/// Where the program of tool `name` (of [`TOOLS`]) is, once [`have`]
/// found it.
pub fn tool_path(name: &str) -> std::path::PathBuf {
    tool(name)
        .path()
        .unwrap_or_else(|| panic!("{name} is not on the PATH"))
}

/// Whether `redis-server` is here ([`have`]): the `--share` tests through
/// Redis start their own.
pub fn have_redis() -> bool {
    have(&["redis-server"])
}

/// Send signal `sig` (such as `libc::SIGTERM`) to `child`. A drip is
/// first given time to catch it ([`until_handled`]): a test times its
/// signals from drip's start, which a busy machine can delay by 100 ms
/// and more, and before its handlers are in place a signal ends any
/// process at once.
#[allow(unsafe_code)]
pub fn send_signal(child: &Child, sig: i32) {
    until_handled(child.id(), sig);
    // SAFETY: kill(2) with a pid we spawned and own; no memory is touched.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill failed");
}

/// Wait (up to 20 s) until `child` catches signal `sig`: its handler is
/// installed (the `SigCgt` mask of /proc/PID/status). Before that a
/// stopping signal ends any process at once, however soon drip would have
/// installed its handler; a busy machine can take a debug build 100 ms
/// and more to get there.
pub fn wait_until_catching(child: &Child, sig: i32) {
    let start = Instant::now();
    while signal_mask(child.id(), "SigCgt:") & (1 << (sig - 1)) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "drip never caught signal {sig}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// If process `pid` is drip and `sig` can be caught, wait (up to 10 s)
/// until drip catches or ignores it; then return, handled or not.
fn until_handled(pid: u32, sig: i32) {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "drip" || [libc::SIGKILL, libc::SIGSTOP].contains(&sig) {
        return;
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let gone = status.is_empty() || status.contains("\nState:\tZ");
        let handled = signal_mask(pid, "SigCgt:") | signal_mask(pid, "SigIgn:");
        if gone || handled & (1 << (sig - 1)) != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One of the signal masks of /proc/PID/status (`SigCgt:`, `SigIgn:`); 0
/// once the process is gone.
fn signal_mask(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or(0)
}

/// User + system CPU that `child` (still running) has used so far, in
/// seconds, to clock-tick resolution (from /proc/PID/stat).
#[allow(unsafe_code)]
pub fn cpu_seconds(child: &Child) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).expect("stat");
    // utime and stime are fields 14 and 15; the name in parentheses (field
    // 2) may hold spaces, so count from its end.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split(' ')
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / per_second as f64
}

/// Watch process `pid` until it is gone (reaped): returns how long (s) its
/// threads waited for a CPU while runnable, all told (the second field of
/// `/proc/PID/task/TID/schedstat`, read every 10 ms: a thread's last 10 ms
/// may be missed). 0 where the kernel does not keep it.
pub fn watch_cpu_wait(pid: u32) -> std::thread::JoinHandle<f64> {
    let samples = watch_cpu_waits(pid, Instant::now());
    std::thread::spawn(move || {
        let samples = samples.join().unwrap();
        samples.last().map_or(0.0, |s| s.1.values().sum())
    })
}

/// What [`watch_cpu_waits`] saw at one moment: (seconds since its origin,
/// how long (s) each thread had waited for a CPU until then).
pub type CpuWaitSample = (f64, std::collections::HashMap<std::ffi::OsString, f64>);

/// [`watch_cpu_wait`] as it went, thread by thread: a sample every 10 ms.
pub fn watch_cpu_waits(pid: u32, origin: Instant) -> std::thread::JoinHandle<Vec<CpuWaitSample>> {
    std::thread::spawn(move || {
        let mut waited = std::collections::HashMap::new();
        let mut samples = Vec::new();
        while let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let stat = std::fs::read_to_string(task.path().join("schedstat"));
                let ns = stat
                    .ok()
                    .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok());
                if let Some(ns) = ns {
                    waited.insert(task.file_name(), ns as f64 / 1e9);
                }
            }
            samples.push((origin.elapsed().as_secs_f64(), waited.clone()));
            std::thread::sleep(Duration::from_millis(10));
        }
        samples
    })
}

/// How long (s) thread `tid` (for a process's main thread, its pid)
/// waited for a CPU from `from` to `to` (seconds since the origin of
/// `samples`, from [`watch_cpu_waits`]), widened to the samples around
/// them.
pub fn cpu_wait_between(samples: &[CpuWaitSample], tid: u32, from: f64, to: f64) -> f64 {
    let tid = std::ffi::OsString::from(tid.to_string());
    let at = |s: Option<&CpuWaitSample>| s.and_then(|s| s.1.get(&tid)).copied().unwrap_or(0.0);
    let before = at(samples.iter().rev().find(|s| s.0 <= from));
    let after = at(samples.iter().find(|s| s.0 >= to).or(samples.last()));
    (after - before).max(0.0)
}

/// How long (s) all the threads of `samples` (from [`watch_cpu_waits`])
/// waited for a CPU, all told, from `from` to `to` (seconds since its
/// origin): [`cpu_wait_between`] summed over every thread seen.
pub fn threads_cpu_wait_between(samples: &[CpuWaitSample], from: f64, to: f64) -> f64 {
    samples.last().map_or(0.0, |last| {
        last.1
            .keys()
            .filter_map(|tid| tid.to_str()?.parse().ok())
            .map(|tid| cpu_wait_between(samples, tid, from, to))
            .sum()
    })
}

/// Watch the processes of process group `pgid` (a pipeline started in a
/// group of its own) until its leader is gone (reaped): returns how long
/// (s) their threads waited for a CPU while runnable, all told (as
/// [`watch_cpu_wait`], read every 10 ms: a process that lived less than
/// that, or the last 10 ms of one, may be missed). 0 where the kernel does
/// not keep it.
pub fn watch_group_cpu_wait(pgid: u32) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        let mut waited: std::collections::HashMap<(u32, String), f64> = Default::default();
        // Processes seen in another group: a pid stays in its group.
        let mut others = std::collections::HashSet::new();
        while std::path::Path::new(&format!("/proc/{pgid}")).exists() {
            let Ok(procs) = std::fs::read_dir("/proc") else {
                break;
            };
            let pids = procs
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
            for pid in pids {
                if others.contains(&pid) {
                    continue;
                }
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    continue;
                };
                // The group is field 5, the third after the name's ')'.
                let group = stat
                    .rfind(')')
                    .and_then(|i| stat[i + 2..].split(' ').nth(2)?.parse::<u32>().ok());
                if group != Some(pgid) {
                    others.insert(pid);
                    continue;
                }
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                    continue;
                };
                for task in tasks.flatten() {
                    let stat = std::fs::read_to_string(task.path().join("schedstat"));
                    let ns = stat
                        .ok()
                        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok());
                    if let Some(ns) = ns {
                        let tid = task.file_name().to_string_lossy().into_owned();
                        waited.insert((pid, tid), ns as f64 / 1e9);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        waited.values().sum()
    })
}

/// How far records seen at `times` (seconds, in order) fell behind a
/// schedule of one record every `interval` seconds over the run, in
/// seconds: negative when they ran ahead of it. Seen late is all a loaded
/// machine can do to a record, so each half of the run is placed by its
/// least delayed record (its earliest `times[k] - k * interval`), and the
/// drift is how much later the second half stands than the first. A late
/// record, or a few, moves neither; a rate 20 % off moves the second half
/// by a fifth of an interval per record.
pub fn drift(times: &[f64], interval: f64) -> f64 {
    assert!(
        times.len() >= 4,
        "too few records to judge a pace: {times:?}"
    );
    let offsets: Vec<f64> = times
        .iter()
        .enumerate()
        .map(|(k, t)| t - k as f64 * interval)
        .collect();
    let half = offsets.len() / 2;
    let earliest = |part: &[f64]| part.iter().copied().fold(f64::INFINITY, f64::min);
    earliest(&offsets[half..]) - earliest(&offsets[..half])
}

/// The median gap (s) between consecutive `times` (seconds, in order): the
/// pace as a reader saw it, whatever a loaded machine did to a few of them.
/// A drip held up restarts its schedule from then, which moves every record
/// after it (and [`drift`] with it) but lengthens one gap; a line seen late
/// shortens the next gap as much as it lengthened its own. A rate 20 % off
/// moves it a sixth of an interval or more.
pub fn median_gap(times: &[f64]) -> f64 {
    assert!(
        times.len() >= 4,
        "too few records to judge a pace: {times:?}"
    );
    let mut gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2]
}

/// How far (s) the records seen at `times` ran ahead of the earliest a
/// schedule of one record every `interval` seconds lets a reader see them,
/// counting from `times`' origin, a moment before drip started: the largest
/// `k * interval - times[k]`, 0 or less when none ran ahead. Record `k`
/// leaves `k` intervals after the first, which leaves after the origin, and
/// a reader sees a record late, never early: so this bound holds however
/// loaded the machine, and a record an interval early breaks it whenever
/// drip starts and writes its first record within an interval.
pub fn ahead_of_start(times: &[f64], interval: f64) -> f64 {
    times
        .iter()
        .enumerate()
        .map(|(k, t)| k as f64 * interval - t)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// How far (s) the records seen at `times` (in order) ran ahead of the
/// first one's arrival plus `k - 1` intervals of `interval` seconds for
/// record `k`, the earliest a reader can see record `k` unless it saw the
/// first more than an interval late: the largest
/// `times[0] + (k - 1) * interval - times[k]`, 0 or less when none did.
/// A pace too fast breaks it whatever drip's start-up took.
pub fn ahead_of_first(times: &[f64], interval: f64) -> f64 {
    times
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, t)| times[0] + (k - 1) as f64 * interval - t)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The most of `times` (seconds, in order) in any window of `window`
/// seconds: the most that stand less than `window` apart, first to last
/// (a window `[t, t + window)` opening at one of them: one that opens
/// elsewhere holds no more).
pub fn most_in_window(times: &[f64], window: f64) -> usize {
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|&&t| t < times[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The most of `times` (in order) in any closed window `[t, t + width]`,
/// and the index of the first of them (of the earliest such window). It
/// suffices to consider windows that open at one of `times`: sliding any
/// window right until its left edge meets one loses nothing.
pub fn most_in_closed_window(times: &[Duration], width: Duration) -> (usize, usize) {
    let mut best = (0, 0);
    let mut j = 0;
    for i in 0..times.len() {
        if j < i {
            j = i;
        }
        while j < times.len() && times[j] - times[i] <= width {
            j += 1;
        }
        if j - i > best.0 {
            best = (j - i, i);
        }
    }
    best
}

/// Seconds since the Unix epoch now, on the wall clock (the clock of
/// `date +%s%N`, of a joblog's `start_us`, of a server's stamps).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// How many times thread `tid` of process `pid` (its main thread: `tid`
/// = `pid`) has slept so far: its voluntary context switches, from
/// `/proc/PID/task/TID/status`.
pub fn sleeps_of(pid: u32, tid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("voluntary_ctxt_switches")
}

/// Nothing is left in `tmp`, drip's TMPDIR (the headers directory is gone).
pub fn assert_no_temporary_left(tmp: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

/// `drip ARGS` (its stdout and stderr piped) reading `input`, fed on a
/// thread of its own, its state files and control socket under `runtime`
/// (`XDG_RUNTIME_DIR`); its input is held open a minute after `input` when
/// `hold` (the drip runs until the test stops it), closed at once
/// otherwise.
pub fn drip_reading(args: &[&str], input: String, runtime: &std::path::Path, hold: bool) -> Child {
    let mut cmd = command(args);
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn drip");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(input.as_bytes());
        if hold {
            std::thread::sleep(Duration::from_secs(60));
        }
    });
    child
}

/// `drip ctl ARGS` that must succeed: its JSON answer.
pub fn ctl_ok(runtime: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let (status, out, err) = ctl(runtime, args);
    assert_eq!(status, 0, "drip ctl {args:?}: {err}");
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    serde_json::from_str(&out).expect("JSON")
}

/// `drip ctl ARGS` with `XDG_RUNTIME_DIR=runtime`: its status, stdout
/// and stderr.
pub fn ctl(runtime: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    ctl_as(runtime, args, None)
}

/// `drip ctl ARGS` with `XDG_RUNTIME_DIR=runtime`, run as `uid` (and its
/// group) if given: its status, stdout and stderr.
pub fn ctl_as(runtime: &std::path::Path, args: &[&str], uid: Option<u32>) -> (i32, String, String) {
    let mut all = vec!["ctl"];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    cmd.env("XDG_RUNTIME_DIR", runtime);
    if let Some(uid) = uid {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().expect("run drip ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `drip ctl ARGS` with `XDG_RUNTIME_DIR=runtime`, run in the directory
/// `cwd`: its status, stdout and stderr.
pub fn ctl_in(
    runtime: &std::path::Path,
    cwd: &std::path::Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut all = vec!["ctl"];
    all.extend_from_slice(args);
    let out = command(&all)
        .env("XDG_RUNTIME_DIR", runtime)
        .current_dir(cwd)
        .output()
        .expect("run drip ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Call `run` until a run can be judged: `run` makes one run and fails by
/// itself where the run breaks a rule, and returns `None` when it judged
/// the run, or an account of why it could not (a busy machine held the
/// run back or stalled its reader: such spells pass). Fails as not judged,
/// with every run's account, after `tries` runs or once the runs have
/// taken `budget`: a run that cannot be judged never passes.
pub fn until_judged(tries: usize, budget: Duration, mut run: impl FnMut() -> Option<String>) {
    let began = Instant::now();
    let mut unjudged = Vec::new();
    while let Some(account) = run() {
        eprintln!("not judged: {account}");
        unjudged.push(account);
        let spent = began.elapsed();
        assert!(
            unjudged.len() < tries && spent < budget,
            "not judged in {} runs ({:.0} s; the machine was too busy to tell):\n{}",
            unjudged.len(),
            spent.as_secs_f64(),
            unjudged.join("\n")
        );
        eprintln!("running it again");
    }
}

/// Run `drip ARGS` over `input` to the end (fed and read on threads of
/// their own, so neither pipe fills); (status, stdout, stderr). A run
/// that takes over two minutes is killed and fails.
pub fn run_bytes(args: &[&str], input: &[u8]) -> (i32, Vec<u8>, String) {
    let mut cmd = command(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&input);
    });
    let (status, stdout, stderr) = output_of(child);
    feeder.join().unwrap();
    (status, stdout, stderr)
}

/// [`run_bytes`] with text in and out (stdout read lossily).
pub fn run(args: &[&str], input: &str) -> (i32, String, String) {
    let (status, stdout, stderr) = run_bytes(args, input.as_bytes());
    (
        status,
        String::from_utf8_lossy(&stdout).into_owned(),
        stderr,
    )
}

/// Wait for `child` (stdout and stderr piped) to end, reading both;
/// (status, stdout, stderr). Killed and failed after two minutes.
pub fn output_of(mut child: Child) -> (i32, Vec<u8>, String) {
    let mut out = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        out.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let mut stderr = String::new();
    let mut err = child.stderr.take().expect("piped stderr");
    err.read_to_string(&mut stderr).unwrap();
    let status = wait_for(&mut child, Duration::from_secs(120));
    (status.code().unwrap_or(-1), reader.join().unwrap(), stderr)
}

/// What a test server says to one request: the status, header lines to
/// add (each ending in CRLF), and the body.
pub struct Answer {
    pub status: u16,
    pub headers: String,
    pub body: &'static str,
}

impl Answer {
    /// `status` with no other header and no body.
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            headers: String::new(),
            body: "",
        }
    }
}

/// An HTTP/1.1 server on 127.0.0.1 (loopback only) answering each request
/// with `answer(n, path)`, `n` the connection's number from 0: one
/// request per connection (`Connection: close`), each on a thread of its
/// own (state shared between requests goes behind a lock). Returns its
/// port. It runs until the test process ends.
pub fn http_server<F>(answer: F) -> u16
where
    F: Fn(usize, &str) -> Answer + Send + Sync + 'static,
{
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let answer = std::sync::Arc::clone(&answer);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = String::new();
                reader.read_line(&mut request).unwrap_or(0);
                let path = request.split(' ').nth(1).unwrap_or("").to_string();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let Answer {
                    status,
                    headers,
                    body,
                } = answer(n, &path);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// The last JSON object of the file at `path` (a `--stats-json` file:
/// the summary follows the interval lines).
pub fn last_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text
        .lines()
        .last()
        .unwrap_or_else(|| panic!("{path:?} is empty"));
    serde_json::from_str(line).unwrap()
}

/// The books add up: read = written + succeeded + failed + dropped +
/// expired + skipped + undelivered (the fates of `--exec` and of
/// `--oversize skip` count as 0 where the summary has none).
pub fn assert_books_add_up(v: &serde_json::Value) {
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    let optional = |k: &str| v.get(k).map_or(0, |_| n(k));
    assert_eq!(
        n("read"),
        n("written")
            + optional("succeeded")
            + optional("failed")
            + n("dropped_newest")
            + n("dropped_oldest")
            + n("expired")
            + optional("skipped")
            + n("undelivered"),
        "{v}"
    );
}

/// The words of `--exec curl` fetching `url` (`{}` for the record) with
/// its response headers in `{headers}`, the body thrown away.
pub fn curl_exec(url: &str) -> [&str; 8] {
    [
        "--exec",
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "{headers}",
        url,
    ]
}

/// A settling run's arguments: one cost named `in`, read from each
/// record's `i`, its limit far above what the tests spend, settled from
/// each job's `usage.in`, the job printing `{"usage":{"in":120}}`.
pub const SETTLING_JOBS: [&str; 10] = [
    "--cost",
    "in=i",
    "--cost-rate",
    "in=100000/s:1000",
    "--settle",
    "in=usage.in",
    "--exec",
    "sh",
    "-c",
    "echo '{\"usage\":{\"in\":120}}'",
];

/// Every `.rs` file under `dir`, recursively (the crate's sources, for
/// the tests that read them).
pub fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
