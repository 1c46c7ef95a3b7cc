//! The index framework's engine extension: definitions and their MANIFEST
//! payloads, routing of the engine's events to each index's strategy
//! ([`IndexStrategy`]), the update memo shared by the strategies that
//! validate with it, and the per-version index state.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use serde::{Deserialize, Serialize};

use strata_lsm::batch::{BatchOp, WriteBatch};
use strata_lsm::cache::TableCache;
use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::{
    BatchContext, BatchGuard, CompactionContext, CompactionObserver, DropReason, EngineHandle,
    EngineHooks, EntryRef, ExtState, InstallEvent, InstallOutcome, InstallReason, TableContext,
    TableObserver,
};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::{MemSide, MemTable, Shadowed};
use strata_lsm::sstable::BlockHandle;
use strata_lsm::version::{FileMetaData, Version};

use super::def::{fields_of, read_doc, Attrs, Doc, DocCache, IndexMeta, Read};
use super::fields::Fields;
use super::fxhash::{FastMap, FastSet};
use super::memo::{self, MemoShards};
use super::side::{self, IndexSide};
use super::sidefile::{self, SideFile, SideFiles};
use super::stored::StoredValues;
use super::strategy::IndexStrategy;
use super::strategy::{
    Current, DroppedEntry, NeedsCurrent, OpenCx, QueryCx, StrategyKind, TableIndexBuilder,
    VersionSlot, WritePath,
};
use super::{
    lock, read, tree, value, write, BuildProgress, Extractor, ExtractorFn, Hit, Hits, IndexInfo,
    IndexSpec, IndexState, IndexStats, OpRef, Predicate, QueryOptions, QueryProfile, QueryView,
    SyncGate, HOOK_NAME, MEMO_BLOCK,
};

/// Definition changes, stored as MANIFEST payloads (JSON, versioned).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum DefEvent {
    /// `memo_from`: see [`IndexDef::memo_from`] (absent in payloads of
    /// indexes built before online builds: 0).
    Create {
        v: u32,
        id: u32,
        spec: IndexSpec,
        #[serde(default)]
        memo_from: u64,
    },
    Ready {
        v: u32,
        id: u32,
    },
    Drop {
        v: u32,
        id: u32,
    },
    /// Table `file` has its side file for index `id` (an online build,
    /// `index::sidefile`), written and synced before this payload.
    Covered {
        v: u32,
        id: u32,
        file: u64,
    },
}

/// Index state carried by each version (see `hooks`): immutable.
#[derive(Default)]
pub(crate) struct IndexVersionState {
    /// Increases with every install; stamps memo removals.
    pub generation: u64,
    /// Each index's strategy state, by index id.
    pub slots: BTreeMap<u32, VersionSlot>,
}

/// A dropped version: key, sequence number, whether it was a tombstone
/// dropped at the bottom.
type Dropped = (Vec<u8>, SeqNo, bool);

/// A live index definition: what every layer knows of it, its strategy,
/// and whether it answers queries yet.
pub(crate) struct IndexDef {
    pub meta: Arc<IndexMeta>,
    pub strategy: Arc<dyn IndexStrategy>,
    ready: AtomicBool,
    /// A [`BuildMethod::PerTable`] build is past its start (the memtable
    /// that predates the index is flushed): queries are answered, scanning
    /// the tables not covered yet.
    online: AtomicBool,
    /// Writes up to this sequence number may predate the update memo
    /// (see [`QueryCx::memo_from`]); persisted in the `create` payload.
    memo_from: AtomicU64,
    /// Progress of the running build.
    pub progress: BuildCounters,
    /// The running online scan build ([`BuildMethod::Scan`]), if any.
    scan: Mutex<Option<ScanBuild>>,
    /// Declared after `strategy` so that the strategy's files are closed
    /// first.
    remove_dir: RemoveOnDrop,
}

impl std::ops::Deref for IndexDef {
    type Target = IndexMeta;

    fn deref(&self) -> &IndexMeta {
        &self.meta
    }
}

impl IndexDef {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Relaxed)
    }

    /// True if queries are answered (ready, or an online build running).
    pub fn is_queryable(&self) -> bool {
        self.is_ready() || self.online.load(Relaxed)
    }

    pub fn set_online(&self, on: bool) {
        self.online.store(on, Relaxed);
    }

    pub fn memo_from(&self) -> SeqNo {
        self.memo_from.load(Relaxed)
    }

    /// The running scan build (see [`ScanBuild`]).
    pub fn scan(&self) -> std::sync::MutexGuard<'_, Option<ScanBuild>> {
        lock(&self.scan)
    }
}

/// An online scan build ([`BuildMethod::Scan`]): the live records at
/// snapshot `at` are applied in key order, in chunks, while writes go on
/// and are applied as usual.
///
/// Invariant (every change under the sync guard's write side, which every
/// batch holds from its `apply` to its publication): the structure holds
/// exactly the effect of (a) the records at `at` of the keys below
/// `cursor` that no write since `at` touched, and (b) every write since
/// `at`. A scanned record is skipped if its key is in `written` (a write
/// newer than `at` already decided that key), so it never overwrites or
/// resurrects one; a write after the scan applied a key sees the scanned
/// record as the key's current one and replaces it like any update.
pub(crate) struct ScanBuild {
    pub at: SeqNo,
    /// Keys below it are applied; `None`: none yet.
    pub cursor: Option<Vec<u8>>,
    /// Keys written since `at`.
    pub written: HashSet<Vec<u8>>,
    /// Records applied so far.
    pub records: u64,
}

/// Progress of a [`BuildMethod::PerTable`] build, as [`BuildProgress`]
/// reports it: tables (and their bytes) given side files, those left.
#[derive(Default)]
pub(crate) struct BuildCounters {
    pub tables_done: AtomicU64,
    pub bytes_done: AtomicU64,
    pub tables_left: AtomicU64,
    pub bytes_left: AtomicU64,
    /// Bytes of side files written.
    pub written: AtomicU64,
}

impl BuildCounters {
    fn report(&self) -> BuildProgress {
        let done = self.tables_done.load(Relaxed);
        let bytes = self.bytes_done.load(Relaxed);
        BuildProgress {
            tables_done: done,
            tables_total: done + self.tables_left.load(Relaxed),
            bytes_done: bytes,
            bytes_total: bytes + self.bytes_left.load(Relaxed),
            bytes_written: self.written.load(Relaxed),
        }
    }
}

/// Removes an index's directory when its definition is dropped, if armed
/// (the index was dropped).
#[derive(Default)]
struct RemoveOnDrop {
    path: Option<(std::path::PathBuf, Arc<dyn strata_lsm::io::Fs>)>,
    armed: AtomicBool,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let (Some((p, fs)), true) = (&self.path, self.armed.load(Relaxed)) {
            let _ = fs.remove_dir_all(p);
        }
    }
}

/// A field set and the index definitions it was built for.
type FieldsFor = (Vec<Weak<IndexDef>>, Arc<Fields>);

