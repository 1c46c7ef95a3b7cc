//! The interface every benchmarked system implements: Strata with each
//! index strategy (in `strata-harness`) and the peers a user would otherwise
//! pick (RocksDB, SQLite, fjall, in the opt-in `strata-compare` crate).
//!
//! Contract: a system stores records (a primary key and a JSON document)
//! and keeps one secondary index per [`IndexDecl`], on the JSON field
//! `field`. [`BenchSystem::query`] returns the live records whose current
//! attribute satisfies the query, newest write first (the order of `put`
//! calls), at most `top_k` of them, with their values fetched (a query is
//! not index-only). Every system sees the same calls in the same order, so
//! result counts must agree across systems; the harness checks them.

use std::path::Path;

use crate::queries::Query;

/// Type of an indexed attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrType {
    /// A JSON integer that fits an `i64`.
    I64,
    /// A finite JSON number, as an `f64`.
    F64,
    /// `[lon, lat]`.
    Point,
    /// `[xmin, ymin, xmax, ymax]`.
    Rect,
}

/// One secondary index: its name (queries name it), the top-level JSON
/// field it extracts, and the field's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDecl {
    /// Index name, unique among a system's indexes.
    pub name: String,
    /// Top-level JSON field the index extracts.
    pub field: String,
    /// Type of the field's values.
    pub ty: AttrType,
}

/// What one query returned and read. Counters a system cannot report are
/// `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Records returned.
    pub results: u64,
    /// Data blocks fetched (cache hits and disk reads).
    pub data_blocks_read: Option<u64>,
    /// Distinct data blocks holding the results.
    pub min_data_blocks: Option<u64>,
    /// Secondary-index blocks fetched.
    pub index_blocks_read: Option<u64>,
    /// Candidates found stale by validation.
    pub stale: Option<u64>,
    /// Range filters: components (memtables, tables) scanned.
    pub components_scanned: Option<u64>,
    /// Range filters: components holding a result (a perfect filter).
    pub components_min: Option<u64>,
}

/// Sizes after a load. Unknown values are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sizes {
    /// Bytes of the whole database on disk (data and indexes).
    pub db_bytes: u64,
    /// Bytes of the secondary indexes on disk.
    pub index_bytes: Option<u64>,
    /// Resident bytes of in-memory index structures.
    pub index_memory_bytes: Option<u64>,
    /// Bytes written to storage over bytes written by the user.
    pub write_amplification: Option<f64>,
    /// Time writers spent stalled by the engine's back-pressure (waiting
    /// for a flush or compaction, or the L0 slowdown delay) since the
    /// database was opened: what a write-latency mean far above its p99
    /// is made of.
    pub write_stall_seconds: Option<f64>,
}

/// Shared options, mapped onto each system's counterpart (documented in
/// `docs/benchmarks.md`).
#[derive(Debug, Clone)]
pub struct SystemOptions {
    /// Block / page cache budget in bytes.
    pub cache_bytes: u64,
    /// Bypass the OS page cache when reading (cold reads) where supported.
    pub direct_io: bool,
    /// Read tables through memory mappings where supported (Strata's
    /// `Options::mmap_reads`, SQLite's `mmap_size`, RocksDB's
    /// `allow_mmap_reads`; fjall has none and ignores it).
    pub mmap_reads: bool,
    /// fsync every write (off in every benchmark unless stated).
    pub sync: bool,
    /// Index queries return keys only (index-only queries, PERSEID §5.2.2);
    /// systems that cannot skip the records ignore it.
    pub keys_only: bool,
    /// Strata systems: the primary uses the tiered compaction policy
    /// (PERSEID §4.4); others ignore it.
    pub tiered: bool,
    /// Strata systems: threads a query reads its records with
    /// (`QueryOptions::parallelism`; `None`: the engine's default, which
    /// uses every core for large NEXT and PERSEID queries); others ignore
    /// it.
    pub query_threads: Option<usize>,
}

impl Default for SystemOptions {
    fn default() -> Self {
        SystemOptions {
            cache_bytes: 8 << 20,
            direct_io: false,
            mmap_reads: false,
            sync: false,
            keys_only: false,
            tiered: false,
            query_threads: None,
        }
    }
}

/// Errors are strings with context: the harness only reports them.
pub type SysResult<T> = std::result::Result<T, String>;

/// A system under test, open on one directory.
pub trait BenchSystem {
    /// Label used in results (`strata:next`, `sqlite`, ...).
    fn name(&self) -> String;
    /// Inserts or replaces `key`'s record and maintains every index.
    fn put(&mut self, key: &[u8], value: &[u8]) -> SysResult<()>;
    /// Deletes `key`'s record (absent keys are fine).
    fn delete(&mut self, key: &[u8]) -> SysResult<()>;
    /// Primary-key read.
    fn get(&mut self, key: &[u8]) -> SysResult<Option<Vec<u8>>>;
    /// One secondary query on index `index` (see the module contract).
    fn query(&mut self, index: &str, q: &Query, top_k: Option<usize>) -> SysResult<QueryStats>;
    /// Makes every write durable and finishes background work (flushes,
    /// compactions), so that sizes and later reads are steady.
    fn settle(&mut self) -> SysResult<()>;
    /// Closes and reopens the database (queries then start from a cold
    /// process state, as after a restart).
    fn reopen(&mut self) -> SysResult<()>;
    /// Current on-disk and in-memory sizes (call after
    /// [`BenchSystem::settle`] for steady values).
    fn sizes(&mut self) -> SysResult<Sizes>;
    /// False for a system that keeps no secondary index (a baseline that
    /// measures the primary store only): the harness then skips its
    /// queries instead of calling [`BenchSystem::query`].
    fn supports_queries(&self) -> bool {
        true
    }
    /// True if [`BenchSystem::floor_seconds`] measures something: the
    /// harness then runs each query set a second time, untimed, to measure
    /// the floors after the timed pass.
    fn measures_floor(&self) -> bool {
        false
    }
    /// The physical floor of the previous [`BenchSystem::query`]: seconds
    /// to read, outside every cache of the system, and checksum each
    /// distinct data block holding that query's results once (measured
    /// now, after the query; the OS page cache is left as the query left
    /// it). `None` if the system cannot locate its records' blocks. Called
    /// by the harness after an untimed run of the query, in a pass after
    /// the timed queries, so that its reads disturb no timed query.
    fn floor_seconds(&mut self) -> SysResult<Option<f64>> {
        Ok(None)
    }
}

/// Opens a system on an empty directory with the given indexes.
pub type OpenFn =
    fn(dir: &Path, indexes: &[IndexDecl], opts: &SystemOptions) -> SysResult<Box<dyn BenchSystem>>;

/// Bytes of every file under `dir` (recursively).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}
