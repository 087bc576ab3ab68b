//! The checks that make a [`Config`] of the parsed flags: what the flags
//! mean together (the limits, the keys, sharing), and the usage errors when
//! they contradict each other.

use super::args::{Cli, JobArgs, TakeArgs};
use super::config::Config;
use crate::cost::{Cost, CostArg};
use crate::input::Input;
use crate::jobs::order::DEFAULT_WINDOW;
use crate::jobs::retry::{Policy, DEFAULT_RETRY_ON};
use crate::jobs::{JobConfig, DEFAULT_BACKOFF};
use crate::key::{KeyArg, KeySpec};
use crate::keyed::rates::{self, KeyRateArg};
use crate::keyed::{KeyConfig, KeyRates};
use crate::progress::ProgressMode;
use crate::quantity::{drained, Bound};
use crate::rate::Rate;
use crate::report::capacity::CapacityFor;
use crate::schedule::{Limit, Unit};
use crate::shared;

/// The limits that `--rate`, `--interval`, `--burst` and `--byte-rate` give.
///
/// # Errors
/// `--burst` beside several `--rate`s, or beside a `RATE:BURST`: which
/// limit it is for would be a guess.
fn limits(cli: &Cli) -> Result<Vec<Limit>, clap::Error> {
    let mut rates = cli.rate.clone();
    if let Some(interval) = cli.interval {
        rates.push((
            Rate::per_interval(interval).expect("checked non-zero"),
            None,
        ));
    }
    if let Some(burst) = cli.burst {
        match rates.as_mut_slice() {
            [(Rate::Unlimited, _)] => {
                return usage("--burst: an unlimited rate takes no burst");
            }
            [(_, own @ None)] => *own = Some(burst),
            [] if !cli.byte_rate.is_empty() => {
                return usage(
                    "--burst: it is a burst of records; give a byte rate's burst as SIZE/UNIT:BURST",
                );
            }
            [] if !cli.cost_rate.is_empty() => {
                return usage(
                    "--burst: it is a burst of records; give a cost rate's burst as N/UNIT:BURST",
                );
            }
            [] if !cli.key_rate.is_empty() => {
                return usage(
                    "--burst: there is no --rate for it; give each key's burst as --key-rate RATE:BURST",
                );
            }
            [] => rates.push((ONE_PER_SECOND, Some(burst))),
            [(_, Some(_))] => {
                return usage("--burst: the rate already has its burst (RATE:BURST); give one")
            }
            _ => {
                return usage(
                    "--burst: several --rate limits; give each its own burst as RATE:BURST",
                )
            }
        }
    }
    // With limits per key, of cost or a budget, no --rate means no
    // record limit.
    if rates.is_empty()
        && cli.byte_rate.is_empty()
        && cli.key_rate.is_empty()
        && cli.key_rates.is_none()
        && cli.cost_rate.is_empty()
        && cli.budget.is_empty()
    {
        rates.push((ONE_PER_SECOND, None));
    }
    let costs = cli.cost_rate.iter().map(|&(_, rate, burst)| (rate, burst));
    Ok(limits_of(rates, &cli.byte_rate, costs))
}

/// The limits of the record rates `rates` (each its own burst, else 1;
/// an unlimited one left out), the byte rates `bytes` and the cost rates
/// `costs`, in that order.
fn limits_of(
    rates: Vec<(Rate, Option<u64>)>,
    bytes: &[(Rate, u64)],
    costs: impl Iterator<Item = (Rate, u64)>,
) -> Vec<Limit> {
    let records = rates
        .into_iter()
        .filter(|(rate, _)| *rate != Rate::Unlimited)
        .map(|(rate, burst)| (rate, burst.unwrap_or(1), Unit::Records));
    let bytes = bytes
        .iter()
        .map(|&(rate, burst)| (rate, burst, Unit::Bytes));
    let costs = costs.map(|(rate, burst)| (rate, burst, Unit::Cost));
    let all = records.chain(bytes).chain(costs);
    all.map(|(rate, burst, unit)| Limit { rate, burst, unit })
        .collect()
}

/// The limits per key, what `--key-capacity` as a duration came to, and
/// where the rate table came from.
type KeysChecked = (KeyConfig, Option<CapacityFor>, Option<RateTable>);

