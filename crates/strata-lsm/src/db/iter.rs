//! The user's view of the merged internal stream at a snapshot: for each
//! user key, its newest entry with `seq <= snapshot`; keys whose newest
//! visible entry is a tombstone are skipped, and merge operands are
//! combined with the key's older entries (see [`crate::merge`]).

use std::sync::Arc;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind};
use crate::merge::{self, MergeOperator};

/// A user key with the sequence number and value of its visible version.
pub type VersionedEntry = (Vec<u8>, SeqNo, Vec<u8>);

/// [`VersionedEntry`] borrowed from the iterator until its next step.
pub type EntryView<'a> = (&'a [u8], SeqNo, &'a [u8]);

/// Forward iterator over `(key, value)` pairs in `[from, to)`.
///
/// It owns what it reads (the merged sources hold `Arc`s of memtables,
/// tables and the version), so files it reads cannot be deleted under it.
pub struct DbIterator {
    inner: Box<dyn InternalIterator>,
    snapshot: SeqNo,
    upper: Option<Vec<u8>>,
    started: bool,
    from: Option<Vec<u8>>,
    done: bool,
    merge_operator: Option<Arc<dyn MergeOperator>>,
    /// The current entry's user key and value (reused: a scan copies each
    /// visible entry once, without allocating once the buffers have grown).
    key_buf: Vec<u8>,
    val_buf: Vec<u8>,
    /// Keeps the version (and so its files) alive while iterating.
    _pin: Box<dyn std::any::Any + Send>,
}

impl DbIterator {
    pub(crate) fn new(
        inner: Box<dyn InternalIterator>,
        snapshot: SeqNo,
        from: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        merge_operator: Option<Arc<dyn MergeOperator>>,
        pin: Box<dyn std::any::Any + Send>,
    ) -> Self {
        DbIterator {
            inner,
            snapshot,
            upper,
            started: false,
            from,
            done: false,
            merge_operator,
            key_buf: Vec::new(),
            val_buf: Vec::new(),
            _pin: pin,
        }
    }

    /// Advances to the next visible user key; returns it with the sequence
    /// number and value of its newest visible version (index rebuilds need
    /// the sequence number).
    pub fn next_versioned(&mut self) -> Option<Result<VersionedEntry>> {
        match self.next_ref()? {
            Ok((_, seq, _)) => {
                let k = std::mem::take(&mut self.key_buf);
                let v = std::mem::take(&mut self.val_buf);
                Some(Ok((k, seq, v)))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// [`DbIterator::next_versioned`] without allocating: the key, sequence
    /// number and value of the next visible user key, borrowed until the
    /// next call (scans that look at each entry once).
    pub fn next_ref(&mut self) -> Option<Result<EntryView<'_>>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(seq)) => Some(Ok((&self.key_buf, seq, &self.val_buf))),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    /// Advances to the next visible user key; leaves it and its value in
    /// `key_buf` and `val_buf` and returns its sequence number.
    fn step(&mut self) -> Result<Option<SeqNo>> {
        if !self.started {
            self.started = true;
            match &self.from {
                Some(f) => self.inner.seek(&key::seek_key(f, self.snapshot))?,
                None => self.inner.seek_to_first()?,
            }
        }
        while self.inner.valid() {
            let parsed = key::parse_internal_key(self.inner.key())?;
            if let Some(u) = &self.upper {
                if parsed.user_key >= u.as_slice() {
                    return Ok(None);
                }
            }
            if parsed.seq > self.snapshot {
                self.inner.next()?;
                continue;
            }
            // Newest visible entry of this user key.
            self.key_buf.clear();
            self.key_buf.extend_from_slice(parsed.user_key);
            let (seq, kind) = (parsed.seq, parsed.kind);
            let found = match kind {
                ValueKind::Value => {
                    self.val_buf.clear();
                    self.val_buf.extend_from_slice(self.inner.value());
                    self.inner.next()?;
                    Some(seq)
                }
                ValueKind::Deletion => {
                    self.inner.next()?;
                    None
                }
                ValueKind::Merge => {
                    let user_key = std::mem::take(&mut self.key_buf);
                    let merged = self.merged(&user_key);
                    self.key_buf = user_key;
                    merged?.map(|v| {
                        self.val_buf = v;
                        seq
                    })
                }
            };
            // Skip the older versions of the same key.
            while self.inner.valid() && key::user_key(self.inner.key()) == self.key_buf.as_slice() {
                self.inner.next()?;
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}

impl DbIterator {
    /// At a merge operand of `user_key` (its newest visible entry): reads
    /// the key's older entries down to a value or tombstone, leaving the
    /// cursor on that entry (or past the key), and returns the full merge.
    fn merged(&mut self, user_key: &[u8]) -> Result<Option<Vec<u8>>> {
        let op = merge::require(self.merge_operator.as_ref())?;
        let mut history = merge::History::default();
        history.push(ValueKind::Merge, self.inner.value());
        self.inner.next()?;
        while self.inner.valid() {
            let p = key::parse_internal_key(self.inner.key())?;
            if p.user_key != user_key || !history.push(p.kind, self.inner.value()) {
                break;
            }
            self.inner.next()?;
        }
        history.full_merge(op, user_key)
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_versioned().map(|r| r.map(|(k, _, v)| (k, v)))
    }
}
