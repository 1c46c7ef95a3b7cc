//! Merge operands: read-modify-write without the read.
//!
//! A merge operand (`ValueKind::Merge`, written by
//! [`crate::WriteBatch::merge`]) records a change to a key's value that the
//! database's [`MergeOperator`] applies later:
//!
//! * **on read** — a point lookup or an iterator that meets operands as the
//!   newest visible entries of a key keeps reading that key's older entries,
//!   component by component, down to the newest value or tombstone (or the
//!   end of the tree), and combines them with a *full merge*;
//! * **in compaction** — the operands of a key that every live snapshot
//!   sees are combined: with the value or tombstone beneath them when the
//!   compaction holds it, or when no deeper level can hold the key (a full
//!   merge, output as a value); otherwise among themselves (a *partial
//!   merge*, output as one operand), so that the key's history shrinks to one
//!   entry per level and the older entries are dropped.
//!
//! LevelDB++'s Lazy stand-alone index (Qader et al., SIGMOD 2018, §4.1.2)
//! appends posting-list fragments this way: `index::posting`.
//!
//! Contract for implementations: both merges must be deterministic and
//! associative — a full merge over a partial merge of some operands equals
//! the full merge over all of them.

use std::sync::Arc;

use crate::cache::TableCache;
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind};
use crate::memtable::MemTable;
use crate::stats::ReadPurpose;
use crate::version::{LevelIter, Version};

/// Combines a key's merge operands (see the module documentation).
pub trait MergeOperator: Send + Sync {
    /// Names the operator in errors and in `Options`' debug output.
    fn name(&self) -> &str;

    /// The value of `key` after applying `operands` (newest first, at least
    /// one) in order to `base` (`None`: the key was absent or deleted).
    /// Returns `None` to leave the key deleted.
    fn full_merge(
        &self,
        key: &[u8],
        base: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Result<Option<Vec<u8>>>;

    /// One operand equivalent to `operands` (newest first, at least two)
    /// applied in order, for a base not known yet.
    fn partial_merge(&self, key: &[u8], operands: &[&[u8]]) -> Result<Vec<u8>>;
}

/// The operator of `opts`, or the error for operands met without one.
pub(crate) fn require(op: Option<&Arc<dyn MergeOperator>>) -> Result<&dyn MergeOperator> {
    op.map(|m| m.as_ref()).ok_or_else(|| {
        Error::invalid(
            "the database holds merge operands but was opened without a merge operator \
             (Options::merge_operator)",
        )
    })
}

/// Receives a key's entries (sequence number, kind, value), newest first;
/// returns false to stop the visit.
pub type VersionVisitor<'a> = dyn FnMut(SeqNo, ValueKind, &[u8]) -> Result<bool> + 'a;

/// Visits the entries of `user_key` with `seq <= snapshot`, newest first,
/// one component at a time: memtables (newest first), then the tables that
/// may hold the key (L0 newest first, then one per level, each skipped when
/// its Bloom filter rules the key out). A component is read only when the
/// visit reaches it; `f` returns `false` to stop.
pub(crate) fn for_each_version(
    tables: &TableCache,
    mems: &[Arc<MemTable>],
    version: &Version,
    user_key: &[u8],
    snapshot: SeqNo,
    f: &mut VersionVisitor<'_>,
) -> Result<()> {
    let target = key::seek_key(user_key, snapshot);
    // Visits the key's entries at `it`; false if `f` asked to stop.
    let visit = |it: &mut dyn InternalIterator, f: &mut VersionVisitor<'_>| -> Result<bool> {
        it.seek(&target)?;
        while it.valid() {
            let p = key::parse_internal_key(it.key())?;
            if p.user_key != user_key {
                break;
            }
            if !f(p.seq, p.kind, it.value())? {
                return Ok(false);
            }
            it.next()?;
        }
        Ok(true)
    };
    for m in mems {
        if !visit(&mut m.iter(), f)? {
            return Ok(());
        }
    }
    for file in version.files_for_key(user_key) {
        if file.smallest_seq > snapshot {
            continue;
        }
        let t = tables.get(file.number, file.file_size)?;
        if !t.key_may_match(user_key) {
            continue;
        }
        if !visit(&mut t.iter(ReadPurpose::Query), f)? {
            return Ok(());
        }
    }
    Ok(())
}

