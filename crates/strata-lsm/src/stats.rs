//! I/O and engine counters.
//!
//! Block counts are Strata's machine-independent cost measure, so these
//! counters are exact: every block fetched on behalf of a read is counted
//! once, as a cache hit or a disk read, by the single function that fetches
//! it (`sstable::Table::read_block`). Reads done by compaction are counted
//! separately (`compaction_bytes_read`) and never in the block counters, so
//! that query costs are not polluted by background work.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Which kind of block a read fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// A data block.
    Data,
    /// An index block.
    Index,
    /// A Bloom filter block.
    Filter,
    /// Properties, metaindex, and named meta blocks owned by index strategies.
    Meta,
}

/// Why a block is read: query reads are counted and may fill the cache;
/// compaction reads bypass the cache and are counted as compaction input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPurpose {
    /// A read for a user query (counted; may fill the cache).
    Query,
    /// A compaction input read (bypasses the cache).
    Compaction,
}

#[derive(Default, Debug)]
struct BlockCounter {
    disk: AtomicU64,
    cache: AtomicU64,
}

/// Live counters, shared by every component of one database.
#[derive(Default, Debug)]
pub struct Counters {
    data: BlockCounter,
    index: BlockCounter,
    filter: BlockCounter,
    meta: BlockCounter,
    /// Bytes read from table files for queries (block bytes incl. trailers).
    pub bytes_read: AtomicU64,
    /// Bloom filter probes made for queries.
    pub bloom_probes: AtomicU64,
    /// Probes that the filter answered "definitely not here".
    pub bloom_negatives: AtomicU64,
    /// Bytes appended to the WAL.
    pub wal_bytes_written: AtomicU64,
    /// Bytes of tables written by flushes.
    pub flush_bytes_written: AtomicU64,
    /// Bytes of input tables read by compactions.
    pub compaction_bytes_read: AtomicU64,
    /// Bytes of tables written by compactions.
    pub compaction_bytes_written: AtomicU64,
    /// Bytes of keys and values accepted from users (the denominator of
    /// write amplification).
    pub user_bytes_written: AtomicU64,
    /// Memtable flushes completed.
    pub flushes: AtomicU64,
    /// Compactions completed.
    pub compactions: AtomicU64,
    /// Microseconds writers spent delayed or stalled by L0 back-pressure.
    pub write_stall_micros: AtomicU64,
}

impl Counters {
    fn block(&self, kind: BlockKind) -> &BlockCounter {
        match kind {
            BlockKind::Data => &self.data,
            BlockKind::Index => &self.index,
            BlockKind::Filter => &self.filter,
            BlockKind::Meta => &self.meta,
        }
    }

    /// Records one block fetched for a query: from the block cache (`hit`)
    /// or from disk (`bytes` read).
    pub fn record_block_read(&self, kind: BlockKind, hit: bool, bytes: u64) {
        let c = self.block(kind);
        if hit {
            c.cache.fetch_add(1, Relaxed);
        } else {
            c.disk.fetch_add(1, Relaxed);
            self.bytes_read.fetch_add(bytes, Relaxed);
        }
    }

    /// Adds `n` to `counter` (relaxed: counters order nothing).
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// A consistent-enough copy of every counter (each read atomically).
    pub fn snapshot(&self) -> IoStats {
        let b = |c: &BlockCounter| BlockReads {
            disk: c.disk.load(Relaxed),
            cache: c.cache.load(Relaxed),
        };
        IoStats {
            data_blocks: b(&self.data),
            index_blocks: b(&self.index),
            filter_blocks: b(&self.filter),
            meta_blocks: b(&self.meta),
            bytes_read: self.bytes_read.load(Relaxed),
            bloom_probes: self.bloom_probes.load(Relaxed),
            bloom_negatives: self.bloom_negatives.load(Relaxed),
            wal_bytes_written: self.wal_bytes_written.load(Relaxed),
            flush_bytes_written: self.flush_bytes_written.load(Relaxed),
            compaction_bytes_read: self.compaction_bytes_read.load(Relaxed),
            compaction_bytes_written: self.compaction_bytes_written.load(Relaxed),
            user_bytes_written: self.user_bytes_written.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            compactions: self.compactions.load(Relaxed),
            write_stall_micros: self.write_stall_micros.load(Relaxed),
        }
    }
}

/// Blocks of one kind fetched for queries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockReads {
    /// Read from the table file.
    pub disk: u64,
    /// Found in the block cache.
    pub cache: u64,
}

impl BlockReads {
    /// Blocks fetched from either.
    pub fn total(&self) -> u64 {
        self.disk + self.cache
    }
}

