//! The data pattern: the byte at file offset `o` written by client `c` in
//! iteration `i` is byte `o mod 8` (little-endian) of the word
//! `key(seed, c, i) XOR (o / 8)`. Every transfer therefore carries different
//! bytes (the seed's "avoid reusing the same bytes in the buffer"), a reader
//! can verify any byte knowing only who should have written it, and filling
//! is one XOR per 8 bytes (cheap enough to do inside the timed loop).
use crate::layout::splitmix;

/// The per-(client, iteration) key.
pub fn key(seed: u64, client: u32, iteration: u32) -> u64 {
    splitmix(seed ^ splitmix((u64::from(client) << 32) | u64::from(iteration)))
}

/// The expected byte at file offset `o` for `key`.
pub fn byte_at(key: u64, o: u64) -> u8 {
    let w = key ^ (o >> 3);
    w.to_le_bytes()
        .get((o & 7) as usize)
        .copied()
        .unwrap_or_default()
}

/// Splits `len` bytes at file offset `offset` into (unaligned head, 8-byte
/// aligned body, tail) lengths.
fn split(offset: u64, len: usize) -> (usize, usize, usize) {
    let head = (((8 - (offset & 7)) & 7) as usize).min(len);
    let body = (len - head) / 8 * 8;
    (head, body, len - head - body)
}

/// Fills `buf` with the pattern of `key` for file offset `offset`.
pub fn fill(buf: &mut [u8], key: u64, offset: u64) {
    let (head, body, _) = split(offset, buf.len());
    let (h, rest) = buf.split_at_mut(head);
    for (i, b) in h.iter_mut().enumerate() {
        *b = byte_at(key, offset + i as u64);
    }
    let (b, t) = rest.split_at_mut(body);
    let base = (offset + head as u64) >> 3;
    for (i, ch) in b.chunks_exact_mut(8).enumerate() {
        ch.copy_from_slice(&(key ^ (base + i as u64)).to_le_bytes());
    }
    let tail_off = offset + (head + body) as u64;
    for (i, x) in t.iter_mut().enumerate() {
        *x = byte_at(key, tail_off + i as u64);
    }
}

/// The first wrong byte of a buffer and how many bytes were wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
    pub count: u64,
}

/// Checks `buf` (read from file offset `offset`) against the pattern of `key`.
pub fn verify(buf: &[u8], key: u64, offset: u64) -> Option<Mismatch> {
    let (head, body, _) = split(offset, buf.len());
    let base = (offset + head as u64) >> 3;
    // Fast path: whole words compare equal.
    let body_ok = buf
        .get(head..head + body)
        .unwrap_or_default()
        .chunks_exact(8)
        .enumerate()
        .all(|(i, ch)| ch == (key ^ (base + i as u64)).to_le_bytes());
    let edges_ok = buf
        .iter()
        .enumerate()
        .take(head)
        .chain(buf.iter().enumerate().skip(head + body))
        .all(|(i, b)| *b == byte_at(key, offset + i as u64));
    if body_ok && edges_ok {
        return None;
    }
    let mut first: Option<Mismatch> = None;
    let mut count = 0u64;
    for (i, b) in buf.iter().enumerate() {
        let o = offset + i as u64;
        let e = byte_at(key, o);
        if *b != e {
            count += 1;
            first.get_or_insert(Mismatch {
                offset: o,
                expected: e,
                found: *b,
                count: 0,
            });
        }
    }
    first.map(|m| Mismatch { count, ..m })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fill_matches_byte_at_and_verifies(off in 0u64..1_000_000, len in 0usize..100, k in any::<u64>()) {
            let mut b = vec![0u8; len];
            fill(&mut b, k, off);
            for (i, x) in b.iter().enumerate() {
                prop_assert_eq!(*x, byte_at(k, off + i as u64));
            }
            prop_assert_eq!(verify(&b, k, off), None);
        }

        #[test]
        fn any_flipped_byte_is_found(off in 0u64..1_000_000, len in 1usize..100, at in any::<prop::sample::Index>(), k in any::<u64>()) {
            let mut b = vec![0u8; len];
            fill(&mut b, k, off);
            let i = at.index(len);
            b[i] ^= 0x40;
            let m = verify(&b, k, off).unwrap();
            prop_assert_eq!(m.offset, off + i as u64);
            prop_assert_eq!(m.count, 1);
        }
    }

    #[test]
    fn clients_and_iterations_differ() {
        assert_ne!(key(1, 0, 0), key(1, 1, 0));
        assert_ne!(key(1, 0, 0), key(1, 0, 1));
        let mut a = vec![0u8; 64];
        fill(&mut a, key(1, 0, 0), 4096);
        assert!(verify(&a, key(1, 1, 0), 4096).is_some());
    }
}
