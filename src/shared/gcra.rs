//! The shared schedule's arithmetic: reservations of departure slots on one
//! GCRA per limit, the same maths the Redis script runs (`script.lua`), in
//! Rust for the file backend and for tests on virtual time.
//!
//! GCRA (ITU-T I.371, virtual scheduling): each limit keeps a *theoretical
//! arrival time* `TAT`; a departure at `t` is allowed when `t ≥ TAT − τ`,
//! with the emission interval `T = period / count` and the burst tolerance
//! `τ = (burst − 1) · T`, and moves `TAT` to `max(TAT, t) + T`. A
//! *reservation* takes the next departure slots in one step instead of
//! asking whether one may leave now: slot `i` departs at
//! `d_i = max(now, max_j(TAT_j − τ_j))`, so the departures of every
//! participant together keep each limit's bound: no window of length `W`
//! holds more than `burst + W / T` of them.
//!
//! A byte limit (`--byte-rate`) is the same GCRA counting bytes, with the
//! local pacer's debt rule ([`crate::pacer::Pacer`]): each slot is
//! reserved for a size `s` (the record it is for), may leave when
//! `t ≥ TAT − (burst − min(s, burst)) · T`, and moves `TAT` to
//! `max(TAT, t) + s · T`. A record limit counts the slot as 1 whatever its
//! size. A record larger than the burst leaves once a full burst is saved
//! and puts the schedule in debt for the rest.
//!
//! Times are integer nanoseconds on the shared clock (`CLOCK_MONOTONIC` on
//! one host, the Redis server's `TIME` across hosts); `T` is rounded up to
//! a whole nanosecond, which can only slow the schedule (by less than one
//! part in `T`). A byte limit's `s · T` is computed as `s · period / count`
//! in IEEE doubles (as Lua does), rounded up, and its reach
//! `(burst − min(s, burst)) · T` rounded down: both only slow it. Pure: no
//! clock, no I/O.
//!
//! The limits per key keep one GCRA per key with the one `--key-rate`
//! limit ([`KeyBook`], as the state file stores them; `keys.lua` runs the
//! same arithmetic in Redis).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rate::Rate;
use crate::schedule::{Limit, Unit};

/// A day, ns.
const DAY: i64 = 86_400_000_000_000;

/// The farthest ahead of now (ns) a shared slot is granted, and the most
/// that one limit's interval, its burst (tolerance and one interval) or
/// one slot's charge may span: 32 days. A limit beyond it is refused
/// under `--share` ([`out_of_range`]); a record weighing more is charged
/// as the most a slot may be ([`most_weight`]).
///
/// Why a bound: the Redis script's numbers are Lua's doubles, exact
/// under 2^53 (104 days in ns), and the state file's are `i64` ns. With
/// slots granted at most 32 days ahead, each charging at most 32 days,
/// and a settlement's charge or a change of limits at most 32 days more,
/// no theoretical arrival time passes now + [`MOST_DEBT`] in either
/// backend, so both run the same exact arithmetic over the whole range.
pub const MOST_AHEAD: i64 = 32 * DAY;

/// The most (ns) a shared schedule is ever in debt: no `TAT` is stored
/// past now + 96 days (3 × [`MOST_AHEAD`]); a charge beyond it is
/// charged up to it (only settlements charging many times a slot's most,
/// one after another, come near).
pub const MOST_DEBT: i64 = 3 * MOST_AHEAD;

// Redis's times are ns since an epoch moved on daily: a day and the most
// debt stay exact in Lua's doubles.
const _: () = assert!(MOST_DEBT + 2 * DAY < 1 << 53);

/// Why `limit` cannot be shared, or `None`: a record limit slower than
/// one record in [`MOST_AHEAD`] (32 days), a byte or cost limit slower
/// than one unit in it, or a burst spanning more of it.
pub fn out_of_range(limit: &Limit) -> Option<String> {
    let Rate::Limited { count, period_ns } = limit.rate else {
        return None;
    };
    let most = MOST_AHEAD as u128;
    let unit = match limit.unit {
        Unit::Records => "record",
        Unit::Bytes => "byte",
        Unit::Cost => "unit of cost",
    };
    if period_ns > most * count {
        return Some(format!(
            "slower than one {unit} in 32 days, the slowest a shared limit keeps"
        ));
    }
    let span = match limit.unit {
        Unit::Records => u128::from(limit.burst) * period_ns.div_ceil(count),
        Unit::Bytes | Unit::Cost => (u128::from(limit.burst) * period_ns).div_ceil(count),
    };
    (span > most).then(|| {
        "its burst spans more than 32 days of its rate, the most a shared limit keeps".into()
    })
}

/// The most a shared slot may be reserved for (bytes, or cost) under
/// `meters`: what charges each weighed limit at most [`MOST_AHEAD`]
/// (`u64::MAX` with no weighed limit; at least 1 for a limit in range).
/// Of the first weight; [`most_weights`] gives each.
pub fn most_weight(meters: &[Meter]) -> u64 {
    most_weights(meters).0[0]
}

/// [`most_weight`] of each of a slot's weights: for weight `c`, what
/// charges each limit spending it at most [`MOST_AHEAD`] (`u64::MAX`
/// where no limit spends it).
pub fn most_weights(meters: &[Meter]) -> Weight {
    let mut most = Weight([u64::MAX; WEIGHTS]);
    for m in meters {
        if let Meter::Bytes(b) = m {
            let c = b.weight.min(WEIGHTS - 1);
            most.0[c] = most.0[c].min(b.most_bytes());
        }
    }
    most
}

/// How many weights a shared slot carries at most: one for each set of
/// costs a cost limit spends (`--cost-rate in=…`, `out=…`, `in+out=…`),
/// or one for the bytes (`--byte-rate`), or the one cost.
pub const WEIGHTS: usize = 4;

/// What a shared slot is reserved for, and what it charges: one weight
/// for each set of costs the shared limits spend (bytes, or cost, the
/// weighed limit's unit), each limit spending its own ([`ByteStep::weight`]);
/// a record limit counts the slot as 1 whatever it weighs. Where every
/// weighed limit spends the same (bytes, the one cost, or named costs all
/// spending the same ones), only the first weight is used, as before
/// slots carried several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Weight(pub [u64; WEIGHTS]);

impl Weight {
    /// The weight limit `m` spends (1 for a record limit).
    pub fn on(&self, m: &Meter) -> i64 {
        match m {
            Meter::Records(_) => 1,
            Meter::Bytes(b) => i64::try_from(self.0[b.weight.min(WEIGHTS - 1)]).unwrap_or(i64::MAX),
        }
    }

    /// Whether a slot reserved for this may carry a record weighing
    /// `other`: it weighs at least as much in every weight.
    pub fn covers(&self, other: &Weight) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| a >= b)
    }

    /// Each weight of `self` less `other`'s, at least 0.
    pub fn minus(&self, other: &Weight) -> Weight {
        Weight(std::array::from_fn(|c| {
            self.0[c].saturating_sub(other.0[c])
        }))
    }

    /// Each weight of `self` and `other` added (saturating).
    pub fn plus(&self, other: &Weight) -> Weight {
        Weight(std::array::from_fn(|c| {
            self.0[c].saturating_add(other.0[c])
        }))
    }

    /// Each weight the lesser of `self`'s and `other`'s.
    pub fn least(&self, other: &Weight) -> Weight {
        Weight(std::array::from_fn(|c| self.0[c].min(other.0[c])))
    }

    /// Whether every weight is 0.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The heaviest of its weights (for pacing by the slot's length).
    pub fn heaviest(&self) -> u64 {
        self.0.iter().copied().max().unwrap_or(0)
    }
}

impl PartialEq<u64> for Weight {
    /// Whether it is the slot of one weight `other` ([`Weight::from`]).
    fn eq(&self, other: &u64) -> bool {
        *self == Weight::from(*other)
    }
}

impl From<u64> for Weight {
    /// A slot of one weight (bytes, or the one cost): the first.
    fn from(w: u64) -> Weight {
        let mut all = [0; WEIGHTS];
        all[0] = w;
        Weight(all)
    }
}

/// One limit's constants, in ns: emission interval `T` and burst tolerance
/// `τ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Emission interval `T` = period / count, rounded up, ns (≥ 1).
    pub interval: i64,
    /// Burst tolerance `τ` = (burst − 1) · `T`, ns.
    pub tolerance: i64,
}

impl Step {
    /// The constants of a record limit.
    ///
    /// # Panics
    /// If the rate is unlimited (the command line never shares one).
    pub fn of(limit: &Limit) -> Step {
        let Rate::Limited { count, period_ns } = limit.rate else {
            panic!("an unlimited rate is no limit");
        };
        let interval = i64::try_from(period_ns.div_ceil(count).max(1)).unwrap_or(i64::MAX);
        let burst = i64::try_from(limit.burst).unwrap_or(i64::MAX);
        Step {
            interval,
            tolerance: interval.saturating_mul(burst - 1),
        }
    }
}

/// A byte limit's constants: its rate, `count` bytes per `period` ns, and
/// its `burst` in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteStep {
    /// Bytes per period (≥ 1).
    pub count: i64,
    /// The period, ns.
    pub period: i64,
    /// Bytes that may leave back to back (≥ 1).
    pub burst: i64,
    /// Which of a slot's weights it spends ([`Weight`]; 0 but for cost
    /// limits spending other costs than the first one's).
    pub weight: usize,
}

impl ByteStep {
    /// `bytes · period / count` ns in IEEE doubles, as the script computes
    /// it.
    fn ns(&self, bytes: i64) -> f64 {
        bytes as f64 * self.period as f64 / self.count as f64
    }

    /// The schedule (ns) a slot of `bytes` takes, rounded up.
    pub fn cost(&self, bytes: i64) -> i64 {
        self.ns(bytes).ceil() as i64
    }

    /// How long (ns) before `TAT` a slot of `bytes` may leave: the burst
    /// less what the slot counts (at most the burst), rounded down.
    pub fn reach(&self, bytes: i64) -> i64 {
        self.ns(self.burst - bytes.clamp(0, self.burst)).floor() as i64
    }

