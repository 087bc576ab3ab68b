//! A record's costs (`--cost`): whole numbers read or estimated from the
//! record (tokens, a weight), spent on the cost limits (`--cost-rate`) the
//! way a byte rate spends a record's size.
//!
//! A cost is a field by number (`--cost 2`, fields split as for `--key`),
//! the first capture group of a regular expression
//! (`--cost '"tokens":([0-9]+)'`), or an estimate ([`Estimate`]): a sum of
//! products of whole numbers, JSON paths into the record and its size in
//! bytes (`--cost 'bytes/4+max_tokens*n?1'`). A field or a group is ASCII
//! digits, perhaps with blanks around them. A record whose cost cannot be
//! read (no such field, no match, not a whole number, not JSON, no such
//! path, above 2^53) costs [`UNREADABLE_COST`]: it is still paced and
//! passed on, never lost; the reader says so once on stderr.
//!
//! A cost may have a name (`--cost in=bytes/4`); a cost limit spends the
//! unnamed cost, or the named costs it names, summed
//! (`--cost-rate in+out=40000/min`): a [`Spending`].
//!
//! Pure: no threads, no clock, no I/O.

use serde_json::Value;

use crate::key::{parse_field_or_group, KeyArg, KeySpec};
use crate::rate::{parse_cost_rate_burst, Rate};

/// What a record whose cost cannot be read costs (units of the cost limits).
pub const UNREADABLE_COST: u64 = 1;

/// The largest cost read (2^53, the largest whole number a JSON reader keeps
/// exactly): a larger number is not read.
pub const MAX_COST: u64 = 1 << 53;

/// An estimate: a sum of products, each of whole numbers, JSON paths and
/// the size in bytes, divided by a whole number and rounded up
/// (`bytes/4+max_tokens*n?1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    terms: Vec<Product>,
}

/// One term of an [`Estimate`]: its factors multiplied, divided by
/// `divisor`, rounded up.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Product {
    factors: Vec<Factor>,
    divisor: u64,
}

/// One factor of a [`Product`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Factor {
    /// A whole number.
    Number(u64),
    /// The size in bytes (of the record without its delimiter, or of a
    /// job's output).
    Bytes,
    /// A whole number at a JSON path (object keys, array indices), or
    /// `default` where the path leads nowhere (or to `null`).
    Json {
        path: Vec<String>,
        default: Option<u64>,
    },
}

/// Where one cost is read: a field or a group, or an estimate.
#[derive(Debug, Clone)]
pub enum CostArg {
    /// A field number or a regular expression's first group.
    Key(KeyArg),
    /// An estimate.
    Estimate(Estimate),
}

/// `--cost` as given: read whole, and read as `NAME=SPEC` when it starts
/// with a name and an equals sign (the command line decides which, by the
/// names the cost limits spend: a regular expression such as
/// `tokens=([0-9]+)` stays one where no limit spends `tokens`).
#[derive(Debug, Clone)]
pub struct CostGiven {
    /// The whole text as an unnamed cost, or why it is none.
    pub whole: Result<CostArg, String>,
    /// The name and the cost after it, when the text reads so.
    pub named: Option<(String, CostArg)>,
}

/// One cost limit's spending: the costs it sums (indices into the costs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spending {
    /// The name as the limit gave it (`in+out`), `None` for the unnamed.
    pub name: Option<String>,
    /// The costs summed.
    costs: Vec<usize>,
}

/// How a record's costs are found, and which each cost limit spends;
/// [`Cost::none`] (the default) where no cost is read (no `--cost`).
#[derive(Debug, Clone)]
pub struct Cost {
    /// Each cost: its name (`None`: the unnamed cost) and where it is read.
    costs: Vec<(Option<String>, Source)>,
    /// Each cost limit's budget, in the order of the cost limits.
    budgets: Vec<Spending>,
    /// The records' delimiter (`None`: [`Cost::none`], which reads no
    /// record).
    delimiter: Option<u8>,
}

impl Default for Cost {
    /// [`Cost::none`].
    fn default() -> Cost {
        Cost::none()
    }
}

