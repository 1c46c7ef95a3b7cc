//! Composite-key secondary indexes on a plain key-value store: the design a
//! user of fjall or RocksDB writes by hand, shared by both peers.
//!
//! Layout (one namespace, i.e. fjall keyspace or RocksDB column family,
//! each):
//! * records: `pk → seq ‖ doc` (`seq` 8 bytes big-endian);
//! * one index per [`IndexDecl`]: `prefix ‖ pk → seq [‖ coordinates]`,
//!   where `prefix` is 8 big-endian bytes: the order-preserving encoding of
//!   an `i64` / `f64` ([`crate::encode`]) or the Hilbert key of a point or
//!   of a rectangle's centre ([`crate::curve`]); spatial entries carry the
//!   exact coordinates (little-endian `f64`s) so that candidates are
//!   filtered without fetching the record;
//! * meta: `seq` (the write counter, see below) and `ext/<index>` (largest
//!   half-extents of a rect index, written in the batch that grows them).
//!
//! Maintenance is synchronous ("sync" composite index): a put reads the
//! old record first, and one atomic batch writes the record, deletes the
//! old index entries whose key changed and inserts the new ones. Indexes
//! are therefore exact and a query needs no validation; it scans the key
//! range(s), keeps the `(seq, pk)` of matching entries, picks the newest
//! `top_k` by `seq`, and fetches those records in one batched read sorted
//! by key.
//!
//! `seq` counts puts (newest first = order of put calls). Writing it with
//! every put would add a hot key to every batch, and recomputing it as
//! `max(seq)` needs a full scan of the records at every open (which also
//! warms the caches before "cold" queries). So the counter lives in memory
//! and is stored only at close, as a clean-shutdown marker that the first
//! write after an open deletes (in the same batch); an open that finds no
//! marker (first open, or after a crash) scans the records for `max(seq)`.

use std::path::{Path, PathBuf};

use strata_bench::queries::Query;
use strata_bench::system::{
    dir_bytes, AttrType, BenchSystem, IndexDecl, QueryStats, Sizes, SysResult, SystemOptions,
};

use crate::attr::{self, Attr, Pred};
use crate::encode::{be_u64, f64_to_ordered, i64_to_ordered, ordered_to_f64, ordered_to_i64};
use crate::{curve, Record};

/// The namespace a key lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Records,
    Meta,
    /// The index at this position of the declared indexes.
    Index(usize),
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put(Space, Vec<u8>, Vec<u8>),
    Delete(Space, Vec<u8>),
}

/// Visitor of `(key, value)` pairs during scans.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> SysResult<()> + 'a;

