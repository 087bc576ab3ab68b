//! The measured run of each host's own limits (issue 45): loopback hosts
//! standing for real ones, each enforcing its own rate (429 with
//! `Retry-After` over it) and its own concurrency (503 over it), URLs
//! spread unevenly over them (one slow host holding a third), checked by
//! `curl` under drip with a rate table (`--key host --key-rates`, a JOBS
//! column): no 429, no 503, each host's requests within its rate by its
//! own stamps, and the batch within 1.15× of the slowest host's floor.
//!
//! `DRIP_HOSTS_URLS=2000` makes it the full run, and `DRIP_HOSTS_OTHERS=1`
//! runs `xargs -P` and GNU parallel over the same URLs too (bench/hosts.sh
//! prints the figures).

use std::time::{Duration, Instant};

use crate::common::hosts::{spread, Host, Limits};
use crate::common::{self, tool_path};

/// One host: its rate (requests a second), its concurrency, how long it
/// takes to serve a request, and its share of the URLs (a weight).
struct Spec {
    rate: u32,
    concurrency: usize,
    service_ms: u64,
    share: usize,
}

/// The hosts: the first, slow one holds a third of the URLs; the third
/// can serve only 10 a second at 2 at once (its concurrency binds before
/// its rate), the fourth is the slowest rate.
const SPECS: [Spec; 5] = [
    Spec {
        rate: 10,
        concurrency: 2,
        service_ms: 100,
        share: 20,
    },
    Spec {
        rate: 50,
        concurrency: 4,
        service_ms: 50,
        share: 15,
    },
    Spec {
        rate: 20,
        concurrency: 2,
        service_ms: 200,
        share: 9,
    },
    Spec {
        rate: 5,
        concurrency: 1,
        service_ms: 100,
        share: 6,
    },
    Spec {
        rate: 100,
        concurrency: 8,
        service_ms: 20,
        share: 10,
    },
];

impl Spec {
    /// What the loopback host enforces: its concurrency, and its rate as
    /// at most `rate + 1` requests in any 0.9 s (a pacer at `rate` sends at
    /// most `rate` in 0.9 s: one request of slack for the jitter in when
    /// curl's requests come).
    fn limits(&self) -> Limits {
        Limits::concurrency(self.concurrency, Duration::from_millis(self.service_ms))
            .with_rate(self.rate as usize + 1, Duration::from_millis(900))
    }

    /// The most requests a second it can serve: its rate, or its
    /// concurrency over its service time if fewer.
    fn capacity(&self, rate: f64, concurrency: usize) -> f64 {
        rate.min(concurrency as f64 * 1000.0 / self.service_ms as f64)
    }
}

/// How many URLs of `total` each host holds (as [`spread`] deals them).
fn counts(total: usize) -> Vec<usize> {
    let sum: usize = SPECS.iter().map(|s| s.share).sum();
    let mut counts: Vec<usize> = SPECS.iter().map(|s| total * s.share / sum).collect();
    counts[0] += total - counts.iter().sum::<usize>();
    counts
}

/// The batch's floor (s): the slowest host's URLs at what it can serve,
/// each host at `rate_of(i)` with `jobs_of(i)` at once.
fn floor(total: usize, rate_of: impl Fn(usize) -> f64, jobs_of: impl Fn(usize) -> usize) -> f64 {
    let counts = counts(total);
    (0..SPECS.len())
        .map(|i| counts[i] as f64 / SPECS[i].capacity(rate_of(i), jobs_of(i)))
        .fold(0.0, f64::max)
}

/// Fresh hosts and `total` URLs spread over them, written to a file in
/// `dir`: the hosts and the file.
fn hosts_and_urls(dir: &std::path::Path, total: usize) -> (Vec<Host>, std::path::PathBuf) {
    let hosts: Vec<Host> = SPECS.iter().map(|s| Host::start(s.limits())).collect();
    let shares: Vec<usize> = SPECS.iter().map(|s| s.share).collect();
    let urls = spread(&hosts, &shares, total);
    let file = dir.join(format!("urls-{}.txt", hosts[0].port));
    let text: String = urls.iter().map(|u| format!("{u}\n")).collect();
    std::fs::write(&file, text).unwrap();
    (hosts, file)
}

/// What the hosts saw in one run: 200s, 429s and 503s.
fn tally(hosts: &[Host]) -> (usize, usize, usize) {
    hosts.iter().fold((0, 0, 0), |(ok, many, unavail), h| {
        let c = h.counts();
        (ok + c.ok, many + c.too_many, unavail + c.unavailable)
    })
}

