//! NEXT's per-table component (NEXT §3.2, Algorithm 1, §4 value-aware
//! splitting) and the global-index entries it yields.
//!
//! For every table and NEXT index, the table builder's observer collects
//! `(attribute value, data block, entry position, sequence number)` for each
//! entry; at the end the pairs are
//! sorted (scalars by value, spatial values along a Hilbert curve of their
//! centres) and written as *secondary index blocks* (meta blocks
//! `next.<id>.<n>`, ~4 KiB each). Each block is covered by one or more
//! *global entries* — a value range (scalars) or rectangle (spatial) and the
//! slice of the block it covers — cut wherever adding the next value would
//! grow the range by more than δ (value-aware splitting). The global entries
//! and the table's data-block handles are written to a directory block
//! `next.<id>.dir`, which is all recovery reads to rebuild the global index.
//!
//! Version 2 makes both levels searchable and seq-aware: a secondary block
//! ends with a fixed-width offset array (binary search by value without
//! decoding the block) and stores each entry's sequence number delta-coded
//! against the block's minimum; every global entry carries the maximum
//! sequence number of its slice, so a top-K query can visit slices and
//! entries newest first across tables. Byte formats: `docs/format/next.md`.

#![deny(clippy::indexing_slicing)]

use std::cmp::Ordering;

use super::packed::PackedTree;

use super::sketch::{Sketch, SliceShape};
use crate::index::value::{intersects, IndexValue, KeyType, Predicate};
use strata_lsm::coding::{
    decode_fixed32, decode_fixed64, get_length_prefixed, get_varint64, put_length_prefixed,
    put_varint64, varint_len,
};
use strata_lsm::error::{Error, Result};
use strata_lsm::key::SeqNo;
use strata_lsm::sstable::filter::{hash64, BloomBuilder, BloomFilter};
use strata_lsm::sstable::{BlockHandle, MetaBlockId, Table};

/// Where an indexed entry is: position of its data block in the handle
/// table, and position of the entry inside that block.
pub type Loc = (u32, u32);

/// Target bytes of one secondary index block.
pub const SEC_BLOCK_BYTES: usize = 4096;
/// Default bits per distinct value of a table's value filter (about 1%
/// false positives); 0 writes none.
pub const DEFAULT_FILTER_BITS: u8 = 10;
/// Default most entries per global entry of a spatial index (0: no cap).
pub const DEFAULT_SPATIAL_SLICE: u32 = 32;

/// How a table's NEXT blocks are cut: the index's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Value-aware splitting threshold.
    pub delta: Delta,
    /// Bits per distinct value of the value filter (scalars; 0: none).
    pub filter_bits: u8,
    /// Most entries per global entry of a spatial index (0: no cap).
    pub spatial_slice: u32,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            delta: Delta::Auto,
            filter_bits: DEFAULT_FILTER_BITS,
            spatial_slice: DEFAULT_SPATIAL_SLICE,
        }
    }
}
/// Directory (and with it secondary block) layout version; see
/// `docs/format/next.md`.
const DIR_VERSION: u8 = 2;
/// Bytes after the offset array of a secondary block: `fixed64 base_seq ‖
/// fixed32 count`.
const SEC_TRAILER: usize = 12;

/// The splitting threshold δ of an index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delta {
    /// One global entry per secondary index block (the paper's baseline).
    Off,
    /// δ = 8 × the table's mean gap between consecutive sorted values
    /// (scalars), or 8 × the mean spacing `sqrt(area / n)` of the table's
    /// bounding box (spatial); see `docs/format/next.md`.
    Auto,
    /// A fixed δ in the attribute's units (spatial: growth of the
    /// rectangle's half-perimeter).
    Fixed(f64),
}

impl Delta {
    pub fn parse(s: &str) -> Result<Delta> {
        match s {
            "auto" => Ok(Delta::Auto),
            "off" => Ok(Delta::Off),
            _ => match s.parse::<f64>() {
                Ok(v) if v > 0.0 && v.is_finite() => Ok(Delta::Fixed(v)),
                _ => Err(Error::invalid(format!(
                    "delta must be auto, off or a positive number, not {s:?}"
                ))),
            },
        }
    }
}

/// The range covered by a global entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Envelope {
    /// Encoded `[lo, hi]`.
    Scalar(Vec<u8>, Vec<u8>),
    Rect([f64; 4]),
}

impl Envelope {
    /// A scalar envelope's minimum.
    fn lo(&self) -> Option<&[u8]> {
        match self {
            Envelope::Scalar(lo, _) => Some(lo),
            Envelope::Rect(_) => None,
        }
    }

    /// A scalar envelope's maximum.
    fn hi(&self) -> Option<&[u8]> {
        match self {
            Envelope::Scalar(_, hi) => Some(hi),
            Envelope::Rect(_) => None,
        }
    }
}

/// A predicate prepared once per query: scalar bounds encoded once (so
/// that every comparison is a byte comparison of order-preserving
/// encodings), the spatial window, and the predicate for exact spatial
/// tests.
pub struct Probe<'a> {
    /// Encoded inclusive scalar bounds; `None` for spatial predicates.
    pub bounds: Option<(Vec<u8>, Vec<u8>)>,
    /// Spatial window (for equality, the value's MBR).
    pub window: Option<[f64; 4]>,
    /// For an equality on a scalar with a single encoding (lower bound =
    /// upper bound): the value filter hash of that encoding.
    eq_hash: Option<u64>,
    pred: &'a Predicate,
    ty: KeyType,
}

impl<'a> Probe<'a> {
    /// Prepares `pred` for an index of type `ty`. Contract: an encoded
    /// scalar `v` matches `pred` iff `bounds.0 <= v <= bounds.1` bytewise
    /// (equality on `f64` zero covers both −0 and +0, as
    /// [`Predicate::matches`] does).
    pub fn new(pred: &'a Predicate, ty: KeyType) -> Probe<'a> {
        let bounds = match pred {
            Predicate::Eq(IndexValue::F64(z)) if *z == 0.0 => Some((
                IndexValue::F64(-0.0).encode(),
                IndexValue::F64(0.0).encode(),
            )),
            _ => pred.scalar_bounds(),
        };
        let eq_hash = match &bounds {
            Some((a, b)) if a == b => Some(hash64(a)),
            _ => None,
        };
        Probe {
            window: if bounds.is_some() {
                None
            } else {
                pred.window()
            },
            bounds,
            eq_hash,
            pred,
            ty,
        }
    }

    /// Does the encoded value `v` (as stored in a secondary block) match?
    /// Scalars compare bytes; spatial values are decoded (no allocation)
    /// and tested exactly.
    pub fn matches_encoded(&self, v: &[u8]) -> Result<bool> {
        match &self.bounds {
            Some((lo, hi)) => Ok(!encoded_lt(v, lo) && !encoded_lt(hi, v)),
            None if self.ty.is_spatial() => {
                // A window test reads the coordinates in place (the
                // predicate's own test on the value's MBR); anything else,
                // or a value of the wrong width, goes through the decoder.
                if let (Predicate::Within(w), Some(m)) =
                    (self.pred, IndexValue::encoded_mbr(self.ty, v))
                {
                    return Ok(intersects(&m, w));
                }
                Ok(self.pred.matches(&IndexValue::decode(self.ty, v)?))
            }
            None => Ok(false),
        }
    }
}

/// One global-index entry: `entries[start..end]` of secondary block
/// `sec_block` lie in `env`, and none has a sequence number above
/// `max_seq` (the bound a top-K query orders slices by).
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalEntry {
    pub sec_block: u32,
    pub start: u32,
    pub end: u32,
    pub max_seq: SeqNo,
    pub env: Envelope,
}

impl GlobalEntry {
    /// The slice as a [`Sketch`] sees it: envelope and entry count
    /// (`None` for a scalar envelope).
    pub fn slice_shape(&self) -> SliceShape {
        match &self.env {
            Envelope::Rect(r) => Some((*r, self.len())),
            Envelope::Scalar(..) => None,
        }
    }

    /// Entries of the slice.
    pub fn len(&self) -> u32 {
        self.end.saturating_sub(self.start)
    }
}

/// What the global index holds for one table and one index.
pub struct TableIndex {
    pub key_type: KeyType,
    /// Data blocks holding at least one indexed entry; secondary entries
    /// refer to them by position.
    pub handles: Vec<BlockHandle>,
    /// Scalars: sorted by range, ranges ordered and touching at most at
    /// their ends. Spatial: in block order.
    pub entries: Vec<GlobalEntry>,
    /// Scalars: the first 8 bytes of each entry's envelope minimum and
    /// maximum ([`prefix_u64`]; a rectangle, never written in a scalar
    /// index, as `u64::MAX`), so that finding a query's entries reads two
    /// compact arrays instead of two cache lines (the entry, its bytes)
    /// per probe: those misses were nearly all of `matching_entries`' time
    /// on the LevelDB++ mix at 1 M tweets. The bytes are read only where a
    /// head equals the bound's. Empty for spatial types.
    lo_heads: Vec<u64>,
    hi_heads: Vec<u64>,
    pub sec_blocks: u32,
    /// Format version of the table's blocks. Version 1 is decoded only so
    /// that the database opens (and compaction or a rebuild can rewrite
    /// the table); queries refuse it ([`TableIndex::check_queryable`]).
    pub version: u8,
    /// Bytes of this index's blocks in the table.
    pub disk_bytes: u64,
    /// The side file holding the blocks, for a table that existed before
    /// the index (an online build, `index::sidefile`); `None` when they are
    /// the table's own meta blocks.
    pub side: Option<std::sync::Arc<crate::index::sidefile::SideFile>>,
    /// The table's meta block of each secondary block (`None`: missing, a
    /// corruption reported when a query needs it), resolved at the first
    /// read of one of them so that queries neither format nor search block
    /// names. Unused for a side file's blocks.
    sec_ids: std::sync::OnceLock<Vec<Option<MetaBlockId>>>,
    /// The secondary blocks' bytes, by block number, when the index keeps
    /// them in RAM (the `pin` parameter, within its budget, see
    /// `next::pin`): taken from the builder when the table is written,
    /// read once from the table or side file when it is opened; queries
    /// then read no secondary block from the cache or the file. `None`:
    /// read through the block cache.
    pub pinned: Option<super::pin::Pinned>,
    /// Spatial types: the slices' envelopes, searchable ([`PackedTree`]).
    rtree: Option<PackedTree>,
    /// The table's value filter (`next.<id>.vf`): a Bloom filter over the
    /// distinct encoded values of a scalar index, so that an equality
    /// query skips a table that does not hold its value without reading a
    /// secondary block. `None`: not written (spatial types, `filter_bits
    /// = 0`, tables written before filters existed): no skipping.
    pub filter: Option<BloomFilter>,
    /// Spatial types: each slice's entries quantized over its envelope
    /// (`next.<id>.sketch`, [`Sketch`]), so that a window intersecting a
    /// slice's envelope but none of its entries skips the slice's
    /// secondary block. `None`: not written (scalar types, tables written
    /// before sketches existed): the envelopes alone decide.
    pub sketch: Option<Sketch>,
}

impl std::fmt::Debug for TableIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableIndex")
            .field("handles", &self.handles.len())
            .field("entries", &self.entries.len())
            .field("sec_blocks", &self.sec_blocks)
            .finish()
    }
}