    /// The schedule (ns) a give-back of `bytes` returns, rounded down.
    pub fn back(&self, bytes: i64) -> i64 {
        self.ns(bytes).floor() as i64
    }

    /// The most bytes whose [`ByteStep::cost`] is within [`MOST_AHEAD`]
    /// (at least 1).
    fn most_bytes(&self) -> u64 {
        let exact = MOST_AHEAD as u128 * self.count as u128 / self.period as u128;
        let mut most = i64::try_from(exact).unwrap_or(i64::MAX).min(1 << 53);
        // The doubles may round a cost up past the bound: step back.
        while most > 1 && self.cost(most) > MOST_AHEAD {
            most -= 1 + (most >> 40);
        }
        most.max(1).unsigned_abs()
    }
}

/// One shared limit: of records (every slot costs 1) or of bytes (a slot
/// costs the size it was reserved for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meter {
    /// A `--rate` limit.
    Records(Step),
    /// A `--byte-rate` limit.
    Bytes(ByteStep),
}

impl Meter {
    /// The constants of `limit`.
    ///
    /// # Panics
    /// If the rate is unlimited (the command line never shares one). A cost
    /// limit is metered as a byte limit is, a slot costing the cost it was
    /// reserved for.
    pub fn of(limit: &Limit) -> Meter {
        match limit.unit {
            Unit::Records => Meter::Records(Step::of(limit)),
            Unit::Bytes | Unit::Cost => {
                let Rate::Limited { count, period_ns } = limit.rate else {
                    panic!("an unlimited rate is no limit");
                };
                let int = |v: u128| i64::try_from(v).unwrap_or(i64::MAX).max(1);
                Meter::Bytes(ByteStep {
                    count: int(count),
                    period: int(period_ns),
                    burst: int(u128::from(limit.burst)),
                    weight: 0,
                })
            }
        }
    }

    /// The constants of `limit`, spending weight `weight` of a slot when
    /// it weighs (bytes, or cost).
    pub fn spending(limit: &Limit, weight: usize) -> Meter {
        match Meter::of(limit) {
            Meter::Bytes(b) => Meter::Bytes(ByteStep { weight, ..b }),
            records => records,
        }
    }

    /// The schedule (ns) a slot reserved for `size` bytes takes.
    pub fn cost(&self, size: i64) -> i64 {
        match self {
            Meter::Records(s) => s.interval,
            Meter::Bytes(b) => b.cost(size),
        }
    }

    /// How long (ns) before `TAT` a slot reserved for `size` bytes may
    /// leave.
    pub fn reach(&self, size: i64) -> i64 {
        match self {
            Meter::Records(s) => s.tolerance,
            Meter::Bytes(b) => b.reach(size),
        }
    }

    /// Whether a slot weighing `size` on it waits for it: a record limit
    /// always; a weighed limit unless the slot weighs nothing on it (a
    /// record costing 0 waits for no cost limit, as alone: it spends
    /// none of it).
    pub fn binds(&self, size: i64) -> bool {
        !matches!(self, Meter::Bytes(_)) || size > 0
    }

    /// Whether it counts bytes.
    pub fn weighs_bytes(&self) -> bool {
        matches!(self, Meter::Bytes(_))
    }
}

impl From<Step> for Meter {
    fn from(step: Step) -> Meter {
        Meter::Records(step)
    }
}

/// The limits as the shared state records them, for the agreement check:
/// `count/period_ns:burst` for each record limit, `countB/period_ns:burstB`
/// for each byte limit, comma-separated.
pub fn spec(limits: &[Limit]) -> String {
    spec_tagged(limits, &[])
}

