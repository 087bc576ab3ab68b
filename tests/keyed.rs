//! Limits per key on virtual time: the keyed queues driven as the writer
//! drives them (wake at the next event, let due records go), with arrivals
//! cut into reads at random. Every departure time is exact.

use bytes::Bytes;
use drip::testing::{
    parse_key, parse_rate, rates, KeyConfig, KeyName, KeyRates, KeySpec, Keyed, Ledger, Limit,
    Limits, Offered, Outflow, Overflow, Pace, Segment, Unit,
};

/// Keys from each record's first field, each at `rate` with `burst`;
/// `max_keys` keys remembered, `key_capacity` records waiting a key.
fn first_field_keys(rate: &str, burst: u64, max_keys: usize, key_capacity: usize) -> KeyConfig {
    KeyConfig {
        spec: KeySpec::new(parse_key("1").unwrap(), None),
        rate: parse_rate(rate).unwrap(),
        burst,
        rates: Default::default(),
        max_keys,
        key_capacity,
    }
}

const MS: u64 = 1_000_000;

struct Setup {
    key_rate: &'static str,
    key_burst: u64,
    global: Option<&'static str>,
    capacity: usize,
    key_capacity: usize,
    max_keys: usize,
    policy: Overflow,
    /// `--max-wait` in ms: records foreseen to leave later are refused
    /// under a drop or fail policy.
    max_wait_ms: Option<u64>,
    /// A rate table (`--key-rates`' text): its rows' keys take their rows'
    /// rates, the others `key_rate` (`inf`: no limit of their own).
    table: &'static str,
    /// The table put in force at this ms (`drip ctl … key-rates`), or
    /// given as `=RATE`, the limit of the keys no row matches (`drip ctl
    /// … key-rate`).
    change: Option<(u64, &'static str)>,
}

/// The rate table of `text`.
fn table(text: &str) -> KeyRates {
    KeyRates::new(rates::parse(text, None, false).unwrap()).unwrap()
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            key_rate: "10/s",
            key_burst: 1,
            global: None,
            capacity: 1000,
            key_capacity: 1000,
            max_keys: 100_000,
            policy: Overflow::Block,
            max_wait_ms: None,
            table: "",
            change: None,
        }
    }
}

/// What became of each record: (record, departure time) for those that
/// left, and the records set aside (dropped, expired).
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    left: Vec<(String, u64)>,
    dead: Vec<String>,
    handed_back: Vec<String>,
}

fn texts(seg: &Segment) -> Vec<String> {
    seg.records()
        .map(|r| String::from_utf8_lossy(r).trim_end().to_string())
        .collect()
}

/// Records `"key n"` arrive at the given ms; the records of one instant are
/// cut into reads of `cut` records. The writer wakes at every event.
fn run(setup: &Setup, arrivals: &[(u64, String)], cut: usize) -> Outcome {
    let config = first_field_keys(
        setup.key_rate,
        setup.key_burst,
        setup.max_keys,
        setup.key_capacity,
    );
    let config = KeyConfig {
        rates: table(setup.table),
        ..config
    };
    let keyed = Keyed::new(config, b'\n', setup.capacity, None);
    let limits: Vec<Limit> = setup
        .global
        .map(|r| Limit {
            rate: parse_rate(r).unwrap(),
            burst: 1,
            unit: Unit::Records,
        })
        .into_iter()
        .collect();
    let mut global = Pace::local(Limits::new(&limits));
    let mut keyed = keyed.refusing(setup.max_wait_ms.map(|m| m * MS), global.slack_ns());
    let mut ledger = Ledger::new(true);
    let mut out = Outcome::default();
    let mut outbox = Vec::new();
    let collect = |outbox: &mut Vec<Segment>, now: u64, out: &mut Outcome| {
        for seg in outbox.drain(..) {
            out.left.extend(texts(&seg).into_iter().map(|t| (t, now)));
        }
    };
    let mut i = 0;
    let mut change = setup.change;
    while i < arrivals.len() || change.is_some() {
        if let Some((c, text)) = change.filter(|&(c, _)| i == arrivals.len() || c <= arrivals[i].0)
        {
            let c = c * MS;
            while let Some(event) = keyed.next_event(&global).filter(|&e| e <= c) {
                keyed.release(&mut Outflow::at(event, &mut global, &mut outbox));
                collect(&mut outbox, event, &mut out);
            }
            match text.strip_prefix('=') {
                Some(rate) => keyed.replace_limit(c, parse_rate(rate).unwrap(), 1),
                None => keyed.replace_rates(c, table(text)),
            }
            change = None;
            continue;
        }
        let t = arrivals[i].0 * MS;
        // The writer's wake-ups before the arrivals.
        while let Some(event) = keyed.next_event(&global) {
            if event > t {
                break;
            }
            keyed.release(&mut Outflow::at(event, &mut global, &mut outbox));
            collect(&mut outbox, event, &mut out);
        }
        let same: Vec<&String> = arrivals[i..]
            .iter()
            .take_while(|a| a.0 * MS == t)
            .map(|a| &a.1)
            .collect();
        i += same.len();
        keyed.release(&mut Outflow::at(t, &mut global, &mut outbox));
        for read in same.chunks(cut) {
            let text: String = read.iter().map(|r| format!("{r}\n")).collect();
            let seg = Segment::new(Bytes::from(text), b'\n');
            let (back, _) = keyed.arrive(
                seg,
                setup.policy,
                &mut ledger,
                &mut Outflow::at(t, &mut global, &mut outbox),
            );
            if let Offered::Wait(rest) | Offered::Overflowed(rest) = back {
                out.handed_back.extend(texts(&rest));
            }
        }
        collect(&mut outbox, t, &mut out);
    }
    while let Some(event) = keyed.next_event(&global) {
        keyed.release(&mut Outflow::at(event, &mut global, &mut outbox));
        collect(&mut outbox, event, &mut out);
    }
    for seg in ledger.take_dead() {
        out.dead.extend(texts(&seg));
    }
    let c = ledger.counts();
    assert_eq!(c.read as usize + out.handed_back.len(), arrivals.len());
    assert_eq!(out.left.len() + out.dead.len(), c.read as usize);
    out
}

