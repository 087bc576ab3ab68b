//! Hosts: the host a URL names, in one spelling, for the built-in host key
//! (`--key host`).
//!
//! The URL is read by the `url` crate, which follows the WHATWG URL
//! Standard (<https://url.spec.whatwg.org/>), not by a regular expression:
//! for the special schemes (`http`, `https`, `ws`, `wss`, `ftp`, `file`)
//! the host is lower-cased, an internationalized name is turned into its
//! ASCII form (punycode, `xn--…`, by UTS #46), an IPv4 address in any of
//! its spellings (`0x7f.1`, `2130706433`) is written in dotted decimal,
//! and the scheme's default port is dropped. Then this module writes an
//! IPv6 address compressed as RFC 5952 says (`[::1]`, within brackets),
//! drops one trailing root dot (`api.example.com.` is `api.example.com`),
//! lower-cases the ASCII letters of another scheme's host (which the
//! standard leaves as written), and adds a port that is not the scheme's
//! default (`api.example.com:8443`: another port is another server, with
//! a limit of its own).
//!
//! The user name, the password, the path, the query and the fragment are
//! never part of the host, so a credential carried in a URL never becomes
//! a key, nor any figure that names keys.
//!
//! Pure: no threads, no clock, no I/O.

use std::borrow::Cow;

/// The host `text` names, as [the module](self) spells it, or `None` when
/// `text` (blanks around it ignored) is not a URL with a host: no scheme,
/// a URL the standard refuses, a host that is empty, or bytes that are not
/// UTF-8.
///
/// Borrowed from `text` when `text` holds the spelling as it is (a URL
/// written in lower case without a default port, the usual case), so most
/// records make no copy of their key.
pub fn host_key(text: &[u8]) -> Option<Cow<'_, [u8]>> {
    let text = std::str::from_utf8(text).ok()?;
    let url = url::Url::parse(text.trim_matches(|c| matches!(c, ' ' | '\t' | '\r'))).ok()?;
    let mut key = match url.host()? {
        url::Host::Domain(name) => {
            let name = name.strip_suffix('.').unwrap_or(name);
            if name.is_empty() {
                return None;
            }
            name.to_ascii_lowercase()
        }
        url::Host::Ipv4(address) => address.to_string(),
        url::Host::Ipv6(address) => format!("[{address}]"),
    };
    if let Some(port) = url.port() {
        key.push(':');
        key.push_str(&port.to_string());
    }
    Some(
        match memchr::memmem::find(text.as_bytes(), key.as_bytes()) {
            Some(at) => &text.as_bytes()[at..at + key.len()],
            None => return Some(Cow::Owned(key.into_bytes())),
        }
        .into(),
    )
}

/// A host name as written by hand (a row of `--key-rates`: `GitHub.COM.`,
/// `api.example.com:8443`, `[::1]`), spelled as [`host_key`] spells the
/// host of a URL naming it, port and all; `None` when it names no host.
pub fn host_row(text: &str) -> Option<String> {
    if text.contains(['/', '?', '#', '@']) {
        return None;
    }
    // Read as an `http` URL's host and port, but keep the port written,
    // even 80: a key is spelled with any port its URL gave but the
    // default of that URL's scheme, which a row cannot know.
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && !host.is_empty()
                && (host.ends_with(']') || !host.contains(':')) =>
        {
            (host, Some(port))
        }
        _ => (text, None),
    };
    let url = format!("http://{host}/");
    let mut key = String::from_utf8(host_key(url.as_bytes())?.into_owned()).ok()?;
    if let Some(port) = port {
        key.push(':');
        key.push_str(&port.parse::<u16>().ok()?.to_string());
    }
    Some(key)
}

