//! Token-metered API batches: a loopback server that behaves like an LLM
//! chat API (`common::llm`: requests, input and output tokens per window,
//! 429 with `Retry-After` past one) and drip running `curl` per request
//! with the request, input and output token budgets, each request's
//! tokens estimated from it (bytes ÷ 4, `max_tokens`) and settled from
//! the `usage` the server reports.

mod common;

use std::time::Duration;

use common::llm::{chat_requests, llm_server, Books, Quota};
use common::{command, curl_present, temp_file};

/// The server's quota: a window of 5 s for 500 requests, 40,000 prompt
/// tokens and 40,000 completion tokens.
const QUOTA: Quota = Quota {
    window: Duration::from_secs(5),
    requests: 500,
    input: 40_000,
    output: 40_000,
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
    let joblog = joblog.to_str().unwrap();
    // Each budget's burst plus a window's worth of its rate is the quota:
    // no window of the server's can hold more than it allows.
    let mut args = vec![
        "-q",
        "--rate",
        "95/s:25",
        "--cost",
        "in=bytes/4+1",
        "--cost",
        "out=max_tokens",
        "--cost-rate",
        "in=7000/s:5000",
        "--cost-rate",
        "out=7000/s:5000",
    ];
    if settle {
        args.extend([
            "--settle",
            "in=usage.prompt_tokens",
            "--settle",
            "out=usage.completion_tokens",
        ]);
    }
    args.extend(["-k", "--resume", joblog, "-j", "16", "--retries", "5"]);
    args.extend(["--record-on-stdin", "--exec", "curl", "-sS", "-f"]);
    args.extend(["-D", "{headers}", "-H", "content-type: application/json"]);
    args.extend(["--data-binary", "@-", &url]);
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
    if let Ok(dir) = std::env::var("DRIP_LLM_KEEP") {
        std::fs::copy(joblog, format!("{dir}/joblog-{settle}")).unwrap();
    }
    (books, lines, stderr)
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
    if !curl_present() {
        eprintln!("skipped: no curl");
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
