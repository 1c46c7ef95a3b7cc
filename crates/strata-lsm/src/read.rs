//! Reads over a set of components (memtables newest first, then a
//! version's tables) that several layers share: batched point lookups,
//! lookups of one known version through the sequence-number zone maps
//! (PERSEID §4.4), existence probes without data I/O, and the oldest
//! sequence number a reader may still read at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cache::TableCache;
use crate::error::Result;
use crate::key::{SeqNo, ValueKind};
use crate::memtable::{MemGet, MemTable};
use crate::merge::{self, MergeOperator};
use crate::sstable::Found;
use crate::sync::lock;
use crate::version::{FileMetaData, Version};

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
    if let [key] = keys {
        // One key (every single put of a strategy that reads the record it
        // replaces): a point lookup, without the batch's sorted copies and
        // per-level vectors (eight allocations a put).
        let found = match mem_found(mems, key, seq) {
            Some(f) => Some(f),
            None => version.get(tables, key, seq)?,
        };
        let found = resolve_merge(found, merge_operator, tables, mems, version, key, seq)?;
        return Ok(vec![found.and_then(into_versioned)]);
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(keys[b]));
    order.dedup_by(|a, b| keys[*a] == keys[*b]);
    let sorted: Vec<&[u8]> = order.iter().map(|&i| keys[i]).collect();
    let mut out: Vec<Option<Found>> = vec![None; sorted.len()];
    // Not `vec![false; n]`: glibc's `calloc` cost 240 instructions for a
    // one-key batch, a sixth of this function's work on every indexed put.
    let mut done = Vec::with_capacity(sorted.len());
    done.resize(sorted.len(), false);
    for (i, k) in sorted.iter().enumerate() {
        if let Some(f) = mem_found(mems, k, seq) {
            out[i] = Some(f);
            done[i] = true;
        }
    }
    version.multi_get(tables, &sorted, seq, &mut out, &mut done)?;
    // Keys whose newest entry is a merge operand read their older entries.
    for (i, k) in sorted.iter().enumerate() {
        if out[i].as_ref().is_some_and(|f| f.kind == ValueKind::Merge) {
            out[i] = resolve_merge(out[i].take(), merge_operator, tables, mems, version, k, seq)?;
        }
    }
    // Without duplicates each answer is moved out, not copied.
    let unique = sorted.len() == keys.len();
    let result = keys
        .iter()
        .map(|k| {
            let j = sorted.binary_search(k).ok()?;
            let slot = out.get_mut(j)?;
            let f = if unique { slot.take()? } else { slot.clone()? };
            into_versioned(f)
        })
        .collect();
    Ok(result)
}

/// The sequence number of each key's newest live version at `seq` in the
/// components (`None`: absent or deleted; a merge operand is a live
/// version), in the order of `keys`: where [`multi_get_components`] finds
/// the records, without copying them out of memtables or merging operands.
pub(crate) fn newest_seqs_components(
    tables: &TableCache,
    merge_operator: Option<&Arc<dyn MergeOperator>>,
    mems: &[Arc<MemTable>],
    version: &Version,
    keys: &[&[u8]],
    seq: SeqNo,
) -> Result<Vec<Option<SeqNo>>> {
    let [key] = keys else {
        // Several keys: the batched lookup reads each needed block once.
        let found = multi_get_components(tables, merge_operator, mems, version, keys, seq)?;
        return Ok(found.into_iter().map(|v| v.map(|(s, _)| s)).collect());
    };
    let newest = match mems.iter().find_map(|m| m.newest_version(key, seq)) {
        Some(v) => Some(v),
        // Sequence number and kind only: the record is not copied.
        None => version
            .get_entry(tables, key, seq, false)?
            .map(|f| (f.seq, f.kind)),
    };
    Ok(vec![newest.and_then(|(s, kind)| {
        (kind != ValueKind::Deletion).then_some(s)
    })])
}