/// A copy of the counters at one moment. Subtract two copies to measure one
/// operation (`after.delta(&before)`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoStats {
    /// Data blocks fetched for queries.
    pub data_blocks: BlockReads,
    /// Index blocks fetched for queries.
    pub index_blocks: BlockReads,
    /// Filter blocks fetched for queries.
    pub filter_blocks: BlockReads,
    /// Meta blocks (properties, metaindex, extension blocks) fetched.
    pub meta_blocks: BlockReads,
    /// Bytes read from table files for queries.
    pub bytes_read: u64,
    /// Bloom filter probes made for queries.
    pub bloom_probes: u64,
    /// Probes the filter answered "definitely not here".
    pub bloom_negatives: u64,
    /// Bytes appended to the WAL.
    pub wal_bytes_written: u64,
    /// Bytes of tables written by flushes.
    pub flush_bytes_written: u64,
    /// Bytes of input tables read by compactions.
    pub compaction_bytes_read: u64,
    /// Bytes of tables written by compactions.
    pub compaction_bytes_written: u64,
    /// Bytes of keys and values accepted from users.
    pub user_bytes_written: u64,
    /// Memtable flushes completed.
    pub flushes: u64,
    /// Compactions completed.
    pub compactions: u64,
    /// Microseconds writers spent delayed or stalled by L0 back-pressure.
    pub write_stall_micros: u64,
}

impl IoStats {
    /// `self - earlier`, field by field (saturating).
    pub fn delta(&self, earlier: &IoStats) -> IoStats {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let db = |a: BlockReads, b: BlockReads| BlockReads {
            disk: d(a.disk, b.disk),
            cache: d(a.cache, b.cache),
        };
        IoStats {
            data_blocks: db(self.data_blocks, earlier.data_blocks),
            index_blocks: db(self.index_blocks, earlier.index_blocks),
            filter_blocks: db(self.filter_blocks, earlier.filter_blocks),
            meta_blocks: db(self.meta_blocks, earlier.meta_blocks),
            bytes_read: d(self.bytes_read, earlier.bytes_read),
            bloom_probes: d(self.bloom_probes, earlier.bloom_probes),
            bloom_negatives: d(self.bloom_negatives, earlier.bloom_negatives),
            wal_bytes_written: d(self.wal_bytes_written, earlier.wal_bytes_written),
            flush_bytes_written: d(self.flush_bytes_written, earlier.flush_bytes_written),
            compaction_bytes_read: d(self.compaction_bytes_read, earlier.compaction_bytes_read),
            compaction_bytes_written: d(
                self.compaction_bytes_written,
                earlier.compaction_bytes_written,
            ),
            user_bytes_written: d(self.user_bytes_written, earlier.user_bytes_written),
            flushes: d(self.flushes, earlier.flushes),
            compactions: d(self.compactions, earlier.compactions),
            write_stall_micros: d(self.write_stall_micros, earlier.write_stall_micros),
        }
    }

    /// Write amplification: bytes written to disk (WAL + flush + compaction)
    /// per byte written by users; 0 before any write.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        (self.wal_bytes_written + self.flush_bytes_written + self.compaction_bytes_written) as f64
            / self.user_bytes_written as f64
    }
}

/// Files and bytes at one LSM level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelStats {
    /// The level (0 is the newest).
    pub level: usize,
    /// Live tables at the level.
    pub files: usize,
    /// Sum of their file sizes.
    pub bytes: u64,
    /// Entries in the level's tables (values, tombstones, merge operands).
    #[serde(default)]
    pub entries: u64,
}

/// What [`crate::Db::stats`] returns.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    /// I/O counters since open.
    pub io: IoStats,
    /// One entry per level, level 0 first.
    pub levels: Vec<LevelStats>,
    /// Bytes in the active and immutable memtables (what their budget
    /// limits).
    pub memtable_bytes: u64,
    /// Bytes of their side structures (the secondary indexes' in-memory
    /// component), not charged to the memtable budget.
    #[serde(default)]
    pub memtable_side_bytes: u64,
    /// Bytes of their key filters ([`crate::Options::memtable_key_filter`]),
    /// not charged to the memtable budget.
    #[serde(default)]
    pub memtable_filter_bytes: u64,
    /// Immutable memtables waiting to be flushed.
    pub immutable_memtables: usize,
    /// Flushed memtables that readers still hold (freed by a background
    /// thread once released; counted in no other field).
    #[serde(default)]
    pub retired_memtables: usize,
    /// Bytes charged to the block cache.
    pub block_cache_bytes: u64,
    /// Sum of live table file sizes.
    pub table_bytes: u64,
    /// Last published sequence number.
    pub last_sequence: u64,
    /// Write amplification including the WAL (see [`IoStats::write_amplification`]).
    pub write_amplification: f64,
}
