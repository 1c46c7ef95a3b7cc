//! The one interface between the index framework ([`super::IndexManager`])
//! and every strategy, and the registry that opens a strategy by kind.
//!
//! A strategy is one module implementing [`IndexStrategy`]: `next`
//! (NEXT), `embedded` (LevelDB++ §3), `memory` (the Eager baseline),
//! `composite` (Luo & Carey §3–4), `deli` (DELI), `posting`
//! (LevelDB++ §4, eager and lazy) and `filter` (Luo & Carey §3 range
//! filters). The framework parses each record's JSON
//! once, routes the engine's events to the strategies that ask for them
//! ([`WritePath`], [`IndexStrategy::table_builder`],
//! [`IndexStrategy::wants_dropped`]), carries each strategy's per-version
//! state with the version, and persists definitions.
//!
//! Calling contract (the manager guarantees it):
//! * [`IndexStrategy::apply`] (strategies with [`WritePath::Sync`]) is
//!   called by the primary's write-group leader for every batch, before
//!   the batch enters the memtable and while the manager's sync guard is
//!   held for writing, which the leader releases only after publishing the
//!   batch's last sequence number. Only one `apply` (or replay, or build)
//!   runs at a time.
//! * [`WritePath::Tables`] strategies see writes through the memtable side
//!   structure and the tables built from it: [`IndexStrategy::table_builder`]
//!   for every table written (flush or compaction), then
//!   [`IndexStrategy::on_install`] when the table's version is installed.
//! * [`IndexStrategy::query`] runs at the snapshot of its [`QueryCx`]; a
//!   strategy with a structure of its own pins it with
//!   [`QueryCx::pin_with`], which holds the sync guard's read side while it
//!   pins the primary snapshot, so the pinned views reflect exactly the
//!   writes up to that snapshot.
//! * [`IndexStrategy::flush`] is called before the primary installs a
//!   flush, after the primary fsynced its WAL.

use std::any::Any;

use super::fxhash::FastMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use strata_lsm::cache::TableCache;
use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::{InstallEvent, TableContext};
use strata_lsm::key::SeqNo;
use strata_lsm::sstable::BlockHandle;
use strata_lsm::version::{FileMetaData, Version};
use strata_lsm::{Snapshot, Versioned};

use super::def::{Attrs, IndexMeta};
use super::memo::MemoShards;
use super::sidefile::SideFiles;
use super::stored::StoredValues;
use super::tree::IndexTree;
use super::value::{IndexValue, KeyType, Predicate};
use super::{
    Hit, Hits, IndexSpec, IndexStats, OpRef, QueryOptions, QueryProfile, QueryView, SyncGate,
};

/// Every strategy, by the name [`IndexSpec::strategy`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StrategyKind {
    /// `next` (the default): per-table secondary blocks and a global
    /// index, validated by the update memo (NEXT §3–4).
    Next,
    /// `memory`: every entry in RAM, maintained synchronously, rebuilt by a
    /// scan at every open (the Eager baseline).
    Memory,
    /// `embedded`: per-table zone maps and filters, validated by GetLite
    /// (LevelDB++ §3).
    Embedded,
    /// `composite`: a stand-alone secondary tree of (attribute, key)
    /// entries (Luo & Carey §3–4).
    Composite,
    /// `deli`: a stand-alone tree maintained blindly, repaired from
    /// compactions' dropped versions and on read (DELI).
    Deli,
    /// `posting-eager`: stand-alone posting lists, read-modify-write on
    /// every update (LevelDB++ §4, Eager).
    PostingEager,
    /// `posting-lazy`: stand-alone posting lists appended with merge
    /// operands (LevelDB++ §4, Lazy).
    PostingLazy,
    /// `filter`: a range filter (min/max, bounding box) per component;
    /// queries scan the components whose filter intersects the predicate
    /// (Luo & Carey §3).
    Filter,
    /// `perseid`: a PS-Tree in a page file of its own, maintained blindly
    /// and validated by hybrid hash tables (PERSEID §4.2–4.3).
    Perseid,
}

