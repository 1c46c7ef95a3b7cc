//! `strata._strata`: the Python binding of the public API of the `strata`
//! crate ([`strata::Db`] and its options, write batches, snapshots,
//! scans, secondary indexes and queries). The package `strata`
//! (`python/strata/__init__.py`) re-exports it with the exception classes
//! of `strata/_errors.py`.
//!
//! Rules kept throughout:
//! * no panic on any input: every fallible call maps its error to a Python
//!   exception ([`err`]);
//! * the GIL is released around every call into the engine that may do
//!   I/O or take time (reads, writes, scans, queries, index builds, flush,
//!   compaction, close);
//! * the classes are `frozen` with their state behind mutexes, so they
//!   are safe to share between Python threads.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

mod json;

use strata::{
    DbIterator, Extractor, IndexSpec, IndexState, IndexValue, KeyType, Options, Predicate,
    QueryOptions, WriteOptions,
};

// ---------------------------------------------------------------- errors

/// The exception classes, defined in Python (`strata/_errors.py`) so that
/// they can derive from both `strata.Error` and a built-in class.
fn exc_type<'py>(
    py: Python<'py>,
    cell: &'static GILOnceCell<Py<PyType>>,
    name: &str,
) -> Option<Bound<'py, PyType>> {
    cell.import(py, "strata._errors", name).ok().cloned()
}

fn raise(py: Python<'_>, kind: ErrKind, msg: String) -> PyErr {
    static ERROR: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    static CORRUPTION: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    static INVALID: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    static NOT_FOUND: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    static IO: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    static CLOSED: GILOnceCell<Py<PyType>> = GILOnceCell::new();
    let (cell, name) = match kind {
        ErrKind::Error => (&ERROR, "Error"),
        ErrKind::Corruption => (&CORRUPTION, "CorruptionError"),
        ErrKind::Invalid => (&INVALID, "InvalidArgumentError"),
        ErrKind::NotFound => (&NOT_FOUND, "NotFoundError"),
        ErrKind::Io => (&IO, "IOError"),
        ErrKind::Closed => (&CLOSED, "ClosedError"),
    };
    match exc_type(py, cell, name) {
        Some(t) => PyErr::from_type(t, msg),
        None => PyRuntimeError::new_err(msg),
    }
}

#[derive(Clone, Copy)]
enum ErrKind {
    Error,
    Corruption,
    Invalid,
    NotFound,
    Io,
    Closed,
}

/// Maps an engine error to its Python exception.
fn err(py: Python<'_>, e: strata::Error) -> PyErr {
    let kind = match &e {
        strata::Error::Corruption(_) => ErrKind::Corruption,
        strata::Error::InvalidArgument(_) => ErrKind::Invalid,
        strata::Error::NotFound(_) => ErrKind::NotFound,
        strata::Error::Io { .. } => ErrKind::Io,
        strata::Error::Closed => ErrKind::Closed,
        _ => ErrKind::Error,
    };
    raise(py, kind, e.to_string())
}

fn invalid(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    raise(py, ErrKind::Invalid, msg.into())
}

fn closed(py: Python<'_>, what: &str) -> PyErr {
    raise(py, ErrKind::Closed, format!("{what} is closed"))
}

/// Locks `m`; a mutex poisoned by a panic elsewhere still holds valid data
/// (every critical section here leaves it consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------- bytes arguments

/// Bytes of a key or value: `bytes`, `bytearray` or `str` (UTF-8).
fn bytes_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = v.downcast::<PyBytes>() {
        Ok(b.as_bytes().to_vec())
    } else if let Ok(s) = v.downcast::<PyString>() {
        Ok(s.to_cow()?.as_bytes().to_vec())
    } else if let Ok(b) = v.downcast::<PyByteArray>() {
        Ok(b.to_vec())
    } else {
        Err(PyTypeError::new_err(format!(
            "{what} must be bytes or str, not {}",
            v.get_type().name()?
        )))
    }
}

fn opt_bytes_arg(v: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => bytes_arg(v, what).map(Some),
    }
}

fn write_opts(sync: bool) -> WriteOptions {
    WriteOptions::default().sync(sync)
}

