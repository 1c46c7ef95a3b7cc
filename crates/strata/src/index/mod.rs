//! Secondary indexes: definitions, the engine hooks that maintain them, and
//! query answering.
//!
//! An index has a name, an attribute extractor (a JSON field path, or a
//! registered function), a key type and a strategy. [`IndexManager`] is the
//! engine extension (hook name `strata.index`) behind every index: it
//! persists definitions as MANIFEST payloads, gives each memtable a side
//! structure (so index queries never parse the memtable), observes every
//! table written (building each strategy's per-table structures), keeps the
//! update memo (`memo`), installs per-version index state atomically with
//! each version, and answers queries newest component first.
//!
//! Contract, for every strategy: a query returns exactly the live records
//! (newest version at the snapshot, not deleted) whose current attribute
//! satisfies the predicate, newest first, at most `limit` of them.
//!
//! Strategies: `next` (NEXT, SIGMOD 2025: per-table secondary index blocks
//! plus an in-memory global index), `memory` (the "Eager" in-RAM
//! baseline: a B-tree / R-tree maintained synchronously by every write and
//! rebuilt at open, see [`memory`]), and the stand-alone strategies on a
//! secondary LSM tree behind the [`strategy::Strategy`] trait: `composite`
//! (Luo & Carey's eager and validation strategies), `deli` (DELI's
//! compaction-coupled and read repair) and `posting-eager` /
//! `posting-lazy` (LevelDB++'s Stand-Alone indexes); see [`tree`]. See `../shared/DESIGN.md` §4. NEXT
//! indexes use the memtable side structures, the table observer, the memo
//! and the per-version state; `memory` indexes use none of them, only their
//! own structure and the sync guard ([`IndexManager::memory_guard`]).
//! `embedded` (the Embedded Index of LevelDB++, SIGMOD 2018 §3: per-block
//! zone maps and Bloom filters, GetLite validation, see [`embedded`]) uses
//! the memtable side structures, the table observer and the per-version
//! state, not the memo.

pub(crate) mod composite;
pub(crate) mod deli;
pub mod embedded;
pub mod memo;
pub(crate) mod memory;
pub mod next;
pub(crate) mod posting;
pub(crate) mod repair;
pub(crate) mod strategy;
pub(crate) mod tree;
pub mod value;

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::TableCache;
use crate::error::{Error, Result};
use crate::hooks::{
    CompactionContext, CompactionObserver, DropReason, EngineHooks, EntryRef, ExtState,
    InstallEvent, InstallOutcome, InstallReason, TableContext, TableObserver,
};
use crate::key::{SeqNo, ValueKind};
use crate::memtable::{MemGet, MemSide, MemTable};
use crate::sstable::BlockHandle;
use crate::version::{FileMetaData, Version};

use memo::{Memo, Validity};
use next::{Delta, NextGlobal, TableIndex};
use strategy::{NeedsCurrent, Strategy};
pub use value::{IndexValue, KeyType, Predicate, Skip};

/// Every strategy name [`IndexSpec::strategy`] accepts.
pub const STRATEGY_NAMES: &[&str] = &[
    "next",
    "memory",
    "embedded",
    "composite",
    "deli",
    "posting-eager",
    "posting-lazy",
];

/// Hook name under which index payloads are stored in the MANIFEST.
pub const HOOK_NAME: &str = "strata.index";
/// Name of the memo meta block in tables.
pub const MEMO_BLOCK: &str = "next.memo";

/// A function extracting an attribute from a raw value (for
/// [`Extractor::Custom`]); `None` means "not indexed".
pub type ExtractorFn = Arc<dyn Fn(&[u8]) -> Option<IndexValue> + Send + Sync>;

/// Where an index's attribute comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Extractor {
    /// A JSON field path such as `user_id`, `place.bbox` or `coordinates.0`.
    Field(String),
    /// A function registered under this name with
    /// [`crate::Options::extractor`] (must be registered at every open).
    Custom(String),
}

/// An index definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexSpec {
    pub name: String,
    pub extractor: Extractor,
    pub key_type: KeyType,
    /// Strategy name: `next` (the default), `memory` or `embedded`.
    pub strategy: String,
    /// Strategy parameters, e.g. `delta` for `next` (`auto`, `off` or a
    /// number).
    pub params: BTreeMap<String, String>,
}

impl IndexSpec {
    /// An index on a JSON field, with the default strategy.
    pub fn field(name: &str, path: &str, key_type: KeyType) -> IndexSpec {
        IndexSpec {
            name: name.to_string(),
            extractor: Extractor::Field(path.to_string()),
            key_type,
            strategy: "next".to_string(),
            params: BTreeMap::new(),
        }
    }

    /// An index whose attribute comes from a registered function.
    pub fn custom(name: &str, extractor: &str, key_type: KeyType) -> IndexSpec {
        IndexSpec {
            extractor: Extractor::Custom(extractor.to_string()),
            ..IndexSpec::field(name, "_", key_type)
        }
    }

    pub fn strategy(mut self, s: &str) -> Self {
        self.strategy = s.to_string();
        self
    }

    pub fn param(mut self, k: &str, v: &str) -> Self {
        self.params.insert(k.to_string(), v.to_string());
        self
    }
}

/// Whether an index answers queries yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexState {
    /// Being built over existing data; queries fail with a clear error.
    Building,
    Ready,
}

/// Per-index counters (since open, except sizes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexStats {
    /// Writes whose attribute was indexed.
    pub indexed_writes: u64,
    /// Writes not indexed: attribute absent, of another type, or the value
    /// is not JSON.
    pub skipped_missing: u64,
    pub skipped_wrong_type: u64,
    pub skipped_malformed: u64,
    /// Global-index entries and their RAM.
    pub global_entries: u64,
    pub memory_bytes: u64,
    /// Bytes of this index's blocks in live tables.
    pub disk_bytes: u64,
    pub queries: u64,
    /// Candidates validated, and how many were stale. For `memory`
    /// indexes (which need no validation): records fetched and checked to
    /// be the version the index holds, and how many were not (a bug).
    pub validations: u64,
    pub validations_failed: u64,
    /// Point lookups needed because a key changed after the query's snapshot.
    pub exact_checks: u64,
    /// Stale entries removed by repair (stand-alone strategies: DELI's
    /// compaction-coupled and read repair).
    #[serde(default)]
    pub repaired: u64,
    /// DELI: largest sequence number whose dropped versions are repaired.
    #[serde(default)]
    pub ts_last: Option<u64>,
    /// Composite merge repair (Luo & Carey §4.4): entries that went through
    /// a repair; of those, looked up in the primary-key index, and left
    /// valid without a lookup (repaired-timestamp pruning and Bloom
    /// filters); obsolete entries left for later because a snapshot may
    /// still read them; repairs abandoned on a read error (the merge went
    /// on without marking anything).
    #[serde(default)]
    pub repair_scanned: u64,
    #[serde(default)]
    pub repair_lookups: u64,
    #[serde(default)]
    pub repair_pruned: u64,
    #[serde(default)]
    pub repair_deferred: u64,
    #[serde(default)]
    pub repair_errors: u64,
}

