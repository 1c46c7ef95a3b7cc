//! The hash table of chain heads beside the SKey layer's ordered map
//! (`skey`): a 32-bit hash of a secondary key → the pointer (page id,
//! offset) of its newest PKey group. A hint: the caller checks that the
//! group is the key's, and asks the ordered map when it is not.
//!
//! An equality lookup starts here, and at the benchmark's scale it finds
//! the table cold (one line of a megabyte per lookup). So each bucket is
//! one cache line holding five entries (hashes, page ids and offsets in
//! arrays, and an overflow flag): a lookup reads the line of the key's
//! bucket and usually nothing else. A general hash map reads a control
//! group first and then, depending on it, the entry: two misses in a row.
//!
//! Invariants (checked by the tests against a map):
//! * a hash is in at most one way;
//! * an entry of hash `h` sits in the bucket `home(h)` or in one of the
//!   buckets after it (wrapping), and every bucket from `home(h)` up to
//!   the one before it has its overflow flag set. The flag is set when an
//!   insert finds the bucket full and goes on; only a rebuild clears it
//!   (a removal leaves it: a later lookup then reads one bucket more).

/// Ways (entries) of a bucket: five 12-byte entries and the flag fill a
/// cache line.
const WAYS: usize = 5;

/// The page id of a free way (page ids stay below 2^31).
const FREE: u32 = u32::MAX;

/// Largest share of ways used, in eighths, before the table doubles:
/// at 5/8 (three entries a bucket on average) about one bucket in twelve
/// overflows into the next.
const MAX_LOAD_8THS: usize = 5;

/// One cache line of the table.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Bucket {
    hash: [u32; WAYS],
    page: [u32; WAYS],
    off: [u32; WAYS],
    /// Nonzero once an insert found this bucket full and went on to the
    /// next: a lookup that misses here looks there too.
    overflow: u32,
}

const EMPTY: Bucket = Bucket {
    hash: [0; WAYS],
    page: [FREE; WAYS],
    off: [0; WAYS],
    overflow: 0,
};

impl Bucket {
    /// The way holding `h`.
    fn find(&self, h: u32) -> Option<usize> {
        self.hash
            .iter()
            .zip(&self.page)
            .position(|(&x, &p)| x == h && p != FREE)
    }

    /// Way `w` set to `h` → (`page`, `off`).
    fn set(&mut self, w: usize, h: u32, page: u32, off: u32) {
        if let (Some(x), Some(p), Some(o)) = (
            self.hash.get_mut(w),
            self.page.get_mut(w),
            self.off.get_mut(w),
        ) {
            (*x, *p, *o) = (h, page, off);
        }
    }

    /// The entries: (hash, page id, offset).
    fn entries(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.hash
            .iter()
            .zip(&self.page)
            .zip(&self.off)
            .filter(|((_, &p), _)| p != FREE)
            .map(|((&h, &p), &o)| (h, p, o))
    }

    fn free_way(&self) -> Option<usize> {
        self.page.iter().position(|&p| p == FREE)
    }
}

/// Hash → (page id, offset), see the module documentation.
#[derive(Default)]
pub(crate) struct HeadTable {
    buckets: Vec<Bucket>,
    len: usize,
}

impl HeadTable {
    /// Entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bucket an entry of hash `h` belongs in (`buckets` nonempty).
    fn home(&self, h: u32) -> usize {
        ((u64::from(h) * self.buckets.len() as u64) >> 32) as usize
    }

