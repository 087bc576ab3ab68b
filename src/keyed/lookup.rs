//! The look-ups ahead: a read's records are split and their keys found
//! and hashed ahead of their turn, and what looking each up will read is
//! fetched before it is decided, so the look-ups' cache misses overlap.
//!
//! Pure: no threads, no clock, no I/O.

use std::borrow::Cow;
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
) -> Option<std::borrow::Cow<'a, [u8]>> {
    spec.key(body_of(record, delimiter))
}

/// One past the end of the record of `data` that starts at `from`: its
/// delimiter included, or the end of `data`. Records are mostly short (a
/// log line, a URL): the first 16 bytes are looked at a word at a time in
/// place ([`crate::scan::matches`]), which costs less than a call into
/// `memchr`; past them `memchr` takes the rest.
#[inline(always)]
pub(super) fn record_end(data: &[u8], from: usize, delimiter: u8) -> usize {
    let pattern = crate::scan::splat(delimiter);
    let mut at = from;
    while at + 8 <= data.len() && at < from + 16 {
        let found = crate::scan::matches(&data[at..at + 8], pattern);
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize + 1;
        }
        at += 8;
    }
    memchr::memchr(delimiter, &data[at..]).map_or(data.len(), |i| at + i + 1)
}

/// How many records ahead of the one being decided a record is split and
/// hashed, and the index line its hash starts at fetched (a power of two).
const SPLIT_AHEAD: usize = 32;
/// How many records ahead of the one being decided the slot its hash
/// points to is fetched: late enough that the index line has come, early
/// enough that the slot has come by its turn.
const FETCH_AHEAD: usize = 16;
/// How many records ahead of the one being decided its key's schedule
/// position is fetched, when its slot says a record leaving then would
/// read or write it (the key is not rested): late enough that the slot
/// has come.
const POSITION_AHEAD: usize = 8;

/// A record split and hashed ahead of its turn.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Looked {
    /// One past its last byte (delimiter included), in the read.
    pub(super) end: usize,
    /// Where its key is in the read, or, when `owned`, the length of its
    /// key in [`Ahead::owned`] (from 0); `None`: it has no key.
    pub(super) key: Option<(usize, usize)>,
    /// Its key is spelled otherwise than in the read (a host key), and
    /// kept in [`Ahead::owned`] at its place in the ring.
    pub(super) owned: bool,
    /// Its place in the ring.
    pub(super) place: u8,
    /// The key's hash.
    pub(super) hash: u64,
    /// The slot the index named for the hash when it was looked at ahead
    /// (`None` before, or when it named none): its key's slot, unless a
    /// key was forgotten since (see [`Keyed::slot_of_looked`]).
    pub(super) hint: Option<u32>,
    /// [`Keyed::forgotten`] when the hint was taken.
    pub(super) forgotten: u64,
}

/// The records of one read ahead of the one being decided, counted from
/// the read's first: those before `decided` were handed out, those before
/// `positioned` had their position fetched if need be, those before
/// `fetched` had their slot fetched, those before `split` are in `ring`
/// (record `i` at `i % SPLIT_AHEAD`); the next to split starts at `scan`.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    ring: [Looked; SPLIT_AHEAD],
    /// The keys spelled otherwise than in the read, by place in the ring
    /// (a copy is made only for such keys).
    owned: [Vec<u8>; SPLIT_AHEAD],
    split: usize,
    fetched: usize,
    positioned: usize,
    decided: usize,
    scan: usize,
}

impl Ahead {
    /// Records handed out so far, counted from the read's first.
    #[inline(always)]
    pub(super) fn decided(&self) -> usize {
        self.decided
    }

    /// The key of `record`, the last handed out by [`Keyed::next_looked`]
    /// over `data`: where it is in the read, or its own spelling.
    #[inline(always)]
    pub(super) fn key_of<'a>(&'a self, record: &Looked, data: &'a [u8]) -> Option<&'a [u8]> {
        let (from, to) = record.key?;
        Some(match record.owned {
            false => &data[from..to],
            true => &self.owned[record.place as usize][from..to],
        })
    }
}

