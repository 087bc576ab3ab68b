//! `--share redis://` at the start, against servers that are not what they
//! should be, on listeners of the test's own on 127.0.0.1 (no
//! `redis-server` needed): a service that answers in another protocol is
//! refused for good under every policy. So are Redis servers that can never
//! hold the state, real ones the tests start: a Sentinel given as
//! `redis://`, a primary the sentinels do not know, a server without
//! scripts; a cluster node that does not own drip's slot leads drip to the
//! one that does. And a state file
//! whose lock is held while drip starts: its hello answered late.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::DirBuilderExt;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::redis_server::{free_port, RedisServer as Server};
use common::{feed, numbered, wait_for};

/// A listener that answers every connection with `reply` (then keeps it
/// open); its port.
fn answering(reply: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut held = Vec::new();
        for con in listener.incoming() {
            let Ok(mut con) = con else { continue };
            let mut buf = [0u8; 1024];
            let _ = con.read(&mut buf);
            let _ = con.write_all(reply);
            held.push(con);
        }
    });
    port
}

/// `drip ARGS` on three records; its status and stderr.
fn run_drip(args: &[&str]) -> (Option<i32>, String) {
    let runtime = tempfile::tempdir().unwrap();
    let mut cmd = common::command(args);
    cmd.env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn drip");
    let mut stdin = child.stdin.take().unwrap();
    // A drip that stops at its setup may have exited before the records
    // are written: the pipe is then closed (EPIPE), which is no failure of
    // the test; its status and stderr say what drip did.
    if let Err(e) = stdin.write_all(numbered(1..=3).as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(stdin);
    let status = wait_for(&mut child, Duration::from_secs(20));
    let err = common::stderr_of(&mut child);
    (status.code(), err)
}

/// A `redis://` URL that reaches an HTTP server, or a service that greets
/// with something else, is no setup a retry mends: one line and exit 4 at
/// once under every policy, as for a refused password (it was a four-line
/// parser error, and under `wait` drip waited for ever).
#[test]
fn a_server_that_is_not_redis_stops_with_status_4_under_every_policy() {
    let http = answering(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let greeting = answering(b"SSH-2.0-OpenSSH_9.6\r\n");
    for port in [http, greeting] {
        for policy in ["wait", "local", "fail"] {
            let share = format!("redis://127.0.0.1:{port}/x");
            let started = Instant::now();
            let (status, err) =
                run_drip(&["-r", "10/s", "--share", &share, "--share-on-error", policy]);
            assert_eq!(status, Some(4), "{policy}: {err}");
            assert!(started.elapsed() < Duration::from_secs(5), "{policy}");
            assert_eq!(
                err,
                format!("drip: --share x: not a Redis server (127.0.0.1:{port} answered in another protocol: is it the right port?)\n"),
                "{policy}"
            );
        }
    }
}

/// A listener that accepts every connection and never answers; its port.
fn silent() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    port
}

/// `drip ARGS` on `records` records from a pipe held open, its stdout
/// stamped (s since the start) by a thread started first.
fn spawn_on(
    args: &[&str],
    records: usize,
    runtime: &std::path::Path,
) -> (std::process::Child, thread::JoinHandle<Vec<(f64, String)>>) {
    let mut cmd = common::command(args);
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn drip");
    let mut stdin = child.stdin.take().unwrap();
    thread::spawn(move || {
        let _ = stdin.write_all(numbered(1..=records).as_bytes());
        // Held open: drip reads on until it is stopped.
        thread::sleep(Duration::from_secs(30));
    });
    let out = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut holder = Vec::new();
        let mut lines = Vec::new();
        let mut out = out;
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            holder.extend_from_slice(&buf[..n]);
            let t = start.elapsed().as_secs_f64();
            while let Some(i) = holder.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = holder.drain(..=i).collect();
                lines.push((t, String::from_utf8_lossy(&line[..i]).into_owned()));
            }
        }
        lines
    });
    (child, reader)
}

