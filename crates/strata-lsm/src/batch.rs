//! Atomic batches of writes, and their encoding in the WAL.
//!
//! Encoding (`docs/format/wal.md`): `fixed64 seq ‖ fixed32 count ‖ records`,
//! record = `kind u8 ‖ varint key_len ‖ key [‖ varint val_len ‖ val]`
//! (kind 0 delete, 1 put, 2 merge operand; the value is absent for deletes).
//! Entry `i` of a batch gets sequence number `seq + i`.
//!
//! The batch *is* its encoding: operations are appended to one buffer whose
//! header count is kept current, so handing a batch to the WAL needs no copy
//! and a batch read back from the WAL is validated once, in `from_data`.

#![deny(clippy::indexing_slicing)]

use crate::coding::{
    decode_fixed32, decode_fixed64, get_length_prefixed, put_length_prefixed, varint_len,
};
use crate::error::{Error, Result};
use crate::key::{SeqNo, ValueKind, MAX_SEQ};

/// `fixed64 seq ‖ fixed32 count`.
pub const BATCH_HEADER_SIZE: usize = 12;

/// One operation of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// Stores `value` under `key`.
    Put {
        /// The user key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Deletes `key`.
    Delete {
        /// The user key.
        key: &'a [u8],
    },
    /// A merge operand (see [`crate::merge`]).
    Merge {
        /// The user key.
        key: &'a [u8],
        /// The operand.
        value: &'a [u8],
    },
}

impl<'a> BatchOp<'a> {
    /// The user key the operation writes.
    pub fn key(&self) -> &'a [u8] {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } | BatchOp::Merge { key, .. } => key,
        }
    }
    /// The value or merge operand the operation stores (empty for a
    /// deletion).
    pub fn value(&self) -> &'a [u8] {
        match self {
            BatchOp::Put { value, .. } | BatchOp::Merge { value, .. } => value,
            BatchOp::Delete { .. } => &[],
        }
    }
    /// The entry kind the operation stores.
    pub fn kind(&self) -> ValueKind {
        match self {
            BatchOp::Put { .. } => ValueKind::Value,
            BatchOp::Delete { .. } => ValueKind::Deletion,
            BatchOp::Merge { .. } => ValueKind::Merge,
        }
    }
}

/// A set of puts and deletes applied atomically, in order.
///
/// Invariant: `rep` is a well-formed encoding whose header count equals the
/// number of records, and `summary` is [`Summary`] of its records (both
/// enforced by every constructor and mutator).
#[derive(Clone, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    summary: Summary,
}

/// What the writer checks of a batch's operations, kept as they are
/// appended so that a write does not decode its batch to check it (about
/// 200 instructions of a one-put write). A function of the records alone,
/// so two batches with one encoding are equal.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Summary {
    longest_key: usize,
    longest_value: usize,
    merges: bool,
}

impl Summary {
    fn add(&mut self, kind: ValueKind, key: &[u8], value: &[u8]) {
        self.longest_key = self.longest_key.max(key.len());
        self.longest_value = self.longest_value.max(value.len());
        self.merges |= kind == ValueKind::Merge;
    }

    fn join(&mut self, other: Summary) {
        self.longest_key = self.longest_key.max(other.longest_key);
        self.longest_value = self.longest_value.max(other.longest_value);
        self.merges |= other.merges;
    }
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("sequence", &self.sequence())
            .field("count", &self.len())
            .field("bytes", &self.rep.len())
            .finish()
    }
}

/// Bytes of one operation's encoding: kind, length-prefixed key, and the
/// length-prefixed value if it has one.
fn op_len(key: &[u8], value: Option<&[u8]>) -> usize {
    let field = |b: &[u8]| varint_len(b.len() as u64) + b.len();
    1 + field(key) + value.map_or(0, field)
}

impl WriteBatch {
    /// An empty batch: sequence 0, count 0.
    pub fn new() -> WriteBatch {
        WriteBatch {
            rep: vec![0; BATCH_HEADER_SIZE],
            summary: Summary::default(),
        }
    }

    /// An empty batch whose encoding has room for `bytes` bytes of
    /// operations before it reallocates (a loader sizes each batch like
    /// the one before: a batch grown from empty copied its bytes about
    /// once more in reallocations).
    pub fn with_capacity(bytes: usize) -> WriteBatch {
        let mut rep = Vec::with_capacity(BATCH_HEADER_SIZE.saturating_add(bytes));
        rep.resize(BATCH_HEADER_SIZE, 0);
        WriteBatch {
            rep,
            summary: Summary::default(),
        }
    }