/// Where a cost is read, with `--field-separator` known.
#[derive(Debug, Clone)]
enum Source {
    Key(KeySpec),
    Estimate(Estimate),
}

impl Cost {
    /// One unnamed cost found by `spec` in records ending in `delimiter`,
    /// spent by every cost limit.
    pub fn new(spec: KeySpec, delimiter: u8) -> Cost {
        Cost {
            costs: vec![(None, Source::Key(spec))],
            budgets: Vec::new(),
            delimiter: Some(delimiter),
        }
    }

    /// No cost read (no `--cost`): the records are not weighed. It has no
    /// costs, names and cost limits none ([`Cost::budgets`] is 0), and a
    /// cost limit spends [`UNREADABLE_COST`] for each record
    /// ([`Cost::spend`]); a record's [`Cost::body`] is the record whole.
    pub fn none() -> Cost {
        Cost {
            costs: Vec::new(),
            budgets: Vec::new(),
            delimiter: None,
        }
    }

    /// Whether any cost is read (`false`: [`Cost::none`]).
    pub fn weighs(&self) -> bool {
        !self.costs.is_empty()
    }

    /// Costs named (or not: `None`) as `costs` says, fields split on
    /// `separator`; `budgets[i]`, the names the `i`-th cost limit sums
    /// (`None`: the unnamed cost).
    ///
    /// # Errors
    /// A budget naming a cost there is none of (with its name).
    pub fn with_budgets(
        costs: Vec<(Option<String>, CostArg)>,
        budgets: &[Option<String>],
        separator: Option<u8>,
        delimiter: u8,
    ) -> Result<Cost, String> {
        let costs: Vec<(Option<String>, Source)> = costs
            .into_iter()
            .map(|(name, arg)| {
                let source = match arg {
                    CostArg::Key(k) => {
                        let sep = matches!(k, KeyArg::Field(_)).then_some(separator).flatten();
                        Source::Key(KeySpec::new(k, sep))
                    }
                    CostArg::Estimate(e) => Source::Estimate(e),
                };
                (name, source)
            })
            .collect();
        let find = |name: Option<&str>| costs.iter().position(|(n, _)| n.as_deref() == name);
        let budgets = budgets
            .iter()
            .map(|name| {
                let parts: Vec<Option<&str>> = match name {
                    None => vec![None],
                    Some(n) => n.split('+').map(Some).collect(),
                };
                let costs = parts
                    .iter()
                    .map(|&p| find(p).ok_or_else(|| p.unwrap_or("").to_string()))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Spending {
                    name: name.clone(),
                    costs,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Cost {
            costs,
            budgets,
            delimiter: Some(delimiter),
        })
    }

    /// The costs' names, in order (`None`: the unnamed cost).
    pub fn names(&self) -> impl Iterator<Item = Option<&str>> {
        self.costs.iter().map(|(n, _)| n.as_deref())
    }

    /// The index of the cost named `name` (`None`: the unnamed one).
    pub fn cost_named(&self, name: Option<&str>) -> Option<usize> {
        self.names().position(|n| n == name)
    }

    /// The cost limit (its place among the cost limits, in the order
    /// given) that spends the costs `name` names: `in`, `out`, `in+out`
    /// (in any order), or `None` for the one spending the unnamed cost.
    /// What a quota a server announces paces (OpenAI's `-tokens`: `in+out`,
    /// or the unnamed budget; Anthropic's `-input-tokens`: `in`).
    pub fn budget(&self, name: Option<&str>) -> Option<usize> {
        self.budgets_named(name).first().copied()
    }

    /// Every cost limit (its place among the cost limits, in the order
    /// given) that spends the costs `name` names, as [`Cost::budget`]:
    /// `drip ctl … cost-rate NAME=…` replaces them. Empty when none does,
    /// or a cost it names is not one of these.
    pub fn budgets_named(&self, name: Option<&str>) -> Vec<usize> {
        let wanted: Option<Vec<usize>> = match name {
            None => self.cost_named(None).map(|c| vec![c]),
            Some(n) => n.split('+').map(|p| self.cost_named(Some(p))).collect(),
        };
        let Some(mut wanted) = wanted else {
            return Vec::new();
        };
        wanted.sort_unstable();
        (0..self.budgets.len())
            .filter(|&i| {
                let mut have = self.budgets[i].costs.clone();
                have.sort_unstable();
                have == wanted
            })
            .collect()
    }

    /// Each cost limit's name as given (`None`: the unnamed), in order.
    pub fn budget_names(&self) -> impl Iterator<Item = Option<&str>> {
        self.budgets.iter().map(|b| b.name.as_deref())
    }

    /// How many cost limits there are (0: one budget, the first cost,
    /// spent by every cost limit).
    pub fn budgets(&self) -> usize {
        self.budgets.len()
    }

    /// Whether every cost limit spends the same costs (so one weight per
    /// record serves them all, as a shared slot is reserved for one).
    pub fn one_weight(&self) -> bool {
        let costs = |b: &Spending| {
            let mut c = b.costs.clone();
            c.sort_unstable();
            c
        };
        self.budgets
            .windows(2)
            .all(|w| costs(&w[0]) == costs(&w[1]))
    }

    /// What cost limit `budget` spends, as one text whatever the order it
    /// was given in: the names of its costs, sorted, joined by `+` (the
    /// unnamed cost's name empty). Limits spending the same costs have
    /// the same.
    pub fn budget_tag(&self, budget: usize) -> String {
        let mut names: Vec<&str> = match self.budgets.get(budget) {
            Some(b) => b
                .costs
                .iter()
                .map(|&i| self.costs[i].0.as_deref().unwrap_or(""))
                .collect(),
            None => vec![self
                .costs
                .first()
                .and_then(|c| c.0.as_deref())
                .unwrap_or("")],
        };
        names.sort_unstable();
        names.join("+")
    }

    /// The record without its delimiter (under [`Cost::none`], the
    /// record).
    pub fn body<'a>(&self, record: &'a [u8]) -> &'a [u8] {
        match self.delimiter {
            Some(d) => record.strip_suffix(&[d]).unwrap_or(record),
            None => record,
        }
    }

