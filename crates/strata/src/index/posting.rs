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
//!   holds exactly the live versions: no validation. A write edits the
//!   encoded lists in place ([`EagerList`]: no entry is decoded into a
//!   value of its own) and inserts each entry before the first older one,
//!   so lists stay newest first whatever order a build applies records
//!   in (lists written before that rule, by a build, may be out of
//!   order: readers select the newest rather than assume the order). A
//!   scalar lookup reads its one list with a point read; a query with a
//!   limit `K` copies out only the `K` newest entries of its lists.
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

use std::collections::hash_map::Entry;
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

/// A posting list, decoded: (primary key, seq), newest first.
#[cfg(any(test, feature = "testing"))]
type List = Vec<(Vec<u8>, SeqNo)>;

fn list_key(v: &IndexValue) -> Vec<u8> {
    let mut k = Vec::new();
    list_key_into(v, &mut k);
    k
}

/// [`list_key`] written into `k` (cleared first).
fn list_key_into(v: &IndexValue, k: &mut Vec<u8>) {
    k.clear();
    tree::sort_key_into(v, k);
    k.extend_from_slice(&tree::geometry(v));
}

#[cfg(test)]
fn encode_list(l: &List) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint64(&mut out, l.len() as u64);
    for (pk, seq) in l {
        put_entry(&mut out, pk, *seq);
    }
    out
}

/// Appends one entry (`varint pk_len ‖ pk ‖ fixed64_le(trailer)`).
fn put_entry(out: &mut Vec<u8>, pk: &[u8], trailer: u64) {
    put_varint64(out, pk.len() as u64);
    out.extend_from_slice(pk);
    out.extend_from_slice(&trailer.to_le_bytes());
}

/// The entries of an encoded list, borrowed, in stored order: each
/// primary key with its 8-byte trailer (the sequence number for Eager,
/// `seq << 1 | marker` for Lazy). Yields an error, then stops, at a
/// malformed entry, and after the last counted entry if bytes are left
/// over: iterating to the end checks the whole list. A reader that stops
/// early has checked only what it read.
struct Entries<'a> {
    rest: &'a [u8],
    left: u64,
}