/// Limits per key from `--key`, `--key-rate`, `--field-separator`,
/// `--key-capacity` and `--max-keys`.
///
/// # Errors
/// One of `--key` and `--key-rate` without the other, either given twice,
/// an unlimited key rate, a key option without `--key`, or a field
/// separator that is the record delimiter.
fn key_config(
    cli: &Cli,
    delimiter: u8,
    capacity: usize,
) -> Result<Option<KeysChecked>, clap::Error> {
    let defaults = default_key_rates(cli);
    let table = !cli.key_rate.is_empty() || cli.key_rates.is_some();
    let (arg, default) = match (cli.key.as_slice(), defaults.as_slice()) {
        ([_, _, ..], _) => return missing("--key: given twice; a record has one key"),
        (_, [_, _, ..]) => return missing(
            "--key-rate: given twice; each key has one limit (--rate gives limits for all records; KEY=RATE a key's own)",
        ),
        ([arg], [rate]) => (arg.clone(), Some(*rate)),
        // A job limit per key is a limit of its own: each key's rate then
        // unlimited.
        ([arg], []) if table || cli.key_jobs.is_some() => (arg.clone(), None),
        ([_], []) => return missing(
            "--key: needs --key-rate, --key-rates or --key-jobs, each key's limit",
        ),
        ([], _) if cli.key_rates.is_some() => {
            return missing("--key-rates: needs --key, which part of a record is its key")
        }
        ([], [_, ..]) | ([], []) if table => {
            return missing("--key-rate: needs --key, which part of a record is its key")
        }
        ([], _) => {
            for (given, flag) in [
                (
                    cli.field_separator.is_some()
                        && !cli.cost.iter().any(|c| {
                            matches!(c.whole, Ok(CostArg::Key(KeyArg::Field(_))))
                                || matches!(c.named, Some((_, CostArg::Key(KeyArg::Field(_)))))
                        }),
                    "--field-separator: needs --key N or --cost N",
                ),
                (cli.key_capacity.is_some(), "--key-capacity: needs --key"),
                (cli.max_keys.is_some(), "--max-keys: needs --key"),
            ] {
                if given {
                    return missing(flag);
                }
            }
            return Ok(None);
        }
    };
    if cli.field_separator.is_some() && !arg.splits_fields() {
        return missing(
            "--field-separator: --key names no field (a field number, or host:N for the URL in field N)",
        );
    }
    if cli.field_separator == Some(delimiter) {
        return missing("--field-separator: it is the record delimiter, which no field contains");
    }
    let spec = KeySpec::new(arg, cli.field_separator);
    let (rates, table) = key_rates(cli, spec.is_host())?;
    let (key_capacity, key_capacity_for) = match cli.key_capacity {
        None => (capacity, None),
        Some(Bound::Count(n)) => (n, None),
        Some(Bound::Time(d)) => {
            let Some((rate, _)) = default else {
                return missing("--key-capacity: a DURATION needs --key-rate RATE to drain it (the rows' rates differ); give a number of records");
            };
            let limit = Limit::records(rate, None);
            let (n, sized) = sized_by("--key-capacity", d, &limit, "--key-rate")?;
            (n, Some(sized))
        }
    };
    let (rate, burst) = default.unwrap_or((Rate::Unlimited, None));
    let key = KeyConfig {
        spec,
        rate,
        burst: burst.unwrap_or(1),
        rates,
        max_keys: cli.max_keys.unwrap_or(DEFAULT_MAX_KEYS),
        key_capacity,
    };
    Ok(Some((key, key_capacity_for, table)))
}

/// The `--key-rate RATE[:BURST]` values (not the rows).
fn default_key_rates(cli: &Cli) -> Vec<(Rate, Option<u64>)> {
    let defaults = cli.key_rate.iter().filter_map(|k| match k {
        KeyRateArg::Default(rate, burst) => Some((*rate, *burst)),
        KeyRateArg::Row(..) => None,
    });
    defaults.collect()
}

/// The rate table of `--key-rates FILE` and the `--key-rate KEY=RATE`
/// rows, the rows' keys spelled as hosts when `host`; and, when either is
/// given, where it came from (read again on a change).
///
/// # Errors
/// A file that cannot be read, a malformed row (with its line), a row
/// given twice, either with `--share`.
fn key_rates(cli: &Cli, host: bool) -> Result<(KeyRates, Option<RateTable>), clap::Error> {
    let rows: Vec<(&String, &String)> = cli
        .key_rate
        .iter()
        .filter_map(|k| match k {
            KeyRateArg::Row(key, rate) => Some((key, rate)),
            KeyRateArg::Default(..) => None,
        })
        .collect();
    if rows.is_empty() && cli.key_rates.is_none() {
        return Ok((KeyRates::default(), None));
    }
    let normalize = |text: &str| crate::host::host_row(text);
    let host_rows: Option<rates::Normalize> = if host { Some(&normalize) } else { None };
    let mut flag_rows: Vec<rates::Row> = Vec::new();
    for (key, rate) in rows {
        let row = rates::row(key, rate, host_rows)
            .or_else(|why| usage(format!("--key-rate {key}={rate}: {why}")))?;
        if flag_rows.iter().any(|r| r.pattern == row.pattern) {
            return usage(format!(
                "--key-rate {key}={rate}: a row for '{}' is given already",
                row.name
            ));
        }
        flag_rows.push(row);
    }
    let table = RateTable {
        file: cli.key_rates.clone(),
        rows: flag_rows,
        host,
        jobs: !cli.job_args.exec.is_empty(),
    };
    let rates = table.read(table.file.as_deref()).or_else(usage)?;
    if !cli.share.is_empty() {
        let default = default_key_rates(cli)
            .first()
            .map(|&(r, b)| Limit::records(r, b));
        if !crate::keyed::KeyTable::new(rates.clone(), default).limits_every_key() {
            let flag = if cli.key_rates.is_some() {
                "--key-rates"
            } else {
                "--key-rate KEY=RATE"
            };
            return usage(format!("{flag}: with --share every key needs a limit: give a * row or --key-rate RATE (a key with none would take the global slots ahead of those waiting on the shared state)"));
        }
        let table = crate::keyed::KeyTable::new(rates.clone(), None);
        shared::in_range(&[], Some(&table)).or_else(|why| usage(format!("{why} (--share)")))?;
    }
    Ok((rates, Some(table)))
}

/// Where a rate table per key came from: read again on a change.
#[derive(Debug, Clone)]
pub struct RateTable {
    /// `--key-rates FILE` (the latest `drip ctl … key-rates` names).
    pub file: Option<std::path::PathBuf>,
    /// The `--key-rate KEY=RATE` rows, which replace the file's rows of
    /// the same KEY.
    pub rows: Vec<rates::Row>,
    /// The rows' keys are hosts (`--key host`, `host:N`).
    pub host: bool,
    /// drip runs jobs (`--exec`): a row may give a job limit (JOBS).
    pub jobs: bool,
}

impl RateTable {
    /// The table of `file` (none: the command line's rows alone) and the
    /// command line's rows. Reads the file: the only I/O of the checks.
    ///
    /// # Errors
    /// `--key-rates FILE: why` (it cannot be read), `--key-rates FILE:N:
    /// why` (a malformed row).
    pub fn read(&self, file: Option<&std::path::Path>) -> Result<KeyRates, String> {
        let mut rows = match file {
            None => Vec::new(),
            Some(path) => {
                let shown = path.display();
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--key-rates {shown}: {}", crate::sys::describe(&e)))?;
                let normalize = |text: &str| crate::host::host_row(text);
                let host: Option<rates::Normalize> =
                    if self.host { Some(&normalize) } else { None };
                rates::parse(&text, host, self.jobs)
                    .map_err(|(n, why)| format!("--key-rates {shown}:{n}: {why}"))?
            }
        };
        rows.retain(|r| self.rows.iter().all(|own| own.pattern != r.pattern));
        rows.extend(self.rows.iter().cloned());
        KeyRates::new(rows).map_err(|name| format!("--key-rates: '{name}' given twice"))
    }
}

