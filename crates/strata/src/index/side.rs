//! The memtable side structure of the strategies whose writes reach them
//! through tables ([`super::strategy::WritePath::Tables`]: NEXT, embedded):
//! each index's attribute values of the memtable's entries, so that index
//! queries never parse the memtable.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::MemSide;

use super::def::{fields_of, read_doc, Doc, IndexMeta};
use super::fields::Fields;
use super::preread::PreReads;
use super::stored::{StoredBuilder, StoredValues};
use super::value::{IndexValue, Predicate};
use super::{read, write};

/// A memtable side entry: encoded value, key and sequence number, ordered
/// by (value, key, seq). Value and key share one allocation; `head` holds
/// the value's first 8 bytes (zero-padded, big-endian), so most comparisons
/// (the binary-counter merges of [`SortedRuns`]) read no heap memory: when
/// two heads differ, their order is the values' byte order (a zero pad
/// sorts like the end of a shorter value, which is a prefix of the other).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SideEntry {
    head: u64,
    /// Length of the value at the start of `bytes`.
    vlen: usize,
    /// `value ‖ key`.
    bytes: Box<[u8]>,
    seq: SeqNo,
}

/// The first 8 bytes of `v`, zero-padded, as a big-endian number.
fn head_of(v: &[u8]) -> u64 {
    let mut h = [0u8; 8];
    for (d, s) in h.iter_mut().zip(v) {
        *d = *s;
    }
    u64::from_be_bytes(h)
}

impl SideEntry {
    /// The entry of `value` (encoded) for `key` at `seq`.
    fn of(value: &IndexValue, key: &[u8], seq: SeqNo) -> SideEntry {
        Self::build(value.encoded_len(), |b| value.encode_into(b), key, seq)
    }

    /// The entry of the encoded value `value` for `key` at `seq`.
    #[cfg(test)]
    fn new(value: &[u8], key: &[u8], seq: SeqNo) -> SideEntry {
        Self::build(value.len(), |b| b.extend_from_slice(value), key, seq)
    }

    /// The entry whose value `value` appends to an empty buffer (`vlen`
    /// bytes, expected: the allocation is then exact, never resized).
    fn build(vlen: usize, value: impl FnOnce(&mut Vec<u8>), key: &[u8], seq: SeqNo) -> SideEntry {
        let mut bytes = Vec::with_capacity(vlen + key.len());
        value(&mut bytes);
        let vlen = bytes.len();
        let head = head_of(bytes.get(..vlen).unwrap_or_default());
        bytes.extend_from_slice(key);
        SideEntry {
            head,
            vlen,
            bytes: bytes.into_boxed_slice(),
            seq,
        }
    }

    fn value(&self) -> &[u8] {
        self.bytes.get(..self.vlen).unwrap_or_default()
    }

    fn key(&self) -> &[u8] {
        self.bytes.get(self.vlen..).unwrap_or_default()
    }

    /// This entry's value against `v` (whose head is `head`).
    fn cmp_value(&self, head: u64, v: &[u8]) -> std::cmp::Ordering {
        self.head.cmp(&head).then_with(|| self.value().cmp(v))
    }
}

impl Ord for SideEntry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.cmp_value(o.head, o.value())
            .then_with(|| self.key().cmp(o.key()))
            .then(self.seq.cmp(&o.seq))
    }
}

impl PartialOrd for SideEntry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// One index's values, inserted by the write group's leader while readers
/// search. (One per index and memtable, behind an `Arc`: the variants'
/// size difference does not matter.)
#[allow(clippy::large_enum_variant)]
enum SideIndex {
    /// Ordered by (encoded value, key, seq).
    Scalar(SortedRuns),
    /// (key, seq, value) in insertion order; queries test every entry,
    /// so an insert is an append (no ordering work on the write path).
    Spatial(RwLock<Vec<SpatialEntry>>),
}

/// A spatial side entry: key, sequence number, value.
struct SpatialEntry {
    key: Box<[u8]>,
    seq: SeqNo,
    value: IndexValue,
}

/// Entries in sorted runs plus an unsorted tail: an insert appends (no
/// search, no per-entry ordering work on the write path, unlike a skiplist
/// of random values whose inserts miss the cache at every level); a full
/// tail is sorted into a run, and runs of similar size are merged (moving
/// entries, under the write lock), so a query binary-searches O(log n)
/// runs and scans at most [`TAIL_MAX`] entries. Readers hold the read lock
/// while they search.
#[derive(Default)]
struct SortedRuns {
    state: RwLock<Runs>,
}

