//! A `redis-server` of a test's own: the one way the tests start one.
//!
//! [`RedisServer::start`] runs a plain server on a free port of 127.0.0.1
//! (`--save '' --appendonly no`, in a temporary directory of its own);
//! [`RedisOptions`] adds what a test needs beyond that: TLS only, a Unix
//! socket only, a config file (a Sentinel's), more arguments. A server
//! counts as started once it answers with its own process id (not another
//! test's server that took the port between the choice and the bind:
//! another free port is then tried, 5 in all). It is killed (SIGKILL) when
//! dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
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

/// How a [`RedisServer`] is started: by default a plain server on a free
/// TCP port.
#[derive(Default, Clone)]
pub struct RedisOptions {
    tls: Option<PathBuf>,
    unix_only: bool,
    config: Option<String>,
    args: Vec<String>,
}

impl RedisOptions {
    /// Serve TLS only (no plain port), with `server.crt`, `server.key` and
    /// `ca.crt` from `certs`, not asking clients for certificates.
    pub fn tls(mut self, certs: &Path) -> RedisOptions {
        self.tls = Some(certs.to_path_buf());
        self
    }

    /// Serve a Unix socket (`redis.sock` in the server's directory) only,
    /// no TCP port.
    pub fn unix_socket(mut self) -> RedisOptions {
        self.unix_only = true;
        self
    }

    /// Start from a config file holding `text` (written to the server's
    /// directory as `redis.conf`; a Sentinel needs one it can rewrite).
    /// The port and the rest are given on the command line after it.
    pub fn config(mut self, text: &str) -> RedisOptions {
        self.config = Some(text.to_string());
        self
    }

    /// More arguments, after the defaults (which they override):
    /// `--requirepass PW`, `--appendonly yes`, `--cluster-enabled yes`,
    /// `--sentinel`, `--replicaof HOST PORT`…
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> RedisOptions {
        self.args
            .extend(args.iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// The server, answering within 10 s; panics when none did on 5 free
    /// ports.
    pub fn start(self) -> RedisServer {
        self.try_start()
            .expect("redis-server did not answer on 5 free ports")
    }

    /// The server, or `None` when none answered within 10 s on 5 free
    /// ports (as with TLS from a redis-server built without it).
    pub fn try_start(self) -> Option<RedisServer> {
        for _ in 0..5 {
            let mut server = self.clone().not_started();
            if server.try_spawn() {
                return Some(server);
            }
        }
        None
    }

    /// The server on a free port (or its socket), not started yet:
    /// [`RedisServer::spawn`] starts it.
    pub fn not_started(self) -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let (port, socket) = match self.unix_only {
            true => (0, Some(dir.path().join("redis.sock"))),
            false => (free_port(), None),
        };
        RedisServer {
            child: None,
            port,
            socket,
            options: self,
            dir,
        }
    }
}

/// A `redis-server` of the test's own, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    /// Its TCP port (the TLS port under TLS; 0 with a Unix socket only).
    pub port: u16,
    /// Its Unix socket, when it serves one.
    pub socket: Option<PathBuf>,
    options: RedisOptions,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// A plain server on a free port of 127.0.0.1.
    pub fn start() -> RedisServer {
        RedisOptions::default().start()
    }

    /// A server on a Unix socket only.
    pub fn start_unix() -> RedisServer {
        RedisOptions::default().unix_socket().start()
    }

    /// A server serving TLS only with the certificates in `certs`
    /// ([`RedisOptions::tls`]); `None` when this redis-server does not
    /// serve TLS (built without it).
    pub fn start_tls(certs: &Path) -> Option<RedisServer> {
        RedisOptions::default().tls(certs).try_start()
    }

    /// How to start a server other than a plain one.
    pub fn options() -> RedisOptions {
        RedisOptions::default()
    }

    /// Start it again (after [`RedisServer::shutdown`] or
    /// [`RedisServer::kill`]) on the same port and directory; panics when it
    /// did not answer within 10 s.
    pub fn spawn(&mut self) {
        assert!(self.try_spawn(), "redis-server did not answer PING");
    }

    /// Start the server; whether it answered, with its own process id,
    /// within 10 s.
    fn try_spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        if let Some(text) = &self.options.config {
            let conf = self.dir.path().join("redis.conf");
            std::fs::write(&conf, text).unwrap();
            cmd.arg(conf);
        }
        cmd.args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match &self.options.tls {
            Some(certs) => {
                cmd.args(["--port", "0", "--tls-port", &self.port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(certs.join("server.crt"))
                    .arg("--tls-key-file")
                    .arg(certs.join("server.key"))
                    .arg("--tls-ca-cert-file")
                    .arg(certs.join("ca.crt"))
                    .args(["--tls-auth-clients", "no"]);
            }
            None => {
                cmd.args(["--port", &self.port.to_string()]);
            }
        }
        if let Some(socket) = &self.socket {
            cmd.arg("--unixsocket").arg(socket);
        }
        cmd.args(&self.options.args);
        let child = cmd.spawn().expect("redis-server");
        let pid = format!("process_id:{}", child.id());
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(info) = self.text(&["INFO", "server"]) {
                // Ours, not another test's that took the port between
                // free_port and the bind (its states would meet ours
                // under the same NAMEs).
                return info.lines().any(|l| l.trim() == pid);
            }
            let child = self.child.as_mut().expect("just started");
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Its URL: `redis://127.0.0.1:PORT`, `rediss://…` under TLS,
    /// `redis+unix://PATH` on a Unix socket.
    pub fn url(&self) -> String {
        match (&self.socket, &self.options.tls) {
            (Some(s), _) => format!("redis+unix://{}", s.display()),
            (None, Some(_)) => format!("rediss://127.0.0.1:{}", self.port),
            (None, None) => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// `--share` for NAME on this server.
    pub fn share(&self, name: &str) -> String {
        format!("{}/{name}", self.url())
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client of it.
    fn client(&self) -> redis::RedisResult<redis::Client> {
        match &self.options.tls {
            #[cfg(feature = "tls")]
            Some(certs) => redis::Client::build_with_tls(
                self.url(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(certs.join("ca.crt"))?),
                },
            ),
            _ => redis::Client::open(self.url()),
        }
    }

    /// A connection to it (no timeouts).
    pub fn try_con(&self) -> redis::RedisResult<redis::Connection> {
        self.client()?.get_connection()
    }

    /// A connection to it; panics when there is none.
    pub fn con(&self) -> redis::Connection {
        self.try_con().expect("connect to the test's redis-server")
    }

    /// `args` on this server, on a connection of its own that gives up
    /// after 2 s (to connect, and to read the answer).
    pub fn query(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut con = self
            .client()?
            .get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con)
    }

    /// `args`; panics when it fails.
    pub fn command(&self, args: &[&str]) {
        self.query(args).expect("redis command");
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

    /// SHUTDOWN NOSAVE, and wait (up to 10 s) for the server to go.
    pub fn shutdown(&mut self) {
        let _ = self.query(&["SHUTDOWN", "NOSAVE"]);
        if let Some(mut child) = self.child.take() {
            super::wait_for(&mut child, Duration::from_secs(10));
        }
    }

    /// Send it `sig` (SIGSTOP, SIGCONT…).
    pub fn signal(&self, sig: i32) {
        super::send_signal(self.child.as_ref().expect("running"), sig);
    }

    /// Kill it (SIGKILL), now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
