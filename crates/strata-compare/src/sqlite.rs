//! SQLite as a peer (`rusqlite`, bundled SQLite with R*Tree and dbstat).
//!
//! Schema, in `<dir>/strata-peer.sqlite`:
//! * `records(pk BLOB PRIMARY KEY, seq INTEGER NOT NULL, doc BLOB NOT NULL,
//!   <attribute columns>)`, a rowid table: `a<i>` (INTEGER or REAL) for a
//!   scalar index `i`, `a<i>_x, a<i>_y` for a point index and
//!   `a<i>_x0, a<i>_y0, a<i>_x1, a<i>_y1` for a rect index (exact values;
//!   NULL when the record has no such attribute);
//! * per scalar index, `CREATE INDEX idx<i> ON records(a<i>, seq)`, so a
//!   lookup reads its newest entries first and `LIMIT K` stops early;
//! * per spatial index, an R*Tree `rt<i>(id, minx, maxx, miny, maxy)`
//!   keyed by the record's rowid (points as degenerate boxes). R*Trees keep
//!   32-bit floats rounded outwards, so the query re-checks the exact
//!   columns of `records` after the join;
//! * `meta(k, v)`: the clean-close marker of the write counter (as in
//!   [`crate::kv`]: stored at close, deleted by the first write after open;
//!   without it an open computes `MAX(seq)` with a full scan).
//!
//! Writes: one transaction per `put` / `delete` (the harness calls `put`
//! once per record, and a user storing single records commits each one;
//! batching several records per transaction would change what a write
//! means). A put is an UPSERT returning the rowid plus the R*Tree rows.
//! Options: WAL journal, `synchronous=OFF` (`FULL` when `sync`),
//! `cache_size` = `cache_bytes` (as `-KiB`), 4 KiB pages; `mmap_size` =
//! 1 TiB with `mmap_reads` (the whole file; SQLite caps it at its
//! compile-time maximum), else 0 (no mmap). SQLite
//! has no direct I/O (`direct_io` is ignored) and reports no block counts
//! or write amplification; `index_bytes` is the pages of the B-tree
//! indexes and R*Tree tables according to `dbstat`.

use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use strata_bench::queries::Query;
use strata_bench::system::{
    dir_bytes, AttrType, BenchSystem, IndexDecl, QueryStats, Sizes, SysResult, SystemOptions,
};

use crate::attr::{self, Attr, Pred};
use crate::Record;

/// The database file inside the system's directory.
pub const FILE_NAME: &str = "strata-peer.sqlite";

/// Opener for the harness ([`strata_bench::system::OpenFn`]).
pub fn open(
    dir: &Path,
    indexes: &[IndexDecl],
    opts: &SystemOptions,
) -> SysResult<Box<dyn BenchSystem>> {
    Ok(Box::new(SqlitePeer::open(dir, indexes, opts)?))
}

fn err(what: &str) -> impl Fn(rusqlite::Error) -> String + '_ {
    move |e| format!("sqlite: {what}: {e}")
}

/// The attribute columns of index `i`.
fn columns(i: usize, ty: AttrType) -> Vec<String> {
    let suffixes: &[&str] = match ty {
        AttrType::I64 | AttrType::F64 => &[""],
        AttrType::Point => &["_x", "_y"],
        AttrType::Rect => &["_x0", "_y0", "_x1", "_y1"],
    };
    suffixes.iter().map(|s| format!("a{i}{s}")).collect()
}

/// The column values of an attribute (NULLs when absent).
fn column_values(ty: AttrType, a: Option<Attr>) -> Vec<Value> {
    match (ty, a) {
        (_, Some(Attr::I64(v))) => vec![Value::Integer(v)],
        (_, Some(Attr::F64(v))) => vec![Value::Real(v)],
        (_, Some(Attr::Point(p))) => p.iter().map(|c| Value::Real(*c)).collect(),
        (_, Some(Attr::Rect(r))) => r.iter().map(|c| Value::Real(*c)).collect(),
        (AttrType::I64 | AttrType::F64, None) => vec![Value::Null],
        (AttrType::Point, None) => vec![Value::Null; 2],
        (AttrType::Rect, None) => vec![Value::Null; 4],
    }
}