fn at(ms: u64, key: &str, n: usize) -> (u64, String) {
    (ms, format!("{key} {n}"))
}

fn times_of(out: &Outcome, key: &str) -> Vec<u64> {
    out.left
        .iter()
        .filter(|(r, _)| r.split(' ').next() == Some(key))
        .map(|&(_, t)| t / MS)
        .collect()
}

#[test]
fn each_key_is_spaced_exactly_by_its_rate() {
    let arrivals: Vec<_> = (0..5)
        .flat_map(|n| [at(0, "a", n), at(0, "b", n)])
        .collect();
    for cut in [1, 3, 10] {
        let out = run(&Setup::default(), &arrivals, cut);
        assert_eq!(times_of(&out, "a"), [0, 100, 200, 300, 400]);
        assert_eq!(times_of(&out, "b"), [0, 100, 200, 300, 400]);
        // Within a key, input order.
        let a: Vec<_> = out
            .left
            .iter()
            .filter(|r| r.0.starts_with('a'))
            .map(|r| r.0.clone())
            .collect();
        assert_eq!(a, ["a 0", "a 1", "a 2", "a 3", "a 4"]);
    }
    // A burst of 3 per key: three at once, then the rate.
    let setup = Setup {
        key_burst: 3,
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 4);
    assert_eq!(times_of(&out, "a"), [0, 0, 0, 100, 200]);
}

#[test]
fn a_waiting_key_never_holds_back_another() {
    // Forty records of "noisy", then one of "quiet" at the same instant and
    // another 250 ms later: neither waits behind the noisy backlog.
    let mut arrivals: Vec<_> = (0..40).map(|n| at(0, "noisy", n)).collect();
    arrivals.push(at(0, "quiet", 0));
    arrivals.push(at(250, "quiet", 1));
    arrivals.push(at(250, "other", 0));
    let out = run(&Setup::default(), &arrivals, 7);
    assert_eq!(times_of(&out, "quiet"), [0, 250]);
    assert_eq!(times_of(&out, "other"), [250]);
    assert_eq!(times_of(&out, "noisy").last(), Some(&3900));
    // Across keys the output order differs from the input's.
    let order: Vec<_> = out.left.iter().map(|r| r.0.as_str()).take(3).collect();
    assert_eq!(order, ["noisy 0", "quiet 0", "noisy 1"]);
}