#[derive(Default)]
struct Runs {
    /// Each sorted; each less than half the size of the one before.
    runs: Vec<Vec<SideEntry>>,
    /// Unsorted, fewer than [`TAIL_MAX`].
    tail: Vec<SideEntry>,
}

/// Entries appended before the tail is sorted into a run.
const TAIL_MAX: usize = 512;

impl SortedRuns {
    fn insert(&self, e: SideEntry) {
        let mut st = write(&self.state);
        st.tail.push(e);
        if st.tail.len() < TAIL_MAX {
            return;
        }
        let mut run = std::mem::take(&mut st.tail);
        // By head (integers), then each group of equal heads fully: the
        // order of `Ord`, which compares heads first.
        run.sort_unstable_by_key(|e| e.head);
        for group in run.chunk_by_mut(|a, b| a.head == b.head) {
            if group.len() > 1 {
                group.sort_unstable();
            }
        }
        // Merge with the newest runs while they are not twice as large
        // (binary-counter merging: each entry is moved O(log n) times).
        while let Some(last) = st.runs.last() {
            if last.len() > run.len() * 2 {
                break;
            }
            let Some(last) = st.runs.pop() else { break };
            run = merge_sorted(last, run);
        }
        st.runs.push(run);
    }

    /// (key, seq) of the entries with `lo <= value <= hi`, in no
    /// particular order.
    fn range(&self, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, SeqNo)> {
        use std::cmp::Ordering::{Greater, Less};
        let st = read(&self.state);
        let (lo_head, hi_head) = (head_of(lo), head_of(hi));
        let mut out = Vec::new();
        for run in &st.runs {
            let start = run.partition_point(|e| e.cmp_value(lo_head, lo) == Less);
            for e in run.get(start..).unwrap_or_default() {
                if e.cmp_value(hi_head, hi) == Greater {
                    break;
                }
                out.push((e.key().to_vec(), e.seq));
            }
        }
        for e in &st.tail {
            if e.cmp_value(lo_head, lo) != Less && e.cmp_value(hi_head, hi) != Greater {
                out.push((e.key().to_vec(), e.seq));
            }
        }
        out
    }

    /// The smallest and largest encoded value (`None` when empty).
    fn bounds(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let st = read(&self.state);
        let mut out: Option<(&[u8], &[u8])> = None;
        let ends = st
            .runs
            .iter()
            .flat_map(|r| r.first().into_iter().chain(r.last()))
            .chain(st.tail.iter());
        for e in ends {
            let v = e.value();
            out = Some(match out {
                None => (v, v),
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
            });
        }
        out.map(|(lo, hi)| (lo.to_vec(), hi.to_vec()))
    }

    fn for_each(&self, mut f: impl FnMut(&SideEntry)) {
        let st = read(&self.state);
        st.runs.iter().flat_map(|r| r.iter()).for_each(&mut f);
        st.tail.iter().for_each(f);
    }
}

/// The merge of two sorted vectors (entries moved, not copied).
fn merge_sorted(a: Vec<SideEntry>, b: Vec<SideEntry>) -> Vec<SideEntry> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (i.peek(), j.peek()) {
            (Some(x), Some(y)) => x <= y,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_a { i.next() } else { j.next() };
        out.extend(next);
    }
    out
}

/// The indexes attached to a side structure, with their JSON paths.
struct Attached {
    indexes: Vec<(Arc<IndexMeta>, Arc<SideIndex>)>,
    /// The paths of `indexes`: each inserted record is read once.
    fields: Fields,
}

/// The memtable side structure: each index's values of the memtable's
/// entries (every version; validation picks the live ones). Indexes can be
/// attached while the memtable is active (see `IndexManager::attach`).
///
/// Its bytes are reported apart from the memtable's
/// ([`MemSide::approximate_bytes`]): they do not count toward the memtable
/// budget, so an index does not make flushes more frequent.
pub(crate) struct IndexSide {
    /// Replaced whole on attach, so that a write holds the read lock only
    /// while cloning the `Arc`.
    attached: RwLock<Arc<Attached>>,
    bytes: AtomicUsize,
    /// The smallest sequence number added to the memtable (`u64::MAX`
    /// while empty).
    min_seq: AtomicU64,
    /// Readings made by a loader before the write (see `index::preread`).
    pre: Arc<PreReads>,
}

