//! Attribute values a compaction reads from its input tables' index blocks
//! instead of parsing each record again (the physical-limit issue, item 5).
//!
//! Every version written to the primary has its own sequence number (a
//! batch numbers its operations consecutively; recovery keeps them), so a
//! table's index blocks that record (sequence number, value) for each
//! indexed entry identify the value of every entry a compaction copies.
//! [`StoredValues`] holds those pairs for one index and one compaction,
//! compactly (the values in one byte arena, found by sequence number in one
//! slot per sequence number of the inputs' range, or by binary search when
//! the sequence numbers are sparse in that range); an entry it does not
//! hold (no attribute, or an input written before the index existed) is
//! read from the record as before.

use std::sync::Arc;

use strata_lsm::key::SeqNo;
use strata_lsm::version::FileMetaData;

use super::value::{IndexValue, KeyType};

/// A value slot meaning "no value" in [`BySeq::Dense`].
const NONE: u32 = u32::MAX;

/// How a sequence number finds its value's span.
enum BySeq {
    /// `slots[seq - base]` is the span index of `seq`, or [`NONE`].
    Dense { base: SeqNo, slots: Vec<u32> },
    /// (sequence number, span index), sorted by sequence number, without
    /// duplicates.
    Sorted(Vec<(SeqNo, u32)>),
}

/// (sequence number, value) pairs of one index across a compaction's
/// inputs. Invariant: every span index `by_seq` holds is an index of
/// `spans`, and each span (offset, length) lies inside `arena`; a sequence
/// number pushed twice (never expected) maps to nothing.
pub(crate) struct StoredValues {
    by_seq: BySeq,
    spans: Vec<(u32, u32)>,
    arena: Vec<u8>,
}

/// Collects pairs up to a byte budget; [`StoredBuilder::finish`] indexes
/// them by sequence number.
pub(crate) struct StoredBuilder {
    ty: KeyType,
    pairs: Vec<(SeqNo, u32)>,
    spans: Vec<(u32, u32)>,
    arena: Vec<u8>,
    budget: usize,
}

/// Bytes of memory per stored entry besides its encoded value: its
/// (seq, slot) pair and its span. The dense slots are counted in
/// [`StoredBuilder::finish`], which uses them only within the budget.
const ENTRY_BYTES: usize = std::mem::size_of::<(SeqNo, u32)>() + std::mem::size_of::<(u32, u32)>();

impl StoredBuilder {
    /// A builder that gives up beyond `budget` bytes of memory.
    pub fn new(ty: KeyType, budget: usize) -> StoredBuilder {
        StoredBuilder {
            ty,
            pairs: Vec::new(),
            spans: Vec::new(),
            arena: Vec::new(),
            budget,
        }
    }

    /// A builder for a compaction of `inputs`, with room for their
    /// entries (as many as the budget allows).
    pub fn for_inputs(ty: KeyType, budget: usize, inputs: &[Arc<FileMetaData>]) -> StoredBuilder {
        let mut b = StoredBuilder::new(ty, budget);
        let entries = inputs.iter().map(|f| f.num_entries).sum::<u64>();
        b.reserve(usize::try_from(entries).unwrap_or(usize::MAX));
        b
    }

    /// Room for `n` more entries (values of a fixed width counted at that
    /// width, strings at 16 bytes), as many as the budget allows.
    pub fn reserve(&mut self, n: usize) {
        let width = self.ty.encoded_width().unwrap_or(16);
        let n = n.min(self.budget / (ENTRY_BYTES + width));
        self.pairs.reserve(n);
        self.spans.reserve(n);
        self.arena.reserve(n.saturating_mul(width));
    }

    /// Records that the entry with sequence number `seq` has the encoded
    /// value `enc`. False once the budget is exceeded (the builder is then
    /// useless). Bytes that do not decode as a value of the index's type
    /// are not recorded (that entry is read from its record).
    pub fn push(&mut self, seq: SeqNo, enc: &[u8]) -> bool {
        if !IndexValue::is_encoding(self.ty, enc) {
            return true;
        }
        let used = self.arena.len() + enc.len() + (self.pairs.len() + 1) * ENTRY_BYTES;
        let (Ok(off), Ok(len), Ok(slot)) = (
            u32::try_from(self.arena.len()),
            u32::try_from(enc.len()),
            u32::try_from(self.spans.len()),
        ) else {
            return false;
        };
        if used > self.budget || slot == NONE {
            return false;
        }
        self.arena.extend_from_slice(enc);
        self.spans.push((off, len));
        self.pairs.push((seq, slot));
        true
    }