impl TableIndex {
    fn new(
        key_type: KeyType,
        handles: Vec<BlockHandle>,
        entries: Vec<GlobalEntry>,
        sec_blocks: u32,
    ) -> Self {
        // A scalar envelope in a spatial index (never written) would be
        // a slice no window meets.
        let rtree = key_type.is_spatial().then(|| {
            let rects: Vec<[f64; 4]> = entries
                .iter()
                .map(|e| match e.env {
                    Envelope::Rect(r) => r,
                    Envelope::Scalar(..) => [f64::NAN; 4],
                })
                .collect();
            PackedTree::new(&rects)
        });
        let (lo_heads, hi_heads) = if key_type.is_spatial() {
            (Vec::new(), Vec::new())
        } else {
            entries
                .iter()
                .map(|e| match &e.env {
                    Envelope::Scalar(lo, hi) => (prefix_u64(lo), prefix_u64(hi)),
                    Envelope::Rect(_) => (u64::MAX, u64::MAX),
                })
                .unzip()
        };
        TableIndex {
            version: DIR_VERSION,
            key_type,
            handles,
            entries,
            lo_heads,
            hi_heads,
            sec_blocks,
            disk_bytes: 0,
            side: None,
            sec_ids: std::sync::OnceLock::new(),
            pinned: None,
            rtree,
            filter: None,
            sketch: None,
        }
    }

    /// The meta block id of secondary block `b` of index `index_id` in
    /// `table`, the table this index describes (resolved for every block at
    /// the first call).
    pub fn sec_block_id(&self, table: &Table, index_id: u32, b: u32) -> Option<MetaBlockId> {
        self.sec_ids
            .get_or_init(|| {
                // One pass over the table's `next.<id>.` names; blocks
                // beyond the directory's count are ignored (a corrupt count
                // allocates nothing beyond the names present).
                let mut ids: Vec<Option<MetaBlockId>> = Vec::new();
                let prefix = format!("next.{index_id}.");
                for (rest, id) in table.meta_blocks_with_prefix(&prefix) {
                    let Some(n) = sec_block_number(rest).filter(|&n| n < self.sec_blocks) else {
                        continue;
                    };
                    let n = n as usize;
                    if ids.len() <= n {
                        ids.resize(n + 1, None);
                    }
                    if let Some(slot) = ids.get_mut(n) {
                        *slot = Some(id);
                    }
                }
                ids
            })
            .get(b as usize)
            .copied()
            .flatten()
    }

    /// An error unless the table's blocks are of the current format.
    pub fn check_queryable(&self, file: u64) -> Result<()> {
        if self.version == DIR_VERSION {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "table {file} holds NEXT blocks of format version {} (written before \
             secondary blocks were searchable and seq-ordered); this build queries \
             version {DIR_VERSION} only: rebuild the index (drop and recreate it), or \
             compact the whole database, which rewrites every table's NEXT blocks",
            self.version
        )))
    }

    /// Indexes of the global entries whose envelope may hold a match, in
    /// ascending order (= secondary block order).
    pub fn matching_entries(&self, probe: &Probe<'_>) -> Vec<usize> {
        let mut v = Vec::new();
        self.matching_entries_into(probe, &mut v);
        v
    }

    /// Asks for the lines a search for `probe` reads first (the value
    /// filter's block, the middle of the heads), without waiting: a
    /// top-K query that will search many tables starts their misses
    /// together.
    pub fn prefetch(&self, probe: &Probe<'_>) {
        if let (Some(f), Some(h)) = (&self.filter, probe.eq_hash) {
            f.prefetch_hash(h);
        }
        if let Some(x) = self.hi_heads.get(self.hi_heads.len() / 2) {
            strata_lsm::mem::prefetch(x);
        }
    }

    /// True if the table's value filter shows that no entry can match
    /// `probe` (an equality on a scalar); false when it may, or when the
    /// table or the predicate has no filter.
    fn filter_rejects(&self, probe: &Probe<'_>) -> bool {
        match (&self.filter, probe.eq_hash) {
            (Some(f), Some(h)) => !f.may_contain_hash(h),
            _ => false,
        }
    }

    /// [`TableIndex::matching_entries`] appended to `v` (cleared first):
    /// a top-K query reuses one vector for all its tables (a vector per
    /// table was a tenth of an equality top-10 query's allocations).
    pub fn matching_entries_into(&self, probe: &Probe<'_>, v: &mut Vec<usize>) {
        v.clear();
        if let Some(t) = &self.rtree {
            let Some(w) = probe.window else {
                return;
            };
            t.search(&w, |i| {
                let keep = match (&self.sketch, self.entries.get(i)) {
                    (
                        Some(sk),
                        Some(GlobalEntry {
                            env: Envelope::Rect(r),
                            ..
                        }),
                    ) => sk.may_meet(i, r, &w),
                    _ => true,
                };
                if keep {
                    v.push(i);
                }
            });
            v.sort_unstable();
            return;
        }
        let Some((a, b)) = &probe.bounds else {
            return;
        };
        if self.filter_rejects(probe) {
            return;
        }
        // The first entry whose maximum is not below `a` (binary search),
        // then, since the maxima ascend, every entry up to the last whose
        // minimum is not above `b`.
        let (a_head, b_head) = (prefix_u64(a), prefix_u64(b));
        let below =
            |i| self.end_cmp(&self.hi_heads, Envelope::hi, i, a_head, a) == Some(Ordering::Less);
        let (mut first, mut end) = (0, self.entries.len());
        while first < end {
            let mid = first + (end - first) / 2;
            if below(mid) {
                first = mid + 1;
            } else {
                end = mid;
            }
        }
        v.extend((first..self.entries.len()).take_while(|&i| {
            matches!(
                self.end_cmp(&self.lo_heads, Envelope::lo, i, b_head, b),
                Some(Ordering::Less | Ordering::Equal)
            )
        }));
    }

    /// Entry `i`'s envelope end (`end` of it, whose head is in `heads`)
    /// against `x` (whose head is `x_head`): by the heads, and by the bytes
    /// only where they are equal. `None` for a rectangle (never written in
    /// a scalar index: it matches no scalar bound).
    fn end_cmp(
        &self,
        heads: &[u64],
        end: fn(&Envelope) -> Option<&[u8]>,
        i: usize,
        x_head: u64,
        x: &[u8],
    ) -> Option<Ordering> {
        match heads.get(i)?.cmp(&x_head) {
            Ordering::Equal => Some(end(&self.entries.get(i)?.env)?.cmp(x)),
            o => Some(o),
        }
    }

    /// Bytes of RAM held (envelopes, handles, R-tree nodes, roughly).
    pub fn memory_bytes(&self) -> usize {
        let env: usize = self
            .entries
            .iter()
            .map(|e| match &e.env {
                Envelope::Scalar(lo, hi) => lo.len() + hi.len() + 48,
                Envelope::Rect(_) => 32,
            })
            .sum();
        let tree = self.rtree.as_ref().map_or(0, PackedTree::memory_bytes)
            + (self.lo_heads.len() + self.hi_heads.len()) * 8;
        let filter = self.filter.as_ref().map_or(0, BloomFilter::size);
        let sketch = self.sketch.as_ref().map_or(0, Sketch::memory_bytes);
        let pinned = self
            .pinned
            .as_ref()
            .map_or(0, super::pin::Pinned::memory_bytes);
        std::mem::size_of::<Self>()
            + sketch
            + pinned
            + self.entries.len() * 24
            + env
            + tree
            + filter
            + self.handles.len() * 16
    }
}

pub fn sec_block_name(index_id: u32, n: u32) -> String {
    format!("next.{index_id}.{n}")
}

/// The block number `n` of a name `sec_block_name(_, n)`, given the part
/// after `next.<id>.`: exactly the decimal it writes (no sign, no leading
/// zero), so that a name resolves to a number only if that number's name
/// is this one.
fn sec_block_number(rest: &str) -> Option<u32> {
    let canonical = !rest.is_empty()
        && rest.bytes().all(|c| c.is_ascii_digit())
        && (rest == "0" || !rest.starts_with('0'));
    rest.parse().ok().filter(|_| canonical)
}

/// The name of index `index_id`'s value filter block in a table.
pub fn filter_block_name(index_id: u32) -> String {
    format!("next.{index_id}.vf")
}

/// The name of index `index_id`'s sketch block in a table (spatial
/// types; [`Sketch`]).
pub fn sketch_block_name(index_id: u32) -> String {
    format!("next.{index_id}.sketch")
}

pub fn dir_block_name(index_id: u32) -> String {
    format!("next.{index_id}.dir")
}

/// Hilbert index of `(x, y)` on a 2^16 × 2^16 grid.
pub(crate) fn hilbert(x: u32, y: u32) -> u64 {
    // Four bits of each coordinate per step (see `HILBERT_STEPS`), most
    // significant first; only the low 16 bits of `x` and `y` count.
    let mut d: u64 = 0;
    let mut state: usize = 0;
    for shift in [12u32, 8, 4, 0] {
        let xn = ((x >> shift) & 0xf) as usize;
        let yn = ((y >> shift) & 0xf) as usize;
        let e = HILBERT_STEPS
            .get((state << 8) | (xn << 4) | yn)
            .copied()
            .unwrap_or(0);
        d = (d << 8) | u64::from(e & 0xff);
        state = usize::from(e >> 8);
    }
    d
}

/// The Hilbert curve of order 16 taken 4 bits per step. The curve's
/// classic bit-by-bit loop (for each bit from the top: quadrant
/// `(3 * rx) ^ ry`; when `ry == 0`, reflect if `rx == 1`, then swap)
/// applies to the remaining bits a transform made of a swap and a
/// reflection of both coordinates, which commute: 4 states. Entry
/// `state << 8 | x4 << 4 | y4` is `new state << 8 | 8 bits of d`.
const HILBERT_STEPS: [u16; 1024] = hilbert_steps();

// Evaluated at compile time, where an index out of bounds is a build
// error (and `get_mut` is not available in a `const fn`).
#[allow(clippy::indexing_slicing)]
const fn hilbert_steps() -> [u16; 1024] {
    let mut t = [0u16; 1024];
    let mut i = 0;
    while i < 1024 {
        // State bit 0: swap; bit 1: reflect.
        let mut state = i >> 8;
        let (x4, y4) = ((i >> 4) & 0xf, i & 0xf);
        let mut d = 0;
        let mut bit = 4;
        while bit > 0 {
            bit -= 1;
            let (mut rx, mut ry) = ((x4 >> bit) & 1, (y4 >> bit) & 1);
            if state & 1 == 1 {
                let t = rx;
                rx = ry;
                ry = t;
            }
            if state & 2 == 2 {
                rx ^= 1;
                ry ^= 1;
            }
            d = (d << 2) | ((3 * rx) ^ ry);
            if ry == 0 {
                state ^= 1;
                if rx == 1 {
                    state ^= 2;
                }
            }
        }
        t[i] = ((state << 8) | d) as u16;
        i += 1;
    }
    t
}

