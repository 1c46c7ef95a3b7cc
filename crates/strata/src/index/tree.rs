//! The secondary LSM tree of the stand-alone strategies (`composite`,
//! `deli`, `posting-eager`, `posting-lazy`), and the key encodings they
//! share.
//!
//! A stand-alone index is a separate LSM tree: its own memtable, tables
//! and cache, in the subdirectory `index-<id>/tree` of the database (with,
//! for timestamp validation, a primary-key index in `index-<id>/pk`).
//! Each is a nested [`Db`] with no index of its own, *hosted* by the
//! primary (a column family of it, `strata_lsm::host`): no WAL, writer
//! queue or threads of its own; the primary switches, flushes and
//! compacts it.
//!
//! Durability contract (with the primary):
//! * Index writes for a primary batch are applied by the primary's write
//!   leader before the batch enters the primary memtable (see
//!   `db::write`), so the tree is never behind a published write.
//! * The primary freezes every tree's memtable when it freezes its own;
//!   before it installs a flush (which retires WAL files), it fsyncs its
//!   current WAL and then flushes every tree's frozen memtables: everything
//!   the retired WAL held is in durable tree tables.
//! * Before a tree installs the tables of any flush or compaction (with
//!   merge repair too), it fsyncs the primary's WAL (the `primary-wal` hook of
//!   [`tree_options`]): nothing durable in a tree is newer than the durable
//!   primary WAL. (Found by `tests/io_power_loss.rs`: after a power loss a
//!   tree held entries of lost primary writes, and had dropped the entries
//!   those writes replaced.)
//! * Trees write no WAL of their own: what their memtables hold is
//!   recovered from the primary's.
//! * At open, every batch replayed from the primary WAL is applied to the
//!   trees again. Every tree operation is idempotent (entries are keyed by
//!   the sequence number of the version they describe), so replaying an
//!   operation the tree already holds is harmless.
//!
//! Keys: [`sort_key`] is an order-preserving, self-delimiting encoding of a
//! scalar (8 bytes for numbers, escaped and terminated strings) or, for
//! points and rectangles, the 8-byte Hilbert cell of the MBR centre on a
//! 2^16 × 2^16 grid over longitude [-180, 180] × latitude [-90, 90]
//! (coordinates outside are clamped, which keeps the mapping monotone and
//! queries exact, only less selective). A spatial query covers its window,
//! widened by the largest rectangle half-extent ever indexed, with at most
//! [`MAX_COVER_RANGES`] Hilbert ranges and filters candidates by their
//! exact geometry, stored in the entry.

#![deny(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::EngineHooks;
use strata_lsm::key::SeqNo;
use strata_lsm::options::{Options, WriteOptions};
use strata_lsm::{Db, WriteBatch};

use super::value::{IndexValue, KeyType, Predicate};
use super::OpRef;

/// Each key's state after a batch's operations so far, read back by a
/// later operation on the same key as its old version. A batch of one
/// operation has no later one: nothing is kept (every `Db::put`).
pub(crate) struct BatchLatest<'a, V> {
    map: super::fxhash::FastMap<&'a [u8], V>,
    keep: bool,
}