    /// A batch holding exactly one put of `key` → `value`, its encoding
    /// allocated once at its final size (a `new` batch grew by a
    /// reallocation per single put: 445 instructions of a 6.2 k-instruction
    /// `Db::put`, callgrind of a 200 k-put replay).
    pub fn single_put(key: &[u8], value: &[u8]) -> WriteBatch {
        let mut rep = Vec::with_capacity(BATCH_HEADER_SIZE + op_len(key, Some(value)));
        rep.resize(BATCH_HEADER_SIZE, 0);
        let mut b = WriteBatch {
            rep,
            summary: Summary::default(),
        };
        b.put(key, value);
        b
    }

    /// Appends a put of `key` → `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.reserve_op(key, Some(value));
        self.rep.push(ValueKind::Value as u8);
        put_length_prefixed(&mut self.rep, key);
        put_length_prefixed(&mut self.rep, value);
        self.summary.add(ValueKind::Value, key, value);
        self.set_count(self.count().wrapping_add(1));
        self
    }

    /// Appends a deletion of `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.reserve_op(key, None);
        self.rep.push(ValueKind::Deletion as u8);
        put_length_prefixed(&mut self.rep, key);
        self.summary.add(ValueKind::Deletion, key, &[]);
        self.set_count(self.count().wrapping_add(1));
        self
    }

    /// Appends a merge operand for `key`, combined with the key's value by
    /// the database's merge operator (see [`crate::merge`]).
    pub fn merge(&mut self, key: &[u8], operand: &[u8]) -> &mut Self {
        self.reserve_op(key, Some(operand));
        self.rep.push(ValueKind::Merge as u8);
        put_length_prefixed(&mut self.rep, key);
        put_length_prefixed(&mut self.rep, operand);
        self.summary.add(ValueKind::Merge, key, operand);
        self.set_count(self.count().wrapping_add(1));
        self
    }

    /// Grows `rep` once for one operation's record (tag, key and optional
    /// value, each length-prefixed), so appending it reallocates at most
    /// once (a single put into a fresh batch grew it twice: ~1 k
    /// instructions of a no-index put).
    fn reserve_op(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.rep.reserve(op_len(key, value));
    }

    /// True if some operation is a merge operand.
    pub fn has_merge(&self) -> bool {
        self.summary.merges
    }

    /// Bytes of the longest key and of the longest value (or merge
    /// operand) among the operations; 0 for none.
    pub fn longest(&self) -> (usize, usize) {
        (self.summary.longest_key, self.summary.longest_value)
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count() as usize
    }

    /// True if the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Removes every operation and resets the sequence number to 0.
    pub fn clear(&mut self) {
        self.rep.clear();
        self.rep.resize(BATCH_HEADER_SIZE, 0);
        self.summary = Summary::default();
    }

    /// Bytes of the encoding (what goes to the WAL).
    pub fn encoded_len(&self) -> usize {
        self.rep.len()
    }

    /// Appends all of `other`'s operations; keeps `self`'s sequence number.
    pub fn append(&mut self, other: &WriteBatch) {
        self.rep
            .extend_from_slice(other.rep.get(BATCH_HEADER_SIZE..).unwrap_or(&[]));
        self.summary.join(other.summary);
        self.set_count(self.count().wrapping_add(other.count()));
    }

    /// Operations in order; each item fails with `Error::Corruption` only for
    /// batches decoded from damaged bytes.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            rest: self.rep.get(BATCH_HEADER_SIZE..).unwrap_or(&[]),
            remaining: self.count(),
            done: false,
        }
    }

    /// Sequence number of the first operation (set by the writer).
    pub fn sequence(&self) -> SeqNo {
        decode_fixed64(&self.rep).unwrap_or(0)
    }

    /// Sets the sequence number of the first operation (the writer does,
    /// when it assigns sequence numbers to a group).
    pub fn set_sequence(&mut self, seq: SeqNo) {
        // `rep` always holds a header (`new` writes it, `from_data` checks it).
        if let Some(head) = self.rep.first_chunk_mut::<8>() {
            *head = seq.to_le_bytes();
        }
    }

    /// The encoding.
    pub fn data(&self) -> &[u8] {
        &self.rep
    }

    /// Decodes and fully validates an encoding read from the WAL: the
    /// header, every record, the count, no trailing bytes, and that every
    /// sequence number it assigns fits in 56 bits.
    pub fn from_data(data: Vec<u8>) -> Result<WriteBatch> {
        if data.len() < BATCH_HEADER_SIZE {
            return Err(Error::corruption(format!(
                "write batch of {} bytes is shorter than its header",
                data.len()
            )));
        }
        let mut batch = WriteBatch {
            rep: data,
            summary: Summary::default(),
        };
        let count = batch.count() as u64;
        let last_seq = batch.sequence().checked_add(count.saturating_sub(1));
        if count > 0 && !matches!(last_seq, Some(s) if s <= MAX_SEQ) {
            return Err(Error::corruption(format!(
                "write batch sequence {} + count {count} exceeds the sequence space",
                batch.sequence()
            )));
        }
        // The iterator checks each record, the count and trailing bytes.
        let mut summary = Summary::default();
        for op in batch.iter() {
            let op = op?;
            summary.add(op.kind(), op.key(), op.value());
        }
        batch.summary = summary;
        Ok(batch)
    }

    /// Takes the encoding back.
    pub fn into_data(self) -> Vec<u8> {
        self.rep
    }

    fn count(&self) -> u32 {
        self.rep.get(8..).and_then(decode_fixed32).unwrap_or(0)
    }

    fn set_count(&mut self, n: u32) {
        // `rep` always holds a header (`new` writes it, `from_data` checks it).
        if let Some(field) = self.rep.get_mut(8..BATCH_HEADER_SIZE) {
            field.copy_from_slice(&n.to_le_bytes());
        }
    }
}

