//! NEXT (Shi et al., SIGMOD 2025): the default index strategy.
//!
//! Per-table secondary index blocks map attribute values to the data
//! blocks holding them (`table`); the global index — one immutable
//! [`NextGlobal`] per version, holding each live table's global entries —
//! directs a query to matching secondary blocks and from there to data
//! entries at known positions. Validation uses the update memo
//! (`index::memo`).
//!
//! A query without a limit reads each matching secondary block once, finds
//! the matching entries by binary search, and reads each data block
//! holding one once, decoding only the entries at the recorded positions;
//! a query of many blocks reads them on several threads
//! ([`QueryOptions::block_threads`](crate::QueryOptions::block_threads)).
//! A top-K query orders the work by sequence number across all tables:
//! global entries (by the maximum sequence number of their slice) and the
//! secondary entries they expand to (by their own) share one max-heap, so
//! data entries are read newest first and the query stops as soon as K
//! valid results newer than everything left are known — about K data
//! blocks when nothing is stale. Tables wait beside the heap, ordered by
//! their largest sequence number, and a table's global index is searched
//! only when its bound is the highest pending work, so a table whose
//! entries are all older than K known results is neither searched nor
//! opened.

mod order;
mod packed;
pub mod pin;
pub mod sketch;
pub mod table;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::index::fxhash::FastMap;
use crate::index::hits::{PackBuf, Row};
use crate::index::memo::Validity;
use crate::index::strategy::{
    BuildMethod, IndexStrategy, OpenCx, QueryCx, StrategyKind, TableIndexBuilder, VersionSlot,
    WritePath,
};
use crate::index::tables;
use crate::index::value::{IndexValue, KeyType};
use crate::index::{lock, side, Hits, IndexStats, QueryProfile};
use pin::{PinBudget, PinPolicy, Pinned};
use sketch::Sketch;
use strata_lsm::cache::TableCache;
use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::{InstallEvent, TableContext};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::MemGet;
use strata_lsm::sstable::block::Block;
use strata_lsm::sstable::filter::BloomFilter;
use strata_lsm::sstable::{BlockHandle, MetaBlock, Table};
use strata_lsm::stats::ReadPurpose;
use strata_lsm::version::{FileMetaData, Version};

pub use table::{Delta, Probe, SecBlock, Shape, TableIndex};

use super::sidefile::SideFiles;
use super::stored::{StoredBuilder, StoredValues};

/// The global index of one NEXT index in one version: per live table, its
/// global entries (sorted ranges for scalars, an R-tree for spatial types).
#[derive(Default, Clone)]
pub struct NextGlobal {
    pub tables: BTreeMap<u64, Arc<TableIndex>>,
}

impl NextGlobal {
    pub fn memory_bytes(&self) -> usize {
        self.tables.values().map(|t| t.memory_bytes()).sum()
    }

    pub fn entries(&self) -> usize {
        self.tables.values().map(|t| t.entries.len()).sum()
    }
}

/// A secondary block's bytes: borrowed from the block cache (the table's
/// own meta block), read from a side file, or borrowed from the blocks the
/// table's index keeps in RAM ([`TableIndex::pinned`]).
enum SecBytes<'a> {
    Cached(MetaBlock),
    Side(Vec<u8>),
    Pinned(&'a [u8]),
}

impl SecBytes<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            SecBytes::Cached(m) => m.bytes(),
            SecBytes::Side(v) => v,
            SecBytes::Pinned(b) => b,
        }
    }
}

/// Reads secondary block `b` of index `index_id` of `table` (from its side
/// file if `ti` came from one). A table's own block is found by its
/// resolved id ([`TableIndex::sec_block_id`]) and borrowed from the block
/// cache.
fn read_sec_block<'a>(
    table: &Table,
    ti: &'a TableIndex,
    index_id: u32,
    b: u32,
    purpose: ReadPurpose,
) -> Result<SecBytes<'a>> {
    let lacks = || {
        Error::corruption(format!(
            "table {} lacks NEXT block {}",
            table.file_number(),
            table::sec_block_name(index_id, b)
        ))
    };
    if let Some(pinned) = &ti.pinned {
        return pinned
            .get(b as usize)
            .map(SecBytes::Pinned)
            .ok_or_else(lacks);
    }
    match &ti.side {
        Some(side) => side
            .block(&table::sec_block_name(index_id, b))?
            .map(SecBytes::Side)
            .ok_or_else(lacks),
        None => match ti.sec_block_id(table, index_id, b) {
            Some(id) => Ok(SecBytes::Cached(table.read_meta_block_for(id, purpose)?)),
            None => Err(lacks()),
        },
    }
}

/// A valid result: its packed key and value, and the (table, block offset)
/// it was read from.
type Found = (Row, Option<(u64, u64)>);

/// The results of one query. Validation is exact (a candidate is valid only
/// if it is its key's newest version at the snapshot), so each key is
/// found at most once and no per-key map is needed; `finish` still
/// removes duplicates defensively. Keys and values are copied into the
/// chunks of a `PackBuf`, not two allocations per result.
struct Acc {
    limit: Option<usize>,
    bytes: PackBuf,
    found: Vec<Found>,
    /// The `limit` highest sequence numbers found (min-heap).
    top: BinaryHeap<Reverse<SeqNo>>,
    /// Positions in `found` of results kept on the memo's word that still
    /// need the exact check ([`Keep::Exact`]).
    exact: Vec<usize>,
}

/// A validation verdict on a candidate read from a data block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    No,
    Yes,
    /// Kept for now; the query checks it exactly once the blocks are read
    /// (a worker thread cannot look versions up in the query's view).
    Exact,
}

impl From<bool> for Keep {
    fn from(ok: bool) -> Keep {
        if ok {
            Keep::Yes
        } else {
            Keep::No
        }
    }
}

impl Acc {
    fn new(limit: Option<usize>) -> Acc {
        // Sized for a small answer: growing from empty one chunk at a
        // time was 2.5% of an equality query's instructions. Without a
        // limit the first chunk holds 64 KiB (about 140 tweets; starting
        // from 8 KiB was 8% of a small `user_id` query's instructions);
        // `into_hits` gives back what the last chunk does not use.
        let rows = limit.unwrap_or(32).min(1024);
        let bytes = if limit.is_some() {
            rows * 256
        } else {
            64 << 10
        };
        Acc {
            limit,
            bytes: PackBuf::with_capacity(bytes),
            found: Vec::with_capacity(rows),
            top: BinaryHeap::with_capacity(limit.map_or(0, |k| k.min(1024) + 1)),
            exact: Vec::new(),
        }
    }

