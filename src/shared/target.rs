//! Where a shared state lives and what `--share` and its companions say:
//! the parsers of `--share` (a NAME, or a Redis URL checked whole, as
//! redis-rs reads it, without connecting) and `--share-on-error`.

use super::voice::OnError;

/// Where the shared state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file on this host, by NAME.
    Host(String),
    /// A Redis (or Valkey) server: the redis-rs URL and the NAME.
    Redis {
        /// `redis://`, `rediss://` or `redis+unix://` URL without the NAME.
        url: String,
        /// The NAME.
        name: String,
    },
}

impl Target {
    /// The NAME shared.
    pub fn name(&self) -> &str {
        match self {
            Target::Host(name) | Target::Redis { name, .. } => name,
        }
    }
}

/// Everything `--share` and its companions say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Where.
    pub target: Target,
    /// What to do when the state cannot be reached.
    pub on_error: OnError,
    /// How many drips share (for `local`: each paces at rate / peers).
    pub peers: u64,
    /// No notices on stderr (`-q`): `wait` does not say it waits, `local`
    /// does not warn, a lost state is not reported (all still counted).
    pub quiet: bool,
    /// `--settle`: the records' settlements reach the shared cost limits.
    pub settle: bool,
}

/// The longest NAME, in characters (it is part of a file name and a key).
pub const NAME_MAX: usize = 200;

/// A NAME: letters, digits, `.`, `_`, `-`, `:`; not starting with `.`; at
/// most [`NAME_MAX`] characters.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if ok {
        Ok(())
    } else {
        let chars = name.chars().count();
        let (shown, long) = if chars > NAME_MAX {
            let shown: String = name.chars().take(40).collect();
            (
                format!("{shown}…"),
                format!(": {chars} characters, at most {NAME_MAX}"),
            )
        } else {
            (name.to_string(), String::new())
        };
        Err(format!(
            "'{shown}' is not a NAME{long} (1 to {NAME_MAX} letters, digits, '.', '_', '-', ':'; not starting with '.')"
        ))
    }
}

/// The accepted forms of a Redis `--share`, for messages.
const REDIS_FORMS: &str = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME, rediss://... (TLS), redis+unix:///SOCKET/NAME[?db=DB], redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/PRIMARY[/DB]/NAME or redis+cluster://HOST[:PORT][,HOST[:PORT]...]/NAME";

/// The host and port of a URL's `[USER[:PASSWORD]@]HOST[:PORT]`; the port
/// as written (empty: none).
fn host_port(authority: &str) -> (&str, &str) {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':').unwrap_or(rest)),
            None => (v6, ""),
        },
        None => host_port.split_once(':').unwrap_or((host_port, "")),
    }
}

/// A database number: decimal digits.
fn check_db(db: &str, text: &str) -> Result<(), String> {
    if !db.is_empty() && db.len() <= 9 && db.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!(
            "'{text}': '{db}' is not a database number (expected {REDIS_FORMS})"
        ))
    }
}

/// Check a TCP URL's `[USER[:PASSWORD]@]HOST[:PORT][/DB]` (`base`) and
/// refuse a query string (redis-rs would read only `protocol` from it).
fn check_tcp(written: &str, base: &str, query: &str, text: &str) -> Result<(), String> {
    let (authority, db) = base.split_once('/').unwrap_or((base, ""));
    let (host, port) = host_port(authority);
    if host.is_empty() {
        return Err(format!(
            "'{text}' names no HOST (expected {written}://HOST[:PORT][/DB]/NAME)"
        ));
    }
    if !port.is_empty() && !port.parse::<u16>().is_ok_and(|p| p > 0) {
        return Err(format!(
            "'{text}': '{port}' is not a port (1 to 65535; expected {REDIS_FORMS})"
        ));
    }
    if !db.is_empty() {
        check_db(db, text)?;
    }
    if !query.is_empty() {
        return Err(format!(
            "'{text}': a query string ('?{query}') is not read over TCP (expected {REDIS_FORMS})"
        ));
    }
    Ok(())
}

/// Check a `redis+unix` URL's query string: only `db`, `user` and `pass`
/// are read.
fn check_unix_query(query: &str, text: &str) -> Result<(), String> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("db", db)) => check_db(db, text)?,
            Some(("user" | "pass", _)) => {}
            _ => {
                return Err(format!(
                    "'{text}': '{pair}' is not read (a redis+unix:// query takes db=DB, user=USER and pass=PASSWORD)"
                ))
            }
        }
    }
    Ok(())
}

