//! Atomic batches of writes, and their encoding in the WAL.
//!
//! Encoding (`docs/format/wal.md`): `fixed64 seq ‖ fixed32 count ‖ records`,
//! record = `kind u8 ‖ varint key_len ‖ key [‖ varint val_len ‖ val]`.
//! Entry `i` of a batch gets sequence number `seq + i`.

use crate::error::Result;
use crate::key::{SeqNo, ValueKind};

/// One operation of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOp<'a> {
    Put { key: &'a [u8], value: &'a [u8] },
    Delete { key: &'a [u8] },
}

impl BatchOp<'_> {
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
        }
    }
    pub fn kind(&self) -> ValueKind {
        match self {
            BatchOp::Put { .. } => ValueKind::Value,
            BatchOp::Delete { .. } => ValueKind::Deletion,
        }
    }
}

/// A set of puts and deletes applied atomically, in order.
#[derive(Clone)]
pub struct WriteBatch {
    _private: (),
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        todo!("wal helper")
    }
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        let _ = (key, value);
        todo!()
    }
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        let _ = key;
        todo!()
    }
    /// Number of operations.
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    pub fn clear(&mut self) {
        todo!()
    }
    /// Bytes of the encoding (what goes to the WAL).
    pub fn encoded_len(&self) -> usize {
        todo!()
    }
    /// Appends all of `other`'s operations.
    pub fn append(&mut self, other: &WriteBatch) {
        let _ = other;
        todo!()
    }
    /// Operations in order; each item fails with `Error::Corruption` only for
    /// batches decoded from damaged bytes.
    pub fn iter(&self) -> BatchIter<'_> {
        todo!()
    }
    /// Sequence number of the first operation (set by the writer).
    pub fn sequence(&self) -> SeqNo {
        todo!()
    }
    pub fn set_sequence(&mut self, seq: SeqNo) {
        let _ = seq;
        todo!()
    }
    /// The encoding.
    pub fn data(&self) -> &[u8] {
        todo!()
    }
    /// Decodes and fully validates an encoding read from the WAL.
    pub fn from_data(data: Vec<u8>) -> Result<WriteBatch> {
        let _ = data;
        todo!()
    }
}

/// Iterator over a batch's operations.
pub struct BatchIter<'a> {
    _p: std::marker::PhantomData<&'a ()>,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchOp<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        todo!()
    }
}
