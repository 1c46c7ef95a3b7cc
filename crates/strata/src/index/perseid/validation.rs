//! Hybrid validation (PERSEID §4.3): a persistent hash table of every
//! indexed primary key → (latest sequence number, physical count), and a
//! volatile table in RAM holding only the keys that may have obsolete
//! entries.
//!
//! The *physical count* `n` of a key is 1 plus the number of its entries
//! in the PKey layer that are obsolete (older than its latest version).
//! A key is in the persistent table while it has any entry or its latest
//! version has one; `has_entry` says whether the latest version (a put
//! with an indexable attribute) has an entry — a delete or an
//! attribute-less put has none, which the paper's model (every record has
//! a secondary key) does not need. The volatile table holds exactly the
//! keys with `n > 1`, with their latest sequence number and count.
//!
//! Queries consult only the volatile table: an entry `(pk, seq)` is valid
//! if `pk` is absent (it has no obsolete entries, so every entry is the
//! latest version) or its latest sequence number is `seq`; stale if the
//! latest is another one at or below the query's snapshot; and unknown if
//! the latest is newer than the snapshot (a concurrent write), which the
//! query resolves by a point lookup in the primary. Garbage collection
//! decrements both counts for every entry it removes and drops the key
//! from the volatile table when its count reaches 1.
//!
//! Deviation: the paper's volatile count is *logical* (queries mark the
//! obsolete entries they meet and decrement it). Here queries do not write
//! (they run beside the writer under a read lock), so the volatile count
//! equals the physical one and keys leave the volatile table at garbage
//! collection. The persistent table is a hashed file (`table`) read
//! through a mapping, plus the *delta*: the values changed since that
//! file was written, in RAM and in the page log's Pk records. The volatile
//! table holds, for each of its keys, the exact persistent value, so
//! garbage collection and writes of updated keys never read the file.
//! At open the volatile table is rebuilt from the file and the delta, as in
//! the paper's recovery.
//!
//! Shared hashes. The volatile table holds most keys by their 64-bit hash
//! alone (`volatile`), which is sound under this invariant: *two distinct
//! keys of the persistent table with one hash both have `shared` set* (a
//! flag of their persistent value, kept in the table file and the log).
//! The write that adds a key to the table finds the keys it would share
//! its hash with in the same probe that finds it absent (the file's
//! bucket, the delta's entry for the hash), and marks them and itself;
//! the volatile table keeps shared keys by their bytes. The mark is never
//! cleared (a key that outlives its partner stays held by its bytes).
//! Writes therefore read a key's value from the delta or the file, never
//! from the volatile table, since a key new to the table could share its
//! hash with a key held there by its hash.

use std::path::Path;
use std::sync::Arc;

use strata_lsm::error::Result;
use strata_lsm::io::Fs;
use strata_lsm::key::SeqNo;

#[cfg(test)]
use crate::index::fxhash::FxHasher;
use crate::index::fxhash::{map_bytes, FastMap};

pub(crate) use super::table::PEntry;
use super::table::{key_hash, PkTable, TableRef, TableWriter};
pub(crate) use super::volatile::VEntry;
use super::volatile::VolatileTable;
use crate::index::inline_key::InlineKey as PkKey;

/// What the tables say of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The latest version of its key.
    Valid,
    /// Replaced by a version at or below the given sequence number.
    Stale,
    /// Replaced after the given sequence number.
    Newer,
    /// (Garbage collection) replaced at or below the horizon: no reader
    /// needs it.
    Collectable,
}

/// A key's value in the delta: 40 bytes (48 with its hash in a slot).
struct DEntry {
    key: PkKey,
    /// The persistent value's sequence number and count (meaningless
    /// unless `PRESENT` is set).
    seq: SeqNo,
    n: u32,
    /// `PRESENT` (the key is in the table; else it left it), `HAS_ENTRY`,
    /// `SHARED` (the value's flags) and `DIRTY` (changed since the last
    /// flush).
    flags: u8,
}

const PRESENT: u8 = 1;
const HAS_ENTRY: u8 = 2;
const SHARED: u8 = 4;
const DIRTY: u8 = 8;

impl DEntry {
    fn new(pk: &[u8], e: Option<PEntry>, dirty: bool) -> DEntry {
        let mut d = DEntry {
            key: PkKey::new(pk),
            seq: 0,
            n: 0,
            flags: 0,
        };
        d.set(e, dirty);
        d
    }

    /// The persistent value; `None`: the key left the table.
    fn e(&self) -> Option<PEntry> {
        (self.flags & PRESENT != 0).then_some(PEntry {
            seq: self.seq,
            n: self.n,
            has_entry: self.flags & HAS_ENTRY != 0,
            shared: self.flags & SHARED != 0,
        })
    }

    fn set(&mut self, e: Option<PEntry>, dirty: bool) {
        let mut flags = if dirty { DIRTY } else { 0 };
        if let Some(e) = e {
            self.seq = e.seq;
            self.n = e.n;
            flags |= PRESENT;
            if e.has_entry {
                flags |= HAS_ENTRY;
            }
            if e.shared {
                flags |= SHARED;
            }
        }
        self.flags = flags;
    }

    /// Clears the dirty flag; true if it was set.
    fn take_dirty(&mut self) -> bool {
        let was = self.flags & DIRTY != 0;
        self.flags &= !DIRTY;
        was
    }
}

/// Keys the delta's hash map holds before they move to the sorted part:
/// the capacity of a map of 16,384 slots, so the map never grows past
/// that (about 0.8 MB).
const FREEZE_AT: usize = 16_384 / 8 * 7;

#[cfg(test)]
thread_local! {
    /// Tests freeze small maps (see `tests::the_delta_agrees_with_a_model`).
    static TEST_FREEZE_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(FREEZE_AT) };
}

fn freeze_at() -> usize {
    #[cfg(test)]
    return TEST_FREEZE_AT.with(|c| c.get());
    #[cfg(not(test))]
    FREEZE_AT
}

/// The order of the sorted part: by hash, then (rarely needed) by key.
fn by_hash_then_key(a: &(u64, DEntry), b: &(u64, DEntry)) -> std::cmp::Ordering {
    a.0.cmp(&b.0)
        .then_with(|| a.1.key.bytes().cmp(b.1.key.bytes()))
}

