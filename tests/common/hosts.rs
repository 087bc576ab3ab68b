//! Loopback HTTP servers standing for hosts, each enforcing limits of its
//! own as a real service would: at most so many requests in flight (one
//! more is answered 503 at once) and, when given, at most so many
//! requests a window (one more is answered 429 with `Retry-After`). Each
//! listens on a port of its own, so `--key host` (which keeps a port that
//! is not the scheme's default) tells them apart, and counts what it saw.
//! Built on [`super::http_server`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{http_server, Answer};

/// What one host allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests in flight at most; one more gets 503.
    pub concurrency: usize,
    /// At most this many requests answered 200 in any window of this
    /// length; one more gets 429 with `Retry-After`. `None`: no rate.
    pub rate: Option<(usize, Duration)>,
    /// How long a request it serves takes.
    pub service: Duration,
}

impl Limits {
    /// At most `concurrency` requests in flight, each served in `service`.
    pub fn concurrency(concurrency: usize, service: Duration) -> Limits {
        Limits {
            concurrency,
            rate: None,
            service,
        }
    }

    /// The same, and at most `n` requests served in any window of `per`.
    pub fn with_rate(self, n: usize, per: Duration) -> Limits {
        Limits {
            rate: Some((n, per)),
            ..self
        }
    }
}

/// What a host saw.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Requests in all.
    pub requests: usize,
    /// Answered 200.
    pub ok: usize,
    /// Answered 429 (over the rate).
    pub too_many: usize,
    /// Answered 503 (over the concurrency).
    pub unavailable: usize,
    /// Requests in flight now.
    pub in_flight: usize,
    /// The most requests in flight at once, those refused counted too
    /// (each as it came).
    pub most_at_once: usize,
    /// When each request answered 200 came, in order.
    pub served_at: Vec<Instant>,
    /// The requests' paths, in the order they came.
    pub paths: Vec<String>,
}

/// A host: its port and what it saw.
#[derive(Debug, Clone)]
pub struct Host {
    pub port: u16,
    pub limits: Limits,
    counts: Arc<Mutex<Counts>>,
}

impl Host {
    /// A host enforcing `limits` on a port of its own, from now until the
    /// test process ends.
    pub fn start(limits: Limits) -> Host {
        let counts: Arc<Mutex<Counts>> = Arc::default();
        let seen = Arc::clone(&counts);
        let window: Arc<Mutex<VecDeque<Instant>>> = Arc::default();
        let port = http_server(move |_, path| {
            let now = Instant::now();
            {
                let mut c = seen.lock().unwrap();
                c.requests += 1;
                c.paths.push(path.to_string());
                c.in_flight += 1;
                c.most_at_once = c.most_at_once.max(c.in_flight);
                if c.in_flight > limits.concurrency {
                    c.in_flight -= 1;
                    c.unavailable += 1;
                    return Answer::status(503);
                }
            }
            if let Some(wait) = over_rate(&mut window.lock().unwrap(), limits.rate, now) {
                let mut c = seen.lock().unwrap();
                c.in_flight -= 1;
                c.too_many += 1;
                let secs = wait.as_secs_f64().ceil().max(1.0);
                return Answer {
                    status: 429,
                    headers: format!("Retry-After: {secs}\r\n"),
                    body: "",
                };
            }
            std::thread::sleep(limits.service);
            let mut c = seen.lock().unwrap();
            c.in_flight -= 1;
            c.ok += 1;
            c.served_at.push(now);
            Answer::status(200)
        });
        Host {
            port,
            limits,
            counts,
        }
    }

    /// Several hosts, one for each of `limits`.
    pub fn start_all(limits: &[Limits]) -> Vec<Host> {
        limits.iter().map(|l| Host::start(*l)).collect()
    }

    /// The URL of `path` (starting with `/`) on this host.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// This host's key under `--key host`.
    pub fn key(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What it saw so far.
    pub fn counts(&self) -> Counts {
        self.counts.lock().unwrap().clone()
    }
}

/// Whether a request at `now` is over `rate` given the requests served
/// within its window (`served`, kept here): how long until one more
/// would fit; if not, it is counted as served.
fn over_rate(
    served: &mut VecDeque<Instant>,
    rate: Option<(usize, Duration)>,
    now: Instant,
) -> Option<Duration> {
    let (n, per) = rate?;
    while served
        .front()
        .is_some_and(|&t| now.duration_since(t) >= per)
    {
        served.pop_front();
    }
    if served.len() >= n {
        return Some(per - now.duration_since(served[0]));
    }
    served.push_back(now);
    None
}

/// `urls` spread over `hosts` as `shares` says (a weight each), in an
/// interleaved order: `total` URLs, host i's share of them
/// `total × shares[i] / Σ shares`, each path `/PLACE` numbered from 1.
pub fn spread(hosts: &[Host], shares: &[usize], total: usize) -> Vec<String> {
    let sum: usize = shares.iter().sum();
    let mut counts: Vec<usize> = shares.iter().map(|s| total * s / sum).collect();
    counts[0] += total - counts.iter().sum::<usize>();
    let mut left = counts.clone();
    let mut urls = Vec::with_capacity(total);
    while urls.len() < total {
        for (h, host) in hosts.iter().enumerate() {
            if left[h] > 0 {
                left[h] -= 1;
                urls.push(host.url(&format!("/{}", urls.len() + 1)));
            }
        }
    }
    urls
}
