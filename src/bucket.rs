//! The bucket: a bounded FIFO queue of records with an overflow policy.
//!
//! Records travel in [`Segment`]s: runs of records that were read together,
//! sharing one buffer, so a chunk of thousands of short lines costs one queue
//! entry and no per-record allocation. The bucket is pure data: no locks, no
//! clock, no I/O. Whatever leaves it other than by [`Bucket::take`] is handed
//! to a caller-supplied function with its [`Fate`], in the order it left, so
//! the caller can count it and write it to the dead letter.

use std::collections::VecDeque;
use std::str::FromStr;

use bytes::Bytes;

use crate::scan;

/// What happens when a record arrives at a full bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Stop accepting until there is room: the reader stops reading, so the
    /// producer waits (backpressure).
    Block,
    /// Discard the arriving record.
    DropNewest,
    /// Evict the oldest queued record to make room.
    DropOldest,
    /// Stop drip with exit status 3.
    Fail,
}

impl FromStr for Overflow {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "block" => Ok(Overflow::Block),
            "drop-newest" => Ok(Overflow::DropNewest),
            "drop-oldest" => Ok(Overflow::DropOldest),
            "fail" => Ok(Overflow::Fail),
            _ => Err(format!(
                "unknown policy '{text}' (expected block, drop-newest, drop-oldest or fail)"
            )),
        }
    }
}

/// The overflow policies, for completion and help: (value, meaning).
pub const POLICIES: &[(&str, &str)] = &[
    ("block", "stop reading until there is room (backpressure)"),
    ("drop-newest", "discard records arriving at a full bucket"),
    ("drop-oldest", "evict the oldest queued record to make room"),
    ("fail", "stop with status 3 at the first overflow"),
];

/// Why a record left the bucket without being written to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Arrived at a full bucket under `drop-newest`.
    DroppedNewest,
    /// Evicted from a full bucket under `drop-oldest`.
    DroppedOldest,
    /// Waited longer than `--max-wait`.
    Expired,
    /// Still queued (or being written) when drip stopped.
    Undelivered,
    /// Its job failed: attempts exhausted, or a final status (`--exec`).
    Failed,
}

/// Where a piece passed to an [`crate::input::OversizeSink`] stands in its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// More of the record follows.
    Part,
    /// The record ends here, with its delimiter.
    End,
    /// The record ends here, without a delimiter: its input ended (or
    /// reading stopped) first. Its reader adds one where records need it.
    EndUnterminated,
}

/// A run of consecutive records sharing one buffer.
///
/// `data` is the records' bytes, back to back, each ending in the
/// delimiter except perhaps the last (an input's unterminated last record).
/// Records are not indexed: they are counted when read, and found again
/// only where the run is cut (`scan`). Cloning and splitting share
/// the buffer (reference-counted), never copy bytes.
#[derive(Debug, Clone)]
pub struct Segment {
    data: Bytes,
    /// Number of records in `data` (a segment is at most a read and
    /// what a record adds to it: far fewer than 2^32 records; 4 bytes, so
    /// the place in the input fits beside it in one cache line).
    count: u32,
    delimiter: u8,
    /// Size of the buffer `data` is part of.
    buffer: usize,
    /// When the records entered the bucket (ns on drip's clock).
    pub arrived: u64,
    /// The place in the input of its first record (1-based, among the
    /// records the reader handed on, across the inputs in order; the
    /// records of a segment are consecutive in the input); 0 when not
    /// numbered. Splitting a segment keeps each part's number.
    pub number: u64,
}

impl Segment {
    /// The records in `data`, which end in `delimiter` (the last may lack
    /// it). Counts them: O(bytes).
    pub fn new(data: Bytes, delimiter: u8) -> Segment {
        let mut count = scan::count(&data, delimiter);
        if data.last().is_some_and(|&b| b != delimiter) {
            count += 1;
        }
        Segment::counted(data, count, delimiter)
    }

    /// Like [`Segment::new`] when the caller has counted the records.
    pub(crate) fn counted(data: Bytes, count: usize, delimiter: u8) -> Segment {
        debug_assert_eq!(
            count,
            scan::count(&data, delimiter)
                + usize::from(data.last().is_some_and(|&b| b != delimiter))
        );
        Segment {
            buffer: data.len(),
            data,
            count: u32::try_from(count).expect("fewer than 2^32 records in a segment"),
            delimiter,
            arrived: 0,
            number: 0,
        }
    }

