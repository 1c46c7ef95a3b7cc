//! Cache-line-blocked Bloom filter over user keys (one per table).
//!
//! The bit array is split into 512-bit (64-byte, one cache line) blocks. A
//! key's 64-bit hash picks one block with its upper 32 bits and sets or
//! tests `k` bits inside that block, chosen by double hashing on its lower
//! 32 bits, so a probe touches a single cache line. The hash function and
//! bit selection are part of the on-disk format (`docs/format/sstable.md`).
//!
//! Serialized form: `bits (64 × num_blocks bytes) ‖ u8 k ‖ fixed32 num_blocks`.

#![deny(clippy::indexing_slicing)]

use crate::coding::{decode_fixed32, put_fixed32};
use crate::error::{Error, Result};

/// Bytes per filter block (one cache line).
pub const FILTER_BLOCK_BYTES: usize = 64;
const FILTER_BLOCK_BITS: u64 = 512;
/// Bytes after the bit array: k (1) + num_blocks (4).
const FILTER_TRAILER_LEN: usize = 5;
const MAX_PROBES: usize = 30;

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const SEED: u64 = 0x5354_5241_5441_424C; // "STRATABL"

fn round(w: u64) -> u64 {
    w.wrapping_mul(P2).rotate_left(31).wrapping_mul(P1)
}

fn absorb(h: u64, w: u64) -> u64 {
    (h ^ round(w))
        .rotate_left(27)
        .wrapping_mul(P1)
        .wrapping_add(P2)
}

/// The 64-bit key hash of the filter format: an xxHash64-style word loop
/// followed by the MurmurHash3 64-bit finalizer.
///
/// `h = SEED ^ (len * P1)`; for each 8-byte little-endian word `w` (the
/// final partial word zero-extended, absent if `len % 8 == 0`):
/// `h = rotl(h ^ rotl(w * P2, 31) * P1, 27) * P1 + P2`; then `fmix64(h)`.
/// All arithmetic wraps.
pub fn hash64(data: &[u8]) -> u64 {
    let mut h = SEED ^ (data.len() as u64).wrapping_mul(P1);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = absorb(h, u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        for (d, &b) in w.iter_mut().zip(rest) {
            *d = b;
        }
        h = absorb(h, u64::from_le_bytes(w));
    }
    fmix64(h)
}

fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// Index of the block for hash `h` among `num_blocks`.
fn block_index(h: u64, num_blocks: u32) -> usize {
    (((h >> 32) * num_blocks as u64) >> 32) as usize
}

/// Calls `f` with the `k` bit positions (0..512) of hash `h` in its block:
/// `a = h mod 2^32`, `d = (rotr32(a, 15) | 1)`, bit_i = `(a + i*d) mod 512`.
/// `d` is odd, so the k positions are distinct for k <= 512.
fn for_each_bit(h: u64, k: u8, mut f: impl FnMut(usize) -> bool) -> bool {
    let a = h as u32;
    let d = a.rotate_right(15) | 1;
    let mut x = a;
    for _ in 0..k {
        if !f((x as u64 % FILTER_BLOCK_BITS) as usize) {
            return false;
        }
        x = x.wrapping_add(d);
    }
    true
}

/// The `k` bit positions (in `0..num_blocks * 512`) that a probe of a key
/// hashed to `h` by [`hash64`] tests in a filter of `num_blocks` blocks
/// and `k` probes: the same positions in every filter of that shape, so
/// the filters of many small sets can be tested together, bit-sliced. Bit
/// `b` is bit `b % 8` of byte `b / 8` of the bit array.
pub fn probe_bits(h: u64, k: u8, num_blocks: u32) -> Vec<usize> {
    let base = block_index(h, num_blocks) * FILTER_BLOCK_BYTES * 8;
    let mut out = Vec::with_capacity(usize::from(k));
    for_each_bit(h, k, |b| {
        out.push(base + b);
        true
    });
    out
}

/// Number of probes for `bits_per_key`: round(bits_per_key × ln 2) in [1, 30].
fn num_probes(bits_per_key: usize) -> u8 {
    let k = (bits_per_key as f64 * std::f64::consts::LN_2).round() as usize;
    k.clamp(1, MAX_PROBES) as u8
}

/// Accumulates key hashes and builds the filter bytes.
pub struct BloomBuilder {
    bits_per_key: usize,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// A builder spending about `bits_per_key` bits per key (at least 1).
    pub fn new(bits_per_key: usize) -> Self {
        BloomBuilder {
            bits_per_key: bits_per_key.max(1),
            hashes: Vec::new(),
        }
    }

    /// Adds a user key to the filter being built.
    pub fn add_key(&mut self, user_key: &[u8]) {
        self.hashes.push(hash64(user_key));
    }

