//! `--share redis+sentinel://` against real sentinels the test starts
//! (three `redis-server --sentinel`, a primary and its replica): the fence
//! that keeps a primary whose replica was promoted in its place from
//! granting slots that are used. Its failovers, under load, are in
//! tests/transitions.rs.

use crate::common;
use crate::topology;

use std::io::Read;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::{feed, numbered, wait_for};

/// A primary whose replica once acknowledged drip's writes, its replica
/// then stopped (SIGSTOP): drip cannot tell that from a replica promoted
/// in the primary's place, so the primary's reservations are not used.
/// Under `wait` nothing is written while the replica is stopped (once the
/// slots reserved before have gone), drip says why once, and when the
/// replica continues, sending resumes and every record is written.
#[test]
fn a_primary_whose_replica_stopped_grants_nothing_that_is_used() {
    if !common::have_redis() {
        return;
    }
    let t = topology::Sentinels::start();
    let share = t.url("fence");
    let mut cmd = common::command(&["-r", "50/s", "-c", "10", "-o", "block", "--share", &share]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn drip");
    let mut out = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut stamps = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            let t = start.elapsed().as_secs_f64();
            stamps.extend(buf[..n].iter().filter(|&&b| b == b'\n').map(|_| t));
        }
        stamps
    });
    feed(&mut child, numbered(1..=200).as_bytes());
    thread::sleep(Duration::from_millis(1500));
    let stopped = start.elapsed().as_secs_f64();
    t.replica.signal(libc::SIGSTOP);
    thread::sleep(Duration::from_millis(3000));
    let continued = start.elapsed().as_secs_f64();
    t.replica.signal(libc::SIGCONT);
    let status = wait_for(&mut child, Duration::from_secs(60));
    let stamps = reader.join().unwrap();
    let err = common::stderr_of(&mut child);
    assert!(status.success(), "{status}: {err}");
    assert_eq!(stamps.len(), 200, "{err}");
    // The slots reserved before the stop (a chunk, at most 200 ms) and a
    // call's wait for the acknowledgement (500 ms) go by; a consumer
    // stamping late is given 500 ms more.
    let quiet = (stopped + 1.2, continued);
    let during: Vec<&f64> = stamps
        .iter()
        .filter(|&&s| s > quiet.0 && s < quiet.1)
        .collect();
    assert!(
        during.is_empty(),
        "{} written between {:.2} s and {:.2} s, while the replica was stopped: {during:?}",
        during.len(),
        quiet.0,
        quiet.1
    );
    assert!(
        stamps.iter().any(|&s| s < stopped),
        "nothing written before the stop"
    );
    assert!(
        err.contains("acknowledged the call within 500 ms (WAIT 1), where one did before"),
        "{err}"
    );
    assert!(
        err.contains("the shared state answers again; sending"),
        "{err}"
    );
}