/// The value of `user_key` at `snapshot` whose newest visible entry is a
/// merge operand: its operands and the value or tombstone beneath them,
/// combined. Returns the newest operand's sequence number with the value
/// (`None`: the merge left the key deleted).
pub(crate) fn resolve_at(
    op: &dyn MergeOperator,
    tables: &TableCache,
    mems: &[Arc<MemTable>],
    version: &Version,
    user_key: &[u8],
    snapshot: SeqNo,
) -> Result<Option<(SeqNo, Vec<u8>)>> {
    let mut history = History::default();
    let mut newest = None;
    for_each_version(
        tables,
        mems,
        version,
        user_key,
        snapshot,
        &mut |seq, kind, value| {
            newest.get_or_insert(seq);
            Ok(history.push(kind, value))
        },
    )?;
    let Some(seq) = newest else {
        return Ok(None);
    };
    Ok(history.full_merge(op, user_key)?.map(|v| (seq, v)))
}

/// A key's entries, newest first, up to its base: the operands and then
/// the value or tombstone beneath them (if one was met).
#[derive(Default)]
pub(crate) struct History {
    pub operands: Vec<Vec<u8>>,
    /// `Some(None)`: a tombstone; `None`: no base met (yet).
    pub base: Option<Option<Vec<u8>>>,
}

impl History {
    /// Takes the key's next older entry; false once the base is known.
    pub fn push(&mut self, kind: ValueKind, value: &[u8]) -> bool {
        match kind {
            ValueKind::Merge => self.operands.push(value.to_vec()),
            ValueKind::Value => self.base = Some(Some(value.to_vec())),
            ValueKind::Deletion => self.base = Some(None),
        }
        self.base.is_none()
    }

    /// The key's value: the operands applied to the base (none met: the
    /// key had no value). Without operands, the base itself.
    pub fn full_merge(&self, op: &dyn MergeOperator, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let base = self.base.as_ref().and_then(|b| b.as_deref());
        if self.operands.is_empty() {
            return Ok(base.map(<[u8]>::to_vec));
        }
        let refs: Vec<&[u8]> = self.operands.iter().map(Vec::as_slice).collect();
        op.full_merge(key, base, &refs)
    }
}

/// What `for_each_in_ranges_by_component` reports.
pub enum ComponentEvent<'a> {
    /// One entry (any version, operands uncombined) of the component.
    Entry {
        /// The user key.
        user_key: &'a [u8],
        /// What the entry is.
        kind: ValueKind,
        /// The value or operand (empty for a tombstone).
        value: &'a [u8],
    },
    /// The component's entries in every range have been reported.
    End {
        /// No entry of a component not yet visited has a larger sequence
        /// number (0: none is left). A memtable left counts as the
        /// snapshot, tables as their largest sequence number.
        rest_max_seq: SeqNo,
    },
}

/// Receives [`ComponentEvent`]s; returns false to stop the visit.
pub type ComponentVisitor<'a> = dyn FnMut(ComponentEvent<'_>) -> Result<bool> + 'a;

