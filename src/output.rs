//! Writing records out: gathered writes of whole records, straight to the
//! file descriptor (no buffering that would hold a record back), in bounded
//! pieces so that a stop request is seen between pieces. A stop never cuts
//! a record: the one being written is finished first.

use std::io::{self, IoSlice, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bucket::Segment;
use crate::platform::write::write_at_position;
use crate::sys::{self, FileKind};

/// Most bytes handed to one write(2): large enough for throughput, small
/// enough that a stop request is noticed promptly on a slow pipe.
const MAX_WRITE: usize = 128 * 1024;
/// Most buffers handed to one writev(2).
const MAX_SLICES: usize = 64;

/// What a writer is asked, between write calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Go on.
    No,
    /// Finish the record under way, then stop.
    AfterRecord,
    /// Stop at once, even inside a record (drip is leaving after a second
    /// signal); what was written is reported exactly.
    Now,
}

/// What became of a batch.
#[derive(Debug, Default)]
pub struct Written {
    /// Whole records written.
    pub records: u64,
    /// Bytes written (a failed write may leave part of a record out).
    pub bytes: u64,
    /// The write error that ended the batch early.
    pub error: Option<io::Error>,
    /// Whether a stop request ended the batch early.
    pub stopped: bool,
}

/// Write the records of `batch` to `out`, in order.
///
/// `stop` is asked between write calls (and when one is interrupted); on
/// [`Stop::AfterRecord`] writing goes on only to the end of the record under
/// way, on [`Stop::Now`] it ends there. `progress` is told the bytes of the
/// batch written so far after each write call. `wait` waits until `out`
/// can take more when it is full (a non-blocking `out`).
pub fn write_batch(
    out: &mut dyn Write,
    batch: &[Segment],
    stop: &dyn Fn() -> Stop,
    progress: &dyn Fn(usize),
    wait: &dyn Fn(),
) -> Written {
    let total: usize = batch.iter().map(Segment::bytes).sum();
    let mut limit = total;
    let mut pos = 0; // bytes of the batch written
    let mut seg_index = 0; // segment holding `pos`
    let mut seg_offset = 0; // offset of `pos` in that segment
    let mut error = None;
    let mut stopped = false;
    while pos < limit {
        let mut slices: [IoSlice<'_>; MAX_SLICES] = [IoSlice::new(&[]); MAX_SLICES];
        let room = (limit - pos).min(MAX_WRITE);
        let used = gather(&mut slices, batch, (seg_index, seg_offset), room);
        let n = match out.write_vectored(&slices[..used]) {
            Ok(0) => {
                error = Some(io::Error::from(io::ErrorKind::WriteZero));
                break;
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                if e.kind() == io::ErrorKind::WouldBlock {
                    // A non-blocking stdout (inherited O_NONBLOCK) is full:
                    // the consumer is slow, not gone. Wait for room.
                    wait();
                }
                // Interrupted by a stop: finish only the record under way.
                match stop() {
                    Stop::Now => {
                        stopped = true;
                        break;
                    }
                    Stop::AfterRecord if !stopped => {
                        stopped = true;
                        limit = pos + rest_of_record(&batch[seg_index], seg_offset);
                    }
                    _ => {}
                }
                continue;
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        pos += n;
        progress(pos);
        (seg_index, seg_offset) = advance(batch, (seg_index, seg_offset), n);
        match stop() {
            Stop::Now if pos < total => {
                stopped = true;
                break;
            }
            Stop::AfterRecord if !stopped && pos < limit => {
                stopped = true;
                limit = pos + rest_of_record(&batch[seg_index], seg_offset);
            }
            _ => {}
        }
    }
    if error.is_none() && pos >= limit && limit < total {
        stopped = true;
    }
    Written {
        records: whole_records(batch, pos),
        bytes: pos as u64,
        error,
        stopped,
    }
}

/// Write `delimiter` alone, to end a record written before without it (an
/// input's unterminated last record that other records follow). Retried
/// when interrupted or when a non-blocking stdout is full (after `wait`,
/// as [`write_batch`]); `Ok(false)` when a [`Stop::Now`] ends it unwritten.
///
/// # Errors
/// The write error (a closed pipe included).
pub fn write_delimiter(
    out: &mut dyn Write,
    delimiter: u8,
    stop: &dyn Fn() -> Stop,
    wait: &dyn Fn(),
) -> io::Result<bool> {
    loop {
        match out.write(&[delimiter]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait(),
            Err(e) if e.kind() != io::ErrorKind::Interrupted => return Err(e),
            Err(_) => {}
        }
        if stop() == Stop::Now {
            return Ok(false);
        }
    }
}

/// Fill `slices` with up to `room` bytes of `batch` from `at` (segment,
/// offset); returns how many slices were used.
fn gather<'a>(
    slices: &mut [IoSlice<'a>; MAX_SLICES],
    batch: &'a [Segment],
    (mut i, mut off): (usize, usize),
    mut room: usize,
) -> usize {
    let mut used = 0;
    while room > 0 && used < MAX_SLICES && i < batch.len() {
        let bytes = &batch[i].as_bytes()[off..];
        let take = bytes.len().min(room);
        if take > 0 {
            slices[used] = IoSlice::new(&bytes[..take]);
            used += 1;
            room -= take;
        }
        i += 1;
        off = 0;
    }
    used
}

/// The position (segment, offset) `n` bytes of `batch` after `at`, past
/// any segments that end there.
fn advance(batch: &[Segment], (mut index, mut offset): (usize, usize), n: usize) -> (usize, usize) {
    offset += n;
    while index < batch.len() && offset >= batch[index].bytes() {
        offset -= batch[index].bytes();
        index += 1;
    }
    (index, offset)
}

/// Writing to stdout from the reader thread itself, at `--rate inf` while
/// nothing is queued: a read goes out with no hand-off between threads.
///
/// Only writes that never wait for a slow consumer are made this way:
/// RWF_NOWAIT writes to pipes, sockets and devices (Linux only: elsewhere
/// the first is refused, [`crate::platform::write`]), plain writes to
/// files.
/// What does not fit is left to the writer thread, as usual; so a stalled
/// consumer never stalls reading, and the overflow policy still applies.
#[derive(Debug)]
pub struct Direct {
    fd: OwnedFd,
    /// Writes must not wait (a stream); else plain writes (storage).
    nowait: bool,
    /// Cleared when the kernel, the file or the system refuses RWF_NOWAIT.
    usable: AtomicBool,
}

impl Direct {
    /// Direct writes to `fd`, if its kind allows them.
    pub fn new(fd: OwnedFd) -> Option<Direct> {
        let nowait = match sys::file_kind(fd.as_fd()) {
            FileKind::Storage => false,
            FileKind::Stream => true,
            FileKind::Other => return None,
        };
        Some(Direct {
            fd,
            nowait,
            usable: AtomicBool::new(true),
        })
    }

    /// Whether direct writes can still be tried.
    pub fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// Write as much of `seg` as goes without waiting. `written.bytes` may
    /// end inside a record, whose rest the caller must see written. Once
    /// `stop` is set, only the record under way is finished, waiting if
    /// need be, as [`write_batch`] does; once `now` is set (an interrupted
    /// write returns), writing ends at once, even inside a record.
    pub fn write(&self, seg: &Segment, stop: &AtomicBool, now: &AtomicBool) -> Written {
        self.write_from(seg, 0, stop, now)
    }

    /// After [`Direct::write`] left a record begun and drip is stopping:
    /// finish that record, waiting if need be, unless `now` is set.
    pub fn finish_record(&self, seg: &Segment, written: Written, now: &AtomicBool) -> Written {
        if written.error.is_some() {
            return written;
        }
        self.write_from(seg, written.bytes as usize, &AtomicBool::new(true), now)
    }

    fn write_from(
        &self,
        seg: &Segment,
        mut pos: usize,
        stop: &AtomicBool,
        now: &AtomicBool,
    ) -> Written {
        let bytes = seg.as_bytes();
        let mut error = None;
        let mut stopped = false;
        while pos < bytes.len() {
            if now.load(Ordering::SeqCst) {
                stopped = true;
                break;
            }
            let mut end = bytes.len();
            let mut nowait = self.nowait;
            if stop.load(Ordering::Relaxed) {
                stopped = true;
                end = pos + rest_of_record(seg, pos);
                if end == pos {
                    break;
                }
                nowait = false;
            }
            match write_at_position(self.fd.as_fd(), &bytes[pos..end], nowait) {
                Ok(0) => error = Some(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => pos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if nowait {
                        break;
                    }
                    // A stdout opened O_NONBLOCK, finishing a record: wait
                    // for room (a stop's interrupt ends the wait too).
                    sys::writable(self.fd.as_fd(), -1);
                }
                Err(e)
                    if nowait
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
                        ) =>
                {
                    self.usable.store(false, Ordering::Relaxed);
                    break;
                }
                Err(e) => error = Some(e),
            }
            if error.is_some() || (stopped && pos == end) {
                break;
            }
        }
        Written {
            records: seg.records_within(pos) as u64,
            bytes: pos as u64,
            error,
            stopped,
        }
    }
}

/// Bytes from `offset` to the end of the record containing it (0 when
/// `offset` is a record boundary).
fn rest_of_record(seg: &Segment, offset: usize) -> usize {
    let whole = seg.records_within(offset);
    let done = seg.bytes_of_first(whole);
    if done == offset {
        0
    } else {
        seg.bytes_of_first(whole + 1) - offset
    }
}

/// Whole records within the first `bytes` bytes of `batch`.
pub fn whole_records(batch: &[Segment], mut bytes: usize) -> u64 {
    let mut n = 0;
    for seg in batch {
        if bytes >= seg.bytes() {
            n += seg.len() as u64;
            bytes -= seg.bytes();
        } else {
            n += seg.records_within(bytes) as u64;
            break;
        }
    }
    n
}

/// A value parser for a file drip writes: refuse `-`, which would mean
/// stdout, the records' (and would create a file named `-`).
///
/// # Errors
/// The path is `-`.
pub fn not_stdout(path: std::path::PathBuf) -> Result<std::path::PathBuf, String> {
    if path.as_os_str() == "-" {
        return Err("'-' would be stdout, which carries the records; name a file".into());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn seg(text: &str) -> Segment {
        Segment::new(Bytes::from(text.to_string()), b'\n')
    }

    /// A sink that takes at most `step` bytes a call and fails after `fail_at`.
    struct Slow {
        data: Vec<u8>,
        step: usize,
        fail_at: usize,
    }

    impl Write for Slow {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.data.len() >= self.fail_at {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = buf.len().min(self.step).min(self.fail_at - self.data.len());
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_everything_in_order() {
        let batch = [seg("a\nbb\n"), seg("ccc\n")];
        let mut out = Vec::new();
        let w = write_batch(&mut out, &batch, &|| Stop::No, &|_| {}, &|| {});
        assert_eq!(out, b"a\nbb\nccc\n");
        assert_eq!((w.records, w.bytes, w.stopped), (3, 9, false));
        assert!(w.error.is_none());
    }

    #[test]
    fn stop_finishes_the_record_under_way() {
        let batch = [seg("aaaa\nbbbb\n"), seg("cccc\n")];
        let mut out = Slow {
            data: Vec::new(),
            step: 3,
            fail_at: usize::MAX,
        };
        let w = write_batch(&mut out, &batch, &|| Stop::AfterRecord, &|_| {}, &|| {});
        assert_eq!(out.data, b"aaaa\n");
        assert_eq!(w.records, 1);
        assert!(w.stopped);
    }

    #[test]
    fn stop_now_ends_inside_a_record_and_says_how_far() {
        let batch = [seg("aaaa\nbbbb\n")];
        let mut out = Slow {
            data: Vec::new(),
            step: 3,
            fail_at: usize::MAX,
        };
        let w = write_batch(&mut out, &batch, &|| Stop::Now, &|_| {}, &|| {});
        assert_eq!(out.data, b"aaa");
        assert_eq!((w.records, w.bytes, w.stopped), (0, 3, true));
    }

    #[test]
    fn failure_counts_only_whole_records() {
        let batch = [seg("aaaa\nbbbb\n")];
        let mut out = Slow {
            data: Vec::new(),
            step: 100,
            fail_at: 7,
        };
        let w = write_batch(&mut out, &batch, &|| Stop::No, &|_| {}, &|| {});
        assert_eq!(w.records, 1);
        assert_eq!(w.bytes, 7);
        assert_eq!(w.error.unwrap().raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn large_batches_go_in_pieces() {
        let big = "x".repeat(300_000) + "\n";
        let batch = [seg(&big), seg("y\n")];
        let mut out = Vec::new();
        let w = write_batch(&mut out, &batch, &|| Stop::No, &|_| {}, &|| {});
        assert_eq!(out.len(), 300_003);
        assert_eq!(w.records, 2);
    }
}