impl Keyed {
    /// The next record of `data` to decide (its key found and hashed),
    /// `None` after the last. Looks ahead as it goes: records are split
    /// and hashed [`SPLIT_AHEAD`] ahead, fetching the index line each
    /// hash starts at, and the slot each hash points to first is fetched
    /// [`FETCH_AHEAD`] ahead, and its schedule's position
    /// [`POSITION_AHEAD`] ahead when the slot says the key is not rested
    /// at `now` (ns). The look-up itself ([`Keyed::slot_of_looked`]) is
    /// made when the record is decided, by then from the caches: in a
    /// random order of keys every look-up misses them, and so the misses
    /// overlap with the work on the records before instead of each
    /// stalling its own.
    #[inline]
    pub(super) fn next_looked(&self, data: &[u8], ahead: &mut Ahead, now: u64) -> Option<Looked> {
        while ahead.split < ahead.decided + SPLIT_AHEAD && ahead.scan < data.len() {
            let start = ahead.scan;
            let end = record_end(data, start, self.delimiter);
            let place = ahead.split % SPLIT_AHEAD;
            let body = body_of(&data[start..end], self.delimiter);
            let in_read = |k: &[u8]| {
                let from = k.as_ptr() as usize - data.as_ptr() as usize;
                (from, from + k.len())
            };
            let (key, hash, owned) = match self.spec.part(body) {
                Some(k) => (
                    k.map(in_read),
                    k.map_or(0, |k| self.table.hasher.hash_one(k)),
                    false,
                ),
                None => match self.spec.host(body) {
                    None => (None, 0, false),
                    Some(Cow::Borrowed(k)) => {
                        (Some(in_read(k)), self.table.hasher.hash_one(k), false)
                    }
                    Some(Cow::Owned(k)) => {
                        let hash = self.table.hasher.hash_one(&k[..]);
                        let len = k.len();
                        ahead.owned[place] = k;
                        (Some((0, len)), hash, true)
                    }
                },
            };
            if key.is_some() {
                self.table.index.prefetch(hash);
            }
            ahead.ring[place] = Looked {
                end,
                key,
                owned,
                place: place as u8,
                hash,
                hint: None,
                forgotten: 0,
            };
            ahead.scan = end;
            ahead.split += 1;
        }
        while ahead.fetched < (ahead.decided + FETCH_AHEAD).min(ahead.split) {
            let record = &mut ahead.ring[ahead.fetched % SPLIT_AHEAD];
            if record.key.is_some() {
                record.hint = self.table.index.first(record.hash);
                record.forgotten = self.table.forgotten;
                if let Some(s) = record.hint {
                    crate::sys::prefetch(&self.table.slots[s as usize]);
                }
            }
            ahead.fetched += 1;
        }
        while ahead.positioned < (ahead.decided + POSITION_AHEAD).min(ahead.fetched) {
            if let Some(s) = ahead.ring[ahead.positioned % SPLIT_AHEAD].hint {
                if now < self.table.slots[s as usize].rests_at {
                    self.pacing.prefetch(s);
                }
            }
            ahead.positioned += 1;
        }
        if ahead.decided == ahead.split {
            return None;
        }
        let record = ahead.ring[ahead.decided % SPLIT_AHEAD];
        ahead.decided += 1;
        Some(record)
    }

    /// The slot of `record`'s key (`key`, from its read), as
    /// [`Keyed::slot_of`] finds it: the slot the index named ahead when no
    /// key has been forgotten since and it holds this key (the index is
    /// not probed twice), else looked up now (a key forgotten meanwhile may
    /// have left its slot to another, and a key first met ahead may have
    /// been remembered since).
    #[inline]
    pub(super) fn slot_of_looked(
        &mut self,
        record: &Looked,
        key: Option<&[u8]>,
        now: u64,
    ) -> Option<u32> {
        if let (Some(k), Some(s)) = (key, record.hint) {
            if record.forgotten == self.table.forgotten && self.table.slots[s as usize].key.is(k) {
                return Some(s);
            }
        }
        self.slot_of(key, record.hash, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `memchr`: every start in reads of every length up to 40,
    /// with the delimiter at any place (or none), beside bytes that differ
    /// from it by one bit and by the high bit.
    #[test]
    fn a_record_ends_where_memchr_finds_its_delimiter() {
        for delimiter in [b'\n', 0, 0x80, 0xff] {
            for len in 0..40 {
                for at in (0..len).map(Some).chain([None]) {
                    let data: Vec<u8> = (0..len)
                        .map(|i| match i {
                            _ if Some(i) == at => delimiter,
                            _ if i % 3 == 0 => delimiter ^ 0x80,
                            _ if i % 3 == 1 => delimiter ^ 1,
                            _ => b'a',
                        })
                        .collect();
                    for from in 0..len {
                        let want =
                            memchr::memchr(delimiter, &data[from..]).map_or(len, |i| from + i + 1);
                        assert_eq!(
                            record_end(&data, from, delimiter),
                            want,
                            "{delimiter} {len} {at:?} {from}"
                        );
                    }
                }
            }
        }
    }

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
