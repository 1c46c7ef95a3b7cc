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

use super::fxhash::FastMap;

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
    map: FastMap<Vec<u8>, MemoEntry>,
    bytes: usize,
}

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

    pub fn get(&self, key: &[u8]) -> Option<&MemoEntry> {
        self.map.get(key)
    }

    /// Records a write of `key` at `seq`; `may_exist` tells whether an older
    /// version may exist (ignored if the key already has a live entry).
    pub fn note_write(&mut self, key: &[u8], seq: SeqNo, may_exist: bool) {
        match self.map.get_mut(key) {
            Some(e) if e.removed_at.is_none() => {
                e.latest = e.latest.max(seq);
                e.obsolete += 1;
            }
            Some(e) if may_exist => {
                *e = MemoEntry {
                    latest: seq,
                    obsolete: 1,
                    removed_at: None,
                };
            }
            Some(_) => {}
            None if may_exist => {
                self.bytes += key.len() + ENTRY_OVERHEAD;
                self.map.insert(
                    key.to_vec(),
                    MemoEntry {
                        latest: seq,
                        obsolete: 1,
                        removed_at: None,
                    },
                );
            }
            None => {}
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
                    key.to_vec(),
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
        m.note_write(b"a", 1, false); // fresh insert: no entry
        assert!(m.get(b"a").is_none());
        m.note_write(b"a", 5, true); // update
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

    #[test]
    fn tombstone_at_bottom_removes() {
        let mut m = Memo::default();
        m.note_write(b"k", 2, true);
        m.note_write(b"k", 3, true);
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