fn is_spatial(ty: AttrType) -> bool {
    matches!(ty, AttrType::Point | AttrType::Rect)
}

/// The SQL and parameters of a query on index `i` of type `ty`.
fn query_sql(i: usize, ty: AttrType, pred: Pred, top_k: Option<usize>) -> (String, Vec<Value>) {
    let limit = match top_k {
        Some(k) => i64::try_from(k).unwrap_or(i64::MAX),
        None => -1,
    };
    // Equality is written as `=` (what a user writes for a lookup): the
    // planner then walks idx<i> backwards in seq order and LIMIT stops
    // early; a range needs a sort by seq.
    let scalar = |eq: bool| {
        if eq {
            format!("SELECT pk, doc FROM records WHERE a{i} = ?1 ORDER BY seq DESC LIMIT ?3")
        } else {
            format!(
                "SELECT pk, doc FROM records WHERE a{i} BETWEEN ?1 AND ?2 \
                 ORDER BY seq DESC LIMIT ?3"
            )
        }
    };
    match pred {
        Pred::I64Range(lo, hi) => (
            scalar(lo == hi),
            vec![
                Value::Integer(lo),
                Value::Integer(hi),
                Value::Integer(limit),
            ],
        ),
        Pred::F64Range(lo, hi) => (
            scalar(lo == hi),
            vec![Value::Real(lo), Value::Real(hi), Value::Integer(limit)],
        ),
        Pred::Window(w) => {
            let exact = if ty == AttrType::Point {
                format!("r.a{i}_x BETWEEN ?1 AND ?3 AND r.a{i}_y BETWEEN ?2 AND ?4")
            } else {
                format!(
                    "r.a{i}_x0 <= ?3 AND r.a{i}_x1 >= ?1 AND r.a{i}_y0 <= ?4 AND r.a{i}_y1 >= ?2"
                )
            };
            (
                format!(
                    "SELECT r.pk, r.doc FROM rt{i} AS t CROSS JOIN records AS r \
                     ON r.rowid = t.id \
                     WHERE t.minx <= ?3 AND t.maxx >= ?1 AND t.miny <= ?4 AND t.maxy >= ?2 \
                     AND {exact} ORDER BY r.seq DESC LIMIT ?5"
                ),
                vec![
                    Value::Real(w[0]),
                    Value::Real(w[1]),
                    Value::Real(w[2]),
                    Value::Real(w[3]),
                    Value::Integer(limit),
                ],
            )
        }
    }
}

/// SQLite with a B-tree or R*Tree index per declared index.
pub struct SqlitePeer {
    dir: PathBuf,
    indexes: Vec<IndexDecl>,
    opts: SystemOptions,
    conn: Option<Connection>,
    seq: u64,
    /// True while the clean-close marker is stored.
    marker: bool,
    upsert_sql: String,
    /// Per index: the R*Tree insert and delete statements (spatial only).
    rtree_sql: Vec<Option<(String, String)>>,
}

fn conn_of(c: &mut Option<Connection>) -> SysResult<&mut Connection> {
    c.as_mut()
        .ok_or_else(|| "sqlite: database is closed (a reopen failed)".to_string())
}

