//! The Embedded Index of LevelDB++ (Qader, Cheng & Hristidis, "A
//! Comparative Study of Secondary Indexing Techniques in LSM-based NoSQL
//! Databases", SIGMOD 2018, §3 "Embedded Index" and Appendix B, Algorithms
//! 5 (LOOKUP, GetLite) and 8 (RANGELOOKUP)).
//!
//! No separate index data: while a flush or compaction writes a table, the
//! table observer computes, for every data block holding at least one
//! indexed value, a *zone map* (min/max encoded value for scalars, the MBR
//! for points and rectangles) and, for scalars, a *Bloom filter* of the
//! block's distinct encoded values; plus a zone map of the whole table (the
//! paper's per-file zone map). They are stored in one meta block per index
//! and table, `embedded.<id>` (format: `docs/format/embedded.md`), and kept
//! decoded in RAM with the table, in the per-version index state
//! ([`EmbeddedGlobal`]): a query scans in-memory filters, not the disk.
//!
//! A query (LOOKUP, RANGELOOKUP, and WITHIN for spatial types) walks the
//! components newest first: the memtables through their side structure
//! (the paper's in-memory B-tree on the MemTable), newest match first,
//! then the tables' data blocks. A table is pruned by its zone map, a data
//! block by its zone map and (equality on scalars) its Bloom filter.
//! Surviving blocks are read and every entry's attribute is re-extracted
//! from the record and tested. The paper walks the tables level by level
//! (L0 newest first, then L1, L2, …, each level in key order); here the
//! surviving blocks of all tables are read in descending order of their
//! `newest` sequence number (stored per block, format version 2), which
//! for time-ordered primary keys (chirp's growing `ID`) is reverse key
//! order within a table and crosses levels. The order changes which blocks
//! a top-K query must read, never the answer (below).
//!
//! Validation is GetLite: a match `(key, seq)` found in a component is
//! valid only if no newer component holds a newer version of `key` at the
//! snapshot. Memtables are checked exactly. A newer table is checked with
//! its in-memory primary-key Bloom filter and key range only — no I/O when
//! the filter says "absent" — and resolved exactly (a point lookup, which
//! may read one data block) only when it says "maybe". Two cases the paper
//! leaves implicit are handled exactly too: an older version in the same
//! table is shadowed by the newer one read just before it in the same
//! block, and a version whose newer sibling sits at the end of the previous
//! data block (flagged in the block's entry) costs one exact lookup.
//!
//! Top-K: the paper stops at the end of the level where K results are
//! known (Algorithms 5 and 8), assuming each level ≥ 1 older than the one
//! above. That is not exact in a leveled tree (a key can reach L2 while an
//! older key still sits in L1), and the contract asks for the K most
//! recent matches. Contract: a block is skipped only when K valid results
//! newer than its `newest` bound are known (`min(newest, largest_seq)` of
//! its table; `largest_seq` alone for a version-1 block); since blocks are
//! visited by descending bound, the walk ends at the first such block.
//! Every candidate is validated against the components newer than its own
//! whatever was read before, so an older record is never returned in place
//! of a newer one. With time-ordered levels this stops where the paper
//! stops, and inside a level or a table too: about as many blocks as the K
//! results need (plus, for a range that zone maps cannot prune, the blocks
//! between them). Candidates older than the current K-th result are not
//! validated (Algorithm 1's heap test).

#![deny(clippy::indexing_slicing)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::index::value::{intersects, IndexValue, KeyType, Predicate};
use strata_lsm::coding::{get_length_prefixed, get_varint64, put_length_prefixed, put_varint64};
use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::{InstallEvent, TableContext};
use strata_lsm::key::{self, SeqNo, ValueKind};
use strata_lsm::memtable::{MemGet, MemTable};
use strata_lsm::sstable::filter::{
    hash64, probe_bits, BloomBuilder, BloomView, FILTER_BLOCK_BYTES,
};
use strata_lsm::sstable::{BlockHandle, Table};
use strata_lsm::version::FileMetaData;

use strata_lsm::cache::TableCache;
use strata_lsm::version::Version;

use super::def::IndexMeta;
use super::results::Results;
use super::sidefile::SideFiles;
use super::strategy::{
    BuildMethod, IndexStrategy, OpenCx, QueryCx, StrategyKind, TableIndexBuilder, VersionSlot,
    WritePath,
};
use super::tables;
use super::{lock, side, Hits, IndexStats, QueryProfile, QueryView};

/// Default Bloom filter size per distinct value of a block: the paper's
/// setting (Appendix C.1, Table 8).
pub const DEFAULT_BITS_PER_KEY: usize = 100;
const MAX_BITS_PER_KEY: usize = 1000;
/// Written version; version 1 (no per-block `newest`) is still read.
const FORMAT_VERSION: u8 = 2;
const FORMAT_V1: u8 = 1;
/// Block flag: the block's first user key is the previous data block's last
/// one (a newer version of it may sit in that block).
const FLAG_CONTINUES: u8 = 1;

/// Name of the meta block of index `index_id` in a table.
pub fn block_name(index_id: u32) -> String {
    format!("embedded.{index_id}")
}

/// Validates the parameters of an `embedded` index and returns the Bloom
/// filter bits per distinct value (`bits_per_key`, 0 = zone maps only).
pub fn parse_params(params: &BTreeMap<String, String>) -> Result<usize> {
    let mut bits = DEFAULT_BITS_PER_KEY;
    for (k, v) in params {
        match k.as_str() {
            "bits_per_key" => {
                bits = match v.parse::<usize>() {
                    Ok(b) if b <= MAX_BITS_PER_KEY => b,
                    _ => {
                        return Err(Error::invalid(format!(
                        "bits_per_key must be an integer from 0 to {MAX_BITS_PER_KEY}, not {v:?}"
                    )))
                    }
                }
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown parameter {k:?} for strategy embedded (known: bits_per_key)"
                )))
            }
        }
    }
    Ok(bits)
}

/// A zone map: the range of a block's (or table's) values.
#[derive(Debug, Clone, PartialEq)]
pub enum Zone {
    /// Encoded `[min, max]` of scalar values.
    Scalar(Vec<u8>, Vec<u8>),
    /// Minimum bounding rectangle `[xmin, ymin, xmax, ymax]` of points or
    /// rectangles.
    Rect([f64; 4]),
}

impl Zone {
    pub(crate) fn of(v: &IndexValue, enc: &[u8]) -> Zone {
        match v.mbr() {
            Some(m) => Zone::Rect(m),
            None => Zone::Scalar(enc.to_vec(), enc.to_vec()),
        }
    }

    pub(crate) fn widen(&mut self, other: &Zone) {
        match (self, other) {
            (Zone::Scalar(lo, hi), Zone::Scalar(a, b)) => {
                if a < lo {
                    a.clone_into(lo);
                }
                if b > hi {
                    b.clone_into(hi);
                }
            }
            (Zone::Rect(r), Zone::Rect(m)) => {
                *r = [
                    r[0].min(m[0]),
                    r[1].min(m[1]),
                    r[2].max(m[2]),
                    r[3].max(m[3]),
                ];
            }
            // Values of one index all have the same type.
            _ => {}
        }
    }

    fn contains(&self, inner: &Zone) -> bool {
        match (self, inner) {
            (Zone::Scalar(lo, hi), Zone::Scalar(a, b)) => lo <= a && b <= hi,
            (Zone::Rect(r), Zone::Rect(m)) => {
                r[0] <= m[0] && r[1] <= m[1] && m[2] <= r[2] && m[3] <= r[3]
            }
            _ => false,
        }
    }

    fn may_match(&self, p: &Probe) -> bool {
        match self {
            Zone::Scalar(lo, hi) => p.bounds.as_ref().is_some_and(|(a, b)| {
                lo.as_slice() <= b.as_slice() && a.as_slice() <= hi.as_slice()
            }),
            Zone::Rect(r) => p.window.is_some_and(|w| intersects(r, &w)),
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Zone::Scalar(lo, hi) => lo.len() + hi.len(),
            Zone::Rect(_) => 0,
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Zone::Scalar(lo, hi) => {
                put_length_prefixed(out, lo);
                put_length_prefixed(out, hi);
            }
            Zone::Rect(r) => {
                for c in r {
                    out.extend_from_slice(&c.to_le_bytes());
                }
            }
        }
    }

