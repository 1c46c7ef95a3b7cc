//! Range filters (Luo & Carey, "Efficient Data Ingestion and Query
//! Processing for LSM-Based Storage Systems", PVLDB 2019: §3 range filters
//! and their maintenance, §5 the Mutable-bitmap strategy; evaluated in
//! §6.4.2).
//!
//! No index entries at all: every component carries a *range filter* of
//! the indexed attribute — the minimum and maximum encoded value for
//! scalars, the bounding rectangle for points and rectangles. A table's
//! filter is computed while the table is written and stored in one meta
//! block `filter.<id>` (format: `docs/format/filter.md`), decoded into
//! the per-version index state at install; a memtable's filter is the
//! range of its side structure's values, taken when a query asks. A query
//! pins one snapshot, walks the components newest first (memtables, L0
//! newest first, then L1, L2, …), skips every component whose filter does
//! not intersect the predicate, and scans the others entry by entry,
//! re-extracting the attribute of each key's visible version.
//!
//! The difficulty is reconciliation: a record matching the predicate in an
//! older component may have a newer version (another value, or a
//! tombstone) in a newer component whose filter does not intersect the
//! predicate, so that component is never read. The paper's maintenance
//! strategies, chosen by the parameter `maintain`:
//!
//! * `validation`: filters hold only the component's own values; a
//!   candidate found in a table is validated by a point lookup of its key
//!   at the snapshot (memtables first, in memory; then the tables, Bloom
//!   filters first) — valid only if it is the key's newest version. (The
//!   paper's Validation reconciles by scanning every newer component
//!   instead, which gives up pruning for old data.)
//! * `eager`: every write looks up the record it overwrites
//!   (`needs_current`), and the old attribute value *widens* the filter of
//!   the component receiving the write. Invariant (for every key `k`, and
//!   every pair of versions of `k` in different tables, the newer in table
//!   `N`): `filter(N)` contains the attribute of the version just older
//!   than `N`'s. So whenever an older version matches, the table holding
//!   the next newer version is scanned too, and by induction every newer
//!   version of the key is seen before it: the newest version seen in the
//!   scanned tables (components walked newest first, a key's versions never
//!   out of order across them) is the key's newest version in all tables,
//!   and no lookup is needed. Memtables are always checked exactly, in
//!   memory. A flush widens the table with the old values recorded for the
//!   keys it writes (including versions the flush drops); a compaction
//!   output takes the widening of every input table whose key range
//!   overlaps its own (a superset of what its kept entries need).
//! * `mutable-bitmap` (§5, the default): every write that may replace a
//!   version of its key *marks* the key as deleted before it. Filters then
//!   follow new values only (no widening), and a scan skips marked
//!   versions: no reconciliation, no lookups.
//!
//! Mutable-bitmap, as built. The paper keeps one bitmap per disk component
//! indexed by entry position, and a write finds the old version's
//! position through a primary-key index to set its bit. Strata has no
//! primary-key index apart from the records, and finding the replaced
//! version by reading its data block was half of what the index added to
//! an update (session 47). Here a mark is the pair (key, deleting write's
//! sequence number) and deletes *every* older version of the key: it
//! names neither table nor position, so the write needs to know only
//! whether an older version may exist (`NeedsCurrent::Exists`: the
//! insert's own search for the active memtable, key filters for the other
//! memtables, key range and Bloom filter for tables — a false positive
//! makes a mark that deletes nothing). Consequences:
//! * *Snapshot rule (the invariant).* A query at snapshot `S` treats a
//!   table version `(k, s)` as deleted iff `k` has a mark `d` with
//!   `s < d <= S`. Every write that replaces a version (put or tombstone)
//!   marks before it is published (under the sync guard, like every
//!   synchronous index), so every version superseded at `S` is deleted by
//!   then, and none that is live at `S` is (a mark by a write newer than
//!   `S` does not count). RAM keeps each key's newest mark only
//!   (`MarkMap`); a query at a snapshot older than it looks that key up
//!   exactly (`Scan::valid`), which only a write racing the query causes.
//! * *Flushes and compactions.* A mark set while a flush or compaction
//!   rewrites the versions it deletes applies to the new table unchanged:
//!   there is no position to translate, so no bit can be lost and neither
//!   the paper's Lock nor its Side-file method is needed.
//! * *Checkpoint and recovery.* A mark lives with the write that made it:
//!   in RAM (and the WAL, as that write) until the write's memtable is
//!   flushed, then in that table's `filter.<id>` block, which the flush
//!   writes before the WAL files are retired. Compactions carry a key's
//!   marks with the versions of their writes and drop the others (a
//!   dropped version was shadowed by a newer write, whose own mark deletes
//!   everything before it), keeping the key's oldest mark as well
//!   (`Builder::close_key`). At open the marks are read from every table
//!   and the WAL replay marks again (the existence check plays the
//!   paper's "update bit").
//! * *Marks not yet in a table* are kept in write order in one buffer
//!   (`MarkLog`: keys back to back, no allocation a mark); a flush takes
//!   those of its memtable's writes sorted by key and walks them beside
//!   the keys it writes, as a compaction walks its inputs' marks. A write
//!   only appends there; the map of newest marks takes the new ones in at
//!   each install and before a query scans (`Pending::fold_into`). The map
//!   is keyed by the key (inline up to 22 bytes), and a query probes it
//!   only for entries that match the predicate.
//! * Within a session the RAM map of marks only grows (about 37 bytes a
//!   marked key with the map's overhead); a reopen loads only the marks
//!   tables still hold.
//!
//! Top-K walks the components newest first and skips a table once K valid
//! results newer than its newest entry are known (as `embedded` does).

#![deny(clippy::indexing_slicing)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use strata_lsm::cache::TableCache;
use strata_lsm::coding::{get_length_prefixed, get_varint64, put_length_prefixed, put_varint64};
use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::{InstallEvent, InstallReason, TableContext, TableReason};
use strata_lsm::key::{self, SeqNo, ValueKind};
use strata_lsm::memtable::{MemGet, MemTable};
use strata_lsm::sstable::BlockHandle;
use strata_lsm::version::{FileMetaData, Version};

use super::def::Attrs;
use super::embedded::{key_type_byte, Zone};
use super::fxhash::{FastMap, FastSet};
use super::inline_key::InlineKey;
use super::results::Results;
use super::side::{self, SideBounds};
use super::stored::{StoredBuilder, StoredValues};
use super::strategy::{
    BuildMethod, Current, IndexStrategy, NeedsCurrent, OpenCx, QueryCx, StrategyKind,
    TableIndexBuilder, VersionSlot, WritePath,
};
use super::tables::{self, TableMap};
use super::value::{intersects, IndexValue, KeyType, Predicate};
use super::{lock, read, write, Hits, IndexStats, OpRef, QueryProfile};

/// Version written (2: a mark is a key and its deleting write). Version 1
/// blocks (a mark also named the version it deleted) are read.
const FORMAT_VERSION: u8 = 2;
/// Flag: the block holds the table's own zone.
const FLAG_OWN: u8 = 1;
/// Flag: the block holds the eager widening zone.
const FLAG_WIDEN: u8 = 2;
/// Flag: the block holds deletion marks (mutable-bitmap).
const FLAG_MARKS: u8 = 4;

/// Name of the meta block of index `index_id` in a table.
pub fn block_name(index_id: u32) -> String {
    format!("filter.{index_id}")
}

/// Name of the meta block of index `index_id` that records every value of
/// the table by sequence number (what a compaction reads instead of the
/// records; `docs/format/filter.md`).
pub fn values_block_name(index_id: u32) -> String {
    format!("filter.{index_id}.values")
}

/// Version of the values block.
const VALUES_VERSION: u8 = 1;

/// The values block of an index of type `ty` holding `n` entries, `entries`
/// their encodings back to back (varint sequence number ‖ length-prefixed
/// encoded value each).
fn encode_values(ty: KeyType, n: u64, entries: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() + 12);
    out.push(VALUES_VERSION);
    out.push(key_type_byte(ty));
    put_varint64(&mut out, n);
    out.extend_from_slice(entries);
    out
}

