//! Reads a table file.
//!
//! `Table::open` verifies the footer and loads the metaindex, index block,
//! properties and Bloom filter, which stay pinned for the table's lifetime.
//! Data blocks and named meta blocks are fetched on demand by
//! [`Table::read_block`], the single place that touches the file after open:
//! it goes through the block cache for queries, bypasses it for compaction,
//! and records every fetch in the shared [`Counters`].
//!
//! Every block is checksum-verified before it is decoded, and decoders
//! bounds-check everything, so damaged bytes surface as `Error::Corruption`.

#![deny(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::coding::{get_length_prefixed, get_varint64, put_length_prefixed, put_varint64};
use crate::error::{Error, Result};
use crate::io::{Fs, RandomRead, RealFs};
use crate::iter::InternalIterator;
use crate::key::{compare_internal, parse_internal_key, seek_key, SeqNo, ValueKind};
use crate::sstable::block::{bytewise_cmp, Block, BlockIter};
use crate::sstable::block_cache::{BlockCache, CacheKey, Lookup, Priority};
use crate::sstable::builder::{FILTER_BLOCK_NAME, PROPERTIES_BLOCK_NAME, RESERVED_META_PREFIX};
use crate::sstable::filter::BloomFilter;
use crate::sstable::format::{decode_block, verify_block, Footer, BLOCK_TRAILER_LEN, FOOTER_LEN};
use crate::sstable::obsolete::{ObsoleteMap, OBSOLETE_BLOCK_NAME};
use crate::sstable::BlockHandle;
use crate::stats::{BlockKind, Counters, ReadPurpose};

/// Contents of the properties block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableProperties {
    /// Entries (values, tombstones, merge operands).
    pub num_entries: u64,
    /// Of those, tombstones.
    pub num_deletions: u64,
    /// Data blocks.
    pub num_data_blocks: u64,
    /// Smallest sequence number of an entry.
    pub smallest_seq: u64,
    /// Largest sequence number of an entry.
    pub largest_seq: u64,
    /// Smallest and largest internal keys.
    pub smallest_key: Vec<u8>,
    /// Largest internal key (see `smallest_key`).
    pub largest_key: Vec<u8>,
    /// Bytes of internal keys before prefix compression.
    pub raw_key_bytes: u64,
    /// Bytes of values before compression.
    pub raw_value_bytes: u64,
    /// Bytes of data blocks on disk (with trailers).
    pub data_bytes: u64,
    /// Entries between restart points of the data blocks (0: not recorded,
    /// a table written before the field existed).
    #[serde(default)]
    pub data_restart_interval: u64,
}

/// Wire type of a property: the low bit of its tag.
const WIRE_VARINT: u64 = 0;
const WIRE_BYTES: u64 = 1;

// Property field numbers (on disk; never reuse a number).
const P_NUM_ENTRIES: u64 = 1;
const P_NUM_DELETIONS: u64 = 2;
const P_NUM_DATA_BLOCKS: u64 = 3;
const P_SMALLEST_SEQ: u64 = 4;
const P_LARGEST_SEQ: u64 = 5;
const P_SMALLEST_KEY: u64 = 6;
const P_LARGEST_KEY: u64 = 7;
const P_RAW_KEY_BYTES: u64 = 8;
const P_RAW_VALUE_BYTES: u64 = 9;
const P_DATA_BYTES: u64 = 10;
const P_DATA_RESTART_INTERVAL: u64 = 11;

impl TableProperties {
    /// Encodes as a sequence of fields `varint(field << 1 | wire) ‖ payload`,
    /// where wire 0 is a varint64 payload and wire 1 a length-prefixed byte
    /// string. Fields appear in increasing field number.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + self.smallest_key.len() + self.largest_key.len());
        let num = |v: &mut Vec<u8>, f: u64, x: u64| {
            put_varint64(v, f << 1 | WIRE_VARINT);
            put_varint64(v, x);
        };
        let bytes = |v: &mut Vec<u8>, f: u64, b: &[u8]| {
            put_varint64(v, f << 1 | WIRE_BYTES);
            put_length_prefixed(v, b);
        };
        num(&mut v, P_NUM_ENTRIES, self.num_entries);
        num(&mut v, P_NUM_DELETIONS, self.num_deletions);
        num(&mut v, P_NUM_DATA_BLOCKS, self.num_data_blocks);
        num(&mut v, P_SMALLEST_SEQ, self.smallest_seq);
        num(&mut v, P_LARGEST_SEQ, self.largest_seq);
        bytes(&mut v, P_SMALLEST_KEY, &self.smallest_key);
        bytes(&mut v, P_LARGEST_KEY, &self.largest_key);
        num(&mut v, P_RAW_KEY_BYTES, self.raw_key_bytes);
        num(&mut v, P_RAW_VALUE_BYTES, self.raw_value_bytes);
        num(&mut v, P_DATA_BYTES, self.data_bytes);
        num(&mut v, P_DATA_RESTART_INTERVAL, self.data_restart_interval);
        v
    }

    /// Decodes [`TableProperties::encode`]'s output. Unknown fields are
    /// skipped (forward compatibility); missing fields stay zero/empty.
    pub fn decode(mut src: &[u8]) -> Result<TableProperties> {
        let bad = || Error::corruption("table properties block is malformed");
        let mut p = TableProperties::default();
        while !src.is_empty() {
            let tag = get_varint64(&mut src).ok_or_else(bad)?;
            let field = tag >> 1;
            match tag & 1 {
                WIRE_VARINT => {
                    let x = get_varint64(&mut src).ok_or_else(bad)?;
                    match field {
                        P_NUM_ENTRIES => p.num_entries = x,
                        P_NUM_DELETIONS => p.num_deletions = x,
                        P_NUM_DATA_BLOCKS => p.num_data_blocks = x,
                        P_SMALLEST_SEQ => p.smallest_seq = x,
                        P_LARGEST_SEQ => p.largest_seq = x,
                        P_RAW_KEY_BYTES => p.raw_key_bytes = x,
                        P_RAW_VALUE_BYTES => p.raw_value_bytes = x,
                        P_DATA_BYTES => p.data_bytes = x,
                        P_DATA_RESTART_INTERVAL => p.data_restart_interval = x,
                        P_SMALLEST_KEY | P_LARGEST_KEY => return Err(bad()),
                        _ => {}
                    }
                }
                _ => {
                    let b = get_length_prefixed(&mut src).ok_or_else(bad)?;
                    match field {
                        P_SMALLEST_KEY => p.smallest_key = b.to_vec(),
                        P_LARGEST_KEY => p.largest_key = b.to_vec(),
                        P_NUM_ENTRIES..=P_DATA_RESTART_INTERVAL => return Err(bad()),
                        _ => {}
                    }
                }
            }
        }
        Ok(p)
    }
}

/// What a table holds for a user key at a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Sequence number of the entry.
    pub seq: SeqNo,
    /// Its kind (value, tombstone or merge operand).
    pub kind: ValueKind,
    /// Its value (empty for a tombstone).
    pub value: Vec<u8>,
}

/// Shared reader state.
#[derive(Clone)]
pub struct TableReadOptions {
    /// Cache for data and index blocks; `None`: every read goes to disk.
    pub block_cache: Option<Arc<BlockCache>>,
    /// Where block reads are counted.
    pub counters: Arc<Counters>,
    /// Read with `O_DIRECT` where the file system allows it.
    pub direct_io: bool,
    /// Read through a memory mapping ([`crate::Options::mmap_reads`]).
    pub mmap_reads: bool,
    /// Where tables are read from.
    pub fs: Arc<dyn Fs>,
}

impl TableReadOptions {
    /// Buffered reads of the real file system, without a block cache.
    pub fn uncached() -> TableReadOptions {
        TableReadOptions {
            block_cache: None,
            counters: Arc::default(),
            direct_io: false,
            mmap_reads: false,
            fs: Arc::new(RealFs),
        }
    }
}

/// A meta block of one table, by position in its metaindex
/// ([`Table::meta_block_id`]); valid for that table's file only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaBlockId(usize);

/// A meta block's payload, borrowed from its (cached) block.
///
/// Invariant: `range` lies within the block's contents (checked by
/// [`Table::read_meta_block`]).
pub struct MetaBlock {
    block: Arc<Block>,
    range: std::ops::Range<usize>,
}

impl MetaBlock {
    /// The payload bytes.
    pub fn bytes(&self) -> &[u8] {
        self.block.slice(self.range.clone()).unwrap_or(&[])
    }
}

/// An open table. Index block, filter, properties and metaindex are loaded
/// at open and pinned; data and named meta blocks are read on demand.
pub struct Table {
    path: PathBuf,
    file: Box<dyn RandomRead>,
    file_number: u64,
    /// Offset where the footer starts: every block must end at or before it.
    blocks_end: u64,
    opts: TableReadOptions,
    index: Arc<Block>,
    filter: Option<BloomFilter>,
    props: TableProperties,
    /// Metaindex entries, sorted bytewise by name.
    meta: Vec<(String, BlockHandle)>,
    /// Entries every read skips (`sstable::obsolete`); loaded at open.
    obsolete: Option<ObsoleteMap>,
}

/// Index entries a batched lookup steps over, for a target past the
/// cursor's block, before it seeks instead (a step parses one entry; a
/// seek binary-searches the whole index); only when there are at least
/// one request per `INDEX_STEPS` data blocks.
const INDEX_STEPS: usize = 8;

/// What a batched table lookup did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupCounts {
    /// Bloom filter probes (one per request when the table has a filter).
    pub bloom_probes: u64,
    /// Data blocks fetched (block cache hits and disk reads).
    pub data_blocks: u64,
}

/// Outcome of searching one data block for a key.
enum BlockSearch {
    Found(Found),
    /// The block holds a larger key: the table does not have the key.
    Absent,
    /// Every key in the block is smaller: continue with the next block.
    Exhausted,
}

