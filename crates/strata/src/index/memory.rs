//! Strategy `memory`: the whole secondary index in RAM, maintained
//! synchronously by every write, rebuilt by a full scan at open.
//!
//! This is the "Eager" baseline of the LevelDB++ comparative study (Qader et
//! al., SIGMOD 2018, the MongoDB-like stand-alone index kept up to date on
//! every write) in the in-memory form NEXT (SIGMOD 2025) compares against in
//! §6: an ordered set of `(encoded value, primary key)` for scalars and an
//! R-tree of rectangles for points and rectangles, each entry carrying the
//! sequence number of the record version it describes.
//!
//! Maintenance (`DbInner::write`): the write-group leader reads each key's
//! current record (a point lookup of the latest version, the batch's own
//! earlier operations taken into account), removes the old attribute's entry
//! and inserts the new one, all before the batch enters the memtable and
//! under the manager's memory guard, which it releases only after publishing
//! the batch's last sequence number. A query takes the guard for reading,
//! pins the latest sequence number as its snapshot and collects its
//! candidates, so the structure and the snapshot agree exactly: every
//! candidate is live at the snapshot and no validation is needed. The
//! records are then fetched with one batched `multi_get` at that snapshot.
//!
//! Invariant (while the index is ready, outside the guard's write side): for
//! every key whose newest version at the published last sequence is a value
//! with an indexable attribute `a`, the structure holds exactly one entry
//! `(a, key, seq of that version)`, and it holds no other entry.
//!
//! Nothing is persisted: the structure is rebuilt at every open (and when
//! the index is created) by one scan of the database.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering::Relaxed;

use rstar::primitives::{GeomWithData, Rectangle};
use rstar::{RTree, RTreeObject, AABB};

use strata_lsm::error::{Error, Result};
use strata_lsm::key::SeqNo;

use super::def::Attrs;
use super::strategy::{
    self, BuildMethod, Current, IndexStrategy, NeedsCurrent, OpenCx, QueryCx, StrategyKind,
    VersionSlot, WritePath,
};
use super::value::{IndexValue, KeyType, Predicate};
use super::{read, write, Hit, Hits, IndexStats, OpRef, QueryProfile};

/// One spatial entry: the attribute's rectangle (a point is a degenerate
/// rectangle) with (primary key, sequence number).
type SpatialEntry = GeomWithData<Rectangle<[f64; 2]>, (Vec<u8>, SeqNo)>;

/// Rough per-entry overhead of the containers (tree nodes, `Vec` headers),
/// for [`MemoryIndex::memory_bytes`].
const ENTRY_OVERHEAD: usize = 64;

enum Tree {
    /// `(encoded value, primary key)` → sequence number.
    Scalar(BTreeMap<(Vec<u8>, Vec<u8>), SeqNo>),
    Spatial(RTree<SpatialEntry>),
}

/// One index's in-RAM structure. Callers serialize writers (the write-group
/// leader, or a rebuild while writes are paused); the inner lock only makes
/// the sharing with readers sound.
struct MemoryIndex {
    key_type: KeyType,
    inner: std::sync::RwLock<Inner>,
}

struct Inner {
    tree: Tree,
    entries: usize,
    bytes: usize,
}

fn entry_bytes(value_len: usize, key_len: usize) -> usize {
    value_len + key_len + std::mem::size_of::<SeqNo>() + ENTRY_OVERHEAD
}

fn rect_of(v: &IndexValue) -> Option<Rectangle<[f64; 2]>> {
    let r = v.mbr()?;
    Some(Rectangle::from_corners([r[0], r[1]], [r[2], r[3]]))
}

impl Inner {
    fn new(key_type: KeyType) -> Inner {
        Inner {
            tree: if key_type.is_spatial() {
                Tree::Spatial(RTree::new())
            } else {
                Tree::Scalar(BTreeMap::new())
            },
            entries: 0,
            bytes: 0,
        }
    }

    /// Adds the entry `(v, key, seq)`. A value of the other family (scalar
    /// vs spatial) is ignored: extraction guarantees the index's key type.
    fn insert(&mut self, v: &IndexValue, key: &[u8], seq: SeqNo) {
        match &mut self.tree {
            Tree::Scalar(m) => {
                if v.key_type().is_spatial() {
                    return;
                }
                let enc = v.encode();
                let n = entry_bytes(enc.len(), key.len());
                if m.insert((enc, key.to_vec()), seq).is_none() {
                    self.entries += 1;
                    self.bytes += n;
                }
            }
            Tree::Spatial(t) => {
                let Some(r) = rect_of(v) else { return };
                t.insert(GeomWithData::new(r, (key.to_vec(), seq)));
                self.entries += 1;
                self.bytes += entry_bytes(32, key.len());
            }
        }
    }

