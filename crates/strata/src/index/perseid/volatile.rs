//! The volatile table of hybrid validation (PERSEID §4.3): the primary
//! keys with obsolete entries, each with its latest sequence number and
//! count, in RAM.
//!
//! Most keys are held by their hash alone: an *ordered* linear-probing
//! hash table over the table file's 64-bit hash
//! ([`super::table::key_hash`]) whose 16-byte slots hold the hash and the
//! value, not the key. A slot stands for its key because of an invariant
//! the validation layer keeps (`validation`, "Shared hashes"): two keys
//! of the persistent table with one hash are both marked *shared*, and a
//! shared key is held here by its bytes, in a small map beside the slots
//! (almost always empty: two of a hundred million random keys share a
//! 64-bit hash with probability about 3 · 10⁻⁴). So a slot found for the
//! hash of a key of the persistent table is that key's. Callers pass only
//! such keys (an entry of the PKey layer, a key whose persistent value
//! they have read).
//!
//! Slot `i` holds entries whose home `home(h) = (h >> 32) · homes / 2³²`
//! is at most `i`, and the occupied slots are sorted by hash. Because the
//! home is monotone in the hash, and the table file lists its volatile
//! section in hash order, the rebuild at open (§4.3 Recovery) writes the
//! slots front to back, in one sequential pass. A lookup starts at the
//! key's home and stops at the first empty slot or larger hash: the
//! entries it passes are contiguous (one or two cache lines at the load
//! kept here), and it reads no separate control bytes.
//!
//! Invariants (checked by the tests against a model):
//! * every entry sits at or after its home, with no empty slot between;
//! * occupied slots are in increasing hash order, across clusters too
//!   (a cluster starts after an empty slot, beyond every earlier home),
//!   and no two hold one hash;
//! * a slot's value word is 0 exactly when the slot is empty;
//! * there is no wrap-around: a cluster that runs past the last home
//!   continues in tail slots appended to the vector;
//! * a key is in the slots or in the shared map, not both.

use strata_lsm::key::SeqNo;
use strata_lsm::mem::prefetch;

use crate::index::fxhash::{map_bytes, FastMap};
use crate::index::inline_key::InlineKey;

/// A volatile-table value: the key's persistent value (it has `n > 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VEntry {
    pub seq: SeqNo,
    pub count: u32,
    pub has_entry: bool,
    /// The key is held by its bytes (its persistent value is marked
    /// shared).
    pub shared: bool,
}

/// 16 bytes: a key's hash and its value.
#[derive(Clone, Copy)]
struct Slot {
    hash: u64,
    /// `seq << 8 | OCCUPIED | has_entry << 6 | count`, with `count` up to
    /// [`BIG`] - 1 inline; [`BIG`] says the count is in the table's `big`
    /// map. 0: an empty slot. Sequence numbers fit 56 bits
    /// ([`strata_lsm::key::MAX_SEQ`]).
    word: u64,
}

const OCCUPIED: u64 = 1 << 7;
const HAS_ENTRY: u64 = 1 << 6;
/// The count field's escape: the count is in `big`.
const BIG: u64 = 63;

const EMPTY: Slot = Slot { hash: 0, word: 0 };

impl Slot {
    fn is_empty(&self) -> bool {
        self.word == 0
    }
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
    /// Entries in `slots`.
    len: usize,
    /// Position of the last entry placed by [`VolatileTable::push_sorted`]
    /// (the next one goes after it).
    fill_end: usize,
    /// Counts of slots whose count field is [`BIG`], by hash.
    big: FastMap<u64, u32>,
    /// Shared keys (see the module doc), by their bytes.
    shared: FastMap<InlineKey, VEntry>,
    shared_heap_bytes: usize,
}

