//! Limits per key shared by two drips, on virtual time: two keyed queues
//! whose key schedules are leases of slots reserved, with a round trip's
//! delay, in one shared book of per-key GCRAs (the state file's
//! arithmetic), as the keeper does. Checks the per-key bound across both,
//! that a key without a slot never holds back another, and that a key's
//! records keep their order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use drip::testing::{
    parse_key, parse_rate, Base, KeyAsk, KeyBook, KeyConfig, KeySchedule, KeySpec, Keyed,
    LeaseHead, Leased, Ledger, Limit, Limits, Outflow, Overflow, Pace, Schedule, Segment, Step,
    Unit, Want,
};

const MS: u64 = 1_000_000;
/// 5/s, burst 1.
const STEP: Step = Step {
    interval: 200_000_000,
    tolerance: 0,
};
/// 5/s, burst 2.
const STEP2: Step = Step {
    interval: 200_000_000,
    tolerance: 200_000_000,
};
/// The round trip to the shared state.
const RTT: u64 = 3 * MS;
/// How late a slot may still be used (one interval of 5/s, at most
/// 100 ms, as drip's keeper allows).
const LATE: u64 = 100 * MS;
/// How long before its turn a key asks for its slot.
const LEAD: u64 = 30 * MS;

/// One drip's leases, as its keeper fills them.
#[derive(Debug, Default)]
struct Leases {
    slots: HashMap<Vec<u8>, VecDeque<u64>>,
    /// What the keys asked for, with their slot numbers.
    asking: HashMap<Vec<u8>, (u32, Want)>,
    /// Keys with no slot that asked (their slots' arrival is reported).
    waiting: HashSet<Vec<u8>>,
    arrived: Vec<(u64, u32)>,
    /// Slots too late to use when looked at.
    forfeited: u64,
    /// The key limit.
    step: Option<Step>,
}