    /// Each cost of `record` (with or without its delimiter), `None` where
    /// it cannot be read.
    pub fn estimates(&self, record: &[u8]) -> Vec<Option<u64>> {
        let body = self.body(record);
        let mut json = Lazy::new(body);
        self.costs
            .iter()
            .map(|(_, source)| match source {
                Source::Key(spec) => parse_cost(&spec.key(body)?),
                Source::Estimate(e) => e.of(body.len() as u64, &mut json),
            })
            .collect()
    }

    /// What the cost limit `budget` spends of `estimates` (from
    /// [`Cost::estimates`]): the sum of its costs, each unreadable one
    /// costing [`UNREADABLE_COST`].
    pub fn spend(&self, budget: usize, estimates: &[Option<u64>]) -> u64 {
        let cost = |i: usize| {
            estimates
                .get(i)
                .copied()
                .flatten()
                .unwrap_or(UNREADABLE_COST)
        };
        match self.budgets.get(budget) {
            Some(b) => b
                .costs
                .iter()
                .fold(0u64, |sum, &i| sum.saturating_add(cost(i))),
            None => cost(0),
        }
    }

    /// The first cost, or `None` when it cannot be read.
    pub fn read(&self, record: &[u8]) -> Option<u64> {
        self.estimates(record).first().copied().flatten()
    }

    /// The name (`""`: the unnamed cost) of the first cost of `record`
    /// that cannot be read, if any.
    pub fn unreadable(&self, record: &[u8]) -> Option<&str> {
        let estimates = self.estimates(record);
        let i = estimates.iter().position(Option::is_none)?;
        Some(self.costs[i].0.as_deref().unwrap_or(""))
    }

    /// The cost `record` spends on the first cost limit: its cost, or
    /// `UNREADABLE_COST`.
    pub fn of(&self, record: &[u8]) -> u64 {
        self.spend(0, &self.estimates(record))
    }
}

/// A text's JSON, parsed when first asked for (at most once).
pub struct Lazy<'a> {
    text: &'a [u8],
    parsed: Option<Option<Value>>,
}

