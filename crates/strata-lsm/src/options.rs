//! Options for opening a database, writing and reading.
//!
//! `Options::default()` suits an application; `Options::paper()` reproduces
//! the setup of the papers' experiments (64 MiB memtable, 64 MiB block cache,
//! 4 KiB blocks, no compression, 10 Bloom bits per key). Every field has a
//! chaining setter of the same name: `Options::default().memtable_size(1 << 20)`.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::hooks::{EngineHooks, HostRef};
use crate::io::{Fs, RealFs};
use crate::merge::MergeOperator;

pub use crate::sstable::Compression;
pub use crate::wal::WalRecovery;

/// Longest key accepted by writes.
pub const MAX_KEY_SIZE: usize = 64 * 1024;
/// Longest value accepted by writes.
pub const MAX_VALUE_SIZE: usize = 256 * 1024 * 1024;

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident : $ty:ty),* $(,)?) => {
        $(
            $(#[$m])*
            #[doc = concat!("Sets [`Options::", stringify!($name), "`].")]
            pub fn $name(mut self, v: $ty) -> Self { self.$name = v; self }
        )*
    };
}

/// The background compaction policy ([`crate::compaction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompactionStyle {
    /// LevelDB/RocksDB leveled compaction (the default).
    #[default]
    Leveled,
    /// Size-tiered runs (PERSEID §4.4's primary): every run is a table of
    /// level 0 and a tier is merged into one run when it holds
    /// [`Options::tiered_runs`] runs. See `compaction::TieredPicker`.
    Tiered,
}