/// The sorted part of a [`Delta`] visited by non-decreasing hash: an
/// open's pass over the table file's volatile section (in the file's hash
/// order) asks each hash's keys by a step forward instead of a search.
struct FrozenWalk<'a> {
    frozen: &'a [(u64, DEntry)],
    /// Entries before it have a hash below the last one asked for.
    pos: usize,
}

impl<'a> FrozenWalk<'a> {
    /// The entries of hash `h` (a search if `h` is below an earlier one).
    fn same(&mut self, h: u64) -> &'a [(u64, DEntry)] {
        if self
            .pos
            .checked_sub(1)
            .and_then(|i| self.frozen.get(i))
            .is_some_and(|e| e.0 >= h)
        {
            self.pos = self.frozen.partition_point(|e| e.0 < h);
        }
        while self.frozen.get(self.pos).is_some_and(|e| e.0 < h) {
            self.pos += 1;
        }
        let rest = self.frozen.get(self.pos..).unwrap_or_default();
        let n = rest.iter().take_while(|e| e.0 == h).count();
        rest.get(..n).unwrap_or_default()
    }
}

/// The values changed since the table file was written, by key hash (the
/// table file's: a new key's same-hash neighbours are one probe away).
///
/// Recent keys are in a hash map (`map`; a key whose hash another key of
/// `map` has is in `more`, found by a scan: two keys of one hash are rare
/// enough); once the map holds [`FREEZE_AT`] keys they move to `frozen`,
/// a vector sorted by (hash, key) and allocated to its length, searched
/// through `dir` (the first position of each `dir_bits` hash prefix). A
/// hash map's slots double when it fills, so the delta's RAM would jump
/// by half its size at a point set by chance; the sorted part costs its
/// length, and a search two cache misses. Each key is in exactly one of
/// the three.
#[derive(Default)]
struct Delta {
    map: FastMap<u64, DEntry>,
    more: Vec<(u64, DEntry)>,
    frozen: Vec<(u64, DEntry)>,
    /// `dir[b]`: the first position of `frozen` whose hash has prefix
    /// `b` or more (`1 << dir_bits` + 1 entries; empty while `frozen` is).
    dir: Vec<u32>,
    dir_bits: u32,
    key_bytes: usize,
}

impl Delta {
    /// The positions of `frozen` whose hash is `h`.
    fn frozen_range(&self, h: u64) -> std::ops::Range<usize> {
        if self.frozen.is_empty() {
            return 0..0;
        }
        // A non-empty sorted part was indexed: `dir_bits` is at least 1.
        let b = (h >> (64 - self.dir_bits)) as usize;
        let (Some(&lo), Some(&hi)) = (self.dir.get(b), self.dir.get(b + 1)) else {
            return 0..0;
        };
        let bucket = self
            .frozen
            .get(lo as usize..hi as usize)
            .unwrap_or_default();
        let start = bucket.partition_point(|e| e.0 < h);
        let len = bucket
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(|e| e.0 == h)
            .count();
        lo as usize + start..lo as usize + start + len
    }

    fn frozen_pos(&self, h: u64, pk: &[u8]) -> Option<usize> {
        let r = self.frozen_range(h);
        let start = r.start;
        self.frozen
            .get(r)?
            .iter()
            .position(|e| e.1.key.bytes() == pk)
            .map(|i| start + i)
    }

    fn get(&self, h: u64, pk: &[u8]) -> Option<&DEntry> {
        match self.map.get(&h) {
            Some(d) if d.key.bytes() == pk => return Some(d),
            Some(_) => {
                if let Some(m) = self.more.iter().find(|m| m.0 == h && m.1.key.bytes() == pk) {
                    return Some(&m.1);
                }
            }
            None => {}
        }
        let i = self.frozen_pos(h, pk)?;
        self.frozen.get(i).map(|e| &e.1)
    }

    fn get_mut(&mut self, h: u64, pk: &[u8]) -> Option<&mut DEntry> {
        match self.map.get(&h) {
            Some(d) if d.key.bytes() == pk => return self.map.get_mut(&h),
            Some(_) => {
                if let Some(i) = self
                    .more
                    .iter()
                    .position(|m| m.0 == h && m.1.key.bytes() == pk)
                {
                    return self.more.get_mut(i).map(|m| &mut m.1);
                }
            }
            None => {}
        }
        let i = self.frozen_pos(h, pk)?;
        self.frozen.get_mut(i).map(|e| &mut e.1)
    }