    pub(crate) fn decode(
        src: &mut &[u8],
        ty: KeyType,
        bad: &dyn Fn(&str) -> Error,
    ) -> Result<Zone> {
        if ty.is_spatial() {
            let mut r = [0.0; 4];
            for c in &mut r {
                let (b, rest) = src
                    .split_first_chunk::<8>()
                    .ok_or_else(|| bad("truncated rectangle"))?;
                *c = f64::from_le_bytes(*b);
                *src = rest;
            }
            // Also rejects NaN.
            if !(r[0] <= r[2] && r[1] <= r[3]) {
                return Err(bad("rectangle with min > max"));
            }
            return Ok(Zone::Rect(r));
        }
        let lo = get_length_prefixed(src).ok_or_else(|| bad("truncated zone minimum"))?;
        let hi = get_length_prefixed(src).ok_or_else(|| bad("truncated zone maximum"))?;
        let width = matches!(ty, KeyType::I64 | KeyType::F64).then_some(8);
        if width.is_some_and(|w| lo.len() != w || hi.len() != w) {
            return Err(bad("numeric zone bound is not 8 bytes"));
        }
        if lo > hi {
            return Err(bad("zone with min > max"));
        }
        Ok(Zone::Scalar(lo.to_vec(), hi.to_vec()))
    }
}

/// What a query tests zone maps and filters with.
struct Probe {
    /// Encoded scalar bounds (`[v, v]` for equality).
    bounds: Option<(Vec<u8>, Vec<u8>)>,
    /// Spatial window (for equality, the value's MBR).
    window: Option<[f64; 4]>,
    /// Filter hash of the encoded value, for equality on scalars.
    hash: Option<u64>,
}

impl Probe {
    fn new(pred: &Predicate) -> Probe {
        let bounds = pred.scalar_bounds();
        Probe {
            window: if bounds.is_some() {
                None
            } else {
                pred.window()
            },
            hash: match pred {
                Predicate::Eq(v) if !v.key_type().is_spatial() => Some(hash64(&v.encode())),
                _ => None,
            },
            bounds,
        }
    }
}

/// The in-RAM entry of one data block.
pub struct BlockZone {
    pub handle: BlockHandle,
    /// The block's first user key continues the previous block.
    pub continues: bool,
    /// Upper bound of the sequence numbers of the block's indexed values:
    /// their largest (version 2), `SeqNo::MAX` for a version-1 block.
    pub newest: SeqNo,
    /// Indexed values in the block (≥ 1). Decoded and checked; read by
    /// the inspection tools (`crate::inspect`).
    pub values: u32,
    pub zone: Zone,
    /// Bloom filter of the block's distinct encoded values (scalars with
    /// `bits_per_key` > 0), kept in its table's [`TableZones::filters`].
    pub bloom: Option<BlockFilter>,
}

/// Where a block's Bloom filter lies in its table's filter buffer.
#[derive(Clone, Copy, Debug)]
pub struct BlockFilter {
    /// Byte offset of the bit array in [`TableZones::filters`].
    off: u32,
    /// Bytes of the bit array.
    len: u32,
    k: u8,
    num_blocks: u32,
}

impl BlockFilter {
    /// Bytes of the bit array.
    pub fn size(&self) -> usize {
        self.len as usize
    }

    fn view<'a>(&self, filters: &'a [u8]) -> BloomView<'a> {
        let (off, len) = (self.off as usize, self.len as usize);
        BloomView::new(
            filters
                .get(off..off.saturating_add(len))
                .unwrap_or_default(),
            self.k,
            self.num_blocks,
        )
    }
}

impl BlockZone {
    /// `filters`: the buffer of the block's table ([`TableZones::filters`]).
    fn may_match(&self, p: &Probe, filters: &[u8]) -> bool {
        // The filter first: one probe with a hash computed once per query,
        // cheaper than the zone's byte comparisons, and the test that
        // rejects most blocks of a lookup. The filters of a table are one
        // buffer in file order, so a lookup that tests every block of a
        // table streams through it instead of following one allocation
        // per block.
        let filtered = match (p.hash, &self.bloom) {
            (Some(h), Some(f)) => f.view(filters).may_contain_hash(h),
            _ => true,
        };
        filtered && self.zone.may_match(p)
    }
}

/// One table's Embedded index, decoded.
pub struct TableZones {
    /// Checked against the index's type when decoded.
    #[allow(dead_code)]
    pub key_type: KeyType,
    /// Indexed values in the table (every version of every record).
    pub values: u64,
    /// Zone map of the whole table (`None` when nothing is indexed).
    pub zone: Option<Zone>,
    /// Data blocks holding at least one indexed value, in file order.
    pub blocks: Vec<BlockZone>,
    /// Indexes into `blocks` by descending `newest` (ties: file order).
    pub by_newest: Vec<u32>,
    /// The blocks' Bloom filters' bit arrays, in file order (each
    /// block's [`BlockFilter`] says where its own lies); with `sliced`,
    /// only those of the blocks it does not slice.
    pub filters: Vec<u8>,
    /// The filters again, bit-sliced by shape, for equality lookups
    /// (`None` when no shape is common enough).
    pub sliced: Option<SlicedFilters>,
    /// Bytes of the meta block.
    pub disk_bytes: u64,
}

/// A table's block Bloom filters, bit-sliced. Filters of one *shape*
/// (probe count `k` and number of 64-byte blocks) test the same bit
/// positions for a given key (`filter::probe_bits`), so the members of a
/// shape are stored in groups of 64: bit `j` of `rows[b * groups + g]` is
/// bit `b` of the filter of member `64 g + j`. An equality lookup ANDs the
/// `k` rows its key selects, `groups` words each read in order, and gets
/// 64 blocks at a time — instead of testing each block's filter in
/// `by_newest` order (a cache miss each), which was 55% of an Embedded
/// LOOKUP's samples at 1 M records (`perf`, chirp replay; LevelDB++ §3.1's
/// per-block filters, 100 bits per value and 30 probes by default).
///
/// The members' bits live only here (the table's `filters` buffer keeps
/// the others' filters), so RAM is what the flat filters took.
///
/// Invariant: every block with a filter is a member of exactly one shape
/// or listed in `others`; blocks without a filter are in `others` too.
pub struct SlicedFilters {
    shapes: Vec<Shape>,
    /// Blocks tested one by one (shapes too rare to slice; no filter), in
    /// file order.
    others: Vec<u32>,
}

struct Shape {
    k: u8,
    num_blocks: u32,
    /// Block indexes, in file order.
    members: Vec<u32>,
    groups: usize,
    rows: Vec<u64>,
}

/// A shape is sliced when it has at least this many members.
const MIN_SHAPE_MEMBERS: usize = 64;
/// Filters of more blocks than this are tested one by one.
const MAX_SLICED_FILTER_BLOCKS: u32 = 8;