impl Table {
    /// Opens table `file_number` of `file_size` bytes at `path`: reads and
    /// verifies the footer, metaindex, index, filter and properties.
    /// Errors: I/O, or `Error::Corruption` naming the table if any of them is
    /// malformed or fails its checksum.
    pub fn open(
        path: &Path,
        file_number: u64,
        file_size: u64,
        opts: TableReadOptions,
    ) -> Result<Table> {
        let name = path.display().to_string();
        if file_size < FOOTER_LEN as u64 {
            return Err(Error::corruption_at(
                path,
                None,
                format!("a table of at least {FOOTER_LEN} bytes (a footer), found {file_size}"),
            ));
        }
        let file = if opts.mmap_reads && !opts.direct_io {
            opts.fs.open_mapped(path)?
        } else {
            opts.fs.open_random(path, opts.direct_io)?
        };
        let blocks_end = file_size - FOOTER_LEN as u64;
        let footer = Footer::decode(&file.read_at(blocks_end, FOOTER_LEN)?, &name)?;
        let mut table = Table {
            path: path.to_path_buf(),
            file,
            file_number,
            blocks_end,
            opts,
            index: Arc::new(Block::new(vec![0, 0, 0, 0, 1, 0, 0, 0])?),
            filter: None,
            props: TableProperties::default(),
            meta: Vec::new(),
            obsolete: None,
        };

        let metaindex = Arc::new(table.load_pinned(footer.metaindex, BlockKind::Meta)?);
        table.meta = table.decode_metaindex(&metaindex)?;
        // Index keys are internal keys: the fences skip their 8-byte
        // trailer (sequence number and kind).
        let index = table.load_pinned(footer.index, BlockKind::Index)?;
        table.index = Arc::new(index.with_fences(8).map_err(|e| table.wrap(e))?);

        let props_handle = table
            .meta_handle(PROPERTIES_BLOCK_NAME)
            .ok_or_else(|| table.corrupt("properties block is missing"))?;
        let props = table.read_contents(props_handle, BlockKind::Meta, ReadPurpose::Query)?;
        table.props = TableProperties::decode(&props).map_err(|e| table.wrap(e))?;

        if let Some(h) = table.meta_handle(FILTER_BLOCK_NAME) {
            let bytes = table.read_contents(h, BlockKind::Filter, ReadPurpose::Query)?;
            table.filter = Some(BloomFilter::from_bytes(bytes).map_err(|e| table.wrap(e))?);
        }
        if let Some(h) = table.meta_handle(OBSOLETE_BLOCK_NAME) {
            let bytes = table.read_contents(h, BlockKind::Meta, ReadPurpose::Query)?;
            table.obsolete = Some(ObsoleteMap::decode(&bytes).map_err(|e| table.wrap(e))?);
        }
        Ok(table)
    }

    /// The table's file number.
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// The properties block, decoded at open.
    pub fn properties(&self) -> &TableProperties {
        &self.props
    }

    /// Number of entries marked obsolete by the table's bitmap (reads skip
    /// them; see `sstable::obsolete`).
    pub fn obsolete_entries(&self) -> u64 {
        self.obsolete.as_ref().map_or(0, |m| m.marked())
    }

    /// A cursor over data block `block` read from `handle`, skipping the
    /// entries the table's obsolete bitmap marks.
    fn data_iter(&self, handle: BlockHandle, block: &Arc<Block>) -> BlockIter {
        let marks = self.obsolete.as_ref().and_then(|m| m.block(handle.offset));
        block.iter(compare_internal).with_marks(marks)
    }

    /// Bloom probe; counts a probe and, if false, a negative.
    pub fn key_may_match(&self, user_key: &[u8]) -> bool {
        self.key_hash_may_match(crate::sstable::filter::hash64(user_key))
    }

    /// [`Table::key_may_match`] for a key already hashed with
    /// [`crate::sstable::filter::hash64`].
    pub fn key_hash_may_match(&self, h: u64) -> bool {
        let Some(f) = &self.filter else {
            return true;
        };
        Counters::add(&self.opts.counters.bloom_probes, 1);
        let r = f.may_contain_hash(h);
        if !r {
            Counters::add(&self.opts.counters.bloom_negatives, 1);
        }
        r
    }

    /// Asks for the filter line that [`Table::key_hash_may_match`]`(h)`
    /// will test, without waiting for it (a hint: nothing changes).
    pub fn prefetch_key_hash(&self, h: u64) {
        if let Some(f) = &self.filter {
            f.prefetch_hash(h);
        }
    }

    /// Newest entry for `user_key` with `seq <= snapshot`, Bloom first.
    pub fn get(&self, user_key: &[u8], snapshot: SeqNo) -> Result<Option<Found>> {
        self.get_entry(user_key, snapshot, true)
    }

    /// [`Table::get`], with the value left empty unless `want_value`
    /// (a caller that needs only the entry's sequence number and kind
    /// copies no record).
    pub fn get_entry(
        &self,
        user_key: &[u8],
        snapshot: SeqNo,
        want_value: bool,
    ) -> Result<Option<Found>> {
        if !self.key_may_match(user_key) {
            return Ok(None);
        }
        let target = seek_key(user_key, snapshot);
        let mut index = self.index.iter(compare_internal);
        index.seek(&target).map_err(|e| self.wrap(e))?;
        self.search_from(&mut index, &target, user_key, snapshot, want_value)
    }

    /// Batched lookup. `keys` sorted ascending and distinct; `out[i]` is set
    /// for each key found here (left untouched otherwise). Probes the Bloom
    /// filter for every key, then reads each needed data block once.
    pub fn multi_get(
        &self,
        keys: &[&[u8]],
        snapshot: SeqNo,
        out: &mut [Option<Found>],
    ) -> Result<()> {
        if out.len() < keys.len() {
            return Err(Error::invalid(format!(
                "multi_get: {} output slots for {} keys",
                out.len(),
                keys.len()
            )));
        }
        self.lookup_sorted(keys.iter().map(|&k| (k, snapshot)), out)?;
        Ok(())
    }

    /// Batched lookup of one version per request: `out[i]` is set to what
    /// `get(reqs[i].0, reqs[i].1)` returns, the newest entry of that key
    /// with a sequence number at most `reqs[i].1` (left untouched if the
    /// table has none). A caller wanting the exact version `(key, seq)`
    /// compares the returned sequence number with `seq`. Requests in
    /// internal-key order (key ascending, sequence number descending) read
    /// each needed data block once; any order gives the same results.
    /// Returns what the lookup did (Bloom probes, data blocks fetched).
    pub fn multi_get_versions(
        &self,
        reqs: &[(&[u8], SeqNo)],
        out: &mut [Option<Found>],
    ) -> Result<LookupCounts> {
        if out.len() < reqs.len() {
            return Err(Error::invalid(format!(
                "multi_get_versions: {} output slots for {} requests",
                out.len(),
                reqs.len()
            )));
        }
        self.lookup_sorted(reqs.iter().copied(), out)
    }

    /// The block walker behind [`Table::multi_get`] and
    /// [`Table::multi_get_versions`]: for each `(key, snapshot)` (zipped
    /// with `out`), the Bloom probe, then the newest entry of `key` at or
    /// below `snapshot`. One index cursor and the last data block read are
    /// kept across requests, so ascending requests that fall in one block
    /// locate and fetch it once.
    fn lookup_sorted<'k>(
        &self,
        reqs: impl Iterator<Item = (&'k [u8], SeqNo)>,
        out: &mut [Option<Found>],
    ) -> Result<LookupCounts> {
        let mut counts = LookupCounts::default();
        // Step the index only if requests are dense enough for the next
        // target to be a few blocks on, on average.
        let steps = if (reqs.size_hint().0 as u64).saturating_mul(INDEX_STEPS as u64)
            >= self.props.num_data_blocks
        {
            INDEX_STEPS
        } else {
            0
        };
        let mut index = self.index.iter(compare_internal);
        // The data block under the index cursor, once read.
        let mut current: Option<(BlockHandle, Arc<Block>)> = None;
        // Invariant: every data entry in the blocks before the index
        // cursor's is smaller than `last`, the last target searched (a seek
        // stops at the first block whose separator, an upper bound of its
        // entries, is at least the target; a block is stepped over only
        // when all its entries are smaller than the target). So a target
        // at least `last` and at most the cursor's separator lies in the
        // cursor's block, exactly where a seek would go; and a target
        // above the cursor's separator lies in a later block.
        let mut last: Option<Vec<u8>> = None;
        for ((user_key, snapshot), slot) in reqs.zip(out.iter_mut()) {
            if self.filter.is_some() {
                counts.bloom_probes += 1;
            }
            if !self.key_may_match(user_key) {
                continue;
            }
            let target = seek_key(user_key, snapshot);
            let ascending = last
                .as_deref()
                .is_some_and(|l| compare_internal(l, &target).is_le());
            let mut positioned =
                ascending && index.valid() && compare_internal(&target, index.key()).is_le();
            if ascending && !positioned {
                // The target is past the cursor's block: step the index
                // forward a few entries (each passed over has a separator
                // below the target, so the invariant holds) before paying
                // for a binary-search seek of the whole index.
                for _ in 0..steps {
                    if !index.valid() {
                        break;
                    }
                    index.next().map_err(|e| self.wrap(e))?;
                    if index.valid() && compare_internal(&target, index.key()).is_le() {
                        positioned = true;
                        break;
                    }
                }
            }
            if !positioned {
                index.seek(&target).map_err(|e| self.wrap(e))?;
            }
            while index.valid() {
                let handle = self.index_handle(&index)?;
                let block = match &current {
                    Some((h, b)) if *h == handle => Arc::clone(b),
                    _ => {
                        let b = self.read_block(handle, BlockKind::Data, ReadPurpose::Query)?;
                        counts.data_blocks += 1;
                        current = Some((handle, Arc::clone(&b)));
                        b
                    }
                };
                match self.search_block(handle, &block, &target, user_key, snapshot, true)? {
                    BlockSearch::Found(f) => {
                        *slot = Some(f);
                        break;
                    }
                    BlockSearch::Absent => break,
                    BlockSearch::Exhausted => index.next().map_err(|e| self.wrap(e))?,
                }
            }
            last = Some(target);
        }
        Ok(counts)
    }