    /// The number of the record `n` records after the first (0 when not
    /// numbered).
    fn number_after(&self, n: usize) -> u64 {
        if self.number == 0 {
            0
        } else {
            self.number + n as u64
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether it holds no records.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Total bytes of its records.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// All its records' bytes, contiguous.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Whether its last record lacks the delimiter (an input's
    /// unterminated last record).
    pub fn ends_unterminated(&self) -> bool {
        self.data.last().is_some_and(|&b| b != self.delimiter)
    }

    /// The byte that ends its records.
    pub fn delimiter(&self) -> u8 {
        self.delimiter
    }

    /// Iterate over the records, each with its delimiter (when present).
    pub fn records(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let delimiter = self.delimiter;
        self.data.split_inclusive(move |&b| b == delimiter)
    }

    /// The first record (its delimiter included), found with the SWAR
    /// scan; `None` when there is none.
    pub fn first_record(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| &self.data[..self.bytes_of_first(1)])
    }

    /// Bytes of the first `n` records (`n ≤ len`). O(those bytes).
    pub fn bytes_of_first(&self, n: usize) -> usize {
        if n == 0 {
            0
        } else if n >= self.len() {
            self.data.len()
        } else {
            scan::nth(&self.data, self.delimiter, n - 1).expect("n < count") + 1
        }
    }

    /// How many whole records fit in the first `bytes` bytes.
    pub fn records_within(&self, bytes: usize) -> usize {
        if bytes >= self.data.len() {
            self.len()
        } else {
            scan::count(&self.data[..bytes], self.delimiter)
        }
    }

    /// How many records start at or after byte `offset`.
    pub fn records_from(&self, offset: usize) -> usize {
        if offset == 0 {
            self.len()
        } else if offset > self.data.len() {
            0
        } else {
            // Records start at 0 and after each delimiter but the last byte.
            self.len() - 1 - scan::count(&self.data[..offset - 1], self.delimiter)
        }
    }

    /// The rest of a one-record segment whose first `offset` bytes were
    /// written (`0 < offset < bytes()`): still one record.
    pub fn rest_after(&self, offset: usize) -> Segment {
        assert!(self.count == 1 && offset > 0 && offset < self.data.len());
        Segment {
            data: self.data.slice(offset..),
            ..self.clone()
        }
    }

    /// Copy the live records into a buffer of their own when they use less
    /// than half of the shared one, so a few queued records never keep a
    /// large buffer alive.
    fn compact(&mut self) {
        if self.data.len() * 2 >= self.buffer {
            return;
        }
        self.data = Bytes::copy_from_slice(&self.data);
        self.buffer = self.data.len();
    }

    /// Split off and return the first `count` records, which the caller
    /// knows to be the first `bytes` bytes: O(1).
    pub(crate) fn split_known(&mut self, bytes: usize, count: usize) -> Segment {
        debug_assert!(count <= self.len() && bytes <= self.data.len());
        let front = Segment {
            data: self.data.slice(..bytes),
            count: count as u32,
            ..*self
        };
        self.data = self.data.slice(bytes..);
        self.count -= count as u32;
        self.number = self.number_after(count);
        front
    }

    /// Pass over the first `count` records, which the caller knows to be
    /// the first `bytes` bytes: O(1), and unlike
    /// [`Segment::split_known`] it touches no count of the buffer's
    /// holders.
    pub(crate) fn skip_known(&mut self, bytes: usize, count: usize) {
        debug_assert!(count <= self.len() && bytes <= self.data.len());
        bytes::Buf::advance(&mut self.data, bytes);
        self.count -= count as u32;
        self.number = self.number_after(count);
    }

    /// Split off and return the first `n` records (`n ≤ len`).
    pub fn split_front(&mut self, n: usize) -> Segment {
        assert!(n <= self.len());
        self.split_known(self.bytes_of_first(n), n)
    }
}

/// Where a record offered to the bucket went, for the caller.
#[derive(Debug)]
pub enum Offered {
    /// Every record was accepted or disposed of by the policy.
    Done,
    /// Under `block`: these records did not fit; offer them again when room
    /// has been made.
    Wait(Segment),
    /// Under `fail`: the bucket was full. The records that fit were queued;
    /// these did not, the first of them being the one that overflowed.
    Overflowed(Segment),
}

/// A bounded FIFO queue of records, by count and optionally by bytes.
#[derive(Debug)]
pub struct Bucket {
    queue: VecDeque<Segment>,
    len: usize,
    bytes: usize,
    capacity: usize,
    capacity_bytes: usize,
    policy: Overflow,
    max_depth: usize,
}

impl Bucket {
    /// A bucket holding at most `capacity` (≥ 1) records and, when given,
    /// at most `capacity_bytes` bytes.
    pub fn new(capacity: usize, capacity_bytes: Option<usize>, policy: Overflow) -> Bucket {
        assert!(capacity >= 1);
        Bucket {
            queue: VecDeque::new(),
            len: 0,
            bytes: 0,
            capacity,
            capacity_bytes: capacity_bytes.unwrap_or(usize::MAX),
            policy,
            max_depth: 0,
        }
    }

