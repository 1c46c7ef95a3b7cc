//! The SKey layer of the PS-Tree (PERSEID §4.2.1): the ordered index of
//! secondary keys, each mapped to the pointer of its newest PKey group.
//!
//! The paper keeps it in a persistent-memory B+-tree. Here it is an
//! ordered map in RAM whose changes are written to the page file with
//! every flush (one record per secondary key changed since the last one,
//! or every key in a full snapshot, see `file`), so a reopen rebuilds it
//! from the file, never from the primary.
//!
//! Beside the ordered map, a hash table keyed by a 32-bit hash of each
//! secondary key holds the key's head pointer: an equality lookup (every
//! index-only lookup and every write) probes it instead of descending the
//! ordered map, and checks the hit against the key stored in the group it
//! points to (see [`SKeyLayer::hint`] and `pkey::PsTree::head`).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, BuildHasherDefault};
use std::ops::Bound;

use super::heads::HeadTable;
use crate::index::fxhash::FxHasher;

/// A group pointer of the PKey layer (`super::pkey`): page id in the
/// upper 32 bits, byte offset in the lower.
pub(crate) type Ptr = u64;

use crate::index::inline_key::InlineKey as SKey;

/// Secondary key (its sort key, `index::tree::sort_key`) → newest group,
/// with whether it changed since the last flush.
#[derive(Default)]
pub(crate) struct SKeyLayer {
    map: BTreeMap<SKey, Head>,
    /// [`key_hash`] of a key → its head pointer (page id, offset).
    /// Invariant: every entry `h → p` is the current head of some key of
    /// the map whose hash is `h` (a later key with the same hash replaces
    /// the entry; removing either key removes it). So a hit is the head of
    /// the key asked for exactly when the group at `p` is that key's, and
    /// a miss says nothing (the ordered map answers). Twelve bytes an
    /// entry: the hash is a hint, 32 bits are enough.
    heads: HeadTable,
    /// Keys removed since the last flush.
    removed: BTreeSet<Vec<u8>>,
    /// Keys changed since the last flush (an upper bound: 0 means none).
    changed: usize,
    /// Heap bytes of the keys too long to be inline (for the DRAM
    /// estimate).
    key_bytes: usize,
    /// Records of the groups loaded at an open, not yet merged
    /// ([`SKeyLayer::load_batch`]; empty once the open is done).
    pending: Vec<(SKey, Option<Ptr>)>,
    /// A full group's keys, sorted and unique, not yet in the map
    /// ([`SKeyLayer::load_all`]; `None` once the open is done).
    full: Option<Vec<(SKey, Head)>>,
}

/// `old` (sorted, unique) with `recs` applied in their order (a `None`
/// removes the key), sorted and unique.
fn merge_records(
    old: impl Iterator<Item = (SKey, Head)>,
    mut recs: Vec<(SKey, Option<Ptr>)>,
) -> Vec<(SKey, Head)> {
    // Stable: equal keys stay in record order.
    recs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(SKey, Head)> = Vec::with_capacity(old.size_hint().0 + recs.len());
    let mut old = old.peekable();
    let mut recs = recs.into_iter().peekable();
    while let Some((k, mut p)) = recs.next() {
        while let Some(next) = recs.next_if(|n| n.0 == k) {
            p = next.1;
        }
        while let Some(o) = old.next_if(|o| o.0 < k) {
            out.push(o);
        }
        old.next_if(|o| o.0 == k);
        if let Some(p) = p {
            out.push((k, Head::new(p, false)));
        }
    }
    out.extend(old);
    out
}

/// Per-key bytes of the ordered map, for [`SKeyLayer::memory_bytes`]:
/// the key and value in a node, whose slots are about two thirds used.
const OVERHEAD: usize = std::mem::size_of::<(SKey, Head)>() * 3 / 2;

/// A key's head pointer and whether it changed since the last flush, in
/// one word: the flag is the top bit, which no pointer uses (page ids stay
/// below 2^31: 8 TiB of 4 KiB pages).
#[derive(Clone, Copy)]
struct Head(u64);

impl Head {
    const DIRTY: u64 = 1 << 63;

