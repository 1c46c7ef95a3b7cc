//! NEXT (Shi et al., SIGMOD 2025): the default index strategy.
//!
//! Per-table secondary index blocks map attribute values to the data
//! blocks holding them (`table`); the global index — one immutable
//! [`NextGlobal`] per version, holding each live table's global entries —
//! directs a query to matching secondary blocks and from there to data
//! blocks, each read at most once per query (the *block read history*,
//! §4). Validation uses the update memo (`index::memo`).

pub mod table;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::Result;
use crate::index::value::{IndexValue, KeyType, Predicate};
use crate::sstable::{BlockHandle, Table};

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
