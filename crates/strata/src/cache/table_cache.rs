use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Result;
use crate::sstable::{Table, TableReadOptions};

/// Bounded LRU of open tables keyed by file number.
pub struct TableCache {
    _private: (),
}

impl TableCache {
    pub fn new(dir: PathBuf, capacity: usize, opts: TableReadOptions) -> TableCache {
        let _ = (dir, capacity, opts);
        todo!("sstable helper")
    }
    /// Opens (or returns the cached) table `file_number` of `file_size` bytes.
    pub fn get(&self, file_number: u64, file_size: u64) -> Result<Arc<Table>> {
        let _ = (file_number, file_size);
        todo!()
    }
    /// Forgets a table (its file is being deleted).
    pub fn evict(&self, file_number: u64) {
        let _ = file_number;
        todo!()
    }
}
