//! The per-key queues: each key's waiting records in a list of nodes,
//! in input order; what waits when the bucket or a key's queue is full
//! (the overflow policies); the oldest waiting record of all (expiry) and
//! the key holding the most (`drop-oldest`'s victim).
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::cmp::Reverse;
use std::collections::VecDeque;

use bytes::Bytes;

use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::ledger::Ledger;

use super::spill::Place;
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
            self.slots[s as usize].len as usize >= self.key_capacity
        });
        let full = self.len >= self.capacity || self.bytes + size > self.capacity_bytes;
        if key_full || full {
            match policy {
                Overflow::Block => {
                    self.blocked_on_keys = slot.is_none();
                    return Some(Offered::Wait(seg.clone()));
                }
                Overflow::Fail => {
                    self.no_room = if full {
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
            self.dropped_unremembered += 1;
            ledger.dispose(seg.split_known(size, 1), Fate::DroppedNewest);
            return None;
        };
        if key_full || full {
            if policy == Overflow::DropNewest {
                self.dropped[s as usize] += 1;
                ledger.dispose(seg.split_known(size, 1), Fate::DroppedNewest);
                return None;
            }
            if key_full {
                self.evict(s, Fate::DroppedOldest, ledger);
            }
            if self.len >= self.capacity || self.bytes + size > self.capacity_bytes {
                self.keep_fat();
            }
            while self.len >= self.capacity || self.bytes + size > self.capacity_bytes {
                let Some(&(_, _, fattest)) = self.fat.last() else {
                    break;
                };
                self.evict(fattest, Fate::DroppedOldest, ledger);
            }
        }
        // Copied straight from the read, which is then passed over: no
        // slice of the read is made (its count is shared with the writer).
        let place = self.spill.copy(&seg.as_bytes()[..size]);
        let number = seg.number;
        seg.skip_known(size, 1);
        self.enqueue(now, s, place, (size, number));
        None
    }

    /// Drop the oldest waiting record of key `s` as `fate`.
    pub(super) fn evict(&mut self, s: u32, fate: Fate, ledger: &mut Ledger) {
        if let Some(seg) = self.pop_head(s) {
            self.dropped[s as usize] += 1;
            ledger.dispose(seg, fate);
        }
    }

    /// Put the record at `place` (`len` bytes, arrived at `now`, its
    /// place in the input `number`) at the end of key `s`'s queue.
    pub(super) fn enqueue(&mut self, now: u64, s: u32, place: Place, (len, number): (usize, u64)) {
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
        self.unindex(s);
        let slot = &mut self.slots[s as usize];
        if slot.len == 0 {
            slot.head = n;
            self.busy += 1;
        } else {
            let tail = slot.tail;
            self.nodes[tail as usize].next = n;
        }
        let slot = &mut self.slots[s as usize];
        slot.tail = n;
        slot.len += 1;
        if self.arrivals.len() >= 2 * self.len + 64 {
            self.compact_arrivals();
        }
        self.arrivals.push_back((self.seq, n));
        self.index(s);
        if self.slots[s as usize].lane == Lane::Idle {
            self.join_line(s, now);
        }
    }

    /// The bytes of waiting record `node`.
    #[inline]
    pub(super) fn record(&self, node: &Node) -> &[u8] {
        self.spill.bytes(node.place, node.len)
    }

    /// The bytes of key `s`'s head (`s` has records waiting).
    #[inline]
    pub(super) fn head_record(&self, s: u32) -> &[u8] {
        self.record(&self.nodes[self.slots[s as usize].head as usize])
    }

    /// Take key `s`'s head out of its queue, as a segment of its own.
    pub(super) fn pop_head(&mut self, s: u32) -> Option<Segment> {
        let head = self.slots[s as usize].head as usize;
        let node = self.unlink_head(s)?;
        let bytes = Bytes::copy_from_slice(self.record(&node));
        self.spill.release(node.place);
        let mut seg = Segment::counted(bytes, 1, self.delimiter);
        seg.arrived = node.arrived;
        seg.number = self.numbers.get(head).copied().unwrap_or(0);
        Some(seg)
    }

    /// Key `s`'s head leaves at `now`: with the records let go with it
    /// (`outgoing`), or, records apart, as a segment of its own into
    /// `outbox`.
    pub(super) fn send_head(&mut self, s: u32, now: u64, outbox: &mut Vec<Segment>) {
        let arrived = if self.apart {
            // After what left before it.
            self.outgoing.flush(outbox);
            let seg = self.pop_head(s).expect("a waiting record");
            let arrived = seg.arrived;
            outbox.push(seg);
            arrived
        } else {
            let node = self.unlink_head(s).expect("a waiting record");
            let record = self.spill.bytes(node.place, node.len);
            self.outgoing.add(record, node.arrived, outbox);
            self.spill.release(node.place);
            node.arrived
        };
        self.longest_wait_ns = self.longest_wait_ns.max(now.saturating_sub(arrived));
    }

    /// Take key `s`'s head out of its queue; its bytes stay in the spill
    /// until released.
    fn unlink_head(&mut self, s: u32) -> Option<Node> {
        let slot = &self.slots[s as usize];
        if slot.len == 0 {
            return None;
        }
        let n = slot.head;
        let node = self.nodes[n as usize];
        // Out of `fat` while the head still holds the seq its entry names.
        self.unindex(s);
        // No longer the record its entry in `arrivals` names.
        self.seqs[n as usize] = 0;
        self.free_nodes.push(n);
        self.len -= 1;
        self.bytes -= node.len;
        let slot = &mut self.slots[s as usize];
        slot.len -= 1;
        slot.head = node.next;
        if slot.len == 0 {
            self.busy -= 1;
        }
        self.index(s);
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
    /// ([`Keyed::enqueue`]), not as records leave: a release that lets
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
    /// pays): it costs two tree updates a record, spent only once the
    /// bucket overflows under `drop-oldest`.
    #[cold]
    fn keep_fat(&mut self) {
        if self.fat_kept {
            return;
        }
        self.fat_kept = true;
        for s in 0..self.slots.len() as u32 {
            self.index(s);
        }
    }

    /// Take key `s` out of `fat` before its queue changes.
    #[inline(always)]
    pub(super) fn unindex(&mut self, s: u32) {
        if self.fat_kept {
            self.unindex_kept(s);
        }
    }

    /// [`Keyed::unindex`], `fat` being kept.
    fn unindex_kept(&mut self, s: u32) {
        let slot = &self.slots[s as usize];
        if slot.len > 0 {
            let seq = self.seqs[slot.head as usize];
            self.fat.remove(&(slot.len, Reverse(seq), s));
        }
    }

    /// Put key `s` back in `fat` after its queue changed.
    #[inline(always)]
    pub(super) fn index(&mut self, s: u32) {
        if self.fat_kept {
            self.index_kept(s);
        }
    }

    /// [`Keyed::index`], `fat` being kept.
    fn index_kept(&mut self, s: u32) {
        let slot = &self.slots[s as usize];
        if slot.len > 0 {
            let seq = self.seqs[slot.head as usize];
            self.fat.insert((slot.len, Reverse(seq), s));
        }
    }

    /// Expire records that arrived before `cutoff` (ns), oldest first, in
    /// every key. Returns how many expired.
    pub fn expire_before(&mut self, cutoff: u64, ledger: &mut Ledger) -> usize {
        let mut n = 0;
        while let Some((s, arrived)) = self.oldest() {
            if arrived >= cutoff {
                break;
            }
            self.evict(s, Fate::Expired, ledger);
            n += 1;
        }
        n
    }

    /// Every waiting record, oldest first, as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        while let Some((s, _)) = self.oldest() {
            let seg = self.pop_head(s).expect("a waiting record");
            ledger.dispose(seg, fate);
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
        let busy = k.slots.iter().filter(|slot| slot.len > 0);
        let oldest = busy
            .clone()
            .map(|slot| k.nodes[slot.head as usize].arrived)
            .min();
        (oldest, busy.count())
    }

    #[test]
    fn the_oldest_record_and_the_busy_keys_hold_while_records_leave_out_of_order() {
        let config = KeyConfig {
            spec: KeySpec::new(parse_key("1").unwrap(), None),
            rate: parse_rate("1/ms").unwrap(),
            burst: 1,
            max_keys: 1000,
            key_capacity: 100_000,
        };
        let mut k = Keyed::new(config, b'\n', 100_000, None);
        let mut global = Limits::new(&[]);
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
            &mut crate::waiting::Departures::at(0, &mut global, &mut outbox),
        );
        for t in 1..3000u64 {
            let now = t * MS / 2;
            k.release(&mut crate::waiting::Departures::at(
                now,
                &mut global,
                &mut outbox,
            ));
            assert!(k.arrivals.len() <= 2 * k.max_depth() + 64, "at {t}");
            let line = format!("k{0} {t}\nk{0} {t}\n", t % 10);
            let seg = Segment::new(Bytes::from(line), b'\n');
            k.arrive(
                seg,
                Overflow::Block,
                &mut ledger,
                &mut crate::waiting::Departures::at(now, &mut global, &mut outbox),
            );
            let (oldest, busy) = slow_oldest_and_busy(&k);
            assert_eq!(k.oldest_arrival(), oldest, "at {t}");
            assert_eq!(k.busy_keys(), busy, "at {t}");
            assert!(
                k.arrivals.len() <= 2 * k.len() + 64,
                "at {t}: {}",
                k.arrivals.len()
            );
        }
        let mut expired = Ledger::new(false);
        k.expire_before(MS, &mut expired);
        assert_eq!(k.oldest_arrival(), slow_oldest_and_busy(&k).0);
        k.drain(Fate::Undelivered, &mut ledger);
        assert_eq!((k.oldest_arrival(), k.busy_keys(), k.len()), (None, 0, 0));
        assert!(k.arrivals.is_empty());
    }
}
