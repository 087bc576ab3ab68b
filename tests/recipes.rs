//! The cookbook's recipes, run as the cookbook writes them (the command
//! taken from docs/cookbook.md, so a test breaks when the page changes)
//! against loopback servers, and judged by what the servers saw.

use crate::common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::llm::{api_server, chat_requests, Api, Quota};

/// The text of the fenced `sh` block of `page` (under the crate's root)
/// that holds every one of `marks`.
fn block(page: &str, marks: &[&str]) -> String {
    fenced(page, "sh", marks)
}

/// The text of the block fenced as "```" `lang` of `page` that holds
/// every one of `marks`.
fn fenced(page: &str, lang: &str, marks: &[&str]) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
    let mut blocks = Vec::new();
    // Inside a fence: whether it is of `lang`, and its text.
    let mut current: Option<(bool, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(l)) => current = Some((l == lang, String::new())),
            (Some(_), Some(_)) => {
                let (ours, b) = current.take().unwrap();
                if ours {
                    blocks.push(b);
                }
            }
            (Some((_, b)), None) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, None) => {}
        }
    }
    let found: Vec<String> = blocks
        .into_iter()
        .filter(|b| marks.iter().all(|m| b.contains(m)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{page}: one block with {marks:?}: {found:?}"
    );
    found.into_iter().next().unwrap()
}

/// `max_tokens` of each request, as the chat recipe's requests ask.
const MAX_TOKENS: u64 = 500;

/// How a chat recipe of the cookbook is run: the provider, the base URL
/// the recipe names, the minute made `minute` (`/6s`: the quotas a minute
/// become a window of 6 s, and the recipe's rates with them), the headers
/// file the recipe asks for, and the server's quota.
struct Chat {
    api: Api,
    base: &'static str,
    minute: &'static str,
    headers: &'static str,
    quota: Quota,
}

/// What one run of a chat recipe came to: the share of the binding
/// quota spent from the first answer to the last, and an account.
/// With `no_quota_pacing`, `--no-quota-pacing` is added: the budgets
/// alone pace, the headers not read.
fn run_chat(chat: &Chat, n: u64, seed: u64, no_quota_pacing: bool) -> (f64, String) {
    let script = block("docs/cookbook.md", &[&format!("API={}", chat.base)]);
    let (port, books) = api_server(chat.api, chat.quota, seed);
    let script = script
        .replace(chat.base, &format!("http://127.0.0.1:{port}"))
        .replace("/min", chat.minute);
    let script = if no_quota_pacing {
        script.replacen("drip ", "drip --no-quota-pacing ", 1)
    } else {
        script
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("headers.txt"), chat.headers).unwrap();
    std::fs::write(
        dir.path().join("requests.jsonl"),
        chat_requests(n, MAX_TOKENS),
    )
    .unwrap();
    let out = common::shell(&script)
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{script}\n{stderr}");
    // Every request answered once, the responses in input order.
    let responses = std::fs::read_to_string(dir.path().join("responses.jsonl")).unwrap();
    let ids: Vec<u64> = responses
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, (1..=n).collect::<Vec<u64>>(), "{stderr}");
    let books = books.lock().unwrap().clone();
    assert_eq!((books.answered, books.not_found), (n, 0), "{stderr}");
    assert!(books.refused <= 2, "{books:?}\n{stderr}");
    let q = &chat.quota;
    let (share, what) = match chat.api {
        Api::OpenAi => (books.tokens_used(q), "tokens"),
        _ => (books.output_used(q), "output tokens"),
    };
    let account = format!(
        "{:?}{}{}: {} answered, {} × 429, over {} windows: {} input and {} output tokens; \
         {:.1} % of the {what} the windows allowed (input {:.1} %)\n{}",
        chat.api,
        if q.refills { " buckets" } else { "" },
        if no_quota_pacing {
            " --no-quota-pacing"
        } else {
            ""
        },
        books.answered,
        books.refused,
        books.span(),
        books.input,
        books.output,
        100.0 * share,
        100.0 * books.input_used(q),
        books.windows_report(q)
    );
    (share, account)
}