impl<'a> Lazy<'a> {
    /// `text`, not parsed yet.
    pub fn new(text: &'a [u8]) -> Lazy<'a> {
        Lazy { text, parsed: None }
    }

    /// The JSON value, or `None` when the text is not JSON.
    fn value(&mut self) -> Option<&Value> {
        let text = self.text;
        self.parsed
            .get_or_insert_with(|| serde_json::from_slice(text).ok())
            .as_ref()
    }
}

impl Estimate {
    /// The estimate for a text of `bytes` bytes whose JSON is `json`;
    /// `None` when a path leads to no whole number (and has no default),
    /// the text is not JSON, or the sum is above [`MAX_COST`].
    pub fn of(&self, bytes: u64, json: &mut Lazy) -> Option<u64> {
        let mut sum = 0u64;
        for term in &self.terms {
            let mut product = 1u64;
            for factor in &term.factors {
                let n = match factor {
                    Factor::Number(n) => *n,
                    Factor::Bytes => bytes,
                    Factor::Json { path, default } => {
                        match json.value().map(|v| at_path(v, path)) {
                            Some(Some(v)) if !v.is_null() => v.as_u64()?,
                            Some(_) => (*default)?,
                            None => return None,
                        }
                    }
                };
                product = product.checked_mul(n)?;
            }
            sum = sum.checked_add(product.div_ceil(term.divisor))?;
        }
        (sum <= MAX_COST).then_some(sum)
    }

    /// Whether the estimate reads JSON.
    pub fn reads_json(&self) -> bool {
        self.terms
            .iter()
            .flat_map(|t| &t.factors)
            .any(|f| matches!(f, Factor::Json { .. }))
    }
}

/// What a job reported it spent of each of `costs` costs, read from its
/// `output` by `settle` (each cost's place and its estimate): the output
/// as JSON, or else its last line that is; `len` is the whole output's
/// size in bytes (what `bytes` is), of which `output` may be the tail.
/// `None` for a cost not settled or whose number cannot be read.
pub fn spent_from(
    settle: &[(usize, Estimate)],
    costs: usize,
    output: &[u8],
    len: u64,
) -> Vec<Option<u64>> {
    let value = serde_json::from_slice::<Value>(output).ok().or_else(|| {
        output
            .split(|&b| b == b'\n')
            .rev()
            .find(|line| !line.trim_ascii().is_empty())
            .and_then(|line| serde_json::from_slice(line).ok())
    });
    let mut json = Lazy {
        text: output,
        parsed: Some(value),
    };
    let mut spent = vec![None; costs];
    for (i, estimate) in settle {
        if let Some(s) = spent.get_mut(*i) {
            *s = estimate.of(len, &mut json);
        }
    }
    spent
}

/// The value at `path` in `value`: object keys, or indices into arrays.
fn at_path<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, step| match v {
        Value::Object(map) => map.get(step),
        Value::Array(items) => items.get(step.parse::<usize>().ok()?),
        _ => None,
    })
}

