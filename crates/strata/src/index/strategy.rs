//! The interface between the index framework ([`super::IndexManager`]) and
//! the strategies that keep a structure of their own, maintained on the
//! write path: the stand-alone strategies on a secondary LSM tree
//! (`composite`, `deli`, `posting-eager`, `posting-lazy`, see [`super::tree`]).
//! NEXT and Embedded instead build per-table blocks through the table
//! observer, and `memory` keeps its in-RAM structure; the manager drives
//! those directly.
//!
//! Calling contract (the manager guarantees it):
//! * [`Strategy::apply`] is called by the primary's write-group leader for
//!   every batch, before the batch enters the memtable and while the
//!   manager's sync guard is held for writing, which the leader releases
//!   only after publishing the batch's last sequence number. Only one
//!   `apply` (or `replay`, or a build) runs at a time.
//! * [`Strategy::pin`] is called under the guard's read side, with the
//!   query's primary snapshot pinned in the same critical section: the pinned
//!   views reflect exactly the writes up to that snapshot.
//! * [`Strategy::flush`] is called before the primary installs a flush,
//!   after the primary fsynced its WAL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::db::{Snapshot, Versioned};
use crate::error::{Error, Result};
use crate::key::SeqNo;

use super::tree::IndexTree;
use super::value::{IndexValue, Predicate};
use super::{Hit, IndexStats, OpRef, QueryOptions, QueryProfile, QueryView};

/// The record each key of a batch had before the batch (`None`: absent or
/// deleted); filled for the keys [`NeedsCurrent`] asks for.
pub(crate) type Current<'a> = HashMap<&'a [u8], Option<Versioned>>;

/// Which keys of a batch a strategy needs the previous records of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum NeedsCurrent {
    /// None: blind maintenance.
    No,
    /// The keys the batch deletes (`posting-lazy`'s delete markers).
    Deletes,
    /// Every key (synchronous maintenance).
    All,
}

impl NeedsCurrent {
    /// The keys of `ops` to look up.
    pub fn keys<'a>(self, ops: &[OpRef<'a>]) -> Vec<&'a [u8]> {
        match self {
            NeedsCurrent::No => Vec::new(),
            NeedsCurrent::Deletes => ops
                .iter()
                .filter(|(_, _, new)| new.is_none())
                .map(|(_, k, _)| *k)
                .collect(),
            NeedsCurrent::All => ops.iter().map(|(_, k, _)| *k).collect(),
        }
    }
}

/// Extracts the index's attribute from a record (`None`: not indexed).
pub(crate) type Extract<'a> = &'a dyn Fn(&[u8]) -> Option<IndexValue>;

/// A candidate: primary key and the sequence number of the version the
/// index entry describes.
pub(crate) type Cand = (Vec<u8>, SeqNo);

/// A dropped version's key, sequence number and attribute.
pub(crate) type DroppedEntry = (Vec<u8>, SeqNo, IndexValue);

pub(crate) trait Strategy: Send + Sync {
    /// Which records the batch overwrites [`Strategy::apply`] needs.
    fn needs_current(&self) -> NeedsCurrent;

    /// Maintains the structure for one batch (see the module contract).
    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, extract: Extract<'_>) -> Result<()>;

    /// True if the strategy consumes the primary's dropped-versions stream.
    fn wants_dropped(&self) -> bool {
        false
    }

    /// Versions a primary compaction is about to drop; called before the
    /// compaction installs.
    fn on_dropped(&self, _dropped: Vec<DroppedEntry>) -> Result<()> {
        Ok(())
    }

    /// The strategy's trees, the main one first.
    fn trees(&self) -> Vec<&IndexTree>;

    /// Makes the structure durable (see the module contract).
    fn flush(&self) -> Result<()> {
        self.trees().iter().try_for_each(|t| t.flush())
    }

    /// Waits until the structure has no background work pending.
    fn wait_idle(&self) -> Result<()> {
        self.trees()
            .iter()
            .try_for_each(|t| t.db.wait_for_compactions())
    }

    /// Pins the structure's views for one query: a snapshot of each tree,
    /// in the order of [`Strategy::trees`].
    fn pin(&self) -> Vec<Snapshot> {
        self.trees().iter().map(|t| t.db.snapshot()).collect()
    }

    /// Answers a query against the views `pinned` and the primary snapshot
    /// `snapshot` (see `index` for the result contract).
    fn query(
        &self,
        pinned: &[Snapshot],
        q: &Query<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>>;

    /// Empties the structure before a build over existing data.
    fn clear(&self) -> Result<()>;

    /// Called once a build over existing data has written (and flushed)
    /// every entry, while writes are still paused.
    fn after_build(&self) -> Result<()> {
        Ok(())
    }

    /// Fills this strategy's fields of `s` (entries, sizes, validations).
    fn stats(&self, s: &mut IndexStats);
}

/// One query as a strategy sees it.
pub(crate) struct Query<'a> {
    pub pred: &'a Predicate,
    pub opts: QueryOptions,
    pub view: &'a QueryView<'a>,
    /// The primary snapshot, pinned with the strategy's views.
    pub snapshot: SeqNo,
}

impl<'a> Query<'a> {
    /// The same query with at most `n` results.
    pub fn limited(&self, n: usize) -> Query<'a> {
        Query {
            pred: self.pred,
            opts: self.opts.limit(n),
            view: self.view,
            snapshot: self.snapshot,
        }
    }
}

