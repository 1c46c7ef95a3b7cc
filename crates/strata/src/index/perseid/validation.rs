//! Hybrid validation (PERSEID §4.3): a persistent hash table of every
//! indexed primary key → (latest sequence number, physical count), and a
//! volatile table in RAM holding only the keys that may have obsolete
//! entries.
//!
//! The *physical count* `n` of a key is 1 plus the number of its entries
//! in the PKey layer that are obsolete (older than its latest version).
//! A key is in the persistent table while it has any entry or its latest
//! version has one; `has_entry` says whether the latest version (a put
//! with an indexable attribute) has an entry — a delete or an
//! attribute-less put has none, which the paper's model (every record has
//! a secondary key) does not need. The volatile table holds exactly the
//! keys with `n > 1`, with their latest sequence number and count.
//!
//! Queries consult only the volatile table: an entry `(pk, seq)` is valid
//! if `pk` is absent (it has no obsolete entries, so every entry is the
//! latest version) or its latest sequence number is `seq`; stale if the
//! latest is another one at or below the query's snapshot; and unknown if
//! the latest is newer than the snapshot (a concurrent write), which the
//! query resolves by a point lookup in the primary. Garbage collection
//! decrements both counts for every entry it removes and drops the key
//! from the volatile table when its count reaches 1.
//!
//! Deviation: the paper's volatile count is *logical* (queries mark the
//! obsolete entries they meet and decrement it). Here queries do not write
//! (they run beside the writer under a read lock), so the volatile count
//! equals the physical one and keys leave the volatile table at garbage
//! collection. The persistent table's working copy is in RAM (no
//! persistent memory): its changes are written to the page file with every
//! flush and it is read back at open, then the volatile table is rebuilt
//! from it as in the paper's recovery.

use strata_lsm::key::SeqNo;

#[cfg(test)]
use crate::index::fxhash::FxHasher;
use crate::index::fxhash::{FastMap, FastSet};

/// A persistent-table value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PEntry {
    pub seq: SeqNo,
    pub n: u32,
    pub has_entry: bool,
}

/// A volatile-table value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VEntry {
    pub seq: SeqNo,
    pub count: u32,
}

/// What the tables say of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The latest version of its key.
    Valid,
    /// Replaced by a version at or below the given sequence number.
    Stale,
    /// Replaced after the given sequence number.
    Newer,
    /// (Garbage collection) replaced at or below the horizon: no reader
    /// needs it.
    Collectable,
}

/// Per-key overhead of a hash-table slot (for the DRAM estimate).
const OVERHEAD: usize = 40;

#[derive(Default)]
pub(crate) struct Validation {
    /// Each value with whether it changed since the last flush.
    persistent: FastMap<Box<[u8]>, (PEntry, bool)>,
    volatile: FastMap<Box<[u8]>, VEntry>,
    /// Keys that left the persistent table since the last flush.
    removed: FastSet<Box<[u8]>>,
    /// Keys changed since the last flush (an upper bound: 0 means none).
    changed: usize,
    persistent_key_bytes: usize,
    volatile_key_bytes: usize,
}

impl Validation {
    /// Notes a new version of `pk` (every write, §4.3 Insert); `has_entry`
    /// if it adds an entry to the PKey layer.
    pub fn write(&mut self, pk: &[u8], seq: SeqNo, has_entry: bool) {
        self.changed += 1;
        match self.persistent.get_mut(pk) {
            None => {
                if !has_entry {
                    return;
                }
                self.persistent_key_bytes += pk.len();
                let e = PEntry {
                    seq,
                    n: 1,
                    has_entry,
                };
                self.persistent.insert(pk.into(), (e, true));
                if !self.removed.is_empty() {
                    self.removed.remove(pk);
                }
            }
            Some((e, dirty)) => {
                if e.has_entry {
                    e.n += 1;
                }
                e.seq = seq;
                e.has_entry = has_entry;
                *dirty = true;
                let e = *e;
                self.settle(pk, e);
            }
        }
    }

    /// Keeps the volatile table and the persistent table's membership in
    /// line with `pk`'s persistent value `e`.
    fn settle(&mut self, pk: &[u8], e: PEntry) {
        if e.n > 1 {
            let v = VEntry {
                seq: e.seq,
                count: e.n,
            };
            if self.volatile.insert(pk.into(), v).is_none() {
                self.volatile_key_bytes += pk.len();
            }
            return;
        }
        if self.volatile.remove(pk).is_some() {
            self.volatile_key_bytes -= pk.len();
        }
        if !e.has_entry && self.persistent.remove(pk).is_some() {
            self.persistent_key_bytes -= pk.len();
            self.removed.insert(pk.into());
        }
    }

    /// Garbage collection removed one obsolete entry of `pk`.
    pub fn collected(&mut self, pk: &[u8]) {
        if let Some((e, dirty)) = self.persistent.get_mut(pk) {
            e.n = e.n.saturating_sub(1).max(1);
            *dirty = true;
            self.changed += 1;
            let e = *e;
            self.settle(pk, e);
        }
    }

    /// True if nothing changed since the last [`Validation::drain_changes`].
    pub fn is_clean(&self) -> bool {
        self.changed == 0 && self.removed.is_empty()
    }

    /// Every key changed since the last call, with its value (`None`: it
    /// left the table); then nothing is changed.
    pub fn drain_changes(&mut self, mut f: impl FnMut(&[u8], Option<PEntry>)) {
        if self.changed > 0 {
            for (k, (e, dirty)) in self.persistent.iter_mut() {
                if std::mem::take(dirty) {
                    f(k, Some(*e));
                }
            }
        }
        for k in self.removed.drain() {
            f(&k, None);
        }
        self.changed = 0;
    }

