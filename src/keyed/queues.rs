//! The per-key queues: each key's waiting records in a list of nodes,
//! in input order; what waits when the bucket or a key's queue is full
//! (the overflow policies); the oldest waiting record of all (expiry) and
//! the key holding the most (`drop-oldest`'s victim).
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::cmp::Reverse;
use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;

use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::ledger::Ledger;

use super::spill::{Outgoing, Place, Spill};
use super::table::Slot;
use super::{Keyed, Lane, NoRoom, NIL};

/// A waiting record (its bytes in the [`Spill`](super::spill::Spill)) and
/// the next of its key: 32 bytes, two to a cache line. Its number in
/// arrival order is kept apart (`Keyed::seqs`), where looking through the
/// arrivals reads only those.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node {
    pub(super) place: Place,
    pub(super) len: usize,
    /// When it arrived (ns).
    pub(super) arrived: u64,
    pub(super) next: u32,
    /// Its key's slot.
    pub(super) key: u32,
}

const _: () = assert!(std::mem::size_of::<Node>() == 32);

/// The waiting records, each key's in its queue, within the bounds.
#[derive(Debug)]
pub(super) struct Queues {
    pub(super) nodes: Vec<Node>,
    /// Each node's record's number in arrival order (`seq`), 0 when it
    /// holds none: what tells a live entry of `arrivals` from one gone.
    pub(super) seqs: Vec<u64>,
    pub(super) free_nodes: Vec<u32>,
    /// Where waiting records are copied out of their reads.
    pub(super) spill: Spill,
    /// Records let go and not yet in the outbox.
    pub(super) outgoing: Outgoing,
    /// Each record that waited leaves as a segment of its own, carrying
    /// its arrival and its place in the input ([`Keyed::records_apart`]).
    pub(super) apart: bool,
    /// With records apart: each waiting record's place in the input
    /// ([`Segment::number`]), by its node's index (kept beside the nodes,
    /// so a node is no larger without it).
    pub(super) numbers: Vec<u64>,
    /// Waiting records in arrival order, (seq, node), some of them gone
    /// since (see [`Keyed::is_waiting`]): the front is always waiting.
    pub(super) arrivals: VecDeque<(u64, u32)>,
    /// Keys with records waiting.
    pub(super) busy: usize,
    /// Busy keys by records waiting: (len, oldest head first, key); kept
    /// only once `drop-oldest` has had to choose (`fat_kept`).
    pub(super) fat: BTreeSet<(u32, Reverse<u64>, u32)>,
    /// Whether `fat` is kept.
    pub(super) fat_kept: bool,
    /// Records waiting, in all keys.
    pub(super) len: usize,
    /// Bytes waiting, in all keys.
    pub(super) bytes: usize,
    /// The most records that ever waited at once.
    pub(super) max_depth: usize,
    /// The latest waiting record's number in arrival order.
    pub(super) seq: u64,
    /// The longest any record that left waited, ns.
    pub(super) longest_wait_ns: u64,
    /// Records that may wait, all keys together.
    pub(super) capacity: usize,
    /// Bytes that may wait, all keys together (`usize::MAX`: unbounded).
    pub(super) capacity_bytes: usize,
    /// Records one key may have waiting.
    pub(super) key_capacity: usize,
    /// The overflow policy (the bucket's: `Keyed::overflowing`).
    pub(super) policy: Overflow,
    /// Why the latest record handed back under `fail` found no room.
    pub(super) no_room: NoRoom,
    /// What ends a record.
    delimiter: u8,
}

impl Queues {
    /// Empty queues holding at most `capacity` records and
    /// `capacity_bytes` bytes, `key_capacity` records a key; records end
    /// in `delimiter`.
    pub(super) fn new(
        capacity: usize,
        capacity_bytes: Option<usize>,
        key_capacity: usize,
        delimiter: u8,
    ) -> Queues {
        Queues {
            nodes: Vec::new(),
            seqs: Vec::new(),
            free_nodes: Vec::new(),
            spill: Spill::default(),
            outgoing: Outgoing::new(delimiter),
            apart: false,
            numbers: Vec::new(),
            arrivals: VecDeque::new(),
            busy: 0,
            fat: BTreeSet::new(),
            fat_kept: false,
            len: 0,
            bytes: 0,
            max_depth: 0,
            seq: 0,
            longest_wait_ns: 0,
            capacity,
            capacity_bytes: capacity_bytes.unwrap_or(usize::MAX),
            key_capacity,
            policy: Overflow::Block,
            no_room: NoRoom::Bucket,
            delimiter,
        }
    }