#[test]
fn under_a_global_limit_busy_keys_share_equally() {
    // Backlogs of 60, 20 and 10 records; each key may go at 1000/s, all
    // together at 10/s: they take turns, one record each.
    let mut arrivals: Vec<_> = (0..60).map(|n| at(0, "a", n)).collect();
    arrivals.extend((0..20).map(|n| at(0, "b", n)));
    arrivals.extend((0..10).map(|n| at(0, "c", n)));
    let setup = Setup {
        key_rate: "1000/s",
        global: Some("10/s"),
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 16);
    let first: Vec<_> = out.left[..30]
        .iter()
        .map(|r| r.0.split(' ').next().unwrap())
        .collect();
    for turn in first.chunks(3) {
        let mut keys = turn.to_vec();
        keys.sort_unstable();
        assert_eq!(keys, ["a", "b", "c"], "{first:?}");
    }
    // The global limit holds: one every 100 ms.
    let all: Vec<u64> = out.left.iter().map(|r| r.1 / MS).collect();
    assert_eq!(all, (0..90).map(|i| i * 100).collect::<Vec<_>>());
    // Then two keys share, then one is left.
    assert_eq!(times_of(&out, "c").last(), Some(&2900));
    assert_eq!(times_of(&out, "b").last(), Some(&(2900 + 20 * 100)));
}

/// A random workload of many keys over two seconds.
fn workload(seed: u64, keys: u64, n: usize) -> Vec<(u64, String)> {
    let mut x = seed;
    let mut t = 0;
    (0..n)
        .map(|i| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            t += (x >> 60) % 4 * 7;
            let key = (x >> 33) % keys;
            (t, format!("k{key} {i}"))
        })
        .collect()
}

#[test]
fn forgetting_idle_keys_never_changes_a_departure() {
    let mut compared = 0;
    for seed in 1..6 {
        let arrivals = workload(seed, 40, 600);
        let remember_all = Setup {
            key_rate: "20/s",
            key_burst: 2,
            global: Some("400/s"),
            ..Setup::default()
        };
        let reference = run(&remember_all, &arrivals, 3);
        // Few keys remembered, but enough that one is always idle.
        for max_keys in [30, 35] {
            let forgetful = Setup {
                max_keys,
                ..remember_all
            };
            let out = run(&forgetful, &arrivals, 2);
            if out.handed_back.is_empty() {
                assert_eq!(out, reference, "seed {seed}, {max_keys} keys");
                compared += 1;
            }
        }
    }
    assert!(
        compared >= 3,
        "only {compared} runs never found every key busy"
    );
    // And with room for every key but one in flight at a time, it is used.
    let arrivals: Vec<_> = (0..50).map(|i| at(i * 200, &format!("k{i}"), 0)).collect();
    let setup = Setup {
        max_keys: 1,
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 1);
    assert!(out.handed_back.is_empty() && out.dead.is_empty());
    assert_eq!(out.left.len(), 50);
}

#[test]
fn with_every_key_busy_a_new_key_meets_the_policy() {
    // Two keys remembered, both busy at 0 ms: a third key's record is
    // handled as if the bucket were full.
    let arrivals = vec![
        at(0, "a", 0),
        at(0, "a", 1),
        at(0, "b", 0),
        at(0, "b", 1),
        at(0, "c", 0),
        // By 500 ms a and b have rested: c is remembered in a's place.
        at(500, "c", 1),
    ];
    let setup = |policy| Setup {
        max_keys: 2,
        policy,
        ..Setup::default()
    };
    let out = run(&setup(Overflow::DropNewest), &arrivals, 5);
    assert_eq!(out.dead, ["c 0"]);
    assert_eq!(times_of(&out, "c"), [500]);
    let out = run(&setup(Overflow::DropOldest), &arrivals, 5);
    assert_eq!(out.dead, ["c 0"], "no older record of c to evict");
    let out = run(&setup(Overflow::Block), &arrivals, 5);
    assert_eq!(out.handed_back, ["c 0"]);
    let out = run(&setup(Overflow::Fail), &arrivals, 1);
    assert_eq!(out.handed_back, ["c 0"]);
    // While a key is busy, it is never forgotten: b's second record keeps
    // its slot at 100 ms.
    let out = run(&setup(Overflow::DropNewest), &arrivals, 1);
    assert_eq!(times_of(&out, "b"), [0, 100]);
}

#[test]
fn a_key_forgotten_within_a_read_is_looked_up_again() {
    // One key remembered. At 500 ms a has rested; in one read b takes its
    // place, then a comes again: a is new again, and b (busy until its
    // next slot) cannot give way, so a's record meets the policy. It must
    // not be taken for b, whose slot a's used to be.
    let arrivals = vec![at(0, "a", 0), at(500, "b", 0), at(500, "a", 1)];
    let setup = Setup {
        max_keys: 1,
        policy: Overflow::DropNewest,
        ..Setup::default()
    };
    for cut in [1, 2] {
        let out = run(&setup, &arrivals, cut);
        assert_eq!(out.dead, ["a 1"], "cut {cut}");
        assert_eq!(times_of(&out, "a"), [0], "cut {cut}");
        assert_eq!(times_of(&out, "b"), [500], "cut {cut}");
    }
}

