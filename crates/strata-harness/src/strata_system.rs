//! Strata as a [`BenchSystem`]: one `strata::Db` with the paper preset and
//! one secondary index per [`IndexDecl`], configured from the system name.
//!
//! System names (grammar in [`crate::names`]): `strata:<strategy>[<params>]`,
//! where `<strategy>` is `none` (no index: the primary store alone) or any
//! strategy name (aliases resolved), passed through to
//! [`IndexSpec::strategy`] (the engine validates it), and `<params>` is an
//! optional `;`-separated list of `key=value` pairs passed to
//! [`IndexSpec::param`] of every index. Two harness-level extensions:
//!
//! * `key@index=value` applies to index `index` only (overriding a plain
//!   `key=value`); naming an index the workload does not have is an error.
//! * `delta=<N>x` (N a positive number) is resolved per index to N times
//!   the mean gap between neighbouring attribute values of the workload's
//!   data: `(max - min) / (n - 1)` for numbers, `sqrt(area / n)` of the
//!   bounding box for points and rectangles. NEXT's `delta=auto` is 8 times
//!   the same quantity computed per table, so on data that fits one table
//!   (under ~64 MiB with the paper preset) `delta=8x` equals `auto`. The
//!   engine itself takes an absolute δ in the attribute's units, which
//!   cannot be shared by a numeric and a spatial index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use strata::{
    Db, Hits, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions, WriteOptions,
};
use strata_bench::queries::Query;
use strata_bench::system::{
    dir_bytes, AttrType, BenchSystem, IndexDecl, QueryStats, Sizes, SysResult, SystemOptions,
};

pub use crate::names::Param;
use crate::names::SystemName;

/// One index's parameters: (index name, key -> value).
pub type IndexParam = (String, BTreeMap<String, String>);

/// Parameters of each index, in the workload's index order.
pub type IndexParams = Vec<IndexParam>;

/// A parsed `strata:...` system name.
#[derive(Debug, Clone, PartialEq)]
pub struct StrataSpec {
    /// The name as given (the label in results).
    pub name: String,
    /// `None` for `strata:none`; aliases resolved.
    pub strategy: Option<String>,
    /// In the order given.
    pub params: Vec<Param>,
}

impl StrataSpec {
    /// The Strata system `name` names, from its parsed form
    /// ([`SystemName::parse`]); `None` if it is not a Strata system or has
    /// no strategy.
    pub fn from_name(name: SystemName) -> Option<StrataSpec> {
        if !name.is_strata() {
            return None;
        }
        let strategy = name.strategy?;
        Some(StrataSpec {
            name: name.text,
            strategy: (strategy != "none").then_some(strategy),
            params: name.params,
        })
    }

    /// Parses `strata:<strategy>[k=v;k@index=v;...]` with the one system
    /// name grammar ([`crate::names`]). `Ok(None)` if `name` is not a
    /// Strata system (another family, or no strategy).
    pub fn parse(name: &str) -> Result<Option<StrataSpec>, String> {
        Ok(StrataSpec::from_name(SystemName::parse(name)?))
    }

    /// The parameters of each index, with `key@index` overrides applied and
    /// `delta=Nx` resolved against `gaps` (mean neighbour gap per index).
    pub fn index_params(
        &self,
        decls: &[IndexDecl],
        gaps: &BTreeMap<String, f64>,
    ) -> Result<IndexParams, String> {
        let bad = |why: String| format!("system {:?}: {why}", self.name);
        for p in &self.params {
            if let Some(i) = &p.index {
                if !decls.iter().any(|d| &d.name == i) {
                    let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
                    return Err(bad(format!(
                        "parameter {}@{i}: this workload has no index {i:?} (indexes: {})",
                        p.key,
                        names.join(", ")
                    )));
                }
            }
        }
        let mut out = Vec::new();
        for d in decls {
            let mut m = BTreeMap::new();
            // Plain parameters first, then this index's overrides.
            for p in self.params.iter().filter(|p| p.index.is_none()) {
                m.insert(p.key.clone(), p.value.clone());
            }
            for p in self
                .params
                .iter()
                .filter(|p| p.index.as_deref() == Some(&d.name))
            {
                m.insert(p.key.clone(), p.value.clone());
            }
            if let Some(v) = m.get("delta").cloned() {
                if let Some(mult) = v.strip_suffix('x') {
                    let mult: f64 = mult
                        .parse()
                        .ok()
                        .filter(|m: &f64| m.is_finite() && *m > 0.0)
                        .ok_or_else(|| {
                            bad(format!("delta={v}: expected a positive number before 'x'"))
                        })?;
                    let gap = gaps
                        .get(&d.name)
                        .copied()
                        .filter(|g| g.is_finite() && *g > 0.0)
                        .ok_or_else(|| {
                            bad(format!(
                                "delta={v}: index {:?} has no mean value gap (fewer than two distinct values?)",
                                d.name
                            ))
                        })?;
                    m.insert("delta".into(), format!("{}", mult * gap));
                }
            }
            out.push((d.name.clone(), m));
        }
        Ok(out)
    }
}