impl<'a> IntoIterator for &'a WriteBatch {
    type Item = Result<BatchOp<'a>>;
    type IntoIter = BatchIter<'a>;
    fn into_iter(self) -> BatchIter<'a> {
        self.iter()
    }
}

/// Iterator over a batch's operations. After yielding an error it ends.
pub struct BatchIter<'a> {
    /// Undecoded records.
    rest: &'a [u8],
    /// Records the header says are left.
    remaining: u32,
    done: bool,
}

impl<'a> BatchIter<'a> {
    fn decode_next(&mut self) -> Result<BatchOp<'a>> {
        let bad = |what: &str| Error::corruption(format!("write batch: {what}"));
        let (&kind, mut src) = self
            .rest
            .split_first()
            .ok_or_else(|| bad("fewer records than its count"))?;
        let key = get_length_prefixed(&mut src).ok_or_else(|| bad("truncated key"))?;
        let op = match ValueKind::from_u8(kind) {
            Some(ValueKind::Value) => {
                let value = get_length_prefixed(&mut src).ok_or_else(|| bad("truncated value"))?;
                BatchOp::Put { key, value }
            }
            Some(ValueKind::Deletion) => BatchOp::Delete { key },
            Some(ValueKind::Merge) => {
                let value =
                    get_length_prefixed(&mut src).ok_or_else(|| bad("truncated operand"))?;
                BatchOp::Merge { key, value }
            }
            None => return Err(bad(&format!("unknown record kind {kind}"))),
        };
        self.rest = src;
        Ok(op)
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchOp<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.remaining == 0 {
            self.done = true;
            if self.rest.is_empty() {
                return None;
            }
            return Some(Err(Error::corruption(format!(
                "write batch: {} bytes after its last record",
                self.rest.len()
            ))));
        }
        self.remaining -= 1;
        let op = self.decode_next();
        if op.is_err() {
            self.done = true;
        }
        Some(op)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            (0, Some(self.remaining as usize + 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put(b"k1", b"v1")
            .delete(b"k2")
            .put(b"", b"")
            .put(&[7u8; 300], &[9u8; 200])
            .merge(b"k3", b"operand");
        b.set_sequence(1234);
        b
    }

    fn ops(b: &WriteBatch) -> Vec<BatchOp<'_>> {
        b.iter().collect::<Result<Vec<_>>>().unwrap()
    }

    #[test]
    fn new_batch_is_header_only() {
        let b = WriteBatch::new();
        assert_eq!(b.data(), &[0u8; BATCH_HEADER_SIZE]);
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
        assert_eq!(b.sequence(), 0);
        assert_eq!(b.iter().count(), 0);
        assert_eq!(WriteBatch::from_data(b.data().to_vec()).unwrap(), b);
    }

    #[test]
    fn roundtrip() {
        let b = sample();
        assert_eq!(b.len(), 5);
        assert_eq!(b.sequence(), 1234);
        assert_eq!(b.encoded_len(), b.data().len());
        let expect = vec![
            BatchOp::Put {
                key: b"k1",
                value: b"v1",
            },
            BatchOp::Delete { key: b"k2" },
            BatchOp::Put {
                key: b"",
                value: b"",
            },
            BatchOp::Put {
                key: &[7u8; 300],
                value: &[9u8; 200],
            },
            BatchOp::Merge {
                key: b"k3",
                value: b"operand",
            },
        ];
        assert_eq!(ops(&b), expect);
        assert!(b.has_merge());
        assert_eq!(expect[1].kind(), ValueKind::Deletion);
        assert_eq!(expect[4].kind(), ValueKind::Merge);
        assert_eq!(expect[0].key(), b"k1");
        let d = WriteBatch::from_data(b.data().to_vec()).unwrap();
        assert_eq!(ops(&d), expect);
        assert_eq!(d.sequence(), 1234);
        // Exact bytes of a small batch (docs/format/wal.md).
        let mut small = WriteBatch::new();
        small.put(b"a", b"bc").delete(b"d");
        small.set_sequence(5);
        assert!(!small.has_merge());
        assert_eq!(
            small.data(),
            &[5, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 1, b'a', 2, b'b', b'c', 0, 1, b'd']
        );
        small.merge(b"e", b"f");
        assert_eq!(small.data()[21..], [2, 1, b'e', 1, b'f']);
    }