/// `json.loads` of `raw`, or the raw bytes if they are not JSON.
fn json_value<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    static LOADS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
    let loads = LOADS.import(py, "json", "loads")?;
    let b = PyBytes::new(py, raw);
    match loads.call1((&b,)) {
        Ok(v) => Ok(v),
        Err(_) => Ok(b.into_any()),
    }
}

/// A serializable engine structure as a Python object (through JSON).
fn to_py<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    let s = serde_json::to_vec(v).map_err(|e| raise(py, ErrKind::Error, e.to_string()))?;
    json_value(py, &s)
}

// ----------------------------------------------------------------- open

/// Options of `strata.open`, applied to [`Options`].
fn options(py: Python<'_>, kw: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
    let Some(kw) = kw else {
        return Ok(Options::default());
    };
    let mut o = match kw.get_item("preset")? {
        None => Options::default(),
        Some(p) => match p.extract::<String>()?.as_str() {
            "default" => Options::default(),
            "paper" => Options::paper(),
            "small" => Options::small_for_tests(),
            other => {
                return Err(invalid(
                    py,
                    format!("unknown preset {other:?} (expected default, paper or small)"),
                ))
            }
        },
    };
    let size = |v: &Bound<'_, PyAny>, k: &str| -> PyResult<usize> {
        v.extract::<usize>()
            .map_err(|_| invalid(py, format!("{k} must be a non-negative int")))
    };
    let flag = |v: &Bound<'_, PyAny>, k: &str| -> PyResult<bool> {
        v.downcast::<PyBool>()
            .map(|b| b.is_true())
            .map_err(|_| invalid(py, format!("{k} must be a bool")))
    };
    for (k, v) in kw.iter() {
        let k: String = k.extract()?;
        match k.as_str() {
            "preset" => {}
            "create_if_missing" => o.create_if_missing = flag(&v, &k)?,
            "error_if_exists" => o.error_if_exists = flag(&v, &k)?,
            "wal" => o.wal = flag(&v, &k)?,
            "background_work" => o.background_work = flag(&v, &k)?,
            "cache_size" | "block_cache_bytes" => o.block_cache_bytes = size(&v, &k)?,
            "cache_doorkeeper" => o.block_cache_doorkeeper = flag(&v, &k)?,
            "memtable_size" => o.memtable_size = size(&v, &k)?,
            "block_size" => o.block_size = size(&v, &k)?,
            "bloom_bits_per_key" => o.bloom_bits_per_key = size(&v, &k)?,
            "max_open_files" => o.max_open_files = size(&v, &k)?,
            "target_file_size" => o.target_file_size = size(&v, &k)? as u64,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "open() got an unexpected option {k:?} (known: preset, create_if_missing, \
                     error_if_exists, cache_size, cache_doorkeeper, memtable_size, block_size, \
                     bloom_bits_per_key, max_open_files, target_file_size, wal, background_work)"
                )))
            }
        }
    }
    o.validate().map_err(|e| err(py, e))?;
    Ok(o)
}

/// open(path, **options) -> Db
///
/// Opens (by default creating) the database in directory `path`.
///
/// Options: preset ("default", "paper" or "small"), create_if_missing
/// (default True), error_if_exists, cache_size (block cache bytes),
/// cache_doorkeeper (default True: a block is cached on its second miss),
/// memtable_size, block_size, bloom_bits_per_key, max_open_files,
/// target_file_size, wal, background_work. Raises TypeError for an unknown
/// option, ValueError for a bad value, strata.Error when the database cannot
/// be opened (e.g. locked by another handle).
#[pyfunction]
#[pyo3(signature = (path, **options))]
fn open(py: Python<'_>, path: PathBuf, options: Option<&Bound<'_, PyDict>>) -> PyResult<Db> {
    let opts = self::options(py, options)?;
    let p = path.clone();
    let db = py
        .allow_threads(move || strata::Db::open(&p, opts))
        .map_err(|e| err(py, e))?;
    Ok(Db {
        inner: Mutex::new(Some(Arc::new(db))),
        types: Mutex::new(HashMap::new()),
        path,
    })
}

// -------------------------------------------------------------------- Db