    /// The bucket after `i`, wrapping.
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.buckets.len() {
            0
        } else {
            i + 1
        }
    }

    /// The bucket and way of hash `h`.
    fn locate(&self, h: u32) -> Option<(usize, usize)> {
        if self.buckets.is_empty() {
            return None;
        }
        let mut i = self.home(h);
        for _ in 0..self.buckets.len() {
            let b = self.buckets.get(i)?;
            if let Some(w) = b.find(h) {
                return Some((i, w));
            }
            if b.overflow == 0 {
                return None;
            }
            i = self.next(i);
        }
        None
    }

    pub fn get(&self, h: u32) -> Option<(u32, u32)> {
        let (i, w) = self.locate(h)?;
        let b = self.buckets.get(i)?;
        Some((*b.page.get(w)?, *b.off.get(w)?))
    }

    /// Sets the entry of `h` (replacing any).
    pub fn insert(&mut self, h: u32, (page, off): (u32, u32)) {
        debug_assert_ne!(page, FREE, "page id beyond 2^31");
        if let Some((i, w)) = self.locate(h) {
            if let Some(b) = self.buckets.get_mut(i) {
                b.set(w, h, page, off);
            }
            return;
        }
        if (self.len + 1) * 8 > self.buckets.len() * WAYS * MAX_LOAD_8THS {
            self.resize((self.len + 1).max(self.len * 2));
        }
        self.place(h, page, off);
    }

    /// Puts a new entry of `h` (absent) in the first free way from its
    /// home on, flagging the full buckets it passes.
    fn place(&mut self, h: u32, page: u32, off: u32) {
        let mut i = self.home(h);
        for _ in 0..self.buckets.len() {
            let Some(b) = self.buckets.get_mut(i) else {
                return;
            };
            if let Some(w) = b.free_way() {
                b.set(w, h, page, off);
                self.len += 1;
                return;
            }
            b.overflow = 1;
            i = self.next(i);
        }
    }

    pub fn remove(&mut self, h: u32) {
        if let Some((i, w)) = self.locate(h) {
            if let Some(p) = self.buckets.get_mut(i).and_then(|b| b.page.get_mut(w)) {
                *p = FREE;
                self.len -= 1;
            }
        }
    }

    pub fn clear(&mut self) {
        self.buckets.clear();
        self.len = 0;
    }

    /// Room for `n` entries in all: rebuilt (overflow flags cleared) if
    /// the table would pass its maximum load with them.
    pub fn reserve(&mut self, n: usize) {
        if n * 8 > self.buckets.len() * WAYS * MAX_LOAD_8THS {
            self.resize(n);
        }
    }

    /// Rebuilt with buckets for `n` entries at three quarters of the
    /// maximum load.
    fn resize(&mut self, n: usize) {
        let count = (n * 8 * 4 / (WAYS * MAX_LOAD_8THS * 3)).max(1);
        // (On huge pages where the system allows: a lookup probes a random
        // bucket; see `strata_lsm::mem`.)
        let old = std::mem::replace(
            &mut self.buckets,
            strata_lsm::mem::filled(count, count, EMPTY),
        );
        self.len = 0;
        for (h, page, off) in old.iter().flat_map(Bucket::entries) {
            self.place(h, page, off);
        }
    }

    /// Bytes of the buckets.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    /// Checks the module's invariants and the contents against `model`.
    fn check(t: &HeadTable, model: &HashMap<u32, (u32, u32)>) {
        assert_eq!(t.len(), model.len());
        let mut seen = HashMap::new();
        for (i, b) in t.buckets.iter().enumerate() {
            for (h, _, _) in b.entries() {
                assert!(seen.insert(h, i).is_none(), "hash {h} twice");
                // Every bucket from the home up to this one overflowed.
                let mut j = t.home(h);
                while j != i {
                    assert!(
                        t.buckets.get(j).is_some_and(|b| b.overflow != 0),
                        "hash {h} in {i}, home {j}"
                    );
                    j = t.next(j);
                }
            }
        }
        for (&h, &v) in model {
            assert_eq!(t.get(h), Some(v), "hash {h}");
        }
    }

    /// Random inserts, updates and removals over a narrow hash range (so
    /// that buckets fill and overflow, also across the wrap), and growth.
    #[test]
    fn agrees_with_a_map_under_random_operations() {
        for (range, ops) in [(8u32, 500), (64, 3000), (4000, 20_000), (u32::MAX, 20_000)] {
            let mut t = HeadTable::default();
            let mut model = HashMap::new();
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(range);
            for step in 0..ops {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Hashes clustered at both ends (the home of a large hash
                // is the last bucket: its overflow wraps).
                let h = match x % 3 {
                    0 => (x >> 8) as u32 % range,
                    1 => u32::MAX - (x >> 8) as u32 % range,
                    _ => (x >> 32) as u32,
                };
                let v = ((x >> 40) as u32 & 0x7fff_ffff, step as u32);
                if x.is_multiple_of(7) {
                    t.remove(h);
                    model.remove(&h);
                } else {
                    t.insert(h, v);
                    model.insert(h, v);
                }
                assert_eq!(t.get(h), model.get(&h).copied());
            }
            check(&t, &model);
            // A rebuild keeps everything.
            t.reserve(t.len() * 4);
            check(&t, &model);
            for h in model.keys() {
                t.remove(*h);
            }
            assert_eq!(t.len(), 0);
            assert!(model.keys().all(|h| t.get(*h).is_none()));
        }
    }

    #[test]
    fn an_empty_table_answers_none() {
        let mut t = HeadTable::default();
        assert_eq!(t.get(7), None);
        t.remove(7);
        assert_eq!(t.len(), 0);
        t.insert(7, (1, 2));
        assert_eq!(t.get(7), Some((1, 2)));
        t.clear();
        assert_eq!(t.get(7), None);
    }
}
