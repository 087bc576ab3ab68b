//! Property tests on virtual time: the splitter, bucket and pacer driven
//! together over random inputs, chunkings, capacities, bursts, policies,
//! arrival patterns and consumer stalls. Whatever happens, written records
//! keep their input order, stdout plus dead letter is the input, and the
//! counts add up.

use bytes::Bytes;
use drip::testing::{Bucket, Counts, Fate, Offered, Overflow, Pacer, Rate, Segment, Splitter};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Debug, Clone)]
struct Case {
    records: Vec<Vec<u8>>,
    delimiter: u8,
    unterminated_last: bool,
    chunks: Vec<usize>,
    gaps_ms: Vec<u64>,
    capacity: usize,
    capacity_bytes: Option<usize>,
    burst: u64,
    per_second: u128,
    policy: Overflow,
    max_wait_ms: Option<u64>,
    stalls: Vec<(u64, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..150),
            prop_oneof![Just(b'\n'), Just(0u8), any::<u8>()],
            any::<bool>(),
            prop::collection::vec(1usize..300, 1..40),
            prop::collection::vec(0u64..80, 1..40),
        ),
        (
            1usize..30,
            prop::option::of(40usize..400),
            1u64..5,
            prop_oneof![Just(50u128), Just(200), Just(1000), Just(7)],
            prop_oneof![
                Just(Overflow::Block),
                Just(Overflow::DropNewest),
                Just(Overflow::DropOldest),
                Just(Overflow::Fail)
            ],
            prop::option::of(5u64..300),
            prop::collection::vec((0u64..1500, 1u64..400), 0..4),
        ),
    )
        .prop_map(
            |((records, delimiter, unterminated_last, chunks, gaps_ms), rest)| {
                let (capacity, capacity_bytes, burst, per_second, policy, max_wait_ms, stalls) =
                    rest;
                // Record contents cannot hold the delimiter.
                let records = records
                    .into_iter()
                    .map(|r| r.into_iter().filter(|&b| b != delimiter).collect())
                    .collect();
                Case {
                    records,
                    delimiter,
                    unterminated_last,
                    chunks,
                    gaps_ms,
                    capacity,
                    capacity_bytes,
                    burst,
                    per_second,
                    policy,
                    max_wait_ms,
                    stalls,
                }
            },
        )
}

/// The input bytes and the records drip should see in them.
fn input(case: &Case) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    for (i, r) in case.records.iter().enumerate() {
        let mut rec = r.clone();
        let last = i + 1 == case.records.len();
        if !(last && case.unterminated_last && !r.is_empty()) {
            rec.push(case.delimiter);
        }
        bytes.extend_from_slice(&rec);
        expected.push(rec);
    }
    (bytes, expected)
}

/// Split `bytes` into segments arriving at virtual times.
fn arrivals(case: &Case, bytes: &[u8]) -> Vec<(u64, Segment)> {
    let mut splitter = Splitter::new(case.delimiter, usize::MAX, None);
    let mut out = Vec::new();
    let (mut pos, mut t, mut i) = (0, 0, 0);
    while pos < bytes.len() {
        let n = case.chunks[i % case.chunks.len()].min(bytes.len() - pos);
        t += case.gaps_ms[i % case.gaps_ms.len()] * MS;
        let space = splitter.space();
        space[..n].copy_from_slice(&bytes[pos..pos + n]);
        let (seg, err) = splitter.filled(n, "case");
        assert!(err.is_none());
        if let Some(seg) = seg {
            out.push((t, seg));
        }
        pos += n;
        i += 1;
    }
    if let Some(seg) = splitter.finish(false, "case").unwrap() {
        out.push((t, seg));
    }
    out
}

struct Outcome {
    written: Vec<(u64, Vec<u8>)>,
    dead: Vec<(Vec<u8>, Fate)>,
    counts: Counts,
}

fn records_of(seg: &Segment) -> Vec<Vec<u8>> {
    seg.records().map(<[u8]>::to_vec).collect()
}

