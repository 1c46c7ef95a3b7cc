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
//! * **Lazy** (§4.2): each write appends a one-element fragment, key
//!   `sort_key(value) ‖ !seq ‖ primary key`, so a value's fragments are
//!   adjacent and newest first, without reading anything. Queries read the
//!   fragments newest first and validate each candidate against the
//!   primary (batched fetch); a lookup with a limit stops as soon as K
//!   candidates are valid.
//!
//! Deviation: LevelDB++'s Lazy index merges a value's fragments into one
//! list during compaction with a merge operator; our engine has no merge
//! operator yet, so fragments stay separate entries (adjacent in key order,
//! so a query reads the same blocks a merged list would occupy), and stale
//! fragments are filtered by validation instead of delete markers.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use crate::coding::{get_varint64, put_varint64};
use crate::db::Snapshot;
use crate::error::{Error, Result};
use crate::key::SeqNo;
use crate::options::Options;
use crate::WriteBatch;

use super::strategy::{self, Cand, Check, Counters, Current, Extract, Query, Strategy};
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

fn decode_list(mut b: &[u8]) -> Result<List> {
    let bad = || Error::corruption("posting list is malformed");
    let n = get_varint64(&mut b).ok_or_else(bad)?;
    let mut l = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        let len = get_varint64(&mut b).ok_or_else(bad)? as usize;
        if b.len() < len + 8 {
            return Err(bad());
        }
        let pk = b[..len].to_vec();
        let seq = u64::from_le_bytes(b[len..len + 8].try_into().map_err(|_| bad())?);
        b = &b[len + 8..];
        l.push((pk, seq));
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

pub(crate) struct Posting {
    ty: KeyType,
    eager: bool,
    tree: IndexTree,
    counters: Counters,
}

impl Posting {
    pub fn open(
        dir: &std::path::Path,
        ty: KeyType,
        eager: bool,
        params: &[(String, String)],
        opts: &Options,
    ) -> Result<Posting> {
        strategy::no_params(
            if eager {
                "posting-eager"
            } else {
                "posting-lazy"
            },
            params,
        )?;
        Ok(Posting {
            ty,
            eager,
            tree: IndexTree::open(dir.join("tree"), opts.clone())?,
            counters: Counters::default(),
        })
    }

    fn apply_eager(
        &self,
        ops: &[OpRef<'_>],
        current: &Current<'_>,
        extract: Extract<'_>,
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
                    Some(Some((_, raw))) => Some(extract(raw)),
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
            let new_attr = new.and_then(extract);
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

    /// Eager: the candidates of every posting list in the predicate's key
    /// ranges.
    fn scan_lists(&self, snap: &Snapshot, q: &Query<'_>) -> Result<Vec<Cand>> {
        let glen = geometry_len(self.ty);
        let mut out = Vec::new();
        for (from, to) in tree::key_ranges(q.pred, self.tree.extent()) {
            for kv in snap.iter(Some(&from), to.as_deref())? {
                let (k, v) = kv?;
                if tree::is_meta(&k) {
                    continue;
                }
                let sk = tree::sort_key_len(self.ty, &k)?;
                if k.len() != sk + glen {
                    return Err(Error::corruption("posting list key is malformed"));
                }
                if tree::entry_matches(self.ty, q.pred, &k[sk..])? {
                    out.extend(
                        decode_list(&v)?
                            .into_iter()
                            .filter(|(_, s)| *s <= q.snapshot),
                    );
                }
            }
        }
        Ok(out)
    }

    /// Lazy: the matching fragments in key order (for one value, newest
    /// first), read on demand so a top-K lookup stops early.
    fn fragments<'a>(
        &'a self,
        snap: &'a Snapshot,
        q: &'a Query<'_>,
    ) -> impl Iterator<Item = Result<Cand>> + 'a {
        tree::key_ranges(q.pred, self.tree.extent())
            .into_iter()
            .flat_map(
                move |(from, to)| match snap.iter(Some(&from), to.as_deref()) {
                    Ok(it) => Box::new(it) as Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>>,
                    Err(e) => Box::new(std::iter::once(Err(e))),
                },
            )
            .filter_map(move |kv| {
                let fragment = || -> Result<Option<Cand>> {
                    let (k, v) = kv?;
                    if tree::is_meta(&k) {
                        return Ok(None);
                    }
                    let sk = tree::sort_key_len(self.ty, &k)?;
                    if k.len() < sk + 8 {
                        return Err(Error::corruption("posting fragment key is malformed"));
                    }
                    let seq = tree::read_seq(&k[sk..sk + 8], true)?;
                    if seq > q.snapshot || !tree::entry_matches(self.ty, q.pred, &v)? {
                        return Ok(None);
                    }
                    Ok(Some((k[sk + 8..].to_vec(), seq)))
                };
                fragment().transpose()
            })
    }
}

impl Strategy for Posting {
    fn needs_current(&self) -> bool {
        self.eager
    }

    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, extract: Extract<'_>) -> Result<()> {
        if self.eager {
            return self.apply_eager(ops, current, extract);
        }
        let mut batch = WriteBatch::new();
        let mut added = 0;
        for &(seq, key, new) in ops {
            if let Some(v) = new.and_then(extract) {
                self.tree.note_extent(&v, &mut batch);
                let mut k = tree::sort_key(&v);
                k.extend_from_slice(&tree::seq_bytes(seq, true));
                k.extend_from_slice(key);
                batch.put(&k, &tree::geometry(&v));
                added += 1;
            }
        }
        self.tree.write(batch)?;
        self.counters.add_entries(added, 0);
        Ok(())
    }

    fn trees(&self) -> Vec<&IndexTree> {
        vec![&self.tree]
    }

    fn query(
        &self,
        pinned: &[Snapshot],
        q: &Query<'_>,
        profile: &mut QueryProfile,
    ) -> Result<Vec<Hit>> {
        let snap = strategy::main_view(pinned, "posting")?;
        let before = self.tree.blocks_read();
        let hits = if self.eager {
            let cands = self.scan_lists(snap, q)?;
            strategy::resolve(cands, q, &Check::Exact, &self.counters, profile)?.0
        } else {
            // A scalar lookup with a limit reads fragments (newest first)
            // in growing rounds from one iterator, until K are valid.
            let early = matches!(q.pred, Predicate::Eq(_)) && !self.ty.is_spatial();
            let mut it = self.fragments(snap, q);
            match (early, q.opts.limit) {
                (true, Some(k)) => {
                    let mut hits: Vec<Hit> = Vec::new();
                    let mut round = (2 * k).max(32);
                    loop {
                        let cands: Vec<Cand> = it.by_ref().take(round).collect::<Result<_>>()?;
                        let exhausted = cands.len() < round;
                        let sub = Query {
                            pred: q.pred,
                            opts: q.opts.limit(k - hits.len()),
                            view: q.view,
                            snapshot: q.snapshot,
                        };
                        let (more, _) = strategy::resolve(
                            cands,
                            &sub,
                            &Check::Direct,
                            &self.counters,
                            profile,
                        )?;
                        hits.extend(more);
                        if hits.len() >= k || exhausted {
                            break hits;
                        }
                        round *= 2;
                    }
                }
                _ => {
                    let cands: Vec<Cand> = it.collect::<Result<_>>()?;
                    strategy::resolve(cands, q, &Check::Direct, &self.counters, profile)?.0
                }
            }
        };
        profile.index_blocks_read += self.tree.blocks_read().saturating_sub(before);
        Ok(hits)
    }

    fn clear(&self) -> Result<()> {
        self.counters.entries.store(0, Relaxed);
        self.tree.clear()
    }

    fn stats(&self, s: &mut IndexStats) {
        self.counters.fill(s);
        s.disk_bytes = self.tree.disk_bytes();
    }
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
    }
}
