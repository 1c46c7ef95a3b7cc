//! Reads a table file.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::BlockCache;
use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{SeqNo, ValueKind};
use crate::sstable::block::Block;
use crate::sstable::BlockHandle;
use crate::stats::{BlockKind, Counters, ReadPurpose};

/// Contents of the properties block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableProperties {
    pub num_entries: u64,
    pub num_deletions: u64,
    pub num_data_blocks: u64,
    pub smallest_seq: u64,
    pub largest_seq: u64,
    /// Smallest and largest internal keys.
    pub smallest_key: Vec<u8>,
    pub largest_key: Vec<u8>,
    pub raw_key_bytes: u64,
    pub raw_value_bytes: u64,
    pub data_bytes: u64,
}

/// What a table holds for a user key at a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub seq: SeqNo,
    pub kind: ValueKind,
    pub value: Vec<u8>,
}

/// Shared reader state.
#[derive(Clone)]
pub struct TableReadOptions {
    pub block_cache: Option<Arc<BlockCache>>,
    pub counters: Arc<Counters>,
    pub direct_io: bool,
}

/// An open table. Index block, filter, properties and metaindex are loaded
/// at open and pinned; data and named meta blocks are read on demand.
pub struct Table {
    _private: (),
}

impl Table {
    pub fn open(
        path: &Path,
        file_number: u64,
        file_size: u64,
        opts: TableReadOptions,
    ) -> Result<Table> {
        let _ = (path, file_number, file_size, opts);
        todo!("sstable helper")
    }

    pub fn file_number(&self) -> u64 {
        todo!()
    }

    pub fn properties(&self) -> &TableProperties {
        todo!()
    }

    /// Bloom probe; counts a probe and, if false, a negative.
    pub fn key_may_match(&self, user_key: &[u8]) -> bool {
        let _ = user_key;
        todo!()
    }

    /// Newest entry for `user_key` with `seq <= snapshot`, Bloom first.
    pub fn get(&self, user_key: &[u8], snapshot: SeqNo) -> Result<Option<Found>> {
        let _ = (user_key, snapshot);
        todo!()
    }

    /// Batched lookup. `keys` sorted ascending and distinct; `out[i]` is set
    /// for each key found here (left untouched otherwise). Probes the Bloom
    /// filter for every key, then reads each needed data block once.
    pub fn multi_get(
        &self,
        keys: &[&[u8]],
        snapshot: SeqNo,
        out: &mut [Option<Found>],
    ) -> Result<()> {
        let _ = (keys, snapshot, out);
        todo!()
    }

    pub fn iter(self: &Arc<Self>, purpose: ReadPurpose) -> TableIter {
        let _ = purpose;
        todo!()
    }

    /// Reads, verifies and decodes a block; the only place blocks are fetched
    /// (through the block cache for queries), so the counters stay exact.
    pub fn read_block(
        &self,
        handle: BlockHandle,
        kind: BlockKind,
        purpose: ReadPurpose,
    ) -> Result<Arc<Block>> {
        let _ = (handle, kind, purpose);
        todo!()
    }

    /// Decodes the data block at `handle` into (user key, seq, kind, value).
    pub fn read_data_block_entries(
        &self,
        handle: BlockHandle,
    ) -> Result<Vec<(Vec<u8>, SeqNo, ValueKind, Vec<u8>)>> {
        let _ = handle;
        todo!()
    }

    /// Handles of all data blocks, in key order.
    pub fn data_block_handles(&self) -> Result<Vec<BlockHandle>> {
        todo!()
    }

    /// The named meta block added by an observer, read on demand (counted
    /// as a meta block read).
    pub fn meta_block(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let _ = name;
        todo!()
    }

    pub fn meta_block_names(&self) -> Vec<String> {
        todo!()
    }
}

/// Two-level iterator: index block → data blocks.
pub struct TableIter {
    _private: (),
}

impl InternalIterator for TableIter {
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