/// Visits the entries with `seq <= snapshot` in the user-key ranges
/// `[from, to)` (`None`: unbounded), one component at a time, newest
/// component first: each memtable, each L0 table, then each level. Within
/// a component, entries come in internal-key order; after each component,
/// `End`. A component is read only when the visit reaches it (LevelDB++'s
/// level-by-level RANGELOOKUP on a Lazy index, Algorithm 6).
pub(crate) fn for_each_in_ranges_by_component(
    tables: &Arc<TableCache>,
    mems: &[Arc<MemTable>],
    version: &Version,
    ranges: &[(Vec<u8>, Option<Vec<u8>>)],
    snapshot: SeqNo,
    f: &mut ComponentVisitor<'_>,
) -> Result<()> {
    // Visits one component; false if `f` asked to stop.
    let visit = |it: &mut dyn InternalIterator,
                 rest_max_seq: SeqNo,
                 f: &mut ComponentVisitor<'_>|
     -> Result<bool> {
        for (from, to) in ranges {
            it.seek(&key::seek_key(from, key::MAX_SEQ))?;
            while it.valid() {
                let p = key::parse_internal_key(it.key())?;
                if to.as_deref().is_some_and(|t| p.user_key >= t) {
                    break;
                }
                if p.seq <= snapshot {
                    let e = ComponentEvent::Entry {
                        user_key: p.user_key,
                        kind: p.kind,
                        value: it.value(),
                    };
                    if !f(e)? {
                        return Ok(false);
                    }
                }
                it.next()?;
            }
        }
        f(ComponentEvent::End { rest_max_seq })
    };
    let (lo, hi) = span(ranges);
    let l0: Vec<_> = l0_files(version, lo, hi, snapshot).collect();
    let levels: Vec<_> = (1..version.num_levels())
        .map(|level| version.overlapping(level, lo, hi))
        .filter(|files| !files.is_empty())
        .collect();
    // Upper bounds on the sequence numbers of each component, in visit
    // order, then their suffix maxima: `rest[i]` bounds components after i.
    let mut bounds: Vec<SeqNo> = Vec::with_capacity(mems.len() + l0.len() + levels.len());
    bounds.extend(mems.iter().map(|_| snapshot));
    bounds.extend(l0.iter().map(|f| f.largest_seq.min(snapshot)));
    bounds.extend(levels.iter().map(|files| {
        files
            .iter()
            .map(|f| f.largest_seq)
            .max()
            .unwrap_or(0)
            .min(snapshot)
    }));
    let mut rest = vec![0; bounds.len()];
    for i in (0..bounds.len().saturating_sub(1)).rev() {
        let next = bounds.get(i + 1).copied().unwrap_or(0);
        let after = rest.get(i + 1).copied().unwrap_or(0);
        if let Some(r) = rest.get_mut(i) {
            *r = next.max(after);
        }
    }
    let mut rest = rest.into_iter();
    for m in mems {
        if !visit(&mut m.iter(), rest.next().unwrap_or(0), f)? {
            return Ok(());
        }
    }
    for file in l0 {
        let t = tables.get(file.number, file.file_size)?;
        if !visit(&mut t.iter(ReadPurpose::Query), rest.next().unwrap_or(0), f)? {
            return Ok(());
        }
    }
    for files in levels {
        let mut it = LevelIter::new(tables.clone(), files, ReadPurpose::Query);
        if !visit(&mut it, rest.next().unwrap_or(0), f)? {
            return Ok(());
        }
    }
    Ok(())
}

/// The smallest and largest user keys `ranges` may touch (`None`: open).
fn span(ranges: &[(Vec<u8>, Option<Vec<u8>>)]) -> (Option<&[u8]>, Option<&[u8]>) {
    let lo = ranges.iter().map(|(f, _)| f.as_slice()).min();
    let hi = if ranges.iter().any(|(_, t)| t.is_none()) {
        None
    } else {
        ranges.iter().filter_map(|(_, t)| t.as_deref()).max()
    };
    (lo, hi)
}

/// The L0 tables whose key range meets `[lo, hi]` and that hold entries
/// visible at `snapshot`, newest first.
fn l0_files<'a>(
    version: &'a Version,
    lo: Option<&'a [u8]>,
    hi: Option<&'a [u8]>,
    snapshot: SeqNo,
) -> impl Iterator<Item = &'a Arc<crate::version::FileMetaData>> + 'a {
    version.levels[0].iter().filter(move |file| {
        let below = lo.is_some_and(|lo| key::user_key(&file.largest) < lo);
        let above = hi.is_some_and(|hi| key::user_key(&file.smallest) > hi);
        file.smallest_seq <= snapshot && !below && !above
    })
}

/// How many components [`for_each_in_ranges_by_component`] would read for
/// `ranges`, counting non-empty memtables whole (no data block is read).
/// With one, reading level by level cannot stop any earlier than a plain
/// scan.
pub(crate) fn components_in_ranges(
    mems: &[Arc<MemTable>],
    version: &Version,
    ranges: &[(Vec<u8>, Option<Vec<u8>>)],
    snapshot: SeqNo,
) -> usize {
    let (lo, hi) = span(ranges);
    mems.iter().filter(|m| !m.is_empty()).count()
        + l0_files(version, lo, hi, snapshot).count()
        + (1..version.num_levels())
            .filter(|&l| !version.overlapping(l, lo, hi).is_empty())
            .count()
}
