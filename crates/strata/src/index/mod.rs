//! Secondary indexes: definitions, the engine hooks that maintain them, and
//! query answering.
//!
//! An index has a name, an attribute extractor (a JSON field path, or a
//! registered function), a key type and a strategy. The framework
//! (`manager::IndexManager`, the engine extension with hook name
//! `strata.index`) persists definitions as MANIFEST payloads, parses each
//! record once for all indexes, routes the engine's events (batches about
//! to enter the memtable, tables being written, versions dropped by
//! compactions, version installs and recovery) to each index's strategy,
//! keeps the update memo (`memo`) for the strategies that validate with it,
//! and carries each strategy's per-version state with the version.
//!
//! Contract, for every strategy: a query returns exactly the live records
//! (newest version at the snapshot, not deleted) whose current attribute
//! satisfies the predicate, newest first, at most `limit` of them.
//!
//! Every strategy implements `strategy::IndexStrategy` in its own module
//! and is chosen by [`StrategyKind`] through the registry
//! (`registry::open`):
//! * `next` (NEXT, SIGMOD 2025: per-table secondary index blocks plus an
//!   in-memory global index, memo validation; [`next`]);
//! * `embedded` (LevelDB++ §3: per-block zone maps and Bloom filters,
//!   GetLite validation; [`embedded`]);
//! * `memory` (the "Eager" in-RAM baseline, maintained synchronously and
//!   rebuilt at open; `memory`);
//! * the stand-alone strategies on secondary LSM trees (`tree`):
//!   `composite` (Luo & Carey's eager and validation strategies, with
//!   merge repair), `deli` (DELI's compaction-coupled and read repair) and
//!   `posting-eager` / `posting-lazy` (LevelDB++'s stand-alone indexes).
//!
//! Design and data flow: `docs/design.md`.

pub(crate) mod composite;
pub(crate) mod def;
pub(crate) mod deli;
pub mod embedded;
pub(crate) mod entries;
pub(crate) mod fields;
pub(crate) mod filter;
pub(crate) mod fxhash;
pub(crate) mod hits;
pub(crate) mod inline_key;
pub(crate) mod manager;
pub mod memo;
pub(crate) mod memory;
pub mod next;
pub(crate) mod pacing;
pub(crate) mod perseid;
pub(crate) mod posting;
pub(crate) mod preread;
pub(crate) mod registry;
pub(crate) mod repair;
pub(crate) mod results;
pub(crate) mod side;
pub(crate) mod sidefile;
pub(crate) mod stored;
pub(crate) mod strategy;
pub(crate) mod tables;
pub(crate) mod tree;
pub mod value;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde::{Deserialize, Serialize};

use strata_lsm::cache::TableCache;
use strata_lsm::error::Result;
use strata_lsm::key::SeqNo;
use strata_lsm::memtable::MemTable;
use strata_lsm::version::Version;

pub use hits::{HitIter, HitRef, Hits};
pub(crate) use manager::IndexDef;
pub(crate) use manager::IndexManager;
pub use strategy::StrategyKind;
pub use value::{IndexValue, KeyType, Predicate};

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
    /// [`crate::Extractors`] (must be registered at every open, [`crate::Db::open_with`]).
    Custom(String),
}

/// An index definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexSpec {
    /// Unique name of the index in its database.
    pub name: String,
    /// Where each record's attribute comes from.
    pub extractor: Extractor,
    /// Type of the attribute; records whose attribute has another type are
    /// not indexed (counted in [`IndexStats::skipped_wrong_type`]).
    pub key_type: KeyType,
    /// Strategy name (see [`StrategyKind::name`]); `next` by default.
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
            strategy: StrategyKind::Next.name().to_string(),
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

    /// Sets the strategy by name (checked when the index is created).
    pub fn strategy(mut self, s: &str) -> Self {
        self.strategy = s.to_string();
        self
    }

    /// Sets strategy parameter `k` to `v`, replacing an earlier value
    /// (checked by the strategy when the index is created).
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
    /// Built; queries are answered.
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
    /// Writes not indexed: the attribute is not of the index's key type.
    pub skipped_wrong_type: u64,
    /// Writes not indexed: the value is not JSON.
    pub skipped_malformed: u64,
    /// Global-index entries and their RAM.
    pub global_entries: u64,
    /// Bytes of RAM of the index's in-memory structures.
    pub memory_bytes: u64,
    /// Bytes of this index's blocks in live tables.
    pub disk_bytes: u64,
    /// Queries answered.
    pub queries: u64,
    /// Candidates validated, and how many were stale. For `memory`
    /// indexes (which need no validation): records fetched and checked to
    /// be the version the index holds, and how many were not (a bug).
    pub validations: u64,
    /// Of [`IndexStats::validations`], the candidates found stale.
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
    /// Composite merge repair: entries looked up in the primary-key index.
    #[serde(default)]
    pub repair_lookups: u64,
    /// Composite merge repair: entries left valid without a lookup.
    #[serde(default)]
    pub repair_pruned: u64,
    /// Composite merge repair: obsolete entries left for a later repair.
    #[serde(default)]
    pub repair_deferred: u64,
    /// Composite merge repair: repairs abandoned on a read error.
    #[serde(default)]
    pub repair_errors: u64,
    /// Range filters (`filter`): components (memtables and tables) the
    /// queries scanned because their filter intersected the predicate.
    #[serde(default)]
    pub components_scanned: u64,
    /// Range filters: components the queries skipped by their filter.
    #[serde(default)]
    pub components_skipped: u64,
    /// The running online build's progress (`None` when not building, or
    /// for a build that scans the data).
    #[serde(default)]
    pub build: Option<BuildProgress>,
    /// `perseid`: its page cache (`None` for other strategies).
    #[serde(default)]
    pub page_cache: Option<PageCacheStats>,
    /// Why the index's own files were not used at the last open and the
    /// index was rebuilt from the primary instead: the check its files
    /// failed, or that they were behind the tables (`perseid`; `None`
    /// otherwise — `memory` indexes are built at every open by design).
    /// The rebuilt index is exact; this says that its files were damaged
    /// or lost, which a user wants to know.
    #[serde(default)]
    pub rebuilt_at_open: Option<String>,
}