impl SlicedFilters {
    /// The sliced form of `blocks`' filters; `None` if no shape has
    /// [`MIN_SHAPE_MEMBERS`] blocks (the lookup then tests each block's
    /// filter).
    fn build(blocks: &[BlockZone], filters: &[u8]) -> Option<SlicedFilters> {
        let shape_of = |b: &BlockZone| {
            b.bloom.filter(|f| {
                f.num_blocks >= 1
                    && f.num_blocks <= MAX_SLICED_FILTER_BLOCKS
                    && f.len as usize == f.num_blocks as usize * FILTER_BLOCK_BYTES
            })
        };
        let mut members: BTreeMap<(u8, u32), Vec<u32>> = BTreeMap::new();
        let mut others = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            match shape_of(b) {
                Some(f) => members
                    .entry((f.k, f.num_blocks))
                    .or_default()
                    .push(i as u32),
                None => others.push(i as u32),
            }
        }
        let mut shapes = Vec::new();
        for ((k, num_blocks), m) in members {
            if m.len() < MIN_SHAPE_MEMBERS {
                others.extend(m);
                continue;
            }
            let groups = m.len().div_ceil(64);
            let bits = num_blocks as usize * FILTER_BLOCK_BYTES * 8;
            let mut rows = vec![0u64; bits * groups];
            for (n, &i) in m.iter().enumerate() {
                let (g, j) = (n / 64, n % 64);
                let Some(f) = blocks.get(i as usize).and_then(|b| b.bloom) else {
                    continue;
                };
                let off = f.off as usize;
                let Some(raw) = filters.get(off..off + f.len as usize) else {
                    continue;
                };
                for (w, chunk) in raw.chunks_exact(8).enumerate() {
                    let mut word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
                    while word != 0 {
                        let bit = w * 64 + word.trailing_zeros() as usize;
                        word &= word - 1;
                        if let Some(r) = rows.get_mut(bit * groups + g) {
                            *r |= 1 << j;
                        }
                    }
                }
            }
            shapes.push(Shape {
                k,
                num_blocks,
                members: m,
                groups,
                rows,
            });
        }
        if shapes.is_empty() {
            return None;
        }
        others.sort_unstable();
        Some(SlicedFilters { shapes, others })
    }

    /// The filter buffer of the blocks not sliced (their offsets moved
    /// there, in file order); members of a shape get an out-of-range
    /// offset, whose empty view (`BlockFilter::view`) says "maybe".
    fn keep_others(&self, blocks: &mut [BlockZone], filters: &[u8]) -> Vec<u8> {
        let mut kept = Vec::new();
        for &i in &self.others {
            if let Some(f) = blocks.get_mut(i as usize).and_then(|b| b.bloom.as_mut()) {
                let (off, len) = (f.off as usize, f.len as usize);
                f.off = kept.len() as u32;
                kept.extend_from_slice(filters.get(off..off + len).unwrap_or_default());
            }
        }
        for s in &self.shapes {
            for &i in &s.members {
                if let Some(f) = blocks.get_mut(i as usize).and_then(|b| b.bloom.as_mut()) {
                    f.off = u32::MAX;
                }
            }
        }
        kept.shrink_to_fit();
        kept
    }

    fn memory_bytes(&self) -> usize {
        self.shapes
            .iter()
            .map(|s| s.rows.capacity() * 8 + s.members.capacity() * 4)
            .sum::<usize>()
            + self.others.capacity() * 4
    }

    /// The blocks of `tz` that may hold the value hashed to `h` (filters
    /// and zone maps), in the order of `tz.by_newest`.
    fn candidates(&self, tz: &TableZones, probe: &Probe, h: u64) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        let mut acc: Vec<u64> = Vec::new();
        for s in &self.shapes {
            acc.clear();
            acc.resize(s.groups, !0);
            if let Some(last) = acc.last_mut() {
                let tail = s.members.len() % 64;
                if tail != 0 {
                    *last = (1 << tail) - 1;
                }
            }
            for b in probe_bits(h, s.k, s.num_blocks) {
                let Some(row) = s.rows.get(b * s.groups..(b + 1) * s.groups) else {
                    continue;
                };
                let mut any = 0;
                for (a, r) in acc.iter_mut().zip(row) {
                    *a &= r;
                    any |= *a;
                }
                if any == 0 {
                    break;
                }
            }
            for (g, &hit) in acc.iter().enumerate() {
                let mut m = hit;
                while m != 0 {
                    let n = g * 64 + m.trailing_zeros() as usize;
                    m &= m - 1;
                    let Some(&i) = s.members.get(n) else {
                        break;
                    };
                    if tz
                        .blocks
                        .get(i as usize)
                        .is_some_and(|b| b.zone.may_match(probe))
                    {
                        out.push(i);
                    }
                }
            }
        }
        for &i in &self.others {
            if tz
                .blocks
                .get(i as usize)
                .is_some_and(|b| b.may_match(probe, &tz.filters))
            {
                out.push(i);
            }
        }
        out.sort_by_key(|&i| {
            (
                Reverse(tz.blocks.get(i as usize).map_or(0, |b| b.newest)),
                i,
            )
        });
        out
    }
}

impl std::fmt::Debug for TableZones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableZones")
            .field("values", &self.values)
            .field("zone", &self.zone)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl TableZones {
    /// Bytes of RAM held: zone maps, filters, handles.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.zone.as_ref().map_or(0, Zone::heap_bytes)
            + self
                .blocks
                .iter()
                .map(|b| {
                    std::mem::size_of::<BlockZone>()
                        + std::mem::size_of::<u32>()
                        + b.zone.heap_bytes()
                })
                .sum::<usize>()
            + self.filters.capacity()
            + self.sliced.as_ref().map_or(0, SlicedFilters::memory_bytes)
    }

    fn may_match(&self, p: &Probe) -> bool {
        self.zone.as_ref().is_some_and(|z| z.may_match(p))
    }
}

/// One data block as built, before encoding.
pub struct BuiltBlock {
    pub handle: BlockHandle,
    pub continues: bool,
    /// Largest sequence number of the block's indexed values.
    pub newest: SeqNo,
    pub values: u32,
    pub zone: Zone,
    /// Serialized Bloom filter.
    pub bloom: Option<Vec<u8>>,
}

pub(crate) fn key_type_byte(t: KeyType) -> u8 {
    match t {
        KeyType::I64 => 1,
        KeyType::F64 => 2,
        KeyType::String => 3,
        KeyType::Point => 4,
        KeyType::Rect => 5,
    }
}

/// Encodes one table's meta block (`docs/format/embedded.md`). `bloom` says
/// whether every block carries a filter.
pub fn encode(ty: KeyType, bloom: bool, zone: Option<&Zone>, blocks: &[BuiltBlock]) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION, key_type_byte(ty), u8::from(bloom)];
    let values: u64 = blocks.iter().map(|b| u64::from(b.values)).sum();
    put_varint64(&mut out, values);
    put_varint64(&mut out, blocks.len() as u64);
    if let (Some(z), false) = (zone, blocks.is_empty()) {
        z.encode(&mut out);
    }
    for b in blocks {
        put_varint64(&mut out, b.handle.offset);
        put_varint64(&mut out, b.handle.size);
        out.push(if b.continues { FLAG_CONTINUES } else { 0 });
        put_varint64(&mut out, u64::from(b.values));
        put_varint64(&mut out, b.newest);
        b.zone.encode(&mut out);
        if bloom {
            put_length_prefixed(&mut out, b.bloom.as_deref().unwrap_or_default());
        }
    }
    out
}

/// Decodes a meta block written by [`encode`] for an index of type
/// `expect`; every field is length- and range-checked. `ctx` names the
/// block in errors (e.g. `table 12 block embedded.3`).
pub fn decode(mut src: &[u8], expect: KeyType, ctx: &str) -> Result<TableZones> {
    let bad = |what: &str| Error::corruption(format!("bad embedded index block ({ctx}): {what}"));
    let byte = |src: &mut &[u8], what: &str| -> Result<u8> {
        let (&b, rest) = src.split_first().ok_or_else(|| bad(what))?;
        *src = rest;
        Ok(b)
    };
    let version = byte(&mut src, "empty")?;
    if version != FORMAT_VERSION && version != FORMAT_V1 {
        return Err(bad("unknown version"));
    }
    if byte(&mut src, "truncated key type")? != key_type_byte(expect) {
        return Err(bad("key type differs from the index definition"));
    }
    let bloom = match byte(&mut src, "truncated filter flag")? {
        0 => false,
        1 if !expect.is_spatial() => true,
        _ => return Err(bad("bad filter flag")),
    };
    let v = |src: &mut &[u8], what: &str| get_varint64(src).ok_or_else(|| bad(what));
    let values = v(&mut src, "truncated value count")?;
    let n = v(&mut src, "truncated block count")?;
    let zone = if n > 0 {
        Some(Zone::decode(&mut src, expect, &bad)?)
    } else {
        None
    };
    // Each block takes at least 6 bytes: no allocation beyond the input.
    let mut blocks = Vec::with_capacity(n.min(src.len() as u64 / 6) as usize);
    let mut filters: Vec<u8> = Vec::new();
    let mut end = 0u64;
    let mut sum = 0u64;
    for _ in 0..n {
        let offset = v(&mut src, "truncated block offset")?;
        let size = v(&mut src, "truncated block size")?;
        if offset < end {
            return Err(bad("data blocks out of order"));
        }
        end = offset
            .checked_add(size)
            .ok_or_else(|| bad("block handle overflows"))?;
        let flags = byte(&mut src, "truncated block flags")?;
        if flags & !FLAG_CONTINUES != 0 {
            return Err(bad("unknown block flags"));
        }
        let count = v(&mut src, "truncated block value count")?;
        let count = u32::try_from(count)
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| bad("block value count out of range"))?;
        sum += u64::from(count);
        let newest = if version == FORMAT_V1 {
            SeqNo::MAX
        } else {
            let n = v(&mut src, "truncated block newest sequence number")?;
            if n > key::MAX_SEQ {
                return Err(bad("block newest sequence number out of range"));
            }
            n
        };
        let z = Zone::decode(&mut src, expect, &bad)?;
        if !zone.as_ref().is_some_and(|t| t.contains(&z)) {
            return Err(bad("block zone outside the table zone"));
        }
        let filter = if bloom {
            let b = get_length_prefixed(&mut src).ok_or_else(|| bad("truncated filter"))?;
            let f = BloomView::parse(b).map_err(|e| bad(&e.to_string()))?;
            let (Ok(off), Ok(len)) = (u32::try_from(filters.len()), u32::try_from(f.bits().len()))
            else {
                return Err(bad("filters larger than 4 GiB"));
            };
            filters.extend_from_slice(f.bits());
            Some(BlockFilter {
                off,
                len,
                k: f.k(),
                num_blocks: f.num_blocks(),
            })
        } else {
            None
        };
        blocks.push(BlockZone {
            handle: BlockHandle::new(offset, size),
            continues: flags & FLAG_CONTINUES != 0,
            newest,
            values: count,
            zone: z,
            bloom: filter,
        });
    }
    if !src.is_empty() {
        return Err(bad("trailing bytes"));
    }
    if sum != values {
        return Err(bad("block value counts do not add up to the table's"));
    }
    let n_blocks = u32::try_from(blocks.len()).map_err(|_| bad("too many blocks"))?;
    let mut by_newest: Vec<u32> = (0..n_blocks).collect();
    // Stable: equal bounds (every block of a version-1 table) keep file order.
    by_newest.sort_by_key(|&i| Reverse(blocks.get(i as usize).map_or(0, |b| b.newest)));
    let sliced = if bloom {
        SlicedFilters::build(&blocks, &filters)
    } else {
        None
    };
    match &sliced {
        // The sliced rows hold the members' bits: keep only the others'.
        Some(s) => filters = s.keep_others(&mut blocks, &filters),
        None => filters.shrink_to_fit(),
    }
    Ok(TableZones {
        key_type: expect,
        values,
        zone,
        blocks,
        by_newest,
        filters,
        sliced,
        disk_bytes: 0,
    })
}