impl IndexSide {
    pub fn new(pre: Arc<PreReads>) -> IndexSide {
        IndexSide {
            pre,
            attached: RwLock::new(Arc::new(Attached {
                indexes: Vec::new(),
                fields: Fields::new([]),
            })),
            bytes: AtomicUsize::new(0),
            min_seq: AtomicU64::new(u64::MAX),
        }
    }

    /// The smallest sequence number of the memtable's entries (`None` if
    /// empty): with the memtable's largest, the range of its writes.
    pub fn min_seq(&self) -> Option<SeqNo> {
        Some(self.min_seq.load(Relaxed)).filter(|s| *s != u64::MAX)
    }

    fn current(&self) -> Arc<Attached> {
        read(&self.attached).clone()
    }

    pub fn attach(&self, def: Arc<IndexMeta>) {
        let mut slot = write(&self.attached);
        if slot.indexes.iter().any(|(d, _)| d.id == def.id) {
            return;
        }
        // The skiplists are shared with the `Attached` being replaced, so
        // a writer still holding the old one inserts where queries look.
        let mut indexes = slot.indexes.clone();
        let side = if def.spec.key_type.is_spatial() {
            SideIndex::Spatial(RwLock::new(Vec::new()))
        } else {
            SideIndex::Scalar(SortedRuns::default())
        };
        indexes.push((def, Arc::new(side)));
        let fields = fields_of(indexes.iter().map(|(d, _)| &**d));
        *slot = Arc::new(Attached { indexes, fields });
    }

    /// Index `id`'s values of this memtable's entries by sequence number,
    /// encoded, for the flush of the memtable (`None` if `id` is not
    /// attached): every version in the memtable has its own sequence
    /// number, so the sequence number alone names the entry (no key
    /// comparison, no sort by key). Entries absent were not indexed here
    /// (no attribute, or written before `id` was attached): the flush
    /// reads them itself.
    pub fn values_by_seq(&self, id: u32) -> Option<StoredValues> {
        let att = self.current();
        let (meta, side) = att.indexes.iter().find(|(d, _)| d.id == id)?;
        // No budget: the values are already in memory, in the side index.
        let mut out = StoredBuilder::new(meta.spec.key_type, usize::MAX);
        match &**side {
            SideIndex::Scalar(s) => {
                let mut full = false;
                s.for_each(|e| {
                    // `push` refuses only beyond 2^32 values; the rest
                    // are then read from their records.
                    full = full || !out.push(e.seq, e.value());
                })
            }
            SideIndex::Spatial(s) => {
                let mut enc = Vec::with_capacity(32);
                for e in read(s).iter() {
                    enc.clear();
                    e.value.encode_into(&mut enc);
                    if !out.push(e.seq, &enc) {
                        break;
                    }
                }
            }
        }
        Some(out.finish())
    }

    /// The range of index `id`'s values in this memtable (every version):
    /// the memtable's range filter, computed when asked (`filter`).
    /// `None` if nothing is indexed here.
    pub fn bounds(&self, id: u32) -> Option<SideBounds> {
        let att = self.current();
        let (_, side) = att.indexes.iter().find(|(d, _)| d.id == id)?;
        match &**side {
            SideIndex::Scalar(s) => s.bounds().map(|(lo, hi)| SideBounds::Scalar(lo, hi)),
            SideIndex::Spatial(s) => {
                let mut out: Option<[f64; 4]> = None;
                for e in read(s).iter() {
                    let Some(m) = e.value.mbr() else { continue };
                    out = Some(match out {
                        None => m,
                        Some(r) => [
                            r[0].min(m[0]),
                            r[1].min(m[1]),
                            r[2].max(m[2]),
                            r[3].max(m[3]),
                        ],
                    });
                }
                out.map(SideBounds::Rect)
            }
        }
    }

    pub fn query(&self, id: u32, pred: &Predicate) -> Vec<(Vec<u8>, SeqNo)> {
        let att = self.current();
        let Some((_, side)) = att.indexes.iter().find(|(d, _)| d.id == id) else {
            return Vec::new();
        };
        match &**side {
            SideIndex::Scalar(s) => {
                let Some((lo, hi)) = pred.scalar_bounds() else {
                    return Vec::new();
                };
                s.range(&lo, &hi)
            }
            SideIndex::Spatial(s) => read(s)
                .iter()
                .filter(|e| pred.matches(&e.value))
                .map(|e| (e.key.to_vec(), e.seq))
                .collect(),
        }
    }
}