/// The bucket's bounds from `--capacity` and `--capacity-bytes`: records,
/// bytes, and when `--capacity` is a duration what it came to. A duration
/// is sized by the tightest record limit, or with only byte limits by the
/// tightest byte limit, in bytes.
///
/// # Errors
/// A duration with no global rate to drain it (`--rate inf`, or only
/// `--key-rate`), a duration in bytes beside `--capacity-bytes`, or one in
/// which the limit drains nothing.
fn capacity(
    cli: &Cli,
    limits: &[Limit],
) -> Result<(usize, Option<usize>, Option<CapacityFor>), clap::Error> {
    let duration = match cli.capacity {
        Bound::Count(n) => return Ok((n, cli.capacity_bytes, None)),
        Bound::Time(d) => d,
    };
    let text = exact_duration(duration);
    let tightest = |unit: Unit| {
        limits
            .iter()
            .filter(|l| l.unit == unit)
            .min_by_key(|l| drained_by(l, duration))
    };
    let default_rate = cli.rate.is_empty() && cli.interval.is_none();
    match (tightest(Unit::Records), tightest(Unit::Bytes)) {
        (Some(limit), _) => {
            let flag = if default_rate {
                "the default --rate"
            } else {
                "--rate"
            };
            let (n, sized) = sized_by("--capacity", duration, limit, flag)?;
            Ok((n, cli.capacity_bytes, Some(sized)))
        }
        (None, Some(_)) if cli.capacity_bytes.is_some() => usage(format!(
            "--capacity {text}: with only --byte-rate limits it sets the bytes the bucket holds, as --capacity-bytes does; give one of them"
        )),
        (None, Some(limit)) => {
            let (n, sized) = sized_by("--capacity", duration, limit, "--byte-rate")?;
            Ok((usize::MAX, Some(n), Some(sized)))
        }
        (None, None) => usage(format!(
            "--capacity {text}: a duration needs a --rate or --byte-rate to drain the bucket (--rate inf drains it at once, --key-rate each key alone); give a number of records"
        )),
    }
}

/// How many units `limit` lets go in `duration`: ⌊rate × duration⌋.
fn drained_by(limit: &Limit, duration: std::time::Duration) -> u128 {
    match limit.rate {
        Rate::Limited { count, period_ns } => drained(count, period_ns, duration),
        Rate::Unlimited => u128::MAX,
    }
}

/// A duration given on the command line, exactly and as it is written
/// there (`1ns`, `30s`, `1m30s`, `2s500ms`): an echo of the value in an
/// error, where [`crate::report::spell::format_duration_ms`]'s float would misstate a tiny one.
fn exact_duration(duration: std::time::Duration) -> String {
    crate::quantity::spell_duration(duration)
}

/// `option`'s duration sized by `limit` (given as `flag`): the units it
/// lets go in that time, and the summary's account of it.
///
/// # Errors
/// The limit lets no whole unit go in that time.
fn sized_by(
    option: &str,
    duration: std::time::Duration,
    limit: &Limit,
    flag: &str,
) -> Result<(usize, CapacityFor), clap::Error> {
    let ms = duration.as_secs_f64() * 1000.0;
    let (unit, rate) = match limit.unit {
        Unit::Records => ("records", limit.rate.spelled("")),
        Unit::Bytes => ("bytes", limit.rate.spelled(" bytes")),
        Unit::Cost => ("cost", limit.rate.spelled(" cost")),
    };
    let n = drained_by(limit, duration);
    if n == 0 {
        return usage(format!(
            "{option} {}: {flag} {rate} drains nothing in that time; give a longer duration or a number",
            exact_duration(duration)
        ));
    }
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    Ok((
        n,
        CapacityFor {
            duration_ms: ms,
            capacity: n as u64,
            unit,
            set_by: format!("{flag} {rate}"),
        },
    ))
}

