//! The SKey layer of the PS-Tree (PERSEID §4.2.1): the ordered index of
//! secondary keys, each mapped to the pointer of its newest PKey group.
//!
//! The paper keeps it in a persistent-memory B+-tree. Here it is an
//! ordered map in RAM whose changes are written to the page file with
//! every flush (one record per secondary key changed since the last one,
//! or every key in a full snapshot, see `file`), so a reopen rebuilds it
//! from the file, never from the primary.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// A group pointer of the PKey layer (`super::pkey`): page id in the
/// upper 32 bits, byte offset in the lower.
pub(crate) type Ptr = u64;

/// Bytes of a key held inline in an [`SKey`].
const INLINE: usize = 22;

/// A secondary key as the map's key: inline up to [`INLINE`] bytes (the
/// 8 or 9 bytes of a number's sort key, short strings), else on the heap.
/// Ordered as its bytes, comparing the first eight as one big-endian
/// word first: a search of the map compares a key at every step, and a
/// call of `memcmp` for a few bytes dominated them (lookups and the
/// replay of SKey records at open).
#[derive(Clone)]
enum SKey {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

/// Heap bytes of a key (with the allocator's header): none if inline.
fn heap_bytes(k: &[u8]) -> usize {
    if k.len() <= INLINE {
        0
    } else {
        k.len() + 16
    }
}

impl SKey {
    fn new(k: &[u8]) -> SKey {
        let mut b = [0u8; INLINE];
        match b.get_mut(..k.len()) {
            Some(dst) => {
                dst.copy_from_slice(k);
                SKey::Inline(k.len() as u8, b)
            }
            None => SKey::Heap(k.into()),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            SKey::Inline(n, b) => b.get(..*n as usize).unwrap_or_default(),
            SKey::Heap(b) => b,
        }
    }

    /// The first eight bytes, zero-padded, as a big-endian word. Zero is
    /// the least byte, so where two keys' words differ they are ordered
    /// as the keys are. (An inline key's array is zero past its length.)
    fn word(&self) -> u64 {
        let b: &[u8] = match self {
            SKey::Inline(_, b) => b,
            SKey::Heap(b) => b,
        };
        // A heap key is longer than `INLINE`, so both have eight bytes.
        b.first_chunk::<8>().map_or(0, |w| u64::from_be_bytes(*w))
    }

    fn len(&self) -> usize {
        match self {
            SKey::Inline(n, _) => *n as usize,
            SKey::Heap(b) => b.len(),
        }
    }
}

impl Ord for SKey {
    fn cmp(&self, o: &SKey) -> Ordering {
        match self.word().cmp(&o.word()) {
            // Equal words of keys of at most eight bytes: the shorter is
            // a prefix of the other.
            Ordering::Equal if self.len() <= 8 && o.len() <= 8 => self.len().cmp(&o.len()),
            Ordering::Equal => self.bytes().cmp(o.bytes()),
            other => other,
        }
    }
}

impl PartialOrd for SKey {
    fn partial_cmp(&self, o: &SKey) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for SKey {
    fn eq(&self, o: &SKey) -> bool {
        self.bytes() == o.bytes()
    }
}

impl Eq for SKey {}

/// Secondary key (its sort key, `index::tree::sort_key`) → newest group,
/// with whether it changed since the last flush.
#[derive(Default)]
pub(crate) struct SKeyLayer {
    map: BTreeMap<SKey, (Ptr, bool)>,
    /// Keys removed since the last flush.
    removed: BTreeSet<Vec<u8>>,
    /// Keys changed since the last flush (an upper bound: 0 means none).
    changed: usize,
    /// Heap bytes of the keys too long to be inline (for the DRAM
    /// estimate).
    key_bytes: usize,
}

/// Per-key bytes of the ordered map, for [`SKeyLayer::memory_bytes`]:
/// the key and value in a node, whose slots are about two thirds used.
const OVERHEAD: usize = std::mem::size_of::<(SKey, (Ptr, bool))>() * 3 / 2;

impl SKeyLayer {
    pub fn get(&self, skey: &[u8]) -> Option<Ptr> {
        self.map.get(&SKey::new(skey)).map(|v| v.0)
    }

    pub fn set(&mut self, skey: &[u8], p: Ptr) {
        self.changed += 1;
        let k = SKey::new(skey);
        match self.map.get_mut(&k) {
            Some(v) => *v = (p, true),
            None => {
                self.key_bytes += heap_bytes(skey);
                self.map.insert(k, (p, true));
                if !self.removed.is_empty() {
                    self.removed.remove(skey);
                }
            }
        }
    }

    pub fn remove(&mut self, skey: &[u8]) {
        if self.map.remove(&SKey::new(skey)).is_some() {
            self.key_bytes -= heap_bytes(skey);
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
            for (k, (p, dirty)) in self.map.iter_mut() {
                if std::mem::take(dirty) {
                    f(k.bytes(), Some(*p));
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
            .map(|(_, p)| p.0)
    }

    /// The pointer of the least key above `skey`.
    pub fn after(&self, skey: &[u8]) -> Option<Ptr> {
        self.map
            .range((Bound::Excluded(SKey::new(skey)), Bound::Unbounded))
            .next()
            .map(|(_, p)| p.0)
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
            .map(|(k, p)| (k.bytes(), p.0))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Ptr)> {
        self.map.iter().map(|(k, p)| (k.bytes(), p.0))
    }

    pub fn memory_bytes(&self) -> usize {
        self.key_bytes + self.map.len() * OVERHEAD
    }

    /// Replaces the layer with `keys` (recovery of a full group, which
    /// lists its keys in order; any order is accepted): not dirty.
    pub fn load_all(&mut self, keys: Vec<(Vec<u8>, Ptr)>) {
        self.key_bytes = keys.iter().map(|(k, _)| heap_bytes(k)).sum();
        self.map = keys
            .into_iter()
            .map(|(k, p)| (SKey::new(&k), (p, false)))
            .collect();
        self.removed.clear();
        self.changed = 0;
    }

    /// Loads one key from the file (recovery): not dirty.
    pub fn load(&mut self, skey: &[u8], p: Option<Ptr>) {
        match p {
            Some(p) => {
                let k = SKey::new(skey);
                if let Some(v) = self.map.get_mut(&k) {
                    *v = (p, false);
                } else {
                    self.key_bytes += heap_bytes(skey);
                    self.map.insert(k, (p, false));
                }
            }
            None => {
                if self.map.remove(&SKey::new(skey)).is_some() {
                    self.key_bytes -= heap_bytes(skey);
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
}