    /// Number of keys added since the last `finish`.
    pub fn num_keys(&self) -> usize {
        self.hashes.len()
    }

    /// Builds the filter for the keys added so far and clears the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let k = num_probes(self.bits_per_key);
        let bits = (self.hashes.len() as u64).saturating_mul(self.bits_per_key as u64);
        let num_blocks = bits
            .div_ceil(FILTER_BLOCK_BITS)
            .clamp(1, u32::MAX as u64 / FILTER_BLOCK_BYTES as u64) as u32;
        let mut out = vec![0u8; num_blocks as usize * FILTER_BLOCK_BYTES];
        for &h in &self.hashes {
            let base = block_index(h, num_blocks) * FILTER_BLOCK_BYTES;
            // In bounds: `block_index` is below `num_blocks`, and every bit
            // below `FILTER_BLOCK_BITS`.
            let Some(block) = out.get_mut(base..base + FILTER_BLOCK_BYTES) else {
                continue;
            };
            for_each_bit(h, k, |bit| {
                if let Some(byte) = block.get_mut(bit / 8) {
                    *byte |= 1 << (bit % 8);
                }
                true
            });
        }
        out.push(k);
        put_fixed32(&mut out, num_blocks);
        self.hashes.clear();
        out
    }
}

/// A decoded filter.
pub struct BloomFilter {
    bits: Vec<u8>,
    k: u8,
    num_blocks: u32,
}

impl BloomFilter {
    /// Decodes a filter block; `Error::Corruption` if its trailer (probe
    /// count, block count) is invalid or does not match its length.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<BloomFilter> {
        let (n, k, num_blocks) = {
            let v = BloomView::parse(&bytes)?;
            (v.bits.len(), v.k, v.num_blocks)
        };
        let mut bits = bytes;
        bits.truncate(n);
        Ok(BloomFilter {
            bits,
            k,
            num_blocks,
        })
    }

    /// False means the key is certainly absent.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(hash64(user_key))
    }

    /// Asks for the cache line that [`BloomFilter::may_contain_hash`]`(h)`
    /// will test, without waiting for it (a query that will probe many
    /// tables' filters with one hash starts all their misses at once).
    pub fn prefetch_hash(&self, h: u64) {
        let base = block_index(h, self.num_blocks) * FILTER_BLOCK_BYTES;
        if let Some(b) = self.bits.get(base) {
            crate::mem::prefetch(b);
        }
    }

    /// [`BloomFilter::may_contain`] for a key already hashed with
    /// [`hash64`] (one hash for many filters probed with the same key).
    pub fn may_contain_hash(&self, h: u64) -> bool {
        self.view().may_contain_hash(h)
    }

    /// The filter as a borrowed view.
    pub fn view(&self) -> BloomView<'_> {
        BloomView {
            bits: &self.bits,
            k: self.k,
            num_blocks: self.num_blocks,
        }
    }

    /// Bytes of the bit array.
    pub fn size(&self) -> usize {
        self.bits.len()
    }
}

/// A filter's bit array borrowed from wherever its owner keeps it.
#[derive(Clone, Copy)]
pub struct BloomView<'a> {
    bits: &'a [u8],
    k: u8,
    num_blocks: u32,
}

