//! What `drip ctl` may ask a running drip, and how it is said on the wire.
//!
//! The client sends one line: a JSON array of the words after the target
//! (`["rate","20/s"]`); the drip answers one line: a JSON object, or
//! `{"error":"…"}`. [`parse`] reads the words into a [`Request`], on both
//! sides (the client to refuse a bad command before connecting, the server
//! because it trusts nothing it is sent).
//!
//! Pure: no threads, no clock, no I/O.

use crate::rate::Rate;
use crate::schedule::{Limit, Unit};

/// What a client asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Who the drip is and where it stands (one entry of `drip ctl list`).
    Info,
    /// The `--stats-json` object, now.
    Stats,
    /// The keys' figures and top keys (`--key`).
    Keys,
    /// The running jobs (`--exec`).
    Jobs,
    /// Nothing leaves until `resume`.
    Pause,
    /// Records leave again as the schedule says.
    Resume,
    /// New global limits from now on: the record limits (`rate`), the
    /// byte limits (`byte-rate`), each kind replaced whole when given, and
    /// the cost limits (`cost-rate`) of each budget named.
    Rate {
        /// The new `--rate` limits, when any `rate` was given (empty:
        /// `rate inf`, no record limit).
        records: Option<Vec<Limit>>,
        /// The new `--byte-rate` limits, when any `byte-rate` was given.
        bytes: Option<Vec<Limit>>,
        /// The new `--cost-rate` limits, each with the costs it spends
        /// (`in`, `in+out`; `None`: the unnamed cost), in the order given;
        /// empty when no `cost-rate` was given.
        costs: Vec<(Option<String>, Limit)>,
    },
    /// A new limit per key from now on (`--key-rate`): the keys' no row of
    /// the rate table matches.
    KeyRate(Limit),
    /// The rate table per key read again, from this file (`--key-rates`).
    KeyRates(std::path::PathBuf),
    /// Every remembered key's row of the rate table, limit and records
    /// waiting.
    KeyList,
    /// A new number of job slots (`-j`, with `--exec`).
    Slots(usize),
    /// A new job limit per key (`--key-jobs`).
    KeyJobs(usize),
}

/// The commands, for `--help` and errors.
pub const COMMANDS: &str =
    "list, info, stats, keys, jobs, pause, resume, rate RATE[:BURST]..., byte-rate SIZE/UNIT[:BURST]..., cost-rate [NAME=]N/UNIT[:BURST]..., key-rate RATE[:BURST], key-rates FILE, key-list, -j N, key-jobs N";

/// The longest request line a drip reads, in bytes, its newline included.
pub const MAX_REQUEST: usize = 4096;

/// The request line for `words` (their JSON array, and a newline).
///
/// # Errors
/// The line is longer than [`MAX_REQUEST`]: how long, in words.
pub fn encode(words: &[String]) -> Result<String, String> {
    let line = format!("{}\n", serde_json::Value::from(words));
    if line.len() > MAX_REQUEST {
        return Err(format!(
            "the request is too long: {} bytes (at most {MAX_REQUEST})",
            line.len()
        ));
    }
    Ok(line)
}

