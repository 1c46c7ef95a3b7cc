//! NEXT (Shi et al., SIGMOD 2025): the default index strategy.
//!
//! Per-table secondary index blocks map attribute values to the data
//! blocks holding them (`table`); the global index — one immutable
//! [`NextGlobal`] per version, holding each live table's global entries —
//! directs a query to matching secondary blocks and from there to data
//! blocks, each read at most once per query (the *block read history*,
//! §4). Validation uses the update memo (`index::memo`).

pub mod table;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::index::memo::Validity;
use crate::index::results::Results;
use crate::index::strategy::{
    BuildMethod, IndexStrategy, OpenCx, QueryCx, StrategyKind, TableIndexBuilder, VersionSlot,
    WritePath,
};
use crate::index::tables;
use crate::index::value::{IndexValue, KeyType, Predicate};
use crate::index::{lock, read, side, Hit, IndexStats, QueryProfile};
use strata_lsm::cache::TableCache;
use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::InstallEvent;
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::MemGet;
use strata_lsm::sstable::{BlockHandle, Table};
use strata_lsm::version::{FileMetaData, Version};

pub use table::{Delta, TableIndex};

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

/// Data blocks of `table` holding entries that match `pred`, in file order,
/// each with the positions of those entries inside the block, found through
/// the global entries and the secondary index blocks (no data block is
/// read). `history` is the query's block read history: blocks already
/// returned for this query are skipped.
pub fn candidate_blocks(
    index_id: u32,
    ty: KeyType,
    ti: &TableIndex,
    table: &Table,
    pred: &Predicate,
    history: &mut BTreeSet<(u64, u64)>,
    index_blocks_read: &mut u64,
) -> Result<Vec<(BlockHandle, Vec<u32>)>> {
    let hits = ti.matching_entries(pred);
    let mut by_block: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    for i in hits {
        let e = &ti.entries[i];
        by_block
            .entry(e.sec_block)
            .or_default()
            .push((e.start, e.end));
    }
    let mut positions: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for (b, ranges) in by_block {
        let name = table::sec_block_name(index_id, b);
        *index_blocks_read += 1;
        let Some(bytes) = table.meta_block(&name)? else {
            return Err(crate::Error::corruption(format!(
                "table {} lacks NEXT block {name}",
                table.file_number()
            )));
        };
        let entries = table::decode_sec_block(&bytes, ty)?;
        for (start, end) in ranges {
            let slice = entries.get(start as usize..end as usize).ok_or_else(|| {
                crate::Error::corruption(format!("NEXT block {name} shorter than its global entry"))
            })?;
            for (v, (h, e)) in slice {
                if pred.matches(&IndexValue::decode(ty, v)?) {
                    positions.entry(*h).or_default().insert(*e);
                }
            }
        }
    }
    let mut out = Vec::with_capacity(positions.len());
    for (p, entries) in positions {
        let h = *ti
            .handles
            .get(p as usize)
            .ok_or_else(|| crate::Error::corruption("NEXT entry points past the handle table"))?;
        if history.insert((table.file_number(), h.offset)) {
            out.push((h, entries.into_iter().collect()));
        }
    }
    Ok(out)
}

/// Per-table structures built while a table is written, consumed when it
/// is installed, by file number.
type Pending = tables::Pending<TableIndex>;

/// The NEXT strategy of one index.
pub(crate) struct Next {
    id: u32,
    name: String,
    ty: KeyType,
    delta: Delta,
    tables: Arc<TableCache>,
    pending: Pending,
}

impl Next {
    /// Parameters: `delta` (`auto`, `off` or a number, see [`Delta`]).
    pub fn open(cx: &OpenCx<'_>) -> Result<Next> {
        let mut delta = Delta::Auto;
        for (k, v) in cx.params {
            match k.as_str() {
                "delta" => delta = Delta::parse(v)?,
                _ => {
                    return Err(Error::invalid(format!(
                        "unknown parameter {k:?} for strategy next (known: delta)"
                    )))
                }
            }
        }
        Ok(Next {
            id: cx.id,
            name: cx.spec.name.clone(),
            ty: cx.spec.key_type,
            delta,
            tables: cx.tables.clone(),
            pending: Arc::default(),
        })
    }

    /// Reads table `f`'s directory block of this index (`None` if the table
    /// was written before the index existed).
    fn read_table_index(&self, f: &FileMetaData) -> Result<Option<TableIndex>> {
        let t = self.tables.get(f.number, f.file_size)?;
        let Some(bytes) = t.meta_block(&table::dir_block_name(self.id))? else {
            return Ok(None);
        };
        let mut ti = table::decode_dir(&bytes, self.ty)?;
        ti.disk_bytes = bytes.len() as u64
            + (0..ti.sec_blocks)
                .filter_map(|b| t.meta_block_size(&table::sec_block_name(self.id, b)))
                .sum::<u64>();
        Ok(Some(ti))
    }
}

/// Builds one NEXT index's secondary blocks for one table.
struct NextBuilder {
    id: u32,
    ty: KeyType,
    delta: Delta,
    file: u64,
    pending: Pending,
    handles: Vec<BlockHandle>,
    /// Entries seen so far in the current data block.
    in_block: u32,
    pairs: Vec<(IndexValue, table::Loc)>,
}