/// The Embedded index of one index in one version: each live table's
/// decoded zone maps and filters.
#[derive(Default, Clone)]
pub struct EmbeddedGlobal {
    pub tables: BTreeMap<u64, Arc<TableZones>>,
}

impl EmbeddedGlobal {
    pub fn memory_bytes(&self) -> usize {
        self.tables.values().map(|t| t.memory_bytes()).sum()
    }

    /// Block entries (zone map + filter) held in RAM.
    pub fn entries(&self) -> usize {
        self.tables.values().map(|t| t.blocks.len()).sum()
    }

    pub fn disk_bytes(&self) -> u64 {
        self.tables.values().map(|t| t.disk_bytes).sum()
    }
}

/// Pending per-table structures: built while a table is written, consumed
/// when it is installed. Keyed by file number.
type Pending = tables::Pending<TableZones>;

/// The `embedded` strategy of one index.
pub(crate) struct Embedded {
    id: u32,
    name: String,
    ty: KeyType,
    /// 0: no filters (spatial types, or `bits_per_key=0`).
    bits_per_key: usize,
    tables: Arc<TableCache>,
    pending: Pending,
    sides: Arc<SideFiles>,
}

impl Embedded {
    /// Parameters: `bits_per_key` (see [`parse_params`]).
    pub fn open(cx: &OpenCx<'_>) -> Result<Embedded> {
        let bits = parse_params(&cx.spec.params)?;
        let ty = cx.spec.key_type;
        Ok(Embedded {
            id: cx.id,
            name: cx.spec.name.clone(),
            ty,
            bits_per_key: if ty.is_spatial() { 0 } else { bits },
            tables: cx.tables.clone(),
            pending: Arc::default(),
            sides: cx.sides.clone(),
        })
    }

    /// Reads and decodes this index's meta block in table `f` (`None` if
    /// the table was written before the index existed).
    /// Its side file's block instead for a table that existed before the
    /// index ([`BuildMethod::PerTable`]).
    fn read_table(&self, f: &FileMetaData) -> Result<Option<TableZones>> {
        let t = self.tables.get(f.number, f.file_size)?;
        let name = block_name(self.id);
        let bytes = match t.meta_block(&name)? {
            Some(b) => b,
            None => match self.sides.get(self.id, f.number) {
                Some(side) => side.block(&name)?.ok_or_else(|| {
                    Error::corruption(format!(
                        "side file of table {} for index {:?} lacks {name}",
                        f.number, self.name
                    ))
                })?,
                None => return Ok(None),
            },
        };
        let mut z = decode(&bytes, self.ty, &format!("table {} block {name}", f.number))?;
        z.disk_bytes = bytes.len() as u64;
        Ok(Some(z))
    }
}

impl Embedded {
    fn builder(&self, file: u64, pending: Option<Pending>) -> Builder {
        Builder {
            id: self.id,
            ty: self.ty,
            file,
            pending,
            bits_per_key: self.bits_per_key,
            zone: None,
            blocks: Vec::new(),
            cur_zone: None,
            cur_values: 0,
            cur_newest: 0,
            cur_encoded: Vec::new(),
            block: None,
            continues: false,
            last_key: None,
        }
    }
}

/// Builds one `embedded` index's per-block zone maps and filters while a
/// table is written.
struct Builder {
    id: u32,
    ty: KeyType,
    file: u64,
    /// `None` for a side file's builder (the install reads the file).
    pending: Option<Pending>,
    bits_per_key: usize,
    zone: Option<Zone>,
    blocks: Vec<BuiltBlock>,
    /// The current data block: its zone, value count, largest sequence
    /// number of its values, and encoded values (for the filter).
    cur_zone: Option<Zone>,
    cur_values: u32,
    cur_newest: SeqNo,
    cur_encoded: Vec<Vec<u8>>,
    block: Option<BlockHandle>,
    continues: bool,
    last_key: Option<Vec<u8>>,
}

impl Builder {
    fn close_block(&mut self) {
        let Some(handle) = self.block else {
            return;
        };
        let Some(zone) = self.cur_zone.take() else {
            return;
        };
        let bloom = (self.bits_per_key > 0).then(|| {
            self.cur_encoded.sort_unstable();
            self.cur_encoded.dedup();
            let mut b = BloomBuilder::new(self.bits_per_key);
            for e in self.cur_encoded.drain(..) {
                b.add_key(&e);
            }
            b.finish()
        });
        match &mut self.zone {
            Some(t) => t.widen(&zone),
            None => self.zone = Some(zone.clone()),
        }
        self.blocks.push(BuiltBlock {
            handle,
            continues: self.continues,
            newest: std::mem::take(&mut self.cur_newest),
            values: std::mem::take(&mut self.cur_values),
            zone,
            bloom,
        });
    }
}

impl TableIndexBuilder for Builder {
    fn add(&mut self, user_key: &[u8], seq: SeqNo, block: BlockHandle, attr: Option<IndexValue>) {
        if self.block != Some(block) {
            self.close_block();
            self.block = Some(block);
            self.continues = self.last_key.as_deref() == Some(user_key);
        }
        match &mut self.last_key {
            Some(k) if k.as_slice() == user_key => {}
            Some(k) => {
                k.clear();
                k.extend_from_slice(user_key);
            }
            None => self.last_key = Some(user_key.to_vec()),
        }
        let Some(v) = attr else {
            return;
        };
        let enc = v.encode();
        let z = Zone::of(&v, &enc);
        match &mut self.cur_zone {
            Some(c) => c.widen(&z),
            None => self.cur_zone = Some(z),
        }
        self.cur_values += 1;
        self.cur_newest = self.cur_newest.max(seq);
        if self.bits_per_key > 0 {
            self.cur_encoded.push(enc);
        }
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        self.close_block();
        self.block = None;
        let name = block_name(self.id);
        let blocks = std::mem::take(&mut self.blocks);
        let bytes = encode(
            self.ty,
            self.bits_per_key > 0,
            self.zone.take().as_ref(),
            &blocks,
        );
        // What a reopen will read: decode the bytes rather than keep a
        // second, unchecked copy of the structure.
        let mut t = decode(
            &bytes,
            self.ty,
            &format!("table {} block {name}", self.file),
        )?;
        t.disk_bytes = bytes.len() as u64;
        if let Some(p) = &self.pending {
            lock(p).insert(self.file, Arc::new(t));
        }
        Ok(vec![(name, bytes)])
    }
}