/// Read the words after the target.
///
/// # Errors
/// An unknown command, a missing or bad value, or words left over: the
/// reason in words.
pub fn parse(words: &[String]) -> Result<Request, String> {
    let mut words = words.iter().map(String::as_str);
    let Some(first) = words.next() else {
        return Err(format!("no command (expected one of: {COMMANDS})"));
    };
    let rest: Vec<&str> = words.collect();
    let alone = |request: Request| {
        if rest.is_empty() {
            Ok(request)
        } else {
            Err(format!("{first}: takes no value, got '{}'", rest.join(" ")))
        }
    };
    match first {
        "info" => alone(Request::Info),
        "stats" => alone(Request::Stats),
        "keys" => alone(Request::Keys),
        "jobs" => alone(Request::Jobs),
        "key-list" => alone(Request::KeyList),
        "key-rates" => match rest.as_slice() {
            [file] if !file.is_empty() => Ok(Request::KeyRates(file.into())),
            _ => Err("key-rates: takes one FILE".to_string()),
        },
        "pause" => alone(Request::Pause),
        "resume" => alone(Request::Resume),
        "rate" | "byte-rate" | "cost-rate" => rates(first, &rest),
        "key-rate" => match rest.as_slice() {
            [value] => {
                let (rate, burst) = crate::rate::parse_key_rate(value)
                    .map_err(|why| format!("key-rate '{value}': {why}"))?;
                Ok(Request::KeyRate(Limit::records(rate, burst)))
            }
            _ => Err("key-rate: takes one RATE[:BURST]".to_string()),
        },
        "-j" | "--jobs" => match rest.as_slice() {
            [value] => crate::jobs::jobs_arg(value)
                .map(Request::Slots)
                .map_err(|why| format!("{first} '{value}': {why}")),
            _ => Err(format!("{first}: takes one number of jobs")),
        },
        "key-jobs" => match rest.as_slice() {
            [value] => crate::jobs::jobs_arg(value)
                .map(Request::KeyJobs)
                .map_err(|why| format!("key-jobs '{value}': {why}")),
            _ => Err("key-jobs: takes one number of jobs".to_string()),
        },
        other => Err(format!(
            "unknown command '{other}' (expected one of: {COMMANDS})"
        )),
    }
}

/// `rate R… [rate R… | byte-rate B… | cost-rate C…]…`, starting with
/// `first`: each `rate`, `byte-rate` or `cost-rate` takes the values after
/// it up to the next one (`rate 10/s 500/min:50` is `rate 10/s rate
/// 500/min:50`).
fn rates(first: &str, rest: &[&str]) -> Result<Request, String> {
    let mut records: Option<Vec<Limit>> = None;
    let mut bytes: Option<Vec<Limit>> = None;
    let mut costs = Vec::new();
    let mut kind = first;
    let mut valued = false;
    for &word in rest {
        if matches!(word, "rate" | "byte-rate" | "cost-rate") {
            if !valued {
                return Err(format!("{kind}: needs a value"));
            }
            (kind, valued) = (word, false);
            continue;
        }
        valued = true;
        if kind == "rate" {
            let (rate, burst) = crate::rate::parse_rate_burst(word)
                .map_err(|why| format!("rate '{word}': {why}"))?;
            let list = records.get_or_insert_with(Vec::new);
            if rate != Rate::Unlimited {
                list.push(Limit::records(rate, burst));
            }
        } else if kind == "cost-rate" {
            let (name, rate, burst) = crate::cost::parse_named_cost_rate(word)
                .map_err(|why| format!("cost-rate '{word}': {why}"))?;
            let unit = Unit::Cost;
            costs.push((name, Limit { rate, burst, unit }));
        } else {
            let (rate, burst) = crate::rate::parse_byte_rate_burst(word)
                .map_err(|why| format!("byte-rate '{word}': {why}"))?;
            bytes.get_or_insert_with(Vec::new).push(Limit {
                rate,
                burst,
                unit: Unit::Bytes,
            });
        }
    }
    if !valued {
        return Err(format!("{kind}: needs a value"));
    }
    Ok(Request::Rate {
        records,
        bytes,
        costs,
    })
}

/// The reply for an error: `{"error":"…"}`.
pub fn error_reply(why: &str) -> String {
    serde_json::json!({ "error": why }).to_string()
}

/// A reply read back: the JSON object, or the error it says.
///
/// # Errors
/// The drip's error, or a reply that is no JSON object.
pub fn read_reply(line: &str) -> Result<serde_json::Value, String> {
    let value: serde_json::Value = serde_json::from_str(line.trim_end())
        .map_err(|e| format!("an answer that is not JSON ({e})"))?;
    match value.get("error").and_then(serde_json::Value::as_str) {
        Some(why) => Err(why.to_string()),
        None if value.is_object() || value.is_array() => Ok(value),
        None => Err("an answer that is not a JSON object".to_string()),
    }
}

