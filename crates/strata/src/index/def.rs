//! What every layer of the framework knows of a live index: its id, its
//! spec, its attribute extraction and its counters ([`IndexMeta`]). The
//! definition with its strategy and state is `manager::IndexDef`.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use std::sync::Arc;

use super::fields::Fields;
use super::preread::PreReads;
use super::value::{IndexValue, Skip};
use super::{ExtractorFn, IndexSpec};

/// Per-index counters (since open).
#[derive(Default)]
pub(crate) struct DefCounters {
    pub indexed: AtomicU64,
    pub missing: AtomicU64,
    pub wrong_type: AtomicU64,
    pub malformed: AtomicU64,
    pub queries: AtomicU64,
    pub validations: AtomicU64,
    pub failed: AtomicU64,
    pub exact: AtomicU64,
}

/// A live index as strategies and the memtable side see it.
pub(crate) struct IndexMeta {
    pub id: u32,
    pub spec: IndexSpec,
    /// The parsed field path (empty for a registered extractor).
    pub(super) path: Vec<String>,
    pub(super) custom: Option<ExtractorFn>,
    /// `path` alone, for reading a record for this index only.
    alone: Fields,
    pub counters: DefCounters,
}

pub(crate) use super::fields::Read;

/// A record's reading together with the fields it was read for.
#[derive(Clone, Copy)]
pub(crate) struct Doc<'a> {
    pub fields: &'a Fields,
    pub read: &'a Read,
}

impl<'a> Doc<'a> {
    /// `read` (from [`read_doc`] with `fields`) as a `Doc`.
    pub fn of(fields: &'a Fields, read: &'a Option<Read>) -> Option<Doc<'a>> {
        read.as_ref().map(|read| Doc { fields, read })
    }
}

impl IndexMeta {
    pub fn new(id: u32, spec: IndexSpec, path: Vec<String>, custom: Option<ExtractorFn>) -> Self {
        let alone = if custom.is_some() {
            Fields::new([])
        } else {
            Fields::new([path.as_slice()])
        };
        IndexMeta {
            id,
            spec,
            path,
            custom,
            alone,
            counters: DefCounters::default(),
        }
    }

    pub fn needs_json(&self) -> bool {
        self.custom.is_none()
    }

    /// The attribute of `raw`, with `doc` its reading for a field set that
    /// should include this index's path (done once per record by the
    /// caller for all its indexes); read here if not.
    pub fn extract(
        &self,
        raw: &[u8],
        doc: Option<Doc<'_>>,
    ) -> std::result::Result<IndexValue, Skip> {
        if let Some(f) = &self.custom {
            return match f(raw) {
                Some(v) if v.key_type() == self.spec.key_type => Ok(v),
                Some(_) => Err(Skip::WrongType),
                None => Err(Skip::Missing),
            };
        }
        if let Some(d) = doc {
            if let Some(slot) = d.fields.slot(&self.path) {
                return self.value_at(d.read, slot);
            }
        }
        self.value_at(&self.alone.extract(raw), 0)
    }

    /// The attribute in `read` at `slot` of the field set it was made
    /// with (this index's path there).
    pub fn value_at(&self, read: &Read, slot: usize) -> std::result::Result<IndexValue, Skip> {
        match read {
            Ok(e) => e.value(slot, self.spec.key_type),
            Err(()) => Err(Skip::Malformed),
        }
    }

    pub fn count_skip(&self, s: Skip) {
        let c = &self.counters;
        match s {
            Skip::Missing => c.missing.fetch_add(1, Relaxed),
            Skip::WrongType => c.wrong_type.fetch_add(1, Relaxed),
            Skip::Malformed => c.malformed.fetch_add(1, Relaxed),
        };
    }

    /// [`IndexMeta::extract`], counting the write as indexed or skipped.
    pub fn extract_counted(&self, raw: &[u8], doc: Option<Doc<'_>>) -> Option<IndexValue> {
        match self.extract(raw, doc) {
            Ok(v) => {
                self.counters.indexed.fetch_add(1, Relaxed);
                Some(v)
            }
            Err(s) => {
                self.count_skip(s);
                None
            }
        }
    }
}