impl TableIndexBuilder for NextBuilder {
    fn add(&mut self, _user_key: &[u8], block: BlockHandle, attr: Option<IndexValue>) {
        if self.handles.last() != Some(&block) {
            self.handles.push(block);
            self.in_block = 0;
        }
        let pos = ((self.handles.len() - 1) as u32, self.in_block);
        self.in_block += 1;
        if let Some(v) = attr {
            self.pairs.push((v, pos));
        }
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        let built = table::build(
            self.id,
            self.ty,
            self.delta,
            std::mem::take(&mut self.handles),
            std::mem::take(&mut self.pairs),
        );
        let mut index = built.index;
        index.disk_bytes = built.blocks.iter().map(|(_, b)| b.len() as u64).sum();
        lock(&self.pending).insert(self.file, Arc::new(index));
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

    fn table_builder(&self, file: u64) -> Option<Box<dyn TableIndexBuilder>> {
        Some(Box::new(NextBuilder {
            id: self.id,
            ty: self.ty,
            delta: self.delta,
            file,
            pending: self.pending.clone(),
            handles: Vec::new(),
            in_block: 0,
            pairs: Vec::new(),
        }))
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
        let tables = tables::install(prev, ev, &self.pending, |f| self.read_table_index(f))?;
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
            |f| self.read_table_index(f),
            |f| {
                Error::corruption(format!(
                    "table {} lacks the blocks of ready index {:?}",
                    f.number, self.name
                ))
            },
        )?;
        Ok(Some(Arc::new(NextGlobal { tables })))
    }

    fn covers(&self, slot: Option<&VersionSlot>, version: &Version) -> bool {
        let g = slot.and_then(|s| s.downcast_ref::<NextGlobal>());
        tables::covers(g.map(|g| &g.tables), version)
    }

    fn build_method(&self) -> BuildMethod {
        BuildMethod::RewriteTables
    }

    /// Memtables newest first, then tables newest first, stopping once no
    /// older table can enter the top K; candidates validated with the
    /// update memo (an exact lookup in the query's view only for keys
    /// written after its snapshot).
    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Vec<Hit>> {
        let (def, view, pred, opts) = (cx.def, cx.view, cx.pred, cx.opts);
        view.pause();
        let mut acc = Results::new(opts.limit);
        let checked = std::cell::Cell::new(0u64);
        let stale = std::cell::Cell::new(0u64);
        let validate = |key: &[u8], seq: SeqNo| -> Result<bool> {
            def.counters.validations.fetch_add(1, Relaxed);
            checked.set(checked.get() + 1);
            // The memo lock is taken per candidate, never across I/O, so
            // long queries do not hold up writers.
            let validity = read(cx.memo).validate(key, seq, view.snapshot, cx.generation);
            let ok = match validity {
                Validity::Valid => true,
                Validity::Stale => false,
                Validity::Check => {
                    def.counters.exact.fetch_add(1, Relaxed);
                    view.newest_seq(key)? == Some(seq)
                }
            };
            if !ok {
                def.counters.failed.fetch_add(1, Relaxed);
                stale.set(stale.get() + 1);
            }
            Ok(ok)
        };
        let keep = |value: Vec<u8>| if opts.keys_only { None } else { Some(value) };

        for m in &view.mems {
            for (key, seq) in side::candidates(m, self.id, pred) {
                if seq > view.snapshot || !validate(&key, seq)? {
                    continue;
                }
                let value = match m.get(&key, seq) {
                    Some(MemGet::Value(s, v)) if s == seq => v,
                    _ => continue,
                };
                acc.push(key, seq, keep(value), None);
            }
        }

        let empty = NextGlobal::default();
        let global = cx.slot_as::<NextGlobal>().unwrap_or(&empty);
        let mut files: Vec<&Arc<FileMetaData>> = view.version.all_files().map(|(_, f)| f).collect();
        files.sort_by_key(|f| Reverse(f.largest_seq));
        let mut history = BTreeSet::new();
        let total = files.len();
        for (visited, f) in files.into_iter().enumerate() {
            if f.smallest_seq > view.snapshot {
                continue;
            }
            if acc.full_before(f.largest_seq) {
                profile.tables_skipped = (total - visited) as u64;
                break;
            }
            let Some(ti) = global.tables.get(&f.number) else {
                return Err(Error::corruption(format!(
                    "index {:?} has no entries for live table {}",
                    def.spec.name, f.number
                )));
            };
            let table = view.tables.get(f.number, f.file_size)?;
            let blocks = candidate_blocks(
                self.id,
                self.ty,
                ti,
                &table,
                pred,
                &mut history,
                &mut profile.index_blocks_read,
            )?;
            for (h, positions) in blocks {
                profile.data_blocks_read += 1;
                // The secondary entries already matched: take those entries
                // by position, without re-extracting the attribute (only
                // they are copied out of the block).
                let entries = table.read_data_block_entries_at(h, &positions)?;
                for entry in entries {
                    let Some((key, seq, kind, value)) = entry else {
                        return Err(Error::corruption(format!(
                            "NEXT entry points past the end of block {} of table {}",
                            h.offset, f.number
                        )));
                    };
                    if kind != ValueKind::Value || seq > view.snapshot || !validate(&key, seq)? {
                        continue;
                    }
                    acc.push(key, seq, keep(value), Some((f.number, h.offset)));
                }
            }
        }
        profile.candidates = checked.get();
        profile.stale = stale.get();
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
