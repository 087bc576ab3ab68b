//! The built-in host key (`--key host`) end to end: every spelling of one
//! host is one key, held to its rate as a server limiting that host sees
//! it; a record that is not a URL is said once and counted; and a URL's
//! user name and password appear in nothing drip writes of its own.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;

/// Twelve spellings of the host `api.test` (port 80): case, a root dot,
/// the default port written, user info, a query, a fragment.
const SPELLINGS: [&str; 12] = [
    "http://api.test/a",
    "HTTP://API.TEST/b",
    "http://Api.Test./c",
    "http://api.test:80/d",
    "http://alice:s3cretPW@api.test/e",
    "http://api.test?x=1",
    "http://api.test#frag",
    "http://ghp_T0KENx@API.test/f",
    "http://api.test./g?y=2",
    "http://API.test:80/h#i",
    "http://bob:s3cretPW@Api.TEST.:80/j",
    "http://api.test/k",
];

/// Each request's arrival and the status it was answered.
type Hits = Arc<Mutex<Vec<(Instant, u16)>>>;

/// A server standing for one host that allows `rate` requests a second
/// with a burst of `burst` (a token bucket) and answers 429 past it.
/// Returns its port and each request's (arrival, status).
fn limited_server(rate: f64, burst: f64) -> (u16, Hits) {
    let hits: Hits = Arc::default();
    let bucket = Mutex::new((burst, Instant::now()));
    let seen = Arc::clone(&hits);
    let port = common::http_server(move |_, _| {
        let now = Instant::now();
        let mut b = bucket.lock().unwrap();
        let tokens = (b.0 + (now - b.1).as_secs_f64() * rate).min(burst);
        let status = if tokens >= 1.0 {
            *b = (tokens - 1.0, now);
            200
        } else {
            *b = (tokens, now);
            429
        };
        seen.lock().unwrap().push((now, status));
        common::Answer::status(status)
    });
    (port, hits)
}

/// The lines of `text`, sorted: keys may reorder records.
fn sorted(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines
}

#[test]
fn every_spelling_of_one_host_is_one_key_held_to_its_rate() {
    if !common::have(&["curl", "xargs"]) {
        return;
    }
    // The host allows 5 a second, 2 at once: drip's 5/s (burst 1) holds,
    // whatever a curl's start adds; twelve keys would all leave at once.
    let (port, hits) = limited_server(5.0, 2.0);
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let input: String = SPELLINGS.iter().map(|u| format!("{u}\n")).collect();
    let script = format!(
        "\"$0\" -q --key host --key-rate 5/s --stats-json \"$1\" | \
         xargs -n1 -P12 curl -q -s -S -o /dev/null --noproxy '*' --max-time 20 \
         --connect-to ::127.0.0.1:{port}"
    );
    let mut child = common::shell(&script)
        .arg(common::bin())
        .arg(&stats)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut child, input.as_bytes());
    let status = common::wait_for(&mut child, Duration::from_secs(60));
    assert!(status.success(), "pipeline: {status}");
    let summary = common::last_json(&stats);
    assert_eq!(summary["keys"]["keys_seen"], 1, "{summary}");
    assert_eq!(summary["keys"]["keyless"], 0, "{summary}");
    assert_eq!(
        summary["keys"]["top_written"][0][0], "api.test",
        "{summary}"
    );
    assert_eq!(summary["written"], 12, "{summary}");
    let hits = hits.lock().unwrap().clone();
    assert_eq!(hits.len(), 12, "{hits:?}");
    let refused = hits.iter().filter(|(_, s)| *s == 429).count();
    assert_eq!(refused, 0, "the host refused {refused} of 12: {hits:?}");
    // One key at 5/s: the twelve take 11 intervals of 200 ms.
    let span = summary["span_ms"].as_f64().unwrap();
    assert!(span >= 11.0 * 200.0 - 100.0, "twelve left within {span} ms");
}

/// Each spelling above, read by drip alone: one key, and the records
/// leave in input order under one key's schedule.
#[test]
fn spellings_of_one_host_key_alike_and_others_apart() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut input: String = SPELLINGS.iter().map(|u| format!("{u}\n")).collect();
    input.push_str("http://api.test:8080/\nhttp://[0:0::1]/\nhttp://[::1]:80/\nhttps://bücher.test/\nhttps://xn--bcher-kva.test./\n");
    let stats_arg = stats.to_str().unwrap();
    let (code, out, err) = common::run(
        &[
            "-q",
            "--key",
            "host",
            "--key-rate",
            "1000000/s",
            "--stats-json",
            stats_arg,
        ],
        &input,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        sorted(&out),
        sorted(&input),
        "records are passed on as they are"
    );
    let summary = common::last_json(&stats);
    let mut keys: Vec<(String, u64)> = summary["keys"]["top_written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("[::1]".to_string(), 2),
            ("api.test".to_string(), 12),
            ("api.test:8080".to_string(), 1),
            ("xn--bcher-kva.test".to_string(), 2),
        ]
    );
}