    /// A walk of the sorted part by non-decreasing hash, or `None` if
    /// the map holds keys too (the walk sees only the sorted part; an
    /// open's delta is all sorted, `load_sorted`).
    fn walk(&self) -> Option<FrozenWalk<'_>> {
        (self.map.is_empty() && self.more.is_empty()).then_some(FrozenWalk {
            frozen: &self.frozen,
            pos: 0,
        })
    }

    /// True if a key with hash `h` is in the delta.
    fn has_hash(&self, h: u64) -> bool {
        self.map.contains_key(&h) || !self.frozen_range(h).is_empty()
    }

    /// Sets `pk`'s value (hash `h`), with its dirty flag.
    fn set(&mut self, h: u64, pk: &[u8], e: Option<PEntry>, dirty: bool) {
        if let Some(d) = self.get_mut(h, pk) {
            d.set(e, dirty);
            return;
        }
        self.key_bytes += PkKey::heap_bytes(pk);
        let d = DEntry::new(pk, e, dirty);
        match self.map.entry(h) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(d);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.more.push((h, d)),
        }
        if self.map.len() >= freeze_at() {
            self.freeze();
        }
    }

    /// Moves every key of the map to the sorted part (a merge into a
    /// vector of the exact new length, then a new directory).
    fn freeze(&mut self) {
        if self.map.is_empty() {
            return;
        }
        // The map keeps its slots (it never holds more than the freeze
        // size).
        let mut recent: Vec<(u64, DEntry)> = self.map.drain().collect();
        recent.append(&mut self.more);
        recent.sort_unstable_by(by_hash_then_key);
        let old = std::mem::take(&mut self.frozen);
        let mut out = Vec::with_capacity(old.len() + recent.len());
        let mut a = old.into_iter().peekable();
        let mut b = recent.into_iter().peekable();
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => by_hash_then_key(x, y).is_le(),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            out.extend(if take_a { a.next() } else { b.next() });
        }
        self.frozen = out;
        self.index_frozen();
    }

    /// Makes the delta, empty, hold a recovery's Pk records in log order
    /// (a key's last record is its value), sorted at once: no hash map
    /// grows and no freeze copies them.
    fn load_sorted(&mut self, mut recs: Vec<(u64, DEntry)>) {
        debug_assert_eq!(self.len(), 0);
        // Stable: a key's records keep their log order.
        recs.sort_by(by_hash_then_key);
        let mut out: Vec<(u64, DEntry)> = Vec::with_capacity(recs.len());
        for r in recs {
            match out.last_mut() {
                Some(last) if last.0 == r.0 && last.1.key.bytes() == r.1.key.bytes() => *last = r,
                _ => {
                    self.key_bytes += PkKey::heap_bytes(r.1.key.bytes());
                    out.push(r);
                }
            }
        }
        out.shrink_to_fit();
        self.frozen = out;
        self.index_frozen();
    }

    /// Rebuilds `dir` for `frozen`: about four keys a prefix.
    fn index_frozen(&mut self) {
        // At least one bit: a prefix is `h >> (64 - bits)`.
        let bits = (usize::BITS - (self.frozen.len() / 4).max(1).leading_zeros()).min(24);
        let mut dir = Vec::with_capacity((1usize << bits) + 1);
        let mut pos = 0usize;
        for b in 0..=(1u64 << bits) {
            while self
                .frozen
                .get(pos)
                .is_some_and(|e| (e.0 >> (64 - bits)) < b)
            {
                pos += 1;
            }
            dir.push(pos as u32);
        }
        self.dir = dir;
        self.dir_bits = bits;
    }

    /// Every key with hash `h` and its value.
    fn same_hash(&self, h: u64) -> impl Iterator<Item = &DEntry> {
        let more = self.more.iter().filter(move |m| m.0 == h).map(|m| &m.1);
        let frozen = self
            .frozen
            .get(self.frozen_range(h))
            .unwrap_or_default()
            .iter()
            .map(|m| &m.1);
        self.map.get(&h).into_iter().chain(more).chain(frozen)
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &DEntry)> {
        self.map
            .iter()
            .map(|(h, d)| (*h, d))
            .chain(self.more.iter().map(|(h, d)| (*h, d)))
            .chain(self.frozen.iter().map(|(h, d)| (*h, d)))
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut DEntry> {
        self.map
            .values_mut()
            .chain(self.more.iter_mut().map(|(_, d)| d))
            .chain(self.frozen.iter_mut().map(|(_, d)| d))
    }

    fn len(&self) -> usize {
        self.map.len() + self.more.len() + self.frozen.len()
    }

    fn memory_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(u64, DEntry)>();
        self.key_bytes
            + map_bytes(self.map.capacity(), slot)
            + (self.more.capacity() + self.frozen.capacity()) * slot
            + self.dir.capacity() * std::mem::size_of::<u32>()
    }
}

#[derive(Default)]
pub(crate) struct Validation {
    /// The table file (none before the first merge).
    base: Option<Arc<PkTable>>,
    /// A table named by the log, opened by [`Validation::finish_open`].
    pending: Option<TableRef>,
    /// Values changed since `base` was written (since `merging` was
    /// handed to a [`MergeJob`] while one runs).
    delta: Delta,
    /// The delta a [`MergeJob`] is writing into a new table file with
    /// `base`: consulted after `delta`, for the values it holds and
    /// `delta` does not.
    merging: Option<Arc<Delta>>,
    /// A recovery's Pk records, in log order, until
    /// [`Validation::finish_open`] makes them the delta.
    loaded: Vec<(u64, DEntry)>,
    volatile: VolatileTable,
    /// Keys changed since the last flush (an upper bound: 0 means none).
    changed: usize,
}

impl Validation {
    /// The persistent value of `pk` (hash `h`), from the delta or the
    /// file. If it has none, `others` receives the keys of the table
    /// with hash `h`, and their values.
    fn lookup(
        &self,
        h: u64,
        pk: &[u8],
        others: &mut Vec<(Vec<u8>, PEntry)>,
    ) -> Result<Option<PEntry>> {
        // The newest layer holding a key has its value: the delta, then
        // the delta being merged, then the file.
        let layers = [Some(&self.delta), self.merging.as_deref()];
        let layers = layers.iter().flatten();
        let in_delta = layers.clone().find_map(|d| d.get(h, pk));
        if let Some(e) = in_delta.and_then(DEntry::e) {
            return Ok(Some(e));
        }
        let shadowed = |k: &[u8]| layers.clone().any(|d| d.get(h, k).is_some());
        if let Some(t) = &self.base {
            // A file key a delta has is reported from that delta.
            let mut from_file = |k: &[u8], e: PEntry| {
                if !shadowed(k) {
                    others.push((k.to_vec(), e));
                }
            };
            if in_delta.is_none() {
                if let Some(e) = t.find(h, pk, &mut from_file)? {
                    return Ok(Some(e));
                }
            } else {
                // Left the table since the file was written.
                t.same_hash(h, pk, &mut from_file)?;
            }
        }
        for (i, d) in layers.clone().enumerate() {
            for de in d.same_hash(h) {
                let k = de.key.bytes();
                // A key of the merging delta the newer one has is
                // reported from the newer one.
                if k == pk || (i > 0 && self.delta.get(h, k).is_some()) {
                    continue;
                }
                if let Some(e) = de.e() {
                    others.push((k.to_vec(), e));
                }
            }
        }
        Ok(None)
    }

    /// The persistent value of `pk` (tests).
    #[cfg(test)]
    pub fn persistent(&self, pk: &[u8]) -> Option<PEntry> {
        self.lookup(key_hash(pk), pk, &mut Vec::new())
            .ok()
            .flatten()
    }

    /// Sets the persistent value of `pk` (in the delta, marked changed).
    fn set(&mut self, h: u64, pk: &[u8], e: Option<PEntry>) {
        self.changed += 1;
        self.delta.set(h, pk, e, true);
    }

