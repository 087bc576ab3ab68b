//! `--metrics FILE`: the Prometheus text format, read back with a parser
//! of the format (openmetrics-parser's Prometheus grammar), while drip
//! runs and at exit; the file is replaced whole, never seen in part.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{command, feed, numbered, stderr_of, wait_for};
use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};

type Exposition = MetricsExposition<PrometheusType, PrometheusValue>;

/// The file at `path`, parsed; panics (with the text) when it does not parse.
fn parsed(path: &Path) -> Exposition {
    let text = std::fs::read_to_string(path).unwrap();
    parse_prometheus(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"))
}

/// The value of `family` at `labels` (values in the family's label order,
/// leaving out `drip`, the drip's name or pid, which every sample has).
fn value(m: &Exposition, family: &str, labels: &[&str]) -> f64 {
    let f = m
        .families
        .get(family)
        .unwrap_or_else(|| panic!("no {family}"))
        .without_label("drip")
        .unwrap_or_else(|e| panic!("{family}: {e:?}"));
    let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
    let sample = f
        .get_sample_by_label_values(&labels)
        .unwrap_or_else(|| panic!("no {family}{labels:?}"));
    match &sample.value {
        PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
        PrometheusValue::Counter(c) => c.value.as_f64(),
        other => panic!("{family}: {other:?}"),
    }
}

fn kind(m: &Exposition, family: &str) -> PrometheusType {
    m.families[family].family_type.clone()
}

/// Running and at exit: records by fate, depth, rate, the keys' top lists
/// (10 series each for 40 keys), all of it read back by the parser.
#[test]
fn the_file_parses_while_drip_runs_and_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drip.prom");
    let input: String = (1..=120).map(|i| format!("k{} {i}\n", i % 40)).collect();
    let mut child = command(&[
        "-r",
        "100/s",
        "--key",
        "1",
        "--key-rate",
        "50/s",
        "--metrics",
        path.to_str().unwrap(),
        "--stats-interval",
        "100ms",
        "--name",
        "exported",
    ])
    .env("XDG_RUNTIME_DIR", dir.path())
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    feed(&mut child, input.as_bytes());
    std::thread::sleep(Duration::from_millis(500));
    let running = parsed(&path);
    assert!(value(&running, "drip_queue_depth", &[]) > 0.0);
    assert_eq!(value(&running, "drip_records_read_total", &[]), 120.0);
    let written = value(&running, "drip_records_total", &["written"]);
    assert!(written > 0.0 && written < 120.0, "{written}");
    assert_eq!(
        value(&running, "drip_rate_limit_records_per_second", &[]),
        100.0
    );
    let status = wait_for(&mut child, Duration::from_secs(30));
    assert!(status.success());

    let at_exit = parsed(&path);
    assert_eq!(value(&at_exit, "drip_records_total", &["written"]), 120.0);
    for fate in ["dropped_newest", "dropped_oldest", "expired", "undelivered"] {
        assert_eq!(
            value(&at_exit, "drip_records_total", &[fate]),
            0.0,
            "{fate}"
        );
    }
    assert_eq!(value(&at_exit, "drip_queue_depth", &[]), 0.0);
    assert_eq!(value(&at_exit, "drip_keys_seen_total", &[]), 40.0);
    assert_eq!(value(&at_exit, "drip_paused", &[]), 0.0);
    let pid = child.id().to_string();
    // The parser keeps label names sorted.
    assert_eq!(value(&at_exit, "drip_info", &["exported", &pid]), 1.0);
    assert_eq!(
        kind(&at_exit, "drip_records_total"),
        PrometheusType::Counter
    );
    assert_eq!(kind(&at_exit, "drip_queue_depth"), PrometheusType::Gauge);
    // Per key: the top keys only, however many keys came.
    let top = &at_exit.families["drip_top_key_written"];
    assert_eq!(top.iter_samples().count(), 10);
    for sample in top.iter_samples() {
        assert!(matches!(&sample.value, PrometheusValue::Gauge(n) if n.as_f64() == 3.0));
    }
}

