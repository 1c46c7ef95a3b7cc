//! Internal keys: how a user key, a sequence number and an entry kind are
//! packed into the one byte string that memtables and SSTables sort by.
//!
//! Layout (see `docs/format/sstable.md`): `user_key ‖ fixed64_le(seq << 8 | kind)`.
//! Order: user key ascending (bytewise), then sequence number *descending*,
//! so the newest version of a key comes first. Sequence numbers fit in 56 bits.

#![deny(clippy::indexing_slicing)]

use std::cmp::Ordering;

use crate::coding::{decode_fixed64, put_fixed64};
use crate::error::{Error, Result};

/// Sequence number of a write. Every write gets the next one; "most recent"
/// means highest sequence number.
pub type SeqNo = u64;

/// The largest sequence number we ever assign (56 bits).
pub const MAX_SEQ: SeqNo = (1 << 56) - 1;

/// Length of the trailer appended to a user key.
pub const TRAILER_LEN: usize = 8;

/// What an entry is. The discriminants are on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ValueKind {
    /// A tombstone: the key is deleted as of this sequence number.
    Deletion = 0,
    /// A value.
    Value = 1,
    /// A merge operand: combined with the older entries of its key by the
    /// database's [`crate::merge::MergeOperator`].
    Merge = 2,
}

impl ValueKind {
    /// The kind stored as byte `b`; `None` for an unknown byte.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Deletion),
            1 => Some(ValueKind::Value),
            2 => Some(ValueKind::Merge),
            _ => None,
        }
    }
}

/// Kind used when building a seek key: sorts first among entries of the same
/// (user key, seq) because the trailer is compared descending.
pub const KIND_FOR_SEEK: ValueKind = ValueKind::Merge;

/// The trailer `seq << 8 | kind`; `seq` must be at most [`MAX_SEQ`].
pub fn pack_trailer(seq: SeqNo, kind: ValueKind) -> u64 {
    debug_assert!(seq <= MAX_SEQ);
    (seq << 8) | kind as u64
}

/// Appends the internal key for (`user_key`, `seq`, `kind`) to `dst`.
pub fn append_internal_key(dst: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: ValueKind) {
    dst.extend_from_slice(user_key);
    put_fixed64(dst, pack_trailer(seq, kind));
}

/// Returns a new internal key.
pub fn make_internal_key(user_key: &[u8], seq: SeqNo, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, kind);
    v
}

/// The smallest internal key for `user_key` visible at `snapshot`: seeking
/// to it lands on the newest version with `seq <= snapshot`.
pub fn seek_key(user_key: &[u8], snapshot: SeqNo) -> Vec<u8> {
    make_internal_key(user_key, snapshot, KIND_FOR_SEEK)
}

/// A decoded internal key, borrowing the user key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user key.
    pub user_key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNo,
    /// What the entry is.
    pub kind: ValueKind,
}

/// Decodes an internal key; `Error::Corruption` if it is too short or the
/// kind byte is unknown.
pub fn parse_internal_key(ikey: &[u8]) -> Result<ParsedKey<'_>> {
    let Some((user_key, trailer)) = ikey
        .len()
        .checked_sub(TRAILER_LEN)
        .and_then(|split| ikey.split_at_checked(split))
    else {
        return Err(Error::corruption(format!(
            "internal key of {} bytes is shorter than its trailer",
            ikey.len()
        )));
    };
    let trailer = decode_fixed64(trailer)
        .ok_or_else(|| Error::corruption("internal key trailer truncated"))?;
    let kind = ValueKind::from_u8((trailer & 0xff) as u8)
        .ok_or_else(|| Error::corruption(format!("unknown entry kind {}", trailer & 0xff)))?;
    Ok(ParsedKey {
        user_key,
        seq: trailer >> 8,
        kind,
    })
}

/// The user-key part of an internal key (the whole input if it is too short;
/// callers that need validation use [`parse_internal_key`]).
pub fn user_key(ikey: &[u8]) -> &[u8] {
    ikey.split_at(ikey.len().saturating_sub(TRAILER_LEN)).0
}

/// The trailer of an internal key (0 if it is too short, as
/// [`compare_internal`] orders such keys).
pub(crate) fn trailer(ikey: &[u8]) -> u64 {
    match ikey.len().checked_sub(TRAILER_LEN) {
        Some(split) => ikey.get(split..).and_then(decode_fixed64).unwrap_or(0),
        None => 0,
    }
}

/// Total order on internal keys: user key ascending, then trailer
/// (sequence, kind) descending. Malformed keys (shorter than a trailer)
/// compare as if their trailer were zero; they never reach the tree because
/// every decoder validates first.
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    match user_key(a).cmp(user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// An owned internal key ordered by [`compare_internal`]; the key type of
/// the memtable skiplist.
#[derive(Clone, PartialEq, Eq)]
pub struct InternalKey(pub Vec<u8>);

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for InternalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match parse_internal_key(&self.0) {
            Ok(p) => write!(
                f,
                "{:?}@{}{}",
                String::from_utf8_lossy(p.user_key),
                p.seq,
                if p.kind == ValueKind::Deletion {
                    "D"
                } else {
                    ""
                }
            ),
            Err(_) => write!(f, "<bad key {:?}>", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a1 = make_internal_key(b"a", 1, ValueKind::Value);
        let a5 = make_internal_key(b"a", 5, ValueKind::Value);
        let a5d = make_internal_key(b"a", 5, ValueKind::Deletion);
        let b0 = make_internal_key(b"b", 0, ValueKind::Value);
        assert_eq!(compare_internal(&a5, &a1), Ordering::Less);
        assert_eq!(compare_internal(&a1, &b0), Ordering::Less);
        assert_eq!(compare_internal(&a5, &a5d), Ordering::Less);
        // A seek key at snapshot 3 lands after a5 and before a1.
        let s = seek_key(b"a", 3);
        assert_eq!(compare_internal(&a5, &s), Ordering::Less);
        assert_eq!(compare_internal(&s, &a1), Ordering::Less);
    }

    #[test]
    fn parse_roundtrip_and_errors() {
        let k = make_internal_key(b"key", 42, ValueKind::Deletion);
        let p = parse_internal_key(&k).unwrap();
        assert_eq!(p.user_key, b"key");
        assert_eq!(p.seq, 42);
        assert_eq!(p.kind, ValueKind::Deletion);
        assert!(parse_internal_key(b"short").is_err());
        let mut bad = k.clone();
        let n = bad.len();
        bad[n - 8] = 7; // kind byte
        assert!(parse_internal_key(&bad).is_err());
    }
}