    /// Notes a new version of `pk` (every write, §4.3 Insert); `has_entry`
    /// if it adds an entry to the PKey layer. Reads the table file for a
    /// key not in the delta.
    pub fn write(&mut self, pk: &[u8], seq: SeqNo, has_entry: bool) -> Result<()> {
        let h = key_hash(pk);
        let mut others = Vec::new();
        match self.lookup(h, pk, &mut others)? {
            None => {
                if has_entry {
                    // A new key of the table: it and the keys whose hash
                    // it has are marked shared (module doc).
                    for (k, e) in &others {
                        if !e.shared {
                            self.set(h, k, Some(PEntry { shared: true, ..*e }));
                        }
                        self.volatile.share(h, k);
                    }
                    self.set(
                        h,
                        pk,
                        Some(PEntry {
                            seq,
                            n: 1,
                            has_entry,
                            shared: !others.is_empty(),
                        }),
                    );
                }
            }
            Some(mut e) => {
                if e.has_entry {
                    e.n += 1;
                }
                e.seq = seq;
                e.has_entry = has_entry;
                self.settle(h, pk, e);
            }
        }
        Ok(())
    }

    /// Records `pk`'s new persistent value `e` and keeps the volatile
    /// table in line (it holds exactly the keys with `n > 1`).
    fn settle(&mut self, h: u64, pk: &[u8], e: PEntry) {
        if e.n > 1 {
            let v = VEntry {
                seq: e.seq,
                count: e.n,
                has_entry: e.has_entry,
                shared: e.shared,
            };
            self.volatile.insert(h, pk, v);
            self.set(h, pk, Some(e));
            return;
        }
        self.volatile.remove(h, pk);
        self.set(h, pk, e.has_entry.then_some(e));
    }

    /// Garbage collection removed one obsolete entry of `pk`. Only keys
    /// with obsolete entries (`n > 1`, so in the volatile table) have
    /// entries to collect; the volatile table holds their value.
    pub fn collected(&mut self, pk: &[u8]) {
        let h = key_hash(pk);
        if let Some(v) = self.volatile.get(h, pk) {
            let e = PEntry {
                seq: v.seq,
                n: v.count.saturating_sub(1).max(1),
                has_entry: v.has_entry,
                shared: v.shared,
            };
            self.settle(h, pk, e);
        }
    }

    /// True if nothing changed since the last [`Validation::drain_changes`].
    pub fn is_clean(&self) -> bool {
        self.changed == 0
    }

    /// Every key changed since the last call, with its value (`None`: it
    /// left the table); then nothing is changed.
    pub fn drain_changes(&mut self, mut f: impl FnMut(&[u8], Option<PEntry>)) {
        if self.changed > 0 {
            for d in self.delta.iter_mut() {
                if d.take_dirty() {
                    f(d.key.bytes(), d.e());
                }
            }
        }
        self.changed = 0;
    }

    /// Validation of entry `(pk, seq)` for a reader at `snapshot` (the
    /// volatile table only; `pk` has an entry in the PKey layer, so it is
    /// a key of the persistent table).
    pub fn check(&self, pk: &[u8], seq: SeqNo, snapshot: SeqNo) -> Verdict {
        self.check_hashed(key_hash(pk), pk, seq, snapshot)
    }

    /// [`Validation::check`] of `pk` whose [`key_hash`] is `h`.
    #[inline(always)]
    pub fn check_hashed(&self, h: u64, pk: &[u8], seq: SeqNo, snapshot: SeqNo) -> Verdict {
        if self.volatile.len() == 0 {
            return Verdict::Valid;
        }
        match self.volatile.get(h, pk) {
            None => Verdict::Valid,
            Some(v) if v.seq == seq => Verdict::Valid,
            Some(v) if v.seq <= snapshot => Verdict::Stale,
            Some(_) => Verdict::Newer,
        }
    }

    /// Prefetches the volatile slots `check_hashed` will read for the key
    /// of hash `h` (see `VolatileTable::prefetch_home`). A hint only.
    #[inline(always)]
    pub fn prefetch(&self, h: u64) {
        if self.volatile.len() != 0 {
            self.volatile.prefetch_home(h);
        }
    }

    /// Garbage collection's verdict on `(pk, seq)`: collectable if
    /// replaced at or below `horizon` (the oldest snapshot a reader may
    /// hold).
    pub fn verdict(&self, pk: &[u8], seq: SeqNo, horizon: SeqNo) -> Verdict {
        match self.check(pk, seq, horizon) {
            Verdict::Stale => Verdict::Collectable,
            v => v,
        }
    }

    #[cfg(test)]
    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    /// Keys in the delta (tests).
    #[cfg(test)]
    pub fn delta_len(&self) -> usize {
        self.delta.len()
    }

    /// True once the delta is large enough to merge into a new table
    /// file: more than `min` keys plus 1/[`MERGE_SHARE`] of the file's.
    pub fn wants_merge(&self, min: usize) -> bool {
        let share = self
            .base
            .as_ref()
            .map_or(0, |t| t.r.count as usize / MERGE_SHARE);
        self.delta.len() > min + share
    }

    /// Hands the delta to a [`MergeJob`], which writes the next table
    /// file without the caller's lock; a new, empty delta takes the
    /// changes from now on, and nothing is changed: the log group that
    /// will name the file (`Rec::Table`) records every change so far.
    /// Then [`Validation::finish_merge`] with the file, or
    /// [`Validation::abort_merge`].
    pub fn begin_merge(&mut self) -> MergeJob {
        let mut delta = std::mem::take(&mut self.delta);
        delta.freeze();
        let delta = Arc::new(delta);
        self.merging = Some(delta.clone());
        self.changed = 0;
        MergeJob {
            base: self.base.clone(),
            delta,
        }
    }

    /// The job's file is the table; the delta it merged is dropped.
    pub fn finish_merge(&mut self, t: PkTable) {
        self.base = Some(Arc::new(t));
        self.merging = None;
    }

