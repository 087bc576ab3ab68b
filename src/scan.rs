//! Finding delimiters: counting them, and finding the n-th.
//!
//! Records are never indexed one by one: a read's records are counted, and
//! a run of records is cut only where a cut is needed (the bucket is full,
//! the pacer lets `n` records go). Counting is a vector compare the
//! compiler generates from plain code; finding the n-th is a SWAR scan,
//! eight bytes a step, with the exact zero-byte test of "Bit Twiddling
//! Hacks" (S. E. Anderson). Either way a word's delimiters are found
//! together, so short records cost no more than long ones.

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// `byte` in each of a word's eight bytes, for [`matches()`].
pub(crate) const fn splat(byte: u8) -> u64 {
    u64::from_ne_bytes([byte; 8])
}

/// High bit of each byte of `word` (eight bytes) set exactly where the
/// byte equals the one repeated in `pattern` ([`splat`]); the first byte
/// is the lowest.
#[inline(always)]
pub(crate) fn matches(word: &[u8], pattern: u64) -> u64 {
    let x = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ pattern;
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

/// Reads shorter than this are searched byte by byte by [`last`].
const SHORT: usize = 64;

/// Where the last `delimiter` in `hay` is, if any. memchr's first search
/// asks the processor which vector instructions it has (CPUID, which a
/// hypervisor traps: about 30 µs of a one-record run in a virtual
/// machine), so a short read (under 64 bytes) is searched byte by byte,
/// as fast at that length, and a run that reads only short ones never
/// asks.
pub fn last(hay: &[u8], delimiter: u8) -> Option<usize> {
    if hay.len() < SHORT {
        hay.iter().rposition(|&b| b == delimiter)
    } else {
        memchr::memrchr(delimiter, hay)
    }
}

/// Bytes counted per lane step in [`count`], and how many steps fit a
/// byte-wide tally before it could wrap.
const LANES: usize = 64;
const STEPS: usize = u8::MAX as usize;

/// Number of `delimiter` bytes in `hay`.
///
/// Each of 64 byte-wide tallies counts the matches at its position, for at
/// most 255 steps of 64 bytes, and then the tallies are summed: plain code
/// that the compiler turns into vector compares and subtracts (SSE2 on any
/// x86-64), several times faster than the word-at-a-time test.
pub fn count(hay: &[u8], delimiter: u8) -> usize {
    let mut n = 0usize;
    for block in hay.chunks(LANES * STEPS) {
        let mut tally = [0u8; LANES];
        let mut steps = block.chunks_exact(LANES);
        for step in &mut steps {
            for (t, &b) in tally.iter_mut().zip(step) {
                *t += u8::from(b == delimiter);
            }
        }
        n += tally.iter().map(|&t| usize::from(t)).sum::<usize>();
        n += steps
            .remainder()
            .iter()
            .filter(|&&b| b == delimiter)
            .count();
    }
    n
}

/// Offset of the `n`-th `delimiter` in `hay` (0-based: `n == 0` is the
/// first), or `None` when `hay` holds `n` or fewer.
pub fn nth(hay: &[u8], delimiter: u8, mut n: usize) -> Option<usize> {
    let pattern = splat(delimiter);
    // Whole 32-byte blocks are counted, as in `count`, until the block
    // holding the n-th; then that block is searched word by word.
    let mut blocks = hay.chunks_exact(32);
    let mut base = 0;
    for block in &mut blocks {
        let m = [
            matches(&block[..8], pattern),
            matches(&block[8..16], pattern),
            matches(&block[16..24], pattern),
            matches(&block[24..], pattern),
        ];
        let found = m.iter().map(|w| w.count_ones()).sum::<u32>() as usize;
        if n < found {
            return Some(base + nth_in_words(&m, n));
        }
        n -= found;
        base += 32;
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for word in &mut words {
        let m = matches(word, pattern);
        if n < m.count_ones() as usize {
            return Some(base + nth_in_words(&[m], n));
        }
        n -= m.count_ones() as usize;
        base += 8;
    }
    words
        .remainder()
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == delimiter)
        .nth(n)
        .map(|(i, _)| base + i)
}

/// Offset of the `n`-th match in consecutive match words (`n` is less
/// than their matches).
fn nth_in_words(words: &[u64], mut n: usize) -> usize {
    for (i, &word) in words.iter().enumerate() {
        let found = word.count_ones() as usize;
        if n < found {
            let mut m = word;
            for _ in 0..n {
                m &= m - 1;
            }
            return i * 8 + m.trailing_zeros() as usize / 8;
        }
        n -= found;
    }
    unreachable!("fewer matches than asked for")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(hay: &[u8], delimiter: u8) -> Vec<usize> {
        (0..hay.len()).filter(|&i| hay[i] == delimiter).collect()
    }

    #[test]
    fn last_finds_the_last_delimiter_short_or_long() {
        for len in [0, 1, 2, 63, 64, 65, 200] {
            let mut hay = vec![b'a'; len];
            assert_eq!(last(&hay, b'\n'), None, "{len}");
            for at in [0, len / 2, len.saturating_sub(1)] {
                if at < len {
                    hay[at] = b'\n';
                    let want = hay.iter().rposition(|&b| b == b'\n');
                    assert_eq!(last(&hay, b'\n'), want, "{len} {at}");
                }
            }
        }
    }

    #[test]
    fn count_and_nth_agree_with_a_plain_search() {
        // Every length around the 8- and 32-byte steps, delimiters at
        // every density, bytes that differ from the delimiter in one bit
        // and high bytes (the carries of the zero-byte test).
        let bytes = [b'\n', b'\n' ^ 1, b'\n' | 0x80, 0x00, 0xff, b'a'];
        let mut state = 7u32;
        for len in 0..100 {
            for density in [0, 1, 3, 8] {
                let hay: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        let r = (state >> 16) as usize;
                        if density > 0 && r % density == 0 {
                            b'\n'
                        } else {
                            bytes[1 + r % (bytes.len() - 1)]
                        }
                    })
                    .collect();
                let want = naive(&hay, b'\n');
                assert_eq!(count(&hay, b'\n'), want.len(), "{hay:?}");
                for k in 0..=want.len() {
                    assert_eq!(nth(&hay, b'\n', k), want.get(k).copied(), "{hay:?} {k}");
                }
            }
        }
    }

    #[test]
    fn count_holds_across_its_tally_blocks() {
        // Every byte a delimiter: each tally reaches 255 in a full block
        // and must not wrap; lengths around one and two blocks.
        let block = LANES * STEPS;
        for len in [block - 1, block, block + 1, 2 * block + 63, 2 * block + 64] {
            let hay = vec![b'\n'; len];
            assert_eq!(count(&hay, b'\n'), len, "{len}");
            let mut sparse = vec![b'a'; len];
            sparse[len - 1] = b'\n';
            sparse[0] = b'\n';
            assert_eq!(count(&sparse, b'\n'), 2, "{len}");
        }
    }

    #[test]
    fn nul_and_high_delimiters() {
        let hay = b"a\0b\0\xff\xfe\xff";
        assert_eq!(count(hay, 0), 2);
        assert_eq!(nth(hay, 0, 1), Some(3));
        assert_eq!(count(hay, 0xff), 2);
        assert_eq!(nth(hay, 0xff, 1), Some(6));
        assert_eq!(nth(hay, 0xff, 2), None);
    }
}