/// The engine extension behind all secondary indexes.
pub(crate) struct IndexManager {
    me: Weak<IndexManager>,
    /// The engine's table cache, set when the engine attaches the manager
    /// (at the start of open, before any definition is made).
    tables: OnceLock<Arc<TableCache>>,
    /// The database directory (stand-alone strategies keep their trees in
    /// `index-<id>/` inside it) and the options of those trees.
    db_dir: std::path::PathBuf,
    tree_opts: strata_lsm::Options,
    /// The primary's handle (set at attach), for the trees' WAL syncs.
    primary: tree::PrimaryHandle,
    extractors: BTreeMap<String, ExtractorFn>,
    defs: RwLock<Vec<Arc<IndexDef>>>,
    next_id: AtomicU32,
    /// The update memo, locked per key's part.
    memo: MemoShards,
    /// Dropped versions of finished compactions (by sorted input files),
    /// applied to the memo when the compaction installs.
    pending_drops: Mutex<Vec<(Vec<u64>, Vec<Dropped>)>>,
    /// States handed to versions, to find the oldest a reader may hold.
    live_states: Mutex<Vec<Weak<IndexVersionState>>>,
    generation: AtomicU64,
    /// The memory guard and the primary's clock, shared with merge repair.
    gate: Arc<SyncGate>,
    /// Open side files of online builds.
    sides: Arc<SideFiles>,
    /// The live tables (level, metadata) of the current version, kept by
    /// the install and recovery hooks (under the version lock).
    live: Mutex<BTreeMap<u64, (usize, Arc<FileMetaData>)>>,
    /// Side files written whose `covered` payload is being logged: (index
    /// id, table); the install of that payload hands them to their
    /// strategies.
    side_pending: Mutex<Vec<(u32, u64)>>,
    /// Readings registered by loads in progress (see `index::preread`).
    pre_reads: Arc<super::preread::PreReads>,
    /// The indexes `before_batch` left the batch being written to (their
    /// maintenance runs in `after_insert`, which takes them); `None` when
    /// it maintained them itself. Only the write leader (or the WAL
    /// replay) touches it, one batch at a time.
    deferred: Mutex<Option<Arc<[Arc<IndexDef>]>>>,
    /// What every batch asks of the index set, derived from `defs`
    /// whenever it changes (under its write lock). Spares each put a list
    /// of the indexes and walks of them.
    batch_plan: RwLock<BatchPlan>,
    /// The field set of the last index set [`IndexManager::sync_apply`]
    /// maintained: built once instead of per batch (building and dropping
    /// the trie was ~1 k instructions of every indexed put). The set is
    /// named by weak references: a weak reference keeps its allocation, so
    /// an equal address is the same definition.
    sync_fields: Mutex<Option<FieldsFor>>,
    /// See [`IndexManager::set_maintenance_pause`] (tests only).
    #[cfg(feature = "testing")]
    maintenance_pause: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

/// See `IndexManager::batch_plan`.
#[derive(Default)]
struct BatchPlan {
    /// The indexes maintained with batches (`applies_batches`).
    defs: Arc<[Arc<IndexDef>]>,
    /// [`IndexManager::defers_to_insert`].
    defers: bool,
    /// [`IndexManager::memo_in_use`].
    memo: bool,
    /// Some index is maintained with batches or uses the memo.
    wants_batches: bool,
}

impl IndexManager {
    pub fn new(
        db_dir: std::path::PathBuf,
        opts: &strata_lsm::Options,
        extractors: BTreeMap<String, ExtractorFn>,
    ) -> Arc<IndexManager> {
        let primary = tree::PrimaryHandle::default();
        Arc::new_cyclic(|me| IndexManager {
            me: me.clone(),
            tables: OnceLock::new(),
            db_dir,
            tree_opts: tree::tree_options(opts, &primary),
            primary,
            extractors,
            defs: RwLock::new(Vec::new()),
            next_id: AtomicU32::new(1),
            memo: MemoShards::default(),
            pending_drops: Mutex::new(Vec::new()),
            live_states: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            gate: Arc::new(SyncGate {
                guard: RwLock::new(()),
                primary_clock: OnceLock::new(),
            }),
            sides: Arc::default(),
            live: Mutex::new(BTreeMap::new()),
            side_pending: Mutex::new(Vec::new()),
            pre_reads: Arc::default(),
            deferred: Mutex::default(),
            batch_plan: RwLock::new(BatchPlan::default()),
            sync_fields: Mutex::new(None),
            #[cfg(feature = "testing")]
            maintenance_pause: Mutex::new(None),
        })
    }

    /// Installs (or with `None` removes) a hook that a write whose index
    /// maintenance waits for its insert runs in `after_insert`, after
    /// `before_batch` took its notes and before the maintenance, on the
    /// write leader's thread (see [`crate::Db::set_maintenance_pause_hook`]).
    #[cfg(feature = "testing")]
    pub fn set_maintenance_pause(&self, hook: Option<Arc<dyn Fn() + Send + Sync>>) {
        *lock(&self.maintenance_pause) = hook;
    }

    fn tables(&self) -> Result<&Arc<TableCache>> {
        self.tables
            .get()
            .ok_or_else(|| Error::invalid("the index framework is not attached to an engine"))
    }

    pub fn defs(&self) -> Vec<Arc<IndexDef>> {
        read(&self.defs).clone()
    }

    pub fn def(&self, name: &str) -> Option<Arc<IndexDef>> {
        read(&self.defs)
            .iter()
            .find(|d| d.spec.name == name)
            .cloned()
    }

    /// True when writes must maintain the update memo (some index
    /// validates with it).
    pub fn memo_in_use(&self) -> bool {
        read(&self.batch_plan).memo
    }

    fn make_def(&self, id: u32, spec: IndexSpec, ready: bool) -> Result<IndexDef> {
        let (path, custom) = match &spec.extractor {
            Extractor::Field(p) => (value::parse_path(p)?, None),
            Extractor::Custom(n) => (
                Vec::new(),
                Some(self.extractors.get(n).cloned().ok_or_else(|| {
                    Error::invalid(format!(
                        "index {:?} uses extractor {n:?}, which is not registered in Options",
                        spec.name
                    ))
                })?),
            ),
        };
        let kind = StrategyKind::parse(&spec.strategy)?;
        let dir = tree::index_dir(&self.db_dir, id);
        let params: Vec<(String, String)> = spec
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let strategy = super::registry::open(
            kind,
            &OpenCx {
                id,
                spec: &spec,
                params: &params,
                dir: &dir,
                tree_opts: &self.tree_opts,
                tables: self.tables()?,
                gate: &self.gate,
                sides: &self.sides,
                primary: &self.primary,
            },
        )?;
        debug_assert_eq!(strategy.kind(), kind);
        Ok(IndexDef {
            meta: Arc::new(IndexMeta::new(id, spec, path, custom)),
            remove_dir: RemoveOnDrop {
                path: strategy
                    .has_own_files()
                    .then(|| (dir, self.tree_opts.fs.clone())),
                armed: AtomicBool::new(false),
            },
            strategy,
            ready: AtomicBool::new(ready),
            online: AtomicBool::new(false),
            memo_from: AtomicU64::new(0),
            progress: BuildCounters::default(),
            scan: Mutex::new(None),
        })
    }

