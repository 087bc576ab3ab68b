//! Real Redis topologies for the tests, on 127.0.0.1: a primary and a
//! replica behind three `redis-server --sentinel`, and a three-primary
//! Redis Cluster made by `redis-cli --cluster create` with a replica of the
//! primary that owns a NAME's slot. Each server runs in a directory of its
//! own on a free port (another port is tried when another test's server
//! took the one chosen: a server counts as started once it answers with
//! its own process id), and is killed when dropped.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A free port of 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether `redis-cli` is here (it comes with redis-server).
pub fn have_redis_cli() -> bool {
    Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `redis-server` of the test's own.
pub struct Node {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Node {
    /// `redis-server HEAD… --port PORT ARGS…` answering on a free port
    /// (`head`: a config file's path, given the directory and port, must
    /// come first).
    pub fn start(head: impl Fn(&std::path::Path, u16) -> Vec<String>, args: &[String]) -> Node {
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            let child = Command::new("redis-server")
                .args(head(dir.path(), port))
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server");
            let mut node = Node {
                child: Some(child),
                port,
                dir,
            };
            if node.answers() {
                return node;
            }
        }
        panic!("redis-server did not answer on 5 free ports");
    }

    /// Whether this server (its process, not another's on the port)
    /// answers within 10 s.
    fn answers(&mut self) -> bool {
        let started = Instant::now();
        let pid = format!("process_id:{}", self.child.as_ref().unwrap().id());
        while started.elapsed() < Duration::from_secs(10) {
            if let Ok(redis::Value::BulkString(info)) = self.query(&["INFO", "server"]) {
                return String::from_utf8_lossy(&info)
                    .lines()
                    .any(|l| l.trim() == pid);
            }
            if self
                .child
                .as_mut()
                .unwrap()
                .try_wait()
                .ok()
                .flatten()
                .is_some()
            {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `args` on this server, with a 2 s timeout.
    pub fn query(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con)
    }

    /// `args`' answer as text (a status, a bulk string, an integer).
    pub fn text(&self, args: &[&str]) -> redis::RedisResult<String> {
        Ok(match self.query(args)? {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::SimpleString(s) => s,
            redis::Value::Okay => "OK".into(),
            redis::Value::Int(n) => n.to_string(),
            other => format!("{other:?}"),
        })
    }

    /// Send it `sig` (SIGSTOP, SIGCONT).
    #[allow(unsafe_code)]
    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on a process this test started; no memory is touched.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill");
    }

    /// Kill it (SIGKILL), now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

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
        let primary = Node::start(|_, _| Vec::new(), &[]);
        let replica = Node::start(
            |_, _| Vec::new(),
            &[
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary.port.to_string(),
            ],
        );
        wait_until(Duration::from_secs(20), "the replica in sync", || {
            primary
                .text(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("state=online"))
        });
        let port = primary.port;
        let sentinels: Vec<Node> = (0..3)
            .map(|_| {
                Node::start(
                    move |dir, own| {
                        let conf = dir.join("sentinel.conf");
                        std::fs::write(
                            &conf,
                            format!(
                                "port {own}\nsentinel monitor {PRIMARY} 127.0.0.1 {port} 2\nsentinel down-after-milliseconds {PRIMARY} 1000\nsentinel failover-timeout {PRIMARY} 10000\n"
                            ),
                        )
                        .unwrap();
                        vec![conf.display().to_string(), "--sentinel".into()]
                    },
                    &[],
                )
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
    Node::start(
        |_, _| Vec::new(),
        &[
            "--cluster-enabled".into(),
            "yes".into(),
            "--cluster-node-timeout".into(),
            "1000".into(),
            "--cluster-port".into(),
            free_port().to_string(),
        ],
    )
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
