//! `--resume JOBLOG`: a batch killed at any moment and run again does every
//! record once, matched by content. Real processes: curl against a loopback
//! server that counts the requests for each record, drip killed with
//! SIGKILL at random times and run again with `--resume` until it ends with
//! status 0.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{command, run, send_signal, temp_file, wait_for, Answer};
use serde_json::Value;

/// Requests seen, by path.
type Counts = Arc<Mutex<HashMap<String, u32>>>;

/// A server on 127.0.0.1 that answers every request 200 after 0 to 20 ms,
/// counting the requests for each path.
fn counting_server() -> (u16, Counts) {
    let counts: Counts = Arc::default();
    let seen = Arc::clone(&counts);
    let port = common::http_server(move |n, path| {
        *seen.lock().unwrap().entry(path.to_string()).or_default() += 1;
        std::thread::sleep(Duration::from_millis((n as u64 * 7) % 21));
        Answer {
            body: "ok",
            ..Answer::status(200)
        }
    });
    (port, counts)
}

/// The content hash of a record, as in `DRIP_RECORD_ID`: the first 128
/// bits of its SHA-256, in hex.
fn digest(record: &str) -> String {
    use sha2::{Digest, Sha256};
    let sum = Sha256::digest(record.as_bytes());
    sum[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The 64-bit FNV-1a of a record, in hex: the hash part of the ids an
/// earlier drip wrote.
fn fnv(record: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in record.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Successes in the joblog at `path`, by content hash; a torn last line is
/// not read.
fn successes(path: &Path) -> HashMap<String, u32> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |at| &text[..at]);
    let mut done = HashMap::new();
    for line in whole.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if entry["outcome"] == "succeeded" {
            let id = entry["id"].as_str().unwrap();
            let hash = id.rsplit_once('-').unwrap().1.to_string();
            *done.entry(hash).or_default() += 1;
        }
    }
    done
}