    /// Adds the definition of a new index (not logged yet: see
    /// [`IndexManager::create_payload`]).
    pub fn begin_create(&self, spec: IndexSpec) -> Result<Arc<IndexDef>> {
        let name_ok = !spec.name.is_empty()
            && spec.name.len() <= 128
            && spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !name_ok {
            return Err(Error::invalid(format!(
                "index name {:?} must be 1-128 characters of letters, digits, '_', '-', '.'",
                spec.name
            )));
        }
        let mut defs = write(&self.defs);
        if defs.iter().any(|d| d.spec.name == spec.name) {
            return Err(Error::invalid(format!(
                "index {:?} already exists",
                spec.name
            )));
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        // A crash may have left the directory of an index whose definition
        // never reached the MANIFEST (ids are reused then).
        let _ = self
            .tree_opts
            .fs
            .remove_dir_all(&tree::index_dir(&self.db_dir, id));
        let def = Arc::new(self.make_def(id, spec, false)?);
        defs.push(def.clone());
        self.set_batch_plan(&defs);
        Ok(def)
    }

    /// Sets `def`'s [`IndexDef::memo_from`] for a creation at `now` (the
    /// last sequence number published once every write that did not see
    /// the index is): 0 if another live index kept the memo since before
    /// its own `memo_from`, else the earliest such point; `now` if none
    /// did. Returns the `create` payload to log.
    pub fn create_payload(&self, def: &IndexDef, now: SeqNo) -> Result<Vec<u8>> {
        let others = read(&self.defs)
            .iter()
            .filter(|d| d.id != def.id && d.strategy.uses_memo())
            .map(|d| d.memo_from())
            .min();
        let from = others.map_or(now, |o| o.min(now));
        def.memo_from.store(from, Relaxed);
        serde_json::to_vec(&DefEvent::Create {
            v: 1,
            id: def.id,
            spec: def.spec.clone(),
            memo_from: from,
        })
        .map_err(|e| Error::invalid(format!("cannot encode index definition: {e}")))
    }

    pub fn ready_payload(def: &IndexDef) -> Vec<u8> {
        serde_json::to_vec(&DefEvent::Ready { v: 1, id: def.id }).unwrap_or_default()
    }

    /// Removes an index; returns the payload to log.
    pub fn drop_def(&self, name: &str) -> Result<Vec<u8>> {
        let mut defs = write(&self.defs);
        let i = defs
            .iter()
            .position(|d| d.spec.name == name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        let d = defs.remove(i);
        self.set_batch_plan(&defs);
        d.remove_dir.armed.store(true, Relaxed);
        self.sides.index_dropped(d.id);
        Ok(serde_json::to_vec(&DefEvent::Drop { v: 1, id: d.id }).unwrap_or_default())
    }

    pub fn mark_ready(&self, def: &IndexDef) {
        def.ready.store(true, Relaxed);
    }

    /// The registry where a loader leaves its readings of the records it
    /// is about to write (see `index::preread`).
    pub fn pre_reads(&self) -> &super::preread::PreReads {
        &self.pre_reads
    }

    /// The JSON field paths of the indexes (those a loader's readings can
    /// serve).
    pub fn json_paths(&self) -> Vec<Vec<String>> {
        self.defs()
            .iter()
            .filter(|d| d.meta.needs_json())
            .map(|d| d.meta.path.clone())
            .collect()
    }

    /// The side structure for a new memtable (`None` without indexes).
    pub fn new_side(&self) -> Option<Arc<dyn MemSide>> {
        let side = IndexSide::new(self.pre_reads.clone());
        for d in self.defs() {
            if d.strategy.write_path() == WritePath::Tables {
                side.attach(d.meta.clone());
            }
        }
        Some(Arc::new(side))
    }

    /// Makes `mem`'s side structure maintain `def` from now on (a new index
    /// on the active memtable). Entries already in `mem` are not added: the
    /// index build flushes them to tables written with the index.
    /// Strategies maintained by [`IndexManager::sync_apply`] have no side
    /// structure.
    pub fn attach(&self, def: &Arc<IndexDef>, mem: &MemTable) {
        if def.strategy.write_path() != WritePath::Tables {
            return;
        }
        if let Some(side) = side::of(mem.side()) {
            side.attach(def.meta.clone());
        }
    }

    /// Memo maintenance for a batch about to enter the memtable: `ops` are
    /// its operations in order; `may_exist` checks older components.
    pub fn note_writes(&self, ops: &[OpRef<'_>], may_exist: &dyn Fn(&[u8]) -> bool) {
        // Keys written earlier in the batch (whose older version is that
        // write): by scan for small batches, else by a set.
        let big = ops.len() > SMALL_BATCH;
        let mut seen: FastSet<&[u8]> = FastSet::default();
        if big {
            seen.reserve(ops.len());
        }
        for (i, &(seq, k, _)) in ops.iter().enumerate() {
            let earlier = if big {
                !seen.insert(k)
            } else {
                ops.get(..i)
                    .is_some_and(|p| p.iter().any(|(_, e, _)| *e == k))
            };
            self.memo
                .write(k)
                .note_write(k, seq, || earlier || may_exist(k));
        }
    }

    /// The indexes whose structure lives in RAM only, rebuilt at open.
    pub fn rebuilt_at_open(&self) -> Vec<Arc<IndexDef>> {
        read(&self.defs)
            .iter()
            .filter(|d| d.strategy.rebuilt_at_open())
            .cloned()
            .collect()
    }

    /// The indexes maintained with every batch (during WAL replay, not
    /// those rebuilt at open).
    fn batch_defs(&self, recovering: bool) -> Arc<[Arc<IndexDef>]> {
        if !recovering {
            return read(&self.batch_plan).defs.clone();
        }
        // (Whether PERSEID rebuilds at open is known only then.)
        read(&self.defs)
            .iter()
            .filter(|d| d.strategy.applies_batches())
            .filter(|d| !d.strategy.rebuilt_at_open())
            .cloned()
            .collect()
    }

    /// Derives `batch_plan` from `defs` (called with `defs`' write lock
    /// held, whenever the set changes).
    fn set_batch_plan(&self, defs: &[Arc<IndexDef>]) {
        let batch: Arc<[Arc<IndexDef>]> = defs
            .iter()
            .filter(|d| d.strategy.applies_batches())
            .cloned()
            .collect();
        let defers = !batch.is_empty()
            && batch
                .iter()
                .all(|d| d.strategy.needs_current() != NeedsCurrent::No);
        let memo = defs.iter().any(|d| d.strategy.uses_memo());
        *write(&self.batch_plan) = BatchPlan {
            wants_batches: memo || !batch.is_empty(),
            defs: batch,
            defers,
            memo,
        };
    }

    /// True if the maintenance of every batch waits for the insert
    /// (`after_insert`): every index maintained with batches (all of them,
    /// WAL replay included: one decision for both hooks) reads the records
    /// a batch replaces, or where they are, and nothing else of the
    /// primary; so the insert's own search can answer for the active
    /// memtable. Strategies that read nothing (`NeedsCurrent::No`) apply
    /// before the insert, as they always have.
    fn defers_to_insert(&self) -> bool {
        read(&self.batch_plan).defers
    }

    /// Which records a batch overwrites the indexes `defs` need.
    pub fn needs_current(defs: &[Arc<IndexDef>]) -> NeedsCurrent {
        defs.iter()
            .map(|d| d.strategy.needs_current())
            .fold(NeedsCurrent::No, NeedsCurrent::join)
    }

    /// Synchronous maintenance of `defs` for one batch
    /// ([`strategy::IndexStrategy::apply`]); each record is parsed once for
    /// all of them. The caller holds the sync guard for writing (see
    /// [`IndexManager::memory_guard`]); `current` is filled for the keys
    /// [`IndexManager::needs_current`] asks for. `count`: count the
    /// records as indexed or skipped writes (false for a build).
    pub fn sync_apply(
        &self,
        defs: &[Arc<IndexDef>],
        ops: &[OpRef<'_>],
        current: &Current<'_>,
        count: bool,
    ) -> Result<()> {
        // A batch's records may have been read by a loader (not a build's).
        // No slots when no strategy reads attributes (mutable bitmaps).
        let reads = defs.iter().any(|d| d.strategy.apply_reads_attributes());
        let docs = DocCache::new(
            self.sync_fields(defs),
            ops.iter().filter_map(|(_, _, new)| *new).filter(|_| reads),
            current
                .values()
                .flatten()
                .map(|(_, raw)| raw.as_slice())
                .filter(|_| reads),
            count.then_some(&*self.pre_reads),
        );
        for d in defs {
            let attrs = Attrs {
                def: &d.meta,
                docs: &docs,
                count,
            };
            d.strategy.apply(ops, current, &attrs)?;
        }
        Ok(())
    }

    /// The field set of `defs` (see the field `sync_fields`). A set
    /// differs from the cached one only when indexes are created or
    /// dropped (or during recovery, which maintains fewer).
    fn sync_fields(&self, defs: &[Arc<IndexDef>]) -> Arc<Fields> {
        let mut cache = lock(&self.sync_fields);
        if let Some((set, f)) = cache.as_ref() {
            if set.len() == defs.len()
                && set
                    .iter()
                    .zip(defs)
                    .all(|(w, d)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(d)))
            {
                return f.clone();
            }
        }
        let f = Arc::new(fields_of(defs.iter().map(|d| &*d.meta)));
        *cache = Some((defs.iter().map(Arc::downgrade).collect(), f.clone()));
        f
    }

    /// Compacts every index's own structure completely (a full
    /// [`crate::Db::compact_range`]).
    pub fn compact_trees(&self) -> Result<()> {
        self.defs().iter().try_for_each(|d| d.strategy.compact())
    }

    /// Waits until no index's own structure has background work pending.
    pub fn wait_trees(&self) -> Result<()> {
        self.defs().iter().try_for_each(|d| d.strategy.wait_idle())
    }

    /// Takes the memory guard for writing (see the field's contract).
    pub fn memory_guard(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        write(&self.gate.guard)
    }

    fn state_of(version: &Version) -> Option<&IndexVersionState> {
        version
            .ext
            .get(HOOK_NAME)
            .and_then(|s| s.downcast_ref::<IndexVersionState>())
    }

    /// Answers one query. See the module documentation for the contract.
    /// `view_of(true)` pins a snapshot and reads the components for the
    /// query; `view_of(false)`, asked for a strategy that
    /// [pins its own](IndexStrategy::pins_own_snapshot), no components.
    pub fn query<'v>(
        &self,
        name: &str,
        pred: &Predicate,
        opts: QueryOptions,
        view_of: &dyn Fn(bool) -> QueryView<'v>,
        profile: &mut QueryProfile,
    ) -> Result<Hits> {
        let def = self
            .def(name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        if !def.is_queryable() {
            return Err(Error::invalid(format!(
                "index {name:?} is still being built; try again when `indexes()` shows it ready"
            )));
        }
        pred.check(def.spec.key_type)?;
        def.counters.queries.fetch_add(1, Relaxed);
        let scan = def.scan().as_ref().map(|b| (b.at, b.cursor.clone()));
        if let Some((at, cursor)) = scan {
            let view = view_of(true);
            return self.query_scan_building(&def, pred, opts, &view, profile, at, cursor);
        }
        let view = &view_of(!def.strategy.pins_own_snapshot());
        let state = Self::state_of(&view.version);
        let cx = QueryCx {
            def: &def.meta,
            pred,
            opts,
            view,
            slot: state.and_then(|s| s.slots.get(&def.id)),
            generation: state.map_or(0, |s| s.generation),
            memo: &self.memo,
            building: !def.is_ready(),
            memo_from: def.memo_from(),
            gate: &self.gate,
        };
        def.strategy.query(&cx, profile)
    }

    /// A query on an index whose online scan build (at snapshot `at`, keys
    /// below `cursor` applied, read before the strategy pins its structure)
    /// is running: the strategy's answer at the snapshot `Q` it pins, plus
    /// the records at `Q` of keys from `cursor` on whose version is not newer
    /// than `at` (those the structure lacks, see [`ScanBuild`]) that match;
    /// a key found by both (applied since `cursor` was read) is the same
    /// record. Newest first, at most `limit`.
    #[allow(clippy::too_many_arguments)]
    fn query_scan_building(
        &self,
        def: &IndexDef,
        pred: &Predicate,
        opts: QueryOptions,
        view: &QueryView<'_>,
        profile: &mut QueryProfile,
        at: SeqNo,
        cursor: Option<Vec<u8>>,
    ) -> Result<Hits> {
        let pinned: Mutex<Option<strata_lsm::Snapshot>> = Mutex::new(None);
        let pin = || {
            let s = (view.pin_latest)();
            *lock(&pinned) = Some(s.clone());
            s
        };
        let inner = QueryView {
            mems: view.mems.clone(),
            version: view.version.clone(),
            snapshot: view.snapshot,
            tables: view.tables,
            pin_latest: &pin,
            latest: view.latest,
            // The scan below reads at the pinned snapshot.
            must_pin: true,
            fetch: view.fetch,
            fetch_versions: view.fetch_versions,
            data_blocks_read: view.data_blocks_read,
            pause: view.pause,
        };
        let state = Self::state_of(&view.version);
        // The whole answer of the structure: its top K need not hold the
        // union's (posting-lazy's top-K relies on components written in
        // sequence order, which the scan's chunks break until the build's
        // final compaction).
        let cx = QueryCx {
            def: &def.meta,
            pred,
            opts: QueryOptions {
                limit: None,
                ..opts
            },
            view: &inner,
            slot: state.and_then(|s| s.slots.get(&def.id)),
            generation: state.map_or(0, |s| s.generation),
            memo: &self.memo,
            building: true,
            memo_from: def.memo_from(),
            gate: &self.gate,
        };
        let hits = def.strategy.query(&cx, profile)?;
        let snap = lock(&pinned).take().ok_or_else(|| {
            Error::invalid(format!(
                "index {:?} answered without pinning its snapshot during its build",
                def.spec.name
            ))
        })?;
        let mut all: BTreeMap<Vec<u8>, Hit> =
            hits.into_iter().map(|h| (h.key.clone(), h)).collect();
        let mut it = snap.iter(cursor.as_deref(), None)?;
        while let Some(r) = it.next_versioned() {
            let (key, seq, value) = r?;
            if seq > at || all.contains_key(&key) {
                continue;
            }
            if !def.extract(&value, None).is_ok_and(|a| pred.matches(&a)) {
                continue;
            }
            let value = (!opts.keys_only).then_some(value);
            all.insert(key.clone(), Hit { key, value, seq });
        }
        let mut out: Vec<Hit> = all.into_values().collect();
        out.sort_by_key(|h| std::cmp::Reverse(h.seq));
        if let Some(k) = opts.limit {
            out.truncate(k);
        }
        Ok(out.into())
    }

    pub fn infos(&self, version: &Version) -> Vec<IndexInfo> {
        let state = Self::state_of(version);
        self.defs()
            .iter()
            .map(|d| {
                let c = &d.counters;
                let mut stats = IndexStats {
                    indexed_writes: c.indexed.load(Relaxed),
                    skipped_missing: c.missing.load(Relaxed),
                    skipped_wrong_type: c.wrong_type.load(Relaxed),
                    skipped_malformed: c.malformed.load(Relaxed),
                    queries: c.queries.load(Relaxed),
                    validations: c.validations.load(Relaxed),
                    validations_failed: c.failed.load(Relaxed),
                    exact_checks: c.exact.load(Relaxed),
                    ..IndexStats::default()
                };
                d.strategy
                    .stats(state.and_then(|s| s.slots.get(&d.id)), &mut stats);
                if !d.is_ready() && d.is_queryable() && d.scan().is_none() {
                    stats.build = Some(d.progress.report());
                }
                IndexInfo {
                    id: d.id,
                    spec: d.spec.clone(),
                    state: if d.is_ready() {
                        IndexState::Ready
                    } else {
                        IndexState::Building
                    },
                    stats,
                }
            })
            .collect()
    }

    /// Memo size (entries, bytes).
    pub fn memo_stats(&self) -> (usize, usize) {
        self.memo.stats()
    }

    /// True if every live table of `version` has index `def`'s structures.
    pub fn covers(&self, def: &IndexDef, version: &Version) -> bool {
        let Some(s) = Self::state_of(version) else {
            return version.all_files().next().is_none();
        };
        def.strategy.covers(s.slots.get(&def.id), version)
    }

    /// The live tables of `version` that lack `def`'s structures (neither
    /// their own meta blocks nor a side file), largest level first (NEXT
    /// §5: the bottom holds most data and is compacted least often).
    pub fn uncovered(&self, def: &IndexDef, version: &Version) -> Vec<(usize, Arc<FileMetaData>)> {
        let slot = Self::state_of(version).and_then(|s| s.slots.get(&def.id));
        let mut out: Vec<(usize, Arc<FileMetaData>)> = version
            .all_files()
            .filter(|(_, f)| !def.strategy.covers_table(slot, f.number))
            .map(|(l, f)| (l, f.clone()))
            .collect();
        out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.number.cmp(&b.1.number)));
        out
    }

    /// Tables of `def` covered by side files (a build resumed after a
    /// crash starts its progress from them).
    pub fn side_covered(&self, def: &IndexDef) -> (u64, u64) {
        let live = lock(&self.live);
        let covered = live
            .values()
            .filter(|(_, f)| self.sides.contains(def.id, f.number));
        covered.fold((0, 0), |(n, b), (_, f)| (n + 1, b + f.file_size))
    }

    /// Builds `def`'s structures for the existing table `f` from one read
    /// of it (every stored entry, with its data block's handle, through the
    /// strategy's [`IndexStrategy::side_builder`]), writes them to the
    /// table's side file (synced) and returns the `covered` payload whose
    /// logging installs them; `None` if the strategy has no side builder.
    /// The table must stay readable meanwhile (the caller holds a version
    /// with it). `pace` runs after each data block (see `index::pacing`).
    pub fn build_side(
        &self,
        def: &IndexDef,
        f: &FileMetaData,
        pace: &mut dyn FnMut(),
    ) -> Result<Option<Vec<u8>>> {
        let Some(mut b) = def.strategy.side_builder(f.number) else {
            return Ok(None);
        };
        let t = self.tables()?.get(f.number, f.file_size)?;
        for h in t.data_block_handles()? {
            t.visit_all_data_entries(h, |key, seq, kind, value, marked| {
                // Marked entries are obsolete: never read, so not indexed
                // (but counted, so positions match the stored entries).
                let attr = (kind == ValueKind::Value && !marked)
                    .then(|| def.extract(value, None).ok())
                    .flatten();
                b.add(key, seq, h, attr);
            })?;
            pace();
        }
        let blocks = b.finish()?;
        let fs = &self.tree_opts.fs;
        let size = sidefile::write(&**fs, &self.db_dir, f.number, f.file_size, def.id, &blocks)?;
        let side = SideFile::open(fs, &self.db_dir, f.number, f.file_size, def.id)?;
        self.sides.insert(def.id, f.number, Arc::new(side));
        lock(&self.side_pending).push((def.id, f.number));
        def.progress.written.fetch_add(size, Relaxed);
        let payload = serde_json::to_vec(&DefEvent::Covered {
            v: 1,
            id: def.id,
            file: f.number,
        })
        .map_err(|e| Error::invalid(format!("cannot encode a covered payload: {e}")))?;
        Ok(Some(payload))
    }

    /// Removes side files that no live table of a live index refers to (a
    /// crash before their payload, or after their table or index went).
    fn remove_orphan_sides(&self) {
        let fs = &self.tree_opts.fs;
        let Ok(names) = fs.list_dir(&self.db_dir) else {
            return;
        };
        for name in names {
            let Some((table, id)) = name.to_str().and_then(sidefile::parse_name) else {
                continue;
            };
            if !self.sides.contains(id, table) {
                let _ = fs.remove_file(&self.db_dir.join(&name));
            }
        }
    }

    /// Deletes `index-<id>` directories of indexes that no longer exist
    /// (dropped, or created by a crash before their definition was logged).
    fn remove_orphan_dirs(&self, defs: &[Arc<IndexDef>]) {
        let fs = &self.tree_opts.fs;
        let Ok(names) = fs.list_dir(&self.db_dir) else {
            return;
        };
        for name in names {
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("index-"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if !defs
                .iter()
                .any(|d| d.id == id && d.strategy.has_own_files())
            {
                let _ = fs.remove_dir_all(&self.db_dir.join(&name));
            }
        }
    }

    fn track(&self, s: &Arc<IndexVersionState>) -> u64 {
        let mut live = lock(&self.live_states);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(s));
        live.iter()
            .filter_map(|w| w.upgrade())
            .map(|s| s.generation)
            .min()
            .unwrap_or(s.generation)
    }
}

/// Batches of at most this many operations find repeated keys by scan.
const SMALL_BATCH: usize = 16;

/// Builds every index's per-table structures while a table is written.
struct IndexObserver {
    mgr: Arc<IndexManager>,
    defs: Vec<Arc<IndexDef>>,
    /// The JSON paths of `defs`, read once per entry.
    fields: Fields,
    builders: Vec<Box<dyn TableIndexBuilder>>,
    /// A flush: per def, its values computed when the memtable's entries
    /// were written, encoded, by sequence number; an entry found there is
    /// not read again.
    flushed: Vec<Option<StoredValues>>,
    /// A compaction: per def, the values its input tables' index blocks
    /// record, by sequence number (shared by the compaction's outputs).
    stored: Vec<Option<Arc<Option<StoredValues>>>>,
    use_memo: bool,
    memo_entries: Vec<(Vec<u8>, memo::MemoEntry)>,
    /// The user key of the previous entry (valid when `has_last`), reused
    /// so that an entry allocates nothing for it.
    last_key: Vec<u8>,
    has_last: bool,
}

/// The encoded value of index `i` (of the observer's definitions) for the
/// entry with sequence number `seq`, if known without reading the record:
/// computed at write time (a flush) or stored in the inputs' index blocks
/// (a compaction).
fn known_value<'a>(
    flushed: &'a [Option<StoredValues>],
    stored: &'a [Option<Arc<Option<StoredValues>>>],
    i: usize,
    seq: SeqNo,
) -> Option<&'a [u8]> {
    flushed
        .get(i)
        .and_then(|m| m.as_ref())
        .and_then(|m| m.encoded(seq))
        .or_else(|| {
            stored
                .get(i)
                .and_then(|s| s.as_deref())
                .and_then(|s| s.as_ref())
                .and_then(|s| s.encoded(seq))
        })
}