    /// Takes the results of `other` (an accumulator without a limit, as
    /// this one) after its own, without copying their bytes.
    fn absorb(&mut self, other: Acc) {
        debug_assert!(self.limit.is_none() && other.limit.is_none());
        let by = self.bytes.absorb(other.bytes);
        let base = self.found.len();
        self.found
            .extend(other.found.into_iter().map(|(row, b)| (row.shifted(by), b)));
        self.exact.extend(other.exact.into_iter().map(|i| i + base));
    }

    fn push(&mut self, key: &[u8], value: Option<&[u8]>, seq: SeqNo, block: Option<(u64, u64)>) {
        if let Some(k) = self.limit {
            self.top.push(Reverse(seq));
            if self.top.len() > k {
                self.top.pop();
            }
        }
        let row = self.bytes.push(key, value, seq);
        self.found.push((row, block));
    }

    /// Drops the results at positions `sorted` (ascending) of `found`.
    fn remove(&mut self, sorted: &[usize]) {
        if sorted.is_empty() {
            return;
        }
        let mut gone = sorted.iter().peekable();
        let mut i = 0usize;
        self.found.retain(|_| {
            let keep = gone.next_if_eq(&&i).is_none();
            i += 1;
            keep
        });
    }

    /// True if `limit` results newer than `seq` are known.
    fn full_before(&self, seq: SeqNo) -> bool {
        match self.limit {
            Some(0) => true,
            Some(k) => self.top.len() >= k && self.top.peek().is_some_and(|Reverse(s)| *s > seq),
            None => false,
        }
    }

    /// The hits, newest first, and the number of distinct data blocks
    /// holding them.
    fn finish(mut self) -> (Hits, u64) {
        // A small answer (every top-K, most equality queries) is sorted in
        // place: no further vectors.
        if self.found.len() <= 64 {
            let v = &mut self.found;
            v.sort_unstable_by_key(|h| Reverse(h.0.seq));
            v.dedup_by(|a, b| a.0.seq == b.0.seq);
            if let Some(k) = self.limit {
                v.truncate(k);
            }
            let mut blocks = [(0u64, 0u64); 64];
            let mut n = 0;
            for (slot, b) in blocks.iter_mut().zip(v.iter().filter_map(|(_, b)| *b)) {
                *slot = b;
                n += 1;
            }
            let blocks = blocks.get_mut(..n).unwrap_or_default();
            blocks.sort_unstable();
            let distinct = blocks.chunk_by(|a, b| a == b).count() as u64;
            let rows = self.found.iter().map(|(r, _)| *r).collect();
            return (self.bytes.into_hits(rows), distinct);
        }
        // Every version of every key has its own sequence number, and
        // validation passes at most one version of a key (the newest at
        // the snapshot), so sorting by sequence number alone orders the
        // hits; an entry reached twice (overlapping global slices) is
        // adjacent to itself. The sort moves (seq, position) pairs.
        let mut ranked: Vec<(SeqNo, u32)> = self
            .found
            .iter()
            .zip(0u32..)
            .map(|(h, i)| (h.0.seq, i))
            .collect();
        order::by_seq_desc(&mut ranked);
        ranked.dedup_by_key(|o| o.0);
        if let Some(k) = self.limit {
            ranked.truncate(k);
        }
        // Distinct blocks: without a limit every hit is kept, and a full
        // scan takes each block's hits in one group (`scan_table`), so the
        // blocks are the runs of equal blocks in the order found (no sort
        // of 16-byte pairs per hit); a top-K query sorts its K.
        let runs = match self.limit {
            None => {
                let mut prev = None;
                let mut runs = 0u64;
                for (_, b) in &self.found {
                    if b.is_some() && *b != prev {
                        runs += 1;
                    }
                    prev = *b;
                }
                Some(runs)
            }
            Some(_) => None,
        };
        let mut rows = Vec::with_capacity(ranked.len());
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for (_, i) in ranked {
            if let Some((row, block)) = self.found.get(i as usize) {
                rows.push(*row);
                if runs.is_none() {
                    blocks.extend(*block);
                }
            }
        }
        debug_assert!(
            {
                let mut keys: Vec<&[u8]> = rows.iter().map(|r| self.bytes.key(r)).collect();
                keys.sort_unstable();
                keys.windows(2).all(|w| w.first() != w.get(1))
            },
            "validation passed two versions of one key"
        );
        let distinct = runs.unwrap_or_else(|| {
            blocks.sort_unstable();
            blocks.dedup();
            blocks.len() as u64
        });
        (self.bytes.into_hits(rows), distinct)
    }
}

/// Work of a top-K query, ordered by sequence number (newest first): a
/// global entry (by the maximum seq of its slice) or one secondary entry
/// (by its seq). Tables are numbered by their position in the query's
/// table list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Work {
    /// Table `table` not searched yet (by an upper bound of its entries'
    /// sequence numbers): when its turn comes, its global index is
    /// searched and its matching global entries pushed. A table whose
    /// entries are all older than K known results is never searched.
    /// Tables wait in their own list, in this order, not in the heap.
    Table { table: u32 },
    /// Global entry `entry` of table `table`.
    Slice { table: u32, entry: u32 },
    /// Entry `pos` of data block `block` (position in the handle table).
    Entry { table: u32, block: u32, pos: u32 },
}

/// One query's reading of tables: the prepared predicate and snapshot.
struct TableScan<'a> {
    index_id: u32,
    ty: KeyType,
    probe: &'a Probe<'a>,
    snapshot: SeqNo,
    keys_only: bool,
}

/// A matching secondary entry of one table: data block position, entry
/// position, sequence number.
type Cand = (u32, u32, SeqNo);

/// A table a query reads: the table, its index, its matching global
/// entries.
type Visit<'a> = (Arc<Table>, &'a TableIndex, Vec<usize>);

/// A visible table the index covers: its file's metadata (the table is
/// opened only when read; a top-K query searches it only when its turn
/// comes, [`Work::Table`]) and its index.
type Covered<'a> = (&'a FileMetaData, &'a TableIndex);