/// Run the bucket and pacer in 1 ms steps, as drip's threads do.
fn simulate(case: &Case, arrivals: Vec<(u64, Segment)>) -> Outcome {
    let rate = Rate::Limited {
        count: case.per_second,
        period_ns: 1_000_000_000,
    };
    let mut pacer = Pacer::new(rate, case.burst, 2 * MS);
    let mut bucket = Bucket::new(case.capacity, case.capacity_bytes, case.policy);
    let mut counts = Counts::default();
    let mut dead = Vec::new();
    let mut written = Vec::new();
    let mut arrivals = arrivals.into_iter().peekable();
    let mut pending: Option<Segment> = None; // the reader's rest under block
    let mut stopped = false;
    let mut leftover = None;
    let mut now = 0;
    loop {
        // The reader: offer what has arrived, unless held back.
        loop {
            let seg = match pending.take() {
                Some(seg) => seg,
                None => match arrivals.peek() {
                    Some((t, _)) if *t <= now && !stopped => {
                        let seg = arrivals.next().unwrap().1;
                        counts.read += seg.len() as u64;
                        seg
                    }
                    _ => break,
                },
            };
            if let Some(ms) = case.max_wait_ms {
                bucket.expire_before(now.saturating_sub(ms * MS), &mut |s, f| {
                    counts.add(f, s.len() as u64);
                    dead.extend(records_of(&s).into_iter().map(|r| (r, f)));
                });
            }
            let mut dispose = |s: Segment, f: Fate| {
                counts.add(f, s.len() as u64);
                dead.extend(records_of(&s).into_iter().map(|r| (r, f)));
            };
            match bucket.offer(seg, now, &mut dispose) {
                Offered::Done => {}
                Offered::Wait(rest) => {
                    pending = Some(rest);
                    break;
                }
                Offered::Overflowed(rest) => {
                    leftover = Some(rest);
                    stopped = true;
                    break;
                }
            }
            assert!(bucket.len() <= case.capacity);
            assert!(bucket.bytes() <= case.capacity_bytes.unwrap_or(usize::MAX));
        }
        if stopped {
            bucket.drain(Fate::Undelivered, &mut |s, f| {
                counts.add(f, s.len() as u64);
                dead.extend(records_of(&s).into_iter().map(|r| (r, f)));
            });
            // Then what was read but never queued, as drip does.
            if let Some(rest) = leftover.take() {
                counts.add(Fate::Undelivered, rest.len() as u64);
                dead.extend(
                    records_of(&rest)
                        .into_iter()
                        .map(|r| (r, Fate::Undelivered)),
                );
            }
            break;
        }
        // The writer: expire, then release what is due unless stalled.
        if let Some(ms) = case.max_wait_ms {
            bucket.expire_before(now.saturating_sub(ms * MS), &mut |s, f| {
                counts.add(f, s.len() as u64);
                dead.extend(records_of(&s).into_iter().map(|r| (r, f)));
            });
        }
        let stalled = case
            .stalls
            .iter()
            .any(|&(start, len)| (start * MS..(start + len) * MS).contains(&now));
        if !stalled {
            let n = pacer.release(now, bucket.len() as u64);
            let mut out = Vec::new();
            bucket.take(n as usize, &mut out);
            for seg in &out {
                counts.written += seg.len() as u64;
                written.extend(records_of(seg).into_iter().map(|r| (now, r)));
            }
        }
        if pending.is_none() && arrivals.peek().is_none() && bucket.is_empty() {
            break;
        }
        now += MS;
    }
    Outcome {
        written,
        dead,
        counts,
    }
}

fn is_subsequence(needle: &[Vec<u8>], hay: &[Vec<u8>]) -> bool {
    let mut it = hay.iter();
    needle.iter().all(|n| it.any(|h| h == n))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn splitting_is_byte_exact(case in case()) {
        let (bytes, expected) = input(&case);
        let got: Vec<Vec<u8>> = arrivals(&case, &bytes)
            .iter()
            .flat_map(|(_, s)| records_of(s))
            .collect();
        prop_assert_eq!(got.concat(), bytes);
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn nothing_is_lost_and_order_is_kept(case in case()) {
        let (bytes, expected) = input(&case);
        let out = simulate(&case, arrivals(&case, &bytes));
        let c = out.counts;
        prop_assert_eq!(c.read, c.settled(), "counts do not add up: {:?}", c);
        let written: Vec<Vec<u8>> = out.written.iter().map(|(_, r)| r.clone()).collect();
        let dead: Vec<Vec<u8>> = out.dead.iter().map(|(r, _)| r.clone()).collect();
        prop_assert_eq!(written.len() as u64, c.written);
        prop_assert_eq!(dead.len() as u64, c.settled() - c.written);
        // Written records keep their input order.
        prop_assert!(is_subsequence(&written, &expected));
        // Without expiry the dead letter is in input order too.
        if case.max_wait_ms.is_none() {
            prop_assert!(is_subsequence(&dead, &expected));
        }
        // Stdout plus dead letter is exactly what was read.
        let mut all = [written, dead].concat();
        all.sort();
        let mut read = expected[..c.read as usize].to_vec();
        read.sort();
        prop_assert_eq!(all, read);
        if case.policy == Overflow::Block && case.max_wait_ms.is_none() {
            prop_assert_eq!(c.written, expected.len() as u64);
        }
    }

    #[test]
    fn no_window_holds_more_than_burst_plus_rate(case in case()) {
        let (bytes, _) = input(&case);
        let out = simulate(&case, arrivals(&case, &bytes));
        let times: Vec<u64> = out.written.iter().map(|(t, _)| *t).collect();
        let window = 100 * MS;
        // Departures are at most 1 ms (one step) later than scheduled.
        let bound = case.burst as f64 + case.per_second as f64 * (window + MS) as f64 / 1e9;
        for (i, &start) in times.iter().enumerate() {
            let n = times[i..].iter().take_while(|&&t| t < start + window).count();
            prop_assert!(n as f64 <= bound, "{} records in 100 ms, bound {}", n, bound);
        }
    }
}

#[test]
fn segments_from_shared_buffers_stay_intact() {
    // Sanity for the simulation's plumbing: a split segment keeps its bytes.
    let mut seg = Segment::new(Bytes::from_static(b"a\nb\nc\n"), b'\n');
    let front = seg.split_front(1);
    assert_eq!(front.as_bytes(), b"a\n");
    assert_eq!(seg.as_bytes(), b"b\nc\n");
}
