//! Real Redis topologies for the tests, on 127.0.0.1: a primary and a
//! replica behind three `redis-server --sentinel`, and a three-primary
//! Redis Cluster made by `redis-cli --cluster create` with a replica of the
//! primary that owns a NAME's slot. Each server is one of tests/common's
//! ([`RedisServer`]): in a directory of its own on a free port, killed
//! when dropped.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::common::redis_server::{free_port, RedisServer};

/// A `redis-server` of the test's own.
pub type Node = RedisServer;

/// Wait up to `limit` for `ready`, panicking with `what` after.
pub fn wait_until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// The name the sentinels know the primary by.
pub const PRIMARY: &str = "m";

/// A primary, its replica, and three sentinels watching them (quorum 2,
/// the primary down after 1 s).
pub struct Sentinels {
    pub primary: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
}

impl Sentinels {
    pub fn start() -> Sentinels {
        let primary = Node::start();
        let replica = Node::options()
            .args(&["--replicaof", "127.0.0.1", &primary.port.to_string()])
            .start();
        wait_until(Duration::from_secs(20), "the replica in sync", || {
            primary
                .text(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("state=online"))
        });
        let port = primary.port;
        let sentinels: Vec<Node> = (0..3)
            .map(|_| {
                Node::options()
                    .config(&format!(
                        "sentinel monitor {PRIMARY} 127.0.0.1 {port} 2\nsentinel down-after-milliseconds {PRIMARY} 1000\nsentinel failover-timeout {PRIMARY} 10000\n"
                    ))
                    .args(&["--sentinel"])
                    .start()
            })
            .collect();
        // Each knows the replica and the two others (their hellos come
        // every 2 s).
        for s in &sentinels {
            wait_until(Duration::from_secs(30), "the sentinels acquainted", || {
                let count = |what: &str| match s.query(&["SENTINEL", what, PRIMARY]) {
                    Ok(redis::Value::Array(v)) => v.len(),
                    _ => 0,
                };
                count("REPLICAS") == 1 && count("SENTINELS") == 2
            });
        }
        Sentinels {
            primary,
            replica,
            sentinels,
        }
    }

    /// The `--share` URL of `name` through the sentinels.
    pub fn url(&self, name: &str) -> String {
        let addrs: Vec<String> = self.sentinels.iter().map(Node::addr).collect();
        format!("redis+sentinel://{}/{PRIMARY}/{name}", addrs.join(","))
    }

    /// `SENTINEL FAILOVER`: the replica promoted, the old primary, still
    /// running, made its replica later.
    pub fn failover(&self) {
        wait_until(Duration::from_secs(5), "SENTINEL FAILOVER accepted", || {
            self.sentinels[0]
                .query(&["SENTINEL", "FAILOVER", PRIMARY])
                .is_ok()
        });
    }

    /// The port the sentinels name as the primary now.
    pub fn named(&self) -> Option<u16> {
        let v = self.sentinels[0]
            .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", PRIMARY])
            .ok()?;
        let redis::Value::Array(v) = v else {
            return None;
        };
        match v.get(1) {
            Some(redis::Value::BulkString(p)) => String::from_utf8_lossy(p).parse().ok(),
            _ => None,
        }
    }
}

/// A three-primary Redis Cluster (`redis-cli --cluster create`, node
/// timeout 1 s) and a replica of the primary that owns one NAME's slot.
pub struct Cluster {
    pub primaries: Vec<Node>,
    pub replica: Node,
    /// The slot of `drip:{NAME}`, and the index of the primary owning it.
    pub slot: u16,
    pub owner: usize,
}

/// A cluster node, its bus on a free port of its own (the default, the
/// port + 10000, may be past 65535).
fn cluster_node() -> Node {
    Node::options()
        .args(&[
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "1000",
            "--cluster-port",
            &free_port().to_string(),
        ])
        .start()
}