/// [`spec`], each limit followed by `@` and its tag where `tags` gives
/// one (a cost limit's costs, `in`, `in+out`, where the cost limits spend
/// different costs: [`meters`]).
pub fn spec_tagged(limits: &[Limit], tags: &[Option<String>]) -> String {
    limits
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let b = match l.unit {
                Unit::Records => "",
                Unit::Bytes => "B",
                Unit::Cost => "C",
            };
            let tag = match tags.get(i) {
                Some(Some(t)) => format!("@{t}"),
                _ => String::new(),
            };
            match l.rate {
                Rate::Limited { count, period_ns } => {
                    format!("{count}{b}/{period_ns}ns:{}{b}{tag}", l.burst)
                }
                Rate::Unlimited => "inf".into(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The tag of each global limit a [`spec_tagged`] records (`None`:
/// untagged), in its order.
pub fn tags_of(spec: &str) -> Vec<Option<String>> {
    let global = spec.split_once("key:").map_or(spec, |(g, _)| g);
    global
        .split(',')
        .filter(|one| !one.is_empty())
        .map(|one| one.split_once('@').map(|(_, t)| t.to_string()))
        .collect()
}

/// The meters of `limits`, tagged as `tags` says ([`spec_tagged`]): the
/// limits of one tag spend one weight of a slot, the first tag's the
/// first, and so on, in their order; untagged limits the first.
/// Tags beyond [`WEIGHTS`] spend the last (the command line refuses so
/// many).
pub fn meters(limits: &[Limit], tags: &[Option<String>]) -> Vec<Meter> {
    let mut seen: Vec<&str> = Vec::new();
    limits
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let weight = match tags.get(i) {
                Some(Some(t)) => match seen.iter().position(|s| s == t) {
                    Some(at) => at,
                    None => {
                        seen.push(t);
                        seen.len() - 1
                    }
                },
                _ => 0,
            };
            Meter::spending(l, weight.min(WEIGHTS - 1))
        })
        .collect()
}

/// Each weight's tag, in the order [`meters`] numbers them.
pub fn weight_tags(tags: &[Option<String>]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for t in tags.iter().flatten() {
        if !seen.contains(t) {
            seen.push(t.clone());
        }
    }
    seen
}

/// The global limits a [`spec`] records, in its order; `None` when it
/// holds a key limit (`key:`), an unlimited rate, or text drip does not
/// write.
pub fn limits_of(spec: &str) -> Option<Vec<Limit>> {
    spec.split(',')
        .map(|one| {
            let (count, rest) = one.split_once('/')?;
            let (period, burst) = rest.split_once("ns:")?;
            let burst = burst.split_once('@').map_or(burst, |(b, _)| b);
            let (unit, count, burst) = match (count.strip_suffix('B'), count.strip_suffix('C')) {
                (Some(c), _) => (Unit::Bytes, c, burst.strip_suffix('B')?),
                (_, Some(c)) => (Unit::Cost, c, burst.strip_suffix('C')?),
                _ => (Unit::Records, count, burst),
            };
            Some(Limit {
                rate: Rate::Limited {
                    count: count.parse().ok()?,
                    period_ns: period.parse().ok()?,
                },
                burst: burst.parse().ok()?,
                unit,
            })
        })
        .collect()
}

/// A rate as people write it: a whole count per second, minute, hour or
/// day when there is one (`100/min`, not `1.666667/s`), else
/// `COUNT/PERIOD` (`3/7s`).
fn readable(count: u128, period_ns: u128) -> String {
    const UNITS: [(&str, u128); 4] = [
        ("s", 1_000_000_000),
        ("min", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
    ];
    for (unit, ns) in UNITS {
        let scaled = count.saturating_mul(ns);
        if period_ns > 0 && scaled % period_ns == 0 {
            return format!("{}/{unit}", scaled / period_ns);
        }
    }
    let period = Duration::from_nanos(u64::try_from(period_ns).unwrap_or(u64::MAX));
    let period = humantime::format_duration(period).to_string();
    format!("{count}/{}", period.replace(' ', ""))
}

/// The limits a [`spec`] describes, for messages: `10/s, burst 1`, a byte
/// limit as `2048 bytes/s, burst 1024 bytes`, a cost limit as
/// `500 cost/s, burst 100 cost`, and a key limit as
/// `per key 5/s, burst 1`.
pub fn describe(spec: &str) -> String {
    spec.split(',')
        .map(|one| {
            let (per_key, one) = match one.strip_prefix("key:") {
                Some(rest) => ("per key ", rest),
                None => ("", one),
            };
            let (one, tag) = match one.split_once('@') {
                Some((one, tag)) if !tag.is_empty() => (one, format!("{tag}=")),
                Some((one, _)) => (one, String::new()),
                None => (one, String::new()),
            };
            let parsed = one.split_once('/').and_then(|(count, rest)| {
                let (period, burst) = rest.split_once("ns:")?;
                let (count, burst, unit) = match (count.strip_suffix('B'), count.strip_suffix('C'))
                {
                    (Some(c), _) => (c, burst.strip_suffix('B')?, " bytes"),
                    (_, Some(c)) => (c, burst.strip_suffix('C')?, " cost"),
                    _ => (count, burst, ""),
                };
                let rate = readable(count.parse().ok()?, period.parse().ok()?);
                let rate = rate.replacen('/', &format!("{unit}/"), 1);
                Some(format!("{per_key}{tag}{rate}, burst {burst}{unit}"))
            });
            parsed.unwrap_or_else(|| one.to_string())
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The shared state of one set of limits: a `TAT` per limit (`None`: never
/// used, as after expiry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gcra {
    /// Theoretical arrival time of each limit, ns on the shared clock.
    pub tats: Vec<Option<i64>>,
    /// Reservations, and debits of settlements, made so far (to know,
    /// when giving slots back, whether anyone reserved or was charged
    /// since: a give-back after a debit would take the debit back too).
    pub seq: u64,
    /// What the weighed limits were charged in this life of the state
    /// (bytes, or cost), each weight apart: every slot's weights as it is
    /// reserved, and every debit of a settlement. Monotone: slots given
    /// back are not taken off (a give-back's floor only rises by it).
    pub charged: Weight,
    /// The latest departure slot granted, ns on the shared clock.
    pub last: Option<i64>,
    /// Which life of the state this is: set by the store when the state
    /// starts afresh (its clock's time then), moved on when `drip ctl`
    /// changes its limits ([`Gcra::relimit`]). A settlement of another
    /// life gives nothing back.
    pub life: u64,
}

/// A record's settlement on the shared weighed (cost) limits
/// (`--settle`): what its slot was charged beyond what it really spent
/// (`back`) or below it (`more`), and where the state stood before the
/// reservation of its slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settlement {
    /// Units (cost) to give back: the overestimate, of each weight.
    pub back: Weight,
    /// Units to charge more: the underestimate, of each weight.
    pub more: Weight,
    /// The state's [`Gcra::charged`] before the reservation that granted
    /// the record's slot.
    pub before: Weight,
    /// What the record's slot was charged (the weights it was reserved
    /// for): no slot after the record's spent it.
    pub slot: Weight,
    /// The state's [`Gcra::life`] then.
    pub life: u64,
}

impl Settlement {
    /// `other` folded into this one (the same life): what both give back
    /// and charge, from the earlier `before` and no slot (a floor at
    /// least either's), which gives back no more than the two one after
    /// the other would.
    pub fn fold(&mut self, other: &Settlement) {
        self.back = self.back.plus(&other.back);
        self.more = self.more.plus(&other.more);
        self.before = self.before.least(&other.before);
        self.slot = Weight::default();
    }
}

impl Gcra {
    /// New limits (`meters`) from `now` on (`drip ctl NAME rate` on a
    /// shared drip): every slot already reserved under the old limits
    /// stays, and the new schedule starts after the last of them, at
    /// `max(now, every old TAT)`, with no credit (each new `TAT` is its
    /// limit's whole tolerance past that start, so no burst is saved up),
    /// and the reservation number moves on, so no slot of the old limits
    /// goes back into the new schedule.
    pub fn relimit(&mut self, meters: &[Meter], now: i64) {
        let start = self.tats.iter().flatten().copied().fold(now, i64::max);
        let most = now.saturating_add(MOST_DEBT);
        self.tats = meters
            .iter()
            .map(|m| Some(start.saturating_add(m.reach(0)).min(most)))
            .collect();
        self.seq += 1;
        self.life = self.life.wrapping_add(1);
    }

    /// Reserve up to `want` (≥ 1) departure slots at `now`: every slot
    /// due by `now + horizon`, and always at least one. Returns their
    /// departure times in order (ns, never before `now`).
    pub fn reserve(&mut self, steps: &[Step], now: i64, want: u64, horizon: i64) -> Vec<i64> {
        let meters: Vec<Meter> = steps.iter().copied().map(Meter::from).collect();
        self.reserve_sized::<u64>(&meters, now, want, &[], horizon)
    }

    /// Reserve up to `want` (≥ 1) departure slots at `now` under `meters`,
    /// slot `j` for a record of `sizes[j]` (bytes, or the weights of its
    /// costs: [`Weight`]; 1 past the end of `sizes`): every slot due by
    /// `now + horizon`, and always at least one. Returns their departure
    /// times in order (ns, never before `now`).
    pub fn reserve_sized<W: Copy + Into<Weight>>(
        &mut self,
        meters: &[Meter],
        now: i64,
        want: u64,
        sizes: &[W],
        horizon: i64,
    ) -> Vec<i64> {
        self.tats.resize(meters.len(), None);
        let mut tats: Vec<i64> = self
            .tats
            .iter()
            .map(|t| t.unwrap_or(now).max(now))
            .collect();
        let mut out = Vec::new();
        while (out.len() as u64) < want.max(1) {
            let size: Weight = sizes.get(out.len()).map_or(Weight::from(1), |&s| s.into());
            let due = meters
                .iter()
                .zip(&tats)
                .filter(|(m, _)| m.binds(size.on(m)))
                .map(|(m, &tat)| tat.saturating_sub(m.reach(size.on(m))))
                .fold(now, i64::max);
            if !out.is_empty() && due > now.saturating_add(horizon) {
                break;
            }
            let most = now.saturating_add(MOST_DEBT);
            for (m, tat) in meters.iter().zip(tats.iter_mut()) {
                *tat = (*tat).max(due).saturating_add(m.cost(size.on(m))).min(most);
            }
            self.charged = self.charged.plus(&size);
            self.last = Some(self.last.map_or(due, |l| l.max(due)));
            out.push(due);
        }
        self.tats = tats.into_iter().map(Some).collect();
        self.seq += 1;
        out
    }

    /// Settle a record at `now` (`s`, [`Settlement`]) on the weighed
    /// limits of `meters` (a record limit is not settled): charge what it
    /// spent beyond its slot as a charge that is not refused (`TAT =
    /// max(TAT, now) + more`, and the reservation number moves on, so
    /// no slot granted before it goes back over it: [`Gcra::give_back`]
    /// would take the schedule back to before that slot, the debit with
    /// it), then give back what it did not spend, but
    /// never below its *floor*, nor above where the `TAT` stands, and only
    /// in the life it was charged in (not in a `fresh` state). Returns
    /// whether it gave back.
    ///
    /// The floor, `max(now, last) + (charged − s.before − s.slot) · T`:
    /// the `TAT` the charges after the record make by themselves is at
    /// most that, as every slot granted since its reservation is due by
    /// `last` (or now: the record's own has passed, its job is done) and
    /// they sum to at most `charged − s.before` less its own slot (with
    /// slots before it in the same reservation, and slots given back
    /// since). So the `TAT` never falls below
    /// the one the same slots would make charged what they really spent,
    /// as long as each record spent at most its slot, and the bound
    /// `burst + rate × W` holds for what was spent (`settle.rs`).
    pub fn settle(&mut self, meters: &[Meter], now: i64, s: &Settlement, fresh: bool) -> bool {
        self.tats.resize(meters.len(), None);
        if !s.more.is_zero() {
            let most = now.saturating_add(MOST_DEBT);
            for (m, tat) in meters.iter().zip(self.tats.iter_mut()) {
                let more = s.more.on(m);
                if m.weighs_bytes() && more > 0 {
                    let charged = tat.unwrap_or(now).max(now).saturating_add(m.cost(more));
                    *tat = Some(charged.min(most));
                }
            }
            self.charged = self.charged.plus(&s.more);
            self.seq += 1;
        }
        if s.back.is_zero() || fresh || s.life != self.life {
            return false;
        }
        let since = self.charged.minus(&s.before).minus(&s.slot);
        let base = self.last.map_or(now, |l| l.max(now));
        for (m, tat) in meters.iter().zip(self.tats.iter_mut()) {
            let (Meter::Bytes(b), Some(t)) = (m, tat.as_mut()) else {
                continue;
            };
            let floor = base.saturating_add(b.cost(since.on(m)));
            *t = (*t).min(t.saturating_sub(b.back(s.back.on(m))).max(floor));
        }
        true
    }

    /// [`Gcra::reserve_sized`], but only when the first slot is due within
    /// `within` ns of `now` (`None`: within [`MOST_AHEAD`], as any
    /// `within` is at most): `Err(due)`, when it would be due, nothing
    /// reserved.
    ///
    /// # Errors
    /// The first slot is not due in time.
    pub fn reserve_within<W: Copy + Into<Weight>>(
        &mut self,
        meters: &[Meter],
        now: i64,
        (want, sizes): (u64, &[W]),
        horizon: i64,
        within: Option<i64>,
    ) -> Result<Vec<i64>, i64> {
        let within = within.map_or(MOST_AHEAD, |w| w.min(MOST_AHEAD));
        let size: Weight = sizes.first().map_or(Weight::from(1), |&s| s.into());
        self.tats.resize(meters.len(), None);
        let due = meters
            .iter()
            .zip(&self.tats)
            .filter(|(m, _)| m.binds(size.on(m)))
            .map(|(m, tat)| {
                let reach = m.reach(size.on(m));
                tat.unwrap_or(now).max(now).saturating_sub(reach)
            })
            .fold(now, i64::max);
        if due > now.saturating_add(within) {
            return Err(due);
        }
        Ok(self.reserve_sized(meters, now, want, sizes, horizon))
    }

    /// Give back the slots from `first_unused` (a departure time this
    /// state granted) on, when no one reserved (nor was a settlement's
    /// debit charged) after reservation `seq`: the schedule goes back to
    /// where it stood before that slot, or later. Returns whether it did.
    pub fn give_back(&mut self, steps: &[Step], seq: u64, first_unused: i64) -> bool {
        let meters: Vec<Meter> = steps.iter().copied().map(Meter::from).collect();
        self.give_back_sized(&meters, seq, first_unused, 1u64)
    }

    /// Give back the slots from `first_unused` (a departure time this
    /// state granted, for a record of `size` bytes) on, when no one
    /// reserved after reservation `seq`: each `TAT` goes back to at most
    /// `first_unused` plus that slot's reach, where it stood before that
    /// slot, or later. Returns whether it did.
    pub fn give_back_sized(
        &mut self,
        meters: &[Meter],
        seq: u64,
        first_unused: i64,
        size: impl Into<Weight>,
    ) -> bool {
        if seq != self.seq {
            return false;
        }
        let size: Weight = size.into();
        for (m, tat) in meters.iter().zip(self.tats.iter_mut()) {
            // A limit the slot did not wait for: where it stood before
            // the slot is not known from the slot, and it stays.
            if let Some(t) = tat.as_mut().filter(|_| m.binds(size.on(m))) {
                *t = (*t).min(first_unused.saturating_add(m.reach(size.on(m))));
            }
        }
        true
    }

    /// Take one slot for a record of `size` (bytes, or cost) under
    /// `meters` at `now` (`drip take`), but only when it is due within
    /// `within` ns: `Ok(due)`, the slot taken (the state moved on, as one
    /// reservation of one slot); `Err(due)`, when it would be due, the
    /// state left as it was (nothing spent).
    pub fn take(
        &mut self,
        meters: &[Meter],
        now: i64,
        size: impl Into<Weight>,
        within: i64,
    ) -> Result<i64, i64> {
        let size: Weight = size.into();
        self.reserve_within(meters, now, (1, &[size]), 0, Some(within))
            .map(|slots| slots[0])
    }

    /// When the state is no longer needed (ns): once every `TAT` has
    /// passed, a fresh state schedules exactly the same.
    pub fn idle_from(&self) -> Option<i64> {
        self.tats.iter().flatten().copied().max()
    }
}

/// One key's shared schedule in the state file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    /// Reservations made for this key (for giving back).
    pub seq: u64,
    /// Its theoretical arrival time, ns on the shared clock.
    pub tat: i64,
}

/// The per-key schedules of a state file, by `hex` key. Pure: times are
/// the caller's (ns on the shared clock).
///
/// Only keys whose schedule has not rested are kept ([`KeyBook::prune`]):
/// a key whose `TAT` has passed schedules exactly as a new one, so the
/// book holds the keys busy within about the last second of schedule, and
/// each call reads and writes all of them (O(busy keys) per call).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyBook {
    /// Schedules by key.
    pub keys: BTreeMap<String, KeyState>,
}

impl KeyBook {
    /// Reserve up to `want` slots of key `key` at `now` (as
    /// [`Gcra::reserve`]). Returns the reservation's seq and the departure
    /// times (ns).
    pub fn reserve(
        &mut self,
        step: Step,
        now: i64,
        key: &str,
        want: u64,
        horizon: i64,
    ) -> (u64, Vec<i64>) {
        self.reserve_at(step, now, key, KeyAsk::new(want), horizon)
    }

    /// Reserve up to `ask.want` (≥ 1) slots of key `key` at `now`, slot `j`
    /// no earlier than `now + ask.after + j × ask.every`: every slot due
    /// within `horizon` ns of the first one's earliest time, and at least
    /// one. Each slot is an arrival on the key's GCRA at its own time, so
    /// the key's bound holds whatever the order of the reservations (see
    /// `docs/architecture.md`). Returns the reservation's seq and the
    /// departure times (ns).
    pub fn reserve_at(
        &mut self,
        step: Step,
        now: i64,
        key: &str,
        ask: KeyAsk,
        horizon: i64,
    ) -> (u64, Vec<i64>) {
        let old = self.keys.get(key).copied();
        let start = now.saturating_add(ask.after.max(0));
        let mut tat = old.map_or(now, |k| k.tat).max(now);
        let mut slots = Vec::new();
        while (slots.len() as u64) < ask.want.max(1) {
            let from = start.saturating_add(ask.every.max(0).saturating_mul(slots.len() as i64));
            let due = from.max(tat.saturating_sub(step.tolerance));
            if !slots.is_empty() && due > start.saturating_add(horizon) {
                break;
            }
            tat = tat.max(due).saturating_add(step.interval);
            slots.push(due);
        }
        let seq = old.map_or(0, |k| k.seq) + 1;
        self.keys.insert(key.to_string(), KeyState { seq, tat });
        (seq, slots)
    }

    /// Give back key `key`'s slots from `first_unused` on, if no one
    /// reserved for it after reservation `seq` (as [`Gcra::give_back`]).
    pub fn give_back(&mut self, step: Step, key: &str, seq: u64, first_unused: i64) -> bool {
        let Some(k) = self.keys.get_mut(key) else {
            return false;
        };
        let mut g = Gcra {
            tats: vec![Some(k.tat)],
            seq: k.seq,
            ..Gcra::default()
        };
        let back = g.give_back(&[step], seq, first_unused);
        k.tat = g.idle_from().unwrap_or(k.tat);
        back
    }

    /// New key limits (each key's `step_of` its hex key) from `now` on
    /// (`drip ctl`, as [`Gcra::relimit`] for each key): each key's slots
    /// already reserved
    /// stay, its new schedule starts after the last of them with no
    /// credit (its `TAT` a whole tolerance past it), and its reservation
    /// number moves on, so no old slot goes back into the new schedule.
    /// Keys whose schedule has rested are forgotten first, as at every
    /// call.
    pub fn relimit(&mut self, step_of: &dyn Fn(&str) -> Option<Step>, now: i64) {
        self.prune(now);
        for (key, k) in &mut self.keys {
            let tolerance = step_of(key).map_or(0, |s| s.tolerance);
            k.tat = k.tat.saturating_add(tolerance);
            k.seq += 1;
        }
    }

    /// Forget the keys whose schedule has rested by `now` (their `TAT` has
    /// passed): a new schedule departs exactly as theirs would.
    pub fn prune(&mut self, now: i64) {
        self.keys.retain(|_, k| k.tat > now);
    }

    /// The latest `TAT` of any key (ns).
    pub fn idle_from(&self) -> Option<i64> {
        self.keys.values().map(|k| k.tat).max()
    }
}

/// What one key asks of a reservation: up to `want` slots, slot `j` no
/// earlier than `after + j × every` ns after the call's time (the times
/// the global limits let the key's records go, when they bind; 0 and 0:
/// as soon as the key's own limit lets them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAsk {
    /// Slots wanted (at least one is reserved).
    pub want: u64,
    /// The first slot's earliest time, ns after the call's.
    pub after: i64,
    /// The least spacing of the slots' earliest times, ns.
    pub every: i64,
}

impl KeyAsk {
    /// Up to `want` slots, as soon as the key's limit lets them.
    pub fn new(want: u64) -> KeyAsk {
        KeyAsk {
            want,
            after: 0,
            every: 0,
        }
    }
}

/// A key's bytes as they appear in the shared state: lowercase hex.
pub fn hex(key: &[u8]) -> String {
    use std::fmt::Write;
    key.iter()
        .fold(String::with_capacity(key.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The bytes [`hex`] wrote; `None` for text it does not write.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The limits in one order, whatever order they were given in: records
/// before bytes, then the tightest rate first, then the smaller burst,
/// then by their [`gcra::spec`] text. Drips given the same set thus store
/// and compare the same spec, and keep the state's per-limit `TAT`s in
/// the same order.
pub fn canonical(limits: &[Limit]) -> Vec<Limit> {
    canonical_tagged(limits, &[]).0
}

/// [`canonical`] of `limits` tagged `tags` (one for each, or none), the
/// tags kept beside their limits: the same tagged set in any order is one
/// spec, one order of `TAT`s. Limits alike but for their tags are ordered
/// by their tags.
pub fn canonical_tagged(
    limits: &[Limit],
    tags: &[Option<String>],
) -> (Vec<Limit>, Vec<Option<String>>) {
    let mut sorted: Vec<(Limit, Option<String>)> = limits
        .iter()
        .enumerate()
        .map(|(i, l)| (*l, tags.get(i).cloned().flatten()))
        .collect();
    sorted.sort_by(|(a, at), (b, bt)| {
        (a.unit != Unit::Records)
            .cmp(&(b.unit != Unit::Records))
            .then(a.rate.per_second().total_cmp(&b.rate.per_second()))
            .then(a.burst.cmp(&b.burst))
            .then_with(|| spec(std::slice::from_ref(a)).cmp(&spec(std::slice::from_ref(b))))
            .then_with(|| at.cmp(bt))
    });
    sorted.into_iter().unzip()
}

/// `limits` tagged `tags` (as stored) in the command line's order: the
/// record and byte limits as they are, then the cost limits in the order
/// of `budget_tags` (each the first left of its tag), any left over after
/// them. What the lone pace and `drip ctl` see, where each cost limit is
/// spent by the costs of its place.
pub fn lone_order(
    limits: &[Limit],
    tags: &[Option<String>],
    budget_tags: &[Option<String>],
) -> Vec<Limit> {
    let mut out: Vec<Limit> = limits
        .iter()
        .filter(|l| l.unit != Unit::Cost)
        .copied()
        .collect();
    let mut costs: Vec<(Limit, Option<String>)> = limits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.unit == Unit::Cost)
        .map(|(i, l)| (*l, tags.get(i).cloned().flatten()))
        .collect();
    for want in budget_tags {
        if let Some(at) = costs.iter().position(|(_, t)| t == want) {
            out.push(costs.remove(at).0);
        }
    }
    out.extend(costs.into_iter().map(|(l, _)| l));
    out
}

/// `limit` at its rate divided by `peers`.
pub fn divided(limit: &Limit, peers: u64) -> Limit {
    let rate = match limit.rate {
        Rate::Limited { count, period_ns } => Rate::Limited {
            count,
            period_ns: period_ns.saturating_mul(u128::from(peers.max(1))),
        },
        Rate::Unlimited => Rate::Unlimited,
    };
    Limit { rate, ..*limit }
}

/// What a shared schedule paces by besides its lease, from its limits.
pub struct PeerPace {
    /// The limits alone (`local`): each rate divided by the peers.
    pub local: Vec<Limit>,
    /// The tightest record limit, records per second (infinite: none).
    pub per_second: f64,
    /// The highest byte (or cost) rate per second (0: none).
    pub bytes_per_second: f64,
}

impl PeerPace {
    /// The pace of `limits` shared by `peers`.
    pub fn of(limits: &[Limit], peers: u64) -> PeerPace {
        let rate = |unit: Unit| limits.iter().filter(move |l| l.unit == unit);
        PeerPace {
            local: limits.iter().map(|l| divided(l, peers)).collect(),
            per_second: crate::schedule::records_per_second(limits),
            bytes_per_second: rate(Unit::Bytes)
                .chain(rate(Unit::Cost))
                .map(|l| l.rate.per_second())
                .fold(0.0, f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_rate;
    use crate::schedule::Unit;
    use proptest::prelude::{Just, Strategy};
    use std::collections::BTreeMap;

    const MS: i64 = 1_000_000;

    fn step(rate: &str, burst: u64) -> Step {
        Step::of(&Limit {
            rate: parse_rate(rate).unwrap(),
            burst,
            unit: Unit::Records,
        })
    }

    /// `drip take`'s slot: taken when due within the bound, as one
    /// reservation of one slot; beyond it, nothing spent.
    #[test]
    fn a_take_spends_only_a_slot_due_in_time() {
        let meters = [Meter::from(step("10/s", 1))];
        let mut g = Gcra::default();
        assert_eq!(g.take(&meters, 0, 1, 0), Ok(0));
        let before = g.clone();
        assert_eq!(g.take(&meters, 0, 1, 50 * MS), Err(100 * MS));
        assert_eq!(g, before, "nothing spent");
        assert_eq!(g.take(&meters, 0, 1, 100 * MS), Ok(100 * MS));
        // The same slot a reservation would have given.
        let mut r = before.clone();
        assert_eq!(r.reserve(&[step("10/s", 1)], 0, 1, 0), vec![100 * MS]);
        assert_eq!(r.tats, g.tats);
        assert_eq!(g.seq, before.seq + 1);
    }

    /// A limit of `count` per `period_ns` with `burst`, of `unit`.
    fn limit_of(count: u128, period_ns: u128, burst: u64, unit: Unit) -> Limit {
        Limit {
            rate: Rate::Limited { count, period_ns },
            burst,
            unit,
        }
    }

    #[test]
    fn limits_beyond_the_range_are_named() {
        let d = DAY as u128;
        let records = |count, period, burst| limit_of(count, period, burst, Unit::Records);
        assert_eq!(out_of_range(&records(1, 32 * d, 1)), None);
        assert!(out_of_range(&records(1, 32 * d + 1, 1))
            .unwrap()
            .contains("slower than one record in 32 days"));
        assert!(out_of_range(&records(1, 110 * d, 1)).is_some());
        assert!(out_of_range(&records(1, 365 * d * 100, 1)).is_some());
        assert_eq!(out_of_range(&records(1, d, 32)), None);
        assert!(out_of_range(&records(1, d, 33))
            .unwrap()
            .contains("burst spans"));
        let cost = |count, period, burst| limit_of(count, period, burst, Unit::Cost);
        assert_eq!(out_of_range(&cost(1, 1_000_000_000, 1)), None);
        assert!(out_of_range(&cost(1, 33 * d, 1))
            .unwrap()
            .contains("one unit of cost in 32 days"));
        assert!(out_of_range(&cost(1, 1_000_000_000, 3_000_000)).is_some());
        let unlimited = Limit {
            rate: Rate::Unlimited,
            burst: 1,
            unit: Unit::Records,
        };
        assert_eq!(out_of_range(&unlimited), None);
    }

    proptest::proptest! {
        /// The most a slot may weigh charges each weighed limit at most
        /// [`MOST_AHEAD`], and one unit more would charge more (unless
        /// it is the largest cost, 2^53).
        #[test]
        fn the_most_weight_is_the_most_within_range(
            count in 1i64..=1_000_000_000_000,
            period in 1i64..=MOST_AHEAD,
        ) {
            let b = ByteStep { count, period, burst: 1, weight: 0 };
            let most = b.most_bytes();
            proptest::prop_assert!(most >= 1);
            if b.cost(1) <= MOST_AHEAD {
                proptest::prop_assert!(b.cost(most as i64) <= MOST_AHEAD, "{most}");
            }
            if most < 1 << 53 && b.cost(1) <= MOST_AHEAD {
                // Within a step of the bound (the doubles' rounding).
                let step = 2 + (most >> 40) as i64;
                proptest::prop_assert!(b.cost(most as i64 + step) > MOST_AHEAD, "{most}");
            }
            proptest::prop_assert_eq!(most_weight(&[Meter::Bytes(b)]), most);
        }

        /// Over the whole range a limit may be shared in (a record limit
        /// from 1 per 32 days, a cost limit from 1 unit per 32 days, bursts
        /// up to 32 days of the rate) and every weight a record can have
        /// (up to 2^53, charged as the most a slot may be), with calls
        /// days apart: each slot is the one the plain GCRA (exact, in
        /// `i128`, without bounds) grants, granted only within 32 days;
        /// no time is ever stored past now + [`MOST_DEBT`], nor saturates;
        /// and the record limit's departures keep its window bound.
        #[test]
        fn every_value_in_range_keeps_the_plain_schedule(
            (r_count, r_period, r_burst) in (1u128..=1000, 1u128..=32 * 86_400_000_000_000u128)
                .prop_flat_map(|(c, p)| {
                    let interval = p.div_ceil(c);
                    let most = (MOST_AHEAD as u128 / interval).clamp(1, 1000) as u64;
                    (Just(c), Just(p), 1u64..=most)
                })
                .prop_filter("within range", |&(c, p, b)| {
                    out_of_range(&limit_of(c, p, b, Unit::Records)).is_none()
                }),
            (c_count, c_period, c_burst) in (1u128..=1_000_000, 1u128..=32 * 86_400_000_000_000u128, 1u64..=1_000_000)
                .prop_filter("within range", |&(c, p, b)| {
                    out_of_range(&limit_of(c, p, b, Unit::Cost)).is_none()
                }),
            calls in proptest::collection::vec(
                (0i64..=40 * DAY, proptest::collection::vec(1u64..=1 << 53, 1..4)),
                1..12,
            ),
        ) {
            let limits = [
                limit_of(r_count, r_period, r_burst, Unit::Records),
                limit_of(c_count, c_period, c_burst, Unit::Cost),
            ];
            let meters: Vec<Meter> = limits.iter().map(Meter::of).collect();
            let most = most_weight(&meters);
            let mut g = Gcra::default();
            // The plain GCRA: i128 ns, no bound, no saturation.
            let mut plain: [Option<i128>; 2] = [None, None];
            let mut now = 0i64;
            let mut departures = Vec::new();
            for (gap, sizes) in calls {
                now += gap;
                let sizes: Vec<u64> = sizes.iter().map(|&w| w.min(most)).collect();
                let got = g.reserve_within(&meters, now, (sizes.len() as u64, &sizes), 0, None);
                let (n, w) = (i128::from(now), i128::from(sizes[0] as i64));
                let tats: Vec<i128> = plain.iter().map(|t| t.unwrap_or(n).max(n)).collect();
                let reach = |j: usize, w: i128| i128::from(meters[j].reach(w as i64));
                let due = (0..2).map(|j| tats[j] - reach(j, w)).fold(n, i128::max);
                match got {
                    Err(at) => {
                        proptest::prop_assert!(due > n + i128::from(MOST_AHEAD));
                        proptest::prop_assert_eq!(i128::from(at), due);
                    }
                    Ok(slots) => {
                        proptest::prop_assert!(due <= n + i128::from(MOST_AHEAD));
                        proptest::prop_assert_eq!(i128::from(slots[0]), due);
                        let cost = |j: usize| i128::from(meters[j].cost(w as i64));
                        plain = [Some(tats[0].max(due) + cost(0)), Some(tats[1].max(due) + cost(1))];
                        departures.push(slots[0]);
                    }
                }
                for t in &g.tats {
                    let t = t.expect("a schedule, never lost");
                    proptest::prop_assert!(t <= now + MOST_DEBT && t < i64::MAX / 2, "{t}");
                }
            }
            // The record limit's bound: at most burst + W / T in any
            // window W between two departures.
            let interval = r_period.div_ceil(r_count) as i128;
            for (i, a) in departures.iter().enumerate() {
                for (k, b) in departures[i..].iter().enumerate() {
                    let w = i128::from(b - a);
                    proptest::prop_assert!((k as i128) < i128::from(r_burst) + w / interval);
                }
            }
        }
    }

    /// Settlements charging far past a slot's most, one after another, and
    /// a change of limits after them, stop at [`MOST_DEBT`]: the schedule
    /// stays (never saturated, never lost) and keeps the other limits.
    #[test]
    fn charges_past_the_range_stop_at_the_most_debt() {
        let meters = [
            Meter::of(&limit_of(1, DAY as u128, 1, Unit::Records)),
            Meter::of(&limit_of(1, 1_000_000_000, 1, Unit::Cost)),
        ];
        let mut g = Gcra::default();
        g.reserve_within(&meters, 0, (1, &[1]), 0, None).unwrap();
        for _ in 0..10 {
            let s = Settlement {
                more: Weight::from(most_weight(&meters)),
                ..Settlement::default()
            };
            g.settle(&meters, 0, &s, false);
        }
        assert_eq!(g.tats[1], Some(MOST_DEBT));
        assert_eq!(g.tats[0], Some(DAY), "the record limit is not settled");
        g.relimit(&meters, 0);
        assert!(g.tats.iter().all(|t| t.is_some_and(|t| t <= MOST_DEBT)));
        // Nothing is granted until the debt falls within 32 days.
        assert_eq!(
            g.reserve_within(&meters, 0, (1, &[1]), 0, None),
            Err(MOST_DEBT)
        );
        let at = MOST_DEBT - MOST_AHEAD;
        assert_eq!(
            g.reserve_within(&meters, at, (1, &[1]), 0, None),
            Ok(vec![MOST_DEBT])
        );
    }

    #[test]
    fn constants() {
        assert_eq!(
            step("10/s", 3),
            Step {
                interval: 100 * MS,
                tolerance: 200 * MS
            }
        );
        // 3 per second: 333,333,333.3 ns rounds up.
        assert_eq!(step("3/s", 1).interval, 333_333_334);
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut g = Gcra::default();
        let s = [step("10/s", 3)];
        // Horizon 250 ms: the burst of 3 at once, then 100, 200 ms.
        let t = g.reserve(&s, 0, 10, 250 * MS);
        assert_eq!(t, vec![0, 0, 0, 100 * MS, 200 * MS]);
        // Another participant asking at 50 ms gets the next slot.
        assert_eq!(g.reserve(&s, 50 * MS, 1, 0), vec![300 * MS]);
        // Always one, even past the horizon.
        assert_eq!(g.reserve(&s, 50 * MS, 5, 0), vec![400 * MS]);
    }

    #[test]
    fn an_idle_schedule_restarts_from_now() {
        let mut g = Gcra::default();
        let s = [step("10/s", 2)];
        assert_eq!(g.reserve(&s, 0, 3, 1000 * MS), vec![0, 0, 100 * MS]);
        // Idle until 5 s: a burst of 2 again, never a catch-up.
        assert_eq!(
            g.reserve(&s, 5000 * MS, 3, 1000 * MS),
            vec![5000 * MS, 5000 * MS, 5100 * MS]
        );
        assert_eq!(g.idle_from(), Some(5300 * MS));
    }

    #[test]
    fn the_tightest_limit_decides() {
        let mut g = Gcra::default();
        let s = [step("10/s", 5), step("2/100ms", 2)];
        let t = g.reserve(&s, 0, 9, 10_000 * MS);
        assert_eq!(t, [0, 0, 50, 100, 150, 200, 250, 300, 400].map(|x| x * MS));
    }

    #[test]
    fn giving_back_restores_the_schedule_unless_someone_reserved() {
        let s = [step("10/s", 1)];
        let mut g = Gcra::default();
        let t = g.reserve(&s, 0, 5, 1000 * MS);
        assert_eq!(t.len(), 5);
        let seq = g.seq;
        let mut other = g.clone();
        // Slots 2, 3, 4 unused: the next reservation gets slot 2's time.
        assert!(g.give_back(&s, seq, t[2]));
        assert_eq!(g.reserve(&s, 0, 1, 0), vec![t[2]]);
        // Someone reserved after us: nothing is given back.
        other.reserve(&s, 0, 1, 0);
        assert!(!other.give_back(&s, seq, t[2]));
    }

    /// Several participants reserving in turn on virtual time keep every
    /// window's bound.
    #[test]
    fn participants_together_keep_the_window_bound() {
        let s = [step("50/s", 4)];
        let mut g = Gcra::default();
        let mut all = Vec::new();
        let mut now = 0;
        for round in 0..200 {
            let want = 1 + (round * 7) % 13;
            let got = g.reserve(&s, now, want, 60 * MS);
            all.extend(got);
            now += (round as i64 % 5) * 9 * MS;
        }
        all.sort_unstable();
        for (i, &start) in all.iter().enumerate() {
            let n = all[i..]
                .iter()
                .take_while(|&&x| x < start + 1000 * MS)
                .count();
            assert!(n <= 50 + 4, "{n} in a second from {start}");
        }
        let span = (all[all.len() - 1] - all[0]) as f64 / 1e9;
        let rate = (all.len() - 4) as f64 / span;
        assert!((rate - 50.0).abs() < 0.5, "{rate}");
    }

    /// A participant with a deep queue reserving whenever its lease runs
    /// low cannot keep one with a shallow queue waiting longer than one
    /// reservation's horizon: requests are served in order.
    #[test]
    fn a_deep_queue_cannot_starve_a_shallow_one() {
        let s = [step("100/s", 1)];
        let horizon = 200 * MS;
        let mut g = Gcra::default();
        let mut deep_end = 0;
        let mut now = 0;
        while now < 5000 * MS {
            if deep_end - horizon / 2 <= now {
                deep_end = *g.reserve(&s, now, 1000, horizon).last().unwrap();
            }
            if now % (700 * MS) == 0 {
                let mine = g.reserve(&s, now, 1, horizon)[0];
                assert!(
                    mine <= now + horizon + 10 * MS,
                    "waited {} ms",
                    (mine - now) / MS
                );
            }
            now += 10 * MS;
        }
    }

    fn limit(rate: &str, burst: u64, unit: Unit) -> Limit {
        let rate = match unit {
            Unit::Records | Unit::Cost => parse_rate(rate).unwrap(),
            Unit::Bytes => crate::rate::parse_byte_rate(rate).unwrap(),
        };
        Limit { rate, burst, unit }
    }

    /// The most units in any window of `window` ns, of departures
    /// `(time, units)` sorted by time.
    fn most_in_window(all: &[(i64, u64)], window: i64) -> u64 {
        (0..all.len())
            .map(|i| {
                all[i..]
                    .iter()
                    .take_while(|&&(t, _)| t < all[i].0 + window)
                    .map(|&(_, units)| units)
                    .sum()
            })
            .max()
            .unwrap_or(0)
    }

    /// Several participants, each reserving for the sizes of its next
    /// records (random, up to the byte burst) in turn on virtual time:
    /// together they keep both the byte limit's and the record limit's
    /// window bound, and the bytes leave at the byte rate.
    #[test]
    fn participants_with_random_sizes_keep_both_bounds() {
        let limits = [
            limit("20/s", 3, Unit::Records),
            limit("2000/s", 1000, Unit::Bytes),
        ];
        let meters: Vec<Meter> = limits.iter().map(Meter::of).collect();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut g = Gcra::default();
        let mut departed: Vec<(i64, u64)> = Vec::new();
        let mut now = 0;
        for _ in 0..600 {
            let want = rng.u64(1..=6);
            let sizes: Vec<u64> = (0..want).map(|_| rng.u64(1..=1000)).collect();
            let horizon = rng.i64(0..=300) * MS;
            let got = g.reserve_sized(&meters, now, want, &sizes, horizon);
            assert!(got.iter().all(|&t| t >= now));
            departed.extend(got.iter().zip(&sizes).map(|(&t, &s)| (t, s)));
            now += rng.i64(0..=40) * MS;
        }
        departed.sort_unstable();
        for window in [MS, 100 * MS, 1000 * MS, 5000 * MS] {
            let bytes = most_in_window(&departed, window);
            let bound = 1000 + 2000 * window / 1000 / MS;
            assert!(bytes as i64 <= bound, "{bytes} bytes in {window} ns");
            let ones: Vec<(i64, u64)> = departed.iter().map(|&(t, _)| (t, 1)).collect();
            let records = most_in_window(&ones, window);
            let bound = 3 + 20 * window / 1000 / MS;
            assert!(records as i64 <= bound, "{records} records in {window} ns");
        }
        // The byte limit binds (mean 500 bytes a record, 4 records a
        // second): the bytes after the first burst leave at 2000/s.
        let first = departed[0].0;
        let last = departed[departed.len() - 1].0;
        let after_burst: u64 = departed.iter().skip(1).map(|&(_, s)| s).sum();
        let rate = after_burst as f64 / ((last - first) as f64 / 1e9);
        assert!((rate - 2000.0).abs() < 2000.0 * 0.02, "{rate} bytes/s");
    }

    /// A record larger than the byte burst leaves once a full burst is
    /// saved, and puts the schedule in debt for the rest: the local
    /// pacer's rule.
    #[test]
    fn a_record_larger_than_the_burst_leaves_then_pays() {
        let meters = [Meter::of(&limit("1000/s", 100, Unit::Bytes))];
        let mut g = Gcra::default();
        // 500 bytes at once; 10 bytes when the schedule reaches
        // 500 + 10 − 100 bytes: 410 ms.
        let t = g.reserve_sized(&meters, 0, 2, &[500, 10], 1000 * MS);
        assert_eq!(t, vec![0, 410 * MS]);
        // Another 500-byte record waits until a full burst is saved: the
        // schedule clear of the 510 bytes before it, at 510 ms.
        let t = g.reserve_sized(&meters, 0, 1, &[500], 1000 * MS);
        assert_eq!(t, vec![510 * MS]);
    }

    /// A byte limit charges each slot its size; a record limit of the same
    /// number charges 1.
    #[test]
    fn bytes_cost_their_size_records_cost_one() {
        let bytes = [Meter::of(&limit("10/s", 10, Unit::Bytes))];
        let records = [Meter::of(&limit("10/s", 10, Unit::Records))];
        let sizes = [5, 5, 5, 5];
        let mut g = Gcra::default();
        assert_eq!(
            g.reserve_sized(&bytes, 0, 4, &sizes, 1000 * MS),
            vec![0, 0, 500 * MS, 1000 * MS]
        );
        let mut g = Gcra::default();
        assert_eq!(
            g.reserve_sized(&records, 0, 4, &sizes, 1000 * MS),
            vec![0, 0, 0, 0]
        );
    }

    /// Giving back a byte limit's slots restores the schedule to where it
    /// stood before the first unused slot, for its size.
    #[test]
    fn giving_back_bytes_restores_the_schedule() {
        let meters = [Meter::of(&limit("1000/s", 100, Unit::Bytes))];
        let mut g = Gcra::default();
        let t = g.reserve_sized(&meters, 0, 3, &[100, 50, 50], 1000 * MS);
        assert_eq!(t, vec![0, 50 * MS, 100 * MS]);
        assert!(g.give_back_sized(&meters, g.seq, t[1], 50));
        assert_eq!(g.reserve_sized(&meters, 0, 1, &[50], 0), vec![t[1]]);
    }

    #[test]
    fn specs_mark_byte_limits() {
        let bytes = [limit("10/s", 10, Unit::Bytes)];
        let records = [limit("10/s", 10, Unit::Records)];
        assert_eq!(spec(&bytes), "1B/100000000ns:10B");
        assert_ne!(spec(&bytes), spec(&records));
        assert_eq!(describe(&spec(&bytes)), "10 bytes/s, burst 10 bytes");
        let cost = [limit("500/s", 100, Unit::Cost)];
        assert_eq!(describe(&spec(&cost)), "500 cost/s, burst 100 cost");
        let both = [
            limit("5/s", 1, Unit::Records),
            limit("2KiB/min", 1024, Unit::Bytes),
        ];
        assert_eq!(
            describe(&spec(&both)),
            "5/s, burst 1; 2048 bytes/min, burst 1024 bytes"
        );
    }

    /// Cost limits tagged with the costs they spend: the spec reads back
    /// as the same limits and tags, the meters number the weights by tag
    /// (untagged ones the first), and messages name each limit's costs
    /// (the unnamed cost's tag, empty, not shown).
    #[test]
    fn tagged_specs_read_back_and_number_the_weights() {
        let limits = [
            limit_of(1, 1_000_000_000, 1, Unit::Records),
            limit_of(200, 1_000_000_000, 40, Unit::Cost),
            limit_of(800, 1_000_000_000, 100, Unit::Cost),
            limit_of(900, 1_000_000_000, 100, Unit::Cost),
            limit_of(50, 1_000_000_000, 10, Unit::Cost),
        ];
        let tags = [
            None,
            Some("out".to_string()),
            Some("in".to_string()),
            Some("in+out".to_string()),
            Some("out".to_string()),
        ];
        let spec = spec_tagged(&limits, &tags);
        assert_eq!(
            spec,
            "1/1000000000ns:1,200C/1000000000ns:40C@out,800C/1000000000ns:100C@in,900C/1000000000ns:100C@in+out,50C/1000000000ns:10C@out"
        );
        assert_eq!(limits_of(&spec), Some(limits.to_vec()));
        assert_eq!(tags_of(&spec), tags.to_vec());
        let weights: Vec<Option<usize>> = meters(&limits, &tags)
            .iter()
            .map(|m| match m {
                Meter::Bytes(b) => Some(b.weight),
                Meter::Records(_) => None,
            })
            .collect();
        assert_eq!(weights, [None, Some(0), Some(1), Some(2), Some(0)]);
        assert_eq!(weight_tags(&tags), ["out", "in", "in+out"]);
        assert_eq!(
            describe(&spec_tagged(&limits[1..3], &tags[1..3])),
            "out=200 cost/s, burst 40 cost; in=800 cost/s, burst 100 cost"
        );
        let unnamed = [None, Some(String::new())];
        assert_eq!(
            describe(&spec_tagged(&limits[1..3], &unnamed)),
            "200 cost/s, burst 40 cost; 800 cost/s, burst 100 cost"
        );
        // Untagged (one weight): the spec as before slots carried several.
        assert_eq!(spec_tagged(&limits, &[]), super::spec(&limits));
        assert!(meters(&limits, &[]).iter().all(|m| match m {
            Meter::Bytes(b) => b.weight == 0,
            Meter::Records(_) => true,
        }));
    }

    /// A spec reads back as the limits it records (with a key limit's:
    /// `key_table::split_spec`).
    #[test]
    fn specs_read_back_as_their_limits() {
        let limits = [
            Limit {
                rate: parse_rate("10/s").unwrap(),
                burst: 3,
                unit: Unit::Records,
            },
            Limit {
                rate: crate::rate::parse_byte_rate("2KB/s").unwrap(),
                burst: 512,
                unit: Unit::Bytes,
            },
        ];
        assert_eq!(limits_of(&spec(&limits)), Some(limits.to_vec()));
        assert_eq!(limits_of("garbage"), None);
    }

    /// New limits start after the last slot the old ones reserved, with
    /// no burst saved up, and the old reservations can no longer go back.
    #[test]
    fn new_limits_start_after_the_old_slots_without_credit() {
        let step = |interval, tolerance| {
            Meter::Records(Step {
                interval,
                tolerance,
            })
        };
        let mut g = Gcra::default();
        let old = [step(100 * MS, 0)];
        let slots = g.reserve_sized(&old, 0, 5, &[0u64; 0], 100_000 * MS);
        assert_eq!(slots, [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS]);
        let seq = g.seq;
        // 1/s, burst 3, at 50 ms: the first new slot at 500 ms (after the
        // old ones), the next a whole second later, not a burst.
        let new = [step(1_000 * MS, 2_000 * MS)];
        g.relimit(&new, 50 * MS);
        assert!(!g.give_back_sized(&new, seq, 400 * MS, 1));
        let slots = g.reserve_sized(&new, 50 * MS, 2, &[0u64; 0], 100_000 * MS);
        assert_eq!(slots, [500 * MS, 1_500 * MS]);
        // Long after: from now, still without a burst saved up.
        let mut g = Gcra::default();
        g.reserve_sized(&old, 0, 1, &[0u64; 0], 100_000 * MS);
        g.relimit(&new, 10_000 * MS);
        let slots = g.reserve_sized(&new, 10_000 * MS, 2, &[0u64; 0], 100_000 * MS);
        assert_eq!(slots, [10_000 * MS, 11_000 * MS]);
    }

    #[test]
    fn specs_name_the_limits() {
        let limits = [Limit {
            rate: parse_rate("10/s").unwrap(),
            burst: 2,
            unit: Unit::Records,
        }];
        assert_eq!(spec(&limits), "1/100000000ns:2");
        assert_eq!(describe(&spec(&limits)), "10/s, burst 2");
    }

    #[test]
    fn descriptions_are_rates_as_people_write_them() {
        let described = |rate: &str, burst: u64| {
            describe(&spec(&[Limit {
                rate: parse_rate(rate).unwrap(),
                burst,
                unit: Unit::Records,
            }]))
        };
        assert_eq!(described("100/min", 1), "100/min, burst 1");
        assert_eq!(described("1/250ms", 1), "4/s, burst 1");
        assert_eq!(described("0.5/s", 1), "30/min, burst 1");
        assert_eq!(described("2/h", 3), "2/h, burst 3");
        assert_eq!(described("1/d", 1), "1/d, burst 1");
        assert_eq!(described("3/7s", 1), "3/7s, burst 1");
        assert_eq!(described("1/1500ms", 1), "40/min, burst 1");
        assert_eq!(described("1/8d", 1), "1/8days, burst 1");
        assert_eq!(described("5000/s", 1), "5000/s, burst 1");
        assert_eq!(
            describe("1/100000000ns:1,1/60000000000ns:2"),
            "10/s, burst 1; 1/min, burst 2"
        );
        assert_eq!(
            describe("1/100000000ns:1,key:1/200000000ns:3"),
            "10/s, burst 1; per key 5/s, burst 3"
        );
    }

    // The limits per key.

    fn key_step(per_second: i64, burst: i64) -> Step {
        let interval = 1000 * MS / per_second;
        Step {
            interval,
            tolerance: interval * (burst - 1),
        }
    }

    /// The most departures in any window of `w` ns.
    fn most_in(times: &mut [i64], w: i64) -> usize {
        times.sort_unstable();
        (0..times.len())
            .map(|i| times[i..].iter().take_while(|&&t| t < times[i] + w).count())
            .max()
            .unwrap_or(0)
    }

    /// A key's new limit starts after the slots it had reserved, with no
    /// burst saved up, and its old slots can no longer go back.
    #[test]
    fn a_keys_new_limit_starts_after_its_old_slots_without_credit() {
        let mut book = KeyBook::default();
        let (seq, slots) = book.reserve(key_step(10, 1), 0, "a", 3, 1000 * MS);
        assert_eq!(slots, [0, 100 * MS, 200 * MS]);
        // 1/s, burst 3, at 50 ms: the first new slot at 300 ms (after the
        // old ones), the next a whole second later, not a burst.
        let new = key_step(1, 3);
        book.relimit(&|_| Some(new), 50 * MS);
        assert!(!book.give_back(new, "a", seq, 200 * MS));
        let (_, slots) = book.reserve(new, 50 * MS, "a", 2, 100_000 * MS);
        assert_eq!(slots, [300 * MS, 1_300 * MS]);
    }

    /// Three participants reserving for three keys in batches on virtual
    /// time: per key, no window holds more than burst + rate × W, and the
    /// keys do not hold each other back.
    #[test]
    fn participants_keep_each_keys_bound_and_keys_are_independent() {
        let s = key_step(5, 2);
        let mut book = KeyBook::default();
        let mut per_key: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        let mut now = 0;
        for round in 0..300u64 {
            for p in 0..3u64 {
                for key in ["a", "b", "c"] {
                    let want = 1 + (round + p) % 4;
                    let (_, got) = book.reserve(s, now, key, want, 200 * MS);
                    per_key.entry(key).or_default().extend(got);
                }
            }
            now += 50 * MS;
        }
        for (key, times) in &mut per_key {
            let most = most_in(times, 1000 * MS);
            assert!(most <= 5 + 2, "key {key}: {most} in a second");
            let span = (times[times.len() - 1] - times[1]) as f64 / 1e9;
            let rate = (times.len() - 2) as f64 / span;
            assert!((rate - 5.0).abs() < 0.1, "key {key}: {rate}/s");
        }
        // Each key's first slot was at 0: no key waited for another.
        assert!(per_key.values().all(|t| t[0] == 0));
    }

    #[test]
    fn a_rested_key_is_pruned_and_starts_as_a_new_one() {
        let s = key_step(10, 1);
        let mut book = KeyBook::default();
        assert_eq!(
            book.reserve(s, 0, "a", 3, 1000 * MS).1,
            vec![0, 100 * MS, 200 * MS]
        );
        book.reserve(s, 0, "b", 1, 0);
        book.prune(150 * MS);
        // b's schedule rested at 100 ms; a's runs to 300 ms.
        assert_eq!(book.keys.keys().collect::<Vec<_>>(), ["a"]);
        book.prune(300 * MS);
        assert!(book.keys.is_empty());
        assert_eq!(book.reserve(s, 300 * MS, "a", 1, 0).1, vec![300 * MS]);
    }

    #[test]
    fn giving_back_restores_one_keys_schedule_unless_someone_reserved() {
        let s = key_step(10, 1);
        let mut book = KeyBook::default();
        let (seq, t) = book.reserve(s, 0, "a", 5, 1000 * MS);
        book.reserve(s, 0, "b", 5, 1000 * MS);
        assert!(book.give_back(s, "a", seq, t[2]));
        assert_eq!(book.reserve(s, 0, "a", 1, 0).1, vec![t[2]]);
        // Someone reserved for a since: nothing goes back.
        assert!(!book.give_back(s, "a", seq, t[3]));
        // b is untouched by a's give-back.
        assert_eq!(book.reserve(s, 0, "b", 1, 0).1, vec![500 * MS]);
    }

    /// Slots asked for at later times are arrivals at those times: a key's
    /// slots asked for by several participants at spaced times keep its
    /// bound, and come no earlier than asked.
    #[test]
    fn slots_asked_for_later_keep_the_keys_bound() {
        let s = key_step(5, 2);
        let mut book = KeyBook::default();
        let mut times = Vec::new();
        for round in 0..100i64 {
            for p in 0..3i64 {
                let ask = KeyAsk {
                    want: 3,
                    after: (p * 70 + round % 3 * 40) * MS,
                    every: 130 * MS,
                };
                let now = round * 150 * MS;
                let (_, got) = book.reserve_at(s, now, "a", ask, 300 * MS);
                for (j, &t) in got.iter().enumerate() {
                    assert!(t >= now + ask.after + j as i64 * ask.every);
                }
                times.extend(got);
            }
        }
        assert!(most_in(&mut times, 1000 * MS) <= 5 + 2);
    }

    /// The cost limit of the settlement model: 100 a second (10 ms a
    /// unit), a burst of 50.
    const COST: Meter = Meter::Bytes(ByteStep {
        count: 100,
        period: 1_000_000_000,
        burst: 50,
        weight: 0,
    });

    /// A record of the model: its estimate, what it really spent, its
    /// job's time (ms).
    type Job = (u64, u64, i64);

    /// Drips (`drips`: each one's records and how many slots it reserves
    /// at once) sharing [`COST`] on virtual time, 1 ms a step, as their
    /// leases do: each reserves slots for its next records once it holds
    /// none (settling, only when the first is due within 50 ms; when not,
    /// it asks again 100 ms later at most, or once it settled a record),
    /// its records leave at their slots, and each settles as its job ends
    /// (`settling`). Each record's departure, settlement time, estimate
    /// and real spend.
    fn shared_run(drips: &[(Vec<Job>, u64)], settling: bool) -> Vec<(i64, i64, u64, u64)> {
        let mut g = Gcra {
            life: 7,
            ..Gcra::default()
        };
        let mut out = Vec::new();
        // Per drip: the next record, its slots held (due, record, before).
        let mut next = vec![0usize; drips.len()];
        let mut held: Vec<Vec<(i64, usize, u64)>> = vec![Vec::new(); drips.len()];
        // Jobs running: end, drip, settlement.
        let mut running: Vec<(i64, usize, Settlement)> = Vec::new();
        let mut next_ask = vec![0i64; drips.len()];
        let within = settling.then_some(50 * MS);
        let mut t = 0i64;
        loop {
            running.sort_by_key(|r| r.0);
            while running.first().is_some_and(|r| r.0 <= t) {
                let (_, d, s) = running.remove(0);
                if settling {
                    g.settle(&[COST], t, &s, false);
                    next_ask[d] = t;
                }
            }
            for (d, (jobs, k)) in drips.iter().enumerate() {
                held[d].retain(|&(due, i, before)| {
                    if due > t {
                        return true;
                    }
                    let (e, real, ms) = jobs[i];
                    let end = due + ms * MS;
                    out.push((due, end, e, real));
                    let s = Settlement {
                        back: Weight::from(e.saturating_sub(real)),
                        more: Weight::from(real.saturating_sub(e)),
                        before: Weight::from(before),
                        slot: Weight::from(e),
                        life: 7,
                    };
                    running.push((end, d, s));
                    false
                });
                if held[d].is_empty() && next[d] < jobs.len() && next_ask[d] <= t {
                    let sizes: Vec<u64> = jobs[next[d]..]
                        .iter()
                        .take(*k as usize)
                        .map(|j| j.0)
                        .collect();
                    let before = g.charged.0[0];
                    let want = (sizes.len() as u64, &sizes[..]);
                    match g.reserve_within(&[COST], t, want, 200 * MS, within) {
                        Ok(slots) => {
                            for due in slots {
                                held[d].push((due, next[d], before));
                                next[d] += 1;
                            }
                        }
                        Err(due) => next_ask[d] = t + (due - t - 25 * MS).clamp(MS, 100 * MS),
                    }
                }
            }
            let done = drips.iter().zip(&next).all(|((j, _), &n)| n == j.len());
            if done && held.iter().all(Vec::is_empty) && running.is_empty() {
                return out;
            }
            t += MS;
            assert!(t < 3_600_000 * MS, "every record leaves");
        }
    }

    /// What the records leaving from `from` to `to` (ns) really spent.
    fn spent_in(out: &[(i64, i64, u64, u64)], from: i64, to: i64) -> u64 {
        out.iter()
            .filter(|r| r.0 >= from && r.0 <= to)
            .map(|r| r.3)
            .sum()
    }

    /// The most a window may hold: the burst and the rate over it.
    fn allowed(window: i64) -> f64 {
        50.0 + 100.0 * window as f64 / 1e9 + 1e-6
    }

    fn drips(most_spent: u64) -> impl proptest::strategy::Strategy<Value = Vec<(Vec<Job>, u64)>> {
        use proptest::prelude::*;
        let job = (1u64..=50, 0u64..=most_spent, 1i64..300)
            .prop_map(|(e, pct, ms)| (e, (e * pct).div_ceil(100).min(50), ms));
        prop::collection::vec((prop::collection::vec(job, 1..15), 1u64..4), 2..4)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Several drips settling on one state, estimates at least what was
        /// spent: what left in any window really spent within the bound.
        #[test]
        fn shared_refunds_never_let_what_was_spent_pass_the_bound(drips in drips(100)) {
            let out = shared_run(&drips, true);
            for a in &out {
                for b in out.iter().filter(|b| b.0 >= a.0) {
                    let spent = spent_in(&out, a.0, b.0);
                    proptest::prop_assert!(spent as f64 <= allowed(b.0 - a.0),
                        "{} spent from {} to {} ns: {:?}", spent, a.0, b.0, out);
                }
            }
        }

        /// Estimates below what was spent: every record leaves, and a
        /// window holds at most the bound plus what the records in flight
        /// during it spent above their estimates.
        #[test]
        fn shared_debits_lose_nothing(drips in drips(300)) {
            let out = shared_run(&drips, true);
            let records: usize = drips.iter().map(|d| d.0.len()).sum();
            proptest::prop_assert_eq!(out.len(), records);
            for a in &out {
                for b in out.iter().filter(|b| b.0 >= a.0) {
                    let spent = spent_in(&out, a.0, b.0);
                    let unsettled: u64 = out
                        .iter()
                        .filter(|r| r.0 <= b.0 && r.1 > a.0)
                        .map(|r| r.3.saturating_sub(r.2))
                        .sum();
                    proptest::prop_assert!(spent as f64 <= allowed(b.0 - a.0) + unsettled as f64,
                        "{} spent from {} to {} ns: {:?}", spent, a.0, b.0, out);
                }
            }
        }
    }

    /// Estimates ten times the spend: the drips together go about ten
    /// times sooner settled than estimated only.
    #[test]
    fn shared_refunds_let_every_drip_go_sooner() {
        let drips: Vec<(Vec<Job>, u64)> = (0..2).map(|_| (vec![(50, 5, 10); 20], 1)).collect();
        let last = |out: &[(i64, i64, u64, u64)]| out.iter().map(|r| r.0).max().unwrap();
        let estimated = last(&shared_run(&drips, false));
        let settled = last(&shared_run(&drips, true));
        assert!(estimated >= 19_000 * MS, "{estimated}");
        assert!(settled * 4 <= estimated, "{settled} against {estimated}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Settlements folded into one ([`Settlement::fold`], as a lease
        /// keeps them beyond `MOST_SETTLEMENTS`) leave the TAT no lower
        /// than settling them one after the other would: they give back
        /// no more.
        #[test]
        fn folded_settlements_give_back_no_more_than_one_by_one(
            sizes in proptest::collection::vec(1u64..=50, 2..8),
            spent in proptest::collection::vec(0u64..=100, 8),
            at in 0i64..2_000,
        ) {
            let mut g = Gcra { life: 4, ..Gcra::default() };
            let mut settlements = Vec::new();
            for (i, &size) in sizes.iter().enumerate() {
                let before = g.charged;
                g.reserve_sized(&[COST], 0, 1, &[size], 0);
                let real = spent[i];
                settlements.push(Settlement {
                    back: Weight::from(size.saturating_sub(real)),
                    more: Weight::from(real.saturating_sub(size)),
                    before,
                    slot: Weight::from(size),
                    life: 4,
                });
            }
            let now = at * MS;
            let mut one_by_one = g.clone();
            for s in &settlements {
                one_by_one.settle(&[COST], now, s, false);
            }
            let mut folded = settlements[0];
            for s in &settlements[1..] {
                folded.fold(s);
            }
            g.settle(&[COST], now, &folded, false);
            proptest::prop_assert_eq!(g.charged, one_by_one.charged);
            proptest::prop_assert!(g.tats[0] >= one_by_one.tats[0],
                "folded {:?}, one by one {:?}", g.tats, one_by_one.tats);
        }
    }

    /// A settlement of another life (the state flushed, or its limits
    /// changed since) gives nothing back, but its debit is charged.
    #[test]
    fn a_settlement_of_another_life_gives_nothing_back() {
        let mut g = Gcra {
            life: 3,
            ..Gcra::default()
        };
        g.reserve_sized(&[COST], 0, 1, &[50], 0);
        let tat = g.tats[0];
        let back = Settlement {
            back: Weight::from(40),
            more: Weight::from(0),
            before: Weight::from(0),
            slot: Weight::from(0),
            life: 2,
        };
        assert!(!g.settle(&[COST], 0, &back, false));
        assert_eq!(g.tats[0], tat);
        assert!(!g.settle(&[COST], 0, &Settlement { life: 3, ..back }, true));
        assert_eq!(g.tats[0], tat);
        let more = Settlement {
            back: Weight::from(0),
            more: Weight::from(10),
            before: Weight::from(0),
            slot: Weight::from(0),
            life: 2,
        };
        g.settle(&[COST], 0, &more, false);
        assert_eq!(g.tats[0], tat.map(|t| t + 100 * MS));
        assert_eq!(g.charged, 60);
        assert!(g.settle(&[COST], 0, &Settlement { life: 3, ..back }, false));
        assert_eq!(
            g.tats[0],
            Some(600 * MS),
            "floor: 60 charged since, from now"
        );
    }

    #[test]
    fn hex_keys() {
        assert_eq!(hex(b"a/\xff"), "612fff");
    }
}