impl StrategyKind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [StrategyKind; 9] = [
        StrategyKind::Next,
        StrategyKind::Memory,
        StrategyKind::Embedded,
        StrategyKind::Composite,
        StrategyKind::Deli,
        StrategyKind::PostingEager,
        StrategyKind::PostingLazy,
        StrategyKind::Filter,
        StrategyKind::Perseid,
    ];

    /// The name used in [`IndexSpec::strategy`], the CLI and the MANIFEST.
    pub const fn name(self) -> &'static str {
        match self {
            StrategyKind::Next => "next",
            StrategyKind::Memory => "memory",
            StrategyKind::Embedded => "embedded",
            StrategyKind::Composite => "composite",
            StrategyKind::Deli => "deli",
            StrategyKind::PostingEager => "posting-eager",
            StrategyKind::PostingLazy => "posting-lazy",
            StrategyKind::Filter => "filter",
            StrategyKind::Perseid => "perseid",
        }
    }

    /// The kind named `name`; a clear error listing the names otherwise.
    pub fn parse(name: &str) -> Result<StrategyKind> {
        StrategyKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = StrategyKind::ALL.iter().map(|k| k.name()).collect();
                Error::invalid(format!(
                    "unknown index strategy {name:?} (available: {})",
                    names.join(", ")
                ))
            })
    }
}

/// What a strategy is opened with.
pub(crate) struct OpenCx<'a> {
    pub id: u32,
    pub spec: &'a IndexSpec,
    /// The spec's parameters, in order.
    pub params: &'a [(String, String)],
    /// `index-<id>/` in the database directory (stand-alone trees).
    pub dir: &'a std::path::Path,
    /// Options of stand-alone trees.
    pub tree_opts: &'a strata_lsm::Options,
    pub tables: &'a Arc<TableCache>,
    pub gate: &'a Arc<SyncGate>,
    /// The open per-table index files of online builds
    /// ([`BuildMethod::PerTable`]): where a table that lacks this index's
    /// meta blocks may have them instead.
    pub sides: &'a Arc<SideFiles>,
    /// The primary's handle (WAL syncs of strategies with files of their
    /// own).
    pub primary: &'a super::tree::PrimaryHandle,
}

/// How writes reach a strategy's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WritePath {
    /// Through the memtable side structure and per-table structures built
    /// while tables are written (NEXT, embedded).
    Tables,
    /// [`IndexStrategy::apply`] by the write leader, synchronously
    /// (`memory` and the stand-alone trees).
    Sync,
}

/// How an index is built over data that existed before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BuildMethod {
    /// Rewrite every table (a full compaction) so that each carries the
    /// index's structures: for a strategy with table structures but no
    /// [`IndexStrategy::side_builder`] (`filter`, whose per-table blocks
    /// also carry what compaction inputs recorded;
    /// `Db::create_index_rewriting` builds the others this way too).
    RewriteTables,
    /// Online, without copying data: every table that lacks the index's
    /// structures gets them in a side file (`index::sidefile`), built by
    /// [`IndexStrategy::side_builder`] from one read of the table; tables
    /// written meanwhile carry them as usual. Queries meanwhile scan the
    /// tables not covered yet (see [`QueryCx::building`]).
    PerTable,
    /// Online, by a scan of a snapshot (`Db::online_scan_build`):
    /// [`IndexStrategy::clear`], then every live record of the snapshot
    /// through [`IndexStrategy::apply`] (as puts of new keys), in chunks
    /// under the sync guard, while writes go on and are applied as usual
    /// (a key written since the snapshot is skipped); then
    /// [`IndexStrategy::flush`] and [`IndexStrategy::after_build`]. At open,
    /// for [`IndexStrategy::rebuilt_at_open`], the same with writes paused.
    Scan,
}

/// A strategy's state carried by one version (immutable once installed).
pub(crate) type VersionSlot = Arc<dyn Any + Send + Sync>;

/// Builds one index's structures for one table while it is written.
pub(crate) trait TableIndexBuilder: Send {
    /// Every entry of the table, in order, with its sequence number and
    /// the handle of its data block; `attr` is the entry's attribute for a
    /// put whose value has one, else `None`.
    fn add(&mut self, user_key: &[u8], seq: SeqNo, block: BlockHandle, attr: Option<IndexValue>);

    /// [`TableIndexBuilder::add`] of a put whose attribute is `enc`, the
    /// [`IndexValue::encode`] of a value of type `ty` (as a compaction's
    /// inputs store it). The default decodes it; a builder that keeps
    /// encoded values (NEXT) takes the bytes as they are.
    fn add_encoded(
        &mut self,
        user_key: &[u8],
        seq: SeqNo,
        block: BlockHandle,
        ty: KeyType,
        enc: &[u8],
    ) {
        self.add(user_key, seq, block, IndexValue::decode(ty, enc).ok());
    }