impl TableObserver for IndexObserver {
    /// The known values are found by sequence number while entries come
    /// in key order: one or two cache misses an entry and index. Loaded
    /// here for the whole block in one loop, the misses overlap; `on_entry`
    /// then finds the values in cache.
    fn before_block(&mut self, entries: &[EntryRef<'_>]) {
        let mut sum = 0u8;
        for e in entries.iter().filter(|e| e.kind == ValueKind::Value) {
            for i in 0..self.defs.len() {
                if let Some(enc) = known_value(&self.flushed, &self.stored, i, e.seq) {
                    sum ^= enc.first().copied().unwrap_or(0);
                }
            }
        }
        std::hint::black_box(sum);
    }

    fn on_entry(&mut self, e: &EntryRef<'_>, block: BlockHandle) {
        // An empty memo (no update seen) is not locked for every entry. A
        // write racing with this flush may or may not be seen, as with the
        // lock. Locked per entry, not once per block: the writer waits for
        // this lock with every batch, and a lock held for a block's lookups
        // (each a cache miss) cost the online-build writer 10–25% of its
        // throughput (session 46).
        if self.use_memo {
            if self.mgr.memo.entries() == 0 {
                self.has_last = false;
            } else if !(self.has_last && self.last_key == e.user_key) {
                if let Some(m) = self.mgr.memo.read(e.user_key).live(e.user_key) {
                    self.memo_entries.push((e.user_key.to_vec(), m));
                }
                self.last_key.clear();
                self.last_key.extend_from_slice(e.user_key);
                self.has_last = true;
            }
        }
        if e.kind != ValueKind::Value {
            for b in &mut self.builders {
                b.add(e.user_key, e.seq, block, None);
            }
            return;
        }
        // Read only if some def's value was not computed at write time.
        let mut read: Option<Option<Read>> = None;
        for (i, (d, b)) in self.defs.iter().zip(self.builders.iter_mut()).enumerate() {
            // The value computed at write time (a flush) or as the inputs'
            // index blocks store it (a compaction), passed on encoded.
            let known = known_value(&self.flushed, &self.stored, i, e.seq);
            if let Some(enc) = known {
                b.add_encoded(e.user_key, e.seq, block, d.meta.spec.key_type, enc);
                continue;
            }
            let r = read.get_or_insert_with(|| read_doc(e.value, &self.fields));
            let v = d.extract(e.value, Doc::of(&self.fields, r)).ok();
            b.add(e.user_key, e.seq, block, v);
        }
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut blocks = Vec::new();
        for b in &mut self.builders {
            blocks.extend(b.finish()?);
        }
        if self.use_memo {
            blocks.push((
                MEMO_BLOCK.to_string(),
                memo::encode_block(&self.memo_entries),
            ));
        }
        Ok(blocks)
    }
}

/// Memory one index may use, per compaction, for the values its inputs'
/// index blocks record (beyond it, the compaction parses the records).
const STORED_VALUES_BUDGET: usize = 64 << 20;

/// Collects one compaction's dropped versions for the memo and for the
/// strategies that repair from them (DELI).
struct DropCollector {
    mgr: Arc<IndexManager>,
    memo: bool,
    inputs: Vec<u64>,
    drops: Vec<Dropped>,
    repairers: Vec<Arc<IndexDef>>,
    /// The JSON paths of `repairers`.
    fields: Fields,
    /// Per repairer: the dropped values' (key, seq, attribute).
    repairs: Vec<Vec<DroppedEntry>>,
}

impl CompactionObserver for DropCollector {
    fn on_dropped(&mut self, e: &EntryRef<'_>, reason: DropReason) {
        if self.memo {
            self.drops.push((
                e.user_key.to_vec(),
                e.seq,
                reason == DropReason::ObsoleteTombstone,
            ));
        }
        if e.kind != ValueKind::Value || self.repairers.is_empty() {
            return;
        }
        let read = read_doc(e.value, &self.fields);
        let doc = Doc::of(&self.fields, &read);
        for (d, out) in self.repairers.iter().zip(self.repairs.iter_mut()) {
            if let Ok(v) = d.extract(e.value, doc) {
                out.push((e.user_key.to_vec(), e.seq, v));
            }
        }
    }