/// An open Strata database (see strata.open).
///
/// Keys and values are bytes or str (str is stored as UTF-8); reads return
/// bytes. Use it as a context manager, or call close().
#[pyclass(module = "strata._strata", frozen)]
pub struct Db {
    inner: Mutex<Option<Arc<strata::Db>>>,
    /// Key type of each index, for converting query arguments (refreshed
    /// from `Db::indexes` on a miss; create/drop through this handle keep it
    /// current).
    types: Mutex<HashMap<String, KeyType>>,
    path: PathBuf,
}

impl Db {
    fn db(&self, py: Python<'_>) -> PyResult<Arc<strata::Db>> {
        lock(&self.inner)
            .as_ref()
            .cloned()
            .ok_or_else(|| closed(py, "database"))
    }

    fn key_type(&self, py: Python<'_>, db: &strata::Db, index: &str) -> PyResult<KeyType> {
        if let Some(t) = lock(&self.types).get(index) {
            return Ok(*t);
        }
        let infos = py.allow_threads(|| db.indexes());
        let mut types = lock(&self.types);
        types.clear();
        for i in infos {
            types.insert(i.spec.name.clone(), i.spec.key_type);
        }
        types
            .get(index)
            .copied()
            .ok_or_else(|| raise(py, ErrKind::NotFound, format!("no index named {index:?}")))
    }
}

/// The value of a query argument for an index of type `ty`.
fn index_value(
    py: Python<'_>,
    ty: KeyType,
    v: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<IndexValue> {
    let bad = || {
        let got = v
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        invalid(
            py,
            format!(
                "{what}: an index of type {} takes {}, not {got}",
                ty.as_str(),
                match ty {
                    KeyType::I64 => "an int",
                    KeyType::F64 => "a float",
                    KeyType::String => "a str",
                    KeyType::Point => "an (x, y) pair",
                    KeyType::Rect => "an (x1, y1, x2, y2) tuple",
                }
            ),
        )
    };
    let coords = |n: usize| -> PyResult<Vec<f64>> {
        if v.is_instance_of::<PyString>() {
            return Err(bad());
        }
        let c: Vec<f64> = v.extract().map_err(|_| bad())?;
        if c.len() != n {
            return Err(bad());
        }
        Ok(c)
    };
    Ok(match ty {
        KeyType::I64 => {
            if v.is_instance_of::<PyBool>() {
                return Err(bad());
            }
            IndexValue::I64(v.extract().map_err(|_| bad())?)
        }
        KeyType::F64 => {
            if v.is_instance_of::<PyBool>() {
                return Err(bad());
            }
            IndexValue::F64(v.extract().map_err(|_| bad())?)
        }
        KeyType::String => IndexValue::Str(v.extract().map_err(|_| bad())?),
        KeyType::Point => {
            let c = coords(2)?;
            IndexValue::Point([c[0], c[1]])
        }
        KeyType::Rect => {
            let c = coords(4)?;
            IndexValue::Rect([c[0], c[1], c[2], c[3]])
        }
    })
}

/// A strategy parameter as the engine reads it.
fn param_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.downcast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.to_string());
    }
    Ok(v.str()?.to_cow()?.into_owned())
}

#[pymethods]
impl Db {
    /// Closes the database: stops the background threads and releases the
    /// directory lock. Further calls raise strata.ClosedError; closing twice
    /// is allowed. Snapshots and scans already open keep working.
    fn close(&self, py: Python<'_>) {
        let db = lock(&self.inner).take();
        py.allow_threads(move || drop(db));
    }