    /// The meta blocks to store in the table. The builder keeps what the
    /// strategy needs until the table is installed.
    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>>;
}

/// One secondary-index strategy. Defaults are "does not take part".
pub(crate) trait IndexStrategy: Send + Sync {
    fn kind(&self) -> StrategyKind;

    // ---- write path ----------------------------------------------------

    fn write_path(&self) -> WritePath;

    /// True if queries validate with the update memo, which writes then
    /// maintain (NEXT).
    fn uses_memo(&self) -> bool {
        false
    }

    /// True if the write leader calls [`IndexStrategy::apply`] for every
    /// batch: every [`WritePath::Sync`] strategy, and a
    /// [`WritePath::Tables`] strategy that also keeps state of its own per
    /// write (`filter` with `maintain=eager`: the old values that widen
    /// the next flushed table's filter).
    fn applies_batches(&self) -> bool {
        self.write_path() == WritePath::Sync
    }

    /// Which records a batch overwrites [`IndexStrategy::apply`] needs.
    fn needs_current(&self) -> NeedsCurrent {
        NeedsCurrent::No
    }

    /// Whether [`IndexStrategy::apply`] reads attributes through its
    /// `attrs` (false: the framework reads no record for it).
    fn apply_reads_attributes(&self) -> bool {
        true
    }

