//! Strategies `posting-eager` and `posting-lazy`: LevelDB++'s Stand-Alone
//! indexes (Qader, Cheng, Hristidis, "A Comparative Study of Secondary
//! Indexing Techniques in LSM-based NoSQL Databases", SIGMOD 2018, §4 and
//! Appendix B): a secondary LSM tree mapping an attribute value to the
//! primary keys holding it.
//!
//! * **Eager** (§4.1): one posting list per value, key `sort_key(value)`
//!   (plus the exact geometry for spatial values), value the list of
//!   `(primary key, seq)` newest first. Every write reads the lists of the
//!   record's old and new values, edits them and writes them back (the old
//!   record comes from the batched lookup of the write path). The index
//!   holds exactly the live versions: no validation.
//! * **Lazy** (§4.1.2): each write merges a one-element fragment into
//!   the list of its new value — an engine merge operand (`strata_lsm::merge`),
//!   written without reading anything; a delete merges a *delete marker*
//!   into the list of the record's old value (the only write that reads
//!   the old record). The tree's compactions combine a list's fragments
//!   ([`PostingMerge`]: newest entry per primary key wins, markers cancel
//!   what they delete and vanish in a full merge), so a list has at most
//!   one fragment per level. A lookup with a limit reads the list's
//!   fragments component by component, newest first, validates each
//!   component's candidates against the primary (batched fetch) and stops
//!   at the first component after which K are valid; a range or window
//!   query with a limit reads all its lists the same way, level by level
//!   (Algorithm 6); queries without a limit read the merged lists. Entries of records updated to another value stay
//!   in their old list until validation filters them (as in the paper).
//!
//! Lazy list encoding (`docs/format/standalone.md`): `varint count`, then per
//! entry `varint pk_len ‖ pk ‖ fixed64_le(seq << 1 | is_marker)`, newest
//! first.

#![deny(clippy::indexing_slicing)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use strata_lsm::coding::{get_varint64, put_varint64};
use strata_lsm::error::{Error, Result};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::merge::{ComponentEvent, MergeOperator};
use strata_lsm::Snapshot;
use strata_lsm::WriteBatch;

use super::def::Attrs;
use super::strategy::{
    self, BuildMethod, Cand, Check, Counters, Current, IndexStrategy, NeedsCurrent, OpenCx, Query,
    QueryCx, StrategyKind, VersionSlot, WritePath,
};
use super::tree::{self, IndexTree};
use super::value::{IndexValue, KeyType, Predicate};
use super::{Hit, IndexStats, OpRef, QueryProfile};

/// A posting list: (primary key, seq), newest first.
type List = Vec<(Vec<u8>, SeqNo)>;

fn list_key(v: &IndexValue) -> Vec<u8> {
    let mut k = tree::sort_key(v);
    k.extend_from_slice(&tree::geometry(v));
    k
}

fn encode_list(l: &List) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint64(&mut out, l.len() as u64);
    for (pk, seq) in l {
        put_varint64(&mut out, pk.len() as u64);
        out.extend_from_slice(pk);
        out.extend_from_slice(&seq.to_le_bytes());
    }
    out
}