/// Parse `--share`: `NAME`, or `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME`
/// (also `rediss://`, `redis+unix:///SOCKET/NAME[?db=DB]`, and `valkey`
/// for `redis`). A URL is checked whole here, as redis-rs reads it,
/// without connecting.
pub fn parse_target(text: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = text.split_once("://") else {
        check_name(text)?;
        return Ok(Target::Host(text.to_string()));
    };
    let written = scheme;
    if let Some((base, kind)) = scheme.split_once('+').filter(|(_, k)| *k != "unix") {
        return parse_many(text, written, base, kind, rest);
    }
    let scheme = match scheme {
        "redis" | "valkey" => "redis",
        "rediss" | "valkeys" => "rediss",
        "redis+unix" | "valkey+unix" => "redis+unix",
        _ => return Err(unknown_scheme(scheme)),
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let unix = scheme == "redis+unix";
    let form = if unix {
        format!("{written}:///SOCKET/NAME")
    } else {
        format!("{written}://HOST/NAME")
    };
    let Some((base, name)) = path.rsplit_once('/').filter(|(_, name)| !name.is_empty()) else {
        return Err(format!("'{text}' names no NAME (expected {form})"));
    };
    if unix {
        if base.is_empty() || !base.starts_with('/') {
            return Err(format!("'{text}' names no SOCKET (expected {form})"));
        }
        check_unix_query(query, text)?;
    } else {
        check_tcp(written, base, query, text)?;
    }
    check_name(name)?;
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let url = format!("{scheme}://{base}{query}");
    redis_url(&url, text, REDIS_FORMS)?;
    Ok(Target::Redis {
        url,
        name: name.to_string(),
    })
}

/// The error of a `--share` URL whose scheme is `written` and none drip
/// reads.
fn unknown_scheme(written: &str) -> String {
    format!("unknown scheme '{written}://' (expected NAME, {REDIS_FORMS}; valkey for redis)")
}

/// Check that redis-rs reads `url`, a server's of the `--share` URL
/// `text`.
///
/// # Errors
/// It does not: why, in redis-rs's words, and `form`, what was expected.
fn redis_url(url: &str, text: &str, form: &str) -> Result<(), String> {
    ::redis::IntoConnectionInfo::into_connection_info(url)
        .map(drop)
        .map_err(|e| {
            #[allow(deprecated)] // the one text of a redis-rs error without its kind
            let why = e
                .detail()
                .unwrap_or_else(|| std::error::Error::description(&e));
            format!("'{text}' is not a Redis URL ({why}; expected {form})")
        })
}

/// Parse a `--share` URL of several servers (`written` its scheme, `base`
/// before the `+`, `kind` after it; `rest` after `://`): the sentinels,
/// the primary's name and a database
/// (`redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/PRIMARY[/DB]/NAME`),
/// or cluster nodes (`redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/NAME`).
/// The URL kept is the text without the NAME, read again by
/// [`servers`].
fn parse_many(
    text: &str,
    written: &str,
    base: &str,
    kind: &str,
    rest: &str,
) -> Result<Target, String> {
    let tls = match base {
        "redis" | "valkey" => false,
        "rediss" | "valkeys" => true,
        _ => return Err(unknown_scheme(written)),
    };
    let form = match kind {
        "sentinel" => SENTINEL_FORM,
        "cluster" => CLUSTER_FORM,
        _ => return Err(unknown_scheme(written)),
    };
    if rest.contains('?') {
        return Err(format!(
            "'{text}': a query string is not read (expected {form})"
        ));
    }
    let Some((path, name)) = rest.rsplit_once('/').filter(|(_, name)| !name.is_empty()) else {
        return Err(format!("'{text}' names no NAME (expected {form})"));
    };
    let (authority, tail) = path.split_once('/').unwrap_or((path, ""));
    let url = format!(
        "{}+{kind}://{authority}/{tail}",
        if tls { "rediss" } else { "redis" }
    );
    let servers = servers(&url).map_err(|why| format!("'{text}': {why} (expected {form})"))?;
    for one in servers.urls() {
        redis_url(&one, text, form)?;
    }
    check_name(name)?;
    Ok(Target::Redis {
        url: url.trim_end_matches('/').to_string(),
        name: name.to_string(),
    })
}

/// The form of a Sentinel's URL, for messages.
const SENTINEL_FORM: &str =
    "redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/PRIMARY[/DB]/NAME";

/// The form of a cluster's URL, for messages.
const CLUSTER_FORM: &str = "redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/NAME";

/// The port a sentinel listens on when the URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// Where the servers of a Redis `--share` URL (without its NAME) are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Servers {
    /// One server, by its redis-rs URL (a cluster node's redirections are
    /// followed from it).
    One(String),
    /// Sentinels, asked for the primary named `primary`.
    Sentinel {
        /// Each sentinel's redis-rs URL (no user, no password).
        sentinels: Vec<String>,
        /// The primary's name, as the sentinels know it.
        primary: String,
        /// What a data node's URL is made of: `rediss` or `redis`, the
        /// `USER:PASSWORD@` (or nothing), the database (or nothing).
        node: (String, String, String),
    },
    /// Nodes of a Redis Cluster, each by its redis-rs URL.
    Cluster(Vec<String>),
}