/// The newest entry of `key` at `seq` in `mems` (newest first).
fn mem_found(mems: &[Arc<MemTable>], key: &[u8], seq: SeqNo) -> Option<Found> {
    mems.iter().find_map(|m| {
        m.get(key, seq).map(|g| match g {
            MemGet::Value(s, v) => Found {
                seq: s,
                kind: ValueKind::Value,
                value: v,
            },
            MemGet::Deleted(s) => Found {
                seq: s,
                kind: ValueKind::Deletion,
                value: Vec::new(),
            },
            MemGet::Merge(s) => Found {
                seq: s,
                kind: ValueKind::Merge,
                value: Vec::new(),
            },
        })
    })
}

/// `found` as it is, unless it is a merge operand: then the key's value
/// at `seq` with its older entries merged in.
fn resolve_merge(
    found: Option<Found>,
    merge_operator: Option<&Arc<dyn MergeOperator>>,
    tables: &TableCache,
    mems: &[Arc<MemTable>],
    version: &Version,
    key: &[u8],
    seq: SeqNo,
) -> Result<Option<Found>> {
    if found.as_ref().is_some_and(|f| f.kind == ValueKind::Merge) {
        let op = merge::require(merge_operator)?;
        return Ok(
            merge::resolve_at(op, tables, mems, version, key, seq)?.map(|(s, value)| Found {
                seq: s,
                kind: ValueKind::Value,
                value,
            }),
        );
    }
    Ok(found)
}

/// A found value as (sequence number, value); `None` for a tombstone.
fn into_versioned(f: Found) -> Option<Versioned> {
    (f.kind == ValueKind::Value).then_some((f.seq, f.value))
}

/// May `key` have a version in `mems` or `version`? Memtables exactly
/// (`exact_mems`) or by their key filters; tables by key range and Bloom
/// filter (no data I/O). A `false` is certain.
pub(crate) fn may_exist(
    tables: &TableCache,
    key: &[u8],
    mems: &[Arc<MemTable>],
    version: &Version,
    exact_mems: bool,
) -> bool {
    let in_mem = |m: &Arc<MemTable>| match exact_mems {
        true => m.newest_seq(key).is_some(),
        false => m.may_hold(key),
    };
    if mems.iter().any(in_mem) {
        return true;
    }
    // The tables are taken [`PROBE_AHEAD`] at a time, in the order of
    // `files_for_key` (newest first), and each one's filter line is asked
    // for before any is tested: the probes of a key that no table holds
    // miss the cache once per table, and those misses now overlap instead
    // of coming one after another (an update's first write of a key under
    // the update memo probes every level-0 table and one table a level).
    let h = crate::sstable::filter::hash64(key);
    let mut files = version.files_for_key(key);
    let mut open: [Option<Arc<crate::sstable::Table>>; PROBE_AHEAD] = Default::default();
    loop {
        let mut n = 0;
        for (slot, f) in open.iter_mut().zip(files.by_ref()) {
            match tables.get(f.number, f.file_size) {
                Ok(t) => {
                    t.prefetch_key_hash(h);
                    *slot = Some(t);
                    n += 1;
                }
                // The caller reads the table and reports the error.
                Err(_) => return true,
            }
        }
        if n == 0 {
            return false;
        }
        for slot in open.iter_mut().take(n) {
            if slot.take().is_some_and(|t| t.key_hash_may_match(h)) {
                return true;
            }
        }
    }
}

/// Tables whose filters [`may_exist`] asks for at once. (`Version::get`
/// does not: a get stops at the first table holding the key, about the
/// second one probed in `strata bench`, and opening the others ahead cost
/// more than the overlapped misses saved: reads 2–7% slower, session 46.)
const PROBE_AHEAD: usize = 8;

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

/// The live snapshots: each registered sequence number with its count of
/// registrations, in increasing order, no count zero.
///
/// A sorted vector rather than a map: snapshots are few and registered
/// at the newest sequence number (an append), and registering one then
/// dropping it, as every index query does, allocates nothing once the
/// vector has grown (a map allocated and freed its leaf node each time
/// it went from empty to one entry and back).
#[derive(Debug, Default)]
pub(crate) struct SnapshotList {
    live: Vec<(SeqNo, usize)>,
}

