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
//! keeper; a broken connection is made again on the next call. A server
//! that refuses drip for good (a password wanted or wrong, an ACL, no such
//! database), or a service that is not Redis at all, stops it under every
//! `--share-on-error` ([`Failure::Fatal`]).

use std::path::PathBuf;
use std::time::Duration;

use redis::{Client, Connection, ConnectionAddr, ErrorKind, RedisError, Value};

use super::gcra::{Meter, Step};
use super::keys::{hex, KeyAsk, KeyBackend, KeyGrant};
use super::lease::{Backend, Failure, Grant};

/// The script, run atomically by the server.
pub const SCRIPT: &str = include_str!("script.lua");

/// How long one call may take before the server counts as unreachable.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// The script of the limits per key ([`super::keys`]).
pub const KEYS_SCRIPT: &str = include_str!("keys.lua");

/// A connection to one server, made when needed, with the calls' timeouts.
struct Conn {
    client: Client,
    con: Option<Connection>,
    /// The Unix socket's path (`redis+unix`), for messages.
    socket: Option<PathBuf>,
    /// Whether it is `rediss://`.
    tls: bool,
    /// Where it goes (`HOST:PORT`, the socket's path), for messages.
    addr: String,
}

impl Conn {
    /// A connection to the server at `url` (a redis-rs URL), made at the
    /// first call.
    ///
    /// # Errors
    /// The URL is not one redis-rs accepts.
    fn open(url: &str) -> Result<Conn, String> {
        let client = Client::open(url).map_err(|e| e.to_string())?;
        let addr = client.get_connection_info().addr.to_string();
        let (socket, tls) = match &client.get_connection_info().addr {
            ConnectionAddr::Unix(path) => (Some(path.clone()), false),
            ConnectionAddr::TcpTls { .. } => (None, true),
            _ => (None, false),
        };
        Ok(Conn {
            client,
            con: None,
            socket,
            tls,
            addr,
        })
    }

    /// The connection, made if needed, with a `PING` first so that a server
    /// wanting a password says so (`NOAUTH`) before a script is sent.
    fn connection(&mut self) -> Result<&mut Connection, (RedisError, bool)> {
        if self.con.is_none() {
            let mut con = self
                .client
                .get_connection_with_timeout(TIMEOUT)
                .map_err(|e| (e, true))?;
            con.set_read_timeout(Some(TIMEOUT))
                .and_then(|()| con.set_write_timeout(Some(TIMEOUT)))
                .and_then(|()| redis::cmd("PING").query::<Value>(&mut con).map(drop))
                .map_err(|e| (e, true))?;
            self.con = Some(con);
        }
        Ok(self.con.as_mut().expect("just made"))
    }

