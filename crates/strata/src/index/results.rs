//! The result set of a query answered component by component: the newest
//! valid version per key, and when the top K can no longer change.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use strata_lsm::key::SeqNo;

use super::Hit;

/// A valid candidate: sequence number, value (unless keys-only), and the
/// (table, block offset) it was read from, if from a table.
pub(crate) type Candidate = (SeqNo, Option<Vec<u8>>, Option<(u64, u64)>);

/// Collects candidates, keeps the newest version per key, and knows when
/// the top K can no longer change.
pub(crate) struct Results {
    limit: Option<usize>,
    /// key → (seq, value, data block holding it when read from a table).
    hits: HashMap<Vec<u8>, Candidate>,
    /// The `limit` highest sequence numbers seen (min-heap).
    top: BinaryHeap<Reverse<SeqNo>>,
}

impl Results {
    pub fn new(limit: Option<usize>) -> Self {
        Results {
            limit,
            hits: HashMap::new(),
            top: BinaryHeap::new(),
        }
    }

    pub fn push(
        &mut self,
        key: Vec<u8>,
        seq: SeqNo,
        value: Option<Vec<u8>>,
        block: Option<(u64, u64)>,
    ) {
        if self.hits.get(&key).is_some_and(|(s, _, _)| *s >= seq) {
            return;
        }
        self.hits.insert(key, (seq, value, block));
        if let Some(k) = self.limit {
            self.top.push(Reverse(seq));
            if self.top.len() > k {
                self.top.pop();
            }
        }
    }

    /// True if `limit` results newer than `seq` are known.
    pub fn full_before(&self, seq: SeqNo) -> bool {
        match self.limit {
            Some(0) => true,
            Some(k) => self.top.len() >= k && self.top.peek().is_some_and(|Reverse(s)| *s > seq),
            None => false,
        }
    }

    /// The hits, newest first, and the number of distinct data blocks
    /// holding them.
    pub fn finish(self) -> (Vec<Hit>, u64) {
        let (hits, blocks, _) = self.finish_with_components();
        (hits, blocks)
    }

    /// [`Results::finish`], and the number of components holding the hits:
    /// distinct tables, plus one if some hit came from a memtable.
    pub fn finish_with_components(self) -> (Vec<Hit>, u64, u64) {
        let mut v: Vec<(Hit, Option<(u64, u64)>)> = self
            .hits
            .into_iter()
            .map(|(key, (seq, value, block))| (Hit { key, value, seq }, block))
            .collect();
        v.sort_by_key(|h| Reverse(h.0.seq));
        if let Some(k) = self.limit {
            v.truncate(k);
        }
        let blocks: HashSet<(u64, u64)> = v.iter().filter_map(|(_, b)| *b).collect();
        let tables: HashSet<u64> = blocks.iter().map(|(t, _)| *t).collect();
        let in_mem = v.iter().any(|(_, b)| b.is_none());
        let components = tables.len() as u64 + u64::from(in_mem);
        (
            v.into_iter().map(|(h, _)| h).collect(),
            blocks.len() as u64,
            components,
        )
    }
}
