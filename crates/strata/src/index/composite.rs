//! Strategy `composite`: a stand-alone composite-key index in a secondary
//! LSM tree (the AsterixDB / Spanner design), with the maintenance
//! strategies of Luo & Carey, "On Performance Stability in LSM-based
//! Storage Systems" / "Efficient Data Ingestion and Query Processing for
//! LSM-Based Storage Systems" (PVLDB 2019), §3–§4.
//!
//! Entries are keyed `sort_key(attribute) ‖ primary key ‖ seq` (see
//! [`super::tree`]) with the exact geometry as value for spatial types, so
//! every version has its own entry and deleting one is exact. Parameters:
//!
//! * `mode=sync` (default): the write path reads each key's current record
//!   (batched, see `db::write`) and deletes the old version's entry in the
//!   same tree batch as it inserts the new one — the eager strategy of
//!   §3: the index holds exactly the live versions and queries need no
//!   validation.
//! * `mode=validation` (§4): blind inserts only; queries validate their
//!   candidates, by `validate=direct` (fetch each record with the batched
//!   `multi_get` and compare sequence numbers, §4.2) or
//!   `validate=timestamp` (default; §4.3: look each candidate up in a
//!   primary-key index — a small LSM tree of primary key → sequence number
//!   of the newest version, maintained by every write — and fetch only the
//!   valid ones).
//! * `repair=merge` (default with `mode=validation`; §4.4) or `repair=off`:
//!   merge repair ([`super::repair`]): each compaction of the index tree
//!   validates the entries it writes against the primary-key index and
//!   marks the obsolete ones in the new table's immutable bitmap, so
//!   queries skip them and the next merge drops them. Needs the
//!   primary-key index, which is then kept with either validation method.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use strata_lsm::error::{Error, Result};
use strata_lsm::key::SeqNo;
use strata_lsm::Snapshot;

use super::def::Attrs;
use super::entries::{entry_key_into, scan_entries};
use super::repair::{MergeRepair, RepairStats};
use super::strategy::{
    self, BuildMethod, Check, Counters, Current, IndexStrategy, NeedsCurrent, OpenCx, Query,
    QueryCx, StrategyKind, VersionSlot, WritePath,
};
use super::tree::{self, IndexTree};
use super::value::{IndexValue, KeyType};
use super::{Hit, IndexStats, OpRef, QueryProfile};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Sync,
    Validation,
}

pub(crate) struct Composite {
    ty: KeyType,
    mode: Mode,
    /// Validation by the primary-key index (else direct).
    timestamp: bool,
    tree: IndexTree,
    /// The primary-key index (validation mode with timestamp validation
    /// or merge repair).
    pk: Option<Arc<IndexTree>>,
    counters: Arc<Counters>,
    /// Merge repair's work counters (`repair=merge`).
    repair: Option<Arc<RepairStats>>,
}

impl Composite {
    /// Opens (creating if needed) index `id`'s trees under `dir` with the
    /// parameters of its spec.
    pub fn open(cx: &OpenCx<'_>) -> Result<Composite> {
        let (dir, ty, params, opts) = (cx.dir, cx.spec.key_type, cx.params, cx.tree_opts);
        let gate = cx.gate.clone();
        let mut mode = Mode::Sync;
        let mut timestamp = true;
        let mut repair = None;
        let mut validate_given = false;
        for (k, v) in params {
            validate_given |= k == "validate";
            match (k.as_str(), v.as_str()) {
                ("mode", "sync") => mode = Mode::Sync,
                ("mode", "validation") => mode = Mode::Validation,
                ("validate", "direct") => timestamp = false,
                ("validate", "timestamp") => timestamp = true,
                ("repair", "merge") => repair = Some(true),
                ("repair", "off") => repair = Some(false),
                ("mode", _) | ("validate", _) | ("repair", _) => {
                    return Err(Error::invalid(format!(
                        "strategy composite: bad {k}={v:?} (mode: sync|validation; validate: direct|timestamp; repair: merge|off)"
                    )))
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "unknown parameter {k:?} for strategy composite (known: mode, validate, repair)"
                    )))
                }
            }
        }
        if mode == Mode::Sync && validate_given {
            return Err(Error::invalid(
                "strategy composite: validate= needs mode=validation (mode=sync validates nothing)",
            ));
        }
        let repair = match (mode, repair) {
            (Mode::Sync, Some(true)) => {
                return Err(Error::invalid(
                    "strategy composite: repair=merge needs mode=validation (mode=sync keeps no stale entries)",
                ))
            }
            (Mode::Sync, _) => false,
            (Mode::Validation, r) => r.unwrap_or(true),
        };
        let counters = Arc::new(Counters::default());
        let pk = if mode == Mode::Validation && (timestamp || repair) {
            Some(Arc::new(IndexTree::open(dir.join("pk"), opts.clone())?))
        } else {
            None
        };
        // The tree is only scanned by ranges (a secondary key's prefix).
        let mut tree_opts = tree::range_read_options(opts);
        let mut repair_stats = None;
        if let (true, Some(pk)) = (repair, &pk) {
            let stats = Arc::new(RepairStats::default());
            tree_opts.hooks.push(Arc::new(MergeRepair::new(
                ty,
                gate,
                pk,
                counters.clone(),
                stats.clone(),
            )));
            repair_stats = Some(stats);
        }
        let tree = IndexTree::open(dir.join("tree"), tree_opts)?;
        Ok(Composite {
            ty,
            mode,
            timestamp,
            tree,
            pk,
            counters,
            repair: repair_stats,
        })
    }
}