    /// Whether `size` more bytes and one more record would overflow the
    /// bucket.
    #[inline]
    pub(super) fn full(&self, size: usize) -> bool {
        self.len >= self.capacity || self.bytes + size > self.capacity_bytes
    }
}

impl Keyed {
    /// The record at the front of `seg` (`size` bytes), of key `slot`
    /// (`None`: a new key and no idle one), waits or meets `policy`.
    /// Returns what `block` or `fail` hands back.
    pub(super) fn wait(
        &mut self,
        now: u64,
        slot: Option<u32>,
        seg: &mut Segment,
        size: usize,
        policy: Overflow,
        ledger: &mut Ledger,
    ) -> Option<Offered> {
        let key_full = slot.map_or(true, |s| {
            self.table.slots[s as usize].len as usize >= self.queues.key_capacity
        });
        let full = self.queues.full(size);
        if key_full || full {
            match policy {
                Overflow::Block => {
                    self.line.blocked_on_keys = slot.is_none();
                    return Some(Offered::Wait(seg.clone()));
                }
                Overflow::Fail => {
                    self.queues.no_room = if full {
                        NoRoom::Bucket
                    } else if slot.is_none() {
                        NoRoom::Keys
                    } else {
                        NoRoom::Key
                    };
                    return Some(Offered::Overflowed(seg.clone()));
                }
                _ => {}
            }
        }
        ledger.read(1);
        let Some(s) = slot else {
            self.table.dropped_unremembered();
            ledger.dispose(seg.split_known(size, 1), Fate::DroppedNewest);
            return None;
        };
        if key_full || full {
            if policy == Overflow::DropNewest {
                self.table.dropped(s);
                ledger.dispose(seg.split_known(size, 1), Fate::DroppedNewest);
                return None;
            }
            if key_full {
                self.evict(s, Fate::DroppedOldest, ledger);
            }
            if self.queues.full(size) {
                self.queues.keep_fat(&self.table.slots);
            }
            while self.queues.full(size) {
                let Some(&(_, _, fattest)) = self.queues.fat.last() else {
                    break;
                };
                self.evict(fattest, Fate::DroppedOldest, ledger);
            }
        }
        // Copied straight from the read, which is then passed over: no
        // slice of the read is made (its count is shared with the writer).
        let place = self.queues.spill.copy(&seg.as_bytes()[..size]);
        let number = seg.number;
        seg.skip_known(size, 1);
        let record = Spilled {
            place,
            len: size,
            number,
        };
        self.enqueue(now, s, record);
        None
    }

    /// Drop the oldest waiting record of key `s` as `fate`.
    pub(super) fn evict(&mut self, s: u32, fate: Fate, ledger: &mut Ledger) {
        if let Some(seg) = self.pop_head(s) {
            self.table.dropped(s);
            ledger.dispose(seg, fate);
        }
    }

    /// Put `record` (arrived at `now`) at the end of key `s`'s queue; the
    /// key joins the line if it was not in it.
    pub(super) fn enqueue(&mut self, now: u64, s: u32, record: Spilled) {
        let slot = &mut self.table.slots[s as usize];
        self.queues.push(slot, s, now, record);
        if slot.lane == Lane::Idle {
            self.join_line(s, now);
        }
    }

    /// The bytes of key `s`'s head (`s` has records waiting).
    #[inline]
    pub(super) fn head_record(&self, s: u32) -> &[u8] {
        self.queues.head_record(&self.table.slots[s as usize])
    }

    /// Take key `s`'s head out of its queue, as a segment of its own.
    pub(super) fn pop_head(&mut self, s: u32) -> Option<Segment> {
        self.queues.pop_head(&mut self.table.slots[s as usize], s)
    }

