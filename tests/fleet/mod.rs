//! A redis-server of a test's own, for the tests of `drip take` and
//! `--share-jobs`.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A redis-server of the test's own on a free port, killed when dropped.
pub struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let dir = tempfile::tempdir().unwrap();
            let child = Command::new("redis-server")
                .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
                .args(["--port", &port.to_string()])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server");
            let mut r = Redis {
                child,
                port,
                _dir: dir,
            };
            if r.answers() {
                return r;
            }
        }
        panic!("redis-server did not answer PING on 5 free ports");
    }

    /// Whether our server (not another run's on the same port) answers
    /// PING within 10 s.
    fn answers(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let url = format!("redis://127.0.0.1:{}", self.port);
            if let Ok(mut con) = redis::Client::open(url).and_then(|c| c.get_connection()) {
                let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
                let pid = format!("process_id:{}", self.child.id());
                return info.lines().any(|l| l.trim() == pid);
            }
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn share(&self, name: &str) -> String {
        format!("redis://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    /// A connection to the server, for looking at the state.
    pub fn con(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .and_then(|c| c.get_connection())
            .expect("connect to the test's redis-server")
    }
}