/// The rate table giving each host its rate and its concurrency as JOBS.
fn table(hosts: &[Host]) -> String {
    hosts
        .iter()
        .zip(&SPECS)
        .map(|(h, s)| format!("{} {}/s {}\n", h.key(), s.rate, s.concurrency))
        .collect()
}

/// Host `h`'s requests by its own stamps: the most in any second, the
/// requests after the first, and the span from the first to the last (s).
fn served_rate(h: &Host) -> (usize, f64, f64) {
    let at = h.counts().served_at;
    let secs: Vec<f64> = at
        .iter()
        .map(|t| t.duration_since(at[0]).as_secs_f64())
        .collect();
    let span = secs.last().copied().unwrap_or(0.0);
    let after_first = secs.len().saturating_sub(1) as f64;
    (common::most_in_window(&secs, 1.0), after_first, span)
}

/// `shell` over the URLs, timed: (seconds, 200s, 429s, 503s).
fn timed(script: &str, hosts: &[Host]) -> (f64, usize, usize, usize) {
    let started = Instant::now();
    let out = common::shell(script).output().unwrap();
    let took = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{script}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, many, unavail) = tally(hosts);
    (took, ok, many, unavail)
}

/// What the hosts saw of a run under drip: no 429 and no 503, every URL
/// served, and each host within its rate by its own stamps and within its
/// concurrency.
fn each_host_within_its_limits(
    hosts: &[Host],
    (ok, many, unavail): (usize, usize, usize),
    total: usize,
) {
    assert_eq!((many, unavail), (0, 0), "no 429, no 503");
    assert_eq!(ok, total);
    for (h, s) in hosts.iter().zip(&SPECS) {
        let (most, after_first, span) = served_rate(h);
        let c = h.counts();
        eprintln!(
            "  host {}/s, {} at once: {} URLs in {span:.2} s ({:.2}/s), at most {most} in a second, at most {} in flight",
            s.rate, s.concurrency, c.ok, after_first / span, c.most_at_once
        );
        // A pacer at RATE with a burst of 1: RATE + 1 in a second at
        // most, and what 50 ms of jitter in when curl's requests come
        // brings closer (RATE × 0.05 more, one at least); over the
        // run, RATE a second, the first and the last request each up
        // to 50 ms off.
        let rate = s.rate as f64;
        let bound = s.rate as usize + 1 + ((rate * 0.05).ceil() as usize).max(1);
        assert!(most <= bound, "{most} in a second over {bound}: {c:?}");
        assert!(
            after_first <= rate * (span + 0.1),
            "{after_first} in {span} s"
        );
        assert!(c.most_at_once <= s.concurrency);
    }
}

/// Two drips sharing the table through a real Redis, each given half the
/// URLs (every other line): each host's rate and concurrency hold across
/// the two (no 429, no 503, by the hosts' own stamps), and the batch ends
/// within 1.15× of the slowest host's floor, as one drip's does.
#[test]
fn two_drips_sharing_the_table_through_redis_keep_each_hosts_limits() {
    if !common::have(&["curl"]) || !common::have_redis() {
        return;
    }
    let _t = common::timing();
    let redis = common::redis_server::RedisServer::start();
    let total = total();
    let floor = floor(total, |i| SPECS[i].rate as f64, |i| SPECS[i].concurrency);
    let dir = tempfile::tempdir().unwrap();
    let curl = tool_path("curl");
    let mut run = 0;
    common::until_judged(3, Duration::from_secs(15 * floor as u64), || {
        run += 1;
        let (hosts, urls) = hosts_and_urls(dir.path(), total);
        let rates = dir.path().join("rates.txt");
        std::fs::write(&rates, table(&hosts)).unwrap();
        let text = std::fs::read_to_string(&urls).unwrap();
        let halves: Vec<std::path::PathBuf> = (0..2)
            .map(|half| {
                let path = dir.path().join(format!("half-{half}.txt"));
                let mine: String = (text.lines().skip(half).step_by(2))
                    .map(|u| format!("{u}\n"))
                    .collect();
                std::fs::write(&path, mine).unwrap();
                path
            })
            .collect();
        let share = redis.share(&format!("hosts-{run}"));
        let drip = |half: &std::path::Path| {
            format!(
                "drip --share '{share}' --key host --key-rates '{}' --key-rate 1/s -j 32 --exec '{}' -sS -o /dev/null -D {{headers}} {{}} < '{}'",
                rates.display(),
                curl.display(),
                half.display()
            )
        };
        let script = format!(
            "{} & a=$!; {} & b=$!; wait $a && wait $b",
            drip(&halves[0]),
            drip(&halves[1])
        );
        let (took, ok, many, unavail) = timed(&script, &hosts);
        eprintln!(
            "two drips through Redis: {total} URLs in {took:.1} s (floor {floor:.1} s, {:.3}×): 200 {ok}, 429 {many}, 503 {unavail}",
            took / floor
        );
        each_host_within_its_limits(&hosts, (ok, many, unavail), total);
        (took > 1.15 * floor).then(|| format!("took {took:.1} s, over 1.15 × {floor:.1} s"))
    });
}

