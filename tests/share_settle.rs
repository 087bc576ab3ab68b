//! Settlement through `--share` against a plain model (#40: 11): one or
//! two drips' reservations, their records' settlements (debits, and
//! overestimates given back), the unused slots they give back, and their
//! exits (the last reservation's unused tail given back, then the
//! settlements left), interleaved in random orders on virtual time,
//! through the shared arithmetic ([`Gcra`]), the state file and Redis's
//! script (on a test clock, when there is a `redis-server`). Whatever the
//! order:
//!
//! - the state's `charged` is every slot's size plus every debit (a
//!   give-back takes nothing off);
//! - each limit's TAT is never below the one the records make by
//!   themselves: a lone GCRA over the slots records used, at their times,
//!   each charged what its job spent (settled) or its estimate (in
//!   flight). A debit lost, or an overestimate given back past its floor,
//!   takes it below;
//! - the file and the script go step for step as the arithmetic does.
//!
//! With two named costs of different weights (`--cost-rate in=… --cost-rate
//! out=…`, #40: 12) each slot carries both, each limit spends its own, and
//! each holds as one limit alone does: `charged` of each weight, each
//! limit's TAT against the records' own of its cost.
//!
//! A debit settled after a drip's reservation and before the give-back of
//! that reservation's unused slots went back with them (the schedule
//! taken back to the first unused slot, the debit's time too) until a
//! debit moved the reservation number on.

