//! The memtable side structure of the strategies whose writes reach them
//! through tables ([`super::strategy::WritePath::Tables`]: NEXT, embedded):
//! each index's attribute values of the memtable's entries, so that index
//! queries never parse the memtable.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use crossbeam_skiplist::{SkipMap, SkipSet};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::MemSide;

use super::def::{fields_of, read_doc, Doc, IndexMeta};
use super::fields::Fields;
use super::value::{IndexValue, Predicate};
use super::{read, write};

/// A memtable side entry: encoded value, key, sequence number.
type SideEntry = (Vec<u8>, Vec<u8>, SeqNo);

/// One index's values. Both forms are concurrent skiplists: the write
/// group's leader inserts while readers search, without a lock.
enum SideIndex {
    /// Ordered by (encoded value, key, seq).
    Scalar(SkipSet<SideEntry>),
    /// (key, seq) → value; queries test every entry.
    Spatial(SkipMap<(Vec<u8>, SeqNo), IndexValue>),
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
}

impl IndexSide {
    pub fn new() -> IndexSide {
        IndexSide {
            attached: RwLock::new(Arc::new(Attached {
                indexes: Vec::new(),
                fields: Fields::new([]),
            })),
            bytes: AtomicUsize::new(0),
        }
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
            SideIndex::Spatial(SkipMap::new())
        } else {
            SideIndex::Scalar(SkipSet::new())
        };
        indexes.push((def, Arc::new(side)));
        let fields = fields_of(indexes.iter().map(|(d, _)| &**d));
        *slot = Arc::new(Attached { indexes, fields });
    }

    /// Index `id`'s values of this memtable's entries as (key, seq,
    /// value), in the memtable's order (key ascending, then seq
    /// descending), for the flush of the memtable (`None` if `id` is not
    /// attached). Entries absent were not indexed here (no attribute, or
    /// written before `id` was attached): the flush reads them itself.
    pub fn values_in_entry_order(&self, id: u32) -> Option<Vec<SideValue>> {
        let att = self.current();
        let (meta, side) = att.indexes.iter().find(|(d, _)| d.id == id)?;
        let ty = meta.spec.key_type;
        let mut out: Vec<SideValue> = match &**side {
            SideIndex::Scalar(s) => s
                .iter()
                .filter_map(|e| {
                    let (enc, key, seq) = e.value();
                    let v = IndexValue::decode(ty, enc).ok()?;
                    Some((key.clone(), *seq, v))
                })
                .collect(),
            SideIndex::Spatial(s) => s
                .iter()
                .map(|e| (e.key().0.clone(), e.key().1, e.value().clone()))
                .collect(),
        };
        out.sort_unstable_by(|a, b| entry_order(&a.0, a.1, &b.0, b.1));
        Some(out)
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
                s.range((lo, Vec::new(), 0)..)
                    .take_while(|e| e.value().0 <= hi)
                    .map(|e| (e.value().1.clone(), e.value().2))
                    .collect()
            }
            SideIndex::Spatial(s) => s
                .iter()
                .filter(|e| pred.matches(e.value()))
                .map(|e| (e.key().0.clone(), e.key().1))
                .collect(),
        }
    }
}

impl MemSide for IndexSide {
    fn on_add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        if kind != ValueKind::Value {
            return;
        }
        let att = self.current();
        if att.indexes.is_empty() {
            return;
        }
        let read = read_doc(value, &att.fields);
        let doc = Doc::of(&att.fields, &read);
        for (d, side) in att.indexes.iter() {
            match d.extract(value, doc) {
                Ok(v) => {
                    d.counters.indexed.fetch_add(1, Relaxed);
                    self.bytes.fetch_add(user_key.len() + 64, Relaxed);
                    match &**side {
                        SideIndex::Scalar(s) => {
                            s.insert((v.encode(), user_key.to_vec(), seq));
                        }
                        SideIndex::Spatial(s) => {
                            s.insert((user_key.to_vec(), seq), v);
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

/// A memtable entry's value for one index: key, sequence number, value.
pub(crate) type SideValue = (Vec<u8>, SeqNo, IndexValue);

/// The memtable's order of entries: key ascending, then sequence number
/// descending.
pub(crate) fn entry_order(ak: &[u8], aseq: SeqNo, bk: &[u8], bseq: SeqNo) -> std::cmp::Ordering {
    ak.cmp(bk).then(bseq.cmp(&aseq))
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
