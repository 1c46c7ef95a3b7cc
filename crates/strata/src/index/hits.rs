//! A query's answer: its records, newest first, either as owned [`Hit`]s or
//! packed into a few large buffers.
//!
//! A strategy that copies each result out of a data block (NEXT) packs the
//! keys and values into chunked byte buffers instead of two allocations
//! per result: at a thousand results a query, those allocations and their
//! frees were about a tenth of the query's instructions (callgrind, 2 M
//! tweets). Strategies that already hold owned records hand them over as
//! they are (`From<Vec<Hit>>`). Either way the caller sees the same type:
//! it borrows each result as a [`HitRef`], or takes owned [`Hit`]s with
//! [`Hits::into_vec`] or by value iteration.

use std::fmt;
use std::ops::Range;

use strata_lsm::key::SeqNo;

use super::Hit;

/// The records a query returned, newest first.
#[derive(Clone, Default)]
pub struct Hits {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Owned(Vec<Hit>),
    Packed(Packed),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Owned(Vec::new())
    }
}

/// Keys and values in a few large buffers, rows in answer order.
#[derive(Clone, Default)]
pub(crate) struct Packed {
    /// Chunks `0..chunks.len()`; chunk `chunks.len()` is `last`. (The
    /// last chunk apart: most answers fill one chunk, and then the list
    /// allocates nothing.)
    chunks: Vec<Vec<u8>>,
    last: Vec<u8>,
    rows: Vec<Row>,
}

/// One packed result: its key is `chunks[chunk][start..key_end]`, its
/// value (if any) `chunks[chunk][key_end..value_end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    chunk: usize,
    start: usize,
    key_end: usize,
    value_end: Option<usize>,
    pub seq: SeqNo,
}

impl Row {
    fn key(&self) -> Range<usize> {
        self.start..self.key_end
    }

    fn value(&self) -> Option<Range<usize>> {
        self.value_end.map(|end| self.key_end..end)
    }

    /// The row after its buffer's chunks moved `by` places up (see
    /// [`PackBuf::absorb`]).
    pub fn shifted(mut self, by: usize) -> Row {
        self.chunk += by;
        self
    }
}

/// Largest chunk a growing [`PackBuf`] starts on its own (a record larger
/// than this gets a chunk of its size).
const MAX_CHUNK: usize = 4 << 20;

/// Bytes of keys and values packed rows hold, for a strategy's buffer.
///
/// The bytes live in chunks that are never moved once written: a full
/// chunk is left as it is and a new one, twice as large (up to
/// [`MAX_CHUNK`]), takes the next row. Growing one `Vec` instead copied
/// everything packed so far at each doubling (glibc's `realloc` copies
/// blocks below its adaptive mmap threshold): 7.5% of a medium spatial
/// query's instructions at 2 M tweets (callgrind).
#[derive(Default)]
pub(crate) struct PackBuf {
    /// Chunks already full; row `chunk` indexes them, `full.len()` names
    /// `cur`.
    full: Vec<Vec<u8>>,
    cur: Vec<u8>,
    /// Capacity of the next chunk to start.
    next: usize,
}

impl PackBuf {
    /// A buffer whose first chunk holds `n` bytes.
    pub fn with_capacity(n: usize) -> PackBuf {
        PackBuf {
            full: Vec::new(),
            cur: Vec::with_capacity(n),
            next: n.saturating_mul(2).clamp(4096, MAX_CHUNK),
        }
    }

    /// Appends a result's key and value; the returned row locates them.
    #[inline(always)]
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>, seq: SeqNo) -> Row {
        let need = key.len() + value.map_or(0, <[u8]>::len);
        if self.cur.capacity() - self.cur.len() < need {
            let fresh = Vec::with_capacity(self.next.max(need));
            self.next = self.next.saturating_mul(2).min(MAX_CHUNK);
            let old = std::mem::replace(&mut self.cur, fresh);
            if !old.is_empty() {
                self.full.push(old);
            }
        }
        let start = self.cur.len();
        self.cur.extend_from_slice(key);
        let key_end = self.cur.len();
        let value_end = value.map(|v| {
            self.cur.extend_from_slice(v);
            self.cur.len()
        });
        Row {
            chunk: self.full.len(),
            start,
            key_end,
            value_end,
            seq,
        }
    }

    /// Takes `other`'s chunks after this buffer's own, without copying
    /// bytes. Rows pushed to this buffer stay valid; a row pushed to
    /// `other` is valid here once [`Row::shifted`] by the returned count.
    /// The next push starts a fresh chunk.
    pub fn absorb(&mut self, other: PackBuf) -> usize {
        // `cur` keeps index `full.len()` (the index its rows carry).
        let cur = std::mem::take(&mut self.cur);
        self.full.push(cur);
        let base = self.full.len();
        self.full.extend(other.full);
        self.full.push(other.cur);
        base
    }

    /// The key of `row`, pushed to this buffer.
    pub fn key(&self, row: &Row) -> &[u8] {
        let bytes = self.full.get(row.chunk).unwrap_or(&self.cur);
        bytes.get(row.key()).unwrap_or_default()
    }

    /// The answer made of `rows` (each pushed to this buffer), in order.
    /// A last chunk less than half used is shrunk first (in place: no
    /// copy), so that an answer holds about what it returns.
    pub fn into_hits(mut self, rows: Vec<Row>) -> Hits {
        if self.cur.capacity() > 2 * self.cur.len() + 4096 {
            self.cur.shrink_to_fit();
        }
        Hits {
            repr: Repr::Packed(Packed {
                chunks: self.full,
                last: self.cur,
                rows,
            }),
        }
    }
}

