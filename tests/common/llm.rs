//! A loopback server that behaves like an LLM chat API: it enforces
//! requests, input tokens and output tokens per fixed window (from its
//! start), answers 429 with `Retry-After` when a request would pass one,
//! counts a request's prompt tokens as its body's bytes ÷ 4 (rounded up),
//! draws each completion's length at random up to the request's
//! `max_tokens` (most far below it), and reports `usage` in its JSON
//! answer, one line.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server allows in each window.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    /// The window's length.
    pub window: Duration,
    /// Requests answered per window.
    pub requests: u64,
    /// Prompt tokens per window.
    pub input: u64,
    /// Completion tokens per window.
    pub output: u64,
}

/// What the server saw.
#[derive(Debug, Default, Clone)]
pub struct Books {
    /// Requests answered (200), refused (429).
    pub answered: u64,
    pub refused: u64,
    /// Tokens answered for, in all.
    pub input: u64,
    pub output: u64,
    /// Each window's requests, input and output tokens answered, by the
    /// window's number from the server's start.
    pub windows: std::collections::BTreeMap<u64, (u64, u64, u64)>,
    /// Each answered request's `id` field, in the order answered.
    pub ids: Vec<u64>,
    /// When the first and the last request were answered.
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    /// When the server started: its windows count from here.
    pub start: Option<Instant>,
}

impl Books {
    /// The windows from the first answered to the last, all counted.
    pub fn span(&self) -> u64 {
        match (self.windows.keys().next(), self.windows.keys().last()) {
            (Some(a), Some(b)) => b - a + 1,
            _ => 0,
        }
    }

    /// Of the output tokens the windows allow from the first answer to
    /// the last (the quota a window, pro rata), the share answered for.
    pub fn output_used(&self, quota: &Quota) -> f64 {
        let (Some(first), Some(last)) = (self.first, self.last) else {
            return 0.0;
        };
        let windows = (last - first).as_secs_f64() / quota.window.as_secs_f64();
        self.output as f64 / (quota.output as f64 * windows.max(1e-9))
    }

    /// Each window from the first answered to the last, one line each:
    /// its number, the share of it within the first answer and the last,
    /// its requests and output tokens, and their share of the quota.
    pub fn windows_report(&self, quota: &Quota) -> String {
        let (Some(start), Some(first), Some(last)) = (self.start, self.first, self.last) else {
            return String::new();
        };
        let w = quota.window.as_secs_f64();
        let (a, b) = (
            (first - start).as_secs_f64() / w,
            (last - start).as_secs_f64() / w,
        );
        let mut out = String::new();
        for n in a.floor() as u64..=b.floor() as u64 {
            let covered = (b.min(n as f64 + 1.0) - a.max(n as f64)).max(0.0);
            let (requests, _, output) = self.windows.get(&n).copied().unwrap_or_default();
            out += &format!(
                "  window {n}: {:.2} of it counted, {requests} requests, {output} output tokens ({:.1} % of the quota)\n",
                covered,
                100.0 * output as f64 / quota.output as f64
            );
        }
        out
    }
}

/// Start the server allowing `quota`, completions drawn from `seed`;
/// its port and its books.
pub fn llm_server(quota: Quota, seed: u64) -> (u16, Arc<Mutex<Books>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let books: Arc<Mutex<Books>> = Arc::default();
    let state = Arc::new(Mutex::new((u64::MAX, 0u64, 0u64, 0u64)));
    let start = Instant::now();
    books.lock().unwrap().start = Some(start);
    let kept = Arc::clone(&books);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { continue };
            let (books, state) = (Arc::clone(&kept), Arc::clone(&state));
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed ^ (n as u64).wrapping_mul(0x9E37));
                let _ = serve(stream, quota, start, &mut rng, (&books, &state));
            });
        }
    });
    (port, books)
}

/// A window's number, requests, input and output tokens.
type Window = (u64, u64, u64, u64);

/// Answer one request on `stream`.
fn serve(
    mut stream: std::net::TcpStream,
    quota: Quota,
    start: Instant,
    rng: &mut fastrand::Rng,
    (books, state): (&Mutex<Books>, &Mutex<Window>),
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let max_tokens = request["max_tokens"].as_u64().unwrap_or(16).max(1);
    let id = request["id"].as_u64().unwrap_or(0);
    let prompt = (body.len() as u64).div_ceil(4);
    // Most completions are short: max_tokens × u³ (a quarter of it on
    // average), at least 1.
    let u = rng.f64();
    let completion = ((max_tokens as f64 * u * u * u).ceil() as u64).clamp(1, max_tokens);
    let elapsed = start.elapsed();
    let this = (elapsed.as_nanos() / quota.window.as_nanos()) as u64;
    let admitted = {
        let mut w = state.lock().unwrap();
        if w.0 != this {
            *w = (this, 0, 0, 0);
        }
        let fits =
            w.1 < quota.requests && w.2 + prompt <= quota.input && w.3 + completion <= quota.output;
        if fits {
            w.1 += 1;
            w.2 += prompt;
            w.3 += completion;
        }
        fits
    };
    let mut b = books.lock().unwrap();
    if !admitted {
        b.refused += 1;
        drop(b);
        let end = quota.window.as_nanos() * u128::from(this + 1);
        let wait = (end - elapsed.as_nanos()).div_ceil(1_000_000_000).max(1);
        let text = "{\"error\":{\"type\":\"rate_limit_exceeded\"}}";
        return write!(
            stream,
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {wait}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
    }
    b.answered += 1;
    b.input += prompt;
    b.output += completion;
    let w = b.windows.entry(this).or_default();
    w.0 += 1;
    w.1 += prompt;
    w.2 += completion;
    b.ids.push(id);
    let now = Instant::now();
    b.first.get_or_insert(now);
    b.last = Some(now);
    drop(b);
    let text = format!(
        "{{\"id\":{id},\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":\"{}\"}}}}],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}",
        "x".repeat(completion.min(64) as usize),
        prompt + completion
    );
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
}

/// `n` chat requests, one JSON line each, numbered by `id` from 1, each
/// asking for up to `max_tokens`.
pub fn chat_requests(n: u64, max_tokens: u64) -> String {
    (1..=n)
        .map(|id| {
            format!(
                "{{\"id\":{id},\"model\":\"m\",\"max_tokens\":{max_tokens},\"messages\":[{{\"role\":\"user\",\"content\":\"Say something about the number {id}.\"}}]}}\n"
            )
        })
        .collect()
}