/// drip, unpaced and quiet, running `exec` (the command and its
/// arguments) for the records 1, 2 and 3 with its metrics in `metrics`
/// (its runtime directory `runtime`), its stdout to `stdout`; what it
/// left (its stderr piped).
fn exec_three_records(
    runtime: &Path,
    metrics: &Path,
    exec: &[&str],
    stdout: Stdio,
) -> std::process::Output {
    let mut args = vec![
        "-r",
        "inf",
        "-q",
        "--metrics",
        metrics.to_str().unwrap(),
        "--exec",
    ];
    args.extend_from_slice(exec);
    let mut child = command(&args)
        .env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    feed(&mut child, b"1\n2\n3\n");
    child.wait_with_output().unwrap()
}

/// With --exec: jobs by outcome, retries, overload pauses.
#[test]
fn the_jobs_figures_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.prom");
    let out = exec_three_records(
        dir.path(),
        &path,
        &["sh", "-c", "test \"$0\" != 2"],
        Stdio::null(),
    );
    assert_eq!(out.status.code(), Some(123));
    let m = parsed(&path);
    assert_eq!(value(&m, "drip_jobs_total", &["succeeded"]), 2.0);
    assert_eq!(value(&m, "drip_jobs_total", &["failed"]), 1.0);
    for family in [
        "drip_job_retries_total",
        "drip_overload_pauses_total",
        "drip_overload_responses_total",
    ] {
        assert_eq!(value(&m, family, &[]), 0.0, "{family}");
    }
}

/// Records estimated at 100, 200 and 50, each job reporting 120.
const SETTLED_INPUT: &str = "{\"i\":100}\n{\"i\":200}\n{\"i\":50}\n";

/// With --settle: each named cost's estimates charged, what settlement
/// gave back and charged on top (counters), what it spent all told and
/// what is in flight (gauges), by `cost`.
#[test]
fn the_costs_figures_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("costs.prom");
    let mut args = common::SETTLING_JOBS.to_vec();
    args.push("--name");
    args.push("costed");
    finished_drip(&args, &path, SETTLED_INPUT);
    let m = parsed(&path);
    for (family, want) in [
        ("drip_cost_estimated_total", 350.0),
        ("drip_cost_settled_back_total", 80.0),
        ("drip_cost_settled_extra_total", 90.0),
    ] {
        assert_eq!(value(&m, family, &["in"]), want, "{family}");
        assert_eq!(kind(&m, family), PrometheusType::Counter, "{family}");
    }
    // What was spent falls as settlement gives back: a gauge.
    assert_eq!(value(&m, "drip_cost_spent", &["in"]), 360.0);
    assert_eq!(kind(&m, "drip_cost_spent"), PrometheusType::Gauge);
    assert_eq!(value(&m, "drip_cost_in_flight", &["in"]), 0.0);
    assert_eq!(kind(&m, "drip_cost_in_flight"), PrometheusType::Gauge);
}

/// With --exec: the jobs' outputs drip could not pass on, here to a
/// stdout that fails every write (/dev/full), counted and exported.
#[test]
fn the_outputs_cut_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.prom");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = exec_three_records(dir.path(), &path, &["echo", "hello"], full.into());
    // A record's fate does not depend on its output.
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let m = parsed(&path);
    assert_eq!(value(&m, "drip_jobs_total", &["succeeded"]), 3.0);
    // Each job's stdout, "hello N\n", not written.
    assert_eq!(value(&m, "drip_job_outputs_cut_total", &[]), 3.0);
    assert_eq!(
        value(&m, "drip_job_output_bytes_unwritten_total", &[]),
        24.0
    );
    for family in [
        "drip_job_outputs_cut_total",
        "drip_job_output_bytes_unwritten_total",
    ] {
        assert_eq!(kind(&m, family), PrometheusType::Counter, "{family}");
    }
}

/// Replaced whole: read as fast as it is written, the file always parses
/// and ends with its last family. A run in which the test read the file
/// ten times or fewer in 700 ms (its reader starved on a busy machine)
/// tells too little: it is run again ([`common::until_judged`]).
#[test]
fn the_file_is_never_seen_in_part() {
    common::until_judged(5, Duration::from_secs(120), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("often.prom");
        let mut child = command(&[
            "-r",
            "200/s",
            "--metrics",
            path.to_str().unwrap(),
            "--stats-interval",
            "10ms",
        ])
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        feed(&mut child, numbered(1..=200).as_bytes());
        while !path.exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let until = Instant::now() + Duration::from_millis(700);
        let mut reads = 0;
        let last = format!("drip_paused{{drip=\"{}\"}} 0\n", child.id());
        while Instant::now() < until {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.ends_with(&last), "cut: {text}");
            parse_prometheus(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
            reads += 1;
        }
        wait_for(&mut child, Duration::from_secs(30));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".drip-metrics"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        (reads <= 10).then(|| format!("only {reads} reads in 700 ms"))
    });
}