/// One result of a query, borrowed from its [`Hits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitRef<'a> {
    /// Primary key of the record.
    pub key: &'a [u8],
    /// `None` in keys-only mode.
    pub value: Option<&'a [u8]>,
    /// Sequence number of the write that stored this version.
    pub seq: SeqNo,
}

impl HitRef<'_> {
    /// An owned copy.
    pub fn to_hit(&self) -> Hit {
        Hit {
            key: self.key.to_vec(),
            value: self.value.map(<[u8]>::to_vec),
            seq: self.seq,
        }
    }
}

impl Packed {
    fn row(&self, row: &Row) -> HitRef<'_> {
        // Rows are made by `PackBuf::push` on these chunks: in bounds.
        let bytes = self.chunks.get(row.chunk).unwrap_or(&self.last);
        HitRef {
            key: bytes.get(row.key()).unwrap_or_default(),
            value: row.value().map(|r| bytes.get(r).unwrap_or_default()),
            seq: row.seq,
        }
    }
}

impl Hits {
    /// Number of results.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Owned(v) => v.len(),
            Repr::Packed(p) => p.rows.len(),
        }
    }

    /// True if the query matched nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Result `i` (0 is the newest).
    pub fn get(&self, i: usize) -> Option<HitRef<'_>> {
        match &self.repr {
            Repr::Owned(v) => v.get(i).map(borrow),
            Repr::Packed(p) => p.rows.get(i).map(|r| p.row(r)),
        }
    }

    /// The results, newest first, borrowed.
    pub fn iter(&self) -> HitIter<'_> {
        HitIter {
            inner: match &self.repr {
                Repr::Owned(v) => IterRepr::Owned(v.iter()),
                Repr::Packed(p) => IterRepr::Packed(p, p.rows.iter()),
            },
        }
    }

    /// The results as owned [`Hit`]s, newest first.
    pub fn into_vec(self) -> Vec<Hit> {
        match self.repr {
            Repr::Owned(v) => v,
            Repr::Packed(p) => p.rows.iter().map(|r| p.row(r).to_hit()).collect(),
        }
    }

    /// Keeps the `n` newest results.
    pub fn truncate(&mut self, n: usize) {
        match &mut self.repr {
            Repr::Owned(v) => v.truncate(n),
            Repr::Packed(p) => p.rows.truncate(n),
        }
    }
}

fn borrow(h: &Hit) -> HitRef<'_> {
    HitRef {
        key: &h.key,
        value: h.value.as_deref(),
        seq: h.seq,
    }
}

impl From<Vec<Hit>> for Hits {
    /// Owned results, already newest first.
    fn from(v: Vec<Hit>) -> Hits {
        Hits {
            repr: Repr::Owned(v),
        }
    }
}

impl FromIterator<Hit> for Hits {
    /// Owned results, given newest first.
    fn from_iter<I: IntoIterator<Item = Hit>>(it: I) -> Hits {
        Hits::from(it.into_iter().collect::<Vec<Hit>>())
    }
}

impl From<Hits> for Vec<Hit> {
    fn from(h: Hits) -> Vec<Hit> {
        h.into_vec()
    }
}

impl PartialEq for Hits {
    fn eq(&self, other: &Hits) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Hits {}

impl fmt::Debug for Hits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Borrowing iterator over [`Hits`], newest first.
#[derive(Clone)]
pub struct HitIter<'a> {
    inner: IterRepr<'a>,
}

#[derive(Clone)]
enum IterRepr<'a> {
    Owned(std::slice::Iter<'a, Hit>),
    Packed(&'a Packed, std::slice::Iter<'a, Row>),
}

impl<'a> Iterator for HitIter<'a> {
    type Item = HitRef<'a>;

    fn next(&mut self) -> Option<HitRef<'a>> {
        match &mut self.inner {
            IterRepr::Owned(it) => it.next().map(borrow),
            IterRepr::Packed(p, it) => it.next().map(|r| p.row(r)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            IterRepr::Owned(it) => it.size_hint(),
            IterRepr::Packed(_, it) => it.size_hint(),
        }
    }
}