    /// The job failed: the keys it held return to the delta (those not
    /// changed since), marked changed.
    pub fn abort_merge(&mut self) {
        if let Some(m) = self.merging.take() {
            for (h, d) in m.iter() {
                if self.delta.get(h, d.key.bytes()).is_none() {
                    self.changed += 1;
                    self.delta.set(h, d.key.bytes(), d.e(), true);
                }
            }
        }
    }

    /// The whole merge under one borrow (tests).
    #[cfg(test)]
    pub fn merge(
        &mut self,
        fs: &Arc<dyn Fs>,
        dir: &Path,
        number: u64,
        key_type: u8,
    ) -> Result<TableRef> {
        let t = self.begin_merge().write(fs, dir, number, key_type)?;
        let r = t.r;
        self.finish_merge(t);
        Ok(r)
    }

    /// The table file in use, if any.
    pub fn table(&self) -> Option<TableRef> {
        self.base.as_ref().map(|t| t.r).or(self.pending)
    }

    /// Applies one Pk record of the log (recovery): the key's value, or
    /// its removal, on top of the table named before it.
    pub fn load(&mut self, pk: &[u8], e: Option<PEntry>) {
        self.loaded.push((key_hash(pk), DEntry::new(pk, e, false)));
    }

    /// A Table record of the log (recovery): the table is that file, and
    /// the Pk records before it no longer count.
    pub fn load_table(&mut self, r: TableRef) {
        self.base = None;
        self.pending = Some(r);
        self.delta = Delta::default();
        self.merging = None;
        self.loaded.clear();
        self.changed = 0;
    }

    /// Opens the table file the log named (checking it) and rebuilds the
    /// volatile table (§4.3 Recovery) from the file's volatile section
    /// (its keys with `n > 1`) and the delta.
    pub fn finish_open(&mut self, fs: &Arc<dyn Fs>, dir: &Path, key_type: u8) -> Result<()> {
        fn ventry(e: PEntry) -> Option<VEntry> {
            (e.n > 1).then_some(VEntry {
                seq: e.seq,
                count: e.n,
                has_entry: e.has_entry,
                shared: e.shared,
            })
        }
        let Validation {
            pending,
            base,
            delta,
            loaded,
            volatile,
            ..
        } = self;
        *volatile = VolatileTable::default();
        // At an open the delta is empty (`load` only gathers records).
        let loaded = std::mem::take(loaded);
        if delta.len() == 0 {
            delta.load_sorted(loaded);
        } else {
            for (h, d) in loaded {
                delta.set(h, d.key.bytes(), d.e(), false);
            }
        }
        if let Some(r) = pending.take() {
            let vol = std::cell::RefCell::new(&mut *volatile);
            let mut walk = delta.walk();
            *base = Some(Arc::new(PkTable::open(
                fs,
                dir,
                r,
                key_type,
                |n| **vol.borrow_mut() = VolatileTable::with_capacity(n + delta.len()),
                &mut |h, k, e| {
                    // In the file's (hash, key) order: a front-to-back fill.
                    // A key the delta has is taken from the delta. An
                    // unshared key's hash is no other key's, also in the
                    // delta (a key added since with its hash made both
                    // shared in the delta), so the hash tells.
                    let Some(v) = ventry(e) else { return };
                    let in_delta = match (&mut walk, k) {
                        (Some(w), Some(k)) => w.same(h).iter().any(|d| d.1.key.bytes() == k),
                        (Some(w), None) => !w.same(h).is_empty(),
                        (None, Some(k)) => delta.get(h, k).is_some(),
                        (None, None) => delta.has_hash(h),
                    };
                    match k {
                        _ if in_delta => {}
                        Some(k) if v.shared => vol.borrow_mut().insert(h, k, v),
                        _ => vol.borrow_mut().push_sorted(h, v),
                    }
                },
            )?));
        }
        for (h, d) in delta.iter() {
            if let Some(v) = d.e().and_then(ventry) {
                volatile.insert(h, d.key.bytes(), v);
            }
        }
        Ok(())
    }

    /// Estimated RAM of the delta and of the volatile table.
    pub fn memory_bytes(&self) -> (usize, usize) {
        let merging = self.merging.as_ref().map_or(0, |d| d.memory_bytes());
        let base = self.base.as_ref().map_or(0, |t| t.memory_bytes());
        (
            self.delta.memory_bytes() + merging + base,
            self.volatile.memory_bytes(),
        )
    }
}

/// The delta is merged into a new table file once it outgrows the
/// minimum plus this fraction (1/n) of the file's keys. The delta is the
/// part of the index's DRAM that a flush may leave behind (48 bytes a
/// key with 8-byte primary keys): at 1/16 a 2 M-key upsert load ended
/// with 0 to 6.8 MB of it beside 17.6 MB of the rest (9.2–12.9% of
/// `memory`'s index, against PERSEID's target of 10%). At 1/256 it is at
/// most 1.2 MB there (24 k keys); a load whose flush intervals change
/// more keys than that (most: a 64 MiB memtable of 1 KB records changes
/// about 100 k) merges at every flush, as 77% of them did at 1/16.
pub(crate) const MERGE_SHARE: usize = 256;

/// A merge of the persistent table's file and a frozen delta into the
/// next file ([`Validation::begin_merge`]): it reads only what it holds,
/// so it runs while writers go on changing the validation's new delta.
pub(crate) struct MergeJob {
    base: Option<Arc<PkTable>>,
    delta: Arc<Delta>,
}