    #[test]
    fn append_and_clear() {
        let mut a = WriteBatch::new();
        a.put(b"x", b"1");
        a.set_sequence(10);
        let b = sample();
        a.append(&b);
        a.append(&WriteBatch::new());
        assert_eq!(a.len(), 6);
        assert_eq!(a.sequence(), 10);
        let all = ops(&a);
        assert_eq!(
            all[0],
            BatchOp::Put {
                key: b"x",
                value: b"1"
            }
        );
        assert_eq!(all[1..], ops(&b)[..]);
        WriteBatch::from_data(a.data().to_vec()).unwrap();
        a.clear();
        assert_eq!(a, WriteBatch::new());
    }

    #[test]
    fn every_truncation_rejected() {
        let data = sample().into_data();
        for cut in 0..data.len() {
            let r = WriteBatch::from_data(data[..cut].to_vec());
            assert!(r.as_ref().is_err_and(Error::is_corruption), "cut {cut}");
        }
    }

    #[test]
    fn bad_encodings_rejected() {
        let good = sample().into_data();
        let corrupt = |d: Vec<u8>| WriteBatch::from_data(d).unwrap_err().is_corruption();
        // Trailing byte.
        let mut d = good.clone();
        d.push(0);
        assert!(corrupt(d));
        // Count too high and too low.
        for count in [4u32, 6, u32::MAX] {
            let mut d = good.clone();
            d[8..12].copy_from_slice(&count.to_le_bytes());
            assert!(corrupt(d), "count {count}");
        }
        // Unknown kind.
        let mut d = good.clone();
        d[BATCH_HEADER_SIZE] = 3;
        assert!(corrupt(d));
        // Sequence numbers beyond 56 bits.
        let mut d = good.clone();
        d[..8].copy_from_slice(&(MAX_SEQ - 3).to_le_bytes());
        assert!(corrupt(d));
        let mut d = good;
        d[..8].copy_from_slice(&(MAX_SEQ - 4).to_le_bytes());
        assert!(WriteBatch::from_data(d).is_ok());
    }

    #[test]
    fn garbage_never_panics() {
        let good = sample().into_data();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..good.len() {
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut d = good.clone();
                d[i] = x as u8;
                if let Ok(b) = WriteBatch::from_data(d) {
                    assert!(b.iter().all(|op| op.is_ok()));
                }
            }
        }
        for len in 0..64 {
            let d: Vec<u8> = (0..len).map(|j| (j * 37 + len) as u8).collect();
            let _ = WriteBatch::from_data(d);
            let _ = WriteBatch::from_data(vec![0xff; len]);
        }
    }

    /// The summary recomputed from the records, as `from_data` does.
    fn recomputed(b: &WriteBatch) -> Summary {
        let d = WriteBatch::from_data(b.data().to_vec()).unwrap();
        assert!(d == *b, "a decoded batch equals the one it came from");
        d.summary
    }

    #[test]
    fn summary_follows_the_records() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut b = WriteBatch::new();
        let mut other = WriteBatch::with_capacity(64);
        for step in 0..2_000 {
            let key = vec![b'k'; next(40) as usize];
            let value = vec![b'v'; next(300) as usize];
            let target = if next(3) == 0 { &mut other } else { &mut b };
            match next(9) {
                0..=4 => {
                    target.put(&key, &value);
                }
                5 | 6 => {
                    target.delete(&key);
                }
                _ => {
                    target.merge(&key, &value);
                }
            }
            if step % 97 == 0 {
                b.append(&other);
                other.clear();
            }
            if step % 389 == 0 {
                b.clear();
            }
            for w in [&b, &other] {
                assert_eq!(w.summary, recomputed(w), "step {step}");
                assert_eq!(
                    w.has_merge(),
                    w.iter().any(|op| matches!(op, Ok(BatchOp::Merge { .. })))
                );
            }
        }
        let one = WriteBatch::single_put(&[1; 70], &[2; 3]);
        assert_eq!(one.longest(), (70, 3));
        assert_eq!(one.summary, recomputed(&one));
        assert_eq!(WriteBatch::new().longest(), (0, 0));
    }
}