    fn finish(&mut self) -> Result<()> {
        for (d, items) in self.repairers.iter().zip(self.repairs.iter_mut()) {
            d.strategy.on_dropped(std::mem::take(items))?;
        }
        if !self.memo {
            return Ok(());
        }
        let mut inputs = std::mem::take(&mut self.inputs);
        inputs.sort_unstable();
        lock(&self.mgr.pending_drops).push((inputs, std::mem::take(&mut self.drops)));
        Ok(())
    }
}

/// Calls `f` with the operations of `batch` (a batch of one write, every
/// `put`, without an allocation).
fn with_ops<R>(batch: &WriteBatch, f: impl FnOnce(&[OpRef<'_>]) -> Result<R>) -> Result<R> {
    let mut each = (batch.sequence()..)
        .zip(batch.iter())
        .map(|(s, op)| op.and_then(|op| indexed_op(s, op)));
    match (batch.len(), each.next()) {
        (1, Some(op)) => f(&[op?]),
        (_, first) => {
            let many: Vec<OpRef<'_>> = first.into_iter().chain(each).collect::<Result<_>>()?;
            f(&many)
        }
    }
}

/// Operation `op` at sequence number `seq` as the index framework sees
/// it: the new record, or `None` for a deletion. Merge operands have no
/// record to index (refused on databases with indexes).
fn indexed_op(seq: SeqNo, op: BatchOp<'_>) -> Result<OpRef<'_>> {
    match op {
        BatchOp::Put { key, value } => Ok((seq, key, Some(value))),
        BatchOp::Delete { key } => Ok((seq, key, None)),
        BatchOp::Merge { .. } => Err(Error::invalid(MERGE_WITH_INDEXES)),
    }
}

const MERGE_WITH_INDEXES: &str = "the database has secondary indexes";

impl EngineHooks for IndexManager {
    fn name(&self) -> &str {
        HOOK_NAME
    }

    fn attach(&self, engine: &EngineHandle) {
        let _ = self.tables.set(engine.tables().clone());
        let _ = self.primary.set(engine.clone());
        // The handle, not the database: a tree's compaction thread (merge
        // repair) must never hold the last reference to the primary.
        let h = engine.clone();
        let _ = self
            .gate
            .primary_clock
            .set(Box::new(move || (h.oldest_readable(), h.last_sequence())));
    }

    fn memtable_side(&self) -> Option<Arc<dyn MemSide>> {
        self.new_side()
    }

    fn refuses_merge_operands(&self) -> Option<String> {
        (!read(&self.defs).is_empty()).then(|| MERGE_WITH_INDEXES.to_string())
    }

    fn wants_batches(&self) -> bool {
        read(&self.batch_plan).wants_batches
    }

    /// Synchronous maintenance and the update memo for one batch (see
    /// `strategy` for the contract). The sync guard is taken after the
    /// lookups of the records the batch overwrites, so readers wait only
    /// for the edits, and returned: the engine holds it until the batch is
    /// published. During WAL replay, indexes rebuilt at open are skipped
    /// and no guard is needed. When every such index reads the replaced
    /// records or where they are ([`IndexManager::defers_to_insert`]),
    /// their maintenance waits for [`EngineHooks::after_insert`]: the
    /// memtable insert's own search then finds the versions the active
    /// memtable holds. The guard is then taken here, before the insert,
    /// and covers the insert, the remaining lookups and the maintenance.
    fn before_batch<'a>(
        &'a self,
        batch: &WriteBatch,
        cx: &BatchContext<'_>,
    ) -> Result<Option<BatchGuard<'a>>> {
        // Read while the batch holds the front of the writer queue: an
        // index created later waits (`pause_writes` in `create_index`) for
        // this batch to be published before its build starts. A scan build
        // clears its structure under the sync guard and scans a snapshot
        // taken then, so edits made here to an index before its scan starts
        // are harmless; afterwards they are the writes since its snapshot.
        let sync_defs = self.batch_defs(cx.recovering());
        let use_memo = self.memo_in_use();
        let defer = !sync_defs.is_empty() && self.defers_to_insert();
        self.pre_reads.set_batch_after_side(defer);
        *lock(&self.deferred) = None;
        if sync_defs.is_empty() && !use_memo {
            return Ok(None);
        }
        let guard = with_ops(batch, |ops| {
            let mut guard: Option<BatchGuard<'a>> = None;
            if !sync_defs.is_empty() {
                if !defer {
                    let needs = Self::needs_current(&sync_defs);
                    let keys = needs.keys(ops);
                    let current: Current<'_> = if keys.is_empty() {
                        Current::default()
                    } else if needs == NeedsCurrent::Exists {
                        // Before the insert: `cx` includes the active
                        // memtable.
                        keys.into_iter()
                            .map(|k| (k, cx.may_exist_by_filters(k).then(|| (0, Vec::new()))))
                            .collect()
                    } else {
                        let found = cx.current(&keys, batch.sequence().saturating_sub(1))?;
                        keys.into_iter().zip(found).collect()
                    };
                    if !cx.recovering() {
                        guard = Some(self.memory_guard().into());
                    }
                    self.sync_apply(&sync_defs, ops, &current, true)?;
                } else if !cx.recovering() {
                    // Taken before the insert, not in `after_insert`: a scan
                    // build clears its structure and takes its snapshot
                    // under this guard, so it must not fall between this
                    // batch's notes (`written` below) and its maintenance
                    // — the build would then re-add the versions the batch
                    // replaces from a snapshot without the batch.
                    guard = Some(self.memory_guard().into());
                }
                for d in sync_defs.iter() {
                    if let Some(b) = d.scan().as_mut() {
                        b.written.extend(ops.iter().map(|(_, k, _)| k.to_vec()));
                    }
                }
            }
            if use_memo {
                self.note_writes(ops, &|k| cx.may_exist(k));
            }
            Ok(guard)
        })?;
        if defer {
            *lock(&self.deferred) = Some(sync_defs);
        }
        Ok(guard)
    }

    fn wants_shadowed(&self) -> bool {
        lock(&self.deferred).is_some()
    }

    /// The maintenance `before_batch` left for after the insert: each
    /// key's record before the batch is the entry its first operation
    /// shadowed in the active memtable (read there, in place), or else is
    /// looked up in the older components — the records `cx.current` would
    /// give over all components before the insert, without searching the
    /// active memtable a second time.
    fn after_insert<'a>(
        &'a self,
        batch: &WriteBatch,
        shadowed: &[Option<Shadowed<'_>>],
        cx: &BatchContext<'_>,
    ) -> Result<Option<BatchGuard<'a>>> {
        let Some(sync_defs) = lock(&self.deferred).take() else {
            return Ok(None);
        };
        #[cfg(feature = "testing")]
        {
            let hook = lock(&self.maintenance_pause).clone();
            if let Some(h) = hook {
                h();
            }
        }
        with_ops(batch, |ops| {
            if shadowed.len() != ops.len() {
                return Err(Error::invalid(format!(
                    "after_insert: {} shadowed entries for a batch of {}",
                    shadowed.len(),
                    ops.len()
                )));
            }
            let needs = Self::needs_current(&sync_defs);
            let exists = needs == NeedsCurrent::Exists;
            // The first operation of each key (one write: the only one).
            let firsts: FastMap<&[u8], usize> = if ops.len() > 1 {
                let mut m = FastMap::default();
                for (i, &(_, key, _)) in ops.iter().enumerate() {
                    m.entry(key).or_insert(i);
                }
                m
            } else {
                FastMap::default()
            };
            let first = |key: &[u8]| {
                if ops.len() > 1 {
                    firsts.get(key).copied()
                } else {
                    Some(0)
                }
            };
            let mut current = Current::default();
            // Keys the active memtable did not hold (recorded as absent
            // until looked up); a batch of one write needs no list.
            let mut missing: Vec<&[u8]> = Vec::new();
            let mut missing_one: Option<&[u8]> = None;
            for op in ops.iter().filter(|op| needs.asks(op)) {
                let key = op.1;
                if current.contains_key(key) {
                    continue;
                }
                match first(key)
                    .and_then(|i| shadowed.get(i))
                    .and_then(Option::as_ref)
                {
                    Some(sh) if sh.kind == ValueKind::Merge => {
                        return Err(Error::invalid(MERGE_WITH_INDEXES));
                    }
                    // Any version counts as existing, a tombstone too.
                    Some(sh) if exists => {
                        current.insert(key, Some((sh.seq, Vec::new())));
                    }
                    Some(sh) => {
                        let live = sh.kind == ValueKind::Value;
                        current.insert(key, live.then(|| (sh.seq, sh.value.to_vec())));
                    }
                    None if ops.len() == 1 => missing_one = Some(key),
                    None => {
                        current.insert(key, None);
                        missing.push(key);
                    }
                }
            }
            let one: [&[u8]; 1];
            let missing: &[&[u8]] = match missing_one {
                Some(k) => {
                    one = [k];
                    &one
                }
                None => &missing,
            };
            if !missing.is_empty() {
                let before = batch.sequence().saturating_sub(1);
                if exists {
                    // `cx` holds the components older than the active
                    // memtable, so the batch's own writes are not seen.
                    for key in missing {
                        let may = cx.may_exist_by_filters(key);
                        current.insert(key, may.then(|| (0, Vec::new())));
                    }
                } else {
                    for (key, v) in missing.iter().zip(cx.current(missing, before)?) {
                        current.insert(key, v);
                    }
                }
            }
            // Under the sync guard `before_batch` took and returned.
            self.sync_apply(&sync_defs, ops, &current, true)?;
            Ok(None)
        })
    }