/// A file that cannot be written stops drip before any record moves.
#[test]
fn an_unwritable_file_stops_drip_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = command(&["--metrics", "/nonexistent/dir/drip.prom"])
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("drip: --metrics /nonexistent/dir/drip.prom: ") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_a_regular_file_is_refused_and_left_alone() {
    // Renamed over, a FIFO (or /dev/null, for root) would be replaced by a
    // regular file: drip refuses it at once instead.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("m.prom");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let flag = fifo.display().to_string();
    let out = command(&["--metrics", &flag])
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err,
        format!("drip: --metrics {flag}: not a regular file (drip replaces the metrics file whole at every write)\n")
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

/// A second signal while drip cannot take stock in time (its dead letter,
/// a FIFO whose reader never reads, takes no more): drip leaves on its
/// own after a second, and the file holds the final books then too, as
/// at every exit: every record read is written or undelivered.
#[test]
fn a_forced_exit_leaves_the_final_books_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drip.prom");
    let dead = dir.path().join("dead");
    let made = std::process::Command::new("mkfifo").arg(&dead).status();
    assert!(made.unwrap().success(), "mkfifo");
    // Held open, never read: the dead letter fills the pipe and waits.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dead)
        .unwrap();
    let input = common::temp_file(numbered(1..=100_000).as_bytes());
    let mut child = command(&["-q", "-r", "1/s", "-c", "20000", "--dead-letter"])
        .arg(&dead)
        .arg("--metrics")
        .arg(&path)
        .arg(input.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The bucket full (the file is written every second).
    let start = Instant::now();
    while !path.exists() || value(&parsed(&path), "drip_queue_depth", &[]) < 19_999.0 {
        assert!(start.elapsed() < Duration::from_secs(30), "never full");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing shed yet: the dead letter's pipe is empty until the stop.
    assert_eq!(unread_bytes(&held), 0, "the dead letter before the stop");
    common::send_signal(&child, libc::SIGTERM);
    // The second signal only once the first was taken (the queue going to
    // the dead letter shows it): repeats that arrive before drip looks at
    // its signals count as one, and one TERM alone waits for ever here.
    let start = Instant::now();
    while unread_bytes(&held) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the stop never began"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "one signal ended the run"
    );
    common::send_signal(&child, libc::SIGTERM);
    let status = wait_for(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(143));
    let stderr = stderr_of(&mut child);
    assert!(stderr.contains("records not written"), "{stderr}");
    let at_exit = parsed(&path);
    let read = value(&at_exit, "drip_records_read_total", &[]);
    let written = value(&at_exit, "drip_records_total", &["written"]);
    let undelivered = value(&at_exit, "drip_records_total", &["undelivered"]);
    assert!(undelivered >= 19_999.0, "{undelivered} undelivered");
    assert_eq!(read, written + undelivered, "{read} read");
    assert_eq!(value(&at_exit, "drip_queue_depth", &[]), 0.0);
}

/// Bytes written to the pipe behind `end` and not yet read (FIONREAD).
#[allow(unsafe_code)]
fn unread_bytes(end: &std::fs::File) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD stores one int through the pointer, to a local.
    let rc = unsafe { libc::ioctl(end.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD");
    usize::try_from(n).unwrap()
}

/// A node_exporter with only the textfile collector, reading `dir`, on a
/// loopback port of its own; killed when dropped.
struct NodeExporter {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
}

impl NodeExporter {
    /// Started and answering; its log (stderr) in `log`.
    fn start(dir: &Path, log: &Path) -> NodeExporter {
        let bin = common::tool_path("prometheus-node-exporter");
        // A port free a moment ago may be taken since: then another.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = std::process::Command::new(&bin)
                .args(["--collector.disable-defaults", "--collector.textfile"])
                .arg("--collector.textfile.directory")
                .arg(dir)
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap();
            let start = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    let log = log.to_path_buf();
                    return NodeExporter { child, port, log };
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "node_exporter never answered"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!(
            "node_exporter would not start: {}",
            std::fs::read_to_string(log).unwrap()
        );
    }

    /// GET /metrics: the status line and the body.
    fn scrape(&self) -> (String, String) {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// drip, unpaced and quiet, over `input` with `args`, its figures in
/// `metrics`; its pid.
fn finished_drip(args: &[&str], metrics: &Path, input: &str) -> u32 {
    let mut child = command(&["-q", "-r", "inf", "--metrics", metrics.to_str().unwrap()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    feed(&mut child, input.as_bytes());
    assert!(wait_for(&mut child, Duration::from_secs(30)).success());
    child.id()
}

/// The README's recipe, several times over: drips' files side by side in
/// one textfile directory, a named one and two runs of an unnamed one (the
/// first one's file left there). node_exporter serves every drip's figures
/// and meets no series twice, the no-key lane and the empty key included:
/// otherwise it would serve one file's and drop the other's with no more
/// than a line in its log.
#[test]
fn node_exporter_serves_every_drips_figures_from_one_directory() {
    if !common::have(&["prometheus-node-exporter"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let textfiles = dir.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    // Keys x, x, "" (an empty field) and none (no second field).
    let keyed = [
        "--name",
        "one",
        "--key",
        "2",
        "--key-rate",
        "1000/s",
        "--field-separator",
        ",",
    ];
    finished_drip(
        &keyed,
        &textfiles.join("drip-one.prom"),
        "1,x\n2,\n3\n4,x\n",
    );
    let first = finished_drip(&[], &textfiles.join("drip-a.prom"), &numbered(1..=5));
    let second = finished_drip(&[], &textfiles.join("drip-b.prom"), &numbered(1..=6));
    let node = NodeExporter::start(&textfiles, &dir.path().join("node_exporter.log"));
    let (status, body) = node.scrape();
    assert!(status.contains(" 200 "), "{status}");
    let log = std::fs::read_to_string(&node.log).unwrap();
    assert!(!log.contains("error gathering metrics"), "{log}");
    let served = |sample: &str| {
        assert!(
            body.lines().any(|l| l == sample),
            "{sample} not served:\n{body}"
        )
    };
    served("drip_records_read_total{drip=\"one\"} 4");
    served(&format!("drip_records_read_total{{drip=\"{first}\"}} 5"));
    served(&format!("drip_records_read_total{{drip=\"{second}\"}} 6"));
    served("drip_records_total{drip=\"one\",fate=\"written\"} 4");
    served(&format!(
        "drip_info{{drip=\"{first}\",name=\"\",pid=\"{first}\"}} 1"
    ));
    served("drip_top_key_written{drip=\"one\",has_key=\"true\",key=\"x\"} 2");
    served("drip_top_key_written{drip=\"one\",has_key=\"true\",key=\"\"} 1");
    served("drip_top_key_written{drip=\"one\",has_key=\"false\",key=\"\"} 1");
    served("node_textfile_scrape_error 0");
    for file in ["drip-one.prom", "drip-a.prom", "drip-b.prom"] {
        let mtime = format!(
            "node_textfile_mtime_seconds{{file=\"{}\"}} ",
            textfiles.join(file).display()
        );
        assert!(body.contains(&mtime), "{mtime}:\n{body}");
    }
}

/// promtool, Prometheus's own checker, finds nothing to say of drip's
/// file: neither a fault nor a lint (with --key, with --exec, and with
/// --settle's cost figures).
#[test]
fn promtool_finds_the_file_sound() {
    if !common::have(&["promtool"]) {
        return;
    }
    let promtool = common::tool_path("promtool");
    let dir = tempfile::tempdir().unwrap();
    let keyed = dir.path().join("keyed.prom");
    let args = ["--key", "1", "--key-rate", "1000/s", "--name", "checked"];
    finished_drip(&args, &keyed, "a 1\nb 2\n\na 3\n");
    let jobs = dir.path().join("jobs.prom");
    finished_drip(&["--exec", "true"], &jobs, &numbered(1..=3));
    let costs = dir.path().join("costs.prom");
    let mut args = common::SETTLING_JOBS.to_vec();
    args.push("--name");
    args.push("costed");
    finished_drip(&args, &costs, SETTLED_INPUT);
    for file in [keyed, jobs, costs] {
        let out = std::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&file).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "{}: {out:?}",
            file.display()
        );
    }
}
