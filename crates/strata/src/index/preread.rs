//! Records read before their write: one reading per record in a load.
//!
//! `strata::load` must read each JSON line to find its key (and to reject
//! bad JSON); the memtable side structure then read the same bytes again
//! for the indexed fields (NEXT §4's "no significant overhead" and the
//! physical-limit issue's "parse a record once in its life"). The loader
//! now reads each line once for its key *and* every indexed path, and
//! registers the readings here, in batch order, for the duration of its
//! write. Both consumers of a batch's records take the reading of a record
//! whose bytes equal the next registered one instead of reading it again:
//! the synchronous maintenance before the memtable insert
//! (`IndexManager::sync_apply`, a copy, [`PreReads::copy`]) and then the
//! memtable side structure (`IndexSide::on_add`, the reading itself,
//! [`PreReads::take`]), each with its own cursor. When the maintenance
//! runs after the insert (`IndexManager::after_insert`), the manager says
//! so first ([`PreReads::set_batch_after_side`]) and the side structure
//! takes a copy, leaving the reading for the maintenance.
//!
//! Contract: a reading is a pure function of the record's bytes and the
//! `Fields` it was made with (`Fields::extract`), and it is used only for
//! a record whose bytes are equal to the registered ones, together with
//! those `Fields`; so a reading taken from here is exactly the reading
//! the side structure would have made (an index whose path the loader's
//! `Fields` lack falls back to its own reading, see `IndexMeta::extract`).
//! Matching is in order with a cursor per registration (records reach
//! the memtable in batch order; a record of another writer's batch merged
//! into the same group does not match and is read as before).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::fields::{Fields, Read};
use super::lock;

/// Record bytes and their readings (`None` once taken), in batch order.
type Items = Vec<(Vec<u8>, Option<Read>)>;

/// Which consumer asks (each has its cursor: the next record to match).
#[derive(Clone, Copy)]
enum Consumer {
    /// `sync_apply`: gets a copy.
    Batch = 0,
    /// The memtable side structure, after the batch's maintenance: takes
    /// the reading.
    Side = 1,
}

/// One loader batch's readings, in batch order.
pub(crate) struct PreReadSet {
    fields: Arc<Fields>,
    items: Mutex<(Items, [usize; 2])>,
}

/// The registrations of the loads in progress (shared by the index manager
/// and every memtable side structure).
#[derive(Default)]
pub(crate) struct PreReads {
    sets: Mutex<Vec<Arc<PreReadSet>>>,
    /// `sets.len()`, read without the lock by every memtable insert.
    active: AtomicUsize,
    /// Readings taken (for tests).
    hits: AtomicUsize,
    /// True while the batch being written is maintained after its insert:
    /// the side structure then copies readings instead of taking them.
    batch_after_side: AtomicBool,
}

/// Removes its registration when dropped.
pub(crate) struct Registration<'a> {
    reads: &'a PreReads,
    set: Arc<PreReadSet>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut sets = lock(&self.reads.sets);
        sets.retain(|s| !Arc::ptr_eq(s, &self.set));
        self.reads.active.store(sets.len(), Relaxed);
    }
}