/// Run `chat` as written and with `--no-quota-pacing`, each until
/// judged: the recipe keeps under every quota (at most 2 × 429, as the
/// llm_api tests allow) and spends at least `least` of the binding one
/// (with the headers read, as much as without: each spent 53–62 % of it
/// as written before starts were spaced by what requests spend, not by
/// their estimates, and 82–95 % without the headers); a
/// run spending less is not judged (a busy machine holds the jobs back:
/// each holds its estimate the longer).
fn judge_chat(chat: &Chat, least: f64) {
    // DRIP_RECIPE_REQUESTS=600 for a longer run.
    let n: u64 = std::env::var("DRIP_RECIPE_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut seed = 11;
    for no_quota_pacing in [false, true] {
        common::until_judged(3, Duration::from_secs(240), || {
            seed += 1;
            let (share, account) = run_chat(chat, n, seed, no_quota_pacing);
            eprint!("{account}");
            (share < least).then(|| format!("{:.1} % spent: {account}", 100.0 * share))
        });
    }
}

/// More than any window of these tests spends.
const LOOSE: u64 = 1 << 40;

/// The OpenAI recipe's server: 500 requests and 30,000 tokens (input and
/// output together) a 6 s window, the recipe's minute, or as buckets that
/// refill that much in 6 s (`refills`).
fn openai(refills: bool) -> Chat {
    Chat {
        api: Api::OpenAi,
        base: "https://api.openai.com",
        minute: "/6s",
        headers: "Authorization: Bearer sk-test\nContent-Type: application/json\n",
        quota: Quota {
            window: Duration::from_secs(6),
            requests: 500,
            input: LOOSE,
            output: LOOSE,
            tokens: Some(30_000),
            refills,
        },
    }
}

/// The Anthropic recipe's server: 500 requests, 30,000 input and 10,000
/// output tokens a 3 s window, the recipe's minute, or as buckets that
/// refill that much in 3 s (`refills`).
fn anthropic(refills: bool) -> Chat {
    Chat {
        api: Api::Anthropic,
        base: "https://api.anthropic.com",
        minute: "/3s",
        headers: "x-api-key: sk-ant-test\nanthropic-version: 2023-06-01\nContent-Type: application/json\n",
        quota: Quota {
            window: Duration::from_secs(3),
            requests: 500,
            input: 30_000,
            output: 10_000,
            tokens: None,
            refills,
        },
    }
}

#[test]
fn the_openai_chat_recipe_spends_one_quota_of_input_and_output_tokens_without_429s() {
    if !common::have(&["curl"]) {
        return;
    }
    judge_chat(&openai(false), 0.7);
}

#[test]
fn the_anthropic_chat_recipe_spends_the_input_and_output_quotas_apart_without_429s() {
    if !common::have(&["curl"]) {
        return;
    }
    judge_chat(&anthropic(false), 0.7);
}

#[test]
fn the_openai_chat_recipe_spends_a_refilled_bucket_without_429s() {
    if !common::have(&["curl"]) {
        return;
    }
    judge_chat(&openai(true), 0.7);
}

#[test]
fn the_anthropic_chat_recipe_spends_refilled_buckets_without_429s() {
    if !common::have(&["curl"]) {
        return;
    }
    judge_chat(&anthropic(true), 0.7);
}

/// One run of records `a` and `b` (`-j 1 --retries 3`), record a's first
/// attempt writing `headers` to `$DRIP_HEADERS` and exiting 1, every other
/// attempt succeeding: (exit status, the joblog's lines, stderr).
fn not_curl(headers: &str) -> (i32, Vec<serde_json::Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("jobs.ndjson");
    let job = r#"if [ "$1" = a ] && [ "$DRIP_ATTEMPT" = 1 ]; then
                   printf '%s' "$HEADERS" > "$DRIP_HEADERS"; exit 1
                 fi; echo "$1""#;
    let args = [
        "-q",
        "-r",
        "inf",
        "-j",
        "1",
        "--retries",
        "3",
        "--joblog",
        joblog.to_str().unwrap(),
        "--exec",
        "sh",
        "-c",
        job,
        "sh",
        "{}",
    ];
    let out = common::command(&args)
        .env("HEADERS", headers)
        .stdin(common::temp_file(b"a\nb\n").reopen().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        out.status.code().unwrap_or(-1),
        common::json_lines(&joblog),
        stderr,
    )
}

#[test]
fn a_job_that_is_not_curl_is_judged_by_the_status_line_it_writes() {
    // The headers file of docs/jobs.md, its wait made 1 s.
    let example = fenced("docs/jobs.md", "", &["HTTP/1.1 429", "retry-after: 20"]);
    let example = example.replace("retry-after: 20", "retry-after: 1");
    // With the status line: an overload, retried once its Retry-After
    // has passed.
    let (status, log, stderr) = not_curl(&example);
    assert_eq!(status, 0, "{stderr}");
    let fates: Vec<(&str, u64, &str)> = log
        .iter()
        .map(|l| {
            (
                l["record"].as_str().unwrap(),
                l["attempt"].as_u64().unwrap(),
                l["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fates,
        [
            ("a", 1, "overload"),
            ("a", 2, "succeeded"),
            ("b", 1, "succeeded")
        ],
        "{stderr}"
    );
    assert_eq!(log[0]["http_status"], 429);
    let end = log[0]["start_us"].as_u64().unwrap() + log[0]["duration_us"].as_u64().unwrap();
    let retried = log[1]["start_us"].as_u64().unwrap();
    assert!(
        retried >= end + 1_000_000,
        "retried {} µs after the 429, within its Retry-After",
        retried - end
    );
    // Without it (the lines after the status line alone): no 429 seen,
    // the exit of 1 a final failure, not retried; the batch goes on.
    let (_, rest) = example.split_once('\n').unwrap();
    assert!(rest.starts_with("retry-after:"), "{rest}");
    let (status, log, stderr) = not_curl(rest);
    assert_eq!(status, 123, "{stderr}");
    let fates: Vec<(&str, u64, &str)> = log
        .iter()
        .map(|l| {
            (
                l["record"].as_str().unwrap(),
                l["attempt"].as_u64().unwrap(),
                l["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fates,
        [("a", 1, "failed"), ("b", 1, "succeeded")],
        "{stderr}"
    );
    assert_eq!(log[0]["http_status"], serde_json::Value::Null);
}

/// Seconds since the Unix epoch now, on the wall clock.
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The nightly batch of the cookbook, run as its crontab line says, with
/// the day made a second: drip has no clock to set, and a budget's
/// windows are on the wall clock, so `--budget 10000/day@America/New_York`
/// becomes `4/second@UTC` (and `-r 5/s` 50/s, so that a run's 4 calls fit
/// in its second). Each "night" is a run in a later second. Judged when
/// every run began and ended within one second (a busy machine can make a
/// run straddle two, and then it rightly makes more than 4).
#[test]
fn the_nightly_batch_stops_at_the_days_budget_and_resumes_the_next_night() {
    if !common::have(&["curl"]) {
        return;
    }
    let line = block("docs/cookbook.md", &["--budget-exhausted stop", "crontab"]);
    let line = line
        .lines()
        .find(|l| l.contains("drip "))
        .expect("the crontab line");
    let command = &line[line.find("drip ").unwrap()..];
    let script = command
        .replace("10000/day@America/New_York", "4/second@UTC")
        .replace("-r 5/s", "-r 50/s");
    assert!(script.contains("--budget 4/second@UTC"), "{script}");
    assert!(script.contains("-r 50/s"), "{script}");
    let mut tries = 0;
    common::until_judged(10, Duration::from_secs(180), || {
        tries += 1;
        let calls: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = Arc::clone(&calls);
        let port = common::http_server(move |_, path| {
            seen.lock().unwrap().push(path.to_string());
            common::Answer::status(200)
        });
        let dir = tempfile::tempdir().unwrap();
        let items: String = (1..=10).map(|i| format!("item-{i}\n")).collect();
        std::fs::write(dir.path().join("calls.txt"), items).unwrap();
        let api = dir.path().join("call-api");
        std::fs::write(
            &api,
            format!("#!/bin/sh\nexec curl -sSf -o /dev/null http://127.0.0.1:{port}/\"$1\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&api, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // A name of this try's own: the shared count of an earlier try's
        // second is not this one's.
        let script = script.replace(
            "--share nightly-calls",
            &format!("--share nightly-calls-{}-{tries}", std::process::id()),
        );
        // Run the line at the start of the next second (or now, to stay in
        // this one): (status, calls made, the second it began and ended in,
        // if one).
        let night = |next: bool| {
            if next {
                let now = wall();
                std::thread::sleep(Duration::from_secs_f64(now.ceil() - now + 0.01));
            }
            let before = calls.lock().unwrap().len();
            let began = wall();
            let out = common::shell(&script)
                .current_dir(dir.path())
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let ended = wall();
            let made = calls.lock().unwrap().len() - before;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let second = (began.floor() == ended.floor()).then_some(began.floor() as u64);
            (out.status.code().unwrap_or(-1), made, second, stderr)
        };
        let mut runs = vec![night(true), night(false)];
        while runs.len() < 5 && calls.lock().unwrap().len() < 10 {
            runs.push(night(true));
        }
        // Never a call twice, whatever the clock did.
        let mut made = calls.lock().unwrap().clone();
        made.sort();
        let before = made.len();
        made.dedup();
        assert_eq!(made.len(), before, "a call made twice: {runs:?}");
        let account = format!("{runs:?}");
        if runs.iter().any(|r| r.2.is_none()) || runs[0].2 != runs[1].2 {
            return Some(format!("a run straddled two seconds: {account}"));
        }
        let fates: Vec<(i32, usize)> = runs.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            fates,
            [(5, 4), (5, 0), (5, 4), (0, 2)],
            "(status, calls) of each run: {account}"
        );
        assert_eq!(made.len(), 10, "{account}");
        assert!(
            runs[0]
                .3
                .contains("budget 4/second@UTC spent under --budget-exhausted stop"),
            "{account}"
        );
        None
    });
}

/// The link checker's rate table (docs/keys.md), and the cookbook's
/// `printf` that writes the same rows: GitHub (github.com and its
/// subdomains) at 1 a second, the CDN at 50, every other host at 10, as
/// the jobs start (`echo`: its JOBS column needs `--exec`).
#[test]
fn the_link_checkers_table_paces_each_host_at_its_rate() {
    let _t = common::beside_timing();
    let table = fenced("docs/keys.md", "", &["rates.txt", "github.com"]);
    let rows = |text: &str| -> Vec<String> {
        let words = text
            .lines()
            .map(|l| l.split('#').next().unwrap().split_whitespace());
        words
            .map(|w| w.collect::<Vec<_>>().join(" "))
            .filter(|l| !l.is_empty())
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let printf = block("docs/cookbook.md", &["--key-rates rates.txt", "printf"]);
    let printf = printf.lines().find(|l| l.starts_with("printf")).unwrap();
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(printf)
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(made.success());
    let written = std::fs::read_to_string(dir.path().join("rates.txt")).unwrap();
    assert_eq!(
        rows(&written),
        rows(&table),
        "the cookbook's rows and keys.md's"
    );
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, &table).unwrap();
    common::until_judged(3, Duration::from_secs(60), || {
        let mut urls = String::new();
        for i in 0..20 {
            urls.push_str(&format!("https://cdn.example.net/{i}\n"));
            if i < 3 {
                urls.push_str(&format!("https://github.com/{i}\n"));
                urls.push_str(&format!("https://api.github.com/{i}\n"));
            }
            if i < 8 {
                urls.push_str(&format!("https://example.org/{i}\n"));
            }
        }
        let started = std::time::Instant::now();
        let out = common::drip(&[])
            .args(["--key", "host", "--key-rates"])
            .arg(&file)
            .args(["-j", "16", "--exec", "echo", "{}"])
            .write_stdin(urls)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        let took = started.elapsed().as_secs_f64();
        assert!(out.status.success());
        assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), 34);
        // GitHub's 3 and 3 at 1/s, each key apart: 2 s; the CDN's 20 at
        // 50/s and the other host's 8 at 10/s well within it.
        (!(2.0..2.6).contains(&took)).then(|| format!("took {took:.2} s, not 2"))
    });
}

/// The link checker of docs/keys.md, its command and table as the page
/// writes them, against loopback hosts standing for GitHub (github.com
/// and api.github.com: 2 at once, each request taking 2.2 s), the CDN and
/// another host, each answering 429 over its rate and 503 over its
/// concurrency: none of them ever does, and every URL is checked. The
/// hosts' windows are shorter than a second by 0.2 s or 0.3 s, the jitter
/// allowed in when curl's requests come (a dozen curls starting at once on
/// a busy machine): GitHub 1 in any 0.7 s, the CDN 60 in any 0.8 s (50/s
/// with its burst of 10 sends at most 50), the other 10 in any 0.7 s.
/// curl on PATH is curl sending each host's name to its loopback server
/// (`--connect-to`).
#[test]
fn the_link_checker_keeps_each_hosts_rate_and_jobs() {
    if !common::have(&["curl"]) {
        return;
    }
    use common::hosts::{Host, Limits};
    let _t = common::beside_timing();
    let ms = Duration::from_millis;
    let github = Limits::concurrency(2, ms(2200)).with_rate(1, ms(700));
    let hosts = [
        ("github.com", Host::start(github), 4),
        ("api.github.com", Host::start(github), 4),
        (
            "cdn.example.net",
            Host::start(Limits::concurrency(16, ms(20)).with_rate(60, ms(800))),
            80,
        ),
        (
            "example.org",
            Host::start(Limits::concurrency(16, ms(20)).with_rate(10, ms(700))),
            15,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let table = fenced("docs/keys.md", "", &["rates.txt", "github.com"]);
    std::fs::write(dir.path().join("rates.txt"), &table).unwrap();
    let most = hosts.iter().map(|h| h.2).max().unwrap();
    let mut urls = String::new();
    for i in 0..most {
        for (name, _, n) in &hosts {
            if i < *n {
                urls.push_str(&format!("http://{name}/{i}\n"));
            }
        }
    }
    std::fs::write(dir.path().join("urls.txt"), urls).unwrap();
    let connect: Vec<String> = hosts
        .iter()
        .map(|(name, host, _)| format!("--connect-to {name}:80:127.0.0.1:{}", host.port))
        .collect();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let curl = bin.join("curl");
    let wrapper = format!(
        "#!/bin/sh\nexec '{}' {} \"$@\"\n",
        common::tool_path("curl").display(),
        connect.join(" ")
    );
    std::fs::write(&curl, wrapper).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&curl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = block("docs/keys.md", &["--key-rates rates.txt", "--exec curl"]);
    let mut cmd = common::shell(&script);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let drip_dir = Path::new(common::bin())
        .parent()
        .unwrap()
        .display()
        .to_string();
    cmd.env("PATH", format!("{drip_dir}:{path}"))
        .current_dir(dir.path());
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines = String::from_utf8_lossy(&out.stdout);
    assert_eq!(lines.lines().count(), 103, "{lines}");
    assert!(lines.lines().all(|l| l.starts_with("200 ")), "{lines}");
    for (name, host, n) in &hosts {
        let c = host.counts();
        assert_eq!((c.too_many, c.unavailable), (0, 0), "{name}: {c:?}");
        assert_eq!(c.ok, *n, "{name}: {c:?}");
    }
    for (name, host, _) in &hosts[..2] {
        let c = host.counts();
        assert_eq!(c.most_at_once, 2, "{name}: 2 at once, no more: {c:?}");
    }
}