    /// Records queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The overflow policy.
    pub fn policy(&self) -> Overflow {
        self.policy
    }

    /// The most bytes it holds (`usize::MAX` when unbounded).
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// The most records it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The most records ever queued at once.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Arrival time (ns) of the oldest queued record.
    pub fn oldest_arrival(&self) -> Option<u64> {
        self.queue.front().map(|s| s.arrived)
    }

    /// The oldest queued record, delimiter included.
    pub fn front_record(&self) -> Option<&[u8]> {
        self.queue.front().and_then(|s| s.records().next())
    }

    /// The queued records, oldest first, delimiters included. O(bytes) as
    /// far as it is read.
    pub fn records(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.queue.iter().flat_map(Segment::records)
    }

    /// How many leading records of `seg` fit in the free room.
    fn fitting(&self, seg: &Segment) -> usize {
        let by_count = (self.capacity - self.len).min(seg.len());
        if self.capacity_bytes == usize::MAX {
            return by_count;
        }
        let room = self.capacity_bytes.saturating_sub(self.bytes);
        seg.records_within(room).min(by_count)
    }

    fn push(&mut self, mut seg: Segment) {
        if seg.is_empty() {
            return;
        }
        seg.compact();
        self.len += seg.len();
        self.bytes += seg.bytes();
        self.max_depth = self.max_depth.max(self.len);
        self.queue.push_back(seg);
    }

    /// Remove the first `n` records from the front, returned in order.
    fn pop_front(&mut self, mut n: usize, out: &mut impl FnMut(Segment)) {
        while n > 0 {
            let Some(front) = self.queue.front_mut() else {
                return;
            };
            let seg = if front.len() <= n {
                self.queue.pop_front().expect("front exists")
            } else {
                front.split_front(n)
            };
            n -= seg.len();
            self.len -= seg.len();
            self.bytes -= seg.bytes();
            out(seg);
        }
    }

    /// Whether a record of `size` bytes fits in the free room.
    pub fn has_room(&self, size: usize) -> bool {
        self.len < self.capacity && self.bytes.saturating_add(size) <= self.capacity_bytes
    }

    /// Evict the `n` oldest records (at most all), passing them to
    /// `dispose` in order as `fate`.
    pub fn evict(&mut self, n: usize, fate: Fate, dispose: &mut impl FnMut(Segment, Fate)) {
        self.pop_front(n, &mut |s| dispose(s, fate));
    }

    /// Offer the records of `seg` (arrived at `now`) to the bucket; records
    /// disposed of by the policy are passed to `dispose` in the order they
    /// leave. Every record in `seg` must be no larger than `capacity_bytes`.
    pub fn offer(
        &mut self,
        seg: Segment,
        now: u64,
        dispose: &mut impl FnMut(Segment, Fate),
    ) -> Offered {
        self.offer_as(self.policy, seg, now, dispose)
    }

