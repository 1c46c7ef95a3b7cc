//! The update memo (NEXT §3.3): primary keys that have obsolete versions,
//! with the sequence number of their latest write and a count of obsolete
//! versions, so that query candidates from older components are validated
//! without a point lookup.
//!
//! Maintenance, by the write-group leader before the batch enters the
//! memtable: a write of key `k` updates `k`'s entry if it has one, and
//! creates one if `k` *may* already exist (exact check in the memtables,
//! key range + Bloom filter for tables, no data I/O). A Bloom false positive
//! only creates a harmless entry. The dropped-versions stream decrements the
//! count; an entry leaves when its count reaches zero or its latest version
//! (a tombstone) is dropped.
//!
//! Removal and readers: a removal becomes real only with the install of
//! the compaction that dropped the versions, and a reader may still hold an
//! older version containing them. Removed entries are therefore kept,
//! stamped with the index-state generation of that install, and treated as
//! present by readers of older generations; they are purged once no such
//! reader remains.
//!
//! Durability: every table written while the memo is in use carries a
//! `next.memo` meta block with the entries of the keys it holds; recovery
//! takes, per key, the entry with the highest latest sequence (and the
//! highest count for equal sequences), then replays the WAL through the
//! same maintenance. Counts only over-approximate, so an entry never leaves
//! too early. Format in `docs/format/next.md`.

#![deny(clippy::indexing_slicing)]

use strata_lsm::coding::{get_length_prefixed, get_varint64, put_length_prefixed, put_varint64};
use strata_lsm::error::{Error, Result};
use strata_lsm::key::SeqNo;

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use strata_lsm::sync::{read, write};

use super::fxhash::FastMap;
use super::inline_key::{InlineKey, INLINE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoEntry {
    /// Sequence number of the latest write of the key.
    pub latest: SeqNo,
    /// Versions older than `latest` that may still exist.
    pub obsolete: u64,
    /// Generation of the install that removed the entry, if removed.
    pub removed_at: Option<u64>,
}

/// Outcome of validating a candidate version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    Valid,
    Stale,
    /// The key was written after the reader's snapshot: only a point lookup
    /// at the snapshot can tell.
    Check,
}

#[derive(Default, Debug)]
pub struct Memo {
    /// Keyed by primary key (hashed with FxHash: looked up for every
    /// written key and every table entry flushed).
    map: FastMap<InlineKey, MemoEntry>,
    bytes: usize,
}

// Keys up to `INLINE` bytes are held in the map's bucket (see
// `inline_key`): a bucket holds the key and a 32-byte entry, 56 bytes.
const ENTRY_OVERHEAD: usize = 64;

impl Memo {
    /// Entries held, removed ones included (0: nothing to look up).
    pub fn entries(&self) -> usize {
        self.map.len()
    }

    pub fn len(&self) -> usize {
        self.map.values().filter(|e| e.removed_at.is_none()).count()
    }

    pub fn approximate_bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub fn get(&self, key: &[u8]) -> Option<&MemoEntry> {
        self.map.get(key)
    }

    /// Records a write of `key` at `seq`; `may_exist` tells whether an older
    /// version may exist, and is asked only if the key has no live entry
    /// (it may probe tables). One probe of the map for a key stored inline.
    pub fn note_write(&mut self, key: &[u8], seq: SeqNo, may_exist: impl FnOnce() -> bool) {
        let fresh = MemoEntry {
            latest: seq,
            obsolete: 1,
            removed_at: None,
        };
        if key.len() > INLINE || self.map.is_empty() {
            // Boxing the key for `entry` would allocate on every write; and
            // a memo without entries (no update seen yet: a load) is not
            // hashed into.
            match self.map.get_mut(key) {
                Some(e) => Self::rewrite(e, fresh, may_exist),
                None if may_exist() => {
                    self.bytes += key.len() + ENTRY_OVERHEAD;
                    self.map.insert(InlineKey::new(key), fresh);
                }
                None => {}
            }
            return;
        }
        match self.map.entry(InlineKey::new(key)) {
            Entry::Occupied(mut o) => Self::rewrite(o.get_mut(), fresh, may_exist),
            Entry::Vacant(v) => {
                if may_exist() {
                    self.bytes += key.len() + ENTRY_OVERHEAD;
                    v.insert(fresh);
                }
            }
        }
    }