use crate::common;
use common::redis_server::RedisServer as Redis;
use drip::testing::{
    Ask, Back, ByteStep, FileStore, Gcra, Meter, RedisStore, Settlement, Step, Store, Weight,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::path::{Path, PathBuf};

const MS: i64 = 1_000_000;
/// Redis's test clock starts here (s).
const EPOCH: i64 = 1_700_000_000;

/// A cost limit of 10 a second (100 ms a unit) and `burst`, after a
/// record limit of 20 a second when `records_beside`; with two `weights`,
/// then a limit of another cost (`out`, the slots' second weight) of 4 a
/// second (250 ms a unit) and twice the burst.
fn meters(burst: i64, records_beside: bool, weights: usize) -> Vec<Meter> {
    let mut out = Vec::new();
    if records_beside {
        out.push(Meter::Records(Step {
            interval: 50 * MS,
            tolerance: 100 * MS,
        }));
    }
    out.push(Meter::Bytes(ByteStep {
        count: 10,
        period: 1000 * MS,
        burst,
        weight: 0,
    }));
    if weights == 2 {
        out.push(Meter::Bytes(ByteStep {
            count: 4,
            period: 1000 * MS,
            burst: 2 * burst,
            weight: 1,
        }));
    }
    out
}

/// Two costs of a record (`in`, `out`): the second counts only where the
/// case has two weights.
type Pair = [u64; 2];

/// A slot's weights of `pair` under `weights` (1: the first only).
fn weight(pair: Pair, weights: usize) -> Weight {
    let mut w = Weight::from(pair[0]);
    if weights == 2 {
        w.0[1] = pair[1];
    }
    w
}

/// One step of a case. Drips and records are picked modulo what there is
/// at that step, so a shrunk case still means something.
#[derive(Debug, Clone)]
enum Op {
    /// Virtual time passes (ms).
    Wait(i64),
    /// A drip reserves slots for records estimated at `sizes`, every slot
    /// due within `horizon` ms of the first.
    Reserve {
        drip: usize,
        sizes: Vec<Pair>,
        horizon: i64,
    },
    /// Up to `n` of a drip's next slots due by now carry records (their
    /// jobs start).
    Send { drip: usize, n: usize },
    /// Jobs of a drip's records in flight report what they spent, settled
    /// in one call (as a keeper's turn sends them).
    Settle {
        drip: usize,
        picks: Vec<(usize, Pair)>,
    },
    /// A drip gives back a reservation's unused slots from one of them on
    /// (refused unless no one reserved, nor was charged a debit, since).
    GiveBack { drip: usize, from: usize },
    /// A drip exits: its last reservation's unused tail goes back, then
    /// the settlements left (every record in flight, spending `spent`).
    Exit { drip: usize, spent: Vec<Pair> },
}

/// A case: the limits (`weights`: one cost, or two of different weights),
/// how many drips, the steps.
#[derive(Debug, Clone)]
struct Case {
    burst: i64,
    records_beside: bool,
    weights: usize,
    drips: usize,
    ops: Vec<Op>,
}

/// What a job spends: below, at or above its record's estimate (1 to
/// 12), and far above (the 41 against 1).
fn spent() -> impl Strategy<Value = Pair> {
    let one = || prop_oneof![3 => 0u64..=13, 1 => 30u64..=45];
    (one(), one()).prop_map(|(a, b)| [a, b])
}

/// A record's estimates: 1 to 12 of the first cost, 0 to 12 of the
/// second.
fn estimate() -> impl Strategy<Value = Pair> {
    (1u64..=12, 0u64..=12).prop_map(|(a, b)| [a, b])
}

fn op() -> impl Strategy<Value = Op> {
    let drip = 0usize..2;
    prop_oneof![
        2 => (0i64..=200).prop_map(Op::Wait),
        3 => (drip.clone(), prop::collection::vec(estimate(), 1..=4), 0i64..=300)
            .prop_map(|(drip, sizes, horizon)| Op::Reserve { drip, sizes, horizon }),
        3 => (drip.clone(), 1usize..=3).prop_map(|(drip, n)| Op::Send { drip, n }),
        3 => (drip.clone(), prop::collection::vec((any::<usize>(), spent()), 1..=3))
            .prop_map(|(drip, picks)| Op::Settle { drip, picks }),
        2 => (drip.clone(), any::<usize>()).prop_map(|(drip, from)| Op::GiveBack { drip, from }),
        1 => (drip, prop::collection::vec(spent(), 1..=4))
            .prop_map(|(drip, spent)| Op::Exit { drip, spent }),
    ]
}

/// At most 40 steps of at most 200 ms: the state never expires (10 s past
/// its schedule) within a case.
fn case(weights: usize) -> impl Strategy<Value = Case> {
    (
        1i64..=20,
        any::<bool>(),
        1usize..=2,
        prop::collection::vec(op(), 1..=40),
    )
        .prop_map(move |(burst, records_beside, drips, ops)| Case {
            burst,
            records_beside,
            weights,
            drips,
            ops,
        })
}

/// The shared state as the harness drives it, on virtual time (ns).
trait Shared {
    /// Reserve slots for records of `sizes` at `now`: the reservation's
    /// number, the slots (ns), and the state's mark before it (what was
    /// charged, its life).
    fn reserve(&mut self, now: i64, sizes: &[Weight], horizon: i64)
        -> (u64, Vec<i64>, Weight, u64);
    fn settle(&mut self, now: i64, batch: &[Settlement]);
    fn give_back(&mut self, now: i64, seq: u64, first_unused: i64, size: Weight) -> bool;
    /// What the state holds: charged, seq, each limit's TAT.
    fn state(&mut self) -> (Weight, u64, Vec<Option<i64>>);
}

/// The arithmetic itself.
struct Mirror {
    g: Gcra,
    meters: Vec<Meter>,
}

impl Shared for Mirror {
    fn reserve(
        &mut self,
        now: i64,
        sizes: &[Weight],
        horizon: i64,
    ) -> (u64, Vec<i64>, Weight, u64) {
        let before = self.g.charged;
        let want = (sizes.len() as u64, sizes);
        let slots = self
            .g
            .reserve_within(&self.meters, now, want, horizon, None)
            .unwrap();
        (self.g.seq, slots, before, self.g.life)
    }
    fn settle(&mut self, now: i64, batch: &[Settlement]) {
        for s in batch {
            self.g.settle(&self.meters, now, s, false);
        }
    }
    fn give_back(&mut self, _: i64, seq: u64, first_unused: i64, size: Weight) -> bool {
        self.g
            .give_back_sized(&self.meters, seq, first_unused, size)
    }
    fn state(&mut self) -> (Weight, u64, Vec<Option<i64>>) {
        (self.g.charged, self.g.seq, self.g.tats.clone())
    }
}

/// One global ask for records of `sizes`.
fn ask(sizes: &[Weight]) -> Ask<'_> {
    Ask {
        key: None,
        want: sizes.len() as u64,
        sizes,
        after: 0,
        every: 0,
        within: None,
    }
}

