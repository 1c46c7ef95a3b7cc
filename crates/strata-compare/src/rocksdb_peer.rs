//! RocksDB as a peer: records in the `default` column family, one column
//! family per index and one for meta, written in one `WriteBatch` per put
//! (see [`crate::kv`] for the layout); records are fetched with
//! `batched_multi_get_cf` on sorted keys.
//!
//! Options: one LRU block cache of `cache_bytes` shared by every column
//! family; compression off; 4 KiB blocks and a 10 bits/key Bloom filter
//! (Strata's defaults; RocksDB has no filter by default); `use_direct_reads`
//! = `direct_io`; `allow_mmap_reads` = `mmap_reads`; WAL on, `WriteOptions::sync` = `sync`; statistics on
//! (for write amplification); otherwise RocksDB's defaults (leveled
//! compaction, 64 MiB memtables, 2 background jobs).
//!
//! Counters: the per-thread perf context (level `EnableCount`):
//! `index_blocks_read` is the blocks fetched (block-cache hits + block
//! reads) while scanning the index, `data_blocks_read` those fetched by
//! the batched record read. `index_bytes` is the index column families'
//! `rocksdb.total-sst-files-size` (after `settle`, when memtables are
//! flushed); write amplification is (WAL + flush + compaction bytes
//! written) / (key + value bytes of puts and deletes) since open, from the
//! statistics tickers.
//!
//! Building: the crate links either a RocksDB compiled from source (~20 min
//! on 2 cores) or a system `librocksdb` (`ROCKSDB_LIB_DIR`); see
//! `docs/benchmarks.md`, "Peers".

use std::path::Path;
use std::time::{Duration, Instant};

use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    FlushOptions, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use strata_bench::system::{BenchSystem, IndexDecl, SysResult, SystemOptions};

use crate::kv::{space_name, Backend, KvPeer, Op, Space, Visit};

/// The RocksDB peer.
pub type RocksPeer = KvPeer<RocksBackend>;

/// Opener for the harness ([`strata_bench::system::OpenFn`]).
pub fn open(
    dir: &Path,
    indexes: &[IndexDecl],
    opts: &SystemOptions,
) -> SysResult<Box<dyn BenchSystem>> {
    Ok(Box::new(RocksPeer::open(dir, indexes, opts)?))
}

fn err(what: &str) -> impl Fn(rocksdb::Error) -> String + '_ {
    move |e| format!("rocksdb: {what}: {e}")
}

/// Longest [`Backend::settle`] waits for background compactions.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// The database, its options (which hold the statistics) and the column
/// family names.
pub struct RocksBackend {
    db: DB,
    opts: Options,
    /// Column family names: meta, then one per index.
    meta: String,
    indexes: Vec<String>,
    write_opts: WriteOptions,
}

impl RocksBackend {
    fn cf(&self, s: Space) -> SysResult<&ColumnFamily> {
        let name = match s {
            Space::Records => rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
            Space::Meta => self.meta.as_str(),
            Space::Index(i) => self
                .indexes
                .get(i)
                .map(String::as_str)
                .ok_or_else(|| format!("rocksdb: no index column family #{i}"))?,
        };
        self.db
            .cf_handle(name)
            .ok_or_else(|| format!("rocksdb: column family {name} is not open"))
    }

    fn all_cfs(&self) -> SysResult<Vec<&ColumnFamily>> {
        let mut v = vec![self.cf(Space::Records)?, self.cf(Space::Meta)?];
        for i in 0..self.indexes.len() {
            v.push(self.cf(Space::Index(i))?);
        }
        Ok(v)
    }

    fn int_property(&self, cf: &ColumnFamily, name: &str) -> SysResult<u64> {
        self.db
            .property_int_value_cf(cf, name)
            .map_err(err("reading a property"))?
            .ok_or_else(|| format!("rocksdb: property {name} is not available"))
    }
}

/// Options of every column family (the block cache is shared).
fn cf_options(cache: &Cache) -> Options {
    let mut bbo = BlockBasedOptions::default();
    bbo.set_block_cache(cache);
    bbo.set_block_size(4096);
    bbo.set_bloom_filter(10.0, false);
    let mut o = Options::default();
    o.set_block_based_table_factory(&bbo);
    o.set_compression_type(DBCompressionType::None);
    o
}

/// A ticker's count from the statistics dump (`name COUNT : n`).
fn ticker(stats: &str, name: &str) -> Option<u64> {
    stats.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(" COUNT : ")?;
        rest.trim().parse().ok()
    })
}

impl Backend for RocksBackend {
    const NAME: &'static str = "rocksdb";

