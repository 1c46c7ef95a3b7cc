//! Attribute values a compaction reads from its input tables' index blocks
//! instead of parsing each record again (the physical-limit issue, item 5).
//!
//! Every version written to the primary has its own sequence number (a
//! batch numbers its operations consecutively; recovery keeps them), so a
//! table's index blocks that record (sequence number, value) for each
//! indexed entry identify the value of every entry a compaction copies.
//! [`StoredValues`] holds those pairs for one index and one compaction,
//! compactly (sequence number and offset into one byte arena, sorted by
//! sequence number); an entry it does not hold (no attribute, or an input
//! written before the index existed) is read from the record as before.

use strata_lsm::key::SeqNo;

use super::value::{IndexValue, KeyType};

/// (sequence number, value) pairs of one index across a compaction's
/// inputs. Invariant: `entries` is sorted by sequence number with no
/// duplicate; each (offset, length) lies inside `arena`.
pub(crate) struct StoredValues {
    ty: KeyType,
    entries: Vec<(SeqNo, u32, u32)>,
    arena: Vec<u8>,
}

/// Collects pairs up to a byte budget; [`StoredBuilder::finish`] sorts.
pub(crate) struct StoredBuilder {
    ty: KeyType,
    entries: Vec<(SeqNo, u32, u32)>,
    arena: Vec<u8>,
    budget: usize,
}

/// Bytes of memory per stored entry besides its encoded value.
const ENTRY_BYTES: usize = std::mem::size_of::<(SeqNo, u32, u32)>();

impl StoredBuilder {
    /// A builder that gives up beyond `budget` bytes of memory.
    pub fn new(ty: KeyType, budget: usize) -> StoredBuilder {
        StoredBuilder {
            ty,
            entries: Vec::new(),
            arena: Vec::new(),
            budget,
        }
    }

    /// Records that the entry with sequence number `seq` has the encoded
    /// value `enc`. False once the budget is exceeded (the builder is then
    /// useless).
    pub fn push(&mut self, seq: SeqNo, enc: &[u8]) -> bool {
        let used = self.arena.len() + enc.len() + (self.entries.len() + 1) * ENTRY_BYTES;
        let (Ok(off), Ok(len)) = (u32::try_from(self.arena.len()), u32::try_from(enc.len())) else {
            return false;
        };
        if used > self.budget {
            return false;
        }
        self.arena.extend_from_slice(enc);
        self.entries.push((seq, off, len));
        true
    }

    /// The pairs, sorted; a sequence number seen twice (never expected)
    /// is dropped, so that its entries are read from the records.
    pub fn finish(mut self) -> StoredValues {
        self.entries.sort_unstable_by_key(|e| e.0);
        let mut out: Vec<(SeqNo, u32, u32)> = Vec::with_capacity(self.entries.len());
        let mut dup: Option<SeqNo> = None;
        for e in self.entries {
            if out.last().is_some_and(|l| l.0 == e.0) || dup == Some(e.0) {
                out.pop_if(|l| l.0 == e.0);
                dup = Some(e.0);
                continue;
            }
            out.push(e);
        }
        StoredValues {
            ty: self.ty,
            entries: out,
            arena: self.arena,
        }
    }
}

impl StoredValues {
    /// The value of the entry with sequence number `seq`, if stored (and
    /// decodable; a value that does not decode is read from the record).
    pub fn get(&self, seq: SeqNo) -> Option<IndexValue> {
        let i = self.entries.binary_search_by_key(&seq, |e| e.0).ok()?;
        let &(_, off, len) = self.entries.get(i)?;
        let enc = self
            .arena
            .get(off as usize..(off as usize).checked_add(len as usize)?)?;
        IndexValue::decode(self.ty, enc).ok()
    }

    /// Number of stored pairs.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_by_sequence_number() {
        let mut b = StoredBuilder::new(KeyType::I64, 1 << 20);
        for seq in [5u64, 1, 9, 3] {
            assert!(b.push(seq, &IndexValue::I64(seq as i64 * 10).encode()));
        }
        // A duplicate sequence number makes both unknown.
        assert!(b.push(7, &IndexValue::I64(1).encode()));
        assert!(b.push(7, &IndexValue::I64(2).encode()));
        assert!(b.push(7, &IndexValue::I64(3).encode()));
        let s = b.finish();
        assert_eq!(s.len(), 4);
        for seq in [1u64, 3, 5, 9] {
            assert_eq!(s.get(seq), Some(IndexValue::I64(seq as i64 * 10)));
        }
        assert_eq!(s.get(7), None);
        assert_eq!(s.get(2), None);
    }

    #[test]
    fn budget_is_enforced() {
        let mut b = StoredBuilder::new(KeyType::I64, 100);
        let mut pushed = 0;
        while b.push(pushed, &IndexValue::I64(0).encode()) {
            pushed += 1;
        }
        assert!(pushed > 0 && (pushed as usize) * (8 + ENTRY_BYTES) <= 100);
    }
}