/// The reservation's grant in the harness's terms (slots at their ns).
fn granted(store: &mut dyn Store, sizes: &[Weight], horizon: i64) -> (u64, Vec<i64>, Weight, u64) {
    let reply = store.reserve(&[ask(sizes)], horizon).unwrap();
    let grant = &reply.grants[0];
    let slots = grant.slots.iter().map(|d| reply.now + d).collect();
    (grant.seq, slots, reply.mark.charged, reply.mark.life)
}

fn back(seq: u64, first_unused: i64, size: Weight) -> Back<'static> {
    Back {
        key: None,
        seq,
        first_unused,
        size,
    }
}

/// The state file in a directory of the test's, on a test clock.
struct File {
    store: FileStore,
    path: PathBuf,
}

impl File {
    fn new(dir: &Path, name: &str, meters: Vec<Meter>) -> File {
        let mut store = FileStore::new(dir, name, "test".into(), meters, None);
        store.clock = Some(0);
        assert!(store.hello().unwrap(), "a fresh state");
        let path = dir.join(format!("{name}.json"));
        File { store, path }
    }
}

impl Shared for File {
    fn reserve(
        &mut self,
        now: i64,
        sizes: &[Weight],
        horizon: i64,
    ) -> (u64, Vec<i64>, Weight, u64) {
        self.store.clock = Some(now);
        granted(&mut self.store, sizes, horizon)
    }
    fn settle(&mut self, now: i64, batch: &[Settlement]) {
        self.store.clock = Some(now);
        self.store.settle(batch).unwrap();
    }
    fn give_back(&mut self, now: i64, seq: u64, first_unused: i64, size: Weight) -> bool {
        self.store.clock = Some(now);
        self.store
            .give_back(&[back(seq, first_unused, size)])
            .unwrap()[0]
    }
    fn state(&mut self) -> (Weight, u64, Vec<Option<i64>>) {
        let text = std::fs::read_to_string(&self.path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let tats = v["tats"]
            .as_array()
            .unwrap()
            .iter()
            .map(serde_json::Value::as_i64)
            .collect();
        let mut charged = Weight::from(v["charged"].as_u64().unwrap());
        if let Some(more) = v.get("charged_more").and_then(serde_json::Value::as_array) {
            for (c, m) in more.iter().enumerate() {
                charged.0[c + 1] = m.as_u64().unwrap();
            }
        }
        (charged, v["seq"].as_u64().unwrap(), tats)
    }
}

/// Redis's script on a test clock: ns since [`EPOCH`], its epoch.
struct Script<'a> {
    store: RedisStore,
    redis: &'a Redis,
    key: String,
    limits: usize,
}

