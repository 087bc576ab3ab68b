//! The primary that Redis Sentinels name (`redis+sentinel://`): asked of
//! the sentinels in turn with `SENTINEL GET-MASTER-ADDR-BY-NAME`, every
//! call with the store's timeout. redis-rs's own `Sentinel` connects with
//! no timeout (a stopped sentinel would hold the keeper for ever) and
//! takes the first answer, so the asking is done here, over redis-rs
//! connections.

use std::time::Duration;

use redis::{Client, Connection, RedisError};

use super::super::protocol::Failure;
use super::super::target::{address, Servers};

/// The sentinels of one primary's name.
pub(super) struct Sentinels {
    /// Each sentinel's address (`HOST:PORT`), client and connection (made
    /// when needed, dropped when a call on it fails).
    sentinels: Vec<(String, Client, Option<Connection>)>,
    /// The name the sentinels know the primary by.
    pub(super) primary: String,
    /// The URL's servers, which make a data node's URL.
    servers: Servers,
    /// The sentinel asked first: the one that answered last.
    next: usize,
    timeout: Duration,
}

/// What one sentinel said of the primary.
enum Named {
    /// Its address.
    At(String, u16),
    /// It knows no primary of that name.
    Unknown,
    /// It is no Sentinel: it does not know the command `SENTINEL` (a
    /// Redis server, a cluster's node).
    NotSentinel,
}

impl Sentinels {
    /// The sentinels of `servers` (a [`Servers::Sentinel`]), each call
    /// given `timeout`.
    ///
    /// # Errors
    /// A sentinel's URL redis-rs does not accept.
    pub(super) fn new(servers: Servers, timeout: Duration) -> Result<Sentinels, String> {
        let Servers::Sentinel {
            sentinels, primary, ..
        } = &servers
        else {
            return Err("not a Sentinel's URL".into());
        };
        let sentinels = sentinels
            .iter()
            .map(|url| {
                let client = Client::open(url.as_str()).map_err(|e| e.to_string())?;
                let addr = client.get_connection_info().addr.to_string();
                Ok((addr, client, None))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Sentinels {
            sentinels,
            primary: primary.clone(),
            servers,
            next: 0,
            timeout,
        })
    }

    /// The sentinels' addresses, for messages (`HOST:PORT,HOST:PORT`).
    pub(super) fn addrs(&self) -> String {
        let addrs: Vec<&str> = self.sentinels.iter().map(|s| s.0.as_str()).collect();
        addrs.join(",")
    }

    /// Ask sentinel `i` for the primary's address.
    fn ask(&mut self, i: usize) -> Result<Named, RedisError> {
        let timeout = self.timeout;
        let (_, client, con) = &mut self.sentinels[i];
        if con.is_none() {
            let c = client.get_connection_with_timeout(timeout)?;
            c.set_read_timeout(Some(timeout))?;
            c.set_write_timeout(Some(timeout))?;
            *con = Some(c);
        }
        let answer = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.primary)
            .query::<Option<(String, u16)>>(con.as_mut().expect("just made"));
        match answer {
            Ok(Some((host, port))) => Ok(Named::At(host, port)),
            Ok(None) => Ok(Named::Unknown),
            Err(e)
                if e.kind() == redis::ErrorKind::ResponseError
                    && e.detail().is_some_and(|d| d.starts_with("unknown command")) =>
            {
                Ok(Named::NotSentinel)
            }
            Err(e) => {
                *con = None;
                Err(e)
            }
        }
    }

    /// The redis-rs URL of the primary the sentinels name now: the first
    /// answer, asking them in turn from the one that answered last.
    /// `skip`: the sentinel that answered last named a server that is not
    /// the primary (a replica now), so the others are asked first.
    ///
    /// # Errors
    /// No sentinel answered ([`Failure::Unreachable`], each one's why);
    /// every one answered and none knows the name ([`Failure::Fatal`]).
    pub(super) fn primary_url(&mut self, skip: bool) -> Result<(String, String), Failure> {
        let n = self.sentinels.len();
        if skip {
            self.next = (self.next + 1) % n;
        }
        let mut whys = Vec::new();
        let mut unknown = 0;
        let mut not_sentinels: Vec<String> = Vec::new();
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.ask(i) {
                Ok(Named::At(host, port)) => {
                    self.next = i;
                    let url = self.servers.node_url(&host, port).expect("a Sentinel's");
                    return Ok((url, address(&host, port)));
                }
                Ok(Named::Unknown) => unknown += 1,
                Ok(Named::NotSentinel) => not_sentinels.push(self.sentinels[i].0.clone()),
                Err(e) => whys.push(format!("{}: {e}", self.sentinels[i].0)),
            }
        }
        // Every address answered, and none as a Sentinel that knows the
        // name: no retry mends it. One that does not answer may be the
        // Sentinel, so any such silence is an outage.
        if let Some(addr) = not_sentinels
            .first()
            .filter(|_| unknown + not_sentinels.len() == n)
        {
            return Err(Failure::Fatal(format!(
                "{addr} is not a Redis Sentinel (it does not know SENTINEL): give redis://{addr}/NAME for one server, or redis+sentinel:// with the sentinels' addresses"
            )));
        }
        if unknown == n {
            return Err(Failure::Fatal(format!(
                "the sentinels ({}) know no primary named '{}': give the name they monitor (SENTINEL MASTERS lists them)",
                self.addrs(),
                self.primary
            )));
        }
        Err(Failure::Unreachable(format!(
            "no sentinel named the primary '{}' ({})",
            self.primary,
            whys.join("; ")
        )))
    }

    /// Whether a sentinel still names `addr` (`HOST:PORT`) as the primary:
    /// `Some(false)` when the first that answers names another, `None`
    /// when none answers.
    pub(super) fn still_names(&mut self, addr: &str) -> Option<bool> {
        let n = self.sentinels.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.ask(i) {
                Ok(Named::At(host, port)) => {
                    self.next = i;
                    return Some(address(&host, port) == addr);
                }
                Ok(Named::Unknown | Named::NotSentinel) => return Some(false),
                Err(_) => {}
            }
        }
        None
    }
}