impl Composite {
    fn trees(&self) -> Vec<&IndexTree> {
        let mut t = vec![&self.tree];
        t.extend(self.pk.as_deref());
        t
    }

    fn query_pinned(
        &self,
        pinned: &[Snapshot],
        q: &Query<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let snap = strategy::main_view(pinned, StrategyKind::Composite.name())?;
        let (cands, _) = scan_entries(self.ty, &self.tree, snap, q, false, profile)?;
        let check = match (self.mode, pinned.get(1)) {
            (Mode::Sync, _) => Check::Exact,
            (Mode::Validation, Some(pk)) if self.timestamp => Check::Timestamp(pk),
            (Mode::Validation, _) => Check::Direct,
        };
        let before = self.pk.as_ref().map_or(0, |p| p.blocks_read());
        let (hits, _) = strategy::resolve(cands, q, &check, &self.counters, profile)?;
        profile.index_blocks_read += self
            .pk
            .as_ref()
            .map_or(0, |p| p.blocks_read().saturating_sub(before));
        Ok(hits)
    }
}

impl IndexStrategy for Composite {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Composite
    }

    fn write_path(&self) -> WritePath {
        WritePath::Sync
    }

    fn needs_current(&self) -> NeedsCurrent {
        if self.mode == Mode::Sync {
            NeedsCurrent::All
        } else {
            NeedsCurrent::No
        }
    }

    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        let sync = self.mode == Mode::Sync;
        if let Some(pk) = &self.pk {
            pk.write_with(0, |batch, _| {
                for &(seq, key, new) in ops {
                    match new {
                        Some(_) => batch.put(key, &tree::seq_bytes(seq, false)),
                        None => batch.delete(key),
                    };
                }
                Ok(())
            })?;
        }
        let (mut added, mut removed) = (0, 0);
        // Sync mode also deletes each old version's entry.
        self.tree.write_with(0, |batch, b| {
            // Each key's (seq, attribute) after the operations so far (sync
            // mode reads old versions).
            let mut latest: tree::BatchLatest<'_, Option<(SeqNo, Option<IndexValue>)>> =
                tree::BatchLatest::new(ops);
            for &(seq, key, new) in ops {
                let new_attr = new.and_then(|raw| attrs.counted(raw));
                if sync {
                    let old = match latest.take(key) {
                        Some(o) => o,
                        None => match current.get(key) {
                            Some(Some((s, raw))) => Some((*s, attrs.get(raw).ok())),
                            _ => None,
                        },
                    };
                    if let Some((s, Some(v))) = old {
                        entry_key_into(&v, key, s, &mut b.key);
                        batch.delete(&b.key);
                        removed += 1;
                    }
                }
                if let Some(v) = &new_attr {
                    self.tree.note_extent(v, batch);
                    entry_key_into(v, key, seq, &mut b.key);
                    batch.put(&b.key, &tree::geometry(v));
                    added += 1;
                }
                if sync {
                    latest.set(key, new.map(|_| (seq, new_attr)));
                }
            }
            Ok(())
        })?;
        self.counters.add_entries(added, removed);
        Ok(())
    }

    fn clear(&self) -> Result<()> {
        if let Some(pk) = &self.pk {
            pk.clear()?;
        }
        self.counters.entries.store(0, Relaxed);
        self.tree.clear()
    }

    fn stats(&self, _slot: Option<&VersionSlot>, s: &mut IndexStats) {
        self.counters.fill(s);
        s.disk_bytes = self.tree.disk_bytes() + self.pk.as_ref().map_or(0, |p| p.disk_bytes());
        if let Some(r) = &self.repair {
            s.repair_scanned = r.scanned.load(Relaxed);
            s.repair_lookups = r.lookups.load(Relaxed);
            s.repair_pruned = r.pruned.load(Relaxed);
            s.repair_deferred = r.deferred.load(Relaxed);
            s.repair_errors = r.errors.load(Relaxed);
        }
    }

    strategy::tree_strategy_methods!();
}