/// Decodes a values block of an index of type `expect` (`ctx` names it in
/// errors), handing each (sequence number, encoded value) to `f` in table
/// order; stops early, returning false, when `f` does.
pub(crate) fn decode_values(
    mut src: &[u8],
    expect: KeyType,
    ctx: &str,
    mut f: impl FnMut(SeqNo, &[u8]) -> bool,
) -> Result<bool> {
    let bad = |what: &str| Error::corruption(format!("bad filter values block ({ctx}): {what}"));
    match src {
        [v, t, rest @ ..] => {
            if *v != VALUES_VERSION {
                return Err(bad("unknown version"));
            }
            if *t != key_type_byte(expect) {
                return Err(bad("key type differs from the index definition"));
            }
            src = rest;
        }
        _ => return Err(bad("truncated header")),
    }
    let n = get_varint64(&mut src).ok_or_else(|| bad("truncated count"))?;
    for _ in 0..n {
        let seq = get_varint64(&mut src).ok_or_else(|| bad("truncated sequence number"))?;
        let v = get_length_prefixed(&mut src).ok_or_else(|| bad("truncated value"))?;
        if !IndexValue::is_encoding(expect, v) {
            return Err(bad("a value does not decode"));
        }
        if !f(seq, v) {
            return Ok(false);
        }
    }
    if !src.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(true)
}

/// How filters stay correct under updates and deletes (the paper's
/// maintenance strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Maintain {
    /// Old values looked up on every write widen the new component's filter.
    Eager,
    /// No lookups on write; candidates validated by a point lookup.
    Validation,
    /// Writes mark the version they replace as deleted; filters follow
    /// new values only and scans skip marked versions.
    MutableBitmap,
}

/// Parses the parameters of a `filter` index: `maintain`.
pub(crate) fn parse_params(params: &[(String, String)]) -> Result<Maintain> {
    let mut maintain = Maintain::MutableBitmap;
    for (k, v) in params {
        match (k.as_str(), v.as_str()) {
            ("maintain", "eager") => maintain = Maintain::Eager,
            ("maintain", "validation") => maintain = Maintain::Validation,
            ("maintain", "mutable-bitmap") => maintain = Maintain::MutableBitmap,
            ("maintain", _) => {
                return Err(Error::invalid(format!(
                    "filter: maintain must be mutable-bitmap, eager or validation, not {v:?}"
                )))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown parameter {k:?} for strategy filter (known: maintain)"
                )))
            }
        }
    }
    Ok(maintain)
}

/// One table's range filter, decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TableFilter {
    /// Indexed values in the table (every version of every record).
    pub values: u64,
    /// The range of the table's own values.
    pub own: Option<Zone>,
    /// Eager: the range of the old values of the keys the table holds
    /// newer versions of (see the module invariant).
    pub widen: Option<Zone>,
    /// `own` ∪ `widen`: what queries test.
    pub filter: Option<Zone>,
    /// Mutable-bitmap: deletion marks (key, deleting write) of the writes
    /// this table holds, and those carried from compaction inputs; sorted
    /// by key.
    pub marks: Vec<Mark>,
    /// Bytes of the meta blocks (this one and the values block).
    pub disk_bytes: u64,
}

fn union(a: Option<&Zone>, b: Option<&Zone>) -> Option<Zone> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let mut z = a.clone();
            z.widen(b);
            Some(z)
        }
        (Some(z), None) | (None, Some(z)) => Some(z.clone()),
        (None, None) => None,
    }
}

fn widen_into(slot: &mut Option<Zone>, z: &Zone) {
    match slot {
        Some(s) => s.widen(z),
        None => *slot = Some(z.clone()),
    }
}

/// Encodes one table's meta block (`docs/format/filter.md`).
pub(crate) fn encode(
    ty: KeyType,
    values: u64,
    own: Option<&Zone>,
    widen: Option<&Zone>,
    marks: &[Mark],
) -> Vec<u8> {
    let mut flags = 0;
    if !marks.is_empty() {
        flags |= FLAG_MARKS;
    }
    if own.is_some() {
        flags |= FLAG_OWN;
    }
    if widen.is_some() {
        flags |= FLAG_WIDEN;
    }
    let mut out = vec![FORMAT_VERSION, key_type_byte(ty), flags];
    put_varint64(&mut out, values);
    for z in [own, widen].into_iter().flatten() {
        z.encode(&mut out);
    }
    if !marks.is_empty() {
        put_varint64(&mut out, marks.len() as u64);
        for (key, new) in marks {
            put_length_prefixed(&mut out, key);
            put_varint64(&mut out, *new);
        }
    }
    out
}

/// Decodes a meta block written by [`encode`] for an index of type
/// `expect`; `ctx` names the block in errors.
pub(crate) fn decode(mut src: &[u8], expect: KeyType, ctx: &str) -> Result<TableFilter> {
    let bad = |what: &str| Error::corruption(format!("bad range filter block ({ctx}): {what}"));
    let disk_bytes = src.len() as u64;
    let mut byte = |what: &str| -> Result<u8> {
        let (&b, rest) = src.split_first().ok_or_else(|| bad(what))?;
        src = rest;
        Ok(b)
    };
    let version = byte("empty")?;
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(bad("unknown version"));
    }
    if byte("truncated key type")? != key_type_byte(expect) {
        return Err(bad("key type differs from the index definition"));
    }
    let flags = byte("truncated flags")?;
    if flags & !(FLAG_OWN | FLAG_WIDEN | FLAG_MARKS) != 0 {
        return Err(bad("unknown flags"));
    }
    let values = get_varint64(&mut src).ok_or_else(|| bad("truncated value count"))?;
    if (values > 0) != (flags & FLAG_OWN != 0) {
        return Err(bad("value count and own zone disagree"));
    }
    let own = if flags & FLAG_OWN != 0 {
        Some(Zone::decode(&mut src, expect, &bad)?)
    } else {
        None
    };
    let widen = if flags & FLAG_WIDEN != 0 {
        Some(Zone::decode(&mut src, expect, &bad)?)
    } else {
        None
    };
    let mut marks = Vec::new();
    if flags & FLAG_MARKS != 0 {
        let n = get_varint64(&mut src).ok_or_else(|| bad("truncated mark count"))?;
        if n == 0 {
            return Err(bad("mark flag without marks"));
        }
        // Each mark takes at least 3 bytes: no allocation beyond the input.
        marks.reserve(n.min(src.len() as u64 / 3) as usize);
        for _ in 0..n {
            let key = get_length_prefixed(&mut src).ok_or_else(|| bad("truncated mark key"))?;
            // Version 1 also named the deleted version, the newest older
            // than the write: the write deleted every older version, which
            // is what a version 2 mark says.
            let old = match version {
                1 => Some(get_varint64(&mut src).ok_or_else(|| bad("truncated mark"))?),
                _ => None,
            };
            let new = get_varint64(&mut src).ok_or_else(|| bad("truncated mark"))?;
            if new == 0 || old.is_some_and(|old| old >= new) {
                return Err(bad("mark deletes a version not older than the write"));
            }
            if marks.last().is_some_and(|(k, _): &Mark| k.as_slice() > key) {
                return Err(bad("marks out of key order"));
            }
            marks.push((key.to_vec(), new));
        }
    }
    if !src.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(TableFilter {
        marks,
        values,
        filter: union(own.as_ref(), widen.as_ref()),
        own,
        widen,
        disk_bytes,
    })
}

/// The filters of one index in one version: each live table's.
#[derive(Default, Clone)]
pub(crate) struct FilterGlobal {
    pub tables: TableMap<TableFilter>,
    /// Eager: the largest sequence number flushed to a table of this (or
    /// an earlier) version; the old values recorded for writes up to it
    /// are in table filters and can be forgotten.
    pub flushed_seq: SeqNo,
}

impl FilterGlobal {
    fn memory_bytes(&self) -> usize {
        self.tables
            .values()
            .map(|t| {
                std::mem::size_of::<TableFilter>()
                    + [&t.own, &t.widen, &t.filter]
                        .iter()
                        .map(|z| z.as_ref().map_or(0, Zone::heap_bytes))
                        .sum::<usize>()
                    + t.marks
                        .iter()
                        .map(|m| std::mem::size_of::<Mark>() + m.0.len())
                        .sum::<usize>()
            })
            .sum()
    }
}

/// Eager: the old values of writes not yet in a table filter, by key:
/// (sequence number of the write, the attribute of the record it replaced).
type Widening = Arc<Mutex<HashMap<Vec<u8>, Vec<(SeqNo, IndexValue)>>>>;

/// A deletion mark: user key and the sequence number of a write (put or
/// delete) that replaced a version of it. It deletes, at every snapshot
/// that sees the write, every older version of the key.
pub(crate) type Mark = (Vec<u8>, SeqNo);

/// Mutable-bitmap: the marks made by writes not yet in a table.
type PendingMarks = Arc<Mutex<Pending>>;