/// Options for [`crate::Db::open`].
#[derive(Clone)]
pub struct Options {
    /// Create the database if the directory holds none. Default true.
    pub create_if_missing: bool,
    /// Fail if a database already exists. Default false.
    pub error_if_exists: bool,
    /// Bytes in the active memtable before it is frozen and flushed.
    pub memtable_size: usize,
    /// Frozen memtables waiting for flush before writers stall.
    pub max_immutable_memtables: usize,
    /// Keep a Bloom filter of each memtable's user keys (1 byte per 64
    /// bytes of [`Options::memtable_size`]: 1 MiB for 64 MiB), so lookups
    /// of keys a memtable does not hold skip its search. Default true.
    pub memtable_key_filter: bool,
    /// Runs mode of the memtable (`memtable::MemTable::with_runs`): a
    /// skiplist of at most this many entries in front of sorted runs, for
    /// trees written at random keys (0, the default: one skiplist). Used
    /// only by hosted engines ([`Options::host`], the secondary trees of
    /// stand-alone indexes), whose writes no hook sees: a hook may ask for
    /// the entries a write shadows, which runs mode does not report. A
    /// `strata` database passes its own setting to its secondary trees;
    /// with 0, the trees read only by ranges (`composite`, `deli`) use
    /// 16 Ki.
    pub memtable_run_entries: usize,
    /// Target uncompressed size of a data block.
    pub block_size: usize,
    /// Keys between restart points in a data block (default 4; LevelDB's
    /// 16 leaves one restart point in a 4 KiB block of ~500-byte records).
    /// Recorded in each table's properties: a read of an entry by position
    /// (NEXT's) decodes from the restart point before it, so a shorter
    /// interval decodes fewer entries, at 4 bytes per restart point and
    /// less key prefix compression.
    pub block_restart_interval: usize,
    /// Compression of data blocks.
    pub compression: Compression,
    /// Bloom filter bits per key; 0 disables the filter.
    pub bloom_bits_per_key: usize,
    /// Block cache budget in bytes; 0 disables the cache.
    pub block_cache_bytes: usize,
    /// Admit a block into the block cache on its second miss only (default
    /// true; see `sstable::block_cache`): blocks read once, as by a large
    /// query or random reads over data larger than the cache, neither
    /// displace cached blocks nor pay an insert and an eviction. False:
    /// every missed block is cached (LevelDB's and RocksDB's policy).
    pub block_cache_doorkeeper: bool,
    /// Open table files kept by the table cache.
    pub max_open_files: usize,
    /// L0 file count that triggers a compaction.
    pub l0_compaction_trigger: usize,
    /// L0 file count at which each write is delayed by 1 ms.
    pub l0_slowdown_trigger: usize,
    /// L0 file count at which writes wait for compaction.
    pub l0_stop_trigger: usize,
    /// Target size of L1; level n+1 holds `level_size_ratio` times level n.
    pub max_bytes_for_level_base: u64,
    /// Growth factor between consecutive levels ≥ 1.
    pub level_size_ratio: u64,
    /// Number of levels (L0 included).
    pub num_levels: usize,
    /// Target size of a table written by compaction.
    pub target_file_size: u64,
    /// Read SSTables with O_DIRECT (falls back with a warning if refused).
    pub direct_io: bool,
    /// Read SSTables through a read-only memory mapping of each file
    /// instead of one `pread` per block (default: false). A block read is
    /// then a copy out of the page cache, without a system call; blocks are
    /// checksummed exactly as with `pread`. Exclusive with `direct_io`.
    /// Where a file cannot be mapped, it is read with `pread`. Contract:
    /// nothing outside the engine modifies or truncates a table file while
    /// the database is open (the engine never does: tables are immutable
    /// once written); a truncated mapped file would fault the process.
    pub mmap_reads: bool,
    /// Which compaction policy runs in the background (default leveled;
    /// see [`crate::compaction`]).
    pub compaction_style: CompactionStyle,
    /// Tiered policy: a tier is merged once it holds this many runs (T,
    /// default 4, at least 2).
    pub tiered_runs: usize,
    /// What recovery does with a damaged WAL.
    pub wal_recovery: WalRecovery,
    /// Run flushes and compactions on background threads. When false they
    /// run inline in the writing thread (deterministic tests).
    pub background_work: bool,
    /// Write a WAL (default). Without it, writes not yet in a table are
    /// lost on a crash or close: only for stores whose writes can be
    /// recovered elsewhere, such as the secondary trees of stand-alone
    /// indexes, which are rebuilt from the primary's WAL.
    pub wal: bool,
    /// Append to the WAL through a shared memory mapping where the file
    /// system can preallocate (`io::mapped`; Linux), instead of one `write`
    /// call per record (default: true). The same durability either way: a
    /// write is in the OS when it returns, and `sync` makes it durable.
    /// Ignored without a WAL (`wal == false`).
    pub wal_mmap: bool,
    /// Extensions (index strategies) that observe tables, compactions and
    /// version installs. See [`crate::hooks`].
    pub hooks: Vec<Arc<dyn EngineHooks>>,
    /// Combines merge operands ([`crate::WriteBatch::merge`]); writes of
    /// merge operands are refused without one. A database written with
    /// merge operands must be reopened with the same operator.
    pub merge_operator: Option<Arc<dyn MergeOperator>>,
    /// The file system every file of the database (and of the secondary
    /// trees of a `strata` database) is read and written through. Default
    /// [`RealFs`], the operating system's; tests pass a fault-injecting one
    /// (see [`crate::io`]).
    pub fs: Arc<dyn Fs>,
    /// Open as a *hosted* engine of the engine behind this handle (a
    /// column family of it, see [`crate::host`]): its host switches,
    /// flushes and compacts it, writes go straight into its memtable.
    /// Needs `wal` and `background_work` off. Default `None`.
    pub host: Option<HostRef>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            memtable_size: 32 << 20,
            max_immutable_memtables: 2,
            memtable_key_filter: true,
            memtable_run_entries: 0,
            block_size: 4096,
            block_restart_interval: 4,
            compression: Compression::None,
            bloom_bits_per_key: 10,
            block_cache_bytes: 32 << 20,
            block_cache_doorkeeper: true,
            max_open_files: 1000,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 12,
            max_bytes_for_level_base: 128 << 20,
            level_size_ratio: 10,
            num_levels: 7,
            target_file_size: 32 << 20,
            direct_io: false,
            mmap_reads: false,
            compaction_style: CompactionStyle::Leveled,
            tiered_runs: 4,
            wal_recovery: WalRecovery::TolerateTornTail,
            background_work: true,
            wal: true,
            wal_mmap: true,
            host: None,
            hooks: Vec::new(),
            merge_operator: None,
            fs: Arc::new(RealFs),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("memtable_size", &self.memtable_size)
            .field("memtable_run_entries", &self.memtable_run_entries)
            .field("block_size", &self.block_size)
            .field("compression", &self.compression)
            .field("bloom_bits_per_key", &self.bloom_bits_per_key)
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("block_cache_doorkeeper", &self.block_cache_doorkeeper)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("max_bytes_for_level_base", &self.max_bytes_for_level_base)
            .field("target_file_size", &self.target_file_size)
            .field("direct_io", &self.direct_io)
            .field("mmap_reads", &self.mmap_reads)
            .field("hooks", &self.hooks.len())
            .field("hosted", &self.host.is_some())
            .field("fs", &self.fs)
            .field(
                "merge_operator",
                &self.merge_operator.as_ref().map(|m| m.name().to_string()),
            )
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Bytes of each memtable's key filter (0 for none; see
    /// [`Options::memtable_key_filter`]).
    pub fn memtable_filter_bytes(&self) -> usize {
        if self.memtable_key_filter {
            self.memtable_size / 64
        } else {
            0
        }
    }

    /// Entries of a memtable's skiplist in runs mode, 0 for one skiplist
    /// (see [`Options::memtable_run_entries`]).
    pub(crate) fn memtable_runs(&self) -> usize {
        if self.host.is_some() {
            self.memtable_run_entries
        } else {
            0
        }
    }

    /// The papers' setup (NEXT §6.1, LevelDB++ §5): 64 MiB memtable, 64 MiB
    /// block cache, 4 KiB blocks, no compression, 10 Bloom bits per key,
    /// 64 MiB tables, 256 MiB L1, size ratio 10.
    pub fn paper() -> Self {
        Options {
            memtable_size: 64 << 20,
            block_cache_bytes: 64 << 20,
            block_size: 4096,
            compression: Compression::None,
            bloom_bits_per_key: 10,
            target_file_size: 64 << 20,
            max_bytes_for_level_base: 256 << 20,
            level_size_ratio: 10,
            ..Options::default()
        }
    }

