//! The accounting: every record read is written, dropped, expired,
//! skipped or undelivered, and these counts prove it.

use serde::Serialize;

use crate::bucket::Fate;
use crate::input::Piece;
use crate::keyed::KeyStats;

/// Counts of records by what became of them, and a few gauges.
///
/// Invariant once drip has finished:
/// `read = written + dropped_newest + dropped_oldest + expired + skipped +
/// undelivered`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Records read from the inputs.
    pub read: u64,
    /// Records written whole to stdout.
    pub written: u64,
    /// Records discarded on arrival at a full bucket (`drop-newest`).
    pub dropped_newest: u64,
    /// Records evicted from a full bucket (`drop-oldest`).
    pub dropped_oldest: u64,
    /// Records that waited longer than `--max-wait`.
    pub expired: u64,
    /// Records over `--max-record` or `--capacity-bytes`, passed by under
    /// `--oversize skip` (never queued).
    pub skipped: u64,
    /// Records still queued or being written when drip stopped.
    pub undelivered: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written to stdout.
    pub bytes_written: u64,
}

impl Counts {
    /// Count `n` records that left the bucket as `fate`.
    pub fn add(&mut self, fate: Fate, n: u64) {
        match fate {
            Fate::DroppedNewest => self.dropped_newest += n,
            Fate::DroppedOldest => self.dropped_oldest += n,
            Fate::Expired => self.expired += n,
            Fate::Undelivered => self.undelivered += n,
        }
    }

    /// Account for a piece of a skipped record (`--oversize skip`):
    /// `bytes` of it were read, and unless it is a [`Piece::Part`] the
    /// record is complete.
    pub fn skip_piece(&mut self, bytes: usize, piece: Piece) {
        self.bytes_read += bytes as u64;
        if piece != Piece::Part {
            self.read += 1;
            self.skipped += 1;
        }
    }

    /// Records dropped by either policy.
    pub fn dropped(&self) -> u64 {
        self.dropped_newest + self.dropped_oldest
    }

    /// Records accounted for in some way; equals `read` at the end.
    pub fn settled(&self) -> u64 {
        self.written + self.dropped() + self.expired + self.skipped + self.undelivered
    }
}

/// The summary printed at exit (`--stats`) and written as JSON
/// (`--stats-json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Record counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// The most records the bucket held at once.
    pub max_depth: u64,
    /// The longest any written record waited in the bucket, in milliseconds.
    pub max_wait_ms: f64,
    /// Wall time from start to exit, in milliseconds.
    pub elapsed_ms: f64,
    /// Records written per second over the run.
    pub rate: f64,
    /// With limits per key: the keys seen and the top keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<KeyStats>,
}

impl Summary {
    /// The one-line human summary, without the `drip: ` prefix.
    pub fn line(&self) -> String {
        let c = &self.counts;
        format!(
            "read {}, written {}, dropped {} (newest {}, oldest {}), expired {}, skipped {}, \
             undelivered {}; max depth {}, max wait {}; {} in {}",
            c.read,
            c.written,
            c.dropped(),
            c.dropped_newest,
            c.dropped_oldest,
            c.expired,
            c.skipped,
            c.undelivered,
            self.max_depth,
            format_ms(self.max_wait_ms),
            format_rate(self.rate),
            format_ms(self.elapsed_ms),
        )
    }

    /// With limits per key, the keys as a line: `keys seen 3 (remembered
    /// 3, busy 0); top written: a 10, b 5; top dropped: a 2; top waiting: none`.
    pub fn keys_line(&self) -> Option<String> {
        let k = self.keys.as_ref()?;
        let top = |list: &[(String, u64)]| {
            if list.is_empty() {
                return "none".to_string();
            }
            let named: Vec<String> = list.iter().map(|(key, n)| format!("{key} {n}")).collect();
            named.join(", ")
        };
        Some(format!(
            "keys seen {} (remembered {}, busy {}); top written: {}; top dropped: {}; top waiting: {}",
            k.keys_seen,
            k.keys,
            k.busy_keys,
            top(&k.top_written),
            top(&k.top_dropped),
            top(&k.top_waiting),
        ))
    }

    /// The summary as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("plain data serializes")
    }
}

/// `1234.5` ms as `1.23s`, `12.3ms`.
pub fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else {
        format!("{ms:.1}ms")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        let mut counts = Counts {
            read: 10,
            bytes_read: 90,
            written: 5,
            ..Counts::default()
        };
        counts.add(Fate::DroppedNewest, 1);
        counts.add(Fate::DroppedOldest, 2);
        counts.add(Fate::Expired, 1);
        counts.add(Fate::Undelivered, 1);
        counts.skip_piece(7, Piece::Part);
        counts.skip_piece(3, Piece::End);
        Summary {
            counts,
            max_depth: 4,
            max_wait_ms: 12.5,
            elapsed_ms: 2500.0,
            rate: 2.0,
            keys: None,
        }
    }

    #[test]
    fn counts_add_up() {
        let s = summary();
        assert_eq!(s.counts.settled(), s.counts.read);
        assert_eq!(s.counts.dropped(), 3);
    }

    #[test]
    fn line_names_every_count() {
        assert_eq!(
            summary().line(),
            "read 11, written 5, dropped 3 (newest 1, oldest 2), expired 1, skipped 1, \
             undelivered 1; max depth 4, max wait 12.5ms; 2.00/s in 2.50s"
        );
    }

    #[test]
    fn json_has_the_documented_keys() {
        let v: serde_json::Value = serde_json::from_str(&summary().json()).unwrap();
        for key in [
            "read",
            "written",
            "dropped_newest",
            "dropped_oldest",
            "expired",
            "skipped",
            "undelivered",
            "max_depth",
            "max_wait_ms",
            "elapsed_ms",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["dropped_oldest"], 2);
        assert_eq!(v["skipped"], 1);
        assert_eq!(v["bytes_read"], 100);
    }
}