    /// [`Bucket::offer`] under `policy` instead of the bucket's own.
    pub fn offer_as(
        &mut self,
        policy: Overflow,
        mut seg: Segment,
        now: u64,
        dispose: &mut impl FnMut(Segment, Fate),
    ) -> Offered {
        seg.arrived = now;
        let fit = self.fitting(&seg);
        if fit == seg.len() {
            self.push(seg);
            return Offered::Done;
        }
        match policy {
            Overflow::Block => {
                self.push(seg.split_front(fit));
                Offered::Wait(seg)
            }
            Overflow::Fail => {
                self.push(seg.split_front(fit));
                Offered::Overflowed(seg)
            }
            Overflow::DropNewest => {
                self.push(seg.split_front(fit));
                // Each record is decided alone: under a byte bound, a
                // smaller record after a dropped one may still fit.
                while !seg.is_empty() {
                    if self.len == self.capacity || self.capacity_bytes == usize::MAX {
                        dispose(seg, Fate::DroppedNewest);
                        break;
                    }
                    dispose(seg.split_front(1), Fate::DroppedNewest);
                    let fit = self.fitting(&seg);
                    self.push(seg.split_front(fit));
                }
                Offered::Done
            }
            Overflow::DropOldest => {
                // Records beyond what an empty bucket could hold would be
                // evicted right after entering: evict the queue first, then
                // the leading part of the incoming run.
                // What stays is the longest suffix of queue + arrivals that
                // fits, as if the records had arrived one at a time.
                let keep = self.keepable_tail(&seg);
                let incoming_evicted = seg.len() - keep;
                let evict_queued = if incoming_evicted > 0 {
                    self.len
                } else {
                    self.evictions_needed(&seg)
                };
                self.pop_front(evict_queued, &mut |s| dispose(s, Fate::DroppedOldest));
                if incoming_evicted > 0 {
                    dispose(seg.split_front(incoming_evicted), Fate::DroppedOldest);
                }
                self.push(seg);
                Offered::Done
            }
        }
    }

    /// How many trailing records of `seg` an empty bucket could hold.
    fn keepable_tail(&self, seg: &Segment) -> usize {
        let keep = seg.len().min(self.capacity);
        if self.capacity_bytes == usize::MAX {
            return keep;
        }
        let excess = seg.bytes().saturating_sub(self.capacity_bytes);
        keep.min(seg.records_from(excess))
    }

    /// How many queued records must go, oldest first, so all of `seg` fits.
    fn evictions_needed(&self, seg: &Segment) -> usize {
        let by_count = (self.len + seg.len()).saturating_sub(self.capacity);
        if self.capacity_bytes == usize::MAX {
            return by_count;
        }
        let excess = (self.bytes + seg.bytes()).saturating_sub(self.capacity_bytes);
        // Count whole records from the front until `excess` bytes are freed.
        let mut n = 0;
        let mut freed = 0;
        for r in self.queue.iter().flat_map(Segment::records) {
            if freed >= excess {
                break;
            }
            freed += r.len();
            n += 1;
        }
        n.max(by_count)
    }

    /// Take the first `n` records for writing, appended to `out` in order.
    pub fn take(&mut self, n: usize, out: &mut Vec<Segment>) {
        self.pop_front(n, &mut |s| out.push(s));
    }

    /// Expire records that arrived before `cutoff` (ns), oldest first.
    /// Returns how many expired.
    pub fn expire_before(&mut self, cutoff: u64, dispose: &mut impl FnMut(Segment, Fate)) -> usize {
        let mut n = 0;
        while let Some(front) = self.queue.front() {
            if front.arrived >= cutoff {
                break;
            }
            let seg = self.queue.pop_front().expect("front exists");
            self.len -= seg.len();
            self.bytes -= seg.bytes();
            n += seg.len();
            dispose(seg, Fate::Expired);
        }
        n
    }