/// The candidates of one data block: visit, and the range of that visit's
/// candidates.
type Group = (u32, u32, u32);

/// The update memo's verdict on a candidate (key, seq), callable from any
/// thread.
type Verdict<'a> = dyn Fn(&[u8], SeqNo) -> Keep + Sync + 'a;

/// What the reading of data blocks counted.
#[derive(Debug, Default, Clone, Copy)]
struct ScanCounts {
    blocks: u64,
    checked: u64,
    stale: u64,
}

impl ScanCounts {
    fn add(&mut self, o: ScanCounts) {
        self.blocks += o.blocks;
        self.checked += o.checked;
        self.stale += o.stale;
    }
}

impl TableScan<'_> {
    /// The handle of data block `block_pos` of `table`.
    fn handle(table: &Table, ti: &TableIndex, block_pos: u32) -> Result<BlockHandle> {
        ti.handles.get(block_pos as usize).copied().ok_or_else(|| {
            Error::corruption(format!(
                "NEXT entry of table {} points past its handle table",
                table.file_number()
            ))
        })
    }

    /// Takes the entries `cands` (sorted by position, all in `block`, the
    /// data block at `h` of `table`) from that block: each valid one (same
    /// seq as its secondary entry, a put, validated) goes to `acc`.
    fn take(
        &self,
        table: &Table,
        h: BlockHandle,
        block: &Arc<Block>,
        cands: &[Cand],
        acc: &mut Acc,
        validate: &mut impl FnMut(&[u8], SeqNo) -> Result<Keep>,
    ) -> Result<()> {
        let file = table.file_number();
        let ords = cands.iter().map(|c| c.1);
        table.visit_data_block_entries(h, block, ords, |ord, key, seq, kind, value| {
            let want = cands
                .binary_search_by_key(&ord, |c| c.1)
                .ok()
                .and_then(|i| cands.get(i))
                .map(|c| c.2);
            if want != Some(seq) {
                return Err(Error::corruption(format!(
                    "NEXT entry {ord} of block {} of table {file} has seq {seq}, its index entry {want:?}",
                    h.offset
                )));
            }
            if kind != ValueKind::Value || seq > self.snapshot {
                return Ok(());
            }
            let keep = validate(key, seq)?;
            if keep == Keep::No {
                return Ok(());
            }
            let value = (!self.keys_only).then_some(value);
            acc.push(key, value, seq, Some((file, h.offset)));
            if keep == Keep::Exact {
                acc.exact.push(acc.found.len() - 1);
            }
            Ok(())
        })
    }

    /// The candidates of one table for a query without a limit, sorted by
    /// (data block, entry): each matching secondary block read once.
    fn table_cands(
        &self,
        table: &Table,
        ti: &TableIndex,
        hits: &[usize],
        profile: &mut QueryProfile,
    ) -> Result<Vec<Cand>> {
        let mut cands: Vec<Cand> = Vec::with_capacity(32);
        let mut current: Option<(u32, SecBytes)> = None;
        for &i in hits {
            let e = ti
                .entries
                .get(i)
                .ok_or_else(|| Error::corruption("NEXT global entry out of range"))?;
            if current.as_ref().is_none_or(|(b, _)| *b != e.sec_block) {
                profile.index_blocks_read += 1;
                current = Some((
                    e.sec_block,
                    read_sec_block(table, ti, self.index_id, e.sec_block, ReadPurpose::Query)?,
                ));
            }
            let Some((_, bytes)) = &current else {
                continue;
            };
            let sb = SecBlock::parse(bytes.bytes(), self.ty)?;
            sb.for_each_match(e.start, e.end, self.probe, |se| {
                if se.seq <= self.snapshot {
                    cands.push((se.loc.0, se.loc.1, se.seq));
                }
                Ok(())
            })?;
        }
        // Equal positions are one entry (the same sequence number), which
        // `take` visits once.
        order::by_position(&mut cands, ti.handles.len());
        Ok(cands)
    }

    /// Reads the data blocks of `groups` (runs of `cands`, one data block
    /// each) and takes their candidates into `acc`, with the memo's
    /// verdicts (an [`Keep::Exact`] one is left to the caller).
    fn read_groups(
        &self,
        visits: &[Visit<'_>],
        cands: &[Vec<Cand>],
        groups: &[Group],
        verdict: &Verdict<'_>,
        acc: &mut Acc,
        counts: &mut ScanCounts,
    ) -> Result<()> {
        let mut validate = |key: &[u8], seq: SeqNo| -> Result<Keep> {
            counts.checked += 1;
            let keep = verdict(key, seq);
            if keep == Keep::No {
                counts.stale += 1;
            }
            Ok(keep)
        };
        for &(v, start, end) in groups {
            let (Some((table, ti, _)), Some(group)) = (
                visits.get(v as usize),
                cands
                    .get(v as usize)
                    .and_then(|c| c.get(start as usize..end as usize)),
            ) else {
                return Err(Error::corruption("NEXT block group out of range"));
            };
            let Some(first) = group.first() else {
                continue;
            };
            let h = Self::handle(table, ti, first.0)?;
            counts.blocks += 1;
            let block = table.read_data_block(h)?;
            self.take(table, h, &block, group, acc, &mut validate)?;
        }
        Ok(())
    }

    /// Every match of `visits` (no limit). Each matching secondary block is
    /// read once on the querying thread; then each data block holding a
    /// candidate once, by `threads(blocks)` threads taking runs of blocks
    /// from one shared queue, each into its own accumulator, appended to
    /// `acc` at the end. Candidates the memo cannot settle are left in
    /// `acc.exact` for the caller's exact check.
    fn scan(
        &self,
        visits: &[Visit<'_>],
        threads: impl FnOnce(usize) -> usize,
        verdict: &Verdict<'_>,
        profile: &mut QueryProfile,
        acc: &mut Acc,
    ) -> Result<ScanCounts> {
        let mut cands = Vec::with_capacity(visits.len());
        for (table, ti, hits) in visits {
            cands.push(self.table_cands(table, ti, hits, profile)?);
        }
        let total: usize = cands.iter().map(Vec::len).sum();
        let mut groups: Vec<Group> = Vec::with_capacity(total);
        for (v, c) in (0u32..).zip(&cands) {
            let mut start = 0u32;
            for run in c.chunk_by(|a, b| a.0 == b.0) {
                let end = start + run.len() as u32;
                groups.push((v, start, end));
                start = end;
            }
        }
        let threads = threads(groups.len());
        let mut counts = ScanCounts::default();
        if threads <= 1 {
            // At most one hit per candidate: growing the 80-byte hits one
            // doubling at a time (copies of megabytes) was 6% of a large
            // query.
            acc.found.reserve(total);
            self.read_groups(visits, &cands, &groups, verdict, acc, &mut counts)?;
            profile.data_blocks_read += counts.blocks;
            return Ok(counts);
        }
        // Runs of blocks small enough that the threads finish together,
        // large enough that taking one costs nothing.
        let unit = (groups.len() / (threads * 8)).max(8);
        let parts = strata_lsm::sync::each_unit(
            threads,
            groups.len().div_ceil(unit),
            || (Acc::new(None), ScanCounts::default()),
            |u, (mine, counts)| {
                let run = groups
                    .get(u * unit..((u + 1) * unit).min(groups.len()))
                    .unwrap_or_default();
                self.read_groups(visits, &cands, run, verdict, mine, counts)
            },
        )?;
        acc.found.reserve(total);
        for (found, c) in parts {
            acc.absorb(found);
            counts.add(c);
        }
        profile.data_blocks_read += counts.blocks;
        Ok(counts)
    }

    /// The top K across `visits`, newest first at entry granularity (see
    /// the module documentation). Each table's global index is searched
    /// only when no K results newer than its newest entry are known, and
    /// each table is opened (`open`) only then. Returns the number of
    /// tables whose secondary blocks were read and the number of tables
    /// searched without a match.
    fn top_k(
        &self,
        visits: &[Covered<'_>],
        open: &dyn Fn(&FileMetaData) -> Result<Arc<Table>>,
        profile: &mut QueryProfile,
        acc: &mut Acc,
        validate: &mut impl FnMut(&[u8], SeqNo) -> Result<bool>,
    ) -> Result<(u64, u64)> {
        // Sized for a typical top-K's slices and entries: growing it one
        // doubling at a time showed in small queries' profiles.
        let mut heap: BinaryHeap<(SeqNo, Work)> = BinaryHeap::with_capacity(128);
        // The tables, by their bound, newest first: no entry of a table is
        // newer than its largest sequence number, and none above the
        // snapshot is used. Taken in turn beside the heap rather than
        // through it (their pushes and pops were a tenth of an equality
        // top-10 query's instructions).
        let mut order: Vec<(SeqNo, Work)> = (0u32..)
            .zip(visits)
            .map(|(t, (f, _))| (f.largest_seq.min(self.snapshot), Work::Table { table: t }))
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let mut order = order.into_iter().peekable();
        let mut tables: Vec<Option<Arc<Table>>> = vec![None; visits.len()];
        let mut empty = 0u64;
        let mut hits: Vec<usize> = Vec::with_capacity(16);
        // Blocks read by this query, each read once.
        // Small integer keys: a multiplicative hash, not SipHash (which
        // was a fifth of an equality top-10 query's instructions).
        // Sized for about K blocks: growing them was 3% of an equality
        // top-10 query's instructions.
        let cap = acc.limit.unwrap_or(0).clamp(4, 64) * 2;
        let mut sec: FastMap<(u32, u32), SecBytes> =
            FastMap::with_capacity_and_hasher(cap, Default::default());
        let mut data: FastMap<(u32, u32), Arc<Block>> =
            FastMap::with_capacity_and_hasher(cap, Default::default());
        loop {
            // The newest pending work: the next table's or the heap's, in
            // the heap's order (`None` orders below any work).
            let from_tables = order.peek() > heap.peek();
            let next = if from_tables {
                order.peek()
            } else {
                heap.peek()
            };
            let Some(&(seq, work)) = next else {
                break;
            };
            if acc.full_before(seq) {
                break;
            }
            if from_tables {
                order.next();
            } else {
                heap.pop();
            }
            match work {
                Work::Table { table: t } => {
                    let Some((_, ti)) = visits.get(t as usize) else {
                        continue;
                    };
                    ti.matching_entries_into(self.probe, &mut hits);
                    if hits.is_empty() {
                        empty += 1;
                    }
                    for &i in &hits {
                        if let Some(e) = ti.entries.get(i) {
                            heap.push((
                                e.max_seq,
                                Work::Slice {
                                    table: t,
                                    entry: i as u32,
                                },
                            ));
                        }
                    }
                }
                Work::Slice { table: t, entry } => {
                    let Some(((f, ti), slot)) =
                        visits.get(t as usize).zip(tables.get_mut(t as usize))
                    else {
                        continue;
                    };
                    let table = match slot {
                        Some(t) => &*t,
                        None => &*slot.insert(open(f)?),
                    };
                    let e = ti
                        .entries
                        .get(entry as usize)
                        .ok_or_else(|| Error::corruption("NEXT global entry out of range"))?;
                    let bytes = match sec.entry((t, e.sec_block)) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            profile.index_blocks_read += 1;
                            v.insert(read_sec_block(
                                table,
                                ti,
                                self.index_id,
                                e.sec_block,
                                ReadPurpose::Query,
                            )?)
                        }
                    };
                    let sb = SecBlock::parse(bytes.bytes(), self.ty)?;
                    sb.for_each_match(e.start, e.end, self.probe, |se| {
                        if se.seq > e.max_seq {
                            return Err(Error::corruption(format!(
                                "NEXT entry of table {} above its global entry's max seq",
                                table.file_number()
                            )));
                        }
                        if se.seq <= self.snapshot {
                            let (block, pos) = se.loc;
                            heap.push((
                                se.seq,
                                Work::Entry {
                                    table: t,
                                    block,
                                    pos,
                                },
                            ));
                        }
                        Ok(())
                    })?;
                }
                Work::Entry {
                    table: t,
                    block,
                    pos,
                } => {
                    // An entry is pushed only by its table's slice, which
                    // opened the table.
                    let Some(((_, ti), Some(table))) =
                        visits.get(t as usize).zip(tables.get(t as usize))
                    else {
                        continue;
                    };
                    let h = Self::handle(table, ti, block)?;
                    let b = match data.entry((t, block)) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            profile.data_blocks_read += 1;
                            v.insert(table.read_data_block(h)?)
                        }
                    };
                    let mut keep = |key: &[u8], seq: SeqNo| validate(key, seq).map(Keep::from);
                    self.take(table, h, b, &[(block, pos, seq)], acc, &mut keep)?;
                }
            }
        }
        // A table is opened exactly when its first slice is read.
        let read = tables.iter().filter(|t| t.is_some()).count() as u64;
        Ok((read, empty))
    }
}