pub(crate) fn decode_list(mut b: &[u8]) -> Result<List> {
    let bad = || Error::corruption("posting list is malformed");
    let n = get_varint64(&mut b).ok_or_else(bad)?;
    // An entry takes at least 9 bytes (length, seq): a corrupt count cannot
    // make a reservation larger than the list.
    let mut l = Vec::with_capacity(n.min(b.len() as u64 / 9) as usize);
    for _ in 0..n {
        let len = get_varint64(&mut b).ok_or_else(bad)? as usize;
        let (pk, rest) = b.split_at_checked(len).ok_or_else(bad)?;
        let (seq, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        b = rest;
        l.push((pk.to_vec(), u64::from_le_bytes(*seq)));
    }
    if !b.is_empty() {
        return Err(bad());
    }
    Ok(l)
}

/// The geometry suffix of a list or fragment key (spatial types).
fn geometry_len(ty: KeyType) -> usize {
    match ty {
        KeyType::Point => 16,
        KeyType::Rect => 32,
        _ => 0,
    }
}

/// Layout version of a `posting-lazy` tree (lists as merge operands).
const LAZY_LAYOUT: &[u8] = b"lazy-2";

/// A Lazy list entry: primary key, sequence number, and whether it is a
/// delete marker. Lists hold them newest first.
type LazyEntry = (Vec<u8>, SeqNo, bool);

fn encode_lazy(l: &[LazyEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint64(&mut out, l.len() as u64);
    for (pk, seq, marker) in l {
        put_varint64(&mut out, pk.len() as u64);
        out.extend_from_slice(pk);
        out.extend_from_slice(&(seq << 1 | u64::from(*marker)).to_le_bytes());
    }
    out
}

pub(crate) fn decode_lazy(b: &[u8]) -> Result<Vec<LazyEntry>> {
    Ok(decode_list(b)
        .map_err(|_| Error::corruption("posting-lazy list is malformed"))?
        .into_iter()
        .map(|(pk, x)| (pk, x >> 1, x & 1 == 1))
        .collect())
}

/// The merge operator of `posting-lazy` trees: concatenates lists, orders
/// the entries newest first by primary sequence number and keeps each
/// primary key's newest entry (a replayed batch's duplicates collapse).
/// A full merge also drops the delete markers, whose work is done; an empty
/// list deletes its key.
pub(crate) struct PostingMerge;

impl PostingMerge {
    fn combine(base: Option<&[u8]>, operands: &[&[u8]], full: bool) -> Result<Vec<LazyEntry>> {
        let mut all = Vec::new();
        for o in operands.iter().copied().chain(base) {
            all.extend(decode_lazy(o)?);
        }
        all.sort_by_key(|e| std::cmp::Reverse(e.1));
        let mut seen = std::collections::HashSet::new();
        all.retain(|(pk, _, marker)| seen.insert(pk.clone()) && !(full && *marker));
        Ok(all)
    }
}

impl MergeOperator for PostingMerge {
    fn name(&self) -> &str {
        "strata.posting-lazy"
    }

    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Result<Option<Vec<u8>>> {
        let l = Self::combine(base, operands, true)?;
        Ok((!l.is_empty()).then(|| encode_lazy(&l)))
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Result<Vec<u8>> {
        Ok(encode_lazy(&Self::combine(None, operands, false)?))
    }
}

pub(crate) struct Posting {
    ty: KeyType,
    eager: bool,
    tree: IndexTree,
    counters: Counters,
}

impl Posting {
    pub fn open(cx: &OpenCx<'_>, eager: bool) -> Result<Posting> {
        let (dir, ty, params, opts) = (cx.dir, cx.spec.key_type, cx.params, cx.tree_opts);
        let kind = if eager {
            StrategyKind::PostingEager
        } else {
            StrategyKind::PostingLazy
        };
        strategy::no_params(kind.name(), params)?;
        let tree = if eager {
            IndexTree::open(dir.join("tree"), opts.clone())?
        } else {
            let opts = opts.clone().merge_operator(Arc::new(PostingMerge));
            IndexTree::open_layout(dir.join("tree"), opts, LAZY_LAYOUT, true)?
        };
        Ok(Posting {
            ty,
            eager,
            tree,
            counters: Counters::default(),
        })
    }

    fn apply_eager(
        &self,
        ops: &[OpRef<'_>],
        current: &Current<'_>,
        attrs: &Attrs<'_>,
    ) -> Result<()> {
        let mut batch = WriteBatch::new();
        // Lists read or edited by this batch.
        let mut lists: HashMap<Vec<u8>, List> = HashMap::new();
        let mut latest: HashMap<&[u8], Option<Option<IndexValue>>> = HashMap::new();
        let (mut added, mut removed) = (0, 0);
        let load = |lists: &mut HashMap<Vec<u8>, List>, k: &Vec<u8>| -> Result<()> {
            if !lists.contains_key(k) {
                let l = match self.tree.db.get(k)? {
                    Some(b) => decode_list(&b)?,
                    None => Vec::new(),
                };
                lists.insert(k.clone(), l);
            }
            Ok(())
        };
        for &(seq, key, new) in ops {
            let old = match latest.remove(key) {
                Some(o) => o,
                None => match current.get(key) {
                    Some(Some((_, raw))) => Some(attrs.get(raw).ok()),
                    _ => None,
                },
            };
            if let Some(Some(v)) = old {
                let lk = list_key(&v);
                load(&mut lists, &lk)?;
                if let Some(l) = lists.get_mut(&lk) {
                    let n = l.len();
                    l.retain(|(pk, _)| pk.as_slice() != key);
                    removed += (n - l.len()) as u64;
                }
            }
            let new_attr = new.and_then(|raw| attrs.counted(raw));
            if let Some(v) = &new_attr {
                self.tree.note_extent(v, &mut batch);
                let lk = list_key(v);
                load(&mut lists, &lk)?;
                if let Some(l) = lists.get_mut(&lk) {
                    l.insert(0, (key.to_vec(), seq));
                    added += 1;
                }
            }
            latest.insert(key, new.map(|_| new_attr));
        }
        for (k, l) in &lists {
            if l.is_empty() {
                batch.delete(k);
            } else {
                batch.put(k, &encode_list(l));
            }
        }
        self.tree.write(batch)?;
        self.counters.add_entries(added, removed);
        Ok(())
    }

    /// True if list key `k` (not a metadata key) holds a value matching
    /// the query's predicate.
    fn list_matches(&self, q: &Query<'_>, k: &[u8]) -> Result<bool> {
        let sk = tree::sort_key_len(self.ty, k)?;
        match k.split_at_checked(sk) {
            Some((_, geometry)) if geometry.len() == geometry_len(self.ty) => {
                tree::entry_matches(self.ty, q.pred, geometry)
            }
            _ => Err(Error::corruption("posting list key is malformed")),
        }
    }

    /// The candidates of every (merged) posting list in the key `ranges`
    /// of the query's predicate.
    fn scan_lists(
        &self,
        snap: &Snapshot,
        q: &Query<'_>,
        ranges: &[(Vec<u8>, Option<Vec<u8>>)],
    ) -> Result<Vec<Cand>> {
        let mut out = Vec::new();
        for (from, to) in ranges {
            for kv in snap.iter(Some(from), to.as_deref())? {
                let (k, v) = kv?;
                if tree::is_meta(&k) || !self.list_matches(q, &k)? {
                    continue;
                }
                if self.eager {
                    out.extend(
                        decode_list(&v)?
                            .into_iter()
                            .filter(|(_, s)| *s <= q.snapshot),
                    );
                } else {
                    // A merged list: markers are gone.
                    out.extend(
                        decode_lazy(&v)?
                            .into_iter()
                            .filter(|(_, s, marker)| *s <= q.snapshot && !marker)
                            .map(|(pk, s, _)| (pk, s)),
                    );
                }
            }
        }
        Ok(out)
    }

    /// Lazy, an equality lookup with limit `k`: reads the list of `v`
    /// component by component (newest first), validating each component's
    /// new candidates, and stops once `k` are valid. Components hold
    /// newer primary versions than the components below them (the tree is
    /// written in sequence order; a build ends with a full compaction), so
    /// the first `k` valid are the `k` most recent.
    fn lazy_top_k(
        &self,
        snap: &Snapshot,
        q: &Query<'_>,
        v: &IndexValue,
        k: usize,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let mut hits: Vec<Hit> = Vec::new();
        // Primary keys whose newest entry was seen (a newer entry or
        // marker hides older ones).
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        snap.for_each_version(&list_key(v), &mut |_, kind, value| {
            if kind == ValueKind::Deletion {
                return Ok(false);
            }
            let mut cands: Vec<Cand> = Vec::new();
            for (pk, seq, marker) in decode_lazy(value)? {
                if seq > q.snapshot || !seen.insert(pk.clone()) || marker {
                    continue;
                }
                cands.push((pk, seq));
            }
            let sub = q.limited(k - hits.len());
            let (more, _) =
                strategy::resolve(cands, &sub, &Check::Direct, &self.counters, profile)?;
            hits.extend(more);
            Ok(hits.len() < k && kind == ValueKind::Merge)
        })?;
        Ok(hits)
    }

    /// Lazy, any other query with limit `k` (RANGELOOKUP, Algorithm 6):
    /// reads the matching lists' entries component by component, newest
    /// component first, validates each component's new candidates, and
    /// stops after a component once `k` valid results are newer than
    /// anything the components left can hold. Components are not ordered
    /// by primary sequence number across list keys (a compaction moves one
    /// key range down and leaves older entries of other ranges above), so
    /// the bound is each component's largest tree sequence number, which
    /// covers the primary sequence numbers inside it
    /// ([`IndexTree::write_covering`]; only on a tree that
    /// [`IndexTree::seq_covers`]). A list whose merged value or deletion
    /// was met hides its entries in older components.
    fn lazy_top_k_ranges(
        &self,
        snap: &Snapshot,
        q: &Query<'_>,
        ranges: &[(Vec<u8>, Option<Vec<u8>>)],
        k: usize,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let mut hits: Vec<Hit> = Vec::new();
        // (list key, primary key) pairs whose newest entry was seen.
        let mut seen: HashSet<(Vec<u8>, Vec<u8>)> = HashSet::new();
        // Lists whose base (merged value or deletion) was met.
        let mut closed: HashSet<Vec<u8>> = HashSet::new();
        let mut cands: Vec<Cand> = Vec::new();
        let sub = q.limited(k);
        snap.for_each_in_ranges_by_component(ranges, &mut |ev| match ev {
            ComponentEvent::Entry {
                user_key,
                kind,
                value,
            } => {
                if tree::is_meta(user_key) || closed.contains(user_key) {
                    return Ok(true);
                }
                if kind != ValueKind::Deletion {
                    let matches = self.list_matches(q, user_key)?;
                    for (pk, seq, marker) in decode_lazy(value)? {
                        if seq > q.snapshot || !seen.insert((user_key.to_vec(), pk.clone())) {
                            continue;
                        }
                        if matches && !marker {
                            cands.push((pk, seq));
                        }
                    }
                }
                if kind != ValueKind::Merge {
                    closed.insert(user_key.to_vec());
                }
                Ok(true)
            }
            ComponentEvent::End { rest_max_seq } => {
                // Only candidates that can enter the current top K.
                let floor = kth_newest(&hits, k);
                let found: Vec<Cand> = std::mem::take(&mut cands)
                    .into_iter()
                    .filter(|c| floor.is_none_or(|f| c.1 > f))
                    .collect();
                let (more, _) =
                    strategy::resolve(found, &sub, &Check::Direct, &self.counters, profile)?;
                hits.extend(more);
                newest_first(&mut hits, k);
                Ok(kth_newest(&hits, k).is_none_or(|f| f <= rest_max_seq))
            }
        })?;
        Ok(hits)
    }

    fn apply_lazy(
        &self,
        ops: &[OpRef<'_>],
        current: &Current<'_>,
        attrs: &Attrs<'_>,
    ) -> Result<()> {
        let mut batch = WriteBatch::new();
        let (mut added, mut removed) = (0, 0);
        // Each key's attribute after the operations so far (a delete's old
        // value may come from earlier in the batch).
        let mut latest: HashMap<&[u8], Option<IndexValue>> = HashMap::new();
        for &(seq, key, new) in ops {
            match new {
                Some(raw) => {
                    let v = attrs.counted(raw);
                    if let Some(v) = &v {
                        self.tree.note_extent(v, &mut batch);
                        batch.merge(&list_key(v), &encode_lazy(&[(key.to_vec(), seq, false)]));
                        added += 1;
                    }
                    latest.insert(key, v);
                }
                None => {
                    let old = match latest.remove(key) {
                        Some(o) => o,
                        None => match current.get(key) {
                            Some(Some((_, raw))) => attrs.get(raw).ok(),
                            _ => None,
                        },
                    };
                    if let Some(v) = old {
                        batch.merge(&list_key(&v), &encode_lazy(&[(key.to_vec(), seq, true)]));
                        removed += 1;
                    }
                    latest.insert(key, None);
                }
            }
        }
        let newest = ops.iter().map(|&(seq, _, _)| seq).max().unwrap_or(0);
        self.tree.write_covering(batch, newest)?;
        self.counters.add_entries(added, removed);
        Ok(())
    }
}

/// Sorts `hits` newest first and keeps the first `k`.
fn newest_first(hits: &mut Vec<Hit>, k: usize) {
    hits.sort_unstable_by(|a, b| b.seq.cmp(&a.seq).then_with(|| a.key.cmp(&b.key)));
    hits.truncate(k);
}

/// The sequence number of the `k`-th newest of `hits` (sorted newest
/// first), if there are `k`.
fn kth_newest(hits: &[Hit], k: usize) -> Option<SeqNo> {
    k.checked_sub(1).and_then(|i| hits.get(i)).map(|h| h.seq)
}

impl Posting {
    fn trees(&self) -> Vec<&IndexTree> {
        vec![&self.tree]
    }

    fn query_pinned(
        &self,
        pinned: &[Snapshot],
        q: &Query<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let snap = strategy::main_view(pinned, self.kind().name())?;
        let before = self.tree.blocks_read();
        let ranges = tree::key_ranges(q.pred, self.tree.extent());
        let mut hits = match (q.pred, q.opts.limit) {
            // A scalar lookup with a limit on a Lazy index reads the
            // list's fragments level by level and stops early.
            (Predicate::Eq(v), Some(k)) if !self.eager && !self.ty.is_spatial() => {
                self.lazy_top_k(snap, q, v, k, profile)?
            }
            // Level by level only where there are levels to skip: with one
            // component it reads the same blocks as a scan, at more cost;
            // and only where sequence numbers bound what is left.
            (_, Some(k))
                if !self.eager
                    && self.tree.seq_covers()
                    && snap.components_in_ranges(&ranges) > 1 =>
            {
                self.lazy_top_k_ranges(snap, q, &ranges, k, profile)?
            }
            _ => {
                let cands = self.scan_lists(snap, q, &ranges)?;
                let check = if self.eager {
                    Check::Exact
                } else {
                    Check::Direct
                };
                strategy::resolve(cands, q, &check, &self.counters, profile)?.0
            }
        };
        if let Some(k) = q.opts.limit {
            newest_first(&mut hits, k);
        }
        profile.index_blocks_read += self.tree.blocks_read().saturating_sub(before);
        Ok(hits)
    }
}

impl IndexStrategy for Posting {
    fn kind(&self) -> StrategyKind {
        if self.eager {
            StrategyKind::PostingEager
        } else {
            StrategyKind::PostingLazy
        }
    }

    fn write_path(&self) -> WritePath {
        WritePath::Sync
    }

    fn needs_current(&self) -> NeedsCurrent {
        if self.eager {
            NeedsCurrent::All
        } else {
            NeedsCurrent::Deletes
        }
    }

    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        if self.eager {
            self.apply_eager(ops, current, attrs)
        } else {
            self.apply_lazy(ops, current, attrs)
        }
    }

    /// Lazy: the build wrote the lists' fragments in key order, not in
    /// sequence order; a full compaction merges each list into one value,
    /// so that later fragments are all newer (see `lazy_top_k`).
    fn after_build(&self) -> Result<()> {
        if !self.eager {
            self.tree.db.compact_range(None, None)?;
        }
        Ok(())
    }

    fn clear(&self) -> Result<()> {
        self.counters.entries.store(0, Relaxed);
        self.tree.clear()
    }

    fn stats(&self, _slot: Option<&VersionSlot>, s: &mut IndexStats) {
        self.counters.fill(s);
        s.disk_bytes = self.tree.disk_bytes();
    }

    strategy::tree_strategy_methods!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_codec_round_trips_and_rejects_damage() {
        let l: List = vec![(b"k1".to_vec(), 9), (Vec::new(), 3), (b"zz".to_vec(), 1)];
        let b = encode_list(&l);
        assert_eq!(decode_list(&b).unwrap(), l);
        for cut in 0..b.len() {
            assert!(decode_list(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(decode_list(&extra).is_err());
        let lazy: Vec<LazyEntry> = vec![(b"k1".to_vec(), 9, true), (b"k2".to_vec(), 1, false)];
        assert_eq!(decode_lazy(&encode_lazy(&lazy)).unwrap(), lazy);
    }

    /// Fragments (one entry each, sequence order = write order) combined
    /// in any grouping of partial merges give the same full merge, which
    /// holds each key's newest entry unless that entry is a marker.
    #[test]
    fn lazy_merges_are_associative_and_apply_markers() {
        let m = PostingMerge;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let n = 1 + next(30) as usize;
            // Newest first, as the engine hands operands over.
            let frags: Vec<Vec<u8>> = (0..n as u64)
                .rev()
                .map(|seq| encode_lazy(&[(vec![b'a' + next(6) as u8], seq + 1, next(4) == 0)]))
                .collect();
            let refs: Vec<&[u8]> = frags.iter().map(Vec::as_slice).collect();
            let whole = m.full_merge(b"v", None, &refs).unwrap();
            // The model: each key's newest entry, markers removed.
            let mut want: Vec<LazyEntry> = Vec::new();
            let mut seen = HashSet::new();
            for f in &frags {
                let e = decode_lazy(f).unwrap().remove(0);
                if seen.insert(e.0.clone()) && !e.2 {
                    want.push(e);
                }
            }
            let got = whole.map(|w| decode_lazy(&w).unwrap()).unwrap_or_default();
            assert_eq!(got, want);
            // Newer half partially merged, older half fully merged as base.
            if n >= 4 {
                let cut = 1 + next(n as u64 - 2) as usize;
                let newer = m.partial_merge(b"v", &refs[..cut.max(2)]).unwrap();
                let rest = &refs[cut.max(2)..];
                let base = if rest.is_empty() {
                    None
                } else {
                    m.full_merge(b"v", None, rest).unwrap()
                };
                let regrouped = m.full_merge(b"v", base.as_deref(), &[&newer]).unwrap();
                let got = regrouped
                    .map(|w| decode_lazy(&w).unwrap())
                    .unwrap_or_default();
                assert_eq!(got, want);
            }
        }
    }
}
