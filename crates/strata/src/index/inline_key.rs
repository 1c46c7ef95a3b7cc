//! Keys held by the indexes' maps in RAM: PERSEID's delta of the
//! persistent validation table (primary keys) and its SKey layer
//! (secondary sort keys), the update memo, and the range filter's map of
//! deletion marks.
//!
//! An [`InlineKey`] holds up to [`INLINE`] bytes in place (no allocation:
//! the keys of most workloads, and every number's sort key) and longer
//! keys on the heap. It hashes, compares and orders as its bytes, so maps
//! of it can be looked up by `&[u8]`. In a hash map, an inline key is
//! compared in the bucket its hash led to: with boxed keys, every probe
//! of a map larger than the CPU's caches missed twice (the bucket, then
//! the key's bytes), a large part of an update's cost under NEXT's memo
//! (`perf` of the online-build writer, session 46). Its order compares
//! the first eight bytes as one big-endian word first, because a search
//! of an ordered map compares keys at every step and a `memcmp` call for
//! a few bytes dominated those searches (PERSEID's lookups, and the replay
//! of SKey records at open).

use std::cmp::Ordering;
use std::fmt;

/// Bytes of a key kept inline in an [`InlineKey`].
pub(crate) const INLINE: usize = 22;

/// A key inline up to [`INLINE`] bytes, else on the heap (24 bytes).
#[derive(Clone)]
pub(crate) enum InlineKey {
    /// Invariant: the length is at most `INLINE`, the bytes past it zero.
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl InlineKey {
    pub(crate) fn new(k: &[u8]) -> InlineKey {
        let mut b = [0u8; INLINE];
        match b.get_mut(..k.len()) {
            Some(dst) => {
                dst.copy_from_slice(k);
                InlineKey::Inline(k.len() as u8, b)
            }
            None => InlineKey::Heap(k.into()),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            InlineKey::Inline(n, b) => b.get(..*n as usize).unwrap_or_default(),
            InlineKey::Heap(b) => b,
        }
    }

    /// Heap bytes a key of these bytes holds (with the allocator's
    /// header), for the DRAM estimates: none if inline.
    pub(crate) fn heap_bytes(k: &[u8]) -> usize {
        if k.len() <= INLINE {
            0
        } else {
            k.len() + 16
        }
    }

    /// The first eight bytes, zero-padded, as a big-endian word. Zero is
    /// the least byte, so where two keys' words differ they are ordered
    /// as the keys are. (An inline key's array is zero past its length.)
    #[inline]
    fn word(&self) -> u64 {
        let b: &[u8] = match self {
            InlineKey::Inline(_, b) => b,
            InlineKey::Heap(b) => b,
        };
        // A heap key is longer than `INLINE`, so both have eight bytes.
        b.first_chunk::<8>().map_or(0, |w| u64::from_be_bytes(*w))
    }
}

impl Ord for InlineKey {
    #[inline]
    fn cmp(&self, o: &InlineKey) -> Ordering {
        match self.word().cmp(&o.word()) {
            // Equal words of keys of at most eight bytes: the shorter is
            // a prefix of the other.
            Ordering::Equal if self.len() <= 8 && o.len() <= 8 => self.len().cmp(&o.len()),
            Ordering::Equal => self.bytes().cmp(o.bytes()),
            other => other,
        }
    }
}

impl PartialOrd for InlineKey {
    fn partial_cmp(&self, o: &InlineKey) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl std::borrow::Borrow<[u8]> for InlineKey {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::ops::Deref for InlineKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::hash::Hash for InlineKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.bytes().hash(h)
    }
}

impl PartialEq for InlineKey {
    fn eq(&self, o: &InlineKey) -> bool {
        self.bytes() == o.bytes()
    }
}

impl Eq for InlineKey {}

impl fmt::Debug for InlineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::fxhash::FastMap;

    #[test]
    fn a_key_is_24_bytes() {
        assert_eq!(std::mem::size_of::<InlineKey>(), 24);
    }

    /// Keys are found by their bytes whether stored inline or on the
    /// heap (the map's hash of a key must be the hash of its bytes).
    #[test]
    fn keys_inline_or_on_the_heap_are_found_by_their_bytes() {
        assert!(std::mem::size_of::<InlineKey>() <= 24);
        let keys: Vec<Vec<u8>> = (0..40usize).map(|n| vec![b'k'; n]).collect();
        let mut m: FastMap<InlineKey, usize> = FastMap::default();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                matches!(InlineKey::new(k), InlineKey::Inline(..)),
                k.len() <= INLINE
            );
            m.insert(InlineKey::new(k), i);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(m.get(k.as_slice()), Some(&i));
            assert_eq!(&*InlineKey::new(k), k.as_slice());
        }
        assert_eq!(m.get(b"absent".as_slice()), None);
        assert_eq!(InlineKey::heap_bytes(&keys[22]), 0);
        assert_eq!(InlineKey::heap_bytes(&keys[23]), 23 + 16);
    }
}