/// `text` with every user name and password written as `***`, for a
/// message of drip's own that quotes a record: in each word (a run of
/// characters between blanks, quotes, commas and brackets) that holds an
/// `@`, what stands before its last `@` (after the `scheme://` that opens
/// it, if any) is taken for credentials, whatever it holds (`/`, `?`,
/// `#` too). A word with an `@` in its path loses more than it must;
/// none shows a password.
pub fn without_userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains('@') {
        return text.into();
    }
    let apart =
        |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | ',' | '{' | '}' | '[' | ']');
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match word.rfind('@') {
            Some(last) => {
                let from = word.find("://").filter(|&s| s < last).map_or(0, |s| s + 3);
                out.push_str(&word[..from]);
                out.push_str("***");
                out.push_str(&word[last..]);
            }
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in text.chars() {
        if apart(c) {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out.into()
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_row_is_spelled_as_a_url_host_is() {
        for (row, key) in [
            ("GitHub.COM.", Some("github.com")),
            ("bücher.de", Some("xn--bcher-kva.de")),
            ("api.example.com:8443", Some("api.example.com:8443")),
            ("example.com:80", Some("example.com:80")),
            ("[0:0::1]", Some("[::1]")),
            ("[::1]:8080", Some("[::1]:8080")),
            ("127.1", Some("127.0.0.1")),
            ("a/b", None),
            ("user@host", None),
            ("", None),
            ("a:99999", None),
        ] {
            assert_eq!(host_row(row).as_deref(), key, "{row}");
        }
        // A row names the key a URL of that host makes.
        let url = host_key(b"https://API.Example.com:8443/x").unwrap();
        assert_eq!(host_row("api.EXAMPLE.com:8443").unwrap().as_bytes(), &*url);
    }
    use super::*;
    use proptest::prelude::*;

    fn key(text: &str) -> Option<String> {
        host_key(text.as_bytes()).map(|k| String::from_utf8(k.into_owned()).unwrap())
    }

    #[test]
    fn every_spelling_of_one_host_gives_one_key() {
        for url in [
            "https://api.example.com/v1/users?id=3",
            "HTTPS://API.Example.COM/v1",
            "https://api.example.com./",
            "https://api.example.com:443/",
            "http://api.example.com:80/x",
            "http://api.example.com#top",
            "https://api.example.com?x=1",
            "https://alice:s3cret@api.example.com/",
            "https://ghp_T0KEN@api.example.com",
            "  https://api.example.com/\t",
            "wss://api.example.com/socket",
            "https://api.example.com\\path",
        ] {
            assert_eq!(key(url).as_deref(), Some("api.example.com"), "{url}");
        }
    }

    #[test]
    fn addresses_are_written_one_way() {
        assert_eq!(key("http://[::1]/").as_deref(), Some("[::1]"));
        assert_eq!(key("http://[0:0::1]:8080/").as_deref(), Some("[::1]:8080"));
        assert_eq!(
            key("http://[0000:0000:0000:0000:0000:0000:0000:0001]/").as_deref(),
            Some("[::1]")
        );
        assert_eq!(
            key("http://[2001:DB8::A]/").as_deref(),
            Some("[2001:db8::a]")
        );
        assert_eq!(key("http://127.0.0.1:80/").as_deref(), Some("127.0.0.1"));
        assert_eq!(key("http://0x7f.1/").as_deref(), Some("127.0.0.1"));
        assert_eq!(key("http://2130706433/").as_deref(), Some("127.0.0.1"));
    }

    #[test]
    fn another_port_is_another_key() {
        assert_eq!(
            key("https://api.example.com:8443/").as_deref(),
            Some("api.example.com:8443")
        );
        assert_eq!(
            key("http://api.example.com:443/").as_deref(),
            Some("api.example.com:443")
        );
        assert_eq!(
            key("redis://Cache.Local:6379/0").as_deref(),
            Some("cache.local:6379")
        );
    }

    #[test]
    fn internationalized_names_are_punycode() {
        assert_eq!(
            key("https://bücher.example/").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(
            key("https://BÜCHER.example/").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(
            key("https://xn--bcher-kva.example/").as_deref(),
            Some("xn--bcher-kva.example")
        );
    }

    #[test]
    fn what_is_not_a_url_with_a_host_has_no_key() {
        for text in [
            "",
            "api.example.com/v1",
            "//api.example.com/",
            "mailto:someone@example.com",
            "file:///etc/hosts",
            "localhost:8080",
            "https://",
            "http://[::1/",
            "GET https://api.example.com/",
            "http://./",
        ] {
            assert_eq!(key(text), None, "{text:?}");
        }
        assert!(host_key(b"https://\xff.example/").is_none());
    }

    #[test]
    fn user_info_is_never_shown() {
        assert_eq!(
            without_userinfo("GET https://alice:s3cret@api.example.com/x?u=1 #t"),
            "GET https://***@api.example.com/x?u=1 #t"
        );
        assert_eq!(
            without_userinfo("{\"url\": \"http://tok@a.example\", \"b\": \"ftp://x@y\"}"),
            "{\"url\": \"http://***@a.example\", \"b\": \"ftp://***@y\"}"
        );
        // A password holding /, ? or #; credentials with no scheme.
        assert_eq!(
            without_userinfo("https://alice:pa/ss@host/p"),
            "https://***@host/p"
        );
        assert_eq!(without_userinfo("https://a:b?c#d@host"), "https://***@host");
        assert_eq!(without_userinfo("alice:s3cret@host/v1"), "***@host/v1");
        assert_eq!(without_userinfo("no url here, a@b"), "no url here, ***@b");
        assert_eq!(
            without_userinfo("https://a.example/p"),
            "https://a.example/p"
        );
        assert_eq!(without_userinfo("x://"), "x://");
    }

    proptest! {
        /// Whatever a password holds but the word's own ends, it is not
        /// in what is shown.
        #[test]
        fn no_password_survives(
            password in "Pw[A-Za-z0-9/?#:%!$&()*+;=._~-]{4,18}",
            before in "[a-z {\"]{0,5}",
            after in "[a-z/ ]{0,5}",
        ) {
            let text = format!("{before}https://user:{password}@host.example{after}");
            let shown = without_userinfo(&text);
            prop_assert!(!shown.contains(&password), "{}", shown);
        }
    }

    #[test]
    fn a_key_spelled_as_the_record_spells_it_is_borrowed() {
        assert!(matches!(
            host_key(b"https://a.example/x"),
            Some(Cow::Borrowed(b"a.example"))
        ));
        assert!(matches!(
            host_key(b"https://A.example/x"),
            Some(Cow::Owned(_))
        ));
    }

    /// A host name's labels, some with capitals or a letter out of ASCII.
    fn name() -> impl Strategy<Value = String> {
        proptest::collection::vec("[a-zA-Z][a-zA-Z0-9]{0,8}|[a-zü]{1,6}", 1..4)
            .prop_map(|labels| labels.join("."))
    }

    /// A spelling of one host and port: the case of its letters changed,
    /// a user (with or without a password), a trailing dot, the default
    /// port written, a path, a query, a fragment.
    fn spelling(host: String, port: Option<u16>) -> impl Strategy<Value = String> {
        (
            proptest::collection::vec(any::<bool>(), host.chars().count()),
            proptest::option::of(("[a-z]{1,5}", proptest::option::of("[A-Za-z0-9_]{1,8}"))),
            any::<bool>(),
            any::<bool>(),
            "(/[a-z0-9]{0,5}){0,2}",
            proptest::option::of("[a-z=&0-9]{0,6}"),
            proptest::option::of("[a-z0-9]{0,6}"),
        )
            .prop_map(move |(upper, user, dot, default, path, query, fragment)| {
                let cased: String = host
                    .chars()
                    .zip(upper)
                    .map(|(c, up)| {
                        if up {
                            c.to_uppercase().next().unwrap()
                        } else {
                            c
                        }
                    })
                    .collect();
                let user = match user {
                    Some((u, Some(p))) => format!("{u}:{p}@"),
                    Some((u, None)) => format!("{u}@"),
                    None => String::new(),
                };
                let port = match (port, default) {
                    (Some(p), _) => format!(":{p}"),
                    (None, true) => ":443".into(),
                    (None, false) => String::new(),
                };
                let dot = if dot { "." } else { "" };
                let query = query.map_or(String::new(), |q| format!("?{q}"));
                let fragment = fragment.map_or(String::new(), |f| format!("#{f}"));
                format!("https://{user}{cased}{dot}{port}{path}{query}{fragment}")
            })
    }

    proptest! {
        /// Every spelling of one host gives one key: the host as the `url`
        /// crate reads it (punycode, lower case), with no trailing dot,
        /// the port when it is not 443, and nothing of the user, the
        /// path, the query or the fragment.
        #[test]
        fn spellings_of_a_name_give_its_key(
            (url, host, port) in (name(), proptest::option::of(1u16..)).prop_flat_map(|(host, port)| {
                (spelling(host.clone(), port), Just(host), Just(port))
            }),
        ) {
            let plain = url::Url::parse(&format!("https://{host}/")).unwrap();
            let mut want = plain.host_str().unwrap().to_string();
            if let Some(p) = port.filter(|&p| p != 443) {
                want.push_str(&format!(":{p}"));
            }
            prop_assert_eq!(key(&url), Some(want), "{}", url);
        }

        /// An IPv6 address in any spelling (groups with leading zeros,
        /// capitals, the longest run of zeros compressed or not) gives the
        /// one RFC 5952 writes.
        #[test]
        fn spellings_of_an_address_give_its_key(
            groups in proptest::collection::vec(proptest::sample::select(vec![0u16, 0, 0, 1, 0xdb8, 0xABCD, 0xffff]), 8),
            upper in any::<bool>(),
            padded in any::<bool>(),
            port in proptest::option::of(1u16..),
        ) {
            let address = std::net::Ipv6Addr::from(<[u16; 8]>::try_from(groups.clone()).unwrap());
            let written: Vec<String> = groups
                .iter()
                .map(|g| if padded { format!("{g:04x}") } else { format!("{g:x}") })
                .map(|g| if upper { g.to_uppercase() } else { g })
                .collect();
            let port_text = port.map_or(String::new(), |p| format!(":{p}"));
            let url = format!("http://u:pw@[{}]{port_text}/p?q#f", written.join(":"));
            let mut want = format!("[{address}]");
            if let Some(p) = port.filter(|&p| p != 80) {
                want.push_str(&format!(":{p}"));
            }
            prop_assert_eq!(key(&url), Some(want));
        }
    }
}