/// The marks of writes not yet in a table, in write order, and how many
/// of them the map of newest marks holds. A write only appends its mark
/// here; the map takes them in later, by [`Pending::fold_into`], in the
/// flush thread at each install or in a query before it scans (the map's
/// insert, a cache miss once the map outgrows the caches, was 11% of the
/// writer's samples at 1 M time-range records).
#[derive(Default)]
struct Pending {
    log: MarkLog,
    /// Invariant: `log`'s first `folded` marks are in the map.
    folded: usize,
}

impl Pending {
    /// Adds the marks not yet in `map` to it. Lock order: the pending
    /// marks, then the map.
    fn fold_into(&mut self, map: &RwLock<FastMap<InlineKey, SeqNo>>) {
        if self.folded >= self.log.len() {
            return;
        }
        let mut m = write(map);
        for i in self.folded..self.log.len() {
            if let Some((key, new)) = self.log.get(i) {
                note_mark(&mut m, key, new);
            }
        }
        self.folded = self.log.len();
    }
}

/// Mutable-bitmap: the newest deletion mark of every key marked (key →
/// deleting write), from the tables at open and from the writes since
/// (folded in from [`Pending`] before a query scans). A
/// mark names no table or position, so one made while a flush or
/// compaction rewrites the versions it deletes applies to the new table
/// as well (nothing to carry over, no lock). Only the newest mark is
/// kept: a query at a snapshot older than it checks the key exactly.
type MarkMap = Arc<RwLock<FastMap<InlineKey, SeqNo>>>;

/// A compaction's input marks, in key order (shared by its outputs).
type InputMarks = MarkLog;

/// Deletion marks (user key, deleting write) with their keys in one
/// buffer: no allocation a mark. Appended in write order by
/// writes (pending marks) or sorted by key for a flush or compaction
/// (`sorted`), whose builders walk them beside the keys they write.
#[derive(Default)]
pub(crate) struct MarkLog {
    keys: Vec<u8>,
    /// (end of the key in `keys`, deleting write); a key starts where the
    /// previous one ends.
    marks: Vec<(usize, SeqNo)>,
}

impl MarkLog {
    fn push(&mut self, key: &[u8], new: SeqNo) {
        self.keys.extend_from_slice(key);
        self.marks.push((self.keys.len(), new));
    }

    fn len(&self) -> usize {
        self.marks.len()
    }

    /// Mark `i`: (key, deleting write).
    fn get(&self, i: usize) -> Option<(&[u8], SeqNo)> {
        let start = match i.checked_sub(1) {
            Some(p) => self.marks.get(p)?.0,
            None => 0,
        };
        let &(end, new) = self.marks.get(i)?;
        Some((self.keys.get(start..end)?, new))
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], SeqNo)> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The marks of `self` that `keep` accepts.
    fn filtered(&self, mut keep: impl FnMut(SeqNo) -> bool) -> MarkLog {
        let mut out = MarkLog::default();
        for (k, new) in self.iter() {
            if keep(new) {
                out.push(k, new);
            }
        }
        out
    }

    /// The same marks ordered by key (stable: a key's marks keep their
    /// order).
    fn sorted(&self) -> MarkLog {
        self.sorted_where(|_| true)
    }

    /// The marks `keep` accepts, ordered as by [`MarkLog::sorted`].
    fn sorted_where(&self, mut keep: impl FnMut(SeqNo) -> bool) -> MarkLog {
        let kept: Vec<(&[u8], usize)> = (0..self.len())
            .filter_map(|i| self.get(i).map(|m| (i, m)))
            .filter(|(_, (_, new))| keep(*new))
            .map(|(i, (k, _))| (k, i))
            .collect();
        // Keys often share a long prefix (fixed-width decimal ids): each
        // mark is ordered by the 8 bytes after the prefix all share first,
        // so that most comparisons are one integer comparison, not a
        // `memcmp` (sorting a flush's marks by whole keys was ~75 M
        // instructions a flush at 200 k time-range records, callgrind).
        // Equal heads fall back to the keys. A stable sort keeps a key's
        // marks in log order, and merges a compaction's inputs' marks
        // (each input's already sorted) as runs.
        let shared = kept.first().map_or(0, |(first, _)| {
            kept.iter().fold(first.len(), |n, (k, _)| {
                n.min(
                    first
                        .iter()
                        .zip(k.iter())
                        .take_while(|(a, b)| a == b)
                        .count(),
                )
            })
        });
        let head = |k: &[u8]| {
            let mut h = [0u8; 8];
            for (d, s) in h.iter_mut().zip(k.get(shared..).unwrap_or_default()) {
                *d = *s;
            }
            u64::from_be_bytes(h)
        };
        let mut order: Vec<(u64, &[u8], usize)> =
            kept.into_iter().map(|(k, i)| (head(k), k, i)).collect();
        order.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let mut out = MarkLog {
            keys: Vec::with_capacity(order.iter().map(|(_, k, _)| k.len()).sum()),
            marks: Vec::with_capacity(order.len()),
        };
        for (k, new) in order.into_iter().filter_map(|(_, _, i)| self.get(i)) {
            out.push(k, new);
        }
        out
    }

    /// The position of the first mark of a key at or after `key` in a log
    /// sorted by key (where a table starting at `key` starts its walk).
    fn seek(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some((k, _)) if k < key => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// The marks of `key` at and after `*pos` in a log sorted by key,
    /// which moves `*pos` past them; keys asked in ascending order walk
    /// the log once.
    fn take_key(&self, pos: &mut usize, key: &[u8], mut f: impl FnMut(SeqNo)) {
        while let Some((k, new)) = self.get(*pos) {
            match k.cmp(key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => f(new),
                std::cmp::Ordering::Greater => return,
            }
            *pos += 1;
        }
    }

    /// Heap bytes (for the index's DRAM estimate).
    fn heap_bytes(&self) -> usize {
        self.keys.capacity() + self.marks.capacity() * std::mem::size_of::<(usize, SeqNo)>()
    }
}

/// A zone with the user-key range of the table it belongs to (smallest,
/// largest).
type RangedZone = (Vec<u8>, Vec<u8>, Zone);

/// The `filter` strategy of one index.
pub(crate) struct Filter {
    id: u32,
    name: String,
    ty: KeyType,
    maintain: Maintain,
    tables: Arc<TableCache>,
    pending: tables::Pending<TableFilter>,
    widening: Widening,
    pending_marks: PendingMarks,
    marks: MarkMap,
    /// The table filters of the latest installed version: a compaction's
    /// inputs are found here (eager widening of its outputs).
    latest: Mutex<TableMap<TableFilter>>,
    scanned: AtomicU64,
    skipped: AtomicU64,
}

impl Filter {
    /// Parameters: `maintain` (see [`parse_params`]).
    pub fn open(cx: &OpenCx<'_>) -> Result<Filter> {
        Ok(Filter {
            id: cx.id,
            name: cx.spec.name.clone(),
            ty: cx.spec.key_type,
            maintain: parse_params(cx.params)?,
            tables: cx.tables.clone(),
            pending: Arc::default(),
            widening: Arc::default(),
            pending_marks: Arc::default(),
            marks: Arc::default(),
            latest: Mutex::default(),
            scanned: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        })
    }

    /// Reads and decodes this index's meta block in table `f` (`None` if
    /// the table was written before the index existed).
    fn read_table(&self, f: &FileMetaData) -> Result<Option<TableFilter>> {
        let t = self.tables.get(f.number, f.file_size)?;
        let name = block_name(self.id);
        let Some(bytes) = t.meta_block(&name)? else {
            return Ok(None);
        };
        let mut tf = decode(&bytes, self.ty, &format!("table {} block {name}", f.number))?;
        tf.disk_bytes += t.meta_block_size(&values_block_name(self.id)).unwrap_or(0);
        Ok(Some(tf))
    }

    /// The filter of compaction input `f`: the installed one, else read
    /// from the table; `None` if the table has no block of this index.
    fn input_table(&self, f: &FileMetaData) -> Result<Option<Arc<TableFilter>>> {
        if let Some(t) = lock(&self.latest).get(&f.number).cloned() {
            return Ok(Some(t));
        }
        Ok(self.read_table(f)?.map(Arc::new))
    }