/// Every match of table `t`, which the index does not cover yet (an online
/// build is running): each key's newest version at `snapshot` in the table,
/// if a put whose record `matches`, validated like any candidate. Reads
/// every data block once.
fn scan_uncovered(
    t: &Table,
    snapshot: SeqNo,
    keys_only: bool,
    matches: &dyn Fn(&[u8]) -> bool,
    profile: &mut QueryProfile,
    acc: &mut Acc,
    validate: &mut impl FnMut(&[u8], SeqNo) -> Result<bool>,
) -> Result<()> {
    let mut last: Option<Vec<u8>> = None;
    for h in t.data_block_handles()? {
        profile.data_blocks_read += 1;
        for (key, seq, kind, value) in t.read_data_block_entries(h)? {
            // Versions of a key are ordered newest first: the first one
            // visible at the snapshot is the table's version of the key.
            if seq > snapshot || last.as_deref() == Some(key.as_slice()) {
                continue;
            }
            last = Some(key.clone());
            if kind != ValueKind::Value || acc.full_before(seq) || !matches(&value) {
                continue;
            }
            if !validate(&key, seq)? {
                continue;
            }
            let value = (!keys_only).then_some(value.as_slice());
            acc.push(&key, value, seq, Some((t.file_number(), h.offset)));
        }
    }
    Ok(())
}