fn union(a: &[f64; 4], b: &[f64; 4]) -> [f64; 4] {
    [
        a[0].min(b[0]),
        a[1].min(b[1]),
        a[2].max(b[2]),
        a[3].max(b[3]),
    ]
}

fn half_perimeter(r: &[f64; 4]) -> f64 {
    (r[2] - r[0]) + (r[3] - r[1])
}

/// Encodes one secondary entry's value.
fn put_value(out: &mut Vec<u8>, ty: KeyType, enc: &[u8]) {
    if ty.is_spatial() {
        out.extend_from_slice(enc);
    } else {
        put_length_prefixed(out, enc);
    }
}

/// An entry being built: the bounds of its encoded value in the build's
/// arena, location, seq.
pub type Encoded = ((usize, usize), Loc, SeqNo);

/// The MBR of an encoded spatial value of type `ty` (what
/// [`IndexValue::mbr`] gives for the decoded value); `None` for scalars
/// and for bytes that are not a spatial value of `ty`. Decoding a point or
/// rectangle allocates nothing.
fn enc_mbr(ty: KeyType, enc: &[u8]) -> Option<[f64; 4]> {
    IndexValue::encoded_mbr(ty, enc)
}

/// The gap coordinate ([`IndexValue::gap_coordinate`]) of an encoded value
/// of type `ty` (0 for bytes that are not a value of `ty`); a string's is
/// read from its first bytes, without building the `String`.
fn enc_gap(ty: KeyType, enc: &[u8]) -> f64 {
    match ty {
        KeyType::String => prefix_u64(enc) as f64,
        _ => IndexValue::decode(ty, enc).map_or(0.0, |v| v.gap_coordinate()),
    }
}

/// The encoded value of `e`, whose bounds lie in `arena`.
fn enc_of<'a>(arena: &'a [u8], e: &Encoded) -> &'a [u8] {
    arena.get(e.0 .0..e.0 .1).unwrap_or_default()
}

/// Encodes one secondary block holding `items[i]` for each `i` of
/// `members`, in order (format: `docs/format/next.md`).
fn encode_sec_block(ty: KeyType, arena: &[u8], items: &[Encoded], members: &[usize]) -> Vec<u8> {
    let base = members
        .iter()
        .filter_map(|&i| items.get(i))
        .map(|e| e.2)
        .min()
        .unwrap_or(0);
    // The offset array follows the area: built in its own buffer, at its
    // final size, then appended.
    let mut out = Vec::with_capacity(SEC_BLOCK_BYTES + 5 * members.len() + SEC_TRAILER + 64);
    let mut offsets: Vec<u8> = Vec::with_capacity(4 * members.len());
    for e in members.iter().filter_map(|&i| items.get(i)) {
        let (_, loc, seq) = e;
        offsets.extend_from_slice(&(out.len() as u32).to_le_bytes());
        put_value(&mut out, ty, enc_of(arena, e));
        put_varint64(&mut out, u64::from(loc.0));
        put_varint64(&mut out, u64::from(loc.1));
        put_varint64(&mut out, seq - base);
    }
    let count = (offsets.len() / 4) as u32;
    out.extend_from_slice(&offsets);
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out
}

/// One decoded secondary entry, borrowing its value from the block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecEntry<'a> {
    /// The encoded attribute value.
    pub value: &'a [u8],
    /// Position of the data block in the handle table and of the entry in
    /// that block.
    pub loc: Loc,
    pub seq: SeqNo,
}

/// A secondary index block, searchable in place: the fixed-width offset
/// array gives entry `i` without decoding the entries before it.
///
/// Invariant (checked by [`SecBlock::parse`]): the offset array and the
/// trailer fit the block; each entry's bounds are checked when it is read.
pub struct SecBlock<'a> {
    area: &'a [u8],
    offsets: &'a [u8],
    count: u32,
    base_seq: SeqNo,
    ty: KeyType,
}

impl<'a> SecBlock<'a> {
    /// Parses the trailer of a secondary block of an index of type `ty`.
    pub fn parse(src: &'a [u8], ty: KeyType) -> Result<SecBlock<'a>> {
        let bad = |what: &str| Error::corruption(format!("bad NEXT secondary block: {what}"));
        let trailer_at = src
            .len()
            .checked_sub(SEC_TRAILER)
            .ok_or_else(|| bad("shorter than its trailer"))?;
        let (body, trailer) = src
            .split_at_checked(trailer_at)
            .ok_or_else(|| bad("trailer"))?;
        let base_seq = decode_fixed64(trailer).ok_or_else(|| bad("trailer"))?;
        let count = trailer
            .get(8..)
            .and_then(decode_fixed32)
            .ok_or_else(|| bad("trailer"))?;
        let area_len = body
            .len()
            .checked_sub(4 * count as usize)
            .ok_or_else(|| bad("entry count exceeds the block"))?;
        let (area, offsets) = body
            .split_at_checked(area_len)
            .ok_or_else(|| bad("offsets"))?;
        Ok(SecBlock {
            area,
            offsets,
            count,
            base_seq,
            ty,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True if the block holds no entry.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn offset(&self, i: u32) -> Option<usize> {
        if i == self.count {
            return Some(self.area.len());
        }
        let at = 4 * i as usize;
        self.offsets
            .get(at..)
            .and_then(decode_fixed32)
            .map(|o| o as usize)
    }

    /// The bytes of entry `i`.
    fn raw(&self, i: u32) -> Result<&'a [u8]> {
        let bad = || Error::corruption(format!("bad NEXT secondary block: entry {i}"));
        if i >= self.count {
            return Err(bad());
        }
        let (a, b) = (
            self.offset(i).ok_or_else(bad)?,
            self.offset(i + 1).ok_or_else(bad)?,
        );
        self.area.get(a..b).ok_or_else(bad)
    }

    /// The encoded value of entry `i`.
    pub fn value(&self, i: u32) -> Result<&'a [u8]> {
        Ok(self.decode(i)?.0)
    }

    /// The encoded value of entry `i` for a search's comparison: a scalar
    /// value shorter than 128 bytes (one length byte: every number) is
    /// read from its start offset alone, without the next entry's offset
    /// or the varint decoder (this halved the instructions of an equality
    /// top-10 query's searches in secondary blocks). Such a value still lies in the
    /// block's area; that it ends before entry `i + 1` starts is checked
    /// when the entry is decoded ([`SecBlock::entry`]), as every match is.
    fn probe_value(&self, i: u32) -> Result<&'a [u8]> {
        let short = || {
            let off = self.offset(i)?;
            let len = usize::from(*self.area.get(off).filter(|&&l| l < 0x80)?);
            self.area.get(off + 1..off + 1 + len)
        };
        match (!self.ty.is_spatial() && i < self.count)
            .then(short)
            .flatten()
        {
            Some(v) => Ok(v),
            None => self.value(i),
        }
    }

    fn decode(&self, i: u32) -> Result<(&'a [u8], &'a [u8])> {
        let bad = || Error::corruption(format!("bad NEXT secondary block: entry {i}"));
        let mut src = self.raw(i)?;
        let v = match self.ty {
            KeyType::Point | KeyType::Rect => {
                let w = if self.ty == KeyType::Point { 16 } else { 32 };
                let (v, rest) = src.split_at_checked(w).ok_or_else(bad)?;
                src = rest;
                v
            }
            _ => get_length_prefixed(&mut src).ok_or_else(bad)?,
        };
        Ok((v, src))
    }

    /// Entry `i`, decoded in place.
    pub fn entry(&self, i: u32) -> Result<SecEntry<'a>> {
        let bad = || Error::corruption(format!("bad NEXT secondary block: entry {i}"));
        let (value, mut src) = self.decode(i)?;
        let mut v = || get_varint64(&mut src).ok_or_else(bad);
        let h = u32::try_from(v()?).map_err(|_| bad())?;
        let e = u32::try_from(v()?).map_err(|_| bad())?;
        let seq = self.base_seq.checked_add(v()?).ok_or_else(bad)?;
        if !src.is_empty() {
            return Err(bad());
        }
        Ok(SecEntry {
            value,
            loc: (h, e),
            seq,
        })
    }