/// One batch: 24 URLs, two of them twice, in a new order on every run;
/// drip is killed with SIGKILL 1 to 3 times at random, then runs to the
/// end. Every record succeeds exactly once across the runs. Returns how
/// many runs were killed with part of the batch done.
fn batch(seed: u64, port: u16, counts: &Counts) -> u32 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let prefix = format!("/s{seed}/");
    let mut urls: Vec<String> = (1..=24)
        .map(|i| format!("http://127.0.0.1:{port}{prefix}r{i}"))
        .collect();
    urls.push(urls[4].clone());
    urls.push(urls[9].clone());
    let mut occurrences_of: HashMap<String, u32> = HashMap::new();
    for url in &urls {
        *occurrences_of.entry(url.clone()).or_default() += 1;
    }
    let occurrences = |url: &String| occurrences_of[url];
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let stats = dir.path().join("stats.json");
    let kills = rng.u32(1..=3);
    let mut interrupted = 0;
    for run in 0.. {
        assert!(run <= kills, "seed {seed}: run {run} did not end");
        let before = successes(&joblog);
        rng.shuffle(&mut urls);
        let input = temp_file(urls.join("\n").as_bytes());
        let mut child = command(&[
            "-q",
            "-r",
            "300/s",
            "-j",
            "4",
            "--resume",
            joblog.to_str().unwrap(),
            "--stats-json",
            stats.to_str().unwrap(),
            "--exec",
            "curl",
            "-sSf",
            "-o",
            "/dev/null",
            "{}",
        ])
        .stdin(Stdio::from(input.reopen().unwrap()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
        let killed = run < kills;
        if killed {
            std::thread::sleep(Duration::from_millis(rng.u64(10..200)));
            send_signal(&child, libc::SIGKILL);
        }
        let status = wait_for(&mut child, Duration::from_secs(30));
        let after = successes(&joblog);
        // A record done before was not run again: no record has more
        // successes than it appears in the input.
        for url in &urls {
            let n = after.get(&digest(url)).copied().unwrap_or(0);
            assert!(
                n <= occurrences(url),
                "seed {seed}: {url} succeeded {n} times"
            );
        }
        if killed && !status.success() {
            let done: u32 = after.values().sum();
            if done > 0 && done < urls.len() as u32 {
                interrupted += 1;
            }
            continue;
        }
        assert!(status.success(), "seed {seed}: run {run}: {status:?}");
        // What was skipped is exactly what had succeeded before.
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let done_before: u32 = before.values().sum();
        assert_eq!(s["skipped_done"], done_before, "seed {seed}: {s}");
        assert_eq!(s["read"], urls.len(), "seed {seed}: {s}");
        assert_eq!(
            s["succeeded"],
            urls.len() as u32 - done_before,
            "seed {seed}: {s}"
        );
        break;
    }
    // Every record succeeded exactly once, and reached the server; a
    // request was repeated only for a job in flight at a kill.
    let done = successes(&joblog);
    let seen = counts.lock().unwrap();
    let mut repeats = 0;
    let distinct: std::collections::BTreeSet<&String> = urls.iter().collect();
    for url in distinct {
        let path = &url[url.find(&prefix).unwrap()..];
        assert_eq!(
            done.get(&digest(url)).copied(),
            Some(occurrences(url)),
            "seed {seed}: {url}"
        );
        let requests = seen.get(path).copied().unwrap_or(0);
        assert!(
            requests >= occurrences(url),
            "seed {seed}: {url} never requested"
        );
        repeats += requests - occurrences(url);
    }
    // At most four jobs were in flight at each kill.
    assert!(
        repeats <= 4 * kills,
        "seed {seed}: {repeats} repeated requests"
    );
    interrupted
}

#[test]
fn killed_and_resumed_batches_do_every_record_exactly_once() {
    if !common::have(&["curl"]) {
        return;
    }
    let (port, counts) = counting_server();
    let start = Instant::now();
    let interrupted: u32 = (0..20).map(|seed| batch(seed, port, &counts)).sum();
    eprintln!(
        "20 batches in {:.1} s, {interrupted} runs killed part way",
        start.elapsed().as_secs_f64()
    );
    // The kills must land while work is under way, or nothing is tested.
    assert!(
        interrupted >= 10,
        "only {interrupted} runs were killed part way"
    );
}

#[test]
fn a_torn_last_line_is_passed_over_and_the_run_appends_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let jl = joblog.to_str().unwrap();
    // A first run over a and b; then b's line is cut short, as by a kill.
    let (status, out, err) = run(
        &["-q", "-r", "inf", "--joblog", jl, "--exec", "echo"],
        "a\nb\n",
    );
    assert_eq!((status, out.as_str()), (0, "a\nb\n"), "{err}");
    let text = std::fs::read_to_string(&joblog).unwrap();
    std::fs::write(&joblog, &text[..text.len() - 5]).unwrap();
    // b runs again, and c; a does not.
    let (status, out, err) = run(
        &["-r", "inf", "--resume", jl, "--stats", "--exec", "echo"],
        "c\nb\na\n",
    );
    assert_eq!((status, out.as_str()), (0, "c\nb\n"), "{err}");
    assert!(
        err.contains("drip: --resume: a last line cut short"),
        "{err}"
    );
    assert!(err.contains("skipped done 1"), "{err}");
    // The new lines start on a line of their own: a third run skips all.
    let (status, out, err) = run(
        &["-r", "inf", "--resume", jl, "--exec", "echo"],
        "a\nb\nc\n",
    );
    assert_eq!((status, out.as_str()), (0, ""), "{err}");
    assert_eq!(
        err,
        "drip: --resume: 1 lines that are not joblog entries are passed over\n"
    );
    // -q: a notice, not an error; stderr gets nothing.
    let (status, out, err) = run(
        &["-q", "-r", "inf", "--resume", jl, "--exec", "echo"],
        "a\nb\nc\n",
    );
    assert_eq!((status, out.as_str(), err.as_str()), (0, "", ""));
}

