//! The progress display in a real terminal: drip runs inside tmux and the
//! test reads the screen with capture-pane. CI installs tmux; without it
//! these tests fail rather than pass silently.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

/// A detached tmux session on a private server, killed on drop.
struct Tmux {
    socket: String,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Run `script` (sh) in a new 120x20 terminal with `env` set.
    fn start(script: &str, env: &[(&str, &str)]) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock").display().to_string();
        let bin_dir = std::path::Path::new(common::bin()).parent().unwrap();
        let mut exports = format!(
            "export PATH='{}':\"$PATH\"; unset NO_COLOR CLICOLOR; ",
            bin_dir.display()
        );
        for (k, v) in env {
            exports.push_str(&format!("export {k}='{v}'; "));
        }
        // Keep the pane open after the script ends so its last screen can be read.
        let full = format!("{exports}{script}; echo DONE=$?; sleep 60");
        let status = Command::new("tmux")
            .args([
                "-S",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "20",
            ])
            .args(["env", "TERM=xterm-256color", "sh", "-c", &full])
            .status()
            .expect("tmux must be installed to run these tests (apt-get install tmux)");
        assert!(status.success(), "tmux failed to start");
        Tmux { socket, _dir: dir }
    }

    /// The screen's text (with escape sequences when `escapes`).
    fn screen(&self, escapes: bool) -> String {
        let mut cmd = Command::new("tmux");
        cmd.args(["-S", &self.socket, "capture-pane", "-p"]);
        if escapes {
            cmd.arg("-e");
        }
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    }

    /// Wait until the screen contains `text`, and return the screen.
    fn wait_for(&self, text: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen(false);
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < limit,
                "never saw {text:?}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-S", &self.socket, "kill-server"])
            .status();
    }
}

fn input_file(lines: usize) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    let text: String = (1..=lines).map(|i| format!("{i}\n")).collect();
    std::fs::write(f.path(), text).unwrap();
    f
}

#[test]
fn live_display_shows_the_bucket_and_clears_to_a_summary() {
    let input = input_file(30);
    let tmux = Tmux::start(
        &format!("drip -r 20/s {} > /dev/null", input.path().display()),
        &[],
    );
    let screen = tmux.wait_for("in 30 out", Duration::from_secs(5));
    let line = screen.lines().find(|l| l.contains("queued")).unwrap();
    // depth / capacity gauge, records in and out, the rate and an ETA.
    assert!(line.contains("/1000 queued"), "{line}");
    assert!(line.contains("in 30 out "), "{line}");
    assert!(line.contains("dropped 0"), "{line}");
    assert!(line.contains("/s"), "{line}");
    assert!(line.contains("ETA "), "{line}");
    // At exit the display is gone and the summary line stays.
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(10));
    assert!(!screen.contains("queued"), "display left behind:\n{screen}");
    assert!(screen.contains("drip: read 30, written 30"), "{screen}");
}

#[test]
fn display_says_when_output_is_blocked() {
    let input = input_file(200_000);
    let tmux = Tmux::start(
        &format!("drip -r inf {} | sleep 3", input.path().display()),
        &[],
    );
    let screen = tmux.wait_for("output blocked", Duration::from_secs(5));
    assert!(screen.contains("1000/1000 queued"), "{screen}");
}

#[test]
fn colour_follows_no_color_and_dumb_terminals() {
    // 400 records at 20/s keep the gauge well filled for the whole test.
    let input = input_file(400);
    let script = format!("drip -r 20/s {} > /dev/null", input.path().display());
    let coloured = Tmux::start(&script, &[]);
    coloured.wait_for("in 400 out", Duration::from_secs(5));
    assert!(
        coloured.screen(true).contains("\x1b[36m"),
        "expected colour"
    );
    for env in [("NO_COLOR", "1"), ("TERM", "dumb")] {
        let plain = Tmux::start(&script, &[env]);
        // Watch for a while: colour must never appear.
        let start = Instant::now();
        let mut saw_display = false;
        while start.elapsed() < Duration::from_millis(1500) {
            let screen = plain.screen(true);
            assert!(
                !screen.contains("\x1b[36m"),
                "{env:?}: colour drawn:\n{screen:?}"
            );
            saw_display |= screen.contains("in 400 out");
            std::thread::sleep(Duration::from_millis(50));
        }
        // NO_COLOR keeps the display, in plain text; a dumb terminal, which
        // cannot redraw a line, gets only the summary at the end.
        assert_eq!(saw_display, env.0 == "NO_COLOR", "{env:?}");
    }
}

#[test]
fn quiet_and_redirected_stderr_draw_nothing() {
    let input = input_file(10);
    let tmux = Tmux::start(
        &format!(
            "drip -q -r 20/s {p} > /dev/null; drip -r 20/s {p} 2>/dev/null >/dev/null",
            p = input.path().display()
        ),
        &[],
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(700) {
        assert!(!tmux.screen(false).contains("queued"), "display under -q");
        std::thread::sleep(Duration::from_millis(50));
    }
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(10));
    assert!(!screen.contains("drip:"), "{screen}");
}

#[test]
fn forced_progress_reaches_a_pipe() {
    let out = common::shell("seq 5 | drip --progress -r 20/s 2>&1 >/dev/null")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(stderr.contains("queued"), "{stderr:?}");
    assert!(stderr.contains("drip: read 5, written 5"), "{stderr:?}");
}