fn key_type(t: AttrType) -> KeyType {
    match t {
        AttrType::I64 => KeyType::I64,
        AttrType::F64 => KeyType::F64,
        AttrType::Point => KeyType::Point,
        AttrType::Rect => KeyType::Rect,
    }
}

/// The engine predicate of a harness query.
pub fn to_predicate(q: &Query) -> Predicate {
    match *q {
        Query::Lookup(v) => Predicate::Eq(IndexValue::I64(v)),
        Query::Range(lo, hi) => Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi)),
        Query::RangeF(lo, hi) => Predicate::Range(IndexValue::F64(lo), IndexValue::F64(hi)),
        Query::Window(w) => Predicate::Within(w),
    }
}

/// Strata under test.
pub struct StrataSystem {
    name: String,
    dir: PathBuf,
    options: Options,
    wopts: WriteOptions,
    /// Index-only queries (see `SystemOptions::keys_only`).
    keys_only: bool,
    /// Threads per query (see `SystemOptions::query_threads`).
    query_threads: Option<usize>,
    has_indexes: bool,
    db: Option<Db>,
    /// The previous query's results, kept (not copied: the copy would be
    /// timed with the query) for [`BenchSystem::floor_seconds`].
    last_hits: Hits,
}

impl StrataSystem {
    /// Opens a fresh database in `dir` (which must hold none) and creates
    /// the indexes with `params` (from [`StrataSpec::index_params`]).
    pub fn open(
        spec: &StrataSpec,
        dir: &Path,
        decls: &[IndexDecl],
        params: &[IndexParam],
        opts: &SystemOptions,
    ) -> SysResult<Box<dyn BenchSystem>> {
        let style = if opts.tiered {
            strata::CompactionStyle::Tiered
        } else {
            strata::CompactionStyle::Leveled
        };
        let options = Options::paper()
            .compaction_style(style)
            .direct_io(opts.direct_io)
            .mmap_reads(opts.mmap_reads)
            .block_cache_bytes(usize::try_from(opts.cache_bytes).unwrap_or(usize::MAX))
            .error_if_exists(true);
        let db = Db::open(dir, options.clone())
            .map_err(|e| format!("{}: open {}: {e}", spec.name, dir.display()))?;
        if let Some(strategy) = &spec.strategy {
            for d in decls {
                let mut s = IndexSpec::field(&d.name, &d.field, key_type(d.ty)).strategy(strategy);
                if let Some((_, p)) = params.iter().find(|(n, _)| n == &d.name) {
                    for (k, v) in p {
                        s = s.param(k, v);
                    }
                }
                db.create_index(s)
                    .map_err(|e| format!("{}: create index {:?}: {e}", spec.name, d.name))?;
            }
        }
        Ok(Box::new(StrataSystem {
            name: spec.name.clone(),
            dir: dir.to_path_buf(),
            options: options.error_if_exists(false).create_if_missing(false),
            wopts: WriteOptions::default().sync(opts.sync),
            keys_only: opts.keys_only,
            query_threads: opts.query_threads,
            has_indexes: spec.strategy.is_some() && !decls.is_empty(),
            db: Some(db),
            last_hits: Hits::default(),
        }))
    }

    fn db(&self) -> SysResult<&Db> {
        self.db
            .as_ref()
            .ok_or_else(|| format!("{}: database is closed (a reopen failed)", self.name))
    }

    fn err(&self, what: &str, e: strata::Error) -> String {
        format!("{}: {what}: {e}", self.name)
    }
}

impl BenchSystem for StrataSystem {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> SysResult<()> {
        self.db()?
            .put_opt(key, value, self.wopts)
            .map_err(|e| self.err("put", e))
    }