impl<'a> Entries<'a> {
    fn new(mut b: &'a [u8]) -> Result<Entries<'a>> {
        let left = get_varint64(&mut b).ok_or_else(malformed)?;
        Ok(Entries { rest: b, left })
    }

    /// The bytes not read yet (the entries after the last one yielded).
    fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

fn malformed() -> Error {
    Error::corruption("posting list is malformed")
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(&'a [u8], u64)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.rest = &[];
            return Some(Err(malformed()));
        }
        let entry = (|| {
            let mut b = self.rest;
            let len = usize::try_from(get_varint64(&mut b)?).ok()?;
            let (pk, rest) = b.split_at_checked(len)?;
            let (trailer, rest) = rest.split_first_chunk::<8>()?;
            Some((pk, u64::from_le_bytes(*trailer), rest))
        })();
        match entry {
            Some((pk, trailer, rest)) => {
                self.rest = rest;
                self.left -= 1;
                Some(Ok((pk, trailer)))
            }
            None => {
                (self.left, self.rest) = (0, &[]);
                Some(Err(malformed()))
            }
        }
    }
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn decode_list(b: &[u8]) -> Result<List> {
    Entries::new(b)?
        .map(|e| e.map(|(pk, seq)| (pk.to_vec(), seq)))
        .collect()
}

/// An Eager list being edited by a batch: `buf[HEAD..]` holds the
/// entries (newest first by sequence number), `count` how many. The
/// first [`HEAD`] bytes are room for the count's varint, written in
/// front of the entries when the list is stored, so that storing copies
/// nothing. An insert parses the entries up to its position, a remove
/// all of them (borrowed); the bytes after an edit move as they are.
struct EagerList {
    count: u64,
    buf: Vec<u8>,
}

/// Room for a varint count in front of an [`EagerList`]'s entries.
const HEAD: usize = 10;

impl EagerList {
    fn empty() -> EagerList {
        EagerList {
            count: 0,
            buf: vec![0; HEAD],
        }
    }

    fn from_stored(b: &[u8]) -> Result<EagerList> {
        let e = Entries::new(b)?;
        let mut buf = Vec::with_capacity(HEAD + e.rest().len() + 64);
        buf.resize(HEAD, 0);
        buf.extend_from_slice(e.rest());
        Ok(EagerList { count: e.left, buf })
    }

    /// The entries, borrowed.
    fn entries(&self) -> Entries<'_> {
        Entries {
            rest: self.buf.get(HEAD..).unwrap_or_default(),
            left: self.count,
        }
    }

    /// Removes every entry of primary key `pk`; returns how many.
    fn remove(&mut self, pk: &[u8]) -> Result<u64> {
        let mut removed = 0;
        let mut at = HEAD;
        let mut it = self.entries();
        let mut ranges = Vec::new();
        while let Some(e) = it.next() {
            let (k, _) = e?;
            let end = self.buf.len() - it.rest().len();
            if k == pk {
                ranges.push(at..end);
            }
            at = end;
        }
        for r in ranges.into_iter().rev() {
            self.buf.drain(r);
            removed += 1;
        }
        self.count -= removed;
        Ok(removed)
    }

    /// Inserts `(pk, seq)` before the first entry older than `seq`: a
    /// list whose entries are newest first stays so (a write's entry goes
    /// in front; a build's, applied in key order, where it belongs). An
    /// entry of `pk` already in the list is replaced: a list holds each
    /// primary key once, also when recovery applies a write again that
    /// the tree already holds.
    fn insert(&mut self, pk: &[u8], seq: SeqNo) -> Result<()> {
        self.remove(pk)?;
        let mut at = HEAD;
        let mut it = self.entries();
        while let Some(e) = it.next() {
            if e?.1 < seq {
                break;
            }
            at = self.buf.len() - it.rest().len();
        }
        let mut entry = Vec::with_capacity(pk.len() + 18);
        put_entry(&mut entry, pk, seq);
        self.buf.splice(at..at, entry);
        self.count += 1;
        Ok(())
    }

    /// The stored form: `varint count ‖ entries`.
    fn stored(&mut self) -> &[u8] {
        let mut count = Vec::with_capacity(HEAD);
        put_varint64(&mut count, self.count);
        let start = HEAD - count.len();
        if let Some(head) = self.buf.get_mut(start..HEAD) {
            head.copy_from_slice(&count);
        }
        self.buf.get(start..).unwrap_or_default()
    }
}

/// The `k` newest of `entries` (all of them without a limit), newest
/// first by sequence number, owned.
/// Exact duplicates (lists written before `EagerList::insert` replaced a
/// key's entry may hold one twice after a recovery) count once.
fn newest_k(mut entries: Vec<(&[u8], SeqNo)>, k: Option<usize>) -> Vec<Cand> {
    if let Some(k) = k {
        entries.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        entries.dedup();
        entries.truncate(k);
    }
    entries
        .into_iter()
        .map(|(pk, seq)| (pk.to_vec(), seq))
        .collect()
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
        put_entry(&mut out, pk, seq << 1 | u64::from(*marker));
    }
    out
}

/// A one-entry Lazy list, what a write merges into its value's list,
/// written into `out` (cleared first).
fn fragment_into(pk: &[u8], seq: SeqNo, marker: bool, out: &mut Vec<u8>) {
    out.clear();
    put_varint64(out, 1);
    put_entry(out, pk, seq << 1 | u64::from(marker));
}

