//! The volatile table of hybrid validation (PERSEID §4.3): the primary
//! keys with obsolete entries, each with its latest sequence number and
//! count, in RAM.
//!
//! An *ordered* linear-probing hash table over the table file's hash
//! ([`super::table::key_hash`]): slot `i` holds entries whose home
//! `home(h) = h · homes / 2⁶⁴` is at most `i`, and the occupied slots are
//! sorted by hash. Because the home is monotone in the hash, and the table
//! file lists its volatile section in hash order, the rebuild at open
//! (§4.3 Recovery) writes the slots front to back, in one sequential pass,
//! instead of scattering one random insert per key over fresh memory (the
//! cost that dominated an open's profile with a general hash map). A
//! lookup starts at the key's home and stops at the first empty slot or
//! larger hash: the entries it passes are contiguous (one or two cache
//! lines at the load kept here), and it reads no separate control bytes.
//!
//! Invariants (checked by the tests against a model):
//! * every entry sits at or after its home, with no empty slot between;
//! * occupied slots are in non-decreasing hash order, across clusters too
//!   (a cluster starts after an empty slot, beyond every earlier home);
//! * a slot stores the upper 32 bits of the hash (the order and the home
//!   follow from them), never 0: 0 marks an empty slot, and an upper half
//!   of 0 is stored as 1, which keeps the order;
//! * there is no wrap-around: a cluster that runs past the last home
//!   continues in tail slots appended to the vector.

use strata_lsm::key::SeqNo;

/// A volatile-table value: the key's persistent value (it has `n > 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VEntry {
    pub seq: SeqNo,
    pub count: u32,
    pub has_entry: bool,
}

/// Bytes of a key held in its slot; longer keys are in the table's
/// `long` list and the slot holds their index there.
const SLOT_KEY: usize = 16;
/// `len` of a slot whose key is in the `long` list.
const LONG: u64 = 0xff;

/// 32 bytes: the upper half of the key's hash, the count, the sequence
/// number with the key's length, and the key (or its index in `long`).
#[derive(Clone)]
struct Slot {
    /// The upper 32 bits of the key's hash, at least 1; 0: empty.
    hash: u32,
    /// The count, and `has_entry` in the top bit.
    count: u32,
    /// `seq << 8 | len`: sequence numbers fit 56 bits
    /// ([`strata_lsm::key::MAX_SEQ`]); `len` is the key's length, or
    /// [`LONG`].
    seq_len: u64,
    /// The key's bytes (zero-padded), or for a long key its index in the
    /// `long` list (little-endian, first 8 bytes).
    key: [u8; SLOT_KEY],
}

const HAS_ENTRY: u32 = 1 << 31;

impl Slot {
    /// Counts reach at most the entries of one key, far below 2³¹.
    fn set(&mut self, v: VEntry) {
        debug_assert!(v.seq <= strata_lsm::key::MAX_SEQ);
        self.count = v.count.min(HAS_ENTRY - 1) | if v.has_entry { HAS_ENTRY } else { 0 };
        self.seq_len = v.seq << 8 | (self.seq_len & 0xff);
    }

    fn entry(&self) -> VEntry {
        VEntry {
            seq: self.seq_len >> 8,
            count: self.count & !HAS_ENTRY,
            has_entry: self.count & HAS_ENTRY != 0,
        }
    }

