use std::sync::Arc;

use crate::sstable::block::Block;

/// Identifies a block: table file number and block offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub file_number: u64,
    pub offset: u64,
}

/// Sharded LRU cache of decoded blocks, charged by block size.
pub struct BlockCache {
    _private: (),
}

impl BlockCache {
    pub fn new(capacity_bytes: usize) -> BlockCache {
        let _ = capacity_bytes;
        todo!("sstable helper")
    }
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Block>> {
        let _ = key;
        todo!()
    }
    pub fn insert(&self, key: CacheKey, block: Arc<Block>) {
        let _ = (key, block);
        todo!()
    }
    /// Bytes currently charged.
    pub fn usage(&self) -> u64 {
        todo!()
    }
}
