//! Reads over a set of components (memtables newest first, then a
//! version's tables) that several layers share: batched point lookups,
//! existence probes without data I/O, and the oldest sequence number a
//! reader may still read at.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cache::TableCache;
use crate::error::Result;
use crate::key::{SeqNo, ValueKind};
use crate::memtable::{MemGet, MemTable};
use crate::merge::{self, MergeOperator};
use crate::sstable::Found;
use crate::sync::lock;
use crate::version::Version;

/// A record with the sequence number of the write that stored it.
pub type Versioned = (SeqNo, Vec<u8>);

/// Batched point lookup at `seq` in the given components (memtables
/// newest first, then `version`'s tables): keys sorted and deduplicated,
/// memtables first, then the tables component by component. Results in
/// the order of `keys`, `None` for absent or deleted keys.
pub(crate) fn multi_get_components(
    tables: &TableCache,
    merge_operator: Option<&Arc<dyn MergeOperator>>,
    mems: &[Arc<MemTable>],
    version: &Version,
    keys: &[&[u8]],
    seq: SeqNo,
) -> Result<Vec<Option<Versioned>>> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(keys[b]));
    order.dedup_by(|a, b| keys[*a] == keys[*b]);
    let sorted: Vec<&[u8]> = order.iter().map(|&i| keys[i]).collect();
    let mut out: Vec<Option<Found>> = vec![None; sorted.len()];
    let mut done = vec![false; sorted.len()];
    for (i, k) in sorted.iter().enumerate() {
        for m in mems {
            match m.get(k, seq) {
                Some(MemGet::Value(s, v)) => {
                    out[i] = Some(Found {
                        seq: s,
                        kind: ValueKind::Value,
                        value: v,
                    });
                }
                Some(MemGet::Deleted(s)) => {
                    out[i] = Some(Found {
                        seq: s,
                        kind: ValueKind::Deletion,
                        value: Vec::new(),
                    });
                }
                Some(MemGet::Merge(s)) => {
                    out[i] = Some(Found {
                        seq: s,
                        kind: ValueKind::Merge,
                        value: Vec::new(),
                    });
                }
                None => continue,
            }
            done[i] = true;
            break;
        }
    }
    version.multi_get(tables, &sorted, seq, &mut out, &mut done)?;
    // Keys whose newest entry is a merge operand read their older entries.
    for (i, k) in sorted.iter().enumerate() {
        if out[i].as_ref().is_some_and(|f| f.kind == ValueKind::Merge) {
            let op = merge::require(merge_operator)?;
            out[i] =
                merge::resolve_at(op, tables, mems, version, k, seq)?.map(|(s, value)| Found {
                    seq: s,
                    kind: ValueKind::Value,
                    value,
                });
        }
    }
    let mut result = vec![None; keys.len()];
    let by_key: BTreeMap<&[u8], usize> = sorted.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    for (i, k) in keys.iter().enumerate() {
        if let Some(&j) = by_key.get(k) {
            if let Some(f) = &out[j] {
                if f.kind == ValueKind::Value {
                    result[i] = Some((f.seq, f.value.clone()));
                }
            }
        }
    }
    Ok(result)
}

/// May `key` have a version in `mems` or `version`? Exact for memtables;
/// key range and Bloom filter for tables (no data I/O).
pub(crate) fn may_exist(
    tables: &TableCache,
    key: &[u8],
    mems: &[Arc<MemTable>],
    version: &Version,
) -> bool {
    if mems
        .iter()
        .any(|m| m.get(key, crate::key::MAX_SEQ).is_some())
    {
        return true;
    }
    version
        .files_for_key(key)
        .any(|f| bloom_may_match(tables, f, key))
}

/// The Bloom probe of `key` in table `f` (true if the table cannot be
/// opened: the caller then reads it and reports the error).
pub(crate) fn bloom_may_match(
    tables: &TableCache,
    f: &crate::version::FileMetaData,
    key: &[u8],
) -> bool {
    match tables.get(f.number, f.file_size) {
        Ok(t) => t.key_may_match(key),
        Err(_) => true,
    }
}

/// The oldest live snapshot in `snaps`, else the last published sequence
/// number: the oldest sequence number a reader may read at. Read under the
/// snapshot lock, which `Db::snapshot` also holds while it reads `last`.
pub(crate) fn oldest_readable(snaps: &Mutex<BTreeMap<SeqNo, usize>>, last: &AtomicU64) -> SeqNo {
    let snaps = lock(snaps);
    snaps
        .keys()
        .next()
        .copied()
        .unwrap_or_else(|| last.load(Ordering::SeqCst))
}