    /// Index in the `long` list of a long key's slot.
    fn long_index(&self) -> Option<usize> {
        if self.seq_len & 0xff != LONG {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(self.key.get(..8)?);
        Some(u64::from_le_bytes(b) as usize)
    }
}

const EMPTY: Slot = Slot {
    hash: 0,
    count: 0,
    seq_len: 0,
    key: [0; SLOT_KEY],
};

/// Heap bytes a key of this length takes beyond its slot (for the DRAM
/// estimate): its bytes and the allocator's header.
fn long_bytes(k: &[u8]) -> usize {
    if k.len() <= SLOT_KEY {
        0
    } else {
        k.len() + 16
    }
}

/// The stored form of a key hash: its upper half (the table file's order
/// is by the whole hash, so by this too), never 0.
fn stored(h: u64) -> u32 {
    ((h >> 32) as u32).max(1)
}

/// Largest share of homes occupied (in 32nds) before the table grows.
/// The order keeps lookups short at this load: a lookup stops at the
/// first larger hash, found or not.
const MAX_LOAD_32NDS: usize = 29;

/// Smallest share of homes occupied (in 32nds) before the table shrinks,
/// once it has more than [`MIN_SHRINK_HOMES`] homes.
const MIN_LOAD_32NDS: usize = 8;
const MIN_SHRINK_HOMES: usize = 1024;

/// Tail slots reserved beyond `homes` (a cluster running past the last
/// home is rare and short).
fn tail_reserve(homes: usize) -> usize {
    16 + homes / 512
}

#[derive(Clone, Default)]
pub(crate) struct VolatileTable {
    /// `homes` home slots, then tail slots (see the module doc).
    slots: Vec<Slot>,
    homes: usize,
    len: usize,
    heap_key_bytes: usize,
    /// Position of the last entry placed by [`VolatileTable::push_sorted`]
    /// (the next one goes after it).
    fill_end: usize,
    /// Keys longer than [`SLOT_KEY`], by index (a slot names its own).
    long: Vec<Box<[u8]>>,
    /// Free indices of `long`.
    free: Vec<usize>,
}

impl VolatileTable {
    /// An empty table sized for `n` entries without growing.
    pub fn with_capacity(n: usize) -> VolatileTable {
        let homes = (n + n / 4).max(16);
        // The vector's capacity is reserved exactly, with room for a few
        // tail slots: a push past a full vector would double it.
        let mut slots = Vec::with_capacity(homes + tail_reserve(homes));
        slots.resize(homes, EMPTY);
        VolatileTable {
            slots,
            homes,
            ..VolatileTable::default()
        }
    }