/// An index as listed by [`crate::Db::indexes`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexInfo {
    pub id: u32,
    pub spec: IndexSpec,
    pub state: IndexState,
    pub stats: IndexStats,
}

/// Options of one query.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryOptions {
    /// Only the K most recent matches (highest sequence numbers).
    pub limit: Option<usize>,
    /// Return keys without values.
    pub keys_only: bool,
}

impl QueryOptions {
    pub fn limit(mut self, k: usize) -> Self {
        self.limit = Some(k);
        self
    }

    pub fn keys_only(mut self, v: bool) -> Self {
        self.keys_only = v;
        self
    }
}

/// What one query did, in machine-independent units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryProfile {
    /// Data blocks fetched (from the cache or disk).
    pub data_blocks_read: u64,
    /// Distinct data blocks holding the results (memtable results need
    /// none): the physical minimum of data block reads.
    pub min_data_blocks: u64,
    /// Secondary-index blocks fetched.
    pub index_blocks_read: u64,
    /// Candidates validated, and how many were stale.
    pub candidates: u64,
    pub stale: u64,
    /// Tables skipped because the top K was already known.
    pub tables_skipped: u64,
}

/// One query result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub key: Vec<u8>,
    /// `None` in keys-only mode.
    pub value: Option<Vec<u8>>,
    /// Sequence number of the write that stored this version.
    pub seq: SeqNo,
}

#[derive(Default)]
struct DefCounters {
    indexed: AtomicU64,
    missing: AtomicU64,
    wrong_type: AtomicU64,
    malformed: AtomicU64,
    queries: AtomicU64,
    validations: AtomicU64,
    failed: AtomicU64,
    exact: AtomicU64,
}

/// A live index definition.
pub(crate) struct IndexDef {
    pub id: u32,
    pub spec: IndexSpec,
    path: Vec<String>,
    custom: Option<ExtractorFn>,
    pub delta: Delta,
    /// The in-RAM structure of a `memory` index (`None` for other
    /// strategies).
    pub memory: Option<memory::MemoryIndex>,
    /// The structure of a stand-alone strategy (`composite`, `deli`,
    /// `posting-*`), maintained on the write path through [`Strategy`].
    pub ext: Option<Arc<dyn Strategy>>,
    ready: AtomicBool,
    counters: DefCounters,
    /// Declared after `ext` so that the strategy's files are closed first.
    remove_dir: RemoveOnDrop,
}

/// Removes an index's directory when its definition is dropped, if armed
/// (the index was dropped).
#[derive(Default)]
struct RemoveOnDrop {
    path: Option<std::path::PathBuf>,
    armed: AtomicBool,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let (Some(p), true) = (&self.path, self.armed.load(Relaxed)) {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

impl IndexDef {
    fn needs_json(&self) -> bool {
        self.custom.is_none()
    }

    /// The attribute of `raw` (with `doc` its JSON parse, done once per
    /// record by the caller when any index needs it).
    fn extract(
        &self,
        raw: &[u8],
        doc: Option<&std::result::Result<Value, ()>>,
    ) -> std::result::Result<IndexValue, Skip> {
        if let Some(f) = &self.custom {
            return match f(raw) {
                Some(v) if v.key_type() == self.spec.key_type => Ok(v),
                Some(_) => Err(Skip::WrongType),
                None => Err(Skip::Missing),
            };
        }
        match doc {
            Some(Ok(d)) => value::extract(d, &self.path, self.spec.key_type),
            _ => Err(Skip::Malformed),
        }
    }

    fn count_skip(&self, s: Skip) {
        let c = &self.counters;
        match s {
            Skip::Missing => c.missing.fetch_add(1, Relaxed),
            Skip::WrongType => c.wrong_type.fetch_add(1, Relaxed),
            Skip::Malformed => c.malformed.fetch_add(1, Relaxed),
        };
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Relaxed)
    }

    /// True for indexes of strategy `memory`.
    pub fn is_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// True for strategies maintained synchronously by the write leader
    /// under the sync guard (`memory` and the stand-alone strategies).
    pub fn is_sync(&self) -> bool {
        self.memory.is_some() || self.ext.is_some()
    }

    /// The attribute of `raw`, counting indexed and skipped writes.
    fn extract_counted(&self, raw: &[u8]) -> Option<IndexValue> {
        let doc = parse_doc(raw, std::iter::once(self));
        match self.extract(raw, doc.as_ref()) {
            Ok(v) => {
                self.counters.indexed.fetch_add(1, Relaxed);
                Some(v)
            }
            Err(s) => {
                self.count_skip(s);
                None
            }
        }
    }
}

/// Parses `raw` as JSON once for all of `defs`, if any of them extracts
/// from JSON (a registered function does not need it). `Some(Err)` marks a
/// malformed document.
fn parse_doc<'a>(
    raw: &[u8],
    mut defs: impl Iterator<Item = &'a IndexDef>,
) -> Option<std::result::Result<Value, ()>> {
    defs.any(|d| d.needs_json())
        .then(|| serde_json::from_slice::<Value>(raw).map_err(|_| ()))
}

/// Definition changes, stored as MANIFEST payloads (JSON, versioned).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum DefEvent {
    Create { v: u32, id: u32, spec: IndexSpec },
    Ready { v: u32, id: u32 },
    Drop { v: u32, id: u32 },
}

/// Index state carried by each version (see `hooks`): immutable.
#[derive(Default)]
pub(crate) struct IndexVersionState {
    /// Increases with every install; stamps memo removals.
    pub generation: u64,
    /// Global index of each NEXT index, by index id.
    pub next: BTreeMap<u32, Arc<NextGlobal>>,
    /// Per-table zone maps and filters of each `embedded` index, by id.
    pub embedded: BTreeMap<u32, Arc<embedded::EmbeddedGlobal>>,
}

/// Records of a batched lookup, in the order of the keys: value and
/// sequence number, `None` if absent or deleted.
pub(crate) type Fetched = Vec<Option<crate::db::Versioned>>;

/// A batched point lookup at a snapshot.
pub(crate) type FetchFn<'a> = dyn Fn(&[&[u8]], SeqNo) -> Result<Fetched> + 'a;

/// One operation of a write batch: sequence number, key, and the value of a
/// put (`None` for a delete).
pub(crate) type OpRef<'a> = (SeqNo, &'a [u8], Option<&'a [u8]>);

/// Everything a query reads: a consistent view of the database.
pub(crate) struct QueryView<'a> {
    /// Newest first.
    pub mems: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
    /// The snapshot of NEXT and `embedded` queries, registered with the
    /// engine for the whole query (so no compaction drops a version it can
    /// see) and taken before `mems` and `version`, which therefore hold
    /// every version it sees. `memory` and stand-alone queries pin their
    /// own, see `pin_latest`.
    pub snapshot: SeqNo,
    pub tables: &'a TableCache,
    /// Registers a snapshot at the latest published sequence number
    /// (compaction keeps what it sees until it is dropped). `memory`
    /// queries call it while holding the memory guard.
    pub pin_latest: &'a dyn Fn() -> crate::db::Snapshot,
    /// Batched point lookup (sorted keys, component by component) at a
    /// snapshot: each key's value and sequence number, `None` if absent or
    /// deleted; results in the order of the keys.
    pub fetch: &'a FetchFn<'a>,
    /// Data blocks fetched so far by the engine (cache hits and disk reads).
    pub data_blocks_read: &'a dyn Fn() -> u64,
    /// Test hook run once a query has pinned what it reads and before it
    /// validates a candidate (see `Db::set_query_pause_hook`).
    pub pause: Option<&'a (dyn Fn() + Send + Sync)>,
}