    /// Eager: the widening zones of a compaction's inputs, with their user
    /// key ranges.
    fn input_widening(&self, inputs: &[Arc<FileMetaData>]) -> Result<Vec<RangedZone>> {
        let mut out = Vec::new();
        for f in inputs {
            // A table without the block was written before the index
            // existed: built by a full compaction, which leaves no key in
            // two tables.
            let Some(tf) = self.input_table(f)? else {
                continue;
            };
            if let Some(z) = &tf.widen {
                out.push((
                    key::user_key(&f.smallest).to_vec(),
                    key::user_key(&f.largest).to_vec(),
                    z.clone(),
                ));
            }
        }
        Ok(out)
    }

    /// Mutable-bitmap: the marks of a compaction's inputs, by key.
    fn input_marks(&self, inputs: &[Arc<FileMetaData>]) -> Result<InputMarks> {
        let mut out = MarkLog::default();
        for f in inputs {
            let Some(tf) = self.input_table(f)? else {
                continue;
            };
            for (k, new) in &tf.marks {
                out.push(k, *new);
            }
        }
        Ok(out.sorted())
    }

    /// Mutable-bitmap (§5.2): each write that may replace a version of
    /// its key (any version, a tombstone too, by `NeedsCurrent::Exists`:
    /// the active memtable exactly, older components by Bloom filter; an
    /// earlier write of the same batch counts) marks the key as deleted
    /// before it. A false "may exist" makes a mark that deletes nothing.
    fn mark(&self, ops: &[OpRef<'_>], current: &Current<'_>) {
        let exists = |key: &[u8]| matches!(current.get(key), Some(Some(_)));
        if let [(seq, key, _)] = ops {
            // One write (every `put`): no set of the batch's keys.
            if exists(key) {
                lock(&self.pending_marks).log.push(key, *seq);
            }
            return;
        }
        let mut seen: FastSet<&[u8]> = FastSet::default();
        let mut pending = lock(&self.pending_marks);
        for &(seq, key, _) in ops {
            if !seen.insert(key) || exists(key) {
                pending.log.push(key, seq);
            }
        }
    }

    fn global(&self, tables: TableMap<TableFilter>, flushed_seq: SeqNo) -> VersionSlot {
        lock(&self.latest).clone_from(&tables);
        Arc::new(FilterGlobal {
            tables,
            flushed_seq,
        })
    }
}

/// Records mark `(key, new)` in the map of newest marks.
fn note_mark(marks: &mut FastMap<InlineKey, SeqNo>, key: &[u8], new: SeqNo) {
    match marks.get_mut(key) {
        Some(d) => *d = (*d).max(new),
        None => {
            marks.insert(InlineKey::new(key), new);
        }
    }
}

/// Builds one table's range filter while the table is written.
struct Builder {
    id: u32,
    ty: KeyType,
    file: u64,
    pending: tables::Pending<TableFilter>,
    /// Eager flush: the recorded old values.
    flush_widening: Option<Widening>,
    /// Eager compaction: the inputs' widening zones and key ranges, or the
    /// error reading them (reported by `finish`).
    input_widening: Result<Vec<RangedZone>>,
    /// Mutable-bitmap flush: the marks made by writes since the smallest
    /// sequence number of the memtable flushed (the floor; `0` if
    /// unknown), sorted by key, and the floor.
    flush_marks: Option<(MarkLog, SeqNo)>,
    /// Mutable-bitmap compaction: the inputs' marks, or the error reading
    /// them (reported by `finish`).
    input_marks: Option<Arc<std::result::Result<InputMarks, String>>>,
    /// Where the walk of `flush_marks` or `input_marks` is (both sorted
    /// by key; the table's keys come in ascending order).
    marks_pos: usize,
    /// Reused buffer of one encoded value.
    enc: Vec<u8>,
    values: u64,
    own: Option<Zone>,
    widen: Option<Zone>,
    first_key: Option<Vec<u8>>,
    last_key: Vec<u8>,
    /// The current key's sequence numbers in this table.
    key_seqs: Vec<SeqNo>,
    /// The current key's marks (deleting writes) that reach this table.
    key_marks: Vec<SeqNo>,
    /// The marks kept, in key order.
    marks: Vec<Mark>,
    /// Every value added (`values` of them), as the values block's
    /// entries (sequence number, encoded value).
    stored: Vec<u8>,
}

impl Builder {
    /// Keeps the current key's marks that may still matter: those of the
    /// writes whose versions this table holds, and the oldest. A mark
    /// whose write's version was dropped is covered by the mark of the
    /// write that shadowed that version (every write that replaces a
    /// version marks, and the shadowing write is kept, or is shadowed in
    /// turn); the oldest is kept as well, for the marks of version 1
    /// blocks and of writes looked up by record (`NeedsCurrent::All`),
    /// which did not mark a write replacing a tombstone. With a flush
    /// whose memtable range is unknown (`conservative`), every mark older
    /// than the table's versions is kept.
    fn close_key(&mut self) {
        if self.key_marks.is_empty() {
            self.key_seqs.clear();
            return;
        }
        self.key_marks.sort_unstable();
        self.key_marks.dedup();
        let root = self.key_marks.first().copied();
        let conservative = self.flush_marks.as_ref().is_some_and(|(_, f)| *f == 0);
        let oldest = self.key_seqs.iter().copied().min().unwrap_or(0);
        for &new in &self.key_marks {
            if Some(new) == root || self.key_seqs.contains(&new) || (conservative && new < oldest) {
                self.marks.push((self.last_key.clone(), new));
            }
        }
        self.key_marks.clear();
        self.key_seqs.clear();
    }
}

impl Builder {
    /// The bookkeeping of an entry before its value: a new key closes the
    /// previous one and takes its marks (and, eager, its widening).
    fn enter(&mut self, user_key: &[u8], seq: SeqNo) {
        if self.first_key.is_none() || self.last_key.as_slice() != user_key {
            // The key's first entry: its newest version in this table.
            if self.first_key.is_none() {
                self.first_key = Some(user_key.to_vec());
                // A compaction's outputs share its inputs' marks: each
                // starts its walk at its own first key.
                if let Some(Ok(m)) = self.input_marks.as_deref() {
                    self.marks_pos = m.seek(user_key);
                }
            } else {
                self.close_key();
            }
            self.last_key.clear();
            self.last_key.extend_from_slice(user_key);
            let key_marks = &mut self.key_marks;
            if let Some((m, _)) = &self.flush_marks {
                // As for widening: the marks of the writes this flush holds
                // (at or above the floor: `flush_marks` has no others).
                m.take_key(&mut self.marks_pos, user_key, |new| {
                    if new <= seq {
                        key_marks.push(new);
                    }
                });
            }
            if let Some(Ok(m)) = self.input_marks.as_deref() {
                m.take_key(&mut self.marks_pos, user_key, |new| {
                    key_marks.push(new);
                });
            }
            if let Some(w) = &self.flush_widening {
                // Every version of the key this flush writes or drops is at
                // most `seq`; later writes are in a newer memtable.
                if let Some(recs) = lock(w).get(user_key) {
                    for (s, v) in recs {
                        if *s <= seq {
                            widen_into(&mut self.widen, &Zone::of(v, &v.encode()));
                        }
                    }
                }
            }
        }
        self.key_seqs.push(seq);
    }

    /// Counts the value of the entry `seq` and records it for the values
    /// block.
    fn store(&mut self, seq: SeqNo, enc: &[u8]) {
        put_varint64(&mut self.stored, seq);
        put_length_prefixed(&mut self.stored, enc);
        self.values += 1;
    }

    /// Widens the table's own range by the scalar value of the entry
    /// `seq`, encoded.
    fn widen_scalar(&mut self, seq: SeqNo, enc: &[u8]) {
        self.store(seq, enc);
        match &mut self.own {
            Some(Zone::Scalar(lo, hi)) => {
                if enc < lo.as_slice() {
                    lo.clear();
                    lo.extend_from_slice(enc);
                } else if enc > hi.as_slice() {
                    hi.clear();
                    hi.extend_from_slice(enc);
                }
            }
            own => widen_into(own, &Zone::Scalar(enc.to_vec(), enc.to_vec())),
        }
    }
}

impl TableIndexBuilder for Builder {
    fn add(&mut self, user_key: &[u8], seq: SeqNo, _block: BlockHandle, attr: Option<IndexValue>) {
        self.enter(user_key, seq);
        let Some(v) = attr else { return };
        let mut enc = std::mem::take(&mut self.enc);
        enc.clear();
        v.encode_into(&mut enc);
        if v.mbr().is_none() {
            self.widen_scalar(seq, &enc);
        } else {
            self.store(seq, &enc);
            widen_into(&mut self.own, &Zone::of(&v, &enc));
        }
        self.enc = enc;
    }