impl Servers {
    /// The redis-rs URLs of the servers named.
    fn urls(&self) -> Vec<String> {
        match self {
            Servers::One(url) => vec![url.clone()],
            Servers::Sentinel { sentinels, .. } => sentinels.clone(),
            Servers::Cluster(nodes) => nodes.clone(),
        }
    }

    /// The redis-rs URL of the data node at `host`:`port` (a Sentinel's
    /// primary), with the URL's user, password, database and TLS.
    pub fn node_url(&self, host: &str, port: u16) -> Option<String> {
        let Servers::Sentinel {
            node: (scheme, auth, db),
            ..
        } = self
        else {
            return None;
        };
        Some(format!("{scheme}://{auth}{}/{db}", address(host, port)))
    }
}

/// `host`:`port` as an address is written: an IPv6 host in brackets.
pub fn address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The servers of `url`, a `--share` URL without its NAME as
/// [`parse_target`] keeps it.
///
/// # Errors
/// A host or port missing or wrong, a database that is not a number, a
/// Sentinel's URL without the primary's name, a cluster's with a path.
pub fn servers(url: &str) -> Result<Servers, String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let Some((base, kind)) = scheme.split_once('+').filter(|(_, k)| *k != "unix") else {
        return Ok(Servers::One(url.to_string()));
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), authority),
    };
    let sentinel = kind == "sentinel";
    let default_port = if sentinel { SENTINEL_PORT } else { 6379 };
    let mut addrs = Vec::new();
    for one in hosts.split(',') {
        let (host, port) = host_port(one);
        if host.is_empty() {
            return Err("names no HOST".into());
        }
        let port = if port.is_empty() {
            default_port
        } else {
            match port.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(format!("'{port}' is not a port (1 to 65535)")),
            }
        };
        addrs.push(address(host, port));
    }
    if sentinel {
        let (primary, db) = path.split_once('/').unwrap_or((path, ""));
        if primary.is_empty() {
            return Err("names no PRIMARY (the name the sentinels know the primary by)".into());
        }
        if !db.is_empty() {
            check_db(db, url).map_err(|_| format!("'{db}' is not a database number"))?;
        }
        Ok(Servers::Sentinel {
            sentinels: addrs.iter().map(|a| format!("{base}://{a}")).collect(),
            primary: primary.to_string(),
            node: (base.to_string(), auth, db.to_string()),
        })
    } else {
        if !path.is_empty() {
            return Err(format!(
                "'{path}' is more than a NAME (a cluster has no databases)"
            ));
        }
        Ok(Servers::Cluster(
            addrs
                .iter()
                .map(|a| format!("{base}://{auth}{a}"))
                .collect(),
        ))
    }
}

/// What `--share-on-error` can say, for completion and help: (value,
/// meaning).
pub const SHARE_ON_ERROR: &[(&str, &str)] = &[
    (
        "wait",
        "send nothing, retry with backoff; records wait in the bucket",
    ),
    (
        "local",
        "pace alone at the rate divided by --share-peers (a --budget: count alone, N divided by it a window), warn once",
    ),
    ("fail", "exit with status 4"),
];