impl QueryView<'_> {
    /// Sequence number of the newest entry (value, tombstone or operand)
    /// of `key` at the snapshot, looked up in this view's components only:
    /// a fresh read view could miss versions that a compaction finished
    /// during the query has dropped.
    pub fn newest_seq(&self, key: &[u8]) -> Result<Option<SeqNo>> {
        for m in &self.mems {
            match m.get(key, self.snapshot) {
                Some(MemGet::Value(s, _) | MemGet::Deleted(s) | MemGet::Merge(s)) => {
                    return Ok(Some(s))
                }
                None => {}
            }
        }
        Ok(self
            .version
            .get(self.tables, key, self.snapshot)?
            .map(|f| f.seq))
    }

    /// Runs the test hook, if any (see `pause`).
    pub fn pause(&self) {
        if let Some(f) = self.pause {
            f();
        }
    }
}

/// A dropped version: key, sequence number, whether it was a tombstone
/// dropped at the bottom.
type Dropped = (Vec<u8>, SeqNo, bool);

/// A memtable side entry: encoded value, key, sequence number.
type SideEntry = (Vec<u8>, Vec<u8>, SeqNo);

/// The engine extension behind all secondary indexes.
pub(crate) struct IndexManager {
    me: Weak<IndexManager>,
    tables: Arc<TableCache>,
    /// The database directory (stand-alone strategies keep their trees in
    /// `index-<id>/` inside it) and the options of those trees.
    db_dir: std::path::PathBuf,
    tree_opts: crate::Options,
    extractors: BTreeMap<String, ExtractorFn>,
    defs: RwLock<Vec<Arc<IndexDef>>>,
    next_id: AtomicU32,
    memo: RwLock<Memo>,
    /// Per (index id, table file): global entries computed while the table
    /// was written, consumed when the table is installed.
    pending_tables: Mutex<HashMap<(u32, u64), Arc<TableIndex>>>,
    /// The same for `embedded` indexes.
    pending_embedded: embedded::Pending,
    /// Dropped versions of finished compactions (by sorted input files),
    /// applied to the memo when the compaction installs.
    pending_drops: Mutex<Vec<(Vec<u64>, Vec<Dropped>)>>,
    /// States handed to versions, to find the oldest a reader may hold.
    live_states: Mutex<Vec<Weak<IndexVersionState>>>,
    generation: AtomicU64,
    /// The memory guard and the primary's clock, shared with merge repair.
    gate: Arc<SyncGate>,
}

/// What merge repair, running on an index tree's compaction thread, needs
/// of the framework. Kept apart from [`IndexManager`] so that such a thread
/// never holds the manager: the last reference to the manager would then
/// drop the tree (and join that very thread) when the primary closes.
pub(crate) struct SyncGate {
    /// The memory guard: a write-group leader that maintains `memory` or
    /// stand-alone indexes holds it for writing from before it edits them
    /// until after it has published the batch's last sequence number; a
    /// query holds it for reading while it pins its snapshot and collects
    /// candidates. So a reader never sees a structure that is ahead of (or
    /// behind) the published sequence number.
    guard: RwLock<()>,
    /// The primary's (oldest live snapshot, last published sequence
    /// number), set once the primary is open (merge repair).
    primary_clock: OnceLock<PrimaryClock>,
}

