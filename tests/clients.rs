//! End-to-end tests that put `drip` in real pipelines with real clients:
//!
//! * `drip --rate R | xargs -n1 -P8 curl ...` against a small HTTP/1.1 server
//!   run by the test. The server records when each request arrives and its
//!   path, so the pacing is measured where it matters: at the receiving end.
//! * `find DIR -type f -print0 | drip -0 ... | xargs -0 -n1 ...` over file names
//!   with spaces, a newline and other awkward bytes.
//!
//! Every pipeline runs under `sh -c` with a hermetic environment (no colour or
//! terminal variables, `LC_ALL=C`, no proxies, no `~/.curlrc`). Without
//! curl (or find and xargs) the tests say so and pass, except under
//! `DRIP_REQUIRE_TOOLS=1`, where they fail (`common::have`; CI installs
//! them).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::common;

/// Upper bound on any one pipeline; a hung pipeline fails instead of hanging CI.
const PIPELINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Make a spawned command independent of the developer's or CI's environment.
fn hermetic(cmd: &mut Command) -> &mut Command {
    for var in [
        "NO_COLOR",
        "CLICOLOR",
        "CLICOLOR_FORCE",
        "TERM",
        "COLUMNS",
        "LINES",
        "LANG",
        "LANGUAGE",
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "CURL_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("LC_ALL", "C")
        .env("XDG_RUNTIME_DIR", common::runtime_dir())
        .env("NO_PROXY", "*")
        .env("no_proxy", "*")
}

/// Result of one `sh -c` pipeline.
struct Run {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
    /// Exit status of the `drip` stage, captured by the script into a file.
    drip_status: String,
    elapsed: Duration,
    /// How long (s) the pipeline's processes (sh, drip, xargs, the clients)
    /// waited for a CPU while runnable, all told
    /// ([`common::watch_group_cpu_wait`]).
    cpu_wait: f64,
}

/// Run `script` under `sh -c` with positional parameters `args` and `stdin`
/// as its standard input. The script receives the path of a file as `$1`
/// into which it must write drip's exit status (see the scripts below),
/// followed by `args` as `$2...`.
///
/// stdout/stderr go to files rather than pipes, and the shell is put in its
/// own process group, so on timeout the whole pipeline can be killed without
/// a grandchild keeping a pipe open and hanging the test.
fn run_sh(script: &str, args: &[&OsStr], stdin: &[u8]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let in_path = dir.path().join("stdin");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let st_path = dir.path().join("drip-status");
    fs::write(&in_path, stdin).expect("write stdin file");

    let mut cmd = Command::new("sh");
    hermetic(&mut cmd)
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&st_path)
        .args(args)
        .stdin(File::open(&in_path).expect("open stdin file"))
        .stdout(File::create(&out_path).expect("create stdout file"))
        .stderr(File::create(&err_path).expect("create stderr file"))
        .process_group(0);

    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn sh");
    let waits = common::watch_group_cpu_wait(child.id());
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for sh") {
            break status;
        }
        if start.elapsed() > PIPELINE_TIMEOUT {
            // Kill the whole process group (sh, drip, xargs, curl...).
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!(
                "pipeline did not finish within {PIPELINE_TIMEOUT:?}: {script}\nstderr: {}",
                fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();

    Run {
        status,
        stdout: fs::read(&out_path).expect("read stdout"),
        stderr: String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned(),
        drip_status: fs::read_to_string(&st_path)
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "<drip status not recorded>".to_owned()),
        elapsed,
        cpu_wait: waits.join().unwrap(),
    }
}

impl Run {
    fn assert_ok(&self, what: &str) {
        assert!(
            self.drip_status == "0" && self.status.success(),
            "{what}: drip exited with {}, pipeline exited with {}\nstderr:\n{}",
            self.drip_status,
            self.status,
            self.stderr
        );
    }
}

// ---------------------------------------------------------------------------
// A tiny HTTP/1.1 server that records (arrival time, request path).
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Hit {
    /// When `accept` returned the connection.
    at: Instant,
    /// Request target from the request line, e.g. `/r/17`.
    path: String,
    /// Request body (the file name, for the POST pipeline).
    body: Vec<u8>,
}

