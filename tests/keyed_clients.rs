//! Limits per key end to end, with real clients: `drip --key … --key-rate
//! 5/s | xargs -P16 curl` against a small HTTP server on 127.0.0.1 that
//! records when each request arrives and for which `Host`. Three host names
//! resolve to the loopback (`curl --resolve`); one has ten times the
//! records of the others. Without curl the test says so and passes, except
//! under `DRIP_REQUIRE_TOOLS=1`, where it fails (`common::have`; `.ci/run`
//! installs it).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common;

/// (arrival, Host header) per request.
type Hits = Arc<Mutex<Vec<(Instant, String)>>>;

fn serve(mut stream: TcpStream, at: Instant, hits: &Hits) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let host = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.trim().split(':').next().unwrap_or("").to_string())
        .unwrap_or_default();
    hits.lock().unwrap().push((at, host));
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

/// Start the server; returns its port and the hits.
fn server() -> (u16, Hits) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits: Hits = Arc::default();
    let shared = Arc::clone(&hits);
    thread::spawn(move || {
        for conn in listener.incoming() {
            let at = Instant::now();
            let Ok(stream) = conn else { continue };
            let hits = Arc::clone(&shared);
            thread::spawn(move || serve(stream, at, &hits));
        }
    });
    (port, hits)
}

#[test]
fn a_noisy_host_waits_while_the_quiet_ones_keep_flowing() {
    if !common::have(&["curl", "xargs"]) {
        return;
    }
    let _t = common::beside_timing();
    let (port, hits) = server();
    let hosts = [("noisy.test", 20), ("quiet-a.test", 2), ("quiet-b.test", 2)];
    // The noisy host's records all come first: with one limit for all, the
    // quiet ones would wait behind them.
    let input: String = hosts
        .iter()
        .flat_map(|&(host, n)| (0..n).map(move |i| format!("http://{host}:{port}/r/{i}\n")))
        .collect();
    let resolve: String = hosts
        .iter()
        .map(|(host, _)| format!(" --resolve {host}:{port}:127.0.0.1"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let script = format!(
        "\"$0\" -q --key host --key-rate 5/s --stats-json \"$1\" | \
         xargs -n1 -P16 curl -q -s -S -f -o /dev/null --noproxy '*' --max-time 20{resolve}"
    );
    let start = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_drip"))
        .arg(&stats)
        .env("LC_ALL", "C")
        .env("XDG_RUNTIME_DIR", common::runtime_dir())
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut child, input.as_bytes());
    let status = child.wait().unwrap();
    assert!(status.success(), "pipeline: {status}");
    let hits = hits.lock().unwrap().clone();
    assert_eq!(hits.len(), 24, "{hits:?}");
    let mut by_host: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    for (at, host) in hits {
        by_host.entry(host).or_default().push(at - start);
    }
    for times in by_host.values_mut() {
        times.sort();
    }
    let last = |host: &str| *by_host[host].last().unwrap();
    eprintln!("{by_host:?}");
    for (host, n) in hosts {
        let times = &by_host[host];
        assert_eq!(times.len(), n, "{host}");
        // Burst 1 + 5/s × W in any window W, and one arrival more: on a
        // loaded machine one curl can start more than a period late.
        for (w, bound) in [(Duration::from_millis(500), 4), (Duration::from_secs(1), 7)] {
            let most = common::most_in_closed_window(times, w).0;
            assert!(
                most <= bound,
                "{host}: {most} requests within {w:?}: {times:?}"
            );
        }
    }
    // The noisy host takes 19 intervals of 200 ms (never fewer), on drip's
    // own clock: its records come first, so drip's first departure is its
    // first and its last is drip's last (the quiet ones are done long
    // before). Half an interval less for a first write the machine held
    // up; a burst one too big or a rate 20 % fast takes an interval or
    // more off (3600 ms, 3167 ms).
    let text = std::fs::read_to_string(&stats).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    let span = summary["span_ms"].as_f64().unwrap();
    assert!(
        span >= 19.0 * 200.0 - 100.0,
        "noisy.test's 20 records left within {span} ms: {by_host:?}"
    );
    // And it keeps to them as the server saw it (see common::drift): its
    // second half never ahead of the first half's schedule, nor far
    // behind it (a curl started late does not count; 20 % off moves the
    // second half 400 ms or more).
    let noisy: Vec<f64> = by_host["noisy.test"]
        .iter()
        .map(Duration::as_secs_f64)
        .collect();
    let drift = common::drift(&noisy, 0.2);
    assert!(
        (-0.03..0.2).contains(&drift),
        "noisy.test {drift} s off the schedule: {noisy:?}"
    );
    // The quiet ones take one interval each, whatever waits before them:
    // counted, not timed, they are done while the noisy host has most of
    // its records to go (with one limit for all they would come last).
    let noisy_by = |at: Duration| by_host["noisy.test"].iter().filter(|&&t| t <= at).count();
    for quiet in ["quiet-a.test", "quiet-b.test"] {
        let done = noisy_by(last(quiet));
        assert!(done <= 10, "{quiet} done after {done} noisy: {by_host:?}");
    }
}