impl SyncGate {
    /// Pins `pk` (a primary-key index) for a merge repair (see
    /// `repair`'s snapshot rules). Takes the sync guard only if it is free
    /// within a few milliseconds: the caller is a tree's compaction thread,
    /// which a write leader holding the guard may be waiting for. `None`
    /// before the primary is open.
    pub(crate) fn pin_for_repair(&self, pk: &tree::IndexTree) -> Option<repair::RepairPin> {
        let clock = self.primary_clock.get()?;
        for _ in 0..20 {
            if let Ok(_g) = self.guard.try_read() {
                let pinned = pk.db.snapshot();
                let (horizon, published) = clock();
                return Some(repair::RepairPin {
                    pk: pinned,
                    horizon,
                    exact: Some(published),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (horizon, _) = clock();
        Some(repair::RepairPin {
            pk: pk.db.snapshot(),
            horizon,
            exact: None,
        })
    }
}

/// See [`IndexManager::set_primary_clock`].
pub(crate) type PrimaryClock = Box<dyn Fn() -> (SeqNo, SeqNo) + Send + Sync>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

impl IndexManager {
    pub fn new(
        tables: Arc<TableCache>,
        db_dir: std::path::PathBuf,
        opts: &crate::Options,
    ) -> Arc<IndexManager> {
        let extractors = opts.extractors.clone();
        Arc::new_cyclic(|me| IndexManager {
            me: me.clone(),
            tables,
            db_dir,
            tree_opts: tree::tree_options(opts),
            extractors,
            defs: RwLock::new(Vec::new()),
            next_id: AtomicU32::new(1),
            memo: RwLock::new(Memo::default()),
            pending_tables: Mutex::new(HashMap::new()),
            pending_embedded: Mutex::new(HashMap::new()),
            pending_drops: Mutex::new(Vec::new()),
            live_states: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            gate: Arc::new(SyncGate {
                guard: RwLock::new(()),
                primary_clock: OnceLock::new(),
            }),
        })
    }

    /// Gives the framework the primary's clock: (oldest sequence number a
    /// reader may read at, last published sequence number).
    pub fn set_primary_clock(&self, clock: PrimaryClock) {
        let _ = self.gate.primary_clock.set(clock);
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

    /// True when writes must maintain the update memo (some NEXT index).
    pub fn memo_in_use(&self) -> bool {
        read(&self.defs).iter().any(|d| d.spec.strategy == "next")
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
        let mut delta = Delta::Auto;
        let mut memory = None;
        let mut ext: Option<Arc<dyn Strategy>> = None;
        let dir = tree::index_dir(&self.db_dir, id);
        let params: Vec<(String, String)> = spec
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let ty = spec.key_type;
        match spec.strategy.as_str() {
            "composite" => {
                ext = Some(Arc::new(composite::Composite::open(
                    &dir,
                    ty,
                    &params,
                    &self.tree_opts,
                    self.gate.clone(),
                )?))
            }
            "deli" => {
                ext = Some(Arc::new(deli::Deli::open(
                    &dir,
                    ty,
                    &params,
                    &self.tree_opts,
                )?))
            }
            "posting-eager" | "posting-lazy" => {
                let eager = spec.strategy == "posting-eager";
                ext = Some(Arc::new(posting::Posting::open(
                    &dir,
                    ty,
                    eager,
                    &params,
                    &self.tree_opts,
                )?))
            }
            "next" => {
                for (k, v) in &spec.params {
                    match k.as_str() {
                        "delta" => delta = Delta::parse(v)?,
                        _ => {
                            return Err(Error::invalid(format!(
                                "unknown parameter {k:?} for strategy next (known: delta)"
                            )))
                        }
                    }
                }
            }
            "memory" => {
                if let Some(k) = spec.params.keys().next() {
                    return Err(Error::invalid(format!(
                        "unknown parameter {k:?} for strategy memory (it takes none)"
                    )));
                }
                memory = Some(memory::MemoryIndex::new(spec.key_type));
            }
            "embedded" => {
                embedded::parse_params(&spec.params)?;
            }
            other => {
                return Err(Error::invalid(format!(
                    "unknown index strategy {other:?} (available: {})",
                    STRATEGY_NAMES.join(", ")
                )))
            }
        }
        Ok(IndexDef {
            id,
            spec,
            path,
            custom,
            delta,
            memory,
            remove_dir: RemoveOnDrop {
                path: ext.is_some().then_some(dir),
                armed: AtomicBool::new(false),
            },
            ext,
            ready: AtomicBool::new(ready),
            counters: DefCounters::default(),
        })
    }

    /// Validates `spec` and adds it in state `building`; returns the
    /// payload to log.
    pub fn begin_create(&self, spec: IndexSpec) -> Result<(Arc<IndexDef>, Vec<u8>)> {
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
        let _ = std::fs::remove_dir_all(tree::index_dir(&self.db_dir, id));
        let def = Arc::new(self.make_def(id, spec.clone(), false)?);
        defs.push(def.clone());
        let payload = serde_json::to_vec(&DefEvent::Create { v: 1, id, spec })
            .map_err(|e| Error::invalid(format!("cannot encode index definition: {e}")))?;
        Ok((def, payload))
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
        d.remove_dir.armed.store(true, Relaxed);
        Ok(serde_json::to_vec(&DefEvent::Drop { v: 1, id: d.id }).unwrap_or_default())
    }

    pub fn mark_ready(&self, def: &IndexDef) {
        def.ready.store(true, Relaxed);
    }

    /// The side structure for a new memtable (`None` without indexes).
    pub fn new_side(&self) -> Option<Arc<dyn MemSide>> {
        let side = IndexSide {
            indexes: RwLock::new(Vec::new()),
            bytes: AtomicUsize::new(0),
        };
        for d in self.defs().into_iter().filter(|d| !d.is_sync()) {
            side.attach(d);
        }
        Some(Arc::new(side))
    }

    /// Makes `mem`'s side structure maintain `def` from now on (a new index
    /// on the active memtable). Entries already in `mem` are not added: the
    /// index build flushes them to tables written with the index.
    /// `memory` indexes have no side structure (their writes are indexed by
    /// [`IndexManager::memory_apply`]).
    pub fn attach(&self, def: &Arc<IndexDef>, mem: &MemTable) {
        if def.is_sync() {
            return;
        }
        if let Some(side) = mem
            .side()
            .and_then(|s| s.as_any().downcast_ref::<IndexSide>())
        {
            side.attach(def.clone());
        }
    }

    /// Memo maintenance for a batch about to enter the memtable: `ops` are
    /// (key, seq) in order; `may_exist` checks older components.
    pub fn note_writes<'a>(
        &self,
        ops: impl Iterator<Item = (&'a [u8], SeqNo)>,
        may_exist: &dyn Fn(&[u8]) -> bool,
    ) {
        let mut memo = write(&self.memo);
        let mut seen: HashSet<&[u8]> = HashSet::new();
        for (k, seq) in ops {
            let exists = if seen.contains(k) {
                true
            } else {
                memo.get(k).is_some_and(|e| e.removed_at.is_none()) || may_exist(k)
            };
            seen.insert(k);
            memo.note_write(k, seq, exists);
        }
    }

    /// The `memory` indexes (ready or being built).
    pub fn memory_defs(&self) -> Vec<Arc<IndexDef>> {
        read(&self.defs)
            .iter()
            .filter(|d| d.is_memory())
            .cloned()
            .collect()
    }

    /// The indexes maintained synchronously by the write leader (`memory`
    /// and the stand-alone strategies), ready or being built.
    pub fn sync_defs(&self) -> Vec<Arc<IndexDef>> {
        read(&self.defs)
            .iter()
            .filter(|d| d.is_sync())
            .cloned()
            .collect()
    }

    /// Which records a batch overwrites the indexes `defs` need.
    pub fn needs_current(defs: &[Arc<IndexDef>]) -> NeedsCurrent {
        defs.iter()
            .map(|d| match &d.ext {
                _ if d.is_memory() => NeedsCurrent::All,
                Some(e) => e.needs_current(),
                None => NeedsCurrent::No,
            })
            .max()
            .unwrap_or(NeedsCurrent::No)
    }

    /// Synchronous maintenance of `defs` (see [`IndexManager::memory_apply`]
    /// and [`Strategy::apply`]) for one batch. The caller holds the memory
    /// guard for writing as `memory_apply` requires; `current` is filled
    /// for the keys [`IndexManager::needs_current`] asks for.
    pub fn sync_apply(
        &self,
        defs: &[Arc<IndexDef>],
        ops: &[OpRef<'_>],
        current: &HashMap<&[u8], Option<crate::db::Versioned>>,
    ) -> Result<()> {
        self.memory_apply(defs, ops, current);
        for d in defs {
            if let Some(e) = &d.ext {
                e.apply(ops, current, &|raw| d.extract_counted(raw))?;
            }
        }
        Ok(())
    }

    /// True if some index keeps a secondary tree (which must be flushed
    /// with the primary, see [`IndexManager::flush_trees`]).
    pub fn has_trees(&self) -> bool {
        read(&self.defs).iter().any(|d| d.ext.is_some())
    }

    /// Flushes every secondary tree; called before the primary installs a
    /// flush, after it fsynced its WAL (see `tree`).
    pub fn flush_trees(&self) -> Result<()> {
        for d in self.defs() {
            if let Some(e) = &d.ext {
                e.flush()?;
            }
        }
        Ok(())
    }

    /// Compacts every secondary tree completely (a full
    /// [`crate::Db::compact_range`]): each tree's merge drops what its
    /// strategy's repair marked and, for `composite` with merge repair,
    /// validates every entry.
    pub fn compact_trees(&self) -> Result<()> {
        for d in self.defs() {
            if let Some(e) = &d.ext {
                for t in e.trees() {
                    t.db.compact_range(None, None)?;
                }
            }
        }
        Ok(())
    }

    /// Waits until no secondary tree has background work pending.
    pub fn wait_trees(&self) -> Result<()> {
        for d in self.defs() {
            if let Some(e) = &d.ext {
                e.wait_idle()?;
            }
        }
        Ok(())
    }

    /// Empties a stand-alone index before its build over existing data.
    pub fn clear_ext(&self, def: &IndexDef) -> Result<()> {
        match &def.ext {
            Some(e) => e.clear(),
            None => Ok(()),
        }
    }

    /// A query on a stand-alone index: the strategy's views are pinned
    /// with the primary snapshot under the sync guard, then released.
    fn query_ext(
        &self,
        e: &Arc<dyn Strategy>,
        pred: &Predicate,
        opts: QueryOptions,
        view: &QueryView<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let (snap, pinned) = {
            let _g = read(&self.gate.guard);
            ((view.pin_latest)(), e.pin())
        };
        view.pause();
        let q = strategy::Query {
            pred,
            opts,
            view,
            snapshot: snap.sequence(),
        };
        e.query(&pinned, &q, profile)
    }

    /// Takes the memory guard for writing (see the field's contract).
    pub fn memory_guard(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        write(&self.gate.guard)
    }

    /// Synchronous maintenance of the `memory` indexes `defs` for a batch
    /// about to enter the memtable (the Eager index of LevelDB++): for each
    /// operation, removes the entry of the key's current attribute and, for
    /// a put, inserts the new one. `ops` are (seq, key, value of a put or
    /// `None` for a delete) in batch order; `current` holds, for every key
    /// of `ops`, its newest record before the batch (`None`: absent or
    /// deleted). Later operations on a key see the earlier ones of the same
    /// batch. Counts indexed and skipped writes.
    ///
    /// The caller is the only writer and holds the memory guard for writing
    /// until the batch's sequence numbers are published.
    pub fn memory_apply(
        &self,
        defs: &[Arc<IndexDef>],
        ops: &[OpRef<'_>],
        current: &HashMap<&[u8], Option<crate::db::Versioned>>,
    ) {
        let defs: Vec<(&IndexDef, &memory::MemoryIndex)> = defs
            .iter()
            .filter_map(|d| d.memory.as_ref().map(|m| (&**d, m)))
            .collect();
        if defs.is_empty() {
            return;
        }
        let n = defs.len();
        let extract = |raw: &[u8]| -> Vec<std::result::Result<IndexValue, Skip>> {
            let doc = parse_doc(raw, defs.iter().map(|(d, _)| *d));
            defs.iter()
                .map(|(d, _)| d.extract(raw, doc.as_ref()))
                .collect()
        };
        let mut editors: Vec<memory::Editor<'_>> = defs.iter().map(|(_, m)| m.edit()).collect();
        // Each key's attributes (per index) after the operations so far.
        let mut attrs: HashMap<&[u8], Vec<Option<IndexValue>>> = HashMap::new();
        for &(seq, key, new) in ops {
            let old = match attrs.remove(key) {
                Some(a) => a,
                None => match current.get(key) {
                    Some(Some((_, raw))) => extract(raw).into_iter().map(|r| r.ok()).collect(),
                    _ => vec![None; n],
                },
            };
            for (ed, v) in editors.iter_mut().zip(&old) {
                if let Some(v) = v {
                    ed.remove(v, key);
                }
            }
            let new_attrs = match new {
                Some(raw) => extract(raw)
                    .into_iter()
                    .zip(defs.iter().zip(editors.iter_mut()))
                    .map(|(r, ((d, _), ed))| match r {
                        Ok(v) => {
                            d.counters.indexed.fetch_add(1, Relaxed);
                            ed.insert(&v, key, seq);
                            Some(v)
                        }
                        Err(skip) => {
                            d.count_skip(skip);
                            None
                        }
                    })
                    .collect(),
                None => vec![None; n],
            };
            attrs.insert(key, new_attrs);
        }
    }

    /// Rebuilds the `memory` indexes `defs` from scratch from `records`,
    /// every live record (key, seq, value) of the database at one sequence
    /// number. The caller guarantees that no write is in flight and none
    /// starts until this returns (open, or writes paused), and that the
    /// indexes are not queried meanwhile (open, or still building).
    pub fn memory_rebuild(
        &self,
        defs: &[Arc<IndexDef>],
        records: impl Iterator<Item = Result<(Vec<u8>, SeqNo, Vec<u8>)>>,
    ) -> Result<()> {
        let defs: Vec<(&IndexDef, &memory::MemoryIndex)> = defs
            .iter()
            .filter_map(|d| d.memory.as_ref().map(|m| (&**d, m)))
            .collect();
        if defs.is_empty() {
            return Ok(());
        }
        for (_, m) in &defs {
            m.clear();
        }
        let mut editors: Vec<memory::Editor<'_>> = defs.iter().map(|(_, m)| m.edit()).collect();
        for r in records {
            let (key, seq, raw) = r?;
            let doc = parse_doc(&raw, defs.iter().map(|(d, _)| *d));
            for ((d, _), ed) in defs.iter().zip(editors.iter_mut()) {
                if let Ok(v) = d.extract(&raw, doc.as_ref()) {
                    ed.insert(&v, &key, seq);
                }
            }
        }
        Ok(())
    }

    /// A query on a `memory` index: candidates from the structure at a
    /// snapshot pinned under the memory guard (so they are exactly the
    /// matching live records at that snapshot), newest first, then one
    /// batched fetch of the records (or of the top K) at that snapshot.
    fn query_memory(
        &self,
        def: &IndexDef,
        mem: &memory::MemoryIndex,
        pred: &Predicate,
        opts: QueryOptions,
        view: &QueryView<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let (snap, mut cands) = {
            let _g = read(&self.gate.guard);
            let snap = (view.pin_latest)();
            let cands = mem.query(pred);
            (snap, cands)
        };
        view.pause();
        let at = snap.sequence();
        // Defensive: a failed write (database now read-only) may have
        // edited the structure without publishing its sequence numbers.
        cands.retain(|(_, s)| *s <= at);
        cands.sort_unstable_by_key(|(_, s)| Reverse(*s));
        if let Some(k) = opts.limit {
            cands.truncate(k);
        }
        profile.candidates = cands.len() as u64;
        if opts.keys_only {
            return Ok(cands
                .into_iter()
                .map(|(key, seq)| Hit {
                    key,
                    value: None,
                    seq,
                })
                .collect());
        }
        let keys: Vec<&[u8]> = cands.iter().map(|(k, _)| k.as_slice()).collect();
        let before = (view.data_blocks_read)();
        let found = (view.fetch)(&keys, at)?;
        // Counted from the shared engine counters: concurrent queries may
        // add to it. `min_data_blocks` is left 0: the batched fetch does not
        // report which block each record came from.
        profile.data_blocks_read = (view.data_blocks_read)().saturating_sub(before);
        drop(snap);
        def.counters
            .validations
            .fetch_add(cands.len() as u64, Relaxed);
        let mut hits = Vec::with_capacity(cands.len());
        for ((key, seq), f) in cands.into_iter().zip(found) {
            // Every candidate is the live version at the snapshot: the
            // fetch confirms it (a mismatch is a bug, reported, not hidden).
            match f {
                Some((s, value)) if s == seq => hits.push(Hit {
                    key,
                    value: Some(value),
                    seq,
                }),
                other => {
                    def.counters.failed.fetch_add(1, Relaxed);
                    return Err(Error::corruption(format!(
                        "memory index {:?} holds key {:?} at seq {seq}, the data has {:?}",
                        def.spec.name,
                        String::from_utf8_lossy(&key),
                        other.map(|(s, _)| s)
                    )));
                }
            }
        }
        Ok(hits)
    }

    fn state_of(version: &Version) -> Option<&IndexVersionState> {
        version
            .ext
            .get(HOOK_NAME)
            .and_then(|s| s.downcast_ref::<IndexVersionState>())
    }

    /// Answers one query. See the module documentation for the contract.
    pub fn query(
        &self,
        name: &str,
        pred: &Predicate,
        opts: QueryOptions,
        view: &QueryView<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let def = self
            .def(name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        if !def.is_ready() {
            return Err(Error::invalid(format!(
                "index {name:?} is still being built; try again when `indexes()` shows it ready"
            )));
        }
        pred.check(def.spec.key_type)?;
        def.counters.queries.fetch_add(1, Relaxed);
        if let Some(mem) = &def.memory {
            return self.query_memory(&def, mem, pred, opts, view, profile);
        }
        if let Some(e) = &def.ext {
            return self.query_ext(e, pred, opts, view, profile);
        }
        if def.spec.strategy == "embedded" {
            view.pause();
            return embedded::query(&def, pred, opts, view, profile);
        }
        view.pause();
        let empty = IndexVersionState::default();
        let state = Self::state_of(&view.version).unwrap_or(&empty);
        let generation = state.generation;
        let mut acc = Results::new(opts.limit);
        let checked = std::cell::Cell::new(0u64);
        let stale = std::cell::Cell::new(0u64);
        let validate = |key: &[u8], seq: SeqNo| -> Result<bool> {
            def.counters.validations.fetch_add(1, Relaxed);
            checked.set(checked.get() + 1);
            // The memo lock is taken per candidate, never across I/O, so
            // long queries do not hold up writers.
            let validity = read(&self.memo).validate(key, seq, view.snapshot, generation);
            let ok = match validity {
                Validity::Valid => true,
                Validity::Stale => false,
                Validity::Check => {
                    def.counters.exact.fetch_add(1, Relaxed);
                    view.newest_seq(key)? == Some(seq)
                }
            };
            if !ok {
                def.counters.failed.fetch_add(1, Relaxed);
                stale.set(stale.get() + 1);
            }
            Ok(ok)
        };
        let keep = |value: Vec<u8>| if opts.keys_only { None } else { Some(value) };

        // Memtables, newest first.
        for m in &view.mems {
            let Some(side) = m
                .side()
                .and_then(|s| s.as_any().downcast_ref::<IndexSide>())
            else {
                continue;
            };
            for (key, seq) in side.query(def.id, pred) {
                if seq > view.snapshot || !validate(&key, seq)? {
                    continue;
                }
                let value = match m.get(&key, seq) {
                    Some(MemGet::Value(s, v)) if s == seq => v,
                    _ => continue,
                };
                acc.push(key, seq, keep(value), None);
            }
        }

        // Tables, newest first, stopping once no older table can enter the
        // top K.
        let global = state.next.get(&def.id).cloned().unwrap_or_default();
        let mut files: Vec<&Arc<FileMetaData>> = view.version.all_files().map(|(_, f)| f).collect();
        files.sort_by_key(|f| Reverse(f.largest_seq));
        let mut history = BTreeSet::new();
        let ty = def.spec.key_type;
        let total = files.len();
        for (visited, f) in files.into_iter().enumerate() {
            if f.smallest_seq > view.snapshot {
                continue;
            }
            if acc.full_before(f.largest_seq) {
                profile.tables_skipped = (total - visited) as u64;
                break;
            }
            let Some(ti) = global.tables.get(&f.number) else {
                return Err(Error::corruption(format!(
                    "index {name:?} has no entries for live table {}",
                    f.number
                )));
            };
            let table = view.tables.get(f.number, f.file_size)?;
            let blocks = next::candidate_blocks(
                def.id,
                ty,
                ti,
                &table,
                pred,
                &mut history,
                &mut profile.index_blocks_read,
            )?;
            for (h, positions) in blocks {
                profile.data_blocks_read += 1;
                // The secondary entries already matched: take those entries
                // by position, without re-extracting the attribute.
                let mut entries = table.read_data_block_entries(h)?;
                for p in positions {
                    let Some(slot) = entries.get_mut(p as usize) else {
                        return Err(Error::corruption(format!(
                            "NEXT entry points past the end of block {} of table {}",
                            h.offset, f.number
                        )));
                    };
                    let (key, seq, kind) = (std::mem::take(&mut slot.0), slot.1, slot.2);
                    let value = std::mem::take(&mut slot.3);
                    if kind != ValueKind::Value || seq > view.snapshot || !validate(&key, seq)? {
                        continue;
                    }
                    acc.push(key, seq, keep(value), Some((f.number, h.offset)));
                }
            }
        }
        profile.candidates = checked.get();
        profile.stale = stale.get();
        let (hits, min_blocks) = acc.finish();
        profile.min_data_blocks = min_blocks;
        Ok(hits)
    }

    pub fn infos(&self, version: &Version) -> Vec<IndexInfo> {
        let state = Self::state_of(version);
        let mut infos: Vec<IndexInfo> = self
            .defs()
            .iter()
            .map(|d| {
                let c = &d.counters;
                let g = state.and_then(|s| s.next.get(&d.id));
                let mut info = IndexInfo {
                    id: d.id,
                    spec: d.spec.clone(),
                    state: if d.is_ready() {
                        IndexState::Ready
                    } else {
                        IndexState::Building
                    },
                    stats: IndexStats {
                        indexed_writes: c.indexed.load(Relaxed),
                        skipped_missing: c.missing.load(Relaxed),
                        skipped_wrong_type: c.wrong_type.load(Relaxed),
                        skipped_malformed: c.malformed.load(Relaxed),
                        global_entries: match &d.memory {
                            Some(m) => m.entries(),
                            None => g.map_or(0, |g| g.entries() as u64),
                        },
                        memory_bytes: match &d.memory {
                            Some(m) => m.memory_bytes(),
                            None => g.map_or(0, |g| g.memory_bytes() as u64),
                        },
                        disk_bytes: g.map_or(0, |g| g.tables.values().map(|t| t.disk_bytes).sum()),
                        queries: c.queries.load(Relaxed),
                        validations: c.validations.load(Relaxed),
                        validations_failed: c.failed.load(Relaxed),
                        exact_checks: c.exact.load(Relaxed),
                        ..IndexStats::default()
                    },
                };
                if let Some(e) = &d.ext {
                    e.stats(&mut info.stats);
                }
                info
            })
            .collect();
        embedded::fill_infos(&mut infos, state);
        infos
    }

    /// Memo size (entries, bytes).
    pub fn memo_stats(&self) -> (usize, usize) {
        let m = read(&self.memo);
        (m.len(), m.approximate_bytes())
    }

    /// True if every live table of `version` has index `id`'s structures.
    pub fn covers(&self, id: u32, version: &Version) -> bool {
        let Some(s) = Self::state_of(version) else {
            return version.all_files().next().is_none();
        };
        if let Some(e) = s.embedded.get(&id) {
            return version
                .all_files()
                .all(|(_, f)| e.tables.contains_key(&f.number));
        }
        let g = s.next.get(&id);
        version
            .all_files()
            .all(|(_, f)| g.is_some_and(|g| g.tables.contains_key(&f.number)))
    }

    fn read_table_index(&self, def: &IndexDef, f: &FileMetaData) -> Result<Option<TableIndex>> {
        let t = self.tables.get(f.number, f.file_size)?;
        let Some(bytes) = t.meta_block(&next::table::dir_block_name(def.id))? else {
            return Ok(None);
        };
        let mut ti = next::table::decode_dir(&bytes, def.spec.key_type)?;
        ti.disk_bytes = bytes.len() as u64
            + (0..ti.sec_blocks)
                .filter_map(|b| t.meta_block_size(&next::table::sec_block_name(def.id, b)))
                .sum::<u64>();
        Ok(Some(ti))
    }

    /// Deletes `index-<id>` directories of indexes that no longer exist
    /// (dropped, or created by a crash before their definition was logged).
    fn remove_orphan_dirs(&self, defs: &[Arc<IndexDef>]) {
        let Ok(rd) = std::fs::read_dir(&self.db_dir) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("index-"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if !defs.iter().any(|d| d.id == id && d.ext.is_some()) {
                let _ = std::fs::remove_dir_all(e.path());
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

/// A valid candidate: sequence number, value (unless keys-only), and the
/// (table, block offset) it was read from, if from a table.
type Candidate = (SeqNo, Option<Vec<u8>>, Option<(u64, u64)>);

/// Collects candidates, keeps the newest version per key, and knows when
/// the top K can no longer change.
struct Results {
    limit: Option<usize>,
    /// key → (seq, value, data block holding it when read from a table).
    hits: HashMap<Vec<u8>, Candidate>,
    /// The `limit` highest sequence numbers seen (min-heap).
    top: BinaryHeap<Reverse<SeqNo>>,
}

impl Results {
    fn new(limit: Option<usize>) -> Self {
        Results {
            limit,
            hits: HashMap::new(),
            top: BinaryHeap::new(),
        }
    }

    fn push(
        &mut self,
        key: Vec<u8>,
        seq: SeqNo,
        value: Option<Vec<u8>>,
        block: Option<(u64, u64)>,
    ) {
        if self.hits.get(&key).is_some_and(|(s, _, _)| *s >= seq) {
            return;
        }
        self.hits.insert(key, (seq, value, block));
        if let Some(k) = self.limit {
            self.top.push(Reverse(seq));
            if self.top.len() > k {
                self.top.pop();
            }
        }
    }

    /// True if `limit` results newer than `seq` are known.
    fn full_before(&self, seq: SeqNo) -> bool {
        match self.limit {
            Some(0) => true,
            Some(k) => self.top.len() >= k && self.top.peek().is_some_and(|Reverse(s)| *s > seq),
            None => false,
        }
    }

    /// The hits, newest first, and the number of distinct data blocks
    /// holding them.
    fn finish(self) -> (Vec<Hit>, u64) {
        let mut v: Vec<(Hit, Option<(u64, u64)>)> = self
            .hits
            .into_iter()
            .map(|(key, (seq, value, block))| (Hit { key, value, seq }, block))
            .collect();
        v.sort_by_key(|h| Reverse(h.0.seq));
        if let Some(k) = self.limit {
            v.truncate(k);
        }
        let blocks: HashSet<(u64, u64)> = v.iter().filter_map(|(_, b)| *b).collect();
        (v.into_iter().map(|(h, _)| h).collect(), blocks.len() as u64)
    }
}

enum SideIndex {
    /// (encoded value, key, seq).
    Scalar(RwLock<BTreeSet<SideEntry>>),
    Spatial(RwLock<Vec<(IndexValue, Vec<u8>, SeqNo)>>),
}

/// The memtable side structure: each index's values of the memtable's
/// entries (every version; validation picks the live ones). Indexes can be
/// attached while the memtable is active (see [`IndexManager::attach`]).
struct IndexSide {
    indexes: RwLock<Vec<(Arc<IndexDef>, SideIndex)>>,
    bytes: AtomicUsize,
}

impl IndexSide {
    fn attach(&self, def: Arc<IndexDef>) {
        let mut idx = write(&self.indexes);
        if idx.iter().any(|(d, _)| d.id == def.id) {
            return;
        }
        let side = if def.spec.key_type.is_spatial() {
            SideIndex::Spatial(RwLock::new(Vec::new()))
        } else {
            SideIndex::Scalar(RwLock::new(BTreeSet::new()))
        };
        idx.push((def, side));
    }

    fn query(&self, id: u32, pred: &Predicate) -> Vec<(Vec<u8>, SeqNo)> {
        let idx = read(&self.indexes);
        let Some((_, side)) = idx.iter().find(|(d, _)| d.id == id) else {
            return Vec::new();
        };
        match side {
            SideIndex::Scalar(s) => {
                let Some((lo, hi)) = pred.scalar_bounds() else {
                    return Vec::new();
                };
                read(s)
                    .range((lo, Vec::new(), 0)..)
                    .take_while(|(v, _, _)| *v <= hi)
                    .map(|(_, k, s)| (k.clone(), *s))
                    .collect()
            }
            SideIndex::Spatial(s) => read(s)
                .iter()
                .filter(|(v, _, _)| pred.matches(v))
                .map(|(_, k, s)| (k.clone(), *s))
                .collect(),
        }
    }
}

impl MemSide for IndexSide {
    fn on_add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        if kind != ValueKind::Value {
            return;
        }
        let idx = read(&self.indexes);
        if idx.is_empty() {
            return;
        }
        let doc = parse_doc(value, idx.iter().map(|(d, _)| &**d));
        for (d, side) in idx.iter() {
            match d.extract(value, doc.as_ref()) {
                Ok(v) => {
                    d.counters.indexed.fetch_add(1, Relaxed);
                    self.bytes.fetch_add(user_key.len() + 64, Relaxed);
                    match side {
                        SideIndex::Scalar(s) => {
                            write(s).insert((v.encode(), user_key.to_vec(), seq));
                        }
                        SideIndex::Spatial(s) => write(s).push((v, user_key.to_vec(), seq)),
                    }
                }
                Err(skip) => d.count_skip(skip),
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn approximate_bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }
}

/// Builds every index's per-table structures while a table is written.
struct IndexObserver {
    mgr: Arc<IndexManager>,
    file: u64,
    defs: Vec<Arc<IndexDef>>,
    handles: Vec<BlockHandle>,
    pairs: Vec<Vec<(IndexValue, next::table::Loc)>>,
    /// Entries seen so far in the current data block.
    in_block: u32,
    use_memo: bool,
    memo_entries: Vec<(Vec<u8>, memo::MemoEntry)>,
    last_key: Option<Vec<u8>>,
    /// The `embedded` indexes' zone maps and filters.
    embedded: embedded::Builder,
}

impl TableObserver for IndexObserver {
    fn on_entry(&mut self, e: &EntryRef<'_>, block: BlockHandle) {
        self.embedded.note_entry(e.user_key, block);
        if self.handles.last() != Some(&block) {
            self.handles.push(block);
            self.in_block = 0;
        }
        let pos = ((self.handles.len() - 1) as u32, self.in_block);
        self.in_block += 1;
        if self.use_memo && self.last_key.as_deref() != Some(e.user_key) {
            if let Some(m) = read(&self.mgr.memo).live(e.user_key) {
                self.memo_entries.push((e.user_key.to_vec(), m));
            }
            self.last_key = Some(e.user_key.to_vec());
        }
        if e.kind != ValueKind::Value {
            return;
        }
        let doc = parse_doc(
            e.value,
            self.defs.iter().chain(self.embedded.defs()).map(|d| &**d),
        );
        for (d, pairs) in self.defs.iter().zip(self.pairs.iter_mut()) {
            if let Ok(v) = d.extract(e.value, doc.as_ref()) {
                pairs.push((v, pos));
            }
        }
        self.embedded.add(e.value, doc.as_ref());
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut blocks = Vec::new();
        for (d, pairs) in self.defs.iter().zip(self.pairs.iter_mut()) {
            let built = next::table::build(
                d.id,
                d.spec.key_type,
                d.delta,
                self.handles.clone(),
                std::mem::take(pairs),
            );
            let mut index = built.index;
            index.disk_bytes = built.blocks.iter().map(|(_, b)| b.len() as u64).sum();
            lock(&self.mgr.pending_tables).insert((d.id, self.file), Arc::new(index));
            blocks.extend(built.blocks);
        }
        if self.use_memo {
            blocks.push((
                MEMO_BLOCK.to_string(),
                memo::encode_block(&self.memo_entries),
            ));
        }
        blocks.extend(
            self.embedded
                .finish(&self.mgr.pending_embedded, self.file)?,
        );
        Ok(blocks)
    }
}

/// Collects one compaction's dropped versions for the memo and for the
/// strategies that repair from them (DELI).
struct DropCollector {
    mgr: Arc<IndexManager>,
    memo: bool,
    inputs: Vec<u64>,
    drops: Vec<Dropped>,
    repairers: Vec<Arc<IndexDef>>,
    /// Per repairer: the dropped values' (key, seq, attribute).
    repairs: Vec<Vec<strategy::DroppedEntry>>,
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
        let doc = parse_doc(e.value, self.repairers.iter().map(|d| &**d));
        for (d, out) in self.repairers.iter().zip(self.repairs.iter_mut()) {
            if let Ok(v) = d.extract(e.value, doc.as_ref()) {
                out.push((e.user_key.to_vec(), e.seq, v));
            }
        }
    }

    fn finish(&mut self) -> Result<()> {
        for (d, items) in self.repairers.iter().zip(self.repairs.iter_mut()) {
            if let Some(e) = &d.ext {
                e.on_dropped(std::mem::take(items))?;
            }
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

impl EngineHooks for IndexManager {
    fn name(&self) -> &str {
        HOOK_NAME
    }

    fn table_observer(&self, ctx: &TableContext) -> Option<Box<dyn TableObserver>> {
        let defs: Vec<Arc<IndexDef>> = self
            .defs()
            .into_iter()
            .filter(|d| d.spec.strategy == "next")
            .collect();
        let mgr = self.me.upgrade()?;
        let embedded = embedded::Builder::new(
            self.defs()
                .into_iter()
                .filter(|d| d.spec.strategy == "embedded")
                .collect(),
        );
        if defs.is_empty() && embedded.is_empty() {
            return None;
        }
        let n = defs.len();
        Some(Box::new(IndexObserver {
            mgr,
            file: ctx.file_number,
            defs,
            handles: Vec::new(),
            pairs: vec![Vec::new(); n],
            in_block: 0,
            use_memo: n > 0,
            memo_entries: Vec::new(),
            last_key: None,
            embedded,
        }))
    }

    fn compaction_observer(&self, ctx: &CompactionContext) -> Option<Box<dyn CompactionObserver>> {
        let repairers: Vec<Arc<IndexDef>> = self
            .defs()
            .into_iter()
            .filter(|d| d.ext.as_ref().is_some_and(|e| e.wants_dropped()))
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
                let mut memo = write(&self.memo);
                for (k, seq, tomb) in drops {
                    memo.on_dropped(&k, seq, tomb, generation);
                }
            }
        }
        let mut next = BTreeMap::new();
        for d in self.defs().iter().filter(|d| d.spec.strategy == "next") {
            let mut g: NextGlobal = prev
                .and_then(|p| p.next.get(&d.id))
                .map(|g| (**g).clone())
                .unwrap_or_default();
            let moved: HashSet<u64> = ev.added.iter().map(|(_, f)| f.number).collect();
            for (_, n) in ev.removed {
                if !moved.contains(n) {
                    g.tables.remove(n);
                }
            }
            for (_, f) in ev.added {
                let pending = lock(&self.pending_tables).remove(&(d.id, f.number));
                match (pending, g.tables.entry(f.number)) {
                    (Some(ti), e) => {
                        e.insert_entry(ti);
                    }
                    // A trivial move keeps the table and its entries.
                    (None, std::collections::btree_map::Entry::Occupied(_)) => {}
                    (None, std::collections::btree_map::Entry::Vacant(v)) => {
                        if let Some(ti) = self.read_table_index(d, f)? {
                            v.insert(Arc::new(ti));
                        }
                    }
                }
            }
            next.insert(d.id, Arc::new(g));
        }
        let embedded = embedded::on_install(self, prev, ev)?;
        let state = Arc::new(IndexVersionState {
            generation,
            next,
            embedded,
        });
        let oldest = self.track(&state);
        write(&self.memo).purge(oldest.saturating_sub(1));
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
        let mut specs: BTreeMap<u32, (IndexSpec, bool)> = BTreeMap::new();
        let mut max_id = 0;
        for p in payloads {
            let ev: DefEvent = serde_json::from_slice(p).map_err(|e| {
                Error::corruption(format!("bad index definition in the MANIFEST: {e}"))
            })?;
            match ev {
                DefEvent::Create { id, spec, .. } => {
                    max_id = max_id.max(id);
                    specs.insert(id, (spec, false));
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
        for (id, (spec, ready)) in specs {
            defs.push(Arc::new(self.make_def(id, spec, ready)?));
        }
        self.next_id.store(max_id + 1, Relaxed);
        *write(&self.defs) = defs.clone();
        self.remove_orphan_dirs(&defs);

        let mut next = BTreeMap::new();
        for d in defs.iter().filter(|d| d.spec.strategy == "next") {
            let mut g = NextGlobal::default();
            for (_, f) in files {
                match self.read_table_index(d, f)? {
                    Some(ti) => {
                        g.tables.insert(f.number, Arc::new(ti));
                    }
                    None if d.is_ready() => {
                        return Err(Error::corruption(format!(
                            "table {} lacks the blocks of ready index {:?}",
                            f.number, d.spec.name
                        )))
                    }
                    None => {}
                }
            }
            next.insert(d.id, Arc::new(g));
        }
        if self.memo_in_use() {
            let mut memo = write(&self.memo);
            for (_, f) in files {
                let t = self.tables.get(f.number, f.file_size)?;
                if let Some(b) = t.meta_block(MEMO_BLOCK)? {
                    for (k, latest, obsolete) in memo::decode_block(&b)? {
                        memo.merge_recovered(&k, latest, obsolete);
                    }
                }
            }
        }
        let embedded = embedded::on_recover(self, &defs, files)?;
        let state = Arc::new(IndexVersionState {
            generation: 0,
            next,
            embedded,
        });
        self.track(&state);
        Ok(Some(state as ExtState))
    }
}