    /// Key `s`'s head leaves at `now` (see [`Queues::send_head`]).
    pub(super) fn send_head(&mut self, s: u32, now: u64, outbox: &mut Vec<Segment>) {
        self.queues
            .send_head(&mut self.table.slots[s as usize], s, now, outbox);
    }

    /// Expire records that arrived before `cutoff` (ns), oldest first, in
    /// every key. Returns how many expired.
    pub fn expire_before(&mut self, cutoff: u64, ledger: &mut Ledger) -> usize {
        let mut n = 0;
        while let Some((s, arrived)) = self.queues.oldest() {
            if arrived >= cutoff {
                break;
            }
            self.evict(s, Fate::Expired, ledger);
            if self.pacing.is_shared() {
                self.expired_shared(s);
            }
            n += 1;
        }
        n
    }

    /// Every waiting record, oldest first, as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        while let Some((s, _)) = self.queues.oldest() {
            let seg = self.pop_head(s).expect("a waiting record");
            ledger.dispose(seg, fate);
        }
    }
}

/// A record copied into the spill to wait in its key's queue: where it
/// is (`place`), its length in bytes, and its place in the input
/// (`number`, from 1).
#[derive(Debug, Clone, Copy)]
pub(super) struct Spilled {
    pub(super) place: Place,
    pub(super) len: usize,
    pub(super) number: u64,
}