/// Against a server that accepts connections and never answers, a SIGTERM
/// in the first moments stops drip as at any time: the summary, the
/// `--stats-json`, status 143, under `wait` (once the first calls have
/// timed out) and `local` (it was killed by the signal's default action
/// while drip waited for the server, for about 2 s, with no summary and an
/// empty --stats-json). Under `fail` the state unreachable at the start
/// stops drip with status 4, which a signal does not override.
#[test]
fn a_signal_while_the_state_has_not_answered_stops_drip_with_its_summary() {
    let port = silent();
    for (policy, after) in [
        ("wait", 100),
        ("local", 300),
        ("local", 1500),
        ("wait", 1500),
    ] {
        let runtime = tempfile::tempdir().unwrap();
        let stats = runtime.path().join("stats.json");
        let share = format!("redis://127.0.0.1:{port}/x");
        let args = [
            "-r",
            "10/s",
            "--share",
            &share,
            "--share-on-error",
            policy,
            "--stats",
            "--stats-json",
        ];
        let mut args: Vec<&str> = args.to_vec();
        let stats_arg = stats.display().to_string();
        args.push(&stats_arg);
        let (mut child, reader) = spawn_on(&args, 50, runtime.path());
        thread::sleep(Duration::from_millis(after));
        common::send_signal(&child, libc::SIGTERM);
        let status = wait_for(&mut child, Duration::from_secs(10));
        let written = reader.join().unwrap().len();
        let err = common::stderr_of(&mut child);
        let case = format!("{policy}, TERM after {after} ms: {status}: {err}");
        assert_eq!(status.code(), Some(143), "{case}");
        assert!(err.contains("drip: read "), "{case}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).expect(&case);
        let n = |k: &str| json[k].as_u64().unwrap_or_else(|| panic!("{k}: {case}"));
        assert_eq!(n("written"), written as u64, "{case}");
        assert_eq!(n("read"), n("written") + n("undelivered"), "{case}");
    }
}

/// Under `local`, a state that does not answer from the start is paced
/// alone from the start: records flow at the rate divided by the peers
/// within a moment, not once the first calls have timed out (about 2 s).
#[test]
fn local_paces_alone_from_the_start_while_the_state_does_not_answer() {
    let port = silent();
    let runtime = tempfile::tempdir().unwrap();
    let share = format!("redis://127.0.0.1:{port}/x");
    let (mut child, reader) = spawn_on(
        &[
            "-r",
            "20/s",
            "--share",
            &share,
            "--share-on-error",
            "local",
            "--share-peers",
            "2",
            "-q",
        ],
        100,
        runtime.path(),
    );
    thread::sleep(Duration::from_millis(1500));
    common::send_signal(&child, libc::SIGTERM);
    let status = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(143));
    let lines = reader.join().unwrap();
    let first = lines.first().map(|l| l.0);
    assert!(
        first.is_some_and(|t| t < 0.8),
        "first record at {first:?} s"
    );
    // 10/s alone (20/s over 2 peers) from about 0.25 s to 1.5 s: 12 or 13,
    // never the 20/s of the whole limit.
    assert!((8..=15).contains(&lines.len()), "{} written", lines.len());
}

/// Under `fail`, a SIGTERM while the state has not answered yet leaves the
/// outcome to the state: unreachable, status 4 with its one line (the
/// status that wins over a signal), never the signal's default action.
#[test]
fn a_signal_while_the_state_has_not_answered_under_fail_gives_status_4() {
    let port = silent();
    let runtime = tempfile::tempdir().unwrap();
    let share = format!("redis://127.0.0.1:{port}/x");
    let (mut child, _reader) = spawn_on(
        &["-r", "10/s", "--share", &share, "--share-on-error", "fail"],
        5,
        runtime.path(),
    );
    thread::sleep(Duration::from_millis(300));
    common::send_signal(&child, libc::SIGTERM);
    let status = wait_for(&mut child, Duration::from_secs(10));
    let err = common::stderr_of(&mut child);
    assert_eq!(status.code(), Some(4), "{status}: {err}");
    assert_eq!(
        err,
        "drip: --share x: the shared state cannot be reached: no answer within 1000 ms (--share-on-error fail)\n"
    );
}