impl<'a> BloomView<'a> {
    /// The filter encoded in `bytes` (a filter block: bit array, probe
    /// count, block count), borrowed; `Error::Corruption` if its trailer
    /// is invalid or does not match its length.
    pub fn parse(bytes: &'a [u8]) -> Result<BloomView<'a>> {
        let bad = |what: String| Error::corruption(format!("bloom filter: {what}"));
        let Some(n) = bytes.len().checked_sub(FILTER_TRAILER_LEN) else {
            return Err(bad(format!("{} bytes is too short", bytes.len())));
        };
        let (Some(bits), Some((&k, trailer))) =
            (bytes.get(..n), bytes.get(n..).and_then(|t| t.split_first()))
        else {
            return Err(bad("truncated".to_string()));
        };
        let num_blocks = decode_fixed32(trailer).ok_or_else(|| bad("truncated".to_string()))?;
        if k == 0 || k as usize > MAX_PROBES {
            return Err(bad(format!("probe count {k} out of range")));
        }
        if num_blocks == 0 || (num_blocks as u64) * FILTER_BLOCK_BYTES as u64 != n as u64 {
            return Err(bad(format!(
                "{num_blocks} blocks do not match a bit array of {n} bytes"
            )));
        }
        Ok(BloomView {
            bits,
            k,
            num_blocks,
        })
    }

    /// A filter whose parts come from [`BloomView::parse`] of the same
    /// filter (its bit array kept elsewhere by the caller).
    pub fn new(bits: &'a [u8], k: u8, num_blocks: u32) -> BloomView<'a> {
        BloomView {
            bits,
            k,
            num_blocks,
        }
    }

    /// The bit array (without the trailer).
    pub fn bits(&self) -> &'a [u8] {
        self.bits
    }

    /// Probes per key.
    pub fn k(&self) -> u8 {
        self.k
    }

    /// 64-byte blocks of the bit array.
    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    /// False means the key hashed to `h` by [`hash64`] is certainly absent.
    pub fn may_contain_hash(&self, h: u64) -> bool {
        let base = block_index(h, self.num_blocks) * FILTER_BLOCK_BYTES;
        let Some(block) = self.bits.get(base..base + FILTER_BLOCK_BYTES) else {
            return true;
        };
        for_each_bit(h, self.k, |bit| {
            block.get(bit / 8).is_none_or(|b| b & (1 << (bit % 8)) != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(n: usize, bits_per_key: usize) -> BloomFilter {
        let mut b = BloomBuilder::new(bits_per_key);
        for i in 0..n {
            b.add_key(format!("user-key-{i}").as_bytes());
        }
        BloomFilter::from_bytes(b.finish()).unwrap()
    }

    /// A filter contains a hash exactly when every position `probe_bits`
    /// names is set (one-block and multi-block filters).
    #[test]
    fn probe_bits_are_the_positions_a_probe_tests() {
        for (n, bpk) in [(40, 10), (10, 100), (30, 100)] {
            let f = build(n, bpk);
            let v = f.view();
            for i in 0..2000 {
                let h = hash64(format!("probe-{i}").as_bytes());
                let bits = probe_bits(h, v.k(), v.num_blocks());
                assert_eq!(bits.len(), usize::from(v.k()));
                let all = bits.iter().all(|&b| v.bits()[b / 8] & (1 << (b % 8)) != 0);
                assert_eq!(all, v.may_contain_hash(h), "filter ({n}, {bpk}) probe {i}");
            }
        }
    }

    #[test]
    fn no_false_negatives_and_low_fp_rate() {
        let n = 100_000;
        let f = build(n, 10);
        assert_eq!(f.size(), (n * 10).div_ceil(512) * 64);
        for i in 0..n {
            assert!(f.may_contain(format!("user-key-{i}").as_bytes()), "key {i}");
        }
        let probes = 100_000;
        let fps = (0..probes)
            .filter(|i| f.may_contain(format!("absent-{i}").as_bytes()))
            .count();
        let rate = fps as f64 / probes as f64;
        assert!(rate < 0.02, "false-positive rate {rate}");
    }

    #[test]
    fn small_and_empty_filters() {
        let f = build(0, 10);
        assert_eq!(f.size(), 64);
        assert!(!f.may_contain(b"anything"));
        let f = build(3, 10);
        for i in 0..3 {
            assert!(f.may_contain(format!("user-key-{i}").as_bytes()));
        }
        assert_eq!(num_probes(1), 1);
        assert_eq!(num_probes(10), 7);
        assert_eq!(num_probes(100), 30);
    }

    #[test]
    fn hash_is_stable() {
        // The hash is on disk: changing it is a format change.
        assert_eq!(hash64(b""), hash64(b""));
        assert_ne!(hash64(b"a"), hash64(b"a\0"));
        assert_ne!(hash64(b"abcdefgh"), hash64(b"abcdefgh\0"));
        let golden = [hash64(b""), hash64(b"strata"), hash64(b"0123456789abcdef!")];
        assert_eq!(golden, GOLDEN, "{golden:#x?}");
    }

    const GOLDEN: [u64; 3] = [
        0x4a25_018a_e784_8f81,
        0x407f_3506_7ec4_af5f,
        0xdf65_68c2_7ac6_742b,
    ];

    #[test]
    fn bad_bytes_rejected() {
        let mut b = BloomBuilder::new(10);
        b.add_key(b"x");
        let good = b.finish();
        assert!(BloomFilter::from_bytes(good.clone()).is_ok());
        for cut in 0..good.len() {
            assert!(BloomFilter::from_bytes(good[..cut].to_vec()).is_err());
        }
        let n = good.len();
        let mut bad_k = good.clone();
        bad_k[n - 5] = 0;
        assert!(BloomFilter::from_bytes(bad_k.clone()).is_err());
        bad_k[n - 5] = 31;
        assert!(BloomFilter::from_bytes(bad_k).is_err());
        let mut bad_n = good.clone();
        bad_n[n - 4] = 2;
        assert!(BloomFilter::from_bytes(bad_n).is_err());
        let mut zero_n = good;
        zero_n[n - 4..].copy_from_slice(&0u32.to_le_bytes());
        assert!(BloomFilter::from_bytes(zero_n).is_err());
    }
}