    /// Run `script` (its hash `sha`) on `keys` with `args`: `EVALSHA`,
    /// then `EVAL` if the server does not have it. A failed call drops
    /// the connection (made again next time); a connection the server
    /// closed (CLIENT KILL, an idle timeout) is made again at once, a hang
    /// is not retried.
    fn eval(
        &mut self,
        script: &str,
        sha: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<Vec<Value>, Failure> {
        let reused = self.con.is_some();
        match self.eval_once(script, sha, keys, args) {
            Err((e, false)) if reused && !e.is_timeout() => self
                .eval_once(script, sha, keys, args)
                .map_err(|(e, connecting)| self.failure(&e, connecting)),
            result => result.map_err(|(e, connecting)| self.failure(&e, connecting)),
        }
    }

    /// One attempt; an error says whether it came from connecting.
    fn eval_once(
        &mut self,
        script: &str,
        sha: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<Vec<Value>, (RedisError, bool)> {
        let con = self.connection()?;
        let mut result = redis::cmd("EVALSHA")
            .arg(sha)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query::<Vec<Value>>(con);
        if matches!(&result, Err(e) if e.kind() == ErrorKind::NoScriptError) {
            result = redis::cmd("EVAL")
                .arg(script)
                .arg(keys.len())
                .arg(keys)
                .arg(args)
                .query(con);
        }
        result.map_err(|e| {
            self.con = None;
            (e, false)
        })
    }

    /// What `e` (from `connecting`, or from a call) is: the server refusing
    /// drip for good ([`refusal`]), a first answer not in Redis's protocol
    /// (not a Redis server), or a socket path that cannot be one, is
    /// [`Failure::Fatal`]; anything else
    /// may pass and is [`Failure::Unreachable`], saying what may help: the
    /// socket's path, that a server not speaking TLS does not answer
    /// `rediss://`, which CAs are trusted.
    fn failure(&self, e: &RedisError, connecting: bool) -> Failure {
        if let Some(why) = refusal(e, self.socket.is_some()) {
            return Failure::Fatal(why);
        }
        // An answer to the first commands that is not in Redis's protocol
        // (RESP): another service listens there, and no retry mends that.
        if connecting && e.kind() == ErrorKind::ParseError {
            return Failure::Fatal(format!(
                "not a Redis server ({} answered in another protocol: is it the right port?)",
                self.addr
            ));
        }
        if let (Some(path), true) = (&self.socket, connecting) {
            use rustix::io::Errno;
            let errno = std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .and_then(Errno::from_io_error);
            // A socket under a file, or one drip may not open: no retry
            // mends it (one not there yet may be a server starting).
            if matches!(errno, Some(Errno::NOTDIR | Errno::ACCESS | Errno::PERM)) {
                return Failure::Fatal(format!(
                    "the socket cannot be used: {}: {e} (the form is redis+unix:///SOCKET/NAME?db=DB)",
                    path.display()
                ));
            }
        }
        if e.is_timeout() {
            let hint = if self.tls && connecting {
                " (a server that does not speak TLS does not answer rediss:// either)"
            } else {
                ""
            };
            return Failure::Unreachable(format!(
                "no answer within {} ms{hint}",
                TIMEOUT.as_millis()
            ));
        }
        if untrusted(e) {
            return Failure::Unreachable(format!("{e}; {TRUSTED}"));
        }
        match &self.socket {
            Some(path) if connecting && e.kind() == ErrorKind::IoError => {
                Failure::Unreachable(format!("{}: {e}", path.display()))
            }
            _ => Failure::Unreachable(e.to_string()),
        }
    }
}

/// The server's refusals no retry mends, as a message naming what to
/// change: no password given where one is wanted (`NOAUTH`), a wrong one
/// (`WRONGPASS`), a user its ACL does not allow the scripts (`NOPERM`), a
/// password where none is set, a database number out of range. `unix`:
/// the URL is `redis+unix` (where a password goes in the query).
fn refusal(e: &RedisError, unix: bool) -> Option<String> {
    let text = e.to_string();
    let form = if unix {
        "redis+unix:///SOCKET/NAME?pass=PASSWORD (and user=USER)"
    } else {
        "redis://:PASSWORD@HOST/NAME (or redis://USER:PASSWORD@HOST/NAME)"
    };
    let code = e.code().unwrap_or_default();
    if code == "NOAUTH" || text.contains("unauthenticated") {
        Some(format!(
            "the server requires a password: give it in the URL, {form}"
        ))
    } else if code == "WRONGPASS" || e.kind() == ErrorKind::AuthenticationFailed {
        Some(format!(
            "the server refused the URL's user name or password (wrong, or the server has none): the form is {form}"
        ))
    } else if code == "NOPERM" {
        Some(format!(
            "the server's ACL does not let this user run drip's scripts (EVALSHA, EVAL on drip:{{NAME}} keys): {text}"
        ))
    } else if text.contains("without any password configured") {
        Some(format!(
            "the server has no password set: take the password out of the URL ({text})"
        ))
    } else if text.contains("DB index is out of range") {
        Some("the server has no database of that number (DB index is out of range)".into())
    } else {
        None
    }
}

/// The limits' mismatch a script reports as `{-1, stored spec}`.
fn mismatch(reply: &[Value]) -> Option<Failure> {
    if !matches!(reply.first(), Some(Value::Int(-1))) {
        return None;
    }
    let stored = match reply.get(1) {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    Some(Failure::Mismatch(stored))
}

/// A reply of integers only.
fn ints(reply: &[Value]) -> Result<Vec<i64>, Failure> {
    reply
        .iter()
        .map(|v| match v {
            Value::Int(n) => Some(*n),
            _ => None,
        })
        .collect::<Option<Vec<i64>>>()
        .ok_or_else(|| Failure::Unreachable(format!("unexpected reply {reply:?}")))
}

/// One NAME on one Redis server.
pub struct RedisBackend {
    conn: Conn,
    key: String,
    spec: String,
    meters: Vec<Meter>,
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
    /// limits `spec` with `meters`.
    ///
    /// # Errors
    /// The URL is not one redis-rs accepts.
    pub fn new(url: &str, name: &str, spec: String, meters: Vec<Meter>) -> Result<Self, String> {
        Ok(RedisBackend {
            conn: Conn::open(url)?,
            key: format!("drip:{{{name}}}"),
            spec,
            meters,
            sha: redis::Script::new(SCRIPT).get_hash().to_string(),
            clock: None,
        })
    }

    /// Run the script for `op` with `extra` arguments.
    fn call(&mut self, op: &str, extra: &[i64]) -> Result<Vec<Value>, Failure> {
        let (sec, nsec) = self.clock.unwrap_or((-1, 0));
        let mut args: Vec<String> = vec![
            op.into(),
            sec.to_string(),
            nsec.to_string(),
            self.spec.clone(),
            self.meters.len().to_string(),
        ];
        for m in &self.meters {
            let values = match m {
                Meter::Records(s) => [
                    "r".to_string(),
                    s.interval.to_string(),
                    s.tolerance.to_string(),
                    "0".into(),
                ],
                Meter::Bytes(b) => [
                    "b".to_string(),
                    b.count.to_string(),
                    b.period.to_string(),
                    b.burst.to_string(),
                ],
            };
            args.extend(values);
        }
        args.extend(extra.iter().map(i64::to_string));
        let keys = [self.key.clone()];
        self.conn.eval(SCRIPT, &self.sha, &keys, &args)
    }

    /// The script's answer as a grant, or the mismatch it reports.
    fn grant(&self, reply: &[Value]) -> Result<Grant, Failure> {
        if let Some(m) = mismatch(reply) {
            return Err(m);
        }
        match ints(reply)?.as_slice() {
            [_, seq, now, fresh, slots @ ..] => Ok(Grant {
                seq: u64::try_from(*seq).unwrap_or(0),
                now: *now,
                fresh: *fresh == 1,
                slots: slots.to_vec(),
            }),
            _ => Err(Failure::Unreachable(format!("unexpected reply {reply:?}"))),
        }
    }
}

/// The limits per key of one NAME on one Redis server: a hash per key,
/// `drip:{NAME}:key:HEX`, in the same hash slot as the NAME's state (so
/// one script call may touch them all, on a cluster too).
pub struct RedisKeys {
    conn: Conn,
    key: String,
    spec: String,
    step: Step,
    sha: String,
    /// A test clock (seconds, ns) instead of the server's `TIME`.
    pub clock: Option<(i64, i64)>,
}

impl std::fmt::Debug for RedisKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKeys").field("key", &self.key).finish()
    }
}

impl RedisKeys {
    /// The limits per key of `name` on the server at `url`, for limits
    /// `spec` (all of them) and the key limit's `step`.
    ///
    /// # Errors
    /// The URL is not one redis-rs accepts.
    pub fn new(url: &str, name: &str, spec: String, step: Step) -> Result<Self, String> {
        Ok(RedisKeys {
            conn: Conn::open(url)?,
            key: format!("drip:{{{name}}}"),
            spec,
            step,
            sha: redis::Script::new(KEYS_SCRIPT).get_hash().to_string(),
            clock: None,
        })
    }