impl VolatileTable {
    /// An empty table sized for `n` entries without growing.
    pub fn with_capacity(n: usize) -> VolatileTable {
        let homes = (n + n / 4).max(16);
        // The vector's capacity is reserved exactly, with room for a few
        // tail slots: a push past a full vector would double it.
        // (On huge pages where the system allows: a lookup probes random
        // slots; see `strata_lsm::mem`.)
        let slots = strata_lsm::mem::filled(homes, homes + tail_reserve(homes), EMPTY);
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

    /// Entries, in the slots and shared.
    pub fn len(&self) -> usize {
        self.len + self.shared.len()
    }

    fn home(&self, h: u64) -> usize {
        (((h >> 32) * self.homes as u64) >> 32) as usize
    }

    /// Slot of hash `h`, or `Err(i)`: the slot where it would go (the
    /// first empty slot or larger hash after its home; may be
    /// `slots.len()`).
    fn find(&self, h: u64) -> Result<usize, usize> {
        let mut i = self.home(h);
        while let Some(s) = self.slots.get(i) {
            if s.is_empty() || s.hash > h {
                return Err(i);
            }
            if s.hash == h {
                return Ok(i);
            }
            i += 1;
        }
        Err(i)
    }

    fn entry(&self, s: &Slot) -> VEntry {
        let c = s.word & (BIG | (BIG - 1));
        VEntry {
            seq: s.word >> 8,
            count: if c == BIG {
                self.big.get(&s.hash).copied().unwrap_or(u32::MAX)
            } else {
                c as u32
            },
            has_entry: s.word & HAS_ENTRY != 0,
            shared: false,
        }
    }

    /// The slot word for `v` (hash `h`), keeping `big` in line.
    fn encode(&mut self, h: u64, v: VEntry) -> u64 {
        debug_assert!(v.seq <= strata_lsm::key::MAX_SEQ);
        let c = if u64::from(v.count) >= BIG {
            self.big.insert(h, v.count);
            BIG
        } else {
            if !self.big.is_empty() {
                self.big.remove(&h);
            }
            u64::from(v.count)
        };
        v.seq << 8 | OCCUPIED | if v.has_entry { HAS_ENTRY } else { 0 } | c
    }

    /// The entry of `key`, whose [`key_hash`](super::table::key_hash) is
    /// `h` (a key of the persistent table: see the module doc).
    #[inline(always)]
    pub fn get(&self, h: u64, key: &[u8]) -> Option<VEntry> {
        match self.find(h) {
            Ok(i) => self.slots.get(i).map(|s| self.entry(s)),
            Err(_) if self.shared.is_empty() => None,
            Err(_) => self.shared.get(key).copied(),
        }
    }

    /// Asks the CPU to load the home slot of hash `h` and the slot four
    /// on (the next cache line, where a lookup's probe often ends),
    /// without waiting for them: a hint, issued while a chain is walked,
    /// so that the misses overlap that walk and each other (a load here
    /// would hold up the walk until its line arrives).
    #[inline(always)]
    pub fn prefetch_home(&self, h: u64) {
        let i = self.home(h);
        if let Some(s) = self.slots.get(i) {
            prefetch(s);
        }
        if let Some(s) = self.slots.get(i + 4) {
            prefetch(s);
        }
    }

    /// Sets the entry of `key` (hash `h`), inserting it if absent; in the
    /// shared map if `v.shared` or if it is there already.
    pub fn insert(&mut self, h: u64, key: &[u8], v: VEntry) {
        if v.shared || (!self.shared.is_empty() && self.shared.contains_key(key)) {
            self.insert_shared(key, v);
        } else {
            self.insert_hash(h, v);
        }
    }

    fn insert_shared(&mut self, key: &[u8], v: VEntry) {
        let v = VEntry { shared: true, ..v };
        if let Some(e) = self.shared.get_mut(key) {
            *e = v;
        } else {
            self.shared_heap_bytes += InlineKey::heap_bytes(key);
            self.shared.insert(InlineKey::new(key), v);
        }
    }

    fn insert_hash(&mut self, h: u64, v: VEntry) {
        let at = match self.find(h) {
            Ok(i) => {
                let w = self.encode(h, v);
                if let Some(s) = self.slots.get_mut(i) {
                    s.word = w;
                }
                return;
            }
            Err(at) => at,
        };
        if (self.len + 1) * 32 > self.homes * MAX_LOAD_32NDS {
            self.resize(self.len + self.len * 3 / 10);
            return self.insert_hash(h, v);
        }
        // The first empty slot at or after `at` (a new tail slot if none):
        // the run between shifts right by one, keeping order and every
        // entry at or after its home.
        let empty = match self
            .slots
            .get(at..)
            .and_then(|r| r.iter().position(Slot::is_empty))
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
        let word = self.encode(h, v);
        if let Some(s) = self.slots.get_mut(at) {
            *s = Slot { hash: h, word };
        }
        self.len += 1;
    }

    /// Moves the slot of hash `h`, if any, to the shared map under `key`
    /// (whose hash is `h`): `key` has just been marked shared.
    pub fn share(&mut self, h: u64, key: &[u8]) {
        if let Some(v) = self.remove_hash(h) {
            self.insert_shared(key, v);
        }
    }

    /// Appends hash `h` during a rebuild whose hashes come in increasing
    /// order (the table file's volatile section, without its shared keys):
    /// the slot is the hash's home or the one after the previous entry,
    /// whichever is later, so the rebuild writes memory front to back. A
    /// hash out of order, or a table already holding other entries, takes
    /// the general [`VolatileTable::insert`].
    pub fn push_sorted(&mut self, h: u64, v: VEntry) {
        let at = self.home(h).max(self.fill_end);
        let first = self.len == 0 && self.fill_end == 0;
        let in_order = first
            || self
                .fill_end
                .checked_sub(1)
                .and_then(|p| self.slots.get(p))
                .is_some_and(|p| !p.is_empty() && p.hash < h);
        if !in_order || (self.len + 1) * 32 > self.homes * MAX_LOAD_32NDS {
            self.fill_end = usize::MAX / 2;
            return self.insert_hash(h, v);
        }
        while self.slots.len() <= at {
            self.push_tail();
        }
        if self.slots.get(at).is_none_or(|s| !s.is_empty()) {
            // Only reachable if the table was filled otherwise before.
            self.fill_end = usize::MAX / 2;
            return self.insert_hash(h, v);
        }
        let word = self.encode(h, v);
        if let Some(s) = self.slots.get_mut(at) {
            *s = Slot { hash: h, word };
        }
        self.fill_end = at + 1;
        self.len += 1;
    }

    /// Removes `key` (hash `h`); returns its entry.
    pub fn remove(&mut self, h: u64, key: &[u8]) -> Option<VEntry> {
        if !self.shared.is_empty() {
            if let Some(v) = self.shared.remove(key) {
                self.shared_heap_bytes -= InlineKey::heap_bytes(key);
                return Some(v);
            }
        }
        self.remove_hash(h)
    }

    fn remove_hash(&mut self, h: u64) -> Option<VEntry> {
        let i = self.find(h).ok()?;
        let old = std::mem::replace(self.slots.get_mut(i)?, EMPTY);
        let v = self.entry(&old);
        if !self.big.is_empty() {
            self.big.remove(&h);
        }
        self.len -= 1;
        // Backward shift: each following entry not at its home moves one
        // slot back, up to the first empty slot or entry at its home.
        let mut j = i + 1;
        while let Some(s) = self.slots.get(j) {
            if s.is_empty() || self.home(s.hash) >= j {
                break;
            }
            self.slots.swap(j - 1, j);
            j += 1;
        }
        // Trailing tail slots left empty are dropped.
        while self.slots.len() > self.homes && self.slots.last().is_some_and(Slot::is_empty) {
            self.slots.pop();
        }
        if self.homes > MIN_SHRINK_HOMES && self.len * 32 < self.homes * MIN_LOAD_32NDS {
            self.resize(self.len + self.len * 3 / 10);
        }
        Some(v)
    }

    /// Rebuilds the slots sized for `n` entries (at least the current
    /// length), in order, so front to back. Resizing to 1.3× the length
    /// leaves the load at about 0.6, between [`MIN_LOAD_32NDS`] and
    /// [`MAX_LOAD_32NDS`].
    fn resize(&mut self, n: usize) {
        let old = std::mem::take(&mut self.slots);
        let mut t = VolatileTable::with_capacity(n.max(self.len).max(16));
        for s in old.into_iter().filter(|s| !s.is_empty()) {
            let at = t.home(s.hash).max(t.fill_end);
            while t.slots.len() <= at {
                t.push_tail();
            }
            t.fill_end = at + 1;
            if let Some(d) = t.slots.get_mut(at) {
                *d = s;
            }
        }
        self.slots = t.slots;
        self.homes = t.homes;
        self.fill_end = usize::MAX / 2;
    }

    /// Estimated RAM: the slot vector's capacity, the count and shared
    /// maps.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + map_bytes(self.big.capacity(), 12)
            + map_bytes(
                self.shared.capacity(),
                std::mem::size_of::<(InlineKey, VEntry)>(),
            )
            + self.shared_heap_bytes
    }