impl SnapshotList {
    /// Adds one registration at `seq`.
    pub fn register(&mut self, seq: SeqNo) {
        match self.live.last_mut() {
            Some((s, n)) if *s == seq => *n += 1,
            Some((s, _)) if *s > seq => match self.live.binary_search_by_key(&seq, |e| e.0) {
                Ok(i) => {
                    if let Some(e) = self.live.get_mut(i) {
                        e.1 += 1;
                    }
                }
                Err(i) => self.live.insert(i, (seq, 1)),
            },
            _ => self.live.push((seq, 1)),
        }
    }

    /// Removes one registration at `seq` (one [`Self::register`] made).
    pub fn unregister(&mut self, seq: SeqNo) {
        if let Ok(i) = self.live.binary_search_by_key(&seq, |e| e.0) {
            if let Some(e) = self.live.get_mut(i) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.live.remove(i);
                }
            }
        }
    }

    /// The oldest live snapshot's sequence number.
    pub fn oldest(&self) -> Option<SeqNo> {
        self.live.first().map(|e| e.0)
    }
}

/// The oldest live snapshot in `snaps`, else the last published sequence
/// number: the oldest sequence number a reader may read at. Read under the
/// snapshot lock, which `Db::snapshot` also holds while it reads `last`.
pub(crate) fn oldest_readable(snaps: &Mutex<SnapshotList>, last: &AtomicU64) -> SeqNo {
    lock(snaps)
        .oldest()
        .unwrap_or_else(|| last.load(Ordering::SeqCst))
}

/// What [`get_versions_components`] did, for profiles and tests. The
/// component, table and fallback counts do not depend on the number of
/// threads; the block and Bloom counts may grow slightly with threads
/// (a table's requests split between workers may read a boundary block
/// once in each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZoneLookupStats {
    /// Components (memtables and tables) probed for a requested version:
    /// only those whose sequence-number zone map (and, for tables, key
    /// range) contains it. A request probing one table counts one here
    /// whether or not it shared that table's pass with others.
    pub components_probed: u64,
    /// Requests whose version was not in any such component (compacted
    /// away, or never there) and that took the normal lookup at the
    /// snapshot.
    pub fallbacks: u64,
    /// Grouped table passes: each is one table reading a key-sorted group
    /// of requests in one walk of its index and data blocks.
    pub table_passes: u64,
    /// Bloom filter probes of the zone-mapped table passes (one per
    /// request sent to a table with a filter; the fallback lookups' are
    /// not counted here).
    pub bloom_probes: u64,
    /// Data blocks fetched by the zone-mapped table passes (cache hits and
    /// disk reads; not the fallback lookups').
    pub data_blocks: u64,
}

impl ZoneLookupStats {
    fn add(&mut self, o: ZoneLookupStats) {
        self.components_probed += o.components_probed;
        self.fallbacks += o.fallbacks;
        self.table_passes += o.table_passes;
        self.bloom_probes += o.bloom_probes;
        self.data_blocks += o.data_blocks;
    }
}

/// What the zone-mapped steps read: the memtables (newest first) and the
/// cache of the version's tables.
#[derive(Clone, Copy)]
struct Components<'a> {
    tables: &'a TableCache,
    mems: &'a [Arc<MemTable>],
}

/// A request of [`get_versions_components`] sent to a table: key,
/// sequence number, index in the caller's requests.
type Request<'a> = (&'a [u8], SeqNo, usize);

/// Where a request of [`get_versions_components`] stands.
#[derive(Debug, Clone)]
enum Step {
    /// Found: exactly the requested version.
    Done(Versioned),
    /// To be probed in the table at this position of the version's file
    /// list (`Version::all_files` order).
    Table(usize),
    /// Not in any zone-mapped component: the normal lookup at the
    /// snapshot answers it.
    Fallback,
}

