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
//! 4. **Batches** ([`EngineHooks::before_batch`]): the write-group leader
//!    hands every batch, with its sequence numbers assigned and after its WAL
//!    append, to each hook before the batch enters the memtable, with a
//!    [`BatchContext`] that looks up the records the batch overwrites; the
//!    guard a hook returns is held until the batch's last sequence number is
//!    published (synchronous index maintenance). At open, every batch
//!    replayed from the WAL is handed over the same way
//!    ([`BatchContext::recovering`]). A hook that
//!    [wants it](EngineHooks::wants_shadowed) sees the batch again right
//!    after the insert, still before it is published
//!    ([`EngineHooks::after_insert`]), with the entry each operation
//!    shadowed in the active memtable (found by the insert's own search).
//! 5. **Memtable side structures** ([`EngineHooks::memtable_side`]): a
//!    structure that sees every entry added to a new memtable.
//! 6. **Flush** ([`EngineHooks::before_flush_install`]): after the WAL is
//!    durable and before a flush retires WAL files (extensions that keep
//!    their own unlogged structures make them durable then).
//! 7. **Attach** ([`EngineHooks::attach`]): once, at the start of open, the
//!    engine's shared parts an extension may keep ([`EngineHandle`]).
//!
//! Reading a data block by handle: [`crate::Db::read_data_block`].
//!
//! Contracts: hooks run on background threads (1–3, 6) or on the write
//! leader (4); they must not call back into the `Db` (deadlock) and should
//! be quick. An error from `finish` or `on_install` fails the
//! flush/compaction, which the engine reports as a background error; an
//! error from `before_batch` or `after_insert` fails the write and makes
//! the database read-only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::batch::WriteBatch;
use crate::cache::TableCache;
use crate::error::Result;
use crate::key::SeqNo;
use crate::memtable::{MemSide, MemTable, Shadowed};
use crate::merge::MergeOperator;
use crate::version::{FileMetaData, Version, VersionExtension};

pub use crate::sstable::observer::{EntryRef, TableObserver};
pub use crate::version::ext::{ExtState, InstallEvent, InstallOutcome, InstallReason};

/// Why a table is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableReason {
    /// A memtable flush (to L0).
    Flush,
    /// A compaction output.
    Compaction,
}

/// Describes a table about to be written.
#[derive(Clone)]
pub struct TableContext {
    /// File number of the table.
    pub file_number: u64,
    /// Level the table is written to (flushes write to L0).
    pub level: usize,
    /// Why it is written (flush or compaction).
    pub reason: TableReason,
    /// The compaction's input tables (empty for a flush).
    pub input_files: Vec<u64>,
    /// The compaction's input tables' metadata (empty for a flush).
    pub inputs: Vec<Arc<FileMetaData>>,
    /// A compaction: state extensions keep for the whole compaction,
    /// shared by every table it writes (`None` for a flush).
    pub scratch: Option<Arc<CompactionScratch>>,
    /// A compaction: the cache its input tables are read through (their
    /// meta blocks, for instance).
    pub tables: Option<Arc<TableCache>>,
    /// A flush: the side structure of the memtable being flushed (what
    /// the extension that attached it computed from each entry as it was
    /// written), so that the table's observer need not compute it again.
    pub side: Option<Arc<dyn MemSide>>,
}

/// Per-compaction state of extensions, by name (see
/// [`TableContext::scratch`]): dropped when the compaction ends.
#[derive(Default)]
pub struct CompactionScratch {
    slots: Mutex<BTreeMap<String, Arc<dyn std::any::Any + Send + Sync>>>,
}

impl CompactionScratch {
    /// The value stored under `name`, made by `make` the first time.
    pub fn get_or_insert_with<T: std::any::Any + Send + Sync>(
        &self,
        name: &str,
        make: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        let mut slots = crate::sync::lock(&self.slots);
        let v = slots
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(make()))
            .clone();
        v.downcast::<T>().ok()
    }
}

impl std::fmt::Debug for TableContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableContext")
            .field("file_number", &self.file_number)
            .field("level", &self.level)
            .field("reason", &self.reason)
            .field("input_files", &self.input_files)
            .field("side", &self.side.is_some())
            .finish()
    }
}