/// The field paths of those of `defs` that extract from JSON (a
/// registered function does not need it).
pub(crate) fn fields_of<'a>(defs: impl Iterator<Item = &'a IndexMeta>) -> Fields {
    let paths: Vec<&'a [String]> = defs
        .filter(|d| d.needs_json())
        .map(|d| d.path.as_slice())
        .collect();
    Fields::new(paths)
}

/// Reads `raw` once for all of `fields`' paths; `None` when no path is
/// wanted (see [`Doc::of`]).
pub(crate) fn read_doc(raw: &[u8], fields: &Fields) -> Option<Read> {
    (!fields.is_empty()).then(|| fields.extract(raw))
}

/// Readings of the records of one batch, shared by every index that
/// maintains itself from the batch, so that each record is read at most
/// once. One slot per distinct record (by address and length), made when
/// the batch is handed over and filled on first use; a record from outside
/// the batch is read on its own. Valid only while the records it was made
/// from are borrowed (one `apply` round).
pub(crate) struct DocCache {
    fields: Arc<Fields>,
    /// Sorted by key, no key twice.
    slots: Slots,
}

/// A [`DocCache`]'s slots: up to two inline (a one-record batch and the
/// record it replaces, the common case: no allocation a write), more in a
/// vector. (The inline variant is the larger on purpose: a cache lives on
/// the writer's stack for one batch.)
#[allow(clippy::large_enum_variant)]
enum Slots {
    Inline(usize, [DocSlot; 2]),
    Heap(Vec<DocSlot>),
}

impl Slots {
    fn as_slice(&self) -> &[DocSlot] {
        match self {
            Slots::Inline(n, a) => a.get(..*n).unwrap_or_default(),
            Slots::Heap(v) => v,
        }
    }

    fn push(&mut self, slot: DocSlot) {
        match self {
            Slots::Inline(n, a) if *n < a.len() => {
                if let Some(s) = a.get_mut(*n) {
                    *s = slot;
                }
                *n += 1;
            }
            Slots::Inline(_, a) => {
                let mut v = Vec::with_capacity(4);
                v.extend(std::mem::replace(a, [empty_slot(), empty_slot()]));
                v.push(slot);
                *self = Slots::Heap(v);
            }
            Slots::Heap(v) => v.push(slot),
        }
    }

    /// Sorts by key and drops repeated keys (the first kept).
    fn sort_dedup(&mut self) {
        match self {
            Slots::Inline(n, a) => {
                if *n == 2 {
                    let [x, y] = a;
                    if y.0 < x.0 {
                        std::mem::swap(x, y);
                    } else if y.0 == x.0 {
                        *n = 1;
                    }
                }
            }
            Slots::Heap(v) => {
                v.sort_by_key(|(k, _, _)| *k);
                v.dedup_by_key(|(k, _, _)| *k);
            }
        }
    }
}

fn empty_slot() -> DocSlot {
    ((0, 0), OnceCell::new(), None)
}

/// A record's address and length, its reading once made, and the fields
/// it was made with when not the cache's (a loader's, `index::preread`).
type DocSlot = ((usize, usize), OnceCell<Read>, Option<Arc<Fields>>);

fn addr(raw: &[u8]) -> (usize, usize) {
    (raw.as_ptr() as usize, raw.len())
}

impl DocCache {
    /// Slots for a batch's `written` records and the `old` records they
    /// replace, read for `fields`; written records a loader read before
    /// its write (`pre`, asked in batch order) hold that reading.
    pub fn new<'a>(
        fields: Arc<Fields>,
        written: impl Iterator<Item = &'a [u8]>,
        old: impl Iterator<Item = &'a [u8]>,
        pre: Option<&PreReads>,
    ) -> DocCache {
        // (A larger batch's vector allocated once: at most one slot a
        // written record, then doubling for the replaced ones.)
        let hint = written
            .size_hint()
            .1
            .unwrap_or(0)
            .saturating_add(old.size_hint().0);
        let mut slots = if hint > 2 {
            Slots::Heap(Vec::with_capacity(hint))
        } else {
            Slots::Inline(0, [empty_slot(), empty_slot()])
        };
        for r in written {
            slots.push(match pre.and_then(|p| p.copy(r)) {
                Some((f, read)) => (addr(r), OnceCell::from(read), Some(f)),
                None => (addr(r), OnceCell::new(), None),
            });
        }
        for r in old {
            slots.push((addr(r), OnceCell::new(), None));
        }
        slots.sort_dedup();
        DocCache { fields, slots }
    }

    /// The reading of `raw`, if it is one of the cache's records.
    fn get(&self, raw: &[u8]) -> Option<Doc<'_>> {
        let key = addr(raw);
        let slots = self.slots.as_slice();
        let i = slots.binary_search_by_key(&key, |(k, _, _)| *k).ok()?;
        let (_, cell, own) = slots.get(i)?;
        let read = cell.get_or_init(|| self.fields.extract(raw));
        Some(Doc {
            fields: own.as_deref().unwrap_or(&self.fields),
            read,
        })
    }
}

