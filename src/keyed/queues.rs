//! The per-key queues: each key's waiting records in a list of nodes,
//! in input order; what waits when the bucket or a key's queue is full
//! (the overflow policies); the oldest waiting record of all (expiry) and
//! the key holding the most (`drop-oldest`'s victim).
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::cmp::Reverse;

use bytes::Bytes;

use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::ledger::Ledger;

use super::{Keyed, Lane, NoRoom, NIL};

/// A waiting record and the next of its key.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) seg: Segment,
    pub(super) seq: u64,
    pub(super) next: u32,
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
        let record = seg.split_known(size, 1);
        ledger.read(1);
        let Some(s) = slot else {
            self.dropped_unremembered += 1;
            ledger.dispose(record, Fate::DroppedNewest);
            return None;
        };
        if key_full || full {
            if policy == Overflow::DropNewest {
                self.slots[s as usize].dropped += 1;
                ledger.dispose(record, Fate::DroppedNewest);
                return None;
            }
            if key_full {
                self.evict(s, Fate::DroppedOldest, ledger);
            }
            while self.len >= self.capacity || self.bytes + size > self.capacity_bytes {
                let Some(&(_, _, fattest)) = self.fat.last() else {
                    break;
                };
                self.evict(fattest, Fate::DroppedOldest, ledger);
            }
        }
        self.enqueue(now, s, record.own_copy());
        None
    }

    /// Drop the oldest waiting record of key `s` as `fate`.
    pub(super) fn evict(&mut self, s: u32, fate: Fate, ledger: &mut Ledger) {
        if let Some(seg) = self.pop_head(s) {
            self.slots[s as usize].dropped += 1;
            ledger.dispose(seg, fate);
        }
    }

    /// Put `record` at the end of key `s`'s queue.
    pub(super) fn enqueue(&mut self, now: u64, s: u32, record: Segment) {
        self.seq += 1;
        let node = Node {
            seq: self.seq,
            next: NIL,
            seg: record,
        };
        self.len += 1;
        self.bytes += node.seg.bytes();
        self.max_depth = self.max_depth.max(self.len);
        let arrived = node.seg.arrived;
        let n = match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                n
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 records")
            }
        };
        self.unindex(s);
        let slot = &mut self.slots[s as usize];
        if slot.len == 0 {
            slot.head = n;
            self.fronts.insert((arrived, self.seq, s));
        } else {
            let tail = slot.tail;
            self.nodes[tail as usize].next = n;
        }
        let slot = &mut self.slots[s as usize];
        slot.tail = n;
        slot.len += 1;
        self.index(s);
        if self.slots[s as usize].lane == Lane::Idle {
            self.join_line(s, now);
        }
    }

    /// Take key `s`'s head out of its queue.
    pub(super) fn pop_head(&mut self, s: u32) -> Option<Segment> {
        let slot = &self.slots[s as usize];
        if slot.len == 0 {
            return None;
        }
        let n = slot.head;
        let head = &self.nodes[n as usize];
        let (arrived, seq, next) = (head.seg.arrived, head.seq, head.next);
        self.fronts.remove(&(arrived, seq, s));
        self.unindex(s);
        let seg = std::mem::replace(
            &mut self.nodes[n as usize].seg,
            Segment::new(Bytes::new(), self.delimiter),
        );
        self.free_nodes.push(n);
        self.len -= 1;
        self.bytes -= seg.bytes();
        let slot = &mut self.slots[s as usize];
        slot.len -= 1;
        slot.head = next;
        if slot.len > 0 {
            let head = &self.nodes[next as usize];
            self.fronts.insert((head.seg.arrived, head.seq, s));
        }
        self.index(s);
        Some(seg)
    }

    /// Take key `s` out of `fat` before its queue changes.
    pub(super) fn unindex(&mut self, s: u32) {
        let slot = &self.slots[s as usize];
        if slot.len > 0 {
            let seq = self.nodes[slot.head as usize].seq;
            self.fat.remove(&(slot.len, Reverse(seq), s));
        }
    }

    /// Put key `s` back in `fat` after its queue changed.
    pub(super) fn index(&mut self, s: u32) {
        let slot = &self.slots[s as usize];
        if slot.len > 0 {
            let seq = self.nodes[slot.head as usize].seq;
            self.fat.insert((slot.len, Reverse(seq), s));
        }
    }

    /// Expire records that arrived before `cutoff` (ns), oldest first, in
    /// every key. Returns how many expired.
    pub fn expire_before(&mut self, cutoff: u64, ledger: &mut Ledger) -> usize {
        let mut n = 0;
        while let Some(&(arrived, _, s)) = self.fronts.first() {
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
        while let Some(&(_, _, s)) = self.fronts.first() {
            let seg = self.pop_head(s).expect("a waiting record");
            ledger.dispose(seg, fate);
        }
    }
}