/// What a key-value store provides to [`KvPeer`]. Implementation detail of
/// the fjall and RocksDB peers; public only because [`KvPeer`] is.
pub trait Backend: Sized {
    /// Label used in results.
    const NAME: &'static str;
    /// Opens (creating if needed) the store in `dir` with a namespace per
    /// index, named after [`space_name`].
    fn open(dir: &Path, indexes: &[IndexDecl], opts: &SystemOptions) -> SysResult<Self>;
    fn get(&self, space: Space, key: &[u8]) -> SysResult<Option<Vec<u8>>>;
    /// Applies `ops` atomically, in order.
    fn write(&mut self, ops: Vec<Op>) -> SysResult<()>;
    /// Calls `f(key, value)` for the entries of index `index` with
    /// `start <= key < end` (no `end`: to the last key), in key order.
    fn scan(
        &self,
        index: usize,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut Visit<'_>,
    ) -> SysResult<()>;
    /// Calls `f(key, value)` for every record.
    fn scan_records(&self, f: &mut Visit<'_>) -> SysResult<()>;
    /// The records of `keys` (sorted, distinct), in the same order.
    fn multi_get(&self, keys: &[&[u8]]) -> SysResult<Vec<Option<Vec<u8>>>>;
    /// Durable writes, flushed memtables, no compaction running.
    fn settle(&mut self) -> SysResult<()>;
    /// Called at the start of every query (e.g. to enable per-thread
    /// counters).
    fn begin_query(&self) {}
    /// A cumulative count of blocks fetched while reading `space`, if the
    /// store reports one; queries report differences.
    fn blocks(&self, space: Space) -> Option<u64>;
    /// Bytes of the database in `dir` on disk.
    fn db_bytes(&self, dir: &Path) -> u64 {
        dir_bytes(dir)
    }
    /// Bytes of the index namespaces on disk, if known.
    fn index_bytes(&self) -> SysResult<Option<u64>>;
    /// Write amplification since open given the user bytes written, if known.
    fn write_amplification(&self, user_bytes: u64) -> SysResult<Option<f64>>;
}

/// The name of a namespace (fjall keyspace, RocksDB column family).
pub fn space_name(indexes: &[IndexDecl], space: Space) -> String {
    match space {
        Space::Records => "records".to_string(),
        Space::Meta => "meta".to_string(),
        Space::Index(i) => match indexes.get(i) {
            Some(d) => format!("idx.{}", d.name),
            None => format!("idx#{i}"),
        },
    }
}

const SEQ_KEY: &[u8] = b"seq";

fn ext_key(decl: &IndexDecl) -> Vec<u8> {
    format!("ext/{}", decl.name).into_bytes()
}

/// `seq ‖ doc` of a stored record.
fn split_record(v: &[u8]) -> SysResult<(u64, &[u8])> {
    match (be_u64(v), v.get(8..)) {
        (Some(seq), Some(doc)) => Ok((seq, doc)),
        _ => Err(format!(
            "corrupt record value of {} bytes (no seq)",
            v.len()
        )),
    }
}

fn attr_prefix(a: &Attr) -> u64 {
    match a {
        Attr::I64(v) => i64_to_ordered(*v),
        Attr::F64(v) => f64_to_ordered(*v),
        Attr::Point([x, y]) => curve::point_key(*x, *y),
        Attr::Rect(r) => curve::rect_key(r),
    }
}

fn index_key(a: &Attr, pk: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + pk.len());
    k.extend_from_slice(&attr_prefix(a).to_be_bytes());
    k.extend_from_slice(pk);
    k
}

fn index_value(a: &Attr, seq: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(40);
    v.extend_from_slice(&seq.to_be_bytes());
    let coords: &[f64] = match a {
        Attr::Point(p) => p,
        Attr::Rect(r) => r,
        Attr::I64(_) | Attr::F64(_) => &[],
    };
    for c in coords {
        v.extend_from_slice(&c.to_le_bytes());
    }
    v
}

/// `(seq, attribute, pk)` of an index entry.
fn decode_entry<'a>(ty: AttrType, k: &'a [u8], v: &[u8]) -> SysResult<(u64, Attr, &'a [u8])> {
    let bad = || {
        format!(
            "corrupt {ty:?} index entry: key {k:?}, value of {} bytes",
            v.len()
        )
    };
    let prefix = be_u64(k).ok_or_else(bad)?;
    let pk = k.get(8..).ok_or_else(bad)?;
    let seq = be_u64(v).ok_or_else(bad)?;
    let coord = |i: usize| -> SysResult<f64> {
        let b: [u8; 8] = v
            .get(8 + 8 * i..16 + 8 * i)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(bad)?;
        Ok(f64::from_le_bytes(b))
    };
    let a = match ty {
        AttrType::I64 => Attr::I64(ordered_to_i64(prefix)),
        AttrType::F64 => Attr::F64(ordered_to_f64(prefix)),
        AttrType::Point => Attr::Point([coord(0)?, coord(1)?]),
        AttrType::Rect => Attr::Rect([coord(0)?, coord(1)?, coord(2)?, coord(3)?]),
    };
    Ok((seq, a, pk))
}

fn decode_ext(v: &[u8]) -> SysResult<(f64, f64)> {
    let f = |i: usize| -> Option<f64> {
        Some(f64::from_le_bytes(
            v.get(8 * i..8 * i + 8)?.try_into().ok()?,
        ))
    };
    match (f(0), f(1)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(format!("corrupt extent entry of {} bytes", v.len())),
    }
}

/// A key-value store with composite-key secondary indexes.
pub struct KvPeer<B: Backend> {
    dir: PathBuf,
    indexes: Vec<IndexDecl>,
    opts: SystemOptions,
    db: Option<B>,
    /// The last `seq` given to a put.
    seq: u64,
    /// True while the clean-close marker (`meta/seq`) is stored.
    marker: bool,
    /// Per index: largest half-extents of the rectangles ever indexed.
    ext: Vec<(f64, f64)>,
    /// Key and value bytes of puts and deletes since open.
    user_bytes: u64,
}

