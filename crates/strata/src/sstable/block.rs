//! Prefix-compressed blocks with restart points (LevelDB block format).

use std::cmp::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::iter::InternalIterator;

/// Key comparator used by a block iterator.
pub type KeyCmp = fn(&[u8], &[u8]) -> Ordering;

/// A decoded (decompressed, checksum-verified) block.
pub struct Block {
    _private: (),
}

impl Block {
    /// Wraps block contents (without trailer); `Error::Corruption` if the
    /// restart array is malformed.
    pub fn new(contents: Vec<u8>) -> Result<Block> {
        let _ = contents;
        todo!("sstable helper")
    }

    /// Bytes of contents (the cache charge).
    pub fn size(&self) -> usize {
        todo!("sstable helper")
    }

    /// A cursor ordered by `cmp` (internal-key order for data and index
    /// blocks, bytewise for the metaindex).
    pub fn iter(self: &Arc<Self>, cmp: KeyCmp) -> BlockIter {
        let _ = cmp;
        todo!("sstable helper")
    }
}

/// Iterator over one block. Corrupt entries make it invalid with an error.
pub struct BlockIter {
    _private: (),
}

impl InternalIterator for BlockIter {
    fn valid(&self) -> bool {
        todo!()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        todo!()
    }
    fn seek(&mut self, _target: &[u8]) -> Result<()> {
        todo!()
    }
    fn next(&mut self) -> Result<()> {
        todo!()
    }
    fn key(&self) -> &[u8] {
        todo!()
    }
    fn value(&self) -> &[u8] {
        todo!()
    }
}

/// Builds one block. Keys must be added in increasing order.
pub struct BlockBuilder {
    _private: (),
}

impl BlockBuilder {
    pub fn new(restart_interval: usize) -> Self {
        let _ = restart_interval;
        todo!("sstable helper")
    }
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let _ = (key, value);
        todo!()
    }
    /// Size of the block if finished now.
    pub fn size_estimate(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    /// Appends the restart array and returns the contents.
    pub fn finish(&mut self) -> &[u8] {
        todo!()
    }
    pub fn reset(&mut self) {
        todo!()
    }
}
