//! Side channels that stall or fail: a dead letter nobody reads, one that
//! cannot be written, one that must be on disk before drip exits.
#![allow(unsafe_code)]

use crate::common;

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{command, numbered, send_signal, wait_for};

/// A FIFO at `path`, opened here for reading (without waiting for a
/// writer), so that drip can open it and nobody reads it yet.
fn fifo(path: &std::path::Path) -> File {
    let name = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap()
}

/// `yes | drip ARGS`: the producer, and drip with piped stdout and stderr.
/// `yes` into `drip -q -r 100/s -c 10 -o drop-oldest --dead-letter PATH`:
/// it sheds nearly everything into the dead letter.
fn shedding_into(path: &std::path::Path) -> (Child, Child) {
    let dead = path.to_str().unwrap();
    yes_into(&[
        "-q",
        "-r",
        "100/s",
        "-c",
        "10",
        "-o",
        "drop-oldest",
        "--dead-letter",
        dead,
    ])
}

fn yes_into(args: &[&str]) -> (Child, Child) {
    let mut yes = Command::new("yes")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let drip = command(args)
        .stdin(Stdio::from(yes.stdout.take().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (yes, drip)
}

/// Count the lines of `child`'s stdout as they come.
fn count_lines(child: &mut Child) -> Arc<AtomicUsize> {
    let lines = Arc::new(AtomicUsize::new(0));
    let mut out = child.stdout.take().unwrap();
    let counter = Arc::clone(&lines);
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            let nl = buf[..n].iter().filter(|&&b| b == b'\n').count();
            counter.fetch_add(nl, Ordering::SeqCst);
        }
    });
    lines
}

/// Read `file` (non-blocking) at about `per_second` bytes a second until
/// `stop`, then to its end; returns the lines read.
fn read_slowly(mut file: File, per_second: usize, stop: Arc<AtomicBool>) -> usize {
    let mut lines = 0;
    let mut buf = vec![0u8; per_second / 20];
    let mut ended_at = None;
    loop {
        match file.read(&mut buf) {
            Ok(0) if stop.load(Ordering::SeqCst) => return lines,
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count(),
            Err(_) => {}
        }
        if stop.load(Ordering::SeqCst) {
            // Drain: the writer may still be writing.
            let since = *ended_at.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(10) {
                return lines;
            }
            thread::sleep(Duration::from_millis(1));
        } else {
            thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_slow_dead_letter_does_not_slow_stdout() {
    // The dead letter is read at about 1.3 MB/s while drip sheds nearly
    // all of `yes`: stdout keeps its 100/s.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dl");
    let reader = fifo(&path);
    let stop = Arc::new(AtomicBool::new(false));
    let slow = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || read_slowly(reader, 1_300_000, stop))
    };
    let (mut yes, mut drip) = shedding_into(&path);
    let lines = count_lines(&mut drip);
    thread::sleep(Duration::from_secs(2));
    let written = lines.load(Ordering::SeqCst);
    send_signal(&drip, libc::SIGTERM);
    stop.store(true, Ordering::SeqCst);
    let status = wait_for(&mut drip, Duration::from_secs(20));
    let _ = yes.kill();
    let _ = yes.wait();
    slow.join().unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(
        written >= 100,
        "{written} records on stdout in 2 s at 100/s with a slow dead letter"
    );
}

#[test]
fn a_dead_letter_nobody_reads_holds_reading_back_and_signals_still_work() {
    // Nobody reads the dead letter: drip stops reading (backpressure),
    // writes what its bucket held, and a second signal still makes it
    // leave at once, saying what could not go to the dead letter.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dl");
    let _reader = fifo(&path);
    let (mut yes, mut drip) = shedding_into(&path);
    let lines = count_lines(&mut drip);
    thread::sleep(Duration::from_millis(1000));
    send_signal(&drip, libc::SIGTERM);
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    send_signal(&drip, libc::SIGTERM);
    let status = wait_for(&mut drip, Duration::from_secs(10));
    let took = start.elapsed();
    let _ = yes.kill();
    let _ = yes.wait();
    let mut stderr = String::new();
    drip.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(took < Duration::from_secs(3), "second signal took {took:?}");
    assert!(
        lines.load(Ordering::SeqCst) >= 10,
        "the bucket was not written"
    );
    assert!(
        stderr.contains("drip: --dead-letter: ") && stderr.contains("records not written"),
        "{stderr}"
    );
}

#[test]
fn a_dead_letter_that_cannot_be_written_stops_drip_at_once() {
    // /dev/full fails every write (ENOSPC), as a full disk does.
    let (mut yes, mut drip) = yes_into(&[
        "-q",
        "-r",
        "10/s",
        "-c",
        "10",
        "-o",
        "drop-oldest",
        "--stats",
        "--dead-letter",
        "/dev/full",
    ]);
    let _lines = count_lines(&mut drip);
    let status = wait_for(&mut drip, Duration::from_secs(5));
    let _ = yes.kill();
    let _ = yes.wait();
    let mut stderr = String::new();
    drip.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    // The summary (two lines), then the error.
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines[0].starts_with("drip: read "), "{stderr}");
    assert_eq!(
        lines.last().copied(),
        Some("drip: --dead-letter /dev/full: No space left on device"),
        "{stderr}"
    );
}

