//! The least a paced writer can cost: sleep to each record's deadline on an
//! absolute schedule, then write the record, nothing else. The benchmark
//! (`bench/bench.py`) runs it beside drip as the CPU floor of one timed
//! wake-up plus one write per record on the machine at hand.
//!
//! Usage: `bare_pacer RATE < input > output` (RATE in records per second).

use std::fs::File;
use std::io::{BufRead, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let rate: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .filter(|r: &f64| *r > 0.0)
        .expect("usage: bare_pacer RATE < input > output");
    let period = Duration::from_secs_f64(1.0 / rate);
    // Unbuffered, as drip writes: one write(2) per record.
    let mut out = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let mut input = std::io::stdin().lock();
    let mut record = Vec::new();
    let start = Instant::now();
    for k in 0u32.. {
        record.clear();
        if input.read_until(b'\n', &mut record)? == 0 {
            return Ok(());
        }
        let due = start + period * k;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        out.write_all(&record)?;
    }
    Ok(())
}