    /// True once close() was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// The database directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<strata.Db {:?}{}>",
            self.path.display().to_string(),
            if self.closed() { " closed" } else { "" }
        )
    }

    /// Stores `value` under `key`; with sync=True the WAL is fsynced before
    /// returning.
    #[pyo3(signature = (key, value, sync = false))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sync: bool,
    ) -> PyResult<()> {
        let db = self.db(py)?;
        let k = bytes_arg(key, "key")?;
        let v = bytes_arg(value, "value")?;
        py.allow_threads(|| db.put_opt(&k, &v, write_opts(sync)))
            .map_err(|e| err(py, e))
    }

    /// The value of `key` as bytes, or None if absent.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let db = self.db(py)?;
        let k = bytes_arg(key, "key")?;
        let v = py.allow_threads(|| db.get(&k)).map_err(|e| err(py, e))?;
        Ok(v.map(|v| PyBytes::new(py, &v)))
    }

    /// Deletes `key` (nothing happens if it is absent).
    #[pyo3(signature = (key, sync = false))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let db = self.db(py)?;
        let k = bytes_arg(key, "key")?;
        py.allow_threads(|| db.delete_opt(&k, write_opts(sync)))
            .map_err(|e| err(py, e))
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.get(py, key)?
            .ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value, false)
    }

    /// `del db[key]` raises KeyError if the key is absent (unlike delete()).
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let db = self.db(py)?;
        let k = bytes_arg(key, "key")?;
        let found = py
            .allow_threads(|| -> strata::Result<bool> {
                if db.get(&k)?.is_none() {
                    return Ok(false);
                }
                db.delete(&k)?;
                Ok(true)
            })
            .map_err(|e| err(py, e))?;
        if found {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.get(py, key)?.is_some())
    }

    /// Iterates over the keys, in key order.
    fn __iter__(&self, py: Python<'_>) -> PyResult<ScanIterator> {
        let db = self.db(py)?;
        let it = py
            .allow_threads(|| db.iter(None, None))
            .map_err(|e| err(py, e))?;
        Ok(ScanIterator::new(it, true))
    }

    /// scan(start=None, end=None) -> iterator of (key, value)
    ///
    /// The records with start <= key < end (None: unbounded), in key order,
    /// as of the moment scan() was called.
    #[pyo3(signature = (start = None, end = None))]
    fn scan(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<ScanIterator> {
        let db = self.db(py)?;
        let s = opt_bytes_arg(start, "start")?;
        let e = opt_bytes_arg(end, "end")?;
        let it = py
            .allow_threads(|| db.iter(s.as_deref(), e.as_deref()))
            .map_err(|e| err(py, e))?;
        Ok(ScanIterator::new(it, false))
    }

    /// A consistent read view: its get() and scan() see the database as it
    /// is now. A context manager; release() frees it early.
    fn snapshot(&self, py: Python<'_>) -> PyResult<Snapshot> {
        let db = self.db(py)?;
        Ok(Snapshot {
            snap: Mutex::new(Some(db.snapshot())),
        })
    }

    /// write_batch(sync=False) -> WriteBatch
    ///
    /// A batch of puts and deletes applied atomically. As a context manager
    /// it commits on a normal exit and discards everything on an exception.
    #[pyo3(signature = (sync = false))]
    fn write_batch(slf: Bound<'_, Self>, sync: bool) -> WriteBatch {
        WriteBatch {
            db: slf.unbind(),
            batch: Mutex::new(Some(strata::WriteBatch::new())),
            sync,
        }
    }

    /// create_index(name, field, type, strategy="next", **params)
    ///
    /// Creates a secondary index on JSON field `field` (a path such as
    /// "user_id" or "place.bbox") of type "i64", "f64", "string", "point" or
    /// "rect", with strategy "next" (default), "memory", "embedded",
    /// "composite", "deli", "posting-eager", "posting-lazy", "filter" or
    /// "perseid" (the list is `strata.STRATEGIES`) and its parameters (e.g.
    /// delta="auto" for next, maintain="eager" for filter). Builds it over the existing
    /// records before returning. ValueError for an unknown type, strategy or
    /// parameter, or a name in use.
    #[pyo3(signature = (name, field, r#type, strategy = "next", **params))]
    fn create_index(
        &self,
        py: Python<'_>,
        name: &str,
        field: &str,
        r#type: &str,
        strategy: &str,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let db = self.db(py)?;
        let ty = KeyType::parse(r#type).map_err(|e| err(py, e))?;
        let mut spec = IndexSpec::field(name, field, ty).strategy(strategy);
        if let Some(p) = params {
            for (k, v) in p.iter() {
                spec = spec.param(&k.extract::<String>()?, &param_text(&v)?);
            }
        }
        py.allow_threads(|| db.create_index(spec))
            .map_err(|e| err(py, e))?;
        lock(&self.types).insert(name.to_string(), ty);
        Ok(())
    }

    /// Removes index `name` (strata.NotFoundError, a KeyError, if there is
    /// none).
    fn drop_index(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let db = self.db(py)?;
        let r = py.allow_threads(|| db.drop_index(name));
        lock(&self.types).remove(name);
        r.map_err(|e| err(py, e))
    }

    /// The indexes, as a list of dicts: name, field, type, strategy, params,
    /// state ("building" or "ready"), id and counters (a dict).
    fn indexes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let db = self.db(py)?;
        let infos = py.allow_threads(|| db.indexes());
        let out = PyList::empty(py);
        for i in infos {
            let d = PyDict::new(py);
            d.set_item("name", &i.spec.name)?;
            let field = match &i.spec.extractor {
                Extractor::Field(p) => p.clone(),
                Extractor::Custom(n) => format!("fn:{n}"),
            };
            d.set_item("field", field)?;
            d.set_item("type", i.spec.key_type.as_str())?;
            d.set_item("strategy", &i.spec.strategy)?;
            let params = PyDict::new(py);
            for (k, v) in &i.spec.params {
                params.set_item(k, v)?;
            }
            d.set_item("params", params)?;
            d.set_item(
                "state",
                match i.state {
                    IndexState::Building => "building",
                    IndexState::Ready => "ready",
                },
            )?;
            d.set_item("id", i.id)?;
            d.set_item("counters", to_py(py, &i.stats)?)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// query(index, *, eq=None, range=None, within=None, limit=None, keys_only=False, raw=False, threads=None)
    ///
    /// The live records whose attribute matches, newest first, as a list of
    /// (key, value) with value the record parsed from JSON (None with
    /// keys_only=True). Give exactly one predicate: eq (a value of the
    /// index's type), range ((lo, hi), inclusive, scalar indexes) or within
    /// ((x1, y1, x2, y2), point and rect indexes). limit keeps the most
    /// recent matches. raw=True returns each value as the stored bytes
    /// instead of parsing it (a value that is not JSON is returned as bytes
    /// anyway). threads: how many threads read the records of a large
    /// query (NEXT and perseid; default: up to 4, one for small queries;
    /// 1: the calling thread alone). ValueError for a bad predicate or
    /// threads < 1.
    #[pyo3(signature = (index, *, eq = None, range = None, within = None, limit = None, keys_only = false, raw = false, threads = None))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        index: &str,
        eq: Option<&Bound<'py, PyAny>>,
        range: Option<&Bound<'py, PyAny>>,
        within: Option<&Bound<'py, PyAny>>,
        limit: Option<i64>,
        keys_only: bool,
        raw: bool,
        threads: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let db = self.db(py)?;
        let given = [eq, range, within].iter().filter(|p| p.is_some()).count();
        if given != 1 {
            return Err(invalid(
                py,
                format!("give exactly one of eq, range or within (got {given})"),
            ));
        }
        let ty = self.key_type(py, &db, index)?;
        let pred = if let Some(v) = eq {
            Predicate::Eq(index_value(py, ty, v, "eq")?)
        } else if let Some(r) = range {
            if ty.is_spatial() {
                return Err(invalid(
                    py,
                    "range queries need a scalar index; use within for spatial",
                ));
            }
            let pair: Vec<Bound<'py, PyAny>> = if r.is_instance_of::<PyString>() {
                Vec::new()
            } else {
                r.extract().unwrap_or_default()
            };
            let [lo, hi] = pair.as_slice() else {
                return Err(invalid(py, "range must be a (lo, hi) pair"));
            };
            Predicate::Range(
                index_value(py, ty, lo, "range")?,
                index_value(py, ty, hi, "range")?,
            )
        } else if let Some(w) = within {
            let c: Vec<f64> = if w.is_instance_of::<PyString>() {
                Vec::new()
            } else {
                w.extract().unwrap_or_default()
            };
            let [x1, y1, x2, y2] = c.as_slice() else {
                return Err(invalid(
                    py,
                    "within must be an (x1, y1, x2, y2) tuple of numbers",
                ));
            };
            Predicate::Within([*x1, *y1, *x2, *y2])
        } else {
            return Err(invalid(py, "give one of eq, range or within"));
        };
        pred.check(ty).map_err(|e| err(py, e))?;
        let limit = match limit {
            None => None,
            Some(k) if k >= 0 => Some(k as usize),
            Some(_) => return Err(invalid(py, "limit must be >= 0")),
        };
        let parallelism = match threads {
            None => None,
            Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            Some(_) => return Err(invalid(py, "threads must be >= 1")),
        };
        let opts = QueryOptions {
            limit,
            keys_only,
            parallelism,
        };
        let hits = py
            .allow_threads(|| db.query(index, &pred, opts))
            .map_err(|e| err(py, e))?;
        let mut decoder = json::Decoder::new(py);
        // Parsed records are thousands of new containers: the cyclic
        // collector would run many times over them while they are built
        // and cannot free any of them.
        let _paused = (!raw && !keys_only && hits.len() > 64)
            .then(|| GcPause::new(py))
            .transpose()?;
        let mut rows = Vec::with_capacity(hits.len());
        for h in &hits {
            let k = PyBytes::new(py, h.key);
            let (v, atomic) = match h.value {
                Some(v) if raw => (PyBytes::new(py, v).into_any(), true),
                Some(v) if !keys_only => match decoder.decode(v) {
                    Some(obj) => (obj, false),
                    None => (PyBytes::new(py, v).into_any(), true),
                },
                _ => (py.None().into_bound(py), true),
            };
            let row = PyTuple::new(py, [k.into_any(), v])?;
            if atomic {
                untrack_atomic_pair(&row);
            }
            rows.push(row);
        }
        // Built at its final size: no reallocation while it fills.
        PyList::new(py, rows)
    }

    /// load(path, key_field, format="jsonl", batch=1000, skip_bad=False) -> int
    ///
    /// Loads a file keyed by the string or number field `key_field`, in
    /// atomic batches of `batch` records, then flushes; returns the number
    /// of records. `format` is "jsonl" (one JSON object a line, stored as
    /// written) or "csv" (RFC 4180 with a header row; cells that are 64-bit
    /// integers or finite floats become numbers). A later record with the
    /// same key replaces an earlier one. A bad record raises ValueError
    /// naming its line (records before it stay loaded) unless `skip_bad`;
    /// strata.IOError if the file cannot be read.
    #[pyo3(signature = (path, key_field, format = "jsonl", batch = 1000, skip_bad = false))]
    fn load(
        &self,
        py: Python<'_>,
        path: PathBuf,
        key_field: &str,
        format: &str,
        batch: usize,
        skip_bad: bool,
    ) -> PyResult<u64> {
        let db = self.db(py)?;
        let format = strata::load::Format::parse(format).map_err(|e| err(py, e))?;
        if batch == 0 {
            return Err(invalid(py, "batch must be >= 1"));
        }
        let opts = strata::load::LoadOptions::new(key_field)
            .format(format)
            .batch(batch)
            .skip_bad(skip_bad);
        py.allow_threads(|| strata::load::load_file(&db, &path, &opts, &mut |_| {}))
            .map(|l| l.records)
            .map_err(|e| err(py, e))
    }

    /// Reads every record (checksums of every block of the primary data)
    /// and compares every index with a full scan. Returns True, or raises
    /// strata.CorruptionError naming what does not match.
    fn check(&self, py: Python<'_>) -> PyResult<bool> {
        let db = self.db(py)?;
        let bad = py
            .allow_threads(|| -> strata::Result<Vec<String>> {
                let snap = db.snapshot();
                for kv in snap.iter(None, None)? {
                    kv?;
                }
                drop(snap);
                let mut bad = Vec::new();
                for i in db.indexes() {
                    let c = db.check_index(&i.spec.name)?;
                    if !c.ok() {
                        bad.push(format!(
                            "index {:?}: expected {} records, found {}, missing {:?}, wrong {:?}",
                            c.index,
                            c.expected,
                            c.found,
                            &c.missing[..c.missing.len().min(5)],
                            &c.extra[..c.extra.len().min(5)]
                        ));
                    }
                }
                Ok(bad)
            })
            .map_err(|e| err(py, e))?;
        if bad.is_empty() {
            Ok(true)
        } else {
            Err(raise(py, ErrKind::Corruption, bad.join("; ")))
        }
    }

    /// Engine statistics as a dict: io counters, levels, memtable and cache
    /// bytes, table bytes, last_sequence, write_amplification.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let db = self.db(py)?;
        let s = py.allow_threads(|| db.stats());
        to_py(py, &s)
    }

    /// Writes the memtable to a table (and waits for it).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.db(py)?;
        py.allow_threads(|| db.flush()).map_err(|e| err(py, e))
    }

    /// Flushes and compacts the whole key range into one level (and the
    /// stand-alone indexes' trees likewise).
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.db(py)?;
        py.allow_threads(|| db.compact_range(None, None))
            .map_err(|e| err(py, e))
    }
}

