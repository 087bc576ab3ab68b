//! `--share redis://` at the start, against servers that are not what they
//! should be, on listeners of the test's own on 127.0.0.1 (no
//! `redis-server` needed): a service that answers in another protocol is
//! refused for good under every policy.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::{numbered, wait_for};

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
    stdin.write_all(numbered(1..=3).as_bytes()).unwrap();
    drop(stdin);
    let status = wait_for(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
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
