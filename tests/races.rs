//! Signal races, measured to the byte: the test feeds drip's stdin through
//! a pipe it keeps a reading end of, so after drip has exited it knows
//! exactly what drip consumed (what it wrote minus what is still in the
//! pipe). stdout plus the dead letter must then be that, each record once;
//! the one exception allowed is a record cut on stdout by a second signal,
//! which is then in the dead letter whole.
#![allow(unsafe_code)]

use crate::common;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{command, send_signal, wait_for, wait_until_catching};

/// A small deterministic generator (xorshift), seeded per run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Record `i` of the input: a fixed-width number and a newline.
fn record(i: u64) -> String {
    format!("{i:08}\n")
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just opened and are owned here alone.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: F_GETFL/F_SETFL on an open descriptor; plain integers.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

/// Write the numbered stream to `fd` (non-blocking) in chunks of random
/// size, cutting records anywhere, until `stop`; returns the bytes written.
fn feed(fd: OwnedFd, stop: Arc<AtomicBool>, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let mut input = Vec::new();
    let mut written = 0;
    let mut next = 1;
    while !stop.load(Ordering::SeqCst) {
        while input.len() < written + 70_000 {
            input.extend_from_slice(record(next).as_bytes());
            next += 1;
        }
        let n = 1 + rng.below(65_536) as usize;
        let chunk = &input[written..written + n];
        // SAFETY: writes from a valid buffer of `chunk.len()` bytes.
        let rc = unsafe { libc::write(fd.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) };
        if rc > 0 {
            written += rc as usize;
        } else {
            thread::sleep(Duration::from_micros(200));
        }
    }
    input.truncate(written);
    input
}

/// What is left unread in the pipe, once nobody writes to it any more.
fn unread(fd: &OwnedFd) -> usize {
    set_nonblocking(fd);
    let mut left = 0;
    let mut buf = vec![0u8; 65_536];
    loop {
        // SAFETY: reads into a valid buffer of `buf.len()` bytes.
        let rc = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if rc <= 0 {
            return left;
        }
        left += rc as usize;
    }
}

/// One run: drip with `args` over the fed pipe, stdout read slowly; after
/// `first_ms`, signal `first`, then `second` `gap_us` later. Returns a
/// description of what went wrong, if anything.
fn one_run(
    args: &[&str],
    seed: u64,
    first: i32,
    second: i32,
    first_ms: u64,
    gap_us: u64,
) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let (read_end, write_end) = pipe();
    set_nonblocking(&write_end);
    let keep = read_end.try_clone().unwrap();
    let mut all_args = args.to_vec();
    all_args.extend(["-q", "--dead-letter", dead.to_str().unwrap()]);
    let mut child = command(&all_args)
        .stdin(Stdio::from(read_end))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || feed(write_end, stop, seed))
    };
    let mut out = child.stdout.take().unwrap();
    let slow = thread::spawn(move || {
        // A slow consumer: 4 KiB every 2 ms, then the rest once drip ends.
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            thread::sleep(Duration::from_millis(2));
        }
    });
    // The first signal `first_ms` after drip is under way (its handlers
    // in place), however slowly a busy machine started it.
    wait_until_catching(&child, first);
    thread::sleep(Duration::from_millis(first_ms));
    send_signal(&child, first);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_micros(gap_us) {
        std::hint::spin_loop();
    }
    send_signal(&child, second);
    let status = wait_for(&mut child, Duration::from_secs(20));
    stop.store(true, Ordering::SeqCst);
    let input = feeder.join().unwrap();
    let consumed = input.len() - unread(&keep);
    let stdout = slow.join().unwrap();
    let dead = std::fs::read(&dead).unwrap_or_default();
    let what =
        format!("{args:?} seed {seed} signals {first},{second} at {first_ms} ms, gap {gap_us} µs");
    // drip may have finished stopping before the second signal came.
    if status.code() != Some(128 + second) && status.code() != Some(128 + first) {
        return Some(format!("{what}: exit status {status:?}"));
    }
    check(&input[..consumed], &stdout, &dead).map(|e| format!("{what}: {e}"))
}