// -------------------------------------------------------------- Snapshot

/// A consistent read view of a database (Db.snapshot()).
#[pyclass(module = "strata._strata", frozen)]
pub struct Snapshot {
    snap: Mutex<Option<strata::Snapshot>>,
}

impl Snapshot {
    fn snap(&self, py: Python<'_>) -> PyResult<strata::Snapshot> {
        lock(&self.snap)
            .as_ref()
            .cloned()
            .ok_or_else(|| closed(py, "snapshot"))
    }
}

#[pymethods]
impl Snapshot {
    /// The value of `key` at the snapshot, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let s = self.snap(py)?;
        let k = bytes_arg(key, "key")?;
        let v = py.allow_threads(|| s.get(&k)).map_err(|e| err(py, e))?;
        Ok(v.map(|v| PyBytes::new(py, &v)))
    }

    /// Records with start <= key < end at the snapshot, in key order.
    #[pyo3(signature = (start = None, end = None))]
    fn scan(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<ScanIterator> {
        let snap = self.snap(py)?;
        let s = opt_bytes_arg(start, "start")?;
        let e = opt_bytes_arg(end, "end")?;
        let it = py
            .allow_threads(|| snap.iter(s.as_deref(), e.as_deref()))
            .map_err(|e| err(py, e))?;
        Ok(ScanIterator::new(it, false))
    }

    /// The sequence number the snapshot reads at.
    #[getter]
    fn sequence(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.snap(py)?.sequence())
    }

    /// Releases the snapshot (compaction may then drop what only it saw).
    fn release(&self) {
        lock(&self.snap).take();
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.release();
        false
    }
}