    fn wants_flush_notice(&self) -> bool {
        read(&self.defs).iter().any(|d| d.strategy.has_own_files())
    }

    fn before_flush_install(&self) -> Result<()> {
        self.defs()
            .iter()
            .try_for_each(|d| d.strategy.before_primary_flush())
    }

    fn table_observer(&self, ctx: &TableContext) -> Option<Box<dyn TableObserver>> {
        let mut defs = Vec::new();
        let mut builders = Vec::new();
        for d in self.defs() {
            if let Some(b) = d.strategy.table_builder(ctx) {
                defs.push(d);
                builders.push(b);
            }
        }
        if defs.is_empty() {
            return None;
        }
        let use_memo = defs.iter().any(|d| d.strategy.uses_memo());
        let side = side::of(ctx.side.as_ref());
        let flushed = defs
            .iter()
            .map(|d| side.and_then(|s| s.values_by_seq(d.meta.id)))
            .collect();
        let stored = defs
            .iter()
            .map(|d| {
                let scratch = ctx.scratch.as_ref()?;
                let name = format!("strata.stored.{}", d.meta.id);
                // An error reading the inputs' index blocks only means the
                // records are read instead.
                scratch.get_or_insert_with(&name, || {
                    d.strategy
                        .stored_values(&ctx.inputs, STORED_VALUES_BUDGET)
                        .ok()
                        .flatten()
                })
            })
            .collect();
        Some(Box::new(IndexObserver {
            mgr: self.me.upgrade()?,
            fields: fields_of(defs.iter().map(|d| &*d.meta)),
            defs,
            builders,
            flushed,
            stored,
            use_memo,
            memo_entries: Vec::new(),
            last_key: Vec::new(),
            has_last: false,
        }))
    }

