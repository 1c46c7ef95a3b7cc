//! The SKey layer of the PS-Tree (PERSEID §4.2.1): the ordered index of
//! secondary keys, each mapped to the pointer of its newest PKey group.
//!
//! The paper keeps it in a persistent-memory B+-tree. Here it is an
//! ordered map in RAM whose changes are written to the page file with
//! every flush (one record per secondary key changed since the last one,
//! or every key in a full snapshot, see `file`), so a reopen rebuilds it
//! from the file, never from the primary.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// A group pointer of the PKey layer (`super::pkey`): page id in the
/// upper 32 bits, byte offset in the lower.
pub(crate) type Ptr = u64;

/// Secondary key (its sort key, `index::tree::sort_key`) → newest group,
/// with whether it changed since the last flush.
#[derive(Default)]
pub(crate) struct SKeyLayer {
    map: BTreeMap<Vec<u8>, (Ptr, bool)>,
    /// Keys removed since the last flush.
    removed: BTreeSet<Vec<u8>>,
    /// Keys changed since the last flush (an upper bound: 0 means none).
    changed: usize,
    /// Bytes of the keys (for the DRAM estimate).
    key_bytes: usize,
}

/// Per-key overhead of the ordered map (node share, vector header,
/// pointer), for [`SKeyLayer::memory_bytes`].
const OVERHEAD: usize = 48;

impl SKeyLayer {
    pub fn get(&self, skey: &[u8]) -> Option<Ptr> {
        self.map.get(skey).map(|v| v.0)
    }

    pub fn set(&mut self, skey: &[u8], p: Ptr) {
        self.changed += 1;
        match self.map.get_mut(skey) {
            Some(v) => *v = (p, true),
            None => {
                self.key_bytes += skey.len();
                self.map.insert(skey.to_vec(), (p, true));
                if !self.removed.is_empty() {
                    self.removed.remove(skey);
                }
            }
        }
    }

    pub fn remove(&mut self, skey: &[u8]) {
        if self.map.remove(skey).is_some() {
            self.key_bytes -= skey.len();
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
                    f(k, Some(*p));
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
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(skey)))
            .next_back()
            .map(|(_, p)| p.0)
    }

    /// The pointer of the least key above `skey`.
    pub fn after(&self, skey: &[u8]) -> Option<Ptr> {
        self.map
            .range::<[u8], _>((Bound::Excluded(skey), Bound::Unbounded))
            .next()
            .map(|(_, p)| p.0)
    }

    /// Keys in `[from, to)` (`to == None`: unbounded), in order.
    pub fn range<'a>(
        &'a self,
        from: &'a [u8],
        to: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], Ptr)> + 'a {
        let hi = match to {
            Some(t) => Bound::Excluded(t),
            None => Bound::Unbounded,
        };
        self.map
            .range::<[u8], _>((Bound::Included(from), hi))
            .map(|(k, p)| (k.as_slice(), p.0))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Ptr)> {
        self.map.iter().map(|(k, p)| (k.as_slice(), p.0))
    }

    pub fn memory_bytes(&self) -> usize {
        self.key_bytes + self.map.len() * OVERHEAD
    }

    /// Replaces the layer with `keys` (recovery of a full group, which
    /// lists its keys in order; any order is accepted): not dirty.
    pub fn load_all(&mut self, keys: Vec<(Vec<u8>, Ptr)>) {
        self.key_bytes = keys.iter().map(|(k, _)| k.len()).sum();
        self.map = keys.into_iter().map(|(k, p)| (k, (p, false))).collect();
        self.removed.clear();
        self.changed = 0;
    }

    /// Loads one key from the file (recovery): not dirty.
    pub fn load(&mut self, skey: &[u8], p: Option<Ptr>) {
        match p {
            Some(p) => {
                if let Some(v) = self.map.get_mut(skey) {
                    *v = (p, false);
                } else {
                    self.key_bytes += skey.len();
                    self.map.insert(skey.to_vec(), (p, false));
                }
            }
            None => {
                if self.map.remove(skey).is_some() {
                    self.key_bytes -= skey.len();
                }
            }
        }
    }
}
