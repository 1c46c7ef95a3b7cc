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

use super::pkey::Ptr;

/// Secondary key (its sort key, `index::tree::sort_key`) → newest group.
#[derive(Default)]
pub(crate) struct SKeyLayer {
    map: BTreeMap<Vec<u8>, Ptr>,
    /// Keys set or removed since the last flush.
    pub dirty: BTreeSet<Vec<u8>>,
    /// Bytes of the keys (for the DRAM estimate).
    key_bytes: usize,
}

/// Per-key overhead of the ordered map (node share, vector header,
/// pointer), for [`SKeyLayer::memory_bytes`].
const OVERHEAD: usize = 48;

impl SKeyLayer {
    pub fn get(&self, skey: &[u8]) -> Option<Ptr> {
        self.map.get(skey).copied()
    }

    pub fn set(&mut self, skey: &[u8], p: Ptr) {
        match self.map.get_mut(skey) {
            Some(v) => *v = p,
            None => {
                self.key_bytes += skey.len();
                self.map.insert(skey.to_vec(), p);
            }
        }
        self.dirty.insert(skey.to_vec());
    }

    pub fn remove(&mut self, skey: &[u8]) {
        if self.map.remove(skey).is_some() {
            self.key_bytes -= skey.len();
        }
        self.dirty.insert(skey.to_vec());
    }

    /// The pointer of the greatest key below `skey`.
    pub fn before(&self, skey: &[u8]) -> Option<Ptr> {
        self.map
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(skey)))
            .next_back()
            .map(|(_, p)| *p)
    }

    /// The pointer of the least key above `skey`.
    pub fn after(&self, skey: &[u8]) -> Option<Ptr> {
        self.map
            .range::<[u8], _>((Bound::Excluded(skey), Bound::Unbounded))
            .next()
            .map(|(_, p)| *p)
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
            .map(|(k, p)| (k.as_slice(), *p))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Ptr)> {
        self.map.iter().map(|(k, p)| (k.as_slice(), *p))
    }

    pub fn memory_bytes(&self) -> usize {
        self.key_bytes + self.map.len() * OVERHEAD
    }

    /// Loads one key from the file (recovery): not dirty.
    pub fn load(&mut self, skey: Vec<u8>, p: Option<Ptr>) {
        match p {
            Some(p) => {
                if !self.map.contains_key(&skey) {
                    self.key_bytes += skey.len();
                }
                self.map.insert(skey, p);
            }
            None => {
                if self.map.remove(&skey).is_some() {
                    self.key_bytes -= skey.len();
                }
            }
        }
    }
}
