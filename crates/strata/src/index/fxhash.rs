//! A fast, non-cryptographic hasher for primary keys in in-memory maps
//! (the update memo, PERSEID's validation tables, per-batch key sets).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The multiplicative hash of rustc (`FxHash`) with a finalizer: primary
/// keys are hashed
/// on every write and every validated entry, where SipHash cost more than
/// the rest of a lookup. Not DoS-resistant: keys are the application's.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        if let Some(dst) = w.get_mut(..rest.len()) {
            dst.copy_from_slice(rest);
        }
        self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    /// The state's high bits depend on every input bit, its low bits do
    /// not (a product's low bits see only the operands' low bits), and
    /// the table indexes buckets by the low bits: a murmur3 finalizer
    /// spreads the high bits down.
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

/// Bytes of a hash map holding `capacity` items of `item` bytes (about
/// 8/7 buckets an item, plus a control byte each), for DRAM estimates.
pub(crate) fn map_bytes(capacity: usize, item: usize) -> usize {
    capacity * 8 / 7 * (item + 1)
}