/// Refuse two of drip's output files that are one file: each would
/// overwrite or interleave with the other, losing records or figures.
///
/// # Errors
/// `--dead-letter`, `--stats-json`, `--metrics` and `--joblog` (or
/// `--resume`'s JOBLOG), any two naming the same file (see
/// [`crate::input::same_file`]).
fn outputs_apart(cli: &Cli) -> Result<(), clap::Error> {
    let jobs = &cli.job_args;
    let joblog = match (&jobs.resume, &jobs.joblog) {
        (Some(resume), _) => ("--resume", Some(resume.as_path())),
        (None, joblog) => ("--joblog", joblog.as_deref()),
    };
    let outputs = [
        ("--dead-letter", cli.dead_letter.as_deref()),
        ("--stats-json", cli.stats_json.as_deref()),
        ("--metrics", cli.metrics.as_deref()),
        joblog,
    ];
    for (i, (flag, path)) in outputs.iter().enumerate() {
        let Some(path) = path else { continue };
        for (earlier, other) in &outputs[..i] {
            if other.is_some_and(|other| crate::input::same_file(path, other)) {
                return usage(format!(
                    "{flag} {}: the same file as {earlier}",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

/// What `drip take`'s flags ask: the limits as a drip with the same
/// flags shares them (1/s when none is given; `--rate inf` left out).
///
/// # Errors
/// A usage error, one line: no limit to take from, or a `--cost` with no
/// byte or cost limit to spend it on.
pub fn take_request(args: TakeArgs) -> Result<shared::take::TakeRequest, String> {
    let mut rates = args.rate;
    if rates.is_empty() && args.byte_rate.is_empty() && args.cost_rate.is_empty() {
        rates.push((ONE_PER_SECOND, None));
    }
    let limits = limits_of(rates, &args.byte_rate, args.cost_rate.into_iter());
    if limits.is_empty() {
        return Err("take: there is no rate to take from (--rate inf)".into());
    }
    if args.cost.is_some() && !shared::take::weighs(&limits) {
        return Err(
            "--cost: there is no --cost-rate or --byte-rate to spend it on (a --rate slot is one record)"
                .into(),
        );
    }
    shared::in_range(&limits, None)?;
    let meters: Vec<_> = limits.iter().map(shared::gcra::Meter::of).collect();
    let most = shared::gcra::most_weight(&meters);
    if let Some(cost) = args.cost.filter(|&c| c > most) {
        return Err(format!(
            "--cost {cost}: more than a shared slot may charge ({most}: 32 days of the rate)"
        ));
    }
    Ok(shared::take::TakeRequest {
        target: args.target,
        limits,
        cost: args.cost.unwrap_or(1),
        timeout: args.timeout,
    })
}

/// The inputs the FILE arguments name, in order: `-` (or none) is stdin.
fn inputs(files: Vec<std::path::PathBuf>) -> Vec<Input> {
    if files.is_empty() {
        return vec![Input::Stdin];
    }
    let input = |p: std::path::PathBuf| {
        if p.as_os_str() == "-" {
            Input::Stdin
        } else {
            Input::Path(p)
        }
    };
    files.into_iter().map(input).collect()
}

/// `--share-jobs N`: N, with `--exec` and `--share`.
///
/// # Errors
/// `--share-jobs` without `--exec` or without `--share`.
fn share_jobs(
    cli: &Cli,
    share: Option<&shared::Share>,
    exec: bool,
) -> Result<Option<u64>, clap::Error> {
    let Some(n) = cli.share_jobs else {
        return Ok(None);
    };
    match share {
        _ if !exec => usage("--share-jobs: only with --exec (it limits the jobs running)"),
        None => usage("--share-jobs: only with --share NAME (the drips that share the job limit)"),
        Some(_) => Ok(Some(n)),
    }
}

/// `--key-jobs N`: N, with `--exec` and `--key` (under `--share`, each
/// key's limit held across the drips on the NAME, beside `--share-jobs`).
///
/// # Errors
/// `--key-jobs` without `--exec` or `--key`.
fn key_jobs(cli: &Cli, exec: bool) -> Result<Option<usize>, clap::Error> {
    let Some(n) = cli.key_jobs else {
        return Ok(None);
    };
    if !exec {
        return missing("--key-jobs: only with --exec (it limits the jobs running)");
    }
    if cli.key.is_empty() {
        return missing("--key-jobs: needs --key, which part of a record is its key");
    }
    Ok(Some(n))
}

/// `--schedule` and `--ramp`, checked against the limits.
///
/// # Errors
/// A malformed schedule; either with `--share` (the limits are the same
/// for every drip on the state); a ramp with no limit to rise to, or a
/// start rate without a `--rate` above it.
fn timed(
    cli: &Cli,
    limits: &[Limit],
) -> Result<
    (
        Option<crate::timetable::Timetable>,
        Option<crate::ramp::Ramp>,
    ),
    clap::Error,
> {
    let shared = !cli.share.is_empty();
    let schedule = match &cli.schedule {
        None => None,
        Some(_) if shared => return usage(
            "--schedule: not with --share (the limits are the same for every drip on the state; give the shared rate, or run the drips without --share)",
        ),
        Some(spec) => {
            Some(crate::timetable::parse(spec).or_else(|why| usage(format!("--schedule: {why}")))?)
        }
    };
    let Some(arg) = cli.ramp else {
        return Ok((schedule, None));
    };
    if shared {
        return usage(
            "--ramp: not with --share (the limits are the same for every drip on the state)",
        );
    }
    if !cli.budget.is_empty() {
        return usage(
            "--ramp: not with --budget (a ramp slows the schedule's clock, and a budget's windows are on the wall clock)",
        );
    }
    if limits.is_empty() && schedule.is_none() {
        return usage(
            "--ramp: there is no limit to rise to (give --rate, --byte-rate or --cost-rate)",
        );
    }
    let from = match arg.start {
        None => 0.0,
        Some(start) => {
            let rate = crate::schedule::records_per_second(limits);
            if !rate.is_finite() {
                return usage(format!(
                    "--ramp {}: a start rate needs a --rate to rise to",
                    start.spelled("")
                ));
            }
            let from = start.per_second() / rate;
            if from >= 1.0 {
                return usage(format!(
                    "--ramp: the start rate {} must be below the rate ({rate}/s)",
                    start.spelled("")
                ));
            }
            from
        }
    };
    let over_ns = u64::try_from(arg.over.as_nanos()).unwrap_or(u64::MAX);
    Ok((schedule, Some(crate::ramp::Ramp { from, over_ns })))
}

/// A usage error (exit status 2) saying `why`: options that do not go
/// together.
fn usage<T>(why: impl std::fmt::Display) -> Result<T, clap::Error> {
    use clap::CommandFactory;
    Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, why))
}

/// A usage error (exit status 2) saying `why`: an option that needs
/// another.
fn missing<T>(why: impl std::fmt::Display) -> Result<T, clap::Error> {
    use clap::CommandFactory;
    Err(Cli::command().error(clap::error::ErrorKind::MissingRequiredArgument, why))
}

/// How a record's costs are read, from `--cost`, `--cost-rate` and
/// `--field-separator`: each cost limit's budget in the order given.
///
/// # Errors
/// One of `--cost` and `--cost-rate` without the other, a cost given twice,
/// a cost limit naming a cost there is none of, a cost no limit spends,
/// `--cost-rate` with `--share` beside `--byte-rate` or spending more
/// different sets of costs than a shared slot carries weights, or a field
/// separator that is the record delimiter.
fn cost_config(cli: &Cli, delimiter: u8) -> Result<Option<Cost>, clap::Error> {
    match (cli.cost.is_empty(), cli.cost_rate.is_empty()) {
        (true, true) => return Ok(None),
        (false, true) => {
            return missing("--cost: needs --cost-rate, the limit the cost is spent on")
        }
        (true, false) => return missing("--cost-rate: needs --cost, where a record's cost is"),
        (false, false) => {}
    }
    let budgets: Vec<Option<String>> = cli.cost_rate.iter().map(|(n, _, _)| n.clone()).collect();
    let spent: Vec<&str> = budgets
        .iter()
        .flatten()
        .flat_map(|n| n.split('+'))
        .collect();
    let costs = named_costs(cli, &spent)?;
    if !cli.share.is_empty() && !cli.byte_rate.is_empty() {
        return usage(
            "--cost-rate: with --share, not beside --byte-rate (a shared slot is reserved for one weight: bytes or cost)",
        );
    }
    let separator = cli.field_separator;
    if separator == Some(delimiter)
        && costs
            .iter()
            .any(|(_, a)| matches!(a, CostArg::Key(KeyArg::Field(_))))
    {
        return missing("--field-separator: it is the record delimiter, which no field contains");
    }
    let cost = match Cost::with_budgets(costs, &budgets, separator, delimiter) {
        Ok(cost) => cost,
        Err(name) if name.is_empty() => {
            return missing("--cost-rate: needs --cost, where a record's cost is")
        }
        Err(name) => {
            return missing(format!(
                "--cost-rate: spends the cost named {name}; give --cost {name}=SPEC"
            ))
        }
    };
    for name in cost.names() {
        let used = match name {
            Some(n) => spent.contains(&n),
            None => budgets.iter().any(Option::is_none),
        };
        if !used {
            let (flag, hint) = match name {
                Some(n) => (format!("--cost {n}=…"), format!("--cost-rate {n}=N/UNIT")),
                None => ("--cost".to_string(), "--cost-rate N/UNIT".to_string()),
            };
            return missing(format!("{flag}: no limit spends it; give {hint}"));
        }
    }
    let spends = shared::budget_tags(Some(&cost));
    if !cli.share.is_empty() && shared::gcra::weight_tags(&spends).len() > shared::gcra::WEIGHTS {
        return usage(format!(
            "--cost-rate: with --share, the cost limits spend more than {} different sets of costs (a shared slot carries {} weights)",
            shared::gcra::WEIGHTS,
            shared::gcra::WEIGHTS
        ));
    }
    Ok(Some(cost))
}

/// What `--settle` reads, for each cost it names (its place among the
/// costs of `cost`).
///
/// # Errors
/// A cost settled twice, or one there is no `--cost` for.
fn settle_config(
    cli: &Cli,
    cost: Option<&Cost>,
) -> Result<Vec<(usize, crate::cost::Estimate)>, clap::Error> {
    let given = &cli.job_args.settle;
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let mut settle: Vec<(usize, crate::cost::Estimate)> = Vec::new();
    for (name, spec) in given {
        let shown = name.as_deref().map_or(String::new(), |n| format!(" {n}="));
        let Some(i) = cost.and_then(|c| c.cost_named(name.as_deref())) else {
            return usage(match name {
                Some(n) => format!("--settle{shown}…: no cost named {n}; give --cost {n}=SPEC"),
                None => {
                    "--settle: no unnamed cost; give --cost SPEC, or --settle NAME=SPEC".to_string()
                }
            });
        };
        if settle.iter().any(|(j, _)| *j == i) {
            return usage(format!("--settle{shown}…: given twice for one cost"));
        }
        settle.push((i, spec.clone()));
    }
    Ok(settle)
}

/// The costs `--cost` gives, each named when it reads `NAME=SPEC` and a
/// cost limit spends NAME (`spent`), else unnamed.
///
/// # Errors
/// A cost given twice, or one that reads as neither.
fn named_costs(cli: &Cli, spent: &[&str]) -> Result<Vec<(Option<String>, CostArg)>, clap::Error> {
    let mut costs: Vec<(Option<String>, CostArg)> = Vec::new();
    for given in &cli.cost {
        let (name, arg) = match (&given.named, &given.whole) {
            (Some((name, arg)), _) if spent.contains(&name.as_str()) => {
                (Some(name.clone()), arg.clone())
            }
            (_, Ok(arg)) => (None, arg.clone()),
            (Some((name, _)), Err(_)) => {
                return usage(format!(
                    "--cost {name}=…: no limit spends it; give --cost-rate {name}=N/UNIT"
                ))
            }
            (None, Err(why)) => return usage(format!("--cost: {why}")),
        };
        if costs.iter().any(|(n, _)| *n == name) {
            return usage(match name {
                Some(n) => format!("--cost {n}=…: given twice; a record has one cost of each name"),
                None => "--cost: given twice; name each (--cost NAME=SPEC) for limits of their own"
                    .to_string(),
            });
        }
        costs.push((name, arg));
    }
    Ok(costs)
}

/// Keys remembered at most unless `--max-keys` says.
const DEFAULT_MAX_KEYS: usize = 100_000;

/// The default rate.
const ONE_PER_SECOND: Rate = Rate::Limited {
    count: 1,
    period_ns: 1_000_000_000,
};

/// What `--share` and its companions give, checked against the limits.
///
/// # Errors
/// `--share` with no rate to share (`--rate inf` alone); `--share` given
/// twice; `--share-on-error` or
/// `--share-peers` without `--share`.
fn share(cli: &Cli, limits: &[Limit]) -> Result<Option<shared::Share>, clap::Error> {
    if cli.share.len() > 1 {
        return usage("--share: given twice; a drip shares its limits under one NAME");
    }
    let Some(target) = cli.share.first().cloned() else {
        if cli.share_on_error != shared::OnError::Wait || cli.share_peers != 1 {
            return usage("--share-on-error and --share-peers need --share");
        }
        return Ok(None);
    };
    if limits.is_empty()
        && cli.key_rate.is_empty()
        && cli.key_rates.is_none()
        && cli.budget.is_empty()
    {
        return usage("--share: there is no rate to share (--rate inf)");
    }
    let key = default_key_rates(cli)
        .first()
        .filter(|_| !cli.key.is_empty())
        .map(|&(rate, burst)| Limit::records(rate, burst));
    let key = key.map(crate::keyed::KeyTable::one);
    shared::in_range(limits, key.as_ref()).or_else(|why| usage(format!("{why} (--share)")))?;
    shared::counts_in_range(&cli.budget, cli.share_jobs)
        .or_else(|why| usage(format!("{why} (--share)")))?;
    Ok(Some(shared::Share {
        target,
        on_error: cli.share_on_error,
        peers: cli.share_peers,
        quiet: cli.quiet,
        settle: !cli.job_args.settle.is_empty(),
    }))
}

impl TryFrom<Cli> for Config {
    type Error = clap::Error;

    fn try_from(cli: Cli) -> Result<Config, clap::Error> {
        let limits = limits(&cli)?;
        let share = share(&cli, &limits)?;
        let jobs = cli.job_args.config().or_else(missing)?;
        let share_jobs = share_jobs(&cli, share.as_ref(), jobs.is_some())?;
        let key_jobs = key_jobs(&cli, jobs.is_some())?;
        let jobs = jobs.map(|jobs| JobConfig {
            quiet: cli.quiet,
            share: share.as_ref().map(|s| s.target.clone()),
            share_jobs,
            key_jobs,
            count_key_jobs: !cli.key.is_empty(),
            ..jobs
        });
        let delimiter = if cli.null {
            0
        } else {
            cli.delimiter.unwrap_or(b'\n')
        };
        let (capacity, capacity_bytes, capacity_for) = capacity(&cli, &limits)?;
        let (key, key_capacity_for, key_table) = match key_config(&cli, delimiter, capacity)? {
            Some((key, sized, table)) => (Some(key), sized, table),
            None => (None, None, None),
        };
        let cost = cost_config(&cli, delimiter)?;
        let jobs = match jobs {
            Some(jobs) => Some(JobConfig {
                settle: settle_config(&cli, cost.as_ref())?,
                ..jobs
            }),
            None => None,
        };
        outputs_apart(&cli)?;
        let (schedule, ramp) = timed(&cli, &limits)?;
        let inputs = inputs(cli.files);
        let progress = if cli.quiet {
            ProgressMode::Never
        } else if cli.progress {
            ProgressMode::Always
        } else {
            ProgressMode::Auto
        };
        Ok(Config {
            inputs,
            limits,
            budgets: cli.budget,
            budget_exhausted: cli.budget_exhausted,
            capacity,
            capacity_bytes,
            capacity_for,
            key_capacity_for,
            overflow: cli.overflow,
            delimiter,
            max_record: cli.max_record,
            oversize: cli.oversize,
            max_wait: cli.max_wait,
            dead_letter: cli.dead_letter,
            drain: cli.drain,
            stats: cli.stats,
            stats_json: cli.stats_json,
            stats_interval: cli.stats_interval,
            progress,
            share,
            jobs,
            key,
            key_table,
            cost: cost.unwrap_or_default(),
            metrics: cli.metrics,
            name: cli.name,
            control: !cli.no_control,
            schedule,
            ramp,
        })
    }
}

impl JobArgs {
    /// The runner's configuration, when `--exec` is given.
    ///
    /// # Errors
    /// A runner's flag without `--exec`, or a flag without the runner's flag
    /// it needs: what to say.
    pub fn config(&self) -> Result<Option<JobConfig>, String> {
        if self.order_window.is_some() && !self.keep_order {
            return Err("--order-window: only with --keep-order".into());
        }
        if let (Some(resume), Some(joblog)) = (&self.resume, &self.joblog) {
            // One file by any name: the same device and inode, or the
            // same name in the same directory (not created yet).
            if resume != joblog && !crate::input::same_file(resume, joblog) {
                return Err("--joblog: --resume appends to its JOBLOG; give one of them".into());
            }
        }
        if self.exec.is_empty() {
            return match self.stray_flag() {
                Some(flag) => Err(format!(
                    "{flag}: only with --exec (the command to run per record)"
                )),
                None => Ok(None),
            };
        }
        Ok(Some(JobConfig {
            command: self.exec.clone(),
            jobs: self.jobs.unwrap_or(1),
            record_on_stdin: self.record_on_stdin,
            retries: self.retries.unwrap_or(0),
            policy: Policy {
                retry_on: self
                    .retry_on
                    .clone()
                    .map_or_else(|| DEFAULT_RETRY_ON.to_vec(), |s| s.0),
                overload_on: self.overload_on.clone().map(|s| s.0).unwrap_or_default(),
            },
            backoff: self.backoff.unwrap_or(DEFAULT_BACKOFF),
            timeout: self.timeout,
            deadline: self.deadline,
            adapt: self.adapt,
            joblog: self.joblog.clone(),
            resume: self.resume.clone(),
            quota_pacing: !self.no_quota_pacing,
            quiet: false,
            keep_order: self
                .keep_order
                .then(|| self.order_window.unwrap_or(DEFAULT_WINDOW)),
            share: None,
            share_jobs: None,
            key_jobs: None,
            count_key_jobs: false,
            settle: Vec::new(),
        }))
    }

    /// The first runner's flag given, if any.
    fn stray_flag(&self) -> Option<&'static str> {
        [
            (self.jobs.is_some(), "--jobs"),
            (self.record_on_stdin, "--record-on-stdin"),
            (self.retries.is_some(), "--retries"),
            (self.retry_on.is_some(), "--retry-on"),
            (self.overload_on.is_some(), "--overload-on"),
            (self.backoff.is_some(), "--backoff"),
            (self.timeout.is_some(), "--timeout"),
            (self.deadline.is_some(), "--deadline"),
            (self.adapt, "--adapt"),
            (self.joblog.is_some(), "--joblog"),
            (self.keep_order, "--keep-order"),
            (self.resume.is_some(), "--resume"),
            (self.no_quota_pacing, "--no-quota-pacing"),
            (!self.settle.is_empty(), "--settle"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::Overflow;
    use crate::input::Oversize;
    use crate::rate::{parse_byte_rate, parse_rate};
    use clap::Parser;

    fn config(args: &[&str]) -> Result<Config, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("drip").chain(args.iter().copied()))?;
        Config::try_from(cli)
    }

    fn rate(text: &str) -> Rate {
        parse_rate(text).unwrap()
    }

    #[test]
    fn a_cost_limit_is_found_by_the_names_it_spends() {
        let c = config(&[
            "-r",
            "5/s",
            "--cost",
            "in=bytes/4",
            "--cost",
            "out=max_tokens",
            "--cost-rate",
            "in=100/s",
            "--cost-rate",
            "out=50/s",
            "--cost-rate",
            "in+out=120/s",
        ])
        .unwrap();
        let place = |name: Option<&str>| c.cost_limit(name).map(|(i, l)| (i, l.rate));
        assert_eq!(place(Some("in")), Some((1, rate("100/s"))));
        assert_eq!(place(Some("out")), Some((2, rate("50/s"))));
        assert_eq!(place(Some("out+in")), Some((3, rate("120/s"))));
        assert_eq!(place(None), None);
        let c = config(&["--cost", "2", "--cost-rate", "100/s"]).unwrap();
        assert_eq!(c.cost_limit(None).map(|(i, _)| i), Some(0));
        assert!(c.cost_limit(Some("in")).is_none());
    }

    #[test]
    fn policies_reach_the_config() {
        let c = config(&["--oversize", "skip"]).unwrap();
        assert_eq!(c.oversize, Oversize::Skip);
        let c = config(&["-o", "drop-oldest"]).unwrap();
        assert_eq!(c.overflow, Overflow::DropOldest);
    }

    #[test]
    fn interval_sets_the_rate() {
        let c = config(&["-i", "250ms"]).unwrap();
        assert_eq!(c.records_per_second(), 4.0);
    }

    #[test]
    fn dash_is_stdin() {
        let c = config(&["a", "-", "b"]).unwrap();
        assert_eq!(
            c.inputs,
            vec![
                Input::Path("a".into()),
                Input::Stdin,
                Input::Path("b".into())
            ]
        );
    }

    #[test]
    fn null_is_the_nul_delimiter() {
        let c = config(&["-0"]).unwrap();
        assert_eq!(c.delimiter, 0);
    }

    #[test]
    fn repeated_flags_take_the_last_value() {
        let c = config(&["-c", "5", "-c", "7", "-q", "-q"]).unwrap();
        assert_eq!(c.capacity, 7);
    }

    #[test]
    fn several_limits_each_with_its_burst() {
        let c = config(&[
            "-r",
            "10/s",
            "-r",
            "500/min:50",
            "--byte-rate",
            "1MiB/s:64KiB",
        ])
        .unwrap();
        assert_eq!(
            c.limits,
            [
                Limit {
                    rate: rate("10/s"),
                    burst: 1,
                    unit: Unit::Records
                },
                Limit {
                    rate: rate("500/min"),
                    burst: 50,
                    unit: Unit::Records
                },
                Limit {
                    rate: parse_byte_rate("1MiB/s").unwrap(),
                    burst: 64 << 10,
                    unit: Unit::Bytes
                },
            ]
        );
        // One --rate takes --burst as before.
        let c = config(&["-r", "10/s", "-b", "5"]).unwrap();
        assert_eq!(c.limits[0].burst, 5);
        // inf adds no limit; alone, nothing is limited.
        assert!(config(&["-r", "inf"]).unwrap().limits.is_empty());
        assert_eq!(config(&["-r", "inf", "-r", "3/s"]).unwrap().limits.len(), 1);
        // A byte rate alone limits bytes only.
        let c = config(&["--byte-rate", "1KB/s"]).unwrap();
        assert_eq!(c.limits.len(), 1);
        assert_eq!(c.records_per_second(), f64::INFINITY);
    }

    #[test]
    fn a_capacity_for_a_duration_is_what_the_tightest_limit_drains() {
        let c = config(&["-r", "10/s", "-r", "500/min:50", "-c", "30s"]).unwrap();
        assert_eq!(c.capacity, 250);
        let sized = c.capacity_for.unwrap();
        assert_eq!((sized.capacity, sized.unit), (250, "records"));
        assert_eq!(sized.set_by, "--rate 500/min");
        // The default rate, 1/s.
        let c = config(&["-c", "1m"]).unwrap();
        assert_eq!(c.capacity, 60);
        assert_eq!(c.capacity_for.unwrap().set_by, "the default --rate 1/s");
        // Only a byte rate: the bytes it drains, the records unbounded.
        let c = config(&["--byte-rate", "1KiB/s", "-c", "30s"]).unwrap();
        assert_eq!((c.capacity, c.capacity_bytes), (usize::MAX, Some(30 << 10)));
        assert_eq!(c.capacity_for.unwrap().set_by, "--byte-rate 1024 bytes/s");
        // A record rate beside it sets the records; --capacity-bytes stays.
        let c = config(&["-r", "2/s", "--byte-rate", "1KiB/s", "-c", "5s"]).unwrap();
        assert_eq!((c.capacity, c.capacity_bytes), (10, None));
        // Per key: the key rate.
        let c = config(&["--key", "1", "--key-rate", "2/min", "--key-capacity", "1h"]).unwrap();
        assert_eq!(c.key.unwrap().key_capacity, 120);
        assert_eq!(c.key_capacity_for.unwrap().set_by, "--key-rate 2/min");
        // A number is a number.
        assert_eq!(config(&["-c", "300"]).unwrap().capacity_for, None);
    }

    #[test]
    fn a_capacity_for_a_duration_needs_a_rate_that_drains_something() {
        for args in [
            &["-r", "inf", "-c", "30s"][..],
            &["--key", "1", "--key-rate", "5/s", "-c", "30s"],
        ] {
            let e = config(args).unwrap_err();
            assert!(
                e.to_string()
                    .contains("--capacity 30s: a duration needs a --rate"),
                "{e}"
            );
        }
        let e = config(&["-r", "1/min", "-c", "1s"]).unwrap_err();
        assert!(e.to_string().contains("--rate 1/min drains nothing"), "{e}");
        let e = config(&[
            "--byte-rate",
            "1KiB/s",
            "-c",
            "1s",
            "--capacity-bytes",
            "4KiB",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("give one of them"), "{e}");
        let e = config(&["--key", "1", "--key-rate", "1/h", "--key-capacity", "1m"]).unwrap_err();
        assert!(
            e.to_string().contains("--key-capacity 1m: --key-rate 1/h"),
            "{e}"
        );
    }

    #[test]
    fn an_ambiguous_burst_is_refused() {
        let e = config(&["-r", "10/s", "-r", "500/min", "-b", "5"]).unwrap_err();
        assert!(e.to_string().contains("RATE:BURST"), "{e}");
        assert!(config(&["-r", "10/s:3", "-b", "5"]).is_err());
        assert!(config(&["-r", "inf:5"]).is_err());
        assert!(config(&["-r", "inf", "-b", "5"]).is_err());
        let e = config(&["--byte-rate", "1KiB/s", "-b", "3"]).unwrap_err();
        assert!(e.to_string().contains("SIZE/UNIT:BURST"), "{e}");
        assert!(config(&["-r", "10/s:0"]).is_err());
        assert!(config(&["--byte-rate", "1MiB"]).is_err());
        assert!(config(&["--byte-rate", "1MiB/s:0"]).is_err());
    }

    #[test]
    fn status_lists_reach_the_policy() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "drip",
            "--retry-on",
            "1,75",
            "--overload-on",
            "9",
            "--exec",
            "true",
        ])
        .unwrap();
        let policy = cli.job_args.config().unwrap().unwrap().policy;
        assert_eq!(
            (policy.retry_on, policy.overload_on),
            (vec![1, 75], vec![9])
        );
    }

    #[test]
    fn a_rate_table_is_checked_with_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rates");
        std::fs::write(
            &file,
            "# hosts\n*.GitHub.com. 1/s:2\n\ncdn.example 50/s\n* 10/s\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let c = config(&[
            "--key",
            "host",
            "--key-rates",
            f,
            "--key-rate",
            "cdn.example=40/s",
        ])
        .unwrap();
        let rates = &c.key.as_ref().unwrap().rates;
        let names: Vec<&str> = rates.rows().iter().map(|r| r.name.as_str()).collect();
        // The command line's row replaces the file's for the same key.
        assert_eq!(names, ["*.github.com", "*", "cdn.example"]);
        assert_eq!(rates.rows()[2].rate, rate("40/s"));
        // No --key-rate RATE: the keys no row matches have no limit.
        assert_eq!(c.key.as_ref().unwrap().rate, Rate::Unlimited);
        assert_eq!(c.key_table.unwrap().file.as_deref(), Some(file.as_path()));
        // Rows alone, on the command line, beside the default.
        let c = config(&["--key", "1", "--key-rate", "a=1/s", "--key-rate", "2/s"]).unwrap();
        let key = c.key.unwrap();
        assert_eq!((key.rate, key.rates.rows().len()), (rate("2/s"), 1));
        assert!(c.key_table.unwrap().file.is_none());
    }

    #[test]
    fn a_bad_rate_table_is_a_usage_error_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rates");
        std::fs::write(&file, "a 1/s\n\nb x/s\n").unwrap();
        let f = file.to_str().unwrap();
        for (args, says) in [
            (
                vec!["--key", "1", "--key-rates", f],
                format!("--key-rates {f}:3: 'x' is not a number"),
            ),
            (
                vec!["--key", "1", "--key-rates", "/nonexistent/r"],
                "--key-rates /nonexistent/r: ".to_string(),
            ),
            (
                vec!["--key-rates", f],
                "--key-rates: needs --key".to_string(),
            ),
            (
                vec!["--key-rate", "a=1/s"],
                "--key-rate: needs --key".to_string(),
            ),
            (
                vec!["--key", "1", "--key-rate", "a=1/s", "--key-rate", "a=2/s"],
                "a row for 'a' is given already".to_string(),
            ),
            (
                vec!["--key", "1", "--key-rate", "1/s", "--key-rate", "2/s"],
                "--key-rate: given twice".to_string(),
            ),
            (
                vec!["--key", "host", "--key-rate", "a/b=1/s"],
                "not a host name".to_string(),
            ),
            (
                vec!["--key", "1", "--key-rate", "a=1/s", "--key-capacity", "1m"],
                "--key-capacity: a DURATION needs --key-rate RATE".to_string(),
            ),
            (
                vec![
                    "--key",
                    "1",
                    "--key-rate",
                    "a=1/40d",
                    "--key-rate",
                    "1/s",
                    "--share",
                    "n",
                ],
                "the rate table's row a: slower than one record in 32 days".to_string(),
            ),
            (
                vec!["--key", "1", "--key-rate", "a=1/s", "--share", "n"],
                "--key-rate KEY=RATE: with --share every key needs a limit".to_string(),
            ),
        ] {
            let e = config(&args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
            assert!(e.to_string().contains(&says), "{args:?}: {e}");
        }
        let e = Cli::try_parse_from(["drip", "--key", "1", "--key-rate", "a=inf"]).unwrap_err();
        assert!(e.to_string().contains("not inf"), "{e}");
        let e = Cli::try_parse_from(["drip", "--key", "1", "--key-rate", "=1/s"]).unwrap_err();
        assert!(e.to_string().contains("no key before '='"), "{e}");
    }
}