impl MergeJob {
    /// Writes the table file `number`: the base file's keys with the
    /// delta applied, in one pass in (hash, key) order (the frozen delta
    /// is sorted so), durably.
    pub fn write(
        &self,
        fs: &Arc<dyn Fs>,
        dir: &Path,
        number: u64,
        key_type: u8,
    ) -> Result<PkTable> {
        debug_assert!(self.delta.map.is_empty() && self.delta.more.is_empty());
        let base_count = self.base.as_ref().map_or(0, |t| t.r.count);
        let mut w = TableWriter::create(fs, dir, number, base_count + self.delta.len() as u64)?;
        let mut d = self
            .delta
            .frozen
            .iter()
            .map(|(h, d)| (*h, d.key.bytes(), d.e()))
            .peekable();
        if let Some(t) = &self.base {
            t.for_each(|k, e| {
                let h = key_hash(k);
                // Delta keys ordered before this one.
                while let Some(&(dh, dk, de)) = d.peek() {
                    if (dh, dk) >= (h, k) {
                        break;
                    }
                    if let Some(de) = de {
                        w.push(dh, dk, &de);
                    }
                    d.next();
                }
                match d.peek() {
                    Some(&(dh, dk, de)) if (dh, dk) == (h, k) => {
                        if let Some(de) = de {
                            w.push(dh, dk, &de);
                        }
                        d.next();
                    }
                    _ => w.push(h, k, &e),
                }
            })?;
        }
        for (dh, dk, de) in d {
            if let Some(de) = de {
                w.push(dh, dk, &de);
            }
        }
        w.finish(key_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_spreads_similar_keys_over_the_low_bits() {
        use std::collections::HashSet;
        use std::hash::{BuildHasher, BuildHasherDefault};
        let b = BuildHasherDefault::<FxHasher>::default();
        let mut low: HashSet<u64> = HashSet::new();
        for i in 0..4096u64 {
            low.insert(b.hash_one(format!("k{i:08}").as_bytes()) & 0xfff);
        }
        // 4096 keys into 4096 buckets: about 63% distinct if uniform.
        assert!(low.len() > 2300, "{} distinct low parts", low.len());
    }

    /// The delta against a map, with many keys per hash and hashes
    /// spread over every prefix, across freezes (every 64 keys) and
    /// dirty-flag drains.
    #[test]
    fn the_delta_agrees_with_a_model() {
        use std::collections::BTreeMap;
        TEST_FREEZE_AT.with(|c| c.set(64));
        let mut d = Delta::default();
        let mut model: BTreeMap<(u64, Vec<u8>), (Option<PEntry>, bool)> = BTreeMap::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 400 hashes, spread over the prefixes; about 3 keys each.
            let hi = x % 400;
            let h = hi.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let pk = format!("k{}-{}", hi, (x >> 20) % 3).into_bytes();
            let e = (!x.is_multiple_of(6)).then_some(PEntry {
                seq: step,
                n: (x >> 30) as u32 % 4 + 1,
                has_entry: x.is_multiple_of(2),
                shared: x.is_multiple_of(3),
            });
            let dirty = !x.is_multiple_of(5);
            d.set(h, &pk, e, dirty);
            model.insert((h, pk), (e, dirty));
            if step % 997 == 0 {
                let mut drained = Vec::new();
                for e in d.iter_mut() {
                    if e.take_dirty() {
                        drained.push(e.key.bytes().to_vec());
                    }
                }
                let mut want: Vec<Vec<u8>> = model
                    .iter_mut()
                    .filter_map(|(k, v)| std::mem::take(&mut v.1).then(|| k.1.clone()))
                    .collect();
                drained.sort();
                want.sort();
                assert_eq!(drained, want, "step {step}");
            }
            if step % 251 == 0 {
                assert_eq!(d.len(), model.len());
                for ((h, k), (e, _)) in &model {
                    let got = d.get(*h, k).map(DEntry::e);
                    assert_eq!(got, Some(*e), "step {step} key {k:?}");
                    assert!(d.has_hash(*h));
                }
                assert!(d.get(7, b"absent").is_none() && !d.has_hash(7));
                let h = model.keys().next().map(|k| k.0).unwrap_or(1);
                let mut same: Vec<Vec<u8>> =
                    d.same_hash(h).map(|e| e.key.bytes().to_vec()).collect();
                same.sort();
                let want: Vec<Vec<u8>> = model
                    .keys()
                    .filter(|k| k.0 == h)
                    .map(|k| k.1.clone())
                    .collect();
                assert_eq!(same, want);
                let mut all: Vec<(u64, Vec<u8>)> =
                    d.iter().map(|(h, e)| (h, e.key.bytes().to_vec())).collect();
                all.sort();
                assert_eq!(all, model.keys().cloned().collect::<Vec<_>>());
            }
        }
        TEST_FREEZE_AT.with(|c| c.set(FREEZE_AT));
    }

    /// The delta's RAM follows its length: no jump when a hash map's
    /// slots would double (at 2 M records, a jump from about 7.5 to
    /// 15 MB decided whether the index kept to 10% of `memory`'s).
    #[test]
    fn the_deltas_ram_grows_with_its_length() {
        let mut d = Delta::default();
        let mut prev = 0;
        for i in 0..300_000u64 {
            let pk = i.to_be_bytes();
            d.set(key_hash(&pk), &pk, None, true);
            if i % 10_000 == 9_999 {
                let bytes = d.memory_bytes();
                let per_key = bytes / d.len();
                // 48 bytes a key, the directory, and the map of recent keys
                // (at most 16,384 slots).
                assert!(
                    bytes <= d.len() * 50 + 16_384 * 57,
                    "{} keys: {bytes} bytes ({per_key} a key)",
                    d.len()
                );
                assert!(bytes >= prev / 2, "{bytes} after {prev}");
                prev = bytes;
            }
        }
    }

    /// The most a flush leaves in RAM with the default `merge_min_keys`:
    /// a delta just below the merge threshold of a table of 1.3 M keys
    /// (PERSEID's 2 M-record upsert benchmark), under 1 MiB. (At 16,384
    /// it was 1.5 MB, which pushed the index past its DRAM bound, 10% of
    /// `memory`'s, in runs whose last flush did not merge.)
    #[test]
    fn a_delta_below_the_default_merge_threshold_stays_under_a_mebibyte() {
        let table_keys = 1_300_000;
        let most = crate::index::perseid::DEFAULT_MERGE_MIN_KEYS + table_keys / MERGE_SHARE;
        let mut d = Delta::default();
        for i in 0..most as u64 {
            let pk = i.to_be_bytes();
            d.set(key_hash(&pk), &pk, None, true);
        }
        assert!(
            d.memory_bytes() < 1 << 20,
            "{most} keys: {} bytes",
            d.memory_bytes()
        );
    }

    #[test]
    fn counts_follow_the_paper() {
        let mut v = Validation::default();
        v.write(b"a", 1, true).unwrap();
        assert_eq!(v.check(b"a", 1, 10), Verdict::Valid);
        assert_eq!(v.volatile_len(), 0);
        v.write(b"a", 2, true).unwrap();
        v.write(b"a", 3, true).unwrap();
        assert_eq!(v.persistent(b"a").map(|e| e.n), Some(3));
        assert_eq!(v.check(b"a", 1, 10), Verdict::Stale);
        assert_eq!(v.check(b"a", 3, 10), Verdict::Valid);
        // A reader at snapshot 2 cannot tell from the table.
        assert_eq!(v.check(b"a", 2, 2), Verdict::Newer);
        assert_eq!(v.verdict(b"a", 1, 2), Verdict::Newer);
        assert_eq!(v.verdict(b"a", 1, 3), Verdict::Collectable);
        v.collected(b"a");
        assert_eq!(v.volatile_len(), 1);
        v.collected(b"a");
        assert_eq!(v.volatile_len(), 0);
        assert_eq!(v.persistent(b"a").map(|e| e.n), Some(1));
        // A delete: the key stays until its last entry is collected.
        v.write(b"a", 4, false).unwrap();
        assert_eq!(v.check(b"a", 3, 10), Verdict::Stale);
        v.collected(b"a");
        assert_eq!(v.persistent(b"a"), None);
        assert_eq!(v.volatile_len(), 0);
        // Deleting an unknown key records nothing.
        let before = v.delta_len();
        v.write(b"b", 5, false).unwrap();
        assert_eq!(v.delta_len(), before);
        assert_eq!(v.persistent(b"b"), None);
        // Recovery rebuilds the volatile table from the persistent one.
        v.write(b"c", 6, true).unwrap();
        v.write(b"c", 7, true).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        v.finish_open(&fs, dir.path(), 0).unwrap();
        assert_eq!(v.volatile_len(), 1);
        assert_eq!(v.check(b"c", 6, 10), Verdict::Stale);
    }

    /// The table file with the delta on top gives every key's value the
    /// in-RAM model gives, through merges into new files and a reopen
    /// (the file named by the log, the later Pk records replayed).
    #[test]
    fn merged_tables_and_the_delta_agree_with_a_model() {
        use std::collections::HashMap;
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        let mut v = Validation::default();
        let mut model: HashMap<Vec<u8>, PEntry> = HashMap::new();
        let mut log: Vec<(Vec<u8>, Option<PEntry>)> = Vec::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut seq = 0;
        let mut number = 1;
        for round in 0..8 {
            for _ in 0..3000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                seq += 1;
                let pk = format!("k{}", x % 2000).into_bytes();
                let has = !x.is_multiple_of(7);
                v.write(&pk, seq, has).unwrap();
                // The model: the paper's counts.
                match model.get_mut(&pk) {
                    None if has => {
                        model.insert(
                            pk.clone(),
                            PEntry {
                                seq,
                                n: 1,
                                has_entry: true,
                                shared: false,
                            },
                        );
                    }
                    None => {}
                    Some(e) => {
                        if e.has_entry {
                            e.n += 1;
                        }
                        e.seq = seq;
                        e.has_entry = has;
                    }
                }
                if x.is_multiple_of(5) && v.check(&pk, 0, seq) == Verdict::Stale {
                    v.collected(&pk);
                    let e = model.get_mut(&pk).unwrap();
                    e.n -= 1;
                    if e.n == 1 && !e.has_entry {
                        model.remove(&pk);
                    }
                }
            }
            // Merges at rounds 1 and 5: the log holds two or three drains
            // of each key's changes since (its last record is its value).
            if round % 4 == 1 {
                let r = v.merge(&fs, dir.path(), number, 0).unwrap();
                number += 1;
                log.clear();
                log.push((b"table".to_vec(), None));
                assert_eq!(r.count as usize, model.len());
                assert_eq!(v.delta_len(), 0);
            } else {
                v.drain_changes(|k, e| log.push((k.to_vec(), e)));
            }
            for (k, e) in &model {
                assert_eq!(v.persistent(k), Some(*e), "round {round}");
            }
        }
        // Reopen: the last table, then the Pk records written after it.
        let mut w = Validation::default();
        if let Some(r) = v.table() {
            w.load_table(r);
        }
        v.drain_changes(|k, e| log.push((k.to_vec(), e)));
        for (k, e) in log.into_iter().filter(|(k, _)| k != b"table") {
            w.load(&k, e);
        }
        w.finish_open(&fs, dir.path(), 0).unwrap();
        for (k, e) in &model {
            assert_eq!(w.persistent(k), Some(*e));
        }
        let updated = model.values().filter(|e| e.n > 1).count();
        assert_eq!(w.volatile_len(), updated);
    }

