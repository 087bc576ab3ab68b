//! The progress display in a real terminal: drip runs inside tmux and the
//! test reads the screen with capture-pane. Without tmux these tests say
//! so and pass, except under `DRIP_REQUIRE_TOOLS=1`, where they fail
//! (`common::have`; CI installs it).

use crate::common;

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
        Tmux::start_wide(script, env, 120)
    }

    /// Run `script` (sh) in a new terminal `cols` wide and 20 rows high.
    fn start_wide(script: &str, env: &[(&str, &str)], cols: u16) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock").display().to_string();
        let bin_dir = std::path::Path::new(common::bin()).parent().unwrap();
        // The control sockets go in this terminal's directory, and with it.
        let mut exports = format!(
            "export PATH='{}':\"$PATH\" XDG_RUNTIME_DIR='{}'; unset NO_COLOR CLICOLOR; ",
            bin_dir.display(),
            dir.path().display()
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
                &cols.to_string(),
                "-y",
                "20",
            ])
            .args(["env", "TERM=xterm-256color", "sh", "-c", &full])
            .status()
            .expect("tmux");
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

    /// The screen with up to 200 lines of scrollback above it.
    fn history(&self) -> String {
        let out = Command::new("tmux")
            .args(["-S", &self.socket, "capture-pane", "-p", "-S", "-200"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    /// Press `key` (tmux key name, such as `C-c`) in the pane.
    fn send(&self, key: &str) {
        let status = Command::new("tmux")
            .args(["-S", &self.socket, "send-keys", key])
            .status()
            .unwrap();
        assert!(status.success());
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
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(30);
    let tmux = Tmux::start(
        &format!("drip -r 20/s {} > /dev/null", input.path().display()),
        &[],
    );
    // The ETA comes with a measured rate, once two records have left.
    let screen = tmux.wait_for("ETA ", Duration::from_secs(5));
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

/// 1,000 records `hostN,I` of nine keys in turn, in a file.
fn nine_hosts() -> tempfile::NamedTempFile {
    let input = tempfile::NamedTempFile::new().unwrap();
    let text: String = (0..1000).map(|i| format!("host{},{i}\n", i % 9)).collect();
    std::fs::write(input.path(), text).unwrap();
    input
}

#[test]
fn a_narrow_terminal_keeps_the_rate_and_eta_before_the_keys() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = nine_hosts();
    let tmux = Tmux::start_wide(
        &format!(
            "drip -r 5/s --key '^([^,]*),' --key-rate 2/s {} > /dev/null",
            input.path().display()
        ),
        &[],
        50,
    );
    let screen = tmux.wait_for("ETA ", Duration::from_secs(5));
    let line = screen.lines().find(|l| l.contains("queued")).unwrap();
    // The keys gave way; the rate and the ETA are whole.
    assert!(!line.contains("keys"), "{line}");
    assert!(line.contains("/s | ETA "), "{line}");
    assert!(line.trim_end().len() <= 47, "{line}");
    let eta = line.rsplit("ETA ").next().unwrap().trim_end();
    assert!(
        eta.split(':').all(|part| part.parse::<u32>().is_ok()),
        "{line}"
    );
}

/// With a rate table, the display names the key waiting longest (whose
/// oldest record is the oldest of all) with its limit in force.
#[test]
fn the_key_waiting_longest_is_shown_with_its_limit() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = nine_hosts();
    let tmux = Tmux::start_wide(
        &format!(
            "drip -r 5/s --key '^([^,]*),' --key-rate 2/s --key-rate host0=1/10s:3 {} > /dev/null",
            input.path().display()
        ),
        &[],
        200,
    );
    // host0, held to 6/min, soon holds the oldest record of all.
    let screen = tmux.wait_for("longest host0 ", Duration::from_secs(15));
    let line = screen.lines().find(|l| l.contains("queued")).unwrap();
    assert!(line.contains("keys 9 (9 busy) longest host0 "), "{line}");
    let limit = line.split("longest host0 ").nth(1).unwrap();
    assert!(limit.starts_with("6/min:3 |"), "{line}");
}

#[test]
fn display_says_when_output_is_blocked() {
    if !common::have(&["tmux"]) {
        return;
    }
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
    if !common::have(&["tmux"]) {
        return;
    }
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
    if !common::have(&["tmux"]) {
        return;
    }
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

/// The rate the display shows on `screen`: `Some(None)` for `-/s` (not yet
/// measured), `None` when no display is on the screen.
fn shown_rate(screen: &str) -> Option<Option<f64>> {
    let line = screen.lines().find(|l| l.contains("queued"))?;
    let field = line.split(" | ").find(|f| f.ends_with("/s"))?;
    Some(field.trim_end_matches("/s").parse().ok())
}

/// Every rate the display shows in `secs` of a run at `rate`, sampled
/// every 100 ms once a second departure has given a figure.
fn rates_shown(rate: &str, secs: f64) -> Vec<f64> {
    let input = input_file(100);
    let tmux = Tmux::start(
        &format!("drip -r {rate} {} > /dev/null", input.path().display()),
        &[],
    );
    tmux.wait_for("queued", Duration::from_secs(5));
    let start = Instant::now();
    let mut shown = Vec::new();
    while start.elapsed() < Duration::from_secs_f64(secs) {
        if let Some(Some(r)) = shown_rate(&tmux.screen(false)) {
            shown.push(r);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    shown
}

#[test]
fn live_rate_reads_the_pace_at_low_rates() {
    if !common::have(&["tmux"]) {
        return;
    }
    // Each redraw used to count the records of its own 100 ms: 0, or 10/s,
    // at 5/s. Every figure shown must now be the rate, within 10 %.
    for (rate, want) in [("5/s", 5.0), ("2/s", 2.0)] {
        let shown = rates_shown(rate, 3.0);
        assert!(shown.len() >= 10, "{rate}: too few readings: {shown:?}");
        for r in &shown {
            assert!(
                (r / want - 1.0).abs() <= 0.1,
                "{rate}: showed {r}/s: {shown:?}"
            );
        }
    }
}

#[test]
fn a_slow_consumer_shows_in_rate_eta_and_a_sign() {
    if !common::have(&["tmux"]) {
        return;
    }
    // 2000-byte lines fill the pipe in 33 records; the consumer then takes
    // at most 10 a second (less on a loaded machine), against 50/s asked.
    let line = "x".repeat(1999) + "\n";
    let input = common::temp_file(line.repeat(300).as_bytes());
    let tmux = Tmux::start(
        &format!(
            "drip -r 50/s {} | while read l; do sleep 0.1; done",
            input.path().display()
        ),
        &[],
    );
    tmux.wait_for("output slow", Duration::from_secs(10));
    // Past the first second, when the pipe filled at 50/s.
    let screen = tmux.wait_for("00:00:04 [", Duration::from_secs(10));
    let display = screen.lines().find(|l| l.contains("queued")).unwrap();
    let rate = shown_rate(&screen).flatten().expect("a measured rate");
    assert!(rate < 15.0, "rate: {display}");
    // Over 200 records left at no more than 10 a second: 20 s or more (at
    // the configured 50/s it would have said about 5 s).
    let eta = display.split("ETA ").nth(1).expect("an ETA");
    let eta = eta.split(' ').next().unwrap();
    let (m, s) = eta.split_once(':').unwrap();
    let secs: u64 = m.parse::<u64>().unwrap() * 60 + s.parse::<u64>().unwrap();
    assert!(secs >= 15, "ETA too short for the measured rate: {display}");
}

/// The pane's text lines, without the blank ones.
fn text_lines(screen: &str) -> Vec<&str> {
    screen.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn records_on_the_same_terminal_never_mix_with_the_display() {
    if !common::have(&["tmux"]) {
        return;
    }
    // The README's quick start: stdout is the terminal. No display at all.
    let tmux = Tmux::start("seq 20 | drip --rate 20/s", &[]);
    let start = Instant::now();
    while !tmux.screen(false).contains("DONE=") {
        assert!(!tmux.screen(false).contains("queued"), "display drawn");
        assert!(start.elapsed() < Duration::from_secs(10), "never ended");
        std::thread::sleep(Duration::from_millis(30));
    }
    let numbers: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
    let screen = tmux.history();
    let lines = text_lines(&screen);
    assert_eq!(lines[..20], numbers, "{screen}");
    assert_eq!(lines[20], "DONE=0", "{screen}");

    // --progress asks for it: pinned to the bottom row, records above.
    let tmux = Tmux::start("seq 40 | drip --rate 20/s --progress", &[]);
    let mut saw_display = false;
    loop {
        let screen = tmux.screen(false);
        if screen.contains("DONE=") {
            break;
        }
        let rows: Vec<&str> = screen.lines().collect();
        for (i, row) in rows.iter().enumerate() {
            if row.contains("queued") {
                assert_eq!(i, 19, "display off the bottom row:\n{screen}");
                saw_display = true;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never ended");
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(saw_display, "--progress drew nothing");
    let history = tmux.history();
    assert!(
        !history.contains("queued"),
        "display left behind:\n{history}"
    );
    let lines = text_lines(&history);
    let numbers: Vec<String> = (1..=40).map(|i| i.to_string()).collect();
    assert_eq!(lines[..40], numbers, "{history}");
    assert!(
        lines[40].starts_with("drip: read 40, written 40"),
        "{history}"
    );
    assert_eq!(*lines.last().unwrap(), "DONE=0", "{history}");
}

#[test]
fn ctrl_c_clears_the_display_before_the_summary() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(1000);
    // The shell survives the Ctrl-C (a trap, which drip does not inherit).
    let tmux = Tmux::start(
        &format!(
            "trap 'true' INT; drip -r 5/s {} > /dev/null",
            input.path().display()
        ),
        &[],
    );
    tmux.wait_for("out 3 ", Duration::from_secs(5));
    tmux.send("C-c");
    let screen = tmux.wait_for("DONE=130", Duration::from_secs(5));
    assert!(!screen.contains("queued"), "display left behind:\n{screen}");
    let lines = text_lines(&screen);
    assert!(
        lines[0].starts_with("drip: read 1000, written "),
        "{screen}"
    );
}

#[test]
fn a_second_ctrl_c_under_drain_leaves_a_clean_line() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(1000);
    // The consumer ignores Ctrl-C and ends on its own after 4 s.
    let tmux = Tmux::start(
        &format!(
            "trap 'true' INT; drip --drain -r 5/s {} | {{ trap '' INT; sleep 4; }}",
            input.path().display()
        ),
        &[],
    );
    tmux.wait_for("out 3 ", Duration::from_secs(5));
    tmux.send("C-c");
    std::thread::sleep(Duration::from_millis(400));
    tmux.send("C-c");
    let screen = tmux.wait_for("DONE=", Duration::from_secs(10));
    assert!(!screen.contains("queued"), "display left behind:\n{screen}");
    assert!(
        screen.lines().any(|l| l.starts_with("DONE=")),
        "glued to the display:\n{screen}"
    );
}

/// The display's line on `screen` (it holds `mark`), and its row.
fn display_row<'a>(screen: &'a str, mark: &str) -> Option<(usize, &'a str)> {
    screen.lines().enumerate().find(|(_, l)| l.contains(mark))
}

/// The number after `word ` in `line`.
fn figure(line: &str, word: &str) -> Option<u64> {
    let rest = line.split(&format!("{word} ")).nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

#[test]
fn jobs_show_their_figures_with_stdout_on_the_terminal() {
    if !common::have(&["tmux"]) {
        return;
    }
    // 24 jobs of 0.4 s, two at a time: about five seconds with two running.
    let input = input_file(24);
    let tmux = Tmux::start(
        &format!(
            "drip -r 20/s -j 2 {} --exec sh -c 'sleep 0.4; echo job $1' sh {{}}",
            input.path().display()
        ),
        &[],
    );
    let start = Instant::now();
    let mut seen = None;
    while seen.is_none() {
        let screen = tmux.screen(false);
        if let Some((row, line)) = display_row(&screen, " | running ") {
            // Pinned to the bottom row, the jobs' output scrolling above.
            assert_eq!(row, 19, "display off the bottom row:\n{screen}");
            let done = figure(line, "succeeded").is_some_and(|n| n >= 2);
            if done && figure(line, "running") == Some(2) && line.contains("ETA ") {
                seen = Some(line.to_string());
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no display of the jobs:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = seen.unwrap();
    assert!(line.contains("| starts "), "{line}");
    // At exit the display is gone, every job's line and the summary stay.
    tmux.wait_for("DONE=0", Duration::from_secs(20));
    let history = tmux.history();
    assert!(
        !history.contains(" | running "),
        "display left behind:\n{history}"
    );
    let lines = text_lines(&history);
    for k in 1..=24 {
        assert!(
            lines.contains(&format!("job {k}").as_str()),
            "job {k}:\n{history}"
        );
    }
    assert!(history.contains("succeeded 24"), "no summary:\n{history}");
}

#[test]
fn jobs_show_their_figures_with_stdout_redirected() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(24);
    let tmux = Tmux::start(
        &format!(
            "drip -r 20/s -j 2 {} --exec sh -c 'sleep 0.4' sh {{}} > /dev/null",
            input.path().display()
        ),
        &[],
    );
    let screen = tmux.wait_for("running 2 succeeded ", Duration::from_secs(10));
    let (_, line) = display_row(&screen, " | running ").unwrap();
    assert!(!line.contains(" out "), "{line}");
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(20));
    assert!(
        !screen.contains(" | running "),
        "display left behind:\n{screen}"
    );
    assert!(screen.contains("succeeded 24"), "{screen}");
}

#[test]
fn a_key_paused_for_an_overload_is_shown() {
    if !common::have(&["tmux"]) {
        return;
    }
    // Key a's first attempt gets 429 with Retry-After: 5; b's go on (60
    // records at 10/s: six seconds).
    let text: String = std::iter::once("a 1\n".to_string())
        .chain((1..=60).map(|k| format!("b {k}\n")))
        .collect();
    let input = common::temp_file(text.as_bytes());
    let job = r#"if [ "${1%% *}" = a ] && [ "$DRIP_ATTEMPT" = 1 ]; then printf 'HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\n\r\n' > "$DRIP_HEADERS"; exit 22; fi; sleep 0.2"#;
    let job_file = common::temp_file(job.as_bytes());
    let tmux = Tmux::start(
        &format!(
            "drip -r 100/s --key 1 --key-rate 10/s -j 4 --retries 2 {} --exec sh {} {{}} > /dev/null",
            input.path().display(),
            job_file.path().display()
        ),
        &[],
    );
    let screen = tmux.wait_for("| paused a", Duration::from_secs(10));
    let (_, line) = display_row(&screen, " | running ").unwrap();
    assert_eq!(figure(line, "pauses"), Some(1), "{line}");
    // b's records start meanwhile.
    let before = figure(line, "succeeded").unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let screen = tmux.screen(false);
    let (_, line) = display_row(&screen, " | running ").unwrap();
    assert!(line.contains("| paused a"), "{line}");
    assert!(figure(line, "succeeded").unwrap() > before, "{line}");
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(20));
    assert!(screen.contains("succeeded 61"), "{screen}");
}

#[test]
fn ctrl_c_clears_the_jobs_display_and_gives_the_terminal_back_whole() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(100);
    // The shell survives the Ctrl-C (a trap, which drip does not inherit);
    // the jobs, in process groups of their own, do not get it.
    let tmux = Tmux::start(
        &format!(
            "trap 'true' INT; drip -r 20/s -j 2 {} --exec sh -c 'sleep 0.3; echo job $1' sh {{}}; \
             s=$?; seq 1000 1030; (exit $s)",
            input.path().display()
        ),
        &[],
    );
    tmux.wait_for("running 2 succeeded ", Duration::from_secs(10));
    tmux.send("C-c");
    let screen = tmux.wait_for("DONE=130", Duration::from_secs(10));
    let history = tmux.history();
    assert!(
        !history.contains(" | running "),
        "display left behind:\n{history}"
    );
    assert!(
        history.contains("drip: read 100, "),
        "no summary:\n{history}"
    );
    // The scroll region is undone: the lines after drip scroll the whole
    // screen, down to the bottom row (the cursor's, below DONE).
    let rows: Vec<&str> = screen.lines().collect();
    let done = rows.iter().position(|r| r.starts_with("DONE=")).unwrap();
    assert_eq!(done, 18, "{screen}");
    assert_eq!(rows[17], "1030", "{screen}");
}

/// The row of `history` that starts with `start`, and the row after it.
fn row_and_next<'a>(history: &'a str, start: &str) -> (&'a str, &'a str) {
    let rows: Vec<&str> = history.lines().collect();
    let at = rows
        .iter()
        .position(|r| r.contains(start))
        .unwrap_or_else(|| panic!("no {start:?}:\n{history}"));
    (rows[at], rows.get(at + 1).copied().unwrap_or(""))
}

#[test]
fn ctrl_c_with_records_on_the_terminal_starts_the_summary_on_a_clean_line() {
    if !common::have(&["tmux"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dd.txt");
    // The records and the pinned display share the terminal; the terminal
    // echoes `^C` where the last record left the cursor.
    let tmux = Tmux::start(
        &format!(
            "trap 'true' INT; seq 100 | drip -r 5/s --progress --dead-letter {}",
            dead.display()
        ),
        &[],
    );
    tmux.wait_for(" out 3 ", Duration::from_secs(10));
    tmux.send("C-c");
    tmux.wait_for("DONE=130", Duration::from_secs(10));
    let history = tmux.history();
    let (summary, _) = row_and_next(&history, "drip: read 100, ");
    assert!(summary.starts_with("drip: read 100, written "), "{history}");
    // The summary's second line, then the shell's, each from column 0.
    let (max_wait, next) = row_and_next(&history, "max wait");
    assert!(max_wait.starts_with("drip: max wait "), "{history}");
    assert!(next.starts_with("DONE=130"), "{history}");
}

#[test]
fn a_second_ctrl_c_with_jobs_gives_the_shell_a_clean_line() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(100);
    let tmux = Tmux::start(
        &format!(
            "trap 'true' INT; drip -r 5/s -j 4 {} --exec sleep 5",
            input.path().display()
        ),
        &[],
    );
    tmux.wait_for("running 4 ", Duration::from_secs(10));
    tmux.send("C-c");
    std::thread::sleep(Duration::from_millis(400));
    tmux.send("C-c");
    tmux.wait_for("DONE=130", Duration::from_secs(10));
    let history = tmux.history();
    let (done, next) = row_and_next(&history, "DONE=130");
    assert!(done.starts_with("DONE=130"), "glued:\n{history}");
    assert!(next.trim().is_empty(), "{history}");
}

#[test]
fn ctrl_c_with_no_display_leaves_the_shell_a_clean_line() {
    if !common::have(&["tmux"]) {
        return;
    }
    // Records on the terminal and no display: nothing to clear, but the
    // terminal echoed `^C` after the last record.
    let tmux = Tmux::start("trap 'true' INT; seq 100 | drip -r 5/s", &[]);
    tmux.wait_for("\n3\n", Duration::from_secs(10));
    tmux.send("C-c");
    tmux.wait_for("DONE=130", Duration::from_secs(10));
    let history = tmux.history();
    let (done, _) = row_and_next(&history, "DONE=130");
    assert!(done.starts_with("DONE=130"), "glued:\n{history}");
}

#[test]
fn ctrl_c_under_quiet_writes_nothing_to_the_terminal() {
    if !common::have(&["tmux"]) {
        return;
    }
    // -q: only errors on stderr, so not even the escapes of a clean line:
    // the shell's next output follows the echoed `^C` as it would after
    // any quiet program.
    let tmux = Tmux::start("trap 'true' INT; seq 100 | drip -q -r 5/s", &[]);
    tmux.wait_for("\n3\n", Duration::from_secs(10));
    tmux.send("C-c");
    tmux.wait_for("DONE=130", Duration::from_secs(10));
    let history = tmux.history();
    let (done, _) = row_and_next(&history, "DONE=130");
    assert!(
        done.starts_with("^CDONE=130"),
        "drip wrote to the terminal:\n{history}"
    );
}

/// Records read from a terminal (no FILE: here the file went to --exec's
/// command) are said to be, once, so that a drip waiting for typed lines
/// does not look stuck; typed lines are then records, and Ctrl-D ends them.
#[test]
fn reading_from_the_terminal_is_said_once() {
    if !common::have(&["tmux"]) {
        return;
    }
    let tmux = Tmux::start("drip -r inf --exec echo got {} urls.txt", &[]);
    let notice = "drip: reading records from the terminal (end with Ctrl-D)";
    tmux.wait_for(notice, Duration::from_secs(10));
    for key in ["hello", "Enter"] {
        tmux.send(key);
    }
    tmux.wait_for("got hello urls.txt", Duration::from_secs(10));
    tmux.send("C-d");
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(10));
    assert_eq!(screen.matches(notice).count(), 1, "{screen}");
}

/// A FILE given after --exec's `{}` went to the command while drip reads
/// the terminal: both are said in one line, once.
#[test]
fn reading_from_the_terminal_names_the_file_the_command_took_in_one_line() {
    if !common::have(&["tmux"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("urls.txt"), "a\n").unwrap();
    // Wide enough for the notice on one row.
    let tmux = Tmux::start_wide(
        &format!(
            "cd '{}' && drip -r inf --exec echo got {{}} urls.txt",
            dir.path().display()
        ),
        &[],
        200,
    );
    let notice = "drip: reading records from the terminal (end with Ctrl-D); --exec: urls.txt is \
                  an argument of the command (put it before --exec to read records from it)";
    let screen = tmux.wait_for(notice, Duration::from_secs(10));
    assert_eq!(screen.matches(notice).count(), 1, "{screen}");
    tmux.send("C-d");
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(10));
    assert_eq!(screen.matches("from the terminal").count(), 1, "{screen}");
}

/// Not said when stdin is no terminal, when a FILE is given, or with -q.
#[test]
fn reading_from_a_pipe_or_a_file_says_nothing_of_the_terminal() {
    if !common::have(&["tmux"]) {
        return;
    }
    let input = input_file(3);
    let path = input.path().display();
    for script in [
        "echo 1 | drip -r inf".to_string(),
        format!("drip -r inf {path}"),
        format!("drip -r inf -q - < {path}"),
    ] {
        let tmux = Tmux::start(&script, &[]);
        let screen = tmux.wait_for("DONE=0", Duration::from_secs(10));
        assert!(!screen.contains("terminal"), "{script}:\n{screen}");
    }
    // -q, stdin the terminal: nothing said; a line typed is a record.
    let tmux = Tmux::start("drip -r inf -q", &[]);
    std::thread::sleep(Duration::from_millis(500));
    for key in ["typed", "Enter", "C-d"] {
        tmux.send(key);
    }
    let screen = tmux.wait_for("DONE=0", Duration::from_secs(10));
    assert!(!screen.contains("from the terminal"), "{screen}");
}