impl IndexStrategy for Embedded {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Embedded
    }

    fn write_path(&self) -> WritePath {
        WritePath::Tables
    }

    fn table_builder(&self, ctx: &TableContext) -> Option<Box<dyn TableIndexBuilder>> {
        Some(Box::new(
            self.builder(ctx.file_number, Some(self.pending.clone())),
        ))
    }

    fn side_builder(&self, file: u64) -> Option<Box<dyn TableIndexBuilder>> {
        Some(Box::new(self.builder(file, None)))
    }

    /// See [`tables::install`].
    fn on_install(
        &self,
        prev: Option<&VersionSlot>,
        ev: &InstallEvent<'_>,
    ) -> Result<Option<VersionSlot>> {
        let prev = prev
            .and_then(|p| p.downcast_ref::<EmbeddedGlobal>())
            .map(|g| &g.tables);
        let tables = tables::install(prev, ev, &self.pending, |f| self.read_table(f))?;
        Ok(Some(Arc::new(EmbeddedGlobal { tables })))
    }

    /// See [`tables::recover`].
    fn on_recover(
        &self,
        files: &[(usize, Arc<FileMetaData>)],
        ready: bool,
    ) -> Result<Option<VersionSlot>> {
        let tables = tables::recover(
            files,
            ready,
            |f| self.read_table(f),
            &format!("block {}", block_name(self.id)),
            &self.name,
        )?;
        Ok(Some(Arc::new(EmbeddedGlobal { tables })))
    }

    fn covers_table(&self, slot: Option<&VersionSlot>, file: u64) -> bool {
        slot.and_then(|s| s.downcast_ref::<EmbeddedGlobal>())
            .is_some_and(|g| g.tables.contains_key(&file))
    }

    fn covers(&self, slot: Option<&VersionSlot>, version: &Version) -> bool {
        let g = slot.and_then(|s| s.downcast_ref::<EmbeddedGlobal>());
        tables::covers(g.map(|g| &g.tables), version)
    }

    fn build_method(&self) -> BuildMethod {
        BuildMethod::PerTable
    }

    /// Algorithms 5 and 8: memtables, then tables level by level.
    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Hits> {
        cx.view.pause();
        let empty = EmbeddedGlobal::default();
        let global = cx.slot_as::<EmbeddedGlobal>().unwrap_or(&empty);
        let def = cx.def;
        let mut s = Search {
            def,
            pred: cx.pred,
            view: cx.view,
            keys_only: cx.opts.keys_only,
            acc: Results::new(cx.opts.limit),
            validations: 0,
            stale: 0,
            exact: 0,
            blocks_read: 0,
        };
        s.memtables();
        let r = s.tables(global, cx.building, profile);
        let c = &def.counters;
        c.validations.fetch_add(s.validations, Relaxed);
        c.failed.fetch_add(s.stale, Relaxed);
        c.exact.fetch_add(s.exact, Relaxed);
        r?;
        profile.data_blocks_read += s.blocks_read;
        profile.candidates = s.validations;
        profile.stale = s.stale;
        let (hits, min_blocks) = s.acc.finish();
        profile.min_data_blocks = min_blocks;
        Ok(hits.into())
    }

    fn stats(&self, slot: Option<&VersionSlot>, s: &mut IndexStats) {
        let g = slot.and_then(|s| s.downcast_ref::<EmbeddedGlobal>());
        s.global_entries = g.map_or(0, |g| g.entries() as u64);
        s.memory_bytes = g.map_or(0, |g| g.memory_bytes() as u64);
        s.disk_bytes = g.map_or(0, |g| g.disk_bytes());
    }
}

/// The newest entry of `key` at `snapshot` in `mems` (newest first).
fn newest_in_mems(mems: &[Arc<MemTable>], key: &[u8], snapshot: SeqNo) -> Option<MemGet> {
    mems.iter().find_map(|m| m.get(key, snapshot))
}

/// One query's walk over the components.
struct Search<'a, 'v> {
    def: &'a IndexMeta,
    pred: &'a Predicate,
    view: &'a QueryView<'v>,
    keys_only: bool,
    acc: Results,
    validations: u64,
    stale: u64,
    exact: u64,
    blocks_read: u64,
}

impl Search<'_, '_> {
    fn keep(&self, value: Vec<u8>) -> Option<Vec<u8>> {
        (!self.keys_only).then_some(value)
    }

    /// Memtables, newest first; every match is validated exactly against
    /// the memtables up to its own (which may hold newer versions).
    fn memtables(&mut self) {
        let snapshot = self.view.snapshot;
        for (i, m) in self.view.mems.iter().enumerate() {
            // Newest first: once K are valid, the rest are not validated.
            let mut found = side::candidates(m, self.def.id, self.pred);
            found.sort_unstable_by_key(|c| Reverse(c.1));
            for (key, seq) in found {
                if seq > snapshot || self.acc.full_before(seq) {
                    continue;
                }
                self.validations += 1;
                // `i` enumerates `mems`, so the range is in bounds.
                let newer = self.view.mems.get(..=i).unwrap_or_default();
                match newest_in_mems(newer, &key, snapshot) {
                    Some(MemGet::Value(s, v)) if s == seq => {
                        let v = self.keep(v);
                        self.acc.push(key, seq, v, None);
                    }
                    _ => self.stale += 1,
                }
            }
        }
    }

    /// GetLite against a newer table `f`: key range and in-memory primary
    /// key filter, then an exact point lookup only if the filter says
    /// "maybe". True if `f` holds a version of `key` newer than `seq`.
    fn newer_table_holds(&mut self, f: &FileMetaData, key: &[u8], seq: SeqNo) -> Result<bool> {
        let snapshot = self.view.snapshot;
        if f.smallest_seq > snapshot
            || f.largest_seq <= seq
            || key < key::user_key(&f.smallest)
            || key > key::user_key(&f.largest)
        {
            return Ok(false);
        }
        let t = self.view.tables.get(f.number, f.file_size)?;
        if !t.key_may_match(key) {
            return Ok(false);
        }
        self.exact += 1;
        self.blocks_read += 1;
        Ok(t.get(key, snapshot)?.is_some_and(|found| found.seq > seq))
    }

