//! The memtable side structure of the strategies whose writes reach them
//! through tables ([`super::strategy::WritePath::Tables`]: NEXT, embedded):
//! each index's attribute values of the memtable's entries, so that index
//! queries never parse the memtable.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::MemSide;

use super::def::{parse_doc, IndexMeta};
use super::value::{IndexValue, Predicate};
use super::{read, write};

/// A memtable side entry: encoded value, key, sequence number.
type SideEntry = (Vec<u8>, Vec<u8>, SeqNo);

enum SideIndex {
    /// (encoded value, key, seq).
    Scalar(RwLock<BTreeSet<SideEntry>>),
    Spatial(RwLock<Vec<(IndexValue, Vec<u8>, SeqNo)>>),
}

/// The memtable side structure: each index's values of the memtable's
/// entries (every version; validation picks the live ones). Indexes can be
/// attached while the memtable is active (see `IndexManager::attach`).
pub(crate) struct IndexSide {
    indexes: RwLock<Vec<(Arc<IndexMeta>, SideIndex)>>,
    bytes: AtomicUsize,
}

impl IndexSide {
    pub fn new() -> IndexSide {
        IndexSide {
            indexes: RwLock::new(Vec::new()),
            bytes: AtomicUsize::new(0),
        }
    }

    pub fn attach(&self, def: Arc<IndexMeta>) {
        let mut idx = write(&self.indexes);
        if idx.iter().any(|(d, _)| d.id == def.id) {
            return;
        }
        let side = if def.spec.key_type.is_spatial() {
            SideIndex::Spatial(RwLock::new(Vec::new()))
        } else {
            SideIndex::Scalar(RwLock::new(BTreeSet::new()))
        };
        idx.push((def, side));
    }

    pub fn query(&self, id: u32, pred: &Predicate) -> Vec<(Vec<u8>, SeqNo)> {
        let idx = read(&self.indexes);
        let Some((_, side)) = idx.iter().find(|(d, _)| d.id == id) else {
            return Vec::new();
        };
        match side {
            SideIndex::Scalar(s) => {
                let Some((lo, hi)) = pred.scalar_bounds() else {
                    return Vec::new();
                };
                read(s)
                    .range((lo, Vec::new(), 0)..)
                    .take_while(|(v, _, _)| *v <= hi)
                    .map(|(_, k, s)| (k.clone(), *s))
                    .collect()
            }
            SideIndex::Spatial(s) => read(s)
                .iter()
                .filter(|(v, _, _)| pred.matches(v))
                .map(|(_, k, s)| (k.clone(), *s))
                .collect(),
        }
    }
}

impl MemSide for IndexSide {
    fn on_add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        if kind != ValueKind::Value {
            return;
        }
        let idx = read(&self.indexes);
        if idx.is_empty() {
            return;
        }
        let doc = parse_doc(value, idx.iter().map(|(d, _)| &**d));
        for (d, side) in idx.iter() {
            match d.extract(value, doc.as_ref()) {
                Ok(v) => {
                    d.counters.indexed.fetch_add(1, Relaxed);
                    self.bytes.fetch_add(user_key.len() + 64, Relaxed);
                    match side {
                        SideIndex::Scalar(s) => {
                            write(s).insert((v.encode(), user_key.to_vec(), seq));
                        }
                        SideIndex::Spatial(s) => write(s).push((v, user_key.to_vec(), seq)),
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