    fn new(p: Ptr, dirty: bool) -> Head {
        debug_assert_eq!(p & Head::DIRTY, 0, "page id beyond 2^31");
        Head(p | if dirty { Head::DIRTY } else { 0 })
    }

    fn ptr(self) -> Ptr {
        self.0 & !Head::DIRTY
    }
}

/// The 32-bit hash of a secondary key's bytes that [`SKeyLayer`]'s hash
/// table is keyed by (the low half of the FxHash with its finalizer).
fn key_hash(skey: &[u8]) -> u32 {
    let h = BuildHasherDefault::<FxHasher>::default().hash_one(skey) as u32;
    #[cfg(test)]
    let h = h & HASH_MASK.with(|m| m.get());
    h
}

#[cfg(test)]
thread_local! {
    /// Tests narrow the hash so that keys share it (see
    /// `pkey::tests::heads_agree_when_every_key_shares_a_few_hashes`).
    pub(crate) static HASH_MASK: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// A pointer as (page id, offset).
fn split(p: Ptr) -> (u32, u32) {
    ((p >> 32) as u32, p as u32)
}

impl SKeyLayer {
    /// The head of `skey`'s chain, by the ordered map.
    pub fn get(&self, skey: &[u8]) -> Option<Ptr> {
        self.map.get(&SKey::new(skey)).map(|v| v.ptr())
    }

    /// A candidate head for `skey` from the hash table: the head of
    /// `skey` if the group it points to is `skey`'s, else of another key
    /// with the same hash. `None` says nothing: ask [`SKeyLayer::get`].
    pub fn hint(&self, skey: &[u8]) -> Option<Ptr> {
        self.heads
            .get(key_hash(skey))
            .map(|(page, off)| (u64::from(page) << 32) | u64::from(off))
    }

    pub fn set(&mut self, skey: &[u8], p: Ptr) {
        self.changed += 1;
        self.heads.insert(key_hash(skey), split(p));
        let k = SKey::new(skey);
        match self.map.get_mut(&k) {
            Some(v) => *v = Head::new(p, true),
            None => {
                self.key_bytes += SKey::heap_bytes(skey);
                self.map.insert(k, Head::new(p, true));
                if !self.removed.is_empty() {
                    self.removed.remove(skey);
                }
            }
        }
    }

    pub fn remove(&mut self, skey: &[u8]) {
        self.heads.remove(key_hash(skey));
        if self.map.remove(&SKey::new(skey)).is_some() {
            self.key_bytes -= SKey::heap_bytes(skey);
            self.removed.insert(skey.to_vec());
        }
    }

    /// True if nothing changed since the last [`SKeyLayer::drain_changes`].
    pub fn is_clean(&self) -> bool {
        self.changed == 0 && self.removed.is_empty()
    }

    /// Every key changed since the last call with its pointer (`None`:
    /// removed); then nothing is changed.
    pub fn drain_changes(&mut self, mut f: impl FnMut(&[u8], Option<Ptr>)) {
        if self.changed > 0 {
            for (k, h) in self.map.iter_mut() {
                if h.0 & Head::DIRTY != 0 {
                    *h = Head::new(h.ptr(), false);
                    f(k.bytes(), Some(h.ptr()));
                }
            }
        }
        for k in std::mem::take(&mut self.removed) {
            f(&k, None);
        }
        self.changed = 0;
    }

    /// The pointer of the greatest key below `skey`.
    pub fn before(&self, skey: &[u8]) -> Option<Ptr> {
        self.map
            .range((Bound::Unbounded, Bound::Excluded(SKey::new(skey))))
            .next_back()
            .map(|(_, h)| h.ptr())
    }

    /// The pointer of the least key above `skey`.
    pub fn after(&self, skey: &[u8]) -> Option<Ptr> {
        self.map
            .range((Bound::Excluded(SKey::new(skey)), Bound::Unbounded))
            .next()
            .map(|(_, h)| h.ptr())
    }

    /// Keys in `[from, to)` (`to == None`: unbounded), in order.
    pub fn range<'a>(
        &'a self,
        from: &'a [u8],
        to: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], Ptr)> + 'a {
        // `to <= from` is an empty range (`BTreeMap::range` would panic
        // for `to < from`).
        let hi = match to {
            Some(t) if t <= from => Bound::Excluded(SKey::new(from)),
            Some(t) => Bound::Excluded(SKey::new(t)),
            None => Bound::Unbounded,
        };
        self.map
            .range((Bound::Included(SKey::new(from)), hi))
            .map(|(k, h)| (k.bytes(), h.ptr()))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Ptr)> {
        self.map.iter().map(|(k, h)| (k.bytes(), h.ptr()))
    }

    pub fn memory_bytes(&self) -> usize {
        self.key_bytes + self.map.len() * OVERHEAD + self.heads.memory_bytes()
    }

    /// The hash table rebuilt from the ordered map (after a bulk load).
    fn rebuild_heads(&mut self) {
        self.heads.clear();
        self.heads.reserve(self.map.len());
        for (k, h) in &self.map {
            self.heads.insert(key_hash(k.bytes()), split(h.ptr()));
        }
    }

    /// Replaces the layer with `keys` (recovery of a full group, which
    /// lists its keys in order; any order is accepted): not dirty. Like
    /// [`SKeyLayer::load_batch`], it takes effect at
    /// [`SKeyLayer::finish_load`], which builds the map and the hash
    /// table once with the later groups' records.
    pub fn load_all(&mut self, keys: Vec<(&[u8], Ptr)>) {
        // Sorted, the last of equal keys kept (as a map would).
        let all = merge_records(
            std::iter::empty(),
            keys.into_iter()
                .map(|(k, p)| (SKey::new(k), Some(p)))
                .collect(),
        );
        self.map.clear();
        self.heads.clear();
        self.key_bytes = 0;
        self.full = Some(all);
        self.pending.clear();
        self.removed.clear();
        self.changed = 0;
    }

    /// Loads a group's keys from the file (recovery), in record order (of
    /// two records of a key the later wins): not dirty. The records are
    /// only gathered; [`SKeyLayer::finish_load`] merges every group's
    /// with the map in one ordered pass (a flush changes most keys under
    /// random secondary keys: a merge and a rebuild of the hash table per
    /// group made recovery quadratic in the groups since the last full
    /// one).
    pub fn load_batch(&mut self, recs: Vec<(&[u8], Option<Ptr>)>) {
        self.pending
            .extend(recs.into_iter().map(|(k, p)| (SKey::new(k), p)));
    }

    /// Builds the map from the full group's keys (or the map as it is)
    /// and the records [`SKeyLayer::load_batch`] gathered, in record
    /// order, and the hash table from the map. Call once the last group
    /// is loaded, before any other use.
    pub fn finish_load(&mut self) {
        let full = self.full.take();
        let recs = std::mem::take(&mut self.pending);
        if full.is_none() && recs.is_empty() {
            return;
        }
        let out = match full {
            Some(f) => merge_records(f.into_iter(), recs),
            None => merge_records(std::mem::take(&mut self.map).into_iter(), recs),
        };
        self.key_bytes = out.iter().map(|(k, _)| SKey::heap_bytes(k.bytes())).sum();
        // Sorted and unique: `collect` builds the tree in one pass.
        self.map = out.into_iter().collect();
        self.rebuild_heads();
    }

    /// Loads one key from the file, at once: not dirty (the reference
    /// [`SKeyLayer::load_batch`] is tested against).
    #[cfg(test)]
    pub fn load(&mut self, skey: &[u8], p: Option<Ptr>) {
        match p {
            Some(p) => self.heads.insert(key_hash(skey), split(p)),
            None => self.heads.remove(key_hash(skey)),
        };
        match p {
            Some(p) => match self.map.entry(SKey::new(skey)) {
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    o.insert(Head::new(p, false));
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    self.key_bytes += SKey::heap_bytes(skey);
                    v.insert(Head::new(p, false));
                }
            },
            None => {
                if self.map.remove(&SKey::new(skey)).is_some() {
                    self.key_bytes -= SKey::heap_bytes(skey);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map orders keys as their bytes: short and long, with zero
    /// bytes, sharing prefixes of up to and beyond eight bytes.
    /// The map orders keys as their bytes: short and long, with zero
    /// bytes, sharing prefixes of up to and beyond eight bytes.
    #[test]
    fn a_key_is_24_bytes() {
        assert_eq!(std::mem::size_of::<SKey>(), 24);
    }

    #[test]
    fn keys_order_as_their_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![1, 0],
            vec![1, 0, 0, 0, 0, 0, 0, 0, 0],
            vec![1, 2, 3, 4, 5, 6, 7, 8],
            vec![1, 2, 3, 4, 5, 6, 7, 8, 0],
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
            vec![255; 7],
            vec![255; 8],
            vec![255; 30],
            vec![7; 23],
            vec![7; 22],
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 28) as usize;
            keys.push((0..n).map(|i| (x >> (i % 8)) as u8 & 3).collect());
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(SKey::new(a).cmp(&SKey::new(b)), a.cmp(b), "{a:?} {b:?}");
            }
        }
        let mut layer = SKeyLayer::default();
        for (i, k) in keys.iter().enumerate() {
            layer.set(k, i as Ptr);
        }
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        let got: Vec<Vec<u8>> = layer.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(got, sorted);
        let (lo, hi) = (vec![1u8], vec![1u8, 2, 3, 4, 5, 6, 7, 8, 9]);
        let want: Vec<&Vec<u8>> = sorted.iter().filter(|k| **k >= lo && **k < hi).collect();
        let got: Vec<Vec<u8>> = layer
            .range(&lo, Some(&hi))
            .map(|(k, _)| k.to_vec())
            .collect();
        assert_eq!(got.iter().collect::<Vec<_>>(), want);
        assert_eq!(layer.range(&hi, Some(&lo)).count(), 0);
        assert_eq!(layer.range(&hi, Some(&hi)).count(), 0);
    }

    /// A batch load gives the map that loading its records one by one
    /// gives, for small batches (a search per key) and large ones (a
    /// merge), with removals, keys not in the map and repeated keys.
    #[test]
    fn a_batch_loads_as_its_records_one_by_one() {
        let mut x = 0x1234_5678_9ABC_DEF1u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for batch in [3usize, 40, 400, 3000] {
            let mut one = SKeyLayer::default();
            let mut many = SKeyLayer::default();
            // Every round's records gathered, merged once (an open), over
            // a full group's keys.
            let mut deferred = SKeyLayer::default();
            let key = |i: u64| {
                if i.is_multiple_of(7) {
                    format!("a-long-secondary-sort-key-{i:06}").into_bytes()
                } else {
                    i.to_be_bytes().to_vec()
                }
            };
            let full: Vec<(Vec<u8>, Ptr)> = (0..batch as u64)
                .map(|_| {
                    let r = rnd();
                    (key(r % 1000), r >> 8)
                })
                .collect();
            for (k, p) in &full {
                one.load(k, Some(*p));
            }
            many.load_all(full.iter().map(|(k, p)| (&k[..], *p)).collect());
            many.finish_load();
            deferred.load_all(full.iter().map(|(k, p)| (&k[..], *p)).collect());
            for round in 0..6 {
                let recs: Vec<(Vec<u8>, Option<Ptr>)> = (0..batch)
                    .map(|_| {
                        let r = rnd();
                        (key(r % 1000), (r % 5 != 0).then_some(r >> 8))
                    })
                    .collect();
                for (k, p) in &recs {
                    one.load(k, *p);
                }
                many.load_batch(recs.iter().map(|(k, p)| (&k[..], *p)).collect());
                many.finish_load();
                deferred.load_batch(recs.iter().map(|(k, p)| (&k[..], *p)).collect());
                let a: Vec<(&[u8], Ptr)> = one.iter().collect();
                let b: Vec<(&[u8], Ptr)> = many.iter().collect();
                assert_eq!(a, b, "batch {batch}, round {round}");
                // (The hash table's capacity follows its history.)
                assert_eq!(one.key_bytes, many.key_bytes);
                assert!(many.is_clean());
            }
            deferred.finish_load();
            let a: Vec<(&[u8], Ptr)> = one.iter().collect();
            let b: Vec<(&[u8], Ptr)> = deferred.iter().collect();
            assert_eq!(a, b, "batch {batch}, deferred");
            assert_eq!(one.key_bytes, deferred.key_bytes);
            // The hash table agrees with the map.
            for (k, p) in deferred.iter() {
                assert_eq!(deferred.hint(k), Some(p));
            }
        }
    }
}