/// Attribute extraction for one index during one batch (see
/// [`IndexStrategy::apply`]).
pub(crate) struct Attrs<'a> {
    pub def: &'a IndexMeta,
    pub docs: &'a DocCache,
    /// False during a build over existing data: records are not counted as
    /// indexed or skipped writes.
    pub count: bool,
}

impl Attrs<'_> {
    /// Runs `f` with the parse of `raw` (from the batch's cache, or parsed
    /// here for a record from elsewhere); `None` for an index that does not
    /// read JSON.
    fn with_doc<R>(&self, raw: &[u8], f: impl FnOnce(Option<Doc<'_>>) -> R) -> R {
        if !self.def.needs_json() {
            return f(None);
        }
        // A record from outside the batch: read alone by `extract`.
        f(self.docs.get(raw))
    }

    /// The attribute of `raw`, not counted (an old record's).
    pub fn get(&self, raw: &[u8]) -> std::result::Result<IndexValue, Skip> {
        self.with_doc(raw, |doc| self.def.extract(raw, doc))
    }

    /// The attribute of a record being written, counted as indexed or
    /// skipped (unless [`Attrs::count`] is false).
    pub fn counted(&self, raw: &[u8]) -> Option<IndexValue> {
        self.with_doc(raw, |doc| {
            if self.count {
                self.def.extract_counted(raw, doc)
            } else {
                self.def.extract(raw, doc).ok()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::value::KeyType;

    /// `n` records `{"n": i}`, each in a buffer of its own.
    fn records(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!(r#"{{"n": {i}}}"#).into_bytes())
            .collect()
    }

    #[test]
    fn doc_cache_reads_each_of_its_records_once_and_no_other() {
        let path = vec!["n".to_string()];
        let fields = Arc::new(Fields::new([path.as_slice()]));
        let slot = fields.slot(&path).unwrap();
        let recs = records(7);
        let outside = records(1);
        // Written and replaced records in every split, repeats included
        // (the same bytes listed twice): inline up to two, then a vector.
        for written in 0..=4usize {
            for old in 0..=3usize {
                let w: Vec<&[u8]> = recs.iter().take(written).map(Vec::as_slice).collect();
                // Replaced records: the next ones, and the first written
                // one again when there is one.
                let mut o: Vec<&[u8]> = recs
                    .iter()
                    .skip(written)
                    .take(old)
                    .map(Vec::as_slice)
                    .collect();
                if let (Some(first), true) = (w.first(), old > 0) {
                    o[0] = first;
                }
                let cache =
                    DocCache::new(fields.clone(), w.iter().copied(), o.iter().copied(), None);
                let listed: Vec<&[u8]> = w.iter().chain(&o).copied().collect();
                for (i, r) in recs.iter().enumerate() {
                    let got = cache.get(r);
                    if listed.iter().any(|l| l.as_ptr() == r.as_ptr()) {
                        let doc = got.unwrap_or_else(|| panic!("record {i} of {written}+{old}"));
                        let v = doc.read.as_ref().unwrap().value(slot, KeyType::I64);
                        assert_eq!(v, Ok(IndexValue::I64(i as i64)));
                        // The same reading on a second ask.
                        let again = cache.get(r).unwrap();
                        assert!(std::ptr::eq(doc.read, again.read));
                    } else {
                        assert!(got.is_none(), "record {i} of {written}+{old}");
                    }
                }
                // Equal bytes elsewhere are not the cache's record.
                assert!(cache.get(&outside[0]).is_none());
                let distinct = cache.slots.as_slice();
                assert!(distinct.windows(2).all(|p| p[0].0 < p[1].0));
            }
        }
    }
}
