//! A loopback server that behaves like an LLM chat API: it enforces
//! requests, input tokens and output tokens per fixed window (from its
//! start), or as buckets refilled continuously (as OpenAI and Anthropic
//! meter), answers 429 with `Retry-After` when a request would pass one,
//! counts a request's prompt tokens as its body's bytes ÷ 4 (rounded up),
//! draws each completion's length at random up to the request's
//! `max_tokens` (most far below it), and reports `usage` in its JSON
//! answer, one line. [`api_server`] speaks a provider's API as well: its
//! path, its rate-limit headers (what is left of each window and when it
//! ends, or of each bucket and when it is full again; Anthropic's token
//! remainders rounded to the nearest thousand, as Anthropic gives them)
//! and its `usage` fields, OpenAI's (input and output tokens counted
//! together) or Anthropic's (apart).

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
    /// Prompt and completion tokens together per window, if metered so.
    pub tokens: Option<u64>,
    /// Whether each quota is a bucket holding a window's amount when
    /// full, refilled continuously at that amount a window, rather than
    /// a fixed window from the server's start.
    pub refills: bool,
}

/// The API a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Any path, no rate-limit headers, OpenAI's `usage` fields.
    Plain,
    /// OpenAI's chat completions: `POST /v1/chat/completions`, the
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers
    /// (the reset a Go duration), `usage.prompt_tokens` and
    /// `usage.completion_tokens`.
    OpenAi,
    /// Anthropic's messages: `POST /v1/messages`, the
    /// `anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,reset}`
    /// headers (the reset an RFC 3339 time; `tokens` the tighter of input
    /// and output), `usage.input_tokens` and `usage.output_tokens`.
    Anthropic,
}

impl Api {
    /// The path its requests go to (any, for [`Api::Plain`]).
    fn path(self) -> Option<&'static str> {
        match self {
            Api::Plain => None,
            Api::OpenAi => Some("/v1/chat/completions"),
            Api::Anthropic => Some("/v1/messages"),
        }
    }
}

/// What the server saw.
#[derive(Debug, Default, Clone)]
pub struct Books {
    /// Requests answered (200), refused (429), sent to a path the API
    /// has not (404).
    pub answered: u64,
    pub refused: u64,
    pub not_found: u64,
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
        self.used(self.output, quota.output, quota)
    }

    /// The same of the prompt tokens.
    pub fn input_used(&self, quota: &Quota) -> f64 {
        self.used(self.input, quota.input, quota)
    }

    /// The same of the prompt and completion tokens together, of
    /// `quota.tokens`.
    pub fn tokens_used(&self, quota: &Quota) -> f64 {
        let most = quota.tokens.expect("a quota of tokens together");
        self.used(self.input + self.output, most, quota)
    }

    /// Of `per_window` a window, from the first answer to the last (pro
    /// rata), the share `spent` is.
    fn used(&self, spent: u64, per_window: u64, quota: &Quota) -> f64 {
        let (Some(first), Some(last)) = (self.first, self.last) else {
            return 0.0;
        };
        let windows = (last - first).as_secs_f64() / quota.window.as_secs_f64();
        spent as f64 / (per_window as f64 * windows.max(1e-9))
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
            let (requests, input, output) = self.windows.get(&n).copied().unwrap_or_default();
            out += &format!(
                "  window {n}: {:.2} of it counted, {requests} requests, {output} output tokens ({:.1} % of the quota)",
                covered,
                100.0 * output as f64 / quota.output as f64
            );
            if let Some(tokens) = quota.tokens {
                out += &format!(
                    ", {} tokens in all ({:.1} % of the quota)",
                    input + output,
                    100.0 * (input + output) as f64 / tokens as f64
                );
            }
            out += "\n";
        }
        out
    }
}

/// Start the server allowing `quota`, completions drawn from `seed`;
/// its port and its books.
pub fn llm_server(quota: Quota, seed: u64) -> (u16, Arc<Mutex<Books>>) {
    api_server(Api::Plain, quota, seed)
}

/// Start the server speaking `api`, allowing `quota`, completions drawn
/// from `seed`; its port and its books.
pub fn api_server(api: Api, quota: Quota, seed: u64) -> (u16, Arc<Mutex<Books>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let books: Arc<Mutex<Books>> = Arc::default();
    let state = Arc::new(Mutex::new(Meters {
        window: u64::MAX,
        ..Meters::default()
    }));
    let start = Instant::now();
    books.lock().unwrap().start = Some(start);
    let kept = Arc::clone(&books);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { continue };
            let (books, state) = (Arc::clone(&kept), Arc::clone(&state));
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed ^ (n as u64).wrapping_mul(0x9E37));
                let _ = serve(stream, (api, quota), start, &mut rng, (&books, &state));
            });
        }
    });
    (port, books)
}

/// What the quotas hold spent: of the window (its number) or of the
/// buckets (when last refilled), requests, input, output tokens and both
/// together.
#[derive(Debug, Clone, Copy, Default)]
struct Meters {
    window: u64,
    at: Duration,
    used: [f64; 4],
}

impl Meters {
    /// Bring them to `elapsed` from the server's start: a new window
    /// spends nothing yet; a bucket gets back its amount a window, pro
    /// rata.
    fn advance(&mut self, quota: &Quota, elapsed: Duration) {
        let this = (elapsed.as_nanos() / quota.window.as_nanos()) as u64;
        if quota.refills {
            let back = (elapsed.saturating_sub(self.at)).as_secs_f64() / quota.window.as_secs_f64();
            for (used, cap) in self.used.iter_mut().zip(caps(quota)) {
                *used = (*used - back * cap as f64).max(0.0);
            }
            self.at = elapsed;
        } else if self.window != this {
            self.used = [0.0; 4];
        }
        self.window = this;
    }