    /// Maintains the structure for one batch (see the module contract);
    /// `current` holds the records [`IndexStrategy::needs_current`] asked
    /// for, `attrs` extracts attributes.
    fn apply(&self, _ops: &[OpRef<'_>], _current: &Current<'_>, _attrs: &Attrs<'_>) -> Result<()> {
        Ok(())
    }

    // ---- tables and compactions ------------------------------------------

    /// A builder of this index's structures for the table `ctx` describes
    /// (its file number, flush or compaction, the compaction's inputs).
    fn table_builder(&self, _ctx: &TableContext) -> Option<Box<dyn TableIndexBuilder>> {
        None
    }

    /// The attribute values this index's blocks in the tables `inputs`
    /// record, by sequence number, within `budget` bytes of memory: what a
    /// compaction of `inputs` reads instead of parsing the records again
    /// (`None`: not kept, or over budget).
    fn stored_values(
        &self,
        _inputs: &[Arc<FileMetaData>],
        _budget: usize,
    ) -> Result<Option<StoredValues>> {
        Ok(None)
    }

    /// A builder of this index's structures for the existing table `file`
    /// ([`BuildMethod::PerTable`]): fed every stored entry of the table in
    /// order, with its data block's handle; its blocks go to the table's
    /// side file, which [`IndexStrategy::on_install`] then finds through
    /// [`OpenCx::sides`] (the table is presented as added again).
    fn side_builder(&self, _file: u64) -> Option<Box<dyn TableIndexBuilder>> {
        None
    }

    /// True if the strategy consumes the primary's dropped-versions stream.
    fn wants_dropped(&self) -> bool {
        false
    }

    /// Versions a primary compaction is about to drop; called before the
    /// compaction installs.
    fn on_dropped(&self, _dropped: Vec<DroppedEntry>) -> Result<()> {
        Ok(())
    }

    // ---- versions ----------------------------------------------------------

    /// This index's state in the version `ev` installs, from its state in
    /// the previous version.
    fn on_install(
        &self,
        _prev: Option<&VersionSlot>,
        _ev: &InstallEvent<'_>,
    ) -> Result<Option<VersionSlot>> {
        Ok(None)
    }

    /// This index's state in the recovered version of live `files`; a
    /// `ready` index must cover every one of them.
    fn on_recover(
        &self,
        _files: &[(usize, Arc<FileMetaData>)],
        _ready: bool,
    ) -> Result<Option<VersionSlot>> {
        Ok(None)
    }

    /// True if `version` (whose state for this index is `slot`) is fully
    /// indexed: checked after a [`BuildMethod::RewriteTables`] build.
    fn covers(&self, _slot: Option<&VersionSlot>, _version: &Version) -> bool {
        true
    }

    /// True if table `file` has this index's structures in the version
    /// whose state is `slot` (what a [`BuildMethod::PerTable`] build has
    /// left to do).
    fn covers_table(&self, _slot: Option<&VersionSlot>, _file: u64) -> bool {
        true
    }

    // ---- builds --------------------------------------------------------------

    fn build_method(&self) -> BuildMethod;

    /// True if the structure lives in RAM only and is rebuilt (by
    /// [`BuildMethod::Scan`]) at every open.
    fn rebuilt_at_open(&self) -> bool {
        false
    }

    /// Called once when the database's open is complete (recovered, every
    /// index up): background work of the open that would slow it down if
    /// it ran beside it starts here.
    fn on_opened(&self) {}

    /// Empties the structure before a [`BuildMethod::Scan`] build.
    fn clear(&self) -> Result<()> {
        Ok(())
    }

    /// Called once a scan build has applied every record (after
    /// [`IndexStrategy::flush`]); writes may run meanwhile (and are
    /// applied).
    fn after_build(&self) -> Result<()> {
        Ok(())
    }

    // ---- stand-alone trees -------------------------------------------------

    /// True if the strategy keeps files of its own in `index-<id>/`
    /// ([`OpenCx::dir`]), removed when the index is dropped.
    fn has_own_files(&self) -> bool {
        false
    }

    /// Makes the structure durable (see the module contract).
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Called before the primary installs a flush, which retires WAL
    /// files, after it fsynced its WAL: what the retired WAL files held
    /// must be durable in the structure on return. Default
    /// [`IndexStrategy::flush`]; the stand-alone trees are hosted by the
    /// primary, which flushes their frozen memtables itself.
    fn before_primary_flush(&self) -> Result<()> {
        self.flush()
    }

    /// Waits until the structure has no background work pending.
    fn wait_idle(&self) -> Result<()> {
        Ok(())
    }

    /// Compacts the structure completely (a full `compact_range`).
    fn compact(&self) -> Result<()> {
        Ok(())
    }

    // ---- queries and statistics ---------------------------------------------

    /// Answers one query (see `index` for the result contract).
    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Hits>;

    /// True if [`IndexStrategy::query`] reads the primary only at the
    /// snapshot it pins with [`QueryCx::pin_with`], through the view's
    /// functions (`fetch`, `fetch_versions`, `data_blocks_read`): its view
    /// then pins nothing and lists no components (`mems` empty, `version`
    /// without tables or extension state, `snapshot` 0), which saves a
    /// query a snapshot registration, a copy of the memtable list and a
    /// lock of the engine's state.
    fn pins_own_snapshot(&self) -> bool {
        false
    }

    /// Fills the strategy's fields of `s` (entries, sizes, validations);
    /// `slot` is its state in the current version.
    fn stats(&self, slot: Option<&VersionSlot>, s: &mut IndexStats);
}

pub(crate) struct QueryCx<'a> {
    pub def: &'a IndexMeta,
    pub pred: &'a Predicate,
    pub opts: QueryOptions,
    /// The components and the pinned snapshot of the query.
    pub view: &'a QueryView<'a>,
    /// The index's state in `view.version`.
    pub slot: Option<&'a VersionSlot>,
    /// The index-state generation of `view.version` (memo validation).
    pub generation: u64,
    pub memo: &'a MemoShards,
    /// True while a [`BuildMethod::PerTable`] build runs: tables of the
    /// view without the index's structures are to be scanned (every entry
    /// checked) instead of refused.
    pub building: bool,
    /// Writes up to this sequence number may predate the update memo (an
    /// online build started then): a candidate the memo calls valid is
    /// checked exactly. 0 once the memo has seen every write.
    pub memo_from: SeqNo,
    pub(super) gate: &'a SyncGate,
}