/// Describes one compaction.
#[derive(Debug, Clone)]
pub struct CompactionContext {
    /// Input level; outputs go to `level + 1`.
    pub level: usize,
    /// File numbers of the input tables, at both levels.
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
    /// Called for every input entry the compaction does not write, in
    /// input order, with why it was dropped.
    fn on_dropped(&mut self, entry: &EntryRef<'_>, reason: DropReason);
    /// Called when the compaction's outputs are written, before install.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// An engine extension. See the module documentation for when each method
/// is called.
pub trait EngineHooks: Send + Sync {
    /// Unique name; payloads are stored under it in the manifest.
    fn name(&self) -> &str;

    /// For every table written (flush or compaction): an observer that sees
    /// its entries and may add meta blocks; `None` (the default) to skip it.
    fn table_observer(&self, _ctx: &TableContext) -> Option<Box<dyn TableObserver>> {
        None
    }

    /// For every compaction: an observer of its dropped versions; `None`
    /// (the default) to skip it.
    fn compaction_observer(&self, _ctx: &CompactionContext) -> Option<Box<dyn CompactionObserver>> {
        None
    }

    /// Called under the version lock before a new version's MANIFEST record
    /// is written; returns the extension's state for that version. An error
    /// abandons the install.
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

    /// Called once at the start of open, before recovery.
    fn attach(&self, _engine: &EngineHandle) {}

    /// A side structure for a new memtable. At most one hook of a database
    /// may return one (the first that does is used).
    fn memtable_side(&self) -> Option<Arc<dyn MemSide>> {
        None
    }

    /// `Some(reason)` refuses batches with merge operands (an extension
    /// that cannot interpret them); the write fails with the reason.
    fn refuses_merge_operands(&self) -> Option<String> {
        None
    }

    /// True if [`EngineHooks::before_batch`] has work to do (checked once per
    /// write group; false spares the write path building its context).
    fn wants_batches(&self) -> bool {
        false
    }

    /// Sees `batch` (sequence numbers assigned) before it enters the
    /// memtable; the returned guard is dropped once the batch's last
    /// sequence number is published (or the write failed). Only one batch
    /// is handed over at a time.
    fn before_batch<'a>(
        &'a self,
        _batch: &WriteBatch,
        _cx: &BatchContext<'_>,
    ) -> Result<Option<BatchGuard<'a>>> {
        Ok(None)
    }

    /// True if [`EngineHooks::after_insert`] has work to do (checked per
    /// write group, among hooks that want batches; the insert then records
    /// what each operation shadows).
    fn wants_shadowed(&self) -> bool {
        false
    }

    /// Sees `batch` after it entered the active memtable, before its last
    /// sequence number is published (after [`EngineHooks::before_batch`]);
    /// the returned guard is held as `before_batch`'s is. `shadowed[i]` is
    /// the entry of operation `i`'s key that its new entry shadows in the
    /// active memtable — the newest one there, an earlier operation of the
    /// batch included — with its value in place, or `None`: then the
    /// key's newest entry before the batch, if any, is in the older
    /// components `cx` presents (immutable memtables newest first, the
    /// version), where [`BatchContext::current_seqs`] finds it. The
    /// insert's own search answers for the active memtable: no second
    /// search of it.
    fn after_insert<'a>(
        &'a self,
        _batch: &WriteBatch,
        _shadowed: &[Option<Shadowed<'_>>],
        _cx: &BatchContext<'_>,
    ) -> Result<Option<BatchGuard<'a>>> {
        Ok(None)
    }

    /// Called after the WAL is durable and before a flush installs (see the
    /// module documentation).
    fn before_flush_install(&self) -> Result<()> {
        Ok(())
    }

    /// Called before the tables of every flush and compaction are
    /// installed, after the engine synced its own WAL (engines with
    /// extensions do). An extension whose tables may hold state derived
    /// from writes of another database's WAL (a secondary tree) makes that
    /// WAL durable here, so that no durable table is ahead of the durable
    /// writes it derives from.
    fn before_tables_install(&self) -> Result<()> {
        Ok(())
    }

    /// True if [`EngineHooks::before_flush_install`] has work to do (the
    /// engine then syncs the WAL first).
    fn wants_flush_notice(&self) -> bool {
        false
    }
}

/// Presents an extension to the version set.
pub(crate) struct AsVersionExtension(pub Arc<dyn EngineHooks>);

impl VersionExtension for AsVersionExtension {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn on_install(&self, event: &InstallEvent<'_>) -> Result<InstallOutcome> {
        self.0.on_install(event)
    }

    fn on_recover(
        &self,
        payloads: &[Vec<u8>],
        files: &[(usize, Arc<FileMetaData>)],
    ) -> Result<Option<ExtState>> {
        self.0.on_recover(payloads, files)
    }
}

/// Anything a hook holds while a batch is published (see
/// [`EngineHooks::before_batch`]).
pub trait Held {}
impl<T> Held for T {}