    /// Empty the bucket, passing everything to `dispose` as `fate`.
    pub fn drain(&mut self, fate: Fate, dispose: &mut impl FnMut(Segment, Fate)) {
        let n = self.len;
        self.pop_front(n, &mut |s| dispose(s, fate));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment of newline records "0\n", "1\n", … numbered from `first`.
    fn seg(first: usize, n: usize) -> Segment {
        let mut data = Vec::new();
        for i in first..first + n {
            data.extend_from_slice(format!("{i}\n").as_bytes());
        }
        Segment::new(Bytes::from(data), b'\n')
    }

    fn numbers(segs: &[Segment]) -> Vec<usize> {
        segs.iter()
            .flat_map(|s| {
                s.records()
                    .map(|r| {
                        std::str::from_utf8(&r[..r.len() - 1])
                            .unwrap()
                            .parse()
                            .unwrap()
                    })
                    .collect::<Vec<usize>>()
            })
            .collect()
    }

    fn offer(b: &mut Bucket, s: Segment, dead: &mut Vec<(Segment, Fate)>) -> Offered {
        b.offer(s, 0, &mut |s, f| dead.push((s, f)))
    }

    fn all(b: &mut Bucket) -> Vec<usize> {
        let mut out = Vec::new();
        b.take(b.len(), &mut out);
        numbers(&out)
    }

    #[test]
    fn a_segment_fits_in_a_cache_line() {
        assert!(std::mem::size_of::<Segment>() <= 64);
    }

    #[test]
    fn each_part_of_a_split_keeps_its_place_in_the_input() {
        let mut s = seg(0, 6);
        s.number = 41;
        let front = s.split_front(2);
        assert_eq!((front.number, s.number), (41, 43));
        let next = s.split_known(2, 1);
        assert_eq!((next.number, s.number), (43, 44));
        s.skip_known(2, 1);
        assert_eq!(s.number, 45);
        // Not numbered: stays so.
        let mut plain = seg(0, 3);
        assert_eq!((plain.split_front(1).number, plain.number), (0, 0));
    }

    #[test]
    fn segments_split_without_copying() {
        let mut s = seg(0, 5);
        assert_eq!(s.len(), 5);
        assert_eq!(s.bytes(), 10);
        let front = s.split_front(2);
        assert_eq!(front.as_bytes(), b"0\n1\n");
        assert_eq!(s.as_bytes(), b"2\n3\n4\n");
        assert_eq!(s.records().nth(1), Some(&b"3\n"[..]));
        assert_eq!(s.records_within(5), 2);
        assert_eq!(s.records_within(6), 3);
        assert_eq!(s.bytes_of_first(2), 4);
        for (offset, n) in [
            (0, 3),
            (1, 2),
            (2, 2),
            (3, 1),
            (4, 1),
            (5, 0),
            (6, 0),
            (7, 0),
        ] {
            assert_eq!(s.records_from(offset), n, "from {offset}");
        }
        let open = Segment::new(Bytes::from_static(b"a\n\nb"), b'\n');
        assert_eq!(open.len(), 3, "an unterminated last record counts");
        assert_eq!(
            open.records().collect::<Vec<_>>(),
            [&b"a\n"[..], b"\n", b"b"]
        );
        assert_eq!(open.bytes_of_first(2), 3);
        assert_eq!(open.records_from(3), 1);
        assert_eq!(open.first_record(), Some(&b"a\n"[..]));
        let last = Segment::new(Bytes::from_static(b"bcd"), b'\n');
        assert_eq!(last.first_record(), Some(&b"bcd"[..]));
        assert_eq!(Segment::new(Bytes::new(), b'\n').first_record(), None);
        assert_eq!(seg(10, 3).first_record(), Some(&b"10\n"[..]));
    }

    #[test]
    fn queued_parts_do_not_pin_large_buffers() {
        let mut s = seg(0, 100);
        let mut front = s.split_front(3);
        front.compact();
        assert_eq!(front.buffer, front.bytes());
        assert_eq!(numbers(&[front]), vec![0, 1, 2]);
        let mut whole = seg(0, 4);
        let before = whole.data.as_ptr();
        whole.compact();
        assert_eq!(whole.data.as_ptr(), before, "no copy when mostly live");
    }

    #[test]
    fn block_accepts_what_fits_and_returns_the_rest() {
        let mut b = Bucket::new(3, None, Overflow::Block);
        let mut dead = Vec::new();
        match offer(&mut b, seg(0, 5), &mut dead) {
            Offered::Wait(rest) => assert_eq!(numbers(&[rest]), vec![3, 4]),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.len(), 3);
        assert!(dead.is_empty());
        assert_eq!(all(&mut b), vec![0, 1, 2]);
    }

    #[test]
    fn drop_newest_discards_arrivals() {
        let mut b = Bucket::new(3, None, Overflow::DropNewest);
        let mut dead = Vec::new();
        offer(&mut b, seg(0, 2), &mut dead);
        offer(&mut b, seg(2, 3), &mut dead);
        assert_eq!(all(&mut b), vec![0, 1, 2]);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].1, Fate::DroppedNewest);
        assert_eq!(numbers(&[dead[0].0.clone()]), vec![3, 4]);
    }