#[test]
fn overflow_policies_apply_per_key() {
    // Capacity 6 in all, 4 per key. "fat" sends 10 at once, "thin" 4.
    let mut arrivals: Vec<_> = (0..10).map(|n| at(0, "fat", n)).collect();
    arrivals.extend((0..4).map(|n| at(0, "thin", n)));
    let setup = |policy| Setup {
        capacity: 6,
        key_capacity: 4,
        policy,
        ..Setup::default()
    };
    // drop-newest: fat 0 leaves, 1..4 wait, 5..9 are dropped; thin 0
    // leaves, thin 1 and 2 wait (6 in all), thin 3 is dropped.
    let out = run(&setup(Overflow::DropNewest), &arrivals, 4);
    assert_eq!(
        out.dead,
        ["fat 5", "fat 6", "fat 7", "fat 8", "fat 9", "thin 3"]
    );
    // drop-oldest: the full key evicts its own oldest; at the global bound
    // the fattest key pays, never the thin one.
    let out = run(&setup(Overflow::DropOldest), &arrivals, 4);
    assert_eq!(
        out.dead,
        ["fat 1", "fat 2", "fat 3", "fat 4", "fat 5", "fat 6"]
    );
    assert_eq!(times_of(&out, "thin"), [0, 100, 200, 300]);
    let fat: Vec<_> = out
        .left
        .iter()
        .filter(|r| r.0.starts_with("fat"))
        .map(|r| r.0.as_str())
        .collect();
    assert_eq!(fat, ["fat 0", "fat 7", "fat 8", "fat 9"]);
    // block: the record that does not fit is handed back with all after it.
    let out = run(&setup(Overflow::Block), &arrivals, 14);
    assert_eq!(out.handed_back.len(), 9);
    assert_eq!(out.handed_back[0], "fat 5");
}

#[test]
fn any_cut_into_reads_decides_the_same() {
    for seed in 10..16 {
        let arrivals = workload(seed, 6, 300);
        for policy in [Overflow::DropNewest, Overflow::DropOldest] {
            let setup = Setup {
                key_rate: "25/s",
                key_burst: 2,
                global: Some("100/s"),
                capacity: 12,
                key_capacity: 5,
                policy,
                ..Setup::default()
            };
            let one = run(&setup, &arrivals, 1);
            for cut in [2, 5, 64] {
                assert_eq!(run(&setup, &arrivals, cut), one, "seed {seed} cut {cut}");
            }
        }
    }
}

#[test]
fn under_a_byte_rate_an_eviction_lets_a_smaller_record_go_at_once() {
    // 10 B/s with a burst of 10 B; one record may wait in all. "a 12345"
    // (8 B) leaves at 0 and leaves 2 B; "b 1234567" (10 B) waits for a
    // full burst. At 200 ms 4 B are saved: "c 1" (4 B) evicts b and, the
    // line now empty, leaves at once, in the same arrival.
    let config = first_field_keys("1000/s", 1, 100, 100);
    let mut keyed = Keyed::new(config, b'\n', 1, None);
    let mut global = Pace::local(Limits::new(&[Limit {
        rate: parse_rate("10/s").unwrap(),
        burst: 10,
        unit: Unit::Bytes,
    }]));
    let mut ledger = Ledger::new(true);
    let mut outbox = Vec::new();
    let mut arrive = |t: u64, text: &str, outbox: &mut Vec<Segment>| {
        let seg = Segment::new(Bytes::from(format!("{text}\n")), b'\n');
        let (back, sent) = keyed.arrive(
            seg,
            Overflow::DropOldest,
            &mut ledger,
            &mut Outflow::at(t * MS, &mut global, outbox),
        );
        assert!(matches!(back, Offered::Done));
        sent
    };
    assert_eq!(arrive(0, "a 12345", &mut outbox), 1);
    assert_eq!(arrive(0, "b 1234567", &mut outbox), 0);
    assert_eq!(arrive(200, "c 1", &mut outbox), 1);
    let left: Vec<String> = outbox.iter().flat_map(texts).collect();
    assert_eq!(left, ["a 12345", "c 1"]);
    let dead: Vec<String> = ledger.take_dead().iter().flat_map(texts).collect();
    assert_eq!(dead, ["b 1234567"]);
}