impl Leases {
    fn drop_late(&mut self, now: u64, key: &[u8]) {
        if let Some(q) = self.slots.get_mut(key) {
            while q.front().is_some_and(|&t| t + LATE < now) {
                q.pop_front();
                self.forfeited += 1;
                // Its records ask again.
                self.asking.remove(key);
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Fake(Arc<Mutex<Leases>>);

impl KeySchedule for Fake {
    fn allows(&mut self, now: u64, _: u32, key: &[u8]) -> bool {
        let mut l = self.0.lock().unwrap();
        l.drop_late(now, key);
        l.slots
            .get(key)
            .and_then(|q| q.front())
            .is_some_and(|&t| t <= now)
    }
    fn commit(&mut self, _: u64, _: u32, key: &[u8]) {
        let mut l = self.0.lock().unwrap();
        l.slots.get_mut(key).unwrap().pop_front();
        if let Some((_, want)) = l.asking.get_mut(key) {
            want.records = want.records.saturating_sub(1);
        }
    }
    fn first_slot(&mut self, now: u64, _: u32, key: &[u8]) -> LeaseHead {
        let mut l = self.0.lock().unwrap();
        l.drop_late(now, key);
        match l.slots.get(key).and_then(|q| q.front()) {
            Some(&t) => LeaseHead::At(t),
            None if l.waiting.contains(key) => LeaseHead::Asked,
            None => LeaseHead::Empty,
        }
    }
    fn ask(&mut self, _: u64, s: u32, key: &[u8], want: Want) {
        let mut l = self.0.lock().unwrap();
        l.asking.insert(key.to_vec(), (s, want));
        if want.records > 0 && l.slots.get(key).map_or(true, VecDeque::is_empty) {
            l.waiting.insert(key.to_vec());
        }
    }
    fn arrived(&mut self) -> Vec<(u64, u32)> {
        std::mem::take(&mut self.0.lock().unwrap().arrived)
    }
    fn forget(&mut self, _: u32) {}
    fn next_poll(&self) -> Option<u64> {
        None
    }
    fn lead(&self) -> u64 {
        LEAD
    }
}

/// The keeper's round: every key whose records want more slots than its
/// lease holds gets them from the book, reserved at `now` for the times
/// it asked for, arriving a round trip later.
fn keep(leases: &Fake, book: &mut KeyBook, now: u64) {
    let mut l = leases.0.lock().unwrap();
    let asking: Vec<(Vec<u8>, u32, Want)> = l
        .asking
        .iter()
        .map(|(k, &(s, w))| (k.clone(), s, w))
        .collect();
    for (key, s, want) in asking {
        let held = l.slots.get(&key).map_or(0, VecDeque::len) as u64;
        let need = u64::from(want.records).saturating_sub(held);
        if need == 0 {
            continue;
        }
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let at = want.at + want.every * held;
        let ask = KeyAsk {
            want: need,
            after: at.saturating_sub(now) as i64,
            every: want.every as i64,
        };
        let step = l.step.unwrap_or(STEP);
        let (_, slots) = book.reserve_at(step, now as i64, &hex, ask, 200 * MS as i64);
        let lease = l.slots.entry(key.clone()).or_default();
        for t in slots {
            lease.push_back((t as u64).max(now + RTT));
        }
        let first = *lease.front().unwrap();
        if l.waiting.remove(&key) {
            l.arrived.push((first, s));
        }
    }
}

fn keyed(leases: &Fake) -> Keyed {
    keyed_with_burst(leases, 1)
}

fn keyed_with_burst(leases: &Fake, burst: u64) -> Keyed {
    let config = KeyConfig {
        spec: KeySpec::new(parse_key("1").unwrap(), None),
        rate: parse_rate("5/s").unwrap(),
        burst,
        rates: Default::default(),
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
    let mut global = Pace::local(Limits::new(&[]));
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
                    seg,
                    Overflow::Block,
                    &mut ledger,
                    &mut Outflow::at(now, &mut global, &mut outbox),
                );
            }
            keyed.release(&mut Outflow::at(now, &mut global, &mut outbox));
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

/// Two drips, each with a global limit of 6/s, send 30 records of each
/// of the keys a, b and c at 0, the keys' 5/s (burst 2) shared between
/// them: the global limits bind (each key gets 2/s of each drip's 6/s,
/// 4/s of its 5/s in all). Each drip sends at its global rate, no key
/// slot is forfeited, and each key's bound holds across both.
#[test]
fn a_binding_global_limit_wastes_no_key_slot() {
    let mut book = KeyBook::default();
    let mut drips: Vec<(Fake, Keyed, Pace)> = (0..2)
        .map(|_| {
            let f = Fake(Arc::default());
            f.0.lock().unwrap().step = Some(STEP2);
            let k = keyed_with_burst(&f, 2);
            let global = Pace::local(Limits::new(&[Limit {
                rate: parse_rate("6/s").unwrap(),
                burst: 1,
                unit: Unit::Records,
            }]));
            (f, k, global)
        })
        .collect();
    let mut ledger = Ledger::new(true);
    let mut left: Vec<Vec<(u64, String)>> = vec![Vec::new(); 2];
    let mut outbox = Vec::new();
    let mut now = 0;
    while now <= 20_000 * MS {
        for (d, (leases, keyed, global)) in drips.iter_mut().enumerate() {
            if now == 0 {
                let text: String = (1..=30)
                    .flat_map(|i| ["a", "b", "c"].map(|k| format!("{k} {d}-{i}\n")))
                    .collect();
                let seg = Segment::new(Bytes::from(text), b'\n');
                keyed.arrive(
                    seg,
                    Overflow::Block,
                    &mut ledger,
                    &mut Outflow::at(now, global, &mut outbox),
                );
            }
            // As the writer does: at the next event, or when slots come.
            keyed.release(&mut Outflow::at(now, global, &mut outbox));
            for seg in outbox.drain(..) {
                left[d].extend(lines(&seg).into_iter().map(|l| (now, l)));
            }
            keep(leases, &mut book, now);
        }
        now += MS;
    }
    for (d, (leases, _, _)) in drips.iter().enumerate() {
        let times: Vec<u64> = left[d].iter().map(|&(t, _)| t).collect();
        assert_eq!(times.len(), 90, "drip {d}");
        // 90 records at 6/s: the last 89 intervals after the first.
        let span = (times[89] - times[0]) as f64 / 1e9;
        let rate = 89.0 / span;
        assert!(rate > 6.0 * 0.97, "drip {d}: {rate:.2}/s over {span:.2} s");
        assert_eq!(leases.0.lock().unwrap().forfeited, 0, "drip {d}");
    }
    for key in ["a ", "b ", "c "] {
        let mut times: Vec<u64> = left
            .iter()
            .flatten()
            .filter(|(_, l)| l.starts_with(key))
            .map(|&(t, _)| t)
            .collect();
        times.sort_unstable();
        assert_eq!(times.len(), 60);
        // Both drips together: no second holds more than 5 + 2.
        for (i, &t) in times.iter().enumerate() {
            let n = times[i..]
                .iter()
                .take_while(|&&x| x < t + 1000 * MS)
                .count();
            assert!(n <= 5 + 2, "key {key}: {n} in a second: {times:?}");
        }
    }
}

/// A shared global limit of 12/s as the keyed queues see it: only the
/// slots its keeper reserved are known (`nth_due` is `None` past them),
/// and it reserves for the records it was told wait.
#[derive(Debug, Default)]
struct ReservedSlots {
    slots: VecDeque<u64>,
    /// Records waiting, as last told.
    wanted: usize,
    /// The next free slot of the shared 12/s.
    next_free: u64,
    last_now: u64,
}

/// 12/s.
const GAP12: u64 = 83_333_333;

impl ReservedSlots {
    /// The keeper's round at `now`: slots for the records told, arriving a
    /// round trip later, at most a second's worth ahead.
    fn keep(&mut self, now: u64) {
        while self.slots.len() < self.wanted.min(12) {
            let at = self.next_free.max(now + RTT);
            self.slots.push_back(at);
            self.next_free = at + GAP12;
        }
    }
}

/// [`ReservedSlots`] as the base of a pace, the test keeping them too.
#[derive(Debug)]
struct Reserved(Arc<Mutex<ReservedSlots>>);

impl Schedule for Reserved {
    fn weighs_bytes(&self) -> bool {
        false
    }
    fn release(&mut self, now: u64, available: usize, _: &mut dyn Iterator<Item = &[u8]>) -> usize {
        let mut r = self.0.lock().unwrap();
        r.last_now = now;
        // Too late to use: one interval.
        while r.slots.front().is_some_and(|&t| t + GAP12 < now) {
            r.slots.pop_front();
        }
        let mut n = 0;
        while n < available && r.slots.front().is_some_and(|&t| t <= now) {
            r.slots.pop_front();
            n += 1;
        }
        r.wanted = available - n;
        n
    }
    fn next_due(&self, _: &[u8]) -> u64 {
        let r = self.0.lock().unwrap();
        r.slots.front().copied().unwrap_or(r.last_now + 50 * MS)
    }
    fn nth_due(&self, _: &[u8], n: usize) -> Option<u64> {
        self.0.lock().unwrap().slots.get(n).copied()
    }
    fn slack_ns(&self) -> u64 {
        MS
    }
    fn records_per_second(&self) -> f64 {
        12.0
    }
}

impl Leased for Reserved {
    fn wrote(&mut self, _: u64, _: usize) {}
    fn expired(&mut self, _: u64, _: usize, _: &mut dyn Iterator<Item = &[u8]>) {}
    fn settle(&mut self, _: u64, _: &[u8], _: &[Option<u64>]) {}
}

/// `-r 12/s --key 1 --key-rate 5/s:2 --share`, 3 keys of 10 records: the
/// global limit binds and is shared too, so a key's turn behind another
/// whose slot is still asked for is not known until more global slots are
/// reserved. Driven as the writer drives it (release, then sleep until
/// the next event or until the keeper brings slots, every 20 ms), every
/// record leaves and the writer never wakes to find nothing to do over
/// and over: a wake-up at once that releases nothing is a busy wait.
#[test]
fn a_key_waiting_behind_an_asked_slot_does_not_busy_wait() {
    let leases = Fake(Arc::default());
    leases.0.lock().unwrap().step = Some(STEP2);
    let mut keyed = keyed_with_burst(&leases, 2);
    let reserved = Arc::new(Mutex::new(ReservedSlots {
        slots: VecDeque::from([0]),
        next_free: GAP12,
        ..ReservedSlots::default()
    }));
    let mut global = Pace::new(Base::Shared(Box::new(Reserved(Arc::clone(&reserved)))));
    let mut book = KeyBook::default();
    let mut ledger = Ledger::new(true);
    let mut outbox = Vec::new();
    let text: String = (1..=10)
        .flat_map(|i| ["a", "b", "c"].map(|k| format!("{k} {i}\n")))
        .collect();
    let seg = Segment::new(Bytes::from(text), b'\n');
    keyed.arrive(
        seg,
        Overflow::Block,
        &mut ledger,
        &mut Outflow::at(0, &mut global, &mut outbox),
    );
    const ROUND: u64 = 20 * MS;
    let (mut now, mut wakeups, mut idle_at_once) = (0, 0u64, 0u64);
    let mut left = 0;
    while left < 30 && now < 30_000 * MS && idle_at_once < 1000 {
        let sent = keyed.release(&mut Outflow::at(now, &mut global, &mut outbox));
        left += outbox.drain(..).map(|s| s.len()).sum::<usize>();
        let next_round = (now / ROUND + 1) * ROUND;
        let wake = match keyed.next_event(&global) {
            Some(t) if t < next_round => t.max(now + 1),
            _ => next_round,
        };
        if sent == 0 && wake < now + MS && wake != next_round {
            idle_at_once += 1;
        }
        if wake == next_round {
            keep(&leases, &mut book, next_round);
            reserved.lock().unwrap().keep(next_round);
        }
        now = wake;
        wakeups += 1;
    }
    eprintln!("{left} records by {} ms, {wakeups} wake-ups", now / MS);
    assert_eq!(
        idle_at_once, 0,
        "busy wait at {now} ns ({wakeups} wake-ups)"
    );
    assert_eq!(left, 30, "at {now} ns");
    // 30 records at 12/s, under 3 s: a wake-up for each record, each of
    // the keeper's rounds and a few more.
    assert!(wakeups < 30 + 150 + 60, "{wakeups} wake-ups");
}
