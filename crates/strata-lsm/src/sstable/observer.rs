//! What a table builder tells an observer (the extension hooks' table
//! observer, `hooks::EngineHooks::table_observer`) about the table it
//! writes.

use crate::error::Result;
use crate::key::{SeqNo, ValueKind};
use crate::sstable::BlockHandle;

/// One entry as stored: user key, sequence number, kind and value.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    /// The user key.
    pub user_key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNo,
    /// What the entry is.
    pub kind: ValueKind,
    /// The value (empty for a tombstone).
    pub value: &'a [u8],
}

/// Observes one table as it is built. Created per table; dropped without
/// `finish` if the build is abandoned.
pub trait TableObserver: Send {
    /// Called once per entry, in key order, with the final handle of the
    /// data block that holds it.
    fn on_entry(&mut self, entry: &EntryRef<'_>, block: BlockHandle);
    /// Called with every entry of a data block, in key order, before the
    /// block's `on_entry` calls: an observer that looks up something per
    /// entry can start those reads for the whole block at once.
    fn before_block(&mut self, _entries: &[EntryRef<'_>]) {}
    /// Called after the last `on_entry` of a data block.
    fn on_block_finished(&mut self, _block: BlockHandle) {}
    /// Returns named meta blocks to append to the table. Names must be
    /// unique within the table and must not start with `strata.`.
    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>>;

    /// Called once, after [`TableObserver::finish`]: entries of this table
    /// that every reader must treat as absent, as (data block, ordinal of
    /// the entry among the block's entries as delivered to `on_entry`).
    /// They go to the table's immutable obsolete bitmap
    /// (`sstable::obsolete`); reads skip them and the table's next
    /// compaction drops them.
    ///
    /// Contract: mark an entry only if no reader, at any snapshot it can
    /// still read at, needs it; skipping an entry exposes the next older
    /// version of its user key, if any.
    fn obsolete_entries(&mut self) -> Vec<(BlockHandle, u32)> {
        Vec::new()
    }
}