// ------------------------------------------------------------ WriteBatch

/// Puts and deletes applied atomically (Db.write_batch()).
#[pyclass(module = "strata._strata", frozen)]
pub struct WriteBatch {
    db: Py<Db>,
    batch: Mutex<Option<strata::WriteBatch>>,
    sync: bool,
}

impl WriteBatch {
    fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut strata::WriteBatch) -> R) -> PyResult<R> {
        match lock(&self.batch).as_mut() {
            Some(b) => Ok(f(b)),
            None => Err(closed(py, "write batch (already committed or discarded)")),
        }
    }
}

#[pymethods]
impl WriteBatch {
    /// Adds a put of `value` under `key`.
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let k = bytes_arg(key, "key")?;
        let v = bytes_arg(value, "value")?;
        self.with(py, |b| {
            b.put(&k, &v);
        })
    }

    /// Adds a delete of `key`.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = bytes_arg(key, "key")?;
        self.with(py, |b| {
            b.delete(&k);
        })
    }

    /// Applies the batch atomically; the batch cannot be used afterwards.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let batch = lock(&self.batch)
            .take()
            .ok_or_else(|| closed(py, "write batch (already committed or discarded)"))?;
        let db = self.db.get().db(py)?;
        let sync = self.sync;
        py.allow_threads(move || db.write(batch, write_opts(sync)))
            .map_err(|e| err(py, e))
    }

    /// Drops the batch without applying anything.
    fn discard(&self) {
        lock(&self.batch).take();
    }

    fn __len__(&self) -> usize {
        lock(&self.batch).as_ref().map_or(0, |b| b.len())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.discard();
        } else if lock(&self.batch).is_some() {
            self.commit(py)?;
        }
        Ok(false)
    }
}