/// The page cache of a `perseid` index: pages of its page file held in
/// RAM, the others read in place in the mapped file (exact counters
/// since open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCacheStats {
    /// Page accesses that found the page in RAM, or in place in the
    /// mapped file and already checked.
    pub hits: u64,
    /// Page accesses that checked the page's record in the file (in
    /// place, or read back into RAM where the file is not mapped).
    pub misses: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Bytes of the pages in RAM (their capacities).
    pub resident_bytes: u64,
    /// The cache's budget (`page_cache_mb`); dirty pages may exceed it
    /// until the next flush.
    pub budget_bytes: u64,
}

/// Progress of an online build that gives every existing table the
/// index's structures in a side file (NEXT, embedded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildProgress {
    /// Tables covered by side files of this build.
    pub tables_done: u64,
    /// Tables covered plus those left in the current version.
    pub tables_total: u64,
    /// Bytes of the table files covered.
    pub bytes_done: u64,
    /// Bytes of the table files covered plus those left.
    pub bytes_total: u64,
    /// Bytes of side files written.
    pub bytes_written: u64,
}

/// An index as listed by [`crate::Db::indexes`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexInfo {
    /// Internal id, unique in the database and never reused.
    pub id: u32,
    /// The definition the index was created with.
    pub spec: IndexSpec,
    /// Whether it answers queries yet.
    pub state: IndexState,
    /// Its counters.
    pub stats: IndexStats,
}

/// Options of one query.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryOptions {
    /// Only the K most recent matches (highest sequence numbers).
    pub limit: Option<usize>,
    /// Return keys without values.
    pub keys_only: bool,
    /// Threads that read a query's records from one shared queue: the
    /// lookups of a non-index-only `perseid` query (PERSEID §4.4) and the
    /// data blocks of a NEXT query without a limit. `None`: the defaults
    /// of [`QueryOptions::lookup_threads`] and
    /// [`QueryOptions::block_threads`]; `Some(1)`: the querying thread
    /// alone.
    pub parallelism: Option<usize>,
}

/// Below this many records a query fetches them on its own thread:
/// starting workers costs more than the lookups.
pub const PARALLEL_MIN_RECORDS: usize = 32;

/// Below this many data blocks a NEXT query reads them on its own thread.
/// A block costs about 2–4 µs to read, check and decode from the page
/// cache; waking a pooled helper and waiting for it cost about 25 µs on
/// the 2-core test machines (a query of 64 blocks gains about 50).
pub const PARALLEL_MIN_BLOCKS: usize = 64;

impl QueryOptions {
    /// Returns only the `k` most recent matches.
    pub fn limit(mut self, k: usize) -> Self {
        self.limit = Some(k);
        self
    }

    /// Returns keys without values if `v`.
    pub fn keys_only(mut self, v: bool) -> Self {
        self.keys_only = v;
        self
    }

    /// Fetches records with `n` threads (1: on the querying thread).
    pub fn parallelism(mut self, n: usize) -> Self {
        self.parallelism = Some(n.max(1));
        self
    }

    /// Threads to fetch `records` records with: the set parallelism, else
    /// `min(available_parallelism, 4)`, and 1 below
    /// [`PARALLEL_MIN_RECORDS`] records (unless set explicitly).
    pub fn lookup_threads(&self, records: usize) -> usize {
        self.threads_for(records, PARALLEL_MIN_RECORDS)
    }

