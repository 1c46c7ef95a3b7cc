//! Where a record lives on disk, and the bare cost of reading it there:
//! measurement APIs for benchmarks that report latencies against the
//! physical minimum of a query (the distinct data blocks holding its
//! results, each read once and checksummed, outside every cache).
//!
//! Neither call touches the block cache or the read counters, so they can
//! run between measured operations without changing what those measure.

use crate::db::Db;
use crate::error::Result;
use crate::key::SeqNo;
use crate::sstable::BlockHandle;

/// A data block of a live table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockLocation {
    /// Table file number.
    pub file_number: u64,
    /// Size of the table file (to open it through the table cache).
    pub file_size: u64,
    /// The block within the table.
    pub handle: BlockHandle,
}

impl Db {
    /// The data block of the current version holding exactly the entry
    /// `(user_key, seq)` (as returned with a read's sequence number), or
    /// `None` if no table holds it (it is in a memtable, or was compacted
    /// away). Visits the tables whose key and sequence ranges cover the
    /// entry, newest first; each candidate's data block is read (bypassing
    /// the block cache and counters) to confirm the entry is there.
    pub fn locate_entry(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<BlockLocation>> {
        let version = self.current_version();
        for f in version.files_for_key(user_key) {
            if seq < f.smallest_seq || seq > f.largest_seq {
                continue;
            }
            let t = self.table_cache().get(f.number, f.file_size)?;
            if let Some(handle) = t.locate(user_key, seq)? {
                return Ok(Some(BlockLocation {
                    file_number: f.number,
                    file_size: f.file_size,
                    handle,
                }));
            }
        }
        Ok(None)
    }

    /// Reads the block at `loc` the way the table reads data blocks (one
    /// positional read) and verifies its checksum, bypassing the block cache
    /// and the counters; returns the bytes read. The table must still be
    /// live (an I/O error if its file is gone).
    pub fn read_block_verified(&self, loc: &BlockLocation) -> Result<u64> {
        let t = self.table_cache().get(loc.file_number, loc.file_size)?;
        t.read_block_verified(loc.handle)
    }
}
