//! Iterators over internal keys, and their composition.
//!
//! Every source of entries (memtable, block, table, level, merge) implements
//! [`InternalIterator`]: a cursor over `(internal key, value)` pairs in
//! [`crate::key::compare_internal`] order. `merging` combines sources newest
//! first. The user view at a snapshot (newest visible version of each key,
//! tombstones hidden) is `db::iter`, above merge operands.

pub mod merging;

use crate::error::Result;

/// A cursor over internal entries in internal-key order.
///
/// Contract: `key()`/`value()` may be called only while `valid()`; a method
/// that returns an error leaves the iterator invalid.
pub trait InternalIterator: Send {
    /// True if positioned at an entry.
    fn valid(&self) -> bool;
    /// Positions at the first entry (invalid if there is none).
    fn seek_to_first(&mut self) -> Result<()>;
    /// Positions at the first entry whose internal key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the next entry (invalid past the last); requires `valid()`.
    fn next(&mut self) -> Result<()>;
    /// The current internal key; requires `valid()`.
    fn key(&self) -> &[u8];
    /// The current value; requires `valid()`.
    fn value(&self) -> &[u8];
}

impl<I: InternalIterator + ?Sized> InternalIterator for Box<I> {
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        (**self).seek_to_first()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
    fn next(&mut self) -> Result<()> {
        (**self).next()
    }
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    fn value(&self) -> &[u8] {
        (**self).value()
    }
}

/// An iterator over a sorted in-memory vector; used by tests and by small
/// sources.
pub struct VecIter {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
}

impl VecIter {
    /// `entries` must be sorted by `compare_internal`.
    pub fn new(entries: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        let pos = entries.len();
        VecIter { entries, pos }
    }
}

impl InternalIterator for VecIter {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.pos = 0;
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.pos = self
            .entries
            .partition_point(|(k, _)| crate::key::compare_internal(k, target).is_lt());
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.pos += 1;
        Ok(())
    }
    fn key(&self) -> &[u8] {
        &self.entries[self.pos].0
    }
    fn value(&self) -> &[u8] {
        &self.entries[self.pos].1
    }
}
