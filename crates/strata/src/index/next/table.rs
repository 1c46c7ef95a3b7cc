//! NEXT's per-table component (NEXT §3.2, Algorithm 1, §4 value-aware
//! splitting) and the global-index entries it yields.
//!
//! For every table and NEXT index, the table builder's observer collects
//! `(attribute value, data block)` for each entry; at the end the pairs are
//! sorted (scalars by value, spatial values along a Hilbert curve of their
//! centres) and written as *secondary index blocks* (meta blocks
//! `next.<id>.<n>`, ~4 KiB each). Each block is covered by one or more
//! *global entries* — a value range (scalars) or rectangle (spatial) and the
//! slice of the block it covers — cut wherever adding the next value would
//! grow the range by more than δ (value-aware splitting). The global entries
//! and the table's data-block handles are written to a directory block
//! `next.<id>.dir`, which is all recovery reads to rebuild the global index.
//! Byte formats: `docs/format/next.md`.

#![deny(clippy::indexing_slicing)]

use rstar::primitives::{GeomWithData, Rectangle};
use rstar::{RTree, AABB};

use crate::index::value::{IndexValue, KeyType, Predicate};
use strata_lsm::coding::{get_length_prefixed, get_varint64, put_length_prefixed, put_varint64};
use strata_lsm::error::{Error, Result};
use strata_lsm::sstable::BlockHandle;

/// Where an indexed entry is: position of its data block in the handle
/// table, and position of the entry inside that block.
pub type Loc = (u32, u32);

/// Target bytes of one secondary index block.
pub const SEC_BLOCK_BYTES: usize = 4096;
const DIR_VERSION: u8 = 1;

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
    fn may_match(&self, pred: &Predicate) -> bool {
        match self {
            Envelope::Scalar(lo, hi) => match pred.scalar_bounds() {
                Some((a, b)) => lo.as_slice() <= b.as_slice() && a.as_slice() <= hi.as_slice(),
                None => false,
            },
            Envelope::Rect(r) => pred
                .window()
                .is_some_and(|w| crate::index::value::intersects(r, &w)),
        }
    }
}

/// One global-index entry: `entries[start..end]` of secondary block
/// `sec_block` lie in `env`.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalEntry {
    pub sec_block: u32,
    pub start: u32,
    pub end: u32,
    pub env: Envelope,
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
    pub sec_blocks: u32,
    /// Bytes of this index's blocks in the table.
    pub disk_bytes: u64,
    rtree: Option<RTree<GeomWithData<Rectangle<[f64; 2]>, u32>>>,
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
        let rtree = key_type.is_spatial().then(|| {
            let items = entries
                .iter()
                .enumerate()
                .filter_map(|(i, e)| match e.env {
                    Envelope::Rect(r) => Some(GeomWithData::new(
                        Rectangle::from_corners([r[0], r[1]], [r[2], r[3]]),
                        i as u32,
                    )),
                    Envelope::Scalar(..) => None,
                })
                .collect();
            RTree::bulk_load(items)
        });
        TableIndex {
            key_type,
            handles,
            entries,
            sec_blocks,
            disk_bytes: 0,
            rtree,
        }
    }

    /// Indexes of the global entries whose envelope may hold a match.
    pub fn matching_entries(&self, pred: &Predicate) -> Vec<usize> {
        if let Some(t) = &self.rtree {
            let Some(w) = pred.window() else {
                return Vec::new();
            };
            let aabb = AABB::from_corners([w[0], w[1]], [w[2], w[3]]);
            let mut v: Vec<usize> = t
                .locate_in_envelope_intersecting(&aabb)
                .map(|g| g.data as usize)
                .collect();
            v.sort_unstable();
            return v;
        }
        let Some((a, b)) = pred.scalar_bounds() else {
            return Vec::new();
        };
        let first = self.entries.partition_point(|e| match &e.env {
            Envelope::Scalar(_, hi) => hi.as_slice() < a.as_slice(),
            Envelope::Rect(_) => false,
        });
        self.entries
            .iter()
            .enumerate()
            .skip(first)
            .take_while(|(_, e)| match &e.env {
                Envelope::Scalar(lo, _) => lo.as_slice() <= b.as_slice(),
                Envelope::Rect(_) => false,
            })
            .filter(|(_, e)| e.env.may_match(pred))
            .map(|(i, _)| i)
            .collect()
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
        let tree = if self.rtree.is_some() {
            self.entries.len() * 48
        } else {
            0
        };
        std::mem::size_of::<Self>() + self.entries.len() * 16 + env + tree + self.handles.len() * 16
    }
}