// ---------------------------------------------------------- ScanIterator

/// Records fetched per release of the GIL.
const SCAN_CHUNK: usize = 256;

struct ScanState {
    it: Option<DbIterator>,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
}

/// An iterator of (key, value) pairs (or keys, for `iter(db)`).
#[pyclass(module = "strata._strata", frozen)]
pub struct ScanIterator {
    state: Mutex<ScanState>,
    keys_only: bool,
}

impl ScanIterator {
    fn new(it: DbIterator, keys_only: bool) -> ScanIterator {
        ScanIterator {
            state: Mutex::new(ScanState {
                it: Some(it),
                buf: VecDeque::new(),
            }),
            keys_only,
        }
    }

    /// The next record: from the buffer, else a chunk read with the GIL
    /// released.
    fn next_record(&self, py: Python<'_>) -> PyResult<Option<(Vec<u8>, Vec<u8>)>> {
        if let Some(r) = lock(&self.state).buf.pop_front() {
            return Ok(Some(r));
        }
        py.allow_threads(|| -> strata::Result<Option<(Vec<u8>, Vec<u8>)>> {
            let mut st = lock(&self.state);
            let ScanState { it, buf } = &mut *st;
            if buf.is_empty() {
                if let Some(i) = it.as_mut() {
                    for r in i.by_ref().take(SCAN_CHUNK) {
                        buf.push_back(r?);
                    }
                    if buf.len() < SCAN_CHUNK {
                        *it = None;
                    }
                }
            }
            Ok(buf.pop_front())
        })
        .map_err(|e| {
            lock(&self.state).it = None;
            err(py, e)
        })
    }
}