    /// Calls `f` with the encoded value and sequence number of every entry,
    /// in order, decoding the area front to back (a compaction reading its
    /// inputs' values: no offset search per entry). Checks what
    /// [`SecBlock::entry`] checks: each entry starts at its offset and
    /// decodes exactly to the next one's. Stops early, returning false,
    /// when `f` does.
    pub fn for_each_value(&self, mut f: impl FnMut(&'a [u8], SeqNo) -> bool) -> Result<bool> {
        let bad = |i: usize| Error::corruption(format!("bad NEXT secondary block: entry {i}"));
        let width = match self.ty {
            KeyType::Point => Some(16),
            KeyType::Rect => Some(32),
            _ => None,
        };
        let mut src = self.area;
        // `parse` made `offsets` exactly `4 * count` bytes.
        for (i, off) in self.offsets.chunks_exact(4).enumerate() {
            let at = self.area.len() - src.len();
            if decode_fixed32(off).map(|o| o as usize) != Some(at) {
                return Err(bad(i));
            }
            let value = match width {
                Some(w) => {
                    let (v, rest) = src.split_at_checked(w).ok_or_else(|| bad(i))?;
                    src = rest;
                    v
                }
                None => get_length_prefixed(&mut src).ok_or_else(|| bad(i))?,
            };
            let mut v = || get_varint64(&mut src).ok_or_else(|| bad(i));
            let (h, e, d) = (v()?, v()?, v()?);
            if u32::try_from(h).is_err() || u32::try_from(e).is_err() {
                return Err(bad(i));
            }
            let seq = self.base_seq.checked_add(d).ok_or_else(|| bad(i))?;
            if !f(value, seq) {
                return Ok(false);
            }
        }
        if !src.is_empty() {
            return Err(bad(self.count as usize));
        }
        Ok(true)
    }

    /// The first position in `[start, end)` whose value is `>= key`
    /// (scalars: entries are sorted by encoded value), by binary search.
    pub fn lower_bound(&self, start: u32, end: u32, key: &[u8]) -> Result<u32> {
        let (mut lo, mut hi) = (start, end.min(self.count));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if encoded_lt(self.probe_value(mid)?, key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Calls `f` with every entry of `[start, end)` matching `probe`:
    /// scalars by binary search to the lower bound, then a scan to the
    /// upper; spatial values by an exact test of each entry of the slice.
    pub fn for_each_match(
        &self,
        start: u32,
        end: u32,
        probe: &Probe<'_>,
        mut f: impl FnMut(SecEntry<'a>) -> Result<()>,
    ) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let end = end.min(self.len());
        match &probe.bounds {
            Some((lo, hi)) => {
                let mut i = self.lower_bound(start, end, lo)?;
                while i < end {
                    let e = self.entry(i)?;
                    if encoded_lt(hi, e.value) {
                        break;
                    }
                    f(e)?;
                    i += 1;
                }
            }
            None => {
                // The value is tested before the rest of the entry (its
                // location and sequence varints) is decoded: few entries of
                // a spatial slice match.
                for i in start..end {
                    if probe.matches_encoded(self.decode(i)?.0)? {
                        f(self.entry(i)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The blocks built for one table and index.
pub struct Built {
    /// `(name, bytes)` meta blocks: secondary blocks then the directory.
    pub blocks: Vec<(String, Vec<u8>)>,
    pub index: TableIndex,
}

/// An indexed entry as the builder collects it: attribute value, where the
/// entry is, and its sequence number.
#[cfg(test)]
pub type Pair = (IndexValue, Loc, SeqNo);

/// `a < b` bytewise; two 8-byte values (every encoded `i64` and `f64`)
/// compare as one big-endian integer, not through `memcmp` (3.7% of an
/// equality top-10 query's instructions).
#[inline]
fn encoded_lt(a: &[u8], b: &[u8]) -> bool {
    match (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        (Some(x), Some(y)) if a.len() == 8 && b.len() == 8 => {
            u64::from_be_bytes(*x) < u64::from_be_bytes(*y)
        }
        _ => a < b,
    }
}

/// The first 8 bytes of `b`, big-endian, zero-padded: comparing prefixes
/// agrees with comparing the bytes whenever the prefixes differ.
fn prefix_u64(b: &[u8]) -> u64 {
    if let Some(a) = b.first_chunk::<8>() {
        return u64::from_be_bytes(*a);
    }
    let mut a = [0u8; 8];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u64::from_be_bytes(a)
}

/// The indexes `0..keys.len()` ordered by (`keys[i]`, then `cmp(i, j)`,
/// then `i`): the sort moves 16-byte (key, index) pairs and compares
/// integers, calling `cmp` only on equal keys, and the items themselves
/// are never moved (a stable sort of the 80-byte items comparing byte
/// vectors was half of a flush's index build).
fn order_by_prefix(keys: &[u64], cmp: impl Fn(usize, usize) -> std::cmp::Ordering) -> Vec<usize> {
    let mut order: Vec<(u64, usize)> = keys.iter().copied().zip(0..).collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| cmp(a.1, b.1))
            .then(a.1.cmp(&b.1))
    });
    order.into_iter().map(|(_, i)| i).collect()
}

/// The first 16 bytes of `b` as two big-endian numbers, zero-padded: for
/// values of one length of at most 16 bytes, comparing these pairs is
/// comparing the bytes.
fn halves(b: &[u8]) -> (u64, u64) {
    (prefix_u64(b), prefix_u64(b.get(8..).unwrap_or_default()))
}

/// `items[i]` for each `i` of `order`, in that order, with their values
/// copied from `arena` into a new arena in the same order.
fn gather(order: &[usize], items: &[Encoded], arena: &[u8]) -> (Vec<Encoded>, Vec<u8>) {
    let mut out = Vec::with_capacity(order.len());
    let mut values = Vec::with_capacity(arena.len());
    for e in order.iter().filter_map(|&i| items.get(i)) {
        let start = values.len();
        values.extend_from_slice(enc_of(arena, e));
        out.push(((start, values.len()), e.1, e.2));
    }
    (out, values)
}

/// Whether every item's encoded value has one length of at most 16 bytes
/// (`I64`, `F64`, `Point`), so that [`halves`] orders them.
fn fixed_width(items: &[Encoded]) -> bool {
    let width = |e: &Encoded| e.0 .1.saturating_sub(e.0 .0);
    let w = items.first().map_or(0, width);
    w <= 16 && items.iter().all(|e| width(e) == w)
}

/// The indexes `0..n` ordered by (`key(i)`, then `i`): a radix sort on
/// the first number (see [`radix_order`]), then each group of equal first
/// numbers sorted by the rest.
fn order_by_keys(n: usize, key: impl Fn(usize) -> (u64, u64, u64)) -> Vec<usize> {
    let keys: Vec<(u64, u64, u64)> = (0..n).map(key).collect();
    let firsts: Vec<u64> = keys.iter().map(|k| k.0).collect();
    let mut order = radix_pairs(&firsts);
    // The radix sort is stable: if the rest of the key never decreases
    // along the indexes (one-width values of eight bytes, in block order,
    // as a table's builder adds them), each group is in order already.
    if keys
        .iter()
        .zip(keys.iter().skip(1))
        .all(|(a, b)| (a.1, a.2) <= (b.1, b.2))
    {
        return order.into_iter().map(|(_, i)| i).collect();
    }
    let rest = |p: &(u64, usize)| keys.get(p.1).map(|k| (k.1, k.2, p.1));
    for group in order.chunk_by_mut(|a, b| a.0 == b.0) {
        if group.len() > 1 && !group.is_sorted_by_key(rest) {
            group.sort_unstable_by_key(rest);
        }
    }
    order.into_iter().map(|(_, i)| i).collect()
}

/// The indexes `0..keys.len()` ordered by (`keys[i]`, then `i`): a
/// least-significant-digit radix sort, 11 bits a pass, skipping the
/// digits every key shares (a pass is stable, and the first starts in
/// index order).
#[cfg(test)]
fn radix_order(keys: &[u64]) -> Vec<usize> {
    radix_pairs(keys).into_iter().map(|(_, i)| i).collect()
}

/// [`radix_order`] with each index's key beside it.
fn radix_pairs(keys: &[u64]) -> Vec<(u64, usize)> {
    const BITS: u32 = 11;
    const MASK: u64 = (1 << BITS) - 1;
    let (all, any) = keys
        .iter()
        .fold((u64::MAX, 0u64), |(a, o), &k| (a & k, o | k));
    let varying = all ^ any;
    // Each key travels with its index, so that a pass reads in sequence
    // (indexing `keys` through the permutation was a cache miss per entry
    // and pass at a flush's size).
    let mut order: Vec<(u64, usize)> = keys.iter().copied().zip(0..).collect();
    let mut next: Vec<(u64, usize)> = vec![(0, 0); keys.len()];
    let mut count = vec![0usize; 1 << BITS];
    let digit = |k: u64, shift: u32| ((k >> shift) & MASK) as usize;
    let mut shift = 0;
    while shift < 64 {
        if (varying >> shift) & MASK != 0 {
            count.fill(0);
            for &(k, _) in &order {
                if let Some(c) = count.get_mut(digit(k, shift)) {
                    *c += 1;
                }
            }
            let mut start = 0;
            for c in count.iter_mut() {
                let n = *c;
                *c = start;
                start += n;
            }
            for &(k, i) in &order {
                if let Some(c) = count.get_mut(digit(k, shift)) {
                    if let Some(slot) = next.get_mut(*c) {
                        *slot = (k, i);
                    }
                    *c += 1;
                }
            }
            std::mem::swap(&mut order, &mut next);
        }
        shift += BITS;
    }
    order
}

/// The order of a table's index entries, as indexes into `items`: spatial
/// (`curve` given, each item's Hilbert value) by (Hilbert value, encoded
/// value, index); scalar by (encoded value, position, index). With `fast`
/// (only when [`fixed_width`]`(items)`), the same order from integer
/// tuples alone.
fn entry_order(arena: &[u8], items: &[Encoded], curve: Option<&[u64]>, fast: bool) -> Vec<usize> {
    let enc = |i: usize| items.get(i).map_or(&[][..], |e| enc_of(arena, e));
    let loc = |i: usize| items.get(i).map(|e| e.1);
    match (curve, fast) {
        (Some(curve), true) => order_by_keys(items.len(), |i| {
            let (a, b) = halves(enc(i));
            (curve.get(i).copied().unwrap_or(0), a, b)
        }),
        (Some(curve), false) => order_by_prefix(curve, |a, b| enc(a).cmp(enc(b))),
        (None, true) => order_by_keys(items.len(), |i| {
            let (a, b) = halves(enc(i));
            let l = loc(i).map_or(0, |l| (u64::from(l.0) << 32) | u64::from(l.1));
            (a, b, l)
        }),
        (None, false) => {
            let prefixes: Vec<u64> = (0..items.len()).map(|i| prefix_u64(enc(i))).collect();
            order_by_prefix(&prefixes, |a, b| {
                enc(a).cmp(enc(b)).then(loc(a).cmp(&loc(b)))
            })
        }
    }
}

/// Algorithm 1 with value-aware splitting. `pairs` are (value, position in
/// `handles` and in its block, sequence number): [`build_shaped`] with the
/// default shape but `delta` (tests build from values).
#[cfg(test)]
pub fn build(
    index_id: u32,
    ty: KeyType,
    delta: Delta,
    handles: Vec<BlockHandle>,
    pairs: Vec<Pair>,
) -> Built {
    let shape = Shape {
        delta,
        ..Shape::default()
    };
    build_shaped(index_id, ty, &shape, handles, &pairs)
}

/// [`build_encoded`] of the encoded values of `pairs`.
#[cfg(test)]
pub fn build_shaped(
    index_id: u32,
    ty: KeyType,
    shape: &Shape,
    handles: Vec<BlockHandle>,
    pairs: &[Pair],
) -> Built {
    let mut arena: Vec<u8> = Vec::with_capacity(pairs.len().saturating_mul(16));
    let items = pairs
        .iter()
        .map(|(v, loc, seq)| {
            let start = arena.len();
            v.encode_into(&mut arena);
            ((start, arena.len()), *loc, *seq)
        })
        .collect();
    build_encoded(index_id, ty, shape, handles, &arena, items)
}

/// Algorithm 1 with value-aware splitting over entries whose values are
/// already encoded, all in one arena (no allocation per entry): `items`
/// are (bounds of the encoded value in `arena`, position in `handles` and
/// in its block, sequence number). Contract: every value is
/// [`IndexValue::encode`] of a value of type `ty`; the encoding is
/// canonical, so the blocks are those the decoded values give. A compaction takes the values encoded from its inputs'
/// secondary blocks and never decodes them.
pub fn build_encoded(
    index_id: u32,
    ty: KeyType,
    shape: &Shape,
    handles: Vec<BlockHandle>,
    arena: &[u8],
    items: Vec<Encoded>,
) -> Built {
    let n = items.len();
    // Sort and compute δ.
    let mut table_mbr = [
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ];
    let mbr_of = |e: &Encoded| enc_mbr(ty, enc_of(arena, e));
    let order: Vec<usize> = if ty.is_spatial() {
        for m in items.iter().filter_map(mbr_of) {
            table_mbr = union(&table_mbr, &m);
        }
        let (w, h) = (
            (table_mbr[2] - table_mbr[0]).max(1e-12),
            (table_mbr[3] - table_mbr[1]).max(1e-12),
        );
        let scale =
            |v: f64, lo: f64, span: f64| (((v - lo) / span) * 65535.0).clamp(0.0, 65535.0) as u32;
        let curve: Vec<u64> = items
            .iter()
            .map(|e| {
                let m = mbr_of(e).unwrap_or([0.0; 4]);
                let cx = (m[0] + m[2]) / 2.0;
                let cy = (m[1] + m[3]) / 2.0;
                hilbert(scale(cx, table_mbr[0], w), scale(cy, table_mbr[1], h))
            })
            .collect();
        entry_order(arena, &items, Some(&curve), fixed_width(&items))
    } else {
        entry_order(arena, &items, None, fixed_width(&items))
    };
    // The entries and their values copied once into sorted order: every
    // pass below (blocks, slices, sketch, filter) then reads memory in
    // sequence instead of jumping through `order` (at a flush of 150 k
    // entries, each jump was a cache miss).
    let (items, arena) = gather(&order, &items, arena);
    let arena = &arena[..];
    let mbr_of = |e: &Encoded| enc_mbr(ty, enc_of(arena, e));
    let gap_of = |e: &Encoded| enc_gap(ty, enc_of(arena, e));
    let first = items.first();
    let last = items.last();
    let filter_bits = shape.filter_bits;
    let slice_cap = if ty.is_spatial() && shape.spatial_slice > 0 {
        shape.spatial_slice
    } else {
        u32::MAX
    };
    let delta_value = match shape.delta {
        Delta::Off => f64::INFINITY,
        Delta::Fixed(d) => d,
        Delta::Auto => {
            if n < 2 {
                f64::INFINITY
            } else if ty.is_spatial() {
                let area = (table_mbr[2] - table_mbr[0]) * (table_mbr[3] - table_mbr[1]);
                let d = 8.0 * (area / n as f64).sqrt();
                if d > 0.0 {
                    d
                } else {
                    f64::INFINITY
                }
            } else {
                let lo = first.map_or(0.0, gap_of);
                let hi = last.map_or(0.0, gap_of);
                let d = 8.0 * (hi - lo) / (n - 1) as f64;
                if d > 0.0 {
                    d
                } else {
                    f64::INFINITY
                }
            }
        }
    };

    let mut blocks = Vec::new();
    let mut entries: Vec<GlobalEntry> = Vec::new();
    // The current secondary block's entries (indexes into `items`) and an
    // upper bound of its encoded size (each seq counted at full width).
    let mut block: Vec<usize> = Vec::new();
    let mut block_bytes = 0usize;
    let mut block_no: u32 = 0;
    // Position in `items` (sorted) of each secondary block's first entry:
    // block `b`'s entry `j` is `items[bases[b] + j]`.
    let mut bases: Vec<usize> = vec![0];
    // Current global entry: (start, envelope, last gap coordinate, max
    // seq, last encoded value). A scalar envelope's upper bound is the
    // last value, copied when the entry closes.
    let mut cur: Option<(u32, Envelope, f64, SeqNo, &[u8])> = None;
    let close = |entries: &mut Vec<GlobalEntry>,
                 cur: &mut Option<(u32, Envelope, f64, SeqNo, &[u8])>,
                 block_no: u32,
                 end: u32| {
        if let Some((start, mut env, _, max_seq, last_enc)) = cur.take() {
            if let Envelope::Scalar(_, hi) = &mut env {
                *hi = last_enc.to_vec();
            }
            entries.push(GlobalEntry {
                sec_block: block_no,
                start,
                end,
                max_seq,
                env,
            });
        }
    };
    for (i, item) in items.iter().enumerate() {
        let (_, loc, seq) = item;
        let enc = enc_of(arena, item);
        let mbr = enc_mbr(ty, enc);
        let gap = enc_gap(ty, enc);
        let in_block = block.len() as u32;
        // Split the global entry when the value is too far (value-aware),
        // or when a spatial slice holds its most entries.
        if let Some((start, env, last, _, _)) = &mut cur {
            let split = in_block - *start >= slice_cap
                || match (env, mbr) {
                    (Envelope::Rect(r), Some(m)) => {
                        half_perimeter(&union(r, &m)) - half_perimeter(r) > delta_value
                    }
                    _ => gap - *last > delta_value,
                };
            if split {
                close(&mut entries, &mut cur, block_no, in_block);
            }
        }
        match &mut cur {
            Some((_, env, last, max_seq, last_enc)) => {
                if let (Envelope::Rect(r), Some(m)) = (env, mbr) {
                    *r = union(r, &m);
                }
                *last_enc = enc;
                *last = gap;
                *max_seq = (*max_seq).max(*seq);
            }
            None => {
                let env = match mbr {
                    Some(m) if ty.is_spatial() => Envelope::Rect(m),
                    _ => Envelope::Scalar(enc.to_vec(), Vec::new()),
                };
                cur = Some((in_block, env, gap, *seq, enc));
            }
        }
        block.push(i);
        block_bytes += enc.len() + 5 + varint_len(u64::from(loc.0)) + varint_len(u64::from(loc.1));
        block_bytes += varint_len(*seq) + 4;
        if block_bytes >= SEC_BLOCK_BYTES {
            close(&mut entries, &mut cur, block_no, block.len() as u32);
            blocks.push((
                sec_block_name(index_id, block_no),
                encode_sec_block(ty, arena, &items, &block),
            ));
            bases.push(bases.last().copied().unwrap_or(0) + block.len());
            block.clear();
            block_bytes = 0;
            block_no += 1;
        }
    }
    if !block.is_empty() {
        close(&mut entries, &mut cur, block_no, block.len() as u32);
        blocks.push((
            sec_block_name(index_id, block_no),
            encode_sec_block(ty, arena, &items, &block),
        ));
        block_no += 1;
    }
    // Each slice's members' bounding boxes, slice after slice.
    let sketch = if ty.is_spatial() {
        let mut mbrs = Vec::with_capacity(n);
        for e in &entries {
            let base = bases.get(e.sec_block as usize).copied().unwrap_or(0);
            let members = items
                .get(base + e.start as usize..base + e.end as usize)
                .unwrap_or_default();
            mbrs.extend(members.iter().filter_map(mbr_of));
        }
        let shapes: Vec<SliceShape> = entries.iter().map(GlobalEntry::slice_shape).collect();
        Sketch::build(&shapes, &mbrs)
    } else {
        None
    };
    let mut index = TableIndex::new(ty, handles, entries, block_no);
    if let Some(sk) = sketch {
        blocks.push((sketch_block_name(index_id), sk.encode()));
        index.sketch = Some(sk);
    }
    // The value filter: each distinct value once (scalars are in value
    // order, so equal encodings are adjacent).
    if filter_bits > 0 && !ty.is_spatial() && n > 0 {
        let mut bloom = BloomBuilder::new(usize::from(filter_bits));
        let mut prev: Option<&[u8]> = None;
        for item in &items {
            let enc = enc_of(arena, item);
            if prev != Some(enc) {
                bloom.add_key(enc);
                prev = Some(enc);
            }
        }
        let bytes = bloom.finish();
        index.filter = BloomFilter::from_bytes(bytes.clone()).ok();
        blocks.push((filter_block_name(index_id), bytes));
    }
    blocks.push((dir_block_name(index_id), encode_dir(&index)));
    Built { blocks, index }
}

fn encode_dir(t: &TableIndex) -> Vec<u8> {
    let mut out = vec![DIR_VERSION, key_type_byte(t.key_type)];
    put_varint64(&mut out, t.handles.len() as u64);
    for h in &t.handles {
        put_varint64(&mut out, h.offset);
        put_varint64(&mut out, h.size);
    }
    put_varint64(&mut out, u64::from(t.sec_blocks));
    put_varint64(&mut out, t.entries.len() as u64);
    for e in &t.entries {
        put_varint64(&mut out, u64::from(e.sec_block));
        put_varint64(&mut out, u64::from(e.start));
        put_varint64(&mut out, u64::from(e.end));
        put_varint64(&mut out, e.max_seq);
        match &e.env {
            Envelope::Scalar(lo, hi) => {
                put_length_prefixed(&mut out, lo);
                put_length_prefixed(&mut out, hi);
            }
            Envelope::Rect(r) => {
                for c in r {
                    out.extend_from_slice(&c.to_le_bytes());
                }
            }
        }
    }
    out
}

fn key_type_byte(t: KeyType) -> u8 {
    match t {
        KeyType::I64 => 1,
        KeyType::F64 => 2,
        KeyType::String => 3,
        KeyType::Point => 4,
        KeyType::Rect => 5,
    }
}

/// Decodes a directory block into the table's global entries.
pub fn decode_dir(mut src: &[u8], expect: KeyType) -> Result<TableIndex> {
    let bad = |what: &str| Error::corruption(format!("bad NEXT directory block: {what}"));
    let (&version, rest) = src.split_first().ok_or_else(|| bad("empty"))?;
    if version != DIR_VERSION && version != 1 {
        return Err(bad(&format!(
            "unknown version {version} (this build reads {DIR_VERSION})"
        )));
    }
    let (&ty, rest) = rest.split_first().ok_or_else(|| bad("truncated"))?;
    if ty != key_type_byte(expect) {
        return Err(bad("key type differs from the index definition"));
    }
    src = rest;
    let v = |src: &mut &[u8]| get_varint64(src).ok_or_else(|| bad("truncated"));
    let nh = v(&mut src)?;
    // Reservations bounded by the bytes left (a handle takes at least 2, an
    // entry at least 3): a corrupt count cannot allocate more than the block.
    let mut handles = Vec::with_capacity(nh.min(src.len() as u64 / 2) as usize);
    for _ in 0..nh {
        handles.push(BlockHandle::new(v(&mut src)?, v(&mut src)?));
    }
    let sec_blocks = u32::try_from(v(&mut src)?).map_err(|_| bad("block count"))?;
    let ne = v(&mut src)?;
    let mut entries = Vec::with_capacity(ne.min(src.len() as u64 / 3) as usize);
    for _ in 0..ne {
        let sec_block = u32::try_from(v(&mut src)?).map_err(|_| bad("block number"))?;
        let start = u32::try_from(v(&mut src)?).map_err(|_| bad("start"))?;
        let end = u32::try_from(v(&mut src)?).map_err(|_| bad("end"))?;
        // Version 1 has no max seq; its tables are never queried.
        let max_seq = if version == 1 { 0 } else { v(&mut src)? };
        if sec_block >= sec_blocks || start > end {
            return Err(bad("entry out of range"));
        }
        let env = if expect.is_spatial() {
            let mut r = [0.0; 4];
            for c in &mut r {
                let (b, rest) = src
                    .split_first_chunk::<8>()
                    .ok_or_else(|| bad("truncated"))?;
                *c = f64::from_le_bytes(*b);
                src = rest;
            }
            // Also rejects NaN, which the R-tree of the global index
            // cannot order.
            if !(r.iter().all(|c| c.is_finite()) && r[0] <= r[2] && r[1] <= r[3]) {
                return Err(bad("envelope with min > max or a non-finite corner"));
            }
            Envelope::Rect(r)
        } else {
            let lo = get_length_prefixed(&mut src)
                .ok_or_else(|| bad("truncated"))?
                .to_vec();
            let hi = get_length_prefixed(&mut src)
                .ok_or_else(|| bad("truncated"))?
                .to_vec();
            Envelope::Scalar(lo, hi)
        };
        entries.push(GlobalEntry {
            sec_block,
            start,
            end,
            max_seq,
            env,
        });
    }
    if !src.is_empty() {
        return Err(bad("trailing bytes"));
    }
    let mut t = TableIndex::new(expect, handles, entries, sec_blocks);
    t.version = version;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block name's number is read back only from the exact decimal
    /// `sec_block_name` writes.
    #[test]
    fn sec_block_numbers_read_back_exactly_the_names_written() {
        for n in [0u32, 1, 9, 10, 123, u32::MAX] {
            let name = sec_block_name(3, n);
            assert_eq!(
                sec_block_number(name.trim_start_matches("next.3.")),
                Some(n)
            );
        }
        for rest in ["", "dir", "01", "00", "+1", "-1", "1a", "4294967296"] {
            assert_eq!(sec_block_number(rest), None, "{rest:?}");
        }
    }

    /// The integer comparison of 8-byte values agrees with the bytewise
    /// one, for encoded numbers and for values of other lengths.
    #[test]
    fn encoded_lt_agrees_with_bytewise_order() {
        let mut vals: Vec<Vec<u8>> = [i64::MIN, -5, -1, 0, 1, 255, 256, 1 << 40, i64::MAX]
            .iter()
            .map(|&v| IndexValue::I64(v).encode())
            .collect();
        vals.extend([
            vec![],
            vec![0x80],
            vec![0x80; 9],
            b"abcdefgh".to_vec(),
            b"abcdefg".to_vec(),
        ]);
        for a in &vals {
            for b in &vals {
                assert_eq!(encoded_lt(a, b), a < b, "{a:?} < {b:?}");
            }
        }
    }

    /// The in-place window test of encoded points and rectangles answers as
    /// the predicate does on the decoded value, special values included.
    #[test]
    fn encoded_window_test_agrees_with_the_predicate() {
        let special = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pick = (x >> 40) as usize;
            if pick.is_multiple_of(5) {
                special[pick % special.len()]
            } else {
                ((x >> 11) % 41) as f64 / 4.0 - 5.0
            }
        };
        for _ in 0..20_000 {
            let w = [next(), next(), next(), next()];
            let pred = Predicate::Within(w);
            for v in [
                IndexValue::Point([next(), next()]),
                IndexValue::Rect([next(), next(), next(), next()]),
            ] {
                let probe = Probe::new(&pred, v.key_type());
                assert_eq!(
                    probe.matches_encoded(&v.encode()).unwrap(),
                    pred.matches(&v),
                    "{v:?} within {w:?}"
                );
            }
        }
        // A value of the wrong width is corruption, as decoding says.
        let pred = Predicate::Within([0.0, 0.0, 1.0, 1.0]);
        assert!(Probe::new(&pred, KeyType::Point)
            .matches_encoded(&[0; 15])
            .is_err());
        assert!(Probe::new(&pred, KeyType::Rect)
            .matches_encoded(&[0; 16])
            .is_err());
    }

    /// The scalar entries found by their heads are those whose range
    /// meets the query's, as a byte comparison of every envelope says:
    /// strings sharing their first 8 bytes (heads equal, bytes decide),
    /// short values, ranges and equalities, bounds on and between entries.
    #[test]
    fn matching_entries_by_heads_agree_with_the_envelopes() {
        let mut next = xorshift(0x5eed_1234);
        let mut vals: Vec<Vec<u8>> = (0..400)
            .map(|_| {
                let n = next();
                match n % 3 {
                    0 => format!("user-000{:05}", n % 3000).into_bytes(),
                    1 => (n % 5000).to_be_bytes().to_vec(),
                    _ => (n % 5000).to_be_bytes()[5..].to_vec(),
                }
            })
            .collect();
        vals.sort();
        vals.dedup();
        // Consecutive ranges touching at most at their ends.
        let entries: Vec<GlobalEntry> = vals
            .chunks(3)
            .enumerate()
            .map(|(i, c)| GlobalEntry {
                sec_block: i as u32,
                start: 0,
                end: 1,
                max_seq: 1,
                env: Envelope::Scalar(c[0].clone(), c[c.len() - 1].clone()),
            })
            .collect();
        let t = TableIndex::new(KeyType::String, handles(1), entries.clone(), 1);
        for _ in 0..2000 {
            let mut pick = || vals[(next() % vals.len() as u64) as usize].clone();
            let (x, y) = (pick(), pick());
            let (a, b) = if next().is_multiple_of(3) {
                (x.clone(), x)
            } else {
                (x.clone().min(y.clone()), x.max(y))
            };
            let probe = Probe {
                bounds: Some((a.clone(), b.clone())),
                window: None,
                eq_hash: None,
                pred: &Predicate::Eq(IndexValue::I64(0)),
                ty: KeyType::String,
            };
            let want: Vec<usize> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| match &e.env {
                    Envelope::Scalar(lo, hi) => lo.as_slice() <= b.as_slice() && a <= *hi,
                    Envelope::Rect(_) => false,
                })
                .map(|(i, _)| i)
                .collect();
            assert_eq!(t.matching_entries(&probe), want, "{a:?}..={b:?}");
        }
    }

    /// A deterministic xorshift64 stream from `seed` (not 0).
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    fn handles(n: u64) -> Vec<BlockHandle> {
        (0..n).map(|i| BlockHandle::new(i * 100, 90)).collect()
    }

    /// Every entry of `t` matching `pred`, found through the global entries
    /// and the secondary blocks' search: (value, loc, seq).
    fn search(b: &Built, t: &TableIndex, pred: &Predicate) -> Vec<(IndexValue, Loc, SeqNo)> {
        let probe = Probe::new(pred, t.key_type);
        let mut out = Vec::new();
        for i in t.matching_entries(&probe) {
            let e = &t.entries[i];
            let sb = SecBlock::parse(&b.blocks[e.sec_block as usize].1, t.key_type).unwrap();
            sb.for_each_match(e.start, e.end, &probe, |se| {
                assert!(se.seq <= e.max_seq);
                out.push((
                    IndexValue::decode(t.key_type, se.value).unwrap(),
                    se.loc,
                    se.seq,
                ));
                Ok(())
            })
            .unwrap();
        }
        out.sort_by_key(|x| (x.1, x.2));
        out
    }

    fn brute(pairs: &[Pair], pred: &Predicate) -> Vec<(IndexValue, Loc, SeqNo)> {
        let mut v: Vec<_> = pairs
            .iter()
            .filter(|(v, _, _)| pred.matches(v))
            .cloned()
            .collect();
        v.sort_by_key(|x| (x.1, x.2));
        v
    }

    fn int_pairs() -> Vec<Pair> {
        (0..3000)
            .map(|i| {
                (
                    IndexValue::I64((i * 7) % 1000),
                    ((i % 50) as u32, (i / 50) as u32),
                    // Sequence numbers unrelated to value order.
                    1_000_000 + ((i * 7919) % 3001) as u64,
                )
            })
            .collect()
    }

    #[test]
    fn scalar_blocks_roundtrip_and_search() {
        let pairs = int_pairs();
        let b = build(3, KeyType::I64, Delta::Off, handles(50), pairs.clone());
        assert!(b.blocks.len() > 2, "several secondary blocks");
        let dir = &b.blocks.last().unwrap();
        assert_eq!(dir.0, "next.3.dir");
        let t = decode_dir(&dir.1, KeyType::I64).unwrap();
        assert_eq!(t.entries, b.index.entries);
        assert_eq!(
            t.entries.len() as u32,
            t.sec_blocks,
            "delta off: one entry per block"
        );
        // Every secondary block decodes in place; max seqs are exact.
        for e in &t.entries {
            let sb = SecBlock::parse(&b.blocks[e.sec_block as usize].1, KeyType::I64).unwrap();
            assert!(!sb.is_empty() && e.end <= sb.len());
            let max = (e.start..e.end).map(|i| sb.entry(i).unwrap().seq).max();
            assert_eq!(max, Some(e.max_seq));
        }
        // Binary search finds exactly the brute-force matches.
        for pred in [
            Predicate::Range(IndexValue::I64(100), IndexValue::I64(120)),
            Predicate::Eq(IndexValue::I64(0)),
            Predicate::Eq(IndexValue::I64(999)),
            Predicate::Eq(IndexValue::I64(1000)),
            Predicate::Range(IndexValue::I64(-5), IndexValue::I64(3)),
            Predicate::Range(IndexValue::I64(0), IndexValue::I64(2000)),
        ] {
            assert_eq!(search(&b, &t, &pred), brute(&pairs, &pred), "{pred:?}");
        }
        assert!(decode_dir(&dir.1, KeyType::F64).is_err());
        for cut in 0..dir.1.len() {
            assert!(decode_dir(&dir.1[..cut], KeyType::I64).is_err());
        }
    }

    /// Values whose length takes one varint byte and values whose length
    /// takes two (128 bytes and more) in the same secondary blocks: the
    /// binary search reads the first kind from their start offset alone
    /// and decodes the second, and both agree with a scan.
    #[test]
    fn search_is_exact_across_one_and_two_byte_value_lengths() {
        let pairs: Vec<Pair> = (0..4000u32)
            .map(|i| {
                let len = [1usize, 7, 8, 9, 127, 128, 129, 300][(i % 8) as usize];
                let c = char::from(b'a' + ((i * 7) % 5) as u8);
                let v = format!("{c}{:03}", (i * 31) % 97);
                let v = format!("{v:-<len$}");
                (IndexValue::Str(v), (i / 40, i % 40), u64::from(i) + 1)
            })
            .collect();
        let b = build(1, KeyType::String, Delta::Auto, handles(100), pairs.clone());
        assert!(b.blocks.len() > 3, "{}", b.blocks.len());
        let value = |i: u32| match &pairs[i as usize].0 {
            IndexValue::Str(s) => s.clone(),
            _ => unreachable!(),
        };
        let mut preds = vec![
            Predicate::Range(IndexValue::Str("b".into()), IndexValue::Str("c050".into())),
            Predicate::Eq(IndexValue::Str("a".into())),
        ];
        for i in [0u32, 4, 5, 6, 7, 13, 1002, 3999] {
            preds.push(Predicate::Eq(IndexValue::Str(value(i))));
        }
        for pred in preds {
            let want = brute(&pairs, &pred);
            assert_eq!(search(&b, &b.index, &pred), want, "{pred:?}");
        }
    }

    #[test]
    fn string_and_float_search_is_exact() {
        let words = ["a", "ab", "abc", "b", "ba", "", "zz", "abd", "ab"];
        let pairs: Vec<Pair> = (0..900)
            .map(|i| {
                (
                    IndexValue::Str(format!("{}{}", words[i % words.len()], i % 7)),
                    ((i % 9) as u32, (i / 9) as u32),
                    i as u64 + 1,
                )
            })
            .collect();
        let b = build(1, KeyType::String, Delta::Auto, handles(9), pairs.clone());
        let t = decode_dir(&b.blocks.last().unwrap().1, KeyType::String).unwrap();
        for pred in [
            Predicate::Eq(IndexValue::Str("ab3".into())),
            Predicate::Range(IndexValue::Str("ab".into()), IndexValue::Str("b".into())),
            Predicate::Eq(IndexValue::Str("0".into())),
        ] {
            assert_eq!(search(&b, &t, &pred), brute(&pairs, &pred), "{pred:?}");
        }
        // Values sharing their first 8 bytes over many global entries.
        let pairs: Vec<Pair> = (0..6000u32)
            .map(|i| {
                let v = if i % 3 == 0 {
                    format!("long-shared-{:05}", (i * 7919) % 4001)
                } else {
                    format!("lo{:04}", (i * 31) % 997)
                };
                (IndexValue::Str(v), (i / 50, i % 50), u64::from(i) + 1)
            })
            .collect();
        let b = build(1, KeyType::String, Delta::Auto, handles(120), pairs.clone());
        assert!(b.index.entries.len() > 20, "{}", b.index.entries.len());
        for pred in [
            Predicate::Eq(IndexValue::Str("long-shared-00007".into())),
            Predicate::Eq(IndexValue::Str("long-shared-03999".into())),
            Predicate::Eq(IndexValue::Str("long-shared".into())),
            Predicate::Eq(IndexValue::Str("lo0100".into())),
            Predicate::Range(
                IndexValue::Str("long-shared-01000".into()),
                IndexValue::Str("long-shared-01100".into()),
            ),
            Predicate::Range(
                IndexValue::Str("lo".into()),
                IndexValue::Str("long-shared-0".into()),
            ),
        ] {
            assert_eq!(
                search(&b, &b.index, &pred),
                brute(&pairs, &pred),
                "{pred:?}"
            );
        }
        // −0 and +0 are equal numbers: equality on zero finds both.
        let pairs: Vec<Pair> = [-1.0, -0.0, 0.0, 0.0, 2.5]
            .iter()
            .enumerate()
            .map(|(i, v)| (IndexValue::F64(*v), (0, i as u32), i as u64 + 1))
            .collect();
        let b = build(1, KeyType::F64, Delta::Auto, handles(1), pairs.clone());
        for z in [0.0, -0.0] {
            let pred = Predicate::Eq(IndexValue::F64(z));
            assert_eq!(search(&b, &b.index, &pred).len(), 3, "{z}");
        }
    }

    #[test]
    fn secondary_block_rejects_corruption() {
        let b = build(3, KeyType::I64, Delta::Off, handles(50), int_pairs());
        let bytes = &b.blocks[0].1;
        let sb = SecBlock::parse(bytes, KeyType::I64).unwrap();
        assert!(sb.entry(sb.len()).is_err());
        for cut in 0..SEC_TRAILER {
            assert!(SecBlock::parse(&bytes[..cut], KeyType::I64).is_err());
        }
        // Any cut or flipped byte: an error or a decode, never a panic.
        for cut in (0..bytes.len()).step_by(7) {
            if let Ok(sb) = SecBlock::parse(&bytes[..cut], KeyType::I64) {
                for i in 0..sb.len().min(50) {
                    let _ = sb.entry(i);
                }
                let _ = sb.lower_bound(0, sb.len(), &[0x80]);
            }
        }
        for at in (0..bytes.len()).step_by(3) {
            let mut c = bytes.clone();
            c[at] ^= 0xff;
            if let Ok(sb) = SecBlock::parse(&c, KeyType::I64) {
                for i in 0..sb.len().min(400) {
                    let _ = sb.entry(i);
                }
            }
        }
        // The sequential walk gives what `entry` gives, and errs where a
        // corrupt block makes some `entry` err.
        for b in b
            .blocks
            .iter()
            .filter(|(n, _)| sec_block_number(n.trim_start_matches("next.3.")).is_some())
        {
            let sb = SecBlock::parse(&b.1, KeyType::I64).unwrap();
            let mut walked = Vec::new();
            assert!(sb
                .for_each_value(|v, s| {
                    walked.push((v, s));
                    true
                })
                .unwrap());
            let direct: Vec<_> = (0..sb.len())
                .map(|i| sb.entry(i).map(|e| (e.value, e.seq)).unwrap())
                .collect();
            assert_eq!(walked, direct);
        }
        for at in 0..bytes.len() {
            let mut c = bytes.clone();
            c[at] ^= 0x81;
            if let Ok(sb) = SecBlock::parse(&c, KeyType::I64) {
                let all_ok = (0..sb.len()).all(|i| sb.entry(i).is_ok());
                let mut n = 0;
                let walk = sb.for_each_value(|_, _| {
                    n += 1;
                    true
                });
                if all_ok {
                    // Entries that decode one by one also decode in a walk
                    // (the offsets checked the same way).
                    assert!(walk.is_ok(), "flip at {at}");
                    assert_eq!(n, sb.len());
                } else {
                    assert!(walk.is_err(), "flip at {at}");
                }
            }
        }
        // A version-1 directory (no max seqs) decodes, but queries refuse
        // it with a rebuild hint.
        let mut dir = vec![1u8, 1];
        put_varint64(&mut dir, 1);
        put_varint64(&mut dir, 0);
        put_varint64(&mut dir, 90);
        put_varint64(&mut dir, 1); // one secondary block
        put_varint64(&mut dir, 1); // one global entry: block 0, [0, 3)
        for x in [0, 0, 3] {
            put_varint64(&mut dir, x);
        }
        put_length_prefixed(&mut dir, &IndexValue::I64(1).encode());
        put_length_prefixed(&mut dir, &IndexValue::I64(2).encode());
        let t = decode_dir(&dir, KeyType::I64).unwrap();
        assert_eq!(t.version, 1);
        let err = t.check_queryable(7).unwrap_err();
        assert!(err.to_string().contains("rebuild the index"), "{err}");
        assert!(b.index.check_queryable(7).is_ok());
        dir[0] = 3;
        assert!(decode_dir(&dir, KeyType::I64).is_err());
    }

    #[test]
    fn value_aware_splitting_tightens_ranges() {
        // Two clusters far apart inside every block.
        let pairs: Vec<Pair> = (0..400)
            .map(|i| {
                (
                    IndexValue::I64(if i % 2 == 0 { i } else { 1_000_000 + i }),
                    (0, i as u32),
                    i as u64,
                )
            })
            .collect();
        let off = build(1, KeyType::I64, Delta::Off, handles(1), pairs.clone());
        let auto = build(1, KeyType::I64, Delta::Auto, handles(1), pairs);
        assert!(auto.index.entries.len() > off.index.entries.len());
        // A range (an equality would be answered by the value filter).
        let probe = Predicate::Range(IndexValue::I64(500_000), IndexValue::I64(500_010));
        let probe = Probe::new(&probe, KeyType::I64);
        assert!(
            !off.index.matching_entries(&probe).is_empty(),
            "one wide range covers the gap"
        );
        assert!(
            auto.index.matching_entries(&probe).is_empty(),
            "split ranges skip the gap"
        );
    }

    /// An equality skips a table whose value filter lacks the value, never
    /// one that holds it; without a filter (0 bits, or a table written
    /// before filters) the global entries alone decide.
    #[test]
    fn value_filter_skips_tables_without_the_value() {
        // Even values 0..4000: every odd value lies inside some block's
        // range but is absent.
        let pairs: Vec<Pair> = (0..2000)
            .map(|i| (IndexValue::I64(2 * i), (0, i as u32), i as u64 + 1))
            .collect();
        let with = build(1, KeyType::I64, Delta::Off, handles(1), pairs.clone());
        let shape = Shape {
            delta: Delta::Off,
            filter_bits: 0,
            ..Shape::default()
        };
        let without = build_shaped(1, KeyType::I64, &shape, handles(1), &pairs);
        assert!(with.blocks.iter().any(|(n, _)| n == "next.1.vf"));
        assert!(!without.blocks.iter().any(|(n, _)| n.ends_with(".vf")));
        assert!(without.index.filter.is_none());
        let (mut inside, mut skipped) = (0, 0);
        for v in 0..4000 {
            let pred = Predicate::Eq(IndexValue::I64(v));
            let probe = Probe::new(&pred, KeyType::I64);
            let hits = with.index.matching_entries(&probe);
            let unfiltered = without.index.matching_entries(&probe);
            if v % 2 == 0 {
                assert!(!hits.is_empty(), "a present value is never skipped: {v}");
                assert_eq!(hits, unfiltered);
                assert_eq!(search(&with, &with.index, &pred).len(), 1);
            } else if !unfiltered.is_empty() {
                // Absent, inside a block's range.
                inside += 1;
                skipped += usize::from(hits.is_empty());
            }
        }
        // 10 bits per value: about 1% false positives.
        assert!(inside > 1900, "{inside}");
        assert!(
            skipped * 100 >= inside * 95,
            "{skipped} of {inside} skipped"
        );
        // A one-value range is an equality; wider ranges are not filtered.
        let pred = Predicate::Range(IndexValue::I64(1), IndexValue::I64(1));
        assert!(Probe::new(&pred, KeyType::I64).eq_hash.is_some());
        let pred = Predicate::Range(IndexValue::I64(1), IndexValue::I64(3));
        assert!(!with
            .index
            .matching_entries(&Probe::new(&pred, KeyType::I64))
            .is_empty());
        let pts: Vec<Pair> = (0..50)
            .map(|i| (IndexValue::Point([i as f64, 0.0]), (0, i), u64::from(i) + 1))
            .collect();
        let b = build(2, KeyType::Point, Delta::Auto, handles(1), pts);
        assert!(b.index.filter.is_none());
        // The filter block decodes to the filter the builder kept.
        let (_, vf) = with.blocks.iter().find(|(n, _)| n == "next.1.vf").unwrap();
        let f = BloomFilter::from_bytes(vf.clone()).unwrap();
        for v in (0..4000).step_by(2) {
            assert!(f.may_contain(&IndexValue::I64(v).encode()));
        }
    }

    /// Clustered points spread over a large box (cities on a globe): with
    /// δ from the box's mean spacing, value-aware splitting alone leaves
    /// slices far wider than a small window, so the window meets slices
    /// holding none of its points. The entry cap bounds every slice; the
    /// answers do not change, and the small windows meet fewer slices.
    #[test]
    fn spatial_slices_hold_at_most_their_cap() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let pairs: Vec<Pair> = (0..4000u32)
            .map(|i| {
                let r = next();
                let city = (r % 5) as f64;
                let dx = ((r >> 8) % 1000) as f64 / 1000.0;
                let dy = ((r >> 24) % 1000) as f64 / 1000.0;
                let p = [city * 70.0 - 170.0 + dx, city * 30.0 - 80.0 + dy];
                (IndexValue::Point(p), (i / 8, i % 8), u64::from(i) + 1)
            })
            .collect();
        let build_with = |spatial_slice| {
            let shape = Shape {
                spatial_slice,
                ..Shape::default()
            };
            build_shaped(2, KeyType::Point, &shape, handles(500), &pairs)
        };
        let (mut capped, mut uncapped) = (build_with(16), build_with(0));
        // The envelopes alone: the sketch would hide what the cap saves.
        capped.index.sketch = None;
        uncapped.index.sketch = None;
        assert!(capped.index.entries.iter().all(|e| e.end - e.start <= 16));
        assert!(uncapped.index.entries.iter().any(|e| e.end - e.start > 16));
        // Secondary blocks a window needs: those of the slices it meets.
        let blocks = |b: &Built, pred: &Predicate| {
            let probe = Probe::new(pred, KeyType::Point);
            let mut v: Vec<u32> = b
                .index
                .matching_entries(&probe)
                .iter()
                .filter_map(|&i| b.index.entries.get(i).map(|e| e.sec_block))
                .collect();
            v.dedup();
            v.len()
        };
        let (mut met_capped, mut met_uncapped) = (0, 0);
        for c in 0..5 {
            let (x0, y0) = (f64::from(c) * 70.0 - 170.0, f64::from(c) * 30.0 - 80.0);
            for k in 0..20 {
                let (x, y) = (x0 + f64::from(k) * 0.047, y0 + f64::from(k) * 0.045);
                let pred = Predicate::Within([x, y, x + 0.01, y + 0.01]);
                let want = brute(&pairs, &pred);
                assert_eq!(search(&capped, &capped.index, &pred), want);
                assert_eq!(search(&uncapped, &uncapped.index, &pred), want);
                met_capped += blocks(&capped, &pred);
                met_uncapped += blocks(&uncapped, &pred);
            }
        }
        assert!(
            met_capped < met_uncapped,
            "small windows meet fewer blocks: {met_capped} vs {met_uncapped}"
        );
    }

    #[test]
    fn spatial_sketch_skips_slices_without_a_match_and_never_a_match() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for ty in [KeyType::Point, KeyType::Rect] {
            // Clusters far apart, so that slices along the curve jump
            // between them and their envelopes cover empty space.
            let pairs: Vec<Pair> = (0..3000u32)
                .map(|i| {
                    let r = next();
                    let c = (r % 7) as f64;
                    let t = ((r >> 8) % 10_000) as f64 / 1000.0;
                    let d = ((r >> 24) % 100) as f64 / 1000.0;
                    // Roads: points along diagonal segments, so that a
                    // slice's envelope is mostly empty.
                    let (px, py) = (c * 13.0 - 40.0 + t, (c * 7.0) % 20.0 - 10.0 + t + d);
                    let v = match ty {
                        KeyType::Point => IndexValue::Point([px, py]),
                        _ => {
                            let w = ((r >> 40) % 100) as f64 / 400.0;
                            IndexValue::Rect([px, py, px + w, py + w / 2.0])
                        }
                    };
                    (v, (i / 8, i % 8), u64::from(i) + 1)
                })
                .collect();
            let with = build_shaped(3, ty, &Shape::default(), handles(400), &pairs);
            assert_eq!(
                with.blocks
                    .iter()
                    .filter(|(n, _)| *n == sketch_block_name(3))
                    .count(),
                1
            );
            let mut without = build_shaped(3, ty, &Shape::default(), handles(400), &pairs);
            without.index.sketch = None;
            let met =
                |t: &TableIndex, pred: &Predicate| t.matching_entries(&Probe::new(pred, ty)).len();
            let (mut met_with, mut met_without) = (0, 0);
            for k in 0..400u32 {
                let r = next();
                let size = [0.0, 0.01, 0.1, 0.3, 30.0][(k % 5) as usize];
                // Near a value, off the road.
                let near = match pairs.get((r % 3000) as usize).map(|p| &p.0) {
                    Some(IndexValue::Point(p)) => [p[0], p[1]],
                    Some(IndexValue::Rect(q)) => [q[0], q[1]],
                    _ => [0.0, 0.0],
                };
                let off = ((r >> 20) % 200) as f64 / 100.0 - 1.0;
                let (x0, y0) = (near[0] + off, near[1] - off / 2.0);
                let pred = if k % 97 == 0 {
                    Predicate::Within([f64::NEG_INFINITY, -1.0, f64::INFINITY, 1.0])
                } else {
                    Predicate::Within([x0, y0, x0 + size, y0 + size])
                };
                let want = brute(&pairs, &pred);
                assert_eq!(search(&with, &with.index, &pred), want, "{ty:?} {pred:?}");
                assert_eq!(search(&without, &without.index, &pred), want);
                let (a, b) = (met(&with.index, &pred), met(&without.index, &pred));
                assert!(a <= b);
                met_with += a;
                met_without += b;
            }
            assert!(
                met_with < met_without,
                "{ty:?}: the sketch skips slices: {met_with} vs {met_without}"
            );
        }
    }

    #[test]
    fn spatial_blocks_use_rtree() {
        let pairs: Vec<Pair> = (0..2000)
            .map(|i| {
                let x = (i % 40) as f64;
                let y = (i / 40) as f64;
                (
                    IndexValue::Point([x, y]),
                    ((i % 10) as u32, (i / 10) as u32),
                    5000 - i as u64,
                )
            })
            .collect();
        let b = build(2, KeyType::Point, Delta::Auto, handles(10), pairs.clone());
        let t = decode_dir(&b.blocks.last().unwrap().1, KeyType::Point).unwrap();
        let pred = Predicate::Within([3.5, 3.5, 6.5, 5.5]);
        let found = search(&b, &t, &pred);
        assert_eq!(found, brute(&pairs, &pred));
        assert_eq!(found.len(), 6);
        let pred = Predicate::Eq(IndexValue::Point([7.0, 9.0]));
        assert_eq!(search(&b, &t, &pred), brute(&pairs, &pred));
        let rects: Vec<Pair> = (0..500)
            .map(|i| {
                let x = (i % 25) as f64;
                let y = (i / 25) as f64;
                (
                    IndexValue::Rect([x, y, x + 1.5, y + 0.5]),
                    (0, i as u32),
                    i as u64,
                )
            })
            .collect();
        let b = build(2, KeyType::Rect, Delta::Auto, handles(1), rects.clone());
        let pred = Predicate::Within([3.0, 3.0, 4.0, 4.0]);
        assert_eq!(search(&b, &b.index, &pred), brute(&rects, &pred));
    }

    #[test]
    fn fixed_width_order_is_the_general_order() {
        let mut next = xorshift(88172645463325252);
        // Positions in item order, as a table's builder adds them (the
        // radix order is then final for one-width scalars), or not.
        for (spatial, in_order) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut arena = Vec::new();
            let mut items: Vec<Encoded> = Vec::new();
            let mut curve = Vec::new();
            for i in 0..5000u32 {
                // Few distinct values and Hilbert keys: many ties.
                let v = if spatial {
                    IndexValue::Point([(next() % 7) as f64 - 3.0, (next() % 5) as f64 * 0.5])
                } else {
                    IndexValue::I64((next() % 50) as i64 - 25)
                };
                let start = arena.len();
                v.encode_into(&mut arena);
                let loc = if in_order {
                    (i / 100, i % 100)
                } else {
                    ((next() % 40) as u32, (next() % 3) as u32)
                };
                items.push(((start, arena.len()), loc, u64::from(i)));
                curve.push(next() % 9);
            }
            assert!(fixed_width(&items));
            let c = spatial.then_some(&curve[..]);
            assert_eq!(
                entry_order(&arena, &items, c, true),
                entry_order(&arena, &items, c, false),
                "spatial {spatial}, positions in order {in_order}"
            );
        }
        let mut arena = Vec::new();
        let mut items: Vec<Encoded> = Vec::new();
        for (i, s) in ["b", "ab", "a"].iter().enumerate() {
            let start = arena.len();
            IndexValue::Str(s.to_string()).encode_into(&mut arena);
            items.push(((start, arena.len()), (0, i as u32), 0));
        }
        assert!(!fixed_width(&items), "strings of several lengths");
    }

    /// The curve's textbook loop, one bit per step.
    fn hilbert_reference(mut x: u32, mut y: u32) -> u64 {
        let n: u32 = 1 << 16;
        let mut d: u64 = 0;
        let mut s = n / 2;
        while s > 0 {
            let rx = u32::from(x & s > 0);
            let ry = u32::from(y & s > 0);
            d += (s as u64) * (s as u64) * ((3 * rx) ^ ry) as u64;
            if ry == 0 {
                if rx == 1 {
                    x = n - 1 - x;
                    y = n - 1 - y;
                }
                std::mem::swap(&mut x, &mut y);
            }
            s /= 2;
        }
        d
    }

    #[test]
    fn hilbert_steps_match_the_reference_loop() {
        for x in (0..65536u32).step_by(7) {
            for y in [
                0u32, 1, 2, 3, 255, 256, 4095, 4096, 32767, 32768, 65534, 65535,
            ] {
                assert_eq!(hilbert(x, y), hilbert_reference(x, y), "({x}, {y})");
                assert_eq!(hilbert(y, x), hilbert_reference(y, x), "({y}, {x})");
            }
        }
        let mut r: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let (x, y) = ((r & 0xffff) as u32, ((r >> 16) & 0xffff) as u32);
            assert_eq!(hilbert(x, y), hilbert_reference(x, y), "({x}, {y})");
        }
    }

    #[test]
    fn radix_order_is_a_stable_sort() {
        let mut next = xorshift(0x1234_5678_9abc_def1);
        for (n, mask) in [
            (0usize, u64::MAX),
            (1, u64::MAX),
            (5000, u64::MAX),
            (5000, 0xff00),
            (5000, 0),
        ] {
            let keys: Vec<u64> = (0..n).map(|_| next() & mask).collect();
            let mut want: Vec<usize> = (0..n).collect();
            want.sort_by_key(|&i| (keys[i], i));
            assert_eq!(radix_order(&keys), want, "{n} keys, mask {mask:x}");
        }
    }

    #[test]
    fn encoded_gap_and_mbr_are_the_values() {
        let values = [
            (KeyType::I64, IndexValue::I64(i64::MIN)),
            (KeyType::I64, IndexValue::I64(-1)),
            (KeyType::I64, IndexValue::I64(0)),
            (KeyType::I64, IndexValue::I64(123_456_789_012)),
            (KeyType::I64, IndexValue::I64(i64::MAX)),
            (KeyType::F64, IndexValue::F64(-0.0)),
            (KeyType::F64, IndexValue::F64(0.0)),
            (KeyType::F64, IndexValue::F64(-2.5e300)),
            (KeyType::F64, IndexValue::F64(f64::MIN_POSITIVE)),
            (KeyType::F64, IndexValue::F64(f64::INFINITY)),
            (KeyType::String, IndexValue::Str(String::new())),
            (KeyType::String, IndexValue::Str("ab".into())),
            (KeyType::String, IndexValue::Str("longer than eight".into())),
            (KeyType::Point, IndexValue::Point([-0.0, 3.25])),
            (KeyType::Point, IndexValue::Point([-122.4, 37.8])),
            (KeyType::Rect, IndexValue::Rect([1.0, -2.0, 3.5, 4.0])),
        ];
        for (ty, v) in values {
            let enc = v.encode();
            assert_eq!(
                enc_gap(ty, &enc).to_bits(),
                v.gap_coordinate().to_bits(),
                "{v:?}"
            );
            assert_eq!(enc_mbr(ty, &enc), v.mbr(), "{v:?}");
        }
        assert_eq!(enc_mbr(KeyType::Point, &[0; 15]), None);
        assert_eq!(enc_gap(KeyType::I64, &[1, 2]), 0.0);
    }

    #[test]
    fn delta_parse() {
        assert_eq!(Delta::parse("auto").unwrap(), Delta::Auto);
        assert_eq!(Delta::parse("off").unwrap(), Delta::Off);
        assert_eq!(Delta::parse("2.5").unwrap(), Delta::Fixed(2.5));
        assert!(Delta::parse("-1").is_err());
        assert!(Delta::parse("x").is_err());
    }
}