/// stdout plus the dead letter must hold each record of `consumed` once
/// (its last record possibly partial, then in the dead letter with a
/// newline); stdout may end in a cut record that is in the dead letter.
fn check(consumed: &[u8], stdout: &[u8], dead: &[u8]) -> Option<String> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    let (consumed, stdout, dead) = (text(consumed), text(stdout), text(dead));
    let mut want: Vec<&str> = consumed.split_inclusive('\n').collect();
    let mut partial = None;
    if let Some(last) = want.last() {
        if !last.ends_with('\n') {
            partial = Some(last.to_string() + "\n");
            want.pop();
        }
    }
    let mut want: Vec<String> = want.into_iter().map(String::from).collect();
    want.extend(partial);
    let mut got: Vec<&str> = stdout.split_inclusive('\n').collect();
    let cut = got
        .last()
        .filter(|l| !l.ends_with('\n'))
        .map(|l| l.to_string());
    if cut.is_some() {
        got.pop();
    }
    let dead_lines: Vec<&str> = dead.split_inclusive('\n').collect();
    if let Some(cut) = &cut {
        if !dead_lines.iter().any(|l| l.starts_with(cut.as_str())) {
            return Some(format!(
                "record cut on stdout ({cut:?}) is not in the dead letter"
            ));
        }
    }
    let mut got: Vec<String> = got
        .into_iter()
        .chain(dead_lines)
        .map(String::from)
        .collect();
    got.sort_unstable();
    want.sort_unstable();
    if got == want {
        return None;
    }
    let twice = got.windows(2).filter(|w| w[0] == w[1]).count();
    let lost = want
        .iter()
        .filter(|w| got.binary_search(w).is_err())
        .count();
    let extra = got
        .iter()
        .filter(|g| want.binary_search(g).is_err())
        .count();
    Some(format!(
        "consumed {} records; stdout + dead letter {}: {lost} lost, {twice} twice, {extra} not in the input",
        want.len(),
        got.len()
    ))
}

/// Run `runs` randomized runs of each setting, two at a time.
fn race(settings: &[&[&'static str]], runs: u64, seed: u64) {
    let mut failures = Vec::new();
    let mut rng = Rng(seed);
    let mut jobs = Vec::new();
    for args in settings {
        for _ in 0..runs {
            let second = if rng.below(2) == 0 {
                libc::SIGTERM
            } else {
                libc::SIGHUP
            };
            let job = (
                args.to_vec(),
                rng.below(u64::MAX),
                second,
                80 + rng.below(200),
                rng.below(1000),
            );
            jobs.push(job);
        }
    }
    for pair in jobs.chunks(2) {
        let handles: Vec<_> = pair
            .iter()
            .cloned()
            .map(|(args, seed, second, at, gap)| {
                thread::spawn(move || one_run(&args, seed, libc::SIGTERM, second, at, gap))
            })
            .collect();
        failures.extend(handles.into_iter().filter_map(|h| h.join().unwrap()));
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
}

#[test]
fn a_second_signal_right_after_the_first_loses_nothing_unpaced() {
    race(
        &[
            &["-r", "inf", "-c", "100000", "-o", "drop-oldest"],
            &["-r", "inf", "-c", "10", "-o", "block"],
            // Draining after the first signal: big writes to a slow stdout.
            &["-r", "inf", "-c", "100000", "--drain"],
        ],
        10,
        0x5eed_0001,
    );
}

#[test]
fn a_second_signal_right_after_the_first_loses_nothing_paced() {
    race(
        &[
            &["-r", "100/s", "-c", "10"],
            &["-r", "2000/s", "-c", "1000", "-o", "drop-newest", "--drain"],
        ],
        10,
        0x5eed_0002,
    );
}