impl PreReads {
    /// Registers `items` (record bytes and their reading with `fields`, in
    /// the order the records are in the batch about to be written) until
    /// the returned guard is dropped.
    pub fn register(&self, fields: Arc<Fields>, items: Vec<(Vec<u8>, Read)>) -> Registration<'_> {
        let set = Arc::new(PreReadSet {
            fields,
            items: Mutex::new((
                items.into_iter().map(|(b, r)| (b, Some(r))).collect(),
                [0, 0],
            )),
        });
        let mut sets = lock(&self.sets);
        sets.push(set.clone());
        self.active.store(sets.len(), Relaxed);
        Registration { reads: self, set }
    }

    /// Whether the synchronous maintenance of the batch about to be
    /// inserted runs after the insert (set by the write leader, before the
    /// insert).
    pub fn set_batch_after_side(&self, after: bool) {
        if self.batch_after_side.load(Relaxed) != after {
            self.batch_after_side.store(after, Relaxed);
        }
    }

    /// The memtable side structure's turn: the registered reading of a
    /// record with bytes `value`, if it is the next one of a registration
    /// for this consumer (whose cursor then moves past it).
    pub fn take(&self, value: &[u8]) -> Option<(Arc<Fields>, Read)> {
        self.next(value, Consumer::Side)
    }

    /// The synchronous maintenance's turn: as [`PreReads::take`], a copy
    /// (the side structure takes the reading afterwards).
    pub fn copy(&self, value: &[u8]) -> Option<(Arc<Fields>, Read)> {
        self.next(value, Consumer::Batch)
    }

    fn next(&self, value: &[u8], who: Consumer) -> Option<(Arc<Fields>, Read)> {
        if self.active.load(Relaxed) == 0 {
            return None;
        }
        let sets = lock(&self.sets);
        for s in sets.iter() {
            let mut g = lock(&s.items);
            let (items, cursors) = &mut *g;
            let Some(cursor) = cursors.get_mut(who as usize) else {
                continue;
            };
            let Some((bytes, read)) = items.get_mut(*cursor) else {
                continue;
            };
            if bytes.as_slice() == value {
                *cursor += 1;
                let got = match who {
                    Consumer::Side if !self.batch_after_side.load(Relaxed) => read.take(),
                    _ => read.clone(),
                };
                if let Some(r) = got {
                    self.hits.fetch_add(1, Relaxed);
                    return Some((s.fields.clone(), r));
                }
            }
        }
        None
    }

    /// Readings taken so far.
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    pub fn hits(&self) -> usize {
        self.hits.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Arc<Fields> {
        let p = [String::from("u")];
        Arc::new(Fields::new([p.as_slice()]))
    }

    #[test]
    fn readings_are_taken_in_order_and_only_for_equal_bytes() {
        let reads = PreReads::default();
        let f = fields();
        let a = br#"{"u":1}"#.to_vec();
        let b = br#"{"u":2}"#.to_vec();
        let items = vec![(a.clone(), f.extract(&a)), (b.clone(), f.extract(&b))];
        let reg = reads.register(f.clone(), items);
        // Another writer's record first: no match, the cursor stays.
        assert!(reads.take(br#"{"u":9}"#).is_none());
        // Out of order: `b` is not the next one.
        assert!(reads.take(&b).is_none());
        let (got_f, got) = reads.take(&a).expect("a's reading");
        assert!(Arc::ptr_eq(&got_f, &f));
        assert!(got.is_ok());
        assert!(reads.take(&b).is_some());
        // Each reading is taken once.
        assert!(reads.take(&b).is_none());
        assert_eq!(reads.hits(), 2);
        // The batch consumer has its own cursor, but a reading the side
        // took is gone (the batch consumer asks first in a write).
        assert!(reads.copy(&b).is_none());
        assert!(reads.copy(&a).is_none());
        assert_eq!(reads.hits(), 2);
        drop(reg);
        assert!(reads.take(&a).is_none());
        assert_eq!(reads.active.load(Relaxed), 0);
    }

    #[test]
    fn a_batch_maintained_after_the_insert_still_gets_its_reading() {
        let reads = PreReads::default();
        let f = fields();
        let a = br#"{"u":1}"#.to_vec();
        let _reg = reads.register(f.clone(), vec![(a.clone(), f.extract(&a))]);
        reads.set_batch_after_side(true);
        assert!(reads.take(&a).is_some());
        assert!(reads.copy(&a).is_some());
        assert_eq!(reads.hits(), 2);
    }

    #[test]
    fn the_batch_consumer_copies_and_the_side_still_takes() {
        let reads = PreReads::default();
        let f = fields();
        let a = br#"{"u":1}"#.to_vec();
        let _reg = reads.register(f.clone(), vec![(a.clone(), f.extract(&a))]);
        let (_, copied) = reads.copy(&a).expect("a copy");
        let (_, taken) = reads.take(&a).expect("the reading");
        let slot = f.slot(&["u".to_string()]).expect("slot");
        let ty = crate::KeyType::I64;
        assert_eq!(
            copied.expect("read").value(slot, ty).ok(),
            taken.expect("read").value(slot, ty).ok()
        );
    }
}
