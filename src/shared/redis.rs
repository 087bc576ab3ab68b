//! The shared state across hosts: a hash in Redis (or Valkey), changed only
//! by one Lua script (`script.lua`, the arithmetic of [`super::gcra`]) that
//! reads the server's `TIME`, so every participant's slots come from one
//! clock. The script is called with `EVALSHA`, falling back to `EVAL` when
//! the server does not know it (after a restart or `SCRIPT FLUSH`).
//!
//! `rediss://` is TLS through rustls, trusting the system's CA store as
//! rustls-native-certs reads it (`SSL_CERT_FILE` and `SSL_CERT_DIR`, when
//! set, instead), so a server with a certificate of a private CA is
//! reached once that CA is installed or named.
//!
//! Every call has a read and a write timeout, so a server that hangs
//! (stopped, paused) is reported as unreachable instead of blocking the
//! keeper; a broken connection is made again on the next call.

use std::time::Duration;

use redis::{Client, Connection, ErrorKind, RedisError, Value};

use super::gcra::Step;
use super::lease::{Backend, Failure, Grant};

/// The script, run atomically by the server.
pub const SCRIPT: &str = include_str!("script.lua");

/// How long one call may take before the server counts as unreachable.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// One NAME on one Redis server.
pub struct RedisBackend {
    client: Client,
    con: Option<Connection>,
    key: String,
    spec: String,
    steps: Vec<Step>,
    sha: String,
    /// A test clock (seconds, ns) instead of the server's `TIME`.
    pub clock: Option<(i64, i64)>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("key", &self.key)
            .finish()
    }
}

fn unreachable(e: &RedisError) -> Failure {
    if e.is_timeout() {
        return Failure::Unreachable(format!("no answer within {} ms", TIMEOUT.as_millis()));
    }
    if untrusted(e) {
        return Failure::Unreachable(format!("{e}; {TRUSTED}"));
    }
    Failure::Unreachable(e.to_string())
}

/// Which CAs `rediss://` trusts, for the message when the server's
/// certificate is not one of theirs.
const TRUSTED: &str =
    "drip trusts the system's CA store, or the CAs of SSL_CERT_FILE and SSL_CERT_DIR when set";

/// Whether `e` is the server's certificate refused by rustls (unknown
/// issuer, expired, another name, ...).
#[cfg(feature = "tls")]
fn untrusted(e: &RedisError) -> bool {
    use std::error::Error;
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)))
}

#[cfg(not(feature = "tls"))]
fn untrusted(_: &RedisError) -> bool {
    false
}

impl RedisBackend {
    /// The state `name` on the server at `url` (a redis-rs URL), for
    /// limits `spec` with `steps`.
    ///
    /// # Errors
    /// The URL is not one redis-rs accepts.
    pub fn new(url: &str, name: &str, spec: String, steps: Vec<Step>) -> Result<Self, String> {
        let client = Client::open(url).map_err(|e| e.to_string())?;
        Ok(RedisBackend {
            client,
            con: None,
            key: format!("drip:{{{name}}}"),
            spec,
            steps,
            sha: redis::Script::new(SCRIPT).get_hash().to_string(),
            clock: None,
        })
    }

    fn connection(&mut self) -> Result<&mut Connection, (RedisError, bool)> {
        if self.con.is_none() {
            let con = self
                .client
                .get_connection_with_timeout(TIMEOUT)
                .map_err(|e| (e, true))?;
            con.set_read_timeout(Some(TIMEOUT))
                .and_then(|()| con.set_write_timeout(Some(TIMEOUT)))
                .map_err(|e| (e, true))?;
            self.con = Some(con);
        }
        Ok(self.con.as_mut().expect("just made"))
    }

    /// Run the script for `op` with `extra` arguments: `EVALSHA`, then
    /// `EVAL` if the server does not have it. A failed call drops the
    /// connection (made again next time).
    fn call(&mut self, op: &str, extra: &[i64]) -> Result<Vec<Value>, Failure> {
        let reused = self.con.is_some();
        match self.call_once(op, extra) {
            // A connection the server closed (CLIENT KILL, an idle
            // timeout) is made again at once; a hang is not retried.
            Err((e, false)) if reused && !e.is_timeout() => {
                self.call_once(op, extra).map_err(|(e, _)| unreachable(&e))
            }
            result => result.map_err(|(e, _)| unreachable(&e)),
        }
    }

    /// One attempt; an error says whether it came from connecting.
    fn call_once(&mut self, op: &str, extra: &[i64]) -> Result<Vec<Value>, (RedisError, bool)> {
        let (sec, nsec) = self.clock.unwrap_or((-1, 0));
        let mut args: Vec<String> = vec![
            op.into(),
            sec.to_string(),
            nsec.to_string(),
            self.spec.clone(),
            self.steps.len().to_string(),
        ];
        for s in &self.steps {
            args.push(s.interval.to_string());
            args.push(s.tolerance.to_string());
        }
        args.extend(extra.iter().map(i64::to_string));
        let (sha, key) = (self.sha.clone(), self.key.clone());
        let con = self.connection()?;
        let mut result = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(&key)
            .arg(&args)
            .query::<Vec<Value>>(con);
        if matches!(&result, Err(e) if e.kind() == ErrorKind::NoScriptError) {
            result = redis::cmd("EVAL")
                .arg(SCRIPT)
                .arg(1)
                .arg(&key)
                .arg(&args)
                .query(con);
        }
        result.map_err(|e| {
            self.con = None;
            (e, false)
        })
    }

    /// The script's answer as a grant, or the mismatch it reports.
    fn grant(&self, reply: &[Value]) -> Result<Grant, Failure> {
        let int = |v: &Value| match v {
            Value::Int(n) => Some(*n),
            _ => None,
        };
        if reply.first().and_then(int) == Some(-1) {
            let stored = match reply.get(1) {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            return Err(Failure::Mismatch(stored));
        }
        let ints: Option<Vec<i64>> = reply.iter().map(int).collect();
        match ints.as_deref() {
            Some([_, seq, now, fresh, slots @ ..]) => Ok(Grant {
                seq: u64::try_from(*seq).unwrap_or(0),
                now: *now,
                fresh: *fresh == 1,
                slots: slots.to_vec(),
            }),
            _ => Err(Failure::Unreachable(format!("unexpected reply {reply:?}"))),
        }
    }
}

impl Backend for RedisBackend {
    fn hello(&mut self) -> Result<bool, Failure> {
        let reply = self.call("hello", &[])?;
        Ok(self.grant(&reply)?.fresh)
    }

    fn reserve(&mut self, want: u64, horizon: i64) -> Result<Grant, Failure> {
        let want = i64::try_from(want).unwrap_or(i64::MAX);
        let reply = self.call("reserve", &[want, horizon])?;
        self.grant(&reply)
    }

    fn give_back(&mut self, seq: u64, first_unused: i64) -> Result<bool, Failure> {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        let reply = self.call("giveback", &[seq, first_unused])?;
        Ok(matches!(reply.first(), Some(Value::Int(1))))
    }
}
