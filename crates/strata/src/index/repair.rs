//! Merge repair of a blind (validation-mode) composite index: Luo & Carey,
//! "Efficient Data Ingestion and Query Processing for LSM-Based Storage
//! Systems" (PVLDB 2019), §4.4, Figure 7.
//!
//! When the index tree compacts, every entry written to the merged table
//! is streamed, with its position, to a sorter; after the table's last
//! block, the primary keys are sorted and validated in one batched lookup
//! against the primary-key index (key → sequence number of the newest
//! version). Obsolete entries are marked in the new table's immutable
//! bitmap (`sstable::obsolete`): from then on every read of the table skips
//! them, and the table's next merge removes them physically.
//!
//! Repaired-timestamp pruning and the Bloom-filter optimisation: each table
//! this hook writes gets a *repaired timestamp* — the primary-key index's
//! own sequence number at the moment its view was pinned for the repair.
//! When such tables are merged again, an entry needs a lookup only if the
//! primary-key index may have received a version of its key since then:
//! `Db::may_have_changed_since` answers from the memtables and from the
//! Bloom filters, reading no data block (a key no component seems to hold
//! is looked up too: its deletion's tombstone may have been compacted
//! away).
//! Entries coming from flushed tables have timestamp 0 and are always
//! looked up. The timestamp is stored in the table as the meta block
//! [`REPAIRED_TS_BLOCK`] (`docs/format/standalone.md`), so it survives a
//! reopen; one read before the open is trusted only if it is at most the
//! primary-key index's sequence number recovered at open (a larger one
//! means that index lost unflushed writes, which its replay from the
//! primary's WAL renumbers; such a table's entries are looked up). (AsterixDB gives a flushed component the timestamp of
//! its newest entry because it cleans updates local to the memory
//! component on the write path; we do no such cleaning.)
//!
//! Snapshot safety (our addition: the paper has no MVCC snapshots). An
//! entry for version `s` of key `k` is marked only if no reader can still
//! need it: the key's newer version `s'` (or its deletion) must be visible
//! at the primary's oldest live snapshot `H`. The primary-key index view is
//! pinned under the index framework's sync guard when it can be taken
//! without waiting (then the view holds exactly the writes up to the
//! published sequence number `L`); otherwise it is the latest view and
//! deletions are not marked. Rules: found `s'` with `s < s' <= H` → mark;
//! not found, with an exact view, `s <= L` and `L == H` → mark (deleted in
//! `(s, L]`); anything else stays, to be validated by queries and repaired
//! at a later merge.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

use strata_lsm::error::Result;
use strata_lsm::hooks::{EngineHooks, EntryRef, TableContext, TableObserver, TableReason};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::sstable::BlockHandle;
use strata_lsm::version::FileMetaData;
use strata_lsm::Snapshot;

use super::entries::decode_entry;
use super::strategy::Counters;
use super::tree::{self, IndexTree};
use super::value::KeyType;
use super::{lock, SyncGate};

/// Meta block holding a table's repaired timestamp (8 bytes, little-endian).
pub(crate) const REPAIRED_TS_BLOCK: &str = "merge-repair.ts";

/// Keys validated per batched lookup.
const LOOKUP_CHUNK: usize = 4096;

/// A primary-key index view pinned for one repair (see the module doc).
pub(crate) struct RepairPin {
    pub pk: Snapshot,
    /// The primary's oldest live snapshot.
    pub horizon: SeqNo,
    /// `Some(L)`: the view holds exactly the primary writes up to `L`.
    pub exact: Option<SeqNo>,
}

/// Work counters of the merge repair of one index (since open).
#[derive(Default)]
pub(crate) struct RepairStats {
    /// Entries that went through a repair.
    pub scanned: AtomicU64,
    /// Of those, entries validated with a lookup in the primary-key index.
    pub lookups: AtomicU64,
    /// Entries left valid without a lookup (no newer version possible).
    pub pruned: AtomicU64,
    /// Obsolete entries not marked because a snapshot may still need them.
    pub deferred: AtomicU64,
    /// Repairs abandoned on a read error (the merge itself went on).
    pub errors: AtomicU64,
}

/// The hook installed in the index tree's options.
pub(crate) struct MergeRepair {
    shared: Arc<Shared>,
}