/// `DRIP_RECORD_ID` is the record's place in the input and its hash: a
/// resumed run, which skips the records done before, gives each record it
/// runs the id the first run gave it, so an idempotency key built from it
/// holds across runs.
#[test]
fn a_resumed_run_gives_each_record_the_id_the_first_run_gave_it() {
    let dir = tempfile::tempdir().unwrap();
    let (joblog, ids, pass) = (
        dir.path().join("joblog"),
        dir.path().join("ids"),
        dir.path().join("pass"),
    );
    // Each job logs its record and id; records 3, 6, 9 and 12 fail until
    // `pass` is there.
    let script = format!(
        r#"echo "$0 $DRIP_RECORD_ID" >> {}; [ -e {} ] || [ $(( $0 % 3 )) != 0 ]"#,
        ids.display(),
        pass.display()
    );
    let jl = joblog.to_str().unwrap();
    let args = [
        "-q", "-r", "inf", "-j", "2", "--resume", jl, "--exec", "sh", "-c", &script, "{}",
    ];
    let input = common::numbered(1..=12);
    let logged = |path: &Path| -> Vec<(u64, String)> {
        let mut lines: Vec<(u64, String)> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let (n, id) = l.split_once(' ').unwrap();
                (n.parse().unwrap(), id.to_string())
            })
            .collect();
        lines.sort();
        lines
    };
    let (status, _, err) = run(&args, &input);
    assert_eq!(status, 123, "{err}");
    let first = logged(&ids);
    std::fs::remove_file(&ids).unwrap();
    std::fs::write(&pass, "").unwrap();
    let (status, _, err) = run(&args, &input);
    assert_eq!(status, 0, "{err}");
    let again = logged(&ids);
    let ran: Vec<u64> = again.iter().map(|(n, _)| *n).collect();
    assert_eq!(ran, [3, 6, 9, 12], "only the records that failed ran again");
    for (n, id) in first.iter().chain(&again) {
        assert_eq!(*id, format!("{n}-{}", digest(&n.to_string())), "record {n}");
    }
    for (n, id) in &again {
        let before = first.iter().find(|(m, _)| m == n).unwrap();
        assert_eq!(*id, before.1, "record {n}: another id than the first run's");
    }
}