impl SqlitePeer {
    /// Opens (creating if needed) the database in `dir`.
    pub fn open(dir: &Path, indexes: &[IndexDecl], opts: &SystemOptions) -> SysResult<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("sqlite: creating {}: {e}", dir.display()))?;
        let cols: Vec<String> = indexes
            .iter()
            .enumerate()
            .flat_map(|(i, d)| columns(i, d.ty))
            .collect();
        let mut names = vec!["pk".to_string(), "seq".to_string(), "doc".to_string()];
        names.extend(cols.iter().cloned());
        let placeholders: Vec<String> = (1..=names.len()).map(|i| format!("?{i}")).collect();
        let updates: Vec<String> = names[1..]
            .iter()
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        let upsert_sql = format!(
            "INSERT INTO records({}) VALUES ({}) ON CONFLICT(pk) DO UPDATE SET {} RETURNING rowid",
            names.join(", "),
            placeholders.join(", "),
            updates.join(", ")
        );
        let rtree_sql = indexes
            .iter()
            .enumerate()
            .map(|(i, d)| {
                is_spatial(d.ty).then(|| {
                    (
                        format!(
                            "INSERT OR REPLACE INTO rt{i}(id, minx, maxx, miny, maxy) \
                             VALUES (?1, ?2, ?3, ?4, ?5)"
                        ),
                        format!("DELETE FROM rt{i} WHERE id = ?1"),
                    )
                })
            })
            .collect();
        let mut p = SqlitePeer {
            dir: dir.to_path_buf(),
            indexes: indexes.to_vec(),
            opts: opts.clone(),
            conn: None,
            seq: 0,
            marker: false,
            upsert_sql,
            rtree_sql,
        };
        p.connect()?;
        Ok(p)
    }

    /// Opens the connection, sets the options, creates the schema and
    /// recovers the write counter.
    fn connect(&mut self) -> SysResult<()> {
        let path = self.dir.join(FILE_NAME);
        let conn = Connection::open(&path)
            .map_err(|e| format!("sqlite: opening {}: {e}", path.display()))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("setting WAL mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("sqlite: journal mode is {mode}, not WAL"));
        }
        let sync = if self.opts.sync { "FULL" } else { "OFF" };
        let mmap: u64 = if self.opts.mmap_reads { 1 << 40 } else { 0 };
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {sync}; PRAGMA cache_size = -{}; PRAGMA mmap_size = {mmap};",
            (self.opts.cache_bytes / 1024).max(1)
        ))
        .map_err(err("setting options"))?;
        conn.set_prepared_statement_cache_capacity(64);

        let mut ddl = String::from(
            "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v INTEGER NOT NULL);\n",
        );
        let mut cols = String::new();
        for (i, d) in self.indexes.iter().enumerate() {
            let sql_ty = if d.ty == AttrType::I64 {
                "INTEGER"
            } else {
                "REAL"
            };
            for c in columns(i, d.ty) {
                cols.push_str(&format!(", {c} {sql_ty}"));
            }
        }
        ddl.push_str(&format!(
            "CREATE TABLE IF NOT EXISTS records(pk BLOB PRIMARY KEY, seq INTEGER NOT NULL, \
             doc BLOB NOT NULL{cols});\n"
        ));
        for (i, d) in self.indexes.iter().enumerate() {
            if is_spatial(d.ty) {
                ddl.push_str(&format!(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS rt{i} USING rtree(id, minx, maxx, miny, maxy);\n"
                ));
            } else {
                ddl.push_str(&format!(
                    "CREATE INDEX IF NOT EXISTS idx{i} ON records(a{i}, seq);\n"
                ));
            }
        }
        conn.execute_batch(&ddl)
            .map_err(err("creating the schema"))?;

        let marker: Option<i64> = conn
            .query_row("SELECT v FROM meta WHERE k = 'seq'", [], |r| r.get(0))
            .optional()
            .map_err(err("reading the seq marker"))?;
        let (seq, present) = match marker {
            Some(v) => (v, true),
            None => (
                conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM records", [], |r| {
                    r.get(0)
                })
                .map_err(err("recovering seq"))?,
                false,
            ),
        };
        self.seq = u64::try_from(seq).map_err(|_| format!("sqlite: negative seq {seq}"))?;
        self.marker = present;
        self.conn = Some(conn);
        Ok(())
    }

    fn conn(&mut self) -> SysResult<&mut Connection> {
        conn_of(&mut self.conn)
    }

    /// Stores the marker and closes the connection.
    fn close(&mut self) -> SysResult<()> {
        let seq =
            i64::try_from(self.seq).map_err(|_| format!("sqlite: seq {} overflows", self.seq))?;
        if !self.marker {
            self.conn()?
                .execute(
                    "INSERT OR REPLACE INTO meta(k, v) VALUES ('seq', ?1)",
                    [seq],
                )
                .map_err(err("storing the seq marker"))?;
            self.marker = true;
        }
        if let Some(c) = self.conn.take() {
            c.close()
                .map_err(|(_, e)| format!("sqlite: closing: {e}"))?;
        }
        Ok(())
    }

    /// Closes without storing the marker and reopens, so that `seq` is
    /// recovered by scanning as after a crash (for tests).
    #[doc(hidden)]
    pub fn reopen_as_after_crash(&mut self) -> SysResult<()> {
        if self.marker {
            self.conn()?
                .execute("DELETE FROM meta WHERE k = 'seq'", [])
                .map_err(err("deleting the seq marker"))?;
            self.marker = false;
        }
        if let Some(c) = self.conn.take() {
            c.close()
                .map_err(|(_, e)| format!("sqlite: closing: {e}"))?;
        }
        self.connect()
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
            .ok_or_else(|| format!("sqlite: no index named {index:?}"))?;
        let ty = self.indexes[i].ty;
        let pred = Pred::new(ty, q).map_err(|m| format!("sqlite: {m}"))?;
        if pred.is_empty() {
            return Ok((Vec::new(), QueryStats::default()));
        }
        let (sql, args) = query_sql(i, ty, pred, top_k);
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(&sql)
            .map_err(err("preparing a query"))?;
        let rows = st
            .query_map(params_from_iter(args), |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(err("running a query"))?;
        let out = rows
            .collect::<Result<Vec<Record>, _>>()
            .map_err(err("reading query results"))?;
        let stats = QueryStats {
            results: out.len() as u64,
            ..QueryStats::default()
        };
        Ok((out, stats))
    }
}