    /// A write's change to its key's existing entry `e` (`fresh` if the
    /// entry was removed and an older version may exist).
    fn rewrite(e: &mut MemoEntry, fresh: MemoEntry, may_exist: impl FnOnce() -> bool) {
        if e.removed_at.is_none() {
            e.latest = e.latest.max(fresh.latest);
            e.obsolete += 1;
        } else if may_exist() {
            *e = fresh;
        }
    }

    /// Applies one dropped version, installed at generation `generation`.
    pub fn on_dropped(
        &mut self,
        key: &[u8],
        seq: SeqNo,
        tombstone_at_bottom: bool,
        generation: u64,
    ) {
        let Some(e) = self.map.get_mut(key) else {
            return;
        };
        if e.removed_at.is_some() {
            return;
        }
        if tombstone_at_bottom && seq >= e.latest {
            e.removed_at = Some(generation);
            return;
        }
        e.obsolete = e.obsolete.saturating_sub(1);
        if e.obsolete == 0 {
            e.removed_at = Some(generation);
        }
    }

    /// Forgets removed entries no reader can see any more (removed at or
    /// before `oldest_live_generation`).
    pub fn purge(&mut self, oldest_live_generation: u64) {
        let before = self.map.len();
        let mut freed = 0;
        self.map.retain(|k, e| {
            let keep = e.removed_at.is_none_or(|g| g > oldest_live_generation);
            if !keep {
                freed += k.len() + ENTRY_OVERHEAD;
            }
            keep
        });
        if self.map.len() != before {
            self.bytes = self.bytes.saturating_sub(freed);
        }
    }

    /// Is version `seq` of `key` the newest visible at `snapshot`, for a
    /// reader of index-state generation `generation`?
    pub fn validate(&self, key: &[u8], seq: SeqNo, snapshot: SeqNo, generation: u64) -> Validity {
        let Some(e) = self.map.get(key) else {
            return Validity::Valid;
        };
        if e.removed_at.is_some_and(|g| g <= generation) {
            return Validity::Valid;
        }
        if e.latest > snapshot {
            return Validity::Check;
        }
        if seq >= e.latest {
            Validity::Valid
        } else {
            Validity::Stale
        }
    }

    /// Merges an entry read from a table's memo block at recovery.
    pub fn merge_recovered(&mut self, key: &[u8], latest: SeqNo, obsolete: u64) {
        match self.map.get_mut(key) {
            Some(e) => {
                if latest > e.latest || (latest == e.latest && obsolete > e.obsolete) {
                    e.latest = latest;
                    e.obsolete = obsolete;
                }
            }
            None => {
                self.bytes += key.len() + ENTRY_OVERHEAD;
                self.map.insert(
                    InlineKey::new(key),
                    MemoEntry {
                        latest,
                        obsolete,
                        removed_at: None,
                    },
                );
            }
        }
    }

    /// Live entry for `key`, for persisting into a table's memo block.
    pub fn live(&self, key: &[u8]) -> Option<MemoEntry> {
        self.map
            .get(key)
            .filter(|e| e.removed_at.is_none())
            .copied()
    }
}

/// Shards of the memo, each locked on its own.
const SHARDS: usize = 16;

/// The memo as [`SHARDS`] independently locked parts, a key's entry in the
/// part its hash names. Contract: every operation on a key's entry locks
/// that key's part only, so the writer noting a batch, a flush or
/// compaction reading entries for its memo block, and queries validating
/// candidates meet on one lock in sixteen. (With one lock, the online-build
/// writer slept on it about 1,000 times in 3 s, `perf` sched_switch
/// stacks, session 46.) Operations are per key, so no reader needs several
/// keys' entries changed together: a batch's notes are all made before the
/// batch is published.
pub struct MemoShards {
    shards: Box<[RwLock<Memo>]>,
    /// Entries in all parts, as of each part's last change (a flush checks
    /// it before locking for each entry).
    entries: AtomicUsize,
}

impl Default for MemoShards {
    fn default() -> Self {
        MemoShards {
            shards: (0..SHARDS).map(|_| RwLock::new(Memo::default())).collect(),
            entries: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Debug for MemoShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoShards")
            .field("entries", &self.entries())
            .finish()
    }
}

impl MemoShards {
    /// The part holding `key`'s entry, chosen by the tables' Bloom hash
    /// of the key: the maps inside hash it with FxHash, and parts chosen by
    /// bits of that same hash would leave every key of a part with the
    /// bits the map indexes or tags its buckets with.
    fn shard(&self, key: &[u8]) -> &RwLock<Memo> {
        let i = (strata_lsm::sstable::filter::hash64(key) % SHARDS as u64) as usize;
        let Some(s) = self.shards.get(i) else {
            unreachable!("i < SHARDS")
        };
        s
    }