impl<'a> Script<'a> {
    fn new(redis: &'a Redis, name: &str, meters: Vec<Meter>) -> Script<'a> {
        let limits = meters.len();
        let mut store = RedisStore::new(&redis.url(), name, "test".into(), meters, None).unwrap();
        store.clock = Some((EPOCH, 0));
        assert!(store.hello().unwrap(), "a fresh state");
        let key = format!("drip:{{{name}}}");
        Script {
            store,
            redis,
            key,
            limits,
        }
    }
    fn at(&mut self, now: i64) {
        let s = 1_000_000_000;
        self.store.clock = Some((EPOCH + now.div_euclid(s), now.rem_euclid(s)));
    }
}

impl Shared for Script<'_> {
    fn reserve(
        &mut self,
        now: i64,
        sizes: &[Weight],
        horizon: i64,
    ) -> (u64, Vec<i64>, Weight, u64) {
        self.at(now);
        granted(&mut self.store, sizes, horizon)
    }
    fn settle(&mut self, now: i64, batch: &[Settlement]) {
        self.at(now);
        self.store.settle(batch).unwrap();
    }
    fn give_back(&mut self, now: i64, seq: u64, first_unused: i64, size: Weight) -> bool {
        self.at(now);
        self.store
            .give_back(&[back(seq, first_unused, size)])
            .unwrap()[0]
    }
    fn state(&mut self) -> (Weight, u64, Vec<Option<i64>>) {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&self.key).arg("charged").arg("charged2").arg("seq");
        for j in 1..=self.limits {
            cmd.arg(format!("tat{j}"));
        }
        let got: Vec<Option<i64>> = cmd.query(&mut self.redis.con()).unwrap();
        let n = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).unwrap();
        let mut charged = Weight::from(n(got[0]));
        charged.0[1] = n(got[1]);
        (charged, n(got[2]), got[3..].to_vec())
    }
}

/// Where a reserved slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Held,
    Given,
    /// Its record left; its job spent this much once settled.
    Left(Option<Weight>),
}

/// A slot a drip holds: when, for what estimate, its reservation (the
/// drip's count, the state's number), and the mark its settlement needs.
#[derive(Debug, Clone)]
struct Slot {
    due: i64,
    size: Weight,
    grant: usize,
    seq: u64,
    before: Weight,
    life: u64,
    fate: Fate,
}

#[derive(Debug, Default)]
struct Drip {
    slots: Vec<Slot>,
    grants: usize,
    exited: bool,
}

impl Drip {
    /// The settlement of slot `i`, whose job spent `spent`.
    fn settle(&mut self, i: usize, spent: Weight) -> Settlement {
        let s = &mut self.slots[i];
        s.fate = Fate::Left(Some(spent));
        Settlement {
            back: s.size.minus(&spent),
            more: spent.minus(&s.size),
            before: s.before,
            slot: s.size,
            life: s.life,
        }
    }

    /// The slots of records in flight (left, not settled).
    fn in_flight(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].fate == Fate::Left(None))
            .collect()
    }

    /// Give back the held slots of slot `i`'s reservation from `i` on.
    fn give_back(&mut self, shared: &mut dyn Shared, now: i64, i: usize) -> bool {
        let (grant, due, size, seq) = {
            let s = &self.slots[i];
            (s.grant, s.due, s.size, s.seq)
        };
        let given = shared.give_back(now, seq, due, size);
        if given {
            for s in &mut self.slots[i..] {
                if s.grant == grant && s.fate == Fate::Held {
                    s.fate = Fate::Given;
                }
            }
        }
        given
    }
}

/// What one step left: the slots granted, whether a give-back went, the
/// state.
type Trace = Vec<(Vec<i64>, bool, (Weight, u64, Vec<Option<i64>>))>;

/// The TAT of each limit that the records make by themselves: a lone
/// GCRA over the slots used, at their times, each charged what its job
/// spent of the limit's cost, or its estimate while in flight.
fn lone_tats(meters: &[Meter], drips: &[Drip]) -> Vec<Option<i64>> {
    let mut used: Vec<(i64, Weight)> = drips
        .iter()
        .flat_map(|d| &d.slots)
        .filter_map(|s| match s.fate {
            Fate::Left(spent) => Some((s.due, spent.unwrap_or(s.size))),
            _ => None,
        })
        .collect();
    used.sort_unstable_by_key(|u| u.0);
    meters
        .iter()
        .map(|m| {
            used.iter().fold(None, |tat: Option<i64>, &(due, spent)| {
                Some(tat.map_or(due, |t| t.max(due)) + m.cost(spent.on(m)))
            })
        })
        .collect()
}