impl Cluster {
    /// The cluster, its replica following the owner of `drip:{name}`.
    pub fn start(name: &str) -> Cluster {
        let primaries: Vec<Node> = (0..3).map(|_| cluster_node()).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(primaries.iter().map(Node::addr))
            .arg("--cluster-yes")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "redis-cli --cluster create: {out:?}");
        let key = format!("drip:{{{name}}}");
        let slot: u16 = primaries[0]
            .text(&["CLUSTER", "KEYSLOT", &key])
            .unwrap()
            .parse()
            .unwrap();
        let mut cluster = Cluster {
            primaries,
            replica: cluster_node(),
            slot,
            owner: 0,
        };
        cluster.owner = cluster.owner_of_slot().expect("an owner");
        let owner = &cluster.primaries[cluster.owner];
        let owner_id = owner.text(&["CLUSTER", "MYID"]).unwrap();
        let bus = bus_port(owner);
        cluster
            .replica
            .query(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &owner.port.to_string(),
                &bus,
            ])
            .unwrap();
        wait_until(Duration::from_secs(20), "the replica following", || {
            cluster
                .replica
                .query(&["CLUSTER", "REPLICATE", &owner_id])
                .is_ok()
        });
        wait_until(Duration::from_secs(20), "the replica in sync", || {
            owner
                .text(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("state=online"))
        });
        for node in cluster.primaries.iter().chain([&cluster.replica]) {
            wait_until(Duration::from_secs(20), "the cluster up", || {
                node.text(&["CLUSTER", "INFO"])
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
                    && node
                        .text(&["CLUSTER", "NODES"])
                        .is_ok_and(|n| n.lines().filter(|l| l.contains("slave")).count() == 1)
            });
        }
        cluster
    }

    /// The index of the primary that owns the slot, as the first answering
    /// primary sees it.
    fn owner_of_slot(&self) -> Option<usize> {
        let nodes = self
            .primaries
            .iter()
            .find_map(|n| n.text(&["CLUSTER", "NODES"]).ok())?;
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let owns = fields.iter().skip(8).any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&self.slot))
            });
            if owns {
                let port = fields[1].split('@').next()?.rsplit(':').next()?;
                return self
                    .primaries
                    .iter()
                    .position(|n| n.port.to_string() == port);
            }
        }
        None
    }

    /// The `--share` URL of `name`: `redis://` to a primary that does not
    /// own the slot (`any_node`), or `redis+cluster://` naming the three
    /// primaries.
    pub fn url(&self, name: &str, any_node: bool) -> String {
        if any_node {
            let other = &self.primaries[(self.owner + 1) % 3];
            return format!("redis://{}/{name}", other.addr());
        }
        let addrs: Vec<String> = self.primaries.iter().map(Node::addr).collect();
        format!("redis+cluster://{}/{name}", addrs.join(","))
    }

    /// `CLUSTER FAILOVER` on the replica: it takes over from the owner,
    /// which hands over first.
    pub fn failover(&self) {
        self.replica.query(&["CLUSTER", "FAILOVER"]).unwrap();
    }

    /// Kill the primary that owns the slot (SIGKILL): its replica takes
    /// over once the others have counted it down (about 1 s).
    pub fn kill_owner(&mut self) {
        let owner = self.owner;
        self.primaries[owner].kill();
    }

    /// Move the slot from its owner to the next primary by hand, while in
    /// use: IMPORTING and MIGRATING, 300 ms, the keys moved (MIGRATE),
    /// 300 ms of `ASK` for them, then the slot given to the new owner on
    /// every primary (`MOVED` from then on).
    pub fn reshard(&mut self) {
        let slot = self.slot.to_string();
        let to = (self.owner + 1) % 3;
        let (src, dst) = (&self.primaries[self.owner], &self.primaries[to]);
        let src_id = src.text(&["CLUSTER", "MYID"]).unwrap();
        let dst_id = dst.text(&["CLUSTER", "MYID"]).unwrap();
        dst.query(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
            .unwrap();
        src.query(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
            .unwrap();
        thread::sleep(Duration::from_millis(300));
        let Ok(redis::Value::Array(keys)) = src.query(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"])
        else {
            panic!("GETKEYSINSLOT");
        };
        let port = dst.port.to_string();
        for key in keys {
            let redis::Value::BulkString(key) = key else {
                continue;
            };
            let key = String::from_utf8_lossy(&key).into_owned();
            src.query(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", &key])
                .unwrap();
        }
        thread::sleep(Duration::from_millis(300));
        for node in [dst, src] {
            node.query(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id])
                .unwrap();
        }
        for node in &self.primaries {
            let _ = node.query(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]);
        }
        self.owner = to;
    }

    /// How many `ASKING` the primary `i` was sent.
    pub fn asking(&self, i: usize) -> u64 {
        let stats = self.primaries[i]
            .text(&["INFO", "commandstats"])
            .unwrap_or_default();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_asking:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
}

/// The port of `node`'s cluster bus.
fn bus_port(node: &Node) -> String {
    let nodes = node.text(&["CLUSTER", "NODES"]).unwrap();
    let line = nodes
        .lines()
        .find(|l| l.contains("myself"))
        .expect("myself");
    let addr = line.split(' ').nth(1).unwrap();
    let bus = addr.split('@').nth(1).unwrap();
    bus.split(',').next().unwrap().to_string()
}