    /// Appends an empty tail slot, growing the vector by a small step
    /// rather than doubling it.
    fn push_tail(&mut self) {
        if self.slots.len() == self.slots.capacity() {
            self.slots.reserve_exact(tail_reserve(self.homes));
        }
        self.slots.push(EMPTY);
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The key of occupied slot `s`.
    fn key_of<'a>(&'a self, s: &'a Slot) -> &'a [u8] {
        match s.long_index() {
            Some(i) => self.long.get(i).map_or(&[][..], |k| &k[..]),
            None => s.key.get(..(s.seq_len & 0xff) as usize).unwrap_or_default(),
        }
    }

    /// A slot for `key` with entry `v`; a long key takes a `long` index.
    fn new_slot(&mut self, hash: u32, key: &[u8], v: VEntry) -> Slot {
        let mut s = Slot { hash, ..EMPTY };
        match s.key.get_mut(..key.len()) {
            Some(dst) => {
                dst.copy_from_slice(key);
                s.seq_len = key.len() as u64;
            }
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        if let Some(k) = self.long.get_mut(i) {
                            *k = key.into();
                        }
                        i
                    }
                    None => {
                        self.long.push(key.into());
                        self.long.len() - 1
                    }
                };
                if let Some(dst) = s.key.get_mut(..8) {
                    dst.copy_from_slice(&(i as u64).to_le_bytes());
                }
                s.seq_len = LONG;
            }
        }
        self.heap_key_bytes += long_bytes(key);
        s.set(v);
        s
    }

    /// Releases what slot `s` (removed) held in `long`.
    fn drop_slot(&mut self, s: &Slot) {
        if let Some(i) = s.long_index() {
            if let Some(k) = self.long.get_mut(i) {
                self.heap_key_bytes -= long_bytes(k);
                *k = Box::default();
                self.free.push(i);
            }
        }
    }

    fn home(&self, h: u32) -> usize {
        ((u64::from(h) * self.homes as u64) >> 32) as usize
    }

    /// Slot of `key` (hash `h`, stored form), or `Err(i)`: the slot where
    /// it would go (the first empty slot or larger hash after its home and
    /// its equal-hash neighbours; may be `slots.len()`).
    fn find(&self, h: u32, key: &[u8]) -> Result<usize, usize> {
        let mut i = self.home(h);
        while let Some(s) = self.slots.get(i) {
            if s.hash == 0 || s.hash > h {
                return Err(i);
            }
            if s.hash == h && self.key_of(s) == key {
                return Ok(i);
            }
            i += 1;
        }
        Err(i)
    }

    /// The entry of `key`, whose [`key_hash`](super::table::key_hash) is
    /// `h`.
    pub fn get(&self, h: u64, key: &[u8]) -> Option<VEntry> {
        let i = self.find(stored(h), key).ok()?;
        self.slots.get(i).map(Slot::entry)
    }

    /// The stored hash at the home slot of hash `h` (a load for
    /// [`super::validation::Validation::touch`]).
    pub fn home_word(&self, h: u64) -> u32 {
        self.slots.get(self.home(stored(h))).map_or(0, |s| s.hash)
    }

    /// Sets the entry of `key` (hash `h`), inserting it if absent.
    pub fn insert(&mut self, h: u64, key: &[u8], v: VEntry) {
        self.insert_stored(stored(h), key, v)
    }

    fn insert_stored(&mut self, h: u32, key: &[u8], v: VEntry) {
        let at = match self.find(h, key) {
            Ok(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    s.set(v);
                }
                return;
            }
            Err(at) => at,
        };
        if (self.len + 1) * 32 > self.homes * MAX_LOAD_32NDS {
            self.resize(self.len + self.len * 3 / 10);
            return self.insert_stored(h, key, v);
        }
        // The first empty slot at or after `at` (a new tail slot if none):
        // the run between shifts right by one, keeping order and every
        // entry at or after its home.
        let empty = match self
            .slots
            .get(at..)
            .and_then(|r| r.iter().position(|s| s.hash == 0))
        {
            Some(d) => at + d,
            None => {
                self.push_tail();
                self.slots.len() - 1
            }
        };
        if let Some(run) = self.slots.get_mut(at..=empty) {
            run.rotate_right(1);
        }
        let new = self.new_slot(h, key, v);
        if let Some(s) = self.slots.get_mut(at) {
            *s = new;
        }
        self.len += 1;
    }

    /// Appends `key` during a rebuild whose keys come in non-decreasing
    /// hash order (the table file's volatile section): the slot is the
    /// key's home or the one after the previous key, whichever is later,
    /// so the rebuild writes memory front to back. A key out of order, or
    /// a table already holding other keys, takes the general
    /// [`VolatileTable::insert`]. The caller passes each key once.
    pub fn push_sorted(&mut self, h: u64, key: &[u8], v: VEntry) {
        let hs = stored(h);
        let at = self.home(hs).max(self.fill_end);
        let first = self.len == 0 && self.fill_end == 0;
        let in_order = first
            || self
                .fill_end
                .checked_sub(1)
                .and_then(|p| self.slots.get(p))
                .is_some_and(|p| p.hash != 0 && p.hash <= hs);
        if !in_order || (self.len + 1) * 32 > self.homes * MAX_LOAD_32NDS {
            self.fill_end = usize::MAX / 2;
            return self.insert(h, key, v);
        }
        while self.slots.len() <= at {
            self.push_tail();
        }
        if self.slots.get(at).is_none_or(|s| s.hash != 0) {
            // Only reachable if the table was filled otherwise before.
            self.fill_end = usize::MAX / 2;
            return self.insert(h, key, v);
        }
        let new = self.new_slot(hs, key, v);
        if let Some(s) = self.slots.get_mut(at) {
            *s = new;
        }
        self.fill_end = at + 1;
        self.len += 1;
    }

    /// Removes `key` (hash `h`); returns its entry.
    pub fn remove(&mut self, h: u64, key: &[u8]) -> Option<VEntry> {
        let i = self.find(stored(h), key).ok()?;
        let old = std::mem::replace(self.slots.get_mut(i)?, EMPTY);
        self.len -= 1;
        self.drop_slot(&old);
        // Backward shift: each following entry not at its home moves one
        // slot back, up to the first empty slot or entry at its home.
        let mut j = i + 1;
        while let Some(s) = self.slots.get(j) {
            if s.hash == 0 || self.home(s.hash) >= j {
                break;
            }
            self.slots.swap(j - 1, j);
            j += 1;
        }
        // Trailing tail slots left empty are dropped.
        while self.slots.len() > self.homes && self.slots.last().is_some_and(|s| s.hash == 0) {
            self.slots.pop();
        }
        if self.homes > MIN_SHRINK_HOMES && self.len * 32 < self.homes * MIN_LOAD_32NDS {
            self.resize(self.len + self.len * 3 / 10);
        }
        Some(old.entry())
    }

    /// Rebuilds sized for `n` entries (at least the current length), in
    /// order, so front to back. Resizing to 1.3× the length leaves the
    /// load at about 0.6, between [`MIN_LOAD_32NDS`] and
    /// [`MAX_LOAD_32NDS`].
    fn resize(&mut self, n: usize) {
        let old = std::mem::take(&mut self.slots);
        let mut t = VolatileTable::with_capacity(n.max(self.len).max(16));
        for s in old.into_iter().filter(|s| s.hash != 0) {
            let at = t.home(s.hash).max(t.fill_end);
            while t.slots.len() <= at {
                t.push_tail();
            }
            t.fill_end = at + 1;
            if let Some(d) = t.slots.get_mut(at) {
                *d = s;
            }
        }
        t.len = self.len;
        t.heap_key_bytes = self.heap_key_bytes;
        t.long = std::mem::take(&mut self.long);
        t.free = std::mem::take(&mut self.free);
        t.fill_end = usize::MAX / 2;
        *self = t;
    }

    /// Estimated RAM: the slot vector's capacity and heap keys.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.long.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.free.capacity() * std::mem::size_of::<usize>()
            + self.heap_key_bytes
    }

    /// Checks the invariants of the module doc (tests).
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut prev = 0u32;
        let mut n = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if s.hash == 0 {
                continue;
            }
            n += 1;
            assert!(s.hash >= prev, "order at {i}");
            prev = s.hash;
            let home = self.home(s.hash);
            assert!(home <= i, "slot {i} before its home {home}");
            assert!(
                self.slots[home..i].iter().all(|x| x.hash != 0),
                "empty slot between home {home} and {i}"
            );
        }
        assert_eq!(n, self.len);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]

    use super::super::table::key_hash;
    use super::*;
    use std::collections::HashMap;

    fn v(seq: u64) -> VEntry {
        VEntry {
            seq,
            count: 2,
            has_entry: true,
        }
    }

    /// Random inserts, updates and removes, with keys inline and on the
    /// heap and a hash function squeezed to few values (long equal-hash
    /// runs and clusters), agree with a map and keep the invariants.
    #[test]
    fn operations_agree_with_a_model_and_keep_the_order() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for squeeze in [0u32, 58, 63] {
            let hash = |k: &[u8]| key_hash(k) >> squeeze << squeeze;
            // (squeeze 58 and 63 leave few distinct upper halves)
            let mut t = VolatileTable::default();
            let mut m: HashMap<Vec<u8>, VEntry> = HashMap::new();
            for step in 0..6000u64 {
                let id = rnd() % 700;
                let key = if id % 5 == 0 {
                    format!("a-long-primary-key-on-the-heap-{id}").into_bytes()
                } else {
                    format!("k{id}").into_bytes()
                };
                let h = hash(&key);
                match rnd() % 3 {
                    0 => assert_eq!(t.remove(h, &key), m.remove(&key)),
                    _ => {
                        t.insert(h, &key, v(step));
                        m.insert(key.clone(), v(step));
                    }
                }
                assert_eq!(t.get(h, &key), m.get(&key).copied());
                if step % 500 == 0 {
                    t.check_invariants();
                    for (k, e) in &m {
                        assert_eq!(t.get(hash(k), k), Some(*e));
                    }
                }
            }
            t.check_invariants();
            assert_eq!(t.len(), m.len());
            let heap: usize = m.keys().map(|k| long_bytes(k)).sum();
            assert_eq!(t.heap_key_bytes, heap);
        }
    }

    /// A rebuild in hash order places every key, as does one whose keys
    /// come partly out of order (the general insert takes over).
    #[test]
    fn a_sorted_rebuild_finds_every_key() {
        let keys: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| format!("pk{i}").into_bytes())
            .collect();
        let mut sorted: Vec<(u64, &Vec<u8>)> = keys.iter().map(|k| (key_hash(k), k)).collect();
        sorted.sort();
        for shuffle_tail in [false, true] {
            let mut order = sorted.clone();
            if shuffle_tail {
                order[4000..].reverse();
            }
            let mut t = VolatileTable::with_capacity(order.len());
            for (i, (h, k)) in order.iter().enumerate() {
                t.push_sorted(*h, k, v(i as u64));
            }
            t.check_invariants();
            assert_eq!(t.len(), keys.len());
            for (i, (h, k)) in order.iter().enumerate() {
                assert_eq!(t.get(*h, k), Some(v(i as u64)));
            }
            assert_eq!(t.get(key_hash(b"absent"), b"absent"), None);
            // Then ordinary use.
            let (h, k) = order[17];
            assert!(t.remove(h, k).is_some());
            t.insert(key_hash(b"new"), b"new", v(1));
            t.check_invariants();
        }
    }

    #[test]
    fn a_slot_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
    }

    /// The slot vector's capacity follows the length: about 1.1–1.7
    /// slots an entry while growing (no doubling of the vector on a tail
    /// slot), and the table shrinks once mostly empty.
    #[test]
    fn memory_follows_the_length() {
        let slot = std::mem::size_of::<Slot>();
        let mut t = VolatileTable::default();
        let key = |i: u32| format!("{i:016x}").into_bytes();
        for i in 0..100_000u32 {
            t.insert(key_hash(&key(i)), &key(i), v(u64::from(i)));
            if i % 997 == 0 {
                let slots = t.memory_bytes() / slot;
                let n = t.len();
                assert!(
                    slots * 8 <= n.max(16) * 8 * 2 + 8 * 64,
                    "{slots} slots for {n}"
                );
                assert!(slots * MAX_LOAD_32NDS >= n * 32, "{slots} slots for {n}");
            }
        }
        t.check_invariants();
        for i in 0..95_000u32 {
            assert!(t.remove(key_hash(&key(i)), &key(i)).is_some());
        }
        t.check_invariants();
        assert!(
            t.memory_bytes() / slot <= 5_000 * 5,
            "{}",
            t.memory_bytes() / slot
        );
        for i in 95_000..100_000u32 {
            assert_eq!(t.get(key_hash(&key(i)), &key(i)), Some(v(u64::from(i))));
        }
    }

    /// An empty table answers, grows from nothing, and shrinks its tail.
    #[test]
    fn an_empty_table_grows_and_its_tail_shrinks() {
        let mut t = VolatileTable::default();
        assert_eq!(t.get(5, b"x"), None);
        assert_eq!(t.remove(5, b"x"), None);
        // Hashes near the top pile up in tail slots.
        for i in 0..40u64 {
            t.insert(u64::MAX - i, format!("t{i}").as_bytes(), v(i));
        }
        t.check_invariants();
        assert!(t.slots.len() > t.homes);
        for i in 0..40u64 {
            assert_eq!(
                t.remove(u64::MAX - i, format!("t{i}").as_bytes()),
                Some(v(i))
            );
        }
        t.check_invariants();
        assert_eq!(t.slots.len(), t.homes);
        // Hash 0 is stored as 1 and found.
        t.insert(0, b"zero", v(9));
        t.insert(1 << 32, b"one", v(8));
        assert_eq!(t.get(0, b"zero"), Some(v(9)));
        assert_eq!(t.get(1 << 32, b"one"), Some(v(8)));
        t.check_invariants();
    }
}