impl DoubleEndedIterator for HitIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            IterRepr::Owned(it) => it.next_back().map(borrow),
            IterRepr::Packed(p, it) => it.next_back().map(|r| p.row(r)),
        }
    }
}

impl ExactSizeIterator for HitIter<'_> {}

impl<'a> IntoIterator for &'a Hits {
    type Item = HitRef<'a>;
    type IntoIter = HitIter<'a>;

    fn into_iter(self) -> HitIter<'a> {
        self.iter()
    }
}

impl IntoIterator for Hits {
    type Item = Hit;
    type IntoIter = std::vec::IntoIter<Hit>;

    /// Owned results, newest first (packed results are copied out).
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(k: &str, v: Option<&str>, seq: SeqNo) -> Hit {
        Hit {
            key: k.as_bytes().to_vec(),
            value: v.map(|v| v.as_bytes().to_vec()),
            seq,
        }
    }

    #[test]
    fn packed_and_owned_answers_read_alike() {
        let owned = vec![
            hit("b", Some("{\"x\":2}"), 9),
            hit("a", None, 7),
            hit("", Some(""), 3),
        ];
        let mut buf = PackBuf::with_capacity(4);
        let rows: Vec<Row> = owned
            .iter()
            .map(|h| buf.push(&h.key, h.value.as_deref(), h.seq))
            .collect();
        assert_eq!(buf.key(&rows[0]), b"b");
        let packed = buf.into_hits(rows);
        let from_vec = Hits::from(owned.clone());
        assert_eq!(packed, from_vec);
        assert_eq!(packed.len(), 3);
        let second = packed.get(1).expect("three results");
        assert_eq!((second.key, second.value, second.seq), (&b"a"[..], None, 7));
        let third = packed.get(2).expect("three results");
        assert_eq!(third.value, Some(&b""[..]));
        assert!(packed.get(3).is_none());
        let back: Vec<SeqNo> = packed.iter().rev().map(|h| h.seq).collect();
        assert_eq!(back, [3, 7, 9]);
        assert_eq!(packed.clone().into_vec(), owned);
        assert_eq!(from_vec.into_iter().collect::<Vec<_>>(), owned);
        let mut top = packed;
        top.truncate(1);
        assert_eq!(top.into_vec(), owned[..1].to_vec());
    }

    #[test]
    fn rows_survive_new_chunks() {
        // Rows of every size, some larger than any chunk: each row keeps
        // its bytes after the buffer started later chunks.
        let mut owned = Vec::new();
        for i in 0..3000u64 {
            let len = match i % 500 {
                0 => MAX_CHUNK + 7,
                1 => 0,
                n => (n as usize * 37) % 2000,
            };
            let v = vec![b'a' + (i % 26) as u8; len];
            owned.push(Hit {
                key: format!("k{i}").into_bytes(),
                value: (i % 7 != 0).then_some(v),
                seq: i,
            });
        }
        let mut buf = PackBuf::with_capacity(1024);
        let mut rows = Vec::new();
        for h in &owned {
            rows.push(buf.push(&h.key, h.value.as_deref(), h.seq));
            assert_eq!(buf.key(&rows[0]), b"k0");
        }
        assert!(buf.full.len() > 3, "several chunks: {}", buf.full.len());
        for (r, h) in rows.iter().zip(&owned) {
            assert_eq!(buf.key(r), &h.key[..]);
        }
        assert_eq!(buf.into_hits(rows).into_vec(), owned);
    }

    #[test]
    fn absorbed_buffers_keep_every_row() {
        // Three buffers filled in turn (with pushes to the first after it
        // absorbed the second), merged: every row reads back its bytes.
        let hit = |i: u64| Hit {
            key: format!("key{i}").into_bytes(),
            value: (!i.is_multiple_of(3)).then(|| vec![b'v'; (i as usize * 53) % 3000]),
            seq: i,
        };
        let mut main = PackBuf::with_capacity(256);
        let mut rows = Vec::new();
        let mut owned = Vec::new();
        for i in 0..40 {
            let h = hit(i);
            rows.push(main.push(&h.key, h.value.as_deref(), h.seq));
            owned.push(h);
        }
        for part in 0..2u64 {
            let mut other = PackBuf::with_capacity(512);
            let mut theirs = Vec::new();
            for i in 0..30 {
                let h = hit(1000 * (part + 1) + i);
                theirs.push(other.push(&h.key, h.value.as_deref(), h.seq));
                owned.push(h);
            }
            let by = main.absorb(other);
            rows.extend(theirs.into_iter().map(|r| r.shifted(by)));
            let h = hit(5000 + part);
            rows.push(main.push(&h.key, h.value.as_deref(), h.seq));
            owned.push(h);
        }
        for (r, h) in rows.iter().zip(&owned) {
            assert_eq!(main.key(r), &h.key[..]);
        }
        assert_eq!(main.into_hits(rows).into_vec(), owned);
    }
}