    /// `key`'s part, locked for reading.
    pub fn read(&self, key: &[u8]) -> RwLockReadGuard<'_, Memo> {
        read(self.shard(key))
    }

    /// `key`'s part, locked for writing; the entry count is updated when
    /// the guard drops.
    pub fn write(&self, key: &[u8]) -> MemoWrite<'_> {
        let guard = write(self.shard(key));
        let before = guard.entries();
        MemoWrite {
            guard,
            before,
            entries: &self.entries,
        }
    }

    /// Calls `f` with every part, each locked for writing in turn.
    pub fn for_each_mut(&self, mut f: impl FnMut(&mut Memo)) {
        for s in self.shards.iter() {
            let guard = write(s);
            let before = guard.entries();
            let mut w = MemoWrite {
                guard,
                before,
                entries: &self.entries,
            };
            f(&mut w);
        }
    }

    /// Entries held, removed ones included, as of each part's last change
    /// (0: nothing to look up).
    pub fn entries(&self) -> usize {
        self.entries.load(Relaxed)
    }

    /// Live entries and approximate bytes, summed over the parts.
    pub fn stats(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, b), s| {
            let m = read(s);
            (n + m.len(), b + m.approximate_bytes())
        })
    }
}

/// One part of the memo locked for writing ([`MemoShards::write`]).
pub struct MemoWrite<'a> {
    guard: RwLockWriteGuard<'a, Memo>,
    /// The part's entry count when locked.
    before: usize,
    entries: &'a AtomicUsize,
}

impl std::ops::Deref for MemoWrite<'_> {
    type Target = Memo;

    fn deref(&self) -> &Memo {
        &self.guard
    }
}

impl std::ops::DerefMut for MemoWrite<'_> {
    fn deref_mut(&mut self) -> &mut Memo {
        &mut self.guard
    }
}

impl Drop for MemoWrite<'_> {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this).
        let after = self.guard.entries();
        if after > self.before {
            self.entries.fetch_add(after - self.before, Relaxed);
        } else if after < self.before {
            self.entries.fetch_sub(self.before - after, Relaxed);
        }
    }
}

/// Encodes a memo block: `varint count ‖ (len-prefixed key ‖ varint latest
/// ‖ varint obsolete)*`.
pub fn encode_block(entries: &[(Vec<u8>, MemoEntry)]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint64(&mut out, entries.len() as u64);
    for (k, e) in entries {
        put_length_prefixed(&mut out, k);
        put_varint64(&mut out, e.latest);
        put_varint64(&mut out, e.obsolete);
    }
    out
}

