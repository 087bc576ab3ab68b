//! Token-metered API batches: a loopback server that behaves like an LLM
//! chat API (`common::llm`: requests, input and output tokens per window,
//! 429 with `Retry-After` past one) and drip running `curl` per request
//! with the request, input and output token budgets, each request's
//! tokens estimated from it (bytes ÷ 4, `max_tokens`) and settled from
//! the `usage` the server reports.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::llm::{chat_requests, llm_server, Books, Quota};
use common::{command, temp_file};

/// The server's quota: a window of 5 s for 500 requests, 40,000 prompt
/// tokens and 40,000 completion tokens.
const QUOTA: Quota = Quota {
    window: Duration::from_secs(5),
    requests: 500,
    input: 40_000,
    output: 40_000,
    tokens: None,
    refills: false,
};

/// `max_tokens` of each request: four times the average completion.
const MAX_TOKENS: u64 = 1000;

/// Run `n` requests through drip against a fresh server, settling from
/// `usage` or not; the server's books and drip's output lines.
fn batch(n: u64, settle: bool) -> (Books, Vec<String>, String) {
    let (port, books) = llm_server(QUOTA, 7);
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let input = temp_file(chat_requests(n, MAX_TOKENS).as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let args = drip_args(&url, joblog.to_str().unwrap(), settle, None);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = command(&args)
        .stdin(input.reopen().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let books = books.lock().unwrap().clone();
    eprintln!(
        "{}: {}",
        if settle {
            "settled jobs"
        } else {
            "estimated jobs"
        },
        jobs_in_flight(&std::fs::read_to_string(&joblog).unwrap())
    );
    if let Ok(dir) = std::env::var("DRIP_LLM_KEEP") {
        std::fs::copy(&joblog, format!("{dir}/joblog-{settle}")).unwrap();
    }
    (books, lines, stderr)
}

/// From a joblog, the jobs in flight on average over the run and their
/// durations (median, 90th percentile, longest, in ms): each request in
/// flight holds its whole estimate until its response settles it.
fn jobs_in_flight(joblog: &str) -> String {
    let spans: Vec<(u64, u64)> = joblog
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["start_us"].as_u64()?, v["duration_us"].as_u64()?)))
        .collect();
    let (Some(first), Some(end)) = (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.0 + s.1).max(),
    ) else {
        return "no jobs".into();
    };
    let mut took: Vec<u64> = spans.iter().map(|s| s.1).collect();
    took.sort_unstable();
    let busy: u64 = took.iter().sum();
    format!(
        "{} attempts, {:.2} in flight on average, each {} ms (median), {} ms (90th percentile), {} ms at most",
        took.len(),
        busy as f64 / (end - first).max(1) as f64,
        took[took.len() / 2] / 1000,
        took[took.len() * 9 / 10] / 1000,
        took[took.len() - 1] / 1000
    )
}

/// drip's arguments for requests to `url`, resumed from `joblog`,
/// settling from `usage` or not, sharing the budgets on `share` if given.
fn drip_args(url: &str, joblog: &str, settle: bool, share: Option<&str>) -> Vec<String> {
    // Each budget's burst plus a window's worth of its rate is the quota:
    // no window of the server's can hold more than it allows.
    let mut args = vec!["-q", "--rate", "95/s:25"];
    match share {
        // A shared slot is reserved for one weight: one cost, the prompt
        // and the completion together, within the completions' budget
        // (the prompts, some 35 tokens each at 95/s at most, stay far
        // below theirs).
        Some(share) => {
            args.extend(["--share", share, "--cost", "bytes/4+1+max_tokens"]);
            args.extend(["--cost-rate", "7000/s:5000"]);
            if settle {
                args.extend(["--settle", "usage.total_tokens"]);
            }
        }
        None => {
            args.extend(["--cost", "in=bytes/4+1", "--cost", "out=max_tokens"]);
            args.extend([
                "--cost-rate",
                "in=7000/s:5000",
                "--cost-rate",
                "out=7000/s:5000",
            ]);
            if settle {
                args.extend(["--settle", "in=usage.prompt_tokens"]);
                args.extend(["--settle", "out=usage.completion_tokens"]);
            }
        }
    }
    args.extend(["-k", "--resume", joblog, "-j", "16", "--retries", "5"]);
    args.extend(["--record-on-stdin", "--exec", "curl", "-sS", "-f"]);
    args.extend(["-D", "{headers}", "-H", "content-type: application/json"]);
    args.extend(["--data-binary", "@-", url]);
    args.into_iter().map(str::to_string).collect()
}

