//! Limits per key shared by two drips, on virtual time: two keyed queues
//! whose key schedules are leases of slots reserved, with a round trip's
//! delay, in one shared book of per-key GCRAs (the state file's
//! arithmetic), as the keeper does. Checks the per-key bound across both,
//! that a key without a slot never holds back another, and that a key's
//! records keep their order.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use drip::bucket::{Overflow, Segment};
use drip::key::{parse_key, KeySpec};
use drip::keyed::{KeyConfig, KeySchedule, Keyed};
use drip::ledger::Ledger;
use drip::rate::parse_rate;
use drip::schedule::Limits;
use drip::shared::gcra::Step;
use drip::shared::keys::KeyBook;

const MS: u64 = 1_000_000;
/// 5/s, burst 1.
const STEP: Step = Step {
    interval: 200_000_000,
    tolerance: 0,
};
/// The round trip to the shared state.
const RTT: u64 = 3 * MS;

/// One drip's leases, as its keeper fills them.
#[derive(Debug, Default)]
struct Leases {
    slots: HashMap<Vec<u8>, VecDeque<u64>>,
    /// Keys waiting for slots, with their slot numbers.
    waiting: HashMap<Vec<u8>, u32>,
    arrived: Vec<(u64, u32)>,
}

#[derive(Debug, Clone)]
struct Fake(Arc<Mutex<Leases>>);

impl KeySchedule for Fake {
    fn allows(&mut self, now: u64, _: u32, key: &[u8]) -> bool {
        let l = self.0.lock().unwrap();
        l.slots
            .get(key)
            .and_then(|q| q.front())
            .is_some_and(|&t| t <= now)
    }
    fn commit(&mut self, _: u64, _: u32, key: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .slots
            .get_mut(key)
            .unwrap()
            .pop_front();
    }
    fn next_due(&mut self, _: u64, s: u32, key: &[u8], _: u32) -> Option<u64> {
        let mut l = self.0.lock().unwrap();
        if let Some(&t) = l.slots.get(key).and_then(|q| q.front()) {
            return Some(t);
        }
        l.waiting.insert(key.to_vec(), s);
        None
    }
    fn arrived(&mut self) -> Vec<(u64, u32)> {
        std::mem::take(&mut self.0.lock().unwrap().arrived)
    }
    fn forget(&mut self, _: u32) {}
    fn next_poll(&self) -> Option<u64> {
        None
    }
}

/// The keeper's round: every waiting key gets its next slot from the
/// book, reserved at `now` and arriving a round trip later.
fn keep(leases: &Fake, book: &mut KeyBook, now: u64) {
    let mut l = leases.0.lock().unwrap();
    let waiting: Vec<(Vec<u8>, u32)> = l.waiting.drain().collect();
    for (key, s) in waiting {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let (_, slots) = book.reserve(STEP, now as i64, &hex, 1, 0);
        let t = (slots[0] as u64).max(now + RTT);
        l.slots.entry(key).or_default().push_back(t);
        l.arrived.push((t, s));
    }
}

fn keyed(leases: &Fake) -> Keyed {
    let config = KeyConfig {
        spec: KeySpec::new(parse_key("1").unwrap(), None),
        rate: parse_rate("5/s").unwrap(),
        burst: 1,
        max_keys: 1000,
        key_capacity: 1000,
    };
    Keyed::new(config, b'\n', 1000, None).with_shared(Box::new(leases.clone()))
}

fn lines(seg: &Segment) -> Vec<String> {
    seg.records()
        .map(|r| String::from_utf8_lossy(r).trim_end().to_string())
        .collect()
}

#[test]
fn two_drips_keep_each_keys_bound_and_no_key_waits_for_another() {
    let mut book = KeyBook::default();
    let drips: Vec<(Fake, Keyed)> = (0..2)
        .map(|_| {
            let f = Fake(Arc::default());
            let k = keyed(&f);
            (f, k)
        })
        .collect();
    let mut drips = drips;
    let mut global = Limits::new(&[]);
    let mut ledger = Ledger::new(true);
    // Each drip: 10 records of a at 0, 2 of b at 0, 1 of c at 1 s.
    let input = |d: usize, keys: &[(&str, usize)]| -> Bytes {
        let text: String = keys
            .iter()
            .flat_map(|&(k, n)| (1..=n).map(move |i| format!("{k} {d}-{i}\n")))
            .collect();
        Bytes::from(text)
    };
    let mut left: Vec<(u64, String)> = Vec::new();
    let mut outbox = Vec::new();
    let mut now = 0;
    while now <= 5000 * MS {
        for (d, (leases, keyed)) in drips.iter_mut().enumerate() {
            let arriving = match now {
                0 => Some(input(d, &[("a", 10), ("b", 2)])),
                t if t == 1000 * MS => Some(input(d, &[("c", 1)])),
                _ => None,
            };
            if let Some(bytes) = arriving {
                let seg = Segment::new(bytes, b'\n');
                keyed.arrive(
                    now,
                    seg,
                    Overflow::Block,
                    true,
                    &mut global,
                    &mut ledger,
                    &mut outbox,
                );
            }
            keyed.release(now, &mut global, &mut outbox);
            for seg in outbox.drain(..) {
                left.extend(lines(&seg).into_iter().map(|l| (now, l)));
            }
            keep(leases, &mut book, now);
        }
        now += MS;
    }
    assert_eq!(left.len(), 2 * 13, "{left:?}");
    let of = |key: &str| -> Vec<(u64, String)> {
        left.iter()
            .filter(|(_, l)| l.starts_with(key))
            .cloned()
            .collect()
    };
    for key in ["a ", "b ", "c "] {
        let times: Vec<u64> = of(key).iter().map(|&(t, _)| t).collect();
        // Both drips together: 5/s, burst 1, per key.
        for (i, &t) in times.iter().enumerate() {
            let n = times[i..]
                .iter()
                .take_while(|&&x| x < t + 1000 * MS)
                .count();
            assert!(n <= 5 + 1, "key {key}: {n} in a second: {times:?}");
        }
        for w in times.windows(2) {
            assert!(w[1] - w[0] >= 200 * MS - RTT, "key {key}: {times:?}");
        }
        // Each drip's records of a key leave in order.
        for d in 0..2 {
            let mine: Vec<String> = of(key)
                .into_iter()
                .map(|(_, l)| l)
                .filter(|l| l.contains(&format!(" {d}-")))
                .collect();
            let mut sorted = mine.clone();
            sorted.sort_by_key(|l| l.rsplit('-').next().unwrap().parse::<u32>().unwrap());
            assert_eq!(mine, sorted);
        }
    }
    // a's backlog (20 records, 4 s) holds back neither b nor c: b's four
    // leave within 4 slots, c's two within 2 of their arrival.
    let b = of("b ");
    assert!(b.last().unwrap().0 <= 600 * MS + 2 * RTT, "{b:?}");
    let c = of("c ");
    assert!(c[0].0 <= 1000 * MS + 2 * RTT, "{c:?}");
    assert!(c[1].0 <= 1200 * MS + 2 * RTT, "{c:?}");
    let a = of("a ");
    assert!(a.last().unwrap().0 >= 3800 * MS, "{a:?}");
}