pub fn sec_block_name(index_id: u32, n: u32) -> String {
    format!("next.{index_id}.{n}")
}

pub fn dir_block_name(index_id: u32) -> String {
    format!("next.{index_id}.dir")
}

/// Hilbert index of `(x, y)` on a 2^16 × 2^16 grid.
pub(crate) fn hilbert(mut x: u32, mut y: u32) -> u64 {
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

/// The blocks built for one table and index.
pub struct Built {
    /// `(name, bytes)` meta blocks: secondary blocks then the directory.
    pub blocks: Vec<(String, Vec<u8>)>,
    pub index: TableIndex,
}

/// Algorithm 1 with value-aware splitting. `pairs` are (value, position in
/// `handles`).
pub fn build(
    index_id: u32,
    ty: KeyType,
    delta: Delta,
    handles: Vec<BlockHandle>,
    mut pairs: Vec<(IndexValue, Loc)>,
) -> Built {
    let n = pairs.len();
    // Sort and compute δ.
    let mut table_mbr = [
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ];
    let encoded: Vec<(Vec<u8>, Loc, IndexValue)>;
    if ty.is_spatial() {
        for (v, _) in &pairs {
            if let Some(m) = v.mbr() {
                table_mbr = union(&table_mbr, &m);
            }
        }
        let (w, h) = (
            (table_mbr[2] - table_mbr[0]).max(1e-12),
            (table_mbr[3] - table_mbr[1]).max(1e-12),
        );
        let scale =
            |v: f64, lo: f64, span: f64| (((v - lo) / span) * 65535.0).clamp(0.0, 65535.0) as u32;
        let mut keyed: Vec<(u64, Vec<u8>, Loc, IndexValue)> = pairs
            .drain(..)
            .map(|(v, h_)| {
                let m = v.mbr().unwrap_or([0.0; 4]);
                let cx = (m[0] + m[2]) / 2.0;
                let cy = (m[1] + m[3]) / 2.0;
                (
                    hilbert(scale(cx, table_mbr[0], w), scale(cy, table_mbr[1], h)),
                    v.encode(),
                    h_,
                    v,
                )
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        encoded = keyed.into_iter().map(|(_, e, h, v)| (e, h, v)).collect();
    } else {
        let mut e: Vec<(Vec<u8>, Loc, IndexValue)> =
            pairs.drain(..).map(|(v, h)| (v.encode(), h, v)).collect();
        e.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        encoded = e;
    }
    let delta_value = match delta {
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
                let lo = encoded.first().map_or(0.0, |e| e.2.gap_coordinate());
                let hi = encoded.last().map_or(0.0, |e| e.2.gap_coordinate());
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
    let mut block = Vec::new();
    let mut in_block: u32 = 0;
    let mut block_no: u32 = 0;
    // Current global entry.
    let mut cur: Option<(u32, Envelope, f64)> = None; // (start, env, last gap coordinate)
    let close = |entries: &mut Vec<GlobalEntry>,
                 cur: &mut Option<(u32, Envelope, f64)>,
                 block_no: u32,
                 end: u32| {
        if let Some((start, env, _)) = cur.take() {
            entries.push(GlobalEntry {
                sec_block: block_no,
                start,
                end,
                env,
            });
        }
    };
    for (enc, h, v) in &encoded {
        // Split the global entry when the value is too far (value-aware).
        if let Some((_, env, last)) = &mut cur {
            let split = match (env, v.mbr()) {
                (Envelope::Rect(r), Some(m)) => {
                    half_perimeter(&union(r, &m)) - half_perimeter(r) > delta_value
                }
                _ => v.gap_coordinate() - *last > delta_value,
            };
            if split {
                close(&mut entries, &mut cur, block_no, in_block);
            }
        }
        match &mut cur {
            Some((_, env, last)) => {
                match (env, v.mbr()) {
                    (Envelope::Rect(r), Some(m)) => *r = union(r, &m),
                    (Envelope::Scalar(_, hi), _) => *hi = enc.clone(),
                    _ => {}
                }
                *last = v.gap_coordinate();
            }
            None => {
                let env = match v.mbr() {
                    Some(m) if ty.is_spatial() => Envelope::Rect(m),
                    _ => Envelope::Scalar(enc.clone(), enc.clone()),
                };
                cur = Some((in_block, env, v.gap_coordinate()));
            }
        }
        put_value(&mut block, ty, enc);
        put_varint64(&mut block, u64::from(h.0));
        put_varint64(&mut block, u64::from(h.1));
        in_block += 1;
        if block.len() >= SEC_BLOCK_BYTES {
            close(&mut entries, &mut cur, block_no, in_block);
            let mut b = Vec::with_capacity(block.len() + 5);
            put_varint64(&mut b, u64::from(in_block));
            b.extend_from_slice(&block);
            blocks.push((sec_block_name(index_id, block_no), b));
            block.clear();
            in_block = 0;
            block_no += 1;
        }
    }
    if in_block > 0 {
        close(&mut entries, &mut cur, block_no, in_block);
        let mut b = Vec::with_capacity(block.len() + 5);
        put_varint64(&mut b, u64::from(in_block));
        b.extend_from_slice(&block);
        blocks.push((sec_block_name(index_id, block_no), b));
        block_no += 1;
    }
    let index = TableIndex::new(ty, handles, entries, block_no);
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
    if version != DIR_VERSION {
        return Err(bad("unknown version"));
    }
    let (&ty, rest) = rest.split_first().ok_or_else(|| bad("truncated"))?;
    if ty != key_type_byte(expect) {
        return Err(bad("key type differs from the index definition"));
    }
    src = rest;
    let v = |src: &mut &[u8]| get_varint64(src).ok_or_else(|| bad("truncated"));
    let nh = v(&mut src)?;
    let mut handles = Vec::with_capacity(nh.min(1 << 20) as usize);
    for _ in 0..nh {
        handles.push(BlockHandle::new(v(&mut src)?, v(&mut src)?));
    }
    let sec_blocks = u32::try_from(v(&mut src)?).map_err(|_| bad("block count"))?;
    let ne = v(&mut src)?;
    let mut entries = Vec::with_capacity(ne.min(1 << 20) as usize);
    for _ in 0..ne {
        let sec_block = u32::try_from(v(&mut src)?).map_err(|_| bad("block number"))?;
        let start = u32::try_from(v(&mut src)?).map_err(|_| bad("start"))?;
        let end = u32::try_from(v(&mut src)?).map_err(|_| bad("end"))?;
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
            env,
        });
    }
    if !src.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(TableIndex::new(expect, handles, entries, sec_blocks))
}

/// Decodes a secondary index block into (encoded value, handle position).
pub fn decode_sec_block(mut src: &[u8], ty: KeyType) -> Result<Vec<(Vec<u8>, Loc)>> {
    let bad = || Error::corruption("bad NEXT secondary index block");
    let n = get_varint64(&mut src).ok_or_else(bad)?;
    let width = match ty {
        KeyType::Point => Some(16),
        KeyType::Rect => Some(32),
        _ => None,
    };
    let mut out = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        let v = match width {
            Some(w) => {
                let (v, rest) = src.split_at_checked(w).ok_or_else(bad)?;
                src = rest;
                v.to_vec()
            }
            None => get_length_prefixed(&mut src).ok_or_else(bad)?.to_vec(),
        };
        let h = u32::try_from(get_varint64(&mut src).ok_or_else(bad)?).map_err(|_| bad())?;
        let e = u32::try_from(get_varint64(&mut src).ok_or_else(bad)?).map_err(|_| bad())?;
        out.push((v, (h, e)));
    }
    if !src.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handles(n: u64) -> Vec<BlockHandle> {
        (0..n).map(|i| BlockHandle::new(i * 100, 90)).collect()
    }

    #[test]
    fn scalar_blocks_roundtrip_and_search() {
        let pairs: Vec<(IndexValue, Loc)> = (0..3000)
            .map(|i| {
                (
                    IndexValue::I64((i * 7) % 1000),
                    ((i % 50) as u32, (i / 50) as u32),
                )
            })
            .collect();
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
        // Every entry covered by its envelope; a query finds all matches.
        let pred = Predicate::Range(IndexValue::I64(100), IndexValue::I64(120));
        let mut found = 0;
        for i in t.matching_entries(&pred) {
            let e = &t.entries[i];
            let sec = decode_sec_block(&b.blocks[e.sec_block as usize].1, KeyType::I64).unwrap();
            for (v, _) in &sec[e.start as usize..e.end as usize] {
                let v = IndexValue::decode(KeyType::I64, v).unwrap();
                if pred.matches(&v) {
                    found += 1;
                }
            }
        }
        let want = pairs.iter().filter(|(v, _)| pred.matches(v)).count();
        assert_eq!(found, want);
        assert!(decode_dir(&dir.1, KeyType::F64).is_err());
        for cut in 0..dir.1.len() {
            assert!(decode_dir(&dir.1[..cut], KeyType::I64).is_err());
        }
    }

    #[test]
    fn value_aware_splitting_tightens_ranges() {
        // Two clusters far apart inside every block.
        let pairs: Vec<(IndexValue, Loc)> = (0..400)
            .map(|i| {
                (
                    IndexValue::I64(if i % 2 == 0 { i } else { 1_000_000 + i }),
                    (0, i as u32),
                )
            })
            .collect();
        let off = build(1, KeyType::I64, Delta::Off, handles(1), pairs.clone());
        let auto = build(1, KeyType::I64, Delta::Auto, handles(1), pairs);
        assert!(auto.index.entries.len() > off.index.entries.len());
        let probe = Predicate::Eq(IndexValue::I64(500_000));
        assert!(
            !off.index.matching_entries(&probe).is_empty(),
            "one wide range covers the gap"
        );
        assert!(
            auto.index.matching_entries(&probe).is_empty(),
            "split ranges skip the gap"
        );
    }

    #[test]
    fn spatial_blocks_use_rtree() {
        let pairs: Vec<(IndexValue, Loc)> = (0..2000)
            .map(|i| {
                let x = (i % 40) as f64;
                let y = (i / 40) as f64;
                (
                    IndexValue::Point([x, y]),
                    ((i % 10) as u32, (i / 10) as u32),
                )
            })
            .collect();
        let b = build(2, KeyType::Point, Delta::Auto, handles(10), pairs.clone());
        let t = decode_dir(&b.blocks.last().unwrap().1, KeyType::Point).unwrap();
        let pred = Predicate::Within([3.5, 3.5, 6.5, 5.5]);
        let mut found = 0;
        for i in t.matching_entries(&pred) {
            let e = &t.entries[i];
            let sec = decode_sec_block(&b.blocks[e.sec_block as usize].1, KeyType::Point).unwrap();
            for (v, _) in &sec[e.start as usize..e.end as usize] {
                if pred.matches(&IndexValue::decode(KeyType::Point, v).unwrap()) {
                    found += 1;
                }
            }
        }
        assert_eq!(found, pairs.iter().filter(|(v, _)| pred.matches(v)).count());
        assert_eq!(found, 6);
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