    /// Run the script for `op` on `keys` (their bytes) with `extra`
    /// arguments; the reply's integers after the mismatch check.
    fn call(
        &mut self,
        op: &str,
        keys: &[&[u8]],
        horizon: i64,
        extra: &[i64],
    ) -> Result<Vec<i64>, Failure> {
        let (sec, nsec) = self.clock.unwrap_or((-1, 0));
        let mut args: Vec<String> = vec![
            op.into(),
            sec.to_string(),
            nsec.to_string(),
            self.spec.clone(),
            self.step.interval.to_string(),
            self.step.tolerance.to_string(),
            horizon.to_string(),
        ];
        args.extend(extra.iter().map(i64::to_string));
        let mut names = vec![self.key.clone()];
        names.extend(keys.iter().map(|k| format!("{}:key:{}", self.key, hex(k))));
        let reply = self.conn.eval(KEYS_SCRIPT, &self.sha, &names, &args)?;
        if let Some(m) = mismatch(&reply) {
            return Err(m);
        }
        ints(&reply)
    }
}

impl KeyBackend for RedisKeys {
    fn hello(&mut self) -> Result<bool, Failure> {
        let reply = self.call("hello", &[], 0, &[])?;
        Ok(reply.get(1) == Some(&1))
    }

    fn reserve(&mut self, asks: &[(&[u8], KeyAsk)], horizon: i64) -> Result<KeyGrant, Failure> {
        let keys: Vec<&[u8]> = asks.iter().map(|(k, _)| *k).collect();
        let wants: Vec<i64> = asks
            .iter()
            .flat_map(|(_, a)| [i64::try_from(a.want).unwrap_or(i64::MAX), a.after, a.every])
            .collect();
        let reply = self.call("reserve", &keys, horizon, &wants)?;
        let bad = || Failure::Unreachable(format!("unexpected reply {reply:?}"));
        let [_, fresh, sec, nsec, rest @ ..] = reply.as_slice() else {
            return Err(bad());
        };
        let mut rest: &[i64] = rest;
        let mut grant = KeyGrant {
            now: sec.saturating_mul(1_000_000_000).saturating_add(*nsec),
            fresh: *fresh == 1,
            keys: Vec::with_capacity(asks.len()),
        };
        while let [seq, count, tail @ ..] = rest {
            let count = usize::try_from(*count).map_err(|_| bad())?;
            let slots = tail.get(..count).ok_or_else(bad)?;
            grant
                .keys
                .push((u64::try_from(*seq).unwrap_or(0), slots.to_vec()));
            rest = &tail[count..];
        }
        if grant.keys.len() != asks.len() {
            return Err(bad());
        }
        Ok(grant)
    }

