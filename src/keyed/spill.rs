//! Where waiting records are kept: each copied out of its read into a
//! chunk of [`CHUNK`] bytes, one after another, and each chunk used again
//! once none of its records waits. A waiting record never keeps its read
//! alive, costs no allocation of its own, and is no shared buffer: its
//! place is two numbers, and nothing is counted across threads (the
//! refcounts of shared buffers, touched by the reader as records waited
//! and by the writer as they were written, were a sixth of the time with
//! most records waiting). Records that leave are copied once more, all
//! those let go together into one buffer ([`Outgoing`]).
//!
//! Pure: no threads, no clock, no I/O.

use bytes::{Bytes, BytesMut};

use crate::bucket::Segment;

/// Bytes of one chunk.
pub(super) const CHUNK: usize = 4096;
/// Records over this many bytes have a chunk of their own, of their size.
const SHARED_UP_TO: usize = CHUNK / 8;
/// Empty chunks whose memory is kept for reuse, at most (256 KiB): the
/// rest give theirs back, so a burst of waiting records leaves no
/// lasting memory behind.
const KEEP_EMPTY: usize = 64;

/// Where a waiting record's bytes are.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    chunk: u32,
    at: u32,
}

/// One chunk: its records' bytes, back to back, and how many of them
/// still wait.
#[derive(Debug, Default)]
struct Chunk {
    bytes: Vec<u8>,
    waiting: u32,
}

/// The chunks of waiting records.
///
/// Invariant: a chunk's `waiting` counts the records copied into it and
/// not yet [`Spill::release`]d; a chunk with none waiting is `current`
/// (filled on) or in `kept` (its memory kept, emptied) or in `bare` (its
/// memory given back).
#[derive(Debug, Default)]
pub(super) struct Spill {
    chunks: Vec<Chunk>,
    /// The chunk records are copied into next, if any.
    current: Option<u32>,
    /// Empty chunks that kept their [`CHUNK`] bytes of memory.
    kept: Vec<u32>,
    /// Empty chunks without memory.
    bare: Vec<u32>,
}

impl Spill {
    /// Copy `record` in: where it is now.
    pub(super) fn copy(&mut self, record: &[u8]) -> Place {
        let size = record.len();
        if size > SHARED_UP_TO {
            let c = self.empty_chunk(false);
            let chunk = &mut self.chunks[c as usize];
            chunk.bytes = record.to_vec();
            chunk.waiting = 1;
            return Place { chunk: c, at: 0 };
        }
        let c = match self.current {
            Some(c) if CHUNK - self.chunks[c as usize].bytes.len() >= size => c,
            _ => {
                let c = self.empty_chunk(true);
                // The chunk filled before is let go when its last record
                // leaves.
                if let Some(old) = self.current.replace(c) {
                    if self.chunks[old as usize].waiting == 0 {
                        self.empty(old);
                    }
                }
                c
            }
        };
        let chunk = &mut self.chunks[c as usize];
        let at = chunk.bytes.len() as u32;
        chunk.bytes.extend_from_slice(record);
        chunk.waiting += 1;
        Place { chunk: c, at }
    }

    /// The `len` bytes of the record at `place`.
    #[inline]
    pub(super) fn bytes(&self, place: Place, len: usize) -> &[u8] {
        let at = place.at as usize;
        &self.chunks[place.chunk as usize].bytes[at..at + len]
    }

    /// Start fetching the first bytes of the record at `place`.
    #[inline]
    pub(super) fn prefetch(&self, place: Place) {
        let chunk = &self.chunks[place.chunk as usize].bytes;
        if let Some(first) = chunk.get(place.at as usize) {
            crate::sys::prefetch(first);
        }
    }

    /// The record at `place` waits no more: its chunk is used again once
    /// none of its records waits.
    #[inline]
    pub(super) fn release(&mut self, place: Place) {
        let chunk = &mut self.chunks[place.chunk as usize];
        chunk.waiting -= 1;
        if chunk.waiting > 0 {
            return;
        }
        if self.current == Some(place.chunk) {
            // Filled again from its start.
            chunk.bytes.clear();
        } else {
            self.empty(place.chunk);
        }
    }

    /// Chunk `c`, not `current`, holds no waiting record.
    fn empty(&mut self, c: u32) {
        let chunk = &mut self.chunks[c as usize];
        if chunk.bytes.capacity() == CHUNK && self.kept.len() < KEEP_EMPTY {
            chunk.bytes.clear();
            self.kept.push(c);
        } else {
            chunk.bytes = Vec::new();
            self.bare.push(c);
        }
    }

    /// An empty chunk, with [`CHUNK`] bytes of memory if `sized`.
    fn empty_chunk(&mut self, sized: bool) -> u32 {
        if sized {
            if let Some(c) = self.kept.pop() {
                return c;
            }
        }
        let c = self.bare.pop().unwrap_or_else(|| {
            self.chunks.push(Chunk::default());
            u32::try_from(self.chunks.len() - 1).expect("fewer than 2^32 chunks")
        });
        if sized {
            self.chunks[c as usize].bytes = Vec::with_capacity(CHUNK);
        }
        c
    }

    /// Bytes of memory the chunks hold.
    #[cfg(test)]
    fn memory(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes.capacity()).sum()
    }
}

/// Records let go together, copied one after another into one buffer,
/// to leave as one segment: one entry of the outbox, one piece of the
/// writer's write. Its `arrived` is the earliest of theirs.
#[derive(Debug)]
pub(super) struct Outgoing {
    buffer: BytesMut,
    records: usize,
    arrived: u64,
    delimiter: u8,
}

/// Bytes the outgoing buffer is grown by at least (many batches share
/// one allocation).
const OUTGOING_BLOCK: usize = 64 << 10;

