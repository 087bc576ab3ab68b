//! How figures read in the summary and the display: a time in ms, a
//! rate, a duration given on the command line, a key (as JSON, and as
//! `--stats` shows it), the columns a text takes.

use serde::Serialize;

/// `1234.5` ms as `1.23s`, `12.3ms`.
pub fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else {
        format!("{ms:.1}ms")
    }
}

/// A duration as the display says it: `3.2s` under ten minutes, else
/// [`clock`].
pub fn seconds(ns: u64) -> String {
    let secs = ns as f64 / 1e9;
    if secs >= 600.0 {
        clock(std::time::Duration::from_secs(secs as u64))
    } else {
        format!("{secs:.1}s")
    }
}

/// A duration as a clock: `M:SS`, or `H:MM:SS` from an hour.
pub fn clock(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// Records per second, rounded for reading.
pub fn format_rate(per_s: f64) -> String {
    if per_s >= 100.0 {
        format!("{per_s:.0}/s")
    } else {
        format!("{per_s:.2}/s")
    }
}

/// A duration given on the command line, in ms, as it reads best: `30s`,
/// `5m`, `1h`, `2.5s`, `250ms`.
pub fn format_duration_ms(ms: f64) -> String {
    for (unit, per) in [("h", 3_600_000.0), ("m", 60_000.0), ("s", 1000.0)] {
        if ms >= per && (ms / per).fract() == 0.0 {
            return format!("{}{unit}", ms / per);
        }
    }
    if ms >= 1000.0 {
        format!("{}s", ms / 1000.0)
    } else {
        format!("{ms}ms")
    }
}

/// The columns `text` takes on a terminal: a wide character (CJK, most
/// emoji) two, a combining mark none (Unicode's East Asian Width, UAX
/// #11, as the `unicode-width` crate reads it).
pub fn columns(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// A key in the top lists: its bytes, or `None` for the lane of records
/// without a key. As JSON, a string (`json_key`) or `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyName(pub Option<Vec<u8>>);

impl Serialize for KeyName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Some(key) => s.serialize_str(&json_key(key)),
            None => s.serialize_none(),
        }
    }
}

/// How `--stats` names the lane of records without a key.
pub const NO_KEY_NAME: &str = "(no key)";

/// The widest a key is shown in `--stats`, in columns ([`columns`]), `…`
/// included.
pub const KEY_SHOWN: usize = 40;

/// A key's bytes as a JSON string's text, telling every key apart: valid
/// UTF-8 as it is (JSON escapes what it must), a backslash as `\\`, each
/// byte of invalid UTF-8 as `\xNN`.
pub fn json_key(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for chunk in key.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A key as `--stats` shows it (`None`: the no-key lane, `(no key)`),
/// safe for a terminal and for the summary's lines: a backslash as `\\`,
/// tab, newline and carriage return as `\t`, `\n`, `\r`, other control
/// bytes and invalid UTF-8 as `\xNN`, control and direction-changing
/// characters beyond ASCII as `\u{NNNN}`; cut to [`KEY_SHOWN`] columns
/// ending in `…` (a wide character takes two); in double quotes (a quote inside as `\"`) when empty, or
/// with a blank, `,`, `;` or `"`, or spelled `(no key)`.
pub fn text_key(key: Option<&[u8]>) -> String {
    let Some(key) = key else {
        return NO_KEY_NAME.to_string();
    };
    let mut quote = key.is_empty() || key == NO_KEY_NAME.as_bytes();
    let pieces = key.utf8_chunks().flat_map(|chunk| {
        let valid = chunk.valid().chars().map(|c| match c {
            '\\' => "\\\\".to_string(),
            '"' => "\\\"".to_string(),
            '\t' => "\\t".to_string(),
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            c if c.is_ascii_control() => format!("\\x{:02x}", c as u32),
            c if c.is_control() || hidden(c) => format!("\\u{{{:04x}}}", c as u32),
            c => c.to_string(),
        });
        let invalid = chunk.invalid().iter().map(|b| format!("\\x{b:02x}"));
        valid.chain(invalid)
    });
    // `fits`: how much of `shown` is left, and `…` added, if it is cut.
    let (mut shown, mut width, mut fits) = (String::new(), 0, 0);
    for piece in pieces {
        width += columns(&piece);
        if width > KEY_SHOWN {
            shown.truncate(fits);
            shown.push('…');
            break;
        }
        quote |= piece.contains(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '"'));
        shown.push_str(&piece);
        if width < KEY_SHOWN {
            fits = shown.len();
        }
    }
    if quote {
        format!("\"{shown}\"")
    } else {
        shown
    }
}

/// Characters that change how the text around them is shown without
/// showing themselves: zero-width ones and the direction marks, embeddings,
/// overrides and isolates of Unicode's bidirectional algorithm (UAX #9).
fn hidden(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
}