impl Queues {
    /// Put `record` (arrived at `now`) at the end of the queue of key `s`,
    /// whose slot is `slot`.
    pub(super) fn push(&mut self, slot: &mut Slot, s: u32, now: u64, record: Spilled) {
        let Spilled { place, len, number } = record;
        self.seq += 1;
        let node = Node {
            place,
            len,
            arrived: now,
            next: NIL,
            key: s,
        };
        self.len += 1;
        self.bytes += len;
        self.max_depth = self.max_depth.max(self.len);
        let n = match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                self.seqs[n as usize] = self.seq;
                n
            }
            None => {
                self.nodes.push(node);
                self.seqs.push(self.seq);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 records")
            }
        };
        if self.apart {
            if self.numbers.len() < self.nodes.len() {
                self.numbers.resize(self.nodes.len(), 0);
            }
            self.numbers[n as usize] = number;
        }
        self.unindex(slot, s);
        if slot.len == 0 {
            slot.head = n;
            self.busy += 1;
        } else {
            self.nodes[slot.tail as usize].next = n;
        }
        slot.tail = n;
        slot.len += 1;
        if self.arrivals.len() >= 2 * self.len + 64 {
            self.compact_arrivals();
        }
        self.arrivals.push_back((self.seq, n));
        self.index(slot, s);
    }

    /// The bytes of waiting record `node`.
    #[inline]
    pub(super) fn record(&self, node: &Node) -> &[u8] {
        self.spill.bytes(node.place, node.len)
    }

    /// The bytes of the head of the queue of `slot` (it has records
    /// waiting).
    #[inline]
    pub(super) fn head_record(&self, slot: &Slot) -> &[u8] {
        self.record(&self.nodes[slot.head as usize])
    }

    /// Take the head of key `s`'s queue (its slot `slot`) out, as a segment
    /// of its own.
    pub(super) fn pop_head(&mut self, slot: &mut Slot, s: u32) -> Option<Segment> {
        let head = slot.head as usize;
        let node = self.unlink_head(slot, s)?;
        let bytes = Bytes::copy_from_slice(self.record(&node));
        self.spill.release(node.place);
        let mut seg = Segment::counted(bytes, 1, self.delimiter);
        seg.arrived = node.arrived;
        seg.number = self.numbers.get(head).copied().unwrap_or(0);
        Some(seg)
    }

    /// The head of key `s`'s queue (its slot `slot`) leaves at `now`: with
    /// the records let go with it (`outgoing`), or, records apart, as a
    /// segment of its own into `outbox`.
    pub(super) fn send_head(
        &mut self,
        slot: &mut Slot,
        s: u32,
        now: u64,
        outbox: &mut Vec<Segment>,
    ) {
        let arrived = if self.apart {
            // After what left before it.
            self.outgoing.flush(outbox);
            let seg = self.pop_head(slot, s).expect("a waiting record");
            let arrived = seg.arrived;
            outbox.push(seg);
            arrived
        } else {
            let node = self.unlink_head(slot, s).expect("a waiting record");
            let record = self.spill.bytes(node.place, node.len);
            self.outgoing.add(record, node.arrived, outbox);
            self.spill.release(node.place);
            node.arrived
        };
        self.longest_wait_ns = self.longest_wait_ns.max(now.saturating_sub(arrived));
    }

    /// Take the head of key `s`'s queue (its slot `slot`) out; its bytes
    /// stay in the spill until released.
    fn unlink_head(&mut self, slot: &mut Slot, s: u32) -> Option<Node> {
        if slot.len == 0 {
            return None;
        }
        let n = slot.head;
        let node = self.nodes[n as usize];
        // Out of `fat` while the head still holds the seq its entry names.
        self.unindex(slot, s);
        // No longer the record its entry in `arrivals` names.
        self.seqs[n as usize] = 0;
        self.free_nodes.push(n);
        self.len -= 1;
        self.bytes -= node.len;
        slot.len -= 1;
        slot.head = node.next;
        if slot.len == 0 {
            self.busy -= 1;
        }
        self.index(slot, s);
        self.prune_arrivals();
        Some(node)
    }

    /// Whether the record `seq` in node `n` (an entry of `arrivals`)
    /// still waits: a node that let its record go holds another's, or
    /// none (seq 0; records count from 1).
    #[inline]
    fn is_waiting(&self, seq: u64, n: u32) -> bool {
        self.seqs[n as usize] == seq
    }

    /// After a record left: drop the gone from the front of `arrivals`,
    /// all of them at once when none waits. The gone in its middle are
    /// dropped as a record joins and they outnumber the waiting
    /// ([`Queues::push`]), not as records leave: a release that lets
    /// most of the waiting go would look through the arrivals again each
    /// time it halves them. So right after a record joins, `arrivals`
    /// holds at most twice the records waiting and a little, and never
    /// more than that of the most records that waited at once.
    fn prune_arrivals(&mut self) {
        if self.len == 0 {
            self.arrivals.clear();
            return;
        }
        while let Some(&(seq, n)) = self.arrivals.front() {
            if self.is_waiting(seq, n) {
                break;
            }
            self.arrivals.pop_front();
        }
    }

    /// Keep only the waiting records' entries of `arrivals`, fetching
    /// their numbers a few entries ahead (each may be a cache miss of its
    /// own).
    #[cold]
    fn compact_arrivals(&mut self) {
        const AHEAD: usize = 16;
        let arrivals = std::mem::take(&mut self.arrivals);
        let mut kept = VecDeque::with_capacity(self.len + 64);
        for (i, &(seq, n)) in arrivals.iter().enumerate() {
            if let Some(&(_, far)) = arrivals.get(i + AHEAD) {
                crate::sys::prefetch(&self.seqs[far as usize]);
            }
            if self.is_waiting(seq, n) {
                kept.push_back((seq, n));
            }
        }
        self.arrivals = kept;
    }

    /// The oldest waiting record's key and arrival (ns).
    pub(super) fn oldest(&self) -> Option<(u32, u64)> {
        let &(_, n) = self.arrivals.front()?;
        let node = &self.nodes[n as usize];
        Some((node.key, node.arrived))
    }

    /// From now on, keep `fat` (`drop-oldest`'s choice of the key that
    /// pays) over the keys' `slots`: it costs two tree updates a record,
    /// spent only once the bucket overflows under `drop-oldest`.
    #[cold]
    pub(super) fn keep_fat(&mut self, slots: &[Slot]) {
        if self.fat_kept {
            return;
        }
        self.fat_kept = true;
        for (s, slot) in slots.iter().enumerate() {
            self.index(slot, s as u32);
        }
    }

    /// Take key `s` (its slot `slot`) out of `fat` before its queue
    /// changes.
    #[inline(always)]
    fn unindex(&mut self, slot: &Slot, s: u32) {
        if self.fat_kept {
            self.unindex_kept(slot, s);
        }
    }

    /// [`Queues::unindex`], `fat` being kept. Out of line: the tree's code
    /// would crowd the per-record path it is never taken on before the
    /// bucket overflows under `drop-oldest`.
    #[inline(never)]
    fn unindex_kept(&mut self, slot: &Slot, s: u32) {
        if slot.len > 0 {
            let seq = self.seqs[slot.head as usize];
            self.fat.remove(&(slot.len, Reverse(seq), s));
        }
    }

    /// Put key `s` (its slot `slot`) back in `fat` after its queue changed.
    #[inline(always)]
    fn index(&mut self, slot: &Slot, s: u32) {
        if self.fat_kept {
            self.index_kept(slot, s);
        }
    }

    /// [`Queues::index`], `fat` being kept (out of line, as
    /// [`Queues::unindex_kept`]).
    #[inline(never)]
    fn index_kept(&mut self, slot: &Slot, s: u32) {
        if slot.len > 0 {
            let seq = self.seqs[slot.head as usize];
            self.fat.insert((slot.len, Reverse(seq), s));
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::key::{parse_key, KeySpec};
    use crate::keyed::KeyConfig;
    use crate::rate::parse_rate;
    use crate::schedule::Limits;

    const MS: u64 = 1_000_000;

    /// The oldest waiting record and the busy keys, counted the slow way.
    fn slow_oldest_and_busy(k: &Keyed) -> (Option<u64>, usize) {
        let busy = k.table.slots.iter().filter(|slot| slot.len > 0);
        let oldest = busy
            .clone()
            .map(|slot| k.queues.nodes[slot.head as usize].arrived)
            .min();
        (oldest, busy.count())
    }

    #[test]
    fn the_oldest_record_and_the_busy_keys_hold_while_records_leave_out_of_order() {
        let config = KeyConfig {
            spec: KeySpec::new(parse_key("1").unwrap(), None),
            rate: parse_rate("1/ms").unwrap(),
            burst: 1,
            rates: Default::default(),
            max_keys: 1000,
            key_capacity: 100_000,
        };
        let mut k = Keyed::new(config, b'\n', 100_000, None);
        let mut global = crate::pace::Pace::local(Limits::new(&[]));
        let mut ledger = Ledger::new(false);
        let mut outbox = Vec::new();
        // Key "slow" gets 800 records at once, which take 800 ms; keys
        // "k0" to "k9" two records every 5 ms each, which come and go
        // past the slow key's oldest.
        let slow: String = (0..800).map(|i| format!("slow {i}\n")).collect();
        let seg = Segment::new(Bytes::from(slow), b'\n');
        k.arrive(
            seg,
            Overflow::Block,
            &mut ledger,
            &mut crate::outflow::Outflow::at(0, &mut global, &mut outbox),
        );
        for t in 1..3000u64 {
            let now = t * MS / 2;
            k.release(&mut crate::outflow::Outflow::at(
                now,
                &mut global,
                &mut outbox,
            ));
            assert!(k.queues.arrivals.len() <= 2 * k.max_depth() + 64, "at {t}");
            let line = format!("k{0} {t}\nk{0} {t}\n", t % 10);
            let seg = Segment::new(Bytes::from(line), b'\n');
            k.arrive(
                seg,
                Overflow::Block,
                &mut ledger,
                &mut crate::outflow::Outflow::at(now, &mut global, &mut outbox),
            );
            let (oldest, busy) = slow_oldest_and_busy(&k);
            assert_eq!(k.oldest_arrival(), oldest, "at {t}");
            assert_eq!(k.busy_keys(), busy, "at {t}");
            assert!(
                k.queues.arrivals.len() <= 2 * k.len() + 64,
                "at {t}: {}",
                k.queues.arrivals.len()
            );
        }
        let mut expired = Ledger::new(false);
        k.expire_before(MS, &mut expired);
        assert_eq!(k.oldest_arrival(), slow_oldest_and_busy(&k).0);
        k.drain(Fate::Undelivered, &mut ledger);
        assert_eq!((k.oldest_arrival(), k.busy_keys(), k.len()), (None, 0, 0));
        assert!(k.queues.arrivals.is_empty());
    }
}