/// Run `case` through `shared`, checking the model at every step.
fn run(case: &Case, shared: &mut dyn Shared) -> Result<Trace, TestCaseError> {
    let meters = meters(case.burst, case.records_beside, case.weights);
    let w = |pair: Pair| weight(pair, case.weights);
    let mut drips: Vec<Drip> = (0..case.drips).map(|_| Drip::default()).collect();
    let (mut now, mut charged) = (0i64, Weight::default());
    let mut trace = Trace::new();
    for (step, op) in case.ops.iter().enumerate() {
        let (mut slots, mut given) = (Vec::new(), false);
        let active = |d: usize| d % case.drips;
        match op {
            Op::Wait(ms) => now += ms * MS,
            Op::Reserve {
                drip,
                sizes,
                horizon,
            } => {
                let d = &mut drips[active(*drip)];
                if d.exited {
                    continue;
                }
                let sizes: Vec<Weight> = sizes.iter().map(|&p| w(p)).collect();
                let (seq, got, before, life) = shared.reserve(now, &sizes, horizon * MS);
                d.grants += 1;
                for (&due, &size) in got.iter().zip(&sizes) {
                    charged = charged.plus(&size);
                    d.slots.push(Slot {
                        due,
                        size,
                        grant: d.grants,
                        seq,
                        before,
                        life,
                        fate: Fate::Held,
                    });
                }
                slots = got;
            }
            Op::Send { drip, n } => {
                let d = &mut drips[active(*drip)];
                for s in d
                    .slots
                    .iter_mut()
                    .filter(|s| s.fate == Fate::Held && s.due <= now && !d.exited)
                    .take(*n)
                {
                    s.fate = Fate::Left(None);
                }
            }
            Op::Settle { drip, picks } => {
                let d = &mut drips[active(*drip)];
                let mut open = d.in_flight();
                let mut batch = Vec::new();
                for &(pick, spent) in picks {
                    if open.is_empty() {
                        break;
                    }
                    let i = open.remove(pick % open.len());
                    let s = d.settle(i, w(spent));
                    charged = charged.plus(&s.more);
                    batch.push(s);
                }
                if !batch.is_empty() {
                    shared.settle(now, &batch);
                }
            }
            Op::GiveBack { drip, from } => {
                let d = &mut drips[active(*drip)];
                let held: Vec<usize> = (0..d.slots.len())
                    .filter(|&i| d.slots[i].fate == Fate::Held)
                    .collect();
                if !held.is_empty() && !d.exited {
                    given = d.give_back(shared, now, held[from % held.len()]);
                }
            }
            Op::Exit { drip, spent } => {
                let d = &mut drips[active(*drip)];
                if d.exited {
                    continue;
                }
                d.exited = true;
                let tail = (0..d.slots.len())
                    .find(|&i| d.slots[i].grant == d.grants && d.slots[i].fate == Fate::Held);
                if let Some(i) = tail {
                    given = d.give_back(shared, now, i);
                }
                let batch: Vec<Settlement> = d
                    .in_flight()
                    .into_iter()
                    .enumerate()
                    .map(|(k, i)| d.settle(i, w(spent[k % spent.len()])))
                    .collect();
                for s in &batch {
                    charged = charged.plus(&s.more);
                }
                if !batch.is_empty() {
                    shared.settle(now, &batch);
                }
            }
        }
        let mut state = shared.state();
        // No limit used yet: no TAT stored, or none read.
        state.2.resize(meters.len(), None);
        prop_assert_eq!(state.0, charged, "charged, step {}: {:?}", step, op);
        let lone = lone_tats(&meters, &drips);
        for (j, (tat, lone)) in state.2.iter().zip(&lone).enumerate() {
            if let Some(lone) = lone {
                let tat = tat.map_or(now, |t| t.max(now));
                prop_assert!(
                    tat >= *lone,
                    "limit {} at step {} ({:?}): TAT {} ms below the records' own {} ms",
                    j,
                    step,
                    op,
                    tat / MS,
                    lone / MS
                );
            }
        }
        trace.push((slots, given, state));
    }
    Ok(trace)
}