    /// Validation of a match `(key, seq)` read from table `t`, the `pos`-th
    /// table of `level`. `continues`: the match is in its block's first key
    /// run and that key continues the previous block.
    fn valid_in_table(
        &mut self,
        t: &Table,
        level: usize,
        pos: usize,
        continues: bool,
        key: &[u8],
        seq: SeqNo,
    ) -> Result<bool> {
        let snapshot = self.view.snapshot;
        // Memtables: exact.
        match newest_in_mems(&self.view.mems, key, snapshot) {
            Some(MemGet::Value(s, _)) | Some(MemGet::Deleted(s)) if s > seq => return Ok(false),
            _ => {}
        }
        // The same table: a newer version at the end of the previous block.
        if continues {
            self.exact += 1;
            self.blocks_read += 1;
            if t.get(key, snapshot)?.is_some_and(|found| found.seq > seq) {
                return Ok(false);
            }
        }
        // Newer tables: L0 files before this one, then one file per level
        // above this one.
        let version = Arc::clone(&self.view.version);
        let l0 = version.levels.first().map_or(&[][..], |l| {
            if level == 0 {
                l.get(..pos).unwrap_or(l)
            } else {
                l.as_slice()
            }
        });
        for f in l0 {
            if self.newer_table_holds(f, key, seq)? {
                return Ok(false);
            }
        }
        for lv in 1..level.min(version.num_levels()) {
            let file = version
                .find_file(lv, key)
                .and_then(|i| version.levels.get(lv)?.get(i));
            if let Some(file) = file {
                if self.newer_table_holds(file, key, seq)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Scans one data block of table `f` (the `pos`-th of `level`): for
    /// each key, the newest version visible at the snapshot; those that
    /// are puts and match are validated. The block's first key continues
    /// the previous block if `continues` or if it equals `after` (that
    /// block's last key); returns the block's last key (`None` if the
    /// block yields no entry).
    #[allow(clippy::too_many_arguments)]
    fn scan_block(
        &mut self,
        t: &Table,
        f: &FileMetaData,
        level: usize,
        pos: usize,
        handle: BlockHandle,
        continues: bool,
        after: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        let snapshot = self.view.snapshot;
        // The current key run: its key, whether it is the block's first
        // run, whether its visible version was seen.
        let mut run: Option<Vec<u8>> = None;
        let mut first_run = true;
        let mut continues = continues;
        let mut visible_seen = false;
        t.for_each_data_block_entry(handle, |key, seq, kind, value| {
            match &mut run {
                Some(k) if k.as_slice() == key => {}
                Some(k) => {
                    first_run = false;
                    visible_seen = false;
                    k.clear();
                    k.extend_from_slice(key);
                }
                None => {
                    continues |= after == Some(key);
                    run = Some(key.to_vec());
                }
            }
            // A version newer than the snapshot hides nothing; an older one
            // after a visible version of the same key is shadowed by it.
            if seq > snapshot || visible_seen {
                return Ok(());
            }
            visible_seen = true;
            if kind != ValueKind::Value || self.acc.full_before(seq) {
                return Ok(());
            }
            match self.def.extract(value, None) {
                Ok(v) if self.pred.matches(&v) => {}
                _ => return Ok(()),
            }
            self.validations += 1;
            if !self.valid_in_table(t, level, pos, first_run && continues, key, seq)? {
                self.stale += 1;
                return Ok(());
            }
            let value = self.keep(value.to_vec());
            self.acc
                .push(key.to_vec(), seq, value, Some((f.number, handle.offset)));
            Ok(())
        })?;
        Ok(run)
    }

    /// Every data block of table `f` (the `pos`-th of `level`), which has
    /// no zone maps yet: each block's first key continues the previous
    /// block's last one if they are equal.
    fn scan_table(&mut self, f: &FileMetaData, level: usize, pos: usize) -> Result<()> {
        let t = self.view.tables.get(f.number, f.file_size)?;
        let mut last: Option<Vec<u8>> = None;
        for h in t.data_block_handles()? {
            self.blocks_read += 1;
            last = self.scan_block(&t, f, level, pos, h, false, last.as_deref())?;
        }
        Ok(())
    }

    /// The tables, block by block in descending order of the blocks'
    /// `newest` bound (across tables and levels), pruning a table by its
    /// zone map, a block by its zone map and filter. Stops at the first
    /// block whose bound is older than K known results: every block left
    /// has a bound at most as new. The visiting order does not change the
    /// answer (each match is validated against the components newer than
    /// its own, whatever was read before), only when the walk can stop.
    /// `building`: a table without zone maps (not covered yet by the
    /// online build) is scanned whole, at its `largest_seq`.
    fn tables(
        &mut self,
        global: &EmbeddedGlobal,
        building: bool,
        profile: &mut QueryProfile,
    ) -> Result<()> {
        let probe = Probe::new(self.pred);
        let version = Arc::clone(&self.view.version);
        let mut walks: Vec<TableWalk<'_>> = Vec::new();
        // (bound, walk, step): a max-heap on the bound; ties go to the
        // earlier walk (newer level, then L0 newest first / key order).
        let mut heap: BinaryHeap<(SeqNo, Reverse<usize>, Step)> = BinaryHeap::new();
        for (level, files) in version.levels.iter().enumerate() {
            for (pos, f) in files.iter().enumerate() {
                if f.smallest_seq > self.view.snapshot {
                    continue;
                }
                let zones = match global.tables.get(&f.number) {
                    Some(tz) if !tz.may_match(&probe) => continue,
                    Some(tz) => Some(&**tz),
                    None if building => None,
                    None => {
                        return Err(Error::corruption(format!(
                            "embedded index {:?} has no zone maps for live table {}",
                            self.def.spec.name, f.number
                        )))
                    }
                };
                let mut w = TableWalk {
                    f,
                    level,
                    pos,
                    zones,
                    next: 0,
                    cands: None,
                    table: None,
                    read: false,
                };
                let first = match zones {
                    Some(_) => w.next_block(&probe),
                    None => Some((f.largest_seq, Step::Whole)),
                };
                if let Some((bound, step)) = first {
                    heap.push((bound, Reverse(walks.len()), step));
                    walks.push(w);
                }
            }
        }
        while let Some((bound, Reverse(wi), step)) = heap.pop() {
            // Top K: every entry left is at most `bound`, older than K
            // known results.
            if self.acc.full_before(bound) {
                break;
            }
            let Some(w) = walks.get_mut(wi) else {
                continue;
            };
            w.read = true;
            let (f, level, pos) = (w.f, w.level, w.pos);
            match step {
                Step::Whole => self.scan_table(f, level, pos)?,
                Step::Block(i) => {
                    let Some(b) = w.zones.and_then(|z| z.blocks.get(i as usize)) else {
                        continue;
                    };
                    let t = match &w.table {
                        Some(t) => Arc::clone(t),
                        None => {
                            let t = self.view.tables.get(f.number, f.file_size)?;
                            w.table = Some(Arc::clone(&t));
                            t
                        }
                    };
                    if let Some((bound, step)) = w.next_block(&probe) {
                        heap.push((bound, Reverse(wi), step));
                    }
                    self.blocks_read += 1;
                    self.scan_block(&t, f, level, pos, b.handle, b.continues, None)?;
                }
            }
        }
        profile.tables_skipped += walks.iter().filter(|w| !w.read).count() as u64;
        Ok(())
    }
}

/// What the walk reads next from a table.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// Every data block (a table without zone maps).
    Whole,
    /// The data block `blocks[i]` of the table's zone maps.
    Block(u32),
}

/// One table in the newest-first walk over blocks.
struct TableWalk<'g> {
    f: &'g FileMetaData,
    level: usize,
    pos: usize,
    /// `None`: no zone maps yet (online build).
    zones: Option<&'g TableZones>,
    /// Position in `zones.by_newest` (or in `cands`) of the next block to
    /// consider.
    next: usize,
    /// An equality lookup on a table with sliced filters: the blocks that
    /// may match, in `by_newest` order (computed at the first step).
    cands: Option<Vec<u32>>,
    table: Option<Arc<Table>>,
    /// Some block of the table was read.
    read: bool,
}

impl TableWalk<'_> {
    /// The next block, by descending `newest`, that may match `probe`,
    /// with its bound (never above the table's `largest_seq`).
    fn next_block(&mut self, probe: &Probe) -> Option<(SeqNo, Step)> {
        let tz = self.zones?;
        if let (Some(h), Some(s)) = (probe.hash, &tz.sliced) {
            let cands = self.cands.get_or_insert_with(|| s.candidates(tz, probe, h));
            let &i = cands.get(self.next)?;
            self.next += 1;
            let b = tz.blocks.get(i as usize)?;
            return Some((b.newest.min(self.f.largest_seq), Step::Block(i)));
        }
        while let Some(&i) = tz.by_newest.get(self.next) {
            self.next += 1;
            match tz.blocks.get(i as usize) {
                Some(b) if b.may_match(probe, &tz.filters) => {
                    return Some((b.newest.min(self.f.largest_seq), Step::Block(i)))
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, IndexSpec, Options, QueryOptions};

    /// The zone map and serialized filter of a block holding `vals`; the
    /// table's zone map widened to include it.
    fn block_zone(
        vals: &[IndexValue],
        bits_per_key: usize,
        table: &mut Option<Zone>,
    ) -> (Zone, Vec<u8>) {
        let mut zone: Option<Zone> = None;
        let mut f = BloomBuilder::new(bits_per_key);
        for v in vals {
            let e = v.encode();
            let z = Zone::of(v, &e);
            match &mut zone {
                Some(c) => c.widen(&z),
                None => zone = Some(z),
            }
            f.add_key(&e);
        }
        let zone = zone.unwrap();
        match table {
            Some(t) => t.widen(&zone),
            None => *table = Some(zone.clone()),
        }
        (zone, f.finish())
    }

    fn sample_blocks(ty: KeyType, bloom: bool) -> (Option<Zone>, Vec<BuiltBlock>) {
        let mut blocks = Vec::new();
        let mut table: Option<Zone> = None;
        for b in 0..4u64 {
            let vals: Vec<IndexValue> = (0..5)
                .map(|i| {
                    let x = (b * 10 + i) as f64;
                    match ty {
                        KeyType::I64 => IndexValue::I64(x as i64 - 20),
                        KeyType::F64 => IndexValue::F64(x / 4.0),
                        KeyType::String => IndexValue::Str(format!("w{x}")),
                        KeyType::Point => IndexValue::Point([x, -x]),
                        KeyType::Rect => IndexValue::Rect([x, 0.0, x + 2.0, 3.0]),
                    }
                })
                .collect();
            let (zone, filter) = block_zone(&vals, 10, &mut table);
            blocks.push(BuiltBlock {
                handle: BlockHandle::new(b * 1000, 900),
                continues: b == 2,
                newest: [40, 7, 90, 7][b as usize],
                values: vals.len() as u32,
                zone,
                bloom: bloom.then_some(filter),
            });
        }
        (table, blocks)
    }

    /// The sliced filters pick exactly the blocks the per-block filters
    /// and zones pick, in `by_newest` order: random tables of 1–300 blocks
    /// (several groups of 64, several filter shapes, some too large or too
    /// rare to slice), probed with present and absent values.
    #[test]
    fn sliced_filters_pick_the_blocks_the_block_filters_pick() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let mut sliced = 0;
        for round in 0..40 {
            // The paper's 100 bits per value (1–3 filter blocks, 30
            // probes) and 10 (one block, 7 probes).
            let bits_per_key = if round % 2 == 0 { 100 } else { 10 };
            let n = 1 + rnd(300);
            let mut blocks = Vec::new();
            let mut table: Option<Zone> = None;
            for b in 0..n {
                let count = if rnd(10) == 0 {
                    60 + rnd(100)
                } else {
                    1 + rnd(12)
                };
                let vals: Vec<IndexValue> = (0..count)
                    .map(|_| IndexValue::I64(rnd(2000) as i64))
                    .collect();
                let (zone, filter) = block_zone(&vals, bits_per_key, &mut table);
                blocks.push(BuiltBlock {
                    handle: BlockHandle::new(b * 1000, 900),
                    continues: false,
                    newest: rnd(50),
                    values: vals.len() as u32,
                    zone,
                    bloom: Some(filter),
                });
            }
            let bytes = encode(KeyType::I64, true, table.as_ref(), &blocks);
            let t = decode(&bytes, KeyType::I64, "test").unwrap();
            let Some(s) = t.sliced.as_ref() else {
                continue;
            };
            sliced += 1;
            for v in 0..2100i64 {
                let probe = Probe::new(&Predicate::Eq(IndexValue::I64(v)));
                let h = probe.hash.unwrap();
                // From the filters as written, not the decoded table's.
                let want: Vec<u32> = t
                    .by_newest
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let raw = blocks[i as usize].bloom.as_ref().unwrap();
                        BloomView::parse(raw).unwrap().may_contain_hash(h)
                            && t.blocks[i as usize].zone.may_match(&probe)
                    })
                    .collect();
                assert_eq!(s.candidates(&t, &probe, h), want, "round {round} value {v}");
            }
        }
        assert!(sliced >= 20, "only {sliced} of 40 tables were sliced");
    }