#[test]
fn a_record_that_is_not_a_url_is_said_once_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let input = "https://a.test/1\nnot a url\na.test/2\nhttps://a.test/3\nmailto:x@a.test\n";
    let stats_arg = stats.to_str().unwrap();
    let (code, out, err) = common::run(
        &[
            "--key",
            "host",
            "--key-rate",
            "1000000/s",
            "--stats",
            "--stats-json",
            stats_arg,
        ],
        input,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(sorted(&out), sorted(input));
    let said: Vec<&str> = err.lines().filter(|l| l.contains("not a URL")).collect();
    assert_eq!(
        said,
        ["drip: --key: record 2 is not a URL with a host; such records share the no-key lane (--stats counts them: records with no key)"],
        "{err}"
    );
    assert!(err.contains("3 records with no key"), "{err}");
    let summary = common::last_json(&stats);
    assert_eq!(summary["keys"]["keyless"], 3, "{summary}");
    common::assert_books_add_up(&summary);
    // -q says nothing of it; the count stays.
    let (_, _, quiet) = common::run(&["-q", "--key", "host", "--key-rate", "1000000/s"], input);
    assert!(!quiet.contains("not a URL"), "{quiet}");
}

/// With every output of drip's own on (the summary, its JSON, the
/// interval lines, the metrics file, `drip ctl` asked for everything, a
/// cost warning quoting a record), the user names and passwords carried
/// in the URLs appear nowhere but in the records themselves.
#[test]
fn no_secret_is_written_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let metrics = dir.path().join("drip.prom");
    let name = format!("hostkey-secret-{}", std::process::id());
    let args = [
        "--key",
        "host",
        "--key-rate",
        "4/s",
        "--name",
        &name,
        "--stats",
        "--stats-json",
        stats.to_str().unwrap(),
        "--stats-interval",
        "100ms",
        "--metrics",
        metrics.to_str().unwrap(),
        "--cost",
        r#""n": *([0-9]+)"#,
        "--cost-rate",
        "100/s",
        "--progress",
    ];
    let mut cmd = common::command(&args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = common::spawn(cmd);
    // The first record's cost cannot be read: the warning quotes it.
    let input: String = ["https://carol:s3cretPW@b.test/x"]
        .iter()
        .chain(&SPELLINGS)
        .map(|u| format!("{u}\n"))
        .collect();
    common::feed(&mut child, input.as_bytes());
    // While the records wait, ask drip for everything it tells.
    let mut told = String::new();
    std::thread::sleep(Duration::from_millis(800));
    for what in ["info", "stats", "keys", "jobs"] {
        let out = common::command(&["ctl", &name, what]).output().unwrap();
        told.push_str(&String::from_utf8_lossy(&out.stdout));
        told.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    let list = common::command(&["ctl", "list"]).output().unwrap();
    told.push_str(&String::from_utf8_lossy(&list.stdout));
    assert!(
        told.contains("api.test"),
        "drip ctl told nothing of the keys: {told}"
    );
    let metrics_then = std::fs::read_to_string(&metrics).unwrap_or_default();
    let (code, out, err) = common::output_of(child);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sorted(&String::from_utf8(out).unwrap()), sorted(&input));
    assert!(
        err.contains("no cost to read"),
        "the warning quoting a record: {err}"
    );
    assert!(err.contains("'https://***@b.test/x'"), "{err}");
    let written = [
        ("stderr", err),
        ("drip ctl", told),
        ("--stats-json", std::fs::read_to_string(&stats).unwrap()),
        ("--metrics while running", metrics_then),
        ("--metrics", std::fs::read_to_string(&metrics).unwrap()),
    ];
    for (what, text) in &written {
        assert!(!text.is_empty(), "{what} is empty");
        for secret in ["s3cretPW", "ghp_T0KENx", "alice", "bob", "carol"] {
            assert!(!text.contains(secret), "{secret} in {what}:\n{text}");
        }
    }
}

/// docs/keys.md's table of spellings and their keys is what drip gives:
/// each row's records, read together, key as the row says.
#[test]
fn the_table_of_spellings_in_the_docs_is_true() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/keys.md")).unwrap();
    let table = docs
        .split("A dozen spellings of one host")
        .nth(1)
        .expect("the table of spellings in docs/keys.md");
    let rows: Vec<(Vec<String>, Option<String>)> = table
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let records = cells[0]
                .split(", ")
                .map(|r| r.trim_matches('`').to_string())
                .collect();
            let key = cells[1]
                .strip_prefix('`')
                .map(|k| k.trim_end_matches('`').to_string());
            (records, key)
        })
        .collect();
    assert!(rows.len() >= 12, "{rows:?}");
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    for (records, key) in rows {
        let input: String = records.iter().map(|r| format!("{r}\n")).collect();
        let (code, _, err) = common::run(
            &[
                "-q",
                "--key",
                "host",
                "--key-rate",
                "1000000/s",
                "--stats-json",
                stats.to_str().unwrap(),
            ],
            &input,
        );
        assert_eq!(code, 0, "{err}");
        let keys = &common::last_json(&stats)["keys"];
        let want = key.as_deref().map_or(serde_json::Value::Null, |k| k.into());
        assert_eq!(keys["keys_seen"], 1, "{records:?}: {keys}");
        assert_eq!(keys["top_written"][0][0], want, "{records:?}: {keys}");
        assert_eq!(
            keys["keyless"],
            u64::from(key.is_none()) * records.len() as u64,
            "{keys}"
        );
    }
}