    fn delete(&mut self, key: &[u8]) -> SysResult<()> {
        self.db()?
            .delete_opt(key, self.wopts)
            .map_err(|e| self.err("delete", e))
    }

    fn get(&mut self, key: &[u8]) -> SysResult<Option<Vec<u8>>> {
        self.db()?.get(key).map_err(|e| self.err("get", e))
    }

    fn query(&mut self, index: &str, q: &Query, top_k: Option<usize>) -> SysResult<QueryStats> {
        let opts = QueryOptions {
            limit: top_k,
            keys_only: self.keys_only,
            parallelism: self.query_threads,
        };
        let (hits, p) = self
            .db()?
            .query_profiled(index, &to_predicate(q), opts)
            .map_err(|e| self.err(&format!("query {index}"), e))?;
        let n = hits.len() as u64;
        self.last_hits = hits;
        Ok(QueryStats {
            results: n,
            data_blocks_read: Some(p.data_blocks_read),
            min_data_blocks: Some(p.min_data_blocks),
            index_blocks_read: Some(p.index_blocks_read),
            stale: Some(p.stale),
            // Only range filters count components.
            components_scanned: (p.components_scanned + p.components_skipped > 0)
                .then_some(p.components_scanned),
            components_min: (p.components_scanned + p.components_skipped > 0)
                .then_some(p.components_min),
        })
    }

    fn settle(&mut self) -> SysResult<()> {
        let db = self.db()?;
        db.flush().map_err(|e| self.err("flush", e))?;
        db.wait_for_compactions()
            .map_err(|e| self.err("wait for compactions", e))
    }

    fn reopen(&mut self) -> SysResult<()> {
        drop(self.db.take());
        let db = Db::open(&self.dir, self.options.clone()).map_err(|e| self.err("reopen", e))?;
        self.db = Some(db);
        Ok(())
    }

    fn sizes(&mut self) -> SysResult<Sizes> {
        let db = self.db()?;
        let stats = db.stats();
        let infos = db.indexes();
        Ok(Sizes {
            db_bytes: dir_bytes(&self.dir),
            index_bytes: Some(infos.iter().map(|i| i.stats.disk_bytes).sum()),
            index_memory_bytes: Some(infos.iter().map(|i| i.stats.memory_bytes).sum()),
            write_amplification: Some(stats.write_amplification),
            write_stall_seconds: Some(stats.io.write_stall_micros as f64 / 1e6),
        })
    }

    fn supports_queries(&self) -> bool {
        self.has_indexes
    }

    fn measures_floor(&self) -> bool {
        true
    }

