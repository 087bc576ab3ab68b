//! A drip running in the background for the tests that steer it (`drip
//! ctl`, SIGHUP), its lines stamped as they arrive.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{command, send_signal, stderr_of, wait_for};

/// A drip running in the background, its lines stamped as they arrive
/// (seconds since `start`).
pub struct Running {
    /// The drip.
    pub child: Child,
    start: Instant,
    pub lines: Arc<Mutex<Vec<(f64, String)>>>,
}

impl Running {
    /// `drip ARGS` with `XDG_RUNTIME_DIR=runtime`, reading `input` (stdin
    /// left open: drip runs until stopped), run as `uid` if given.
    pub fn start(args: &[&str], runtime: &Path, input: String, uid: Option<u32>) -> Running {
        let mut cmd = command(args);
        cmd.env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(uid) = uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd.spawn().expect("spawn drip");
        let mut stdin = child.stdin.take().unwrap();
        thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
            // Held open until drip ends.
            thread::sleep(Duration::from_secs(120));
        });
        let start = Instant::now();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            super::each_timed_line(out, start, &mut |t, line| {
                sink.lock().unwrap().push((t, line))
            });
        });
        Running {
            child,
            start,
            lines,
        }
    }

    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn lines(&self) -> Vec<(f64, String)> {
        self.lines.lock().unwrap().clone()
    }

    /// Wait until `n` lines have come (at most 20 s).
    pub fn wait_lines(&self, n: usize) {
        let until = Instant::now() + Duration::from_secs(20);
        while self.lines.lock().unwrap().len() < n {
            assert!(Instant::now() < until, "fewer than {n} lines in time");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stop with SIGTERM: its exit status (128 + the signal's number when
    /// a signal ended it) and stderr.
    pub fn stop(mut self) -> (Option<i32>, String) {
        send_signal(&self.child, libc::SIGTERM);
        let status = wait_for(&mut self.child, Duration::from_secs(20));
        let err = stderr_of(&mut self.child);
        use std::os::unix::process::ExitStatusExt;
        (status.code().or(status.signal().map(|s| 128 + s)), err)
    }
}
