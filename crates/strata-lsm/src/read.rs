//! Reads over a set of components (memtables newest first, then a
//! version's tables) that several layers share: batched point lookups,
//! lookups of one known version through the sequence-number zone maps
//! (PERSEID §4.4), existence probes without data I/O, and the oldest
//! sequence number a reader may still read at.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// What [`get_versions_components`] did, for profiles and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZoneLookupStats {
    /// Components (memtables and tables) probed for a requested version:
    /// only those whose sequence-number zone map (and, for tables, key
    /// range) contains it.
    pub components_probed: u64,
    /// Requests whose version was not in any such component (compacted
    /// away, or never there) and that took the normal lookup at the
    /// snapshot.
    pub fallbacks: u64,
}

impl ZoneLookupStats {
    fn add(&mut self, o: ZoneLookupStats) {
        self.components_probed += o.components_probed;
        self.fallbacks += o.fallbacks;
    }
}

/// The version `seq` of `key` (PERSEID §4.4, sequence-number zone maps):
/// only the components whose sequence range holds `seq` are probed,
/// newest first (memtables, then tables whose key range also holds `key`),
/// each by a lookup at `seq` that must return exactly that version. If no
/// such component has it (a compaction dropped it since the caller saw
/// it), the key is looked up normally at `snapshot`. The caller must keep
/// `snapshot` readable and pass components taken after it was pinned;
/// it compares the returned sequence number with `seq`.
fn get_version_components(
    c: &Components<'_>,
    key: &[u8],
    seq: SeqNo,
    snapshot: SeqNo,
    stats: &mut ZoneLookupStats,
) -> Result<Option<Versioned>> {
    let Components {
        tables,
        merge_operator,
        mems,
        version,
    } = *c;
    if seq <= snapshot {
        for m in mems {
            if !m.seq_range().is_some_and(|(lo, hi)| lo <= seq && seq <= hi) {
                continue;
            }
            stats.components_probed += 1;
            if let Some(MemGet::Value(s, v)) = m.get(key, seq) {
                if s == seq {
                    return Ok(Some((s, v)));
                }
            }
        }
        for (_, f) in version.all_files() {
            if f.smallest_seq > seq
                || seq > f.largest_seq
                || key < crate::key::user_key(&f.smallest)
                || key > crate::key::user_key(&f.largest)
            {
                continue;
            }
            stats.components_probed += 1;
            let t = tables.get(f.number, f.file_size)?;
            if let Some(found) = t.get(key, seq)? {
                if found.seq == seq && found.kind == ValueKind::Value {
                    return Ok(Some((found.seq, found.value)));
                }
            }
        }
    }
    stats.fallbacks += 1;
    let mut r = multi_get_components(tables, merge_operator, mems, version, &[key], snapshot)?;
    Ok(r.pop().flatten())
}

/// The components a read looks in: memtables newest first, then a
/// version's tables.
#[derive(Clone, Copy)]
struct Components<'a> {
    tables: &'a TableCache,
    merge_operator: Option<&'a Arc<dyn MergeOperator>>,
    mems: &'a [Arc<MemTable>],
    version: &'a Version,
}

/// What one worker of [`get_versions_components`] found: (request index,
/// result) pairs and its counts.
type WorkerOutput = (Vec<(usize, Option<Versioned>)>, ZoneLookupStats);

/// [`get_version_components`] for every `(key, seq)` of `reqs`, by
/// `threads` workers pulling the next request from one shared queue (an
/// atomic cursor; PERSEID §4.4 parallel lookups). Results in the order of
/// `reqs`, whatever the number of threads.
pub(crate) fn get_versions_components(
    tables: &TableCache,
    merge_operator: Option<&Arc<dyn MergeOperator>>,
    mems: &[Arc<MemTable>],
    version: &Version,
    reqs: &[(&[u8], SeqNo)],
    snapshot: SeqNo,
    threads: usize,
) -> Result<(Vec<Option<Versioned>>, ZoneLookupStats)> {
    let threads = threads.clamp(1, reqs.len().max(1));
    let next = AtomicUsize::new(0);
    let c = Components {
        tables,
        merge_operator,
        mems,
        version,
    };
    let work = || -> Result<WorkerOutput> {
        let mut out = Vec::new();
        let mut stats = ZoneLookupStats::default();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(key, seq)) = reqs.get(i) else {
                return Ok((out, stats));
            };
            let r = get_version_components(&c, key, seq, snapshot, &mut stats);
            match r {
                Ok(r) => out.push((i, r)),
                Err(e) => {
                    // Stop the other workers too.
                    next.store(reqs.len(), Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    };
    let parts: Vec<Result<_>> = if threads == 1 {
        vec![work()]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(crate::error::Error::invalid(
                            "a parallel lookup worker panicked",
                        ))
                    })
                })
                .collect()
        })
    };
    let mut result = vec![None; reqs.len()];
    let mut stats = ZoneLookupStats::default();
    for part in parts {
        let (found, s) = part?;
        stats.add(s);
        for (i, r) in found {
            if let Some(slot) = result.get_mut(i) {
                *slot = r;
            }
        }
    }
    Ok((result, stats))
}