impl QueryCx<'_> {
    /// Runs `f` (which pins or reads the strategy's own structure) under the
    /// sync guard's read side, together with pinning a primary snapshot at
    /// the latest published sequence number: `f` sees exactly the writes up
    /// to that snapshot. Then runs the test pause (`QueryView::pause`).
    pub fn pin_with<T>(&self, f: impl FnOnce() -> T) -> (Snapshot, T) {
        let out = {
            let _g = super::read(&self.gate.guard);
            ((self.view.pin_latest)(), f())
        };
        self.view.pause();
        out
    }

    /// Runs `f` (which locks or reads the strategy's own structure) under
    /// the sync guard's read side, with the latest published sequence
    /// number, which it registers nothing for: `f` sees exactly the writes
    /// up to it. For an index-only answer that reads nothing of the
    /// primary, and only if `f` returns a guard that keeps the structure
    /// as it is until the answer is complete (no writer applies a batch or
    /// collects an entry meanwhile). `None` when the query must pin
    /// instead ([`QueryView::must_pin`], or a test pause: the pause hook
    /// writes, which such a guard would block): call
    /// [`QueryCx::pin_with`] then.
    pub fn peek_with<T>(&self, f: impl FnOnce() -> T) -> Option<(SeqNo, T)> {
        if self.view.must_pin || self.view.pause.is_some() {
            return None;
        }
        let _g = super::read(&self.gate.guard);
        Some(((self.view.latest)(), f()))
    }

    /// The index's state in the query's version, as the strategy's type.
    pub fn slot_as<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.slot.and_then(|s| s.downcast_ref::<T>())
    }
}

/// The record each key of a batch had before the batch (`None`: absent or
/// deleted); filled for the keys [`NeedsCurrent`] asks for. With
/// [`NeedsCurrent::Exists`] a key is filled with `Some((seq, empty))` when
/// some version of it (a put or a tombstone) may exist before the batch —
/// `seq` is that version's when the insert found it in the active
/// memtable, else 0 — and `None` when none does.
///
/// A map whose first key is held inline: most batches write one key, and a
/// map of one was an allocation a put.
#[derive(Default)]
pub(crate) struct Current<'a> {
    one: Option<(&'a [u8], Option<Versioned>)>,
    many: FastMap<&'a [u8], Option<Versioned>>,
}

impl<'a> Current<'a> {
    /// `key`'s record before the batch, if filled.
    pub fn get(&self, key: &[u8]) -> Option<&Option<Versioned>> {
        match &self.one {
            Some((k, v)) if *k == key => Some(v),
            _ => self.many.get(key),
        }
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s record (replacing one set before).
    pub fn insert(&mut self, key: &'a [u8], v: Option<Versioned>) {
        match &mut self.one {
            Some((k, old)) if *k == key => *old = v,
            None if self.many.is_empty() => self.one = Some((key, v)),
            _ => {
                self.many.insert(key, v);
            }
        }
    }

    /// Every record filled, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &Option<Versioned>> {
        self.one.iter().map(|(_, v)| v).chain(self.many.values())
    }
}

impl<'a> FromIterator<(&'a [u8], Option<Versioned>)> for Current<'a> {
    fn from_iter<I: IntoIterator<Item = (&'a [u8], Option<Versioned>)>>(iter: I) -> Self {
        let mut c = Current::default();
        for (k, v) in iter {
            c.insert(k, v);
        }
        c
    }
}

/// Which keys of a batch a strategy needs the previous records of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NeedsCurrent {
    /// None: blind maintenance.
    No,
    /// The keys the batch deletes (`posting-lazy`'s delete markers).
    Deletes,
    /// Every key, but only whether some version of it may exist (a put or
    /// a tombstone; the active memtable by the insert's own search, the
    /// other components by their key or Bloom filters, so a false `Some`
    /// is possible, a false `None` is not): `filter`'s mutable bitmaps.
    /// No record is read.
    Exists,
    /// Every key (synchronous maintenance).
    All,
}

impl NeedsCurrent {
    /// What two strategies need together: the records of the keys either
    /// needs them for, the sequence numbers of the others.
    pub fn join(self, other: NeedsCurrent) -> NeedsCurrent {
        use NeedsCurrent::*;
        match (self, other) {
            (No, x) | (x, No) => x,
            (All, _) | (_, All) | (Deletes, Exists) | (Exists, Deletes) => All,
            (Deletes, Deletes) => Deletes,
            (Exists, Exists) => Exists,
        }
    }

    /// The keys of `ops` to look up.
    pub fn keys<'a>(self, ops: &[OpRef<'a>]) -> Vec<&'a [u8]> {
        ops.iter()
            .filter(|op| self.asks(op))
            .map(|(_, k, _)| *k)
            .collect()
    }

    /// True if the record `op` replaces is asked for.
    pub fn asks(self, op: &OpRef<'_>) -> bool {
        match self {
            NeedsCurrent::No => false,
            NeedsCurrent::Deletes => op.2.is_none(),
            NeedsCurrent::Exists | NeedsCurrent::All => true,
        }
    }
}