    fn compaction_observer(&self, ctx: &CompactionContext) -> Option<Box<dyn CompactionObserver>> {
        let repairers: Vec<Arc<IndexDef>> = self
            .defs()
            .into_iter()
            .filter(|d| d.strategy.wants_dropped())
            .collect();
        let memo = self.memo_in_use();
        if !memo && repairers.is_empty() {
            return None;
        }
        let n = repairers.len();
        Some(Box::new(DropCollector {
            mgr: self.me.upgrade()?,
            memo,
            inputs: ctx.input_files.clone(),
            drops: Vec::new(),
            fields: fields_of(repairers.iter().map(|d| &*d.meta)),
            repairers,
            repairs: vec![Vec::new(); n],
        }))
    }

    fn on_install(&self, ev: &InstallEvent<'_>) -> Result<InstallOutcome> {
        let prev = ev
            .previous
            .and_then(|s| s.downcast_ref::<IndexVersionState>());
        let generation = self.generation.fetch_add(1, Relaxed) + 1;
        if ev.reason == InstallReason::Compaction {
            let mut removed: Vec<u64> = ev.removed.iter().map(|(_, n)| *n).collect();
            removed.sort_unstable();
            removed.dedup();
            let mut pending = lock(&self.pending_drops);
            if let Some(i) = pending.iter().position(|(inputs, _)| *inputs == removed) {
                let (_, drops) = pending.swap_remove(i);
                // A version at or below an index's `memo_from` may predate
                // the memo, so no entry ever counted it: its drop must not
                // decrement a count (an entry would leave while versions it
                // counted remain). Entries then only over-count.
                let floor = read(&self.defs)
                    .iter()
                    .filter(|d| d.strategy.uses_memo())
                    .map(|d| d.memo_from())
                    .max()
                    .unwrap_or(0);
                for (k, seq, tomb) in drops {
                    if seq <= floor && !tomb {
                        continue;
                    }
                    self.memo.write(&k).on_dropped(&k, seq, tomb, generation);
                }
            }
        }
        // The live set, then side files: a side file installed (its
        // `covered` payload being logged) is handed to its strategy as its
        // table added again, if the table is still live; otherwise, and
        // for every table leaving the live set, it is retired.
        let sides: Vec<(u32, u64)> = if ev.reason == InstallReason::External {
            std::mem::take(&mut *lock(&self.side_pending))
        } else {
            Vec::new()
        };
        let mut covered: BTreeMap<u32, Vec<(usize, Arc<FileMetaData>)>> = BTreeMap::new();
        {
            let mut live = lock(&self.live);
            for (_, n) in ev.removed {
                live.remove(n);
            }
            for (l, f) in ev.added {
                live.insert(f.number, (*l, f.clone()));
            }
            for (_, n) in ev.removed {
                if !live.contains_key(n) {
                    self.sides.table_removed(*n);
                }
            }
            for (id, n) in sides {
                match live.get(&n) {
                    Some((l, f)) => covered.entry(id).or_default().push((*l, f.clone())),
                    None => self.sides.table_removed(n),
                }
            }
        }
        let mut slots = BTreeMap::new();
        for d in self.defs() {
            let prev_slot = prev.and_then(|p| p.slots.get(&d.id));
            let slot = match covered.get(&d.id) {
                Some(added) => {
                    let removed: Vec<(usize, u64)> =
                        added.iter().map(|(l, f)| (*l, f.number)).collect();
                    let again = InstallEvent {
                        reason: InstallReason::External,
                        added,
                        removed: &removed,
                        previous: ev.previous,
                    };
                    d.strategy.on_install(prev_slot, &again)?
                }
                None => d.strategy.on_install(prev_slot, ev)?,
            };
            if let Some(s) = slot {
                slots.insert(d.id, s);
            }
        }
        let state = Arc::new(IndexVersionState { generation, slots });
        let oldest = self.track(&state);
        self.memo
            .for_each_mut(|m| m.purge(oldest.saturating_sub(1)));
        Ok(InstallOutcome {
            payload: None,
            state: Some(state as ExtState),
        })
    }