/// A guard returned by [`EngineHooks::before_batch`] (or
/// [`EngineHooks::after_insert`]), dropped once the batch is published: a
/// write lock's guard as it is (no allocation a batch), or anything boxed.
#[non_exhaustive]
pub enum BatchGuard<'a> {
    /// A held write lock.
    Write(std::sync::RwLockWriteGuard<'a, ()>),
    /// Anything else.
    Held(Box<dyn Held + 'a>),
}

impl<'a> From<std::sync::RwLockWriteGuard<'a, ()>> for BatchGuard<'a> {
    fn from(g: std::sync::RwLockWriteGuard<'a, ()>) -> BatchGuard<'a> {
        BatchGuard::Write(g)
    }
}

pub use crate::read::Versioned;

/// What a batch hook may read: the components the batch will shadow.
#[derive(Clone, Copy)]
pub struct BatchContext<'a> {
    pub(crate) tables: &'a TableCache,
    pub(crate) merge_operator: Option<&'a Arc<dyn MergeOperator>>,
    /// Memtables newest first.
    pub(crate) mems: &'a [Arc<MemTable>],
    pub(crate) version: &'a Version,
    pub(crate) recovering: bool,
}

impl BatchContext<'_> {
    /// True during WAL replay at open (no reader or writer runs yet).
    pub fn recovering(&self) -> bool {
        self.recovering
    }

    /// The newest record of each key before the batch (`None`: absent or
    /// deleted), in the order of `keys`: one batched lookup.
    pub fn current(&self, keys: &[&[u8]], before: SeqNo) -> Result<Vec<Option<Versioned>>> {
        crate::read::multi_get_components(
            self.tables,
            self.merge_operator,
            self.mems,
            self.version,
            keys,
            before,
        )
    }

    /// The sequence number of each key's newest live version before the
    /// batch (`None`: absent or deleted), in the order of `keys`: where
    /// [`BatchContext::current`] finds the records, without copying them.
    /// The sequence numbers are `current`'s, except that a key whose newest
    /// entry is a merge operand always counts as live here.
    pub fn current_seqs(&self, keys: &[&[u8]], before: SeqNo) -> Result<Vec<Option<SeqNo>>> {
        crate::read::newest_seqs_components(
            self.tables,
            self.merge_operator,
            self.mems,
            self.version,
            keys,
            before,
        )
    }

    /// May `key` have a version in the components? Exact for memtables; key
    /// range and Bloom filter for tables (no data I/O). A `false` is
    /// certain.
    pub fn may_exist(&self, key: &[u8]) -> bool {
        crate::read::may_exist(self.tables, key, self.mems, self.version, true)
    }

    /// As [`BatchContext::may_exist`], but memtables answer by their key
    /// filters too, without a search: a `true` may be wrong for any
    /// component. For callers to whom a false `true` costs little (a
    /// range filter's deletion mark that deletes nothing), it saves a
    /// skiplist search whenever an immutable memtable holds the key.
    pub fn may_exist_by_filters(&self, key: &[u8]) -> bool {
        crate::read::may_exist(self.tables, key, self.mems, self.version, false)
    }
}

/// Names the host of a hosted engine (see [`crate::host`]): the handle
/// its host gives its extensions, set when the host attaches them, before
/// any hosted engine opens. See [`crate::Options::host`].
pub type HostRef = Arc<std::sync::OnceLock<EngineHandle>>;

/// The engine's shared parts an extension may keep (see
/// [`EngineHooks::attach`]). Holds no reference to the database itself, so
/// an extension keeping it never keeps the database open.
#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) tables: Arc<TableCache>,
    pub(crate) snapshots: Arc<Mutex<crate::read::SnapshotList>>,
    pub(crate) last_sequence: Arc<AtomicU64>,
    pub(crate) log: Arc<Mutex<Option<crate::wal::LogWriter>>>,
    /// The engines this one hosts (see [`crate::host`]).
    pub(crate) hosted: Arc<crate::host::HostedSet>,
}

impl EngineHandle {
    /// The table cache (reading meta blocks of live tables).
    pub fn tables(&self) -> &Arc<TableCache> {
        &self.tables
    }

    /// The oldest sequence number a reader may read at: the oldest live
    /// snapshot, else the last published sequence number.
    pub fn oldest_readable(&self) -> SeqNo {
        crate::read::oldest_readable(&self.snapshots, &self.last_sequence)
    }

    /// The last published sequence number.
    pub fn last_sequence(&self) -> SeqNo {
        self.last_sequence.load(Ordering::SeqCst)
    }

    /// Makes every write appended to the database's WAL so far durable
    /// (nothing before the WAL exists, at the start of open).
    pub fn sync_wal(&self) -> Result<()> {
        match crate::sync::lock(&self.log).as_mut() {
            Some(log) => log.sync(),
            None => Ok(()),
        }
    }
}