/// A candidate: primary key and the sequence number of the version the
/// index entry describes.
pub(crate) type Cand = (Vec<u8>, SeqNo);

/// A dropped version's key, sequence number and attribute.
pub(crate) type DroppedEntry = (Vec<u8>, SeqNo, IndexValue);

/// A query on a strategy's own structure pinned with
/// [`QueryCx::pin_with`]: the predicate, the options, the view, and the
/// primary snapshot pinned with the structure.
pub(crate) struct Query<'a> {
    pub pred: &'a Predicate,
    pub opts: QueryOptions,
    pub view: &'a QueryView<'a>,
    /// The primary snapshot, pinned with the strategy's views.
    pub snapshot: SeqNo,
}

impl<'a> Query<'a> {
    /// The same query with at most `n` results.
    pub fn limited(&self, n: usize) -> Query<'a> {
        Query {
            pred: self.pred,
            opts: self.opts.limit(n),
            view: self.view,
            snapshot: self.snapshot,
        }
    }
}

/// Validation and repair counters of one index (since open).
#[derive(Default)]
pub(crate) struct Counters {
    pub validations: AtomicU64,
    pub failed: AtomicU64,
    /// Stale entries removed by repair (compaction-coupled or read
    /// repair; an entry removed by both is counted twice).
    pub repaired: AtomicU64,
    /// Entries written minus entries deleted (approximate: blind strategies
    /// count stale entries until repair removes them).
    pub entries: AtomicU64,
}

impl Counters {
    pub fn fill(&self, s: &mut IndexStats) {
        s.validations = self.validations.load(Relaxed);
        s.validations_failed = self.failed.load(Relaxed);
        s.repaired = self.repaired.load(Relaxed);
        s.global_entries = self.entries.load(Relaxed);
    }

    pub fn add_entries(&self, added: u64, removed: u64) {
        let _ = self.entries.fetch_update(Relaxed, Relaxed, |e| {
            Some((e + added).saturating_sub(removed))
        });
    }
}

/// How candidates become results.
pub(crate) enum Check<'a> {
    /// Candidates are exactly the live matches (synchronous maintenance):
    /// fetched for their values, and a mismatch is reported as corruption.
    Exact,
    /// Direct validation: fetch the record at the snapshot and compare
    /// sequence numbers.
    Direct,
    /// Timestamp validation against the primary-key index (key → sequence
    /// number of the newest version): no record read for stale candidates.
    Timestamp(&'a Snapshot),
}

/// Candidates `(primary key, seq)` with their keys in one buffer, so that
/// a scan over many index entries allocates as the buffer grows, not per
/// entry.
#[derive(Default, Debug, Clone)]
pub(crate) struct CandList {
    bytes: Vec<u8>,
    /// `(start, end, seq)`: the key is `bytes[start..end]`.
    items: Vec<(usize, usize, SeqNo)>,
}

impl CandList {
    pub fn push(&mut self, key: &[u8], seq: SeqNo) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.items.push((start, self.bytes.len(), seq));
    }

    /// The candidates, in insertion order (sorted after [`resolve`]).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], SeqNo)> + '_ {
        self.items
            .iter()
            .map(|&(a, b, seq)| (key_at(&self.bytes, a, b), seq))
    }
}

/// `bytes[a..b]`; the ranges are [`CandList`]'s own, so never out of bounds.
fn key_at(bytes: &[u8], a: usize, b: usize) -> &[u8] {
    bytes.get(a..b).unwrap_or_default()
}

impl From<Vec<Cand>> for CandList {
    fn from(v: Vec<Cand>) -> CandList {
        let mut l = CandList {
            bytes: Vec::with_capacity(v.iter().map(|c| c.0.len()).sum()),
            items: Vec::with_capacity(v.len()),
        };
        for (k, seq) in &v {
            l.push(k, *seq);
        }
        l
    }
}