/// Validation and repair counters of one index (since open).
#[derive(Default)]
pub(crate) struct Counters {
    pub validations: AtomicU64,
    pub failed: AtomicU64,
    /// Stale entries removed by repair (compaction-coupled or read
    /// repair; an entry removed by both is counted twice).
    pub repaired: AtomicU64,
    /// Entries written minus entries deleted (approximate: blind strategies
    /// count stale entries until repair removes them).
    pub entries: AtomicU64,
}

impl Counters {
    pub fn fill(&self, s: &mut IndexStats) {
        s.validations = self.validations.load(Relaxed);
        s.validations_failed = self.failed.load(Relaxed);
        s.repaired = self.repaired.load(Relaxed);
        s.global_entries = self.entries.load(Relaxed);
    }

    pub fn add_entries(&self, added: u64, removed: u64) {
        let _ = self.entries.fetch_update(Relaxed, Relaxed, |e| {
            Some((e + added).saturating_sub(removed))
        });
    }
}

/// How candidates become results.
pub(crate) enum Check<'a> {
    /// Candidates are exactly the live matches (synchronous maintenance):
    /// fetched for their values, and a mismatch is reported as corruption.
    Exact,
    /// Direct validation: fetch the record at the snapshot and compare
    /// sequence numbers.
    Direct,
    /// Timestamp validation against the primary-key index (key → sequence
    /// number of the newest version): no record read for stale candidates.
    Timestamp(&'a Snapshot),
}

/// Turns candidates `(key, seq)` (each with `seq <= q.snapshot`, already
/// matching the predicate) into results: newest first, validated by
/// `check`, values fetched with one batched lookup per chunk, at most
/// `limit`. Returns the results and the stale candidates (for read repair).
/// Top-K works through the candidates newest first in chunks and stops as
/// soon as K are valid.
pub(crate) fn resolve(
    mut cands: Vec<Cand>,
    q: &Query<'_>,
    check: &Check<'_>,
    counters: &Counters,
    profile: &mut QueryProfile,
) -> Result<(Vec<Hit>, Vec<Cand>)> {
    cands.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    cands.dedup();
    let limit = q.opts.limit.unwrap_or(usize::MAX);
    // Chunks of K, then doubling while stale candidates leave the top K
    // incomplete; everything at once without a limit.
    let mut chunk = match q.opts.limit {
        Some(k) => k.max(1),
        None => cands.len().max(1),
    };
    let mut hits = Vec::new();
    let mut stale = Vec::new();
    let before = (q.view.data_blocks_read)();
    let mut rest: &[Cand] = &cands;
    while !rest.is_empty() && hits.len() < limit {
        let (part, tail) = rest.split_at(chunk.min(rest.len()));
        rest = tail;
        chunk = chunk.saturating_mul(2);
        profile.candidates += part.len() as u64;
        let mut live: Vec<&(Vec<u8>, SeqNo)> = Vec::with_capacity(part.len());
        match check {
            Check::Timestamp(pk) => {
                let keys: Vec<&[u8]> = part.iter().map(|(k, _)| k.as_slice()).collect();
                let found = pk.multi_get(&keys)?;
                counters.validations.fetch_add(part.len() as u64, Relaxed);
                for (c, f) in part.iter().zip(found) {
                    let newest = f.map(|b| super::tree::read_seq(&b, false)).transpose()?;
                    if newest == Some(c.1) {
                        live.push(c);
                    } else {
                        stale.push(c.clone());
                    }
                }
            }
            _ => live.extend(part.iter()),
        }
        if q.opts.keys_only && !matches!(check, Check::Direct) {
            for (key, seq) in live {
                if hits.len() < limit {
                    hits.push(Hit {
                        key: key.clone(),
                        value: None,
                        seq: *seq,
                    });
                }
            }
            continue;
        }
        let keys: Vec<&[u8]> = live.iter().map(|(k, _)| k.as_slice()).collect();
        let found = (q.view.fetch)(&keys, q.snapshot)?;
        // Exact candidates are checked too (a mismatch is a bug, reported).
        if !matches!(check, Check::Timestamp(_)) {
            counters.validations.fetch_add(live.len() as u64, Relaxed);
        }
        for ((key, seq), f) in live.into_iter().zip(found) {
            match f {
                Some((s, value)) if s == *seq => {
                    if hits.len() < limit {
                        hits.push(Hit {
                            key: key.clone(),
                            value: (!q.opts.keys_only).then_some(value),
                            seq: *seq,
                        });
                    }
                }
                other => {
                    if let Check::Exact = check {
                        return Err(Error::corruption(format!(
                            "index holds key {:?} at seq {seq}, the data has {:?}",
                            String::from_utf8_lossy(key),
                            other.map(|(s, _)| s)
                        )));
                    }
                    stale.push((key.clone(), *seq));
                }
            }
        }
    }
    if !matches!(check, Check::Exact) {
        counters.failed.fetch_add(stale.len() as u64, Relaxed);
    }
    profile.stale = stale.len() as u64;
    profile.data_blocks_read += (q.view.data_blocks_read)().saturating_sub(before);
    Ok((hits, stale))
}

/// The pinned snapshot of the main tree.
pub(crate) fn main_view<'a>(pinned: &'a [Snapshot], strategy: &str) -> Result<&'a Snapshot> {
    pinned
        .first()
        .ok_or_else(|| Error::invalid(format!("{strategy} query without a pinned view")))
}

/// Refuses parameters for a strategy that takes none.
pub(crate) fn no_params(strategy: &str, params: &[(String, String)]) -> Result<()> {
    match params.first() {
        Some((k, _)) => Err(Error::invalid(format!(
            "unknown parameter {k:?} for strategy {strategy} (it takes none)"
        ))),
        None => Ok(()),
    }
}
