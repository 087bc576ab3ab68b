//! The batched look-ups: a read's records are split and their keys found
//! and looked up [`AHEAD`] at a time, before any of them is decided, so
//! the look-ups' cache misses overlap.
//!
//! Pure: no threads, no clock, no I/O.

use std::hash::BuildHasher;

use super::Keyed;

/// What a record's key is looked for in: the record without its
/// delimiter, and, for lines (`\n`), without a CR before it, so a file with
/// CRLF line ends keys as one with LF ends.
#[inline(always)]
pub(super) fn body_of(record: &[u8], delimiter: u8) -> &[u8] {
    // Index arithmetic rather than `strip_suffix`: this runs for every
    // record, and the plainer code keeps the look-up loop tight.
    let mut end = record.len();
    if end > 0 && record[end - 1] == delimiter {
        end -= 1;
    }
    if delimiter == b'\n' && end > 0 && record[end - 1] == b'\r' {
        end -= 1;
    }
    &record[..end]
}

/// The key of `record` (its delimiter included) under `spec`, as the keyed
/// queues see it (without the delimiter, nor a CR before a newline).
pub fn record_key<'a>(
    spec: &crate::key::KeySpec,
    record: &'a [u8],
    delimiter: u8,
) -> Option<&'a [u8]> {
    spec.key(body_of(record, delimiter))
}

/// Records looked up at once ([`Keyed::look_ahead`]).
pub(super) const AHEAD: usize = 16;

/// A record split and looked up ahead of its turn.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ahead {
    /// One past its last byte (delimiter included), in the read.
    pub(super) end: usize,
    /// Where its key is in the read; `None`: it has no key.
    pub(super) key: Option<(usize, usize)>,
    /// The key's hash.
    pub(super) hash: u64,
    /// The key's slot, if remembered when looked up.
    pub(super) found: Option<u32>,
}

impl Keyed {
    /// Split up to [`AHEAD`] records of `data` from `start`, find their
    /// keys and look each up among the remembered ones, before any of them
    /// is decided: all are split and hashed first, then looked up one after
    /// another, so the look-ups' cache misses on the table and the slots
    /// overlap instead of following one another.
    /// Returns how many records `ahead` now holds (≥ 1).
    pub(super) fn look_ahead(
        &self,
        data: &[u8],
        mut start: usize,
        ahead: &mut [Ahead; AHEAD],
    ) -> usize {
        let mut n = 0;
        while n < AHEAD && start < data.len() {
            let end = memchr::memchr(self.delimiter, &data[start..])
                .map_or(data.len(), |i| start + i + 1);
            let record = &data[start..end];
            let key = self.spec.key(body_of(record, self.delimiter));
            ahead[n] = Ahead {
                end,
                key: key.map(|k| {
                    let from = k.as_ptr() as usize - data.as_ptr() as usize;
                    (from, from + k.len())
                }),
                hash: key.map_or(0, |k| self.hasher.hash_one(k)),
                found: None,
            };
            start = end;
            n += 1;
        }
        // The slot each hash points to first (almost always its key's),
        // fetched for all before any is compared: a look-up in a random
        // order of keys misses the caches, and these misses overlap.
        for record in &ahead[..n] {
            if record.key.is_some() {
                if let Some(&s) = self.table.find(record.hash, |_| true) {
                    crate::sys::prefetch(&self.slots[s as usize]);
                    crate::sys::prefetch(&self.positions[s as usize]);
                }
            }
        }
        for record in &mut ahead[..n] {
            if let Some((from, to)) = record.key {
                record.found = self.find(&data[from..to], record.hash);
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_looked_for_without_the_delimiter_or_a_cr_before_a_newline() {
        assert_eq!(body_of(b"a,b\r\n", b'\n'), b"a,b");
        assert_eq!(body_of(b"a,b\n", b'\n'), b"a,b");
        assert_eq!(
            body_of(b"a,b\r", b'\n'),
            b"a,b",
            "a last line without its newline"
        );
        assert_eq!(body_of(b"a,b\r\r\n", b'\n'), b"a,b\r", "one CR only");
        assert_eq!(body_of(b"a,b\r\0", 0), b"a,b\r", "a CR is data with -0");
    }
}