/// What the hook and the observers of its tables share.
struct Shared {
    ty: KeyType,
    gate: Arc<SyncGate>,
    pk: Weak<IndexTree>,
    counters: Arc<Counters>,
    stats: Arc<RepairStats>,
    /// Repaired timestamp (primary-key index sequence number) of each
    /// table this hook wrote since open.
    repaired_ts: Mutex<HashMap<u64, SeqNo>>,
    /// The primary-key index's sequence number when it was opened (see the
    /// module doc).
    pk_recovered: SeqNo,
}

impl MergeRepair {
    /// `pk` is the primary-key index, opened and not yet written to since
    /// (its current sequence number is the one it recovered).
    pub fn new(
        ty: KeyType,
        gate: Arc<SyncGate>,
        pk: &Arc<IndexTree>,
        counters: Arc<Counters>,
        stats: Arc<RepairStats>,
    ) -> MergeRepair {
        MergeRepair {
            shared: Arc::new(Shared {
                ty,
                gate,
                pk_recovered: pk.db.last_sequence(),
                pk: Arc::downgrade(pk),
                counters,
                stats,
                repaired_ts: Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl MergeRepair {
    /// The repaired timestamp stored in input table `f` by an earlier open
    /// (0 if none, unreadable, or not trusted: see the module doc).
    fn stored_ts(&self, ctx: &TableContext, f: &FileMetaData) -> SeqNo {
        let Some(tables) = &ctx.tables else { return 0 };
        let block = tables
            .get(f.number, f.file_size)
            .and_then(|t| t.meta_block(REPAIRED_TS_BLOCK));
        let Ok(Some(b)) = block else { return 0 };
        <[u8; 8]>::try_from(b.as_slice())
            .map(u64::from_le_bytes)
            .ok()
            .filter(|&ts| ts <= self.shared.pk_recovered)
            .unwrap_or(0)
    }
}

impl EngineHooks for MergeRepair {
    fn name(&self) -> &str {
        "merge-repair"
    }

    fn table_observer(&self, ctx: &TableContext) -> Option<Box<dyn TableObserver>> {
        if ctx.reason != TableReason::Compaction {
            return None;
        }
        // The inputs are about to be deleted: their timestamps are consumed.
        let input_ts = {
            let mut map = lock(&self.shared.repaired_ts);
            ctx.inputs
                .iter()
                .map(|f| {
                    map.remove(&f.number)
                        .unwrap_or_else(|| self.stored_ts(ctx, f))
                })
                .min()
                .unwrap_or(0)
        };
        Some(Box::new(RepairObserver {
            shared: self.shared.clone(),
            file: ctx.file_number,
            input_ts,
            entries: Vec::new(),
            block: None,
            in_block: 0,
            marks: Vec::new(),
        }))
    }
}

struct RepairObserver {
    shared: Arc<Shared>,
    file: u64,
    /// Smallest repaired timestamp among the compaction's inputs.
    input_ts: SeqNo,
    /// (primary key, seq, block, ordinal in block) of each index entry.
    entries: Vec<(Vec<u8>, SeqNo, BlockHandle, u32)>,
    block: Option<BlockHandle>,
    in_block: u32,
    marks: Vec<(BlockHandle, u32)>,
}

impl TableObserver for RepairObserver {
    fn on_entry(&mut self, e: &EntryRef<'_>, block: BlockHandle) {
        if self.block != Some(block) {
            self.block = Some(block);
            self.in_block = 0;
        }
        let ordinal = self.in_block;
        self.in_block += 1;
        if e.kind != ValueKind::Value || tree::is_meta(e.user_key) {
            return;
        }
        // A key that does not decode is left alone (queries report it).
        if let Ok((pk, seq)) = decode_entry(self.shared.ty, e.user_key) {
            self.entries.push((pk.to_vec(), seq, block, ordinal));
        }
    }

    fn finish(&mut self) -> Result<Vec<(String, Vec<u8>)>> {
        match self.repair() {
            Ok(Some(ts)) => {
                lock(&self.shared.repaired_ts).insert(self.file, ts);
                return Ok(vec![(
                    REPAIRED_TS_BLOCK.to_string(),
                    ts.to_le_bytes().to_vec(),
                )]);
            }
            Ok(None) => {}
            Err(_) => {
                // Repair only removes work for queries; a failed one leaves
                // every entry in place, to be validated.
                self.marks.clear();
                self.shared.stats.errors.fetch_add(1, Relaxed);
            }
        }
        Ok(Vec::new())
    }

    fn obsolete_entries(&mut self) -> Vec<(BlockHandle, u32)> {
        std::mem::take(&mut self.marks)
    }
}

impl RepairObserver {
    /// Validates the entries and fills `marks`; returns the new table's
    /// repaired timestamp (`None`: no repair was possible).
    fn repair(&mut self) -> Result<Option<SeqNo>> {
        let shared = self.shared.clone();
        let Some(pk) = shared.pk.upgrade() else {
            return Ok(None);
        };
        let Some(pin) = shared.gate.pin_for_repair(&pk) else {
            return Ok(None);
        };
        let n = self.entries.len() as u64;
        shared.stats.scanned.fetch_add(n, Relaxed);
        // Sort by primary key (Figure 7, line 9).
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_unstable_by(|&a, &b| self.entries[a].0.cmp(&self.entries[b].0));
        // Prune entries whose key has no version newer than the inputs'
        // repaired timestamp (Bloom filters and memtables only).
        if self.input_ts > 0 {
            let keys: Vec<&[u8]> = order
                .iter()
                .map(|&i| self.entries[i].0.as_slice())
                .collect();
            let newer = pk.db.may_have_changed_since(&keys, self.input_ts);
            let before = order.len();
            order = order
                .into_iter()
                .zip(newer)
                .filter_map(|(i, n)| n.then_some(i))
                .collect();
            shared
                .stats
                .pruned
                .fetch_add((before - order.len()) as u64, Relaxed);
        }
        let mut deferred = 0u64;
        for chunk in order.chunks(LOOKUP_CHUNK) {
            let mut keys: Vec<&[u8]> = chunk
                .iter()
                .map(|&i| self.entries[i].0.as_slice())
                .collect();
            keys.dedup();
            let found = pin.pk.multi_get(&keys)?;
            let newest: HashMap<&[u8], Option<SeqNo>> = keys
                .iter()
                .zip(found)
                .map(|(k, f)| Ok((*k, f.map(|b| tree::read_seq(&b, false)).transpose()?)))
                .collect::<Result<_>>()?;
            shared.stats.lookups.fetch_add(chunk.len() as u64, Relaxed);
            for &i in chunk {
                let (key, s, block, ordinal) = &self.entries[i];
                let obsolete = match newest.get(key.as_slice()).copied().flatten() {
                    Some(s2) if s2 == *s => continue,
                    Some(s2) => s2 > *s && s2 <= pin.horizon,
                    None => pin.exact.is_some_and(|l| *s <= l && l == pin.horizon),
                };
                if obsolete {
                    self.marks.push((*block, *ordinal));
                } else {
                    deferred += 1;
                }
            }
        }
        shared.stats.deferred.fetch_add(deferred, Relaxed);
        shared
            .counters
            .repaired
            .fetch_add(self.marks.len() as u64, Relaxed);
        shared.counters.add_entries(0, self.marks.len() as u64);
        // Entries left undecided keep the inputs' timestamp, so the next
        // merge looks them up again.
        Ok(Some(if deferred == 0 {
            pin.pk.sequence()
        } else {
            self.input_ts
        }))
    }
}

#[cfg(test)]
mod tests {
    use strata_lsm::{Db, Options};

    #[test]
    fn may_have_changed_since_sees_new_versions_and_vanished_keys() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
        db.put(b"a", b"1").unwrap();
        db.put(b"b", b"1").unwrap();
        db.put(b"c", b"1").unwrap();
        let r = db.last_sequence();
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        assert_eq!(db.may_have_changed_since(&keys, r), vec![false; 3]);
        db.put(b"a", b"2").unwrap();
        assert_eq!(
            db.may_have_changed_since(&keys, r),
            vec![true, false, false]
        );
        db.flush().unwrap();
        // Every key now shares a table with a newer write: Bloom "maybe".
        assert!(db.may_have_changed_since(&keys, r)[0]);
        let r2 = db.last_sequence();
        assert_eq!(db.may_have_changed_since(&keys, r2), vec![false; 3]);
        // A deletion compacted away leaves no trace but is still reported.
        db.delete(b"b").unwrap();
        db.compact_range(None, None).unwrap();
        let now = db.may_have_changed_since(&keys, db.last_sequence());
        assert_eq!(now, vec![false, true, false]);
    }
}
