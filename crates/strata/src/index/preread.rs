//! Records read before their write: one reading per record in a load.
//!
//! `strata::load` must read each JSON line to find its key (and to reject
//! bad JSON); the memtable side structure then read the same bytes again
//! for the indexed fields (NEXT §4's "no significant overhead" and the
//! physical-limit issue's "parse a record once in its life"). The loader
//! now reads each line once for its key *and* every indexed path, and
//! registers the readings here, in batch order, for the duration of its
//! write; `IndexSide::on_add` takes the reading of a record whose bytes
//! equal the next registered one instead of reading it again.
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

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::def::Read;
use super::fields::Fields;
use super::lock;

/// (record bytes, its reading; `None` once taken), and the cursor: the
/// next record to match.
type Items = (Vec<(Vec<u8>, Option<Read>)>, usize);

/// One loader batch's readings, in batch order.
pub(crate) struct PreReadSet {
    fields: Arc<Fields>,
    items: Mutex<Items>,
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
            items: Mutex::new((items.into_iter().map(|(b, r)| (b, Some(r))).collect(), 0)),
        });
        let mut sets = lock(&self.sets);
        sets.push(set.clone());
        self.active.store(sets.len(), Relaxed);
        Registration { reads: self, set }
    }

    /// The registered reading of a record with bytes `value`, if it is the
    /// next one of a registration (which then moves past it).
    pub fn take(&self, value: &[u8]) -> Option<(Arc<Fields>, Read)> {
        if self.active.load(Relaxed) == 0 {
            return None;
        }
        let sets = lock(&self.sets);
        for s in sets.iter() {
            let mut g = lock(&s.items);
            let (items, cursor) = &mut *g;
            let Some((bytes, read)) = items.get_mut(*cursor) else {
                continue;
            };
            if bytes.as_slice() == value {
                *cursor += 1;
                if let Some(r) = read.take() {
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
        drop(reg);
        assert!(reads.take(&a).is_none());
        assert_eq!(reads.active.load(Relaxed), 0);
    }
}