#[test]
fn the_stats_count_the_records_no_key_could_be_remembered_for() {
    // Two keys remembered, both busy at 0 ms: c's two records are dropped
    // with no key's place, so no top list can name them; their own count
    // does. The record without a key is the no-key lane's, unnamed.
    let config = first_field_keys("10/s", 1, 2, 100);
    let mut keyed = Keyed::new(config, b'\n', 100, None);
    let mut global = Pace::local(Limits::new(&[]));
    let mut ledger = Ledger::new(true);
    let mut outbox = Vec::new();
    let text = "a 0\na 1\nb 0\nb 1\nc 0\nc 1\n\n";
    let (back, sent) = keyed.arrive(
        Segment::new(Bytes::from(text), b'\n'),
        Overflow::DropNewest,
        &mut ledger,
        &mut Outflow::at(0, &mut global, &mut outbox),
    );
    assert!(matches!(back, Offered::Done));
    assert_eq!(sent, 3);
    let stats = keyed.stats(10);
    assert_eq!(stats.dropped_unremembered, 2);
    assert_eq!(ledger.counts().dropped_newest, 2);
    assert!(stats.top_dropped.is_empty(), "{stats:?}");
    let named = |list: &[(KeyName, u64)]| -> Vec<(Option<String>, u64)> {
        list.iter()
            .map(|(k, n)| (k.0.as_ref().map(|b| String::from_utf8_lossy(b).into()), *n))
            .collect()
    };
    assert_eq!(
        named(&stats.top_written),
        [(None, 1), (Some("a".into()), 1), (Some("b".into()), 1)]
    );
    assert_eq!(
        named(&stats.top_waiting),
        [(Some("a".into()), 1), (Some("b".into()), 1)]
    );
}

/// Records `"key n"` arrive one read each at the given ms; before each
/// arrives, what the keys foresee for it. Returns (record, foreseen,
/// departure) for every record that left.
fn foreseen_and_left(setup: &Setup, arrivals: &[(u64, String)]) -> Vec<(String, u64, u64)> {
    let config = first_field_keys(
        setup.key_rate,
        setup.key_burst,
        setup.max_keys,
        setup.key_capacity,
    );
    let mut keyed = Keyed::new(config, b'\n', setup.capacity, None);
    let limits: Vec<Limit> = setup
        .global
        .map(|r| Limit {
            rate: parse_rate(r).unwrap(),
            burst: 1,
            unit: Unit::Records,
        })
        .into_iter()
        .collect();
    let mut global = Pace::local(Limits::new(&limits));
    let mut ledger = Ledger::new(false);
    let mut outbox = Vec::new();
    let mut foreseen = std::collections::HashMap::new();
    let mut left = Vec::new();
    let settle = |outbox: &mut Vec<Segment>, now: u64, left: &mut Vec<(String, u64)>| {
        for seg in outbox.drain(..) {
            left.extend(texts(&seg).into_iter().map(|t| (t, now)));
        }
    };
    for (ms, record) in arrivals {
        let t = ms * MS;
        while let Some(event) = keyed.next_event(&global) {
            if event > t {
                break;
            }
            keyed.release(&mut Outflow::at(event, &mut global, &mut outbox));
            settle(&mut outbox, event, &mut left);
        }
        keyed.release(&mut Outflow::at(t, &mut global, &mut outbox));
        settle(&mut outbox, t, &mut left);
        let line = format!("{record}\n");
        let at = keyed
            .foresee_record(t, line.as_bytes(), &global)
            .expect("a local schedule is foreseen");
        foreseen.insert(record.clone(), at);
        let seg = Segment::new(Bytes::from(line), b'\n');
        keyed.arrive(
            seg,
            setup.policy,
            &mut ledger,
            &mut Outflow::at(t, &mut global, &mut outbox),
        );
        settle(&mut outbox, t, &mut left);
    }
    while let Some(event) = keyed.next_event(&global) {
        keyed.release(&mut Outflow::at(event, &mut global, &mut outbox));
        settle(&mut outbox, event, &mut left);
    }
    left.into_iter()
        .map(|(r, t)| {
            let at = foreseen[&r];
            (r, at, t)
        })
        .collect()
}

#[test]
fn what_the_keys_foresee_is_exact_alone_and_a_floor_under_a_global_limit() {
    // Each key alone (no global limit): every record leaves exactly when
    // foreseen at its arrival. Under a global limit the keys' turns come
    // on top: never earlier than foreseen.
    for seed in 1..5 {
        let arrivals = workload(seed, 12, 400);
        for (global, exact) in [(None, true), (Some("120/s"), false)] {
            let setup = Setup {
                key_rate: "20/s",
                key_burst: 2,
                global,
                ..Setup::default()
            };
            let out = foreseen_and_left(&setup, &arrivals);
            assert_eq!(out.len(), arrivals.len());
            let mut later = 0;
            for (record, foreseen, left) in &out {
                assert!(
                    left >= foreseen,
                    "{record} left at {left}, foreseen {foreseen}"
                );
                if exact {
                    assert_eq!(left, foreseen, "{record}, seed {seed}");
                }
                later += usize::from(left > foreseen);
            }
            if !exact {
                assert!(later > 0, "the global limit never held a record back");
            }
        }
    }
}

