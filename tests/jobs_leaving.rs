//! Leaving with the books kept when the way out is stalled: the jobs'
//! output going to a stdout nobody reads, a dead letter nobody reads.
//! Real processes; the pipes are held open and never read.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_books_add_up, command, json_lines, last_json, numbered, send_signal, stderr_of, wait_for,
};

/// Wait until `path` has `lines` lines.
fn wait_for_lines(path: &Path, lines: usize) {
    let start = Instant::now();
    while std::fs::read_to_string(path).map_or(0, |t| t.lines().count()) < lines {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{path:?}: fewer than {lines} lines"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fifo in `dir`, `dead.fifo`, held open by a reader that never reads
/// (so opening it to write does not block); drop the file to let go.
fn fifo_nobody_reads(dir: &Path) -> (PathBuf, std::fs::File) {
    let fifo = dir.join("dead.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    (fifo, held)
}

/// Each record's number and its outcome (a JSON string) in the joblog at
/// `log`, by number.
fn outcomes_logged(log: &Path) -> Vec<(u64, String)> {
    let mut logged: Vec<(u64, String)> = json_lines(log)
        .iter()
        .map(|e| (e["number"].as_u64().unwrap(), e["outcome"].to_string()))
        .collect();
    logged.sort();
    logged
}

/// Each job writes this many bytes of output (drip ends it with a
/// newline).
const OUTPUT: usize = 3_000_000;

#[test]
fn jobs_that_ended_are_settled_when_stdout_stalls_at_a_second_signal() {
    stalled_stdout_at_a_second_signal(&[]);
}

#[test]
fn with_keep_order_too() {
    // The outputs held in order go out as each record is done: the same
    // stall, the same books.
    stalled_stdout_at_a_second_signal(&["--keep-order"]);
}

/// 20 records, 4 jobs at once, each writing [`OUTPUT`] bytes to a stdout
/// nobody reads; TERM once the first four ended, then TERM again. `extra`:
/// more flags.
fn stalled_stdout_at_a_second_signal(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (dead, log, stats) = (
        dir.path().join("dead"),
        dir.path().join("joblog"),
        dir.path().join("stats.json"),
    );
    let input = dir.path().join("input");
    std::fs::write(&input, numbered(1..=20)).unwrap();
    let ended = dir.path().join("ended");
    let script = format!(
        r#"head -c {OUTPUT} /dev/zero; echo "$1" >> {}"#,
        ended.display()
    );
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let args = [
        "-r".to_string(),
        "inf".into(),
        "-j".into(),
        "4".into(),
        "-q".into(),
        "--dead-letter".into(),
        path(&dead),
        "--joblog".into(),
        path(&log),
        "--stats-json".into(),
        path(&stats),
    ];
    let tail = [
        path(&input),
        "--exec".into(),
        "sh".into(),
        "-c".into(),
        script,
        "sh".into(),
        "{}".into(),
    ];
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
        .chain(tail.iter().map(String::as_str))
        .collect();
    let mut cmd = command(&args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // Held open, never read: the first output fills the pipe and stalls.
    let mut stdout = child.stdout.take().unwrap();
    wait_for_lines(&ended, 4);
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a first signal waits for the jobs' output"
    );
    second_signal_leaves_at_once(&mut child);
    let mut through = Vec::new();
    stdout.read_to_end(&mut through).unwrap();

    let mut done: Vec<u64> = std::fs::read_to_string(&ended)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    done.sort_unstable();
    if extra.is_empty() {
        // Each job held its slot while its output stalled.
        assert_eq!(done, [1, 2, 3, 4], "the first four ran to their end");
    }
    // With --keep-order a job whose output waits its turn frees its slot:
    // more may have run. Only the records whose jobs never ran to their
    // end are undelivered.
    let not_done: String = (1..=20u64)
        .filter(|n| !done.contains(n))
        .map(|n| format!("{n}\n"))
        .collect();
    assert_eq!(std::fs::read_to_string(&dead).unwrap(), not_done);
    let logged = outcomes_logged(&log);
    let succeeded = "\"succeeded\"".to_string();
    assert_eq!(
        logged,
        done.iter()
            .map(|&n| (n, succeeded.clone()))
            .collect::<Vec<_>>()
    );
    let s = last_json(&stats);
    assert_books_add_up(&s);
    let n = done.len() as u64;
    assert_eq!(
        (s["succeeded"].as_u64(), s["undelivered"].as_u64()),
        (Some(n), Some(20 - n)),
        "{s}"
    );
    // Every byte of output is written or counted as not written.
    assert_eq!(s["outputs_cut"].as_u64(), Some(n), "{s}");
    let unwritten = s["output_bytes_unwritten"].as_u64().unwrap();
    assert_eq!(
        unwritten + through.len() as u64,
        n * (OUTPUT as u64 + 1),
        "{s}"
    );
}

#[test]
fn leaving_without_the_threads_still_writes_the_stats_file() {
    let dir = tempfile::tempdir().unwrap();
    let (fifo, _held) = fifo_nobody_reads(dir.path());
    let stats = dir.path().join("stats.json");
    let input = dir.path().join("input");
    std::fs::write(&input, numbered(1..=100_000)).unwrap();
    let mut cmd = command(&[
        "-r",
        "1/s",
        "-c",
        "200000",
        "-q",
        "--dead-letter",
        fifo.to_str().unwrap(),
        "--stats-json",
        stats.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // Every record read: the bucket holds them.
    std::thread::sleep(Duration::from_millis(700));
    send_signal(&child, libc::SIGTERM);
    // The records go to the dead letter, which takes 64 KiB and stalls.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the dead letter stalls"
    );
    second_signal_says_records_not_written(&mut child);
    let s = last_json(&stats);
    assert_books_add_up(&s);
    assert_eq!(s["read"].as_u64(), Some(100_000), "{s}");
}

/// The forced exit with `--exec`: a dead letter nobody reads holds drip
/// after the second signal, so it leaves without its threads. A job that
/// exited 0 before (its output stalled on a stdout nobody reads) keeps
/// its fate, as its joblog line says; a job killed by the second signal
/// is undelivered, as its joblog line says; the books add up.
#[test]
fn leaving_without_the_threads_keeps_the_jobs_fates_as_the_joblog_says() {
    let dir = tempfile::tempdir().unwrap();
    let (fifo, _held) = fifo_nobody_reads(dir.path());
    let (log, stats, ran) = (
        dir.path().join("joblog"),
        dir.path().join("stats.json"),
        dir.path().join("ran"),
    );
    let input = dir.path().join("input");
    std::fs::write(&input, numbered(1..=100_000)).unwrap();
    // Record 1 writes more than a pipe holds and exits 0; record 2 runs
    // on. Both keep their job slots (-j 2): nothing else starts.
    let script = format!(
        r#"echo "$1" >> {}; if [ "$1" = 1 ]; then head -c {OUTPUT} /dev/zero; else sleep 30; fi"#,
        ran.display()
    );
    let mut cmd = command(&[
        "-r",
        "inf",
        "-j",
        "2",
        "-q",
        "--dead-letter",
        fifo.to_str().unwrap(),
        "--stats-json",
        stats.to_str().unwrap(),
        "--joblog",
        log.to_str().unwrap(),
        input.to_str().unwrap(),
        "--exec",
        "sh",
        "-c",
        &script,
        "sh",
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // Held open, never read.
    let _stdout = child.stdout.take().unwrap();
    wait_for_lines(&ran, 2);
    wait_for_lines(&log, 1);
    // The first signal: the records not started go to the dead letter,
    // which takes 64 KiB and stalls; drip waits for record 2's job.
    send_signal(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "waits for the job");
    second_signal_says_records_not_written(&mut child);
    let logged = outcomes_logged(&log);
    assert_eq!(
        logged,
        [
            (1, "\"succeeded\"".to_string()),
            (2, "\"undelivered\"".to_string())
        ]
    );
    let s = last_json(&stats);
    assert_books_add_up(&s);
    // How much of the input the reader had read when the first signal
    // stopped reading depends on how soon it ran (a busy machine: three
    // reads of 128 KiB, or all of it); every record read but the first is
    // undelivered.
    let read = s["read"].as_u64().unwrap();
    assert!((2..=100_000).contains(&read), "{s}");
    assert_eq!(
        (s["succeeded"].as_u64(), s["undelivered"].as_u64()),
        (Some(1), Some(read - 1)),
        "{s}"
    );
    assert_eq!(s["outputs_cut"].as_u64(), Some(1), "{s}");
}

#[test]
fn keep_order_leaves_when_the_writer_waits_on_the_window_at_a_stalled_stdout() {
    keep_order_window_full_at_a_stalled_stdout(&["-q"]);
}

#[test]
fn with_the_display_drawing_too() {
    // The display reads the jobs' figures ten times a second from the
    // thread that handles the signals.
    keep_order_window_full_at_a_stalled_stdout(&["--progress"]);
}

/// Each job's output in [`keep_order_window_full_at_a_stalled_stdout`],
/// bytes (drip ends it with a newline).
const SMALL_OUTPUT: usize = 4_000;

/// 200 records, 10 jobs at once, `--keep-order` with a window of 50:
/// record 1 ends last, so the writer waits for the window with slots
/// free; then the run of 50 outputs goes to a stdout nobody reads and
/// stalls. TERM, then TERM again: drip leaves at once, its books whole.
/// `extra`: more flags.
fn keep_order_window_full_at_a_stalled_stdout(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (ended, stats) = (dir.path().join("ended"), dir.path().join("stats.json"));
    let input = dir.path().join("input");
    std::fs::write(&input, numbered(1..=200)).unwrap();
    let script = format!(
        r#"if [ "$1" = 1 ]; then sleep 1; fi; head -c {SMALL_OUTPUT} /dev/zero; echo "$1" >> {}"#,
        ended.display()
    );
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let mut args: Vec<String> = [
        "-r",
        "inf",
        "-j",
        "10",
        "--keep-order",
        "--order-window",
        "50",
        "--stats-json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(path(&stats));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend([path(&input), "--exec".into(), "sh".into(), "-c".into()]);
    args.extend([script, "sh".into(), "{}".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = command(&args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // Held open, never read.
    let mut stdout = child.stdout.take().unwrap();
    let start = Instant::now();
    while !std::fs::read_to_string(&ended).is_ok_and(|t| t.lines().any(|l| l == "1")) {
        assert!(start.elapsed() < Duration::from_secs(20), "record 1 ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    second_signal_leaves_at_once(&mut child);
    let mut through = Vec::new();
    stdout.read_to_end(&mut through).unwrap();
    let s = last_json(&stats);
    assert_books_add_up(&s);
    let succeeded = s["succeeded"].as_u64().unwrap();
    assert!(succeeded >= 50, "{s}");
    // Every byte of output is written or counted as not written.
    let unwritten = s["output_bytes_unwritten"].as_u64().unwrap();
    assert_eq!(
        unwritten + through.len() as u64,
        succeeded * (SMALL_OUTPUT as u64 + 1),
        "{s}"
    );
}

/// The second TERM: drip leaves with status 143 at once, the threads
/// letting go (not the one-second wait for those that do not).
/// The second TERM to `child` (stderr piped) ends it with 143, and it
/// says records were not written.
fn second_signal_says_records_not_written(child: &mut std::process::Child) {
    send_signal(child, libc::SIGTERM);
    assert_eq!(wait_for(child, Duration::from_secs(10)).code(), Some(143));
    let stderr = stderr_of(child);
    assert!(stderr.contains("records not written"), "{stderr}");
}

fn second_signal_leaves_at_once(child: &mut std::process::Child) {
    send_signal(child, libc::SIGTERM);
    let start = Instant::now();
    assert_eq!(wait_for(child, Duration::from_secs(10)).code(), Some(143));
    let took = start.elapsed();
    assert!(took < Duration::from_millis(950), "{took:?}");
}

/// The fields of `/proc/PID/stat` after the process's name (state, ppid,
/// pgrp, ...), or none for a process that is gone.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split(' ').map(str::to_string).collect())
}

/// Whether process `pid` runs (exists and is no zombie: a job whose drip
/// is gone is reaped by whoever adopts it, perhaps never).
pub(crate) fn alive(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| f[0] != "Z")
}

/// Whether a process of group `pgid` runs.
pub(crate) fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat_fields)
        .any(|f| f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string())
}

/// `kill -KILL -- WHO` (a pid, or `-PGID` for a group), whether or not it
/// is still there: what a test leaves behind.
pub(crate) fn kill_quietly(who: &str) {
    signal_with_kill("-KILL", who);
}

/// `kill SIGNAL -- WHO` (`-STOP`, `-CONT`: signals drip does not catch).
fn signal_with_kill(signal: &str, who: &str) {
    let _ = Command::new("kill")
        .args([signal, "--", who])
        .stderr(Stdio::null())
        .status();
}

/// Wait (10 s at most) until process `pid` ignores each of `signals`
/// (the `SigIgn` mask of /proc/PID/status): a warden just started has
/// not yet set them so.
fn until_ignoring(pid: i32, signals: &[i32]) {
    let mask: u64 = signals.iter().map(|&s| 1u64 << (s - 1)).sum();
    let start = Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let ignored = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .unwrap_or(0);
        if ignored & mask == mask {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "process {pid} never ignored {signals:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pid of the warden of drip `drip` (its child named `drip-warden`),
/// waiting for it 10 s at most.
pub(crate) fn warden_of(drip: u32) -> Option<i32> {
    let start = Instant::now();
    loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let parent = stat_fields(pid)?.get(1)?.parse::<u32>().ok()?;
            let argv = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (parent == drip && argv.starts_with(b"drip-warden\0")).then_some(pid)
        });
        if found.is_some() || start.elapsed() > Duration::from_secs(10) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long until none of `groups` (and no process of `pids`) runs,
/// polled every 10 ms; `None` if some still runs after `limit`.
pub(crate) fn until_gone(groups: &[i32], pids: &[i32], limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while groups.iter().any(|&g| group_alive(g)) || pids.iter().any(|&p| alive(p)) {
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(start.elapsed())
}

/// Three jobs at once, each a shell with a background `sleep` that
/// ignores TERM (only the KILL ends it) and a foreground one in its
/// process group, stdin held open: each job writes its group (the
/// shell's pid) and its background child's pid to `dir/pids`. The drip,
/// and the groups and background pids once all three started.
fn three_jobs_with_children(
    dir: &Path,
    extra: &[&str],
) -> (std::process::Child, Vec<i32>, Vec<i32>) {
    let pids = dir.join("pids");
    let script = format!(
        r#"(trap '' TERM; exec sleep 100) & echo "$$ $!" >> {}; sleep 100"#,
        pids.display()
    );
    let mut args = vec!["-r", "100/s", "-j", "3", "-q"];
    args.extend(extra);
    args.extend(["--exec", "sh", "-c", &script, "sh"]);
    let mut cmd = command(&args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"1\n2\n3\n")
        .unwrap();
    wait_for_lines(&pids, 3);
    let text = std::fs::read_to_string(&pids).unwrap();
    let pair = |l: &str| -> (i32, i32) {
        let mut w = l.split(' ').map(|n| n.parse::<i32>().unwrap());
        (w.next().unwrap(), w.next().unwrap())
    };
    let (groups, children) = text.lines().map(pair).unzip();
    (child, groups, children)
}

/// docs/jobs.md: a drip killed with `kill -9` leaves no job of its own
/// running: the warden (`drip-warden`, in a process group of its own,
/// deaf to the stopping signals, which are sent it first) sends each
/// running job's process group TERM as soon as drip is gone, and KILL
/// 200 ms later (the background children ignore TERM); then it ends. 3 s:
/// the 200 ms and a busy machine's delays.
#[test]
fn a_drip_killed_with_kill_9_leaves_none_of_its_jobs_running() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, groups, children) = three_jobs_with_children(dir.path(), &[]);
    let warden = warden_of(child.id());
    if let Some(w) = warden {
        until_ignoring(
            w,
            &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT],
        );
        let group = stat_fields(w).and_then(|f| f[2].parse::<i32>().ok());
        assert_eq!(group, Some(w), "the warden in a process group of its own");
        for signal in ["-INT", "-TERM", "-HUP", "-QUIT"] {
            signal_with_kill(signal, &w.to_string());
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = until_gone(&groups, &children, Duration::from_secs(3));
    for &g in &groups {
        kill_quietly(&format!("-{g}"));
    }
    let gone = gone.expect("a job of the drip killed ran on 3 s after it");
    let warden = warden.expect("no warden");
    assert!(
        until_gone(&[], &[warden], Duration::from_secs(3)).is_some(),
        "the warden outlived the jobs it ended"
    );
    eprintln!("the jobs were gone {gone:?} after the kill");
}

/// A drip stopped (`SIGSTOP`) is not gone: its jobs run on to their end,
/// and it settles them when it goes on (status 0).
#[test]
fn a_stopped_drip_s_jobs_run_on() {
    let dir = tempfile::tempdir().unwrap();
    let (started, done) = (dir.path().join("started"), dir.path().join("done"));
    let script = format!(
        r#"echo "$1" >> {}; sleep 0.5; echo "$1" >> {}"#,
        started.display(),
        done.display()
    );
    let mut cmd = command(&[
        "-r", "inf", "-j", "2", "-q", "--exec", "sh", "-c", &script, "sh", "{}",
    ]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    crate::common::feed(&mut child, b"1\n2\n");
    wait_for_lines(&started, 2);
    signal_with_kill("-STOP", &child.id().to_string());
    wait_for_lines(&done, 2);
    signal_with_kill("-CONT", &child.id().to_string());
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(20)).code(),
        Some(0)
    );
}

/// docs/jobs.md: at a normal end drip leaves a job's background children
/// alone (a job may start a daemon): its warden, gone after drip, ends
/// none of them.
#[test]
fn at_a_normal_end_a_job_s_background_child_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child");
    let script = format!(r#"sleep 60 & echo $! > {}; sleep 0.3"#, pid_file.display());
    let mut cmd = command(&["-r", "inf", "-q", "--exec", "sh", "-c", &script]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    crate::common::feed(&mut child, b"1\n");
    wait_for_lines(&pid_file, 1);
    let warden = warden_of(child.id());
    assert_eq!(
        wait_for(&mut child, Duration::from_secs(20)).code(),
        Some(0)
    );
    let warden = warden.expect("no warden");
    let warden_gone = until_gone(&[], &[warden], Duration::from_secs(10));
    let background: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ran_on = alive(background);
    kill_quietly(&background.to_string());
    assert!(warden_gone.is_some(), "the warden outlived drip");
    assert!(ran_on, "a job's background child was ended at a normal end");
}

#[test]
fn a_drip_warden_of_left_in_the_environment_makes_no_warden() {
    // Its stdin a pipe, the variable naming its parent, as a warden's
    // are: a drip not started as the warden is drip all the same. It
    // used to read its input as a warden's notes, and end the process
    // groups they named: here a sleep's group of its own.
    use std::os::unix::process::CommandExt;
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let mut note = vec![b'+'];
    note.extend_from_slice(&sleeper.id().to_le_bytes());
    note.push(b'\n');
    let mut drip = common::command(&["-r", "inf"])
        .env("DRIP_WARDEN_OF", std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut drip, &note);
    let (status, stdout, stderr) = common::output_of(drip);
    std::thread::sleep(Duration::from_millis(300));
    let alive = sleeper.try_wait().unwrap().is_none();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(alive, "the group named on drip's input was ended");
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(stdout, note, "{stderr}");
}
