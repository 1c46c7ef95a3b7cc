//! What every layer of the framework knows of a live index: its id, its
//! spec, its attribute extraction and its counters ([`IndexMeta`]). The
//! definition with its strategy and state is `manager::IndexDef`.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde_json::Value;

use super::value::{self, IndexValue, Skip};
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
    pub counters: DefCounters,
}

/// A record's JSON parse: `Err` for a malformed document.
pub(crate) type Doc = std::result::Result<Value, ()>;

impl IndexMeta {
    pub fn needs_json(&self) -> bool {
        self.custom.is_none()
    }

    /// The attribute of `raw` (with `doc` its JSON parse, done once per
    /// record by the caller when any index needs it).
    pub fn extract(&self, raw: &[u8], doc: Option<&Doc>) -> std::result::Result<IndexValue, Skip> {
        if let Some(f) = &self.custom {
            return match f(raw) {
                Some(v) if v.key_type() == self.spec.key_type => Ok(v),
                Some(_) => Err(Skip::WrongType),
                None => Err(Skip::Missing),
            };
        }
        match doc {
            Some(Ok(d)) => value::extract(d, &self.path, self.spec.key_type),
            _ => Err(Skip::Malformed),
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

    /// [`IndexDef::extract`], counting the write as indexed or skipped.
    pub fn extract_counted(&self, raw: &[u8], doc: Option<&Doc>) -> Option<IndexValue> {
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

/// Parses `raw` as JSON once for all of `defs`, if any of them extracts
/// from JSON (a registered function does not need it). `Some(Err)` marks a
/// malformed document.
pub(crate) fn parse_doc<'a>(
    raw: &[u8],
    mut defs: impl Iterator<Item = &'a IndexMeta>,
) -> Option<Doc> {
    defs.any(|d| d.needs_json())
        .then(|| serde_json::from_slice::<Value>(raw).map_err(|_| ()))
}

/// JSON parses of the records of one batch, shared by every index that
/// maintains itself from the batch, so that each record is parsed at most
/// once. One slot per distinct record (by address and length), made when
/// the batch is handed over and filled on first use; a record from outside
/// the batch is parsed on its own. Valid only while the records it was made
/// from are borrowed (one `apply` round).
#[derive(Default)]
pub(crate) struct DocCache {
    /// Sorted by key.
    slots: Vec<((usize, usize), OnceCell<Doc>)>,
}

fn addr(raw: &[u8]) -> (usize, usize) {
    (raw.as_ptr() as usize, raw.len())
}

impl DocCache {
    /// Slots for `records`.
    pub fn new<'a>(records: impl Iterator<Item = &'a [u8]>) -> DocCache {
        let mut slots: Vec<((usize, usize), OnceCell<Doc>)> =
            records.map(|r| (addr(r), OnceCell::new())).collect();
        slots.sort_unstable_by_key(|(k, _)| *k);
        slots.dedup_by_key(|(k, _)| *k);
        DocCache { slots }
    }

    /// The parse of `raw`, if it is one of the cache's records.
    fn get(&self, raw: &[u8]) -> Option<&Doc> {
        let key = addr(raw);
        let i = self.slots.binary_search_by_key(&key, |(k, _)| *k).ok()?;
        let (_, cell) = self.slots.get(i)?;
        Some(cell.get_or_init(|| serde_json::from_slice::<Value>(raw).map_err(|_| ())))
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
    fn with_doc<R>(&self, raw: &[u8], f: impl FnOnce(Option<&Doc>) -> R) -> R {
        if !self.def.needs_json() {
            return f(None);
        }
        match self.docs.get(raw) {
            Some(d) => f(Some(d)),
            None => f(Some(&serde_json::from_slice::<Value>(raw).map_err(|_| ()))),
        }
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