    /// Removes the entry of `key` with attribute `v` (whatever its sequence
    /// number); returns whether there was one.
    fn remove(&mut self, v: &IndexValue, key: &[u8]) -> bool {
        match &mut self.tree {
            Tree::Scalar(m) => {
                if v.key_type().is_spatial() {
                    return false;
                }
                let enc = v.encode();
                let n = entry_bytes(enc.len(), key.len());
                if m.remove(&(enc, key.to_vec())).is_some() {
                    self.entries -= 1;
                    self.bytes = self.bytes.saturating_sub(n);
                    return true;
                }
                false
            }
            Tree::Spatial(t) => {
                let Some(r) = rect_of(v) else { return false };
                let found = t
                    .locate_in_envelope(&r.envelope())
                    .find(|e| e.geom() == &r && e.data.0 == key)
                    .cloned();
                match found.and_then(|e| t.remove(&e)) {
                    Some(_) => {
                        self.entries -= 1;
                        self.bytes = self.bytes.saturating_sub(entry_bytes(32, key.len()));
                        true
                    }
                    None => false,
                }
            }
        }
    }
}

/// A change to one index's structure.
struct Editor<'a> {
    inner: std::sync::RwLockWriteGuard<'a, Inner>,
}

impl Editor<'_> {
    pub fn insert(&mut self, v: &IndexValue, key: &[u8], seq: SeqNo) {
        self.inner.insert(v, key, seq);
    }

    pub fn remove(&mut self, v: &IndexValue, key: &[u8]) -> bool {
        self.inner.remove(v, key)
    }
}

impl MemoryIndex {
    pub fn new(key_type: KeyType) -> MemoryIndex {
        MemoryIndex {
            key_type,
            inner: std::sync::RwLock::new(Inner::new(key_type)),
        }
    }

    /// Write access for a batch of changes (one lock for the batch).
    pub fn edit(&self) -> Editor<'_> {
        Editor {
            inner: write(&self.inner),
        }
    }

    /// Empties the structure (before a rebuild).
    pub fn clear(&self) {
        *self.edit().inner = Inner::new(self.key_type);
    }

    /// `(primary key, seq)` of every entry whose attribute satisfies `pred`,
    /// in no particular order.
    pub fn query(&self, pred: &Predicate) -> Vec<(Vec<u8>, SeqNo)> {
        let inner = read(&self.inner);
        match &inner.tree {
            Tree::Scalar(m) => {
                let Some((lo, hi)) = pred.scalar_bounds() else {
                    return Vec::new();
                };
                m.range((lo, Vec::new())..)
                    .take_while(|((v, _), _)| *v <= hi)
                    .map(|((_, k), s)| (k.clone(), *s))
                    .collect()
            }
            Tree::Spatial(t) => {
                let Some(w) = pred.window() else {
                    return Vec::new();
                };
                let aabb = AABB::from_corners([w[0], w[1]], [w[2], w[3]]);
                t.locate_in_envelope_intersecting(&aabb)
                    .filter(|e| {
                        let (lo, hi) = (e.geom().lower(), e.geom().upper());
                        let v = match self.key_type {
                            KeyType::Point => IndexValue::Point(lo),
                            _ => IndexValue::Rect([lo[0], lo[1], hi[0], hi[1]]),
                        };
                        pred.matches(&v)
                    })
                    .map(|e| (e.data.0.clone(), e.data.1))
                    .collect()
            }
        }
    }

    /// Number of entries.
    pub fn entries(&self) -> u64 {
        read(&self.inner).entries as u64
    }

    /// Estimated RAM of the entries (keys, values, container overhead).
    pub fn memory_bytes(&self) -> u64 {
        read(&self.inner).bytes as u64
    }
}

/// The `memory` strategy of one index.
pub(crate) struct Memory {
    index: MemoryIndex,
}

impl Memory {
    /// Takes no parameters.
    pub fn open(cx: &OpenCx<'_>) -> Result<Memory> {
        strategy::no_params(StrategyKind::Memory.name(), cx.params)?;
        Ok(Memory {
            index: MemoryIndex::new(cx.spec.key_type),
        })
    }
}