/// Parse an estimate: terms joined by `+`, each factors joined by `*`,
/// perhaps divided by a whole number (`/4`, once, at the end); a factor is
/// a whole number, `bytes` (the size), or a JSON path (keys and indices
/// joined by `.`; a leading `.` for a key named `bytes`), perhaps with a
/// default for when it leads nowhere (`n?1`). Blanks are allowed around
/// the signs.
///
/// # Errors
/// Anything else, saying what was expected.
pub fn parse_estimate(text: &str) -> Result<Estimate, String> {
    let terms = text
        .split('+')
        .map(|term| parse_product(term.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Estimate { terms })
}

/// One term: `F*F*…[/N]`.
fn parse_product(text: &str) -> Result<Product, String> {
    let (factors, divisor) = match text.split_once('/') {
        Some((factors, d)) => {
            let d = d.trim();
            match d.parse::<u64>() {
                Ok(n) if n > 0 && d.bytes().all(|b| b.is_ascii_digit()) => (factors, n),
                _ => return Err(format!("'/{d}': divide by a whole number from 1")),
            }
        }
        None => (text, 1),
    };
    let factors = factors
        .split('*')
        .map(|f| parse_factor(f.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Product { factors, divisor })
}

/// One factor: a number, `bytes`, or a JSON path with an optional default.
fn parse_factor(text: &str) -> Result<Factor, String> {
    if text.is_empty() {
        return Err("an empty term (expected a number, bytes or a JSON path)".into());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .ok()
            .filter(|&n| n <= MAX_COST)
            .map(Factor::Number)
            .ok_or_else(|| format!("'{text}': a number above 2^53"));
    }
    if text == "bytes" {
        return Ok(Factor::Bytes);
    }
    let (path, default) = match text.split_once('?') {
        Some((path, d)) => match d.parse::<u64>() {
            Ok(n) if n <= MAX_COST && d.bytes().all(|b| b.is_ascii_digit()) => (path, Some(n)),
            _ => return Err(format!("'{text}': expected a whole number after '?'")),
        },
        None => (text, None),
    };
    let path = path.strip_prefix('.').unwrap_or(path);
    let steps: Vec<String> = path.split('.').map(str::to_string).collect();
    let name_like = |s: &String| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if !steps.iter().all(name_like) || steps[0].bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{text}': expected a number, bytes, or a JSON path such as usage.prompt_tokens"
        ));
    }
    Ok(Factor::Json {
        path: steps,
        default,
    })
}

/// Parse one cost: digits are a field number; text without a parenthesis
/// that reads as an estimate is one; anything else is a regular
/// expression whose first capture group is the cost.
///
/// # Errors
/// Field 0, an invalid expression, or an expression without a group (with
/// why it is no estimate either).
pub fn parse_one_cost(text: &str) -> Result<CostArg, String> {
    if !text.is_empty() && !text.bytes().all(|b| b.is_ascii_digit()) && !text.contains('(') {
        return match parse_estimate(text) {
            Ok(e) => Ok(CostArg::Estimate(e)),
            Err(why) => Err(format!(
                "{why}; or give a field number, or a regular expression with a group such as '\"tokens\": *([0-9]+)', around the cost"
            )),
        };
    }
    parse_field_or_group(text, r#"'"tokens": *([0-9]+)', around the cost"#).map(CostArg::Key)
}

/// Parse `--cost`: `[NAME=]SPEC`, SPEC as [`parse_one_cost`] reads it.
///
/// # Errors
/// Neither reading gives a cost.
pub fn parse_cost_arg(text: &str) -> Result<CostGiven, String> {
    let named = text.split_once('=').and_then(|(name, spec)| {
        is_cost_name(name)
            .then(|| parse_one_cost(spec).ok())
            .flatten()
            .map(|arg| (name.to_string(), arg))
    });
    let whole = parse_one_cost(text);
    if let (Err(why), None) = (&whole, &named) {
        return Err(why.clone());
    }
    Ok(CostGiven { whole, named })
}

/// Parse `--cost-rate`: `[NAME[+NAME…]=]N/UNIT[:BURST]`.
///
/// # Errors
/// A bad name, or as [`crate::rate::parse_cost_rate_burst`].
pub fn parse_named_cost_rate(text: &str) -> Result<(Option<String>, Rate, u64), String> {
    let (name, rate) = match text.split_once('=') {
        Some((name, rate)) => {
            let mut names: Vec<&str> = name.split('+').collect();
            if !names.iter().all(|n| is_cost_name(n)) {
                return Err(format!(
                    "'{name}': a cost's name is letters, digits, _ and -, from a letter; several joined by +"
                ));
            }
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("'{name}': a cost named twice"));
            }
            (Some(name.to_string()), rate)
        }
        None => (None, text),
    };
    let (rate, burst) = parse_cost_rate_burst(rate)?;
    Ok((name, rate, burst))
}

/// Parse `--settle`: `[NAME=]SPEC`, SPEC an estimate read from a job's
/// output.
///
/// # Errors
/// A bad name or estimate.
pub fn parse_settle_arg(text: &str) -> Result<(Option<String>, Estimate), String> {
    let (name, spec) = match text.split_once('=') {
        Some((name, spec)) if is_cost_name(name) => (Some(name.to_string()), spec),
        Some((name, _)) => {
            return Err(format!(
                "'{name}': a cost's name is letters, digits, _ and -, from a letter"
            ))
        }
        None => (None, text),
    };
    Ok((name, parse_estimate(spec)?))
}