/// Per-table structures built while a table is written, consumed when it
/// is installed, by file number.
type Pending = tables::Pending<TableIndex>;

/// The NEXT strategy of one index.
pub(crate) struct Next {
    id: u32,
    name: String,
    ty: KeyType,
    shape: Shape,
    /// The budget of tables' secondary blocks kept in RAM
    /// ([`TableIndex::pinned`]); `None`: none is.
    pin: Option<Arc<PinBudget>>,
    tables: Arc<TableCache>,
    pending: Pending,
    sides: Arc<SideFiles>,
}

impl Next {
    /// Parameters: `delta` (`auto`, `off` or a number, see [`Delta`]);
    /// `filter_bits` (0–32, default [`table::DEFAULT_FILTER_BITS`]: bits
    /// per distinct value of each table's value filter; 0 writes none);
    /// `slice` (spatial types: most entries per global entry, default
    /// [`table::DEFAULT_SPATIAL_SLICE`]; 0: no cap); `pin` (`true`,
    /// `false` or a budget, default [`pin::DEFAULT_PIN_BUDGET`], see
    /// [`PinPolicy`]).
    pub fn open(cx: &OpenCx<'_>) -> Result<Next> {
        let mut shape = Shape::default();
        let mut pin = PinPolicy::default();
        for (k, v) in cx.params {
            match k.as_str() {
                "delta" => shape.delta = Delta::parse(v)?,
                "filter_bits" => {
                    shape.filter_bits =
                        v.parse::<u8>().ok().filter(|b| *b <= 32).ok_or_else(|| {
                            Error::invalid(format!(
                                "filter_bits must be an integer from 0 to 32, not {v:?}"
                            ))
                        })?
                }
                "slice" => {
                    shape.spatial_slice = v.parse::<u32>().map_err(|_| {
                        Error::invalid(format!(
                            "slice must be a number of entries (0: no cap), not {v:?}"
                        ))
                    })?
                }
                "pin" => pin = PinPolicy::parse(v)?,
                _ => {
                    return Err(Error::invalid(format!(
                    "unknown parameter {k:?} for strategy next (known: delta, filter_bits, slice, pin)"
                )))
                }
            }
        }
        Ok(Next {
            id: cx.id,
            name: cx.spec.name.clone(),
            ty: cx.spec.key_type,
            shape,
            pin: PinBudget::of(pin),
            tables: cx.tables.clone(),
            pending: Arc::default(),
            sides: cx.sides.clone(),
        })
    }

    /// Reads table `f`'s directory block of this index (`None` if the table
    /// was written before the index existed).
    /// Its side file's blocks instead for a table that existed before the
    /// index ([`BuildMethod::PerTable`]).
    ///
    /// `purpose`: [`ReadPurpose::Query`] for the index a version installs
    /// (pinned if the index pins), [`ReadPurpose::Compaction`] for a
    /// compaction reading its inputs' values (never pinned, not cached).
    fn read_table_index(
        &self,
        f: &FileMetaData,
        purpose: ReadPurpose,
    ) -> Result<Option<TableIndex>> {
        let pin = self.pin.as_ref().filter(|_| purpose == ReadPurpose::Query);
        let t = self.tables.get(f.number, f.file_size)?;
        let dir = table::dir_block_name(self.id);
        let vf = table::filter_block_name(self.id);
        let sketch_name = table::sketch_block_name(self.id);
        let sketch = |bytes: Option<&Vec<u8>>, ti: &TableIndex| -> Result<Option<Sketch>> {
            bytes
                .map(|b| {
                    let counts: Vec<u32> = ti.entries.iter().map(table::GlobalEntry::len).collect();
                    Sketch::decode(b, &counts).map_err(|e| {
                        Error::corruption(format!(
                            "index {:?} in table {}: {e}",
                            self.name, f.number
                        ))
                    })
                })
                .transpose()
        };
        let filter = |bytes: Option<Vec<u8>>| -> Result<Option<BloomFilter>> {
            bytes
                .map(|b| {
                    BloomFilter::from_bytes(b).map_err(|e| {
                        Error::corruption(format!(
                            "value filter of index {:?} in table {}: {e}",
                            self.name, f.number
                        ))
                    })
                })
                .transpose()
        };
        if let Some(bytes) = t.meta_block_for(&dir, purpose)? {
            let mut ti = table::decode_dir(&bytes, self.ty)?;
            let vf_bytes = t.meta_block_for(&vf, purpose)?;
            let vf_len = vf_bytes.as_ref().map_or(0, |b| b.len() as u64);
            ti.filter = filter(vf_bytes)?;
            let sketch_bytes = t.meta_block_for(&sketch_name, purpose)?;
            ti.sketch = sketch(sketch_bytes.as_ref(), &ti)?;
            let sec_bytes = (0..ti.sec_blocks)
                .filter_map(|b| t.meta_block_size(&table::sec_block_name(self.id, b)))
                .sum::<u64>();
            ti.disk_bytes = bytes.len() as u64
                + vf_len
                + sketch_bytes.as_ref().map_or(0, |b| b.len() as u64)
                + sec_bytes;
            // Charged before the blocks are read: a table over the budget
            // is not read at all here.
            if let Some(charge) = pin.and_then(|b| b.reserve(sec_bytes as usize)) {
                let blocks = self.pin_blocks(f, &ti, |name| {
                    t.meta_block_id(name)
                        .map(|id| t.load_meta_block(id))
                        .transpose()
                })?;
                ti.pinned = Some(Pinned::new(blocks, charge));
            }
            return Ok(Some(ti));
        }
        let Some(side) = self.sides.get(self.id, f.number) else {
            return Ok(None);
        };
        let bytes = side.block(&dir)?.ok_or_else(|| {
            Error::corruption(format!(
                "side file of table {} for index {:?} lacks {dir}",
                f.number, self.name
            ))
        })?;
        let mut ti = table::decode_dir(&bytes, self.ty)?;
        ti.filter = filter(side.block(&vf)?)?;
        ti.sketch = sketch(side.block(&sketch_name)?.as_ref(), &ti)?;
        ti.disk_bytes = side.size();
        // The side file's size bounds its secondary blocks' (checked by
        // `Pinned::new`); the charge is then trimmed to what they hold.
        if let Some(charge) = pin.and_then(|b| b.reserve(side.size() as usize)) {
            let blocks = self.pin_blocks(f, &ti, |name| side.block(name))?;
            let held: usize = blocks.iter().map(|b| b.len()).sum();
            ti.pinned = Some(Pinned::new(blocks, charge.trim(held)));
        }
        ti.side = Some(side);
        Ok(Some(ti))
    }