    fn on_recover(
        &self,
        payloads: &[Vec<u8>],
        files: &[(usize, Arc<FileMetaData>)],
    ) -> Result<Option<ExtState>> {
        // Definitions, in the order they were logged.
        let mut specs: BTreeMap<u32, (IndexSpec, bool, SeqNo)> = BTreeMap::new();
        let mut covered: HashSet<(u32, u64)> = HashSet::new();
        let mut max_id = 0;
        for p in payloads {
            let ev: DefEvent = serde_json::from_slice(p).map_err(|e| {
                Error::corruption(format!("bad index definition in the MANIFEST: {e}"))
            })?;
            match ev {
                DefEvent::Create {
                    id,
                    spec,
                    memo_from,
                    ..
                } => {
                    max_id = max_id.max(id);
                    specs.insert(id, (spec, false, memo_from));
                }
                DefEvent::Covered { id, file, .. } => {
                    covered.insert((id, file));
                }
                DefEvent::Ready { id, .. } => {
                    if let Some(s) = specs.get_mut(&id) {
                        s.1 = true;
                    }
                }
                DefEvent::Drop { id, .. } => {
                    specs.remove(&id);
                }
            }
        }
        let mut defs = Vec::new();
        for (id, (spec, ready, memo_from)) in specs {
            let d = self.make_def(id, spec, ready)?;
            d.memo_from.store(memo_from, Relaxed);
            defs.push(Arc::new(d));
        }
        self.next_id.store(max_id + 1, Relaxed);
        {
            let mut all = write(&self.defs);
            *all = defs.clone();
            self.set_batch_plan(&all);
        }
        self.remove_orphan_dirs(&defs);
        *lock(&self.live) = files
            .iter()
            .map(|(l, f)| (f.number, (*l, f.clone())))
            .collect();
        // Side files: those a payload refers to, of live tables and indexes.
        for d in &defs {
            for (_, f) in files {
                if covered.contains(&(d.id, f.number)) {
                    let fs = &self.tree_opts.fs;
                    let side = SideFile::open(fs, &self.db_dir, f.number, f.file_size, d.id)?;
                    self.sides.insert(d.id, f.number, Arc::new(side));
                }
            }
        }
        self.remove_orphan_sides();

        let mut slots = BTreeMap::new();
        for d in &defs {
            if let Some(s) = d.strategy.on_recover(files, d.is_ready())? {
                slots.insert(d.id, s);
            }
        }
        if self.memo_in_use() {
            for (_, f) in files {
                let t = self.tables()?.get(f.number, f.file_size)?;
                if let Some(b) = t.meta_block(MEMO_BLOCK)? {
                    for (k, latest, obsolete) in memo::decode_block(&b)? {
                        self.memo.write(&k).merge_recovered(&k, latest, obsolete);
                    }
                }
            }
        }
        let state = Arc::new(IndexVersionState {
            generation: 0,
            slots,
        });
        self.track(&state);
        Ok(Some(state as ExtState))
    }
}