    /// The pairs, indexed by sequence number: one slot per sequence number
    /// while the range costs at most 4 slots per pair and the slots fit
    /// in the budget, else sorted (in place). A
    /// sequence number seen twice (never expected) is dropped, so that its
    /// entries are read from the records.
    pub fn finish(self) -> StoredValues {
        let (mut spans, mut arena) = (self.spans, self.arena);
        let pairs = self.pairs;
        let lo = pairs.iter().map(|p| p.0).min().unwrap_or(0);
        let hi = pairs.iter().map(|p| p.0).max().unwrap_or(0);
        let span = hi - lo;
        let used = arena.len() + pairs.len() * ENTRY_BYTES;
        let slots_fit = usize::try_from(span)
            .ok()
            .and_then(|s| s.checked_add(1)?.checked_mul(4)?.checked_add(used))
            .is_some_and(|total| total <= self.budget);
        let by_seq =
            if !pairs.is_empty() && span < (pairs.len() as u64).saturating_mul(4) && slots_fit {
                let mut slots = vec![NONE; span as usize + 1];
                let mut dup: Vec<SeqNo> = Vec::new();
                for &(seq, slot) in &pairs {
                    if let Some(s) = slots.get_mut((seq - lo) as usize) {
                        if *s != NONE {
                            dup.push(seq);
                        }
                        *s = slot;
                    }
                }
                for seq in dup {
                    if let Some(s) = slots.get_mut((seq - lo) as usize) {
                        *s = NONE;
                    }
                }
                // The spans and bytes in sequence-number order, when a
                // second arena fits the budget: pushed in another order (a
                // memtable's by value, a compaction's by input), a lookup
                // missed the cache on the span and on the bytes; entries
                // written in key order whose keys follow their sequence
                // numbers (a flush or compaction of time-ordered keys) now
                // read both front to back (perf, NEXT ingest at 2 M: the
                // observer's loads of these bytes were 8% of its CPU).
                let slot_bytes = slots.len().saturating_mul(std::mem::size_of::<u32>());
                if used.saturating_add(slot_bytes).saturating_add(arena.len()) <= self.budget {
                    let mut seq_spans = Vec::with_capacity(spans.len());
                    let mut seq_arena = Vec::with_capacity(arena.len());
                    for s in slots.iter_mut().filter(|s| **s != NONE) {
                        let bytes = spans.get(*s as usize).and_then(|&(off, len)| {
                            arena.get(off as usize..(off as usize).checked_add(len as usize)?)
                        });
                        // Spans index the arena (invariant), and each
                        // sequence number has one slot: every span is
                        // copied once, and the new offsets fit as the old.
                        match bytes {
                            Some(b) => {
                                *s = seq_spans.len() as u32;
                                seq_spans.push((seq_arena.len() as u32, b.len() as u32));
                                seq_arena.extend_from_slice(b);
                            }
                            None => *s = NONE,
                        }
                    }
                    spans = seq_spans;
                    arena = seq_arena;
                }
                BySeq::Dense { base: lo, slots }
            } else {
                let mut pairs = pairs;
                pairs.sort_unstable_by_key(|e| e.0);
                let mut out: Vec<(SeqNo, u32)> = Vec::with_capacity(pairs.len());
                let mut dup: Option<SeqNo> = None;
                for e in pairs {
                    if out.last().is_some_and(|l| l.0 == e.0) || dup == Some(e.0) {
                        out.pop_if(|l| l.0 == e.0);
                        dup = Some(e.0);
                        continue;
                    }
                    out.push(e);
                }
                BySeq::Sorted(out)
            };
        StoredValues {
            by_seq,
            spans,
            arena,
        }
    }
}

impl StoredValues {
    /// The encoded value of the entry with sequence number `seq`, if
    /// stored: [`IndexValue::encode`] of a value of the index's type.
    pub fn encoded(&self, seq: SeqNo) -> Option<&[u8]> {
        let slot = match &self.by_seq {
            BySeq::Dense { base, slots } => {
                let s = *slots.get(usize::try_from(seq.checked_sub(*base)?).ok()?)?;
                (s != NONE).then_some(s)?
            }
            BySeq::Sorted(v) => {
                let i = v.binary_search_by_key(&seq, |e| e.0).ok()?;
                v.get(i)?.1
            }
        };
        let &(off, len) = self.spans.get(slot as usize)?;
        self.arena
            .get(off as usize..(off as usize).checked_add(len as usize)?)
    }

