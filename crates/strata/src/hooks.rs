//! Extension hooks: how index strategies observe the engine.
//!
//! An extension implements [`EngineHooks`] and is registered in
//! [`crate::Options::hooks`]. The engine calls it at four points:
//!
//! 1. **Table-builder observer** ([`EngineHooks::table_observer`]): for every
//!    table written by a flush or a compaction, one [`TableObserver`] sees
//!    every entry with the handle of the data block it landed in (entries are
//!    delivered when their block is finished, so the handle is final), is told
//!    when each data block is finished, and at the end returns named meta
//!    blocks that are appended to the table (NEXT's secondary index blocks,
//!    the Embedded index's per-block filters and zone maps).
//! 2. **Dropped-versions stream** ([`EngineHooks::compaction_observer`]): every
//!    entry a compaction discards (a version shadowed by a newer one that no
//!    snapshot needs, or a tombstone dropped at the bottom level), with its
//!    sequence number (DELI's repair).
//! 3. **Version install** ([`EngineHooks::on_install`]): the files added and
//!    removed by a flush or compaction, called under the version lock before
//!    the manifest write; the returned payload is written in the *same*
//!    manifest record, and the returned state is stored in the new
//!    [`crate::version::Version`], so a reader that pins a version sees the
//!    extension state that matches it exactly (NEXT's global index).
//!    On open, [`EngineHooks::on_recover`] receives the payloads in manifest
//!    order and returns the state of the recovered version.
//! 4. **Read a data block by handle**: [`crate::Db::read_data_block`].
//!
//! Contracts: hooks run on background threads; they must not call back into
//! the `Db` (deadlock) and should be quick. An error from `finish` or
//! `on_install` fails the flush/compaction, which the engine reports as a
//! background error.

use std::any::Any;
use std::sync::Arc;

use crate::error::Result;
use crate::key::{SeqNo, ValueKind};
use crate::sstable::BlockHandle;
use crate::version::FileMetaData;

/// Why a table is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableReason {
    Flush,
    Compaction,
}

/// Describes a table about to be written.
#[derive(Debug, Clone)]
pub struct TableContext {
    pub file_number: u64,
    /// Level the table is written to (flushes write to L0).
    pub level: usize,
    pub reason: TableReason,
    /// The compaction's input tables (empty for a flush).
    pub input_files: Vec<u64>,
}

/// One entry as stored: user key, sequence number, kind and value.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    pub user_key: &'a [u8],
    pub seq: SeqNo,
    pub kind: ValueKind,
    pub value: &'a [u8],
}

/// Observes one table as it is built. Created per table; dropped without
/// `finish` if the build is abandoned.
pub trait TableObserver: Send {
    /// Called once per entry, in key order, with the final handle of the
    /// data block that holds it.
    fn on_entry(&mut self, entry: &EntryRef<'_>, block: BlockHandle);
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

/// Describes one compaction.
#[derive(Debug, Clone)]
pub struct CompactionContext {
    /// Input level; outputs go to `level + 1`.
    pub level: usize,
    pub input_files: Vec<u64>,
    /// True when the output level is the bottom of the tree for the
    /// compacted key range (tombstones are dropped).
    pub bottommost: bool,
}

/// Why a compaction discarded an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A newer version of the key exists and no live snapshot can see this one.
    Shadowed,
    /// A tombstone reached the bottom level with nothing older to hide.
    ObsoleteTombstone,
    /// Combined by the merge operator into the newer operand of its key
    /// that every live snapshot sees (see [`crate::merge`]).
    Merged,
}

/// Receives the dropped-versions stream of one compaction.
pub trait CompactionObserver: Send {
    fn on_dropped(&mut self, entry: &EntryRef<'_>, reason: DropReason);
    /// Called when the compaction's outputs are written, before install.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Why a version is being installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallReason {
    Flush,
    Compaction,
    /// Tables added by a caller outside flush/compaction (not used yet).
    External,
}

/// The change being installed.
#[derive(Debug)]
pub struct InstallEvent<'a> {
    pub reason: InstallReason,
    /// (level, file) pairs added.
    pub added: &'a [(usize, Arc<FileMetaData>)],
    /// (level, file number) pairs removed.
    pub removed: &'a [(usize, u64)],
    /// The extension's state in the version being replaced.
    pub previous: Option<&'a ExtState>,
}

/// Immutable extension state carried by a version.
pub type ExtState = Arc<dyn Any + Send + Sync>;

/// What an install hook contributes to the new version.
#[derive(Default)]
pub struct InstallOutcome {
    /// Appended to the same manifest record as the file changes.
    pub payload: Option<Vec<u8>>,
    /// The extension's state in the new version (`None` keeps the previous).
    pub state: Option<ExtState>,
}

/// An engine extension. See the module documentation for when each method
/// is called.
pub trait EngineHooks: Send + Sync {
    /// Unique name; payloads are stored under it in the manifest.
    fn name(&self) -> &str;

    fn table_observer(&self, _ctx: &TableContext) -> Option<Box<dyn TableObserver>> {
        None
    }

    fn compaction_observer(&self, _ctx: &CompactionContext) -> Option<Box<dyn CompactionObserver>> {
        None
    }

    fn on_install(&self, _event: &InstallEvent<'_>) -> Result<InstallOutcome> {
        Ok(InstallOutcome::default())
    }

    /// Rebuilds the extension state at open from the payloads this hook
    /// wrote, oldest first, and the live files of the recovered version.
    fn on_recover(
        &self,
        _payloads: &[Vec<u8>],
        _files: &[(usize, Arc<FileMetaData>)],
    ) -> Result<Option<ExtState>> {
        Ok(None)
    }
}