/// Whether `name` may name a cost: letters, digits, `_` and `-`, from a
/// letter.
pub fn is_cost_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A whole number of at most [`MAX_COST`], ASCII digits with optional blanks
/// (space, tab, CR) around them.
fn parse_cost(text: &[u8]) -> Option<u64> {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r');
    let start = text.iter().position(|b| !blank(b))?;
    let end = text.iter().rposition(|b| !blank(b))? + 1;
    let digits = &text[start..end];
    if digits.len() > 16 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    (n <= MAX_COST).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{parse_key, KeySpec};

    fn cost(spec: &str) -> Cost {
        Cost::new(KeySpec::new(parse_key(spec).unwrap(), None), b'\n')
    }

    fn estimate(spec: &str) -> Cost {
        let arg = parse_one_cost(spec).unwrap();
        Cost::with_budgets(vec![(None, arg)], &[None], None, b'\n').unwrap()
    }

    #[test]
    fn no_cost_reads_nothing_and_a_cost_limit_counts_each_record_unreadable() {
        let none = Cost::none();
        assert!(!none.weighs());
        assert!(cost("2").weighs());
        assert_eq!(none.budgets(), 0);
        assert_eq!(none.names().count(), 0);
        assert_eq!(none.budget_names().count(), 0);
        assert!(none.estimates(b"a 17\n").is_empty());
        assert_eq!(none.read(b"a 17\n"), None);
        assert_eq!(none.unreadable(b"a 17\n"), None);
        assert_eq!(none.of(b"a 17\n"), UNREADABLE_COST);
        assert_eq!(none.spend(1, &[]), UNREADABLE_COST);
        assert_eq!(none.body(b"a 17\n"), b"a 17\n", "the record whole");
        assert_eq!(cost("2").body(b"a 17\n"), b"a 17");
        assert!(!Cost::default().weighs());
    }

    #[test]
    fn a_field_or_a_group_is_the_cost() {
        assert_eq!(cost("2").read(b"a 17 b\n"), Some(17));
        assert_eq!(cost("2").read(b"a\t 0"), Some(0));
        let c = cost(r#""tokens": *([0-9]+)"#);
        assert_eq!(c.read(b"{\"q\":\"x\",\"tokens\": 250}\n"), Some(250));
    }

    #[test]
    fn an_unreadable_cost_is_none_and_costs_one() {
        let c = cost("2");
        for record in [
            &b"a\n"[..],
            b"a -3",
            b"a 1.5",
            b"a 12x",
            b"a 99999999999999999",
        ] {
            assert_eq!(c.read(record), None, "{record:?}");
            assert_eq!(c.of(record), UNREADABLE_COST);
        }
        assert_eq!(cost("([0-9]+)").read(b" 9007199254740992 "), Some(MAX_COST));
        assert_eq!(cost("([0-9]+)").read(b"9007199254740993"), None);
    }

    #[test]
    fn an_expression_without_a_group_is_refused_in_the_terms_of_a_cost() {
        let why = parse_cost_arg("tok(ens").unwrap_err();
        assert!(why.starts_with("invalid regular expression"), "{why}");
        let why = parse_cost_arg("[a-z]+").unwrap_err();
        assert!(why.contains("around the cost"), "{why}");
        assert!(!why.contains("key"), "{why}");
        assert!(parse_cost_arg("0").is_err());
        let given = parse_cost_arg("2").unwrap();
        assert!(matches!(given.whole, Ok(CostArg::Key(KeyArg::Field(2)))));
        assert!(given.named.is_none());
    }

    #[test]
    fn blanks_around_the_number_are_allowed() {
        assert_eq!(parse_cost(b" 42\r"), Some(42));
        assert_eq!(parse_cost(b"4 2"), None);
        assert_eq!(parse_cost(b""), None);
        assert_eq!(parse_cost(b"  "), None);
    }

    #[test]
    fn an_estimate_sums_products_of_json_paths_numbers_and_the_size() {
        let record = br#"{"max_tokens":100,"n":3,"a":{"b":[5,7]}}"#;
        let bytes = record.len() as u64;
        assert_eq!(estimate("max_tokens").read(record), Some(100));
        assert_eq!(estimate("a.b.1").read(record), Some(7));
        assert_eq!(estimate("bytes").read(record), Some(bytes));
        assert_eq!(estimate("bytes/4").read(record), Some(bytes.div_ceil(4)));
        assert_eq!(
            estimate("bytes/4 + max_tokens*n").read(b"{\"max_tokens\":100,\"n\":3}\n"),
            Some(24u64.div_ceil(4) + 300),
            "the delimiter is not counted"
        );
        assert_eq!(estimate("2*max_tokens+10").read(record), Some(210));
        assert_eq!(estimate("m*n?1").read(br#"{"m":9}"#), Some(9));
        assert_eq!(estimate("m*n?1").read(br#"{"m":9,"n":null}"#), Some(9));
        assert_eq!(estimate(".bytes").read(br#"{"bytes":6}"#), Some(6));
    }

    #[test]
    fn an_estimate_that_cannot_be_read_is_none() {
        for (spec, record) in [
            ("max_tokens", &b"not json"[..]),
            ("max_tokens", br#"{"n":1}"#),
            ("max_tokens", br#"{"max_tokens":"100"}"#),
            ("max_tokens", br#"{"max_tokens":-1}"#),
            ("max_tokens", br#"{"max_tokens":1.5}"#),
            ("a.b", br#"{"a":3}"#),
            ("m*m", br#"{"m":4294967296}"#),
            ("m", br#"{"m":9007199254740993}"#),
        ] {
            assert_eq!(estimate(spec).read(record), None, "{spec} of {record:?}");
        }
    }

    #[test]
    fn a_bad_estimate_is_refused_saying_what_was_expected() {
        for bad in [
            "bytes/0",
            "a+",
            "a**b",
            "3.x",
            "a.",
            "n?x",
            "bytes/4/2",
            "0.a",
        ] {
            let why = parse_cost_arg(bad).unwrap_err();
            assert!(
                why.contains("expected") || why.contains("divide"),
                "{bad}: {why}"
            );
        }
    }

    #[test]
    fn named_costs_spend_the_budgets_that_name_them() {
        let arg = |s: &str| parse_one_cost(s).unwrap();
        let c = Cost::with_budgets(
            vec![
                (Some("in".into()), arg("bytes/4")),
                (Some("out".into()), arg("max_tokens*n?1")),
            ],
            &[Some("in".into()), Some("out".into()), Some("in+out".into())],
            None,
            b'\n',
        )
        .unwrap();
        let record = b"{\"max_tokens\":50,\"n\":2}\n";
        let est = c.estimates(record);
        assert_eq!(est, vec![Some(6), Some(100)]);
        assert_eq!(
            (c.spend(0, &est), c.spend(1, &est), c.spend(2, &est)),
            (6, 100, 106)
        );
        assert_eq!(c.budget(Some("in")), Some(0));
        assert_eq!(c.budget(Some("out+in")), Some(2));
        assert_eq!(c.budget(None), None);
        assert!(!c.one_weight());
        assert_eq!(c.spend(1, &[Some(6), None]), UNREADABLE_COST);
        let missing = Cost::with_budgets(vec![], &[Some("in".into())], None, b'\n');
        assert_eq!(missing.unwrap_err(), "in");
    }

    #[test]
    fn a_name_is_read_only_before_an_equals_sign_after_a_letter() {
        let given = parse_cost_arg("in=bytes/4").unwrap();
        assert!(matches!(given.named, Some((ref n, CostArg::Estimate(_))) if n == "in"));
        let given = parse_cost_arg("tokens=([0-9]+)").unwrap();
        assert!(
            given.whole.is_ok() && given.named.is_some(),
            "either reading"
        );
        assert!(parse_cost_arg("\"t\"=([0-9]+)").unwrap().named.is_none());
        assert!(parse_cost_arg("in=").is_err());
    }
}