    /// Number of stored pairs.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match &self.by_seq {
            BySeq::Dense { slots, .. } => slots.iter().filter(|s| **s != NONE).count(),
            BySeq::Sorted(v) => v.len(),
        }
    }

    #[cfg(test)]
    fn is_dense(&self) -> bool {
        matches!(self.by_seq, BySeq::Dense { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl StoredValues {
        /// The value of `seq`, for an i64 index.
        fn get(&self, seq: SeqNo) -> Option<IndexValue> {
            IndexValue::decode(KeyType::I64, self.encoded(seq)?).ok()
        }
    }

    #[test]
    fn lookups_by_sequence_number() {
        // Dense (the range 1..=9 holds 7 pushes) and sparse (far apart).
        for far in [0u64, 1 << 40] {
            let mut b = StoredBuilder::new(KeyType::I64, 1 << 20);
            for seq in [5u64, 1, 9 + far, 3] {
                assert!(b.push(seq, &IndexValue::I64(seq as i64 * 10).encode()));
            }
            // A duplicate sequence number makes both unknown.
            assert!(b.push(7, &IndexValue::I64(1).encode()));
            assert!(b.push(7, &IndexValue::I64(2).encode()));
            assert!(b.push(7, &IndexValue::I64(3).encode()));
            let s = b.finish();
            assert_eq!(s.is_dense(), far == 0);
            assert_eq!(s.len(), 4);
            for seq in [1u64, 3, 5, 9 + far] {
                assert_eq!(s.get(seq), Some(IndexValue::I64(seq as i64 * 10)));
            }
            for seq in [7, 2, 0, 8, 10 + far, u64::MAX] {
                assert_eq!(s.get(seq), None, "{seq}");
            }
        }
        // Bytes that are no i64 are not stored.
        let mut b = StoredBuilder::new(KeyType::I64, 1 << 20);
        assert!(b.push(1, &[1, 2, 3]));
        assert!(b.push(2, &IndexValue::I64(-4).encode()));
        let s = b.finish();
        assert_eq!(s.get(1), None);
        assert_eq!(s.encoded(2), Some(&IndexValue::I64(-4).encode()[..]));
        let s = StoredBuilder::new(KeyType::I64, 1 << 20).finish();
        assert_eq!(s.len(), 0);
        assert_eq!(s.get(0), None);
    }

    /// Values pushed out of sequence-number order (strings of several
    /// lengths) are found by sequence number; within the budget their bytes
    /// are laid out in sequence-number order, else left as pushed.
    #[test]
    fn dense_values_in_sequence_order_within_the_budget() {
        let order = [7u64, 2, 9, 4, 3, 8, 5, 6];
        let text = |seq: u64| IndexValue::Str("v".repeat(seq as usize)).encode();
        // 8 pairs of 24 bytes and 44 bytes of values: 236; dense slots 32
        // more; a second arena 44 more.
        for budget in [1 << 20, 270] {
            let mut b = StoredBuilder::new(KeyType::String, budget);
            for &seq in &order {
                assert!(b.push(seq, &text(seq)));
            }
            let s = b.finish();
            assert!(s.is_dense());
            for &seq in &order {
                assert_eq!(s.encoded(seq), Some(&text(seq)[..]), "{budget}");
            }
            assert_eq!(s.encoded(1), None);
            assert_eq!(s.encoded(10), None);
            let offsets: Vec<usize> = (2..=9u64)
                .map(|seq| s.encoded(seq).unwrap().as_ptr() as usize - s.arena.as_ptr() as usize)
                .collect();
            let sorted = offsets.windows(2).all(|w| w[0] < w[1]);
            assert_eq!(sorted, budget > 270, "{budget}: {offsets:?}");
        }
    }

    #[test]
    fn dense_slots_only_within_the_budget() {
        // 100 values over 200 sequence numbers: dense costs 804 bytes of
        // slots beyond the pairs.
        for (budget, dense) in [(1 << 20, true), (100 * (8 + ENTRY_BYTES) + 500, false)] {
            let mut b = StoredBuilder::new(KeyType::I64, budget);
            for i in 0..100u64 {
                assert!(b.push(i * 2, &IndexValue::I64(i as i64).encode()));
            }
            let s = b.finish();
            assert_eq!(s.is_dense(), dense, "budget {budget}");
            assert_eq!(s.get(198), Some(IndexValue::I64(99)));
            assert_eq!(s.get(197), None);
        }
    }

    #[test]
    fn budget_is_enforced() {
        let mut b = StoredBuilder::new(KeyType::I64, 1000);
        let mut pushed = 0;
        while b.push(pushed, &IndexValue::I64(0).encode()) {
            pushed += 1;
        }
        assert!(pushed > 0 && (pushed as usize) * (8 + ENTRY_BYTES) <= 1000);
    }
}