    fn open(dir: &Path, indexes: &[IndexDecl], opts: &SystemOptions) -> SysResult<Self> {
        let cache_bytes = usize::try_from(opts.cache_bytes)
            .map_err(|_| format!("rocksdb: cache of {} bytes is too large", opts.cache_bytes))?;
        let cache = Cache::new_lru_cache(cache_bytes).map_err(err("creating the block cache"))?;
        let mut db_opts = cf_options(&cache);
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_use_direct_reads(opts.direct_io);
        db_opts.set_allow_mmap_reads(opts.mmap_reads);
        db_opts.enable_statistics();
        let meta = space_name(indexes, Space::Meta);
        let index_names: Vec<String> = (0..indexes.len())
            .map(|i| space_name(indexes, Space::Index(i)))
            .collect();
        let cfs = std::iter::once(meta.clone())
            .chain(index_names.iter().cloned())
            .map(|n| ColumnFamilyDescriptor::new(n, cf_options(&cache)));
        let db = DB::open_cf_descriptors(&db_opts, dir, cfs)
            .map_err(|e| format!("rocksdb: opening {}: {e}", dir.display()))?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(opts.sync);
        Ok(RocksBackend {
            db,
            opts: db_opts,
            meta,
            indexes: index_names,
            write_opts,
        })
    }

    fn get(&self, space: Space, key: &[u8]) -> SysResult<Option<Vec<u8>>> {
        self.db.get_cf(self.cf(space)?, key).map_err(err("get"))
    }

    fn write(&mut self, ops: Vec<Op>) -> SysResult<()> {
        let mut b = WriteBatch::default();
        for op in ops {
            match op {
                Op::Put(s, k, v) => b.put_cf(self.cf(s)?, k, v),
                Op::Delete(s, k) => b.delete_cf(self.cf(s)?, k),
            }
        }
        self.db
            .write_opt(b, &self.write_opts)
            .map_err(err("writing a batch"))
    }

    fn scan(
        &self,
        index: usize,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut Visit<'_>,
    ) -> SysResult<()> {
        let mut ro = ReadOptions::default();
        if let Some(e) = end {
            ro.set_iterate_upper_bound(e.to_vec());
        }
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.cf(Space::Index(index))?, ro);
        it.seek(start);
        while it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                f(k, v)?;
            }
            it.next();
        }
        it.status().map_err(err("scanning an index"))
    }

    fn scan_records(&self, f: &mut Visit<'_>) -> SysResult<()> {
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.cf(Space::Records)?, ReadOptions::default());
        it.seek_to_first();
        while it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                f(k, v)?;
            }
            it.next();
        }
        it.status().map_err(err("scanning the records"))
    }

    fn multi_get(&self, keys: &[&[u8]]) -> SysResult<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.db
            .batched_multi_get_cf(self.cf(Space::Records)?, keys, true)
            .into_iter()
            .map(|r| {
                r.map(|v| v.map(|v| v.to_vec()))
                    .map_err(err("batched record read"))
            })
            .collect()
    }

    fn settle(&mut self) -> SysResult<()> {
        self.db.flush_wal(true).map_err(err("syncing the WAL"))?;
        let mut fo = FlushOptions::default();
        fo.set_wait(true);
        for cf in self.all_cfs()? {
            self.db.flush_cf_opt(cf, &fo).map_err(err("flushing"))?;
        }
        let t0 = Instant::now();
        loop {
            let mut busy = self
                .int_property(self.cf(Space::Records)?, "rocksdb.num-running-compactions")?
                + self.int_property(self.cf(Space::Records)?, "rocksdb.num-running-flushes")?;
            for cf in self.all_cfs()? {
                busy += self.int_property(cf, "rocksdb.compaction-pending")?;
            }
            if busy == 0 {
                return Ok(());
            }
            if t0.elapsed() > SETTLE_LIMIT {
                return Err(format!(
                    "rocksdb: compactions still running after {}s",
                    SETTLE_LIMIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn begin_query(&self) {
        set_perf_stats(PerfStatsLevel::EnableCount);
    }

    fn blocks(&self, _space: Space) -> Option<u64> {
        // Thread-local and cumulative; queries take differences between
        // their phases, so the space needs no separate counter.
        let ctx = PerfContext::default();
        Some(ctx.metric(PerfMetric::BlockCacheHitCount) + ctx.metric(PerfMetric::BlockReadCount))
    }

    fn index_bytes(&self) -> SysResult<Option<u64>> {
        let mut sum = 0;
        for i in 0..self.indexes.len() {
            sum += self.int_property(self.cf(Space::Index(i))?, "rocksdb.total-sst-files-size")?;
        }
        Ok(Some(sum))
    }

    fn write_amplification(&self, user_bytes: u64) -> SysResult<Option<f64>> {
        let Some(stats) = self.opts.get_statistics() else {
            return Ok(None);
        };
        let written: Option<u64> = [
            "rocksdb.wal.bytes",
            "rocksdb.flush.write.bytes",
            "rocksdb.compact.write.bytes",
        ]
        .iter()
        .map(|t| ticker(&stats, t))
        .sum();
        Ok(match written {
            Some(w) if user_bytes > 0 => Some(w as f64 / user_bytes as f64),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticker_parses_the_dump() {
        let s = "rocksdb.block.cache.miss COUNT : 3\nrocksdb.wal.bytes COUNT : 1234\n";
        assert_eq!(ticker(s, "rocksdb.wal.bytes"), Some(1234));
        assert_eq!(ticker(s, "rocksdb.wal"), None);
        assert_eq!(ticker(s, "rocksdb.flush.write.bytes"), None);
    }
}