/// The first table at or after position `from` of `files` whose
/// sequence-number zone map holds `seq` and whose key range holds `key`.
fn next_table(files: &[&Arc<FileMetaData>], key: &[u8], seq: SeqNo, from: usize) -> Step {
    files
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, f)| {
            f.smallest_seq <= seq
                && seq <= f.largest_seq
                && crate::key::user_key(&f.smallest) <= key
                && key <= crate::key::user_key(&f.largest)
        })
        .map_or(Step::Fallback, |(i, _)| Step::Table(i))
}

/// Runs `f(unit, stats)` for every unit in `0..units` on `threads` workers
/// that pull the next unit from one shared atomic cursor (PERSEID §4.4
/// parallel lookups); on the calling thread if one worker suffices. Results
/// in unit order, with the workers' stats summed. The first error stops
/// the other workers and is returned.
fn parallel_units<T: Send>(
    threads: usize,
    units: usize,
    f: impl Fn(usize, &mut ZoneLookupStats) -> Result<T> + Sync,
) -> Result<(Vec<T>, ZoneLookupStats)> {
    let parts = crate::sync::each_unit(
        threads,
        units,
        || (Vec::new(), ZoneLookupStats::default()),
        |u, (out, stats): &mut (Vec<(usize, T)>, ZoneLookupStats)| {
            out.push((u, f(u, stats)?));
            Ok(())
        },
    )?;
    let mut stats = ZoneLookupStats::default();
    let mut all: Vec<(usize, T)> = Vec::with_capacity(units);
    for (found, s) in parts {
        stats.add(s);
        all.extend(found);
    }
    all.sort_unstable_by_key(|(u, _)| *u);
    if all.len() != units {
        return Err(crate::error::Error::invalid(format!(
            "parallel lookups: {} of {units} units answered",
            all.len()
        )));
    }
    Ok((all.into_iter().map(|(_, r)| r).collect(), stats))
}

/// Requests per unit of parallel work: one unit for everything with one
/// thread, else about four units per thread, at least `MIN_UNIT` requests
/// each (smaller units cost more in hand-offs than they save).
fn unit_size(n: usize, threads: usize) -> usize {
    const MIN_UNIT: usize = 16;
    if threads <= 1 {
        return n.max(1);
    }
    n.div_ceil(threads * 4).max(MIN_UNIT)
}