    /// Every secondary block of `ti` (the index of table `f`), by number,
    /// each taken by name from `get` (the table's or its side file's
    /// blocks): what [`TableIndex::pinned`] holds. A missing block is
    /// corruption.
    fn pin_blocks(
        &self,
        f: &FileMetaData,
        ti: &TableIndex,
        get: impl Fn(&str) -> Result<Option<Vec<u8>>>,
    ) -> Result<Vec<Box<[u8]>>> {
        (0..ti.sec_blocks)
            .map(|b| {
                let name = table::sec_block_name(self.id, b);
                get(&name)?.map(Vec::into_boxed_slice).ok_or_else(|| {
                    Error::corruption(format!(
                        "table {} lacks block {name} of index {:?}",
                        f.number, self.name
                    ))
                })
            })
            .collect()
    }
}

impl Next {
    fn builder(&self, file: u64, pending: Option<Pending>) -> NextBuilder {
        NextBuilder {
            id: self.id,
            ty: self.ty,
            shape: self.shape,
            pin: self.pin.clone(),
            file,
            pending,
            handles: Vec::new(),
            in_block: 0,
            arena: Vec::new(),
            items: Vec::new(),
        }
    }
}

/// Builds one NEXT index's secondary blocks for one table.
struct NextBuilder {
    id: u32,
    ty: KeyType,
    shape: Shape,
    /// Keep the built secondary blocks in the installed index, if they
    /// fit this budget.
    pin: Option<Arc<PinBudget>>,
    file: u64,
    /// Where a table builder leaves its structure for the install; `None`
    /// for a side file's builder (the install reads the file).
    pending: Option<Pending>,
    handles: Vec<BlockHandle>,
    /// Entries seen so far in the current data block.
    in_block: u32,
    /// The indexed entries' encoded values, one after another.
    arena: Vec<u8>,
    /// Per indexed entry: bounds of its value in `arena`, location, seq.
    items: Vec<table::Encoded>,
}

impl NextBuilder {
    /// The location of the next entry, in data block `block`.
    fn locate(&mut self, block: BlockHandle) -> table::Loc {
        if self.handles.last() != Some(&block) {
            self.handles.push(block);
            self.in_block = 0;
        }
        let pos = ((self.handles.len() - 1) as u32, self.in_block);
        self.in_block += 1;
        pos
    }
}

impl TableIndexBuilder for NextBuilder {
    fn add(&mut self, _user_key: &[u8], seq: SeqNo, block: BlockHandle, attr: Option<IndexValue>) {
        let pos = self.locate(block);
        if let Some(v) = attr {
            let start = self.arena.len();
            v.encode_into(&mut self.arena);
            self.items.push(((start, self.arena.len()), pos, seq));
        }
    }

    /// Takes the bytes as they are: the caller's contract (a value of
    /// this index's type, encoded) is `table::build_encoded`'s.
    fn add_encoded(
        &mut self,
        user_key: &[u8],
        seq: SeqNo,
        block: BlockHandle,
        ty: KeyType,
        enc: &[u8],
    ) {
        if ty != self.ty {
            // Never expected: the observer passes the index's own type.
            let v = IndexValue::decode(ty, enc).ok();
            return self.add(user_key, seq, block, v);
        }
        let pos = self.locate(block);
        let start = self.arena.len();
        self.arena.extend_from_slice(enc);
        self.items.push(((start, self.arena.len()), pos, seq));
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        let arena = std::mem::take(&mut self.arena);
        let built = table::build_encoded(
            self.id,
            self.ty,
            &self.shape,
            std::mem::take(&mut self.handles),
            &arena,
            std::mem::take(&mut self.items),
        );
        let mut index = built.index;
        index.disk_bytes = built.blocks.iter().map(|(_, b)| b.len() as u64).sum();
        // `build_encoded` lists the secondary blocks first, by number.
        let sec = built.blocks.iter().take(index.sec_blocks as usize);
        let charge = match (&self.pin, &self.pending) {
            (Some(b), Some(_)) => b.reserve(sec.clone().map(|(_, b)| b.len()).sum()),
            _ => None,
        };
        if let Some(charge) = charge {
            let blocks = sec.map(|(_, b)| b.clone().into_boxed_slice()).collect();
            index.pinned = Some(Pinned::new(blocks, charge));
        }
        if let Some(p) = &self.pending {
            lock(p).insert(self.file, Arc::new(index));
        }
        Ok(built.blocks)
    }
}