impl<B: Backend> KvPeer<B> {
    /// Opens (creating if needed) the peer in `dir`.
    pub fn open(dir: &Path, indexes: &[IndexDecl], opts: &SystemOptions) -> SysResult<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: creating {}: {e}", B::NAME, dir.display()))?;
        let db = B::open(dir, indexes, opts)?;
        let mut p = KvPeer {
            dir: dir.to_path_buf(),
            indexes: indexes.to_vec(),
            opts: opts.clone(),
            db: Some(db),
            seq: 0,
            marker: false,
            ext: vec![(0.0, 0.0); indexes.len()],
            user_bytes: 0,
        };
        p.recover()?;
        Ok(p)
    }

    fn db(&self) -> SysResult<&B> {
        self.db
            .as_ref()
            .ok_or_else(|| format!("{}: database is closed (a reopen failed)", B::NAME))
    }

    fn db_mut(&mut self) -> SysResult<&mut B> {
        self.db
            .as_mut()
            .ok_or_else(|| format!("{}: database is closed (a reopen failed)", B::NAME))
    }

    /// Restores `seq` (from the marker, else by a scan) and the extents.
    fn recover(&mut self) -> SysResult<()> {
        let db = self.db()?;
        let (seq, marker) = match db.get(Space::Meta, SEQ_KEY)? {
            Some(v) => {
                let seq = be_u64(&v).ok_or_else(|| {
                    format!("{}: corrupt seq marker of {} bytes", B::NAME, v.len())
                })?;
                (seq, true)
            }
            None => {
                let mut max = 0;
                db.scan_records(&mut |_, v| {
                    max = max.max(split_record(v)?.0);
                    Ok(())
                })?;
                (max, false)
            }
        };
        let mut ext = vec![(0.0, 0.0); self.indexes.len()];
        for (e, d) in ext.iter_mut().zip(&self.indexes) {
            if d.ty == AttrType::Rect {
                if let Some(v) = db.get(Space::Meta, &ext_key(d))? {
                    *e = decode_ext(&v)
                        .map_err(|m| format!("{}: index {}: {m}", B::NAME, d.name))?;
                }
            }
        }
        self.seq = seq;
        self.marker = marker;
        self.ext = ext;
        Ok(())
    }

    /// Stores the marker and closes the store.
    fn close(&mut self) -> SysResult<()> {
        if !self.marker {
            let seq = self.seq;
            self.db_mut()?.write(vec![Op::Put(
                Space::Meta,
                SEQ_KEY.to_vec(),
                seq.to_be_bytes().to_vec(),
            )])?;
            self.marker = true;
        }
        self.db = None;
        Ok(())
    }

    /// Closes without storing the marker and reopens, so that `seq` is
    /// recovered by scanning as after a crash (for tests).
    #[doc(hidden)]
    pub fn reopen_as_after_crash(&mut self) -> SysResult<()> {
        if self.marker {
            self.db_mut()?
                .write(vec![Op::Delete(Space::Meta, SEQ_KEY.to_vec())])?;
            self.marker = false;
        }
        self.db = None;
        self.db = Some(B::open(&self.dir, &self.indexes, &self.opts)?);
        self.user_bytes = 0;
        self.recover()
    }

    fn old_attrs(&self, key: &[u8]) -> SysResult<Option<Vec<Option<Attr>>>> {
        Ok(match self.db()?.get(Space::Records, key)? {
            Some(v) => {
                let (_, doc) =
                    split_record(&v).map_err(|m| format!("{}: key {key:?}: {m}", B::NAME))?;
                Some(attr::extract_all(doc, &self.indexes))
            }
            None => None,
        })
    }

    fn take_marker(&mut self, ops: &mut Vec<Op>) {
        if self.marker {
            ops.push(Op::Delete(Space::Meta, SEQ_KEY.to_vec()));
            self.marker = false;
        }
    }

    /// Like [`BenchSystem::query`], returning the records (newest first).
    pub fn query_records(
        &mut self,
        index: &str,
        q: &Query,
        top_k: Option<usize>,
    ) -> SysResult<(Vec<Record>, QueryStats)> {
        let i = self
            .indexes
            .iter()
            .position(|d| d.name == index)
            .ok_or_else(|| format!("{}: no index named {index:?}", B::NAME))?;
        let ty = self.indexes[i].ty;
        let pred = Pred::new(ty, q).map_err(|m| format!("{}: {m}", B::NAME))?;
        let ranges: Vec<(u64, Option<u64>)> = match pred {
            _ if pred.is_empty() || top_k == Some(0) => Vec::new(),
            Pred::I64Range(lo, hi) => vec![(i64_to_ordered(lo), i64_to_ordered(hi).checked_add(1))],
            Pred::F64Range(lo, hi) => vec![(f64_to_ordered(lo), f64_to_ordered(hi).checked_add(1))],
            Pred::Window(w) => {
                let w = if ty == AttrType::Rect {
                    curve::widen(&w, self.ext[i])
                } else {
                    w
                };
                curve::window_ranges(&w)
                    .into_iter()
                    .map(|(s, e)| (s, Some(e)))
                    .collect()
            }
        };
        let db = self.db()?;
        db.begin_query();

        let idx0 = db.blocks(Space::Index(i));
        let mut cands: Vec<(u64, Vec<u8>)> = Vec::new();
        for (s, e) in ranges {
            let (start, end) = (s.to_be_bytes(), e.map(u64::to_be_bytes));
            db.scan(i, &start, end.as_ref().map(|e| &e[..]), &mut |k, v| {
                let (seq, a, pk) = decode_entry(ty, k, v)?;
                if pred.matches(&a) {
                    cands.push((seq, pk.to_vec()));
                }
                Ok(())
            })
            .map_err(|m| format!("{}: index {index}: {m}", B::NAME))?;
        }
        let idx1 = db.blocks(Space::Index(i));

        // Newest first: the top_k largest seqs, then sorted.
        if let Some(k) = top_k {
            if k > 0 && cands.len() > k {
                cands.select_nth_unstable_by(k - 1, |a, b| b.0.cmp(&a.0));
            }
            cands.truncate(k);
        }
        cands.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));

        // One batched read in key order.
        let mut order: Vec<usize> = (0..cands.len()).collect();
        order.sort_unstable_by(|&a, &b| cands[a].1.cmp(&cands[b].1));
        let keys: Vec<&[u8]> = order.iter().map(|&j| cands[j].1.as_slice()).collect();
        let rec0 = db.blocks(Space::Records);
        let vals = db.multi_get(&keys)?;
        let rec1 = db.blocks(Space::Records);
        if vals.len() != keys.len() {
            return Err(format!(
                "{}: batched read returned {} values for {} keys",
                B::NAME,
                vals.len(),
                keys.len()
            ));
        }
        let mut docs: Vec<Vec<u8>> = vec![Vec::new(); cands.len()];
        for (&j, v) in order.iter().zip(vals) {
            let (want, pk) = (&cands[j].0, &cands[j].1);
            let v = v.ok_or_else(|| {
                format!(
                    "{}: index {index} lists key {pk:?}, which has no record",
                    B::NAME
                )
            })?;
            let (seq, doc) =
                split_record(&v).map_err(|m| format!("{}: key {pk:?}: {m}", B::NAME))?;
            if seq != *want {
                return Err(format!(
                    "{}: index {index} entry of key {pk:?} has seq {want}, the record {seq}",
                    B::NAME
                ));
            }
            docs[j] = doc.to_vec();
        }
        let out: Vec<Record> = cands.into_iter().map(|(_, pk)| pk).zip(docs).collect();
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        let stats = QueryStats {
            results: out.len() as u64,
            data_blocks_read: delta(rec0, rec1),
            index_blocks_read: delta(idx0, idx1),
            ..QueryStats::default()
        };
        Ok((out, stats))
    }
}