/// A Lazy entry's trailer as (sequence number, is a delete marker).
fn lazy_trailer(x: u64) -> (SeqNo, bool) {
    (x >> 1, x & 1 == 1)
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn decode_lazy(b: &[u8]) -> Result<Vec<LazyEntry>> {
    let bad = |_| Error::corruption("posting-lazy list is malformed");
    Entries::new(b)
        .map_err(bad)?
        .map(|e| {
            let (pk, x) = e.map_err(bad)?;
            let (seq, marker) = lazy_trailer(x);
            Ok((pk.to_vec(), seq, marker))
        })
        .collect()
}

/// The merge operator of `posting-lazy` trees: concatenates lists, orders
/// the entries newest first by primary sequence number and keeps each
/// primary key's newest entry (a replayed batch's duplicates collapse).
/// A full merge also drops the delete markers, whose work is done; an empty
/// list deletes its key.
pub(crate) struct PostingMerge;

impl PostingMerge {
    /// The combined list, encoded (`None` if it has no entry): entries
    /// borrowed from `base` and `operands`, copied once into the result.
    fn combine(base: Option<&[u8]>, operands: &[&[u8]], full: bool) -> Result<Option<Vec<u8>>> {
        let bad = |_| Error::corruption("posting-lazy list is malformed");
        let mut all: Vec<(&[u8], SeqNo, u64)> = Vec::new();
        for o in operands.iter().copied().chain(base) {
            for e in Entries::new(o).map_err(bad)? {
                let (pk, x) = e.map_err(bad)?;
                all.push((pk, lazy_trailer(x).0, x));
            }
        }
        all.sort_by_key(|e| std::cmp::Reverse(e.1));
        let mut seen = HashSet::with_capacity(all.len());
        all.retain(|&(pk, _, x)| seen.insert(pk) && !(full && lazy_trailer(x).1));
        if all.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(10 + all.iter().map(|e| e.0.len() + 10).sum::<usize>());
        put_varint64(&mut out, all.len() as u64);
        for (pk, _, x) in all {
            put_entry(&mut out, pk, x);
        }
        Ok(Some(out))
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
        Self::combine(base, operands, true)
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Result<Vec<u8>> {
        // An empty list (no operand had an entry) stays an empty list.
        Ok(Self::combine(None, operands, false)?.unwrap_or_else(|| encode_lazy(&[])))
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

    /// The list under `k` in `lists`, read from the tree the first time.
    fn load_list<'m>(
        &self,
        lists: &'m mut HashMap<Vec<u8>, EagerList>,
        k: Vec<u8>,
    ) -> Result<&'m mut EagerList> {
        Ok(match lists.entry(k) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let l = match self.tree.db.get(v.key())? {
                    Some(b) => EagerList::from_stored(&b)?,
                    None => EagerList::empty(),
                };
                v.insert(l)
            }
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
        let mut lists: HashMap<Vec<u8>, EagerList> = HashMap::new();
        // Each key's attribute after the operations so far.
        let mut latest: tree::BatchLatest<'_, Option<Option<IndexValue>>> =
            tree::BatchLatest::new(ops);
        let (mut added, mut removed) = (0, 0);
        for &(seq, key, new) in ops {
            let old = match latest.take(key) {
                Some(o) => o,
                None => match current.get(key) {
                    Some(Some((_, raw))) => Some(attrs.get(raw).ok()),
                    _ => None,
                },
            };
            if let Some(Some(v)) = old {
                removed += self.load_list(&mut lists, list_key(&v))?.remove(key)?;
            }
            let new_attr = new.and_then(|raw| attrs.counted(raw));
            if let Some(v) = &new_attr {
                self.tree.note_extent(v, &mut batch);
                self.load_list(&mut lists, list_key(v))?.insert(key, seq)?;
                added += 1;
            }
            latest.set(key, new.map(|_| new_attr));
        }
        for (k, l) in &mut lists {
            if l.count == 0 {
                batch.delete(k);
            } else {
                batch.put(k, l.stored());
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
    /// of the query's predicate. Eager, with a limit: only the limit's
    /// number of newest (its entries are exactly the live versions, so no
    /// other can be a result); Lazy's may be stale, all are returned.
    fn scan_lists(
        &self,
        snap: &Snapshot,
        q: &Query<'_>,
        ranges: &[(Vec<u8>, Option<Vec<u8>>)],
    ) -> Result<Vec<Cand>> {
        let mut values = Vec::new();
        for (from, to) in ranges {
            for kv in snap.iter(Some(from), to.as_deref())? {
                let (k, v) = kv?;
                if tree::is_meta(&k) || !self.list_matches(q, &k)? {
                    continue;
                }
                values.push(v);
            }
        }
        let mut entries = Vec::new();
        for v in &values {
            self.list_entries(v, q.snapshot, &mut entries)?;
        }
        Ok(newest_k(entries, q.opts.limit.filter(|_| self.eager)))
    }

    /// Appends the entries of list value `v` that a query at primary
    /// snapshot `snapshot` sees: Eager's entries, a merged Lazy list's
    /// entries that are not markers (a merged list has none).
    fn list_entries<'a>(
        &self,
        v: &'a [u8],
        snapshot: SeqNo,
        out: &mut Vec<(&'a [u8], SeqNo)>,
    ) -> Result<()> {
        for e in Entries::new(v)? {
            let (pk, x) = e?;
            let (seq, marker) = if self.eager {
                (x, false)
            } else {
                lazy_trailer(x)
            };
            if seq <= snapshot && !marker {
                out.push((pk, seq));
            }
        }
        Ok(())
    }

    /// Eager, an equality lookup on a scalar: one point read of the
    /// value's list.
    fn eager_lookup(&self, snap: &Snapshot, q: &Query<'_>, v: &IndexValue) -> Result<Vec<Cand>> {
        let Some(list) = snap.get(&list_key(v))? else {
            return Ok(Vec::new());
        };
        let mut entries = Vec::new();
        self.list_entries(&list, q.snapshot, &mut entries)?;
        Ok(newest_k(entries, q.opts.limit))
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
        // Candidates not validated yet: newer than every entry left.
        let mut cands: Vec<Cand> = Vec::new();
        snap.for_each_version(&list_key(v), &mut |_, kind, value| {
            if kind == ValueKind::Deletion {
                return Ok(false);
            }
            for e in Entries::new(value)? {
                let (pk, x) = e?;
                let (seq, marker) = lazy_trailer(x);
                if seq > q.snapshot || seen.contains(pk) {
                    continue;
                }
                seen.insert(pk.to_vec());
                if marker {
                    continue;
                }
                cands.push((pk.to_vec(), seq));
                // Validates once the candidates could complete the top K:
                // one batched fetch for fragments from many components.
                if cands.len() >= k - hits.len() {
                    let sub = q.limited(k - hits.len());
                    let batch = std::mem::take(&mut cands);
                    let (more, _) =
                        strategy::resolve(batch, &sub, &Check::Direct, &self.counters, profile)?;
                    hits.extend(more);
                    if hits.len() >= k {
                        return Ok(false);
                    }
                }
            }
            Ok(kind == ValueKind::Merge)
        })?;
        if hits.len() < k && !cands.is_empty() {
            let sub = q.limited(k - hits.len());
            let (more, _) =
                strategy::resolve(cands, &sub, &Check::Direct, &self.counters, profile)?;
            hits.extend(more);
        }
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
    /// ([`IndexTree::write_with`]; only on a tree that
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
                    for e in Entries::new(value)? {
                        let (pk, x) = e?;
                        let (seq, marker) = lazy_trailer(x);
                        if seq > q.snapshot || !seen.insert((user_key.to_vec(), pk.to_vec())) {
                            continue;
                        }
                        if matches && !marker {
                            cands.push((pk.to_vec(), seq));
                        }
                    }
                }
                if kind != ValueKind::Merge {
                    closed.insert(user_key.to_vec());
                }
                Ok(true)
            }
            ComponentEvent::End { rest_max_seq } => {
                // With fewer than K results and candidates together the
                // visit cannot stop here, whatever is valid: the candidates
                // wait for the next component's (one batched lookup, not
                // one per component; most lists hold fewer than K).
                if hits.len() + cands.len() < k {
                    return Ok(true);
                }
                self.resolve_newest(&mut hits, &mut cands, &sub, k, profile)?;
                Ok(kth_newest(&hits, k).is_none_or(|f| f <= rest_max_seq))
            }
        })?;
        self.resolve_newest(&mut hits, &mut cands, &sub, k, profile)?;
        Ok(hits)
    }

    /// Validates `cands` (emptied) that can enter the current top `k` of
    /// `hits` and adds the valid ones, keeping `hits` the `k` newest.
    fn resolve_newest(
        &self,
        hits: &mut Vec<Hit>,
        cands: &mut Vec<Cand>,
        sub: &Query<'_>,
        k: usize,
        profile: &mut QueryProfile,
    ) -> Result<()> {
        if cands.is_empty() {
            return Ok(());
        }
        let floor = kth_newest(hits, k);
        let found: Vec<Cand> = std::mem::take(cands)
            .into_iter()
            .filter(|c| floor.is_none_or(|f| c.1 > f))
            .collect();
        let (more, _) = strategy::resolve(found, sub, &Check::Direct, &self.counters, profile)?;
        hits.extend(more);
        newest_first(hits, k);
        Ok(())
    }

    fn apply_lazy(
        &self,
        ops: &[OpRef<'_>],
        current: &Current<'_>,
        attrs: &Attrs<'_>,
    ) -> Result<()> {
        let (mut added, mut removed) = (0, 0);
        let newest = ops.iter().map(|&(seq, _, _)| seq).max().unwrap_or(0);
        self.tree.write_with(newest, |batch, b| {
            // Each key's attribute after the operations so far (a delete's
            // old value may come from earlier in the batch).
            let mut latest: tree::BatchLatest<'_, Option<IndexValue>> = tree::BatchLatest::new(ops);
            for &(seq, key, new) in ops {
                match new {
                    Some(raw) => {
                        let v = attrs.counted(raw);
                        if let Some(v) = &v {
                            self.tree.note_extent(v, batch);
                            list_key_into(v, &mut b.key);
                            fragment_into(key, seq, false, &mut b.value);
                            batch.merge(&b.key, &b.value);
                            added += 1;
                        }
                        latest.set(key, v);
                    }
                    None => {
                        let old = match latest.take(key) {
                            Some(o) => o,
                            None => match current.get(key) {
                                Some(Some((_, raw))) => attrs.get(raw).ok(),
                                _ => None,
                            },
                        };
                        if let Some(v) = old {
                            list_key_into(&v, &mut b.key);
                            fragment_into(key, seq, true, &mut b.value);
                            batch.merge(&b.key, &b.value);
                            removed += 1;
                        }
                        latest.set(key, None);
                    }
                }
            }
            Ok(())
        })?;
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
                let cands = match q.pred {
                    Predicate::Eq(v) if self.eager && !self.ty.is_spatial() => {
                        self.eager_lookup(snap, q, v)?
                    }
                    _ => self.scan_lists(snap, q, &ranges)?,
                };
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

    /// Edits of an [`EagerList`] in place give the list a model of
    /// decoded entries gives: inserts keep it newest first (also when
    /// applied out of sequence order, as a build does), removes drop every
    /// entry of the key, and the stored form decodes to the model.
    #[test]
    fn eager_list_edits_match_a_model() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..100 {
            let mut model: List = Vec::new();
            let mut l = EagerList::empty();
            for step in 0..60u64 {
                let pk = format!("k{}", next(12)).into_bytes();
                if next(3) == 0 {
                    let n = model.len();
                    model.retain(|(k, _)| *k != pk);
                    assert_eq!(l.remove(&pk).unwrap(), (n - model.len()) as u64);
                } else {
                    // Mostly the newest (a write), sometimes older (a build).
                    let seq = if round % 2 == 0 {
                        step * 100
                    } else {
                        next(10_000)
                    };
                    // An insert replaces the key's entry.
                    model.retain(|(k, _)| *k != pk);
                    let at = model.iter().position(|e| e.1 < seq).unwrap_or(model.len());
                    model.insert(at, (pk.clone(), seq));
                    l.insert(&pk, seq).unwrap();
                }
                assert_eq!(l.count, model.len() as u64);
                let stored = l.stored().to_vec();
                assert_eq!(decode_list(&stored).unwrap(), model);
                assert_eq!(
                    decode_list(EagerList::from_stored(&stored).unwrap().stored()).unwrap(),
                    model
                );
                assert!(model.windows(2).all(|w| w[0].1 >= w[1].1));
            }
        }
    }

    /// `newest_k` picks the K largest sequence numbers, sorted input or
    /// not.
    #[test]
    fn newest_k_picks_the_newest() {
        let e: Vec<(&[u8], SeqNo)> = vec![(b"a", 5), (b"b", 9), (b"c", 1), (b"d", 7), (b"e", 3)];
        let mut got = newest_k(e.clone(), Some(2));
        got.sort_by_key(|c| std::cmp::Reverse(c.1));
        assert_eq!(got, vec![(b"b".to_vec(), 9), (b"d".to_vec(), 7)]);
        assert_eq!(newest_k(e.clone(), None).len(), 5);
        assert_eq!(newest_k(e.clone(), Some(0)).len(), 0);
        assert_eq!(newest_k(e, Some(9)).len(), 5);
        let sorted: Vec<(&[u8], SeqNo)> = vec![(b"a", 9), (b"b", 5), (b"c", 1)];
        assert_eq!(
            newest_k(sorted, Some(2)),
            vec![(b"a".to_vec(), 9), (b"b".to_vec(), 5)]
        );
        // An entry held twice counts once (lists of older builds).
        let dup: Vec<(&[u8], SeqNo)> = vec![(b"a", 9), (b"a", 9), (b"b", 5)];
        assert_eq!(
            newest_k(dup, Some(2)),
            vec![(b"a".to_vec(), 9), (b"b".to_vec(), 5)]
        );
    }

    /// Applying a write again (recovery) leaves one entry per key.
    #[test]
    fn eager_insert_replaces_the_keys_entry() {
        let mut l = EagerList::empty();
        l.insert(b"a", 5).unwrap();
        l.insert(b"b", 7).unwrap();
        l.insert(b"a", 5).unwrap();
        l.insert(b"b", 9).unwrap();
        let got: Vec<(Vec<u8>, SeqNo)> = l
            .entries()
            .map(|e| e.map(|(k, s)| (k.to_vec(), s)))
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(got, vec![(b"b".to_vec(), 9), (b"a".to_vec(), 5)]);
        assert_eq!(l.count, 2);
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
