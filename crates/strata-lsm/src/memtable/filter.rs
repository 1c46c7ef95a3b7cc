//! A Bloom filter of the user keys inserted into one memtable, so that a
//! lookup of a key the memtable does not hold (the common case: a point
//! read served by a table, or the existence check of an insert) skips the
//! skiplist search (~1.3 k instructions in a 64 MiB memtable) for a hash
//! and one word load. RocksDB's `memtable_whole_key_filtering` is the
//! same idea.
//!
//! Register-blocked: a key's 64-bit hash ([`crate::sstable::filter::hash64`])
//! picks one 64-bit word with its upper half and sets [`PROBES`] bits of
//! that word chosen by its lower bits, so an insert is one atomic OR and a
//! probe one load. The filter lives in memory only (a memtable is rebuilt
//! from the WAL, and its filter with it).
//!
//! Contract: after `insert(k)` returns, `may_contain(k)` is true for every
//! thread that has seen the write published (the write path publishes a
//! batch's sequence number with a `SeqCst` store after inserting it, and
//! readers load it before probing). A `false` is certain; a `true` may be
//! wrong.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sstable::filter::hash64;

/// Bits set per key inside its word.
const PROBES: u32 = 4;

/// Smallest filter, in 64-bit words (8 KiB).
const MIN_WORDS: usize = 1 << 10;

pub(crate) struct KeyFilter {
    words: Box<[AtomicU64]>,
    /// `words.len() - 1` (the length is a power of two).
    mask: usize,
}

impl KeyFilter {
    /// A filter of about `bytes` bytes (rounded up to a power of two, at
    /// least 8 KiB).
    pub fn with_bytes(bytes: usize) -> KeyFilter {
        let n = (bytes / 8).max(MIN_WORDS).next_power_of_two();
        KeyFilter {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n - 1,
        }
    }

    /// The word of hash `h` and the bits the key sets in it.
    fn locate(&self, h: u64) -> (Option<&AtomicU64>, u64) {
        let word = self.words.get((h >> 32) as usize & self.mask);
        let mut bits = 0u64;
        for i in 0..PROBES {
            bits |= 1 << ((h >> (i * 6)) & 63);
        }
        (word, bits)
    }

    pub fn insert(&self, user_key: &[u8]) {
        if let (Some(w), bits) = self.locate(hash64(user_key)) {
            w.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Asks for the line `insert(user_key)` will change: the filter is
    /// probed at random (about a MiB for a 64 MiB memtable), and the
    /// insert's atomic OR waits for its line.
    pub fn prefetch(&self, user_key: &[u8]) {
        if let (Some(w), _) = self.locate(hash64(user_key)) {
            crate::mem::prefetch(w);
        }
    }

    /// False if `user_key` was certainly never inserted.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        match self.locate(hash64(user_key)) {
            (Some(w), bits) => w.load(Ordering::Relaxed) & bits == bits,
            (None, _) => true,
        }
    }

    /// Bytes of the bit array.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_keys_are_found_and_most_others_are_not() {
        let f = KeyFilter::with_bytes(64 << 10);
        assert_eq!(f.bytes(), 64 << 10);
        for i in 0..20_000u32 {
            f.insert(format!("key{i:08}").as_bytes());
        }
        for i in 0..20_000u32 {
            assert!(f.may_contain(format!("key{i:08}").as_bytes()), "{i}");
        }
        // 26 bits per key: a few percent of false positives at most.
        let fp = (20_000..40_000u32)
            .filter(|i| f.may_contain(format!("key{i:08}").as_bytes()))
            .count();
        assert!(fp < 1_000, "{fp} false positives of 20000");
        assert!(!KeyFilter::with_bytes(0).may_contain(b"absent"));
        assert_eq!(KeyFilter::with_bytes(0).bytes(), MIN_WORDS * 8);
    }
}