/// The ids of the responses, in the order written.
fn ids(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn settled_from_usage_the_token_budgets_spend_the_quota_without_429s() {
    if !common::have(&["curl"]) {
        return;
    }
    // DRIP_LLM_REQUESTS=300 for the full run (bench/llm.sh).
    let n: u64 = std::env::var("DRIP_LLM_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let (settled, lines, stderr) = batch(n, true);
    // DRIP_LLM_ESTIMATED=300 for as many without settlement (slower).
    let m: u64 = std::env::var("DRIP_LLM_ESTIMATED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let (estimated, est_lines, _) = batch(m, false);
    for (name, books) in [("settled", &settled), ("estimated", &estimated)] {
        eprintln!(
            "{name}: {} answered, {} × 429, over {} windows: {} input and {} output tokens, \
             {:.1} % of the output tokens the full windows allow",
            books.answered,
            books.refused,
            books.span(),
            books.input,
            books.output,
            100.0 * books.output_used(&QUOTA)
        );
        eprint!("{}", books.windows_report(&QUOTA));
    }
    // Every request answered, once, and written in input order.
    let want: Vec<u64> = (1..=n).collect();
    assert_eq!(settled.answered, n, "{stderr}");
    assert_eq!(ids(&lines), want);
    assert_eq!(ids(&est_lines), (1..=m).collect::<Vec<u64>>());
    // The budgets keep within the windows: at most 2 refused.
    assert!(settled.refused <= 2, "{settled:?}");
    assert!(estimated.refused <= 2, "{estimated:?}");
    // Estimates alone (max_tokens, four times a typical completion) use a
    // quarter of the output quota; settled, the overestimates come back.
    let (used, alone) = (settled.output_used(&QUOTA), estimated.output_used(&QUOTA));
    assert!(
        used >= 2.0 * alone,
        "settled {used:.2}, estimated {alone:.2}"
    );
}

/// A `redis-server` on a free port of 127.0.0.1, without persistence,
/// killed when dropped.
struct Redis(std::process::Child, u16);

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let began = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis(child, port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two drips sharing the request and token budgets through Redis, each
/// sending half of the requests, settled from `usage`: every request
/// answered, each drip's output in its input order, at most 2 × 429, and
/// the output tokens spent well beyond what estimates alone spend (a
/// quarter of the quota). A run that spent less while the drips waited
/// for a CPU (the machine too busy to keep the pace) is made again; one
/// that spent less without such a wait fails.
#[test]
fn two_drips_sharing_the_budgets_through_redis_settle_for_both() {
    if !common::have(&["curl", "redis-server"]) {
        return;
    }
    let _t = common::beside_timing();
    let redis = Redis::start();
    let mut run = 0;
    common::until_judged(4, Duration::from_secs(180), || {
        run += 1;
        let share = format!("redis://127.0.0.1:{}/llm{run}", redis.1);
        two_drips_share_and_settle(&share)
    });
}

/// One run of [`two_drips_sharing_the_budgets_through_redis_settle_for_both`]
/// through `share`: `None` when judged (and passed), else why it could not
/// be judged.
fn two_drips_share_and_settle(share: &str) -> Option<String> {
    // DRIP_LLM_SHARED=300 for the full run (bench/llm.sh).
    let n: u64 = std::env::var("DRIP_LLM_SHARED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let (port, books) = llm_server(QUOTA, 7);
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let requests: Vec<String> = chat_requests(n, MAX_TOKENS)
        .lines()
        .map(str::to_string)
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let half = requests.len() / 2;
    let drips: Vec<_> = [&requests[..half], &requests[half..]]
        .into_iter()
        .enumerate()
        .map(|(d, part)| {
            let input = temp_file(format!("{}\n", part.join("\n")).as_bytes());
            let joblog = dir.path().join(format!("joblog-{d}"));
            let args = drip_args(&url, joblog.to_str().unwrap(), true, Some(share));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let ids: Vec<u64> = part
                .iter()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                        .as_u64()
                        .unwrap()
                })
                .collect();
            let child = command(&args)
                .stdin(input.reopen().unwrap())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let waited = common::watch_cpu_wait(child.id());
            (ids, child, waited, input)
        })
        .collect();
    let mut waited = 0.0;
    for (want, child, cpu_wait, _input) in drips {
        let out = child.wait_with_output().unwrap();
        waited += cpu_wait.join().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(ids(&lines), want, "{stderr}");
    }
    let books = books.lock().unwrap().clone();
    eprintln!(
        "shared: {} answered, {} × 429, over {} windows: {} input and {} output tokens, \
         {:.1} % of the output tokens the full windows allow; the drips waited {waited:.2} s \
         for a CPU",
        books.answered,
        books.refused,
        books.span(),
        books.input,
        books.output,
        100.0 * books.output_used(&QUOTA)
    );
    eprint!("{}", books.windows_report(&QUOTA));
    assert_eq!(books.answered, n);
    assert!(books.refused <= 2, "{books:?}");
    let used = books.output_used(&QUOTA);
    if used < 0.5 && waited > 0.5 {
        return Some(format!(
            "{:.1} % of the output tokens spent; the drips waited {waited:.2} s for a CPU",
            100.0 * used
        ));
    }
    assert!(used >= 0.5, "{books:?}");
    None
}