    /// A cursor over every entry in internal-key order; block reads are
    /// counted under `purpose`.
    pub fn iter(self: &Arc<Self>, purpose: ReadPurpose) -> TableIter {
        TableIter {
            index: self.index.iter(compare_internal),
            table: Arc::clone(self),
            purpose,
            data: None,
            data_handle: None,
        }
    }

    /// Reads, verifies and decodes a block; the only place blocks are fetched
    /// (through the block cache for queries), so the counters stay exact.
    pub fn read_block(
        &self,
        handle: BlockHandle,
        kind: BlockKind,
        purpose: ReadPurpose,
    ) -> Result<Arc<Block>> {
        let cache = match purpose {
            ReadPurpose::Query => self.opts.block_cache.as_ref(),
            ReadPurpose::Compaction => None,
        };
        let key = CacheKey {
            file_number: self.file_number,
            offset: handle.offset,
        };
        // Meta blocks (the strategies' secondary blocks) index data blocks
        // and are read by many queries: high priority (see `Priority`).
        let priority = match kind {
            BlockKind::Meta => Priority::High,
            _ => Priority::Low,
        };
        // The cache to insert the block into once read: the doorkeeper
        // may decline a miss.
        let fill = match cache.map(|c| (c, c.lookup(&key, priority))) {
            Some((_, Lookup::Hit(b))) => {
                self.opts.counters.record_block_read(kind, true, 0);
                return Ok(b);
            }
            Some((c, Lookup::Miss { admit: true })) => Some(c),
            _ => None,
        };
        let contents = self.read_contents(handle, kind, purpose)?;
        let block = Arc::new(Block::new(contents).map_err(|e| self.wrap(e))?);
        if let Some(c) = fill {
            c.insert(key, Arc::clone(&block), priority);
        }
        Ok(block)
    }