#[pymethods]
impl ScanIterator {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some((k, v)) = self.next_record(py)? else {
            return Ok(None);
        };
        let k = PyBytes::new(py, &k).into_any();
        if self.keys_only {
            return Ok(Some(k));
        }
        let v = PyBytes::new(py, &v).into_any();
        Ok(Some(PyTuple::new(py, [k, v])?.into_any()))
    }
}

// ---------------------------------------------------------------- module

/// The native part of the `strata` package (import `strata` instead).
#[pymodule]
fn _strata(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_class::<Db>()?;
    m.add_class::<Snapshot>()?;
    m.add_class::<WriteBatch>()?;
    m.add_class::<ScanIterator>()?;
    let strategies: Vec<&str> = strata::StrategyKind::ALL.iter().map(|s| s.name()).collect();
    m.add("STRATEGIES", strategies)?;
    m.add("TYPES", ["i64", "f64", "string", "point", "rect"])?;
    Ok(())
}

/// Removes a result tuple whose items are all atomic (bytes or None) from the
/// cyclic garbage collector, as CPython does itself at the first collection
/// that sees it (`_PyTuple_MaybeUntrack`). Callgrind showed the collections
/// that thousands of tracked result tuples trigger as the largest part of
/// the binding's per-result cost (`python/bench/README.md`).
fn untrack_atomic_pair(t: &Bound<'_, PyTuple>) {
    // SAFETY: `t` is a live tuple (we hold a strong reference), and untracking
    // an object is allowed whether or not it is tracked (CPython checks).
    // Invariant: its items are bytes or None, which reference no objects, so
    // no reference cycle can pass through the tuple and the collector never
    // needs to see it.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(t.as_ptr().cast()) }
}

/// Pauses Python's cyclic garbage collector while it lives (if it was
/// enabled), restoring it on drop, also on an early return or a panic.
/// Only held with the GIL, so no other thread runs Python code meanwhile.
struct GcPause<'py> {
    gc: Option<Bound<'py, PyModule>>,
}

impl<'py> GcPause<'py> {
    fn new(py: Python<'py>) -> PyResult<GcPause<'py>> {
        let gc = py.import("gc")?;
        if gc.call_method0("isenabled")?.is_truthy()? {
            gc.call_method0("disable")?;
            Ok(GcPause { gc: Some(gc) })
        } else {
            Ok(GcPause { gc: None })
        }
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = &self.gc {
            // Re-enabling cannot fail short of interpreter shutdown; an
            // error then is written as unraisable rather than lost.
            if let Err(e) = gc.call_method0("enable") {
                e.write_unraisable(gc.py(), None);
            }
        }
    }
}