    /// A flush's values (computed at write time) and a compaction's
    /// stored ones arrive encoded: a scalar's range is kept encoded, so
    /// the bytes are compared as they are instead of decoded and encoded
    /// again.
    fn add_encoded(
        &mut self,
        user_key: &[u8],
        seq: SeqNo,
        block: BlockHandle,
        ty: KeyType,
        enc: &[u8],
    ) {
        if ty.is_spatial() {
            self.add(user_key, seq, block, IndexValue::decode(ty, enc).ok());
            return;
        }
        self.enter(user_key, seq);
        // What the default's decoding would refuse counts as no value.
        if IndexValue::is_encoding(ty, enc) {
            self.widen_scalar(seq, enc);
        }
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        let inputs = std::mem::replace(&mut self.input_widening, Ok(Vec::new()))?;
        if let Some(Err(e)) = self.input_marks.as_deref() {
            return Err(Error::Background(format!(
                "filter: reading the marks of the compaction's inputs: {e}"
            )));
        }
        if self.first_key.is_some() {
            self.close_key();
        }
        if let Some(first) = &self.first_key {
            let last = self.last_key.as_slice();
            for (lo, hi, z) in &inputs {
                if lo.as_slice() <= last && first.as_slice() <= hi.as_slice() {
                    widen_into(&mut self.widen, z);
                }
            }
        }
        let name = block_name(self.id);
        let marks = std::mem::take(&mut self.marks);
        let bytes = encode(
            self.ty,
            self.values,
            self.own.as_ref(),
            self.widen.as_ref(),
            &marks,
        );
        let values = encode_values(self.ty, self.values, &self.stored);
        // What a reopen will read (checked against the decoded bytes in
        // debug builds; decoding here cost a flush about 7% of its
        // instructions, an allocation a mark).
        let own = self.own.take();
        let widen = self.widen.take();
        let t = TableFilter {
            values: self.values,
            filter: union(own.as_ref(), widen.as_ref()),
            own,
            widen,
            marks,
            disk_bytes: (bytes.len() + values.len()) as u64,
        };
        #[cfg(debug_assertions)]
        {
            let mut d = decode(
                &bytes,
                self.ty,
                &format!("table {} block {name}", self.file),
            )?;
            d.disk_bytes += values.len() as u64;
            debug_assert_eq!(d, t, "table {} block {name}", self.file);
        }
        lock(&self.pending).insert(self.file, Arc::new(t));
        Ok(vec![(name, bytes), (values_block_name(self.id), values)])
    }
}

impl IndexStrategy for Filter {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Filter
    }

    fn write_path(&self) -> WritePath {
        WritePath::Tables
    }

    fn applies_batches(&self) -> bool {
        self.maintain != Maintain::Validation
    }

    fn needs_current(&self) -> NeedsCurrent {
        match self.maintain {
            Maintain::Eager => NeedsCurrent::All,
            Maintain::MutableBitmap => NeedsCurrent::Exists,
            Maintain::Validation => NeedsCurrent::No,
        }
    }

    /// Mutable-bitmap marks versions by sequence number only.
    fn apply_reads_attributes(&self) -> bool {
        self.maintain != Maintain::MutableBitmap
    }

    /// Eager: records each overwritten record's attribute with the write
    /// (an earlier operation of the same batch counts as the old record).
    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        match self.maintain {
            Maintain::Eager => {}
            Maintain::MutableBitmap => {
                self.mark(ops, current);
                return Ok(());
            }
            Maintain::Validation => return Ok(()),
        }
        let mut latest: HashMap<&[u8], Option<IndexValue>> = HashMap::new();
        let mut w = lock(&self.widening);
        for &(seq, key, new) in ops {
            let old = match latest.remove(key) {
                Some(earlier) => earlier,
                None => match current.get(key) {
                    Some(Some((_, raw))) => attrs.get(raw).ok(),
                    _ => None,
                },
            };
            if let Some(v) = old {
                w.entry(key.to_vec()).or_default().push((seq, v));
            }
            latest.insert(key, new.and_then(|raw| attrs.get(raw).ok()));
        }
        Ok(())
    }

    /// The values blocks of the inputs (a table written before they
    /// existed contributes nothing: its records are read).
    fn stored_values(
        &self,
        inputs: &[Arc<FileMetaData>],
        budget: usize,
    ) -> Result<Option<StoredValues>> {
        let mut out = StoredBuilder::for_inputs(self.ty, budget, inputs);
        let name = values_block_name(self.id);
        for f in inputs {
            let t = self.tables.get(f.number, f.file_size)?;
            let Some(bytes) = t.meta_block(&name)? else {
                continue;
            };
            let ctx = format!("table {} block {name}", f.number);
            if !decode_values(&bytes, self.ty, &ctx, |seq, v| out.push(seq, v))? {
                return Ok(None);
            }
        }
        Ok(Some(out.finish()))
    }

    fn table_builder(&self, ctx: &TableContext) -> Option<Box<dyn TableIndexBuilder>> {
        let eager = self.maintain == Maintain::Eager;
        let bitmap = self.maintain == Maintain::MutableBitmap;
        let flush = ctx.reason == TableReason::Flush;
        let input_marks = (bitmap && !flush).then(|| {
            let make = || self.input_marks(&ctx.inputs).map_err(|e| e.to_string());
            let name = format!("strata.filter.marks.{}", self.id);
            ctx.scratch
                .as_ref()
                .and_then(|sc| sc.get_or_insert_with(&name, make))
                .unwrap_or_else(|| Arc::new(make()))
        });
        Some(Box::new(Builder {
            id: self.id,
            ty: self.ty,
            file: ctx.file_number,
            pending: self.pending.clone(),
            flush_widening: (eager && flush).then(|| self.widening.clone()),
            input_widening: if eager && !flush {
                self.input_widening(&ctx.inputs)
            } else {
                Ok(Vec::new())
            },
            flush_marks: (bitmap && flush).then(|| {
                let floor = ctx
                    .side
                    .as_ref()
                    .and_then(|s| s.as_any().downcast_ref::<side::IndexSide>())
                    .and_then(|s| s.min_seq())
                    .unwrap_or(0);
                let mine = lock(&self.pending_marks)
                    .log
                    .sorted_where(|new| floor <= new);
                (mine, floor)
            }),
            input_marks,
            marks_pos: 0,
            enc: Vec::new(),
            values: 0,
            own: None,
            widen: None,
            first_key: None,
            last_key: Vec::new(),
            key_seqs: Vec::new(),
            key_marks: Vec::new(),
            marks: Vec::new(),
            stored: Vec::new(),
        }))
    }

    /// See [`tables::install`]. Eager: forgets the old values recorded for
    /// writes that the previous version's tables hold (a flush installed
    /// successfully before this install began).
    fn on_install(
        &self,
        prev: Option<&VersionSlot>,
        ev: &InstallEvent<'_>,
    ) -> Result<Option<VersionSlot>> {
        let prev = prev.and_then(|p| p.downcast_ref::<FilterGlobal>());
        let tables = tables::install(prev.map(|g| &g.tables), ev, &self.pending, |f| {
            self.read_table(f)
        })?;
        let before = prev.map_or(0, |g| g.flushed_seq);
        let mut flushed_seq = before;
        if ev.reason == InstallReason::Flush {
            for (_, f) in ev.added {
                flushed_seq = flushed_seq.max(f.largest_seq);
            }
        }
        if self.maintain == Maintain::Eager && before > 0 {
            lock(&self.widening).retain(|_, recs| {
                recs.retain(|(s, _)| *s > before);
                !recs.is_empty()
            });
        }
        if self.maintain == Maintain::MutableBitmap && before > 0 {
            let mut pending = lock(&self.pending_marks);
            pending.fold_into(&self.marks);
            pending.log = pending.log.filtered(|new| new > before);
            pending.folded = pending.log.len();
        }
        Ok(Some(self.global(tables, flushed_seq)))
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
        let flushed_seq = files.iter().map(|(_, f)| f.largest_seq).max().unwrap_or(0);
        if self.maintain == Maintain::MutableBitmap {
            // The pending marks are folded in again (lock order: pending
            // marks, then the map).
            let mut pending = lock(&self.pending_marks);
            pending.folded = 0;
            let mut m = write(&self.marks);
            m.clear();
            for t in tables.values() {
                for (key, new) in &t.marks {
                    note_mark(&mut m, key, *new);
                }
            }
        }
        Ok(Some(self.global(tables, flushed_seq)))
    }

    fn covers(&self, slot: Option<&VersionSlot>, version: &Version) -> bool {
        let g = slot.and_then(|s| s.downcast_ref::<FilterGlobal>());
        tables::covers(g.map(|g| &g.tables), version)
    }

    fn build_method(&self) -> BuildMethod {
        BuildMethod::RewriteTables
    }

    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Hits> {
        cx.view.pause();
        if self.maintain == Maintain::MutableBitmap {
            // Every write the snapshot sees has appended its mark (before
            // it was published).
            lock(&self.pending_marks).fold_into(&self.marks);
        }
        let empty = FilterGlobal::default();
        let global = cx.slot_as::<FilterGlobal>().unwrap_or(&empty);
        let mut s = Scan {
            cx,
            probe: Probe::new(cx.pred),
            maintain: self.maintain,
            marks: (self.maintain == Maintain::MutableBitmap).then(|| self.marks.clone()),
            acc: Results::new(cx.opts.limit),
            seen: HashSet::new(),
            validations: 0,
            stale: 0,
            exact: 0,
            blocks_read: 0,
            scanned: 0,
            skipped: 0,
        };
        s.memtables();
        let r = s.tables(global, profile);
        let c = &cx.def.counters;
        c.validations.fetch_add(s.validations, Relaxed);
        c.failed.fetch_add(s.stale, Relaxed);
        c.exact.fetch_add(s.exact, Relaxed);
        self.scanned.fetch_add(s.scanned, Relaxed);
        self.skipped.fetch_add(s.skipped, Relaxed);
        r?;
        profile.data_blocks_read += s.blocks_read;
        profile.candidates = s.validations;
        profile.stale = s.stale;
        profile.components_scanned += s.scanned;
        profile.components_skipped += s.skipped;
        let (hits, min_blocks, components) = s.acc.finish_with_components();
        profile.min_data_blocks = min_blocks;
        profile.components_min = components;
        Ok(hits.into())
    }

    fn stats(&self, slot: Option<&VersionSlot>, s: &mut IndexStats) {
        let g = slot.and_then(|s| s.downcast_ref::<FilterGlobal>());
        s.global_entries = g.map_or(0, |g| g.tables.len() as u64);
        // Mutable-bitmap's map of marks (two sequence numbers a mark) and
        // the marks of writes not yet in a table.
        let marks = read(&self.marks)
            .keys()
            .map(|k| InlineKey::heap_bytes(k))
            .sum::<usize>()
            + super::fxhash::map_bytes(
                read(&self.marks).capacity(),
                std::mem::size_of::<(InlineKey, SeqNo)>(),
            )
            + lock(&self.pending_marks).log.heap_bytes();
        s.memory_bytes = g.map_or(0, |g| g.memory_bytes() as u64) + marks as u64;
        s.disk_bytes = g.map_or(0, |g| g.tables.values().map(|t| t.disk_bytes).sum());
        s.components_scanned = self.scanned.load(Relaxed);
        s.components_skipped = self.skipped.load(Relaxed);
    }
}