#[test]
fn a_key_that_cannot_make_max_wait_is_refused_and_no_other_key_pays() {
    // -r inf --key 1 --key-rate 10/s --max-wait 1050ms -o drop-newest:
    // a 0..10 leave by 1 s, a 11..19 are refused at once; b 0 leaves now.
    let mut arrivals: Vec<_> = (0..20).map(|n| at(0, "a", n)).collect();
    arrivals.push(at(0, "b", 0));
    let setup = Setup {
        max_wait_ms: Some(1050),
        policy: Overflow::DropNewest,
        ..Setup::default()
    };
    for cut in [1, 7, 21] {
        let out = run(&setup, &arrivals, cut);
        assert_eq!(
            times_of(&out, "a"),
            (0..=10).map(|i| i * 100).collect::<Vec<_>>()
        );
        assert_eq!(times_of(&out, "b"), [0]);
        let dead: Vec<String> = (11..20).map(|n| format!("a {n}")).collect();
        assert_eq!(out.dead, dead);
    }
    // Under drop-oldest the key's oldest waiting records make way: the
    // newest ten wait and leave by 1 s.
    let oldest = Setup {
        policy: Overflow::DropOldest,
        ..setup
    };
    let out = run(&oldest, &arrivals, 5);
    let a: Vec<&str> = out
        .left
        .iter()
        .filter(|r| r.0.starts_with('a'))
        .map(|r| r.0.as_str())
        .collect();
    let expected: Vec<String> = std::iter::once(0)
        .chain(10..20)
        .map(|n| format!("a {n}"))
        .collect();
    assert_eq!(a, expected);
    assert_eq!(times_of(&out, "a").last(), Some(&1000));
    // Under fail the first that cannot make it is handed back.
    let fail = Setup {
        policy: Overflow::Fail,
        ..setup
    };
    let out = run(&fail, &arrivals, 21);
    assert_eq!(out.handed_back.first().map(String::as_str), Some("a 11"));
}

#[test]
fn under_a_global_limit_a_key_cannot_beat_its_turns() {
    // --key-rate 100/s -r 10/s --max-wait 550ms -o drop-newest: one key's
    // ten records need one global slot each, 100 ms apart: 0..5 leave by
    // 500 ms, 6..9 are refused.
    let arrivals: Vec<_> = (0..10).map(|n| at(0, "a", n)).collect();
    let setup = Setup {
        key_rate: "100/s",
        global: Some("10/s"),
        max_wait_ms: Some(550),
        policy: Overflow::DropNewest,
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 4);
    assert_eq!(times_of(&out, "a"), [0, 100, 200, 300, 400, 500]);
    assert_eq!(out.dead, ["a 6", "a 7", "a 8", "a 9"]);
}

/// Ten keys with two records each at 0 ms (the first of each leaves at
/// once): what `release` lets go at 100 ms, as the outbox holds it.
fn released_at_100ms(keyed: Keyed) -> Vec<Segment> {
    let mut keyed = keyed;
    let mut global = Pace::local(Limits::new(&[]));
    let mut ledger = Ledger::new(false);
    let mut outbox = Vec::new();
    let text: String = (0..2)
        .flat_map(|n| (0..10).map(move |k| format!("k{k} {n}\n")))
        .collect();
    let seg = Segment::new(Bytes::from(text), b'\n');
    keyed.arrive(
        seg,
        Overflow::Block,
        &mut ledger,
        &mut Outflow::at(0, &mut global, &mut outbox),
    );
    assert_eq!(outbox.iter().map(Segment::len).sum::<usize>(), 10);
    outbox.clear();
    keyed.release(&mut Outflow::at(100 * MS, &mut global, &mut outbox));
    outbox
}

fn ten_keys() -> Keyed {
    let config = first_field_keys("10/s", 1, 100, 100);
    Keyed::new(config, b'\n', 1000, None)
}

/// Records let go together leave as one segment (one copy, one piece of a
/// write), in turn order.
#[test]
fn records_let_go_together_leave_as_one_segment() {
    let outbox = released_at_100ms(ten_keys());
    let segs: Vec<Vec<String>> = outbox.iter().map(texts).collect();
    let second: Vec<String> = (0..10).map(|k| format!("k{k} 1")).collect();
    assert_eq!(segs, [second], "one segment of ten");
    assert_eq!(outbox[0].arrived, 0);
}