#[test]
fn what_was_shed_is_in_the_file_within_a_second() {
    // The input stays open; 89 of 100 records are shed at once (1 leaves,
    // 10 wait). They must be in the file soon after, so that a kill -9
    // loses none of them.
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let mut child = command(&[
        "-q",
        "-r",
        "1/s",
        "-c",
        "10",
        "-o",
        "drop-oldest",
        "--dead-letter",
        dead.to_str().unwrap(),
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(numbered(1..=100).as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(1200));
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    let shed = std::fs::read_to_string(&dead).unwrap();
    assert_eq!(shed, numbered(2..=90), "shed records not on disk");
}

/// A FIFO at `path` whose pipe is already full: its reading end, and a
/// writing end kept open so that it stays full until the test reads it.
fn full_fifo(path: &std::path::Path) -> (File, File) {
    let reader = fifo(path);
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap();
    while writer.write(&[b'#'; 4096]).is_ok() {}
    (reader, writer)
}

#[test]
fn a_stalled_stderr_never_holds_up_the_exit_or_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stderr");
    let (_reader, _writer) = full_fifo(&path);
    let stderr = || std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let input = common::temp_file(numbered(1..=200).as_bytes());
    // Every record written, then the exit, with stderr stalled throughout.
    let mut done = command(&["-q", "-r", "400/s", "--stats-interval", "10ms"])
        .stdin(Stdio::from(input.reopen().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr()))
        .spawn()
        .unwrap();
    let status = wait_for(&mut done, Duration::from_secs(10));
    let out = done.wait_with_output().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), numbered(1..=200));
    // A signal while stderr is stalled.
    let mut stopped = command(&["-r", "10/s", "--stats-interval", "10ms", "--progress"])
        .stdin(Stdio::from(input.reopen().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr()))
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    send_signal(&stopped, libc::SIGTERM);
    let status = wait_for(&mut stopped, Duration::from_secs(5));
    assert_eq!(status.code(), Some(143));
}

#[test]
fn stats_lines_dropped_on_a_stalled_stderr_are_counted_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stderr");
    let (mut reader, writer) = full_fifo(&path);
    let mut child = command(&["-q", "-r", "100/s", "--stats-interval", "10ms"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::OpenOptions::new().write(true).open(&path).unwrap(),
        ))
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(numbered(1..=10).as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(500));
    // stderr drains; then the input ends and drip exits.
    drop(writer);
    let drain = thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 65536];
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => text.extend_from_slice(&buf[..n]),
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    thread::sleep(Duration::from_millis(200));
    drop(stdin);
    assert!(wait_for(&mut child, Duration::from_secs(5)).success());
    let text = drain.join().unwrap();
    let note = text
        .lines()
        .find(|l| l.starts_with("drip: stats: "))
        .unwrap_or_else(|| panic!("no note of dropped lines in {text:?}"));
    let n: u64 = note["drip: stats: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 10, "{note}");
    assert!(note.ends_with("lines dropped: stderr or the stats file was not taking them"));
}