/// Parse `--share-on-error`.
pub fn parse_on_error(text: &str) -> Result<OnError, String> {
    match text {
        "wait" => Ok(OnError::Wait),
        "local" => Ok(OnError::Local),
        "fail" => Ok(OnError::Fail),
        _ => Err("expected wait, local or fail".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(parse_target("quota"), Ok(Target::Host("quota".into())));
        assert!(parse_target("a/b").is_err());
        assert!(parse_target(".hidden").is_err());
        assert!(parse_target("").is_err());
        let redis = |url: &str, name: &str| {
            Ok(Target::Redis {
                url: url.into(),
                name: name.into(),
            })
        };
        assert_eq!(parse_target("redis://h/api"), redis("redis://h", "api"));
        assert_eq!(
            parse_target("redis://h:6380/2/api"),
            redis("redis://h:6380/2", "api")
        );
        assert_eq!(parse_target("valkey://h/api"), redis("redis://h", "api"));
        #[cfg(feature = "tls")]
        assert_eq!(parse_target("rediss://h/api"), redis("rediss://h", "api"));
        assert_eq!(
            parse_target("redis+unix:///run/r.sock/api"),
            redis("redis+unix:///run/r.sock", "api")
        );
        assert_eq!(
            parse_target("redis+unix:///run/r.sock/api?db=3"),
            redis("redis+unix:///run/r.sock?db=3", "api")
        );
        assert_eq!(
            parse_target("redis://u:p@[::1]:6380/api"),
            redis("redis://u:p@[::1]:6380", "api")
        );
        let why = |text: &str| parse_target(text).unwrap_err();
        assert!(why("redis://h").contains("'redis://h' names no NAME"));
        assert!(why("redis://h/").contains("names no NAME"));
        assert!(why("redis:///q")
            .contains("'redis:///q' names no HOST (expected redis://HOST[:PORT][/DB]/NAME)"));
        assert!(why("valkey://:6379/q").contains("names no HOST (expected valkey://"));
        assert!(why("redis://u@/0/q").contains("names no HOST"));
        assert!(why("redis+unix:///q").contains("names no SOCKET"));
        assert!(parse_target("http://h/api").is_err());
    }

    /// A URL redis-rs would refuse only when connecting is refused when
    /// parsed, with what is wrong and the accepted forms.
    #[test]
    fn bad_urls_are_refused_when_parsed() {
        let why = |text: &str| parse_target(text).unwrap_err();
        for (text, says) in [
            (
                "redis://127.0.0.1:99999/x",
                "'99999' is not a port (1 to 65535",
            ),
            ("redis://h:0/x", "'0' is not a port"),
            ("redis://h:port/x", "'port' is not a port"),
            ("redis://h/abc/x", "'abc' is not a database number"),
            ("redis://h/1/2/x", "'1/2' is not a database number"),
            ("redis://h/-1/x", "'-1' is not a database number"),
            (
                "redis://h/x?timeout=1",
                "a query string ('?timeout=1') is not read",
            ),
            ("redis://h/0/x?db=1", "is not read over TCP"),
            ("redis+unix:///s/x?db=a", "'a' is not a database number"),
            ("redis+unix:///s/x?timeout=1", "'timeout=1' is not read"),
            ("redis+unix:///s/x?protocol=3", "'protocol=3' is not read"),
            (
                "redis://a b/x",
                "is not a Redis URL (Redis URL did not parse",
            ),
        ] {
            let got = why(text);
            assert!(got.contains(says), "{text}: {got}");
            assert!(
                got.contains(REDIS_FORMS) || got.contains("db=DB"),
                "{text}: {got}"
            );
        }
        assert!(why("redis+unix:///").contains("expected redis+unix:///SOCKET/NAME"));
        assert!(why("valkey+unix:///x").contains("expected valkey+unix:///SOCKET/NAME"));
        assert!(why("redis+unix://sock/x").contains("names no SOCKET"));
        let redis = |url: &str, name: &str| {
            Ok(Target::Redis {
                url: url.into(),
                name: name.into(),
            })
        };
        assert_eq!(
            parse_target("redis+unix:///s/x?db=2&pass=pw"),
            redis("redis+unix:///s?db=2&pass=pw", "x")
        );
        assert_eq!(
            parse_target("redis://:p%40w@h:6379/0/x"),
            redis("redis://:p%40w@h:6379/0", "x")
        );
    }

    /// A Sentinel's URL: the sentinels (26379 when no port), the primary's
    /// name, a database, the user and password for the data nodes, TLS;
    /// a cluster's: its nodes (6379 when no port). What is missing or
    /// wrong is named.
    #[test]
    fn sentinel_and_cluster_urls() {
        let redis = |url: &str, name: &str| {
            Ok(Target::Redis {
                url: url.into(),
                name: name.into(),
            })
        };
        assert_eq!(
            parse_target("redis+sentinel://s1,s2:26380/mymaster/api"),
            redis("redis+sentinel://s1,s2:26380/mymaster", "api")
        );
        assert_eq!(
            parse_target("valkey+sentinel://:pw@s1/mymaster/3/api"),
            redis("redis+sentinel://:pw@s1/mymaster/3", "api")
        );
        assert_eq!(
            parse_target("redis+cluster://n1:7000,n2:7001/api"),
            redis("redis+cluster://n1:7000,n2:7001", "api")
        );
        let sentinel = servers("redis+sentinel://u:pw@s1,[::1]:26380/mymaster/3").unwrap();
        assert_eq!(
            sentinel,
            Servers::Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://[::1]:26380".into()],
                primary: "mymaster".into(),
                node: ("redis".into(), "u:pw@".into(), "3".into()),
            }
        );
        assert_eq!(
            sentinel.node_url("10.0.0.5", 6380).as_deref(),
            Some("redis://u:pw@10.0.0.5:6380/3")
        );
        assert_eq!(
            servers("redis+cluster://:pw@n1,n2:7001").unwrap(),
            Servers::Cluster(vec![
                "redis://:pw@n1:6379".into(),
                "redis://:pw@n2:7001".into()
            ])
        );
        assert_eq!(
            servers("redis://h:6380/2").unwrap(),
            Servers::One("redis://h:6380/2".into())
        );
        #[cfg(feature = "tls")]
        {
            assert_eq!(
                parse_target("rediss+sentinel://s1/m/api"),
                redis("rediss+sentinel://s1/m", "api")
            );
            let tls = servers("rediss+sentinel://s1/m").unwrap();
            assert_eq!(tls.node_url("h", 1).as_deref(), Some("rediss://h:1/"));
            assert_eq!(
                servers("rediss+cluster://n1:7000").unwrap(),
                Servers::Cluster(vec!["rediss://n1:7000".into()])
            );
        }
        let why = |text: &str| parse_target(text).unwrap_err();
        assert!(
            why("redis+sentinel://s1/api").contains("names no PRIMARY"),
            "{}",
            why("redis+sentinel://s1/api")
        );
        assert!(why("redis+sentinel://s1/m/x/api").contains("'x' is not a database number"));
        assert!(why("redis+sentinel://s1,/m/api").contains("names no HOST"));
        assert!(why("redis+sentinel://s1:0/m/api").contains("'0' is not a port"));
        assert!(why("redis+cluster://n1/0/api").contains("is more than a NAME"));
        assert!(why("redis+cluster://n1").contains("names no NAME"));
        assert!(why("redis+cluster://n1/api?x=1").contains("a query string is not read"));
        assert!(why("redis+mesh://n1/api").starts_with("unknown scheme 'redis+mesh://'"));
        assert!(why("http+cluster://n1/api").starts_with("unknown scheme"));
        assert!(why("redis+cluster://n1/a b").contains("is not a NAME"));
    }

    /// A NAME too long says how long it is and how long it may be.
    #[test]
    fn a_long_name_is_refused_with_the_limit() {
        let long = "a".repeat(NAME_MAX + 1);
        let got = parse_target(&long).unwrap_err();
        assert!(
            got.contains("is not a NAME: 201 characters, at most 200"),
            "{got}"
        );
        assert!(got.contains("1 to 200 letters"), "{got}");
        assert!(got.len() < 200, "{got}");
        assert!(parse_target(&"a".repeat(NAME_MAX)).is_ok());
    }

    #[test]
    fn on_error_values() {
        assert_eq!(parse_on_error("wait"), Ok(OnError::Wait));
        assert_eq!(parse_on_error("local"), Ok(OnError::Local));
        assert_eq!(parse_on_error("fail"), Ok(OnError::Fail));
        assert!(parse_on_error("retry").is_err());
    }
}