/// The exact versions `(key, seq)` of `reqs` (PERSEID §4.4,
/// sequence-number zone maps), grouped: results in the order of `reqs`,
/// each either exactly the requested version or, if no zone-mapped
/// component holds it (a compaction dropped it since the caller saw it,
/// or `seq > snapshot`), what a normal lookup at `snapshot` returns; the
/// caller compares the returned sequence number with `seq`. The caller
/// must keep `snapshot` readable and pass components taken after it was
/// pinned.
///
/// 1. Each request probes, newest first, the memtables whose sequence
///    range holds `seq` (one lookup each); if none has exactly that
///    version, the request goes to the first table (in
///    `Version::all_files` order) whose sequence range holds `seq` and
///    whose key range holds `key`.
/// 2. Requests are grouped per table and sorted in internal-key order;
///    each group is read by one `Table::multi_get_versions` pass, which
///    locates and fetches each data block once for all the keys in it.
///    A request matches only the entry with its user key, exactly its
///    sequence number and a value (not a tombstone or merge operand);
///    otherwise it moves on to the next table that qualifies, in a next
///    round, until none is left.
/// 3. The requests left take the normal batched lookup at `snapshot`.
///
/// Which components each request probes, and so `components_probed` and
/// `fallbacks`, is what the one-request-at-a-time walk would do. `threads`
/// workers share each phase's units (chunks of requests, or of a table's
/// sorted group) through one atomic cursor; the results do not depend on
/// the number of threads.
pub(crate) fn get_versions_components(
    tables: &TableCache,
    merge_operator: Option<&Arc<dyn MergeOperator>>,
    mems: &[Arc<MemTable>],
    version: &Version,
    reqs: &[(&[u8], SeqNo)],
    snapshot: SeqNo,
    threads: usize,
) -> Result<(Vec<Option<Versioned>>, ZoneLookupStats)> {
    let c = Components { tables, mems };
    let files: Vec<&Arc<FileMetaData>> = version.all_files().map(|(_, f)| f).collect();
    let mut stats = ZoneLookupStats::default();

    // 1. Memtables, and each remaining request's first table.
    let size = unit_size(reqs.len(), threads);
    let (steps, s) = parallel_units(threads, reqs.len().div_ceil(size), |u, stats| {
        let chunk = reqs.get(u * size..).unwrap_or_default();
        let chunk = chunk.get(..size).unwrap_or(chunk);
        Ok(chunk
            .iter()
            .map(|&(key, seq)| first_step(&c, &files, key, seq, snapshot, stats))
            .collect::<Vec<Step>>())
    })?;
    stats.add(s);
    let mut steps: Vec<Step> = steps.into_iter().flatten().collect();

    // 2. Rounds of grouped table passes. A request's table position only
    // grows from round to round, so there are at most `files.len()`.
    for round in 0..=files.len() {
        // Per table (bucketed by position), internal-key order: key
        // ascending, sequence number descending (request index last, so the
        // order is total and does not depend on anything else).
        let mut by_table: Vec<Vec<Request<'_>>> = vec![Vec::new(); files.len()];
        let mut pending = 0;
        for (i, step) in steps.iter().enumerate() {
            if let (Step::Table(t), Some(&(key, seq))) = (step, reqs.get(i)) {
                let group = by_table.get_mut(*t).ok_or_else(|| {
                    crate::error::Error::invalid(format!("zone lookup: no table at position {t}"))
                })?;
                group.push((key, seq, i));
                pending += 1;
            }
        }
        if pending == 0 {
            break;
        }
        if round == files.len() {
            return Err(crate::error::Error::invalid(
                "zone lookup: requests still pending after a round per table",
            ));
        }
        for group in &mut by_table {
            group.sort_unstable_by(|a, b| {
                a.0.cmp(b.0)
                    .then_with(|| b.1.cmp(&a.1))
                    .then_with(|| a.2.cmp(&b.2))
            });
        }
        // Units: one table's group, cut to at most `size` requests.
        let size = unit_size(pending, threads);
        let units: Vec<(usize, &[Request<'_>])> = by_table
            .iter()
            .enumerate()
            .flat_map(|(t, group)| group.chunks(size).map(move |c| (t, c)))
            .collect();
        let (moved, s) = parallel_units(threads, units.len(), |u, stats| {
            let (t, unit) = units.get(u).copied().unwrap_or_default();
            table_pass(&c, &files, t, unit, stats)
        })?;
        stats.add(s);
        for (i, step) in moved.into_iter().flatten() {
            if let Some(slot) = steps.get_mut(i) {
                *slot = step;
            }
        }
    }

    // 3. The normal lookup at the snapshot for the rest.
    let rest: Vec<usize> = (0..reqs.len())
        .filter(|&i| matches!(steps[i], Step::Fallback))
        .collect();
    stats.fallbacks += rest.len() as u64;
    let mut result: Vec<Option<Versioned>> = steps
        .into_iter()
        .map(|s| match s {
            Step::Done(v) => Some(v),
            _ => None,
        })
        .collect();
    if !rest.is_empty() {
        let size = unit_size(rest.len(), threads);
        let units: Vec<&[usize]> = rest.chunks(size).collect();
        let (found, _) = parallel_units(threads, units.len(), |u, _| {
            let unit = units.get(u).copied().unwrap_or_default();
            let keys: Vec<&[u8]> = unit.iter().map(|&i| reqs[i].0).collect();
            let found =
                multi_get_components(tables, merge_operator, mems, version, &keys, snapshot)?;
            Ok(unit.iter().copied().zip(found).collect::<Vec<_>>())
        })?;
        for (i, r) in found.into_iter().flatten() {
            if let Some(slot) = result.get_mut(i) {
                *slot = r;
            }
        }
    }
    Ok((result, stats))
}

/// Step 1 of [`get_versions_components`] for one request: the memtables
/// whose sequence range holds `seq`, newest first, each looked up at
/// `seq` and accepted only if it returns exactly that version; else the
/// first table that may hold it; else the fallback (always when
/// `seq > snapshot`).
fn first_step(
    c: &Components<'_>,
    files: &[&Arc<FileMetaData>],
    key: &[u8],
    seq: SeqNo,
    snapshot: SeqNo,
    stats: &mut ZoneLookupStats,
) -> Step {
    if seq > snapshot {
        return Step::Fallback;
    }
    for m in c.mems {
        if !m.seq_range().is_some_and(|(lo, hi)| lo <= seq && seq <= hi) {
            continue;
        }
        stats.components_probed += 1;
        if let Some(MemGet::Value(s, v)) = m.get(key, seq) {
            if s == seq {
                return Step::Done((s, v));
            }
        }
    }
    next_table(files, key, seq, 0)
}

/// Step 2 of [`get_versions_components`] for one unit: requests `unit`
/// (key, sequence number, request index), all for the table at position
/// `pos` of `files` and in internal-key order, looked up in one pass of
/// that table. Each request's new step: done if the table has exactly its
/// version as a value, else the next table that may hold it, else the
/// fallback.
fn table_pass(
    c: &Components<'_>,
    files: &[&Arc<FileMetaData>],
    pos: usize,
    unit: &[Request<'_>],
    stats: &mut ZoneLookupStats,
) -> Result<Vec<(usize, Step)>> {
    if unit.is_empty() {
        return Ok(Vec::new());
    }
    let f = files.get(pos).ok_or_else(|| {
        crate::error::Error::invalid(format!("zone lookup: no table at position {pos}"))
    })?;
    let batch: Vec<(&[u8], SeqNo)> = unit.iter().map(|&(k, s, _)| (k, s)).collect();
    let mut out: Vec<Option<Found>> = vec![None; batch.len()];
    let t = c.tables.get(f.number, f.file_size)?;
    let counts = t.multi_get_versions(&batch, &mut out)?;
    stats.table_passes += 1;
    stats.components_probed += batch.len() as u64;
    stats.bloom_probes += counts.bloom_probes;
    stats.data_blocks += counts.data_blocks;
    Ok(unit
        .iter()
        .zip(out)
        .map(|(&(key, seq, i), found)| {
            let step = match found {
                Some(f) if f.seq == seq && f.kind == ValueKind::Value => {
                    Step::Done((f.seq, f.value))
                }
                _ => next_table(files, key, seq, pos + 1),
            };
            (i, step)
        })
        .collect())
}

#[cfg(test)]
mod snapshot_list_tests {
    use super::SnapshotList;

    /// The list against a multiset model, registrations in and out of
    /// order.
    #[test]
    fn the_oldest_is_the_smallest_registered_sequence() {
        let mut list = SnapshotList::default();
        let mut model: std::collections::BTreeMap<u64, usize> = Default::default();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut live: Vec<u64> = Vec::new();
        for step in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if live.is_empty() || !x.is_multiple_of(3) {
                // Mostly the newest sequence number, sometimes an older one.
                let seq = if x.is_multiple_of(5) {
                    x % (step + 1)
                } else {
                    step / 4
                };
                list.register(seq);
                *model.entry(seq).or_insert(0) += 1;
                live.push(seq);
            } else {
                let seq = live.swap_remove((x as usize / 3) % live.len());
                list.unregister(seq);
                let c = model.get_mut(&seq).unwrap();
                *c -= 1;
                if *c == 0 {
                    model.remove(&seq);
                }
            }
            assert_eq!(list.oldest(), model.keys().next().copied(), "step {step}");
            assert_eq!(list.live.len(), model.len());
        }
        for seq in live {
            list.unregister(seq);
        }
        assert_eq!(list.oldest(), None);
        assert!(list.live.is_empty());
    }
}