/// Records run out of input order (`--key`: key a waits its turn while c
/// goes) keep their place in the input in their id.
#[test]
fn the_id_is_the_place_in_the_input_whatever_order_records_run_in() {
    let (status, out, err) = run(
        &[
            "-q",
            "-r",
            "100/s",
            "--key",
            "1",
            "--key-rate",
            "5/s",
            "--exec",
            "sh",
            "-c",
            r#"echo "$DRIP_RECORD $DRIP_RECORD_ID $1""#,
            "sh",
        ],
        "a 1\na 2\nc 3\n",
    );
    assert_eq!(status, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // c ran second, a's second record third.
    assert_eq!(
        lines,
        [
            format!("1 1-{} a 1", digest("a 1")),
            format!("2 3-{} c 3", digest("c 3")),
            format!("3 2-{} a 2", digest("a 2")),
        ],
        "{out}"
    );
}

#[test]
fn a_joblog_that_does_not_exist_yet_starts_from_the_beginning() {
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("new");
    let jl = joblog.to_str().unwrap();
    let (status, out, err) = run(
        &["-q", "-r", "inf", "--resume", jl, "--exec", "echo"],
        "x\nx\n",
    );
    assert_eq!((status, out.as_str()), (0, "x\nx\n"), "{err}");
    assert_eq!(successes(&joblog).get(&digest("x")), Some(&2));
    // The same file as --joblog is allowed; another is not.
    let (status, _, err) = run(
        &["-q", "--resume", jl, "--joblog", jl, "--exec", "echo"],
        "x\n",
    );
    assert_eq!(status, 0, "{err}");
    let (status, _, err) = run(
        &["--resume", jl, "--joblog", "other", "--exec", "echo"],
        "x\n",
    );
    assert_eq!(status, 2);
    assert!(err.contains("--resume appends to its JOBLOG"), "{err}");
}

/// `--joblog` beside `--resume` names the same file by any name: another
/// spelling, a symbolic link; another file is refused.
#[test]
fn the_joblog_beside_resume_is_the_same_file_by_any_name() {
    let dir = tempfile::tempdir().unwrap();
    // drip --resume RESUME --joblog JOBLOG in `dir`: (status, stderr).
    let run_in = |resume: &str, joblog: &str| {
        let out = command(&["-q", "-r", "inf", "--resume", resume, "--joblog", joblog])
            .args(["/dev/null", "--exec", "echo"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    // Not created yet: the same name in the same directory.
    let (status, err) = run_in("jobs.ndjson", "./jobs.ndjson");
    assert_eq!(status, Some(0), "{err}");
    std::fs::write(dir.path().join("jobs.ndjson"), "").unwrap();
    std::os::unix::fs::symlink("jobs.ndjson", dir.path().join("link")).unwrap();
    let full = dir.path().join("jobs.ndjson").display().to_string();
    for joblog in ["./jobs.ndjson", "link", &full] {
        let (status, err) = run_in("jobs.ndjson", joblog);
        assert_eq!(status, Some(0), "{joblog}: {err}");
    }
    let (status, err) = run_in("jobs.ndjson", "other");
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("--resume appends to its JOBLOG"), "{err}");
}

/// A mistyped name (the URL list itself, random bytes) is no joblog: drip
/// refuses it before it writes anything, and the file is left as it was.
#[test]
fn a_file_without_one_joblog_entry_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let urls = dir.path().join("urls.txt");
    let mut noise: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    noise.push(b'\n');
    let lines = noise
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .count();
    for (text, says) in [
        (
            b"https://a\nhttps://b\nhttps://c\n".to_vec(),
            "none of its 3 lines is a joblog entry".to_string(),
        ),
        (
            noise,
            format!("none of its {lines} lines is a joblog entry"),
        ),
    ] {
        std::fs::write(&urls, &text).unwrap();
        let path = urls.to_str().unwrap();
        let (status, out, err) = run(
            &["-r", "inf", "--resume", path, "--exec", "true"],
            "1\n2\n3\n",
        );
        assert_eq!((status, out.as_str()), (1, ""), "{err}");
        assert_eq!(
            err,
            format!("drip: --resume {path}: not a joblog ({says})\n")
        );
        assert!(
            std::fs::read(&urls).unwrap() == text,
            "the file is untouched"
        );
    }
}

#[test]
fn no_success_is_logged_before_the_job_has_ended() {
    // The job is still running when drip is killed: its record has no
    // line, and the next run runs it.
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let jl = joblog.to_str().unwrap();
    let mut child = command(&[
        "-q",
        "--resume",
        jl,
        "--exec",
        "sh",
        "-c",
        "sleep 0.5; echo $1",
        "sh",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    child.stdin.take().unwrap().write_all(b"slow\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    send_signal(&child, libc::SIGKILL);
    wait_for(&mut child, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(600));
    assert!(successes(&joblog).is_empty());
    let (status, out, err) = run(&["-q", "--resume", jl, "--exec", "echo"], "slow\n");
    assert_eq!((status, out.as_str()), (0, "slow\n"), "{err}");
}

/// Two records that the 64-bit FNV-1a of earlier ids did not tell apart:
/// after the first succeeded, a resumed run still runs the second, and
/// each has an id of its own.
#[test]
fn records_with_the_same_old_hash_are_told_apart() {
    let (a, b) = ("78eafc5a458f3669", "05d19705f609f65d");
    assert_eq!(fnv(a), fnv(b));
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let jl = joblog.to_str().unwrap();
    let args = [
        "-r",
        "inf",
        "--stats",
        "--resume",
        jl,
        "--exec",
        "sh",
        "-c",
        r#"echo "$1 $DRIP_RECORD_ID""#,
        "sh",
    ];
    let (status, out, err) = run(&args, &format!("{a}\n"));
    assert_eq!(
        (status, out.as_str()),
        (0, format!("{a} 1-{}\n", digest(a)).as_str()),
        "{err}"
    );
    let (status, out, err) = run(&args, &format!("{a}\n{b}\n"));
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, format!("{b} 2-{}\n", digest(b)), "{err}");
    // The clause ends a line of the summary, or a comma follows it.
    assert!(
        err.contains("skipped done 1,") || err.contains("skipped done 1\n"),
        "{err}"
    );
    assert_ne!(digest(a), digest(b));
}

/// A joblog an earlier drip wrote (a 64-bit FNV-1a in its ids) still
/// resumes: its successes are matched by their records, so a record that
/// shares the old hash of one done is not skipped.
#[test]
fn a_joblog_of_the_earlier_format_still_resumes() {
    let (a, b) = ("78eafc5a458f3669", "05d19705f609f65d");
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let line = |n: u32, record: &str, outcome: &str| {
        format!(
            r#"{{"id":"{n}-{}","number":{n},"record":"{record}","attempt":1,"start_us":1764601200123456,"duration_us":58672,"exit":0,"signal":null,"timed_out":false,"http_status":null,"outcome":"{outcome}"}}"#,
            fnv(record)
        ) + "\n"
    };
    let old = line(1, a, "succeeded") + &line(2, "x", "failed") + &line(3, "y", "succeeded");
    std::fs::write(&joblog, &old).unwrap();
    let (status, out, err) = run(
        &[
            "-q",
            "-r",
            "inf",
            "--resume",
            joblog.to_str().unwrap(),
            "--exec",
            "echo",
        ],
        &format!("{a}\n{b}\nx\ny\n"),
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, format!("{b}\nx\n"), "{err}");
    assert_eq!(err, "");
    // This run's lines are appended in the new format.
    let text = std::fs::read_to_string(&joblog).unwrap();
    assert!(text.starts_with(&old));
    assert_eq!(successes(&joblog).get(&digest(b)), Some(&1));
}
