//! fjall as a peer: one keyspace for records, one per index, one for meta,
//! written in one cross-keyspace `WriteBatch` per put, as in fjall's own
//! secondary-index example (see [`crate::kv`] for the layout).
//!
//! Options: block cache = `cache_bytes` (fjall's single cache for all
//! keyspaces); no compression (data and index blocks); otherwise fjall's
//! defaults (block size, filters, compaction strategy, worker threads).
//! Durability: batches are written to the OS (`PersistMode::Buffer`, fjall's
//! default) or fsynced (`PersistMode::SyncAll`) when `sync` is set.
//! fjall has no direct I/O and no mmap reads (`direct_io` and `mmap_reads`
//! are ignored), no spatial index
//! (points use Hilbert keys, [`crate::curve`]) and no multi-get (records are
//! fetched with point reads in key order).
//!
//! Counters: the lsm-tree block metrics (fjall's `metrics` feature, an
//! experimental API): `data_blocks_read` is the data blocks loaded (cache or
//! disk) by the point reads of the records keyspace; `index_blocks_read` is
//! `None` because range iterators count only cache misses. `index_bytes`
//! is the index keyspaces' disk space; fjall reports no write
//! amplification. `db_bytes` is the directory size with the journals
//! counted by their allocated blocks (fjall preallocates them as sparse
//! 64 MiB files).

use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, Instant};

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use strata_bench::system::{dir_bytes, BenchSystem, IndexDecl, SysResult, SystemOptions};

use crate::kv::{space_name, Backend, KvPeer, Op, Space, Visit};

/// The fjall peer.
pub type FjallPeer = KvPeer<FjallBackend>;

/// Opener for the harness ([`strata_bench::system::OpenFn`]).
pub fn open(
    dir: &Path,
    indexes: &[IndexDecl],
    opts: &SystemOptions,
) -> SysResult<Box<dyn BenchSystem>> {
    Ok(Box::new(FjallPeer::open(dir, indexes, opts)?))
}

fn err(what: &str) -> impl Fn(fjall::Error) -> String + '_ {
    move |e| format!("fjall: {what}: {e}")
}

/// Longest [`Backend::settle`] waits for background compactions.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// Bytes of the `*.jnl` files in `dir` beyond the blocks they occupy.
#[cfg(unix)]
fn journal_sparse_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "jnl"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len().saturating_sub(m.blocks() * 512))
        .sum()
}

#[cfg(not(unix))]
fn journal_sparse_bytes(_dir: &Path) -> u64 {
    0
}

/// fjall database and keyspace handles.
pub struct FjallBackend {
    db: Database,
    records: Keyspace,
    meta: Keyspace,
    indexes: Vec<Keyspace>,
    sync: bool,
}

impl FjallBackend {
    fn space(&self, s: Space) -> SysResult<&Keyspace> {
        match s {
            Space::Records => Ok(&self.records),
            Space::Meta => Ok(&self.meta),
            Space::Index(i) => self
                .indexes
                .get(i)
                .ok_or_else(|| format!("fjall: no index keyspace #{i}")),
        }
    }
}

fn keyspace_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
        .index_block_compression_policy(CompressionPolicy::all(CompressionType::None))
}

impl Backend for FjallBackend {
    const NAME: &'static str = "fjall";

    fn open(dir: &Path, indexes: &[IndexDecl], opts: &SystemOptions) -> SysResult<Self> {
        let db = Database::builder(dir)
            .cache_size(opts.cache_bytes)
            .open()
            .map_err(|e| format!("fjall: opening {}: {e}", dir.display()))?;
        let ks = |s: Space| {
            let name = space_name(indexes, s);
            db.keyspace(&name, keyspace_options)
                .map_err(|e| format!("fjall: opening keyspace {name}: {e}"))
        };
        let records = ks(Space::Records)?;
        let meta = ks(Space::Meta)?;
        let indexes = (0..indexes.len())
            .map(|i| ks(Space::Index(i)))
            .collect::<SysResult<Vec<_>>>()?;
        Ok(FjallBackend {
            db,
            records,
            meta,
            indexes,
            sync: opts.sync,
        })
    }

    fn get(&self, space: Space, key: &[u8]) -> SysResult<Option<Vec<u8>>> {
        let v = self.space(space)?.get(key).map_err(err("get"))?;
        Ok(v.map(|v| v.to_vec()))
    }

    fn write(&mut self, ops: Vec<Op>) -> SysResult<()> {
        let mut b = self.db.batch();
        if self.sync {
            b = b.durability(Some(PersistMode::SyncAll));
        }
        for op in ops {
            match op {
                Op::Put(s, k, v) => b.insert(self.space(s)?, k, v),
                Op::Delete(s, k) => b.remove(self.space(s)?, k),
            }
        }
        b.commit().map_err(err("committing a batch"))
    }

    fn scan(
        &self,
        index: usize,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut Visit<'_>,
    ) -> SysResult<()> {
        let ks = self.space(Space::Index(index))?;
        let hi = match end {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        for g in ks.range::<&[u8], _>((Bound::Included(start), hi)) {
            let (k, v) = g.into_inner().map_err(err("scanning an index"))?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn scan_records(&self, f: &mut Visit<'_>) -> SysResult<()> {
        for g in self.records.iter() {
            let (k, v) = g.into_inner().map_err(err("scanning the records"))?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn multi_get(&self, keys: &[&[u8]]) -> SysResult<Vec<Option<Vec<u8>>>> {
        // No multi-get in fjall: point reads in key order. (The harness is
        // single-threaded, so no snapshot is needed for consistency.)
        keys.iter()
            .map(|k| {
                self.records
                    .get(k)
                    .map(|v| v.map(|v| v.to_vec()))
                    .map_err(err("reading a record"))
            })
            .collect()
    }

    fn settle(&mut self) -> SysResult<()> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(err("persisting the journal"))?;
        for ks in [&self.records, &self.meta].into_iter().chain(&self.indexes) {
            ks.rotate_memtable_and_wait()
                .map_err(err("flushing a memtable"))?;
        }
        // Wait until no compaction has run for a while (fjall schedules
        // them after flushes; there is no call that waits for them).
        let t0 = Instant::now();
        let mut idle = 0;
        while idle < 5 {
            if self.db.active_compactions() == 0 && self.db.outstanding_flushes() == 0 {
                idle += 1;
            } else {
                idle = 0;
            }
            if t0.elapsed() > SETTLE_LIMIT {
                return Err(format!(
                    "fjall: compactions still running after {}s",
                    SETTLE_LIMIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn blocks(&self, space: Space) -> Option<u64> {
        // Only point reads count block-cache hits in lsm-tree's metrics
        // (range iterators count only the blocks they read from disk), so
        // index scans report nothing rather than an undercount.
        match space {
            Space::Records => Some(self.records.metrics().data_block_load_count() as u64),
            Space::Meta | Space::Index(_) => None,
        }
    }

    fn db_bytes(&self, dir: &Path) -> u64 {
        // fjall preallocates each journal (`*.jnl`) as a sparse 64 MiB file:
        // count what the journals occupy, not their length.
        dir_bytes(dir).saturating_sub(journal_sparse_bytes(dir))
    }

    fn index_bytes(&self) -> SysResult<Option<u64>> {
        Ok(Some(self.indexes.iter().map(|ks| ks.disk_space()).sum()))
    }

    fn write_amplification(&self, _user_bytes: u64) -> SysResult<Option<f64>> {
        Ok(None)
    }
}