    /// Whether `costs` fit every quota.
    fn fit(&self, quota: &Quota, costs: [u64; 4]) -> bool {
        (0..4).all(|i| self.used[i] + costs[i] as f64 <= caps(quota)[i] as f64)
    }

    /// Each quota's limit, what remains, and the time to its reset: the
    /// window's end, or when the bucket is full again.
    fn announce(&self, quota: &Quota, elapsed: Duration) -> [(u64, u64, Duration); 4] {
        let end = quota.window.as_nanos() * u128::from(self.window + 1);
        let window_end = Duration::from_nanos((end - elapsed.as_nanos()) as u64);
        let caps = caps(quota);
        std::array::from_fn(|i| {
            let remaining = (caps[i] as f64 - self.used[i]).max(0.0).floor() as u64;
            let reset = if quota.refills {
                quota.window.mul_f64(self.used[i] / caps[i].max(1) as f64)
            } else {
                window_end
            };
            (caps[i], remaining, reset)
        })
    }
}

/// The quotas' limits: requests, input, output tokens, both together.
fn caps(quota: &Quota) -> [u64; 4] {
    [
        quota.requests,
        quota.input,
        quota.output,
        quota
            .tokens
            .unwrap_or(quota.input.saturating_add(quota.output)),
    ]
}

/// Answer one request on `stream`.
fn serve(
    mut stream: std::net::TcpStream,
    (api, quota): (Api, Quota),
    start: Instant,
    rng: &mut fastrand::Rng,
    (books, state): (&Mutex<Books>, &Mutex<Meters>),
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split(' ').nth(1).unwrap_or("").to_string();
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
    if api.path().is_some_and(|p| p != path) {
        books.lock().unwrap().not_found += 1;
        return write!(
            stream,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
    }
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
    let (admitted, said) = {
        let mut m = state.lock().unwrap();
        m.advance(&quota, elapsed);
        let costs = [1, prompt, completion, prompt + completion];
        let fits = m.fit(&quota, costs);
        if fits {
            for (used, cost) in m.used.iter_mut().zip(costs) {
                *used += cost as f64;
            }
        }
        (fits, m.announce(&quota, elapsed))
    };
    // A refused request waits until every quota has room for it: at a
    // window's end, or (of a bucket) its reset at the latest.
    let left = said.iter().map(|s| s.2).max().unwrap_or_default();
    let announced = rate_limit_headers(api, said);
    let mut b = books.lock().unwrap();
    if !admitted {
        b.refused += 1;
        drop(b);
        let wait = left.as_secs_f64().ceil().max(1.0) as u64;
        let text = match api {
            Api::Anthropic => "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}",
            _ => "{\"error\":{\"type\":\"rate_limit_exceeded\"}}",
        };
        return write!(
            stream,
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {wait}\r\n{announced}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
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
    let said = "x".repeat(completion.min(64) as usize);
    let text = match api {
        Api::Anthropic => format!(
            "{{\"id\":{id},\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"{said}\"}}],\"stop_reason\":\"end_turn\",\"usage\":{{\"input_tokens\":{prompt},\"output_tokens\":{completion}}}}}"
        ),
        _ => format!(
            "{{\"id\":{id},\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":\"{said}\"}}}}],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}",
            prompt + completion
        ),
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\n{announced}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
}

/// The rate-limit headers `api` sends (each line ending in CRLF) when its
/// requests, input tokens, output tokens and both together have `said`
/// (each one's limit, what remains, and the time to its reset).
fn rate_limit_headers(api: Api, said: [(u64, u64, Duration); 4]) -> String {
    let [requests, input, output, both] = said;
    match api {
        Api::Plain => String::new(),
        Api::OpenAi => {
            let field = |family: &str, (limit, remaining, reset): (u64, u64, Duration)| {
                format!(
                    "x-ratelimit-limit-{family}: {limit}\r\nx-ratelimit-remaining-{family}: {remaining}\r\nx-ratelimit-reset-{family}: {}\r\n",
                    go_duration(reset)
                )
            };
            field("requests", requests) + &field("tokens", both)
        }
        Api::Anthropic => {
            let field = |family: &str,
                         (limit, remaining, reset): (u64, u64, Duration),
                         rounded: bool| {
                let at = jiff::Timestamp::try_from(std::time::SystemTime::now() + reset).unwrap();
                // Token remainders to the nearest thousand.
                let remaining = if rounded {
                    (remaining + 500) / 1000 * 1000
                } else {
                    remaining
                };
                format!(
                    "anthropic-ratelimit-{family}-limit: {limit}\r\nanthropic-ratelimit-{family}-remaining: {remaining}\r\nanthropic-ratelimit-{family}-reset: {at}\r\n"
                )
            };
            let tighter = if input.1 <= output.1 { input } else { output };
            field("requests", requests, false)
                + &field("input-tokens", input, true)
                + &field("output-tokens", output, true)
                + &field("tokens", tighter, true)
        }
    }
}

/// A duration as Go writes one (`1.25s`), as OpenAI's resets are.
fn go_duration(d: Duration) -> String {
    let s = format!("{:.9}", d.as_secs_f64());
    format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
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