    /// Checks the invariants of the module doc (tests).
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut prev = None;
        let mut n = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if s.is_empty() {
                assert_eq!(s.hash, 0, "empty slot {i} with a hash");
                continue;
            }
            n += 1;
            assert!(prev.is_none_or(|p| s.hash > p), "order at {i}");
            prev = Some(s.hash);
            let home = self.home(s.hash);
            assert!(home <= i, "slot {i} before its home {home}");
            assert!(
                self.slots[home..i].iter().all(|x| !x.is_empty()),
                "empty slot between home {home} and {i}"
            );
        }
        assert_eq!(n, self.len);
        let big = self
            .slots
            .iter()
            .filter(|s| !s.is_empty() && s.word & (BIG | (BIG - 1)) == BIG)
            .count();
        assert_eq!(big, self.big.len());
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
            count: 2 + (seq % 100) as u32,
            has_entry: !seq.is_multiple_of(3),
            shared: false,
        }
    }

    fn sv(seq: u64, shared: bool) -> VEntry {
        VEntry { shared, ..v(seq) }
    }

    /// Random inserts, updates and removes agree with a map and keep the
    /// invariants: keys in slots and shared (under a hash squeezed to few
    /// values, every key whose hash another key has is passed as shared,
    /// as validation does), counts inline and in `big`, long runs and
    /// clusters.
    #[test]
    fn operations_agree_with_a_model_and_keep_the_order() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for squeeze in [0u32, 54, 61] {
            let hash = |k: &[u8]| key_hash(k) >> squeeze << squeeze;
            let keys: Vec<Vec<u8>> = (0..700u64)
                .map(|id| {
                    if id % 5 == 0 {
                        format!("a-long-primary-key-on-the-heap-{id}").into_bytes()
                    } else {
                        format!("k{id}").into_bytes()
                    }
                })
                .collect();
            let mut by_hash: HashMap<u64, usize> = HashMap::new();
            for k in &keys {
                *by_hash.entry(hash(k)).or_default() += 1;
            }
            let shared = |k: &[u8]| by_hash[&hash(k)] > 1;
            let mut t = VolatileTable::default();
            let mut m: HashMap<Vec<u8>, VEntry> = HashMap::new();
            for step in 0..6000u64 {
                let key = &keys[(rnd() % 700) as usize];
                let h = hash(key);
                match rnd() % 3 {
                    0 => assert_eq!(t.remove(h, key), m.remove(key)),
                    _ => {
                        t.insert(h, key, sv(step, shared(key)));
                        m.insert(key.clone(), sv(step, shared(key)));
                    }
                }
                assert_eq!(t.get(h, key), m.get(key).copied());
                if step % 500 == 0 {
                    t.check_invariants();
                    for (k, e) in &m {
                        assert_eq!(t.get(hash(k), k), Some(*e));
                    }
                }
            }
            t.check_invariants();
            assert_eq!(t.len(), m.len());
            let heap: usize = m
                .keys()
                .filter(|k| shared(k))
                .map(|k| InlineKey::heap_bytes(k))
                .sum();
            assert_eq!(t.shared_heap_bytes, heap);
            if squeeze > 0 {
                assert!(!t.shared.is_empty());
            }
        }
    }

    /// A key marked shared after it was placed by its hash moves to the
    /// shared map and keeps its value; a key of another hash is unaffected.
    #[test]
    fn a_key_marked_shared_moves_to_the_map() {
        let mut t = VolatileTable::default();
        t.insert(key_hash(b"a"), b"a", v(70));
        t.insert(key_hash(b"b"), b"b", v(5));
        t.share(key_hash(b"a"), b"a");
        t.check_invariants();
        assert_eq!(t.len(), 2);
        assert_eq!(t.shared.len(), 1);
        assert!(t.big.is_empty());
        assert_eq!(t.get(key_hash(b"a"), b"a"), Some(sv(70, true)));
        assert_eq!(t.get(key_hash(b"b"), b"b"), Some(v(5)));
        // Updates of a shared key stay in the map.
        t.insert(key_hash(b"a"), b"a", v(71));
        assert_eq!(t.shared.len(), 1);
        assert_eq!(t.get(key_hash(b"a"), b"a"), Some(sv(71, true)));
        assert_eq!(t.remove(key_hash(b"a"), b"a"), Some(sv(71, true)));
        assert_eq!(t.len(), 1);
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
            for (i, (h, _)) in order.iter().enumerate() {
                t.push_sorted(*h, v(i as u64));
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
    fn a_slot_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }

    /// Counts past the slot's field are kept exactly, and dropped from
    /// `big` when they fall back or the key leaves.
    #[test]
    fn large_counts_are_exact() {
        let mut t = VolatileTable::default();
        let h = key_hash(b"hot");
        for count in [2u32, 62, 63, 64, 100_000, 63, 62, 5] {
            let e = VEntry {
                seq: u64::from(count) + 7,
                count,
                has_entry: true,
                shared: false,
            };
            t.insert(h, b"hot", e);
            assert_eq!(t.get(h, b"hot"), Some(e));
            assert_eq!(t.big.len(), usize::from(count >= 63), "count {count}");
            t.check_invariants();
        }
        t.insert(h, b"hot", VEntry { count: 500, ..v(9) });
        assert_eq!(t.remove(h, b"hot").map(|e| e.count), Some(500));
        assert!(t.big.is_empty());
    }

    /// The slot vector's capacity follows the length: about 1.1–1.7
    /// slots an entry while growing (no doubling of the vector on a tail
    /// slot), and the table shrinks once mostly empty.
    #[test]
    fn memory_follows_the_length() {
        let slot = std::mem::size_of::<Slot>();
        let mut t = VolatileTable::default();
        let key = |i: u32| format!("{i:016x}").into_bytes();
        let e = |i: u32| v(u64::from(i) * 100);
        for i in 0..100_000u32 {
            t.insert(key_hash(&key(i)), &key(i), e(i));
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
            assert_eq!(t.get(key_hash(&key(i)), &key(i)), Some(e(i)));
        }
    }

    /// An empty table answers, grows from nothing, and shrinks its tail;
    /// hashes 0 and 1 are distinct entries.
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
        t.insert(0, b"zero", v(9));
        t.insert(1, b"one", v(8));
        assert_eq!(t.get(0, b"zero"), Some(v(9)));
        assert_eq!(t.get(1, b"one"), Some(v(8)));
        t.check_invariants();
    }
}