/// Apart (for the runner, which times each record from its arrival), each
/// record that waited leaves as a segment of its own, with its arrival.
#[test]
fn records_apart_leave_one_segment_each() {
    let outbox = released_at_100ms(ten_keys().records_apart());
    let segs: Vec<Vec<String>> = outbox.iter().map(texts).collect();
    let second: Vec<Vec<String>> = (0..10).map(|k| vec![format!("k{k} 1")]).collect();
    assert_eq!(segs, second);
}

#[test]
fn drop_oldest_takes_from_the_key_holding_most_as_records_leave() {
    // Capacity 5, one record a key leaves at once. b waits 2, a 3 (5 in
    // all): c's second record evicts a's oldest (a holds most). d's second
    // record finds a and b holding 2 each: the tie goes to the key whose
    // head came first, b. The key that lost a record must be known to hold
    // one less, or a is taken again, and once a key holds none the bucket
    // never makes room.
    let mut arrivals: Vec<_> = (1..=3).map(|n| at(0, "b", n)).collect();
    arrivals.extend((1..=4).map(|n| at(0, "a", n)));
    arrivals.extend([at(0, "c", 1), at(0, "c", 2), at(0, "d", 1), at(0, "d", 2)]);
    let setup = Setup {
        capacity: 5,
        policy: Overflow::DropOldest,
        ..Setup::default()
    };
    for cut in [1, 3, 11] {
        let out = run(&setup, &arrivals, cut);
        assert_eq!(out.dead, ["a 2", "b 2"], "cut {cut}");
        assert_eq!(out.left.len(), 9, "cut {cut}");
    }
}

/// A new key rate (`drip ctl … key-rate`) counts from each key's last
/// departure, also for a key whose one departure came from rest: at 1/s,
/// `k0` leaves at 0 ms; at 50 ms the rate becomes 10/s, so its next record
/// may leave at 100 ms (not 100 ms after the change).
#[test]
fn a_new_key_rate_counts_from_a_rested_keys_one_departure() {
    let config = first_field_keys("1/s", 1, 100, 100);
    let mut keyed = Keyed::new(config, b'\n', 1000, None);
    let mut global = Pace::local(Limits::new(&[]));
    let mut ledger = Ledger::new(false);
    let mut outbox = Vec::new();
    for (now, text) in [(0, "k0 a\n"), (50 * MS, "k0 b\n")] {
        if now > 0 {
            keyed.replace_limit(now, parse_rate("10/s").unwrap(), 1);
        }
        let seg = Segment::new(Bytes::from(text), b'\n');
        let policy = Overflow::Block;
        keyed.arrive(
            seg,
            policy,
            &mut ledger,
            &mut Outflow::at(now, &mut global, &mut outbox),
        );
    }
    assert_eq!(keyed.len(), 1, "k0 b waits for its key's slot");
    assert_eq!(keyed.next_event(&global), Some(100 * MS));
}

/// After a lower key rate (`drip ctl … key-rate`), a record of a key that
/// left once and rested before the change leaves as a rested key's does,
/// and `--max-wait` foresees it so: at 10/s per key and 1/2s for all,
/// `a 1` leaves at 0 ms and `b 2` waits for 2 s; at 500 ms the key rate
/// becomes 1/h; `a 3` comes at 800 ms, its key rested since 100 ms, and
/// leaves at 4 s behind `b 2`, under every policy that refuses. (Foreseen
/// from `a 1` under 1/h it would leave after an hour, and was refused;
/// the slot's note of its one departure, read under the new limit, gave
/// a time before the epoch.)
#[test]
fn a_lower_key_rate_leaves_a_rested_key_rested_for_max_wait() {
    for policy in [Overflow::Fail, Overflow::DropNewest, Overflow::DropOldest] {
        for max_wait_s in [30, 7200] {
            let config = first_field_keys("10/s", 1, 100, 100);
            let global_limit = Limit {
                rate: parse_rate("1/2s").unwrap(),
                burst: 1,
                unit: Unit::Records,
            };
            let mut global = Pace::local(Limits::new(&[global_limit]));
            let keyed = Keyed::new(config, b'\n', 1000, None);
            let mut keyed = keyed.refusing(Some(max_wait_s * 1000 * MS), global.slack_ns());
            let mut ledger = Ledger::new(true);
            let mut outbox = Vec::new();
            let mut left = Vec::new();
            for (now, text) in [(0, "a 1\nb 2\n"), (800 * MS, "a 3\n")] {
                if now > 0 {
                    keyed.replace_limit(500 * MS, parse_rate("1/h").unwrap(), 1);
                }
                let seg = Segment::new(Bytes::from(text), b'\n');
                let (back, _) = keyed.arrive(
                    seg,
                    policy,
                    &mut ledger,
                    &mut Outflow::at(now, &mut global, &mut outbox),
                );
                assert!(matches!(back, Offered::Done), "{policy:?}: handed back");
                left.extend(outbox.drain(..).flat_map(|s| texts(&s)).map(|t| (t, now)));
            }
            while let Some(event) = keyed.next_event(&global) {
                keyed.release(&mut Outflow::at(event, &mut global, &mut outbox));
                left.extend(outbox.drain(..).flat_map(|s| texts(&s)).map(|t| (t, event)));
            }
            let left: Vec<_> = left.iter().map(|(r, t)| (r.as_str(), t / MS)).collect();
            assert_eq!(
                left,
                [("a 1", 0), ("b 2", 2000), ("a 3", 4000)],
                "{policy:?}, --max-wait {max_wait_s}s"
            );
            assert!(ledger.take_dead().is_empty(), "{policy:?}");
        }
    }
}