/// Case: drip's hello answered late (the state file's lock held for
/// 300 ms as drip starts; a far Redis would do the same), with keys that
/// ask for their shared slots at their turns under a binding shared
/// global limit (3 keys at 5/s each, 12/s in all): every record is
/// written. The global lease, told nothing before its first look had gone
/// by, never reserved, and drip wrote nothing for ever.
#[test]
fn keys_flow_when_the_hello_is_answered_late() {
    let runtime = tempfile::tempdir().unwrap();
    let dir = runtime.path().join("drip");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let lock = std::fs::File::create(dir.join("late.json.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let mut cmd = common::command(&[
        "-r",
        "12/s",
        "--key",
        "1",
        "--key-rate",
        "5/s:2",
        "--share",
        "late",
    ]);
    cmd.env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn drip");
    let input: String = (1..=8)
        .flat_map(|i| ["a", "b", "c"].map(|k| format!("{k} {i}\n")))
        .collect();
    feed(&mut child, input.as_bytes());
    thread::sleep(Duration::from_millis(300));
    drop(lock);
    let status = wait_for(&mut child, Duration::from_secs(20));
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(out.lines().count(), 24, "{out}");
}

/// A Redis Cluster node, its bus on a free port of its own (the default,
/// the port + 10000, may be past 65535).
fn cluster_node() -> Server {
    Server::options()
        .args(&[
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &free_port().to_string(),
        ])
        .start()
}

/// The port of `node`'s cluster bus.
fn bus_port(node: &Server) -> String {
    let nodes = node.query(&["CLUSTER", "MYID"]).ok();
    let id = match nodes {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("CLUSTER MYID: {other:?}"),
    };
    let Ok(redis::Value::BulkString(nodes)) = node.query(&["CLUSTER", "NODES"]) else {
        panic!("CLUSTER NODES");
    };
    let nodes = String::from_utf8_lossy(&nodes).into_owned();
    // `ID 127.0.0.1:PORT@BUS flags …`
    let line = nodes.lines().find(|l| l.starts_with(&id)).expect("myself");
    let addr = line.split(' ').nth(1).unwrap();
    let bus = addr.split('@').nth(1).unwrap();
    bus.split(',').next().unwrap().to_string()
}

/// Under each policy, `drip` on `share` stops at once with status 4 and
/// the one line `says`.
fn stops_with_status_4_under_every_policy(limits: &[&str], share: &str, says: &str) {
    for policy in ["wait", "local", "fail"] {
        let mut args = limits.to_vec();
        args.extend(["--share", share, "--share-on-error", policy]);
        let started = Instant::now();
        let (status, err) = run_drip(&args);
        assert_eq!(status, Some(4), "{share} {policy}: {err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{policy}");
        assert_eq!(err, format!("{says}\n"), "{share} {policy}");
    }
}