    /// Validation of entry `(pk, seq)` for a reader at `snapshot` (the
    /// volatile table only).
    pub fn check(&self, pk: &[u8], seq: SeqNo, snapshot: SeqNo) -> Verdict {
        match self.volatile.get(pk) {
            None => Verdict::Valid,
            Some(v) if v.seq == seq => Verdict::Valid,
            Some(v) if v.seq <= snapshot => Verdict::Stale,
            Some(_) => Verdict::Newer,
        }
    }

    /// Garbage collection's verdict on `(pk, seq)`: collectable if
    /// replaced at or below `horizon` (the oldest snapshot a reader may
    /// hold).
    pub fn verdict(&self, pk: &[u8], seq: SeqNo, horizon: SeqNo) -> Verdict {
        match self.check(pk, seq, horizon) {
            Verdict::Stale => Verdict::Collectable,
            v => v,
        }
    }

    #[cfg(test)]
    pub fn persistent(&self, pk: &[u8]) -> Option<PEntry> {
        self.persistent.get(pk).map(|(e, _)| *e)
    }

    pub fn persistent_iter(&self) -> impl Iterator<Item = (&[u8], &PEntry)> {
        self.persistent.iter().map(|(k, (e, _))| (&**k, e))
    }

    /// Marks everything flushed (after a full snapshot).
    pub fn mark_clean(&mut self) {
        self.drain_changes(|_, _| {});
    }

    #[cfg(test)]
    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    #[cfg(test)]
    pub fn persistent_len(&self) -> usize {
        self.persistent.len()
    }

    /// Loads one persistent-table record from the file (recovery).
    /// Applies one record of the file (recovery): the key's entry, or its
    /// removal. Takes the decoded key to avoid copying it again; one hash
    /// per record.
    pub fn load(&mut self, pk: Vec<u8>, e: Option<PEntry>) {
        match e {
            Some(e) => {
                let len = pk.len();
                match self.persistent.entry(pk.into_boxed_slice()) {
                    std::collections::hash_map::Entry::Occupied(mut o) => {
                        o.insert((e, false));
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        self.persistent_key_bytes += len;
                        v.insert((e, false));
                    }
                }
            }
            None => {
                if self.persistent.remove(pk.as_slice()).is_some() {
                    self.persistent_key_bytes -= pk.len();
                }
            }
        }
    }

    /// Room for `n` more keys in the persistent table (recovery of a full
    /// group).
    pub fn reserve(&mut self, n: usize) {
        self.persistent.reserve(n);
    }

    /// Rebuilds the volatile table from the persistent one (§4.3
    /// Recovery).
    pub fn rebuild_volatile(&mut self) {
        self.volatile.clear();
        self.volatile_key_bytes = 0;
        for (k, (e, _)) in &self.persistent {
            if e.n > 1 {
                self.volatile_key_bytes += k.len();
                self.volatile.insert(
                    k.clone(),
                    VEntry {
                        seq: e.seq,
                        count: e.n,
                    },
                );
            }
        }
    }

    /// Estimated RAM of the persistent table's working copy and of the
    /// volatile table.
    pub fn memory_bytes(&self) -> (usize, usize) {
        (
            self.persistent_key_bytes + self.persistent.len() * (OVERHEAD + 16),
            self.volatile_key_bytes + self.volatile.len() * (OVERHEAD + 16),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_spreads_similar_keys_over_the_low_bits() {
        use std::collections::HashSet;
        use std::hash::{BuildHasher, BuildHasherDefault};
        let b = BuildHasherDefault::<FxHasher>::default();
        let mut low: HashSet<u64> = HashSet::new();
        for i in 0..4096u64 {
            low.insert(b.hash_one(format!("k{i:08}").as_bytes()) & 0xfff);
        }
        // 4096 keys into 4096 buckets: about 63% distinct if uniform.
        assert!(low.len() > 2300, "{} distinct low parts", low.len());
    }

    #[test]
    fn counts_follow_the_paper() {
        let mut v = Validation::default();
        v.write(b"a", 1, true);
        assert_eq!(v.check(b"a", 1, 10), Verdict::Valid);
        assert_eq!(v.volatile_len(), 0);
        v.write(b"a", 2, true);
        v.write(b"a", 3, true);
        assert_eq!(v.persistent(b"a").map(|e| e.n), Some(3));
        assert_eq!(v.check(b"a", 1, 10), Verdict::Stale);
        assert_eq!(v.check(b"a", 3, 10), Verdict::Valid);
        // A reader at snapshot 2 cannot tell from the table.
        assert_eq!(v.check(b"a", 2, 2), Verdict::Newer);
        assert_eq!(v.verdict(b"a", 1, 2), Verdict::Newer);
        assert_eq!(v.verdict(b"a", 1, 3), Verdict::Collectable);
        v.collected(b"a");
        assert_eq!(v.volatile_len(), 1);
        v.collected(b"a");
        assert_eq!(v.volatile_len(), 0);
        assert_eq!(v.persistent(b"a").map(|e| e.n), Some(1));
        // A delete: the key stays until its last entry is collected.
        v.write(b"a", 4, false);
        assert_eq!(v.check(b"a", 3, 10), Verdict::Stale);
        v.collected(b"a");
        assert_eq!(v.persistent(b"a"), None);
        assert_eq!(v.volatile_len(), 0);
        // Deleting an unknown key records nothing.
        v.write(b"b", 5, false);
        assert_eq!(v.persistent_len(), 0);
        // Recovery rebuilds the volatile table from the persistent one.
        v.write(b"c", 6, true);
        v.write(b"c", 7, true);
        v.rebuild_volatile();
        assert_eq!(v.volatile_len(), 1);
        assert_eq!(v.check(b"c", 6, 10), Verdict::Stale);
    }
}