    /// Small sizes that make flushes and compactions happen after a few
    /// kilobytes; for tests.
    pub fn small_for_tests() -> Self {
        Options {
            memtable_size: 16 << 10,
            block_size: 512,
            block_cache_bytes: 64 << 10,
            l0_compaction_trigger: 2,
            max_bytes_for_level_base: 64 << 10,
            target_file_size: 16 << 10,
            max_open_files: 50,
            ..Options::default()
        }
    }

    setters! {
        create_if_missing: bool,
        error_if_exists: bool,
        memtable_size: usize,
        max_immutable_memtables: usize,
        memtable_run_entries: usize,
        block_size: usize,
        block_restart_interval: usize,
        compression: Compression,
        bloom_bits_per_key: usize,
        block_cache_bytes: usize,
        block_cache_doorkeeper: bool,
        max_open_files: usize,
        l0_compaction_trigger: usize,
        l0_slowdown_trigger: usize,
        l0_stop_trigger: usize,
        max_bytes_for_level_base: u64,
        level_size_ratio: u64,
        num_levels: usize,
        target_file_size: u64,
        direct_io: bool,
        mmap_reads: bool,
        compaction_style: CompactionStyle,
        tiered_runs: usize,
        wal_recovery: WalRecovery,
        background_work: bool,
        wal: bool,
        wal_mmap: bool,
    }

    /// Sets the merge operator (see [`Options::merge_operator`] field).
    pub fn merge_operator(mut self, m: Arc<dyn MergeOperator>) -> Self {
        self.merge_operator = Some(m);
        self
    }

    /// Sets the file system (see [`Options::fs`] field).
    pub fn file_system(mut self, fs: Arc<dyn Fs>) -> Self {
        self.fs = fs;
        self
    }

    /// Registers an extension (see [`crate::hooks::EngineHooks`]).
    pub fn hook(mut self, h: Arc<dyn EngineHooks>) -> Self {
        self.hooks.push(h);
        self
    }

    /// Opens the database as a hosted engine of `host`'s (see the
    /// [`Options::host`] field); turns `wal` and `background_work` off.
    pub fn hosted_by(mut self, host: HostRef) -> Self {
        self.host = Some(host);
        self.wal = false;
        self.background_work = false;
        self
    }

    /// Rejects option combinations the engine cannot run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::invalid(m.to_string()));
        if self.host.is_some() && (self.wal || self.background_work) {
            return bad("a hosted engine (host set) runs without a WAL and without background threads: set wal and background_work to false");
        }
        if self.direct_io && self.mmap_reads {
            return bad(
                "direct_io and mmap_reads are exclusive: a mapping reads through the page cache",
            );
        }
        if self.memtable_size < 1024 {
            return bad("memtable_size must be at least 1 KiB");
        }
        if self.block_size < 64 || self.block_size > (64 << 20) {
            return bad("block_size must be between 64 B and 64 MiB");
        }
        if self.block_restart_interval == 0 {
            return bad("block_restart_interval must be positive");
        }
        if self.num_levels < 2 || self.num_levels > 16 {
            return bad("num_levels must be between 2 and 16");
        }
        if self.level_size_ratio < 2 {
            return bad("level_size_ratio must be at least 2");
        }
        if self.l0_compaction_trigger == 0
            || self.l0_slowdown_trigger < self.l0_compaction_trigger
            || self.l0_stop_trigger < self.l0_slowdown_trigger
        {
            return bad("need 0 < l0_compaction_trigger <= l0_slowdown_trigger <= l0_stop_trigger");
        }
        if self.tiered_runs < 2 {
            return bad("tiered_runs must be at least 2");
        }
        if self.max_open_files < 2 {
            return bad("max_open_files must be at least 2");
        }
        if self.max_immutable_memtables == 0 {
            return bad("max_immutable_memtables must be at least 1");
        }
        let mut names = std::collections::HashSet::new();
        for h in &self.hooks {
            if !names.insert(h.name().to_string()) {
                return bad("two hooks share one name");
            }
        }
        Ok(())
    }
}

/// Options for one write (`WriteOptions::default().sync(true)`).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct WriteOptions {
    /// fsync the WAL before acknowledging the write.
    pub sync: bool,
    /// The batch's first sequence number is at least this (0: no floor).
    /// The database's sequence jumps forward to honour it; sequence numbers
    /// stay increasing and gaps are harmless. A nested index tree uses it
    /// so that each entry's sequence number bounds the primary sequence
    /// numbers the entry records (see `strata`'s `index/tree.rs`).
    pub min_sequence: u64,
}

impl WriteOptions {
    /// Sets [`WriteOptions::sync`].
    pub fn sync(mut self, v: bool) -> Self {
        self.sync = v;
        self
    }

    /// Sets [`WriteOptions::min_sequence`].
    pub fn min_sequence(mut self, seq: u64) -> Self {
        self.min_sequence = seq;
        self
    }
}
