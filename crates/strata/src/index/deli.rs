//! Strategy `deli`: DELI (Tang et al., "Deferred Lightweight Indexing on
//! Log-Structured Key-Value Stores", CCGrid 2015).
//!
//! A composite-key index in a secondary LSM tree (entries as in
//! [`super::composite`]: `sort_key ‖ primary key ‖ seq`) maintained by
//! put-only writes (§IV-A: no read of the old record), and repaired
//! lazily, two ways:
//!
//! * **Repair coupled to the primary compaction** (§V-B, the streaming
//!   design): every version a primary compaction drops (shadowed by a newer
//!   version no snapshot needs) arrives through the engine's
//!   dropped-versions stream with its attribute, and its index entry is
//!   deleted — exactly, since entries carry the version's sequence number.
//!   The deletions are written to the tree before the compaction installs.
//!   With them goes `ts_last`, the largest sequence number repaired so far
//!   (§V-C). A repair that fails or is cut by a crash is safe to redo: the
//!   compaction did not install, so its inputs (and the versions to
//!   repair) are still there and the next run re-emits the same, idempotent
//!   deletions; a crash after the install leaves at most stale entries,
//!   which read repair removes.
//! * **Repair on read** (§IV-B): a query validates its candidates directly
//!   (batched fetch of the records) and deletes the stale entries it finds.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use strata_lsm::error::Result;
use strata_lsm::Snapshot;
use strata_lsm::WriteBatch;

use super::def::Attrs;
use super::entries::{entry_key, entry_key_into, scan_entries};
use super::strategy::{
    self, BuildMethod, Check, Counters, Current, DroppedEntry, IndexStrategy, NeedsCurrent, OpenCx,
    Query, QueryCx, StrategyKind, VersionSlot, WritePath,
};
use super::tree::{self, IndexTree};
use super::value::KeyType;
use super::{Hit, IndexStats, OpRef, QueryProfile};

/// Tree key of `ts_last`; sorts after every entry.
use super::tree::DELI_TS_LAST_KEY as TS_LAST_KEY;

pub(crate) struct Deli {
    ty: KeyType,
    tree: IndexTree,
    ts_last: AtomicU64,
    counters: Counters,
}

impl Deli {
    pub fn open(cx: &OpenCx<'_>) -> Result<Deli> {
        let (dir, ty, params, opts) = (cx.dir, cx.spec.key_type, cx.params, cx.tree_opts);
        strategy::no_params(StrategyKind::Deli.name(), params)?;
        // Scanned by ranges only (one point read, here at open).
        let tree = IndexTree::open(dir.join("tree"), tree::range_read_options(opts))?;
        let ts_last = match tree.db.get(TS_LAST_KEY)? {
            Some(b) => tree::read_seq(&b, false)?,
            None => 0,
        };
        Ok(Deli {
            ty,
            tree,
            ts_last: AtomicU64::new(ts_last),
            counters: Counters::default(),
        })
    }

    /// Largest sequence number whose dropped versions have been repaired.
    pub fn ts_last(&self) -> u64 {
        self.ts_last.load(Relaxed)
    }
}

impl Deli {
    fn trees(&self) -> Vec<&IndexTree> {
        vec![&self.tree]
    }

    fn query_pinned(
        &self,
        pinned: &[Snapshot],
        q: &Query<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let snap = strategy::main_view(pinned, StrategyKind::Deli.name())?;
        let (cands, keys) = scan_entries(self.ty, &self.tree, snap, q, true, profile)?;
        let (hits, stale) =
            strategy::resolve(cands.clone(), q, &Check::Direct, &self.counters, profile)?;
        if !stale.is_empty() {
            let entry_of: std::collections::HashMap<(&[u8], u64), Vec<u8>> =
                cands.iter().zip(keys).collect();
            // A stale (key, seq) never becomes valid again: deleting its
            // entry is safe whatever writes run concurrently.
            let mut batch = WriteBatch::new();
            for s in &stale {
                if let Some(k) = entry_of.get(&(s.0.as_slice(), s.1)) {
                    batch.delete(k);
                }
            }
            let n = batch.len() as u64;
            self.tree.write(batch)?;
            self.counters.repaired.fetch_add(n, Relaxed);
            self.counters.add_entries(0, n);
        }
        Ok(hits)
    }
}

impl IndexStrategy for Deli {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Deli
    }

    fn write_path(&self) -> WritePath {
        WritePath::Sync
    }

    fn needs_current(&self) -> NeedsCurrent {
        NeedsCurrent::No
    }

    fn apply(&self, ops: &[OpRef<'_>], _: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        let mut added = 0;
        self.tree.write_with(0, |batch, b| {
            for &(seq, key, new) in ops {
                if let Some(v) = new.and_then(|raw| attrs.counted(raw)) {
                    self.tree.note_extent(&v, batch);
                    entry_key_into(&v, key, seq, &mut b.key);
                    batch.put(&b.key, &tree::geometry(&v));
                    added += 1;
                }
            }
            Ok(())
        })?;
        self.counters.add_entries(added, 0);
        Ok(())
    }

    fn wants_dropped(&self) -> bool {
        true
    }

    fn on_dropped(&self, dropped: Vec<DroppedEntry>) -> Result<()> {
        if dropped.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        let mut max = self.ts_last();
        for (key, seq, v) in &dropped {
            batch.delete(&entry_key(v, key, *seq));
            max = max.max(*seq);
        }
        batch.put(TS_LAST_KEY, &tree::seq_bytes(max, false));
        self.tree.write(batch)?;
        self.ts_last.fetch_max(max, Relaxed);
        let n = dropped.len() as u64;
        self.counters.repaired.fetch_add(n, Relaxed);
        self.counters.add_entries(0, n);
        Ok(())
    }

    fn clear(&self) -> Result<()> {
        self.counters.entries.store(0, Relaxed);
        self.tree.clear()
    }

    fn stats(&self, _slot: Option<&VersionSlot>, s: &mut IndexStats) {
        self.counters.fill(s);
        s.disk_bytes = self.tree.disk_bytes();
        s.ts_last = Some(self.ts_last());
    }

    strategy::tree_strategy_methods!();
}