/// A Redis Cluster node that does not own the slot of drip's keys answers
/// MOVED, which drip follows to the node that owns them: through either
/// node every record is sent, status 0, nothing on stderr, and the state
/// is on the owner (drip stopped with status 4, naming the owner, before
/// it followed a cluster's redirections).
#[test]
fn a_cluster_node_without_drips_slot_leads_drip_to_the_one_that_owns_it() {
    if !common::have_redis() {
        return;
    }
    let (a, b) = (cluster_node(), cluster_node());
    // `drip:{q}` is in slot 11958: b owns it, a all the others.
    a.query(&["CLUSTER", "ADDSLOTSRANGE", "0", "11957", "11959", "16383"])
        .unwrap();
    b.query(&["CLUSTER", "ADDSLOTS", "11958"]).unwrap();
    let (b_port, b_bus) = (b.port.to_string(), bus_port(&b));
    a.query(&["CLUSTER", "MEET", "127.0.0.1", &b_port, &b_bus])
        .unwrap();
    // Until the cluster is up, a node answers CLUSTERDOWN (a state that
    // may pass, waited for).
    let started = Instant::now();
    loop {
        let moved = a.query(&["EXISTS", "drip:{q}"]);
        let owner = b.query(&["EXISTS", "drip:{q}"]);
        if matches!(&moved, Err(e) if e.kind() == redis::ErrorKind::Moved) && owner.is_ok() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the cluster did not come up: {moved:?} {owner:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    for port in [a.port, b.port] {
        let share = format!("redis://127.0.0.1:{port}/q");
        let (status, err) =
            run_drip(&["-r", "100/s", "--share", &share, "--share-on-error", "fail"]);
        assert_eq!((status, err.as_str()), (Some(0), ""), "{share}");
    }
    assert_eq!(
        b.query(&["EXISTS", "drip:{q}"]).unwrap(),
        redis::Value::Int(1)
    );
}

/// A URL naming a primary the sentinels do not know is no setup a retry
/// mends: one line naming the sentinels and the name, exit 4 at once under
/// every policy.
#[test]
fn a_primary_the_sentinels_do_not_know_stops_with_status_4_under_every_policy() {
    if !common::have_redis() {
        return;
    }
    let sentinel = Server::options().config("").args(&["--sentinel"]).start();
    let port = sentinel.port;
    let says = format!(
        "drip: --share s: the sentinels (127.0.0.1:{port}) know no primary named 'nosuch': give the name they monitor (SENTINEL MASTERS lists them)"
    );
    let share = format!("redis+sentinel://127.0.0.1:{port}/nosuch/s");
    stops_with_status_4_under_every_policy(&["-r", "10/s"], &share, &says);
}

/// `redis+sentinel://` naming a plain Redis, or `redis+cluster://` naming
/// a Redis without cluster support, is no setup a retry mends: one line
/// naming what was reached, exit 4 at once under every policy (drip
/// waited for ever, or under `local` paced alone for ever). `drip take`
/// says so too.
#[test]
fn a_plain_server_given_as_sentinels_or_a_cluster_stops_with_status_4_under_every_policy() {
    if !common::have_redis() {
        return;
    }
    let plain = Server::options().start();
    let port = plain.port;
    let says = format!(
        "drip: --share s: 127.0.0.1:{port} is not a Redis Sentinel (it does not know SENTINEL): give redis://127.0.0.1:{port}/NAME for one server, or redis+sentinel:// with the sentinels' addresses"
    );
    let share = format!("redis+sentinel://127.0.0.1:{port}/mymaster/s");
    stops_with_status_4_under_every_policy(&["-r", "10/s"], &share, &says);
    let says = format!(
        "drip: --share s: 127.0.0.1:{port} is not a Redis Cluster node (cluster_enabled:0): give redis://127.0.0.1:{port}/NAME for one server, or redis+cluster:// with the nodes of a cluster"
    );
    let share = format!("redis+cluster://127.0.0.1:{port}/s");
    stops_with_status_4_under_every_policy(&["-r", "10/s"], &share, &says);
    let out = common::command(&["take", &share, "-r", "10/s", "--timeout", "5s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("is not a Redis Cluster node"), "{err}");
}

/// A Sentinel's port answers drip's scripts with an unknown command: it
/// holds no data, and no retry mends that. One line saying it is a
/// Sentinel, exit 4 at once under every policy (under `wait` drip sent
/// nothing for ever). A server that does not know the scripts' commands
/// (renamed away) is refused so too.
#[test]
fn a_sentinel_or_a_server_without_scripts_stops_with_status_4_under_every_policy() {
    if !common::have_redis() {
        return;
    }
    // A Sentinel watching no primary: it answers all the same.
    let sentinel = Server::options().config("").args(&["--sentinel"]).start();
    let port = sentinel.port;
    let says = format!(
        "drip: --share s: 127.0.0.1:{port} is a Redis Sentinel, which holds no data (unknown command 'EVALSHA'): to have drip ask the sentinels for the primary, give redis+sentinel://HOST:PORT[,HOST:PORT...]/PRIMARY/NAME"
    );
    let share = format!("redis://127.0.0.1:{port}/s");
    stops_with_status_4_under_every_policy(&["-r", "10/s"], &share, &says);
    stops_with_status_4_under_every_policy(&["--key", "1", "--key-rate", "10/s"], &share, &says);
    let renamed: Vec<String> = [
        "--rename-command",
        "EVALSHA",
        "",
        "--rename-command",
        "EVAL",
        "",
    ]
    .map(String::from)
    .to_vec();
    let scriptless = Server::options().args(&renamed).start();
    let port = scriptless.port;
    let says = format!(
        "drip: --share s: 127.0.0.1:{port} does not run drip's scripts (unknown command 'EVALSHA'): drip needs a Redis (or Valkey) server that runs Lua scripts (EVALSHA, EVAL)"
    );
    let share = format!("redis://127.0.0.1:{port}/s");
    stops_with_status_4_under_every_policy(&["-r", "10/s"], &share, &says);
}