    #[test]
    fn codec_roundtrip() {
        for ty in KeyType::ALL {
            let bloom = !ty.is_spatial();
            let (zone, blocks) = sample_blocks(ty, bloom);
            let bytes = encode(ty, bloom, zone.as_ref(), &blocks);
            let t = decode(&bytes, ty, "test").unwrap();
            assert_eq!(t.values, 20);
            assert_eq!(t.zone, zone);
            assert_eq!(t.blocks.len(), blocks.len());
            for (d, b) in t.blocks.iter().zip(&blocks) {
                assert_eq!(d.handle, b.handle);
                assert_eq!(d.continues, b.continues);
                assert_eq!(d.values, b.values);
                assert_eq!(d.newest, b.newest);
                assert_eq!(d.zone, b.zone);
                assert_eq!(d.bloom.is_some(), bloom);
                // The table's filter buffer holds each block's bit array
                // where its `BlockFilter` says.
                if let (Some(f), Some(raw)) = (&d.bloom, &b.bloom) {
                    let want = BloomView::parse(raw).unwrap();
                    let at = f.off as usize..(f.off + f.len) as usize;
                    assert_eq!(t.filters.get(at), Some(want.bits()));
                    assert_eq!((f.k, f.num_blocks), (want.k(), want.num_blocks()));
                }
            }
            // Filters answer for the values they were built from.
            if ty == KeyType::I64 {
                let hit = Probe::new(&Predicate::Eq(IndexValue::I64(-20)));
                assert!(t.blocks[0].may_match(&hit, &t.filters));
                assert!(
                    !t.blocks[1].may_match(&hit, &t.filters),
                    "outside the zone map"
                );
                let gap = Probe::new(&Predicate::Eq(IndexValue::I64(-13)));
                assert!(t.may_match(&gap), "inside the table zone map");
                assert!(
                    !t.blocks[0].may_match(&gap, &t.filters),
                    "outside the block zone map"
                );
            }
            // Newest first; equal bounds in file order.
            assert_eq!(t.by_newest, [2, 0, 1, 3]);
            assert!(decode(&bytes, KeyType::I64, "test").is_err() || ty == KeyType::I64);
            // Empty table: no zone, no blocks.
            let empty = encode(ty, bloom, None, &[]);
            let e = decode(&empty, ty, "test").unwrap();
            assert!(e.zone.is_none() && e.blocks.is_empty() && e.values == 0);
        }
    }

    /// The version-1 layout: [`encode`] without `newest`.
    fn encode_v1(ty: KeyType, bloom: bool, zone: Option<&Zone>, blocks: &[BuiltBlock]) -> Vec<u8> {
        let mut out = vec![FORMAT_V1, key_type_byte(ty), u8::from(bloom)];
        put_varint64(&mut out, blocks.iter().map(|b| u64::from(b.values)).sum());
        put_varint64(&mut out, blocks.len() as u64);
        if let Some(z) = zone {
            z.encode(&mut out);
        }
        for b in blocks {
            put_varint64(&mut out, b.handle.offset);
            put_varint64(&mut out, b.handle.size);
            out.push(u8::from(b.continues));
            put_varint64(&mut out, u64::from(b.values));
            b.zone.encode(&mut out);
            if bloom {
                put_length_prefixed(&mut out, b.bloom.as_deref().unwrap_or_default());
            }
        }
        out
    }

    #[test]
    fn codec_reads_version_1_without_newest() {
        for ty in KeyType::ALL {
            let bloom = !ty.is_spatial();
            let (zone, blocks) = sample_blocks(ty, bloom);
            let bytes = encode_v1(ty, bloom, zone.as_ref(), &blocks);
            let t = decode(&bytes, ty, "test").unwrap();
            assert_eq!(t.blocks.len(), blocks.len());
            for (d, b) in t.blocks.iter().zip(&blocks) {
                assert_eq!(d.handle, b.handle);
                assert_eq!(d.zone, b.zone);
                assert_eq!(d.newest, SeqNo::MAX, "unknown: the table's bound applies");
            }
            assert_eq!(t.by_newest, [0, 1, 2, 3], "file order");
            for cut in 0..bytes.len() {
                assert!(decode(&bytes[..cut], ty, "test").is_err());
            }
        }
    }

    #[test]
    fn codec_rejects_newest_beyond_max_seq() {
        let (zone, mut blocks) = sample_blocks(KeyType::I64, true);
        blocks[1].newest = key::MAX_SEQ;
        let ok = encode(KeyType::I64, true, zone.as_ref(), &blocks);
        assert_eq!(decode(&ok, KeyType::I64, "test").unwrap().by_newest[0], 1);
        blocks[1].newest = key::MAX_SEQ + 1;
        let bad = encode(KeyType::I64, true, zone.as_ref(), &blocks);
        assert!(decode(&bad, KeyType::I64, "test")
            .unwrap_err()
            .is_corruption());
    }

    #[test]
    fn codec_rejects_truncation_and_bad_lengths() {
        for ty in KeyType::ALL {
            let bloom = !ty.is_spatial();
            let (zone, blocks) = sample_blocks(ty, bloom);
            let bytes = encode(ty, bloom, zone.as_ref(), &blocks);
            for cut in 0..bytes.len() {
                let e = decode(&bytes[..cut], ty, "test").unwrap_err();
                assert!(e.is_corruption(), "{e}");
            }
            let mut extra = bytes.clone();
            extra.push(0);
            assert!(decode(&extra, ty, "test").is_err());
            // Header: version, type, flag, value count (20), block count (4).
            assert_eq!(&bytes[..5], &[2, key_type_byte(ty), u8::from(bloom), 20, 4]);
            for (at, v) in [
                (3, 21u8),
                (3, 19),
                (4, 5),
                (4, 3),
                (4, 0x7f),
                (2, 7),
                (0, 3),
                (0, 0),
            ] {
                let mut b = bytes.clone();
                b[at] = v;
                assert!(decode(&b, ty, "test").is_err(), "{ty:?} byte {at} = {v}");
            }
            if !ty.is_spatial() {
                // The table zone's minimum: its length prefix grows / shrinks.
                for v in [bytes[5] + 1, bytes[5] - 1, 0x7f] {
                    let mut b = bytes.clone();
                    b[5] = v;
                    assert!(decode(&b, ty, "test").is_err(), "{ty:?} zone length {v}");
                }
            }
            // Any single corrupted byte: an error or a decode, never a panic.
            for at in 0..bytes.len() {
                for x in [0x01, 0x40, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[at] ^= x;
                    let _ = decode(&b, ty, "test");
                }
            }
        }
    }

    #[test]
    fn params() {
        assert_eq!(parse_params(&BTreeMap::new()).unwrap(), 100);
        let p = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert_eq!(parse_params(&p("bits_per_key", "0")).unwrap(), 0);
        assert!(parse_params(&p("bits_per_key", "-1")).is_err());
        assert!(parse_params(&p("bits_per_key", "5000")).is_err());
        assert!(parse_params(&p("delta", "1")).is_err());
    }