impl<'a, V> BatchLatest<'a, V> {
    pub fn new(ops: &[OpRef<'a>]) -> Self {
        BatchLatest {
            map: Default::default(),
            keep: ops.len() > 1,
        }
    }

    /// The state an earlier operation of the batch left for `key`.
    pub fn take(&mut self, key: &[u8]) -> Option<V> {
        if !self.keep {
            return None;
        }
        self.map.remove(key)
    }

    /// Records `key`'s state after the current operation.
    pub fn set(&mut self, key: &'a [u8], v: V) {
        if self.keep {
            self.map.insert(key, v);
        }
    }
}

/// Upper bound on the Hilbert ranges one spatial query scans.
pub const MAX_COVER_RANGES: usize = 64;

/// Prefix of the tree's metadata keys (see `docs/format/standalone.md`
/// for why no entry key starts with it).
pub const META_PREFIX: &[u8] = b"\xff\xff\xffstrata.";
/// The largest rectangle half-extents indexed.
const EXTENT_KEY: &[u8] = b"\xff\xff\xffstrata.extent";
/// The layout version of the tree's keys and values.
const LAYOUT_KEY: &[u8] = b"\xff\xff\xffstrata.layout";
const LAYOUT_VERSION: &[u8] = b"1";
/// Present if every entry's sequence number is at least every primary
/// sequence number the entry records (written when the tree is created;
/// see [`IndexTree::write_covering`]). Trees created before this key
/// existed lack it.
const SEQ_COVERS_KEY: &[u8] = b"\xff\xff\xffstrata.seq-covers";
/// DELI's largest repaired sequence number (`deli`).
pub(crate) const DELI_TS_LAST_KEY: &[u8] = b"\xff\xff\xffstrata.deli.ts_last";

/// True for metadata keys (scans skip them): exactly the keys above and
/// DELI's `ts_last`, all starting with [`META_PREFIX`].
pub fn is_meta(key: &[u8]) -> bool {
    key.starts_with(META_PREFIX)
        && [EXTENT_KEY, LAYOUT_KEY, SEQ_COVERS_KEY, DELI_TS_LAST_KEY].contains(&key)
}

const GRID: u32 = 1 << 16;

/// Sort key of an attribute value (see the module doc).
pub fn sort_key(v: &IndexValue) -> Vec<u8> {
    let mut out = Vec::new();
    sort_key_into(v, &mut out);
    out
}

/// Appends [`sort_key`]`(v)` to `out`.
pub fn sort_key_into(v: &IndexValue, out: &mut Vec<u8>) {
    match v {
        IndexValue::I64(_) | IndexValue::F64(_) => v.encode_into(out),
        IndexValue::Str(s) => {
            out.reserve(s.len() + 2);
            for &b in s.as_bytes() {
                out.push(b);
                if b == 0 {
                    out.push(0xff);
                }
            }
            out.extend_from_slice(&[0, 0]);
        }
        IndexValue::Point(_) | IndexValue::Rect(_) => {
            let m = v.mbr().unwrap_or([0.0; 4]);
            let (x, y) = cell((m[0] + m[2]) / 2.0, (m[1] + m[3]) / 2.0);
            out.extend_from_slice(&super::next::table::hilbert(x, y).to_be_bytes());
        }
    }
}

/// Length of the sort key at the start of `key`.
pub fn sort_key_len(ty: KeyType, key: &[u8]) -> Result<usize> {
    let bad = || {
        Error::corruption(format!(
            "index tree key of {} bytes is malformed",
            key.len()
        ))
    };
    match ty {
        KeyType::String => {
            let mut i = 0;
            while let Some(&[a, b]) = key.get(i..i + 2) {
                match (a, b) {
                    (0, 0) => return Ok(i + 2),
                    (0, 0xff) => i += 2,
                    (0, _) => return Err(bad()),
                    _ => i += 1,
                }
            }
            Err(bad())
        }
        _ if key.len() >= 8 => Ok(8),
        _ => Err(bad()),
    }
}

/// The smallest byte string greater than every string starting with `p`
/// (`None`: no such bound, `p` is all 0xFF).
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    successor_of(p.to_vec())
}