    /// Threads to read `blocks` data blocks with: the set parallelism,
    /// else `min(available_parallelism, 4)`, and 1 below
    /// [`PARALLEL_MIN_BLOCKS`] blocks (unless set explicitly).
    pub fn block_threads(&self, blocks: usize) -> usize {
        self.threads_for(blocks, PARALLEL_MIN_BLOCKS)
    }

    /// The set parallelism, else `min(available_parallelism, 4)` from
    /// `min` units up; never more threads than units.
    fn threads_for(&self, units: usize, min: usize) -> usize {
        let n = match self.parallelism {
            Some(n) => n,
            None if units < min => 1,
            None => default_threads(),
        };
        n.clamp(1, units.max(1))
    }
}

/// `min(available_parallelism, 4)`, asked once: the standard library reads
/// the affinity mask and cgroup files on every call.
fn default_threads() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
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
    /// Of [`QueryProfile::candidates`], those found stale.
    pub stale: u64,
    /// Batched record lookups made to validate or fetch candidates (one
    /// `multi_get` each).
    #[serde(default)]
    pub record_lookups: u64,
    /// Tables skipped because the top K was already known.
    pub tables_skipped: u64,
    /// Range filters (`filter`): components (memtables and tables at the
    /// snapshot) whose filter intersects the predicate, scanned.
    /// `perseid`: components probed by the zone-map record lookups (one
    /// per record when the components' sequence ranges are disjoint).
    #[serde(default)]
    pub components_scanned: u64,
    /// Range filters: components whose filter excludes the predicate (not
    /// read).
    #[serde(default)]
    pub components_skipped: u64,
    /// Range filters: components holding at least one result (the tables
    /// of the results, plus one if a memtable holds some): what a perfect
    /// filter would scan.
    #[serde(default)]
    pub components_min: u64,
}

/// One query result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Primary key of the record.
    pub key: Vec<u8>,
    /// `None` in keys-only mode.
    pub value: Option<Vec<u8>>,
    /// Sequence number of the write that stored this version.
    pub seq: SeqNo,
}

/// Records of a batched lookup, in the order of the keys: value and
/// sequence number, `None` if absent or deleted.
pub(crate) type Fetched = Vec<Option<strata_lsm::Versioned>>;

/// A batched point lookup at a snapshot.
pub(crate) type FetchFn<'a> = dyn Fn(&[&[u8]], SeqNo) -> Result<Fetched> + 'a;

/// Exact versions `(key, seq)` at a snapshot through the sequence-number
/// zone maps (`strata_lsm::Db::get_versions`), with a number of threads.
pub(crate) type FetchVersionsFn<'a> = dyn Fn(&[(&[u8], SeqNo)], SeqNo, usize) -> Result<(Fetched, strata_lsm::read::ZoneLookupStats)>
    + 'a;

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
    pub pin_latest: &'a dyn Fn() -> strata_lsm::Snapshot,
    /// The latest published sequence number, registering nothing (see
    /// `QueryCx::peek_with`).
    pub latest: &'a dyn Fn() -> SeqNo,
    /// The caller keeps the snapshot the query answered at (`Db::query_snapshot`):
    /// a strategy must pin one (`QueryCx::pin_with`).
    pub must_pin: bool,
    /// Batched point lookup (sorted keys, component by component) at a
    /// snapshot: each key's value and sequence number, `None` if absent or
    /// deleted; results in the order of the keys.
    pub fetch: &'a FetchFn<'a>,
    /// Exact versions through the zone maps (see [`FetchVersionsFn`]).
    pub fetch_versions: &'a FetchVersionsFn<'a>,
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
    /// during the query has dropped. Copies no record: only sequence
    /// numbers and kinds are read.
    pub fn newest_seq(&self, key: &[u8]) -> Result<Option<SeqNo>> {
        if let Some((s, _)) = self
            .mems
            .iter()
            .find_map(|m| m.newest_version(key, self.snapshot))
        {
            return Ok(Some(s));
        }
        Ok(self
            .version
            .get_entry(self.tables, key, self.snapshot, false)?
            .map(|f| f.seq))
    }

    /// Runs the test hook, if any (see `pause`).
    pub fn pause(&self) {
        if let Some(f) = self.pause {
            f();
        }
    }
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
    pub(crate) guard: RwLock<()>,
    /// The primary's (oldest live snapshot, last published sequence
    /// number), set once the primary is open (merge repair).
    pub(crate) primary_clock: OnceLock<PrimaryClock>,
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

/// The primary's (oldest sequence number a reader may read at, last
/// published sequence number), set when the engine attaches the manager.
pub(crate) type PrimaryClock = Box<dyn Fn() -> (SeqNo, SeqNo) + Send + Sync>;

pub(crate) use strata_lsm::sync::{lock, read, write};