impl<B: Backend> BenchSystem for KvPeer<B> {
    fn name(&self) -> String {
        B::NAME.to_string()
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> SysResult<()> {
        let new = attr::extract_all(value, &self.indexes);
        let old = self.old_attrs(key)?;
        self.seq += 1;
        let seq = self.seq;
        let mut ops = Vec::with_capacity(2 + 2 * self.indexes.len());
        for (i, d) in self.indexes.iter().enumerate() {
            let old_key = old
                .as_ref()
                .and_then(|o| o[i].as_ref())
                .map(|a| index_key(a, key));
            let new_attr = new[i];
            let new_key = new_attr.as_ref().map(|a| index_key(a, key));
            if let Some(ok) = old_key {
                // Same key: the put below replaces it (one batch must not
                // hold a delete and a put of one key).
                if new_key.as_ref() != Some(&ok) {
                    ops.push(Op::Delete(Space::Index(i), ok));
                }
            }
            if let (Some(a), Some(nk)) = (new_attr, new_key) {
                ops.push(Op::Put(Space::Index(i), nk, index_value(&a, seq)));
                if let Attr::Rect(r) = a {
                    let (hx, hy) = curve::half_extent(&r);
                    let e = &mut self.ext[i];
                    if hx > e.0 || hy > e.1 {
                        *e = (e.0.max(hx), e.1.max(hy));
                        let mut v = e.0.to_le_bytes().to_vec();
                        v.extend_from_slice(&e.1.to_le_bytes());
                        ops.push(Op::Put(Space::Meta, ext_key(d), v));
                    }
                }
            }
        }
        let mut rec = Vec::with_capacity(8 + value.len());
        rec.extend_from_slice(&seq.to_be_bytes());
        rec.extend_from_slice(value);
        ops.push(Op::Put(Space::Records, key.to_vec(), rec));
        self.take_marker(&mut ops);
        self.db_mut()?.write(ops)?;
        self.user_bytes += (key.len() + value.len()) as u64;
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> SysResult<()> {
        self.user_bytes += key.len() as u64;
        let Some(old) = self.old_attrs(key)? else {
            return Ok(());
        };
        let mut ops = vec![Op::Delete(Space::Records, key.to_vec())];
        for (i, a) in old.iter().enumerate() {
            if let Some(a) = a {
                ops.push(Op::Delete(Space::Index(i), index_key(a, key)));
            }
        }
        self.take_marker(&mut ops);
        self.db_mut()?.write(ops)
    }

    fn get(&mut self, key: &[u8]) -> SysResult<Option<Vec<u8>>> {
        match self.db()?.get(Space::Records, key)? {
            Some(v) => {
                let (_, doc) =
                    split_record(&v).map_err(|m| format!("{}: key {key:?}: {m}", B::NAME))?;
                Ok(Some(doc.to_vec()))
            }
            None => Ok(None),
        }
    }

    fn query(&mut self, index: &str, q: &Query, top_k: Option<usize>) -> SysResult<QueryStats> {
        Ok(self.query_records(index, q, top_k)?.1)
    }

    fn settle(&mut self) -> SysResult<()> {
        self.db_mut()?.settle()
    }

    fn reopen(&mut self) -> SysResult<()> {
        self.close()?;
        self.db = Some(B::open(&self.dir, &self.indexes, &self.opts)?);
        self.user_bytes = 0;
        self.recover()
    }

    fn sizes(&mut self) -> SysResult<Sizes> {
        let db = self.db()?;
        Ok(Sizes {
            db_bytes: db.db_bytes(&self.dir),
            index_bytes: db.index_bytes()?,
            index_memory_bytes: None,
            write_amplification: db.write_amplification(self.user_bytes)?,
            write_stall_seconds: None,
        })
    }
}

impl<B: Backend> Drop for KvPeer<B> {
    fn drop(&mut self) {
        if self.db.is_some() {
            // Best effort: without the marker the next open scans.
            let _ = self.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_entries_roundtrip() {
        let cases = [
            (AttrType::I64, Attr::I64(-5)),
            (AttrType::F64, Attr::F64(2.5)),
            (AttrType::Point, Attr::Point([1.0, -2.0])),
            (AttrType::Rect, Attr::Rect([1.0, 2.0, 3.0, 4.0])),
        ];
        for (ty, a) in cases {
            let k = index_key(&a, b"pk");
            let v = index_value(&a, 77);
            let got = decode_entry(ty, &k, &v).ok();
            assert_eq!(got, Some((77, a, &b"pk"[..])));
        }
        assert!(decode_entry(AttrType::Point, b"12345678pk", &7u64.to_be_bytes()).is_err());
        assert!(split_record(b"short").is_err());
    }
}