    fn give_back(&mut self, backs: &[(&[u8], u64, i64)]) -> Result<(), Failure> {
        let keys: Vec<&[u8]> = backs.iter().map(|(k, _, _)| *k).collect();
        let mut extra = Vec::with_capacity(backs.len() * 3);
        for &(_, seq, first) in backs {
            extra.push(i64::try_from(seq).unwrap_or(i64::MAX));
            extra.push(first.div_euclid(1_000_000_000));
            extra.push(first.rem_euclid(1_000_000_000));
        }
        self.call("giveback", &keys, 0, &extra).map(|_| ())
    }
}

impl Backend for RedisBackend {
    fn hello(&mut self) -> Result<bool, Failure> {
        let reply = self.call("hello", &[])?;
        Ok(self.grant(&reply)?.fresh)
    }

    fn reserve(&mut self, want: u64, sizes: &[u64], horizon: i64) -> Result<Grant, Failure> {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut extra = vec![int(want), horizon];
        extra.extend(sizes.iter().map(|&s| int(s)));
        let reply = self.call("reserve", &extra)?;
        self.grant(&reply)
    }

    fn give_back(&mut self, seq: u64, first_unused: i64, size: u64) -> Result<bool, Failure> {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        let reply = self.call("giveback", &[seq, first_unused, size])?;
        Ok(matches!(reply.first(), Some(Value::Int(1))))
    }
}