impl IndexStrategy for Next {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Next
    }

    fn write_path(&self) -> WritePath {
        WritePath::Tables
    }

    fn uses_memo(&self) -> bool {
        true
    }

    fn stored_values(
        &self,
        inputs: &[Arc<FileMetaData>],
        budget: usize,
    ) -> Result<Option<StoredValues>> {
        let mut out = StoredBuilder::for_inputs(self.ty, budget, inputs);
        for f in inputs {
            // A table written before the index existed, or in the old
            // format, contributes nothing: its entries are read.
            let Some(ti) = self.read_table_index(f, ReadPurpose::Compaction)? else {
                continue;
            };
            if ti.check_queryable(f.number).is_err() {
                continue;
            }
            let t = self.tables.get(f.number, f.file_size)?;
            for b in 0..ti.sec_blocks {
                let bytes = read_sec_block(&t, &ti, self.id, b, ReadPurpose::Compaction)?;
                let block = SecBlock::parse(bytes.bytes(), self.ty)?;
                if !block.for_each_value(|value, seq| out.push(seq, value))? {
                    return Ok(None);
                }
            }
        }
        Ok(Some(out.finish()))
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
            .and_then(|p| p.downcast_ref::<NextGlobal>())
            .map(|g| &g.tables);
        let tables = tables::install(prev, ev, &self.pending, |f| {
            self.read_table_index(f, ReadPurpose::Query)
        })?;
        Ok(Some(Arc::new(NextGlobal { tables })))
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
            |f| self.read_table_index(f, ReadPurpose::Query),
            "blocks",
            &self.name,
        )?;
        Ok(Some(Arc::new(NextGlobal { tables })))
    }

    fn covers_table(&self, slot: Option<&VersionSlot>, file: u64) -> bool {
        slot.and_then(|s| s.downcast_ref::<NextGlobal>())
            .is_some_and(|g| g.tables.contains_key(&file))
    }

    fn covers(&self, slot: Option<&VersionSlot>, version: &Version) -> bool {
        let g = slot.and_then(|s| s.downcast_ref::<NextGlobal>());
        tables::covers(g.map(|g| &g.tables), version)
    }

    fn build_method(&self) -> BuildMethod {
        BuildMethod::PerTable
    }

    /// Memtables first, then the tables' matching entries (see the module
    /// documentation for the order and the top-K stop); candidates
    /// validated with the update memo (an exact lookup in the query's view
    /// only for keys written after its snapshot).
    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Hits> {
        let (def, view, pred, opts) = (cx.def, cx.view, cx.pred, cx.opts);
        view.pause();
        let snapshot = view.snapshot;
        let mut acc = Acc::new(opts.limit);
        let mut checked = 0u64;
        let mut stale = 0u64;
        let counters = &def.counters;
        let (memo, generation, memo_from) = (cx.memo, cx.generation, cx.memo_from);
        // The memo lock is taken per candidate, never across I/O, so long
        // queries do not hold up writers. A version written before the
        // memo saw every write (an online build's `memo_from`) may have a
        // newer one the memo never noted: the memo's "valid" is then
        // checked exactly.
        let verdict = |key: &[u8], seq: SeqNo| -> Keep {
            counters.validations.fetch_add(1, Relaxed);
            match memo.read(key).validate(key, seq, snapshot, generation) {
                Validity::Valid if seq > memo_from => Keep::Yes,
                Validity::Stale => {
                    counters.failed.fetch_add(1, Relaxed);
                    Keep::No
                }
                Validity::Valid | Validity::Check => Keep::Exact,
            }
        };
        let exact = |key: &[u8], seq: SeqNo| -> Result<bool> {
            counters.exact.fetch_add(1, Relaxed);
            let ok = view.newest_seq(key)? == Some(seq);
            if !ok {
                counters.failed.fetch_add(1, Relaxed);
            }
            Ok(ok)
        };
        let mut validate = |key: &[u8], seq: SeqNo| -> Result<bool> {
            checked += 1;
            let ok = match verdict(key, seq) {
                Keep::Yes => true,
                Keep::No => false,
                Keep::Exact => exact(key, seq)?,
            };
            if !ok {
                stale += 1;
            }
            Ok(ok)
        };
        let keys_only = opts.keys_only;

        // Memtable candidates newest first across the memtables (every
        // one is newer than any table entry), so a top-K query stops at
        // the K-th valid one without validating or fetching the rest; a
        // keys-only query fetches no record. A top-K query first takes
        // each memtable's newest few (K and half again, for stale ones):
        // a popular value has many versions in a memtable, and copying
        // every one's key was most of a LOOKUP's memtable phase. If those
        // run out before K are valid, a second round takes the older ones.
        let mut limit = opts
            .limit
            .map(|k| k.saturating_add(k / 2).saturating_add(2));
        // Second round: only candidates older than the first round's.
        let mut below: Option<SeqNo> = None;
        loop {
            // Every candidate at or above `floor` was taken this round.
            let mut floor: Option<SeqNo> = None;
            let mut cands: Vec<(SeqNo, Vec<u8>, usize)> = Vec::new();
            for (i, m) in view.mems.iter().enumerate() {
                let n = side::newest_candidates(m, self.id, pred, snapshot, limit);
                if let Some(s) = n.complete_below {
                    floor = Some(floor.map_or(s, |f| f.max(s)));
                }
                cands.extend(
                    n.entries
                        .into_iter()
                        .filter(|&(_, seq)| below.is_none_or(|b| seq < b))
                        .map(|(key, seq)| (seq, key, i)),
                );
            }
            if opts.limit.is_some() {
                cands.sort_unstable_by_key(|c| Reverse(c.0));
            }
            let mut full = false;
            for (seq, key, i) in cands {
                if floor.is_some_and(|f| seq < f) {
                    break;
                }
                if acc.full_before(seq) {
                    full = true;
                    break;
                }
                if !validate(&key, seq)? {
                    continue;
                }
                if keys_only {
                    acc.push(&key, None, seq, None);
                    continue;
                }
                let Some(m) = view.mems.get(i) else { continue };
                // The side structure's reference to the memtable's value
                // when it has one (no skiplist search), else the search.
                if let Some(v) = side::record(m, seq) {
                    acc.push(&key, Some(v), seq, None);
                    continue;
                }
                match m.get(&key, seq) {
                    Some(MemGet::Value(s, v)) if s == seq => acc.push(&key, Some(&v), seq, None),
                    _ => continue,
                }
            }
            match floor {
                Some(f) if !full => {
                    below = Some(f);
                    limit = None;
                }
                _ => break,
            }
        }

        let empty = NextGlobal::default();
        let global = cx.slot_as::<NextGlobal>().unwrap_or(&empty);
        let probe = Probe::new(pred, self.ty);
        // The visible tables the index covers (those it does not yet, in
        // an online build, are scanned here).
        let mut covered: Vec<Covered<'_>> = Vec::with_capacity(view.version.num_files());
        for (_, f) in view.version.all_files() {
            if f.smallest_seq > snapshot {
                continue;
            }
            let Some(ti) = global.tables.get(&f.number) else {
                if cx.building {
                    // Not covered yet by the online build: every entry.
                    let t = view.tables.get(f.number, f.file_size)?;
                    let check =
                        |v: &[u8]| -> bool { def.extract(v, None).is_ok_and(|a| pred.matches(&a)) };
                    scan_uncovered(
                        &t,
                        snapshot,
                        keys_only,
                        &check,
                        profile,
                        &mut acc,
                        &mut validate,
                    )?;
                    continue;
                }
                return Err(Error::corruption(format!(
                    "index {:?} has no entries for live table {}",
                    def.spec.name, f.number
                )));
            };
            ti.check_queryable(f.number)?;
            covered.push((&**f, &**ti));
        }
        // The first lines each table's search reads (its value filter's,
        // the middle of its heads), asked for together: the query starts
        // with them out of the CPU caches when it runs once among many (as
        // the harness runs it), and took their misses one table at a time.
        for (_, ti) in &covered {
            ti.prefetch(&probe);
        }
        let scan = TableScan {
            index_id: self.id,
            ty: self.ty,
            probe: &probe,
            snapshot,
            keys_only,
        };
        match opts.limit {
            None => {
                // The tables with at least one matching global entry.
                let mut visits: Vec<Visit<'_>> = Vec::new();
                for (f, ti) in &covered {
                    let hits = ti.matching_entries(&probe);
                    if !hits.is_empty() {
                        visits.push((view.tables.get(f.number, f.file_size)?, *ti, hits));
                    }
                }
                let c = scan.scan(
                    &visits,
                    |blocks| opts.block_threads(blocks),
                    &verdict,
                    profile,
                    &mut acc,
                )?;
                checked += c.checked;
                stale += c.stale;
                // The candidates the memo left open, checked here, where
                // the query's view is.
                let open = std::mem::take(&mut acc.exact);
                let mut failed = Vec::new();
                for i in open {
                    if let Some((row, _)) = acc.found.get(i) {
                        if !exact(acc.bytes.key(row), row.seq)? {
                            failed.push(i);
                        }
                    }
                }
                stale += failed.len() as u64;
                acc.remove(&failed);
            }
            Some(_) => {
                let open = |f: &FileMetaData| view.tables.get(f.number, f.file_size);
                // Every covered table, searched when its turn comes.
                let (touched, empty) =
                    scan.top_k(&covered, &open, profile, &mut acc, &mut validate)?;
                // Neither read nor without a match: left for the top K.
                profile.tables_skipped = (covered.len() as u64).saturating_sub(touched + empty);
            }
        }
        profile.candidates = checked;
        profile.stale = stale;
        let (hits, min_blocks) = acc.finish();
        profile.min_data_blocks = min_blocks;
        Ok(hits)
    }

    fn stats(&self, slot: Option<&VersionSlot>, s: &mut IndexStats) {
        let g = slot.and_then(|s| s.downcast_ref::<NextGlobal>());
        s.global_entries = g.map_or(0, |g| g.entries() as u64);
        s.memory_bytes = g.map_or(0, |g| g.memory_bytes() as u64);
        s.disk_bytes = g.map_or(0, |g| g.tables.values().map(|t| t.disk_bytes).sum());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(ty: KeyType) -> NextBuilder {
        NextBuilder {
            id: 4,
            ty,
            shape: Shape::default(),
            pin: None,
            file: 1,
            pending: None,
            handles: Vec::new(),
            in_block: 0,
            arena: Vec::new(),
            items: Vec::new(),
        }
    }

    /// A compaction passes values encoded (`add_encoded`), a flush decoded
    /// (`add`): both give the same blocks, byte for byte, with ties,
    /// several versions of a key, and entries without a value.
    #[test]
    fn encoded_and_decoded_adds_build_the_same_blocks() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for ty in KeyType::ALL {
            let (mut a, mut b) = (builder(ty), builder(ty));
            for i in 0..6000u64 {
                let block = BlockHandle::new((i / 37) * 4096, 4000);
                let r = next();
                let (c0, c1) = (((r >> 8) % 90) as f64, ((r >> 20) % 45) as f64 * 0.5);
                let v = match (r % 10, ty) {
                    // A deletion, or a record without the attribute.
                    (0, _) => None,
                    (_, KeyType::I64) => Some(IndexValue::I64(((r >> 8) % 300) as i64 - 150)),
                    (_, KeyType::F64) => {
                        Some(IndexValue::F64(((r >> 8) % 500) as f64 / 4.0 - 60.0))
                    }
                    (_, KeyType::String) => Some(IndexValue::Str(format!("k{}", (r >> 8) % 400))),
                    (_, KeyType::Point) => Some(IndexValue::Point([c0, c1])),
                    (_, KeyType::Rect) => Some(IndexValue::Rect([c0, c1, c0 + 1.5, c1 + 0.25])),
                };
                // Two versions per key, newest first.
                let key = format!("key{:06}", i / 2);
                let seq = 100_000 - i;
                match &v {
                    Some(v) => b.add_encoded(key.as_bytes(), seq, block, ty, &v.encode()),
                    None => b.add(key.as_bytes(), seq, block, None),
                }
                a.add(key.as_bytes(), seq, block, v);
            }
            let (ba, bb) = (a.finish().unwrap(), b.finish().unwrap());
            assert!(ba.len() > 3, "{ty:?}: several secondary blocks");
            assert_eq!(ba, bb, "{ty:?}");
        }
    }
}
