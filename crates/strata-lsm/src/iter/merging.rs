//! Merges sorted internal iterators into one sorted stream.
//!
//! Internal keys are unique across sources (every write has its own sequence
//! number), so no tie-breaking is needed. A binary heap of child indexes
//! keyed by current key gives O(log n) per step.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::compare_internal;

/// Merges its children into one cursor in internal-key order.
pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    /// Min-heap (by current key) of indexes of valid children.
    heap: BinaryHeap<HeapItem>,
    /// Copy of each heap child's key, so the heap can compare without
    /// borrowing the children.
    current: Option<usize>,
}

struct HeapItem {
    key: Vec<u8>,
    child: usize,
}

impl PartialEq for HeapItem {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for HeapItem {}
impl PartialOrd for HeapItem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapItem {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        compare_internal(&other.key, &self.key).then(other.child.cmp(&self.child))
    }
}

impl MergingIterator {
    /// A cursor over the union of `children` (positioned by a seek).
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator {
            children,
            heap: BinaryHeap::new(),
            current: None,
        }
    }

    fn rebuild(&mut self) {
        self.heap.clear();
        for (i, c) in self.children.iter().enumerate() {
            if c.valid() {
                self.heap.push(HeapItem {
                    key: c.key().to_vec(),
                    child: i,
                });
            }
        }
        self.current = self.heap.peek().map(|h| h.child);
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.rebuild();
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.rebuild();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        let Some(top) = self.heap.pop() else {
            return Ok(());
        };
        let child = &mut self.children[top.child];
        if let Err(e) = child.next() {
            self.current = None;
            self.heap.clear();
            return Err(e);
        }
        if child.valid() {
            let mut item = top;
            item.key.clear();
            item.key.extend_from_slice(child.key());
            self.heap.push(item);
        }
        self.current = self.heap.peek().map(|h| h.child);
        Ok(())
    }

    fn key(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].key(),
            None => &[],
        }
    }

    fn value(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].value(),
            None => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iter::VecIter;
    use crate::key::{make_internal_key, ValueKind};

    fn ik(k: &str, s: u64) -> Vec<u8> {
        make_internal_key(k.as_bytes(), s, ValueKind::Value)
    }

    #[test]
    fn merges_in_order_and_seeks() {
        let a = VecIter::new(vec![
            (ik("a", 3), b"a3".to_vec()),
            (ik("c", 1), b"c1".to_vec()),
        ]);
        let b = VecIter::new(vec![
            (ik("a", 5), b"a5".to_vec()),
            (ik("b", 2), b"b2".to_vec()),
        ]);
        let empty = VecIter::new(vec![]);
        let mut m = MergingIterator::new(vec![Box::new(a), Box::new(b), Box::new(empty)]);
        m.seek_to_first().unwrap();
        let mut got = vec![];
        while m.valid() {
            got.push(String::from_utf8(m.value().to_vec()).unwrap());
            m.next().unwrap();
        }
        assert_eq!(got, ["a5", "a3", "b2", "c1"]);
        m.seek(&ik("b", 9)).unwrap();
        assert_eq!(m.value(), b"b2");
    }
}