    fn doc(n: i64, pad: usize) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "n": n,
            "p": [n as f64, 1.0],
            "pad": "x".repeat(pad),
        }))
        .unwrap()
    }

    fn open(dir: &std::path::Path, bits: &str) -> Db {
        // No automatic compaction: tests control the shape of the tree.
        let opts = Options::small_for_tests()
            .background_work(false)
            .l0_compaction_trigger(20)
            .l0_slowdown_trigger(40)
            .l0_stop_trigger(60);
        let db = Db::open(dir, opts).unwrap();
        db.create_index(
            IndexSpec::field("by_n", "n", KeyType::I64)
                .strategy("embedded")
                .param("bits_per_key", bits),
        )
        .unwrap();
        db.create_index(IndexSpec::field("by_p", "p", KeyType::Point).strategy("embedded"))
            .unwrap();
        db
    }

    #[test]
    fn zone_maps_and_filters_prune_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), "100");
        // Even values 0..400, several per 512-byte block, in tables.
        for i in 0..200i64 {
            db.put(format!("k{i:04}").as_bytes(), &doc(2 * i, 40))
                .unwrap();
        }
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        let q = |pred: Predicate| {
            let (hits, p) = db
                .query_profiled("by_n", &pred, QueryOptions::default())
                .unwrap();
            (hits.into_vec(), p)
        };
        // Outside every zone map: no data block read.
        for pred in [
            Predicate::Eq(IndexValue::I64(1000)),
            Predicate::Eq(IndexValue::I64(-3)),
            Predicate::Range(IndexValue::I64(401), IndexValue::I64(5000)),
        ] {
            let (hits, p) = q(pred);
            assert!(hits.is_empty());
            assert_eq!(p.data_blocks_read, 0, "{p:?}");
        }
        let (hits, p) = db
            .query_profiled(
                "by_p",
                &Predicate::Within([500.0, 0.0, 600.0, 2.0]),
                QueryOptions::default(),
            )
            .unwrap();
        assert!(hits.is_empty());
        assert_eq!(p.data_blocks_read, 0, "{p:?}");
        // A hit reads its block (and the filters keep the others out).
        let (hits, p) = q(Predicate::Eq(IndexValue::I64(100)));
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].key, b"k0050");
        assert_eq!(p.min_data_blocks, 1);
        assert!(p.data_blocks_read <= 2, "{p:?}");
        // Odd values are inside the zone maps but in no filter.
        let mut read = 0;
        for v in (1..400).step_by(2) {
            let (hits, p) = q(Predicate::Eq(IndexValue::I64(v)));
            assert!(hits.is_empty());
            read += p.data_blocks_read;
        }
        assert!(read <= 5, "{read} blocks read for 200 absent values");
        // A range reads the blocks of its zone.
        let (hits, p) = q(Predicate::Range(IndexValue::I64(10), IndexValue::I64(20)));
        assert_eq!(hits.len(), 6);
        assert!(p.data_blocks_read >= 1 && p.data_blocks_read <= 4, "{p:?}");
        let info = db.indexes();
        let by_n = &info.iter().find(|i| i.spec.name == "by_n").unwrap().stats;
        assert!(by_n.memory_bytes > 0 && by_n.disk_bytes > 0 && by_n.global_entries > 0);
    }

    #[test]
    fn without_filters_absent_values_read_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), "0");
        for i in 0..200i64 {
            db.put(format!("k{i:04}").as_bytes(), &doc(2 * i, 40))
                .unwrap();
        }
        db.flush().unwrap();
        let (hits, p) = db
            .query_profiled(
                "by_n",
                &Predicate::Eq(IndexValue::I64(101)),
                QueryOptions::default(),
            )
            .unwrap();
        assert!(hits.is_empty());
        assert!(p.data_blocks_read >= 1, "zone maps alone cannot skip {p:?}");
    }

    #[test]
    fn versions_spanning_blocks_of_one_table() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), "100");
        // Ten versions of one key, each larger than a data block (512 bytes
        // in tests), in one table.
        for v in 0..10i64 {
            db.put(b"a", &doc(v, 700)).unwrap();
        }
        db.put(b"b", &doc(3, 10)).unwrap();
        db.flush().unwrap();
        let exact = |db: &Db| {
            db.indexes()
                .iter()
                .find(|i| i.spec.name == "by_n")
                .unwrap()
                .stats
                .exact_checks
        };
        for v in 0..10i64 {
            let before = exact(&db);
            let (hits, p) = db
                .query_profiled(
                    "by_n",
                    &Predicate::Eq(IndexValue::I64(v)),
                    QueryOptions::default(),
                )
                .unwrap();
            let mut keys: Vec<&[u8]> = hits.iter().map(|h| h.key).collect();
            keys.sort();
            match v {
                9 => assert_eq!(keys, [b"a"]),
                3 => assert_eq!(keys, [b"b"]),
                _ => assert!(keys.is_empty(), "{v}: {keys:?}"),
            }
            if v < 9 {
                // The newer version sits in the previous block: one exact
                // lookup in the same table finds it.
                assert!(exact(&db) > before, "{v}: {p:?}");
            }
        }
    }

    #[test]
    fn next_and_embedded_indexes_share_the_table_observer() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::small_for_tests().background_work(false);
        let mut db = Db::open(dir.path(), opts.clone()).unwrap();
        db.create_index(IndexSpec::field("n_next", "n", KeyType::I64))
            .unwrap();
        db.create_index(IndexSpec::field("n_emb", "n", KeyType::I64).strategy("embedded"))
            .unwrap();
        let mut x = 7u64;
        let mut rnd = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for step in 0..1500 {
            let k = format!("k{:03}", rnd(120));
            match rnd(100) {
                0..=59 => db
                    .put(k.as_bytes(), &doc(rnd(30) as i64, rnd(60) as usize))
                    .unwrap(),
                60..=74 => db.delete(k.as_bytes()).unwrap(),
                75..=79 => db.flush().unwrap(),
                80..=81 => db.compact_range(None, None).unwrap(),
                82 => {
                    drop(db);
                    db = Db::open(dir.path(), opts.clone()).unwrap();
                }
                _ => {
                    let a = rnd(30) as i64;
                    let pred = if rnd(2) == 0 {
                        Predicate::Eq(IndexValue::I64(a))
                    } else {
                        Predicate::Range(IndexValue::I64(a), IndexValue::I64(a + rnd(8) as i64))
                    };
                    let o = QueryOptions::default().limit(rnd(5) as usize + 1);
                    for o in [QueryOptions::default(), o] {
                        let a = db.query("n_next", &pred, o).unwrap();
                        let b = db.query("n_emb", &pred, o).unwrap();
                        assert_eq!(a, b, "step {step}: {pred:?} {o:?}");
                    }
                }
            }
        }
        db.create_index(IndexSpec::field("p_emb", "p", KeyType::Point).strategy("embedded"))
            .unwrap();
        for name in ["n_next", "n_emb", "p_emb"] {
            let c = db.check_index(name).unwrap();
            assert!(c.ok(), "{c:?}");
        }
    }

    #[test]
    fn getlite_detects_updates_in_newer_tables() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), "100");
        for i in 0..50i64 {
            db.put(format!("k{i:04}").as_bytes(), &doc(5, 10)).unwrap();
        }
        db.flush().unwrap();
        // Newer versions in a newer table and in the memtable.
        for i in 0..10i64 {
            db.put(format!("k{i:04}").as_bytes(), &doc(6, 10)).unwrap();
        }
        db.flush().unwrap();
        for i in 10..15i64 {
            db.delete(format!("k{i:04}").as_bytes()).unwrap();
        }
        let before = db.indexes();
        let (hits, p) = db
            .query_profiled(
                "by_n",
                &Predicate::Eq(IndexValue::I64(5)),
                QueryOptions::default(),
            )
            .unwrap();
        assert_eq!(hits.len(), 35);
        assert!(hits.iter().all(|h| h.key >= b"k0015".as_slice()));
        assert_eq!(p.stale, 15, "{p:?}");
        let after = db.indexes();
        let s = |v: &[crate::index::IndexInfo]| {
            v.iter()
                .find(|i| i.spec.name == "by_n")
                .unwrap()
                .stats
                .clone()
        };
        let (b, a) = (s(&before), s(&after));
        assert_eq!(a.validations - b.validations, p.candidates);
        assert_eq!(a.validations_failed - b.validations_failed, 15);
        // The 10 keys updated in the newer table need an exact lookup.
        assert!(a.exact_checks - b.exact_checks >= 10);
        // Top K: the newest matches come from the newer table.
        let hits = db
            .query(
                "by_n",
                &Predicate::Eq(IndexValue::I64(6)),
                QueryOptions::default().limit(3),
            )
            .unwrap();
        let keys: Vec<&[u8]> = hits.iter().map(|h| h.key).collect();
        assert_eq!(keys, [b"k0009", b"k0008", b"k0007"]);
    }
}
