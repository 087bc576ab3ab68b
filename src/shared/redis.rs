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
//! database), a service that is not Redis at all, or a server that can
//! never hold the state (a Redis Cluster node that does not own its slot,
//! a Sentinel), stops it under every `--share-on-error`
//! ([`Failure::Fatal`]).

use std::path::PathBuf;
use std::time::Duration;

use redis::{Client, Connection, ConnectionAddr, ErrorKind, RedisError, Value};

use super::gcra::{hex, Meter, Step};
use super::protocol::{Ask, Back, Failure, Grant, Reply, Store};
use super::take::Taken;

/// The script, run atomically by the server.
pub const SCRIPT: &str = concat!(include_str!("prelude.lua"), include_str!("script.lua"));

/// How long one call may take before the server counts as unreachable.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// The script of the limits per key ([`super::keys`]).
pub const KEYS_SCRIPT: &str = concat!(include_str!("prelude.lua"), include_str!("keys.lua"));

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
        let state = keys.first().map_or("", String::as_str);
        let result = match self.eval_once(script, sha, keys, args) {
            Err((e, false)) if reused && !e.is_timeout() => self.eval_once(script, sha, keys, args),
            result => result,
        };
        result.map_err(|(e, connecting)| match self.elsewhere(&e, state) {
            Some(why) => Failure::Fatal(why),
            None => self.failure(&e, connecting, state),
        })
    }

    /// Why the server reached is not the one that can hold the state
    /// `state` (a key name), when `e` says so; no retry mends either: a
    /// Redis Cluster node that does not own the state's slot (`MOVED`:
    /// drip does not follow a cluster's redirections), or a server that
    /// does not know the scripts' commands (a Sentinel, asked with `INFO`
    /// which it is, or a server without scripting).
    fn elsewhere(&mut self, e: &RedisError, state: &str) -> Option<String> {
        if e.kind() == ErrorKind::Moved {
            let owner = e.redirect_node().map_or("another node", |(addr, _)| addr);
            return Some(format!(
                "{} is a Redis Cluster node that does not own drip's keys ({state}: MOVED {}): drip does not follow a cluster's redirections; give the node that owns them ({owner}) in the URL",
                self.addr,
                e.detail().unwrap_or_default()
            ));
        }
        let detail = e.detail().unwrap_or_default();
        if e.kind() != ErrorKind::ResponseError || !detail.starts_with("unknown command") {
            return None;
        }
        // `unknown command 'EVALSHA', with args beginning with: …`
        let unknown = detail.split(", with args").next().unwrap_or(detail);
        let info = self
            .connection()
            .ok()
            .and_then(|con| redis::cmd("INFO").arg("server").query::<String>(con).ok());
        if info.is_some_and(|i| i.lines().any(|l| l.trim() == "redis_mode:sentinel")) {
            return Some(format!(
                "{} is a Redis Sentinel, which holds no data ({unknown}): drip does not ask a Sentinel for the primary; give the primary's address in the URL",
                self.addr
            ));
        }
        Some(format!(
            "{} does not run drip's scripts ({unknown}): drip needs a Redis (or Valkey) server that runs Lua scripts (EVALSHA, EVAL)",
            self.addr
        ))
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

    /// What `e` (from `connecting`, or from a call on the state `state`,
    /// a key name) is: the server refusing drip for good ([`refusal`]), a
    /// first answer not in Redis's protocol (not a Redis server), a socket
    /// path that cannot be one, or a key of the state holding a value of
    /// another type (`WRONGTYPE`: not a state drip wrote, which drip does
    /// not overwrite) is [`Failure::Fatal`]; anything else
    /// may pass and is [`Failure::Unreachable`], saying what may help: the
    /// socket's path, that a server not speaking TLS does not answer
    /// `rediss://`, which CAs are trusted.
    fn failure(&self, e: &RedisError, connecting: bool, state: &str) -> Failure {
        if let Some(why) = refusal(e, self.socket.is_some()) {
            return Failure::Fatal(why);
        }
        // Redis before 7 reports it inside a script's error (`ERR Error
        // running script … WRONGTYPE …`).
        if e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE") {
            return Failure::Fatal(format!(
                "the server holds a value of another type than drip's state (a hash) under {state} or one of its keys ({state}:key:*): not a state drip wrote; delete them, or choose another NAME"
            ));
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

/// The limits' mismatch a script reports as `{-1, stored spec}`, or
/// `{-1, stored spec, gen}`: limits `drip ctl` changed when `gen` > 0.
fn mismatch(reply: &[Value]) -> Option<Failure> {
    if !matches!(reply.first(), Some(Value::Int(-1))) {
        return None;
    }
    let stored = match reply.get(1) {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    if matches!(reply.get(2), Some(Value::Int(gen)) if *gen > 0) {
        return Some(Failure::Changed(stored));
    }
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

/// One NAME on one Redis server: the global limits' state in the hash
/// `drip:{NAME}` (`script.lua`), and each key's in `drip:{NAME}:key:HEX`
/// (`keys.lua`), in the same hash slot (so one script call may touch them
/// all, on a cluster too).
pub struct RedisStore {
    conn: Conn,
    key: String,
    spec: String,
    meters: Vec<Meter>,
    /// The key limit's, when the limits per key are shared.
    key_step: Option<Step>,
    sha: String,
    keys_sha: String,
    /// A test clock (seconds, ns) instead of the server's `TIME`.
    pub clock: Option<(i64, i64)>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
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

impl RedisStore {
    /// The state `name` on the server at `url` (a redis-rs URL), for
    /// limits `spec` (all of them): the global limits' `meters`, and the
    /// key limit's step when the limits per key are shared.
    ///
    /// # Errors
    /// The URL is not one redis-rs accepts.
    pub fn new(
        url: &str,
        name: &str,
        spec: String,
        meters: Vec<Meter>,
        key_step: Option<Step>,
    ) -> Result<Self, String> {
        Ok(RedisStore {
            conn: Conn::open(url)?,
            key: format!("drip:{{{name}}}"),
            spec,
            meters,
            key_step,
            sha: redis::Script::new(SCRIPT).get_hash().to_string(),
            keys_sha: redis::Script::new(KEYS_SCRIPT).get_hash().to_string(),
            clock: None,
        })
    }

    /// Run the global limits' script for `op` with `extra` arguments.
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

    /// Run the keys' script for `op` on `keys` (their bytes) with `extra`
    /// arguments; the reply's integers after the mismatch check.
    fn call_keys(
        &mut self,
        op: &str,
        keys: &[&[u8]],
        horizon: i64,
        extra: &[i64],
    ) -> Result<Vec<i64>, Failure> {
        let (sec, nsec) = self.clock.unwrap_or((-1, 0));
        let step = self.key_step.unwrap_or(Step {
            interval: 1,
            tolerance: 0,
        });
        let mut args: Vec<String> = vec![
            op.into(),
            sec.to_string(),
            nsec.to_string(),
            self.spec.clone(),
            step.interval.to_string(),
            step.tolerance.to_string(),
            horizon.to_string(),
        ];
        args.extend(extra.iter().map(i64::to_string));
        let mut names = vec![self.key.clone()];
        names.extend(keys.iter().map(|k| format!("{}:key:{}", self.key, hex(k))));
        let reply = self.conn.eval(KEYS_SCRIPT, &self.keys_sha, &names, &args)?;
        if let Some(m) = mismatch(&reply) {
            return Err(m);
        }
        ints(&reply)
    }

    /// The global limits' reservation of `ask`.
    fn reserve_global(&mut self, ask: &Ask<'_>, horizon: i64) -> Result<Reply, Failure> {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut extra = vec![int(ask.want), horizon];
        extra.extend(ask.sizes.iter().map(|&s| int(s)));
        let reply = self.call("reserve", &extra)?;
        if let Some(m) = mismatch(&reply) {
            return Err(m);
        }
        match ints(&reply)?.as_slice() {
            [_, seq, now, fresh, slots @ ..] => Ok(Reply {
                now: *now,
                fresh: *fresh == 1,
                grants: vec![Grant {
                    seq: u64::try_from(*seq).unwrap_or(0),
                    slots: slots.to_vec(),
                }],
            }),
            _ => Err(Failure::Unreachable(format!("unexpected reply {reply:?}"))),
        }
    }

    /// `drip take`'s one slot of `size` (bytes, or cost), taken only when
    /// due within `within` ns (the script's `take`, [`super::gcra::Gcra::take`]).
    ///
    /// # Errors
    /// As a reservation's: a mismatch of limits, an unreachable server.
    pub fn take(&mut self, size: u64, within: i64) -> Result<Taken, Failure> {
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        let reply = self.call("take", &[size, within])?;
        if let Some(m) = mismatch(&reply) {
            return Err(m);
        }
        match ints(&reply)?.as_slice() {
            [code, _, now, _, due] => Ok(Taken {
                now: *now,
                due: *due,
                taken: *code == 1,
            }),
            _ => Err(Failure::Unreachable(format!("unexpected reply {reply:?}"))),
        }
    }

    /// Run another of drip's scripts (`script`, its hash `sha`) on `keys`
    /// with `args` through this store's connection (`--share-jobs`'s).
    ///
    /// # Errors
    /// As the schedule's calls: a server unreachable or unusable.
    pub(crate) fn eval_script(
        &mut self,
        script: &str,
        sha: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<Vec<Value>, Failure> {
        self.conn.eval(script, sha, keys, args)
    }

    /// The keys' reservation of `asks`, in one call.
    fn reserve_keys(&mut self, asks: &[Ask<'_>], horizon: i64) -> Result<Reply, Failure> {
        let keys: Vec<&[u8]> = asks.iter().map(|a| a.key.unwrap_or_default()).collect();
        let wants: Vec<i64> = asks
            .iter()
            .flat_map(|a| [i64::try_from(a.want).unwrap_or(i64::MAX), a.after, a.every])
            .collect();
        let reply = self.call_keys("reserve", &keys, horizon, &wants)?;
        let bad = || Failure::Unreachable(format!("unexpected reply {reply:?}"));
        let [_, fresh, sec, nsec, rest @ ..] = reply.as_slice() else {
            return Err(bad());
        };
        let mut rest: &[i64] = rest;
        let mut out = Reply {
            now: sec.saturating_mul(1_000_000_000).saturating_add(*nsec),
            fresh: *fresh == 1,
            grants: Vec::with_capacity(asks.len()),
        };
        while let [seq, count, tail @ ..] = rest {
            let count = usize::try_from(*count).map_err(|_| bad())?;
            let slots = tail.get(..count).ok_or_else(bad)?;
            out.grants.push(Grant {
                seq: u64::try_from(*seq).unwrap_or(0),
                slots: slots.to_vec(),
            });
            rest = &tail[count..];
        }
        if out.grants.len() != asks.len() {
            return Err(bad());
        }
        Ok(out)
    }
}

impl Store for RedisStore {
    fn hello(&mut self) -> Result<bool, Failure> {
        if self.key_step.is_some() && self.meters.is_empty() {
            let reply = self.call_keys("hello", &[], 0, &[])?;
            return Ok(reply.get(1) == Some(&1));
        }
        let reply = self.call("hello", &[])?;
        if let Some(m) = mismatch(&reply) {
            return Err(m);
        }
        match ints(&reply)?.as_slice() {
            [_, _, _, fresh, ..] => Ok(*fresh == 1),
            _ => Err(Failure::Unreachable(format!("unexpected reply {reply:?}"))),
        }
    }

    fn relimit(&mut self) -> Result<(), Failure> {
        self.call("relimit", &[]).map(drop)
    }

    fn adopt(&mut self, spec: String, meters: Vec<Meter>) {
        self.spec = spec;
        self.meters = meters;
    }

    fn reserve(&mut self, asks: &[Ask<'_>], horizon: i64) -> Result<Reply, Failure> {
        match asks {
            [global] if global.key.is_none() => self.reserve_global(global, horizon),
            asks => self.reserve_keys(asks, horizon),
        }
    }

    fn give_back(&mut self, backs: &[Back<'_>]) -> Result<Vec<bool>, Failure> {
        let mut given = Vec::with_capacity(backs.len());
        let (keyed, global): (Vec<&Back>, Vec<&Back>) = backs.iter().partition(|b| b.key.is_some());
        for b in &global {
            let seq = i64::try_from(b.seq).unwrap_or(i64::MAX);
            let size = i64::try_from(b.size).unwrap_or(i64::MAX);
            let reply = self.call("giveback", &[seq, b.first_unused, size])?;
            given.push(matches!(reply.first(), Some(Value::Int(1))));
        }
        if !keyed.is_empty() {
            let keys: Vec<&[u8]> = keyed.iter().map(|b| b.key.unwrap_or_default()).collect();
            let mut extra = Vec::with_capacity(keyed.len() * 3);
            for b in &keyed {
                extra.push(i64::try_from(b.seq).unwrap_or(i64::MAX));
                extra.push(b.first_unused.div_euclid(1_000_000_000));
                extra.push(b.first_unused.rem_euclid(1_000_000_000));
            }
            let reply = self.call_keys("giveback", &keys, 0, &extra)?;
            // After {1, fresh, sec, nsec}: seq and 1 or 0 for each key.
            given.extend(reply.iter().skip(4).skip(1).step_by(2).map(|&b| b == 1));
        }
        Ok(given)
    }
}
