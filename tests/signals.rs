//! Every catchable signal either stops drip as SIGTERM does (the books and
//! the dead letter kept, status 128 + n) or changes nothing.

use crate::common;

use std::process::Stdio;
use std::thread;
use std::time::Duration;

use common::{command, numbered, send_signal, wait_for};

/// `seq 30 | drip -r 10/s --dead-letter DL --stats`, signalled with `sig`
/// after half a second: returns the exit code, stdout, the dead letter and
/// stderr.
fn signalled(sig: i32) -> (Option<i32>, String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let input = common::temp_file(numbered(1..=30).as_bytes());
    let mut child = command(&[
        "-q",
        "-r",
        "10/s",
        "--stats",
        "--dead-letter",
        dead.to_str().unwrap(),
    ])
    .stdin(Stdio::from(input.reopen().unwrap()))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    thread::sleep(Duration::from_millis(500));
    send_signal(&child, sig);
    let status = wait_for(&mut child, Duration::from_secs(10));
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    let dead = std::fs::read_to_string(&dead).unwrap_or_default();
    (status.code(), text(out.stdout), dead, text(out.stderr))
}

#[test]
fn every_stopping_signal_keeps_the_books_and_the_dead_letter() {
    let rt = libc::SIGRTMIN() + 3;
    let signals = [
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGQUIT,
        libc::SIGIO,
        libc::SIGPWR,
        rt,
    ];
    let runs: Vec<_> = signals
        .iter()
        .map(|&sig| (sig, thread::spawn(move || signalled(sig))))
        .collect();
    for (sig, run) in runs {
        let (code, stdout, dead, stderr) = run.join().unwrap();
        assert_eq!(code, Some(128 + sig), "signal {sig}: {stderr}");
        let written = stdout.lines().count();
        assert!(
            (1..30).contains(&written),
            "signal {sig}: {written} written"
        );
        assert_eq!(
            stdout + &dead,
            numbered(1..=30),
            "signal {sig}: stdout + dead letter"
        );
        assert!(
            stderr.contains(&format!("drip: read 30, written {written},"))
                && stderr.contains(&format!("undelivered {}", 30 - written)),
            "signal {sig}: {stderr}"
        );
    }
}

#[test]
fn harmless_signals_change_nothing() {
    let mut child = command(&["-q", "-r", "20/s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, numbered(1..=5).as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(100));
    for sig in [libc::SIGWINCH, libc::SIGCHLD, libc::SIGURG, libc::SIGCONT] {
        send_signal(&child, sig);
    }
    thread::sleep(Duration::from_millis(100));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a harmless signal stopped drip"
    );
    drop(stdin);
    assert!(wait_for(&mut child, Duration::from_secs(5)).success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), numbered(1..=5));
}

/// A FIFO no one reads, named as `--dead-letter`, `--joblog` or
/// `--stats-json`, does not hold drip: a signal while drip waits for its
/// reader stops drip at once, with its summary and status 128 + n.
#[test]
fn a_fifo_no_one_reads_does_not_hold_a_signal_up() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("f");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let f = fifo.to_str().unwrap();
    let input = common::temp_file(numbered(1..=10).as_bytes());
    let path = input.path().to_str().unwrap();
    // The input on stdin, or (`true`) a FILE argument: not read either way.
    for (args, sig, as_file) in [
        (vec!["--dead-letter", f], libc::SIGTERM, false),
        (vec!["--dead-letter", f], libc::SIGINT, false),
        (vec!["--dead-letter", f], libc::SIGHUP, false),
        (vec!["--joblog", f, "--exec", "true"], libc::SIGTERM, false),
        (vec!["--stats-json", f], libc::SIGTERM, false),
        (vec!["--dead-letter", f, path], libc::SIGTERM, true),
    ] {
        let mut all = vec!["-r", "inf", "--stats"];
        all.extend_from_slice(&args);
        let stdin = match as_file {
            true => Stdio::null(),
            false => Stdio::from(input.reopen().unwrap()),
        };
        let mut child = command(&all)
            .stdin(stdin)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(300));
        send_signal(&child, sig);
        let status = wait_for(&mut child, Duration::from_secs(2));
        let err = common::stderr_of(&mut child);
        assert_eq!(status.code(), Some(128 + sig), "{args:?} {sig}: {err}");
        // Stopped before reading began: not one record read.
        assert!(err.starts_with("drip: read 0,"), "{args:?} {sig}: {err}");
    }
}

/// A closed pipe holding `input` (what drip reads), and a pipe whose
/// buffer is full but for `free` bytes (drip's stdout, no one reading):
/// the stdin's reading end, stdout's reading and writing ends.
fn ended_input_and_stalled_stdout(
    input: &[u8],
    free: usize,
) -> (
    rustix::fd::OwnedFd,
    rustix::fd::OwnedFd,
    rustix::fd::OwnedFd,
) {
    let (stdin_read, stdin_write) = rustix::pipe::pipe().unwrap();
    rustix::io::write(&stdin_write, input).unwrap();
    drop(stdin_write);
    let (out_read, out_write) = rustix::pipe::pipe().unwrap();
    let flags = rustix::fs::fcntl_getfl(&out_write).unwrap();
    rustix::fs::fcntl_setfl(&out_write, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
    while rustix::io::write(&out_write, &[b'.'; 4096]).is_ok() {}
    rustix::fs::fcntl_setfl(&out_write, flags).unwrap();
    if free > 0 {
        rustix::io::read(&out_read, &mut vec![0u8; free]).unwrap();
    }
    (stdin_read, out_read, out_write)
}

/// A one-record run whose record is half written to a stdout that then
/// takes no more (one page free in its pipe, a record of 10,000 bytes):
/// the rest waits to be written, the monitor and the control socket are
/// started for that write (`drip ctl list` finds the drip), and, as
/// docs/signals.md says, a first signal lets the record under way finish
/// while a second leaves at once.
#[test]
fn a_one_record_run_half_written_to_a_stalled_stdout_can_be_steered_and_stopped() {
    let runtime = tempfile::tempdir().unwrap();
    let mut record = vec![b'x'; 10_000];
    record.push(b'\n');
    // One page free: part of the record goes in, the rest waits.
    let (stdin_read, out_read, out_write) = ended_input_and_stalled_stdout(&record, 4096);
    let mut child = command(&["-r", "inf"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::from(stdin_read))
        .stdout(Stdio::from(out_write))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let began = std::time::Instant::now();
    loop {
        let (_, listed, _) = common::ctl(runtime.path(), &["list"]);
        if listed.contains(&pid) {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "drip ctl list never found the stalled drip: {listed}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    send_signal(&child, libc::SIGTERM);
    thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the record under way is finished first"
    );
    send_signal(&child, libc::SIGTERM);
    let status = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    drop(out_read);
}

/// A one-record input all there (a pipe with no writer left, read on
/// drip's main thread) and a stdout that takes nothing (a full pipe no one
/// reads): the record waits to be written, and a signal still stops drip,
/// as the monitor is started for the write that may wait.
#[test]
fn a_one_record_run_held_up_by_stdout_still_stops_on_a_signal() {
    // Stdout's pipe full: nothing more goes in until someone reads.
    let (stdin_read, out_read, out_write) = ended_input_and_stalled_stdout(b"x\n", 0);
    let mut child = command(&["-r", "inf"])
        .stdin(Stdio::from(stdin_read))
        .stdout(Stdio::from(out_write))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGTERM);
    let status = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    drop(out_read);
}