/// `cases` cases, the same ones at every run, each through the arithmetic
/// and the stores `stores` makes for it (given the case's number and
/// limits): every one holds the model, and the stores go as the
/// arithmetic does.
fn check<'a>(
    (cases, weights): (u32, usize),
    stores: impl Fn(u32, Vec<Meter>) -> Vec<Box<dyn Shared + 'a>>,
) {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let n = std::cell::Cell::new(0u32);
    let outcome = runner.run(&case(weights), |case| {
        n.set(n.get() + 1);
        let meters = meters(case.burst, case.records_beside, case.weights);
        let mut mirror = Mirror {
            g: Gcra::default(),
            meters: meters.clone(),
        };
        let expect = run(&case, &mut mirror)?;
        for mut store in stores(n.get(), meters) {
            let got = run(&case, store.as_mut())?;
            prop_assert_eq!(&got, &expect, "a store went otherwise than the arithmetic");
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// Settlements interleaved with reservations, give-backs and exits, in
/// the arithmetic and through the state file: no charge is lost, and
/// nothing comes back beyond what the records left room for.
#[test]
fn settlements_interleaved_lose_no_charge_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    check((400, 1), |n, meters| {
        vec![Box::new(File::new(dir.path(), &format!("case{n}"), meters))]
    });
}

/// The same with two named costs of different weights, each slot
/// carrying both and each limit spending its own (#40: 12).
#[test]
fn two_costs_settlements_interleaved_lose_no_charge_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    check((400, 2), |n, meters| {
        vec![Box::new(File::new(dir.path(), &format!("two{n}"), meters))]
    });
}

/// The same through Redis's script.
#[test]
fn settlements_interleaved_lose_no_charge_through_redis() {
    if !common::have_redis() {
        return;
    }
    let redis = Redis::start();
    check((250, 1), |n, meters| {
        vec![Box::new(Script::new(&redis, &format!("case{n}"), meters))]
    });
}

/// Two named costs of different weights through Redis's script.
#[test]
fn two_costs_settlements_interleaved_lose_no_charge_through_redis() {
    if !common::have_redis() {
        return;
    }
    let redis = Redis::start();
    check((250, 2), |n, meters| {
        vec![Box::new(Script::new(&redis, &format!("two{n}"), meters))]
    });
}

/// The case: one drip, two records of estimate 1 in flight and a
/// third slot reserved with them; the first job reports 41, then the
/// drip exits, giving back the third slot. The debit stays charged: the
/// schedule 4 s ahead (at 10/s, burst 10), not taken back to the unused
/// slot (0.9 s).
#[test]
fn a_debit_is_not_given_back_with_the_slots_reserved_before_it() {
    let case = Case {
        burst: 10,
        records_beside: false,
        weights: 1,
        drips: 1,
        ops: vec![
            Op::Reserve {
                drip: 0,
                sizes: vec![[1, 0], [1, 0], [1, 0]],
                horizon: 100,
            },
            Op::Send { drip: 0, n: 2 },
            Op::Settle {
                drip: 0,
                picks: vec![(0, [41, 0])],
            },
            Op::Exit {
                drip: 0,
                spent: vec![[1, 0]],
            },
        ],
    };
    let dir = tempfile::tempdir().unwrap();
    let redis = common::have_redis().then(Redis::start);
    let meters = meters(10, false, 1);
    let mut stores: Vec<Box<dyn Shared>> = vec![
        Box::new(Mirror {
            g: Gcra::default(),
            meters: meters.clone(),
        }),
        Box::new(File::new(dir.path(), "issue", meters.clone())),
    ];
    if let Some(redis) = &redis {
        stores.push(Box::new(Script::new(redis, "issue", meters)));
    }
    for store in &mut stores {
        let trace = run(&case, store.as_mut()).unwrap_or_else(|e| panic!("{e}"));
        let (_, given, (charged, _, tats)) = trace.last().unwrap();
        assert!(!given, "the unused slot is not given back over the debit");
        assert_eq!(*charged, 43);
        assert_eq!(
            tats[0],
            Some(4300 * MS),
            "3 slots and 40 more at 100 ms each"
        );
    }
}
