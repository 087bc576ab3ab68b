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
const REDIS_FORMS: &str = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME, rediss://... (TLS) or redis+unix:///SOCKET/NAME[?db=DB]";

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
    let scheme = match scheme {
        "redis" | "valkey" => "redis",
        "rediss" | "valkeys" => "rediss",
        "redis+unix" | "valkey+unix" => "redis+unix",
        _ => {
            return Err(format!(
                "unknown scheme '{scheme}://' (expected NAME, {REDIS_FORMS}; valkey for redis)"
            ))
        }
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
    ::redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| {
        #[allow(deprecated)] // the one text of a redis-rs error without its kind
        let why = e
            .detail()
            .unwrap_or_else(|| std::error::Error::description(&e));
        format!("'{text}' is not a Redis URL ({why}; expected {REDIS_FORMS})")
    })?;
    Ok(Target::Redis {
        url,
        name: name.to_string(),
    })
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
        "pace alone at the rate divided by --share-peers, warn once",
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