    #[test]
    fn drop_oldest_evicts_in_order() {
        let mut b = Bucket::new(3, None, Overflow::DropOldest);
        let mut dead = Vec::new();
        offer(&mut b, seg(0, 2), &mut dead);
        offer(&mut b, seg(2, 6), &mut dead); // 8 records, 3 stay
        assert_eq!(all(&mut b), vec![5, 6, 7]);
        let evicted: Vec<usize> = dead
            .iter()
            .inspect(|(_, f)| assert_eq!(*f, Fate::DroppedOldest))
            .flat_map(|(s, _)| numbers(std::slice::from_ref(s)))
            .collect();
        assert_eq!(evicted, vec![0, 1, 2, 3, 4]);
        assert_eq!(b.max_depth(), 3);
    }

    #[test]
    fn drop_oldest_by_bytes_evicts_the_queue_before_newer_arrivals() {
        // Queue: "0\n" (2 bytes). Arriving: 10, 11, 12 (3 bytes each) with
        // room for 7 bytes: one at a time, 0 goes, then 10; 11 and 12 stay.
        let mut b = Bucket::new(100, Some(7), Overflow::DropOldest);
        let mut dead = Vec::new();
        offer(&mut b, seg(0, 1), &mut dead);
        offer(&mut b, seg(10, 3), &mut dead);
        let evicted: Vec<usize> = dead
            .iter()
            .flat_map(|(s, _)| numbers(std::slice::from_ref(s)))
            .collect();
        assert_eq!(evicted, vec![0, 10]);
        assert_eq!(all(&mut b), vec![11, 12]);
    }

    #[test]
    fn fail_reports_the_overflowing_records() {
        let mut b = Bucket::new(2, None, Overflow::Fail);
        let mut dead = Vec::new();
        match offer(&mut b, seg(0, 3), &mut dead) {
            Offered::Overflowed(rest) => assert_eq!(numbers(&[rest]), vec![2]),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn byte_capacity_bounds_the_bucket() {
        // Records are 2 bytes (0..9) or 3 bytes (10..); 7 bytes hold 3 small.
        let mut b = Bucket::new(100, Some(7), Overflow::Block);
        let mut dead = Vec::new();
        match offer(&mut b, seg(0, 5), &mut dead) {
            Offered::Wait(rest) => assert_eq!(rest.len(), 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.bytes(), 6);
        let mut b = Bucket::new(100, Some(7), Overflow::DropOldest);
        offer(&mut b, seg(0, 3), &mut dead);
        offer(&mut b, seg(10, 1), &mut dead); // 3 bytes: evict 1 two-byte record
        assert_eq!(b.bytes(), 7);
        assert_eq!(all(&mut b), vec![1, 2, 10]);
    }

    #[test]
    fn expiry_takes_old_records_from_the_front() {
        let mut b = Bucket::new(10, None, Overflow::Block);
        let mut dead = Vec::new();
        b.offer(seg(0, 2), 100, &mut |s, f| dead.push((s, f)));
        b.offer(seg(2, 2), 200, &mut |s, f| dead.push((s, f)));
        assert_eq!(b.oldest_arrival(), Some(100));
        assert_eq!(b.expire_before(150, &mut |s, f| dead.push((s, f))), 2);
        assert_eq!(dead[0].1, Fate::Expired);
        assert_eq!(all(&mut b), vec![2, 3]);
    }

    #[test]
    fn take_splits_segments() {
        let mut b = Bucket::new(10, None, Overflow::Block);
        let mut dead = Vec::new();
        offer(&mut b, seg(0, 4), &mut dead);
        let mut out = Vec::new();
        b.take(3, &mut out);
        assert_eq!(numbers(&out), vec![0, 1, 2]);
        assert_eq!(b.len(), 1);
        assert_eq!(b.bytes(), 2);
    }

    #[test]
    fn parses_policies() {
        assert_eq!("drop-oldest".parse(), Ok(Overflow::DropOldest));
        assert!("drop".parse::<Overflow>().is_err());
    }
}