/// What a query tests filters with.
struct Probe {
    /// Encoded scalar bounds (`[v, v]` for equality).
    bounds: Option<(Vec<u8>, Vec<u8>)>,
    /// Spatial window (for equality, the value's MBR).
    window: Option<[f64; 4]>,
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
            bounds,
        }
    }

    fn scalar(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.bounds
            .as_ref()
            .is_some_and(|(a, b)| lo <= b.as_slice() && a.as_slice() <= hi)
    }

    fn zone(&self, z: &Zone) -> bool {
        match z {
            Zone::Scalar(lo, hi) => self.scalar(lo, hi),
            Zone::Rect(r) => self.window.is_some_and(|w| intersects(r, &w)),
        }
    }

    fn side(&self, b: &SideBounds) -> bool {
        match b {
            SideBounds::Scalar(lo, hi) => self.scalar(lo, hi),
            SideBounds::Rect(r) => self.window.is_some_and(|w| intersects(r, &w)),
        }
    }
}

/// The newest entry of `key` at `snapshot` in `mems` (newest first).
fn newest_in_mems(mems: &[Arc<MemTable>], key: &[u8], snapshot: SeqNo) -> Option<MemGet> {
    mems.iter().find_map(|m| m.get(key, snapshot))
}

/// One query's walk over the components.
struct Scan<'a, 'v> {
    cx: &'a QueryCx<'v>,
    probe: Probe,
    maintain: Maintain,
    /// Mutable-bitmap: the deletion marks.
    marks: Option<MarkMap>,
    acc: Results,
    /// Eager: keys whose visible version was found in a scanned table
    /// (that version is the key's newest in the tables).
    seen: HashSet<Vec<u8>>,
    validations: u64,
    stale: u64,
    exact: u64,
    blocks_read: u64,
    scanned: u64,
    skipped: u64,
}

impl Scan<'_, '_> {
    fn keep(&self, value: Vec<u8>) -> Option<Vec<u8>> {
        (!self.cx.opts.keys_only).then_some(value)
    }