/// Turns candidates `(key, seq)` (each with `seq <= q.snapshot`, already
/// matching the predicate) into results: newest first, validated by
/// `check`, values fetched with one batched lookup per chunk, at most
/// `limit`. Returns the results and the stale candidates (for read repair).
/// Top-K works through the candidates newest first in chunks and stops as
/// soon as K are valid.
pub(crate) fn resolve(
    cands: impl Into<CandList>,
    q: &Query<'_>,
    check: &Check<'_>,
    counters: &Counters,
    profile: &mut QueryProfile,
) -> Result<(Vec<Hit>, Vec<Cand>)> {
    let CandList { bytes, mut items } = cands.into();
    let key = |&(a, b, _): &(usize, usize, SeqNo)| key_at(&bytes, a, b);
    items.sort_unstable_by(|a, b| b.2.cmp(&a.2).then_with(|| key(a).cmp(key(b))));
    items.dedup_by(|a, b| a.2 == b.2 && key(a) == key(b));
    let limit = q.opts.limit.unwrap_or(usize::MAX);
    // Chunks of K, then doubling while stale candidates leave the top K
    // incomplete; everything at once without a limit.
    let mut chunk = match q.opts.limit {
        Some(k) => k.max(1),
        None => items.len().max(1),
    };
    let mut hits = Vec::new();
    let mut stale: Vec<Cand> = Vec::new();
    let before = (q.view.data_blocks_read)();
    let mut rest: &[(usize, usize, SeqNo)] = &items;
    while !rest.is_empty() && hits.len() < limit {
        let (part, tail) = rest.split_at(chunk.min(rest.len()));
        rest = tail;
        chunk = chunk.saturating_mul(2);
        profile.candidates += part.len() as u64;
        let mut live: Vec<(&[u8], SeqNo)> = Vec::with_capacity(part.len());
        match check {
            Check::Timestamp(pk) => {
                let keys: Vec<&[u8]> = part.iter().map(key).collect();
                profile.record_lookups += 1;
                let found = pk.multi_get(&keys)?;
                counters.validations.fetch_add(part.len() as u64, Relaxed);
                for ((k, c), f) in keys.iter().zip(part).zip(found) {
                    let newest = f.map(|b| super::tree::read_seq(&b, false)).transpose()?;
                    if newest == Some(c.2) {
                        live.push((k, c.2));
                    } else {
                        stale.push((k.to_vec(), c.2));
                    }
                }
            }
            _ => live.extend(part.iter().map(|c| (key(c), c.2))),
        }
        if q.opts.keys_only && !matches!(check, Check::Direct) {
            for (k, seq) in live {
                if hits.len() < limit {
                    hits.push(Hit {
                        key: k.to_vec(),
                        value: None,
                        seq,
                    });
                }
            }
            continue;
        }
        let keys: Vec<&[u8]> = live.iter().map(|(k, _)| *k).collect();
        profile.record_lookups += 1;
        let found = (q.view.fetch)(&keys, q.snapshot)?;
        // Exact candidates are checked too (a mismatch is a bug, reported).
        if !matches!(check, Check::Timestamp(_)) {
            counters.validations.fetch_add(live.len() as u64, Relaxed);
        }
        for ((k, seq), f) in live.into_iter().zip(found) {
            match f {
                Some((s, value)) if s == seq => {
                    if hits.len() < limit {
                        hits.push(Hit {
                            key: k.to_vec(),
                            value: (!q.opts.keys_only).then_some(value),
                            seq,
                        });
                    }
                }
                other => {
                    if let Check::Exact = check {
                        return Err(Error::corruption(format!(
                            "index holds key {:?} at seq {seq}, the data has {:?}",
                            String::from_utf8_lossy(k),
                            other.map(|(s, _)| s)
                        )));
                    }
                    stale.push((k.to_vec(), seq));
                }
            }
        }
    }
    if !matches!(check, Check::Exact) {
        counters.failed.fetch_add(stale.len() as u64, Relaxed);
    }
    profile.stale = stale.len() as u64;
    profile.data_blocks_read += (q.view.data_blocks_read)().saturating_sub(before);
    Ok((hits, stale))
}

/// The pinned snapshot of the main tree.
pub(crate) fn main_view<'a>(pinned: &'a [Snapshot], strategy: &str) -> Result<&'a Snapshot> {
    pinned
        .first()
        .ok_or_else(|| Error::invalid(format!("{strategy} query without a pinned view")))
}

