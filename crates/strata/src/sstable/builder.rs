//! Writes a table file.

use std::path::Path;

use crate::error::Result;
use crate::hooks::TableObserver;
use crate::options::Compression;
use crate::sstable::TableProperties;

/// Options for building one table.
#[derive(Debug, Clone)]
pub struct TableBuildOptions {
    pub block_size: usize,
    pub restart_interval: usize,
    pub compression: Compression,
    /// 0 = no filter.
    pub bloom_bits_per_key: usize,
}

/// A finished table.
#[derive(Debug, Clone)]
pub struct BuiltTable {
    pub file_size: u64,
    pub properties: TableProperties,
}

/// Writes one table. Entries must be added in strictly increasing
/// internal-key order.
pub struct TableBuilder {
    _private: (),
}

impl TableBuilder {
    /// Creates the file at `path` (must not exist).
    pub fn new(
        path: &Path,
        opts: TableBuildOptions,
        observers: Vec<Box<dyn TableObserver>>,
    ) -> Result<TableBuilder> {
        let _ = (path, opts, observers);
        todo!("sstable helper")
    }

    /// Adds an entry; `Error::InvalidArgument` if out of order, corruption if
    /// the key is not a valid internal key.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let _ = (ikey, value);
        todo!()
    }

    pub fn num_entries(&self) -> u64 {
        todo!()
    }

    /// Bytes written so far plus the pending block.
    pub fn file_size(&self) -> u64 {
        todo!()
    }

    /// Writes meta blocks (filter, properties, observers' blocks),
    /// metaindex, index and footer; fsyncs the file.
    pub fn finish(self) -> Result<BuiltTable> {
        todo!()
    }
}
