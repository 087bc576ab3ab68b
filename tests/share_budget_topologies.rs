//! A shared `--budget` behind Sentinel and in a Redis Cluster, against
//! real servers the test starts (tests/topology: three sentinels, a primary
//! and its replica; a three-primary cluster made by `redis-cli --cluster
//! create`): two drips on one budget never pass it in a window, through a
//! `SENTINEL FAILOVER`, the primary killed, and a resharding of drip's slot.

use crate::common;
use crate::topology;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::wait_for;

/// Two drips, one through each of `shares`, of 60 records each on one
/// `--budget 20/second@UTC`, `event` run 2 s after they start: every
/// record written, in order, and never more than 20 of the two together
/// read in any wall-clock second. `None` when judged; why not, when a
/// record was read late in its second (past 0.8 s, after the first
/// second, and not in the first second of records after a pause of the
/// event: records leave as their window opens, or as the state answers
/// again), where the machine held the writer or the reader back and a
/// record of the second before may have been read in it.
fn two_drips_on_one_budget(shares: [&str; 2], event: impl FnOnce()) -> Option<String> {
    let started = common::unix_now();
    let drips: Vec<_> = shares
        .iter()
        .enumerate()
        .map(|(i, share)| {
            let mut cmd = common::command(&["--budget", "20/second@UTC", "--share", share]);
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("spawn drip");
            let input: String = (1..=60).map(|r| format!("{i}-{r}\n")).collect();
            common::feed(&mut child, input.as_bytes());
            thread::spawn(move || {
                let out = child.stdout.take().unwrap();
                let lines: Vec<(f64, String)> = BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    .map(|l| (common::unix_now(), l))
                    .collect();
                let status = wait_for(&mut child, Duration::from_secs(90));
                let err = common::stderr_of(&mut child);
                assert!(status.success(), "drip {i}: {status}: {err}");
                (lines, err)
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(2));
    let event_at = common::unix_now();
    event();
    let each: Vec<(Vec<(f64, String)>, String)> =
        drips.into_iter().map(|d| d.join().unwrap()).collect();
    let errs: Vec<&str> = each.iter().map(|(_, e)| e.as_str()).collect();
    for (i, (lines, _)) in each.iter().enumerate() {
        let got: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        let want: Vec<String> = (1..=60).map(|r| format!("{i}-{r}")).collect();
        assert_eq!(got, want, "drip {i}: every record, in order: {errs:?}");
    }
    let mut times: Vec<f64> = each
        .iter()
        .flat_map(|(l, _)| l.iter().map(|(t, _)| *t))
        .collect();
    times.sort_by(f64::total_cmp);
    assert!(
        times.first() < Some(&event_at) && times.last() > Some(&event_at),
        "records on both sides of the event at {:.2} s: {:.2} to {:.2} s",
        event_at - started,
        times[0] - started,
        times[times.len() - 1] - started
    );
    let mut per_second = std::collections::BTreeMap::<i64, usize>::new();
    let mut late = Vec::new();
    let mut previous = f64::NEG_INFINITY;
    let first = times[0].floor();
    for &t in &times {
        *per_second.entry(t.floor() as i64).or_default() += 1;
        // The first records after a pause go as the state answers again,
        // anywhere in their second.
        let resumed = t - previous > 0.3 && t > event_at;
        if t.fract() > 0.8 && t.floor() > first && !resumed {
            late.push(format!("{:.3}", t - started));
        }
        previous = t;
    }
    if !late.is_empty() {
        return Some(format!("records read late in their second: {late:?}"));
    }
    assert!(
        per_second.values().all(|&n| n <= 20),
        "more than 20 in a second: {per_second:?}; {errs:?}"
    );
    None
}

/// Behind Sentinel: the two drips through `redis+sentinel://`, the
/// replica promoted 2 s in (`kill`: the primary killed; else `SENTINEL
/// FAILOVER`). While it lasts the records wait (`wait`); then the drips go
/// on with the new primary, the count where the old one left it (the
/// fence, `drip:{NAME}:fence`: a grant the old primary made once its
/// replica was promoted is not used), and never more than 20 in a second.
fn two_drips_behind_sentinel_keep_one_budget(kill: bool) {
    if !common::have_redis() {
        return;
    }
    common::until_judged(4, Duration::from_secs(300), || {
        let mut t = topology::Sentinels::start();
        let name = format!("budget-sentinel-{}", std::process::id());
        let share = t.url(&name);
        let before = t.named();
        let judged = two_drips_on_one_budget([&share, &share], || {
            if kill {
                t.primary.kill();
            } else {
                t.failover();
            }
        });
        topology::wait_until(Duration::from_secs(20), "the replica promoted", || {
            t.named() == Some(t.replica.port)
        });
        assert_eq!(before, Some(t.primary.port));
        // One fence for every key of the NAME, the budget's counts too.
        let fences = t
            .replica
            .query(&["KEYS", &format!("drip:{{{name}}}*fence")])
            .unwrap();
        let redis::Value::Array(fences) = fences else {
            panic!("KEYS: {fences:?}");
        };
        let fence = redis::Value::BulkString(format!("drip:{{{name}}}:fence").into_bytes());
        assert_eq!(fences, vec![fence]);
        judged
    });
}

#[test]
fn two_drips_behind_sentinel_keep_one_budget_through_a_failover() {
    let _t = common::beside_timing();
    two_drips_behind_sentinel_keep_one_budget(false);
}

#[test]
fn two_drips_behind_sentinel_keep_one_budget_when_the_primary_is_killed() {
    let _t = common::beside_timing();
    two_drips_behind_sentinel_keep_one_budget(true);
}

/// In a Redis Cluster: one drip through `redis+cluster://`, the other
/// through `redis://` to a node that does not own drip's slot (`MOVED`),
/// the slot (the budget's keys in it) moved to another primary 2 s in
/// (`ASK` while it migrates, then `MOVED`): never more than 20 in a
/// second.
#[test]
fn two_drips_in_a_cluster_keep_one_budget_through_a_resharding() {
    if !common::have(&["redis-server", "redis-cli"]) {
        return;
    }
    let _t = common::beside_timing();
    common::until_judged(4, Duration::from_secs(300), || {
        let name = format!("budget-cluster-{}", std::process::id());
        let mut c = topology::Cluster::start(&name);
        let (cluster, any_node) = (c.url(&name, false), c.url(&name, true));
        let from = c.owner;
        let started = Instant::now();
        let judged = two_drips_on_one_budget([&cluster, &any_node], || c.reshard());
        assert_ne!(c.owner, from, "the slot moved");
        let key = format!("drip:{{{name}}}:budget:second@UTC:*");
        let moved = c.primaries[c.owner]
            .query(&["KEYS", &key])
            .map(|v| matches!(v, redis::Value::Array(a) if !a.is_empty()))
            .unwrap_or(false);
        assert!(
            moved,
            "the budget's counts are on the slot's new owner ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        judged
    });
}