/// The query of a strategy with secondary trees: pins the trees with the
/// primary snapshot ([`QueryCx::pin_with`]), then runs `run` on the pinned
/// views (the main tree's first, in the order of `trees`).
pub(crate) fn query_trees(
    cx: &QueryCx<'_>,
    trees: &[&IndexTree],
    profile: &mut QueryProfile,
    run: impl FnOnce(&[Snapshot], &Query<'_>, &mut QueryProfile) -> Result<Vec<Hit>>,
) -> Result<Vec<Hit>> {
    let (snap, pinned) = cx.pin_with(|| trees.iter().map(|t| t.db.snapshot()).collect::<Vec<_>>());
    let q = Query {
        pred: cx.pred,
        opts: cx.opts,
        view: cx.view,
        snapshot: snap.sequence(),
    };
    run(&pinned, &q, profile)
}

/// The [`IndexStrategy`] methods every strategy on secondary trees shares,
/// for its `impl IndexStrategy` block: built by a scan, files of its own in
/// `index-<id>/`, and `flush`/`wait_idle`/`compact`/`query` over the trees
/// its inherent `trees()` lists (main tree first), the query answered by
/// its inherent `query_pinned`.
macro_rules! tree_strategy_methods {
    () => {
        fn build_method(&self) -> BuildMethod {
            BuildMethod::Scan
        }

        fn has_own_files(&self) -> bool {
            true
        }

        fn flush(&self) -> Result<()> {
            strategy::flush_trees(&self.trees())
        }

        fn before_primary_flush(&self) -> Result<()> {
            // Hosted trees: the primary flushes their frozen memtables.
            Ok(())
        }

        fn wait_idle(&self) -> Result<()> {
            strategy::wait_trees(&self.trees())
        }

        fn compact(&self) -> Result<()> {
            strategy::compact_trees(&self.trees())
        }

        fn query(
            &self,
            cx: &QueryCx<'_>,
            profile: &mut QueryProfile,
        ) -> Result<crate::index::Hits> {
            strategy::query_trees(cx, &self.trees(), profile, |pinned, q, profile| {
                self.query_pinned(pinned, q, profile)
            })
            .map(crate::index::Hits::from)
        }
    };
}
pub(crate) use tree_strategy_methods;

/// Flushes every tree of a strategy (see [`IndexStrategy::flush`]).
pub(crate) fn flush_trees(trees: &[&IndexTree]) -> Result<()> {
    trees.iter().try_for_each(|t| t.flush())
}

/// Waits for every tree's background work (see [`IndexStrategy::wait_idle`]).
pub(crate) fn wait_trees(trees: &[&IndexTree]) -> Result<()> {
    trees.iter().try_for_each(|t| t.db.wait_for_compactions())
}

/// Compacts every tree completely (see [`IndexStrategy::compact`]).
pub(crate) fn compact_trees(trees: &[&IndexTree]) -> Result<()> {
    trees
        .iter()
        .try_for_each(|t| t.db.compact_range(None, None))
}

/// Refuses parameters for a strategy that takes none.
pub(crate) fn no_params(strategy: &str, params: &[(String, String)]) -> Result<()> {
    match params.first() {
        Some((k, _)) => Err(Error::invalid(format!(
            "unknown parameter {k:?} for strategy {strategy} (it takes none)"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Current;
    use std::collections::HashMap;

    /// `Current` (first key inline) against a map, on random inserts
    /// repeating keys, with lookups of present and absent keys.
    #[test]
    fn current_behaves_as_a_map() {
        let keys: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'k', i]).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..300 {
            let mut c = Current::default();
            let mut model: HashMap<&[u8], Option<(u64, Vec<u8>)>> = HashMap::new();
            for step in 0..(round % 9) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = keys[(x % 6) as usize].as_slice();
                let v = (!x.is_multiple_of(3)).then(|| (step as u64, vec![step as u8]));
                c.insert(k, v.clone());
                model.insert(k, v);
            }
            for k in &keys {
                assert_eq!(c.get(k), model.get(k.as_slice()), "round {round}");
                assert_eq!(c.contains_key(k), model.contains_key(k.as_slice()));
            }
            let mut got: Vec<_> = c.values().cloned().collect();
            let mut want: Vec<_> = model.values().cloned().collect();
            got.sort();
            want.sort();
            assert_eq!(got, want);
            let back: Current<'_> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
            for k in &keys {
                assert_eq!(back.get(k), model.get(k.as_slice()));
            }
        }
    }
}