/// `limit` as the command line gives it, exactly ([`Rate::spelled`]):
/// `20/s:3`, `100/min:3`, `1048576/s:4096`.
pub fn spell(limit: &Limit) -> String {
    format!("{}:{}", limit.rate.spelled(""), limit.burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn commands_read() {
        assert_eq!(parse(&words("pause")), Ok(Request::Pause));
        assert_eq!(parse(&words("-j 4")), Ok(Request::Slots(4)));
        assert_eq!(parse(&words("key-jobs 2")), Ok(Request::KeyJobs(2)));
        assert!(parse(&words("key-jobs 0")).is_err());
        assert!(parse(&words("key-jobs")).is_err());
        match parse(&words("rate 10/s rate 500/min:50")).unwrap() {
            Request::Rate {
                records: Some(r),
                bytes: None,
                ..
            } => {
                assert_eq!(r.len(), 2);
                assert_eq!((r[0].burst, r[1].burst), (1, 50));
            }
            other => panic!("{other:?}"),
        }
        // Several values after one rate: each a limit of that kind.
        assert_eq!(
            parse(&words("rate 10/s 500/min:50 byte-rate 1KiB/s 1MiB/min")),
            parse(&words(
                "rate 10/s rate 500/min:50 byte-rate 1KiB/s byte-rate 1MiB/min"
            ))
        );
        assert_eq!(parse(&words("-j 4096")), Ok(Request::Slots(4096)));
        match parse(&words("byte-rate 1KiB/s:512")).unwrap() {
            Request::Rate {
                records: None,
                bytes: Some(b),
                ..
            } => assert_eq!((b[0].burst, b[0].unit), (512, Unit::Bytes)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse(&words("rate inf")),
            Ok(Request::Rate {
                records: Some(vec![]),
                bytes: None,
                costs: vec![],
            })
        );
        // Cost rates, named or not, each with its burst (1 when not given).
        match parse(&words("cost-rate in=30000/min:3000 500/s rate 5/s")).unwrap() {
            Request::Rate {
                records: Some(r),
                bytes: None,
                costs,
            } => {
                assert_eq!(r.len(), 1);
                let named: Vec<(Option<&str>, u64, Unit)> = costs
                    .iter()
                    .map(|(n, l)| (n.as_deref(), l.burst, l.unit))
                    .collect();
                assert_eq!(
                    named,
                    [(Some("in"), 3000, Unit::Cost), (None, 1, Unit::Cost)]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_commands_say_why() {
        assert!(parse(&[]).unwrap_err().starts_with("no command"));
        assert!(parse(&words("fly"))
            .unwrap_err()
            .contains("unknown command 'fly'"));
        assert!(parse(&words("pause now"))
            .unwrap_err()
            .contains("takes no value"));
        assert!(parse(&words("rate")).unwrap_err().contains("needs a value"));
        assert_eq!(
            parse(&words("rate 1/s byte-rate")),
            Err("byte-rate: needs a value".to_string())
        );
        assert_eq!(
            parse(&words("rate byte-rate 1KiB/s")),
            Err("rate: needs a value".to_string())
        );
        assert!(parse(&words("-j 4097")).is_err());
        assert!(parse(&words("-j 18446744073709551615")).is_err());
        assert!(parse(&words("rate 0/s"))
            .unwrap_err()
            .starts_with("rate '0/s'"));
        assert!(parse(&words("rate 1/s pause")).is_err());
        assert!(parse(&words("key-rate inf")).is_err());
        assert_eq!(
            parse(&words("cost-rate")),
            Err("cost-rate: needs a value".to_string())
        );
        assert!(parse(&words("cost-rate 1+2=5/s"))
            .unwrap_err()
            .starts_with("cost-rate '1+2=5/s': "));
        assert!(parse(&words("-j 0")).is_err());
    }

    #[test]
    fn a_request_longer_than_a_drip_reads_is_refused() {
        let long = vec!["x".repeat(MAX_REQUEST)];
        assert!(encode(&long)
            .unwrap_err()
            .starts_with("the request is too long"));
        let line = encode(&["rate".to_string(), "5/s".to_string()]).unwrap();
        assert_eq!(line, "[\"rate\",\"5/s\"]\n");
    }

    #[test]
    fn replies_read_back() {
        assert_eq!(read_reply(&error_reply("no")), Err("no".to_string()));
        assert!(read_reply("{\"pid\":1}\n").is_ok());
        assert!(read_reply("nonsense").is_err());
    }
}