    /// Memtables, newest first, each through its side structure when its
    /// filter intersects; every match is validated exactly against the
    /// memtables up to its own.
    fn memtables(&mut self) {
        let view = self.cx.view;
        let id = self.cx.def.id;
        let snapshot = view.snapshot;
        for (i, m) in view.mems.iter().enumerate() {
            // A memtable holding no indexed value is no component of the
            // index (not counted).
            let Some(b) = side::bounds(m, id) else {
                continue;
            };
            if !self.probe.side(&b) {
                self.skipped += 1;
                continue;
            }
            self.scanned += 1;
            for (key, seq) in side::candidates(m, id, self.cx.pred) {
                if seq > snapshot || self.acc.full_before(seq) {
                    continue;
                }
                self.validations += 1;
                let newer = view.mems.get(..=i).unwrap_or_default();
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

    /// True if `(key, seq)`, the visible version of `key` in a table, is
    /// the key's newest version at the snapshot. Mutable-bitmap: the scan
    /// found no mark deleting it at the snapshot, and `unsure` says the
    /// key's newest mark is newer than the snapshot (an older mark may
    /// have been replaced in the map), so only then is it looked up.
    fn valid(&mut self, key: &[u8], seq: SeqNo, unsure: bool) -> Result<bool> {
        let view = self.cx.view;
        if self.maintain == Maintain::MutableBitmap && !unsure {
            return Ok(true);
        }
        // Every memtable version is newer than every table version.
        if newest_in_mems(&view.mems, key, view.snapshot).is_some() {
            return Ok(false);
        }
        if self.maintain == Maintain::Eager {
            // The module invariant: every newer table version was scanned
            // (and `seen`) first.
            return Ok(true);
        }
        self.exact += 1;
        let newest = view
            .version
            .get_entry(view.tables, key, view.snapshot, false)?;
        Ok(newest.is_some_and(|f| f.seq == seq))
    }

    /// Tables: L0 newest first, then L1, L2, …; a table is scanned when
    /// its filter intersects the predicate.
    fn tables(&mut self, global: &FilterGlobal, profile: &mut QueryProfile) -> Result<()> {
        let view = self.cx.view;
        let snapshot = view.snapshot;
        let version = Arc::clone(&view.version);
        for files in &version.levels {
            for f in files {
                if f.smallest_seq > snapshot {
                    continue;
                }
                // Top K: every entry here is older than K known results.
                if self.acc.full_before(f.largest_seq) {
                    profile.tables_skipped += 1;
                    continue;
                }
                let Some(tf) = global.tables.get(&f.number) else {
                    return Err(Error::corruption(format!(
                        "filter index {:?} has no range filter for live table {}",
                        self.cx.def.spec.name, f.number
                    )));
                };
                if !tf.filter.as_ref().is_some_and(|z| self.probe.zone(z)) {
                    self.skipped += 1;
                    continue;
                }
                self.scanned += 1;
                self.scan_table(f)?;
            }
        }
        Ok(())
    }

    /// Every entry of table `f`: each key's visible version at the
    /// snapshot; the puts that match are validated.
    fn scan_table(&mut self, f: &FileMetaData) -> Result<()> {
        let view = self.cx.view;
        let snapshot = view.snapshot;
        let t = view.tables.get(f.number, f.file_size)?;
        let mut last: Option<Vec<u8>> = None;
        let mut visible_seen = false;
        let eager = self.maintain == Maintain::Eager;
        let marks = self.marks.clone();
        for h in t.data_block_handles()? {
            self.blocks_read += 1;
            let entries = t.read_data_block_entries(h)?;
            // Held for one block: writers mark between blocks.
            let marks = marks.as_ref().map(|m| read(m));
            for (key, seq, kind, value) in entries {
                if last.as_deref() != Some(key.as_slice()) {
                    last = Some(key.clone());
                    visible_seen = false;
                }
                // A version newer than the snapshot hides nothing; an
                // older one after the visible version is shadowed by it.
                if seq > snapshot || visible_seen {
                    continue;
                }
                visible_seen = true;
                if eager && !self.seen.insert(key.clone()) {
                    continue;
                }
                if kind != ValueKind::Value || self.acc.full_before(seq) {
                    continue;
                }
                match self.cx.def.extract(&value, None) {
                    Ok(v) if self.cx.pred.matches(&v) => {}
                    _ => continue,
                }
                // Mutable-bitmap: deleted by a write the snapshot sees.
                // Asked after the predicate: a probe of the map of marks
                // (a cache miss once it outgrows the caches) for every
                // entry cost more than reading the attribute of the
                // entries it spares.
                let newest_mark = marks.as_ref().and_then(|m| m.get(key.as_slice()).copied());
                let unsure = match newest_mark {
                    Some(new) if new <= snapshot => {
                        if seq < new {
                            continue;
                        }
                        false
                    }
                    Some(_) => true,
                    None => false,
                };
                self.validations += 1;
                if !self.valid(&key, seq, unsure)? {
                    self.stale += 1;
                    continue;
                }
                let value = self.keep(value);
                self.acc.push(key, seq, value, Some((f.number, h.offset)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, IndexSpec, Options, QueryOptions};

    fn zones(ty: KeyType) -> (Zone, Zone) {
        let v = |x: f64| match ty {
            KeyType::I64 => IndexValue::I64(x as i64),
            KeyType::F64 => IndexValue::F64(x),
            KeyType::String => IndexValue::Str(format!("w{x}")),
            KeyType::Point => IndexValue::Point([x, -x]),
            KeyType::Rect => IndexValue::Rect([x, 0.0, x + 2.0, 3.0]),
        };
        let z = |a: f64, b: f64| {
            let (a, b) = (v(a), v(b));
            let mut z = Zone::of(&a, &a.encode());
            z.widen(&Zone::of(&b, &b.encode()));
            z
        };
        (z(1.0, 5.0), z(3.0, 9.0))
    }

    #[test]
    fn codec_roundtrip_and_rejects_damage() {
        for ty in KeyType::ALL {
            let (own, widen) = zones(ty);
            let marks: Vec<Mark> = vec![
                (b"a".to_vec(), 9),
                (b"a".to_vec(), 12),
                (b"bb".to_vec(), 300),
            ];
            for (values, o, w, m) in [
                (7, Some(&own), Some(&widen), &marks[..0]),
                (7, Some(&own), None, &marks[..]),
                (0, None, Some(&widen), &marks[..1]),
                (0, None, None, &marks[..0]),
                (0, None, None, &marks[..]),
            ] {
                let bytes = encode(ty, values, o, w, m);
                let t = decode(&bytes, ty, "test").unwrap();
                assert_eq!(t.values, values);
                assert_eq!(t.own.as_ref(), o);
                assert_eq!(t.widen.as_ref(), w);
                assert_eq!(t.marks, m);
                assert_eq!(t.filter, union(o, w));
                assert_eq!(t.disk_bytes, bytes.len() as u64);
                for cut in 0..bytes.len() {
                    assert!(decode(&bytes[..cut], ty, "test")
                        .unwrap_err()
                        .is_corruption());
                }
                let mut extra = bytes.clone();
                extra.push(0);
                assert!(decode(&extra, ty, "test").is_err());
                for at in 0..bytes.len() {
                    for x in [0x01, 0x40, 0x80, 0xff] {
                        let mut b = bytes.clone();
                        b[at] ^= x;
                        let _ = decode(&b, ty, "test");
                    }
                }
            }
            let bytes = encode(ty, 7, Some(&own), None, &[]);
            // Header: version, type, flags, value count.
            assert_eq!(&bytes[..4], &[2, key_type_byte(ty), FLAG_OWN, 7]);
            for (at, v) in [
                (0, 0u8),
                (0, 3),
                (2, 8),
                (2, FLAG_WIDEN),
                (2, FLAG_MARKS),
                (3, 0),
            ] {
                let mut b = bytes.clone();
                b[at] = v;
                assert!(decode(&b, ty, "test").is_err(), "{ty:?} byte {at} = {v}");
            }
            // Marks: out of key order, or by write 0 (no version is older).
            for bad in [
                vec![(b"b".to_vec(), 2), (b"a".to_vec(), 2)],
                vec![(b"a".to_vec(), 0)],
            ] {
                assert!(decode(&encode(ty, 0, None, None, &bad), ty, "test").is_err());
            }
            // Version 1 blocks: a mark also names the version it deleted,
            // which must be older than the write; read as the write alone.
            let v1 = |marks: &[(&[u8], u64, u64)]| {
                let mut b = vec![1, key_type_byte(ty), FLAG_MARKS, 0];
                put_varint64(&mut b, marks.len() as u64);
                for (k, old, new) in marks {
                    put_length_prefixed(&mut b, k);
                    put_varint64(&mut b, *old);
                    put_varint64(&mut b, *new);
                }
                b
            };
            let t = decode(
                &v1(&[(b"a", 3, 9), (b"a", 9, 12), (b"bb", 1, 300)]),
                ty,
                "v1",
            )
            .unwrap();
            assert_eq!(t.marks, marks);
            for bad in [&[(&b"a"[..], 5, 5)][..], &[(b"b", 1, 2), (b"a", 1, 2)]] {
                assert!(decode(&v1(bad), ty, "v1").unwrap_err().is_corruption());
            }
            let other = if ty == KeyType::I64 {
                KeyType::F64
            } else {
                KeyType::I64
            };
            assert!(decode(&bytes, other, "test").is_err());
        }
    }

    #[test]
    fn values_blocks_roundtrip_and_reject_damage() {
        for ty in KeyType::ALL {
            let (own, _) = zones(ty);
            let pairs = match own {
                Zone::Scalar(lo, hi) => vec![(3, lo), (1 << 40, hi)],
                // A spatial zone is a rectangle, not two values.
                Zone::Rect(_) => {
                    let v = |x: f64| match ty {
                        KeyType::Rect => IndexValue::Rect([x, -x, x + 1.0, 1.0 - x]),
                        _ => IndexValue::Point([x, -x]),
                    };
                    vec![(3, v(1.5).encode()), (300, v(-2.0).encode())]
                }
            };
            check_values(ty, &pairs);
        }
    }

    fn check_values(ty: KeyType, pairs: &[(SeqNo, Vec<u8>)]) {
        let mut entries = Vec::new();
        for (s, v) in pairs {
            put_varint64(&mut entries, *s);
            put_length_prefixed(&mut entries, v);
        }
        let bytes = encode_values(ty, pairs.len() as u64, &entries);
        let mut got = Vec::new();
        assert!(decode_values(&bytes, ty, "test", |s, v| {
            got.push((s, v.to_vec()));
            true
        })
        .unwrap());
        assert_eq!(got, pairs);
        // Stopped by the callback after the first.
        let mut n = 0;
        assert!(!decode_values(&bytes, ty, "test", |_, _| {
            n += 1;
            false
        })
        .unwrap());
        assert_eq!(n, 1);
        for cut in 0..bytes.len() {
            assert!(decode_values(&bytes[..cut], ty, "test", |_, _| true)
                .unwrap_err()
                .is_corruption());
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_values(&extra, ty, "test", |_, _| true).is_err());
        let mut b = bytes.clone();
        b[0] = 2;
        assert!(decode_values(&b, ty, "test", |_, _| true).is_err());
        let other = if ty == KeyType::I64 {
            KeyType::String
        } else {
            KeyType::I64
        };
        assert!(decode_values(&bytes, other, "test", |_, _| true).is_err());
        // A value that is not an encoding of the type (a numeric value of
        // the wrong width).
        if let Some(w) = ty.encoded_width() {
            let mut entries = Vec::new();
            put_varint64(&mut entries, 1);
            put_length_prefixed(&mut entries, &vec![0; w - 1]);
            let bytes = encode_values(ty, 1, &entries);
            assert!(decode_values(&bytes, ty, "test", |_, _| true).is_err());
        }
    }

    /// Sorting by the bytes after the shared prefix agrees with sorting
    /// by whole keys (stable), for keys with zero bytes, prefixes of each
    /// other and differences past the first eight bytes after the prefix.
    #[test]
    fn mark_logs_sort_like_whole_keys() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let prefix: &[u8] = if round % 2 == 0 { b"1000000" } else { b"" };
            let mut log = MarkLog::default();
            let mut want: Vec<(Vec<u8>, SeqNo)> = Vec::new();
            for i in 0..(next() % 40) {
                let mut k = prefix.to_vec();
                for _ in 0..(next() % 12) {
                    k.push([0u8, 1, b'a'][(next() % 3) as usize]);
                }
                log.push(&k, i + 1);
                want.push((k, i + 1));
            }
            want.sort_by(|a, b| a.0.cmp(&b.0));
            let got: Vec<(Vec<u8>, SeqNo)> =
                log.sorted().iter().map(|(k, n)| (k.to_vec(), n)).collect();
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn mark_logs_sort_walk_and_filter_by_key() {
        let mut log = MarkLog::default();
        for (k, new) in [("b", 5), ("a", 6), ("", 10), ("b", 7), ("c", 8)] {
            log.push(k.as_bytes(), new);
        }
        log.push(b"a", 9);
        let owned = |l: &MarkLog| -> Vec<(Vec<u8>, SeqNo)> {
            l.iter().map(|(k, n)| (k.to_vec(), n)).collect()
        };
        let pairs = |p: &[(&str, SeqNo)]| -> Vec<(Vec<u8>, SeqNo)> {
            p.iter().map(|(k, n)| (k.as_bytes().to_vec(), *n)).collect()
        };
        let s = log.sorted();
        let want = pairs(&[("", 10), ("a", 6), ("a", 9), ("b", 5), ("b", 7), ("c", 8)]);
        assert_eq!(owned(&s), want);
        // Keys asked in ascending order, some without marks.
        let mut pos = 0;
        let mut walk = |key: &[u8]| {
            let mut got = Vec::new();
            s.take_key(&mut pos, key, |n| got.push(n));
            got
        };
        assert_eq!(walk(b"a"), [6, 9]);
        assert!(walk(b"aa").is_empty());
        assert_eq!(walk(b"c"), [8]);
        assert!(walk(b"d").is_empty());
        // Where a table starting at a key begins its walk.
        assert_eq!(s.seek(b""), 0);
        assert_eq!(s.seek(b"a"), 1);
        assert_eq!(s.seek(b"aa"), 3);
        assert_eq!(s.seek(b"b"), 3);
        assert_eq!(s.seek(b"c"), 5);
        assert_eq!(s.seek(b"z"), 6);
        let late = log.filtered(|new| new > 6);
        assert_eq!(
            owned(&late),
            pairs(&[("", 10), ("b", 7), ("c", 8), ("a", 9)])
        );
        // What a flush takes: the marks from its floor on, by key.
        let want = pairs(&[("", 10), ("a", 9), ("b", 7), ("c", 8)]);
        assert_eq!(owned(&log.sorted_where(|new| new > 6)), want);
        assert_eq!(log.get(6), None);
    }

    #[test]
    fn lookups_needed_by_several_strategies_join() {
        use NeedsCurrent::*;
        let all = [No, Deletes, Exists, All];
        for a in all {
            assert_eq!(a.join(No), a);
            assert_eq!(a.join(All), All);
            for b in all {
                assert_eq!(a.join(b), b.join(a));
            }
        }
        // Records of deleted keys and sequence numbers of every key: only
        // every record has both.
        assert_eq!(Deletes.join(Exists), All);
        assert_eq!(Exists.join(Exists), Exists);
    }

    #[test]
    fn params() {
        let p = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(parse_params(&[]).unwrap(), Maintain::MutableBitmap);
        assert_eq!(
            parse_params(&p("maintain", "eager")).unwrap(),
            Maintain::Eager
        );
        assert_eq!(
            parse_params(&p("maintain", "validation")).unwrap(),
            Maintain::Validation
        );
        assert_eq!(
            parse_params(&p("maintain", "mutable-bitmap")).unwrap(),
            Maintain::MutableBitmap
        );
        assert!(parse_params(&p("maintain", "lazy")).is_err());
        assert!(parse_params(&p("bits_per_key", "1")).is_err());
    }

    fn doc(t: i64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({ "t": t, "pad": "x".repeat(30) })).unwrap()
    }

    fn open(dir: &std::path::Path, maintain: &str) -> Db {
        let opts = Options::small_for_tests()
            .background_work(false)
            .l0_compaction_trigger(20)
            .l0_slowdown_trigger(40)
            .l0_stop_trigger(60);
        let db = Db::open(dir, opts).unwrap();
        db.create_index(
            IndexSpec::field("by_t", "t", KeyType::I64)
                .strategy("filter")
                .param("maintain", maintain),
        )
        .unwrap();
        db
    }

    fn q(db: &Db, lo: i64, hi: i64) -> (Vec<Vec<u8>>, QueryProfile) {
        let (hits, p) = db
            .query_profiled(
                "by_t",
                &Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi)),
                QueryOptions::default().keys_only(true),
            )
            .unwrap();
        let mut keys: Vec<Vec<u8>> = hits.into_iter().map(|h| h.key).collect();
        keys.sort();
        (keys, p)
    }

    /// Time-ordered values in separate tables: a range query reads only the
    /// tables whose filter intersects it.
    #[test]
    fn filters_skip_tables() {
        for maintain in ["eager", "validation", "mutable-bitmap"] {
            let dir = tempfile::tempdir().unwrap();
            let db = open(dir.path(), maintain);
            for batch in 0..4i64 {
                for i in 0..20i64 {
                    let t = batch * 100 + i;
                    db.put(format!("k{t:04}").as_bytes(), &doc(t)).unwrap();
                }
                db.flush().unwrap();
            }
            let (keys, p) = q(&db, 205, 210);
            assert_eq!(keys.len(), 6, "{maintain}");
            assert_eq!(p.components_scanned, 1, "{maintain}: {p:?}");
            assert_eq!(p.components_skipped, 3, "{maintain}: {p:?}");
            let (keys, p) = q(&db, 1000, 2000);
            assert!(keys.is_empty());
            assert_eq!((p.components_scanned, p.data_blocks_read), (0, 0), "{p:?}");
        }
    }

    /// An update moves a key's attribute out of an old table's range: the
    /// new table's filter does not intersect the old value, and the old
    /// version must not be returned. Eager widens the new table with the
    /// old value (so it is scanned); validation looks the key up.
    #[test]
    fn updates_and_deletes_reconcile() {
        for maintain in ["eager", "validation", "mutable-bitmap"] {
            let dir = tempfile::tempdir().unwrap();
            let db = open(dir.path(), maintain);
            for i in 0..20i64 {
                db.put(format!("k{i:04}").as_bytes(), &doc(i)).unwrap();
            }
            db.flush().unwrap();
            // Keys 0..5 move to 1000+, 5..8 are deleted, in a newer table.
            for i in 0..5i64 {
                db.put(format!("k{i:04}").as_bytes(), &doc(1000 + i))
                    .unwrap();
            }
            for i in 5..8i64 {
                db.delete(format!("k{i:04}").as_bytes()).unwrap();
            }
            db.flush().unwrap();
            let (keys, p) = q(&db, 0, 19);
            assert_eq!(keys.len(), 12, "{maintain}: {keys:?}");
            assert!(keys.iter().all(|k| k.as_slice() >= b"k0008".as_slice()));
            let info = db.indexes();
            let st = &info[0].stats;
            if maintain == "eager" {
                // The newer table holds the old values in its filter.
                assert_eq!(p.components_scanned, 2, "{p:?}");
                assert_eq!(st.exact_checks, 0, "no lookups: {st:?}");
            } else if maintain == "mutable-bitmap" {
                // The old versions are marked: one table, no lookups.
                assert_eq!(p.components_scanned, 1, "{p:?}");
                assert_eq!(st.exact_checks, 0, "no lookups: {st:?}");
            } else {
                assert_eq!(p.components_scanned, 1, "{p:?}");
                assert!(st.exact_checks >= 20, "{st:?}");
            }
            let (keys, _) = q(&db, 1000, 1010);
            assert_eq!(keys.len(), 5);
            // The same after a reopen and a compaction.
            drop(db);
            let db = Db::open(
                dir.path(),
                Options::small_for_tests().background_work(false),
            )
            .unwrap();
            assert_eq!(q(&db, 0, 19).0.len(), 12);
            db.compact_range(None, None).unwrap();
            assert_eq!(q(&db, 0, 19).0.len(), 12);
            assert_eq!(q(&db, 1000, 1010).0.len(), 5);
        }
    }
}