impl Outgoing {
    pub(super) fn new(delimiter: u8) -> Outgoing {
        Outgoing {
            buffer: BytesMut::new(),
            records: 0,
            arrived: u64::MAX,
            delimiter,
        }
    }

    /// `record`, which arrived at `arrived` (ns), goes out after those
    /// added before; a record without its delimiter (an input's last)
    /// ends the segment, so no two records run together in it.
    #[inline]
    pub(super) fn add(&mut self, record: &[u8], arrived: u64, outbox: &mut Vec<Segment>) {
        self.add_run(record, 1, arrived, outbox);
    }

    /// The `count` records of `run`, back to back, which arrived at
    /// `arrived` (ns), go out after those added before (as
    /// [`Outgoing::add`]: only the last may lack its delimiter).
    #[inline]
    pub(super) fn add_run(
        &mut self,
        run: &[u8],
        count: usize,
        arrived: u64,
        outbox: &mut Vec<Segment>,
    ) {
        if self.buffer.capacity() - self.buffer.len() < run.len() {
            self.buffer.reserve(run.len().max(OUTGOING_BLOCK));
        }
        self.buffer.extend_from_slice(run);
        self.records += count;
        self.arrived = self.arrived.min(arrived);
        if run.last() != Some(&self.delimiter) {
            self.flush(outbox);
        }
    }

    /// The records added since the last flush, as one segment at the end
    /// of `outbox`.
    #[inline]
    pub(super) fn flush(&mut self, outbox: &mut Vec<Segment>) {
        if self.records == 0 {
            return;
        }
        let data: Bytes = self.buffer.split().freeze();
        let mut seg = Segment::counted(data, self.records, self.delimiter);
        seg.arrived = self.arrived;
        outbox.push(seg);
        self.records = 0;
        self.arrived = u64::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records copied in and released in any order come back intact, and
    /// the chunks are used again: the memory stays within the chunks the
    /// records waiting at once need, however many pass through.
    #[test]
    fn records_come_back_intact_and_chunks_are_used_again() {
        let mut spill = Spill::default();
        let mut waiting: Vec<(Place, Vec<u8>)> = Vec::new();
        let mut state = 7u64;
        let mut most_memory = 0;
        for i in 0..200_000u64 {
            // A few big records among many small ones.
            let size = if i % 997 == 0 {
                3000
            } else {
                1 + (i % 40) as usize
            };
            let record: Vec<u8> = (0..size).map(|j| (i as usize + j) as u8).collect();
            waiting.push((spill.copy(&record), record));
            // Release one at random most of the time: about 50 wait.
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if waiting.len() > 50 {
                let k = (state >> 33) as usize % waiting.len();
                let (place, record) = waiting.swap_remove(k);
                assert_eq!(spill.bytes(place, record.len()), &record[..], "record {i}");
                spill.release(place);
            }
            most_memory = most_memory.max(spill.memory());
        }
        // 50 records in at most 50 chunks, and the kept empty ones.
        assert!(
            most_memory <= (50 + KEEP_EMPTY + 1) * CHUNK,
            "{most_memory}"
        );
        for (place, record) in waiting.drain(..) {
            assert_eq!(spill.bytes(place, record.len()), &record[..]);
            spill.release(place);
        }
        assert!(spill.memory() <= (KEEP_EMPTY + 1) * CHUNK);
        assert!(spill.chunks.iter().all(|c| c.waiting == 0));
    }

    /// A chunk whose records all left is filled again from its start
    /// when it is the one being filled, else kept for the next.
    #[test]
    fn an_emptied_chunk_is_filled_again() {
        let mut spill = Spill::default();
        let a = spill.copy(b"a\n");
        spill.release(a);
        let b = spill.copy(b"b\n");
        assert_eq!((b.chunk, b.at), (a.chunk, 0));
        // Fill the chunk: the next record starts another; the first is
        // kept once its record leaves, and used for the one after.
        let big = vec![b'x'; SHARED_UP_TO];
        let mut places = vec![b];
        while places.last().unwrap().chunk == a.chunk {
            places.push(spill.copy(&big));
        }
        let other = places.pop().unwrap().chunk;
        for place in places {
            spill.release(place);
        }
        assert_eq!(spill.kept, vec![a.chunk]);
        while spill.copy(&big).chunk == other {}
        assert_eq!(spill.current, Some(a.chunk));
    }

    /// Records added together leave as one segment, in order, counted;
    /// one without its delimiter ends a segment.
    #[test]
    fn outgoing_records_leave_as_one_segment() {
        let mut out = Outgoing::new(b'\n');
        let mut outbox = Vec::new();
        out.add(b"k1 1\n", 30, &mut outbox);
        out.add(b"k2 1\n", 10, &mut outbox);
        out.add(b"k3 1\n", 20, &mut outbox);
        out.flush(&mut outbox);
        out.flush(&mut outbox);
        out.add(b"k1 2\n", 40, &mut outbox);
        out.add(b"last", 50, &mut outbox);
        out.add(b"k2 2\n", 60, &mut outbox);
        out.flush(&mut outbox);
        let segs: Vec<(Vec<&[u8]>, u64)> = outbox
            .iter()
            .map(|s| (s.records().collect(), s.arrived))
            .collect();
        assert_eq!(
            segs,
            vec![
                (vec![&b"k1 1\n"[..], b"k2 1\n", b"k3 1\n"], 10),
                (vec![&b"k1 2\n"[..], b"last"], 40),
                (vec![&b"k2 2\n"[..]], 60),
            ]
        );
        assert_eq!(outbox.iter().map(Segment::len).sum::<usize>(), 6);
    }
}