/// The URLs, from `DRIP_HOSTS_URLS` (300 unless given).
fn total() -> usize {
    std::env::var("DRIP_HOSTS_URLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300)
}

/// drip with a rate table, each host's rate and its concurrency as JOBS:
/// no 429 and no 503, each host within its rate by its own stamps, and the
/// batch within 1.15× of the slowest host's floor; one rate for all keys
/// (the slowest, 5/s, with 1 job at once) would take twice as long.
#[test]
fn each_host_at_its_own_limits_finishes_at_the_slowest_hosts_floor() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::timing();
    let total = total();
    let floor = floor(total, |i| SPECS[i].rate as f64, |i| SPECS[i].concurrency);
    let dir = tempfile::tempdir().unwrap();
    let curl = tool_path("curl");
    common::until_judged(3, Duration::from_secs(15 * floor as u64), || {
        let (hosts, urls) = hosts_and_urls(dir.path(), total);
        let rates = dir.path().join("rates.txt");
        std::fs::write(&rates, table(&hosts)).unwrap();
        let script = format!(
            "drip --key host --key-rates '{}' -j 32 --exec '{}' -sS -o /dev/null -D {{headers}} {{}} < '{}'",
            rates.display(),
            curl.display(),
            urls.display()
        );
        let (took, ok, many, unavail) = timed(&script, &hosts);
        eprintln!(
            "drip --key-rates: {total} URLs in {took:.1} s (floor {floor:.1} s, {:.3}×): 200 {ok}, 429 {many}, 503 {unavail}",
            took / floor
        );
        each_host_within_its_limits(&hosts, (ok, many, unavail), total);
        let one = self::floor(total, |_| 5.0, |_| 1);
        eprintln!(
            "one rate for all keys (--key-rate 5/s --key-jobs 1, the slowest host's): floor {one:.1} s, {:.2}× the table's",
            one / floor
        );
        assert!(one >= 1.9 * floor);
        (took > 1.15 * floor).then(|| format!("took {took:.1} s, over 1.15 × {floor:.1} s"))
    });
    if std::env::var("DRIP_HOSTS_OTHERS").is_ok() {
        others(dir.path(), total, &curl);
    }
}

/// Over the same URLs (fresh hosts each): drip with one rate for all keys,
/// the slowest host's (`--key-rate 5/s --key-jobs 1`), and `xargs -P` and
/// GNU parallel, 16 at once, which have no rate per host and meet 429s and
/// 503s. Figures only (bench/hosts.sh).
fn others(dir: &std::path::Path, total: usize, curl: &std::path::Path) {
    let curl = curl.display();
    for (name, run) in [
        (
            "drip --key-rate 5/s --key-jobs 1",
            "drip --key host --key-rate 5/s --key-jobs 1 -j 32 --exec '{curl}' -sS -o /dev/null -D {headers} {} < '{urls}'",
        ),
        (
            "xargs -P 16",
            "xargs -P 16 -n 1 '{curl}' -sS -o /dev/null < '{urls}'",
        ),
        (
            "parallel -j 16",
            "'{parallel}' --will-cite -j 16 '{curl}' -sS -o /dev/null {} < '{urls}'",
        ),
    ] {
        let parallel = gnu_parallel();
        if name.starts_with("parallel") && parallel.is_none() {
            eprintln!("parallel -j 16: no GNU parallel (DRIP_HOSTS_PARALLEL names one), skipped");
            continue;
        }
        let (hosts, urls) = hosts_and_urls(dir, total);
        let script = run
            .replace("{curl}", &curl.to_string())
            .replace("{parallel}", &parallel.unwrap_or_default())
            .replace("{urls}", &urls.display().to_string());
        let (took, ok, many, unavail) = timed(&script, &hosts);
        eprintln!("{name}: {total} URLs in {took:.1} s: 200 {ok}, 429 {many}, 503 {unavail}");
    }
}

/// GNU parallel: `DRIP_HOSTS_PARALLEL`, else `parallel` on PATH if it is
/// GNU's (moreutils has a `parallel` of its own, which takes its arguments
/// otherwise).
fn gnu_parallel() -> Option<String> {
    let name = std::env::var("DRIP_HOSTS_PARALLEL").unwrap_or_else(|_| "parallel".into());
    let out = std::process::Command::new(&name)
        .arg("--version")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .starts_with("GNU parallel")
        .then_some(name)
}