struct Server {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr");
        let hits = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let hits = Arc::clone(&hits);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                for conn in listener.incoming() {
                    // Timestamp first: this is the arrival time we measure.
                    let at = Instant::now();
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = conn else { continue };
                    let hits = Arc::clone(&hits);
                    thread::spawn(move || serve(stream, at, &hits));
                }
            })
        };
        Server {
            addr,
            hits,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn url(&self, i: usize) -> String {
        format!("http://{}/r/{i}", self.addr)
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn serve(mut stream: TcpStream, at: Instant, hits: &Mutex<Vec<Hit>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break buf.len(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    if buf.is_empty() {
        return; // e.g. the wake-up connection from Drop
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let request_line = head.lines().next().unwrap_or("");
    let path = request_line
        .split(' ')
        .nth(1)
        .map_or_else(|| format!("<malformed: {request_line:?}>"), str::to_owned);
    let content_length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < content_length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    // Record before responding: once curl has its response (and exits), the
    // hit is guaranteed to be in the list.
    hits.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Hit { at, path, body });
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

// ---------------------------------------------------------------------------
// Timing analysis.
// ---------------------------------------------------------------------------

/// Arrival offsets from the first arrival, sorted, in milliseconds (for messages).
fn fmt_ms(times: &[Duration]) -> String {
    times
        .iter()
        .map(|t| format!("{:.1}", t.as_secs_f64() * 1e3))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Check that every URL path `/r/0 .. /r/{n-1}` reached the server exactly
/// once, and return the sorted arrival offsets relative to the first arrival.
fn check_paths_and_offsets(hits: &[Hit], n: usize) -> Vec<Duration> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for h in hits {
        *counts.entry(h.path.as_str()).or_default() += 1;
    }
    let expected: BTreeSet<String> = (0..n).map(|i| format!("/r/{i}")).collect();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|p| !counts.contains_key(p.as_str()))
        .collect();
    let dups: Vec<(&str, usize)> = counts
        .iter()
        .filter(|&(_, &c)| c > 1)
        .map(|(p, c)| (*p, *c))
        .collect();
    let unexpected: Vec<&str> = counts
        .keys()
        .filter(|p| !expected.contains(**p))
        .copied()
        .collect();
    assert!(
        missing.is_empty() && dups.is_empty() && unexpected.is_empty() && hits.len() == n,
        "server saw {} requests for {n} URLs; missing: {missing:?}; duplicated: {dups:?}; \
         unexpected: {unexpected:?}",
        hits.len()
    );

    let mut at: Vec<Instant> = hits.iter().map(|h| h.at).collect();
    at.sort();
    at.iter().map(|t| *t - at[0]).collect()
}

/// Shell pipeline: drip paces URLs from stdin into 8 concurrent curls.
/// `$1` = drip-status file, `$2` = drip binary, `$3...` = drip options.
const CURL_PIPELINE: &str = r#"
st=$1; shift
{ "$@"; echo $? > "$st"; } |
  xargs -n1 -P8 curl -q -s -S -f -o /dev/null --noproxy '*' --max-time 20
"#;

/// Run `drip <opts>` over `n` URLs into curl; return sorted arrival
/// offsets, the pipeline's run time, drip's own span from its first
/// departure to its last (`--stats-json`'s `span_ms`, ms), and how long
/// (s) the pipeline's processes waited for a CPU, all told.
fn curl_run(opts: &[&str], n: usize) -> (Vec<Duration>, Duration, f64, f64) {
    let server = Server::start();
    let input: String = (0..n).map(|i| server.url(i) + "\n").collect();
    let drip = OsStr::new(common::bin());
    let dir = tempfile::tempdir().expect("tempdir");
    let stats = dir.path().join("stats.json");
    let mut args: Vec<&OsStr> = vec![drip];
    args.extend(opts.iter().map(OsStr::new));
    args.extend([OsStr::new("--stats-json"), stats.as_os_str()]);

    let run = run_sh(CURL_PIPELINE, &args, input.as_bytes());
    run.assert_ok(&format!("drip {} | xargs curl", opts.join(" ")));
    let hits = server.hits();
    drop(server);
    let text = fs::read_to_string(&stats).expect("read --stats-json");
    let last = text.lines().last().expect("a JSON line");
    let span = serde_json::from_str::<serde_json::Value>(last).expect("JSON")["span_ms"]
        .as_f64()
        .expect("span_ms");
    (
        check_paths_and_offsets(&hits, n),
        run.elapsed,
        span,
        run.cpu_wait,
    )
}

/// Never early, on drip's own clock: `n` records, the first `burst` at
/// once and then one every `1 / rate` s, span `n - burst` intervals at
/// least from the first departure to the last (less half an interval for
/// a first write the machine held up). A record an interval early, a burst
/// one too big, or a pace 20 % fast, fall short by an interval or more;
/// the clients' start-up spread, which blurs the arrivals, cannot hide it.
fn assert_span(span_ms: f64, n: usize, burst: usize, rate: usize, what: &str) {
    let interval_ms = 1e3 / rate as f64;
    let least = (n - burst) as f64 * interval_ms - interval_ms / 2.0;
    eprintln!("{what}: drip's span {span_ms:.1} ms (least {least:.1} ms)");
    assert!(
        span_ms >= least,
        "{what}: {n} records left within {span_ms:.1} ms of the first, less than {least:.1} ms"
    );
}

fn assert_window_bound(t: &[Duration], bound: usize, what: &str) {
    if let Some(broken) = window_broken(t, bound, what) {
        panic!("{broken}");
    }
}

/// Whether more than `bound` of the arrivals `t` came within one second:
/// why, in words, if so.
fn window_broken(t: &[Duration], bound: usize, what: &str) -> Option<String> {
    let (count, start) = common::most_in_closed_window(t, Duration::from_secs(1));
    // How close we came: the shortest span covering bound + 1 arrivals. The
    // bound holds while this exceeds 1 s.
    let closest = (0..t.len().saturating_sub(bound))
        .map(|i| (t[i + bound] - t[i], i))
        .min();
    eprintln!(
        "{what}: max arrivals in any 1 s window = {count} (bound {bound}); shortest span of \
         {} arrivals = {}",
        bound + 1,
        closest.map_or("n/a".to_owned(), |(d, i)| format!(
            "{:.1} ms (from #{i})",
            d.as_secs_f64() * 1e3
        ))
    );
    (count > bound).then(|| {
        format!(
            "{what}: {count} requests arrived within one second (from arrival #{start} at \
             {:.1} ms), more than rate + burst = {bound}.\narrival offsets (ms): {}",
            t[start].as_secs_f64() * 1e3,
            fmt_ms(t)
        )
    })
}

/// The arrivals from #`first` on keep to `rate` (see `common::drift`):
/// the second half of them never ahead of the first half's schedule (30
/// ms for the clients' own spread), nor more than 150 ms behind it (a
/// loaded machine may start any curl late, but not the whole second half
/// alone); a rate 20 % off moves the second half 300 ms or more.
fn assert_pace(t: &[Duration], first: usize, rate: f64, what: &str) {
    if let Some(broken) = pace_broken(t, first, rate, what) {
        panic!("{broken}");
    }
}

/// Whether the arrivals from #`first` on break [`assert_pace`]'s bounds:
/// why, in words, if so.
fn pace_broken(t: &[Duration], first: usize, rate: f64, what: &str) -> Option<String> {
    let times: Vec<f64> = t[first..].iter().map(Duration::as_secs_f64).collect();
    let drift = common::drift(&times, 1.0 / rate);
    eprintln!(
        "{what}: arrivals #{first}.. {:.1} ms off the schedule",
        drift * 1e3
    );
    (!(-0.03..0.15).contains(&drift)).then(|| {
        format!(
            "{what}: the arrivals' second half stands {:.1} ms off the first's schedule at \
             {rate}/s.\narrival offsets (ms): {}",
            drift * 1e3,
            fmt_ms(t)
        )
    })
}

/// Rate of the curl tests, records per second, and how many requests they
/// send (about three seconds' worth).
const CURL_RATE: usize = 10;
const CURL_N: usize = 3 * CURL_RATE;

// Why the strict `rate + burst` window bound is checked on arrival times, and
// why the curl tests run at 10/s:
//
// Arrival time = drip's release time + (xargs fork/exec + curl start-up + TCP
// connect), and that latency varies from request to request: a few ms on an
// idle machine, tens of ms on a loaded one. With strict spacing T = 1/R the
// closed 1 s window starting at arrival i holds arrivals i ..= i+R, that is
// R + 1 = R + burst of them, when everything is on time. A window holding one
// more needs arrival i+R+1 (released 1 s + T after arrival i's release) to land
// within 1 s of arrival i: request i must be delayed more than request i+R+1
// by over one full period T. So the strict bound is robust exactly when T
// exceeds the client latency spread.
//
// Measured on a 2-core machine (see the accompanying report): at 20/s
// (T = 50 ms) a perfectly paced stand-in pacer came within 2 ms of a
// violation under load, and real runs did exceed R + burst by one when a
// single curl started 50-100 ms late, while drip's own stdout, timestamped
// directly, never did. At 10/s (T = 100 ms) the same spread leaves margin on
// a quiet machine, but in a full test run on a loaded 2-core machine a curl
// can still start more than 100 ms late: the window bound allows that one
// arrival more, and the pace is judged apart (`assert_pace`: never ahead of
// the schedule, nor far behind it). A drip that releases
// early, bunches records, runs 20 % off the rate or buffers its output still
// breaks one of them; the schedule's own bound, burst + rate × W, is proven on
// virtual time in src/schedule.rs and tests/admission.rs.

/// 10/s, burst 1: exactly-once delivery, at most 12 arrivals in any 1 s,
/// never ahead of the schedule, nor far behind it. drip's own span is
/// judged in every run; the arrivals, which a busy machine can bunch or
/// delay (it starts a curl late), are judged in a run where the
/// pipeline's processes waited for a CPU under [`CURL_HELD_UP`] in all,
/// and the run is made again otherwise ([`common::until_judged`]).
#[test]
fn curl_requests_are_paced_at_the_server() {
    if !common::have(&["curl", "xargs"]) {
        return;
    }
    let _serial = common::timing();
    let rate = format!("{CURL_RATE}/s");
    let what = format!("--rate {rate}");
    common::until_judged(4, Duration::from_secs(120), || {
        let (t, elapsed, span, waited) = curl_run(&["--rate", &rate], CURL_N);
        eprintln!(
            "{what}: {CURL_N} requests in {:.1} ms (pipeline {:.1} ms; its processes waited \
             {:.1} ms for a CPU)",
            t[CURL_N - 1].as_secs_f64() * 1e3,
            elapsed.as_secs_f64() * 1e3,
            waited * 1e3
        );
        assert_span(span, CURL_N, 1, CURL_RATE, &what);
        // One more than rate + burst: on a loaded machine one curl can
        // reach the server more than a period after a later one (see
        // below); two more is a drip that lets records go early or
        // together.
        let broken: Vec<String> = [
            window_broken(&t, CURL_RATE + 2, &what),
            pace_broken(&t, 0, CURL_RATE as f64, &what),
        ]
        .into_iter()
        .flatten()
        .collect();
        if broken.is_empty() {
            return None;
        }
        let broken = broken.join("\n");
        let account = format!("the pipeline's processes waited {waited:.3} s for a CPU");
        assert!(
            waited >= CURL_HELD_UP,
            "{broken}\n(not the machine's doing: {account})"
        );
        Some(format!("{broken}\n({account})"))
    });
}

/// How long (s) the curl pipeline's processes may have waited for a CPU,
/// all told, before a run whose arrivals broke a bound is not judged: one
/// interval at [`CURL_RATE`]. The bounds allow one curl a period late;
/// breaking them takes more than a period's delay, and a machine that
/// delayed no process of the pipeline that long in all cannot have done
/// it.
const CURL_HELD_UP: f64 = 1.0 / CURL_RATE as f64;

/// 10/s, burst 5: the first five go out together, then a steady 10/s, and no
/// one-second window holds more than 15.
#[test]
fn curl_requests_with_burst() {
    if !common::have(&["curl", "xargs"]) {
        return;
    }
    let _serial = common::timing();
    const BURST: usize = 5;
    let rate = format!("{CURL_RATE}/s");
    let what = format!("--rate {rate} --burst {BURST}");
    let (t, elapsed, span, _) = curl_run(&["--rate", &rate, "--burst", &BURST.to_string()], CURL_N);
    eprintln!(
        "{what}: {CURL_N} requests in {:.1} ms (pipeline {:.1} ms); first {BURST} within {:.1} ms",
        t[CURL_N - 1].as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e3,
        t[BURST - 1].as_secs_f64() * 1e3
    );
    // With strict spacing the first five would span 4 periods (400 ms at
    // 10/s). "Nearly together" = within one period, which leaves room for
    // xargs forking five curls one after another on a busy machine (up to
    // ~70 ms seen).
    let together = Duration::from_secs(1) / CURL_RATE as u32;
    assert!(
        t[BURST - 1] <= together,
        "{what}: the first {BURST} requests should arrive nearly together, but they \
         spread over {:.1} ms (> {together:?}).\narrival offsets (ms): {}",
        t[BURST - 1].as_secs_f64() * 1e3,
        fmt_ms(&t)
    );
    // The burst's requests start together, so xargs forks five curls at
    // once and on a loaded machine the first can reach the server 100 ms
    // or more after the rest of the burst: a window that opens on it then
    // also holds one more record of the schedule than drip let go in any
    // second. Allow that one (the schedule's own bound, burst + rate × W,
    // is proven on virtual time in src/schedule.rs and tests/admission.rs).
    assert_window_bound(&t, CURL_RATE + BURST + 1, &what);
    assert_span(span, CURL_N, BURST, CURL_RATE, &what);
    // After the burst the schedule is plain 10/s; measure it from the first
    // request that had to wait (#5) so burst jitter does not skew the mean.
    assert_pace(&t, BURST, CURL_RATE as f64, &what);
}

// ---------------------------------------------------------------------------
// NUL-delimited file names through find | drip -0 | xargs -0.
// ---------------------------------------------------------------------------

/// Awkward but legal file names: spaces, a newline, tab, quotes, glob and
/// shell metacharacters, a leading dash, a backslash and non-UTF-8 bytes.
fn awkward_names() -> Vec<OsString> {
    let mut names: Vec<OsString> = [
        "plain.txt",
        "with space.txt",
        "  leading and trailing  ",
        "new\nline",
        "\nstarts with newline",
        "ends with newline\n",
        "tab\there",
        "-dash-first",
        "quote's \"double\"",
        "back\\slash",
        "star*and?[glob]",
        "$dollar `tick` ;semi| &amp",
        "üñíçødé",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    // Not valid UTF-8. Linux file systems take any bytes; macOS's do not.
    if cfg!(target_os = "linux") {
        names.push(OsString::from_vec(b"latin1-\xe9\xff".to_vec()));
    }
    names
}

/// Create the awkward files (some in a subdirectory) plus `plain` ordinary
/// ones, and return all their paths.
fn make_tree(root: &Path, plain: usize) -> BTreeSet<Vec<u8>> {
    let sub = root.join("sub dir\nwith newline");
    fs::create_dir(&sub).expect("mkdir");
    let mut names = awkward_names();
    names.extend((0..plain).map(|i| OsString::from(format!("plain {i:03}"))));
    let mut paths = BTreeSet::new();
    for (k, name) in names.into_iter().enumerate() {
        let dir = if k % 3 == 2 { &sub } else { root };
        let p = dir.join(&name);
        fs::write(&p, format!("file {k}\n")).expect("create file");
        assert!(
            paths.insert(p.into_os_string().into_vec()),
            "duplicate test file name"
        );
    }
    paths
}

fn split_nul(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = bytes.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
    // A trailing NUL terminates the last record; it does not start a new one.
    if v.last().is_some_and(Vec::is_empty) {
        v.pop();
    }
    v
}

fn show(paths: &[Vec<u8>]) -> String {
    paths
        .iter()
        .map(|p| format!("{:?}", String::from_utf8_lossy(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Shell pipeline: `$1` drip-status file, `$2` directory, `$3...` drip command.
/// Every file is handed to its own printf, which echoes the name NUL-terminated.
const FIND_PIPELINE: &str = r#"
st=$1; dir=$2; shift 2
find "$dir" -type f -print0 |
  { "$@"; echo $? > "$st"; } |
  xargs -0 -n1 printf '%s\0'
"#;

/// Run `find | drip -0 <opts> | xargs -0 -n1 printf`, and assert every file
/// name comes out intact, exactly once and in find's order.
fn find_run(opts: &[&str]) -> Run {
    let tmp = tempfile::tempdir().expect("tempdir");
    let expected = make_tree(tmp.path(), 0);

    // The order find produces, independently of drip.
    let find_out = hermetic(&mut Command::new("find"))
        .arg(tmp.path())
        .args(["-type", "f", "-print0"])
        .stdin(Stdio::null())
        .output()
        .expect("run find");
    assert!(find_out.status.success(), "find failed");
    let find_order = split_nul(&find_out.stdout);

    let drip = OsStr::new(common::bin());
    let mut args: Vec<&OsStr> = vec![tmp.path().as_os_str(), drip];
    args.extend(opts.iter().map(OsStr::new));
    let run = run_sh(FIND_PIPELINE, &args, b"");
    let what = format!("find -print0 | drip {} | xargs -0", opts.join(" "));
    run.assert_ok(&what);

    let got = split_nul(&run.stdout);
    let got_set: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
    let missing: Vec<Vec<u8>> = expected.difference(&got_set).cloned().collect();
    let extra: Vec<Vec<u8>> = got_set.difference(&expected).cloned().collect();
    assert!(
        missing.is_empty() && extra.is_empty() && got.len() == expected.len(),
        "{what}: {} names out for {} files.\nmissing: {}\nunexpected (mangled?): {}",
        got.len(),
        expected.len(),
        show(&missing),
        show(&extra)
    );
    assert_eq!(
        got, find_order,
        "{what}: names came out in a different order than find produced them"
    );
    run
}

#[test]
fn find_print0_unlimited_rate() {
    if !common::have(&["find", "xargs"]) {
        return;
    }
    let _serial = common::timing();
    let run = find_run(&["-0", "--rate", "inf"]);
    // Unpaced: nothing should make this slow.
    assert!(
        run.elapsed < Duration::from_secs(10),
        "--rate inf took {:?}",
        run.elapsed
    );
}

/// Shell pipeline: `$1` drip-status file, `$2` directory, `$3` URL,
/// `$4...` drip command. Eight concurrent curls POST one file name each as
/// the raw request body, so the server sees both the name and when it came.
const FIND_CURL_PIPELINE: &str = r#"
st=$1; dir=$2; url=$3; shift 3
find "$dir" -type f -print0 |
  { "$@"; echo $? > "$st"; } |
  xargs -0 -n1 -P8 curl -q -s -S -f -o /dev/null --noproxy '*' --max-time 20 "$url" --data-raw
"#;

/// `find -print0 | drip -0 --rate 50/s | xargs -0 -n1 -P8 curl --data-raw`:
/// names arrive intact and exactly once, and they arrive paced rather than
/// all at the end (a NUL-delimited stdout that is only flushed on newline or
/// at exit would deliver them in one clump).
#[test]
fn find_print0_paced() {
    if !common::have(&["find", "xargs", "curl"]) {
        return;
    }
    let _serial = common::timing();
    const PLAIN: usize = 26;
    let tmp = tempfile::tempdir().expect("tempdir");
    let expected = make_tree(tmp.path(), PLAIN);
    let n = expected.len();
    let server = Server::start();
    let url = format!("http://{}/file", server.addr);
    let drip = OsStr::new(common::bin());
    let args: Vec<&OsStr> = vec![
        tmp.path().as_os_str(),
        OsStr::new(&url),
        drip,
        OsStr::new("-0"),
        OsStr::new("--rate"),
        OsStr::new("50/s"),
    ];
    let run = run_sh(FIND_CURL_PIPELINE, &args, b"");
    let what = "find -print0 | drip -0 --rate 50/s | xargs -0 -P8 curl --data-raw";
    run.assert_ok(what);
    let hits = server.hits();
    drop(server);

    let mut counts: BTreeMap<&[u8], usize> = BTreeMap::new();
    for h in &hits {
        *counts.entry(h.body.as_slice()).or_default() += 1;
    }
    let missing: Vec<Vec<u8>> = expected
        .iter()
        .filter(|p| !counts.contains_key(p.as_slice()))
        .cloned()
        .collect();
    let extra: Vec<Vec<u8>> = counts
        .keys()
        .filter(|b| !expected.contains(**b))
        .map(|b| b.to_vec())
        .collect();
    let dups: Vec<Vec<u8>> = counts
        .iter()
        .filter(|&(_, &c)| c > 1)
        .map(|(b, _)| b.to_vec())
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && dups.is_empty() && hits.len() == n,
        "{what}: server got {} names for {n} files.\nmissing: {}\nunexpected (mangled?): {}\n\
         duplicated: {}",
        hits.len(),
        show(&missing),
        show(&extra),
        show(&dups)
    );

    // Records are never early, so the last release is at least (n-1)/50 s
    // after the first and the pipeline cannot finish sooner than that.
    let nominal = Duration::from_millis(20) * (n as u32 - 1);
    let mut at: Vec<Instant> = hits.iter().map(|h| h.at).collect();
    at.sort();
    let span = at[n - 1] - at[0];
    eprintln!(
        "{what}: {n} files, arrivals span {:.1} ms, pipeline {:.1} ms (nominal {:.1} ms)",
        span.as_secs_f64() * 1e3,
        run.elapsed.as_secs_f64() * 1e3,
        nominal.as_secs_f64() * 1e3
    );
    assert!(
        run.elapsed >= nominal,
        "{what}: {n} records passed in {:?}, faster than the {nominal:?} the rate allows",
        run.elapsed
    );
    // Delivery is incremental, not in clumps (as it would be if NUL-delimited
    // output sat in a buffer until a newline or exit). If client start-up
    // latency varies by at most J, arrivals within a window W were released
    // within W + J, and at 50/s with burst 1 at most (W + J) / 20 ms + 1
    // records are released in any closed window of W + J. We take W = 100 ms
    // and a generous J = 200 ms: at 50/s with eight concurrent curls a loaded
    // machine was seen to deliver 10 within 100 ms after a stall. That gives
    // at most 16, where on-time delivery gives 5 to 7 and buffered output
    // arrives in one clump.
    let (clump, from) = common::most_in_closed_window(
        &at.iter().map(|t| *t - at[0]).collect::<Vec<_>>(),
        Duration::from_millis(100),
    );
    eprintln!("{what}: max arrivals in any 100 ms window = {clump} (bound 16)");
    assert!(
        clump <= 16 && span >= nominal / 2,
        "{what}: names arrived in clumps ({clump} within 100 ms from arrival #{from}; all {n} \
         within {span:?}), but at 50/s they should be spread over ~{nominal:?}; is drip \
         buffering NUL-delimited output?"
    );
}

#[test]
fn window_counting_is_correct() {
    let ms = |v: &[u64]| {
        v.iter()
            .map(|&m| Duration::from_millis(m))
            .collect::<Vec<_>>()
    };
    // Strict 20/s: closed 1 s windows hold 21.
    let strict: Vec<u64> = (0..60).map(|i| i * 50).collect();
    assert_eq!(
        common::most_in_closed_window(&ms(&strict), Duration::from_secs(1)).0,
        21
    );
    // Burst of 5 then 20/s: 25.
    let burst: Vec<u64> = (0..60u64).map(|i| i.saturating_sub(4) * 50).collect();
    assert_eq!(
        common::most_in_closed_window(&ms(&burst), Duration::from_secs(1)).0,
        25
    );
    // One early arrival pushes a window over.
    let mut early = strict.clone();
    early[21] = 999;
    early.sort_unstable();
    assert_eq!(
        common::most_in_closed_window(&ms(&early), Duration::from_secs(1)).0,
        22
    );
    assert_eq!(
        common::most_in_closed_window(&[], Duration::from_secs(1)).0,
        0
    );
}