    /// The data block holding exactly the entry `(user_key, seq)`, or
    /// `None` if this table does not hold it. Measurement API: the Bloom
    /// probe, the index seek and the data block read that confirms the entry
    /// bypass the block cache and the read counters.
    pub fn locate(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<BlockHandle>> {
        if self
            .filter
            .as_ref()
            .is_some_and(|f| !f.may_contain(user_key))
        {
            return Ok(None);
        }
        let target = seek_key(user_key, seq);
        let mut index = self.index.iter(compare_internal);
        index.seek(&target).map_err(|e| self.wrap(e))?;
        if !index.valid() {
            return Ok(None);
        }
        let handle = self.index_handle(&index)?;
        let raw = self.read_raw(handle)?;
        let contents = decode_block(raw, handle)
            .map_err(|e| e.with_location(&self.path, Some(handle.offset)))?;
        let block = Arc::new(Block::new(contents).map_err(|e| self.wrap(e))?);
        let mut it = self.data_iter(handle, &block);
        it.seek(&target).map_err(|e| self.wrap(e))?;
        if !it.valid() {
            return Ok(None);
        }
        let p = parse_internal_key(it.key()).map_err(|e| self.wrap(e))?;
        Ok((p.user_key == user_key && p.seq == seq).then_some(handle))
    }

    /// Reads the block at `handle` with one positional read and verifies
    /// its checksum, without decompressing or decoding it, bypassing the
    /// block cache and the read counters: the physical minimum cost of a
    /// block read, which benchmarks report latencies against. Returns the
    /// bytes read (contents and trailer).
    pub fn read_block_verified(&self, handle: BlockHandle) -> Result<u64> {
        let raw = self.read_raw(handle)?;
        let n = raw.len() as u64;
        let r = verify_block(&raw, handle);
        crate::io::recycle(raw);
        r.map_err(|e| e.with_location(&self.path, Some(handle.offset)))?;
        Ok(n)
    }

    /// Checks that `handle` lies within the blocks area and reads its
    /// contents and trailer.
    fn read_raw(&self, handle: BlockHandle) -> Result<Vec<u8>> {
        let total = handle
            .size
            .checked_add(BLOCK_TRAILER_LEN as u64)
            .filter(|t| {
                handle
                    .offset
                    .checked_add(*t)
                    .is_some_and(|end| end <= self.blocks_end)
            })
            .ok_or_else(|| {
                self.corrupt(&format!(
                    "block handle (offset {}, size {}) points outside the file",
                    handle.offset, handle.size
                ))
            })?;
        let len = usize::try_from(total)
            .map_err(|_| self.corrupt("block is larger than the address space"))?;
        self.file.read_at(handle.offset, len)
    }

    /// Decodes the data block at `handle` into (user key, seq, kind, value).
    #[allow(clippy::type_complexity)]
    pub fn read_data_block_entries(
        &self,
        handle: BlockHandle,
    ) -> Result<Vec<(Vec<u8>, SeqNo, ValueKind, Vec<u8>)>> {
        let mut out = Vec::new();
        self.for_each_data_block_entry(handle, |k, seq, kind, v| {
            out.push((k.to_vec(), seq, kind, v.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f(user_key, seq, kind, value)` for each entry of the data
    /// block at `handle`, in order, read through the block cache (counted
    /// as a query read; obsolete-marked entries skipped), borrowed from the
    /// block ([`Table::read_data_block_entries`] collects copies).
    /// Stops at the first error of `f` and returns it.
    pub fn for_each_data_block_entry(
        &self,
        handle: BlockHandle,
        mut f: impl FnMut(&[u8], SeqNo, ValueKind, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let block = self.read_block(handle, BlockKind::Data, ReadPurpose::Query)?;
        let mut it = self.data_iter(handle, &block);
        it.seek_to_first().map_err(|e| self.wrap(e))?;
        while it.valid() {
            let p = parse_internal_key(it.key()).map_err(|e| self.wrap(e))?;
            f(p.user_key, p.seq, p.kind, it.value())?;
            it.next().map_err(|e| self.wrap(e))?;
        }
        Ok(())
    }

    /// The data block at `handle`, read like every query read (through the
    /// block cache, counted), for [`Table::visit_data_block_entries`].
    pub fn read_data_block(&self, handle: BlockHandle) -> Result<Arc<Block>> {
        self.read_block(handle, BlockKind::Data, ReadPurpose::Query)
    }

    /// Calls `f(ordinal, user_key, seq, kind, value)` for each entry of the
    /// data block `block` (this table's block at `handle`, from
    /// [`Table::read_data_block`]) whose ordinal is in `ordinals`
    /// (ascending; duplicates visit once). An entry's ordinal counts every
    /// entry stored in the block from 0, as delivered to
    /// `TableObserver::on_entry`. The slices borrow the block (nothing is
    /// copied); entries before an ordinal are only parsed, entries after
    /// the last are not touched. Entries the table's obsolete bitmap marks
    /// are skipped, as every read skips them. A corruption error if an
    /// ordinal lies past the block's last entry.
    pub fn visit_data_block_entries(
        &self,
        handle: BlockHandle,
        block: &Arc<Block>,
        ordinals: impl IntoIterator<Item = u32>,
        mut f: impl FnMut(u32, &[u8], SeqNo, ValueKind, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let marks = self.obsolete.as_ref().and_then(|m| m.block(handle.offset));
        // Blocks restart exactly every `interval` entries (0: not recorded,
        // walked from the first entry).
        let interval = usize::try_from(self.props.data_restart_interval).unwrap_or(0);
        // Errors of `f` pass through as they are; the walk's own name this
        // table.
        let mut from_f = false;
        block
            .visit_ordinals(interval, ordinals, |want, key, value| {
                if marks.as_ref().is_some_and(|m| m.is_marked(want as usize)) {
                    return Ok(());
                }
                let p = parse_internal_key(key)?;
                let r = f(want, p.user_key, p.seq, p.kind, value);
                from_f = r.is_err();
                r
            })
            .map_err(|e| if from_f { e } else { self.wrap(e) })
    }

    /// Calls `f(user_key, seq, kind, value, marked)` for every entry stored
    /// in the data block at `handle`, in order (an entry's position in the
    /// calls is its ordinal, as delivered to `TableObserver::on_entry`);
    /// `marked` is true for entries the obsolete bitmap marks. The block is
    /// read like a compaction reads it: not through the block cache. For
    /// extensions that build per-table structures of an existing table.
    pub fn visit_all_data_entries(
        &self,
        handle: BlockHandle,
        mut f: impl FnMut(&[u8], SeqNo, ValueKind, &[u8], bool),
    ) -> Result<()> {
        let block = self.read_block(handle, BlockKind::Data, ReadPurpose::Compaction)?;
        let marks = self.obsolete.as_ref().and_then(|m| m.block(handle.offset));
        let mut it = block.iter(compare_internal);
        it.seek_to_first().map_err(|e| self.wrap(e))?;
        let mut at = 0usize;
        while it.valid() {
            let p = parse_internal_key(it.key()).map_err(|e| self.wrap(e))?;
            let marked = marks.as_ref().is_some_and(|m| m.is_marked(at));
            f(p.user_key, p.seq, p.kind, it.value(), marked);
            at += 1;
            it.next().map_err(|e| self.wrap(e))?;
        }
        Ok(())
    }

    /// Handles of all data blocks, in key order.
    pub fn data_block_handles(&self) -> Result<Vec<BlockHandle>> {
        let mut it = self.index.iter(compare_internal);
        let mut out = Vec::new();
        it.seek_to_first().map_err(|e| self.wrap(e))?;
        while it.valid() {
            out.push(self.index_handle(&it)?);
            it.next().map_err(|e| self.wrap(e))?;
        }
        Ok(out)
    }

    /// The named meta block added by an observer, read on demand (counted
    /// as a meta block read). `None` if the table has no block of that name.
    /// The engine's own `strata.*` blocks are not readable here.
    pub fn meta_block(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.meta_block_for(name, ReadPurpose::Query)
    }

    /// [`Table::meta_block`] read for `purpose` (see
    /// [`Table::read_meta_block_for`]).
    pub fn meta_block_for(&self, name: &str, purpose: ReadPurpose) -> Result<Option<Vec<u8>>> {
        Ok(match self.meta_block_id(name) {
            Some(id) => Some(self.read_meta_block_for(id, purpose)?.bytes().to_vec()),
            None => None,
        })
    }

    /// The id of a named meta block of the observers (`None` if absent or
    /// reserved), for [`Table::read_meta_block`]: resolving a name once
    /// keeps formatting and searching names off repeated reads.
    pub fn meta_block_id(&self, name: &str) -> Option<MetaBlockId> {
        if name.starts_with(RESERVED_META_PREFIX) {
            return None;
        }
        self.meta_position(name).map(MetaBlockId)
    }

    /// The meta blocks whose names start with `prefix`, in name order, each
    /// with the rest of its name: resolving a family of names (NEXT's
    /// `next.<id>.<n>` secondary blocks) in one pass over the sorted
    /// metaindex instead of one search per name. Empty for a reserved
    /// prefix.
    pub fn meta_blocks_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, MetaBlockId)> + 'a {
        let start = if prefix.starts_with(RESERVED_META_PREFIX) {
            self.meta.len()
        } else {
            self.meta.partition_point(|(n, _)| n.as_str() < prefix)
        };
        self.meta
            .get(start..)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map_while(move |(i, (n, _))| {
                n.strip_prefix(prefix)
                    .map(|rest| (rest, MetaBlockId(start + i)))
            })
    }

    /// The meta block `id` of this table, read through the block cache (a
    /// query read) and borrowed from the cached block: no copy. Checks that
    /// the block holds exactly its name's one entry.
    pub fn read_meta_block(&self, id: MetaBlockId) -> Result<MetaBlock> {
        self.read_meta_block_for(id, ReadPurpose::Query)
    }

    /// [`Table::read_meta_block`] for `purpose`: a
    /// [`ReadPurpose::Compaction`] read (a compaction taking its inputs'
    /// index blocks) neither looks in nor fills the block cache and counts
    /// as compaction input, not as a query's meta block read.
    pub fn read_meta_block_for(&self, id: MetaBlockId, purpose: ReadPurpose) -> Result<MetaBlock> {
        let (name, handle) = self
            .meta
            .get(id.0)
            .ok_or_else(|| self.corrupt(&format!("no meta block {}", id.0)))?;
        let block = self.read_block(*handle, BlockKind::Meta, purpose)?;
        self.meta_value(name, block)
    }

    /// The value of meta block `id`, read from the file and verified like
    /// [`Table::read_meta_block`]'s, without looking in or filling the
    /// block cache (counted as a query read, like the blocks a table pins
    /// at open): for a strategy that keeps a table's blocks in memory for
    /// the table's lifetime.
    pub fn load_meta_block(&self, id: MetaBlockId) -> Result<Vec<u8>> {
        let (name, handle) = self
            .meta
            .get(id.0)
            .ok_or_else(|| self.corrupt(&format!("no meta block {}", id.0)))?;
        let block = Arc::new(self.load_pinned(*handle, BlockKind::Meta)?);
        Ok(self.meta_value(name, block)?.bytes().to_vec())
    }

    /// `block`, meta block `name`, checked to hold exactly one entry keyed
    /// by its name; its value.
    fn meta_value(&self, name: &str, block: Arc<Block>) -> Result<MetaBlock> {
        let mut it = block.iter(bytewise_cmp);
        it.seek_to_first().map_err(|e| self.wrap(e))?;
        if !it.valid() || it.key() != name.as_bytes() {
            return Err(self.corrupt(&format!("meta block {name:?} does not hold its name")));
        }
        let range = it.value_range();
        it.next().map_err(|e| self.wrap(e))?;
        if it.valid() {
            return Err(self.corrupt(&format!("meta block {name:?} has extra entries")));
        }
        if block.slice(range.clone()).is_none() {
            return Err(self.corrupt(&format!("meta block {name:?} value out of bounds")));
        }
        Ok(MetaBlock { block, range })
    }

    /// On-disk size (without trailer) of a named meta block, if present.
    pub fn meta_block_size(&self, name: &str) -> Option<u64> {
        if name.starts_with(RESERVED_META_PREFIX) {
            return None;
        }
        self.meta_handle(name).map(|h| h.size)
    }

    /// Names of the observers' meta blocks, sorted bytewise.
    pub fn meta_block_names(&self) -> Vec<String> {
        self.meta
            .iter()
            .filter(|(n, _)| !n.starts_with(RESERVED_META_PREFIX))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// True if the table carries a Bloom filter.
    pub fn has_filter(&self) -> bool {
        self.filter.is_some()
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::corruption_at(&self.path, None, what)
    }

    /// Names this table in a corruption that lacks its file.
    fn wrap(&self, e: Error) -> Error {
        e.with_location(&self.path, None)
    }

    /// Position of `name` in the metaindex (sorted by name).
    fn meta_position(&self, name: &str) -> Option<usize> {
        self.meta
            .binary_search_by(|(n, _)| n.as_bytes().cmp(name.as_bytes()))
            .ok()
    }

    fn meta_handle(&self, name: &str) -> Option<BlockHandle> {
        self.meta_position(name)
            .and_then(|i| self.meta.get(i))
            .map(|&(_, h)| h)
    }

    fn index_handle(&self, it: &BlockIter) -> Result<BlockHandle> {
        BlockHandle::decode_exact(it.value()).map_err(|e| self.wrap(e))
    }

    /// Reads a block from disk, counts it, verifies and decompresses it.
    /// Query reads are recorded as disk reads of `kind`; compaction reads
    /// only add to `compaction_bytes_read`.
    fn read_contents(
        &self,
        handle: BlockHandle,
        kind: BlockKind,
        purpose: ReadPurpose,
    ) -> Result<Vec<u8>> {
        let raw = self.read_raw(handle)?;
        let total = raw.len() as u64;
        match purpose {
            ReadPurpose::Query => self.opts.counters.record_block_read(kind, false, total),
            ReadPurpose::Compaction => {
                Counters::add(&self.opts.counters.compaction_bytes_read, total)
            }
        }
        decode_block(raw, handle).map_err(|e| e.with_location(&self.path, Some(handle.offset)))
    }

    /// Reads a block that is pinned for the table's lifetime (not cached).
    fn load_pinned(&self, handle: BlockHandle, kind: BlockKind) -> Result<Block> {
        let contents = self.read_contents(handle, kind, ReadPurpose::Query)?;
        Block::new(contents).map_err(|e| self.wrap(e))
    }

    fn decode_metaindex(&self, block: &Arc<Block>) -> Result<Vec<(String, BlockHandle)>> {
        let mut out: Vec<(String, BlockHandle)> = Vec::new();
        let mut it = block.iter(bytewise_cmp);
        it.seek_to_first().map_err(|e| self.wrap(e))?;
        while it.valid() {
            let name = std::str::from_utf8(it.key())
                .map_err(|_| self.corrupt("metaindex name is not UTF-8"))?
                .to_string();
            if out
                .last()
                .is_some_and(|(p, _)| p.as_bytes() >= name.as_bytes())
            {
                return Err(self.corrupt("metaindex names are not sorted"));
            }
            let h = BlockHandle::decode_exact(it.value()).map_err(|e| self.wrap(e))?;
            out.push((name, h));
            it.next().map_err(|e| self.wrap(e))?;
        }
        Ok(out)
    }

    /// Looks in the data block at `index`'s position, then in following
    /// blocks while every key there is smaller than `target`.
    fn search_from(
        &self,
        index: &mut BlockIter,
        target: &[u8],
        user_key: &[u8],
        snapshot: SeqNo,
        want_value: bool,
    ) -> Result<Option<Found>> {
        while index.valid() {
            let handle = self.index_handle(index)?;
            let block = self.read_block(handle, BlockKind::Data, ReadPurpose::Query)?;
            match self.search_block(handle, &block, target, user_key, snapshot, want_value)? {
                BlockSearch::Found(f) => return Ok(Some(f)),
                BlockSearch::Absent => return Ok(None),
                BlockSearch::Exhausted => index.next().map_err(|e| self.wrap(e))?,
            }
        }
        Ok(None)
    }

    fn search_block(
        &self,
        handle: BlockHandle,
        block: &Arc<Block>,
        target: &[u8],
        user_key: &[u8],
        snapshot: SeqNo,
        want_value: bool,
    ) -> Result<BlockSearch> {
        let mut it = self.data_iter(handle, block);
        it.seek(target).map_err(|e| self.wrap(e))?;
        if !it.valid() {
            return Ok(BlockSearch::Exhausted);
        }
        let p = parse_internal_key(it.key()).map_err(|e| self.wrap(e))?;
        if p.user_key != user_key || p.seq > snapshot {
            return Ok(BlockSearch::Absent);
        }
        Ok(BlockSearch::Found(Found {
            seq: p.seq,
            kind: p.kind,
            value: if want_value {
                it.value().to_vec()
            } else {
                Vec::new()
            },
        }))
    }
}

/// Two-level iterator: index block → data blocks.
///
/// Invariant: when valid, `data` is positioned on an entry of the block the
/// index iterator points at. Any error drops `data`, leaving it invalid.
pub struct TableIter {
    table: Arc<Table>,
    purpose: ReadPurpose,
    index: BlockIter,
    data: Option<BlockIter>,
    data_handle: Option<BlockHandle>,
}

impl TableIter {
    fn guard(&mut self, r: Result<()>) -> Result<()> {
        if let Err(e) = r {
            self.data = None;
            self.data_handle = None;
            return Err(self.table.wrap(e));
        }
        Ok(())
    }

    /// Points `data` at the block under the index cursor (unpositioned),
    /// reusing the current block if it is the same one.
    fn load_data_block(&mut self) -> Result<()> {
        if !self.index.valid() {
            self.data = None;
            self.data_handle = None;
            return Ok(());
        }
        let handle = BlockHandle::decode_exact(self.index.value())?;
        if self.data.is_some() && self.data_handle == Some(handle) {
            return Ok(());
        }
        let block = self
            .table
            .read_block(handle, BlockKind::Data, self.purpose)?;
        self.data = Some(self.table.data_iter(handle, &block));
        self.data_handle = Some(handle);
        Ok(())
    }

    /// Moves forward over exhausted data blocks.
    fn skip_exhausted_blocks(&mut self) -> Result<()> {
        while !self.data.as_ref().is_some_and(|d| d.valid()) {
            if !self.index.valid() {
                self.data = None;
                return Ok(());
            }
            self.index.next()?;
            self.load_data_block()?;
            if let Some(d) = &mut self.data {
                d.seek_to_first()?;
            }
        }
        Ok(())
    }

    fn do_seek_to_first(&mut self) -> Result<()> {
        self.index.seek_to_first()?;
        self.load_data_block()?;
        if let Some(d) = &mut self.data {
            d.seek_to_first()?;
        }
        self.skip_exhausted_blocks()
    }

    fn do_seek(&mut self, target: &[u8]) -> Result<()> {
        self.index.seek(target)?;
        self.load_data_block()?;
        if let Some(d) = &mut self.data {
            d.seek(target)?;
        }
        self.skip_exhausted_blocks()
    }

    fn do_next(&mut self) -> Result<()> {
        match &mut self.data {
            Some(d) if d.valid() => d.next()?,
            _ => return Ok(()),
        }
        self.skip_exhausted_blocks()
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let r = self.do_seek_to_first();
        self.guard(r)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let r = self.do_seek(target);
        self.guard(r)
    }
    fn next(&mut self) -> Result<()> {
        let r = self.do_next();
        self.guard(r)
    }
    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[][..], |d| d.key())
    }
    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[][..], |d| d.value())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use super::*;
    use crate::cache::TableCache;
    use crate::key::{make_internal_key, MAX_SEQ};
    use crate::sstable::builder::{TableBuildOptions, TableBuilder};
    use crate::sstable::observer::{EntryRef, TableObserver};
    use crate::sstable::Compression;
    use crate::stats::IoStats;

    type Entry = (Vec<u8>, Vec<u8>);

    /// Internal entries for `n` user keys with 1–4 versions each (some
    /// deletions), sorted by internal key. Sequence numbers are distinct.
    fn dataset(n: usize) -> Vec<Entry> {
        let mut seq = 1u64;
        let mut out = Vec::new();
        for i in 0..n {
            let user = format!("user{:05}", i * 2);
            let versions = 1 + (i * 7 % 4);
            let mut vs = Vec::new();
            for v in 0..versions {
                let kind = if (i + v) % 5 == 0 {
                    ValueKind::Deletion
                } else {
                    ValueKind::Value
                };
                let value = if kind == ValueKind::Value {
                    format!("val-{i}-{v}-{}", "p".repeat(i % 13)).into_bytes()
                } else {
                    Vec::new()
                };
                vs.push((make_internal_key(user.as_bytes(), seq, kind), value));
                seq += 3;
            }
            vs.reverse(); // newest first
            out.extend(vs);
        }
        out
    }

    fn opts(compression: Compression, bloom: usize) -> TableBuildOptions {
        TableBuildOptions::new(256, 4, compression, bloom)
    }

    fn read_opts(cache: Option<Arc<BlockCache>>) -> TableReadOptions {
        TableReadOptions {
            block_cache: cache,
            ..TableReadOptions::uncached()
        }
    }

    fn build(
        path: &Path,
        entries: &[Entry],
        o: TableBuildOptions,
        observers: Vec<Box<dyn TableObserver>>,
    ) -> u64 {
        let mut b = TableBuilder::new(path, o, observers).unwrap();
        for (k, v) in entries {
            b.add(k, v).unwrap();
        }
        let est = b.file_size();
        let built = b.finish().unwrap();
        assert!(built.file_size >= est);
        assert_eq!(built.file_size, std::fs::metadata(path).unwrap().len());
        built.file_size
    }

    /// The model answer to `get(user, snapshot)`.
    fn model_get(entries: &[Entry], user: &[u8], snapshot: SeqNo) -> Option<Found> {
        entries.iter().find_map(|(k, v)| {
            let p = parse_internal_key(k).unwrap();
            (p.user_key == user && p.seq <= snapshot).then(|| Found {
                seq: p.seq,
                kind: p.kind,
                value: v.clone(),
            })
        })
    }

    fn scan(t: &Arc<Table>, purpose: ReadPurpose) -> Result<Vec<Entry>> {
        let mut it = t.iter(purpose);
        it.seek_to_first()?;
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next()?;
        }
        Ok(out)
    }

    fn stats(t: &Table) -> IoStats {
        t.opts.counters.snapshot()
    }

    #[test]
    fn get_scan_and_seek_match_the_model() {
        let entries = dataset(600);
        for compression in [Compression::None, Compression::Lz4] {
            for bloom in [0, 10] {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("000001.sst");
                let size = build(&path, &entries, opts(compression, bloom), Vec::new());
                let t = Arc::new(Table::open(&path, 1, size, read_opts(None)).unwrap());
                assert_eq!(t.has_filter(), bloom > 0);
                assert!(t.data_block_handles().unwrap().len() > 20);

                assert_eq!(scan(&t, ReadPurpose::Query).unwrap(), entries);

                for (k, _) in entries.iter().step_by(3) {
                    let p = parse_internal_key(k).unwrap();
                    for snap in [p.seq, p.seq - 1, p.seq + 1, MAX_SEQ, 0] {
                        let got = t.get(p.user_key, snap).unwrap();
                        assert_eq!(got, model_get(&entries, p.user_key, snap), "{k:?}@{snap}");
                    }
                    // Absent user keys: just before and after this one.
                    let mut before = p.user_key.to_vec();
                    before.pop();
                    assert_eq!(t.get(&before, MAX_SEQ).unwrap(), None);
                    let mut after = p.user_key.to_vec();
                    after.push(b'!');
                    assert_eq!(t.get(&after, MAX_SEQ).unwrap(), None);
                }
                assert_eq!(t.get(b"zzz", MAX_SEQ).unwrap(), None);
                assert_eq!(t.get(b"", MAX_SEQ).unwrap(), None);

                let mut it = t.iter(ReadPurpose::Query);
                for (i, (k, _)) in entries.iter().enumerate().step_by(7) {
                    it.seek(k).unwrap();
                    assert_eq!(it.key(), &k[..]);
                    // A seek between two entries lands on the later one.
                    let p = parse_internal_key(k).unwrap();
                    let mid = make_internal_key(p.user_key, p.seq + 1, ValueKind::Value);
                    it.seek(&mid).unwrap();
                    assert_eq!(it.key(), &k[..], "entry {i}");
                    let rest = {
                        let mut n = 0;
                        while it.valid() {
                            n += 1;
                            it.next().unwrap();
                        }
                        n
                    };
                    assert_eq!(rest, entries.len() - i);
                }
                it.seek(&make_internal_key(b"zzz", 1, ValueKind::Value))
                    .unwrap();
                assert!(!it.valid());
            }
        }
    }

    #[test]
    fn properties_are_recorded() {
        let entries = dataset(300);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let mut b = TableBuilder::new(&path, opts(Compression::None, 10), Vec::new()).unwrap();
        for (k, v) in &entries {
            b.add(k, v).unwrap();
        }
        assert_eq!(b.num_entries(), entries.len() as u64);
        let built = b.finish().unwrap();
        let t = Table::open(&path, 7, built.file_size, read_opts(None)).unwrap();
        let p = t.properties();
        assert_eq!(p, &built.properties);
        assert_eq!(t.file_number(), 7);
        assert_eq!(p.num_entries, entries.len() as u64);
        let dels = entries
            .iter()
            .filter(|(k, _)| parse_internal_key(k).unwrap().kind == ValueKind::Deletion)
            .count();
        assert_eq!(p.num_deletions, dels as u64);
        assert!(dels > 0);
        assert_eq!(
            p.num_data_blocks,
            t.data_block_handles().unwrap().len() as u64
        );
        let seqs: Vec<u64> = entries
            .iter()
            .map(|(k, _)| parse_internal_key(k).unwrap().seq)
            .collect();
        assert_eq!(p.smallest_seq, *seqs.iter().min().unwrap());
        assert_eq!(p.largest_seq, *seqs.iter().max().unwrap());
        assert_eq!(p.smallest_key, entries[0].0);
        assert_eq!(p.largest_key, entries.last().unwrap().0);
        let rk: usize = entries.iter().map(|(k, _)| k.len()).sum();
        let rv: usize = entries.iter().map(|(_, v)| v.len()).sum();
        assert_eq!(p.raw_key_bytes, rk as u64);
        assert_eq!(p.raw_value_bytes, rv as u64);
        let db: u64 = t
            .data_block_handles()
            .unwrap()
            .iter()
            .map(|h| h.size + BLOCK_TRAILER_LEN as u64)
            .sum();
        assert_eq!(p.data_bytes, db);

        // Encoding: roundtrip, unknown fields skipped, truncation rejected.
        let enc = p.encode();
        assert_eq!(&TableProperties::decode(&enc).unwrap(), p);
        let mut ext = enc.clone();
        put_varint64(&mut ext, 99 << 1 | WIRE_BYTES);
        put_length_prefixed(&mut ext, b"future");
        put_varint64(&mut ext, 98 << 1 | WIRE_VARINT);
        put_varint64(&mut ext, 5);
        assert_eq!(&TableProperties::decode(&ext).unwrap(), p);
        assert!(TableProperties::decode(&enc[..enc.len() - 1]).is_err());
    }

    #[test]
    fn multi_get_reads_each_block_once() {
        let entries = dataset(600);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let size = build(&path, &entries, opts(Compression::None, 10), Vec::new());
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = Table::open(&path, 1, size, read_opts(Some(cache))).unwrap();

        // Present keys (every 4th user key in a range) and absent ones.
        let mut keys: Vec<Vec<u8>> = (100..400)
            .step_by(4)
            .map(|i| format!("user{:05}", i * 2).into_bytes())
            .collect();
        keys.extend((0..40).map(|i| format!("user{:05}", i * 20 + 1).into_bytes()));
        keys.sort();
        keys.dedup();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let snapshot = MAX_SEQ;

        // Expected blocks: for keys that pass the filter, the block whose
        // last key is the first >= the seek key.
        let handles = t.data_block_handles().unwrap();
        let last_keys: Vec<Vec<u8>> = handles
            .iter()
            .map(|h| {
                let e = t.read_data_block_entries(*h).unwrap();
                let (u, s, k, _) = e.last().unwrap();
                make_internal_key(u, *s, *k)
            })
            .collect();
        let filter = t.filter.as_ref().unwrap();
        let passing = keys.iter().filter(|k| filter.may_contain(k)).count();
        let expected_blocks: BTreeSet<usize> = keys
            .iter()
            .filter(|k| filter.may_contain(k))
            .filter_map(|k| {
                let target = seek_key(k, snapshot);
                last_keys
                    .iter()
                    .position(|lk| compare_internal(lk, &target).is_ge())
            })
            .collect();
        assert!(expected_blocks.len() > 10);

        let before = stats(&t);
        let mut out = vec![None; keys.len()];
        t.multi_get(&refs, snapshot, &mut out).unwrap();
        let d = stats(&t).delta(&before);
        // Blocks were cached by read_data_block_entries above.
        assert_eq!(d.data_blocks.disk, 0);
        assert_eq!(d.data_blocks.cache, expected_blocks.len() as u64);
        assert_eq!(d.bloom_probes, keys.len() as u64);
        assert_eq!(d.bloom_negatives, (keys.len() - passing) as u64);
        for (k, o) in keys.iter().zip(&out) {
            assert_eq!(o, &model_get(&entries, k, snapshot), "{k:?}");
        }

        // Without a cache every needed block is read from disk exactly once.
        let t2 = Table::open(&path, 1, size, read_opts(None)).unwrap();
        let before = stats(&t2);
        let mut out2 = vec![None; keys.len()];
        t2.multi_get(&refs, snapshot, &mut out2).unwrap();
        let d = stats(&t2).delta(&before);
        assert_eq!(d.data_blocks.disk, expected_blocks.len() as u64);
        assert_eq!(d.data_blocks.cache, 0);
        let expected_bytes: u64 = expected_blocks
            .iter()
            .map(|&i| handles[i].size + BLOCK_TRAILER_LEN as u64)
            .sum();
        assert_eq!(d.bytes_read, expected_bytes);
        assert_eq!(out2, out);

        // Older snapshot: the model still agrees.
        let mut out3 = vec![None; keys.len()];
        t2.multi_get(&refs, 900, &mut out3).unwrap();
        for (k, o) in keys.iter().zip(&out3) {
            assert_eq!(o, &model_get(&entries, k, 900), "{k:?}");
        }
        assert!(t2.multi_get(&refs, 1, &mut [None]).is_err());
    }

    #[test]
    fn multi_get_versions_matches_get_in_any_order_and_reads_each_block_once() {
        let entries = dataset(600);
        for bloom in [0, 10] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("000001.sst");
            let size = build(&path, &entries, opts(Compression::Lz4, bloom), Vec::new());
            let t = Table::open(&path, 1, size, read_opts(None)).unwrap();
            let nblocks = t.data_block_handles().unwrap().len() as u64;
            // Every stored version, a sequence number just above and just
            // below each, and keys the table does not have.
            let mut reqs: Vec<(Vec<u8>, SeqNo)> = Vec::new();
            for (k, _) in &entries {
                let p = parse_internal_key(k).unwrap();
                for seq in [p.seq, p.seq + 1, p.seq.saturating_sub(1)] {
                    reqs.push((p.user_key.to_vec(), seq));
                }
            }
            for i in 0..50 {
                reqs.push((format!("user{:05}x", i * 13).into_bytes(), MAX_SEQ));
            }
            reqs.push((b"a".to_vec(), MAX_SEQ));
            reqs.push((b"zzz".to_vec(), MAX_SEQ));
            reqs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            reqs.dedup();
            let check = |reqs: &[(Vec<u8>, SeqNo)]| -> (LookupCounts, IoStats) {
                let refs: Vec<(&[u8], SeqNo)> = reqs.iter().map(|(k, s)| (&k[..], *s)).collect();
                let mut out = vec![None; refs.len()];
                let before = stats(&t);
                let counts = t.multi_get_versions(&refs, &mut out).unwrap();
                let d = stats(&t).delta(&before);
                for ((k, seq), o) in refs.iter().zip(&out) {
                    assert_eq!(o, &model_get(&entries, k, *seq), "{k:?} at {seq}");
                    assert_eq!(o, &t.get(k, *seq).unwrap(), "{k:?} at {seq}");
                }
                (counts, d)
            };
            // Internal-key order: each data block fetched once at most.
            let (counts, d) = check(&reqs);
            assert!(counts.data_blocks <= nblocks, "{counts:?} of {nblocks}");
            assert_eq!(counts.data_blocks, d.data_blocks.disk + d.data_blocks.cache);
            assert_eq!(
                counts.bloom_probes,
                if bloom > 0 { reqs.len() as u64 } else { 0 }
            );
            // Any other order: the same answers.
            let mut shuffled = reqs.clone();
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            check(&shuffled);
            let mut reversed = reqs.clone();
            reversed.reverse();
            check(&reversed);
            assert!(t.multi_get_versions(&[(b"a", 1)], &mut []).is_err());
        }
    }

    #[test]
    fn block_cache_hits_and_compaction_reads_are_counted_apart() {
        let entries = dataset(200);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let size = build(&path, &entries, opts(Compression::Lz4, 10), Vec::new());
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = Arc::new(Table::open(&path, 3, size, read_opts(Some(cache.clone()))).unwrap());
        let s0 = stats(&t);
        // Open reads metaindex + properties (meta), index, filter.
        assert_eq!(s0.meta_blocks.disk, 2);
        assert_eq!(s0.index_blocks.disk, 1);
        assert_eq!(s0.filter_blocks.disk, 1);
        let nblocks = t.data_block_handles().unwrap().len() as u64;

        let s = stats(&t);
        assert_eq!(scan(&t, ReadPurpose::Compaction).unwrap(), entries);
        let d = stats(&t).delta(&s);
        assert_eq!(d.data_blocks, Default::default());
        assert_eq!(d.bytes_read, 0);
        let on_disk: u64 = t
            .data_block_handles()
            .unwrap()
            .iter()
            .map(|h| h.size + BLOCK_TRAILER_LEN as u64)
            .sum();
        assert_eq!(d.compaction_bytes_read, on_disk);
        assert_eq!(cache.usage(), 0);

        let s = stats(&t);
        assert_eq!(scan(&t, ReadPurpose::Query).unwrap(), entries);
        let d = stats(&t).delta(&s);
        assert_eq!(d.data_blocks.disk, nblocks);
        assert_eq!(d.data_blocks.cache, 0);
        assert_eq!(d.bytes_read, on_disk);
        assert!(cache.usage() > 0);

        let s = stats(&t);
        assert_eq!(scan(&t, ReadPurpose::Query).unwrap(), entries);
        let d = stats(&t).delta(&s);
        assert_eq!(d.data_blocks.disk, 0);
        assert_eq!(d.data_blocks.cache, nblocks);
        assert_eq!(d.bytes_read, 0);

        // A point lookup of a present key: one data block (a cache hit now).
        let s = stats(&t);
        let p = parse_internal_key(&entries[50].0).unwrap();
        assert!(t.get(p.user_key, MAX_SEQ).unwrap().is_some());
        let d = stats(&t).delta(&s);
        assert_eq!(d.data_blocks.total(), 1);
        assert_eq!(d.bloom_probes, 1);
    }

    type SeenEntry = (Vec<u8>, SeqNo, ValueKind, Vec<u8>, BlockHandle);

    #[derive(Default)]
    struct Seen {
        entries: Vec<SeenEntry>,
        finished: Vec<BlockHandle>,
        finish_calls: usize,
        /// What each `before_block` call was given: (user key, seq).
        previews: Vec<Vec<(Vec<u8>, SeqNo)>>,
    }

    struct Recorder {
        seen: Arc<Mutex<Seen>>,
        blocks: Vec<(String, Vec<u8>)>,
    }

    impl TableObserver for Recorder {
        fn on_entry(&mut self, e: &EntryRef<'_>, block: BlockHandle) {
            let mut s = self.seen.lock().unwrap();
            // Every entry of a block precedes that block's on_block_finished,
            // and follows its `before_block`.
            assert!(!s.finished.contains(&block));
            assert_eq!(s.previews.len(), s.finished.len() + 1);
            s.entries
                .push((e.user_key.to_vec(), e.seq, e.kind, e.value.to_vec(), block));
        }
        fn before_block(&mut self, entries: &[EntryRef<'_>]) {
            let preview = entries
                .iter()
                .map(|e| (e.user_key.to_vec(), e.seq))
                .collect();
            self.seen.lock().unwrap().previews.push(preview);
        }
        fn on_block_finished(&mut self, block: BlockHandle) {
            self.seen.lock().unwrap().finished.push(block);
        }
        fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
            self.seen.lock().unwrap().finish_calls += 1;
            Ok(std::mem::take(&mut self.blocks))
        }
    }

    /// Marks the entries whose position in the table satisfies `pick`.
    struct Marker {
        pick: fn(usize) -> bool,
        n: usize,
        block: Option<BlockHandle>,
        in_block: u32,
        marks: Vec<(BlockHandle, u32)>,
    }

    impl TableObserver for Marker {
        fn on_entry(&mut self, _e: &EntryRef<'_>, block: BlockHandle) {
            if self.block != Some(block) {
                self.block = Some(block);
                self.in_block = 0;
            }
            if (self.pick)(self.n) {
                self.marks.push((block, self.in_block));
            }
            self.n += 1;
            self.in_block += 1;
        }
        fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
            Ok(Vec::new())
        }
        fn obsolete_entries(&mut self) -> Vec<(BlockHandle, u32)> {
            std::mem::take(&mut self.marks)
        }
    }

    #[test]
    fn meta_blocks_with_a_prefix_are_found_in_one_pass() {
        let entries = dataset(20);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let names = [
            "next.1.0",
            "next.1.1",
            "next.1.10",
            "next.1.2",
            "next.1.dir",
            "next.10.0",
            "next.",
            "nexu",
        ];
        let observers: Vec<Box<dyn TableObserver>> = vec![Box::new(Recorder {
            seen: Arc::default(),
            blocks: names
                .iter()
                .map(|n| (n.to_string(), n.as_bytes().to_vec()))
                .collect(),
        })];
        let size = build(&path, &entries, opts(Compression::None, 10), observers);
        let t = Table::open(&path, 1, size, read_opts(None)).unwrap();
        let got: Vec<(&str, MetaBlockId)> = t.meta_blocks_with_prefix("next.1.").collect();
        let rests: Vec<&str> = got.iter().map(|(r, _)| *r).collect();
        assert_eq!(rests, ["0", "1", "10", "2", "dir"]);
        for (rest, id) in got {
            let name = format!("next.1.{rest}");
            assert_eq!(t.meta_block_id(&name), Some(id));
            let b = t.read_meta_block(id).unwrap();
            assert_eq!(b.bytes(), name.as_bytes());
        }
        assert_eq!(t.meta_blocks_with_prefix("next.").count(), 7);
        assert_eq!(t.meta_blocks_with_prefix("zzz").count(), 0);
        assert_eq!(t.meta_blocks_with_prefix(RESERVED_META_PREFIX).count(), 0);
    }

    #[test]
    fn a_meta_block_name_used_twice_fails_the_build() {
        let entries = dataset(20);
        let dir = tempfile::tempdir().unwrap();
        let named = |names: &[&str]| -> Vec<Box<dyn TableObserver>> {
            vec![Box::new(Recorder {
                seen: Arc::default(),
                blocks: names.iter().map(|n| (n.to_string(), vec![1])).collect(),
            })]
        };
        let build_with = |names: &[&str]| {
            let path = dir.path().join(format!("t{}.sst", names.len()));
            let mut b =
                TableBuilder::new(&path, opts(Compression::None, 10), named(names)).unwrap();
            for (k, v) in &entries {
                b.add(k, v).unwrap();
            }
            b.finish()
        };
        let many: Vec<String> = (0..300).map(|i| format!("x.{i}")).collect();
        let mut names: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(build_with(&names).is_ok());
        names.push("x.17");
        let err = build_with(&names).unwrap_err();
        assert!(err.to_string().contains("\"x.17\" is used twice"), "{err}");
    }

    #[test]
    fn obsolete_bitmap_hides_marked_entries_from_every_read() {
        let entries = dataset(300);
        let picks: [fn(usize) -> bool; 3] = [|i| i % 3 == 0, |i| i % 7 < 5, |_| true];
        for pick in picks {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.sst");
            let marker = Marker {
                pick,
                n: 0,
                block: None,
                in_block: 0,
                marks: Vec::new(),
            };
            let size = build(
                &path,
                &entries,
                opts(Compression::Lz4, 10),
                vec![Box::new(marker)],
            );
            let t = Arc::new(Table::open(&path, 1, size, read_opts(None)).unwrap());
            let live: Vec<Entry> = entries
                .iter()
                .enumerate()
                .filter(|(i, _)| !pick(*i))
                .map(|(_, e)| e.clone())
                .collect();
            assert_eq!(t.obsolete_entries() as usize, entries.len() - live.len());
            assert_eq!(scan(&t, ReadPurpose::Query).unwrap(), live);
            let users: Vec<Vec<u8>> = (0..610)
                .map(|i| format!("user{i:05}").into_bytes())
                .collect();
            for snapshot in [MAX_SEQ, 400, 2] {
                for u in &users {
                    assert_eq!(
                        t.get(u, snapshot).unwrap(),
                        model_get(&live, u, snapshot),
                        "get {:?} at {snapshot}",
                        String::from_utf8_lossy(u)
                    );
                }
                let keys: Vec<&[u8]> = users.iter().map(|u| u.as_slice()).collect();
                let mut out = vec![None; keys.len()];
                t.multi_get(&keys, snapshot, &mut out).unwrap();
                for (u, f) in users.iter().zip(out) {
                    assert_eq!(f, model_get(&live, u, snapshot));
                }
            }
            // Seeks land on the first live entry at or after the target.
            for (k, _) in entries.iter().step_by(5) {
                let mut it = t.iter(ReadPurpose::Query);
                it.seek(k).unwrap();
                let want = live.iter().find(|(lk, _)| compare_internal(lk, k).is_ge());
                assert_eq!(
                    it.valid().then(|| it.key().to_vec()),
                    want.map(|w| w.0.clone())
                );
            }
        }
    }

    /// Entries by ordinal, with the restart interval recorded (the reader
    /// jumps to the restart point before a wanted entry) for several
    /// intervals, and with it unrecorded (a table written before the
    /// property: the reader walks from the block's start).
    #[test]
    fn visit_data_block_entries_reads_entries_by_ordinal() {
        for (interval, recorded) in [(4, true), (1, true), (3, true), (16, true), (3, false)] {
            visit_by_ordinal(interval, recorded);
        }
    }

    fn visit_by_ordinal(interval: usize, recorded: bool) {
        let entries = dataset(400);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let observers: Vec<Box<dyn TableObserver>> = vec![Box::new(Recorder {
            seen: seen.clone(),
            blocks: Vec::new(),
        })];
        let mut o = opts(Compression::None, 10);
        o.restart_interval = interval;
        let size = build(&path, &entries, o, observers);
        let mut t = Table::open(&path, 1, size, read_opts(None)).unwrap();
        assert_eq!(t.properties().data_restart_interval, interval as u64);
        if !recorded {
            t.props.data_restart_interval = 0;
        }
        let s = seen.lock().unwrap();
        // Entries by block, in the order the observer saw them.
        let mut by_block: Vec<(BlockHandle, Vec<usize>)> = Vec::new();
        for (i, e) in s.entries.iter().enumerate() {
            match by_block.last_mut() {
                Some((h, v)) if *h == e.4 => v.push(i),
                _ => by_block.push((e.4, vec![i])),
            }
        }
        assert!(by_block.len() > 3);
        for (h, members) in &by_block {
            let block = t.read_data_block(*h).unwrap();
            let n = members.len() as u32;
            for ords in [
                (0..n).collect::<Vec<u32>>(),
                vec![n - 1],
                vec![0, 0, n / 2, n / 2, n - 1],
                (0..n).step_by(3).collect(),
                (1..n).step_by(5).collect(),
            ] {
                let mut got = Vec::new();
                t.visit_data_block_entries(
                    *h,
                    &block,
                    ords.iter().copied(),
                    |o, u, seq, kind, v| {
                        got.push((o, u.to_vec(), seq, kind, v.to_vec()));
                        Ok(())
                    },
                )
                .unwrap();
                let mut want_ords = ords.clone();
                want_ords.dedup();
                assert_eq!(got.len(), want_ords.len());
                for ((o, u, seq, kind, v), w) in got.iter().zip(&want_ords) {
                    assert_eq!(o, w);
                    let e = &s.entries[members[*w as usize]];
                    assert_eq!((u, *seq, *kind, v), (&e.0, e.1, e.2, &e.3));
                }
            }
            let err = t
                .visit_data_block_entries(*h, &block, [n], |_, _, _, _, _| Ok(()))
                .unwrap_err();
            assert!(err.is_corruption(), "{err}");
        }
    }

    #[test]
    fn observers_see_every_entry_with_its_block_and_meta_blocks_roundtrip() {
        let entries = dataset(400);
        for compression in [Compression::None, Compression::Lz4] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.sst");
            let seen = Arc::new(Mutex::new(Seen::default()));
            let big: Vec<u8> = (0..5000u32).flat_map(|i| (i / 10).to_le_bytes()).collect();
            let observers: Vec<Box<dyn TableObserver>> = vec![
                Box::new(Recorder {
                    seen: seen.clone(),
                    blocks: vec![
                        ("zone.map".to_string(), b"zone-data".to_vec()),
                        ("a.empty".to_string(), Vec::new()),
                    ],
                }),
                Box::new(Recorder {
                    seen: Arc::new(Mutex::new(Seen::default())),
                    blocks: vec![("next.index".to_string(), big.clone())],
                }),
            ];
            let size = build(&path, &entries, opts(compression, 10), observers);
            let t = Table::open(&path, 1, size, read_opts(None)).unwrap();
            let s = seen.lock().unwrap();
            assert_eq!(s.finish_calls, 1);
            assert_eq!(s.entries.len(), entries.len());
            assert_eq!(s.finished, t.data_block_handles().unwrap());
            let mut by_block = std::collections::HashMap::new();
            for ((u, seq, kind, v, h), (k, val)) in s.entries.iter().zip(&entries) {
                assert_eq!(make_internal_key(u, *seq, *kind), *k);
                assert_eq!(v, val);
                let block = by_block
                    .entry(*h)
                    .or_insert_with(|| t.read_data_block_entries(*h).unwrap());
                assert!(
                    block.contains(&(u.clone(), *seq, *kind, v.clone())),
                    "entry {u:?}@{seq} not in its block"
                );
            }
            assert_eq!(by_block.len(), s.finished.len());
            // Each block's entries were previewed, in order, before them.
            let mut grouped: Vec<Vec<(Vec<u8>, SeqNo)>> = Vec::new();
            let mut last = None;
            for (u, seq, _, _, h) in &s.entries {
                if last != Some(*h) {
                    grouped.push(Vec::new());
                    last = Some(*h);
                }
                if let Some(g) = grouped.last_mut() {
                    g.push((u.clone(), *seq));
                }
            }
            assert_eq!(s.previews, grouped);

            assert_eq!(
                t.meta_block_names(),
                vec!["a.empty", "next.index", "zone.map"]
            );
            let before = stats(&t);
            assert_eq!(t.meta_block("zone.map").unwrap().unwrap(), b"zone-data");
            assert_eq!(t.meta_block("a.empty").unwrap().unwrap(), b"");
            assert_eq!(t.meta_block("next.index").unwrap().unwrap(), big);
            assert_eq!(t.meta_block("missing").unwrap(), None);
            assert_eq!(t.meta_block("strata.properties").unwrap(), None);
            assert_eq!(stats(&t).delta(&before).meta_blocks.disk, 3);
            // Resolved ids read the same payloads, borrowed from the block.
            for (name, want) in [
                ("zone.map", &b"zone-data"[..]),
                ("a.empty", b""),
                ("next.index", &big[..]),
            ] {
                let id = t.meta_block_id(name).unwrap();
                assert_eq!(t.read_meta_block(id).unwrap().bytes(), want, "{name}");
            }
            assert_eq!(t.meta_block_id("missing"), None);
            assert_eq!(t.meta_block_id("strata.properties"), None);
            assert!(t.read_meta_block(MetaBlockId(3)).is_err());
        }
    }

    #[test]
    fn observer_meta_block_names_are_checked() {
        for blocks in [
            vec![("strata.mine".to_string(), vec![1])],
            vec![("x".to_string(), vec![1]), ("x".to_string(), vec![2])],
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.sst");
            let obs: Vec<Box<dyn TableObserver>> = vec![Box::new(Recorder {
                seen: Arc::new(Mutex::new(Seen::default())),
                blocks,
            })];
            let mut b = TableBuilder::new(&path, opts(Compression::None, 10), obs).unwrap();
            b.add(&make_internal_key(b"a", 1, ValueKind::Value), b"v")
                .unwrap();
            assert!(matches!(b.finish(), Err(Error::InvalidArgument(_))));
        }
    }

    #[test]
    fn builder_rejects_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let mut b = TableBuilder::new(&path, opts(Compression::None, 10), Vec::new()).unwrap();
        assert!(TableBuilder::new(&path, opts(Compression::None, 10), Vec::new()).is_err());
        let k5 = make_internal_key(b"b", 5, ValueKind::Value);
        b.add(&k5, b"x").unwrap();
        assert!(matches!(b.add(&k5, b"y"), Err(Error::InvalidArgument(_))));
        let older_first = make_internal_key(b"b", 9, ValueKind::Value);
        assert!(matches!(
            b.add(&older_first, b"y"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            b.add(&make_internal_key(b"a", 1, ValueKind::Value), b""),
            Err(Error::InvalidArgument(_))
        ));
        assert!(b.add(b"short", b"").unwrap_err().is_corruption());
        b.add(&make_internal_key(b"b", 4, ValueKind::Deletion), b"")
            .unwrap();
        assert_eq!(b.num_entries(), 2);
        b.finish().unwrap();
    }

    #[test]
    fn empty_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let size = build(&path, &[], opts(Compression::None, 10), Vec::new());
        let t = Arc::new(Table::open(&path, 1, size, read_opts(None)).unwrap());
        assert_eq!(t.properties().num_entries, 0);
        assert!(scan(&t, ReadPurpose::Query).unwrap().is_empty());
        assert_eq!(t.get(b"a", MAX_SEQ).unwrap(), None);
        assert!(t.data_block_handles().unwrap().is_empty());
        let mut it = t.iter(ReadPurpose::Query);
        it.seek(b"anything").unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn read_block_verified_reads_and_checks_every_block() {
        let entries = dataset(300);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let size = build(&path, &entries, opts(Compression::Lz4, 10), Vec::new());
        let t = Table::open(&path, 1, size, read_opts(None)).unwrap();
        let before = stats(&t);
        for h in t.data_block_handles().unwrap() {
            assert_eq!(t.read_block_verified(h).unwrap(), h.size + 5);
        }
        // Not counted as block reads.
        assert_eq!(stats(&t).delta(&before).data_blocks, Default::default());
        // A damaged block fails its checksum.
        let h = t.data_block_handles().unwrap()[1];
        let mut bad = std::fs::read(&path).unwrap();
        bad[h.offset as usize + 3] ^= 1;
        let bad_path = dir.path().join("bad.sst");
        std::fs::write(&bad_path, &bad).unwrap();
        let t = Table::open(&bad_path, 1, size, read_opts(None)).unwrap();
        assert!(t.read_block_verified(h).unwrap_err().is_corruption());
    }

    #[test]
    fn direct_io_table_reads() {
        let entries = dataset(300);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let size = build(&path, &entries, opts(Compression::None, 10), Vec::new());
        let mut o = read_opts(None);
        o.direct_io = true;
        let t = Arc::new(Table::open(&path, 1, size, o).unwrap());
        assert_eq!(scan(&t, ReadPurpose::Query).unwrap(), entries);
        let p = parse_internal_key(&entries[10].0).unwrap();
        assert_eq!(
            t.get(p.user_key, MAX_SEQ).unwrap(),
            model_get(&entries, p.user_key, MAX_SEQ)
        );
    }

    #[test]
    fn mmap_table_reads_answer_like_pread_and_check_checksums() {
        let entries = dataset(300);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let size = build(&path, &entries, opts(Compression::None, 10), Vec::new());
        let mut o = read_opts(None);
        o.mmap_reads = true;
        let t = Arc::new(Table::open(&path, 1, size, o.clone()).unwrap());
        assert_eq!(scan(&t, ReadPurpose::Query).unwrap(), entries);
        for e in entries.iter().step_by(7) {
            let p = parse_internal_key(&e.0).unwrap();
            assert_eq!(
                t.get(p.user_key, MAX_SEQ).unwrap(),
                model_get(&entries, p.user_key, MAX_SEQ)
            );
        }
        // A damaged data block fails its checksum through the mapping too.
        let h = t.data_block_handles().unwrap()[2];
        let mut bad = std::fs::read(&path).unwrap();
        bad[h.offset as usize + 3] ^= 1;
        let bad_path = dir.path().join("bad.sst");
        std::fs::write(&bad_path, &bad).unwrap();
        let t = Arc::new(Table::open(&bad_path, 2, size, o).unwrap());
        assert!(t.read_block_verified(h).unwrap_err().is_corruption());
        assert!(scan(&t, ReadPurpose::Query).unwrap_err().is_corruption());
    }

    #[test]
    fn table_cache_opens_once_and_evicts() {
        let entries = dataset(50);
        let dir = tempfile::tempdir().unwrap();
        let mut sizes = Vec::new();
        for n in 1..=3u64 {
            let path = crate::filename::table_file(dir.path(), n);
            sizes.push(build(
                &path,
                &entries,
                opts(Compression::None, 10),
                Vec::new(),
            ));
        }
        let ro = read_opts(None);
        let counters = ro.counters.clone();
        let tc = TableCache::new(dir.path().to_path_buf(), 2, ro);
        let a = tc.get(1, sizes[0]).unwrap();
        let opens = counters.snapshot().index_blocks.disk;
        let a2 = tc.get(1, sizes[0]).unwrap();
        assert!(Arc::ptr_eq(&a, &a2));
        assert_eq!(counters.snapshot().index_blocks.disk, opens);
        tc.get(2, sizes[1]).unwrap();
        tc.get(1, sizes[0]).unwrap(); // 2 is now least recent
        tc.get(3, sizes[2]).unwrap(); // evicts 2
        assert_eq!(tc.len(), 2);
        assert!(Arc::ptr_eq(&a, &tc.get(1, sizes[0]).unwrap()));
        let before = counters.snapshot().index_blocks.disk;
        tc.get(2, sizes[1]).unwrap();
        assert_eq!(counters.snapshot().index_blocks.disk, before + 1);
        tc.evict(2);
        assert_eq!(tc.len(), 1);
        assert!(tc.get(9, 100).is_err());
    }

    /// Opens, scans, gets and multi-gets a possibly damaged copy of a table:
    /// each step must either fail or return exactly the original data.
    fn check_damaged(path: &Path, size: u64, entries: &[Entry], meta: &[(&str, &[u8])]) {
        let t = match Table::open(path, 1, size, read_opts(None)) {
            Ok(t) => Arc::new(t),
            Err(_) => return,
        };
        if let Ok(got) = scan(&t, ReadPurpose::Compaction) {
            assert_eq!(got, entries, "scan returned wrong data");
        }
        let users: Vec<Vec<u8>> = entries
            .iter()
            .map(|(k, _)| crate::key::user_key(k).to_vec())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let step = (users.len() / 50).max(1);
        for u in users.iter().step_by(step) {
            if let Ok(got) = t.get(u, MAX_SEQ) {
                assert_eq!(got, model_get(entries, u, MAX_SEQ), "get {u:?}");
            }
        }
        let refs: Vec<&[u8]> = users.iter().map(|u| &u[..]).collect();
        let mut out = vec![None; refs.len()];
        if t.multi_get(&refs, MAX_SEQ, &mut out).is_ok() {
            for (u, o) in users.iter().zip(&out) {
                assert_eq!(o, &model_get(entries, u, MAX_SEQ), "multi_get {u:?}");
            }
        }
        for (name, bytes) in meta {
            if let Ok(got) = t.meta_block(name) {
                assert_eq!(got.as_deref(), Some(*bytes));
            }
        }
    }

    fn corruption_case(n: usize, compression: Compression, stride: usize) {
        let entries = dataset(n);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let obs: Vec<Box<dyn TableObserver>> = vec![Box::new(Recorder {
            seen: Arc::new(Mutex::new(Seen::default())),
            blocks: vec![("m".to_string(), b"meta-payload".to_vec())],
        })];
        let size = build(&path, &entries, opts(compression, 10), obs);
        let good = std::fs::read(&path).unwrap();
        let meta: [(&str, &[u8]); 1] = [("m", b"meta-payload")];
        check_damaged(&path, size, &entries, &meta);
        let bad_path = dir.path().join("bad.sst");
        for i in (0..good.len()).step_by(stride) {
            for mask in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[i] ^= mask;
                std::fs::write(&bad_path, &bad).unwrap();
                check_damaged(&bad_path, size, &entries, &meta);
            }
        }
        for cut in [0, 1, 55, 56, 57, good.len() / 2, good.len() - 1] {
            std::fs::write(&bad_path, &good[..cut]).unwrap();
            check_damaged(&bad_path, cut as u64, &entries, &meta);
            // Claimed size larger than the file.
            check_damaged(&bad_path, size, &entries, &meta);
        }
    }

    #[test]
    fn every_byte_flip_of_a_small_table_is_caught() {
        corruption_case(40, Compression::None, 1);
    }

    #[test]
    fn sampled_byte_flips_of_compressed_tables_are_caught() {
        corruption_case(40, Compression::Lz4, 1);
        corruption_case(600, Compression::None, 61);
    }
}