impl MemSide for IndexSide {
    fn on_add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        self.min_seq.fetch_min(seq, Relaxed);
        if kind != ValueKind::Value {
            return;
        }
        let att = self.current();
        if att.indexes.is_empty() {
            return;
        }
        // The loader's reading of these bytes if it registered one, else
        // one reading for every attached index.
        let pre = self.pre.take(value);
        let own;
        let doc = match &pre {
            Some((fields, read)) => Some(Doc { fields, read }),
            None => {
                own = read_doc(value, &att.fields);
                Doc::of(&att.fields, &own)
            }
        };
        for (d, side) in att.indexes.iter() {
            match d.extract(value, doc) {
                Ok(v) => {
                    d.counters.indexed.fetch_add(1, Relaxed);
                    self.bytes.fetch_add(user_key.len() + 64, Relaxed);
                    match &**side {
                        SideIndex::Scalar(s) => {
                            s.insert(SideEntry::of(&v, user_key, seq));
                        }
                        SideIndex::Spatial(s) => {
                            write(s).push(SpatialEntry {
                                key: user_key.into(),
                                seq,
                                value: v,
                            });
                        }
                    }
                }
                Err(skip) => d.count_skip(skip),
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn approximate_bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }
}

/// The range of one index's values in a memtable ([`IndexSide::bounds`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SideBounds {
    /// Encoded `[min, max]` of scalar values.
    Scalar(Vec<u8>, Vec<u8>),
    /// Bounding rectangle of points or rectangles.
    Rect([f64; 4]),
}

/// The range of index `id`'s values in `mem` (see [`IndexSide::bounds`]).
pub(crate) fn bounds(mem: &strata_lsm::memtable::MemTable, id: u32) -> Option<SideBounds> {
    mem.side()
        .and_then(|s| s.as_any().downcast_ref::<IndexSide>())
        .and_then(|s| s.bounds(id))
}

/// The entries of index `id` in `mem`'s side structure matching `pred`:
/// (key, seq) of every version, newest or not.
pub(crate) fn candidates(
    mem: &strata_lsm::memtable::MemTable,
    id: u32,
    pred: &Predicate,
) -> Vec<(Vec<u8>, SeqNo)> {
    mem.side()
        .and_then(|s| s.as_any().downcast_ref::<IndexSide>())
        .map_or_else(Vec::new, |s| s.query(id, pred))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_runs_answer_like_an_ordered_set() {
        let runs = SortedRuns::default();
        let mut model = std::collections::BTreeSet::new();
        let mut x: u64 = 12345;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000u64 {
            // Values of 1 to 9 bytes: prefixes of each other and equal
            // heads with different tails are compared as bytes.
            let n = 1 + (next() % 9) as usize;
            let v = (next() % 3000).to_be_bytes();
            let v: Vec<u8> = v.iter().chain(&[0u8, 7]).skip(10 - n).copied().collect();
            let k = format!("k{}", next() % 500).into_bytes();
            runs.insert(SideEntry::new(&v, &k, i));
            model.insert((v, k, i));
            if i % 997 == 0 {
                let st = read(&runs.state);
                for w in st.runs.windows(2) {
                    assert!(w[1].len() * 2 < w[0].len(), "run sizes");
                }
                assert!(st.runs.iter().all(|r| r.is_sorted()));
                assert!(st.runs.iter().all(|r| r.windows(2).all(|w| w[0] < w[1])));
                assert!(st.tail.len() < TAIL_MAX);
            }
            if i % 101 == 0 {
                let a = next() % 3000;
                let b = a + next() % 200;
                let (lo, hi) = (a.to_be_bytes().to_vec(), b.to_be_bytes().to_vec());
                let mut got = runs.range(&lo, &hi);
                got.sort();
                let mut want: Vec<(Vec<u8>, SeqNo)> = model
                    .iter()
                    .filter(|e| e.0 >= lo && e.0 <= hi)
                    .map(|e| (e.1.clone(), e.2))
                    .collect();
                want.sort();
                assert_eq!(got, want, "range {a}..={b} after {i}");
            }
        }
        let mut all = Vec::new();
        runs.for_each(|e| all.push((e.value().to_vec(), e.key().to_vec(), e.seq)));
        all.sort();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }
}