impl BenchSystem for SqlitePeer {
    fn name(&self) -> String {
        "sqlite".to_string()
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> SysResult<()> {
        let attrs = attr::extract_all(value, &self.indexes);
        let seq = i64::try_from(self.seq + 1)
            .map_err(|_| format!("sqlite: seq {} overflows", self.seq))?;
        let mut args = vec![
            Value::Blob(key.to_vec()),
            Value::Integer(seq),
            Value::Blob(value.to_vec()),
        ];
        for (d, a) in self.indexes.iter().zip(&attrs) {
            args.extend(column_values(d.ty, *a));
        }
        let tx = conn_of(&mut self.conn)?
            .transaction()
            .map_err(err("beginning a put"))?;
        {
            let rowid: i64 = tx
                .prepare_cached(&self.upsert_sql)
                .and_then(|mut st| st.query_row(params_from_iter(args), |r| r.get(0)))
                .map_err(err("upserting a record"))?;
            for (sql, a) in self.rtree_sql.iter().zip(&attrs) {
                let Some((insert, delete)) = sql else {
                    continue;
                };
                match a.and_then(|a| a.bbox()) {
                    Some(b) => tx
                        .prepare_cached(insert)
                        .and_then(|mut st| st.execute(params![rowid, b[0], b[2], b[1], b[3]])),
                    None => tx
                        .prepare_cached(delete)
                        .and_then(|mut st| st.execute([rowid])),
                }
                .map_err(err("updating an R*Tree"))?;
            }
            if self.marker {
                tx.execute("DELETE FROM meta WHERE k = 'seq'", [])
                    .map_err(err("deleting the seq marker"))?;
            }
        }
        tx.commit().map_err(err("committing a put"))?;
        self.seq += 1;
        self.marker = false;
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> SysResult<()> {
        let tx = conn_of(&mut self.conn)?
            .transaction()
            .map_err(err("beginning a delete"))?;
        {
            let rowid: Option<i64> = tx
                .prepare_cached("DELETE FROM records WHERE pk = ?1 RETURNING rowid")
                .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
                .map_err(err("deleting a record"))?;
            let Some(rowid) = rowid else {
                // Absent key: nothing was written.
                return Ok(());
            };
            for (_, delete) in self.rtree_sql.iter().flatten() {
                tx.prepare_cached(delete)
                    .and_then(|mut st| st.execute([rowid]))
                    .map_err(err("deleting from an R*Tree"))?;
            }
            if self.marker {
                tx.execute("DELETE FROM meta WHERE k = 'seq'", [])
                    .map_err(err("deleting the seq marker"))?;
            }
        }
        tx.commit().map_err(err("committing a delete"))?;
        self.marker = false;
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> SysResult<Option<Vec<u8>>> {
        self.conn()?
            .prepare_cached("SELECT doc FROM records WHERE pk = ?1")
            .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
            .map_err(err("get"))
    }

    fn query(&mut self, index: &str, q: &Query, top_k: Option<usize>) -> SysResult<QueryStats> {
        Ok(self.query_records(index, q, top_k)?.1)
    }

    fn settle(&mut self) -> SysResult<()> {
        let sync = if self.opts.sync { "FULL" } else { "OFF" };
        let conn = self.conn()?;
        // Checkpoint with fsync whatever the setting, so the data is durable.
        conn.execute_batch("PRAGMA synchronous = FULL;")
            .map_err(err("settle"))?;
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(err("checkpointing the WAL"))?;
        conn.execute_batch(&format!("PRAGMA synchronous = {sync};"))
            .map_err(err("settle"))?;
        if busy != 0 {
            return Err("sqlite: WAL checkpoint could not finish (busy)".to_string());
        }
        Ok(())
    }

    fn reopen(&mut self) -> SysResult<()> {
        self.close()?;
        self.connect()
    }

    fn sizes(&mut self) -> SysResult<Sizes> {
        let mut names = Vec::new();
        for (i, d) in self.indexes.iter().enumerate() {
            if is_spatial(d.ty) {
                for t in ["node", "rowid", "parent"] {
                    names.push(format!("'rt{i}_{t}'"));
                }
            } else {
                names.push(format!("'idx{i}'"));
            }
        }
        let index_bytes = if names.is_empty() {
            Some(0)
        } else {
            let sql = format!(
                "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN ({})",
                names.join(", ")
            );
            // dbstat is compiled into the bundled SQLite; None otherwise.
            self.conn()?
                .query_row(&sql, [], |r| r.get::<_, i64>(0))
                .ok()
                .and_then(|b| u64::try_from(b).ok())
        };
        Ok(Sizes {
            db_bytes: dir_bytes(&self.dir),
            index_bytes,
            index_memory_bytes: None,
            write_amplification: None,
            write_stall_seconds: None,
        })
    }
}

impl Drop for SqlitePeer {
    fn drop(&mut self) {
        if self.conn.is_some() {
            // Best effort: without the marker the next open scans.
            let _ = self.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plans a benchmark relies on: lookups walk idx<i> in seq order
    /// (no sort, so LIMIT stops early), ranges search idx<i>, windows are
    /// driven by the R*Tree and join records by rowid.
    #[test]
    fn query_plans_use_the_indexes() {
        let dir = std::env::temp_dir().join(format!("strata-compare-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let decls = vec![
            IndexDecl {
                name: "n".into(),
                field: "n".into(),
                ty: AttrType::I64,
            },
            IndexDecl {
                name: "p".into(),
                field: "p".into(),
                ty: AttrType::Point,
            },
        ];
        let mut peer = match SqlitePeer::open(&dir, &decls, &SystemOptions::default()) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let mut plan = |i: usize, ty: AttrType, pred: Pred| -> String {
            let (sql, args) = query_sql(i, ty, pred, Some(10));
            let conn = match peer.conn() {
                Ok(c) => c,
                Err(e) => panic!("{e}"),
            };
            let mut st = match conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")) {
                Ok(s) => s,
                Err(e) => panic!("{e}"),
            };
            let rows = st.query_map(params_from_iter(args), |r| r.get::<_, String>(3));
            match rows.and_then(|r| r.collect::<Result<Vec<_>, _>>()) {
                Ok(v) => v.join(" | "),
                Err(e) => panic!("{e}"),
            }
        };
        let lookup = plan(0, AttrType::I64, Pred::I64Range(3, 3));
        assert!(lookup.contains("USING INDEX idx0 (a0=?)"), "{lookup}");
        assert!(!lookup.contains("TEMP B-TREE"), "{lookup}");
        let range = plan(0, AttrType::I64, Pred::I64Range(3, 9));
        assert!(range.contains("USING INDEX idx0"), "{range}");
        let window = plan(1, AttrType::Point, Pred::Window([0.0, 0.0, 1.0, 1.0]));
        assert!(window.starts_with("SCAN t VIRTUAL TABLE"), "{window}");
        assert!(
            window.contains("SEARCH r USING INTEGER PRIMARY KEY"),
            "{window}"
        );
        drop(peer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
