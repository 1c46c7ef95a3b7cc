//! The `Db` side of secondary indexes: creating and dropping indexes,
//! queries, and checking an index against a full scan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::hooks::InstallReason;
use crate::index::strategy::BuildMethod;
use crate::index::{
    self, Hit, IndexInfo, IndexSpec, IndexValue, Predicate, QueryOptions, QueryProfile, QueryView,
};
use crate::key::SeqNo;
use crate::version::VersionEdit;

use super::{lock, Db, DbInner};

/// What [`Db::check_index`] found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IndexCheck {
    pub index: String,
    /// Records whose attribute the index should find (by a full scan).
    pub expected: usize,
    /// Records the index returned.
    pub found: usize,
    /// Keys the index missed, and keys it returned wrongly (or with a
    /// wrong value), at most 100 each.
    pub missing: Vec<String>,
    pub extra: Vec<String>,
}

impl IndexCheck {
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.expected == self.found
    }
}

impl DbInner {
    /// Writes an index payload to the MANIFEST (durable on return).
    fn log_index_payload(&self, payload: Vec<u8>) -> Result<()> {
        let edit = VersionEdit {
            ext_payloads: vec![(index::HOOK_NAME.to_string(), payload)],
            ..VersionEdit::default()
        };
        self.install(edit, InstallReason::External, |_| {})?;
        Ok(())
    }
}

impl Db {
    /// Creates a secondary index and builds it over the existing data.
    /// Returns when the index is ready; meanwhile it is listed as
    /// `building` and queries on it fail. The definition is durable: a
    /// reopen restores it (and finishes an interrupted build).
    pub fn create_index(&self, spec: IndexSpec) -> Result<()> {
        let inner = &self.inner;
        let (def, payload) = inner.index.begin_create(spec)?;
        {
            // Writes from now on are indexed in the active memtable too.
            let st = lock(&inner.state);
            inner.index.attach(&def, &st.mem);
        }
        if let Err(e) = inner.log_index_payload(payload) {
            let _ = inner.index.drop_def(&def.spec.name);
            return Err(e);
        }
        self.build_index(&def.spec.name)
    }

    /// Logs a definition in state `building` without building it, as a
    /// crash in the middle of [`Db::create_index`] would leave it. For tests
    /// of the resume path.
    #[doc(hidden)]
    pub fn begin_index_for_tests(&self, spec: IndexSpec) -> Result<()> {
        let (_, payload) = self.inner.index.begin_create(spec)?;
        self.inner.log_index_payload(payload)
    }

    /// Brings the index named `name` over the existing data. NEXT: flushes
    /// (so the memtable's older entries reach tables built with the index)
    /// and rewrites every table, which also leaves each key with one version
    /// so the update memo starts exact. `memory`: one scan of the latest
    /// data with writes paused (writes maintain the index from then on).
    fn build_index(&self, name: &str) -> Result<()> {
        let inner = &self.inner;
        let def = inner
            .index
            .def(name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        if def.is_ready() {
            return Ok(());
        }
        match def.strategy.build_method() {
            BuildMethod::Scan => inner.scan_build(std::slice::from_ref(&def))?,
            BuildMethod::RewriteTables => {
                self.compact_range(None, None)?;
                let v = lock(&inner.versions).current();
                if !inner.index.covers(&def, &v) {
                    return Err(Error::Background(format!(
                        "index {name:?} does not cover every table after its build"
                    )));
                }
            }
        }
        inner.log_index_payload(index::IndexManager::ready_payload(&def))?;
        inner.index.mark_ready(&def);
        Ok(())
    }

    /// Finishes the builds a crash interrupted (called by `open`).
    pub(crate) fn resume_index_builds(&self) -> Result<()> {
        for d in self.inner.index.defs() {
            if !d.is_ready() {
                self.build_index(&d.spec.name)?;
            }
        }
        Ok(())
    }

    /// Removes an index and its definition. Its blocks in existing tables
    /// are ignored and disappear as tables are rewritten.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        let payload = self.inner.index.drop_def(name)?;
        self.inner.log_index_payload(payload)
    }

    /// Every index with its state and statistics.
    pub fn indexes(&self) -> Vec<IndexInfo> {
        let v = lock(&self.inner.state).current.clone();
        self.inner.index.infos(&v)
    }

    /// Update-memo size: (entries, bytes).
    pub fn memo_stats(&self) -> (usize, usize) {
        self.inner.index.memo_stats()
    }

    /// Records of index `index` satisfying `pred`, newest first.
    pub fn query(&self, index: &str, pred: &Predicate, opts: QueryOptions) -> Result<Vec<Hit>> {
        Ok(self.query_profiled(index, pred, opts)?.0)
    }

