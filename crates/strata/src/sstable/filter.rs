//! Cache-line-blocked Bloom filter over user keys (one per table).

use crate::error::Result;

/// Accumulates key hashes and builds the filter bytes.
pub struct BloomBuilder {
    _private: (),
}

impl BloomBuilder {
    pub fn new(bits_per_key: usize) -> Self {
        let _ = bits_per_key;
        todo!("sstable helper")
    }
    pub fn add_key(&mut self, user_key: &[u8]) {
        let _ = user_key;
        todo!()
    }
    pub fn finish(&mut self) -> Vec<u8> {
        todo!()
    }
}

/// A decoded filter.
pub struct BloomFilter {
    _private: (),
}

impl BloomFilter {
    pub fn from_bytes(bytes: Vec<u8>) -> Result<BloomFilter> {
        let _ = bytes;
        todo!("sstable helper")
    }
    /// False means the key is certainly absent.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        let _ = user_key;
        todo!()
    }
}