pub fn decode_block(mut src: &[u8]) -> Result<Vec<(Vec<u8>, SeqNo, u64)>> {
    let bad = || Error::corruption("bad next.memo block");
    let n = get_varint64(&mut src).ok_or_else(bad)?;
    // An entry takes at least 3 bytes: a corrupt count cannot make a
    // reservation larger than the block.
    let mut out = Vec::with_capacity(n.min(src.len() as u64 / 3) as usize);
    for _ in 0..n {
        let k = get_length_prefixed(&mut src).ok_or_else(bad)?;
        let latest = get_varint64(&mut src).ok_or_else(bad)?;
        let obsolete = get_varint64(&mut src).ok_or_else(bad)?;
        out.push((k.to_vec(), latest, obsolete));
    }
    if !src.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_and_validation() {
        let mut m = Memo::default();
        m.note_write(b"a", 1, || false); // fresh insert: no entry
        assert!(m.get(b"a").is_none());
        m.note_write(b"a", 5, || true); // update
        assert_eq!(m.validate(b"a", 1, 10, 0), Validity::Stale);
        assert_eq!(m.validate(b"a", 5, 10, 0), Validity::Valid);
        assert_eq!(m.validate(b"a", 1, 3, 0), Validity::Check);
        assert_eq!(m.validate(b"b", 1, 10, 0), Validity::Valid);
        // The obsolete version is dropped by the install of generation 7.
        m.on_dropped(b"a", 1, false, 7);
        assert_eq!(
            m.validate(b"a", 1, 10, 6),
            Validity::Stale,
            "older readers still see it"
        );
        assert_eq!(m.validate(b"a", 5, 10, 7), Validity::Valid);
        m.purge(6);
        assert!(m.get(b"a").is_some());
        m.purge(7);
        assert!(m.get(b"a").is_none());
        assert_eq!(m.len(), 0);
    }

    /// Keys inline and boxed, and keys that differ only by trailing zero
    /// bytes or by length across the inline limit, are distinct entries
    /// found by their bytes; `may_exist` is asked only without a live
    /// entry.
    #[test]
    fn keys_of_every_length_are_distinct_and_found() {
        let mut keys: Vec<Vec<u8>> = vec![Vec::new(), vec![0], vec![0, 0], b"a".to_vec()];
        keys.push(b"a\0".to_vec());
        for n in [INLINE - 1, INLINE, INLINE + 1, 100] {
            keys.push(vec![7; n]);
            let mut z = vec![7; n];
            z.push(0);
            keys.push(z);
        }
        let mut m = Memo::default();
        for (i, k) in keys.iter().enumerate() {
            m.note_write(k, i as u64 + 1, || true);
        }
        assert_eq!(m.entries(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            let e = m.live(k).unwrap();
            assert_eq!((e.latest, e.obsolete), (i as u64 + 1, 1), "key {k:?}");
            // A live entry is updated without asking.
            m.note_write(k, 1000 + i as u64, || panic!("asked for a live key"));
            assert_eq!(m.live(k).unwrap().obsolete, 2);
        }
        let bytes = m.approximate_bytes();
        m.on_dropped(&keys[0], 1000, true, 3);
        m.purge(3);
        assert_eq!(m.entries(), keys.len() - 1);
        assert_eq!(m.approximate_bytes(), bytes - ENTRY_OVERHEAD);
        // A new key that may not exist gets no entry, inline or boxed.
        m.note_write(b"new", 1, || false);
        m.note_write(&[9; 40], 1, || false);
        assert_eq!(m.entries(), keys.len() - 1);
    }

    /// Every key's reads and writes go to one part; the entry count
    /// follows inserts and purges in every part; keys spread over the parts.
    #[test]
    fn shards_count_entries_and_spread_keys() {
        let memo = MemoShards::default();
        let keys: Vec<Vec<u8>> = (0u64..1000).map(|i| i.to_be_bytes().to_vec()).collect();
        for (i, k) in keys.iter().enumerate() {
            memo.write(k).note_write(k, i as u64 + 1, || true);
        }
        assert_eq!(memo.entries(), 1000);
        assert_eq!(memo.stats().0, 1000);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(memo.read(k).live(k).map(|e| e.latest), Some(i as u64 + 1));
        }
        let used = memo.shards.iter().filter(|s| read(s).entries() > 0).count();
        assert_eq!(used, SHARDS, "1000 keys leave a part empty");
        let most = memo.shards.iter().map(|s| read(s).entries()).max();
        assert!(most < Some(120), "a part holds {most:?} of 1000 keys");
        for k in keys.iter().step_by(2) {
            memo.write(k).on_dropped(k, 1000, true, 5);
        }
        memo.for_each_mut(|m| m.purge(5));
        assert_eq!(memo.entries(), 500);
        assert_eq!(memo.stats().0, 500);
    }

    #[test]
    fn tombstone_at_bottom_removes() {
        let mut m = Memo::default();
        m.note_write(b"k", 2, || true);
        m.note_write(b"k", 3, || true);
        m.on_dropped(b"k", 3, true, 1);
        assert_eq!(m.validate(b"k", 2, 10, 1), Validity::Valid);
    }

    #[test]
    fn block_roundtrip_and_recovery_merge() {
        let e = |l, o| MemoEntry {
            latest: l,
            obsolete: o,
            removed_at: None,
        };
        let b = encode_block(&[(b"x".to_vec(), e(9, 2)), (b"y".to_vec(), e(3, 1))]);
        let d = decode_block(&b).unwrap();
        assert_eq!(d, vec![(b"x".to_vec(), 9, 2), (b"y".to_vec(), 3, 1)]);
        for cut in 0..b.len() {
            assert!(decode_block(&b[..cut]).is_err());
        }
        let mut m = Memo::default();
        m.merge_recovered(b"x", 4, 5);
        m.merge_recovered(b"x", 9, 2);
        m.merge_recovered(b"x", 9, 1);
        assert_eq!(m.live(b"x"), Some(e(9, 2)));
    }
}