    /// The delta a flush may leave in RAM is bounded by the minimum plus
    /// 1/`MERGE_SHARE` of the table's keys: the first key beyond it asks
    /// for a merge.
    #[test]
    fn the_delta_asks_for_a_merge_past_its_share_of_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        let mut v = Validation::default();
        let table_keys = 20 * MERGE_SHARE;
        for i in 0..table_keys {
            v.write(format!("t{i:06}").as_bytes(), i as u64 + 1, true)
                .unwrap();
        }
        v.merge(&fs, dir.path(), 1, 0).unwrap();
        let min = 10;
        let bound = min + table_keys / MERGE_SHARE;
        let mut seq = table_keys as u64;
        for i in 0..bound {
            assert!(!v.wants_merge(min), "merge asked with {i} keys");
            seq += 1;
            v.write(format!("d{i:06}").as_bytes(), seq, true).unwrap();
        }
        assert!(!v.wants_merge(min));
        v.write(b"one more", seq + 1, true).unwrap();
        assert!(v.wants_merge(min));
    }

    /// A key listed in the table file's volatile section (two entries)
    /// whose count the delta brought back to one (garbage collected since
    /// the merge) is valid after a reopen: the rebuild skips the file's
    /// value of every key the delta holds (`FrozenWalk`), and the delta
    /// leaves it out of the volatile table.
    #[test]
    fn a_key_collected_since_the_merge_is_valid_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        let mut v = Validation::default();
        let mut seq = 0;
        // 300 keys with two entries each (n = 2: in the volatile section).
        let keys: Vec<Vec<u8>> = (0..300)
            .map(|i| format!("key{i:04}").into_bytes())
            .collect();
        for _ in 0..2 {
            for k in &keys {
                seq += 1;
                v.write(k, seq, true).unwrap();
            }
        }
        let r = v.merge(&fs, dir.path(), 1, 0).unwrap();
        // Every third key's older entry is collected: n = 1 in the delta.
        let mut log = Vec::new();
        for k in keys.iter().step_by(3) {
            assert_eq!(v.check(k, 1, seq), Verdict::Stale);
            v.collected(k);
        }
        v.drain_changes(|k, e| log.push((k.to_vec(), e)));
        let mut w = Validation::default();
        w.load_table(r);
        for (k, e) in log {
            w.load(&k, e);
        }
        w.finish_open(&fs, dir.path(), 0).unwrap();
        assert_eq!(w.volatile_len(), 200);
        for (i, k) in keys.iter().enumerate() {
            let latest = 300 + i as SeqNo + 1;
            assert_eq!(w.check(k, latest, seq), Verdict::Valid, "key {i}");
            let older = i as SeqNo + 1;
            let want = if i % 3 == 0 {
                Verdict::Valid
            } else {
                Verdict::Stale
            };
            // (A collected key's older entry is gone from the PKey layer;
            // its validation no longer matters, and reads as valid.)
            assert_eq!(w.check(k, older, seq), want, "key {i}, older entry");
        }
    }

    /// Keys that share a hash with another key of the table (built by
    /// inverting the hash) are validated as their own: with writes,
    /// deletes, collection, merges into table files and a reopen, every
    /// key's latest entry is valid and an older one stale exactly when
    /// the model says, and every pair of keys of the table with one hash
    /// is marked shared. Without the marks, a key would take its
    /// partner's slot in the volatile table and its entries would be
    /// judged by the partner's sequence number.
    #[test]
    fn keys_sharing_a_hash_are_validated_as_their_own() {
        use super::super::table::collide::key_with_hash;
        use std::collections::HashMap;
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        // 200 plain keys; 60 of them have one partner, 10 two.
        let mut keys: Vec<Vec<u8>> = (0..200u32)
            .map(|i| format!("{i:08}").into_bytes())
            .collect();
        for i in 0..70usize {
            let h = key_hash(&keys[i]);
            keys.push(key_with_hash(h, i as u64));
            if i < 10 {
                keys.push(key_with_hash(h, 1000 + i as u64));
            }
        }
        // (seq, n, has_entry) of each key of the table.
        let mut model: HashMap<Vec<u8>, (u64, u32, bool)> = HashMap::new();
        let mut v = Validation::default();
        let mut log: Vec<(Vec<u8>, Option<PEntry>)> = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut seq = 0;
        let verify = |v: &Validation, model: &HashMap<Vec<u8>, (u64, u32, bool)>, at: &str| {
            let mut by_hash: HashMap<u64, usize> = HashMap::new();
            for k in model.keys() {
                *by_hash.entry(key_hash(k)).or_default() += 1;
            }
            for (k, &(s, n, has)) in model {
                let p = v.persistent(k).unwrap();
                assert_eq!(
                    (p.seq, p.n, p.has_entry),
                    (s, n, has),
                    "{at}: value of {k:?}"
                );
                if by_hash[&key_hash(k)] > 1 {
                    assert!(p.shared, "{at}: {k:?} shares its hash unmarked");
                }
                assert_eq!(
                    v.check(k, s, u64::MAX),
                    Verdict::Valid,
                    "{at}: latest of {k:?}"
                );
                let old = if n > 1 {
                    Verdict::Stale
                } else {
                    Verdict::Valid
                };
                assert_eq!(
                    v.check(k, s - 1, u64::MAX),
                    old,
                    "{at}: older entry of {k:?}"
                );
            }
            let updated = model.values().filter(|e| e.1 > 1).count();
            assert_eq!(v.volatile_len(), updated, "{at}: volatile keys");
        };
        let mut pending: Option<MergeJob> = None;
        for round in 0..10 {
            for _ in 0..1500 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                seq += 1;
                let k = keys[(x % keys.len() as u64) as usize].clone();
                let has = !x.is_multiple_of(9);
                v.write(&k, seq, has).unwrap();
                match model.get_mut(&k) {
                    None if has => {
                        model.insert(k.clone(), (seq, 1, true));
                    }
                    None => {}
                    Some(e) => {
                        if e.2 {
                            e.1 += 1;
                        }
                        e.0 = seq;
                        e.2 = has;
                    }
                }
                if x % 4 == 1 {
                    if let Some(e) = model.get_mut(&k).filter(|e| e.1 > 1) {
                        v.collected(&k);
                        e.1 -= 1;
                        if e.1 == 1 && !e.2 {
                            model.remove(&k);
                        }
                    }
                }
            }
            verify(&v, &model, &format!("round {round}"));
            // A merge begun at the last flush ran while this round wrote
            // (as a flush writes the table file after releasing the
            // state's lock); one is abandoned, and the next flush merges
            // everything, as after a failed write.
            if let Some(job) = pending.take() {
                if round == 6 {
                    v.abort_merge();
                    verify(&v, &model, "after an abandoned merge");
                    v.merge(&fs, dir.path(), 100 + round, 0).unwrap();
                    log.clear();
                } else {
                    let t = job.write(&fs, dir.path(), round, 0).unwrap();
                    v.finish_merge(t);
                }
                verify(&v, &model, &format!("round {round}, merge finished"));
            }
            if round % 3 == 2 {
                pending = Some(v.begin_merge());
                log.clear();
            }
            v.drain_changes(|k, e| log.push((k.to_vec(), e)));
            verify(&v, &model, &format!("round {round}, after the flush"));
        }
        if let Some(job) = pending.take() {
            let t = job.write(&fs, dir.path(), 99, 0).unwrap();
            v.finish_merge(t);
        }
        let mut w = Validation::default();
        if let Some(r) = v.table() {
            w.load_table(r);
        }
        for (k, e) in log {
            w.load(&k, e);
        }
        w.finish_open(&fs, dir.path(), 0).unwrap();
        verify(&w, &model, "reopened");
    }
}