impl IndexStrategy for Memory {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Memory
    }

    fn write_path(&self) -> WritePath {
        WritePath::Sync
    }

    fn needs_current(&self) -> NeedsCurrent {
        NeedsCurrent::All
    }

    /// For each operation, removes the entry of the key's current attribute
    /// and, for a put, inserts the new one. `current` holds, for every key
    /// of `ops`, its newest record before the batch; later operations on a
    /// key see the earlier ones of the same batch.
    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        let mut ed = self.index.edit();
        // Each key's attribute after the operations so far (a batch of one
        // operation needs none).
        let mut latest: HashMap<&[u8], Option<IndexValue>> = HashMap::new();
        let track = ops.len() > 1;
        for &(seq, key, new) in ops {
            let earlier = if track { latest.remove(key) } else { None };
            let old = match earlier {
                Some(a) => a,
                None => match current.get(key) {
                    Some(Some((_, raw))) => attrs.get(raw).ok(),
                    _ => None,
                },
            };
            if let Some(v) = &old {
                ed.remove(v, key);
            }
            let new_attr = new.and_then(|raw| attrs.counted(raw));
            if let Some(v) = &new_attr {
                ed.insert(v, key, seq);
            }
            if track {
                latest.insert(key, new_attr);
            }
        }
        Ok(())
    }

    fn build_method(&self) -> BuildMethod {
        BuildMethod::Scan
    }

    fn rebuilt_at_open(&self) -> bool {
        true
    }

    fn clear(&self) -> Result<()> {
        self.index.clear();
        Ok(())
    }

    /// Reads the primary only at its own snapshot, through `fetch`.
    fn pins_own_snapshot(&self) -> bool {
        true
    }

    /// Candidates from the structure at a snapshot pinned under the sync
    /// guard (so they are exactly the matching live records at that
    /// snapshot), newest first, then one batched fetch of the records (or
    /// of the top K) at that snapshot.
    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Hits> {
        let (def, view, opts) = (cx.def, cx.view, cx.opts);
        let (snap, mut cands) = cx.pin_with(|| self.index.query(cx.pred));
        let at = snap.sequence();
        // Defensive: a failed write (database now read-only) may have
        // edited the structure without publishing its sequence numbers.
        cands.retain(|(_, s)| *s <= at);
        cands.sort_unstable_by_key(|(_, s)| Reverse(*s));
        if let Some(k) = opts.limit {
            cands.truncate(k);
        }
        profile.candidates = cands.len() as u64;
        if opts.keys_only {
            return Ok(cands
                .into_iter()
                .map(|(key, seq)| Hit {
                    key,
                    value: None,
                    seq,
                })
                .collect());
        }
        let keys: Vec<&[u8]> = cands.iter().map(|(k, _)| k.as_slice()).collect();
        let before = (view.data_blocks_read)();
        let found = (view.fetch)(&keys, at)?;
        // Counted from the shared engine counters: concurrent queries may
        // add to it. `min_data_blocks` is left 0: the batched fetch does not
        // report which block each record came from.
        profile.data_blocks_read = (view.data_blocks_read)().saturating_sub(before);
        drop(snap);
        def.counters
            .validations
            .fetch_add(cands.len() as u64, Relaxed);
        let mut hits = Vec::with_capacity(cands.len());
        for ((key, seq), f) in cands.into_iter().zip(found) {
            // Every candidate is the live version at the snapshot: the
            // fetch confirms it (a mismatch is a bug, reported, not hidden).
            match f {
                Some((s, value)) if s == seq => hits.push(Hit {
                    key,
                    value: Some(value),
                    seq,
                }),
                other => {
                    def.counters.failed.fetch_add(1, Relaxed);
                    return Err(Error::corruption(format!(
                        "memory index {:?} holds key {:?} at seq {seq}, the data has {:?}",
                        def.spec.name,
                        String::from_utf8_lossy(&key),
                        other.map(|(s, _)| s)
                    )));
                }
            }
        }
        Ok(hits.into())
    }

    fn stats(&self, _slot: Option<&VersionSlot>, s: &mut IndexStats) {
        s.global_entries = self.index.entries();
        s.memory_bytes = self.index.memory_bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<(Vec<u8>, SeqNo)>) -> Vec<(Vec<u8>, SeqNo)> {
        v.sort();
        v
    }

    #[test]
    fn scalar_insert_remove_query() {
        let m = MemoryIndex::new(KeyType::I64);
        {
            let mut e = m.edit();
            e.insert(&IndexValue::I64(5), b"a", 1);
            e.insert(&IndexValue::I64(7), b"b", 2);
            e.insert(&IndexValue::I64(5), b"c", 3);
            e.insert(&IndexValue::I64(-3), b"d", 4);
        }
        assert_eq!(m.entries(), 4);
        assert!(m.memory_bytes() > 0);
        let eq5 = Predicate::Eq(IndexValue::I64(5));
        assert_eq!(
            sorted(m.query(&eq5)),
            vec![(b"a".to_vec(), 1), (b"c".to_vec(), 3)]
        );
        let range = Predicate::Range(IndexValue::I64(-10), IndexValue::I64(5));
        assert_eq!(m.query(&range).len(), 3);
        // Update of "a": 5 → 7.
        {
            let mut e = m.edit();
            assert!(e.remove(&IndexValue::I64(5), b"a"));
            assert!(!e.remove(&IndexValue::I64(5), b"a"));
            e.insert(&IndexValue::I64(7), b"a", 9);
        }
        assert_eq!(m.query(&eq5), vec![(b"c".to_vec(), 3)]);
        assert_eq!(
            sorted(m.query(&Predicate::Eq(IndexValue::I64(7)))),
            vec![(b"a".to_vec(), 9), (b"b".to_vec(), 2)]
        );
        assert_eq!(m.entries(), 4);
        // Spatial predicates find nothing in a scalar index.
        assert!(m.query(&Predicate::Within([0.0, 0.0, 1.0, 1.0])).is_empty());
        m.clear();
        assert_eq!(m.entries(), 0);
        assert_eq!(m.memory_bytes(), 0);
        assert!(m.query(&range).is_empty());
    }

    #[test]
    fn string_range_is_bytewise() {
        let m = MemoryIndex::new(KeyType::String);
        {
            let mut e = m.edit();
            for (i, w) in ["apple", "banana", "cherry", ""].iter().enumerate() {
                e.insert(&IndexValue::Str(w.to_string()), w.as_bytes(), i as SeqNo);
            }
        }
        let r = Predicate::Range(IndexValue::Str("b".into()), IndexValue::Str("c".into()));
        assert_eq!(m.query(&r), vec![(b"banana".to_vec(), 1)]);
        let r = Predicate::Range(IndexValue::Str(String::new()), IndexValue::Str("b".into()));
        assert_eq!(
            sorted(m.query(&r)),
            vec![(b"".to_vec(), 3), (b"apple".to_vec(), 0)]
        );
    }

    #[test]
    fn points_insert_remove_query() {
        let m = MemoryIndex::new(KeyType::Point);
        {
            let mut e = m.edit();
            e.insert(&IndexValue::Point([1.0, 1.0]), b"a", 1);
            e.insert(&IndexValue::Point([5.0, 5.0]), b"b", 2);
            e.insert(&IndexValue::Point([1.0, 1.0]), b"c", 3);
        }
        let w = Predicate::Within([0.0, 0.0, 2.0, 2.0]);
        assert_eq!(
            sorted(m.query(&w)),
            vec![(b"a".to_vec(), 1), (b"c".to_vec(), 3)]
        );
        // Closed window: a point on the border is inside.
        assert_eq!(
            m.query(&Predicate::Within([5.0, 5.0, 6.0, 6.0])),
            vec![(b"b".to_vec(), 2)]
        );
        {
            let mut e = m.edit();
            assert!(e.remove(&IndexValue::Point([1.0, 1.0]), b"a"));
            assert!(!e.remove(&IndexValue::Point([5.0, 5.0]), b"a"));
        }
        assert_eq!(m.query(&w), vec![(b"c".to_vec(), 3)]);
        assert_eq!(
            m.query(&Predicate::Eq(IndexValue::Point([1.0, 1.0]))),
            vec![(b"c".to_vec(), 3)]
        );
        assert!(m
            .query(&Predicate::Eq(IndexValue::Point([1.0, 2.0])))
            .is_empty());
        assert_eq!(m.entries(), 2);
    }

    #[test]
    fn rects_intersect_and_equal() {
        let m = MemoryIndex::new(KeyType::Rect);
        {
            let mut e = m.edit();
            e.insert(&IndexValue::Rect([0.0, 0.0, 4.0, 4.0]), b"big", 1);
            e.insert(&IndexValue::Rect([1.0, 1.0, 2.0, 2.0]), b"small", 2);
            e.insert(&IndexValue::Rect([10.0, 10.0, 11.0, 11.0]), b"far", 3);
        }
        // Intersecting, not only contained.
        assert_eq!(
            sorted(m.query(&Predicate::Within([3.0, 3.0, 20.0, 20.0]))),
            vec![(b"big".to_vec(), 1), (b"far".to_vec(), 3)]
        );
        // Equality is exact, not intersection.
        assert_eq!(
            m.query(&Predicate::Eq(IndexValue::Rect([1.0, 1.0, 2.0, 2.0]))),
            vec![(b"small".to_vec(), 2)]
        );
        {
            let mut e = m.edit();
            assert!(e.remove(&IndexValue::Rect([0.0, 0.0, 4.0, 4.0]), b"big"));
            e.insert(&IndexValue::Rect([30.0, 30.0, 31.0, 31.0]), b"big", 4);
        }
        let all = Predicate::Within([
            f64::NEG_INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::INFINITY,
        ]);
        assert_eq!(
            sorted(m.query(&all)),
            vec![
                (b"big".to_vec(), 4),
                (b"far".to_vec(), 3),
                (b"small".to_vec(), 2)
            ]
        );
        assert_eq!(m.entries(), 3);
    }
}