    /// Locates each result's data block (`strata_lsm::Db::locate_entry`;
    /// results still in a memtable need none), then times one
    /// `read_block_verified` (pread + CRC32C, no block cache) per distinct
    /// block, in file and offset order.
    fn floor_seconds(&mut self) -> SysResult<Option<f64>> {
        let db = self.db()?.engine();
        let mut blocks = std::collections::BTreeSet::new();
        for h in &self.last_hits {
            if let Some(loc) = db
                .locate_entry(h.key, h.seq)
                .map_err(|e| format!("{}: locate a result: {e}", self.name))?
            {
                blocks.insert(loc);
            }
        }
        if blocks.is_empty() {
            // Every result came from a memtable (or there were none): no
            // block to read, a floor of 0 ("-" in reports), not a tiny
            // timing of an empty loop.
            return Ok(Some(0.0));
        }
        let t = std::time::Instant::now();
        for loc in &blocks {
            db.read_block_verified(loc)
                .map_err(|e| format!("{}: read block {loc:?}: {e}", self.name))?;
        }
        Ok(Some(t.elapsed().as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decls() -> Vec<IndexDecl> {
        vec![
            IndexDecl {
                name: "user_id".into(),
                field: "user_id".into(),
                ty: AttrType::I64,
            },
            IndexDecl {
                name: "coordinates".into(),
                field: "coordinates".into(),
                ty: AttrType::Point,
            },
        ]
    }

    #[test]
    fn parses_names() {
        assert_eq!(StrataSpec::parse("sqlite").unwrap(), None);
        let s = StrataSpec::parse("strata:none").unwrap().unwrap();
        assert_eq!(s.strategy, None);
        let s = StrataSpec::parse("strata:next").unwrap().unwrap();
        assert_eq!(s.strategy.as_deref(), Some("next"));
        assert!(s.params.is_empty());
        let s = StrataSpec::parse("strata:composite[mode=validation;validate=timestamp]")
            .unwrap()
            .unwrap();
        assert_eq!(s.strategy.as_deref(), Some("composite"));
        assert_eq!(
            s.params,
            vec![
                Param {
                    key: "mode".into(),
                    index: None,
                    value: "validation".into()
                },
                Param {
                    key: "validate".into(),
                    index: None,
                    value: "timestamp".into()
                }
            ]
        );
        let s = StrataSpec::parse("strata:next[delta=off;delta@user_id=1000;]")
            .unwrap()
            .unwrap();
        assert_eq!(s.params[1].index.as_deref(), Some("user_id"));
        for bad in [
            "strata:",
            "strata:next[delta=off",
            "strata:next[delta]",
            "strata:next[=1]",
            "strata:next[delta=]",
            "strata:next[delta@=1]",
            "strata:next[delta=1;delta=2]",
            "strata:none[delta=1]",
            "strata:ne xt",
        ] {
            assert!(StrataSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resolves_params() {
        let gaps: BTreeMap<String, f64> = [("user_id".to_string(), 1000.0)].into();
        let s = StrataSpec::parse("strata:next[delta=4x;delta@coordinates=0.05]")
            .unwrap()
            .unwrap();
        let p = s.index_params(&decls(), &gaps).unwrap();
        assert_eq!(p[0].1["delta"], "4000");
        assert_eq!(p[1].1["delta"], "0.05");
        // A relative delta needs a gap for every index it applies to.
        let s = StrataSpec::parse("strata:next[delta=2x]").unwrap().unwrap();
        let e = s.index_params(&decls(), &gaps).unwrap_err();
        assert!(e.contains("coordinates"), "{e}");
        let s = StrataSpec::parse("strata:next[delta=-2x]")
            .unwrap()
            .unwrap();
        assert!(s.index_params(&decls(), &gaps).is_err());
        let s = StrataSpec::parse("strata:next[delta@bbox=1]")
            .unwrap()
            .unwrap();
        let e = s.index_params(&decls(), &gaps).unwrap_err();
        assert!(e.contains("no index \"bbox\""), "{e}");
        // Other parameters pass through untouched.
        let s = StrataSpec::parse("strata:next[delta=off;mode=x]")
            .unwrap()
            .unwrap();
        let p = s.index_params(&decls(), &gaps).unwrap();
        assert_eq!(p[1].1["delta"], "off");
        assert_eq!(p[1].1["mode"], "x");
    }

    #[test]
    fn strata_system_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StrataSpec::parse("strata:next").unwrap().unwrap();
        let d = decls();
        let params = spec.index_params(&d, &BTreeMap::new()).unwrap();
        let mut s = StrataSystem::open(
            &spec,
            &dir.path().join("db"),
            &d,
            &params,
            &SystemOptions::default(),
        )
        .unwrap();
        assert!(s.supports_queries());
        for i in 0..20i64 {
            let v = format!(r#"{{"user_id":{},"coordinates":[{i}.0,1.0]}}"#, i % 4);
            s.put(format!("k{i:02}").as_bytes(), v.as_bytes()).unwrap();
        }
        s.delete(b"k00").unwrap();
        assert!(s.get(b"k00").unwrap().is_none());
        assert!(s.get(b"k01").unwrap().is_some());
        let q = s.query("user_id", &Query::Lookup(0), None).unwrap();
        assert_eq!(q.results, 4, "k04 k08 k12 k16");
        s.settle().unwrap();
        s.reopen().unwrap();
        let q = s
            .query("coordinates", &Query::Window([0.0, 0.0, 9.5, 2.0]), Some(3))
            .unwrap();
        assert_eq!(q.results, 3);
        assert!(q.data_blocks_read.is_some());
        let z = s.sizes().unwrap();
        assert!(z.db_bytes > 0 && z.index_bytes.is_some());
        assert!(s.query("nope", &Query::Lookup(0), None).is_err());

        let none = StrataSpec::parse("strata:none").unwrap().unwrap();
        let s = StrataSystem::open(
            &none,
            &dir.path().join("db2"),
            &d,
            &[],
            &SystemOptions::default(),
        )
        .unwrap();
        assert!(!s.supports_queries());
    }
}