/// [`prefix_successor`] of `v`, reusing its buffer.
fn successor_of(mut v: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(last) = v.pop() {
        if last < 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

fn cell(x: f64, y: f64) -> (u32, u32) {
    let map = |v: f64, lo: f64, hi: f64| -> u32 {
        if v.is_nan() {
            return 0;
        }
        let t = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
        ((t * GRID as f64) as u32).min(GRID - 1)
    };
    (map(x, -180.0, 180.0), map(y, -90.0, 90.0))
}

/// Inclusive Hilbert ranges whose union holds every cell meeting `window`,
/// sorted and merged, at most [`MAX_COVER_RANGES`] of them.
pub fn hilbert_cover(window: &[f64; 4]) -> Vec<(u64, u64)> {
    let (x0, y0) = cell(window[0], window[1]);
    let (x1, y1) = cell(window[2], window[3]);
    let (qx0, qx1, qy0, qy1) = (x0.min(x1), x0.max(x1), y0.min(y1), y0.max(y1));
    let range_of = |nx: u32, ny: u32, s: u32| -> (u64, u64) {
        let area = s as u64 * s as u64;
        let d = super::next::table::hilbert(nx, ny) / area * area;
        (d, d + area - 1)
    };
    let mut out = Vec::new();
    let mut frontier = vec![(0u32, 0u32, GRID)];
    while !frontier.is_empty() {
        let mut partial = Vec::new();
        for (nx, ny, s) in frontier {
            let (ex, ey) = (nx + (s - 1), ny + (s - 1));
            if ex < qx0 || nx > qx1 || ey < qy0 || ny > qy1 {
                continue;
            }
            if (nx >= qx0 && ex <= qx1 && ny >= qy0 && ey <= qy1) || s == 1 {
                out.push(range_of(nx, ny, s));
            } else {
                partial.push((nx, ny, s));
            }
        }
        if out.len() + 4 * partial.len() > MAX_COVER_RANGES {
            out.extend(partial.iter().map(|&(nx, ny, s)| range_of(nx, ny, s)));
            break;
        }
        frontier = partial
            .into_iter()
            .flat_map(|(nx, ny, s)| {
                let h = s / 2;
                [(nx, ny), (nx + h, ny), (nx, ny + h), (nx + h, ny + h)].map(|(a, b)| (a, b, h))
            })
            .collect();
    }
    out.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
    for (a, b) in out {
        match merged.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Key ranges `[from, to)` (`to == None`: unbounded) of the sort keys that
/// may satisfy `pred`, given the largest rectangle half-extents indexed.
pub fn key_ranges(pred: &Predicate, extent: [f64; 2]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    // Scalar predicates: one range, built with two allocations (a PERSEID
    // lookup's whole index work is a few thousand instructions).
    match pred {
        Predicate::Eq(v) if !v.key_type().is_spatial() => {
            let lo = sort_key(v);
            let to = prefix_successor(&lo);
            return vec![(lo, to)];
        }
        Predicate::Range(l, h) => {
            let (lo, hi) = (sort_key(l), sort_key(h));
            if lo > hi {
                return Vec::new();
            }
            return vec![(lo, successor_of(hi))];
        }
        _ => {}
    }
    let Some(w) = pred.window() else {
        return Vec::new();
    };
    let w = [
        w[0] - extent[0],
        w[1] - extent[1],
        w[2] + extent[0],
        w[3] + extent[1],
    ];
    hilbert_cover(&w)
        .into_iter()
        .map(|(a, b)| {
            (
                a.to_be_bytes().to_vec(),
                b.checked_add(1).map(|e| e.to_be_bytes().to_vec()),
            )
        })
        .collect()
}

/// Encodes a sequence number in 8 bytes (big-endian); `inverted` makes
/// newer versions sort first.
pub fn seq_bytes(seq: SeqNo, inverted: bool) -> [u8; 8] {
    if inverted { !seq } else { seq }.to_be_bytes()
}

pub fn read_seq(b: &[u8], inverted: bool) -> Result<SeqNo> {
    let a: [u8; 8] = b
        .try_into()
        .map_err(|_| Error::corruption("index tree: bad sequence number"))?;
    let s = u64::from_be_bytes(a);
    Ok(if inverted { !s } else { s })
}

/// The geometry stored with a spatial entry (empty for scalars, whose key
/// holds the value).
pub fn geometry(v: &IndexValue) -> Vec<u8> {
    match v {
        IndexValue::Point(_) | IndexValue::Rect(_) => v.encode(),
        _ => Vec::new(),
    }
}

/// True if an entry with this key's sort key and stored geometry satisfies
/// `pred`. Scalars were selected exactly by the key range.
pub fn entry_matches(ty: KeyType, pred: &Predicate, geometry: &[u8]) -> Result<bool> {
    if !ty.is_spatial() {
        return Ok(true);
    }
    Ok(pred.matches(&IndexValue::decode(ty, geometry)?))
}

/// The primary's handle, set when the primary attaches the index framework.
pub type PrimaryHandle = strata_lsm::hooks::HostRef;

/// A tree's hook: fsyncs the primary's WAL before the tree installs tables.
struct SyncPrimaryWal(PrimaryHandle);

impl EngineHooks for SyncPrimaryWal {
    fn name(&self) -> &str {
        "primary-wal"
    }

    fn before_tables_install(&self) -> Result<()> {
        match self.0.get() {
            Some(h) => h.sync_wal(),
            None => Ok(()),
        }
    }
}

/// Entries of a range-read tree's memtable skiplist before it is sealed
/// into a sorted run (`Options::memtable_run_entries`) unless the
/// primary's options set another: small enough that the list's searches
/// hit the cache (`docs/benchmarks.md`, session 39).
pub const RANGE_TREE_RUN_ENTRIES: usize = 16 << 10;

/// `opts` (a tree's, from [`tree_options`]) for a tree written blind at
/// random keys and read only by ranges, or by key only at open: without a
/// memtable key filter, which would answer no lookup while every insert
/// sets its bits (a random cache line a write; `docs/benchmarks.md`,
/// session 37), and with its memtable in runs mode (a small skiplist in
/// front of sorted runs; session 39).
pub fn range_read_options(opts: &Options) -> Options {
    Options {
        memtable_key_filter: false,
        memtable_run_entries: match opts.memtable_run_entries {
            0 => RANGE_TREE_RUN_ENTRIES,
            n => n,
        },
        ..opts.clone()
    }
}

/// Options of a nested tree, derived from the primary's: same table and
/// compaction settings and file system, a quarter of the block cache, and
/// one hook, which fsyncs the primary's WAL before the tree installs
/// tables (see the module doc).
pub fn tree_options(primary: &Options, primary_handle: &PrimaryHandle) -> Options {
    Options {
        create_if_missing: true,
        error_if_exists: false,
        memtable_size: primary.memtable_size,
        max_immutable_memtables: primary.max_immutable_memtables,
        memtable_key_filter: primary.memtable_key_filter,
        // The primary ignores it (its writes reach hooks); its trees take
        // it (and the range-read ones a default, `range_read_options`).
        memtable_run_entries: primary.memtable_run_entries,
        block_size: primary.block_size,
        block_restart_interval: primary.block_restart_interval,
        compression: primary.compression,
        bloom_bits_per_key: primary.bloom_bits_per_key,
        block_cache_bytes: primary.block_cache_bytes / 4,
        block_cache_doorkeeper: primary.block_cache_doorkeeper,
        max_open_files: primary.max_open_files / 4 + 16,
        l0_compaction_trigger: primary.l0_compaction_trigger,
        l0_slowdown_trigger: primary.l0_slowdown_trigger,
        l0_stop_trigger: primary.l0_stop_trigger,
        max_bytes_for_level_base: primary.max_bytes_for_level_base,
        level_size_ratio: primary.level_size_ratio,
        num_levels: primary.num_levels,
        target_file_size: primary.target_file_size,
        direct_io: primary.direct_io,
        mmap_reads: primary.mmap_reads,
        // The trees stay leveled: the tiered policy is the primary's
        // (PERSEID §4.4), and posting-lazy's level-by-level top-K reads
        // are tuned for leveled trees.
        compaction_style: strata_lsm::CompactionStyle::Leveled,
        tiered_runs: primary.tiered_runs,
        wal_recovery: primary.wal_recovery,
        // A column family of the primary (see the module doc): no WAL and
        // no threads of its own.
        background_work: false,
        wal: false,
        wal_mmap: primary.wal_mmap,
        host: Some(primary_handle.clone()),
        hooks: vec![Arc::new(SyncPrimaryWal(primary_handle.clone()))],
        // Set by the strategies whose tree merges (`posting-lazy`).
        merge_operator: None,
        // The same file system as the primary (fault injection reaches
        // the secondary trees too).
        fs: primary.fs.clone(),
    }
}

/// Directory of index `id`'s trees inside the database directory.
pub fn index_dir(db_dir: &Path, id: u32) -> PathBuf {
    db_dir.join(format!("index-{id}"))
}

/// Largest batch encoding whose buffer [`IndexTree::write_with`] keeps
/// for the next write.
const SCRATCH_KEEP_BYTES: usize = 64 << 10;

/// Buffers a writer of [`IndexTree::write_with`] builds entries in.
#[derive(Default)]
pub struct Bufs {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// One nested LSM tree with the largest rectangle half-extents of its
/// entries (for spatial queries).
pub struct IndexTree {
    pub db: Db,
    extent: [AtomicU64; 2],
    /// The strategy writes with [`IndexTree::write_covering`] (or
    /// [`IndexTree::write_with`] given the primary's sequence number).
    covering: bool,
    /// `covering` and the tree holds [`SEQ_COVERS_KEY`].
    seq_covers: AtomicBool,
    /// A batch and buffers kept between writes ([`IndexTree::write_with`]).
    scratch: Mutex<(WriteBatch, Bufs)>,
}

impl IndexTree {
    pub fn open(path: PathBuf, opts: Options) -> Result<IndexTree> {
        Self::open_layout(path, opts, LAYOUT_VERSION, false)
    }

    /// Opens a tree whose strategy has its own layout version `layout`
    /// (a tree of another version fails the open). `covering`: the
    /// strategy writes every entry with [`IndexTree::write_covering`] or
    /// [`IndexTree::write_with`] at the primary's sequence number; a
    /// tree created (or cleared) so is marked and [`IndexTree::seq_covers`].
    pub fn open_layout(
        path: PathBuf,
        opts: Options,
        layout: &[u8],
        covering: bool,
    ) -> Result<IndexTree> {
        let db = Db::open(&path, opts)
            .map_err(|e| Error::Background(format!("open index tree {}: {e}", path.display())))?;
        match db.get(LAYOUT_KEY)? {
            None => {
                let mut b = WriteBatch::new();
                b.put(LAYOUT_KEY, layout);
                if covering {
                    b.put(SEQ_COVERS_KEY, b"1");
                }
                db.write(b, WriteOptions::default())?;
            }
            Some(v) if v == layout => {}
            Some(v) => {
                return Err(Error::invalid(format!(
                    "index tree {} has layout version {:?}; this build reads version {:?}",
                    path.display(),
                    String::from_utf8_lossy(&v),
                    String::from_utf8_lossy(layout)
                )))
            }
        }
        let extent = [AtomicU64::new(0), AtomicU64::new(0)];
        if let Some(b) = db.get(EXTENT_KEY)? {
            if b.len() != 16 {
                return Err(Error::corruption(format!(
                    "index tree {}: bad extent entry",
                    path.display()
                )));
            }
            for (e, a) in extent.iter().zip(b.chunks_exact(8)) {
                let a: [u8; 8] = a
                    .try_into()
                    .map_err(|_| Error::corruption("index tree: bad extent entry"))?;
                e.store(u64::from_le_bytes(a), Relaxed);
            }
        }
        let seq_covers = AtomicBool::new(covering && db.get(SEQ_COVERS_KEY)?.is_some());
        Ok(IndexTree {
            db,
            extent,
            covering,
            seq_covers,
            scratch: Mutex::new((WriteBatch::new(), Bufs::default())),
        })
    }

    /// Largest half-width and half-height of the rectangles indexed.
    pub fn extent(&self) -> [f64; 2] {
        [
            f64::from_bits(self.extent[0].load(Relaxed)),
            f64::from_bits(self.extent[1].load(Relaxed)),
        ]
    }

    /// Widens the recorded extent for `v` (rectangles only), adding the
    /// metadata entry to `batch` when it grows. Single writer (the primary's
    /// write leader, or a build: both hold the sync guard's write side).
    pub fn note_extent(&self, v: &IndexValue, batch: &mut WriteBatch) {
        let IndexValue::Rect(r) = v else { return };
        let half = [(r[2] - r[0]).abs() / 2.0, (r[3] - r[1]).abs() / 2.0];
        let cur = self.extent();
        if half[0] <= cur[0] && half[1] <= cur[1] || half.iter().any(|h| !h.is_finite()) {
            return;
        }
        let new = [half[0].max(cur[0]), half[1].max(cur[1])];
        for (a, n) in self.extent.iter().zip(new) {
            a.store(n.to_bits(), Relaxed);
        }
        let mut b = Vec::with_capacity(16);
        b.extend_from_slice(&new[0].to_le_bytes());
        b.extend_from_slice(&new[1].to_le_bytes());
        batch.put(EXTENT_KEY, &b);
    }

    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_covering(batch, 0)
    }

    /// Writes what `fill` adds to an empty batch (given cleared buffers
    /// for the entries' keys and values too), as
    /// [`IndexTree::write_covering`] does with `primary_seq`. The batch and
    /// the buffers are the tree's own, kept for the next call: a tree
    /// hosted by the primary inserts the batch in place, so the write
    /// allocates nothing. Single writer (the primary's write leader or a
    /// build), as [`IndexTree::note_extent`].
    pub fn write_with(
        &self,
        primary_seq: SeqNo,
        fill: impl FnOnce(&mut WriteBatch, &mut Bufs) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = super::lock(&self.scratch);
        let (batch, bufs) = &mut *scratch;
        batch.clear();
        bufs.key.clear();
        bufs.value.clear();
        fill(batch, bufs)?;
        if batch.is_empty() {
            return Ok(());
        }
        let len = batch.encoded_len();
        let r = self
            .db
            .write_in_place(batch, WriteOptions::default().min_sequence(primary_seq));
        // A build's large batch is not kept for the writes after it.
        if len > SCRATCH_KEEP_BYTES {
            *batch = WriteBatch::new();
        }
        r
    }

    /// Writes `batch` at sequence numbers of at least `primary_seq`, the
    /// largest primary sequence number its entries record. If every entry
    /// is written so, a tree entry's sequence number bounds the primary
    /// sequence numbers inside it (merged operands keep the newest's), and
    /// so does a table's largest sequence number for all its entries: a
    /// top-K query can stop at a component once K results are newer than
    /// everything left ([`IndexTree::seq_covers`]).
    pub fn write_covering(&self, batch: WriteBatch, primary_seq: SeqNo) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.db
            .write(batch, WriteOptions::default().min_sequence(primary_seq))
    }

    /// True if every entry of the tree was written by
    /// [`IndexTree::write_covering`] since its creation (false for a tree
    /// created by an older build, until the index is rebuilt).
    pub fn seq_covers(&self) -> bool {
        self.seq_covers.load(Relaxed)
    }

    /// Flushes the tree's memtable to durable tables.
    pub fn flush(&self) -> Result<()> {
        self.db.flush()
    }

    /// Bytes of the tree's tables.
    pub fn disk_bytes(&self) -> u64 {
        self.db.stats().table_bytes
    }

    /// Data blocks the tree has read (cache hits and disk reads).
    pub fn blocks_read(&self) -> u64 {
        let d = self.db.stats().io.data_blocks;
        d.disk + d.cache
    }

    /// Removes every entry (before a rebuild).
    pub fn clear(&self) -> Result<()> {
        let keys: Vec<Vec<u8>> = self
            .db
            .iter(None, None)?
            .map(|kv| kv.map(|(k, _)| k))
            .filter(|k| !k.as_ref().is_ok_and(|k| k.as_slice() == LAYOUT_KEY))
            .collect::<Result<_>>()?;
        let mut b = WriteBatch::new();
        for k in keys
            .iter()
            .filter(|k| !(self.covering && k.as_slice() == SEQ_COVERS_KEY))
        {
            b.delete(k);
            if b.len() >= 1000 {
                self.write(std::mem::take(&mut b))?;
            }
        }
        if self.covering {
            // With the last deletes: nothing left records a primary
            // sequence number, and the rebuild writes covering.
            b.put(SEQ_COVERS_KEY, b"1");
        }
        self.write(b)?;
        for e in &self.extent {
            e.store(0, Relaxed);
        }
        self.seq_covers.store(self.covering, Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_sort_keys_preserve_order_and_delimit() {
        let words = ["", "a", "a\u{0}", "a\u{0}b", "ab", "b"];
        let keys: Vec<Vec<u8>> = words
            .iter()
            .map(|w| sort_key(&IndexValue::Str(w.to_string())))
            .collect();
        for w in keys.windows(2) {
            assert!(w[0] < w[1], "{:?} !< {:?}", w[0], w[1]);
        }
        for k in &keys {
            let mut full = k.clone();
            full.extend_from_slice(b"pk\x00\x00");
            assert_eq!(sort_key_len(KeyType::String, &full).unwrap(), k.len());
        }
        assert!(sort_key_len(KeyType::String, b"abc").is_err());
        assert!(sort_key_len(KeyType::String, b"a\x00\x07").is_err());
        assert!(sort_key_len(KeyType::I64, b"1234567").is_err());
    }

    #[test]
    fn prefix_successor_bounds_prefix() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
    }

    /// Every cell of a window lies in the cover, whatever the budget did.
    #[test]
    fn cover_contains_every_cell_of_the_window() {
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as f64 / (1u64 << 31) as f64
        };
        for _ in 0..200 {
            let (x, y) = (rnd() * 360.0 - 180.0, rnd() * 180.0 - 90.0);
            let (w, h) = (rnd() * rnd() * 10.0, rnd() * rnd() * 10.0);
            let win = [x, y, x + w, y + h];
            let cover = hilbert_cover(&win);
            assert!(!cover.is_empty() && cover.len() <= MAX_COVER_RANGES);
            for _ in 0..50 {
                let px = win[0] + rnd() * (win[2] - win[0]);
                let py = win[1] + rnd() * (win[3] - win[1]);
                let (cx, cy) = cell(px, py);
                let h = super::super::next::table::hilbert(cx, cy);
                assert!(
                    cover.iter().any(|(a, b)| *a <= h && h <= *b),
                    "point ({px}, {py}) of {win:?} not covered"
                );
            }
        }
    }

    #[test]
    fn small_windows_get_tight_covers() {
        let cover = hilbert_cover(&[10.0, 10.0, 10.01, 10.01]);
        let cells: u64 = cover.iter().map(|(a, b)| b - a + 1).sum();
        assert!(cells < 64, "{cells} cells for a 2x2-cell window");
    }
}