#[test]
fn two_keys_of_different_rows_leave_at_their_own_rates() {
    let arrivals: Vec<_> = (0..5)
        .flat_map(|n| [at(0, "a", n), at(0, "b.x", n), at(0, "c", n), at(0, "d", n)])
        .collect();
    let setup = Setup {
        key_rate: "inf",
        table: "a 2/s\n*.x 5/s:2\nc 10/s\n",
        ..Setup::default()
    };
    for cut in [1, 4, 20] {
        let out = run(&setup, &arrivals, cut);
        assert_eq!(times_of(&out, "a"), [0, 500, 1000, 1500, 2000]);
        assert_eq!(times_of(&out, "b.x"), [0, 0, 200, 400, 600]);
        assert_eq!(times_of(&out, "c"), [0, 100, 200, 300, 400]);
        // No row and no --key-rate RATE: no limit of its own.
        assert_eq!(times_of(&out, "d"), [0, 0, 0, 0, 0]);
    }
    // With --key-rate RATE, the keys no row matches take it.
    let setup = Setup {
        key_rate: "4/s",
        ..setup
    };
    let out = run(&setup, &arrivals, 3);
    assert_eq!(times_of(&out, "d"), [0, 250, 500, 750, 1000]);
    assert_eq!(times_of(&out, "a"), [0, 500, 1000, 1500, 2000]);
}

#[test]
fn a_new_table_keeps_each_keys_place() {
    let arrivals: Vec<_> = (0..6)
        .flat_map(|n| [at(0, "a", n), at(0, "b", n)])
        .collect();
    // At 250 ms, a goes from 10/s to 2/s: its next record is due one new
    // interval (500 ms) after its last slot (200 ms). b's row is the same: its place stays as it was.
    let setup = Setup {
        key_rate: "inf",
        table: "a 10/s\nb 10/s\n",
        change: Some((250, "a 2/s\nb 10/s:1\n")),
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 2);
    // a's record due at 300 under the old limit waits for its new slot.
    assert_eq!(times_of(&out, "a"), [0, 100, 200, 700, 1200, 1700]);
    assert_eq!(times_of(&out, "b"), [0, 100, 200, 300, 400, 500]);
    // Raising the rate sends no catch-up burst either.
    let setup = Setup {
        key_rate: "inf",
        table: "a 1/s\n",
        change: Some((1050, "a 10/s:5\n")),
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 2);
    // From 1/s to 10/s:5 at 1050: the record due at 2000 leaves one new
    // interval after the last slot (1000), and the rest at the new rate.
    assert_eq!(times_of(&out, "a"), [0, 1000, 1100, 1200, 1300, 1400]);
}

#[test]
fn a_new_key_rate_beside_a_table_is_the_unmatched_keys() {
    let arrivals: Vec<_> = (0..5)
        .flat_map(|n| [at(0, "a", n), at(0, "b", n)])
        .collect();
    let setup = Setup {
        key_rate: "10/s",
        table: "a 10/s\n",
        change: Some((150, "=2/s")),
        ..Setup::default()
    };
    let out = run(&setup, &arrivals, 3);
    // a keeps its row; b, which no row matches, takes the new limit from
    // its last slot (100 ms).
    assert_eq!(times_of(&out, "a"), [0, 100, 200, 300, 400]);
    assert_eq!(times_of(&out, "b"), [0, 100, 600, 1100, 1600]);
}