    /// [`Db::query`], also returning what the query read.
    pub fn query_profiled(
        &self,
        index: &str,
        pred: &Predicate,
        opts: QueryOptions,
    ) -> Result<(Vec<Hit>, QueryProfile)> {
        let inner = &self.inner;
        // Pinned first, then the components: every version the snapshot
        // sees is in them, and no compaction drops one until `pinned` goes.
        let pinned = self.snapshot();
        let snapshot = pinned.sequence();
        let (mems, version) = inner.read_view();
        let pause = lock(&inner.query_pause).clone();
        let pin_latest = || self.snapshot();
        let fetch = |keys: &[&[u8]], at: SeqNo| inner.multi_get_found(keys, at);
        let data_blocks_read = || {
            let d = inner.counters.snapshot().data_blocks;
            d.disk + d.cache
        };
        let view = QueryView {
            mems,
            version,
            snapshot,
            tables: &inner.tables,
            pin_latest: &pin_latest,
            fetch: &fetch,
            data_blocks_read: &data_blocks_read,
            pause: pause.as_deref(),
        };
        let mut profile = QueryProfile::default();
        let hits = inner.index.query(index, pred, opts, &view, &mut profile)?;
        drop(pinned);
        Ok((hits, profile))
    }

    /// Installs (or with `None` removes) a hook that every index query runs
    /// once it has pinned what it reads and before it validates a
    /// candidate: tests use it to write, flush and compact in the middle
    /// of a query. The hook runs on the querying thread with no lock held.
    #[cfg(feature = "testing")]
    pub fn set_query_pause_hook(&self, hook: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        *lock(&self.inner.query_pause) = hook;
    }

    /// Records whose attribute equals `value`.
    pub fn lookup(&self, index: &str, value: IndexValue, opts: QueryOptions) -> Result<Vec<Hit>> {
        self.query(index, &Predicate::Eq(value), opts)
    }

    /// Records whose attribute is in `[lo, hi]`.
    pub fn range(
        &self,
        index: &str,
        lo: IndexValue,
        hi: IndexValue,
        opts: QueryOptions,
    ) -> Result<Vec<Hit>> {
        self.query(index, &Predicate::Range(lo, hi), opts)
    }

    /// Records whose point lies in, or rectangle intersects, `rect`.
    pub fn within(&self, index: &str, rect: [f64; 4], opts: QueryOptions) -> Result<Vec<Hit>> {
        self.query(index, &Predicate::Within(rect), opts)
    }

    /// Compares index `name` with a full scan of the primary data.
    pub fn check_index(&self, name: &str) -> Result<IndexCheck> {
        let info = self
            .indexes()
            .into_iter()
            .find(|i| i.spec.name == name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        let ty = info.spec.key_type;
        let path = match &info.spec.extractor {
            index::Extractor::Field(p) => index::value::parse_path(p)?,
            index::Extractor::Custom(_) => {
                return Err(Error::invalid("check supports field indexes only"))
            }
        };
        let snap = self.snapshot();
        let mut expected: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut max_str = String::new();
        for kv in snap.iter(None, None)? {
            let (k, v) = kv?;
            let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&v) else {
                continue;
            };
            if let Ok(val) = index::value::extract(&doc, &path, ty) {
                if let IndexValue::Str(s) = &val {
                    if *s > max_str {
                        max_str = s.clone();
                    }
                }
                expected.insert(k, v);
            }
        }
        drop(snap);
        let pred = match ty {
            index::KeyType::I64 => {
                Predicate::Range(IndexValue::I64(i64::MIN), IndexValue::I64(i64::MAX))
            }
            index::KeyType::F64 => Predicate::Range(
                IndexValue::F64(f64::NEG_INFINITY),
                IndexValue::F64(f64::INFINITY),
            ),
            index::KeyType::String => Predicate::Range(
                IndexValue::Str(String::new()),
                IndexValue::Str(max_str + "\u{10FFFF}"),
            ),
            _ => Predicate::Within([
                f64::NEG_INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::INFINITY,
            ]),
        };
        let hits = self.query(name, &pred, QueryOptions::default())?;
        let mut check = IndexCheck {
            index: name.to_string(),
            expected: expected.len(),
            found: hits.len(),
            ..IndexCheck::default()
        };
        let mut seen = std::collections::HashSet::new();
        for h in &hits {
            seen.insert(h.key.clone());
            if expected.get(&h.key) != h.value.as_ref() && check.extra.len() < 100 {
                check
                    .extra
                    .push(String::from_utf8_lossy(&h.key).into_owned());
            }
        }
        for k in expected.keys() {
            if !seen.contains(k) && check.missing.len() < 100 {
                check.missing.push(String::from_utf8_lossy(k).into_owned());
            }
        }
        Ok(check)
    }
}
